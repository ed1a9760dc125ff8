//! The cronjob controller: Jobs made from a CronJob's template on its schedule.
//!
//! As kube-controller-manager's cronjob controller does:
//! - at each time the schedule names (in its `timeZone`, UTC without one), it creates
//!   the Job `<cronjob>-<scheduled time in Unix minutes>` from `jobTemplate`, with the
//!   annotation `batch.kubernetes.io/cronjob-scheduled-timestamp`; only the latest of
//!   several missed times runs, and none past `startingDeadlineSeconds`;
//! - `concurrencyPolicy: Forbid` holds a time back while a Job still runs (it starts
//!   late, once that Job ends), and `Replace` deletes the running Jobs first;
//! - a suspended CronJob makes no Job;
//! - `status.active` lists its running Jobs, `lastScheduleTime` the time of the last
//!   one made, `lastSuccessfulTime` when the last one completed;
//! - finished Jobs beyond `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`
//!   are deleted, oldest first.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::{job, k8s_time, pod};

/// The annotation a scheduled Job carries: the time it was scheduled for.
pub const SCHEDULED_TIMESTAMP_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// At most this many missed times are looked at; older ones are skipped.
const MAX_MISSED: usize = 100;

/// What one CronJob sync decided.
#[derive(Debug, Default)]
pub struct CronJobSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// When the schedule next fires.
    pub wake_at: Option<Timestamp>,
}

/// Syncs one CronJob, whose Jobs are `jobs`.
pub fn sync(cj: &CronJob, jobs: &[&Job], now: Timestamp, rec: &mut Recorder) -> CronJobSync {
    let mut out = CronJobSync::default();
    if cj.metadata.deletion_timestamp.is_some() || cj.metadata.uid.is_none() {
        return out;
    }
    let spec = cj.spec.clone().unwrap_or_default();
    let old = cj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let Ok(schedule) = apimachinery::cron::parse(&spec.schedule) else {
        // The API server validated it; a schedule that does not parse makes no Job.
        return out;
    };
    let zone = spec.time_zone.as_deref().and_then(|z| jiff::tz::TimeZone::get(z).ok()).unwrap_or(jiff::tz::TimeZone::UTC);
    // The schedule reads the zone's wall clock: shift to it and back.
    let offset = |t: Timestamp| i64::from(zone.to_offset(t).seconds());
    let next_after = |t: Timestamp| {
        let local = t.as_second() + offset(t);
        schedule.next_after(local).and_then(|n| Timestamp::from_second(n - offset(t)).ok())
    };

    let mut running: Vec<&Job> = jobs.iter().copied().filter(|j| !job::finished(j)).collect();
    let since = status.last_schedule_time.as_ref().or(cj.metadata.creation_timestamp.as_ref()).map_or(now, |t| t.0);
    // The latest time due, of at most MAX_MISSED.
    let mut due = None;
    let mut cursor = since;
    for _ in 0..MAX_MISSED {
        match next_after(cursor) {
            Some(t) if t <= now => {
                due = Some(t);
                cursor = t;
            }
            _ => break,
        }
    }
    let too_late = |t: Timestamp| spec.starting_deadline_seconds.is_some_and(|d| now.as_second() - t.as_second() > d);
    if let Some(scheduled) = due.filter(|t| spec.suspend != Some(true) && !too_late(*t)) {
        let name = format!("{}-{}", cj.metadata.name.as_deref().unwrap_or_default(), scheduled.as_second() / 60);
        let exists = jobs.iter().any(|j| j.metadata.name.as_deref() == Some(name.as_str()));
        let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
        let held_back = policy == "Forbid" && !running.is_empty();
        if !exists && !held_back {
            if policy == "Replace" {
                for j in running.drain(..) {
                    out.actions.push(delete_job(j));
                    let jname = j.metadata.name.clone().unwrap_or_default();
                    out.actions.push(rec.normal(
                        Kind::CronJob,
                        &cj.metadata,
                        component::CRONJOB,
                        "SuccessfulDelete",
                        format!("Deleted job {jname}"),
                    ));
                }
            }
            out.actions.push(Action::Create(Object::Job(Box::new(new_job(cj, &name, scheduled)))));
            out.actions.push(rec.normal(
                Kind::CronJob,
                &cj.metadata,
                component::CRONJOB,
                "SuccessfulCreate",
                format!("Created job {name}"),
            ));
            status.last_schedule_time = Some(k8s_time(scheduled));
        }
        // Forbid: the time waits until the running Job ends (and starts then, unless
        // it is past startingDeadlineSeconds or a later time has come).
    }

    status.active = Some(running.iter().map(|j| reference(j)).collect::<Vec<_>>()).filter(|a| !a.is_empty());
    let completed = jobs.iter().filter(|j| job::has_condition(j, "Complete"));
    if let Some(t) = completed.filter_map(|j| j.status.as_ref()?.completion_time.clone()).max_by_key(|t| t.0) {
        status.last_successful_time = Some(t);
    }
    out.actions.extend(history_cleanup(jobs, spec.successful_jobs_history_limit, spec.failed_jobs_history_limit));
    if status != old {
        let mut updated = cj.clone();
        updated.status = Some(status);
        out.actions.push(Action::UpdateStatus(Object::CronJob(Box::new(updated))));
    }
    out.wake_at = next_after(now);
    out
}

/// The Job made for `scheduled`: the template's metadata and spec, the CronJob as its
/// controller, the scheduled time in its annotation.
fn new_job(cj: &CronJob, name: &str, scheduled: Timestamp) -> Job {
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP_ANNOTATION.into(), k8s_time(scheduled).0.to_string());
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: cj.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![pod::controller_ref("batch/v1", "CronJob", &cj.metadata)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn reference(j: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: j.metadata.name.clone(),
        namespace: j.metadata.namespace.clone(),
        uid: j.metadata.uid.clone(),
        ..Default::default()
    }
}

fn delete_job(j: &Job) -> Action {
    Action::Delete { target: ObjectRef::from_meta(Kind::Job, &j.metadata), grace_period_seconds: None }
}

/// Deletes the oldest finished Jobs beyond the history limits (3 succeeded, 1 failed by
/// default, as the API defaults them).
fn history_cleanup(jobs: &[&Job], successful: Option<i32>, failed: Option<i32>) -> Vec<Action> {
    let mut by_outcome: BTreeMap<&str, Vec<&Job>> = BTreeMap::new();
    for j in jobs {
        if job::has_condition(j, "Complete") {
            by_outcome.entry("Complete").or_default().push(j);
        } else if job::has_condition(j, "Failed") {
            by_outcome.entry("Failed").or_default().push(j);
        }
    }
    let mut out = Vec::new();
    for (outcome, mut finished) in by_outcome {
        let limit = if outcome == "Complete" { successful.unwrap_or(3) } else { failed.unwrap_or(1) }.max(0) as usize;
        finished.sort_by_key(|j| (j.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0), j.metadata.name.clone()));
        let excess = finished.len().saturating_sub(limit);
        out.extend(finished.into_iter().take(excess).map(delete_job));
    }
    out
}
