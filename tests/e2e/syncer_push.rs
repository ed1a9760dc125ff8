//! The push-mode syncer, end to end: `flotilla start` with a registered simulated
//! cluster, driven with the real kubectl on both sides. Until the scheduler exists,
//! each test assigns the workload itself, as the scheduler will: the
//! `state.workload.flotilla.io/<target>=Sync` label on the Deployment and a labelled
//! WorkloadPlacement with the cluster's share.

use crate::common;

use std::time::Duration;

use serde_json::json;

use common::{assigned, copies, deployment, wait_for, wait_until, Flotilla, SimCluster};

const EAST: &str = "name: east\nnodes:\n  - {count: 2, cpu: \"4\", memory: 8Gi, pods: 110}\nstartupDelay: 200ms\n";
const DEADLINE: Duration = Duration::from_secs(30);

/// A control plane with workspace `demo` and the simulated cluster `east` registered.
fn fleet() -> (Flotilla, SimCluster) {
    fleet_of(EAST)
}

/// [`fleet`], with `east` defined by `def`.
fn fleet_of(def: &str) -> (Flotilla, SimCluster) {
    // These tests play the scheduler's part: they write the assignment themselves.
    let f = Flotilla::start_with(&["--no-scheduler"]);
    let east = SimCluster::start(def);
    let o = f.flotilla(&["cluster", "register", "east", "--kubeconfig", east.kubeconfig().to_str().unwrap()]);
    assert!(o.ok, "register: {o:?}");
    let o = f.flotilla(&["workspace", "create", "demo"]);
    assert!(o.ok, "workspace create: {o:?}");
    (f, east)
}

fn flotilla_namespaces(east: &SimCluster) -> String {
    let o = east.kubectl(&["get", "ns", "-l", "workload.flotilla.io/sync-target=east", "-o", "name"]);
    o.stdout.trim().to_string()
}

#[test]
fn an_assigned_deployment_runs_downstream_and_rolls_out_upstream() {
    let (f, east) = fleet();
    // Every version of the WorkloadPlacement, as a watch sees it: the synced
    // generation and whether the cluster had observed it, in each entry.
    let versions = f.dir.path().join("wp-versions.out");
    let mut watch = f.kubectl_background(
        &[
            "--context",
            "demo",
            "-n",
            "default",
            "get",
            "wp",
            "-w",
            "-o",
            r#"jsonpath={.status.clusters[*].syncedGeneration}:{.status.clusters[*].observed}{"\n"}"#,
        ],
        &versions,
    );
    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("web").replicas(3).cpu("100m"), 3));

    // Down: one copy in the hashed namespace, with the share and the upstream's marks.
    let copy = wait_for("the copy downstream", DEADLINE, || {
        let c = copies(&east);
        if c.is_empty() {
            Err("no copy yet".into())
        } else {
            Ok(c)
        }
    });
    let (ns, rest) = copy.split_once('/').unwrap();
    assert!(ns.starts_with("flotilla-") && ns.len() == "flotilla-".len() + 12, "hashed namespace: {copy}");
    assert_eq!(rest, "web=3 nginx:1.27");
    let marks = east.k(&["-n", ns, "get", "deploy", "web", "-o", "jsonpath={.metadata.annotations.workload\\.flotilla\\.io/upstream}"]);
    assert_eq!(marks, "demo/default/web");
    let locator = east.k(&["get", "ns", ns, "-o", "jsonpath={.metadata.annotations.workload\\.flotilla\\.io/namespace-locator}"]);
    assert_eq!(locator, r#"{"workspace":"demo","namespace":"default"}"#);

    // Up: the workspace's Deployment rolls out, as kubectl sees it.
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/web", "--timeout=30s"]);
    assert!(o.ok && o.stdout.contains("successfully rolled out"), "{o:?}");
    let o = f.kubectl(&["--context", "demo", "wait", "--for=condition=Available", "deploy/web", "--timeout=30s"]);
    assert!(o.ok, "{o:?}");
    let wp = wait_for("the WorkloadPlacement columns", DEADLINE, || {
        let t = f.k(&["--context", "demo", "get", "wp", "web", "--no-headers"]);
        if t.contains("east=3/3") && t.contains("3/3") {
            Ok(t)
        } else {
            Err(t)
        }
    });
    assert!(wp.starts_with("web"), "{wp}");
    let fin = f.k(&["--context", "demo", "get", "deploy", "web", "-o", "jsonpath={.metadata.finalizers}"]);
    assert_eq!(fin, r#"["workload.flotilla.io/syncer-east"]"#);

    // An upstream change propagates and rolls out again.
    f.k(&["--context", "demo", "set", "image", "deploy/web", "app=nginx:1.28"]);
    wait_until("the new image downstream", DEADLINE, || copies(&east), |c| c.ends_with("web=3 nginx:1.28"));
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/web", "--timeout=30s"]);
    assert!(o.ok && o.stdout.contains("successfully rolled out"), "{o:?}");
    // The syncer reports a copy once its cluster has observed it, so one write says
    // both: no version of the entry says a generation was synced but not observed.
    let _ = watch.kill();
    let _ = watch.wait();
    let seen = std::fs::read_to_string(&versions).unwrap_or_default();
    assert!(seen.lines().any(|l| l == "1:true") && seen.lines().any(|l| l == "2:true"), "{seen}");
    assert!(!seen.contains("false"), "an entry reported an unobserved generation:\n{seen}");

    // The heartbeat reports the cluster's room and its workload.
    let st = wait_for("the heartbeat", DEADLINE, || {
        let st = f.k(&[
            "--context",
            "root",
            "get",
            "st",
            "east",
            "-o",
            "jsonpath={.status.cpu} {.status.workloads} {.status.lastSyncerHeartbeatTime}",
        ]);
        if st.starts_with("7700m/8 1 ") {
            Ok(st)
        } else {
            Err(st)
        }
    });
    assert!(st.len() > "7700m/8 1 ".len(), "a heartbeat time: {st}");
}

#[test]
fn a_burst_of_rollouts_spends_the_progress_budget_and_every_one_still_finishes() {
    // Pods take 3 s to start, so each copy's entry is held past its PROGRESS_HOLD of
    // 1 s with a step to report (observed, nothing ready yet), all within about a
    // second: more reports than the budget of 10 at once and 10 a second.
    const SLOW_EAST: &str = "name: east\nnodes:\n  - {count: 2, cpu: \"8\", memory: 16Gi, pods: 110}\nstartupDelay: 3s\n";
    const N: usize = 60;
    let (f, _east) = fleet_of(SLOW_EAST);
    let manifest: Vec<String> = (0..N).map(|i| assigned(deployment(&format!("burst-{i:02}")).cpu("100m"), 1)).collect();
    f.apply(&["--context", "demo", "-n", "default"], &manifest.join("---\n"));
    // What a rollout ends on is never put off: every entry reaches 1/1.
    wait_until(
        "every WorkloadPlacement reporting its copy available",
        Duration::from_secs(90),
        || f.k(&["--context", "demo", "get", "wp", "--no-headers"]),
        |t| t.lines().filter(|l| l.contains("east=1/1")).count() == N,
    );
    let o = f.kubectl(&["--context", "demo", "wait", "--for=condition=Available", "deploy", "--all", "--timeout=30s"]);
    assert!(o.ok, "{o:?}");
    let metrics = f.k(&["--context", "root", "get", "--raw", "/metrics"]);
    let deferred: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"flotilla_syncer_progress_reports_deferred_total{cluster="east"} "#))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(
        deferred > 0.0,
        "{N} copies rolling out at once put off no progress report:\n{}",
        metrics.lines().filter(|l| l.starts_with("flotilla_syncer")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn drift_downstream_is_reverted() {
    let (f, east) = fleet();
    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("web").replicas(2).cpu("100m"), 2));
    let copy =
        wait_for("the copy", DEADLINE, || Some(copies(&east)).filter(|c| c.ends_with("web=2 nginx:1.27")).ok_or_else(|| copies(&east)));
    let ns = copy.split_once('/').unwrap().0.to_string();

    east.k(&["-n", &ns, "scale", "deploy/web", "--replicas=5"]);
    wait_for("the scale reverted", DEADLINE, || {
        Some(copies(&east)).filter(|c| c.ends_with("web=2 nginx:1.27")).ok_or_else(|| copies(&east))
    });

    east.k(&["-n", &ns, "delete", "deploy/web", "--wait=true"]);
    wait_for("the deleted copy recreated", DEADLINE, || {
        Some(copies(&east)).filter(|c| c.ends_with("web=2 nginx:1.27")).ok_or_else(|| copies(&east))
    });
}

#[test]
fn deletion_and_unassignment_remove_the_copies_and_their_namespace() {
    let (f, east) = fleet();
    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("gone").cpu("100m"), 1));
    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("moved").cpu("100m"), 1));
    wait_until("both copies", DEADLINE, || copies(&east), |c| c.lines().count() == 2);

    // Deleting upstream waits for the copy to go (the finalizer), then completes.
    let o = f.kubectl(&["--context", "demo", "delete", "deploy", "gone", "--timeout=30s"]);
    assert!(o.ok, "{o:?}");
    let left = copies(&east);
    assert!(!left.contains("/gone="), "the copy went before the upstream object: {left}");

    // Unassigning (the label removed) deletes the copy and releases the finalizer.
    f.k(&["--context", "demo", "label", "deploy", "moved", "state.workload.flotilla.io/east-"]);
    wait_for("the unassigned copy removed", DEADLINE, || Some(copies(&east)).filter(String::is_empty).ok_or_else(|| copies(&east)));
    wait_until(
        "the finalizer released",
        DEADLINE,
        || f.k(&["--context", "demo", "get", "deploy", "moved", "-o", "jsonpath={.metadata.finalizers}"]),
        |fin| fin.is_empty(),
    );
    wait_until("the emptied namespace removed", DEADLINE, || flotilla_namespaces(&east), |ns| ns.is_empty());
}

#[test]
fn a_config_map_and_a_secret_follow_their_deployment() {
    let (f, east) = fleet();
    let refs = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: web-secret}
stringData: {password: s3cret}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
data: {a: b}
"#;
    let web = deployment("web").replicas(2).cpu("100m").with(|d| {
        let pod = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        pod.volumes = Some(vec![serde_json::from_value(json!({"name": "creds", "secret": {"secretName": "web-secret"}})).unwrap()]);
        pod.containers[0].env_from = Some(vec![serde_json::from_value(json!({"configMapRef": {"name": "web-config"}})).unwrap()]);
    });
    let manifest = assigned(web, 2);
    f.apply(&["--context", "demo", "-n", "default"], &format!("{refs}---\n{manifest}"));

    let copy = wait_for("the Deployment's copy", DEADLINE, || {
        Some(copies(&east)).filter(|c| c.ends_with("web=2 nginx:1.27")).ok_or_else(|| copies(&east))
    });
    let ns = copy.split_once('/').unwrap().0.to_string();
    let data = |kind: &str, name: &str, field: &str| {
        east.kubectl(&["-n", &ns, "get", kind, name, "-o", &format!("jsonpath={{.data.{field}}}")]).stdout.trim().to_string()
    };
    wait_for("the ConfigMap and the Secret beside it", DEADLINE, || {
        let got = (data("cm", "web-config", "greeting"), data("secret", "web-secret", "password"));
        if got == ("hello".to_string(), "czNjcmV0".to_string()) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    let o = east.kubectl(&["-n", &ns, "get", "cm", "unrelated"]);
    assert!(!o.ok && o.stderr.contains("NotFound"), "only what the template references goes down: {o:?}");
    // Upstream, the referenced objects carry the cluster's assignment label.
    let labelled = f.k(&["--context", "demo", "get", "cm,secret", "-l", "state.workload.flotilla.io/east=Sync", "-o", "name"]);
    assert_eq!(labelled.trim(), "configmap/web-config\nsecret/web-secret");

    // An upstream edit follows.
    f.k(&["--context", "demo", "patch", "cm", "web-config", "--type=merge", "-p", r#"{"data":{"greeting":"hi"}}"#]);
    wait_for("the edited ConfigMap downstream", DEADLINE, || {
        Some(data("cm", "web-config", "greeting")).filter(|g| g == "hi").ok_or_else(|| data("cm", "web-config", "greeting"))
    });

    // The Deployment deleted: its ConfigMap and Secret copies and the namespace go, and
    // upstream they lose the assignment label but stay.
    let o = f.kubectl(&["--context", "demo", "delete", "deploy", "web", "--timeout=30s"]);
    assert!(o.ok, "{o:?}");
    wait_for("the namespace and everything in it removed", DEADLINE, || {
        let ns = flotilla_namespaces(&east);
        let left = east.k(&["get", "cm,secret", "-A", "-l", "workload.flotilla.io/sync-target=east", "-o", "name"]);
        if ns.is_empty() && left.trim().is_empty() {
            Ok(())
        } else {
            Err(format!("namespaces: {ns:?}; copies: {left:?}"))
        }
    });
    wait_until(
        "the upstream labels removed",
        DEADLINE,
        || f.k(&["--context", "demo", "get", "cm,secret", "-l", "workload.flotilla.io/referenced", "-o", "name"]),
        |l| l.trim().is_empty(),
    );
    assert_eq!(f.k(&["--context", "demo", "get", "cm", "web-config", "-o", "jsonpath={.data.greeting}"]), "hi");
}

#[test]
fn a_cluster_that_comes_back_removes_what_is_no_longer_assigned() {
    let (f, mut east) = fleet();
    for name in ["keep", "gone", "moved"] {
        f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment(name).cpu("100m"), 1));
    }
    for name in ["keep", "gone", "moved"] {
        let o = f.kubectl(&["--context", "demo", "rollout", "status", &format!("deploy/{name}"), "--timeout=30s"]);
        assert!(o.ok, "{o:?}");
    }
    let reachable =
        || f.k(&["--context", "root", "get", "st", "east", "-o", r#"jsonpath={.status.conditions[?(@.type=="ClusterReachable")].status}"#]);
    wait_for("ClusterReachable=True", DEADLINE, || Some(reachable()).filter(|s| s.trim() == "True").ok_or_else(reachable));

    east.kill9();
    wait_for("ClusterReachable=False", DEADLINE, || Some(reachable()).filter(|s| s.trim() == "False").ok_or_else(reachable));
    // While it is away: one deleted, one unassigned, one changed.
    f.k(&["--context", "demo", "delete", "deploy", "gone", "--wait=false"]);
    f.k(&["--context", "demo", "label", "deploy", "moved", "state.workload.flotilla.io/east-"]);
    f.k(&["--context", "demo", "label", "wp", "moved", "state.workload.flotilla.io/east-"]);
    f.k(&["--context", "demo", "set", "image", "deploy/keep", "app=nginx:1.28"]);
    // The change cannot be synced, and the WorkloadPlacement says why.
    let synced = || f.k(&["--context", "demo", "get", "wp", "keep", "-o", r#"jsonpath={.status.conditions[?(@.type=="Synced")].message}"#]);
    wait_for("the sync error on the WorkloadPlacement", DEADLINE, || {
        Some(synced()).filter(|m| m.contains("DownstreamError")).ok_or_else(synced)
    });
    // The deletion waits for the copy to be removed: nothing is lost while the cluster is away.
    let ts = f.k(&["--context", "demo", "get", "deploy", "gone", "-o", "jsonpath={.metadata.deletionTimestamp}"]);
    assert!(!ts.trim().is_empty(), "gone is still there, terminating");

    east.launch();
    // Before anything else, the returning cluster loses what is no longer its own.
    let got = wait_for("only keep, at its new image, on east", DEADLINE, || {
        let c = copies(&east);
        if c.lines().count() == 1 && c.ends_with("keep=1 nginx:1.28") {
            Ok(c)
        } else {
            Err(c)
        }
    });
    assert!(got.contains("/keep="), "{got}");
    wait_for("the deletion completed", DEADLINE, || {
        let o = f.kubectl(&["--context", "demo", "get", "deploy", "gone"]);
        if !o.ok && o.stderr.contains("NotFound") {
            Ok(())
        } else {
            Err(format!("{o:?}"))
        }
    });
    let fin = f.k(&["--context", "demo", "get", "deploy", "moved", "-o", "jsonpath={.metadata.finalizers}"]);
    assert_eq!(fin.trim(), "", "the unassigned workload keeps no finalizer");
    wait_for("ClusterReachable=True again", DEADLINE, || Some(reachable()).filter(|s| s.trim() == "True").ok_or_else(reachable));
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/keep", "--timeout=30s"]);
    assert!(o.ok && o.stdout.contains("successfully rolled out"), "{o:?}");
}
