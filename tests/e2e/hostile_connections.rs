//! Clients that connect and never send a request, more of them than the usual limit of
//! 1,024 open files, do not starve the API: the server raises its soft limit on open
//! files, closes the oldest of the connections that have not sent a request when too
//! many wait, and closes the others at its handshake and first-request deadlines.
//! kubectl keeps answering throughout, and a watch opened before keeps its events.
//! The server is held to 1,024 open files during the flood, as on a system where the
//! limit cannot be raised, where 1,009 such connections used to stop the API.

use crate::common;

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Plain TCP connections that never start a TLS handshake.
const IDLE_TCP: usize = 1_100;
/// Connections that complete the TLS handshake and never send a request.
const IDLE_TLS: usize = 50;
/// How long kubectl may take to answer during the flood.
const PROMPT: Duration = Duration::from_secs(5);
/// The server's pending-connection bound (controlplane::listener::MAX_PENDING).
const MAX_PENDING: u64 = 512;
/// The server's handshake and first-request deadlines (10 s each), and a margin.
const CLOSED_BY: Duration = Duration::from_secs(30);

#[test]
fn idle_connections_do_not_starve_the_api_and_are_closed_by_the_server() {
    // The server starts with a soft limit below its hard limit, and the test itself needs
    // a descriptor per connection it opens.
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= 2_048,
        "this test opens {} connections: it needs a hard limit on open files of 2,048 or more, not {hard}",
        IDLE_TCP + IDLE_TLS
    );
    setrlimit(Resource::RLIMIT_NOFILE, soft.min(1_024), hard).unwrap();
    let f = Flotilla::start();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let pid = server_pid(&f);
    assert_eq!(open_files_limit(pid), (hard, hard), "the server raises its soft limit on open files to the hard limit");

    // From here on, as on a system whose hard limit is 1,024.
    let o = Command::new("prlimit").args(["--pid", &pid.to_string(), "--nofile=1024:1024"]).output().expect("run prlimit (util-linux)");
    assert!(o.status.success(), "prlimit: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(open_files_limit(pid), (1_024, 1_024));

    // A watch, open before the flood.
    let watch_out = f.dir.path().join("watch.out");
    let mut watch = f.kubectl_background(&["get", "configmaps", "-w", "-o", "name"], &watch_out);
    let watched = |name: &str| {
        let seen = std::fs::read_to_string(&watch_out).unwrap_or_default();
        if seen.contains(&format!("configmap/{name}")) {
            Ok(())
        } else {
            Err(format!("watch output: {seen:?}"))
        }
    };
    f.k(&["create", "configmap", "before-flood"]);
    wait_for("the watch to see before-flood", PROMPT, || watched("before-flood"));

    // The flood: plain TCP first, then TLS, so the TLS ones are among the newest and
    // stay until the first-request deadline.
    let addr = f.url.trim_start_matches("https://").to_string();
    let flood_started = Instant::now();
    let mut idle: Vec<Idle> = (0..IDLE_TCP)
        .map(|i| Idle::new(TcpStream::connect(&addr).unwrap_or_else(|e| panic!("idle TCP connection {i}: {e}")), false))
        .collect();
    let tls = tls_client(&f);
    for i in 0..IDLE_TLS {
        idle.push(Idle::new(tls_handshake(&addr, &tls).unwrap_or_else(|e| panic!("TLS connection {i}: {e}")), true));
    }
    let flooded = Instant::now();
    let flood_files = open_files(pid);
    println!(
        "opened {IDLE_TCP} idle TCP and {IDLE_TLS} idle TLS connections in {:?}; the server has {flood_files} files open",
        flooded - flood_started
    );
    // Meanwhile, a thread notes when the server closes each.
    let closing = std::thread::spawn(move || {
        let deadline = Instant::now() + CLOSED_BY;
        loop {
            let mut open = 0;
            for c in &mut idle {
                open += usize::from(!c.closed_by_server());
            }
            if open == 0 || Instant::now() > deadline {
                return idle;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });

    // The API answers at once, and the watch goes on.
    let timed = |what: &str, args: &[&str], expect: &str| {
        let t = Instant::now();
        let o = f.kubectl(args);
        let took = t.elapsed();
        println!("during the flood: {what} answered in {took:?}");
        assert!(o.ok && o.stdout.contains(expect), "{what} during the flood: {o:?}\nserver log:\n{}", tail(&f.log()));
        assert!(took < PROMPT, "{what} took {took:?} during the flood");
    };
    timed("kubectl get ns", &["get", "ns"], "default");
    timed("GET /api/v1/namespaces/default", &["get", "--raw", "/api/v1/namespaces/default"], r#""name":"default""#);
    f.k(&["create", "configmap", "during-flood"]);
    wait_for("the watch to see during-flood", PROMPT, || watched("during-flood"));
    let during = metrics(&f);
    println!("during the flood: {during:?}");
    assert!(during.pending <= MAX_PENDING, "{during:?}");
    assert!(during.too_many_pending >= (IDLE_TCP + IDLE_TLS) as u64 - MAX_PENDING, "{during:?}");

    // The server closed every idle connection: the oldest when newer ones needed room,
    // the others at the handshake deadline (TCP) or the first-request deadline (TLS).
    let idle = closing.join().unwrap();
    let open = idle.iter().filter(|c| c.closed.is_none()).count();
    assert_eq!(open, 0, "{open} of {} idle connections still open {CLOSED_BY:?} after the flood", idle.len());
    let lived = |tls: bool| -> Vec<f64> {
        let mut secs: Vec<f64> = idle.iter().filter(|c| c.tls == tls).map(|c| (c.closed.unwrap() - c.opened).as_secs_f64()).collect();
        secs.sort_by(f64::total_cmp);
        secs
    };
    let (tcp, tls) = (lived(false), lived(true));
    let made_room = tcp.iter().filter(|s| **s < 9.0).count();
    println!(
        "TCP: {made_room} closed within {:.1}s to make room, {} after {:.1}s to {:.1}s; TLS: closed after {:.1}s to {:.1}s",
        tcp[made_room.saturating_sub(1)],
        tcp.len() - made_room,
        tcp.get(made_room).copied().unwrap_or(f64::NAN),
        tcp.last().unwrap(),
        tls[0],
        tls.last().unwrap()
    );
    // The TLS connections were the newest: closed at their deadline, 10 s after the handshake.
    assert!(tls[0] >= 9.0 && *tls.last().unwrap() < 20.0, "TLS connections lived {tls:?} s after their handshake");
    assert!(made_room as u64 >= (IDLE_TCP + IDLE_TLS) as u64 - MAX_PENDING, "only {made_room} closed early");
    assert!(tcp[made_room..].iter().all(|s| *s < 20.0), "TCP connections lived {tcp:?} s");

    let after = metrics(&f);
    println!("after the flood: {after:?}");
    assert!(after.header_timeout >= IDLE_TLS as u64, "{after:?}");
    assert!(after.handshake_timeout >= 1, "{after:?}");
    assert!(after.handshake_timeout + after.header_timeout + after.too_many_pending >= (IDLE_TCP + IDLE_TLS) as u64, "{after:?}");
    wait_for("no pending connections", PROMPT, || {
        let m = metrics(&f);
        if m.pending == 0 {
            Ok(())
        } else {
            Err(format!("{m:?}"))
        }
    });

    // The watch outlived the deadlines that closed the idle connections.
    f.k(&["create", "configmap", "after-flood"]);
    wait_for("the watch to see after-flood", PROMPT, || watched("after-flood"));
    assert!(watch.try_wait().unwrap().is_none(), "the watch ended: {}", std::fs::read_to_string(&watch_out).unwrap_or_default());
    let _ = watch.kill();
    let _ = watch.wait();
}

/// A connection of the flood: when it was opened (for TLS, when the handshake ended),
/// and when the server closed it.
struct Idle {
    tcp: TcpStream,
    tls: bool,
    opened: Instant,
    closed: Option<Instant>,
}

impl Idle {
    fn new(tcp: TcpStream, tls: bool) -> Self {
        tcp.set_nonblocking(true).unwrap();
        Self { tcp, tls, opened: Instant::now(), closed: None }
    }

    /// Whether the server has closed the connection (end of stream, or a reset); what it
    /// sent before (a TLS session ticket) is read and dropped.
    fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        while self.closed.is_none() {
            match self.tcp.read(&mut buf) {
                Ok(0) => self.closed = Some(Instant::now()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(_) => self.closed = Some(Instant::now()),
            }
        }
        true
    }
}

/// A TLS client that trusts the server's CA.
fn tls_client(f: &Flotilla) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(f.data_dir().join("ca.crt")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A connection that has completed the TLS handshake and sends nothing more.
fn tls_handshake(addr: &str, config: &Arc<rustls::ClientConfig>) -> std::io::Result<TcpStream> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(PROMPT))?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = rustls::ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)?;
    }
    while tls.wants_write() {
        tls.write_tls(&mut tcp)?;
    }
    Ok(tcp)
}

/// The pid of the `flotilla start` serving `f`'s data dir.
fn server_pid(f: &Flotilla) -> u32 {
    let dir = f.data_dir().to_str().unwrap().to_string();
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"flotilla")) && args.contains(&dir.as_bytes()) && args.contains(&b"start".as_slice())
        })
        .collect();
    assert_eq!(pids.len(), 1, "one flotilla start on {dir}: {pids:?}");
    pids[0]
}

/// (soft, hard) limit on open files of process `pid`.
fn open_files_limit(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_else(|| panic!("{limits}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].parse().unwrap(), fields[4].parse().unwrap())
}

/// How many files process `pid` has open.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or_default()
}

/// The server's connection metrics.
#[derive(Debug, Default)]
struct ConnectionMetrics {
    pending: u64,
    handshake_timeout: u64,
    header_timeout: u64,
    too_many_pending: u64,
}

fn metrics(f: &Flotilla) -> ConnectionMetrics {
    let text = f.raw("/metrics");
    assert!(text.ok, "GET /metrics: {text:?}");
    let value = |name: &str| -> u64 {
        let line = text.stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in /metrics"));
        line[name.len()..].trim().parse().unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    let rejected = |reason: &str| value(&format!(r#"flotilla_apiserver_connections_rejected_total{{reason="{reason}"}}"#));
    ConnectionMetrics {
        pending: value("flotilla_apiserver_connections_pending "),
        handshake_timeout: rejected("handshake_timeout"),
        header_timeout: rejected("header_timeout"),
        too_many_pending: rejected("too_many_pending"),
    }
}
