//! CustomResourceDefinitions (kubernetes apiextensions-apiserver pkg/registry/customresourcedefinition).

use serde_json::{json, Value};

use super::{decode_typed, decoded, Decoded, Strategy};
use crate::error::Cause;

/// apiextensions.k8s.io/v1 CustomResourceDefinition: validated by [`crate::crd`], no
/// stored versions on creation, and a generation that moves on a spec change.
#[derive(Debug)]
pub struct CustomResourceDefinition;

impl Strategy for CustomResourceDefinition {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
        decode_typed::<ext::CustomResourceDefinition>("CustomResourceDefinition", obj, old, status_write, decoded)
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        crate::crd::validate_crd(obj)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({"storedVersions": []});
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        Some(old.get("spec") != new.get("spec"))
    }
}
