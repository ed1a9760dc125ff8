//! Placement that users shape, through the real binary and kubectl: spreading over a
//! cluster label with `maxSkew` and `minGroups`, static weights, and cluster taints
//! with Placement tolerations (a `NoExecute` taint moves what does not tolerate it at
//! once, and what tolerates it for `tolerationSeconds` when that time is up).

use crate::common;

use std::time::{Duration, Instant};

use common::fleet::{assignment, events, fleet, sim, wait_assignment, FAST};
use common::{deployment, wait_for, wait_until};

const SCHEDULED: &str =
    r#"jsonpath={.status.conditions[?(@.type=="Scheduled")].status} {.status.conditions[?(@.type=="Scheduled")].message}"#;

fn placed_with(f: &common::Flotilla, name: &str, replicas: i32, placement: &str) {
    f.apply(&["--context", "demo"], &deployment(name).replicas(replicas).cpu("100m").manifest());
    f.k(&["--context", "demo", "annotate", "deploy", name, &format!("scheduling.flotilla.io/placement={placement}")]);
}

/// Waits until `name`'s WorkloadPlacement says `Scheduled=False`, and returns the
/// condition's status and message.
fn unschedulable(f: &common::Flotilla, name: &str) -> String {
    wait_until(
        &format!("{name} reported unschedulable"),
        Duration::from_secs(20),
        || f.k(&["--context", "demo", "get", "wp", name, "-o", SCHEDULED]),
        |s| s.starts_with("False"),
    )
}

#[test]
fn a_spread_over_regions_and_static_weights_divide_as_asked() {
    let (east, west, mut eu) = (sim("east", 8), sim("west", 8), sim("eu", 2));
    let f = fleet(&FAST, &[(&east, &["region=us"]), (&west, &["region=us"]), (&eu, &["region=eu"])]);
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: regions}\n\
         spec: {numberOfClusters: 2, spreadConstraints: [{spreadByLabel: region, maxSkew: 1, minGroups: 2}]}\n---\n\
         apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: weighted}\n\
         spec: {numberOfClusters: 2, weights: [{clusterNames: [east], weight: 1}, {clusterNames: [west], weight: 3}]}\n",
    );
    // A skew of 0 is refused by the API, as the schema says.
    let bad = f.kubectl_stdin(
        &["--context", "demo", "apply", "-f", "-"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: bad}\n\
         spec: {spreadConstraints: [{spreadByLabel: region, maxSkew: 0}]}\n",
    );
    assert!(!bad.ok && bad.stderr.contains("maxSkew"), "{bad:?}");

    // By room alone, 6 replicas over east (16 fit) and eu (4 fit) would split 5 and 1;
    // the spread puts one cluster in each region, and the skew evens them to 3 and 3.
    placed_with(&f, "spread", 6, "regions");
    let spread = wait_assignment(&f, "spread", |a| a.contains("eu=3") && (a.contains("east=3") || a.contains("west=3")));
    // Weights 1 and 3: 1 and 3 of 4, whatever the room says.
    placed_with(&f, "heavy", 4, "weighted");
    wait_assignment(&f, "heavy", |a| a == "east=1 west=3");

    // explain says what shaped the decision.
    let explained = f.flotilla(&["explain", "deploy/spread"]);
    assert!(explained.ok, "{explained:?}");
    assert!(explained.stdout.contains("spread over label region, maxSkew 1, minGroups 2"), "{}", explained.stdout);
    assert!(explained.stdout.contains(&format!("decision: {spread} (the same as assigned now)")), "{}", explained.stdout);
    let explained = f.flotilla(&["explain", "deploy/heavy"]);
    let header = explained.stdout.lines().find(|l| l.starts_with("CLUSTER")).unwrap_or_default().to_string();
    assert!(header.contains("WEIGHT"), "{}", explained.stdout);
    let eu_row = explained.stdout.lines().find(|l| l.starts_with("eu ")).unwrap_or_default().to_string();
    assert!(eu_row.contains("Unweighted"), "{}", explained.stdout);

    // eu is lost: the only cluster in its region. minGroups 2 cannot be met elsewhere,
    // so the workload is not moved onto us alone; it stays, and says why.
    eu.kill9();
    let why = unschedulable(&f, "spread");
    assert!(why.contains("with 1 value(s) of label region (2 needed by minGroups): 1 NotReady"), "{why}");
    assert_eq!(assignment(&f, "spread"), spread, "a workload is never taken off a cluster because nothing else fits");
    let failed = events(&f, "FailedScheduling");
    assert!(failed.contains("spread: ") && failed.contains("minGroups"), "{failed}");
}

#[test]
fn a_no_execute_taint_moves_what_does_not_tolerate_it_and_what_tolerates_it_for_a_time_when_that_is_up() {
    let (east, west) = (sim("east", 4), sim("west", 4));
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: patient}\n\
         spec: {clusterTolerations: [{key: maint, operator: Exists, effect: NoExecute, tolerationSeconds: 4}]}\n---\n\
         apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: forever}\n\
         spec: {clusterTolerations: [{key: maint, operator: Exists}]}\n",
    );
    // Everything starts on east.
    assert!(f.flotilla(&["cluster", "cordon", "west"]).ok);
    placed_with(&f, "plain", 1, "default");
    placed_with(&f, "patient", 1, "patient");
    placed_with(&f, "forever", 1, "forever");
    for name in ["plain", "patient", "forever"] {
        wait_assignment(&f, name, |a| a == "east=1");
    }
    assert!(f.flotilla(&["cluster", "uncordon", "west"]).ok);

    let tainted = f.flotilla(&["cluster", "taint", "east", "maint:NoExecute"]);
    assert!(tainted.ok, "{tainted:?}");
    assert_eq!(tainted.stdout.trim(), "cluster east: maint:NoExecute added");
    let at = Instant::now();
    let added = f.k(&["get", "st", "east", "-o", "jsonpath={.spec.taints[0].timeAdded}"]);
    assert!(!added.is_empty(), "the CLI stamps a NoExecute taint with timeAdded");

    // What does not tolerate it moves at once.
    wait_assignment(&f, "plain", |a| a == "west=1");
    let plain_moved = at.elapsed();
    assert!(plain_moved < Duration::from_secs(3), "plain moved {plain_moved:?} after the taint");
    // What tolerates it for 4 s stays that long, then moves.
    let patient_moved = wait_for("patient to move", Duration::from_secs(15), || {
        let a = assignment(&f, "patient");
        match a.as_str() {
            "west=1" => Ok(at.elapsed()),
            "east=1" => Err(format!("still {a} at {:.1?}", at.elapsed())),
            other => panic!("patient went to {other}"),
        }
    });
    // timeAdded has whole-second precision and is stamped up to a second before `at`.
    assert!(patient_moved >= Duration::from_secs(3), "patient moved {patient_moved:?} after the taint, before its 4 s");
    assert!(patient_moved < Duration::from_secs(7), "patient moved {patient_moved:?} after the taint");
    // What tolerates it for ever stays.
    assert_eq!(assignment(&f, "forever"), "east=1");
    let moved = events(&f, "Rescheduled");
    assert!(moved.contains("plain: moved off east (NoExecute taint); now on west=1"), "{moved}");

    // NoSchedule keeps new workloads away and lets running ones stay.
    assert!(f.flotilla(&["cluster", "taint", "east", "maint-", "gpu=true:NoSchedule"]).ok);
    wait_until(
        "east's taints",
        Duration::from_secs(5),
        || f.k(&["get", "st", "east", "-o", "jsonpath={.spec.taints[*].key}"]),
        |t| t == "gpu",
    );
    assert!(f.flotilla(&["cluster", "cordon", "west"]).ok);
    placed_with(&f, "fresh", 1, "default");
    let why = unschedulable(&f, "fresh");
    assert!(why.contains("0/2 clusters fit: 1 Cordoned, 1 Tainted"), "{why}");
    let explained = f.flotilla(&["explain", "deploy/fresh"]);
    assert!(explained.stdout.contains("Tainted (gpu=true:NoSchedule)"), "{}", explained.stdout);
    assert!(f.flotilla(&["cluster", "uncordon", "west"]).ok);
    wait_assignment(&f, "fresh", |a| a == "west=1");
    assert_eq!(assignment(&f, "forever"), "east=1", "a NoSchedule taint lets what runs there stay");
    let bad = f.flotilla(&["cluster", "taint", "east", "gpu:Sometimes"]);
    assert!(!bad.ok && bad.stderr.contains("invalid taint effect \"Sometimes\""), "{bad:?}");
}
