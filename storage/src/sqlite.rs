//! The default store: an SQLite file in the data dir, with an in-memory index.
//!
//! One writer thread owns the connection. Requests queue on a channel; the thread takes
//! everything queued, checks each request against the index, writes the batch in one
//! transaction and commits it with WAL and `synchronous=FULL`, so the commit is on disk
//! before any of its writers is answered. While one batch is being fsynced the next
//! one queues up, which is group commit: throughput grows with concurrency instead of
//! being capped at one fsync per write.
//!
//! Reads never touch SQLite. The whole data set lives in a `BTreeMap` (values are
//! shared `Arc`s with the event window), loaded once at start-up, and is updated only
//! after a batch commits, so a reader can never see a write that is not yet durable.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{mpsc, Arc};

use futures::future::BoxFuture;
use futures::FutureExt;
use prometheus::{Histogram, HistogramOpts, IntCounter};
use rusqlite::{params, Connection};
use tokio::sync::oneshot;

use super::mirror::{stage, Index, Mirror, Stored};
use super::window::WindowLimits;
use super::{Doc, Entry, Event, EventType, Revision, Store, StoreError, WatchStream, WriteOp};

/// Upper bound on writes per transaction. Large enough that 32+ concurrent clients
/// share one fsync, small enough that one huge burst doesn't delay its first writer.
const MAX_BATCH: usize = 512;

/// How long opening a store waits for another connection to let go of the file.
const OPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How the writer's commits go: how often it commits, how many writes share a commit
/// (group commit at work, or not), and how long a commit with its fsync takes, which
/// is the floor under every write's latency.
#[derive(Clone)]
struct CommitMetrics {
    duration: Histogram,
    writes: Histogram,
    failures: IntCounter,
}

impl CommitMetrics {
    fn new() -> Self {
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("a valid histogram")
        };
        CommitMetrics {
            duration: histogram(
                "flotilla_store_commit_duration_seconds",
                "Time to write and fsync one batch of writes",
                vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0],
            ),
            writes: histogram(
                "flotilla_store_commit_writes",
                "Writes committed together in one transaction",
                vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0],
            ),
            failures: IntCounter::new("flotilla_store_commit_failures_total", "Batches whose commit failed and was rolled back")
                .expect("a valid counter"),
        }
    }
}

struct Request {
    op: WriteOp,
    reply: oneshot::Sender<Result<Entry, StoreError>>,
}

/// The SQLite-backed [`Store`].
pub struct SqliteStore {
    mirror: Arc<Mirror>,
    metrics: CommitMetrics,
    tx: mpsc::Sender<Request>,
}

impl SqliteStore {
    /// Opens (or creates) the database at `path` and loads it into memory, with the
    /// control plane's watch window.
    pub fn open(path: &Path) -> Result<Arc<Self>, StoreError> {
        Self::open_with_window(path, WindowLimits::CONTROL_PLANE)
    }

    /// Like [`SqliteStore::open`], with a watch window of the given reach.
    pub fn open_with_window(path: &Path, window: WindowLimits) -> Result<Arc<Self>, StoreError> {
        let limits = window;
        let conn = Connection::open(path).map_err(backend)?;
        // A store closed in this process lets go of the file when its writer thread
        // ends, moments after; wait that long for it rather than fail.
        conn.busy_timeout(OPEN_WAIT).map_err(backend)?;
        // One process owns a store. Holding the file lock for the connection's life
        // saves a lock and unlock per commit and lets SQLite keep its page cache across
        // commits; a second server started on the same data dir fails here, below.
        // The page cache stays at SQLite's default (2 MiB): every commit ends with a
        // truncate of the cache that can walk its whole hash table, so a larger cache
        // costs the writer more on each commit than the reads it saves (64 MiB took
        // about a quarter more of the writer thread's CPU; docs/benchmarks.md).
        conn.execute_batch(
            "PRAGMA locking_mode=EXCLUSIVE;
             PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, rev INTEGER NOT NULL, value BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);",
        )
        .map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => StoreError::Backend(format!(
                "{} is in use by another process: stop the other server that uses this data dir, or give this one its own",
                path.display()
            )),
            _ => backend(e),
        })?;
        let mut index = Index::new();
        {
            let mut stmt = conn.prepare("SELECT key, rev, value FROM kv").map_err(backend)?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?))).map_err(backend)?;
            for row in rows {
                let (key, rev, bytes) = row.map_err(backend)?;
                let corrupt = |e: String| StoreError::Backend(format!("corrupt value under {key}: {e}"));
                let text = String::from_utf8(bytes).map_err(|e| corrupt(e.to_string()))?;
                let doc = Doc::from_raw(text).map_err(|e| corrupt(e.to_string()))?;
                index.insert(key, Stored { rev: rev as Revision, doc });
            }
        }
        // The revision survives deletes of the newest key because it is kept on its own.
        let stored: i64 =
            conn.query_row("SELECT COALESCE(MAX(value), 0) FROM meta WHERE name = 'revision'", [], |r| r.get(0)).map_err(backend)?;
        let max_rev = index.values().map(|e| e.rev).max().unwrap_or(0).max(stored as Revision);

        let mirror = Mirror::new(index, max_rev, limits);
        let (tx, rx) = mpsc::channel();
        let metrics = CommitMetrics::new();
        let writer = Writer { conn, mirror: mirror.clone(), metrics: metrics.clone() };
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Backend(format!("spawning the writer thread: {e}")))?;
        Ok(Arc::new(Self { mirror, tx, metrics }))
    }

    /// Registers the commit metrics (`flotilla_store_commit_*`) with `registry`.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.metrics.duration.clone()))?;
        registry.register(Box::new(self.metrics.writes.clone()))?;
        registry.register(Box::new(self.metrics.failures.clone()))
    }

    /// How many keys are stored.
    pub fn len(&self) -> usize {
        self.mirror.read().len()
    }

    /// Whether the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl Store for SqliteStore {
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<Entry, StoreError>> {
        let (reply, rx) = oneshot::channel();
        let sent = self.tx.send(Request { op, reply });
        async move {
            sent.map_err(|_| StoreError::Backend("the store writer has stopped".into()))?;
            rx.await.map_err(|_| StoreError::Backend("the store writer has stopped".into()))?
        }
        .boxed()
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

struct Writer {
    conn: Connection,
    mirror: Arc<Mirror>,
    metrics: CommitMetrics,
}

/// The outcome of one request inside a batch, before the batch commits.
struct Staged {
    reply: oneshot::Sender<Result<Entry, StoreError>>,
    result: Result<(Entry, Arc<Event>), StoreError>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Request>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            self.commit_batch(batch);
        }
    }

    fn commit_batch(&mut self, batch: Vec<Request>) {
        let started = std::time::Instant::now();
        let writes = batch.len();
        let base = self.mirror.revision();
        let mut next = base;
        // Changes made earlier in this batch, which later requests must see.
        let mut overlay: HashMap<String, Option<Stored>> = HashMap::new();
        let mut staged = Vec::with_capacity(batch.len());
        let outcome = (|| -> rusqlite::Result<()> {
            let txn = self.conn.transaction()?;
            {
                // An upsert rewrites the row where it is. `INSERT OR REPLACE` deletes it and
                // inserts it again under a new rowid, which dirties the old leaf, the last
                // leaf, the key index and the freelist: several times the pages, each one
                // a 4 KiB frame appended to the WAL at every commit (the revision's row
                // below likewise).
                let mut upsert = txn.prepare_cached(
                    "INSERT INTO kv (key, rev, value) VALUES (?1, ?2, ?3) ON CONFLICT(key) DO UPDATE SET rev = excluded.rev, value = excluded.value",
                )?;
                let mut remove = txn.prepare_cached("DELETE FROM kv WHERE key = ?1")?;
                for Request { op, reply } in batch {
                    let key = op.key().to_string();
                    let current = match overlay.get(&key) {
                        Some(e) => e.clone(),
                        None => self.mirror.current(&key),
                    };
                    let result = match stage(op, current, next + 1) {
                        Ok((entry, event)) => {
                            next += 1;
                            match event.kind {
                                EventType::Deleted => {
                                    remove.execute(params![key])?;
                                    overlay.insert(key, None);
                                }
                                _ => {
                                    upsert.execute(params![key, next as i64, event.doc.raw().as_bytes()])?;
                                    overlay.insert(key, Some(Stored { rev: next, doc: event.doc.clone() }));
                                }
                            }
                            Ok((entry, Arc::new(event)))
                        }
                        Err(e) => Err(e),
                    };
                    staged.push(Staged { reply, result });
                }
            }
            if next != base {
                txn.prepare_cached(
                    "INSERT INTO meta (name, value) VALUES ('revision', ?1) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                )?
                .execute(params![next as i64])?;
            }
            txn.commit()
        })();
        self.metrics.duration.observe(started.elapsed().as_secs_f64());
        self.metrics.writes.observe(writes as f64);

        if let Err(e) = outcome {
            self.metrics.failures.inc();
            tracing::error!(error = %e, "store commit failed; the batch was rolled back");
            let msg = format!("the write could not be committed: {e}");
            for s in staged {
                let _ = s.reply.send(Err(StoreError::Backend(msg.clone())));
            }
            return;
        }

        // Publish before answering, so a client that watches from its own write's
        // revision never waits on an event still in flight.
        let events = staged.iter().filter_map(|s| s.result.as_ref().ok().map(|(_, ev)| ev.clone())).collect();
        self.mirror.apply(overlay, next, events);
        for s in staged {
            let _ = s.reply.send(s.result.map(|(entry, _)| entry));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn obj(name: &str) -> Value {
        json!({"metadata": {"name": name}})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_keeps_every_rule_of_the_store() {
        let dirs = std::sync::Mutex::new(Vec::new());
        crate::conformance::run(|| {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(&dir.path().join("store.db")).unwrap();
            dirs.lock().unwrap().push(dir);
            async move { store }
        })
        .await;
    }

    #[tokio::test]
    async fn writes_survive_reopen_and_revision_keeps_growing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            let a = s.write(WriteOp::Create { key: "k/a".into(), value: obj("a") }).await.unwrap();
            assert_eq!(a.rev, 1);
            assert_eq!(a.value["metadata"]["resourceVersion"], "1");
            s.write(WriteOp::Create { key: "k/b".into(), value: obj("b") }).await.unwrap();
            s.write(WriteOp::Delete { key: "k/b".into(), expected: None }).await.unwrap();
            s.write(WriteOp::Create { key: "k/c".into(), value: obj("c") }).await.unwrap();
            s.write(WriteOp::Update { key: "k/c".into(), value: obj("c2"), expected: 4 }).await.unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.revision(), 5);
        assert_eq!(s.get("k/a").unwrap().rev, 1);
        assert!(s.get("k/b").is_none());
        let c = s.get("k/c").unwrap();
        assert_eq!((c.rev, c.value["metadata"]["name"].as_str()), (5, Some("c2")), "an update is what survives");
        s.write(WriteOp::Delete { key: "k/c".into(), expected: None }).await.unwrap();
        drop(s);
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.revision(), 6, "a delete of the newest key must not roll the revision back");
        let d = s.write(WriteOp::Create { key: "k/d".into(), value: obj("d") }).await.unwrap();
        assert_eq!(d.rev, 7);
    }

    #[tokio::test]
    async fn commits_are_measured_per_batch_and_concurrent_writes_share_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("store.db")).unwrap();
        let registry = prometheus::Registry::new();
        s.register_metrics(&registry).unwrap();
        s.write(WriteOp::Create { key: "k/a".into(), value: obj("a") }).await.unwrap();
        // A refused write is still part of a commit (its batch's transaction runs).
        assert!(s.write(WriteOp::Create { key: "k/a".into(), value: obj("a") }).await.is_err());
        let many = (0..64).map(|i| s.write(WriteOp::Create { key: format!("k/m{i}"), value: obj("m") }));
        for r in futures::future::join_all(many).await {
            r.unwrap();
        }
        let families = registry.gather();
        let histogram = |name: &str| {
            let f = families.iter().find(|f| f.name() == name).unwrap_or_else(|| panic!("{name} is not registered"));
            let h = f.get_metric()[0].get_histogram();
            (h.get_sample_count(), h.get_sample_sum())
        };
        let (commits, writes) = histogram("flotilla_store_commit_writes");
        assert_eq!(writes, 66.0, "every write is counted in the batch it committed with");
        assert!((3..66).contains(&commits), "64 writes queued at once share commits: {commits} commits");
        assert_eq!(histogram("flotilla_store_commit_duration_seconds").0, commits);
    }

    #[tokio::test]
    async fn an_update_rewrites_few_pages() {
        // Each commit appends every page it dirtied to the WAL as a frame: a 24-byte
        // header and the 4 KiB page. An update in place dirties the row's leaf and the
        // revision's leaf; `INSERT OR REPLACE` of both dirtied four times as many (400).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let wal = path.with_extension("db-wal");
        let s = SqliteStore::open(&path).unwrap();
        let big = |i: usize| json!({"metadata": {"name": format!("o{i}")}, "data": "x".repeat(3000)});
        let mut revs = Vec::new();
        for i in 0..100 {
            revs.push(s.write(WriteOp::Create { key: format!("k/{i:03}"), value: big(i) }).await.unwrap().rev);
        }
        let before = std::fs::metadata(&wal).unwrap().len();
        for i in (0..100).step_by(2) {
            s.write(WriteOp::Update { key: format!("k/{i:03}"), value: big(i), expected: revs[i] }).await.unwrap();
        }
        let frames = (std::fs::metadata(&wal).unwrap().len() - before) / (4096 + 24);
        assert!(frames <= 50 * 2, "50 updates, each its own commit, appended {frames} WAL frames");
    }

    #[tokio::test]
    async fn a_second_server_on_the_same_store_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let first = SqliteStore::open(&path).unwrap();
        first.write(WriteOp::Create { key: "k/a".into(), value: obj("a") }).await.unwrap();
        let Err(err) = SqliteStore::open(&path) else { panic!("the file is held by the first store") };
        assert!(err.to_string().contains("is in use by another process: stop the other server"), "{err}");
        drop(first);
        let again = SqliteStore::open(&path).expect("the file is free once the first store is closed");
        assert_eq!(again.get("k/a").map(|e| e.rev), Some(1));
    }
}
