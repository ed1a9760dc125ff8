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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::{DashMap, DashSet};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use placement_api::quantity::Resources;
use placement_api::{
    sync_state_label, sync_target_of_label, syncer_finalizer, ClusterAssignment, Placement, SyncTarget, WorkloadPlacement,
    WorkloadPlacementSpec, WorkloadRef, CONDITION_FAILOVER_PAUSED, CONDITION_SCHEDULED, ROOT_WORKSPACE, SYNCER_FINALIZER_PREFIX,
    SYNC_STATE_SYNC,
};
use runtime::clients;
use runtime::errors::{is_conflict, is_not_found};
use runtime::queue::{self, Next};
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
use k8s_openapi::api::coordination::v1::Lease;
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
    deployments: Arc<Store<Deployment>>,
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
    fn labelled_it(&self, c: &store::Change<Deployment>) -> bool {
        let (Some(old), Some(new)) = (&c.old, &c.new) else { return false };
        let rest = |d: &Deployment| {
            let m = &d.metadata;
            (m.generation, other_labels(m.labels.as_ref()), without_cluster(m.annotations.as_ref()), m.deletion_timestamp.clone())
        };
        rest(old) == rest(new) && self.labels.remove_if(&c.key, |_, want| *want == labelled(new)).is_some()
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

/// The labels other than the assignment labels.
fn other_labels(labels: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    labels
        .into_iter()
        .flatten()
        .filter(|(k, v)| !(*v == SYNC_STATE_SYNC && sync_target_of_label(k).is_some()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The annotations without the workspace annotation a wildcard watch adds.
fn without_cluster(annotations: Option<&BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    annotations.map(|a| {
        let mut a = a.clone();
        a.remove(placement_api::CLUSTER_ANNOTATION);
        a
    })
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
        let (tx, mut triggers) = mpsc::unbounded_channel::<Trigger>();
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
        let deployments = store::spawn(Api::<Deployment>::all(wildcard.clone()), config(), Workspace::Annotated, "deployments", move |c| {
            let meta = |d: &Arc<Deployment>| {
                let m = &d.metadata;
                (m.generation, m.labels.clone(), without_cluster(m.annotations.as_ref()), m.deletion_timestamp.clone())
            };
            if c.old.as_ref().map(meta) != c.new.as_ref().map(meta) && !o.labelled_it(&c) {
                send(&t, Trigger::Workload(c.key));
            }
        });
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
        deployments.wait_synced().await;
        placements.wait_synced().await;
        rules.wait_synced().await;
        namespaces.wait_synced().await;
        tracing::info!(
            clusters = targets.len(),
            deployments = deployments.len(),
            placements = placements.len(),
            "caches synced; scheduling"
        );

        let s = Arc::new(Scheduler {
            recorder: Recorder::new(base.clone(), options.instance.clone(), options.metrics.events_dropped.clone()),
            base,
            deployments,
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
        });
        let (keys_tx, keys) = mpsc::unbounded_channel::<ObjKey>();

        // Triggers become workload keys.
        let fan = s.clone();
        let keys_for_fan = keys_tx.clone();
        let _fan = runtime::AbortOnDrop(tokio::spawn(async move {
            while let Some(t) = triggers.recv().await {
                for k in fan.affected(t) {
                    let _ = keys_for_fan.send(k);
                }
            }
        }));
        // Health against the clock, and the SyncTargets' conditions.
        let health = s.clone();
        let t = tx.clone();
        let _health = runtime::AbortOnDrop(tokio::spawn(async move { health.watch_health(t).await }));
        // The periodic resync.
        let all = s.clone();
        let resync = options.resync;
        let _resync = runtime::AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(resync);
            tick.tick().await;
            loop {
                tick.tick().await;
                for k in all.deployments.keys().into_iter().chain(all.placements.keys()) {
                    let _ = keys_tx.send(k);
                }
            }
        }));
        // Every workload once at the start.
        for k in s.deployments.keys().into_iter().chain(s.placements.keys()) {
            let _ = tx.send(Trigger::Workload(k));
        }
        queue::run(keys, options.concurrency.max(1), |key| {
            let s = s.clone();
            let span = tracing::info_span!("schedule", workload = %key);
            async move { s.reconcile(&key).await }.instrument(span)
        })
        .await;
    }
    .instrument(span)
    .await
}

/// Counts and logs a renewal of every cluster's grace.
fn renewed(metrics: &Metrics, grace: Duration, r: &health::Renewal) {
    metrics.observation_gap(r.cause);
    tracing::warn!(
        cause = r.cause.label(),
        gap = ?r.lasted,
        renewed = r.clusters.len(),
        "grace renewed for all clusters: {}, so it could not observe heartbeats; every cluster that was Ready gets a fresh {}s grace from now",
        r.cause.text(r.lasted),
        grace.as_secs(),
    );
    tracing::debug!(clusters = ?r.clusters, "the clusters whose grace was renewed");
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

/// When a draining cluster's old copies go whether or not their replacements are
/// Available: its `drain-deadline` annotation, or `evictAfter` plus the default timeout.
fn drain_deadline(t: &SyncTarget) -> Option<jiff::Timestamp> {
    let annotated =
        t.metadata.annotations.as_ref().and_then(|a| a.get(placement_api::DRAIN_DEADLINE_ANNOTATION)).and_then(|d| d.parse().ok());
    annotated.or_else(|| {
        let start = t.spec.evict_after.as_ref()?.0;
        start.checked_add(jiff::SignedDuration::try_from(DEFAULT_DRAIN_TIMEOUT).ok()?).ok()
    })
}

/// Whether every share of `shares` larger than in `before` is reported Available by
/// its cluster's syncer, in a report written at `since` or later: an older entry may
/// describe a copy from before (a cluster that comes back keeps its last report until
/// its syncer writes again). Shares that did not grow run already.
fn available_since(wp: Option<&WorkloadPlacement>, shares: &[Share], before: &[Share], since: jiff::Timestamp) -> bool {
    let reported = wp.and_then(|w| w.status.as_ref()).map(|s| s.clusters.as_slice()).unwrap_or_default();
    let grew = |s: &&Share| before.iter().find(|b| b.cluster == s.cluster).is_none_or(|b| b.replicas < s.replicas);
    shares.iter().filter(grew).all(|s| {
        reported.iter().any(|e| {
            e.name == s.cluster
                && e.observed
                && e.available_replicas >= i32::try_from(s.replicas).unwrap_or(i32::MAX)
                && e.last_sync_time.as_ref().is_some_and(|t| t.0 >= since)
        })
    })
}

/// Whether two assignments are the same, in any order.
fn same_shares(a: &[Share], b: &[Share]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

/// The clusters a workload is labelled for.
fn labelled(d: &Deployment) -> BTreeSet<String> {
    assigned_labels(d.metadata.labels.as_ref())
}

fn shares_text(shares: &[Share]) -> String {
    shares.iter().map(|s| format!("{}={}", s.cluster, s.replicas)).collect::<Vec<_>>().join(" ")
}

/// A merge patch of `metadata.labels` that makes the assignment labels say `want`.
fn label_patch(have: &BTreeSet<String>, want: &BTreeSet<String>) -> Option<Map<String, Value>> {
    if have == want {
        return None;
    }
    let mut labels = Map::new();
    for c in want.difference(have) {
        labels.insert(sync_state_label(c), json!(SYNC_STATE_SYNC));
    }
    for c in have.difference(want) {
        labels.insert(sync_state_label(c), Value::Null);
    }
    Some(labels)
}

/// A strategic merge patch of the workload's metadata that makes its assignment labels
/// say `want`, and its syncer finalizers too: a cluster's finalizer goes on with its
/// label, in the same write, so that its syncer has nothing to add before it copies
/// the workload; a cluster that is no longer assigned loses its finalizer with its
/// label, since its syncer removes the copy whether or not the finalizer is there
/// (it only makes a deletion wait for the clusters the workload is assigned to).
/// Finalizers of clusters long gone (deregistered) are dropped the same way.
/// Finalizers are merged as a set, so those of others are kept, and no
/// resourceVersion is needed.
fn workload_patch(d: &Deployment, want: &BTreeSet<String>) -> Option<Value> {
    let present: BTreeSet<&str> = d.metadata.finalizers.iter().flatten().filter_map(|f| f.strip_prefix(SYNCER_FINALIZER_PREFIX)).collect();
    let add: Vec<String> = want.iter().filter(|c| !present.contains(c.as_str())).map(|c| syncer_finalizer(c)).collect();
    let drop: Vec<String> = present.iter().filter(|c| !want.contains(**c)).map(|c| syncer_finalizer(c)).collect();
    let labels = label_patch(&labelled(d), want);
    if labels.is_none() && add.is_empty() && drop.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    if let Some(l) = labels {
        meta.insert("labels".into(), Value::Object(l));
    }
    if !add.is_empty() {
        meta.insert("finalizers".into(), json!(add));
    }
    if !drop.is_empty() {
        meta.insert("$deleteFromPrimitiveList/finalizers".into(), json!(drop));
    }
    Some(json!({"metadata": meta}))
}

impl Scheduler {
    fn affected(&self, t: Trigger) -> Vec<ObjKey> {
        match t {
            Trigger::Workload(k) => vec![k],
            Trigger::Workspace(ws) => self.deployments.entries_where(|k, _| k.workspace == ws),
            Trigger::Namespace(ws, ns) => self.deployments.entries_where(|k, _| k.workspace == ws && k.namespace == ns),
            Trigger::Cluster(name) => {
                let mut keys: BTreeSet<ObjKey> = self.waiting.iter().chain(self.short.iter()).map(|k| k.clone()).collect();
                keys.extend(self.deployments.entries_where(|_, d| labelled(d).contains(&name)));
                keys.extend(self.placements.entries_where(|_, wp| wp.spec.clusters.iter().any(|c| c.name == name)));
                tracing::debug!(cluster = %name, workloads = keys.len(), "cluster changed");
                keys.into_iter().collect()
            }
            Trigger::Waiting => self.waiting.iter().map(|k| k.clone()).collect(),
        }
    }

    /// Renews the grace of every cluster whose syncer went silent with its replica
    /// (crate::syncers), and says when one starts and stops being held.
    fn hold_silent_syncers(&self, held: &mut BTreeSet<String>) {
        let now = tokio::time::Instant::now();
        let silent = self.syncer_leases.silent(now);
        for (name, since) in &silent {
            if self.book.hold(name, *since, now) && held.insert(name.clone()) {
                tracing::warn!(
                    cluster = %name,
                    quiet = ?now.saturating_duration_since(*since),
                    "the replica that syncs this cluster stopped renewing its syncer Lease: the cluster's missed heartbeats are not counted until another replica takes its syncer over"
                );
            }
        }
        held.retain(|name| {
            let still = silent.iter().any(|(s, _)| s == name);
            if !still {
                tracing::info!(cluster = %name, "this cluster's syncer Lease is renewed again: its heartbeats count again");
            }
            still
        });
    }

    async fn watch_health(&self, tx: mpsc::UnboundedSender<Trigger>) {
        let mut tick = tokio::time::interval(HEALTH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The resourceVersion each cluster's last condition write was computed from,
        // so a write is not repeated before the watch has shown its result.
        let written: DashMap<String, Option<String>> = DashMap::new();
        let api: Api<SyncTarget> = Api::all(clients::workspace(&self.base, ROOT_WORKSPACE));
        let mut held = BTreeSet::new();
        loop {
            let expiry = self.book.next_expiry().map(|at| at + PAST_GRACE);
            tokio::select! {
                _ = tick.tick() => {}
                _ = tokio::time::sleep_until(expiry.unwrap_or_else(|| tokio::time::Instant::now() + HEALTH_TICK)), if expiry.is_some() => {}
            }
            self.hold_silent_syncers(&mut held);
            let tick = self.book.tick();
            if let Some(r) = &tick.renewal {
                renewed(&self.metrics, self.book.grace(), r);
            }
            match tick.hold {
                Some(health::Hold::Began(silent)) => tracing::warn!(
                    silent = ?silent,
                    "no new heartbeat of any cluster for {silent:.1?}: the API or the watch may be stalled; no cluster is declared lost on missed heartbeats until one arrives, or for at most {}s",
                    self.book.grace().as_secs()
                ),
                Some(health::Hold::Ended(silent)) => tracing::warn!(
                    silent = ?silent,
                    "no new heartbeat of any cluster for {silent:.1?}, longer than the grace: clusters are judged again"
                ),
                None => {}
            }
            if let Some(b) = &tick.brake {
                let held: Vec<&String> = b.held().collect();
                if b.engaged {
                    tracing::warn!(lost = ?b.lost, confirmed = ?b.confirmed, ready = b.ready, "disruption brake: {}", b.message(self.book.grace()));
                } else {
                    tracing::warn!(ready = b.ready, "disruption brake released: the clusters still lost are failed over as usual");
                }
                self.metrics.brake_engaged.set(i64::from(b.engaged));
                self.metrics.braked_clusters.set(i64::try_from(held.len()).unwrap_or(i64::MAX));
            }
            for name in tick.changed {
                let o = self.book.get(&name);
                let (ready, braked) = o.map_or((false, false), |o| (o.signature.ready, o.signature.braked));
                tracing::info!(cluster = %name, ready, braked, "cluster health changed");
                send(&tx, Trigger::Cluster(name));
            }
            let now = Time(jiff::Timestamp::now());
            let brake = self.book.brake().message(self.book.grace());
            for o in self.book.all() {
                let Some(name) = o.target.metadata.name.clone() else { continue };
                self.metrics.cluster(&name, o.heartbeat_age(), o.signature.ready);
                let rv = o.target.metadata.resource_version.clone();
                if written.get(&name).is_some_and(|w| *w == rv) {
                    continue;
                }
                let paused = o.signature.braked.then_some(brake.as_str());
                let Some((conditions, schedulable)) = health::desired_status(&o, self.book.grace(), &now, paused) else { continue };
                written.insert(name.clone(), rv.clone());
                let patch = json!({
                    "metadata": {"resourceVersion": rv},
                    "status": {"conditions": conditions, "schedulable": schedulable},
                });
                match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
                    Ok(_) => tracing::debug!(cluster = %name, "wrote the cluster's health"),
                    // A heartbeat got in first; the next tick works from what it wrote.
                    Err(e) if is_conflict(&e) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "could not write the cluster's health; retrying");
                        written.remove(&name);
                    }
                }
            }
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

    async fn decide_and_write(&self, key: &ObjKey, started: std::time::Instant) -> Result<(Outcome, Next), anyhow::Error> {
        let Some(d) = self.deployments.get(key) else { return Ok((Outcome::Skipped, self.forget(key).await?)) };
        if d.metadata.deletion_timestamp.is_some() {
            // The syncers clean up; the assignment stays until the object is gone. Only
            // the finalizers of clusters no longer registered are the scheduler's to drop.
            self.waiting.remove(key);
            return Ok((Outcome::Skipped, self.release_deregistered(key, &d).await?));
        }
        let wp = self.placements.get(key);
        let current = inputs::current(wp.as_deref(), &d);

        let ns = self.namespaces.get(&ObjKey::new(&key.workspace, "", &key.namespace));
        let rules: Vec<Arc<Placement>> = self.rules.values_where(|k| k.workspace == key.workspace);
        let refs: Vec<&Placement> = rules.iter().map(|p| p.as_ref()).collect();
        let namespace = resolve::Namespace {
            name: &key.namespace,
            labels: ns.as_ref().and_then(|n| n.metadata.labels.as_ref()),
            annotations: ns.as_ref().and_then(|n| n.metadata.annotations.as_ref()),
        };
        let (rule, source) = match resolve::governing(d.metadata.annotations.as_ref(), namespace, &refs) {
            Ok(r) => r,
            Err(message) => {
                self.metrics.failure("PlacementUnusable");
                return self.fail(key, &d, wp.as_deref(), "", &current, message).await.map(|n| (Outcome::Unschedulable, n));
            }
        };
        let rule_name = rule.metadata.name.clone().unwrap_or_default();
        let workload = match inputs::workload(&*d) {
            Ok(w) => w,
            Err(e) => {
                let message = format!("the pod template's resource requests cannot be read: {e}; fix spec.template");
                self.metrics.failure("InvalidRequests");
                return self.fail(key, &d, wp.as_deref(), &rule_name, &current, message).await.map(|n| (Outcome::Unschedulable, n));
            }
        };
        // A workload left on fewer clusters than asked for stays so until rebalancing
        // widens it; a new or whole one is spread as far as its Placement says.
        let short = inputs::short(wp.as_deref());
        // A rebalance under way ends once its new shares are Available.
        if let Some(next) = self.finish_rebalance(key, &d, wp.as_deref(), &rule_name, &source).await? {
            return Ok((Outcome::Scheduled, next));
        }
        let (rebalance, recheck) = self.rebalance_due(key, &rule.spec, short, &current);
        let decision = {
            let _one_at_a_time = self.deciding.lock().unwrap_or_else(|e| e.into_inner());
            let views = self.book.views(|c| self.assumed.total(c));
            let rule_view = core::Rule::of(&rule.spec);
            let result = core::place(&views, &workload, &rule_view, &current, !short || rebalance);
            let took = started.elapsed();
            self.metrics.decision.observe(took.as_secs_f64());
            tracing::debug!(micros = took.as_micros() as u64, clusters = views.len(), "decided");
            if let Ok(decided) = &result {
                // A move off a lost or draining cluster waits its turn under the rate limit.
                // So does a rebalance.
                let evicts = current
                    .iter()
                    .any(|c| !decided.shares.iter().any(|s| s.cluster == c.cluster) && self.why_left(&c.cluster).failover().is_some())
                    || (rebalance && !same_shares(&decided.shares, &current));
                if evicts {
                    if let Err(wait) = self.evictions.take() {
                        self.metrics.evictions_delayed.inc();
                        return Ok((Outcome::Skipped, Next::After(wait)));
                    }
                }
                self.assume(key, &current, &decided.shares, workload.per_replica);
            }
            result
        };
        match decision {
            Ok(decided) if rebalance && !same_shares(&decided.shares, &current) => {
                self.start_rebalance(key, &d, wp.as_deref(), &rule_name, &current, decided.shares).await.map(|n| (Outcome::Scheduled, n))
            }
            Ok(decided) => {
                // A NoExecute taint tolerated for a time is looked at again when the
                // time is up (just after, so that it has run out).
                let until = decided.recheck.map(|d| d + PAST_GRACE);
                let next = self.place(key, &d, wp.as_deref(), &rule_name, &source, &current, decided).await?;
                // A short spread whose Placement rebalances is looked at again when a
                // returned cluster has been Ready long enough.
                let later = [recheck, until].into_iter().flatten().min();
                Ok((Outcome::Scheduled, if let (Next::Done, Some(after)) = (&next, later) { Next::After(after) } else { next }))
            }
            Err(no_fit) => {
                self.metrics.no_fit(&no_fit);
                self.fail(key, &d, wp.as_deref(), &rule_name, &current, no_fit.to_string()).await.map(|n| (Outcome::Unschedulable, n))
            }
        }
    }

    fn assume(&self, key: &ObjKey, current: &[Share], shares: &[Share], per_replica: Resources) {
        let share = |set: &[Share], c: &str| set.iter().find(|s| s.cluster == c).map(|s| s.replicas);
        for s in shares {
            self.assumed.record(key, &s.cluster, share(current, &s.cluster).unwrap_or(0), s.replicas, per_replica);
        }
        for c in current.iter().filter(|c| share(shares, &c.cluster).is_none()) {
            self.assumed.forget(key, &c.cluster);
        }
    }

    /// Why a cluster is no longer in a workload's assignment, for the Event.
    fn why_left(&self, cluster: &str) -> Left {
        match self.book.get(cluster) {
            None => Left::Deregistered,
            Some(o) if !o.signature.ready => Left::NotReady,
            Some(o) if o.signature.draining => Left::Draining,
            Some(o) if o.signature.taints.iter().any(|t| t.effect == placement_api::TaintEffect::NoExecute) => Left::Tainted,
            Some(_) => Left::NotChosen,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn place(
        &self,
        key: &ObjKey,
        d: &Deployment,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        source: &resolve::Source,
        current: &[Share],
        decided: core::Decision,
    ) -> Result<Next, anyhow::Error> {
        let mut shares = decided.shares;
        self.waiting.remove(key);
        let draining = self.hold_drained(key, wp, current, &mut shares);
        let Some(wp) = self.write_assignment(key, d, wp, rule, &shares).await? else { return Ok(Next::After(Duration::ZERO)) };
        // The Event goes out as soon as the assignment is written: a retry of the
        // condition below starts from the new assignment and would not see the move.
        let before: BTreeSet<&str> = current.iter().map(|s| s.cluster.as_str()).collect();
        let after: BTreeSet<&str> = shares.iter().map(|s| s.cluster.as_str()).collect();
        if before != after {
            let (reason, note) = if before.is_empty() {
                ("Scheduled", format!("assigned to {} by Placement {rule} ({source})", shares_text(&shares)))
            } else {
                let left: Vec<String> = before
                    .difference(&after)
                    .map(|c| {
                        let why = self.why_left(c);
                        if let Some(cause) = why.failover() {
                            self.metrics.failovers.with_label_values(&[cause]).inc();
                        }
                        format!("{c} ({})", why.text())
                    })
                    .collect();
                let note = if let Some((leaving, until)) = &draining {
                    let new: Vec<Share> = shares.iter().filter(|s| !before.contains(s.cluster.as_str())).cloned().collect();
                    format!(
                        "adding {} before leaving {} (draining): the old copy stays until the new one is Available, or until {until} (Placement {rule})",
                        shares_text(&new),
                        leaving.join(", ")
                    )
                } else if left.is_empty() {
                    format!("now on {} (Placement {rule})", shares_text(&shares))
                } else {
                    format!("moved off {}; now on {} (Placement {rule})", left.join(", "), shares_text(&shares))
                };
                ("Rescheduled", note)
            };
            tracing::info!(reason, clusters = %shares_text(&shares), "placed");
            self.recorder.deployment(key, d, events::Type::Normal, reason, note);
        }
        // The clusters are in the spec and in the Event; left out of the condition, a
        // move (a failover, a drain) costs no status write here.
        let (reason, message) = match (&decided.fewer, decided.short) {
            (_, false) => ("Scheduled", format!("placed by Placement {rule} ({source}); spec.clusters lists where")),
            (Some(why), true) => (
                REASON_FEWER_CLUSTERS,
                format!(
                    "placed by Placement {rule} ({source}) on fewer clusters than it asks for: {why}; it spreads again when a rebalance allows"
                ),
            ),
            (None, true) => (
                REASON_FEWER_CLUSTERS,
                format!(
                    "placed by Placement {rule} ({source}) on fewer clusters than it asks for, since some it ran on were lost; \
                     enough fit again, and it spreads onto them when a rebalance allows"
                ),
            ),
        };
        let before = scheduled_condition(&wp).map(|c| c.reason.clone());
        // A workload that stays on a cluster the disruption brake holds says so.
        let braked: Vec<&str> =
            shares.iter().map(|s| s.cluster.as_str()).filter(|c| self.book.get(c).is_some_and(|o| o.signature.braked)).collect();
        let paused = (!braked.is_empty()).then(|| {
            let on = braked.join(", ");
            format!(
                "stays on {on}, which the disruption brake holds: too many clusters went NotReady at once (`flotilla status` shows which); \
                 `flotilla cluster confirm-lost {}` moves it if {on} is really gone",
                braked[0]
            )
        });
        let was_paused = wp.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == CONDITION_FAILOVER_PAUSED));
        if !self.set_conditions(key, &wp, (true, reason, &message), paused.as_deref()).await? {
            return Ok(Next::After(Duration::ZERO));
        }
        if decided.short {
            self.short.insert(key.clone());
        } else {
            self.short.remove(key);
        }
        if decided.short && before.as_deref() != Some(REASON_FEWER_CLUSTERS) {
            tracing::warn!(reason = %message, "placed on fewer clusters than asked for");
            self.recorder.deployment(key, d, events::Type::Warning, REASON_FEWER_CLUSTERS, message);
        }
        if let (Some(note), false) = (paused, was_paused) {
            let note = format!("{note}: {}", self.book.brake().message(self.book.grace()));
            tracing::warn!(reason = %note, "failover paused by the disruption brake");
            self.recorder.deployment(key, d, events::Type::Warning, CONDITION_FAILOVER_PAUSED, note);
        }
        // A drain in progress is looked at again until the old copy can go.
        Ok(if draining.is_some() { Next::After(DRAIN_RECHECK) } else { Next::Done })
    }

    /// Whether the workload's Placement rebalances and it is due: left on fewer clusters
    /// than asked for, not rebalanced within the window, and a cluster it does not run
    /// on has been Ready for the window. Otherwise, when to look again, if a cluster is
    /// on its way to that.
    fn rebalance_due(&self, key: &ObjKey, spec: &placement_api::PlacementSpec, short: bool, current: &[Share]) -> (bool, Option<Duration>) {
        let Some(window) = spec.rebalance.as_ref().and_then(|r| r.window()) else { return (false, None) };
        if !short {
            return (false, None);
        }
        if let Some(since) = self.rebalanced_at.get(key).map(|t| t.elapsed()).filter(|s| *s < window) {
            return (false, Some(window - since));
        }
        let mut wait: Option<Duration> = None;
        for o in self.book.all() {
            let Some(name) = o.target.metadata.name.as_deref() else { continue };
            if current.iter().any(|s| s.cluster == name) {
                continue;
            }
            match self.book.ready_for(name) {
                Some(ready) if ready >= window => return (true, None),
                Some(ready) => wait = Some(wait.map_or(window - ready, |w| w.min(window - ready))),
                None => {}
            }
        }
        (false, wait)
    }

    /// Starts a rebalance, make-before-break: the assignment becomes every old share
    /// beside the new ones (each cluster at the larger of the two), and the new
    /// assignment is written once the new shares are Available ([`Self::finish_rebalance`]).
    async fn start_rebalance(
        &self,
        key: &ObjKey,
        d: &Deployment,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        current: &[Share],
        target: Vec<Share>,
    ) -> Result<Next, anyhow::Error> {
        let mut transitional = target.clone();
        for c in current {
            match transitional.iter_mut().find(|s| s.cluster == c.cluster) {
                Some(s) => s.replicas = s.replicas.max(c.replicas),
                None => transitional.push(c.clone()),
            }
        }
        transitional.sort();
        let Some(_) = self.write_assignment(key, d, wp, rule, &transitional).await? else { return Ok(Next::After(Duration::ZERO)) };
        let added: Vec<Share> = target
            .iter()
            .filter(|s| current.iter().find(|c| c.cluster == s.cluster).is_none_or(|c| c.replicas < s.replicas))
            .cloned()
            .collect();
        let note = format!(
            "spreading again as Placement {rule} rebalances: adding {}; the current shares stay until the new ones are Available, then it runs on {}",
            shares_text(&added),
            shares_text(&target)
        );
        tracing::info!(reason = %note, "rebalancing");
        self.recorder.deployment(key, d, events::Type::Normal, "Rebalanced", note);
        self.rebalanced_at.insert(key.clone(), std::time::Instant::now());
        let r = Rebalancing {
            target,
            before: current.to_vec(),
            started: jiff::Timestamp::now(),
            until: std::time::Instant::now() + DEFAULT_DRAIN_TIMEOUT,
        };
        self.rebalancing.insert(key.clone(), r);
        Ok(Next::After(DRAIN_RECHECK))
    }

    /// Ends a rebalance under way: once its new shares are Available (or its deadline
    /// has passed), the assignment becomes what it led to. One of its clusters lost or
    /// draining ends it as it stands, and the workload is decided again.
    async fn finish_rebalance(
        &self,
        key: &ObjKey,
        d: &Deployment,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        source: &resolve::Source,
    ) -> Result<Option<Next>, anyhow::Error> {
        let Some(Rebalancing { target, before, started, until }) = self.rebalancing.get(key).map(|r| r.clone()) else { return Ok(None) };
        let stands = target.iter().all(|s| self.book.get(&s.cluster).is_some_and(|o| o.signature.ready && !o.signature.draining));
        if !stands {
            self.rebalancing.remove(key);
            return Ok(None);
        }
        if !available_since(wp, &target, &before, started) && std::time::Instant::now() < until {
            return Ok(Some(Next::After(DRAIN_RECHECK)));
        }
        self.rebalancing.remove(key);
        let Some(wp) = self.write_assignment(key, d, wp, rule, &target).await? else { return Ok(Some(Next::After(Duration::ZERO))) };
        let note = format!("now on {} (Placement {rule} rebalanced)", shares_text(&target));
        self.recorder.deployment(key, d, events::Type::Normal, "Rebalanced", note);
        let message = format!("placed by Placement {rule} ({source}); spec.clusters lists where");
        if !self.set_conditions(key, &wp, (true, "Scheduled", &message), None).await? {
            return Ok(Some(Next::After(Duration::ZERO)));
        }
        Ok(Some(Next::Done))
    }

    /// Make-before-break for a drain: a share on a draining cluster stays in the
    /// assignment, beside the shares that replace it, until every cluster in `shares`
    /// reports its share Available, or until the drain's deadline. Returns the
    /// clusters kept and the deadline, when it kept any. A lost cluster is not kept:
    /// its copy cannot be counted on.
    fn hold_drained(
        &self,
        key: &ObjKey,
        wp: Option<&WorkloadPlacement>,
        current: &[Share],
        shares: &mut Vec<Share>,
    ) -> Option<(Vec<String>, String)> {
        let now = jiff::Timestamp::now();
        let leaving: Vec<(Share, jiff::Timestamp)> = current
            .iter()
            .filter(|c| c.replicas > 0 && !shares.iter().any(|s| s.cluster == c.cluster))
            .filter(|c| matches!(self.why_left(&c.cluster), Left::Draining))
            .filter_map(|c| Some((c.clone(), drain_deadline(&self.book.get(&c.cluster)?.target)?)))
            .filter(|(_, deadline)| *deadline > now)
            .collect();
        if leaving.is_empty() {
            self.drain_base.remove(key);
            return None;
        }
        // Reports from before the drain began may describe an older copy.
        let began = leaving
            .iter()
            .filter_map(|(s, _)| self.book.get(&s.cluster).and_then(|o| o.target.spec.evict_after.as_ref().map(|t| t.0)))
            .min()
            .unwrap_or(now);
        // The shares before the drain, kept from its first look: later, the assignment
        // holds the new shares already, and they would not look grown.
        let before = self.drain_base.entry(key.clone()).or_insert_with(|| current.to_vec()).clone();
        if available_since(wp, shares, &before, began) {
            self.drain_base.remove(key);
            return None;
        }
        let until = leaving.iter().map(|(_, d)| *d).min().map(|d| d.to_string()).unwrap_or_default();
        let names = leaving.iter().map(|(s, _)| s.cluster.clone()).collect();
        shares.extend(leaving.into_iter().map(|(s, _)| s));
        shares.sort();
        Some((names, until))
    }

    /// Nothing fits (or the Placement cannot be found): the workload keeps the
    /// assignment it has on registered clusters, and says why. A deregistered cluster
    /// is dropped from it, label and finalizer too: no syncer is left to act on them,
    /// and its finalizer would hold a deletion of the workload for ever.
    async fn fail(
        &self,
        key: &ObjKey,
        d: &Deployment,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        current: &[Share],
        why: String,
    ) -> Result<Next, anyhow::Error> {
        self.waiting.insert(key.clone());
        let (kept, gone): (Vec<Share>, Vec<Share>) = current.iter().cloned().partition(|s| self.book.knows(&s.cluster));
        let message = if kept.is_empty() { why } else { format!("{why}; it stays on {} until a cluster fits", shares_text(&kept)) };
        let Some(wp) = self.write_assignment(key, d, wp, rule, &kept).await? else { return Ok(Next::After(Duration::ZERO)) };
        let before =
            wp.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_SCHEDULED)).map(|c| c.message.clone());
        let paused = wp
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_FAILOVER_PAUSED))
            .filter(|_| kept.iter().any(|s| self.book.get(&s.cluster).is_some_and(|o| o.signature.braked)))
            .map(|c| c.message.clone());
        if !self.set_conditions(key, &wp, (false, REASON_UNSCHEDULABLE, &message), paused.as_deref()).await? {
            return Ok(Next::After(Duration::ZERO));
        }
        if before.as_deref() != Some(message.as_str()) {
            // Dropped clusters are named in the Event only: the condition's message
            // must read the same on the next pass, which finds them gone.
            let note = if gone.is_empty() { message } else { format!("{message}; dropped {} (deregistered)", shares_text(&gone)) };
            tracing::info!(reason = %note, "no fit");
            self.recorder.deployment(key, d, events::Type::Warning, "FailedScheduling", note);
        }
        Ok(Next::Done)
    }

    /// A workload being deleted waits for the syncers of its clusters to remove their
    /// copies; the finalizers of clusters that are no longer registered are removed
    /// here, since no syncer is left to do it.
    async fn release_deregistered(&self, key: &ObjKey, d: &Deployment) -> Result<Next, anyhow::Error> {
        let gone: Vec<String> = d
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| f.strip_prefix(SYNCER_FINALIZER_PREFIX).is_some_and(|c| !self.book.knows(c)))
            .cloned()
            .collect();
        if gone.is_empty() {
            return Ok(Next::Done);
        }
        let api: Api<Deployment> = Api::namespaced(clients::workspace(&self.base, &key.workspace), &key.namespace);
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": gone}});
        match api.patch(&key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => tracing::info!(finalizers = ?gone, "removed the finalizers of deregistered clusters from a workload being deleted"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(anyhow::anyhow!("removing deregistered clusters' finalizers from {key}: {e}")),
        }
        Ok(Next::Done)
    }

    /// Makes the WorkloadPlacement and the workload's labels say `shares`. Returns the
    /// WorkloadPlacement as written, or `None` when the cache was behind and the
    /// reconcile should run again.
    async fn write_assignment(
        &self,
        key: &ObjKey,
        d: &Deployment,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        shares: &[Share],
    ) -> Result<Option<WorkloadPlacement>, anyhow::Error> {
        let client = clients::workspace(&self.base, &key.workspace);
        let wps: Api<WorkloadPlacement> = Api::namespaced(client.clone(), &key.namespace);
        let want: BTreeSet<String> = shares.iter().map(|s| s.cluster.clone()).collect();
        let spec = WorkloadPlacementSpec {
            workload: WorkloadRef { api_version: "apps/v1".into(), kind: "Deployment".into(), name: key.name.clone() },
            placement: rule.to_string(),
            clusters: shares.iter().map(|s| ClusterAssignment { name: s.cluster.clone(), replicas: s.replicas as i32 }).collect(),
        };
        let written = match wp {
            None => {
                self.own.placements.insert(key.clone(), (spec.clone(), want.clone()));
                let mut new = WorkloadPlacement::new(&key.name, spec);
                new.metadata.namespace = Some(key.namespace.clone());
                new.metadata.labels =
                    Some(want.iter().map(|c| (sync_state_label(c), SYNC_STATE_SYNC.to_string())).collect::<BTreeMap<_, _>>());
                match wps.create(&PostParams::default(), &new).await {
                    Ok(w) => w,
                    Err(e) => {
                        self.own.placements.remove(key);
                        match e {
                            kube::Error::Api(s) if s.code == 409 => return Ok(None),
                            e => return Err(anyhow::anyhow!("creating WorkloadPlacement {key}: {e}")),
                        }
                    }
                }
            }
            Some(wp) => {
                let labels = label_patch(&assigned_labels(wp.metadata.labels.as_ref()), &want);
                if wp.spec == spec && labels.is_none() {
                    wp.clone()
                } else {
                    let mut patch = json!({"spec": spec});
                    // An empty list is left out of the encoding; the patch must still
                    // empty the stored one.
                    patch["spec"]["clusters"] = json!(spec.clusters);
                    if let Some(l) = labels {
                        patch["metadata"] = json!({"labels": l});
                    }
                    self.own.placements.insert(key.clone(), (spec.clone(), want.clone()));
                    match wps.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
                        Ok(w) => w,
                        Err(e) => {
                            self.own.placements.remove(key);
                            if is_not_found(&e) {
                                return Ok(None);
                            }
                            return Err(anyhow::anyhow!("updating WorkloadPlacement {key}: {e}"));
                        }
                    }
                }
            }
        };
        if let Some(patch) = workload_patch(d, &want) {
            let deployments: Api<Deployment> = Api::namespaced(client, &key.namespace);
            // A patch of the finalizers alone changes nothing the watch looks at.
            if labelled(d) != want {
                self.own.labels.insert(key.clone(), want.clone());
            }
            match deployments.patch(&key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                Err(e) => {
                    self.own.labels.remove(key);
                    if is_not_found(&e) {
                        return Ok(None);
                    }
                    return Err(anyhow::anyhow!("labelling Deployment {key}: {e}"));
                }
            }
        }
        Ok(Some(written))
    }

    /// Sets the `Scheduled` condition if it says something new. The condition is the
    /// scheduler's own field of the status, applied server-side, so the syncers' and
    /// the aggregator's writes of the same status never conflict with it. `false` when
    /// the WorkloadPlacement is gone (the reconcile runs again).
    /// Sets the conditions the scheduler owns, when they say something new: `Scheduled`
    /// (status, reason, message), and `FailoverPaused` while `paused` says why, which
    /// the server-side apply drops once it is left out.
    async fn set_conditions(
        &self,
        key: &ObjKey,
        wp: &WorkloadPlacement,
        (ok, reason, message): (bool, &str, &str),
        paused: Option<&str>,
    ) -> Result<bool, anyhow::Error> {
        let existing = |type_: &str| wp.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
        let condition = |type_: &str, status: &str, reason: &str, message: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: match existing(type_) {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => Time(jiff::Timestamp::now()),
            },
            observed_generation: wp.metadata.generation,
        };
        let same = |next: Option<&Condition>, type_: &str| match (next, existing(type_)) {
            (Some(n), Some(c)) => c.status == n.status && c.reason == n.reason && c.message == n.message,
            (None, None) => true,
            _ => false,
        };
        let scheduled = condition(CONDITION_SCHEDULED, if ok { "True" } else { "False" }, reason, message);
        let paused = paused.map(|why| condition(CONDITION_FAILOVER_PAUSED, "True", "DisruptionBrake", why));
        if same(Some(&scheduled), CONDITION_SCHEDULED) && same(paused.as_ref(), CONDITION_FAILOVER_PAUSED) {
            return Ok(true);
        }
        let conditions: Vec<Condition> = std::iter::once(scheduled).chain(paused).collect();
        let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(&self.base, &key.workspace), &key.namespace);
        match clients::apply_placement_status(&api, &key.name, FIELD_MANAGER, json!({ "conditions": conditions })).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(anyhow::anyhow!("writing the conditions of WorkloadPlacement {key}: {e}")),
        }
    }

    /// The workload is gone: so is its WorkloadPlacement, and what was assumed for it.
    async fn forget(&self, key: &ObjKey) -> Result<Next, anyhow::Error> {
        self.waiting.remove(key);
        self.short.remove(key);
        self.rebalanced_at.remove(key);
        self.rebalancing.remove(key);
        self.drain_base.remove(key);
        self.own.forget(key);
        let Some(wp) = self.placements.get(key) else { return Ok(Next::Done) };
        for c in &wp.spec.clusters {
            self.assumed.forget(key, &c.name);
        }
        if wp.spec.workload.kind != "Deployment" {
            return Ok(Next::Done);
        }
        let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(&self.base, &key.workspace), &key.namespace);
        match api.delete(&key.name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!("workload gone; deleted its WorkloadPlacement"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(anyhow::anyhow!("deleting WorkloadPlacement {key}: {e}")),
        }
        Ok(Next::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(labels: &[&str], finalizers: &[&str]) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.labels = Some(labels.iter().map(|c| (sync_state_label(c), SYNC_STATE_SYNC.to_string())).collect());
        d.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        d
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
        assert!(!own.labelled_it(&change(Some(before.clone()), Some(after.clone()))));
        own.labels.insert(key.clone(), want(&["east"]));
        // Someone else's labels, or another change along with ours, count.
        assert!(!own.labelled_it(&change(Some(before.clone()), Some(workload(&["west"], &[])))));
        let mut with_more = after.clone();
        with_more.metadata.labels.get_or_insert_default().insert("team".into(), "a".into());
        assert!(!own.labelled_it(&change(Some(before.clone()), Some(with_more))));
        let mut respecified = after.clone();
        respecified.metadata.generation = Some(2);
        assert!(!own.labelled_it(&change(Some(before.clone()), Some(respecified))));
        // The scheduler's own write is passed over once; the same change again counts.
        assert!(own.labelled_it(&change(Some(before.clone()), Some(after.clone()))));
        assert!(!own.labelled_it(&change(Some(before), Some(after))));
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
