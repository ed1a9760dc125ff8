//! Jobs: pods that run to completion, on one cluster.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{condition, is_true, CopyState, Workload, WorkloadKind};
use crate::ClusterSyncStatus;

impl Workload for Job {
    const KIND: WorkloadKind = WorkloadKind::Job;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    fn replicas(&self) -> i32 {
        pods_at_once(self.spec.as_ref())
    }
}

/// The pods a Job spec runs at once: its parallelism, no more than its completions.
pub(super) fn pods_at_once(spec: Option<&JobSpec>) -> i32 {
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
    spec.and_then(|s| s.completions).map_or(parallelism, |c| parallelism.min(c))
}

/// A copy is Complete or Failed once its `Complete` or `Failed` condition is True, as
/// `kubectl wait --for=condition=complete` reads it; it is Progressing until then.
pub(super) fn copy_state(entry: &ClusterSyncStatus) -> CopyState {
    if is_true(entry, "Complete") {
        CopyState::Complete
    } else if is_true(entry, "Failed") {
        let reason = condition(entry, "Failed").map(|c| c.reason.clone()).filter(|r| !r.is_empty());
        CopyState::Failed(reason.unwrap_or_else(|| "BackoffLimitExceeded".into()))
    } else {
        CopyState::Progressing
    }
}
