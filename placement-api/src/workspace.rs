//! `tenancy.flotilla.io/v1alpha1` Workspace: a logical cluster, served at
//! `/clusters/<name>`. Workspaces live in `root`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Workspace is a logical cluster with its own namespaces and objects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tenancy.flotilla.io",
    version = "v1alpha1",
    doc = "A Workspace is a logical cluster with its own namespaces and objects, served at /clusters/<name>.",
    kind = "Workspace",
    status = "WorkspaceStatus",
    shortname = "ws",
    category = "flotilla",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "URL", type_ = "string", json_path = ".status.url", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
pub struct WorkspaceSpec {}

/// Where a Workspace is in its life.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WorkspaceStatus {
    /// Initializing, Ready or Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Initializing", "Ready", "Terminating"]))]
    pub phase: Option<String>,
    /// The path the workspace is served at, relative to the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}
