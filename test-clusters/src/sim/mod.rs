//! The pure core of a simulated Kubernetes cluster.
//!
//! Given everything a cluster holds ([`ClusterState`]: nodes, deployments, replicasets,
//! pods) and the time, [`Simulator::reconcile`] returns the [`Action`]s that
//! kube-controller-manager's deployment and replicaset controllers, kube-scheduler and the
//! nodes' kubelets would take, plus when to look again. It performs no I/O: a driver lists or
//! watches the objects from a Kubernetes API, applies the actions through the same API, and
//! calls `reconcile` again whenever something changed or the wake-up time has come. Actions
//! are idempotent, so reconciling a state that does not reflect earlier actions yet is safe.
//!
//! Each controller is a pure function in its own module and can be used alone:
//! [`deployment::sync`], [`replicaset::sync`], [`scheduler::schedule`], [`kubelet::sync`],
//! [`nodes::nodes`]. The [`Simulator`] runs them in that order over one snapshot, and
//! remembers what a real controller remembers between syncs: the pods it asked for and not yet
//! seen (the replicaset controller's expectations), the bindings not yet seen (the scheduler's
//! assumed pods), and the state of its pod-name generator.
//!
//! Timestamps written into objects are whole seconds, the precision `metav1.Time` keeps.

pub mod action;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod events;
pub mod job;
pub mod kubelet;
pub mod logs;
pub mod names;
pub mod nodes;
pub mod pod;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod template_hash;
pub mod volumes;

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

pub use action::{Action, Kind, Object, ObjectRef};
pub use names::{NameSource, SeededNames};

use crate::config::ClusterDef;
use events::Recorder;

/// Everything the simulation reads: the objects of one cluster, all namespaces.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterState {
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Deployments.
    pub deployments: Vec<Deployment>,
    /// ReplicaSets.
    pub replicasets: Vec<ReplicaSet>,
    /// StatefulSets.
    pub statefulsets: Vec<StatefulSet>,
    /// DaemonSets.
    pub daemonsets: Vec<DaemonSet>,
    /// PersistentVolumeClaims.
    pub claims: Vec<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Vec<PersistentVolume>,
    /// StorageClasses.
    pub classes: Vec<StorageClass>,
    /// Jobs.
    pub jobs: Vec<Job>,
    /// CronJobs.
    pub cronjobs: Vec<CronJob>,
    /// Pods.
    pub pods: Vec<Pod>,
}

/// The outcome of one reconcile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reconciled {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// Reconcile again at this time even if nothing changes (a pod finishing its startup
    /// delay, a pod becoming available after `minReadySeconds`, a progress deadline).
    pub next_wakeup: Option<Timestamp>,
}

/// How long a binding may stay invisible in the input before the scheduler stops assuming it
/// happened and schedules the pod again.
pub const ASSUME_TIMEOUT: SignedDuration = SignedDuration::from_secs(30);

#[derive(Debug, Clone, Default)]
struct Expectation {
    /// Pod names asked for and not yet seen.
    creates: BTreeSet<String>,
    /// Pod uids asked to be deleted and still seen.
    deletes: BTreeSet<String>,
    since: Option<Timestamp>,
}

/// How long a quiet answer is trusted without looking again, as the controllers' periodic
/// resync would.
const QUIET_FOR: SignedDuration = SignedDuration::from_secs(10);

/// A Deployment or ReplicaSet whose last sync had nothing to do: a fingerprint of what it
/// read, and until when the same inputs give the same answer.
#[derive(Debug, Clone)]
struct Quiet {
    inputs: u64,
    until: Timestamp,
    /// The sync's own wake-up, if it asked for one.
    wake_at: Option<Timestamp>,
}

/// The fingerprint of a sync's inputs: the uid and resourceVersion of every object it
/// reads, in order, plus `extra`. `None` when an object has no resourceVersion (state built
/// by hand rather than read from an API), which is never taken as unchanged.
fn fingerprint<'a>(objects: impl IntoIterator<Item = &'a ObjectMeta>, extra: impl Hash) -> Option<u64> {
    let mut h = DefaultHasher::new();
    for m in objects {
        m.uid.hash(&mut h);
        m.resource_version.as_deref()?.hash(&mut h);
    }
    extra.hash(&mut h);
    Some(h.finish())
}

/// One simulated cluster: its definition and what its controllers remember between syncs.
pub struct Simulator {
    def: ClusterDef,
    names: Box<dyn NameSource + Send>,
    /// By ReplicaSet uid.
    expectations: BTreeMap<String, Expectation>,
    /// Pod key → (node, when bound).
    assumed: BTreeMap<String, (String, Timestamp)>,
    /// Pod uid → the exact moment its kubelet first wrote its status.
    started: BTreeMap<String, Timestamp>,
    /// Claims already told that their StorageClass is missing.
    warned_claims: BTreeSet<String>,
    /// By Deployment or ReplicaSet uid: the ones with nothing to do, so that a cluster of
    /// thousands of settled Deployments does not recompute each of them on every change.
    quiet: HashMap<String, Quiet>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("cluster", &self.def.name)
            .field("expectations", &self.expectations)
            .field("assumed", &self.assumed)
            .finish()
    }
}

impl Simulator {
    /// A simulator whose pod names are seeded from the cluster name, so they are
    /// reproducible run to run yet differ between clusters.
    pub fn new(def: ClusterDef) -> Self {
        let names = SeededNames::from_seed_text(&def.name);
        Simulator::with_names(def, names)
    }

    /// A simulator with its own source of pod-name suffixes.
    pub fn with_names(def: ClusterDef, names: impl NameSource + Send + 'static) -> Self {
        Simulator {
            def,
            names: Box::new(names),
            expectations: BTreeMap::new(),
            assumed: BTreeMap::new(),
            started: BTreeMap::new(),
            warned_claims: BTreeSet::new(),
            quiet: HashMap::new(),
        }
    }

    /// The cluster definition.
    pub fn def(&self) -> &ClusterDef {
        &self.def
    }

    /// The Node objects the definition calls for (see [`nodes::nodes`]).
    pub fn nodes(&self, now: Timestamp) -> Vec<Node> {
        nodes::nodes(&self.def, now)
    }

    /// Tells the simulator that the driver could not apply an action, so it stops waiting
    /// for its effect (a pod create or delete, a binding) and may ask again.
    pub fn forget(&mut self, action: &Action) {
        match action {
            Action::Create(Object::Pod(p)) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                if let Some(uid) = pod::controller_uid(&p.metadata) {
                    if let Some(e) = self.expectations.get_mut(uid) {
                        e.creates.remove(&name);
                    }
                }
            }
            Action::Delete { target, .. } if target.kind == Kind::Pod => {
                if let Some(uid) = &target.uid {
                    for e in self.expectations.values_mut() {
                        e.deletes.remove(uid);
                    }
                }
            }
            Action::Bind { pod, .. } => {
                self.assumed.remove(&format!("{}/{}", pod.namespace.as_deref().unwrap_or_default(), pod.name));
            }
            _ => {}
        }
    }

    /// Works out what the cluster's controllers, scheduler and kubelets do next.
    pub fn reconcile(&mut self, state: &ClusterState, now: Timestamp) -> Reconciled {
        let mut out = Reconciled::default();
        let mut rec = Recorder::new(now);
        let wake = |t: Option<Timestamp>, out: &mut Reconciled| {
            if let Some(t) = t {
                out.next_wakeup = Some(out.next_wakeup.map_or(t, |w| w.min(t)));
            }
        };

        // Nodes: register the ones the definition has and the state lacks.
        let present: BTreeSet<&str> = state.nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
        for node in nodes::nodes(&self.def, now) {
            if !present.contains(node.metadata.name.as_deref().unwrap_or_default()) {
                out.actions.push(Action::Create(Object::Node(Box::new(node))));
            }
        }

        self.observe(state, now);

        let pods_by_owner = group_by_controller(&state.pods);
        let rs_by_owner = group_by_controller(&state.replicasets);

        // Deployment controller.
        let mut deployments: Vec<&Deployment> = state.deployments.iter().collect();
        deployments.sort_by(|a, b| by_namespace_and_name(&a.metadata, &b.metadata));
        let mut rs_names: Option<BTreeMap<Option<&str>, BTreeSet<&str>>> = None;
        for d in deployments {
            let replica_sets: Vec<&ReplicaSet> =
                d.metadata.uid.as_deref().and_then(|uid| rs_by_owner.get(uid)).cloned().unwrap_or_default();
            let pods: Vec<&Pod> = replica_sets
                .iter()
                .filter_map(|rs| rs.metadata.uid.as_deref())
                .flat_map(|uid| pods_by_owner.get(uid).cloned().unwrap_or_default())
                .collect();
            let uid = d.metadata.uid.clone().unwrap_or_default();
            let inputs = fingerprint(
                std::iter::once(&d.metadata).chain(replica_sets.iter().map(|rs| &rs.metadata)).chain(pods.iter().map(|p| &p.metadata)),
                (),
            );
            if let Some(wake_at) = self.still_quiet(&uid, inputs, now) {
                wake(wake_at, &mut out);
                continue;
            }
            let names = rs_names.get_or_insert_with(|| {
                let mut by_ns: BTreeMap<Option<&str>, BTreeSet<&str>> = BTreeMap::new();
                for rs in &state.replicasets {
                    by_ns.entry(rs.metadata.namespace.as_deref()).or_default().extend(rs.metadata.name.as_deref());
                }
                by_ns
            });
            let taken_names = names.get(&d.metadata.namespace.as_deref()).cloned().unwrap_or_default();
            let input = deployment::DeploymentInput { deployment: d, replica_sets, pods, taken_names };
            let result = deployment::sync(&input, now, &mut rec);
            self.remember(uid, inputs, result.actions.is_empty(), result.wake_at, now);
            out.actions.extend(result.actions);
            wake(result.wake_at, &mut out);
        }

        // Replicaset controller. The pod names taken per namespace are gathered only when
        // some ReplicaSet has something to do.
        let mut taken: Option<BTreeMap<Option<String>, BTreeSet<String>>> = None;
        let mut replicasets: Vec<&ReplicaSet> = state.replicasets.iter().collect();
        replicasets.sort_by(|a, b| by_namespace_and_name(&a.metadata, &b.metadata));
        for rs in replicasets {
            let uid = rs.metadata.uid.clone().unwrap_or_default();
            let pods = pods_by_owner.get(uid.as_str()).cloned().unwrap_or_default();
            let related_pods = match pod::controller_uid(&rs.metadata).and_then(|owner| rs_by_owner.get(owner)) {
                Some(siblings) => siblings
                    .iter()
                    .filter_map(|s| s.metadata.uid.as_deref())
                    .flat_map(|u| pods_by_owner.get(u).cloned().unwrap_or_default())
                    .collect(),
                None => Vec::new(),
            };
            let manage = self.expectations.get(&uid).is_none_or(|e| e.creates.is_empty() && e.deletes.is_empty());
            let inputs = fingerprint(
                std::iter::once(&rs.metadata).chain(pods.iter().map(|p| &p.metadata)).chain(related_pods.iter().map(|p| &p.metadata)),
                manage,
            );
            if let Some(wake_at) = self.still_quiet(&uid, inputs, now) {
                wake(wake_at, &mut out);
                continue;
            }
            let input = replicaset::ReplicaSetInput { replica_set: rs, pods, related_pods, manage };
            let taken = taken.get_or_insert_with(|| pod_names_by_namespace(&state.pods));
            let names_taken = taken.entry(rs.metadata.namespace.clone()).or_default();
            let result = replicaset::sync(&input, now, self.names.as_mut(), names_taken, &mut rec);
            self.remember(uid.clone(), inputs, result.actions.is_empty(), result.wake_at, now);
            self.expect(uid, result.created, result.deleted, now);
            out.actions.extend(result.actions);
            wake(result.wake_at, &mut out);
        }

        // StatefulSet controller.
        for set in &state.statefulsets {
            let uid = set.metadata.uid.as_deref().unwrap_or_default();
            let pods = pods_by_owner.get(uid).cloned().unwrap_or_default();
            let ns = set.metadata.namespace.as_deref();
            let claims = state
                .claims
                .iter()
                .filter(|c| c.metadata.namespace.as_deref() == ns)
                .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
                .collect();
            let input = statefulset::StatefulSetInput { set, pods, claims };
            let result = statefulset::sync(&input, now, &mut rec);
            out.actions.extend(result.actions);
            wake(result.wake_at, &mut out);
        }

        // DaemonSet controller.
        for set in &state.daemonsets {
            let uid = set.metadata.uid.clone().unwrap_or_default();
            let pods = pods_by_owner.get(uid.as_str()).cloned().unwrap_or_default();
            let manage = self.expectations.get(&uid).is_none_or(|e| e.creates.is_empty() && e.deletes.is_empty());
            let taken = taken.get_or_insert_with(|| pod_names_by_namespace(&state.pods));
            let names_taken = taken.entry(set.metadata.namespace.clone()).or_default();
            let input = daemonset::DaemonSetInput { set, pods, nodes: &state.nodes, manage };
            let result = daemonset::sync(&input, now, self.names.as_mut(), names_taken, &mut rec);
            self.expect(uid, result.created, result.deleted, now);
            out.actions.extend(result.actions);
            wake(result.wake_at, &mut out);
        }

        // CronJob controller.
        let jobs_by_owner = group_by_controller(&state.jobs);
        for cj in &state.cronjobs {
            let uid = cj.metadata.uid.clone().unwrap_or_default();
            let jobs = jobs_by_owner.get(uid.as_str()).cloned().unwrap_or_default();
            let result = cronjob::sync(cj, &jobs, now, &mut rec);
            out.actions.extend(result.actions);
            wake(result.wake_at, &mut out);
        }

        // Job controller.
        let mut jobs: Vec<&Job> = state.jobs.iter().collect();
        jobs.sort_by(|a, b| by_namespace_and_name(&a.metadata, &b.metadata));
        for j in jobs {
            let uid = j.metadata.uid.clone().unwrap_or_default();
            let pods = pods_by_owner.get(uid.as_str()).cloned().unwrap_or_default();
            let manage = self.expectations.get(&uid).is_none_or(|e| e.creates.is_empty() && e.deletes.is_empty());
            let inputs = fingerprint(std::iter::once(&j.metadata).chain(pods.iter().map(|p| &p.metadata)), manage);
            if let Some(wake_at) = self.still_quiet(&uid, inputs, now) {
                wake(wake_at, &mut out);
                continue;
            }
            let taken = taken.get_or_insert_with(|| pod_names_by_namespace(&state.pods));
            let names_taken = taken.entry(j.metadata.namespace.clone()).or_default();
            let input = job::JobInput { job: j, pods, manage };
            let result = job::sync(&input, now, self.names.as_mut(), names_taken, &mut rec);
            self.remember(uid.clone(), inputs, result.actions.is_empty(), result.wake_at, now);
            self.expect(uid, result.created, result.deleted, now);
            out.actions.extend(result.actions);
            wake(result.wake_at, &mut out);
        }

        // Scheduler.
        let assumed: BTreeMap<String, String> = self.assumed.iter().map(|(k, (node, _))| (k.clone(), node.clone())).collect();
        let scheduled = scheduler::schedule(&state.nodes, &state.pods, &assumed, now, &mut rec);
        for (key, node) in scheduled.bindings {
            self.assumed.insert(key, (node, now));
        }
        out.actions.extend(scheduled.actions);

        // Volumes: after the scheduler, which binds the pods that wait for them.
        let input = volumes::VolumesInput { claims: &state.claims, volumes: &state.volumes, classes: &state.classes, pods: &state.pods };
        out.actions.extend(volumes::sync(&input, &mut self.warned_claims, &mut rec));

        // Kubelets.
        let kubelets =
            kubelet::sync(&state.nodes, &state.pods, &self.started, self.def.startup_delay, &self.def.failing_images, now, &mut rec);
        self.started.extend(kubelets.started.into_iter().map(|uid| (uid, now)));
        out.actions.extend(kubelets.actions);
        wake(kubelets.wake_at, &mut out);

        // Waiting on expectations or assumed bindings that time out also needs a wake-up.
        for e in self.expectations.values() {
            wake(e.since.map(|s| s + replicaset::EXPECTATIONS_TIMEOUT), &mut out);
        }
        for (_, since) in self.assumed.values() {
            wake(Some(*since + ASSUME_TIMEOUT), &mut out);
        }
        out
    }

    /// Notes the pods a controller of `uid` asked for and asked to delete, so that it
    /// waits until it sees them (the controllers' expectations).
    fn expect(&mut self, uid: String, created: Vec<String>, deleted: Vec<String>, now: Timestamp) {
        if !created.is_empty() || !deleted.is_empty() {
            let e = self.expectations.entry(uid).or_default();
            e.creates.extend(created);
            e.deletes.extend(deleted);
            e.since = Some(now);
        }
    }

    /// When the Deployment or ReplicaSet `uid` last had nothing to do with the same
    /// inputs, and that answer still holds at `now`: `Some` of the wake-up that sync asked
    /// for. A quiet answer past [`QUIET_FOR`] is looked at again on the next reconcile
    /// (at the latest the driver's periodic one), not woken for.
    fn still_quiet(&self, uid: &str, inputs: Option<u64>, now: Timestamp) -> Option<Option<Timestamp>> {
        let q = self.quiet.get(uid)?;
        (inputs == Some(q.inputs) && now < q.until).then_some(q.wake_at)
    }

    /// Keeps a sync's answer when it had nothing to do, until its own wake-up or
    /// [`QUIET_FOR`], whichever comes first; forgets it otherwise.
    fn remember(&mut self, uid: String, inputs: Option<u64>, idle: bool, wake_at: Option<Timestamp>, now: Timestamp) {
        match inputs.filter(|_| idle) {
            Some(inputs) => {
                let until = wake_at.map_or(now + QUIET_FOR, |w| w.min(now + QUIET_FOR));
                self.quiet.insert(uid, Quiet { inputs, until, wake_at });
            }
            None => {
                self.quiet.remove(&uid);
            }
        }
    }

    /// Drops expectations and assumptions the state now shows fulfilled, or that timed out.
    fn observe(&mut self, state: &ClusterState, now: Timestamp) {
        let pod_names: BTreeSet<(&str, &str)> = state.pods.iter().map(namespace_and_name).collect();
        let pod_uids: BTreeSet<&str> = state.pods.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
        // The namespace of each object that creates pods (ReplicaSets and Jobs), by uid.
        let owners: BTreeMap<&str, &str> = state
            .replicasets
            .iter()
            .map(|rs| &rs.metadata)
            .chain(state.jobs.iter().map(|j| &j.metadata))
            .chain(state.daemonsets.iter().map(|d| &d.metadata))
            .filter_map(|m| Some((m.uid.as_deref()?, m.namespace.as_deref().unwrap_or_default())))
            .collect();
        self.expectations.retain(|uid, e| {
            let Some(&ns) = owners.get(uid.as_str()) else {
                return false;
            };
            e.creates.retain(|name| !pod_names.contains(&(ns, name.as_str())));
            e.deletes.retain(|uid| pod_uids.contains(uid.as_str()));
            let fresh = e.since.is_some_and(|s| now < s + replicaset::EXPECTATIONS_TIMEOUT);
            fresh && !(e.creates.is_empty() && e.deletes.is_empty())
        });
        let by_key: HashMap<(&str, &str), &Pod> =
            if self.assumed.is_empty() { HashMap::new() } else { state.pods.iter().map(|p| (namespace_and_name(p), p)).collect() };
        self.assumed.retain(|key, (_, since)| {
            let pod = key.split_once('/').and_then(|k| by_key.get(&k));
            let still_unbound = pod.is_some_and(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty));
            still_unbound && now < *since + ASSUME_TIMEOUT
        });
        let running: BTreeSet<&str> =
            state.pods.iter().filter(|p| pod::phase(p) == "Running").filter_map(|p| p.metadata.uid.as_deref()).collect();
        // Only pods still starting need their start moment.
        self.started.retain(|uid, _| pod_uids.contains(uid.as_str()) && !running.contains(uid.as_str()));
        // Quiet answers of objects that are gone.
        if self.quiet.len() > state.deployments.len() + state.replicasets.len() + state.jobs.len() {
            let live: BTreeSet<&str> = state
                .deployments
                .iter()
                .map(|d| &d.metadata)
                .chain(state.replicasets.iter().map(|rs| &rs.metadata))
                .chain(state.jobs.iter().map(|j| &j.metadata))
                .filter_map(|m| m.uid.as_deref())
                .collect();
            self.quiet.retain(|uid, _| live.contains(uid.as_str()));
        }
    }
}

/// The pod names taken in each namespace.
fn pod_names_by_namespace(pods: &[Pod]) -> BTreeMap<Option<String>, BTreeSet<String>> {
    let mut by_ns: BTreeMap<Option<String>, BTreeSet<String>> = BTreeMap::new();
    for p in pods {
        by_ns.entry(p.metadata.namespace.clone()).or_default().insert(p.metadata.name.clone().unwrap_or_default());
    }
    by_ns
}

/// A pod's namespace and name, borrowed (the parts of [`pod::key`]).
fn namespace_and_name(p: &Pod) -> (&str, &str) {
    (p.metadata.namespace.as_deref().unwrap_or_default(), p.metadata.name.as_deref().unwrap_or_default())
}

/// Orders objects by namespace, then name, without copying either.
fn by_namespace_and_name(a: &ObjectMeta, b: &ObjectMeta) -> std::cmp::Ordering {
    (a.namespace.as_deref(), a.name.as_deref()).cmp(&(b.namespace.as_deref(), b.name.as_deref()))
}

/// Objects grouped by the uid of their controller.
fn group_by_controller<T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>>(
    items: &[T],
) -> BTreeMap<&str, Vec<&T>> {
    let mut map: BTreeMap<&str, Vec<&T>> = BTreeMap::new();
    for item in items {
        if let Some(uid) = pod::controller_uid(item.metadata()) {
            map.entry(uid).or_default().push(item);
        }
    }
    map
}

/// A `metav1.Time` for `t`, truncated to whole seconds as the API stores it, so that a
/// status read back compares equal to the one written.
pub fn k8s_time(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}
