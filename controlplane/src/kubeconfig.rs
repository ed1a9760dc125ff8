//! Writing kubeconfigs: the admin one the server writes at start, and the context
//! that `flotilla workspace create` adds.

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine;
use serde_json::{json, Value};

use placement_api::keys::ROOT_WORKSPACE;

use crate::fsutil::write_private;

/// The URL clients use; a wildcard listen address is reached through loopback.
pub fn server_url(addr: SocketAddr) -> String {
    let ip = addr.ip();
    let host = if ip.is_unspecified() {
        "127.0.0.1".to_string()
    } else if ip.is_ipv6() {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    format!("https://{host}:{}", addr.port())
}

/// Writes `<data-dir>/admin.kubeconfig`: context `root` (current) with the admin token,
/// and one context per workspace with that workspace's scoped token. A single-cluster
/// server (a simulated cluster) gets one kind-shaped context instead.
pub fn write_admin(
    path: &Path,
    name: &str,
    addr: SocketAddr,
    ca_pem: &str,
    admin_token: &str,
    workspaces: &[(String, String)],
    single_cluster: bool,
) -> anyhow::Result<()> {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let base = server_url(addr);
    let mut clusters = Vec::new();
    let mut users = vec![json!({"name": format!("{name}-admin"), "user": {"token": admin_token}})];
    let mut contexts = Vec::new();
    let current;
    if single_cluster {
        // The shape kind writes: cluster, user and context all named kind-<name>.
        let ctx = format!("kind-{name}");
        clusters.push(json!({"name": ctx, "cluster": {"server": base, "certificate-authority-data": ca}}));
        users = vec![json!({"name": ctx, "user": {"token": admin_token}})];
        contexts.push(json!({"name": ctx, "context": {"cluster": ctx, "user": ctx}}));
        current = ctx;
    } else {
        let root = ROOT_WORKSPACE;
        clusters.push(json!({"name": root, "cluster": {"server": format!("{base}/clusters/{root}"), "certificate-authority-data": ca}}));
        contexts.push(json!({"name": root, "context": {"cluster": root, "user": format!("{name}-admin")}}));
        for (ws, token) in workspaces {
            clusters.push(json!({"name": ws, "cluster": {"server": format!("{base}/clusters/{ws}"), "certificate-authority-data": ca}}));
            users.push(json!({"name": format!("workspace-{ws}"), "user": {"token": token}}));
            contexts.push(json!({"name": ws, "context": {"cluster": ws, "user": format!("workspace-{ws}")}}));
        }
        // Keep the user's choice of context across restarts.
        current = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| serde_yaml::from_str::<Value>(&s).ok())
            .and_then(|v| v.get("current-context").and_then(Value::as_str).map(String::from))
            .filter(|c| c == ROOT_WORKSPACE || workspaces.iter().any(|(w, _)| w == c))
            .unwrap_or_else(|| ROOT_WORKSPACE.into());
    }
    let doc = json!({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": clusters, "users": users, "contexts": contexts, "current-context": current,
    });
    write_private(path, serde_yaml::to_string(&doc)?.as_bytes())?;
    Ok(())
}

/// Adds (or replaces) a context for `workspace` in the kubeconfig at `path`, pointing
/// at `/clusters/<workspace>` on the same server as `from_context`, with `token`.
pub fn add_workspace_context(path: &Path, from_context: &str, workspace: &str, token: &str, make_current: bool) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let mut doc: Value = serde_yaml::from_str(&text)?;
    let cluster_of = |doc: &Value, ctx: &str| -> Option<Value> {
        let cname = doc["contexts"].as_array()?.iter().find(|c| c["name"] == ctx)?["context"]["cluster"].as_str()?.to_string();
        doc["clusters"].as_array()?.iter().find(|c| c["name"] == cname.as_str()).cloned()
    };
    let base = cluster_of(&doc, from_context).ok_or_else(|| anyhow::anyhow!("context {from_context:?} not found in {}", path.display()))?;
    let server = base["cluster"]["server"].as_str().unwrap_or_default();
    let root_url = match server.find("/clusters/") {
        Some(i) => &server[..i],
        None => server,
    };
    let mut cluster = base["cluster"].clone();
    cluster["server"] = json!(format!("{root_url}/clusters/{workspace}"));
    let user = format!("workspace-{workspace}");
    upsert(&mut doc, "clusters", workspace, json!({"name": workspace, "cluster": cluster}));
    upsert(&mut doc, "users", &user, json!({"name": user, "user": {"token": token}}));
    upsert(&mut doc, "contexts", workspace, json!({"name": workspace, "context": {"cluster": workspace, "user": user}}));
    if make_current {
        doc["current-context"] = json!(workspace);
    }
    write_private(path, serde_yaml::to_string(&doc)?.as_bytes())?;
    Ok(())
}

/// Removes a workspace's context, cluster and user.
pub fn remove_workspace_context(path: &Path, workspace: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let mut doc: Value = serde_yaml::from_str(&text)?;
    let user = format!("workspace-{workspace}");
    for (list, name) in [("clusters", workspace), ("users", user.as_str()), ("contexts", workspace)] {
        if let Some(a) = doc[list].as_array_mut() {
            a.retain(|e| e["name"] != name);
        }
    }
    if doc["current-context"] == workspace {
        doc["current-context"] = json!(ROOT_WORKSPACE);
    }
    write_private(path, serde_yaml::to_string(&doc)?.as_bytes())?;
    Ok(())
}

fn upsert(doc: &mut Value, list: &str, name: &str, entry: Value) {
    if !doc[list].is_array() {
        doc[list] = json!([]);
    }
    if let Some(a) = doc[list].as_array_mut() {
        a.retain(|e| e["name"] != name);
        a.push(entry);
    }
}
