//! What the simulation asks its driver to do, phrased as Kubernetes API requests.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The kinds of object the simulation reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `v1` Node (cluster-scoped).
    Node,
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `apps/v1` DaemonSet.
    DaemonSet,
    /// `v1` PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// `v1` PersistentVolume (cluster-scoped).
    PersistentVolume,
    /// `storage.k8s.io/v1` StorageClass (cluster-scoped).
    StorageClass,
    /// `batch/v1` Job.
    Job,
    /// `batch/v1` CronJob.
    CronJob,
    /// `v1` Pod.
    Pod,
    /// `v1` Event.
    Event,
}

impl Kind {
    /// The `kind` field value.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::PersistentVolume => "PersistentVolume",
            Kind::StorageClass => "StorageClass",
            Kind::Job => "Job",
            Kind::CronJob => "CronJob",
            Kind::Pod => "Pod",
            Kind::Event => "Event",
        }
    }

    /// The `apiVersion` field value.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet | Kind::DaemonSet => "apps/v1",
            Kind::Job | Kind::CronJob => "batch/v1",
            Kind::Node | Kind::Pod | Kind::Event | Kind::PersistentVolumeClaim | Kind::PersistentVolume => "v1",
            Kind::StorageClass => "storage.k8s.io/v1",
        }
    }

    /// The resource name in URLs (`/apis/apps/v1/namespaces/ns/replicasets`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Deployment => "deployments",
            Kind::ReplicaSet => "replicasets",
            Kind::StatefulSet => "statefulsets",
            Kind::DaemonSet => "daemonsets",
            Kind::PersistentVolumeClaim => "persistentvolumeclaims",
            Kind::PersistentVolume => "persistentvolumes",
            Kind::StorageClass => "storageclasses",
            Kind::Job => "jobs",
            Kind::CronJob => "cronjobs",
            Kind::Pod => "pods",
            Kind::Event => "events",
        }
    }

    /// Whether objects of the kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Node | Kind::PersistentVolume | Kind::StorageClass)
    }
}

/// Names one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// The object's kind.
    pub kind: Kind,
    /// Its namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid when known; use it as a precondition so a same-named successor is never touched.
    pub uid: Option<String>,
}

impl ObjectRef {
    /// A reference from an object's kind and metadata.
    pub fn from_meta(kind: Kind, meta: &ObjectMeta) -> Self {
        ObjectRef {
            kind,
            namespace: if kind.namespaced() { meta.namespace.clone() } else { None },
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind.plural(), ns, self.name),
            None => write!(f, "{}/{}", self.kind.plural(), self.name),
        }
    }
}

/// A typed object of one of the simulated kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A Node.
    Node(Box<Node>),
    /// A Deployment.
    Deployment(Box<Deployment>),
    /// A ReplicaSet.
    ReplicaSet(Box<ReplicaSet>),
    /// A StatefulSet.
    StatefulSet(Box<StatefulSet>),
    /// A DaemonSet.
    DaemonSet(Box<DaemonSet>),
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    /// A PersistentVolume.
    PersistentVolume(Box<PersistentVolume>),
    /// A StorageClass.
    StorageClass(Box<StorageClass>),
    /// A Job.
    Job(Box<Job>),
    /// A CronJob.
    CronJob(Box<CronJob>),
    /// A Pod.
    Pod(Box<Pod>),
    /// An Event.
    Event(Box<Event>),
}

impl Object {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Object::Node(_) => Kind::Node,
            Object::Deployment(_) => Kind::Deployment,
            Object::ReplicaSet(_) => Kind::ReplicaSet,
            Object::StatefulSet(_) => Kind::StatefulSet,
            Object::DaemonSet(_) => Kind::DaemonSet,
            Object::PersistentVolumeClaim(_) => Kind::PersistentVolumeClaim,
            Object::PersistentVolume(_) => Kind::PersistentVolume,
            Object::StorageClass(_) => Kind::StorageClass,
            Object::Job(_) => Kind::Job,
            Object::CronJob(_) => Kind::CronJob,
            Object::Pod(_) => Kind::Pod,
            Object::Event(_) => Kind::Event,
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::Node(o) => &o.metadata,
            Object::Deployment(o) => &o.metadata,
            Object::ReplicaSet(o) => &o.metadata,
            Object::StatefulSet(o) => &o.metadata,
            Object::DaemonSet(o) => &o.metadata,
            Object::PersistentVolumeClaim(o) => &o.metadata,
            Object::PersistentVolume(o) => &o.metadata,
            Object::StorageClass(o) => &o.metadata,
            Object::Job(o) => &o.metadata,
            Object::CronJob(o) => &o.metadata,
            Object::Pod(o) => &o.metadata,
            Object::Event(o) => &o.metadata,
        }
    }

    /// A reference to the object.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef::from_meta(self.kind(), self.metadata())
    }

    /// The object as JSON, with `apiVersion` and `kind`.
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Object::Node(o) => serde_json::to_value(o),
            Object::Deployment(o) => serde_json::to_value(o),
            Object::ReplicaSet(o) => serde_json::to_value(o),
            Object::StatefulSet(o) => serde_json::to_value(o),
            Object::DaemonSet(o) => serde_json::to_value(o),
            Object::PersistentVolumeClaim(o) => serde_json::to_value(o),
            Object::PersistentVolume(o) => serde_json::to_value(o),
            Object::StorageClass(o) => serde_json::to_value(o),
            Object::Job(o) => serde_json::to_value(o),
            Object::CronJob(o) => serde_json::to_value(o),
            Object::Pod(o) => serde_json::to_value(o),
            Object::Event(o) => serde_json::to_value(o),
        };
        // k8s-openapi types always serialize.
        value.unwrap_or(serde_json::Value::Null)
    }
}

/// One request for the driver to make. Actions come in the order they should be applied.
///
/// Every action is safe to retry and to apply late: the driver should treat `AlreadyExists`
/// on a create, `NotFound` on anything else, and `Conflict` on a status write as "the state
/// moved on"; the next reconcile, on fresh state, works out what is still needed.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// POST the object to its collection. A Pod carries both `name` and `generateName`.
    /// Events are created this way too.
    Create(Object),
    /// A JSON merge patch (`application/merge-patch+json`) on the main resource.
    /// Used to scale ReplicaSets and to update their annotations.
    Patch {
        /// The object to patch.
        target: ObjectRef,
        /// The merge patch.
        patch: serde_json::Value,
    },
    /// PUT the whole object to its `/status` subresource. `metadata.resourceVersion` is the
    /// one read; a driver may clear it for a last-writer-wins update, which Kubernetes allows
    /// for these kinds. For a Deployment the metadata carries the
    /// `deployment.kubernetes.io/revision` annotation, which Kubernetes' status strategy keeps
    /// (it resets only spec and labels).
    UpdateStatus(Object),
    /// DELETE the object, with `target.uid` as a precondition when set.
    Delete {
        /// The object to delete.
        target: ObjectRef,
        /// `gracePeriodSeconds`, when the deletion must not wait (the kubelet finishing a pod).
        grace_period_seconds: Option<i64>,
    },
    /// POST a `Binding` to `pods/{name}/binding`: sets `spec.nodeName` and the
    /// `PodScheduled=True` condition, as kube-scheduler's bind does.
    Bind {
        /// The pod to bind.
        pod: ObjectRef,
        /// The node to bind it to.
        node: String,
    },
}

impl Action {
    /// The object the action is about.
    pub fn target(&self) -> ObjectRef {
        match self {
            Action::Create(o) | Action::UpdateStatus(o) => o.object_ref(),
            Action::Patch { target, .. } | Action::Delete { target, .. } => target.clone(),
            Action::Bind { pod, .. } => pod.clone(),
        }
    }

    /// Whether the action only records an Event.
    pub fn is_event(&self) -> bool {
        matches!(self, Action::Create(Object::Event(_)))
    }
}
