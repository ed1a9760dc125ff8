//! Cluster health from heartbeats, and the scheduler's view of each cluster.
//!
//! A cluster is Ready while its syncer's heartbeat is younger than the grace period.
//! Age is measured on this process's monotonic clock from the moment a *new*
//! `lastSyncerHeartbeatTime` was observed, never from the wall-clock time the heartbeat
//! carries, the way the Kubernetes node lifecycle controller measures node heartbeats
//! (its `probeTimestamp` is the controller's own `now()` when it saw the change):
//! clock skew between a pull-mode syncer and the scheduler cannot fake or hide a
//! heartbeat, and a single failed request never changes anything. Only heartbeats
//! decide.
//!
//! When the scheduler starts, a cluster whose stored condition says Ready gets one
//! full grace period to show a heartbeat, so that a scheduler restart causes no false
//! NotReady; a cluster stored as not Ready stays so until it beats again.
//!
//! # When the scheduler could not observe
//!
//! The absence of a heartbeat says something about a cluster only while the scheduler
//! was able to see heartbeats arrive. The monotonic clock keeps running while this
//! process is stopped (SIGSTOP, a paused VM) or its async workers are starved by other
//! work, and heartbeats that could not land meanwhile (a saturated or restarting API)
//! look exactly like heartbeats that were never sent. Acting on that age at once moved
//! workloads off healthy clusters. So (DESIGN.md: "When the control plane itself could
//! not observe heartbeats ..., every cluster gets a fresh grace period from when
//! observation resumes"):
//!
//! - **The scheduler's own stall** ([`Gap::Stalled`]). A task that does nothing else
//!   calls [`Book::alive`] every 250 ms, and every judgement checks it too. A gap of
//!   more than a quarter of the grace (at least 1 s) since the scheduler was last seen
//!   running means it was not running: every cluster whose grace had not run out when
//!   it stopped gets a fresh grace from the moment it runs again. The check comes
//!   before any judgement, so no cluster is judged on the stale clock first, whichever
//!   task runs first after the stall. The ticker awaits nothing but its timer, so a
//!   slow API request of the health loop is not mistaken for a stall.
//! - **Silence of the whole fleet** ([`Gap::Silent`]). Clusters fail one by one; when
//!   no new heartbeat of *any* cluster has arrived for more than half the grace, it is
//!   more likely that heartbeats cannot reach the scheduler (the API is saturated, the
//!   watch is down, the control plane restarts) than that every cluster failed at
//!   once. While that lasts, and two clusters or more were Ready, the clock that
//!   judges clusters stands still, for at most one grace after the last heartbeat
//!   seen: without that, the cluster whose last beat happened to be seen first would
//!   be declared lost a moment before the others and its workloads moved to them (a
//!   lone cluster has nowhere to move its workloads to, so it is not held). When a heartbeat arrives again, every cluster
//!   that was Ready when the silence began gets a fresh grace from then (those
//!   declared lost during a silence longer than the grace too, as Kubernetes resets
//!   every node's probe time when it leaves full disruption). A silence that outlasts
//!   the grace is taken for what it looks like: every cluster is declared lost at
//!   once, so nothing moves (there is nowhere to move to), and a fleet that really
//!   died entirely is reported no later than one grace after its last heartbeat. A
//!   disconnected, lagging or relisting watch of SyncTargets needs no signal of its
//!   own: it shows as exactly this silence.
//!
//! A renewal can postpone the detection of a cluster that really died during the
//! impairment by up to one grace after observation resumes; that is the price of not
//! moving workloads on no evidence. Outside such gaps nothing changes: a lost cluster
//! is declared once its grace has passed while other clusters' heartbeats were seen.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use placement_api::quantity::Resources;
use placement_api::{
    ClusterTaint, SyncTarget, CONDITION_CLUSTER_REACHABLE, CONDITION_FAILOVER_PAUSED, CONDITION_HEARTBEAT_HEALTHY, CONDITION_READY,
};
use tokio::time::Instant;

use crate::core;

/// Everything about a cluster that can change a placement decision, apart from its
/// free room. Heartbeats that change none of it wake nothing up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Heartbeat within the grace period.
    pub ready: bool,
    /// Cordoned.
    pub cordoned: bool,
    /// `evictAfter` has passed.
    pub draining: bool,
    /// Not Ready, and held by the disruption brake: what runs there stays.
    pub braked: bool,
    /// An operator confirmed it lost at its current heartbeat (`flotilla cluster
    /// confirm-lost`): what waits for that (a StatefulSet, a CronJob) moves now.
    pub lost_confirmed: bool,
    /// Its labels.
    pub labels: Arc<BTreeMap<String, String>>,
    /// Its taints.
    pub taints: Arc<Vec<ClusterTaint>>,
}

/// One cluster as last observed.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The SyncTarget.
    pub target: Arc<SyncTarget>,
    /// The heartbeat time last seen.
    beat: Option<Time>,
    /// When a new heartbeat was last seen (None: none since this process started
    /// and the stored state says not Ready, or there never was one).
    beat_seen_at: Option<Instant>,
    /// Where its current grace period started: when a new heartbeat was last seen, or
    /// later, when the grace was renewed after the scheduler could not observe (see
    /// the module's doc). Readiness is judged from this; `beat_seen_at` stays the true
    /// age of the heartbeat, for the metrics.
    fresh_from: Option<Instant>,
    /// When it was judged lost (Ready before, not Ready since), while it stays lost.
    lost_at: Option<Instant>,
    /// Since when it has been Ready, while it is.
    ready_since: Option<Instant>,
    /// New heartbeats seen so far.
    pub beats: u64,
    /// Free room from the heartbeat.
    pub available: Resources,
    /// Per-node headroom from the heartbeat.
    pub headroom: Vec<Resources>,
    /// When this process first saw each of its taints, in `spec.taints` order: a
    /// taint without `timeAdded` is as old as that.
    taints_seen: Vec<Instant>,
    /// What the scheduler last acted on.
    pub signature: Signature,
}

impl Observed {
    /// How long ago this process saw the cluster's last new heartbeat; `None` if it
    /// has seen none and does not trust the stored state.
    pub fn heartbeat_age(&self) -> Option<Duration> {
        self.beat_seen_at.map(|s| s.elapsed())
    }
}

/// Why the scheduler could not observe heartbeats for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// The scheduler itself did not run: its process was stopped, or starved of CPU.
    Stalled,
    /// No new heartbeat of any cluster reached it: the API or the watch was stalled,
    /// saturated or restarting.
    Silent,
}

impl Gap {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Gap::Stalled => "Stalled",
            Gap::Silent => "Silent",
        }
    }

    /// Why, for the log.
    pub fn text(self, lasted: Duration) -> String {
        match self {
            Gap::Stalled => format!("the scheduler did not run for {lasted:.1?} (its process was stopped, or starved of CPU)"),
            Gap::Silent => format!(
                "no new heartbeat of any cluster reached the scheduler for {lasted:.1?} (the API or its watch was stalled, saturated or restarting)"
            ),
        }
    }
}

/// Every cluster's grace renewed after a gap in observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// Why the scheduler could not observe.
    pub cause: Gap,
    /// For how long.
    pub lasted: Duration,
    /// The clusters that got a fresh grace, by name (the cluster whose heartbeat ended
    /// a silence is not counted: it has its own).
    pub clusters: Vec<String>,
}

/// A silence of the whole fleet starting or ending to hold the judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// No heartbeat of any cluster for this long: missed heartbeats are not counted
    /// against anyone for now.
    Began(Duration),
    /// The silence has outlasted the grace: clusters are judged again.
    Ended(Duration),
}

/// What an observation changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observation {
    /// A new heartbeat.
    pub beat: bool,
    /// The free room grew in some resource: workloads waiting for room may fit now.
    pub room_grew: bool,
    /// The signature changed (or the cluster is new or gone).
    pub signature_changed: bool,
    /// Observation had been impaired, and every cluster got a fresh grace first.
    pub renewal: Option<Renewal>,
}

/// What a re-evaluation against the clock found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tick {
    /// The clusters whose signature changed.
    pub changed: Vec<String>,
    /// Observation had been impaired, and every cluster got a fresh grace first.
    pub renewal: Option<Renewal>,
    /// A silence of the whole fleet began or ended holding the judgement.
    pub hold: Option<Hold>,
    /// The disruption brake engaged, changed what it holds, or let go.
    pub brake: Option<BrakeState>,
}

/// The disruption brake, as reported.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BrakeState {
    /// It holds: the lost clusters' workloads are not moved.
    pub engaged: bool,
    /// The lost clusters it counts, by name: lost within one grace of each other, or
    /// since it engaged, and not back.
    pub lost: Vec<String>,
    /// Those of them whose loss an operator confirmed: their workloads move.
    pub confirmed: Vec<String>,
    /// Ready clusters whose heartbeat is more than half a grace late, counted with
    /// the lost ones: most likely the next to go.
    pub late: Vec<String>,
    /// The clusters Ready now.
    pub ready: usize,
}

impl BrakeState {
    /// The lost clusters it holds: counted, not confirmed.
    pub fn held(&self) -> impl Iterator<Item = &String> {
        self.lost.iter().filter(|c| !self.confirmed.contains(c))
    }

    /// Why workloads stay, for conditions, Events and the log. It names the lost
    /// clusters, not which are confirmed, so that it stays the same while the brake
    /// holds the same clusters (the log says which are confirmed).
    pub fn message(&self, grace: Duration) -> String {
        let total = self.ready + self.lost.len();
        let late = match self.late.len() {
            0 => String::new(),
            _ => format!(", and the heartbeats of {} are late", self.late.join(", ")),
        };
        format!(
            "{} of {total} clusters went NotReady within {}s of each other ({}){late}: more likely a fault between them and the control plane than in every one; \
             their workloads stay until the clusters return, or until `flotilla cluster confirm-lost NAME` for each that is really gone",
            self.lost.len(),
            grace.as_secs(),
            self.lost.join(", "),
        )
    }
}

/// What the disruption brake keeps between judgements.
#[derive(Debug, Default)]
struct Brake {
    /// The clusters it counts while engaged.
    lost: std::collections::BTreeSet<String>,
    /// What was last reported.
    reported: BrakeState,
}

/// The scheduler's evidence that it can observe heartbeats.
#[derive(Debug, Default)]
struct Sight {
    /// When the scheduler was last seen running: [`Book::alive`], or a judgement.
    alive_at: Option<Instant>,
    /// When a heartbeat last reached it: a new heartbeat of any cluster, a stored
    /// Ready trusted at start-up, or a renewal.
    sighted_at: Option<Instant>,
    /// The latest time clusters have been judged at. It never goes back, so that a
    /// cluster once judged lost is not brought back by the clock standing still.
    judged_to: Option<Instant>,
    /// The silence whose hold began, by when it began.
    held: Option<Instant>,
    /// A start or end of a hold not yet reported by [`Book::tick`].
    hold: Option<Hold>,
}

/// The scheduler's book of clusters.
pub struct Book {
    clusters: DashMap<String, Observed>,
    grace: Duration,
    /// The share of Ready clusters that may go NotReady within one grace before the
    /// brake holds their workloads (`--unhealthy-cluster-threshold`).
    threshold: f64,
    brake: Mutex<Brake>,
    /// A longer gap between two signs of life of the scheduler is a stall.
    stall_after: Duration,
    /// A longer time without a new heartbeat of any cluster is a silence.
    silent_after: Duration,
    sight: Mutex<Sight>,
}

/// The default `--unhealthy-cluster-threshold`: Kubernetes' node lifecycle
/// controller's `--unhealthy-zone-threshold`.
pub const DEFAULT_UNHEALTHY_THRESHOLD: f64 = 0.55;

/// The disruption brake's rule, which the scheduler and `flotilla what-if` both ask:
/// clusters lost at once hold their workloads when they are two or more, and more than
/// `threshold` (a share, 0 to 1) of the clusters that were Ready. One lost cluster never
/// engages it, however small the fleet.
pub fn brake_engaged(lost: usize, were_ready: usize, threshold: f64) -> bool {
    lost >= 2 && lost as f64 / were_ready.max(1) as f64 > threshold
}

/// The shortest gap taken for a stall of the scheduler: four periods of its ticker
/// (250 ms), so that ordinary scheduling delays under load never count.
const MIN_STALL: Duration = Duration::from_secs(1);

fn condition_status(t: &SyncTarget, type_: &str) -> Option<String> {
    t.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

fn room_of(t: &SyncTarget) -> (Resources, Vec<Resources>) {
    let Some(s) = t.status.as_ref() else { return (Resources::ZERO, Vec::new()) };
    let available = Resources::from_resource_list(&s.available).unwrap_or(Resources::ZERO);
    let headroom = s
        .node_headroom
        .iter()
        .filter_map(|h| {
            let cpu = placement_api::quantity::cpu_millis(&h.cpu).ok()?;
            let memory = placement_api::quantity::memory_bytes(&h.memory).ok()?;
            Some(Resources::new(cpu, memory, u64::try_from(h.pods).unwrap_or(0)))
        })
        .collect();
    (available, headroom)
}

/// How many nodes take pods, as the heartbeat says (0 when it does not).
fn nodes_of(t: &SyncTarget) -> u32 {
    t.status.as_ref().and_then(|s| s.nodes).map_or(0, |n| u32::try_from(n).unwrap_or(0))
}

/// Whether the syncer has reported the cluster's capacity. Its first heartbeats may
/// come before it has listed the nodes and pods; until then nothing can be placed
/// there with any confidence, so the cluster is not Ready.
fn capacity_known(t: &SyncTarget) -> bool {
    t.status.as_ref().is_some_and(|s| !s.allocatable.is_empty())
}

/// Whether an operator confirmed the cluster lost at its current heartbeat
/// (`flotilla cluster confirm-lost`).
fn lost_confirmed(t: &SyncTarget) -> bool {
    let Some(confirmed) = t.metadata.annotations.as_ref().and_then(|a| a.get(placement_api::LOST_CONFIRMED_ANNOTATION)) else {
        return false;
    };
    let beat = t.status.as_ref().and_then(|s| s.last_syncer_heartbeat_time.as_ref());
    match beat {
        Some(b) => confirmed.parse::<jiff::Timestamp>().is_ok_and(|c| c == b.0),
        None => confirmed == placement_api::LOST_CONFIRMED_NO_HEARTBEAT,
    }
}

/// A cluster as the scheduler last published it on its SyncTarget: its `Ready` and
/// `FailoverPaused` conditions, cordon, drain, labels and free room. `flotilla explain`
/// and `what-if` run the placement core on these; only the room the scheduler assumes
/// for assignments so recent that no heartbeat shows them yet is not in it.
pub fn published_view(t: &SyncTarget, now: jiff::Timestamp) -> core::Cluster {
    let (available, headroom) = room_of(t);
    core::Cluster {
        name: t.metadata.name.clone().unwrap_or_default(),
        labels: Arc::new(t.metadata.labels.clone().unwrap_or_default()),
        ready: condition_status(t, CONDITION_READY).as_deref() == Some("True"),
        braked: condition_status(t, CONDITION_FAILOVER_PAUSED).as_deref() == Some("True"),
        cordoned: t.spec.unschedulable,
        draining: draining(t, now),
        available,
        headroom,
        nodes: nodes_of(t),
        taints: Arc::new(t.spec.taints.iter().map(|taint| taint_view(taint, now, None)).collect()),
    }
}

/// A taint as the placement core takes it: its age from its `timeAdded`, or else from
/// `seen` (how long ago this process first saw it; zero when unknown).
fn taint_view(t: &ClusterTaint, now: jiff::Timestamp, seen: Option<Duration>) -> core::Taint {
    let age = match &t.time_added {
        Some(added) => now.duration_since(added.0).try_into().unwrap_or(Duration::ZERO),
        None => seen.unwrap_or(Duration::ZERO),
    };
    core::Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect, age }
}

/// When each of `taints` was first seen: as before for those it had (`before`, seen at
/// `seen`), `now` for new ones.
fn taints_seen(before: &[ClusterTaint], seen: &[Instant], taints: &[ClusterTaint], now: Instant) -> Vec<Instant> {
    taints
        .iter()
        .map(|t| {
            before.iter().zip(seen).find(|(b, _)| b.key == t.key && b.value == t.value && b.effect == t.effect).map_or(now, |(_, at)| *at)
        })
        .collect()
}

/// Whether `evictAfter` has passed at `now`.
pub fn draining(t: &SyncTarget, now: jiff::Timestamp) -> bool {
    t.spec.evict_after.as_ref().is_some_and(|e| e.0 <= now)
}

impl Book {
    /// An empty book with the given heartbeat grace.
    pub fn new(grace: Duration) -> Self {
        Book {
            clusters: DashMap::new(),
            grace,
            // A stall shorter than this leaves a healthy cluster's next heartbeat
            // (due every quarter of the grace by default) time to land in the grace.
            stall_after: (grace / 4).max(MIN_STALL),
            // Two default heartbeat intervals of every cluster at once.
            silent_after: grace / 2,
            sight: Mutex::new(Sight::default()),
            threshold: DEFAULT_UNHEALTHY_THRESHOLD,
            brake: Mutex::new(Brake::default()),
        }
    }

    /// The same book with the brake's threshold at `threshold` (a share, 0 to 1).
    pub fn with_threshold(mut self, threshold: f64) -> Self {
        self.threshold = threshold;
        self
    }

    /// The heartbeat grace.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    fn sight(&self) -> std::sync::MutexGuard<'_, Sight> {
        self.sight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says that the scheduler runs at `now`. Call it often (every 250 ms) from a
    /// task that awaits nothing else; after a stall it renews every cluster's grace,
    /// and says so.
    pub fn alive(&self, now: Instant) -> Option<Renewal> {
        let mut sight = self.sight();
        self.check_stall(&mut sight, now)
    }

    fn check_stall(&self, sight: &mut Sight, now: Instant) -> Option<Renewal> {
        let last = sight.alive_at;
        sight.alive_at = Some(last.map_or(now, |l| l.max(now)));
        let lasted = now.saturating_duration_since(last?);
        if lasted <= self.stall_after {
            return None;
        }
        let clusters = self.renew(last?, now, None);
        if clusters.is_empty() {
            return None;
        }
        sight.sighted_at = Some(now);
        Some(Renewal { cause: Gap::Stalled, lasted, clusters })
    }

    /// Starts a fresh grace at `now` for every cluster whose grace had not run out at
    /// `since`, when observation was lost; returns their names but `except`'s.
    fn renew(&self, since: Instant, now: Instant, except: Option<&str>) -> Vec<String> {
        let mut renewed = Vec::new();
        for mut o in self.clusters.iter_mut() {
            if o.fresh_from.is_some_and(|f| f + self.grace >= since && f < now) {
                o.fresh_from = Some(now);
                if except != Some(o.key().as_str()) {
                    renewed.push(o.key().clone());
                }
            }
        }
        renewed.sort();
        renewed
    }

    /// Renews the grace of cluster `name` at `now` if it was Ready at `since`, when its
    /// syncer went silent with the replica that ran it (crate::syncers): the silence of
    /// its heartbeat is the control plane's. Returns whether it did.
    pub fn hold(&self, name: &str, since: Instant, now: Instant) -> bool {
        match self.clusters.get_mut(name) {
            Some(mut o) if o.fresh_from.is_some_and(|f| f + self.grace >= since && f < now) => {
                o.fresh_from = Some(now);
                true
            }
            _ => false,
        }
    }

    /// The time clusters are judged at, at `now`, after any renewal that must come
    /// first. `beat` names the cluster whose new heartbeat is being taken in.
    fn judge(&self, now: Instant, beat: Option<&str>) -> (Instant, Option<Renewal>) {
        let mut sight = self.sight();
        let mut renewal = self.check_stall(&mut sight, now);
        if let Some(name) = beat {
            let silence = sight.sighted_at.map(|s| (s, now.saturating_duration_since(s)));
            if let (Some((since, lasted)), None) = (silence, &renewal) {
                if lasted > self.silent_after {
                    let clusters = self.renew(since, now, Some(name));
                    if !clusters.is_empty() {
                        renewal = Some(Renewal { cause: Gap::Silent, lasted, clusters });
                    }
                }
            }
            sight.sighted_at = Some(now);
        }
        let at = match sight.sighted_at {
            Some(s) => {
                let silent = now.saturating_duration_since(s);
                if silent > self.grace {
                    if sight.held.take().is_some() {
                        sight.hold = Some(Hold::Ended(silent));
                    }
                    now
                } else if silent > self.silent_after && self.ready_at_least_two(s) {
                    if sight.held != Some(s) {
                        sight.held = Some(s);
                        sight.hold = Some(Hold::Began(silent));
                    }
                    s
                } else {
                    sight.held = None;
                    now
                }
            }
            None => now,
        };
        let at = sight.judged_to.map_or(at, |j| j.max(at));
        sight.judged_to = Some(at);
        (at, renewal)
    }

    /// Whether two clusters or more were Ready at `at`. With fewer, the loss of one
    /// cannot move workloads to another, and there is nothing to hold.
    fn ready_at_least_two(&self, at: Instant) -> bool {
        self.clusters.iter().filter(|o| o.fresh_from.is_some_and(|f| f + self.grace >= at)).nth(1).is_some()
    }

    fn ready_at(&self, fresh_from: Option<Instant>, at: Instant) -> bool {
        fresh_from.is_some_and(|s| at.saturating_duration_since(s) <= self.grace)
    }

    fn signature(&self, t: &SyncTarget, fresh_from: Option<Instant>, at: Instant) -> Signature {
        Signature {
            ready: self.ready_at(fresh_from, at) && capacity_known(t),
            cordoned: t.spec.unschedulable,
            draining: draining(t, jiff::Timestamp::now()),
            braked: false,
            lost_confirmed: lost_confirmed(t),
            labels: Arc::new(t.metadata.labels.clone().unwrap_or_default()),
            taints: Arc::new(t.spec.taints.clone()),
        }
    }

    /// Takes in a SyncTarget from the watch.
    pub fn observe(&self, t: Arc<SyncTarget>) -> Observation {
        self.observe_at(t, Instant::now())
    }

    /// Takes in a SyncTarget from the watch, seen at `now`.
    pub fn observe_at(&self, t: Arc<SyncTarget>, now: Instant) -> Observation {
        let Some(name) = t.metadata.name.clone() else { return Observation::default() };
        let beat = t.status.as_ref().and_then(|s| s.last_syncer_heartbeat_time.clone());
        let (available, headroom) = room_of(&t);
        let known = self.clusters.get(&name).map(|o| o.beat.clone());
        // First sight: trust a stored Ready for one grace period.
        let trusted = beat.is_some() && condition_status(&t, CONDITION_READY).as_deref() != Some("False");
        let new_beat = match &known {
            Some(last) => beat.is_some() && beat != *last,
            None => trusted,
        };
        // Before anything is judged: the guard above is dropped, as `judge` may renew
        // every cluster.
        let (at, renewal) = self.judge(now, new_beat.then_some(name.as_str()));
        let mut out = Observation { renewal, ..Observation::default() };
        match self.clusters.get_mut(&name) {
            Some(mut o) => {
                if new_beat {
                    o.beat_seen_at = Some(now);
                    o.fresh_from = Some(now);
                    o.beats += 1;
                    out.beat = true;
                }
                o.beat = beat;
                out.room_grew = available.cpu_millis > o.available.cpu_millis
                    || available.memory_bytes > o.available.memory_bytes
                    || available.pods > o.available.pods;
                o.available = available;
                o.headroom = headroom;
                o.taints_seen = taints_seen(&o.signature.taints, &o.taints_seen, &t.spec.taints, now);
                let mut sig = self.signature(&t, o.fresh_from, at);
                if o.signature.ready && !sig.ready {
                    // Losses are judged by the tick, all clusters at once, so that the
                    // brake sees every cluster lost at the same time together.
                    sig.ready = true;
                } else if !sig.ready {
                    sig.braked = o.signature.braked;
                }
                out.signature_changed = sig != o.signature;
                if sig.ready && !o.signature.ready {
                    o.ready_since = Some(now);
                }
                o.signature = sig;
                o.target = t;
            }
            None => {
                let seen = trusted.then_some(now);
                let taints = t.spec.taints.len();
                let signature = self.signature(&t, seen, at);
                let o = Observed {
                    target: t,
                    beat,
                    beat_seen_at: seen,
                    fresh_from: seen,
                    lost_at: None,
                    ready_since: signature.ready.then_some(now),
                    beats: 0,
                    available,
                    headroom,
                    taints_seen: vec![now; taints],
                    signature,
                };
                self.clusters.insert(name, o);
                out.room_grew = true;
                out.signature_changed = true;
            }
        }
        out
    }

    /// Forgets a deleted SyncTarget.
    pub fn remove(&self, name: &str) {
        self.clusters.remove(name);
    }

    /// Re-evaluates every cluster against the clock: the clusters whose signature
    /// changed (a heartbeat aged past the grace, an `evictAfter` passed).
    pub fn tick(&self) -> Tick {
        self.tick_at(Instant::now())
    }

    /// [`Book::tick`] at `now`.
    pub fn tick_at(&self, now: Instant) -> Tick {
        let (at, renewal) = self.judge(now, None);
        let hold = self.sight().hold.take();
        for mut o in self.clusters.iter_mut() {
            let ready = self.signature(&o.target, o.fresh_from, at).ready;
            match (o.signature.ready, ready) {
                (true, false) => o.lost_at = Some(at),
                (_, true) => o.lost_at = None,
                _ => {}
            }
        }
        let (held, brake) = self.judge_brake(at);
        let mut changed = Vec::new();
        for mut o in self.clusters.iter_mut() {
            let mut sig = self.signature(&o.target, o.fresh_from, at);
            sig.braked = !sig.ready && held.contains(o.key());
            match (o.signature.ready, sig.ready) {
                (false, true) => o.ready_since = Some(now),
                (_, false) => o.ready_since = None,
                _ => {}
            }
            if sig != o.signature {
                o.signature = sig;
                changed.push(o.key().clone());
            }
        }
        changed.sort();
        Tick { changed, renewal, hold, brake }
    }

    /// The disruption brake at judgement time `at` (Kubernetes' node lifecycle
    /// controller stops evicting when too much of a zone looks down at once, because
    /// the fault is then more likely on the observer's side). It counts the clusters
    /// lost within one grace, and once it holds, every cluster lost since that is not
    /// back. With the Ready clusters whose heartbeat is already more than half a grace
    /// late (lost at the same moment, a heartbeat's phase later: they are the next to
    /// go), they must make up more than the threshold of the clusters that were Ready,
    /// and be two or more. Returns the clusters it holds (counted, and not confirmed
    /// lost by an operator), and its state when that changed.
    fn judge_brake(&self, at: Instant) -> (std::collections::BTreeSet<String>, Option<BrakeState>) {
        use std::collections::BTreeSet;
        let (mut ready, mut late) = (0usize, Vec::new());
        let (mut recent, mut down, mut confirmed) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for o in self.clusters.iter() {
            if self.ready_at(o.fresh_from, at) && capacity_known(&o.target) {
                ready += 1;
                if o.fresh_from.is_some_and(|f| at.saturating_duration_since(f) > self.grace / 2) {
                    late.push(o.key().clone());
                }
            } else if let Some(lost) = o.lost_at {
                down.insert(o.key().clone());
                if at.saturating_duration_since(lost) <= self.grace {
                    recent.insert(o.key().clone());
                }
                if lost_confirmed(&o.target) {
                    confirmed.insert(o.key().clone());
                }
            }
        }
        let mut brake = self.brake.lock().unwrap_or_else(|e| e.into_inner());
        let counted: BTreeSet<String> = brake.lost.intersection(&down).cloned().chain(recent).collect();
        let engaged = !counted.is_empty() && brake_engaged(counted.len() + late.len(), ready + counted.len(), self.threshold);
        late.sort();
        brake.lost = if engaged { counted } else { BTreeSet::new() };
        let state = BrakeState {
            engaged,
            lost: brake.lost.iter().cloned().collect(),
            confirmed: brake.lost.intersection(&confirmed).cloned().collect(),
            late: if engaged { late } else { Vec::new() },
            ready,
        };
        let held = state.held().cloned().collect();
        // Only its engaging, what it holds and its letting go are news; the count of
        // Ready clusters alone is not.
        let news =
            (state.engaged, &state.lost, &state.confirmed) != (brake.reported.engaged, &brake.reported.lost, &brake.reported.confirmed);
        brake.reported = state.clone();
        (held, news.then_some(state))
    }

    /// The disruption brake as last judged.
    pub fn brake(&self) -> BrakeState {
        self.brake.lock().unwrap_or_else(|e| e.into_inner()).reported.clone()
    }

    /// The first moment a cluster now Ready has gone a whole grace period without a
    /// new heartbeat, so that the health loop can look exactly then rather than at its
    /// next tick. `None` when no cluster is Ready on a heartbeat. When that moment has
    /// passed and the cluster is still Ready, the fleet is silent and the judgement
    /// held: then it is when the hold ends.
    pub fn next_expiry(&self) -> Option<Instant> {
        let first = self.clusters.iter().filter(|o| o.signature.ready).filter_map(|o| o.fresh_from).min()? + self.grace;
        let now = Instant::now();
        if first > now {
            return Some(first);
        }
        let held_until = self.sight().sighted_at? + self.grace;
        (held_until > now).then_some(held_until)
    }

    /// How long `name` has been Ready, if it is.
    pub fn ready_for(&self, name: &str) -> Option<Duration> {
        self.clusters.get(name).filter(|o| o.signature.ready).and_then(|o| o.ready_since).map(|s| s.elapsed())
    }

    /// How many new heartbeats of `name` have been seen (0 for an unknown cluster).
    pub fn beats(&self, name: &str) -> u64 {
        self.clusters.get(name).map_or(0, |o| o.beats)
    }

    /// Whether a SyncTarget of this name is registered.
    pub fn knows(&self, name: &str) -> bool {
        self.clusters.contains_key(name)
    }

    /// A copy of one cluster's record.
    pub fn get(&self, name: &str) -> Option<Observed> {
        self.clusters.get(name).map(|o| o.clone())
    }

    /// Every cluster's record.
    pub fn all(&self) -> Vec<Observed> {
        self.clusters.iter().map(|o| o.clone()).collect()
    }

    /// The clusters as the placement core sees them, with `assumed(name)` taken off
    /// each one's free room.
    pub fn views(&self, assumed: impl Fn(&str) -> Resources) -> Vec<core::Cluster> {
        let (now, wall) = (Instant::now(), jiff::Timestamp::now());
        let no_taints: Arc<Vec<core::Taint>> = Arc::default();
        self.clusters
            .iter()
            .map(|o| core::Cluster {
                // Most clusters have no taints: they share one empty list, so a decision
                // allocates nothing for them.
                taints: if o.signature.taints.is_empty() {
                    no_taints.clone()
                } else {
                    Arc::new(
                        o.signature
                            .taints
                            .iter()
                            .zip(&o.taints_seen)
                            .map(|(t, seen)| taint_view(t, wall, Some(now.saturating_duration_since(*seen))))
                            .collect(),
                    )
                },
                name: o.key().clone(),
                labels: o.signature.labels.clone(),
                ready: o.signature.ready,
                braked: o.signature.braked,
                cordoned: o.signature.cordoned,
                draining: o.signature.draining,
                available: o.available.saturating_sub(assumed(o.key())),
                headroom: o.headroom.clone(),
                nodes: nodes_of(&o.target),
            })
            .collect()
    }
}

/// The `Ready` and `HeartbeatHealthy` conditions, `FailoverPaused` while `paused` says
/// why the disruption brake holds the cluster, and the `schedulable` column for one
/// cluster, or `None` when what is stored already says so. Other conditions (the
/// syncer's `ClusterReachable`) are kept.
pub fn desired_status(o: &Observed, grace: Duration, now: &Time, paused: Option<&str>) -> Option<(Vec<Condition>, String)> {
    let t = &o.target;
    let stored = t.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let (status, reason, message) = if o.signature.ready {
        ("True", "HeartbeatCurrent", format!("the syncer's heartbeat is within the {}s grace", grace.as_secs()))
    } else if o.beat.is_none() {
        (
            "False",
            "NoHeartbeat",
            "the syncer has not reported yet; start it (flotilla syncer, or register the cluster in push mode) and check its logs"
                .to_string(),
        )
    } else if !capacity_known(t) && o.beat_seen_at.is_some_and(|s| s.elapsed() <= grace) {
        (
            "False",
            "AwaitingCapacity",
            "the syncer beats but has not reported the cluster's capacity yet; it does once it has listed the nodes and pods".to_string(),
        )
    } else {
        let last = o.beat.as_ref().map(|b| b.0.to_string()).unwrap_or_default();
        let unreachable = stored
            .iter()
            .find(|c| c.type_ == CONDITION_CLUSTER_REACHABLE && c.status == "False")
            .map(|c| format!("; the syncer last said: {}", c.message))
            .unwrap_or_default();
        (
            "False",
            "HeartbeatMissed",
            format!(
                "no heartbeat for more than {}s (last at {last}){unreachable}; check the cluster's API and the syncer's logs",
                grace.as_secs()
            ),
        )
    };
    let schedulable = if o.signature.draining {
        "Draining"
    } else if o.signature.cordoned {
        "Cordoned"
    } else {
        "True"
    };
    let mut conditions = stored.clone();
    for type_ in [CONDITION_HEARTBEAT_HEALTHY, CONDITION_READY] {
        let next = Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.clone(),
            last_transition_time: now.clone(),
            observed_generation: t.metadata.generation,
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status == next.status && c.reason == next.reason => {}
            Some(c) => *c = next,
            None => conditions.push(next),
        }
    }
    match paused {
        Some(why) => {
            let next = Condition {
                type_: CONDITION_FAILOVER_PAUSED.into(),
                status: "True".into(),
                reason: "DisruptionBrake".into(),
                message: why.into(),
                last_transition_time: now.clone(),
                observed_generation: t.metadata.generation,
            };
            match conditions.iter_mut().find(|c| c.type_ == CONDITION_FAILOVER_PAUSED) {
                Some(c) if c.message == next.message => {}
                Some(c) => *c = Condition { last_transition_time: c.last_transition_time.clone(), ..next },
                None => conditions.push(next),
            }
        }
        None => conditions.retain(|c| c.type_ != CONDITION_FAILOVER_PAUSED),
    }
    let stored_schedulable = t.status.as_ref().and_then(|s| s.schedulable.as_deref());
    (conditions != stored || stored_schedulable != Some(schedulable)).then(|| (conditions, schedulable.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_brake_holds_two_or_more_lost_past_the_threshold_of_those_that_were_ready() {
        use super::brake_engaged;
        // (lost, were Ready, threshold, engaged)
        for (lost, ready, threshold, engaged) in [
            (1, 1, 0.55, false), // one cluster alone never engages it
            (1, 2, 0.0, false),
            (2, 3, 0.55, true),  // 67% > 55%
            (2, 4, 0.55, false), // 50%
            (3, 5, 0.55, true),  // 60%
            (2, 3, 0.7, false),
            (2, 2, 0.99, true),
            (2, 0, 0.55, true), // nothing was counted Ready: all of it is lost
        ] {
            assert_eq!(brake_engaged(lost, ready, threshold), engaged, "{lost} of {ready} at {threshold}");
        }
    }

    use super::*;
    use placement_api::SyncTargetStatus;

    fn target(name: &str, beat: Option<i64>, ready: Option<&str>) -> Arc<SyncTarget> {
        let mut t = SyncTarget::new(name, Default::default());
        t.status = Some(SyncTargetStatus {
            last_syncer_heartbeat_time: beat.map(|s| Time(jiff::Timestamp::from_second(s).unwrap())),
            allocatable: BTreeMap::from([("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()))]),
            conditions: ready
                .map(|r| {
                    vec![Condition {
                        type_: CONDITION_READY.into(),
                        status: r.into(),
                        reason: "X".into(),
                        message: String::new(),
                        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                        observed_generation: None,
                    }]
                })
                .unwrap_or_default(),
            ..Default::default()
        });
        Arc::new(t)
    }

    const GRACE: Duration = Duration::from_secs(8);

    /// Lets `d` pass on the paused clock with the scheduler running: its ticker says
    /// so every 250 ms, as the controller's does, and finds no stall.
    async fn run_for(book: &Book, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            tokio::time::advance(Duration::from_millis(250).min(end.saturating_duration_since(Instant::now()))).await;
            assert_eq!(book.alive(Instant::now()), None, "no stall while the ticker runs");
        }
    }

    /// Lets `d` pass with the scheduler not running at all (SIGSTOP, starved workers).
    async fn stopped_for(d: Duration) {
        tokio::time::advance(d).await;
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn ready(book: &Book, name: &str) -> bool {
        book.get(name).is_some_and(|o| o.signature.ready)
    }

    /// A new heartbeat of `name` (its time, in seconds, only has to differ from the
    /// last one), which must change nothing else.
    fn beat(book: &Book, name: &str, at: i64) -> Observation {
        let o = book.observe(target(name, Some(at), Some("True")));
        assert!(o.beat, "{name}: {o:?}");
        o
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_goes_not_ready_after_the_grace_and_back_on_the_next_beat() {
        let book = Book::new(GRACE);
        let first = book.observe(target("east", Some(100), Some("True")));
        assert!(first.signature_changed);
        assert!(ready(&book, "east"), "a stored Ready cluster gets one grace period");
        run_for(&book, secs(7.0)).await;
        assert_eq!(book.tick(), Tick::default(), "a lone cluster's silence holds nothing: no other could take its workloads");
        // The same heartbeat again (another writer touched the object): not a beat.
        assert!(!book.observe(target("east", Some(100), Some("True"))).beat);
        assert_eq!(book.next_expiry(), Some(Instant::now() + secs(1.0)), "the grace ends 8 s after the beat was seen");
        run_for(&book, secs(1.0)).await;
        assert!(book.tick().changed.is_empty(), "a heartbeat exactly as old as the grace is still within it");
        run_for(&book, Duration::from_millis(1)).await;
        assert_eq!(book.tick().changed, vec!["east".to_string()]);
        assert!(!ready(&book, "east"));
        assert_eq!(book.next_expiry(), None, "a cluster that is not Ready has no grace to run out");
        let back = book.observe(target("east", Some(120), Some("False")));
        assert!(back.beat && back.signature_changed);
        assert_eq!(back.renewal, None, "the cluster's own heartbeat is no renewal of the others'");
        assert!(ready(&book, "east"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_cluster_keeps_its_grace_while_held_and_then_has_one_more() {
        let book = Book::new(GRACE);
        book.observe(target("east", Some(100), Some("True")));
        book.observe(target("west", Some(100), Some("True")));
        let quiet_from = Instant::now();
        for _ in 0..15 {
            run_for(&book, secs(1.0)).await;
            beat(&book, "west", 200 + Instant::now().duration_since(quiet_from).as_secs() as i64);
            assert!(book.hold("east", quiet_from, Instant::now()), "east was Ready when its syncer went quiet");
            assert!(book.tick().changed.is_empty(), "a held cluster stays Ready");
        }
        for i in 0..8 {
            run_for(&book, secs(1.0)).await;
            beat(&book, "west", 300 + i);
            assert!(book.tick().changed.is_empty(), "one whole grace after the hold ends");
        }
        run_for(&book, Duration::from_millis(1)).await;
        beat(&book, "west", 400);
        assert_eq!(book.tick().changed, vec!["east".to_string()], "then its missed heartbeats count");
        assert!(!book.hold("east", Instant::now(), Instant::now()), "a cluster that is not Ready is not held");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_stored_not_ready_or_without_heartbeat_waits_for_a_new_beat() {
        let book = Book::new(GRACE);
        book.observe(target("down", Some(100), Some("False")));
        book.observe(target("new", None, None));
        assert!(!ready(&book, "down"));
        assert!(!ready(&book, "new"));
        assert!(book.observe(target("new", Some(5), None)).signature_changed);
        assert!(ready(&book, "new"));
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_that_change_nothing_wake_nothing() {
        let book = Book::new(GRACE);
        book.observe(target("east", Some(1), Some("True")));
        for s in 2..10 {
            run_for(&book, secs(2.0)).await;
            let o = book.observe(target("east", Some(s), Some("True")));
            assert!(o.beat && !o.signature_changed && !o.room_grew && o.renewal.is_none(), "beat {s}: {o:?}");
            assert_eq!(book.tick(), Tick::default());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_conditions_are_written_only_when_they_change() {
        let book = Book::new(GRACE);
        book.observe(target("east", Some(1), None));
        let now = Time(jiff::Timestamp::from_second(1000).unwrap());
        let (conds, schedulable) =
            desired_status(&book.get("east").unwrap(), book.grace(), &now, None).expect("missing conditions are written");
        assert_eq!(schedulable, "True");
        assert!(conds.iter().all(|c| c.status == "True"));
        let mut t = (*target("east", Some(1), None)).clone();
        t.status.as_mut().unwrap().conditions = conds;
        t.status.as_mut().unwrap().schedulable = Some(schedulable);
        book.observe(Arc::new(t));
        assert_eq!(desired_status(&book.get("east").unwrap(), book.grace(), &now, None), None);
        run_for(&book, secs(9.0)).await;
        book.tick();
        let (conds, _) = desired_status(&book.get("east").unwrap(), book.grace(), &now, None).unwrap();
        let ready = conds.iter().find(|c| c.type_ == CONDITION_READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "HeartbeatMissed"));
        assert!(ready.message.contains("more than 8s"), "{}", ready.message);
    }

    /// east and west beating every 2 s, a second apart, for `beats` rounds: at the
    /// end west has just beaten, and east a second before.
    async fn two_beating(book: &Book, beats: i64) {
        book.observe(target("east", Some(0), Some("True")));
        book.observe(target("west", Some(0), Some("True")));
        for s in 1..=beats {
            run_for(book, secs(1.0)).await;
            beat(book, "east", s);
            run_for(book, secs(1.0)).await;
            beat(book, "west", s);
            assert_eq!(book.tick(), Tick::default());
        }
    }

    fn braked(book: &Book, name: &str) -> bool {
        book.get(name).is_some_and(|o| o.signature.braked)
    }

    /// Three clusters beating every 2 s, a little out of phase; then only those named
    /// in `beating` go on, for `secs` seconds, with the health loop ticking every 250 ms.
    /// Returns every Tick that reported something.
    async fn three_then(book: &Book, beating: &[&str], secs_: u32) -> Vec<Tick> {
        for name in ["east", "west", "north"] {
            book.observe(target(name, Some(0), Some("True")));
        }
        let mut s = 1;
        for _ in 0..3 {
            for name in ["east", "west", "north"] {
                run_for(book, secs(0.5)).await;
                beat(book, name, s);
            }
            run_for(book, secs(0.5)).await;
            s += 1;
            assert_eq!(book.tick(), Tick::default());
        }
        let mut ticks = Vec::new();
        for step in 0..secs_ * 4 {
            run_for(book, secs(0.25)).await;
            if step % 8 == 0 {
                s += 1;
                for name in beating {
                    beat(book, name, s);
                }
            }
            let t = book.tick();
            if t != Tick::default() {
                ticks.push(t);
            }
        }
        ticks
    }

    #[tokio::test(start_paused = true)]
    async fn two_of_three_lost_at_once_are_held_by_the_brake_until_confirmed_or_back() {
        let book = Book::new(GRACE);
        let ticks = three_then(&book, &["north"], 12).await;
        assert!(!ready(&book, "east") && !ready(&book, "west") && ready(&book, "north"));
        // The first loss already engages the brake: west, a heartbeat's phase behind
        // east, is more than half a grace late when east is declared lost.
        let first = ticks.iter().find(|t| !t.changed.is_empty()).expect("a loss");
        assert_eq!(first.changed, vec!["east".to_string()], "{ticks:?}");
        let b = first.brake.clone().expect("the brake engages with the first loss");
        assert!(b.engaged && b.lost == ["east"], "{b:?}");
        assert!(braked(&book, "east") && braked(&book, "west"), "both lost clusters are held");
        let state = book.brake();
        assert_eq!((state.lost.clone(), state.ready), (vec!["east".to_string(), "west".to_string()], 1));
        assert!(
            state.message(GRACE).starts_with("2 of 3 clusters went NotReady within 8s of each other (east, west)"),
            "{}",
            state.message(GRACE)
        );

        // An operator confirms east lost: east is let go, west stays held.
        // (At east's last heartbeat, second 3: a confirmation of an older one is stale.)
        let mut confirmed = (*target("east", Some(3), Some("False"))).clone();
        let confirm = |at: &str| Some(BTreeMap::from([(placement_api::LOST_CONFIRMED_ANNOTATION.to_string(), at.to_string())]));
        confirmed.metadata.annotations = confirm("1970-01-01T00:00:02Z");
        book.observe(Arc::new(confirmed.clone()));
        assert!(book.tick().changed.is_empty() && braked(&book, "east"), "a confirmation of another heartbeat counts for nothing");
        confirmed.metadata.annotations = confirm("1970-01-01T00:00:03Z");
        book.observe(Arc::new(confirmed));
        let t = book.tick();
        assert_eq!(t.changed, vec!["east".to_string()]);
        assert!(!braked(&book, "east") && braked(&book, "west"), "{t:?}");
        assert_eq!(t.brake.map(|b| b.confirmed), Some(vec!["east".to_string()]));

        // west comes back: 1 of 3 lost is an ordinary loss, and the brake lets go.
        beat(&book, "west", 100);
        let t = book.tick();
        assert!(t.brake.as_ref().is_some_and(|b| !b.engaged), "{t:?}");
        assert!(ready(&book, "west") && !braked(&book, "east"));
    }

    #[tokio::test(start_paused = true)]
    async fn one_of_three_lost_is_not_held() {
        let book = Book::new(GRACE);
        let ticks = three_then(&book, &["west", "north"], 12).await;
        assert!(!ready(&book, "east") && !braked(&book, "east"));
        assert!(ticks.iter().all(|t| t.brake.is_none()), "{ticks:?}");
        assert!(!book.brake().engaged);
    }

    #[tokio::test(start_paused = true)]
    async fn a_higher_threshold_lets_two_of_three_go() {
        let book = Book::new(GRACE).with_threshold(0.7);
        three_then(&book, &["north"], 12).await;
        assert!(!ready(&book, "east") && !ready(&book, "west"));
        assert!(!braked(&book, "east") && !braked(&book, "west") && !book.brake().engaged);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_cluster_is_declared_on_time_while_the_others_beat() {
        let book = Book::new(GRACE);
        two_beating(&book, 3).await;
        // east stops; west goes on. Nothing is renewed, nothing held: east is lost one
        // grace after its last heartbeat was seen, to the tick.
        let mut lost = None;
        for s in 4..=8 {
            for _ in 0..8 {
                run_for(&book, Duration::from_millis(250)).await;
                let t = book.tick();
                assert_eq!((t.renewal, t.hold), (None, None));
                if t.changed == ["east"] {
                    lost.get_or_insert(Instant::now());
                }
            }
            assert!(beat(&book, "west", s).renewal.is_none());
        }
        let east_seen = book.get("east").unwrap().beat_seen_at.unwrap();
        let lost = lost.expect("east is declared lost");
        assert!(lost > east_seen + GRACE && lost <= east_seen + GRACE + secs(0.25), "lost {:?} after its last beat", lost - east_seen);
        assert!(!ready(&book, "east") && ready(&book, "west"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_scheduler_renews_every_grace_before_judging_anyone() {
        let book = Book::new(GRACE);
        two_beating(&book, 3).await;
        // The process is stopped for 20 s: far past every grace on the monotonic clock.
        stopped_for(secs(20.0)).await;
        let resumed = Instant::now();
        let t = book.tick();
        let renewal = t.renewal.expect("the stall is noticed before anything is judged");
        assert_eq!((renewal.cause, renewal.lasted, renewal.clusters), (Gap::Stalled, secs(20.0), vec!["east".into(), "west".into()]));
        assert!(t.changed.is_empty(), "nobody is declared lost on what could not be observed");
        assert!(ready(&book, "east") && ready(&book, "west"));
        assert_eq!(book.alive(Instant::now()), None, "one stall is renewed once");
        // west beats again; east really died meanwhile: it is lost one grace after the
        // scheduler resumed, not before, and not much after.
        let mut lost = None;
        for s in 10..16 {
            for _ in 0..8 {
                run_for(&book, Duration::from_millis(250)).await;
                if book.tick().changed == ["east"] {
                    lost.get_or_insert(Instant::now());
                }
            }
            beat(&book, "west", s);
        }
        let lost = lost.expect("a cluster dead during the stall is still lost");
        assert!(lost > resumed + GRACE && lost <= resumed + GRACE + secs(0.25), "lost {:?} after the resume", lost - resumed);
        assert!(ready(&book, "west"));
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_stall_the_first_heartbeat_or_the_ticker_renews_before_judging() {
        for first in ["heartbeat", "ticker"] {
            let book = Book::new(GRACE);
            two_beating(&book, 3).await;
            stopped_for(secs(12.0)).await;
            let renewal = match first {
                // The watch's backlog is taken in before the health loop runs.
                "heartbeat" => {
                    let o = beat(&book, "west", 100);
                    assert!(!o.signature_changed, "{first}: {o:?}");
                    o.renewal
                }
                _ => book.alive(Instant::now()),
            };
            let renewal = renewal.unwrap_or_else(|| panic!("{first}: the stall renews every grace"));
            assert_eq!((renewal.cause, renewal.clusters.len()), (Gap::Stalled, 2), "{first}");
            assert!(book.tick().changed.is_empty(), "{first}: east is not judged on the stopped clock");
            assert!(ready(&book, "east"), "{first}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_stall_or_a_slow_ticker_renews_nothing() {
        let book = Book::new(GRACE);
        two_beating(&book, 1).await;
        // A quarter of the grace (2 s) without a sign of life is still ordinary delay.
        stopped_for(secs(2.0)).await;
        assert_eq!(book.alive(Instant::now()), None);
        assert_eq!(book.tick().renewal, None);
        // The floor: with a 2 s grace, a 0.9 s gap is no stall either.
        let short = Book::new(secs(2.0));
        short.observe(target("east", Some(0), Some("True")));
        stopped_for(secs(0.9)).await;
        assert_eq!(short.tick().renewal, None);
        stopped_for(secs(1.1)).await;
        assert_eq!(short.tick().renewal.map(|r| r.cause), Some(Gap::Stalled));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_fleet_holds_the_judgement_and_every_grace_is_renewed_when_heartbeats_return() {
        let book = Book::new(GRACE);
        two_beating(&book, 3).await;
        let west_seen = Instant::now();
        // The scheduler runs, but no heartbeat reaches it (the API is saturated). east
        // was seen last a second before west: on its own clock its grace ends first.
        let mut holds = Vec::new();
        for _ in 0..30 {
            run_for(&book, Duration::from_millis(250)).await;
            let t = book.tick();
            assert!(t.changed.is_empty(), "nobody is lost while every cluster is silent: {t:?}");
            holds.extend(t.hold);
        }
        assert_eq!(holds, vec![Hold::Began(secs(4.25))], "the hold begins past half the grace");
        assert!(ready(&book, "east") && ready(&book, "west"), "east is 8.5 s past its last heartbeat, and held");
        assert!(book.next_expiry().is_some_and(|e| e == west_seen + GRACE), "the health loop looks again when the hold ends");
        // Heartbeats land again: every cluster Ready when the silence began gets a
        // fresh grace from now, not just the one that beat.
        let back = Instant::now();
        let o = beat(&book, "west", 100);
        let renewal = o.renewal.expect("the end of a silence renews every grace");
        assert_eq!((renewal.cause, renewal.lasted, renewal.clusters), (Gap::Silent, secs(7.5), vec!["east".to_string()]));
        assert!(book.tick().changed.is_empty());
        // east's own heartbeat comes a moment later; had it died, it would be lost a
        // grace after the resume, while west beats.
        run_for(&book, secs(0.5)).await;
        let o = beat(&book, "east", 100);
        assert!(o.renewal.is_none() && !o.signature_changed, "{o:?}");
        assert!(book.get("east").unwrap().fresh_from.is_some_and(|f| f > back));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silence_longer_than_the_grace_declares_every_cluster_lost_at_once() {
        let book = Book::new(GRACE);
        two_beating(&book, 3).await;
        let west_seen = Instant::now();
        let mut changes = Vec::new();
        for _ in 0..48 {
            run_for(&book, Duration::from_millis(250)).await;
            let t = book.tick();
            if !t.changed.is_empty() || t.hold.is_some() {
                changes.push((Instant::now() - west_seen, t.changed, t.hold));
            }
        }
        assert_eq!(
            changes,
            vec![
                (secs(4.25), vec![], Some(Hold::Began(secs(4.25)))),
                (secs(8.25), vec!["east".to_string(), "west".to_string()], Some(Hold::Ended(secs(8.25)))),
            ],
            "both go together, one grace after the last heartbeat seen, so nothing can move from one to the other"
        );
        // Heartbeats come back (the API, not the clusters, was down): west's brings
        // east back too, for one grace, so east's workloads do not move to west in
        // the moment between the two.
        let o = beat(&book, "west", 100);
        assert_eq!(o.renewal.map(|r| (r.cause, r.clusters)), Some((Gap::Silent, vec!["east".to_string()])));
        assert_eq!(book.tick().changed, vec!["east".to_string()]);
        assert!(ready(&book, "east") && ready(&book, "west"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_lost_before_a_silence_stays_lost() {
        let book = Book::new(GRACE);
        two_beating(&book, 1).await;
        // east stops; west beats every 2 s until east's grace is over, then falls
        // silent too, just after its last heartbeat.
        for s in 2..=5 {
            run_for(&book, secs(2.0)).await;
            beat(&book, "west", s);
        }
        run_for(&book, secs(0.25)).await;
        assert_eq!(book.tick().changed, vec!["east".to_string()], "east is lost while west beats");
        run_for(&book, secs(6.0)).await;
        let t = book.tick();
        // (east may change by being braked: west, late, and east make all the fleet.)
        assert!(!t.changed.contains(&"west".to_string()), "the held clock does not go back to bring east back: {t:?}");
        assert!(!ready(&book, "east") && ready(&book, "west"));
        // And when west beats again, east, lost before the silence, gets no grace.
        assert_eq!(beat(&book, "west", 100).renewal, None);
        assert!(!ready(&book, "east"));
    }

    #[tokio::test(start_paused = true)]
    async fn at_start_up_the_trusted_grace_is_not_a_stall() {
        let book = Book::new(GRACE);
        // The caches take long to list: no judgement, no ticker yet.
        stopped_for(secs(30.0)).await;
        let o = book.observe(target("east", Some(1), Some("True")));
        assert_eq!(o.renewal, None);
        assert_eq!(book.alive(Instant::now()), None);
        assert!(ready(&book, "east"));
    }
}
