//! A fleet for the scheduler tests: simulated clusters registered with a control
//! plane, workspace `demo`, and readers of what the scheduler wrote (assignments,
//! Events, the copies on the clusters), all through kubectl as a user would.

use std::time::Duration;

use super::{tail, wait_for, wait_until, Flotilla, SimCluster};

/// How long a scheduler test waits for one thing to happen.
pub const DEADLINE: Duration = Duration::from_secs(45);
/// Fast heartbeats, so that failover tests finish in seconds; the grace still leaves
/// three missed beats before a cluster is declared lost.
pub const FAST: [&str; 4] = ["--heartbeat-interval", "1s", "--heartbeat-grace", "4s"];

/// A simulated cluster of two nodes of `cpu` cores each.
pub fn sim(name: &str, cpu: u32) -> SimCluster {
    SimCluster::start(&format!("name: {name}\nnodes:\n  - {{count: 2, cpu: \"{cpu}\", memory: 16Gi, pods: 110}}\nstartupDelay: 200ms\n"))
}

/// `flotilla cluster register` in push mode, with `key=value` labels.
pub fn register(f: &Flotilla, c: &SimCluster, labels: &[&str]) {
    let kubeconfig = c.kubeconfig();
    let mut args = vec!["cluster", "register", c.name.as_str(), "--kubeconfig", kubeconfig.to_str().unwrap()];
    for l in labels {
        args.extend(["--label", l]);
    }
    let o = f.flotilla(&args);
    assert!(o.ok, "register {}: {o:?}", c.name);
}

/// A control plane started with `flags` (the scheduler in it unless `--no-scheduler`),
/// workspace `demo`, and the given clusters registered; see [`fleet`].
pub fn unready_fleet(flags: &[&str], clusters: &[(&SimCluster, &[&str])]) -> Flotilla {
    let f = Flotilla::start_with(flags);
    for (c, labels) in clusters {
        register(&f, c, labels);
    }
    let o = f.flotilla(&["workspace", "create", "demo"]);
    assert!(o.ok, "workspace create: {o:?}");
    f
}

/// A control plane with the scheduler, workspace `demo`, and the given clusters,
/// every one Ready.
pub fn fleet(flags: &[&str], clusters: &[(&SimCluster, &[&str])]) -> Flotilla {
    let f = unready_fleet(flags, clusters);
    wait_all_ready(&f, clusters.len());
    f
}

/// Waits until `n` clusters are Ready (a scheduler writes the condition).
pub fn wait_all_ready(f: &Flotilla, n: usize) {
    let readiness = r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#;
    wait_until(
        "every cluster Ready",
        DEADLINE,
        || f.k(&["get", "st", "-o", readiness]),
        |out| out.split_whitespace().filter(|s| s.ends_with("=True")).count() == n,
    );
}

/// `east=2 west=1`: the WorkloadPlacement's assignment, sorted.
pub fn assignment(f: &Flotilla, name: &str) -> String {
    let o = f.kubectl(&["--context", "demo", "get", "wp", name, "-o", r#"jsonpath={range .spec.clusters[*]}{.name}={.replicas} {end}"#]);
    o.stdout.trim().to_string()
}

/// Waits until the assignment of `name` passes `want`, and returns it.
pub fn wait_assignment(f: &Flotilla, name: &str, want: impl Fn(&str) -> bool) -> String {
    wait_for(&format!("the assignment of {name}"), DEADLINE, || {
        let a = assignment(f, name);
        if want(&a) {
            Ok(a)
        } else {
            Err(format!("{a:?}\n--- server log tail ---\n{}", tail(&f.log())))
        }
    })
}

/// `kubectl rollout status` of a Deployment in `demo`, which must pass.
pub fn rollout(f: &Flotilla, name: &str) {
    let o = f.kubectl(&["--context", "demo", "rollout", "status", &format!("deploy/{name}"), "--timeout=45s"]);
    assert!(o.ok, "rollout status {name}: {o:?}\n{}", tail(&f.log()));
}

/// Replicas of the copy of `name` on a cluster (empty: no copy).
pub fn copy_replicas(c: &SimCluster, name: &str) -> String {
    let o = c.kubectl(&[
        "get",
        "deploy",
        "-A",
        "-l",
        "workload.flotilla.io/sync-target",
        "--field-selector",
        &format!("metadata.name={name}"),
        "-o",
        "jsonpath={.items[*].spec.replicas}",
    ]);
    o.stdout.trim().to_string()
}

/// `workload: message` of every Event with this reason in `demo`, one a line.
pub fn events(f: &Flotilla, reason: &str) -> String {
    f.k(&[
        "--context",
        "demo",
        "get",
        "events",
        "--field-selector",
        &format!("reason={reason}"),
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name}: {.message}{\"\\n\"}{end}",
    ])
}

/// A child process killed when the test ends, pass or fail.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The process id of the control plane (`flotilla start`), to stop and continue it.
pub fn pid(f: &Flotilla) -> u32 {
    f.child.as_ref().expect("the control plane is running").id()
}
