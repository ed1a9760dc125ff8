//! Watching the clusters' heartbeats: who is lost, the brake, and the syncers held back.

use super::*;

impl Scheduler {
    /// Renews the grace of every cluster whose syncer went silent with its replica
    /// (crate::syncers), and says when one starts and stops being held.
    pub(super) fn hold_silent_syncers(&self, held: &mut BTreeSet<String>) {
        let now = tokio::time::Instant::now();
        let silent = self.syncer_leases.silent(now);
        for (name, since) in &silent {
            if self.book.hold(name, *since, now) && held.insert(name.clone()) {
                tracing::warn!(
                    cluster = %name,
                    quiet = ?now.saturating_duration_since(*since),
                    "the replica that syncs this cluster stopped renewing its syncer Lease: the cluster's missed heartbeats are not counted until another replica takes its syncer over"
                );
            }
        }
        held.retain(|name| {
            let still = silent.iter().any(|(s, _)| s == name);
            if !still {
                tracing::info!(cluster = %name, "this cluster's syncer Lease is renewed again: its heartbeats count again");
            }
            still
        });
    }

    pub(super) async fn watch_health(&self, tx: mpsc::UnboundedSender<Trigger>) {
        let mut tick = tokio::time::interval(HEALTH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The resourceVersion each cluster's last condition write was computed from,
        // so a write is not repeated before the watch has shown its result.
        let written: DashMap<String, Option<String>> = DashMap::new();
        let api: Api<SyncTarget> = Api::all(clients::workspace(&self.base, ROOT_WORKSPACE));
        let mut held = BTreeSet::new();
        loop {
            let expiry = self.book.next_expiry().map(|at| at + PAST_GRACE);
            tokio::select! {
                _ = tick.tick() => {}
                _ = tokio::time::sleep_until(expiry.unwrap_or_else(|| tokio::time::Instant::now() + HEALTH_TICK)), if expiry.is_some() => {}
            }
            self.hold_silent_syncers(&mut held);
            let tick = self.book.tick();
            if let Some(r) = &tick.renewal {
                renewed(&self.metrics, self.book.grace(), r);
            }
            match tick.hold {
                Some(health::Hold::Began(silent)) => tracing::warn!(
                    silent = ?silent,
                    "no new heartbeat of any cluster for {silent:.1?}: the API or the watch may be stalled; no cluster is declared lost on missed heartbeats until one arrives, or for at most {}s",
                    self.book.grace().as_secs()
                ),
                Some(health::Hold::Ended(silent)) => tracing::warn!(
                    silent = ?silent,
                    "no new heartbeat of any cluster for {silent:.1?}, longer than the grace: clusters are judged again"
                ),
                None => {}
            }
            if let Some(b) = &tick.brake {
                let held: Vec<&String> = b.held().collect();
                if b.engaged {
                    tracing::warn!(lost = ?b.lost, confirmed = ?b.confirmed, ready = b.ready, "disruption brake: {}", b.message(self.book.grace()));
                } else {
                    tracing::warn!(ready = b.ready, "disruption brake released: the clusters still lost are failed over as usual");
                }
                self.metrics.brake_engaged.set(i64::from(b.engaged));
                self.metrics.braked_clusters.set(i64::try_from(held.len()).unwrap_or(i64::MAX));
            }
            for name in tick.changed {
                let o = self.book.get(&name);
                let (ready, braked) = o.map_or((false, false), |o| (o.signature.ready, o.signature.braked));
                tracing::info!(cluster = %name, ready, braked, "cluster health changed");
                send(&tx, Trigger::Cluster(name));
            }
            let now = Time(jiff::Timestamp::now());
            let brake = self.book.brake().message(self.book.grace());
            for o in self.book.all() {
                let Some(name) = o.target.metadata.name.clone() else { continue };
                self.metrics.cluster(&name, o.heartbeat_age(), o.signature.ready);
                let rv = o.target.metadata.resource_version.clone();
                if written.get(&name).is_some_and(|w| *w == rv) {
                    continue;
                }
                let paused = o.signature.braked.then_some(brake.as_str());
                let Some((conditions, schedulable)) = health::desired_status(&o, self.book.grace(), &now, paused) else { continue };
                written.insert(name.clone(), rv.clone());
                let patch = json!({
                    "metadata": {"resourceVersion": rv},
                    "status": {"conditions": conditions, "schedulable": schedulable},
                });
                match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
                    Ok(_) => tracing::debug!(cluster = %name, "wrote the cluster's health"),
                    // A heartbeat got in first; the next tick works from what it wrote.
                    Err(e) if is_conflict(&e) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "could not write the cluster's health; retrying");
                        written.remove(&name);
                    }
                }
            }
        }
    }
}

/// Counts and logs a renewal of every cluster's grace.
pub(super) fn renewed(metrics: &Metrics, grace: Duration, r: &health::Renewal) {
    metrics.observation_gap(r.cause);
    tracing::warn!(
        cause = r.cause.label(),
        gap = ?r.lasted,
        renewed = r.clusters.len(),
        "grace renewed for all clusters: {}, so it could not observe heartbeats; every cluster that was Ready gets a fresh {}s grace from now",
        r.cause.text(r.lasted),
        grace.as_secs(),
    );
    tracing::debug!(clusters = ?r.clusters, "the clusters whose grace was renewed");
}
