//! The cronjob controller's rule: what it does for one CronJob at a given time.
//!
//! One pure function, [`plan`], which the simulated clusters' cronjob controller and the
//! workspace's CronJob controller both call, so that a schedule runs the same way on
//! either side. As kube-controller-manager's cronjob controller
//! (`pkg/controller/cronjob/cronjob_controllerv2.go`) does:
//! - at each time the schedule names (in its `timeZone`, UTC without one), it creates
//!   the Job `<cronjob>-<scheduled time in Unix minutes>` from `jobTemplate`, with the
//!   annotation [`SCHEDULED_TIMESTAMP_ANNOTATION`] and the CronJob as its controller;
//!   only the latest of several missed times runs (of at most [`MAX_MISSED`]), and
//!   none past `startingDeadlineSeconds`;
//! - `concurrencyPolicy: Forbid` holds a time back while a Job still runs (it starts
//!   late, once that Job ends), and `Replace` deletes the running Jobs first;
//! - a suspended CronJob makes no Job;
//! - `status.active` lists its running Jobs, `lastScheduleTime` the time of the last
//!   one made, `lastSuccessfulTime` when the last one completed;
//! - finished Jobs beyond `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`
//!   are deleted, oldest first.
//!
//! Flotilla adds one thing: a Job made from a CronJob carries the CronJob's
//! [`PLACEMENT_ANNOTATION`], so that the same Placement governs both.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::job::has_condition;
use super::Workload;
use crate::PLACEMENT_ANNOTATION;

/// The annotation a scheduled Job carries: the time it was scheduled for, in RFC 3339
/// (kube-controller-manager's `batch.kubernetes.io/cronjob-scheduled-timestamp`).
pub const SCHEDULED_TIMESTAMP_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// At most this many missed times are looked at; older ones are skipped. A CronJob
/// left alone for long (a cluster down for days) must not cost one step per minute
/// missed, and only the latest time would run anyway.
pub const MAX_MISSED: usize = 100;

/// The history kept when a CronJob sets no limit, as the API server defaults
/// `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`.
const DEFAULT_SUCCESSFUL_HISTORY: i32 = 3;
const DEFAULT_FAILED_HISTORY: i32 = 1;

/// Why [`plan`] deletes a Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// `concurrencyPolicy: Replace`: it still ran when a new time came. Each such
    /// delete has its `SuccessfulDelete` Event in [`Plan::events`].
    Replaced,
    /// It finished and is beyond the history limit of its outcome. No Event is
    /// recorded for it.
    History,
}

/// What the cronjob controller does for one CronJob at `now`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// Jobs to delete, by name, in order: with `concurrencyPolicy: Replace` the running
    /// ones ([`DeleteReason::Replaced`], to delete before [`Plan::create`]); then the
    /// finished ones beyond the history limits, succeeded before failed, each oldest
    /// first ([`DeleteReason::History`]).
    pub delete: Vec<(String, DeleteReason)>,
    /// The Job to create, if a time is due.
    pub create: Option<Job>,
    /// The new status, when it differs from the stored one.
    pub status: Option<CronJobStatus>,
    /// Normal Events to record on the CronJob, `(reason, message)` as
    /// kube-controller-manager words them, in the order they happen: one
    /// `SuccessfulDelete` ("Deleted job NAME") for each [`DeleteReason::Replaced`]
    /// delete, in the order of [`Plan::delete`], then `SuccessfulCreate` ("Created job
    /// NAME") for [`Plan::create`].
    pub events: Vec<(&'static str, String)>,
    /// When the schedule next needs a look: the next time it fires after `now`.
    pub wake_at: Option<Timestamp>,
}

/// What the cronjob controller does for `cj` at `now`, given its own Jobs `jobs` (the
/// caller picks them by their controller's uid).
///
/// The Job it creates is the template's metadata and spec, in the CronJob's namespace,
/// with the CronJob as its controller (`batch/v1` `CronJob`, `controller` and
/// `blockOwnerDeletion` true), the scheduled time in [`SCHEDULED_TIMESTAMP_ANNOTATION`],
/// and the CronJob's [`PLACEMENT_ANNOTATION`] when the CronJob has one and the
/// template's metadata does not: a CronJob's Jobs are governed by the CronJob's
/// Placement.
///
/// A CronJob being deleted, one without a uid (not stored yet) or one whose schedule
/// does not parse (the API server validates it) gets an empty plan.
pub fn plan(cj: &CronJob, jobs: &[&Job], now: Timestamp) -> Plan {
    let mut out = Plan::default();
    if cj.metadata.deletion_timestamp.is_some() || cj.metadata.uid.is_none() {
        return out;
    }
    let spec = cj.spec.clone().unwrap_or_default();
    let Ok(schedule) = apimachinery::cron::parse(&spec.schedule) else {
        return out;
    };
    let old = cj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let zone = spec.time_zone.as_deref().and_then(|z| TimeZone::get(z).ok()).unwrap_or(TimeZone::UTC);
    // The schedule reads the zone's wall clock: shift to it and back.
    let offset = |t: Timestamp| i64::from(zone.to_offset(t).seconds());
    let next_after = |t: Timestamp| {
        let local = t.as_second() + offset(t);
        schedule.next_after(local).and_then(|n| Timestamp::from_second(n - offset(t)).ok())
    };

    let mut running: Vec<&Job> = jobs.iter().copied().filter(|j| !j.finished()).collect();
    let since = status.last_schedule_time.as_ref().or(cj.metadata.creation_timestamp.as_ref()).map_or(now, |t| t.0);
    let due = latest_due(since, now, next_after);
    let too_late = |t: Timestamp| spec.starting_deadline_seconds.is_some_and(|d| now.as_second() - t.as_second() > d);
    if let Some(scheduled) = due.filter(|t| spec.suspend != Some(true) && !too_late(*t)) {
        let name = format!("{}-{}", cj.metadata.name.as_deref().unwrap_or_default(), scheduled.as_second() / 60);
        let exists = jobs.iter().any(|j| j.metadata.name.as_deref() == Some(name.as_str()));
        let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
        let held_back = policy == "Forbid" && !running.is_empty();
        if !exists && !held_back {
            if policy == "Replace" {
                for j in running.drain(..) {
                    let jname = j.metadata.name.clone().unwrap_or_default();
                    out.events.push(("SuccessfulDelete", format!("Deleted job {jname}")));
                    out.delete.push((jname, DeleteReason::Replaced));
                }
            }
            out.create = Some(new_job(cj, &name, scheduled));
            out.events.push(("SuccessfulCreate", format!("Created job {name}")));
            // Whole seconds already: the schedule names Unix seconds.
            status.last_schedule_time = Some(Time(scheduled));
        }
        // Forbid: the time waits until the running Job ends (and starts then, unless
        // it is past startingDeadlineSeconds or a later time has come).
    }

    status.active = Some(running.iter().map(|j| reference(j)).collect::<Vec<_>>()).filter(|a| !a.is_empty());
    let completed = jobs.iter().filter(|j| has_condition(j, "Complete"));
    if let Some(t) = completed.filter_map(|j| j.status.as_ref()?.completion_time.clone()).max_by_key(|t| t.0) {
        status.last_successful_time = Some(t);
    }
    out.delete.extend(history_cleanup(jobs, &spec).into_iter().map(|name| (name, DeleteReason::History)));
    out.status = Some(status).filter(|s| *s != old);
    out.wake_at = next_after(now);
    out
}

/// The latest time the schedule names after `since` and no later than `now`, of the
/// first [`MAX_MISSED`] of them.
fn latest_due(since: Timestamp, now: Timestamp, next_after: impl Fn(Timestamp) -> Option<Timestamp>) -> Option<Timestamp> {
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
    due
}

/// The Job made for `scheduled`: the template's metadata and spec, the CronJob as its
/// controller, the scheduled time and the CronJob's Placement in its annotations.
fn new_job(cj: &CronJob, name: &str, scheduled: Timestamp) -> Job {
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP_ANNOTATION.into(), scheduled.to_string());
    if let Some(placement) = cj.metadata.annotations.as_ref().and_then(|a| a.get(PLACEMENT_ANNOTATION)) {
        annotations.entry(PLACEMENT_ANNOTATION.into()).or_insert_with(|| placement.clone());
    }
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: cj.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(&cj.metadata)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The CronJob as its Jobs' controller, as kube-controller-manager sets it
/// (`metav1.NewControllerRef`).
fn controller_ref(cj: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: cj.name.clone().unwrap_or_default(),
        uid: cj.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A running Job, as `status.active` lists it.
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

/// The names of the oldest finished Jobs beyond the history limits: succeeded ones
/// first, then failed ones, each oldest first (by start time, then name).
fn history_cleanup(jobs: &[&Job], spec: &CronJobSpec) -> Vec<String> {
    let mut by_outcome: BTreeMap<&str, Vec<&Job>> = BTreeMap::new();
    for j in jobs {
        if has_condition(j, "Complete") {
            by_outcome.entry("Complete").or_default().push(j);
        } else if has_condition(j, "Failed") {
            by_outcome.entry("Failed").or_default().push(j);
        }
    }
    let mut out = Vec::new();
    for (outcome, mut finished) in by_outcome {
        let limit = if outcome == "Complete" {
            spec.successful_jobs_history_limit.unwrap_or(DEFAULT_SUCCESSFUL_HISTORY)
        } else {
            spec.failed_jobs_history_limit.unwrap_or(DEFAULT_FAILED_HISTORY)
        };
        let limit = usize::try_from(limit).unwrap_or(0);
        finished.sort_by_key(|j| (j.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0), j.metadata.name.clone()));
        let excess = finished.len().saturating_sub(limit);
        out.extend(finished.into_iter().take(excess).map(|j| j.metadata.name.clone().unwrap_or_default()));
    }
    out
}

#[cfg(test)]
mod tests;
