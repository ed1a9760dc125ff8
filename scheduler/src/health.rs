//! Cluster health from heartbeats, and the scheduler's view of each cluster.
//!
//! A cluster is Ready while its syncer's heartbeat is younger than the grace period.
//! Age is measured on this process's monotonic clock from the moment a *new*
//! `lastSyncerHeartbeatTime` was observed, the way the Kubernetes node lifecycle
//! controller measures node heartbeats: clock skew between a pull-mode syncer and the
//! scheduler cannot fake or hide a heartbeat, and a single failed request never
//! changes anything. Only heartbeats decide.
//!
//! When the scheduler starts, a cluster whose stored condition says Ready gets one
//! full grace period to show a heartbeat, so that a scheduler restart causes no false
//! NotReady; a cluster stored as not Ready stays so until it beats again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use placement_api::quantity::Resources;
use placement_api::{SyncTarget, CONDITION_CLUSTER_REACHABLE, CONDITION_HEARTBEAT_HEALTHY, CONDITION_READY};
use tokio::time::Instant;

use crate::core;

/// Everything about a cluster that can change a placement decision, apart from its
/// free room. Heartbeats that change none of it wake nothing up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Heartbeat within the grace period.
    pub ready: bool,
    /// Cordoned.
    pub cordoned: bool,
    /// `evictAfter` has passed.
    pub draining: bool,
    /// Its labels.
    pub labels: Arc<BTreeMap<String, String>>,
}

/// One cluster as last observed.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The SyncTarget.
    pub target: Arc<SyncTarget>,
    /// The heartbeat time last seen.
    beat: Option<Time>,
    /// When a new heartbeat was last seen (None: none since this process started
    /// and the stored state says not Ready, or there never was one).
    beat_seen_at: Option<Instant>,
    /// New heartbeats seen so far.
    pub beats: u64,
    /// Free room from the heartbeat.
    pub available: Resources,
    /// Per-node headroom from the heartbeat.
    pub headroom: Vec<Resources>,
    /// What the scheduler last acted on.
    pub signature: Signature,
}

impl Observed {
    /// How long ago this process saw the cluster's last new heartbeat; `None` if it
    /// has seen none and does not trust the stored state.
    pub fn heartbeat_age(&self) -> Option<Duration> {
        self.beat_seen_at.map(|s| s.elapsed())
    }
}

/// What an observation changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// A new heartbeat.
    pub beat: bool,
    /// The free room grew in some resource: workloads waiting for room may fit now.
    pub room_grew: bool,
    /// The signature changed (or the cluster is new or gone).
    pub signature_changed: bool,
}

/// The scheduler's book of clusters.
pub struct Book {
    clusters: DashMap<String, Observed>,
    grace: Duration,
}

fn condition_status(t: &SyncTarget, type_: &str) -> Option<String> {
    t.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

fn room_of(t: &SyncTarget) -> (Resources, Vec<Resources>) {
    let Some(s) = t.status.as_ref() else { return (Resources::ZERO, Vec::new()) };
    let available = Resources::from_resource_list(&s.available).unwrap_or(Resources::ZERO);
    let headroom = s
        .node_headroom
        .iter()
        .filter_map(|h| {
            let cpu = placement_api::quantity::cpu_millis(&h.cpu).ok()?;
            let memory = placement_api::quantity::memory_bytes(&h.memory).ok()?;
            Some(Resources::new(cpu, memory, u64::try_from(h.pods).unwrap_or(0)))
        })
        .collect();
    (available, headroom)
}

/// Whether the syncer has reported the cluster's capacity. Its first heartbeats may
/// come before it has listed the nodes and pods; until then nothing can be placed
/// there with any confidence, so the cluster is not Ready.
fn capacity_known(t: &SyncTarget) -> bool {
    t.status.as_ref().is_some_and(|s| !s.allocatable.is_empty())
}

/// Whether `evictAfter` has passed at `now`.
pub fn draining(t: &SyncTarget, now: jiff::Timestamp) -> bool {
    t.spec.evict_after.as_ref().is_some_and(|e| e.0 <= now)
}

impl Book {
    /// An empty book with the given heartbeat grace.
    pub fn new(grace: Duration) -> Self {
        Book { clusters: DashMap::new(), grace }
    }

    /// The heartbeat grace.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    fn ready_at(&self, seen: Option<Instant>, now: Instant) -> bool {
        seen.is_some_and(|s| now.saturating_duration_since(s) <= self.grace)
    }

    fn signature(&self, t: &SyncTarget, seen: Option<Instant>, now: Instant) -> Signature {
        Signature {
            ready: self.ready_at(seen, now) && capacity_known(t),
            cordoned: t.spec.unschedulable,
            draining: draining(t, jiff::Timestamp::now()),
            labels: Arc::new(t.metadata.labels.clone().unwrap_or_default()),
        }
    }

    /// Takes in a SyncTarget from the watch.
    pub fn observe(&self, t: Arc<SyncTarget>) -> Observation {
        let Some(name) = t.metadata.name.clone() else { return Observation::default() };
        let now = Instant::now();
        let beat = t.status.as_ref().and_then(|s| s.last_syncer_heartbeat_time.clone());
        let (available, headroom) = room_of(&t);
        let mut out = Observation::default();
        match self.clusters.get_mut(&name) {
            Some(mut o) => {
                if beat.is_some() && beat != o.beat {
                    o.beat_seen_at = Some(now);
                    o.beats += 1;
                    out.beat = true;
                }
                o.beat = beat;
                out.room_grew = available.cpu_millis > o.available.cpu_millis
                    || available.memory_bytes > o.available.memory_bytes
                    || available.pods > o.available.pods;
                o.available = available;
                o.headroom = headroom;
                let sig = self.signature(&t, o.beat_seen_at, now);
                out.signature_changed = sig != o.signature;
                o.signature = sig;
                o.target = t;
            }
            None => {
                // First sight: trust a stored Ready for one grace period.
                let seen = (beat.is_some() && condition_status(&t, CONDITION_READY).as_deref() != Some("False")).then_some(now);
                let signature = self.signature(&t, seen, now);
                self.clusters.insert(name, Observed { target: t, beat, beat_seen_at: seen, beats: 0, available, headroom, signature });
                out = Observation { beat: false, room_grew: true, signature_changed: true };
            }
        }
        out
    }

    /// Forgets a deleted SyncTarget.
    pub fn remove(&self, name: &str) {
        self.clusters.remove(name);
    }

    /// Re-evaluates every cluster against the clock; returns the clusters whose
    /// signature changed (a heartbeat aged past the grace, an `evictAfter` passed).
    pub fn tick(&self) -> Vec<String> {
        let now = Instant::now();
        let mut changed = Vec::new();
        for mut o in self.clusters.iter_mut() {
            let sig = self.signature(&o.target, o.beat_seen_at, now);
            if sig != o.signature {
                o.signature = sig;
                changed.push(o.key().clone());
            }
        }
        changed
    }

    /// The first moment a cluster now Ready has gone a whole grace period without a
    /// new heartbeat, so that the health loop can look exactly then rather than at its
    /// next tick. `None` when no cluster is Ready on a heartbeat.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.clusters.iter().filter(|o| o.signature.ready).filter_map(|o| o.beat_seen_at).min().map(|seen| seen + self.grace)
    }

    /// How many new heartbeats of `name` have been seen (0 for an unknown cluster).
    pub fn beats(&self, name: &str) -> u64 {
        self.clusters.get(name).map_or(0, |o| o.beats)
    }

    /// Whether a SyncTarget of this name is registered.
    pub fn knows(&self, name: &str) -> bool {
        self.clusters.contains_key(name)
    }

    /// A copy of one cluster's record.
    pub fn get(&self, name: &str) -> Option<Observed> {
        self.clusters.get(name).map(|o| o.clone())
    }

    /// Every cluster's record.
    pub fn all(&self) -> Vec<Observed> {
        self.clusters.iter().map(|o| o.clone()).collect()
    }

    /// The clusters as the placement core sees them, with `assumed(name)` taken off
    /// each one's free room.
    pub fn views(&self, assumed: impl Fn(&str) -> Resources) -> Vec<core::Cluster> {
        self.clusters
            .iter()
            .map(|o| core::Cluster {
                name: o.key().clone(),
                labels: o.signature.labels.clone(),
                ready: o.signature.ready,
                cordoned: o.signature.cordoned,
                draining: o.signature.draining,
                available: o.available.saturating_sub(assumed(o.key())),
                headroom: o.headroom.clone(),
            })
            .collect()
    }
}

/// The `Ready` and `HeartbeatHealthy` conditions and the `schedulable` column for one
/// cluster, or `None` when what is stored already says so. Other conditions (the
/// syncer's `ClusterReachable`) are kept.
pub fn desired_status(o: &Observed, grace: Duration, now: &Time) -> Option<(Vec<Condition>, String)> {
    let t = &o.target;
    let stored = t.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let (status, reason, message) = if o.signature.ready {
        ("True", "HeartbeatCurrent", format!("the syncer's heartbeat is within the {}s grace", grace.as_secs()))
    } else if o.beat.is_none() {
        (
            "False",
            "NoHeartbeat",
            "the syncer has not reported yet; start it (flotilla syncer, or register the cluster in push mode) and check its logs"
                .to_string(),
        )
    } else if !capacity_known(t) && o.beat_seen_at.is_some_and(|s| s.elapsed() <= grace) {
        (
            "False",
            "AwaitingCapacity",
            "the syncer beats but has not reported the cluster's capacity yet; it does once it has listed the nodes and pods".to_string(),
        )
    } else {
        let last = o.beat.as_ref().map(|b| b.0.to_string()).unwrap_or_default();
        let unreachable = stored
            .iter()
            .find(|c| c.type_ == CONDITION_CLUSTER_REACHABLE && c.status == "False")
            .map(|c| format!("; the syncer last said: {}", c.message))
            .unwrap_or_default();
        (
            "False",
            "HeartbeatMissed",
            format!(
                "no heartbeat for more than {}s (last at {last}){unreachable}; check the cluster's API and the syncer's logs",
                grace.as_secs()
            ),
        )
    };
    let schedulable = if o.signature.draining {
        "Draining"
    } else if o.signature.cordoned {
        "Cordoned"
    } else {
        "True"
    };
    let mut conditions = stored.clone();
    for type_ in [CONDITION_HEARTBEAT_HEALTHY, CONDITION_READY] {
        let next = Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.clone(),
            last_transition_time: now.clone(),
            observed_generation: t.metadata.generation,
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status == next.status && c.reason == next.reason => {}
            Some(c) => *c = next,
            None => conditions.push(next),
        }
    }
    let stored_schedulable = t.status.as_ref().and_then(|s| s.schedulable.as_deref());
    (conditions != stored || stored_schedulable != Some(schedulable)).then(|| (conditions, schedulable.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement_api::SyncTargetStatus;

    fn target(name: &str, beat: Option<i64>, ready: Option<&str>) -> Arc<SyncTarget> {
        let mut t = SyncTarget::new(name, Default::default());
        t.status = Some(SyncTargetStatus {
            last_syncer_heartbeat_time: beat.map(|s| Time(jiff::Timestamp::from_second(s).unwrap())),
            allocatable: BTreeMap::from([("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()))]),
            conditions: ready
                .map(|r| {
                    vec![Condition {
                        type_: CONDITION_READY.into(),
                        status: r.into(),
                        reason: "X".into(),
                        message: String::new(),
                        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                        observed_generation: None,
                    }]
                })
                .unwrap_or_default(),
            ..Default::default()
        });
        Arc::new(t)
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_goes_not_ready_after_the_grace_and_back_on_the_next_beat() {
        let book = Book::new(Duration::from_secs(8));
        let first = book.observe(target("east", Some(100), Some("True")));
        assert!(first.signature_changed);
        assert!(book.get("east").unwrap().signature.ready, "a stored Ready cluster gets one grace period");
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(book.tick().is_empty());
        // The same heartbeat again (another writer touched the object): not a beat.
        assert!(!book.observe(target("east", Some(100), Some("True"))).beat);
        assert_eq!(book.next_expiry(), Some(Instant::now() + Duration::from_secs(1)), "the grace ends 8 s after the beat was seen");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(book.tick().is_empty(), "a heartbeat exactly as old as the grace is still within it");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(book.tick(), vec!["east".to_string()]);
        assert!(!book.get("east").unwrap().signature.ready);
        assert_eq!(book.next_expiry(), None, "a cluster that is not Ready has no grace to run out");
        let back = book.observe(target("east", Some(120), Some("False")));
        assert!(back.beat && back.signature_changed);
        assert!(book.get("east").unwrap().signature.ready);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_stored_not_ready_or_without_heartbeat_waits_for_a_new_beat() {
        let book = Book::new(Duration::from_secs(8));
        book.observe(target("down", Some(100), Some("False")));
        book.observe(target("new", None, None));
        assert!(!book.get("down").unwrap().signature.ready);
        assert!(!book.get("new").unwrap().signature.ready);
        assert!(book.observe(target("new", Some(5), None)).signature_changed);
        assert!(book.get("new").unwrap().signature.ready);
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_that_change_nothing_wake_nothing() {
        let book = Book::new(Duration::from_secs(8));
        book.observe(target("east", Some(1), Some("True")));
        for s in 2..10 {
            tokio::time::advance(Duration::from_secs(2)).await;
            let o = book.observe(target("east", Some(s), Some("True")));
            assert!(o.beat && !o.signature_changed && !o.room_grew, "beat {s}: {o:?}");
            assert!(book.tick().is_empty());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_conditions_are_written_only_when_they_change() {
        let book = Book::new(Duration::from_secs(8));
        book.observe(target("east", Some(1), None));
        let now = Time(jiff::Timestamp::from_second(1000).unwrap());
        let (conds, schedulable) = desired_status(&book.get("east").unwrap(), book.grace(), &now).expect("missing conditions are written");
        assert_eq!(schedulable, "True");
        assert!(conds.iter().all(|c| c.status == "True"));
        let mut t = (*target("east", Some(1), None)).clone();
        t.status.as_mut().unwrap().conditions = conds;
        t.status.as_mut().unwrap().schedulable = Some(schedulable);
        book.observe(Arc::new(t));
        assert_eq!(desired_status(&book.get("east").unwrap(), book.grace(), &now), None);
        tokio::time::advance(Duration::from_secs(9)).await;
        book.tick();
        let (conds, _) = desired_status(&book.get("east").unwrap(), book.grace(), &now).unwrap();
        let ready = conds.iter().find(|c| c.type_ == CONDITION_READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "HeartbeatMissed"));
        assert!(ready.message.contains("more than 8s"), "{}", ready.message);
    }
}
