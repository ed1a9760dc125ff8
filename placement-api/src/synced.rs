//! The kinds a syncer copies down to a physical cluster, as one table: for each, what
//! it is, how it follows a Deployment to its clusters, what each cluster allocates
//! for itself (left out of the copy, and never taken for drift), which top-level
//! fields of the copy belong to the syncer whole, and whether the copy's status flows
//! back up. The syncer, the companions controller and the syncer's token scope all
//! read this table; the next kind to sync is one more row.

use crate::workload::WorkloadKind;

/// A kind a syncer copies down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `apps/v1` Deployment: the workload, with this cluster's share of the replicas.
    Deployment,
    /// `apps/v1` StatefulSet: the workload, whole on its cluster.
    StatefulSet,
    /// `apps/v1` DaemonSet: the workload, on every cluster its Placement selects.
    DaemonSet,
    /// `batch/v1` Job: the workload, on one cluster.
    Job,
    /// A ConfigMap a synced pod template references.
    ConfigMap,
    /// A Secret a synced pod template references.
    Secret,
    /// The ServiceAccount a synced pod template runs as.
    ServiceAccount,
    /// A PersistentVolumeClaim a synced pod template mounts.
    PersistentVolumeClaim,
    /// A Service whose selector matches a synced pod template's labels.
    Service,
    /// An Ingress whose backends name such a Service.
    Ingress,
    /// A NetworkPolicy whose pod selector matches a synced pod template's labels.
    NetworkPolicy,
    /// A PodDisruptionBudget whose selector matches a synced pod template's labels.
    PodDisruptionBudget,
    /// A HorizontalPodAutoscaler whose scale target is a synced Deployment.
    HorizontalPodAutoscaler,
    /// The downstream namespace of an upstream `{workspace, namespace}`; its key has
    /// an empty name.
    Namespace,
}

/// How an object of a kind comes to be assigned to a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follows {
    /// The scheduler assigns it: the workload itself.
    Scheduled,
    /// A pod template names it ([`crate::references::References`]).
    Named,
    /// Its selector matches a pod template's labels.
    SelectsPods,
    /// Its backends name Services that follow some workload.
    Backends,
    /// Its scale target names the workload.
    ScaleTarget,
    /// It is not synced as an object of its own (a namespace).
    Never,
}

/// One row of the table.
#[derive(Debug)]
pub struct Row {
    /// The kind.
    pub kind: Kind,
    /// `kind`.
    pub name: &'static str,
    /// The API group (empty for core).
    pub group: &'static str,
    /// The version the syncer reads and writes.
    pub version: &'static str,
    /// The resource.
    pub plural: &'static str,
    /// A bounded label value for metrics.
    pub label: &'static str,
    /// How it follows a workload.
    pub follows: Follows,
    /// What each cluster allocates or defaults for itself: never copied down (except
    /// where [`Kind::keeps`] says the user asked for a value), and never drift.
    /// Dotted paths; `[*]` stands for every item of a list.
    pub cluster_owned: &'static [&'static str],
    /// The top-level fields the syncer owns whole on the copy: what someone else adds
    /// under them downstream is removed as drift.
    pub owned: &'static [&'static str],
    /// Whether values under `data` are secret, and never shown in drift reports.
    pub secret: bool,
    /// Whether the copy's `status` is reported upstream.
    pub status_up: bool,
}

const fn row(kind: Kind, name: &'static str, group: &'static str, version: &'static str, plural: &'static str) -> Row {
    Row {
        kind,
        name,
        group,
        version,
        plural,
        label: "",
        follows: Follows::Named,
        cluster_owned: &[],
        owned: &["spec"],
        secret: false,
        status_up: false,
    }
}

/// What a cluster's API server allocates or defaults on a Service by itself.
const SERVICE_OWNED: &[&str] = &[
    "spec.clusterIP",
    "spec.clusterIPs",
    "spec.ipFamilies",
    "spec.ipFamilyPolicy",
    "spec.healthCheckNodePort",
    "spec.ports[*].nodePort",
    "spec.internalTrafficPolicy",
    "spec.externalTrafficPolicy",
    "spec.sessionAffinity",
    "spec.allocateLoadBalancerNodePorts",
];

/// The table, in the order a namespace's objects are pushed: what pods mount and run
/// as first, the workload last but one, and what watches the workload after it.
pub const TABLE: [Row; 13] = [
    Row { label: "configmap", owned: &["data", "binaryData"], ..row(Kind::ConfigMap, "ConfigMap", "", "v1", "configmaps") },
    Row { label: "secret", owned: &["data", "binaryData"], secret: true, ..row(Kind::Secret, "Secret", "", "v1", "secrets") },
    Row { label: "serviceaccount", owned: &[], ..row(Kind::ServiceAccount, "ServiceAccount", "", "v1", "serviceaccounts") },
    Row {
        label: "persistentvolumeclaim",
        // The cluster binds a claim to a volume and defaults its class: a claim that
        // names neither gets the cluster's own.
        cluster_owned: &["spec.volumeName", "spec.storageClassName"],
        status_up: true,
        ..row(Kind::PersistentVolumeClaim, "PersistentVolumeClaim", "", "v1", "persistentvolumeclaims")
    },
    Row {
        label: "service",
        follows: Follows::SelectsPods,
        cluster_owned: SERVICE_OWNED,
        status_up: true,
        ..row(Kind::Service, "Service", "", "v1", "services")
    },
    Row {
        label: "networkpolicy",
        follows: Follows::SelectsPods,
        ..row(Kind::NetworkPolicy, "NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies")
    },
    Row {
        label: "poddisruptionbudget",
        follows: Follows::SelectsPods,
        ..row(Kind::PodDisruptionBudget, "PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets")
    },
    Row { label: "deployment", follows: Follows::Scheduled, ..row(Kind::Deployment, "Deployment", "apps", "v1", "deployments") },
    Row { label: "statefulset", follows: Follows::Scheduled, ..row(Kind::StatefulSet, "StatefulSet", "apps", "v1", "statefulsets") },
    Row { label: "daemonset", follows: Follows::Scheduled, ..row(Kind::DaemonSet, "DaemonSet", "apps", "v1", "daemonsets") },
    Row { label: "job", follows: Follows::Scheduled, ..row(Kind::Job, "Job", "batch", "v1", "jobs") },
    Row {
        label: "ingress",
        follows: Follows::Backends,
        cluster_owned: &["spec.ingressClassName"],
        status_up: true,
        ..row(Kind::Ingress, "Ingress", "networking.k8s.io", "v1", "ingresses")
    },
    Row {
        label: "horizontalpodautoscaler",
        follows: Follows::ScaleTarget,
        status_up: true,
        ..row(Kind::HorizontalPodAutoscaler, "HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers")
    },
];

const NAMESPACE: Row =
    Row { label: "namespace", follows: Follows::Never, owned: &[], ..row(Kind::Namespace, "Namespace", "", "v1", "namespaces") };

impl Kind {
    /// Every kind of copy, in the order a namespace's objects are pushed.
    pub fn all() -> impl Iterator<Item = Kind> {
        TABLE.iter().map(|r| r.kind)
    }

    /// The kinds that follow a workload (all but the workloads).
    pub fn companions() -> impl Iterator<Item = Kind> {
        Kind::all().filter(|k| k.workload().is_none())
    }

    /// The workload kinds clusters hold copies of, in the workload model's order.
    pub fn workloads() -> impl Iterator<Item = Kind> {
        crate::workload::KINDS.iter().filter_map(|k| Kind::of_workload(k.kind))
    }

    /// The workload kind this is, if it is one.
    pub fn workload(self) -> Option<WorkloadKind> {
        match self {
            Kind::Deployment => Some(WorkloadKind::Deployment),
            Kind::StatefulSet => Some(WorkloadKind::StatefulSet),
            Kind::DaemonSet => Some(WorkloadKind::DaemonSet),
            Kind::Job => Some(WorkloadKind::Job),
            _ => None,
        }
    }

    /// The kind of the workload a WorkloadPlacement places: the workload kind it
    /// names, or a Deployment.
    pub fn placed_by(wp: &crate::WorkloadPlacement) -> Kind {
        WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind).and_then(Kind::of_workload).unwrap_or(Kind::Deployment)
    }

    /// The synced kind of a workload kind: none for one that is not placed (a
    /// CronJob runs in the workspace, and its Jobs are copied).
    pub fn of_workload(kind: WorkloadKind) -> Option<Kind> {
        match kind {
            WorkloadKind::Deployment => Some(Kind::Deployment),
            WorkloadKind::StatefulSet => Some(Kind::StatefulSet),
            WorkloadKind::DaemonSet => Some(Kind::DaemonSet),
            WorkloadKind::Job => Some(Kind::Job),
            WorkloadKind::CronJob => None,
        }
    }

    /// This kind's row.
    pub fn row(self) -> &'static Row {
        TABLE.iter().find(|r| r.kind == self).unwrap_or(&NAMESPACE)
    }

    /// The kind of a row's group and resource, if it is synced.
    pub fn of_resource(group: &str, plural: &str) -> Option<Kind> {
        TABLE.iter().find(|r| r.group == group && r.plural == plural).map(|r| r.kind)
    }

    /// `apiVersion`.
    pub fn api_version(self) -> String {
        let r = self.row();
        if r.group.is_empty() {
            r.version.to_string()
        } else {
            format!("{}/{}", r.group, r.version)
        }
    }

    /// `kind`.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The resource, for dynamic API access.
    pub fn api_resource(self) -> kube::api::ApiResource {
        let r = self.row();
        kube::api::ApiResource {
            group: r.group.into(),
            version: r.version.into(),
            api_version: self.api_version(),
            kind: r.name.into(),
            plural: r.plural.into(),
        }
    }

    /// A bounded label value for metrics.
    pub fn label(self) -> &'static str {
        self.row().label
    }

    /// How objects of this kind follow a workload.
    pub fn follows(self) -> Follows {
        self.row().follows
    }

    /// Whether the cluster-owned field at `path` (a [`Row::cluster_owned`] entry) is
    /// still copied down, because the user asked for this value: a headless Service's
    /// `clusterIP: None`, and node ports (a workspace allocates none, so every node
    /// port upstream was asked for).
    pub fn keeps(self, path: &str, value: &serde_json::Value) -> bool {
        match (self, path) {
            (Kind::Service, "spec.clusterIP") => value.as_str() == Some("None"),
            (Kind::Service, "spec.clusterIPs") => value.as_array().is_some_and(|a| a.len() == 1 && a[0].as_str() == Some("None")),
            (Kind::Service, "spec.ports[*].nodePort") => true,
            (Kind::Service, "spec.externalTrafficPolicy" | "spec.internalTrafficPolicy" | "spec.sessionAffinity") => true,
            (Kind::Service, "spec.ipFamilies" | "spec.ipFamilyPolicy" | "spec.allocateLoadBalancerNodePorts") => true,
            (Kind::Ingress, "spec.ingressClassName") => true,
            (Kind::PersistentVolumeClaim, "spec.volumeName" | "spec.storageClassName") => true,
            _ => false,
        }
    }

    /// Whether `path` (a dotted path with list indexes, as drift reports name fields:
    /// `spec.ports[0].nodePort`) is one the cluster owns.
    pub fn cluster_owns(self, path: &str) -> bool {
        if self == Kind::Job && crate::workload::job::generated_field(path) {
            return true;
        }
        let mut normal = String::with_capacity(path.len());
        let mut in_index = false;
        for c in path.chars() {
            match c {
                '[' => {
                    in_index = true;
                    normal.push_str("[*");
                }
                ']' => {
                    in_index = false;
                    normal.push(']');
                }
                _ if in_index => {}
                c => normal.push(c),
            }
        }
        self.row().cluster_owned.iter().any(|p| normal == *p || normal.strip_prefix(p).is_some_and(|rest| rest.starts_with(['.', '['])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_row_and_resources_name_their_kind() {
        let mut kinds: Vec<Kind> = Kind::all().collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), TABLE.len());
        for r in &TABLE {
            assert_eq!(Kind::of_resource(r.group, r.plural), Some(r.kind));
            assert!(!r.label.is_empty(), "{r:?}");
        }
        assert_eq!(Kind::HorizontalPodAutoscaler.api_version(), "autoscaling/v2");
        assert_eq!(Kind::Service.api_version(), "v1");
        assert_eq!(Kind::Namespace.name(), "Namespace");
        assert_eq!(Kind::Ingress.api_resource().plural, "ingresses");
        let placed = crate::workload::KINDS.iter().filter(|k| k.placed()).count();
        assert_eq!(Kind::companions().count(), TABLE.len() - placed);
        assert_eq!(Kind::workloads().count(), placed);
        for k in Kind::workloads() {
            let w = k.workload().unwrap();
            assert_eq!((Kind::of_workload(w), k.name(), k.api_version()), (Some(k), w.name(), w.describe().api_version()));
        }
        assert_eq!(Kind::of_workload(crate::workload::WorkloadKind::CronJob), None, "a CronJob is never copied");
        assert_eq!(Kind::of_resource("batch", "cronjobs"), None);
        assert_eq!(Kind::of_resource("apps", "replicasets"), None);
    }

    #[test]
    fn cluster_owned_paths_match_any_list_item_and_what_is_under_them() {
        assert!(Kind::Service.cluster_owns("spec.ports[3].nodePort"));
        assert!(Kind::Service.cluster_owns("spec.clusterIPs[0]"));
        assert!(Kind::Service.cluster_owns("spec.clusterIP"));
        assert!(!Kind::Service.cluster_owns("spec.clusterIPx"));
        assert!(!Kind::Service.cluster_owns("spec.ports[0].port"));
        assert!(!Kind::Service.cluster_owns("spec.selector"));
        assert!(!Kind::Ingress.cluster_owns("spec.clusterIP"));
    }
}
