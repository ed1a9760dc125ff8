//! Storage: a revisioned key-value store behind one trait.
//!
//! The API layer sees objects as JSON values under string keys of the form
//! `<group>/<resource>/<workspace>/<namespace>/<name>` (the core group is `core`, and a
//! cluster-scoped object has an empty namespace). Every write bumps one store-wide
//! revision, which becomes the object's `metadata.resourceVersion`, the way etcd's
//! revision does for kube-apiserver. Writes are compare-and-swap on the revision an
//! object was read at, so optimistic concurrency lives here and not in the handlers.
//!
//! The trait is shaped after etcd's model (point reads, prefix ranges, CAS transactions
//! on a key's mod revision, watch from a revision) so that an etcd implementation can
//! sit behind it unchanged. [`conformance`] is the suite of the trait's rules that
//! every backend's tests run.

pub mod conformance;
mod doc;
mod etcd;
pub mod local_etcd;
mod memory;
mod mirror;
mod sqlite;
mod window;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

pub use doc::{Doc, DocMeta, OwnerUid};
pub use etcd::{EtcdConfig, EtcdStore, EtcdTls, DEFAULT_COMPACTION_INTERVAL, DEFAULT_REQUEST_TIMEOUT};
pub use memory::MemoryStore;
pub use sqlite::SqliteStore;
pub use window::{Event, EventType, WatchStream, WindowLimits, EVENT_WINDOW};

/// The key of one object: `<group>/<resource>/<workspace>/<namespace>/<name>`, with
/// `core` for the core group and an empty namespace for a cluster-scoped object. The
/// one place the layout is spelled out.
pub fn object_key(group: &str, resource: &str, workspace: &str, namespace: &str, name: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("{group}/{resource}/{workspace}/{namespace}/{name}")
}

/// A store-wide revision; every write gets the next one.
pub type Revision = u64;

/// One stored object with the revision of its last write.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The revision of the write that produced this value.
    pub rev: Revision,
    /// The object, with `metadata.resourceVersion` already set to `rev`.
    pub value: Arc<Value>,
    /// The same object as the store keeps it, serialized, when the store has it at hand
    /// (a read, or a write's new value), so that a response copies the text instead of
    /// serializing `value` again.
    pub doc: Option<Arc<Doc>>,
}

/// A write request. The store stamps `metadata.resourceVersion` on the value it stores.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Create; fails with [`StoreError::AlreadyExists`] when the key exists.
    Create { key: String, value: Value },
    /// Replace; fails with [`StoreError::Conflict`] unless the key's revision equals `expected`.
    Update { key: String, value: Value, expected: Revision },
    /// Remove; `expected` of `None` deletes whatever is there.
    Delete { key: String, expected: Option<Revision> },
}

impl WriteOp {
    /// The key this operation writes.
    pub fn key(&self) -> &str {
        match self {
            WriteOp::Create { key, .. } | WriteOp::Update { key, .. } | WriteOp::Delete { key, .. } => key,
        }
    }
}

/// The largest object, as stored, that a write may store: etcd's default request limit
/// (`--max-request-bytes`, 1.5 MiB), which bounds every object kube-apiserver stores.
/// It keeps one object from holding tens of megabytes of server memory as a parsed
/// tree (100,000 labels did), whatever the limits on its parts allow.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Create on an existing key.
    #[error("key {0} already exists")]
    AlreadyExists(String),
    /// Update or delete of a key that does not exist.
    #[error("key {0} not found")]
    NotFound(String),
    /// The key's revision moved since it was read.
    #[error("key {key} was modified: expected revision {expected}, found {actual}")]
    Conflict { key: String, expected: Revision, actual: Revision },
    /// The requested revision has left the event window.
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: Revision, oldest: Revision },
    /// The object is larger than a stored object may be ([`MAX_OBJECT_BYTES`]).
    #[error("key {key} would be {size} bytes when stored, over the limit of {MAX_OBJECT_BYTES}")]
    TooLarge { key: String, size: usize },
    /// The write could not be made durable; nothing was changed.
    #[error("storage failure: {0}")]
    Backend(String),
    /// The backend cannot take writes now (etcd without quorum, or unreachable);
    /// nothing was changed, and the same write can be retried.
    #[error("{0}")]
    Unavailable(String),
    /// The backend did not answer in time; the write may or may not have been applied.
    #[error("{0}")]
    Timeout(String),
}

/// Sets `metadata.resourceVersion` to `rev`, where the value has metadata.
pub(crate) fn stamp(mut value: Value, rev: Revision) -> Value {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rev.to_string()));
    }
    value
}

/// What a read covers, for [`Store::sync`]: one key, or every key under a prefix.
#[derive(Debug, Clone, Copy)]
pub enum Range<'a> {
    /// One key.
    Key(&'a str),
    /// Every key that starts with this.
    Prefix(&'a str),
}

/// A revisioned, watchable key-value store.
pub trait Store: Send + Sync + 'static {
    /// Durably applies one write and returns the stored entry (for deletes, the
    /// last value stamped with the deletion revision). The future resolves only
    /// after the write is durable.
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<Entry, StoreError>>;
    /// The current value of a key.
    fn get(&self, key: &str) -> Option<Entry>;
    /// The document stored at `key`, unparsed.
    fn get_doc(&self, key: &str) -> Option<Arc<Doc>>;
    /// Every entry whose key starts with `prefix`, in key order, starting after
    /// `start_after` when given (for pagination), and the revision the list reflects.
    fn list(&self, prefix: &str, start_after: Option<&str>, limit: Option<usize>) -> (Vec<(String, Entry)>, Revision);
    /// Like [`Store::list`] with no bounds, but the stored documents unparsed, for
    /// responses that pass them through as they are.
    fn list_docs(&self, prefix: &str) -> (Vec<(String, Arc<Doc>)>, Revision);
    /// Like [`Store::list`], but as the data stood at revision `rev`, for the later
    /// pages of a paginated list; `Expired` once `rev` has left the event window.
    fn list_at(&self, prefix: &str, start_after: Option<&str>, rev: Revision) -> Result<Vec<(String, Entry)>, StoreError>;
    /// The latest revision.
    fn revision(&self) -> Revision;
    /// Events for keys under `prefix` with a revision greater than `from`, then
    /// live events, or `Expired` when `from` has left the window.
    fn watch(&self, prefix: &str, from: Revision) -> Result<WatchStream, StoreError>;
    /// Whether reads are current: `Err` says why they may not be (the backend is out
    /// of reach, and reads serve the data as of the revision named).
    fn health(&self) -> Result<(), String> {
        Ok(())
    }
    /// Waits until reads of `range` reflect every write committed before the call,
    /// wherever it was made: a read that follows it is linearizable, as a read of
    /// kube-apiserver without a resourceVersion is. A store whose reads always are
    /// (one process, one file) is ready at once. `Err` says why it could not be
    /// confirmed; reads then serve what this store holds.
    fn sync(&self, range: Range<'_>) -> BoxFuture<'static, Result<(), String>> {
        let _ = range;
        Box::pin(futures::future::ready(Ok(())))
    }
}
