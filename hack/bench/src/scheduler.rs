//! The scheduler's scenarios.
//!
//! - [`assign`]: many Deployments applied at once over many clusters. The clusters are
//!   SyncTargets in pull mode whose heartbeats this harness writes, as their syncers
//!   would, with a fixed capacity: the figures are the scheduler's and the control
//!   plane's alone, with no syncer or cluster process sharing the two cores.
//! - [`failover`]: real simulated clusters and push-mode syncers; one cluster that
//!   hosts every Deployment is killed with SIGKILL, and the clock runs until each
//!   Deployment is Available on another cluster (and, for apps with companions, until
//!   its companions exist there too).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};

use super::*;

pub(crate) const STATE_LABEL_PREFIX: &str = "state.workload.flotilla.io/";

/// The SyncTargets of `root`.
fn sync_targets(root: kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("workload.flotilla.io", "v1alpha1", "SyncTarget"), "synctargets");
    Api::all_with(root, &ar)
}

/// When each SyncTarget was first seen in some state.
pub(crate) type NotReadySeen = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches the SyncTargets' `Ready` condition, as the scheduler's health controller
/// writes it: when each cluster was first seen Ready, and when each first fell from
/// Ready to NotReady.
pub(crate) fn watch_readiness(root: kube::Client) -> (NotReadySeen, NotReadySeen, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let not_ready: NotReadySeen = Arc::default();
    let ready: NotReadySeen = Arc::default();
    let api = sync_targets(root);
    let (nr, r) = (not_ready.clone(), ready.clone());
    let task = watch_applied(api, WatchParams::default(), move |o: DynamicObject, now| {
        let name = o.metadata.name.clone().unwrap_or_default();
        let conditions = o.data.pointer("/status/conditions").and_then(|c| c.as_array()).cloned().unwrap_or_default();
        let status = conditions.iter().find(|c| c["type"] == "Ready").and_then(|c| c["status"].as_str()).unwrap_or("");
        // A new cluster is NotReady until its first heartbeat; only a fall from Ready
        // counts.
        match status {
            "False" if r.lock().unwrap().contains_key(&name) => {
                nr.lock().unwrap().entry(name).or_insert(now);
            }
            "True" => {
                r.lock().unwrap().entry(name).or_insert(now);
            }
            _ => {}
        }
    });
    (not_ready, ready, task)
}

/// A histogram read from `/metrics`: `(upper bound, cumulative count)` per bucket.
fn histogram(metrics: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The `q` quantile of the observations between two readings of a histogram, by
/// linear interpolation within the bucket, as Prometheus's `histogram_quantile` does.
/// Returns the quantile and the number of observations.
fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> (f64, f64) {
    let diff: Vec<(f64, f64)> =
        after.iter().map(|(le, n)| (*le, n - before.iter().find(|(b, _)| b == le).map_or(0.0, |(_, m)| *m))).collect();
    let total = diff.last().map_or(0.0, |(_, n)| *n);
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for (le, n) in &diff {
        if *n >= rank && total > 0.0 {
            if le.is_infinite() {
                return (lower.0, total);
            }
            let within = if n - lower.1 > 0.0 { (rank - lower.1) / (n - lower.1) } else { 1.0 };
            return (lower.0 + (le - lower.0) * within, total);
        }
        lower = (*le, *n);
    }
    (f64::NAN, total)
}

/// Write requests the API server has answered, by `verb resource` (and the code when
/// it is not a success), from its
/// `flotilla_apiserver_requests_total` counter.
fn writes(metrics: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for l in metrics.lines().filter_map(|l| l.strip_prefix("flotilla_apiserver_requests_total{")) {
        let Some((labels, n)) = l.split_once("} ") else { continue };
        let label =
            |k: &str| labels.split(',').find_map(|kv| kv.strip_prefix(&format!("{k}=\""))).map(|v| v.trim_end_matches('"').to_string());
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else { continue };
        if matches!(verb.as_str(), "create" | "update" | "patch" | "delete") {
            // Refused writes cost a round trip too, and say the cache was behind.
            let key = match label("code").filter(|c| !c.starts_with('2')) {
                Some(code) => format!("{verb} {resource} ({code})"),
                None => format!("{verb} {resource}"),
            };
            *out.entry(key).or_default() += n.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    out
}

/// A labelled counter in `/metrics`, summed over its series (0 when absent).
fn counter_total(metrics: &str, name: &str) -> f64 {
    metrics.lines().filter_map(|l| l.strip_prefix(name)?.strip_prefix('{')?.split_once("} ")?.1.trim().parse::<f64>().ok()).sum()
}

/// The value of an unlabelled counter in `/metrics` (0 when absent).
fn counter(metrics: &str, name: &str) -> f64 {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

/// The store's commits between two readings of `/metrics`: how many, the mean writes
/// per commit, and the p99 of a commit's duration in ms.
fn commit_figures(before: &str, after: &str) -> (f64, f64, f64) {
    let sum = |m: &str| counter(m, "flotilla_store_commit_writes_sum");
    let (p99, commits) = quantile(
        &histogram(before, "flotilla_store_commit_duration_seconds"),
        &histogram(after, "flotilla_store_commit_duration_seconds"),
        0.99,
    );
    let per_commit = if commits > 0.0 { (sum(after) - sum(before)) / commits } else { f64::NAN };
    (commits, per_commit, p99 * 1e3)
}

/// The API writes between two readings of `/metrics`, per Deployment, most first.
pub(crate) fn per_deployment(before: &str, after: &str, deployments: usize) -> Vec<(String, f64)> {
    let (w0, w1) = (writes(before), writes(after));
    let mut out: Vec<(String, f64)> =
        w1.iter().map(|(k, n)| (k.clone(), (n - w0.get(k).unwrap_or(&0.0)) / deployments as f64)).filter(|(_, n)| *n > 0.0).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// What a fake cluster's syncer reports: a fixed capacity, four equal nodes.
fn fake_status(now: &str) -> serde_json::Value {
    json!({"status": {
        "lastSyncerHeartbeatTime": now,
        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "440"},
        "available": {"cpu": "32", "memory": "128Gi", "pods": "440"},
        "nodeHeadroom": [{"cpu": "8", "memory": "32Gi", "pods": 110, "nodes": 4}],
        "cpu": "32/32", "memory": "128Gi/128Gi",
    }})
}

/// Beats for every fake cluster every `interval`, as many syncers would, until dropped.
fn fake_heartbeats(api: Api<DynamicObject>, names: Vec<String>, interval: Duration) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            futures::stream::iter(names.clone())
                .map(|n| {
                    let (api, patch) = (api.clone(), fake_status(&now));
                    async move { api.patch_status(&n, &PatchParams::default(), &Patch::Merge(patch)).await }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await?;
        }
    })
}

pub struct AssignFigures {
    pub clusters: usize,
    pub deployments: usize,
    /// The scheduler's in-memory decision, µs: p50, p99, and how many decisions.
    pub decision_us: (f64, f64, f64),
    /// From the first create sent to the last Deployment labelled with its cluster, s.
    pub all_assigned_s: f64,
    /// From the first create sent to the last create acknowledged, s.
    pub creates_done_s: f64,
    /// The same creates on a control plane with no scheduler, first sent to last
    /// acknowledged, s: the floor.
    pub creates_without_scheduler_s: f64,
    /// Each Deployment, create sent to labelled, ms (p50, p99, max), and every sample.
    pub assigned_ms: (f64, f64, f64),
    pub assigned_samples: Vec<f64>,
    /// Each create's round trip, ms (p50, p99, max).
    pub floor_create_ms: (f64, f64, f64),
    /// Clusters the scheduler declared NotReady during the run (all beat on time).
    pub false_not_ready: usize,
    /// API writes during the run per Deployment, by `verb resource`, most first; the
    /// harness's own creates and heartbeats included.
    pub writes_per_deployment: Vec<(String, f64)>,
    /// Events the scheduler dropped because its queue was full.
    pub events_dropped: f64,
    /// The store's commits during the run: how many, the writes that shared one on
    /// average, and a commit's p99 with its fsync, ms.
    pub commits: (f64, f64, f64),
    pub control_plane_rss_mib: f64,
    pub control_plane_cpu_secs: f64,
    /// `flotilla what-if --lose` of one cluster once all are assigned: the whole
    /// command, s; the workloads it found affected; and its floor, `flotilla status -o
    /// json` of the same workspace (which lists the same objects), s.
    pub what_if_s: f64,
    pub what_if_affected: usize,
    pub what_if_floor_s: f64,
}

/// Runs `flotilla ARGS` against the control plane of `data_dir`: how long it took, s, and
/// what it printed.
fn timed_cli(bin: &Path, data_dir: &Path, args: &[&str]) -> anyhow::Result<(f64, String)> {
    let t = Instant::now();
    let o = std::process::Command::new(bin).args(["--data-dir", data_dir.to_str().unwrap()]).args(args).output()?;
    let took = t.elapsed().as_secs_f64();
    anyhow::ensure!(o.status.success(), "flotilla {} failed: {}", args.join(" "), String::from_utf8_lossy(&o.stderr));
    Ok((took, String::from_utf8_lossy(&o.stdout).into_owned()))
}

/// `deployments` one-replica Deployments applied by 16 concurrent clients to one
/// workspace, over `clusters` fake clusters in four regions under the `default`
/// Placement. Measured: each Deployment from its create request being sent to this
/// process's watch seeing it labelled `state.workload.flotilla.io/<cluster>` (the
/// scheduler's last write before its condition), and the whole batch to the last
/// one. The decision latency is the scheduler's own histogram, read from `/metrics`
/// before and after.
pub async fn assign(bin: &Path, clusters: usize, deployments: usize) -> anyhow::Result<AssignFigures> {
    let cp = ServerProc::start(bin)?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    let root = cp.client("root", None).await?;
    let targets = sync_targets(root.clone());
    let (not_ready, ready, readiness) = watch_readiness(root.clone());
    let names: Vec<String> = (0..clusters).map(|i| format!("c{i:03}")).collect();
    for (i, name) in names.iter().enumerate() {
        let st: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "workload.flotilla.io/v1alpha1", "kind": "SyncTarget",
            "metadata": {"name": name, "labels": {"region": format!("r{}", i % 4)}},
            "spec": {"syncMode": "Pull"},
        }))?;
        targets.create(&PostParams::default(), &st).await?;
    }
    let beating = fake_heartbeats(targets.clone(), names.clone(), Duration::from_secs(2));
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || ready.lock().unwrap().len() >= clusters,
        || format!("only {}/{clusters} fake clusters Ready after 60 s", ready.lock().unwrap().len()),
    )
    .await?;
    flotilla_cli(bin, &data_dir, &["workspace", "create", "bench"])?;
    let ws = cp.client("bench", None).await?;
    let upstream: Api<Deployment> = Api::namespaced(ws, "default");

    let labelled: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = labelled.clone();
    let watch = watch_applied(upstream.clone(), WatchParams::default(), move |d: Deployment, now| {
        if d.metadata.labels.iter().flatten().any(|(k, _)| k.starts_with(STATE_LABEL_PREFIX)) {
            seen.lock().unwrap().entry(d.metadata.name.clone().unwrap_or_default()).or_insert(now);
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let metric = "flotilla_scheduler_decision_duration_seconds";
    let metrics_before = root.request_text(http_get("/metrics")).await?;
    let before = histogram(&metrics_before, metric);

    let start = Instant::now();
    let sent = create_all(&upstream, deployments).await?;
    let creates_done_s = start.elapsed().as_secs_f64();
    wait_until(
        Duration::from_secs(300),
        Duration::from_millis(20),
        || labelled.lock().unwrap().len() >= deployments,
        || {
            format!(
                "after {:.0} s only {}/{deployments} Deployments were assigned",
                start.elapsed().as_secs_f64(),
                labelled.lock().unwrap().len()
            )
        },
    )
    .await?;
    let metrics_after = root.request_text(http_get("/metrics")).await?;
    let after = histogram(&metrics_after, metric);
    let writes_per_deployment = per_deployment(&metrics_before, &metrics_after, deployments);
    let events_dropped = counter(&metrics_after, "flotilla_scheduler_events_dropped_total");
    let commits = commit_figures(&metrics_before, &metrics_after);
    watch.abort();
    let labelled = labelled.lock().unwrap().clone();
    let last = labelled.values().max().copied().unwrap_or(start);
    let assigned: Vec<f64> =
        sent.iter().filter_map(|(n, t, _)| labelled.get(n).map(|l| l.duration_since(*t).as_secs_f64() * 1e3)).collect();
    let (p50, n) = quantile(&before, &after, 0.5);
    let (p99, _) = quantile(&before, &after, 0.99);
    let false_not_ready = not_ready.lock().unwrap().len();
    // A dry run of losing the first cluster, over every workload of the workspace.
    let (what_if_s, out) = timed_cli(bin, &data_dir, &["what-if", "--lose", &names[0], "--workspace", "bench"])?;
    let what_if_affected = out
        .lines()
        .find_map(|l| l.split_once(" workload(s) affected").and_then(|(n, _)| n.trim().parse().ok()))
        .with_context(|| format!("what-if printed no count of affected workloads:\n{out}"))?;
    let (what_if_floor_s, _) = timed_cli(bin, &data_dir, &["status", "-o", "json", "--workspace", "bench"])?;
    let figures = AssignFigures {
        clusters,
        deployments,
        decision_us: (p50 * 1e6, p99 * 1e6, n),
        all_assigned_s: last.duration_since(start).as_secs_f64(),
        creates_done_s,
        creates_without_scheduler_s: f64::NAN,
        assigned_ms: summarize(assigned.clone()),
        assigned_samples: assigned,
        floor_create_ms: summarize(sent.iter().map(|(_, _, ms)| *ms).collect()),
        false_not_ready,
        writes_per_deployment,
        events_dropped,
        commits,
        control_plane_rss_mib: cp.settled_rss_mib().await,
        control_plane_cpu_secs: cp.cpu_secs(),
        what_if_s,
        what_if_affected,
        what_if_floor_s,
    };
    beating.abort();
    readiness.abort();
    drop(cp);
    Ok(AssignFigures { creates_without_scheduler_s: creates_without_scheduler(bin, deployments).await?, ..figures })
}

/// Creates `d00000`.. one-replica Deployments, 16 requests in flight; each one's name,
/// when it was sent, and its round trip in ms.
async fn create_all(api: &Api<Deployment>, deployments: usize) -> anyhow::Result<Vec<(String, Instant, f64)>> {
    futures::stream::iter(0..deployments)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("d{i:05}");
                let d = bench_deployment(&name, 1)?;
                let t = Instant::now();
                api.create(&PostParams::default(), &d).await?;
                anyhow::Ok((name, t, t.elapsed().as_secs_f64() * 1e3))
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
}

/// The floor under the assign figure: the same creates by the same clients on a fresh
/// control plane with no scheduler (and so nothing to place), in s.
async fn creates_without_scheduler(bin: &Path, deployments: usize) -> anyhow::Result<f64> {
    let cp = ServerProc::start_without_scheduler(bin)?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    flotilla_cli(bin, &data_dir, &["workspace", "create", "bench"])?;
    let upstream: Api<Deployment> = Api::namespaced(cp.client("bench", None).await?, "default");
    // As in `assign`, which starts its watch here.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    create_all(&upstream, deployments).await?;
    Ok(start.elapsed().as_secs_f64())
}

pub struct FailoverFigures {
    pub deployments: usize,
    pub heartbeat_interval_s: u64,
    pub grace_s: u64,
    /// From the kill to the lost cluster seen `Ready=False`, s.
    pub detected_s: f64,
    /// From the kill to the first and the last Deployment reassigned, s.
    pub first_moved_s: f64,
    pub all_moved_s: f64,
    /// From the kill to the last Deployment Available on another cluster, s.
    pub all_available_s: f64,
    /// Each Deployment, kill to Available elsewhere, s (p50, p99, max).
    pub available_s: (f64, f64, f64),
    /// Every Deployment's reassignment and Available-elsewhere time, s from the kill.
    pub moved: Vec<f64>,
    pub available: Vec<f64>,
    /// Every app's time, s from the kill, to Available elsewhere with its companions
    /// copied to its new clusters (the Available time for a bare Deployment); the
    /// last, and the p50, p99 and max of each app's from Available to that.
    pub done: Vec<f64>,
    pub all_done_s: f64,
    pub done_s: (f64, f64, f64),
    pub done_after_available_s: (f64, f64, f64),
    /// Each app, from the kill to its companions assigned to its new clusters upstream
    /// (by the companions controller), s (p50, p99, max); none without companions.
    pub companions_assigned_s: (f64, f64, f64),
    /// Each Deployment, from its move to Available on its new cluster, s (p50, p99, max).
    pub move_to_available_s: (f64, f64, f64),
    /// Where that time goes, each Deployment's stages (p50, p99, max), as this process
    /// sees them from watches of the WorkloadPlacements and of the spares' Deployments:
    /// from its move to its copy created on the new cluster (the syncer's push), from
    /// there to the copy Available there (the cluster), and from there to the
    /// WorkloadPlacement's status saying so (the syncer's report).
    pub stages_s: Vec<(&'static str, (f64, f64, f64))>,
    /// The clusters' own floor under that, measured after the failover on the same
    /// spares: as many one-replica Deployments, half on each, created straight on the
    /// spares at once (16 creates in flight on each, as a syncer has), to all
    /// Available there, s.
    pub cluster_floor_s: f64,
    /// Surviving clusters declared NotReady at any point (they all beat on time).
    pub false_not_ready: usize,
    /// API writes from the kill to the last Deployment Available, per Deployment.
    pub writes_per_deployment: Vec<(String, f64)>,
    /// Progress reports the syncers put off for want of budget in that time, all
    /// clusters together.
    pub progress_reports_deferred: f64,
    /// CPU seconds each process used from the kill to the last Deployment Available:
    /// the control plane (API server, scheduler, syncers, aggregator), each spare, and
    /// the harness itself (its watch of the WorkloadPlacements).
    pub cpu_secs: Vec<(String, f64)>,
}

/// Creates `deployments` one-replica Deployments straight on the spares, half on each,
/// in a namespace of their own, and times them from the first create to the last one
/// Available, in s.
async fn spares_floor(spares: &[ServerProc; 2], deployments: usize) -> anyhow::Result<f64> {
    const NS: &str = "floor";
    let mut apis = Vec::new();
    let available: Arc<Mutex<usize>> = Arc::default();
    let mut watches = Vec::new();
    for (spare, name) in spares.iter().zip(["spare-a", "spare-b"]) {
        let client = spare.client(&format!("kind-{name}"), None).await?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await?;
        let api: Api<Deployment> = Api::namespaced(client, NS);
        let count = available.clone();
        let mut seen = std::collections::HashSet::new();
        watches.push(watch_applied(api.clone(), WatchParams::default(), move |d: Deployment, _| {
            if d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) >= 1
                && seen.insert(d.metadata.name.clone().unwrap_or_default())
            {
                *count.lock().unwrap() += 1;
            }
        }));
        apis.push(api);
    }
    // The watches are open before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let half = deployments / 2;
    let (a, b) = futures::join!(create_all(&apis[0], half), create_all(&apis[1], deployments - half));
    a?;
    b?;
    let done = || *available.lock().unwrap() >= deployments;
    let result = wait_until(Duration::from_secs(120), Duration::from_millis(20), done, || {
        format!("after 120 s only {}/{deployments} Deployments created on the spares were Available", available.lock().unwrap())
    })
    .await;
    let took = start.elapsed().as_secs_f64();
    for w in &watches {
        w.abort();
    }
    result.map(|()| took)
}

/// A Deployment's copy on a spare: when it was first seen, and first seen Available.
type CopySeen = (Instant, Option<Instant>);

/// Where one Deployment stands, from its WorkloadPlacement.
#[derive(Default, Clone)]
struct Standing {
    /// When its assignment stopped naming the lost cluster.
    moved: Option<Instant>,
    /// When another cluster first reported it Available, after the move.
    available: Option<Instant>,
    /// The clusters that report it Available.
    available_on: Vec<String>,
    /// The clusters it is assigned to.
    assigned: Vec<String>,
}

/// Kill a cluster that hosts `deployments` one-replica Deployments, with two empty
/// clusters ready to take them, and time the failover from the SIGKILL: the lost
/// cluster seen NotReady, each Deployment's WorkloadPlacement no longer naming it,
/// and each Deployment reported Available (availableReplicas ≥ 1) by its new
/// cluster's syncer in the WorkloadPlacement's status. With `companions`, each
/// Deployment is an app with its four companions ([`companions::kinds`]), all on the
/// lost cluster before the kill, and an app is done once its Deployment is Available
/// elsewhere and this process's watches on its new clusters have seen its companions.
/// With `etcd_servers`, the control plane keeps its data in that etcd.
pub async fn failover(
    bin: &Path,
    deployments: usize,
    interval: Duration,
    grace: Duration,
    companions: bool,
    etcd_servers: Option<&str>,
) -> anyhow::Result<FailoverFigures> {
    use crate::companions::{copied, create_app, kinds, watch_assigned, watch_copies, Copies, Seen, COMPANIONS};
    const LOST: &str = "lost";
    let (i, g) = (format!("{}s", interval.as_secs()), format!("{}s", grace.as_secs()));
    let mut args = vec!["start", "--listen", "127.0.0.1:0", "--heartbeat-interval", &i, "--heartbeat-grace", &g];
    if let Some(servers) = etcd_servers {
        args.extend(["--etcd-servers", servers]);
    }
    let cp = ServerProc::spawn(bin, tempfile::tempdir()?, &args, "admin.kubeconfig")?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    let root = cp.client("root", None).await?;
    let (not_ready, ready, readiness) = watch_readiness(root.clone());
    // Each cluster can hold every Deployment: 110 pods a node.
    let nodes = deployments.div_ceil(100) + 1;
    let sim = |name: &str| {
        let yaml = format!("name: {name}\nnodes:\n  - {{count: {nodes}, cpu: \"32\", memory: 128Gi, pods: 110}}\nstartupDelay: 50ms\n");
        ServerProc::sim(bin, name, &yaml)
    };
    let register = |sim: &ServerProc, name: &str| {
        flotilla_cli(bin, &data_dir, &["cluster", "register", name, "--kubeconfig", sim.kubeconfig.to_str().unwrap()])
    };
    let lost = sim(LOST)?;
    register(&lost, LOST)?;
    let copies: Copies = Arc::default();
    let mut watches = Vec::new();
    if companions {
        watches.extend(watch_copies(&lost, LOST, &COMPANIONS, &copies).await?);
    }
    flotilla_cli(bin, &data_dir, &["workspace", "create", "bench"])?;
    let ws = cp.client("bench", None).await?;
    let labelled: Copies = Arc::default();
    if companions {
        watches.extend(watch_assigned(&ws, &COMPANIONS, &labelled));
    }

    let standing: Arc<Mutex<HashMap<String, Standing>>> = Arc::default();
    let seen = standing.clone();
    // Typed, and not as a DynamicObject: the harness decodes every change of 1,000
    // WorkloadPlacements on the cores it measures, so it decodes them the cheaper way.
    let placements: Api<placement_api::WorkloadPlacement> = Api::namespaced(ws.clone(), "default");
    let watch = watch_applied(placements, WatchParams::default(), move |wp: placement_api::WorkloadPlacement, now| {
        let assigned: Vec<String> = wp.spec.clusters.iter().map(|c| c.name.clone()).collect();
        let available_on: Vec<String> =
            wp.status.iter().flat_map(|s| &s.clusters).filter(|c| c.available_replicas >= 1).map(|c| c.name.clone()).collect();
        let mut all = seen.lock().unwrap();
        let s = all.entry(wp.metadata.name.clone().unwrap_or_default()).or_default();
        let moved = !assigned.is_empty() && !assigned.iter().any(|c| c == LOST);
        if moved && s.moved.is_none() {
            s.moved = Some(now);
        }
        if moved && s.available.is_none() && available_on.iter().any(|c| c != LOST && assigned.contains(c)) {
            s.available = Some(now);
        }
        s.available_on = available_on;
        s.assigned = assigned;
    });
    let names: Vec<String> = (0..deployments).map(|i| format!("d{i:04}")).collect();
    futures::stream::iter(&names)
        .map(|name| {
            let ws = &ws;
            async move { create_app(ws, "default", name, kinds(companions)).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let on_lost = || standing.lock().unwrap().values().filter(|s| s.available_on == [LOST]).count();
    let lost_cluster = [LOST.to_string()];
    let companions_on_lost = || {
        let copies = copies.lock().unwrap();
        names.iter().filter(|n| !companions || copied(&copies, &lost_cluster, &COMPANIONS, n).is_some()).count()
    };
    wait_until(
        Duration::from_secs(300),
        Duration::from_millis(200),
        || on_lost() >= deployments && companions_on_lost() >= deployments,
        || {
            format!(
                "after 300 s only {}/{deployments} Deployments were Available on {LOST}, {} with their companions there",
                on_lost(),
                companions_on_lost()
            )
        },
    )
    .await?;
    let spares = [sim("spare-a")?, sim("spare-b")?];
    register(&spares[0], "spare-a")?;
    register(&spares[1], "spare-b")?;
    // The copies on the spares: when each was created, and first Available.
    let downstream: Arc<Mutex<HashMap<String, CopySeen>>> = Arc::default();
    let mut copy_watches = Vec::new();
    for (spare, name) in spares.iter().zip(["spare-a", "spare-b"]) {
        let client = spare.client(&format!("kind-{name}"), None).await?;
        let seen = downstream.clone();
        copy_watches.push(watch_applied(Api::<Deployment>::all(client), WatchParams::default(), move |d: Deployment, now| {
            let available = d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) >= 1;
            let mut all = seen.lock().unwrap();
            let e = all.entry(d.metadata.name.clone().unwrap_or_default()).or_insert((now, None));
            if available && e.1.is_none() {
                e.1 = Some(now);
            }
        }));
    }
    if companions {
        for (spare, name) in spares.iter().zip(["spare-a", "spare-b"]) {
            watches.extend(watch_copies(spare, name, &COMPANIONS, &copies).await?);
        }
    }
    let spares_ready = || ["spare-a", "spare-b"].iter().all(|c| ready.lock().unwrap().contains_key(*c));
    wait_until(Duration::from_secs(60), Duration::from_millis(100), spares_ready, || "the spare clusters were not Ready after 60 s".into())
        .await?;
    // Two heartbeats, so the spares' capacity is known and the lost cluster's last
    // beat is at a random point of its interval when the kill comes.
    tokio::time::sleep(interval * 2).await;

    let metrics_before = root.request_text(http_get("/metrics")).await?;
    // The harness too: its watch of every WorkloadPlacement runs on the same cores.
    let cpu = || {
        [
            ("control plane", cp.cpu_secs()),
            ("spare-a", spares[0].cpu_secs()),
            ("spare-b", spares[1].cpu_secs()),
            ("harness", crate::process_cpu_secs(std::process::id())),
        ]
    };
    let cpu_before = cpu();
    let killed = Instant::now();
    drop(lost);
    // When an app was whole elsewhere: its Deployment Available, its companions copied.
    let whole_at = |name: &str, s: &Standing, copies: &Seen| -> Option<Instant> {
        let available = s.available?;
        let copied_at = if companions { copied(copies, &s.assigned, &COMPANIONS, name)? } else { available };
        Some(available.max(copied_at))
    };
    let done = || {
        let copies = copies.lock().unwrap();
        standing.lock().unwrap().iter().filter(|(n, s)| whole_at(n, s, &copies).is_some()).count()
    };
    let available = || standing.lock().unwrap().values().filter(|s| s.available.is_some()).count();
    wait_until(
        grace + Duration::from_secs(120),
        Duration::from_millis(20),
        || done() >= deployments,
        || {
            format!(
                "{:.0} s after the kill only {}/{deployments} Deployments were Available elsewhere, {} with their companions there",
                killed.elapsed().as_secs_f64(),
                available(),
                done()
            )
        },
    )
    .await?;
    let metrics_after = root.request_text(http_get("/metrics")).await?;
    let cpu_secs = cpu().iter().zip(cpu_before).map(|((name, after), (_, before))| (name.to_string(), after - before)).collect();
    watch.abort();
    readiness.abort();
    for w in watches.iter().chain(&copy_watches) {
        w.abort();
    }
    let cluster_floor_s = spares_floor(&spares, deployments).await?;
    let writes_per_deployment = per_deployment(&metrics_before, &metrics_after, deployments);
    let deferred = |m: &str| counter_total(m, "flotilla_syncer_progress_reports_deferred_total");
    let progress_reports_deferred = deferred(&metrics_after) - deferred(&metrics_before);
    let since = |t: Instant| t.saturating_duration_since(killed).as_secs_f64();
    let detected = not_ready.lock().unwrap().get(LOST).copied();
    let false_not_ready = not_ready.lock().unwrap().keys().filter(|c| *c != LOST).count();
    let standing = standing.lock().unwrap().clone();
    let moved: Vec<f64> = standing.values().filter_map(|s| s.moved.map(since)).collect();
    let available: Vec<f64> = standing.values().filter_map(|s| s.available.map(since)).collect();
    let lag: Vec<f64> = standing.values().filter_map(|s| Some(s.available?.saturating_duration_since(s.moved?).as_secs_f64())).collect();
    let downstream = downstream.lock().unwrap().clone();
    let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    let mut stages: [Vec<f64>; 3] = Default::default();
    for (name, s) in &standing {
        let (Some(moved), Some(available), Some((created, Some(ready)))) = (s.moved, s.available, downstream.get(name)) else { continue };
        stages[0].push(secs(moved, *created));
        stages[1].push(secs(*created, *ready));
        stages[2].push(secs(*ready, available));
    }
    let [push, start, report] = stages;
    let stages_s = vec![
        ("move_to_copy", summarize(push)),
        ("copy_to_available_there", summarize(start)),
        ("available_there_to_reported", summarize(report)),
    ];
    let copies = copies.lock().unwrap().clone();
    let whole: Vec<(Instant, Instant)> = standing.iter().filter_map(|(n, s)| Some((s.available?, whole_at(n, s, &copies)?))).collect();
    let done: Vec<f64> = whole.iter().map(|(_, w)| since(*w)).collect();
    let done_after_available: Vec<f64> = whole.iter().map(|(a, w)| w.duration_since(*a).as_secs_f64()).collect();
    let labelled = labelled.lock().unwrap().clone();
    let companions_assigned: Vec<f64> =
        standing.iter().filter_map(|(n, s)| copied(&labelled, &s.assigned, &COMPANIONS, n)).map(since).collect();
    drop(cp);
    drop(spares);
    Ok(FailoverFigures {
        deployments,
        heartbeat_interval_s: interval.as_secs(),
        grace_s: grace.as_secs(),
        detected_s: detected.map_or(f64::NAN, since),
        first_moved_s: moved.iter().copied().fold(f64::INFINITY, f64::min),
        all_moved_s: moved.iter().copied().fold(0.0, f64::max),
        all_available_s: available.iter().copied().fold(0.0, f64::max),
        available_s: summarize(available.clone()),
        moved,
        available,
        all_done_s: done.iter().copied().fold(0.0, f64::max),
        done_s: summarize(done.clone()),
        done,
        done_after_available_s: summarize(done_after_available),
        companions_assigned_s: summarize(companions_assigned),
        move_to_available_s: summarize(lag),
        stages_s,
        cluster_floor_s,
        false_not_ready,
        writes_per_deployment,
        progress_reports_deferred,
        cpu_secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_the_bucket_of_the_difference() {
        let before = [(0.001, 10.0), (0.002, 10.0), (f64::INFINITY, 10.0)];
        let after = [(0.001, 60.0), (0.002, 110.0), (f64::INFINITY, 110.0)];
        let (p50, n) = quantile(&before, &after, 0.5);
        assert_eq!(n, 100.0);
        assert!((p50 - 0.001).abs() < 1e-12, "{p50}");
        let (p99, _) = quantile(&before, &after, 0.99);
        assert!((p99 - 0.00198).abs() < 1e-9, "{p99}");
        let text = "x_bucket{le=\"0.001\"} 3\nx_bucket{le=\"+Inf\"} 4\nx_count 4\n";
        assert_eq!(histogram(text, "x"), vec![(0.001, 3.0), (f64::INFINITY, 4.0)]);
    }

    #[test]
    fn writes_are_counted_per_deployment_with_refusals_apart_and_reads_left_out() {
        let line = |verb: &str, code: &str, n: u32| {
            format!("flotilla_apiserver_requests_total{{verb=\"{verb}\",resource=\"deployments\",code=\"{code}\"}} {n}\n")
        };
        let before = [line("create", "201", 10), line("patch", "200", 4), line("patch", "409", 0), line("get", "200", 7)].concat();
        let after = [line("create", "201", 30), line("patch", "200", 44), line("patch", "409", 5), line("get", "200", 900)].concat();
        let per = per_deployment(&before, &after, 20);
        assert_eq!(
            per,
            vec![
                ("patch deployments".to_string(), 2.0),
                ("create deployments".to_string(), 1.0),
                ("patch deployments (409)".to_string(), 0.25)
            ]
        );
    }

    #[test]
    fn a_labelled_counter_is_summed_over_its_series_and_no_other() {
        let m = "# HELP x_total x\nx_total{cluster=\"a\"} 3\nx_total{cluster=\"b\"} 4.5\nx_total_other{cluster=\"a\"} 100\nx_totals 9\n";
        assert_eq!(counter_total(m, "x_total"), 7.5);
        assert_eq!(counter_total(m, "y_total"), 0.0);
    }
}
