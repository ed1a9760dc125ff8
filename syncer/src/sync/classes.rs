//! StorageClasses: a workspace's classes go to the clusters whose claims name them,
//! under a name of the workspace's own, so that two workspaces' classes of one name
//! never meet on a cluster.
//!
//! The rule, for a claim (a PersistentVolumeClaim's `spec.storageClassName`, or a
//! StatefulSet's claim template's) that names class `C` in workspace `W`:
//! - `W` has a StorageClass `C`: the copy names [`naming::cluster_storage_class`]`(W,
//!   C)`, and the syncer applies that class on the cluster first, made from `W`'s;
//! - else the cluster has a class `C` of its own (its `standard`, say): the copy names
//!   it, as it is;
//! - else neither has one yet: the copy waits until one of them does, rather than
//!   leave the cluster a claim no provisioner serves (a claim's class, and a
//!   StatefulSet's claim templates, cannot change once made).
//!
//! A claim that names no class gets the cluster's default class, as on any cluster. A
//! class of the syncer's that no copy on the cluster names any more is deleted at the
//! resync's sweep.

use k8s_openapi::api::storage::v1::StorageClass;

use super::*;
use crate::naming;

/// Where each claim template of a copy is, by kind: the pointers to their
/// `storageClassName`s.
fn class_fields(kind: Kind, copy: &Value) -> Vec<String> {
    match kind {
        Kind::PersistentVolumeClaim => vec!["/spec/storageClassName".into()],
        Kind::StatefulSet => {
            let templates = copy.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).map_or(0, Vec::len);
            (0..templates).map(|i| format!("/spec/volumeClaimTemplates/{i}/spec/storageClassName")).collect()
        }
        _ => Vec::new(),
    }
}

/// The annotation on a class the syncer made: the upstream `workspace/name` it is of.
const CLASS_UPSTREAM: &str = placement_api::UPSTREAM_ANNOTATION;

impl Syncer {
    /// Makes the claims of `desired` (the copy of `key`) name their classes as they are
    /// on this cluster (see the module's doc), and applies the workspace's classes they
    /// need. `Err` with the class when neither the workspace nor the cluster has it yet.
    pub(super) fn place_classes(&self, key: &Key, desired: &mut Value) -> Result<Vec<(String, Arc<StorageClass>)>, String> {
        let mut needed = Vec::new();
        for pointer in class_fields(key.kind, desired) {
            let Some(class) = desired.pointer(&pointer).and_then(Value::as_str).map(str::to_string) else { continue };
            if class.is_empty() {
                continue;
            }
            let upstream = self.classes.get(&runtime::ObjKey::new(&key.workspace, "", &class));
            match upstream {
                Some(c) => {
                    let renamed = naming::cluster_storage_class(&key.workspace, &class);
                    if let Some(v) = desired.pointer_mut(&pointer) {
                        *v = json!(renamed);
                    }
                    needed.push((renamed, c));
                }
                None if self.cluster_classes.get(&class).is_some() => {}
                None => return Err(class),
            }
        }
        Ok(needed)
    }

    /// Applies the workspace's classes a copy needs that the cluster does not have yet.
    /// A class cannot change once made, so one that exists is left as it is.
    pub(super) async fn apply_classes(&self, key: &Key, needed: &[(String, Arc<StorageClass>)]) -> Result<(), Error> {
        for (name, upstream) in needed {
            if self.cluster_classes.get(name).is_some() {
                continue;
            }
            let mut body = serde_json::to_value(&**upstream).unwrap_or_default();
            if let Some(o) = body.as_object_mut() {
                o.remove("status");
            }
            let upstream_name = upstream.metadata.name.clone().unwrap_or_default();
            body["apiVersion"] = json!("storage.k8s.io/v1");
            body["kind"] = json!("StorageClass");
            body["metadata"] = json!({
                "name": name,
                "labels": {SYNC_TARGET_LABEL: self.settings.sync_target},
                "annotations": {CLASS_UPSTREAM: format!("{}/{upstream_name}", key.workspace)},
            });
            let ssa = PatchParams::apply(FIELD_MANAGER).force();
            match Api::<StorageClass>::all(self.downstream.clone()).patch(name, &ssa, &Patch::Apply(&body)).await {
                Ok(_) => {
                    tracing::info!(class = %name, upstream = %format!("{}/{upstream_name}", key.workspace), "applied the workspace's StorageClass")
                }
                Err(e) if is_already_exists(&e) => {}
                Err(e) => {
                    return Err(downstream(format!("applying StorageClass {name} (workspace {}'s {upstream_name})", key.workspace))(e))
                }
            }
        }
        Ok(())
    }

    /// A copy whose class neither the workspace nor the cluster has yet waits for it;
    /// said once per copy.
    pub(super) fn wait_for_class(&self, key: &Key, class: &str) -> Next {
        if self.waiting_for_class.insert(key.clone()) {
            tracing::warn!(
                class,
                "its claims name a StorageClass that neither the workspace nor the cluster has; the copy waits until one of them does"
            );
        }
        Next::After(WAIT_FOR_PEER)
    }

    /// Deletes this syncer's classes that no copy on the cluster names any more, and
    /// that were not made just now (a copy applied a moment ago may not be seen yet).
    pub(super) async fn sweep_classes(&self) -> Result<(), Error> {
        let mut named: HashSet<String> = HashSet::new();
        let claims = self.companion(Kind::PersistentVolumeClaim).map(|s| s.copies.values()).unwrap_or_default();
        for c in claims {
            named.extend(c.data.pointer("/spec/storageClassName").and_then(Value::as_str).map(str::to_string));
        }
        for s in self.stateful_sets.copies.values() {
            let templates = s.spec.as_ref().and_then(|s| s.volume_claim_templates.as_ref());
            named.extend(templates.into_iter().flatten().filter_map(|t| t.spec.as_ref()?.storage_class_name.clone()));
        }
        let target = &self.settings.sync_target;
        let ours = self.cluster_classes.values_where(|_| true).into_iter().filter(|c| {
            c.metadata.labels.as_ref().and_then(|l| l.get(SYNC_TARGET_LABEL)) == Some(target)
                && c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CLASS_UPSTREAM))
        });
        let recent = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        for c in ours {
            let name = c.metadata.name.clone().unwrap_or_default();
            if named.contains(&name) || c.metadata.creation_timestamp.as_ref().is_none_or(|t| t.0 > recent) {
                continue;
            }
            match Api::<StorageClass>::all(self.downstream.clone()).delete(&name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(class = %name, "deleted a StorageClass no copy names any more"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(downstream(format!("deleting StorageClass {name}"))(e)),
            }
        }
        Ok(())
    }
}
