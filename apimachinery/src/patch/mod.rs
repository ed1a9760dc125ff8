//! Patch semantics: strategic merge patch, server-side apply field ownership, and the
//! list/map metadata both depend on. JSON patch and merge patch come from `json-patch`.

pub mod apply;
pub mod meta;
pub mod strategic;

use serde_json::Value;

/// A value's identity as text: compact JSON with object keys sorted and `-0.0` written
/// as `0.0`, so two values are `==` exactly when their texts are equal. Lists of
/// identities (merge keys, set elements, `$setElementOrder`) are looked up by it in a
/// hash set or map, not scanned: scanning made merging two long lists quadratic.
pub(crate) fn identity_text(v: &Value) -> String {
    let mut out = String::new();
    write_identity(v, &mut out);
    out
}

fn write_identity(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            // serde_json compares maps regardless of key order.
            let mut fields: Vec<(&String, &Value)> = map.iter().collect();
            fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in fields.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_identity(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_identity(item, out);
            }
            out.push(']');
        }
        // `-0.0 == 0.0`, but they print differently.
        Value::Number(n) if n.is_f64() && n.as_f64() == Some(0.0) => out.push_str("0.0"),
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::identity_text;
    use serde_json::json;

    #[test]
    fn identity_text_is_equal_exactly_when_values_are() {
        let values = [
            json!(null),
            json!(0),
            json!(0.0),
            json!(-0.0),
            json!(1),
            json!(1.0),
            json!(-1),
            json!(u64::MAX),
            json!(1e300),
            json!("1"),
            json!("a\"b"),
            json!(true),
            json!([]),
            json!([1, 2]),
            json!([2, 1]),
            json!({}),
            json!({"a": 1, "b": [2]}),
            json!({"b": [2], "a": 1}),
            json!({"a": 1, "b": [2.0]}),
            json!({"a": {"c": null, "d": 0}}),
            json!({"a": {"d": -0.0, "c": null}}),
        ];
        for a in &values {
            for b in &values {
                assert_eq!(a == b, identity_text(a) == identity_text(b), "{a} vs {b}");
            }
        }
    }
}
