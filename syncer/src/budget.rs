//! A token bucket for writes that can wait: a syncer's progress reports.
//!
//! A report that ends a rollout (or says it failed) is written at once. The steps
//! before it are worth showing while they are few, but when hundreds of copies start
//! at once (a failover lands a lost cluster's workloads here) every intermediate step
//! costs a WorkloadPlacement write, the status aggregator's two writes after it, and a
//! watch event to every cache of WorkloadPlacements, on the same control plane that is
//! carrying out the failover. A bucket bounds that cost per cluster, whatever the
//! number of copies, and leaves a handful of rollouts untouched.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Refills at `per_second` tokens a second, up to `burst`; starts full. Kept as the
/// moment the tokens taken so far are paid back (the bucket is full again), so that
/// the arithmetic is exact.
#[derive(Debug)]
pub struct Budget {
    /// The time one token takes to come back.
    interval: Duration,
    /// How far ahead of now that moment may lie: `burst` intervals.
    depth: Duration,
    full_at: Mutex<Instant>,
}

impl Budget {
    /// A full bucket.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self::new_at(per_second, burst, Instant::now())
    }

    fn new_at(per_second: u32, burst: u32, now: Instant) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Self { interval, depth: interval * burst.max(1), full_at: Mutex::new(now) }
    }

    /// Takes a token if there is one.
    pub fn take(&self) -> bool {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> bool {
        let mut full_at = self.full_at.lock().unwrap_or_else(|e| e.into_inner());
        let next = (*full_at).max(now) + self.interval;
        if next.saturating_duration_since(now) > self.depth {
            return false;
        }
        *full_at = next;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_gives_its_burst_then_refills_at_the_rate_and_never_above_the_burst() {
        let t0 = Instant::now();
        let b = Budget::new_at(10, 3, t0);
        assert_eq!((0..5).map(|_| b.take_at(t0)).collect::<Vec<_>>(), [true, true, true, false, false]);
        // 10 a second: one token after 100 ms, not after 90.
        assert!(!b.take_at(t0 + Duration::from_millis(90)));
        assert!(b.take_at(t0 + Duration::from_millis(100)));
        assert!(!b.take_at(t0 + Duration::from_millis(100)));
        // A long idle spell refills to the burst, no more.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..5).filter(|_| b.take_at(later)).count(), 3);
    }

    #[test]
    fn a_clock_read_out_of_order_neither_adds_nor_loses_tokens() {
        let t0 = Instant::now();
        let b = Budget::new_at(1, 1, t0 + Duration::from_secs(1));
        assert!(b.take_at(t0 + Duration::from_secs(1)));
        // Another thread read the clock first and takes the lock second.
        assert!(!b.take_at(t0));
        assert!(b.take_at(t0 + Duration::from_secs(2)));
    }
}
