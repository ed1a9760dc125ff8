//! Writing a decision: the WorkloadPlacement, the workload's labels and finalizers, the
//! conditions, and what a deleted or unplaceable workload leaves.

use super::*;

impl Scheduler {
    /// The API of `d`'s kind in its namespace, through `client` (of its workspace).
    fn workload_api(&self, key: &ObjKey, d: &AnyWorkload, client: Client) -> Api<DynamicObject> {
        Api::namespaced_with(client, &key.namespace, &d.kind().describe().api_resource())
    }

    /// Nothing fits (or the Placement cannot be found): the workload keeps the
    /// assignment it has on registered clusters, and says why. A deregistered cluster
    /// is dropped from it, label and finalizer too: no syncer is left to act on them,
    /// and its finalizer would hold a deletion of the workload for ever.
    pub(super) async fn fail(
        &self,
        key: &ObjKey,
        d: &AnyWorkload,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        current: &[Share],
        why: String,
    ) -> Result<Next, anyhow::Error> {
        self.waiting.insert(key.clone());
        let (kept, gone): (Vec<Share>, Vec<Share>) = current.iter().cloned().partition(|s| self.book.knows(&s.cluster));
        let message = if kept.is_empty() { why } else { format!("{why}; it stays on {} until a cluster fits", shares_text(&kept)) };
        let Some(wp) = self.write_assignment(key, d, wp, rule, &kept).await? else { return Ok(Next::After(Duration::ZERO)) };
        let before =
            wp.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_SCHEDULED)).map(|c| c.message.clone());
        let paused = wp
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_FAILOVER_PAUSED))
            .filter(|_| kept.iter().any(|s| self.book.get(&s.cluster).is_some_and(|o| o.signature.braked || !o.signature.ready)))
            .map(|c| (c.reason.clone(), c.message.clone()));
        let paused = paused.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
        if !self.set_conditions(key, &wp, (false, REASON_UNSCHEDULABLE, &message), paused).await? {
            return Ok(Next::After(Duration::ZERO));
        }
        if before.as_deref() != Some(message.as_str()) {
            // Dropped clusters are named in the Event only: the condition's message
            // must read the same on the next pass, which finds them gone.
            let note = if gone.is_empty() { message } else { format!("{message}; dropped {} (deregistered)", shares_text(&gone)) };
            tracing::info!(reason = %note, "no fit");
            self.recorder.workload(key, d, events::Type::Warning, "FailedScheduling", note);
        }
        Ok(Next::Done)
    }

    /// A workload being deleted waits for the syncers of its clusters to remove their
    /// copies; the finalizers of clusters that are no longer registered are removed
    /// here, since no syncer is left to do it.
    pub(super) async fn release_deregistered(&self, key: &ObjKey, d: &AnyWorkload) -> Result<Next, anyhow::Error> {
        let gone: Vec<String> = d
            .meta()
            .finalizers
            .iter()
            .flatten()
            .filter(|f| f.strip_prefix(SYNCER_FINALIZER_PREFIX).is_some_and(|c| !self.book.knows(c)))
            .cloned()
            .collect();
        if gone.is_empty() {
            return Ok(Next::Done);
        }
        let api = self.workload_api(key, d, clients::workspace(&self.base, &key.workspace));
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": gone}});
        match api.patch(&key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => tracing::info!(finalizers = ?gone, "removed the finalizers of deregistered clusters from a workload being deleted"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(anyhow::anyhow!("removing deregistered clusters' finalizers from {key}: {e}")),
        }
        Ok(Next::Done)
    }

    /// Makes the WorkloadPlacement and the workload's labels say `shares`. Returns the
    /// WorkloadPlacement as written, or `None` when the cache was behind and the
    /// reconcile should run again.
    pub(super) async fn write_assignment(
        &self,
        key: &ObjKey,
        d: &AnyWorkload,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        shares: &[Share],
    ) -> Result<Option<WorkloadPlacement>, anyhow::Error> {
        let client = clients::workspace(&self.base, &key.workspace);
        let kind = d.kind().describe();
        let wps: Api<WorkloadPlacement> = Api::namespaced(client.clone(), &key.namespace);
        let want: BTreeSet<String> = shares.iter().map(|s| s.cluster.clone()).collect();
        let spec = WorkloadPlacementSpec {
            workload: WorkloadRef { api_version: kind.api_version(), kind: kind.name.into(), name: key.name.clone() },
            placement: rule.to_string(),
            clusters: shares.iter().map(|s| ClusterAssignment { name: s.cluster.clone(), replicas: s.replicas as i32 }).collect(),
        };
        let written = match wp {
            None => {
                self.own.placements.insert(key.clone(), (spec.clone(), want.clone()));
                let mut new = WorkloadPlacement::new(&key.name, spec);
                new.metadata.namespace = Some(key.namespace.clone());
                new.metadata.labels =
                    Some(want.iter().map(|c| (sync_state_label(c), SYNC_STATE_SYNC.to_string())).collect::<BTreeMap<_, _>>());
                match wps.create(&PostParams::default(), &new).await {
                    Ok(w) => w,
                    Err(e) => {
                        self.own.placements.remove(key);
                        match e {
                            kube::Error::Api(s) if s.code == 409 => return Ok(None),
                            e => return Err(anyhow::anyhow!("creating WorkloadPlacement {key}: {e}")),
                        }
                    }
                }
            }
            Some(wp) => {
                let labels = label_patch(&assigned_labels(wp.metadata.labels.as_ref()), &want);
                if wp.spec == spec && labels.is_none() {
                    wp.clone()
                } else {
                    let mut patch = json!({"spec": spec});
                    // An empty list is left out of the encoding; the patch must still
                    // empty the stored one.
                    patch["spec"]["clusters"] = json!(spec.clusters);
                    if let Some(l) = labels {
                        patch["metadata"] = json!({"labels": l});
                    }
                    self.own.placements.insert(key.clone(), (spec.clone(), want.clone()));
                    match wps.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
                        Ok(w) => w,
                        Err(e) => {
                            self.own.placements.remove(key);
                            if is_not_found(&e) {
                                return Ok(None);
                            }
                            return Err(anyhow::anyhow!("updating WorkloadPlacement {key}: {e}"));
                        }
                    }
                }
            }
        };
        if let Some(patch) = workload_patch(d.meta(), &want) {
            let workloads = self.workload_api(key, d, client);
            // A patch of the finalizers alone changes nothing the watch looks at.
            if labelled(d.meta()) != want {
                self.own.labels.insert(key.clone(), want.clone());
            }
            match workloads.patch(&key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                Err(e) => {
                    self.own.labels.remove(key);
                    if is_not_found(&e) {
                        return Ok(None);
                    }
                    return Err(anyhow::anyhow!("labelling {} {key}: {e}", kind.name));
                }
            }
        }
        Ok(Some(written))
    }

    /// Sets the `Scheduled` condition if it says something new. The condition is the
    /// scheduler's own field of the status, applied server-side, so the syncers' and
    /// the aggregator's writes of the same status never conflict with it. `false` when
    /// the WorkloadPlacement is gone (the reconcile runs again).
    /// Sets the conditions the scheduler owns, when they say something new: `Scheduled`
    /// (status, reason, message), and `FailoverPaused` while `paused` says why (reason,
    /// message), which
    /// the server-side apply drops once it is left out.
    pub(super) async fn set_conditions(
        &self,
        key: &ObjKey,
        wp: &WorkloadPlacement,
        (ok, reason, message): (bool, &str, &str),
        paused: Option<(&str, &str)>,
    ) -> Result<bool, anyhow::Error> {
        let existing = |type_: &str| wp.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
        let condition = |type_: &str, status: &str, reason: &str, message: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: match existing(type_) {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => Time(jiff::Timestamp::now()),
            },
            observed_generation: wp.metadata.generation,
        };
        let same = |next: Option<&Condition>, type_: &str| match (next, existing(type_)) {
            (Some(n), Some(c)) => c.status == n.status && c.reason == n.reason && c.message == n.message,
            (None, None) => true,
            _ => false,
        };
        let scheduled = condition(CONDITION_SCHEDULED, if ok { "True" } else { "False" }, reason, message);
        let paused = paused.map(|(reason, why)| condition(CONDITION_FAILOVER_PAUSED, "True", reason, why));
        if same(Some(&scheduled), CONDITION_SCHEDULED) && same(paused.as_ref(), CONDITION_FAILOVER_PAUSED) {
            return Ok(true);
        }
        let conditions: Vec<Condition> = std::iter::once(scheduled).chain(paused).collect();
        let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(&self.base, &key.workspace), &key.namespace);
        match clients::apply_placement_status(&api, &key.name, FIELD_MANAGER, json!({ "conditions": conditions })).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(anyhow::anyhow!("writing the conditions of WorkloadPlacement {key}: {e}")),
        }
    }

    /// The workload is gone: so is its WorkloadPlacement, and what was assumed for it.
    pub(super) async fn forget(&self, key: &ObjKey) -> Result<Next, anyhow::Error> {
        self.waiting.remove(key);
        self.short.remove(key);
        self.rebalanced_at.remove(key);
        self.rebalancing.remove(key);
        self.drain_base.remove(key);
        self.everywhere.remove(key);
        self.name_taken.retain(|(k, _)| k != key);
        self.own.forget(key);
        let Some(wp) = self.placements.get(key) else { return Ok(Next::Done) };
        for c in &wp.spec.clusters {
            self.assumed.forget(key, &c.name);
        }
        if WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind).is_none() {
            return Ok(Next::Done);
        }
        let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(&self.base, &key.workspace), &key.namespace);
        match api.delete(&key.name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!("workload gone; deleted its WorkloadPlacement"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(anyhow::anyhow!("deleting WorkloadPlacement {key}: {e}")),
        }
        Ok(Next::Done)
    }
}
