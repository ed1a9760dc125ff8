//! The scheduler's Prometheus metrics, under `flotilla_scheduler_`. Labels are
//! bounded: results, reasons and causes are fixed sets, and `cluster` takes the names of
//! registered SyncTargets only (a deregistered cluster's series are removed).

use std::fmt;
use std::time::Duration;

use prometheus::{Gauge, GaugeVec};
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::core::{NoFit, Reason, Resource};
use crate::health::Gap;

/// Scheduler metrics. Cloning shares the same series.
#[derive(Clone)]
pub struct Metrics {
    /// The time to decide one workload in memory: resolving its Placement, viewing
    /// the clusters and choosing; API writes are not included.
    pub decision: Histogram,
    /// One whole reconcile of a workload, writes included, by result.
    pub reconcile: HistogramVec,
    /// Reconciles by result: `scheduled`, `unschedulable` or `error`.
    pub attempts: IntCounterVec,
    /// Failed attempts by reason; an attempt that turned clusters away for several
    /// reasons counts once under each.
    pub failures: IntCounterVec,
    /// Workloads moved off a cluster, by why the cluster was left: `NotReady`,
    /// `Draining` or `Deregistered`.
    pub failovers: IntCounterVec,
    /// Workloads that fit nowhere and wait for room.
    pub pending: IntGauge,
    /// Seconds since the scheduler last saw a new heartbeat of each cluster.
    pub heartbeat_age: GaugeVec,
    /// 1 while the scheduler counts the cluster Ready.
    pub cluster_ready: GaugeVec,
    /// 1 while this process holds the scheduler Lease (or runs without election).
    pub leader: Gauge,
    /// Events dropped because too many were waiting to be written.
    pub events_dropped: IntCounter,
    /// Times every cluster's grace was renewed because the scheduler could not observe
    /// heartbeats, by why: `Stalled` (it did not run) or `Silent` (no heartbeat of any
    /// cluster reached it).
    pub observation_gaps: IntCounterVec,
    /// 1 while the disruption brake holds lost clusters' workloads where they are.
    pub brake_engaged: IntGauge,
    /// The lost clusters the brake holds (not confirmed lost).
    pub braked_clusters: IntGauge,
    /// Moves off lost or draining clusters put off by `--eviction-rate`.
    pub evictions_delayed: IntCounter,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    /// Metrics that no registry exposes, for a scheduler run without `/metrics`.
    fn default() -> Self {
        Metrics::build().expect("the scheduler's metric definitions are valid")
    }
}

/// The decision histogram's buckets: the target is 1 ms at p99, so they are fine
/// below it.
const DECISION_BUCKETS: [f64; 14] =
    [0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];

/// The reconcile histogram's buckets, from one local write to a slow control plane.
const RECONCILE_BUCKETS: [f64; 13] = [0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

impl Metrics {
    fn build() -> prometheus::Result<Self> {
        let m = Metrics {
            decision: Histogram::with_opts(
                HistogramOpts::new(
                    "flotilla_scheduler_decision_duration_seconds",
                    "Time to decide where one workload runs, in memory, excluding API writes",
                )
                .buckets(DECISION_BUCKETS.to_vec()),
            )?,
            reconcile: HistogramVec::new(
                HistogramOpts::new(
                    "flotilla_scheduler_reconcile_duration_seconds",
                    "Time to reconcile one workload, decision and writes, by result",
                )
                .buckets(RECONCILE_BUCKETS.to_vec()),
                &["result"],
            )?,
            attempts: IntCounterVec::new(
                Opts::new("flotilla_scheduler_attempts_total", "Workload reconciles by result: scheduled, unschedulable, error"),
                &["result"],
            )?,
            failures: IntCounterVec::new(
                Opts::new("flotilla_scheduler_unschedulable_total", "Failed scheduling attempts by reason"),
                &["reason"],
            )?,
            failovers: IntCounterVec::new(
                Opts::new("flotilla_scheduler_failovers_total", "Workloads moved off a cluster, by why the cluster was left"),
                &["cause"],
            )?,
            pending: IntGauge::new("flotilla_scheduler_pending_workloads", "Workloads that fit nowhere and wait for room")?,
            heartbeat_age: GaugeVec::new(
                Opts::new("flotilla_scheduler_cluster_heartbeat_age_seconds", "Seconds since a new heartbeat of the cluster was seen"),
                &["cluster"],
            )?,
            cluster_ready: GaugeVec::new(
                Opts::new("flotilla_scheduler_cluster_ready", "1 while the scheduler counts the cluster Ready"),
                &["cluster"],
            )?,
            leader: Gauge::new("flotilla_scheduler_leader", "1 while this process holds the scheduler Lease")?,
            events_dropped: IntCounter::new(
                "flotilla_scheduler_events_dropped_total",
                "Events dropped because too many were waiting to be written",
            )?,
            observation_gaps: IntCounterVec::new(
                Opts::new(
                    "flotilla_scheduler_observation_gaps_total",
                    "Times every cluster's grace was renewed because the scheduler could not observe heartbeats, by cause: Stalled, Silent",
                ),
                &["cause"],
            )?,
            brake_engaged: IntGauge::new(
                "flotilla_scheduler_disruption_brake_engaged",
                "1 while too many clusters went NotReady at once for their workloads to be moved",
            )?,
            braked_clusters: IntGauge::new(
                "flotilla_scheduler_braked_clusters",
                "Lost clusters whose workloads the disruption brake holds",
            )?,
            evictions_delayed: IntCounter::new(
                "flotilla_scheduler_evictions_delayed_total",
                "Moves off lost or draining clusters put off by the eviction rate limit",
            )?,
        };
        // Both causes are shown from the start, at 0, so that an alert on an increase
        // fires on the first gap.
        for cause in [Gap::Stalled, Gap::Silent] {
            m.observation_gaps.with_label_values(&[cause.label()]);
        }
        Ok(m)
    }

    /// Creates the metrics and registers them with `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::build()?;
        registry.register(Box::new(m.decision.clone()))?;
        registry.register(Box::new(m.reconcile.clone()))?;
        registry.register(Box::new(m.attempts.clone()))?;
        registry.register(Box::new(m.failures.clone()))?;
        registry.register(Box::new(m.failovers.clone()))?;
        registry.register(Box::new(m.pending.clone()))?;
        registry.register(Box::new(m.heartbeat_age.clone()))?;
        registry.register(Box::new(m.cluster_ready.clone()))?;
        registry.register(Box::new(m.leader.clone()))?;
        registry.register(Box::new(m.events_dropped.clone()))?;
        registry.register(Box::new(m.observation_gaps.clone()))?;
        registry.register(Box::new(m.brake_engaged.clone()))?;
        registry.register(Box::new(m.braked_clusters.clone()))?;
        registry.register(Box::new(m.evictions_delayed.clone()))?;
        Ok(m)
    }

    /// Counts one reconcile.
    pub fn attempt(&self, result: &str, took: Duration) {
        self.attempts.with_label_values(&[result]).inc();
        self.reconcile.with_label_values(&[result]).observe(took.as_secs_f64());
    }

    /// Counts a failed attempt under each of its reasons.
    pub fn no_fit(&self, why: &NoFit) {
        match why {
            NoFit::Selector(_) | NoFit::WeightSelector(_) => self.failure("InvalidSelector"),
            NoFit::Clusters { total: 0, .. } => self.failure("NoClusters"),
            NoFit::Clusters { reasons, .. } if reasons.is_empty() => self.failure("TooFewClusters"),
            NoFit::Clusters { reasons, .. } => reasons.keys().for_each(|r| self.failure(reason_label(*r))),
            NoFit::Groups { .. } => self.failure("TooFewGroups"),
            NoFit::Skew { .. } => self.failure("SkewNotMet"),
        }
    }

    /// Counts a failed attempt under one reason.
    pub fn failure(&self, reason: &str) {
        self.failures.with_label_values(&[reason]).inc();
    }

    /// Sets one cluster's health figures; `age` is `None` when no heartbeat has been
    /// seen since this process started.
    pub fn cluster(&self, name: &str, age: Option<Duration>, ready: bool) {
        match age {
            Some(age) => self.heartbeat_age.with_label_values(&[name]).set(age.as_secs_f64()),
            None => {
                let _ = self.heartbeat_age.remove_label_values(&[name]);
            }
        }
        self.cluster_ready.with_label_values(&[name]).set(if ready { 1.0 } else { 0.0 });
    }

    /// Counts a renewal of every cluster's grace after a gap in observation.
    pub fn observation_gap(&self, cause: Gap) {
        self.observation_gaps.with_label_values(&[cause.label()]).inc();
    }

    /// Drops a deregistered cluster's series.
    pub fn forget_cluster(&self, name: &str) {
        let _ = self.heartbeat_age.remove_label_values(&[name]);
        let _ = self.cluster_ready.remove_label_values(&[name]);
    }
}

/// The metric label of a reason: one word, as in the failure message.
fn reason_label(r: Reason) -> &'static str {
    match r {
        Reason::NotReady => "NotReady",
        Reason::Draining => "Draining",
        Reason::NotSelected => "NotSelected",
        Reason::Cordoned => "Cordoned",
        Reason::Tainted => "Tainted",
        Reason::MissingSpreadLabel => "MissingSpreadLabel",
        Reason::Unweighted => "Unweighted",
        Reason::NoNodeFits => "NoNodeFits",
        Reason::Insufficient(Resource::Cpu) => "InsufficientCpu",
        Reason::Insufficient(Resource::Memory) => "InsufficientMemory",
        Reason::Insufficient(Resource::Pods) => "InsufficientPods",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn count(m: &Metrics, reason: &str) -> u64 {
        m.failures.with_label_values(&[reason]).get()
    }

    #[test]
    fn a_failure_counts_once_under_each_reason() {
        let m = Metrics::default();
        let reasons = BTreeMap::from([(Reason::NotReady, 1), (Reason::Insufficient(Resource::Cpu), 2)]);
        m.no_fit(&NoFit::Clusters { total: 3, fit: 0, needed: 1, reasons, holds: None });
        m.no_fit(&NoFit::Clusters { total: 0, fit: 0, needed: 1, reasons: BTreeMap::new(), holds: None });
        assert_eq!((count(&m, "NotReady"), count(&m, "InsufficientCpu"), count(&m, "NoClusters")), (1, 1, 1));
        assert_eq!(count(&m, "Cordoned"), 0);
    }

    #[test]
    fn registering_twice_in_one_registry_fails_and_a_forgotten_cluster_leaves_no_series() {
        let r = Registry::new();
        let m = Metrics::new(&r).unwrap();
        assert!(Metrics::new(&r).is_err(), "the same names cannot be registered twice");
        m.cluster("east", Some(Duration::from_secs(3)), true);
        m.cluster("west", None, false);
        let names = |r: &Registry| -> Vec<String> {
            r.gather()
                .iter()
                .filter(|f| f.name().contains("cluster_"))
                .flat_map(|f| f.get_metric().iter().map(move |s| format!("{}{:?}", f.name(), s.get_label()[0].value())))
                .collect()
        };
        let got = names(&r);
        assert!(got.iter().any(|n| n.contains("heartbeat_age") && n.contains("east")), "{got:?}");
        assert!(!got.iter().any(|n| n.contains("heartbeat_age") && n.contains("west")), "{got:?}");
        m.forget_cluster("east");
        m.forget_cluster("west");
        assert!(names(&r).is_empty(), "{:?}", names(&r));
    }

    #[test]
    fn observation_gaps_are_counted_by_cause_from_zero() {
        let r = Registry::new();
        let m = Metrics::new(&r).unwrap();
        let gaps = |r: &Registry| -> Vec<(String, u64)> {
            r.gather()
                .iter()
                .filter(|f| f.name() == "flotilla_scheduler_observation_gaps_total")
                .flat_map(|f| f.get_metric().iter().map(|s| (s.get_label()[0].value().to_string(), s.get_counter().get_value() as u64)))
                .collect()
        };
        assert_eq!(gaps(&r), vec![("Silent".into(), 0), ("Stalled".into(), 0)]);
        m.observation_gap(Gap::Stalled);
        m.observation_gap(Gap::Stalled);
        assert_eq!(gaps(&r), vec![("Silent".into(), 0), ("Stalled".into(), 2)]);
    }
}
