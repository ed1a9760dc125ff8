//! What the placement core decides one workload from, read out of the objects the
//! scheduler watches: how many replicas it has and what one asks for, where it runs
//! now, and whether it was left on fewer clusters than its Placement asks for. The
//! scheduler's controller and `flotilla explain` (with the dashboard's explain, which
//! runs it) both ask here, so that an explanation is made of the decision's own inputs.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use placement_api::quantity::{QuantityError, Resources};
use placement_api::workload::{AnyWorkload, Failover, WorkloadKind};
use placement_api::{sync_target_of_label, PlacementSpec, WorkloadPlacement, CONDITION_SCHEDULED, SYNC_STATE_SYNC};

use crate::core::{self, Share};

/// The Scheduled reason of a workload placed on fewer clusters than its Placement asks
/// for; only rebalancing widens it again.
pub const REASON_FEWER_CLUSTERS: &str = "FewerClusters";

/// The workload's demand: the replicas the workload model places for its kind, what
/// one replica asks for (its pod's requests, and one pod), and whether it runs one on
/// every node (a DaemonSet, which the model spreads over every cluster).
pub fn workload(d: &AnyWorkload) -> Result<core::Workload, QuantityError> {
    let per_replica = d.pod_template().and_then(|t| t.spec.as_ref()).map(Resources::for_pod).transpose()?;
    let replicas = d.replicas();
    Ok(core::Workload {
        replicas: u32::try_from(replicas).unwrap_or(0),
        per_replica: per_replica.unwrap_or(Resources::ZERO).max(Resources::new(0, 0, 1)),
        per_node: d.kind().describe().spread == placement_api::workload::Spread::EveryCluster,
    })
}

/// Where the workload runs now: the shares of its WorkloadPlacement, or, before it has
/// one, the clusters its assignment labels name, with no share yet.
pub fn current(wp: Option<&WorkloadPlacement>, d: &ObjectMeta) -> Vec<Share> {
    match wp {
        Some(wp) => wp.spec.clusters.iter().map(|c| Share::new(&c.name, u32::try_from(c.replicas).unwrap_or(0))).collect(),
        None => assigned_labels(d.labels.as_ref()).iter().map(|c| Share::new(c, 0)).collect(),
    }
}

/// Whether a workload of `kind` under Placement `spec` stays on a cluster that stopped
/// answering until its loss is confirmed: a kind that must never run on two clusters
/// at once ([`Failover::AfterConfirm`]), unless the Placement says
/// `failover.statefulSets: Immediate` for a StatefulSet.
pub fn waits_for_confirm(kind: WorkloadKind, spec: &PlacementSpec) -> bool {
    kind.describe().failover == Failover::AfterConfirm && !(kind == WorkloadKind::StatefulSet && spec.stateful_sets_move_at_once())
}

/// Whether the workload was left on fewer clusters than its Placement asks for.
pub fn short(wp: Option<&WorkloadPlacement>) -> bool {
    wp.and_then(scheduled_condition).is_some_and(|c| c.reason == REASON_FEWER_CLUSTERS)
}

/// The WorkloadPlacement's Scheduled condition.
pub fn scheduled_condition(wp: &WorkloadPlacement) -> Option<&Condition> {
    wp.status.as_ref()?.conditions.iter().find(|c| c.type_ == CONDITION_SCHEDULED)
}

/// The clusters that `labels` assign an object to.
pub fn assigned_labels(labels: Option<&BTreeMap<String, String>>) -> BTreeSet<String> {
    labels
        .into_iter()
        .flatten()
        .filter(|(_, v)| *v == SYNC_STATE_SYNC)
        .filter_map(|(k, _)| sync_target_of_label(k).map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    fn deployment(v: serde_json::Value) -> AnyWorkload {
        AnyWorkload::Deployment(std::sync::Arc::new(serde_json::from_value::<Deployment>(v).unwrap()))
    }

    #[test]
    fn the_demand_is_the_replicas_and_one_pods_requests_and_at_least_one_pod() {
        let d = deployment(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "selector": {},
            "template": {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]}}}}));
        let w = workload(&d).unwrap();
        assert_eq!((w.replicas, w.per_replica), (3, Resources::new(250, 64 << 20, 1)));
        // No replicas: one, as the API defaults it; no requests: still one pod's room.
        let bare = deployment(
            json!({"metadata": {"name": "web"}, "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "a"}]}}}}),
        );
        let w = workload(&bare).unwrap();
        assert_eq!((w.replicas, w.per_replica), (1, Resources::new(0, 0, 1)));
        let bad = deployment(json!({"metadata": {"name": "web"}, "spec": {"selector": {},
            "template": {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}}}}));
        assert!(workload(&bad).is_err());
    }

    #[test]
    fn where_it_runs_is_the_placements_shares_or_else_its_labels() {
        let d = deployment(json!({"metadata": {"name": "web", "labels": {
            "state.workload.flotilla.io/east": "Sync", "state.workload.flotilla.io/west": "Other", "app": "web"}}}));
        assert_eq!(current(None, d.meta()), [Share::new("east", 0)]);
        let wp: WorkloadPlacement = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
            "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "placement": "default",
            "clusters": [{"name": "eu", "replicas": 2}]},
            "status": {"conditions": [{"type": "Scheduled", "status": "True", "reason": "FewerClusters", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
        .unwrap();
        assert_eq!(current(Some(&wp), d.meta()), [Share::new("eu", 2)]);
        assert!(short(Some(&wp)) && !short(None));
    }
}
