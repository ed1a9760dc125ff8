//! Events, which `kubectl describe` lists under the object they are about.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::action::{Action, Kind, Object};
use super::k8s_time;

/// The component names Kubernetes reports events under (`kubectl describe`'s "From" column).
pub mod component {
    /// kube-controller-manager's deployment controller.
    pub const DEPLOYMENT: &str = "deployment-controller";
    /// kube-controller-manager's replicaset controller.
    pub const REPLICASET: &str = "replicaset-controller";
    /// kube-controller-manager's job controller.
    pub const JOB: &str = "job-controller";
    /// kube-controller-manager's cronjob controller.
    pub const CRONJOB: &str = "cronjob-controller";
    /// kube-controller-manager's statefulset controller.
    pub const STATEFULSET: &str = "statefulset-controller";
    /// The volume provisioner (kind's local-path provisioner reports as this).
    pub const VOLUMES: &str = "persistentvolume-controller";
    /// kube-controller-manager's daemonset controller.
    pub const DAEMONSET: &str = "daemonset-controller";
    /// A node's kubelet.
    pub const KUBELET: &str = "kubelet";
    /// kube-scheduler.
    pub const SCHEDULER: &str = "default-scheduler";
}

/// Builds Event-creating actions for one reconcile pass.
#[derive(Debug)]
pub struct Recorder {
    now: Timestamp,
    seq: i128,
}

impl Recorder {
    /// A recorder stamping events with `now`.
    pub fn new(now: Timestamp) -> Self {
        Recorder { now, seq: 0 }
    }

    /// An action creating a `Normal` event about the object.
    pub fn normal(&mut self, kind: Kind, about: &ObjectMeta, component: &str, reason: &str, message: String) -> Action {
        self.event(kind, about, "Normal", component, reason, message)
    }

    /// An action creating a `Warning` event about the object.
    pub fn warning(&mut self, kind: Kind, about: &ObjectMeta, component: &str, reason: &str, message: String) -> Action {
        self.event(kind, about, "Warning", component, reason, message)
    }

    /// An action creating a `Normal` event from a component on one host (a node's
    /// kubelet).
    pub fn normal_from(&mut self, kind: Kind, about: &ObjectMeta, component: &str, host: &str, reason: &str, message: String) -> Action {
        self.on_host("Normal", kind, about, component, host, reason, message)
    }

    /// An action creating a `Warning` event from a component on one host (a node's
    /// kubelet), as `kubectl describe` shows `kubelet` with the node.
    pub fn warning_from(&mut self, kind: Kind, about: &ObjectMeta, component: &str, host: &str, reason: &str, message: String) -> Action {
        self.on_host("Warning", kind, about, component, host, reason, message)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_host(
        &mut self,
        type_: &str,
        kind: Kind,
        about: &ObjectMeta,
        component: &str,
        host: &str,
        reason: &str,
        message: String,
    ) -> Action {
        let mut action = self.event(kind, about, type_, component, reason, message);
        if let Action::Create(Object::Event(e)) = &mut action {
            if let Some(source) = e.source.as_mut() {
                source.host = Some(host.to_string());
            }
            e.reporting_instance = Some(host.to_string());
        }
        action
    }

    fn event(&mut self, kind: Kind, about: &ObjectMeta, type_: &str, component: &str, reason: &str, message: String) -> Action {
        let name = about.name.clone().unwrap_or_default();
        // Kubernetes names events "<object>.<UnixNano in hex>"; the sequence number keeps
        // events of one pass apart.
        let stamp = self.now.as_nanosecond() + self.seq;
        self.seq += 1;
        let time = k8s_time(self.now);
        let namespace = about.namespace.clone().unwrap_or_else(|| "default".to_string());
        Action::Create(Object::Event(Box::new(Event {
            metadata: ObjectMeta { name: Some(format!("{name}.{stamp:x}")), namespace: Some(namespace), ..Default::default() },
            involved_object: ObjectReference {
                api_version: Some(kind.api_version().to_string()),
                kind: Some(kind.name().to_string()),
                name: Some(name),
                namespace: about.namespace.clone(),
                uid: about.uid.clone(),
                resource_version: about.resource_version.clone(),
                ..Default::default()
            },
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some(type_.to_string()),
            source: Some(EventSource { component: Some(component.to_string()), host: None }),
            reporting_component: Some(component.to_string()),
            reporting_instance: Some(component.to_string()),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            count: Some(1),
            ..Default::default()
        })))
    }
}
