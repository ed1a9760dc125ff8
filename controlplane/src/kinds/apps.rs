//! StatefulSets, DaemonSets and ControllerRevisions (kubernetes pkg/registry/apps).

use serde_json::{json, Value};

use super::pod::{default_pod_spec, quantities_parse};
use super::print::{self, col, AGE, CONTAINERS, IMAGES, NAME};
use super::workload::{
    immutable, non_negative, status_write_annotations, template_cells, validate_restart_policy, validate_selected_template,
};
use super::{decode_typed, rules, set_default, Decoded, Strategy};
use crate::error::Cause;

/// apps/v1 StatefulSet: pods with stable names and their own volumes. The generation
/// moves on a spec change; an update may change only the fields Kubernetes lets move.
#[derive(Debug)]
pub struct StatefulSet;

/// apps/v1 DaemonSet: a pod on every node that fits.
#[derive(Debug)]
pub struct DaemonSet;

/// apps/v1 ControllerRevision: one revision of a StatefulSet's or DaemonSet's pod
/// template. Its data and revision never change.
#[derive(Debug)]
pub struct ControllerRevision;

/// The StatefulSet spec fields an update may change (apps validation
/// ValidateStatefulSetUpdate); every other one is fixed at creation.
const STATEFULSET_MUTABLE: &[&str] =
    &["replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"];

impl Strategy for StatefulSet {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::apps::v1::StatefulSet>("StatefulSet", obj, old, status_write, quantities_parse)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "replicas"], json!(1));
        set_default(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
        set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
        set_default(obj, &["spec", "updateStrategy", "type"], json!("RollingUpdate"));
        if obj.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("RollingUpdate") {
            set_default(obj, &["spec", "updateStrategy", "rollingUpdate", "partition"], json!(0));
        }
        set_default(obj, &["spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted"], json!("Retain"));
        set_default(obj, &["spec", "persistentVolumeClaimRetentionPolicy", "whenScaled"], json!("Retain"));
        if let Some(Value::Array(claims)) = obj.pointer_mut("/spec/volumeClaimTemplates") {
            for claim in claims {
                set_default(claim, &["apiVersion"], json!("v1"));
                set_default(claim, &["kind"], json!("PersistentVolumeClaim"));
                set_default(claim, &["spec", "volumeMode"], json!("Filesystem"));
                set_default(claim, &["status", "phase"], json!("Pending"));
            }
        }
        if let Some(pod) = obj.pointer_mut("/spec/template/spec") {
            default_pod_spec(pod);
        }
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes: Vec<Cause> = non_negative(obj, "spec.replicas").into_iter().collect();
        causes.extend(validate_selected_template(obj, "spec", true));
        causes.extend(validate_restart_policy(obj, "spec.template", &["Always"]));
        causes.extend(one_of(obj, "spec.podManagementPolicy", &["OrderedReady", "Parallel"]));
        causes.extend(one_of(obj, "spec.updateStrategy.type", &["RollingUpdate", "OnDelete"]));
        causes.extend(non_negative(obj, "spec.updateStrategy.rollingUpdate.partition"));
        causes.extend(non_negative(obj, "spec.minReadySeconds"));
        for (i, claim) in obj.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if claim.pointer("/metadata/name").and_then(Value::as_str).is_none_or(str::is_empty) {
                causes.push(rules::required(&format!("spec.volumeClaimTemplates[{i}].metadata.name")));
            }
            causes.extend(super::storage::validate_claim_spec(claim, &format!("spec.volumeClaimTemplates[{i}].spec")));
        }
        if let Some(old) = old {
            let fixed = |v: &Value| {
                let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = spec.as_object_mut() {
                    m.retain(|k, _| !STATEFULSET_MUTABLE.contains(&k.as_str()));
                }
                spec
            };
            if fixed(obj) != fixed(old) {
                causes.push(rules::forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', \
                     'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
        causes
    }

    fn prepare_for_status_update(&self, merged: &mut Value, sent: &Value) {
        status_write_annotations(merged, sent);
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec"))
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Ready", "string", 0, "Pods ready, of the replicas wanted."), AGE, CONTAINERS, IMAGES])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let [containers, images, _] = template_cells(obj, "/spec/template");
        let ready = format!("{}/{}", print::n(obj, "/status/readyReplicas"), print::n(obj, "/spec/replicas"));
        vec![print::name(obj), json!(ready), print::age_of(obj), containers, images]
    }
}

impl Strategy for DaemonSet {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::apps::v1::DaemonSet>("DaemonSet", obj, old, status_write, quantities_parse)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
        set_default(obj, &["spec", "updateStrategy", "type"], json!("RollingUpdate"));
        if obj.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("RollingUpdate") {
            set_default(obj, &["spec", "updateStrategy", "rollingUpdate", "maxUnavailable"], json!(1));
            set_default(obj, &["spec", "updateStrategy", "rollingUpdate", "maxSurge"], json!(0));
        }
        if let Some(pod) = obj.pointer_mut("/spec/template/spec") {
            default_pod_spec(pod);
        }
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = validate_selected_template(obj, "spec", true);
        causes.extend(validate_restart_policy(obj, "spec.template", &["Always"]));
        causes.extend(one_of(obj, "spec.updateStrategy.type", &["RollingUpdate", "OnDelete"]));
        causes.extend(non_negative(obj, "spec.minReadySeconds"));
        causes.extend(immutable(obj, old, &["spec.selector"]));
        causes
    }

    fn prepare_for_status_update(&self, merged: &mut Value, sent: &Value) {
        status_write_annotations(merged, sent);
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec"))
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Desired", "integer", 0, "Nodes that should run the daemon pod."),
            col("Current", "integer", 0, "Nodes that run at least one daemon pod."),
            col("Ready", "integer", 0, "Nodes whose daemon pod is ready."),
            col("Up-to-date", "integer", 0, "Nodes that run the updated daemon pod."),
            col("Available", "integer", 0, "Nodes whose daemon pod is available."),
            col("Node Selector", "string", 0, "The labels a node needs to run the daemon pod."),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, "Label selector for the daemon's pods."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let n = |p: &str| json!(print::n(obj, p));
        let [containers, images, selector] = template_cells(obj, "/spec/template");
        let node_selector = obj
            .pointer("/spec/template/spec/nodeSelector")
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty())
            .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(","))
            .unwrap_or_else(|| "<none>".into());
        vec![
            print::name(obj),
            n("/status/desiredNumberScheduled"),
            n("/status/currentNumberScheduled"),
            n("/status/numberReady"),
            n("/status/updatedNumberScheduled"),
            n("/status/numberAvailable"),
            json!(node_selector),
            print::age_of(obj),
            containers,
            images,
            selector,
        ]
    }
}

impl Strategy for ControllerRevision {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::apps::v1::ControllerRevision>("ControllerRevision", obj, old, status_write, super::decoded)
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes: Vec<Cause> = non_negative(obj, "revision").into_iter().collect();
        if obj.get("revision").is_none_or(Value::is_null) {
            causes.push(rules::required("revision"));
        }
        causes.extend(immutable(obj, old, &["data"]));
        causes
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Controller", "string", 0, "The object whose revision this is."),
            col("Revision", "string", 0, "The revision number."),
            AGE,
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let owner = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| refs.iter().find(|r| r.get("controller") == Some(&json!(true))))
            .map(|r| {
                let group = print::s(r, "/apiVersion").split_once('/').map_or("", |(g, _)| g);
                let kind = print::s(r, "/kind").to_lowercase();
                let resource = if group.is_empty() { kind } else { format!("{kind}.{group}") };
                format!("{resource}/{}", print::s(r, "/name"))
            })
            .unwrap_or_else(|| "<none>".into());
        vec![print::name(obj), json!(owner), json!(print::n(obj, "/revision").to_string()), print::age_of(obj)]
    }
}

/// `field` is unset or one of `allowed`.
pub(super) fn one_of(obj: &Value, field: &str, allowed: &[&str]) -> Option<Cause> {
    let v = obj.pointer(&format!("/{}", field.replace('.', "/")))?.as_str()?;
    (!allowed.contains(&v)).then(|| rules::unsupported(field, v, allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sts() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "zk"},
            "spec": {
                "serviceName": "zk-hs", "replicas": 3,
                "selector": {"matchLabels": {"app": "zk"}},
                "template": {"metadata": {"labels": {"app": "zk"}}, "spec": {"containers": [{"name": "zk", "image": "zookeeper:3.9"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
            }
        })
    }

    #[test]
    fn a_statefulset_is_defaulted_as_kubernetes_does() {
        let mut s = StatefulSet.decode(sts(), None, false).unwrap().value;
        StatefulSet.default(&mut s);
        assert_eq!(s["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(s["spec"]["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        assert_eq!(s["spec"]["persistentVolumeClaimRetentionPolicy"], json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
        assert_eq!(s["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"], "Filesystem");
        assert_eq!(s["spec"]["volumeClaimTemplates"][0]["status"]["phase"], "Pending");
        assert!(StatefulSet.validate(&s, None).is_empty(), "{:?}", StatefulSet.validate(&s, None));
    }

    #[test]
    fn a_statefulset_update_may_change_only_some_fields() {
        let mut old = sts();
        StatefulSet.default(&mut old);
        let mut new = old.clone();
        new["spec"]["replicas"] = json!(5);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("zookeeper:3.10");
        assert!(StatefulSet.validate(&new, Some(&old)).is_empty());
        new["spec"]["serviceName"] = json!("other");
        let causes = StatefulSet.validate(&new, Some(&old));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec");
        assert!(causes[0].message.starts_with("Forbidden: updates to statefulset spec for fields other than 'replicas'"));
    }

    #[test]
    fn a_statefulset_needs_pods_that_restart_always_and_claims_with_storage() {
        let mut s = sts();
        s["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        s["spec"]["volumeClaimTemplates"][0]["spec"]["resources"] = json!({});
        let fields: Vec<String> = StatefulSet.validate(&s, None).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, ["spec.template.spec.restartPolicy", "spec.volumeClaimTemplates[0].spec.resources[storage]"]);
    }

    #[test]
    fn daemonset_cells_show_its_node_counts_and_selector() {
        let ds = json!({
            "metadata": {"name": "fluentd"},
            "spec": {"selector": {"matchLabels": {"app": "f"}},
                     "template": {"spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "f", "image": "fluentd"}]}}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2}
        });
        let cells = DaemonSet.cells(&ds);
        assert_eq!(cells[1..7], [json!(3), json!(3), json!(2), json!(3), json!(2), json!("disk=ssd")]);
        assert_eq!(cells[8..], [json!("f"), json!("fluentd"), json!("app=f")]);
    }

    #[test]
    fn a_controller_revision_names_its_controller() {
        let rev = json!({"metadata": {"name": "zk-7b9c", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "zk", "uid": "u", "controller": true}]}, "revision": 2});
        assert_eq!(ControllerRevision.cells(&rev)[1..3], [json!("statefulset.apps/zk"), json!("2")]);
        let mut changed = rev.clone();
        changed["data"] = json!({"x": 1});
        assert_eq!(ControllerRevision.validate(&changed, Some(&rev))[0].field, "data");
    }
}
