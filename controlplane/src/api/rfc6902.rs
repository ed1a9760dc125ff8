//! RFC 6902 JSON patches, as kube-apiserver applies them.

use serde_json::Value;

use crate::error::{ApiError, Cause, ObjRef};

/// The most operations a JSON patch may hold (kube-apiserver's maxJSONPatchOperations).
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Applies an RFC 6902 patch. A `test` of `null` against a missing path passes:
/// kube-runtime's finalizer helper sends exactly that for an object with no finalizers.
pub fn json_patch_apply(doc: &Value, patch_doc: &Value, kind: &str, obj: ObjRef<'_>) -> Result<Value, ApiError> {
    let ops = patch_doc.as_array().ok_or_else(|| ApiError::bad_request("a JSON patch must be a list of operations"))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::too_large_because(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let kept: Vec<Value> = ops
        .iter()
        .filter(|op| {
            let is_null_test = op.get("op").and_then(Value::as_str) == Some("test") && op.get("value").is_some_and(Value::is_null);
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            !(is_null_test && doc.pointer(path).is_none_or(Value::is_null))
        })
        .cloned()
        .collect();
    // Applied one op at a time, each against the document the ops before it made; the
    // result is dropped on any error, so the patch still applies whole or not at all.
    let mut out = doc.clone();
    // What `copy` ops add is bounded, as kube-apiserver bounds it (evanphx/json-patch's
    // AccumulatedCopySizeLimit): each copy can double the document, so a patch of a few
    // dozen ops would otherwise build gigabytes.
    let mut copied = 0usize;
    for op in kept {
        let op = lenient_replace(&out, op);
        if op.get("op").and_then(Value::as_str) == Some("copy") {
            let from = op.get("from").and_then(Value::as_str).unwrap_or_default();
            if let Some(value) = out.pointer(from) {
                copied = copied.saturating_add(json_size_up_to(value, MAX_JSON_PATCH_COPY_BYTES - copied.min(MAX_JSON_PATCH_COPY_BYTES)));
                if copied > MAX_JSON_PATCH_COPY_BYTES {
                    return Err(ApiError::too_large_because(format!(
                        "the JSON patch's copy operations add more than {MAX_JSON_PATCH_COPY_BYTES} bytes to the object"
                    )));
                }
            }
        }
        let op: json_patch::PatchOperation =
            serde_json::from_value(op).map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
        json_patch::patch(&mut out, std::slice::from_ref(&op)).map_err(|e| {
            ApiError::invalid(
                kind,
                obj.clone(),
                vec![Cause::new("FieldValueInvalid", "patch", format!("Invalid value: the patch could not be applied: {e}"))],
            )
        })?;
    }
    Ok(out)
}

/// The most bytes the `copy` operations of one JSON patch may add. kube-apiserver allows
/// 3 MiB (JSONPatchMaxCopyBytes, its body limit), but stores objects of at most 1.5 MiB
/// (etcd's request limit), as Flotilla does; 1 MiB leaves room for the object the copies
/// are made in, and keeps refusing a patch of doubling copies cheap.
const MAX_JSON_PATCH_COPY_BYTES: usize = 1024 * 1024;

/// What one copied value counts for at least: a tree of many small values costs far more
/// to build than its text is long (an object of one short key is 7 bytes of JSON).
const COPIED_NODE_BYTES: usize = 32;

/// The size a copy of `value` adds: its text as JSON (strings unescaped), and at least
/// [`COPIED_NODE_BYTES`] a value, since each one is allocated on its own; counted up to
/// `limit` and then abandoned, so the count never costs more than the limit.
fn json_size_up_to(value: &Value, limit: usize) -> usize {
    let (mut size, mut pending) = (0usize, vec![value]);
    while let Some(v) = pending.pop() {
        size += COPIED_NODE_BYTES
            + match v {
                Value::Null | Value::Bool(_) | Value::Number(_) => 0,
                Value::String(s) => s.len(),
                Value::Array(a) => {
                    pending.extend(a.iter());
                    a.len()
                }
                Value::Object(o) => {
                    pending.extend(o.values());
                    o.keys().map(|k| k.len() + 4).sum::<usize>()
                }
            };
        if size > limit {
            break;
        }
    }
    size
}

/// kube-apiserver's JSON patch library lets `replace` set a key that is absent from an
/// object that exists (evanphx/json-patch v4), where RFC 6902 refuses it; clients rely
/// on that. Such an op is applied as `add`.
fn lenient_replace(doc: &Value, mut op: Value) -> Value {
    let is_replace = op.get("op").and_then(Value::as_str) == Some("replace");
    let Some(path) = op.get("path").and_then(Value::as_str).filter(|_| is_replace) else { return op };
    let Some((parent, _)) = path.rsplit_once('/') else { return op };
    if doc.pointer(path).is_none() && doc.pointer(parent).is_some_and(Value::is_object) {
        op["op"] = Value::from("add");
    }
    op
}
