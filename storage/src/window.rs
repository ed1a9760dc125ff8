//! The in-memory event window that serves every watch.
//!
//! Watchers never query the database. Each committed write is appended here once and
//! fanned out through a broadcast channel; a watch that starts from an older revision
//! replays from the window first. A revision that has already been trimmed from the
//! window is answered with `Expired`, which the API turns into the 410 ERROR event
//! that makes kube-runtime relist.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::broadcast;

use super::{Doc, Revision, StoreError};

/// How many events the window keeps, across all keys, at most. kube-apiserver's watch
/// cache keeps a per-resource window sized for roughly a minute of churn; one shared
/// window of this size covers several minutes at the write rates a control plane of a
/// few thousand workloads sees (status heartbeats dominate).
pub const EVENT_WINDOW: usize = 100_000;

/// How far back the window reaches: a count of events and a size of their documents,
/// whichever is reached first. The size matters because an event keeps the document
/// it wrote alive after later writes replace it in the index: a window of 100,000 pod
/// status updates would hold some 350 MB of superseded pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLimits {
    /// Events kept at most.
    pub events: usize,
    /// Bytes of serialized documents (and keys) kept at most.
    pub bytes: usize,
}

impl WindowLimits {
    /// Flotilla's control plane: [`EVENT_WINDOW`] events, 256 MiB. Its many watchers
    /// (syncers, the scheduler, users' `get -w`) should resume rather than relist after
    /// a reconnect, and its objects are mostly small.
    pub const CONTROL_PLANE: WindowLimits = WindowLimits { events: EVENT_WINDOW, bytes: 256 << 20 };
    /// A simulated physical cluster: 32 MiB, about 10,000 pod updates. It has a
    /// handful of watchers (a syncer, a user), and pods are large and churn a lot.
    pub const PHYSICAL_CLUSTER: WindowLimits = WindowLimits { events: EVENT_WINDOW, bytes: 32 << 20 };
}

/// What an event costs the window beyond what the index holds anyway: its document
/// (shared with the index only until the key is written again) and its key.
fn event_bytes(ev: &Event) -> usize {
    ev.doc.raw().len() + ev.key.len()
}

/// Live fan-out depth. A watcher that falls further behind than this re-reads from the
/// window, so the value only trades memory for how often slow watchers take that path.
/// The channel's ring keeps its last this-many events alive whatever the window's
/// limits, so it stays well below them: 4,096 pod updates are about 16 MB.
const BROADCAST_CAPACITY: usize = 4_096;

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The key was created.
    Added,
    /// The key was replaced.
    Modified,
    /// The key was removed.
    Deleted,
}

/// One committed change.
#[derive(Debug)]
pub struct Event {
    /// The revision of the write.
    pub rev: Revision,
    /// The key written.
    pub key: String,
    /// What happened.
    pub kind: EventType,
    /// The new value; for a delete, the last value stamped with the deletion revision.
    pub doc: Arc<Doc>,
    /// The value before the write, when there was one. Filtered watches need it to
    /// turn "no longer matches" into a DELETED event, as the apiserver's watch cache does.
    pub prev_doc: Option<Arc<Doc>>,
}

impl Event {
    /// The new value (see [`Event::doc`]), parsed.
    pub fn object(&self) -> Arc<Value> {
        self.doc.value()
    }

    /// The value before the write (see [`Event::prev_doc`]), parsed.
    pub fn prev(&self) -> Option<Arc<Value>> {
        self.prev_doc.as_ref().map(|d| d.value())
    }
}

struct Inner {
    events: VecDeque<Arc<Event>>,
    /// What the events in the window cost, by [`event_bytes`].
    bytes: usize,
    /// Every event with a revision above this one is still in `events`.
    oldest: Revision,
    /// The live fan-out. It lives under the lock so that [`Window::reset`] can end
    /// every open watch by replacing it.
    tx: broadcast::Sender<Arc<Event>>,
}

/// The shared window and its broadcast channel.
pub(crate) struct Window {
    inner: Mutex<Inner>,
    limits: WindowLimits,
}

impl Window {
    /// A window that starts empty at `rev`: watches from `rev` or later can be served.
    pub(crate) fn new(rev: Revision, limits: WindowLimits) -> Arc<Self> {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Arc::new(Self { inner: Mutex::new(Inner { events: VecDeque::new(), bytes: 0, oldest: rev, tx }), limits })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere while holding it; the deque itself
        // is always consistent between statements, so keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends committed events (in revision order) and sends them to live watchers.
    pub(crate) fn publish(&self, events: Vec<Arc<Event>>) {
        let mut inner = self.lock();
        for ev in events {
            inner.bytes += event_bytes(&ev);
            inner.events.push_back(ev.clone());
            // No receivers is not an error: nobody is watching right now.
            let _ = inner.tx.send(ev);
        }
        // The newest event always stays, so a watch from the current revision works.
        while inner.events.len() > 1 && (inner.events.len() > self.limits.events || inner.bytes > self.limits.bytes) {
            if let Some(old) = inner.events.pop_front() {
                inner.bytes -= event_bytes(&old);
                inner.oldest = old.rev;
            }
        }
    }

    /// Forgets every event and starts again empty at `rev`: every open watch ends (its
    /// channel closes) and a watch from before `rev` is `Expired`, so that watchers
    /// relist after the data was replaced wholesale.
    pub(crate) fn reset(&self, rev: Revision) {
        let mut inner = self.lock();
        inner.events.clear();
        inner.bytes = 0;
        inner.oldest = rev;
        inner.tx = broadcast::channel(BROADCAST_CAPACITY).0;
    }

    /// Starts a watch on keys under `prefix` from revision `from` (exclusive).
    pub(crate) fn subscribe(self: &Arc<Self>, prefix: &str, from: Revision) -> Result<WatchStream, StoreError> {
        let inner = self.lock();
        let replay = Self::replay(&inner, prefix, from)?;
        // Subscribing under the lock means nothing published after the replay snapshot
        // can be missed, and nothing in it is received twice (we also skip by revision).
        let rx = inner.tx.subscribe();
        Ok(WatchStream { replay, rx, prefix: prefix.to_string(), last: from, window: self.clone() })
    }

    /// Every event after `rev`, in order, or `Expired` when `rev` left the window.
    pub(crate) fn events_after(&self, rev: Revision) -> Result<Vec<Arc<Event>>, StoreError> {
        Ok(Self::replay(&self.lock(), "", rev)?.into_iter().collect())
    }

    fn replay(inner: &Inner, prefix: &str, from: Revision) -> Result<VecDeque<Arc<Event>>, StoreError> {
        if from < inner.oldest {
            return Err(StoreError::Expired { requested: from, oldest: inner.oldest });
        }
        // Events are in revision order, so binary-search the start instead of scanning.
        let start = inner.events.partition_point(|e| e.rev <= from);
        Ok(inner.events.range(start..).filter(|e| e.key.starts_with(prefix)).cloned().collect())
    }
}

/// A stream of events for one watch.
pub struct WatchStream {
    replay: VecDeque<Arc<Event>>,
    rx: broadcast::Receiver<Arc<Event>>,
    prefix: String,
    last: Revision,
    window: Arc<Window>,
}

impl WatchStream {
    /// The highest revision this stream has passed, delivered or filtered out. Every
    /// matching event up to it has been returned, so a bookmark may claim it.
    pub fn progress(&self) -> Revision {
        self.last
    }

    /// The next event if one has been published already, without waiting: `None` when
    /// there is none yet (or the store shut down), `Err(Expired)` when this watcher fell
    /// out of the window. A write's event is published before the write returns, so
    /// after a write this stream yields it.
    pub fn try_next(&mut self) -> Option<Result<Arc<Event>, StoreError>> {
        loop {
            if let Some(ev) = self.replayed() {
                return Some(Ok(ev));
            }
            let received = match self.rx.try_recv() {
                Ok(ev) => Received::Event(ev),
                Err(broadcast::error::TryRecvError::Lagged(_)) => Received::Lagged,
                Err(broadcast::error::TryRecvError::Empty) => return None,
                Err(broadcast::error::TryRecvError::Closed) => Received::Closed,
            };
            if let Some(out) = self.take(received) {
                return out;
            }
        }
    }

    /// The next event, `Err(Expired)` when this watcher fell out of the window, or
    /// `None` when the store shut down.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, StoreError>> {
        loop {
            if let Some(ev) = self.replayed() {
                return Some(Ok(ev));
            }
            let received = match self.rx.recv().await {
                Ok(ev) => Received::Event(ev),
                Err(broadcast::error::RecvError::Lagged(_)) => Received::Lagged,
                Err(broadcast::error::RecvError::Closed) => Received::Closed,
            };
            if let Some(out) = self.take(received) {
                return out;
            }
        }
    }

    /// The next event replayed from the window, if any is left.
    fn replayed(&mut self) -> Option<Arc<Event>> {
        let ev = self.replay.pop_front()?;
        self.last = ev.rev;
        Some(ev)
    }

    /// Takes in what the live channel gave: `Some` is what to return, `None` means
    /// read on.
    fn take(&mut self, received: Received) -> Option<Option<Result<Arc<Event>, StoreError>>> {
        match received {
            Received::Event(ev) if ev.rev <= self.last => None,
            Received::Event(ev) => {
                // An event under another prefix is still progress: a bookmark may
                // claim its revision.
                self.last = ev.rev;
                ev.key.starts_with(&self.prefix).then_some(Some(Ok(ev)))
            }
            Received::Lagged => {
                // Too slow for the live channel: catch up from the window, which holds
                // far more history, and resubscribe.
                let inner = self.window.lock();
                match Window::replay(&inner, &self.prefix, self.last) {
                    Ok(replay) => {
                        self.replay = replay;
                        self.rx = inner.tx.subscribe();
                        None
                    }
                    Err(e) => Some(Some(Err(e))),
                }
            }
            Received::Closed => {
                // The window was reset (the data replaced after a gap) rather than
                // shut down when it starts after this watcher: it must relist.
                let inner = self.window.lock();
                match inner.oldest > self.last {
                    true => Some(Some(Err(StoreError::Expired { requested: self.last, oldest: inner.oldest }))),
                    false => Some(None),
                }
            }
        }
    }
}

/// What the live channel gave a [`WatchStream`].
enum Received {
    Event(Arc<Event>),
    Lagged,
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(rev: Revision, key: &str) -> Arc<Event> {
        Arc::new(Event { rev, key: key.into(), kind: EventType::Added, doc: Doc::new(&Arc::new(json!({}))), prev_doc: None })
    }

    #[tokio::test]
    async fn replays_from_revision_then_streams_live() {
        let w = Window::new(0, WindowLimits::CONTROL_PLANE);
        w.publish(vec![ev(1, "a/x"), ev(2, "b/y"), ev(3, "a/z")]);
        let mut s = w.subscribe("a/", 1).unwrap();
        assert_eq!(s.next().await.unwrap().unwrap().rev, 3);
        w.publish(vec![ev(4, "b/q"), ev(5, "a/w")]);
        assert_eq!(s.next().await.unwrap().unwrap().key, "a/w");
    }

    #[tokio::test]
    async fn revision_before_window_is_expired() {
        let w = Window::new(10, WindowLimits::CONTROL_PLANE);
        match w.subscribe("", 9) {
            Err(StoreError::Expired { requested: 9, oldest: 10 }) => {}
            other => panic!("expected Expired, got {:?}", other.map(|_| ())),
        }
        assert!(w.subscribe("", 10).is_ok());
    }

    #[tokio::test]
    async fn trimming_moves_the_oldest_revision() {
        let w = Window::new(0, WindowLimits::CONTROL_PLANE);
        let events: Vec<_> = (1..=(EVENT_WINDOW as u64 + 5)).map(|r| ev(r, "k")).collect();
        w.publish(events);
        assert!(matches!(w.subscribe("", 4), Err(StoreError::Expired { oldest: 5, .. })));
        let mut s = w.subscribe("", 5).unwrap();
        assert_eq!(s.next().await.unwrap().unwrap().rev, 6);
    }

    #[test]
    fn try_next_takes_what_is_published_without_waiting_and_catches_up_after_a_lag() {
        let w = Window::new(0, WindowLimits::CONTROL_PLANE);
        w.publish(vec![ev(1, "a/x"), ev(2, "b/y")]);
        let mut s = w.subscribe("a/", 0).unwrap();
        assert_eq!(s.try_next().unwrap().unwrap().rev, 1);
        assert!(s.try_next().is_none(), "b/y is another prefix, and nothing else is there");
        w.publish(vec![ev(3, "b/z")]);
        assert!(s.try_next().is_none());
        assert_eq!(s.progress(), 3, "it has passed b/z live");
        // More than the live channel holds: the stream catches up from the window.
        let many = BROADCAST_CAPACITY as Revision + 10;
        w.publish((4..4 + many).map(|r| ev(r, "a/k")).collect());
        let seen: Vec<Revision> = std::iter::from_fn(|| s.try_next().map(|e| e.unwrap().rev)).collect();
        assert_eq!(seen, (4..4 + many).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_reset_expires_open_watches_and_old_revisions() {
        let w = Window::new(0, WindowLimits::CONTROL_PLANE);
        w.publish(vec![ev(1, "a/x")]);
        let mut s = w.subscribe("a/", 1).unwrap();
        w.reset(7);
        match s.next().await {
            Some(Err(StoreError::Expired { requested: 1, oldest: 7 })) => {}
            other => panic!("an open watch must be told to relist, got {:?}", other.map(|r| r.map(|e| e.rev))),
        }
        assert!(matches!(w.subscribe("", 6), Err(StoreError::Expired { oldest: 7, .. })));
        let mut s = w.subscribe("a/", 7).unwrap();
        w.publish(vec![ev(8, "a/y")]);
        assert_eq!(s.next().await.unwrap().unwrap().rev, 8, "a watch from the reset revision follows what comes after");
    }

    #[tokio::test]
    async fn the_byte_limit_trims_too_but_keeps_the_newest_event() {
        // Each event costs its document ("{}", 2 bytes) plus its key (1 byte).
        let w = Window::new(0, WindowLimits { events: 100, bytes: 10 });
        w.publish((1..=5).map(|r| ev(r, "k")).collect());
        assert!(matches!(w.subscribe("", 1), Err(StoreError::Expired { oldest: 2, .. })), "three events of 3 bytes fit in 10");
        let mut s = w.subscribe("", 2).unwrap();
        assert_eq!(s.next().await.unwrap().unwrap().rev, 3);
        let big = Window::new(0, WindowLimits { events: 100, bytes: 1 });
        big.publish(vec![ev(1, "k"), ev(2, "k")]);
        assert!(big.subscribe("", 1).is_ok(), "an event larger than the limit still stays while it is the newest");
    }
}
