//! Flotilla's API types: group names, label and annotation keys, and the CRDs the
//! control plane installs. No I/O.

use serde_json::{json, Value};

/// `tenancy.flotilla.io`: Workspaces.
pub const TENANCY_GROUP: &str = "tenancy.flotilla.io";
/// The version of every Flotilla group.
pub const VERSION: &str = "v1alpha1";
/// The workspace every control plane has, holding Workspaces and SyncTargets.
pub const ROOT_WORKSPACE: &str = "root";
/// Annotation naming an object's workspace on wildcard responses (kcp's convention).
pub const CLUSTER_ANNOTATION: &str = "kcp.io/cluster";
/// Finalizer that lets the control plane empty a workspace before it disappears.
pub const WORKSPACE_FINALIZER: &str = "tenancy.flotilla.io/cleanup";

/// The store key of a Workspace object (it lives in `root`, cluster-scoped).
pub fn workspace_key(name: &str) -> String {
    format!("{TENANCY_GROUP}/workspaces/{ROOT_WORKSPACE}//{name}")
}

/// The Workspace CRD: a logical cluster served at `/clusters/<name>`.
pub fn workspace_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("workspaces.{TENANCY_GROUP}")},
        "spec": {
            "group": TENANCY_GROUP,
            "scope": "Cluster",
            "names": {"plural": "workspaces", "singular": "workspace", "kind": "Workspace", "listKind": "WorkspaceList", "shortNames": ["ws"]},
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "URL", "type": "string", "jsonPath": ".status.url", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A Workspace is a logical cluster with its own namespaces and objects.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "properties": {}},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string", "enum": ["Initializing", "Ready", "Terminating"]},
                            "url": {"type": "string"}
                        }}
                    }
                }}
            }]
        }
    })
}
