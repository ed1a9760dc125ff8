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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use placement_api::quantity::Resources;
use placement_api::ReplicaScheduling;

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
}

/// What one workload asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// `spec.replicas`.
    pub replicas: u32,
    /// The requests of one replica, including its pod slot.
    pub per_replica: Resources,
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
    /// The Placement's `clusterSelector` is malformed.
    Selector(SelectorError),
}

impl fmt::Display for NoFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoFit::Selector(e) => write!(f, "the Placement's clusterSelector is invalid: {e}"),
            NoFit::Clusters { total: 0, .. } => f.write_str("0/0 clusters fit: no clusters are registered"),
            NoFit::Clusters { total, fit, needed, reasons, holds } => {
                write!(f, "{fit}/{total} clusters fit")?;
                if *needed > 1 {
                    write!(f, " ({needed} needed)")?;
                }
                // Alphabetical by reason, as kube-scheduler sorts its FitError message.
                let mut counted: Vec<(String, usize)> = reasons.iter().map(|(r, n)| (r.to_string(), *n)).collect();
                counted.sort();
                let counted: Vec<String> = counted.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
                if !counted.is_empty() {
                    write!(f, ": {}", counted.join(", "))?;
                }
                if let Some((held, replicas)) = holds {
                    write!(f, "; the roomiest {needed} hold {held} of {replicas} replicas")?;
                }
                Ok(())
            }
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
    /// It runs the workload now.
    sticky: bool,
    /// What runs out first, for the message when the chosen ones hold too little.
    limit: Resource,
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
}

/// [`place`] for a workload that may spread over more clusters than it runs on now:
/// just the shares.
pub fn decide(clusters: &[Cluster], workload: &Workload, rule: &Rule<'_>, current: &[Share]) -> Result<Vec<Share>, NoFit> {
    place(clusters, workload, rule, current, true).map(|d| d.shares)
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
    let replicas = workload.replicas;
    let needed = rule.clusters.max(1);
    let duplicate = rule.mode == ReplicaScheduling::Duplicate;
    let mut sorted: Vec<&Cluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted.dedup_by(|a, b| a.name == b.name);

    let selector = selector::compile(rule.cluster_selector).map_err(NoFit::Selector)?;
    let mut reasons: BTreeMap<Reason, usize> = BTreeMap::new();
    let mut eligible: Vec<Eligible<'_>> = Vec::new();
    for c in &sorted {
        let share = current.iter().find(|s| s.cluster == c.name).map(|s| s.replicas);
        match evaluate(c, workload, &selector, rule, share, duplicate) {
            Ok(e) => eligible.push(e),
            Err(reason) => *reasons.entry(reason).or_default() += 1,
        }
    }
    let too_few =
        |reasons: BTreeMap<Reason, usize>, fit: usize, holds| NoFit::Clusters { total: sorted.len(), fit, needed, reasons, holds };
    if eligible.is_empty() {
        return Err(too_few(reasons, 0, None));
    }
    let fewer = (eligible.len() < needed as usize).then(|| too_few(reasons.clone(), eligible.len(), None));
    // As many clusters as asked for, or as it runs on now if fewer (a spread left
    // short by lost clusters is widened again by rebalancing only), and no more than fit.
    let wanted = match (may_spread, current.len()) {
        (true, _) | (false, 0) => needed as usize,
        (false, n) => n.min(needed as usize),
    };
    let take = wanted.min(eligible.len());

    // Sticky first, then the roomiest, then by name.
    eligible.sort_by(|a, b| b.sticky.cmp(&a.sticky).then(b.room.cmp(&a.room)).then(a.name.cmp(b.name)));
    let mut chosen: Vec<&Eligible<'_>> = eligible.iter().take(take).collect();
    let holds = |set: &[&Eligible<'_>]| set.iter().map(|e| e.room).fold(0u64, u64::saturating_add);
    if !duplicate && holds(&chosen) < u64::from(replicas) {
        // Where the workload runs cannot hold it any more (it grew): choose afresh.
        let mut roomiest: Vec<&Eligible<'_>> = eligible.iter().collect();
        roomiest.sort_by(|a, b| b.room.cmp(&a.room).then(a.name.cmp(b.name)));
        roomiest.truncate(take);
        let held = holds(&roomiest);
        if held < u64::from(replicas) {
            for e in &eligible {
                *reasons.entry(Reason::Insufficient(e.limit)).or_default() += 1;
            }
            return Err(too_few(reasons, 0, Some((held, replicas))));
        }
        chosen = roomiest;
    }

    let short = chosen.len() < needed as usize && (duplicate || replicas as usize > chosen.len());
    let mut shares: Vec<Share> =
        if duplicate { chosen.iter().map(|e| Share::new(e.name, replicas)).collect() } else { keep_or_divide(replicas, &chosen, current) };
    // A chosen cluster with nothing to run is not chosen (unless there is nothing to
    // run at all: a Deployment scaled to zero keeps its place).
    if replicas > 0 {
        shares.retain(|s| s.replicas > 0);
    }
    shares.sort();
    Ok(Decision { shares, fewer, short })
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
    /// where the workload runs now, then the most room, then the name.
    pub rank: Option<usize>,
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
    let decision = place(clusters, workload, rule, current, may_spread);
    let Ok(selector) = selector::compile(rule.cluster_selector) else { return (Vec::new(), decision) };
    let duplicate = rule.mode == ReplicaScheduling::Duplicate;
    let mut sorted: Vec<&Cluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted.dedup_by(|a, b| a.name == b.name);
    let mut rows: Vec<Considered> = sorted
        .iter()
        .map(|c| {
            let share = current.iter().find(|s| s.cluster == c.name).map(|s| s.replicas);
            let (turned_away, fits, sticky) = match evaluate(c, workload, &selector, rule, share, duplicate) {
                Ok(e) => (None, e.room, e.sticky),
                Err(r) => (Some(r), 0, share.is_some()),
            };
            Considered { cluster: c.name.clone(), turned_away, fits, sticky, rank: None, share: None }
        })
        .collect();
    let mut order: Vec<usize> = (0..rows.len()).filter(|i| rows[*i].turned_away.is_none()).collect();
    order.sort_by(|a, b| {
        let (a, b) = (&rows[*a], &rows[*b]);
        b.sticky.cmp(&a.sticky).then(b.fits.cmp(&a.fits)).then(a.cluster.cmp(&b.cluster))
    });
    for (rank, i) in order.into_iter().enumerate() {
        rows[i].rank = Some(rank + 1);
    }
    if let Ok(d) = &decision {
        for row in &mut rows {
            row.share = d.shares.iter().find(|s| s.cluster == row.cluster).map(|s| s.replicas);
        }
    }
    (rows, decision)
}

/// Whether one cluster could take the workload, whose rule selects clusters with
/// `selector`.
fn evaluate<'a>(
    c: &'a Cluster,
    workload: &Workload,
    selector: &apimachinery::selector::LabelSelector,
    rule: &Rule<'_>,
    share: Option<u32>,
    duplicate: bool,
) -> Result<Eligible<'a>, Reason> {
    // Under the brake a lost cluster keeps its share and takes nothing more.
    let kept_by_brake = c.braked && share.is_some();
    if !c.ready && !kept_by_brake {
        return Err(Reason::NotReady);
    }
    if c.draining {
        return Err(Reason::Draining);
    }
    if !selector.matches(c.labels.as_ref()) {
        return Err(Reason::NotSelected);
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
    let spread = !duplicate && rule.clusters > 1;
    let need = if spread { 1 } else { u64::from(workload.replicas).max(1) };
    if room < need && !(sticky && spread) {
        return Err(Reason::Insufficient(limit));
    }
    if !sticky && !c.headroom.is_empty() && !c.headroom.iter().any(|h| workload.per_replica.fits(h)) {
        return Err(Reason::NoNodeFits);
    }
    Ok(Eligible { name: &c.name, room, sticky, limit })
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
    if unchanged {
        return current.to_vec();
    }
    let rooms: Vec<u64> = chosen.iter().map(|e| e.room).collect();
    divide(replicas, &rooms).into_iter().zip(chosen).map(|(n, e)| Share::new(e.name, n)).collect()
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
    let mut rest = total - shares.iter().sum::<u32>();
    while rest > 0 {
        let mut gave = false;
        for &i in &order {
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
    shares
}

#[cfg(test)]
mod tests;
