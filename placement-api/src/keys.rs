//! Every group name, label, annotation and finalizer key Flotilla uses. They are
//! defined here and nowhere else, so that the scheduler, the syncer and the control
//! plane cannot drift apart.

/// `tenancy.flotilla.io`: Workspaces.
pub const TENANCY_GROUP: &str = "tenancy.flotilla.io";
/// `workload.flotilla.io`: SyncTargets.
pub const WORKLOAD_GROUP: &str = "workload.flotilla.io";
/// `scheduling.flotilla.io`: Placements and WorkloadPlacements.
pub const SCHEDULING_GROUP: &str = "scheduling.flotilla.io";
/// The version of every Flotilla group.
pub const VERSION: &str = "v1alpha1";

/// The workspace every control plane has, holding Workspaces and SyncTargets.
pub const ROOT_WORKSPACE: &str = "root";
/// The namespace in `root` that holds the clusters' kubeconfig Secrets.
pub const SYSTEM_NAMESPACE: &str = "flotilla-system";
/// The Placement every new workspace gets.
pub const DEFAULT_PLACEMENT: &str = "default";

/// Annotation naming an object's workspace on wildcard responses (kcp's convention).
pub const CLUSTER_ANNOTATION: &str = "kcp.io/cluster";
/// A request header a client of the control plane (or of a simulated cluster) sets to
/// [`MANAGED_FIELDS_OMIT`] when it never reads `metadata.managedFields`: the objects
/// its watches stream, and the object a get or a write answers with, then come without
/// them, which saves the client parsing them on every event and every write. Flotilla's own controllers and syncers send it; Kubernetes has no such
/// header and ignores it, and a client that does not send it gets objects exactly as
/// Kubernetes would send them.
pub const MANAGED_FIELDS_HEADER: &str = "x-flotilla-managed-fields";
/// The [`MANAGED_FIELDS_HEADER`] value that asks for objects without managedFields.
pub const MANAGED_FIELDS_OMIT: &str = "omit";
/// Finalizer that lets the control plane empty a workspace before it disappears.
pub const WORKSPACE_FINALIZER: &str = "tenancy.flotilla.io/cleanup";

/// Prefix of the label that assigns a workload to a cluster:
/// `state.workload.flotilla.io/<synctarget>: Sync`.
pub const SYNC_STATE_LABEL_PREFIX: &str = "state.workload.flotilla.io/";
/// The value of the assignment label.
pub const SYNC_STATE_SYNC: &str = "Sync";
/// Annotation on a workload or its namespace naming the Placement that governs it.
pub const PLACEMENT_ANNOTATION: &str = "scheduling.flotilla.io/placement";
/// Annotation on a downstream namespace: the upstream `{workspace, namespace}` as JSON.
pub const NAMESPACE_LOCATOR_ANNOTATION: &str = "workload.flotilla.io/namespace-locator";
/// Label on every downstream object Flotilla owns, with the SyncTarget's name.
pub const SYNC_TARGET_LABEL: &str = "workload.flotilla.io/sync-target";
/// Label on each pod (and Event) a workspace shows from one of its clusters, naming
/// that cluster (its SyncTarget).
pub const CLUSTER_LABEL: &str = "workload.flotilla.io/cluster";
/// Annotation on every downstream object: the upstream workspace/namespace/name.
pub const UPSTREAM_ANNOTATION: &str = "workload.flotilla.io/upstream";
/// Annotation on a downstream workload copy: the upstream `metadata.generation` it was
/// made from, so the status the syncer reports says which spec it describes.
pub const SYNCED_GENERATION_ANNOTATION: &str = "workload.flotilla.io/synced-generation";
/// Label on a ConfigMap or Secret whose assignment labels are managed for it because
/// assigned pod templates reference it: they follow the workloads that need them.
pub const REFERENCED_LABEL: &str = "workload.flotilla.io/referenced";
/// Prefix of the per-cluster annotation a syncer writes on an upstream companion whose
/// status flows up (a Service, an Ingress, a HorizontalPodAutoscaler): the `status` of
/// its copy on that cluster, as compact JSON. The companion status controller sums the
/// annotations of the clusters the object is assigned to into its `status`.
pub const CLUSTER_STATUS_ANNOTATION_PREFIX: &str = "clusterstatus.workload.flotilla.io/";
/// Label on a cluster's kubeconfig Secret in `root`, naming its SyncTarget.
pub const KUBECONFIG_SECRET_LABEL: &str = "workload.flotilla.io/kubeconfig-for";
/// Prefix of the per-cluster finalizer a syncer puts on the upstream objects it
/// copies, so the downstream copy is removed before the upstream object disappears.
pub const SYNCER_FINALIZER_PREFIX: &str = "workload.flotilla.io/syncer-";

/// Condition type on SyncTargets: the cluster can take workloads.
pub const CONDITION_READY: &str = "Ready";
/// Condition type on SyncTargets: the syncer's heartbeat is within the grace period.
pub const CONDITION_HEARTBEAT_HEALTHY: &str = "HeartbeatHealthy";
/// Condition type on SyncTargets, set by the cluster's syncer: it reaches the cluster's
/// API. While it does not, it sends no heartbeats either.
pub const CONDITION_CLUSTER_REACHABLE: &str = "ClusterReachable";
/// Condition type on SyncTargets and WorkloadPlacements, there only while the
/// disruption brake holds: the cluster went NotReady together with too many others
/// for the loss to be believed, and what runs there is not moved (True, saying until
/// when); on a WorkloadPlacement, the workload stays on such a cluster.
pub const CONDITION_FAILOVER_PAUSED: &str = "FailoverPaused";
/// Annotation on a SyncTarget, set by `flotilla cluster confirm-lost`: the heartbeat
/// time (`status.lastSyncerHeartbeatTime`, or `none`) at which an operator confirmed
/// the cluster lost. While the cluster's heartbeat is still that one, the disruption
/// brake does not hold it, and its workloads move; a new heartbeat ends it.
pub const LOST_CONFIRMED_ANNOTATION: &str = "scheduling.flotilla.io/lost-confirmed";
/// Annotation on a draining SyncTarget, set by `flotilla cluster drain --timeout`: the
/// time (RFC 3339) after which a workload's old copy there goes even if its replacement
/// is not Available yet. Without it, `evictAfter` plus 5 minutes.
pub const DRAIN_DEADLINE_ANNOTATION: &str = "scheduling.flotilla.io/drain-deadline";
/// The value of [`LOST_CONFIRMED_ANNOTATION`] for a cluster that never sent a heartbeat.
pub const LOST_CONFIRMED_NO_HEARTBEAT: &str = "none";
/// Condition type on WorkloadPlacements: clusters were chosen.
pub const CONDITION_SCHEDULED: &str = "Scheduled";
/// Condition type on WorkloadPlacements: every assigned cluster has the current spec.
pub const CONDITION_SYNCED: &str = "Synced";
/// Condition type on WorkloadPlacements, and in a cluster's entry, there only while
/// a cluster refuses a companion (False, naming it and the cause).
pub const CONDITION_COMPANIONS_SYNCED: &str = "CompanionsSynced";
/// Condition type on WorkloadPlacements: every assigned cluster reports Available.
pub const CONDITION_AVAILABLE: &str = "Available";

/// The assignment label for one cluster.
pub fn sync_state_label(sync_target: &str) -> String {
    format!("{SYNC_STATE_LABEL_PREFIX}{sync_target}")
}

/// The cluster named by an assignment label key, if it is one.
pub fn sync_target_of_label(key: &str) -> Option<&str> {
    key.strip_prefix(SYNC_STATE_LABEL_PREFIX).filter(|t| !t.is_empty())
}

/// The annotation in which a cluster's syncer reports a companion's copy's status.
pub fn cluster_status_annotation(sync_target: &str) -> String {
    format!("{CLUSTER_STATUS_ANNOTATION_PREFIX}{sync_target}")
}

/// The cluster named by a cluster status annotation key, if it is one.
pub fn sync_target_of_status_annotation(key: &str) -> Option<&str> {
    key.strip_prefix(CLUSTER_STATUS_ANNOTATION_PREFIX).filter(|t| !t.is_empty())
}

/// The upstream finalizer of one cluster's syncer.
pub fn syncer_finalizer(sync_target: &str) -> String {
    format!("{SYNCER_FINALIZER_PREFIX}{sync_target}")
}

/// The name of the Secret in [`SYSTEM_NAMESPACE`] that holds a cluster's kubeconfig.
pub fn kubeconfig_secret_name(sync_target: &str) -> String {
    format!("{sync_target}-kubeconfig")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_labels_round_trip() {
        assert_eq!(sync_state_label("east"), "state.workload.flotilla.io/east");
        assert_eq!(sync_target_of_label(&sync_state_label("east")), Some("east"));
        assert_eq!(sync_target_of_label("state.workload.flotilla.io/"), None);
        assert_eq!(sync_target_of_label("app"), None);
        assert_eq!(sync_target_of_status_annotation(&cluster_status_annotation("east")), Some("east"));
        assert_eq!(syncer_finalizer("west"), "workload.flotilla.io/syncer-west");
    }
}
