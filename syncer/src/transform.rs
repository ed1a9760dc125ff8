//! What the syncer writes downstream, as a pure function of what it reads upstream.
//!
//! A downstream copy is the upstream object without what belongs to the control plane
//! (uid, resourceVersion, ownerReferences, finalizers, managedFields, status, the
//! assignment labels), marked with its SyncTarget and its upstream
//! workspace/namespace/name so that it can always be traced back or found as an orphan,
//! and placed in the hashed namespace of its upstream `{workspace, namespace}`. A
//! Deployment gets this cluster's share of the replicas and the upstream generation it
//! was made from.

use placement_api::{
    CLUSTER_ANNOTATION, CLUSTER_STATUS_ANNOTATION_PREFIX, NAMESPACE_LOCATOR_ANNOTATION, REFERENCED_LABEL, SYNCED_GENERATION_ANNOTATION,
    SYNC_STATE_LABEL_PREFIX, SYNC_TARGET_LABEL, UPSTREAM_ANNOTATION,
};
use serde_json::{json, Map, Value};

use crate::key::{CopyKey, Key};
use crate::naming::NamespaceLocator;

/// Annotations that describe the upstream object's own history, not what should run:
/// kubectl's client-side apply record, the deployment controller's revision, and what
/// the clusters reported of their copies' status.
fn upstream_only_annotation(key: &str) -> bool {
    key == CLUSTER_ANNOTATION
        || key == "kubectl.kubernetes.io/last-applied-configuration"
        || key.starts_with("deployment.kubernetes.io/")
        || key.starts_with(CLUSTER_STATUS_ANNOTATION_PREFIX)
}

/// The downstream namespace of an upstream object.
pub fn downstream_namespace(key: &Key) -> String {
    NamespaceLocator::new(&key.workspace, &key.namespace).downstream_namespace()
}

/// The server-side-apply body of the downstream copy of `upstream` (the object as the
/// wildcard view returned it). `replicas` is this cluster's share, for a Deployment.
pub fn downstream_object(upstream: &Value, key: &Key, sync_target: &str, replicas: Option<i32>) -> Value {
    let meta = upstream.get("metadata").cloned().unwrap_or_default();
    let mut labels: Map<String, Value> = meta.get("labels").and_then(Value::as_object).cloned().unwrap_or_default();
    // Where it is assigned, and that the companions controller keeps that, are said
    // upstream only: the copy does not change when they do.
    labels.retain(|k, _| !k.starts_with(SYNC_STATE_LABEL_PREFIX) && k != REFERENCED_LABEL);
    labels.insert(SYNC_TARGET_LABEL.into(), json!(sync_target));
    let mut annotations: Map<String, Value> = meta.get("annotations").and_then(Value::as_object).cloned().unwrap_or_default();
    annotations.retain(|k, _| !upstream_only_annotation(k));
    annotations.insert(UPSTREAM_ANNOTATION.into(), json!(key.copy_annotation()));
    if key.kind.workload().is_some() {
        let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        annotations.insert(SYNCED_GENERATION_ANNOTATION.into(), json!(generation.to_string()));
    }

    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(key.kind.api_version()));
    out.insert("kind".into(), json!(key.kind.name()));
    out.insert(
        "metadata".into(),
        json!({
            "name": key.name,
            "namespace": downstream_namespace(key),
            "labels": labels,
            "annotations": annotations,
        }),
    );
    // Everything else the object says is what should exist downstream.
    if let Some(obj) = upstream.as_object() {
        for (k, v) in obj {
            if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if let (Some(replicas), Some(spec)) = (replicas, out.get_mut("spec").and_then(Value::as_object_mut)) {
        spec.insert("replicas".into(), json!(replicas));
    }
    let mut out = Value::Object(out);
    if key.kind == placement_api::synced::Kind::Job {
        placement_api::workload::job::copy_spec(&mut out);
    }
    for path in key.kind.row().cluster_owned {
        strip(&mut out, path, &|v| !key.kind.keeps(path, v));
    }
    out
}

/// Removes from `v` the fields at `path` (dotted; `[*]` for every item of a list)
/// whose value `remove` says goes.
fn strip(v: &mut Value, path: &str, remove: &dyn Fn(&Value) -> bool) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let (field, every) = match head.strip_suffix("[*]") {
        Some(f) => (f, true),
        None => (head, false),
    };
    let Some(obj) = v.as_object_mut() else { return };
    match (rest, every) {
        (None, false) => {
            if obj.get(field).is_some_and(remove) {
                obj.remove(field);
            }
        }
        (Some(rest), false) => {
            if let Some(child) = obj.get_mut(field) {
                strip(child, rest, remove);
            }
        }
        (Some(rest), true) => {
            for item in obj.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten() {
                strip(item, rest, remove);
            }
        }
        // A whole list is removed as a field is.
        (None, true) => {}
    }
}

/// This cluster's part of `total`, divided over the clusters in proportion to their
/// shares (`shares`: every cluster's, by name), by largest remainder so that the parts
/// add up to `total` (ties go to the cluster named first), and never below 1. `None`
/// when `target` has no share.
pub fn part_of(total: i32, shares: &[(&str, i32)], target: &str) -> Option<i32> {
    let sum: i64 = shares.iter().map(|(_, s)| i64::from((*s).max(0))).sum();
    let mut parts: Vec<(&str, i64, i64)> = shares
        .iter()
        .map(|(name, s)| {
            let exact = i64::from(total.max(0)) * i64::from((*s).max(0));
            match sum {
                0 => (*name, 0, 0),
                _ => (*name, exact / sum, exact % sum),
            }
        })
        .collect();
    let given: i64 = parts.iter().map(|p| p.1).sum();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|a, b| parts[*b].2.cmp(&parts[*a].2).then(parts[*a].0.cmp(parts[*b].0)));
    for i in order.into_iter().take(usize::try_from(i64::from(total.max(0)) - given).unwrap_or(0)) {
        if sum > 0 {
            parts[i].1 += 1;
        }
    }
    let part = parts.iter().find(|p| p.0 == target)?.1;
    Some(i32::try_from(part).unwrap_or(i32::MAX).max(1))
}

/// An autoscaler's copy with this cluster's bounds: `minReplicas` and `maxReplicas`
/// divided as [`part_of`] divides them, the maximum never below the minimum.
pub fn divide_bounds(copy: &mut Value, shares: &[(&str, i32)], target: &str) -> Option<(i32, i32)> {
    let spec = copy.get_mut("spec")?.as_object_mut()?;
    let min = spec.get("minReplicas").and_then(Value::as_i64).map_or(1, |v| i32::try_from(v).unwrap_or(1));
    let max = spec.get("maxReplicas").and_then(Value::as_i64).and_then(|v| i32::try_from(v).ok())?;
    let min = part_of(min, shares, target)?;
    let max = part_of(max, shares, target)?.max(min);
    spec.insert("minReplicas".into(), json!(min));
    spec.insert("maxReplicas".into(), json!(max));
    Some((min, max))
}

/// Whether a copy's status says nothing: absent, `{}`, or only empty objects and
/// lists (a Service's `{"loadBalancer": {}}`).
pub fn is_empty_status(status: &Value) -> bool {
    match status {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty_status),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Whether `actual` already says everything `desired` says: every field of `desired`
/// has the same value in `actual`, recursively, and lists have the same length and
/// cover element by element. Fields only `actual` has (server defaults, status, other
/// managers' fields) do not matter. A copy that covers its desired state needs no apply,
/// so a resync of objects that have not drifted writes nothing.
pub fn covers(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d.iter().all(|(k, dv)| a.get(k).map_or(dv.is_null(), |av| covers(av, dv))),
        (Value::Array(a), Value::Array(d)) => a.len() == d.len() && a.iter().zip(d).all(|(x, y)| covers(x, y)),
        (a, d) => a == d,
    }
}

/// Where `actual` does not cover `desired` ([`covers`]), one line each, as what was
/// there and what the syncer puts back: `spec.replicas was 5, reverted to 2`. With
/// `secret`, values under `data` and `stringData` are not shown.
pub fn drift(actual: &Value, desired: &Value, secret: bool) -> Vec<String> {
    let mut out = Vec::new();
    walk(actual, desired, &mut String::new(), secret, &mut out);
    out
}

fn walk(actual: &Value, desired: &Value, path: &mut String, secret: bool, out: &mut Vec<String>) {
    let hidden = |path: &str| secret && (path.starts_with("data") || path.starts_with("stringData"));
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => {
            for (k, dv) in d {
                let len = path.len();
                if k.contains(['.', '/']) {
                    path.push_str(&format!("[{}]", json!(k)));
                } else {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                }
                match a.get(k) {
                    None if dv.is_null() => {}
                    None if hidden(path) => out.push(format!("{path} was removed, reverted")),
                    None => out.push(format!("{path} was removed, reverted to {}", shown(dv))),
                    Some(av) => walk(av, dv, path, secret, out),
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(d)) if a.len() == d.len() => {
            for (i, (av, dv)) in a.iter().zip(d).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(av, dv, path, secret, out);
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(d)) => out.push(format!("{path} had {} items, reverted to {}", a.len(), d.len())),
        (a, d) if a == d => {}
        _ if hidden(path) => out.push(format!("{path} was changed, reverted")),
        (a, d) => out.push(format!("{path} was {}, reverted to {}", shown(a), shown(d))),
    }
}

/// A field or list item of a copy that its desired state does not have, found by
/// [`extras`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extra {
    /// Where it is, as a JSON pointer (for a JSON patch's `remove`).
    pub pointer: String,
    /// Where it is, as a drift line names it: `spec.template.spec.containers[0].env`.
    pub path: String,
}

/// The keys that tell the items of a Kubernetes list map apart (containers and
/// volumes by name, volume mounts by path, ...): the first one an item has.
const ITEM_KEYS: [&str; 6] = ["name", "mountPath", "devicePath", "containerPort", "ip", "topologyKey"];

fn item_key(v: &Value) -> Option<(&'static str, &Value)> {
    ITEM_KEYS.iter().find_map(|k| v.get(k).map(|id| (*k, id)))
}

/// What `actual` has under the top-level fields `sections` that `desired` does not
/// say: fields of objects, and items of lists whose items are told apart by a key
/// (containers, env, volumes, ...; see `ITEM_KEYS`), which server-side apply leaves
/// in place when another manager added them. Other lists are compared item by item
/// when they are as long; an apply replaces them whole. In document order.
///
/// What a server defaults is in `desired` too when the control plane defaulted the
/// upstream object the same way; removing a field the cluster defaults anyway changes
/// nothing, as the cluster defaults it again.
pub fn extras(actual: &Value, desired: &Value, sections: &[&str]) -> Vec<Extra> {
    let mut out = Vec::new();
    for section in sections {
        let Some(a) = actual.get(section) else { continue };
        let mut at = Path::default();
        at.key(section);
        match desired.get(section) {
            None if !a.is_null() => out.push(at.extra()),
            None => {}
            Some(d) => extra_walk(a, d, &mut at, &mut out),
        }
    }
    out
}

fn extra_walk(actual: &Value, desired: &Value, at: &mut Path, out: &mut Vec<Extra>) {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => {
            for (k, av) in a {
                at.key(k);
                match d.get(k) {
                    None if !av.is_null() => out.push(at.extra()),
                    None => {}
                    Some(dv) => extra_walk(av, dv, at, out),
                }
                at.pop();
            }
        }
        (Value::Array(a), Value::Array(d)) => {
            let keyed = |items: &[Value]| items.iter().all(|i| item_key(i).is_some());
            if !a.is_empty() && keyed(a) && keyed(d) {
                for (i, av) in a.iter().enumerate() {
                    at.index(i);
                    match d.iter().find(|dv| item_key(dv) == item_key(av)) {
                        None => out.push(at.extra()),
                        Some(dv) => extra_walk(av, dv, at, out),
                    }
                    at.pop();
                }
            } else if a.len() == d.len() {
                for (i, (av, dv)) in a.iter().zip(d).enumerate() {
                    at.index(i);
                    extra_walk(av, dv, at, out);
                    at.pop();
                }
            }
        }
        _ => {}
    }
}

/// A place in a document, as a JSON pointer and as a drift line names it.
#[derive(Default)]
struct Path {
    pointer: Vec<String>,
    shown: Vec<String>,
}

impl Path {
    fn key(&mut self, k: &str) {
        self.pointer.push(format!("/{}", k.replace('~', "~0").replace('/', "~1")));
        self.shown.push(if k.contains(['.', '/']) {
            format!("[{}]", json!(k))
        } else if self.shown.is_empty() {
            k.to_string()
        } else {
            format!(".{k}")
        });
    }

    fn index(&mut self, i: usize) {
        self.pointer.push(format!("/{i}"));
        self.shown.push(format!("[{i}]"));
    }

    fn pop(&mut self) {
        self.pointer.pop();
        self.shown.pop();
    }

    fn extra(&self) -> Extra {
        Extra { pointer: self.pointer.concat(), path: self.shown.concat() }
    }
}

/// A value in a drift line: compact JSON, cut at 80 characters.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// The server-side-apply body of a downstream namespace for `key`'s upstream namespace.
pub fn downstream_namespace_object(key: &Key, sync_target: &str) -> Value {
    let locator = NamespaceLocator::new(&key.workspace, &key.namespace);
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": locator.downstream_namespace(),
            "labels": {SYNC_TARGET_LABEL: sync_target},
            "annotations": {NAMESPACE_LOCATOR_ANNOTATION: locator.to_annotation()},
        },
    })
}

pub use placement_api::references::References;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Kind;

    fn upstream() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["workload.flotilla.io/syncer-east"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "x"}],
                "managedFields": [{"manager": "kubectl"}],
                "labels": {"app": "web", "state.workload.flotilla.io/east": "Sync", "workload.flotilla.io/referenced": "true"},
                "annotations": {"kcp.io/cluster": "demo", "team": "a", "deployment.kubernetes.io/revision": "2", "clusterstatus.workload.flotilla.io/west": "{}",
                                "kubectl.kubernetes.io/last-applied-configuration": "{}"}
            },
            "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"replicas": 5}
        })
    }

    #[test]
    fn a_jobs_copy_leaves_its_generated_selector_and_its_ttl_to_the_cluster_and_the_workspace() {
        let job = |manual: bool| {
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "pi", "namespace": "default", "uid": "u-1", "generation": 1},
                "spec": {"manualSelector": manual, "ttlSecondsAfterFinished": 30,
                         "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                         "template": {"metadata": {"labels": {"app": "pi", "batch.kubernetes.io/controller-uid": "u-1", "controller-uid": "u-1",
                                                              "batch.kubernetes.io/job-name": "pi", "job-name": "pi"}}}}
            })
        };
        let key = Key::new(Kind::Job, "demo", "default", "pi");
        let copy = downstream_object(&job(false), &key, "east", None);
        assert_eq!(copy["spec"], json!({"manualSelector": false, "template": {"metadata": {"labels": {"app": "pi"}}}}));
        assert_eq!(copy["metadata"]["annotations"]["workload.flotilla.io/synced-generation"], "1");
        // A selector of the user's own stays, labels and all; the ttl stays the workspace's.
        let manual = downstream_object(&job(true), &key, "east", None);
        assert_eq!(manual["spec"]["selector"], job(true)["spec"]["selector"]);
        assert_eq!(manual["spec"]["template"], job(true)["spec"]["template"]);
        assert!(manual["spec"].get("ttlSecondsAfterFinished").is_none(), "{manual}");
        // What the cluster generates on its copy is never drift.
        for path in ["spec.selector", "spec.selector.matchLabels", "spec.template.metadata.labels.controller-uid"] {
            assert!(Kind::Job.cluster_owns(path), "{path}");
        }
        assert!(!Kind::Job.cluster_owns("spec.template.metadata.labels.app"));
        assert!(!Kind::Deployment.cluster_owns("spec.selector"));
    }

    #[test]
    fn a_copy_keeps_what_should_run_and_drops_what_the_control_plane_owns() {
        let key = Key::new(Kind::Deployment, "demo", "default", "web");
        let copy = downstream_object(&upstream(), &key, "east", Some(2));
        let ns = downstream_namespace(&key);
        assert!(ns.starts_with("flotilla-") && ns.len() == "flotilla-".len() + 12, "{ns}");
        assert_eq!(
            copy,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {
                    "name": "web", "namespace": ns,
                    "labels": {"app": "web", "workload.flotilla.io/sync-target": "east"},
                    "annotations": {"team": "a", "workload.flotilla.io/upstream": "demo/default/web",
                                    "workload.flotilla.io/synced-generation": "3"}
                },
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}}}
            })
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}, "data": {"a": "1"}, "immutable": true});
        let copy = downstream_object(&cm, &Key::new(Kind::ConfigMap, "demo", "default", "cfg"), "east", None);
        assert_eq!(copy["data"], json!({"a": "1"}));
        assert_eq!(copy["immutable"], json!(true));
        assert!(copy["metadata"]["annotations"].get(SYNCED_GENERATION_ANNOTATION).is_none(), "only workloads carry a generation");
    }

    #[test]
    fn a_copy_covers_its_desired_state_whatever_the_server_added() {
        let key = Key::new(Kind::Deployment, "demo", "default", "web");
        let desired = downstream_object(&upstream(), &key, "east", Some(2));
        let mut actual = desired.clone();
        actual["metadata"]["uid"] = json!("d1");
        actual["spec"]["progressDeadlineSeconds"] = json!(600);
        actual["status"] = json!({"replicas": 2});
        assert!(covers(&actual, &desired));
        // Drift in anything the copy should say is seen.
        let mut drifted = actual.clone();
        drifted["spec"]["replicas"] = json!(7);
        assert!(!covers(&drifted, &desired));
        let mut relabelled = actual.clone();
        relabelled["metadata"]["labels"].as_object_mut().unwrap().remove("app");
        assert!(!covers(&relabelled, &desired));
        let mut longer = json!({"a": [1, 2]});
        assert!(!covers(&longer, &json!({"a": [1]})));
        longer["a"] = json!([{"name": "c", "image": "x", "imagePullPolicy": "Always"}]);
        assert!(covers(&longer, &json!({"a": [{"name": "c", "image": "x"}]})));
    }

    #[test]
    fn drift_says_what_was_there_and_what_goes_back() {
        let key = Key::new(Kind::Deployment, "demo", "default", "web");
        let desired = downstream_object(&upstream(), &key, "east", Some(2));
        let mut actual = desired.clone();
        actual["metadata"]["uid"] = json!("d1");
        assert!(drift(&actual, &desired, false).is_empty(), "what the server adds is no drift");
        actual["spec"]["replicas"] = json!(5);
        actual["metadata"]["annotations"][UPSTREAM_ANNOTATION] = json!("tampered");
        actual["metadata"]["labels"].as_object_mut().unwrap().remove("app");
        actual["spec"]["selector"]["matchLabels"] = json!({"app": "web", "extra": "x"});
        actual["spec"]["template"]["metadata"]["labels"] = json!([1, 2]);
        assert_eq!(
            drift(&actual, &desired, false),
            [
                "metadata.labels.app was removed, reverted to \"web\"",
                "metadata.annotations[\"workload.flotilla.io/upstream\"] was \"tampered\", reverted to \"demo/default/web\"",
                "spec.replicas was 5, reverted to 2",
                "spec.template.metadata.labels was [1,2], reverted to {\"app\":\"web\"}",
            ]
        );
        // Lists: by length, then item by item.
        assert_eq!(drift(&json!({"a": [1, 2]}), &json!({"a": [1]}), false), ["a had 2 items, reverted to 1"]);
        assert_eq!(drift(&json!({"a": [{"b": 1}]}), &json!({"a": [{"b": 2}]}), false), ["a[0].b was 1, reverted to 2"]);
        // A Secret's values are never shown, and long values are cut.
        let secret = json!({"data": {"password": "czNjcmV0", "gone": "eA=="}, "type": "Opaque"});
        let changed = json!({"data": {"password": "cHduZWQ="}, "type": "x"});
        assert_eq!(
            drift(&changed, &secret, true),
            ["data.password was changed, reverted", "data.gone was removed, reverted", "type was \"x\", reverted to \"Opaque\""]
        );
        let long = drift(&json!({"a": "x".repeat(200)}), &json!({"a": "y"}), false);
        assert!(long[0].len() < 120 && long[0].contains("..."), "{long:?}");
    }

    #[test]
    fn extras_are_what_the_copy_has_and_should_not() {
        let key = Key::new(Kind::Deployment, "demo", "default", "web");
        let desired = downstream_object(&upstream(), &key, "east", Some(2));
        let sections = ["spec"];
        let mut actual = desired.clone();
        actual["metadata"]["labels"]["added"] = json!("by someone");
        actual["status"] = json!({"replicas": 2});
        assert_eq!(extras(&actual, &desired, &sections), [], "only the sections asked for");
        actual["spec"]["paused"] = json!(true);
        actual["spec"]["template"]["metadata"]["annotations"] = json!({"a/b": "c"});
        actual["spec"]["template"]["spec"] = json!({"containers": [
            {"name": "sidecar", "image": "evil"},
            {"name": "app", "image": "nginx", "env": [{"name": "FOO", "value": "bar"}]}
        ]});
        let mut want = desired.clone();
        want["spec"]["template"]["spec"] = json!({"containers": [{"name": "app", "image": "nginx"}], "dnsPolicy": "ClusterFirst"});
        let found = extras(&actual, &want, &sections);
        let pointers: Vec<&str> = found.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/spec/template/metadata/annotations",
                "/spec/template/spec/containers/0",
                "/spec/template/spec/containers/1/env",
                "/spec/paused",
            ]
        );
        assert_eq!(found[2].path, "spec.template.spec.containers[1].env");
        // Keys with a slash, and unkeyed lists of the same length, item by item.
        let cm = json!({"data": {"a/b": "1", "c": "2"}, "binaryData": {"x": "eA=="}});
        let found = extras(&cm, &json!({"data": {"c": "2"}}), &["data", "binaryData"]);
        assert_eq!(
            found.iter().map(|e| (e.pointer.as_str(), e.path.as_str())).collect::<Vec<_>>(),
            [("/data/a~1b", "data[\"a/b\"]"), ("/binaryData", "binaryData")]
        );
        assert_eq!(extras(&json!({"s": [{"x": 1, "y": 2}]}), &json!({"s": [{"x": 1}]}), &["s"])[0].pointer, "/s/0/y");
        assert_eq!(extras(&json!({"s": [1, 2]}), &json!({"s": [1]}), &["s"]), [], "an apply replaces an unkeyed list");
    }

    #[test]
    fn what_each_cluster_allocates_is_left_to_it() {
        let key = Key::new(Kind::Service, "demo", "default", "web");
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {
            "type": "LoadBalancer", "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"], "healthCheckNodePort": 31000,
            "externalTrafficPolicy": "Local", "selector": {"app": "web"},
            "ports": [{"port": 80, "nodePort": 30080}, {"port": 443}]}});
        let copy = downstream_object(&svc, &key, "east", None);
        assert_eq!(
            copy["spec"],
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "selector": {"app": "web"},
                   "ports": [{"port": 80, "nodePort": 30080}, {"port": 443}]}),
            "the cluster IPs and health check port go; a node port asked for stays"
        );
        let headless = json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"], "selector": {"app": "db"}}});
        let copy = downstream_object(&headless, &key, "east", None);
        assert_eq!(copy["spec"]["clusterIP"], json!("None"), "a headless Service stays headless");
        assert_eq!(copy["spec"]["clusterIPs"], json!(["None"]));
        let ingress = json!({"spec": {"ingressClassName": "nginx"}});
        let copy = downstream_object(&ingress, &Key::new(Kind::Ingress, "demo", "default", "web"), "east", None);
        assert_eq!(copy["spec"]["ingressClassName"], json!("nginx"), "a class asked for stays");
    }

    #[test]
    fn autoscaler_bounds_are_divided_by_share_and_never_below_one() {
        let shares = [("east", 2), ("west", 1)];
        assert_eq!(part_of(9, &shares, "east"), Some(6));
        assert_eq!(part_of(9, &shares, "west"), Some(3));
        // Remainders go to the largest, and the parts add up.
        let three = [("a", 1), ("b", 1), ("c", 1)];
        let parts: Vec<i32> = ["a", "b", "c"].iter().map(|t| part_of(10, &three, t).unwrap()).collect();
        assert_eq!(parts, [4, 3, 3]);
        assert_eq!(part_of(1, &shares, "west"), Some(1), "at least one each");
        assert_eq!(part_of(5, &[("east", 0), ("west", 0)], "east"), Some(1), "no shares at all: the floor");
        assert_eq!(part_of(5, &shares, "north"), None);
        let mut hpa = json!({"spec": {"minReplicas": 2, "maxReplicas": 10, "scaleTargetRef": {"name": "web"}}});
        assert_eq!(divide_bounds(&mut hpa, &shares, "west"), Some((1, 3)));
        assert_eq!(hpa["spec"]["minReplicas"], json!(1));
        assert_eq!(hpa["spec"]["maxReplicas"], json!(3));
        let mut defaulted = json!({"spec": {"maxReplicas": 1}});
        assert_eq!(divide_bounds(&mut defaulted, &shares, "east"), Some((1, 1)), "the maximum never below the minimum");
    }

    #[test]
    fn the_namespace_carries_its_locator() {
        let key = Key::new(Kind::Deployment, "demo", "shop", "web");
        let ns = downstream_namespace_object(&key, "east");
        assert_eq!(ns["metadata"]["name"], json!(downstream_namespace(&key)));
        let locator = NamespaceLocator::from_annotation(ns["metadata"]["annotations"][NAMESPACE_LOCATOR_ANNOTATION].as_str().unwrap());
        assert_eq!(locator, Some(NamespaceLocator::new("demo", "shop")));
        assert_eq!(ns["metadata"]["labels"][SYNC_TARGET_LABEL], json!("east"));
    }
}
