//! CronJobs: a schedule that makes Jobs, on exactly one cluster at a time.

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus};
use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{base_report, CopyState, Headline, Workload, WorkloadKind};
use crate::status::Sums;
use crate::{BatchReport, ClusterSyncStatus, WorkloadPlacement};

impl Workload for CronJob {
    const KIND: WorkloadKind = WorkloadKind::CronJob;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()).map(|s| &s.template)
    }

    /// The pods one of its Jobs runs at once.
    fn replicas(&self) -> i32 {
        super::job::pods_at_once(self.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()))
    }

    /// Its running Jobs, and when it last scheduled and last succeeded.
    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus {
        let st = self.status.clone().unwrap_or_default();
        let active_jobs: Vec<String> = st.active.into_iter().flatten().filter_map(|r| r.name).collect();
        ClusterSyncStatus {
            batch: Some(BatchReport {
                active: i32::try_from(active_jobs.len()).unwrap_or(i32::MAX),
                last_schedule_time: st.last_schedule_time,
                last_successful_time: st.last_successful_time,
                active_jobs,
                ..Default::default()
            }),
            ..base_report(sync_target, &self.metadata, None, now)
        }
    }

    type Status = CronJobStatus;

    fn status(&self) -> Option<&CronJobStatus> {
        self.status.as_ref()
    }

    /// Its running Jobs on its cluster, and the latest schedule and success seen on any
    /// cluster it ran on: they never move backwards, through a failover too.
    fn summed(&self, wp: &WorkloadPlacement, _now: &Time) -> Option<CronJobStatus> {
        let sums = Sums::of(wp, self.metadata.generation.unwrap_or(0), None);
        let batches: Vec<&BatchReport> = sums.entries.iter().filter_map(|e| e.batch.as_ref()).collect();
        if batches.is_empty() {
            return None;
        }
        let current = self.status.clone().unwrap_or_default();
        let latest =
            |own: Option<Time>, f: fn(&BatchReport) -> Option<Time>| batches.iter().filter_map(|b| f(b)).chain(own).max_by_key(|t| t.0);
        let namespace = self.metadata.namespace.clone();
        let active: Vec<ObjectReference> = batches
            .iter()
            .flat_map(|b| &b.active_jobs)
            .map(|name| ObjectReference {
                api_version: Some("batch/v1".into()),
                kind: Some("Job".into()),
                name: Some(name.clone()),
                namespace: namespace.clone(),
                ..Default::default()
            })
            .collect();
        Some(CronJobStatus {
            active: Some(active).filter(|a| !a.is_empty()),
            last_schedule_time: latest(current.last_schedule_time, |b| b.last_schedule_time.clone()),
            last_successful_time: latest(current.last_successful_time, |b| b.last_successful_time.clone()),
        })
    }

    /// Available once placed: its schedule runs there.
    fn headline(&self, _status: Option<&CronJobStatus>) -> Headline {
        Headline { ready: 1, desired: 1, available: true, ended: None }
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
