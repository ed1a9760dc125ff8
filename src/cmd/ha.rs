//! `flotilla up --ha`: the demo fleet on a highly available control plane, on one
//! machine. It runs:
//! - a local etcd cluster of three members, from the `etcd` binary on PATH, with its
//!   data in `<data-dir>/etcd/` and clients on ports 2379, 22379 and 32379 (others
//!   when those are taken);
//! - three replicas of the control plane (`flotilla start --etcd-servers ...`), each a
//!   process with its own data dir `<data-dir>/replicas/<n>/`, listening on the three
//!   ports after `--listen`'s;
//! - a TCP load balancer on `--listen` in front of them, as production would have one,
//!   which passes each connection (TLS and all) to the next replica that takes it: the
//!   replicas share one CA and one admin token, so `<data-dir>/admin.kubeconfig` works
//!   whichever replica answers;
//! - the simulated clusters, registered, and the workspace, as `flotilla up` does.
//!
//! `flotilla drill kill-replica N` and `kill-etcd N` take one of them away
//! (src/cmd/drill.rs). Running it again on the same data dir brings the same control
//! plane back.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use controlplane::store::local_etcd::{self, LocalEtcd};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::cli::UpArgs;

/// Replicas of the control plane.
pub const REPLICAS: usize = 3;

/// The client and peer ports the local etcd's members take when they are free, as
/// etcd's own examples use.
const ETCD_PORTS: [(u16, u16); 3] = [(2379, 2380), (22379, 22380), (32379, 32380)];

/// The local etcd's ports: those it had before, kept in `<data-dir>/etcd/ports` (a
/// member's data remembers its peers' addresses), or [`ETCD_PORTS`] when they are
/// free, or free ones (a system etcd may hold 2379).
pub fn etcd_ports(data_dir: &Path) -> anyhow::Result<Vec<(u16, u16)>> {
    let file = etcd_dir(data_dir).join("ports");
    if let Ok(kept) = std::fs::read(&file) {
        return serde_json::from_slice(&kept).with_context(|| format!("reading {}", file.display()));
    }
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let ports = match ETCD_PORTS.iter().all(|(c, p)| free(*c) && free(*p)) {
        true => ETCD_PORTS.to_vec(),
        false => local_etcd::free_ports(ETCD_PORTS.len())?,
    };
    controlplane::fsutil::create_private_dir(&etcd_dir(data_dir))?;
    controlplane::fsutil::write_private(&file, &serde_json::to_vec(&ports)?)?;
    Ok(ports)
}

/// How long a replica may take to say "ready".
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the local etcd keeps its members' data, logs and pid files.
pub fn etcd_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("etcd")
}

/// Replica `n`'s own data dir.
pub fn replica_dir(data_dir: &Path, n: usize) -> PathBuf {
    data_dir.join("replicas").join(n.to_string())
}

/// The etcd client URLs, for `--etcd-servers`.
fn etcd_servers(ports: &[(u16, u16)]) -> String {
    ports.iter().map(|(c, _)| format!("http://127.0.0.1:{c}")).collect::<Vec<_>>().join(",")
}

/// The pid of replica `n`'s process, if it runs.
pub fn replica_pid(data_dir: &Path, n: usize) -> Option<Pid> {
    let pid = std::fs::read_to_string(replica_dir(data_dir, n).join("pid")).ok()?.trim().parse::<i32>().ok()?;
    let pid = Pid::from_raw(pid);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    // A pid file left by a process that exited may name another process now.
    String::from_utf8_lossy(&cmdline).contains("--etcd-servers").then_some(pid).filter(|p| kill(*p, None).is_ok())
}

/// The pid of etcd member `n`, if it runs.
pub fn etcd_pid(data_dir: &Path, n: usize) -> Option<Pid> {
    let pid = std::fs::read_to_string(etcd_dir(data_dir).join(format!("m{n}.pid"))).ok()?.trim().parse::<i32>().ok()?;
    let pid = Pid::from_raw(pid);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    String::from_utf8_lossy(&cmdline).contains("--initial-cluster").then_some(pid).filter(|p| kill(*p, None).is_ok())
}

/// Starts replica `n` (again), detached from the terminal, with the arguments it was
/// first started with (kept in its data dir). Its output is piped, for [`wait_ready`],
/// or with `detached` goes to its log, so that it outlives the process that started it.
pub fn spawn_replica(data_dir: &Path, n: usize, detached: bool) -> anyhow::Result<Child> {
    let dir = replica_dir(data_dir, n);
    let args: Vec<String> = serde_json::from_slice(&std::fs::read(dir.join("command")).with_context(|| {
        format!("replica {n} has never run under {}: start the control plane with `flotilla up --ha`", data_dir.display())
    })?)?;
    let exe = std::env::current_exe().context("finding the flotilla binary")?;
    let logs = data_dir.join("logs");
    let log_path = logs.join(format!("replica-{n}.log"));
    let log = controlplane::fsutil::append_private(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    let stdout = if detached { Stdio::from(log.try_clone()?) } else { Stdio::piped() };
    let child = tokio::process::Command::new(exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting replica {n}"))?;
    if let Some(pid) = child.id() {
        controlplane::fsutil::write_private(&dir.join("pid"), format!("{pid}\n").as_bytes())?;
    }
    Ok(child)
}

/// Reads a replica's start-up lines until "ready".
pub async fn wait_ready(n: usize, child: &mut Child, data_dir: &Path) -> anyhow::Result<()> {
    let out = child.stdout.take().context("the replica's output is not piped")?;
    let mut lines = BufReader::new(out).lines();
    let read = async {
        while let Some(line) = lines.next_line().await? {
            if line == "ready" {
                return Ok::<_, std::io::Error>(true);
            }
        }
        Ok(false)
    };
    let log = data_dir.join("logs").join(format!("replica-{n}.log"));
    match tokio::time::timeout(START_TIMEOUT, read).await {
        Ok(Ok(true)) => {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            Ok(())
        }
        Ok(_) => anyhow::bail!("replica {n} exited while starting; see {}", log.display()),
        Err(_) => anyhow::bail!("replica {n} did not start within {START_TIMEOUT:?}; see {}", log.display()),
    }
}

/// Waits until replica `n`, started detached, prints "ready" to its log after `from`
/// bytes.
pub async fn wait_ready_in_log(n: usize, child: &mut Child, data_dir: &Path, from: u64) -> anyhow::Result<()> {
    let log = data_dir.join("logs").join(format!("replica-{n}.log"));
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        let text = std::fs::read(&log).unwrap_or_default();
        let new = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
        if new.lines().any(|l| l == "ready") {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            anyhow::bail!("replica {n} exited while starting ({status}); see {}", log.display());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("replica {n} did not start within {START_TIMEOUT:?}; see {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops every replica that runs: SIGTERM, then SIGKILL after `grace`.
fn stop_replicas(data_dir: &Path, grace: Duration) {
    let pids: Vec<Pid> = (0..REPLICAS).filter_map(|n| replica_pid(data_dir, n)).collect();
    for pid in &pids {
        let _ = kill(*pid, Signal::SIGTERM);
    }
    let deadline = std::time::Instant::now() + grace;
    for pid in pids {
        while kill(pid, None).is_ok() && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
            if std::time::Instant::now() > deadline {
                let _ = kill(pid, Signal::SIGKILL);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs until Ctrl-C or SIGTERM, then stops the clusters, the replicas and etcd.
pub async fn run(data_dir: &Path, args: UpArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.start.etcd_servers.is_empty(),
        "--ha runs its own local etcd; to run replicas on an etcd of yours, run `flotilla start --etcd-servers ...` for each"
    );
    anyhow::ensure!(args.start.listen.port() != 0, "--ha needs a fixed --listen port: the three replicas listen on the next three ports");
    local_etcd::find_binary().map_err(|e| anyhow::anyhow!("flotilla up --ha runs a local etcd cluster, but there is {e}"))?;
    controlplane::fsutil::create_private_dir(data_dir)?;
    let logs = data_dir.join("logs");
    controlplane::fsutil::create_private_dir(&logs)?;
    let dir = etcd_dir(data_dir);
    for n in 0..REPLICAS {
        if let Some(pid) = replica_pid(data_dir, n).or_else(|| etcd_pid(data_dir, n)) {
            anyhow::bail!(
                "pid {pid} still runs from an earlier `flotilla up --ha` on {} that did not stop cleanly; stop it with `kill {pid}` and try again",
                data_dir.display()
            );
        }
    }
    let etcd_ports = etcd_ports(data_dir)?;
    let clients: Vec<String> = etcd_ports.iter().map(|(c, _)| c.to_string()).collect();
    println!("starting etcd: 3 members on ports {} (data and logs: {})", clients.join(", "), dir.display());
    let etcd = tokio::task::spawn_blocking({
        let (dir, ports) = (dir.clone(), etcd_ports.clone());
        move || LocalEtcd::start(&dir, &ports)
    })
    .await?
    .map_err(anyhow::Error::msg)?;

    let listen = args.start.listen;
    let ports: Vec<u16> = (1..=REPLICAS as u16).map(|i| listen.port() + i).collect();
    let mut children = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        let dir = replica_dir(data_dir, n);
        controlplane::fsutil::create_private_dir(&dir)?;
        let mut command: Vec<String> = vec!["--data-dir".into(), dir.display().to_string(), "start".into()];
        command.extend(["--listen".into(), format!("{}:{port}", listen.ip()), "--etcd-servers".into(), etcd_servers(&etcd_ports)]);
        command.extend(["--heartbeat-interval".into(), format!("{}ms", args.start.heartbeat_interval.as_millis())]);
        command.extend(["--heartbeat-grace".into(), format!("{}ms", args.start.heartbeat_grace.as_millis())]);
        command.extend(["--resync".into(), format!("{}ms", args.start.resync.as_millis())]);
        controlplane::fsutil::write_private(&dir.join("command"), &serde_json::to_vec(&command)?)?;
        println!("starting replica {n} on {}:{port} (log: {})", listen.ip(), logs.join(format!("replica-{n}.log")).display());
        let identity = dir.join("scheduler-identity");
        if !identity.exists() {
            controlplane::fsutil::write_private(&identity, format!("replica-{n}\n").as_bytes())?;
        }
        let mut child = spawn_replica(data_dir, n, false)?;
        // The first replica makes the control plane's credentials; the others join it.
        if n == 0 {
            wait_ready(n, &mut child, data_dir).await?;
        }
        children.push(child);
    }
    for (n, child) in children.iter_mut().enumerate().skip(1) {
        wait_ready(n, child, data_dir).await?;
    }
    let backends: Vec<std::net::SocketAddr> = ports.iter().map(|p| std::net::SocketAddr::new(listen.ip(), *p)).collect();
    let lb =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}; choose another with --listen"))?;
    let _balancer = runtime::AbortOnDrop(tokio::spawn(balance(lb, backends)));
    println!("control plane: 3 replicas behind https://{listen}");

    // The admin kubeconfig of replica 0, pointed at the load balancer.
    let kubeconfig = data_dir.join("admin.kubeconfig");
    let first = std::fs::read_to_string(replica_dir(data_dir, 0).join("admin.kubeconfig"))?;
    let lb_url = controlplane::kubeconfig::server_url(listen);
    let replica_url = controlplane::kubeconfig::server_url(std::net::SocketAddr::new(listen.ip(), ports[0]));
    controlplane::fsutil::write_private(&kubeconfig, first.replace(&replica_url, &lb_url).as_bytes())?;
    println!("kubeconfig: {}", kubeconfig.display());

    let defs = super::up::definitions(&args)?;
    let next = [
        "flotilla drill kill-replica 1         # lose a replica, and watch the others take its work over",
        "flotilla drill kill-etcd 2            # lose an etcd member, and watch writes go on",
    ];
    let fleet = super::up::fleet_up(data_dir.to_path_buf(), kubeconfig, args.clusters.clone(), defs, args.workspace.clone(), &next).await;
    let fleet = match fleet {
        Ok(f) => f,
        Err(e) => {
            stop_replicas(data_dir, Duration::from_secs(5));
            return Err(e);
        }
    };
    super::shutdown_signal().await;
    drop(fleet);
    stop_replicas(data_dir, Duration::from_secs(10));
    println!("stopped the replicas");
    drop(children);
    // Members restarted by a drill are not this process's children: stop them by pid.
    drop(etcd);
    for n in 0..etcd_ports.len() {
        if let Some(pid) = etcd_pid(data_dir, n) {
            let _ = kill(pid, Signal::SIGTERM);
        }
    }
    println!("stopped etcd");
    Ok(())
}

/// Passes each connection to the next backend that accepts it, round robin.
async fn balance(listener: tokio::net::TcpListener, backends: Vec<std::net::SocketAddr>) {
    let next = Arc::new(AtomicUsize::new(0));
    let backends = Arc::new(backends);
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else { continue };
        let (next, backends) = (next.clone(), backends.clone());
        tokio::spawn(async move {
            let start = next.fetch_add(1, Ordering::Relaxed);
            for i in 0..backends.len() {
                let addr = backends[(start + i) % backends.len()];
                let Ok(Ok(mut outbound)) = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await else {
                    continue;
                };
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                return;
            }
        });
    }
}
