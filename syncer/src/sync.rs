//! One cluster's syncer: assigned workloads down, their status up.
//!
//! Upstream, it watches through the wildcard view only what is labelled
//! `state.workload.flotilla.io/<target>=Sync`: Deployments, their WorkloadPlacements,
//! and their companions, every other kind of the table of synced kinds
//! ([`placement_api::synced`], labelled by the control plane's companions controller).
//! Downstream, it watches only the copies it made (labelled with its SyncTarget). Every change on either side queues the upstream object's key,
//! and [`Syncer::reconcile`] makes the downstream side match what is assigned now:
//! - assigned: for a Deployment, make sure the per-cluster finalizer is on the upstream
//!   object (the scheduler puts it on in the write that assigns the cluster);
//!   server-side apply the copy if it does not already say what it should (so drift is
//!   reverted, and a resync of unchanged objects writes nothing); for a Deployment,
//!   report the copy's status in this cluster's WorkloadPlacement entry, once the
//!   cluster has observed the copy's generation (or after [`OBSERVE_GRACE`]), and
//!   while it rolls out at most once per [`PROGRESS_HOLD`], and for all copies at most
//!   [`PROGRESS_REPORTS_PER_SECOND`] reports a second; for a companion whose status
//!   flows up, report its copy's status in this cluster's annotation on it; for an
//!   autoscaler, divide its bounds by this cluster's share, and leave the replicas of
//!   the Deployment it scales to the cluster's autoscaler;
//! - a companion whose place on the cluster holds someone else's object: leave that
//!   object alone, and say so on the companion and in the entries of the workloads it
//!   follows (see [`Syncer::refuse`]);
//! - a Deployment being deleted upstream: delete the copy, then release the finalizer;
//! - no longer assigned, or a copy with no upstream object (left behind while this
//!   cluster was away): release the finalizer if it is still there, then remove this
//!   cluster's entry from the WorkloadPlacement status, then delete the copy, and the
//!   Flotilla namespace once nothing of ours is left in it.
//!
//! While the cluster does not answer the heartbeat's probe, the entry and the copy of
//! an unassigned workload stay: the copy may still run there, as the pods of an
//! unreachable node stay listed until it is back, and the entry counts in no status
//! once the cluster is not assigned. Such keys wait, at no cost, until the probe
//! reaches the cluster again, and are then cleaned up at once. In a failover this
//! leaves the lost cluster's syncer nothing to write.
//!
//! **Drift.** The copies' watch queues the upstream object on any edit of a copy, and
//! the reconcile applies the copy again when it no longer says what it should, and
//! removes what someone added to its spec or data (which an apply leaves). A copy
//! is found by where it is ([`Place`]: the namespace, whose locator the syncer knows
//! from the upstream side, and the name), never only by what its metadata says, which
//! the cluster's users can rewrite: a copy whose `workload.flotilla.io/upstream`
//! annotation or `workload.flotilla.io/sync-target` label was edited is still known,
//! and put back. The same goes for a Flotilla namespace's label and locator, and a
//! deleted copy is made again. Each revert is logged and recorded as a Warning Event
//! `DriftReverted` on the copy, naming what was there and what was put back; a copy
//! changed because its upstream object changed is an update, not drift.
//!
//! Nothing is deleted before both sides have been listed completely, so a cluster that
//! comes back first learns what is assigned to it now and only then removes what is not
//! (the fencing that keeps a returning cluster from running stale copies), and an
//! unreachable control plane never makes workloads look unassigned.

//!
//! This file holds the watches and the dispatch; each step has a file of its own
//! beside it: `copy` (the workload's copy: what is pushed and when it already covers
//! the upstream version), `report` (the cluster's report on it), `companions`, and
//! `cleanup` (deleted and unassigned objects, finalizers, empty namespaces).
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use placement_api::workload::{self, Workload, WorkloadKind};
use placement_api::{
    sync_state_label, syncer_finalizer, ClusterSyncStatus, WorkloadPlacement, CONDITION_COMPANIONS_SYNCED, CONDITION_SYNCED,
    NAMESPACE_LOCATOR_ANNOTATION, SYNC_STATE_SYNC, SYNC_TARGET_LABEL, UPSTREAM_ANNOTATION,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::cache::{self, Cache};
use crate::error::{downstream, is_already_exists, is_conflict, is_forbidden, is_not_found, upstream, Error};
use crate::events::{Recorder, REASON_DRIFT_REVERTED};
use crate::heartbeat::Reachability;
use crate::key::{CopyKey, Key, Kind, Place};
use crate::naming::{Locators, NamespaceLocator};
use crate::{clients, status, transform};
use runtime::controller::{Controller, Next};

mod classes;
mod cleanup;
mod companions;
mod copy;
mod report;
use runtime::followers::Followers;

/// The field manager of everything the syncer applies downstream.
pub const FIELD_MANAGER: &str = "flotilla-syncer";
/// The field manager of a syncer's entry in the WorkloadPlacement status upstream:
/// one per cluster, so each syncer's apply owns its own entry and no other.
pub fn status_field_manager(sync_target: &str) -> String {
    format!("{FIELD_MANAGER}-{sync_target}")
}
/// How many objects are synced at once.
const CONCURRENCY: usize = 16;
/// How long to wait before looking again at an object waiting for another one.
const WAIT_FOR_PEER: Duration = Duration::from_secs(1);
/// How long a copy written but not yet observed by its cluster's Deployment controller
/// waits for it before its entry reports it as it is. A controller that works observes
/// a new generation within milliseconds, and its status update follows, so one write
/// then reports both the sync and what the cluster made of it; until then the status
/// aggregator already says the generation is not yet observed there.
const OBSERVE_GRACE: Duration = Duration::from_secs(5);
/// How long a changed entry of a copy that is still rolling out waits before it is
/// written. The cluster's Deployment controller updates the copy's status at each step
/// (replicas created, ready, available), often a few times a second; holding the
/// report this long sends those steps up as one write, and so one status update of the
/// aggregator after it. A finished copy is reported at once, so what a rollout ends on,
/// and so `kubectl rollout status` finishing, is never held; only the progress lines
/// before it may lag by up to this much.
const PROGRESS_HOLD: Duration = Duration::from_secs(1);
/// How many progress reports (entries of copies still rolling out) a syncer writes a
/// second, at most, and how many at once after a quiet spell ([`crate::budget`]). A
/// report whose hold is over waits one more [`PROGRESS_HOLD`] for a token; what a
/// rollout ends on never waits.
const PROGRESS_REPORTS_PER_SECOND: u32 = 10;
const PROGRESS_REPORTS_BURST: u32 = 10;
/// How long a companion whose place on the cluster someone else's object holds waits
/// before it is tried again.
const REFUSED_RETRY: Duration = Duration::from_secs(10);
/// The reason of a False `CompanionsSynced`, and of the Event on the companion.
pub const REASON_COMPANION_REFUSED: &str = "CompanionRefused";
/// The reason of the `Synced` condition in a cluster's entry when the cluster refuses
/// or cannot be reached.
pub const REASON_DOWNSTREAM_ERROR: &str = "DownstreamError";

/// Settings of one syncer.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The SyncTarget's name.
    pub sync_target: String,
    /// How often every object is looked at again, events or not.
    pub resync: Duration,
    /// Where companions go, as the companions controller of this process publishes it
    /// ahead of their labels; `None` in a process without one (pull mode).
    pub followers: Option<Arc<Followers>>,
}

/// How many differences a drift report names at most.
const DRIFT_LINES: usize = 8;

/// One kind's two sides: what is assigned upstream, by key, and the copies downstream,
/// by where they are.
struct Side<K> {
    kind: Kind,
    upstream: Arc<Cache<K>>,
    copies: Arc<Cache<K, Place>>,
}

impl<K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static> Side<K> {
    /// Watches the objects of `kind` upstream (with the first API, through the
    /// wildcard view, and the first config: what is assigned) and downstream (with the
    /// second: this syncer's copies). The upstream objects teach `locators` their
    /// downstream namespaces, and a copy's changes queue the upstream object its place
    /// says it is of.
    fn spawn(
        kind: Kind,
        apis: [Api<K>; 2],
        configs: [&watcher::Config; 2],
        locators: &Arc<Locators>,
        tx: &mpsc::UnboundedSender<Key>,
    ) -> Self {
        let learning = locators.clone();
        let [up_api, down_api] = apis;
        let up = cache::spawn_indexed(
            up_api,
            configs[0].clone(),
            move |o: &K| {
                let key = Key::upstream(kind, o.meta())?;
                learning.learn(&key.workspace, &key.namespace);
                Some(key)
            },
            |k: &Key, _: &K| Some(k.clone()),
            tx.clone(),
            format!("upstream {}", kind.row().plural),
        );
        let locators = locators.clone();
        let down = cache::spawn_indexed(
            down_api,
            configs[1].clone(),
            |o: &K| Place::of(o.meta()),
            move |place: &Place, o: &K| {
                let key = Key::of_copy_at(kind, place, o.meta(), &locators);
                if key.is_none() {
                    tracing::warn!(copy = %place, kind = kind.name(), "cannot tell which upstream object this copy is of: its namespace is not one this syncer knows, and neither its annotation nor its namespace's locator says");
                }
                key
            },
            tx.clone(),
            format!("downstream {}", kind.row().plural),
        );
        Side { kind, upstream: up, copies: down }
    }
}

/// What the syncer asks of every workload kind's side, whatever its type.
trait WorkloadSide: Send + Sync {
    fn synced(&self) -> bool;
    fn keys<'a>(&'a self, locators: &'a Locators) -> Box<dyn Iterator<Item = Key> + 'a>;
    fn any_copy_in(&self, ns: &Key) -> bool;
    fn assigned(&self) -> usize;
}

impl<K: Send + Sync> WorkloadSide for Side<K> {
    fn synced(&self) -> bool {
        Side::synced(self)
    }
    fn keys<'a>(&'a self, locators: &'a Locators) -> Box<dyn Iterator<Item = Key> + 'a> {
        Box::new(Side::keys(self, locators))
    }
    fn any_copy_in(&self, ns: &Key) -> bool {
        Side::any_copy_in(self, ns)
    }
    fn assigned(&self) -> usize {
        self.upstream.len()
    }
}

/// A workload type the syncer copies: the workload model's rules for it, and where the
/// syncer keeps its side.
trait Synced:
    Workload
    + Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Its side.
    fn side(s: &Syncer) -> &Side<Self>;
}

macro_rules! synced {
    ($t:ty, $field:ident) => {
        impl Synced for $t {
            fn side(s: &Syncer) -> &Side<Self> {
                &s.$field
            }
        }
    };
}
synced!(Deployment, deployments);
synced!(StatefulSet, stateful_sets);
synced!(DaemonSet, daemon_sets);
synced!(Job, jobs);

impl<K> Side<K> {
    fn synced(&self) -> bool {
        self.upstream.synced() && self.copies.synced()
    }

    /// The keys of the upstream objects, and of the copies whose namespace is known.
    fn keys<'a>(&'a self, locators: &'a Locators) -> impl Iterator<Item = Key> + 'a {
        let copies = self
            .copies
            .keys()
            .into_iter()
            .filter_map(move |p| locators.get(&p.namespace).map(|l| Key::new(self.kind, &l.workspace, &l.namespace, &p.name)));
        self.upstream.keys().into_iter().chain(copies)
    }

    /// The copy of `key`.
    fn copy(&self, key: &Key) -> Option<Arc<K>> {
        self.copies.get(&key.place())
    }

    /// Whether an assigned object of the upstream namespace of `ns` (a namespace key)
    /// has a copy.
    fn any_copy_in(&self, ns: &Key) -> bool {
        let assigned = self.upstream.keys_where(|k| k.workspace == ns.workspace && k.namespace == ns.namespace);
        assigned.iter().any(|k| self.copies.get(&k.place()).is_some())
    }
}

/// How a copy drifted from what it last said as it should.
enum Drift {
    /// It says something else: what, one line each ([`transform::drift`]).
    Changed(Vec<String>),
    /// It is gone from the syncer's view: deleted, or its sync-target label changed.
    Gone,
}

/// One cluster's syncer.
pub struct Syncer {
    settings: Settings,
    /// The control plane, without a workspace path.
    upstream: Client,
    /// The physical cluster.
    downstream: Client,
    finalizer: String,
    /// The field manager of this cluster's entry in the WorkloadPlacement status.
    status_manager: String,
    deployments: Side<Deployment>,
    stateful_sets: Side<StatefulSet>,
    daemon_sets: Side<DaemonSet>,
    jobs: Side<Job>,
    /// Every other kind of the table ([`placement_api::synced`]), in its order.
    companions: Vec<Side<DynamicObject>>,
    /// This syncer's namespaces downstream (labelled with its SyncTarget), by name.
    namespaces: Arc<Cache<Namespace, String>>,
    /// Which upstream namespace each downstream one holds.
    locators: Arc<Locators>,
    /// The workspaces' StorageClasses, by workspace and name.
    classes: Arc<runtime::cache::Cache<StorageClass>>,
    /// The cluster's StorageClasses, by name.
    cluster_classes: Arc<Cache<StorageClass, String>>,
    /// Copies that wait for a StorageClass, once said.
    waiting_for_class: dashmap::DashSet<Key>,
    placements: Arc<Cache<WorkloadPlacement>>,
    /// Changed entries held back (see [`Syncer::hold`]), and since when.
    held: dashmap::DashMap<Key, std::time::Instant>,
    /// Tokens for progress reports, shared by every held key.
    progress: crate::budget::Budget,
    /// Per Deployment, the versions last found covered (see [`Syncer::covers`]).
    covered: dashmap::DashMap<Key, Covered>,
    /// Per companion, a digest of what its copy was last found to cover or was
    /// applied with, and the upstream resourceVersion it was made from: a new desired
    /// state is applied even over a copy that covers it, so what the workspace removed
    /// (a label, an annotation) goes from the copy too; and a copy that no longer
    /// covers it while nothing changed upstream drifted.
    companion_covered: dashmap::DashMap<Key, (u64, Option<String>)>,
    /// Events on the copies (drift reverted).
    recorder: Recorder,
    /// Whether the cluster answers; see [`Syncer::wait_for_cluster`].
    reach: Reachability,
    /// Keys whose cleanup waits for the cluster to answer again.
    parked: dashmap::DashSet<Key>,
    /// Companions this cluster holds someone else's object for, and why.
    refused: dashmap::DashMap<Key, String>,
    /// Events on upstream objects (a companion refused here).
    upstream_events: Recorder,
    /// Queues keys again (the workloads whose entries name a refused companion).
    requeue: mpsc::UnboundedSender<Key>,
}

/// What a copy was last found to cover its desired state against: the share, and
/// everything of either object that the desired copy is made from or that an edit of
/// the copy would change. A status update of either (three or more of the copy's per
/// rollout, and the aggregator's of the upstream one) changes none of it, so its check
/// costs no conversion of either object to JSON.
#[derive(Debug, Clone)]
struct Covered {
    share: i32,
    upstream: Version,
    copy: Version,
}

/// An object's uid, generation (which any spec edit bumps), labels and annotations
/// (which bump none).
#[derive(Debug, Clone)]
struct Version {
    uid: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

impl Version {
    fn of(m: &ObjectMeta) -> Self {
        Version { uid: m.uid.clone(), generation: m.generation, labels: m.labels.clone(), annotations: m.annotations.clone() }
    }

    fn is_of(&self, m: &ObjectMeta) -> bool {
        self.uid == m.uid && self.generation == m.generation && self.labels == m.labels && self.annotations == m.annotations
    }
}

impl Covered {
    /// Whether this is the mark of `upstream`, `share` and `copy`, compared in place.
    fn is_of(&self, upstream: &ObjectMeta, share: i32, copy: &ObjectMeta) -> bool {
        self.share == share && self.upstream.is_of(upstream) && self.copy.is_of(copy)
    }

    fn of(upstream: &ObjectMeta, share: i32, copy: &ObjectMeta) -> Self {
        Covered { share, upstream: Version::of(upstream), copy: Version::of(copy) }
    }
}

pub(crate) fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

/// A digest of a desired copy, to tell whether it changed.
fn digest(desired: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    desired.to_string().hash(&mut h);
    h.finish()
}

fn to_value<K: serde::Serialize>(o: &K) -> Value {
    serde_json::to_value(o).unwrap_or_default()
}

fn deleting(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

impl Syncer {
    /// Runs the syncer until the task is dropped. `upstream` is a client of the control
    /// plane with no workspace path (see [`clients::base_config`]).
    /// `started` gets the syncer once its watches are set up. `reach` says whether the
    /// cluster answers (the heartbeat's probe).
    pub async fn run(settings: Settings, upstream: Client, downstream: Client, reach: Reachability, started: impl FnOnce(Arc<Syncer>)) {
        let span = tracing::info_span!("syncer", sync_target = %settings.sync_target);
        async move {
            let mut controller = Controller::<Key>::new("syncer").concurrency(CONCURRENCY);
            let tx = controller.trigger();
            let target = &settings.sync_target;
            let assigned = watcher::Config::default().labels(&format!("{}={SYNC_STATE_SYNC}", sync_state_label(target)));
            let mine = watcher::Config::default().labels(&format!("{SYNC_TARGET_LABEL}={target}"));
            let wildcard = clients::workspace(&upstream, "*");
            let locators = Arc::new(Locators::default());
            let configs = [&assigned, &mine];
            let apis = [Api::all(wildcard.clone()), Api::all(downstream.clone())];
            let deployments = Side::spawn(Kind::Deployment, apis, configs, &locators, &tx);
            let stateful_sets =
                Side::spawn(Kind::StatefulSet, [Api::all(wildcard.clone()), Api::all(downstream.clone())], configs, &locators, &tx);
            let daemon_sets =
                Side::spawn(Kind::DaemonSet, [Api::all(wildcard.clone()), Api::all(downstream.clone())], configs, &locators, &tx);
            let jobs = Side::spawn(Kind::Job, [Api::all(wildcard.clone()), Api::all(downstream.clone())], configs, &locators, &tx);
            let companions = Kind::companions()
                .map(|kind| {
                    let ar = kind.api_resource();
                    let apis = [Api::all_with(wildcard.clone(), &ar), Api::all_with(downstream.clone(), &ar)];
                    Side::spawn(kind, apis, configs, &locators, &tx)
                })
                .collect();
            // A namespace's changes queue its key; a true locator on it teaches it.
            let learning = locators.clone();
            let namespaces = cache::spawn_indexed(
                Api::<Namespace>::all(downstream.clone()),
                mine.clone(),
                |n: &Namespace| n.metadata.name.clone(),
                move |name: &String, n: &Namespace| {
                    if let Some(claim) = n.metadata.annotations.as_ref().and_then(|a| a.get(NAMESPACE_LOCATOR_ANNOTATION)) {
                        if let Some(claim) = NamespaceLocator::from_annotation(claim) {
                            learning.learn_claim(name, &claim);
                        }
                    }
                    learning.get(name).map(|l| Key::namespace(&l.workspace, &l.namespace))
                },
                tx.clone(),
                "downstream namespaces",
            );
            // A WorkloadPlacement has its workload's name: its changes queue the workload,
            // of the kind it names. It is kept under the key of that name as a
            // Deployment's ([`Syncer::placement`]).
            let placements = cache::spawn_indexed(
                Api::<WorkloadPlacement>::all(wildcard.clone()),
                assigned,
                |wp: &WorkloadPlacement| Key::upstream(Kind::Deployment, &wp.metadata),
                |k: &Key, wp: &WorkloadPlacement| Some(k.with_kind(Kind::placed_by(wp))),
                tx.clone(),
                "upstream workloadplacements",
            );
            // StorageClasses: the workspaces' (cluster-scoped in each), and the cluster's
            // own. A class that appears lets a copy waiting for it go on at its next try.
            let classes = runtime::cache::spawn(
                Api::<StorageClass>::all(wildcard.clone()),
                watcher::Config::default(),
                runtime::cache::Workspace::Annotated,
                "upstream storageclasses",
                |_| {},
            );
            let cluster_classes = runtime::cache::spawn_indexed(
                Api::<StorageClass>::all(downstream.clone()),
                watcher::Config::default(),
                |c: &StorageClass| c.metadata.name.clone(),
                |_| true,
                "downstream storageclasses",
            );
            let upstream_client = upstream.clone();
            let syncer = Arc::new(Syncer {
                finalizer: syncer_finalizer(target),
                status_manager: status_field_manager(target),
                settings: settings.clone(),
                upstream,
                recorder: Recorder::new(downstream.clone(), format!("{FIELD_MANAGER}-{target}")),
                downstream,
                deployments,
                stateful_sets,
                daemon_sets,
                jobs,
                companions,
                namespaces,
                locators,
                classes,
                cluster_classes,
                waiting_for_class: Default::default(),
                placements,
                held: Default::default(),
                progress: crate::budget::Budget::new(PROGRESS_REPORTS_PER_SECOND, PROGRESS_REPORTS_BURST),
                covered: Default::default(),
                companion_covered: Default::default(),
                reach,
                parked: Default::default(),
                refused: Default::default(),
                upstream_events: Recorder::new(upstream_client, format!("{FIELD_MANAGER}-{target}")),
                requeue: tx.clone(),
            });
            started(syncer.clone());
            if let Some(f) = &settings.followers {
                f.subscribe(target, tx.clone());
            }
            // Keys parked while the cluster did not answer go back to the queue when it does.
            {
                let s = syncer.clone();
                let tx = tx.clone();
                controller.spawn(async move {
                    loop {
                        s.reach.comes_back().await;
                        let keys: Vec<Key> = s.parked.iter().map(|k| k.clone()).collect();
                        tracing::info!(objects = keys.len(), "the cluster answers again; cleaning up what waited for it");
                        for k in keys {
                            s.parked.remove(&k);
                            let _ = tx.send(k);
                        }
                    }
                });
            }
            // Every key again, and what no key owns: namespaces and classes left empty.
            let s = syncer.clone();
            controller.every(settings.resync, move |tx| {
                let s = s.clone();
                async move {
                    for k in s.keys() {
                        let _ = tx.send(k);
                    }
                    if let Err(e) = s.sweep_namespaces().await {
                        tracing::warn!(error = %e, "sweeping empty namespaces failed; trying again at the next resync");
                    }
                    if let Err(e) = s.sweep_classes().await {
                        tracing::warn!(error = %e, "sweeping unused StorageClasses failed; trying again at the next resync");
                    }
                }
            });
            drop(tx);
            controller
                .run(|key| {
                    let s = syncer.clone();
                    async move {
                        let started = std::time::Instant::now();
                        let result = s.reconcile(&key).await;
                        crate::metrics::observe(&s.settings.sync_target, started.elapsed(), result.as_ref().err().map(|e| e.category()));
                        result
                    }
                })
                .await;
        }
        .instrument(span)
        .await
    }

    /// Every workload kind's side.
    fn workload_sides(&self) -> [&dyn WorkloadSide; 4] {
        [&self.deployments, &self.stateful_sets, &self.daemon_sets, &self.jobs]
    }

    /// How many workloads are assigned to this cluster now.
    pub fn assigned(&self) -> usize {
        self.workload_sides().iter().map(|s| s.assigned()).sum()
    }

    /// The WorkloadPlacement of the workload of `key`, if it places that kind.
    fn placement(&self, key: &Key) -> Option<Arc<WorkloadPlacement>> {
        self.placements.get(&key.with_kind(Kind::Deployment)).filter(|wp| Kind::placed_by(wp) == key.kind)
    }

    /// Whether every watch, on both sides, has listed completely.
    fn synced(&self) -> bool {
        self.workload_sides().iter().all(|s| s.synced())
            && self.companions.iter().all(Side::synced)
            && self.placements.synced()
            && self.namespaces.synced()
            && self.classes.synced()
            && self.cluster_classes.synced()
    }

    /// Whether a companion's absence from both views means it is not assigned here:
    /// [`Syncer::synced`], and what the companions controller publishes is complete.
    /// Only a companion's copy waits for the controller; nothing else does.
    fn companions_synced(&self) -> bool {
        self.synced() && self.settings.followers.as_ref().is_none_or(|f| f.synced())
    }

    /// Every key this syncer knows of, on either side.
    fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        let l = &self.locators;
        let published = self.settings.followers.iter().flat_map(|f| f.keys_for(&self.settings.sync_target));
        let workloads: Vec<Box<dyn Iterator<Item = Key> + '_>> = self.workload_sides().into_iter().map(|s| s.keys(l)).collect();
        workloads.into_iter().flatten().chain(self.companions.iter().flat_map(move |s| s.keys(l))).chain(published)
    }

    /// Whether a companion of `kind` assigned here in the upstream namespace of `ns`
    /// (a namespace key), by label or as published, has a copy.
    fn any_companion_copy_in(&self, kind: Kind, ns: &Key) -> bool {
        let Some(side) = self.companion(kind) else { return false };
        let published =
            self.settings.followers.iter().flat_map(|f| f.in_namespace(&self.settings.sync_target, kind, &ns.workspace, &ns.namespace));
        side.any_copy_in(ns) || published.into_iter().any(|k| side.copy(&k).is_some())
    }

    /// The side of companion kind `kind`.
    fn companion(&self, kind: Kind) -> Option<&Side<DynamicObject>> {
        self.companions.iter().find(|s| s.kind == kind)
    }

    fn upstream_api<K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>>(&self, key: &Key) -> Api<K> {
        Api::namespaced(clients::workspace(&self.upstream, &key.workspace), &key.namespace)
    }

    fn copy_api(&self, key: &Key) -> Api<DynamicObject> {
        Api::namespaced_with(self.downstream.clone(), &transform::downstream_namespace(key), &key.kind.api_resource())
    }

    /// The upstream object of a companion's key, as JSON: if it is labelled for this
    /// cluster, or published for it ([`runtime::followers`]). When both caches hold it,
    /// the later version: both watch this control plane, whose resourceVersions are
    /// its store's revisions, so they compare. A published object that neither cache
    /// holds (one a template names, not labelled yet) is read.
    async fn upstream_value(&self, key: &Key) -> Result<Option<Value>, Error> {
        let Some(side) = self.companion(key.kind) else { return Ok(None) };
        let labelled = side.upstream.get(key);
        let target = &self.settings.sync_target;
        let published = self.settings.followers.as_ref().filter(|f| f.wants(key, target));
        let cached = published.and_then(|f| f.get(key, target));
        let revision = |o: &DynamicObject| o.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok());
        let newest = match (labelled, cached) {
            (Some(l), Some(p)) if revision(&p) > revision(&l) => p,
            (Some(l), _) => l,
            (None, Some(p)) => p,
            (None, None) if published.is_some() => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(clients::workspace(&self.upstream, &key.workspace), &key.namespace, &key.kind.api_resource());
                match api.get_opt(&key.name).await.map_err(upstream(format!("reading {key}")))? {
                    Some(o) => Arc::new(o),
                    None => return Ok(None),
                }
            }
            (None, None) => return Ok(None),
        };
        if published.is_some() {
            self.locators.learn(&key.workspace, &key.namespace);
        }
        Ok(Some(to_value(&*newest)))
    }

    /// The downstream copy of a companion's or a namespace's key, as JSON.
    fn copy_value(&self, key: &Key) -> Option<Value> {
        match key.kind {
            Kind::Namespace => self.namespaces.get(&key.place().namespace).map(|o| to_value(&*o)),
            kind => self.companion(kind)?.copy(key).map(|o| to_value(&*o)),
        }
    }

    /// Makes the downstream side of `key` match what is assigned now.
    pub async fn reconcile(&self, key: &Key) -> Result<Next, Error> {
        match key.kind {
            Kind::Deployment => self.reconcile_workload::<Deployment>(key).await,
            Kind::StatefulSet => self.reconcile_workload::<StatefulSet>(key).await,
            Kind::DaemonSet => self.reconcile_workload::<DaemonSet>(key).await,
            Kind::Job => self.reconcile_workload::<Job>(key).await,
            Kind::Namespace => self.reconcile_namespace(key).await,
            _ => self.reconcile_companion(key).await,
        }
    }

    /// A Flotilla namespace that holds copies of assigned objects keeps its label and
    /// locator: applied again when someone changed them (or took the label, which takes
    /// it out of this syncer's watch). Any other is the cleanup's and the sweep's; a
    /// deleted one is made again by its copies' applies.
    async fn reconcile_namespace(&self, key: &Key) -> Result<Next, Error> {
        if !self.synced() {
            return Ok(Next::After(WAIT_FOR_PEER));
        }
        let name = key.place().namespace;
        let holds_copies = self.workload_sides().iter().any(|s| s.any_copy_in(key))
            || self.companions.iter().any(|s| self.any_companion_copy_in(s.kind, key));
        if !holds_copies {
            return Ok(Next::Done);
        }
        let desired = transform::downstream_namespace_object(key, &self.settings.sync_target);
        let drift = match self.copy_value(key) {
            Some(ns) if deleting(&ns) || transform::covers(&ns, &desired) => return Ok(Next::Done),
            Some(ns) => Drift::Changed(transform::drift(&ns, &desired, false)),
            None => Drift::Gone,
        };
        let ssa = PatchParams::apply(FIELD_MANAGER).force();
        let applied = match Api::<Namespace>::all(self.downstream.clone()).patch(&name, &ssa, &Patch::Apply(&desired)).await {
            Ok(ns) => ns,
            // Created by a copy's apply just now; look again.
            Err(e) if is_already_exists(&e) => return Ok(Next::After(Duration::ZERO)),
            Err(e) => return Err(downstream(format!("applying namespace {name}"))(e)),
        };
        let involved = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            name: Some(name.clone()),
            uid: applied.metadata.uid.clone(),
            resource_version: applied.metadata.resource_version.clone(),
            ..Default::default()
        };
        self.report_drift(key, &name, involved, drift);
        Ok(Next::Done)
    }

    /// Logs a reverted drift, and records it as an Event on the object, in `namespace`
    /// (the copy's, or the Flotilla namespace itself).
    fn report_drift(&self, key: &Key, namespace: &str, involved: ObjectReference, drift: Drift) {
        let object = format!("{} {}", key.kind.name(), involved.name.as_deref().unwrap_or_default());
        let what = match drift {
            Drift::Changed(lines) => {
                let more = lines.len().saturating_sub(DRIFT_LINES);
                let mut what = lines.into_iter().take(DRIFT_LINES).collect::<Vec<_>>().join("; ");
                if more > 0 {
                    what.push_str(&format!("; and {more} more"));
                }
                what
            }
            Drift::Gone => format!("it was deleted, or lost its label {SYNC_TARGET_LABEL}={}; made it again", self.settings.sync_target),
        };
        tracing::warn!(namespace, object, upstream = %key, reverted = %what, "reverted drift downstream");
        let message = format!("put back what workspace {} says ({key}): {what}", key.workspace);
        let mut involved = involved;
        if key.kind != Kind::Namespace {
            involved.namespace = Some(namespace.to_string());
        }
        self.recorder.warn(namespace, involved, REASON_DRIFT_REVERTED, message);
    }

    async fn reconcile_workload<W: Synced>(&self, key: &Key) -> Result<Next, Error> {
        let side = W::side(self);
        let copy = side.copy(key);
        let upstream = side.upstream.get(key);
        if upstream.as_ref().is_none_or(|d| d.meta().deletion_timestamp.is_some()) {
            self.held.remove(key);
            self.covered.remove(key);
        }
        match upstream {
            Some(d) if d.meta().deletion_timestamp.is_none() => match self.push(key, &*d, copy.as_deref()).await {
                Err(e @ Error::Downstream { .. }) => {
                    self.report_failure(key, d.meta().generation, &e).await;
                    Err(e)
                }
                r => r,
            },
            Some(d) => self.clean_up_deleted(key, d.meta(), copy.is_some()).await,
            None if !self.synced() => Ok(Next::After(WAIT_FOR_PEER)),
            None => self.clean_up_unassigned(key, copy.is_some()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(rv: &str, generation: i64) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.uid = Some("u".into());
        d.metadata.resource_version = Some(rv.into());
        d.metadata.generation = Some(generation);
        d
    }

    #[test]
    fn a_copy_is_checked_again_after_any_change_that_could_make_it_drift_and_not_after_its_status() {
        let upstream = deployment("10", 1);
        let copy = deployment("5", 1);
        let of = |u: &Deployment, share, c: &Deployment| Covered::of(&u.metadata, share, &c.metadata);
        let mark = of(&upstream, 2, &copy);
        assert!(mark.is_of(&upstream.metadata, 2, &copy.metadata));
        let mut status_only = deployment("6", 1);
        status_only.status = Some(Default::default());
        assert!(mark.is_of(&upstream.metadata, 2, &status_only.metadata), "a status update of the copy changes nothing checked");
        assert!(mark.is_of(&deployment("11", 1).metadata, 2, &copy.metadata), "nor one of the upstream object");
        assert!(!mark.is_of(&upstream.metadata, 3, &copy.metadata), "another share");
        assert!(!mark.is_of(&deployment("11", 2).metadata, 2, &copy.metadata), "the upstream spec was edited");
        assert!(!mark.is_of(&upstream.metadata, 2, &deployment("6", 2).metadata), "the copy's spec was edited");
        type Edit = fn(&mut ObjectMeta);
        let edits: [(&str, Edit); 3] = [
            ("labels", |m| m.labels = Some([("a".to_string(), "b".to_string())].into())),
            ("annotations", |m| m.annotations = Some([("a".to_string(), "b".to_string())].into())),
            ("uid", |m| m.uid = Some("v".into())),
        ];
        for (what, edit) in edits {
            let (mut u, mut c) = (upstream.clone(), copy.clone());
            edit(&mut u.metadata);
            edit(&mut c.metadata);
            assert!(!mark.is_of(&u.metadata, 2, &copy.metadata), "the upstream {what} changed");
            assert!(!mark.is_of(&upstream.metadata, 2, &c.metadata), "the copy's {what} changed");
            assert!(of(&u, 2, &c).is_of(&u.metadata, 2, &c.metadata));
        }
    }
}
