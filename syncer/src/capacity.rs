//! What a cluster's heartbeat says about its room: the sum of its nodes' allocatable,
//! what is left after the requests of its pods, and the free room of its roomiest
//! nodes, so that the scheduler can tell whether one replica fits on a single node.
//!
//! The per-node part is a Pareto frontier: the nodes that no other node beats on cpu,
//! memory and pod slots at once, with how many nodes have at least that much room. A
//! cluster of identical nodes reports one entry however large it is, and the report is
//! capped at [`MAX_HEADROOM`] entries, so a 1,000-node cluster never makes a large
//! status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use placement_api::quantity::{format_cpu, format_memory, Resources};
use placement_api::NodeHeadroom;

/// The most headroom entries a heartbeat carries.
pub const MAX_HEADROOM: usize = 8;

/// A cluster's room, as the heartbeat reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// Sum of the allocatable of the nodes that take pods (Ready, not cordoned).
    pub allocatable: Resources,
    /// `allocatable` minus the requests of every non-terminated pod on those nodes
    /// and of every pod still waiting for a node.
    pub available: Resources,
    /// The roomiest nodes' free room, largest cpu first; at most [`MAX_HEADROOM`].
    pub headroom: Vec<(Resources, u32)>,
    /// How many nodes take pods.
    pub nodes: u32,
}

fn takes_pods(node: &Node) -> bool {
    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    ready && !cordoned
}

fn terminated(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Cuts `pod` down to what [`compute`] reads: its name, namespace, uid and
/// resourceVersion; each container's name, resources and restart policy; the node,
/// the overhead; and the phase. The heartbeat keeps every pod of the cluster this way.
pub fn slim_pod(pod: &mut Pod) {
    let m = std::mem::take(&mut pod.metadata);
    pod.metadata =
        ObjectMeta { name: m.name, namespace: m.namespace, uid: m.uid, resource_version: m.resource_version, ..Default::default() };
    let slim = |c: Container| Container { name: c.name, resources: c.resources, restart_policy: c.restart_policy, ..Default::default() };
    pod.spec = pod.spec.take().map(|s| PodSpec {
        containers: s.containers.into_iter().map(slim).collect(),
        init_containers: s.init_containers.map(|cs| cs.into_iter().map(slim).collect()),
        node_name: s.node_name,
        overhead: s.overhead,
        ..Default::default()
    });
    pod.status = pod.status.take().map(|s| PodStatus { phase: s.phase, ..Default::default() });
}

/// Computes a cluster's capacity from its nodes and pods. A pod whose requests do
/// not parse counts as requesting nothing but its pod slot.
pub fn compute<'a, N, P>(nodes: impl IntoIterator<Item = &'a N>, pods: impl IntoIterator<Item = &'a P>) -> Capacity
where
    N: std::borrow::Borrow<Node> + 'a,
    P: std::borrow::Borrow<Pod> + 'a,
{
    let mut free: BTreeMap<&str, Resources> = BTreeMap::new();
    for node in nodes.into_iter().map(|n| n.borrow()).filter(|n| takes_pods(n)) {
        let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref()).map(Resources::from_resource_list);
        if let (Some(name), Some(Ok(alloc))) = (node.metadata.name.as_deref(), alloc) {
            free.insert(name, alloc);
        }
    }
    let allocatable = free.values().fold(Resources::ZERO, |a, r| a.saturating_add(*r));
    let mut available = allocatable;
    for pod in pods.into_iter().map(|p| p.borrow()).filter(|p| !terminated(p)) {
        let request = pod.spec.as_ref().and_then(|s| Resources::for_pod(s).ok()).unwrap_or(Resources::ZERO).max(Resources::new(0, 0, 1));
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty());
        match node {
            // Pods on nodes that take no pods used room the sum never counted.
            Some(n) => {
                if let Some(f) = free.get_mut(n) {
                    *f = f.saturating_sub(request);
                    available = available.saturating_sub(request);
                }
            }
            // Pending pods will take room somewhere.
            None => available = available.saturating_sub(request),
        }
    }
    let nodes = u32::try_from(free.len()).unwrap_or(u32::MAX);
    Capacity { allocatable, available, headroom: frontier(free.values().copied().collect()), nodes }
}

/// The Pareto frontier of the nodes' free room, each with how many nodes have at
/// least that much room, thinned to [`MAX_HEADROOM`] entries spread from the most
/// cpu to the most memory.
fn frontier(free: Vec<Resources>) -> Vec<(Resources, u32)> {
    let dominated =
        |a: &Resources, b: &Resources| b.cpu_millis >= a.cpu_millis && b.memory_bytes >= a.memory_bytes && b.pods >= a.pods && a != b;
    let mut front: Vec<Resources> = free.iter().filter(|a| a.pods > 0 && !free.iter().any(|b| dominated(a, b))).copied().collect();
    front.sort_by(|a, b| b.cpu_millis.cmp(&a.cpu_millis).then(b.memory_bytes.cmp(&a.memory_bytes)).then(b.pods.cmp(&a.pods)));
    front.dedup();
    if front.len() > MAX_HEADROOM {
        let last = front.len() - 1;
        front = (0..MAX_HEADROOM).map(|i| front[i * last / (MAX_HEADROOM - 1)]).collect();
    }
    front.into_iter().map(|f| (f, free.iter().filter(|n| f.fits(n)).count() as u32)).collect()
}

impl Capacity {
    /// The status fields: allocatable and available as resource lists, the headroom
    /// entries, and the `available/allocatable` strings `kubectl get st` shows.
    pub fn status_fields(&self) -> StatusFields {
        let list = |r: &Resources| {
            BTreeMap::from([
                ("cpu".to_string(), Quantity(format_cpu(r.cpu_millis))),
                ("memory".to_string(), Quantity(format_memory(r.memory_bytes))),
                ("pods".to_string(), Quantity(r.pods.to_string())),
            ])
        };
        StatusFields {
            allocatable: list(&self.allocatable),
            available: list(&self.available),
            node_headroom: self
                .headroom
                .iter()
                .map(|(r, n)| NodeHeadroom {
                    cpu: Quantity(format_cpu(r.cpu_millis)),
                    memory: Quantity(format_memory(r.memory_bytes)),
                    pods: i64::try_from(r.pods).unwrap_or(i64::MAX),
                    nodes: i32::try_from(*n).unwrap_or(i32::MAX),
                })
                .collect(),
            nodes: i32::try_from(self.nodes).unwrap_or(i32::MAX),
            cpu: format!("{}/{}", format_cpu(self.available.cpu_millis), format_cpu(self.allocatable.cpu_millis)),
            memory: format!("{}/{}", format_memory(self.available.memory_bytes), format_memory(self.allocatable.memory_bytes)),
        }
    }
}

/// [`Capacity`] in the shape of `SyncTargetStatus` fields.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusFields {
    /// `status.allocatable`.
    pub allocatable: BTreeMap<String, Quantity>,
    /// `status.available`.
    pub available: BTreeMap<String, Quantity>,
    /// `status.nodeHeadroom`.
    pub node_headroom: Vec<NodeHeadroom>,
    /// `status.nodes`.
    pub nodes: i32,
    /// `status.cpu`, e.g. `3500m/4`.
    pub cpu: String,
    /// `status.memory`, e.g. `6Gi/8Gi`.
    pub memory: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, cpu: &str, memory: &str, ready: bool, cordoned: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    fn pod(node: Option<&str>, cpu: &str, memory: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn a_slim_pod_counts_as_the_whole_pod_and_keeps_nothing_else() {
        let full: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1", "resourceVersion": "7", "labels": {"app": "web"},
                         "annotations": {"a": "b"}, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r"}],
                         "managedFields": [{"manager": "sim", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": "a", "overhead": {"cpu": "10m"},
                     "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                                        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
                     "containers": [{"name": "c", "image": "nginx", "env": [{"name": "X", "value": "y"}], "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}
        }))
        .unwrap();
        let mut slim = full.clone();
        slim_pod(&mut slim);
        let nodes = [node("a", "4", "8Gi", true, false)];
        assert_eq!(compute(&nodes, [&slim]), compute(&nodes, [&full]));
        assert_eq!(compute(&nodes, [&slim]).available, Resources::new(4000 - 2510, (8 << 30) - (2 << 30), 109));
        assert_eq!(
            serde_json::to_value(&slim).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
                "spec": {"nodeName": "a", "overhead": {"cpu": "10m"},
                         "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                                            {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]},
                "status": {"phase": "Running"}
            })
        );
    }

    #[test]
    fn available_is_allocatable_minus_live_requests() {
        let nodes = [node("a", "4", "8Gi", true, false), node("b", "4", "8Gi", true, false)];
        let pods = [
            pod(Some("a"), "500m", "1Gi", "Running"),
            pod(Some("b"), "1", "2Gi", "Running"),
            pod(Some("b"), "2", "2Gi", "Succeeded"), // finished: frees its room
            pod(None, "250m", "256Mi", "Pending"),   // waiting: will take room
        ];
        let c = compute(&nodes, &pods);
        assert_eq!(c.allocatable, Resources::new(8000, 16 << 30, 220));
        assert_eq!(c.available, Resources::new(6250, (16 << 30) - (3 << 30) - (256 << 20), 217));
        let s = c.status_fields();
        assert_eq!((s.cpu.as_str(), s.memory.as_str()), ("6250m/8", "13056Mi/16Gi"));
        assert_eq!(s.available["pods"].0, "217");
    }

    #[test]
    fn nodes_that_take_no_pods_are_left_out() {
        let nodes = [node("a", "4", "8Gi", true, false), node("down", "4", "8Gi", false, false), node("cordoned", "4", "8Gi", true, true)];
        let c = compute(&nodes, &[pod(Some("down"), "1", "1Gi", "Running")]);
        assert_eq!(c.allocatable, Resources::new(4000, 8 << 30, 110));
        assert_eq!(c.available, c.allocatable, "a pod on a NotReady node uses room that was never counted");
    }

    #[test]
    fn headroom_is_the_frontier_of_free_room() {
        // Free: a 3 cpu / 1Gi; b 1 cpu / 7Gi; c 2 cpu / 1Gi (beaten by a on every
        // resource, pod slots included); d the same as a.
        let nodes = [
            node("a", "4", "2Gi", true, false),
            node("b", "2", "8Gi", true, false),
            node("c", "2", "1Gi", true, false),
            node("d", "4", "2Gi", true, false),
        ];
        let pods = [
            pod(Some("a"), "1", "1Gi", "Running"),
            pod(Some("b"), "1", "1Gi", "Running"),
            pod(Some("c"), "0", "0", "Running"),
            pod(Some("d"), "1", "1Gi", "Running"),
        ];
        let c = compute(&nodes, &pods);
        let got: Vec<(u64, u64, u32)> = c.headroom.iter().map(|(r, n)| (r.cpu_millis, r.memory_bytes >> 30, *n)).collect();
        // A replica of 3 cpu / 1Gi fits on a or d; one of 1 cpu / 7Gi fits only on b;
        // one of 3 cpu / 7Gi fits nowhere, though the cluster has that much in total.
        assert_eq!(got, [(3000, 1, 2), (1000, 7, 1)]);
    }

    #[test]
    fn a_thousand_node_cluster_reports_a_bounded_headroom() {
        let nodes: Vec<Node> =
            (0..1000).map(|i| node(&format!("n{i}"), &format!("{}", 1 + i % 64), &format!("{}Gi", 64 - i % 64), true, false)).collect();
        let c = compute(&nodes, &Vec::<Pod>::new());
        assert_eq!(c.headroom.len(), MAX_HEADROOM);
        assert_eq!(c.headroom.first().unwrap().0.cpu_millis, 64_000, "the most cpu is kept");
        assert_eq!(c.headroom.last().unwrap().0.memory_bytes, 64 << 30, "the most memory is kept");
        let identical: Vec<Node> = (0..1000).map(|i| node(&format!("n{i}"), "8", "32Gi", true, false)).collect();
        assert_eq!(compute(&identical, &Vec::<Pod>::new()).headroom, [(Resources::new(8000, 32 << 30, 110), 1000)]);
    }
}
