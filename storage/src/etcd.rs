//! The distributed store: etcd, with the same in-memory mirror as SQLite.
//!
//! Every object lives in etcd under `<prefix>/data/<key>`, as JSON without its
//! `resourceVersion`: the revision is etcd's own (the key's `mod_revision`), which is
//! what kube-apiserver uses too. A create is a transaction on `create_revision == 0`,
//! an update or a delete a compare-and-swap on `mod_revision`, and a write is answered
//! only after etcd has committed it and this replica's mirror has taken it in, so a
//! client reads its own writes from whichever replica answered it.
//!
//! Each replica keeps the whole data set in its [`Mirror`], loaded by a range read at
//! one revision and then fed by one etcd watch over the prefix. Every read and every
//! watch of the API is served from there, never by its own etcd request: a thousand
//! watchers cost etcd one watch per replica. Writes by other replicas reach the mirror
//! through the same watch, in revision order.
//!
//! When the watch breaks it is resumed from the last revision taken in. If etcd has
//! compacted past that revision in the meantime, the data set is read again, and the
//! open watches end with `Expired` so that their clients relist.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType as EtcdEventType, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchOptions,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::Value;
use tokio::sync::watch;

use super::mirror::{Index, Mirror, Stored};
use super::window::WindowLimits;
use super::{stamp, Doc, Entry, Event, EventType, Range, Revision, Store, StoreError, WatchStream, WriteOp};

/// kube-apiserver's default `--etcd-compaction-interval`.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// How long a request to etcd may take before it is answered as a timeout. etcd
/// itself gives up on a proposal after about 7 s without quorum; a client should hear
/// sooner that its write did not go through.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Keys read per request while loading the data set.
const LOAD_PAGE: i64 = 1_000;

/// Client certificates for etcd's TLS (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`).
#[derive(Debug, Clone, Default)]
pub struct EtcdTls {
    /// The CA that signed etcd's serving certificate.
    pub ca: Option<PathBuf>,
    /// This client's certificate.
    pub cert: Option<PathBuf>,
    /// Its key.
    pub key: Option<PathBuf>,
}

/// Where the etcd store is and how it behaves.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members, `http://` or `https://`.
    pub endpoints: Vec<String>,
    /// The key prefix every key of this control plane lives under, such as `/flotilla`.
    pub prefix: String,
    /// TLS, for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// How often to compact etcd's history; `None` never compacts.
    pub compaction_interval: Option<Duration>,
    /// How long one request may take.
    pub request_timeout: Duration,
    /// The reach of the watch window.
    pub window: WindowLimits,
}

impl EtcdConfig {
    /// A configuration with the defaults for everything but the endpoints.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: "/flotilla".into(),
            tls: None,
            compaction_interval: Some(DEFAULT_COMPACTION_INTERVAL),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            window: WindowLimits::CONTROL_PLANE,
        }
    }

    fn base(&self) -> String {
        format!("{}/", self.prefix.trim_end_matches('/'))
    }
}

/// Whether this replica's view of etcd is current, for `/readyz`.
#[derive(Debug, Default)]
struct Health {
    watching: AtomicBool,
    problem: Mutex<Option<String>>,
}

impl Health {
    fn ok(&self) {
        self.watching.store(true, Ordering::Release);
        *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn failed(&self, why: String) {
        self.watching.store(false, Ordering::Release);
        *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }
}

/// The etcd-backed [`Store`].
pub struct EtcdStore {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::AbortHandle>,
}

/// What the store's requests need, shared with the futures of its writes.
struct Shared {
    client: Client,
    /// `<prefix>/data/`: every object key is this plus the store key.
    data: String,
    /// `<prefix>/meta/`: keys of the control plane's own (see [`EtcdStore::meta_key`]).
    meta: String,
    mirror: Arc<Mirror>,
    /// The revision the mirror has taken in everything up to.
    seen: watch::Receiver<Revision>,
    health: Arc<Health>,
    timeout: Duration,
    endpoints: String,
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl EtcdStore {
    /// Connects, loads the data set under the prefix, and starts following it.
    pub async fn connect(config: EtcdConfig) -> Result<Arc<Self>, StoreError> {
        let endpoints = config.endpoints.join(",");
        if config.endpoints.is_empty() {
            return Err(StoreError::Backend("no etcd endpoints were given".into()));
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            // Without a leader, etcd fails a request at once instead of holding it, and
            // ends the watch, which is how this replica learns that etcd lost quorum.
            .with_require_leader(true);
        if let Some(tls) = &config.tls {
            options = options.with_tls(tls_options(tls)?);
        }
        let unreachable = |e: String| {
            StoreError::Unavailable(format!(
                "etcd at {endpoints} did not answer: {e}; check that etcd is running there and that --etcd-servers names it"
            ))
        };
        let client = tokio::time::timeout(config.request_timeout, Client::connect(&config.endpoints, Some(options)))
            .await
            .map_err(|_| unreachable(format!("no connection within {:?}", config.request_timeout)))?
            .map_err(|e| unreachable(e.to_string()))?;
        let base = config.base();
        let data = format!("{base}data/");
        let (index, rev) = tokio::time::timeout(config.request_timeout * 4, load(&client, &data))
            .await
            .map_err(|_| unreachable(format!("loading {data} took longer than {:?}", config.request_timeout * 4)))?
            .map_err(|e| unreachable(e.to_string()))?;
        tracing::info!(%endpoints, prefix = %base, keys = index.len(), revision = rev, "loaded the store from etcd");
        let mirror = Mirror::new(index, rev, config.window);
        let (seen_tx, seen) = watch::channel(rev);
        let health = Arc::new(Health::default());
        health.ok();
        let follow = tokio::spawn(
            Follower { client: client.clone(), data: data.clone(), mirror: mirror.clone(), seen: seen_tx, health: health.clone() }.run(),
        );
        let mut tasks = vec![follow.abort_handle()];
        if let Some(every) = config.compaction_interval {
            tasks.push(tokio::spawn(compact_every(client.clone(), every, mirror.clone())).abort_handle());
        }
        let shared =
            Shared { client, data, meta: format!("{base}meta/"), mirror, seen, health, timeout: config.request_timeout, endpoints };
        Ok(Arc::new(Self { shared: Arc::new(shared), tasks }))
    }

    /// The etcd key of a key of the control plane's own (not an object): shared
    /// settings that every replica reads, such as the credentials replicas share.
    pub fn meta_key(&self, name: &str) -> String {
        format!("{}{name}", self.shared.meta)
    }

    /// Reads a key of the control plane's own.
    pub async fn get_meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let resp = self.shared.txn("reading", Txn::new().and_then([TxnOp::get(self.meta_key(name), None)])).await?;
        Ok(first_get(&resp).and_then(|kvs| kvs.first().map(|kv| kv.value().to_vec())))
    }

    /// Creates a key of the control plane's own unless it exists, and returns what is
    /// stored under it afterwards: `value` when this call created it, or what another
    /// replica stored first.
    pub async fn create_meta(&self, name: &str, value: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        let key = self.meta_key(name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let resp = self.shared.txn("writing", txn).await?;
        if resp.succeeded() {
            return Ok(value);
        }
        first_get(&resp).and_then(|kvs| kvs.first().map(|kv| kv.value().to_vec())).ok_or(StoreError::NotFound(key))
    }
}

impl Shared {
    /// Runs one transaction within the request timeout, naming etcd in its errors.
    ///
    /// A request that could not even connect (its member is down, and the client's
    /// balancer picked it anyway) never reached etcd, so it is sent again, to another
    /// member, until the timeout: losing one member of three costs a client at most
    /// this retry. Anything that may have reached etcd is never sent twice, since a
    /// second try of a committed create would answer AlreadyExists to its own write.
    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, StoreError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(20);
        loop {
            let mut kv = self.client.kv_client();
            match tokio::time::timeout_at(deadline, kv.txn(txn.clone())).await {
                Ok(Ok(resp)) => return Ok(resp),
                Ok(Err(e)) if not_sent(&e) && tokio::time::Instant::now() + pause < deadline => {
                    tracing::debug!(error = %e, "an etcd member did not take the connection; sending the request again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Ok(Err(e)) => return Err(classify(&self.endpoints, what, e)),
                Err(_) => {
                    return Err(StoreError::Timeout(format!(
                        "etcd at {} did not answer {what} within {:?}; a write may or may not have been applied, so read the object again before retrying",
                        self.endpoints, self.timeout
                    )))
                }
            }
        }
    }

    /// Waits until the mirror has taken in revision `rev`, so that this replica
    /// serves its own writes at once. The write is committed either way: a mirror that
    /// is slow to follow costs freshness, and is reported, but never the write.
    async fn caught_up(&self, rev: Revision) {
        let mut seen = self.seen.clone();
        if tokio::time::timeout(self.timeout, seen.wait_for(|r| *r >= rev)).await.is_err() {
            tracing::warn!(
                revision = rev,
                mirrored = *seen.borrow(),
                "etcd committed a write that this replica's watch has not delivered yet"
            );
        }
    }

    /// A read barrier: asks etcd, in a linearizable read, which keys of `range` exist
    /// and at which revisions, then waits until the mirror holds at least that: every
    /// one of them at its revision or later, and none that etcd had already deleted.
    ///
    /// Keys only, so etcd sends no values; what is read is then served from the
    /// mirror. The wait is for the watch to deliver what etcd has committed, which
    /// takes milliseconds, but only a revision that touched `range` is waited for: the
    /// mirror's revision moves only with writes to the data, and etcd's may belong to
    /// anything else (a progress notification that would say so is not ordered with
    /// the events before etcd 3.4.25 and 3.5.8).
    async fn sync(&self, range: Range<'_>) -> Result<(), String> {
        if !self.health.watching.load(Ordering::Acquire) {
            return Err(format!(
                "etcd's watch is down, so this read may miss writes made through other replicas; serving revision {}",
                self.mirror.revision()
            ));
        }
        let (key, options) = match range {
            Range::Key(k) => (k, GetOptions::new().with_keys_only()),
            Range::Prefix(p) => (p, GetOptions::new().with_keys_only().with_prefix()),
        };
        let resp =
            self.txn("a read", Txn::new().and_then([TxnOp::get(format!("{}{key}", self.data), Some(options))])).await.map_err(|e| {
                format!("could not confirm with etcd that this read is current ({e}); serving revision {}", self.mirror.revision())
            })?;
        let at = header_rev(resp.header());
        let kvs = first_get(&resp).unwrap_or_default();
        let newest = kvs.iter().map(|kv| kv.mod_revision().max(0) as Revision).max().unwrap_or(0);
        let live: HashSet<&[u8]> = kvs.iter().filter_map(|kv| kv.key().strip_prefix(self.data.as_bytes())).collect();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut seen = self.seen.clone();
        loop {
            let rev = *seen.borrow_and_update();
            // Past `newest`, every key etcd had is here at its revision or later; below
            // `at`, a deletion etcd had made may still be on its way.
            if rev >= newest && (rev >= at || !self.mirror.holds_deleted(range, at, &live)) {
                return Ok(());
            }
            if !matches!(tokio::time::timeout_at(deadline, seen.changed()).await, Ok(Ok(()))) {
                return Err(format!(
                    "this replica's watch of etcd has not delivered revision {at} within {:?}; serving revision {rev}",
                    self.timeout
                ));
            }
        }
    }

    async fn write_op(self: Arc<Self>, op: WriteOp) -> Result<Entry, StoreError> {
        let key = format!("{}{}", self.data, op.key());
        match op {
            WriteOp::Create { key: name, value } => {
                let (value, bytes) = stored_form(&name, value)?;
                let txn =
                    Txn::new().when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)]).and_then([TxnOp::put(key, bytes, None)]);
                let resp = self.txn("a create", txn).await?;
                if !resp.succeeded() {
                    return Err(self.refused(StoreError::AlreadyExists(name), &resp).await);
                }
                Ok(self.written(&name, value, header_rev(resp.header())).await)
            }
            WriteOp::Update { key: name, value, expected } => {
                let (value, bytes) = stored_form(&name, value)?;
                let txn = Txn::new()
                    .when([
                        Compare::create_revision(key.clone(), CompareOp::Greater, 0),
                        Compare::mod_revision(key.clone(), CompareOp::Equal, expected as i64),
                    ])
                    .and_then([TxnOp::put(key.clone(), bytes, None)])
                    .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
                let resp = self.txn("an update", txn).await?;
                if !resp.succeeded() {
                    return Err(self.refused(refusal(name, expected, &resp), &resp).await);
                }
                Ok(self.written(&name, value, header_rev(resp.header())).await)
            }
            WriteOp::Delete { key: name, expected } => {
                let guard = match expected {
                    Some(rev) => Compare::mod_revision(key.clone(), CompareOp::Equal, rev as i64),
                    None => Compare::create_revision(key.clone(), CompareOp::Greater, 0),
                };
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Greater, 0), guard])
                    .and_then([TxnOp::delete(key.clone(), Some(DeleteOptions::new().with_prev_key()))])
                    .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
                let resp = self.txn("a delete", txn).await?;
                if !resp.succeeded() {
                    return Err(self.refused(refusal(name, expected.unwrap_or(0), &resp), &resp).await);
                }
                let rev = header_rev(resp.header());
                let prev = resp.op_responses().into_iter().find_map(|r| match r {
                    TxnOpResponse::Delete(d) => d.prev_kvs().first().cloned(),
                    _ => None,
                });
                let last = prev.and_then(|kv| parse(&kv).ok()).unwrap_or(Value::Null);
                self.caught_up(rev).await;
                let value = Arc::new(stamp(last, rev));
                Ok(Entry { rev, doc: Some(Doc::new(&value)), value })
            }
        }
    }

    /// A refused write's error, once the mirror has taken in what etcd had when it
    /// refused: a client told "exists" or "conflict" that reads again from this
    /// replica then sees the object that caused it.
    async fn refused(&self, err: StoreError, resp: &TxnResponse) -> StoreError {
        self.caught_up(header_rev(resp.header())).await;
        err
    }

    /// The entry a committed create or update stored, once the mirror has it.
    async fn written(&self, key: &str, value: Value, rev: Revision) -> Entry {
        self.caught_up(rev).await;
        match self.mirror.current(key) {
            // The mirror's document, so the response and the index share one copy.
            Some(stored) if stored.rev == rev => stored.entry(),
            _ => {
                let value = Arc::new(stamp(value, rev));
                Entry { rev, doc: Some(Doc::new(&value)), value }
            }
        }
    }
}

impl Store for EtcdStore {
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<Entry, StoreError>> {
        self.shared.clone().write_op(op).boxed()
    }

    fn get(&self, key: &str) -> Option<Entry> {
        self.shared.mirror.get(key)
    }

    fn get_doc(&self, key: &str) -> Option<Arc<Doc>> {
        self.shared.mirror.get_doc(key)
    }

    fn list(&self, prefix: &str, start_after: Option<&str>, limit: Option<usize>) -> (Vec<(String, Entry)>, Revision) {
        self.shared.mirror.list(prefix, start_after, limit)
    }

    fn list_docs(&self, prefix: &str) -> (Vec<(String, Arc<Doc>)>, Revision) {
        self.shared.mirror.list_docs(prefix)
    }

    fn list_at(&self, prefix: &str, start_after: Option<&str>, rev: Revision) -> Result<Vec<(String, Entry)>, StoreError> {
        self.shared.mirror.list_at(prefix, start_after, rev)
    }

    fn revision(&self) -> Revision {
        self.shared.mirror.revision()
    }

    fn watch(&self, prefix: &str, from: Revision) -> Result<WatchStream, StoreError> {
        self.shared.mirror.watch(prefix, from)
    }

    fn sync(&self, range: Range<'_>) -> BoxFuture<'static, Result<(), String>> {
        let shared = self.shared.clone();
        let (key, prefix) = match range {
            Range::Key(k) => (k.to_string(), false),
            Range::Prefix(p) => (p.to_string(), true),
        };
        async move { shared.sync(if prefix { Range::Prefix(&key) } else { Range::Key(&key) }).await }.boxed()
    }

    fn health(&self) -> Result<(), String> {
        let shared = &self.shared;
        if shared.health.watching.load(Ordering::Acquire) {
            return Ok(());
        }
        let problem = shared.health.problem.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Err(format!(
            "etcd at {} is unavailable: {}; serving the data as of revision {} until it is back",
            shared.endpoints,
            problem.unwrap_or_else(|| "the watch is down".into()),
            shared.mirror.revision()
        ))
    }
}

/// The form an object is stored in: the value without `resourceVersion`, which etcd's
/// revision provides, and its serialized bytes, within [`super::MAX_OBJECT_BYTES`].
fn stored_form(key: &str, mut value: Value) -> Result<(Value, Vec<u8>), StoreError> {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    let bytes = serde_json::to_vec(&value).map_err(|e| StoreError::Backend(format!("serializing {key}: {e}")))?;
    match bytes.len() {
        size if size > super::MAX_OBJECT_BYTES => Err(StoreError::TooLarge { key: key.to_string(), size }),
        _ => Ok((value, bytes)),
    }
}

fn parse(kv: &KeyValue) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(kv.value())
}

fn header_rev(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map(|h| h.revision()).unwrap_or(0).max(0) as Revision
}

fn first_get(resp: &TxnResponse) -> Option<Vec<KeyValue>> {
    resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
        _ => None,
    })
}

/// Why a compare-and-swap failed: the key is gone, or it moved on.
fn refusal(key: String, expected: Revision, resp: &TxnResponse) -> StoreError {
    match first_get(resp).and_then(|kvs| kvs.first().map(|kv| kv.mod_revision())) {
        Some(actual) => StoreError::Conflict { key, expected, actual: actual.max(0) as Revision },
        None => StoreError::NotFound(key),
    }
}

/// Whether a request failed before it reached etcd: its connection was never made.
fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic::Code::Unavailable && s.message().contains("connect error"),
        _ => false,
    }
}

/// Sorts an etcd failure of `what` by what the client may conclude: nothing was
/// written (retry), the outcome is unknown (read before retrying), or something else.
fn classify(endpoints: &str, what: &str, e: etcd_client::Error) -> StoreError {
    use etcd_client::Error as E;
    if not_sent(&e) {
        return StoreError::Unavailable(format!(
            "etcd at {endpoints} is unavailable: no member took the connection; nothing was written, retry when it is back"
        ));
    }
    let (refused, unknown) = match &e {
        // etcd refuses without a leader before it proposes anything.
        E::GRpcStatus(s) if s.message().contains("no leader") => (true, false),
        // A request cut off on its way (a member died, the connection broke), or one
        // that etcd gave up on after proposing it, may have been applied or not.
        E::GRpcStatus(s) => (
            false,
            matches!(s.code(), tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled)
                || ["timed out", "transport error", "leader changed", "connection"].iter().any(|m| s.message().contains(m)),
        ),
        E::TransportError(_) | E::IoError(_) => (false, true),
        _ => (false, false),
    };
    match (refused, unknown) {
        (true, _) => {
            StoreError::Unavailable(format!("etcd at {endpoints} is unavailable: {e}; nothing was written, retry when it is back"))
        }
        (_, true) => StoreError::Timeout(format!(
            "etcd at {endpoints} failed during {what} ({e}); it may or may not have been applied, so read the object again before retrying"
        )),
        _ => StoreError::Backend(format!("etcd at {endpoints}: {e}")),
    }
}

fn tls_options(tls: &EtcdTls) -> Result<etcd_client::TlsOptions, StoreError> {
    let read = |what: &str, p: &PathBuf| {
        std::fs::read(p).map_err(|e| StoreError::Backend(format!("reading the etcd {what} {}: {e}", p.display())))
    };
    let mut options = etcd_client::TlsOptions::new();
    if let Some(ca) = &tls.ca {
        options = options.ca_certificate(etcd_client::Certificate::from_pem(read("CA file", ca)?));
    }
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            options = options.identity(etcd_client::Identity::from_pem(read("certificate file", cert)?, read("key file", key)?));
        }
        (None, None) => {}
        _ => return Err(StoreError::Backend("--etcd-certfile and --etcd-keyfile go together: give both or neither".into())),
    }
    Ok(options)
}

/// Reads every key under `data` at one revision, a page at a time.
async fn load(client: &Client, data: &str) -> Result<(Index, Revision), etcd_client::Error> {
    let mut kv = client.kv_client();
    let end = prefix_end(data.as_bytes());
    let mut index = Index::new();
    let mut from = data.as_bytes().to_vec();
    let mut rev = 0i64;
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(LOAD_PAGE);
        if rev > 0 {
            options = options.with_revision(rev);
        }
        let resp = kv.get(from.clone(), Some(options)).await?;
        if rev == 0 {
            rev = header_rev(resp.header()) as i64;
        }
        for item in resp.kvs() {
            match decode(data, item, item.mod_revision().max(0) as Revision) {
                Some((key, doc)) => {
                    index.insert(key, Stored { rev: item.mod_revision() as Revision, doc });
                }
                None => continue,
            }
        }
        match (resp.more(), resp.kvs().last()) {
            (true, Some(last)) => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok((index, rev.max(0) as Revision)),
        }
    }
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The store key and the document of one etcd key-value, stamped with `rev`; `None`
/// (and an error in the log) for what is not a Flotilla object.
fn decode(data: &str, kv: &KeyValue, rev: Revision) -> Option<(String, Arc<Doc>)> {
    let key = match kv.key_str().ok().and_then(|k| k.strip_prefix(data)) {
        Some(k) => k.to_string(),
        None => {
            tracing::error!(key = %String::from_utf8_lossy(kv.key()), "skipping an etcd key that is not a store key");
            return None;
        }
    };
    match parse(kv) {
        Ok(value) => Some((key, Doc::new(&Arc::new(stamp(value, rev))))),
        Err(e) => {
            tracing::error!(%key, error = %e, "skipping a value in etcd that is not JSON");
            None
        }
    }
}

/// The task that keeps the mirror in step with etcd.
struct Follower {
    client: Client,
    data: String,
    mirror: Arc<Mirror>,
    seen: watch::Sender<Revision>,
    health: Arc<Health>,
}

/// Why following stopped.
enum Stopped {
    /// etcd no longer has the revision to resume from: read everything again.
    Compacted(Revision),
    /// The watch broke; resume after a pause.
    Broken(String),
}

impl Follower {
    async fn run(self) {
        let mut pause = Duration::from_millis(100);
        loop {
            match self.follow().await {
                Stopped::Compacted(at) => {
                    tracing::warn!(
                        revision = self.mirror.revision(),
                        compacted = at,
                        "etcd compacted past this replica's revision; reading the store again"
                    );
                    match load(&self.client, &self.data).await {
                        Ok((index, rev)) => {
                            self.mirror.replace(index, rev);
                            self.seen.send_replace(rev);
                        }
                        Err(e) => self.health.failed(format!("reading the store again: {e}")),
                    }
                }
                Stopped::Broken(why) => {
                    self.health.failed(why.clone());
                    tracing::warn!(error = %why, retry_in = ?pause, revision = self.mirror.revision(), "the etcd watch broke; resuming it");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
            pause = Duration::from_millis(100);
        }
    }

    /// Watches from the mirror's revision on and applies what arrives.
    async fn follow(&self) -> Stopped {
        let from = self.mirror.revision() + 1;
        let options = WatchOptions::new().with_prefix().with_start_revision(from as i64).with_progress_notify();
        let mut stream = match self.client.watch_client().watch(self.data.clone(), Some(options)).await {
            Ok(s) => s,
            Err(e) => return Stopped::Broken(e.to_string()),
        };
        loop {
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => return Stopped::Broken("etcd closed the watch".into()),
                Err(e) => return Stopped::Broken(e.to_string()),
            };
            if resp.compact_revision() > 0 {
                return Stopped::Compacted(resp.compact_revision() as Revision);
            }
            if resp.canceled() {
                return Stopped::Broken(format!("etcd cancelled the watch: {}", resp.cancel_reason()));
            }
            if resp.created() {
                self.health.ok();
            }
            let header = header_rev(resp.header());
            if resp.events().is_empty() {
                // A progress notification: everything up to the header's revision has
                // been delivered.
                if header > self.mirror.revision() && !resp.created() {
                    self.mirror.apply([], header, Vec::new());
                    self.seen.send_replace(header);
                }
                continue;
            }
            self.take(resp.events());
        }
    }

    /// Applies one response's events to the mirror, in order.
    fn take(&self, events: &[etcd_client::Event]) {
        let mut overlay: HashMap<String, Option<Stored>> = HashMap::new();
        let mut out = Vec::with_capacity(events.len());
        let mut last = self.mirror.revision();
        for ev in events {
            let Some(kv) = ev.kv() else { continue };
            let rev = kv.mod_revision().max(0) as Revision;
            last = last.max(rev);
            let Some(key) = kv.key_str().ok().and_then(|k| k.strip_prefix(self.data.as_str())).map(str::to_string) else {
                continue;
            };
            let prev = match overlay.get(&key) {
                Some(p) => p.clone(),
                None => self.mirror.current(&key),
            };
            match ev.event_type() {
                EtcdEventType::Put => {
                    let Some((_, doc)) = decode(&self.data, kv, rev) else { continue };
                    let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
                    overlay.insert(key.clone(), Some(Stored { rev, doc: doc.clone() }));
                    out.push(Arc::new(Event { rev, key, kind, doc, prev_doc: prev.map(|p| p.doc) }));
                }
                EtcdEventType::Delete => {
                    let Some(prev) = prev else { continue };
                    // The DELETED event carries the last value at the deletion revision.
                    let value = Arc::new(stamp((*prev.doc.value()).clone(), rev));
                    overlay.insert(key.clone(), None);
                    out.push(Arc::new(Event { rev, key, kind: EventType::Deleted, doc: Doc::new(&value), prev_doc: Some(prev.doc) }));
                }
            }
        }
        self.mirror.apply(overlay, last, out);
        self.health.ok();
        self.seen.send_replace(last);
    }
}

/// Compacts etcd's history every `every`, up to the revision seen one interval
/// earlier, so that at least one interval of history stays for a watch to resume
/// from (kube-apiserver's rule). Every replica does it; compacting a revision that
/// another replica already compacted is refused by etcd and harmless.
async fn compact_every(client: Client, every: Duration, mirror: Arc<Mirror>) {
    let mut kv = client.kv_client();
    let mut previous = mirror.revision();
    loop {
        tokio::time::sleep(every).await;
        let now = mirror.revision();
        if previous > 0 {
            match kv.compact(previous as i64, None).await {
                Ok(_) => tracing::info!(revision = previous, "compacted etcd's history"),
                Err(e) if e.to_string().contains("compacted") => tracing::debug!(revision = previous, "already compacted"),
                Err(e) => tracing::warn!(revision = previous, error = %e, "compacting etcd's history failed"),
            }
        }
        previous = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b"/f/data/"), b"/f/data0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0], "no key is past every key: the whole key space");
    }

    #[test]
    fn the_stored_form_drops_the_revision_and_keeps_the_size_limit() {
        let (value, bytes) = stored_form("k", serde_json::json!({"metadata": {"name": "a", "resourceVersion": "7"}})).unwrap();
        assert_eq!(value, serde_json::json!({"metadata": {"name": "a"}}));
        assert_eq!(bytes, br#"{"metadata":{"name":"a"}}"#.to_vec());
        let big = serde_json::json!({"data": "x".repeat(super::super::MAX_OBJECT_BYTES)});
        assert!(matches!(stored_form("k", big), Err(StoreError::TooLarge { .. })));
    }
}
