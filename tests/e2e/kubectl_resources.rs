//! kubectl against a real `flotilla start`: apply, server-side apply, scale, label,
//! annotate, patch, get in its output forms, watch, describe with events, delete.

use crate::common;

use std::time::Duration;

use common::{wait_for, wait_until, Flotilla};

const DEPLOY_V1: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        env: [{name: A, value: "1"}]
      - name: sidecar
        image: busybox:1.36
"#;

#[test]
fn version_and_api_resources_list_what_is_served() {
    let f = Flotilla::start();
    let v = f.k(&["version"]);
    assert!(v.contains("Server Version: v1.32"), "{v}");
    let r = f.k(&["api-resources", "--no-headers"]);
    for (name, api) in [
        ("deployments", "apps/v1"),
        ("configmaps", "v1"),
        ("namespaces", "v1"),
        ("leases", "coordination.k8s.io/v1"),
        ("customresourcedefinitions", "apiextensions.k8s.io/v1"),
        ("workspaces", "tenancy.flotilla.io/v1alpha1"),
    ] {
        assert!(r.lines().any(|l| l.split_whitespace().next() == Some(name) && l.contains(api)), "{name} {api} missing from:\n{r}");
    }
}

#[test]
fn apply_creates_then_reports_unchanged_then_merges_a_changed_manifest() {
    let f = Flotilla::start();
    assert!(f.apply(&[], DEPLOY_V1).contains("deployment.apps/web created"));
    assert!(f.apply(&[], DEPLOY_V1).contains("deployment.apps/web unchanged"));
    // The new manifest drops the sidecar and adds an env var: kubectl sends a strategic
    // merge patch with $setElementOrder and a $patch: delete directive.
    let v2 = DEPLOY_V1.replace(
        "        env: [{name: A, value: \"1\"}]\n      - name: sidecar\n        image: busybox:1.36\n",
        "        env: [{name: A, value: \"1\"}, {name: B, value: \"2\"}]\n",
    );
    assert_ne!(v2, DEPLOY_V1);
    assert!(f.apply(&[], &v2).contains("deployment.apps/web configured"));
    let got = f.k(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[*].name}|{.spec.template.spec.containers[0].env[*].name}|{.metadata.generation}",
    ]);
    assert_eq!(got, "nginx|A B|2");
    // No directive may leak into storage.
    let yaml = f.k(&["get", "deploy", "web", "-o", "yaml"]);
    assert!(!yaml.contains("$setElementOrder") && !yaml.contains("$patch"), "{yaml}");
}

#[test]
fn server_side_apply_conflicts_with_another_manager_until_forced() {
    let f = Flotilla::start();
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {x: \"1\"}\n";
    assert!(f.apply(&["--server-side"], cm).contains("serverside-applied"));
    let cm2 = cm.replace("\"1\"", "\"2\"");
    let o = f.kubectl_stdin(&["apply", "--server-side", "--field-manager=other", "-f", "-"], &cm2);
    assert!(!o.ok, "a second manager changing data.x must conflict");
    assert!(o.stderr.contains("Apply failed with 1 conflict: conflict with \"kubectl\"") && o.stderr.contains(".data.x"), "{}", o.stderr);
    assert_eq!(f.k(&["get", "cm", "cfg", "-o", "jsonpath={.data.x}"]), "1", "a rejected apply must change nothing");
    f.apply(&["--server-side", "--field-manager=other", "--force-conflicts"], &cm2);
    assert_eq!(f.k(&["get", "cm", "cfg", "-o", "jsonpath={.data.x}"]), "2");
    let managers = f.k(&["get", "cm", "cfg", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"]);
    assert!(managers.contains("other"), "{managers}");
}

#[test]
fn scale_label_annotate_and_the_three_patch_types() {
    let f = Flotilla::start();
    f.apply(&[], DEPLOY_V1);
    assert!(f.k(&["scale", "deploy", "web", "--replicas=5"]).contains("scaled"));
    assert_eq!(f.k(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]), "5");
    f.k(&["label", "deploy", "web", "team=blue"]);
    f.k(&["annotate", "deploy", "web", "note=hello"]);
    f.k(&["patch", "deploy", "web", "--type=json", "-p", r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#]);
    f.k(&["patch", "deploy", "web", "--type=merge", "-p", r#"{"metadata":{"labels":{"merged":"yes"}}}"#]);
    // Strategic: the containers list merges by name, so the sidecar survives.
    f.k(&["patch", "deploy", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28"}]}}}}"#]);
    let got = f.k(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}|{.metadata.labels.team}|{.metadata.labels.merged}|{.metadata.annotations.note}|{.spec.template.spec.containers[*].image}"]);
    assert_eq!(got, "3|blue|yes|hello|nginx:1.28 busybox:1.36");
    // Label removal and a failing JSON-patch test leave a clear error.
    f.k(&["label", "deploy", "web", "team-"]);
    assert_eq!(f.k(&["get", "deploy", "web", "-o", "jsonpath={.metadata.labels.team}"]), "");
    let o = f.kubectl(&["patch", "deploy", "web", "--type=json", "-p", r#"[{"op":"test","path":"/spec/replicas","value":99}]"#]);
    assert!(!o.ok && o.stderr.contains("Deployment \"web\" is invalid: patch") && o.stderr.contains("value did not match"), "{}", o.stderr);
}

#[test]
fn get_output_forms_and_selectors() {
    let f = Flotilla::start();
    f.apply(&[], DEPLOY_V1);
    for (name, labels) in [("a", "k: a"), ("b", "k: b"), ("c", "k: c"), ("ax", "{k: a, x: \"y\"}")] {
        let labels = if labels.starts_with('{') { labels.to_string() } else { format!("{{{labels}}}") };
        f.apply(&[], &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, labels: {labels}}}\ndata: {{v: \"{name}\"}}\n"));
    }
    let wide = f.k(&["get", "deploy", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]);
    assert!(wide.contains("nginx,sidecar") && wide.contains("app=web") && wide.contains("0/2"), "{wide}");
    let plain = f.k(&["get", "deploy"]);
    assert_eq!(plain.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert!(f.k(&["get", "deploy", "web", "-o", "yaml"]).contains("image: nginx:1.27"));
    let sel = f.k(&["get", "cm", "-l", "k in (a,b),!x", "-o", "name"]);
    assert_eq!(sel.lines().collect::<Vec<_>>(), ["configmap/a", "configmap/b"]);
    let all = f.k(&["get", "cm", "-A", "--show-labels"]);
    assert!(all.lines().next().unwrap().starts_with("NAMESPACE"), "{all}");
    assert!(all.lines().any(|l| l.starts_with("default") && l.contains("ax") && l.contains("k=a,x=y")), "{all}");
    let paged = f.k(&["get", "cm", "--chunk-size=1", "-o", "name"]);
    assert_eq!(
        paged.lines().collect::<Vec<_>>(),
        ["configmap/a", "configmap/ax", "configmap/b", "configmap/c"],
        "pages of one must add up to the whole list"
    );
}

#[test]
fn get_watch_sees_a_change() {
    let f = Flotilla::start();
    f.apply(&[], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: watched}\ndata: {v: \"1\"}\n");
    let out = f.dir.path().join("watch.out");
    let mut child = f.kubectl_background(&["get", "cm", "watched", "-w", "-o", "jsonpath={.data.v}{\"\\n\"}"], &out);
    wait_for("the watch to print the initial state", Duration::from_secs(10), || {
        let s = std::fs::read_to_string(&out).unwrap_or_default();
        if s.lines().any(|l| l == "1") {
            Ok(())
        } else {
            Err(s)
        }
    });
    f.k(&["patch", "cm", "watched", "--type=merge", "-p", r#"{"data":{"v":"2"}}"#]);
    wait_for("the watch to print the change", Duration::from_secs(10), || {
        let s = std::fs::read_to_string(&out).unwrap_or_default();
        if s.lines().any(|l| l == "2") {
            Ok(())
        } else {
            Err(s)
        }
    });
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn an_object_that_leaves_a_watched_selector_is_deleted_in_its_last_matching_state() {
    let f = Flotilla::start();
    f.apply(&[], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tiered, labels: {tier: web}}\ndata: {v: \"1\"}\n");
    let out = f.dir.path().join("watch.out");
    let template = r#"jsonpath={.type} {.object.metadata.labels.tier} {.object.data.v} {.object.metadata.resourceVersion}{"\n"}"#;
    let mut child = f.kubectl_background(&["get", "cm", "-l", "tier=web", "-w", "--output-watch-events", "-o", template], &out);
    let seen = || std::fs::read_to_string(&out).unwrap_or_default();
    wait_until("the watch to print the initial state", Duration::from_secs(10), seen, |s| s.lines().any(|l| l.starts_with("ADDED web 1 ")));
    // One patch takes it out of the selector and changes its data.
    f.k(&["patch", "cm", "tiered", "--type=merge", "-p", r#"{"metadata":{"labels":{"tier":"api"}},"data":{"v":"2"}}"#]);
    let rv = f.k(&["get", "cm", "tiered", "-o", "jsonpath={.metadata.resourceVersion}"]);
    // As the apiserver's watch cache sends it: the object before the change, with
    // the change's resourceVersion.
    wait_until("the watch to print the DELETED event", Duration::from_secs(10), seen, |s| s.lines().any(|l| l.starts_with("DELETED")));
    let _ = child.kill();
    let _ = child.wait();
    let printed = seen();
    assert!(printed.lines().any(|l| l == format!("DELETED web 1 {rv}")), "expected `DELETED web 1 {rv}`:\n{printed}");
}

#[test]
fn describe_shows_the_objects_events() {
    let f = Flotilla::start();
    f.apply(&[], DEPLOY_V1);
    let uid = f.k(&["get", "deploy", "web", "-o", "jsonpath={.metadata.uid}"]);
    f.apply(&[], &format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: web.1}}\ninvolvedObject: {{apiVersion: apps/v1, kind: Deployment, name: web, namespace: default, uid: \"{uid}\"}}\nreason: Scheduled\nmessage: assigned to east\ntype: Normal\nsource: {{component: flotilla-scheduler}}\ncount: 1\n"
    ));
    let d = f.k(&["describe", "deploy", "web"]);
    assert!(d.contains("Replicas:") && d.contains("nginx:1.27"), "{d}");
    let events = d.split("Events:").nth(1).unwrap_or_default();
    assert!(events.contains("Scheduled") && events.contains("flotilla-scheduler") && events.contains("assigned to east"), "{d}");
    let ev = f.k(&["get", "events"]);
    assert!(ev.contains("deployment/web") && ev.contains("Scheduled"), "{ev}");
}

#[test]
fn delete_waits_until_the_object_is_gone() {
    let f = Flotilla::start();
    f.apply(&[], DEPLOY_V1);
    // A finalizer keeps it Terminating; kubectl delete --wait must block until it is gone.
    f.k(&["patch", "deploy", "web", "--type=merge", "-p", r#"{"metadata":{"finalizers":["example.com/hold"]}}"#]);
    let out = f.dir.path().join("delete.out");
    let mut child = f.kubectl_background(&["delete", "deploy", "web", "--timeout=30s"], &out);
    wait_for("deletionTimestamp to be set", Duration::from_secs(10), || {
        let ts = f.k(&["get", "deploy", "web", "-o", "jsonpath={.metadata.deletionTimestamp}"]);
        if ts.is_empty() {
            Err("no deletionTimestamp yet".into())
        } else {
            Ok(())
        }
    });
    assert!(child.try_wait().unwrap().is_none(), "kubectl delete returned while a finalizer held the object");
    f.k(&["patch", "deploy", "web", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#]);
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(&out).unwrap_or_default());
    assert!(std::fs::read_to_string(&out).unwrap().contains("deployment.apps \"web\" deleted"));
    let o = f.kubectl(&["get", "deploy", "web"]);
    assert!(!o.ok && o.stderr.contains("NotFound"), "{}", o.stderr);
}

#[test]
fn deleting_a_namespace_cascades_to_its_contents() {
    let f = Flotilla::start();
    f.apply(&[], "apiVersion: v1\nkind: Namespace\nmetadata: {name: doomed}\n");
    f.apply(&["-n", "doomed"], DEPLOY_V1);
    f.apply(&["-n", "doomed"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c1}\n");
    // One object holds a finalizer: the namespace must stay Terminating until it goes.
    f.apply(&["-n", "doomed"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, finalizers: [example.com/hold]}\n");
    let out = f.dir.path().join("delete-ns.out");
    let mut child = f.kubectl_background(&["delete", "ns", "doomed", "--timeout=60s"], &out);
    wait_for("the namespace to be Terminating with its other contents gone", Duration::from_secs(15), || {
        let phase = f.k(&["get", "ns", "doomed", "-o", "jsonpath={.status.phase}"]);
        let left = f.k(&["get", "deploy,cm", "-n", "doomed", "-o", "name"]);
        if phase == "Terminating" && left.trim() == "configmap/held" {
            Ok(())
        } else {
            Err(format!("phase={phase} left={left}"))
        }
    });
    let o = f.kubectl_stdin(&["apply", "-n", "doomed", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late}\n");
    assert!(
        !o.ok
            && o.stderr.contains(
                r#"configmaps "late" is forbidden: unable to create new content in namespace doomed because it is being terminated"#
            ),
        "{}",
        o.stderr
    );
    f.k(&["patch", "cm", "held", "-n", "doomed", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#]);
    assert!(child.wait().unwrap().success(), "{}", std::fs::read_to_string(&out).unwrap_or_default());
    let o = f.kubectl(&["get", "ns", "doomed"]);
    assert!(!o.ok && o.stderr.contains("NotFound"), "{}", o.stderr);
}

#[test]
fn generate_name_gives_a_unique_name_with_the_prefix() {
    let f = Flotilla::start();
    let m = "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: job-}\n";
    let a = f.kubectl_stdin(&["create", "-f", "-", "-o", "name"], m);
    let b = f.kubectl_stdin(&["create", "-f", "-", "-o", "name"], m);
    assert!(a.ok && b.ok, "{a:?} {b:?}");
    assert!(a.stdout.starts_with("configmap/job-") && b.stdout.starts_with("configmap/job-"), "{a:?} {b:?}");
    assert_ne!(a.stdout, b.stdout);
}

/// A ConfigMap owned by the Deployment `web`, for cascade tests.
fn owned_configmap(f: &Flotilla, name: &str) {
    let uid = f.k(&["get", "deploy", "web", "-o", "jsonpath={.metadata.uid}"]);
    f.apply(&[], &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: web, uid: \"{uid}\"}}]\n"));
}

#[test]
fn cascading_delete_follows_the_propagation_policy() {
    let f = Flotilla::start();
    // Background (kubectl's default): the owner goes at once, the dependent soon after.
    f.apply(&[], DEPLOY_V1);
    owned_configmap(&f, "dep-bg");
    f.k(&["delete", "deploy", "web"]);
    wait_for("the background-collected dependent to go", Duration::from_secs(10), || {
        let o = f.kubectl(&["get", "cm", "dep-bg", "-o", "name"]);
        if o.ok {
            Err(o.stdout)
        } else {
            Ok(())
        }
    });
    // Foreground: the dependent is deleted before the owner disappears.
    f.apply(&[], DEPLOY_V1);
    owned_configmap(&f, "dep-fg");
    f.k(&["delete", "deploy", "web", "--cascade=foreground", "--timeout=30s"]);
    assert!(!f.kubectl(&["get", "cm", "dep-fg"]).ok, "foreground delete returned with the dependent still there");
    // Orphan: the dependent stays, without its owner reference.
    f.apply(&[], DEPLOY_V1);
    owned_configmap(&f, "dep-orphan");
    f.k(&["delete", "deploy", "web", "--cascade=orphan", "--timeout=30s"]);
    assert!(!f.kubectl(&["get", "deploy", "web"]).ok);
    assert_eq!(
        f.k(&["get", "cm", "dep-orphan", "-o", "jsonpath={.metadata.ownerReferences}"]),
        "",
        "the orphan keeps no reference to its deleted owner"
    );
}

/// kubectl's typed `create` commands send protobuf bodies, not JSON.
#[test]
fn kubectl_create_subcommands_send_protobuf_and_are_accepted() {
    let f = Flotilla::start();
    assert!(f.k(&["create", "namespace", "pb"]).contains("namespace/pb created"));
    assert!(f
        .k(&["create", "configmap", "cfg", "-n", "pb", "--from-literal=k=v", "--from-literal=empty="])
        .contains("configmap/cfg created"));
    assert!(f.k(&["create", "secret", "generic", "s", "-n", "pb", "--from-literal=password=hunter2"]).contains("secret/s created"));
    assert!(f.k(&["create", "serviceaccount", "robot", "-n", "pb"]).contains("serviceaccount/robot created"));
    assert!(f
        .k(&["create", "deployment", "api", "-n", "pb", "--image=nginx:1.27", "--replicas=3", "--port=8080"])
        .contains("deployment.apps/api created"));

    let cm = f.k(&["get", "cm", "cfg", "-n", "pb", "-o", "jsonpath={.data.k}|{.data.empty}|{.metadata.uid}"]);
    let parts: Vec<&str> = cm.split('|').collect();
    assert_eq!(parts[..2], ["v", ""], "{cm}");
    assert!(!parts[2].is_empty(), "the server assigned a uid: {cm}");
    let secret = f.k(&["get", "secret", "s", "-n", "pb", "-o", "jsonpath={.data.password}"]);
    assert_eq!(secret, "aHVudGVyMg==", "secret data round-trips as base64");
    let d = f.k(&[
        "get", "deploy", "api", "-n", "pb", "-o",
        "jsonpath={.spec.replicas}|{.spec.selector.matchLabels.app}|{.spec.template.spec.containers[0].image}|{.spec.template.spec.containers[0].ports[0].containerPort}|{.spec.template.spec.containers[0].ports[0].protocol}|{.spec.strategy.type}",
    ]);
    // The defaults (protocol, strategy) are applied after decoding, as for JSON bodies.
    assert_eq!(d, "3|api|nginx:1.27|8080|TCP|RollingUpdate");
    // An invalid object sent as protobuf is validated like any other.
    let bad = f.kubectl(&["create", "configmap", "Bad_Name", "-n", "pb"]);
    assert!(!bad.ok && bad.stderr.contains("Invalid") && bad.stderr.contains("Bad_Name"), "{bad:?}");
    assert!(f.k(&["get", "--raw", "/readyz"]).contains("ok"));
}
