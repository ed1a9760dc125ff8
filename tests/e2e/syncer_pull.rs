//! The pull-mode syncer, end to end: `flotilla syncer` as its own process with the
//! scoped token that `flotilla cluster register --pull` mints, against a control plane
//! and a simulated cluster, checked with the real kubectl, including what the token
//! may not do.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{assigned, copies, deployment, register_pull, wait_for, wait_until, Flotilla, Out, PullSyncer, SimCluster};

const EAST: &str = "name: east\nnodes:\n  - {count: 2, cpu: \"4\", memory: 8Gi, pods: 110}\nstartupDelay: 200ms\n";
const DEADLINE: Duration = Duration::from_secs(30);

/// A control plane with workspace `demo`, the simulated cluster `east` registered in
/// pull mode, and the syncer's upstream kubeconfig.
fn pull_fleet() -> (Flotilla, SimCluster, PathBuf) {
    // These tests play the scheduler's part: they write the assignment themselves.
    let f = Flotilla::start_with(&["--no-scheduler"]);
    let east = SimCluster::start(EAST);
    let upstream = register_pull(&f, &east);
    let o = f.flotilla(&["workspace", "create", "demo"]);
    assert!(o.ok, "workspace create: {o:?}");
    (f, east, upstream)
}

/// kubectl with the syncer's token, against `workspace`.
fn as_syncer(f: &Flotilla, upstream: &std::path::Path, workspace: &str, args: &[&str]) -> Out {
    let server = format!("{}/clusters/{workspace}", f.url.split("/clusters/").next().unwrap());
    let mut all = vec!["--server", server.as_str()];
    all.extend_from_slice(args);
    Out::from(common::kubectl_cmd(upstream, f.data_dir(), &all).output().expect("kubectl"))
}

fn forbidden(o: &Out) -> bool {
    !o.ok && o.stderr.contains("is forbidden: User \"flotilla:syncer:east\"")
}

#[test]
fn pull_mode_syncs_with_a_token_that_reaches_only_its_own_objects() {
    let (f, east, upstream) = pull_fleet();
    let _syncer = PullSyncer::start("east", &upstream, &east.kubeconfig(), f.data_dir().join("syncer.log"));
    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("web").replicas(2).cpu("100m"), 2));
    f.apply(&["--context", "demo", "-n", "default"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private}\ndata: {k: v}\n");
    f.apply(
        &["--context", "demo", "-n", "default"],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: other}\nspec:\n  selector: {matchLabels: {app: o}}\n  template:\n    metadata: {labels: {app: o}}\n    spec: {containers: [{name: c, image: x}]}\n",
    );

    // The whole loop works with the scoped token: down, up, and the heartbeat.
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/web", "--timeout=30s"]);
    assert!(o.ok && o.stdout.contains("successfully rolled out"), "{o:?}\nsyncer log:\n{}", _syncer.log());
    assert!(copies(&east).ends_with("web=2 nginx:1.27"), "{}", copies(&east));
    wait_until(
        "a heartbeat with capacity",
        DEADLINE,
        || f.k(&["--context", "root", "get", "st", "east", "-o", "jsonpath={.status.workloads} {.status.cpu}"]),
        |st| st.starts_with("1 ") && st.len() > 2,
    );

    // What the token may do.
    let own = as_syncer(&f, &upstream, "root", &["get", "synctarget", "east", "-o", "name"]);
    assert!(own.ok, "its own SyncTarget: {own:?}");
    let o = as_syncer(
        &f,
        &upstream,
        "root",
        &["get", "--raw", "/clusters/*/apis/apps/v1/deployments?labelSelector=state.workload.flotilla.io%2Feast%3DSync"],
    );
    assert!(o.ok && o.stdout.contains("\"web\"") && !o.stdout.contains("\"other\""), "its assignments: {o:?}");

    // And what it may not: each refusal is a 403 that names the syncer.
    let refused: &[(&str, &[&str])] = &[
        ("root", &["get", "secrets", "-n", "flotilla-system"]),
        ("root", &["get", "synctargets"]),
        ("root", &["label", "synctarget", "east", "stolen=yes"]),
        // kubectl's --raw takes the whole path, past the server's /clusters/root.
        ("root", &["get", "--raw", "/clusters/*/apis/apps/v1/deployments"]),
        ("root", &["get", "--raw", "/clusters/*/api/v1/secrets?labelSelector=state.workload.flotilla.io%2Fwest%3DSync"]),
        ("demo", &["get", "deployments", "-n", "default"]),
        ("demo", &["get", "deployment", "other", "-n", "default"]),
        ("demo", &["get", "configmap", "private", "-n", "default"]),
        ("demo", &["scale", "deployment", "web", "-n", "default", "--replicas=9"]),
        ("demo", &["label", "deployment", "web", "-n", "default", "stolen=yes"]),
        ("demo", &["delete", "deployment", "web", "-n", "default"]),
        ("demo", &["create", "configmap", "planted", "-n", "default"]),
        (
            "demo",
            &[
                "patch",
                "workloadplacement",
                "web",
                "-n",
                "default",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"summary":"lies"}}"#,
            ],
        ),
    ];
    for (ws, args) in refused {
        let o = as_syncer(&f, &upstream, ws, args);
        assert!(forbidden(&o), "{ws}: kubectl {} should be refused with 403: {o:?}", args.join(" "));
    }
    // Nothing it was refused happened.
    assert_eq!(
        f.k(&["--context", "demo", "get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.metadata.labels.stolen}"]).trim(),
        "2"
    );
    assert!(f.k(&["--context", "demo", "get", "wp", "web", "-o", "jsonpath={.status.summary}"]).contains("east=2/2"));
}

#[test]
fn a_syncer_killed_mid_sync_converges_with_no_duplicates_and_no_orphans() {
    let (f, east, upstream) = pull_fleet();
    let mut syncer = PullSyncer::start("east", &upstream, &east.kubeconfig(), f.data_dir().join("syncer.log"));
    let all: String = (0..12).map(|i| assigned(deployment(&format!("app{i}")).cpu("100m"), 1)).collect::<Vec<_>>().join("---\n");
    f.apply(&["--context", "demo", "-n", "default"], &all);
    // Kill it while it is still pushing.
    wait_for("the first copies", DEADLINE, || {
        let n = copies(&east).lines().count();
        if n > 0 {
            Ok(n)
        } else {
            Err("none yet".into())
        }
    });
    syncer.kill9();

    // While it is down: three deleted upstream, two unassigned. Deletions wait on its finalizer.
    for i in 0..3 {
        f.k(&["--context", "demo", "delete", "deploy", &format!("app{i}"), "--wait=false"]);
    }
    for i in 3..5 {
        f.k(&["--context", "demo", "label", "deploy", &format!("app{i}"), "state.workload.flotilla.io/east-"]);
        f.k(&["--context", "demo", "label", "wp", &format!("app{i}"), "state.workload.flotilla.io/east-"]);
    }

    syncer.launch();
    let want: Vec<String> = (5..12).map(|i| format!("app{i}=1 nginx:1.27")).collect();
    let got = wait_for("exactly the assigned copies, once each", DEADLINE, || {
        let c = copies(&east);
        let mut names: Vec<String> = c.lines().filter_map(|l| l.split_once('/')).map(|(_, r)| r.to_string()).collect();
        names.sort();
        let mut w = want.clone();
        w.sort();
        if names == w {
            Ok(c)
        } else {
            Err(format!("{names:?}"))
        }
    });
    // One namespace for one upstream namespace.
    let namespaces: std::collections::BTreeSet<&str> = got.lines().filter_map(|l| l.split_once('/')).map(|(ns, _)| ns).collect();
    assert_eq!(namespaces.len(), 1, "{got}");
    // Every deletion completed, and no finalizer is left on the unassigned ones.
    wait_until(
        "the deletions completed",
        DEADLINE,
        || f.k(&["--context", "demo", "get", "deploy", "-o", "name"]),
        |left| ["app0", "app1", "app2"].iter().all(|n| !left.contains(&format!("/{n}\n"))),
    );
    for i in 3..5 {
        let fin = f.k(&["--context", "demo", "get", "deploy", &format!("app{i}"), "-o", "jsonpath={.metadata.finalizers}"]);
        assert_eq!(fin.trim(), "", "app{i} keeps no finalizer of the syncer");
    }
    let o = f.kubectl(&["--context", "demo", "wait", "--for=condition=Available", "deploy/app11", "--timeout=30s"]);
    assert!(o.ok, "{o:?}\nsyncer log:\n{}", syncer.log());
}

#[test]
fn the_syncer_rides_out_a_control_plane_restart() {
    let (mut f, east, upstream) = pull_fleet();
    let syncer = PullSyncer::start("east", &upstream, &east.kubeconfig(), f.data_dir().join("syncer.log"));
    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("web").replicas(2).cpu("100m"), 2));
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/web", "--timeout=30s"]);
    assert!(o.ok, "{o:?}");

    f.kill9();
    // The syncer notices the control plane is gone...
    wait_for("the syncer to notice the outage", DEADLINE, || {
        let log = syncer.log();
        if log.contains("heartbeat failed") || log.contains("heartbeat timed out") {
            Ok(())
        } else {
            Err("no failed heartbeat in the syncer's log yet".into())
        }
    });
    // ...and leaves the workload running as it was.
    let ready =
        east.k(&["get", "deploy", "-A", "-l", "workload.flotilla.io/sync-target=east", "-o", "jsonpath={.items[*].status.readyReplicas}"]);
    assert_eq!(ready.trim(), "2", "the copy keeps running while the control plane is down");

    f.launch();
    // A change made after the restart reaches the cluster: the syncer reconnected.
    f.k(&["--context", "demo", "scale", "deploy/web", "--replicas=3"]);
    f.k(&["--context", "demo", "patch", "wp", "web", "--type=merge", "-p", r#"{"spec":{"clusters":[{"name":"east","replicas":3}]}}"#]);
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/web", "--timeout=30s"]);
    assert!(o.ok && o.stdout.contains("successfully rolled out"), "{o:?}\nsyncer log:\n{}", syncer.log());
    assert!(copies(&east).ends_with("web=3 nginx:1.27"), "{}", copies(&east));
}
