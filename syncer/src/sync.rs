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

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use placement_api::workload::{self, WorkloadKind};
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
use crate::queue::{self, Next};
use crate::{clients, status, transform};
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
    /// Every other kind of the table ([`placement_api::synced`]), in its order.
    companions: Vec<Side<DynamicObject>>,
    /// This syncer's namespaces downstream (labelled with its SyncTarget), by name.
    namespaces: Arc<Cache<Namespace, String>>,
    /// Which upstream namespace each downstream one holds.
    locators: Arc<Locators>,
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
    fn is_of(&self, upstream: &Deployment, share: i32, copy: &Deployment) -> bool {
        self.share == share && self.upstream.is_of(&upstream.metadata) && self.copy.is_of(&copy.metadata)
    }

    fn of(upstream: &Deployment, share: i32, copy: &Deployment) -> Self {
        Covered { share, upstream: Version::of(&upstream.metadata), copy: Version::of(&copy.metadata) }
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
            let (tx, rx) = mpsc::unbounded_channel();
            let target = &settings.sync_target;
            let assigned = watcher::Config::default().labels(&format!("{}={SYNC_STATE_SYNC}", sync_state_label(target)));
            let mine = watcher::Config::default().labels(&format!("{SYNC_TARGET_LABEL}={target}"));
            let wildcard = clients::workspace(&upstream, "*");
            let locators = Arc::new(Locators::default());
            let configs = [&assigned, &mine];
            let apis = [Api::all(wildcard.clone()), Api::all(downstream.clone())];
            let deployments = Side::spawn(Kind::Deployment, apis, configs, &locators, &tx);
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
            // A WorkloadPlacement has its workload's name: its changes queue the workload.
            let placements =
                cache::spawn(Api::all(wildcard), assigned, Kind::Deployment, Key::upstream, tx.clone(), "upstream workloadplacements");
            let upstream_client = upstream.clone();
            let syncer = Arc::new(Syncer {
                finalizer: syncer_finalizer(target),
                status_manager: status_field_manager(target),
                settings: settings.clone(),
                upstream,
                recorder: Recorder::new(downstream.clone(), format!("{FIELD_MANAGER}-{target}")),
                downstream,
                deployments,
                companions,
                namespaces,
                locators,
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
            let unpark = {
                let s = syncer.clone();
                let tx = tx.clone();
                crate::AbortOnDrop(tokio::spawn(async move {
                    loop {
                        s.reach.comes_back().await;
                        let keys: Vec<Key> = s.parked.iter().map(|k| k.clone()).collect();
                        tracing::info!(objects = keys.len(), "the cluster answers again; cleaning up what waited for it");
                        for k in keys {
                            s.parked.remove(&k);
                            let _ = tx.send(k);
                        }
                    }
                }))
            };
            let resync = {
                let s = syncer.clone();
                let tx = tx.clone();
                crate::AbortOnDrop(tokio::spawn(async move {
                    let mut tick = tokio::time::interval(s.settings.resync);
                    tick.tick().await;
                    loop {
                        tick.tick().await;
                        for k in s.keys() {
                            let _ = tx.send(k);
                        }
                        if let Err(e) = s.sweep_namespaces().await {
                            tracing::warn!(error = %e, "sweeping empty namespaces failed; trying again at the next resync");
                        }
                    }
                }))
            };
            drop(tx);
            queue::run(rx, CONCURRENCY, |key| {
                let s = syncer.clone();
                let span = tracing::info_span!("sync", object = %key);
                async move {
                    let started = std::time::Instant::now();
                    let result = s.reconcile(&key).await;
                    crate::metrics::observe(&s.settings.sync_target, started.elapsed(), result.as_ref().err().map(|e| e.category()));
                    result
                }
                .instrument(span)
            })
            .await;
            drop(resync);
            drop(unpark);
        }
        .instrument(span)
        .await
    }

    /// How many workloads are assigned to this cluster now.
    pub fn assigned(&self) -> usize {
        self.deployments.upstream.len()
    }

    /// Whether every watch, on both sides, has listed completely.
    fn synced(&self) -> bool {
        self.deployments.synced() && self.companions.iter().all(Side::synced) && self.placements.synced() && self.namespaces.synced()
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
        self.deployments.keys(l).chain(self.companions.iter().flat_map(move |s| s.keys(l))).chain(published)
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
            Kind::Deployment => self.reconcile_workload(key).await,
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
        let holds_copies = self.deployments.any_copy_in(key) || self.companions.iter().any(|s| self.any_companion_copy_in(s.kind, key));
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

    async fn reconcile_workload(&self, key: &Key) -> Result<Next, Error> {
        let copy = self.deployments.copy(key);
        let upstream = self.deployments.upstream.get(key);
        if upstream.as_ref().is_none_or(|d| d.metadata.deletion_timestamp.is_some()) {
            self.held.remove(key);
            self.covered.remove(key);
        }
        match upstream {
            Some(d) if d.metadata.deletion_timestamp.is_none() => match self.push(key, &d, copy.as_deref()).await {
                Err(e @ Error::Downstream { .. }) => {
                    self.report_failure(key, &d, &e).await;
                    Err(e)
                }
                r => r,
            },
            Some(d) => self.clean_up_deleted(key, &d, copy.is_some()).await,
            None if !self.synced() => Ok(Next::After(WAIT_FOR_PEER)),
            None => self.clean_up_unassigned(key, copy.is_some()).await,
        }
    }

    /// A companion ([`placement_api::synced`]): the copy says what the upstream object
    /// says, less what the cluster allocates for itself; what was added under the
    /// fields the syncer owns is removed; the copy's status goes up when the kind's
    /// does.
    async fn reconcile_companion(&self, key: &Key) -> Result<Next, Error> {
        let row = key.kind.row();
        let copy = self.copy_value(key);
        match self.upstream_value(key).await? {
            Some(obj) if !deleting(&obj) => {
                let mut desired = transform::downstream_object(&obj, key, &self.settings.sync_target, None);
                if key.kind == Kind::HorizontalPodAutoscaler {
                    if let Err(next) = self.divide_bounds(key, &obj, &mut desired) {
                        return Ok(next);
                    }
                }
                let upstream_version = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
                let version = (digest(&desired), upstream_version);
                let last = self.companion_covered.get(key).map(|v| v.clone());
                // What it should say changed: an update, applied even if the copy
                // covers it, to take out what is no longer said.
                let same_desired = last.as_ref().map(|(d, _)| *d == version.0);
                let covered = same_desired != Some(false) && copy.as_ref().is_some_and(|c| transform::covers(c, &desired));
                // Nothing changed upstream since the copy covered it last: it drifted.
                // After an upstream write (a relabel too), a copy the watch does not
                // show yet may be this syncer's own, just applied: it is applied again
                // rather than reported.
                let same_upstream = last.map(|v| v == version);
                let mut drift = match (&copy, same_upstream) {
                    _ if covered => None,
                    (Some(c), Some(true)) => Some(Drift::Changed(transform::drift(c, &desired, row.secret))),
                    (None, Some(true)) => Some(Drift::Gone),
                    _ => None,
                };
                if matches!(drift, Some(Drift::Gone)) && self.copy_is_there(key).await {
                    drift = None;
                }
                let (now, mut written) = match copy {
                    Some(c) if covered => (c, None),
                    _ => {
                        // A copy neither seen nor applied before may be someone else's
                        // object of the same name: it is applied without taking their
                        // fields, and left alone if it is theirs.
                        let force = copy.is_some() || same_desired.is_some();
                        let applied = match self.apply_copy(key, desired.clone(), force).await {
                            Ok(applied) => applied,
                            Err(Error::Downstream { source, .. }) if !force && is_conflict(&source) => {
                                match self.foreign(key, &source).await? {
                                    None => self.apply_copy(key, desired.clone(), true).await?,
                                    Some(cause) => return Ok(self.refuse(key, &obj, cause)),
                                }
                            }
                            Err(e) => return Err(e),
                        };
                        (to_value(&applied), Some(applied))
                    }
                };
                if self.refused.remove(key).is_some() {
                    tracing::info!("the companion applies on this cluster again");
                    self.requeue_followers(key);
                }
                // What someone added under the fields the syncer owns stays through an
                // apply; it is taken out too. This is checked every time: it also takes
                // out what the workspace removed, as a copy with a field more still
                // covers what it should say, and no apply removed it.
                if let Some((patched, lines)) = self.remove_extras(key, &now, &desired, row.owned).await? {
                    if same_desired == Some(true) && !lines.is_empty() {
                        if let Drift::Changed(all) = drift.get_or_insert_with(|| Drift::Changed(Vec::new())) {
                            all.extend(lines);
                        }
                    }
                    written = Some(patched);
                }
                self.companion_covered.insert(key.clone(), version);
                if let (Some(drift), Some(written)) = (drift, &written) {
                    self.report_copy_drift(key, written, drift);
                }
                if row.status_up {
                    let now = written.as_ref().map(to_value).unwrap_or(now);
                    self.report_companion_status(key, &obj, &now).await?;
                }
                Ok(Next::Done)
            }
            _ if !self.companions_synced() => Ok(Next::After(WAIT_FOR_PEER)),
            _ => {
                self.companion_covered.remove(key);
                if self.refused.remove(key).is_some() {
                    self.requeue_followers(key);
                }
                if let Some(next) = self.wait_for_cluster(key) {
                    return Ok(next);
                }
                self.delete_copy(key, copy.is_some()).await?;
                Ok(Next::Done)
            }
        }
    }

    /// Why the object at the copy's place is someone else's, after an apply that
    /// conflicted with their fields (`conflict`); `None` when it is this syncer's own
    /// copy (its `workload.flotilla.io/upstream` annotation names `key`), whose fields
    /// someone changed: drift, to be reverted.
    async fn foreign(&self, key: &Key, conflict: &kube::Error) -> Result<Option<String>, Error> {
        let ns = transform::downstream_namespace(key);
        let found = self.copy_api(key).get_metadata_opt(&key.name).await.map_err(downstream(format!(
            "reading {} {ns}/{}",
            key.kind.name(),
            key.name
        )))?;
        let claim = found.as_ref().and_then(|o| o.metadata.annotations.as_ref()?.get(UPSTREAM_ANNOTATION).cloned());
        if claim.as_deref() == Some(key.copy_annotation().as_str()) {
            return Ok(None);
        }
        let why = match conflict {
            kube::Error::Api(s) => s.message.clone(),
            e => e.to_string(),
        };
        Ok(Some(format!(
            "{} {ns}/{} exists on cluster {} and is not Flotilla's ({why})",
            key.kind.name(),
            key.name,
            self.settings.sync_target
        )))
    }

    /// Leaves companion `key` (`upstream`) unapplied because `cause`: says so in the
    /// entries of the WorkloadPlacements that list it, and in a Warning Event on it,
    /// and looks again in [`REFUSED_RETRY`] (the other object may go).
    fn refuse(&self, key: &Key, upstream: &Value, cause: String) -> Next {
        let first = self.refused.insert(key.clone(), cause.clone()).as_ref() != Some(&cause);
        if first {
            tracing::warn!(cause = %cause, "a companion cannot be applied on this cluster; leaving the object there alone");
            let involved = ObjectReference {
                api_version: Some(key.kind.api_version()),
                kind: Some(key.kind.name().into()),
                name: Some(key.name.clone()),
                namespace: Some(key.namespace.clone()),
                uid: upstream.pointer("/metadata/uid").and_then(Value::as_str).map(String::from),
                ..Default::default()
            };
            let message =
                format!("{cause}; delete or rename that object on cluster {}, and this one is applied there", self.settings.sync_target);
            self.upstream_events.warn_in(&key.workspace, &key.namespace, involved, REASON_COMPANION_REFUSED, message);
            self.requeue_followers(key);
        }
        Next::After(REFUSED_RETRY)
    }

    /// Queues the Deployments whose WorkloadPlacements list companion `key`, so their
    /// entries say whether it applies here.
    fn requeue_followers(&self, key: &Key) {
        let listed = format!("{}/{}", key.kind.name(), key.name);
        let here = self.placements.entries_where(|k, wp| {
            k.workspace == key.workspace
                && k.namespace == key.namespace
                && wp.status.as_ref().is_some_and(|s| s.companions.contains(&listed))
        });
        for k in here {
            let _ = self.requeue.send(k);
        }
    }

    /// This cluster's `CompanionsSynced` condition for a workload whose
    /// WorkloadPlacement is `wp`: False, naming each companion it lists that this
    /// cluster refused; none when it refused none, so that a workload whose companions
    /// all apply costs no write more than one without.
    fn companions_condition(&self, key: &Key, wp: &WorkloadPlacement, generation: Option<i64>) -> Option<Condition> {
        if self.refused.is_empty() {
            return None;
        }
        let listed = wp.status.as_ref().map(|s| s.companions.as_slice()).unwrap_or_default();
        let refused: Vec<String> = listed
            .iter()
            .filter_map(|l| {
                let (kind, name) = l.split_once('/')?;
                let kind = Kind::all().find(|k| k.name() == kind)?;
                self.refused.get(&Key::new(kind, &key.workspace, &key.namespace, name)).map(|c| format!("{} {name}: {}", kind.name(), *c))
            })
            .collect();
        (!refused.is_empty()).then(|| Condition {
            type_: CONDITION_COMPANIONS_SYNCED.into(),
            status: "False".into(),
            reason: REASON_COMPANION_REFUSED.into(),
            message: refused.join("; "),
            last_transition_time: now(),
            observed_generation: generation,
        })
    }

    /// Gives the copy of autoscaler `key` (`upstream`, made into `desired`) this
    /// cluster's part of its bounds, in proportion to this cluster's share of its
    /// target's replicas ([`transform::divide_bounds`]). When the target is not
    /// assigned here, the bounds stay whole; `Err`: the target is assigned here but
    /// its share is not known yet, so the copy waits.
    fn divide_bounds(&self, key: &Key, upstream: &Value, desired: &mut Value) -> Result<(), Next> {
        let Some(target) = upstream.pointer("/spec/scaleTargetRef/name").and_then(Value::as_str) else { return Ok(()) };
        let deployment = Key::new(Kind::Deployment, &key.workspace, &key.namespace, target);
        let Some(wp) = self.placements.get(&deployment) else {
            return match self.deployments.upstream.get(&deployment) {
                Some(_) => Err(Next::After(WAIT_FOR_PEER)),
                None => Ok(()),
            };
        };
        let shares: Vec<(&str, i32)> = wp.spec.clusters.iter().map(|c| (c.name.as_str(), c.replicas)).collect();
        transform::divide_bounds(desired, &shares, &self.settings.sync_target);
        Ok(())
    }

    /// The autoscalers assigned to this cluster that scale Deployment `key`: while
    /// there is one, the copy's replicas are the cluster's autoscaler's to set.
    fn autoscalers_of(&self, key: &Key) -> Vec<Key> {
        let Some(side) = self.companion(Kind::HorizontalPodAutoscaler) else { return Vec::new() };
        let scales = |h: &DynamicObject| {
            let target = h.data.pointer("/spec/scaleTargetRef").unwrap_or(&Value::Null);
            h.metadata.deletion_timestamp.is_none()
                && target.get("kind").and_then(Value::as_str) == Some("Deployment")
                && target.get("name").and_then(Value::as_str) == Some(key.name.as_str())
        };
        let mut found = side.upstream.entries_where(|k, h| k.workspace == key.workspace && k.namespace == key.namespace && scales(h));
        if let Some(f) = &self.settings.followers {
            let target = &self.settings.sync_target;
            let published = f.in_namespace(target, Kind::HorizontalPodAutoscaler, &key.workspace, &key.namespace);
            let more: Vec<Key> =
                published.into_iter().filter(|k| !found.contains(k) && f.get(k, target).is_some_and(|h| scales(&h))).collect();
            found.extend(more);
        }
        found
    }

    /// Reports the status of the copy of companion `key` (`copy`) upstream, in this
    /// cluster's annotation on `object` ([`placement_api::cluster_status_annotation`]),
    /// when it says something new. An empty status is not reported until the cluster
    /// has said something else before: most Services never have one.
    async fn report_companion_status(&self, key: &Key, object: &Value, copy: &Value) -> Result<(), Error> {
        let annotation = placement_api::cluster_status_annotation(&self.settings.sync_target);
        // A copy without a status has nothing to say yet (an apply's answer may not
        // carry it); what was reported stays.
        let Some(status) = copy.get("status").filter(|s| s.is_object()).cloned() else { return Ok(()) };
        let reported = object.pointer("/metadata/annotations").and_then(|a| a.get(&annotation)).and_then(Value::as_str);
        let now = status.to_string();
        match reported {
            Some(r) if r == now => return Ok(()),
            None if transform::is_empty_status(&status) => return Ok(()),
            _ => {}
        }
        let patch = json!({"metadata": {"annotations": {annotation: now}}});
        let api: Api<DynamicObject> =
            Api::namespaced_with(clients::workspace(&self.upstream, &key.workspace), &key.namespace, &key.kind.api_resource());
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(upstream(format!("reporting the status of {key} on cluster {}", self.settings.sync_target))(e)),
        }
    }

    /// Server-side applies a copy. Its namespace is applied only when the copy's apply
    /// finds it missing, so a new copy in a namespace that exists costs one request.
    /// Without `force`, a field another manager owns and sets otherwise fails the apply
    /// with a conflict: the first apply of a copy this syncer has no record of.
    /// Whether the downstream copy of `key` exists, asked of the cluster itself: a copy
    /// the watch does not show may be one this syncer applied a moment ago, while the
    /// watch was still listing (after a restart of the cluster or of the syncer). Only
    /// a copy that the cluster says is gone was deleted.
    async fn copy_is_there(&self, key: &Key) -> bool {
        matches!(self.copy_api(key).get_opt(&key.name).await, Ok(Some(_)))
    }

    async fn apply_copy(&self, key: &Key, desired: Value, force: bool) -> Result<DynamicObject, Error> {
        let ssa = if force { PatchParams::apply(FIELD_MANAGER).force() } else { PatchParams::apply(FIELD_MANAGER) };
        let ns = transform::downstream_namespace(key);
        let applying = || format!("applying {} {ns}/{}", key.kind.name(), key.name);
        match self.copy_api(key).patch(&key.name, &ssa, &Patch::Apply(&desired)).await {
            // An apply creates a missing object, so what is missing is the namespace.
            Err(e) if is_not_found(&e) => {}
            r => return r.map_err(downstream(applying())),
        }
        let body = transform::downstream_namespace_object(key, &self.settings.sync_target);
        match Api::<Namespace>::all(self.downstream.clone()).patch(&ns, &ssa, &Patch::Apply(body)).await {
            Ok(_) => {}
            // Another copy's apply created it just now.
            Err(e) if is_already_exists(&e) => {}
            Err(e) => return Err(downstream(format!("applying namespace {ns}"))(e)),
        }
        self.copy_api(key).patch(&key.name, &ssa, &Patch::Apply(&desired)).await.map_err(downstream(applying()))
    }

    async fn push(&self, key: &Key, d: &Deployment, copy: Option<&Deployment>) -> Result<Next, Error> {
        let target = &self.settings.sync_target;
        // The share comes with the WorkloadPlacement; the scheduler writes it first, but
        // the two watches may deliver in either order.
        let Some(wp) = self.placements.get(key) else { return Ok(Next::After(WAIT_FOR_PEER)) };
        let Some(share) = wp.spec.clusters.iter().find(|c| &c.name == target).map(|c| c.replicas) else {
            return Ok(Next::After(WAIT_FOR_PEER));
        };
        // Once the copy runs, an autoscaler on the cluster sets its replicas, and
        // what it set is what the copy should say. The autoscalers' bounds follow the
        // shares, which may have just changed: they are looked at again too (an
        // unchanged one costs no write).
        let autoscalers = self.autoscalers_of(key);
        let share = match copy.and_then(|c| c.spec.as_ref()?.replicas) {
            Some(scaled) if !autoscalers.is_empty() => scaled,
            _ => share,
        };
        for a in autoscalers {
            let _ = self.requeue.send(a);
        }
        if !d.metadata.finalizers.iter().flatten().any(|f| f == &self.finalizer) {
            // The scheduler's assignment carries it; a workload labelled some other
            // way (by hand, or before it did) gets it here.
            // finalizers merge as a set under a strategic merge patch, so this adds
            // ours to whatever is there now, with no resourceVersion to go stale while
            // the scheduler labels the same Deployment.
            let patch = json!({"metadata": {"finalizers": [self.finalizer]}});
            match self.upstream_api::<Deployment>(key).patch(&key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                Err(e) => return Err(upstream(format!("adding finalizer to {key}"))(e)),
            }
        }
        // Whether the copy last covered what it should say now: if it does not any
        // more, it drifted; if what it should say changed, it is an update.
        let mark = self.covered.get(key).map(|m| m.clone());
        let same_desired = mark.as_ref().map(|m| m.share == share && m.upstream.is_of(&d.metadata));
        let desired = || transform::downstream_object(&to_value(d), key, target, Some(share));
        let current = match copy {
            Some(c) if self.covers(key, d, share, c) => {
                // The copy's spec changed (the syncer's own writes leave no mark to
                // compare with), and still says all it should: someone added to it.
                let added = same_desired == Some(true) && mark.as_ref().is_some_and(|m| m.copy.generation != c.metadata.generation);
                match added {
                    false => c.clone(),
                    true => match self.remove_extras(key, &to_value(c), &desired(), &["spec"]).await {
                        Ok(None) => c.clone(),
                        Ok(Some((patched, lines))) => {
                            if !lines.is_empty() {
                                self.report_copy_drift(key, &patched, Drift::Changed(lines));
                            }
                            patched.try_parse::<Deployment>().unwrap_or_default()
                        }
                        Err(e) => {
                            // Retried with the mark it had, so the retry sees the edit.
                            if let Some(m) = mark {
                                self.covered.insert(key.clone(), m);
                            }
                            return Err(e);
                        }
                    },
                }
            }
            _ => {
                let desired = desired();
                let mut drift = match (copy, same_desired) {
                    (Some(c), Some(true)) => Some(Drift::Changed(transform::drift(&to_value(c), &desired, false))),
                    (None, Some(_)) => Some(Drift::Gone),
                    _ => None,
                };
                if matches!(drift, Some(Drift::Gone)) && self.copy_is_there(key).await {
                    drift = None;
                }
                self.covered.remove(key);
                // A failed write is retried with the mark it had, so the retry still
                // knows the drift for what it is.
                let restore = |e| {
                    if let Some(m) = mark.clone() {
                        self.covered.insert(key.clone(), m);
                    }
                    e
                };
                let mut applied = self.apply_copy(key, desired.clone(), true).await.map_err(restore)?;
                if let Some(Drift::Changed(lines)) = drift.as_mut() {
                    // What someone added stays through an apply; it is taken out too.
                    if let Some((patched, more)) =
                        self.remove_extras(key, &to_value(&applied), &desired, &["spec"]).await.map_err(restore)?
                    {
                        lines.extend(more);
                        applied = patched;
                    }
                }
                if let Some(drift) = drift {
                    self.report_copy_drift(key, &applied, drift);
                }
                applied.try_parse::<Deployment>().unwrap_or_default()
            }
        };
        let mut entry = status::cluster_entry(target, &current, now());
        if let Some(mut c) = self.companions_condition(key, &wp, d.metadata.generation) {
            // The transition time stays while the status does.
            let reported = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|e| &e.name == target));
            if let Some(old) = reported.and_then(|e| e.conditions.iter().find(|o| o.type_ == c.type_ && o.status == c.status)) {
                c.last_transition_time = old.last_transition_time.clone();
            }
            entry.conditions.push(c);
        }
        if let Some(left) = self.hold(key, &wp, &entry, share) {
            // The copy's next status update queues this key again, earlier.
            return Ok(Next::After(left));
        }
        self.report(key, &wp, Some(entry)).await
    }

    /// Removes from the copy of `key`, as `actual`, what `desired` does not say under
    /// the top-level fields `sections` ([`transform::extras`]), with one JSON patch:
    /// server-side apply never removes fields another manager added. Returns the copy
    /// as it is then, with a drift line for each field that is gone now (one the
    /// cluster defaulted again was no drift); `None` when there is nothing to remove.
    async fn remove_extras(
        &self,
        key: &Key,
        actual: &Value,
        desired: &Value,
        sections: &[&str],
    ) -> Result<Option<(DynamicObject, Vec<String>)>, Error> {
        let mut extras = transform::extras(actual, desired, sections);
        // What the cluster allocates or defaults for itself is never drift.
        extras.retain(|e| !key.kind.cluster_owns(&e.path));
        if extras.is_empty() {
            return Ok(None);
        }
        let ns = transform::downstream_namespace(key);
        let removing = || format!("removing what was added to {} {ns}/{}", key.kind.name(), key.name);
        // Last first, so that removing an item of a list leaves the places of the
        // items before it as they were.
        let ops: Vec<Value> = extras.iter().rev().map(|e| json!({"op": "remove", "path": e.pointer})).collect();
        let url = format!("{}/{}", DynamicObject::url_path(&key.kind.api_resource(), Some(&ns)), key.name);
        let request = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(serde_json::to_vec(&ops).unwrap_or_default())
            .map_err(|e| downstream(removing())(kube::Error::HttpError(e)))?;
        let patched: DynamicObject = self.downstream.request(request).await.map_err(downstream(removing()))?;
        let left: HashSet<String> = transform::extras(&to_value(&patched), desired, sections).into_iter().map(|e| e.pointer).collect();
        let lines = extras.into_iter().filter(|e| !left.contains(&e.pointer)).map(|e| format!("{} was added, removed", e.path)).collect();
        Ok(Some((patched, lines)))
    }

    /// Reports the drift of the copy of `key`, now `applied` again.
    fn report_copy_drift(&self, key: &Key, applied: &DynamicObject, drift: Drift) {
        let m = &applied.metadata;
        let involved = ObjectReference {
            api_version: Some(key.kind.api_version()),
            kind: Some(key.kind.name().into()),
            name: Some(key.name.clone()),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            ..Default::default()
        };
        let namespace = m.namespace.clone().unwrap_or_else(|| transform::downstream_namespace(key));
        self.report_drift(key, &namespace, involved, drift);
    }

    /// Whether `copy` already says everything the syncer would write for `upstream`
    /// with `share` replicas ([`transform::covers`]). Remembered per key until either
    /// side changes in a way that could matter ([`Covered`]).
    fn covers(&self, key: &Key, upstream: &Deployment, share: i32, copy: &Deployment) -> bool {
        if self.covered.get(key).is_some_and(|m| m.is_of(upstream, share, copy)) {
            return true;
        }
        let desired = transform::downstream_object(&to_value(upstream), key, &self.settings.sync_target, Some(share));
        let covered = transform::covers(&to_value(copy), &desired);
        if covered {
            self.covered.insert(key.clone(), Covered::of(upstream, share, copy));
        } else {
            self.covered.remove(key);
        }
        covered
    }

    /// How much longer the changed `entry` of `key` waits before it is written: up to
    /// [`OBSERVE_GRACE`] while the cluster has not observed the copy, then up to
    /// [`PROGRESS_HOLD`] from the first change held while the copy rolls out, and past
    /// that until the syncer's progress budget has a token. `None` when it is to be
    /// written now (a copy the workload model calls settled always is: its rollout is
    /// over or stalled), or has nothing new to say.
    fn hold(&self, key: &Key, wp: &WorkloadPlacement, entry: &ClusterSyncStatus, share: i32) -> Option<Duration> {
        let target = &self.settings.sync_target;
        let current = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|c| &c.name == target));
        let kind = WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind).unwrap_or(WorkloadKind::Deployment);
        if workload::copy_state(kind, entry, share).settled() || current.is_some_and(|c| status::same_report(c, entry)) {
            self.held.remove(key);
            return None;
        }
        let limit = if entry.observed { PROGRESS_HOLD } else { OBSERVE_GRACE };
        let since = *self.held.entry(key.clone()).or_insert_with(std::time::Instant::now);
        let left = limit.saturating_sub(since.elapsed());
        if !left.is_zero() {
            return Some(left);
        }
        if !self.progress.take() {
            crate::metrics::progress_deferred(target);
            return Some(PROGRESS_HOLD);
        }
        self.held.remove(key);
        None
    }

    /// Writes this cluster's entry of the WorkloadPlacement status, if it changed. The
    /// entry is all a syncer writes there: the fields derived from all entries are the
    /// status aggregator's.
    async fn report(&self, key: &Key, wp: &WorkloadPlacement, entry: Option<ClusterSyncStatus>) -> Result<Next, Error> {
        let target = &self.settings.sync_target;
        let current = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|c| &c.name == target));
        let unchanged = match (current, &entry) {
            (Some(a), Some(b)) => status::same_report(a, b),
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return Ok(Next::Done);
        }
        let api: Api<WorkloadPlacement> = self.upstream_api(key);
        let written = match entry {
            // The entry is this syncer's own field of the status: applied, it never
            // conflicts with the other syncers, the scheduler or the aggregator.
            Some(entry) => {
                clients::apply_placement_status(&api, &key.name, &self.status_manager, json!({"clusters": [entry]})).await.map(drop)
            }
            // Removal is rare (an unassignment) and must work whoever wrote the entry,
            // so it is a replace guarded by the resourceVersion it was computed from.
            None => {
                let mut next = wp.clone();
                next.status = Some(status::with_entry(wp, target, None));
                api.replace_status(&key.name, &PostParams::default(), &next).await.map(drop)
            }
        };
        match written {
            Ok(()) => Ok(Next::Done),
            // Another writer was first; the watch brings its version.
            Err(e) if is_conflict(&e) => Ok(Next::After(Duration::from_millis(50))),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(upstream(format!("writing the status of WorkloadPlacement {}/{}/{}", key.workspace, key.namespace, key.name))(e)),
        }
    }

    /// Reports in this cluster's entry that the cluster could not be synced, keeping
    /// the last counts it reported. Best effort: the error is also retried and logged.
    async fn report_failure(&self, key: &Key, d: &Deployment, e: &Error) {
        let Some(wp) = self.placements.get(key) else { return };
        let target = &self.settings.sync_target;
        let mut entry = wp
            .status
            .as_ref()
            .and_then(|s| s.clusters.iter().find(|c| &c.name == target))
            .cloned()
            .unwrap_or_else(|| ClusterSyncStatus { name: target.clone(), ..Default::default() });
        let message = format!(
            "generation {} could not be synced to cluster {target}: {e}; the syncer retries with backoff",
            d.metadata.generation.unwrap_or(0)
        );
        let failed = Condition {
            type_: CONDITION_SYNCED.into(),
            status: "False".into(),
            reason: REASON_DOWNSTREAM_ERROR.into(),
            message,
            last_transition_time: now(),
            observed_generation: d.metadata.generation,
        };
        status::set_condition(&mut entry.conditions, failed);
        entry.last_sync_time = Some(now());
        if let Err(e) = self.report(key, &wp, Some(entry)).await {
            tracing::debug!(error = %e, "could not report the failure upstream");
        }
    }

    async fn clean_up_deleted(&self, key: &Key, d: &Deployment, has_copy: bool) -> Result<Next, Error> {
        // The watch of the copies can be a few milliseconds behind this syncer's own
        // writes: a copy applied just before the deletion may not be in it yet. The
        // finalizer goes only once the cluster itself says there is no copy (unless it
        // does not answer: the finalizer never waits for an unreachable cluster).
        let has_copy = has_copy || (self.reach.unreachable().is_none() && self.copy_exists(key).await?);
        if has_copy {
            self.delete_copy(key, true).await?;
            // The copy's DELETED event queues this key again.
            return Ok(Next::Done);
        }
        self.release_finalizer(key, d).await
    }

    /// Whether the cluster holds a copy of `key`, read from the cluster, not the watch.
    async fn copy_exists(&self, key: &Key) -> Result<bool, Error> {
        match self.copy_api(key).get_metadata_opt(&key.name).await {
            Ok(found) => Ok(found.is_some()),
            Err(e) => Err(downstream(format!("reading {} {}/{}", key.kind.name(), transform::downstream_namespace(key), key.name))(e)),
        }
    }

    async fn clean_up_unassigned(&self, key: &Key, has_copy: bool) -> Result<Next, Error> {
        if has_copy {
            // The finalizer first: if the syncer stops between the two steps, the copy
            // is still there to bring it back here.
            match self.upstream_api::<Deployment>(key).get_opt(&key.name).await {
                Ok(Some(d)) if !self.assigned_here(&d) => {
                    // A conflict is tried again with the copy still there: once it is
                    // gone, nothing would bring this key back to release the finalizer.
                    if let next @ Next::After(_) = self.release_finalizer(key, &d).await? {
                        return Ok(next);
                    }
                }
                Ok(Some(_)) => return Ok(Next::After(WAIT_FOR_PEER)),
                Ok(None) => {}
                Err(e) if is_forbidden(&e) => {}
                Err(e) => return Err(upstream(format!("reading {key}"))(e)),
            }
        }
        // The finalizer never waits for the cluster: it only holds a deletion for the
        // clusters a workload is assigned to.
        if let Some(next) = self.wait_for_cluster(key) {
            return Ok(next);
        }
        if has_copy {
            if let Ok(Some(wp)) = self.upstream_api::<WorkloadPlacement>(key).get_opt(&key.name).await {
                // Likewise for the entry: a removal that lost a race is tried again.
                if let next @ Next::After(_) = self.report(key, &wp, None).await? {
                    return Ok(next);
                }
            }
        }
        self.delete_copy(key, has_copy).await?;
        Ok(Next::Done)
    }

    /// `Some` when the cluster does not answer the heartbeat's probe: `key` is parked
    /// until it does (see the module's documentation), and nothing is written for it.
    fn wait_for_cluster(&self, key: &Key) -> Option<Next> {
        let why = self.reach.unreachable()?;
        self.parked.insert(key.clone());
        // The cluster may have come back since the look above, after the keys parked
        // before this one were handed back.
        if self.reach.unreachable().is_none() {
            self.parked.remove(key);
            return Some(Next::After(Duration::ZERO));
        }
        tracing::debug!(reason = %why, "the cluster does not answer; its cleanup waits until it does");
        Some(Next::Done)
    }

    fn assigned_here(&self, d: &Deployment) -> bool {
        let label = sync_state_label(&self.settings.sync_target);
        d.metadata.labels.as_ref().and_then(|l| l.get(&label)).is_some_and(|v| v == SYNC_STATE_SYNC)
            && d.metadata.deletion_timestamp.is_none()
    }

    async fn release_finalizer(&self, key: &Key, d: &Deployment) -> Result<Next, Error> {
        let finalizers = d.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.contains(&self.finalizer) {
            return Ok(Next::Done);
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| **f != self.finalizer).collect();
        let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": d.metadata.resource_version}});
        match self.upstream_api::<Deployment>(key).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(e) if is_conflict(&e) => Ok(Next::After(Duration::ZERO)),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(upstream(format!("releasing the finalizer of {key}"))(e)),
        }
    }

    /// Deletes the copy of `key` (if `has_copy`), then its namespace if nothing else of
    /// ours is in it or on its way there.
    async fn delete_copy(&self, key: &Key, has_copy: bool) -> Result<(), Error> {
        let ns = transform::downstream_namespace(key);
        if has_copy {
            match self.copy_api(key).delete(&key.name, &DeleteParams::background()).await {
                Ok(_) => tracing::info!(namespace = %ns, kind = key.kind.name(), "deleted the downstream copy"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(downstream(format!("deleting {} {ns}/{}", key.kind.name(), key.name))(e)),
            }
        }
        let in_use = self.keys().any(|k| &k != key && k.workspace == key.workspace && k.namespace == key.namespace);
        if !in_use {
            self.delete_namespace(&ns).await?;
        }
        Ok(())
    }

    async fn delete_namespace(&self, ns: &str) -> Result<(), Error> {
        match Api::<Namespace>::all(self.downstream.clone()).delete(ns, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(namespace = %ns, "deleted the empty downstream namespace"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(downstream(format!("deleting namespace {ns}"))(e)),
        }
        Ok(())
    }

    /// Deletes this cluster's Flotilla namespaces that nothing assigned maps to and
    /// nothing of ours is in: what two copies deleted at once, or a syncer stopped
    /// between creating a namespace and the copy in it, left behind.
    async fn sweep_namespaces(&self) -> Result<(), Error> {
        if !self.synced() {
            return Ok(());
        }
        let in_use: HashSet<String> = self.keys().map(|k| transform::downstream_namespace(&k)).collect();
        // Ours: a namespace whose locator the syncer knows (a locator rewritten
        // downstream is not believed, and such a namespace is left alone).
        let unused = self.namespaces.values_where(|name| self.locators.get(name).is_some() && !in_use.contains(name));
        for ns in unused {
            if ns.metadata.deletion_timestamp.is_none() {
                self.delete_namespace(ns.metadata.name.as_deref().unwrap_or_default()).await?;
            }
        }
        Ok(())
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
        let mark = Covered::of(&upstream, 2, &copy);
        assert!(mark.is_of(&upstream, 2, &copy));
        let mut status_only = deployment("6", 1);
        status_only.status = Some(Default::default());
        assert!(mark.is_of(&upstream, 2, &status_only), "a status update of the copy changes nothing checked");
        assert!(mark.is_of(&deployment("11", 1), 2, &copy), "nor one of the upstream object");
        assert!(!mark.is_of(&upstream, 3, &copy), "another share");
        assert!(!mark.is_of(&deployment("11", 2), 2, &copy), "the upstream spec was edited");
        assert!(!mark.is_of(&upstream, 2, &deployment("6", 2)), "the copy's spec was edited");
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
            assert!(!mark.is_of(&u, 2, &copy), "the upstream {what} changed");
            assert!(!mark.is_of(&upstream, 2, &c), "the copy's {what} changed");
            assert!(Covered::of(&u, 2, &c).is_of(&u, 2, &c));
        }
    }
}
