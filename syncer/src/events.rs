//! Events on the downstream copies, for the physical cluster's users: when the syncer
//! puts back a copy that someone changed or deleted there, a Warning `DriftReverted`
//! on the copy says what it reverted (`kubectl describe` or `kubectl get events` in the
//! copy's namespace shows it beside the edit).
//!
//! The same message on the same object within [`SERIES_WINDOW`] bumps the count of the
//! Event already written instead of writing another, as client-go's event correlator
//! does, so a cluster's controller that keeps fighting the syncer makes one Event with
//! a growing count. Events are written in the background, and failures only logged:
//! the revert does not wait for the Event that reports it, nor fail with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

/// The reason of the Event on a copy whose drift was reverted.
pub const REASON_DRIFT_REVERTED: &str = "DriftReverted";
/// The `source.component` and `reportingComponent` of every Event.
pub const COMPONENT: &str = "flotilla-syncer";
/// How long a repeated Event is counted on the first one.
pub const SERIES_WINDOW: Duration = Duration::from_secs(600);
/// Events waiting to be written at most; beyond that new ones are dropped (and the
/// drift they report is still logged).
const QUEUE: usize = 1_000;
/// Events written at once.
const WRITERS: usize = 2;
/// How often series older than [`SERIES_WINDOW`] are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

struct Pending {
    namespace: String,
    involved: ObjectReference,
    reason: &'static str,
    message: String,
}

struct Written {
    name: String,
    count: i32,
    at: Instant,
}

/// Writes Warning Events on objects of the physical cluster, in the background.
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    _writer: crate::AbortOnDrop<()>,
}

impl Recorder {
    /// A recorder writing through `client`; `instance` is the `reportingInstance`.
    pub fn new(client: Client, instance: String) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer =
            Writer { client, instance, written: DashMap::new(), pruned: Mutex::new(Instant::now()), warned: AtomicBool::new(false) };
        let task = tokio::spawn(async move {
            ReceiverStream::new(rx).for_each_concurrent(WRITERS, |p| writer.write(p)).await;
        });
        Recorder { tx, _writer: crate::AbortOnDrop(task) }
    }

    /// Queues a Warning Event on `involved`, written in `namespace` (the object's own,
    /// or for a namespace, that namespace).
    pub fn warn(&self, namespace: &str, involved: ObjectReference, reason: &'static str, message: String) {
        if self.tx.try_send(Pending { namespace: namespace.to_string(), involved, reason, message }).is_err() {
            tracing::debug!(reason, "dropped an Event: too many are waiting to be written");
        }
    }
}

struct Writer {
    client: Client,
    instance: String,
    /// (namespace, name, reason, message) → the Event written for it.
    written: DashMap<(String, String, &'static str, String), Written>,
    pruned: Mutex<Instant>,
    /// Whether a failure was logged as a warning already: a cluster whose RBAC does not
    /// let the syncer write Events says so once, then at debug level.
    warned: AtomicBool,
}

impl Writer {
    async fn write(&self, p: Pending) {
        let Pending { namespace, involved, reason, message } = p;
        let object = involved.name.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Time(jiff::Timestamp::now());
        let id = (namespace.clone(), object.clone(), reason, message.clone());
        let repeat = self.written.get(&id).filter(|w| w.at.elapsed() < SERIES_WINDOW).map(|w| (w.name.clone(), w.count + 1));
        let result = match repeat {
            Some((name, count)) => {
                let patch = json!({"count": count, "lastTimestamp": now});
                let r = api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(drop);
                match r {
                    Ok(()) => self.written.insert(id, Written { name, count, at: Instant::now() }),
                    // Gone (expired, or deleted): the next one starts a new series.
                    Err(_) => self.written.remove(&id).map(|(_, w)| w),
                };
                r
            }
            None => {
                let name = format!("{object}.{:x}", jiff::Timestamp::now().as_nanosecond());
                let ev = Event {
                    metadata: ObjectMeta { name: Some(name.clone()), namespace: Some(namespace.clone()), ..Default::default() },
                    involved_object: involved,
                    reason: Some(reason.into()),
                    message: Some(message),
                    type_: Some("Warning".into()),
                    count: Some(1),
                    first_timestamp: Some(now.clone()),
                    last_timestamp: Some(now),
                    source: Some(EventSource { component: Some(COMPONENT.into()), host: None }),
                    reporting_component: Some(COMPONENT.into()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Default::default()
                };
                let r = api.create(&PostParams::default(), &ev).await.map(drop);
                if r.is_ok() {
                    self.written.insert(id, Written { name, count: 1, at: Instant::now() });
                }
                r
            }
        };
        if let Err(e) = result {
            if self.warned.swap(true, Ordering::Relaxed) {
                tracing::debug!(namespace, object, reason, error = %e, "could not record an Event");
            } else {
                tracing::warn!(namespace, object, reason, error = %e, "could not record an Event (further failures are logged at debug level)");
            }
        }
        self.prune();
    }

    /// Forgets series past their window, at most once per [`PRUNE_EVERY`].
    fn prune(&self) {
        {
            let mut pruned = self.pruned.lock().unwrap_or_else(|e| e.into_inner());
            if pruned.elapsed() < PRUNE_EVERY {
                return;
            }
            *pruned = Instant::now();
        }
        self.written.retain(|_, w| w.at.elapsed() < SERIES_WINDOW);
    }
}
