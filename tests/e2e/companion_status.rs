//! A Deployment's companions show what their clusters report: the real `flotilla start`
//! (no scheduler, no clusters), with kubectl playing the syncers' part by writing each
//! cluster's report in the annotation `clusterstatus.workload.flotilla.io/<cluster>`, and
//! the workspace's Service and HorizontalPodAutoscaler read back through `kubectl get`
//! as a user reads them.

use crate::common;

use std::time::Duration;

use common::{wait_until, Flotilla};

/// How long the status controller may take to sum a change (it runs on every watch
/// event; this is slack for a loaded test machine).
const DEADLINE: Duration = Duration::from_secs(20);

const COMPANIONS: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web, state.workload.flotilla.io/east: Sync, state.workload.flotilla.io/west: Sync}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
  labels: {app: web, state.workload.flotilla.io/east: Sync, state.workload.flotilla.io/west: Sync}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 10
"#;

/// The EXTERNAL-IP cell of Service `web` (NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE).
fn external_ip(f: &Flotilla) -> String {
    f.row(&["--context", "demo", "svc", "web"]).get(3).cloned().unwrap_or_default()
}

/// The REPLICAS cell of autoscaler `web` (NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE).
fn hpa_replicas(f: &Flotilla) -> String {
    f.row(&["--context", "demo", "hpa", "web"]).get(5).cloned().unwrap_or_default()
}

/// Writes `cluster`'s report of `object`'s status, as its syncer does.
fn report(f: &Flotilla, object: &str, cluster: &str, status: &str) {
    f.k(&["--context", "demo", "annotate", "--overwrite", object, &format!("clusterstatus.workload.flotilla.io/{cluster}={status}")]);
}

#[test]
fn companions_status_is_the_sum_of_their_assigned_clusters_reports() {
    let f = Flotilla::start_with(&["--no-scheduler"]);
    let o = f.flotilla(&["workspace", "create", "demo"]);
    assert!(o.ok, "workspace create: {o:?}");
    f.apply(&["--context", "demo", "-n", "default"], COMPANIONS);
    // No cluster has reported: a pending load balancer, as on any cluster.
    assert_eq!(external_ip(&f), "<pending>");

    report(&f, "svc/web", "east", r#"{"loadBalancer":{"ingress":[{"ip":"172.18.255.200"}]}}"#);
    report(&f, "svc/web", "west", r#"{"loadBalancer":{"ingress":[{"ip":"172.18.255.201"}]}}"#);
    // kubectl prints the server's cell: the addresses, sorted, joined by a comma.
    wait_until("both clusters' addresses on the Service", DEADLINE, || external_ip(&f), |ip| ip == "172.18.255.200,172.18.255.201");
    let ingress = f.k(&["--context", "demo", "get", "svc", "web", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"]);
    assert_eq!(ingress, "172.18.255.200 172.18.255.201", "one entry per address, east's first");

    // West is no longer assigned: its report, still there, no longer counts.
    f.k(&["--context", "demo", "label", "svc", "web", "state.workload.flotilla.io/west-"]);
    wait_until("only east's address", DEADLINE, || external_ip(&f), |ip| ip == "172.18.255.200");
    // Nor does it once east goes too: the load balancer is pending again.
    f.k(&["--context", "demo", "label", "svc", "web", "state.workload.flotilla.io/east-"]);
    wait_until("no address", DEADLINE, || external_ip(&f), |ip| ip == "<pending>");
    let lb = f.k(&["--context", "demo", "get", "svc", "web", "-o", "jsonpath={.status}"]);
    assert_eq!(lb, r#"{"loadBalancer":{}}"#);

    // The autoscaler: each cluster's scales its own share; the workspace shows the sum.
    assert_eq!(hpa_replicas(&f), "0", "no cluster has reported: {:?}", f.row(&["--context", "demo", "hpa", "web"]));
    report(&f, "hpa/web", "east", r#"{"currentReplicas":2,"desiredReplicas":2}"#);
    report(&f, "hpa/web", "west", r#"{"currentReplicas":3,"desiredReplicas":4}"#);
    wait_until("the autoscaler's replicas summed", DEADLINE, || hpa_replicas(&f), |r| r == "5");
    let desired = f.k(&["--context", "demo", "get", "hpa", "web", "-o", "jsonpath={.status.desiredReplicas}"]);
    assert_eq!(desired, "6");
    // The autoscaling/v1 view of the same object shows the same sum.
    let v1 =
        f.k(&["--context", "demo", "get", "horizontalpodautoscalers.v1.autoscaling", "web", "-o", "jsonpath={.status.currentReplicas}"]);
    assert_eq!(v1, "5");
}
