//! Companions: the Services, Ingresses, ConfigMaps and the rest that follow a workload,
//! pushed as they are (bounds divided for autoscalers), refused copies reported, and their
//! status sent up.

use super::*;

impl Syncer {
    /// A companion ([`placement_api::synced`]): the copy says what the upstream object
    /// says, less what the cluster allocates for itself; what was added under the
    /// fields the syncer owns is removed; the copy's status goes up when the kind's
    /// does.
    pub(super) async fn reconcile_companion(&self, key: &Key) -> Result<Next, Error> {
        let row = key.kind.row();
        let copy = self.copy_value(key);
        match self.upstream_value(key).await? {
            Some(obj) if !deleting(&obj) => {
                let mut desired = transform::downstream_object(&obj, key, &self.settings.sync_target, None);
                let classes = match self.place_classes(key, &mut desired) {
                    Ok(classes) => classes,
                    Err(class) => return Ok(self.wait_for_class(key, &class)),
                };
                if key.kind == Kind::HorizontalPodAutoscaler {
                    if let Err(next) = self.divide_bounds(key, &obj, &mut desired) {
                        return Ok(next);
                    }
                }
                let upstream_version = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
                let version = (digest(&desired), upstream_version);
                let last = self.companion_covered.get(key).map(|v| v.clone());
                // What it should say changed: an update, applied even if the copy
                // covers it, to take out what is no longer said.
                let same_desired = last.as_ref().map(|(d, _)| *d == version.0);
                let covered = same_desired != Some(false) && copy.as_ref().is_some_and(|c| transform::covers(c, &desired));
                // Nothing changed upstream since the copy covered it last: it drifted.
                // After an upstream write (a relabel too), a copy the watch does not
                // show yet may be this syncer's own, just applied: it is applied again
                // rather than reported.
                let same_upstream = last.map(|v| v == version);
                let mut drift = match (&copy, same_upstream) {
                    _ if covered => None,
                    (Some(c), Some(true)) => Some(Drift::Changed(transform::drift(c, &desired, row.secret))),
                    (None, Some(true)) => Some(Drift::Gone),
                    _ => None,
                };
                if matches!(drift, Some(Drift::Gone)) && self.copy_is_there(key).await {
                    drift = None;
                }
                let (now, mut written) = match copy {
                    Some(c) if covered => (c, None),
                    _ => {
                        // A copy neither seen nor applied before may be someone else's
                        // object of the same name: it is applied without taking their
                        // fields, and left alone if it is theirs.
                        let force = copy.is_some() || same_desired.is_some();
                        self.apply_classes(key, &classes).await?;
                        let applied = match self.apply_copy(key, desired.clone(), force).await {
                            Ok(applied) => applied,
                            Err(Error::Downstream { source, .. }) if !force && is_conflict(&source) => {
                                match self.foreign(key, &source).await? {
                                    None => self.apply_copy(key, desired.clone(), true).await?,
                                    Some(cause) => return Ok(self.refuse(key, &obj, cause)),
                                }
                            }
                            Err(e) => return Err(e),
                        };
                        (to_value(&applied), Some(applied))
                    }
                };
                if self.refused.remove(key).is_some() {
                    tracing::info!("the companion applies on this cluster again");
                    self.requeue_followers(key);
                }
                // What someone added under the fields the syncer owns stays through an
                // apply; it is taken out too. This is checked every time: it also takes
                // out what the workspace removed, as a copy with a field more still
                // covers what it should say, and no apply removed it.
                if let Some((patched, lines)) = self.remove_extras(key, &now, &desired, row.owned).await? {
                    if same_desired == Some(true) && !lines.is_empty() {
                        if let Drift::Changed(all) = drift.get_or_insert_with(|| Drift::Changed(Vec::new())) {
                            all.extend(lines);
                        }
                    }
                    written = Some(patched);
                }
                self.companion_covered.insert(key.clone(), version);
                if let (Some(drift), Some(written)) = (drift, &written) {
                    self.report_copy_drift(key, written, drift);
                }
                if row.status_up {
                    let now = written.as_ref().map(to_value).unwrap_or(now);
                    self.report_companion_status(key, &obj, &now).await?;
                }
                Ok(Next::Done)
            }
            _ if !self.companions_synced() => Ok(Next::After(WAIT_FOR_PEER)),
            _ => {
                self.companion_covered.remove(key);
                if self.refused.remove(key).is_some() {
                    self.requeue_followers(key);
                }
                if let Some(next) = self.wait_for_cluster(key) {
                    return Ok(next);
                }
                self.delete_copy(key, copy.is_some()).await?;
                Ok(Next::Done)
            }
        }
    }

    /// Why the object at the copy's place is someone else's, after an apply that
    /// conflicted with their fields (`conflict`); `None` when it is this syncer's own
    /// copy (its `workload.flotilla.io/upstream` annotation names `key`), whose fields
    /// someone changed: drift, to be reverted.
    pub(super) async fn foreign(&self, key: &Key, conflict: &kube::Error) -> Result<Option<String>, Error> {
        let ns = transform::downstream_namespace(key);
        let found = self.copy_api(key).get_metadata_opt(&key.name).await.map_err(downstream(format!(
            "reading {} {ns}/{}",
            key.kind.name(),
            key.name
        )))?;
        let claim = found.as_ref().and_then(|o| o.metadata.annotations.as_ref()?.get(UPSTREAM_ANNOTATION).cloned());
        if claim.as_deref() == Some(key.copy_annotation().as_str()) {
            return Ok(None);
        }
        let why = match conflict {
            kube::Error::Api(s) => s.message.clone(),
            e => e.to_string(),
        };
        Ok(Some(format!(
            "{} {ns}/{} exists on cluster {} and is not Flotilla's ({why})",
            key.kind.name(),
            key.name,
            self.settings.sync_target
        )))
    }

    /// Leaves companion `key` (`upstream`) unapplied because `cause`: says so in the
    /// entries of the WorkloadPlacements that list it, and in a Warning Event on it,
    /// and looks again in [`REFUSED_RETRY`] (the other object may go).
    pub(super) fn refuse(&self, key: &Key, upstream: &Value, cause: String) -> Next {
        let first = self.refused.insert(key.clone(), cause.clone()).as_ref() != Some(&cause);
        if first {
            tracing::warn!(cause = %cause, "a companion cannot be applied on this cluster; leaving the object there alone");
            let involved = ObjectReference {
                api_version: Some(key.kind.api_version()),
                kind: Some(key.kind.name().into()),
                name: Some(key.name.clone()),
                namespace: Some(key.namespace.clone()),
                uid: upstream.pointer("/metadata/uid").and_then(Value::as_str).map(String::from),
                ..Default::default()
            };
            let message =
                format!("{cause}; delete or rename that object on cluster {}, and this one is applied there", self.settings.sync_target);
            self.upstream_events.warn_in(&key.workspace, &key.namespace, involved, REASON_COMPANION_REFUSED, message);
            self.requeue_followers(key);
        }
        Next::After(REFUSED_RETRY)
    }

    /// Queues the Deployments whose WorkloadPlacements list companion `key`, so their
    /// entries say whether it applies here.
    pub(super) fn requeue_followers(&self, key: &Key) {
        let listed = format!("{}/{}", key.kind.name(), key.name);
        let here = self.placements.entries_where(|k, wp| {
            k.workspace == key.workspace
                && k.namespace == key.namespace
                && wp.status.as_ref().is_some_and(|s| s.companions.contains(&listed))
        });
        for k in here {
            let _ = self.requeue.send(k);
        }
    }

    /// This cluster's `CompanionsSynced` condition for a workload whose
    /// WorkloadPlacement is `wp`: False, naming each companion it lists that this
    /// cluster refused; none when it refused none, so that a workload whose companions
    /// all apply costs no write more than one without.
    pub(super) fn companions_condition(&self, key: &Key, wp: &WorkloadPlacement, generation: Option<i64>) -> Option<Condition> {
        if self.refused.is_empty() {
            return None;
        }
        let listed = wp.status.as_ref().map(|s| s.companions.as_slice()).unwrap_or_default();
        let refused: Vec<String> = listed
            .iter()
            .filter_map(|l| {
                let (kind, name) = l.split_once('/')?;
                let kind = Kind::all().find(|k| k.name() == kind)?;
                self.refused.get(&Key::new(kind, &key.workspace, &key.namespace, name)).map(|c| format!("{} {name}: {}", kind.name(), *c))
            })
            .collect();
        (!refused.is_empty()).then(|| Condition {
            type_: CONDITION_COMPANIONS_SYNCED.into(),
            status: "False".into(),
            reason: REASON_COMPANION_REFUSED.into(),
            message: refused.join("; "),
            last_transition_time: now(),
            observed_generation: generation,
        })
    }

    /// Gives the copy of autoscaler `key` (`upstream`, made into `desired`) this
    /// cluster's part of its bounds, in proportion to this cluster's share of its
    /// target's replicas ([`transform::divide_bounds`]). When the target is not
    /// assigned here, the bounds stay whole; `Err`: the target is assigned here but
    /// its share is not known yet, so the copy waits.
    pub(super) fn divide_bounds(&self, key: &Key, upstream: &Value, desired: &mut Value) -> Result<(), Next> {
        let Some(target) = upstream.pointer("/spec/scaleTargetRef/name").and_then(Value::as_str) else { return Ok(()) };
        let kind = upstream.pointer("/spec/scaleTargetRef/kind").and_then(Value::as_str);
        let kind = Kind::workloads().find(|k| Some(k.name()) == kind).unwrap_or(Kind::Deployment);
        let workload = Key::new(kind, &key.workspace, &key.namespace, target);
        let Some(wp) = self.placement(&workload) else {
            let assigned = match kind {
                Kind::StatefulSet => self.stateful_sets.upstream.get(&workload).is_some(),
                _ => self.deployments.upstream.get(&workload).is_some(),
            };
            return if assigned { Err(Next::After(WAIT_FOR_PEER)) } else { Ok(()) };
        };
        let shares: Vec<(&str, i32)> = wp.spec.clusters.iter().map(|c| (c.name.as_str(), c.replicas)).collect();
        transform::divide_bounds(desired, &shares, &self.settings.sync_target);
        Ok(())
    }

    /// The autoscalers assigned to this cluster that scale Deployment `key`: while
    /// there is one, the copy's replicas are the cluster's autoscaler's to set.
    pub(super) fn autoscalers_of(&self, key: &Key) -> Vec<Key> {
        let Some(side) = self.companion(Kind::HorizontalPodAutoscaler) else { return Vec::new() };
        let scales = |h: &DynamicObject| {
            let target = h.data.pointer("/spec/scaleTargetRef").unwrap_or(&Value::Null);
            h.metadata.deletion_timestamp.is_none()
                && target.get("kind").and_then(Value::as_str) == Some(key.kind.name())
                && target.get("name").and_then(Value::as_str) == Some(key.name.as_str())
        };
        let mut found = side.upstream.entries_where(|k, h| k.workspace == key.workspace && k.namespace == key.namespace && scales(h));
        if let Some(f) = &self.settings.followers {
            let target = &self.settings.sync_target;
            let published = f.in_namespace(target, Kind::HorizontalPodAutoscaler, &key.workspace, &key.namespace);
            let more: Vec<Key> =
                published.into_iter().filter(|k| !found.contains(k) && f.get(k, target).is_some_and(|h| scales(&h))).collect();
            found.extend(more);
        }
        found
    }

    /// Reports the status of the copy of companion `key` (`copy`) upstream, in this
    /// cluster's annotation on `object` ([`placement_api::cluster_status_annotation`]),
    /// when it says something new. An empty status is not reported until the cluster
    /// has said something else before: most Services never have one.
    pub(super) async fn report_companion_status(&self, key: &Key, object: &Value, copy: &Value) -> Result<(), Error> {
        let annotation = placement_api::cluster_status_annotation(&self.settings.sync_target);
        // A copy without a status has nothing to say yet (an apply's answer may not
        // carry it); what was reported stays.
        let Some(status) = copy.get("status").filter(|s| s.is_object()).cloned() else { return Ok(()) };
        let reported = object.pointer("/metadata/annotations").and_then(|a| a.get(&annotation)).and_then(Value::as_str);
        let now = status.to_string();
        match reported {
            Some(r) if r == now => return Ok(()),
            None if transform::is_empty_status(&status) => return Ok(()),
            _ => {}
        }
        let patch = json!({"metadata": {"annotations": {annotation: now}}});
        let api: Api<DynamicObject> =
            Api::namespaced_with(clients::workspace(&self.upstream, &key.workspace), &key.namespace, &key.kind.api_resource());
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(upstream(format!("reporting the status of {key} on cluster {}", self.settings.sync_target))(e)),
        }
    }
}
