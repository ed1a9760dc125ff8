//! `scheduling.flotilla.io/v1alpha1` Placement: which clusters the workloads of a
//! workspace may run on, how many, and how replicas are spread. Cluster-scoped,
//! in each workspace; every workspace starts with one named `default`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::synctarget::TaintEffect;

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
    /// Spreads each workload's clusters over the values of cluster labels, such as
    /// `region`. Each constraint must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// The cluster taints the workloads of this Placement tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<ClusterToleration>,
    /// Static weights for Divide: each chosen cluster's share of the replicas is in
    /// proportion to the highest weight of the entries that select it, and a cluster no
    /// entry selects is not used. Unset: in proportion to the replicas each can still fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<ClusterWeight>,
    /// What a failover may do with the workloads whose copies must never run twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
}

/// What a failover may do with the workloads that must not run on two clusters at once.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// When a StatefulSet (or a CronJob) moves off a cluster that stopped answering:
    /// `WaitForConfirm` (the default) only once the cluster is confirmed lost with
    /// `flotilla cluster confirm-lost` or is deregistered, so that at most one copy is
    /// ever alive; `Immediate` at once, as a Deployment does.
    #[serde(default)]
    pub stateful_sets: StatefulSetFailover,
}

/// See [`FailoverSpec::stateful_sets`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StatefulSetFailover {
    /// Move only once the lost cluster is confirmed lost.
    #[default]
    WaitForConfirm,
    /// Move at once.
    Immediate,
}

/// Spreads a workload's clusters over the values (groups) of one cluster label.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// The SyncTarget label whose values are the groups, such as `region`. A cluster
    /// without it is not used.
    #[schemars(length(min = 1, max = 317))]
    pub spread_by_label: String,
    /// The most two groups a workload runs in may differ by: in replicas under Divide,
    /// in clusters under Duplicate. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_skew: Option<i32>,
    /// The fewest groups each workload runs in; a workload that cannot reach them is
    /// not placed. It raises `numberOfClusters` when larger. Unset: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_groups: Option<i32>,
}

/// Lets the workloads of a Placement run on clusters with a matching taint, as a pod's
/// toleration does on a node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterToleration {
    /// The taint key it matches. Empty, with `Exists`, matches every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (the default) matches the taint's value; `Exists` any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// The value it matches under `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The effect it matches. Unset matches every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// For a `NoExecute` taint: how long a workload stays on the cluster after the
    /// taint was added, before it moves away. Unset: for as long as the taint is there;
    /// zero or less: it moves at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration compares values.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TolerationOperator {
    /// The taint's value equals the toleration's.
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// A static weight for the clusters it selects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterWeight {
    /// The SyncTargets it applies to by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// The SyncTargets it applies to by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// The weight.
    #[schemars(range(min = 1))]
    pub weight: i64,
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

impl PlacementSpec {
    /// Whether a StatefulSet moves off a lost cluster at once
    /// (`failover.statefulSets: Immediate`).
    pub fn stateful_sets_move_at_once(&self) -> bool {
        self.failover.as_ref().is_some_and(|f| f.stateful_sets == StatefulSetFailover::Immediate)
    }
}

impl Default for PlacementSpec {
    fn default() -> Self {
        Self {
            cluster_selector: LabelSelector::default(),
            namespace_selector: None,
            number_of_clusters: 1,
            replica_scheduling: ReplicaScheduling::Divide,
            rebalance: None,
            spread_constraints: Vec::new(),
            cluster_tolerations: Vec::new(),
            weights: Vec::new(),
            failover: None,
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
