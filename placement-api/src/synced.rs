//! The kinds a syncer copies down to a physical cluster.

/// A kind a syncer copies down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `apps/v1` Deployment: the workload, with this cluster's share of the replicas.
    Deployment,
    /// A ConfigMap a synced pod template references.
    ConfigMap,
    /// A Secret a synced pod template references.
    Secret,
    /// The downstream namespace of an upstream `{workspace, namespace}`; its key has
    /// an empty name.
    Namespace,
}

impl Kind {
    /// Every kind of copy, in the order a namespace's objects are pushed: what pods
    /// mount first.
    pub const ALL: [Kind; 3] = [Kind::ConfigMap, Kind::Secret, Kind::Deployment];

    /// `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Deployment => "apps/v1",
            Kind::ConfigMap | Kind::Secret | Kind::Namespace => "v1",
        }
    }

    /// `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
            Kind::Namespace => "Namespace",
        }
    }

    /// The resource, for dynamic API access.
    pub fn api_resource(self) -> kube::api::ApiResource {
        use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap, core::v1::Namespace, core::v1::Secret};
        match self {
            Kind::Deployment => kube::api::ApiResource::erase::<Deployment>(&()),
            Kind::ConfigMap => kube::api::ApiResource::erase::<ConfigMap>(&()),
            Kind::Secret => kube::api::ApiResource::erase::<Secret>(&()),
            Kind::Namespace => kube::api::ApiResource::erase::<Namespace>(&()),
        }
    }

    /// A bounded label value for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Deployment => "deployment",
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
            Kind::Namespace => "namespace",
        }
    }
}
