//! Events on the workloads the scheduler places: `Scheduled`, `Rescheduled` and
//! `FailedScheduling`, as core/v1 Events that `kubectl describe` and `kubectl get
//! events` show.
//!
//! The same reason and message for the same object within [`SERIES_WINDOW`] bumps
//! the count of the Event already written instead of writing another, as client-go's
//! event correlator does, so a workload that keeps failing to fit makes one Event
//! with a growing count.
//!
//! Events are written in the background, off the scheduling path (see [`Recorder`]).

use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::store::ObjKey;

/// The `source.component` and `reportingComponent` of every Event.
pub const COMPONENT: &str = "flotilla-scheduler";
/// How long a repeated Event is counted on the first one.
pub const SERIES_WINDOW: Duration = Duration::from_secs(600);

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Something went as intended.
    Normal,
    /// Something needs attention.
    Warning,
}

/// Events waiting to be written at most; beyond that new ones are dropped with a
/// warning and counted, so that a flood of Events never holds up scheduling or grows
/// without bound. Ten times client-go's 1,000: applying 10,000 Deployments at once
/// queues one `Scheduled` Event each, and none should be lost.
pub const QUEUE: usize = 10_000;
/// Events written at once.
const WRITERS: usize = 8;
/// How often series older than [`SERIES_WINDOW`] are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

struct Written {
    name: String,
    count: i32,
    at: Instant,
}

/// One Event to write.
struct Pending {
    key: ObjKey,
    involved: ObjectReference,
    type_: Type,
    reason: &'static str,
    message: String,
}

/// Records Events through a control-plane client with no workspace path. Events are
/// queued and written in the background: a decision never waits for the Event that
/// reports it.
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    dropped: prometheus::IntCounter,
    _writer: syncer::AbortOnDrop<()>,
}

impl Recorder {
    /// A recorder; `instance` names this scheduler process in `reportingInstance`.
    pub fn new(base: Client, instance: String, dropped: prometheus::IntCounter) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer = Writer { base, instance, written: DashMap::new(), pruned: Mutex::new(Instant::now()) };
        let task = tokio::spawn(async move {
            ReceiverStream::new(rx).for_each_concurrent(WRITERS, |p| writer.write(p)).await;
        });
        Recorder { tx, dropped, _writer: syncer::AbortOnDrop(task) }
    }

    /// Queues an Event about a Deployment. Failures are logged, never returned: an
    /// Event is worth less than the decision it reports.
    pub fn deployment(&self, key: &ObjKey, d: &Deployment, type_: Type, reason: &'static str, message: String) {
        let involved = ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(key.name.clone()),
            namespace: Some(key.namespace.clone()),
            uid: d.metadata.uid.clone(),
            resource_version: d.metadata.resource_version.clone(),
            field_path: None,
        };
        let pending = Pending { key: key.clone(), involved, type_, reason, message };
        if let Err(mpsc::error::TrySendError::Full(p)) = self.tx.try_send(pending) {
            self.dropped.inc();
            tracing::warn!(object = %p.key, reason = p.reason, queued = QUEUE, "dropped an Event: too many are waiting to be written");
        }
    }
}

struct Writer {
    base: Client,
    instance: String,
    written: DashMap<(ObjKey, String, String), Written>,
    pruned: Mutex<Instant>,
}

impl Writer {
    async fn write(&self, p: Pending) {
        let Pending { key, involved, type_, reason, message } = p;
        let api: Api<Event> = Api::namespaced(syncer::clients::workspace(&self.base, &key.workspace), &key.namespace);
        let now = Time(jiff::Timestamp::now());
        let id = (key.clone(), reason.to_string(), message.clone());
        let repeat = self.written.get(&id).filter(|w| w.at.elapsed() < SERIES_WINDOW).map(|w| (w.name.clone(), w.count + 1));
        let result = match repeat {
            Some((name, count)) => {
                let patch = json!({"count": count, "lastTimestamp": now});
                let r = api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ());
                self.written.insert(id, Written { name, count, at: Instant::now() });
                r
            }
            None => {
                let name = format!("{}.{:x}", key.name, jiff::Timestamp::now().as_nanosecond());
                let ev = Event {
                    metadata: ObjectMeta { name: Some(name.clone()), namespace: Some(key.namespace.clone()), ..Default::default() },
                    involved_object: involved,
                    reason: Some(reason.into()),
                    message: Some(message),
                    type_: Some(match type_ {
                        Type::Normal => "Normal".into(),
                        Type::Warning => "Warning".into(),
                    }),
                    count: Some(1),
                    first_timestamp: Some(now.clone()),
                    last_timestamp: Some(now.clone()),
                    source: Some(EventSource { component: Some(COMPONENT.into()), host: None }),
                    reporting_component: Some(COMPONENT.into()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Default::default()
                };
                let r = api.create(&PostParams::default(), &ev).await.map(|_| ());
                self.written.insert(id, Written { name, count: 1, at: Instant::now() });
                r
            }
        };
        if let Err(e) = result {
            tracing::warn!(object = %key, reason, error = %e, "could not record an Event");
        }
        self.prune();
    }

    /// Forgets series past their window, at most once per [`PRUNE_EVERY`]: a pass
    /// over every series on every Event would cost work in proportion to all the
    /// Events of the last ten minutes.
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
