//! Whose silence it is: the cluster's, or the control plane's.
//!
//! When replicas of the control plane share the push-mode syncers out
//! (syncer/src/shard.rs), each cluster's syncer runs in one replica, under the Lease
//! `flotilla-syncer-<cluster>`, which its holder renews every 2 s. When that replica dies
//! or stalls, the cluster's heartbeats stop with it, although the cluster is fine; a
//! replica takes the syncer over once the Lease has expired, 15 s later, which is longer
//! than the heartbeat grace. So while a cluster's syncer Lease is not being renewed,
//! the silence of its heartbeat is the control plane's own, and the scheduler does not
//! count it: the cluster's grace is renewed ([`crate::health::Book::hold`]). The hold
//! lasts at most the Lease's duration plus one grace after the last renewal, so a
//! syncer that nobody takes over does not keep a dead cluster Ready for ever.
//!
//! A syncer that renews its Lease but cannot reach its cluster is not held: then the
//! silence is the cluster's. Clusters without a syncer Lease (one server alone, or
//! pull mode, where the syncer runs in the cluster) are never held.

use std::time::Duration;

use dashmap::DashMap;
use k8s_openapi::api::coordination::v1::Lease;
use runtime::leader::SYNCER_LEASE_PREFIX;
use tokio::time::Instant;

/// What identifies one renewal of a Lease: its holder and renew time.
type Record = (Option<String>, Option<String>);

/// The syncer Leases as last seen: per cluster, the record and when it last changed,
/// on this process's clock.
pub struct SyncerLeases {
    seen: DashMap<String, (Record, Instant)>,
    /// A Lease unchanged for longer has missed renewals: its syncer is not running.
    stale_after: Duration,
    /// A Lease unchanged for longer no longer holds its cluster.
    give_up_after: Duration,
}

impl SyncerLeases {
    /// `renew` is how often holders renew (2 s), `lease` how long a Lease lasts (15 s).
    pub fn new(renew: Duration, lease: Duration, grace: Duration) -> Self {
        SyncerLeases { seen: DashMap::new(), stale_after: renew * 2, give_up_after: lease + grace }
    }

    /// Takes in a Lease of `root`/`flotilla-system` from the watch, at `now`.
    pub fn observe(&self, lease: &Lease, now: Instant) {
        let Some(cluster) = lease.metadata.name.as_deref().and_then(|n| n.strip_prefix(SYNCER_LEASE_PREFIX)) else { return };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = (spec.holder_identity.filter(|h| !h.is_empty()), spec.renew_time.map(|t| t.0.to_string()));
        match self.seen.get_mut(cluster) {
            Some(e) if e.0 == record => {}
            Some(mut e) => *e = (record, now),
            None => {
                self.seen.insert(cluster.to_string(), (record, now));
            }
        }
    }

    /// Forgets a deleted Lease.
    pub fn remove(&self, lease_name: &str) {
        if let Some(cluster) = lease_name.strip_prefix(SYNCER_LEASE_PREFIX) {
            self.seen.remove(cluster);
        }
    }

    /// The clusters whose syncer is silent at `now`, each with the moment its Lease
    /// was last renewed.
    pub fn silent(&self, now: Instant) -> Vec<(String, Instant)> {
        let mut out: Vec<(String, Instant)> = self
            .seen
            .iter()
            .filter(|e| {
                let quiet = now.saturating_duration_since(e.1);
                quiet > self.stale_after && quiet <= self.give_up_after
            })
            .map(|e| (e.key().clone(), e.1))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(name: &str, holder: &str, renewed: i64) -> Lease {
        Lease {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(jiff::Timestamp::from_second(renewed).unwrap())),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_lease_that_stops_being_renewed_holds_its_cluster_for_a_while_and_no_other_lease_counts() {
        let leases = SyncerLeases::new(Duration::from_secs(2), Duration::from_secs(15), Duration::from_secs(8));
        let t0 = Instant::now();
        leases.observe(&lease("flotilla-syncer-east", "a", 1), t0);
        leases.observe(&lease("flotilla-scheduler", "a", 1), t0);
        leases.observe(&lease("flotilla-syncer-west", "b", 1), t0);
        let s = Duration::from_secs;
        for i in 1..=10 {
            leases.observe(&lease("flotilla-syncer-west", "b", 1 + 2 * i), t0 + s(2 * i as u64));
        }
        assert!(leases.silent(t0 + s(4)).is_empty(), "renewals are 2 s apart: 4 s without one is not yet a silence");
        assert_eq!(leases.silent(t0 + s(5)), vec![("east".to_string(), t0)], "east missed two renewals; west renews");
        assert_eq!(leases.silent(t0 + s(23)), vec![("east".to_string(), t0)], "held for the lease and one grace");
        assert!(leases.silent(t0 + s(24)).is_empty(), "then judged by its heartbeats again");
        leases.observe(&lease("flotilla-syncer-east", "c", 24), t0 + s(24));
        assert!(leases.silent(t0 + s(25)).iter().all(|(c, _)| c != "east"), "a new holder renews it");
        leases.remove("flotilla-syncer-east");
        assert!(leases.silent(t0 + s(40)).iter().all(|(c, _)| c != "east"), "a deleted Lease is forgotten");
    }
}
