//! Typed builders of the objects that tests and benchmarks apply, so that a test states
//! only what differs from an ordinary object and never edits YAML as text:
//!
//! ```
//! let web = test_clusters::fixtures::deployment("web").replicas(3).cpu("500m").build();
//! assert_eq!(web.spec.unwrap().replicas, Some(3));
//! ```
//!
//! An object starts as a user would write it: no uid, no namespace (kubectl's context
//! gives it one), no status. [`DeploymentBuilder::manifest`] renders it for
//! `kubectl apply -f -`; the simulation's unit tests add what the API server would have
//! set with [`DeploymentBuilder::with`].

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::Resource;
use serde::Serialize;

/// The image a fixture's container runs unless told otherwise.
pub const IMAGE: &str = "nginx:1.27";

/// The memory a replica requests when only its cpu is given ([`DeploymentBuilder::cpu`]).
pub const MEMORY: &str = "64Mi";

/// A Deployment `name` of one replica, labelled `app: <name>` (on the object, its
/// selector and its pods), with one container `app` that runs [`IMAGE`] and requests
/// nothing.
pub fn deployment(name: &str) -> DeploymentBuilder {
    let app = BTreeMap::from([("app".to_string(), name.to_string())]);
    DeploymentBuilder(Deployment {
        metadata: ObjectMeta { name: Some(name.to_string()), labels: Some(app.clone()), ..Default::default() },
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector { match_labels: Some(app.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(app), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container { name: "app".into(), image: Some(IMAGE.into()), ..Default::default() }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// Builds a Deployment; see [`deployment`].
#[derive(Clone, Debug)]
pub struct DeploymentBuilder(Deployment);

impl DeploymentBuilder {
    fn spec(&mut self) -> &mut DeploymentSpec {
        self.0.spec.as_mut().expect("a fixture has a spec")
    }

    fn pod_spec(&mut self) -> &mut PodSpec {
        self.spec().template.spec.as_mut().expect("a fixture has a pod spec")
    }

    fn container(&mut self) -> &mut Container {
        &mut self.pod_spec().containers[0]
    }

    /// `spec.replicas`.
    pub fn replicas(mut self, n: i32) -> Self {
        self.spec().replicas = Some(n);
        self
    }

    /// The container's cpu and memory requests.
    pub fn requests(mut self, cpu: &str, memory: &str) -> Self {
        let requests = BTreeMap::from([("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(memory.into()))]);
        self.container().resources = Some(ResourceRequirements { requests: Some(requests), ..Default::default() });
        self
    }

    /// The container requests `cpu` and [`MEMORY`].
    pub fn cpu(self, cpu: &str) -> Self {
        self.requests(cpu, MEMORY)
    }

    /// The container's image.
    pub fn image(mut self, image: &str) -> Self {
        self.container().image = Some(image.into());
        self
    }

    /// The container's name (`app` unless told otherwise).
    pub fn container_name(mut self, name: &str) -> Self {
        self.container().name = name.into();
        self
    }

    /// A label on the Deployment itself (not on its pods).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    /// An annotation on the Deployment.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    /// Governed by the Placement `name`, named by the workload's annotation.
    pub fn placement(self, name: &str) -> Self {
        self.annotation(placement_api::keys::PLACEMENT_ANNOTATION, name)
    }

    /// RollingUpdate with these bounds.
    pub fn rolling(mut self, max_surge: IntOrString, max_unavailable: IntOrString) -> Self {
        self.spec().strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment { max_surge: Some(max_surge), max_unavailable: Some(max_unavailable) }),
        });
        self
    }

    /// The Recreate strategy.
    pub fn recreate(mut self) -> Self {
        self.spec().strategy = Some(DeploymentStrategy { type_: Some("Recreate".into()), rolling_update: None });
        self
    }

    /// `spec.minReadySeconds`.
    pub fn min_ready_seconds(mut self, s: i32) -> Self {
        self.spec().min_ready_seconds = Some(s);
        self
    }

    /// `spec.progressDeadlineSeconds`.
    pub fn progress_deadline(mut self, s: i32) -> Self {
        self.spec().progress_deadline_seconds = Some(s);
        self
    }

    /// `spec.revisionHistoryLimit`.
    pub fn history(mut self, n: i32) -> Self {
        self.spec().revision_history_limit = Some(n);
        self
    }

    /// A `nodeSelector` entry of the pods.
    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.pod_spec().node_selector.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    /// Any other change, for what the builder has no method for.
    pub fn with(mut self, change: impl FnOnce(&mut Deployment)) -> Self {
        change(&mut self.0);
        self
    }

    /// The Deployment.
    pub fn build(self) -> Deployment {
        self.0
    }

    /// The Deployment as a manifest; see [`manifest`].
    pub fn manifest(self) -> String {
        manifest(&self.0)
    }
}

/// `object` as a YAML manifest for `kubectl apply -f -`, with its `apiVersion` and
/// `kind`. YAML rather than JSON, so that manifests can be joined with `---`: kubectl
/// reads a stream that starts with `{` as JSON alone.
pub fn manifest<K: Resource + Serialize>(object: &K) -> String {
    let mut value = serde_json::to_value(object).expect("a Kubernetes object serializes");
    value["apiVersion"] = K::API_VERSION.into();
    value["kind"] = K::KIND.into();
    serde_yaml::to_string(&value).expect("a JSON value has a YAML form")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_is_what_a_user_writes_and_only_the_named_fields_differ() {
        let d = deployment("web").build();
        assert_eq!(d.metadata.name.as_deref(), Some("web"));
        assert_eq!((d.metadata.namespace, d.metadata.uid, d.status.is_none()), (None, None, true));
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.selector.match_labels, spec.template.metadata.unwrap().labels);
        let c = &spec.template.spec.unwrap().containers[0];
        assert_eq!((c.name.as_str(), c.image.as_deref(), c.resources.is_none()), ("app", Some(IMAGE), true));

        let d = deployment("web").replicas(3).cpu("500m").image("nginx:broken").label("tier", "front").placement("spread").build();
        let spec = d.spec.as_ref().unwrap();
        let c = &spec.template.spec.as_ref().unwrap().containers[0];
        let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!((spec.replicas, c.image.as_deref()), (Some(3), Some("nginx:broken")));
        assert_eq!((requests["cpu"].0.as_str(), requests["memory"].0.as_str()), ("500m", MEMORY));
        assert_eq!(d.metadata.labels.as_ref().unwrap()["tier"], "front");
        assert_eq!(d.metadata.annotations.as_ref().unwrap()[placement_api::keys::PLACEMENT_ANNOTATION], "spread");
        // The pods keep only the app label: a label of the object is not a pod label.
        assert_eq!(spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_manifest_names_its_kind_and_reads_back_as_the_same_deployment() {
        let b = deployment("api").replicas(2).cpu("100m");
        let text = b.clone().manifest();
        let value: serde_json::Value = serde_yaml::from_str(&text).expect("the manifest is YAML");
        assert_eq!((value["apiVersion"].as_str(), value["kind"].as_str()), (Some("apps/v1"), Some("Deployment")));
        let back: Deployment = serde_json::from_value(value).unwrap();
        assert_eq!(back, b.build());
    }
}
