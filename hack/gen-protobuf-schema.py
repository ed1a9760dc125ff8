#!/usr/bin/env python3
"""Generates apimachinery/src/protobuf/schema.rs, the field table that drives
the Kubernetes protobuf request-body decoder in apimachinery/src/protobuf/mod.rs.

Usage (from the repository root; needs the crates in ~/.cargo/registry and a
kubectl on PATH):

    python3 hack/gen-protobuf-schema.py            # rewrite schema.rs
    python3 hack/gen-protobuf-schema.py --check    # exit 1 if schema.rs is stale

Three sources of facts go into the table:

1. Field numbers and wire types come from the prost sources of the `k8s-pb`
   crate (`#[prost(<type>, optional|repeated|btree_map=..., tag = "N")]`).
2. JSON field names, and whether a field is required, come from the serde
   impls of the `k8s-openapi` crate (`"hostIP" => Field::Key_host_ip`, and a
   field type without `Option<...>`).
3. Whether a scalar field is a Go pointer comes from kubectl itself. Go's
   protobuf marshaller always writes non-pointer scalars (even "", 0, false)
   but writes pointer scalars only when set, while Go's JSON marshaller drops
   zero non-pointer fields tagged `omitempty`. So the decoder must drop a zero
   value of a non-pointer optional field (or `protocol: ""` would block the
   server's defaulting) and keep one of a pointer field (`replicas: 0`,
   `automountServiceAccountToken: false` are meaningful). The script learns
   which is which by serving skeleton objects to kubectl from a throwaway
   HTTP server on 127.0.0.1 and reading the protobuf bodies kubectl sends
   back (`kubectl debug --copy-to` re-sends a whole Pod; `kubectl create`
   sends the simpler kinds, Services, Ingresses, PodDisruptionBudgets, Jobs
   and CronJobs;
   `kubectl autoscale` an autoscaling/v1 HorizontalPodAutoscaler): a scalar
   that kubectl left out of any instance of a message it did send is a
   pointer. Messages kubectl never sends (Lease, DeleteOptions, NetworkPolicy,
   ReplicaSet, autoscaling/v2, status types...) use the GO_POINTER_SCALARS
   list below, taken from the Go type definitions in k8s.io/api and
   k8s.io/apimachinery; so do the pointers kubectl always sets (a Deployment's
   replicas), which the wire cannot tell from non-pointers.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "apimachinery", "src", "protobuf", "schema.rs")
PB_VERSION = "k8s-pb-0.9.0"
OPENAPI_VERSION = "k8s-openapi-0.29.0"
# The Kubernetes version Flotilla serves; k8s-pb carries a few newer fields,
# whose JSON names come from the newer versions in the same crate.
OPENAPI_K8S = "v1_33"

# Top-level kinds the decoder accepts: (apiVersion, kind, proto message).
# apiVersion None means "any": DeleteOptions is registered in every group
# version, so clients send it under the resource's own apiVersion.
ROOTS = [
    ("v1", "Namespace", "api.core.v1.Namespace"),
    ("v1", "ConfigMap", "api.core.v1.ConfigMap"),
    ("v1", "Secret", "api.core.v1.Secret"),
    ("v1", "ServiceAccount", "api.core.v1.ServiceAccount"),
    ("v1", "Event", "api.core.v1.Event"),
    ("v1", "Pod", "api.core.v1.Pod"),
    ("v1", "Service", "api.core.v1.Service"),
    ("apps/v1", "Deployment", "api.apps.v1.Deployment"),
    ("apps/v1", "ReplicaSet", "api.apps.v1.ReplicaSet"),
    ("networking.k8s.io/v1", "Ingress", "api.networking.v1.Ingress"),
    ("networking.k8s.io/v1", "NetworkPolicy", "api.networking.v1.NetworkPolicy"),
    ("policy/v1", "PodDisruptionBudget", "api.policy.v1.PodDisruptionBudget"),
    ("autoscaling/v1", "HorizontalPodAutoscaler", "api.autoscaling.v1.HorizontalPodAutoscaler"),
    ("autoscaling/v2", "HorizontalPodAutoscaler", "api.autoscaling.v2.HorizontalPodAutoscaler"),
    ("coordination.k8s.io/v1", "Lease", "api.coordination.v1.Lease"),
    ("events.k8s.io/v1", "Event", "api.events.v1.Event"),
    ("autoscaling/v1", "Scale", "api.autoscaling.v1.Scale"),
    ("batch/v1", "Job", "api.batch.v1.Job"),
    ("batch/v1", "CronJob", "api.batch.v1.CronJob"),
    (None, "DeleteOptions", "apimachinery.pkg.apis.meta.v1.DeleteOptions"),
]

# Messages with a JSON form of their own rather than an object of fields.
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.runtime.RawExtension": "RawJson",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "RawJson",
}

# Go pointer scalars (`*int32`, `*bool`, `*string`, `*SomeStringType`, ...) in
# messages that the kubectl probe cannot reach, or that kubectl always sets, as
# "message": [jsonName, ...]. From the Go types in k8s.io/api (core/v1,
# apps/v1, coordination/v1, events/v1, autoscaling/v1, autoscaling/v2,
# networking/v1, policy/v1) and k8s.io/apimachinery (meta/v1). A message listed
# here that kubectl does send (ServiceSpec, DeploymentStatus, Container...) is
# checked against the probe: a scalar kubectl left out must be listed, which
# keeps this list honest. Any other reachable message has no pointer scalar
# (Event, ObjectReference, Scale, IPBlock, the conditions...).
GO_POINTER_SCALARS = {
    "apimachinery.pkg.apis.meta.v1.DeleteOptions": [
        "gracePeriodSeconds", "orphanDependents", "propagationPolicy",
        "ignoreStoreReadErrorWithClusterBreakingPotential",
    ],
    "apimachinery.pkg.apis.meta.v1.Preconditions": ["uid", "resourceVersion"],
    "apimachinery.pkg.apis.meta.v1.ObjectMeta": ["deletionGracePeriodSeconds"],
    "api.coordination.v1.LeaseSpec": [
        "holderIdentity", "leaseDurationSeconds", "leaseTransitions", "strategy",
        "preferredHolder",
    ],
    # kubectl create deployment always sets replicas, so the probe sees it.
    "api.apps.v1.DeploymentSpec": ["replicas", "revisionHistoryLimit", "progressDeadlineSeconds"],
    "api.apps.v1.DeploymentStatus": ["terminatingReplicas", "collisionCount"],
    "api.apps.v1.ReplicaSetSpec": ["replicas"],
    "api.apps.v1.ReplicaSetStatus": ["terminatingReplicas"],
    "api.core.v1.ServiceSpec": [
        "ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass",
        "internalTrafficPolicy", "trafficDistribution",
    ],
    "api.core.v1.ServicePort": ["appProtocol"],
    "api.core.v1.ClientIpConfig": ["timeoutSeconds"],
    "api.core.v1.LoadBalancerIngress": ["ipMode"],
    "api.core.v1.PortStatus": ["error"],
    "api.networking.v1.IngressSpec": ["ingressClassName"],
    # Required in JSON too; kubectl create ingress always sets it.
    "api.networking.v1.HttpIngressPath": ["pathType"],
    "api.networking.v1.IngressPortStatus": ["error"],
    "api.networking.v1.NetworkPolicyPort": ["protocol", "endPort"],
    "api.policy.v1.PodDisruptionBudgetSpec": ["unhealthyPodEvictionPolicy"],
    "api.autoscaling.v1.HorizontalPodAutoscalerSpec": ["minReplicas", "targetCPUUtilizationPercentage"],
    "api.autoscaling.v1.HorizontalPodAutoscalerStatus": ["observedGeneration", "currentCPUUtilizationPercentage"],
    "api.autoscaling.v2.HorizontalPodAutoscalerSpec": ["minReplicas"],
    "api.autoscaling.v2.HorizontalPodAutoscalerStatus": ["observedGeneration"],
    "api.autoscaling.v2.HpaScalingRules": ["stabilizationWindowSeconds", "selectPolicy"],
    "api.autoscaling.v2.MetricTarget": ["averageUtilization"],
    "api.autoscaling.v2.MetricValueStatus": ["averageUtilization"],
    "api.core.v1.Container": ["restartPolicy"],
    "api.core.v1.EphemeralContainerCommon": ["restartPolicy"],
    "api.core.v1.ContainerStatus": ["started", "stopSignal"],
    "api.core.v1.VolumeMountStatus": ["recursiveReadOnly"],
    "api.core.v1.FileKeySelector": ["optional"],
    "api.core.v1.PodCertificateProjection": ["maxExpirationSeconds"],
    "api.core.v1.PodResourceClaimStatus": ["resourceClaimName"],
    "api.core.v1.ServiceAccount": ["automountServiceAccountToken"],
    "api.batch.v1.JobSpec": [
        "parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex",
        "maxFailedIndexes", "manualSelector", "ttlSecondsAfterFinished", "completionMode", "suspend",
        "podReplacementPolicy", "managedBy",
    ],
    "api.batch.v1.JobStatus": ["terminating", "ready", "failedIndexes"],
    "api.batch.v1.SuccessPolicyRule": ["succeededIndexes", "succeededCount"],
    "api.batch.v1.PodFailurePolicyOnExitCodesRequirement": ["containerName"],
    "api.batch.v1.CronJobSpec": [
        "timeZone", "startingDeadlineSeconds", "suspend", "successfulJobsHistoryLimit", "failedJobsHistoryLimit",
    ],
    "api.core.v1.ConfigMap": ["immutable"],
    "api.core.v1.Secret": ["immutable"],
}


def die(msg):
    sys.stderr.write("gen-protobuf-schema: " + msg + "\n")
    sys.exit(1)


def crate_dir(name):
    hits = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/" + name)))
    if not hits:
        die("crate %s not found under ~/.cargo/registry/src; run `cargo fetch` in the workspace "
            "(k8s-openapi is a dependency) and `cargo download`/add k8s-pb %s once to fetch it"
            % (name, name.split("-")[-1]))
    return hits[-1]


# ---------------------------------------------------------------------------
# 1. k8s-pb: field numbers and wire types.

PROST_FIELD = re.compile(
    r"#\[prost\(([^\]]*?)\)\]\s*pub\s+(?:r#)?(\w+)\s*:\s*(.*?),\s*(?=#\[prost|$)", re.S)


def resolve_type(module, path):
    """Turns a Rust type path in `module` into a dotted message name."""
    path = path.strip().rstrip(",").strip()
    for wrapper in ("::core::option::Option<", "::prost::alloc::boxed::Box<",
                    "::prost::alloc::vec::Vec<"):
        while path.startswith(wrapper):
            path = path[len(wrapper):-1].strip()
    parts = [p for p in path.split("::") if p]
    mod = list(module)
    while parts and parts[0] == "super":
        mod.pop()
        parts.pop(0)
    return ".".join(mod + parts)


def parse_pb(root):
    messages = {}
    for path in glob.glob(os.path.join(root, "src", "**", "mod.rs"), recursive=True):
        module = os.path.relpath(os.path.dirname(path), os.path.join(root, "src")).split(os.sep)
        text = open(path, encoding="utf-8").read()
        # Doc comments may contain anything, including "#[prost(" in prose.
        text = "\n".join(l for l in text.splitlines() if not l.strip().startswith("///"))
        for m in re.finditer(r"pub struct (\w+) \{(.*?)\n\}", text, re.S):
            name, body = m.group(1), m.group(2)
            fields = []
            for f in PROST_FIELD.finditer(body.strip()):
                attr, fname, ftype = f.group(1), f.group(2), " ".join(f.group(3).split())
                tag = int(re.search(r'tag\s*=\s*"(\d+)"', attr).group(1))
                field = {"tag": tag, "name": fname}
                mm = re.match(r'btree_map\s*=\s*"string,\s*(\w+)"', attr)
                if mm:
                    field["shape"] = "map"
                    vt = mm.group(1)
                    if vt == "message":
                        inner = re.search(r"BTreeMap<\s*::prost::alloc::string::String\s*,\s*(.*)>$", ftype)
                        field["type"] = "message"
                        field["message"] = resolve_type(module, inner.group(1))
                    else:
                        field["type"] = vt
                else:
                    bits = [b.strip() for b in attr.split(",")]
                    field["type"] = bits[0].split("=")[0].strip()
                    field["shape"] = "repeated" if "repeated" in bits else "single"
                    if field["type"] == "message":
                        field["message"] = resolve_type(module, ftype)
                fields.append(field)
            messages[".".join(module + [name])] = fields
    return messages


# ---------------------------------------------------------------------------
# 2. k8s-openapi: JSON names and required-ness.

def parse_openapi(root):
    """Returns {definition name: {json name: (rust field, optional)}}."""
    defs = {}
    versions = sorted(os.path.basename(d) for d in glob.glob(os.path.join(root, "src", "v1_*")))
    if OPENAPI_K8S not in versions:
        die("%s has no %s module" % (root, OPENAPI_K8S))
    versions = [OPENAPI_K8S] + [v for v in versions if int(v[3:]) > int(OPENAPI_K8S[3:])]
    for version in versions:
        for name, keys in parse_openapi_version(os.path.join(root, "src", version)).items():
            merged = defs.setdefault(name, {})
            for k, v in keys.items():
                merged.setdefault(k, v)
    return defs


def parse_openapi_version(base):
    defs = {}
    for path in glob.glob(os.path.join(base, "**", "*.rs"), recursive=True):
        text = open(path, encoding="utf-8").read()
        m = re.match(r"// Generated from definition (\S+)", text)
        if not m:
            continue
        sm = re.search(r"\npub struct \w+ \{(.*?)\n\}", text, re.S)
        if not sm:
            continue
        optional = {}
        for fm in re.finditer(r"^\s*pub (\w+): (.*),$", sm.group(1), re.M):
            optional[fm.group(1)] = fm.group(2).startswith("Option<")
        keys = {}
        for km in re.finditer(r'"([^"]+)" => Field::Key_(\w+),', text):
            rust = km.group(2)
            if rust in optional:
                keys[km.group(1)] = (rust, optional[rust])
        defs[m.group(1)] = keys
    return defs


def norm(s):
    return re.sub(r"[^a-z0-9]", "", s.lower())


def openapi_name(defs, message):
    """The k8s-openapi definition name of a k8s-pb message (prost changes the
    case: HttpGetAction for HTTPGetAction), or None."""
    pkg, _, name = message.rpartition(".")
    want = "io.k8s." + pkg + "." + name
    if want in defs:
        return want
    for k in defs:
        if k.lower() == want.lower():
            return k
    return None


def openapi_def(defs, message):
    name = openapi_name(defs, message)
    return defs[name] if name else None


def proto_name(defs, message):
    """The message's name as generated.proto spells it, for error messages."""
    name = openapi_name(defs, message)
    return "k8s.io." + (name[len("io.k8s."):] if name else message)


# ---------------------------------------------------------------------------
# Schema assembly.

def build(pb, defs):
    schema = {}  # message -> list of fields (dicts with json, kind, shape, ...)
    json_scope = {}  # message -> k8s-openapi key table to name its fields from

    def visit(msg, scope):
        if msg in SPECIAL or msg in schema:
            return
        if msg not in pb:
            die("message %s not found in k8s-pb" % msg)
        own = openapi_def(defs, msg)
        keys = own if own is not None else scope
        if keys is None:
            die("no k8s-openapi definition for %s and no parent to inline it into" % msg)
        json_scope[msg] = keys
        by_norm = {norm(j): (j, opt) for j, (_, opt) in keys.items()}
        fields = []
        schema[msg] = fields
        for f in pb[msg]:
            out = {"tag": f["tag"], "shape": f["shape"]}
            if f["type"] == "message":
                child = f["message"]
                out["kind"] = SPECIAL.get(child, "Message")
                out["message"] = child
            else:
                scalars = {"string": "String", "int32": "Int32", "int64": "Int64", "bool": "Bool",
                           "bytes": "Bytes"}
                if f["type"] not in scalars:
                    # None is reachable today (double appears only in autoscaling/v2).
                    die("%s.%s is a %s, which the decoder does not implement yet"
                        % (msg, f["name"], f["type"]))
                out["kind"] = scalars[f["type"]]
            hit = by_norm.get(norm(f["name"]))
            if hit:
                out["json"], out["optional"] = hit
            elif f["shape"] == "single" and out["kind"] == "Message":
                # A Go struct embedded with `json:",inline"` (Volume's
                # VolumeSource, Probe's ProbeHandler, ConfigMapVolumeSource's
                # LocalObjectReference...): its fields live in the parent's
                # JSON object, so name them from the parent unless the
                # embedded type has a definition of its own.
                out["shape"] = "inline"
                out["json"] = ""
                out["optional"] = True
            else:
                die("%s.%s (tag %d) has no JSON name in k8s-openapi" % (msg, f["name"], f["tag"]))
            fields.append(out)
            if out["kind"] == "Message":
                visit(out["message"], keys if out["shape"] == "inline" else None)

    for _, _, root in ROOTS:
        visit(root, None)
    return schema


# ---------------------------------------------------------------------------
# 3. kubectl probe: which scalars are Go pointers.

def skeleton(schema, msg, stack=()):
    """A JSON object with every nested message present and no scalar set."""
    if msg in stack:
        return {}
    obj = {}
    for f in schema[msg]:
        kind, shape = f["kind"], f["shape"]
        if kind == "Message":
            child = skeleton(schema, f["message"], stack + (msg,))
            if shape == "inline":
                obj.update(child)
            elif shape == "repeated":
                obj[f["json"]] = [child]
            elif shape == "map":
                obj[f["json"]] = {"k": child}
            else:
                obj[f["json"]] = child
        elif kind == "Quantity":
            obj[f["json"]] = {"k": "1"} if shape == "map" else ("1" if shape == "single" else ["1"])
        elif kind == "IntOrString" and shape == "single":
            obj[f["json"]] = 1
    return obj


def read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def walk(schema, msg, data, present):
    """Narrows present[msg] to the tags that appear in this instance of `msg`
    (`data`) too, and walks the nested messages: after every body is walked,
    present[msg] holds the tags found in every instance kubectl sent."""
    if msg not in schema:
        return
    fields = {f["tag"]: f for f in schema[msg]}
    tags = set()
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        tag, wt = key >> 3, key & 7
        if wt == 0:
            _, i = read_varint(data, i)
            val = None
        elif wt == 1:
            i += 8
            val = None
        elif wt == 5:
            i += 4
            val = None
        elif wt == 2:
            n, i = read_varint(data, i)
            val = data[i:i + n]
            i += n
        else:
            raise ValueError("bad wire type %d" % wt)
        tags.add(tag)
        f = fields.get(tag)
        if f and f["kind"] == "Message" and val is not None:
            if f["shape"] == "map":
                # A map entry: {1: key, 2: value}.
                j = 0
                while j < len(val):
                    k2, j = read_varint(val, j)
                    n, j = read_varint(val, j)
                    if k2 >> 3 == 2:
                        walk(schema, f["message"], val[j:j + n], present)
                    j += n
            else:
                walk(schema, f["message"], val, present)
    present[msg] = present[msg] & tags if msg in present else tags


def unwrap(body):
    """Returns (apiVersion, kind, raw) from a `k8s\\0` + runtime.Unknown body."""
    assert body[:4] == b"k8s\x00", "not a protobuf body"
    data, i, out = body[4:], 0, {}
    while i < len(data):
        key, i = read_varint(data, i)
        n, i = read_varint(data, i)
        out[key >> 3] = data[i:i + n]
        i += n
    tm, j, meta = out[1], 0, {}
    while j < len(tm):
        key, j = read_varint(tm, j)
        n, j = read_varint(tm, j)
        meta[key >> 3] = tm[j:j + n].decode()
        j += n
    return meta.get(1, ""), meta.get(2, ""), out.get(2, b"")


def probe(schema):
    pod = {"apiVersion": "v1", "kind": "Pod", **skeleton(schema, "api.core.v1.Pod")}
    pod["metadata"].update({"name": "p", "namespace": "default"})
    # Every container needs a name for kubectl debug to copy the pod.
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in pod["spec"].get(key, []):
            c["name"] = key

    def resources(group_version, *rows):
        # A subresource ("deployments/scale") has no singular name.
        return {"kind": "APIResourceList", "groupVersion": group_version, "resources": [
            {"name": name, "singularName": "" if "/" in name else kind.lower(), "namespaced": namespaced,
             "kind": kind, "verbs": ["create", "get"]} for name, kind, namespaced in rows]}

    def group(name, *versions):
        gvs = [{"groupVersion": name + "/" + v, "version": v} for v in versions]
        return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}

    # kubectl create only needs the server to answer; kubectl debug and
    # kubectl autoscale resolve kinds through discovery and GET the object
    # they start from (the Pod to copy, the Deployment to scale).
    discovery = {
        "/api": {"kind": "APIVersions", "versions": ["v1"]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            group("apps", "v1"), group("networking.k8s.io", "v1"), group("policy", "v1"),
            group("autoscaling", "v2", "v1"), group("batch", "v1")]},
        "/api/v1": resources("v1", ("namespaces", "Namespace", False), ("configmaps", "ConfigMap", True),
                             ("secrets", "Secret", True), ("serviceaccounts", "ServiceAccount", True),
                             ("pods", "Pod", True), ("services", "Service", True)),
        # kubectl autoscale refuses a kind without a scale subresource.
        "/apis/apps/v1": resources("apps/v1", ("deployments", "Deployment", True),
                                   ("deployments/scale", "Scale", True), ("replicasets", "ReplicaSet", True)),
        "/apis/networking.k8s.io/v1": resources("networking.k8s.io/v1", ("ingresses", "Ingress", True),
                                                ("networkpolicies", "NetworkPolicy", True)),
        "/apis/policy/v1": resources("policy/v1", ("poddisruptionbudgets", "PodDisruptionBudget", True)),
        "/apis/autoscaling/v2": resources("autoscaling/v2",
                                          ("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)),
        "/apis/autoscaling/v1": resources("autoscaling/v1",
                                          ("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)),
        "/apis/batch/v1": resources("batch/v1", ("jobs", "Job", True), ("cronjobs", "CronJob", True)),
        "/api/v1/namespaces/default/pods/p": pod,
        "/apis/apps/v1/namespaces/default/deployments/web": {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}},
    }
    bodies = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, obj):
            b = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            obj = discovery.get(self.path.split("?")[0])
            self.reply(200 if obj else 404, obj or {"kind": "Status", "apiVersion": "v1", "code": 404})

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Type", "").startswith("application/vnd.kubernetes.protobuf"):
                bodies.append(body)
            self.reply(201, {})

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    # A pointer that a flag sets is on the wire like a non-pointer, so each
    # such flag is also left out once (--class, --min, --cpu-percent): a
    # scalar counts as present only if it is in every instance kubectl sent.
    commands = [
        ["create", "namespace", "x"],
        ["create", "configmap", "x", "--from-literal=a=b"],
        ["create", "secret", "generic", "x", "--from-literal=a=b"],
        ["create", "serviceaccount", "x"],
        ["create", "deployment", "x", "--image=nginx", "--replicas=2", "--port=80"],
        ["debug", "p", "--copy-to=q", "--image=busybox", "--attach=false", "--profile=legacy"],
        ["create", "service", "clusterip", "x", "--tcp=80:8080", "--tcp=443:8443"],
        ["create", "service", "clusterip", "y", "--clusterip=None", "--tcp=5432"],
        ["create", "service", "nodeport", "x", "--tcp=80:8080", "--node-port=30080"],
        ["create", "service", "loadbalancer", "x", "--tcp=80:8080", "--tcp=443:8443"],
        ["create", "service", "externalname", "x", "--external-name=example.com"],
        ["create", "ingress", "x", "--class=nginx", "--default-backend=default:80",
         "--rule=foo.example.com/api*=api:8080,tls=foo-tls", "--rule=bar.example.com/=web:http",
         "--annotation=a=b"],
        ["create", "ingress", "y", "--rule=/path=svc:80"],
        ["create", "poddisruptionbudget", "x", "--selector=app=web", "--min-available=1"],
        ["create", "poddisruptionbudget", "y", "--selector=app=web", "--max-unavailable=50%"],
        ["autoscale", "deployment", "web", "--min=2", "--max=5", "--cpu-percent=80"],
        ["autoscale", "deployment", "web", "--max=3"],
        ["create", "job", "x", "--image=busybox", "--", "echo", "hi"],
        ["create", "cronjob", "x", "--image=busybox", "--schedule=*/5 * * * *", "--restart=OnFailure", "--", "date"],
    ]
    env = dict(os.environ, KUBECONFIG=os.devnull)
    try:
        for cmd in commands:
            r = subprocess.run(["kubectl", "--server", url] + cmd, env=env, capture_output=True,
                               text=True, timeout=60)
            if r.returncode != 0:
                die("kubectl %s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    except FileNotFoundError:
        die("kubectl not found on PATH; it is needed to learn which fields are Go pointers")
    finally:
        server.shutdown()
    if len(bodies) != len(commands):
        die("expected %d protobuf bodies from kubectl, got %d" % (len(commands), len(bodies)))

    by_kind = {(v, k): m for v, k, m in ROOTS}
    present = {}
    for body in bodies:
        api_version, kind, raw = unwrap(body)
        if (api_version, kind) not in by_kind:
            die("kubectl sent a %s %s, which is not in ROOTS" % (api_version, kind))
        walk(schema, by_kind[(api_version, kind)], raw, present)
    return set(present), present


def mark_pointers(schema, seen, present):
    scalar = {"String", "Int32", "Int64", "Bool", "Bytes"}
    for msg, listed in GO_POINTER_SCALARS.items():
        if msg not in schema:
            die("GO_POINTER_SCALARS names %s, which is not reachable" % msg)
        for name in listed:
            if not any(f["json"] == name and f["kind"] in scalar for f in schema[msg]):
                die("GO_POINTER_SCALARS names %s.%s, which is no scalar field" % (msg, name))
    for msg, fields in schema.items():
        listed = set(GO_POINTER_SCALARS.get(msg, []))
        for f in fields:
            f["pointer"] = False
            if f["kind"] not in scalar or f["shape"] != "single":
                continue
            if msg in seen:
                # A non-pointer scalar is always on the wire; one kubectl
                # left out of any instance of a message it sent is a pointer.
                # One that was always there is a pointer only if listed
                # (kubectl may set it every time, like a Deployment's replicas).
                absent = f["tag"] not in present[msg]
                if absent and msg in GO_POINTER_SCALARS and f["json"] not in listed:
                    die("kubectl left out %s.%s, so it is a Go pointer, but GO_POINTER_SCALARS "
                        "does not list it" % (msg, f["json"]))
                f["pointer"] = absent or f["json"] in listed
            else:
                f["pointer"] = f["json"] in listed


# ---------------------------------------------------------------------------
# 4. Rust output.

def rust(schema, defs):
    order = sorted(schema)
    index = {m: i for i, m in enumerate(order)}

    def kind(f):
        k = f["kind"]
        if k == "Duration":
            die("%s needs metav1.Duration, which the decoder does not implement yet" % f["json"])
        return "K::Msg(%d)" % index[f["message"]] if k == "Message" else "K::" + k

    def field(f):
        shape = {"single": "S::One", "repeated": "S::List", "map": "S::Map", "inline": "S::Inline"}[f["shape"]]
        # A zero scalar is kept when Go would print it: the field is a
        # pointer (so the zero was set on purpose) or is required in JSON.
        # Go never omits struct-typed values (objects, Time, Quantity...).
        scalar = f["kind"] in ("String", "Int32", "Int64", "Bool", "Bytes")
        keep = f["pointer"] or not f["optional"] or not scalar or f["shape"] != "single"
        return "f(%d, %s, %s, %s, %s)" % (f["tag"], json.dumps(f["json"]), kind(f), shape,
                                          "true" if keep else "false")

    lines = [
        "// @generated by hack/gen-protobuf-schema.py from the k8s-pb %s and k8s-openapi %s"
        % (PB_VERSION.split("-")[-1], OPENAPI_VERSION.split("-")[-1]),
        "// crates and from kubectl's own protobuf bodies. Do not edit by hand; rerun",
        "// `python3 hack/gen-protobuf-schema.py` from the repository root instead.",
        "",
        "use super::{Field, Kind as K, Message, Root, Shape as S};",
        "",
        "const fn f(tag: u32, json: &'static str, kind: K, shape: S, keep_zero: bool) -> Field {",
        "    Field { tag, json, kind, shape, keep_zero }",
        "}",
        "",
        "/// Top-level kinds: apiVersion (`None` = any) and kind to message index.",
        "pub(super) static ROOTS: &[Root] = &[",
    ]
    for api_version, kind_name, msg in ROOTS:
        lines.append("    Root { api_version: %s, kind: %s, message: %d },"
                     % ("None" if api_version is None else "Some(%s)" % json.dumps(api_version),
                        json.dumps(kind_name), index[msg]))
    lines += ["];", "", "/// Every message reachable from ROOTS, in a stable order; fields sorted by tag.",
              "pub(super) static MESSAGES: &[Message] = &["]
    for m in order:
        lines.append("    Message {")
        lines.append("        name: %s," % json.dumps(proto_name(defs, m)))
        lines.append("        fields: &[")
        for fld in sorted(schema[m], key=lambda x: x["tag"]):
            lines.append("            %s," % field(fld))
        lines.append("        ],")
        lines.append("    },")
    lines.append("];")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if the checked-in table is stale")
    ap.add_argument("--dump", help="also write the schema as JSON to this file (for debugging)")
    args = ap.parse_args()
    pb = parse_pb(crate_dir(PB_VERSION))
    defs = parse_openapi(crate_dir(OPENAPI_VERSION))
    schema = build(pb, defs)
    seen, present = probe(schema)
    mark_pointers(schema, seen, present)
    if args.dump:
        with open(args.dump, "w") as fh:
            json.dump({"schema": schema, "probed": sorted(seen)}, fh, indent=1, sort_keys=True)
    text = rust(schema, defs)
    if args.check:
        current = open(OUT, encoding="utf-8").read() if os.path.exists(OUT) else ""
        if current != text:
            die("%s is stale; rerun python3 hack/gen-protobuf-schema.py" % os.path.relpath(OUT, REPO))
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as fh:
        fh.write(text)
    print("wrote %s: %d messages" % (os.path.relpath(OUT, REPO), len(schema)))


if __name__ == "__main__":
    main()
