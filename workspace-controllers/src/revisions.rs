//! Rollout history in the workspaces: one ReplicaSet per template revision of each
//! Deployment, as Kubernetes' deployment controller keeps them, so that `kubectl rollout
//! history` and `kubectl rollout undo` work in a workspace.
//!
//! A workspace runs no pods, so its ReplicaSets only record: each is named
//! `<deployment>-<pod-template-hash>`, is controlled by its Deployment, carries the
//! template with the `pod-template-hash` label and the annotations the deployment
//! controller writes (`deployment.kubernetes.io/revision`, `revision-history`,
//! `desired-replicas`, `max-replicas`, and the Deployment's own annotations but
//! kubectl's and those). The current revision's ReplicaSet has the Deployment's replicas
//! and the replica counts summed from its clusters; older ones have none. A template
//! that matches an older ReplicaSet (an undo) takes that one back at a new revision, the
//! old number going into its `revision-history`. The Deployment's own
//! `deployment.kubernetes.io/revision` names the current one. Beyond
//! `spec.revisionHistoryLimit` (10 by default), the oldest revisions are deleted.
//!
//! These ReplicaSets never leave the workspace: each cluster's own deployment
//! controller keeps its own. The pod-template hash is [`apimachinery::template_hash`]'s,
//! the one the simulated clusters use too: stable, and written with the letters
//! Kubernetes uses, but not the hash a real cluster computes from its Go structures,
//! which nothing compares.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{json, Map, Value};

use apimachinery::template_hash::{canonical, hash_canonical};
use placement_api::synced::Kind;
use runtime::cache::{ObjKey, Workspace};
use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{failed, is_already_exists, is_not_found, Failed};
use runtime::key as cache;
use runtime::settled::Settled;
use runtime::Key;

/// The field manager of what this controller writes.
pub const FIELD_MANAGER: &str = "flotilla-revisions";
/// A ReplicaSet's revision, and the Deployment's current one.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The revisions a ReplicaSet had before its current one.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The label that tells a template's ReplicaSet (and its pods) from the others.
pub use apimachinery::template_hash::POD_TEMPLATE_HASH_LABEL as HASH_LABEL;
/// The Deployment annotations a ReplicaSet does not copy (the deployment controller's
/// annotationsToSkip).
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];
/// The revisions kept when a Deployment does not say (apps/v1 default).
const DEFAULT_HISTORY_LIMIT: i32 = 10;
/// The longest `revision-history`, in characters (the deployment controller's).
const MAX_HISTORY_CHARS: usize = 2000;

fn revision_of(rs: &ReplicaSet) -> Option<i64> {
    rs.metadata.annotations.as_ref()?.get(REVISION)?.parse().ok()
}

/// What one pass writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create this ReplicaSet.
    Create(Value),
    /// Merge-patch a ReplicaSet (its annotations and replicas).
    Update(String, Value),
    /// Merge-patch a ReplicaSet's status.
    Status(String, Value),
    /// Delete a revision past the history limit.
    Delete(String),
    /// Set the Deployment's `deployment.kubernetes.io/revision`.
    Revision(String),
}

/// The most replicas a rollout may run: the replicas plus the surge, a percentage
/// rounded up, none for Recreate.
fn max_replicas(d: &Deployment, replicas: i32) -> i32 {
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return replicas;
    }
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let surge = match strategy.and_then(|s| s.rolling_update.as_ref()).and_then(|r| r.max_surge.as_ref()) {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(p)) => {
            let percent: i64 = p.trim_end_matches('%').parse().unwrap_or(25);
            ((i64::from(replicas) * percent + 99) / 100) as i32
        }
        None => (replicas + 3) / 4,
    };
    replicas + surge
}

/// What `d`'s ReplicaSets should become, given `owned` (those it controls) and
/// `taken` (whether a ReplicaSet name is in use in the namespace).
pub fn plan(d: &Deployment, owned: &[&ReplicaSet], taken: impl Fn(&str) -> bool) -> Vec<Action> {
    let (Some(name), Some(uid), Some(spec)) = (d.metadata.name.as_deref(), d.metadata.uid.as_deref(), d.spec.as_ref()) else {
        return Vec::new();
    };
    let template = serde_json::to_value(&spec.template).unwrap_or_default();
    let bare = canonical(template);
    let replicas = spec.replicas.unwrap_or(1);
    let max_revision = owned.iter().filter_map(|rs| revision_of(rs)).max().unwrap_or(0);
    let mut copied: Map<String, Value> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    copied.insert(DESIRED_REPLICAS.into(), json!(replicas.to_string()));
    copied.insert(MAX_REPLICAS.into(), json!(max_replicas(d, replicas).to_string()));
    let mut oldest_first: Vec<&ReplicaSet> = owned.to_vec();
    oldest_first
        .sort_by(|a, b| (&a.metadata.creation_timestamp, &a.metadata.name).cmp(&(&b.metadata.creation_timestamp, &b.metadata.name)));
    let current = oldest_first.iter().copied().find(|rs| {
        let t = rs.spec.as_ref().and_then(|s| s.template.as_ref()).map(|t| serde_json::to_value(t).unwrap_or_default());
        t.is_some_and(|t| canonical(t) == bare)
    });
    let mut actions = Vec::new();
    let (current_name, revision) = match current {
        None => {
            let (hash, rs_name) = (0..)
                .map(|c: i32| hash_canonical(&bare, (c > 0).then_some(c)))
                .map(|h| (h.clone(), format!("{name}-{h}")))
                .find(|(_, n)| !taken(n))
                .expect("some collision count gives a free name");
            let revision = max_revision + 1;
            copied.insert(REVISION.into(), json!(revision.to_string()));
            let mut labels = bare.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
            labels.insert(HASH_LABEL.into(), json!(hash));
            let mut rs_template = bare.clone();
            rs_template["metadata"]["labels"] = Value::Object(labels.clone());
            let mut selector = serde_json::to_value(&spec.selector).unwrap_or_default();
            selector["matchLabels"][HASH_LABEL] = json!(hash);
            actions.push(Action::Create(json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": rs_name,
                    "labels": labels,
                    "annotations": copied,
                    "ownerReferences": [{
                        "apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid,
                        "controller": true, "blockOwnerDeletion": true,
                    }],
                },
                "spec": {"replicas": replicas, "minReadySeconds": spec.min_ready_seconds.unwrap_or(0), "selector": selector, "template": rs_template},
            })));
            (rs_name, revision)
        }
        Some(rs) => {
            let rs_name = rs.metadata.name.clone().unwrap_or_default();
            let had = revision_of(rs).unwrap_or(0);
            let annotations = rs.metadata.annotations.clone().unwrap_or_default();
            // Taken back from history: a new revision, the old one remembered.
            let revision = if had < max_revision || had == 0 {
                if had > 0 {
                    let mut history: Vec<String> =
                        annotations.get(REVISION_HISTORY).map(|h| h.split(',').map(String::from).collect()).unwrap_or_default();
                    history.push(had.to_string());
                    while history.join(",").len() > MAX_HISTORY_CHARS && history.len() > 1 {
                        history.remove(0);
                    }
                    copied.insert(REVISION_HISTORY.into(), json!(history.join(",")));
                }
                max_revision + 1
            } else {
                had
            };
            copied.insert(REVISION.into(), json!(revision.to_string()));
            let stale = copied.iter().any(|(k, v)| annotations.get(k).map(|a| json!(a)) != Some(v.clone()));
            let rs_replicas = rs.spec.as_ref().and_then(|s| s.replicas);
            if stale || rs_replicas != Some(replicas) {
                actions.push(Action::Update(rs_name.clone(), json!({"metadata": {"annotations": copied}, "spec": {"replicas": replicas}})));
            }
            (rs_name, revision)
        }
    };
    // The counts of the current revision are the Deployment's, summed from its clusters.
    let status = d.status.clone().unwrap_or_default();
    let counts = |replicas: i32, ready: i32, available: i32, generation: Option<i64>| json!({"replicas": replicas, "fullyLabeledReplicas": replicas, "readyReplicas": ready, "availableReplicas": available, "observedGeneration": generation});
    for rs in owned {
        let rs_name = rs.metadata.name.clone().unwrap_or_default();
        let want = if rs_name == current_name {
            counts(
                status.replicas.unwrap_or(0),
                status.ready_replicas.unwrap_or(0),
                status.available_replicas.unwrap_or(0),
                rs.metadata.generation,
            )
        } else {
            if rs.spec.as_ref().and_then(|s| s.replicas) != Some(0) {
                actions.push(Action::Update(rs_name.clone(), json!({"spec": {"replicas": 0}})));
            }
            counts(0, 0, 0, rs.metadata.generation)
        };
        let have = serde_json::to_value(rs.status.clone().unwrap_or_default()).unwrap_or_default();
        let same = ["replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration"]
            .iter()
            .all(|f| have.get(*f).and_then(Value::as_i64).unwrap_or(0) == want[*f].as_i64().unwrap_or(0));
        if !same {
            actions.push(Action::Status(rs_name, want));
        }
    }
    let revision = revision.to_string();
    if d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)) != Some(&revision) {
        actions.push(Action::Revision(revision));
    }
    // Past the history limit, the oldest revisions go.
    let limit = usize::try_from(spec.revision_history_limit.unwrap_or(DEFAULT_HISTORY_LIMIT)).unwrap_or(0);
    let mut old: Vec<(i64, String)> = owned
        .iter()
        .filter_map(|rs| Some((revision_of(rs).unwrap_or(0), rs.metadata.name.clone()?)))
        .filter(|(_, n)| *n != current_name)
        .collect();
    old.sort();
    let excess = old.len().saturating_sub(limit);
    actions.extend(old.into_iter().take(excess).map(|(_, n)| Action::Delete(n)));
    actions
}

/// A digest of everything [`plan`] reads: the Deployment's identity, spec (its
/// generation moves with every spec change), annotations and replica counts, and each
/// owned ReplicaSet's version.
fn fingerprint(d: &Deployment, owned: &[&ReplicaSet]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&d.metadata.uid, d.metadata.generation, &d.metadata.annotations).hash(&mut h);
    d.status.as_ref().map(|s| (s.replicas, s.ready_replicas, s.available_replicas)).hash(&mut h);
    for rs in owned {
        (&rs.metadata.name, &rs.metadata.resource_version).hash(&mut h);
    }
    h.finish()
}

/// Whether `rs` is controlled by the Deployment with `uid`.
fn controlled_by(rs: &ReplicaSet, uid: &str) -> bool {
    rs.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The key of the Deployment that controls `rs`.
fn owner_key(key: &ObjKey, rs: &ReplicaSet) -> Option<Key> {
    let owner = rs.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true) && o.kind == "Deployment")?;
    Some(Key::new(Kind::Deployment, &key.workspace, &key.namespace, &owner.name))
}

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let mut controller = Controller::<Key>::new("revisions");
    let tx = controller.trigger();
    let wildcard = clients::workspace(&base, "*");
    let deployments = cache::spawn(
        Api::<Deployment>::all(wildcard.clone()),
        watcher::Config::default(),
        Kind::Deployment,
        Key::upstream,
        tx.clone(),
        "deployments",
    );
    let replicasets = cache::spawn_grouped(
        Api::<ReplicaSet>::all(wildcard),
        watcher::Config::default(),
        |rs: &ReplicaSet| ObjKey::of(rs.meta(), Workspace::Annotated),
        // Each under its Deployment, so that a pass finds a Deployment's own
        // without looking at every ReplicaSet of every workspace.
        Some(Box::new(|key: &ObjKey, rs: &ReplicaSet| owner_key(key, rs).map(|d| ObjKey::new(&d.workspace, &d.namespace, &d.name)))),
        owner_key,
        tx.clone(),
        "replicasets",
    );
    let settled: Arc<Settled<Key>> = Arc::default();
    let d = deployments.clone();
    controller.resync(resync, move || d.keys());
    controller
        .run(|key| {
            let d = deployments.get(&key);
            let (replicasets, settled) = (replicasets.clone(), settled.clone());
            let base = base.clone();
            async move {
                let Some(d) = d else {
                    settled.forget(&key);
                    return Ok::<_, Failed>(Next::Done);
                };
                // Until the first list, a missing ReplicaSet may only be unseen yet.
                if !replicasets.synced() {
                    return Ok(Next::After(Duration::from_millis(200)));
                }
                let uid = d.metadata.uid.clone().unwrap_or_default();
                // The ReplicaSets it controls, from the cache's index of them: a pass
                // costs the same however many there are in all.
                let owned: Vec<_> = replicasets
                    .grouped(&ObjKey::new(&key.workspace, &key.namespace, &key.name))
                    .into_iter()
                    .filter(|rs| controlled_by(rs, &uid))
                    .collect();
                let mut owned_refs: Vec<&ReplicaSet> = owned.iter().map(|rs| &**rs).collect();
                owned_refs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                let taken = |n: &str| replicasets.get(&ObjKey::new(&key.workspace, &key.namespace, n)).is_some();
                // Most events (labels, finalizers, the cluster's reports) change nothing
                // a pass reads: those that leave its inputs as a settled pass saw them
                // are skipped.
                let inputs = fingerprint(&d, &owned_refs);
                if settled.unchanged(&key, inputs) {
                    return Ok(Next::Done);
                }
                let actions = plan(&d, &owned_refs, taken);
                let quiet = actions.is_empty();
                let next = apply(&base, &key, actions).await?;
                settled.record(key, inputs, quiet);
                Ok(next)
            }
        })
        .await;
}

/// Writes what a pass planned. Each write's watch event brings the Deployment back.
async fn apply(base: &Client, key: &Key, actions: Vec<Action>) -> Result<Next, Failed> {
    let client = clients::workspace(base, &key.workspace);
    let rs_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &key.namespace, &ApiResource::erase::<ReplicaSet>(&()));
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    for action in actions {
        let (what, result) = match action {
            Action::Create(rs) => {
                let name = rs["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let post = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                let rs: DynamicObject =
                    serde_json::from_value(rs).map_err(|e| failed(format!("building ReplicaSet {name}"))(kube::Error::SerdeError(e)))?;
                match rs_api.create(&post, &rs).await {
                    Err(e) if is_already_exists(&e) => return Ok(Next::After(Duration::from_millis(100))),
                    r => (format!("creating ReplicaSet {name}"), r.map(|_| ())),
                }
            }
            Action::Update(name, patch) => {
                (format!("updating ReplicaSet {name}"), rs_api.patch(&name, &params, &Patch::Merge(&patch)).await.map(|_| ()))
            }
            Action::Status(name, status) => (
                format!("writing the status of ReplicaSet {name}"),
                rs_api.patch_status(&name, &params, &Patch::Merge(&json!({"status": status}))).await.map(|_| ()),
            ),
            Action::Delete(name) => {
                (format!("deleting old revision {name}"), rs_api.delete(&name, &DeleteParams::background()).await.map(|_| ()))
            }
            Action::Revision(revision) => {
                let api: Api<Deployment> = Api::namespaced(client.clone(), &key.namespace);
                let patch = json!({"metadata": {"annotations": {REVISION: revision}}});
                (format!("recording revision {revision}"), api.patch_status(&key.name, &params, &Patch::Merge(&patch)).await.map(|_| ()))
            }
        };
        match result {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Ok(Next::Done),
            Err(e) => return Err(failed(format!("{what} for {key}"))(e)),
        }
    }
    Ok(Next::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str, annotations: &[(&str, &str)]) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                         "annotations": annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>()},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}},
            },
            "status": {"replicas": 4, "readyReplicas": 3, "availableReplicas": 3},
        }))
        .unwrap()
    }

    /// The ReplicaSet a Create action makes, as the server would store it.
    fn created(actions: &[Action], at: &str) -> ReplicaSet {
        let Some(Action::Create(rs)) = actions.iter().find(|a| matches!(a, Action::Create(_))) else { panic!("no create in {actions:?}") };
        let mut rs = rs.clone();
        rs["metadata"]["creationTimestamp"] = json!(at);
        serde_json::from_value(rs).unwrap()
    }

    fn revision_written(actions: &[Action]) -> Option<&str> {
        actions.iter().find_map(|a| match a {
            Action::Revision(r) => Some(r.as_str()),
            _ => None,
        })
    }

    #[test]
    fn a_replica_set_is_named_by_the_shared_template_hash() {
        let d = deployment("nginx:1.27", &[]);
        let a = plan(&d, &[], |_| false);
        let rs = created(&a, "2026-01-01T00:00:00Z");
        let template = serde_json::to_value(&d.spec.as_ref().unwrap().template).unwrap();
        let hash = apimachinery::template_hash::pod_template_hash(&template, None);
        assert_eq!(rs.metadata.name.as_deref(), Some(format!("web-{hash}").as_str()));
        assert_eq!(rs.metadata.labels.as_ref().unwrap()[HASH_LABEL], hash);
        // A name taken by another template's ReplicaSet: the next collision count.
        let a = plan(&d, &[], |n| n == format!("web-{hash}"));
        let moved = apimachinery::template_hash::pod_template_hash(&template, Some(1));
        assert_eq!(created(&a, "2026-01-01T00:00:00Z").metadata.name.as_deref(), Some(format!("web-{moved}").as_str()));
    }

    #[test]
    fn each_template_gets_a_revision_and_an_undo_takes_an_old_one_back() {
        let v1 = deployment("nginx:1.27", &[("kubernetes.io/change-cause", "first")]);
        let a = plan(&v1, &[], |_| false);
        let rs1 = created(&a, "2026-01-01T00:00:00Z");
        assert_eq!(revision_of(&rs1), Some(1));
        assert_eq!(revision_written(&a), Some("1"));
        let name1 = rs1.metadata.name.clone().unwrap();
        assert!(name1.starts_with("web-"), "{name1}");
        let hash = rs1.metadata.labels.as_ref().unwrap()[HASH_LABEL].clone();
        assert_eq!(rs1.spec.as_ref().unwrap().selector.match_labels.as_ref().unwrap()[HASH_LABEL], hash);
        let annotations = rs1.metadata.annotations.clone().unwrap();
        assert_eq!(annotations["kubernetes.io/change-cause"], "first");
        assert_eq!((annotations[DESIRED_REPLICAS].as_str(), annotations[MAX_REPLICAS].as_str()), ("4", "5"));
        assert_eq!(rs1.metadata.owner_references.as_ref().unwrap()[0].uid, "u-1");

        // A new image: a second revision; the first is scaled to none.
        let mut v2 = deployment("nginx:1.28", &[(REVISION, "1")]);
        v2.metadata.annotations.as_mut().unwrap().insert("kubernetes.io/change-cause".into(), "second".into());
        let a = plan(&v2, &[&rs1], |n| n == name1);
        let rs2 = created(&a, "2026-01-02T00:00:00Z");
        assert_eq!(revision_of(&rs2), Some(2));
        assert_eq!(revision_written(&a), Some("2"));
        assert!(a.contains(&Action::Update(name1.clone(), json!({"spec": {"replicas": 0}}))), "{a:?}");

        // Undo: the first template again takes back its ReplicaSet as revision 3.
        let mut rs1_scaled = rs1.clone();
        rs1_scaled.spec.as_mut().unwrap().replicas = Some(0);
        let mut back = deployment("nginx:1.27", &[(REVISION, "2")]);
        back.metadata.annotations.as_mut().unwrap().insert("kubernetes.io/change-cause".into(), "first".into());
        let a = plan(&back, &[&rs1_scaled, &rs2], |_| true);
        assert!(!a.iter().any(|x| matches!(x, Action::Create(_))), "no new ReplicaSet: {a:?}");
        let Some(Action::Update(n, patch)) = a.iter().find(|x| matches!(x, Action::Update(n, _) if *n == name1)) else { panic!("{a:?}") };
        assert_eq!(n, &name1);
        assert_eq!(patch["metadata"]["annotations"][REVISION], "3");
        assert_eq!(patch["metadata"]["annotations"][REVISION_HISTORY], "1");
        assert_eq!(patch["spec"]["replicas"], 4);
        assert_eq!(revision_written(&a), Some("3"));
    }

    #[test]
    fn the_current_revision_carries_the_summed_counts_and_old_ones_past_the_limit_go() {
        let mut d = deployment("nginx:1.30", &[]);
        d.spec.as_mut().unwrap().revision_history_limit = Some(1);
        let old: Vec<ReplicaSet> = (1..=3)
            .map(|i| {
                let v = deployment(&format!("nginx:1.2{i}"), &[]);
                let mut rs = created(&plan(&v, &[], |_| false), &format!("2026-01-0{i}T00:00:00Z"));
                rs.metadata.annotations.as_mut().unwrap().insert(REVISION.into(), i.to_string());
                rs.metadata.name = Some(format!("web-old{i}"));
                rs
            })
            .collect();
        let refs: Vec<&ReplicaSet> = old.iter().collect();
        let a = plan(&d, &refs, |_| false);
        let rs = created(&a, "2026-02-01T00:00:00Z");
        assert_eq!(revision_of(&rs), Some(4));
        let deleted: Vec<&str> = a.iter().filter_map(|x| if let Action::Delete(n) = x { Some(n.as_str()) } else { None }).collect();
        assert_eq!(deleted, ["web-old1", "web-old2"], "one old revision is kept");
        // Once it exists, its status is the Deployment's.
        let a = plan(&d, &[&rs], |_| true);
        let status = a.iter().find_map(|x| if let Action::Status(_, s) = x { Some(s.clone()) } else { None }).expect("a status");
        assert_eq!(
            (status["replicas"].as_i64(), status["readyReplicas"].as_i64(), status["availableReplicas"].as_i64()),
            (Some(4), Some(3), Some(3))
        );
    }
}
