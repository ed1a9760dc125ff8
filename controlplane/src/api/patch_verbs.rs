//! PATCH, in its four kinds, and server-side apply.

use serde_json::{json, Value};

use crate::error::{ApiError, Cause};
use crate::objmeta::{self, meta_str};
use crate::patch;

use super::*;

impl Api {
    /// Server-side apply computes managedFields itself; keep what it produced (`Null`
    /// when it produced none).
    pub(super) fn merge_apply_fields(&self, mut obj: Value, applied_fields: Value) -> Value {
        if !applied_fields.is_null() {
            objmeta::meta_mut(&mut obj).insert("managedFields".into(), applied_fields);
        }
        obj
    }

    /// PATCH of the object or its status.
    pub async fn patch(
        &self,
        scope: &Scope,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        sub: Sub,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.patch_doc(scope, name, kind, decode_patch(kind, body)?, sub, opts).await
    }

    /// PATCH with the patch already decoded ([`decode_patch`]).
    pub async fn patch_doc(
        &self,
        scope: &Scope,
        name: &str,
        kind: PatchKind,
        patch_doc: Value,
        sub: Sub,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if scope.wildcard() {
            return Err(ApiError::method_not_allowed("writes are not allowed through the wildcard workspace; use /clusters/<workspace>"));
        }
        if kind == PatchKind::Strategic && scope.rt.is_custom() {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
                &["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"],
            ));
        }
        // A merge patch is an object (RFC 7386 allows any value, but kube-apiserver's
        // library refuses anything else as a bad patch), and so is an apply configuration.
        if matches!(kind, PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply { .. }) && !patch_doc.is_object() {
            return Err(ApiError::bad_request(format!("invalid {} patch: the patch must be a JSON object", kind.name())));
        }
        if let PatchKind::Apply { .. } = kind {
            if opts.field_manager.is_empty() {
                return Err(ApiError::bad_request("PATCH of type apply requires the fieldManager query parameter"));
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = match self.store.get(&scope.key(name)) {
                Some(c) => c,
                None => {
                    if let PatchKind::Apply { force } = kind {
                        return self.apply_create(scope, name, patch_doc, force, sub, opts).await;
                    }
                    return Err(ApiError::not_found(scope.obj(name)));
                }
            };
            // Patching a large object runs off the async workers (decode::heavy).
            let size = current.doc.as_ref().map_or(0, |d| d.raw().len());
            let (patched, applied_fields) = crate::decode::heavy(size, || -> Result<(Value, Option<Value>), ApiError> {
                let old = to_external(scope, &current.value);
                Ok(match kind {
                    PatchKind::Json => (json_patch_apply(&old, &patch_doc, &scope.rt.kind, scope.obj(name))?, None),
                    PatchKind::Merge => {
                        let mut v = old.into_owned();
                        json_patch::merge(&mut v, &patch_doc);
                        (v, None)
                    }
                    PatchKind::Strategic => (
                        patch::strategic::apply(&old, &patch_doc, scope.rt.patch_meta())
                            .map_err(|e| ApiError::bad_request(format!("strategic merge patch: {e}")))?,
                        None,
                    ),
                    PatchKind::Apply { force } => {
                        let full = self.server_side_apply(scope, name, Some(&old), &patch_doc, force, sub, opts)?;
                        let fields = full.pointer("/metadata/managedFields").cloned().unwrap_or(Value::Null);
                        (full, Some(fields))
                    }
                })
            })
            .await?;
            // The patched document must still be an object of the type (a JSON patch can
            // replace the root with anything).
            if !patched.is_object() {
                return Err(ApiError::invalid(
                    &scope.rt.kind,
                    scope.obj(name),
                    vec![Cause::new("FieldValueInvalid", "patch", "Invalid value: the patched document is not an object")],
                ));
            }
            // A resourceVersion inside the patch is a precondition.
            let requested_rv = meta_str(&patched, "resourceVersion").map(String::from);
            let mut patched = patched;
            if let Some(rv) = requested_rv.as_deref().filter(|rv| *rv != current.rev.to_string()) {
                if matches!(kind, PatchKind::Apply { .. }) || meta_str(&patch_doc, "resourceVersion") == Some(rv) {
                    return Err(ApiError::conflict(scope.obj(name)));
                }
            }
            objmeta::meta_mut(&mut patched).insert("resourceVersion".into(), json!(current.rev.to_string()));
            let patched = to_internal(scope, patched);
            match self.write_update(scope, name, &current, patched, sub, opts, Vec::new(), applied_fields).await {
                Err(e)
                    if e.reason == "Conflict"
                        && e.details.as_ref().and_then(|d| d.get("causes")).is_none()
                        && attempt < PATCH_RETRIES
                        && meta_str(&patch_doc, "resourceVersion").is_none() =>
                {
                    continue
                }
                other => return other,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn server_side_apply(
        &self,
        scope: &Scope,
        name: &str,
        live: Option<&Value>,
        applied: &Value,
        force: bool,
        sub: Sub,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let (Some(version), Some(kind)) = (applied.get("apiVersion").and_then(Value::as_str), applied.get("kind").and_then(Value::as_str))
        else {
            return Err(ApiError::bad_request("apiVersion and kind are required in an apply configuration"));
        };
        let api_version = scope.rt.api_version();
        // An apply configuration is for the object the URL names, and nothing else
        // (kube-apiserver's applyPatcher refuses another kind; the name check is
        // its update's).
        if version != api_version || kind != scope.rt.kind {
            return Err(ApiError::bad_request(format!(
                "Incorrect version specified in apply patch. Specified patch version: {version}, Kind={kind}, expected: {api_version}, Kind={}",
                scope.rt.kind
            )));
        }
        if let Some(n) = meta_str(applied, "name").filter(|n| *n != name) {
            return Err(ApiError::bad_request(format!("the name of the object ({n}) does not match the name on the URL ({name})")));
        }
        if sub == Sub::Main {
            refuse_oversized(scope, name, applied)?;
        }
        patch::apply::apply(
            live,
            applied,
            &opts.field_manager,
            force,
            &api_version,
            &objmeta::now_rfc3339(),
            scope.rt.patch_meta(),
            sub.name(),
        )
        .map_err(|conflicts| {
            let causes = conflicts
                .iter()
                .map(|c| Cause::new("FieldManagerConflict", &c.field, format!("conflict with \"{}\" using {api_version}", c.manager)))
                .collect();
            ApiError::conflict_with(scope.obj(name), patch::apply::conflict_message(&conflicts, &api_version), causes)
        })
    }

    pub(super) async fn apply_create(
        &self,
        scope: &Scope,
        name: &str,
        applied: Value,
        force: bool,
        sub: Sub,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if sub != Sub::Main {
            return Err(ApiError::not_found(scope.obj(name)));
        }
        let mut full = self.server_side_apply(scope, name, None, &applied, force, sub, opts)?;
        // The apply's own entry is the new object's whole managedFields: a plain
        // create would record an Update entry for the same manager instead.
        let managed = full.pointer("/metadata/managedFields").cloned();
        objmeta::meta_mut(&mut full).insert("name".into(), json!(name));
        let full = to_internal(scope, full);
        self.create_owned(scope, full, opts, managed).await
    }
}
