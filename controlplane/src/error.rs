//! API errors, rendered as `metav1.Status` bodies with the `reason` and `code`
//! Kubernetes clients match on (kube-rs checks NotFound and Conflict by `reason`).

use serde_json::{json, Value};

use crate::store::StoreError;

pub use apimachinery::Cause;

/// An error answered to the client as a `Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`.
    pub reason: &'static str,
    /// Human message naming the object and the cause.
    pub message: String,
    /// `details` (name, group, kind, causes), when known.
    pub details: Option<Value>,
}

/// Identifies an object in error messages the way kube-apiserver does: `deployments.apps "web"`.
#[derive(Debug, Clone)]
pub struct ObjRef<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    /// Object name.
    pub name: &'a str,
}

impl ObjRef<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
    fn details(&self) -> Value {
        json!({"name": self.name, "group": self.group, "kind": self.resource})
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None }
    }
    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized: a valid bearer token is required; use the token in <data-dir>/admin.kubeconfig")
    }
    /// 401 Unauthorized for a credential that was valid once (an expired one): why,
    /// and what to do.
    pub fn unauthorized_because(message: impl Into<String>) -> Self {
        Self::new(401, "Unauthorized", format!("Unauthorized: {}", message.into()))
    }
    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }
    /// 404 NotFound for an object.
    pub fn not_found(obj: ObjRef<'_>) -> Self {
        Self::new(404, "NotFound", format!("{} \"{}\" not found", obj.qualified(), obj.name)).with_details(obj.details())
    }
    /// 404 NotFound for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource ({path})"))
    }
    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    /// 409 AlreadyExists.
    pub fn already_exists(obj: ObjRef<'_>) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{}\" already exists", obj.qualified(), obj.name)).with_details(obj.details())
    }
    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(obj: ObjRef<'_>) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                obj.qualified(),
                obj.name
            ),
        )
        .with_details(obj.details())
    }
    /// 409 Conflict with a custom message and causes (server-side apply).
    pub fn conflict_with(obj: ObjRef<'_>, message: String, causes: Vec<Cause>) -> Self {
        let mut details = obj.details();
        details["causes"] = causes_json(&causes);
        Self::new(409, "Conflict", message).with_details(details)
    }
    /// 410 Expired (Gone).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }
    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str, supported: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}; got {content_type:?}",
                supported.join(", ")
            ),
        )
    }
    /// 413 with its own message.
    pub fn too_large_because(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }
    /// 415 with a message that already says what to send instead.
    pub fn unsupported_media_type_because(message: String) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }
    /// 422 Invalid, with the causes.
    pub fn invalid(kind: &str, obj: ObjRef<'_>, causes: Vec<Cause>) -> Self {
        let summary: Vec<String> =
            causes.iter().map(|c| if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) }).collect();
        let mut details = obj.details();
        details["kind"] = json!(kind);
        details["causes"] = causes_json(&causes);
        let group = if obj.group.is_empty() { String::new() } else { format!(".{}", obj.group) };
        Self::new(422, "Invalid", format!("{kind}{group} \"{}\" is invalid: {}", obj.name, render_list(&summary))).with_details(details)
    }
    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }
    /// 504 Timeout: a list asked for a revision this server has not reached.
    pub fn too_large_resource_version(asked: u64, current: u64) -> Self {
        Self::new(504, "Timeout", format!("Too large resource version: {asked}, current: {current}"))
    }
    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// Maps a store error for the object `obj`.
    pub fn from_store(err: StoreError, obj: ObjRef<'_>) -> Self {
        match err {
            StoreError::AlreadyExists(_) => Self::already_exists(obj),
            StoreError::NotFound(_) => Self::not_found(obj),
            StoreError::Conflict { .. } => Self::conflict(obj),
            StoreError::Expired { requested, oldest } => Self::expired(format!("too old resource version: {requested} ({oldest})")),
            StoreError::TooLarge { size, .. } => Self::too_large_because(format!(
                "Request entity too large: {} \"{}\" would be {size} bytes when stored; an object may be at most {} bytes",
                obj.resource,
                obj.name,
                crate::store::MAX_OBJECT_BYTES
            )),
            StoreError::Backend(msg) => Self::internal(format!("storage error while writing {}: {msg}", obj.name)),
            StoreError::Unavailable(msg) => Self::unavailable(format!("{} \"{}\" was not written: {msg}", obj.qualified(), obj.name)),
            StoreError::Timeout(msg) => Self::new(504, "Timeout", format!("writing {} \"{}\": {msg}", obj.qualified(), obj.name)),
        }
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            status["details"] = d.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

fn causes_json(causes: &[Cause]) -> Value {
    Value::Array(causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect())
}

/// Renders several messages as Kubernetes' aggregate errors do: one bare, several in brackets.
fn render_list(items: &[String]) -> String {
    match items {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The `Status` body for a successful delete.
pub fn success_status(obj: ObjRef<'_>, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": obj.name, "group": obj.group, "kind": obj.resource, "uid": uid},
    })
}
