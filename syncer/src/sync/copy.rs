//! The workload's copy: what is pushed (the cluster's share), when a copy already covers
//! the upstream version, and the drift that is reverted.

use super::*;

impl Syncer {
    /// Server-side applies a copy. Its namespace is applied only when the copy's apply
    /// finds it missing, so a new copy in a namespace that exists costs one request.
    /// Without `force`, a field another manager owns and sets otherwise fails the apply
    /// with a conflict: the first apply of a copy this syncer has no record of.
    /// Whether the downstream copy of `key` exists, asked of the cluster itself: a copy
    /// the watch does not show may be one this syncer applied a moment ago, while the
    /// watch was still listing (after a restart of the cluster or of the syncer). Only
    /// a copy that the cluster says is gone was deleted.
    pub(super) async fn copy_is_there(&self, key: &Key) -> bool {
        matches!(self.copy_api(key).get_opt(&key.name).await, Ok(Some(_)))
    }

    pub(super) async fn apply_copy(&self, key: &Key, desired: Value, force: bool) -> Result<DynamicObject, Error> {
        let ssa = if force { PatchParams::apply(FIELD_MANAGER).force() } else { PatchParams::apply(FIELD_MANAGER) };
        let ns = transform::downstream_namespace(key);
        let applying = || format!("applying {} {ns}/{}", key.kind.name(), key.name);
        match self.copy_api(key).patch(&key.name, &ssa, &Patch::Apply(&desired)).await {
            // An apply creates a missing object, so what is missing is the namespace.
            Err(e) if is_not_found(&e) => {}
            r => return r.map_err(downstream(applying())),
        }
        let body = transform::downstream_namespace_object(key, &self.settings.sync_target);
        match Api::<Namespace>::all(self.downstream.clone()).patch(&ns, &ssa, &Patch::Apply(body)).await {
            Ok(_) => {}
            // Another copy's apply created it just now.
            Err(e) if is_already_exists(&e) => {}
            Err(e) => return Err(downstream(format!("applying namespace {ns}"))(e)),
        }
        self.copy_api(key).patch(&key.name, &ssa, &Patch::Apply(&desired)).await.map_err(downstream(applying()))
    }

    pub(super) async fn push<W: Synced>(&self, key: &Key, d: &W, copy: Option<&W>) -> Result<Next, Error> {
        let target = &self.settings.sync_target;
        // The share comes with the WorkloadPlacement; the scheduler writes it first, but
        // the two watches may deliver in either order.
        let Some(wp) = self.placement(key) else { return Ok(Next::After(WAIT_FOR_PEER)) };
        let Some(share) = wp.spec.clusters.iter().find(|c| &c.name == target).map(|c| c.replicas) else {
            return Ok(Next::After(WAIT_FOR_PEER));
        };
        // Once the copy runs, an autoscaler on the cluster sets its replicas, and
        // what it set is what the copy should say. The autoscalers' bounds follow the
        // shares, which may have just changed: they are looked at again too (an
        // unchanged one costs no write).
        let autoscalers = self.autoscalers_of(key);
        let scaled =
            || copy.and_then(|c| to_value(c).pointer("/spec/replicas").and_then(Value::as_i64)).and_then(|n| i32::try_from(n).ok());
        let share = match (autoscalers.is_empty(), W::KIND.describe().copies_replicas()) {
            (false, true) => scaled().unwrap_or(share),
            _ => share,
        };
        for a in autoscalers {
            let _ = self.requeue.send(a);
        }
        if !d.meta().finalizers.iter().flatten().any(|f| f == &self.finalizer) {
            // The scheduler's assignment carries it; a workload labelled some other
            // way (by hand, or before it did) gets it here.
            // finalizers merge as a set under a strategic merge patch, so this adds
            // ours to whatever is there now, with no resourceVersion to go stale while
            // the scheduler labels the same Deployment.
            let patch = json!({"metadata": {"finalizers": [self.finalizer]}});
            match self.upstream_workload_api(key).patch(&key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                Err(e) => return Err(upstream(format!("adding finalizer to {key}"))(e)),
            }
        }
        // A workload that ran to its end (a finished Job) is never made again: a copy
        // that is gone stays gone, or it would run again.
        if d.finished() && copy.is_none() && !self.copy_is_there(key).await {
            return Ok(Next::Done);
        }
        // Whether the copy last covered what it should say now: if it does not any
        // more, it drifted; if what it should say changed, it is an update.
        let mark = self.covered.get(key).map(|m| m.clone());
        let same_desired = mark.as_ref().map(|m| m.share == share && m.upstream.is_of(d.meta()));
        let replicas = W::KIND.describe().copies_replicas().then_some(share);
        let desired = || {
            let mut desired = transform::downstream_object(&to_value(d), key, target, replicas);
            let _ = self.place_classes(key, &mut desired);
            desired
        };
        let current = match copy {
            Some(c) if self.covers(key, d, share, c) => {
                // The copy's spec changed (the syncer's own writes leave no mark to
                // compare with), and still says all it should: someone added to it.
                let added = same_desired == Some(true) && mark.as_ref().is_some_and(|m| m.copy.generation != c.meta().generation);
                match added {
                    false => c.clone(),
                    true => match self.remove_extras(key, &to_value(c), &desired(), &["spec"]).await {
                        Ok(None) => c.clone(),
                        Ok(Some((patched, lines))) => {
                            if !lines.is_empty() {
                                self.report_copy_drift(key, &patched, Drift::Changed(lines));
                            }
                            patched.try_parse::<W>().map_err(|e| downstream_parse(key, e))?
                        }
                        Err(e) => {
                            // Retried with the mark it had, so the retry sees the edit.
                            if let Some(m) = mark {
                                self.covered.insert(key.clone(), m);
                            }
                            return Err(e);
                        }
                    },
                }
            }
            _ => {
                // A StatefulSet's claim templates name their classes as the cluster has
                // them, or the copy waits for them (see `classes`).
                let mut desired = transform::downstream_object(&to_value(d), key, target, replicas);
                let classes = match self.place_classes(key, &mut desired) {
                    Ok(classes) => classes,
                    Err(class) => return Ok(self.wait_for_class(key, &class)),
                };
                let mut drift = match (copy, same_desired) {
                    (Some(c), Some(true)) => Some(Drift::Changed(transform::drift(&to_value(c), &desired, false))),
                    (None, Some(_)) => Some(Drift::Gone),
                    _ => None,
                };
                if matches!(drift, Some(Drift::Gone)) && self.copy_is_there(key).await {
                    drift = None;
                }
                self.covered.remove(key);
                // A failed write is retried with the mark it had, so the retry still
                // knows the drift for what it is.
                let restore = |e| {
                    if let Some(m) = mark.clone() {
                        self.covered.insert(key.clone(), m);
                    }
                    e
                };
                self.apply_classes(key, &classes).await.map_err(restore)?;
                let mut applied = self.apply_copy(key, desired.clone(), true).await.map_err(restore)?;
                if let Some(Drift::Changed(lines)) = drift.as_mut() {
                    // What someone added stays through an apply; it is taken out too.
                    if let Some((patched, more)) =
                        self.remove_extras(key, &to_value(&applied), &desired, &["spec"]).await.map_err(restore)?
                    {
                        lines.extend(more);
                        applied = patched;
                    }
                }
                if let Some(drift) = drift {
                    self.report_copy_drift(key, &applied, drift);
                }
                applied.try_parse::<W>().map_err(|e| downstream_parse(key, e))?
            }
        };
        let mut entry = current.report(target, now());
        if let Some(mut c) = self.companions_condition(key, &wp, d.meta().generation) {
            // The transition time stays while the status does.
            let reported = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|e| &e.name == target));
            if let Some(old) = reported.and_then(|e| e.conditions.iter().find(|o| o.type_ == c.type_ && o.status == c.status)) {
                c.last_transition_time = old.last_transition_time.clone();
            }
            entry.conditions.push(c);
        }
        if let Some(left) = self.hold(key, &wp, &entry, share) {
            // The copy's next status update queues this key again, earlier.
            return Ok(Next::After(left));
        }
        self.report(key, &wp, Some(entry)).await
    }

    /// Removes from the copy of `key`, as `actual`, what `desired` does not say under
    /// the top-level fields `sections` ([`transform::extras`]), with one JSON patch:
    /// server-side apply never removes fields another manager added. Returns the copy
    /// as it is then, with a drift line for each field that is gone now (one the
    /// cluster defaulted again was no drift); `None` when there is nothing to remove.
    pub(super) async fn remove_extras(
        &self,
        key: &Key,
        actual: &Value,
        desired: &Value,
        sections: &[&str],
    ) -> Result<Option<(DynamicObject, Vec<String>)>, Error> {
        let mut extras = transform::extras(actual, desired, sections);
        // What the cluster allocates or defaults for itself is never drift.
        extras.retain(|e| !key.kind.cluster_owns(&e.path));
        if extras.is_empty() {
            return Ok(None);
        }
        let ns = transform::downstream_namespace(key);
        let removing = || format!("removing what was added to {} {ns}/{}", key.kind.name(), key.name);
        // Last first, so that removing an item of a list leaves the places of the
        // items before it as they were.
        let ops: Vec<Value> = extras.iter().rev().map(|e| json!({"op": "remove", "path": e.pointer})).collect();
        let url = format!("{}/{}", DynamicObject::url_path(&key.kind.api_resource(), Some(&ns)), key.name);
        let request = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(serde_json::to_vec(&ops).unwrap_or_default())
            .map_err(|e| downstream(removing())(kube::Error::HttpError(e)))?;
        let patched: DynamicObject = self.downstream.request(request).await.map_err(downstream(removing()))?;
        let left: HashSet<String> = transform::extras(&to_value(&patched), desired, sections).into_iter().map(|e| e.pointer).collect();
        let lines = extras.into_iter().filter(|e| !left.contains(&e.pointer)).map(|e| format!("{} was added, removed", e.path)).collect();
        Ok(Some((patched, lines)))
    }

    /// Reports the drift of the copy of `key`, now `applied` again.
    pub(super) fn report_copy_drift(&self, key: &Key, applied: &DynamicObject, drift: Drift) {
        let m = &applied.metadata;
        let involved = ObjectReference {
            api_version: Some(key.kind.api_version()),
            kind: Some(key.kind.name().into()),
            name: Some(key.name.clone()),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            ..Default::default()
        };
        let namespace = m.namespace.clone().unwrap_or_else(|| transform::downstream_namespace(key));
        self.report_drift(key, &namespace, involved, drift);
    }

    /// Whether `copy` already says everything the syncer would write for `upstream`
    /// with `share` replicas ([`transform::covers`]). Remembered per key until either
    /// side changes in a way that could matter ([`Covered`]).
    pub(super) fn covers<W: Synced>(&self, key: &Key, upstream: &W, share: i32, copy: &W) -> bool {
        if self.covered.get(key).is_some_and(|m| m.is_of(upstream.meta(), share, copy.meta())) {
            return true;
        }
        let replicas = W::KIND.describe().copies_replicas().then_some(share);
        let mut desired = transform::downstream_object(&to_value(upstream), key, &self.settings.sync_target, replicas);
        let _ = self.place_classes(key, &mut desired);
        let covered = transform::covers(&to_value(copy), &desired);
        if covered {
            self.covered.insert(key.clone(), Covered::of(upstream.meta(), share, copy.meta()));
        } else {
            self.covered.remove(key);
        }
        covered
    }
}

/// The error of a copy the cluster answered with that does not parse as its kind.
fn downstream_parse(key: &Key, e: impl std::fmt::Display) -> Error {
    let source = kube::Error::SerdeError(serde_json::Error::io(std::io::Error::other(e.to_string())));
    Error::Downstream { what: format!("reading the {} the cluster answered for {key}", key.kind.name()), source }
}
