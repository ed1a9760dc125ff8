//! What a request asks for, and what an authorizer allows: the words [`crate::authz`]
//! and the tenancy rules ([`crate::syncer_scope`]) decide in.

use std::sync::Arc;

use serde_json::Value;

use crate::api::WriteGuard;
use crate::error::ApiError;
use crate::selector::{FieldSelector, LabelSelector};

/// The attributes of a request for a resource.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// The workspace in the path (`root`, `*`, or a workspace's name).
    pub workspace: &'a str,
    /// The Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'a str,
    /// API group ("" for the core group).
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Resource (plural).
    pub resource: &'a str,
    /// Namespace ("" when none).
    pub namespace: &'a str,
    /// Object name, if the path names one.
    pub name: Option<&'a str>,
    /// Subresource, if any.
    pub subresource: Option<&'a str>,
    /// The parsed `labelSelector`.
    pub labels: Option<&'a LabelSelector>,
    /// The parsed `fieldSelector`.
    pub fields: Option<&'a FieldSelector>,
}

/// What is asked for.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// A path that names no resource: discovery, OpenAPI, `/metrics`, `/metrics/token`.
    NonResource {
        /// The workspace in the path.
        workspace: &'a str,
        /// The path below the workspace prefix.
        path: &'a str,
    },
    /// A resource, a collection or a subresource.
    Resource(Attributes<'a>),
}

impl Request<'_> {
    /// The workspace in the path.
    pub fn workspace(&self) -> &str {
        match self {
            Request::NonResource { workspace, .. } => workspace,
            Request::Resource(a) => a.workspace,
        }
    }
}

/// The check of an object before a principal may read it.
#[derive(Clone)]
pub struct ReadCheck(Arc<ReadFn>);

/// The check of a [`ReadCheck`]: the object → allowed or the refusal.
pub type ReadFn = dyn Fn(&Value) -> Result<(), ApiError> + Send + Sync;

impl ReadCheck {
    /// A check from a function.
    pub fn new(f: impl Fn(&Value) -> Result<(), ApiError> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Applies the check.
    pub fn check(&self, obj: &Value) -> Result<(), ApiError> {
        (self.0)(obj)
    }
}

/// An allowed request, with the object-level rules that come with it.
#[derive(Default, Clone)]
pub struct Decision {
    /// Checked on every object the request would return.
    pub read: Option<ReadCheck>,
    /// Checked by the resource engine on every write the request would store.
    pub write: Option<WriteGuard>,
}

impl Decision {
    /// Allowed, with no object-level rule.
    pub fn allow() -> Self {
        Self::default()
    }

    /// Applies the read check, if any.
    pub fn check_read(&self, obj: &Value) -> Result<(), ApiError> {
        self.read.as_ref().map_or(Ok(()), |r| r.check(obj))
    }
}
