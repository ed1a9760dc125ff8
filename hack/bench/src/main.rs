//! Flotilla's benchmark harness. Each scenario prints a JSON line and a table row, and
//! every latency is shown beside its floor measured in the same run, so that machine
//! noise cancels out in the ratio.
//!
//! The control plane runs as its own process (the release `flotilla` binary), so its
//! RSS and CPU can be read from /proc; load comes from this process over HTTPS
//! through kube-rs, as a real client's would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

mod companions;
mod dashboard;
mod etcd;
mod hostile;
mod kinds;
mod plot;
mod report;
mod scale;
mod scheduler;

use report::{int, num, Better, Meta, Report, Row, Timeline};

#[derive(Parser, Debug)]
#[command(about = "Flotilla's benchmark harness: every scenario, its floors, and the report")]
struct Args {
    /// Smaller sizes and one run, for CI (which asserts completion, never timings).
    #[arg(long)]
    quick: bool,
    /// Runs of each scenario (the steady-state ones run once) [default: 3, or 1 with --quick].
    #[arg(long)]
    runs: Option<usize>,
    /// The flotilla binary to benchmark.
    #[arg(long, default_value = "target/bench-release/flotilla")]
    flotilla: PathBuf,
    /// Where results.json, report.md and the SVG plots go.
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
    /// Write the plots to docs/bench/ and the report into docs/benchmarks.md, between
    /// its results markers (run from the repository's root).
    #[arg(long)]
    publish: bool,
    /// Run one group of scenarios only: `syncer` is both `syncer-latency` and
    /// `syncer-steady`; `scheduler` is both `scheduler-assign` and `scheduler-failover`;
    /// `companions` (apps of a Deployment and four companions) is both
    /// `companions-apply` and `companions-failover`; `kinds` is apps of a StatefulSet,
    /// a Deployment, a Job and a CronJob applied to Ready; `etcd` is `etcd-store`,
    /// `etcd-replicas` and `etcd-failover`.
    #[arg(long, value_parser = ["controlplane", "sim", "syncer", "syncer-latency", "syncer-steady", "scheduler", "scheduler-assign", "scheduler-failover", "companions", "companions-apply", "companions-failover", "kinds", "scale", "hostile-bodies", "etcd", "etcd-store", "etcd-replicas", "etcd-failover", "dashboard"])]
    only: Option<String>,
}

/// `flotilla start`'s default heartbeat interval and grace, s.
const DEFAULT_HEARTBEAT: (u64, u64) = (2, 8);

/// Requests sent before each control-plane measurement and not counted.
const WARMUP_REQUESTS: usize = 200;

struct Sizes {
    write_clients: usize,
    write_secs: f64,
    gets: usize,
    watchers: usize,
    watch_writes: usize,
    workspaces: usize,
    objects_per_ws: usize,
    sim_nodes: usize,
    sim_pods: usize,
    sync_clusters: usize,
    sync_deployments: usize,
    /// Objects the pull-mode syncer holds in the steady-state scenario.
    steady_objects: usize,
    /// The steady syncer's resync interval; the window is two of them.
    steady_resync_secs: u64,
    sched_clusters: usize,
    sched_deployments: usize,
    failover_deployments: usize,
    /// Heartbeat (interval, grace) settings the failover runs at: the defaults first.
    failover_settings: Vec<(u64, u64)>,
    companions: companions::Sizes,
    kinds: kinds::Sizes,
    scale: scale::Sizes,
    hostile: hostile::Sizes,
    dashboard: dashboard::Sizes,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                write_clients: 32,
                write_secs: 3.0,
                gets: 2_000,
                watchers: 200,
                watch_writes: 30,
                workspaces: 50,
                objects_per_ws: 20,
                sim_nodes: 20,
                sim_pods: 1_000,
                sync_clusters: 2,
                sync_deployments: 50,
                steady_objects: 500,
                steady_resync_secs: 5,
                sched_clusters: 20,
                sched_deployments: 1_000,
                failover_deployments: 100,
                failover_settings: vec![(2, 8)],
                companions: companions::Sizes { clusters: 3, apps: 100, failover_apps: 100 },
                kinds: kinds::Sizes { clusters: 3, apps: 50 },
                scale: scale::Sizes { workspaces: 20, deployments_per_workspace: 5, clusters: 4, window_secs: 10 },
                hostile: hostile::Sizes { repeats: 2, floor_repeats: 20, gets: 200, heartbeats: 30, window_secs: 3, senders: 16, worst: 3 },
                dashboard: dashboard::Sizes { workloads: 500, clusters: 10, events: 100, events_per_sec: 50.0, moves: 200 },
            }
        } else {
            Sizes {
                write_clients: 32,
                write_secs: 10.0,
                gets: 20_000,
                watchers: 1_000,
                watch_writes: 100,
                workspaces: 1_000,
                objects_per_ws: 100,
                sim_nodes: 100,
                sim_pods: 5_000,
                sync_clusters: 10,
                sync_deployments: 1_000,
                steady_objects: 10_000,
                steady_resync_secs: 30,
                sched_clusters: 100,
                sched_deployments: 10_000,
                failover_deployments: 1_000,
                failover_settings: vec![(2, 8), (1, 4)],
                companions: companions::Sizes { clusters: 10, apps: 1_000, failover_apps: 1_000 },
                kinds: kinds::Sizes { clusters: 10, apps: 200 },
                scale: scale::Sizes { workspaces: 1_000, deployments_per_workspace: 10, clusters: 100, window_secs: 30 },
                hostile: hostile::Sizes {
                    repeats: 10,
                    floor_repeats: 100,
                    gets: 500,
                    heartbeats: 100,
                    window_secs: 20,
                    senders: 16,
                    worst: 3,
                },
                dashboard: dashboard::Sizes { workloads: 10_000, clusters: 100, events: 1_000, events_per_sec: 100.0, moves: 2_000 },
            }
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summarize(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(|a, b| a.total_cmp(b));
    (percentile(&xs, 0.5), percentile(&xs, 0.99), *xs.last().unwrap_or(&f64::NAN))
}

struct ServerProc {
    child: Child,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl ServerProc {
    /// `flotilla start` on a fresh data dir.
    fn start(bin: &Path) -> anyhow::Result<Self> {
        Self::spawn(bin, tempfile::tempdir()?, &["start", "--listen", "127.0.0.1:0"], "admin.kubeconfig")
    }

    /// `flotilla start --no-scheduler`: for the syncer scenarios, which assign workloads
    /// themselves, as the scheduler would, so that their figures are the syncer's alone.
    fn start_without_scheduler(bin: &Path) -> anyhow::Result<Self> {
        Self::spawn(bin, tempfile::tempdir()?, &["start", "--no-scheduler", "--listen", "127.0.0.1:0"], "admin.kubeconfig")
    }

    /// `flotilla sim-cluster` for one cluster definition, on a fresh data dir.
    fn sim(bin: &Path, name: &str, yaml: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("cluster.yaml");
        std::fs::write(&config, yaml)?;
        let config = config.to_str().unwrap().to_string();
        Self::spawn(bin, dir, &["sim-cluster", "--config", &config, "--listen", "127.0.0.1:0"], &format!("{name}.kubeconfig"))
    }

    /// `flotilla syncer` (pull mode) for `target`, with the upstream kubeconfig that
    /// `flotilla cluster register --pull --upstream-kubeconfig-out` wrote.
    fn syncer(bin: &Path, target: &str, upstream: &Path, downstream: &Path, resync: Duration) -> anyhow::Result<Self> {
        let (up, down, resync) = (upstream.to_str().unwrap(), downstream.to_str().unwrap(), format!("{}s", resync.as_secs()));
        let args = ["syncer", "--sync-target", target, "--upstream-kubeconfig", up, "--downstream-kubeconfig", down, "--resync", &resync];
        Self::spawn(bin, tempfile::tempdir()?, &args, up)
    }

    /// A replica of a control plane on etcd, with its identity: `flotilla start --etcd-servers`.
    fn replica(bin: &Path, identity: &str, etcd_servers: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("scheduler-identity"), format!("{identity}\n"))?;
        Self::spawn(bin, dir, &["start", "--listen", "127.0.0.1:0", "--etcd-servers", etcd_servers], "admin.kubeconfig")
    }

    /// The data dir.
    fn data_dir(&self) -> &Path {
        self._dir.path()
    }

    fn spawn(bin: &Path, dir: tempfile::TempDir, args: &[&str], kubeconfig: &str) -> anyhow::Result<Self> {
        // Logs go to the data dir: a killed cluster's syncer retries loudly, and the
        // report must stay readable.
        let log = std::fs::File::create(dir.path().join("stderr.log"))?;
        let mut child = Command::new(bin)
            .args(["--data-dir", dir.path().to_str().unwrap()])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {} (build it with cargo build --release)", bin.display()))?;
        use std::io::BufRead;
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        for line in lines.by_ref() {
            if line?.trim() == "ready" {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "flotilla {} did not become ready", args.join(" "));
        }
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, kubeconfig: dir.path().join(kubeconfig), _dir: dir })
    }

    fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS:")
    }

    /// The largest RSS the process has had.
    fn peak_rss_mib(&self) -> f64 {
        self.status_mib("VmHWM:")
    }

    /// Steady-state RSS: the median of samples over a few seconds, since one sample
    /// also catches whatever the allocator has not handed back yet.
    async fn settled_rss_mib(&self) -> f64 {
        let mut samples = Vec::new();
        for _ in 0..11 {
            samples.push(self.rss_mib());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    }

    fn status_mib(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }

    pub(crate) fn cpu_secs(&self) -> f64 {
        process_cpu_secs(self.child.id())
    }

    async fn client(&self, context: &str, path_override: Option<&str>) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let mut cfg = kube::Config::from_custom_kubeconfig(
            kc,
            &kube::config::KubeConfigOptions { context: Some(context.into()), ..Default::default() },
        )
        .await?;
        if let Some(p) = path_override {
            let base = cfg.cluster_url.to_string();
            let root = base.split("/clusters/").next().unwrap_or(&base).to_string();
            cfg.cluster_url = format!("{root}/clusters/{p}").parse()?;
        }
        cfg.read_timeout = Some(Duration::from_secs(300));
        Ok(kube::Client::try_from(cfg)?)
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's clock tick (`getconf CLK_TCK`), the unit of the CPU times in
/// /proc/<pid>/stat; 100 where it cannot be asked.
fn clock_ticks_per_sec() -> f64 {
    static TICK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|t| t.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// Watches `api` from resourceVersion "0" (its objects first, then their changes) and
/// hands each added or modified object to `seen`, with the instant its event arrived,
/// until the task is aborted.
fn watch_applied<K>(
    api: Api<K>,
    params: WatchParams,
    mut seen: impl FnMut(K, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<anyhow::Result<()>>
where
    K: Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        // The server ends a watch after its timeout; the next one starts from the
        // objects again, which `seen` takes as repeats.
        loop {
            let mut stream = api.watch(&params.clone().timeout(290), "0").await?.boxed();
            while let Some(ev) = stream.try_next().await? {
                let now = Instant::now();
                if let WatchEvent::Added(o) | WatchEvent::Modified(o) = ev {
                    seen(o, now);
                }
            }
        }
    })
}

/// CPU seconds (user + system) that process `pid` has used, from `/proc/<pid>/stat`.
pub(crate) fn process_cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / clock_ticks_per_sec()
}

/// Polls `done` every `every` until it holds; after `timeout`, fails with `what()`,
/// which says what was seen.
async fn wait_until(timeout: Duration, every: Duration, mut done: impl FnMut() -> bool, what: impl Fn() -> String) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !done() {
        anyhow::ensure!(Instant::now() < deadline, "{}", what());
        tokio::time::sleep(every).await;
    }
    Ok(())
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"bench": "yes"}}, "data": {"k": "v".repeat(64)}})).unwrap()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let s = Sizes::new(args.quick);
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let mut report = Report::new(Meta::read(args.quick, runs));
    println!("# {}", report.meta.line());
    // `--only syncer` selects `syncer-latency` and `syncer-steady`, and so on.
    let selected = |name: &str| args.only.as_deref().is_none_or(|o| o == name || name.starts_with(&format!("{o}-")));
    // A scenario that fails is reported, and the others still run.
    for run in 1..=runs {
        report.run = run;
        if runs > 1 {
            println!("# run {run} of {runs}");
        }
        if selected("controlplane") {
            report.calibrate("controlplane").await;
            let r = controlplane(&args.flotilla, &s, &mut report).await;
            report.outcome("controlplane", r);
        }
        if selected("sim") {
            report.calibrate("sim").await;
            let r = sim(&args.flotilla, &s, &mut report).await;
            report.outcome("sim", r);
        }
        if selected("syncer-latency") {
            report.calibrate("syncer-latency").await;
            let r = syncer_latency_rows(&args.flotilla, &s, &mut report).await;
            report.outcome("syncer-latency", r);
        }
        // The steady-state scenarios average over a window of their own; they run once.
        if run == 1 && selected("syncer-steady") {
            report.calibrate("syncer-steady").await;
            let r = syncer_steady_rows(&args.flotilla, &s, &mut report).await;
            report.outcome("syncer-steady", r);
        }
        if selected("scheduler-assign") {
            report.calibrate("scheduler-assign").await;
            let r = scheduler_assign_rows(&args.flotilla, &s, &mut report).await;
            report.outcome("scheduler-assign", r);
        }
        if selected("scheduler-failover") {
            for (interval, grace) in &s.failover_settings {
                report.calibrate(&format!("scheduler-failover at {interval} s / {grace} s")).await;
                let r = failover_rows(&args.flotilla, &s, Duration::from_secs(*interval), Duration::from_secs(*grace), &mut report).await;
                report.outcome(&format!("scheduler-failover at {interval} s / {grace} s"), r);
            }
        }
        if selected("companions-apply") {
            report.calibrate("companions-apply").await;
            let r = companions::rows_apply(&args.flotilla, s.companions, &mut report).await;
            report.outcome("companions-apply", r);
        }
        // At the default heartbeat only: the bare Deployments' failover has the others.
        if selected("companions-failover") {
            let (interval, grace) = (Duration::from_secs(DEFAULT_HEARTBEAT.0), Duration::from_secs(DEFAULT_HEARTBEAT.1));
            report.calibrate("companions-failover").await;
            let r = companions::rows_failover(&args.flotilla, s.companions, interval, grace, &mut report).await;
            report.outcome("companions-failover", r);
        }
        if selected("kinds") {
            report.calibrate("kinds").await;
            let r = kinds::rows(&args.flotilla, s.kinds, &mut report).await;
            report.outcome("kinds", r);
        }
        if run == 1 && selected("scale") {
            report.calibrate("scale").await;
            let r = scale::rows(&args.flotilla, s.scale, &mut report).await;
            report.outcome("scale", r);
        }
        if selected("hostile-bodies") {
            report.calibrate("hostile-bodies").await;
            let r = hostile::rows(&args.flotilla, s.hostile, &mut report).await;
            report.outcome("hostile-bodies", r);
        }
        if selected("etcd-store") {
            report.calibrate("etcd-store").await;
            let r = etcd::stores(&s, &mut report).await;
            report.outcome("etcd-store", r);
        }
        if selected("etcd-replicas") {
            report.calibrate("etcd-replicas").await;
            let r = etcd::replicas(&args.flotilla, &s, &mut report).await;
            report.outcome("etcd-replicas", r);
        }
        if selected("dashboard") {
            report.calibrate("dashboard").await;
            let r = dashboard::rows(&args.flotilla, s.dashboard, &mut report).await;
            report.outcome("dashboard", r);
        }
        if selected("etcd-failover") {
            report.calibrate("etcd-failover").await;
            let r = etcd::failover(&args.flotilla, &s, &mut report).await;
            report.outcome("etcd-failover", r);
        }
    }
    report.print_table();
    let out = if args.publish { PathBuf::from("docs/bench") } else { args.out_dir.clone() };
    let md = report.write(&out, if args.publish { "bench/" } else { "" })?;
    println!("\n# results, plots and report.md written to {}", out.display());
    if args.publish {
        publish("docs/benchmarks.md".as_ref(), &md)?;
        println!("# docs/benchmarks.md updated between its {BEGIN} and {END} markers");
    }
    let failed = report.failures();
    anyhow::ensure!(failed.is_empty(), "{} scenario group(s) did not complete:\n{}", failed.len(), failed.join("\n"));
    Ok(())
}

const BEGIN: &str = "<!-- bench:results:begin -->";
const END: &str = "<!-- bench:results:end -->";

/// Puts the generated report between the markers of `doc`, leaving the prose around it.
fn publish(doc: &Path, md: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        anyhow::bail!("{} has no {BEGIN} ... {END} markers to put the results between", doc.display());
    };
    anyhow::ensure!(b < e, "{}: {BEGIN} comes after {END}", doc.display());
    let out = format!("{}{BEGIN}\n{md}{}", &text[..b], &text[e..]);
    std::fs::write(doc, out)?;
    Ok(())
}

/// The control plane: durable writes, GET, LIST, watch fan-out, and memory per workspace.
async fn controlplane(bin: &Path, s: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    // Floor: durable writes straight into the store, no HTTP, no admission.
    let store_floor = store_floor(s.write_clients, s.write_secs).await?;
    report.add(
        Row::new(
            "store_creates",
            format!("store: durable creates, {} writers in-process", s.write_clients),
            store_floor,
            "/s",
            Better::Higher,
        ),
        json!({"scenario": "store_creates", "per_sec": store_floor, "writers": s.write_clients}),
    );

    let srv = ServerProc::start(bin)?;
    let client = srv.client("root", None).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Warm-up: connections, TLS sessions and the server's first allocations, unmeasured.
    for i in 0..WARMUP_REQUESTS {
        cms.create(&PostParams::default(), &cm(&format!("warm-{i}"))).await?;
        let _: String = client.request_text(http_get("/healthz")).await?;
    }
    // Floor: the raw HTTPS round trip of an unauthenticated health check.
    let mut rtt = Vec::new();
    for _ in 0..s.gets.min(5_000) {
        let t = Instant::now();
        let _: String = client.request_text(http_get("/healthz")).await?;
        rtt.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (rtt50, rtt99, _) = summarize(rtt);
    report.latency_floor("/healthz p99", rtt99);

    // Durable creates through the API with 32 concurrent clients.
    let (creates_per_sec, create_lat) = api_creates(&cms, s.write_clients, s.write_secs).await?;
    report.latencies(&format!("API create, {} clients", s.write_clients), &create_lat);
    let (c50, c99, _) = summarize(create_lat);
    report.add(
        Row::new(
            "api_creates",
            format!("API: durable creates, {} clients over HTTPS", s.write_clients),
            creates_per_sec,
            "/s",
            Better::Higher,
        )
        .detail(format!("p50 {} / p99 {} ms", num(c50), num(c99)))
        .floor("store", store_floor)
        .target(3_000.0, "≥ 3,000/s"),
        json!({"scenario": "api_creates", "per_sec": creates_per_sec, "p50_ms": c50, "p99_ms": c99, "clients": s.write_clients}),
    );

    // GET latency (sequential, one client).
    let mut gets = Vec::new();
    for i in 0..s.gets {
        let t = Instant::now();
        cms.get(&format!("w0-{}", i % 50)).await?;
        gets.push(t.elapsed().as_secs_f64() * 1e3);
    }
    report.latencies("API GET", &gets);
    let (g50, g99, _) = summarize(gets);
    report.add(
        Row::new("get", "API: GET p99", g99, "ms", Better::Lower)
            .detail(format!("p50 {} ms", num(g50)))
            .floor("/healthz p99", rtt99)
            .target(5.0, "≤ 5 ms"),
        json!({"scenario": "get", "p50_ms": g50, "p99_ms": g99, "floor_p50_ms": rtt50, "floor_p99_ms": rtt99, "n": s.gets}),
    );

    // LIST latency of the whole namespace (everything created above).
    let mut lists = Vec::new();
    let mut listed = 0;
    for _ in 0..20 {
        let t = Instant::now();
        listed = cms.list(&Default::default()).await?.items.len();
        lists.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (l50, l99, _) = summarize(lists);
    // The same LIST read as bytes: server time plus transfer, without the client's
    // decoding into typed objects (which the figure above includes, as kubectl's would).
    let mut raw_lists = Vec::new();
    let mut bytes = 0;
    for _ in 0..20 {
        let t = Instant::now();
        bytes = client.request_text(http_get("/api/v1/namespaces/default/configmaps")).await?.len();
        raw_lists.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (r50, r99, _) = summarize(raw_lists);
    report.add(
        Row::new("list", format!("API: LIST of a namespace's {} objects p50, typed", int(listed)), l50, "ms", Better::Lower)
            .detail(format!("p99 {} ms, {} µs/object on the wire", num(l99), num(r50 * 1e3 / listed.max(1) as f64)))
            .floor("bytes only", r50),
        json!({"scenario": "list", "objects": listed, "p50_ms": l50, "p99_ms": l99, "raw_p50_ms": r50, "raw_p99_ms": r99, "body_bytes": bytes}),
    );

    // Watch fan-out: a write's event at N watchers, measured from the write's acknowledgement.
    let f = watch_fanout(&srv, &srv, s.watchers, s.watch_writes).await?;
    report.latencies(&format!("watch event at {} watchers, from send", int(s.watchers)), &f.from_send_samples);
    report.add(
        Row::new(
            "watch_fanout",
            format!("watch: event at {} watchers after the ack, p99", int(s.watchers)),
            f.after_ack.1,
            "ms",
            Better::Lower,
        )
        .detail(format!("p50 {}, max {} ms", num(f.after_ack.0), num(f.after_ack.2)))
        .target(50.0, "≤ 50 ms"),
        json!({"scenario": "watch_fanout", "watchers": s.watchers, "writes": s.watch_writes, "samples": f.samples,
        "p50_ms": f.after_ack.0, "p99_ms": f.after_ack.1, "max_ms": f.after_ack.2,
        }),
    );
    report.add(
        Row::new("watch_fanout_from_send", format!("watch: event at {} watchers from the write's send, p99", int(s.watchers)), f.from_send.1, "ms", Better::Lower)
            .detail(format!("p50 {}, max {} ms", num(f.from_send.0), num(f.from_send.2)))
            .floor("the write's round trip p99", f.create_rtt.1),
        json!({"scenario": "watch_fanout_from_send", "watchers": s.watchers, "p50_ms": f.from_send.0, "p99_ms": f.from_send.1, "max_ms": f.from_send.2,
               "floor_create_p50_ms": f.create_rtt.0, "floor_create_p99_ms": f.create_rtt.1}),
    );
    drop(cms);
    drop(client);
    drop(srv);

    // Memory: many workspaces with objects, on a fresh server.
    let m = workspaces_rss(bin, s.workspaces, s.objects_per_ws).await?;
    report.add(
        Row::new("workspaces_rss", format!("RSS: {} workspaces × {} objects", int(s.workspaces), s.objects_per_ws), m.with_objects, "MiB", Better::Lower)
            .detail(format!(
                "{} KiB/workspace, {} KiB/object",
                num((m.with_workspaces - m.idle) * 1024.0 / s.workspaces as f64),
                num((m.with_objects - m.with_workspaces) * 1024.0 / (s.workspaces * s.objects_per_ws) as f64)
            ))
            .floor("empty server", m.idle)
            .target(1024.0, "≤ 1 GiB"),
        json!({"scenario": "workspaces_rss", "workspaces": s.workspaces, "objects_per_workspace": s.objects_per_ws, "rss_mib": m.with_objects,
               "rss_with_empty_workspaces_mib": m.with_workspaces, "idle_rss_mib": m.idle, "server_cpu_secs": m.cpu_secs, "load_secs": m.load_secs}),
    );
    Ok(())
}

/// A simulated cluster: its raw create round trip, a 100-replica rollout against its
/// startup delay, and its RSS with many running pods.
async fn sim(bin: &Path, s: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let sim = sim_cluster(bin, s.sim_nodes, s.sim_pods).await?;
    report.latency_floor("sim cluster create p99", sim.create_ms.1);
    report.add(
        Row::new("sim_create", "sim: raw create round trip p99, sequential", sim.create_ms.1, "ms", Better::Lower)
            .detail(format!("p50 {} ms", num(sim.create_ms.0))),
        json!({"scenario": "sim_create", "p50_ms": sim.create_ms.0, "p99_ms": sim.create_ms.1, "n": SIM_CREATES}),
    );
    report.add(
        Row::new("sim_rollout", "sim: 100-replica Deployment, create to Available, p50", sim.rollout_p50_ms, "ms", Better::Lower)
            .detail(format!("max {} ms of {}", num(sim.rollout_max_ms), sim.rollouts))
            .floor("startupDelay", SIM_STARTUP_DELAY_MS as f64)
            .target(1_000.0 + SIM_STARTUP_DELAY_MS as f64, format!("≤ 1 s + startupDelay = {} ms", 1_000 + SIM_STARTUP_DELAY_MS)),
        json!({"scenario": "sim_rollout", "replicas": 100, "runs": sim.rollouts, "p50_ms": sim.rollout_p50_ms, "max_ms": sim.rollout_max_ms, "startup_delay_ms": SIM_STARTUP_DELAY_MS}),
    );
    // The target is for 5,000 running pods; both the settled and the peak RSS count.
    let target = |row: Row| if s.sim_pods >= 5_000 { row.target(300e6 / 1024.0 / 1024.0, "≤ 300 MB (286 MiB)") } else { row };
    let per_pod = (sim.rss_mib - sim.idle_rss_mib) * 1024.0 / sim.running.max(1) as f64;
    report.add(
        target(
            Row::new("sim_rss", format!("sim: RSS, {} nodes, {} running pods, settled", s.sim_nodes, int(sim.running)), sim.rss_mib, "MiB", Better::Lower)
                .detail(format!("{} KiB/pod", num(per_pod)))
                .floor("empty cluster", sim.idle_rss_mib),
        ),
        json!({"scenario": "sim_rss", "nodes": s.sim_nodes, "running_pods": sim.running, "rss_mib": sim.rss_mib, "peak_rss_mib": sim.peak_rss_mib, "idle_rss_mib": sim.idle_rss_mib, "cpu_secs": sim.cpu_secs, "load_secs": sim.load_secs}),
    );
    report.add_row(target(
        Row::new("sim_rss_peak", "sim: peak RSS while the pods start (VmHWM)", sim.peak_rss_mib, "MiB", Better::Lower)
            .detail(format!("load took {} s", num(sim.load_secs)))
            .floor("empty cluster", sim.idle_rss_mib),
    ));
    Ok(())
}

async fn syncer_latency_rows(bin: &Path, s: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let f = syncer_latency(bin, s.sync_clusters, s.sync_deployments).await?;
    report.latencies("syncer: apply to copy created", &f.created_samples);
    report.latencies("syncer: Available, down to up", &f.status_samples);
    report.latency_floor("control plane create p99", f.floor_create.1);
    // The floor of a copy created is the two creates it takes: upstream, then on the cluster.
    let floor = f.floor_create.1 + f.floor_sim_create.1;
    report.add(
        Row::new(
            "syncer_apply_to_created",
            format!("syncer: apply to copy created p99, {} on {} clusters", int(f.deployments), f.clusters),
            f.created.1,
            "ms",
            Better::Lower,
        )
        .detail(format!("p50 {}, max {} ms", num(f.created.0), num(f.created.2)))
        .floor("control plane + sim create p99", floor)
        .target(100.0, "≤ 100 ms"),
        json!({"scenario": "syncer_apply_to_created", "clusters": f.clusters, "deployments": f.deployments,
               "p50_ms": f.created.0, "p99_ms": f.created.1, "max_ms": f.created.2,
               "floor_create_p50_ms": f.floor_create.0, "floor_create_p99_ms": f.floor_create.1,
               "floor_sim_create_p50_ms": f.floor_sim_create.0, "floor_sim_create_p99_ms": f.floor_sim_create.1}),
    );
    report.add(
        Row::new("syncer_status_up", "syncer: copy Available to upstream Available p99", f.status.1, "ms", Better::Lower)
            .detail(format!("p50 {}, max {} ms", num(f.status.0), num(f.status.2)))
            .floor("control plane create p99", f.floor_create.1),
        json!({"scenario": "syncer_status_up", "clusters": f.clusters, "deployments": f.deployments,
               "p50_ms": f.status.0, "p99_ms": f.status.1, "max_ms": f.status.2,
               "control_plane_rss_mib": f.control_plane_rss_mib, "control_plane_cpu_secs": f.control_plane_cpu_secs}),
    );
    Ok(())
}

async fn syncer_steady_rows(bin: &Path, s: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let f = syncer_steady(bin, s.steady_objects, Duration::from_secs(s.steady_resync_secs)).await?;
    let (sy, cp) = (&f.syncer, &f.control_plane);
    report.add(
        Row::new("syncer_steady", format!("syncer: steady RSS, {} objects, pull mode", int(f.objects)), sy.rss_mib, "MiB", Better::Lower)
            .detail(format!(
                "{} KiB/object; CPU {}% of a core, busiest second {}%",
                num((sy.rss_mib - f.syncer_idle_rss_mib) * 1024.0 / f.objects.max(1) as f64),
                num(sy.cpu_pct),
                num(sy.cpu_peak_pct)
            ))
            .floor("idle syncer", f.syncer_idle_rss_mib),
        json!({"scenario": "syncer_steady", "objects": f.objects, "deployments": f.deployments, "config_maps": f.config_maps,
               "downstream_pods": f.pods, "resync_secs": f.resync_secs, "window_secs": f.window_secs, "converge_secs": f.converge_secs,
               "rss_mib": sy.rss_mib, "rss_max_mib": sy.rss_max_mib, "peak_rss_mib": f.syncer_peak_rss_mib, "idle_rss_mib": f.syncer_idle_rss_mib,
               "cpu_pct": sy.cpu_pct, "cpu_peak_1s_pct": sy.cpu_peak_pct,
               "control_plane_rss_mib": cp.rss_mib, "control_plane_rss_max_mib": cp.rss_max_mib,
               "control_plane_cpu_pct": cp.cpu_pct, "control_plane_cpu_peak_1s_pct": cp.cpu_peak_pct}),
    );
    Ok(())
}

async fn scheduler_assign_rows(bin: &Path, s: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let f = scheduler::assign(bin, s.sched_clusters, s.sched_deployments).await?;
    report.latencies("scheduler: create to assigned", &f.assigned_samples);
    report.add(
        Row::new(
            "scheduler_decision",
            format!("scheduler: decision p99, {} on {} clusters", int(f.deployments), f.clusters),
            f.decision_us.1,
            "µs",
            Better::Lower,
        )
        .detail(format!("p50 {} µs, {} decisions", num(f.decision_us.0), num(f.decision_us.2)))
        .target(1_000.0, "≤ 1 ms"),
        json!({"scenario": "scheduler_decision", "clusters": f.clusters, "deployments": f.deployments,
               "p50_us": f.decision_us.0, "p99_us": f.decision_us.1, "decisions": f.decision_us.2}),
    );
    let target = if s.sched_deployments >= 10_000 { Some(10.0) } else { None };
    let mut row = Row::new(
        "scheduler_assign",
        format!("scheduler: apply to all assigned, {} on {} clusters", int(f.deployments), f.clusters),
        f.all_assigned_s,
        "s",
        Better::Lower,
    )
    .detail(format!("each p50 {} / p99 {} ms; the creates done at {} s", num(f.assigned_ms.0), num(f.assigned_ms.1), num(f.creates_done_s)))
    .floor("the same creates, no scheduler", f.creates_without_scheduler_s);
    if let Some(t) = target {
        row = row.target(t, "≤ 10 s");
    }
    report.add(
        row,
        json!({"scenario": "scheduler_assign", "clusters": f.clusters, "deployments": f.deployments,
               "all_assigned_s": f.all_assigned_s, "creates_done_s": f.creates_done_s,
               "creates_without_scheduler_s": f.creates_without_scheduler_s,
               "p50_ms": f.assigned_ms.0, "p99_ms": f.assigned_ms.1, "max_ms": f.assigned_ms.2,
               "floor_create_p50_ms": f.floor_create_ms.0, "floor_create_p99_ms": f.floor_create_ms.1,
               "false_not_ready": f.false_not_ready, "events_dropped": f.events_dropped,
               "writes_per_deployment": f.writes_per_deployment.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
               "store_commits": f.commits.0, "store_writes_per_commit": f.commits.1, "store_commit_p99_ms": f.commits.2,
               "control_plane_rss_mib": f.control_plane_rss_mib, "control_plane_cpu_secs": f.control_plane_cpu_secs}),
    );
    let mut row = Row::new(
        "scheduler_what_if",
        format!("what-if --lose of one cluster, over {} workloads on {} clusters", int(f.deployments), f.clusters),
        f.what_if_s,
        "s",
        Better::Lower,
    )
    .detail(format!("{} workloads affected; the whole command", f.what_if_affected))
    .floor("flotilla status -o json of the workspace", f.what_if_floor_s);
    if s.sched_deployments >= 10_000 {
        row = row.target(1.0, "≤ 1 s");
    }
    report.add(
        row,
        json!({"scenario": "scheduler_what_if", "clusters": f.clusters, "deployments": f.deployments, "seconds": f.what_if_s,
               "affected": f.what_if_affected, "floor_status_seconds": f.what_if_floor_s}),
    );
    Ok(())
}

async fn failover_rows(bin: &Path, s: &Sizes, interval: Duration, grace: Duration, report: &mut Report) -> anyhow::Result<()> {
    let f = scheduler::failover(bin, s.failover_deployments, interval, grace, false, None).await?;
    let (i, g) = (f.heartbeat_interval_s, f.grace_s);
    let defaults = (i, g) == DEFAULT_HEARTBEAT;
    // The target is for 1,000 Deployments at the default heartbeat.
    let target = defaults && f.deployments >= 1_000;
    let slug = format!("{i}s-{g}s");
    report.timeline(Timeline {
        setting: format!("beat {i} s / grace {g} s"),
        slug: slug.clone(),
        detected: f.detected_s,
        grace: g as f64,
        target: defaults.then_some(g as f64 + 5.0),
        moved: f.moved.clone(),
        available: f.available.clone(),
        available_label: "Available elsewhere",
    });
    let mut row = Row::new(
        format!("scheduler_failover/{slug}"),
        format!("failover: kill to all {} Available elsewhere, beat {i} s / grace {g} s", int(f.deployments)),
        f.all_available_s,
        "s",
        Better::Lower,
    )
    .detail(format!("detected {}, moved {}-{} s", num(f.detected_s), num(f.first_moved_s), num(f.all_moved_s)))
    .floor("grace", g as f64);
    if target {
        row = row.target(g as f64 + 5.0, "≤ grace + 5 s = 13 s");
    }
    report.add(
        row,
        json!({"scenario": "scheduler_failover", "deployments": f.deployments,
               "heartbeat_interval_s": i, "grace_s": g,
               "detected_s": f.detected_s, "first_moved_s": f.first_moved_s, "all_moved_s": f.all_moved_s,
               "all_available_s": f.all_available_s,
               "available_p50_s": f.available_s.0, "available_p99_s": f.available_s.1,
               "move_to_available_p50_s": f.move_to_available_s.0, "move_to_available_p99_s": f.move_to_available_s.1,
               "cluster_floor_s": f.cluster_floor_s,
               "stages_p50_p99_s": f.stages_s.iter().map(|(k, (p50, p99, _))| (k.to_string(), json!([p50, p99]))).collect::<serde_json::Map<_, _>>(),
               "false_not_ready": f.false_not_ready,
               "writes_per_deployment": f.writes_per_deployment.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
               "progress_reports_deferred": f.progress_reports_deferred,
               "cpu_secs": f.cpu_secs.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>()}),
    );
    report.add(
        Row::new(format!("scheduler_failover_detect/{slug}"), format!("failover: loss detected, beat {i} s / grace {g} s"), f.detected_s, "s", Better::Lower)
            .detail(format!("{} surviving clusters declared NotReady", f.false_not_ready))
            .floor("grace", g as f64),
        json!({"scenario": "scheduler_failover_detect", "heartbeat_interval_s": i, "grace_s": g, "detected_s": f.detected_s, "false_not_ready": f.false_not_ready}),
    );
    Ok(())
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

/// Durable creates straight into an SQLite store, no HTTP, no admission.
async fn store_floor(writers: usize, secs: f64) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let store = storage::SqliteStore::open(&dir.path().join("s.db"))?;
    store_creates(store, writers, secs).await
}

/// Creates into `store` from `writers` concurrent writers for `secs`, per second.
async fn store_creates(store: Arc<dyn storage::Store>, writers: usize, secs: f64) -> anyhow::Result<f64> {
    per_second(writers, secs, move |w, n| {
        let store = store.clone();
        async move {
            let key = format!("core/configmaps/root/default/{w}-{n}");
            store.write(storage::WriteOp::Create { key, value: etcd::doc(w, n) }).await?;
            Ok(())
        }
    })
    .await
}

/// `writers` tasks each repeat `write(writer, n)`, one at a time, until `secs` have
/// passed; the writes per second in all.
async fn per_second<F, Fut>(writers: usize, secs: f64, write: F) -> anyhow::Result<f64>
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let write = write.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    write(w, n).await?;
                    n += 1;
                }
                anyhow::Ok(n)
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn api_creates(cms: &Api<ConfigMap>, clients: usize, secs: f64) -> anyhow::Result<(f64, Vec<f64>)> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|w| {
            let cms = cms.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut n = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    cms.create(&PostParams::default(), &cm(&format!("w{w}-{n}"))).await?;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    n += 1;
                }
                anyhow::Ok(lat)
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok((all.len() as f64 / start.elapsed().as_secs_f64(), all))
}

/// `watchers` watches on `watched`, and `writes` creates through `writer`: the same
/// server, or two replicas of one control plane on etcd.
async fn watch_fanout(writer: &ServerProc, watched: &ServerProc, watchers: usize, writes: usize) -> anyhow::Result<Fanout> {
    let client = writer.client("root", None).await?;
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = ns.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "fanout"}}))?).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "fanout");
    let rv = Api::<ConfigMap>::namespaced(watched.client("root", None).await?, "fanout")
        .list(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let received: Arc<std::sync::Mutex<Vec<(String, Instant)>>> = Default::default();
    let ready = Arc::new(tokio::sync::Barrier::new(watchers + 1));
    // Several connections, as many independent clients would open.
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(watched.client("root", None).await?);
    }
    let mut tasks = Vec::new();
    // The watches start at most 128 at a time: each is a connection of its own (the
    // clients speak HTTP/1.1), and a thousand TLS handshakes at once overrun the
    // server's limit on connections that have not sent a request yet, which closes
    // the oldest. The figures are taken once every watch runs.
    let starting = Arc::new(tokio::sync::Semaphore::new(128));
    for i in 0..watchers {
        let api: Api<ConfigMap> = Api::namespaced(clients[i % clients.len()].clone(), "fanout");
        let (received, ready, rv, starting) = (received.clone(), ready.clone(), rv.clone(), starting.clone());
        tasks.push(tokio::spawn(async move {
            // Every watcher reaches the barrier, even one whose watch failed to start,
            // so that a failure fails the scenario instead of stopping it for good.
            let permit = starting.acquire_owned().await;
            let stream = api.watch(&WatchParams::default().timeout(240), &rv).await;
            drop(permit);
            ready.wait().await;
            let mut stream = stream.context("starting a watch")?.boxed();
            let mut got = 0;
            while let Some(ev) = stream.try_next().await? {
                if let WatchEvent::Added(o) = ev {
                    received.lock().unwrap().push((o.metadata.name.unwrap_or_default(), Instant::now()));
                    got += 1;
                    if got == writes {
                        break;
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    ready.wait().await;
    let mut acks = std::collections::HashMap::new();
    for i in 0..writes {
        let name = format!("e{i}");
        let sent = Instant::now();
        api.create(&PostParams::default(), &cm(&name)).await?;
        acks.insert(name, (sent, Instant::now()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One deadline for them all: a watch that the server cut would otherwise hold
    // each wait for the whole of it, one after the other.
    let ended = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(tasks))
        .await
        .with_context(|| format!("the {watchers} watchers did not all see the {writes} writes within 120 s"))?;
    for t in ended {
        t??;
    }
    let got = received.lock().unwrap();
    anyhow::ensure!(got.len() == watchers * writes, "expected {} events, got {}", watchers * writes, got.len());
    // The server publishes an event before it answers the write, so most events
    // arrive before the writer has read its acknowledgement: "after ack" is then 0.
    // "From send" is the whole path, comparable with the create round trip.
    let after_ack: Vec<f64> = got.iter().map(|(n, at)| at.saturating_duration_since(acks[n].1).as_secs_f64() * 1e3).collect();
    let from_send: Vec<f64> = got.iter().map(|(n, at)| at.duration_since(acks[n].0).as_secs_f64() * 1e3).collect();
    let create_rtt: Vec<f64> = acks.values().map(|(s, a)| a.duration_since(*s).as_secs_f64() * 1e3).collect();
    Ok(Fanout {
        after_ack: summarize(after_ack),
        from_send: summarize(from_send.clone()),
        from_send_samples: from_send,
        create_rtt: summarize(create_rtt),
        samples: got.len(),
    })
}

struct Fanout {
    /// p50, p99, max in ms.
    after_ack: (f64, f64, f64),
    from_send: (f64, f64, f64),
    from_send_samples: Vec<f64>,
    create_rtt: (f64, f64, f64),
    samples: usize,
}

async fn workspaces_rss(bin: &Path, workspaces: usize, per_ws: usize) -> anyhow::Result<RssFigures> {
    let srv = ServerProc::start(bin)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = srv.rss_mib();
    let start = Instant::now();
    create_workspaces(srv.client("root", None).await?, workspaces, |i| format!("ws-{i}"), Duration::from_secs(300)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let with_workspaces = srv.rss_mib();
    // Objects, one workspace at a time per concurrent slot; each slot's client (and
    // its connection) is dropped when its workspace is done, as separate tenants'
    // clients would come and go, so idle connections do not count as object memory.
    futures::stream::iter(0..workspaces)
        .map(|w| {
            let srv = &srv;
            async move {
                let api: Api<ConfigMap> = Api::namespaced(srv.client("root", Some(&format!("ws-{w}"))).await?, "default");
                for o in 0..per_ws {
                    api.create(&PostParams::default(), &cm(&format!("obj-{o}"))).await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(RssFigures { idle, with_workspaces, with_objects: srv.rss_mib(), cpu_secs: srv.cpu_secs(), load_secs: secs })
}

/// Creates `n` Workspaces named by `name`, 32 requests in flight, and waits until
/// every one is Ready (has its namespaces).
async fn create_workspaces(root: kube::Client, n: usize, name: impl Fn(usize) -> String, deadline: Duration) -> anyhow::Result<()> {
    let ws_api: Api<DynamicObject> = Api::all_with(
        root,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("tenancy.flotilla.io", "v1alpha1", "Workspace"), "workspaces"),
    );
    futures::stream::iter((0..n).map(name))
        .map(|name| {
            let ws_api = ws_api.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(
                    json!({"apiVersion": "tenancy.flotilla.io/v1alpha1", "kind": "Workspace", "metadata": {"name": name}}),
                )?;
                ws_api.create(&PostParams::default(), &obj).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let ready = || async {
        let list = ws_api.list(&Default::default()).await?.items;
        anyhow::Ok(list.iter().filter(|w| w.data.pointer("/status/phase").and_then(|p| p.as_str()) == Some("Ready")).count())
    };
    let until = Instant::now() + deadline;
    loop {
        let ready = ready().await?;
        if ready >= n {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < until, "only {ready}/{n} workspaces Ready after {} s", deadline.as_secs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct RssFigures {
    idle: f64,
    with_workspaces: f64,
    with_objects: f64,
    cpu_secs: f64,
    load_secs: f64,
}

/// The simulated cluster's pod startup delay in the sim scenarios.
const SIM_STARTUP_DELAY_MS: u64 = 300;
/// Sequential ConfigMap creates that measure a simulated cluster's raw create round trip.
const SIM_CREATES: usize = 500;

/// The round trip of `n` sequential ConfigMap creates in `namespace`, after a warm-up:
/// p50, p99 and max, ms.
async fn create_round_trip(client: kube::Client, namespace: &str, n: usize) -> anyhow::Result<(f64, f64, f64)> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    for i in 0..WARMUP_REQUESTS.min(n) {
        api.create(&PostParams::default(), &cm(&format!("floor-warm-{i}"))).await?;
    }
    let mut rtt = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        api.create(&PostParams::default(), &cm(&format!("floor-{i}"))).await?;
        rtt.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(summarize(rtt))
}

struct SimFigures {
    /// The raw create round trip on the simulated cluster, ms: p50, p99, max.
    create_ms: (f64, f64, f64),
    rollouts: usize,
    rollout_p50_ms: f64,
    rollout_max_ms: f64,
    running: usize,
    rss_mib: f64,
    peak_rss_mib: f64,
    idle_rss_mib: f64,
    cpu_secs: f64,
    load_secs: f64,
}

fn bench_deployment(name: &str, replicas: usize) -> anyhow::Result<k8s_openapi::api::apps::v1::Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "nginx:1.27", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}
    }))?)
}

fn available(d: &k8s_openapi::api::apps::v1::Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    st.available_replicas.unwrap_or(0) == want
        && st.conditions.unwrap_or_default().iter().any(|c| c.type_ == "Available" && c.status == "True")
}

/// Waits until every named Deployment is Available; returns when each became so.
async fn wait_available(api: &Api<k8s_openapi::api::apps::v1::Deployment>, names: &[String], deadline: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + deadline;
    loop {
        let list = api.list(&Default::default()).await?;
        let ready = list.items.iter().filter(|d| names.iter().any(|n| Some(n) == d.metadata.name.as_ref()) && available(d)).count();
        if ready == names.len() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < until, "only {ready}/{} Deployments Available after {deadline:?}", names.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn sim_cluster(bin: &Path, nodes: usize, pods: usize) -> anyhow::Result<SimFigures> {
    use k8s_openapi::api::apps::v1::Deployment;
    let yaml = format!(
        "name: bench\nnodes:\n  - {{count: {nodes}, cpu: \"16\", memory: 64Gi, pods: 110}}\nstartupDelay: {SIM_STARTUP_DELAY_MS}ms\n"
    );
    let srv = ServerProc::sim(bin, "bench", &yaml)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss_mib = srv.rss_mib();
    let client = srv.client("kind-bench", None).await?;
    let create_ms = create_round_trip(client.clone(), "kube-system", SIM_CREATES).await?;
    let api: Api<Deployment> = Api::namespaced(client, "default");

    // Rollout latency: one 100-replica Deployment at a time, create to Available,
    // watched as a client would (a watch on the one Deployment).
    let mut rollouts = Vec::new();
    for i in 0..5 {
        let name = format!("rollout-{i}");
        let t = Instant::now();
        api.create(&PostParams::default(), &bench_deployment(&name, 100)?).await?;
        let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(60);
        let mut stream = api.watch(&wp, "0").await?.boxed();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), stream.try_next()).await {
                Ok(Ok(Some(WatchEvent::Added(d) | WatchEvent::Modified(d)))) if available(&d) => break,
                Ok(Ok(Some(_))) => {}
                other => anyhow::bail!("Deployment {name} did not become Available: {other:?}"),
            }
        }
        rollouts.push(t.elapsed().as_secs_f64() * 1e3);
        api.delete(&name, &Default::default()).await?;
    }
    let (p50, _, max) = summarize(rollouts.clone());

    // Steady state with many running pods: 100-replica Deployments up to `pods`.
    let start = Instant::now();
    let names: Vec<String> = (0..pods / 100).map(|i| format!("load-{i}")).collect();
    for n in &names {
        api.create(&PostParams::default(), &bench_deployment(n, 100)?).await?;
    }
    wait_available(&api, &names, Duration::from_secs(600)).await?;
    let load_secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let running = api
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|d| names.iter().any(|n| Some(n) == d.metadata.name.as_ref()))
        .map(|d| d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) as usize)
        .sum();
    Ok(SimFigures {
        create_ms,
        rollouts: rollouts.len(),
        rollout_p50_ms: p50,
        rollout_max_ms: max,
        running,
        rss_mib: srv.settled_rss_mib().await,
        peak_rss_mib: srv.peak_rss_mib(),
        idle_rss_mib,
        cpu_secs: srv.cpu_secs(),
        load_secs,
    })
}

struct SyncerFigures {
    clusters: usize,
    deployments: usize,
    created: (f64, f64, f64),
    created_samples: Vec<f64>,
    status: (f64, f64, f64),
    status_samples: Vec<f64>,
    floor_create: (f64, f64, f64),
    /// The raw create round trip on one of the simulated clusters, before the load.
    floor_sim_create: (f64, f64, f64),
    control_plane_rss_mib: f64,
    control_plane_cpu_secs: f64,
}

/// The WorkloadPlacements of a workspace's `default` namespace.
fn placements_api(ws: kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.flotilla.io", "v1alpha1", "WorkloadPlacement"),
        "workloadplacements",
    );
    Api::namespaced_with(ws, "default", &ar)
}

/// The WorkloadPlacement that gives all of Deployment `name`'s one replica to `cluster`,
/// as the scheduler writes it.
fn assigned_placement(name: &str, cluster: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.flotilla.io/v1alpha1", "kind": "WorkloadPlacement",
        "metadata": {"name": name, "labels": {format!("state.workload.flotilla.io/{cluster}"): "Sync"}},
        "spec": {"workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "placement": "default",
                 "clusters": [{"name": cluster, "replicas": 1}]}
    }))?)
}

/// A one-replica Deployment labelled as assigned to `cluster`.
fn assigned_deployment(name: &str, cluster: &str) -> anyhow::Result<k8s_openapi::api::apps::v1::Deployment> {
    let mut d = bench_deployment(name, 1)?;
    d.metadata.labels = Some([(format!("state.workload.flotilla.io/{cluster}"), "Sync".to_string())].into());
    Ok(d)
}

/// Runs the `flotilla` CLI against a control plane's data dir.
fn flotilla_cli(bin: &Path, data_dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let o = Command::new(bin).args(["--data-dir", data_dir.to_str().unwrap()]).args(args).output()?;
    anyhow::ensure!(o.status.success(), "flotilla {} failed: {}", args.join(" "), String::from_utf8_lossy(&o.stderr));
    Ok(())
}

/// A simulated cluster with room for 2,000 one-replica Deployments (four nodes of 500
/// pods), registered in push mode with the control plane of `data_dir`.
fn registered_sim(bin: &Path, data_dir: &Path, name: &str) -> anyhow::Result<ServerProc> {
    let yaml = format!("name: {name}\nnodes:\n  - {{count: 4, cpu: \"64\", memory: 256Gi, pods: 500}}\nstartupDelay: 50ms\n");
    let sim = ServerProc::sim(bin, name, &yaml)?;
    flotilla_cli(bin, data_dir, &["cluster", "register", name, "--kubeconfig", sim.kubeconfig.to_str().unwrap()])?;
    Ok(sim)
}

/// The syncer's latencies, in push mode: `deployments` one-replica Deployments spread
/// over `clusters` simulated clusters, each assigned as the scheduler does (label and
/// WorkloadPlacement, the WorkloadPlacement first). Measured from just before the
/// Deployment's create request is sent to the moment this process's watch on the
/// cluster delivers the copy (apply → downstream created), and from the watch delivering
/// the copy as Available to the watch on the workspace delivering the upstream
/// Deployment as Available (status up). The floor is the create request's own round
/// trip.
async fn syncer_latency(bin: &Path, clusters: usize, deployments: usize) -> anyhow::Result<SyncerFigures> {
    use k8s_openapi::api::apps::v1::Deployment;
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Seen = Arc<Mutex<HashMap<String, Instant>>>;

    let cp = ServerProc::start_without_scheduler(bin)?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    let created: Seen = Arc::default();
    let down_available: Seen = Arc::default();
    let mut sims = Vec::new();
    let mut watches = Vec::new();
    for i in 0..clusters {
        let name = format!("c{i}");
        let sim = registered_sim(bin, &data_dir, &name)?;
        let api: Api<Deployment> = Api::all(sim.client(&format!("kind-{name}"), None).await?);
        let (created, down_available) = (created.clone(), down_available.clone());
        watches.push(watch_applied(api, WatchParams::default().labels("workload.flotilla.io/sync-target"), move |d: Deployment, now| {
            let name = d.metadata.name.clone().unwrap_or_default();
            created.lock().unwrap().entry(name.clone()).or_insert(now);
            if available(&d) {
                down_available.lock().unwrap().entry(name).or_insert(now);
            }
        }));
        sims.push(sim);
    }
    let floor_sim_create = create_round_trip(sims[0].client("kind-c0", None).await?, "kube-system", SIM_CREATES).await?;
    flotilla_cli(bin, &data_dir, &["workspace", "create", "bench"])?;
    let ws = cp.client("bench", None).await?;
    let upstream: Api<Deployment> = Api::namespaced(ws.clone(), "default");
    let up_available: Seen = Arc::default();
    {
        let seen = up_available.clone();
        watches.push(watch_applied(upstream.clone(), WatchParams::default(), move |d: Deployment, now| {
            if available(&d) {
                seen.lock().unwrap().entry(d.metadata.name.clone().unwrap_or_default()).or_insert(now);
            }
        }));
    }
    // Let every syncer list and settle before the clock starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let placements = placements_api(ws);
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let mut floor = Vec::new();
    for i in 0..deployments {
        let name = format!("d{i}");
        let cluster = format!("c{}", i % clusters);
        placements.create(&PostParams::default(), &assigned_placement(&name, &cluster)?).await?;
        let d = assigned_deployment(&name, &cluster)?;
        let t = Instant::now();
        upstream.create(&PostParams::default(), &d).await?;
        floor.push(t.elapsed().as_secs_f64() * 1e3);
        sent.insert(name, t);
    }
    wait_until(
        Duration::from_secs(120),
        Duration::from_millis(50),
        || up_available.lock().unwrap().len() >= deployments,
        || {
            let (c, a, u) = (created.lock().unwrap().len(), down_available.lock().unwrap().len(), up_available.lock().unwrap().len());
            format!("after 120 s: {c} copies created, {a} Available downstream, {u}/{deployments} Available upstream")
        },
    )
    .await?;
    for w in &watches {
        w.abort();
    }
    let (created, down, up) =
        (created.lock().unwrap().clone(), down_available.lock().unwrap().clone(), up_available.lock().unwrap().clone());
    let to_created: Vec<f64> = sent.iter().filter_map(|(n, t)| created.get(n).map(|c| c.duration_since(*t).as_secs_f64() * 1e3)).collect();
    let status_up: Vec<f64> =
        down.iter().filter_map(|(n, d)| up.get(n).map(|u| u.saturating_duration_since(*d).as_secs_f64() * 1e3)).collect();
    anyhow::ensure!(to_created.len() == deployments, "only {} of {deployments} copies were seen created", to_created.len());
    let (control_plane_rss_mib, control_plane_cpu_secs) = (cp.settled_rss_mib().await, cp.cpu_secs());
    // The control plane goes first, so its syncers never see their clusters vanish.
    drop(cp);
    drop(sims);
    Ok(SyncerFigures {
        clusters,
        deployments,
        created: summarize(to_created.clone()),
        created_samples: to_created,
        status: summarize(status_up.clone()),
        status_samples: status_up,
        floor_create: summarize(floor),
        floor_sim_create,
        control_plane_rss_mib,
        control_plane_cpu_secs,
    })
}

struct SteadyFigures {
    deployments: usize,
    config_maps: usize,
    /// Copies downstream at the end of the window.
    objects: usize,
    pods: usize,
    resync_secs: u64,
    window_secs: f64,
    converge_secs: f64,
    syncer: ProcWindow,
    syncer_idle_rss_mib: f64,
    syncer_peak_rss_mib: f64,
    control_plane: ProcWindow,
}

/// What one process did over the steady window.
struct ProcWindow {
    /// Median and largest of the RSS samples, MiB.
    rss_mib: f64,
    rss_max_mib: f64,
    /// CPU over the whole window, % of one core.
    cpu_pct: f64,
    /// The busiest one-second slice, % of one core.
    cpu_peak_pct: f64,
}

/// Samples the processes' RSS and CPU once a second for `window`.
async fn sample_window(procs: &[&ServerProc], window: Duration) -> Vec<ProcWindow> {
    let secs = window.as_secs().max(1) as usize;
    let start = Instant::now();
    let cpu0: Vec<f64> = procs.iter().map(|p| p.cpu_secs()).collect();
    let mut last = cpu0.clone();
    let mut rss: Vec<Vec<f64>> = vec![Vec::new(); procs.len()];
    let mut peak = vec![0.0f64; procs.len()];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_at = Instant::now();
    for _ in 0..secs {
        tick.tick().await;
        let slice = last_at.elapsed().as_secs_f64();
        last_at = Instant::now();
        for (i, p) in procs.iter().enumerate() {
            let cpu = p.cpu_secs();
            peak[i] = peak[i].max((cpu - last[i]) / slice * 100.0);
            last[i] = cpu;
            rss[i].push(p.rss_mib());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    procs
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let (median, _, max) = summarize(rss[i].clone());
            ProcWindow { rss_mib: median, rss_max_mib: max, cpu_pct: (last[i] - cpu0[i]) / elapsed * 100.0, cpu_peak_pct: peak[i] }
        })
        .collect()
}

/// The syncer's steady state: one pull-mode `flotilla syncer` process holding
/// `objects` synced objects, half one-replica Deployments and half ConfigMaps (each
/// Deployment references its own ConfigMap through `envFrom`, so the references
/// controller labels them, as it would a user's). Every Deployment is assigned to the
/// one simulated cluster as the scheduler does (the WorkloadPlacement first, then the
/// labelled Deployment). Once every copy exists downstream and every upstream
/// Deployment is Available, and after a settling pause, the syncer's and the control
/// plane's RSS and CPU are sampled from /proc once a second for two resync intervals.
async fn syncer_steady(bin: &Path, objects: usize, resync: Duration) -> anyhow::Result<SteadyFigures> {
    use k8s_openapi::api::apps::v1::Deployment;
    const TARGET: &str = "steady";
    let deployments = objects / 2;
    let config_maps = objects - deployments;
    let cp = ServerProc::start_without_scheduler(bin)?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    // 110 pods a node, with room to spare for one pod per Deployment.
    let nodes = deployments.div_ceil(100).max(2);
    let yaml = format!("name: {TARGET}\nnodes:\n  - {{count: {nodes}, cpu: \"16\", memory: 64Gi, pods: 110}}\nstartupDelay: 50ms\n");
    let sim = ServerProc::sim(bin, TARGET, &yaml)?;
    let upstream_kubeconfig = data_dir.join("syncer-upstream.kubeconfig");
    flotilla_cli(
        bin,
        &data_dir,
        &[
            "cluster",
            "register",
            TARGET,
            "--pull",
            "--kubeconfig",
            sim.kubeconfig.to_str().unwrap(),
            "--upstream-kubeconfig-out",
            upstream_kubeconfig.to_str().unwrap(),
        ],
    )?;
    let syncer = ServerProc::syncer(bin, TARGET, &upstream_kubeconfig, &sim.kubeconfig, resync)?;
    flotilla_cli(bin, &data_dir, &["workspace", "create", "bench"])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let syncer_idle_rss_mib = syncer.settled_rss_mib().await;

    let ws = cp.client("bench", None).await?;
    let upstream: Api<Deployment> = Api::namespaced(ws.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(ws.clone(), "default");
    let placements = placements_api(ws);
    let start = Instant::now();
    futures::stream::iter(0..deployments)
        .map(|i| {
            let (upstream, cms, placements) = (upstream.clone(), cms.clone(), placements.clone());
            async move {
                let name = format!("d{i}");
                let config = format!("cfg{i}");
                cms.create(&PostParams::default(), &cm(&config)).await?;
                placements.create(&PostParams::default(), &assigned_placement(&name, TARGET)?).await?;
                let mut d = assigned_deployment(&name, TARGET)?;
                let pod = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()).unwrap();
                pod.containers[0].env_from = Some(vec![serde_json::from_value(json!({"configMapRef": {"name": config}}))?]);
                upstream.create(&PostParams::default(), &d).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;

    // Converged: every copy downstream, every upstream Deployment Available.
    let down = sim.client(&format!("kind-{TARGET}"), None).await?;
    let mine = kube::api::ListParams::default().labels(&format!("workload.flotilla.io/sync-target={TARGET}"));
    let down_deployments: Api<Deployment> = Api::all(down.clone());
    let down_cms: Api<ConfigMap> = Api::all(down.clone());
    let copies = || async { anyhow::Ok(down_deployments.list(&mine).await?.items.len() + down_cms.list(&mine).await?.items.len()) };
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let (n, up) = (copies().await?, upstream.list(&Default::default()).await?.items.iter().filter(|d| available(d)).count());
        if n == objects && up == deployments {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "after {:.0} s: {n}/{objects} copies downstream, {up}/{deployments} Available upstream",
            start.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let converge_secs = start.elapsed().as_secs_f64();
    let syncer_peak_rss_mib = syncer.peak_rss_mib();
    drop((upstream, cms, placements));
    tokio::time::sleep(resync.min(Duration::from_secs(10))).await;

    let window = resync * 2;
    let mut w = sample_window(&[&syncer, &cp], window).await.into_iter();
    let (syncer_window, control_plane) = (w.next().unwrap(), w.next().unwrap());
    let objects_after = copies().await?;
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::all(down).list(&Default::default()).await?.items.len();
    drop(syncer);
    drop(cp);
    drop(sim);
    Ok(SteadyFigures {
        deployments,
        config_maps,
        objects: objects_after,
        pods,
        resync_secs: resync.as_secs(),
        window_secs: window.as_secs_f64(),
        converge_secs,
        syncer: syncer_window,
        syncer_idle_rss_mib,
        syncer_peak_rss_mib,
        control_plane,
    })
}
