//! Draining a cluster: each old copy waits for its replacement to be Available.

use super::*;

impl Scheduler {
    /// Make-before-break for a drain: a share on a draining cluster stays in the
    /// assignment, beside the shares that replace it, until every cluster in `shares`
    /// reports its share Available, or until the drain's deadline. Returns the
    /// clusters kept and the deadline, when it kept any. A lost cluster is not kept:
    /// its copy cannot be counted on.
    pub(super) fn hold_drained(
        &self,
        key: &ObjKey,
        wp: Option<&WorkloadPlacement>,
        current: &[Share],
        shares: &mut Vec<Share>,
    ) -> Option<(Vec<String>, String)> {
        let now = jiff::Timestamp::now();
        let leaving: Vec<(Share, jiff::Timestamp)> = current
            .iter()
            .filter(|c| c.replicas > 0 && !shares.iter().any(|s| s.cluster == c.cluster))
            .filter(|c| matches!(self.why_left(&c.cluster), Left::Draining))
            .filter_map(|c| Some((c.clone(), drain_deadline(&self.book.get(&c.cluster)?.target)?)))
            .filter(|(_, deadline)| *deadline > now)
            .collect();
        if leaving.is_empty() {
            self.drain_base.remove(key);
            return None;
        }
        // Reports from before the drain began may describe an older copy.
        let began = leaving
            .iter()
            .filter_map(|(s, _)| self.book.get(&s.cluster).and_then(|o| o.target.spec.evict_after.as_ref().map(|t| t.0)))
            .min()
            .unwrap_or(now);
        // The shares before the drain, kept from its first look: later, the assignment
        // holds the new shares already, and they would not look grown.
        let before = self.drain_base.entry(key.clone()).or_insert_with(|| current.to_vec()).clone();
        if available_since(wp, shares, &before, began) {
            self.drain_base.remove(key);
            return None;
        }
        let until = leaving.iter().map(|(_, d)| *d).min().map(|d| d.to_string()).unwrap_or_default();
        let names = leaving.iter().map(|(s, _)| s.cluster.clone()).collect();
        shares.extend(leaving.into_iter().map(|(s, _)| s));
        shares.sort();
        Some((names, until))
    }
}

/// When a draining cluster's old copies go whether or not their replacements are
/// Available: its `drain-deadline` annotation, or `evictAfter` plus the default timeout.
pub(super) fn drain_deadline(t: &SyncTarget) -> Option<jiff::Timestamp> {
    let annotated =
        t.metadata.annotations.as_ref().and_then(|a| a.get(placement_api::DRAIN_DEADLINE_ANNOTATION)).and_then(|d| d.parse().ok());
    annotated.or_else(|| {
        let start = t.spec.evict_after.as_ref()?.0;
        start.checked_add(jiff::SignedDuration::try_from(DEFAULT_DRAIN_TIMEOUT).ok()?).ok()
    })
}
