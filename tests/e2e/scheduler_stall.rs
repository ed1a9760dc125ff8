//! Stalls of the control plane itself, end to end: `flotilla start` (the API server,
//! the scheduler and the push syncers in one process) is stopped with SIGSTOP for
//! longer than the heartbeat grace, and continued. While it is stopped nobody can
//! observe a heartbeat, so nothing may be concluded from their absence: no cluster may
//! be declared NotReady and no workload may move (DESIGN.md, "When a cluster fails").
//! A cluster that is really killed afterwards must still fail over within the grace.
//! Each step waits on conditions with deadlines and prints what it saw.

use crate::common;
use test_clusters::fixtures::deployment;

use std::time::{Duration, Instant, SystemTime};

use common::fleet::{events, fleet, pid, rollout, sim, wait_assignment, DEADLINE, FAST};
use common::{signal, tail, wait_for, Flotilla};
use placement_api::SyncTarget;
use serde_json::Value;

/// FAST's heartbeat grace, in the whole seconds that heartbeat times carry.
const GRACE_SECS: i64 = 4;

/// The workloads: one replica of one cpu each, so that the scheduler, choosing the
/// roomiest of two clusters of equal size, puts about half on each.
const WORKLOADS: [&str; 6] = ["web", "api", "worker", "cache", "queue", "search"];

/// Wall-clock seconds since the epoch: the unit and the clock of heartbeat times (the
/// syncers run on this machine).
fn now_secs() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("clock after 1970").as_secs() as i64
}

/// Every SyncTarget, as stored.
fn targets(f: &Flotilla) -> Vec<SyncTarget> {
    let list: Value = serde_json::from_str(&f.k(&["get", "st", "-o", "json"])).expect("kubectl prints JSON");
    serde_json::from_value(list["items"].clone()).expect("SyncTargets")
}

/// `name=beat` of every cluster: its last heartbeat time in seconds (0: none yet).
fn beats(f: &Flotilla) -> Vec<(String, i64)> {
    targets(f)
        .iter()
        .map(|t| {
            let beat = t.status.as_ref().and_then(|s| s.last_syncer_heartbeat_time.as_ref()).map_or(0, |b| b.0.as_second());
            (t.metadata.name.clone().unwrap_or_default(), beat)
        })
        .collect()
}

/// `name type=status/reason@lastTransitionTime ...` of every SyncTarget, one a line:
/// any change of health, however brief, leaves a new transition time here.
fn health(f: &Flotilla) -> Vec<String> {
    let path = r#"jsonpath={range .items[*]}{.metadata.name}{range .status.conditions[*]} {.type}={.status}/{.reason}@{.lastTransitionTime}{end}{"\n"}{end}"#;
    f.k(&["get", "st", "-o", path]).lines().map(str::to_string).collect()
}

/// `name: cluster=replicas ...` of every WorkloadPlacement in `demo`, sorted.
fn assignments(f: &Flotilla) -> Vec<String> {
    let path = r#"jsonpath={range .items[*]}{.metadata.name}:{range .spec.clusters[*]} {.name}={.replicas}{end}{"\n"}{end}"#;
    let mut all: Vec<String> = f.k(&["--context", "demo", "get", "wp", "-o", path]).lines().map(str::to_string).collect();
    all.sort();
    all
}

/// The scheduler's counters of impaired observation, as `/metrics` shows them.
fn observation_gaps(f: &Flotilla) -> Vec<String> {
    let metrics = f.kubectl(&["get", "--raw", "/metrics"]).stdout;
    metrics.lines().filter(|l| l.starts_with("flotilla_scheduler_observation_gaps_total")).map(str::to_string).collect()
}

/// What the fleet looked like at one moment.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    assignments: Vec<String>,
    health: Vec<String>,
    rescheduled: String,
}

fn snapshot(f: &Flotilla) -> Snapshot {
    Snapshot { assignments: assignments(f), health: health(f), rescheduled: events(f, "Rescheduled") }
}

/// Stops the control plane for `stopped`, continues it, and watches the fleet until
/// every cluster has beaten more than a grace past the moment it went on: long enough
/// for any false NotReady, and for any move it would cause, to show. Returns every
/// distinct snapshot seen, with when it was seen after the continue, and how long the
/// watch took.
fn stall(f: &Flotilla, stopped: Duration) -> (Vec<(Duration, Snapshot)>, Duration) {
    let pid = pid(f);
    signal(pid, "STOP");
    std::thread::sleep(stopped);
    signal(pid, "CONT");
    let resumed = Instant::now();
    let resumed_secs = now_secs();
    let mut seen: Vec<(Duration, Snapshot)> = Vec::new();
    wait_for("heartbeats for more than a grace after the continue", DEADLINE + stopped, || {
        let s = snapshot(f);
        if seen.last().is_none_or(|(_, last)| *last != s) {
            seen.push((resumed.elapsed(), s));
        }
        let beats = beats(f);
        if beats.iter().all(|(_, b)| *b >= resumed_secs + GRACE_SECS + 2) {
            Ok(())
        } else {
            Err(format!("heartbeats {beats:?}, want all at or after {}", resumed_secs + GRACE_SECS + 2))
        }
    });
    (seen, resumed.elapsed())
}

/// Fails with what was seen if anything differs from `before`.
fn assert_nothing_moved(f: &Flotilla, what: &str, before: &Snapshot, seen: &[(Duration, Snapshot)]) {
    let timeline: Vec<String> = seen
        .iter()
        .map(|(at, s)| {
            format!("+{at:.1?}:\n  {}\n  {}\n  Rescheduled: {:?}", s.assignments.join("\n  "), s.health.join("\n  "), s.rescheduled)
        })
        .collect();
    let log = f.log();
    let acted: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cluster health changed") || l.contains("placed") || l.contains("grace renewed"))
        .map(|l| l.get(..l.len().min(400)).unwrap_or(l))
        .collect();
    let context = format!("seen after the continue:\n{}\nthe control plane logged:\n{}", timeline.join("\n"), acted.join("\n"));
    for (at, s) in seen {
        assert_eq!(s.assignments, before.assignments, "{what}: a workload moved (seen +{at:?})\n{context}");
        assert_eq!(s.health, before.health, "{what}: a cluster changed health (seen +{at:?})\n{context}");
        assert_eq!(s.rescheduled, before.rescheduled, "{what}: a Rescheduled Event (seen +{at:?})\n{context}");
    }
}

#[test]
fn a_stopped_control_plane_moves_nothing_and_a_killed_cluster_still_fails_over() {
    let mut east = sim("east", 4);
    let west = sim("west", 4);
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    let all: Vec<String> = WORKLOADS.iter().map(|n| deployment(n).cpu("1").manifest()).collect();
    f.apply(&["--context", "demo", "-n", "default"], &all.join("---\n"));
    for name in WORKLOADS {
        wait_assignment(&f, name, |a| !a.is_empty());
        rollout(&f, name);
    }
    let before = snapshot(&f);
    eprintln!("placed:\n{}\n{}", before.assignments.join("\n"), before.health.join("\n"));
    let on = |c: &str| before.assignments.iter().filter(|a| a.contains(&format!(" {c}="))).count();
    assert!(on("east") > 0 && on("west") > 0, "the workloads must be spread over both clusters: {:?}", before.assignments);
    assert!(before.health.iter().all(|h| h.contains(" Ready=True/")), "{:?}", before.health);

    // Longer than the grace, shorter than the scheduler Lease's renew deadline (10 s):
    // the same scheduler goes on, and must see that it could not observe.
    let short = Duration::from_secs(GRACE_SECS as u64 + 2);
    let gaps_before = observation_gaps(&f);
    let (seen, watched) = stall(&f, short);
    let gaps = observation_gaps(&f);
    eprintln!(
        "stopped {short:?}: watched {watched:?} after the continue, {} distinct state(s); observation gaps {gaps_before:?} -> {gaps:?}",
        seen.len()
    );
    assert_nothing_moved(&f, &format!("after a {short:?} stop"), &before, &seen);
    let stalled = |lines: &[String]| -> f64 {
        lines.iter().find(|l| l.contains(r#"cause="Stalled""#)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
    };
    assert!(stalled(&gaps) > stalled(&gaps_before), "the stall is counted: {gaps_before:?} -> {gaps:?}");
    let log = f.log();
    let renewed: Vec<&str> = log.lines().filter(|l| l.contains("grace renewed for all clusters")).collect();
    assert!(!renewed.is_empty(), "the renewal is logged:\n{}", tail(&log));
    eprintln!("logged: {}", renewed.join("\n"));

    // The stop of the bug report: 20 s, past the Lease's renew deadline too, so the
    // scheduler also steps down and takes the Lease again.
    let long = Duration::from_secs(20);
    let (seen, watched) = stall(&f, long);
    eprintln!(
        "stopped {long:?}: watched {watched:?} after the continue, {} distinct state(s); observation gaps {:?}",
        seen.len(),
        observation_gaps(&f)
    );
    assert_nothing_moved(&f, &format!("after a {long:?} stop"), &before, &seen);

    // A cluster really lost after the stalls is still failed over within the grace.
    let on_east: Vec<String> =
        before.assignments.iter().filter(|a| a.contains(" east=")).map(|a| a.split(':').next().unwrap_or_default().to_string()).collect();
    let killed = Instant::now();
    east.kill9();
    for name in &on_east {
        wait_assignment(&f, name, |a| a == "west=1");
    }
    let moved = killed.elapsed();
    let rescheduled = events(&f, "Rescheduled");
    eprintln!("east killed: {} workload(s) on west after {moved:?} (grace {GRACE_SECS}s)\n{rescheduled}", on_east.len());
    assert!(moved < Duration::from_secs(GRACE_SECS as u64 + 6), "failover of a killed cluster took {moved:?}");
    assert_eq!(rescheduled.lines().filter(|l| l.contains("moved off east (NotReady)")).count(), on_east.len(), "{rescheduled}");
}
