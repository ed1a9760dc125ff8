//! Watch responses: one compact JSON event per line, as kube-apiserver streams them.
//!
//! Covers resuming from a resourceVersion, synthetic ADDED events for the current
//! state, `sendInitialEvents` with its closing bookmark, periodic bookmarks, selector
//! transitions (an object that stops matching is sent as DELETED, in its state before
//! the change, as the watch cache does), Table events for `kubectl get -w`, and 410
//! Expired delivered as an ERROR event on a 200 response, which is what makes
//! kube-runtime relist.

use std::collections::VecDeque;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::api::{present, selected, with_metadata, with_resource_version, Api, ListOptions, Scope};
use crate::registry::split_key;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Doc, Event, EventType, Revision, StoreError};

/// How often an idle watch with `allowWatchBookmarks` gets a BOOKMARK. kube-apiserver
/// sends them about once a minute; more often keeps resume points fresh for clients
/// of a busy store at the cost of one small line per watcher.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(15);

/// A watch that is given no `timeoutSeconds` ends after this long, so that clients
/// re-establish watches and load spreads across servers, as the apiserver's
/// randomized 30-60 minute default does.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How many recent rewritten changes are kept for the watchers that have not sent
/// them yet (see [`rendered`]). Watchers of one change send it within moments of each
/// other; one that lags further behind rewrites it again itself.
const RENDERED_KEPT: usize = 128;

/// Recent stored changes as rewritten for watchers: the document, whether its
/// workspace was spliced in, whether managedFields were left out, and the text.
type RenderedRing = VecDeque<(Arc<Doc>, bool, bool, Arc<str>)>;

static RENDERED: LazyLock<Mutex<RenderedRing>> = LazyLock::new(|| Mutex::new(VecDeque::with_capacity(RENDERED_KEPT)));

/// `ev`'s object rewritten for a watcher ([`with_metadata`]): with `workspace`'s
/// annotation when it watches the wildcard view, without managedFields when `omit`.
/// Every in-process controller watches the wildcard view without managedFields, so one
/// change goes to several watchers that need the same text: the first rewrites it and
/// the others take it from here. An entry holds its document, so no other document
/// can take its address while it is listed.
fn rendered(ev: &Event, workspace: Option<&str>, omit: bool) -> Option<Arc<str>> {
    let wildcard = workspace.is_some();
    let same = |(doc, w, o, _): &&(Arc<Doc>, bool, bool, Arc<str>)| Arc::ptr_eq(doc, &ev.doc) && *w == wildcard && *o == omit;
    if let Some((.., text)) = RENDERED.lock().unwrap_or_else(PoisonError::into_inner).iter().rev().find(same) {
        return Some(text.clone());
    }
    let text: Arc<str> = with_metadata(ev.doc.raw(), workspace, omit)?.into();
    let mut recent = RENDERED.lock().unwrap_or_else(PoisonError::into_inner);
    if recent.len() >= RENDERED_KEPT {
        recent.pop_front();
    }
    recent.push_back((ev.doc.clone(), wildcard, omit, text.clone()));
    Some(text)
}

/// Recent changes that took objects out of some watcher's selector: the change's
/// document, and what such a watcher is sent instead (see [`left_selector`]).
type LeftRing = VecDeque<(Arc<Doc>, Arc<Doc>)>;

static LEFT: LazyLock<Mutex<LeftRing>> = LazyLock::new(|| Mutex::new(VecDeque::with_capacity(RENDERED_KEPT)));

/// The DELETED event for a watcher whose selector the object of `ev` (a MODIFIED
/// change) no longer matches: the object as it was before the change, which is the
/// last state that watcher saw, stamped with the change's resourceVersion so that a
/// client resuming from it misses nothing. This is what the apiserver's watch cache
/// sends. One change leaves the selectors of several watchers alike; the first builds
/// the event's document and the others share it.
fn left_selector(ev: &Event) -> Option<Event> {
    let prev = ev.prev_doc.as_ref()?;
    let known =
        LEFT.lock().unwrap_or_else(PoisonError::into_inner).iter().rev().find(|(d, _)| Arc::ptr_eq(d, &ev.doc)).map(|(_, l)| l.clone());
    let doc = match known {
        Some(doc) => doc,
        None => {
            let doc = Doc::from_raw(with_resource_version(prev.raw(), &ev.rev.to_string())?).ok()?;
            let mut recent = LEFT.lock().unwrap_or_else(PoisonError::into_inner);
            if recent.len() >= RENDERED_KEPT {
                recent.pop_front();
            }
            recent.push_back((ev.doc.clone(), doc.clone()));
            doc
        }
    };
    Some(Event { rev: ev.rev, key: ev.key.clone(), kind: EventType::Deleted, doc, prev_doc: None })
}

/// Watch parameters.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Selectors.
    pub labels: Option<LabelSelector>,
    /// Field selector.
    pub fields: Option<FieldSelector>,
    /// Render objects as single-row Tables (`kubectl get -w`).
    pub table: bool,
    /// Leave `metadata.managedFields` out ([`placement_api::MANAGED_FIELDS_HEADER`]).
    pub omit_managed_fields: bool,
}

/// Starts a watch; returns the receiving end of the response body.
/// `stop` flips to true when the server shuts down: streams end at once and clients
/// resume elsewhere, instead of holding the shutdown for its whole grace period.
pub fn start(
    api: Arc<Api>,
    scope: Scope,
    opts: WatchOptions,
    watchers: prometheus::IntGauge,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<mpsc::Receiver<Bytes>, crate::error::ApiError> {
    let rv = opts.resource_version.as_deref().filter(|s| !s.is_empty() && *s != "0");
    let from: Option<Revision> = match rv {
        Some(s) => Some(s.parse().map_err(|_| crate::error::ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?),
        None => None,
    };
    // Initial state is sent for an unset or "0" resourceVersion, and when asked for.
    let initial = opts.send_initial_events.unwrap_or(from.is_none());
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let span = tracing::debug_span!("watch", resource = %scope.rt.plural, workspace = %scope.workspace, namespace = %scope.namespace);
    tokio::spawn(
        async move {
            watchers.inc();
            run(api, scope, opts, from, initial, tx, stop).await;
            watchers.dec();
        }
        .instrument(span),
    );
    Ok(rx)
}

struct Sender {
    tx: mpsc::Sender<Bytes>,
    scope: Scope,
    table: bool,
    first_table: bool,
    omit_managed_fields: bool,
}

impl Sender {
    async fn send(&mut self, kind: &str, mut object: Value) -> bool {
        if self.omit_managed_fields {
            if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
        }
        let object = if self.table {
            let rv = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string();
            let t = crate::table::table(&self.scope, std::slice::from_ref(&object), &rv, None, false, self.first_table);
            self.first_table = false;
            t
        } else {
            object
        };
        self.raw(kind, object).await
    }

    /// A stored change as this watcher sees it. The line is built from the stored
    /// text: most watchers get the object exactly as stored, and a wildcard watcher
    /// gets it with its workspace's annotation spliced in, so neither copies nor
    /// re-serializes the object tree. Tables and converted kinds take the long way.
    async fn event(&mut self, kind: &str, ev: &Event, workspace: &str) -> bool {
        let converted = self.table || self.scope.rt.strategy.converts();
        let wildcard = self.scope.wildcard();
        let rewritten = match (converted, wildcard || self.omit_managed_fields) {
            (false, true) => rendered(ev, wildcard.then_some(workspace), self.omit_managed_fields),
            _ => None,
        };
        let text = match &rewritten {
            Some(t) => &**t,
            None if !converted && !wildcard && !self.omit_managed_fields => ev.doc.raw(),
            None => return self.send(kind, present(&self.scope, workspace, &ev.object())).await,
        };
        let mut line = Vec::with_capacity(text.len() + kind.len() + 24);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        line.extend_from_slice(text.as_bytes());
        line.extend_from_slice(b"}\n");
        self.tx.send(Bytes::from(line)).await.is_ok()
    }

    async fn raw(&mut self, kind: &str, object: Value) -> bool {
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        self.tx.send(Bytes::from(line)).await.is_ok()
    }

    async fn bookmark(&mut self, rv: Revision, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.scope.rt.kind, "apiVersion": self.scope.rt.api_version(), "metadata": meta});
        self.raw("BOOKMARK", obj).await
    }

    async fn expired(&mut self, e: &StoreError) -> bool {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": e.to_string(), "reason": "Expired", "code": 410});
        self.raw("ERROR", status).await
    }
}

async fn run(
    api: Arc<Api>,
    scope: Scope,
    opts: WatchOptions,
    from: Option<Revision>,
    initial: bool,
    tx: mpsc::Sender<Bytes>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if *stop.borrow() {
        return;
    }
    let mut out = Sender { tx, scope: scope.clone(), table: opts.table, first_table: true, omit_managed_fields: opts.omit_managed_fields };
    let deadline = tokio::time::Instant::now() + opts.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let start_rev = if initial {
        let list_opts = ListOptions { labels: opts.labels.clone(), fields: opts.fields.clone(), ..Default::default() };
        let (items, rev, _) = match api.list_items(&scope, &list_opts) {
            Ok(r) => r,
            Err(e) => {
                let _ = out.raw("ERROR", e.to_status()).await;
                return;
            }
        };
        for item in items {
            if !out.send("ADDED", item.into_value()).await {
                return;
            }
        }
        if opts.send_initial_events == Some(true) && !out.bookmark(rev, true).await {
            return;
        }
        rev
    } else {
        from.unwrap_or_else(|| api.store_for(&scope.rt).revision())
    };
    let mut stream = match api.store_for(&scope.rt).watch(&scope.prefix(), start_rev) {
        Ok(s) => s,
        Err(e) => {
            let _ = out.expired(&e).await;
            return;
        }
    };
    // A label selector reads the labels each document keeps once read, so a change
    // and the value it had before are not parsed whole for every filtered watcher of a
    // busy kind (about half of what the watches cost). Field selectors, rarer, read the
    // whole object.
    let matches = |doc: &Doc| match &opts.fields {
        None => opts.labels.as_ref().is_none_or(|l| l.matches(doc.labels())),
        Some(_) => selected(&*scope.rt.strategy, &doc.value(), opts.labels.as_ref(), opts.fields.as_ref()),
    };
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return,
            _ = out.tx.closed() => return,
            _ = stop.changed() => return,
            _ = ticker.tick(), if opts.bookmarks => {
                if !out.bookmark(stream.progress(), false).await { return; }
            }
            ev = stream.next() => {
                let ev = match ev {
                    None => return,
                    Some(Err(e)) => { let _ = out.expired(&e).await; return; }
                    Some(Ok(ev)) => ev,
                };
                let ws = split_key(&ev.key).map(|(w, _, _)| w).unwrap_or_default();
                let now_matches = matches(&ev.doc);
                let was_matching = ev.prev_doc.as_deref().is_some_and(matches);
                let (kind, left) = match (ev.kind, was_matching, now_matches) {
                    (EventType::Added, _, true) => ("ADDED", None),
                    (EventType::Modified, true, true) => ("MODIFIED", None),
                    (EventType::Modified, false, true) => ("ADDED", None),
                    (EventType::Modified, true, false) => ("DELETED", left_selector(&ev)),
                    (EventType::Deleted, true, _) => ("DELETED", None),
                    _ => continue,
                };
                if !out.event(kind, left.as_ref().unwrap_or(&ev), ws).await { return; }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(raw: &str) -> Event {
        Event {
            rev: 7,
            key: "apps/deployments/ws/default/web".into(),
            kind: EventType::Modified,
            doc: Doc::from_raw(raw.into()).unwrap(),
            prev_doc: None,
        }
    }

    #[test]
    fn an_object_leaving_a_selector_is_sent_as_it_was_with_the_changes_revision() {
        let mut ev =
            change(r#"{"kind":"ConfigMap","metadata":{"name":"c","resourceVersion":"7","labels":{"tier":"api"}},"data":{"v":"2"}}"#);
        ev.rev = 7;
        ev.prev_doc = Some(
            Doc::from_raw(
                r#"{"kind":"ConfigMap","metadata":{"name":"c","resourceVersion":"5","labels":{"tier":"web"}},"data":{"v":"1"}}"#.into(),
            )
            .unwrap(),
        );
        let left = left_selector(&ev).unwrap();
        assert_eq!(left.kind, EventType::Deleted);
        assert_eq!((left.rev, left.key.as_str()), (7, ev.key.as_str()));
        assert_eq!(
            *left.object(),
            serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "7", "labels": {"tier": "web"}}, "data": {"v": "1"}})
        );
        assert!(Arc::ptr_eq(&left.doc, &left_selector(&ev).unwrap().doc), "the next watcher shares the document");
        ev.prev_doc = None;
        assert!(left_selector(&ev).is_none(), "a change with no previous state has nothing to send");
    }

    #[test]
    fn a_change_is_rewritten_once_for_every_watcher_that_wants_the_same_text() {
        let raw =
            r#"{"kind":"Deployment","metadata":{"name":"web","managedFields":[{"manager":"kubectl"}],"annotations":{"a":"b"}},"spec":{}}"#;
        let ev = change(raw);
        let first = rendered(&ev, Some("ws"), true).unwrap();
        assert_eq!(*first, *with_metadata(raw, Some("ws"), true).unwrap(), "the text is what the rewrite gives");
        assert!(!first.contains("managedFields") && first.contains(r#""kcp.io/cluster":"ws""#), "{first}");
        assert!(Arc::ptr_eq(&first, &rendered(&ev, Some("ws"), true).unwrap()), "a second watcher takes the first one's text");
        let kept = rendered(&ev, Some("ws"), false).unwrap();
        assert!(kept.contains("managedFields"), "a watcher that keeps managedFields gets its own text: {kept}");
        let scoped = rendered(&ev, None, true).unwrap();
        assert!(!scoped.contains("kcp.io/cluster"), "a watcher of one workspace gets no annotation: {scoped}");
        // The same text in another document is another change, rewritten anew.
        let other = change(raw);
        assert!(!Arc::ptr_eq(&first, &rendered(&other, Some("ws"), true).unwrap()));
    }
}
