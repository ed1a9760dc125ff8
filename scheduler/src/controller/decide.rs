//! Deciding one workload: its inputs, the placement core's answer, and what is assumed
//! until the clusters report it.

use super::*;

impl Scheduler {
    pub(super) async fn decide_and_write(&self, key: &ObjKey, started: std::time::Instant) -> Result<(Outcome, Next), anyhow::Error> {
        let Some(d) = self.deployments.get(key) else { return Ok((Outcome::Skipped, self.forget(key).await?)) };
        if d.metadata.deletion_timestamp.is_some() {
            // The syncers clean up; the assignment stays until the object is gone. Only
            // the finalizers of clusters no longer registered are the scheduler's to drop.
            self.waiting.remove(key);
            return Ok((Outcome::Skipped, self.release_deregistered(key, &d).await?));
        }
        let wp = self.placements.get(key);
        let current = inputs::current(wp.as_deref(), &d);

        let ns = self.namespaces.get(&ObjKey::new(&key.workspace, "", &key.namespace));
        let rules: Vec<Arc<Placement>> = self.rules.values_where(|k| k.workspace == key.workspace);
        let refs: Vec<&Placement> = rules.iter().map(|p| p.as_ref()).collect();
        let namespace = resolve::Namespace {
            name: &key.namespace,
            labels: ns.as_ref().and_then(|n| n.metadata.labels.as_ref()),
            annotations: ns.as_ref().and_then(|n| n.metadata.annotations.as_ref()),
        };
        let (rule, source) = match resolve::governing(d.metadata.annotations.as_ref(), namespace, &refs) {
            Ok(r) => r,
            Err(message) => {
                self.metrics.failure("PlacementUnusable");
                return self.fail(key, &d, wp.as_deref(), "", &current, message).await.map(|n| (Outcome::Unschedulable, n));
            }
        };
        let rule_name = rule.metadata.name.clone().unwrap_or_default();
        let workload = match inputs::workload(&*d) {
            Ok(w) => w,
            Err(e) => {
                let message = format!("the pod template's resource requests cannot be read: {e}; fix spec.template");
                self.metrics.failure("InvalidRequests");
                return self.fail(key, &d, wp.as_deref(), &rule_name, &current, message).await.map(|n| (Outcome::Unschedulable, n));
            }
        };
        // A workload left on fewer clusters than asked for stays so until rebalancing
        // widens it; a new or whole one is spread as far as its Placement says.
        let short = inputs::short(wp.as_deref());
        // A rebalance under way ends once its new shares are Available.
        if let Some(next) = self.finish_rebalance(key, &d, wp.as_deref(), &rule_name, &source).await? {
            return Ok((Outcome::Scheduled, next));
        }
        let (rebalance, recheck) = self.rebalance_due(key, &rule.spec, short, &current);
        let decision = {
            let _one_at_a_time = self.deciding.lock().unwrap_or_else(|e| e.into_inner());
            let views = self.book.views(|c| self.assumed.total(c));
            let rule_view = core::Rule::of(&rule.spec);
            let result = core::place(&views, &workload, &rule_view, &current, !short || rebalance);
            let took = started.elapsed();
            self.metrics.decision.observe(took.as_secs_f64());
            tracing::debug!(micros = took.as_micros() as u64, clusters = views.len(), "decided");
            if let Ok(decided) = &result {
                // A move off a lost or draining cluster waits its turn under the rate limit.
                // So does a rebalance.
                let evicts = current
                    .iter()
                    .any(|c| !decided.shares.iter().any(|s| s.cluster == c.cluster) && self.why_left(&c.cluster).failover().is_some())
                    || (rebalance && !same_shares(&decided.shares, &current));
                if evicts {
                    if let Err(wait) = self.evictions.take() {
                        self.metrics.evictions_delayed.inc();
                        return Ok((Outcome::Skipped, Next::After(wait)));
                    }
                }
                self.assume(key, &current, &decided.shares, workload.per_replica);
            }
            result
        };
        match decision {
            Ok(decided) if rebalance && !same_shares(&decided.shares, &current) => {
                self.start_rebalance(key, &d, wp.as_deref(), &rule_name, &current, decided.shares).await.map(|n| (Outcome::Scheduled, n))
            }
            Ok(decided) => {
                // A NoExecute taint tolerated for a time is looked at again when the
                // time is up (just after, so that it has run out).
                let until = decided.recheck.map(|d| d + PAST_GRACE);
                let next = self.place(key, &d, wp.as_deref(), &rule_name, &source, &current, decided).await?;
                // A short spread whose Placement rebalances is looked at again when a
                // returned cluster has been Ready long enough.
                let later = [recheck, until].into_iter().flatten().min();
                Ok((Outcome::Scheduled, if let (Next::Done, Some(after)) = (&next, later) { Next::After(after) } else { next }))
            }
            Err(no_fit) => {
                self.metrics.no_fit(&no_fit);
                self.fail(key, &d, wp.as_deref(), &rule_name, &current, no_fit.to_string()).await.map(|n| (Outcome::Unschedulable, n))
            }
        }
    }

    pub(super) fn assume(&self, key: &ObjKey, current: &[Share], shares: &[Share], per_replica: Resources) {
        let share = |set: &[Share], c: &str| set.iter().find(|s| s.cluster == c).map(|s| s.replicas);
        for s in shares {
            self.assumed.record(key, &s.cluster, share(current, &s.cluster).unwrap_or(0), s.replicas, per_replica);
        }
        for c in current.iter().filter(|c| share(shares, &c.cluster).is_none()) {
            self.assumed.forget(key, &c.cluster);
        }
    }

    /// Why a cluster is no longer in a workload's assignment, for the Event.
    pub(super) fn why_left(&self, cluster: &str) -> Left {
        match self.book.get(cluster) {
            None => Left::Deregistered,
            Some(o) if !o.signature.ready => Left::NotReady,
            Some(o) if o.signature.draining => Left::Draining,
            Some(o) if o.signature.taints.iter().any(|t| t.effect == placement_api::TaintEffect::NoExecute) => Left::Tainted,
            Some(_) => Left::NotChosen,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn place(
        &self,
        key: &ObjKey,
        d: &Deployment,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        source: &resolve::Source,
        current: &[Share],
        decided: core::Decision,
    ) -> Result<Next, anyhow::Error> {
        let mut shares = decided.shares;
        self.waiting.remove(key);
        let draining = self.hold_drained(key, wp, current, &mut shares);
        let Some(wp) = self.write_assignment(key, d, wp, rule, &shares).await? else { return Ok(Next::After(Duration::ZERO)) };
        // The Event goes out as soon as the assignment is written: a retry of the
        // condition below starts from the new assignment and would not see the move.
        let before: BTreeSet<&str> = current.iter().map(|s| s.cluster.as_str()).collect();
        let after: BTreeSet<&str> = shares.iter().map(|s| s.cluster.as_str()).collect();
        if before != after {
            let (reason, note) = if before.is_empty() {
                ("Scheduled", format!("assigned to {} by Placement {rule} ({source})", shares_text(&shares)))
            } else {
                let left: Vec<String> = before
                    .difference(&after)
                    .map(|c| {
                        let why = self.why_left(c);
                        if let Some(cause) = why.failover() {
                            self.metrics.failovers.with_label_values(&[cause]).inc();
                        }
                        format!("{c} ({})", why.text())
                    })
                    .collect();
                let note = if let Some((leaving, until)) = &draining {
                    let new: Vec<Share> = shares.iter().filter(|s| !before.contains(s.cluster.as_str())).cloned().collect();
                    format!(
                        "adding {} before leaving {} (draining): the old copy stays until the new one is Available, or until {until} (Placement {rule})",
                        shares_text(&new),
                        leaving.join(", ")
                    )
                } else if left.is_empty() {
                    format!("now on {} (Placement {rule})", shares_text(&shares))
                } else {
                    format!("moved off {}; now on {} (Placement {rule})", left.join(", "), shares_text(&shares))
                };
                ("Rescheduled", note)
            };
            tracing::info!(reason, clusters = %shares_text(&shares), "placed");
            self.recorder.deployment(key, d, events::Type::Normal, reason, note);
        }
        // The clusters are in the spec and in the Event; left out of the condition, a
        // move (a failover, a drain) costs no status write here.
        let (reason, message) = match (&decided.fewer, decided.short) {
            (_, false) => ("Scheduled", format!("placed by Placement {rule} ({source}); spec.clusters lists where")),
            (Some(why), true) => (
                REASON_FEWER_CLUSTERS,
                format!(
                    "placed by Placement {rule} ({source}) on fewer clusters than it asks for: {why}; it spreads again when a rebalance allows"
                ),
            ),
            (None, true) => (
                REASON_FEWER_CLUSTERS,
                format!(
                    "placed by Placement {rule} ({source}) on fewer clusters than it asks for, since some it ran on were lost; \
                     enough fit again, and it spreads onto them when a rebalance allows"
                ),
            ),
        };
        let before = scheduled_condition(&wp).map(|c| c.reason.clone());
        // A workload that stays on a cluster the disruption brake holds says so.
        let braked: Vec<&str> =
            shares.iter().map(|s| s.cluster.as_str()).filter(|c| self.book.get(c).is_some_and(|o| o.signature.braked)).collect();
        let paused = (!braked.is_empty()).then(|| {
            let on = braked.join(", ");
            format!(
                "stays on {on}, which the disruption brake holds: too many clusters went NotReady at once (`flotilla status` shows which); \
                 `flotilla cluster confirm-lost {}` moves it if {on} is really gone",
                braked[0]
            )
        });
        let was_paused = wp.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == CONDITION_FAILOVER_PAUSED));
        if !self.set_conditions(key, &wp, (true, reason, &message), paused.as_deref()).await? {
            return Ok(Next::After(Duration::ZERO));
        }
        if decided.short {
            self.short.insert(key.clone());
        } else {
            self.short.remove(key);
        }
        if decided.short && before.as_deref() != Some(REASON_FEWER_CLUSTERS) {
            tracing::warn!(reason = %message, "placed on fewer clusters than asked for");
            self.recorder.deployment(key, d, events::Type::Warning, REASON_FEWER_CLUSTERS, message);
        }
        if let (Some(note), false) = (paused, was_paused) {
            let note = format!("{note}: {}", self.book.brake().message(self.book.grace()));
            tracing::warn!(reason = %note, "failover paused by the disruption brake");
            self.recorder.deployment(key, d, events::Type::Warning, CONDITION_FAILOVER_PAUSED, note);
        }
        // A drain in progress is looked at again until the old copy can go.
        Ok(if draining.is_some() { Next::After(DRAIN_RECHECK) } else { Next::Done })
    }
}
