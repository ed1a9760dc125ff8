//! Opt-in rebalancing after a recovery, through the real binary and kubectl: a
//! workload left on fewer clusters than its Placement asks for spreads again once a
//! returned cluster has been Ready for `rebalance.afterReady`, make-before-break, and
//! never under a Placement that does not opt in.

use crate::common;

use std::time::{Duration, Instant};

use common::fleet::{assignment, events, fleet, sim, wait_assignment, Killed, FAST};
use common::{deployment, wait_until};

const READINESS: &str = r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#;

#[test]
fn a_short_spread_widens_after_the_window_only_where_the_placement_opts_in() {
    let (mut east, west) = (sim("east", 4), sim("west", 4));
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    f.apply(
        &["--context", "demo"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: rebalancing}\n\
         spec: {numberOfClusters: 2, replicaScheduling: Divide, rebalance: {afterReady: 3s}}\n---\n\
         apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: sticky}\n\
         spec: {numberOfClusters: 2, replicaScheduling: Divide}\n",
    );
    // A malformed window is refused by the API, as the schema says.
    let bad = f.kubectl_stdin(
        &["--context", "demo", "apply", "-f", "-"],
        "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: bad}\nspec: {rebalance: {afterReady: soon}}\n",
    );
    assert!(!bad.ok && bad.stderr.contains("afterReady"), "{bad:?}");
    for (name, placement) in [("web", "rebalancing"), ("still", "sticky")] {
        f.apply(&["--context", "demo"], &deployment(name).replicas(4).cpu("100m").manifest());
        f.k(&["--context", "demo", "annotate", "deploy", name, &format!("scheduling.flotilla.io/placement={placement}")]);
        wait_assignment(&f, name, |a| a.contains("east=") && a.contains("west="));
    }

    // east is lost: both run all 4 on west, short of the two clusters asked for.
    east.kill9();
    for name in ["web", "still"] {
        wait_assignment(&f, name, |a| a == "west=4");
    }
    let short = f.k(&["--context", "demo", "get", "wp", "web", "-o", r#"jsonpath={.status.conditions[?(@.type=="Scheduled")].reason}"#]);
    assert_eq!(short, "FewerClusters");
    assert!(events(&f, "FewerClusters").contains("web: placed by Placement rebalancing"), "{}", events(&f, "FewerClusters"));

    // east returns. Watch web's available count through the rebalance, once it runs
    // whole on west.
    common::fleet::rollout(&f, "web");
    let seen = f.data_dir().join("available.txt");
    let watch = Killed(f.kubectl_background(
        &["--context", "demo", "get", "deploy", "web", "-w", "-o", "jsonpath={.status.availableReplicas}{\"\\n\"}"],
        &seen,
    ));
    east.launch();
    wait_until("east Ready again", Duration::from_secs(20), || f.k(&["get", "st", "-o", READINESS]), |r| r.contains("east=True"));
    let ready = Instant::now();
    // Not before the window: web stays on west alone for the first 2 s at least.
    while ready.elapsed() < Duration::from_secs(2) {
        assert_eq!(assignment(&f, "web"), "west=4", "{:.1?} after east was Ready", ready.elapsed());
        std::thread::sleep(Duration::from_millis(250));
    }
    let spread = wait_assignment(&f, "web", |a| a.contains("east=") && a.contains("west=") && !a.contains("west=4"));
    let took = ready.elapsed();
    assert!(took >= Duration::from_millis(2500), "web spread again {took:?} after east was Ready, before the 3 s window");
    common::fleet::rollout(&f, "web");
    std::thread::sleep(Duration::from_secs(1));
    drop(watch);
    let counts: Vec<String> = std::fs::read_to_string(&seen).unwrap().lines().map(str::to_string).collect();
    assert!(counts.len() > 1, "the watch saw the rebalance: {counts:?}");
    assert!(counts.iter().all(|c| c.parse::<u32>().is_ok_and(|n| n >= 4)), "web's available count stayed at 4 or more: {counts:?}");
    // Make-before-break: east's share was added while west kept its 4.
    let rebalanced = wait_until(
        "both Rebalanced Events",
        Duration::from_secs(10),
        || events(&f, "Rebalanced"),
        |e| {
            e.contains("web: spreading again as Placement rebalancing rebalances: adding east=")
                && e.contains(&format!("web: now on {spread} (Placement rebalancing rebalanced)"))
        },
    );

    // The Placement that does not opt in keeps its workload where it runs.
    assert_eq!(assignment(&f, "still"), "west=4", "the sticky Placement does not rebalance");
    assert!(!rebalanced.contains("still:"), "{rebalanced}");
}
