//! End-to-end harness: starts the real `flotilla` binary with its own data dir on an
//! ephemeral port, and runs the real `kubectl` against it with its own discovery
//! cache, so tests run in parallel without sharing anything.

#![allow(dead_code)]

pub mod browser;
pub mod fleet;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to print "ready".
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The outcome of a command.
#[derive(Debug)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn from(o: Output) -> Self {
        Self {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    }
}

/// A running `flotilla start`.
pub struct Flotilla {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub url: String,
    listen: String,
    extra: Vec<String>,
    /// The etcd it stores its data in, when FLOTILLA_TEST_STORE=etcd (see [`store_flags`]).
    _etcd: Option<controlplane::store::local_etcd::LocalEtcd>,
}

/// With FLOTILLA_TEST_STORE=etcd, every control plane these tests start keeps its data
/// in an etcd of its own, started in `dir`, so that the same end-to-end tests run
/// against the etcd backend (.ci/run does so for tests/e2e/kubectl_*.rs); otherwise none.
fn store_flags(dir: &Path) -> (Option<controlplane::store::local_etcd::LocalEtcd>, Vec<String>) {
    use controlplane::store::local_etcd::{free_ports, LocalEtcd};
    match std::env::var("FLOTILLA_TEST_STORE").as_deref() {
        Ok("etcd") => {
            let etcd = LocalEtcd::start(&dir.join("etcd"), &free_ports(1).expect("ports for etcd")).unwrap_or_else(|e| panic!("{e}"));
            let flags = vec!["--etcd-servers".to_string(), etcd.endpoints().join(",")];
            (Some(etcd), flags)
        }
        Ok("sqlite") | Err(_) => (None, Vec::new()),
        Ok(other) => panic!("FLOTILLA_TEST_STORE={other}: the stores are sqlite and etcd"),
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_flotilla")
}

impl Flotilla {
    /// Starts a control plane on a fresh data dir.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a control plane on a fresh data dir with extra `flotilla start` flags.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut flags: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let etcd = match flags.iter().any(|f| f == "--etcd-servers") {
            true => None,
            false => {
                let (etcd, store) = store_flags(dir.path());
                flags.extend(store);
                etcd
            }
        };
        let mut f = Self { child: None, dir, url: String::new(), listen: "127.0.0.1:0".into(), extra: flags, _etcd: etcd };
        f.launch();
        f
    }

    /// Starts a control plane whose replica identity (`scheduler-identity`, the holder
    /// of its Leases) is `identity`.
    pub fn start_as(identity: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("scheduler-identity"), format!("{identity}\n")).expect("write the identity");
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut f = Self { child: None, dir, url: String::new(), listen: "127.0.0.1:0".into(), extra, _etcd: None };
        f.launch();
        f
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// Starts the server process on this data dir and waits for "ready". A restart
    /// keeps the port, so clients holding a kubeconfig (a pull-mode syncer) find it again.
    pub fn launch(&mut self) {
        let dir = self.dir.path().to_str().unwrap().to_string();
        let mut args = vec!["--data-dir", &dir, "start", "--listen", &self.listen];
        args.extend(self.extra.iter().map(String::as_str));
        let (child, url) = spawn_ready(&args, &self.dir.path().join("server.log"));
        let host = url.trim_start_matches("https://");
        self.listen = host.split('/').next().unwrap_or(host).to_string();
        self.url = url;
        self.child = Some(child);
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// SIGKILL, no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                return st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("flotilla did not exit within 15s of SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kubectl_cmd(&self, args: &[&str]) -> Command {
        kubectl_cmd(&self.kubeconfig(), self.dir.path(), args)
    }

    /// Runs kubectl and returns what happened.
    pub fn kubectl(&self, args: &[&str]) -> Out {
        Out::from(self.kubectl_cmd(args).output().expect("run kubectl"))
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Out {
        kubectl_stdin(self.kubectl_cmd(args), input)
    }

    /// Runs kubectl, which must succeed; returns stdout.
    pub fn k(&self, args: &[&str]) -> String {
        must(self.kubectl(args), args, &self.log())
    }

    /// The cells of the one row `kubectl get <what> --no-headers` prints, split on runs
    /// of two or more spaces (cells such as "80, 443" or "cpu: <unknown>/80%" hold one).
    pub fn row(&self, what: &[&str]) -> Vec<String> {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        args.push("--no-headers");
        let out = self.k(&args);
        let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "kubectl {args:?} printed:\n{out}");
        lines[0].split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect()
    }

    /// Applies a manifest from a string; must succeed.
    pub fn apply(&self, args: &[&str], manifest: &str) -> String {
        let mut all = vec!["apply", "-f", "-"];
        all.extend_from_slice(args);
        must(self.kubectl_stdin(&all, manifest), &all, &self.log())
    }

    /// Runs the flotilla CLI against this data dir.
    pub fn flotilla(&self, args: &[&str]) -> Out {
        let mut all = vec!["--data-dir", self.dir.path().to_str().unwrap()];
        all.extend_from_slice(args);
        Out::from(Command::new(bin()).args(&all).output().expect("run flotilla"))
    }

    /// Starts a long-running kubectl (e.g. `get -w`), output captured to a file.
    pub fn kubectl_background(&self, args: &[&str], out: &Path) -> Child {
        let f = std::fs::File::create(out).expect("out file");
        self.kubectl_cmd(args).stdout(f.try_clone().unwrap()).stderr(f).spawn().expect("spawn kubectl")
    }

    /// GET through curl-free raw HTTP via `kubectl get --raw`.
    pub fn raw(&self, path: &str) -> Out {
        self.kubectl(&["get", "--raw", path])
    }
}

impl Drop for Flotilla {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Starts `flotilla ARGS`, logging stderr to `log`, and waits until it prints
/// "ready"; returns the process and the URL it printed ("... serving on URL ...").
pub fn spawn_ready(args: &[&str], log: &Path) -> (Child, String) {
    launch_ready(Command::new(bin()).args(args), args, log, false)
}

/// `flotilla cluster register NAME --pull`, writing the syncer's upstream kubeconfig
/// into `f`'s data dir; returns its path.
pub fn register_pull(f: &Flotilla, cluster: &SimCluster) -> PathBuf {
    let upstream = f.data_dir().join(format!("{}-upstream.kubeconfig", cluster.name));
    let kubeconfig = cluster.kubeconfig();
    let o = f.flotilla(&[
        "cluster",
        "register",
        &cluster.name,
        "--pull",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--upstream-kubeconfig-out",
        upstream.to_str().unwrap(),
    ]);
    assert!(o.ok, "register {} --pull: {o:?}", cluster.name);
    assert!(o.stdout.contains(&format!("run the syncer: flotilla syncer --sync-target {}", cluster.name)), "{o:?}");
    upstream
}

/// Starts `cmd` (a flotilla command line, run some other way), logging stderr to `log`,
/// and waits until it prints "ready"; `what` names it in a failure.
pub fn spawn_ready_cmd(cmd: &mut Command, what: &[&str], log: &Path) -> (Child, String) {
    launch_ready(cmd, what, log, false)
}

/// Starts `flotilla ARGS` in `dir` as a person would in a terminal, and waits until it
/// prints "ready". `terminal` gets everything it prints, stdout and stderr, in the order
/// it arrives; returns the process and the URL it printed.
pub fn spawn_ready_in(dir: &Path, args: &[&str], terminal: &Path) -> (Child, String) {
    launch_ready(Command::new(bin()).args(args).current_dir(dir), args, terminal, true)
}

fn launch_ready(cmd: &mut Command, args: &[&str], log: &Path, with_stdout: bool) -> (Child, String) {
    let log_file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
    let mut child = cmd.stdout(Stdio::piped()).stderr(log_file).spawn().expect("spawn flotilla");
    let stdout = child.stdout.take().expect("stdout");
    let mut copy = with_stdout.then(|| std::fs::OpenOptions::new().append(true).open(log).expect("log file"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut url = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(f) = copy.as_mut() {
                let _ = writeln!(f, "{line}");
            }
            if let Some((_, u)) = line.split_once(" serving on ") {
                url = u.split_whitespace().next().unwrap_or_default().to_string();
            }
            if line.trim() == "ready" {
                let _ = tx.send(url.clone());
            }
        }
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(url) => (child, url),
        Err(_) => {
            let _ = child.kill();
            panic!(
                "flotilla {} did not print ready within {START_TIMEOUT:?}; log:\n{}",
                args.join(" "),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }
}

/// Sends `kill -<sig>` to a process.
pub fn signal(pid: u32, sig: &str) {
    let o = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).output().expect("run kill");
    assert!(o.status.success(), "kill -{sig} {pid}: {o:?}");
}

/// kubectl with its own kubeconfig and discovery cache.
pub fn kubectl_cmd(kubeconfig: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("kubectl");
    c.env("KUBECONFIG", kubeconfig).arg("--cache-dir").arg(dir.join("kubecache")).args(args);
    c
}

fn kubectl_stdin(mut cmd: Command, input: &str) -> Out {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn kubectl");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    Out::from(child.wait_with_output().expect("kubectl"))
}

/// The stdout of a command that must have succeeded.
fn must(o: Out, args: &[&str], log: &str) -> String {
    assert!(o.ok, "kubectl {} failed:\nstdout: {}\nstderr: {}\nserver log tail:\n{}", args.join(" "), o.stdout, o.stderr, tail(log));
    o.stdout
}

/// A running `flotilla sim-cluster`.
pub struct SimCluster {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub name: String,
    pub url: String,
    config: PathBuf,
    listen: String,
}

impl SimCluster {
    /// Starts the cluster defined in `yaml` (written to a file in its own data dir).
    pub fn start(yaml: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("cluster.yaml");
        std::fs::write(&config, yaml).expect("write cluster definition");
        let name = yaml.lines().find_map(|l| l.strip_prefix("name:")).expect("the definition has a name").trim().to_string();
        let mut c = Self { child: None, dir, name, url: String::new(), config, listen: "127.0.0.1:0".into() };
        c.launch();
        c
    }

    /// Starts the process (again) on the same data dir, and the same port once known.
    pub fn launch(&mut self) {
        let dir = self.dir.path().to_str().unwrap().to_string();
        let config = self.config.to_str().unwrap().to_string();
        let (child, url) = spawn_ready(
            &["--data-dir", &dir, "sim-cluster", "--config", &config, "--listen", &self.listen],
            &self.dir.path().join("sim.log"),
        );
        // A restart keeps the port, as a real cluster keeps its address.
        self.listen = url.trim_start_matches("https://").to_string();
        self.url = url;
        self.child = Some(child);
    }

    /// The kind-shaped kubeconfig the cluster wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join(format!("{}.kubeconfig", self.name))
    }

    /// The cluster's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sim.log")).unwrap_or_default()
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`) to the cluster process.
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("the cluster is running").id();
        signal(pid, sig);
    }

    /// Runs kubectl against the cluster.
    pub fn kubectl(&self, args: &[&str]) -> Out {
        Out::from(kubectl_cmd(&self.kubeconfig(), self.dir.path(), args).output().expect("run kubectl"))
    }

    /// Starts kubectl against the cluster, its output going to `out`.
    pub fn kubectl_background(&self, args: &[&str], out: &Path) -> Child {
        let f = std::fs::File::create(out).expect("out file");
        kubectl_cmd(&self.kubeconfig(), self.dir.path(), args).stdout(f.try_clone().unwrap()).stderr(f).spawn().expect("spawn kubectl")
    }

    /// Runs kubectl, which must succeed; returns stdout.
    pub fn k(&self, args: &[&str]) -> String {
        must(self.kubectl(args), args, &self.log())
    }

    /// Applies a manifest; must succeed.
    pub fn apply(&self, manifest: &str) -> String {
        let args = ["apply", "-f", "-"];
        must(kubectl_stdin(kubectl_cmd(&self.kubeconfig(), self.dir.path(), &args), manifest), &args, &self.log())
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The last 30 lines of a log.
pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Polls `check` until it returns Ok or `timeout` passes; panics with the last
/// observation, so a failure says what was seen instead of just "timed out".
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `observe` until what it sees passes `ok`, and returns that; panics with the
/// last observation after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut observe: impl FnMut() -> String, ok: impl Fn(&str) -> bool) -> String {
    wait_for(what, timeout, || {
        let seen = observe();
        if ok(&seen) {
            Ok(seen)
        } else {
            Err(seen)
        }
    })
}

/// The typed builder of the Deployments the tests apply.
pub use test_clusters::fixtures::deployment;

/// The Deployment `d` assigned to `east` with `share` replicas there: the Deployment
/// with the cluster's label, and its WorkloadPlacement, as the scheduler writes them.
pub fn assigned(d: test_clusters::fixtures::DeploymentBuilder, share: u32) -> String {
    let d = d.label(&placement_api::sync_state_label("east"), "Sync").build();
    let name = d.metadata.name.as_deref().expect("a fixture has a name");
    format!(
        r#"{}---
apiVersion: scheduling.flotilla.io/v1alpha1
kind: WorkloadPlacement
metadata:
  name: {name}
  labels: {{state.workload.flotilla.io/east: Sync}}
spec:
  workload: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  placement: default
  clusters: [{{name: east, replicas: {share}}}]
"#,
        test_clusters::fixtures::manifest(&d)
    )
}

/// `namespace/name=replicas image` of every Flotilla copy in the cluster.
pub fn copies(east: &SimCluster) -> String {
    let o = east.kubectl(&[
        "get",
        "deploy",
        "-A",
        "-l",
        "workload.flotilla.io/sync-target=east",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}={.spec.replicas} {.spec.template.spec.containers[0].image}{"\n"}{end}"#,
    ]);
    o.stdout.trim().to_string()
}

/// A running `flotilla syncer` (pull mode).
pub struct PullSyncer {
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
}

impl PullSyncer {
    /// Starts the syncer of `target` with the given kubeconfigs and waits for "ready".
    pub fn start(target: &str, upstream: &Path, downstream: &Path, log: PathBuf) -> Self {
        let args = ["syncer", "--sync-target", target, "--heartbeat-interval", "500ms", "--resync", "5s", "--upstream-kubeconfig"]
            .iter()
            .map(|s| s.to_string())
            .chain([upstream.display().to_string(), "--downstream-kubeconfig".into(), downstream.display().to_string()])
            .collect();
        let mut s = Self { child: None, args, log };
        s.launch();
        s
    }

    /// Starts the process (again).
    pub fn launch(&mut self) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.child = Some(spawn_ready(&args, &self.log).0);
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The syncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PullSyncer {
    fn drop(&mut self) {
        self.kill9();
    }
}
