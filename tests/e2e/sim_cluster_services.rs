//! Services and Ingresses on a simulated cluster through the real kubectl, as on a kind
//! cluster with MetalLB: cluster IPs from the service range and node ports from
//! 30000-32767 allocated on create, load-balancer addresses from the cluster's pool, the
//! Ingress address on every Ingress, and a restart that hands nothing out twice.

use crate::common;

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use common::{wait_until, SimCluster};

/// A small service range and a pool of two addresses, so that exhaustion is near.
const EAST: &str = r#"
name: east
labels: {region: us}
nodes:
  - count: 1
    cpu: "2"
    memory: 4Gi
startupDelay: 100ms
serviceCIDR: 10.200.0.0/24
loadBalancerPool: 172.18.255.200-172.18.255.201
ingressAddress: 172.18.255.10
"#;

const DEADLINE: Duration = Duration::from_secs(30);

const NODE_PORT: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: np}
spec:
  type: NodePort
  selector: {app: np}
  ports:
  - {name: http, port: 80, targetPort: 8080, nodePort: 30080}
  - {name: https, port: 443, targetPort: 8443}
"#;

/// The rows of `kubectl get svc`, each split into its cells, without the header.
fn services(c: &SimCluster) -> Vec<Vec<String>> {
    let out = c.k(&["get", "svc"]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], "{out}");
    lines.map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

/// The row of Service `name`.
fn row(c: &SimCluster, name: &str) -> Vec<String> {
    services(c).into_iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("no Service {name}"))
}

fn external_ip(c: &SimCluster, name: &str) -> String {
    row(c, name)[3].clone()
}

fn in_service_range(ip: &str) -> bool {
    ip.parse::<Ipv4Addr>().is_ok_and(|ip| ip.octets()[..3] == [10, 200, 0] && ip.octets()[3] != 0 && ip.octets()[3] != 255)
}

fn node_ports(c: &SimCluster, name: &str) -> Vec<u16> {
    let out = c.k(&["get", "svc", name, "-o", "jsonpath={.spec.ports[*].nodePort}"]);
    out.split_whitespace().map(|p| p.parse().unwrap()).collect()
}

#[test]
fn cluster_ips_and_node_ports_are_allocated_and_survive_a_restart() {
    let mut c = SimCluster::start(EAST);
    c.k(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    c.k(&["create", "service", "clusterip", "db", "--clusterip=None"]);
    c.apply(NODE_PORT);
    c.k(&["create", "service", "loadbalancer", "lb", "--tcp=80:8080"]);

    let web = row(&c, "web");
    assert_eq!(web[1..5], ["ClusterIP", web[2].as_str(), "<none>", "80/TCP"], "{web:?}");
    assert!(in_service_range(&web[2]), "{web:?}");
    let db = row(&c, "db");
    assert_eq!(db[1..5], ["ClusterIP", "None", "<none>", "<none>"], "{db:?}");
    let np = row(&c, "np");
    let ports = node_ports(&c, "np");
    assert_eq!(ports[0], 30080, "the requested node port");
    assert!((30000..=32767).contains(&ports[1]) && ports[1] != 30080, "{ports:?}");
    assert_eq!(np[1..5], ["NodePort", np[2].as_str(), "<none>", format!("80:30080/TCP,443:{}/TCP", ports[1]).as_str()], "{np:?}");
    let lb_ports = node_ports(&c, "lb");
    assert!(lb_ports.len() == 1 && !ports.contains(&lb_ports[0]), "{lb_ports:?} {ports:?}");
    let ips: HashSet<String> = ["web", "np", "lb"].iter().map(|s| row(&c, s)[2].clone()).collect();
    assert_eq!(ips.len(), 3, "distinct cluster IPs: {ips:?}");
    assert!(ips.iter().all(|ip| in_service_range(ip)), "{ips:?}");
    let fields = c.k(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIPs} {.spec.ipFamilies} {.spec.ipFamilyPolicy}"]);
    assert_eq!(fields, format!("[\"{}\"] [\"IPv4\"] SingleStack", web[2]));

    // A node port that another Service holds is refused, as kube-apiserver refuses it.
    let dup = c.kubectl(&["create", "service", "nodeport", "dup", "--tcp=81:8080", "--node-port=30080"]);
    assert!(!dup.ok);
    assert!(
        dup.stderr.contains("Service \"dup\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"),
        "{}",
        dup.stderr
    );
    // So is a cluster IP that another holds, and one outside the range.
    let taken = c.kubectl(&["create", "service", "clusterip", "dup", "--tcp=80:80", &format!("--clusterip={}", web[2])]);
    let msg =
        format!("spec.clusterIPs: Invalid value: []string{{\"{0}\"}}: failed to allocate IP {0}: provided IP is already allocated", web[2]);
    assert!(!taken.ok && taken.stderr.contains(&msg), "{}", taken.stderr);
    let outside = c.kubectl(&["create", "service", "clusterip", "dup", "--tcp=80:80", "--clusterip=10.96.0.10"]);
    assert!(
        outside.stderr.contains("the provided IP (10.96.0.10) is not in the valid range. The range of valid IPs is 10.200.0.0/24"),
        "{}",
        outside.stderr
    );

    // A replace that leaves the allocated values out keeps them.
    let replaced = {
        use std::io::Write;
        use std::process::Stdio;
        let mut cmd = common::kubectl_cmd(&c.kubeconfig(), c.dir.path(), &["replace", "-f", "-"]);
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(NODE_PORT.as_bytes()).unwrap();
        common::Out::from(child.wait_with_output().unwrap())
    };
    assert!(replaced.ok, "{replaced:?}");
    assert_eq!((row(&c, "np")[2].clone(), node_ports(&c, "np")), (np[2].clone(), ports.clone()));

    // ClusterIP to NodePort allocates a node port; back to ClusterIP releases it.
    c.k(&["patch", "svc", "web", "-p", r#"{"spec":{"type":"NodePort"}}"#]);
    let web_port = node_ports(&c, "web");
    assert!(web_port.len() == 1 && (30000..=32767).contains(&web_port[0]), "{web_port:?}");
    c.k(&["patch", "svc", "web", "-p", r#"{"spec":{"type":"ClusterIP"}}"#]);
    assert_eq!(node_ports(&c, "web"), Vec::<u16>::new());
    assert_eq!(row(&c, "web")[2], web[2], "the cluster IP stays");
    let reuse = c.k(&["create", "service", "nodeport", "reuse", "--tcp=82:8080", &format!("--node-port={}", web_port[0])]);
    assert!(reuse.contains("service/reuse created"), "{reuse}");

    // After a restart, what the stored Services hold is still taken.
    c.kill9();
    c.launch();
    let again = c.kubectl(&["create", "service", "nodeport", "dup", "--tcp=81:8080", "--node-port=30080"]);
    assert!(!again.ok && again.stderr.contains("provided port is already allocated"), "{}", again.stderr);
    let mut held: HashSet<String> = services(&c).into_iter().map(|r| r[2].clone()).collect();
    for i in 0..10 {
        c.k(&["create", "service", "clusterip", &format!("after-{i}"), "--tcp=80:8080"]);
        let ip = row(&c, &format!("after-{i}"))[2].clone();
        assert!(in_service_range(&ip), "{ip}");
        assert!(held.insert(ip.clone()), "{ip} was handed out twice");
    }
    // Deleting a Service frees its IP.
    c.k(&["delete", "svc", "web"]);
    let back = c.k(&["create", "service", "clusterip", "web2", "--tcp=80:80", &format!("--clusterip={}", web[2])]);
    assert!(back.contains("service/web2 created"), "{back}");
}

#[test]
fn load_balancers_and_ingresses_get_addresses_from_the_clusters_pool() {
    let mut c = SimCluster::start(EAST);
    c.k(&["create", "service", "loadbalancer", "lb1", "--tcp=80:8080"]);
    wait_until("lb1's address", DEADLINE, || external_ip(&c, "lb1"), |ip| ip == "172.18.255.200");
    let ingress = c.k(&["get", "svc", "lb1", "-o", "jsonpath={.status.loadBalancer.ingress}"]);
    assert_eq!(ingress, r#"[{"ip":"172.18.255.200","ipMode":"VIP"}]"#);
    c.k(&["create", "service", "loadbalancer", "lb2", "--tcp=80:8080"]);
    wait_until("lb2's address", DEADLINE, || external_ip(&c, "lb2"), |ip| ip == "172.18.255.201");

    // The pool is exhausted: the next one waits, with a Warning saying why.
    c.k(&["create", "service", "loadbalancer", "lb3", "--tcp=80:8080"]);
    wait_until(
        "an AllocationFailed event on lb3",
        DEADLINE,
        || c.k(&["get", "events", "--field-selector", "involvedObject.name=lb3", "-o", "jsonpath={.items[*].reason}"]),
        |reasons| reasons.contains("AllocationFailed"),
    );
    assert_eq!(external_ip(&c, "lb3"), "<pending>");

    // An Ingress reports the cluster's Ingress address.
    c.k(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    c.k(&["create", "ingress", "web", "--rule=example.com/=web:80"]);
    let address = || c.k(&["get", "ingress", "web", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"]);
    wait_until("the Ingress address", DEADLINE, address, |a| a == "172.18.255.10");
    let table = c.k(&["get", "ingress", "web"]);
    assert!(table.lines().nth(1).is_some_and(|l| l.contains("172.18.255.10")), "{table}");

    // Deleting lb1 frees its address for the one waiting.
    c.k(&["delete", "svc", "lb1"]);
    wait_until("lb3 to get lb1's address", DEADLINE, || external_ip(&c, "lb3"), |ip| ip == "172.18.255.200");

    // A Service that stops being a load balancer gives its address back.
    c.k(&["patch", "svc", "lb2", "-p", r#"{"spec":{"type":"ClusterIP"}}"#]);
    assert_eq!(c.k(&["get", "svc", "lb2", "-o", "jsonpath={.status}"]), r#"{"loadBalancer":{}}"#);
    c.k(&["create", "service", "loadbalancer", "lb4", "--tcp=80:8080"]);
    wait_until("lb4 to get lb2's address", DEADLINE, || external_ip(&c, "lb4"), |ip| ip == "172.18.255.201");

    // A restart keeps every address where it is, and the pool stays exhausted.
    c.kill9();
    c.launch();
    c.k(&["create", "service", "loadbalancer", "lb5", "--tcp=80:8080"]);
    wait_until(
        "an AllocationFailed event on lb5",
        DEADLINE,
        || c.k(&["get", "events", "--field-selector", "involvedObject.name=lb5", "-o", "jsonpath={.items[*].reason}"]),
        |reasons| reasons.contains("AllocationFailed"),
    );
    assert_eq!(
        (external_ip(&c, "lb3"), external_ip(&c, "lb4"), external_ip(&c, "lb5")),
        ("172.18.255.200".to_string(), "172.18.255.201".to_string(), "<pending>".to_string())
    );
}

#[test]
fn without_a_pool_load_balancers_stay_pending_as_on_kind() {
    let c = SimCluster::start("name: bare\nnodes: [{count: 1, cpu: \"1\", memory: 1Gi}]\nstartupDelay: 100ms\n");
    c.k(&["create", "service", "loadbalancer", "lb", "--tcp=80:8080"]);
    c.k(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    c.k(&["create", "ingress", "web", "--rule=example.com/=web:80"]);
    let lb = row(&c, "lb");
    assert_eq!(lb[3], "<pending>", "{lb:?}");
    assert!(lb[2].starts_with("10.96."), "kind's default service range: {lb:?}");
    assert!(lb[4].starts_with("80:3"), "{lb:?}");
    assert_eq!(c.k(&["get", "ingress", "web", "-o", "jsonpath={.status.loadBalancer.ingress}"]), "");
}
