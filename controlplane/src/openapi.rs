//! OpenAPI v3 documents, as much as `kubectl apply` and `kubectl create` need.
//!
//! Under the default `--validate=strict`, kubectl reads `/openapi/v3` to learn whether
//! the server validates fields itself: it looks for a PATCH operation whose
//! `x-kubernetes-group-version-kind` names the kind and which takes a `fieldValidation`
//! query parameter (for custom resources it checks the Namespace PATCH in `api/v1`).
//! The PATCH operations deliberately do not list strategic-merge-patch as a request
//! content type: kubectl then computes its three-way patch from its compiled-in types
//! for built-ins (exact Kubernetes semantics) and uses a merge patch for custom
//! resources (kubectl pkg/cmd/apply/patcher.go).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::registry::ResourceType;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The per-group-version documents, keyed by their path (`apis/apps/v1`).
pub fn documents(types: &[Arc<ResourceType>]) -> BTreeMap<String, Value> {
    let mut by_gv: BTreeMap<String, Vec<&Arc<ResourceType>>> = BTreeMap::new();
    for t in types {
        by_gv.entry(gv_path(&t.group, &t.version)).or_default().push(t);
    }
    by_gv.into_iter().map(|(path, ts)| (path, document(&ts))).collect()
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn document(types: &[&Arc<ResourceType>]) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for t in types {
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let schema_name = format!("{}.{}.{}", if t.group.is_empty() { "io.k8s.api.core" } else { &t.group }, t.version, t.kind);
        let mut schema = t.strategy.openapi_schema();
        if let Some(o) = schema.as_object_mut() {
            o.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
        schemas.insert(schema_name.clone(), schema);
        let base = if t.group.is_empty() { format!("/api/{}", t.version) } else { format!("/apis/{}/{}", t.group, t.version) };
        let item = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        let body_schema = json!({"schema": {"$ref": format!("#/components/schemas/{schema_name}")}});
        let write_params = vec![
            query("dryRun", "When present, indicates that modifications should not be persisted."),
            query("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
            query("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields: Ignore, Warn or Strict."),
        ];
        let mut patch_params = write_params.clone();
        patch_params.push(json!({"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}));
        let response = json!({"200": {"description": "OK", "content": {"application/json": body_schema}}});
        let mut ops = Map::new();
        ops.insert("get".into(), json!({"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk, "responses": response}));
        ops.insert(
            "put".into(),
            json!({"x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk, "parameters": write_params,
                   "requestBody": {"content": {"application/json": body_schema}}, "responses": response}),
        );
        ops.insert(
            "patch".into(),
            json!({"x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk, "parameters": patch_params,
                   "requestBody": {"content": {
                       "application/json-patch+json": {"schema": {"type": "object"}},
                       "application/merge-patch+json": {"schema": {"type": "object"}},
                       "application/apply-patch+yaml": {"schema": {"type": "object"}}}},
                   "responses": response}),
        );
        ops.insert(
            "delete".into(),
            json!({"x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk, "responses": response}),
        );
        paths.insert(item, Value::Object(ops));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Flotilla", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// A stable content hash, used as the `?hash=` cache key clients pin documents by.
pub fn hash(doc: &Value) -> String {
    let bytes = serde_json::to_vec(doc).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..16]).to_uppercase()
}

/// `GET /openapi/v3`: the index of group-version documents.
pub fn index(docs: &BTreeMap<String, Value>) -> Value {
    let paths: Map<String, Value> =
        docs.iter().map(|(p, d)| (p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash(d))}))).collect();
    json!({"paths": paths})
}

/// The media type of the protobuf OpenAPI v2 document. kubectl asks for
/// `...spec.v2@v1.0+protobuf`, which is no valid media type, so kube-apiserver answers
/// with this form.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `GET /openapi/v2`: a Swagger 2.0 document with no definitions.
///
/// kubectl downloads it only for a kind the v3 documents do not name, to validate on
/// the client. An empty document names no kind either, so kubectl skips its own
/// validation and goes on to look the kind up in discovery, which answers as
/// kube-apiserver does: `no matches for kind "X" in version "Y"`. Every kind the
/// server does serve is validated by the server, as the v3 documents tell kubectl.
///
/// kubectl asks for the protobuf form (gnostic's `openapi_v2.Document`): field 1 is
/// `swagger`, field 2 the `info` message, whose fields 1 and 2 are `title` and
/// `version`. Other clients get the same document as JSON.
pub fn v2_document(protobuf: bool) -> Vec<u8> {
    let (title, version) = ("Flotilla", env!("CARGO_PKG_VERSION"));
    if !protobuf {
        let doc = json!({"swagger": "2.0", "info": {"title": title, "version": version}, "paths": {}});
        return serde_json::to_vec(&doc).unwrap_or_default();
    }
    fn string_field(out: &mut Vec<u8>, tag: u8, s: &[u8]) {
        out.push(tag << 3 | 2);
        length(out, s.len());
        out.extend_from_slice(s);
    }
    fn length(out: &mut Vec<u8>, mut n: usize) {
        while n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut info = Vec::new();
    string_field(&mut info, 1, title.as_bytes());
    string_field(&mut info, 2, version.as_bytes());
    let mut doc = Vec::new();
    string_field(&mut doc, 1, b"2.0");
    string_field(&mut doc, 2, &info);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_document_is_a_swagger_header_in_protobuf() {
        let doc = v2_document(true);
        assert_eq!(&doc[..5], b"\x0a\x032.0");
        assert_eq!(doc[5], 0x12, "field 2, length-delimited");
        assert_eq!(doc[6] as usize, doc.len() - 7, "the info message fills the rest");
        let json: Value = serde_json::from_slice(&v2_document(false)).unwrap();
        assert_eq!(json["swagger"], "2.0");
    }
}
