//! The in-memory copy of a store's data that serves every read.
//!
//! Both backends keep their whole data set here: SQLite loads it at start-up and
//! applies each batch after it commits; etcd loads it with a range read and applies
//! what its one watch delivers. Reads never touch the backend, and a reader can never
//! see a write that is not yet durable, because nothing is applied before it is.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use super::window::{Window, WindowLimits};
use super::{stamp, Doc, Entry, Event, EventType, Range, Revision, StoreError, WatchStream, WriteOp};

/// What the index keeps per key: the revision and the serialized document.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) rev: Revision,
    pub(crate) doc: Arc<Doc>,
}

impl Stored {
    pub(crate) fn entry(&self) -> Entry {
        Entry { rev: self.rev, value: self.doc.value(), doc: Some(self.doc.clone()) }
    }
}

pub(crate) type Index = BTreeMap<String, Stored>;

/// The index, the revision it reflects, and the event window fed by the same changes.
pub(crate) struct Mirror {
    index: RwLock<Index>,
    rev: AtomicU64,
    window: Arc<Window>,
}

impl Mirror {
    pub(crate) fn new(index: Index, rev: Revision, limits: WindowLimits) -> Arc<Self> {
        Arc::new(Self { index: RwLock::new(index), rev: AtomicU64::new(rev), window: Window::new(rev, limits) })
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The current value of one key.
    pub(crate) fn current(&self, key: &str) -> Option<Stored> {
        self.read().get(key).cloned()
    }

    /// Applies committed changes, moves the revision to `rev`, and publishes their
    /// events, all under the index lock: a reader holding the index then always finds
    /// every event up to the index's revision in the window (`list_at` relies on it).
    pub(crate) fn apply(&self, changes: impl IntoIterator<Item = (String, Option<Stored>)>, rev: Revision, events: Vec<Arc<Event>>) {
        let mut index = self.index.write().unwrap_or_else(|e| e.into_inner());
        for (key, stored) in changes {
            match stored {
                Some(s) => index.insert(key, s),
                None => index.remove(&key),
            };
        }
        self.rev.fetch_max(rev, Ordering::AcqRel);
        self.window.publish(events);
    }

    /// Replaces the whole data set, as of `rev`, after a gap in the changes that could
    /// not be replayed. Every open watch ends, and a watch from before `rev` is expired,
    /// so watchers relist instead of missing what happened in the gap.
    pub(crate) fn replace(&self, index: Index, rev: Revision) {
        let mut current = self.index.write().unwrap_or_else(|e| e.into_inner());
        *current = index;
        self.rev.store(rev, Ordering::Release);
        self.window.reset(rev);
    }

    /// The latest revision.
    pub(crate) fn revision(&self) -> Revision {
        self.rev.load(Ordering::Acquire)
    }

    /// Whether the index holds a key of `range`, written at `at` or before, that is
    /// not among `live`: one that was deleted by `at`, in a change not applied yet.
    pub(crate) fn holds_deleted(&self, range: Range<'_>, at: Revision, live: &HashSet<&[u8]>) -> bool {
        let index = self.read();
        let gone = |(k, s): (&String, &Stored)| s.rev <= at && !live.contains(k.as_bytes());
        match range {
            Range::Key(key) => index.get_key_value(key).is_some_and(gone),
            Range::Prefix(prefix) => index.range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix)).any(gone),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<Entry> {
        self.read().get(key).map(Stored::entry)
    }

    pub(crate) fn get_doc(&self, key: &str) -> Option<Arc<Doc>> {
        self.read().get(key).map(|s| s.doc.clone())
    }

    fn list_locked(
        &self,
        index: &Index,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
    ) -> (Vec<(String, Entry)>, Revision) {
        use std::ops::Bound;

        // Read the revision under the same lock as the data, so the list is a consistent snapshot.
        let rev = self.revision();
        let lower = match start_after {
            Some(k) if k >= prefix => Bound::Excluded(k.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        let iter = index.range((lower, Bound::Unbounded)).take_while(|(k, _)| k.starts_with(prefix)).map(|(k, e)| (k.clone(), e.entry()));
        let items = match limit {
            Some(n) => iter.take(n).collect(),
            None => iter.collect(),
        };
        (items, rev)
    }

    pub(crate) fn list(&self, prefix: &str, start_after: Option<&str>, limit: Option<usize>) -> (Vec<(String, Entry)>, Revision) {
        let index = self.read();
        self.list_locked(&index, prefix, start_after, limit)
    }

    pub(crate) fn list_docs(&self, prefix: &str) -> (Vec<(String, Arc<Doc>)>, Revision) {
        let index = self.read();
        let rev = self.revision();
        let items =
            index.range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix)).map(|(k, e)| (k.clone(), e.doc.clone())).collect();
        (items, rev)
    }

    pub(crate) fn list_at(&self, prefix: &str, start_after: Option<&str>, rev: Revision) -> Result<Vec<(String, Entry)>, StoreError> {
        let index = self.read();
        let undo = self.window.events_after(rev)?;
        let in_range = |k: &str| k.starts_with(prefix) && start_after.is_none_or(|s| k > s);
        let (current, _) = self.list_locked(&index, prefix, start_after, None);
        let mut view: BTreeMap<String, Option<Entry>> = current.into_iter().map(|(k, e)| (k, Some(e))).collect();
        // Newest first, so the last write to each key is the oldest event after `rev`,
        // whose previous value is the key's state at `rev`.
        for ev in undo.iter().rev().filter(|e| in_range(&e.key)) {
            let before = ev.prev().map(|p| Entry {
                rev: p.pointer("/metadata/resourceVersion").and_then(|v| v.as_str()).and_then(|v| v.parse().ok()).unwrap_or(0),
                value: p,
                doc: None,
            });
            view.insert(ev.key.clone(), before);
        }
        Ok(view.into_iter().filter_map(|(k, e)| e.map(|e| (k, e))).collect())
    }

    pub(crate) fn watch(&self, prefix: &str, from: Revision) -> Result<WatchStream, StoreError> {
        self.window.subscribe(prefix, from)
    }
}

/// Checks one request against the current value and builds the stored entry and event.
pub(crate) fn stage(op: WriteOp, current: Option<Stored>, rev: Revision) -> Result<(Entry, Event), StoreError> {
    match op {
        WriteOp::Create { key, value } => {
            if current.is_some() {
                return Err(StoreError::AlreadyExists(key));
            }
            let value = Arc::new(stamp(value, rev));
            let doc = within_limit(&key, Doc::new(&value))?;
            let event = Event { rev, key, kind: EventType::Added, doc, prev_doc: None };
            Ok((Entry { rev, value, doc: Some(event.doc.clone()) }, event))
        }
        WriteOp::Update { key, value, expected } => {
            let cur = current.ok_or_else(|| StoreError::NotFound(key.clone()))?;
            if cur.rev != expected {
                return Err(StoreError::Conflict { key, expected, actual: cur.rev });
            }
            let value = Arc::new(stamp(value, rev));
            let doc = within_limit(&key, Doc::new(&value))?;
            let event = Event { rev, key, kind: EventType::Modified, doc, prev_doc: Some(cur.doc) };
            Ok((Entry { rev, value, doc: Some(event.doc.clone()) }, event))
        }
        WriteOp::Delete { key, expected } => {
            let cur = current.ok_or_else(|| StoreError::NotFound(key.clone()))?;
            if let Some(expected) = expected {
                if cur.rev != expected {
                    return Err(StoreError::Conflict { key, expected, actual: cur.rev });
                }
            }
            // The DELETED event carries the deletion revision, as etcd-backed watches do.
            let value = Arc::new(stamp((*cur.doc.value()).clone(), rev));
            let event = Event { rev, key, kind: EventType::Deleted, doc: Doc::new(&value), prev_doc: Some(cur.doc) };
            Ok((Entry { rev, value, doc: Some(event.doc.clone()) }, event))
        }
    }
}

/// The stored document, if it is within [`super::MAX_OBJECT_BYTES`].
fn within_limit(key: &str, doc: Arc<Doc>) -> Result<Arc<Doc>, StoreError> {
    match doc.raw().len() {
        size if size > super::MAX_OBJECT_BYTES => Err(StoreError::TooLarge { key: key.to_string(), size }),
        _ => Ok(doc),
    }
}
