//! The "assumed" cache: room the scheduler has handed out that the clusters'
//! heartbeats do not show yet, so that a burst of new workloads never overcommits a
//! cluster (kube-scheduler keeps assumed pods for the same reason).
//!
//! An entry is made when a workload's share on a cluster grows. It is confirmed once
//! the cluster's syncer reports that many replicas on the copy (the pods exist, so the
//! cluster's own accounting includes them), and dropped two heartbeats after that:
//! one heartbeat may have been computed before the pods existed, the second cannot.
//! An entry that is never confirmed (the syncer is stuck) expires after [`TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use placement_api::quantity::Resources;
use tokio::time::Instant;

use runtime::ObjKey;

/// How long an unconfirmed assumption lasts.
pub const TTL: Duration = Duration::from_secs(60);
/// Heartbeats after confirmation before an entry is dropped.
const BEATS_TO_SETTLE: u64 = 2;

#[derive(Debug, Clone)]
struct Item {
    amount: Resources,
    share: u32,
    made: Instant,
    confirmed_at_beat: Option<u64>,
}

/// What is assumed on one cluster, with its sum kept current: every decision reads the
/// sum of every cluster, so adding up the items each time would cost a decision
/// time proportional to all the workloads assumed anywhere.
#[derive(Default)]
struct OnCluster {
    items: HashMap<ObjKey, Item>,
    total: Resources,
}

impl OnCluster {
    fn insert(&mut self, workload: ObjKey, item: Item) {
        let amount = item.amount;
        let old = self.items.insert(workload, item);
        self.update(|total| old.map_or(total, |o| total.saturating_sub(o.amount)).saturating_add(amount));
    }

    fn remove(&mut self, workload: &ObjKey) {
        if let Some(old) = self.items.remove(workload) {
            self.update(|total| total.saturating_sub(old.amount));
        }
    }

    fn retain(&mut self, keep: impl FnMut(&ObjKey, &mut Item) -> bool) {
        self.items.retain(keep);
        self.total = self.sum();
    }

    fn sum(&self) -> Resources {
        self.items.values().fold(Resources::ZERO, |a, i| a.saturating_add(i.amount))
    }

    /// Applies `change` to the sum, or counts it again when it cannot be trusted: a
    /// sum that saturated, before or after, cannot be taken apart again.
    fn update(&mut self, change: impl FnOnce(Resources) -> Resources) {
        let saturated = |t: Resources| [t.cpu_millis, t.memory_bytes, t.pods].contains(&u64::MAX);
        let next = change(self.total);
        self.total = if saturated(self.total) || saturated(next) { self.sum() } else { next };
    }
}

/// Assumed room per cluster and workload.
#[derive(Default)]
pub struct Assumed {
    clusters: Mutex<HashMap<String, OnCluster>>,
}

impl Assumed {
    /// The room assumed on `cluster` in total.
    pub fn total(&self, cluster: &str) -> Resources {
        let clusters = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        clusters.get(cluster).map_or(Resources::ZERO, |c| c.total)
    }

    /// Records that `workload`'s share on `cluster` went from `old` to `new` replicas of
    /// `per_replica` each. Only growth is assumed; shrinking frees room the heartbeat
    /// will show, and until then the scheduler errs on the safe side.
    pub fn record(&self, workload: &ObjKey, cluster: &str, old: u32, new: u32, per_replica: Resources) {
        let mut clusters = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        let items = clusters.entry(cluster.to_string()).or_default();
        let grown = new.saturating_sub(old);
        if grown == 0 {
            if new < old {
                items.remove(workload);
            }
            return;
        }
        let g = u64::from(grown);
        let amount = Resources::new(
            per_replica.cpu_millis.saturating_mul(g),
            per_replica.memory_bytes.saturating_mul(g),
            per_replica.pods.max(1).saturating_mul(g),
        );
        items.insert(workload.clone(), Item { amount, share: new, made: Instant::now(), confirmed_at_beat: None });
    }

    /// Forgets what was assumed for `workload` on `cluster` (unassigned or deleted).
    pub fn forget(&self, workload: &ObjKey, cluster: &str) {
        let mut clusters = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(items) = clusters.get_mut(cluster) {
            items.remove(workload);
        }
    }

    /// The syncer of `cluster` reports `replicas` on the copy of `workload`; `beats` is
    /// the cluster's heartbeat count now.
    pub fn reported(&self, workload: &ObjKey, cluster: &str, replicas: i32, beats: u64) {
        let mut clusters = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(item) = clusters.get_mut(cluster).and_then(|c| c.items.get_mut(workload)) {
            if item.confirmed_at_beat.is_none() && i64::from(replicas) >= i64::from(item.share) {
                item.confirmed_at_beat = Some(beats);
            }
        }
    }

    /// A heartbeat of `cluster` arrived (its `beats`-th): drops what it now shows.
    pub fn beat(&self, cluster: &str, beats: u64) {
        let mut clusters = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(items) = clusters.get_mut(cluster) {
            let now = Instant::now();
            items.retain(|_, i| match i.confirmed_at_beat {
                Some(at) => beats < at + BEATS_TO_SETTLE,
                None => now.saturating_duration_since(i.made) < TTL,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn assumed_room_lasts_until_two_heartbeats_after_the_pods_exist() {
        let a = Assumed::default();
        let web = ObjKey::new("demo", "default", "web");
        let per = Resources::new(100, 1 << 20, 1);
        a.record(&web, "east", 0, 3, per);
        assert_eq!(a.total("east"), Resources::new(300, 3 << 20, 3));
        a.beat("east", 1);
        a.reported(&web, "east", 2, 1);
        a.beat("east", 2);
        assert_eq!(a.total("east").pods, 3, "two of three pods reported: still assumed");
        a.reported(&web, "east", 3, 2);
        a.beat("east", 3);
        assert_eq!(a.total("east").pods, 3, "one heartbeat after the report may predate the pods");
        a.beat("east", 4);
        assert_eq!(a.total("east"), Resources::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn only_growth_is_assumed_and_unconfirmed_entries_expire() {
        let a = Assumed::default();
        let web = ObjKey::new("demo", "default", "web");
        let per = Resources::new(100, 0, 1);
        a.record(&web, "east", 2, 5, per);
        assert_eq!(a.total("east").pods, 3);
        a.record(&web, "east", 5, 1, per);
        assert_eq!(a.total("east"), Resources::ZERO);
        a.record(&web, "west", 0, 1, per);
        tokio::time::advance(TTL).await;
        a.beat("west", 7);
        assert_eq!(a.total("west"), Resources::ZERO);
        a.record(&web, "west", 0, 1, per);
        a.forget(&web, "west");
        assert_eq!(a.total("west"), Resources::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_kept_sum_is_the_sum_of_the_items_through_replacements_removals_and_saturation() {
        let a = Assumed::default();
        let key = |i: usize| ObjKey::new("demo", "default", &format!("w{i}"));
        let per = Resources::new(250, 1 << 30, 1);
        for i in 0..50 {
            a.record(&key(i), "east", 0, 1 + (i as u32 % 3), per);
        }
        for i in (0..50).step_by(4) {
            a.record(&key(i), "east", 1, 4, per);
        }
        for i in (0..50).step_by(5) {
            a.forget(&key(i), "east");
        }
        a.record(&key(7), "east", 4, 1, per);
        let expected = {
            let clusters = a.clusters.lock().unwrap();
            clusters["east"].sum()
        };
        assert_ne!(expected, Resources::ZERO);
        assert_eq!(a.total("east"), expected);
        // A sum that saturates is recounted once the huge item is gone.
        let huge = Resources::new(u64::MAX, u64::MAX, u64::MAX);
        a.record(&key(99), "east", 0, 1, huge);
        assert_eq!(a.total("east").cpu_millis, u64::MAX);
        a.forget(&key(99), "east");
        assert_eq!(a.total("east"), expected);
    }
}
