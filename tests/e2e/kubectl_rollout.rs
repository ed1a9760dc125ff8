//! `kubectl rollout history` and `kubectl rollout undo` in a workspace, through the real
//! kubectl against the real `flotilla`: each template revision of a Deployment is kept
//! as a ReplicaSet, and an undo brings an old template back in the workspace and on
//! the clusters the Deployment runs on.

use crate::common;

use std::time::Duration;

use common::fleet::{fleet, sim, DEADLINE};
use common::{wait_until, Flotilla};

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
  annotations: {kubernetes.io/change-cause: "first release"}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: nginx, image: "nginx:1.27", resources: {requests: {cpu: 100m, memory: 64Mi}}}
"#;

/// `kubectl rollout history`'s rows, as `revision:cause` pairs.
fn history(f: &Flotilla, context: &[&str]) -> String {
    history_of(f, context, "deployment/web")
}

fn history_of(f: &Flotilla, context: &[&str], object: &str) -> String {
    let mut args = context.to_vec();
    args.extend(["rollout", "history", object]);
    let o = f.kubectl(&args);
    if !o.ok {
        return format!("failed: {}", o.stderr.trim());
    }
    o.stdout
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (rev, cause) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
            format!("{rev}:{}", cause.trim())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn image(f: &Flotilla, context: &[&str]) -> String {
    let mut args = context.to_vec();
    args.extend(["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]);
    f.k(&args)
}

#[test]
fn rollout_history_and_undo_work_in_a_workspace() {
    let f = Flotilla::start();
    f.apply(&[], WEB);
    let wait_history = |want: &str| wait_until("the rollout history", Duration::from_secs(20), || history(&f, &[]), |h| h == want);
    wait_history("1:first release");

    // A new image, with its own cause: a second revision.
    f.k(&["set", "image", "deployment/web", "nginx=nginx:1.28"]);
    f.k(&["annotate", "deployment/web", "kubernetes.io/change-cause=bump to 1.28", "--overwrite"]);
    wait_history("1:first release 2:bump to 1.28");
    let detail = f.k(&["rollout", "history", "deployment/web", "--revision=1"]);
    assert!(detail.contains("nginx:1.27") && !detail.contains("nginx:1.28"), "{detail}");
    // One ReplicaSet a revision, controlled by the Deployment; only the current one
    // is meant to run.
    let sets = f.k(&[
        "get",
        "rs",
        "-l",
        "app=web",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.annotations.deployment\.kubernetes\.io/revision}={.spec.replicas}/{.metadata.ownerReferences[0].kind} {end}"#,
    ]);
    let mut sets: Vec<&str> = sets.split_whitespace().collect();
    sets.sort();
    assert_eq!(sets, ["1=0/Deployment", "2=2/Deployment"]);
    assert_eq!(f.k(&["get", "deploy", "web", "-o", r#"jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}"#]), "2");

    // Undo: the first template is back, as revision 3.
    let undo = f.k(&["rollout", "undo", "deployment/web"]);
    assert!(undo.contains("rolled back"), "{undo}");
    assert_eq!(image(&f, &[]), "nginx:1.27");
    wait_history("2:bump to 1.28 3:first release");
    let again = f.k(&["rollout", "undo", "deployment/web", "--to-revision=2"]);
    assert!(again.contains("rolled back"), "{again}");
    assert_eq!(image(&f, &[]), "nginx:1.28");
    wait_history("3:first release 4:bump to 1.28");

    // The ReplicaSets go with their Deployment.
    f.k(&["delete", "deployment", "web"]);
    wait_until("the ReplicaSets deleted", Duration::from_secs(20), || f.k(&["get", "rs", "-o", "name"]), |o| o.trim().is_empty());
}

#[test]
fn an_undo_reaches_the_clusters_and_no_replicaset_is_synced() {
    let east = sim("east", 4);
    let f = fleet(&[], &[(&east, &[])]);
    let demo = ["--context", "demo"];
    let mut apply = demo.to_vec();
    apply.extend(["apply", "-f", "-"]);
    let o = f.kubectl_stdin(&apply, WEB);
    assert!(o.ok, "{o:?}");
    let copy_image = || {
        east.kubectl(&[
            "get",
            "deploy",
            "-A",
            "-l",
            "workload.flotilla.io/sync-target",
            "-o",
            "jsonpath={.items[*].spec.template.spec.containers[0].image}",
        ])
        .stdout
    };
    wait_until("the copy on east", DEADLINE, copy_image, |i| i == "nginx:1.27");
    f.k(&["--context", "demo", "set", "image", "deployment/web", "nginx=nginx:1.28"]);
    wait_until("the new image on east", DEADLINE, copy_image, |i| i == "nginx:1.28");
    wait_until("two revisions", DEADLINE, || history(&f, &demo), |h| h.matches(':').count() == 2);
    assert!(f.k(&["--context", "demo", "rollout", "undo", "deployment/web"]).contains("rolled back"));
    wait_until("the old image back on east", DEADLINE, copy_image, |i| i == "nginx:1.27");
    // The cluster's ReplicaSets are its own deployment controller's: none came from the
    // workspace.
    let synced = east.kubectl(&["get", "rs", "-A", "-l", "workload.flotilla.io/sync-target", "-o", "name"]).stdout;
    assert!(synced.trim().is_empty(), "a workspace ReplicaSet was synced: {synced}");
}

/// StatefulSets and DaemonSets keep their history as ControllerRevisions: `kubectl
/// rollout history` lists them with their change-cause, and `rollout undo` puts the
/// previous template back as the next revision.
#[test]
fn statefulsets_and_daemonsets_keep_their_history_as_controller_revisions() {
    let f = Flotilla::start();
    for (kind, object) in [("StatefulSet", "sts/store"), ("DaemonSet", "ds/store")] {
        let extra = if kind == "StatefulSet" { "  serviceName: store\n" } else { "" };
        let manifest = format!(
            "apiVersion: apps/v1\nkind: {kind}\nmetadata: {{name: store, annotations: {{kubernetes.io/change-cause: first}}}}\nspec:\n{extra}  \
             selector: {{matchLabels: {{app: store}}}}\n  template:\n    metadata: {{labels: {{app: store}}}}\n    spec:\n      \
             containers: [{{name: store, image: 'registry.example.com/store:1'}}]\n"
        );
        f.apply(&[], &manifest);
        let wait_history = |want: &str| {
            wait_until(&format!("the history of {object}"), Duration::from_secs(20), || history_of(&f, &[], object), |h| h == want)
        };
        wait_history("1:first");
        f.k(&["annotate", object, "kubernetes.io/change-cause=second", "--overwrite"]);
        f.k(&["set", "image", object, "store=registry.example.com/store:2"]);
        wait_history("1:first 2:second");
        let detail = f.k(&["rollout", "history", object, "--revision=1"]);
        assert!(detail.contains("store:1") && !detail.contains("store:2"), "{detail}");
        assert!(f.k(&["rollout", "undo", object]).contains("rolled back"));
        let image = f.k(&["get", object, "-o", "jsonpath={.spec.template.spec.containers[0].image}"]);
        assert_eq!(image, "registry.example.com/store:1", "{object}");
        wait_history("2:second 3:first");
        let owners = f.k(&["get", "controllerrevisions", "-l", "app=store", "-o", "jsonpath={.items[*].metadata.ownerReferences[0].kind}"]);
        assert!(owners.split_whitespace().filter(|k| *k == kind).count() == 2, "{kind}: {owners}");
        f.k(&["delete", object]);
    }
}
