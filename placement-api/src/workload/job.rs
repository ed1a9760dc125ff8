//! Jobs: pods that run to completion, on one cluster.

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{base_report, condition, is_true, CopyState, Ended, Headline, Workload, WorkloadKind};
use crate::status::Sums;
use crate::{BatchReport, ClusterSyncStatus, WorkloadPlacement};

impl Workload for Job {
    const KIND: WorkloadKind = WorkloadKind::Job;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }

    fn replicas(&self) -> i32 {
        pods_at_once(self.spec.as_ref())
    }

    /// Complete or Failed, as its status conditions say.
    fn finished(&self) -> bool {
        has_condition(self, "Complete") || has_condition(self, "Failed")
    }

    /// Its running pods are its replicas; a Job controller says no observedGeneration,
    /// so a copy is observed once it is there.
    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus {
        let st = self.status.clone().unwrap_or_default();
        let active = st.active.unwrap_or(0);
        ClusterSyncStatus {
            replicas: active,
            ready_replicas: st.ready.unwrap_or(0),
            available_replicas: st.ready.unwrap_or(0),
            updated_replicas: active,
            conditions: reported_conditions!(st.conditions),
            batch: Some(BatchReport {
                active,
                succeeded: st.succeeded.unwrap_or(0),
                failed: st.failed.unwrap_or(0),
                completions: Some(completions(self.spec.as_ref())),
                start_time: st.start_time,
                completion_time: st.completion_time,
                ..Default::default()
            }),
            ..base_report(sync_target, &self.metadata, None, now)
        }
    }

    type Status = JobStatus;

    fn status(&self) -> Option<&JobStatus> {
        self.status.as_ref()
    }

    /// The status of its one cluster's copy: its pods' counts, its times and its
    /// `Complete` or `Failed` condition. Once finished, it stays as it ended.
    fn summed(&self, wp: &WorkloadPlacement, now: &Time) -> Option<JobStatus> {
        if self.finished() {
            return None;
        }
        let sums = Sums::of(wp, self.metadata.generation.unwrap_or(0), None);
        let entry = sums.entries.iter().find(|e| e.batch.is_some())?;
        let batch = entry.batch.clone().unwrap_or_default();
        let conditions: Vec<JobCondition> = entry
            .conditions
            .iter()
            .map(|c| JobCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
                message: Some(c.message.clone()).filter(|m| !m.is_empty()),
                last_transition_time: Some(c.last_transition_time.clone()),
                last_probe_time: Some(now.clone()),
            })
            .collect();
        let current = self.status.clone().unwrap_or_default();
        Some(JobStatus {
            active: Some(batch.active).filter(|n| *n > 0),
            succeeded: Some(batch.succeeded).filter(|n| *n > 0),
            failed: Some(batch.failed).filter(|n| *n > 0),
            ready: Some(entry.ready_replicas),
            start_time: batch.start_time.or(current.start_time),
            completion_time: batch.completion_time,
            // The probe time is when the aggregator looked: kept as it was while the
            // conditions say the same, so that an unchanged report writes nothing.
            conditions: Some(conditions).filter(|c| !c.is_empty()).map(|mut c| {
                for n in &mut c {
                    if let Some(old) = current.conditions.iter().flatten().find(|o| o.type_ == n.type_ && o.status == n.status) {
                        n.last_probe_time = old.last_probe_time.clone();
                    }
                }
                c
            }),
            ..current
        })
    }

    fn headline(&self, status: Option<&JobStatus>) -> Headline {
        let conditions = status.and_then(|s| s.conditions.as_ref());
        let holds = |t: &str| conditions.into_iter().flatten().find(|c| c.type_ == t && c.status == "True");
        let ended = match (holds("Complete"), holds("Failed")) {
            (Some(_), _) => Some(Ended::Complete),
            (None, Some(c)) => Some(Ended::Failed(c.reason.clone().unwrap_or_else(|| "BackoffLimitExceeded".into()))),
            (None, None) => None,
        };
        let succeeded = status.and_then(|s| s.succeeded).unwrap_or(0);
        Headline {
            ready: succeeded,
            desired: completions(self.spec.as_ref()),
            available: ended.is_none() && status.and_then(|s| s.active).unwrap_or(0) > 0,
            ended,
        }
    }
}

/// Whether the Job's condition `type_` (`Complete`, `Failed`, `Suspended`...) is True, as
/// `kubectl wait --for=condition=complete` reads it.
pub fn has_condition(job: &Job, type_: &str) -> bool {
    job.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == type_ && c.status == "True")
}

/// The label that ties a Job's pods to it, valued with the Job's uid.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label that names a Job on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The labels a Job's pods get from the Job's uid and name, the new ones and the
/// legacy ones Kubernetes still sets, unless the Job sets `manualSelector`.
pub const GENERATED_LABELS: [&str; 4] = [CONTROLLER_UID_LABEL, "controller-uid", JOB_NAME_LABEL, "job-name"];

/// A Job (as JSON) as another cluster must be given it:
/// - without `ttlSecondsAfterFinished`: the workspace deletes the Job when its time is
///   up, and the copy goes with it; a cluster that deleted its copy first would have
///   it made again, and run again;
/// - without the selector and the pod labels its uid generated, since the copy has a
///   uid of its own and its cluster generates its own (a copy that carried them would
///   be refused, `selector not auto-generated`), unless it sets `manualSelector: true`.
pub fn copy_spec(job: &mut serde_json::Value) {
    let Some(spec) = job.get_mut("spec").and_then(serde_json::Value::as_object_mut) else { return };
    spec.remove("ttlSecondsAfterFinished");
    if spec.get("manualSelector").and_then(serde_json::Value::as_bool) == Some(true) {
        return;
    }
    spec.remove("selector");
    let labels = spec.get_mut("template").and_then(|t| t.get_mut("metadata")).and_then(|m| m.get_mut("labels"));
    if let Some(labels) = labels.and_then(serde_json::Value::as_object_mut) {
        labels.retain(|k, _| !GENERATED_LABELS.contains(&k.as_str()));
    }
}

/// Whether the field at `path` of a Job's copy (a dotted path, as drift reports name
/// fields) is what its cluster generated from the copy's uid.
pub fn generated_field(path: &str) -> bool {
    path == "spec.selector"
        || path.starts_with("spec.selector.")
        || path.strip_prefix("spec.template.metadata.labels.").is_some_and(|k| GENERATED_LABELS.contains(&k))
}

/// The pods a Job spec runs at once: its parallelism, no more than its completions.
/// The successes a Job runs to: `spec.completions`, or 1 when it names none (any one
/// success ends it).
pub(super) fn completions(spec: Option<&JobSpec>) -> i32 {
    spec.and_then(|s| s.completions).unwrap_or(1)
}

/// What a cluster's copy of a Job shows, as `kubectl get job`'s COMPLETIONS does: its
/// pods that succeeded over the successes it runs to (from a syncer that does not
/// report those, `share`).
pub(super) fn copy_counts(entry: &ClusterSyncStatus, share: i32) -> (i32, i32) {
    let batch = entry.batch.as_ref();
    (batch.map_or(0, |b| b.succeeded), batch.and_then(|b| b.completions).unwrap_or(share))
}

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
