"""A small kopf operator, run by tests/e2e/clients.rs as
  kopf run --standalone -n NS tests/clients/kopf_operator.py
with KUBECONFIG naming a workspace context. The test checks what it did with kubectl.

For each Widget (clients.flotilla.test/v1, namespaced, with a status subresource):
- create: makes the ConfigMap `<name>-child`, adopted (ownerReferences to the Widget,
  its namespace and labels), with data.size = spec.size; posts an Event `ChildCreated`;
  writes status.phase=Created and status.observedSize; the handler's return value lands
  in status.create_widget (kopf's convention).
- update of spec.size: patches the child's data.size; status.phase=Updated and
  status.observedSize.
- delete: kopf holds its finalizer until this handler has run; it writes the ConfigMap
  `<name>-tombstone` (not owned) with the last size. The adopted child goes by the
  control plane's garbage collector, not by this handler.
"""

import logging

import kopf
import kubernetes
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "clients.flotilla.test", "v1", "widgets"
FINALIZER = "clients.flotilla.test/kopf-cleanup"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, logger, **_):
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.INFO
    # Short server-side watch timeouts make kopf reconnect during the test, which is
    # exercised too; the client timeout is above them.
    settings.watching.server_timeout = 20
    settings.watching.client_timeout = 30
    settings.networking.request_timeout = 20
    kubernetes.config.load_kube_config()
    logger.info("configured: finalizer %s", FINALIZER)


def core():
    return kubernetes.client.CoreV1Api()


@kopf.on.create(GROUP, VERSION, PLURAL)
def create_widget(body, spec, name, namespace, patch, logger, **_):
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-child"},
        "data": {"size": str(spec.get("size"))},
    }
    kopf.adopt(child)
    try:
        core().create_namespaced_config_map(namespace, child)
    except ApiException as e:
        if e.status != 409:
            raise
        # A retry after a partial first attempt: the child exists, make it right.
        core().replace_namespaced_config_map(child["metadata"]["name"], namespace, child)
    kopf.info(body, reason="ChildCreated", message=f"made ConfigMap {name}-child")
    patch.status["phase"] = "Created"
    patch.status["observedSize"] = spec.get("size")
    logger.info("created child %s-child", name)
    return {"child": f"{name}-child"}


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.size")
def resize_widget(old, new, name, namespace, patch, logger, **_):
    core().patch_namespaced_config_map(f"{name}-child", namespace, {"data": {"size": str(new)}})
    patch.status["phase"] = "Updated"
    patch.status["observedSize"] = new
    logger.info("resized %s from %s to %s", name, old, new)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def delete_widget(spec, name, namespace, logger, **_):
    tomb = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-tombstone"},
        "data": {"lastSize": str(spec.get("size"))},
    }
    try:
        core().create_namespaced_config_map(namespace, tomb)
    except ApiException as e:
        if e.status != 409:
            raise
    logger.info("tombstone written for %s", name)
