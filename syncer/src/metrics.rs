//! The syncers' Prometheus metrics, under `flotilla_syncer_`. Every syncer of the
//! process shares them; the `cluster` label takes the names of the SyncTargets that
//! have a syncer here, and a cluster's series go when its syncer stops for good.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// One object synced: spec down, status up, by cluster and result.
struct Metrics {
    duration: HistogramVec,
    errors: IntCounterVec,
    deferred: IntCounterVec,
}

/// From one cached write to a slow cluster's timeout.
const BUCKETS: [f64; 14] = [0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    duration: HistogramVec::new(
        HistogramOpts::new(
            "flotilla_syncer_sync_duration_seconds",
            "Time to sync one object with its cluster (spec down, status up), by cluster and result: ok or error",
        )
        .buckets(BUCKETS.to_vec()),
        &["cluster", "result"],
    )
    .expect("the syncer's histogram definition is valid"),
    errors: IntCounterVec::new(
        Opts::new(
            "flotilla_syncer_sync_errors_total",
            "Failed syncs of one object, by cluster and by what failed: upstream, downstream or conflict",
        ),
        &["cluster", "side"],
    )
    .expect("the syncer's counter definition is valid"),
    deferred: IntCounterVec::new(
        Opts::new(
            "flotilla_syncer_progress_reports_deferred_total",
            "Progress reports of copies still rolling out put off because the cluster's syncer had used its budget of them, by cluster",
        ),
        &["cluster"],
    )
    .expect("the syncer's counter definition is valid"),
});

/// Exposes the syncers' metrics on `registry`.
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(METRICS.duration.clone()))?;
    registry.register(Box::new(METRICS.errors.clone()))?;
    registry.register(Box::new(METRICS.deferred.clone()))
}

/// Records one sync of an object with `cluster`. `failed_side` is the error's
/// [`crate::error::Error::category`] when it failed.
pub(crate) fn observe(cluster: &str, took: Duration, failed_side: Option<&str>) {
    let result = if failed_side.is_some() { "error" } else { "ok" };
    METRICS.duration.with_label_values(&[cluster, result]).observe(took.as_secs_f64());
    if let Some(side) = failed_side {
        METRICS.errors.with_label_values(&[cluster, side]).inc();
    }
}

/// Counts a progress report of `cluster` put off for want of budget.
pub(crate) fn progress_deferred(cluster: &str) {
    METRICS.deferred.with_label_values(&[cluster]).inc();
}

/// Drops the series of a cluster whose syncer stopped for good.
pub(crate) fn forget(cluster: &str) {
    for result in ["ok", "error"] {
        let _ = METRICS.duration.remove_label_values(&[cluster, result]);
    }
    for side in ["upstream", "downstream", "conflict"] {
        let _ = METRICS.errors.remove_label_values(&[cluster, side]);
    }
    let _ = METRICS.deferred.remove_label_values(&[cluster]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_are_counted_by_cluster_and_forgotten_with_it() {
        let registry = Registry::new();
        // Another test may have registered the shared metrics elsewhere; this registry is new.
        register(&registry).unwrap();
        observe("metrics-test", Duration::from_millis(3), None);
        observe("metrics-test", Duration::from_millis(40), Some("downstream"));
        progress_deferred("metrics-test");
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        assert!(text.contains(r#"flotilla_syncer_sync_errors_total{cluster="metrics-test",side="downstream"} 1"#), "{text}");
        assert!(text.contains(r#"flotilla_syncer_sync_duration_seconds_count{cluster="metrics-test",result="ok"} 1"#), "{text}");
        assert!(text.contains(r#"flotilla_syncer_progress_reports_deferred_total{cluster="metrics-test"} 1"#), "{text}");
        forget("metrics-test");
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        assert!(!text.contains("metrics-test"), "{text}");
    }
}
