//! `flotilla explain` and `flotilla what-if` through the real binary: what they print
//! is what the scheduler then does.

use crate::common;

use std::time::Duration;

use common::fleet::{assignment, fleet, sim, wait_assignment, FAST};
use common::{deployment, wait_until};

const READINESS: &str = r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#;

/// The `a -> b` of one workload in what-if's output.
fn predicted(out: &str, workload: &str) -> String {
    let prefix = format!("demo/default/{workload}: ");
    out.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no line for {workload} in:\n{out}")).to_string()
}

#[test]
fn explain_and_what_if_say_what_the_scheduler_then_does() {
    let (mut east, west, north) = (sim("east", 8), sim("west", 4), sim("north", 2));
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[]), (&north, &[])]);
    f.apply(&["--context", "demo"], &deployment("web").replicas(2).cpu("500m").manifest());
    // Two nodes of 8, 4 and 2 cores: big (10 cores) fits on east alone.
    f.apply(&["--context", "demo"], &deployment("big").replicas(5).cpu("2").manifest());
    let web = wait_assignment(&f, "web", |a| !a.is_empty());
    let big = wait_assignment(&f, "big", |a| !a.is_empty());
    assert_eq!((web.as_str(), big.as_str()), ("east=2", "east=5"), "both go to the roomiest cluster");

    let explained = f.flotilla(&["explain", "deploy/web"]);
    assert!(explained.ok, "{explained:?}");
    let out = explained.stdout;
    assert!(out.contains("deploy/web in namespace default of workspace demo: 2 replica(s) of 500m cpu"), "{out}");
    assert!(out.contains("Placement default (the workspace default): up to 1 cluster(s), Divide, over every cluster"), "{out}");
    assert!(out.contains("decision: east=2 (the same as assigned now)"), "{out}");
    let row = |name: &str| {
        out.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no row for {name}:\n{out}")).to_string()
    };
    let cells = |name: &str| row(name).split_whitespace().map(str::to_string).collect::<Vec<_>>();
    // CLUSTER CANDIDATE [WHY NOT] FREE CPU FREE MEMORY FREE PODS FITS RANK SHARE
    assert_eq!(cells("east")[1], "yes");
    assert_eq!(cells("east").last().map(String::as_str), Some("2"), "{}", row("east"));
    assert_eq!(cells("east")[cells("east").len() - 2], "1", "east, where it runs, ranks first: {}", row("east"));
    assert_eq!(cells("west").last().map(String::as_str), Some("-"), "{}", row("west"));

    // Two of three lost at once: the brake would hold.
    let both = f.flotilla(&["what-if", "--lose", "east,west"]);
    assert!(both.ok && both.stdout.contains("the disruption brake would hold: 2 of 3 Ready clusters lost at once"), "{both:?}");
    assert_eq!(predicted(&both.stdout, "web"), "stays on east=2 (the disruption brake holds its cluster)");

    // east alone lost: web goes to the roomiest of the others; big fits nowhere.
    let lose = f.flotilla(&["what-if", "--lose", "east"]);
    assert!(lose.ok, "{lose:?}");
    assert_eq!(predicted(&lose.stdout, "web"), "east=2 -> west=2");
    let big_prediction = predicted(&lose.stdout, "big");
    assert!(big_prediction.starts_with("stays on east=5: nothing fits: 0/3 clusters fit"), "{big_prediction}");
    assert!(lose.stdout.contains("2 workload(s) affected: 1 would move, 1 would stay"), "{}", lose.stdout);
    assert_eq!(assignment(&f, "web"), "east=2", "what-if changes nothing");

    // Now east is lost for real, and the scheduler does what was predicted.
    east.kill9();
    wait_until("east to be lost", Duration::from_secs(20), || f.k(&["get", "st", "-o", READINESS]), |r| r.contains("east=False"));
    assert_eq!(wait_assignment(&f, "web", |a| a != "east=2"), "west=2");
    assert_eq!(assignment(&f, "big"), "east=5", "big stays where it was, as predicted");
    let after = f.flotilla(&["explain", "deploy/big"]).stdout;
    assert!(after.contains("decision: nothing fits: 0/3 clusters fit"), "{after}");
    let east_row = after.lines().find(|l| l.starts_with("east ")).unwrap_or_default();
    assert!(east_row.contains(" no ") && east_row.contains("NotReady"), "{east_row}");
}
