//! The API server's Prometheus metrics. Labels are bounded: verbs, built-in resource
//! names (custom resources collapse to `custom`), and status codes.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// API server metrics, registered with the process registry under `flotilla_apiserver_`.
pub struct Metrics {
    /// Request latency by verb, resource and code.
    pub requests: HistogramVec,
    /// Requests by verb, resource and code.
    pub request_total: IntCounterVec,
    /// Open watches.
    pub watchers: IntGauge,
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let requests = HistogramVec::new(
            HistogramOpts::new("flotilla_apiserver_request_duration_seconds", "API request latency, excluding watch streams")
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
            &["verb", "resource", "code"],
        )?;
        let request_total =
            IntCounterVec::new(Opts::new("flotilla_apiserver_requests_total", "API requests"), &["verb", "resource", "code"])?;
        let watchers = IntGauge::new("flotilla_apiserver_watchers", "Open watch streams")?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(request_total.clone()))?;
        registry.register(Box::new(watchers.clone()))?;
        Ok(Self { requests, request_total, watchers })
    }
}
