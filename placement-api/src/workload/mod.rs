//! The workload model: every workload kind Flotilla places, described once.
//!
//! For each kind this module says where its pod template and its replicas are, how it
//! spreads over the clusters a Placement chooses, what a failover may do with it,
//! which objects keep its revision history, and what its copies' reports mean:
//! whether a copy is progressing, available, stalled, complete or failed. The
//! scheduler, the syncer, the status aggregator, `flotilla status`, `explain` and the
//! dashboard ask it, and keep no rule of their own about a kind.
//!
//! ```text
//!                 ┌────────────────────── WorkloadKind ───────────────────────┐
//!   apply ──────▶ │ Deployment   StatefulSet   DaemonSet  Job    CronJob      │
//!                 │   spread:   Replicas  Whole   Every      One    InWorkspace │ ──▶ scheduler
//!                 │   failover: Move   AfterConfirm Stay     Rerun  (its Jobs)  │ ──▶ health, drain
//!                 │   history:  ReplicaSets  ControllerRevisions  ─      ─      │ ──▶ revisions
//!                 │   reports:  copy_state(entry, share)                        │ ──▶ aggregator,
//!                 └───────────────────────────────────────────────────────────┘     status, dashboard
//! ```
//!
//! Adding a kind is one more variant, its row in [`KINDS`], and one module that
//! implements [`Workload`] for its type and its report rule.

/// A kind's own conditions (a list of its condition type, if any) as the
/// `metav1.Condition`s of a report ([`reported_condition`]).
macro_rules! reported_conditions {
    ($conditions:expr) => {
        $conditions
            .into_iter()
            .flatten()
            .map(|c| super::reported_condition(c.type_, c.status, c.reason, c.message, c.last_transition_time))
            .collect()
    };
}

pub mod cron_schedule;
mod cronjob;
mod daemonset;
mod deployment;
pub mod job;
mod statefulset;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

use crate::{ClusterSyncStatus, WorkloadPlacement, SYNCED_GENERATION_ANNOTATION};

/// A kind of workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `apps/v1` DaemonSet.
    DaemonSet,
    /// `batch/v1` Job.
    Job,
    /// `batch/v1` CronJob.
    CronJob,
}

/// How a workload spreads over the clusters its Placement chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// Its replicas divide over the chosen clusters (`Divide`), or every chosen
    /// cluster runs all of them (`Duplicate`).
    Replicas,
    /// It runs whole on one cluster, because its pods' names and volumes live there;
    /// `Duplicate` gives each chosen cluster a whole set of its own.
    Whole,
    /// It runs on every cluster the Placement selects; `numberOfClusters` does not
    /// limit it.
    EveryCluster,
    /// It runs on exactly one cluster, whatever the Placement asks.
    One,
    /// It is not placed: it runs in the workspace itself, and what it makes is placed
    /// on its own. A CronJob's schedule runs in the workspace, under one Lease, and
    /// each Job it makes is placed as a Job: no cluster holds the schedule, so a lost
    /// cluster that comes back cannot fire it a second time.
    InWorkspace,
}

/// What a failover may do with the copy on a cluster that was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failover {
    /// Start a replacement elsewhere at once, make-before-break.
    Move,
    /// Start it elsewhere only once the lost cluster is confirmed lost (`flotilla
    /// cluster confirm-lost`), or at once where the Placement says
    /// `failover.statefulSets: Immediate`: at most one copy is ever alive, as
    /// Kubernetes treats a StatefulSet's pods on an unreachable node.
    AfterConfirm,
    /// Run it again elsewhere unless it finished; a finished one never runs again.
    RerunUnlessFinished,
    /// Nothing moves: it runs on every selected cluster, and a lost one just has no
    /// copy until it returns; or it has no copies at all (a CronJob, whose Jobs move
    /// by their own rule).
    Stay,
}

/// Which objects keep a workload's revision history (for `kubectl rollout history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// apps/v1 ReplicaSets, one per pod template.
    ReplicaSets,
    /// apps/v1 ControllerRevisions, one per pod template.
    ControllerRevisions,
    /// None: a Job's template never changes; a CronJob's history is its Jobs.
    None,
}

/// One kind's facts.
#[derive(Debug)]
pub struct Kind {
    /// The kind.
    pub kind: WorkloadKind,
    /// `Deployment`.
    pub name: &'static str,
    /// The API group.
    pub group: &'static str,
    /// The version served and synced.
    pub version: &'static str,
    /// The resource.
    pub plural: &'static str,
    /// The short name kubectl accepts (`deploy`, `sts`...), as `flotilla explain` does.
    pub short: &'static str,
    /// A bounded label value for metrics.
    pub label: &'static str,
    /// How it spreads.
    pub spread: Spread,
    /// What a failover may do with it.
    pub failover: Failover,
    /// Where its revision history is kept.
    pub history: History,
}

/// Every workload kind, in the order `flotilla status` and the dashboard list them.
pub const KINDS: [Kind; 5] = [
    Kind {
        kind: WorkloadKind::Deployment,
        name: "Deployment",
        group: "apps",
        version: "v1",
        plural: "deployments",
        short: "deploy",
        label: "deployment",
        spread: Spread::Replicas,
        failover: Failover::Move,
        history: History::ReplicaSets,
    },
    Kind {
        kind: WorkloadKind::StatefulSet,
        name: "StatefulSet",
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        short: "sts",
        label: "statefulset",
        spread: Spread::Whole,
        failover: Failover::AfterConfirm,
        history: History::ControllerRevisions,
    },
    Kind {
        kind: WorkloadKind::DaemonSet,
        name: "DaemonSet",
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        short: "ds",
        label: "daemonset",
        spread: Spread::EveryCluster,
        failover: Failover::Stay,
        history: History::ControllerRevisions,
    },
    Kind {
        kind: WorkloadKind::Job,
        name: "Job",
        group: "batch",
        version: "v1",
        plural: "jobs",
        short: "job",
        label: "job",
        spread: Spread::One,
        failover: Failover::RerunUnlessFinished,
        history: History::None,
    },
    Kind {
        kind: WorkloadKind::CronJob,
        name: "CronJob",
        group: "batch",
        version: "v1",
        plural: "cronjobs",
        short: "cj",
        label: "cronjob",
        spread: Spread::InWorkspace,
        failover: Failover::Stay,
        history: History::None,
    },
];

impl WorkloadKind {
    /// This kind's facts.
    pub fn describe(self) -> &'static Kind {
        &KINDS[self as usize]
    }

    /// The kind an `apiVersion` and `kind` name, if it is a workload.
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        KINDS.iter().find(|k| k.name == kind && api_version == k.api_version()).map(|k| k.kind)
    }

    /// The kind a resource name or short name names (`deployments`, `deploy`,
    /// `deployment`, `statefulset.apps`), as kubectl resolves `TYPE/NAME`.
    pub fn of_resource(resource: &str) -> Option<Self> {
        let (resource, group) = resource.split_once('.').map_or((resource, None), |(r, g)| (r, Some(g)));
        let resource = resource.to_ascii_lowercase();
        KINDS
            .iter()
            .find(|k| {
                group.is_none_or(|g| g == k.group)
                    && (resource == k.plural || resource == k.short || resource == k.name.to_ascii_lowercase())
            })
            .map(|k| k.kind)
    }

    /// `Deployment`.
    pub fn name(self) -> &'static str {
        self.describe().name
    }
}

impl Kind {
    /// Whether the scheduler places it, and clusters hold copies of it: every kind but
    /// one that runs in the workspace ([`Spread::InWorkspace`]).
    pub fn placed(&self) -> bool {
        self.spread != Spread::InWorkspace
    }

    /// Its resource, for a dynamic client.
    pub fn api_resource(&self) -> kube::api::ApiResource {
        kube::api::ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: self.api_version(),
            kind: self.name.into(),
            plural: self.plural.into(),
        }
    }

    /// Whether a cluster's copy says its replicas: its share of them (a Deployment, a
    /// StatefulSet). The others' copies say what the workspace's object says.
    pub fn copies_replicas(&self) -> bool {
        matches!(self.spread, Spread::Replicas | Spread::Whole)
    }

    /// `apps/v1`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// What one cluster's copy of a workload is doing, as its report says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyState {
    /// Still getting to what it was asked for: not yet observed, or pods not yet
    /// ready, updated or available.
    Progressing,
    /// Running as asked: every pod of its share ready and available, its rollout
    /// over.
    Available,
    /// Its rollout stopped making progress (a Deployment past its progress deadline);
    /// the reason says how.
    Stalled(String),
    /// It ran to completion (a Job).
    Complete,
    /// It failed for good (a Job past its backoff limit or deadline); the reason says how.
    Failed(String),
}

impl CopyState {
    /// Whether nothing more is coming for the copy until something changes: its
    /// report is never held back.
    pub fn settled(&self) -> bool {
        !matches!(self, CopyState::Progressing)
    }
}

/// What a cluster's report on its copy means for a workload of `kind`, with `share`
/// replicas assigned there.
pub fn copy_state(kind: WorkloadKind, entry: &ClusterSyncStatus, share: i32) -> CopyState {
    match kind {
        WorkloadKind::Deployment => deployment::copy_state(entry, share),
        WorkloadKind::StatefulSet => statefulset::copy_state(entry, share),
        WorkloadKind::DaemonSet => daemonset::copy_state(entry),
        WorkloadKind::Job => job::copy_state(entry),
        // Never copied: its Jobs are.
        WorkloadKind::CronJob => CopyState::Progressing,
    }
}

/// Why a workload of `kind` named `name` is not placed when a WorkloadPlacement of that
/// name places the `holder` of another kind: a WorkloadPlacement has its workload's
/// name. The scheduler's Event and `flotilla status` say it in these words.
pub fn name_taken(name: &str, holder: WorkloadKind, kind: WorkloadKind) -> String {
    format!(
        "not placed: WorkloadPlacement {name} is the {} {name}'s, and a WorkloadPlacement has its workload's name; rename this {} to place it",
        holder.name(),
        kind.name()
    )
}

/// Whether a cluster's copy counts as available, for the WorkloadPlacement's
/// `Available`: a Deployment's copy while its own `Available` is True with its share
/// available (through a rolling update too); any other once [`copy_state`] says it is
/// Available or, for a Job, Complete.
pub fn copy_available(kind: WorkloadKind, entry: &ClusterSyncStatus, share: i32) -> bool {
    match kind {
        WorkloadKind::Deployment => is_true(entry, "Available") && entry.available_replicas >= share,
        _ => matches!(copy_state(kind, entry, share), CopyState::Available | CopyState::Complete),
    }
}

/// What a cluster's copy of a workload of `kind` shows as done over wanted, with
/// `share` assigned there (`None`: no report yet). The WorkloadPlacement's summary and
/// ready count, `flotilla status` and the dashboard all read it:
/// - ready replicas over the share, for a DaemonSet over the nodes it reports
///   ([`desired_on`]);
/// - for a Job, its pods that succeeded over its completions, as the Job's own READY
///   reads.
pub fn copy_counts(kind: WorkloadKind, entry: Option<&ClusterSyncStatus>, share: i32) -> (i32, i32) {
    match (kind, entry) {
        (_, None) => (0, share),
        (WorkloadKind::Job, Some(e)) => job::copy_counts(e, share),
        (_, Some(e)) => (e.ready_replicas, desired_on(kind, e, share)),
    }
}

/// The replicas a cluster's copy should run, as its summary counts them: its share,
/// or for a DaemonSet the nodes it reports.
pub fn desired_on(kind: WorkloadKind, entry: &ClusterSyncStatus, share: i32) -> i32 {
    match kind {
        WorkloadKind::DaemonSet => entry.replicas,
        _ => share,
    }
}

/// The rules of one workload kind that read its object.
pub trait Workload {
    /// Its kind.
    const KIND: WorkloadKind;

    /// The pod template its pods are made from.
    fn pod_template(&self) -> Option<&PodTemplateSpec>;

    /// The replicas the scheduler places: all of them for [`Spread::Replicas`] and
    /// [`Spread::Whole`]; for a Job the pods that run at once; 1 per node for a
    /// DaemonSet and for a CronJob's Jobs.
    fn replicas(&self) -> i32;

    /// Whether it ran to its end (a Job Complete or Failed): it never runs again.
    fn finished(&self) -> bool {
        false
    }

    /// What a cluster's copy (this object, as the cluster has it) reports, at `now`.
    fn report(&self, sync_target: &str, now: Time) -> ClusterSyncStatus;

    /// The type of its `status`.
    type Status: Clone + PartialEq + std::fmt::Debug + serde::Serialize;

    /// Its `status`.
    fn status(&self) -> Option<&Self::Status>;

    /// The workspace object's status, from its clusters' reports in `wp`; `None` while
    /// there is nothing to report (never assigned a cluster, no report yet).
    fn summed(&self, wp: &WorkloadPlacement, now: &Time) -> Option<Self::Status>;

    /// What `status` (its own, or one about to be written) says of it as a whole.
    fn headline(&self, status: Option<&Self::Status>) -> Headline;
}

/// What a workspace object's status says of it as a whole, for its state
/// ([`crate::status::workload_state`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headline {
    /// Its ready replicas: a DaemonSet's ready nodes, a Job's succeeded pods, a
    /// CronJob's running Jobs.
    pub ready: i32,
    /// What `ready` counts towards: its replicas, a DaemonSet's nodes, a Job's
    /// completions, a CronJob's running Jobs.
    pub desired: i32,
    /// Whether it is available as a whole.
    pub available: bool,
    /// How it ended, for a kind that runs to completion.
    pub ended: Option<Ended>,
}

/// How a workload that runs to completion ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It succeeded.
    Complete,
    /// It failed; the reason says how.
    Failed(String),
}

/// The upstream generation a copy says it was made from.
fn synced_generation(meta: &ObjectMeta) -> i64 {
    meta.annotations.as_ref().and_then(|a| a.get(SYNCED_GENERATION_ANNOTATION)).and_then(|g| g.parse().ok()).unwrap_or(0)
}

/// A kind's own condition as a `metav1.Condition`. A transition time the copy lacks
/// must not become "now", or every report would differ from the last.
fn reported_condition(type_: String, status: String, reason: Option<String>, message: Option<String>, at: Option<Time>) -> Condition {
    Condition {
        type_,
        status,
        reason: reason.unwrap_or_default(),
        message: message.unwrap_or_default(),
        last_transition_time: at.unwrap_or(Time(jiff::Timestamp::UNIX_EPOCH)),
        observed_generation: None,
    }
}

/// A report's common part: the copy's generation against what it observed, and what
/// it was synced from.
fn base_report(sync_target: &str, meta: &ObjectMeta, observed_generation: Option<i64>, now: Time) -> ClusterSyncStatus {
    ClusterSyncStatus {
        name: sync_target.into(),
        synced_generation: synced_generation(meta),
        observed: observed_generation.is_none_or(|o| o >= meta.generation.unwrap_or(0)),
        last_sync_time: Some(now),
        ..Default::default()
    }
}

/// An object of any workload kind, as the scheduler and `flotilla status` read it.
#[derive(Debug, Clone)]
pub enum AnyWorkload {
    /// A Deployment.
    Deployment(Arc<Deployment>),
    /// A StatefulSet.
    StatefulSet(Arc<StatefulSet>),
    /// A DaemonSet.
    DaemonSet(Arc<DaemonSet>),
    /// A Job.
    Job(Arc<Job>),
    /// A CronJob.
    CronJob(Arc<CronJob>),
}

macro_rules! each {
    ($self:expr, $w:ident => $e:expr) => {
        match $self {
            AnyWorkload::Deployment($w) => $e,
            AnyWorkload::StatefulSet($w) => $e,
            AnyWorkload::DaemonSet($w) => $e,
            AnyWorkload::Job($w) => $e,
            AnyWorkload::CronJob($w) => $e,
        }
    };
}

impl AnyWorkload {
    /// Its kind.
    pub fn kind(&self) -> WorkloadKind {
        match self {
            AnyWorkload::Deployment(_) => WorkloadKind::Deployment,
            AnyWorkload::StatefulSet(_) => WorkloadKind::StatefulSet,
            AnyWorkload::DaemonSet(_) => WorkloadKind::DaemonSet,
            AnyWorkload::Job(_) => WorkloadKind::Job,
            AnyWorkload::CronJob(_) => WorkloadKind::CronJob,
        }
    }

    /// An object of `kind`, from its JSON.
    pub fn from_value(kind: WorkloadKind, v: serde_json::Value) -> Result<Self, serde_json::Error> {
        Ok(match kind {
            WorkloadKind::Deployment => AnyWorkload::Deployment(Arc::new(serde_json::from_value(v)?)),
            WorkloadKind::StatefulSet => AnyWorkload::StatefulSet(Arc::new(serde_json::from_value(v)?)),
            WorkloadKind::DaemonSet => AnyWorkload::DaemonSet(Arc::new(serde_json::from_value(v)?)),
            WorkloadKind::Job => AnyWorkload::Job(Arc::new(serde_json::from_value(v)?)),
            WorkloadKind::CronJob => AnyWorkload::CronJob(Arc::new(serde_json::from_value(v)?)),
        })
    }

    /// Its metadata.
    pub fn meta(&self) -> &ObjectMeta {
        each!(self, w => &w.metadata)
    }

    /// [`Workload::pod_template`].
    pub fn pod_template(&self) -> Option<&PodTemplateSpec> {
        each!(self, w => w.pod_template())
    }

    /// [`Workload::replicas`].
    pub fn replicas(&self) -> i32 {
        each!(self, w => w.replicas())
    }

    /// [`Workload::finished`].
    pub fn finished(&self) -> bool {
        each!(self, w => w.finished())
    }

    /// [`Workload::headline`] of its own status.
    pub fn headline(&self) -> Headline {
        each!(self, w => w.headline(w.status()))
    }
}

fn condition<'a>(entry: &'a ClusterSyncStatus, type_: &str) -> Option<&'a Condition> {
    entry.conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(entry: &ClusterSyncStatus, type_: &str) -> bool {
    condition(entry, type_).is_some_and(|c| c.status == "True")
}

/// Every count of the report at `share`: observed, and all replicas there, updated,
/// ready and available.
fn all_counts_at(entry: &ClusterSyncStatus, share: i32) -> bool {
    entry.observed && [entry.replicas, entry.updated_replicas, entry.ready_replicas, entry.available_replicas].iter().all(|n| *n == share)
}

#[cfg(test)]
mod tests;
