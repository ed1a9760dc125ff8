//! Rollout history of StatefulSets and DaemonSets in the workspaces: one
//! ControllerRevision per template revision, as their Kubernetes controllers keep them,
//! so that `kubectl rollout history|undo sts/NAME` and `ds/NAME` work in a workspace.
//!
//! Which kinds keep their history this way is the workload model's
//! ([`WorkloadKind::describe`]'s `history`). Each revision is named
//! `<object>-<template hash>` ([`apimachinery::template_hash`]'s hash), is controlled
//! by its object, carries the object's selector labels and
//! `controller.kubernetes.io/hash` and its object's annotations (its change-cause), and
//! holds the template as kubectl applies it on an
//! undo: `{"spec":{"template":{...,"$patch":"replace"}}}`. A template that matches an
//! older revision (an undo) takes that revision back under the next number. Beyond
//! `spec.revisionHistoryLimit` (10 by default) the oldest go. Each cluster's own
//! controller keeps its own revisions; these never leave the workspace.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, StatefulSet};
use k8s_openapi::Metadata;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use placement_api::workload::{History, WorkloadKind};
use serde_json::{json, Value};

use apimachinery::template_hash::{canonical, hash_canonical};
use runtime::cache::{self, ObjKey, Workspace};
use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{failed, is_already_exists, is_not_found, Failed};
use runtime::settled::Settled;

/// The field manager of what this controller writes.
pub const FIELD_MANAGER: &str = "flotilla-controller-revisions";
/// The label with a revision's template hash.
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// The revisions kept when an object does not say (apps/v1 default).
const DEFAULT_HISTORY_LIMIT: i64 = 10;

/// What one pass writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create this ControllerRevision.
    Create(Value),
    /// Give a revision a new number (an undo took it back).
    Renumber(String, i64),
    /// Delete a revision past the history limit.
    Delete(String),
}

/// The revision data of a template: the patch kubectl applies to roll back to it.
pub fn revision_data(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The template a revision holds.
fn template_of(revision: &ControllerRevision) -> Option<Value> {
    let mut t = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    Some(t)
}

/// What the ControllerRevisions of `obj` (a StatefulSet or DaemonSet as JSON, of
/// `kind`) should become, given `owned`, those it controls.
pub fn plan(kind: WorkloadKind, obj: &Value, owned: &[&ControllerRevision]) -> Vec<Action> {
    let (Some(name), Some(uid)) =
        (obj.pointer("/metadata/name").and_then(Value::as_str), obj.pointer("/metadata/uid").and_then(Value::as_str))
    else {
        return Vec::new();
    };
    let Some(template) = obj.pointer("/spec/template") else { return Vec::new() };
    let bare = canonical(template.clone());
    let max = owned.iter().map(|r| r.revision).max().unwrap_or(0);
    let current = owned.iter().find(|r| template_of(r).map(canonical).as_ref() == Some(&bare));
    let mut actions = Vec::new();
    let current_name = match current {
        Some(r) => {
            if r.revision < max {
                actions.push(Action::Renumber(r.metadata.name.clone().unwrap_or_default(), max + 1));
            }
            r.metadata.name.clone().unwrap_or_default()
        }
        None => {
            let hash = hash_canonical(&bare, None);
            let revision_name = format!("{name}-{hash}");
            let mut labels = obj.pointer("/spec/selector/matchLabels").cloned().unwrap_or_else(|| json!({}));
            labels[HASH_LABEL] = json!(hash);
            let describe = kind.describe();
            // The object's annotations go with it (its change-cause, for `kubectl rollout
            // history`), as the statefulset and daemonset controllers copy them.
            let mut annotations = obj.pointer("/metadata/annotations").cloned().unwrap_or_else(|| json!({}));
            if let Some(a) = annotations.as_object_mut() {
                a.remove("kubectl.kubernetes.io/last-applied-configuration");
            }
            actions.push(Action::Create(json!({
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": revision_name,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [{
                        "apiVersion": describe.api_version(), "kind": describe.name, "name": name, "uid": uid,
                        "controller": true, "blockOwnerDeletion": true,
                    }],
                },
                "data": revision_data(template),
                "revision": max + 1,
            })));
            revision_name
        }
    };
    let limit = obj.pointer("/spec/revisionHistoryLimit").and_then(Value::as_i64).unwrap_or(DEFAULT_HISTORY_LIMIT).max(0) as usize;
    let mut old: Vec<(i64, String)> =
        owned.iter().filter_map(|r| Some((r.revision, r.metadata.name.clone()?))).filter(|(_, n)| *n != current_name).collect();
    old.sort();
    let excess = old.len().saturating_sub(limit);
    actions.extend(old.into_iter().take(excess).map(|(_, n)| Action::Delete(n)));
    actions
}

/// One StatefulSet or DaemonSet, as the queue holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    kind: WorkloadKind,
    key: ObjKey,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind.name(), self.key)
    }
}

/// The object a revision belongs to: its controller's kind and key.
fn owner_of(key: &ObjKey, r: &ControllerRevision) -> Option<Target> {
    let owner = r.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true))?;
    let kind = WorkloadKind::of(&owner.api_version, &owner.kind)?;
    Some(Target { kind, key: ObjKey::new(&key.workspace, &key.namespace, &owner.name) })
}

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let mut controller = Controller::<Target>::new("controller-revisions").concurrency(2);
    let tx = controller.trigger();
    let wildcard = clients::workspace(&base, "*");
    let t = tx.clone();
    let sets = cache::spawn(
        Api::<StatefulSet>::all(wildcard.clone()),
        watcher::Config::default(),
        Workspace::Annotated,
        "statefulsets",
        move |c: cache::Change<StatefulSet>| {
            let _ = t.send(Target { kind: WorkloadKind::StatefulSet, key: c.key });
        },
    );
    let t = tx.clone();
    let daemons = cache::spawn(
        Api::<DaemonSet>::all(wildcard.clone()),
        watcher::Config::default(),
        Workspace::Annotated,
        "daemonsets",
        move |c: cache::Change<DaemonSet>| {
            let _ = t.send(Target { kind: WorkloadKind::DaemonSet, key: c.key });
        },
    );
    let revisions_tx = tx.clone();
    // Each revision is also kept under its owner's key, so that a pass finds an
    // object's revisions without looking at every revision of every workspace.
    let revisions = cache::spawn_grouped(
        Api::<ControllerRevision>::all(wildcard),
        watcher::Config::default(),
        |r: &ControllerRevision| ObjKey::of(r.metadata(), Workspace::Annotated),
        Some(Box::new(|key: &ObjKey, r: &ControllerRevision| owner_of(key, r).map(|t| t.key))),
        move |c: cache::Change<ControllerRevision>| {
            if let Some(owner) = c.new.as_ref().or(c.old.as_ref()).and_then(|r| owner_of(&c.key, r)) {
                let _ = revisions_tx.send(owner);
            }
            true
        },
        "controllerrevisions",
    );
    let (s, d) = (sets.clone(), daemons.clone());
    controller.resync(resync, move || {
        let sets = s.keys().into_iter().map(|key| Target { kind: WorkloadKind::StatefulSet, key });
        sets.chain(d.keys().into_iter().map(|key| Target { kind: WorkloadKind::DaemonSet, key })).collect::<Vec<_>>()
    });
    let settled: Arc<Settled<Target>> = Arc::default();
    controller
        .run(|target: Target| {
            let Target { kind, key } = target.clone();
            let obj = match kind {
                WorkloadKind::StatefulSet => {
                    sets.get(&key).map(|o| (serde_json::to_value(&*o).unwrap_or_default(), o.metadata.uid.clone()))
                }
                _ => daemons.get(&key).map(|o| (serde_json::to_value(&*o).unwrap_or_default(), o.metadata.uid.clone())),
            };
            let (revisions, settled, base) = (revisions.clone(), settled.clone(), base.clone());
            async move {
                if kind.describe().history != History::ControllerRevisions {
                    return Ok::<_, Failed>(Next::Done);
                }
                let Some((obj, Some(uid))) = obj else {
                    settled.forget(&target);
                    return Ok(Next::Done);
                };
                if !revisions.synced() {
                    return Ok(Next::After(Duration::from_millis(200)));
                }
                let owned = revisions.grouped(&key);
                let mut owned: Vec<&ControllerRevision> = owned
                    .iter()
                    .map(|r| &**r)
                    .filter(|r| r.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid))
                    .collect();
                owned.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                let inputs = fingerprint(&obj, &owned);
                if settled.unchanged(&target, inputs) {
                    return Ok(Next::Done);
                }
                let actions = plan(kind, &obj, &owned);
                let quiet = actions.is_empty();
                let next = apply(&base, &key, actions).await?;
                settled.record(target, inputs, quiet);
                Ok(next)
            }
        })
        .await;
}

/// A digest of what [`plan`] reads: the object's template and history limit, and each
/// owned revision's version.
fn fingerprint(obj: &Value, owned: &[&ControllerRevision]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    obj.pointer("/metadata/uid").map(Value::to_string).hash(&mut h);
    obj.pointer("/spec/template").map(Value::to_string).hash(&mut h);
    obj.pointer("/spec/revisionHistoryLimit").map(Value::to_string).hash(&mut h);
    for r in owned {
        (&r.metadata.name, &r.metadata.resource_version).hash(&mut h);
    }
    h.finish()
}

/// Writes what a pass planned. Each write's watch event brings the object back.
async fn apply(base: &Client, key: &ObjKey, actions: Vec<Action>) -> Result<Next, Failed> {
    let api: Api<ControllerRevision> = Api::namespaced(clients::workspace(base, &key.workspace), &key.namespace);
    for action in actions {
        let (what, result) = match action {
            Action::Create(revision) => {
                let name = revision["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let revision: ControllerRevision = serde_json::from_value(revision)
                    .map_err(|e| failed(format!("building ControllerRevision {name}"))(kube::Error::SerdeError(e)))?;
                let post = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                match api.create(&post, &revision).await {
                    Err(e) if is_already_exists(&e) => return Ok(Next::After(Duration::from_millis(100))),
                    r => (format!("creating ControllerRevision {name}"), r.map(|_| ())),
                }
            }
            Action::Renumber(name, revision) => {
                let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                let patch = json!({"revision": revision});
                (format!("renumbering ControllerRevision {name}"), api.patch(&name, &params, &Patch::Merge(&patch)).await.map(|_| ()))
            }
            Action::Delete(name) => {
                (format!("deleting old revision {name}"), api.delete(&name, &DeleteParams::background()).await.map(|_| ()))
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

    fn sts(image: &str) -> Value {
        json!({"metadata": {"name": "store", "uid": "u-1"},
               "spec": {"selector": {"matchLabels": {"app": "store"}}, "revisionHistoryLimit": 2,
                        "template": {"metadata": {"labels": {"app": "store"}}, "spec": {"containers": [{"name": "s", "image": image}]}}}})
    }

    fn created(actions: &[Action]) -> ControllerRevision {
        let created = actions.iter().find_map(|a| if let Action::Create(v) = a { Some(v.clone()) } else { None }).expect("a create");
        let mut r: ControllerRevision = serde_json::from_value(created).unwrap();
        r.metadata.resource_version = Some("1".into());
        r
    }

    #[test]
    fn each_template_gets_a_revision_and_an_undo_takes_an_old_one_back() {
        let first = created(&plan(WorkloadKind::StatefulSet, &sts("a:1"), &[]));
        assert_eq!(first.revision, 1);
        assert_eq!(first.metadata.labels.as_ref().unwrap()["app"], "store");
        assert_eq!(first.data.as_ref().unwrap().0["spec"]["template"]["$patch"], "replace");
        assert_eq!(first.metadata.owner_references.as_ref().unwrap()[0].kind, "StatefulSet");
        assert!(plan(WorkloadKind::StatefulSet, &sts("a:1"), &[&first]).is_empty(), "settled");
        let second = created(&plan(WorkloadKind::StatefulSet, &sts("a:2"), &[&first]));
        assert_eq!(second.revision, 2);
        assert_ne!(second.metadata.name, first.metadata.name);
        // Back to the first template: its revision comes back as the third.
        assert_eq!(
            plan(WorkloadKind::StatefulSet, &sts("a:1"), &[&first, &second]),
            [Action::Renumber(first.metadata.name.clone().unwrap(), 3)]
        );
    }

    #[test]
    fn revisions_past_the_limit_go_oldest_first() {
        let mut have = Vec::new();
        for (i, image) in ["a:1", "a:2", "a:3"].iter().enumerate() {
            let refs: Vec<&ControllerRevision> = have.iter().collect();
            let mut r = created(&plan(WorkloadKind::DaemonSet, &sts(image), &refs));
            r.revision = i as i64 + 1;
            have.push(r);
        }
        let refs: Vec<&ControllerRevision> = have.iter().collect();
        let actions = plan(WorkloadKind::DaemonSet, &sts("a:4"), &refs);
        let deleted: Vec<&Action> = actions.iter().filter(|a| matches!(a, Action::Delete(_))).collect();
        // Two old revisions are kept beside the current one: the oldest of three goes.
        assert_eq!(deleted, [&Action::Delete(have[0].metadata.name.clone().unwrap())]);
    }
}
