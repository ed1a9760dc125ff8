//! Failure drills for the scheduler, end to end: the control plane killed in the
//! middle of a failover, the scheduler process killed and started again, and a control
//! plane under heavy write load. Each drill names what must not happen (a workload
//! lost or left on a dead cluster, a false move, a false NotReady), waits on
//! conditions with deadlines, and prints what it measured.

use crate::common;
use test_clusters::fixtures::deployment;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::fleet::{copy_replicas, events, fleet, rollout, sim, unready_fleet, wait_all_ready, wait_assignment, Killed, DEADLINE, FAST};
use common::{spawn_ready, tail, wait_for, wait_until, Flotilla};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use placement_api::SyncTarget;
use serde_json::{json, Value};

/// FAST's heartbeat grace, in the whole seconds that heartbeat times carry.
const GRACE_SECS: i64 = 4;

/// Wall-clock seconds since the epoch: the unit and the clock of heartbeat times (the
/// syncers run on this machine).
fn now_secs() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("clock after 1970").as_secs() as i64
}

fn millis(t: &Time) -> i64 {
    t.0.as_millisecond()
}

/// Every SyncTarget, as stored.
fn targets(f: &Flotilla) -> Vec<SyncTarget> {
    let list: Value = serde_json::from_str(&f.k(&["get", "st", "-o", "json"])).expect("kubectl prints JSON");
    serde_json::from_value(list["items"].clone()).expect("SyncTargets")
}

/// The last heartbeat time of a SyncTarget, in seconds (0: none yet).
fn beat_secs(t: &SyncTarget) -> i64 {
    t.status.as_ref().and_then(|s| s.last_syncer_heartbeat_time.as_ref()).map_or(0, |b| millis(b) / 1000)
}

/// Waits until every cluster has beaten at or after `at` (wall seconds). Heartbeats
/// are the clock of these drills: the scheduler judges clusters by them, so "a grace
/// has passed" is best said as "the syncers have beaten past it".
fn wait_beats_since(f: &Flotilla, at: i64, what: &str) {
    wait_for(what, DEADLINE, || {
        let beats: Vec<(String, i64)> = targets(f).iter().map(|t| (t.metadata.name.clone().unwrap_or_default(), beat_secs(t))).collect();
        if beats.iter().all(|(_, b)| *b >= at) {
            Ok(())
        } else {
            Err(format!("heartbeats {beats:?}, want all at or after {at}"))
        }
    });
}

/// `name type=status/reason@lastTransitionTime ...` of every SyncTarget, one a line:
/// any change of health, however brief, leaves a new transition time here.
fn health(f: &Flotilla) -> Vec<String> {
    let path = r#"jsonpath={range .items[*]}{.metadata.name}{range .status.conditions[*]} {.type}={.status}/{.reason}@{.lastTransitionTime}{end}{"\n"}{end}"#;
    f.k(&["get", "st", "-o", path]).lines().map(str::to_string).collect()
}

/// `namespace/name <fields>` of every object of `kind` in `demo`, one a line, sorted;
/// `fields` is a jsonpath template for one object.
fn listed(f: &Flotilla, kind: &str, fields: &str) -> Vec<String> {
    let path = format!(r#"jsonpath={{range .items[*]}}{{.metadata.namespace}}/{{.metadata.name}} {fields}{{"\n"}}{{end}}"#);
    let mut all: Vec<String> = f.k(&["--context", "demo", "get", kind, "-A", "-o", &path]).lines().map(str::to_string).collect();
    all.sort();
    all
}

/// Every WorkloadPlacement's generation, assignment labels and clusters.
fn placements(f: &Flotilla) -> Vec<String> {
    listed(f, "wp", "generation={.metadata.generation} labels={.metadata.labels}{range .spec.clusters[*]} {.name}={.replicas}{end}")
}

/// Every Deployment's replicas and labels.
fn deployments(f: &Flotilla) -> Vec<String> {
    listed(f, "deploy", "replicas={.spec.replicas} labels={.metadata.labels}")
}

/// The clusters an object's labels assign it to.
fn assigned_clusters(object: &Value) -> Vec<String> {
    let labels = object["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    labels.iter().filter(|(_, v)| *v == "Sync").filter_map(|(k, _)| placement_api::sync_target_of_label(k)).map(str::to_string).collect()
}

/// `name: labels [clusters] spec [cluster=replicas, ...]` of every object of `kind` in
/// `demo`: where its assignment labels and (for a WorkloadPlacement) its spec put it.
fn assignments_of(f: &Flotilla, kind: &str) -> Vec<String> {
    let list: Value = serde_json::from_str(&f.k(&["--context", "demo", "get", kind, "-o", "json"])).expect("kubectl prints JSON");
    let mut out: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let shares: Vec<String> = o["spec"]["clusters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("{}={}", c["name"].as_str().unwrap_or_default(), c["replicas"]))
                .collect();
            format!("{}: labels {:?} spec {:?}", o["metadata"]["name"].as_str().unwrap_or_default(), assigned_clusters(o), shares)
        })
        .collect();
    out.sort();
    out
}

fn ready_status(f: &Flotilla, cluster: &str) -> String {
    let path = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}"#;
    f.k(&["get", "st", cluster, "-o", path])
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime")
}

/// What a watch in [`first_sign_of_loss`] saw.
enum Look {
    /// Its initial list is done.
    Listed,
    /// The scheduler has noticed that east is lost.
    Loss(String),
    Other,
}

/// Watches east's SyncTarget and the WorkloadPlacements and Events of `demo`; says on
/// `watching` once all three have listed, and returns the first sign that the loss
/// of east was noticed: Ready=False, an assignment off east, or a Rescheduled Event.
async fn first_sign_of_loss(root: kube::Client, demo: kube::Client, watching: std::sync::mpsc::Sender<()>) -> String {
    use k8s_openapi::api::core::v1::Event as KubeEvent;
    use kube::runtime::watcher::Event;
    use placement_api::WorkloadPlacement;
    let config = watcher::Config::default;
    let targets = watcher(Api::<SyncTarget>::all(root), config().fields("metadata.name=east")).map(|e| match e {
        Ok(Event::InitDone) => Look::Listed,
        Ok(Event::Apply(t)) => {
            let ready = t.status.iter().flat_map(|s| &s.conditions).find(|c| c.type_ == "Ready");
            match ready {
                Some(c) if c.status != "True" => Look::Loss(format!("east Ready={}/{}", c.status, c.reason)),
                _ => Look::Other,
            }
        }
        _ => Look::Other,
    });
    let placements = watcher(Api::<WorkloadPlacement>::namespaced(demo.clone(), "default"), config()).map(|e| match e {
        Ok(Event::InitDone) => Look::Listed,
        Ok(Event::Apply(wp)) if !wp.spec.clusters.iter().any(|c| c.name == "east") => {
            Look::Loss(format!("{} assigned to {:?}", wp.metadata.name.unwrap_or_default(), wp.spec.clusters))
        }
        _ => Look::Other,
    });
    let events = watcher(Api::<KubeEvent>::namespaced(demo, "default"), config()).map(|e| match e {
        Ok(Event::InitDone) => Look::Listed,
        Ok(Event::Apply(ev)) if ev.reason.as_deref() == Some("Rescheduled") => Look::Loss(format!("Rescheduled: {:?}", ev.message)),
        _ => Look::Other,
    });
    let mut all = futures::stream::select_all([targets.boxed(), placements.boxed(), events.boxed()]);
    let mut listed = 0;
    while let Some(look) = all.next().await {
        match look {
            Look::Listed => {
                listed += 1;
                if listed == 3 {
                    let _ = watching.send(());
                }
            }
            Look::Loss(sign) => return sign,
            Look::Other => {}
        }
    }
    "the watches ended".to_string()
}

/// The workloads of the drills: name and replicas. Enough of them that moving them
/// all takes the scheduler more than an instant, so a crash can land in the middle.
const WORKLOADS: [(&str, i32); 8] =
    [("web", 2), ("api", 1), ("worker", 1), ("cache", 1), ("queue", 1), ("search", 2), ("auth", 1), ("mail", 1)];

/// Applies [`WORKLOADS`] to `demo` in one go.
fn apply_workloads(f: &Flotilla) {
    let all: Vec<String> = WORKLOADS.iter().map(|(name, replicas)| deployment(name).replicas(*replicas).cpu("100m").manifest()).collect();
    f.apply(&["--context", "demo", "-n", "default"], &all.join("---\n"));
}

/// When the control plane is killed, relative to the loss of a cluster.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// At the first sign that the loss was noticed: east Ready=False, a workload
    /// assigned off east, or a Rescheduled Event.
    AfterDetection,
    /// Before the grace has passed: east is dead but still stored Ready.
    BeforeDetection,
}

#[test]
fn a_control_plane_killed_as_a_failover_begins_finishes_it_after_restart() {
    crash_mid_failover(Crash::AfterDetection);
}

#[test]
fn a_control_plane_killed_before_a_loss_is_noticed_still_fails_over_after_restart() {
    crash_mid_failover(Crash::BeforeDetection);
}

fn crash_mid_failover(crash: Crash) {
    let mut east = sim("east", 8);
    let west = sim("west", 4);
    let mut f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    apply_workloads(&f);
    for (name, replicas) in WORKLOADS {
        assert_eq!(wait_assignment(&f, name, |a| !a.is_empty()), format!("east={replicas}"), "east has the most room");
        rollout(&f, name);
    }

    let lost;
    let noticed = match crash {
        Crash::AfterDetection => {
            // Watches, not polls: the scheduler moves all the workloads within
            // milliseconds, and the point is to crash while it does.
            let rt = runtime();
            let (root, demo) = (rt.block_on(client(&f, "root")), rt.block_on(client(&f, "demo")));
            let (watching, listed) = std::sync::mpsc::channel();
            let sign = rt.spawn(first_sign_of_loss(root, demo, watching));
            listed.recv_timeout(DEADLINE).expect("the watches listed");
            lost = Instant::now();
            east.kill9();
            let seen = rt.block_on(async { tokio::time::timeout(DEADLINE, sign).await });
            let seen = seen.unwrap_or_else(|_| panic!("no sign of the loss of east within {DEADLINE:?}\n{}", tail(&f.log())));
            format!("noticed after {:?} ({})", lost.elapsed(), seen.expect("the watch task"))
        }
        Crash::BeforeDetection => {
            lost = Instant::now();
            east.kill9();
            "not noticed yet".to_string()
        }
    };
    f.kill9();
    let down = lost.elapsed();
    let leaders = |f: &Flotilla| f.log().matches("became the leader").count();
    let led_before = leaders(&f);
    f.launch();
    let restarted = Instant::now();
    // What the crash left, read before the restarted scheduler acts: it first waits
    // out the dead process's Lease.
    let left: Vec<String> = assignments_of(&f, "wp").into_iter().chain(assignments_of(&f, "deploy")).collect();
    let east_stored = ready_status(&f, "east");
    if let Crash::BeforeDetection = crash {
        assert!(
            east_stored.starts_with("True/"),
            "the drill needs the control plane down before the loss is noticed, but east was stored {east_stored} \
             (killed {down:?} after east); the crash left {left:#?}"
        );
    }
    let leading = wait_for("the restarted scheduler leading", DEADLINE, || {
        if leaders(&f) > led_before {
            Ok(restarted.elapsed())
        } else {
            Err(format!("not leading yet\n{}", tail(&f.log())))
        }
    });

    for (name, replicas) in WORKLOADS {
        wait_assignment(&f, name, |a| a == format!("west={replicas}"));
    }
    let converged = restarted.elapsed();
    for (name, _) in WORKLOADS {
        rollout(&f, name);
    }
    let available = restarted.elapsed();
    eprintln!(
        "crash {crash:?}: east killed, {noticed}; control plane killed {down:?} after east, east stored Ready={east_stored}; \
         after the restart: leading in {leading:?}, all on west in {converged:?}, Available in {available:?}"
    );
    eprintln!("the crash left (WorkloadPlacements, then Deployments):\n{}", left.join("\n"));

    // Nothing lost: every Deployment is there with its replicas.
    let mut want: Vec<String> = WORKLOADS.iter().map(|(n, r)| format!("{n}={r}")).collect();
    want.sort();
    let have = f.k(&["--context", "demo", "get", "deploy", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.replicas} {end}"]);
    let mut have: Vec<&str> = have.split_whitespace().collect();
    have.sort();
    assert_eq!(have, want, "every Deployment survives, with its replicas");
    // One current assignment each, and the same one in the WorkloadPlacement's spec,
    // its labels and the Deployment's labels.
    let mut want_wp: Vec<String> = WORKLOADS.iter().map(|(n, r)| format!("{n}: labels [\"west\"] spec [\"west={r}\"]")).collect();
    want_wp.sort();
    assert_eq!(assignments_of(&f, "wp"), want_wp, "one WorkloadPlacement each, on west only");
    let mut want_labels: Vec<String> = WORKLOADS.iter().map(|(n, _)| format!("{n}: labels [\"west\"] spec []")).collect();
    want_labels.sort();
    assert_eq!(assignments_of(&f, "deploy"), want_labels, "each Deployment labelled for west only");
    for (name, replicas) in WORKLOADS {
        wait_until(&format!("the copy of {name} on west"), DEADLINE, || copy_replicas(&west, name), |r| r == replicas.to_string());
    }
    assert_eq!(ready_status(&f, "east"), "False/HeartbeatMissed");
    eprintln!("Rescheduled Events:\n{}", events(&f, "Rescheduled"));
}

#[test]
fn a_restarted_scheduler_moves_nothing_and_declares_no_cluster_lost() {
    let east = sim("east", 8);
    let west = sim("west", 4);
    let north = sim("north", 4);
    let flags: Vec<&str> = ["--no-scheduler"].into_iter().chain(FAST).collect();
    let f = unready_fleet(&flags, &[(&east, &[]), (&west, &[]), (&north, &[])]);
    let dir = f.data_dir().to_str().unwrap().to_string();
    let log = |id: &str| f.data_dir().join(format!("scheduler-{id}.log"));
    // Without leader election, a new scheduler does not wait out the killed one's Lease.
    let scheduler = |id: &str| {
        let args = ["--data-dir", &dir, "scheduler", "--identity", id, "--leader-elect=false", "--heartbeat-grace", FAST[3]];
        Killed(spawn_ready(&args, &log(id)).0)
    };
    let mut first = scheduler("first");
    wait_all_ready(&f, 3);
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: spread}\nspec: {numberOfClusters: 2, replicaScheduling: Divide}\n",
    );
    let workloads = [("web", 4, true), ("batch", 3, true), ("api", 1, false), ("worker", 2, false)];
    for (name, replicas, divided) in workloads {
        let manifest = deployment(name).replicas(replicas).cpu("100m");
        let manifest = if divided { manifest.placement("spread") } else { manifest };
        f.apply(&["--context", "demo", "-n", "default"], &manifest.manifest());
    }
    for (name, _, divided) in workloads {
        let clusters = if divided { 2 } else { 1 };
        wait_assignment(&f, name, |a| a.split_whitespace().count() == clusters);
        rollout(&f, name);
    }
    let placed = placements(&f);
    let labels = deployments(&f);
    let healthy = health(&f);
    let rescheduled = events(&f, "Rescheduled");
    eprintln!("before the restart:\n{}\n{}\n{}", placed.join("\n"), labels.join("\n"), healthy.join("\n"));
    assert!(healthy.iter().all(|h| h.contains(" Ready=True/")), "{healthy:?}");

    // Down for longer than a grace, while the syncers go on beating: the stored Ready
    // conditions are now stale, and true.
    let _ = first.0.kill();
    let _ = first.0.wait();
    let killed = Instant::now();
    wait_beats_since(&f, now_secs() + GRACE_SECS + 1, "heartbeats for more than a grace with no scheduler");
    let down = killed.elapsed();

    let second = scheduler("second");
    let restarted = Instant::now();
    let second_log = || std::fs::read_to_string(log("second")).unwrap_or_default();
    wait_until("the new scheduler's caches synced", DEADLINE, second_log, |l| l.contains("caches synced; scheduling"));
    let synced_at = now_secs();
    let synced = restarted.elapsed();
    // It reconciles: a new workload gets placed.
    f.apply(&["--context", "demo", "-n", "default"], &deployment("probe").cpu("100m").manifest());
    wait_assignment(&f, "probe", |a| !a.is_empty());
    let probe = restarted.elapsed();
    // Past the window in which a false NotReady would show: a grace after the caches
    // synced, plus two beats for what it would have written.
    wait_beats_since(&f, synced_at + GRACE_SECS + 2, "heartbeats past one grace after the restart");
    let watched = restarted.elapsed();
    eprintln!(
        "scheduler down {down:?} (syncers beating); restarted: caches synced in {synced:?}, a new workload placed in {probe:?}, \
         watched for {watched:?}"
    );

    let not_probe = |lines: Vec<String>| -> Vec<String> { lines.into_iter().filter(|l| !l.starts_with("default/probe ")).collect() };
    let log2 = second_log();
    let acted: Vec<&str> = log2.lines().filter(|l| l.contains("cluster health changed") || l.contains("placed")).collect();
    assert_eq!(health(&f), healthy, "no cluster changed health across the restart; the new scheduler logged:\n{}", acted.join("\n"));
    assert_eq!(not_probe(placements(&f)), placed, "no WorkloadPlacement changed; the new scheduler logged:\n{}", acted.join("\n"));
    assert_eq!(not_probe(deployments(&f)), labels, "no Deployment's assignment labels changed");
    assert_eq!(events(&f, "Rescheduled"), rescheduled, "no new Rescheduled Event");
    drop(second);
}

/// ConfigMap writers of the busy drill, as in the benchmark harness's `api_creates`.
const CONFIGMAP_WRITERS: usize = 16;
/// Deployment writers of the busy drill: every Deployment is a decision for the
/// scheduler, in the same process as the heartbeats' writes and the health checks.
const DEPLOYMENT_WRITERS: usize = 4;
/// How long the busy drill writes.
const LOAD_FOR: Duration = Duration::from_secs(20);

/// A client of the admin kubeconfig's `context` (a workspace).
async fn client(f: &Flotilla, context: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(f.kubeconfig()).expect("admin kubeconfig");
    let options = kube::config::KubeConfigOptions { context: Some(context.into()), ..Default::default() };
    let config = kube::Config::from_custom_kubeconfig(kc, &options).await.expect("kubeconfig context");
    kube::Client::try_from(config).expect("client")
}

/// What the writers did.
#[derive(Debug, Default)]
struct Writes {
    created: u64,
    failed: u64,
    first_error: Option<String>,
}

impl Writes {
    fn add(mut self, other: Writes) -> Writes {
        self.created += other.created;
        self.failed += other.failed;
        self.first_error = self.first_error.or(other.first_error);
        self
    }
}

/// `writers` tasks creating `make(writer, n)` through `apis` (round robin) as fast as
/// they can until `deadline`.
async fn create_until<K>(apis: Vec<Api<K>>, writers: usize, deadline: tokio::time::Instant, make: fn(usize, u64) -> Value) -> Writes
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + Sync + 'static,
{
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let api = apis[w % apis.len()].clone();
            tokio::spawn(async move {
                let mut done = Writes::default();
                while tokio::time::Instant::now() < deadline {
                    let object: K = serde_json::from_value(make(w, done.created + done.failed)).expect("a manifest");
                    match api.create(&PostParams::default(), &object).await {
                        Ok(_) => done.created += 1,
                        Err(e) => {
                            done.failed += 1;
                            done.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                done
            })
        })
        .collect();
    let mut all = Writes::default();
    for t in tasks {
        all = all.add(t.await.expect("a writer"));
    }
    all
}

fn configmap(w: usize, n: u64) -> Value {
    json!({"metadata": {"name": format!("w{w}-{n}")}, "data": {"k": "v".repeat(64)}})
}

fn load_deployment(w: usize, n: u64) -> Value {
    serde_json::to_value(deployment(&format!("d{w}-{n}")).cpu("100m").build()).expect("a Deployment serializes")
}

/// One SyncTarget as the drill's watch saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// Wall-clock milliseconds when the watch delivered it.
    at: i64,
    name: String,
    /// `status/reason` of Ready.
    ready: String,
    /// The heartbeat time, in milliseconds.
    beat: Option<i64>,
}

/// Records every version of every SyncTarget until aborted.
async fn watch_targets(root: kube::Client, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut stream = watcher(Api::<SyncTarget>::all(root), watcher::Config::default()).default_backoff().applied_objects().boxed();
    while let Some(item) = stream.next().await {
        let Ok(t) = item else { continue };
        let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("clock").as_millis() as i64;
        let status = t.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| format!("{}/{}", c.status, c.reason))
            .unwrap_or_default();
        let beat = status.and_then(|s| s.last_syncer_heartbeat_time.as_ref()).map(millis);
        seen.lock().unwrap().push(Seen { at, name: t.metadata.name.clone().unwrap_or_default(), ready, beat });
    }
}

#[test]
fn a_busy_control_plane_declares_no_cluster_lost() {
    let east = sim("east", 8);
    let west = sim("west", 4);
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    let o = f.flotilla(&["workspace", "create", "load"]);
    assert!(o.ok, "workspace create load: {o:?}");
    // The load's Deployments are decided, and fit nowhere: the scheduler works on
    // every one, and no cluster is asked to run them.
    f.apply(
        &["--context", "load"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: nowhere}\nspec: {clusterSelector: {matchLabels: {region: nowhere}}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: nowhere, annotations: {scheduling.flotilla.io/placement: nowhere}}\n",
    );
    apply_workloads(&f);
    for (name, _) in WORKLOADS {
        wait_assignment(&f, name, |a| !a.is_empty());
        rollout(&f, name);
    }
    let placed = placements(&f);
    let healthy = health(&f);
    let rescheduled = events(&f, "Rescheduled");
    assert!(healthy.iter().all(|h| h.contains(" Ready=True/")), "{healthy:?}");

    let rt = runtime();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let watch = rt.spawn(watch_targets(rt.block_on(client(&f, "root")), seen.clone()));
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(rt.block_on(client(&f, "load")));
    }
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + LOAD_FOR;
    let (configmaps, deployments) = rt.block_on(async {
        let cms = clients.iter().map(|c| Api::<ConfigMap>::namespaced(c.clone(), "default")).collect();
        let deploys = clients.iter().map(|c| Api::<Deployment>::namespaced(c.clone(), "nowhere")).collect();
        tokio::join!(
            create_until(cms, CONFIGMAP_WRITERS, deadline, configmap),
            create_until(deploys, DEPLOYMENT_WRITERS, deadline, load_deployment)
        )
    });
    let wrote_for = started.elapsed();
    let load_end = now_secs();
    // A false NotReady at the very end of the load would be written within a grace.
    wait_beats_since(&f, load_end + GRACE_SECS + 2, "heartbeats past one grace after the load");
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    let decided = f.k(&["--context", "load", "get", "wp", "-n", "nowhere", "-o", "name"]).lines().count();

    let decisions = deployments.created;
    let writes = configmaps.add(deployments);
    let rate = writes.created as f64 / wrote_for.as_secs_f64();
    // Heartbeat age when the watch delivered it (times have whole seconds: up to 1 s
    // of it is rounding), and the longest wait between two successive heartbeats.
    let max_age = seen.iter().filter_map(|s| s.beat.map(|b| s.at - b)).max().unwrap_or_default();
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    let mut max_gap = 0;
    for s in &seen {
        if let Some(b) = s.beat {
            if let Some(prev) = last.insert(&s.name, b) {
                max_gap = max_gap.max(b - prev);
            }
        }
    }
    eprintln!(
        "busy control plane: {} objects ({decisions} of them Deployments for the scheduler, {decided} decided a grace later) \
         created by {} writers in {wrote_for:?} ({rate:.0}/s), {} failed ({:?}); \
         {} SyncTarget versions watched; heartbeat age at delivery max {max_age} ms, longest gap between heartbeats {max_gap} ms \
         (interval 1 s, grace {GRACE_SECS} s)",
        writes.created,
        CONFIGMAP_WRITERS + DEPLOYMENT_WRITERS,
        writes.failed,
        writes.first_error,
        seen.len()
    );

    assert!(writes.created > 1000, "the load must really happen: {writes:?} in {wrote_for:?}");
    let not_ready: Vec<&Seen> = seen.iter().filter(|s| !s.ready.starts_with("True/")).collect();
    assert!(not_ready.is_empty(), "a busy control plane declared clusters not Ready: {not_ready:#?}\n{}", tail(&f.log()));
    assert_eq!(health(&f), healthy, "no cluster changed health under load");
    assert_eq!(placements(&f), placed, "no workload moved under load");
    assert_eq!(events(&f, "Rescheduled"), rescheduled, "no Rescheduled Event under load");
}
