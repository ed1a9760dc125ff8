//! A local etcd cluster of one or more members, run from the `etcd` binary on PATH:
//! what `flotilla up --ha` starts, and what the tests of the etcd store run against.
//!
//! Each member gets its own data dir under one directory, listens on loopback, and
//! logs to `<dir>/<name>.log`. A member can be killed (SIGKILL, as a crash) and
//! started again on the same data, which is how the drills take etcd members away.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to get the etcd binary, for the message when it is missing.
pub const INSTALL_HINT: &str = "install it with `sudo apt-get install etcd-server` (Debian, Ubuntu), or put an etcd 3.4 or later on PATH";

/// How long a member may take to answer after it starts.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// One member: its name, its two loopback ports, and its process while it runs.
#[derive(Debug)]
pub struct Member {
    /// `m0`, `m1`, ...
    pub name: String,
    /// The port clients use.
    pub client_port: u16,
    /// The port the other members use.
    pub peer_port: u16,
    child: Option<Child>,
}

impl Member {
    /// `http://127.0.0.1:<client_port>`.
    pub fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// Whether the member's process is running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

/// A running local etcd cluster; its members are killed when it is dropped.
#[derive(Debug)]
pub struct LocalEtcd {
    dir: PathBuf,
    binary: PathBuf,
    /// The members, in order.
    pub members: Vec<Member>,
}

/// The etcd binary on PATH, or what to do about its absence.
pub fn find_binary() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("no etcd binary on PATH: {INSTALL_HINT}"))
}

/// For tests: whether there is an etcd binary to test with. Without one a test says
/// so on stderr and skips; with FLOTILLA_REQUIRE_ETCD set, as CI sets it, it fails.
pub fn available_for_test() -> bool {
    match find_binary() {
        Ok(_) => true,
        Err(why) if std::env::var_os("FLOTILLA_REQUIRE_ETCD").is_some() => panic!("FLOTILLA_REQUIRE_ETCD is set, but {why}"),
        Err(why) => {
            eprintln!("skipping: {why}");
            false
        }
    }
}

/// Loopback ports nobody listens on now, for tests: (client, peer) per member.
pub fn free_ports(members: usize) -> std::io::Result<Vec<(u16, u16)>> {
    // Hold every listener until all ports are chosen, so no two are the same.
    let listeners = (0..members * 2).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<Vec<_>>>()?;
    let ports = listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<Vec<_>>>()?;
    Ok(ports.chunks(2).map(|p| (p[0], p[1])).collect())
}

impl LocalEtcd {
    /// For tests: a cluster of `members` in `dir` on free ports, or `None` (and a note
    /// on stderr) when there is no etcd binary. When FLOTILLA_REQUIRE_ETCD is set, as
    /// CI sets it, a missing binary fails the test instead.
    pub fn for_test(dir: &Path, members: usize) -> Option<Self> {
        if !available_for_test() {
            return None;
        }
        let ports = free_ports(members).unwrap_or_else(|e| panic!("choosing ports for etcd: {e}"));
        Some(Self::start(dir, &ports).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The cluster of one member per port pair in `dir`, none of them started by this
    /// process: to start or restart members one at a time.
    pub fn attach(dir: &Path, ports: &[(u16, u16)]) -> Result<Self, String> {
        let binary = find_binary()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, &(client_port, peer_port))| Member { name: format!("m{i}"), client_port, peer_port, child: None })
            .collect();
        Ok(Self { dir: dir.to_path_buf(), binary, members })
    }

    /// Starts (or restarts, on the data already in `dir`) one member per port pair and
    /// waits until every one answers.
    pub fn start(dir: &Path, ports: &[(u16, u16)]) -> Result<Self, String> {
        let mut cluster = Self::attach(dir, ports)?;
        for i in 0..cluster.members.len() {
            cluster.spawn(i)?;
        }
        for i in 0..cluster.members.len() {
            cluster.wait_serving(i)?;
        }
        Ok(cluster)
    }

    /// The client URLs of every member, for `--etcd-servers`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::client_url).collect()
    }

    /// The pid file of member `i`, written when this process starts it.
    pub fn pid_file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}.pid", self.members[i].name))
    }

    /// Lets the members this process started run on after it is dropped.
    pub fn detach(mut self) {
        for m in &mut self.members {
            m.child = None;
        }
    }

    /// Starts member `i`, which must not be running, and waits until it answers.
    pub fn start_member(&mut self, i: usize) -> Result<(), String> {
        self.spawn(i)?;
        self.wait_serving(i)
    }

    /// The log file of member `i`.
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}.log", self.members[i].name))
    }

    /// Kills member `i` with SIGKILL, as a crash, and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data and waits until it answers.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_serving(i)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let cluster: Vec<String> = self.members.iter().map(|m| format!("{}={}", m.name, m.peer_url())).collect();
        let member = &self.members[i];
        let data = self.dir.join(format!("{}.etcd", member.name));
        // A data dir that exists already knows its cluster; the flags below only
        // matter the first time.
        let state = if data.exists() { "existing" } else { "new" };
        let log_path = self.dir.join(format!("{}.log", member.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&self.binary)
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &member.client_url(), "--advertise-client-urls", &member.client_url()])
            .args(["--listen-peer-urls", &member.peer_url(), "--initial-advertise-peer-urls", &member.peer_url()])
            .args(["--initial-cluster", &cluster.join(","), "--initial-cluster-state", state])
            .args(["--initial-cluster-token", "flotilla-local", "--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            // Its own process group: a Ctrl-C in the terminal reaches the process that
            // runs the cluster, which stops the members in order.
            .process_group(0)
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.binary.display()))?;
        let pid_file = self.pid_file(i);
        std::fs::write(&pid_file, format!("{}\n", child.id())).map_err(|e| format!("writing {}: {e}", pid_file.display()))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Waits until member `i` accepts connections on its client port (a member of a
    /// cluster that has not elected a leader yet still accepts them).
    fn wait_serving(&mut self, i: usize) -> Result<(), String> {
        let started = Instant::now();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port));
        loop {
            if !self.members[i].running() {
                return Err(format!("etcd member {} exited at start; see {}", self.members[i].name, self.log(i).display()));
            }
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if started.elapsed() > START_DEADLINE {
                return Err(format!(
                    "etcd member {} did not listen on {addr} within {START_DEADLINE:?}; see {}",
                    self.members[i].name,
                    self.log(i).display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A TCP relay in front of one etcd member that passes requests on at once and hands
/// etcd's answers back only `delay` after they arrive, in order. A replica connected
/// through it sees every change late, as one behind a slow link or a busy host would:
/// what the tests of reading one's writes across replicas need to make the lag
/// certain instead of a matter of luck. It can also be cut, and restored, to break a
/// replica's connection to etcd while etcd itself goes on.
#[derive(Debug)]
pub struct SlowLink {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl SlowLink {
    /// Starts relaying from a loopback port to the member at `upstream`, a client URL
    /// such as `http://127.0.0.1:2379` (plain TCP: TLS passes through untouched).
    pub fn start(upstream: &str, delay: Duration) -> std::io::Result<Self> {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};

        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let upstream = upstream.split_once("://").map_or(upstream, |(_, rest)| rest).trim_end_matches('/').to_string();
        let (stopped, is_cut, conns) = (stop.clone(), cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                // While cut, a connection is closed as soon as it is made.
                let Ok(client) = client else { continue };
                if is_cut.load(Ordering::Acquire) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (client.try_clone(), server.try_clone(), client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                conns.lock().unwrap_or_else(|e| e.into_inner()).extend([c3, s3]);
                std::thread::spawn(move || {
                    let (mut from, mut to) = (c2, s2);
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
                let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
                std::thread::spawn(move || {
                    use std::io::Read;
                    let mut server = server;
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = server.read(&mut buf) {
                        if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                });
                std::thread::spawn(move || {
                    use std::io::Write;
                    let mut client = client;
                    for (due, bytes) in rx {
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                        if client.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                    let _ = client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Ok(Self { addr, stop, cut, open })
    }

    /// Closes every connection through the link, and every new one until [`Self::restore`].
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Release);
        for conn in self.open.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::Release);
    }

    /// The relay's URL, `http://127.0.0.1:<port>`, to give in place of the member's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.cut();
        // Wake the accepting thread so that it sees the flag and ends.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}
