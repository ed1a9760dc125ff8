//! Runs a [`Simulator`] inside a simulated cluster's own API server process.
//!
//! The driver keeps typed copies of the cluster's nodes, deployments, replicasets and
//! pods, updated from the store's event stream (never re-listed per change), hands a
//! snapshot to the simulator, and applies the actions it returns through the same
//! admission path that kubectl's requests take: defaulting, validation, managed
//! fields, resourceVersions and watch events are all real. A burst of changes is
//! batched into one reconcile; the simulator's wake-up time (a pod finishing its
//! startup delay) drives the rest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use controlplane::api::{Api, DeleteOptions, FieldValidation, PatchKind, Scope, Sub, WriteOptions};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};
use storage::{Event, EventType, StoreError};
use tokio::sync::watch;
use tracing::Instrument;

use crate::sim::{Action, ClusterState, Kind, ObjectRef, Simulator};

/// The only logical cluster a simulated cluster serves.
const CLUSTER: &str = placement_api::keys::ROOT_WORKSPACE;
/// How long to wait for more changes before reconciling a burst.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// The longest pause between reconciles, as a periodic resync.
const RESYNC: Duration = Duration::from_secs(10);
/// The field manager of the simulated controllers' writes.
const MANAGER: &str = "kube-controller-manager";

/// Typed copies of the objects the simulation reads, kept in the vectors the
/// simulator reads them from, so that a reconcile costs no copy of the cluster.
#[derive(Default)]
struct Cache {
    state: ClusterState,
    /// Store key to (kind, position in its vector).
    at: HashMap<String, (Kind, usize)>,
    /// Per kind, the store key of each position, to fix `at` after a swap-remove.
    keys: HashMap<Kind, Vec<String>>,
}

fn key_prefix(kind: Kind) -> String {
    let group = match kind {
        Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet | Kind::DaemonSet => "apps",
        Kind::Job | Kind::CronJob => "batch",
        Kind::Node | Kind::Pod | Kind::Event | Kind::PersistentVolumeClaim | Kind::PersistentVolume => "core",
        Kind::StorageClass => "storage.k8s.io",
    };
    format!("{group}/{}/{CLUSTER}/", kind.plural())
}

const WATCHED: [Kind; 11] = [
    Kind::Node,
    Kind::Deployment,
    Kind::ReplicaSet,
    Kind::StatefulSet,
    Kind::DaemonSet,
    Kind::PersistentVolumeClaim,
    Kind::PersistentVolume,
    Kind::StorageClass,
    Kind::Job,
    Kind::CronJob,
    Kind::Pod,
];

impl Cache {
    /// Puts the object stored as `json` under `key`, or removes it for `None`.
    fn apply(&mut self, key: &str, json: Option<&str>) {
        let Some(kind) = WATCHED.into_iter().find(|k| key.starts_with(&key_prefix(*k))) else { return };
        match json {
            None => self.remove(kind, key),
            Some(json) => {
                let decoded = match kind {
                    Kind::Node => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.nodes)),
                    Kind::Deployment => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.deployments)),
                    Kind::ReplicaSet => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.replicasets)),
                    Kind::StatefulSet => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.statefulsets)),
                    Kind::DaemonSet => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.daemonsets)),
                    Kind::PersistentVolumeClaim => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.claims)),
                    Kind::PersistentVolume => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.volumes)),
                    Kind::StorageClass => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.classes)),
                    Kind::Job => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.jobs)),
                    Kind::CronJob => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.cronjobs)),
                    Kind::Pod => serde_json::from_str(json).map(|o| self.put(kind, key, o, |s| &mut s.pods)),
                    Kind::Event => Ok(()),
                };
                if let Err(e) = decoded {
                    tracing::warn!(key, error = %e, "stored object does not decode; the simulation ignores it");
                }
            }
        }
    }

    fn put<T: k8s_openapi::Metadata<Ty = ObjectMeta>>(
        &mut self,
        kind: Kind,
        key: &str,
        mut obj: T,
        vec: impl Fn(&mut ClusterState) -> &mut Vec<T>,
    ) {
        // No simulated controller reads managedFields, and decoded into `serde_json`
        // trees (FieldsV1) they are the largest part of a cached pod by far.
        obj.metadata_mut().managed_fields = None;
        match self.at.get(key) {
            Some(&(_, i)) => vec(&mut self.state)[i] = obj,
            None => {
                let items = vec(&mut self.state);
                self.at.insert(key.to_string(), (kind, items.len()));
                items.push(obj);
                self.keys.entry(kind).or_default().push(key.to_string());
            }
        }
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        let Some((_, i)) = self.at.remove(key) else { return };
        match kind {
            Kind::Node => drop(self.state.nodes.swap_remove(i)),
            Kind::Deployment => drop(self.state.deployments.swap_remove(i)),
            Kind::ReplicaSet => drop(self.state.replicasets.swap_remove(i)),
            Kind::StatefulSet => drop(self.state.statefulsets.swap_remove(i)),
            Kind::DaemonSet => drop(self.state.daemonsets.swap_remove(i)),
            Kind::PersistentVolumeClaim => drop(self.state.claims.swap_remove(i)),
            Kind::PersistentVolume => drop(self.state.volumes.swap_remove(i)),
            Kind::StorageClass => drop(self.state.classes.swap_remove(i)),
            Kind::Job => drop(self.state.jobs.swap_remove(i)),
            Kind::CronJob => drop(self.state.cronjobs.swap_remove(i)),
            Kind::Pod => drop(self.state.pods.swap_remove(i)),
            Kind::Event => {}
        }
        let keys = self.keys.entry(kind).or_default();
        keys.swap_remove(i);
        if let Some(moved) = keys.get(i) {
            self.at.insert(moved.clone(), (kind, i));
        }
    }
}

/// Registers the nodes the definition calls for that the cluster lacks, so that a
/// cluster announced as ready already has its nodes.
pub async fn register_nodes(api: &Api, sim: &Simulator) -> anyhow::Result<()> {
    for node in sim.nodes(Timestamp::now()) {
        let r = ObjectRef::from_meta(Kind::Node, &node.metadata);
        if api.store.get(&format!("{}/{}", key_prefix(Kind::Node), r.name)).is_some() {
            continue;
        }
        if let Err(e) = apply(api, &Action::Create(crate::sim::Object::Node(Box::new(node)))).await {
            if !e.benign {
                anyhow::bail!("registering node {}: {}", r.name, e.message);
            }
        }
    }
    // A new cluster has kind's default StorageClass; one that has any class keeps
    // what it has.
    if api.store.list(&key_prefix(Kind::StorageClass), None, Some(1)).0.is_empty() {
        let class = crate::sim::volumes::default_class();
        if let Err(e) = apply(api, &Action::Create(crate::sim::Object::StorageClass(Box::new(class)))).await {
            if !e.benign {
                anyhow::bail!("creating the default StorageClass: {}", e.message);
            }
        }
    }
    Ok(())
}

/// Runs the simulation, and the cluster's load-balancer provider beside it
/// ([`crate::load_balancer`]), until `stop` turns true or the store closes.
pub async fn run(api: Arc<Api>, sim: Simulator, stop: watch::Receiver<bool>) {
    let def = sim.def().clone();
    tokio::join!(simulate(api.clone(), sim, stop.clone()), crate::load_balancer::run(api, &def, stop));
}

/// Runs the simulation until `stop` turns true or the store closes.
async fn simulate(api: Arc<Api>, mut sim: Simulator, mut stop: watch::Receiver<bool>) {
    let span = tracing::info_span!("simulator", cluster = %sim.def().name);
    async move {
        loop {
            // (Re)load everything as it stood at one revision, then follow events from
            // it. Listing each kind at its own latest revision would lose what changes
            // between the lists: an object written after its kind was listed, but at a
            // revision below the last list's, neither loads nor comes as an event.
            let mut cache = Cache::default();
            let from = api.store.revision();
            let loaded: Result<(), StoreError> = WATCHED.into_iter().try_for_each(|kind| {
                for (key, entry) in api.store.list_at(&key_prefix(kind), None, from)? {
                    cache.apply(&key, Some(&entry.value.to_string()));
                }
                Ok(())
            });
            if let Err(e) = loaded {
                tracing::warn!(error = %e, "loading the cluster failed; trying again");
                tokio::time::sleep(DEBOUNCE).await;
                continue;
            }
            let mut events = match api.store.watch("", from) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot watch the store");
                    return;
                }
            };
            let mut wake_at: Option<Timestamp> = None;
            let mut dirty = true;
            loop {
                if dirty {
                    dirty = false;
                    let now = Timestamp::now();
                    let reconciled = sim.reconcile(&cache.state, now);
                    wake_at = reconciled.next_wakeup;
                    if !reconciled.actions.is_empty() {
                        tracing::debug!(actions = reconciled.actions.len(), "applying");
                    }
                    for action in apply_all(&api, reconciled.actions).await {
                        sim.forget(&action);
                    }
                }
                let sleep_for = wake_at
                    .map(|t| Duration::from_millis(u64::try_from(t.duration_since(Timestamp::now()).as_millis()).unwrap_or(0)))
                    .unwrap_or(RESYNC)
                    .min(RESYNC);
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(sleep_for) => dirty = true,
                    ev = events.next() => match ev {
                        None => return,
                        Some(Err(StoreError::Expired { .. })) => {
                            tracing::warn!("fell behind the event window; reloading");
                            break;
                        }
                        Some(Err(e)) => {
                            tracing::error!(error = %e, "store watch failed; reloading");
                            break;
                        }
                        Some(Ok(ev)) => {
                            dirty |= absorb(&mut cache, &ev);
                            // Take the rest of a burst before reconciling once. A failed
                            // stream reloads, as above: going on would skip what it lost.
                            let until = tokio::time::Instant::now() + DEBOUNCE;
                            let mut lost = None;
                            while let Ok(Some(next)) = tokio::time::timeout_at(until, events.next()).await {
                                match next {
                                    Ok(ev) => dirty |= absorb(&mut cache, &ev),
                                    Err(e) => {
                                        lost = Some(e);
                                        break;
                                    }
                                }
                            }
                            if let Some(e) = lost {
                                tracing::warn!(error = %e, "the store watch failed during a burst; reloading");
                                break;
                            }
                        }
                    },
                }
                if *stop.borrow() {
                    return;
                }
            }
        }
    }
    .instrument(span)
    .await
}

/// How many objects' actions are applied at once. Every write is durable, so applying
/// them one after another would cost one fsync each; concurrent writes share a group
/// commit.
const WRITE_CONCURRENCY: usize = 16;

/// Applies a reconcile's actions: in order for each object, objects concurrently.
/// Returns the actions that could not be applied, for the simulator to forget.
async fn apply_all(api: &Api, actions: Vec<Action>) -> Vec<Action> {
    let mut per_object: Vec<(ObjectRef, Vec<Action>)> = Vec::new();
    let mut index: std::collections::HashMap<ObjectRef, usize> = std::collections::HashMap::new();
    for action in actions {
        let mut target = action.target();
        target.uid = None;
        match index.get(&target) {
            Some(&i) => per_object[i].1.push(action),
            None => {
                index.insert(target.clone(), per_object.len());
                per_object.push((target, vec![action]));
            }
        }
    }
    let failed = futures::stream::iter(per_object)
        .map(|(_, actions)| async move {
            let mut failed = Vec::new();
            for action in actions {
                if let Err(e) = apply(api, &action).await {
                    if !e.benign {
                        tracing::warn!(target_object = %action.target(), error = %e.message, "simulated controller write failed; retrying on the next reconcile");
                    }
                    failed.push(action);
                }
            }
            failed
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    failed.into_iter().flatten().collect()
}

/// Folds one store event into the cache; whether it concerns the simulation.
fn absorb(cache: &mut Cache, ev: &Event) -> bool {
    if !WATCHED.iter().any(|k| ev.key.starts_with(&key_prefix(*k))) {
        return false;
    }
    match ev.kind {
        EventType::Deleted => cache.apply(&ev.key, None),
        EventType::Added | EventType::Modified => cache.apply(&ev.key, Some(ev.doc.raw())),
    }
    true
}

struct Failure {
    /// The state moved on (already exists, gone, conflict): the next reconcile sorts it out.
    benign: bool,
    message: String,
}

fn opts() -> WriteOptions {
    WriteOptions { field_manager: MANAGER.into(), validation: FieldValidation::Ignore, dry_run: false, guard: None }
}

fn scope(api: &Api, r: &ObjectRef) -> Result<Scope, Failure> {
    let (group, version) = match r.kind.api_version().split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", r.kind.api_version()),
    };
    let rt = api
        .registry
        .lookup(CLUSTER, group, version, r.kind.plural())
        .ok_or_else(|| Failure { benign: false, message: format!("{} are not served by this cluster", r.kind.plural()) })?;
    Ok(Scope { rt, workspace: CLUSTER.into(), namespace: r.namespace.clone().unwrap_or_default() })
}

fn failed(e: controlplane::error::ApiError) -> Failure {
    Failure { benign: matches!(e.code, 404 | 409), message: e.to_string() }
}

async fn apply(api: &Api, action: &Action) -> Result<(), Failure> {
    match action {
        Action::Create(obj) => {
            let r = obj.object_ref();
            let s = scope(api, &r)?;
            let mut value = obj.to_json();
            value["apiVersion"] = json!(r.kind.api_version());
            value["kind"] = json!(r.kind.name());
            // A status is not accepted on create where a status subresource exists,
            // so a created object's status (a node's capacity) is written after it.
            let status = value.as_object_mut().and_then(|o| o.remove("status"));
            let created = api.create(&s, value, &opts()).await.map_err(failed)?;
            // A pod is created Pending with its QoS class, which is what the
            // replicaset controller's new pods say; only a different status is written.
            let wanted = |st: &Value| !st.is_null() && r.kind != Kind::Event && created.object.get("status") != Some(st);
            if let Some(status) = status.filter(wanted) {
                let mut v = created.object.into_value();
                v["status"] = status;
                api.update(&s, &r.name, v, Sub::Status, &opts()).await.map_err(failed)?;
            }
            Ok(())
        }
        Action::Patch { target, patch } => {
            let s = scope(api, target)?;
            let body = serde_json::to_vec(patch).unwrap_or_default();
            api.patch(&s, &target.name, PatchKind::Merge, &body, Sub::Main, &opts()).await.map_err(failed)?;
            Ok(())
        }
        Action::UpdateStatus(obj) => {
            let r = obj.object_ref();
            let s = scope(api, &r)?;
            let mut value = obj.to_json();
            value["apiVersion"] = json!(r.kind.api_version());
            value["kind"] = json!(r.kind.name());
            // Last writer wins, as the simulated controllers own these statuses.
            if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            api.update(&s, &r.name, value, Sub::Status, &opts()).await.map_err(failed)?;
            Ok(())
        }
        Action::Delete { target, .. } => {
            let s = scope(api, target)?;
            let del = DeleteOptions { uid: target.uid.clone(), propagation: Some("Background".into()), ..Default::default() };
            api.delete(&s, &target.name, &del).await.map_err(failed)?;
            Ok(())
        }
        Action::Bind { pod, node } => {
            // kube-scheduler's bind: one pods/binding request, which sets spec.nodeName
            // and PodScheduled=True together, and refuses a pod that is bound already.
            let s = scope(api, pod)?;
            let mut binding =
                json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod.name}, "target": {"kind": "Node", "name": node}});
            if let Some(uid) = &pod.uid {
                binding["metadata"]["uid"] = json!(uid);
            }
            api.bind(&s, &pod.name, &binding, &opts()).await.map(drop).map_err(failed)
        }
    }
}
