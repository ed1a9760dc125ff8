//! A store that lives in memory only: for data that its writers report again after a
//! restart, and that must never cost a durable write (the pods a workspace shows are
//! the clusters' own, reported by their syncers).
//!
//! It keeps every rule of the [`Store`] trait (compare-and-swap on revisions, the event
//! window, lists at a past revision), and [`crate::conformance`] tests it like the
//! durable backends. What it holds is gone when the process ends.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::mirror::{stage, Index, Mirror, Stored};
use super::window::WindowLimits;
use super::{Doc, Entry, EventType, Revision, Store, StoreError, WatchStream, WriteOp};

/// An in-memory [`Store`].
pub struct MemoryStore {
    mirror: Arc<Mirror>,
    /// Writes are applied one at a time, in revision order.
    writer: Mutex<()>,
}

impl MemoryStore {
    /// An empty store whose first write gets revision `start + 1`.
    ///
    /// Start it above any revision an earlier run of the same process handed out (the
    /// clock's microseconds do), so that a client holding one from before a restart is
    /// told to list again (410 Expired), not asked to wait for a revision still to come.
    pub fn new(start: Revision, limits: WindowLimits) -> Self {
        Self { mirror: Mirror::new(Index::new(), start, limits), writer: Mutex::new(()) }
    }

    /// A start revision above any handed out by an earlier run: the microseconds since
    /// the Unix epoch.
    pub fn clock_revision() -> Revision {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as Revision)
    }

    /// How many keys are stored.
    pub fn len(&self) -> usize {
        self.mirror.read().len()
    }

    /// Whether the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn apply(&self, op: WriteOp) -> Result<Entry, StoreError> {
        let _one_at_a_time = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let key = op.key().to_string();
        let rev = self.mirror.revision() + 1;
        let (entry, event) = stage(op, self.mirror.current(&key), rev)?;
        let stored = match event.kind {
            EventType::Deleted => None,
            _ => Some(Stored { rev, doc: event.doc.clone() }),
        };
        self.mirror.apply([(key, stored)], rev, vec![Arc::new(event)]);
        Ok(entry)
    }
}

impl Store for MemoryStore {
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<Entry, StoreError>> {
        futures::future::ready(self.apply(op)).boxed()
    }

    fn get(&self, key: &str) -> Option<Entry> {
        self.mirror.get(key)
    }

    fn get_doc(&self, key: &str) -> Option<Arc<Doc>> {
        self.mirror.get_doc(key)
    }

    fn list(&self, prefix: &str, start_after: Option<&str>, limit: Option<usize>) -> (Vec<(String, Entry)>, Revision) {
        self.mirror.list(prefix, start_after, limit)
    }

    fn list_docs(&self, prefix: &str) -> (Vec<(String, Arc<Doc>)>, Revision) {
        self.mirror.list_docs(prefix)
    }

    fn list_at(&self, prefix: &str, start_after: Option<&str>, rev: Revision) -> Result<Vec<(String, Entry)>, StoreError> {
        self.mirror.list_at(prefix, start_after, rev)
    }

    fn revision(&self) -> Revision {
        self.mirror.revision()
    }

    fn watch(&self, prefix: &str, from: Revision) -> Result<WatchStream, StoreError> {
        self.mirror.watch(prefix, from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_keeps_every_rule_of_the_store() {
        crate::conformance::run(|| async { Arc::new(MemoryStore::new(MemoryStore::clock_revision(), WindowLimits::CONTROL_PLANE)) }).await;
    }
}
