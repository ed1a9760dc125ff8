//! The scenario of apps of every kind the scheduler places: an app is four workloads,
//! a StatefulSet of three replicas with a claim each (from a volumeClaimTemplate), a
//! one-replica Deployment, a Job and a CronJob. The scheduler places each on its
//! clusters, the syncers copy it there, the simulated clusters run it, and the status
//! aggregator sums its copies' status back up into the workspace.
//!
//! [`rows`]: apps applied one after the other at a fixed pace to a workspace, placed by
//! the real scheduler over simulated clusters; each app from the moment its four
//! objects exist upstream to the moment every one of them is Ready or Complete
//! upstream, beside the same figure for as many bare Deployments on the same
//! processes (the way [`crate::companions`] measures its floor):
//! - the StatefulSet: `status.readyReplicas` is 3 in the workspace;
//! - the Deployment: Available in the workspace (as [`crate::available`] says);
//! - the Job: its `Complete` condition is True in the workspace;
//! - the CronJob: stored. It is not placed (its schedule runs in the workspace, and
//!   only the Jobs it makes are placed), so it costs only its create. Its first
//!   schedule may be a day away, so no Job of it is waited for; its schedule is chosen
//!   to fire rarely, and the record says how many did fire during the batch.
//!
//! A third batch, of bare Deployments at the apps' rate of placed workloads (three
//! every [`APP_EVERY`], as many as the apps place), runs on the same processes after
//! the other two: it says how much of the apps' figure is the load of placing,
//! copying and running three workloads in the time of one, rather than any kind's own
//! machinery.
//!
//! What the simulated clusters do for the app is kept as small as a bare Deployment's,
//! so that the ratio says what Flotilla costs: the StatefulSet starts its pods all at
//! once (`podManagementPolicy: Parallel`), and the Job's pod runs for 0 s
//! (`sim.flotilla.io/run-seconds`); with the defaults (`OrderedReady`, 2 s) the figure
//! would be the clusters' three pod startups in turn, or the Job's 2 s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::api::{Api, ApiResource, DynamicObject, PostParams, WatchParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use crate::companions::{bench_workspace, APPS_NAMESPACE, BARE_NAMESPACE};
use crate::report::{int, num, Better, Report, Row};
use crate::scheduler::{per_deployment, watch_readiness};
use crate::{available, bench_deployment, http_get, registered_sim, summarize, watch_applied, ServerProc};

#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Simulated clusters.
    pub clusters: usize,
    /// Apps, and as many bare Deployments.
    pub apps: usize,
}

/// The StatefulSet's replicas, each with its own claim.
const STS_REPLICAS: i32 = 3;
/// How the StatefulSet's pods start: all at once.
const POD_MANAGEMENT: &str = "Parallel";
/// How long the Job's pod runs on its simulated cluster.
const JOB_RUN_SECONDS: u32 = 0;
/// The CronJob's schedule: nightly, so that it does not fire during a batch (the
/// record counts those that did).
const CRON_SCHEDULE: &str = "30 2 * * *";
/// How often an app is applied, in both batches. An app's four creates take a few ms
/// on an idle control plane; its four workloads are four to place, copy and sum up.
const APP_EVERY: Duration = Duration::from_millis(50);
/// The workloads of an app that are placed (the CronJob is not): the loaded bare
/// batch creates as many Deployments in the time of one app.
const PLACED_PER_APP: u32 = 3;
/// The namespace of the loaded bare batch.
const LOADED_NAMESPACE: &str = "loaded";
/// How long a batch may take to be Ready, from its first create.
const BATCH_DEADLINE: Duration = Duration::from_secs(300);
/// How long the claims may take to be Bound once the StatefulSets are Ready.
const CLAIMS_DEADLINE: Duration = Duration::from_secs(30);

/// The target: an app of every kind is Ready within 1.5 times a bare Deployment's p99.
const RATIO_TARGET: f64 = 1.5;

/// One workload of an app.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Part {
    Deployment,
    StatefulSet,
    Job,
    CronJob,
}

/// An app's workloads in the order Helm installs them (helm pkg/releaseutil/kind_sorter.go).
const APP: [Part; 4] = [Part::Deployment, Part::StatefulSet, Part::Job, Part::CronJob];
const BARE: [Part; 1] = [Part::Deployment];

impl Part {
    fn kind(self) -> &'static str {
        match self {
            Part::Deployment => "Deployment",
            Part::StatefulSet => "StatefulSet",
            Part::Job => "Job",
            Part::CronJob => "CronJob",
        }
    }

    fn of_kind(kind: &str) -> Option<Part> {
        APP.into_iter().find(|p| p.kind() == kind)
    }

    /// This part's name in app `app`: two workloads of one name would share a
    /// WorkloadPlacement, so each kind has its own.
    fn name(self, app: &str) -> String {
        let suffix = match self {
            Part::Deployment => "web",
            Part::StatefulSet => "db",
            Part::Job => "migrate",
            Part::CronJob => "report",
        };
        format!("{app}-{suffix}")
    }

    /// Creates this part of app `app` in `namespace`.
    async fn create(self, ws: &kube::Client, namespace: &str, app: &str) -> anyhow::Result<()> {
        let name = self.name(app);
        let pp = PostParams::default();
        match self {
            Part::Deployment => {
                Api::<Deployment>::namespaced(ws.clone(), namespace).create(&pp, &bench_deployment(&name, 1)?).await?;
            }
            Part::StatefulSet => {
                Api::<StatefulSet>::namespaced(ws.clone(), namespace).create(&pp, &statefulset(&name)?).await?;
            }
            Part::Job => {
                Api::<Job>::namespaced(ws.clone(), namespace).create(&pp, &serde_json::from_value(job(&name))?).await?;
            }
            Part::CronJob => {
                Api::<CronJob>::namespaced(ws.clone(), namespace).create(&pp, &cronjob(&name)?).await?;
            }
        }
        Ok(())
    }
}

/// The resources every pod of the scenario asks for, as [`bench_deployment`]'s do.
fn requests() -> serde_json::Value {
    json!({"requests": {"cpu": "10m", "memory": "16Mi"}})
}

/// A key-value store of [`STS_REPLICAS`] members, each with a claim of the default class.
fn statefulset(name: &str) -> anyhow::Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": STS_REPLICAS,
            "podManagementPolicy": POD_MANAGEMENT,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "member", "image": "registry.example.com/kv-member:0.7", "resources": requests(),
                    "volumeMounts": [{"name": "data", "mountPath": "/srv/kv"}]}]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    }))?)
}

/// The spec of a Job (and of a CronJob's Jobs): one pod that runs [`JOB_RUN_SECONDS`].
fn job_spec() -> serde_json::Value {
    json!({
        "backoffLimit": 1,
        "template": {
            "metadata": {"annotations": {"sim.flotilla.io/run-seconds": JOB_RUN_SECONDS.to_string()}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "migrate", "image": "registry.example.com/schema-migrate:2.4", "resources": requests()}]}
        }
    })
}

/// A schema migration.
fn job(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": job_spec()})
}

/// A nightly report.
fn cronjob(name: &str) -> anyhow::Result<CronJob> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedule": CRON_SCHEDULE, "concurrencyPolicy": "Forbid", "successfulJobsHistoryLimit": 1,
                 "jobTemplate": {"spec": job_spec()}}
    }))?)
}

/// Creates app `app`'s `parts` in `namespace`, one after the other, as `kubectl apply`
/// would; returns when the first create was sent and when the last was acknowledged.
async fn create_app(ws: &kube::Client, namespace: &str, app: &str, parts: &[Part]) -> anyhow::Result<(Instant, Instant)> {
    let sent = Instant::now();
    for p in parts {
        p.create(ws, namespace, app).await?;
    }
    Ok((sent, Instant::now()))
}

type Times = Arc<Mutex<HashMap<(Part, String), Instant>>>;
type Clusters = Arc<Mutex<HashMap<(Part, String), Vec<String>>>>;

/// What this process's watches of the workspace saw, by (kind, workload name).
#[derive(Clone, Default)]
struct Seen {
    /// When each workload was first Ready or Complete (a CronJob: seen at all).
    ready: Times,
    /// When each workload's WorkloadPlacement first named a cluster.
    placed: Times,
    /// The clusters each workload's WorkloadPlacement names.
    clusters: Clusters,
    /// The Jobs whose `Failed` condition is True.
    failed: Arc<Mutex<BTreeSet<String>>>,
}

type Watches = Vec<tokio::task::JoinHandle<anyhow::Result<()>>>;

/// Watches the workspace's workloads and WorkloadPlacements (of every namespace) and
/// notes in `seen` when each workload was first Ready, placed or Failed.
fn watch_workspace(ws: &kube::Client, seen: &Seen) -> Watches {
    let mut watches = Vec::new();
    let first = |times: &Times, part: Part, name: Option<String>, now: Instant| {
        times.lock().unwrap().entry((part, name.unwrap_or_default())).or_insert(now);
    };
    let ready = seen.ready.clone();
    watches.push(watch_applied(Api::<Deployment>::all(ws.clone()), WatchParams::default(), move |d: Deployment, now| {
        if available(&d) {
            first(&ready, Part::Deployment, d.metadata.name, now);
        }
    }));
    let ready = seen.ready.clone();
    watches.push(watch_applied(Api::<StatefulSet>::all(ws.clone()), WatchParams::default(), move |s: StatefulSet, now| {
        if s.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0) >= STS_REPLICAS {
            first(&ready, Part::StatefulSet, s.metadata.name, now);
        }
    }));
    let (ready, failed) = (seen.ready.clone(), seen.failed.clone());
    watches.push(watch_applied(Api::<Job>::all(ws.clone()), WatchParams::default(), move |j: Job, now| {
        let conditions = j.status.as_ref().and_then(|s| s.conditions.as_ref());
        let holds = |t: &str| conditions.into_iter().flatten().any(|c| c.type_ == t && c.status == "True");
        if holds("Complete") {
            first(&ready, Part::Job, j.metadata.name.clone(), now);
        }
        if holds("Failed") {
            failed.lock().unwrap().insert(j.metadata.name.clone().unwrap_or_default());
        }
    }));
    // A CronJob has nothing to place or wait for: its schedule runs in the workspace.
    let (ready, placed) = (seen.ready.clone(), seen.placed.clone());
    watches.push(watch_applied(Api::<CronJob>::all(ws.clone()), WatchParams::default(), move |c: CronJob, now| {
        first(&ready, Part::CronJob, c.metadata.name.clone(), now);
        first(&placed, Part::CronJob, c.metadata.name, now);
    }));
    let placements = Api::<DynamicObject>::all_with(
        ws.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduling.flotilla.io", "v1alpha1", "WorkloadPlacement"),
            "workloadplacements",
        ),
    );
    let (placed, clusters) = (seen.placed.clone(), seen.clusters.clone());
    watches.push(watch_applied(placements, WatchParams::default(), move |wp: DynamicObject, now| {
        let workload = &wp.data["spec"]["workload"];
        let (Some(part), Some(name)) = (workload["kind"].as_str().and_then(Part::of_kind), workload["name"].as_str()) else {
            return;
        };
        let names: Vec<String> =
            wp.data["spec"]["clusters"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str().map(String::from)).collect();
        if !names.is_empty() {
            first(&placed, part, Some(name.to_string()), now);
            clusters.lock().unwrap().insert((part, name.to_string()), names);
        }
    }));
    watches
}

/// When the last of app `app`'s `parts` was first in `times`; `None` while one is missing.
fn last_of(times: &HashMap<(Part, String), Instant>, parts: &[Part], app: &str) -> Option<Instant> {
    parts.iter().map(|p| times.get(&(*p, p.name(app))).copied()).try_fold(None, |last: Option<Instant>, at| {
        let at = at?;
        Some(Some(last.map_or(at, |l| l.max(at))))
    })?
}

/// One batch: apps of the same parts, one after the other.
struct Batch {
    /// Each app, from its last create acknowledged to its last workload Ready, ms:
    /// p50, p99, max; and every sample.
    ready: (f64, f64, f64),
    samples: Vec<f64>,
    /// The same, from its first create sent, ms.
    from_send: (f64, f64, f64),
    /// From its last create acknowledged to all its workloads placed (0 when that came
    /// first), ms.
    placed: (f64, f64, f64),
    /// Each kind, from the app's last create acknowledged to that workload Ready, ms.
    by_kind: Vec<(Part, (f64, f64, f64))>,
    /// Each app's creates, first sent to last acknowledged, ms.
    creates: (f64, f64, f64),
    /// From the first create sent to the last app Ready, s.
    secs: f64,
    control_plane_cpu_secs: f64,
    /// The API's writes per app over the batch, by `verb resource`.
    writes_per_app: Vec<(String, f64)>,
    /// The clusters an app's workloads run on, the mean over the apps.
    clusters_per_app: f64,
}

/// What a batch runs against.
struct Env<'a> {
    ws: &'a kube::Client,
    root: &'a kube::Client,
    cp: &'a ServerProc,
    seen: &'a Seen,
}

/// `apps` apps of `parts` in `namespace`, one every `every`, until every one is Ready.
async fn batch(
    env: &Env<'_>,
    namespace: &'static str,
    parts: &'static [Part],
    apps: usize,
    every: Duration,
) -> anyhow::Result<(Batch, Vec<String>)> {
    let seen = env.seen;
    let metrics_before = env.root.request_text(http_get("/metrics")).await?;
    let cpu_before = env.cp.cpu_secs();
    let start = Instant::now();
    let mut sent = Vec::with_capacity(apps);
    let mut pace = tokio::time::interval(every);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..apps {
        pace.tick().await;
        let app = format!("{namespace}-{i:04}");
        let (first, last) = create_app(env.ws, namespace, &app, parts).await?;
        sent.push((app, first, last));
    }
    let done = || {
        let ready = seen.ready.lock().unwrap();
        sent.iter().map(|(a, ..)| last_of(&ready, parts, a)).collect::<Vec<_>>()
    };
    let count = || done().iter().filter(|d| d.is_some()).count();
    let deadline = start + BATCH_DEADLINE;
    loop {
        if count() >= apps {
            break;
        }
        let failed: Vec<String> = {
            let mine: BTreeSet<String> = sent.iter().map(|(a, ..)| Part::Job.name(a)).collect();
            seen.failed.lock().unwrap().intersection(&mine).cloned().collect()
        };
        anyhow::ensure!(failed.is_empty(), "{} Job(s) of the {namespace} apps Failed upstream: {}", failed.len(), failed.join(", "));
        if Instant::now() >= deadline {
            let (ready, placed) = (seen.ready.lock().unwrap(), seen.placed.lock().unwrap());
            let tally = |times: &HashMap<(Part, String), Instant>| {
                let each = parts.iter().map(|p| {
                    let n = sent.iter().filter(|(a, ..)| times.contains_key(&(*p, p.name(a)))).count();
                    format!("{} {n}/{apps}", p.kind())
                });
                each.collect::<Vec<_>>().join(", ")
            };
            let missing: Vec<String> = sent
                .iter()
                .flat_map(|(a, ..)| parts.iter().map(move |p| (*p, p.name(a))))
                .filter(|k| !ready.contains_key(k))
                .take(5)
                .map(|(p, n)| format!("{}/{n}", p.kind()))
                .collect();
            anyhow::bail!(
                "after {:.0} s only {}/{apps} of the {namespace} apps were Ready: Ready {}; placed {}; not Ready, the first: {}",
                start.elapsed().as_secs_f64(),
                count(),
                tally(&ready),
                tally(&placed),
                missing.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let control_plane_cpu_secs = env.cp.cpu_secs() - cpu_before;
    let metrics_after = env.root.request_text(http_get("/metrics")).await?;
    let done: Vec<Instant> = done().into_iter().flatten().collect();
    let ms = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
    let samples: Vec<f64> = sent.iter().zip(&done).map(|((_, _, acked), d)| ms(*acked, *d)).collect();
    let (ready, placed, clusters) = (seen.ready.lock().unwrap(), seen.placed.lock().unwrap(), seen.clusters.lock().unwrap());
    let placed_ms = sent.iter().filter_map(|(a, _, acked)| Some(ms(*acked, last_of(&placed, parts, a)?))).collect();
    let by_kind = parts
        .iter()
        .map(|p| (*p, summarize(sent.iter().filter_map(|(a, _, acked)| Some(ms(*acked, *ready.get(&(*p, p.name(a)))?))).collect())))
        .collect();
    let spread: Vec<usize> = sent
        .iter()
        .map(|(a, ..)| {
            parts.iter().flat_map(|p| clusters.get(&(*p, p.name(a))).cloned().unwrap_or_default()).collect::<BTreeSet<_>>().len()
        })
        .collect();
    let batch = Batch {
        ready: summarize(samples.clone()),
        samples,
        from_send: summarize(sent.iter().zip(&done).map(|((_, first, _), d)| ms(*first, *d)).collect()),
        placed: summarize(placed_ms),
        by_kind,
        creates: summarize(sent.iter().map(|(_, f, l)| ms(*f, *l)).collect()),
        secs: done.iter().max().map_or(f64::NAN, |d| d.duration_since(start).as_secs_f64()),
        control_plane_cpu_secs,
        writes_per_app: per_deployment(&metrics_before, &metrics_after, apps),
        clusters_per_app: spread.iter().sum::<usize>() as f64 / spread.len().max(1) as f64,
    };
    Ok((batch, sent.into_iter().map(|(a, ..)| a).collect()))
}

struct Figures {
    clusters: usize,
    apps: usize,
    kinds: Batch,
    bare: Batch,
    /// Bare Deployments at the apps' rate of placed workloads.
    loaded: Batch,
    bare_first: bool,
    /// The StatefulSets' claims Bound on the clusters, of `apps × 3`.
    claims_bound: usize,
    /// The CronJobs that scheduled a Job during the run (upstream `lastScheduleTime`).
    cronjobs_scheduled: usize,
}

/// The claims of the apps' StatefulSets Bound on `sims`: `data-<app>-db-<i>`, in
/// whichever namespace the syncer gave the copy there.
async fn claims_bound(sims: &[(String, ServerProc)], apps: &[String]) -> anyhow::Result<usize> {
    let want: BTreeSet<String> =
        apps.iter().flat_map(|a| (0..STS_REPLICAS).map(move |i| format!("data-{}-{i}", Part::StatefulSet.name(a)))).collect();
    let mut bound = 0;
    for (name, sim) in sims {
        let claims = Api::<PersistentVolumeClaim>::all(sim.client(&format!("kind-{name}"), None).await?).list(&Default::default()).await?;
        bound += claims
            .items
            .iter()
            .filter(|c| want.contains(c.metadata.name.as_deref().unwrap_or_default()))
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
    }
    Ok(bound)
}

/// `apps` apps and as many bare Deployments on `clusters` simulated clusters with the
/// scheduler: one batch, then 2 s, then the other, each in its own namespace, the bare
/// Deployments first when `bare_first`; then 2 s, and the loaded bare batch.
async fn apply_to_ready(bin: &Path, clusters: usize, apps: usize, bare_first: bool) -> anyhow::Result<Figures> {
    let cp = ServerProc::start(bin)?;
    let data_dir = cp.kubeconfig.parent().unwrap().to_path_buf();
    let root = cp.client("root", None).await?;
    let (_, ready, readiness) = watch_readiness(root.clone());
    let mut sims = Vec::new();
    for i in 0..clusters {
        let name = format!("c{i}");
        let sim = registered_sim(bin, &data_dir, &name)?;
        sims.push((name, sim));
    }
    let ws = bench_workspace(&cp, bin, &data_dir, clusters, &ready, readiness).await?;
    let seen = Seen::default();
    let watches = watch_workspace(&ws, &seen);
    // Two heartbeats, so that the scheduler knows every cluster's capacity, and the
    // watches have listed (as the companions scenario does).
    tokio::time::sleep(Duration::from_secs(4)).await;

    Api::<Namespace>::all(ws.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": LOADED_NAMESPACE}}))?)
        .await?;
    let env = Env { ws: &ws, root: &root, cp: &cp, seen: &seen };
    let pause = Duration::from_secs(2);
    let ((bare, _), (kinds, names)) = if bare_first {
        let bare = batch(&env, BARE_NAMESPACE, &BARE, apps, APP_EVERY).await?;
        tokio::time::sleep(pause).await;
        (bare, batch(&env, APPS_NAMESPACE, &APP, apps, APP_EVERY).await?)
    } else {
        let kinds = batch(&env, APPS_NAMESPACE, &APP, apps, APP_EVERY).await?;
        tokio::time::sleep(pause).await;
        (batch(&env, BARE_NAMESPACE, &BARE, apps, APP_EVERY).await?, kinds)
    };
    tokio::time::sleep(pause).await;
    let placed = apps * PLACED_PER_APP as usize;
    let (loaded, _) = batch(&env, LOADED_NAMESPACE, &BARE, placed, APP_EVERY / PLACED_PER_APP).await?;
    for w in &watches {
        w.abort();
    }
    // Every StatefulSet is Ready, so its pods run with their claims: each claim is
    // Bound, or about to be.
    let want = apps * STS_REPLICAS as usize;
    let until = Instant::now() + CLAIMS_DEADLINE;
    let claims_bound = loop {
        let n = claims_bound(&sims, &names).await?;
        if n >= want {
            break n;
        }
        anyhow::ensure!(
            Instant::now() < until,
            "{n}/{want} of the StatefulSets' claims Bound on the clusters {} s after every StatefulSet was Ready",
            CLAIMS_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let cronjobs = Api::<CronJob>::namespaced(ws.clone(), APPS_NAMESPACE).list(&Default::default()).await?;
    let cronjobs_scheduled =
        cronjobs.items.iter().filter(|c| c.status.as_ref().and_then(|s| s.last_schedule_time.as_ref()).is_some()).count();
    // The control plane goes first, so its syncers never see their clusters vanish.
    drop(cp);
    drop(sims);
    Ok(Figures { clusters, apps, kinds, bare, loaded, bare_first, claims_bound, cronjobs_scheduled })
}

/// Figures by name, as a JSON object.
fn by_name(figures: &[(String, f64)]) -> serde_json::Value {
    figures.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>().into()
}

pub async fn rows(bin: &Path, sz: Sizes, report: &mut Report) -> anyhow::Result<()> {
    // The batches take turns to go first, run by run, so that neither always meets the
    // processes fresh.
    let f = apply_to_ready(bin, sz.clusters, sz.apps, report.run % 2 == 1).await?;
    let (k, b) = (&f.kinds, &f.bare);
    let ratio = k.ready.1 / b.ready.1;
    println!(
        "# kinds: an app is Ready when its StatefulSet has {STS_REPLICAS} readyReplicas ({POD_MANAGEMENT}), its Deployment is \
         Available and its Job Complete (its pod runs {JOB_RUN_SECONDS} s), upstream; its CronJob counts once stored (its \
         schedule runs in the workspace; nothing of it is placed), without waiting for a first schedule (\"{CRON_SCHEDULE}\")"
    );
    report.latencies("kinds: app applied to all 4 Ready", &k.samples);
    report.latencies("kinds: bare Deployment applied to Available", &b.samples);
    let l = &f.loaded;
    report.latencies("kinds: bare Deployment at the apps' rate applied to Available", &l.samples);
    let by_kind: serde_json::Map<String, serde_json::Value> =
        k.by_kind.iter().map(|(p, (p50, p99, max))| (p.kind().to_string(), json!({"p50_ms": p50, "p99_ms": p99, "max_ms": max}))).collect();
    let row = Row::new(
        "kinds_apply_to_ready",
        format!("kinds: app (sts, deploy, job, cronjob) applied to all Ready p99, {} on {} clusters", int(f.apps), f.clusters),
        k.ready.1,
        "ms",
        Better::Lower,
    )
    .detail(format!(
        "p50 {}, max {} ms; bare p50 {}, max {} ms; CronJob: stored (runs in the workspace)",
        num(k.ready.0),
        num(k.ready.2),
        num(b.ready.0),
        num(b.ready.2)
    ))
    .floor("bare Deployments p99", b.ready.1);
    let mut record = json!({"scenario": "kinds_apply_to_ready", "clusters": f.clusters, "apps": f.apps, "objects_per_app": APP.len(),
               "p50_ms": k.ready.0, "p99_ms": k.ready.1, "max_ms": k.ready.2,
               "bare_p50_ms": b.ready.0, "bare_p99_ms": b.ready.1, "bare_max_ms": b.ready.2,
               "ratio_p99": ratio, "target_ratio_p99": RATIO_TARGET,
               "loaded_deployments": l.samples.len(), "loaded_every_ms": (APP_EVERY / PLACED_PER_APP).as_secs_f64() * 1e3,
               "loaded_p50_ms": l.ready.0, "loaded_p99_ms": l.ready.1, "loaded_max_ms": l.ready.2,
               "loaded_secs": l.secs, "loaded_control_plane_cpu_secs": l.control_plane_cpu_secs,
               "ratio_to_loaded_p99": k.ready.1 / l.ready.1});
    // Two literals: one would overrun serde_json's macro recursion.
    let more = json!({"ready_when": {"StatefulSet": format!("status.readyReplicas == {STS_REPLICAS} upstream"),
                              "Deployment": "Available upstream", "Job": "Complete condition True upstream",
                              "CronJob": "stored: its schedule runs in the workspace and it is not placed (its first schedule not awaited)"},
               "statefulset_replicas": STS_REPLICAS, "pod_management_policy": POD_MANAGEMENT,
               "job_run_seconds": JOB_RUN_SECONDS, "cron_schedule": CRON_SCHEDULE, "cronjobs_scheduled": f.cronjobs_scheduled,
               "claims_bound": f.claims_bound, "claims_expected": f.apps * STS_REPLICAS as usize,
               "by_kind": by_kind, "clusters_per_app_mean": k.clusters_per_app,
               "first": if f.bare_first { "bare" } else { "kinds" }, "app_every_ms": APP_EVERY.as_millis(),
               "placed_p50_ms": k.placed.0, "placed_p99_ms": k.placed.1,
               "bare_placed_p50_ms": b.placed.0, "bare_placed_p99_ms": b.placed.1,
               "from_send_p50_ms": k.from_send.0, "from_send_p99_ms": k.from_send.1,
               "bare_from_send_p50_ms": b.from_send.0, "bare_from_send_p99_ms": b.from_send.1,
               "creates_p50_ms": k.creates.0, "creates_p99_ms": k.creates.1,
               "bare_creates_p50_ms": b.creates.0, "bare_creates_p99_ms": b.creates.1,
               "secs": k.secs, "bare_secs": b.secs,
               "control_plane_cpu_secs": k.control_plane_cpu_secs, "bare_control_plane_cpu_secs": b.control_plane_cpu_secs,
               "writes_per_app": by_name(&k.writes_per_app), "bare_writes_per_deployment": by_name(&b.writes_per_app)});
    if let (Some(r), serde_json::Value::Object(m)) = (record.as_object_mut(), more) {
        r.extend(m);
    }
    report.add(row, record);
    let slowest = k.by_kind.iter().max_by(|x, y| x.1 .1.total_cmp(&y.1 .1));
    let per_kind: BTreeMap<&str, String> = k.by_kind.iter().map(|(p, (_, p99, _))| (p.kind(), num(*p99))).collect();
    report.add_row(
        Row::new("kinds_ratio_p99", "kinds: that p99 over the bare Deployments' p99", ratio, "×", Better::Lower)
            .detail(format!(
                "p99 by kind {} ms (slowest {}); all {} apps Ready in {} s, the bare ones in {} s",
                per_kind.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
                slowest.map_or("-", |(p, _)| p.kind()),
                int(f.apps),
                num(k.secs),
                num(b.secs)
            ))
            .target(RATIO_TARGET, "≤ 1.5×"),
    );
    report.add_row(
        Row::new(
            "kinds_loaded_p99",
            format!("kinds: bare Deployment applied to Available p99, {PLACED_PER_APP} per app's time ({} in all)", int(l.samples.len())),
            l.ready.1,
            "ms",
            Better::Lower,
        )
        .detail(format!(
            "p50 {}, max {} ms; the apps' p99 is {}× this; all Available in {} s",
            num(l.ready.0),
            num(l.ready.2),
            num(k.ready.1 / l.ready.1),
            num(l.secs)
        )),
    );
    Ok(())
}
