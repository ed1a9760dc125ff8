//! Status, as pure functions: one cluster's report on its copy of a workload, the
//! WorkloadPlacement status that collects the reports, and the upstream Deployment
//! status summed over the assigned clusters.
//!
//! Each syncer writes only its own entry of `WorkloadPlacement.status.clusters` (that
//! is all a pull-mode syncer's token may change there). One controller in the control
//! plane process, the status aggregator, derives the rest from the entries: the
//! WorkloadPlacement's summary, `Synced` and `Available` ([`derived`]), the
//! upstream Deployment's status ([`aggregate`]), and the workload's state
//! ([`workload_state`]), which `flotilla status` and the dashboard show.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::workload::{self, Ended, Headline, Workload, WorkloadKind};
use crate::{
    ClusterAssignment, ClusterSyncStatus, WorkloadPlacement, WorkloadPlacementStatus, CONDITION_AVAILABLE, CONDITION_COMPANIONS_SYNCED,
    CONDITION_SCHEDULED, CONDITION_SYNCED, SYNCED_GENERATION_ANNOTATION,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

/// This cluster's report on its downstream copy.
pub fn cluster_entry(sync_target: &str, copy: &Deployment, now: Time) -> ClusterSyncStatus {
    let st = copy.status.clone().unwrap_or_default();
    let synced_generation =
        copy.metadata.annotations.as_ref().and_then(|a| a.get(SYNCED_GENERATION_ANNOTATION)).and_then(|g| g.parse().ok()).unwrap_or(0);
    let observed = st.observed_generation.unwrap_or(0) >= copy.metadata.generation.unwrap_or(0);
    let conditions = st
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| Condition {
            type_: c.type_,
            status: c.status,
            reason: c.reason.unwrap_or_default(),
            message: c.message.unwrap_or_default(),
            // metav1.Condition requires a transition time; one the copy lacks must not
            // become "now", or every report would differ from the last.
            last_transition_time: c.last_transition_time.or(c.last_update_time).unwrap_or(Time(jiff::Timestamp::UNIX_EPOCH)),
            observed_generation: None,
        })
        .collect();
    ClusterSyncStatus {
        name: sync_target.into(),
        replicas: st.replicas.unwrap_or(0),
        ready_replicas: st.ready_replicas.unwrap_or(0),
        available_replicas: st.available_replicas.unwrap_or(0),
        updated_replicas: st.updated_replicas.unwrap_or(0),
        synced_generation,
        observed,
        conditions,
        batch: None,
        last_sync_time: Some(now),
    }
}

/// Whether two entries say the same, apart from when they were written.
pub fn same_report(a: &ClusterSyncStatus, b: &ClusterSyncStatus) -> bool {
    ClusterSyncStatus { last_sync_time: None, ..a.clone() } == ClusterSyncStatus { last_sync_time: None, ..b.clone() }
}

/// Sets a condition, keeping its transition time when its status does not change.
pub fn set_condition(conds: &mut Vec<Condition>, mut c: Condition) {
    match conds.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) => {
            if x.status == c.status {
                c.last_transition_time = x.last_transition_time.clone();
            }
            *x = c;
        }
        None => conds.push(c),
    }
}

/// The reason of a lost cluster's `Available` in [`without_lost`]'s view.
pub const REASON_CLUSTER_NOT_READY: &str = "ClusterNotReady";

/// `wp` as the aggregator sums it when the clusters in `lost` are not Ready: their
/// entries count no ready or available replicas, and their `Available` is False with
/// reason [`REASON_CLUSTER_NOT_READY`]. Their last reports cannot be trusted: whatever
/// ran there may be gone. Kubernetes does the same for the pods of a node that stopped
/// reporting (they turn not Ready), so a Deployment that runs only on a lost cluster
/// is no longer Available. The entries themselves stay as their syncers wrote them.
pub fn without_lost<'a>(wp: &'a WorkloadPlacement, lost: &BTreeSet<String>) -> Cow<'a, WorkloadPlacement> {
    let hit = wp.status.as_ref().is_some_and(|s| s.clusters.iter().any(|c| lost.contains(&c.name)));
    if !hit {
        return Cow::Borrowed(wp);
    }
    let mut view = wp.clone();
    for entry in view.status.iter_mut().flat_map(|s| s.clusters.iter_mut()).filter(|c| lost.contains(&c.name)) {
        entry.ready_replicas = 0;
        entry.available_replicas = 0;
        let since = entry.last_sync_time.clone().unwrap_or(Time(jiff::Timestamp::UNIX_EPOCH));
        set_condition(
            &mut entry.conditions,
            Condition {
                type_: CONDITION_AVAILABLE.into(),
                status: "False".into(),
                reason: REASON_CLUSTER_NOT_READY.into(),
                message: format!("cluster {} is not Ready: its replicas cannot be seen", entry.name),
                last_transition_time: since,
                observed_generation: None,
            },
        );
    }
    Cow::Owned(view)
}

/// How a cluster is named where it is not available: with why, if it is lost.
fn unavailable_name<'a>(name: &'a str, conds: Option<&Condition>) -> Cow<'a, str> {
    match conds {
        Some(c) if c.reason == REASON_CLUSTER_NOT_READY => Cow::Owned(format!("{name} (cluster not Ready)")),
        _ => Cow::Borrowed(name),
    }
}

/// The WorkloadPlacement status with `sync_target`'s entry replaced by `entry` (or
/// removed, for `None`), and everything else as it was.
pub fn with_entry(wp: &WorkloadPlacement, sync_target: &str, entry: Option<ClusterSyncStatus>) -> WorkloadPlacementStatus {
    let mut status = wp.status.clone().unwrap_or_default();
    status.clusters.retain(|c| c.name != sync_target);
    status.clusters.extend(entry);
    status.clusters.sort_by(|a, b| a.name.cmp(&b.name));
    status
}

/// The WorkloadPlacement status with the fields derived from the assignment and the
/// entries recomputed. `generation` is the upstream workload's current generation.
pub fn derived(wp: &WorkloadPlacement, generation: i64, now: &Time) -> WorkloadPlacementStatus {
    let mut status = wp.status.clone().unwrap_or_default();
    derive(&mut status, wp, generation, now);
    status
}

/// The part of a WorkloadPlacement status the status aggregator owns, as its
/// server-side apply configuration: the summary, the ready count, the state, and the
/// `Synced` and `Available` conditions. A field missing here is one the aggregator removes.
pub fn aggregator_fields(status: &WorkloadPlacementStatus) -> serde_json::Value {
    let mut fields = serde_json::Map::new();
    if let Some(s) = &status.summary {
        fields.insert("summary".into(), s.clone().into());
    }
    if let Some(r) = &status.ready {
        fields.insert("ready".into(), r.clone().into());
    }
    if let Some(state) = &status.state {
        fields.insert("state".into(), state.clone().into());
    }
    if let Some(why) = &status.state_message {
        fields.insert("stateMessage".into(), why.clone().into());
    }
    let conditions: Vec<&Condition> = status
        .conditions
        .iter()
        .filter(|c| [CONDITION_SYNCED, CONDITION_AVAILABLE, CONDITION_COMPANIONS_SYNCED].contains(&c.type_.as_str()))
        .collect();
    fields.insert("conditions".into(), serde_json::to_value(conditions).unwrap_or_default());
    fields.into()
}

/// Recomputes the summary, the ready count and the `Synced` and `Available`
/// conditions from the assignment and the entries.
fn derive(status: &mut WorkloadPlacementStatus, wp: &WorkloadPlacement, generation: i64, now: &Time) {
    let assigned = &wp.spec.clusters;
    let entry = |name: &str| status.clusters.iter().find(|c| c.name == name);
    let mut summary = Vec::new();
    let (mut ready, mut desired) = (0, 0);
    let mut behind: Vec<String> = Vec::new();
    let mut unavailable = Vec::new();
    let mut refused = Vec::new();
    let kind = WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind).unwrap_or(WorkloadKind::Deployment);
    for a in assigned {
        let e = entry(&a.name);
        let (r, of) = workload::copy_counts(kind, e, a.replicas);
        let share = e.map_or(a.replicas, |e| workload::desired_on(kind, e, a.replicas));
        if let Some(c) = e.and_then(|e| e.conditions.iter().find(|c| c.type_ == CONDITION_COMPANIONS_SYNCED && c.status == "False")) {
            refused.push(format!("{}: {}", a.name, c.message));
        }
        summary.push(format!("{}={r}/{of}", a.name));
        ready += r;
        desired += of;
        let failure = e.and_then(|e| e.conditions.iter().find(|c| c.type_ == CONDITION_SYNCED && c.status == "False"));
        match failure {
            Some(f) => behind.push(format!("{} ({}: {})", a.name, f.reason, f.message)),
            None if !e.is_some_and(|e| e.synced_generation >= generation && e.observed) => behind.push(a.name.clone()),
            None => {}
        }
        if !e.is_some_and(|e| workload::copy_available(kind, e, share)) {
            let cond = e.and_then(|e| e.conditions.iter().find(|c| c.type_ == CONDITION_AVAILABLE));
            unavailable.push(unavailable_name(&a.name, cond));
        }
    }
    status.summary = (!summary.is_empty()).then(|| summary.join(" "));
    status.ready = Some(format!("{ready}/{desired}"));
    let cond = |type_: &str, ok: bool, reason: &str, message: String| Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: Some(generation),
    };
    if assigned.is_empty() {
        status.conditions.retain(|c| ![CONDITION_SYNCED, CONDITION_AVAILABLE, CONDITION_COMPANIONS_SYNCED].contains(&c.type_.as_str()));
        return;
    }
    // Said only while a cluster refuses a companion: a workload whose companions all
    // apply costs no write for them here.
    if refused.is_empty() {
        status.conditions.retain(|c| c.type_ != CONDITION_COMPANIONS_SYNCED);
    } else {
        let message = refused.join("; ");
        set_condition(&mut status.conditions, cond(CONDITION_COMPANIONS_SYNCED, false, "CompanionRefused", message));
    }
    let synced = if behind.is_empty() {
        cond(CONDITION_SYNCED, true, "AllClustersSynced", format!("generation {generation} runs on every assigned cluster"))
    } else {
        cond(CONDITION_SYNCED, false, "Syncing", format!("generation {generation} not yet observed on: {}", behind.join(", ")))
    };
    set_condition(&mut status.conditions, synced);
    let available = if unavailable.is_empty() {
        cond(CONDITION_AVAILABLE, true, "AllClustersAvailable", format!("{ready}/{desired} replicas ready"))
    } else {
        cond(CONDITION_AVAILABLE, false, "ClustersUnavailable", format!("not yet available on: {}", unavailable.join(", ")))
    };
    set_condition(&mut status.conditions, available);
}

/// A workload's state across its clusters, as `flotilla status` and the dashboard show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadState {
    /// Placed nowhere yet, or nothing fits it.
    Pending,
    /// Placed, and not yet ready everywhere it is assigned.
    Progressing,
    /// Every replica ready, on every assigned cluster.
    Available,
    /// It ran to completion (a Job).
    Complete,
    /// It failed for good (a Job).
    Failed,
}

impl WorkloadState {
    /// `Pending`, `Progressing` or `Available`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadState::Pending => "Pending",
            WorkloadState::Progressing => "Progressing",
            WorkloadState::Available => "Available",
            WorkloadState::Complete => "Complete",
            WorkloadState::Failed => "Failed",
        }
    }
}

/// A workload's state and, when it is not Available, why, from its desired `replicas`,
/// what its upstream status says of it ([`Headline`], from the sums the aggregator
/// writes) and its WorkloadPlacement:
/// - Complete or Failed once a workload that runs to completion ended;
/// - Pending without a WorkloadPlacement, when the scheduler says `Scheduled=False`
///   (its message says why, `0/3 clusters fit: ...`), or with no cluster assigned;
/// - Available when the workload is available with all its replicas ready, and every
///   assigned cluster is (the WorkloadPlacement's `Available`);
/// - Progressing otherwise: a lost cluster says so first, then the clusters not yet
///   available, else the ready count.
///
/// The status aggregator writes it into the WorkloadPlacement's status, for the
/// dashboard; `flotilla status` asks it of the objects it reads. A kind that is not
/// placed has its own rule ([`in_workspace_state`]).
pub fn workload_state(replicas: i32, headline: &Headline, wp: Option<&WorkloadPlacement>) -> (WorkloadState, Option<String>) {
    match wp {
        None => (WorkloadState::Pending, Some("not scheduled yet: the scheduler has not placed it".into())),
        Some(wp) => placed_state(replicas, headline, &wp.spec.clusters, wp.status.as_ref()),
    }
}

/// The state of a workload that runs in the workspace itself (a CronJob's schedule),
/// from what its status says: Available while it runs, Progressing while suspended.
pub fn in_workspace_state(headline: &Headline) -> (WorkloadState, Option<String>) {
    if headline.available {
        (WorkloadState::Available, None)
    } else {
        (WorkloadState::Progressing, Some("suspended: it makes no Job until spec.suspend is false".into()))
    }
}

/// Writes [`workload_state`] into `placement` (the WorkloadPlacement's status, with
/// the clusters `assigned` to it), as the status aggregator does.
pub fn set_state(placement: &mut WorkloadPlacementStatus, assigned: &[ClusterAssignment], replicas: i32, headline: &Headline) {
    let (state, why) = placed_state(replicas, headline, assigned, Some(placement));
    placement.state = Some(state.as_str().to_string());
    placement.state_message = why;
}

fn placed_state(
    replicas: i32,
    headline: &Headline,
    assigned: &[ClusterAssignment],
    placement: Option<&WorkloadPlacementStatus>,
) -> (WorkloadState, Option<String>) {
    match &headline.ended {
        Some(Ended::Complete) => return (WorkloadState::Complete, None),
        Some(Ended::Failed(why)) => return (WorkloadState::Failed, Some(why.clone())),
        None => {}
    }
    let ready_replicas = headline.ready;
    let conds = placement.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let find = |type_: &str| conds.iter().find(|c| c.type_ == type_);
    let (scheduled, available) = (find(CONDITION_SCHEDULED), find(CONDITION_AVAILABLE));
    if let Some(c) = scheduled.filter(|c| c.status == "False") {
        return (WorkloadState::Pending, Some(c.message.clone()));
    }
    if assigned.is_empty() && replicas > 0 {
        return (WorkloadState::Pending, Some("not scheduled yet: no cluster assigned".into()));
    }
    if headline.available && ready_replicas >= replicas && available.is_none_or(|c| c.status == "True") {
        return (WorkloadState::Available, None);
    }
    // A lost cluster says so first; then the aggregator's summary.
    let lost = placement.iter().flat_map(|s| &s.clusters).flat_map(|e| &e.conditions).find(|c| c.reason == REASON_CLUSTER_NOT_READY);
    let why = lost.or_else(|| available.filter(|c| c.status != "True")).map(|c| c.message.clone());
    (WorkloadState::Progressing, Some(why.unwrap_or_else(|| format!("{ready_replicas}/{replicas} replicas ready"))))
}

/// The assigned clusters' reports on a workload, summed.
pub(crate) struct Sums<'a> {
    /// The entries of the assigned clusters that have one.
    pub entries: Vec<&'a ClusterSyncStatus>,
    /// The sums of the counts.
    pub replicas: i32,
    pub updated: i32,
    pub ready: i32,
    pub available: i32,
    /// `observedGeneration`: the current generation once every assigned cluster has
    /// synced and observed it, else `before`: it never moves backwards.
    pub observed_generation: i64,
}

impl<'a> Sums<'a> {
    /// The sums for the status of a workload with `meta`, whose status said
    /// `before` as its observedGeneration: `None` while there is nothing to report
    /// (no report, and no status yet).
    pub(crate) fn to_report(wp: &'a WorkloadPlacement, meta: &ObjectMeta, before: Option<i64>, has_status: bool) -> Option<Self> {
        let sums = Sums::of(wp, meta.generation.unwrap_or(0), before);
        (!sums.entries.is_empty() || has_status).then_some(sums)
    }

    pub(crate) fn of(wp: &'a WorkloadPlacement, generation: i64, before: Option<i64>) -> Self {
        let assigned = &wp.spec.clusters;
        let entries: Vec<&ClusterSyncStatus> =
            assigned.iter().filter_map(|a| wp.status.as_ref()?.clusters.iter().find(|c| c.name == a.name)).collect();
        let sum = |f: fn(&ClusterSyncStatus) -> i32| entries.iter().map(|e| f(e)).sum::<i32>();
        let all_synced = !assigned.is_empty()
            && entries.len() == assigned.len()
            && entries.iter().all(|e| e.synced_generation >= generation && e.observed);
        Sums {
            replicas: sum(|e| e.replicas),
            updated: sum(|e| e.updated_replicas),
            ready: sum(|e| e.ready_replicas),
            available: sum(|e| e.available_replicas),
            observed_generation: if all_synced { generation } else { before.unwrap_or(0) },
            entries,
        }
    }
}

/// The upstream Deployment's status: the sums over the assigned clusters' reports, and
/// `observedGeneration` moved to the current generation only once every assigned
/// cluster has synced and observed it, so `kubectl rollout status` waits for all of
/// them. `None` when there is nothing to report yet (never assigned a cluster).
pub fn aggregate(deployment: &Deployment, wp: &WorkloadPlacement, now: &Time) -> Option<DeploymentStatus> {
    let assigned = &wp.spec.clusters;
    // A workload never placed has no status yet. One that ran and is now on no cluster
    // (its only cluster was deregistered and nothing else fits) says that nothing runs.
    let unassigned = assigned.is_empty();
    if unassigned && deployment.status.is_none() {
        return None;
    }
    let generation = deployment.metadata.generation.unwrap_or(0);
    let current = deployment.status.clone().unwrap_or_default();
    let entries: Vec<&ClusterSyncStatus> =
        assigned.iter().filter_map(|a| wp.status.as_ref()?.clusters.iter().find(|c| c.name == a.name)).collect();
    let sum = |f: fn(&ClusterSyncStatus) -> i32| entries.iter().map(|e| f(e)).sum::<i32>();
    let (replicas, updated, ready, available) =
        (sum(|e| e.replicas), sum(|e| e.updated_replicas), sum(|e| e.ready_replicas), sum(|e| e.available_replicas));
    let all_synced =
        !unassigned && entries.len() == assigned.len() && entries.iter().all(|e| e.synced_generation >= generation && e.observed);
    // Never move backwards: a cluster still catching up keeps the last value.
    let observed_generation = if all_synced { generation } else { current.observed_generation.unwrap_or(0) };
    let desired = Workload::replicas(deployment);

    let cluster_cond = |type_: &str| -> Vec<(&str, Option<&Condition>)> {
        assigned
            .iter()
            .map(|a| {
                (a.name.as_str(), entries.iter().find(|e| e.name == a.name).and_then(|e| e.conditions.iter().find(|c| c.type_ == type_)))
            })
            .collect()
    };
    let avail = cluster_cond("Available");
    let not_available: Vec<Cow<str>> =
        avail.iter().filter(|(_, c)| !c.is_some_and(|c| c.status == "True")).map(|(n, c)| unavailable_name(n, *c)).collect();
    let available_cond = if unassigned {
        ("False", "MinimumReplicasUnavailable", "no cluster is assigned; the WorkloadPlacement's Scheduled condition says why".to_string())
    } else if not_available.is_empty() {
        ("True", "MinimumReplicasAvailable", "Deployment has minimum availability on every assigned cluster.".to_string())
    } else {
        ("False", "MinimumReplicasUnavailable", format!("Deployment does not have minimum availability on: {}", not_available.join(", ")))
    };
    let progressing = cluster_cond("Progressing");
    let stalled: Vec<&str> =
        progressing.iter().filter(|(_, c)| c.is_some_and(|c| c.reason == "ProgressDeadlineExceeded")).map(|(n, _)| *n).collect();
    let complete = all_synced && progressing.iter().all(|(_, c)| c.is_some_and(|c| c.reason == "NewReplicaSetAvailable"));
    let progressing_cond = if unassigned {
        ("True", "ReplicaSetUpdated", "waiting for a cluster to be assigned".to_string())
    } else if !stalled.is_empty() {
        ("False", "ProgressDeadlineExceeded", format!("the rollout exceeded its progress deadline on: {}", stalled.join(", ")))
    } else if complete {
        ("True", "NewReplicaSetAvailable", "the rollout is complete on every assigned cluster".to_string())
    } else {
        ("True", "ReplicaSetUpdated", "the rollout is progressing on the assigned clusters".to_string())
    };
    let mut conditions = current.conditions.clone().unwrap_or_default();
    for (type_, (st, reason, message)) in [("Available", available_cond), ("Progressing", progressing_cond)] {
        let old = conditions.iter().find(|c| c.type_ == type_);
        let unchanged =
            old.is_some_and(|o| o.status == st && o.reason.as_deref() == Some(reason) && o.message.as_deref() == Some(message.as_str()));
        if unchanged {
            continue;
        }
        let transition = old.filter(|o| o.status == st).and_then(|o| o.last_transition_time.clone()).unwrap_or_else(|| now.clone());
        let c = DeploymentCondition {
            type_: type_.into(),
            status: st.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_transition_time: Some(transition),
            last_update_time: Some(now.clone()),
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(x) => *x = c,
            None => conditions.push(c),
        }
    }
    Some(DeploymentStatus {
        observed_generation: Some(observed_generation),
        replicas: Some(replicas),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        unavailable_replicas: Some((desired - available).max(0)),
        conditions: Some(conditions),
        collision_count: current.collision_count,
        terminating_replicas: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterAssignment, WorkloadPlacementSpec, WorkloadRef};
    use jiff::Timestamp;
    use serde_json::json;

    fn t(s: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + s).unwrap())
    }

    fn copy(generation: i64, observed: i64, synced: i64, ready: i32, available: bool) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": generation, "annotations": {SYNCED_GENERATION_ANNOTATION: synced.to_string()}},
            "status": {"observedGeneration": observed, "replicas": ready, "readyReplicas": ready, "availableReplicas": ready, "updatedReplicas": ready,
                       "conditions": [
                           {"type": "Available", "status": if available { "True" } else { "False" }, "reason": "R", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                           {"type": "Progressing", "status": "True", "reason": if available { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" }}]}
        }))
        .unwrap()
    }

    fn wp(assigned: &[(&str, i32)]) -> WorkloadPlacement {
        WorkloadPlacement::new(
            "web",
            WorkloadPlacementSpec {
                workload: WorkloadRef { api_version: "apps/v1".into(), kind: "Deployment".into(), name: "web".into() },
                placement: "default".into(),
                clusters: assigned.iter().map(|(n, r)| ClusterAssignment { name: n.to_string(), replicas: *r }).collect(),
            },
        )
    }

    fn upstream(generation: i64, replicas: i32) -> Deployment {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "generation": generation}, "spec": {"replicas": replicas, "selector": {}, "template": {}}}),
        )
        .unwrap()
    }

    #[test]
    fn a_workloads_state_is_pending_progressing_or_available_with_the_reason() {
        let cond = |type_: &str, status: &str, reason: &str, message: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: t(0),
            observed_generation: None,
        };
        let with = |mut p: WorkloadPlacement, conditions: Vec<Condition>, entries: Vec<ClusterSyncStatus>| {
            p.status = Some(WorkloadPlacementStatus { conditions, clusters: entries, ..Default::default() });
            p
        };
        let deployment_status = |ready: i32, available: bool| copy(1, 1, 1, ready, available).status.unwrap();
        let ready3 = deployment_status(3, true);
        let state = |replicas, status: Option<&DeploymentStatus>, p: Option<&WorkloadPlacement>| {
            let (s, why) = workload_state(replicas, &Deployment::default().headline(status), p);
            (s.as_str(), why.unwrap_or_default())
        };
        assert_eq!(state(3, None, None), ("Pending", "not scheduled yet: the scheduler has not placed it".into()));
        let nowhere =
            with(wp(&[]), vec![cond(CONDITION_SCHEDULED, "False", "Unschedulable", "0/3 clusters fit: 3 Insufficient cpu")], vec![]);
        assert_eq!(state(3, None, Some(&nowhere)), ("Pending", "0/3 clusters fit: 3 Insufficient cpu".into()));
        assert_eq!(state(3, None, Some(&wp(&[]))), ("Pending", "not scheduled yet: no cluster assigned".into()));
        assert_eq!(state(0, None, Some(&wp(&[]))).0, "Progressing", "a workload of no replicas needs no cluster");
        let placed =
            with(wp(&[("east", 3)]), vec![cond(CONDITION_AVAILABLE, "True", "AllClustersAvailable", "3/3 replicas ready")], vec![]);
        assert_eq!(state(3, Some(&ready3), Some(&placed)), ("Available", String::new()));
        assert_eq!(state(3, Some(&deployment_status(2, true)), Some(&placed)), ("Progressing", "2/3 replicas ready".into()));
        let waiting =
            with(wp(&[("east", 3)]), vec![cond(CONDITION_AVAILABLE, "False", "ClustersUnavailable", "not yet available on: east")], vec![]);
        assert_eq!(state(3, Some(&ready3), Some(&waiting)), ("Progressing", "not yet available on: east".into()));
        // A lost cluster is named before the summary.
        let mut lost = cluster_entry("east", &copy(1, 1, 1, 3, true), t(0));
        lost.conditions.push(cond("Available", "Unknown", REASON_CLUSTER_NOT_READY, "east is NotReady: its last report is not counted"));
        let lost = with(
            wp(&[("east", 3)]),
            vec![cond(CONDITION_AVAILABLE, "False", "ClustersUnavailable", "not yet available on: east")],
            vec![lost],
        );
        assert_eq!(state(3, Some(&ready3), Some(&lost)), ("Progressing", "east is NotReady: its last report is not counted".into()));
    }

    #[test]
    fn the_aggregator_writes_the_state_with_its_other_fields() {
        let p = wp(&[]);
        let mut placed = WorkloadPlacementStatus {
            conditions: vec![Condition {
                type_: CONDITION_SCHEDULED.into(),
                status: "False".into(),
                reason: "Unschedulable".into(),
                message: "0/1 clusters fit: 1 NotReady".into(),
                last_transition_time: t(0),
                observed_generation: None,
            }],
            ..Default::default()
        };
        set_state(&mut placed, &p.spec.clusters, 2, &Headline::default());
        assert_eq!((placed.state.as_deref(), placed.state_message.as_deref()), (Some("Pending"), Some("0/1 clusters fit: 1 NotReady")));
        let fields = aggregator_fields(&placed);
        assert_eq!((fields["state"].as_str(), fields["stateMessage"].as_str()), (Some("Pending"), Some("0/1 clusters fit: 1 NotReady")));
        // The scheduler's condition stays the scheduler's: the aggregator does not apply it.
        assert!(fields["conditions"].as_array().unwrap().is_empty(), "{fields}");
    }

    /// A syncer's write followed by the aggregator's.
    fn report(
        p: &WorkloadPlacement,
        target: &str,
        entry: Option<ClusterSyncStatus>,
        generation: i64,
        now: &Time,
    ) -> WorkloadPlacementStatus {
        let mut next = p.clone();
        next.status = Some(with_entry(p, target, entry));
        derived(&next, generation, now)
    }

    #[test]
    fn a_cluster_that_cannot_be_synced_is_named_with_its_error() {
        let p = wp(&[("east", 2)]);
        let mut e = cluster_entry("east", &copy(1, 1, 3, 2, true), t(0));
        set_condition(
            &mut e.conditions,
            Condition {
                type_: CONDITION_SYNCED.into(),
                status: "False".into(),
                reason: "DownstreamError".into(),
                message: "connection refused".into(),
                last_transition_time: t(0),
                observed_generation: None,
            },
        );
        let s = report(&p, "east", Some(e), 3, &t(0));
        let synced = s.conditions.iter().find(|c| c.type_ == CONDITION_SYNCED).unwrap();
        assert_eq!(synced.message, "generation 3 not yet observed on: east (DownstreamError: connection refused)");
    }

    #[test]
    fn a_companion_a_cluster_refused_is_named_on_the_placement() {
        let mut p = wp(&[("east", 2), ("west", 1)]);
        let companions = |s: &WorkloadPlacementStatus| s.conditions.iter().find(|c| c.type_ == CONDITION_COMPANIONS_SYNCED).cloned();
        let s = report(&p, "east", Some(cluster_entry("east", &copy(1, 1, 1, 2, true), t(0))), 1, &t(0));
        assert_eq!(companions(&s), None, "a workload without companions says nothing of them");
        p.status = Some(WorkloadPlacementStatus { companions: vec!["Service/web".into()], ..s });
        let s = derived(&p, 1, &t(1));
        assert_eq!(companions(&s), None, "nor does one whose companions all apply");
        let mut e = cluster_entry("west", &copy(1, 1, 1, 1, true), t(2));
        e.conditions.push(Condition {
            type_: CONDITION_COMPANIONS_SYNCED.into(),
            status: "False".into(),
            reason: "CompanionRefused".into(),
            message: "Service web: it is someone else's".into(),
            last_transition_time: t(2),
            observed_generation: None,
        });
        p.status = Some(s);
        let s = report(&p, "west", Some(e), 1, &t(2));
        let c = companions(&s).unwrap();
        assert_eq!((c.status.as_str(), c.message.as_str()), ("False", "west: Service web: it is someone else's"));
        assert!(aggregator_fields(&s)["conditions"].as_array().unwrap().iter().any(|c| c["type"] == CONDITION_COMPANIONS_SYNCED));
        // The refusal ends: the condition goes.
        p.status = Some(s);
        let s = report(&p, "west", Some(cluster_entry("west", &copy(1, 1, 1, 1, true), t(3))), 1, &t(3));
        assert_eq!(companions(&s), None);
    }

    #[test]
    fn an_entry_reports_the_copy_and_the_generation_it_was_made_from() {
        let e = cluster_entry("east", &copy(4, 4, 7, 2, true), t(0));
        assert_eq!((e.name.as_str(), e.ready_replicas, e.synced_generation, e.observed), ("east", 2, 7, true));
        assert!(!cluster_entry("east", &copy(5, 4, 8, 2, true), t(0)).observed, "the copy's controller has not seen its latest spec");
        assert!(same_report(&e, &cluster_entry("east", &copy(4, 4, 7, 2, true), t(9))), "only the time differs");
    }

    #[test]
    fn the_placement_status_sums_up_its_entries() {
        let mut p = wp(&[("east", 2), ("west", 1)]);
        let s = report(&p, "east", Some(cluster_entry("east", &copy(1, 1, 3, 2, true), t(0))), 3, &t(0));
        assert_eq!(s.summary.as_deref(), Some("east=2/2 west=0/1"));
        assert_eq!(s.ready.as_deref(), Some("2/3"));
        let synced = s.conditions.iter().find(|c| c.type_ == CONDITION_SYNCED).unwrap();
        assert_eq!((synced.status.as_str(), synced.message.as_str()), ("False", "generation 3 not yet observed on: west"));
        p.status = Some(s);
        let s = report(&p, "west", Some(cluster_entry("west", &copy(1, 1, 3, 1, true), t(5))), 3, &t(5));
        assert_eq!(s.summary.as_deref(), Some("east=2/2 west=1/1"));
        assert!(s.conditions.iter().all(|c| c.status == "True"), "{:?}", s.conditions);
        assert_eq!(s.clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["east", "west"]);
        p.status = Some(s);
        let s = report(&p, "west", None, 3, &t(9));
        assert_eq!(s.clusters.len(), 1, "an unassigned cluster's entry goes");
    }

    #[test]
    fn a_lost_cluster_counts_no_replicas_until_it_is_ready_again() {
        let mut p = wp(&[("east", 2), ("eu", 2)]);
        p.status = Some(report(&p, "east", Some(cluster_entry("east", &copy(1, 1, 1, 2, true), t(0))), 1, &t(0)));
        p.status = Some(report(&p, "eu", Some(cluster_entry("eu", &copy(1, 1, 1, 2, true), t(0))), 1, &t(0)));
        let d = upstream(1, 4);
        let lost: BTreeSet<String> = ["eu".to_string()].into();
        assert!(matches!(without_lost(&p, &BTreeSet::new()), Cow::Borrowed(_)), "nothing lost, nothing copied");
        let view = without_lost(&p, &lost);
        let s = derived(&view, 1, &t(5));
        assert_eq!((s.summary.as_deref(), s.ready.as_deref()), (Some("east=2/2 eu=0/2"), Some("2/4")));
        let available = s.conditions.iter().find(|c| c.type_ == CONDITION_AVAILABLE).unwrap();
        assert_eq!((available.status.as_str(), available.message.as_str()), ("False", "not yet available on: eu (cluster not Ready)"));
        let st = aggregate(&d, &view, &t(5)).unwrap();
        assert_eq!((st.ready_replicas, st.available_replicas, st.unavailable_replicas), (Some(2), Some(2), Some(2)));
        let avail = st.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Available").unwrap();
        assert_eq!(avail.status, "False");
        assert_eq!(avail.message.as_deref(), Some("Deployment does not have minimum availability on: eu (cluster not Ready)"));
        assert_eq!(p.status.as_ref().unwrap().clusters[1].ready_replicas, 2, "the syncer's entry itself is untouched");
        // Back: the view is the entries again, and the sums are whole.
        let st = aggregate(&d, &without_lost(&p, &BTreeSet::new()), &t(9)).unwrap();
        assert_eq!((st.ready_replicas, st.available_replicas), (Some(4), Some(4)));
    }

    #[test]
    fn the_aggregator_applies_only_its_own_fields() {
        let mut p = wp(&[("east", 1)]);
        let mut s = report(&p, "east", Some(cluster_entry("east", &copy(1, 1, 1, 1, true), t(0))), 1, &t(0));
        let scheduled = Condition {
            type_: "Scheduled".into(),
            status: "True".into(),
            reason: "Scheduled".into(),
            message: String::new(),
            last_transition_time: t(0),
            observed_generation: None,
        };
        s.conditions.push(scheduled);
        let fields = aggregator_fields(&s);
        assert_eq!(fields["summary"], "east=1/1");
        assert_eq!(fields["ready"], "1/1");
        let types: Vec<&str> = fields["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, [CONDITION_SYNCED, CONDITION_AVAILABLE], "not the scheduler's condition: {fields}");
        assert!(fields.get("clusters").is_none(), "not the syncers' entries: {fields}");
        p.spec.clusters.clear();
        p.status = Some(s);
        let emptied = aggregator_fields(&derived(&p, 1, &t(1)));
        assert_eq!(emptied["conditions"], serde_json::json!([]), "with nothing assigned, applying no conditions removes them");
    }

    #[test]
    fn the_deployment_status_is_the_sum_and_waits_for_every_cluster() {
        let mut p = wp(&[("east", 2), ("west", 1)]);
        p.status = Some(report(&p, "east", Some(cluster_entry("east", &copy(1, 1, 2, 2, true), t(0))), 2, &t(0)));
        let d = upstream(2, 3);
        let st = aggregate(&d, &p, &t(0)).unwrap();
        assert_eq!((st.replicas, st.ready_replicas, st.observed_generation), (Some(2), Some(2), Some(0)), "west has not reported");
        let avail = st.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Available").unwrap();
        assert_eq!(avail.status, "False");
        p.status = Some(report(&p, "west", Some(cluster_entry("west", &copy(1, 1, 2, 1, true), t(1))), 2, &t(1)));
        let st = aggregate(&d, &p, &t(1)).unwrap();
        assert_eq!(
            (st.replicas, st.available_replicas, st.unavailable_replicas, st.observed_generation),
            (Some(3), Some(3), Some(0), Some(2))
        );
        let conds = st.conditions.unwrap();
        assert!(conds.iter().all(|c| c.status == "True"), "{conds:?}");
        assert_eq!(conds.iter().find(|c| c.type_ == "Progressing").unwrap().reason.as_deref(), Some("NewReplicaSetAvailable"));
        assert_eq!(aggregate(&d, &wp(&[]), &t(0)), None, "nothing assigned, nothing to say");
    }

    #[test]
    fn a_workload_that_ran_and_is_on_no_cluster_now_says_nothing_runs() {
        let mut p = wp(&[("east", 2)]);
        p.status = Some(report(&p, "east", Some(cluster_entry("east", &copy(1, 1, 1, 2, true), t(0))), 1, &t(0)));
        let mut d = upstream(1, 2);
        d.status = aggregate(&d, &p, &t(0));
        assert_eq!(d.status.as_ref().and_then(|s| s.available_replicas), Some(2));
        // east is deregistered and nothing else fits: the scheduler empties the assignment.
        p.spec.clusters.clear();
        let st = aggregate(&d, &p, &t(5)).expect("a status that says nothing runs");
        assert_eq!((st.replicas, st.ready_replicas, st.available_replicas, st.unavailable_replicas), (Some(0), Some(0), Some(0), Some(2)));
        assert_eq!(st.observed_generation, Some(1), "the observed generation never moves back");
        let conds = st.conditions.unwrap();
        let avail = conds.iter().find(|c| c.type_ == "Available").unwrap();
        assert_eq!((avail.status.as_str(), avail.last_transition_time.as_ref()), ("False", Some(&t(5))));
        assert!(avail.message.as_deref().unwrap().contains("no cluster is assigned"), "{avail:?}");
    }
}
