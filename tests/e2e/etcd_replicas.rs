//! Several `flotilla start` replicas on one etcd serve one control plane, through the
//! real binary and the real kubectl. etcd comes from the `etcd` binary on PATH
//! (Debian's etcd-server); without it these tests say so and pass, unless
//! FLOTILLA_REQUIRE_ETCD is set, as CI sets it.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fleet::{register, sim, wait_all_ready, wait_assignment};
use common::{deployment, wait_until, Flotilla};
use controlplane::store::local_etcd::{LocalEtcd, SlowLink};

fn replica(etcd: &LocalEtcd) -> Flotilla {
    Flotilla::start_with(&["--etcd-servers", &etcd.endpoints().join(",")])
}

#[test]
fn replicas_share_one_control_plane_and_survive_each_other_and_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut etcd) = LocalEtcd::for_test(dir.path(), 1) else { return };
    let mut a = replica(&etcd);
    let b = replica(&etcd);

    // One control plane: the same admin token and CA, so either kubeconfig works anywhere.
    let read = |f: &Flotilla, name: &str| std::fs::read_to_string(f.data_dir().join(name)).unwrap();
    assert_eq!(read(&a, "admin.token"), read(&b, "admin.token"), "B joined with A's admin token");
    assert_eq!(read(&a, "ca.crt"), read(&b, "ca.crt"), "B serves with A's CA");

    // A write on A is read and watched on B, at the same resourceVersion.
    let watch_out = b.data_dir().join("watch.out");
    let mut watch = b.kubectl_background(&["get", "configmaps", "-w", "--output-watch-events", "--no-headers"], &watch_out);
    wait_until("B's watch to start", Duration::from_secs(10), || b.k(&["get", "configmaps", "-o", "name"]), |_| true);
    a.k(&["create", "configmap", "shared", "--from-literal=v=1"]);
    let on_a = a.k(&["get", "configmap", "shared", "-o", "jsonpath={.metadata.resourceVersion}"]);
    let on_b = b.k(&["get", "configmap", "shared", "-o", "jsonpath={.metadata.resourceVersion} {.data.v}"]);
    assert_eq!(on_b, format!("{on_a} 1"), "B reads A's write at A's resourceVersion");
    b.k(&["patch", "configmap", "shared", "-p", r#"{"data":{"v":"2"}}"#]);
    let after = a.k(&["get", "configmap", "shared", "-o", "jsonpath={.metadata.resourceVersion} {.data.v}"]);
    let (rv, v) = after.split_once(' ').unwrap();
    assert!(rv.parse::<u64>().unwrap() > on_a.parse::<u64>().unwrap() && v == "2", "A reads B's write: {after}");
    wait_until(
        "B's watch to show A's create and B's patch",
        Duration::from_secs(10),
        || std::fs::read_to_string(&watch_out).unwrap_or_default(),
        |seen| {
            let has = |event: &str| seen.lines().any(|l| l.split_whitespace().take(2).eq([event, "shared"]));
            has("ADDED") && has("MODIFIED")
        },
    );
    let _ = watch.kill();
    let _ = watch.wait();

    // Every replica serves the dashboard, and a session opened on one reads on another.
    for f in [&a, &b] {
        let page = f.k(&["--server", &f.url, "get", "--raw", "/dashboard/"]);
        assert!(page.contains("<title>Flotilla</title>"), "{}: {page}", f.url);
    }
    let opened = a.kubectl_stdin(&["--server", &a.url, "create", "--raw", "/dashboard/session", "-f", "-"], "{}");
    let session: serde_json::Value = serde_json::from_str(&opened.stdout).unwrap_or_else(|e| panic!("{opened:?}: {e}"));
    let token = session["status"]["token"].as_str().unwrap_or_default();
    let listed = b.kubectl(&["--server", &b.url, "--token", token, "get", "--raw", "/apis/workload.flotilla.io/v1alpha1/synctargets"]);
    assert!(listed.ok && listed.stdout.contains("SyncTargetList"), "a session from A on B: {listed:?}");

    // etcd down: writes fail with a 503 that names etcd, readyz says so, and reads
    // are served from the replica's copy.
    etcd.kill(0);
    let refused = a.kubectl(&["create", "configmap", "during", "--from-literal=v=1"]);
    assert!(!refused.ok && refused.stderr.contains("etcd") && refused.stderr.contains("unavailable"), "{refused:?}");
    let ready = wait_until("A's readyz to report etcd", Duration::from_secs(15), || a.raw("/readyz").stderr, |e| !e.is_empty());
    assert!(ready.contains("ServiceUnavailable") || ready.contains("503"), "{ready}");
    let cached = a.kubectl(&["get", "configmap", "shared", "-o", "jsonpath={.data.v}"]);
    assert_eq!((cached.ok, cached.stdout.as_str()), (true, "2"), "reads go on from the replica's copy: {cached:?}");
    assert!(
        cached.stderr.contains("Warning: etcd at") && cached.stderr.contains("serving the data as of revision"),
        "and say so: {cached:?}"
    );

    // etcd back: no restart of either replica is needed.
    etcd.restart(0).unwrap();
    wait_until("A's readyz to be ok again", Duration::from_secs(20), || a.raw("/readyz").stdout, |o| o == "ok");
    wait_until(
        "a write to land after etcd returned",
        Duration::from_secs(20),
        || {
            let out = a.kubectl(&["create", "configmap", "after", "--from-literal=v=1"]);
            format!("{}{}", out.stdout, out.stderr)
        },
        |o| o.contains("created") || o.contains("AlreadyExists"),
    );

    // Each controller runs in one replica, under its Lease.
    let identity = |f: &Flotilla| read(f, "scheduler-identity").trim().to_string();
    let controllers = [
        "flotilla-companion-status",
        "flotilla-companions",
        "flotilla-controlplane-controllers",
        "flotilla-cronjobs",
        "flotilla-revisions",
        "flotilla-scheduler",
        "flotilla-status-aggregator",
    ];
    // The membership and syncer Leases are another matter (the tests below).
    let controller_leases = |f: &Flotilla| {
        let all = leases(f);
        all.lines()
            .filter(|l| !l.starts_with("flotilla-replica-") && !l.starts_with("flotilla-syncer-"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let held = wait_until(
        "every controller's Lease to be held",
        Duration::from_secs(10),
        || controller_leases(&b),
        |l| l.lines().count() == controllers.len(),
    );
    for line in held.lines() {
        let (name, holder) = line.split_once('=').unwrap();
        assert!(controllers.contains(&name), "an unexpected Lease {name}");
        assert!(holder == identity(&a) || holder == identity(&b), "{name} is held by {holder:?}, neither replica");
    }

    // kill -9 of A: B goes on, takes over every controller within the lease duration
    // (15 s) and a retry (2 s), and A rejoins with what was written meanwhile.
    a.kill9();
    let b_holds_all = format!("{}\n", controllers.map(|c| format!("{c}={}", identity(&b))).join("\n"));
    wait_until(
        "B to hold every controller's Lease after A's kill -9",
        Duration::from_secs(20),
        || controller_leases(&b),
        |l| l == b_holds_all,
    );
    b.k(&["create", "configmap", "while-a-was-down", "--from-literal=v=1"]);
    assert_eq!(b.k(&["get", "configmap", "after", "-o", "name"]).trim(), "configmap/after", "B serves what A wrote before it died");
    a.launch();
    assert_eq!(a.k(&["get", "configmap", "while-a-was-down", "-o", "jsonpath={.data.v}"]), "1", "A rejoined with B's write");
}

/// `name=holder` of every Lease in root/flotilla-system, one a line, sorted.
fn leases(f: &Flotilla) -> String {
    f.k(&["get", "leases", "-n", "flotilla-system", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.holderIdentity}{'\\n'}{end}"])
}

/// Two replicas on one etcd, A started first (so it schedules), with clusters east
/// and west registered and workspace `demo`; east's syncer prefers A when `east_in_a`,
/// B otherwise. Both clusters are Ready and each one's syncer holds its Lease in the
/// replica it prefers.
struct Pair {
    _dir: tempfile::TempDir,
    _etcd: LocalEtcd,
    east: common::SimCluster,
    west: common::SimCluster,
    a: Flotilla,
    b: Flotilla,
    id_a: String,
    id_b: String,
}

fn pair(east_in_a: bool) -> Option<Pair> {
    pair_where(|a_syncs_east, _| a_syncs_east == east_in_a)
}

/// [`pair`], with A's identity chosen so that `wanted(east's syncer prefers A,
/// west's syncer prefers A)` holds.
fn pair_where(wanted: impl Fn(bool, bool) -> bool) -> Option<Pair> {
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::for_test(dir.path(), 1)?;
    let (east, west) = (sim("east", 4), sim("west", 4));
    let id_b = "replica-b".to_string();
    let id_a = (0..)
        .map(|i| format!("replica-a{i}"))
        .find(|a| {
            let owners = syncer::shard::assign(&["east".into(), "west".into()], &[a.clone(), id_b.clone()]);
            wanted(owners["east"] == *a, owners["west"] == *a)
        })
        .unwrap();

    let servers = etcd.endpoints().join(",");
    let a = Flotilla::start_as(&id_a, &["--etcd-servers", &servers]);
    register(&a, &east, &[]);
    register(&a, &west, &[]);
    assert!(a.flotilla(&["workspace", "create", "demo"]).ok);
    let b = Flotilla::start_as(&id_b, &["--etcd-servers", &servers]);
    wait_all_ready(&b, 2);
    let owners = syncer::shard::assign(&["east".into(), "west".into()], &[id_a.clone(), id_b.clone()]);
    let held = wait_until(
        "both clusters' syncers to run under a Lease, each in the replica it prefers",
        Duration::from_secs(30),
        || leases(&b),
        |l| ["east", "west"].iter().all(|c| l.contains(&format!("flotilla-syncer-{c}={}", owners[*c]))),
    );
    assert!(held.contains(&format!("flotilla-scheduler={id_a}")), "A, started first, schedules: {held}");
    Some(Pair { _dir: dir, _etcd: etcd, east, west, a, b, id_a, id_b })
}

const READINESS: &str = r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#;

/// Checks every half second for `window` that both clusters stay Ready, and returns
/// how long after `since` `f`'s Leases first passed `held`.
fn stays_ready_until_held(f: &Flotilla, since: Instant, window: Duration, held: impl Fn(&str) -> bool) -> Duration {
    let mut taken_over = None;
    while since.elapsed() < window {
        let ready = f.k(&["get", "st", "-o", READINESS]);
        assert_eq!(ready.trim(), "east=True west=True", "{:.1?} after the kill -9\n{}", since.elapsed(), common::tail(&f.log()));
        if taken_over.is_none() && held(&leases(f)) {
            taken_over = Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    taken_over.unwrap_or_else(|| panic!("the Leases were not taken over {window:?} after the kill -9:\n{}", leases(f)))
}

#[test]
fn a_lost_replica_s_syncers_move_and_their_clusters_are_not_declared_lost() {
    // The fields a pattern leaves out would be dropped at once: etcd and the clusters too.
    let Some(Pair { mut b, a, id_a, _etcd, _dir, east: _east, west: _west, .. }) = pair(false) else { return };
    // B syncs east and A schedules: east's heartbeats stop with B, though east is fine.
    b.kill9();
    let killed = Instant::now();
    let took = stays_ready_until_held(&a, killed, Duration::from_secs(25), |l| l.contains(&format!("flotilla-syncer-east={id_a}")));
    // The Lease's 15 s, a retry, and the half-second steps of this check.
    assert!(took <= Duration::from_secs(19), "A took east's syncer over after {took:?}");
    eprintln!("A held east's syncer Lease {took:.1?} after B's kill -9");
    assert!(a.log().contains("missed heartbeats are not counted"), "the scheduler said why it held east:\n{}", common::tail(&a.log()));
}

#[test]
fn killing_the_replica_that_schedules_and_syncs_loses_no_write_and_no_cluster() {
    let Some(Pair { mut a, b, east, id_b, _etcd, _dir, west: _west, .. }) = pair(true) else { return };
    b.apply(&["--context", "demo"], &deployment("web").replicas(2).cpu("100m").manifest());
    wait_assignment(&b, "web", |a| !a.is_empty());

    // Clients write through A until it dies; every write it acknowledged must be there.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop, kubeconfig, dir) = (acked.clone(), stop.clone(), a.kubeconfig(), a.data_dir().to_path_buf());
        std::thread::spawn(move || {
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let name = format!("w{i}");
                let out = common::kubectl_cmd(&kubeconfig, &dir, &["create", "configmap", &name, "--request-timeout=5s"]).output().unwrap();
                if out.status.success() {
                    acked.lock().unwrap().push(name);
                }
            }
        })
    };
    wait_until(
        "some writes through A",
        Duration::from_secs(20),
        || acked.lock().unwrap().len().to_string(),
        |n| n.parse::<usize>().unwrap() >= 5,
    );
    a.kill9();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    let stored = b.k(&["get", "configmaps", "-o", "jsonpath={range .items[*]}{.metadata.name}{'\\n'}{end}"]);
    let missing: Vec<&String> = acked.iter().filter(|n| !stored.lines().any(|l| l == n.as_str())).collect();
    assert!(missing.is_empty(), "writes A acknowledged are missing on B: {missing:?} of {}", acked.len());

    // B takes over the scheduler and every syncer within the lease duration and a
    // retry, and neither cluster is declared lost meanwhile.
    let all_b =
        |l: &str| ["flotilla-scheduler", "flotilla-syncer-east", "flotilla-syncer-west"].iter().all(|n| l.contains(&format!("{n}={id_b}")));
    let taken_over = stays_ready_until_held(&b, killed, Duration::from_secs(30), all_b);
    assert!(taken_over <= Duration::from_secs(19), "B took over after {taken_over:?}");
    eprintln!("B held the scheduler's and every syncer's Lease {taken_over:.1?} after A's kill -9");

    // B schedules what comes after, and fails a lost cluster over.
    b.apply(&["--context", "demo"], &deployment("after").cpu("100m").manifest());
    wait_assignment(&b, "after", |a| !a.is_empty());
    let mut east = east;
    east.kill9();
    wait_assignment(&b, "web", |a| a == "west=2");
}

#[test]
fn a_failover_under_way_when_the_scheduling_replica_dies_is_completed_by_another() {
    // A schedules and syncs west; B syncs east. When east is lost, A starts moving
    // east's workloads to west and dies: B must finish the move and sync west.
    let Some(Pair { mut a, b, mut east, west, id_b, _etcd, _dir, .. }) = pair_where(|east_in_a, west_in_a| !east_in_a && west_in_a) else {
        return;
    };
    let names: Vec<String> = (0..6).map(|i| format!("app{i}")).collect();
    for name in &names {
        b.apply(&["--context", "demo"], &deployment(name).cpu("100m").manifest());
    }
    let before: Vec<String> = names.iter().map(|n| wait_assignment(&b, n, |a| !a.is_empty())).collect();
    let on_east = names.iter().zip(&before).filter(|(_, a)| a.contains("east")).count();
    assert!(on_east > 0, "some workloads run on east before it is lost: {before:?}");

    east.kill9();
    let lost = Instant::now();
    wait_until("east to be declared lost", Duration::from_secs(30), || b.k(&["get", "st", "-o", READINESS]), |r| r.contains("east=False"));
    let detected = lost.elapsed();
    a.kill9();
    let killed = lost.elapsed();
    let moved_by_a = names.iter().filter(|n| common::fleet::assignment(&b, n) == "west=1").count();

    for name in &names {
        wait_assignment(&b, name, |a| a == "west=1");
    }
    let moved = lost.elapsed();
    // Until B holds the status aggregator too (A may have held it), the workspace's
    // status is the one written before east was lost, and `rollout status` would
    // pass on it: the copies on west are what proves B synced them.
    wait_until(
        "B to sum the workloads' status",
        Duration::from_secs(30),
        || leases(&b),
        |l| l.contains(&format!("flotilla-status-aggregator={id_b}")),
    );
    for name in &names {
        wait_until(
            &format!("{name}'s copy on west with 1 replica"),
            Duration::from_secs(30),
            || common::fleet::copy_replicas(&west, name),
            |c| c == "1",
        );
        common::fleet::rollout(&b, name);
    }
    let available = lost.elapsed();
    let holders = leases(&b);
    assert!(
        holders.contains(&format!("flotilla-scheduler={id_b}")) && holders.contains(&format!("flotilla-syncer-west={id_b}")),
        "B schedules and syncs west: {holders}"
    );
    eprintln!(
        "east lost at 0; declared lost at {detected:.1?}; A killed at {killed:.1?}, with {moved_by_a} of {} workloads assigned to west; \
         all assigned to west at {moved:.1?}; all Available at {available:.1?}",
        names.len()
    );
}

#[test]
fn a_watch_from_before_what_a_replica_holds_is_told_410_and_a_relist_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = LocalEtcd::for_test(dir.path(), 1) else { return };
    let a = replica(&etcd);
    a.k(&["create", "configmap", "early", "--from-literal=v=1"]);
    let early = a.k(&["get", "configmap", "early", "-o", "jsonpath={.metadata.resourceVersion}"]);
    a.k(&["create", "configmap", "later", "--from-literal=v=1"]);
    // B loads the store after both writes: its watch window starts there, and the
    // revision of `early` is history that B never held (as after a compaction).
    let b = replica(&etcd);
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={early}&timeoutSeconds=5");
    let out = b.raw(&path);
    assert!(out.stdout.contains(r#""code":410"#) && out.stdout.contains("Expired"), "{out:?}");
    // What a client does then: list, and watch from the list's revision.
    let listed = b.k(&["get", "configmaps", "-o", "jsonpath={.metadata.resourceVersion} {.items[*].metadata.name}"]);
    let (rv, names) = listed.split_once(' ').unwrap();
    assert_eq!(names, "early later");
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=2");
    let out = b.raw(&path);
    assert!(out.ok && !out.stdout.contains("ERROR"), "a watch from the list's revision is served: {out:?}");
}

#[test]
fn a_replica_stopped_cleanly_hands_its_work_over_at_once() {
    let Some(Pair { mut a, b, id_b, _etcd, _dir, east: _east, west: _west, .. }) = pair(true) else { return };
    let status = a.stop();
    assert!(status.success(), "SIGTERM: {status:?}");
    let stopped = Instant::now();
    let all_b =
        |l: &str| ["flotilla-scheduler", "flotilla-syncer-east", "flotilla-syncer-west"].iter().all(|n| l.contains(&format!("{n}={id_b}")));
    let took = stays_ready_until_held(&b, stopped, Duration::from_secs(8), all_b);
    assert!(took <= Duration::from_secs(5), "B took A's work over {took:?} after A stopped: its Leases were not given up");
    eprintln!("B held the scheduler's and every syncer's Lease {took:.1?} after A stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_watcher_on_a_restarted_replica_is_told_410_and_relists() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::{self, Event};

    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = LocalEtcd::for_test(dir.path(), 1) else { return };
    let (a, mut b) = tokio::task::block_in_place(|| (replica(&etcd), replica(&etcd)));
    let config = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(b.kubeconfig()).unwrap(), &Default::default())
        .await
        .unwrap();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    async fn next<T>(events: &mut (impl futures::Stream<Item = T> + Unpin)) -> T {
        tokio::time::timeout(Duration::from_secs(30), events.next()).await.expect("an event within 30 s").expect("the stream goes on")
    }
    while !matches!(next(&mut events).await, Ok(Event::InitDone)) {}

    // B goes away; a write lands through A; B comes back with a window that starts
    // after that write, so the watcher's revision is history B never held.
    tokio::task::block_in_place(|| {
        b.kill9();
        a.k(&["create", "configmap", "while-b-was-down", "--from-literal=v=1"]);
        b.launch();
    });
    let mut seen = Vec::new();
    loop {
        match next(&mut events).await {
            Ok(Event::Init) => seen.push("relist".to_string()),
            Ok(Event::InitApply(cm)) => seen.push(cm.metadata.name.unwrap_or_default()),
            Ok(Event::InitDone) if seen.iter().any(|s| s == "relist") => break,
            Ok(other) => seen.push(format!("{other:?}").chars().take(40).collect()),
            Err(e) => seen.push(format!("error: {e}")),
        }
        assert!(seen.len() < 100, "no relist: {seen:?}");
    }
    assert!(
        seen.first().is_some_and(|s| s.contains("too old resource version") && s.contains("Expired")),
        "the watch is told 410 first: {seen:?}"
    );
    assert!(seen.iter().any(|s| s == "while-b-was-down"), "the relist brings the write made while B was down: {seen:?}");
}

async fn client(f: &Flotilla) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(f.kubeconfig()).unwrap();
    kube::Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_watch_lags_still_reads_what_another_just_wrote() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, GetParams, ListParams, PostParams};

    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = LocalEtcd::for_test(dir.path(), 1) else { return };
    // B reaches etcd through a link that hands etcd's answers over a second late, so
    // its copy of the data is always a second behind A's writes.
    let lag = Duration::from_secs(1);
    let link = SlowLink::start(&etcd.endpoints()[0], lag).unwrap();
    let (a, b) = tokio::task::block_in_place(|| (replica(&etcd), Flotilla::start_with(&["--etcd-servers", &link.url()])));
    let (on_a, on_b): (kube::Api<ConfigMap>, kube::Api<ConfigMap>) =
        (kube::Api::namespaced(client(&a).await, "default"), kube::Api::namespaced(client(&b).await, "default"));
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(serde_json::json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();

    for name in ["one", "two", "three"] {
        let made = on_a.create(&PostParams::default(), &cm(name)).await.unwrap();
        // resourceVersion=0 reads whatever B holds: the write is not there yet.
        let held = on_b.get_with(name, &GetParams::any()).await;
        assert!(
            matches!(held, Err(kube::Error::Api(ref s)) if s.code == 404),
            "B's copy lags by {lag:?}, yet already has {name}: the test cannot tell a barrier from luck"
        );
        // A read of the latest state (no resourceVersion) waits for it.
        let got = on_b.get_opt(name).await.unwrap();
        assert_eq!(
            got.and_then(|c| c.metadata.resource_version),
            made.metadata.resource_version,
            "B reads {name} right after A created it"
        );
    }
    on_a.delete("two", &DeleteParams::default()).await.unwrap();
    assert!(on_b.get_with("two", &GetParams::any()).await.is_ok(), "B's copy has not taken in the delete yet");
    let names = |l: kube::core::ObjectList<ConfigMap>| l.items.into_iter().filter_map(|c| c.metadata.name).collect::<Vec<_>>();
    let listed = names(on_b.list(&ListParams::default()).await.unwrap());
    assert!(listed.contains(&"one".to_string()) && listed.contains(&"three".to_string()), "B lists what A created: {listed:?}");
    assert!(!listed.contains(&"two".to_string()), "B lists nothing A deleted before the list: {listed:?}");

    // kubectl, through B, gets the same answers.
    on_a.create(&PostParams::default(), &cm("four")).await.unwrap();
    let out = tokio::task::block_in_place(|| b.k(&["get", "configmap", "four", "-o", "jsonpath={.data.k}"]));
    assert_eq!(out, "v", "kubectl get through B reads A's write");
}
