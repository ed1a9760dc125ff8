//! The cronjob controller: Jobs made from a CronJob's template on its schedule.
//!
//! What it does at a given time is [`placement_api::workload::cron_schedule::plan`]'s
//! to say, the rule the workspace's CronJob controller follows too; this module only
//! turns that plan into the simulator's requests and Events.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use placement_api::workload::cron_schedule::{self, DeleteReason};

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};

pub use placement_api::workload::cron_schedule::SCHEDULED_TIMESTAMP_ANNOTATION;

/// What one CronJob sync decided.
#[derive(Debug, Default)]
pub struct CronJobSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// When the schedule next fires.
    pub wake_at: Option<Timestamp>,
}

/// Syncs one CronJob, whose Jobs are `jobs`.
///
/// The requests go in the order kube-controller-manager makes them: the Jobs
/// `Replace` deletes, each with its Event; the new Job and its Event; the Jobs beyond
/// the history limits; the status.
pub fn sync(cj: &CronJob, jobs: &[&Job], now: Timestamp, rec: &mut Recorder) -> CronJobSync {
    let plan = cron_schedule::plan(cj, jobs, now);
    let mut actions = Vec::new();
    // The plan's Events come in the order of the requests they report on.
    let mut events =
        plan.events.into_iter().map(|(reason, message)| rec.normal(Kind::CronJob, &cj.metadata, component::CRONJOB, reason, message));
    let (replaced, history): (Vec<_>, Vec<_>) = plan.delete.iter().partition(|(_, why)| *why == DeleteReason::Replaced);
    for (name, _) in replaced {
        actions.extend(delete_job(jobs, name));
        actions.extend(events.next());
    }
    if let Some(job) = plan.create {
        actions.push(Action::Create(Object::Job(Box::new(job))));
        actions.extend(events.next());
    }
    actions.extend(events);
    actions.extend(history.into_iter().filter_map(|(name, _)| delete_job(jobs, name)));
    if let Some(status) = plan.status {
        let mut updated = cj.clone();
        updated.status = Some(status);
        actions.push(Action::UpdateStatus(Object::CronJob(Box::new(updated))));
    }
    CronJobSync { actions, wake_at: plan.wake_at }
}

/// Deletes the CronJob's Job `name`, by its own metadata (its uid as the precondition).
fn delete_job(jobs: &[&Job], name: &str) -> Option<Action> {
    let job = jobs.iter().find(|j| j.metadata.name.as_deref() == Some(name))?;
    Some(Action::Delete { target: ObjectRef::from_meta(Kind::Job, &job.metadata), grace_period_seconds: None })
}
