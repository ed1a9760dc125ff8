//! StatefulSets: a whole set of pods with stable names and volumes, on one cluster.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{all_counts_at, base_report, CopyState, Headline, Workload, WorkloadKind};
use crate::status::Sums;
use crate::{ClusterSyncStatus, WorkloadPlacement};

impl Workload for StatefulSet {
    const KIND: WorkloadKind = WorkloadKind::StatefulSet;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus {
        let st = self.status.clone().unwrap_or_default();
        ClusterSyncStatus {
            replicas: st.replicas,
            ready_replicas: st.ready_replicas.unwrap_or(0),
            available_replicas: st.available_replicas.unwrap_or(0),
            updated_replicas: st.updated_replicas.unwrap_or(0),
            conditions: reported_conditions!(st.conditions),
            ..base_report(sync_target, &self.metadata, Some(st.observed_generation.unwrap_or(0)), now)
        }
    }

    type Status = StatefulSetStatus;

    fn status(&self) -> Option<&StatefulSetStatus> {
        self.status.as_ref()
    }

    /// The counts summed over its clusters (one, unless its Placement duplicates it);
    /// the revisions and conditions stay the workspace's own.
    fn summed(&self, wp: &WorkloadPlacement, _now: &Time) -> Option<StatefulSetStatus> {
        let current = self.status.clone().unwrap_or_default();
        let sums = Sums::to_report(wp, &self.metadata, current.observed_generation, self.status.is_some())?;
        Some(StatefulSetStatus {
            observed_generation: Some(sums.observed_generation),
            replicas: sums.replicas,
            ready_replicas: Some(sums.ready),
            current_replicas: Some(sums.updated),
            updated_replicas: Some(sums.updated),
            available_replicas: Some(sums.available),
            ..current
        })
    }

    /// Available once every replica is ready and available.
    fn headline(&self, status: Option<&StatefulSetStatus>) -> Headline {
        let ready = status.and_then(|s| s.ready_replicas).unwrap_or(0);
        let available = status.and_then(|s| s.available_replicas).unwrap_or(0) >= self.replicas() && ready >= self.replicas();
        Headline { ready, desired: self.replicas(), available, ended: None }
    }
}

/// A copy is Available once observed with all its replicas updated, ready and
/// available: the statefulset controller has no rollout condition, so the counts say
/// it all (`kubectl rollout status sts` reads the same counts).
pub(super) fn copy_state(entry: &ClusterSyncStatus, share: i32) -> CopyState {
    if all_counts_at(entry, share) {
        CopyState::Available
    } else {
        CopyState::Progressing
    }
}
