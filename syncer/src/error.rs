//! The syncer's errors.

/// Why a sync step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the control plane failed.
    #[error("upstream: {what}: {source}")]
    Upstream {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A request to the physical cluster failed.
    #[error("downstream: {what}: {source}")]
    Downstream {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Upstream { source, .. } | Error::Downstream { source, .. } if is_conflict(source) => "conflict",
            Error::Upstream { .. } => "upstream",
            Error::Downstream { .. } => "downstream",
        }
    }
}

/// Whether a request failed with 409 Conflict (a stale read; retry at once).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Whether a create failed with 409 AlreadyExists: someone else created it first.
pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// Whether a request failed with 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a request failed with 403 Forbidden. A pull-mode syncer's token may not
/// read an object that is neither assigned to its cluster nor marked by it: for the
/// syncer, that object is not its business any more.
pub fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Wraps a control-plane error with what was being done.
pub fn upstream(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Upstream { what, source }
}

/// Wraps a physical-cluster error with what was being done.
pub fn downstream(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Downstream { what, source }
}
