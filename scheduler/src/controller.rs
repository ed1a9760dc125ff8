//! The scheduling controller: watches workloads, Placements, namespaces and clusters
//! across every workspace, decides with [`core::decide`], and writes the result.
//!
//! What a decision writes, in this order, each only if it changed:
//! 1. the WorkloadPlacement's spec (the clusters and their shares) and its assignment
//!    labels, so that a syncer that sees its label also finds its share;
//! 2. the workload's `state.workload.flotilla.io/<cluster>: Sync` labels and its
//!    clusters' syncer finalizers, in one write (see [`workload_patch`]);
//! 3. the WorkloadPlacement's `Scheduled` condition;
//! 4. a `Scheduled`, `Rescheduled` or `FailedScheduling` Event on the workload.
//!
//! What wakes a workload up is chosen so that load stays proportional to what can
//! change a decision (kcp #2771): its own spec, labels and annotations; its
//! Placement; its namespace's labels and annotations; a change of a cluster's
//! readiness, cordon, drain or labels (only the workloads on that cluster, and those
//! waiting for room); and growth of a cluster's free room (only those waiting). A
//! heartbeat that changes none of that wakes nothing, and neither do the watch events
//! of the scheduler's own writes (see [`OwnWrites`]).
//!
//! This file wires the watches, the queue and the dispatch; each step has a file of
//! its own beside it: `decide` (one workload's decision), `write` (what a decision
//! writes, and what a failure or a deletion leaves), `heartbeats` (the clusters' health
//! and the brake), `drain`, `rebalance`, and `own_writes` (the label and finalizer
//! patches, and which watch events are the scheduler's own writes coming back).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::{DashMap, DashSet};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use placement_api::quantity::Resources;
use placement_api::workload::{AnyWorkload, Spread, WorkloadKind};
use placement_api::{
    sync_state_label, sync_target_of_label, syncer_finalizer, ClusterAssignment, Placement, SyncTarget, WorkloadPlacement,
    WorkloadPlacementSpec, WorkloadRef, CONDITION_FAILOVER_PAUSED, CONDITION_SCHEDULED, ROOT_WORKSPACE, SYNCER_FINALIZER_PREFIX,
    SYNC_STATE_SYNC,
};
use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{is_conflict, is_not_found};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::assumed::Assumed;
use crate::core::{self, Share};
use crate::events::{self, Recorder};
use crate::health::{self, Book};
use crate::inputs::{self, assigned_labels, scheduled_condition};
use crate::metrics::Metrics;
use crate::resolve;
use crate::syncers::SyncerLeases;
use crate::workloads::Workloads;

mod decide;
mod drain;
mod heartbeats;
mod own_writes;
mod rebalance;
mod write;

use heartbeats::renewed;
use k8s_openapi::api::coordination::v1::Lease;
use own_writes::{label_patch, labelled, other_labels, without_cluster, workload_patch};
use rebalance::{available_since, same_shares, shares_text};
use runtime::cache::{self as store, Cache as Store, ObjKey, Workspace};

/// How the scheduler runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// A cluster whose heartbeat is older than this is not Ready.
    pub heartbeat_grace: Duration,
    /// Every workload is looked at again this often, in case an event was missed.
    pub resync: Duration,
    /// Workloads reconciled at once.
    pub concurrency: usize,
    /// This process's name in Events.
    pub instance: String,
    /// Where decisions, failures and cluster health are counted.
    pub metrics: Metrics,
    /// The share of the Ready clusters that may go NotReady within one grace before
    /// the disruption brake holds their workloads where they are.
    pub unhealthy_threshold: f64,
    /// Workloads moved off lost or draining clusters per second, at most.
    pub eviction_rate: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            heartbeat_grace: Duration::from_secs(8),
            resync: Duration::from_secs(60),
            concurrency: 64,
            instance: "flotilla-scheduler".into(),
            metrics: Metrics::default(),
            unhealthy_threshold: health::DEFAULT_UNHEALTHY_THRESHOLD,
            eviction_rate: DEFAULT_EVICTION_RATE,
        }
    }
}

/// The default `--eviction-rate`: a thousand workloads a second, so that the loss of
/// a cluster of a thousand moves them all at once and a larger loss reaches the
/// survivors over seconds.
pub const DEFAULT_EVICTION_RATE: f64 = 1000.0;

/// The rate limit on moves off lost or draining clusters: a token bucket that holds one
/// second's worth.
struct Evictions {
    rate: f64,
    bucket: Mutex<(f64, std::time::Instant)>,
}

impl Evictions {
    fn new(rate: f64) -> Self {
        let rate = if rate.is_finite() && rate > 0.0 { rate } else { DEFAULT_EVICTION_RATE };
        Evictions { rate, bucket: Mutex::new((rate.max(1.0), std::time::Instant::now())) }
    }

    /// Takes one move, or says how long until one is allowed.
    fn take(&self) -> Result<(), Duration> {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        b.0 = (b.0 + now.saturating_duration_since(b.1).as_secs_f64() * self.rate).min(self.rate.max(1.0));
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.0) / self.rate))
        }
    }
}

/// The reason of `Scheduled=True` when fewer clusters than the Placement asks for could
/// take the workload: it runs on those that could.
pub use crate::inputs::REASON_FEWER_CLUSTERS;

/// How often cluster health is re-evaluated against the clock (the metrics, `evictAfter`,
/// condition writes). A heartbeat's grace running out is looked at the moment it does,
/// not at the next tick ([`health::Book::next_expiry`]).
const HEALTH_TICK: Duration = Duration::from_millis(250);
/// How long after a grace period ends the health loop looks: `Book` counts a heartbeat
/// exactly as old as the grace as within it.
const PAST_GRACE: Duration = Duration::from_millis(1);
/// How often the scheduler tells its book of clusters that it runs
/// ([`health::Book::alive`]), so that a stall of its own (a stopped process, starved
/// async workers) is told from clusters that stopped beating.
const OBSERVER_TICK: Duration = Duration::from_millis(250);

/// The field manager under which the scheduler server-side applies the `Scheduled`
/// condition of a WorkloadPlacement. Its other writes (the assignment, the labels) are
/// merge patches.
pub const FIELD_MANAGER: &str = "flotilla-scheduler";

/// The reason of `Scheduled=False`.
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";

/// Why a cluster left a workload's assignment.
#[derive(Debug, Clone, Copy)]
enum Left {
    Deregistered,
    NotReady,
    Draining,
    Tainted,
    NotChosen,
}

impl Left {
    /// How the Event says it.
    fn text(self) -> &'static str {
        match self {
            Left::Deregistered => "deregistered",
            Left::NotReady => "NotReady",
            Left::Draining => "draining",
            Left::Tainted => "NoExecute taint",
            Left::NotChosen => "no longer chosen",
        }
    }

    /// The failover metric's `cause`, when the move was a failover or an eviction.
    fn failover(self) -> Option<&'static str> {
        match self {
            Left::Deregistered => Some("Deregistered"),
            Left::NotReady => Some("NotReady"),
            Left::Draining => Some("Draining"),
            Left::Tainted => Some("Tainted"),
            Left::NotChosen => None,
        }
    }
}

/// Something that may change decisions.
enum Trigger {
    Workload(ObjKey),
    Workspace(String),
    Namespace(String, String),
    Cluster(String),
    Waiting,
}

struct Scheduler {
    base: Client,
    workloads: Workloads,
    placements: Arc<Store<WorkloadPlacement>>,
    rules: Arc<Store<Placement>>,
    namespaces: Arc<Store<Namespace>>,
    book: Arc<Book>,
    /// The syncer Leases, when replicas share the syncers out, and the watch that feeds them.
    syncer_leases: Arc<SyncerLeases>,
    _leases: Arc<Store<Lease>>,
    assumed: Arc<Assumed>,
    /// Workloads that did not fit last time; they are looked at when room appears.
    waiting: DashSet<ObjKey>,
    /// Decisions and assumptions are made one at a time, so two workloads decided at
    /// once never both count the same free room.
    deciding: Mutex<()>,
    recorder: Recorder,
    metrics: Metrics,
    own: Arc<OwnWrites>,
    evictions: Evictions,
    /// Workloads left on fewer clusters than asked for: a cluster's change wakes them,
    /// as it may be one to spread onto if their Placement rebalances.
    short: DashSet<ObjKey>,
    /// When each workload was last rebalanced; it moves at most once per window.
    rebalanced_at: DashMap<ObjKey, std::time::Instant>,
    /// Rebalances under way: the assignment each leads to, and until when the old
    /// shares wait for the new ones.
    rebalancing: DashMap<ObjKey, Rebalancing>,
    /// Drains under way: each workload's shares before its drain began.
    drain_base: DashMap<ObjKey, Vec<Share>>,
    /// Workloads that run on every cluster their Placement selects (DaemonSets): every
    /// change of a cluster wakes them.
    everywhere: DashSet<ObjKey>,
    /// Workloads not placed because one of another kind has their name, once said.
    name_taken: DashSet<(ObjKey, WorkloadKind)>,
}

/// What the scheduler is writing, or last wrote, to each workload: the clusters it
/// labels the workload for, and its WorkloadPlacement's spec and assignment labels.
/// The watch events of those writes would otherwise queue the workload again, to
/// decide anew from its own decision and write nothing (10,000 Deployments took about
/// 18,000 decisions). A write is noted before it is sent, so that its event is known
/// even when it arrives before the response, and forgotten when its event is seen. A
/// change made by anyone else, or one that does not match, queues the workload as
/// before.
#[derive(Default)]
struct OwnWrites {
    labels: DashMap<ObjKey, BTreeSet<String>>,
    placements: DashMap<ObjKey, (WorkloadPlacementSpec, BTreeSet<String>)>,
}

impl OwnWrites {
    /// Whether the change of a workload is only the assignment labels the scheduler
    /// last wrote to it.
    fn labelled_it(&self, key: &ObjKey, old: Option<&ObjectMeta>, new: Option<&ObjectMeta>) -> bool {
        let (Some(old), Some(new)) = (old, new) else { return false };
        let rest = |m: &ObjectMeta| {
            (m.generation, other_labels(m.labels.as_ref()), without_cluster(m.annotations.as_ref()), m.deletion_timestamp.clone())
        };
        rest(old) == rest(new) && self.labels.remove_if(key, |_, want| *want == labelled(new)).is_some()
    }

    /// Whether the change of a WorkloadPlacement is only the spec and assignment
    /// labels the scheduler last wrote to it.
    fn placed_it(&self, c: &store::Change<WorkloadPlacement>) -> bool {
        let Some(new) = &c.new else { return false };
        let others_kept =
            other_labels(c.old.as_ref().and_then(|o| o.metadata.labels.as_ref())) == other_labels(new.metadata.labels.as_ref());
        others_kept
            && self
                .placements
                .remove_if(&c.key, |_, (spec, want)| *spec == new.spec && *want == assigned_labels(new.metadata.labels.as_ref()))
                .is_some()
    }

    fn forget(&self, key: &ObjKey) {
        self.labels.remove(key);
        self.placements.remove(key);
    }
}

/// What one reconcile came to, for the metrics.
enum Outcome {
    /// The workload has an assignment that fits.
    Scheduled,
    /// Nothing fits, or its Placement cannot be used.
    Unschedulable,
    /// Nothing to decide: the workload is gone or going.
    Skipped,
}

/// Sets the leader gauge while the scheduling loop runs; it is dropped when the loop
/// stops or is aborted because the Lease was lost.
struct Leading(Metrics);

impl Leading {
    fn new(metrics: &Metrics) -> Self {
        metrics.leader.set(1.0);
        Leading(metrics.clone())
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.0.leader.set(0.0);
    }
}

fn send(tx: &mpsc::UnboundedSender<Trigger>, t: Trigger) {
    let _ = tx.send(t);
}

/// Runs the scheduler until the task is dropped. `base` is a control-plane client
/// with no workspace path; its credentials must reach every workspace.
pub async fn run(base: Client, options: Options) {
    let span = tracing::info_span!("scheduler");
    async move {
        let (tx, triggers) = mpsc::unbounded_channel::<Trigger>();
        let book = Arc::new(Book::new(options.heartbeat_grace).with_threshold(options.unhealthy_threshold));
        let assumed = Arc::new(Assumed::default());
        let wildcard = clients::workspace(&base, "*");
        let root = clients::workspace(&base, ROOT_WORKSPACE);
        let config = watcher::Config::default;

        let _leading = Leading::new(&options.metrics);
        // The observer's own pulse. It starts before the caches list, which may take
        // long, and awaits nothing but its timer: a gap in it is this process not
        // running, never a slow request.
        let (b, m) = (book.clone(), options.metrics.clone());
        let _observer = runtime::AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(OBSERVER_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Some(r) = b.alive(tokio::time::Instant::now()) {
                    renewed(&m, b.grace(), &r);
                }
            }
        }));
        let timing = runtime::leader::Timing::default();
        let syncer_leases = Arc::new(SyncerLeases::new(timing.retry, timing.lease, options.heartbeat_grace));
        let l = syncer_leases.clone();
        let leases = store::spawn(
            Api::<Lease>::namespaced(root.clone(), placement_api::SYSTEM_NAMESPACE),
            config(),
            Workspace::Fixed(ROOT_WORKSPACE),
            "leases",
            move |c| match &c.new {
                Some(lease) => l.observe(lease, tokio::time::Instant::now()),
                None => l.remove(&c.key.name),
            },
        );
        let (b, a, t, m) = (book.clone(), assumed.clone(), tx.clone(), options.metrics.clone());
        let targets = store::spawn(Api::<SyncTarget>::all(root), config(), Workspace::Fixed(ROOT_WORKSPACE), "synctargets", move |c| {
            let name = c.key.name.clone();
            match c.new {
                Some(st) => {
                    let seen = b.observe(st);
                    if let Some(r) = &seen.renewal {
                        renewed(&m, b.grace(), r);
                    }
                    if seen.beat {
                        a.beat(&name, b.beats(&name));
                    }
                    if seen.signature_changed {
                        send(&t, Trigger::Cluster(name));
                    } else if seen.room_grew {
                        send(&t, Trigger::Waiting);
                    }
                }
                None => {
                    b.remove(&name);
                    m.forget_cluster(&name);
                    send(&t, Trigger::Cluster(name));
                }
            }
        });
        let own = Arc::new(OwnWrites::default());
        let (t, o) = (tx.clone(), own.clone());
        // A workload's spec (its generation), labels, annotations or deletion may
        // change a decision; its status never does.
        let workloads = Workloads::spawn(
            &wildcard,
            Arc::new(move |key: &ObjKey, old: Option<&ObjectMeta>, new: Option<&ObjectMeta>| {
                let meta = |m: &ObjectMeta| {
                    (m.generation, m.labels.clone(), without_cluster(m.annotations.as_ref()), m.deletion_timestamp.clone())
                };
                if old.map(meta) != new.map(meta) && !o.labelled_it(key, old, new) {
                    send(&t, Trigger::Workload(key.clone()));
                }
            }),
        );
        let (b, a, t, o) = (book.clone(), assumed.clone(), tx.clone(), own.clone());
        let placements =
            store::spawn(Api::<WorkloadPlacement>::all(wildcard.clone()), config(), Workspace::Annotated, "workloadplacements", move |c| {
                if let Some(wp) = &c.new {
                    for e in wp.status.iter().flat_map(|s| &s.clusters) {
                        a.reported(&c.key, &e.name, e.replicas, b.beats(&e.name));
                    }
                }
                let mine = |wp: &Arc<WorkloadPlacement>| (wp.spec.clone(), wp.metadata.labels.clone());
                if c.old.as_ref().map(mine) != c.new.as_ref().map(mine) && !o.placed_it(&c) {
                    send(&t, Trigger::Workload(c.key));
                }
            });
        let t = tx.clone();
        let rules = store::spawn(Api::<Placement>::all(wildcard.clone()), config(), Workspace::Annotated, "placements", move |c| {
            let spec = |p: &Arc<Placement>| p.spec.clone();
            if c.old.as_ref().map(spec) != c.new.as_ref().map(spec) {
                send(&t, Trigger::Workspace(c.key.workspace));
            }
        });
        let t = tx.clone();
        let namespaces = store::spawn(Api::<Namespace>::all(wildcard), config(), Workspace::Annotated, "namespaces", move |c| {
            let meta = |n: &Arc<Namespace>| {
                let mut a = n.metadata.annotations.clone().unwrap_or_default();
                a.remove(placement_api::CLUSTER_ANNOTATION);
                (n.metadata.labels.clone(), a)
            };
            if c.old.as_ref().map(meta) != c.new.as_ref().map(meta) {
                send(&t, Trigger::Namespace(c.key.workspace, c.key.name));
            }
        });
        targets.wait_synced().await;
        workloads.wait_synced().await;
        placements.wait_synced().await;
        rules.wait_synced().await;
        namespaces.wait_synced().await;
        tracing::info!(clusters = targets.len(), workloads = workloads.len(), placements = placements.len(), "caches synced; scheduling");

        let s = Arc::new(Scheduler {
            recorder: Recorder::new(base.clone(), options.instance.clone(), options.metrics.events_dropped.clone()),
            base,
            workloads,
            placements,
            rules,
            namespaces,
            book,
            syncer_leases,
            _leases: leases,
            assumed,
            waiting: DashSet::new(),
            deciding: Mutex::new(()),
            metrics: options.metrics.clone(),
            own,
            evictions: Evictions::new(options.eviction_rate),
            short: DashSet::new(),
            rebalanced_at: DashMap::new(),
            rebalancing: DashMap::new(),
            drain_base: DashMap::new(),
            name_taken: DashSet::new(),
            everywhere: DashSet::new(),
        });
        let mut controller = Controller::<ObjKey>::new("scheduler").concurrency(options.concurrency);
        // Triggers become workload keys.
        let fan = s.clone();
        controller.fan_in(triggers, move |t| fan.affected(t));
        // Health against the clock, and the SyncTargets' conditions.
        let health = s.clone();
        let t = tx.clone();
        controller.spawn(async move { health.watch_health(t).await });
        let all = s.clone();
        controller.resync(options.resync, move || all.workloads.keys().into_iter().chain(all.placements.keys()));
        // Every workload once at the start.
        let start: BTreeSet<ObjKey> = s.workloads.keys().into_iter().chain(s.placements.keys()).collect();
        for k in start {
            let _ = tx.send(Trigger::Workload(k));
        }
        controller
            .run(|key| {
                let s = s.clone();
                async move { s.reconcile(&key).await }
            })
            .await;
    }
    .instrument(span)
    .await
}

/// A rebalance under way.
#[derive(Clone)]
struct Rebalancing {
    /// The assignment it leads to.
    target: Vec<Share>,
    /// The assignment before it.
    before: Vec<Share>,
    /// When it began: only reports written since count.
    started: jiff::Timestamp,
    /// When the old shares go whether or not the new ones are Available.
    until: std::time::Instant,
}

/// How often a workload whose drain waits for its new copy is looked at again.
const DRAIN_RECHECK: Duration = Duration::from_millis(500);

/// How long a drain keeps an old copy at most, unless `flotilla cluster drain --timeout` says otherwise.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

impl Scheduler {
    fn affected(&self, t: Trigger) -> Vec<ObjKey> {
        match t {
            Trigger::Workload(k) => vec![k],
            Trigger::Workspace(ws) => self.workloads.keys_where(|k| k.workspace == ws, |_| true),
            Trigger::Namespace(ws, ns) => self.workloads.keys_where(|k| k.workspace == ws && k.namespace == ns, |_| true),
            Trigger::Cluster(name) => {
                let mut keys: BTreeSet<ObjKey> =
                    self.waiting.iter().chain(self.short.iter()).chain(self.everywhere.iter()).map(|k| k.clone()).collect();
                keys.extend(self.workloads.keys_where(|_| true, |m| labelled(m).contains(&name)));
                keys.extend(self.placements.entries_where(|_, wp| wp.spec.clusters.iter().any(|c| c.name == name)));
                tracing::debug!(cluster = %name, workloads = keys.len(), "cluster changed");
                keys.into_iter().collect()
            }
            Trigger::Waiting => self.waiting.iter().map(|k| k.clone()).collect(),
        }
    }

    async fn reconcile(&self, key: &ObjKey) -> Result<Next, anyhow::Error> {
        let started = std::time::Instant::now();
        let result = self.decide_and_write(key, started).await;
        let label = match &result {
            Ok((Outcome::Scheduled, _)) => "scheduled",
            Ok((Outcome::Unschedulable, _)) => "unschedulable",
            Ok((Outcome::Skipped, _)) => return result.map(|(_, next)| next),
            Err(_) => "error",
        };
        self.metrics.attempt(label, started.elapsed());
        self.metrics.pending.set(i64::try_from(self.waiting.len()).unwrap_or(i64::MAX));
        result.map(|(_, next)| next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(labels: &[&str], finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(labels.iter().map(|c| (sync_state_label(c), SYNC_STATE_SYNC.to_string())).collect()),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..Default::default()
        }
    }

    fn want(clusters: &[&str]) -> BTreeSet<String> {
        clusters.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn a_move_swaps_labels_and_syncer_finalizers_in_one_patch_and_keeps_others() {
        let d = workload(&["east"], &["example.com/hold", &syncer_finalizer("east")]);
        let patch = workload_patch(&d, &want(&["west"])).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {
                "labels": {sync_state_label("west"): SYNC_STATE_SYNC, sync_state_label("east"): null},
                "finalizers": [syncer_finalizer("west")],
                "$deleteFromPrimitiveList/finalizers": [syncer_finalizer("east")],
            }})
        );
    }

    #[test]
    fn a_settled_workload_gets_no_patch_and_a_missing_or_stale_finalizer_is_fixed() {
        let settled = workload(&["east"], &[&syncer_finalizer("east")]);
        assert_eq!(workload_patch(&settled, &want(&["east"])), None);
        // Labelled before the scheduler put finalizers on: only the finalizer is added.
        let bare = workload(&["east"], &[]);
        assert_eq!(workload_patch(&bare, &want(&["east"])), Some(json!({"metadata": {"finalizers": [syncer_finalizer("east")]}})));
        // A deregistered cluster's finalizer goes even when the labels are right.
        let stale = workload(&["east"], &[&syncer_finalizer("east"), &syncer_finalizer("gone")]);
        assert_eq!(
            workload_patch(&stale, &want(&["east"])),
            Some(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [syncer_finalizer("gone")]}}))
        );
    }

    fn change<K>(old: Option<K>, new: Option<K>) -> store::Change<K> {
        let (old, new) = (old.map(Arc::new), new.map(Arc::new));
        let seen = new.clone().or_else(|| old.clone()).expect("a change has an object");
        store::Change { key: ObjKey::new("ws", "default", "web"), old, new, seen }
    }

    #[test]
    fn only_the_labels_the_scheduler_wrote_are_passed_over_and_only_once() {
        let own = OwnWrites::default();
        let key = ObjKey::new("ws", "default", "web");
        let (before, after) = (workload(&[], &[]), workload(&["east"], &[]));
        // Nothing noted: every change counts.
        assert!(!own.labelled_it(&key, Some(&before), Some(&after)));
        own.labels.insert(key.clone(), want(&["east"]));
        // Someone else's labels, or another change along with ours, count.
        assert!(!own.labelled_it(&key, Some(&before), Some(&workload(&["west"], &[]))));
        let mut with_more = after.clone();
        with_more.labels.get_or_insert_default().insert("team".into(), "a".into());
        assert!(!own.labelled_it(&key, Some(&before), Some(&with_more)));
        let mut respecified = after.clone();
        respecified.generation = Some(2);
        assert!(!own.labelled_it(&key, Some(&before), Some(&respecified)));
        // The scheduler's own write is passed over once; the same change again counts.
        assert!(own.labelled_it(&key, Some(&before), Some(&after)));
        assert!(!own.labelled_it(&key, Some(&before), Some(&after)));
    }

    #[test]
    fn only_the_assignment_the_scheduler_wrote_is_passed_over() {
        let own = OwnWrites::default();
        let key = ObjKey::new("ws", "default", "web");
        let spec = |clusters: &[&str]| WorkloadPlacementSpec {
            workload: WorkloadRef { api_version: "apps/v1".into(), kind: "Deployment".into(), name: "web".into() },
            placement: "default".into(),
            clusters: clusters.iter().map(|c| ClusterAssignment { name: c.to_string(), replicas: 1 }).collect(),
        };
        let placed = |clusters: &[&str]| {
            let mut wp = WorkloadPlacement::new("web", spec(clusters));
            wp.metadata.labels = Some(clusters.iter().map(|c| (sync_state_label(c), SYNC_STATE_SYNC.to_string())).collect());
            wp
        };
        own.placements.insert(key.clone(), (spec(&["east"]), want(&["east"])));
        assert!(!own.placed_it(&change(None, Some(placed(&["west"])))));
        assert!(own.placed_it(&change(None, Some(placed(&["east"])))));
        // A deletion is never the scheduler's write.
        own.placements.insert(key, (spec(&["east"]), want(&["east"])));
        assert!(!own.placed_it(&change(Some(placed(&["east"])), None)));
    }
}
