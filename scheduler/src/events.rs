//! Events on the workloads the scheduler places: `Scheduled`, `Rescheduled` and
//! `FailedScheduling`, as core/v1 Events that `kubectl describe` and `kubectl get
//! events` show.
//!
//! A workload that keeps failing to fit makes one Event with a growing count, and
//! Events are written in the background, off the scheduling path
//! ([`runtime::events`]).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use placement_api::workload::AnyWorkload;
use runtime::events::{self, Settings};
use runtime::ObjKey;

pub use runtime::events::Type;

/// The `source.component` and `reportingComponent` of every Event.
pub const COMPONENT: &str = "flotilla-scheduler";

/// Events waiting to be written at most. Ten times client-go's 1,000: applying 10,000
/// Deployments at once queues one `Scheduled` Event each, and none should be lost.
pub const QUEUE: usize = 10_000;
/// Events written at once.
const WRITERS: usize = 8;

/// Records Events through a control-plane client with no workspace path.
pub struct Recorder(events::Recorder);

impl Recorder {
    /// A recorder; `instance` names this scheduler process in `reportingInstance`.
    pub fn new(base: Client, instance: String, dropped: prometheus::IntCounter) -> Self {
        Recorder(events::Recorder::new(
            base,
            Settings { component: COMPONENT, instance, queue: QUEUE, writers: WRITERS, dropped: Some(dropped) },
        ))
    }

    /// Queues an Event about a workload. Failures are logged, never returned: an
    /// Event is worth less than the decision it reports.
    pub fn workload(&self, key: &ObjKey, d: &AnyWorkload, type_: Type, reason: &'static str, message: String) {
        let kind = d.kind().describe();
        let involved = ObjectReference {
            api_version: Some(kind.api_version()),
            kind: Some(kind.name.into()),
            name: Some(key.name.clone()),
            namespace: Some(key.namespace.clone()),
            uid: d.meta().uid.clone(),
            resource_version: d.meta().resource_version.clone(),
            field_path: None,
        };
        self.0.record(Some(&key.workspace), &key.namespace, involved, type_, reason, message);
    }
}
