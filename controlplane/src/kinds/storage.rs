//! PersistentVolumeClaims, PersistentVolumes and StorageClasses (kubernetes
//! pkg/registry/core/persistentvolumeclaim, persistentvolume, and storage).

use serde_json::{json, Value};

use super::apps::one_of;
use super::print::{self, col, AGE, NAME};
use super::{decode_typed, rules, set_default, Decoded, Strategy};
use crate::error::Cause;

/// core/v1 PersistentVolumeClaim: Pending until a volume binds it; after creation only
/// its requests (and its volume, once) may change.
#[derive(Debug)]
pub struct PersistentVolumeClaim;

/// core/v1 PersistentVolume (physical clusters only).
#[derive(Debug)]
pub struct PersistentVolume;

/// storage.k8s.io/v1 StorageClass: its provisioner, parameters and policies are fixed
/// at creation.
#[derive(Debug)]
pub struct StorageClass;

const ACCESS_MODES: &[&str] = &["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];

/// The claim spec of `obj` (a claim, or a StatefulSet's claim template), reported
/// under `field`: access modes, and a positive storage request.
pub(super) fn validate_claim_spec(obj: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    match obj.pointer("/spec/accessModes").and_then(Value::as_array) {
        Some(modes) if !modes.is_empty() => {
            for m in modes {
                let m = m.as_str().unwrap_or_default();
                if !ACCESS_MODES.contains(&m) {
                    causes.push(rules::unsupported(&format!("{field}.accessModes"), m, ACCESS_MODES));
                }
            }
        }
        _ => causes.push(Cause::new(
            "FieldValueRequired",
            &format!("{field}.accessModes"),
            "Required value: at least 1 access mode is required",
        )),
    }
    causes.extend(positive_storage(obj.pointer("/spec/resources/requests/storage"), &format!("{field}.resources[storage]")));
    causes
}

/// A storage quantity that is set and greater than zero.
fn positive_storage(q: Option<&Value>, field: &str) -> Option<Cause> {
    let Some(q) = q else { return Some(rules::required(field)) };
    let text = q.as_str().unwrap_or_default();
    match placement_api::quantity::parse(text) {
        Ok(v) if v.is_negative() || v.milli_value() == Some(0) => Some(rules::invalid(field, q, "must be greater than zero")),
        Ok(_) => None,
        Err(e) => Some(rules::invalid(field, q, &e.to_string())),
    }
}

/// The short forms kubectl prints for access modes.
fn access_modes(modes: Option<&Value>) -> String {
    let short = |m: &str| match m {
        "ReadWriteOnce" => "RWO",
        "ReadOnlyMany" => "ROX",
        "ReadWriteMany" => "RWX",
        "ReadWriteOncePod" => "RWOP",
        _ => "",
    };
    modes.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(short).collect::<Vec<_>>().join(",")
}

/// The class a claim or volume names: `spec.storageClassName`, or the annotation of
/// the beta API.
pub fn class_of(obj: &Value) -> &str {
    match print::s(obj, "/spec/storageClassName") {
        "" => print::s(obj, "/metadata/annotations/volume.beta.kubernetes.io~1storage-class"),
        class => class,
    }
}

/// The value, or `<unset>`.
fn or_unset(v: &str) -> &str {
    if v.is_empty() {
        "<unset>"
    } else {
        v
    }
}

fn terminating_or(obj: &Value, phase: &str) -> String {
    if obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        "Terminating".into()
    } else {
        phase.to_string()
    }
}

impl Strategy for PersistentVolumeClaim {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::PersistentVolumeClaim>("PersistentVolumeClaim", obj, old, status_write, super::decoded)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = validate_claim_spec(obj, "spec");
        if let Some(old) = old {
            // What an update may change: the requests, the attributes class, and the
            // volume once, when the claim binds.
            let fixed = |v: &Value, old_volume: &str| {
                let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = spec.as_object_mut() {
                    m.remove("resources");
                    m.remove("volumeAttributesClassName");
                    if old_volume.is_empty() {
                        m.remove("volumeName");
                    }
                }
                spec
            };
            let old_volume = print::s(old, "/spec/volumeName");
            if fixed(obj, old_volume) != fixed(old, old_volume) {
                causes.push(rules::forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                ));
            }
        }
        causes
    }

    /// As the claim strategy's PrepareForCreate: Pending until bound.
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Pending"});
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Status", "string", 0, "The phase of the claim."),
            col("Volume", "string", 0, "The volume bound to the claim."),
            col("Capacity", "string", 0, "The size of the bound volume."),
            col("Access Modes", "string", 0, "How the bound volume may be mounted."),
            col("StorageClass", "string", 0, "StorageClass of the pvc"),
            col("VolumeAttributesClass", "string", 0, "VolumeAttributesClass of the pvc"),
            AGE,
            col("VolumeMode", "string", 1, "Filesystem or Block."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let volume = print::s(obj, "/spec/volumeName");
        let capacity = if volume.is_empty() { "" } else { print::s(obj, "/status/capacity/storage") };
        let modes = if volume.is_empty() { String::new() } else { access_modes(obj.pointer("/status/accessModes")) };
        vec![
            print::name(obj),
            json!(terminating_or(obj, print::s(obj, "/status/phase"))),
            json!(volume),
            json!(capacity),
            json!(modes),
            json!(class_of(obj)),
            json!(or_unset(print::s(obj, "/spec/volumeAttributesClassName"))),
            print::age_of(obj),
            json!(or_unset(print::s(obj, "/spec/volumeMode"))),
        ]
    }
}

impl Strategy for PersistentVolume {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::PersistentVolume>("PersistentVolume", obj, old, status_write, super::decoded)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "persistentVolumeReclaimPolicy"], json!("Retain"));
        set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = validate_claim_spec(&json!({"spec": {"accessModes": obj.pointer("/spec/accessModes")}}), "spec");
        causes.retain(|c| c.field == "spec.accessModes");
        causes.extend(positive_storage(obj.pointer("/spec/capacity/storage"), "spec.capacity[storage]"));
        causes
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Pending"});
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Capacity", "string", 0, "The size of the volume."),
            col("Access Modes", "string", 0, "How the volume may be mounted."),
            col("Reclaim Policy", "string", 0, "What happens to the volume when its claim is released."),
            col("Status", "string", 0, "The phase of the volume."),
            col("Claim", "string", 0, "The claim bound to the volume."),
            col("StorageClass", "string", 0, "StorageClass of the pv"),
            col("VolumeAttributesClass", "string", 0, "VolumeAttributesClass of the pv"),
            col("Reason", "string", 0, "Why the volume is in its phase."),
            AGE,
            col("VolumeMode", "string", 1, "Filesystem or Block."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let claim = match (print::s(obj, "/spec/claimRef/namespace"), print::s(obj, "/spec/claimRef/name")) {
            (_, "") => String::new(),
            (ns, name) => format!("{ns}/{name}"),
        };
        vec![
            print::name(obj),
            json!(print::s(obj, "/spec/capacity/storage")),
            json!(access_modes(obj.pointer("/spec/accessModes"))),
            json!(print::s(obj, "/spec/persistentVolumeReclaimPolicy")),
            json!(terminating_or(obj, print::s(obj, "/status/phase"))),
            json!(claim),
            json!(class_of(obj)),
            json!(or_unset(print::s(obj, "/spec/volumeAttributesClassName"))),
            json!(print::s(obj, "/status/reason")),
            print::age_of(obj),
            json!(or_unset(print::s(obj, "/spec/volumeMode"))),
        ]
    }
}

impl Strategy for StorageClass {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::storage::v1::StorageClass>("StorageClass", obj, old, status_write, super::decoded)
    }

    fn default(&self, obj: &mut Value) {
        set_default(obj, &["reclaimPolicy"], json!("Delete"));
        set_default(obj, &["volumeBindingMode"], json!("Immediate"));
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        if print::s(obj, "/provisioner").is_empty() {
            causes.push(rules::required("provisioner"));
        }
        causes.extend(one_of(obj, "reclaimPolicy", &["Delete", "Retain"]));
        causes.extend(one_of(obj, "volumeBindingMode", &["Immediate", "WaitForFirstConsumer"]));
        if let Some(old) = old {
            for f in ["parameters", "provisioner", "reclaimPolicy"] {
                if obj.get(f) != old.get(f) {
                    causes.push(rules::forbidden(f, &format!("updates to {f} are forbidden.")));
                }
            }
            causes.extend(super::workload::immutable(obj, Some(old), &["volumeBindingMode"]));
        }
        causes
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Provisioner", "string", 0, "The provisioner that makes the class's volumes."),
            col("ReclaimPolicy", "string", 0, "What happens to a volume of the class when its claim is released."),
            col("VolumeBindingMode", "string", 0, "When a claim of the class is bound."),
            col("AllowVolumeExpansion", "string", 0, "Whether claims of the class may grow."),
            AGE,
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let annotations = obj.pointer("/metadata/annotations");
        let default = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
            .iter()
            .any(|k| annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true"));
        let name = print::s(obj, "/metadata/name");
        vec![
            json!(if default { format!("{name} (default)") } else { name.to_string() }),
            json!(print::s(obj, "/provisioner")),
            json!(print::s(obj, "/reclaimPolicy")),
            json!(print::s(obj, "/volumeBindingMode")),
            json!(obj.get("allowVolumeExpansion").and_then(Value::as_bool).unwrap_or(false).to_string()),
            print::age_of(obj),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "mysql-pv-claim"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}})
    }

    #[test]
    fn a_claim_needs_an_access_mode_and_a_positive_request() {
        assert!(PersistentVolumeClaim.validate(&claim(), None).is_empty());
        let mut c = claim();
        c["spec"]["accessModes"] = json!([]);
        c["spec"]["resources"]["requests"]["storage"] = json!("0");
        let causes = PersistentVolumeClaim.validate(&c, None);
        assert_eq!(causes[0].message, "Required value: at least 1 access mode is required");
        assert_eq!(
            (causes[1].field.as_str(), causes[1].message.as_str()),
            ("spec.resources[storage]", "Invalid value: \"0\": must be greater than zero")
        );
    }

    #[test]
    fn a_claim_may_grow_and_bind_once_but_not_change_its_modes() {
        let old = claim();
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("30Gi");
        grown["spec"]["volumeName"] = json!("pv-1");
        assert!(PersistentVolumeClaim.validate(&grown, Some(&old)).is_empty());
        let mut rebound = grown.clone();
        rebound["spec"]["volumeName"] = json!("pv-2");
        assert_eq!(PersistentVolumeClaim.validate(&rebound, Some(&grown))[0].field, "spec");
    }

    #[test]
    fn a_bound_claim_shows_its_capacity_and_modes() {
        let mut c = claim();
        c["spec"]["volumeName"] = json!("pvc-1");
        c["spec"]["storageClassName"] = json!("standard");
        c["status"] = json!({"phase": "Bound", "capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"]});
        let cells = PersistentVolumeClaim.cells(&c);
        assert_eq!(cells[1..7], [json!("Bound"), json!("pvc-1"), json!("20Gi"), json!("RWO"), json!("standard"), json!("<unset>")]);
    }

    #[test]
    fn a_storage_class_keeps_its_provisioner_and_parameters() {
        let mut old = json!({"metadata": {"name": "fast", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                             "provisioner": "k8s.io/minikube-hostpath", "parameters": {"type": "pd-ssd"}});
        StorageClass.default(&mut old);
        assert_eq!(
            StorageClass.cells(&old)[..4],
            [json!("fast (default)"), json!("k8s.io/minikube-hostpath"), json!("Delete"), json!("Immediate")]
        );
        let mut new = old.clone();
        new["parameters"] = json!({"type": "pd-standard"});
        new["volumeBindingMode"] = json!("WaitForFirstConsumer");
        let causes = StorageClass.validate(&new, Some(&old));
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["parameters", "volumeBindingMode"]);
        assert_eq!(causes[0].message, "Forbidden: updates to parameters are forbidden.");
    }
}
