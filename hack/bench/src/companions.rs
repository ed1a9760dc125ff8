//! The scenarios of apps with companions. An app is five objects: a one-replica
//! Deployment, a Service whose selector is its pod labels, an Ingress whose backend is
//! that Service, and a PodDisruptionBudget and a NetworkPolicy that select its pods.
//! The control plane's companions controller gives each companion the assignment of
//! the Deployment it follows, and the syncers copy it to the same clusters.
//!
//! - [`rows_apply`]: apps applied one after the other at a fixed pace to a workspace,
//!   placed by the real scheduler over simulated clusters; each app from the moment
//!   its five objects exist upstream to the moment all five exist on its cluster,
//!   beside the same figure for as many bare Deployments on the same processes.
//! - [`rows_failover`]: [`scheduler::failover`] with apps instead of bare
//!   Deployments; the clock stops when every app is Available elsewhere and its
//!   companions exist there.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, PostParams, WatchParams};
use kube::core::GroupVersionKind;
use kube::ResourceExt;
use serde_json::json;

use crate::report::{int, num, Better, Report, Row, Timeline};
use crate::scheduler::{self, per_deployment, watch_readiness, STATE_LABEL_PREFIX};
use crate::{available, bench_deployment, flotilla_cli, http_get, registered_sim, summarize, wait_until, watch_applied, ServerProc};

#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Simulated clusters of the apply scenario.
    pub clusters: usize,
    /// Apps of the apply scenario, and as many bare Deployments.
    pub apps: usize,
    /// Apps on the cluster that the failover kills.
    pub failover_apps: usize,
}

/// One kind of an app's objects.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
}

impl Kind {
    fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(self.group, "v1", self.kind), self.plural)
    }

    /// The object of this kind in app `name`.
    fn object(&self, name: &str) -> anyhow::Result<DynamicObject> {
        let selector = json!({"matchLabels": {"app": name}});
        let (api_version, spec) = match self.kind {
            "Deployment" => ("apps/v1", serde_json::to_value(bench_deployment(name, 1)?)?["spec"].take()),
            "Service" => ("v1", json!({"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]})),
            "Ingress" => (
                "networking.k8s.io/v1",
                json!({"rules": [{"host": format!("{name}.bench.example"), "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}),
            ),
            "PodDisruptionBudget" => ("policy/v1", json!({"minAvailable": 1, "selector": selector})),
            "NetworkPolicy" => ("networking.k8s.io/v1", json!({"podSelector": selector, "ingress": [{"ports": [{"port": 8080}]}]})),
            other => anyhow::bail!("no object of kind {other} in an app"),
        };
        Ok(serde_json::from_value(json!({"apiVersion": api_version, "kind": self.kind, "metadata": {"name": name}, "spec": spec}))?)
    }
}

const DEPLOYMENT: Kind = Kind { group: "apps", kind: "Deployment", plural: "deployments" };
const SERVICE: Kind = Kind { group: "", kind: "Service", plural: "services" };
const INGRESS: Kind = Kind { group: "networking.k8s.io", kind: "Ingress", plural: "ingresses" };
const PDB: Kind = Kind { group: "policy", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets" };
const NETWORK_POLICY: Kind = Kind { group: "networking.k8s.io", kind: "NetworkPolicy", plural: "networkpolicies" };

/// What follows an app's Deployment.
pub const COMPANIONS: [Kind; 4] = [NETWORK_POLICY, PDB, SERVICE, INGRESS];
/// An app's objects in the order Helm installs them (helm pkg/releaseutil/kind_sorter.go):
/// the NetworkPolicy, PodDisruptionBudget and Service before the Deployment, the
/// Ingress after it.
const APP: [Kind; 5] = [NETWORK_POLICY, PDB, SERVICE, DEPLOYMENT, INGRESS];
const BARE: [Kind; 1] = [DEPLOYMENT];

/// The objects of one app: with its companions, or the Deployment alone.
pub fn kinds(companions: bool) -> &'static [Kind] {
    if companions {
        &APP
    } else {
        &BARE
    }
}

/// Creates app `name`'s objects of `kinds` in `namespace`, one after the other, as
/// `kubectl apply` would; returns when the first create was sent and when the last
/// was acknowledged.
pub async fn create_app(client: &kube::Client, namespace: &str, name: &str, kinds: &[Kind]) -> anyhow::Result<(Instant, Instant)> {
    let sent = Instant::now();
    for k in kinds {
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &k.resource())
            .create(&PostParams::default(), &k.object(name)?)
            .await?;
    }
    Ok((sent, Instant::now()))
}

/// When this process's watches first saw each copy, by (cluster, kind, name).
pub type Seen = HashMap<(String, &'static str, String), Instant>;
pub type Copies = Arc<Mutex<Seen>>;

type Watches = Vec<tokio::task::JoinHandle<anyhow::Result<()>>>;

/// Watches the objects of `kinds` that `client` sees through `params` and notes in `seen`
/// when each was first seen for each of the clusters that `clusters` finds in it,
/// until the tasks are aborted.
fn watch_kinds(
    client: &kube::Client,
    kinds: &[Kind],
    params: &WatchParams,
    seen: &Copies,
    clusters: fn(&DynamicObject) -> Vec<String>,
) -> Watches {
    kinds
        .iter()
        .map(|k| {
            let (seen, kind) = (seen.clone(), k.kind);
            let api = Api::<DynamicObject>::all_with(client.clone(), &k.resource());
            watch_applied(api, params.clone(), move |o: DynamicObject, now| {
                let name = o.metadata.name.clone().unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                for c in clusters(&o) {
                    seen.entry((c, kind, name.clone())).or_insert(now);
                }
            })
        })
        .collect()
}

/// Watches the copies of `kinds` on simulated cluster `sim` (what a syncer labels with
/// its sync target) and notes in `copies` when each was first seen there.
pub async fn watch_copies(sim: &ServerProc, cluster: &str, kinds: &[Kind], copies: &Copies) -> anyhow::Result<Watches> {
    let client = sim.client(&format!("kind-{cluster}"), None).await?;
    let target = |o: &DynamicObject| o.labels().get("workload.flotilla.io/sync-target").cloned().into_iter().collect();
    Ok(watch_kinds(&client, kinds, &WatchParams::default().labels("workload.flotilla.io/sync-target"), copies, target))
}

/// Watches a workspace's objects of `kinds` (of every namespace) and notes in
/// `assigned` when each was first seen assigned to each cluster: labelled
/// `state.workload.flotilla.io/<cluster>=Sync`, by the scheduler for a Deployment and
/// by the companions controller for a companion.
pub fn watch_assigned(ws: &kube::Client, kinds: &[Kind], assigned: &Copies) -> Watches {
    let targets = |o: &DynamicObject| {
        let labels = o.labels().iter().filter(|(_, v)| *v == "Sync");
        labels.filter_map(|(k, _)| k.strip_prefix(STATE_LABEL_PREFIX).map(String::from)).collect()
    };
    watch_kinds(ws, kinds, &WatchParams::default(), assigned, targets)
}

/// When the last of app `name`'s objects of `kinds` was first seen on every one of
/// `clusters`; `None` while one is missing, or with no cluster.
pub fn copied<'a>(copies: &Seen, clusters: impl IntoIterator<Item = &'a String>, kinds: &[Kind], name: &str) -> Option<Instant> {
    let mut last = None;
    for c in clusters {
        for k in kinds {
            let at = *copies.get(&(c.clone(), k.kind, name.to_string()))?;
            last = Some(last.map_or(at, |l: Instant| l.max(at)));
        }
    }
    last
}

/// One batch of the apply scenario: apps of the same kinds, one after the other.
struct Batch {
    /// Each app, from its last create acknowledged to its last object seen on its
    /// cluster, ms: p50, p99, max; and every sample.
    created: (f64, f64, f64),
    samples: Vec<f64>,
    /// The same, from its first create sent, ms.
    from_send: (f64, f64, f64),
    /// From its last create acknowledged to all its objects assigned to its cluster
    /// upstream (0 when that came first), ms.
    assigned: (f64, f64, f64),
    /// Each app's creates, first sent to last acknowledged, ms.
    creates: (f64, f64, f64),
    /// From the first create sent to the last app copied, s.
    secs: f64,
    control_plane_cpu_secs: f64,
    /// The API's writes per app over the batch, by `verb resource`.
    writes_per_app: Vec<(String, f64)>,
}

struct ApplyFigures {
    clusters: usize,
    apps: usize,
    with_companions: Batch,
    bare: Batch,
    bare_first: bool,
}

/// The namespaces of the two batches, so that neither's objects are in the other's.
pub(crate) const BARE_NAMESPACE: &str = "bare";
pub(crate) const APPS_NAMESPACE: &str = "apps";

/// How often an app is applied, in both batches: its five creates take about 5 ms on
/// an idle control plane. At the same pace, both batches meet as many arrivals, and
/// differ only by the companions' share of the load.
const APP_EVERY: Duration = Duration::from_millis(25);

/// `apps` apps and as many bare Deployments on `clusters` simulated clusters with the
/// scheduler: one batch, then the other once every Deployment of the first is
/// Available upstream and 2 s more, each in its own namespace, the bare Deployments
/// first when `bare_first`.
async fn apply_to_created(bin: &Path, clusters: usize, apps: usize, bare_first: bool) -> anyhow::Result<ApplyFigures> {
    let cp = ServerProc::start(bin)?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    let root = cp.client("root", None).await?;
    let (_, ready, readiness) = watch_readiness(root.clone());
    let (copies, labelled): (Copies, Copies) = Default::default();
    let mut sims = Vec::new();
    let mut watches = Vec::new();
    for i in 0..clusters {
        let name = format!("c{i}");
        let sim = registered_sim(bin, &data_dir, &name)?;
        watches.extend(watch_copies(&sim, &name, &APP, &copies).await?);
        sims.push(sim);
    }
    let ws = bench_workspace(&cp, bin, &data_dir, clusters, &ready, readiness).await?;
    watches.extend(watch_assigned(&ws, &APP, &labelled));
    // Each Deployment's clusters, from the scheduler's labels on it, and the
    // Deployments Available upstream.
    let assigned: Arc<Mutex<HashMap<String, BTreeSet<String>>>> = Arc::default();
    let up: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    {
        let (assigned, up) = (assigned.clone(), up.clone());
        watches.push(watch_applied(Api::<Deployment>::all(ws.clone()), WatchParams::default(), move |d: Deployment, _| {
            let name = d.metadata.name.clone().unwrap_or_default();
            if available(&d) {
                up.lock().unwrap().insert(name.clone());
            }
            let targets = d.metadata.labels.iter().flatten().filter(|(_, v)| *v == "Sync");
            let targets = targets.filter_map(|(k, _)| k.strip_prefix(STATE_LABEL_PREFIX).map(String::from)).collect();
            assigned.lock().unwrap().insert(name, targets);
        }));
    }
    // Two heartbeats, so that the scheduler knows every cluster's capacity, and the
    // watches have listed.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let batch = |namespace: &'static str, kinds: &'static [Kind]| {
        let (ws, root, cp, copies, labelled, assigned, up) = (&ws, &root, &cp, &copies, &labelled, &assigned, &up);
        async move {
            let metrics_before = root.request_text(http_get("/metrics")).await?;
            let cpu_before = cp.cpu_secs();
            let start = Instant::now();
            let mut sent = Vec::with_capacity(apps);
            let mut pace = tokio::time::interval(APP_EVERY);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in 0..apps {
                pace.tick().await;
                let name = format!("{namespace}-{i:04}");
                let (first, last) = create_app(ws, namespace, &name, kinds).await?;
                sent.push((name, first, last));
            }
            let done = || {
                let (copies, assigned) = (copies.lock().unwrap(), assigned.lock().unwrap());
                sent.iter().map(|(n, ..)| assigned.get(n).and_then(|a| copied(&copies, a, kinds, n))).collect::<Vec<_>>()
            };
            let count = || done().iter().filter(|d| d.is_some()).count();
            wait_until(
                Duration::from_secs(300),
                Duration::from_millis(50),
                || count() >= apps,
                || {
                    format!(
                        "after {:.0} s only {}/{apps} of the {namespace} apps were copied whole",
                        start.elapsed().as_secs_f64(),
                        count()
                    )
                },
            )
            .await?;
            let control_plane_cpu_secs = cp.cpu_secs() - cpu_before;
            let metrics_after = root.request_text(http_get("/metrics")).await?;
            let done: Vec<Instant> = done().into_iter().flatten().collect();
            let labelled: Vec<Option<Instant>> = {
                let (labelled, assigned) = (labelled.lock().unwrap(), assigned.lock().unwrap());
                sent.iter().map(|(n, ..)| assigned.get(n).and_then(|a| copied(&labelled, a, kinds, n))).collect()
            };
            let assigned_ms =
                sent.iter().zip(&labelled).filter_map(|((_, _, acked), l)| Some(l.as_ref()?.saturating_duration_since(*acked)));
            // Settled: the status of every Deployment of the batch has come up, so that
            // the next batch does not meet this one's tail.
            let settled = || sent.iter().filter(|(n, ..)| up.lock().unwrap().contains(n)).count();
            wait_until(
                Duration::from_secs(120),
                Duration::from_millis(200),
                || settled() >= apps,
                || format!("only {}/{apps} of the {namespace} Deployments were Available upstream after 120 s", settled()),
            )
            .await?;
            let ms = |from: &dyn Fn(&(String, Instant, Instant)) -> Instant| -> Vec<f64> {
                sent.iter().zip(&done).map(|(s, d)| d.saturating_duration_since(from(s)).as_secs_f64() * 1e3).collect()
            };
            let samples = ms(&|s| s.2);
            anyhow::Ok(Batch {
                created: summarize(samples.clone()),
                samples,
                from_send: summarize(ms(&|s| s.1)),
                assigned: summarize(assigned_ms.map(|d| d.as_secs_f64() * 1e3).collect()),
                creates: summarize(sent.iter().map(|(_, f, l)| l.duration_since(*f).as_secs_f64() * 1e3).collect()),
                secs: done.iter().max().map_or(f64::NAN, |d| d.duration_since(start).as_secs_f64()),
                control_plane_cpu_secs,
                writes_per_app: per_deployment(&metrics_before, &metrics_after, apps),
            })
        }
    };
    let pause = Duration::from_secs(2);
    let (bare, with_companions) = if bare_first {
        let bare = batch(BARE_NAMESPACE, &BARE).await?;
        tokio::time::sleep(pause).await;
        (bare, batch(APPS_NAMESPACE, &APP).await?)
    } else {
        let with_companions = batch(APPS_NAMESPACE, &APP).await?;
        tokio::time::sleep(pause).await;
        (batch(BARE_NAMESPACE, &BARE).await?, with_companions)
    };
    for w in &watches {
        w.abort();
    }
    // The control plane goes first, so its syncers never see their clusters vanish.
    drop(cp);
    drop(sims);
    Ok(ApplyFigures { clusters, apps, with_companions, bare, bare_first })
}

/// Figures by name, as a JSON object.
fn by_name(figures: &[(String, f64)]) -> serde_json::Value {
    figures.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>().into()
}

/// The target of the apply scenario: an app with companions is copied whole within
/// 1.5 times a bare Deployment's p99.
const RATIO_TARGET: f64 = 1.5;

pub async fn rows_apply(bin: &Path, sz: Sizes, report: &mut Report) -> anyhow::Result<()> {
    // The batches take turns to go first, run by run, so that neither always meets the
    // processes fresh.
    let f = apply_to_created(bin, sz.clusters, sz.apps, report.run % 2 == 1).await?;
    let (c, b) = (&f.with_companions, &f.bare);
    let ratio = c.created.1 / b.created.1;
    report.latencies("companions: app created to all 5 copied", &c.samples);
    report.latencies("companions: bare Deployment created to copied", &b.samples);
    report.add(
        Row::new(
            "companions_apply_to_created",
            format!("companions: app created to all 5 copied p99, {} on {} clusters", int(f.apps), f.clusters),
            c.created.1,
            "ms",
            Better::Lower,
        )
        .detail(format!(
            "p50 {}, max {} ms; bare p50 {}, max {} ms",
            num(c.created.0),
            num(c.created.2),
            num(b.created.0),
            num(b.created.2)
        ))
        .floor("bare Deployments p99", b.created.1),
        json!({"scenario": "companions_apply_to_created", "clusters": f.clusters, "apps": f.apps, "objects_per_app": APP.len(),
               "p50_ms": c.created.0, "p99_ms": c.created.1, "max_ms": c.created.2,
               "bare_p50_ms": b.created.0, "bare_p99_ms": b.created.1, "bare_max_ms": b.created.2,
               "ratio_p99": ratio, "target_ratio_p99": RATIO_TARGET,
               "first": if f.bare_first { "bare" } else { "companions" }, "app_every_ms": APP_EVERY.as_millis(),
               "assigned_p50_ms": c.assigned.0, "assigned_p99_ms": c.assigned.1,
               "bare_assigned_p50_ms": b.assigned.0, "bare_assigned_p99_ms": b.assigned.1,
               "from_send_p50_ms": c.from_send.0, "from_send_p99_ms": c.from_send.1,
               "bare_from_send_p50_ms": b.from_send.0, "bare_from_send_p99_ms": b.from_send.1,
               "creates_p50_ms": c.creates.0, "creates_p99_ms": c.creates.1,
               "bare_creates_p50_ms": b.creates.0, "bare_creates_p99_ms": b.creates.1,
               "secs": c.secs, "bare_secs": b.secs,
               "control_plane_cpu_secs": c.control_plane_cpu_secs, "bare_control_plane_cpu_secs": b.control_plane_cpu_secs,
               "writes_per_app": by_name(&c.writes_per_app), "bare_writes_per_deployment": by_name(&b.writes_per_app)}),
    );
    report.add_row(
        Row::new("companions_ratio_p99", "companions: that p99 over the bare Deployments' p99", ratio, "×", Better::Lower)
            .detail(format!("all {} apps copied in {} s, the bare ones in {} s", int(f.apps), num(c.secs), num(b.secs)))
            .target(RATIO_TARGET, "≤ 1.5×"),
    );
    Ok(())
}

pub async fn rows_failover(bin: &Path, sz: Sizes, interval: Duration, grace: Duration, report: &mut Report) -> anyhow::Result<()> {
    let f = scheduler::failover(bin, sz.failover_apps, interval, grace, true, None).await?;
    let (i, g) = (f.heartbeat_interval_s, f.grace_s);
    let target_s = g as f64 + 5.0;
    let slug = format!("companions-{i}s-{g}s");
    report.timeline(Timeline {
        setting: format!("each with {} companions, beat {i} s / grace {g} s", COMPANIONS.len()),
        slug: slug.clone(),
        detected: f.detected_s,
        grace: g as f64,
        target: Some(target_s),
        moved: f.moved.clone(),
        available: f.done.clone(),
        available_label: "Available elsewhere, companions copied",
    });
    let mut row = Row::new(
        format!("companions_failover/{i}s-{g}s"),
        format!("companions failover: kill to all {} apps whole elsewhere, beat {i} s / grace {g} s", int(f.deployments)),
        f.all_done_s,
        "s",
        Better::Lower,
    )
    .detail(format!(
        "detected {}, moved {}-{} s, Deployments Available at {} s",
        num(f.detected_s),
        num(f.first_moved_s),
        num(f.all_moved_s),
        num(f.all_available_s)
    ))
    .floor("grace", g as f64);
    // As for bare Deployments, the target is for 1,000 at the default heartbeat.
    if (i, g) == (2, 8) && f.deployments >= 1_000 {
        row = row.target(target_s, "≤ grace + 5 s = 13 s");
    }
    report.add(
        row,
        json!({"scenario": "companions_failover", "apps": f.deployments, "objects_per_app": APP.len(),
               "heartbeat_interval_s": i, "grace_s": g, "target_s": target_s,
               "all_done_s": f.all_done_s, "all_available_s": f.all_available_s,
               "detected_s": f.detected_s, "first_moved_s": f.first_moved_s, "all_moved_s": f.all_moved_s,
               "done_p50_s": f.done_s.0, "done_p99_s": f.done_s.1,
               "done_after_available_p50_s": f.done_after_available_s.0, "done_after_available_p99_s": f.done_after_available_s.1,
               "done_after_available_max_s": f.done_after_available_s.2,
               "companions_assigned_p50_s": f.companions_assigned_s.0, "companions_assigned_p99_s": f.companions_assigned_s.1,
               "companions_assigned_max_s": f.companions_assigned_s.2,
               "false_not_ready": f.false_not_ready,
               "writes_per_app": by_name(&f.writes_per_deployment),
               "progress_reports_deferred": f.progress_reports_deferred,
               "cpu_secs": by_name(&f.cpu_secs)}),
    );
    Ok(())
}

/// Waits until the `clusters` registered are Ready (as `ready`, from
/// [`watch_readiness`], sees them), stops that watch, and makes the workspace `bench`
/// with the namespaces of the bare batch and the apps. Returns the workspace's client.
pub(crate) async fn bench_workspace(
    cp: &ServerProc,
    bin: &Path,
    data_dir: &Path,
    clusters: usize,
    ready: &scheduler::NotReadySeen,
    readiness: tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<kube::Client> {
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || ready.lock().unwrap().len() >= clusters,
        || format!("only {}/{clusters} clusters Ready after 60 s", ready.lock().unwrap().len()),
    )
    .await?;
    readiness.abort();
    flotilla_cli(bin, data_dir, &["workspace", "create", "bench"])?;
    let ws = cp.client("bench", None).await?;
    for ns in [BARE_NAMESPACE, APPS_NAMESPACE] {
        Api::<Namespace>::all(ws.clone())
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?)
            .await?;
    }
    Ok(ws)
}
