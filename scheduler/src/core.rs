//! The placement decision, as a pure function: from the clusters (with their health
//! and free room), one workload, the Placement that governs it and where it runs now,
//! to where it should run, or to a counted reason why nothing fits.
//!
//! The rules (DESIGN.md, "Scheduling and failover behaviour"):
//! - a cluster is a candidate only if it is Ready, not draining, selected by the
//!   Placement's `clusterSelector`, and, for a cluster the workload is not on yet, not
//!   cordoned; a cluster held by the disruption brake keeps what it runs, as a
//!   cordoned one does, though it is not Ready;
//! - a replica must fit on a single node, and the replicas must fit in the cluster's
//!   free room (the caller subtracts what it assumed but the heartbeat does not show);
//! - the clusters a workload runs on stay chosen while they remain candidates (sticky),
//!   and new ones are picked by the most room for this workload, then by name;
//! - Divide gives each chosen cluster one replica, then splits the rest in proportion
//!   to the replicas each can still fit, remainders to the roomiest; Duplicate runs all
//!   replicas on each;
//! - when nothing fits, the answer says how many clusters were turned away, and why,
//!   the way kube-scheduler does (`0/3 clusters fit: 2 Insufficient cpu, 1 NotReady`).
//!
//! No I/O and no clock: the same inputs always give the same answer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use placement_api::quantity::Resources;
use placement_api::workload::Spread;
use placement_api::{
    ClusterToleration, ClusterWeight, PlacementSpec, ReplicaScheduling, SpreadConstraint, TaintEffect, TolerationOperator,
};

use crate::selector::{self, SelectorError};

/// One cluster as the scheduler sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    /// The SyncTarget's name.
    pub name: String,
    /// The SyncTarget's labels, which Placements select on (shared, since every
    /// decision gets a view of every cluster).
    pub labels: Arc<BTreeMap<String, String>>,
    /// Its heartbeat is within the grace period.
    pub ready: bool,
    /// Not Ready, but lost together with too many others for the loss to be believed
    /// (the disruption brake): what runs there stays, and nothing new goes there.
    pub braked: bool,
    /// `spec.unschedulable`: no new workloads; those running stay.
    pub cordoned: bool,
    /// `spec.evictAfter` has passed: everything moves away.
    pub draining: bool,
    /// Free room: the heartbeat's `available`, minus what the scheduler has assigned
    /// there that the heartbeat does not show yet.
    pub available: Resources,
    /// The free room of the roomiest nodes. Empty when the heartbeat says nothing about
    /// nodes; then only the total is checked.
    pub headroom: Vec<Resources>,
    /// How many nodes take pods: a workload with a pod on every node needs room for
    /// this many. 0 when the heartbeat does not say; then it counts as 1.
    pub nodes: u32,
    /// `spec.taints`.
    pub taints: Arc<Vec<Taint>>,
}

/// A cluster's taint, with how long it has been there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Option<String>,
    /// The effect.
    pub effect: TaintEffect,
    /// How long it has been on the cluster: since its `timeAdded`, or since the
    /// scheduler first saw it. A `NoExecute` toleration's time counts against this.
    pub age: Duration,
}

/// What one workload asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// `spec.replicas`.
    pub replicas: u32,
    /// The requests of one replica, including its pod slot.
    pub per_replica: Resources,
    /// It runs one replica on every node of each cluster it runs on (a DaemonSet), so
    /// a cluster's share is its nodes, whatever `replicas` says.
    pub per_node: bool,
}

impl Workload {
    /// The replicas it runs on `c` when it runs there whole: one per node for a
    /// workload with a pod on every node, else all of them.
    fn whole_on(&self, c: &Cluster) -> u32 {
        if self.per_node {
            c.nodes.max(1)
        } else {
            self.replicas
        }
    }
}

/// The parts of a Placement the decision uses.
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    /// Which clusters may be chosen.
    pub cluster_selector: &'a LabelSelector,
    /// How many clusters to choose.
    pub clusters: u32,
    /// How replicas are spread over them.
    pub mode: ReplicaScheduling,
    /// `spreadConstraints`.
    pub spread: &'a [SpreadConstraint],
    /// `clusterTolerations`.
    pub tolerations: &'a [ClusterToleration],
    /// `weights` (Divide only).
    pub weights: &'a [ClusterWeight],
}

impl<'a> Rule<'a> {
    /// The rule of a Placement.
    pub fn of(spec: &'a PlacementSpec) -> Self {
        Rule {
            cluster_selector: &spec.cluster_selector,
            clusters: u32::try_from(spec.number_of_clusters).unwrap_or(1),
            mode: spec.replica_scheduling,
            spread: &spec.spread_constraints,
            tolerations: &spec.cluster_tolerations,
            weights: &spec.weights,
        }
    }

    /// The rule as a workload that spreads as `spread` ([`Spread`], the workload
    /// model's) takes it, with `known` clusters registered: a StatefulSet under Divide
    /// and a Job always run whole on one cluster, and a DaemonSet runs on every cluster
    /// the selector picks, whatever `numberOfClusters` says. A CronJob is not placed;
    /// the rule it is given is its Jobs' (one cluster each).
    pub fn for_spread(mut self, spread: Spread, known: usize) -> Self {
        match spread {
            Spread::Replicas => {}
            Spread::Whole if self.mode == ReplicaScheduling::Duplicate => {}
            Spread::Whole | Spread::One | Spread::InWorkspace => {
                self.clusters = 1;
                self.mode = ReplicaScheduling::Divide;
                self.spread = &[];
                self.weights = &[];
            }
            Spread::EveryCluster => {
                self.clusters = u32::try_from(known).unwrap_or(u32::MAX).max(1);
                self.mode = ReplicaScheduling::Duplicate;
                self.spread = &[];
            }
        }
        self
    }

    /// A rule with no spread constraints, tolerations or weights.
    pub fn plain(cluster_selector: &'a LabelSelector, clusters: u32, mode: ReplicaScheduling) -> Self {
        Rule { cluster_selector, clusters, mode, spread: &[], tolerations: &[], weights: &[] }
    }

    /// The fewest groups a spread constraint asks for (1 without one).
    fn min_groups(&self) -> u32 {
        self.spread.iter().filter_map(|s| s.min_groups).max().map_or(1, |n| u32::try_from(n).unwrap_or(1)).max(1)
    }

    /// How many clusters to choose: `numberOfClusters`, raised to the spread
    /// constraints' `minGroups`.
    fn needed(&self) -> u32 {
        self.clusters.max(1).max(self.min_groups())
    }
}

/// One chosen cluster and its share of the replicas.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Share {
    /// The SyncTarget's name.
    pub cluster: String,
    /// The replicas it runs.
    pub replicas: u32,
}

impl Share {
    /// A share, for tests and callers converting from the API types.
    pub fn new(cluster: &str, replicas: u32) -> Self {
        Share { cluster: cluster.to_string(), replicas }
    }
}

/// The resources the scheduler counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// CPU.
    Cpu,
    /// Memory.
    Memory,
    /// Pod slots.
    Pods,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Pods => "pods",
        })
    }
}

/// Why one cluster was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Its heartbeat is older than the grace period.
    NotReady,
    /// Its `evictAfter` has passed.
    Draining,
    /// The Placement's `clusterSelector` does not select it.
    NotSelected,
    /// It is cordoned and the workload does not run there yet.
    Cordoned,
    /// It has a taint the Placement does not tolerate (`NoSchedule` for a workload
    /// not there yet, `NoExecute`, or one tolerated for a time that has run out).
    Tainted,
    /// It lacks the label a spread constraint spreads by.
    MissingSpreadLabel,
    /// The Placement has weights and none selects it.
    Unweighted,
    /// No single node has room for one replica.
    NoNodeFits,
    /// Not enough of this resource for the replicas it would have to run.
    Insufficient(Resource),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotReady => f.write_str("NotReady"),
            Reason::Draining => f.write_str("Draining"),
            Reason::NotSelected => f.write_str("NotSelected"),
            Reason::Cordoned => f.write_str("Cordoned"),
            Reason::Tainted => f.write_str("Tainted"),
            Reason::MissingSpreadLabel => f.write_str("MissingSpreadLabel"),
            Reason::Unweighted => f.write_str("Unweighted"),
            Reason::NoNodeFits => f.write_str("NoNodeFits"),
            Reason::Insufficient(r) => write!(f, "Insufficient {r}"),
        }
    }
}

/// Why a workload could not be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoFit {
    /// Too few clusters could take the workload.
    Clusters {
        /// How many clusters there are.
        total: usize,
        /// How many could take it.
        fit: usize,
        /// How many the Placement asks for.
        needed: u32,
        /// How many clusters were turned away for each reason.
        reasons: BTreeMap<Reason, usize>,
        /// Divide only: the replicas the roomiest `needed` clusters could hold together,
        /// when that is fewer than the workload's replicas.
        holds: Option<(u64, u32)>,
    },
    /// The clusters that could take the workload span fewer groups than a spread
    /// constraint's `minGroups`.
    Groups {
        /// How many clusters there are.
        total: usize,
        /// How many could take it.
        fit: usize,
        /// The label the constraint spreads by.
        label: String,
        /// How many of its values the clusters that fit have.
        found: usize,
        /// `minGroups`.
        needed: usize,
        /// How many clusters were turned away for each reason.
        reasons: BTreeMap<Reason, usize>,
    },
    /// The replicas cannot be divided within a spread constraint's `maxSkew`: the group
    /// with the fewest has no room for more.
    Skew {
        /// The label the constraint spreads by.
        label: String,
        /// `maxSkew`.
        max_skew: u32,
        /// The group that is full.
        group: String,
    },
    /// The Placement's `clusterSelector` is malformed.
    Selector(SelectorError),
    /// The `clusterSelector` of one of the Placement's weights is malformed.
    WeightSelector(SelectorError),
}

/// `N reason, M reason`, alphabetical by reason, as kube-scheduler sorts its FitError
/// message.
fn counted(reasons: &BTreeMap<Reason, usize>) -> String {
    let mut counted: Vec<(String, usize)> = reasons.iter().map(|(r, n)| (r.to_string(), *n)).collect();
    counted.sort();
    counted.into_iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for NoFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoFit::Selector(e) => write!(f, "the Placement's clusterSelector is invalid: {e}"),
            NoFit::WeightSelector(e) => write!(f, "a clusterSelector in the Placement's weights is invalid: {e}"),
            NoFit::Clusters { total: 0, .. } => f.write_str("0/0 clusters fit: no clusters are registered"),
            NoFit::Clusters { total, fit, needed, reasons, holds } => {
                write!(f, "{fit}/{total} clusters fit")?;
                if *needed > 1 {
                    write!(f, " ({needed} needed)")?;
                }
                if !reasons.is_empty() {
                    write!(f, ": {}", counted(reasons))?;
                }
                if let Some((held, replicas)) = holds {
                    write!(f, "; the roomiest {needed} hold {held} of {replicas} replicas")?;
                }
                Ok(())
            }
            NoFit::Groups { total, fit, label, found, needed, reasons } => {
                write!(f, "{fit}/{total} clusters fit, with {found} value(s) of label {label} ({needed} needed by minGroups)")?;
                if !reasons.is_empty() {
                    write!(f, ": {}", counted(reasons))?;
                }
                Ok(())
            }
            NoFit::Skew { label, max_skew, group } => write!(
                f,
                "the replicas cannot be divided over the values of label {label} within maxSkew {max_skew}: the clusters with {label}={group} have no room for more"
            ),
        }
    }
}

/// How many replicas of `per` fit in `free`, and the resource that runs out first.
pub fn room(free: Resources, per: Resources) -> (u64, Resource) {
    let per = per.max(Resources::new(0, 0, 1));
    [
        (Resource::Cpu, free.cpu_millis, per.cpu_millis),
        (Resource::Memory, free.memory_bytes, per.memory_bytes),
        (Resource::Pods, free.pods, per.pods),
    ]
    .into_iter()
    .filter(|(_, _, p)| *p > 0)
    .map(|(r, f, p)| (f / p, r))
    .min_by_key(|(n, _)| *n)
    .unwrap_or((u64::MAX, Resource::Pods))
}

/// A cluster that could take the workload.
#[derive(Debug)]
struct Eligible<'a> {
    name: &'a str,
    /// Replicas of this workload it can run: its free room, plus its current share.
    room: u64,
    /// The replicas it runs when it runs the workload whole ([`Workload::whole_on`]).
    whole: u32,
    /// It runs the workload now.
    sticky: bool,
    /// It has a `PreferNoSchedule` taint the Placement does not tolerate.
    avoided: bool,
    /// Its static weight, when the Placement has weights (Divide).
    weight: u64,
    /// Its value of each spread constraint's label, in the constraints' order.
    groups: Vec<&'a str>,
    /// How long it may keep the workload under a `NoExecute` taint tolerated for a time.
    until: Option<Duration>,
    /// What runs out first, for the message when the chosen ones hold too little.
    limit: Resource,
}

/// The order in which candidates are taken: where the workload runs now, then those
/// without an untolerated `PreferNoSchedule` taint, then the highest weight, then the
/// most room, then the name.
fn preference(a: &Eligible<'_>, b: &Eligible<'_>) -> std::cmp::Ordering {
    b.sticky.cmp(&a.sticky).then(a.avoided.cmp(&b.avoided)).then(b.weight.cmp(&a.weight)).then(b.room.cmp(&a.room)).then(a.name.cmp(b.name))
}

/// Where a workload is to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The chosen clusters and their shares, sorted by cluster name.
    pub shares: Vec<Share>,
    /// Fewer clusters could take the workload than the Placement's `numberOfClusters`:
    /// it runs on those that could, and this says why the others were turned away.
    pub fewer: Option<NoFit>,
    /// It runs on fewer clusters than the Placement asks for (and than its replicas
    /// could cover): because fewer fit ([`Decision::fewer`]), or because it was left
    /// short and may not spread again yet.
    pub short: bool,
    /// When to decide again: a chosen cluster has a `NoExecute` taint that the
    /// Placement tolerates for this long more.
    pub recheck: Option<Duration>,
}

/// [`place`] for a workload that may spread over more clusters than it runs on now:
/// just the shares.
pub fn decide(clusters: &[Cluster], workload: &Workload, rule: &Rule<'_>, current: &[Share]) -> Result<Vec<Share>, NoFit> {
    place(clusters, workload, rule, current, true).map(|d| d.shares)
}

/// A Placement's rule, compiled once for one decision.
struct Compiled<'r> {
    selector: apimachinery::selector::LabelSelector,
    /// The weights' selectors, when the Placement divides by static weights.
    weights: Option<Vec<(apimachinery::selector::LabelSelector, &'r ClusterWeight)>>,
}

impl<'r> Compiled<'r> {
    fn new(rule: &Rule<'r>) -> Result<Self, NoFit> {
        let selector = selector::compile(rule.cluster_selector).map_err(NoFit::Selector)?;
        let weights = if rule.weights.is_empty() || rule.mode == ReplicaScheduling::Duplicate {
            None
        } else {
            let compiled: Result<Vec<_>, _> = rule
                .weights
                .iter()
                .map(|w| {
                    let s = match &w.cluster_selector {
                        Some(s) => selector::compile(s)?,
                        // Names alone: the selector part matches nothing.
                        None if !w.cluster_names.is_empty() => apimachinery::selector::LabelSelector::nothing(),
                        None => apimachinery::selector::LabelSelector::everything(),
                    };
                    Ok((s, w))
                })
                .collect();
            Some(compiled.map_err(NoFit::WeightSelector)?)
        };
        Ok(Compiled { selector, weights })
    }

    /// The highest weight of the entries that select `c`; `None` without weights.
    fn weight(&self, c: &Cluster) -> Option<u64> {
        let weights = self.weights.as_ref()?;
        Some(
            weights
                .iter()
                .filter(|(s, w)| w.cluster_names.contains(&c.name) || s.matches(c.labels.as_ref()))
                .map(|(_, w)| u64::try_from(w.weight).unwrap_or(0))
                .max()
                .unwrap_or(0),
        )
    }
}

/// Every cluster once, by name, and how it fared.
fn evaluate_all<'a>(
    clusters: &'a [Cluster],
    workload: &Workload,
    rule: &Rule<'_>,
    compiled: &Compiled<'_>,
    current: &[Share],
) -> Vec<(&'a Cluster, Option<u32>, Result<Eligible<'a>, Reason>)> {
    let mut sorted: Vec<&Cluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted.dedup_by(|a, b| a.name == b.name);
    sorted
        .into_iter()
        .map(|c| {
            let share = current.iter().find(|s| s.cluster == c.name).map(|s| s.replicas);
            (c, share, evaluate(c, workload, compiled, rule, share))
        })
        .collect()
}

/// Decides where `workload` runs. `current` is where it runs now (empty for a new
/// workload).
///
/// `numberOfClusters` is the most clusters to use: when fewer can take the workload,
/// it runs on those ([`Decision::fewer`] says why not more). Once it runs on fewer
/// clusters than that, it spreads over more again only when `may_spread` allows it
/// (rebalancing); a lost cluster among those it runs on is always replaced, if another
/// fits.
///
/// When it returns [`NoFit`], the caller keeps the current assignment: a workload is
/// never taken off a cluster because nothing else fits.
pub fn place(clusters: &[Cluster], workload: &Workload, rule: &Rule<'_>, current: &[Share], may_spread: bool) -> Result<Decision, NoFit> {
    let compiled = Compiled::new(rule)?;
    let judged = evaluate_all(clusters, workload, rule, &compiled, current);
    decide_among(judged, workload, rule, current, may_spread, false).1
}

/// The decision over clusters already judged, and with `ranked`, the candidates in the
/// order it takes them (empty without).
fn decide_among<'a>(
    judged: Vec<(&'a Cluster, Option<u32>, Result<Eligible<'a>, Reason>)>,
    workload: &Workload,
    rule: &Rule<'_>,
    current: &[Share],
    may_spread: bool,
    ranked: bool,
) -> (Vec<&'a str>, Result<Decision, NoFit>) {
    let replicas = workload.replicas;
    let duplicate = rule.mode == ReplicaScheduling::Duplicate;
    let min_groups = rule.min_groups();
    let needed = rule.needed();
    let total = judged.len();
    let mut reasons: BTreeMap<Reason, usize> = BTreeMap::new();
    let mut eligible: Vec<Eligible<'a>> = Vec::new();
    for (_, _, verdict) in judged {
        match verdict {
            Ok(e) => eligible.push(e),
            Err(reason) => *reasons.entry(reason).or_default() += 1,
        }
    }
    eligible.sort_by(preference);
    let order: Vec<&'a str> = if ranked { eligible.iter().map(|e| e.name).collect() } else { Vec::new() };
    let too_few = |reasons: BTreeMap<Reason, usize>, fit: usize, holds| NoFit::Clusters { total, fit, needed, reasons, holds };
    if eligible.is_empty() {
        return (order, Err(too_few(reasons, 0, None)));
    }
    let fewer = (eligible.len() < needed as usize).then(|| too_few(reasons.clone(), eligible.len(), None));
    // As many clusters as asked for, or as it runs on now if fewer (a spread left
    // short by lost clusters is widened again by rebalancing only), and no more than fit.
    let wanted = match (may_spread, current.len()) {
        (true, _) | (false, 0) => needed as usize,
        (false, n) => n.min(needed as usize).max(min_groups as usize),
    };
    let take = wanted.min(eligible.len());

    let mut chosen: Vec<&Eligible<'_>> = choose(&eligible, take, rule, duplicate, false);
    let holds = |set: &[&Eligible<'_>]| set.iter().map(|e| e.room).fold(0u64, u64::saturating_add);
    if !duplicate && holds(&chosen) < u64::from(replicas) {
        // Where the workload runs cannot hold it any more (it grew): choose afresh.
        let roomiest = choose(&eligible, take, rule, duplicate, true);
        let held = holds(&roomiest);
        if held < u64::from(replicas) {
            for e in &eligible {
                *reasons.entry(Reason::Insufficient(e.limit)).or_default() += 1;
            }
            return (order, Err(too_few(reasons, 0, Some((held, replicas)))));
        }
        chosen = roomiest;
    }
    for (i, c) in rule.spread.iter().enumerate() {
        let want = c.min_groups.map_or(1, |n| usize::try_from(n).unwrap_or(1));
        let found = chosen.iter().map(|e| e.groups[i]).collect::<BTreeSet<_>>().len();
        if found < want {
            let available = eligible.iter().map(|e| e.groups[i]).collect::<BTreeSet<_>>().len();
            return (
                order,
                Err(NoFit::Groups {
                    total,
                    fit: eligible.len(),
                    label: c.spread_by_label.clone(),
                    found: available,
                    needed: want,
                    reasons,
                }),
            );
        }
    }

    // The order candidates were taken in: the chosen ones first.
    let order: Vec<&'a str> = if ranked {
        chosen.iter().map(|e| e.name).chain(order.into_iter().filter(|n| !chosen.iter().any(|e| e.name == *n))).collect()
    } else {
        order
    };
    let short = chosen.len() < needed as usize && (duplicate || replicas as usize > chosen.len());
    let mut shares: Vec<Share> = if duplicate {
        chosen.iter().map(|e| Share::new(e.name, e.whole)).collect()
    } else {
        let mut shares = keep_or_divide(replicas, &chosen, current);
        if let Err(no_fit) = within_skew(&mut shares, &chosen, rule) {
            return (order, Err(no_fit));
        }
        shares
    };
    // A chosen cluster with nothing to run is not chosen (unless there is nothing to
    // run at all: a Deployment scaled to zero keeps its place).
    if replicas > 0 {
        shares.retain(|s| s.replicas > 0);
    }
    let recheck = chosen.iter().filter(|e| shares.iter().any(|s| s.cluster == e.name)).filter_map(|e| e.until).min();
    shares.sort();
    (order, Ok(Decision { shares, fewer, short, recheck }))
}

/// Takes `take` of the candidates (sorted by [`preference`]; when `afresh`, by the same
/// order without regard to where the workload runs now). With spread constraints, each next cluster is the first in that order
/// among those whose groups hold the fewest chosen clusters so far, constraint by
/// constraint: the groups fill evenly. Under Duplicate, a cluster that would put its
/// group more than `maxSkew` clusters ahead of the least-used group is passed over.
fn choose<'e, 'a>(eligible: &'e [Eligible<'a>], take: usize, rule: &Rule<'_>, duplicate: bool, afresh: bool) -> Vec<&'e Eligible<'a>> {
    let mut pool: Vec<&Eligible<'_>> = eligible.iter().collect();
    if afresh {
        pool.sort_by(|a, b| a.avoided.cmp(&b.avoided).then(b.weight.cmp(&a.weight)).then(b.room.cmp(&a.room)).then(a.name.cmp(b.name)));
    }
    if rule.spread.is_empty() {
        pool.truncate(take);
        return pool;
    }
    let mut chosen: Vec<&Eligible<'_>> = Vec::with_capacity(take);
    let mut counts: Vec<BTreeMap<&str, usize>> = vec![BTreeMap::new(); rule.spread.len()];
    while chosen.len() < take && !pool.is_empty() {
        let load = |e: &Eligible<'_>| -> Vec<usize> { counts.iter().zip(&e.groups).map(|(m, g)| m.get(g).copied().unwrap_or(0)).collect() };
        let fits_skew = |e: &Eligible<'_>| {
            !duplicate
                || rule.spread.iter().enumerate().all(|(i, c)| {
                    let Some(skew) = c.max_skew else { return true };
                    let mut after = counts[i].clone();
                    *after.entry(e.groups[i]).or_default() += 1;
                    let (lo, hi) = (after.values().min().copied().unwrap_or(0), after.values().max().copied().unwrap_or(0));
                    hi - lo <= usize::try_from(skew).unwrap_or(usize::MAX)
                })
        };
        let Some(best) = (0..pool.len()).filter(|i| fits_skew(pool[*i])).min_by_key(|i| (load(pool[*i]), *i)) else { break };
        let e = pool.remove(best);
        for (m, g) in counts.iter_mut().zip(&e.groups) {
            *m.entry(*g).or_default() += 1;
        }
        chosen.push(e);
    }
    chosen
}

/// Moves replicas, one at a time, from the fullest group of each spread constraint
/// with a `maxSkew` to its emptiest one, until no two groups the workload runs in
/// differ by more than the skew (Divide).
fn within_skew(shares: &mut [Share], chosen: &[&Eligible<'_>], rule: &Rule<'_>) -> Result<(), NoFit> {
    let total: u32 = shares.iter().map(|s| s.replicas).sum();
    let limit = (total as usize + 1) * rule.spread.len() * 2;
    for _ in 0..=limit {
        let mut moved = false;
        for (i, c) in rule.spread.iter().enumerate() {
            let Some(skew) = c.max_skew.map(|s| u32::try_from(s).unwrap_or(u32::MAX)) else { continue };
            let group = |name: &str| chosen.iter().find(|e| e.name == name).map(|e| e.groups[i]).unwrap_or_default();
            let mut sums: BTreeMap<&str, u32> = BTreeMap::new();
            for e in chosen {
                sums.entry(e.groups[i]).or_default();
            }
            for s in shares.iter() {
                *sums.entry(group(&s.cluster)).or_default() += s.replicas;
            }
            let (Some((&lo_group, &lo)), Some((&hi_group, &hi))) =
                (sums.iter().min_by_key(|(g, n)| (**n, *g)), sums.iter().max_by_key(|(g, n)| (**n, std::cmp::Reverse(*g))))
            else {
                continue;
            };
            if hi - lo <= skew {
                continue;
            }
            // From the cluster with the most replicas in the fullest group, to the
            // cluster with the most room left in the emptiest one.
            let from =
                shares.iter().enumerate().filter(|(_, s)| group(&s.cluster) == hi_group).max_by_key(|(_, s)| s.replicas).map(|(j, _)| j);
            let to = chosen
                .iter()
                .filter(|e| e.groups[i] == lo_group)
                .filter_map(|e| {
                    let j = shares.iter().position(|s| s.cluster == e.name)?;
                    let left = e.room.saturating_sub(u64::from(shares[j].replicas));
                    (left > 0).then_some((j, left))
                })
                .max_by_key(|(j, left)| (*left, std::cmp::Reverse(*j)))
                .map(|(j, _)| j);
            match (from, to) {
                (Some(from), Some(to)) => {
                    shares[from].replicas -= 1;
                    shares[to].replicas += 1;
                    moved = true;
                }
                _ => return Err(NoFit::Skew { label: c.spread_by_label.clone(), max_skew: skew, group: lo_group.to_string() }),
            }
        }
        if !moved {
            return Ok(());
        }
    }
    let c = rule.spread.iter().find(|c| c.max_skew.is_some());
    Err(NoFit::Skew {
        label: c.map(|c| c.spread_by_label.clone()).unwrap_or_default(),
        max_skew: c.and_then(|c| c.max_skew).map_or(0, |s| u32::try_from(s).unwrap_or(0)),
        group: String::new(),
    })
}

/// How one cluster fared in a decision, for `flotilla explain` and `what-if`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Considered {
    /// The SyncTarget's name.
    pub cluster: String,
    /// Why it is not a candidate; `None` when it is one.
    pub turned_away: Option<Reason>,
    /// Replicas of this workload it can run: its free room, plus its current share.
    pub fits: u64,
    /// The workload runs there now, which puts it first among the candidates.
    pub sticky: bool,
    /// Its place among the candidates, in the order the decision takes them (1 first):
    /// where the workload runs now, then those without an untolerated
    /// `PreferNoSchedule` taint, then the highest weight, then the most room, then the name.
    pub rank: Option<usize>,
    /// Its static weight, when the Placement has weights.
    pub weight: Option<u64>,
    /// Its share in the decision.
    pub share: Option<u32>,
}

/// [`place`], and how it judged every cluster on the way: the same evaluation and the
/// same order, so that the explanation cannot disagree with the decision.
pub fn explain(
    clusters: &[Cluster],
    workload: &Workload,
    rule: &Rule<'_>,
    current: &[Share],
    may_spread: bool,
) -> (Vec<Considered>, Result<Decision, NoFit>) {
    let compiled = match Compiled::new(rule) {
        Ok(c) => c,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let judged = evaluate_all(clusters, workload, rule, &compiled, current);
    let mut rows: Vec<Considered> = judged
        .iter()
        .map(|(c, share, verdict)| {
            let (turned_away, fits, sticky) = match verdict {
                Ok(e) => (None, e.room, e.sticky),
                Err(r) => (Some(*r), 0, share.is_some()),
            };
            Considered { cluster: c.name.clone(), turned_away, fits, sticky, rank: None, weight: compiled.weight(c), share: None }
        })
        .collect();
    let (order, decision) = decide_among(judged, workload, rule, current, may_spread, true);
    for (rank, name) in order.into_iter().enumerate() {
        if let Some(row) = rows.iter_mut().find(|r| r.cluster == name) {
            row.rank = Some(rank + 1);
        }
    }
    if let Ok(d) = &decision {
        for row in &mut rows {
            row.share = d.shares.iter().find(|s| s.cluster == row.cluster).map(|s| s.replicas);
        }
    }
    (rows, decision)
}

/// What the cluster's taints say about this workload: whether it is turned away, and
/// if not, whether it is to be avoided (`PreferNoSchedule`) and how long it may keep
/// the workload (a `NoExecute` taint tolerated for a time).
fn judge_taints(c: &Cluster, tolerations: &[ClusterToleration], on_it: bool) -> Result<(bool, Option<Duration>), Reason> {
    let mut avoided = false;
    let mut until: Option<Duration> = None;
    for taint in c.taints.iter() {
        let mut matching = tolerations.iter().filter(|t| tolerates(t, taint)).peekable();
        match taint.effect {
            TaintEffect::PreferNoSchedule => avoided |= matching.peek().is_none(),
            TaintEffect::NoSchedule if !on_it && matching.peek().is_none() => return Err(Reason::Tainted),
            TaintEffect::NoSchedule => {}
            TaintEffect::NoExecute => {
                // As kubelet's taint manager does: no toleration, out now; any with a
                // time, out after the shortest; all without, never.
                let mut any = false;
                let mut shortest: Option<i64> = None;
                for t in matching {
                    any = true;
                    if let Some(secs) = t.toleration_seconds {
                        shortest = Some(shortest.map_or(secs, |s| s.min(secs)));
                    }
                }
                if !any {
                    return Err(Reason::Tainted);
                }
                if let Some(secs) = shortest {
                    let allowed = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
                    // Only what runs there already may stay, and only for its time.
                    if !on_it || taint.age >= allowed {
                        return Err(Reason::Tainted);
                    }
                    let left = allowed - taint.age;
                    until = Some(until.map_or(left, |u| u.min(left)));
                }
            }
        }
    }
    Ok((avoided, until))
}

/// Whether a toleration matches a taint, as `v1.Toleration.ToleratesTaint` does: the
/// effect (unset matches all), the key (unset with `Exists` matches all), and the value
/// (`Exists` matches any).
fn tolerates(t: &ClusterToleration, taint: &Taint) -> bool {
    if t.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    let exists = t.operator == Some(TolerationOperator::Exists);
    match t.key.as_deref().filter(|k| !k.is_empty()) {
        None if exists => return true,
        None => return false,
        Some(k) if k != taint.key => return false,
        Some(_) => {}
    }
    exists || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
}

/// Whether one cluster could take the workload.
fn evaluate<'a>(
    c: &'a Cluster,
    workload: &Workload,
    compiled: &Compiled<'_>,
    rule: &Rule<'_>,
    share: Option<u32>,
) -> Result<Eligible<'a>, Reason> {
    let duplicate = rule.mode == ReplicaScheduling::Duplicate;
    // Under the brake a lost cluster keeps its share and takes nothing more.
    let kept_by_brake = c.braked && share.is_some();
    if !c.ready && !kept_by_brake {
        return Err(Reason::NotReady);
    }
    if c.draining {
        return Err(Reason::Draining);
    }
    if !compiled.selector.matches(c.labels.as_ref()) {
        return Err(Reason::NotSelected);
    }
    let (avoided, until) = judge_taints(c, rule.tolerations, share.is_some())?;
    let mut groups = Vec::with_capacity(rule.spread.len());
    for s in rule.spread {
        match c.labels.get(&s.spread_by_label) {
            Some(v) => groups.push(v.as_str()),
            None => return Err(Reason::MissingSpreadLabel),
        }
    }
    let weight = compiled.weight(c);
    if weight == Some(0) {
        return Err(Reason::Unweighted);
    }
    if share.is_none() && c.cordoned {
        return Err(Reason::Cordoned);
    }
    let (free, limit) = room(c.available, workload.per_replica);
    // A cordoned cluster keeps what it runs but takes nothing more; so does a braked one.
    let free = if c.cordoned || !c.ready { 0 } else { free };
    let room = free.saturating_add(u64::from(share.unwrap_or(0)));
    let sticky = share.is_some();
    // On one cluster, or duplicated, each cluster must hold every replica. Divided
    // over several, a cluster is useful if it holds one; whether the chosen set holds
    // them all is decided over the set, and a cluster the workload runs on stays a
    // candidate whatever its room.
    let spread = !duplicate && rule.needed() > 1;
    let whole = workload.whole_on(c);
    let need = if spread { 1 } else { u64::from(whole).max(1) };
    if room < need && !(sticky && spread) {
        return Err(Reason::Insufficient(limit));
    }
    if !sticky && !c.headroom.is_empty() && !c.headroom.iter().any(|h| workload.per_replica.fits(h)) {
        return Err(Reason::NoNodeFits);
    }
    Ok(Eligible { name: &c.name, room, whole, sticky, avoided, weight: weight.unwrap_or(0), groups, until, limit })
}

/// The Divide shares over `chosen`: the current ones when the clusters and the total
/// are unchanged and every share still fits, so that nothing moves without a reason;
/// otherwise a fresh split (see [`divide`]). An empty share, which older splits could
/// give, is never kept while there are replicas.
fn keep_or_divide(replicas: u32, chosen: &[&Eligible<'_>], current: &[Share]) -> Vec<Share> {
    let enough = replicas as usize >= chosen.len();
    // With fewer replicas than clusters, a split runs one replica on each of as many
    // clusters as there are replicas, and leaves the others out.
    let spread = if enough || replicas == 0 { chosen.len() } else { replicas as usize };
    let unchanged = current.len() == spread
        && current.iter().map(|s| u64::from(s.replicas)).sum::<u64>() == u64::from(replicas)
        && current.iter().all(|s| chosen.iter().any(|e| e.name == s.cluster && u64::from(s.replicas) <= e.room))
        && !(replicas > 0 && current.iter().any(|s| s.replicas == 0));
    let rooms: Vec<u64> = chosen.iter().map(|e| e.room).collect();
    // Static weights decide the split by themselves (so a change of weights moves
    // replicas); room only caps it.
    if chosen.iter().any(|e| e.weight > 0) {
        let weights: Vec<u64> = chosen.iter().map(|e| e.weight).collect();
        return divide_by_weight(replicas, &weights, &rooms).into_iter().zip(chosen).map(|(n, e)| Share::new(e.name, n)).collect();
    }
    if unchanged {
        return current.to_vec();
    }
    divide(replicas, &rooms).into_iter().zip(chosen).map(|(n, e)| Share::new(e.name, n)).collect()
}

/// Splits `total` in proportion to `weights`, as Karmada's static weights do: each
/// slot gets the whole part of its proportional share, and the remainder goes one by
/// one to the heaviest slots (earlier slots win ties). A slot never gets more than its
/// room; what does not fit goes to the others, heaviest first. A slot may get nothing.
pub fn divide_by_weight(total: u32, weights: &[u64], rooms: &[u64]) -> Vec<u32> {
    let sum: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    let mut shares = vec![0u32; weights.len()];
    if sum == 0 {
        return shares;
    }
    for (i, w) in weights.iter().enumerate() {
        let proportional = u128::from(total) * u128::from(*w) / sum;
        shares[i] = u32::try_from(proportional.min(u128::from(rooms[i]))).unwrap_or(u32::MAX);
    }
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|a, b| weights[*b].cmp(&weights[*a]).then(a.cmp(b)));
    hand_out(&mut shares, rooms, &order, total);
    shares
}

/// Splits `total` over slots with room for `rooms` replicas: first one replica to
/// each slot, roomiest first, as far as `total` goes, so that every cluster a Placement
/// spreads a workload over runs part of it; then the rest in proportion to the room
/// left, never giving a slot more than its room; the remainder one by one to the
/// roomiest slots. Earlier slots win ties. The rooms must hold `total` together.
pub fn divide(total: u32, rooms: &[u64]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..rooms.len()).collect();
    order.sort_by(|a, b| rooms[*b].cmp(&rooms[*a]).then(a.cmp(b)));
    let mut shares = vec![0u32; rooms.len()];
    let mut rest = total;
    for &i in &order {
        if rest > 0 && rooms[i] > 0 {
            shares[i] = 1;
            rest -= 1;
        }
    }
    let left: Vec<u64> = rooms.iter().zip(&shares).map(|(r, s)| r - u64::from(*s)).collect();
    let sum: u128 = left.iter().map(|r| u128::from(*r)).sum();
    if rest == 0 || sum == 0 {
        return shares;
    }
    for (share, room) in shares.iter_mut().zip(&left) {
        let proportional = u128::from(rest) * u128::from(*room) / sum;
        *share += u32::try_from(proportional.min(u128::from(*room))).unwrap_or(u32::MAX);
    }
    hand_out(&mut shares, rooms, &order, total);
    shares
}

/// Gives what is left of `total` after `shares`, one replica at a time, to the slots
/// in `order` that still have room, round after round.
fn hand_out(shares: &mut [u32], rooms: &[u64], order: &[usize], total: u32) {
    let mut rest = total.saturating_sub(shares.iter().sum::<u32>());
    while rest > 0 {
        let mut gave = false;
        for &i in order {
            if rest > 0 && u64::from(shares[i]) < rooms[i] {
                shares[i] += 1;
                rest -= 1;
                gave = true;
            }
        }
        if !gave {
            break;
        }
    }
}

#[cfg(test)]
mod tests;
