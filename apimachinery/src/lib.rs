//! Kubernetes API machinery, with no I/O: what an API server, a controller or a CLI
//! needs to read, merge and check Kubernetes objects the way Kubernetes does.
//!
//! Label and field selectors ([`selector`]), kubectl's JSONPath ([`jsonpath`]), strategic
//! merge patches, server-side apply and managedFields ([`patch`]), structural schemas
//! with their validation, defaulting and pruning ([`schema`]), the protobuf wire format
//! ([`protobuf`]), ObjectMeta's rules ([`objmeta`]), resource quantities ([`quantity`]),
//! a pod's QoS class ([`qos`]) and the pod-template hash ([`template_hash`]). Each rule is written once, here,
//! and used by the API server, the simulated clusters, the scheduler and the CLI.

pub mod cron;
pub mod duration;
pub mod jsonpath;
pub mod objmeta;
pub mod patch;
pub mod protobuf;
pub mod qos;
pub mod quantity;
pub mod schema;
pub mod selector;
pub mod template_hash;

/// One validation failure, shaped like a `metav1.StatusCause`: a `details.causes[]`
/// entry of a 422.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Machine-readable reason: "FieldValueInvalid", "FieldValueRequired",
    /// "FieldValueNotSupported", "FieldValueTypeInvalid", "FieldValueForbidden",
    /// "FieldValueTooLong", "FieldValueTooMany", "FieldValueDuplicate", …
    pub reason: &'static str,
    /// Human-readable message without the field name, e.g. `Required value`.
    pub message: String,
    /// The offending field, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A cause with the given parts.
    pub fn new(reason: &'static str, field: &str, message: impl Into<String>) -> Self {
        Self { reason, field: field.into(), message: message.into() }
    }
}
