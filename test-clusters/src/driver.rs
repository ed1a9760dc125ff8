//! Runs a [`Simulator`] inside a simulated cluster's own API server process.
//!
//! The driver keeps typed copies of the cluster's nodes, deployments, replicasets and
//! pods, updated from the store's event stream (never re-listed per change), hands a
//! snapshot to the simulator, and applies the actions it returns through the same
//! admission path that kubectl's requests take: defaulting, validation, managed
//! fields, resourceVersions and watch events are all real. A burst of changes is
//! batched into one reconcile; the simulator's wake-up time (a pod finishing its
//! startup delay) drives the rest.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use controlplane::api::{Api, DeleteOptions, FieldValidation, PatchKind, Scope, Sub, WriteOptions};
use controlplane::store::{Event, EventType, StoreError};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::watch;
use tracing::Instrument;

use crate::sim::{Action, ClusterState, Kind, ObjectRef, Simulator};

/// The only logical cluster a simulated cluster serves.
const CLUSTER: &str = "root";
/// How long to wait for more changes before reconciling a burst.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// The longest pause between reconciles, as a periodic resync.
const RESYNC: Duration = Duration::from_secs(10);
/// The field manager of the simulated controllers' writes.
const MANAGER: &str = "kube-controller-manager";

/// Typed copies of the objects the simulation reads, by store key.
#[derive(Default)]
struct Cache {
    nodes: BTreeMap<String, Node>,
    deployments: BTreeMap<String, Deployment>,
    replicasets: BTreeMap<String, ReplicaSet>,
    pods: BTreeMap<String, Pod>,
}

fn key_prefix(kind: Kind) -> String {
    let group = match kind {
        Kind::Deployment | Kind::ReplicaSet => "apps",
        Kind::Node | Kind::Pod | Kind::Event => "core",
    };
    format!("{group}/{}/{CLUSTER}/", kind.plural())
}

const WATCHED: [Kind; 4] = [Kind::Node, Kind::Deployment, Kind::ReplicaSet, Kind::Pod];

impl Cache {
    fn apply(&mut self, key: &str, value: Option<&Value>) {
        fn put<T: DeserializeOwned>(map: &mut BTreeMap<String, T>, key: &str, value: Option<&Value>) {
            match value.map(|v| serde_json::from_value::<T>(v.clone())) {
                Some(Ok(obj)) => {
                    map.insert(key.to_string(), obj);
                }
                Some(Err(e)) => {
                    tracing::warn!(key, error = %e, "stored object does not decode; the simulation ignores it")
                }
                None => {
                    map.remove(key);
                }
            }
        }
        for kind in WATCHED {
            if key.starts_with(&key_prefix(kind)) {
                match kind {
                    Kind::Node => put(&mut self.nodes, key, value),
                    Kind::Deployment => put(&mut self.deployments, key, value),
                    Kind::ReplicaSet => put(&mut self.replicasets, key, value),
                    Kind::Pod => put(&mut self.pods, key, value),
                    Kind::Event => {}
                }
            }
        }
    }

    fn state(&self) -> ClusterState {
        ClusterState {
            nodes: self.nodes.values().cloned().collect(),
            deployments: self.deployments.values().cloned().collect(),
            replicasets: self.replicasets.values().cloned().collect(),
            pods: self.pods.values().cloned().collect(),
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
    Ok(())
}

/// Runs the simulation until `stop` turns true or the store closes.
pub async fn run(api: Arc<Api>, mut sim: Simulator, mut stop: watch::Receiver<bool>) {
    let span = tracing::info_span!("simulator", cluster = %sim.def().name);
    async move {
        loop {
            // (Re)load everything, then follow events from the revision the load saw.
            let mut cache = Cache::default();
            let mut from = 0;
            for kind in WATCHED {
                let (items, rev) = api.store.list(&key_prefix(kind), None, None);
                from = from.max(rev);
                for (key, entry) in items {
                    cache.apply(&key, Some(&entry.value));
                }
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
                    let reconciled = sim.reconcile(&cache.state(), now);
                    wake_at = reconciled.next_wakeup;
                    if !reconciled.actions.is_empty() {
                        tracing::debug!(actions = reconciled.actions.len(), "applying");
                    }
                    for action in reconciled.actions {
                        if let Err(e) = apply(&api, &action).await {
                            if !e.benign {
                                tracing::warn!(target_object = %action.target(), error = %e.message, "simulated controller write failed; retrying on the next reconcile");
                            }
                            sim.forget(&action);
                        }
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
                            // Take the rest of a burst before reconciling once.
                            let until = tokio::time::Instant::now() + DEBOUNCE;
                            while let Ok(Some(next)) = tokio::time::timeout_at(until, events.next()).await {
                                match next {
                                    Ok(ev) => dirty |= absorb(&mut cache, &ev),
                                    Err(_) => break,
                                }
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

/// Folds one store event into the cache; whether it concerns the simulation.
fn absorb(cache: &mut Cache, ev: &Event) -> bool {
    if !WATCHED.iter().any(|k| ev.key.starts_with(&key_prefix(*k))) {
        return false;
    }
    match ev.kind {
        EventType::Deleted => cache.apply(&ev.key, None),
        EventType::Added | EventType::Modified => cache.apply(&ev.key, Some(&ev.object)),
    }
    true
}

struct Failure {
    /// The state moved on (already exists, gone, conflict): the next reconcile sorts it out.
    benign: bool,
    message: String,
}

fn opts() -> WriteOptions {
    WriteOptions { field_manager: MANAGER.into(), validation: FieldValidation::Ignore, dry_run: false }
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
            if let Some(status) = status.filter(|st| !st.is_null() && r.kind != Kind::Event) {
                let mut v = created.object;
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
            // What the pods/binding subresource does: set spec.nodeName once, and
            // record PodScheduled=True.
            let s = scope(api, pod)?;
            let current = api.get(&s, &pod.name).map_err(failed)?;
            if current.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty()) {
                return Err(Failure { benign: true, message: format!("pod {} is already bound", pod.name) });
            }
            if pod.uid.as_deref().is_some_and(|uid| current.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)) {
                return Err(Failure { benign: true, message: format!("pod {} was replaced", pod.name) });
            }
            let mut bound = current;
            bound["spec"]["nodeName"] = json!(node);
            let written = api.update(&s, &pod.name, bound, Sub::Main, &opts()).await.map_err(failed)?;
            let mut v = written.object;
            let now = crate::sim::k8s_time(Timestamp::now());
            let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
            let conds = v["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
            conds.push(cond);
            v["status"]["conditions"] = Value::Array(conds);
            api.update(&s, &pod.name, v, Sub::Status, &opts()).await.map_err(failed)?;
            Ok(())
        }
    }
}
