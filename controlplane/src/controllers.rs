//! The control plane's own controllers, the part of kube-controller-manager and
//! apiextensions-apiserver a workspace needs: establishing CRDs, initializing and
//! emptying workspaces, finishing namespace deletion, and garbage-collecting
//! dependents by ownerReferences.
//!
//! They are level-triggered: store events only say which object to look at, the
//! handler re-reads it, and anything that cannot finish yet (objects still held by
//! finalizers) is retried on the next tick. On start, and whenever the event stream
//! falls behind the window, every object of interest is looked at again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::Instrument;

use crate::api::{Api, DeleteOptions, FieldValidation, Scope, Sub, WriteOptions};
use crate::objmeta::{self, meta_str};
use crate::registry::split_key;
use crate::store::{Doc, EventType, WriteOp};

/// How often unfinished work (objects waiting on finalizers) is retried.
const RETRY_INTERVAL: Duration = Duration::from_millis(500);

const CRD_PREFIX: &str = "apiextensions.k8s.io/customresourcedefinitions/";
const NAMESPACE_PREFIX: &str = "core/namespaces/";
const MANAGER: &str = "flotilla-controlplane";

/// Namespaces every workspace starts with.
pub const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// One unit of work.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Work {
    Crd {
        ws: String,
        name: String,
    },
    Namespace {
        ws: String,
        name: String,
    },
    Workspace {
        name: String,
    },
    /// Delete the dependents of a deleted owner (background propagation).
    Dependents {
        ws: String,
        ns: String,
        uid: String,
    },
    /// An object waiting in foreground deletion for its dependents.
    Foreground {
        key: String,
    },
    /// An object deleted with Orphan propagation: release its dependents first.
    Orphan {
        key: String,
    },
}

/// Runs the controllers until the store closes.
pub async fn run(api: Arc<Api>) {
    let span = tracing::info_span!("controlplane-controllers");
    async move {
        let mut queue = BTreeSet::new();
        loop {
            let from = api.store.revision();
            // Look at everything once before following events from this revision. The
            // listing is at or after `from`; replaying the events since `from` over it
            // leaves each key as its last event says.
            let (docs, _) = api.store.list_docs("");
            let mut owners = Owners::default();
            for (key, doc) in &docs {
                let meta = meta_of(doc, false);
                if let Some(w) = work_for(key, EventType::Modified, &meta) {
                    queue.insert(w);
                }
                owners.set(key, owner_uids(&meta));
            }
            drop(docs);
            let mut stream = match api.store.watch("", from) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot watch the store; retrying");
                    tokio::time::sleep(RETRY_INTERVAL).await;
                    continue;
                }
            };
            let mut tick = tokio::time::interval(RETRY_INTERVAL);
            loop {
                tokio::select! {
                    ev = stream.next() => match ev {
                        Some(Ok(ev)) => {
                            let meta = meta_of(&ev.doc, ev.kind == EventType::Deleted);
                            if let Some(w) = work_for(&ev.key, ev.kind, &meta) {
                                queue.insert(w);
                            }
                            if ev.kind == EventType::Deleted {
                                owners.set(&ev.key, Vec::new());
                                if let (Some((ws, ns, _)), Some(uid)) = (split_key(&ev.key), meta.uid) {
                                    queue.insert(Work::Dependents { ws: ws.into(), ns: ns.into(), uid });
                                }
                            } else {
                                owners.set(&ev.key, owner_uids(&meta));
                            }
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "controllers fell behind the event window; resyncing everything");
                            break;
                        }
                        None => return,
                    },
                    _ = tick.tick() => {}
                }
                let pending = std::mem::take(&mut queue);
                for w in pending {
                    match process(&api, &owners, &w).await {
                        Ok(true) => {}
                        Ok(false) => {
                            queue.insert(w);
                        }
                        Err(e) => {
                            tracing::warn!(work = ?w, error = %e, "controller work failed; will retry");
                            queue.insert(w);
                        }
                    }
                }
            }
        }
    }
    .instrument(span)
    .await
}

fn work_for(key: &str, kind: EventType, meta: &Meta) -> Option<Work> {
    let (ws, _, name) = split_key(key)?;
    if key.starts_with(CRD_PREFIX) {
        return Some(Work::Crd { ws: ws.into(), name: name.into() });
    }
    if key.starts_with(NAMESPACE_PREFIX) {
        return (kind != EventType::Deleted && meta.deletion_timestamp.is_some())
            .then(|| Work::Namespace { ws: ws.into(), name: name.into() });
    }
    if key == workspace_key(name) {
        return Some(Work::Workspace { name: name.into() });
    }
    if kind == EventType::Deleted || meta.deletion_timestamp.is_none() {
        return None;
    }
    let fins = meta.finalizers.as_deref().unwrap_or_default();
    if fins.iter().any(|f| f == "orphan") {
        Some(Work::Orphan { key: key.into() })
    } else if fins.iter().any(|f| f == "foregroundDeletion") {
        Some(Work::Foreground { key: key.into() })
    } else {
        None
    }
}

/// The store key of a Workspace object (it lives in `root`, cluster-scoped).
pub fn workspace_key(name: &str) -> String {
    storage::object_key(placement_api::TENANCY_GROUP, "workspaces", placement_api::ROOT_WORKSPACE, "", name)
}

// The metadata the controllers route on, read from a stored document without
// building its tree: every write passes through here.
use crate::store::DocMeta as Meta;

/// The fields of `doc`; the uid only when `want_uid` or when there is more to read.
/// Most writes are of objects that name no owner and are not being deleted (a status,
/// a label), and a search of the text settles that for much less than a parse: a key
/// that is there is found, and a match inside some string value only costs the parse.
fn meta_of(doc: &Doc, want_uid: bool) -> Meta {
    let raw = doc.raw();
    if !want_uid && !raw.contains("\"ownerReferences\"") && !raw.contains("\"deletionTimestamp\"") {
        return Meta::default();
    }
    doc.meta()
}

fn owner_uids(meta: &Meta) -> Vec<String> {
    meta.owner_references.iter().flatten().filter_map(|r| r.uid.clone()).collect()
}

/// Which stored objects name which owners, by uid, kept from the store's events:
/// finding an owner's dependents is then a lookup rather than a parse of every object
/// in its namespace, which on a cluster of thousands of pods was most of the work of
/// each deletion (kube-controller-manager's garbage collector keeps such a graph too).
#[derive(Default)]
struct Owners {
    by_owner: HashMap<String, BTreeSet<String>>,
    of_key: HashMap<String, Vec<String>>,
}

impl Owners {
    /// Records that `key` now names `owners` (none: it names no owner, or is gone).
    fn set(&mut self, key: &str, owners: Vec<String>) {
        if self.of_key.get(key).is_some_and(|had| *had == owners) {
            return;
        }
        for owner in self.of_key.remove(key).into_iter().flatten() {
            if let Some(keys) = self.by_owner.get_mut(&owner) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_owner.remove(&owner);
                }
            }
        }
        if owners.is_empty() {
            return;
        }
        for owner in &owners {
            self.by_owner.entry(owner.clone()).or_default().insert(key.to_string());
        }
        self.of_key.insert(key.to_string(), owners);
    }

    /// The keys of the objects that name `uid` as an owner.
    fn of(&self, uid: &str) -> impl Iterator<Item = &str> {
        self.by_owner.get(uid).into_iter().flatten().map(String::as_str)
    }
}

fn opts() -> WriteOptions {
    WriteOptions { field_manager: MANAGER.into(), validation: FieldValidation::Ignore, dry_run: false, guard: None }
}

fn scope(api: &Api, ws: &str, group: &str, version: &str, plural: &str, ns: &str) -> Option<Scope> {
    let rt = api.registry.lookup(ws, group, version, plural)?;
    Some(Scope { rt, workspace: ws.into(), namespace: ns.into() })
}

/// Processes one item; `Ok(false)` means "not finished, retry later".
async fn process(api: &Api, owners: &Owners, w: &Work) -> anyhow::Result<bool> {
    match w {
        Work::Crd { ws, name } => reconcile_crd(api, ws, name).await,
        Work::Namespace { ws, name } => finish_namespace(api, ws, name).await,
        Work::Workspace { name } => reconcile_workspace(api, name).await,
        Work::Dependents { ws, ns, uid } => delete_dependents(api, owners, ws, ns, uid).await.map(|_| true),
        Work::Foreground { key } => finish_foreground(api, owners, key).await,
        Work::Orphan { key } => finish_orphan(api, owners, key).await,
    }
}

/// Establishes a CRD and keeps the registry in line with it.
pub async fn reconcile_crd(api: &Api, ws: &str, name: &str) -> anyhow::Result<bool> {
    let crd_scope = scope(api, ws, "apiextensions.k8s.io", "v1", "customresourcedefinitions", "")
        .ok_or_else(|| anyhow::anyhow!("CRDs not registered"))?;
    let Some(entry) = api.get_raw(&crd_scope, name) else {
        // Deleted: stop serving it and remove its objects, as the CRD cleanup finalizer would.
        let types: Vec<_> = api.registry.types(ws).into_iter().filter(|t| t.strategy.crd_name() == Some(name)).collect();
        api.registry.remove_crd(ws, name);
        for t in types {
            let (items, _) = api.store.list(&t.prefix(Some(ws), None), None, None);
            for (key, _) in items {
                let _ = api.store.write(WriteOp::Delete { key, expected: None }).await;
            }
        }
        return Ok(true);
    };
    let crd = &*entry.value;
    let types = crate::registry::custom_types(crd);
    // Serve first, then announce: once a client sees Established, requests succeed.
    api.registry.set_crd(ws, name, types);
    if !crate::crd::is_established(crd) {
        let mut v = crd.clone();
        v["status"] = crate::crd::established_status(crd, &objmeta::now_rfc3339());
        api.update(&crd_scope, name, v, Sub::Status, &opts()).await?;
        tracing::info!(workspace = ws, crd = name, "CustomResourceDefinition established");
    }
    Ok(true)
}

async fn finish_namespace(api: &Api, ws: &str, name: &str) -> anyhow::Result<bool> {
    let Some(ns_scope) = scope(api, ws, "", "v1", "namespaces", "") else { return Ok(true) };
    let Some(entry) = api.get_raw(&ns_scope, name) else { return Ok(true) };
    if meta_str(&entry.value, "deletionTimestamp").is_none() {
        return Ok(true);
    }
    let mut remaining = 0usize;
    for rt in api.registry.types(ws).into_iter().filter(|t| t.namespaced) {
        let s = Scope { rt: rt.clone(), workspace: ws.into(), namespace: name.into() };
        let (items, _) = api.store.list(&s.prefix(), None, None);
        for (key, e) in items {
            remaining += 1;
            if meta_str(&e.value, "deletionTimestamp").is_none() {
                let obj_name = split_key(&key).map(|(_, _, n)| n.to_string()).unwrap_or_default();
                match api.delete(&s, &obj_name, &DeleteOptions { propagation: Some("Background".into()), ..Default::default() }).await {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    if remaining > 0 {
        // Deletions were issued; objects with finalizers may take longer.
        return Ok(false);
    }
    if !objmeta::finalizers(&entry.value).is_empty() {
        return Ok(false);
    }
    api.store.write(WriteOp::Delete { key: ns_scope.rt.key(ws, "", name), expected: Some(entry.rev) }).await?;
    tracing::info!(workspace = ws, namespace = name, "namespace deleted after its contents");
    Ok(true)
}

/// Creates a workspace's initial content, or empties a deleted one.
pub async fn reconcile_workspace(api: &Api, name: &str) -> anyhow::Result<bool> {
    let root = placement_api::ROOT_WORKSPACE;
    let Some(ws_scope) = scope(api, root, placement_api::TENANCY_GROUP, placement_api::VERSION, "workspaces", "") else {
        return Ok(false);
    };
    let Some(entry) = api.get_raw(&ws_scope, name) else { return Ok(true) };
    let obj = &*entry.value;
    if meta_str(obj, "deletionTimestamp").is_some() {
        let (all, _) = api.store.list("", None, None);
        let mut n = 0;
        for (key, _) in all.into_iter().filter(|(k, _)| split_key(k).is_some_and(|(w, _, _)| w == name)) {
            api.store.write(WriteOp::Delete { key, expected: None }).await?;
            n += 1;
        }
        api.registry.remove_workspace(name);
        let mut v = obj.clone();
        let fins: Vec<String> = objmeta::finalizers(obj).into_iter().filter(|f| f != placement_api::WORKSPACE_FINALIZER).collect();
        objmeta::meta_mut(&mut v).insert("finalizers".into(), json!(fins));
        api.update(&ws_scope, name, v, Sub::Main, &opts()).await?;
        tracing::info!(workspace = name, objects = n, "workspace deleted with its contents");
        return Ok(true);
    }
    if !objmeta::finalizers(obj).iter().any(|f| f == placement_api::WORKSPACE_FINALIZER) {
        let mut v = obj.clone();
        let mut fins = objmeta::finalizers(obj);
        fins.push(placement_api::WORKSPACE_FINALIZER.into());
        objmeta::meta_mut(&mut v).insert("finalizers".into(), json!(fins));
        api.update(&ws_scope, name, v, Sub::Main, &opts()).await?;
        return Ok(false);
    }
    ensure_namespaces(api, name).await?;
    ensure_default_placement(api, name).await?;
    if obj.pointer("/status/phase").and_then(Value::as_str) != Some("Ready") {
        let mut v = obj.clone();
        v["status"] = json!({"phase": "Ready", "url": format!("/clusters/{name}")});
        api.update(&ws_scope, name, v, Sub::Status, &opts()).await?;
        tracing::info!(workspace = name, "workspace ready");
    }
    Ok(true)
}

/// Creates the initial namespaces of a workspace when missing.
pub async fn ensure_namespaces(api: &Api, ws: &str) -> anyhow::Result<()> {
    for ns in INITIAL_NAMESPACES {
        ensure_namespace(api, ws, ns).await?;
    }
    Ok(())
}

/// Creates one namespace when missing.
pub async fn ensure_namespace(api: &Api, ws: &str, name: &str) -> anyhow::Result<()> {
    let s = scope(api, ws, "", "v1", "namespaces", "").ok_or_else(|| anyhow::anyhow!("namespaces not registered"))?;
    ensure_object(api, &s, name, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await
}

/// Creates the `default` Placement (every cluster, one cluster per workload, Divide)
/// when missing. A user may change it afterwards; it is only created, never reset.
pub async fn ensure_default_placement(api: &Api, ws: &str) -> anyhow::Result<()> {
    let s = scope(api, ws, placement_api::SCHEDULING_GROUP, placement_api::VERSION, "placements", "")
        .ok_or_else(|| anyhow::anyhow!("placements are not served in workspace {ws}"))?;
    let placement = placement_api::Placement::new(placement_api::DEFAULT_PLACEMENT, placement_api::PlacementSpec::default());
    ensure_object(api, &s, placement_api::DEFAULT_PLACEMENT, serde_json::to_value(placement)?).await
}

async fn ensure_object(api: &Api, s: &Scope, name: &str, obj: Value) -> anyhow::Result<()> {
    if api.get_raw(s, name).is_some() {
        return Ok(());
    }
    match api.create(s, obj, &opts()).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Finds objects in the owner's workspace (and namespace, for a namespaced owner)
/// whose ownerReferences name `uid`. Returns (scope, name, object) triples.
fn dependents(api: &Api, owners: &Owners, ws: &str, ns: &str, uid: &str) -> Vec<(Scope, String, Value)> {
    let keys: Vec<&str> = owners.of(uid).collect();
    if keys.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for rt in api.registry.types(ws) {
        if rt.strategy.stored_as().is_some() {
            continue; // shares another type's storage (events.k8s.io Events are core Events)
        }
        let prefix = rt.prefix(Some(ws), (rt.namespaced && !ns.is_empty()).then_some(ns));
        for key in keys.iter().filter(|k| k.starts_with(&prefix)) {
            let (Some((_, obj_ns, name)), Some(e)) = (split_key(key), api.store.get(key)) else { continue };
            let s = Scope { rt: rt.clone(), workspace: ws.into(), namespace: obj_ns.into() };
            out.push((s, name.to_string(), (*e.value).clone()));
        }
    }
    out
}

async fn delete_dependents(api: &Api, owners: &Owners, ws: &str, ns: &str, uid: &str) -> anyhow::Result<usize> {
    let deps = dependents(api, owners, ws, ns, uid);
    let mut n = 0;
    for (s, name, obj) in deps {
        if meta_str(&obj, "deletionTimestamp").is_some() {
            continue;
        }
        match api.delete(&s, &name, &DeleteOptions { propagation: Some("Background".into()), ..Default::default() }).await {
            Ok(_) => n += 1,
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if n > 0 {
        tracing::debug!(workspace = ws, namespace = ns, owner = uid, deleted = n, "garbage-collected dependents");
    }
    Ok(n)
}

async fn finish_foreground(api: &Api, owners: &Owners, key: &str) -> anyhow::Result<bool> {
    let Some(entry) = api.store.get(key) else { return Ok(true) };
    let Some((ws, ns, _)) = split_key(key) else { return Ok(true) };
    let Some(uid) = meta_str(&entry.value, "uid") else { return Ok(true) };
    delete_dependents(api, owners, ws, ns, uid).await?;
    if !dependents(api, owners, ws, ns, uid).is_empty() {
        return Ok(false);
    }
    remove_finalizer(api, key, &entry.value, "foregroundDeletion").await
}

/// Orphan propagation: drop the owner's reference from every dependent, then let the
/// owner go. The dependents stay.
async fn finish_orphan(api: &Api, owners: &Owners, key: &str) -> anyhow::Result<bool> {
    let Some(entry) = api.store.get(key) else { return Ok(true) };
    let Some((ws, ns, _)) = split_key(key) else { return Ok(true) };
    let Some(uid) = meta_str(&entry.value, "uid") else { return Ok(true) };
    for (s, name, mut obj) in dependents(api, owners, ws, ns, uid) {
        if let Some(refs) = obj.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
            refs.retain(|r| r["uid"] != uid);
        }
        match api.update(&s, &name, obj, Sub::Main, &opts()).await {
            Ok(_) => {}
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    remove_finalizer(api, key, &entry.value, "orphan").await
}

async fn remove_finalizer(api: &Api, key: &str, obj: &Value, finalizer: &str) -> anyhow::Result<bool> {
    let Some((ws, ns, name)) = split_key(key) else { return Ok(true) };
    let mut v = obj.clone();
    let fins: Vec<String> = objmeta::finalizers(&v).into_iter().filter(|f| f != finalizer).collect();
    objmeta::meta_mut(&mut v).insert("finalizers".into(), json!(fins));
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let plural = key.split('/').nth(1).unwrap_or_default();
    if let Some(s) = scope(api, ws, group, version, plural, ns) {
        api.update(&s, name, v, Sub::Main, &opts()).await?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(v: Value) -> Arc<Doc> {
        Doc::new(&Arc::new(v))
    }

    #[test]
    fn meta_reads_the_routing_fields_and_tolerates_nulls() {
        let m = meta_of(
            &doc(json!({"metadata": {
            "uid": "u1", "deletionTimestamp": "2026-11-24T00:00:00Z", "finalizers": ["orphan"],
            "ownerReferences": [{"uid": "o1", "kind": "ReplicaSet"}, {"uid": "o2"}],
            "labels": {"a": "b"}}, "spec": {"big": [1, 2, 3]}})),
            false,
        );
        assert_eq!(m.uid.as_deref(), Some("u1"));
        assert!(m.deletion_timestamp.is_some());
        assert_eq!(m.finalizers.as_deref(), Some(&["orphan".to_string()][..]));
        assert_eq!(owner_uids(&m), vec!["o1", "o2"]);
        let empty = meta_of(&doc(json!({"metadata": {"finalizers": null, "ownerReferences": null, "deletionTimestamp": null}})), false);
        assert!(owner_uids(&empty).is_empty() && empty.deletion_timestamp.is_none() && empty.finalizers.is_none());
        assert!(meta_of(&doc(json!({"kind": "Status"})), true).uid.is_none());
        // Nothing to route on: the text is not parsed, unless the uid is wanted.
        let plain = doc(json!({"metadata": {"uid": "u2", "labels": {"a": "b"}}}));
        assert!(meta_of(&plain, false).uid.is_none());
        assert_eq!(meta_of(&plain, true).uid.as_deref(), Some("u2"));
    }

    #[test]
    fn owners_follow_each_key_to_its_last_value() {
        let mut o = Owners::default();
        o.set("core/pods/root/ns/a", vec!["rs1".into()]);
        o.set("core/pods/root/ns/b", vec!["rs1".into(), "rs2".into()]);
        let of = |o: &Owners, uid: &str| o.of(uid).map(String::from).collect::<Vec<_>>();
        assert_eq!(of(&o, "rs1"), ["core/pods/root/ns/a", "core/pods/root/ns/b"]);
        assert_eq!(of(&o, "rs2"), ["core/pods/root/ns/b"]);
        // An orphaned object no longer names its owner; a deleted one names none.
        o.set("core/pods/root/ns/b", vec!["rs2".into()]);
        assert_eq!(of(&o, "rs1"), ["core/pods/root/ns/a"]);
        o.set("core/pods/root/ns/a", Vec::new());
        assert!(of(&o, "rs1").is_empty());
        assert!(!o.by_owner.contains_key("rs1"), "an owner with no dependents left is forgotten");
        o.set("core/pods/root/ns/b", Vec::new());
        assert!(o.by_owner.is_empty() && o.of_key.is_empty());
    }
}
