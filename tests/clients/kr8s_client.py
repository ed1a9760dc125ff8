"""kr8s (asyncio) against a Flotilla workspace: connect, discovery, get, list, create,
patch, watch, wait, a custom resource, and delete.

Run by tests/e2e/clients.rs with the kr8s venv:
  python kr8s_client.py --kubeconfig K --context WS --namespace NS
"""

import argparse
import asyncio

import kr8s
import kr8s.asyncio
from kr8s.asyncio.objects import ConfigMap, CustomResourceDefinition, Deployment, Namespace, new_class

from harness import Scenario, expect

ap = argparse.ArgumentParser()
ap.add_argument("--kubeconfig", required=True)
ap.add_argument("--context", required=True)
ap.add_argument("--namespace", required=True)
args = ap.parse_args()
NS = args.namespace
s = Scenario(f"kr8s {kr8s.__version__}")
api = None


def need_api():
    expect(api is not None, "kr8s.asyncio.api() connected (see the first check)")
    return api


async def connect():
    global api
    # kr8s checks the server's version (GET /version/) before it hands out the client.
    api = await kr8s.asyncio.api(kubeconfig=args.kubeconfig, context=args.context)
    v = await api.version()
    expect(v.get("gitVersion") and v.get("major"), "a version with gitVersion and major", v)


async def discovery():
    resources = await need_api().api_resources()
    names = {(r["name"], r["version"]) for r in resources}
    for want in [("configmaps", "v1"), ("deployments", "apps/v1"), ("customresourcedefinitions", "apiextensions.k8s.io/v1")]:
        expect(want in names, f"api_resources has {want}", sorted(names))
    kind = await api.lookup_kind("deploy")
    expect(kind == ("deployment.apps/v1", "deployments", True), "lookup_kind('deploy') by short name", kind)


async def create_get_list_patch():
    await Namespace({"metadata": {"name": NS}}, api=need_api()).create()
    for i in range(3):
        c = ConfigMap({"metadata": {"name": f"cm-{i}", "namespace": NS, "labels": {"set": "k", "i": str(i)}}, "data": {"i": str(i)}}, api=api)
        await c.create()
    got = await ConfigMap.get("cm-1", namespace=NS, api=api)
    expect(got.data == {"i": "1"} and got.metadata.uid, "get by name", got.raw)
    listed = sorted([c.name async for c in api.get("configmaps", namespace=NS, label_selector={"set": "k"})])
    expect(listed == ["cm-0", "cm-1", "cm-2"], "list by label selector", listed)
    one = [c.name async for c in api.get("configmaps", namespace=NS, field_selector="metadata.name=cm-2")]
    expect(one == ["cm-2"], "list by field selector", one)
    await got.patch({"data": {"i": "one", "extra": "x"}})
    expect(got.data == {"i": "one", "extra": "x"}, "a merge patch updates the object in place", got.raw)
    await got.patch([{"op": "remove", "path": "/data/extra"}], type="json")
    await got.refresh()
    expect(got.data == {"i": "one"}, "a JSON patch removed a key", got.raw)
    await got.label({"touched": "yes"})
    again = await ConfigMap.get(label_selector={"touched": "yes"}, namespace=NS, api=api)
    expect(again.name == "cm-1", "get by the new label", again.raw)
    expect(await got.exists(), "exists() is true for a live object")


async def watch():
    # The list's resourceVersion, read directly: every event after it must be delivered.
    async with need_api().call_api("GET", version="v1", namespace=NS, url="configmaps", params={"labelSelector": "w=yes"}) as r:
        rv = r.json()["metadata"]["resourceVersion"]

    async def writer():
        c = ConfigMap({"metadata": {"name": "watched", "namespace": NS, "labels": {"w": "yes"}}, "data": {"v": "1"}}, api=api)
        await c.create()
        await c.patch({"data": {"v": "2"}})
        await c.delete()

    task = asyncio.create_task(writer())
    seen = []
    try:
        async with asyncio.timeout(15):
            async for kind, obj in api.watch("configmaps", namespace=NS, label_selector={"w": "yes"}, since=rv):
                seen.append((kind, obj.name, obj.raw.get("data", {}).get("v")))
                if kind == "DELETED":
                    break
    except TimeoutError:
        pass
    await task
    expect([k for k, _, _ in seen] == ["ADDED", "MODIFIED", "DELETED"] and seen[1][2] == "2", "the watch saw ADDED, MODIFIED, DELETED", seen)


async def deployment_scale():
    d = Deployment(
        {
            "metadata": {"name": "web", "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}},
            },
        },
        api=need_api(),
    )
    await d.create()
    async with asyncio.timeout(10):
        await d.scale(3)
    got = await Deployment.get("web", namespace=NS, api=api)
    expect(got.spec.replicas == 3 and got.metadata.generation == 2, "scaled to 3, generation 2", got.raw)


async def custom_resource():
    crd = CustomResourceDefinition(
        {
            "metadata": {"name": "gizmos.clients.flotilla.test"},
            "spec": {
                "group": "clients.flotilla.test",
                "scope": "Namespaced",
                "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        },
        api=need_api(),
    )
    await crd.create()
    # wait() reads the object, then watches it until the condition holds.
    await crd.wait("condition=Established", timeout=10)
    Gizmo = new_class("Gizmo", "clients.flotilla.test/v1", namespaced=True)
    g = Gizmo({"metadata": {"name": "g1", "namespace": NS}, "spec": {"size": 1}}, api=api)
    await g.create()
    await g.patch({"status": {"phase": "Ready"}}, subresource="status")
    await g.refresh()
    expect(g.raw.get("status") == {"phase": "Ready"} and g.spec.size == 1, "status written through the subresource", g.raw)
    names = [x.name async for x in api.get(Gizmo, namespace=NS)]
    expect(names == ["g1"], "the custom resource lists", names)
    await g.delete()
    await g.wait("delete", timeout=10)
    expect(not await g.exists(), "the custom object is gone after delete")


async def delete_namespace():
    ns = await Namespace.get(NS, api=need_api())
    await ns.delete()
    await ns.wait("delete", timeout=15)
    left = [c.name async for c in api.get("configmaps", namespace=NS)]
    expect(left == [], "nothing is left in the deleted namespace", left)


async def main():
    await s.acheck("kr8s.asyncio.api() connects and reads the version (GET /version/)", connect)
    await s.acheck("discovery: api_resources and lookup_kind", discovery)
    await s.acheck("create, get, list by selectors, merge and JSON patch, label", create_get_list_patch)
    await s.acheck("watch from a resourceVersion sees ADDED, MODIFIED, DELETED", watch)
    await s.acheck("Deployment.scale()", deployment_scale)
    await s.acheck("a CRD, wait for Established, a custom object with its status subresource", custom_resource)
    await s.acheck("delete the namespace and wait until it is gone", delete_namespace)


asyncio.run(main())
s.finish()
