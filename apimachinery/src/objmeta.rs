//! ObjectMeta rules shared by every kind: name formats, label and annotation syntax,
//! timestamps, and the small accessors the handlers use on JSON objects.

use serde_json::{Map, Value};

use crate::Cause;

/// The current time as Kubernetes serializes `metav1.Time` (RFC 3339, seconds).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The current time as `metav1.MicroTime` (used by events.k8s.io and Leases).
pub fn now_micro() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Renders the age of an RFC 3339 timestamp as kubectl shows it ("5m", "3h12m", "4d").
/// The thresholds follow apimachinery's `duration.HumanDuration`.
pub fn age(ts: Option<&str>) -> String {
    let Some(ts) = ts.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = jiff::Timestamp::now().as_second() - ts.as_second();
    human_duration(secs)
}

/// apimachinery `duration.HumanDuration` for a number of seconds.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    let y = d / 365;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if y < 2 {
        format!("{d}d")
    } else if y < 8 {
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{y}y")
    }
}

/// `metadata` of an object, if it is a map.
pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata`, created when missing.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"].as_object_mut().expect("metadata was just made an object")
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

/// The object's finalizers.
pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// RFC 1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, ≤ 63.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty() && s.len() <= DNS1123_LABEL_MAX && s.chars().all(is_label_char) && !s.starts_with('-') && !s.ends_with('-');
    if ok {
        Ok(())
    } else if s.len() > DNS1123_LABEL_MAX {
        Err(format!("must be no more than {DNS1123_LABEL_MAX} characters"))
    } else {
        Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
    }
}

/// RFC 1035 label: an RFC 1123 label that starts with a letter (Service names).
pub fn dns1035_label(s: &str) -> Result<(), String> {
    let ok = dns1123_label(s).is_ok() && s.starts_with(|c: char| c.is_ascii_lowercase());
    if ok {
        Ok(())
    } else if s.len() > DNS1123_LABEL_MAX {
        Err(format!("must be no more than {DNS1123_LABEL_MAX} characters"))
    } else {
        Err("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into())
    }
}

/// RFC 1123 subdomain: dot-separated labels, ≤ 253.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= DNS1123_SUBDOMAIN_MAX
        && s.split('.').all(|p| !p.is_empty() && p.chars().all(is_label_char) && !p.starts_with('-') && !p.ends_with('-'));
    if ok {
        Ok(())
    } else if s.len() > DNS1123_SUBDOMAIN_MAX {
        Err(format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"))
    } else {
        Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
    }
}

/// Names accepted for paths: anything without '/' or '%', and not "." or "..".
pub fn path_segment_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        Err("name or generateName is required".into())
    } else if s == "." || s == ".." {
        Err(format!("may not be '{s}'"))
    } else if s.contains('/') || s.contains('%') {
        Err(format!("may not contain '{}'", if s.contains('/') { '/' } else { '%' }))
    } else {
        Ok(())
    }
}

/// Qualified name (`prefix/name`) as used for label and annotation keys.
fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        dns1123_subdomain(p).map_err(|e| format!("prefix part {e}"))?;
    }
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    if name_ok {
        Ok(())
    } else {
        Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') and be no more than 63 characters".into())
    }
}

/// A label's key and value, as the apiserver validates them.
pub fn validate_label(key: &str, value: &str) -> Result<(), String> {
    qualified_name(key).map_err(|e| format!("key {key:?}: {e}"))?;
    label_value(value).map_err(|e| format!("value {value:?}: {e}"))
}

fn label_value(v: &str) -> Result<(), String> {
    let ok = v.is_empty()
        || (v.len() <= 63
            && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && v.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?') and be no more than 63 characters".into())
    }
}

/// How a kind's names are validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (namespaces).
    Label,
    /// RFC 1035 label (services).
    Dns1035Label,
    /// Any path-safe string (events, custom resources).
    PathSegment,
}

/// Validates the common metadata of an object about to be stored.
pub fn validate_meta(obj: &Value, rule: NameRule) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(m) = meta(obj) else {
        causes.push(Cause::new("FieldValueRequired", "metadata", "Required value"));
        return causes;
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() {
        causes.push(Cause::new("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"));
    } else {
        let r = match rule {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::Dns1035Label => dns1035_label(name),
            NameRule::PathSegment => path_segment_name(name),
        };
        if let Err(e) = r {
            causes.push(Cause::new("FieldValueInvalid", "metadata.name", format!("Invalid value: \"{name}\": {e}")));
        }
    }
    for (field, is_labels) in [("labels", true), ("annotations", false)] {
        match m.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    if let Err(e) = qualified_name(k) {
                        causes.push(Cause::new("FieldValueInvalid", &format!("metadata.{field}"), format!("Invalid value: \"{k}\": {e}")));
                    }
                    match v.as_str() {
                        Some(s) if is_labels => {
                            if let Err(e) = label_value(s) {
                                causes.push(Cause::new("FieldValueInvalid", "metadata.labels", format!("Invalid value: \"{s}\": {e}")));
                            }
                        }
                        Some(_) => {}
                        None => causes.push(Cause::new(
                            "FieldValueTypeInvalid",
                            &format!("metadata.{field}.{k}"),
                            "Invalid value: must be a string",
                        )),
                    }
                }
            }
            Some(_) => {
                causes.push(Cause::new("FieldValueTypeInvalid", &format!("metadata.{field}"), "Invalid value: must be a map of strings"))
            }
        }
    }
    causes.extend(annotation_size_cause(obj));
    causes
}

/// The most bytes an object's annotations may hold, keys and values together
/// (apimachinery TotalAnnotationSizeLimitB).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The cause for annotations over [`MAX_ANNOTATION_BYTES`], if `doc`'s are. `doc` may
/// be an object, an apply configuration or a merge patch: the annotations it sets
/// (nulls remove one) are all in the object written from it, so their size alone can
/// refuse it.
pub fn annotation_size_cause(doc: &Value) -> Option<Cause> {
    let total: usize = doc
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| a.iter().filter_map(|(k, v)| Some(k.len() + v.as_str()?.len())).sum())
        .unwrap_or(0);
    (total > MAX_ANNOTATION_BYTES).then(|| {
        Cause::new("FieldValueTooLong", "metadata.annotations", format!("Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"))
    })
}

/// A floor under the bytes `doc`'s labels and annotations take in the stored JSON:
/// each string entry is at least `"key":"value"`. Decoding keeps both maps whatever
/// else it prunes, so an object over the store's limit on them alone cannot be stored.
pub fn metadata_bytes_floor(doc: &Value) -> usize {
    ["labels", "annotations"].iter().filter_map(|f| doc.get("metadata")?.get(f)?.as_object()).map(string_entries_floor).sum()
}

/// At least the JSON text of `map`'s entries whose values are strings.
pub fn string_entries_floor(map: &Map<String, Value>) -> usize {
    map.iter().filter_map(|(k, v)| Some(k.len() + v.as_str()?.len() + 5)).sum()
}

/// Generates a name from `generateName`, as the apiserver does: the prefix plus five
/// random lowercase alphanumerics, after cutting the prefix so the result fits 63.
pub fn generate_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    let cut = prefix.len().min(58);
    format!("{}{suffix}", &prefix[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn human_duration_matches_kubectl_thresholds() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 120), "3h2m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(100 * 86400), "100d");
    }

    #[test]
    fn invalid_names_and_labels_are_reported_with_fields() {
        let causes = validate_meta(&json!({"metadata": {"name": "Bad_Name", "labels": {"ok": "v", "a": "-x"}}}), NameRule::Subdomain);
        let fields: Vec<_> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["metadata.name", "metadata.labels"]);
        assert!(validate_meta(&json!({"metadata": {"name": "web-1.a"}}), NameRule::Subdomain).is_empty());
        assert!(!validate_meta(&json!({"metadata": {"name": "web.a"}}), NameRule::Label).is_empty());
    }

    #[test]
    fn annotation_size_counts_keys_and_values_and_skips_removals() {
        let over = |n: usize, removed: Value| {
            let doc = json!({"metadata": {"annotations": {"k": "x".repeat(n - 1), "gone": removed}}});
            annotation_size_cause(&doc).is_some()
        };
        assert!(!over(MAX_ANNOTATION_BYTES, Value::Null));
        assert!(over(MAX_ANNOTATION_BYTES + 1, Value::Null));
        assert!(over(MAX_ANNOTATION_BYTES, json!("")), "a kept key counts its own bytes");
        let doc = json!({"metadata": {"annotations": {"k": "x".repeat(MAX_ANNOTATION_BYTES)}}});
        assert_eq!(validate_meta(&doc, NameRule::Subdomain).iter().filter(|c| c.field == "metadata.annotations").count(), 1);
    }

    #[test]
    fn the_metadata_floor_is_under_its_json_text() {
        let doc = json!({"metadata": {"name": "n", "labels": {"a": "b", "cc": ""}, "annotations": {"x": "y", "z": null}}});
        let floor = metadata_bytes_floor(&doc);
        let text = serde_json::to_vec(&doc["metadata"]["labels"]).unwrap().len() + serde_json::to_vec(&json!({"x": "y"})).unwrap().len();
        assert!(floor > 0 && floor <= text, "floor {floor}, text {text}");
    }

    #[test]
    fn generated_names_keep_the_prefix_and_fit() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9, "{n}");
        assert!(generate_name(&"x".repeat(80)).len() <= 63);
    }
}
