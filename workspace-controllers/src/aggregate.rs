//! The upstream workloads' status, summed from their WorkloadPlacements.
//!
//! Each syncer reports its own cluster in the WorkloadPlacement; this controller, run
//! once in the control plane process, derives the WorkloadPlacement's summary,
//! conditions and state from the entries ([`status::derived`], [`status::set_state`])
//! and turns them into the
//! Deployment's `.status` ([`status::aggregate`]), so that `kubectl rollout status` and `kubectl wait
//! --for=condition=Available` work in a workspace. One writer for the Deployment
//! status means the syncers of different clusters never race on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{FutureExt, StreamExt};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::Client;
use placement_api::{SyncTarget, WorkloadPlacement, CONDITION_READY};
use serde_json::json;
use tokio::sync::mpsc;

use placement_api::status;
use placement_api::synced::Kind;
use placement_api::workload::Workload;
use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{failed, is_conflict, is_not_found, Failed};
use runtime::key as cache;
use runtime::Key;

/// The field manager of the status fields the aggregator owns.
pub const FIELD_MANAGER: &str = "flotilla-status-aggregator";

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let mut controller = Controller::<Key>::new("status-aggregator").concurrency(8);
    let tx = controller.trigger();
    let wildcard = clients::workspace(&base, "*");
    // A WorkloadPlacement has its workload's name; it is kept under the key of
    // that name as a Deployment's, and its changes queue its workload, of the kind
    // it names.
    let placements = cache::spawn_indexed(
        Api::<WorkloadPlacement>::all(wildcard.clone()),
        watcher::Config::default(),
        |wp: &WorkloadPlacement| Key::upstream(Kind::Deployment, &wp.metadata),
        |k: &Key, wp: &WorkloadPlacement| Some(k.with_kind(Kind::placed_by(wp))),
        tx.clone(),
        "workloadplacements",
    );
    // The workloads come from caches rather than a GET per event: a moved
    // workload's WorkloadPlacement changes about seven times on its way to
    // Available. A workload's own changes (its generation) queue it too.
    let workloads = Arc::new(Workloads {
        deployments: spawn_kind(&wildcard, Kind::Deployment, &tx),
        stateful_sets: spawn_kind(&wildcard, Kind::StatefulSet, &tx),
        daemon_sets: spawn_kind(&wildcard, Kind::DaemonSet, &tx),
        jobs: spawn_kind(&wildcard, Kind::Job, &tx),
    });
    let lost = Arc::new(RwLock::new(BTreeSet::new()));
    // Shared as an Arc: every key's pass reads it.
    let registered: Arc<RwLock<Option<Arc<BTreeSet<String>>>>> = Arc::default();
    controller.spawn(watch_lost(
        clients::workspace(&base, placement_api::ROOT_WORKSPACE),
        lost.clone(),
        registered.clone(),
        placements.clone(),
        tx.clone(),
    ));
    let p = placements.clone();
    controller.resync(resync, move || p.entries().into_iter().map(|(k, wp)| k.with_kind(Kind::placed_by(&wp))).collect::<Vec<_>>());
    controller
        .run(|key| {
            // A key whose workload is not cached yet comes back when the first list of
            // its kind completes, which queues every key.
            let wp = placements.get(&key.with_kind(Kind::Deployment)).filter(|wp| Kind::placed_by(wp) == key.kind);
            let base = base.clone();
            let lost = lost.read().unwrap_or_else(|e| e.into_inner()).clone();
            let registered = registered.read().unwrap_or_else(|e| e.into_inner()).clone();
            let workloads = workloads.clone();
            async move {
                let Some(wp) = wp else { return Ok::<_, Failed>(Next::Done) };
                let pass = Pass { base: &base, key: &key, wp: &wp, lost: &lost, registered: registered.as_deref() };
                match key.kind {
                    Kind::Deployment => pass.run(workloads.deployments.get(&key)).await,
                    Kind::StatefulSet => pass.run(workloads.stateful_sets.get(&key)).await,
                    Kind::DaemonSet => pass.run(workloads.daemon_sets.get(&key)).await,
                    Kind::Job => pass.run(workloads.jobs.get(&key)).await,
                    _ => Ok(Next::Done),
                }
            }
        })
        .await;
}

/// The workloads of every kind, by key.
struct Workloads {
    deployments: Arc<cache::Cache<Deployment>>,
    stateful_sets: Arc<cache::Cache<StatefulSet>>,
    daemon_sets: Arc<cache::Cache<DaemonSet>>,
    jobs: Arc<cache::Cache<Job>>,
}

fn spawn_kind<K>(wildcard: &Client, kind: Kind, tx: &mpsc::UnboundedSender<Key>) -> Arc<cache::Cache<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + for<'de> k8s_openapi::serde::Deserialize<'de> + std::fmt::Debug + Send + Sync + 'static,
{
    cache::spawn(Api::<K>::all(wildcard.clone()), watcher::Config::default(), kind, Key::upstream, tx.clone(), kind.row().plural)
}

/// One pass over one workload's WorkloadPlacement.
struct Pass<'a> {
    base: &'a Client,
    key: &'a Key,
    wp: &'a WorkloadPlacement,
    lost: &'a BTreeSet<String>,
    registered: Option<&'a BTreeSet<String>>,
}

impl Pass<'_> {
    /// Sums the WorkloadPlacement's entries into its derived fields, and into the
    /// status of `d`, its workload ([`Workload::summed`]).
    async fn run<W>(&self, d: Option<Arc<W>>) -> Result<Next, Failed>
    where
        W: Workload
            + kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + for<'de> k8s_openapi::serde::Deserialize<'de>
            + std::fmt::Debug
            + Send
            + Sync,
    {
        let (key, wp) = (self.key, self.wp);
        let Some(d) = d else { return Ok(Next::Done) };
        // The entry of a cluster that was deregistered while the workload had
        // nowhere else to go has no syncer left to remove it.
        let orphaned = self.registered.map(|r| orphaned_entries(wp, r)).unwrap_or_default();
        if !orphaned.is_empty() {
            return remove_entries(self.base, key, wp, &orphaned).await;
        }
        // Lost clusters' reports are not counted (see `status::without_lost`).
        let view = status::without_lost(wp, self.lost);
        let client = clients::workspace(self.base, &key.workspace);
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
        let generation = d.meta().generation.unwrap_or(0);
        // First the WorkloadPlacement's derived fields: the syncers write only
        // their own entries, the scheduler its condition.
        let next = d.summed(&view, &now);
        let mut placed = status::derived(&view, generation, &now);
        let headline = d.headline(next.as_ref().or(d.status()));
        status::set_state(&mut placed, &view.spec.clusters, d.replicas(), &headline);
        let derived = status::aggregator_fields(&placed);
        if status::aggregator_fields(&wp.status.clone().unwrap_or_default()) != derived {
            let api: Api<WorkloadPlacement> = Api::namespaced(client.clone(), &key.namespace);
            match clients::apply_placement_status(&api, &key.name, FIELD_MANAGER, derived).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(Next::Done),
                Err(e) => return Err(failed(format!("writing the status of WorkloadPlacement {key}"))(e)),
            }
        }
        let Some(next) = next else { return Ok(Next::Done) };
        if d.status() == Some(&next) {
            return Ok(Next::Done);
        }
        // The aggregator is the only writer of this status and runs one key at a
        // time, so the patch needs no resourceVersion: a cached workload that is a
        // write behind would only make every patch conflict.
        // The status summed is the whole status: what it leaves out (a CronJob's Jobs
        // that ended, say) is taken out of the stored one.
        let stored = serde_json::to_value(d.status()).unwrap_or_default();
        let patch = json!({ "status": crate::companion_status::merge_diff(&stored, &serde_json::to_value(&next).unwrap_or_default()) });
        let api: Api<W> = Api::namespaced(client, &key.namespace);
        match api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(failed(format!("writing the status of {key}"))(e)),
        }
    }
}

/// Keeps `lost` ([`lost_clusters`]) from the SyncTargets in `root`, and queues the
/// workloads with an entry for a cluster that was lost or came back, so their status is
/// summed again.
async fn watch_lost(
    root: Client,
    lost: Arc<RwLock<BTreeSet<String>>>,
    registered: Arc<RwLock<Option<Arc<BTreeSet<String>>>>>,
    placements: Arc<cache::Cache<WorkloadPlacement>>,
    tx: mpsc::UnboundedSender<Key>,
) {
    let mut been_ready = BTreeMap::new();
    let (store, writer) = kube::runtime::reflector::store::<SyncTarget>();
    let mut changes = watcher(Api::<SyncTarget>::all(root), watcher::Config::default()).default_backoff().reflect(writer).boxed();
    while changes.next().await.is_some() {
        if store.wait_until_ready().now_or_never().is_none() {
            continue;
        }
        // Deregistered clusters: the workloads with an entry for one are looked at
        // again, so that an entry no syncer will remove is removed here.
        let names: BTreeSet<String> = store.state().iter().filter_map(|t| t.metadata.name.clone()).collect();
        let gone: BTreeSet<String> = {
            let mut held = registered.write().unwrap_or_else(|e| e.into_inner());
            if held.as_deref() == Some(&names) {
                BTreeSet::new()
            } else {
                let gone = held.as_ref().map(|h| h.difference(&names).cloned().collect()).unwrap_or_default();
                *held = Some(Arc::new(names));
                gone
            }
        };
        queue_with_entry_on(&placements, &gone, false, &tx);
        let now = lost_clusters(&store.state(), &mut been_ready);
        let changed: BTreeSet<String> = {
            let mut held = lost.write().unwrap_or_else(|e| e.into_inner());
            if *held == now {
                continue;
            }
            let changed = held.symmetric_difference(&now).cloned().collect();
            *held = now;
            changed
        };
        let (back, lost_now): (BTreeSet<String>, BTreeSet<String>) = {
            let held = lost.read().unwrap_or_else(|e| e.into_inner());
            changed.into_iter().partition(|c| !held.contains(c))
        };
        tracing::info!(lost = ?lost_now, back = ?back, "clusters lost or back; summing their workloads' status again");
        // A cluster that is back: its workloads at once.
        queue_with_entry_on(&placements, &back, false, &tx);
        // A lost cluster's workloads are mostly moved by the scheduler in the next few
        // seconds, and the move (or the scheduler's FailedScheduling) queues them
        // anyway. Summing them at once would write each one twice in a failover, so
        // only those still assigned there after a pause are queued, in case their
        // WorkloadPlacement changed before the loss was seen here.
        if !lost_now.is_empty() {
            let (placements, tx) = (placements.clone(), tx.clone());
            tokio::spawn(async move {
                tokio::time::sleep(LOST_REQUEUE_PAUSE).await;
                queue_with_entry_on(&placements, &lost_now, true, &tx);
            });
        }
    }
}

/// The lost clusters: those judged not Ready that have been Ready. A cluster whose syncer has
/// not reported yet (just registered, its first heartbeat or its capacity still to come)
/// is new, not lost, and has no reports to leave out. `been_ready` remembers, by name,
/// whether each cluster has been Ready; at first sight (this process just started) a
/// cluster has been if its syncer has reported its heartbeat and capacity, which the
/// scheduler requires for Ready.
fn lost_clusters(targets: &[Arc<SyncTarget>], been_ready: &mut BTreeMap<String, bool>) -> BTreeSet<String> {
    let mut lost = BTreeSet::new();
    let mut present = BTreeSet::new();
    for t in targets {
        let Some(name) = t.metadata.name.clone() else { continue };
        let status = t.status.as_ref();
        // No Ready condition: nobody has judged the cluster (no scheduler runs, or it
        // has not looked yet), so it is not lost.
        let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY)).map(|c| c.status == "True");
        let reported = status.is_some_and(|s| s.last_syncer_heartbeat_time.is_some() && !s.allocatable.is_empty());
        let been = been_ready.entry(name.clone()).or_insert(reported);
        *been |= ready == Some(true);
        if ready == Some(false) && *been {
            lost.insert(name.clone());
        }
        present.insert(name);
    }
    been_ready.retain(|name, _| present.contains(name));
    lost
}

/// The status entries of clusters that are neither assigned nor registered.
fn orphaned_entries(wp: &WorkloadPlacement, registered: &BTreeSet<String>) -> Vec<String> {
    wp.status
        .iter()
        .flat_map(|s| &s.clusters)
        .filter(|c| !registered.contains(&c.name) && !wp.spec.clusters.iter().any(|a| a.name == c.name))
        .map(|c| c.name.clone())
        .collect()
}

/// Removes `names`' entries from the status, as a syncer removes its own: a replace
/// guarded by the resourceVersion it was computed from. Its watch event brings the
/// workload back to be summed.
async fn remove_entries(base: &Client, key: &Key, wp: &WorkloadPlacement, names: &[String]) -> Result<Next, Failed> {
    let mut next = wp.clone();
    let mut status = wp.status.clone().unwrap_or_default();
    status.clusters.retain(|c| !names.contains(&c.name));
    next.status = Some(status);
    let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(base, &key.workspace), &key.namespace);
    match api.replace_status(&key.name, &PostParams::default(), &next).await {
        Ok(_) => {
            tracing::info!(clusters = ?names, "removed the status entries of deregistered clusters");
            Ok(Next::Done)
        }
        Err(e) if is_conflict(&e) => Ok(Next::After(Duration::from_millis(50))),
        Err(e) if is_not_found(&e) => Ok(Next::Done),
        Err(e) => Err(failed(format!("removing deregistered clusters' entries from WorkloadPlacement {key}"))(e)),
    }
}

/// How long after a cluster is lost its stranded workloads are summed again.
const LOST_REQUEUE_PAUSE: Duration = Duration::from_secs(5);

/// Queues the workloads with a status entry for one of `clusters` (and, with
/// `assigned`, still assigned there).
fn queue_with_entry_on(
    placements: &cache::Cache<WorkloadPlacement>,
    clusters: &BTreeSet<String>,
    assigned: bool,
    tx: &mpsc::UnboundedSender<Key>,
) {
    if clusters.is_empty() {
        return;
    }
    for key in placements.keys() {
        let hit = placements.get(&key).filter(|wp| {
            wp.status.iter().flat_map(|s| &s.clusters).any(|c| clusters.contains(&c.name))
                && (!assigned || wp.spec.clusters.iter().any(|a| clusters.contains(&a.name)))
        });
        if let Some(wp) = hit {
            let _ = tx.send(key.with_kind(Kind::placed_by(&wp)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use placement_api::{ClusterAssignment, ClusterSyncStatus, SyncTargetStatus, WorkloadPlacementSpec, WorkloadPlacementStatus};

    /// A SyncTarget with a Ready condition (`None`: none written yet), and whether its
    /// syncer has reported a heartbeat with the capacity.
    fn target(name: &str, ready: Option<&str>, reported: bool) -> Arc<SyncTarget> {
        let mut t = SyncTarget::new(name, Default::default());
        let condition = |status: &str| Condition {
            type_: CONDITION_READY.into(),
            status: status.into(),
            reason: "Test".into(),
            message: String::new(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        };
        t.status = Some(SyncTargetStatus {
            conditions: ready.map(condition).into_iter().collect(),
            last_syncer_heartbeat_time: reported.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
            allocatable: if reported { [("cpu".to_string(), Quantity("4".into()))].into() } else { Default::default() },
            ..Default::default()
        });
        Arc::new(t)
    }

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_new_cluster_is_not_lost_before_it_was_ever_ready() {
        let mut been = BTreeMap::new();
        // As `flotilla up` registers the fleet: no status, then NotReady until the
        // first heartbeat, a heartbeat without the capacity, then Ready.
        assert!(lost_clusters(&[target("east", None, false)], &mut been).is_empty());
        assert!(lost_clusters(&[target("east", Some("False"), false)], &mut been).is_empty());
        let mut beating = (*target("east", Some("False"), false)).clone();
        beating.status.as_mut().unwrap().last_syncer_heartbeat_time = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(lost_clusters(&[Arc::new(beating)], &mut been).is_empty(), "a first heartbeat without the capacity");
        assert!(lost_clusters(&[target("east", Some("True"), true)], &mut been).is_empty());
        // Once it has been Ready, losing it is a loss.
        assert_eq!(names(&lost_clusters(&[target("east", Some("False"), true)], &mut been)), ["east"]);
        assert!(lost_clusters(&[target("east", Some("True"), true)], &mut been).is_empty(), "back");
    }

    #[test]
    fn at_first_sight_a_cluster_not_ready_is_lost_if_its_syncer_had_reported() {
        // The control plane restarts and finds one cluster stored NotReady after
        // heartbeats, and one that never beat.
        let mut been = BTreeMap::new();
        let lost = lost_clusters(
            &[target("west", Some("False"), true), target("new", Some("False"), false), target("unjudged", None, true)],
            &mut been,
        );
        assert_eq!(names(&lost), ["west"], "a cluster no scheduler has judged is not lost");
        // A deregistered cluster is forgotten: registered again, it is new.
        lost_clusters(&[target("new", Some("False"), false)], &mut been);
        assert!(!been.contains_key("west"));
    }

    #[test]
    fn only_entries_of_clusters_neither_assigned_nor_registered_are_orphaned() {
        let mut wp = WorkloadPlacement::new(
            "web",
            WorkloadPlacementSpec { clusters: vec![ClusterAssignment { name: "west".into(), replicas: 1 }], ..Default::default() },
        );
        let entry = |name: &str| ClusterSyncStatus { name: name.into(), ..Default::default() };
        // east: registered, unassigned (its syncer removes it); west: assigned;
        // gone: deregistered; also-gone: deregistered but still assigned (the
        // scheduler drops it first, and the entry then).
        wp.spec.clusters.push(ClusterAssignment { name: "also-gone".into(), replicas: 1 });
        wp.status = Some(WorkloadPlacementStatus {
            clusters: vec![entry("also-gone"), entry("east"), entry("gone"), entry("west")],
            ..Default::default()
        });
        let registered: BTreeSet<String> = ["east", "west"].map(String::from).into();
        assert_eq!(orphaned_entries(&wp, &registered), vec!["gone".to_string()]);
        assert!(orphaned_entries(&wp, &["east", "west", "gone"].map(String::from).into()).is_empty());
    }
}
