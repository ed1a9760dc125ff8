//! Several `flotilla start` replicas on one etcd serve one control plane, through the
//! real binary and the real kubectl. etcd comes from the `etcd` binary on PATH
//! (Debian's etcd-server); without it these tests say so and pass, unless
//! FLOTILLA_REQUIRE_ETCD is set, as CI sets it.

mod common;

use std::time::Duration;

use common::{wait_until, Flotilla};
use controlplane::store::local_etcd::LocalEtcd;

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

    // etcd down: writes fail with a 503 that names etcd, readyz says so, and reads
    // are served from the replica's copy.
    etcd.kill(0);
    let refused = a.kubectl(&["create", "configmap", "during", "--from-literal=v=1"]);
    assert!(!refused.ok && refused.stderr.contains("etcd") && refused.stderr.contains("unavailable"), "{refused:?}");
    let ready = wait_until("A's readyz to report etcd", Duration::from_secs(15), || a.raw("/readyz").stderr, |e| !e.is_empty());
    assert!(ready.contains("ServiceUnavailable") || ready.contains("503"), "{ready}");
    assert_eq!(a.k(&["get", "configmap", "shared", "-o", "jsonpath={.data.v}"]), "2", "reads go on from the replica's copy");

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
    let leases = |f: &Flotilla| {
        f.k(&[
            "get",
            "leases",
            "-n",
            "flotilla-system",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.spec.holderIdentity}{'\\n'}{end}",
        ])
    };
    let identity = |f: &Flotilla| read(f, "scheduler-identity").trim().to_string();
    let controllers = [
        "flotilla-companion-status",
        "flotilla-companions",
        "flotilla-controlplane-controllers",
        "flotilla-revisions",
        "flotilla-scheduler",
        "flotilla-status-aggregator",
    ];
    let held = wait_until(
        "every controller's Lease to be held",
        Duration::from_secs(10),
        || leases(&b),
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
    wait_until("B to hold every Lease after A's kill -9", Duration::from_secs(20), || leases(&b), |l| l == b_holds_all);
    b.k(&["create", "configmap", "while-a-was-down", "--from-literal=v=1"]);
    assert_eq!(b.k(&["get", "configmap", "after", "-o", "name"]).trim(), "configmap/after", "B serves what A wrote before it died");
    a.launch();
    assert_eq!(a.k(&["get", "configmap", "while-a-was-down", "-o", "jsonpath={.data.v}"]), "1", "A rejoined with B's write");
}
