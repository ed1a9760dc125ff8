//! `workload.flotilla.io/v1alpha1` SyncTarget: one physical cluster, as the scheduler
//! sees it. SyncTargets live in `root`; their labels are what Placements select on.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A physical cluster that workloads can be placed on.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "workload.flotilla.io",
    version = "v1alpha1",
    doc = "A SyncTarget is a physical cluster that workloads can be placed on; its labels are what Placements select.",
    kind = "SyncTarget",
    status = "SyncTargetStatus",
    shortname = "st",
    category = "flotilla",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.cpu", description = "CPU available/allocatable"),
    printcolumn(name = "Memory", type_ = "string", json_path = ".status.memory", description = "Memory available/allocatable"),
    printcolumn(name = "Workloads", type_ = "integer", json_path = ".status.workloads"),
    printcolumn(name = "Heartbeat", type_ = "date", json_path = ".status.lastSyncerHeartbeatTime"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.syncMode", priority = "1"),
    printcolumn(name = "Schedulable", type_ = "string", json_path = ".status.schedulable", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct SyncTargetSpec {
    /// Cordon: no new workloads are placed here. Running ones stay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
    /// Once this time has passed, the scheduler moves every workload away (drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_after: Option<Time>,
    /// The Secret in `root`/`flotilla-system` that holds the cluster's kubeconfig.
    /// Push-mode syncers use it; pull-mode clusters have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretKeyRef>,
    /// Push: the control plane runs the syncer. Pull: the syncer runs next to the cluster.
    #[serde(default)]
    pub sync_mode: SyncMode,
    /// Keeps away the workloads whose Placement does not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<ClusterTaint>,
}

/// A taint on a cluster, as on a node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaint {
    /// The taint key.
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    /// The taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// What it does to workloads that do not tolerate it.
    pub effect: TaintEffect,
    /// When it was added; a `NoExecute` toleration's `tolerationSeconds` count from
    /// here. Unset: from when the scheduler first saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

/// What a taint does to the workloads that do not tolerate it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum TaintEffect {
    /// No new workloads; those running stay.
    #[default]
    NoSchedule,
    /// Prefer other clusters for new workloads.
    PreferNoSchedule,
    /// No new workloads, and those running move away (after their toleration's
    /// `tolerationSeconds`, if any).
    NoExecute,
}

impl std::fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        })
    }
}

/// Where a syncer runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SyncMode {
    /// The control plane runs this cluster's syncer and reaches the cluster with the
    /// stored kubeconfig.
    #[default]
    Push,
    /// The syncer runs as a Deployment on the cluster and reaches the control plane.
    Pull,
}

/// A key of a Secret in a known namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretKeyRef {
    /// The Secret's namespace in `root`.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
    /// The data key that holds the kubeconfig.
    pub key: String,
}

/// What the syncer last reported, and what the health controller concluded.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncTargetStatus {
    /// `Ready` and `HeartbeatHealthy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the syncer last reported in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_syncer_heartbeat_time: Option<Time>,
    /// Sum of the nodes' allocatable `cpu`, `memory` and `pods`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Allocatable minus the requests of the non-terminated pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub available: BTreeMap<String, Quantity>,
    /// Free room of the roomiest nodes, so the scheduler can tell whether one replica
    /// fits on a single node. At most a few entries, whatever the cluster's size: the
    /// nodes no other node beats on every resource, largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_headroom: Vec<NodeHeadroom>,
    /// How many nodes take pods (Ready, not cordoned): a DaemonSet runs a pod on each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i32>,
    /// How many workloads are assigned to this cluster.
    #[serde(default)]
    pub workloads: i32,
    /// `available/allocatable` CPU, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// `available/allocatable` memory, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// `True`, or why not (`Cordoned`, `Draining`), for `kubectl get -o wide`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedulable: Option<String>,
}

/// The free room on one node (or several nodes with the same room).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeHeadroom {
    /// Free CPU.
    pub cpu: Quantity,
    /// Free memory.
    pub memory: Quantity,
    /// Free pod slots.
    pub pods: i64,
    /// How many nodes have at least this much room.
    pub nodes: i32,
}
