//! The job controller: pods that run to completion, counted into the Job's status.
//!
//! As kube-controller-manager's job controller does:
//! - it keeps `parallelism` pods running, no more than the completions still wanted,
//!   and creates a new pod for each one that fails;
//! - once `completions` pods have succeeded (or, with no `completions`, once one has and
//!   none runs), the Job is done: `SuccessCriteriaMet` and `Complete` turn True with
//!   reason `CompletionsReached`, and `completionTime` is set;
//! - once more pods failed than `backoffLimit`, or the Job ran past
//!   `activeDeadlineSeconds`, it has failed: `FailureTarget` and `Failed` turn True
//!   (`BackoffLimitExceeded`, `DeadlineExceeded`), and its running pods are deleted;
//! - a suspended Job runs no pods, and says `Suspended`;
//! - a finished Job never runs a pod again;
//! - an `Indexed` Job's pods each have an index (`0` to `completions - 1`) in the
//!   annotation and label `batch.kubernetes.io/job-completion-index` and the
//!   environment variable `JOB_COMPLETION_INDEX`, with the hostname `<job>-<index>`; each
//!   index must succeed once, the lowest missing ones run first, and
//!   `status.completedIndexes` lists those done (`0-2,4`);
//! - a finished Job with `ttlSecondsAfterFinished` is deleted that long after it
//!   finished, its pods with it (the ttl-after-finished controller).
//!
//! `status.startTime` is set when it first runs; `active`, `ready`, `succeeded` and
//! `failed` count its pods. The simulation recreates a failed pod at once, where
//! Kubernetes waits a back-off between failures.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::names::NameSource;
use super::{k8s_time, pod};

/// At most this many pods are created for one Job in one pass, as the controller's burst.
const BURST: usize = 500;

/// What one Job sync reads.
#[derive(Debug)]
pub struct JobInput<'a> {
    /// The Job.
    pub job: &'a Job,
    /// The pods it controls, finished ones included.
    pub pods: Vec<&'a Pod>,
    /// Whether the controller's earlier creates and deletes have all been seen.
    pub manage: bool,
}

/// What one Job sync decided.
#[derive(Debug, Default)]
pub struct JobSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// Names of the pods asked for.
    pub created: Vec<String>,
    /// Uids of the pods asked to be deleted.
    pub deleted: Vec<String>,
    /// When the Job's deadline passes, if it is running with one.
    pub wake_at: Option<Timestamp>,
}

/// How a Job ends: the condition type, reason and message.
struct Ending {
    conditions: [&'static str; 2],
    reason: &'static str,
    message: &'static str,
}

const COMPLETED: Ending = Ending {
    conditions: ["SuccessCriteriaMet", "Complete"],
    reason: "CompletionsReached",
    message: "Reached expected number of succeeded pods",
};
const BACKOFF_EXCEEDED: Ending = Ending {
    conditions: ["FailureTarget", "Failed"],
    reason: "BackoffLimitExceeded",
    message: "Job has reached the specified backoff limit",
};
const DEADLINE_EXCEEDED: Ending = Ending {
    conditions: ["FailureTarget", "Failed"],
    reason: "DeadlineExceeded",
    message: "Job was active longer than specified deadline",
};

pub use placement_api::workload::job::has_condition;

/// Whether the Job has finished, for good: Complete or Failed.
pub fn finished(job: &Job) -> bool {
    placement_api::workload::Workload::finished(job)
}

/// Syncs one Job. `taken` holds the pod names used in the namespace; new ones are added.
pub fn sync(input: &JobInput<'_>, now: Timestamp, names: &mut dyn NameSource, taken: &mut BTreeSet<String>, rec: &mut Recorder) -> JobSync {
    let job = input.job;
    let mut out = JobSync::default();
    if job.metadata.deletion_timestamp.is_some() || job.metadata.uid.is_none() {
        return out;
    }
    let spec = job.spec.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let active: Vec<&Pod> = input.pods.iter().copied().filter(|p| pod::is_active(p)).collect();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let done_indexes: BTreeSet<i32> = input.pods.iter().filter(|p| pod::phase(p) == "Succeeded").filter_map(|p| index_of(p)).collect();
    let succeeded =
        if indexed { done_indexes.len() as i32 } else { input.pods.iter().filter(|p| pod::phase(p) == "Succeeded").count() as i32 };
    let failed = input.pods.iter().filter(|p| pod::phase(p) == "Failed").count() as i32;
    let suspended = spec.suspend == Some(true);
    // Whether its pods are being stopped: it failed, or is suspended.
    let mut stopped = has_condition(job, "Failed") || suspended;

    let mut delete = |pods: &[&Pod], out: &mut JobSync| {
        for p in pods {
            out.deleted.push(p.metadata.uid.clone().unwrap_or_default());
            out.actions.push(Action::Delete { target: ObjectRef::from_meta(Kind::Pod, &p.metadata), grace_period_seconds: None });
            let name = p.metadata.name.clone().unwrap_or_default();
            out.actions.push(rec.normal(Kind::Job, &job.metadata, component::JOB, "SuccessfulDelete", format!("Deleted pod: {name}")));
        }
    };

    if finished(job) {
        // A failed Job's pods are stopped; a finished Job never runs again.
        if input.manage && has_condition(job, "Failed") && !active.is_empty() {
            delete(&active, &mut out);
        }
        // Its time to live runs from when it finished.
        let ended = status.completion_time.clone().or_else(|| {
            status.conditions.iter().flatten().find(|c| c.type_ == "Failed" && c.status == "True")?.last_transition_time.clone()
        });
        if let (Some(ttl), Some(ended)) = (spec.ttl_seconds_after_finished, ended) {
            let expires = ended.0 + SignedDuration::from_secs(i64::from(ttl.max(0)));
            if now >= expires {
                out.actions.push(Action::Delete { target: ObjectRef::from_meta(Kind::Job, &job.metadata), grace_period_seconds: None });
                return out;
            }
            out.wake_at = Some(expires);
        }
    } else if suspended {
        if input.manage && !active.is_empty() {
            delete(&active, &mut out);
        }
        set_condition(&mut status, "Suspended", "True", "JobSuspended", "Job suspended", now);
    } else {
        set_condition(&mut status, "Suspended", "False", "JobResumed", "Job resumed", now);
        let start = status.start_time.get_or_insert_with(|| k8s_time(now)).0;
        let deadline = spec.active_deadline_seconds.map(|s| start + SignedDuration::from_secs(s));
        let completions = spec.completions;
        let done = match completions {
            Some(c) => succeeded >= c,
            None => succeeded >= 1 && active.is_empty(),
        };
        let ending = if done {
            Some(COMPLETED)
        } else if failed > spec.backoff_limit.unwrap_or(6) {
            Some(BACKOFF_EXCEEDED)
        } else if deadline.is_some_and(|d| now >= d) {
            Some(DEADLINE_EXCEEDED)
        } else {
            None
        };
        match ending {
            Some(end) => {
                for type_ in end.conditions {
                    set_condition(&mut status, type_, "True", end.reason, end.message, now);
                }
                if done {
                    status.completion_time = Some(k8s_time(now));
                    out.actions.push(rec.normal(Kind::Job, &job.metadata, component::JOB, "Completed", "Job completed".into()));
                } else {
                    stopped = true;
                    if input.manage {
                        delete(&active, &mut out);
                    }
                    out.actions.push(rec.warning(Kind::Job, &job.metadata, component::JOB, end.reason, end.message.into()));
                }
            }
            None if input.manage => {
                let parallelism = spec.parallelism.unwrap_or(1).max(0);
                let wanted = match completions {
                    Some(c) => parallelism.min(c - succeeded),
                    None if succeeded > 0 => 0,
                    None => parallelism,
                };
                let missing = (wanted.max(0) as usize).saturating_sub(active.len()).min(BURST);
                // An Indexed Job runs the lowest indexes that have neither succeeded nor run.
                let running: BTreeSet<i32> = active.iter().filter_map(|p| index_of(p)).collect();
                let mut free = (0..completions.unwrap_or(1)).filter(|i| !done_indexes.contains(i) && !running.contains(i));
                for _ in 0..missing {
                    let template = job.spec.as_ref().map(|s| s.template.clone());
                    let index = if indexed { free.next() } else { None };
                    if indexed && index.is_none() {
                        break;
                    }
                    let mut p = pod::from_template(&job.metadata, "batch/v1", "Job", template, names, taken);
                    if let Some(i) = index {
                        with_index(&mut p, job, i);
                    }
                    let name = p.metadata.name.clone().unwrap_or_default();
                    out.created.push(name.clone());
                    out.actions.push(Action::Create(Object::Pod(Box::new(p))));
                    out.actions.push(rec.normal(
                        Kind::Job,
                        &job.metadata,
                        component::JOB,
                        "SuccessfulCreate",
                        format!("Created pod: {name}"),
                    ));
                }
                out.wake_at = deadline;
            }
            None => out.wake_at = deadline,
        }
    }

    // Counts describe the pods seen at the start of the sync, as the controller's do.
    let still_active = if stopped { 0 } else { active.len() as i32 };
    status.active = Some(still_active).filter(|n| *n > 0);
    status.ready = Some(active.iter().filter(|p| pod::is_ready(p)).count() as i32);
    status.succeeded = Some(succeeded).filter(|n| *n > 0);
    status.failed = Some(failed).filter(|n| *n > 0);
    status.terminating = Some(0);
    if indexed {
        status.completed_indexes = Some(ranges(&done_indexes)).filter(|r| !r.is_empty());
    }
    status.uncounted_terminated_pods.get_or_insert_with(UncountedTerminatedPods::default);
    if status != old {
        let mut updated = job.clone();
        updated.status = Some(status);
        out.actions.push(Action::UpdateStatus(Object::Job(Box::new(updated))));
    }
    out
}

/// The annotation and label with an Indexed Job pod's index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

fn index_of(p: &Pod) -> Option<i32> {
    p.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?.parse().ok()
}

/// Gives pod `p` of an Indexed Job its index: the annotation and label, the
/// environment variable from the annotation, and the hostname `<job>-<index>`.
fn with_index(p: &mut Pod, job: &Job, i: i32) {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};
    p.metadata.annotations.get_or_insert_with(Default::default).insert(COMPLETION_INDEX.into(), i.to_string());
    p.metadata.labels.get_or_insert_with(Default::default).insert(COMPLETION_INDEX.into(), i.to_string());
    let name = job.metadata.name.as_deref().unwrap_or_default();
    if let Some(spec) = p.spec.as_mut() {
        spec.hostname = Some(format!("{name}-{i}"));
        for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            c.env.get_or_insert_with(Vec::new).push(EnvVar {
                name: "JOB_COMPLETION_INDEX".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                    }),
                    ..Default::default()
                }),
            });
        }
    }
}

/// Indexes as the API writes them: runs of consecutive ones as `a-b`, joined by commas.
fn ranges(indexes: &BTreeSet<i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap_or(end);
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    out.join(",")
}

/// Sets a condition, keeping its transition time while its status stays the same. A
/// `Suspended=False` is only written over an earlier `Suspended=True`.
fn set_condition(status: &mut JobStatus, type_: &str, value: &str, reason: &str, message: &str, now: Timestamp) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let existing = conditions.iter().position(|c| c.type_ == type_);
    if type_ == "Suspended" && value == "False" && existing.is_none() {
        return;
    }
    if existing.is_some_and(|i| conditions[i].status == value && conditions[i].reason.as_deref() == Some(reason)) {
        return;
    }
    let condition = JobCondition {
        type_: type_.into(),
        status: value.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(k8s_time(now)),
        last_transition_time: Some(k8s_time(now)),
    };
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}
