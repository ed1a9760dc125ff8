//! What a failed request to a Kubernetes API means for the controller that made it.

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

/// A failed request, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Failed {
    /// What was being done.
    pub what: String,
    /// The cause.
    #[source]
    pub source: kube::Error,
}

/// Wraps an error with what was being done: `.map_err(failed("reading x"))`.
pub fn failed(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Failed {
    let what = what.into();
    move |source| Failed { what, source }
}
