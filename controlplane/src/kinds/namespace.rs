//! Namespaces (kubernetes pkg/registry/core/namespace).

use serde_json::{json, Value};

use super::print::{self, col, AGE, NAME};
use super::{decode_typed, decoded, Decoded, Strategy};
use crate::error::ApiError;
use crate::objmeta::{self, NameRule};

/// core/v1 Namespace: Active on creation; deleting one makes it Terminating until the
/// namespace controller has emptied it and removed its `spec.finalizers`; `default`,
/// `kube-system` and `kube-public` may not be deleted.
#[derive(Debug)]
pub struct Namespace;

impl Strategy for Namespace {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::Namespace>("Namespace", obj, old, status_write, decoded)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn default(&self, obj: &mut Value) {
        let name = objmeta::meta_str(obj, "name").unwrap_or_default().to_string();
        // The apiserver always labels namespaces with their own name.
        let labels = objmeta::meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
    }

    /// `spec.finalizers` changes only through the `finalize` flow.
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        obj["spec"] = old.get("spec").cloned().unwrap_or(Value::Null);
    }

    fn check_delete(&self, name: &str) -> Result<(), ApiError> {
        if matches!(name, "default" | "kube-system" | "kube-public") {
            return Err(ApiError::forbidden(format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")));
        }
        Ok(())
    }

    fn deletes_gracefully(&self) -> bool {
        true
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Terminating"});
    }

    fn finalizing(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Status", "string", 0, "The status of the namespace"), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(print::s(obj, "/status/phase")), print::age_of(obj)]
    }
}
