//! StatefulSets: a whole set of pods with stable names and volumes, on one cluster.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{all_counts_at, CopyState, Workload, WorkloadKind};
use crate::ClusterSyncStatus;

impl Workload for StatefulSet {
    const KIND: WorkloadKind = WorkloadKind::StatefulSet;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
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
