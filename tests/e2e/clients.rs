//! Third-party Python Kubernetes clients against a workspace: what tests/e2e/kubectl_*.rs
//! prove for kubectl, this proves for the clients operators write tools with.
//!
//! - the official client `kubernetes`, 37.0.2 and 35.0.0 (before 37 it sends `watch=True`
//!   and `force=True`; 36.0.0 sends no bearer token at all, kubernetes-client/python#2582,
//!   so the pre-37 release tested is 35.0.0): tests/clients/kubernetes_client.py;
//! - an operator written with kopf 1.45.2, run as `kopf run --standalone`, checked here with
//!   kubectl: tests/clients/kopf_operator.py;
//! - kr8s 0.20.15: tests/clients/kr8s_client.py.
//!
//! The pinned venvs come from hack/python-clients.sh (CI runs it first; a test runs it too,
//! so a machine with Rust, python3 and kubectl needs nothing else). Each test has its own
//! control plane, and each client uses a workspace context whose token reaches only that
//! workspace.

use crate::common;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{tail, Flotilla};
use serde_json::Value;

/// How long one client scenario may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv `name` of hack/python-clients.sh, installed if missing (the script is
/// idempotent and takes a lock, so parallel tests share one install).
fn venv(name: &str) -> PathBuf {
    let o = Command::new("bash").arg(repo().join("hack/python-clients.sh")).arg(name).output().expect("run hack/python-clients.sh");
    let out = common::Out::from(o);
    assert!(out.ok, "hack/python-clients.sh {name} failed:\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    let root = std::env::var("FLOTILLA_PYTHON_CLIENTS").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from("target/python-clients"));
    let dir = repo().join(root).join(name);
    assert!(dir.join("bin/python").exists(), "{} has no bin/python after hack/python-clients.sh: {}", dir.display(), out.stdout);
    dir
}

/// A control plane with the workspace `ws`; its context (a token for that workspace
/// only) is in the admin kubeconfig.
fn with_workspace(ws: &str) -> Flotilla {
    let f = Flotilla::start();
    let o = f.flotilla(&["workspace", "create", ws]);
    assert!(o.ok && o.stdout.contains(&format!("workspace {ws} created")), "{o:?}");
    f
}

/// A kubeconfig holding only the context `ctx`, as its current context (what kopf reads).
fn kubeconfig_for(f: &Flotilla, ctx: &str) -> PathBuf {
    let cfg = f.k(&["config", "view", "--minify", "--flatten", "--context", ctx]);
    assert!(cfg.contains(&format!("current-context: {ctx}")), "{cfg}");
    let path = f.data_dir().join(format!("{ctx}.kubeconfig"));
    std::fs::write(&path, cfg).expect("write kubeconfig");
    path
}

/// A child process killed when dropped, with its output in a file.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Self { child, log }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the exit; None after `timeout` (the process is then killed).
    fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited after `grace`.
    fn stop(&mut self, grace: Duration) {
        if self.child.try_wait().ok().flatten().is_none() {
            common::signal(self.child.id(), "TERM");
            self.wait(grace);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a client scenario `tests/clients/<script>` with the venv's python (writing no
/// `__pycache__` into the source tree); it must exit 0.
/// A passing run prints its output too, so `--no-capture` shows what it checked.
fn run_scenario(f: &Flotilla, venv_dir: &Path, script: &str, args: &[&str]) {
    let mut cmd = Command::new(venv_dir.join("bin/python"));
    cmd.arg(repo().join("tests/clients").join(script))
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("KUBECONFIG");
    let mut p = Proc::spawn(cmd, f.data_dir().join(format!("{script}.log")));
    let status = p.wait(SCRIPT_TIMEOUT);
    let out = p.output();
    match status {
        Some(st) if st.success() => println!("{script} {}:\n{out}", args.join(" ")),
        Some(st) => panic!("{script} failed ({st}):\n{out}\nserver log tail:\n{}", tail(&f.log())),
        None => panic!("{script} did not finish within {SCRIPT_TIMEOUT:?}:\n{out}\nserver log tail:\n{}", tail(&f.log())),
    }
}

fn official_client(venv_name: &str, version: &str, ws: &str) {
    let py = venv(venv_name);
    let f = with_workspace(ws);
    // A second workspace, whose URL this workspace's token must not reach.
    assert!(f.flotilla(&["workspace", "create", "elsewhere"]).ok);
    let kubeconfig = f.kubeconfig();
    let forbidden = format!("{}/clusters/elsewhere", f.url);
    run_scenario(
        &f,
        &py,
        "kubernetes_client.py",
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            ws,
            "--namespace",
            "pyclient",
            "--expect-version",
            version,
            "--forbidden-url",
            &forbidden,
        ],
    );
}

#[test]
fn official_python_client_37() {
    official_client("kubernetes-37", "37.0.2", "py37");
}

/// Before 37 the client renders booleans with Python's str(): `watch=True`,
/// `force=True`, which Kubernetes takes as true (anything but `false`, `0` or empty).
#[test]
fn official_python_client_35() {
    official_client("kubernetes-35", "35.0.0", "py35");
}

#[test]
fn kr8s_client() {
    let py = venv("kr8s");
    let f = with_workspace("kr8s");
    let kubeconfig = f.kubeconfig();
    run_scenario(&f, &py, "kr8s_client.py", &["--kubeconfig", kubeconfig.to_str().unwrap(), "--context", "kr8s", "--namespace", "kr8s-ns"]);
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.clients.flotilla.test
spec:
  group: clients.flotilla.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

const FINALIZER: &str = "clients.flotilla.test/kopf-cleanup";

/// The object as JSON, or Err with what kubectl said.
fn get_json(f: &Flotilla, ctx: &str, what: &[&str]) -> Result<Value, String> {
    let mut args = vec!["--context", ctx, "-n", "widgets", "get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "json"]);
    let o = f.kubectl(&args);
    if !o.ok {
        return Err(o.stderr.trim().to_string());
    }
    serde_json::from_str(&o.stdout).map_err(|e| format!("{e}: {}", o.stdout))
}

/// True when kubectl says the object does not exist.
fn gone(f: &Flotilla, ctx: &str, what: &[&str]) -> Result<(), String> {
    match get_json(f, ctx, what) {
        Err(e) if e.contains("NotFound") => Ok(()),
        Err(e) => Err(e),
        Ok(v) => Err(format!("still there: metadata {}", v["metadata"])),
    }
}

#[test]
fn kopf_operator_creates_updates_and_deletes() {
    let py = venv("kopf");
    let ws = "operators";
    let f = with_workspace(ws);
    f.k(&["--context", ws, "create", "namespace", "widgets"]);
    f.apply(&["--context", ws], WIDGET_CRD);
    f.k(&["--context", ws, "wait", "--for=condition=Established", "crd/widgets.clients.flotilla.test", "--timeout=20s"]);

    // The operator sees only its workspace, through the workspace's own token.
    let kubeconfig = kubeconfig_for(&f, ws);
    let mut cmd = Command::new(py.join("bin/kopf"));
    cmd.args(["run", "--standalone", "--verbose", "-n", "widgets"])
        .arg(repo().join("tests/clients/kopf_operator.py"))
        .current_dir(f.data_dir())
        .env("KUBECONFIG", &kubeconfig)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let kopf = RefCell::new(Proc::spawn(cmd, f.data_dir().join("kopf.log")));

    // Every wait prints the operator's log when it times out, and stops at once if the
    // operator has exited.
    let wait = |what: &str, timeout: Duration, check: &mut dyn FnMut() -> Result<Value, String>| -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match check() {
                Ok(v) => return v,
                Err(seen) => seen,
            };
            let exited = kopf.borrow_mut().child.try_wait().expect("try_wait");
            if exited.is_some() || Instant::now() > deadline {
                let why = exited.map_or(format!("timed out after {timeout:?}"), |st| format!("kopf exited ({st})"));
                panic!(
                    "{why} waiting for {what}; last seen: {last}\nkopf log:\n{}\nserver log tail:\n{}",
                    kopf.borrow().output(),
                    tail(&f.log())
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    f.apply(
        &["--context", ws],
        "apiVersion: clients.flotilla.test/v1\nkind: Widget\nmetadata: {name: w1, namespace: widgets, labels: {team: a}}\nspec: {size: 1}\n",
    );

    // Create: finalizer, status written by the handler, an adopted child, an Event.
    let widget = wait("the create handler's status and finalizer", Duration::from_secs(30), &mut || {
        let w = get_json(&f, ws, &["widget", "w1"])?;
        let has_finalizer = w["metadata"]["finalizers"].as_array().is_some_and(|a| a.iter().any(|x| x == FINALIZER));
        if has_finalizer && w["status"]["phase"] == "Created" && w["status"]["create_widget"]["child"] == "w1-child" {
            Ok(w)
        } else {
            Err(format!("finalizers {} status {}", w["metadata"]["finalizers"], w["status"]))
        }
    });
    assert_eq!(widget["status"]["observedSize"], 1, "{}", widget["status"]);
    assert_eq!(widget["metadata"]["generation"], 1, "status writes must not bump generation: {}", widget["metadata"]);
    let uid = widget["metadata"]["uid"].as_str().expect("uid").to_string();
    let child = get_json(&f, ws, &["cm", "w1-child"]).expect("the adopted child exists");
    assert_eq!(child["data"]["size"], "1", "{child}");
    assert_eq!(child["metadata"]["labels"]["team"], "a", "kopf.adopt copies the owner's labels: {child}");
    let owner = &child["metadata"]["ownerReferences"][0];
    assert!(
        owner["kind"] == "Widget" && owner["name"] == "w1" && owner["uid"] == uid.as_str() && owner["controller"] == true,
        "the child is owned by the Widget: {owner}"
    );
    wait("the ChildCreated Event on w1", Duration::from_secs(10), &mut || {
        let ev = get_json(&f, ws, &["events", "--field-selector", "involvedObject.name=w1"])?;
        let reasons: Vec<&str> = ev["items"].as_array().into_iter().flatten().filter_map(|e| e["reason"].as_str()).collect();
        if reasons.contains(&"ChildCreated") {
            Ok(ev)
        } else {
            Err(format!("reasons {reasons:?}"))
        }
    });

    // Update: the field handler resizes the child and writes status.
    f.k(&["--context", ws, "-n", "widgets", "patch", "widget", "w1", "--type", "merge", "-p", r#"{"spec":{"size":3}}"#]);
    wait("the update handler", Duration::from_secs(30), &mut || {
        let w = get_json(&f, ws, &["widget", "w1"])?;
        let c = get_json(&f, ws, &["cm", "w1-child"])?;
        if w["status"]["phase"] == "Updated" && w["status"]["observedSize"] == 3 && c["data"]["size"] == "3" {
            Ok(w)
        } else {
            Err(format!("widget status {} child data {}", w["status"], c["data"]))
        }
    });

    // Delete: the finalizer holds the Widget until the delete handler has run; then
    // the Widget goes, and the garbage collector removes its adopted child.
    f.k(&["--context", ws, "-n", "widgets", "delete", "widget", "w1", "--wait=false"]);
    wait("the Widget to be deleted", Duration::from_secs(30), &mut || gone(&f, ws, &["widget", "w1"]).map(|_| Value::Null));
    let tomb = get_json(&f, ws, &["cm", "w1-tombstone"]).expect("the delete handler wrote its tombstone before the finalizer went");
    assert_eq!(tomb["data"]["lastSize"], "3", "{tomb}");
    wait("the adopted child to be garbage-collected", Duration::from_secs(20), &mut || {
        gone(&f, ws, &["cm", "w1-child"]).map(|_| Value::Null)
    });

    let mut kopf = kopf.into_inner();
    kopf.stop(Duration::from_secs(10));
    let log = kopf.output();
    println!("kopf log:\n{log}");
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("[ERROR") || l.contains("Traceback")).collect();
    assert!(errors.is_empty(), "the operator logged errors: {errors:#?}\nfull log:\n{log}");
}
