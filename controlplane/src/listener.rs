//! Accepting connections: the TLS handshake, then HTTP/2 or HTTP/1.1 served by hyper
//! with the API's router, and a graceful shutdown.
//!
//! A connection that has not sent a request yet is *pending*: it holds a file
//! descriptor and memory and has shown nothing, not even credentials, since there is no
//! request to check them on. Clients that connect and say nothing used to keep their
//! connections for ever, and 1,009 of them used up the usual 1,024 open files and
//! starved everyone. So pending connections are bounded in time, by a deadline for the
//! handshake and another for the first request, and in number: when
//! [`Limits::max_pending`] are pending, the oldest is closed to admit the newest. A real
//! client is then turned away only if that many connections arrive in the milliseconds
//! it takes to finish its handshake and send its request, however many idle ones are
//! open. A connection that has sent a request is no longer pending and neither bound
//! applies to it: long watches and the keep-alive connections of controllers and
//! kubectl stay open.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus::IntGauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::util::Oneshot;
use tower::ServiceExt;

use crate::metrics::{Metrics, HANDSHAKE_TIMED_OUT, HEADER_TIMED_OUT, TOO_MANY_PENDING};

/// How long a TLS handshake may take. Go's HTTP clients (kubectl, client-go) give up on
/// a handshake after 10 s (`http.DefaultTransport`'s `TLSHandshakeTimeout`), so a
/// slower one has no client waiting for it; over loopback or a LAN it takes
/// milliseconds. (kube-apiserver allows 32 s: Go bounds the handshake by the server's
/// `ReadHeaderTimeout`.)
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after the handshake the first request may take to arrive, headers
/// complete. Clients send their request as soon as the connection is up; Go's HTTP/2
/// server waits 10 s for the client's preface (`prefaceTimeout`). (kube-apiserver's
/// `ReadHeaderTimeout` is 32 s.)
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an HTTP/1.1 keep-alive connection may take to send the headers of its next
/// request. hyper starts this clock when the connection falls idle, so it is the idle
/// timeout as well: 90 s, kube-apiserver's `IdleTimeout`, which is also the idle timeout
/// of Go's clients, so that they usually close an idle connection before the server does.
pub const HTTP1_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How many connections may be pending at once: half the usual soft limit of 1,024
/// open files, so that where the limit cannot be raised the other half is left for the
/// store and the connections that have sent requests. Flotilla's real clients (kubectl,
/// a syncer per cluster) never open that many in the time of a handshake.
pub const MAX_PENDING: usize = 512;

/// Pause after a failed accept: out of file descriptors (EMFILE), the connection stays
/// in the listen backlog, and trying again at once would spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The bounds on pending connections, and the idle bound of HTTP/1.1 ones.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deadline of the TLS handshake, from the accept.
    pub handshake: Duration,
    /// Deadline of the first request, from the end of the handshake.
    pub first_request: Duration,
    /// Deadline of the next request's headers on an idle HTTP/1.1 connection.
    pub http1_idle: Duration,
    /// How many connections may be pending at once (at least 1).
    pub max_pending: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake: HANDSHAKE_TIMEOUT,
            first_request: FIRST_REQUEST_TIMEOUT,
            http1_idle: HTTP1_IDLE_TIMEOUT,
            max_pending: MAX_PENDING,
        }
    }
}

/// A listener being served; [`Serving::shutdown`] stops it.
pub struct Serving {
    draining: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<JoinSet<()>>,
}

impl Serving {
    /// Stops serving: the listener is closed, so new connections are refused; pending
    /// connections are closed; the others finish their in-flight requests and close, and
    /// those still open after `grace` are cut.
    pub async fn shutdown(self, grace: Duration) -> Result<(), JoinError> {
        let _ = self.draining.send(true);
        let mut connections = self.accepting.await?;
        let all_closed = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all_closed).await.is_err() {
            connections.shutdown().await;
        }
        Ok(())
    }
}

/// Serves `router` over TLS on `listener`, with `limits`, until [`Serving::shutdown`].
/// Dropping the [`Serving`] instead leaves it serving.
pub fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    limits: Limits,
    metrics: Arc<Metrics>,
) -> Serving {
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1().timer(TokioTimer::new()).header_read_timeout(limits.http1_idle);
    http.http2().timer(TokioTimer::new());
    let shared = Arc::new(Shared {
        tls: TlsAcceptor::from(tls),
        http,
        router,
        limits,
        pending: Pending::new(limits.max_pending, metrics.connections_pending.clone()),
        metrics,
    });
    let (draining, drain) = watch::channel(false);
    Serving { draining, accepting: tokio::spawn(accept(listener, shared, drain)) }
}

/// What every connection's task uses.
struct Shared {
    tls: TlsAcceptor,
    http: auto::Builder<TokioExecutor>,
    router: axum::Router,
    limits: Limits,
    pending: Arc<Pending>,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn reject(&self, reason: &str) {
        self.metrics.connections_rejected.with_label_values(&[reason]).inc();
    }
}

/// Resolves when shutdown begins; never if the [`Serving`] was dropped.
async fn draining(drain: &mut watch::Receiver<bool>) {
    if drain.wait_for(|draining| *draining).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Accepts connections until shutdown begins, and returns those still open.
async fn accept(listener: TcpListener, shared: Arc<Shared>, mut drain: watch::Receiver<bool>) -> JoinSet<()> {
    let mut connections = JoinSet::new();
    let mut failing = false;
    loop {
        let accepted = tokio::select! {
            biased;
            () = draining(&mut drain) => return connections,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, _)) => {
                failing = false;
                let (slot, evicted) = shared.pending.admit().await;
                connections.spawn(connection(tcp, slot, evicted, shared.clone(), drain.clone()));
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot accept connections; retrying");
                }
                failing = true;
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Serves one connection: pending until its first request, under the deadlines and
/// the eviction of [`Pending`]; then until it closes, or gracefully on shutdown.
async fn connection(tcp: TcpStream, slot: Slot, mut evicted: oneshot::Receiver<()>, shared: Arc<Shared>, mut drain: watch::Receiver<bool>) {
    let handshake = tokio::time::timeout(shared.limits.handshake, shared.tls.accept(tcp));
    let tls = tokio::select! {
        biased;
        () = draining(&mut drain) => return,
        _ = &mut evicted => return shared.reject(TOO_MANY_PENDING),
        done = handshake => match done {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                // Not TLS, or a client that does not trust the CA; at debug level, as
                // anyone can cause it.
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => return shared.reject(HANDSHAKE_TIMED_OUT),
        },
    };

    let (first_tx, first_request) = oneshot::channel();
    let service = Service { router: shared.router.clone(), first_request: Mutex::new(Some(first_tx)) };
    let conn = shared.http.serve_connection_with_upgrades(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        biased;
        _ = conn.as_mut() => return,
        () = draining(&mut drain) => return,
        _ = &mut evicted => return shared.reject(TOO_MANY_PENDING),
        _ = first_request => {}
        () = tokio::time::sleep(shared.limits.first_request) => return shared.reject(HEADER_TIMED_OUT),
    }
    drop(slot);

    tokio::select! {
        biased;
        _ = conn.as_mut() => return,
        () = draining(&mut drain) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// The router as hyper's service for one connection; tells the connection's task when
/// the first request arrives.
struct Service {
    router: axum::Router,
    first_request: Mutex<Option<oneshot::Sender<()>>>,
}

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Oneshot<axum::Router, Request<Incoming>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        if let Some(first) = self.first_request.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = first.send(());
        }
        self.router.clone().oneshot(req)
    }
}

/// The pending connections: a slot each, out of [`Limits::max_pending`], and, oldest
/// first, the sender that tells each to close.
struct Pending {
    slots: Arc<Semaphore>,
    waiting: Mutex<BTreeMap<u64, oneshot::Sender<()>>>,
    next_id: AtomicU64,
    gauge: IntGauge,
}

/// A pending connection's slot, given back when it sends its first request or closes.
struct Slot {
    pending: Arc<Pending>,
    id: u64,
    _permit: OwnedSemaphorePermit,
}

impl Pending {
    fn new(max: usize, gauge: IntGauge) -> Arc<Self> {
        Arc::new(Self { slots: Arc::new(Semaphore::new(max.max(1))), waiting: Mutex::default(), next_id: AtomicU64::new(0), gauge })
    }

    fn waiting(&self) -> MutexGuard<'_, BTreeMap<u64, oneshot::Sender<()>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection, and what tells it to close. When every slot is
    /// taken, the oldest pending connection is told to close, and its slot is the new
    /// one's once it has.
    async fn admit(self: &Arc<Self>) -> (Slot, oneshot::Receiver<()>) {
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if let Some((_, close)) = self.waiting().pop_first() {
                    let _ = close.send(());
                }
                self.slots.clone().acquire_owned().await.expect("the semaphore is never closed")
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (close, evicted) = oneshot::channel();
        let mut waiting = self.waiting();
        waiting.insert(id, close);
        self.gauge.set(waiting.len() as i64);
        (Slot { pending: self.clone(), id, _permit: permit }, evicted)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut waiting = self.pending.waiting();
        waiting.remove(&self.id);
        self.pending.gauge.set(waiting.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::net::SocketAddr;
    use std::time::Instant;

    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server of `limits` on loopback, with `/` answering "ok" and `/slow/<ms>`
    /// answering "done" after that many milliseconds (and notifying `slow_started`).
    struct Fixture {
        serving: Serving,
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        client: tokio_rustls::TlsConnector,
        slow_started: Arc<tokio::sync::Notify>,
        _dir: tempfile::TempDir,
    }

    async fn start(limits: Limits) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let material = crate::tls::load_or_create(dir.path(), "test-ca", &["127.0.0.1".into()]).unwrap();
        let slow_started = Arc::new(tokio::sync::Notify::new());
        let started = slow_started.clone();
        let router = axum::Router::new()
            .route(
                "/slow/{ms}",
                axum::routing::get(|axum::extract::Path(ms): axum::extract::Path<u64>| async move {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    "done"
                }),
            )
            .fallback(|| async { "ok" });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new(&prometheus::Registry::new()).unwrap());
        let serving = serve(listener, material.server_config().unwrap(), router, limits, metrics.clone());
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        roots.add(rustls::pki_types::CertificateDer::from_pem_slice(material.ca_pem.as_bytes()).unwrap()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Fixture { serving, addr, metrics, client: tokio_rustls::TlsConnector::from(Arc::new(client)), slow_started, _dir: dir }
    }

    type Tls = tokio_rustls::client::TlsStream<TcpStream>;

    impl Fixture {
        async fn tcp(&self) -> TcpStream {
            TcpStream::connect(self.addr).await.unwrap()
        }

        /// A connection that has completed the TLS handshake.
        async fn tls(&self) -> Tls {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            self.client.connect(name, self.tcp().await).await.unwrap()
        }

        fn rejected(&self, reason: &str) -> u64 {
            self.metrics.connections_rejected.with_label_values(&[reason]).get()
        }

        fn pending(&self) -> i64 {
            self.metrics.connections_pending.get()
        }
    }

    /// GETs `path` over HTTP/1.1 on a kept-alive connection; returns the body.
    async fn get(tls: &mut Tls, path: &str) -> std::io::Result<String> {
        tls.write_all(format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").as_bytes()).await?;
        let mut buf = Vec::new();
        loop {
            let mut chunk = [0u8; 1024];
            let n = tls.read(&mut chunk).await?;
            if n == 0 {
                return Err(ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head.lines().find_map(|l| l.strip_prefix("content-length: ")).map(|l| l.parse::<usize>().unwrap());
                if length.is_some_and(|length| body.len() >= length) {
                    return Ok(body.to_string());
                }
            }
        }
    }

    /// How long until the server closes `conn`, which sends nothing; panics after 5 s.
    async fn closed_after(conn: &mut (impl AsyncRead + Unpin), since: Instant) -> Duration {
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout(Duration::from_secs(5), async { while conn.read(&mut buf).await.is_ok_and(|n| n > 0) {} });
        read.await.expect("the server closes the connection within 5s");
        since.elapsed()
    }

    /// Whether `conn` is still open after `wait`.
    async fn open_after(conn: &mut (impl AsyncRead + Unpin), wait: Duration) -> bool {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(wait, conn.read(&mut buf)).await.is_err()
    }

    const SHORT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn silent_connections_are_closed_at_their_deadlines() {
        let f = start(Limits { handshake: SHORT, first_request: SHORT, ..Limits::default() }).await;
        let t = Instant::now();
        let mut tcp = f.tcp().await;
        let mut tls = f.tls().await;
        let handshaken = Instant::now();
        let tcp_closed = closed_after(&mut tcp, t).await;
        let tls_closed = closed_after(&mut tls, handshaken).await;
        assert!(tcp_closed >= SHORT - Duration::from_millis(50), "no handshake: closed after {tcp_closed:?}");
        assert!(tls_closed >= SHORT - Duration::from_millis(50), "no request: closed after {tls_closed:?}");
        assert_eq!((f.rejected(HANDSHAKE_TIMED_OUT), f.rejected(HEADER_TIMED_OUT), f.rejected(TOO_MANY_PENDING)), (1, 1, 0));
        assert_eq!(f.pending(), 0);
    }

    #[tokio::test]
    async fn the_oldest_pending_connection_makes_room_and_answered_ones_stay() {
        let f = start(Limits { handshake: Duration::from_secs(30), first_request: SHORT, max_pending: 2, ..Limits::default() }).await;
        let mut answered = f.tls().await;
        assert_eq!(get(&mut answered, "/").await.unwrap(), "ok");

        let t = Instant::now();
        let mut oldest = f.tcp().await;
        let mut second = f.tcp().await;
        let mut newest = f.tcp().await;
        let evicted = closed_after(&mut oldest, t).await;
        assert!(evicted < Duration::from_secs(2), "the oldest was closed after {evicted:?}, not at once");
        assert!(open_after(&mut second, SHORT * 2).await && open_after(&mut newest, Duration::ZERO).await, "the others stay");
        assert_eq!((f.rejected(TOO_MANY_PENDING), f.pending()), (1, 2));

        // Past the first-request deadline, the connection that sent a request still serves.
        assert_eq!(get(&mut answered, "/again").await.unwrap(), "ok");
        assert_eq!(f.rejected(HEADER_TIMED_OUT), 0);
    }

    #[tokio::test]
    async fn shutdown_lets_requests_finish_closes_the_rest_and_refuses_new_connections() {
        let f = start(Limits::default()).await;
        let mut busy = f.tls().await;
        assert_eq!(get(&mut busy, "/").await.unwrap(), "ok");
        let mut idle = f.tcp().await;
        let slow = tokio::spawn(async move { get(&mut busy, "/slow/300").await });
        f.slow_started.notified().await;

        let t = Instant::now();
        f.serving.shutdown(Duration::from_secs(5)).await.unwrap();
        assert_eq!(slow.await.unwrap().unwrap(), "done", "the request in flight finished");
        assert!(t.elapsed() < Duration::from_secs(2), "shutdown took {:?}", t.elapsed());
        closed_after(&mut idle, t).await;
        assert!(TcpStream::connect(f.addr).await.is_err(), "new connections are refused");
    }

    #[tokio::test]
    async fn shutdown_cuts_requests_that_outlast_the_grace() {
        let f = start(Limits::default()).await;
        let mut busy = f.tls().await;
        let slow = tokio::spawn(async move { get(&mut busy, "/slow/30000").await });
        f.slow_started.notified().await;
        let t = Instant::now();
        f.serving.shutdown(SHORT).await.unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "shutdown took {:?}", t.elapsed());
        assert!(slow.await.unwrap().is_err(), "the request was cut");
    }
}
