//! The rules of each kind, one strategy per kind, as kube-apiserver keeps a
//! `strategy.go` beside each resource's storage.
//!
//! A [`Strategy`] says how an object of its kind is decoded (into the `k8s-openapi`
//! type for a built-in kind, by its schema for a custom resource), defaulted and
//! validated; what a create, an update and a delete set on it; which field selectors
//! it supports; how it converts to the version a client asked for; and the columns
//! `kubectl get` prints for it. The registry gives every resource type its strategy,
//! and the generic resource engine ([`crate::api`]) asks it: the engine never branches
//! on a kind. Serving a new built-in kind is one strategy here and one line in the
//! registry.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{ApiError, Cause};
use crate::objmeta::NameRule;
use crate::patch::meta::{BuiltinPatchMeta, PatchMeta};

mod apps;
mod autoscaling;
mod batch;
mod config;
mod crd;
pub mod custom;
mod event;
mod namespace;
mod networking;
mod other;
mod pod;
mod policy;
mod print;
mod rules;
mod service;
mod storage;
mod workload;

pub use apps::{ControllerRevision, DaemonSet, StatefulSet};
pub use autoscaling::{HorizontalPodAutoscaler, HorizontalPodAutoscalerV1};
pub use batch::{CronJob, Job, CONTROLLER_UID_LABEL, JOB_NAME_LABEL};
pub use config::{ConfigMap, Secret, MAX_DATA_SIZE};
pub use crd::CustomResourceDefinition;
pub use custom::{CustomDef, CustomResource, PrinterColumn};
pub use event::{event_from_v1, event_to_v1, Event, EventV1};
pub use namespace::Namespace;
pub use networking::{Ingress, NetworkPolicy};
pub use other::{ClusterRole, ClusterRoleBinding, Lease, Node, ServiceAccount};
pub use pod::{Pod, WorkspacePod};
pub use policy::PodDisruptionBudget;
pub use service::Service;
pub use storage::{class_of, PersistentVolume, PersistentVolumeClaim, StorageClass};
pub use workload::{Deployment, ReplicaSet};

/// The outcome of decoding an object.
pub struct Decoded {
    /// The object as its type understood it (unknown fields dropped).
    pub value: Value,
    /// Paths of fields the type does not have, for `fieldValidation`.
    pub unknown: Vec<String>,
}

/// The rules of one kind. Every method but [`Strategy::decode`] has the behaviour
/// most kinds share, so a kind states only where it differs.
pub trait Strategy: Send + Sync + fmt::Debug {
    // Admission.

    /// Decodes a written object into the form that is stored, reporting what its type
    /// does not know. `old` is the stored object of an update, and `status_write` says
    /// that only the status may change; a decoder may reuse what they show unchanged.
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String>;

    /// The format of the kind's names.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// Fills the defaults of a create or an update, as the Kubernetes defaulters do
    /// for the fields users see in `kubectl get -o yaml`.
    fn default(&self, _obj: &mut Value) {}

    /// The kind's validation (422 causes), beyond decoding and the common metadata.
    /// `old` is the stored object of an update.
    fn validate(&self, _obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        Vec::new()
    }

    /// The cause for data over the kind's limit that `doc` alone already shows
    /// (checked before the costly steps of a write); `doc` may be the object, an apply
    /// configuration or a merge patch, so it must never refuse what validation passes.
    fn data_size_cause(&self, _doc: &Value) -> Option<Cause> {
        None
    }

    /// A floor under the bytes of `doc`'s kind-specific data in the stored JSON.
    fn data_bytes_floor(&self, _doc: &Value) -> usize {
        0
    }

    // Create, update, delete (kube-apiserver's PrepareForCreate, PrepareForUpdate, and
    // the delete strategy).

    /// Sets what a new object starts with (after any status the client sent is dropped).
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// Restores, on an update of the main resource, what only the kind's own flows may change.
    fn prepare_for_update(&self, _obj: &mut Value, _old: &Value) {}

    /// Takes, on a status write, what besides the status the kind lets it change:
    /// `merged` is the stored object with the new status, `sent` the object written.
    fn prepare_for_status_update(&self, _merged: &mut Value, _sent: &Value) {}

    /// Whether a change moves `metadata.generation`; `None` for a kind without one.
    fn generation_changed(&self, _old: &Value, _new: &Value) -> Option<bool> {
        None
    }

    /// Whether the kind has a `metadata.generation`.
    fn has_generation(&self) -> bool {
        self.generation_changed(&Value::Null, &Value::Null).is_some()
    }

    /// Whether an update without a resourceVersion is allowed (AllowUnconditionalUpdate).
    fn allow_unconditional_update(&self) -> bool {
        true
    }

    /// Refuses the creation of an object that may never be created here.
    fn check_create(&self, _name: &str) -> Result<(), ApiError> {
        Ok(())
    }

    /// Refuses the deletion of an object that may never be deleted.
    fn check_delete(&self, _name: &str) -> Result<(), ApiError> {
        Ok(())
    }

    /// Whether every object of the kind is deleted gracefully: marked, and removed
    /// once its finalization is over, even without a finalizer in its metadata.
    fn deletes_gracefully(&self) -> bool {
        false
    }

    /// Marks an object that is about to be deleted gracefully.
    fn prepare_for_delete(&self, _obj: &mut Value) {}

    /// Whether the kind's own finalization (outside `metadata.finalizers`) still holds
    /// an object that is being deleted.
    fn finalizing(&self, _obj: &Value) -> bool {
        false
    }

    /// Whether a finished delete answers with the object (custom resources), rather
    /// than with a Success Status (built-in kinds, read by kube-rs as "gone").
    fn delete_answers_with_object(&self) -> bool {
        false
    }

    // Reading.

    /// Field selectors the kind supports beyond `metadata.name` and `metadata.namespace`.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// The value of a selectable field of `obj`; by default the field at that path.
    fn field(&self, obj: &Value, field: &str) -> Option<String> {
        field_value(obj, field)
    }

    /// Whether stored objects are shown converted ([`Strategy::to_external`] changes them).
    fn converts(&self) -> bool {
        false
    }

    /// A stored object in the shape of the version served.
    fn to_external<'a>(&self, stored: &'a Value) -> Cow<'a, Value> {
        Cow::Borrowed(stored)
    }

    /// The group and resource of another type whose storage this one shares (the
    /// events.k8s.io Events are core Events), as in Kubernetes.
    fn stored_as(&self) -> Option<(&'static str, &'static str)> {
        None
    }

    /// Whether the kind has the `binding` subresource (pods).
    fn has_binding(&self) -> bool {
        false
    }

    /// List semantics for patches and field ownership.
    fn patch_meta(&self) -> &dyn PatchMeta {
        &BuiltinPatchMeta
    }

    /// The schema published in OpenAPI.
    fn openapi_schema(&self) -> Value {
        json!({"type": "object"})
    }

    /// The CRD that defines the kind, for custom resources.
    fn crd_name(&self) -> Option<&str> {
        None
    }

    // Tables.

    /// The column definitions of `kubectl get`: by default Name and Created At, the
    /// apiserver's default table.
    fn columns(&self) -> Vec<Value> {
        print::columns(&[print::NAME, print::CREATED_AT])
    }

    /// One object's cells, in the order of [`Strategy::columns`].
    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(print::s(obj, "/metadata/creationTimestamp"))]
    }
}

/// Decodes into the `k8s-openapi` type `T` and back, the way kube-apiserver decodes
/// into its Go types: what the type does not know is reported and dropped, and
/// strict validation turns it into an error.
///
/// What a write leaves as stored skips the round trip: the spec of a status write,
/// and a spec, a status or a managedFields list that an update sends back unchanged
/// (a label patch, a finalizer's removal). The stored one was decoded when it was
/// written, and goes back in where the typed encoding puts it. `check` sees the
/// decoded object before that.
pub(crate) fn decode_typed<T: DeserializeOwned + Serialize>(
    kind: &str,
    mut obj: Value,
    old: Option<&Value>,
    status_write: bool,
    check: fn(&str, Decoded) -> Result<Decoded, String>,
) -> Result<Decoded, String> {
    let mut take_stored = |key: &str| {
        let stored = old?.get(key).filter(|stored| obj.get(key) == Some(*stored))?;
        obj.as_object_mut()?.remove(key);
        Some(stored.clone())
    };
    let (stored_spec, stored_status) = match (status_write, old) {
        (true, Some(_)) => (obj.as_object_mut().and_then(|o| o.remove("spec")), None),
        (false, Some(_)) => (take_stored("spec"), take_stored("status")),
        _ => (None, None),
    };
    let stored_fields = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let managed_fields = match obj.pointer("/metadata/managedFields") {
        Some(list) if Some(list) == stored_fields => {
            obj.pointer_mut("/metadata").and_then(Value::as_object_mut).and_then(|m| m.remove("managedFields"))
        }
        _ => None,
    };
    let mut decoded = check(kind, roundtrip::<T>(kind, &obj)?)?;
    let v = &mut decoded.value;
    if let (Some(spec), Some(o)) = (stored_spec, v.as_object_mut()) {
        let at = o.keys().position(|k| k == "status").unwrap_or(o.len());
        o.shift_insert(at, "spec".into(), spec);
    }
    if let (Some(status), Some(o)) = (stored_status, v.as_object_mut()) {
        o.insert("status".into(), status);
    }
    if let (Some(list), Some(m)) = (managed_fields, v.pointer_mut("/metadata").and_then(Value::as_object_mut)) {
        let at = m.keys().position(|k| k.as_str() > "managedFields").unwrap_or(m.len());
        m.shift_insert(at, "managedFields".into(), list);
    }
    Ok(decoded)
}

/// No check after decoding.
pub(crate) fn decoded(_kind: &str, d: Decoded) -> Result<Decoded, String> {
    Ok(d)
}

/// Decodes into the `k8s-openapi` type and back, reporting the fields it dropped.
fn roundtrip<T: DeserializeOwned + Serialize>(kind: &str, input: &Value) -> Result<Decoded, String> {
    // The path makes the message name the field, as the apiserver's decoder does.
    let typed: T = serde_path_to_error::deserialize(input)
        .map_err(|e| format!("{kind} in version \"v1\" cannot be handled as a {kind}: {}: {}", e.path(), e.inner()))?;
    let value = serde_json::to_value(&typed).map_err(|e| format!("re-encoding {kind}: {e}"))?;
    let mut unknown = Vec::new();
    diff_unknown(input, &value, "", &mut unknown);
    unknown.sort();
    Ok(Decoded { value, unknown })
}

fn diff_unknown(input: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(i), Value::Object(k)) => {
            for (key, v) in i {
                let p = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match k.get(key) {
                    Some(kv) => diff_unknown(v, kv, &p, out),
                    // A null is "unset", which the typed decode also drops.
                    None if !v.is_null() => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(i), Value::Array(k)) => {
            for (n, (iv, kv)) in i.iter().zip(k).enumerate() {
                diff_unknown(iv, kv, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// Sets the value at `path` unless one is there (a null counts as none).
pub(crate) fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, seg) in path.iter().enumerate() {
        let Some(map) = cur.as_object_mut() else { return };
        if i == path.len() - 1 {
            if map.get(*seg).is_none_or(Value::is_null) {
                map.insert((*seg).into(), value);
            }
            return;
        }
        cur = map.entry(*seg).or_insert_with(|| json!({}));
    }
}

/// A string rendering of the value at a dotted path, for field selectors.
pub fn field_value(obj: &Value, field: &str) -> Option<String> {
    let mut cur = obj;
    for seg in field.split('.') {
        cur = cur.get(seg)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}
