//! `scheduling.flotilla.io/v1alpha1` WorkloadPlacement: where one workload runs. The
//! scheduler writes the spec (the clusters and their replica shares); each syncer
//! writes its own cluster's entry in the status. Namespaced, named after the workload.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The placement of one workload.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.flotilla.io",
    version = "v1alpha1",
    doc = "A WorkloadPlacement records where one workload runs: the scheduler writes the spec, the syncers the status.",
    kind = "WorkloadPlacement",
    namespaced,
    status = "WorkloadPlacementStatus",
    shortname = "wp",
    category = "flotilla",
    printcolumn(
        name = "Clusters",
        type_ = "string",
        json_path = ".status.summary",
        description = "cluster=ready/assigned for each cluster"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.ready"),
    printcolumn(name = "Placement", type_ = "string", json_path = ".spec.placement", priority = "1"),
    printcolumn(
        name = "Companions",
        type_ = "string",
        json_path = ".status.companions[*]",
        description = "What follows the workload to its clusters",
        priority = "1"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPlacementSpec {
    /// The workload placed.
    pub workload: WorkloadRef,
    /// The Placement that governed the decision.
    #[serde(default)]
    pub placement: String,
    /// The clusters chosen, with each one's share of the replicas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterAssignment>,
}

/// The workload a WorkloadPlacement is for, in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// For example `apps/v1`.
    pub api_version: String,
    /// For example `Deployment`.
    pub kind: String,
    /// The workload's name.
    pub name: String,
}

/// One chosen cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterAssignment {
    /// The SyncTarget's name.
    pub name: String,
    /// The replicas this cluster runs.
    #[schemars(range(min = 0))]
    pub replicas: i32,
}

/// What the syncers report, cluster by cluster, and the conditions over all of them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPlacementStatus {
    /// One entry per cluster, each written by that cluster's syncer. A list map keyed
    /// by `name`, so that each syncer's server-side apply owns its own entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub clusters: Vec<ClusterSyncStatus>,
    /// `Scheduled` (the scheduler's), `Synced` and `Available` (the status
    /// aggregator's). A list map keyed by `type`, so each writer owns its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// `east=2/2 west=1/1`: ready/assigned replicas per cluster (a Job's: its pods that
    /// succeeded over its completions), for `kubectl get`
    /// ([`crate::workload::copy_counts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Ready/desired replicas over all clusters (a Job's: succeeded/completions), for
    /// `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// `Pending`, `Progressing` or `Available`: the workload's state as the status
    /// aggregator last judged it ([`crate::status::workload_state`]); the dashboard
    /// shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why the workload is not Available, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_message: Option<String>,
    /// What follows the workload to its clusters, as `Kind/name` in the workload's
    /// namespace, sorted (the companions controller's): its Services, Ingresses,
    /// ServiceAccount, PodDisruptionBudgets, NetworkPolicies, autoscalers, and the
    /// ConfigMaps and Secrets it references.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub companions: Vec<String>,
}

/// One cluster's report on its copy of the workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSyncStatus {
    /// The SyncTarget's name.
    pub name: String,
    /// Replicas of the downstream copy.
    #[serde(default)]
    pub replicas: i32,
    /// Ready replicas downstream.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Available replicas downstream.
    #[serde(default)]
    pub available_replicas: i32,
    /// Replicas downstream that run the current template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// The upstream generation the downstream copy was last synced from.
    #[serde(default)]
    pub synced_generation: i64,
    /// The downstream copy's `observedGeneration` has caught up with what was synced.
    #[serde(default)]
    pub observed: bool,
    /// The downstream copy's conditions, as reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// What a Job's or a CronJob's copy reports beyond the counts above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchReport>,
    /// When the syncer last wrote this entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
}

/// What a Job's or a CronJob's copy reports beyond the replica counts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchReport {
    /// A Job's pods running, or a CronJob's Jobs running.
    #[serde(default)]
    pub active: i32,
    /// A Job's pods that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// A Job's pods that failed.
    #[serde(default)]
    pub failed: i32,
    /// The successes a Job's copy runs to (its `spec.completions`; 1 when it names
    /// none), so that its cluster reads `succeeded/completions` as `kubectl get job`'s
    /// COMPLETIONS does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<i32>,
    /// When a Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When a Job completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// When a CronJob last made a Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When a CronJob's Job last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The names of a CronJob's running Jobs on the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active_jobs: Vec<String>,
}
