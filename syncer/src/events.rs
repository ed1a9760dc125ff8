//! Events on the downstream copies, for the physical cluster's users, and on upstream
//! companions the cluster refused, for the workspace's users. When the syncer
//! puts back a copy that someone changed or deleted there, a Warning `DriftReverted`
//! on the copy says what it reverted (`kubectl describe` or `kubectl get events` in the
//! copy's namespace shows it beside the edit).
//!
//! A cluster's controller that keeps fighting the syncer makes one Event with a growing
//! count, and the revert does not wait for the Event that reports it, nor fail with it
//! ([`runtime::events`]).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use runtime::events::{self, Settings, Type};

/// The reason of the Event on a copy whose drift was reverted.
pub const REASON_DRIFT_REVERTED: &str = "DriftReverted";
/// The `source.component` and `reportingComponent` of every Event.
pub const COMPONENT: &str = "flotilla-syncer";
/// Events waiting to be written at most; beyond that new ones are dropped (and the
/// drift they report is still logged).
const QUEUE: usize = 1_000;
/// Events written at once.
const WRITERS: usize = 2;

/// Writes Warning Events on objects of the physical cluster, in the background.
pub struct Recorder(events::Recorder);

impl Recorder {
    /// A recorder writing through `client`; `instance` is the `reportingInstance`.
    pub fn new(client: Client, instance: String) -> Self {
        Recorder(events::Recorder::new(client, Settings { component: COMPONENT, instance, queue: QUEUE, writers: WRITERS, dropped: None }))
    }

    /// Queues a Warning Event on `involved`, written in `namespace` (the object's own,
    /// or for a namespace, that namespace).
    pub fn warn(&self, namespace: &str, involved: ObjectReference, reason: &'static str, message: String) {
        self.0.record(None, namespace, involved, Type::Warning, reason, message);
    }

    /// Queues a Warning Event on an upstream object of `workspace`, in `namespace`.
    pub fn warn_in(&self, workspace: &str, namespace: &str, involved: ObjectReference, reason: &'static str, message: String) {
        self.0.record(Some(workspace), namespace, involved, Type::Warning, reason, message);
    }
}
