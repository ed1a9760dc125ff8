//! The scheduler end to end: the real `flotilla` binary (control plane, scheduler and
//! push-mode syncers), simulated cluster processes, and real kubectl.

use crate::common;
use test_clusters::fixtures::deployment;

use std::time::{Duration, Instant};

use common::fleet::{assignment, copy_replicas, events, fleet, register, rollout, sim, wait_assignment, Killed, DEADLINE, FAST};
use common::{signal, spawn_ready, wait_for, wait_until, Flotilla, SimCluster};

#[test]
fn places_by_room_divides_by_placement_and_reports_what_does_not_fit() {
    let east = sim("east", 8);
    let west = sim("west", 2);
    let f = fleet(&[], &[(&east, &["region=us"]), (&west, &["region=eu"])]);

    // The default Placement: one cluster, the roomiest.
    f.apply(&["--context", "demo", "-n", "default"], &deployment("web").replicas(3).cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=3");
    rollout(&f, "web");
    assert_eq!(copy_replicas(&east, "web"), "3");
    wait_until(
        "the Scheduled Event in describe",
        DEADLINE,
        || f.k(&["--context", "demo", "describe", "deploy", "web"]),
        |d| d.contains("Scheduled") && d.contains("assigned to east=3 by Placement default"),
    );
    let wp = f.k(&["--context", "demo", "get", "wp", "web", "-o", r#"jsonpath={.status.conditions[?(@.type=="Scheduled")].status}"#]);
    assert_eq!(wp, "True");

    // A Placement over both clusters, named by an annotation: Divide 4 by room.
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: spread}\nspec: {numberOfClusters: 2, replicaScheduling: Divide}\n",
    );
    f.k(&["--context", "demo", "annotate", "deploy", "web", "scheduling.flotilla.io/placement=spread"]);
    f.k(&["--context", "demo", "scale", "deploy", "web", "--replicas=4"]);
    let split = wait_assignment(&f, "web", |a| {
        a.contains("east=")
            && a.contains("west=")
            && a.split_whitespace().map(|s| s.rsplit('=').next().unwrap().parse::<u32>().unwrap()).sum::<u32>() == 4
    });
    rollout(&f, "web");
    let on = |c: &SimCluster| copy_replicas(c, "web").parse::<u32>().unwrap_or(0);
    wait_until(
        "copies matching the split",
        DEADLINE,
        || format!("{split}: east {} west {}", on(&east), on(&west)),
        |_| on(&east) + on(&west) == 4,
    );
    // east has four times west's room: it takes the larger share.
    assert!(on(&east) > on(&west), "{split}");
    // Four writers share the WorkloadPlacement status, each applying only its own
    // fields: the two syncers their entries, the scheduler its condition, the
    // aggregator the rest. None has removed another's.
    let status_writers = r#"jsonpath={range .metadata.managedFields[?(@.subresource=="status")]}{.manager}/{.operation} {end}"#;
    let (entries, conditions) = (r#"jsonpath={.status.clusters[*].name}"#, r#"jsonpath={.status.conditions[*].type}"#);
    wait_until(
        "each writer of the WorkloadPlacement status with its own fields",
        DEADLINE,
        || {
            let wp = |o: &str| f.k(&["--context", "demo", "get", "wp", "web", "--show-managed-fields", "-o", o]);
            let sorted = |o: &str| {
                let mut words: Vec<String> = wp(o).split_whitespace().map(String::from).collect();
                words.sort_unstable();
                words.join(" ")
            };
            format!("{} | {} / {}", sorted(status_writers), sorted(entries), sorted(conditions))
        },
        |seen| {
            seen == "flotilla-scheduler/Apply flotilla-status-aggregator/Apply flotilla-syncer-east/Apply flotilla-syncer-west/Apply \
                     | east west / Available Scheduled Synced"
        },
    );

    // A region-pinned Placement through the namespace's annotation.
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: eu}\nspec: {clusterSelector: {matchLabels: {region: eu}}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: europe, annotations: {scheduling.flotilla.io/placement: eu}}\n",
    );
    f.apply(&["--context", "demo", "-n", "europe"], &deployment("api").cpu("100m").manifest());
    let api_on = wait_until(
        "api placed",
        DEADLINE,
        || f.kubectl(&["--context", "demo", "-n", "europe", "get", "wp", "api", "-o", "jsonpath={.spec.clusters[*].name}"]).stdout,
        |on| !on.trim().is_empty(),
    );
    assert_eq!(api_on, "west");

    // Too big for any cluster: it stays pending, and says why, counted per reason.
    f.apply(&["--context", "demo", "-n", "default"], &deployment("huge").cpu("64").manifest());
    let why = wait_until("FailedScheduling for huge", DEADLINE, || events(&f, "FailedScheduling"), |e| e.contains("huge: "));
    assert!(why.contains("huge: 0/2 clusters fit: 2 Insufficient cpu"), "{why}");
    let cond = f.k(&[
        "--context",
        "demo",
        "get",
        "wp",
        "huge",
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="Scheduled")].status}/{.status.conditions[?(@.type=="Scheduled")].message}"#,
    ]);
    assert_eq!(cond, "False/0/2 clusters fit: 2 Insufficient cpu");
    assert_eq!(assignment(&f, "huge"), "");
    let labels = f.k(&["--context", "demo", "get", "deploy", "huge", "-o", "jsonpath={.metadata.labels}"]);
    assert!(!labels.contains("state.workload.flotilla.io"), "{labels}");

    // Deleting a workload deletes its WorkloadPlacement once the copies are gone.
    f.k(&["--context", "demo", "delete", "deploy", "web", "--timeout=45s"]);
    let get_wp = || {
        let o = f.kubectl(&["--context", "demo", "get", "wp", "web"]);
        format!("ok={} {}{}", o.ok, o.stdout, o.stderr)
    };
    wait_until("web's WorkloadPlacement deleted", DEADLINE, get_wp, |o| o.starts_with("ok=false") && o.contains("NotFound"));
    assert_eq!(copy_replicas(&east, "web"), "");
}

#[test]
fn a_killed_cluster_fails_over_and_nothing_moves_back() {
    fail_over(Fault::Kill);
}

#[test]
fn a_frozen_cluster_fails_over_and_nothing_moves_back() {
    fail_over(Fault::Freeze);
}

enum Fault {
    /// SIGKILL: the API goes away.
    Kill,
    /// SIGSTOP: connections are accepted but never answered.
    Freeze,
}

fn fail_over(fault: Fault) {
    let mut east = sim("east", 8);
    let west = sim("west", 4);
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    // Every version of the Deployment, as `kubectl get -w` prints them.
    let watched = f.data_dir().join("web-versions.txt");
    let template = r#"jsonpath={.metadata.labels}|{.metadata.finalizers}{"\n"}"#;
    let mut watch = f.kubectl_background(&["--context", "demo", "-n", "default", "get", "deploy", "-w", "-o", template], &watched);
    f.apply(&["--context", "demo", "-n", "default"], &deployment("web").replicas(2).cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=2");
    rollout(&f, "web");

    let killed = Instant::now();
    match fault {
        Fault::Kill => east.kill9(),
        Fault::Freeze => east.signal("STOP"),
    }
    let moved = wait_assignment(&f, "web", |a| a == "west=2");
    let rescheduled = killed.elapsed();
    rollout(&f, "web");
    let available = killed.elapsed();
    let ready = f.k(&["get", "st", "east", "-o", r#"jsonpath={.status.conditions[?(@.type=="Ready")].reason}"#]);
    assert_eq!(ready, "HeartbeatMissed");
    wait_until(
        "the Rescheduled Event",
        DEADLINE,
        || events(&f, "Rescheduled"),
        |e| e.contains("web: moved off east (NotReady); now on west=2"),
    );
    eprintln!("failover: {moved} after {rescheduled:?}, Available after {available:?} (grace 4s)");
    // A cluster's label and its syncer's finalizer come and go in the same write: no
    // version is labelled for a cluster without holding its finalizer, and the move
    // takes the lost cluster's finalizer with its label, so deleting the Deployment
    // would not wait for a cluster that is gone.
    let _ = watch.kill();
    let _ = watch.wait();
    let versions = std::fs::read_to_string(&watched).unwrap();
    let label = |c: &str| format!("state.workload.flotilla.io/{c}");
    let finalizer = |c: &str| format!("workload.flotilla.io/syncer-{c}");
    for c in ["east", "west"] {
        let labelled: Vec<&str> = versions.lines().filter(|v| v.contains(&label(c))).collect();
        assert!(!labelled.is_empty(), "no version labelled for {c}:\n{versions}");
        assert!(labelled.iter().all(|v| v.contains(&finalizer(c))), "a version labelled for {c} without its finalizer:\n{versions}");
    }
    let last = versions.lines().last().unwrap_or_default();
    assert!(!last.contains(&finalizer("east")), "the lost cluster's finalizer outlived the move:\n{versions}");
    assert!(rescheduled < Duration::from_secs(4 + 6), "rescheduling took {rescheduled:?}");
    // What an operator alerts on: the failover, and the lost cluster's health.
    let metrics = f.kubectl(&["get", "--raw", "/metrics"]).stdout;
    let metric = |line: &str| metrics.lines().find(|l| l.starts_with(line)).map(|l| l.to_string());
    assert_eq!(
        metric("flotilla_scheduler_failovers_total{cause=\"NotReady\"}").as_deref(),
        Some(r#"flotilla_scheduler_failovers_total{cause="NotReady"} 1"#)
    );
    assert_eq!(
        metric("flotilla_scheduler_cluster_ready{cluster=\"east\"}").as_deref(),
        Some(r#"flotilla_scheduler_cluster_ready{cluster="east"} 0"#)
    );
    assert_eq!(
        metric("flotilla_scheduler_cluster_ready{cluster=\"west\"}").as_deref(),
        Some(r#"flotilla_scheduler_cluster_ready{cluster="west"} 1"#)
    );
    let age: f64 = metric("flotilla_scheduler_cluster_heartbeat_age_seconds{cluster=\"east\"}")
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("east's heartbeat age is exported:\n{metrics}"));
    assert!(age > 4.0, "east's last heartbeat is older than the grace: {age}");
    assert!(metric("flotilla_scheduler_decision_duration_seconds_count").is_some_and(|l| !l.ends_with(" 0")), "{metrics}");
    // The lost cluster's syncer writes nothing while its cluster does not answer: its
    // entry stays (the copy may still run there), and counts in no status. A frozen
    // cluster's probe takes up to two intervals to give up, about as long as the
    // grace in this test, so its syncer may have removed the entry before it knew.
    let entries = r#"jsonpath={.status.clusters[*].name}"#;
    if matches!(fault, Fault::Kill) {
        assert_eq!(f.k(&["--context", "demo", "-n", "default", "get", "wp", "web", "-o", entries]), "east west");
        assert_eq!(f.k(&["--context", "demo", "-n", "default", "get", "wp", "web", "-o", "jsonpath={.status.summary}"]), "west=2/2");
    }

    // The cluster comes back: its stale copy and its entry go, and the workload stays
    // on west.
    match fault {
        Fault::Kill => east.launch(),
        Fault::Freeze => east.signal("CONT"),
    }
    let ready = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    wait_until("east Ready again", DEADLINE, || f.k(&["get", "st", "east", "-o", ready]), |r| r == "True");
    wait_until("east's stale copy removed", DEADLINE, || copy_replicas(&east, "web"), str::is_empty);
    wait_until(
        "east's status entry removed",
        DEADLINE,
        || f.k(&["--context", "demo", "-n", "default", "get", "wp", "web", "-o", entries]),
        |e| e == "west",
    );
    assert_eq!(assignment(&f, "web"), "west=2");
}

#[test]
fn with_no_room_after_a_loss_the_workload_stays_until_a_cluster_registers() {
    let mut east = sim("east", 4);
    let f = fleet(&FAST, &[(&east, &[])]);
    f.apply(&["--context", "demo", "-n", "default"], &deployment("web").replicas(2).cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=2");
    rollout(&f, "web");

    east.kill9();
    let why = wait_until("FailedScheduling after the loss", DEADLINE, || events(&f, "FailedScheduling"), |e| e.contains("web: "));
    assert!(why.contains("web: 0/1 clusters fit: 1 NotReady; it stays on east=2 until a cluster fits"), "{why}");
    assert_eq!(assignment(&f, "web"), "east=2", "nothing is taken away when nothing fits");
    let labels = f.k(&["--context", "demo", "get", "deploy", "web", "-o", "jsonpath={.metadata.labels}"]);
    assert!(labels.contains("state.workload.flotilla.io/east"), "{labels}");

    let west = sim("west", 4);
    register(&f, &west, &[]);
    assert_eq!(wait_assignment(&f, "web", |a| a == "west=2"), "west=2");
    rollout(&f, "web");
}

#[test]
fn a_deregistered_cluster_with_nowhere_to_go_lets_go_of_its_workloads() {
    let east = sim("east", 4);
    let f = fleet(&[], &[(&east, &[])]);
    let ns = ["--context", "demo", "-n", "default"];
    f.apply(&ns, &deployment("web").replicas(2).cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=2");
    rollout(&f, "web");

    let o = f.flotilla(&["cluster", "deregister", "east"]);
    assert!(o.ok, "{o:?}");
    let why = wait_until("FailedScheduling after the deregistration", DEADLINE, || events(&f, "FailedScheduling"), |e| e.contains("web: "));
    let dropped = "web: 0/0 clusters fit: no clusters are registered; dropped east=2 (deregistered)";
    assert_eq!(why.trim(), dropped);
    assert_eq!(wait_assignment(&f, "web", str::is_empty), "", "no assignment to a cluster that is gone");
    let meta = f.k(&["--context", "demo", "get", "deploy", "web", "-o", "jsonpath={.metadata.labels} {.metadata.finalizers}"]);
    assert!(!meta.contains("east"), "neither the label nor the finalizer of east is left: {meta}");
    // The Deployment no longer claims replicas that nobody manages.
    let status = wait_until(
        "the Deployment saying nothing runs",
        DEADLINE,
        || {
            f.k(&[
                "--context",
                "demo",
                "get",
                "deploy",
                "web",
                "-o",
                r#"jsonpath={.status.availableReplicas} {.status.conditions[?(@.type=="Available")].message}"#,
            ])
        },
        |s| s.starts_with("0 "),
    );
    assert!(status.contains("no cluster is assigned"), "{status}");
    assert_eq!(events(&f, "FailedScheduling").trim(), dropped, "one Event for the one change");
    // Nor does its WorkloadPlacement keep the report of a cluster that is gone.
    wait_until(
        "east's status entry removed",
        DEADLINE,
        || f.k(&["--context", "demo", "get", "wp", "web", "-o", "jsonpath={.status.clusters[*].name}"]),
        str::is_empty,
    );
    // And it can be deleted: no finalizer of a cluster that is gone holds it.
    let o = f.kubectl(&["--context", "demo", "delete", "deploy", "web", "--timeout=30s"]);
    assert!(o.ok, "delete: {o:?}\n{}", common::tail(&f.log()));
}

#[test]
fn a_workload_deleted_while_its_cluster_is_lost_goes_once_the_cluster_is_deregistered() {
    let mut east = sim("east", 4);
    let f = fleet(&FAST, &[(&east, &[])]);
    f.apply(&["--context", "demo", "-n", "default"], &deployment("web").cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=1");
    rollout(&f, "web");

    east.kill9();
    wait_until("FailedScheduling after the loss", DEADLINE, || events(&f, "FailedScheduling"), |e| e.contains("web: "));
    let o = f.kubectl(&["--context", "demo", "delete", "deploy", "web", "--wait=false"]);
    assert!(o.ok, "{o:?}");
    // The lost cluster's syncer cannot remove its copy, so the deletion waits for it.
    let fins = || f.k(&["--context", "demo", "get", "deploy", "web", "--ignore-not-found", "-o", "jsonpath={.metadata.finalizers}"]);
    assert!(fins().contains("syncer-east"), "the deletion waits on east: {}", fins());
    let o = f.flotilla(&["cluster", "deregister", "east"]);
    assert!(o.ok, "{o:?}");
    let o = f.kubectl(&["--context", "demo", "wait", "--for=delete", "deploy/web", "--timeout=30s"]);
    assert!(o.ok, "the Deployment is gone once east is deregistered: {o:?}\n{}", common::tail(&f.log()));
}

#[test]
fn cordon_takes_no_new_work_and_drain_moves_it_all() {
    let east = sim("east", 8);
    let west = sim("west", 4);
    let f = fleet(&[], &[(&east, &[]), (&west, &[])]);
    f.apply(&["--context", "demo", "-n", "default"], &deployment("a").cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "a", |a| !a.is_empty()), "east=1");

    let o = f.flotilla(&["cluster", "cordon", "east"]);
    assert!(o.ok, "{o:?}");
    wait_until("east cordoned", DEADLINE, || f.k(&["get", "st", "east", "-o", "jsonpath={.status.schedulable}"]), |s| s == "Cordoned");
    f.apply(&["--context", "demo", "-n", "default"], &deployment("b").cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "b", |a| !a.is_empty()), "west=1", "a cordoned cluster takes nothing new");
    assert_eq!(assignment(&f, "a"), "east=1", "what runs on a cordoned cluster stays");

    let o = f.flotilla(&["cluster", "drain", "east"]);
    assert!(o.ok, "{o:?}");
    assert_eq!(wait_assignment(&f, "a", |a| a == "west=1"), "west=1");
    rollout(&f, "a");
    wait_until("the drained cluster empty", DEADLINE, || copy_replicas(&east, "a"), str::is_empty);
}

#[test]
fn a_drain_keeps_each_old_copy_until_its_replacement_is_available() {
    // Pods take 2 s to start: far longer than the scheduler's looks at a drain.
    let slow = |name: &str| {
        SimCluster::start(&format!("name: {name}\nnodes:\n  - {{count: 2, cpu: \"8\", memory: 16Gi, pods: 110}}\nstartupDelay: 2s\n"))
    };
    let (east, west) = (slow("east"), slow("west"));
    let f = fleet(&[], &[(&east, &[]), (&west, &[])]);
    f.apply(&["--context", "demo", "-n", "default"], &deployment("web").replicas(3).cpu("100m").manifest());
    let from = wait_assignment(&f, "web", |a| !a.is_empty());
    let (from, to, old) = match from.as_str() {
        "east=3" => ("east", "west", &east),
        "west=3" => ("west", "east", &west),
        other => panic!("web is on one cluster first: {other}"),
    };
    rollout(&f, "web");
    // Every change of the Deployment's available count, from kubectl's own watch.
    let seen = f.data_dir().join("available.txt");
    let watch = Killed(f.kubectl_background(
        &["--context", "demo", "-n", "default", "get", "deploy", "web", "-w", "-o", "jsonpath={.status.availableReplicas}{\"\\n\"}"],
        &seen,
    ));
    std::thread::sleep(Duration::from_millis(500));

    let o = f.flotilla(&["cluster", "drain", from, "--timeout", "2m"]);
    assert!(o.ok && o.stdout.contains("each old copy kept until its replacement is Available"), "{o:?}");
    assert_eq!(wait_assignment(&f, "web", |a| a == format!("{to}=3")), format!("{to}=3"));
    rollout(&f, "web");
    wait_until("the drained cluster empty", DEADLINE, || copy_replicas(old, "web"), str::is_empty);
    std::thread::sleep(Duration::from_secs(1));
    drop(watch);
    let counts: Vec<String> = std::fs::read_to_string(&seen).unwrap().lines().map(str::to_string).collect();
    assert!(counts.len() > 1, "the watch saw the drain: {counts:?}");
    assert!(
        counts.iter().all(|c| c.parse::<u32>().is_ok_and(|n| n >= 3)),
        "the available count never dropped below the 3 desired during the drain: {counts:?}"
    );
    // Make-before-break: the new cluster was added first, with the old one kept beside it.
    let moved = events(&f, "Rescheduled");
    assert!(moved.contains(&format!("web: adding {to}=3 before leaving {from} (draining)")), "{moved}");
    assert!(moved.contains(&format!("web: moved off {from} (draining); now on {to}=3")), "{moved}");
}

#[test]
fn two_schedulers_one_acts_and_the_standby_takes_over() {
    let east = sim("east", 8);
    let f = Flotilla::start_with(&["--no-scheduler"]);
    register(&f, &east, &[]);
    assert!(f.flotilla(&["workspace", "create", "demo"]).ok);
    let dir = f.data_dir().to_str().unwrap().to_string();
    let log = |id: &str| f.data_dir().join(format!("scheduler-{id}.log"));
    let mut a = Killed(spawn_ready(&["--data-dir", &dir, "scheduler", "--identity", "a"], &log("a")).0);
    let mut b = Killed(spawn_ready(&["--data-dir", &dir, "scheduler", "--identity", "b"], &log("b")).0);
    let holder =
        || f.kubectl(&["get", "lease", "-n", "flotilla-system", "flotilla-scheduler", "-o", "jsonpath={.spec.holderIdentity}"]).stdout;
    let first = wait_for("a Lease holder", DEADLINE, || match holder().as_str() {
        h @ ("a" | "b") => Ok(h.to_string()),
        other => Err(other.to_string()),
    });
    f.apply(&["--context", "demo", "-n", "default"], &deployment("web").cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=1");
    let acted = |id: &str| std::fs::read_to_string(log(id)).unwrap_or_default().contains("became the leader");
    let (leader, _standby, second) = if first == "a" { (&mut a.0, &mut b.0, "b") } else { (&mut b.0, &mut a.0, "a") };
    assert!(acted(&first) && !acted(second), "only the Lease holder acts");

    // A graceful stop gives the Lease up; the standby takes over and schedules.
    signal(leader.id(), "TERM");
    let status = leader.wait().expect("wait for the leader");
    assert!(status.success(), "the leader exits cleanly on SIGTERM: {status:?}");
    let took_over = Instant::now();
    wait_until("the standby holding the Lease", DEADLINE, holder, |h| h == second);
    let leader_log = std::fs::read_to_string(log(&first)).unwrap_or_default();
    assert!(
        took_over.elapsed() < Duration::from_secs(5),
        "a released Lease is taken at the next try: {:?}\n{leader_log}",
        took_over.elapsed()
    );
    f.apply(&["--context", "demo", "-n", "default"], &deployment("api").cpu("100m").manifest());
    assert_eq!(wait_assignment(&f, "api", |a| !a.is_empty()), "east=1");
    assert_eq!(assignment(&f, "web"), "east=1", "the new leader moves nothing");
}
