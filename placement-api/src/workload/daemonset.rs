//! DaemonSets: a pod on every node that fits, on every selected cluster.

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{base_report, CopyState, Headline, Workload, WorkloadKind};
use crate::status::Sums;
use crate::{ClusterSyncStatus, WorkloadPlacement};

impl Workload for DaemonSet {
    const KIND: WorkloadKind = WorkloadKind::DaemonSet;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    /// One pod per node: the cluster decides how many nodes that is.
    fn replicas(&self) -> i32 {
        1
    }

    /// Its nodes are its replicas: `desiredNumberScheduled`.
    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus {
        let st = self.status.clone().unwrap_or_default();
        ClusterSyncStatus {
            replicas: st.desired_number_scheduled,
            ready_replicas: st.number_ready,
            available_replicas: st.number_available.unwrap_or(0),
            updated_replicas: st.updated_number_scheduled.unwrap_or(0),
            conditions: reported_conditions!(st.conditions),
            ..base_report(sync_target, &self.metadata, Some(st.observed_generation.unwrap_or(0)), now)
        }
    }

    type Status = DaemonSetStatus;

    fn status(&self) -> Option<&DaemonSetStatus> {
        self.status.as_ref()
    }

    /// The node counts summed over every cluster it runs on.
    fn summed(&self, wp: &WorkloadPlacement, _now: &Time) -> Option<DaemonSetStatus> {
        let current = self.status.clone().unwrap_or_default();
        let sums = Sums::to_report(wp, &self.metadata, current.observed_generation, self.status.is_some())?;
        Some(DaemonSetStatus {
            observed_generation: Some(sums.observed_generation),
            desired_number_scheduled: sums.replicas,
            current_number_scheduled: sums.replicas,
            number_ready: sums.ready,
            number_available: Some(sums.available),
            number_unavailable: Some((sums.replicas - sums.available).max(0)),
            updated_number_scheduled: Some(sums.updated),
            number_misscheduled: 0,
            ..current
        })
    }

    /// Available once a pod is available on every node it should run on.
    fn headline(&self, status: Option<&DaemonSetStatus>) -> Headline {
        let (ready, desired) = status.map_or((0, 0), |s| (s.number_ready, s.desired_number_scheduled));
        let available = status.is_some_and(|s| s.number_available.unwrap_or(0) >= desired);
        Headline { ready, desired, available, ended: None }
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
