//! Legacy discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`).
//!
//! kubectl 1.32 asks for aggregated discovery but falls back to these when the
//! response Content-Type is plain `application/json` (client-go discovery_client.go),
//! and kube-rs `Discovery::run` uses them directly, so they are the one form served.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::registry::ResourceType;

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const SUB_VERBS: &[&str] = &["get", "patch", "update"];

/// `GET /api`.
pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
}

/// group -> versions, in first-seen order of the registry.
fn groups(types: &[Arc<ResourceType>]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        let vs = out.entry(t.group.clone()).or_default();
        if !vs.contains(&t.version) {
            vs.push(t.version.clone());
        }
    }
    out
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(json!({}))})
}

/// `GET /apis`.
pub fn api_group_list(types: &[Arc<ResourceType>]) -> Value {
    let groups: Vec<Value> = groups(types).iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`, if the group is served.
pub fn api_group(types: &[Arc<ResourceType>], group: &str) -> Option<Value> {
    let g = groups(types);
    let vs = g.get(group)?;
    let mut v = group_json(group, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// `GET /api/v1` or `/apis/<g>/<v>`.
pub fn resource_list(types: &[Arc<ResourceType>], group: &str, version: &str) -> Option<Value> {
    let matching: Vec<&Arc<ResourceType>> = types.iter().filter(|t| t.group == group && t.version == version).collect();
    if matching.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in matching {
        let mut r = json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": VERBS,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.status {
            resources.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": SUB_VERBS}));
        }
        if t.strategy.has_binding() {
            resources.push(json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}));
        }
        if t.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": SUB_VERBS}));
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}
