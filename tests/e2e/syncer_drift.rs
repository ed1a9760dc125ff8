//! Drift on a physical cluster, end to end: a cluster's user edits the copies the
//! syncer made (with the real kubectl against a simulated cluster), and the syncer
//! puts back what the workspace says, on the watch event of the edit, and says what it
//! reverted. The control plane runs with a resync of an hour, so nothing here is put
//! back by a resync: every revert within [`REVERT`] came from the watch.

use crate::common;

use std::time::Duration;

use common::fleet::{fleet, rollout, sim};
use common::{tail, wait_for, Flotilla, SimCluster};
use serde_json::Value;

/// How long a revert may take. The edit's watch event arrives in milliseconds; the
/// rest is room for a loaded machine.
const REVERT: Duration = Duration::from_secs(20);
/// How long the upstream status may take to settle after a revert (pods restart).
const SETTLE: Duration = Duration::from_secs(45);

/// A Deployment that takes its environment from a ConfigMap and a Secret, so that the
/// syncer pushes all three.
const WEB: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: web-secret}
stringData: {password: s3cret}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: front}
  annotations: {team: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        envFrom: [{configMapRef: {name: web-config}}, {secretRef: {name: web-secret}}]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
"#;

/// A control plane with its scheduler and a one-cluster fleet (`east`), running `web`
/// there; `ns` is the namespace of its copies.
struct Drift {
    f: Flotilla,
    east: SimCluster,
    ns: String,
}

impl Drift {
    fn start() -> Self {
        let east = sim("east", 4);
        let f = fleet(&["--resync", "1h"], &[(&east, &[])]);
        f.apply(&["--context", "demo", "-n", "default"], WEB);
        rollout(&f, "web");
        let ns = wait_for("the copy's namespace", REVERT, || {
            let o = east.kubectl(&[
                "get",
                "deploy",
                "-A",
                "-l",
                "workload.flotilla.io/sync-target=east",
                "--field-selector",
                "metadata.name=web",
                "-o",
                "jsonpath={.items[*].metadata.namespace}",
            ]);
            Some(o.stdout.trim().to_string()).filter(|n| n.starts_with("flotilla-")).ok_or(format!("{o:?}"))
        });
        let d = Drift { f, east, ns };
        for kind in ["cm/web-config", "secret/web-secret"] {
            d.wait_copy(&format!("the copy of {kind}"), kind, |c| c.is_some());
        }
        d.assert_nothing_reported("making the copies");
        d
    }

    /// No DriftReverted Event in the copies' namespace.
    fn assert_nothing_reported(&self, after: &str) {
        let all = self.edit(&["get", "events", "--field-selector", "reason=DriftReverted", "-o", "name"]);
        assert!(all.trim().is_empty(), "drift reported after {after}:\n{all}\n{}", self.drift_events(""));
    }

    /// kubectl against the copies' namespace on `east`; must succeed.
    fn edit(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        self.east.k(&all)
    }

    /// The copy `kind/name` as JSON (`None`: there is none).
    fn copy(&self, what: &str) -> Result<Option<Value>, String> {
        let o = self.east.kubectl(&["-n", &self.ns, "get", what, "-o", "json"]);
        if !o.ok {
            return if o.stderr.contains("NotFound") { Ok(None) } else { Err(format!("{o:?}")) };
        }
        serde_json::from_str(&o.stdout).map(Some).map_err(|e| format!("{e}: {}", o.stdout))
    }

    /// Waits until the copy `what` passes `ok`; on timeout, says what it was and what
    /// the control plane logged.
    fn wait_copy(&self, desc: &str, what: &str, ok: impl Fn(Option<&Value>) -> bool) -> Option<Value> {
        wait_for(desc, REVERT, || match self.copy(what) {
            Ok(c) if ok(c.as_ref()) => Ok(c),
            Ok(c) => Err(format!("{what} is {}\n--- control plane log ---\n{}", summary(c.as_ref()), tail(&self.f.log()))),
            Err(e) => Err(e),
        })
    }

    /// Waits until the upstream Deployment's status is the truth again: two replicas,
    /// all ready, available and updated, its generation observed, the cluster's entry
    /// `east=2/2`, and the copy itself running two.
    fn wait_status_settled(&self) {
        wait_for("the upstream status to settle at 2/2", SETTLE, || {
            let up = self.f.k(&[
                "--context",
                "demo",
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.spec.replicas} {.status.replicas} {.status.readyReplicas} {.status.availableReplicas} \
                 {.status.updatedReplicas} {.metadata.generation}/{.status.observedGeneration}",
            ]);
            let wp = self.f.k(&["--context", "demo", "get", "wp", "web", "-o", "jsonpath={.status.summary}"]);
            let down = self.edit(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.status.readyReplicas}"]);
            let fields: Vec<&str> = up.split_whitespace().collect();
            let observed = fields.last().and_then(|g| g.split_once('/')).is_some_and(|(a, b)| a == b);
            if fields[..fields.len().saturating_sub(1)] == ["2"; 5] && observed && wp == "east=2/2" && down == "2 2" {
                Ok(())
            } else {
                Err(format!("upstream {up:?}, WorkloadPlacement {wp:?}, copy {down:?}\n--- log ---\n{}", tail(&self.f.log())))
            }
        });
    }

    /// The DriftReverted Events on the copy `name` in the cluster, one a line.
    fn drift_events(&self, name: &str) -> String {
        self.edit(&[
            "get",
            "events",
            "--field-selector",
            &if name.is_empty() { "reason=DriftReverted".to_string() } else { format!("reason=DriftReverted,involvedObject.name={name}") },
            "-o",
            r#"jsonpath={range .items[*]}{.involvedObject.kind}/{.involvedObject.name}: {.message}{"\n"}{end}"#,
        ])
    }

    /// Waits for a DriftReverted Event on the copy `name` whose message has `words`.
    fn wait_reported(&self, name: &str, words: &[&str]) -> String {
        wait_for(&format!("a DriftReverted Event on {name} saying {words:?}"), REVERT, || {
            let ev = self.drift_events(name);
            if ev.lines().any(|l| words.iter().all(|w| l.contains(w))) {
                Ok(ev)
            } else {
                Err(ev)
            }
        })
    }
}

/// What a failed wait prints about a copy.
fn summary(c: Option<&Value>) -> String {
    let Some(c) = c else { return "absent".into() };
    let m = &c["metadata"];
    format!(
        "labels {} annotations {} replicas {} image {} data {}",
        m["labels"], m["annotations"], c["spec"]["replicas"], c["spec"]["template"]["spec"]["containers"][0]["image"], c["data"]
    )
}

fn annotation<'a>(c: Option<&'a Value>, key: &str) -> Option<&'a str> {
    c?["metadata"]["annotations"][key].as_str()
}

fn label<'a>(c: Option<&'a Value>, key: &str) -> Option<&'a str> {
    c?["metadata"]["labels"][key].as_str()
}

fn replicas(c: Option<&Value>) -> Option<i64> {
    c?["spec"]["replicas"].as_i64()
}

const UPSTREAM: &str = "workload.flotilla.io/upstream";
const TARGET: &str = "workload.flotilla.io/sync-target";

#[test]
fn a_tampered_upstream_annotation_is_restored_and_a_scale_after_it_reverted() {
    let d = Drift::start();
    // The reported bug: with the annotation the syncer found the copy by rewritten,
    // it lost sight of the copy, and the scale after it stayed.
    d.edit(&["annotate", "deploy", "web", &format!("{UPSTREAM}=tampered"), "--overwrite"]);
    d.edit(&["scale", "deploy", "web", "--replicas=5"]);
    d.wait_copy("the annotation restored and the scale reverted", "deploy/web", |c| {
        annotation(c, UPSTREAM) == Some("demo/default/web") && replicas(c) == Some(2)
    });
    d.wait_status_settled();
    d.wait_reported("web", &["spec.replicas"]);

    // Removed, then pointed at another object of the workspace.
    d.edit(&["annotate", "deploy", "web", &format!("{UPSTREAM}-")]);
    d.wait_copy("the removed annotation restored", "deploy/web", |c| annotation(c, UPSTREAM) == Some("demo/default/web"));
    d.edit(&["annotate", "deploy", "web", &format!("{UPSTREAM}=demo/default/other"), "--overwrite"]);
    d.edit(&["scale", "deploy", "web", "--replicas=7"]);
    d.wait_copy("the redirected annotation restored and the scale reverted", "deploy/web", |c| {
        annotation(c, UPSTREAM) == Some("demo/default/web") && replicas(c) == Some(2)
    });
    d.wait_reported("web", &[UPSTREAM]);
    // Other annotations of the workload, and the generation the copy was made from.
    d.edit(&["annotate", "deploy", "web", "team=hacked", "workload.flotilla.io/synced-generation=99", "--overwrite"]);
    d.wait_copy("the annotations restored", "deploy/web", |c| {
        annotation(c, "team") == Some("shop") && annotation(c, "workload.flotilla.io/synced-generation") == Some("1")
    });
    d.wait_status_settled();
}

#[test]
fn tampered_labels_are_restored() {
    let d = Drift::start();
    d.edit(&["label", "deploy", "web", "tier=back", "--overwrite"]);
    d.wait_copy("the workload's label restored", "deploy/web", |c| label(c, "tier") == Some("front"));
    d.wait_reported("web", &["tier"]);
    // The label that marks the copy as this syncer's: removed, the copy leaves the
    // syncer's watch; changed, it claims another cluster.
    d.edit(&["label", "deploy", "web", &format!("{TARGET}-")]);
    d.wait_copy("the sync-target label restored", "deploy/web", |c| label(c, TARGET) == Some("east"));
    d.edit(&["label", "deploy", "web", &format!("{TARGET}=west"), "--overwrite"]);
    d.edit(&["scale", "deploy", "web", "--replicas=4"]);
    d.wait_copy("the sync-target label restored and the scale reverted", "deploy/web", |c| {
        label(c, TARGET) == Some("east") && replicas(c) == Some(2)
    });
    d.wait_status_settled();
}

#[test]
fn a_tampered_spec_is_reverted() {
    let d = Drift::start();
    d.edit(&["set", "image", "deploy/web", "app=evil:1"]);
    d.wait_copy("the image reverted", "deploy/web", |c| {
        c.is_some_and(|c| c["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27")
    });
    d.wait_reported("web", &["image"]);
    d.edit(&["scale", "deploy", "web", "--replicas=0"]);
    d.wait_copy("the scale reverted", "deploy/web", |c| replicas(c) == Some(2));
    d.wait_status_settled();

    // What is added is taken out: server-side apply alone would leave it, as it
    // belongs to another field manager.
    let containers =
        |c: Option<&Value>| c.and_then(|c| c["spec"]["template"]["spec"]["containers"].as_array().cloned()).unwrap_or_default();
    d.edit(&["set", "env", "deploy/web", "INJECTED=1"]);
    d.wait_copy("the added environment removed", "deploy/web", |c| {
        let cs = containers(c);
        cs.len() == 1 && cs[0].get("env").is_none() && cs[0]["envFrom"].as_array().is_some_and(|e| e.len() == 2)
    });
    d.wait_reported("web", &["spec.template.spec.containers[0].env was added, removed"]);
    let sidecar = r#"[{"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "sidecar", "image": "evil:1"}}]"#;
    d.edit(&["patch", "deploy", "web", "--type=json", "-p", sidecar]);
    d.wait_copy("the added container removed", "deploy/web", |c| {
        let cs = containers(c);
        cs.len() == 1 && cs[0]["name"] == "app" && cs[0]["image"] == "nginx:1.27"
    });
    d.wait_reported("web", &["spec.template.spec.containers[1] was added, removed"]);
    d.wait_status_settled();
}

#[test]
fn a_deleted_copy_is_made_again() {
    let d = Drift::start();
    d.edit(&["delete", "deploy", "web", "--wait=true"]);
    d.wait_copy("the copy made again", "deploy/web", |c| replicas(c) == Some(2) && annotation(c, UPSTREAM) == Some("demo/default/web"));
    d.wait_reported("web", &["deleted"]);
    d.wait_status_settled();
    // The ConfigMap and the Secret too.
    d.edit(&["delete", "cm/web-config", "secret/web-secret", "--wait=true"]);
    d.wait_copy("the ConfigMap made again", "cm/web-config", |c| c.is_some_and(|c| c["data"]["greeting"] == "hello"));
    d.wait_copy("the Secret made again", "secret/web-secret", |c| c.is_some_and(|c| c["data"]["password"] == "czNjcmV0"));
}

#[test]
fn tampered_config_maps_and_secrets_are_restored() {
    let d = Drift::start();
    d.edit(&["annotate", "cm", "web-config", &format!("{UPSTREAM}=tampered"), "--overwrite"]);
    d.edit(&["patch", "cm", "web-config", "--type=merge", "-p", r#"{"data":{"greeting":"pwned"}}"#]);
    d.wait_copy("the ConfigMap restored", "cm/web-config", |c| {
        c.is_some_and(|c| c["data"]["greeting"] == "hello") && annotation(c, UPSTREAM) == Some("demo/default/web-config")
    });
    d.wait_reported("web-config", &["data.greeting"]);
    d.edit(&["patch", "cm", "web-config", "--type=merge", "-p", r#"{"data":{"injected":"1"}}"#]);
    d.wait_copy("the added key removed", "cm/web-config", |c| c.is_some_and(|c| c["data"] == serde_json::json!({"greeting": "hello"})));
    d.wait_reported("web-config", &["data.injected was added, removed"]);
    d.edit(&["label", "secret", "web-secret", &format!("{TARGET}-")]);
    d.edit(&["patch", "secret", "web-secret", "--type=merge", "-p", r#"{"data":{"password":"cHduZWQ="}}"#]);
    d.wait_copy("the Secret restored", "secret/web-secret", |c| {
        c.is_some_and(|c| c["data"]["password"] == "czNjcmV0") && label(c, TARGET) == Some("east")
    });
    let reported = d.wait_reported("web-secret", &["data.password"]);
    assert!(!reported.contains("cHduZWQ") && !reported.contains("czNjcmV0"), "an Event shows a Secret's value: {reported}");
    d.wait_status_settled();
}

#[test]
fn a_tampered_namespace_is_restored_and_its_copies_still_known() {
    let d = Drift::start();
    let locator = "workload.flotilla.io/namespace-locator";
    let ns_view = || {
        d.east.kubectl(&["get", "ns", &d.ns, "-o", "json"]).stdout.parse::<Value>().ok().map(|n| n["metadata"].clone()).unwrap_or_default()
    };
    // Every mark at once: the namespace's locator and label, the copy's annotation and
    // label; and a scale. Nothing downstream says any more what the copy is of.
    d.east.k(&["annotate", "ns", &d.ns, &format!(r#"{locator}={{"workspace":"x","namespace":"y"}}"#), "--overwrite"]);
    d.east.k(&["label", "ns", &d.ns, &format!("{TARGET}-")]);
    d.edit(&["annotate", "deploy", "web", &format!("{UPSTREAM}=x/y/web"), "--overwrite"]);
    d.edit(&["label", "deploy", "web", &format!("{TARGET}=west"), "--overwrite"]);
    d.edit(&["scale", "deploy", "web", "--replicas=3"]);
    wait_for("the namespace's label and locator restored", REVERT, || {
        let m = ns_view();
        if m["labels"][TARGET] == "east" && m["annotations"][locator] == r#"{"workspace":"demo","namespace":"default"}"# {
            Ok(())
        } else {
            Err(format!("{m}\n--- log ---\n{}", tail(&d.f.log())))
        }
    });
    d.wait_copy("the copy's marks restored and the scale reverted", "deploy/web", |c| {
        annotation(c, UPSTREAM) == Some("demo/default/web") && label(c, TARGET) == Some("east") && replicas(c) == Some(2)
    });
    d.wait_status_settled();
}

#[test]
fn a_change_in_the_workspace_is_an_update_and_not_drift() {
    let d = Drift::start();
    let demo = |args: &[&str]| {
        let mut all = vec!["--context", "demo", "-n", "default"];
        all.extend_from_slice(args);
        d.f.k(&all)
    };
    demo(&["set", "image", "deploy/web", "app=nginx:1.28"]);
    demo(&["label", "deploy", "web", "tier=back", "--overwrite"]);
    demo(&["patch", "cm", "web-config", "--type=merge", "-p", r#"{"data":{"greeting":"hi","more":"x"}}"#]);
    d.wait_copy("the new image and label", "deploy/web", |c| {
        label(c, "tier") == Some("back") && c.is_some_and(|c| c["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28")
    });
    d.wait_copy("the new data", "cm/web-config", |c| c.is_some_and(|c| c["data"] == serde_json::json!({"greeting": "hi", "more": "x"})));
    // A key taken out upstream goes downstream too.
    demo(&["patch", "cm", "web-config", "--type=json", "-p", r#"[{"op": "remove", "path": "/data/more"}]"#]);
    d.wait_copy("the key removed", "cm/web-config", |c| c.is_some_and(|c| c["data"] == serde_json::json!({"greeting": "hi"})));
    rollout(&d.f, "web");
    d.wait_status_settled();
    d.assert_nothing_reported("changes made in the workspace");
}
