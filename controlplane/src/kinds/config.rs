//! ConfigMaps and Secrets (kubernetes pkg/registry/core/configmap and secret): config
//! keys, the 1 MiB limit on their data, and a Secret's write-only `stringData`.

use serde_json::{json, Map, Value};

use super::print::{self, col, AGE, NAME};
use super::{decode_typed, decoded, set_default, Decoded, Strategy};
use crate::error::Cause;
use crate::objmeta;

/// The most data a ConfigMap or a Secret may hold (kubernetes pkg/apis/core MaxSecretSize).
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

/// core/v1 ConfigMap.
#[derive(Debug)]
pub struct ConfigMap;

/// core/v1 Secret.
#[derive(Debug)]
pub struct Secret;

impl Strategy for ConfigMap {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::ConfigMap>("ConfigMap", obj, old, status_write, decoded)
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let mut total = 0usize;
        let data = obj.get("data").and_then(Value::as_object);
        for (key, v) in data.into_iter().flatten() {
            causes.extend(config_key_causes(key, "data"));
            total += v.as_str().map_or(0, str::len);
        }
        for (key, v) in obj.get("binaryData").and_then(Value::as_object).into_iter().flatten() {
            causes.extend(config_key_causes(key, "binaryData"));
            if data.is_some_and(|d| d.contains_key(key)) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &format!("data[{key}]"),
                    format!("Invalid value: \"{key}\": duplicate of key present in binaryData"),
                ));
            }
            total += v.as_str().map_or(0, base64_len);
        }
        if total > MAX_DATA_SIZE {
            causes.push(too_large(""));
        }
        causes
    }

    /// Every string value `doc` sets is in the object written from it, and keys that
    /// are not config keys (a strategic patch's `$patch`) are left out, so the figure
    /// never exceeds the written object's.
    fn data_size_cause(&self, doc: &Value) -> Option<Cause> {
        let total = sum(doc, "data", str::len, None) + sum(doc, "binaryData", base64_len, None);
        (total > MAX_DATA_SIZE).then(|| too_large(""))
    }

    fn data_bytes_floor(&self, doc: &Value) -> usize {
        floor(map(doc, "data")) + floor(map(doc, "binaryData"))
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Data", "string", 0, "Number of data entries"), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(print::count(obj, "data") + print::count(obj, "binaryData")), print::age_of(obj)]
    }
}

impl Strategy for Secret {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::Secret>("Secret", obj, old, status_write, decoded)
    }

    fn default(&self, obj: &mut Value) {
        // stringData is write-only: it is merged into data and never stored.
        if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
            use base64::Engine;
            let data = obj.as_object_mut().map(|o| o.entry("data").or_insert_with(|| json!({})));
            if let Some(Value::Object(data)) = data {
                for (k, v) in sd {
                    let raw = v.as_str().unwrap_or_default();
                    data.insert(k, Value::String(base64::engine::general_purpose::STANDARD.encode(raw)));
                }
            }
        }
        set_default(obj, &["type"], json!("Opaque"));
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let mut total = 0usize;
        for (key, v) in obj.get("data").and_then(Value::as_object).into_iter().flatten() {
            causes.extend(config_key_causes(key, "data"));
            total += v.as_str().map_or(0, base64_len);
        }
        if total > MAX_DATA_SIZE {
            causes.push(too_large("data"));
        }
        causes
    }

    /// A Secret's `stringData` goes into `data`, replacing the same key there.
    fn data_size_cause(&self, doc: &Value) -> Option<Cause> {
        let total = sum(doc, "data", base64_len, map(doc, "stringData")) + sum(doc, "stringData", str::len, None);
        (total > MAX_DATA_SIZE).then(|| too_large("data"))
    }

    /// stringData is stored base64-encoded in data (longer than it is sent), in place
    /// of the same key's entry there.
    fn data_bytes_floor(&self, doc: &Value) -> usize {
        let string_data = map(doc, "stringData");
        let replaced: usize = map(doc, "data")
            .into_iter()
            .flatten()
            .filter(|(k, _)| string_data.is_some_and(|s| s.contains_key(*k)))
            .filter_map(|(k, v)| Some(k.len() + v.as_str()?.len() + 5))
            .sum();
        floor(map(doc, "data")) - replaced + floor(string_data)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Type", "string", 0, "The type of the secret"), col("Data", "string", 0, "Number of data entries"), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(print::s(obj, "/type")), json!(print::count(obj, "data")), print::age_of(obj)]
    }
}

fn map<'a>(doc: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    doc.get(field).and_then(Value::as_object)
}

/// The data `field` of `doc` holds, measured by `len`, leaving out the keys of `skip`.
fn sum(doc: &Value, field: &str, len: fn(&str) -> usize, skip: Option<&Map<String, Value>>) -> usize {
    map(doc, field)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with('$') && !skip.is_some_and(|s| s.contains_key(*k)))
        .filter_map(|(_, v)| Some(len(v.as_str()?)))
        .sum()
}

/// A floor under the bytes a map of strings takes in the stored JSON.
fn floor(m: Option<&Map<String, Value>>) -> usize {
    m.map_or(0, objmeta::string_entries_floor)
}

/// A ConfigMap or Secret key (kubernetes apimachinery IsConfigMapKey).
fn config_key_causes(key: &str, field: &str) -> Option<Cause> {
    let ok_chars = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let why = if key.len() > 253 {
        "must be no more than 253 characters"
    } else if !ok_chars {
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    } else if key == "." || key == ".." {
        "must not be '.' or '..'"
    } else if key.starts_with("..") {
        "must not start with '..'"
    } else {
        return None;
    };
    Some(Cause::new("FieldValueInvalid", &format!("{field}[{key}]"), format!("Invalid value: \"{key}\": {why}")))
}

fn too_large(field: &str) -> Cause {
    Cause::new("FieldValueTooLong", field, format!("Too long: may not be more than {MAX_DATA_SIZE} bytes"))
}

/// The decoded length of standard base64 text.
fn base64_len(text: &str) -> usize {
    let body = text.trim_end_matches('=');
    body.len() * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The early size checks never refuse what validation would pass, and their floor
    /// never exceeds the stored data: each case is checked against the object as it is
    /// defaulted, validated and serialized.
    #[test]
    fn early_size_checks_agree_with_validation_and_the_stored_size() {
        use base64::Engine;
        let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n]);
        let kib = 1024;
        let (cm, secret): (&dyn Strategy, &dyn Strategy) = (&ConfigMap, &Secret);
        let cases = [
            (cm, json!({"data": {"a": "x".repeat(MAX_DATA_SIZE)}}), false),
            (cm, json!({"data": {"a": "x".repeat(MAX_DATA_SIZE + 1)}}), true),
            (cm, json!({"data": {"a": "x".repeat(600 * kib)}, "binaryData": {"b": b64(600 * kib)}}), true),
            // A merge patch's null removes a key: it weighs nothing.
            (cm, json!({"data": {"a": "x".repeat(600 * kib), "b": null}}), false),
            (secret, json!({"data": {"a": b64(MAX_DATA_SIZE)}}), false),
            (secret, json!({"data": {"a": b64(MAX_DATA_SIZE + 1)}}), true),
            (secret, json!({"stringData": {"a": "x".repeat(MAX_DATA_SIZE + 1)}}), true),
            // stringData replaces data's entry of the same key: counted once.
            (secret, json!({"data": {"a": b64(900 * kib)}, "stringData": {"a": "x".repeat(900 * kib)}}), false),
            (secret, json!({"data": {"a": b64(600 * kib)}, "stringData": {"b": "x".repeat(600 * kib)}}), true),
        ];
        for (i, (kind, doc, over)) in cases.into_iter().enumerate() {
            assert_eq!(kind.data_size_cause(&doc).is_some(), over, "case {i}: the early check");
            let mut full = doc.clone();
            full["metadata"] = json!({"name": "n"});
            let floor = kind.data_bytes_floor(&full);
            // Nulls are a patch's, not an object's.
            if let Some(d) = full.get_mut("data").and_then(Value::as_object_mut) {
                d.retain(|_, v| !v.is_null());
            }
            kind.default(&mut full);
            let too_long = kind.validate(&full, None).iter().any(|c| c.reason == "FieldValueTooLong");
            assert_eq!(too_long, over, "case {i}: validation");
            let stored = ["data", "binaryData"].iter().filter_map(|f| full.get(f)).map(|v| serde_json::to_vec(v).unwrap().len()).sum();
            assert!(floor <= stored, "case {i}: floor {floor} over the stored {stored}");
        }
    }

    #[test]
    fn secret_string_data_becomes_data() {
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"k": "hi"}});
        Secret.default(&mut s);
        assert_eq!(s["data"]["k"], "aGk=");
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
    }
}
