use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

const GI: u64 = 1 << 30;

/// A Ready cluster with `cpu` cores and `mem` GiB free on one node per core pair.
fn cluster(name: &str, cpu: u64, mem: u64) -> Cluster {
    Cluster {
        name: name.into(),
        labels: Arc::new(BTreeMap::from([("region".to_string(), if name.starts_with("eu") { "eu" } else { "us" }.to_string())])),
        ready: true,
        braked: false,
        cordoned: false,
        draining: false,
        available: Resources::new(cpu * 1000, mem * GI, 110),
        headroom: vec![Resources::new(cpu * 1000, mem * GI, 110)],
        nodes: 0,
        taints: Arc::new(Vec::new()),
    }
}

/// One replica: half a core and 1 GiB.
fn workload(replicas: u32) -> Workload {
    Workload { replicas, per_replica: Resources::new(500, GI, 1), per_node: false }
}

fn divide_on(n: u32) -> (LabelSelector, u32, ReplicaScheduling) {
    (LabelSelector::default(), n, ReplicaScheduling::Divide)
}

fn run(clusters: &[Cluster], w: Workload, rule: (LabelSelector, u32, ReplicaScheduling), current: &[Share]) -> Result<Vec<Share>, NoFit> {
    decide(clusters, &w, &Rule::plain(&rule.0, rule.1, rule.2), current)
}

fn place_on(
    clusters: &[Cluster],
    w: Workload,
    rule: (LabelSelector, u32, ReplicaScheduling),
    current: &[Share],
    may_spread: bool,
) -> Result<Decision, NoFit> {
    place(clusters, &w, &Rule::plain(&rule.0, rule.1, rule.2), current, may_spread)
}

fn shares(pairs: &[(&str, u32)]) -> Vec<Share> {
    pairs.iter().map(|(c, n)| Share::new(c, *n)).collect()
}

#[test]
fn a_new_workload_goes_to_the_roomiest_cluster() {
    let fleet = [cluster("us-east", 4, 8), cluster("us-west", 8, 16), cluster("eu-1", 2, 4)];
    assert_eq!(run(&fleet, workload(3), divide_on(1), &[]), Ok(shares(&[("us-west", 3)])));
}

#[test]
fn ties_go_to_the_name_and_input_order_does_not_matter() {
    let a = [cluster("b", 4, 8), cluster("a", 4, 8), cluster("c", 4, 8)];
    let mut b = a.clone();
    b.reverse();
    assert_eq!(run(&a, workload(1), divide_on(1), &[]), Ok(shares(&[("a", 1)])));
    assert_eq!(run(&a, workload(1), divide_on(1), &[]), run(&b, workload(1), divide_on(1), &[]));
}

#[test]
fn divide_splits_in_proportion_to_room_with_remainders_to_the_roomiest() {
    // Room for 16 and 8 replicas (cpu-bound): 6 replicas split 4:2.
    let fleet = [cluster("big", 8, 64), cluster("small", 4, 64)];
    assert_eq!(run(&fleet, workload(6), divide_on(2), &[]), Ok(shares(&[("big", 4), ("small", 2)])));
    // 5 replicas: 3.33 and 1.67 round down to 3 and 1; the remainder goes to the roomiest.
    assert_eq!(run(&fleet, workload(5), divide_on(2), &[]), Ok(shares(&[("big", 4), ("small", 1)])));
    assert_eq!(divide(5, &[10, 10, 10]), vec![2, 2, 1]);
    assert_eq!(divide(0, &[3, 3]), vec![0, 0]);
    // Every chosen cluster runs a replica, however small its room beside the others'.
    assert_eq!(divide(3, &[1, 100]), vec![1, 2]);
    assert_eq!(divide(12, &[4, 128]), vec![1, 11]);
    // Fewer replicas than clusters: one each to the roomiest.
    assert_eq!(divide(2, &[5, 9, 7]), vec![0, 1, 1]);
    // A share never exceeds its room, even when the proportion rounds up past it.
    assert_eq!(divide(4, &[1, 1, 2]), vec![1, 1, 2]);
}

#[test]
fn duplicate_runs_every_replica_on_each_cluster() {
    let fleet = [cluster("a", 4, 8), cluster("b", 4, 8), cluster("c", 1, 8)];
    let rule = (LabelSelector::default(), 2, ReplicaScheduling::Duplicate);
    assert_eq!(run(&fleet, workload(3), rule.clone(), &[]), Ok(shares(&[("a", 3), ("b", 3)])));
    // c has room for 2 replicas only, so it cannot be one of three duplicates: the
    // workload runs on the two that can, and the answer says why not three.
    let rule3 = (LabelSelector::default(), 3, ReplicaScheduling::Duplicate);
    let d = place_on(&fleet, workload(3), rule3, &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("a", 3), ("b", 3)]));
    assert_eq!(d.fewer.unwrap().to_string(), "2/3 clusters fit (3 needed): 1 Insufficient cpu");
}

#[test]
fn the_selector_filters_clusters() {
    let fleet = [cluster("us-east", 4, 8), cluster("us-west", 8, 16), cluster("eu-1", 16, 32)];
    let eu = LabelSelector { match_labels: Some(BTreeMap::from([("region".into(), "eu".into())])), ..Default::default() };
    assert_eq!(run(&fleet, workload(1), (eu.clone(), 1, ReplicaScheduling::Divide), &[]), Ok(shares(&[("eu-1", 1)])));
    let d = place_on(&fleet, workload(1), (eu, 2, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(
        (d.shares, d.fewer.unwrap().to_string()),
        (shares(&[("eu-1", 1)]), "1/3 clusters fit (2 needed): 2 NotSelected".to_string())
    );
}

#[test]
fn a_malformed_selector_is_reported_not_matched() {
    let bad = LabelSelector {
        match_expressions: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
            key: "region".into(),
            operator: "Equals".into(),
            values: Some(vec!["us".into()]),
        }]),
        ..Default::default()
    };
    let err = run(&[cluster("a", 4, 8)], workload(1), (bad, 1, ReplicaScheduling::Divide), &[]).unwrap_err();
    assert!(
        err.to_string().starts_with("the Placement's clusterSelector is invalid: \"Equals\" is not a valid label selector operator"),
        "{err}"
    );
}

#[test]
fn no_fit_counts_every_reason_like_kube_scheduler() {
    let mut down = cluster("a", 16, 64);
    down.ready = false;
    let mut cordoned = cluster("b", 16, 64);
    cordoned.cordoned = true;
    let mut draining = cluster("c", 16, 64);
    draining.draining = true;
    let small_cpu = cluster("d", 1, 64);
    let small_mem = cluster("e", 16, 1);
    let mut full = cluster("f", 16, 64);
    full.available.pods = 0;
    let fleet = [down, cordoned, draining, small_cpu, small_mem, full];
    let err = run(&fleet, workload(4), divide_on(1), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/6 clusters fit: 1 Cordoned, 1 Draining, 1 Insufficient cpu, 1 Insufficient memory, 1 Insufficient pods, 1 NotReady"
    );
    assert_eq!(run(&[], workload(1), divide_on(1), &[]).unwrap_err().to_string(), "0/0 clusters fit: no clusters are registered");
}

#[test]
fn divide_that_no_set_of_clusters_can_hold_says_how_much_they_hold() {
    // Each cluster holds 8 replicas; two of them hold 16 of the 20 asked for.
    let fleet = [cluster("a", 4, 64), cluster("b", 4, 64), cluster("c", 4, 64)];
    let err = run(&fleet, workload(20), divide_on(2), &[]).unwrap_err();
    assert_eq!(err.to_string(), "0/3 clusters fit (2 needed): 3 Insufficient cpu; the roomiest 2 hold 16 of 20 replicas");
    // On one cluster, 9 replicas of a workload that fits 8 per cluster: Insufficient cpu.
    let err = run(&fleet, workload(9), divide_on(1), &[]).unwrap_err();
    assert_eq!(err.to_string(), "0/3 clusters fit: 3 Insufficient cpu");
}

#[test]
fn a_replica_must_fit_on_one_node() {
    // 4 cores free in total, but on four 1-core nodes: a 2-core replica fits nowhere.
    let mut fragmented = cluster("frag", 4, 64);
    fragmented.headroom = vec![Resources::new(1000, 16 * GI, 110)];
    let w = Workload { replicas: 1, per_replica: Resources::new(2000, GI, 1), per_node: false };
    let err = run(&[fragmented.clone()], w, divide_on(1), &[]).unwrap_err();
    assert_eq!(err.to_string(), "0/1 clusters fit: 1 NoNodeFits");
    // Without per-node figures only the total is checked.
    fragmented.headroom.clear();
    assert_eq!(run(&[fragmented], w, divide_on(1), &[]), Ok(shares(&[("frag", 1)])));
}

#[test]
fn adding_a_cluster_moves_nothing() {
    let before = [cluster("a", 2, 8)];
    let placed = run(&before, workload(2), divide_on(1), &[]).unwrap();
    let after = [cluster("a", 1, 8), cluster("b", 64, 256)];
    assert_eq!(run(&after, workload(2), divide_on(1), &placed), Ok(placed));
}

#[test]
fn a_stable_assignment_is_kept_as_room_changes() {
    // Divide 4 over two clusters; later the rooms change: the split stays.
    let current = shares(&[("a", 3), ("b", 1)]);
    let fleet = [cluster("a", 1, 8), cluster("b", 30, 64)];
    assert_eq!(run(&fleet, workload(4), divide_on(2), &current), Ok(current));
}

#[test]
fn scaling_redivides_without_moving_clusters_that_still_fit() {
    let current = shares(&[("a", 2), ("b", 2)]);
    let fleet = [cluster("a", 1, 64), cluster("b", 1, 64), cluster("c", 64, 256)];
    // Scale 4 → 8: a and b each hold 4 (their 2 plus room for 2 more), so nothing moves.
    assert_eq!(run(&fleet, workload(8), divide_on(2), &current), Ok(shares(&[("a", 4), ("b", 4)])));
    // Scale to 12: a and b hold 8 together, so the roomiest two (c, then a by name)
    // take it: one each, and the rest in proportion to the room left (c 127, a 3).
    assert_eq!(run(&fleet, workload(12), divide_on(2), &current), Ok(shares(&[("a", 1), ("c", 11)])));
}

#[test]
fn an_empty_share_is_filled_once_there_are_replicas_for_it() {
    let fleet = [cluster("a", 1, 64), cluster("b", 64, 256)];
    // An older split in proportion alone left a with nothing.
    let empty = shares(&[("a", 0), ("b", 3)]);
    assert_eq!(run(&fleet, workload(3), divide_on(2), &empty), Ok(shares(&[("a", 1), ("b", 2)])));
    // One replica over two clusters: the roomiest runs it, the other is not chosen
    // (an empty share is no share), and the split is kept.
    let one = run(&fleet, workload(1), divide_on(2), &[]).unwrap();
    assert_eq!(one, shares(&[("b", 1)]));
    assert_eq!(run(&fleet, workload(1), divide_on(2), &one), Ok(one));
    // Nor is one kept from an older split once there are replicas for every cluster:
    // a gets one when the workload grows to two.
    assert_eq!(run(&fleet, workload(2), divide_on(2), &shares(&[("b", 1)])), Ok(shares(&[("a", 1), ("b", 1)])));
}

#[test]
fn a_lost_cluster_is_replaced_and_the_survivor_stays() {
    let mut fleet = [cluster("a", 4, 8), cluster("b", 4, 8), cluster("c", 2, 8)];
    let current = shares(&[("a", 2), ("b", 2)]);
    fleet[0].ready = false;
    // b stays; c replaces a; the replicas are divided over b and c by room (8 and 4).
    assert_eq!(run(&fleet, workload(4), divide_on(2), &current), Ok(shares(&[("b", 3), ("c", 1)])));
}

#[test]
fn when_nothing_replaces_a_lost_cluster_the_answer_is_no_fit() {
    let mut fleet = [cluster("a", 4, 8), cluster("b", 0, 8)];
    fleet[0].ready = false;
    let err = run(&fleet, workload(2), divide_on(1), &shares(&[("a", 2)])).unwrap_err();
    assert_eq!(err.to_string(), "0/2 clusters fit: 1 Insufficient cpu, 1 NotReady");
}

#[test]
fn cordon_keeps_what_runs_but_takes_nothing_new() {
    let mut fleet = [cluster("a", 8, 64), cluster("b", 2, 64)];
    fleet[0].cordoned = true;
    // Running on a: it stays.
    assert_eq!(run(&fleet, workload(2), divide_on(1), &shares(&[("a", 2)])), Ok(shares(&[("a", 2)])));
    // New: b, although a has more room.
    assert_eq!(run(&fleet, workload(2), divide_on(1), &[]), Ok(shares(&[("b", 2)])));
    // Growing on a cordoned cluster moves the workload to one that takes it.
    assert_eq!(run(&fleet, workload(4), divide_on(1), &shares(&[("a", 2)])), Ok(shares(&[("b", 4)])));
}

#[test]
fn draining_moves_everything_that_can_move() {
    let mut fleet = [cluster("a", 8, 64), cluster("b", 4, 64)];
    fleet[0].draining = true;
    assert_eq!(run(&fleet, workload(2), divide_on(1), &shares(&[("a", 2)])), Ok(shares(&[("b", 2)])));
    let err = run(&fleet, workload(9), divide_on(1), &shares(&[("a", 9)])).unwrap_err();
    assert_eq!(err.to_string(), "0/2 clusters fit: 1 Draining, 1 Insufficient cpu");
}

#[test]
fn a_cluster_that_stops_matching_loses_the_workload() {
    let fleet = [cluster("us-east", 4, 8), cluster("eu-1", 4, 8)];
    let eu = LabelSelector { match_labels: Some(BTreeMap::from([("region".into(), "eu".into())])), ..Default::default() };
    let got = run(&fleet, workload(1), (eu, 1, ReplicaScheduling::Divide), &shares(&[("us-east", 1)]));
    assert_eq!(got, Ok(shares(&[("eu-1", 1)])));
}

#[test]
fn fewer_clusters_asked_for_keeps_the_roomiest_current_ones() {
    let fleet = [cluster("a", 2, 8), cluster("b", 8, 8), cluster("c", 4, 8)];
    let current = shares(&[("a", 1), ("b", 1), ("c", 1)]);
    assert_eq!(run(&fleet, workload(3), divide_on(2), &current), Ok(shares(&[("b", 2), ("c", 1)])));
}

#[test]
fn zero_replicas_still_choose_clusters() {
    let fleet = [cluster("a", 0, 0), cluster("b", 1, 1)];
    assert_eq!(run(&fleet, workload(0), divide_on(1), &[]), Ok(shares(&[("b", 0)])));
}

#[test]
fn room_names_the_resource_that_runs_out_first() {
    let per = Resources::new(500, GI, 1);
    assert_eq!(room(Resources::new(4000, 2 * GI, 110), per), (2, Resource::Memory));
    assert_eq!(room(Resources::new(1000, 8 * GI, 110), per), (2, Resource::Cpu));
    assert_eq!(room(Resources::new(8000, 8 * GI, 1), per), (1, Resource::Pods));
    // A replica with no requests still takes a pod slot.
    assert_eq!(room(Resources::new(0, 0, 7), Resources::ZERO), (7, Resource::Pods));
}

#[test]
fn number_of_clusters_is_the_most_to_use_not_a_condition_for_running() {
    // Two clusters asked for, 4 replicas divided 1 and 3; the cluster with 1 is lost
    // and no third one fits: the survivor, with room for all 4, runs them all.
    let mut fleet = [cluster("east", 4, 8), cluster("west", 4, 8), cluster("north", 0, 8)];
    fleet[0].ready = false;
    let current = shares(&[("east", 1), ("west", 3)]);
    let d = place_on(&fleet, workload(4), divide_on(2), &current, false).unwrap();
    assert_eq!(d.shares, shares(&[("west", 4)]));
    assert_eq!(d.fewer.unwrap().to_string(), "1/3 clusters fit (2 needed): 1 Insufficient cpu, 1 NotReady");
    // east returns: by default the workload stays where it runs (sticky); a rebalance
    // that allows spreading divides it over two again.
    fleet[0].ready = true;
    let stay = place_on(&fleet, workload(4), divide_on(2), &d.shares, false).unwrap();
    assert_eq!((stay.shares, stay.fewer, stay.short), (shares(&[("west", 4)]), None, true), "still short, though more fit now");
    let spread = place_on(&fleet, workload(4), divide_on(2), &d.shares, true).unwrap();
    assert_eq!(spread.shares, shares(&[("east", 1), ("west", 3)]), "in proportion to room: west counts its own 4");
    // A lost cluster among those asked for is still replaced when another fits.
    fleet[2] = cluster("north", 4, 8);
    fleet[0].ready = false;
    let replaced = place_on(&fleet, workload(4), divide_on(2), &current, false).unwrap();
    assert_eq!((replaced.shares, replaced.fewer, replaced.short), (shares(&[("north", 1), ("west", 3)]), None, false));
    // With nowhere at all, it is no fit, and the caller keeps it where it was.
    assert!(place_on(&[fleet[0].clone()], workload(4), divide_on(2), &current, false).is_err());
}

#[test]
fn a_braked_cluster_keeps_what_it_runs_and_takes_nothing_new() {
    let mut fleet = [cluster("east", 4, 8), cluster("west", 4, 8)];
    fleet[0].ready = false;
    fleet[0].braked = true;
    let on_east = shares(&[("east", 2)]);
    assert_eq!(run(&fleet, workload(2), divide_on(1), &on_east), Ok(on_east.clone()), "the workload stays on the braked cluster");
    assert_eq!(run(&fleet, workload(2), divide_on(1), &[]), Ok(shares(&[("west", 2)])), "a new workload goes elsewhere");
    // Growing does not put more on it: the extra replica goes where there is room.
    let spread = shares(&[("east", 1), ("west", 1)]);
    assert_eq!(run(&fleet, workload(3), divide_on(2), &spread), Ok(shares(&[("east", 1), ("west", 2)])));
    // Without the brake, the same cluster is left.
    fleet[0].braked = false;
    assert_eq!(run(&fleet, workload(2), divide_on(1), &on_east), Ok(shares(&[("west", 2)])));
}

/// A Divide rule over every cluster with these spread constraints, tolerations and weights.
struct Shaped {
    selector: LabelSelector,
    spread: Vec<SpreadConstraint>,
    tolerations: Vec<ClusterToleration>,
    weights: Vec<ClusterWeight>,
}

impl Shaped {
    fn new() -> Self {
        Shaped { selector: LabelSelector::default(), spread: Vec::new(), tolerations: Vec::new(), weights: Vec::new() }
    }
    fn spread(mut self, label: &str, max_skew: Option<i32>, min_groups: Option<i32>) -> Self {
        self.spread.push(SpreadConstraint { spread_by_label: label.into(), max_skew, min_groups });
        self
    }
    fn tolerate(mut self, key: &str, effect: Option<TaintEffect>, seconds: Option<i64>) -> Self {
        self.tolerations.push(ClusterToleration {
            key: Some(key.into()),
            operator: Some(TolerationOperator::Exists),
            effect,
            toleration_seconds: seconds,
            ..Default::default()
        });
        self
    }
    fn weight(mut self, names: &[&str], weight: i64) -> Self {
        self.weights.push(ClusterWeight { cluster_names: names.iter().map(|n| n.to_string()).collect(), cluster_selector: None, weight });
        self
    }
    fn rule(&self, clusters: u32, mode: ReplicaScheduling) -> Rule<'_> {
        Rule {
            cluster_selector: &self.selector,
            clusters,
            mode,
            spread: &self.spread,
            tolerations: &self.tolerations,
            weights: &self.weights,
        }
    }
}

fn tainted(mut c: Cluster, key: &str, effect: TaintEffect, age_secs: u64) -> Cluster {
    Arc::make_mut(&mut c.taints).push(Taint { key: key.into(), value: None, effect, age: Duration::from_secs(age_secs) });
    c
}

fn why_not(rows: &[Considered], cluster: &str) -> Option<Reason> {
    rows.iter().find(|r| r.cluster == cluster).and_then(|r| r.turned_away)
}

#[test]
fn a_spread_constraint_takes_one_cluster_per_group_before_a_second_in_any() {
    // us-east and us-west are the roomiest, but the second cluster comes from eu.
    let fleet = [cluster("us-east", 8, 64), cluster("us-west", 8, 64), cluster("eu-1", 2, 64), cluster("eu-2", 1, 64)];
    let shaped = Shaped::new().spread("region", None, None);
    let d = place(&fleet, &workload(6), &shaped.rule(2, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("eu-1", 1), ("us-east", 5)]));
    // Three clusters: one from each region, then the roomiest left.
    let d = place(&fleet, &workload(6), &shaped.rule(3, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares.iter().map(|s| s.cluster.as_str()).collect::<Vec<_>>(), ["eu-1", "us-east", "us-west"]);
}

#[test]
fn max_skew_evens_the_replicas_between_groups_within_room() {
    let fleet = [cluster("us-east", 8, 64), cluster("us-west", 8, 64), cluster("eu-1", 2, 64)];
    // By room alone the split is 5 and 1; a skew of 1 makes it 3 and 3.
    let shaped = Shaped::new().spread("region", Some(1), None);
    let d = place(&fleet, &workload(6), &shaped.rule(2, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("eu-1", 3), ("us-east", 3)]));
    // Two in us and one in eu: us 4 (2+2) against eu 2 is a skew of 2; evened to 3 and 3
    // within us too (the cluster with most gives).
    let d = place(&fleet, &workload(6), &shaped.rule(3, ReplicaScheduling::Divide), &[], true).unwrap();
    let sum = |region: &str| d.shares.iter().filter(|s| s.cluster.starts_with(region)).map(|s| s.replicas).sum::<u32>();
    assert_eq!((sum("us"), sum("eu")), (3, 3), "{:?}", d.shares);
    // eu-1 holds 4 replicas (2 cores): 10 replicas cannot be within a skew of 1.
    let err = place(&fleet, &workload(10), &shaped.rule(2, ReplicaScheduling::Divide), &[], true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the replicas cannot be divided over the values of label region within maxSkew 1: the clusters with region=eu have no room for more"
    );
    // A larger skew allows it: eu 4, us 6.
    let loose = Shaped::new().spread("region", Some(2), None);
    let d = place(&fleet, &workload(10), &loose.rule(2, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("eu-1", 4), ("us-east", 6)]));
}

#[test]
fn min_groups_raises_the_cluster_count_and_is_a_condition_for_running() {
    let fleet = [cluster("us-east", 8, 64), cluster("us-west", 8, 64), cluster("eu-1", 2, 64)];
    let shaped = Shaped::new().spread("region", None, Some(2));
    // numberOfClusters 1, but two regions are asked for.
    let d = place(&fleet, &workload(2), &shaped.rule(1, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("eu-1", 1), ("us-east", 1)]));
    // With eu lost, one region is left: nothing is placed, and the message says why.
    let mut lost = fleet.clone();
    lost[2].ready = false;
    let err = place(&lost, &workload(2), &shaped.rule(1, ReplicaScheduling::Divide), &[], true).unwrap_err();
    assert_eq!(err.to_string(), "2/3 clusters fit, with 1 value(s) of label region (2 needed by minGroups): 1 NotReady");
}

#[test]
fn a_cluster_without_the_spread_label_is_not_used() {
    let mut bare = cluster("bare", 64, 64);
    Arc::make_mut(&mut bare.labels).clear();
    let fleet = [bare, cluster("us-east", 2, 64)];
    let shaped = Shaped::new().spread("region", None, None);
    let (rows, d) = explain(&fleet, &workload(1), &shaped.rule(1, ReplicaScheduling::Divide), &[], true);
    assert_eq!(d.unwrap().shares, shares(&[("us-east", 1)]));
    assert_eq!(why_not(&rows, "bare"), Some(Reason::MissingSpreadLabel));
}

#[test]
fn duplicate_with_max_skew_counts_clusters_per_group() {
    let fleet = [cluster("us-1", 4, 64), cluster("us-2", 4, 64), cluster("us-3", 4, 64), cluster("eu-1", 4, 64)];
    let shaped = Shaped::new().spread("region", Some(1), None);
    // Four asked for: us-1, eu-1, us-2; a third in us would be two ahead of eu.
    let d = place(&fleet, &workload(2), &shaped.rule(4, ReplicaScheduling::Duplicate), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("eu-1", 2), ("us-1", 2), ("us-2", 2)]));
    assert!(d.short);
}

#[test]
fn a_no_schedule_taint_keeps_new_workloads_away_and_lets_running_ones_stay() {
    let fleet = [tainted(cluster("a", 8, 64), "gpu", TaintEffect::NoSchedule, 0), cluster("b", 2, 64)];
    let plain = Shaped::new();
    let (rows, d) = explain(&fleet, &workload(1), &plain.rule(1, ReplicaScheduling::Divide), &[], true);
    assert_eq!(d.unwrap().shares, shares(&[("b", 1)]));
    assert_eq!(why_not(&rows, "a"), Some(Reason::Tainted));
    // Already on a: it stays.
    let d = place(&fleet, &workload(1), &plain.rule(1, ReplicaScheduling::Divide), &shares(&[("a", 1)]), true).unwrap();
    assert_eq!(d.shares, shares(&[("a", 1)]));
    // Tolerated: a is the roomiest, so a new one goes there.
    let tolerant = Shaped::new().tolerate("gpu", None, None);
    assert_eq!(place(&fleet, &workload(1), &tolerant.rule(1, ReplicaScheduling::Divide), &[], true).unwrap().shares, shares(&[("a", 1)]));
}

#[test]
fn a_no_execute_taint_moves_what_does_not_tolerate_it_and_what_tolerates_it_for_a_time_when_the_time_is_up() {
    let on_a = shares(&[("a", 1)]);
    let fleet = |age| [tainted(cluster("a", 8, 64), "maintenance", TaintEffect::NoExecute, age), cluster("b", 2, 64)];
    let decide_with =
        |shaped: &Shaped, age| place(&fleet(age), &workload(1), &shaped.rule(1, ReplicaScheduling::Divide), &on_a, true).unwrap();
    // Not tolerated: it moves at once.
    assert_eq!(decide_with(&Shaped::new(), 0).shares, shares(&[("b", 1)]));
    // Tolerated without a time: it stays, and nothing is to be looked at again.
    let d = decide_with(&Shaped::new().tolerate("maintenance", Some(TaintEffect::NoExecute), None), 3600);
    assert_eq!((d.shares, d.recheck), (on_a.clone(), None));
    // Tolerated for 30 s, taint 10 s old: it stays 20 s more.
    let timed = Shaped::new().tolerate("maintenance", Some(TaintEffect::NoExecute), Some(30));
    let d = decide_with(&timed, 10);
    assert_eq!((d.shares, d.recheck), (on_a.clone(), Some(Duration::from_secs(20))));
    // Two tolerations match: the shorter time counts, as for pods.
    let both = Shaped::new().tolerate("maintenance", None, Some(30)).tolerate("maintenance", Some(TaintEffect::NoExecute), Some(15));
    assert_eq!(decide_with(&both, 10).recheck, Some(Duration::from_secs(5)));
    // The time is up: it moves.
    assert_eq!(decide_with(&timed, 30).shares, shares(&[("b", 1)]));
    // A new workload does not go where it could stay only for a while.
    let d = place(&fleet(0), &workload(1), &timed.rule(1, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("b", 1)]));
    // With nowhere else to go, it stays (a workload is never removed to nothing).
    let alone = [tainted(cluster("a", 8, 64), "maintenance", TaintEffect::NoExecute, 0)];
    let err = place(&alone, &workload(1), &Shaped::new().rule(1, ReplicaScheduling::Divide), &on_a, true).unwrap_err();
    assert_eq!(err.to_string(), "0/1 clusters fit: 1 Tainted");
}

#[test]
fn tolerations_match_as_for_pods() {
    let taint = Taint { key: "k".into(), value: Some("v".into()), effect: TaintEffect::NoSchedule, age: Duration::ZERO };
    let t = |key: Option<&str>, op: Option<TolerationOperator>, value: Option<&str>, effect: Option<TaintEffect>| ClusterToleration {
        key: key.map(Into::into),
        operator: op,
        value: value.map(Into::into),
        effect,
        toleration_seconds: None,
    };
    use TolerationOperator::{Equal, Exists};
    let cases = [
        (t(Some("k"), None, Some("v"), None), true),
        (t(Some("k"), Some(Equal), Some("v"), Some(TaintEffect::NoSchedule)), true),
        (t(Some("k"), Some(Equal), Some("w"), None), false),
        (t(Some("k"), Some(Exists), None, None), true),
        (t(Some("k"), Some(Exists), None, Some(TaintEffect::NoExecute)), false),
        (t(Some("other"), Some(Exists), None, None), false),
        (t(None, Some(Exists), None, None), true),
        (t(None, Some(Equal), Some("v"), None), false),
    ];
    for (toleration, want) in cases {
        assert_eq!(tolerates(&toleration, &taint), want, "{toleration:?}");
    }
}

#[test]
fn a_prefer_no_schedule_taint_puts_the_cluster_last_but_keeps_it_usable() {
    let fleet = [tainted(cluster("big", 64, 64), "spot", TaintEffect::PreferNoSchedule, 0), cluster("small", 2, 64)];
    let plain = Shaped::new();
    assert_eq!(place(&fleet, &workload(1), &plain.rule(1, ReplicaScheduling::Divide), &[], true).unwrap().shares, shares(&[("small", 1)]));
    // small holds 4: 10 replicas need big, and go there.
    assert_eq!(place(&fleet, &workload(10), &plain.rule(1, ReplicaScheduling::Divide), &[], true).unwrap().shares, shares(&[("big", 10)]));
}

#[test]
fn static_weights_divide_in_proportion_and_leave_out_clusters_with_none() {
    let fleet = [cluster("a", 8, 64), cluster("b", 8, 64), cluster("c", 64, 64)];
    let shaped = Shaped::new().weight(&["a"], 1).weight(&["b"], 2);
    let (rows, d) = explain(&fleet, &workload(6), &shaped.rule(3, ReplicaScheduling::Divide), &[], true);
    assert_eq!(d.unwrap().shares, shares(&[("a", 2), ("b", 4)]));
    assert_eq!(why_not(&rows, "c"), Some(Reason::Unweighted));
    assert_eq!(rows.iter().map(|r| r.weight).collect::<Vec<_>>(), [Some(1), Some(2), Some(0)]);
    // By label, the highest matching weight counts.
    let us = Shaped {
        weights: vec![
            ClusterWeight { cluster_names: vec![], cluster_selector: Some(LabelSelector::default()), weight: 1 },
            ClusterWeight { cluster_names: vec!["c".into()], cluster_selector: None, weight: 3 },
        ],
        ..Shaped::new()
    };
    let d = place(&fleet, &workload(10), &us.rule(3, ReplicaScheduling::Divide), &[], true).unwrap();
    assert_eq!(d.shares, shares(&[("a", 2), ("b", 2), ("c", 6)]));
    // A malformed weight selector is named as such.
    let bad = Shaped {
        weights: vec![ClusterWeight {
            cluster_names: vec![],
            cluster_selector: Some(LabelSelector {
                match_expressions: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "region".into(),
                    operator: "Equals".into(),
                    values: None,
                }]),
                ..Default::default()
            }),
            weight: 1,
        }],
        ..Shaped::new()
    };
    let err = place(&fleet, &workload(1), &bad.rule(1, ReplicaScheduling::Divide), &[], true).unwrap_err();
    assert!(err.to_string().starts_with("a clusterSelector in the Placement's weights is invalid: "), "{err}");
    // A change of weights moves replicas, though the clusters are the same.
    let current = shares(&[("a", 3), ("b", 3)]);
    let d = place(&fleet, &workload(6), &shaped.rule(2, ReplicaScheduling::Divide), &current, true).unwrap();
    assert_eq!(d.shares, shares(&[("a", 2), ("b", 4)]));
}

#[test]
fn divide_by_weight_rounds_as_karmada_and_never_exceeds_room() {
    assert_eq!(divide_by_weight(7, &[1, 1, 1], &[10, 10, 10]), vec![3, 2, 2]);
    // A light slot may get nothing: the weights are the user's.
    assert_eq!(divide_by_weight(3, &[1, 100], &[10, 10]), vec![0, 3]);
    assert_eq!(divide_by_weight(2, &[1, 2], &[10, 10]), vec![0, 2]);
    // Room caps a share; the rest goes to the others, heaviest first.
    assert_eq!(divide_by_weight(10, &[1, 4], &[10, 3]), vec![7, 3]);
    assert_eq!(divide_by_weight(0, &[1, 1], &[1, 1]), vec![0, 0]);
}

#[test]
fn explain_ranks_as_place_chooses_under_a_spread() {
    let fleet = [cluster("us-east", 8, 64), cluster("us-west", 8, 64), cluster("eu-1", 2, 64)];
    let shaped = Shaped::new().spread("region", None, None);
    let (rows, d) = explain(&fleet, &workload(2), &shaped.rule(2, ReplicaScheduling::Divide), &[], true);
    assert_eq!(d.unwrap().shares, shares(&[("eu-1", 1), ("us-east", 1)]));
    // eu-1 is taken second, before the roomier us-west: its rank says so.
    let rank = |c: &str| rows.iter().find(|r| r.cluster == c).and_then(|r| r.rank);
    assert_eq!((rank("us-east"), rank("eu-1"), rank("us-west")), (Some(1), Some(2), Some(3)));
}

#[test]
fn a_workload_with_a_pod_on_every_node_needs_room_for_one_per_node_and_its_share_is_the_nodes() {
    // Half a core a pod: us-east has 3 nodes and room for 8 pods, us-west 5 nodes and
    // room for 4, eu-1 does not say how many nodes it has (one, then).
    let mut fleet = [cluster("us-east", 4, 8), cluster("us-west", 2, 8), cluster("eu-1", 1, 8)];
    fleet[0].nodes = 3;
    fleet[1].nodes = 5;
    let daemon = Workload { per_node: true, ..workload(1) };
    let every = LabelSelector::default();
    let all = Rule::plain(&every, 1, ReplicaScheduling::Divide).for_spread(Spread::EveryCluster, fleet.len());
    let decided = decide(&fleet, &daemon, &all, &[]);
    assert_eq!(decided, Ok(shares(&[("eu-1", 1), ("us-east", 3)])), "us-west has room for 4 of its 5 nodes' pods");
    // The same workload with one pod per cluster fits all three.
    let one = Workload { per_node: false, ..daemon };
    assert_eq!(decide(&fleet, &one, &all, &[]).map(|s| s.len()), Ok(3));
}
