//! The API server's Prometheus metrics. Labels are bounded: verbs, built-in resource
//! names (custom resources collapse to `custom`), and status codes.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// The TLS handshake did not finish in time.
pub const HANDSHAKE_TIMED_OUT: &str = "handshake_timeout";
/// The first request's headers did not arrive in time.
pub const HEADER_TIMED_OUT: &str = "header_timeout";
/// Too many connections were waiting for their first request; the oldest went.
pub const TOO_MANY_PENDING: &str = "too_many_pending";

/// Why a connection was closed before its first request: the `reason` label of
/// `flotilla_apiserver_connections_rejected_total`.
pub const REJECT_REASONS: [&str; 3] = [HANDSHAKE_TIMED_OUT, HEADER_TIMED_OUT, TOO_MANY_PENDING];

/// API server metrics, registered with the process registry under `flotilla_apiserver_`.
pub struct Metrics {
    /// Request latency by verb, resource and code.
    pub requests: HistogramVec,
    /// Requests by verb, resource and code.
    pub request_total: IntCounterVec,
    /// Open watches.
    pub watchers: IntGauge,
    /// Connections that have not sent a request yet (TLS handshake or first request
    /// still to come): see [`crate::listener`].
    pub connections_pending: IntGauge,
    /// Connections the server closed before their first request, by reason (one of
    /// [`REJECT_REASONS`]).
    pub connections_rejected: IntCounterVec,
    /// How long reads waited to confirm that this replica had every write made before
    /// them, by `result`: `confirmed`, or `unconfirmed` (served as they were, with a
    /// Warning).
    pub read_syncs: HistogramVec,
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
        let connections_pending = IntGauge::new(
            "flotilla_apiserver_connections_pending",
            "Connections that have not sent a request yet: in the TLS handshake, or waiting for the first request",
        )?;
        let connections_rejected = IntCounterVec::new(
            Opts::new("flotilla_apiserver_connections_rejected_total", "Connections closed by the server before their first request"),
            &["reason"],
        )?;
        // Every reason is exported from the start, at 0.
        for reason in REJECT_REASONS {
            connections_rejected.with_label_values(&[reason]);
        }
        registry.register(Box::new(connections_pending.clone()))?;
        registry.register(Box::new(connections_rejected.clone()))?;
        let read_syncs = HistogramVec::new(
            HistogramOpts::new(
                "flotilla_apiserver_read_sync_duration_seconds",
                "Time reads without a resourceVersion waited to confirm with the store that this replica has every earlier write",
            )
            .buckets(vec![0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
            &["result"],
        )?;
        for result in ["confirmed", "unconfirmed"] {
            read_syncs.with_label_values(&[result]);
        }
        registry.register(Box::new(read_syncs.clone()))?;
        Ok(Self { requests, request_total, watchers, connections_pending, connections_rejected, read_syncs })
    }
}
