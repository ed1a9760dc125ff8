//! The Node objects of a simulated cluster, built from its definition.
//!
//! Nodes are named the way kind names its workers, `<cluster>-worker`, `<cluster>-worker2`,
//! `<cluster>-worker3`, …, numbering across node groups in file order, so scripts and docs
//! read the same against a simulated and a kind cluster. There is no control-plane node: the
//! simulated control plane is not a node.
//!
//! Each node reports the status a healthy kind worker running Kubernetes 1.32 reports: the
//! well-known labels, capacity equal to allocatable, `Ready=True` (`KubeletReady`) and the
//! three pressure conditions `False`, node info, an `InternalIP` and a `Hostname` address.
//! Node `i` (counting from 0) gets the InternalIP `10.89.<i/250>.<i%250+2>` and the pod CIDR
//! `10.244.<i+1>.0/24`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use super::k8s_time;
use crate::config::ClusterDef;
use crate::quantity::{self, Resources};

/// The kubelet version simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.32.0";
/// The container runtime simulated nodes report (what kind's v1.32 node image ships).
pub const CONTAINER_RUNTIME_VERSION: &str = "containerd://1.7.24";
/// The OS image simulated nodes report (kind's node image base).
pub const OS_IMAGE: &str = "Debian GNU/Linux 12 (bookworm)";
/// The kernel version simulated nodes report.
pub const KERNEL_VERSION: &str = "6.8.0-flotilla";
/// Ephemeral storage capacity of every simulated node; nothing requests it.
pub const EPHEMERAL_STORAGE: &str = "100Gi";

/// The node names of a definition, in order.
pub fn node_names(def: &ClusterDef) -> Vec<String> {
    let total = def.node_count();
    (1..=total).map(|i| if i == 1 { format!("{}-worker", def.name) } else { format!("{}-worker{i}", def.name) }).collect()
}

/// The Node objects for a definition, as they look when their kubelets have registered and
/// reported `Ready` at `now`.
pub fn nodes(def: &ClusterDef, now: Timestamp) -> Vec<Node> {
    let names = node_names(def);
    let groups = def.node_groups.iter().flat_map(|g| std::iter::repeat_n(g, g.count as usize));
    names
        .iter()
        .zip(groups)
        .enumerate()
        .map(|(i, (name, group))| node(&def.name, name, i, group.node_allocatable(), &group.labels, now))
        .collect()
}

fn node(cluster: &str, name: &str, index: usize, allocatable: Resources, group_labels: &BTreeMap<String, String>, now: Timestamp) -> Node {
    let mut labels = group_labels.clone();
    for (k, v) in [
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
    let annotations = BTreeMap::from([
        ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
        ("volumes.kubernetes.io/controller-managed-attach-detach".to_string(), "true".to_string()),
    ]);
    let mut resources = BTreeMap::from([
        ("cpu".to_string(), Quantity(quantity::format_cpu(allocatable.cpu_millis))),
        ("ephemeral-storage".to_string(), Quantity(EPHEMERAL_STORAGE.to_string())),
        ("hugepages-1Gi".to_string(), Quantity("0".to_string())),
        ("hugepages-2Mi".to_string(), Quantity("0".to_string())),
        ("memory".to_string(), Quantity(quantity::format_memory(allocatable.memory_bytes))),
    ]);
    resources.insert("pods".to_string(), Quantity(allocatable.pods.to_string()));
    let time = k8s_time(now);
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(time.clone()),
        last_transition_time: Some(time.clone()),
    };
    let pod_cidr = format!("10.244.{}.0/24", index + 1);
    let digest = hex::encode(Sha256::digest(format!("{cluster}/{name}")));
    let uuid = format!("{}-{}-{}-{}-{}", &digest[0..8], &digest[8..12], &digest[12..16], &digest[16..20], &digest[20..32]);
    Node {
        metadata: ObjectMeta { name: Some(name.to_string()), labels: Some(labels), annotations: Some(annotations), ..Default::default() },
        spec: Some(NodeSpec { pod_cidr: Some(pod_cidr.clone()), pod_cidrs: Some(vec![pod_cidr]), ..Default::default() }),
        status: Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".into(), address: format!("10.89.{}.{}", index / 250, index % 250 + 2) },
                NodeAddress { type_: "Hostname".into(), address: name.to_string() },
            ]),
            allocatable: Some(resources.clone()),
            capacity: Some(resources),
            // The kubelet's order (pkg/kubelet/nodestatus/setters.go).
            conditions: Some(vec![
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }) }),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: uuid.clone(),
                container_runtime_version: CONTAINER_RUNTIME_VERSION.into(),
                kernel_version: KERNEL_VERSION.into(),
                kube_proxy_version: String::new(),
                kubelet_version: KUBELET_VERSION.into(),
                machine_id: digest[32..64].to_string(),
                operating_system: "linux".into(),
                os_image: OS_IMAGE.into(),
                system_uuid: uuid,
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// A node's allocatable cpu, memory and pods; unparsable values count as zero.
pub fn allocatable(node: &Node) -> Resources {
    node.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| Resources::from_resource_list(a).ok()).unwrap_or_default()
}

/// The node's `InternalIP` address.
pub fn internal_ip(node: &Node) -> Option<&str> {
    node.status.as_ref()?.addresses.as_ref()?.iter().find(|a| a.type_ == "InternalIP").map(|a| a.address.as_str())
}

/// Whether the node is cordoned (`spec.unschedulable`).
pub fn is_unschedulable(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    fn def() -> ClusterDef {
        config::parse(
            "name: east\nlabels: {region: us}\nnodes:\n- {count: 2, cpu: '4', memory: 8Gi, pods: 110, labels: {disk: ssd}}\n- {count: 1, cpu: 500m, memory: 1536Mi}",
            "t.yaml",
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn names_follow_kind() {
        assert_eq!(node_names(&def()), ["east-worker", "east-worker2", "east-worker3"]);
    }

    #[test]
    fn nodes_carry_groups_labels_and_capacity() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let nodes = nodes(&def(), now);
        assert_eq!(nodes.len(), 3);
        let first = &nodes[0];
        let labels = first.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "east-worker");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["disk"], "ssd");
        // Cluster labels belong to the SyncTarget, not to nodes.
        assert!(!labels.contains_key("region"));
        assert_eq!(allocatable(first), Resources::new(4000, 8 << 30, 110));
        let status = first.status.as_ref().unwrap();
        assert_eq!(status.capacity, status.allocatable);
        let ready = status.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("True", Some("KubeletReady")));
        assert_eq!(ready.message.as_deref(), Some("kubelet is posting ready status"));
        assert_eq!(status.node_info.as_ref().unwrap().kubelet_version, "v1.32.0");
        assert_eq!(internal_ip(first), Some("10.89.0.2"));

        let third = &nodes[2];
        assert!(!third.metadata.labels.as_ref().unwrap().contains_key("disk"));
        assert_eq!(allocatable(third), Resources::new(500, 1536 << 20, 110));
        let cap = third.status.as_ref().unwrap().capacity.as_ref().unwrap();
        assert_eq!((cap["cpu"].0.as_str(), cap["memory"].0.as_str()), ("500m", "1536Mi"));
        assert_eq!(internal_ip(third), Some("10.89.0.4"));
        assert_eq!(third.spec.as_ref().unwrap().pod_cidr.as_deref(), Some("10.244.3.0/24"));
        assert!(!is_unschedulable(third));
    }

    #[test]
    fn nodes_are_deterministic() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(nodes(&def(), now), nodes(&def(), now));
    }
}
