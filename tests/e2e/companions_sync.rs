//! A Deployment's companions (its Services, Ingresses, ServiceAccount,
//! PodDisruptionBudgets, NetworkPolicies and autoscalers) follow it to its clusters,
//! end to end: `flotilla start` with the scheduler and two simulated clusters, driven
//! with the real kubectl on every side.

use crate::common;

use common::fleet::{events, fleet, rollout, sim, wait_assignment, DEADLINE};
use common::{tail, wait_for, wait_until, Flotilla, SimCluster};

/// What follows the Deployments of [`APP`], upstream.
const COMPANIONS: &str = "svc,ing,pdb,netpol,sa,hpa";

/// Two Deployments, `web` on east and `api` on west (by their Placements), with
/// companions: some follow `web` alone, `front` follows both, `lonely` neither.
const APP: &str = r#"apiVersion: scheduling.flotilla.io/v1alpha1
kind: Placement
metadata: {name: on-east}
spec: {clusterSelector: {matchLabels: {region: east}}}
---
apiVersion: scheduling.flotilla.io/v1alpha1
kind: Placement
metadata: {name: on-west}
spec: {clusterSelector: {matchLabels: {region: west}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web-runner}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, annotations: {scheduling.flotilla.io/placement: on-east}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, tier: front}}
    spec:
      serviceAccountName: web-runner
      containers: [{name: app, image: "nginx:1.27", resources: {requests: {cpu: 100m}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, annotations: {scheduling.flotilla.io/placement: on-west}}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api, tier: front}}
    spec:
      containers: [{name: app, image: "nginx:1.27", resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: https, port: 443, targetPort: 8443}]
---
apiVersion: v1
kind: Service
metadata: {name: front}
spec:
  selector: {tier: front}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: lonely}
spec:
  selector: {app: nobody}
  ports: [{port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
  - host: web.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{ports: [{port: 8080}]}]
"#;

/// The companions' copies on `c`, as `kind/name`, sorted.
fn companions_on(c: &SimCluster) -> Vec<String> {
    let label = format!("workload.flotilla.io/sync-target={}", c.name);
    let o = c.kubectl(&["get", COMPANIONS, "-A", "-l", &label, "-o", "name"]);
    let mut names: Vec<String> = o.stdout.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
    names.sort();
    names
}

fn wait_companions(f: &Flotilla, c: &SimCluster, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_for(&format!("the companions on {}", c.name), DEADLINE, || {
        let got = companions_on(c);
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}, want {want:?}\n--- server log tail ---\n{}", tail(&f.log())))
        }
    });
}

/// The Flotilla namespace of workspace `demo`'s namespace `default` on `c`.
fn copy_namespace(c: &SimCluster) -> String {
    let o = c.kubectl(&["get", "deploy", "-A", "-l", "workload.flotilla.io/sync-target", "-o", "jsonpath={.items[0].metadata.namespace}"]);
    o.stdout.trim().to_string()
}

const WEB_ON_EAST: [&str; 6] = [
    "ingress.networking.k8s.io/web",
    "networkpolicy.networking.k8s.io/web",
    "poddisruptionbudget.policy/web",
    "service/front",
    "service/web",
    "serviceaccount/web-runner",
];

#[test]
fn companions_follow_their_deployments_to_their_clusters_and_nowhere_else() {
    let (east, west) = (sim("east", 4), sim("west", 4));
    let f = fleet(&[], &[(&east, &["region=east"]), (&west, &["region=west"])]);
    f.apply(&["--context", "demo", "-n", "default"], APP);
    wait_assignment(&f, "web", |a| a == "east=2");
    wait_assignment(&f, "api", |a| a == "west=1");
    wait_companions(&f, &east, &WEB_ON_EAST);
    wait_companions(&f, &west, &["service/front"]);
    rollout(&f, "web");

    // Operators see what follows each workload, in flotilla status and its JSON.
    let listed = wait_for("web's companions in flotilla status", DEADLINE, || {
        let o = f.flotilla(&["status", "-o", "json", "--workspace", "demo"]);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).map_err(|e| format!("{e}: {o:?}"))?;
        let web = v["workspaces"][0]["workloads"].as_array().into_iter().flatten().find(|w| w["name"] == "web").cloned();
        let companions = web.map(|w| w["companions"].clone()).unwrap_or_default();
        if companions.as_array().is_some_and(|c| c.len() == 6) {
            Ok(companions)
        } else {
            Err(format!("{companions}"))
        }
    });
    assert_eq!(
        listed,
        serde_json::json!([
            "Ingress/web",
            "NetworkPolicy/web",
            "PodDisruptionBudget/web",
            "Service/front",
            "Service/web",
            "ServiceAccount/web-runner"
        ])
    );
    let text = f.flotilla(&["status", "--workspace", "demo"]).stdout;
    let row = text.lines().find(|l| l.starts_with("default     deploy/web ")).unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(5), Some("6"), "the COMPANIONS column counts them:\n{text}");

    // What the clusters allocate for themselves is theirs; what the user asked for
    // is copied as it is, with both ports keyed by name.
    let ns = copy_namespace(&east);
    let ports = east.k(&["-n", &ns, "get", "svc", "web", "-o", r#"jsonpath={range .spec.ports[*]}{.name}:{.port}>{.targetPort} {end}"#]);
    assert_eq!(ports.trim(), "http:80>8080 https:443>8443");
    // Upstream, each companion carries the labels of the clusters it follows to.
    let labelled = |cluster: &str| {
        let sel = format!("state.workload.flotilla.io/{cluster}=Sync");
        let mut names: Vec<String> =
            f.k(&["--context", "demo", "get", COMPANIONS, "-l", &sel, "-o", "name"]).lines().map(String::from).collect();
        names.sort();
        names
    };
    assert_eq!(labelled("east"), WEB_ON_EAST.to_vec());
    assert_eq!(labelled("west"), ["service/front"]);

    // Drift on a copy is reverted: a selector edited downstream goes back.
    let o = east.kubectl(&["-n", &ns, "patch", "svc", "web", "--type=merge", "-p", r#"{"spec":{"selector":{"app":"evil"}}}"#]);
    assert!(o.ok, "{o:?}");
    wait_until(
        "the copy's selector reverted",
        DEADLINE,
        || east.k(&["-n", &ns, "get", "svc", "web", "-o", "jsonpath={.spec.selector.app}"]),
        |s| s.trim() == "web",
    );

    // A companion deleted upstream is deleted on every cluster.
    let o = f.kubectl(&["--context", "demo", "delete", "svc", "front"]);
    assert!(o.ok, "{o:?}");
    let without_front: Vec<&str> = WEB_ON_EAST.iter().copied().filter(|n| *n != "service/front").collect();
    wait_companions(&f, &east, &without_front);
    wait_companions(&f, &west, &[]);

    // The Deployment deleted: what only it needed goes from its cluster, and upstream
    // loses its labels but stays.
    let o = f.kubectl(&["--context", "demo", "delete", "deploy", "web", "--timeout=45s"]);
    assert!(o.ok, "{o:?}");
    wait_companions(&f, &east, &[]);
    wait_until(
        "the upstream labels removed",
        DEADLINE,
        || f.k(&["--context", "demo", "get", COMPANIONS, "-l", "workload.flotilla.io/referenced", "-o", "name"]),
        |l| l.trim().is_empty(),
    );
    let left = f.k(&["--context", "demo", "get", "svc,ing,pdb,netpol", "-o", "name"]);
    assert_eq!(left.lines().count(), 5, "the upstream objects stay: {left}");
}

/// A Deployment with a Service and an Ingress, placed by the default Placement.
const MOVABLE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: "nginx:1.27", resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  defaultBackend: {service: {name: web, port: {number: 80}}}
"#;

#[test]
fn companions_move_with_their_deployment_when_its_cluster_is_lost() {
    let mut east = sim("east", 8);
    let west = sim("west", 4);
    let f = fleet(&common::fleet::FAST, &[(&east, &[]), (&west, &[])]);
    f.apply(&["--context", "demo", "-n", "default"], MOVABLE);
    assert_eq!(wait_assignment(&f, "web", |a| !a.is_empty()), "east=2");
    let both = ["ingress.networking.k8s.io/web", "service/web"];
    wait_companions(&f, &east, &both);
    wait_companions(&f, &west, &[]);

    east.kill9();
    wait_assignment(&f, "web", |a| a == "west=2");
    wait_companions(&f, &west, &both);
    rollout(&f, "web");

    // Back, the lost cluster removes its stale companions.
    east.launch();
    wait_companions(&f, &east, &[]);
    wait_companions(&f, &west, &both);
}

#[test]
fn an_autoscaler_is_divided_over_its_clusters_and_owns_their_replicas() {
    let (east, west) = (sim("east", 4), sim("west", 4));
    let f = fleet(&[], &[(&east, &[]), (&west, &[])]);
    let spread = "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: spread}\nspec: {numberOfClusters: 2, replicaScheduling: Divide}\n";
    let app = MOVABLE.replace(
        "metadata: {name: web}\nspec:\n  replicas: 2",
        "metadata: {name: web, annotations: {scheduling.flotilla.io/placement: spread}}\nspec:\n  replicas: 4",
    );
    let hpa = r#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 10
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}}]
"#;
    f.apply(&["--context", "demo", "-n", "default"], &format!("{spread}---\n{app}---\n{hpa}"));
    wait_assignment(&f, "web", |a| a == "east=2 west=2");
    let bounds = |c: &SimCluster| {
        let label = format!("workload.flotilla.io/sync-target={}", c.name);
        c.k(&["get", "hpa", "-A", "-l", &label, "-o", "jsonpath={.items[*].spec.minReplicas}-{.items[*].spec.maxReplicas}"])
    };
    for c in [&east, &west] {
        wait_until(&format!("{}'s autoscaler with its half of the bounds", c.name), DEADLINE, || bounds(c), |b| b == "1-5");
    }

    // The cluster's autoscaler scales its copy: the syncer leaves what it set, through
    // a later change of the same Deployment.
    let ns = copy_namespace(&east);
    let o = east.kubectl(&["-n", &ns, "scale", "deploy", "web", "--replicas=4"]);
    assert!(o.ok, "{o:?}");
    f.k(&["--context", "demo", "annotate", "deploy", "web", "team=shop"]);
    let copy =
        |c: &SimCluster| c.k(&["-n", &ns, "get", "deploy", "web", "-o", r#"jsonpath={.metadata.annotations.team}:{.spec.replicas}"#]);
    wait_until("east's copy updated, with the autoscaler's replicas", DEADLINE, || copy(&east), |c| c == "shop:4");

    // Each cluster's autoscaler reports; upstream shows the sums.
    for (c, replicas) in [(&east, 4), (&west, 2)] {
        let status = format!(r#"{{"status":{{"currentReplicas":{replicas},"desiredReplicas":{replicas}}}}}"#);
        let o = c.kubectl(&["-n", &ns, "patch", "hpa", "web", "--subresource=status", "--type=merge", "-p", &status]);
        assert!(o.ok, "{o:?}");
    }
    wait_until(
        "the upstream autoscaler's status, summed",
        DEADLINE,
        || f.k(&["--context", "demo", "get", "hpa", "web", "-o", "jsonpath={.status.currentReplicas}/{.status.desiredReplicas}"]),
        |s| s == "6/6",
    );
}

/// A simulated cluster with a load-balancer pool and an Ingress address of its own.
fn sim_with_pool(name: &str, octet: u8) -> SimCluster {
    SimCluster::start(&format!(
        "name: {name}\nnodes:\n  - {{count: 2, cpu: \"4\", memory: 16Gi, pods: 110}}\nstartupDelay: 200ms\n\
         loadBalancerPool: 172.18.{octet}.200-172.18.{octet}.219\ningressAddress: 172.18.{octet}.10\n"
    ))
}

#[test]
fn a_load_balancer_shows_the_addresses_of_every_cluster_it_runs_on() {
    let (east, west) = (sim_with_pool("east", 255), sim_with_pool("west", 254));
    let f = fleet(&[], &[(&east, &[]), (&west, &[])]);
    let spread = "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: spread}\nspec: {numberOfClusters: 2, replicaScheduling: Divide}\n";
    let app = MOVABLE
        .replace(
            "metadata: {name: web}\nspec:\n  replicas: 2",
            "metadata: {name: web, annotations: {scheduling.flotilla.io/placement: spread}}\nspec:\n  replicas: 2",
        )
        .replace("  selector: {app: web}\n  ports: [{port: 80}]", "  type: LoadBalancer\n  selector: {app: web}\n  ports: [{port: 80}]");
    assert!(app.contains("LoadBalancer") && app.contains("spread"), "{app}");
    f.apply(&["--context", "demo", "-n", "default"], &format!("{spread}---\n{app}"));
    wait_assignment(&f, "web", |a| a == "east=1 west=1");
    // Each cluster allocated its own cluster IP and node port, and its pool's address.
    let ns = copy_namespace(&east);
    for (c, lb) in [(&east, "172.18.255.200"), (&west, "172.18.254.200")] {
        let copy = wait_until(
            &format!("{}'s load balancer", c.name),
            DEADLINE,
            || {
                c.k(&[
                    "-n",
                    &ns,
                    "get",
                    "svc",
                    "web",
                    "-o",
                    "jsonpath={.spec.clusterIP} {.spec.ports[0].nodePort} {.status.loadBalancer.ingress[0].ip}",
                ])
            },
            |s| s.ends_with(lb),
        );
        let parts: Vec<&str> = copy.split(' ').collect();
        assert!(parts[0].starts_with("10.96.") && parts[1].parse::<u16>().is_ok_and(|p| (30000..=32767).contains(&p)), "{copy}");
    }
    // Upstream, kubectl shows where the app is reachable: every cluster's address.
    let external = |kind: &str, column: usize| {
        let row = f.k(&["--context", "demo", "get", kind, "web", "--no-headers"]);
        row.split_whitespace().nth(column).unwrap_or_default().to_string()
    };
    wait_until("the Service's addresses upstream", DEADLINE, || external("svc", 3), |a| a == "172.18.254.200,172.18.255.200");
    wait_until("the Ingress's addresses upstream", DEADLINE, || external("ing", 3), |a| a == "172.18.254.10,172.18.255.10");
    // The workspace allocated nothing of its own.
    assert_eq!(external("svc", 2), "<none>", "no cluster IP in a workspace");
}

#[test]
fn a_companion_whose_place_someone_else_holds_is_reported_and_left_alone() {
    let east = sim("east", 4);
    let f = fleet(&[], &[(&east, &[])]);
    let deployment = MOVABLE.split("---").next().unwrap();
    f.apply(&["--context", "demo", "-n", "default"], deployment);
    wait_assignment(&f, "web", |a| a == "east=2");
    let ns = wait_until("the copy's namespace", DEADLINE, || copy_namespace(&east), |n| !n.is_empty());
    // Someone else's Service of the same name, in the Flotilla namespace.
    let theirs = format!("apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  selector: {{app: theirs}}\n  ports: [{{port: 9090}}]\n");
    east.apply(&theirs);
    f.apply(&["--context", "demo", "-n", "default"], MOVABLE);

    let condition = |f: &Flotilla| {
        f.k(&[
            "--context",
            "demo",
            "get",
            "wp",
            "web",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="CompanionsSynced")].status} {.status.conditions[?(@.type=="CompanionsSynced")].message}"#,
        ])
    };
    let refused = wait_until("the refusal on the WorkloadPlacement", DEADLINE, || condition(&f), |c| c.starts_with("False"));
    assert!(refused.contains("east: Service web:") && refused.contains("is not Flotilla's"), "{refused}");
    let event = wait_until("the Event on the Service", DEADLINE, || events(&f, "CompanionRefused"), |e| !e.is_empty());
    assert!(event.starts_with("web: ") && event.contains("cluster east") && event.contains("delete or rename that object"), "{event}");
    // Left alone; the Ingress, whose place is free, is applied.
    assert_eq!(east.k(&["-n", &ns, "get", "svc", "web", "-o", "jsonpath={.spec.selector.app}"]), "theirs");
    wait_companions(&f, &east, &["ingress.networking.k8s.io/web"]);
    // kubectl get wp -o wide lists what follows the workload.
    let wide = f.k(&["--context", "demo", "get", "wp", "web", "-o", "wide", "--no-headers"]);
    let listed = wide.split_whitespace().find(|c| c.contains("Service/web")).unwrap_or_default();
    let mut listed: Vec<&str> = listed.split(',').collect();
    listed.sort();
    assert_eq!(listed, ["Ingress/web", "Service/web"], "{wide}");

    // Their object goes: ours is applied, and the condition clears.
    let o = east.kubectl(&["-n", &ns, "delete", "svc", "web"]);
    assert!(o.ok, "{o:?}");
    wait_companions(&f, &east, &["ingress.networking.k8s.io/web", "service/web"]);
    wait_until("the WorkloadPlacement's condition gone", DEADLINE, || condition(&f), |c| c.trim().is_empty());
}

#[test]
fn an_autoscalers_bounds_follow_a_change_of_shares_at_once() {
    let (east, west) = (sim("east", 4), sim("west", 4));
    // No scheduler, and no resync within the test: the shares are written by hand,
    // and only their change may move the bounds.
    let f = common::fleet::unready_fleet(&["--no-scheduler", "--resync", "1h"], &[(&east, &[]), (&west, &[])]);
    let shares = |east: u32, west: u32| {
        format!(
            "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: WorkloadPlacement\nmetadata:\n  name: web\n  labels: {{state.workload.flotilla.io/east: Sync, state.workload.flotilla.io/west: Sync}}\n\
             spec:\n  workload: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  placement: default\n  clusters: [{{name: east, replicas: {east}}}, {{name: west, replicas: {west}}}]\n"
        )
    };
    let app = MOVABLE.split("---").next().unwrap().replace(
        "metadata: {name: web}\nspec:\n  replicas: 2",
        "metadata: {name: web, labels: {state.workload.flotilla.io/east: Sync, state.workload.flotilla.io/west: Sync}}\nspec:\n  replicas: 4",
    );
    let hpa = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: web}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  minReplicas: 2\n  maxReplicas: 10\n";
    f.apply(&["--context", "demo", "-n", "default"], &format!("{}---\n{app}---\n{hpa}", shares(2, 2)));
    let bounds = |c: &SimCluster| {
        let label = format!("workload.flotilla.io/sync-target={}", c.name);
        c.k(&["get", "hpa", "-A", "-l", &label, "-o", "jsonpath={.items[*].spec.minReplicas}-{.items[*].spec.maxReplicas}"])
    };
    for c in [&east, &west] {
        wait_until(&format!("{}'s half of the bounds", c.name), DEADLINE, || bounds(c), |b| b == "1-5");
    }
    // Three quarters to east: 2 of the minimum (1.5, and the tie goes to the first
    // cluster) and 8 of the maximum; west keeps at least one.
    f.apply(&["--context", "demo", "-n", "default"], &shares(3, 1));
    wait_until("east's bounds after the change of shares", DEADLINE, || bounds(&east), |b| b == "2-8");
    wait_until("west's bounds after the change of shares", DEADLINE, || bounds(&west), |b| b == "1-2");
}
