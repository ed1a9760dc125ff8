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

pub use runtime::errors::{is_already_exists, is_conflict, is_forbidden, is_not_found};

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
