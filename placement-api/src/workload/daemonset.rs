//! DaemonSets: a pod on every node that fits, on every selected cluster.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{CopyState, Workload, WorkloadKind};
use crate::ClusterSyncStatus;

impl Workload for DaemonSet {
    const KIND: WorkloadKind = WorkloadKind::DaemonSet;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    /// One pod per node: the cluster decides how many nodes that is.
    fn replicas(&self) -> i32 {
        1
    }
}

/// A copy reports its nodes as its replicas (`desiredNumberScheduled`): it is
/// Available once observed with a ready, available and updated pod on each of them.
pub(super) fn copy_state(entry: &ClusterSyncStatus) -> CopyState {
    let nodes = entry.replicas;
    if entry.observed && [entry.updated_replicas, entry.ready_replicas, entry.available_replicas].iter().all(|n| *n == nodes) {
        CopyState::Available
    } else {
        CopyState::Progressing
    }
}
