//! `scheduling.flotilla.io/v1alpha1` Placement: which clusters the workloads of a
//! workspace may run on, how many, and how replicas are spread. Cluster-scoped,
//! in each workspace; every workspace starts with one named `default`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Rules for choosing clusters for the workloads it governs.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.flotilla.io",
    version = "v1alpha1",
    doc = "A Placement says which clusters the workloads of a workspace may run on, how many, and how replicas are spread.",
    kind = "Placement",
    status = "PlacementStatus",
    shortname = "pl",
    category = "flotilla",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.replicaScheduling"),
    printcolumn(name = "Clusters", type_ = "integer", json_path = ".spec.numberOfClusters"),
    printcolumn(name = "Selector", type_ = "string", json_path = ".spec.clusterSelector.matchLabels", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// Selects SyncTargets by their labels. Empty selects every cluster.
    #[serde(default)]
    pub cluster_selector: LabelSelector,
    /// Selects the namespaces whose workloads this Placement governs when neither
    /// the workload nor its namespace names a Placement. Unset or empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// How many clusters each workload runs on.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub number_of_clusters: i32,
    /// Divide splits the replicas across the clusters; Duplicate runs all of them on each.
    #[serde(default)]
    pub replica_scheduling: ReplicaScheduling,
    /// Opt-in rebalancing after a recovery. Unset: a workload stays where it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<Rebalance>,
}

/// When a workload is spread again over clusters that came back.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rebalance {
    /// How long a cluster must have been Ready before workloads left on fewer clusters
    /// than asked for spread onto it again, such as `5m` or `30s`; a workload moves at
    /// most once per this window.
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub after_ready: String,
}

impl Rebalance {
    /// `afterReady` as a duration, or `None` when it does not parse.
    pub fn window(&self) -> Option<std::time::Duration> {
        crate::quantity::parse_duration(&self.after_ready)
    }
}

fn one() -> i32 {
    1
}

impl Default for PlacementSpec {
    fn default() -> Self {
        Self {
            cluster_selector: LabelSelector::default(),
            namespace_selector: None,
            number_of_clusters: 1,
            replica_scheduling: ReplicaScheduling::Divide,
            rebalance: None,
        }
    }
}

/// How a workload's replicas are spread over its clusters.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReplicaScheduling {
    /// Split the replicas in proportion to the replicas each cluster can fit.
    #[default]
    Divide,
    /// Run every replica on each chosen cluster.
    Duplicate,
}

impl std::fmt::Display for ReplicaScheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplicaScheduling::Divide => "Divide",
            ReplicaScheduling::Duplicate => "Duplicate",
        })
    }
}

/// What the scheduler reports about a Placement.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// How many Ready, schedulable clusters the selector matches now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matching_clusters: Option<i32>,
    /// Conditions, for example whether the selector matches any cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
