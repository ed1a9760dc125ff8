//! Events on the objects a controller acts on, as core/v1 Events that `kubectl
//! describe` and `kubectl get events` show: a scheduler's `Scheduled` on a workload, a
//! syncer's `DriftReverted` on a downstream copy.
//!
//! The same reason and message on the same object within [`SERIES_WINDOW`] bumps the
//! count of the Event already written instead of writing another, as client-go's event
//! correlator does, so a condition that keeps recurring makes one Event with a growing
//! count. Events are queued and written in the background, and failures only logged:
//! the work an Event reports never waits for it, nor fails with it.

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

/// How long a repeated Event is counted on the first one.
pub const SERIES_WINDOW: Duration = Duration::from_secs(600);
/// How often series older than [`SERIES_WINDOW`] are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Something went as intended.
    Normal,
    /// Something needs attention.
    Warning,
}

/// Who records, and how much may wait.
pub struct Settings {
    /// The `source.component` and `reportingComponent` of every Event.
    pub component: &'static str,
    /// The `reportingInstance`: this process, or this syncer.
    pub instance: String,
    /// Events waiting to be written at most; beyond that new ones are dropped with a
    /// warning and counted in `dropped`, so that a flood of Events never holds up the
    /// work they report or grows without bound.
    pub queue: usize,
    /// Events written at once.
    pub writers: usize,
    /// Counts the Events dropped because the queue was full.
    pub dropped: Option<prometheus::IntCounter>,
}

/// One Event to write.
struct Pending {
    /// The workspace to write in, through a client of every workspace; `None` writes
    /// through the recorder's client as it is.
    workspace: Option<String>,
    namespace: String,
    involved: ObjectReference,
    type_: Type,
    reason: &'static str,
    message: String,
}

struct Written {
    name: String,
    count: i32,
    at: Instant,
}

/// Records Events in the background.
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    queue: usize,
    dropped: Option<prometheus::IntCounter>,
    _writer: crate::AbortOnDrop<()>,
}

impl Recorder {
    /// A recorder writing through `client`: a control plane's client with no workspace
    /// path when Events name their workspace, or any cluster's client when they do not.
    pub fn new(client: Client, settings: Settings) -> Self {
        let Settings { component, instance, queue, writers, dropped } = settings;
        let (tx, rx) = mpsc::channel(queue);
        let writer = Writer {
            client,
            component,
            instance,
            written: DashMap::new(),
            pruned: Mutex::new(Instant::now()),
            warned: AtomicBool::new(false),
        };
        let task = tokio::spawn(async move {
            ReceiverStream::new(rx).for_each_concurrent(writers, |p| writer.write(p)).await;
        });
        Recorder { tx, queue, dropped, _writer: crate::AbortOnDrop(task) }
    }

    /// Queues an Event on `involved`, written in `namespace` (the object's own, or for
    /// a namespace, that namespace) of `workspace`.
    pub fn record(
        &self,
        workspace: Option<&str>,
        namespace: &str,
        involved: ObjectReference,
        type_: Type,
        reason: &'static str,
        message: String,
    ) {
        let pending =
            Pending { workspace: workspace.map(String::from), namespace: namespace.to_string(), involved, type_, reason, message };
        if let Err(mpsc::error::TrySendError::Full(p)) = self.tx.try_send(pending) {
            if let Some(d) = &self.dropped {
                d.inc();
            }
            let object = p.involved.name.as_deref().unwrap_or_default();
            tracing::warn!(
                namespace = p.namespace,
                object,
                reason = p.reason,
                queued = self.queue,
                "dropped an Event: too many are waiting to be written"
            );
        }
    }
}

/// (workspace, namespace, object, reason, message): one series.
type Series = (Option<String>, String, String, &'static str, String);

struct Writer {
    client: Client,
    component: &'static str,
    instance: String,
    written: DashMap<Series, Written>,
    pruned: Mutex<Instant>,
    /// Whether a failure was logged as a warning already: a cluster whose RBAC does not
    /// let a syncer write Events says so once, then at debug level.
    warned: AtomicBool,
}

impl Writer {
    async fn write(&self, p: Pending) {
        let Pending { workspace, namespace, involved, type_, reason, message } = p;
        let object = involved.name.clone().unwrap_or_default();
        let client = match &workspace {
            Some(ws) => crate::clients::workspace(&self.client, ws),
            None => self.client.clone(),
        };
        let api: Api<Event> = Api::namespaced(client, &namespace);
        let now = Time(jiff::Timestamp::now());
        let id = (workspace.clone(), namespace.clone(), object.clone(), reason, message.clone());
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
                    type_: Some(match type_ {
                        Type::Normal => "Normal".into(),
                        Type::Warning => "Warning".into(),
                    }),
                    count: Some(1),
                    first_timestamp: Some(now.clone()),
                    last_timestamp: Some(now),
                    source: Some(EventSource { component: Some(self.component.into()), host: None }),
                    reporting_component: Some(self.component.into()),
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
            let ws = workspace.as_deref().unwrap_or_default();
            if self.warned.swap(true, Ordering::Relaxed) {
                tracing::debug!(workspace = ws, namespace, object, reason, error = %e, "could not record an Event");
            } else {
                tracing::warn!(workspace = ws, namespace, object, reason, error = %e, "could not record an Event (further failures are logged at debug level)");
            }
        }
        self.prune();
    }

    /// Forgets series past their window, at most once per [`PRUNE_EVERY`]: a pass over
    /// every series on every Event would cost work in proportion to all the Events of
    /// the last ten minutes.
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
