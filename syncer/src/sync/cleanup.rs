//! Cleaning up: the copies of workloads deleted upstream or no longer assigned here, the
//! finalizers that wait for that, and the namespaces left empty.

use super::*;

impl Syncer {
    pub(super) async fn clean_up_deleted(&self, key: &Key, d: &ObjectMeta, has_copy: bool) -> Result<Next, Error> {
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
    pub(super) async fn copy_exists(&self, key: &Key) -> Result<bool, Error> {
        match self.copy_api(key).get_metadata_opt(&key.name).await {
            Ok(found) => Ok(found.is_some()),
            Err(e) => Err(downstream(format!("reading {} {}/{}", key.kind.name(), transform::downstream_namespace(key), key.name))(e)),
        }
    }

    pub(super) async fn clean_up_unassigned(&self, key: &Key, has_copy: bool) -> Result<Next, Error> {
        if has_copy {
            // The finalizer first: if the syncer stops between the two steps, the copy
            // is still there to bring it back here.
            match self.upstream_workload_api(key).get_metadata_opt(&key.name).await {
                Ok(Some(d)) if !self.assigned_here(&d.metadata) => {
                    // A conflict is tried again with the copy still there: once it is
                    // gone, nothing would bring this key back to release the finalizer.
                    if let next @ Next::After(_) = self.release_finalizer(key, &d.metadata).await? {
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
    pub(super) fn wait_for_cluster(&self, key: &Key) -> Option<Next> {
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

    pub(super) fn assigned_here(&self, d: &ObjectMeta) -> bool {
        let label = sync_state_label(&self.settings.sync_target);
        d.labels.as_ref().and_then(|l| l.get(&label)).is_some_and(|v| v == SYNC_STATE_SYNC) && d.deletion_timestamp.is_none()
    }

    /// The upstream API of the workload of `key`, by its kind.
    pub(super) fn upstream_workload_api(&self, key: &Key) -> Api<DynamicObject> {
        Api::namespaced_with(clients::workspace(&self.upstream, &key.workspace), &key.namespace, &key.kind.api_resource())
    }

    pub(super) async fn release_finalizer(&self, key: &Key, d: &ObjectMeta) -> Result<Next, Error> {
        let finalizers = d.finalizers.clone().unwrap_or_default();
        if !finalizers.contains(&self.finalizer) {
            return Ok(Next::Done);
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| **f != self.finalizer).collect();
        let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": d.resource_version}});
        match self.upstream_workload_api(key).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(e) if is_conflict(&e) => Ok(Next::After(Duration::ZERO)),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(upstream(format!("releasing the finalizer of {key}"))(e)),
        }
    }

    /// Deletes the copy of `key` (if `has_copy`), then its namespace if nothing else of
    /// ours is in it or on its way there.
    pub(super) async fn delete_copy(&self, key: &Key, has_copy: bool) -> Result<(), Error> {
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

    pub(super) async fn delete_namespace(&self, ns: &str) -> Result<(), Error> {
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
    pub(super) async fn sweep_namespaces(&self) -> Result<(), Error> {
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
