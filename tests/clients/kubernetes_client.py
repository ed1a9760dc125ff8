"""The official Python client (`kubernetes`) against a Flotilla workspace.

Run by tests/e2e/clients.rs with the venv of one pinned release:
  python kubernetes_client.py --kubeconfig K --context WS --namespace NS --expect-version V
Releases before 37 render booleans in query strings with Python's str(), so they send
`watch=True` and `force=True`; 37 sends `watch=true`. Every request's URL is recorded and
the checks that depend on it say which form went over the wire.
"""

import argparse
import json
import threading
import time
from urllib.parse import urlencode

import kubernetes
from kubernetes import client, config, dynamic, watch
from kubernetes.client import rest
from kubernetes.client.rest import ApiException

from harness import Scenario, expect, show, wait_for

ap = argparse.ArgumentParser()
ap.add_argument("--kubeconfig", required=True)
ap.add_argument("--context", required=True)
ap.add_argument("--namespace", required=True)
ap.add_argument("--expect-version", required=True)
ap.add_argument("--forbidden-url", help="a workspace URL this context's token must not reach")
args = ap.parse_args()

# Every request the client sends, as "METHOD URL?QUERY", exactly as rendered on the wire.
SENT = []
_request = rest.RESTClientObject.request


def _record(self, method, url, *a, **kw):
    q = kw.get("query_params")
    SENT.append(f"{method} {url}" + (f"?{urlencode(q)}" if q else ""))
    return _request(self, method, url, *a, **kw)


rest.RESTClientObject.request = _record

api = config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
core = client.CoreV1Api(api)
apps = client.AppsV1Api(api)
NS = args.namespace
MAJOR = int(kubernetes.__version__.split(".")[0])
PRE_37 = MAJOR < 37
s = Scenario(f"kubernetes {kubernetes.__version__} against {api.configuration.host}")


def sent_with(fragment):
    return [u for u in SENT if fragment in u]


def status_of(e):
    """(code, reason, body) of an ApiException's metav1.Status body."""
    try:
        body = json.loads(e.body)
    except (TypeError, ValueError):
        body = {}
    return e.status, body.get("reason"), body


def api_error(fn):
    """The ApiException `fn` raises; fails the check if it raises none."""
    try:
        got = fn()
    except ApiException as e:
        return e
    expect(False, "expected an API error, got a success", got)


_dyn = []


def dyn():
    """One DynamicClient (it reads discovery when made)."""
    if not _dyn:
        _dyn.append(dynamic.DynamicClient(api))
    return _dyn[0]


def cm(name, data=None, labels=None):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data or {})


@s.check("the installed client is the pinned release")
def _():
    expect(kubernetes.__version__ == args.expect_version, f"kubernetes {args.expect_version} installed", kubernetes.__version__)


@s.check("VersionApi().get_code() (GET /version/)")
def _():
    v = client.VersionApi(api).get_code()
    expect(v.git_version and v.major, "a version with gitVersion and major", v)
    expect(sent_with("/version/"), "the client asks for /version/ with its trailing slash", SENT[-3:])


@s.check("discovery: core versions, API groups, core resources")
def _():
    versions = client.CoreApi(api).get_api_versions()
    expect("v1" in versions.versions, "/api lists v1", versions)
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    for g in ["apps", "apiextensions.k8s.io", "coordination.k8s.io", "scheduling.flotilla.io"]:
        expect(g in groups, f"/apis lists {g}", sorted(groups))
    res = {r.name: r for r in core.get_api_resources().resources}
    expect("configmaps" in res and res["configmaps"].namespaced, "configmaps is a namespaced core resource", sorted(res))
    expect("watch" in res["configmaps"].verbs, "configmaps can be watched", res["configmaps"].verbs)


@s.check("create a namespace")
def _():
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    got = core.read_namespace(NS)
    expect(got.status.phase == "Active", "the namespace is Active", got.status)


@s.check("ConfigMap create, get, replace, errors with Status reasons")
def _():
    made = core.create_namespaced_config_map(NS, cm("crud", {"a": "1"}))
    expect(made.metadata.uid and made.metadata.resource_version, "uid and resourceVersion set", made.metadata)
    got = core.read_namespaced_config_map("crud", NS)
    expect(got.data == {"a": "1"}, "data as created", got.data)

    e = api_error(lambda: core.create_namespaced_config_map(NS, cm("crud")))
    code, reason, body = status_of(e)
    expect((code, reason) == (409, "AlreadyExists"), "a second create is 409 AlreadyExists", body)

    e = api_error(lambda: core.read_namespaced_config_map("absent", NS))
    code, reason, body = status_of(e)
    expect((code, reason) == (404, "NotFound"), "a missing object is 404 NotFound", body)

    got.data["b"] = "2"
    replaced = core.replace_namespaced_config_map("crud", NS, got)
    expect(replaced.data == {"a": "1", "b": "2"}, "replace wrote data", replaced.data)
    expect(replaced.metadata.resource_version != got.metadata.resource_version, "replace moved resourceVersion", replaced.metadata)

    got.data["c"] = "3"  # still the old resourceVersion
    e = api_error(lambda: core.replace_namespaced_config_map("crud", NS, got))
    code, reason, body = status_of(e)
    expect((code, reason) == (409, "Conflict"), "a replace with a stale resourceVersion is 409 Conflict", body)


@s.check("list with labelSelector, fieldSelector, limit and continue")
def _():
    for i in range(5):
        core.create_namespaced_config_map(NS, cm(f"page-{i}", {"i": str(i)}, {"set": "paged", "parity": str(i % 2)}))
    odd = core.list_namespaced_config_map(NS, label_selector="set=paged,parity=1")
    expect(sorted(c.metadata.name for c in odd.items) == ["page-1", "page-3"], "labelSelector picks the odd ones", [c.metadata.name for c in odd.items])
    one = core.list_namespaced_config_map(NS, field_selector="metadata.name=page-2")
    expect([c.metadata.name for c in one.items] == ["page-2"], "fieldSelector metadata.name", [c.metadata.name for c in one.items])
    names, cont, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map(NS, label_selector="set=paged", limit=2, _continue=cont)
        expect(page.metadata.resource_version, "a list carries resourceVersion", page.metadata)
        expect(len(page.items) <= 2, "a page holds at most limit items", len(page.items))
        names += [c.metadata.name for c in page.items]
        pages += 1
        cont = page.metadata._continue
        if not cont:
            break
        expect(pages < 10, "paging ends", names)
    expect(sorted(names) == [f"page-{i}" for i in range(5)] and pages == 3, "5 items over 3 pages, each once", (pages, names))


@s.check("patches: strategic merge, merge, JSON")
def _():
    core.create_namespaced_config_map(NS, cm("patched", {"keep": "1", "drop": "2"}, {"x": "1"}))
    # A dict body goes as strategic merge patch for a built-in type.
    p = core.patch_namespaced_config_map("patched", NS, {"metadata": {"labels": {"y": "2"}}, "data": {"new": "3"}})
    expect(p.metadata.labels == {"x": "1", "y": "2"} and p.data == {"keep": "1", "drop": "2", "new": "3"}, "strategic merge patch merged", p)
    expect(sent_with("PATCH"), "a PATCH was sent", SENT[-2:])
    # The generated API picks the patch type from the body; the other types go through
    # the dynamic client (`_content_type` exists only from 37 on).
    p = dyn().resources.get(api_version="v1", kind="ConfigMap").patch(
        name="patched", namespace=NS, body={"data": {"drop": None}}, content_type="application/merge-patch+json"
    )
    expect(p.data.to_dict() == {"keep": "1", "new": "3"}, "merge patch with null removed a key", p.to_dict())
    ops = [
        {"op": "add", "path": "/data/added", "value": "4"},
        {"op": "replace", "path": "/data/keep", "value": "one"},
        {"op": "remove", "path": "/data/new"},
        {"op": "test", "path": "/metadata/labels/x", "value": "1"},
    ]
    p = core.patch_namespaced_config_map("patched", NS, ops)
    expect(p.data == {"keep": "one", "added": "4"}, "JSON patch add/replace/remove applied", p.data)
    e = api_error(lambda: core.patch_namespaced_config_map("patched", NS, [{"op": "test", "path": "/data/keep", "value": "nope"}]))
    expect(e.status == 422, "a failed JSON patch test op is 422", (e.status, e.body))


@s.check("JSON patch replace of an absent field is accepted, as kube-apiserver does")
def _():
    core.create_namespaced_config_map(NS, cm("replace-absent", {"a": "1"}))
    p = core.patch_namespaced_config_map("replace-absent", NS, [{"op": "replace", "path": "/data/b", "value": "2"}])
    expect(p.data == {"a": "1", "b": "2"}, "replace on an absent key added it", p.data)


@s.check("server-side apply: field managers, conflict, force")
def _():
    # The dynamic client's server_side_apply, which every release has, sends
    # application/apply-patch+yaml with fieldManager and force.
    cms = dyn().resources.get(api_version="v1", kind="ConfigMap")

    def apply(manager, data, force=None):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": data}
        return cms.server_side_apply(body=body, namespace=NS, field_manager=manager, force_conflicts=force).to_dict()

    def managers(obj):
        return {m["manager"]: m.get("fieldsV1") for m in obj["metadata"].get("managedFields") or []}

    made = apply("manager-a", {"k": "a", "only-a": "1"})
    expect(made["data"] == {"k": "a", "only-a": "1"}, "apply created the object", made)
    expect("manager-a" in managers(made), "managedFields names manager-a", made["metadata"])

    e = api_error(lambda: apply("manager-b", {"k": "b"}))
    code, reason, body = status_of(e)
    causes = [c.get("reason") for c in (body.get("details") or {}).get("causes") or []]
    expect(code == 409 and "FieldManagerConflict" in causes, "a conflicting apply is 409 with FieldManagerConflict", body)

    forced = apply("manager-b", {"k": "b"}, force=True)
    wire = "force=True" if PRE_37 else "force=true"
    expect(sent_with(wire), f"this client sends {wire}", SENT[-2:])
    expect(forced["data"] == {"k": "b", "only-a": "1"}, "a forced apply took the field", forced["data"])
    owned = managers(forced)
    expect("f:k" in show(owned.get("manager-b")), "manager-b now owns data.k", owned)
    expect("f:k" not in show(owned.get("manager-a")) and "f:only-a" in show(owned.get("manager-a")), "manager-a keeps only-a, not k", owned)


@s.check("watch from an earlier resourceVersion sees ADDED, MODIFIED, DELETED in order")
def _():
    rv = core.list_namespaced_config_map(NS, label_selector="watched=yes").metadata.resource_version
    errors = []

    def writer():
        try:
            core.create_namespaced_config_map(NS, cm("watched", {"v": "1"}, {"watched": "yes"}))
            core.patch_namespaced_config_map("watched", NS, {"data": {"v": "2"}})
            core.delete_namespaced_config_map("watched", NS)
        except Exception as e:  # noqa: BLE001 - reported by the check below
            errors.append(e)

    seen = []
    w = watch.Watch()
    # The watch starts from rv, before the writes, so it must replay them whether the
    # writer is quicker than the watch request or not.
    t = threading.Thread(target=writer)
    t.start()
    started = time.monotonic()
    for ev in w.stream(core.list_namespaced_config_map, NS, label_selector="watched=yes", resource_version=rv, timeout_seconds=15, _request_timeout=20):
        seen.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("v")))
        if ev["type"] == "DELETED":
            w.stop()
    t.join(10)
    expect(not errors, "the writer's requests succeeded", [str(e) for e in errors])
    wire = "watch=True" if PRE_37 else "watch=true"
    expect(sent_with(wire), f"this client sends {wire}", [u for u in SENT if "watch" in u][-2:])
    types = [e[0] for e in seen]
    expect(
        types == ["ADDED", "MODIFIED", "DELETED"] and seen[1][2] == "2",
        f"the watch saw the three writes in order (after {time.monotonic() - started:.1f}s)",
        seen,
    )


@s.check("a watch opened before any write delivers events while open")
def _():
    rv = core.list_namespaced_config_map(NS, label_selector="live=yes").metadata.resource_version
    w = watch.Watch()
    seen = []

    def writer():
        # Waits until the watch request has been sent; the events carry a later
        # resourceVersion than rv, so the order of these two is not a race.
        wait_for("the watch request", 10, lambda: (any("live%3Dyes" in u and "watch" in u for u in SENT), SENT[-1:]))
        core.create_namespaced_config_map(NS, cm("live", {"v": "1"}, {"live": "yes"}))

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    for ev in w.stream(core.list_namespaced_config_map, NS, label_selector="live=yes", resource_version=rv, timeout_seconds=10, _request_timeout=15):
        seen.append((ev["type"], ev["object"].metadata.name))
        w.stop()
    t.join(10)
    expect(seen == [("ADDED", "live")], "the open watch got the ADDED event", seen)


@s.check("list with resourceVersionMatch=Exact answers as of that resourceVersion")
def _():
    core.create_namespaced_config_map(NS, cm("exact-1", labels={"exact": "yes"}))
    rv = core.list_namespaced_config_map(NS, label_selector="exact=yes").metadata.resource_version
    core.create_namespaced_config_map(NS, cm("exact-2", labels={"exact": "yes"}))
    try:
        old = core.list_namespaced_config_map(NS, label_selector="exact=yes", resource_version=rv, resource_version_match="Exact")
    except ApiException as e:
        code, reason, body = status_of(e)
        # A revision the server no longer holds is 410 Expired, as with a compacted etcd.
        expect((code, reason) == (410, "Expired"), "either the list at rv or 410 Expired", body)
        return
    names = sorted(c.metadata.name for c in old.items)
    expect(names == ["exact-1"] and old.metadata.resource_version == rv, f"the list as of {rv}: exact-1 only, resourceVersion {rv}", (old.metadata.resource_version, names))


@s.check("Deployment create, scale subresource, generation")
def _():
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}},
        },
    }
    d = apps.create_namespaced_deployment(NS, body)
    expect(d.metadata.generation == 1, "a new Deployment has generation 1", d.metadata)
    sc = apps.read_namespaced_deployment_scale("web", NS)
    expect(sc.spec.replicas == 1, "the scale subresource reads replicas", sc)
    sc = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 3}})
    expect(sc.spec.replicas == 3, "the scale subresource patched replicas", sc)
    d = apps.read_namespaced_deployment("web", NS)
    expect(d.spec.replicas == 3 and d.metadata.generation == 2, "replicas 3 and generation 2", (d.spec.replicas, d.metadata.generation))
    st = apps.read_namespaced_deployment_status("web", NS)
    expect(st.metadata.name == "web", "the status subresource reads", st.metadata)


CRD_GROUP, CRD_PLURAL = "clients.flotilla.test", "gadgets"


@s.check("CRD create, Established, custom objects with status subresource")
def _():
    ext = client.ApiextensionsV1Api(api)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{CRD_PLURAL}.{CRD_GROUP}"},
        "spec": {
            "group": CRD_GROUP,
            "scope": "Namespaced",
            "names": {"plural": CRD_PLURAL, "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
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
    }
    ext.create_custom_resource_definition(crd)

    def established():
        c = ext.read_custom_resource_definition(f"{CRD_PLURAL}.{CRD_GROUP}")
        conds = {x.type: x.status for x in (c.status.conditions or [])} if c.status else {}
        return conds.get("Established") == "True", conds

    wait_for("the CRD to be Established", 10, established)
    co = client.CustomObjectsApi(api)
    obj = {"apiVersion": f"{CRD_GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"size": 1}}
    wait_for(
        "the new resource to be served",
        10,
        lambda: (co.list_namespaced_custom_object(CRD_GROUP, "v1", NS, CRD_PLURAL) is not None, None),
    )
    made = co.create_namespaced_custom_object(CRD_GROUP, "v1", NS, CRD_PLURAL, obj)
    expect(made["metadata"]["generation"] == 1, "a new custom object has generation 1", made["metadata"])
    st = co.patch_namespaced_custom_object_status(CRD_GROUP, "v1", NS, CRD_PLURAL, "g1", {"status": {"phase": "Ready"}})
    expect(st["status"] == {"phase": "Ready"} and st["metadata"]["generation"] == 1, "a status write leaves generation alone", st)
    sp = co.patch_namespaced_custom_object(CRD_GROUP, "v1", NS, CRD_PLURAL, "g1", {"spec": {"size": 2}, "status": {"phase": "Ignored"}})
    expect(sp["spec"] == {"size": 2} and sp["status"] == {"phase": "Ready"}, "a main-resource write ignores status", sp)
    expect(sp["metadata"]["generation"] == 2, "a spec change bumps generation", sp["metadata"])
    items = co.list_namespaced_custom_object(CRD_GROUP, "v1", NS, CRD_PLURAL)["items"]
    expect([i["metadata"]["name"] for i in items] == ["g1"], "the list has g1", items)
    co.delete_namespaced_custom_object(CRD_GROUP, "v1", NS, CRD_PLURAL, "g1")
    e = api_error(lambda: co.get_namespaced_custom_object(CRD_GROUP, "v1", NS, CRD_PLURAL, "g1"))
    expect(e.status == 404, "the deleted custom object is gone", (e.status, e.body))


@s.check("dynamic client: discovery-driven get, create, list")
def _():
    cms = dyn().resources.get(api_version="v1", kind="ConfigMap")
    cms.create(body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dyn"}, "data": {"d": "1"}}, namespace=NS)
    got = cms.get(name="dyn", namespace=NS)
    expect(got.data.d == "1", "the dynamic client read back what it created", got.to_dict())
    deps = dyn().resources.get(api_version="apps/v1", kind="Deployment")
    names = [d.metadata.name for d in deps.get(namespace=NS).items]
    expect(names == ["web"], "the dynamic client lists Deployments", names)


@s.check("ownerReferences: background and foreground deletion remove dependents")
def _():
    for mode in ["Background", "Foreground"]:
        owner = core.create_namespaced_config_map(NS, cm(f"owner-{mode.lower()}"))
        ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name=owner.metadata.name, uid=owner.metadata.uid, block_owner_deletion=True)
        dep = cm(f"dependent-{mode.lower()}")
        dep.metadata.owner_references = [ref]
        core.create_namespaced_config_map(NS, dep)
        core.delete_namespaced_config_map(owner.metadata.name, NS, propagation_policy=mode)

        def gone(name):
            try:
                left = core.read_namespaced_config_map(name, NS)
            except ApiException as e:
                return e.status == 404, e.status
            return False, {"deletionTimestamp": left.metadata.deletion_timestamp, "finalizers": left.metadata.finalizers}

        wait_for(f"the {mode} dependent to be deleted", 10, lambda: gone(dep.metadata.name))
        wait_for(f"the {mode} owner to be deleted", 10, lambda: gone(owner.metadata.name))


@s.check("this context's token is refused by another workspace (403)")
def _():
    if not args.forbidden_url:
        print("     (no --forbidden-url given)")
        return
    other = client.Configuration()
    other.host = args.forbidden_url
    other.ssl_ca_cert = api.configuration.ssl_ca_cert
    other.api_key = dict(api.configuration.api_key)
    other.api_key_prefix = dict(api.configuration.api_key_prefix)
    e = api_error(lambda: client.CoreV1Api(client.ApiClient(other)).list_namespaced_config_map("default"))
    code, reason, body = status_of(e)
    expect((code, reason) == (403, "Forbidden"), "403 Forbidden", body)


@s.check("deleting the namespace removes it and what is in it")
def _():
    core.delete_namespace(NS)

    def gone():
        try:
            n = core.read_namespace(NS)
        except ApiException as e:
            return e.status == 404, e.status
        return False, {"phase": n.status.phase, "deletionTimestamp": n.metadata.deletion_timestamp}

    wait_for("the namespace to be gone", 15, gone)
    left = [c.metadata.name for c in core.list_namespaced_config_map(NS).items]
    expect(left == [], "no ConfigMap is left in the deleted namespace", left)


print(f"requests sent: {len(SENT)}; the boolean query parameters among them:")
for u in sorted({u for u in SENT if "=True" in u or "=true" in u or "=False" in u}):
    print(f"  {u}")
s.finish()
