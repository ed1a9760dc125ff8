//! CronJobs: a schedule that makes Jobs. It is not placed: the schedule runs in the
//! workspace ([`super::cron_schedule`], run by the workspace's CronJob controller),
//! and each Job it makes is placed as a Job. No cluster holds a copy of it, so a lost
//! cluster that comes back cannot fire a schedule that has moved on.

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{base_report, Headline, Workload, WorkloadKind};
use crate::{ClusterSyncStatus, WorkloadPlacement};

impl Workload for CronJob {
    const KIND: WorkloadKind = WorkloadKind::CronJob;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()).map(|s| &s.template)
    }

    /// The pods one of its Jobs runs at once.
    fn replicas(&self) -> i32 {
        super::job::pods_at_once(self.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()))
    }

    /// No cluster has a copy to report on; its Jobs report on their own.
    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus {
        base_report(sync_target, &self.metadata, None, now)
    }

    type Status = CronJobStatus;

    fn status(&self) -> Option<&CronJobStatus> {
        self.status.as_ref()
    }

    /// Nothing: its status is its schedule's, written where the schedule runs, in the
    /// workspace.
    fn summed(&self, _wp: &WorkloadPlacement, _now: &Time) -> Option<CronJobStatus> {
        None
    }

    /// Available while its schedule runs: not when suspended. Its running Jobs count
    /// as ready, towards themselves.
    fn headline(&self, status: Option<&CronJobStatus>) -> Headline {
        let suspended = self.spec.as_ref().and_then(|s| s.suspend) == Some(true);
        let active = status.and_then(|s| s.active.as_ref()).map_or(0, |a| i32::try_from(a.len()).unwrap_or(i32::MAX));
        Headline { ready: active, desired: active, available: !suspended, ended: None }
    }
}
