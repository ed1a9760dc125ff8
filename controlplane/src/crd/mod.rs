//! CustomResourceDefinitions: validating them, and turning an Established CRD into the
//! resource types the registry serves in its workspace.

pub use apimachinery::schema;

use serde_json::{json, Value};

use crate::error::Cause;
use crate::jsonpath::JsonPath;

/// The string at `ptr` in a CRD (or a part of one), or "".
pub(crate) fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// Validates a CRD on create and update (apiextensions validation.go, the parts
/// that keep the server consistent).
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let name = s(crd, "/metadata/name");
    if group.is_empty() {
        causes.push(Cause::new("FieldValueRequired", "spec.group", "Required value"));
    } else if !group.contains('.') {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::new("FieldValueRequired", "spec.names.plural", "Required value"));
    }
    if s(crd, "/spec/names/kind").is_empty() {
        causes.push(Cause::new("FieldValueRequired", "spec.names.kind", "Required value"));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match s(crd, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        other => causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!("Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""),
        )),
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    }
    let storage = versions.iter().filter(|v| v.get("storage") == Some(&json!(true))).count();
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            format!("Invalid value: must have exactly one version marked as storage version, found {storage}"),
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        let field = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v.pointer("/schema/openAPIV3Schema") {
            None => causes.push(Cause::new("FieldValueRequired", &field, "Required value: schemas are required")),
            Some(schema) => causes.extend(schema::check_structural(schema, &field)),
        }
        for (j, col) in v.get("additionalPrinterColumns").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let path = s(col, "/jsonPath");
            if let Err(e) = JsonPath::parse(path) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &format!("spec.versions[{i}].additionalPrinterColumns[{j}].jsonPath"),
                    format!("Invalid value: \"{path}\": {e}"),
                ));
            }
        }
    }
    causes
}

/// Whether a CRD's status says it is served.
pub fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

/// The status the establishing controller writes: names accepted, Established.
pub fn established_status(crd: &Value, now: &str) -> Value {
    let names = crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
        accepted["singular"] = json!(s(crd, "/spec/names/kind").to_lowercase());
    }
    if accepted.get("listKind").is_none_or(Value::is_null) {
        accepted["listKind"] = json!(format!("{}List", s(crd, "/spec/names/kind")));
    }
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage") == Some(&json!(true)))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    json!({
        "acceptedNames": accepted,
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}
