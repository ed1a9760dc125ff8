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
use std::fmt;
use std::sync::Arc;
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

use crate::cache::{self, Cache};
use crate::error::{is_not_found, upstream, Error};
use crate::key::{Key, Kind};
use crate::queue::{self, Next};
use crate::{clients, transform};

/// How often a referenced object that does not exist yet is looked for.
pub const MISSING_RETRY: Duration = Duration::from_secs(2);

/// One namespace of one workspace: the unit this controller works on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Namespace {
    workspace: String,
    namespace: String,
}

impl Namespace {
    fn of(key: &Key) -> Self {
        Self { workspace: key.workspace.clone(), namespace: key.namespace.clone() }
    }

    fn holds(&self, key: &Key) -> bool {
        key.workspace == self.workspace && key.namespace == self.namespace
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.workspace, self.namespace)
    }
}

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
    references: Option<transform::References>,
}

impl Summary {
    /// The summary of `d`.
    pub fn of(d: &Deployment) -> Self {
        Self {
            targets: assigned_targets(d.metadata.labels.as_ref()),
            references: d.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(transform::References::of),
        }
    }
}

/// Whether a Deployment event can change any label: `now` is the Deployment's summary
/// after the event (`None`: it is gone), and `seen` what each Deployment said when it
/// last could. Status writes, finalizers and the like change nothing, and so do not
/// queue their namespace, which would otherwise be worked through again (all of its
/// Deployments) on every status change of any of them.
pub fn relevant(seen: &mut HashMap<Key, Summary>, key: &Key, now: Option<Summary>) -> bool {
    match now {
        Some(now) if seen.get(key) == Some(&now) => false,
        Some(now) => {
            seen.insert(key.clone(), now);
            true
        }
        None => {
            seen.remove(key);
            true
        }
    }
}

/// For each ConfigMap and Secret that the given Deployments reference, the clusters it
/// must be on: the union of the clusters of the Deployments that reference it.
pub fn wanted<'a>(deployments: impl IntoIterator<Item = &'a Deployment>) -> BTreeMap<(Kind, String), BTreeSet<String>> {
    let mut out: BTreeMap<(Kind, String), BTreeSet<String>> = BTreeMap::new();
    for d in deployments {
        let Summary { targets, references } = Summary::of(d);
        if targets.is_empty() {
            continue;
        }
        let Some(refs) = references else { continue };
        let named = refs.config_maps.into_iter().map(|n| (Kind::ConfigMap, n)).chain(refs.secrets.into_iter().map(|n| (Kind::Secret, n)));
        for r in named {
            out.entry(r).or_default().extend(targets.iter().cloned());
        }
    }
    out
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
            base,
        });
        // Every change that can change a label queues its namespace.
        let (ns_tx, ns_rx) = mpsc::unbounded_channel::<Namespace>();
        let forward = {
            let (ns_tx, c) = (ns_tx.clone(), c.clone());
            crate::AbortOnDrop(tokio::spawn(async move {
                let mut seen = HashMap::new();
                while let Some(k) = rx.recv().await {
                    if k.kind == Kind::Deployment && !relevant(&mut seen, &k, c.deployments.get(&k).map(|d| Summary::of(&d))) {
                        continue;
                    }
                    if ns_tx.send(Namespace::of(&k)).is_err() {
                        return;
                    }
                }
            }))
        };
        let resync = {
            let c = c.clone();
            crate::AbortOnDrop(tokio::spawn(async move {
                let mut tick = tokio::time::interval(resync);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let keys = c.deployments.keys().into_iter().chain(c.config_maps.keys()).chain(c.secrets.keys());
                    let namespaces: BTreeSet<(String, String)> = keys.map(|k| (k.workspace, k.namespace)).collect();
                    for (workspace, namespace) in namespaces {
                        let _ = ns_tx.send(Namespace { workspace, namespace });
                    }
                }
            }))
        };
        drop(tx);
        queue::run(ns_rx, 4, |ns| {
            let c = c.clone();
            let span = tracing::info_span!("label", namespace = %ns);
            async move { c.reconcile(&ns).await }.instrument(span)
        })
        .await;
        drop((forward, resync));
    }
    .instrument(span)
    .await
}

impl Controller {
    async fn reconcile(&self, ns: &Namespace) -> Result<Next, Error> {
        if !(self.deployments.synced() && self.config_maps.synced() && self.secrets.synced()) {
            return Ok(Next::After(MISSING_RETRY));
        }
        let deployments = self.deployments.values_where(|k| ns.holds(k));
        let mut objects = wanted(deployments.iter().map(|d| &**d));
        // What is labelled now but no longer wanted gets its labels taken away.
        let labelled = self.config_maps.keys_where(|k| ns.holds(k)).into_iter().chain(self.secrets.keys_where(|k| ns.holds(k)));
        for k in labelled {
            objects.entry((k.kind, k.name)).or_default();
        }
        let mut missing = false;
        for ((kind, name), targets) in objects {
            let key = Key::new(kind, &ns.workspace, &ns.namespace, &name);
            let labels = match self.labels(&key).await? {
                Some(l) => l,
                None => {
                    missing |= !targets.is_empty();
                    continue;
                }
            };
            let Some(patch) = label_patch(labels.as_ref(), &targets) else { continue };
            let client = clients::workspace(&self.base, &ns.workspace);
            let pp = PatchParams::default();
            let result = match kind {
                Kind::ConfigMap => {
                    Api::<ConfigMap>::namespaced(client, &ns.namespace).patch(&name, &pp, &Patch::Merge(patch)).await.map(drop)
                }
                Kind::Secret => Api::<Secret>::namespaced(client, &ns.namespace).patch(&name, &pp, &Patch::Merge(patch)).await.map(drop),
                Kind::Deployment => Ok(()),
            };
            match result {
                Ok(()) => tracing::debug!(object = %key, clusters = ?targets, "labelled"),
                Err(e) if is_not_found(&e) => missing |= !targets.is_empty(),
                Err(e) => return Err(upstream(format!("labelling {key}"))(e)),
            }
        }
        Ok(if missing { Next::After(MISSING_RETRY) } else { Next::Done })
    }

    /// The labels of a referenced object: from the cache if it is labelled already,
    /// else read; `None` if it does not exist.
    async fn labels(&self, key: &Key) -> Result<Option<Option<BTreeMap<String, String>>>, Error> {
        let cached = match key.kind {
            Kind::ConfigMap => self.config_maps.get(key).map(|o| o.metadata.labels.clone()),
            Kind::Secret => self.secrets.get(key).map(|o| o.metadata.labels.clone()),
            Kind::Deployment => None,
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
            Kind::Deployment => Ok(None),
        };
        read.map_err(upstream(format!("reading {key}")))
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

    #[test]
    fn a_referenced_object_goes_to_every_cluster_of_every_referrer() {
        let a = deployment(&[("state.workload.flotilla.io/east", "Sync"), ("app", "a")], "shared", "a-secret");
        let b = deployment(&[("state.workload.flotilla.io/west", "Sync")], "shared", "b-secret");
        let unassigned = deployment(&[("app", "c")], "lonely", "lonely");
        let pending = deployment(&[("state.workload.flotilla.io/north", "Pending")], "p", "p");
        let w = wanted([&a, &b, &unassigned, &pending]);
        assert_eq!(
            w,
            BTreeMap::from([
                ((Kind::ConfigMap, "shared".to_string()), set(&["east", "west"])),
                ((Kind::Secret, "a-secret".to_string()), set(&["east"])),
                ((Kind::Secret, "b-secret".to_string()), set(&["west"])),
            ])
        );
    }

    #[test]
    fn only_events_that_change_assignment_or_references_count() {
        let mut seen = HashMap::new();
        let key = Key::new(Kind::Deployment, "ws", "default", "d");
        let east = deployment(&[("state.workload.flotilla.io/east", "Sync")], "cfg", "sec");
        assert!(relevant(&mut seen, &key, Some(Summary::of(&east))), "first sight");
        let mut status_only = east.clone();
        status_only.metadata.finalizers = Some(vec!["workload.flotilla.io/syncer-east".into()]);
        status_only.status = Some(Default::default());
        assert!(!relevant(&mut seen, &key, Some(Summary::of(&status_only))), "a finalizer and a status change nothing");
        let moved = deployment(&[("state.workload.flotilla.io/west", "Sync")], "cfg", "sec");
        assert!(relevant(&mut seen, &key, Some(Summary::of(&moved))), "reassigned");
        let other = deployment(&[("state.workload.flotilla.io/west", "Sync")], "cfg2", "sec");
        assert!(relevant(&mut seen, &key, Some(Summary::of(&other))), "another ConfigMap");
        assert!(relevant(&mut seen, &key, None), "gone");
        assert!(seen.is_empty());
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
