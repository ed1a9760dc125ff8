//! Deciding one workload: its inputs, the placement core's answer, and what is assumed
//! until the clusters report it.

use super::*;

impl Scheduler {
    pub(super) async fn decide_and_write(&self, key: &ObjKey, started: std::time::Instant) -> Result<(Outcome, Next), anyhow::Error> {
        let wp = self.placements.get(key);
        let Some((d, others)) = self.workloads.at(key, wp.as_deref()) else { return Ok((Outcome::Skipped, self.forget(key).await?)) };
        self.name_taken(key, &d, &others);
        if d.meta().deletion_timestamp.is_some() {
            // The syncers clean up; the assignment stays until the object is gone. Only
            // the finalizers of clusters no longer registered are the scheduler's to drop.
            self.waiting.remove(key);
            return Ok((Outcome::Skipped, self.release_deregistered(key, &d).await?));
        }
        let current = inputs::current(wp.as_deref(), d.meta());
        // A workload that ran to its end (a finished Job) stays where it ran, whatever
        // happens to the cluster: it never runs again.
        if d.finished() && !current.is_empty() {
            self.waiting.remove(key);
            return Ok((Outcome::Scheduled, Next::Done));
        }

        let ns = self.namespaces.get(&ObjKey::new(&key.workspace, "", &key.namespace));
        let rules: Vec<Arc<Placement>> = self.rules.values_where(|k| k.workspace == key.workspace);
        let refs: Vec<&Placement> = rules.iter().map(|p| p.as_ref()).collect();
        let namespace = resolve::Namespace {
            name: &key.namespace,
            labels: ns.as_ref().and_then(|n| n.metadata.labels.as_ref()),
            annotations: ns.as_ref().and_then(|n| n.metadata.annotations.as_ref()),
        };
        let (rule, source) = match resolve::governing(d.meta().annotations.as_ref(), namespace, &refs) {
            Ok(r) => r,
            Err(message) => {
                self.metrics.failure("PlacementUnusable");
                return self.fail(key, &d, wp.as_deref(), "", &current, message).await.map(|n| (Outcome::Unschedulable, n));
            }
        };
        let rule_name = rule.metadata.name.clone().unwrap_or_default();
        // A workload that runs on every selected cluster is looked at whenever a cluster
        // changes: one that comes back, or a new one, may be for it.
        if d.kind().describe().spread == Spread::EveryCluster {
            self.everywhere.insert(key.clone());
        } else {
            self.everywhere.remove(key);
        }
        let workload = match inputs::workload(&d) {
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
        let spread = d.kind().describe().spread;
        let held = self.held_for_confirm(&d, &rule.spec, &current);
        let decision = {
            let _one_at_a_time = self.deciding.lock().unwrap_or_else(|e| e.into_inner());
            let mut views = self.book.views(|c| self.assumed.total(c));
            // A copy that must never run twice stays on a lost cluster until its loss is
            // confirmed, as the brake holds what runs on the clusters it holds.
            for v in views.iter_mut().filter(|v| held.contains(&v.name)) {
                v.braked = true;
            }
            let rule_view = core::Rule::of(&rule.spec).for_spread(spread, views.len());
            let every = spread == Spread::EveryCluster;
            let result = core::place(&views, &workload, &rule_view, &current, !short || rebalance || every).map(|mut decided| {
                // A DaemonSet runs wherever it is selected: that is never fewer than asked.
                if every {
                    decided.fewer = None;
                    decided.short = false;
                }
                decided
            });
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
                let next = self.place(key, &d, wp.as_deref(), (&rule_name, &source), &current, decided, &held).await?;
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
        d: &AnyWorkload,
        wp: Option<&WorkloadPlacement>,
        (rule, source): (&str, &resolve::Source),
        current: &[Share],
        decided: core::Decision,
        held: &[String],
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
                } else if d.kind().describe().spread == Spread::EveryCluster {
                    format!(
                        "off {} until it is Ready again; runs on every other cluster it selects: {} (Placement {rule})",
                        left.join(", "),
                        shares_text(&shares)
                    )
                } else {
                    format!("moved off {}; now on {} (Placement {rule}){}", left.join(", "), shares_text(&shares), moved_note(d))
                };
                ("Rescheduled", note)
            };
            tracing::info!(reason, clusters = %shares_text(&shares), "placed");
            self.recorder.workload(key, d, events::Type::Normal, reason, note);
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
        let waiting: Vec<&str> = shares.iter().map(|s| s.cluster.as_str()).filter(|c| held.iter().any(|h| h == c)).collect();
        let paused = if let Some(first) = waiting.first() {
            let on = waiting.join(", ");
            let kind = d.kind().name();
            Some((
                REASON_WAITING_FOR_CONFIRM,
                format!(
                    "stays on {on}, which stopped answering: a {kind} never runs on two clusters at once, so it moves only once {on} is \
                     confirmed lost; run `flotilla cluster confirm-lost {first}` if it is really gone{}",
                    if d.kind() == WorkloadKind::StatefulSet {
                        format!(" (or set spec.failover.statefulSets: Immediate on Placement {rule} to move at once)")
                    } else {
                        String::new()
                    }
                ),
            ))
        } else {
            (!braked.is_empty()).then(|| {
                let on = braked.join(", ");
                (
                    "DisruptionBrake",
                    format!(
                        "stays on {on}, which the disruption brake holds: too many clusters went NotReady at once (`flotilla status` shows which); \
                         `flotilla cluster confirm-lost {}` moves it if {on} is really gone",
                        braked[0]
                    ),
                )
            })
        };
        let was_paused =
            wp.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_FAILOVER_PAUSED)).map(|c| c.reason.clone());
        if !self.set_conditions(key, &wp, (true, reason, &message), paused.as_ref().map(|(r, m)| (*r, m.as_str()))).await? {
            return Ok(Next::After(Duration::ZERO));
        }
        if decided.short {
            self.short.insert(key.clone());
        } else {
            self.short.remove(key);
        }
        if decided.short && before.as_deref() != Some(REASON_FEWER_CLUSTERS) {
            tracing::warn!(reason = %message, "placed on fewer clusters than asked for");
            self.recorder.workload(key, d, events::Type::Warning, REASON_FEWER_CLUSTERS, message);
        }
        match paused {
            Some((REASON_WAITING_FOR_CONFIRM, note)) if was_paused.as_deref() != Some(REASON_WAITING_FOR_CONFIRM) => {
                tracing::warn!(reason = %note, "failover waits for the cluster's loss to be confirmed");
                self.recorder.workload(key, d, events::Type::Warning, REASON_WAITING_FOR_CONFIRM, note);
            }
            Some((_, note)) if was_paused.is_none() => {
                let note = format!("{note}: {}", self.book.brake().message(self.book.grace()));
                tracing::warn!(reason = %note, "failover paused by the disruption brake");
                self.recorder.workload(key, d, events::Type::Warning, CONDITION_FAILOVER_PAUSED, note);
            }
            _ => {}
        }
        // A drain in progress is looked at again until the old copy can go.
        Ok(if draining.is_some() { Next::After(DRAIN_RECHECK) } else { Next::Done })
    }
}

/// The reason of `FailoverPaused` (and of the Warning Event) on a workload that stays on
/// a lost cluster until an operator confirms the loss.
pub const REASON_WAITING_FOR_CONFIRM: &str = "WaitingForConfirm";

/// What the Event of a move adds for the kind: a StatefulSet's (or any pod template's)
/// claims start empty on the new cluster, and a Job runs again there.
fn moved_note(d: &AnyWorkload) -> &'static str {
    let claims = match d {
        AnyWorkload::StatefulSet(s) => s.spec.as_ref().is_some_and(|s| s.volume_claim_templates.as_ref().is_some_and(|v| !v.is_empty())),
        _ => false,
    } || d
        .pod_template()
        .and_then(|t| t.spec.as_ref())
        .is_some_and(|s| s.volumes.iter().flatten().any(|v| v.persistent_volume_claim.is_some()));
    match (d.kind(), claims) {
        (WorkloadKind::Job, _) => "; it had not finished, so it runs again there",
        (_, true) => "; its volumes start empty there: nothing is copied from the old cluster",
        _ => "",
    }
}

impl Scheduler {
    /// The clusters `d` runs on that stopped answering and whose loss no one confirmed,
    /// when its kind may never run on two clusters at once ([`Failover::AfterConfirm`])
    /// and its Placement does not say `failover.statefulSets: Immediate`.
    fn held_for_confirm(&self, d: &AnyWorkload, rule: &placement_api::PlacementSpec, current: &[Share]) -> Vec<String> {
        if !inputs::waits_for_confirm(d.kind(), rule) {
            return Vec::new();
        }
        current
            .iter()
            .filter(|s| self.book.get(&s.cluster).is_some_and(|o| !o.signature.ready && !o.signature.lost_confirmed))
            .map(|s| s.cluster.clone())
            .collect()
    }

    /// Says once, in a Warning Event on each, that the workloads of other kinds with
    /// `d`'s name are not placed: the WorkloadPlacement of that name is `d`'s.
    fn name_taken(&self, key: &ObjKey, d: &AnyWorkload, others: &[AnyWorkload]) {
        for o in others {
            if !self.name_taken.insert((key.clone(), o.kind())) {
                continue;
            }
            let note = placement_api::workload::name_taken(&key.name, d.kind(), o.kind());
            tracing::warn!(kind = o.kind().name(), reason = %note, "name taken by a workload of another kind");
            self.recorder.workload(key, o, events::Type::Warning, "FailedScheduling", note);
        }
    }
}
