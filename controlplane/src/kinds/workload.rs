//! Deployments and ReplicaSets (kubernetes pkg/registry/apps).

use serde_json::{json, Map, Value};

use super::pod::{default_pod_spec, quantities_parse, validate_containers};
use super::print::{self, col, Col, AGE, CONTAINERS, IMAGES, NAME};
use super::{decode_typed, set_default, Decoded, Strategy};
use crate::error::Cause;
use crate::objmeta;

/// apps/v1 Deployment: the generation moves on a change of spec or annotations
/// (kubernetes pkg/registry/apps/deployment/strategy.go).
#[derive(Debug)]
pub struct Deployment;

/// apps/v1 ReplicaSet (physical clusters only): the generation moves on a spec change.
#[derive(Debug)]
pub struct ReplicaSet;

impl Strategy for Deployment {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::apps::v1::Deployment>("Deployment", obj, old, status_write, quantities_parse)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "replicas"], json!(1));
        set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
        set_default(obj, &["spec", "progressDeadlineSeconds"], json!(600));
        let strategy_type = obj.pointer("/spec/strategy/type").and_then(Value::as_str).unwrap_or("RollingUpdate").to_string();
        set_default(obj, &["spec", "strategy", "type"], json!(strategy_type));
        if strategy_type == "RollingUpdate" {
            set_default(obj, &["spec", "strategy", "rollingUpdate", "maxSurge"], json!("25%"));
            set_default(obj, &["spec", "strategy", "rollingUpdate", "maxUnavailable"], json!("25%"));
        }
        if let Some(pod) = obj.pointer_mut("/spec/template/spec") {
            default_pod_spec(pod);
        }
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate_workload(obj)
    }

    fn prepare_for_status_update(&self, merged: &mut Value, sent: &Value) {
        status_write_annotations(merged, sent);
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec") || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations"))
    }

    fn columns(&self) -> Vec<Value> {
        workload_columns(
            [
                col("Ready", "string", 0, "Number of the pod with ready state"),
                col(
                    "Up-to-date",
                    "string",
                    0,
                    "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                ),
                col(
                    "Available",
                    "string",
                    0,
                    "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                ),
            ],
            "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
        )
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        workload_cells(
            obj,
            [
                json!(format!("{}/{}", print::n(obj, "/status/readyReplicas"), print::n(obj, "/spec/replicas"))),
                json!(print::n(obj, "/status/updatedReplicas")),
                json!(print::n(obj, "/status/availableReplicas")),
            ],
        )
    }
}

impl Strategy for ReplicaSet {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::apps::v1::ReplicaSet>("ReplicaSet", obj, old, status_write, quantities_parse)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "replicas"], json!(1));
        if let Some(pod) = obj.pointer_mut("/spec/template/spec") {
            default_pod_spec(pod);
        }
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate_workload(obj)
    }

    fn prepare_for_status_update(&self, merged: &mut Value, sent: &Value) {
        status_write_annotations(merged, sent);
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec"))
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }

    fn columns(&self) -> Vec<Value> {
        workload_columns(
            [
                col("Desired", "integer", 0, "Number of desired pods."),
                col("Current", "integer", 0, "Number of actual replicas."),
                col("Ready", "integer", 0, "Number of ready replicas."),
            ],
            "Label selector for pods.",
        )
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let n = |p: &str| json!(print::n(obj, p));
        workload_cells(obj, [n("/spec/replicas"), n("/status/replicas"), n("/status/readyReplicas")])
    }
}

/// Name, the kind's three replica counts, Age, and the template's containers, images
/// and selector for `-o wide`.
fn workload_columns(counts: [Col; 3], selector: &'static str) -> Vec<Value> {
    let [a, b, c] = counts;
    print::columns(&[NAME, a, b, c, AGE, CONTAINERS, IMAGES, col("Selector", "string", 1, selector)])
}

/// The cells of [`workload_columns`].
fn workload_cells(obj: &Value, counts: [Value; 3]) -> Vec<Value> {
    let [a, b, c] = counts;
    let [containers, images, selector] = template_cells(obj, "/spec/template");
    vec![print::name(obj), a, b, c, print::age_of(obj), containers, images, selector]
}

/// The Containers, Images and Selector cells of a workload whose pod template is at
/// `template` (`/spec/template`), with the selector of the spec that holds it.
pub(super) fn template_cells(obj: &Value, template: &str) -> [Value; 3] {
    let containers = obj.pointer(&format!("{template}/spec/containers")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let join = |f: &str| json!(containers.iter().map(|c| c[f].as_str().unwrap_or_default()).collect::<Vec<_>>().join(","));
    let spec = template.rsplit_once('/').map_or("", |(spec, _)| spec);
    let selector = obj
        .pointer(&format!("{spec}/selector/matchLabels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    [join("name"), join("image"), json!(selector)]
}

/// The workload controllers' status strategies reset only spec and labels, so a
/// status write may carry annotations: the deployment controller sets
/// `deployment.kubernetes.io/revision` that way, without moving the generation.
pub(super) fn status_write_annotations(merged: &mut Value, sent: &Value) {
    if let Some(a) = sent.pointer("/metadata/annotations").filter(|a| a.is_object()) {
        objmeta::meta_mut(merged).insert("annotations".into(), a.clone());
    }
}

/// Replicas not negative, a selector that the template's labels match, and valid
/// containers.
fn validate_workload(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if obj.pointer("/spec/replicas").and_then(Value::as_i64).is_some_and(|r| r < 0) {
        causes.push(Cause::new("FieldValueInvalid", "spec.replicas", "Invalid value: must be greater than or equal to 0"));
    }
    causes.extend(validate_selected_template(obj, "spec", true));
    causes
}

/// The selector of the spec at `spec` (`spec`, `spec.jobTemplate.spec`) and its pod
/// template: a selector that the template's labels match (required unless
/// `require_selector` is false), and valid containers.
pub(super) fn validate_selected_template(obj: &Value, spec: &str, require_selector: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ptr = format!("/{}", spec.replace('.', "/"));
    let selector = obj.pointer(&format!("{ptr}/selector"));
    let match_labels = selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object);
    let has_exprs = selector.and_then(|s| s.get("matchExpressions")).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if require_selector && match_labels.is_none_or(Map::is_empty) && !has_exprs {
        causes.push(Cause::new("FieldValueRequired", &format!("{spec}.selector"), "Required value"));
    }
    let template_labels = obj.pointer(&format!("{ptr}/template/metadata/labels")).and_then(Value::as_object);
    if let Some(ml) = match_labels {
        let matches = ml.iter().all(|(k, v)| template_labels.and_then(|t| t.get(k)) == Some(v));
        if !matches {
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("{spec}.template.metadata.labels"),
                format!(
                    "Invalid value: {}: `selector` does not match template `labels`",
                    serde_json::to_string(&template_labels).unwrap_or_default()
                ),
            ));
        }
    }
    causes
        .extend(validate_containers(obj.pointer(&format!("{ptr}/template/spec/containers")), &format!("{spec}.template.spec.containers")));
    causes
}

/// The template's restart policy is one of `allowed` (Always for the kinds that keep
/// pods running, OnFailure or Never for Jobs).
pub(super) fn validate_restart_policy(obj: &Value, template: &str, allowed: &[&str]) -> Option<Cause> {
    let ptr = format!("/{}/spec/restartPolicy", template.replace('.', "/"));
    let policy = obj.pointer(&ptr).and_then(Value::as_str).unwrap_or("Always");
    (!allowed.contains(&policy)).then(|| super::rules::unsupported(&format!("{template}.spec.restartPolicy"), policy, allowed))
}

/// A count that must not be negative.
pub(super) fn non_negative(obj: &Value, field: &str) -> Option<Cause> {
    let v = obj.pointer(&format!("/{}", field.replace('.', "/")))?;
    v.as_i64().is_some_and(|n| n < 0).then(|| super::rules::invalid(field, v, "must be greater than or equal to 0"))
}

/// `field is immutable` for each of `fields` (dotted) that differs from `old`.
pub(super) fn immutable(obj: &Value, old: Option<&Value>, fields: &[&str]) -> Vec<Cause> {
    let Some(old) = old else { return Vec::new() };
    fields
        .iter()
        .filter_map(|f| {
            let ptr = format!("/{}", f.replace('.', "/"));
            let new = obj.pointer(&ptr).unwrap_or(&Value::Null);
            (old.pointer(&ptr).unwrap_or(&Value::Null) != new).then(|| super::rules::invalid(f, new, "field is immutable"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}
            }
        })
    }

    #[test]
    fn unknown_fields_are_reported_with_their_paths_and_dropped() {
        let mut d = deployment();
        d["spec"]["replicaz"] = json!(3);
        d["spec"]["template"]["spec"]["containers"][0]["imagee"] = json!("x");
        let out = Deployment.decode(d, None, false).unwrap();
        assert_eq!(out.unknown, ["spec.replicaz", "spec.template.spec.containers[0].imagee"]);
        assert!(out.value["spec"].get("replicaz").is_none());
    }

    #[test]
    fn wrong_types_fail_to_decode_with_the_kind_named() {
        let mut d = deployment();
        d["spec"]["replicas"] = json!("three");
        let err = Deployment.decode(d, None, false).err().unwrap();
        assert!(err.starts_with("Deployment in version \"v1\" cannot be handled as a Deployment"), "{err}");
    }

    #[test]
    fn a_malformed_quantity_fails_to_decode() {
        let mut d = deployment();
        d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "lots"}});
        let err = Deployment.decode(d, None, false).err().unwrap();
        assert!(err.contains("resources.requests[cpu]"), "{err}");
    }

    /// What an update sends back unchanged is taken as stored, and the result is the
    /// same as decoding it all.
    #[test]
    fn an_unchanged_spec_is_reused_and_decodes_the_same() {
        let mut stored = Deployment.decode(deployment(), None, false).unwrap().value;
        Deployment.default(&mut stored);
        let mut sent = stored.clone();
        sent["metadata"]["labels"] = json!({"a": "b"});
        let reused = Deployment.decode(sent.clone(), Some(&stored), false).unwrap().value;
        let full = Deployment.decode(sent, None, false).unwrap().value;
        assert_eq!(reused, full);
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&reused), keys(&full), "the spec goes back where the typed encoding puts it");
    }

    #[test]
    fn deployment_defaults_and_selector_validation() {
        let mut d = deployment();
        Deployment.default(&mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(Deployment.validate(&d, None).is_empty());
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        let causes = Deployment.validate(&d, None);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }
}
