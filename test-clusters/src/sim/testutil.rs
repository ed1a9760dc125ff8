//! Test fixtures: builders for the objects the simulation reads, and [`FakeApi`], an
//! in-memory stand-in for the API server that applies actions the way Kubernetes would
//! (uids, generations, binding, cascading deletion).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{
    Container, Event, Node, NodeAddress, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use serde_json::Value;

use super::action::{Action, Kind, Object};
use super::pod;
use crate::fixtures::DeploymentBuilder;

/// `t(s)`: a fixed instant plus `s` seconds.
pub fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// Messages of the Event-creating actions, in order.
pub fn event_messages(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Create(Object::Event(e)) => e.message.clone(),
            _ => None,
        })
        .collect()
}

/// The ReplicaSet status written by the actions, if any.
pub fn status_of(actions: &[Action]) -> Option<ReplicaSetStatus> {
    actions.iter().find_map(|a| match a {
        Action::UpdateStatus(Object::ReplicaSet(rs)) => rs.status.clone(),
        _ => None,
    })
}

/// `Deployment::test("web")`, `Pod::test("p")`, … start a builder.
pub trait Test {
    /// The builder type.
    type Builder;
    /// A builder for an object with this name, in namespace `default`, uid `uid-<name>`.
    fn test(name: &str) -> Self::Builder;
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some("default".to_string()),
        uid: Some(format!("uid-{name}")),
        generation: Some(1),
        creation_timestamp: Some(Time(t(0))),
        ..Default::default()
    }
}

fn labels(app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), app.to_string())])
}

fn container(image: &str) -> Container {
    Container { name: "web".into(), image: Some(image.into()), ..Default::default() }
}

fn requirements(cpu: &str, mem: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(mem.into()))])),
        ..Default::default()
    }
}

/// The fixture of [`crate::fixtures::deployment`] as the API server holds it: in
/// namespace `default`, with uid `uid-<name>` and generation 1, and its one container
/// named `web`.
impl Test for Deployment {
    type Builder = DeploymentBuilder;
    fn test(name: &str) -> DeploymentBuilder {
        crate::fixtures::deployment(name).container_name("web").with(|d| d.metadata = ObjectMeta { creation_timestamp: None, ..meta(name) })
    }
}

/// Builds a ReplicaSet owned by nothing, with label `app=web`.
pub struct ReplicaSetBuilder(ReplicaSet);

impl Test for ReplicaSet {
    type Builder = ReplicaSetBuilder;
    fn test(name: &str) -> ReplicaSetBuilder {
        ReplicaSetBuilder(ReplicaSet {
            metadata: meta(name),
            spec: Some(ReplicaSetSpec {
                replicas: Some(1),
                selector: LabelSelector { match_labels: Some(labels("web")), ..Default::default() },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels("web")), ..Default::default() }),
                    spec: Some(PodSpec { containers: vec![container("nginx:1.27")], ..Default::default() }),
                }),
                ..Default::default()
            }),
            status: None,
        })
    }
}

impl ReplicaSetBuilder {
    /// `spec.replicas`.
    pub fn replicas(mut self, n: i32) -> Self {
        self.0.spec.as_mut().unwrap().replicas = Some(n);
        self
    }
    /// `spec.minReadySeconds`.
    pub fn min_ready_seconds(mut self, s: i32) -> Self {
        self.0.spec.as_mut().unwrap().min_ready_seconds = Some(s);
        self
    }
    /// `metadata.generation`.
    pub fn generation(mut self, g: i64) -> Self {
        self.0.metadata.generation = Some(g);
        self
    }
    /// The ReplicaSet.
    pub fn build(self) -> ReplicaSet {
        self.0
    }
}

/// Builds a Pod with label `app=web` and one container.
pub struct PodBuilder(Pod);

impl Test for Pod {
    type Builder = PodBuilder;
    fn test(name: &str) -> PodBuilder {
        PodBuilder(Pod {
            metadata: ObjectMeta { labels: Some(labels("web")), ..meta(name) },
            spec: Some(PodSpec { containers: vec![container("nginx:1.27")], ..Default::default() }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..Default::default() }),
        })
    }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().unwrap()
    }
    /// Controlled by the ReplicaSet.
    pub fn owned_by(mut self, rs: &ReplicaSet) -> Self {
        self.0.metadata.owner_references = Some(vec![pod::controller_ref("apps/v1", "ReplicaSet", &rs.metadata)]);
        self
    }
    /// Bound to the node.
    pub fn on_node(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }
    /// The container's requests.
    pub fn requests(mut self, cpu: &str, mem: &str) -> Self {
        self.spec().containers[0].resources = Some(requirements(cpu, mem));
        self
    }
    /// The container's image.
    pub fn image(mut self, image: &str) -> Self {
        self.spec().containers[0].image = Some(image.into());
        self
    }
    /// `spec.restartPolicy`.
    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.spec().restart_policy = Some(policy.into());
        self
    }
    /// An annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// An extra init container.
    pub fn init_container(mut self, name: &str, image: &str) -> Self {
        self.spec().init_containers.get_or_insert_with(Vec::new).push(Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        });
        self
    }
    /// A `nodeSelector` entry.
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec().node_selector.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// `metadata.creationTimestamp`.
    pub fn created(mut self, at: Timestamp) -> Self {
        self.0.metadata.creation_timestamp = Some(Time(at));
        self
    }
    /// Running and Ready since `at`.
    pub fn ready_at(mut self, at: Timestamp) -> Self {
        self.0.status =
            Some(PodStatus { phase: Some("Running".into()), conditions: Some(vec![cond("Ready", "True", at)]), ..Default::default() });
        self
    }
    /// Running but not Ready.
    pub fn running_not_ready(mut self) -> Self {
        self.0.status =
            Some(PodStatus { phase: Some("Running".into()), conditions: Some(vec![cond("Ready", "False", t(0))]), ..Default::default() });
        self
    }
    /// Bound but still starting.
    pub fn container_creating(mut self) -> Self {
        self.0.status =
            Some(PodStatus { phase: Some("Pending".into()), conditions: Some(vec![cond("Ready", "False", t(0))]), ..Default::default() });
        self
    }
    /// Not bound to any node.
    pub fn pending(mut self) -> Self {
        self.spec().node_name = None;
        self.0.status = Some(PodStatus { phase: Some("Pending".into()), ..Default::default() });
        self
    }
    /// The phase.
    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self
    }
    /// Being deleted.
    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(t(0)));
        self
    }
    /// The Pod.
    pub fn build(self) -> Pod {
        self.0
    }
}

fn cond(type_: &str, status: &str, at: Timestamp) -> k8s_openapi::api::core::v1::PodCondition {
    k8s_openapi::api::core::v1::PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(at)),
        ..Default::default()
    }
}

/// Builds a Node at InternalIP 10.89.0.2 with pod CIDR 10.244.1.0/24.
pub struct NodeBuilder(Node);

impl Test for Node {
    type Builder = NodeBuilder;
    fn test(name: &str) -> NodeBuilder {
        NodeBuilder(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())])),
                ..Default::default()
            },
            spec: Some(NodeSpec { pod_cidr: Some("10.244.1.0/24".into()), ..Default::default() }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress { type_: "InternalIP".into(), address: "10.89.0.2".into() }]),
                ..Default::default()
            }),
        })
    }
}

impl NodeBuilder {
    /// Allocatable (and capacity) cpu, memory and pods.
    pub fn capacity(mut self, cpu: &str, mem: &str, pods: u32) -> Self {
        let list = BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(mem.into())),
            ("pods".to_string(), Quantity(pods.to_string())),
        ]);
        let status = self.0.status.as_mut().unwrap();
        status.allocatable = Some(list.clone());
        status.capacity = Some(list);
        self
    }
    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// The Node.
    pub fn build(self) -> Node {
        self.0
    }
}

/// An in-memory API server for the simulation's actions.
///
/// It assigns uids and creation timestamps, bumps `metadata.generation` on spec changes
/// (but not on status writes), implements binding, and deletes a ReplicaSet's pods with it
/// (the garbage collector's background deletion, done at once). Pod deletion is immediate
/// unless `graceful_pod_deletion` is set, in which case it only sets `deletionTimestamp`, as
/// a real API server does for bound pods.
#[derive(Debug, Default, Clone)]
pub struct FakeApi {
    /// The objects.
    pub state: super::ClusterState,
    /// Events recorded, in order.
    pub events: Vec<Event>,
    /// Whether deleting a bound pod only marks it (the kubelet then finishes it).
    pub graceful_pod_deletion: bool,
    next_uid: u64,
}

impl FakeApi {
    /// Creates a Deployment as a client would.
    pub fn create_deployment(&mut self, mut d: Deployment, now: Timestamp) {
        self.stamp(&mut d.metadata, now);
        d.metadata.generation = Some(1);
        self.state.deployments.push(d);
    }

    /// Replaces a Deployment's spec as `kubectl apply` would, bumping the generation if it changed.
    pub fn update_deployment(&mut self, name: &str, f: impl FnOnce(&mut DeploymentSpec)) {
        let rv = self.next_rv();
        let d = self.state.deployments.iter_mut().find(|d| d.metadata.name.as_deref() == Some(name)).expect("deployment");
        let before = d.spec.clone();
        f(d.spec.as_mut().unwrap());
        d.metadata.resource_version = rv;
        if d.spec != before {
            d.metadata.generation = Some(d.metadata.generation.unwrap_or(0) + 1);
        }
    }

    /// Creates a Job as the API server would: with the selector and pod labels it
    /// generates from the uid.
    pub fn create_job(&mut self, mut j: k8s_openapi::api::batch::v1::Job, now: Timestamp) {
        self.stamp(&mut j.metadata, now);
        let uid = j.metadata.uid.clone().unwrap_or_default();
        let spec = j.spec.get_or_insert_with(Default::default);
        let selector = BTreeMap::from([("batch.kubernetes.io/controller-uid".to_string(), uid)]);
        spec.template.metadata.get_or_insert_with(Default::default).labels.get_or_insert_with(BTreeMap::new).extend(selector.clone());
        spec.selector = Some(LabelSelector { match_labels: Some(selector), ..Default::default() });
        self.state.jobs.push(j);
    }

    /// Changes a Job's spec as a client would.
    pub fn update_job(&mut self, name: &str, f: impl FnOnce(&mut k8s_openapi::api::batch::v1::JobSpec)) {
        let rv = self.next_rv();
        let j = self.state.jobs.iter_mut().find(|j| j.metadata.name.as_deref() == Some(name)).expect("job");
        f(j.spec.as_mut().unwrap());
        j.metadata.resource_version = rv;
    }

    /// The named Job's status (default when unset).
    pub fn job_status(&self, name: &str) -> k8s_openapi::api::batch::v1::JobStatus {
        let j = self.state.jobs.iter().find(|j| j.metadata.name.as_deref() == Some(name)).expect("job");
        j.status.clone().unwrap_or_default()
    }

    /// Changes a StatefulSet's spec as a client would, moving its generation.
    pub fn update_statefulset(&mut self, name: &str, f: impl FnOnce(&mut k8s_openapi::api::apps::v1::StatefulSetSpec)) {
        let rv = self.next_rv();
        let set = self.state.statefulsets.iter_mut().find(|x| x.metadata.name.as_deref() == Some(name)).expect("statefulset");
        f(set.spec.as_mut().unwrap());
        set.metadata.resource_version = rv;
        set.metadata.generation = Some(set.metadata.generation.unwrap_or(0) + 1);
    }

    /// The named StatefulSet's status (default when unset).
    pub fn statefulset_status(&self, name: &str) -> k8s_openapi::api::apps::v1::StatefulSetStatus {
        let set = self.state.statefulsets.iter().find(|x| x.metadata.name.as_deref() == Some(name)).expect("statefulset");
        set.status.clone().unwrap_or_default()
    }

    /// The named Deployment.
    pub fn deployment(&self, name: &str) -> &Deployment {
        self.state.deployments.iter().find(|d| d.metadata.name.as_deref() == Some(name)).expect("deployment")
    }

    /// The Deployment's status (default when unset).
    pub fn deployment_status(&self, name: &str) -> DeploymentStatus {
        self.deployment(name).status.clone().unwrap_or_default()
    }

    fn stamp(&mut self, meta: &mut ObjectMeta, now: Timestamp) {
        self.next_uid += 1;
        meta.uid = Some(format!("uid-{}", self.next_uid));
        meta.creation_timestamp = Some(super::k8s_time(now));
        meta.resource_version = Some(self.next_uid.to_string());
        meta.namespace.get_or_insert_with(|| "default".to_string());
    }

    /// Applies actions in order, as a driver would through the API.
    pub fn apply(&mut self, actions: &[Action], now: Timestamp) {
        for action in actions {
            self.apply_one(action, now);
        }
    }

    /// The next resourceVersion: every write gets a new one, as from a real API server
    /// (the simulator takes an unchanged resourceVersion as an unchanged object).
    fn next_rv(&mut self) -> Option<String> {
        self.next_uid += 1;
        Some(self.next_uid.to_string())
    }

    fn apply_one(&mut self, action: &Action, now: Timestamp) {
        let rv = self.next_rv();
        match action {
            Action::Create(object) => match object.clone() {
                Object::Node(mut n) => {
                    if self.state.nodes.iter().all(|x| x.metadata.name != n.metadata.name) {
                        self.stamp(&mut n.metadata, now);
                        n.metadata.namespace = None;
                        self.state.nodes.push(*n);
                    }
                }
                Object::ReplicaSet(mut rs) => {
                    if self.state.replicasets.iter().all(|x| x.metadata.name != rs.metadata.name) {
                        self.stamp(&mut rs.metadata, now);
                        rs.metadata.generation = Some(1);
                        rs.status = None;
                        self.state.replicasets.push(*rs);
                    }
                }
                Object::Pod(mut p) => {
                    if self.state.pods.iter().all(|x| x.metadata.name != p.metadata.name) {
                        self.stamp(&mut p.metadata, now);
                        self.state.pods.push(*p);
                    }
                }
                Object::Event(e) => self.events.push(*e),
                Object::Deployment(mut d) => {
                    self.stamp(&mut d.metadata, now);
                    self.state.deployments.push(*d);
                }
                Object::Job(j) => {
                    if self.state.jobs.iter().all(|x| x.metadata.name != j.metadata.name) {
                        self.create_job(*j, now);
                    }
                }
                Object::CronJob(mut c) => {
                    self.stamp(&mut c.metadata, now);
                    self.state.cronjobs.push(*c);
                }
                Object::StatefulSet(mut set) => {
                    self.stamp(&mut set.metadata, now);
                    set.metadata.generation = Some(1);
                    self.state.statefulsets.push(*set);
                }
                Object::DaemonSet(mut set) => {
                    self.stamp(&mut set.metadata, now);
                    set.metadata.generation = Some(1);
                    self.state.daemonsets.push(*set);
                }
                Object::PersistentVolume(mut v) => {
                    if self.state.volumes.iter().all(|x| x.metadata.name != v.metadata.name) {
                        self.stamp(&mut v.metadata, now);
                        v.metadata.namespace = None;
                        self.state.volumes.push(*v);
                    }
                }
                Object::StorageClass(mut c) => {
                    self.stamp(&mut c.metadata, now);
                    c.metadata.namespace = None;
                    self.state.classes.push(*c);
                }
                Object::PersistentVolumeClaim(mut c) => {
                    if self.state.claims.iter().all(|x| x.metadata.name != c.metadata.name) {
                        self.stamp(&mut c.metadata, now);
                        c.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                            phase: Some("Pending".into()),
                            ..Default::default()
                        });
                        self.state.claims.push(*c);
                    }
                }
            },
            Action::Patch { target, patch } if target.kind == Kind::PersistentVolumeClaim => {
                if let Some(c) = self.state.claims.iter_mut().find(|x| x.metadata.uid == target.uid) {
                    let mut value = serde_json::to_value(&*c).unwrap();
                    merge_patch(&mut value, patch);
                    *c = serde_json::from_value(value).unwrap();
                    c.metadata.resource_version = rv;
                }
            }
            Action::Patch { target, patch } => {
                assert_eq!(target.kind, Kind::ReplicaSet, "only ReplicaSets and claims are patched");
                if let Some(rs) = self.state.replicasets.iter_mut().find(|x| x.metadata.name.as_deref() == Some(target.name.as_str())) {
                    let before = rs.spec.clone();
                    let mut value = serde_json::to_value(&*rs).unwrap();
                    merge_patch(&mut value, patch);
                    *rs = serde_json::from_value(value).unwrap();
                    rs.metadata.resource_version = rv;
                    if rs.spec != before {
                        rs.metadata.generation = Some(rs.metadata.generation.unwrap_or(0) + 1);
                    }
                }
            }
            Action::UpdateStatus(object) => match object {
                Object::Deployment(d) => {
                    if let Some(x) = self.state.deployments.iter_mut().find(|x| x.metadata.uid == d.metadata.uid) {
                        x.status = d.status.clone();
                        // The status strategy keeps annotations from the request.
                        x.metadata.annotations = d.metadata.annotations.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::ReplicaSet(rs) => {
                    if let Some(x) = self.state.replicasets.iter_mut().find(|x| x.metadata.uid == rs.metadata.uid) {
                        x.status = rs.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::Pod(p) => {
                    if let Some(x) = self.state.pods.iter_mut().find(|x| x.metadata.uid == p.metadata.uid) {
                        x.status = p.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::Job(j) => {
                    if let Some(x) = self.state.jobs.iter_mut().find(|x| x.metadata.uid == j.metadata.uid) {
                        x.status = j.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::DaemonSet(set) => {
                    if let Some(x) = self.state.daemonsets.iter_mut().find(|x| x.metadata.uid == set.metadata.uid) {
                        x.status = set.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::StatefulSet(set) => {
                    if let Some(x) = self.state.statefulsets.iter_mut().find(|x| x.metadata.uid == set.metadata.uid) {
                        x.status = set.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::PersistentVolumeClaim(c) => {
                    if let Some(x) = self.state.claims.iter_mut().find(|x| x.metadata.uid == c.metadata.uid) {
                        x.status = c.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::PersistentVolume(v) => {
                    if let Some(x) = self.state.volumes.iter_mut().find(|x| x.metadata.uid == v.metadata.uid) {
                        x.status = v.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                Object::CronJob(c) => {
                    if let Some(x) = self.state.cronjobs.iter_mut().find(|x| x.metadata.uid == c.metadata.uid) {
                        x.status = c.status.clone();
                        x.metadata.resource_version = rv;
                    }
                }
                other => panic!("unexpected status write {other:?}"),
            },
            Action::Delete { target, grace_period_seconds } => match target.kind {
                Kind::Pod => {
                    let Some(i) = self
                        .state
                        .pods
                        .iter()
                        .position(|p| p.metadata.uid == target.uid && p.metadata.name.as_deref() == Some(&target.name))
                    else {
                        return;
                    };
                    let bound = self.state.pods[i].spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                    if self.graceful_pod_deletion && bound && *grace_period_seconds != Some(0) {
                        self.state.pods[i].metadata.deletion_timestamp.get_or_insert_with(|| super::k8s_time(now));
                        self.state.pods[i].metadata.resource_version = rv;
                    } else {
                        self.state.pods.remove(i);
                    }
                }
                Kind::ReplicaSet => {
                    let uid = target.uid.clone();
                    self.state.replicasets.retain(|rs| rs.metadata.uid != uid);
                    self.state.pods.retain(|p| pod::controller_uid(&p.metadata) != uid.as_deref());
                }
                Kind::PersistentVolume => self.state.volumes.retain(|v| v.metadata.uid != target.uid),
                Kind::PersistentVolumeClaim => self.state.claims.retain(|c| c.metadata.uid != target.uid),
                Kind::Job => {
                    let uid = target.uid.clone();
                    self.state.jobs.retain(|j| j.metadata.uid != uid);
                    self.state.pods.retain(|p| pod::controller_uid(&p.metadata) != uid.as_deref());
                }
                other => panic!("unexpected delete of {other:?}"),
            },
            Action::Bind { pod: target, node } => {
                if let Some(p) = self.state.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some(&target.name)) {
                    let spec = p.spec.get_or_insert_with(Default::default);
                    assert!(spec.node_name.is_none(), "pod {} bound twice", target.name);
                    spec.node_name = Some(node.clone());
                    p.metadata.resource_version = rv;
                    let status = p.status.get_or_insert_with(Default::default);
                    let conditions = status.conditions.get_or_insert_with(Vec::new);
                    conditions.retain(|c| c.type_ != "PodScheduled");
                    conditions.push(k8s_openapi::api::core::v1::PodCondition {
                        type_: "PodScheduled".into(),
                        status: "True".into(),
                        last_transition_time: Some(super::k8s_time(now)),
                        ..Default::default()
                    });
                }
            }
        }
    }

    /// Runs the simulator and applies what it returns until nothing is left to do at `now`,
    /// returning every action taken. Panics if it does not settle.
    pub fn settle(&mut self, sim: &mut super::Simulator, now: Timestamp) -> (Vec<Action>, Option<Timestamp>) {
        let mut all = Vec::new();
        for _ in 0..50 {
            let out = sim.reconcile(&self.state, now);
            if out.actions.is_empty() {
                return (all, out.next_wakeup);
            }
            self.apply(&out.actions, now);
            all.extend(out.actions);
        }
        panic!("the simulation did not settle at {now}; last actions: {:#?}", all.iter().rev().take(10).collect::<Vec<_>>());
    }

    /// Pods controlled by any ReplicaSet of the Deployment that are not being deleted.
    pub fn live_pods(&self) -> Vec<&Pod> {
        self.state.pods.iter().filter(|p| pod::is_active(p)).collect()
    }

    /// Pods that are Ready (and available, with `min_ready` seconds) at `now`.
    pub fn available_pods(&self, min_ready: i32, now: Timestamp) -> usize {
        self.live_pods().into_iter().filter(|p| pod::is_available(p, min_ready, now)).count()
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let map = target.as_object_mut().unwrap();
            for (k, v) in fields {
                if v.is_null() {
                    map.remove(k);
                } else {
                    merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Advances time in steps, settling at each, until `done` holds; returns the final time.
pub fn run_until(
    api: &mut FakeApi,
    sim: &mut super::Simulator,
    mut now: Timestamp,
    step: SignedDuration,
    limit: usize,
    mut done: impl FnMut(&FakeApi, Timestamp) -> bool,
) -> Timestamp {
    for _ in 0..limit {
        api.settle(sim, now);
        if done(api, now) {
            return now;
        }
        now += step;
    }
    panic!("condition not reached by {now}; deployments: {:#?}", api.state.deployments.iter().map(|d| &d.status).collect::<Vec<_>>());
}
