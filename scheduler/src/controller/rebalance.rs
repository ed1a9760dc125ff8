//! Rebalancing after recovery: when a workload may widen again, and the make-before-break
//! move.

use super::*;

impl Scheduler {
    /// Whether the workload's Placement rebalances and it is due: left on fewer clusters
    /// than asked for, not rebalanced within the window, and a cluster it does not run
    /// on has been Ready for the window. Otherwise, when to look again, if a cluster is
    /// on its way to that.
    pub(super) fn rebalance_due(
        &self,
        key: &ObjKey,
        spec: &placement_api::PlacementSpec,
        short: bool,
        current: &[Share],
    ) -> (bool, Option<Duration>) {
        let Some(window) = spec.rebalance.as_ref().and_then(|r| r.window()) else { return (false, None) };
        if !short {
            return (false, None);
        }
        if let Some(since) = self.rebalanced_at.get(key).map(|t| t.elapsed()).filter(|s| *s < window) {
            return (false, Some(window - since));
        }
        let mut wait: Option<Duration> = None;
        for o in self.book.all() {
            let Some(name) = o.target.metadata.name.as_deref() else { continue };
            if current.iter().any(|s| s.cluster == name) {
                continue;
            }
            match self.book.ready_for(name) {
                Some(ready) if ready >= window => return (true, None),
                Some(ready) => wait = Some(wait.map_or(window - ready, |w| w.min(window - ready))),
                None => {}
            }
        }
        (false, wait)
    }

    /// Starts a rebalance, make-before-break: the assignment becomes every old share
    /// beside the new ones (each cluster at the larger of the two), and the new
    /// assignment is written once the new shares are Available ([`Self::finish_rebalance`]).
    pub(super) async fn start_rebalance(
        &self,
        key: &ObjKey,
        d: &AnyWorkload,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        current: &[Share],
        target: Vec<Share>,
    ) -> Result<Next, anyhow::Error> {
        let mut transitional = target.clone();
        for c in current {
            match transitional.iter_mut().find(|s| s.cluster == c.cluster) {
                Some(s) => s.replicas = s.replicas.max(c.replicas),
                None => transitional.push(c.clone()),
            }
        }
        transitional.sort();
        let Some(_) = self.write_assignment(key, d, wp, rule, &transitional).await? else { return Ok(Next::After(Duration::ZERO)) };
        let added: Vec<Share> = target
            .iter()
            .filter(|s| current.iter().find(|c| c.cluster == s.cluster).is_none_or(|c| c.replicas < s.replicas))
            .cloned()
            .collect();
        let note = format!(
            "spreading again as Placement {rule} rebalances: adding {}; the current shares stay until the new ones are Available, then it runs on {}",
            shares_text(&added),
            shares_text(&target)
        );
        tracing::info!(reason = %note, "rebalancing");
        self.recorder.workload(key, d, events::Type::Normal, "Rebalanced", note);
        self.rebalanced_at.insert(key.clone(), std::time::Instant::now());
        let r = Rebalancing {
            target,
            before: current.to_vec(),
            started: jiff::Timestamp::now(),
            until: std::time::Instant::now() + DEFAULT_DRAIN_TIMEOUT,
        };
        self.rebalancing.insert(key.clone(), r);
        Ok(Next::After(DRAIN_RECHECK))
    }

    /// Ends a rebalance under way: once its new shares are Available (or its deadline
    /// has passed), the assignment becomes what it led to. One of its clusters lost or
    /// draining ends it as it stands, and the workload is decided again.
    pub(super) async fn finish_rebalance(
        &self,
        key: &ObjKey,
        d: &AnyWorkload,
        wp: Option<&WorkloadPlacement>,
        rule: &str,
        source: &resolve::Source,
    ) -> Result<Option<Next>, anyhow::Error> {
        let Some(Rebalancing { target, before, started, until }) = self.rebalancing.get(key).map(|r| r.clone()) else { return Ok(None) };
        let stands = target.iter().all(|s| self.book.get(&s.cluster).is_some_and(|o| o.signature.ready && !o.signature.draining));
        if !stands {
            self.rebalancing.remove(key);
            return Ok(None);
        }
        if !available_since(wp, &target, &before, started) && std::time::Instant::now() < until {
            return Ok(Some(Next::After(DRAIN_RECHECK)));
        }
        self.rebalancing.remove(key);
        let Some(wp) = self.write_assignment(key, d, wp, rule, &target).await? else { return Ok(Some(Next::After(Duration::ZERO))) };
        let note = format!("now on {} (Placement {rule} rebalanced)", shares_text(&target));
        self.recorder.workload(key, d, events::Type::Normal, "Rebalanced", note);
        let message = format!("placed by Placement {rule} ({source}); spec.clusters lists where");
        if !self.set_conditions(key, &wp, (true, "Scheduled", &message), None).await? {
            return Ok(Some(Next::After(Duration::ZERO)));
        }
        Ok(Some(Next::Done))
    }
}

/// Whether every share of `shares` larger than in `before` is reported Available by
/// its cluster's syncer, in a report written at `since` or later: an older entry may
/// describe a copy from before (a cluster that comes back keeps its last report until
/// its syncer writes again). Shares that did not grow run already.
pub(super) fn available_since(wp: Option<&WorkloadPlacement>, shares: &[Share], before: &[Share], since: jiff::Timestamp) -> bool {
    let reported = wp.and_then(|w| w.status.as_ref()).map(|s| s.clusters.as_slice()).unwrap_or_default();
    let grew = |s: &&Share| before.iter().find(|b| b.cluster == s.cluster).is_none_or(|b| b.replicas < s.replicas);
    shares.iter().filter(grew).all(|s| {
        reported.iter().any(|e| {
            e.name == s.cluster
                && e.observed
                && e.available_replicas >= i32::try_from(s.replicas).unwrap_or(i32::MAX)
                && e.last_sync_time.as_ref().is_some_and(|t| t.0 >= since)
        })
    })
}

/// Whether two assignments are the same, in any order.
pub(super) fn same_shares(a: &[Share], b: &[Share]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

pub(super) fn shares_text(shares: &[Share]) -> String {
    shares.iter().map(|s| format!("{}={}", s.cluster, s.replicas)).collect::<Vec<_>>().join(" ")
}
