//! Which upstream object a piece of syncer work is about.
//!
//! Upstream objects come from the wildcard view `/clusters/*`, where two workspaces may
//! hold objects with the same namespace and name. kube-runtime's `ObjectRef` knows only
//! namespace and name, so everything here is keyed by [`Key`], which adds the workspace
//! (the `kcp.io/cluster` annotation the wildcard view puts on every object).

use std::fmt;

use kube::api::ObjectMeta;
use placement_api::{CLUSTER_ANNOTATION, UPSTREAM_ANNOTATION};

/// The kinds a syncer copies down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `apps/v1` Deployment: the workload, with this cluster's share of the replicas.
    Deployment,
    /// A ConfigMap a synced pod template references.
    ConfigMap,
    /// A Secret a synced pod template references.
    Secret,
}

impl Kind {
    /// Every kind, in the order a namespace's objects are pushed: what pods mount first.
    pub const ALL: [Kind; 3] = [Kind::ConfigMap, Kind::Secret, Kind::Deployment];

    /// `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Deployment => "apps/v1",
            Kind::ConfigMap | Kind::Secret => "v1",
        }
    }

    /// `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }

    /// The resource, for dynamic API access.
    pub fn api_resource(self) -> kube::api::ApiResource {
        use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap, core::v1::Secret};
        match self {
            Kind::Deployment => kube::api::ApiResource::erase::<Deployment>(&()),
            Kind::ConfigMap => kube::api::ApiResource::erase::<ConfigMap>(&()),
            Kind::Secret => kube::api::ApiResource::erase::<Secret>(&()),
        }
    }

    /// A bounded label value for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Deployment => "deployment",
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
}

/// One upstream object: kind, workspace, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// What it is.
    pub kind: Kind,
    /// The workspace it lives in.
    pub workspace: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Key {
    /// A key from its parts.
    pub fn new(kind: Kind, workspace: &str, namespace: &str, name: &str) -> Self {
        Self { kind, workspace: workspace.into(), namespace: namespace.into(), name: name.into() }
    }

    /// The key of an object read through the wildcard view; `None` when the object does
    /// not say which workspace it is in (never the case for a Flotilla control plane).
    pub fn upstream(kind: Kind, meta: &ObjectMeta) -> Option<Self> {
        let workspace = meta.annotations.as_ref()?.get(CLUSTER_ANNOTATION)?;
        Some(Self::new(kind, workspace, meta.namespace.as_deref()?, meta.name.as_deref()?))
    }

    /// The key of the upstream object a downstream copy was made from, read from the
    /// copy's `workload.flotilla.io/upstream` annotation.
    pub fn of_copy(kind: Kind, meta: &ObjectMeta) -> Option<Self> {
        let value = meta.annotations.as_ref()?.get(UPSTREAM_ANNOTATION)?;
        let mut parts = value.splitn(3, '/');
        let (ws, ns, name) = (parts.next()?, parts.next()?, parts.next()?);
        (!ws.is_empty() && !ns.is_empty() && !name.is_empty()).then(|| Self::new(kind, ws, ns, name))
    }

    /// The value of the `workload.flotilla.io/upstream` annotation on the copy.
    pub fn copy_annotation(&self) -> String {
        format!("{}/{}/{}", self.workspace, self.namespace, self.name)
    }

    /// The same object as another kind (a Deployment's WorkloadPlacement has its name).
    pub fn with_kind(&self, kind: Kind) -> Self {
        Self { kind, ..self.clone() }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}/{}", self.kind.name(), self.workspace, self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn upstream_keys_come_from_the_cluster_annotation_and_copies_point_back() {
        let meta = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            annotations: Some(BTreeMap::from([(CLUSTER_ANNOTATION.to_string(), "demo".to_string())])),
            ..Default::default()
        };
        let key = Key::upstream(Kind::Deployment, &meta).unwrap();
        assert_eq!(key, Key::new(Kind::Deployment, "demo", "default", "web"));
        assert_eq!(key.to_string(), "Deployment demo/default/web");
        let copy = ObjectMeta {
            annotations: Some(BTreeMap::from([(UPSTREAM_ANNOTATION.to_string(), key.copy_annotation())])),
            ..Default::default()
        };
        assert_eq!(Key::of_copy(Kind::Deployment, &copy), Some(key));
        assert_eq!(Key::upstream(Kind::Deployment, &ObjectMeta { name: Some("x".into()), ..Default::default() }), None);
        let broken = ObjectMeta {
            annotations: Some(BTreeMap::from([(UPSTREAM_ANNOTATION.to_string(), "demo/x".to_string())])),
            ..Default::default()
        };
        assert_eq!(Key::of_copy(Kind::Deployment, &broken), None);
    }
}
