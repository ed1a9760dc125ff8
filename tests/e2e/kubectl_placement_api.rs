//! The Flotilla API types through kubectl: SyncTargets in `root`, the Placement and
//! WorkloadPlacement types bound into every workspace, their printer columns, short
//! names and schema validation, and `flotilla crds`.

use crate::common;

use common::Flotilla;

fn header(table: &str) -> Vec<&str> {
    table.lines().next().unwrap_or_default().split_whitespace().collect()
}

const SYNC_TARGET: &str = r#"
apiVersion: workload.flotilla.io/v1alpha1
kind: SyncTarget
metadata: {name: east, labels: {region: us}}
spec: {}
"#;

#[test]
fn sync_targets_live_in_root_with_their_printer_columns() {
    // The test writes the status a syncer and the health controller would; a running
    // scheduler would correct the Ready condition of a cluster that never beats.
    let f = Flotilla::start_with(&["--no-scheduler"]);
    assert!(f.apply(&["--context", "root"], SYNC_TARGET).contains("synctarget.workload.flotilla.io/east created"));
    // The syncer's report, as it would write it through the status subresource.
    let status = r#"{"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "HeartbeatHealthy", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "cpu": "3500m/4", "memory": "6Gi/8Gi", "workloads": 2, "lastSyncerHeartbeatTime": "2026-01-01T00:00:00Z"}}"#;
    f.k(&["--context", "root", "patch", "st", "east", "--subresource=status", "--type=merge", "-p", status]);
    let table = f.k(&["--context", "root", "get", "st"]);
    assert_eq!(header(&table), ["NAME", "READY", "CPU", "MEMORY", "WORKLOADS", "HEARTBEAT", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..5], ["east", "True", "3500m/4", "6Gi/8Gi", "2"], "{table}");
    let wide = f.k(&["--context", "root", "get", "synctargets", "-o", "wide"]);
    assert!(header(&wide).contains(&"MODE") && wide.contains("Push"), "syncMode defaults to Push: {wide}");
    // Labels are what Placements select on.
    assert!(f.k(&["--context", "root", "get", "st", "-l", "region=us", "-o", "name"]).contains("synctarget.workload.flotilla.io/east"));
    // SyncTargets are a root type: a workspace does not serve them.
    f.flotilla(&["workspace", "create", "demo"]);
    let o = f.kubectl(&["--context", "demo", "get", "st"]);
    assert!(!o.ok && o.stderr.contains("the server doesn't have a resource type"), "{}", o.stderr);
}

#[test]
fn every_workspace_serves_placements_and_starts_with_the_default_one() {
    // The test writes a WorkloadPlacement for a workload that does not exist, as the
    // scheduler would; a running scheduler would delete it as an orphan.
    let f = Flotilla::start_with(&["--no-scheduler"]);
    assert!(f.flotilla(&["workspace", "create", "demo"]).ok);
    let table = f.k(&["--context", "demo", "get", "pl"]);
    assert_eq!(header(&table), ["NAME", "MODE", "CLUSTERS", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[..3], ["default", "Divide", "1"], "{table}");
    // Bound types appear in discovery, not as CRDs of the workspace.
    let resources = f.k(&["--context", "demo", "api-resources", "--api-group=scheduling.flotilla.io", "--no-headers"]);
    assert!(resources.lines().any(|l| l.starts_with("placements ") && l.contains(" pl ")), "{resources}");
    assert!(resources.lines().any(|l| l.starts_with("workloadplacements ") && l.contains(" wp ") && l.contains("true")), "{resources}");
    assert!(!f.k(&["--context", "demo", "get", "crd", "-o", "name"]).contains("placements"));

    // Schema validation: at least one cluster, and only the two modes.
    let o = f.kubectl_stdin(
        &["--context", "demo", "apply", "-f", "-"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: bad}\nspec: {numberOfClusters: 0, replicaScheduling: Spread}\n",
    );
    assert!(
        !o.ok && o.stderr.contains("spec.numberOfClusters") && o.stderr.contains("should be greater than or equal to 1"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("spec.replicaScheduling") && o.stderr.contains("Unsupported value: \"Spread\""), "{}", o.stderr);

    // A WorkloadPlacement as the scheduler and syncers would leave it.
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: WorkloadPlacement\nmetadata: {name: web, namespace: default}\n\
         spec: {workload: {apiVersion: apps/v1, kind: Deployment, name: web}, placement: default, clusters: [{name: east, replicas: 2}, {name: west, replicas: 1}]}\n",
    );
    f.k(&[
        "--context",
        "demo",
        "patch",
        "wp",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"summary": "east=2/2 west=1/1", "ready": "3/3"}}"#,
    ]);
    let table = f.k(&["--context", "demo", "get", "wp", "-A"]);
    assert_eq!(header(&table), ["NAMESPACE", "NAME", "CLUSTERS", "READY", "AGE"], "{table}");
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(row.contains("east=2/2 west=1/1") && row.contains("3/3"), "{table}");
    // The combined form operators use.
    let all = f.k(&["--context", "demo", "get", "pl,wp"]);
    assert!(
        all.contains("placement.scheduling.flotilla.io/default") && all.contains("workloadplacement.scheduling.flotilla.io/web"),
        "{all}"
    );
}

#[test]
fn flotilla_crds_prints_installable_crds() {
    let f = Flotilla::start();
    let out = f.flotilla(&["crds"]);
    assert!(out.ok, "{out:?}");
    assert_eq!(out.stdout.matches("kind: CustomResourceDefinition").count(), 4, "{}", out.stdout);
    // They install on a Kubernetes API server: here, into a workspace of our own.
    assert!(f.flotilla(&["workspace", "create", "other"]).ok);
    let applied = f.kubectl_stdin(&["--context", "other", "apply", "--dry-run=server", "-f", "-"], &out.stdout);
    assert!(applied.ok, "{applied:?}");
    assert!(
        applied.stdout.contains("customresourcedefinition.apiextensions.k8s.io/synctargets.workload.flotilla.io created (server dry run)"),
        "{}",
        applied.stdout
    );
}
