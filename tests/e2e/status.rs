//! `flotilla status` against a fleet that `flotilla up` runs: `-w -o json` prints one
//! line per change for scripts, and a workspace that does not exist is a clear error.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn status_watch_prints_a_json_line_per_change() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();
    let log = dir.path().join("up.log");
    let (mut up, _) = spawn_ready(&["--data-dir", data_s, "up", "--listen", "127.0.0.1:0"], &log);
    let kubeconfig = data.join("admin.kubeconfig");
    let flotilla = |args: &[&str]| Out::from(Command::new(bin()).args(["--data-dir", data_s]).args(args).output().unwrap());
    let k = |args: &[&str]| {
        let o = kubectl_cmd(&kubeconfig, dir.path(), args).output().map(Out::from).unwrap();
        assert!(o.ok, "kubectl {}: {}{}", args.join(" "), o.stdout, o.stderr);
        o.stdout
    };
    k(&["apply", "-f", "docs/examples/spread.yaml"]);

    let mut watch = Command::new(bin())
        .args(["--data-dir", data_s, "status", "-w", "-o", "json", "--workspace", "demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen: Vec<Value> = Vec::new();
    // Waits for a line that passes `ok`; every line must be one whole JSON document.
    let mut wait_line = |what: &str, ok: &dyn Fn(&Value) -> bool| {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|_| panic!("no line with {what} within {DEADLINE:?}; lines seen: {seen:#?}"));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON document per line ({e}): {line}"));
            seen.push(v.clone());
            if ok(&v) {
                return v;
            }
        }
    };
    let web = |v: &Value| v["workspaces"][0]["workloads"].as_array().unwrap().iter().find(|w| w["name"] == "web").cloned();
    let first = wait_line("web Available on two clusters", &|v| {
        web(v).is_some_and(|w| w["state"] == "Available" && w["clusters"].as_array().unwrap().len() == 2)
    });
    assert_eq!(first["workspaces"].as_array().unwrap().len(), 1, "--workspace narrows to one: {first}");
    let east = &first["clusters"].as_array().unwrap().iter().find(|c| c["name"] == "east").unwrap().clone();
    for field in ["ready", "heartbeatAgeSeconds", "schedulable", "cpuMillicores", "memoryBytes", "pods", "workloads", "labels"] {
        assert!(east.get(field).is_some(), "cluster field {field} missing: {east}");
    }
    assert_eq!(east["cpuMillicores"]["allocatable"], 8000);

    // The rest of the examples: api on eu, and huge, which fits nowhere.
    k(&["apply", "-f", "docs/examples/"]);
    let states = |v: &Value| -> String {
        let mut rows: Vec<String> = v["workspaces"][0]["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| format!("{}={}:{}", w["name"].as_str().unwrap(), w["state"].as_str().unwrap(), w["reason"].as_str().unwrap_or("")))
            .collect();
        rows.sort();
        rows.join("\n")
    };
    // Every example settled: the Deployments, the stateful store and the CronJob.
    let settled = wait_line("web, api, store and report Available, huge Pending", &|v| {
        let s = states(v);
        s.contains("api=Available:")
            && s.contains("huge=Pending:0/3 clusters fit")
            && s.contains("web=Available:")
            && s.contains("store=Available:")
            && s.contains("report=Available:")
    });
    // The dashboard shows the state the status aggregator wrote into each
    // WorkloadPlacement: it must be what flotilla status judges, reason and all. The
    // CronJob has none (its schedule runs in the workspace), and the Jobs it makes each
    // minute come and go, so neither is compared.
    let compared = |rows: &str| -> String {
        let mut kept: Vec<&str> = rows.lines().filter(|r| !r.starts_with("report")).collect();
        kept.sort();
        kept.join("\n")
    };
    let expected = compared(&states(&settled));
    let written = r#"jsonpath={range .items[*]}{.metadata.name}={.status.state}:{.status.stateMessage}{"\n"}{end}"#;
    wait_until(
        "the WorkloadPlacements' state to be flotilla status's",
        DEADLINE,
        || compared(&k(&["get", "wp", "-o", written])),
        |got| got == expected,
    );

    // A change shows up as a new line.
    let o = flotilla(&["cluster", "cordon", "east"]);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    wait_line("east Cordoned", &|v| {
        v["clusters"].as_array().unwrap().iter().any(|c| c["name"] == "east" && c["schedulable"] == "Cordoned")
    });

    signal(watch.id(), "TERM");
    let status = wait_for("status -w to stop on SIGTERM", DEADLINE, || watch.try_wait().unwrap().ok_or("running".to_string()));
    assert!(status.success(), "{status:?}");

    let o = flotilla(&["status", "--workspace", "nope"]);
    assert!(!o.ok);
    assert!(o.stderr.contains("workspace \"nope\" does not exist") && o.stderr.contains("flotilla workspace list"), "{}", o.stderr);

    signal(up.id(), "TERM");
    wait_for("up to stop", DEADLINE, || up.try_wait().unwrap().ok_or("running".to_string()));
}
