//! `flotilla up`, as the README runs it: a control plane with the demo fleet, the
//! examples in docs/examples applied through kubectl, a clean stop, and the same fleet
//! back on a second `up` with nothing moved. It runs from a directory outside the
//! repository, with the built-in definition of the fleet, and its terminal shows the
//! progress and names the log file instead of showing the logs.

use crate::common;

use std::time::Duration;

use common::*;

const DEADLINE: Duration = Duration::from_secs(60);

/// What `<data-dir>/logs/flotilla.log` says of each component of the control plane
/// process: the API server, the scheduler, and the syncer of each cluster.
const COMPONENT_LOGS: [&str; 5] = [
    "control plane serving",
    "caches synced; scheduling",
    "starting its syncer sync_target=east",
    "starting its syncer sync_target=west",
    "starting its syncer sync_target=eu",
];

fn placement(k: &dyn Fn(&[&str]) -> String, name: &str) -> String {
    k(&["get", "wp", name, "-o", "jsonpath={.spec.clusters[*].name}"])
}

/// What `up`'s terminal showed that a person should not see: log lines below WARN, and
/// any word of a lost cluster (nothing was lost).
fn noise(terminal: &str) -> Vec<&str> {
    terminal.lines().filter(|l| [" INFO ", " DEBUG ", " TRACE "].iter().any(|lvl| l.contains(lvl)) || l.contains("lost")).collect()
}

#[test]
fn up_runs_the_demo_fleet_the_examples_place_and_a_second_up_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    // Where the person runs `up`: no test-clusters/ or docs/ there.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();
    let terminal = dir.path().join("terminal-1.txt");
    let log = data.join("logs").join("flotilla.log");
    let kubeconfig = data.join("admin.kubeconfig");
    let kubectl = |args: &[&str]| kubectl_cmd(&kubeconfig, dir.path(), args).output().map(Out::from).unwrap();
    let k = |args: &[&str]| {
        let o = kubectl(args);
        assert!(
            o.ok,
            "kubectl {} failed: {}{}\nup's log:\n{}",
            args.join(" "),
            o.stdout,
            o.stderr,
            tail(&std::fs::read_to_string(&log).unwrap_or_default())
        );
        o.stdout
    };

    let (mut up, _) = spawn_ready_in(&elsewhere, &["--data-dir", data_s, "up", "--listen", "127.0.0.1:0"], &terminal);
    let shown = std::fs::read_to_string(&terminal).unwrap();
    for want in [
        format!("(log: {})", log.display()),
        "cluster east registered".into(),
        "cluster west registered".into(),
        "cluster eu registered".into(),
        "workspace demo created".into(),
    ] {
        assert!(shown.lines().any(|l| l.contains(&want)), "the terminal does not show {want:?}:\n{shown}");
    }
    assert!(shown.lines().any(|l| l == "ready"), "{shown}");
    assert_eq!(noise(&shown), Vec::<&str>::new(), "up's terminal:\n{shown}");
    // The components log to the file instead: the control plane, the scheduler, and
    // a syncer per cluster, none of which calls a new cluster lost.
    let logged = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    for want in COMPONENT_LOGS {
        assert!(logged.contains(want), "{} has no {want:?}:\n{}", log.display(), tail(&logged));
    }
    assert!(!logged.contains("lost"), "{} calls a cluster lost:\n{logged}", log.display());
    // Everything up writes in the data dir is its owner's alone: the logs quote objects,
    // and the clusters' state holds their Secrets.
    let mut open = Vec::new();
    let mut pending = vec![data.clone()];
    while let Some(p) = pending.pop() {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.permissions().mode() & 0o077 != 0 {
            open.push(format!("{:o} {}", meta.permissions().mode() & 0o777, p.display()));
        }
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    assert!(open.is_empty(), "open to group or others in the data dir:\n{}", open.join("\n"));

    // The current context is the demo workspace, and the three clusters are Ready.
    assert_eq!(k(&["config", "current-context"]).trim(), "demo");
    let ready = k(&[
        "--context",
        "root",
        "get",
        "st",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#,
    ]);
    assert_eq!(ready.split_whitespace().collect::<Vec<_>>(), ["east=True", "eu=True", "west=True"], "{ready}");

    k(&["apply", "-f", "docs/examples/"]);
    k(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    k(&["rollout", "status", "deploy/api", "--timeout=60s"]);
    // Divide over two clusters; pinned to the eu region.
    let web = placement(&k, "web");
    assert_eq!(web.split_whitespace().count(), 2, "web divides over two clusters: {web}");
    assert_eq!(placement(&k, "api"), "eu");
    // Too big for any node: reported, not placed.
    wait_until(
        "huge reported as not fitting",
        DEADLINE,
        || k(&["describe", "deploy", "huge"]),
        |d| d.contains("FailedScheduling") && d.contains("0/3 clusters fit"),
    );
    assert_eq!(placement(&k, "huge"), "");

    // A clean stop takes the clusters down with it.
    // Each cluster's address, as up keeps it in the data dir.
    let kept_ports = || -> Vec<String> {
        ["east", "west", "eu"]
            .iter()
            .map(|c| std::fs::read_to_string(data.join("clusters").join(c).join("listen")).unwrap().trim().to_string())
            .collect()
    };
    let ports = kept_ports();
    // Ctrl-C, as a person stops it.
    signal(up.id(), "INT");
    let status = wait_for("up to exit after SIGINT", DEADLINE, || up.try_wait().unwrap().ok_or_else(|| "still running".to_string()));
    let shown = std::fs::read_to_string(&terminal).unwrap();
    assert!(status.success(), "{status:?}\nterminal:\n{shown}\nlog:\n{}", tail(&std::fs::read_to_string(&log).unwrap_or_default()));
    assert!(shown.contains("stopped 3 simulated cluster(s)"), "{shown}");
    assert_eq!(noise(&shown), Vec::<&str>::new(), "up's terminal:\n{shown}");
    for p in &ports {
        assert!(std::net::TcpStream::connect(p).is_err(), "a simulated cluster still serves on {p} after up stopped");
    }

    // The same fleet again: same clusters on the same ports, workloads where they were.
    let terminal = dir.path().join("terminal-2.txt");
    let (mut again, _) = spawn_ready_in(&elsewhere, &["--data-dir", data_s, "up", "--listen", "127.0.0.1:0"], &terminal);
    k(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    assert_eq!(placement(&k, "web"), web, "nothing moved");
    assert_eq!(placement(&k, "api"), "eu");
    let again_ports = kept_ports();
    assert_eq!(again_ports, ports);
    signal(again.id(), "TERM");
    let status = wait_for("the second up to exit", DEADLINE, || again.try_wait().unwrap().ok_or_else(|| "still running".to_string()));
    let shown = std::fs::read_to_string(&terminal).unwrap();
    assert!(status.success(), "{status:?}\nterminal:\n{shown}");
    assert_eq!(noise(&shown), Vec::<&str>::new(), "the second up's terminal:\n{shown}");
}
