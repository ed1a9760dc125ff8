//! The disruption brake, end to end through the real binary and kubectl: clusters lost
//! together in too large a share are not failed over until an operator confirms them
//! lost or they come back, and a single loss fails over as before.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::fleet::{assignment, events, fleet, sim, wait_assignment, FAST};
use common::{deployment, wait_until, Flotilla};

const READINESS: &str = r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#;
const PAUSED: &str = r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="FailoverPaused")].status} {end}"#;

fn assignments(f: &Flotilla, names: &[String]) -> BTreeMap<String, String> {
    names.iter().map(|n| (n.clone(), assignment(f, n))).collect()
}

fn metric(f: &Flotilla, name: &str) -> String {
    let text = f.raw("/metrics").stdout;
    text.lines().find(|l| l.starts_with(name)).map(|l| l.trim_start_matches(name).trim().to_string()).unwrap_or_default()
}

#[test]
fn two_of_three_clusters_lost_at_once_move_nothing_until_confirmed_lost_or_back() {
    let (mut east, mut west, mut north) = (sim("east", 4), sim("west", 4), sim("north", 4));
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[]), (&north, &[])]);
    let names: Vec<String> = (0..6).map(|i| format!("app{i}")).collect();
    for name in &names {
        f.apply(&["--context", "demo"], &deployment(name).cpu("100m").manifest());
    }
    for name in &names {
        wait_assignment(&f, name, |a| !a.is_empty());
    }
    let before = assignments(&f, &names);
    let on =
        |cluster: &str| before.iter().filter(|(_, a)| a.starts_with(&format!("{cluster}="))).map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let (on_east, on_west) = (on("east"), on("west"));
    assert!(!on_east.is_empty() && !on_west.is_empty(), "the workloads spread over east and west too: {before:?}");

    // east and west die together: 2 of 3 clusters, more than 55%.
    east.kill9();
    west.kill9();
    let killed = Instant::now();
    wait_until(
        "east and west to be declared lost",
        Duration::from_secs(20),
        || f.k(&["get", "st", "-o", READINESS]),
        |r| r.contains("east=False") && r.contains("west=False"),
    );
    // Nothing moves, for two graces after both were lost.
    while killed.elapsed() < Duration::from_secs(12) {
        assert_eq!(
            assignments(&f, &names),
            before,
            "{:.1?} after the kill, a workload moved\n{}",
            killed.elapsed(),
            common::tail(&f.log())
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // And it says so: on the clusters, the workloads, in Events, metrics and status.
    assert_eq!(f.k(&["get", "st", "-o", PAUSED]).trim(), "east=True north= west=True");
    let why = f.k(&["get", "st", "east", "-o", r#"jsonpath={.status.conditions[?(@.type=="FailoverPaused")].message}"#]);
    assert!(why.starts_with("2 of 3 clusters went NotReady within 4s of each other (east, west): "), "{why}");
    let held = &on_east[0];
    let condition =
        f.k(&["--context", "demo", "get", "wp", held, "-o", r#"jsonpath={.status.conditions[?(@.type=="FailoverPaused")].message}"#]);
    assert!(condition.starts_with("stays on east, which the disruption brake holds"), "{condition}");
    assert!(condition.ends_with("`flotilla cluster confirm-lost east` moves it if east is really gone"), "{condition}");
    let paused_events = events(&f, "FailoverPaused");
    assert!(paused_events.contains(&format!("{held}: stays on east")), "{paused_events}");
    assert_eq!(metric(&f, "flotilla_scheduler_disruption_brake_engaged"), "1");
    assert_eq!(metric(&f, "flotilla_scheduler_braked_clusters"), "2");
    let status = f.flotilla(&["status"]).stdout;
    assert!(status.contains("FAILOVER PAUSED for east, west (disruption brake)"), "{status}");

    // The operator confirms east is gone: its workloads move to north; west's stay.
    let confirmed = f.flotilla(&["cluster", "confirm-lost", "east"]);
    assert!(confirmed.ok && confirmed.stdout.contains("the disruption brake lets its workloads move"), "{confirmed:?}");
    for name in &on_east {
        wait_assignment(&f, name, |a| a == "north=1");
    }
    for name in &on_west {
        assert_eq!(assignment(&f, name), before[name], "{name} stays on west, which is still held");
    }
    assert!(f.flotilla(&["cluster", "confirm-lost", "north"]).stderr.contains("cluster north is Ready"));

    // west comes back: one lost cluster of three is no disruption, and the brake lets go.
    west.launch();
    wait_until("the brake to let go", Duration::from_secs(20), || metric(&f, "flotilla_scheduler_disruption_brake_engaged"), |m| m == "0");
    assert!(!f.flotilla(&["status"]).stdout.contains("FAILOVER PAUSED"));
    for name in &on_west {
        assert_eq!(assignment(&f, name), before[name], "{name} never left west");
        let paused =
            || f.k(&["--context", "demo", "get", "wp", name, "-o", r#"jsonpath={.status.conditions[?(@.type=="FailoverPaused")].status}"#]);
        wait_until(&format!("{name}'s FailoverPaused condition to go"), Duration::from_secs(20), paused, str::is_empty);
    }
    wait_until(
        "the SyncTargets' FailoverPaused conditions to go",
        Duration::from_secs(20),
        || f.k(&["get", "st", "-o", PAUSED]),
        |p| !p.contains("True"),
    );

    // Now a single loss: north fails over to west, as before the brake.
    let on_north: Vec<String> = names.iter().filter(|n| assignment(&f, n).starts_with("north=")).cloned().collect();
    north.kill9();
    for name in &on_north {
        wait_assignment(&f, name, |a| a == "west=1");
    }
    assert_eq!(metric(&f, "flotilla_scheduler_disruption_brake_engaged"), "0", "one of two Ready clusters lost is not a disruption");
}
