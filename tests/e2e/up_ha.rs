//! `flotilla up --ha`: the demo fleet on three replicas and a local etcd of three
//! members, the examples applied through kubectl, the replica and etcd drills, and a
//! clean stop. Needs the `etcd` binary (see storage::local_etcd::available_for_test).

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use controlplane::store::local_etcd;

/// A port whose next three are free too: the load balancer's, then the replicas'.
fn four_free_ports() -> u16 {
    loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port < 65530 && (1..=3).all(|i| std::net::TcpListener::bind(("127.0.0.1", port + i)).is_ok()) {
            return port;
        }
    }
}

#[test]
fn up_ha_runs_three_replicas_on_etcd_and_its_drills_take_them_away() {
    if !local_etcd::available_for_test() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();
    let kubeconfig = data.join("admin.kubeconfig");
    let listen = format!("127.0.0.1:{}", four_free_ports());
    let terminal = dir.path().join("terminal.txt");
    let (mut up, _) = spawn_ready_in(dir.path(), &["--data-dir", data_s, "up", "--ha", "--listen", &listen], &terminal);
    let logs = || {
        (0..3)
            .map(|n| tail(&std::fs::read_to_string(data.join(format!("logs/replica-{n}.log"))).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let k = |args: &[&str]| {
        let o = kubectl_cmd(&kubeconfig, dir.path(), args).output().map(Out::from).unwrap();
        assert!(o.ok, "kubectl {} failed: {}{}\n{}", args.join(" "), o.stdout, o.stderr, logs());
        o.stdout
    };
    let drill = |args: &[&str]| {
        let mut all = vec!["--data-dir", data_s, "drill"];
        all.extend_from_slice(args);
        let o = std::process::Command::new(bin()).args(&all).current_dir(dir.path()).output().map(Out::from).unwrap();
        assert!(o.ok, "flotilla drill {} failed: {}{}\n{}", args.join(" "), o.stdout, o.stderr, logs());
        o.stdout
    };
    let said = std::fs::read_to_string(&terminal).unwrap();
    assert!(said.contains(&format!("control plane: 3 replicas behind https://{listen}")), "{said}");

    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/");
    k(&["apply", "-f", examples]);
    k(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    let held = k(&["--context", "root", "get", "leases", "-n", "flotilla-system", "-o", "jsonpath={.items[*].spec.holderIdentity}"]);
    assert!(held.split_whitespace().all(|h| h.starts_with("replica-")), "every Lease is held by a replica: {held}");

    // Replica 0, started first, holds the controllers: kill it.
    let killed = drill(&["kill-replica", "0"]);
    assert!(killed.contains("flotilla-scheduler: replica-0 -> replica-"), "{killed}");
    assert!(killed.contains("work was taken over in") && !killed.contains("NotReady"), "{killed}");
    let restored = drill(&["restore-replica", "0"]);
    assert!(restored.contains("replica 0 serves again"), "{restored}");

    // One etcd member of three: writes go on, at worst one of them retried.
    let lost = drill(&["kill-etcd", "1"]);
    let summary = lost.lines().find(|l| l.starts_with("with etcd member 1 gone:")).expect(&lost);
    let failed: u32 = summary.split(" failed").next().and_then(|s| s.rsplit(' ').next()).and_then(|n| n.parse().ok()).expect(summary);
    assert!(lost.contains("writes went through") && failed <= 1, "{lost}");
    drill(&["restore-etcd", "1"]);

    // Still one control plane: the workload is placed and every cluster Ready.
    let status = k(&["--context", "root", "get", "st", "-o", "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}"]);
    assert_eq!(status.trim(), "True True True");
    k(&["scale", "deploy/web", "--replicas=3"]);
    k(&["rollout", "status", "deploy/web", "--timeout=60s"]);

    // A clean stop takes etcd and the replicas with it.
    signal(up.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    while up.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "up --ha did not stop within 30s of SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pids: Vec<String> = ["etcd/m0.pid", "etcd/m1.pid", "etcd/m2.pid", "replicas/0/pid", "replicas/1/pid", "replicas/2/pid"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(data.join(f)).ok())
        .map(|p| p.trim().to_string())
        .collect();
    wait_until(
        "etcd and the replicas to exit",
        Duration::from_secs(15),
        || pids.iter().filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists()).cloned().collect::<Vec<_>>().join(" "),
        |running| running.is_empty(),
    );
}
