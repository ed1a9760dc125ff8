//! Field rules that several kinds share, with the messages kube-apiserver's validation
//! gives (k8s.io/apimachinery/pkg/util/validation and pkg/apis/core/validation).

use serde_json::Value;

use crate::error::Cause;
use crate::objmeta;
use crate::selector::LabelSelector;

/// `field: Required value`.
pub fn required(field: &str) -> Cause {
    Cause::new("FieldValueRequired", field, "Required value")
}

/// `field: Invalid value: <value>: <why>`, the value rendered as JSON (strings quoted).
pub fn invalid(field: &str, value: &Value, why: &str) -> Cause {
    Cause::new("FieldValueInvalid", field, format!("Invalid value: {value}: {why}"))
}

/// `field: Unsupported value: "x": supported values: "a", "b"`.
pub fn unsupported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let list = supported.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    Cause::new("FieldValueNotSupported", field, format!("Unsupported value: \"{value}\": supported values: {list}"))
}

/// `field: Forbidden: <why>`.
pub fn forbidden(field: &str, why: &str) -> Cause {
    Cause::new("FieldValueForbidden", field, format!("Forbidden: {why}"))
}

/// `field: Duplicate value: <value>`.
pub fn duplicate(field: &str, value: &Value) -> Cause {
    Cause::new("FieldValueDuplicate", field, format!("Duplicate value: {value}"))
}

/// A port number: 1 to 65535 (IsValidPortNum).
pub fn port_number(field: &str, v: &Value) -> Option<Cause> {
    let ok = v.as_i64().is_some_and(|p| (1..=65535).contains(&p));
    (!ok).then(|| invalid(field, v, "must be between 1 and 65535, inclusive"))
}

/// An IANA service name, as a named port is (IsValidPortName).
pub fn port_name(name: &str) -> Result<(), &'static str> {
    if name.len() > 15 {
        Err("must be no more than 15 characters")
    } else if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        Err("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    } else if name.contains("--") {
        Err("must not contain consecutive hyphens")
    } else if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        Err("must contain at least one letter (a-z)")
    } else if name.starts_with('-') || name.ends_with('-') {
        Err("must not begin or end with a hyphen")
    } else {
        Ok(())
    }
}

/// A port given by number or by name (ValidatePortNumOrName).
pub fn port_number_or_name(field: &str, v: &Value) -> Option<Cause> {
    match v {
        Value::String(name) => port_name(name).err().map(|why| invalid(field, v, why)),
        _ => port_number(field, v),
    }
}

/// A `metav1.LabelSelector` that parses (ValidateLabelSelector).
pub fn label_selector(field: &str, v: &Value) -> Option<Cause> {
    LabelSelector::from_label_selector(v).err().map(|e| invalid(field, v, &e.to_string()))
}

/// A map of labels (ValidateLabels): every key a qualified name, every value a label value.
pub fn labels(field: &str, v: Option<&Value>) -> Vec<Cause> {
    let map = v.and_then(Value::as_object).into_iter().flatten();
    map.filter_map(|(k, val)| {
        let value = val.as_str().unwrap_or_default();
        objmeta::validate_label(k, value).err().map(|why| invalid(field, &Value::String(format!("{k}={value}")), &why))
    })
    .collect()
}

/// The `metav1.LabelSelector` at `ptr` as `kubectl get` prints it: `app=web,tier in (a,b)`,
/// or `<none>` when it selects everything or is missing.
pub fn selector_cell(obj: &Value, ptr: &str) -> String {
    let text = obj.pointer(ptr).map(|s| LabelSelector::from_label_selector(s).map(|s| s.to_string()));
    match text {
        Some(Ok(t)) if !t.is_empty() => t,
        Some(Err(_)) => "<error>".into(),
        _ => "<none>".into(),
    }
}
