//! CronJobs: a schedule that makes Jobs, on exactly one cluster at a time.

use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{CopyState, Workload, WorkloadKind};
use crate::ClusterSyncStatus;

impl Workload for CronJob {
    const KIND: WorkloadKind = WorkloadKind::CronJob;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()).map(|s| &s.template)
    }

    /// The pods one of its Jobs runs at once.
    fn replicas(&self) -> i32 {
        super::job::pods_at_once(self.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()))
    }
}

/// A copy is Available once its cluster has observed it: from then on its schedule
/// runs there. Its Jobs report on their own.
pub(super) fn copy_state(entry: &ClusterSyncStatus) -> CopyState {
    if entry.observed {
        CopyState::Available
    } else {
        CopyState::Progressing
    }
}
