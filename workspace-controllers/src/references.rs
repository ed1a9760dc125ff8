//! ConfigMaps and Secrets go where the workloads that need them go.
//!
//! This controller runs once, in the control plane process. In every namespace of
//! every workspace it gives each ConfigMap and Secret that an assigned pod template
//! references the assignment labels (`state.workload.flotilla.io/<target>=Sync`) of
//! the Deployments that reference it, and the label `workload.flotilla.io/referenced`,
//! which says that this controller manages those labels. When no assigned Deployment
//! refers to the object any more, both go again.
//!
//! The syncers then treat a referenced object like any assigned one: each watches only
//! what is labelled for its own cluster, which is also all that a pull-mode syncer's
//! token may read. A referenced object that does not exist yet is looked for again
//! every [`MISSING_RETRY`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::Client;
use placement_api::{sync_state_label, sync_target_of_label, REFERENCED_LABEL, SYNC_STATE_SYNC};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use placement_api::references::References;
use placement_api::synced::Kind;
use runtime::clients;
use runtime::errors::{failed, is_not_found, Failed};
use runtime::key::{self as cache, Cache};
use runtime::queue::{self, Next};
use runtime::Key;

/// How often a referenced object that does not exist yet is looked for.
pub const MISSING_RETRY: Duration = Duration::from_secs(2);

/// The clusters a workload is assigned to, from its labels.
pub fn assigned_targets(labels: Option<&BTreeMap<String, String>>) -> BTreeSet<String> {
    labels
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_str() == SYNC_STATE_SYNC)
        .filter_map(|(k, _)| sync_target_of_label(k).map(String::from))
        .collect()
}

/// All that [`wanted`] reads of one Deployment: the clusters it is assigned to, and
/// what its pod template references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    targets: BTreeSet<String>,
    references: Option<References>,
}

impl Summary {
    /// The summary of `d`.
    pub fn of(d: &Deployment) -> Self {
        Self {
            targets: assigned_targets(d.metadata.labels.as_ref()),
            references: d.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(References::of),
        }
    }
}

impl Summary {
    /// The ConfigMaps and Secrets that Deployment `key` references, as keys in its
    /// namespace.
    fn objects(&self, key: &Key) -> Vec<Key> {
        let Some(r) = &self.references else { return Vec::new() };
        let named = |kind: Kind, names: &BTreeSet<String>| {
            names.iter().map(|n| Key::new(kind, &key.workspace, &key.namespace, n)).collect::<Vec<_>>()
        };
        [named(Kind::ConfigMap, &r.config_maps), named(Kind::Secret, &r.secrets)].concat()
    }
}

/// Which Deployments reference each ConfigMap and Secret, kept up to date one
/// Deployment event at a time, so that an event costs work in proportion to what it
/// references rather than to the size of its namespace.
#[derive(Debug, Default)]
pub struct Index {
    /// What each Deployment said when last seen.
    summaries: HashMap<Key, Summary>,
    /// The Deployments that reference each object.
    referrers: HashMap<Key, BTreeSet<Key>>,
}

impl Index {
    /// Takes in Deployment `key`'s summary after an event (`None`: it is gone), and
    /// returns the objects whose labels may have to change: those it referenced before
    /// or references now. Status writes, finalizers and the like change nothing and
    /// return nothing.
    pub fn update(&mut self, key: &Key, now: Option<Summary>) -> BTreeSet<Key> {
        let old = match now {
            Some(now) if self.summaries.get(key) == Some(&now) => return BTreeSet::new(),
            Some(now) => self.summaries.insert(key.clone(), now),
            None => self.summaries.remove(key),
        };
        let mut touched = BTreeSet::new();
        for o in old.iter().flat_map(|s| s.objects(key)) {
            if let Some(referrers) = self.referrers.get_mut(&o) {
                referrers.remove(key);
                if referrers.is_empty() {
                    self.referrers.remove(&o);
                }
            }
            touched.insert(o);
        }
        if let Some(now) = self.summaries.get(key) {
            for o in now.objects(key) {
                self.referrers.entry(o.clone()).or_default().insert(key.clone());
                touched.insert(o);
            }
        }
        touched
    }

    /// The clusters `object` must be on: the union of the clusters of the Deployments
    /// that reference it.
    pub fn wanted(&self, object: &Key) -> BTreeSet<String> {
        let referrers = self.referrers.get(object).into_iter().flatten();
        referrers.filter_map(|d| self.summaries.get(d)).flat_map(|s| s.targets.iter().cloned()).collect()
    }

    /// Every object some Deployment references.
    pub fn objects(&self) -> Vec<Key> {
        self.referrers.keys().cloned().collect()
    }
}

/// The merge patch of `metadata.labels` that gives an object with `labels` exactly the
/// assignment labels of `targets`, or `None` if it has them already. An object without
/// the `referenced` label keeps assignment labels someone else put on it.
pub fn label_patch(labels: Option<&BTreeMap<String, String>>, targets: &BTreeSet<String>) -> Option<Value> {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let managed = labels.contains_key(REFERENCED_LABEL);
    let mut patch = Map::new();
    if managed {
        for k in labels.keys() {
            if sync_target_of_label(k).is_some_and(|t| !targets.contains(t)) {
                patch.insert(k.clone(), Value::Null);
            }
        }
    }
    for t in targets {
        let k = sync_state_label(t);
        if labels.get(&k).map(String::as_str) != Some(SYNC_STATE_SYNC) {
            patch.insert(k, json!(SYNC_STATE_SYNC));
        }
    }
    match (managed, targets.is_empty()) {
        (false, false) => {
            patch.insert(REFERENCED_LABEL.into(), json!("true"));
        }
        (true, true) => {
            patch.insert(REFERENCED_LABEL.into(), Value::Null);
        }
        _ => {}
    }
    (!patch.is_empty()).then(|| json!({"metadata": {"labels": patch}}))
}

struct Controller {
    base: Client,
    deployments: Arc<Cache<Deployment>>,
    config_maps: Arc<Cache<ConfigMap>>,
    secrets: Arc<Cache<Secret>>,
    index: Mutex<Index>,
}

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let span = tracing::info_span!("references");
    async move {
        let (tx, mut rx) = mpsc::unbounded_channel::<Key>();
        let wildcard = clients::workspace(&base, "*");
        let all = watcher::Config::default();
        let referenced = watcher::Config::default().labels(REFERENCED_LABEL);
        let c = Arc::new(Controller {
            deployments: cache::spawn(Api::all(wildcard.clone()), all, Kind::Deployment, Key::upstream, tx.clone(), "deployments"),
            config_maps: cache::spawn(
                Api::all(wildcard.clone()),
                referenced.clone(),
                Kind::ConfigMap,
                Key::upstream,
                tx.clone(),
                "referenced configmaps",
            ),
            secrets: cache::spawn(Api::all(wildcard), referenced, Kind::Secret, Key::upstream, tx.clone(), "referenced secrets"),
            index: Mutex::default(),
            base,
        });
        // A Deployment event queues the objects it references, or referenced; an
        // event on a labelled object queues that object.
        let (objects_tx, objects_rx) = mpsc::unbounded_channel::<Key>();
        let forward = {
            let (objects_tx, c) = (objects_tx.clone(), c.clone());
            runtime::AbortOnDrop(tokio::spawn(async move {
                while let Some(k) = rx.recv().await {
                    let touched = match k.kind {
                        Kind::Deployment => {
                            let now = c.deployments.get(&k).map(|d| Summary::of(&d));
                            c.index.lock().unwrap_or_else(|e| e.into_inner()).update(&k, now)
                        }
                        Kind::ConfigMap | Kind::Secret => BTreeSet::from([k]),
                        Kind::Namespace => BTreeSet::new(),
                    };
                    for o in touched {
                        if objects_tx.send(o).is_err() {
                            return;
                        }
                    }
                }
            }))
        };
        let resync = {
            let c = c.clone();
            runtime::AbortOnDrop(tokio::spawn(async move {
                let mut tick = tokio::time::interval(resync);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let referenced = c.index.lock().unwrap_or_else(|e| e.into_inner()).objects();
                    let labelled: BTreeSet<Key> = referenced.into_iter().chain(c.config_maps.keys()).chain(c.secrets.keys()).collect();
                    for k in labelled {
                        let _ = objects_tx.send(k);
                    }
                }
            }))
        };
        drop(tx);
        queue::run(objects_rx, 4, |object| {
            let c = c.clone();
            let span = tracing::info_span!("label", object = %object);
            async move { c.reconcile(&object).await }.instrument(span)
        })
        .await;
        drop((forward, resync));
    }
    .instrument(span)
    .await
}

impl Controller {
    async fn reconcile(&self, key: &Key) -> Result<Next, Failed> {
        if !(self.deployments.synced() && self.config_maps.synced() && self.secrets.synced()) {
            return Ok(Next::After(MISSING_RETRY));
        }
        let targets = self.index.lock().unwrap_or_else(|e| e.into_inner()).wanted(key);
        let Some(labels) = self.labels(key).await? else {
            // It does not exist (yet): look again while something needs it.
            return Ok(if targets.is_empty() { Next::Done } else { Next::After(MISSING_RETRY) });
        };
        let Some(patch) = label_patch(labels.as_ref(), &targets) else { return Ok(Next::Done) };
        let client = clients::workspace(&self.base, &key.workspace);
        let pp = PatchParams::default();
        let result = match key.kind {
            Kind::ConfigMap => {
                Api::<ConfigMap>::namespaced(client, &key.namespace).patch(&key.name, &pp, &Patch::Merge(patch)).await.map(drop)
            }
            Kind::Secret => Api::<Secret>::namespaced(client, &key.namespace).patch(&key.name, &pp, &Patch::Merge(patch)).await.map(drop),
            Kind::Deployment | Kind::Namespace => Ok(()),
        };
        match result {
            Ok(()) => tracing::debug!(clusters = ?targets, "labelled"),
            Err(e) if is_not_found(&e) => return Ok(if targets.is_empty() { Next::Done } else { Next::After(MISSING_RETRY) }),
            Err(e) => return Err(failed(format!("labelling {key}"))(e)),
        }
        Ok(Next::Done)
    }

    /// The labels of a referenced object: from the cache if it is labelled already,
    /// else read; `None` if it does not exist.
    async fn labels(&self, key: &Key) -> Result<Option<Option<BTreeMap<String, String>>>, Failed> {
        let cached = match key.kind {
            Kind::ConfigMap => self.config_maps.get(key).map(|o| o.metadata.labels.clone()),
            Kind::Secret => self.secrets.get(key).map(|o| o.metadata.labels.clone()),
            Kind::Deployment | Kind::Namespace => None,
        };
        if cached.is_some() {
            return Ok(cached);
        }
        let client = clients::workspace(&self.base, &key.workspace);
        let read = match key.kind {
            Kind::ConfigMap => {
                Api::<ConfigMap>::namespaced(client, &key.namespace).get_opt(&key.name).await.map(|o| o.map(|o| o.metadata.labels))
            }
            Kind::Secret => {
                Api::<Secret>::namespaced(client, &key.namespace).get_opt(&key.name).await.map(|o| o.map(|o| o.metadata.labels))
            }
            Kind::Deployment | Kind::Namespace => Ok(None),
        };
        read.map_err(failed(format!("reading {key}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(labels: &[(&str, &str)], config_map: &str, secret: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>()},
            "spec": {"selector": {}, "template": {"spec": {
                "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": config_map}}]}],
                "volumes": [{"name": "s", "secret": {"secretName": secret}}]}}}
        }))
        .unwrap()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn key(kind: Kind, name: &str) -> Key {
        Key::new(kind, "ws", "default", name)
    }

    #[test]
    fn a_referenced_object_goes_to_every_cluster_of_every_referrer() {
        let a = deployment(&[("state.workload.flotilla.io/east", "Sync"), ("app", "a")], "shared", "a-secret");
        let b = deployment(&[("state.workload.flotilla.io/west", "Sync")], "shared", "b-secret");
        let unassigned = deployment(&[("app", "c")], "lonely", "lonely");
        let pending = deployment(&[("state.workload.flotilla.io/north", "Pending")], "p", "p");
        let mut index = Index::default();
        for (name, d) in [("a", &a), ("b", &b), ("c", &unassigned), ("p", &pending)] {
            index.update(&key(Kind::Deployment, name), Some(Summary::of(d)));
        }
        assert_eq!(index.wanted(&key(Kind::ConfigMap, "shared")), set(&["east", "west"]));
        assert_eq!(index.wanted(&key(Kind::Secret, "a-secret")), set(&["east"]));
        assert_eq!(index.wanted(&key(Kind::Secret, "b-secret")), set(&["west"]));
        assert_eq!(index.wanted(&key(Kind::ConfigMap, "lonely")), set(&[]), "an unassigned referrer wants nothing");
        assert_eq!(index.wanted(&key(Kind::Secret, "p")), set(&[]), "nor does one only Pending somewhere");
        assert_eq!(index.wanted(&key(Kind::Secret, "shared")), set(&[]), "a ConfigMap's name says nothing of a Secret");
        // One referrer goes: the shared ConfigMap follows the other alone.
        let touched = index.update(&key(Kind::Deployment, "a"), None);
        assert_eq!(touched, BTreeSet::from([key(Kind::ConfigMap, "shared"), key(Kind::Secret, "a-secret")]));
        assert_eq!(index.wanted(&key(Kind::ConfigMap, "shared")), set(&["west"]));
        assert_eq!(index.wanted(&key(Kind::Secret, "a-secret")), set(&[]));
        assert!(!index.objects().contains(&key(Kind::Secret, "a-secret")), "an object no one references is forgotten");
    }

    #[test]
    fn only_events_that_change_assignment_or_references_count() {
        let mut index = Index::default();
        let d = key(Kind::Deployment, "d");
        let (cfg, sec) = (key(Kind::ConfigMap, "cfg"), key(Kind::Secret, "sec"));
        let east = deployment(&[("state.workload.flotilla.io/east", "Sync")], "cfg", "sec");
        assert_eq!(index.update(&d, Some(Summary::of(&east))), BTreeSet::from([cfg.clone(), sec.clone()]), "first sight");
        let mut status_only = east.clone();
        status_only.metadata.finalizers = Some(vec!["workload.flotilla.io/syncer-east".into()]);
        status_only.status = Some(Default::default());
        assert!(index.update(&d, Some(Summary::of(&status_only))).is_empty(), "a finalizer and a status change nothing");
        let moved = deployment(&[("state.workload.flotilla.io/west", "Sync")], "cfg", "sec");
        assert_eq!(index.update(&d, Some(Summary::of(&moved))), BTreeSet::from([cfg.clone(), sec.clone()]), "reassigned");
        let other = deployment(&[("state.workload.flotilla.io/west", "Sync")], "cfg2", "sec");
        let cfg2 = key(Kind::ConfigMap, "cfg2");
        assert_eq!(
            index.update(&d, Some(Summary::of(&other))),
            BTreeSet::from([cfg.clone(), cfg2.clone(), sec.clone()]),
            "another ConfigMap"
        );
        assert_eq!(index.update(&d, None), BTreeSet::from([cfg2, sec]), "gone");
        assert!(index.objects().is_empty() && index.summaries.is_empty());
    }

    #[test]
    fn labels_are_added_moved_and_removed_but_only_managed_ones_are_taken() {
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>();
        // A fresh object gets the clusters' labels and the marker.
        assert_eq!(
            label_patch(Some(&labels(&[("app", "x")])), &set(&["east"])),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": "Sync", REFERENCED_LABEL: "true"}}}))
        );
        // A managed object moves from east to west.
        let managed = labels(&[(REFERENCED_LABEL, "true"), ("state.workload.flotilla.io/east", "Sync")]);
        assert_eq!(
            label_patch(Some(&managed), &set(&["west"])),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": null, "state.workload.flotilla.io/west": "Sync"}}}))
        );
        // Nothing to do when it is right.
        assert_eq!(label_patch(Some(&managed), &set(&["east"])), None);
        // No referrer left: both labels go.
        assert_eq!(
            label_patch(Some(&managed), &BTreeSet::new()),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": null, REFERENCED_LABEL: null}}}))
        );
        // Someone else's assignment label on an unmanaged object stays.
        let theirs = labels(&[("state.workload.flotilla.io/north", "Sync")]);
        assert_eq!(label_patch(Some(&theirs), &BTreeSet::new()), None);
        assert_eq!(
            label_patch(Some(&theirs), &set(&["east"])),
            Some(json!({"metadata": {"labels": {"state.workload.flotilla.io/east": "Sync", REFERENCED_LABEL: "true"}}}))
        );
        assert_eq!(label_patch(None, &BTreeSet::new()), None);
    }
}
