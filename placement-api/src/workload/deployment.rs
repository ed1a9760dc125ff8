//! Deployments: replicas that divide over clusters, or duplicate.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{all_counts_at, condition, CopyState, Headline, Workload, WorkloadKind};
use crate::{ClusterSyncStatus, WorkloadPlacement};

impl Workload for Deployment {
    const KIND: WorkloadKind = WorkloadKind::Deployment;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus {
        crate::status::cluster_entry(sync_target, self, now)
    }

    type Status = DeploymentStatus;

    fn status(&self) -> Option<&DeploymentStatus> {
        self.status.as_ref()
    }

    fn summed(&self, wp: &WorkloadPlacement, now: &Time) -> Option<DeploymentStatus> {
        crate::status::aggregate(self, wp, now)
    }

    /// Available while its `Available` condition is True.
    fn headline(&self, status: Option<&DeploymentStatus>) -> Headline {
        let available =
            status.and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == "Available" && c.status == "True");
        Headline { ready: status.and_then(|s| s.ready_replicas).unwrap_or(0), desired: self.replicas(), available, ended: None }
    }
}

/// A copy is Available once observed with every replica of its share updated, ready
/// and available, and the cluster's deployment controller says the rollout is over
/// (`Progressing` with reason `NewReplicaSetAvailable`, as kube-controller-manager
/// sets it). It is Stalled once `Progressing` is False (`ProgressDeadlineExceeded`).
pub(super) fn copy_state(entry: &ClusterSyncStatus, share: i32) -> CopyState {
    let progressing = condition(entry, "Progressing");
    if let Some(c) = progressing.filter(|c| c.status == "False") {
        return CopyState::Stalled(if c.reason.is_empty() { "ProgressDeadlineExceeded".into() } else { c.reason.clone() });
    }
    let rolled_out = progressing.is_none_or(|c| c.reason == "NewReplicaSetAvailable");
    if all_counts_at(entry, share) && rolled_out {
        CopyState::Available
    } else {
        CopyState::Progressing
    }
}
