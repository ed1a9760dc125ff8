//! Services through kube-rs against an in-process server of each profile: a physical
//! cluster allocates cluster IPs and node ports as kube-apiserver does, under
//! concurrent creates and across a restart; a workspace allocates nothing.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{json, Value};

use controlplane::server::{Server, ServerConfig};
use support::{api_status, root_client, start, wait_until, workspace_client};

const DEADLINE: Duration = Duration::from_secs(10);

/// A simulated cluster's server over `dir`, allocating from `cidr`.
async fn physical_cluster(dir: &std::path::Path, cidr: &str) -> Server {
    let mut config = ServerConfig::physical_cluster("east", dir, dir.join("east.kubeconfig"), "127.0.0.1:0".parse().unwrap());
    config.service_cidr = cidr.parse().unwrap();
    controlplane::server::start(config, prometheus::Registry::new()).await.expect("the cluster's server starts")
}

async fn cluster_client(srv: &Server) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&srv.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

fn service(name: &str, ty: &str, extra_spec: Value) -> Service {
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": ty, "selector": {"app": name}, "ports": [{"name": "http", "port": 80}]},
    });
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(v).unwrap()
}

fn cluster_ip(s: &Service) -> String {
    s.spec.as_ref().and_then(|s| s.cluster_ip.clone()).unwrap_or_default()
}

fn node_ports(s: &Service) -> Vec<i32> {
    s.spec.as_ref().and_then(|s| s.ports.as_ref()).into_iter().flatten().filter_map(|p| p.node_port).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_in_a_physical_cluster_never_share_an_ip_or_a_node_port() {
    let dir = tempfile::tempdir().unwrap();
    let srv = physical_cluster(dir.path(), "10.100.0.0/24").await;
    let services: Api<Service> = Api::namespaced(cluster_client(&srv).await, "default");

    let creates = (0..24).map(|i| {
        let services = services.clone();
        async move { services.create(&PostParams::default(), &service(&format!("s{i}"), "NodePort", json!({}))).await.unwrap() }
    });
    let created = futures::future::join_all(creates).await;
    let ips: HashSet<String> = created.iter().map(cluster_ip).collect();
    let ports: HashSet<i32> = created.iter().flat_map(node_ports).collect();
    assert_eq!(ips.len(), 24, "distinct cluster IPs: {ips:?}");
    assert_eq!(ports.len(), 24, "distinct node ports: {ports:?}");
    assert!(ips.iter().all(|ip| ip.starts_with("10.100.0.") && ip != "10.100.0.0" && ip != "10.100.0.255"), "{ips:?}");
    assert!(ports.iter().all(|p| (30000..=32767).contains(p)), "{ports:?}");
    let s0 = &created[0];
    let spec = s0.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ips.as_deref(), Some(&[cluster_ip(s0)][..]));
    assert_eq!(spec.ip_families.as_deref(), Some(&["IPv4".to_string()][..]));
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));

    // A replace that leaves out what was allocated keeps it (kube's patchAllocatedValues).
    let mut again = service("s0", "NodePort", json!({}));
    again.metadata.resource_version = s0.metadata.resource_version.clone();
    let replaced = services.replace("s0", &PostParams::default(), &again).await.unwrap();
    assert_eq!((cluster_ip(&replaced), node_ports(&replaced)), (cluster_ip(s0), node_ports(s0)));

    // Requested values that another Service holds are refused, as kube refuses them.
    let taken_ip = cluster_ip(&created[1]);
    let dup_ip = services.create(&PostParams::default(), &service("dup-ip", "ClusterIP", json!({"clusterIP": taken_ip}))).await;
    let status = api_status(dup_ip, "a taken cluster IP");
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains(&format!(
            "spec.clusterIPs: Invalid value: []string{{\"{taken_ip}\"}}: failed to allocate IP {taken_ip}: provided IP is already allocated"
        )),
        "{}",
        status.message
    );
    let taken_port = node_ports(&created[2])[0];
    let dup_port = json!({"ports": [{"name": "http", "port": 80, "nodePort": taken_port}]});
    let status = api_status(services.create(&PostParams::default(), &service("dup-port", "NodePort", dup_port)).await, "a taken node port");
    assert!(
        status.message.contains(&format!("spec.ports[0].nodePort: Invalid value: {taken_port}: provided port is already allocated")),
        "{}",
        status.message
    );

    // A restart computes what is in use from the stored Services.
    srv.shutdown().await.unwrap();
    let srv = physical_cluster(dir.path(), "10.100.0.0/24").await;
    let services: Api<Service> = Api::namespaced(cluster_client(&srv).await, "default");
    let after = services.create(&PostParams::default(), &service("dup-ip", "ClusterIP", json!({"clusterIP": taken_ip}))).await;
    assert_eq!(api_status(after, "a cluster IP taken before the restart").code, 422);
    let fresh = services.create(&PostParams::default(), &service("fresh", "ClusterIP", json!({}))).await.unwrap();
    assert!(!ips.contains(&cluster_ip(&fresh)), "{} was handed out before the restart", cluster_ip(&fresh));

    // Deleting a Service frees its IP for a request by number.
    services.delete("s1", &Default::default()).await.unwrap();
    let reused = services.create(&PostParams::default(), &service("reused", "ClusterIP", json!({"clusterIP": taken_ip}))).await.unwrap();
    assert_eq!(cluster_ip(&reused), taken_ip);
    // A NodePort Service made a ClusterIP one frees its node port.
    let s2 = services.get("s2").await.unwrap();
    let mut plain = service("s2", "ClusterIP", json!({}));
    plain.metadata.resource_version = s2.metadata.resource_version.clone();
    let plain = services.replace("s2", &PostParams::default(), &plain).await.unwrap();
    assert!(node_ports(&plain).is_empty(), "{:?}", node_ports(&plain));
    let freed = json!({"ports": [{"name": "http", "port": 80, "nodePort": taken_port}]});
    let moved = services.create(&PostParams::default(), &service("moved", "NodePort", freed)).await.unwrap();
    assert_eq!(node_ports(&moved), vec![taken_port]);
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_service_gets_no_cluster_ip_and_no_node_port() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let gvk = GroupVersionKind::gvk("tenancy.flotilla.io", "v1alpha1", "Workspace");
    let workspaces: Api<DynamicObject> = Api::all_with(root_client(&srv).await, &kube::api::ApiResource::from_gvk(&gvk));
    let ws = json!({"apiVersion": "tenancy.flotilla.io/v1alpha1", "kind": "Workspace", "metadata": {"name": "team-a"}});
    workspaces.create(&PostParams::default(), &serde_json::from_value(ws).unwrap()).await.unwrap();
    wait_until("workspace team-a is Ready", DEADLINE, || async {
        let w = workspaces.get("team-a").await.map_err(|e| e.to_string())?;
        match w.data.pointer("/status/phase").and_then(Value::as_str) {
            Some("Ready") => Ok(()),
            other => Err(format!("phase {other:?}")),
        }
    })
    .await;

    let services: Api<Service> = Api::namespaced(workspace_client(&srv, "team-a").await, "default");
    let local = json!({"externalTrafficPolicy": "Local"});
    for (name, ty, extra) in [("web", "ClusterIP", json!({})), ("np", "NodePort", json!({})), ("lb", "LoadBalancer", local)] {
        let created = services.create(&PostParams::default(), &service(name, ty, extra)).await.unwrap();
        let spec = created.spec.as_ref().unwrap();
        assert_eq!(cluster_ip(&created), "", "{name}: {spec:?}");
        assert_eq!(spec.cluster_ips, None, "{name}");
        assert_eq!(node_ports(&created), Vec::<i32>::new(), "{name}");
        assert_eq!(spec.health_check_node_port, None, "{name}");
    }
    srv.shutdown().await.unwrap();
}
