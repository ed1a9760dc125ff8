//! A simulated cluster through the real kubectl: nodes, Deployments that become
//! Available, capacity that leaves pods Pending, rollouts, and restarts that keep state.

use crate::common;
use test_clusters::fixtures::deployment;

use std::time::Duration;

use common::{wait_for, wait_until, SimCluster};

/// Two nodes of 2 cpu / 4Gi; pods start 200 ms after binding.
const EAST: &str = r#"
name: east
labels: {region: us}
nodes:
  - count: 2
    cpu: "2"
    memory: 4Gi
    pods: 20
startupDelay: 200ms
"#;

const DEADLINE: Duration = Duration::from_secs(30);

fn running_pods(c: &SimCluster, app: &str) -> usize {
    c.k(&["get", "pods", "-l", &format!("app={app}"), "--field-selector=status.phase=Running", "-o", "name"]).lines().count()
}

#[test]
fn nodes_look_like_a_real_clusters() {
    let c = SimCluster::start(EAST);
    let nodes = c.k(&["get", "nodes"]);
    let rows: Vec<Vec<&str>> = nodes.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], "{nodes}");
    assert_eq!(rows.len(), 3, "two nodes: {nodes}");
    assert!(rows[1..].iter().all(|r| r[1] == "Ready" && r[4].starts_with("v1.32")), "{nodes}");
    let alloc = c.k(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={range .items[*]}{.status.allocatable.cpu}/{.status.allocatable.memory}/{.status.allocatable.pods} {end}",
    ]);
    assert_eq!(alloc.split_whitespace().collect::<Vec<_>>(), ["2/4Gi/20", "2/4Gi/20"], "{alloc}");
    // The kubeconfig has kind's shape.
    let ctx = c.k(&["config", "current-context"]);
    assert_eq!(ctx.trim(), "kind-east");
}

#[test]
fn a_deployment_rolls_out_and_becomes_available() {
    let c = SimCluster::start(EAST);
    assert!(c.k(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=3"]).contains("deployment.apps/web created"));
    let status = c.k(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    assert!(c.k(&["wait", "--for=condition=Available", "deployment/web", "--timeout=30s"]).contains("condition met"));
    assert_eq!(running_pods(&c, "web"), 3);
    let d = c.k(&["get", "deploy", "web", "-o", "jsonpath={.status.readyReplicas}/{.status.availableReplicas}/{.status.updatedReplicas}/{.status.observedGeneration}/{.metadata.generation}"]);
    assert_eq!(d, "3/3/3/1/1");
    // Every pod is owned by the Deployment's ReplicaSet, and bound to a node.
    let owners = c.k(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.metadata.ownerReferences[0].kind} {.spec.nodeName}{\"\\n\"}{end}",
    ]);
    assert!(owners.lines().all(|l| l.starts_with("ReplicaSet east-worker")), "{owners}");

    // Scale down removes pods; deleting the Deployment garbage-collects the rest.
    c.k(&["scale", "deployment/web", "--replicas=1"]);
    wait_for("web to scale down to one running pod", DEADLINE, || match running_pods(&c, "web") {
        1 => Ok(()),
        n => Err(format!("{n} running")),
    });
    c.k(&["delete", "deployment", "web", "--wait=true"]);
    wait_for("the pods to be garbage-collected", DEADLINE, || {
        let left = c.k(&["get", "pods,rs", "-l", "app=web", "-o", "name"]);
        if left.trim().is_empty() {
            Ok(())
        } else {
            Err(left)
        }
    });
}

#[test]
fn what_does_not_fit_stays_pending_with_the_reason() {
    let c = SimCluster::start(EAST);
    // 6 replicas of 900m on two 2-cpu nodes: two per node fit, two stay Pending.
    c.apply(&deployment("big").replicas(6).cpu("900m").container_name("main").image("busybox:1.36").manifest());
    wait_for("4 running and 2 pending", DEADLINE, || {
        let pending = c.k(&["get", "pods", "-l", "app=big", "--field-selector=status.phase=Pending", "-o", "name"]).lines().count();
        match (running_pods(&c, "big"), pending) {
            (4, 2) => Ok(()),
            seen => Err(format!("(running, pending) = {seen:?}")),
        }
    });
    let d = c.k(&[
        "get",
        "deploy",
        "big",
        "-o",
        "jsonpath={.status.availableReplicas}/{.spec.replicas} {.status.conditions[?(@.type==\"Available\")].status}",
    ]);
    assert_eq!(d, "4/6 False", "partly available, and not Available as a whole");
    let pending = c.k(&["get", "pods", "-l", "app=big", "--field-selector=status.phase=Pending", "-o", "name"]);
    let pod = pending.lines().next().unwrap();
    let cond = c.k(&[
        "get",
        pod,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].status} {.status.conditions[?(@.type==\"PodScheduled\")].reason}",
    ]);
    assert_eq!(cond, "False Unschedulable");
    let described = c.k(&["describe", pod]);
    assert!(described.contains("FailedScheduling") && described.contains("0/2 nodes are available: 2 Insufficient cpu"), "{described}");
}

#[test]
fn an_image_change_rolls_the_pods_over() {
    let c = SimCluster::start(EAST);
    c.apply(&deployment("api").replicas(4).cpu("100m").container_name("main").manifest());
    c.k(&["rollout", "status", "deployment/api", "--timeout=30s"]);
    c.k(&["set", "image", "deployment/api", "main=nginx:1.28"]);
    let status = c.k(&["rollout", "status", "deployment/api", "--timeout=30s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    wait_for("every pod to run the new image", DEADLINE, || {
        let images = c.k(&[
            "get",
            "pods",
            "-l",
            "app=api",
            "-o",
            "jsonpath={range .items[*]}{.spec.containers[0].image} {.status.phase}{\"\\n\"}{end}",
        ]);
        let lines: Vec<&str> = images.lines().collect();
        if lines.len() == 4 && lines.iter().all(|l| *l == "nginx:1.28 Running") {
            Ok(())
        } else {
            Err(images)
        }
    });
    let history = c.k(&["rollout", "history", "deployment/api"]);
    assert!(history.lines().any(|l| l.starts_with("2 ")), "{history}");
    let rs = c.k(&["get", "rs", "-l", "app=api", "-o", "jsonpath={range .items[*]}{.spec.replicas}{\" \"}{end}"]);
    let mut counts: Vec<&str> = rs.split_whitespace().collect();
    counts.sort();
    assert_eq!(counts, ["0", "4"], "the old ReplicaSet is scaled to zero and kept for rollback");
}

#[test]
fn a_restart_on_the_same_data_dir_is_the_same_cluster() {
    let mut c = SimCluster::start(EAST);
    c.apply(&deployment("keep").replicas(2).cpu("100m").container_name("main").manifest());
    c.k(&["rollout", "status", "deployment/keep", "--timeout=30s"]);
    let before = c.k(&["get", "pods", "-l", "app=keep", "-o", "name"]);
    c.kill9();
    c.launch();
    let after = c.k(&["get", "pods", "-l", "app=keep", "-o", "name"]);
    assert_eq!(before, after, "the same pods, not new ones");
    assert_eq!(running_pods(&c, "keep"), 2);
    assert_eq!(c.k(&["get", "nodes", "-o", "name"]).lines().count(), 2, "no duplicate nodes");
    // And it keeps working.
    c.k(&["scale", "deployment/keep", "--replicas=3"]);
    c.k(&["rollout", "status", "deployment/keep", "--timeout=30s"]);
}

#[test]
fn a_file_with_several_clusters_needs_a_name() {
    let dir = tempfile::tempdir().unwrap();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/test-clusters/demo.yaml");
    let o = std::process::Command::new(common::bin())
        .args(["--data-dir", dir.path().to_str().unwrap(), "sim-cluster", "--config", demo, "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && stderr.contains("defines 3 clusters (east, west, eu); choose one with --name"), "{stderr}");
    let o = std::process::Command::new(common::bin())
        .args(["--data-dir", dir.path().to_str().unwrap(), "sim-cluster", "--config", demo, "--name", "mars"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && stderr.contains("defines no cluster \"mars\"; it defines: east, west, eu"), "{stderr}");
    // With a name, that cluster runs: eu has one node.
    let (mut child, _url) = common::spawn_ready(
        &["--data-dir", dir.path().to_str().unwrap(), "sim-cluster", "--config", demo, "--name", "eu", "--listen", "127.0.0.1:0"],
        &dir.path().join("eu.log"),
    );
    let nodes = common::kubectl_cmd(&dir.path().join("eu.kubeconfig"), dir.path(), &["get", "nodes", "-o", "name"]).output().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(String::from_utf8_lossy(&nodes.stdout).trim(), "node/eu-worker");
}

/// Jobs run to completion (for their `sim.flotilla.io/run-seconds`), a broken image
/// fails a Job and crash-loops a Deployment's pods, as kubectl shows them.
#[test]
fn jobs_complete_and_broken_images_fail_or_crash_loop() {
    let c = SimCluster::start(EAST);
    assert!(c.k(&["create", "job", "pi", "--image=perl:5.34.0", "--", "perl", "-e", "print 1"]).contains("job.batch/pi created"));
    let done = c.k(&["wait", "--for=condition=complete", "job/pi", "--timeout=30s"]);
    assert!(done.contains("condition met"), "{done}");
    assert_eq!(c.k(&["get", "job", "pi", "-o", "jsonpath={.status.succeeded}/{.spec.completions}"]), "1/1");
    let pod = c.k(&["get", "pods", "-l", "job-name=pi", "-o", "jsonpath={.items[*].status.phase}"]);
    assert_eq!(pod, "Succeeded");
    let row = c.k(&["get", "pods", "-l", "job-name=pi", "--no-headers"]);
    assert!(row.contains("Completed"), "kubectl shows a finished pod as Completed: {row}");

    let broken = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad}\nspec:\n  backoffLimit: 1\n  template:\n    spec:\n      \
                  restartPolicy: Never\n      containers: [{name: c, image: 'busybox:broken'}]\n";
    c.apply(broken);
    let failed = c.k(&["wait", "--for=condition=failed", "job/bad", "--timeout=30s"]);
    assert!(failed.contains("condition met"), "{failed}");
    let reason = c.k(&["get", "job", "bad", "-o", "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}"]);
    assert_eq!(reason, "BackoffLimitExceeded");

    c.k(&["create", "deployment", "crash", "--image=nginx:broken"]);
    wait_for("the crash-looping pod to restart", DEADLINE, || {
        let out = c.k(&["get", "pods", "-l", "app=crash", "--no-headers"]);
        let cells: Vec<&str> = out.split_whitespace().collect();
        match cells.as_slice() {
            [_, "0/1", "CrashLoopBackOff", restarts, ..] if restarts.parse::<u32>().is_ok_and(|n| n >= 1) => Ok(()),
            _ => Err(out),
        }
    });
    let events = c.k(&["get", "events", "--field-selector", "reason=BackOff", "-o", "jsonpath={.items[*].source.component}"]);
    assert!(events.split_whitespace().any(|c| c == "kubelet"), "the kubelet records its back-off: {events:?}");
}

/// A CronJob makes Jobs on its schedule (`@every`, so the test need not wait for a
/// minute), and `kubectl create job --from=cronjob/...` runs one now.
#[test]
fn a_cronjob_makes_jobs_on_its_schedule() {
    let c = SimCluster::start(EAST);
    c.k(&["create", "cronjob", "hello", "--image=busybox:1.28", "--schedule=@every 2s", "--", "date"]);
    let last = wait_for("the CronJob's first schedule", DEADLINE, || {
        let s = c.k(&["get", "cronjob", "hello", "-o", "jsonpath={.status.lastScheduleTime}|{.status.lastSuccessfulTime}"]);
        match s.split_once('|') {
            Some((scheduled, succeeded)) if !scheduled.is_empty() && !succeeded.is_empty() => Ok(s),
            _ => Err(s),
        }
    });
    let jobs = c.k(&["get", "jobs", "-o", "jsonpath={.items[*].metadata.ownerReferences[0].name}"]);
    assert!(jobs.split_whitespace().all(|owner| owner == "hello") && !jobs.is_empty(), "{jobs} ({last})");
    assert!(c.k(&["create", "job", "now", "--from=cronjob/hello"]).contains("job.batch/now created"));
    assert!(c.k(&["wait", "--for=condition=complete", "job/now", "--timeout=30s"]).contains("condition met"));
    c.k(&["patch", "cronjob", "hello", "-p", r#"{"spec":{"suspend":true}}"#]);
    let row = c.k(&["get", "cronjob", "hello", "--no-headers"]);
    assert_eq!(row.split_whitespace().nth(4), Some("True"), "SUSPEND, after NAME, the two-word SCHEDULE and TIMEZONE: {row}");
}

/// A StatefulSet's pods come up in order with their names, each claim is bound to a
/// volume of the default class, and `kubectl rollout status` follows it.
#[test]
fn a_statefulset_runs_in_order_with_bound_claims() {
    let c = SimCluster::start(EAST);
    assert!(c.k(&["get", "storageclass", "--no-headers"]).starts_with("standard (default)"));
    let store = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: store}\nspec:\n  serviceName: store-hs\n  replicas: 3\n  \
                 selector: {matchLabels: {app: store}}\n  template:\n    metadata: {labels: {app: store}}\n    spec:\n      \
                 containers: [{name: store, image: 'registry.example.com/store:3.9'}]\n  volumeClaimTemplates:\n  \
                 - metadata: {name: data}\n    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n";
    c.apply(store);
    let out = c.k(&["rollout", "status", "sts/store", "--timeout=30s"]);
    assert!(out.contains("partitioned roll out complete") || out.contains("roll out complete"), "{out}");
    let pods = c.k(&["get", "pods", "-l", "app=store", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(pods, "store-0 store-1 store-2");
    let claims = c.k(&["get", "pvc", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.phase}/{.status.capacity.storage} {end}"]);
    assert_eq!(claims.trim(), "data-store-0=Bound/1Gi data-store-1=Bound/1Gi data-store-2=Bound/1Gi");
    assert_eq!(c.k(&["get", "pv", "-o", "name"]).lines().count(), 3);
    assert_eq!(c.k(&["get", "sts", "store", "--no-headers"]).split_whitespace().nth(1), Some("3/3"));
}

/// A DaemonSet runs one pod on each node, and its status counts them.
#[test]
fn a_daemonset_runs_on_every_node() {
    let c = SimCluster::start(EAST);
    let agent = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  selector: {matchLabels: {app: agent}}\n  \
                 template:\n    metadata: {labels: {app: agent}}\n    spec:\n      containers: [{name: agent, image: 'registry.example.com/agent:1.0'}]\n";
    c.apply(agent);
    let out = c.k(&["rollout", "status", "ds/agent", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let nodes = c.k(&["get", "nodes", "-o", "name"]).lines().count();
    let ready = c.k(&["get", "ds", "agent", "-o", "jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}"]);
    assert_eq!(ready, format!("{nodes}/{nodes}"));
    let on = c.k(&["get", "pods", "-l", "app=agent", "-o", "jsonpath={.items[*].spec.nodeName}"]);
    let distinct: std::collections::BTreeSet<&str> = on.split_whitespace().collect();
    assert_eq!(distinct.len(), nodes, "one per node: {on}");
}

/// A simulated container's log through `kubectl logs`: the line naming its image and
/// pod, a line every few seconds while it runs, `--tail`, a followed log that ends when
/// the pod is deleted, a crashed container's last run, and kube-apiserver's refusals.
#[test]
fn kubectl_logs_reads_a_simulated_containers_log() {
    let c = SimCluster::start(EAST);
    c.k(&["create", "deployment", "web", "--image=nginx:1.27"]);
    c.k(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    let pod = c.k(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}"]);
    let node = c.k(&["get", "pod", &pod, "-o", "jsonpath={.spec.nodeName}"]);
    let log = c.k(&["logs", "deploy/web"]);
    let first = log.lines().next().unwrap_or_default();
    assert_eq!(first, format!("nginx:1.27 started in pod default/{pod} on node {node}"), "{log}");
    // It goes on writing while it runs.
    let grown = wait_until("a line written since the start", DEADLINE, || c.k(&["logs", &pod]), |l| l.lines().count() >= 2);
    assert!(grown.lines().nth(1).is_some_and(|l| l == "nginx is running: 5s since it started"), "{grown}");
    assert_eq!(c.k(&["logs", &pod, "--tail=1"]).lines().count(), 1);
    let stamped = c.k(&["logs", &pod, "--timestamps", "--tail=1"]);
    assert!(stamped.split_whitespace().next().is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()), "{stamped}");

    // Refusals, as kube-apiserver words them.
    let o = c.kubectl(&["logs", &pod, "-c", "db"]);
    assert!(!o.ok && o.stderr.contains(&format!("container db is not valid for pod {pod}")), "{o:?}");
    let o = c.kubectl(&["logs", &pod, "--previous"]);
    assert!(!o.ok && o.stderr.contains(&format!("previous terminated container \"nginx\" in pod \"{pod}\" not found")), "{o:?}");
    // kubectl checks --tail and --since itself; the server checks them too.
    let o = c.kubectl(&["get", "--raw", &format!("/api/v1/namespaces/default/pods/{pod}/log?tailLines=-1")]);
    assert!(!o.ok && o.stderr.contains("tailLines: Invalid value: -1: must be greater than or equal to 0"), "{o:?}");

    // A followed log gets the new lines, and ends when the pod is deleted.
    let out = c.dir.path().join("follow.txt");
    let written = c.k(&["logs", &pod]).lines().count();
    let mut follow = c.kubectl_background(&["logs", "-f", &pod], &out);
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    wait_until("the followed log to gain a line", DEADLINE, read, |l| l.lines().count() > written);
    c.k(&["delete", "pod", &pod, "--wait=false"]);
    let ended = wait_for("kubectl logs -f to end once the pod is gone", DEADLINE, || match follow.try_wait() {
        Ok(Some(status)) => Ok(status),
        _ => Err(read()),
    });
    assert!(ended.success(), "{ended:?}: {}", read());
    // The pod's story, as kube-scheduler and a kubelet record it.
    let reasons = c.k(&["get", "events", "--field-selector", &format!("involvedObject.name={pod}"), "-o", "jsonpath={.items[*].reason}"]);
    for reason in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.split_whitespace().any(|r| r == reason), "{reason} among the pod's Events: {reasons}");
    }

    // A crash-looping container shows its last run, with --previous too.
    c.k(&["create", "deployment", "crash", "--image=nginx:broken"]);
    let crashed = wait_for("the crashed container's log", DEADLINE, || {
        let pod = c.k(&["get", "pods", "-l", "app=crash", "-o", "jsonpath={.items[0].metadata.name}"]);
        let o = c.kubectl(&["logs", &pod, "--previous"]);
        if o.ok && o.stdout.contains("nginx exited with code 1 (Error)") {
            Ok((pod, o.stdout))
        } else {
            Err(format!("{o:?}"))
        }
    });
    assert_eq!(c.k(&["logs", &crashed.0]), crashed.1, "the last run is what kubectl logs shows of a waiting container");
}
