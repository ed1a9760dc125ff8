//! The workload kinds beyond Deployments, placed and run end to end: StatefulSets,
//! DaemonSets, Jobs and CronJobs applied to a workspace go to clusters by their kind's
//! spread rule (a StatefulSet whole on one, a Job on exactly one, a DaemonSet on every
//! selected cluster; a CronJob's schedule runs in the workspace and its Jobs are placed
//! as Jobs), their copies run on the simulated clusters,
//! their status is summed back up so that `kubectl rollout status` and `kubectl wait`
//! work in the workspace, deleting them removes the copies, and a lost cluster moves
//! each kind as its failover rule says (a StatefulSet only once confirmed lost or under
//! `failover.statefulSets: Immediate`, a running Job reruns, a finished one stays).

use crate::common;
use test_clusters::fixtures::deployment;

use std::collections::BTreeSet;
use std::time::Duration;

use common::fleet::{assignment, fleet, wait_assignment, DEADLINE, FAST};
use common::{tail, wait_for, wait_until, Flotilla, Out, SimCluster};
use placement_api::keys::SYNC_TARGET_LABEL;
use serde_json::Value;

/// A simulated cluster of `nodes` nodes of 8 cpu each: the node count is what a
/// DaemonSet's status counts.
fn cluster(name: &str, nodes: u32) -> SimCluster {
    SimCluster::start(&format!("name: {name}\nnodes:\n  - {{count: {nodes}, cpu: \"8\", memory: 16Gi, pods: 110}}\nstartupDelay: 200ms\n"))
}

/// kubectl in workspace `demo`.
fn demo(f: &Flotilla, args: &[&str]) -> Out {
    let mut all = vec!["--context", "demo"];
    all.extend_from_slice(args);
    f.kubectl(&all)
}

/// kubectl in workspace `demo`, which must succeed; its stdout.
fn kd(f: &Flotilla, args: &[&str]) -> String {
    let mut all = vec!["--context", "demo"];
    all.extend_from_slice(args);
    f.k(&all)
}

/// `kubectl rollout status WHAT` in `demo`, which must finish; its stdout.
fn rolled_out(f: &Flotilla, what: &str) -> String {
    let o = demo(f, &["rollout", "status", what, "--timeout=45s"]);
    assert!(o.ok, "kubectl rollout status {what} did not finish: {o:?}\nserver log tail:\n{}", tail(&f.log()));
    o.stdout
}

/// `kubectl wait --for=condition=CONDITION WHAT` in `demo`, which must be met within `timeout`.
fn met(f: &Flotilla, what: &str, condition: &str, timeout: &str) {
    let o = demo(f, &["wait", &format!("--for=condition={condition}"), what, &format!("--timeout={timeout}")]);
    let status = demo(f, &["get", what, "-o", "jsonpath={.status}"]).stdout;
    assert!(
        o.ok && o.stdout.contains("condition met"),
        "kubectl wait --for=condition={condition} {what}: {o:?}\nits status: {status}\nserver log tail:\n{}",
        tail(&f.log())
    );
}

/// The WorkloadPlacement `name` of `demo`'s default namespace, as JSON (Null while there is none).
fn wp(f: &Flotilla, name: &str) -> Value {
    let o = demo(f, &["get", "wp", name, "-o", "json"]);
    if o.ok {
        serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("kubectl get wp {name} -o json printed no JSON ({e}): {}", o.stdout))
    } else {
        Value::Null
    }
}

/// The cluster names of a WorkloadPlacement's `spec.clusters`, sorted.
fn cluster_names(wp: &Value) -> Vec<String> {
    let mut names: Vec<String> =
        wp["spec"]["clusters"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str().map(str::to_string)).collect();
    names.sort();
    names
}

/// Waits until the WorkloadPlacement `name` names clusters that pass `want`; returns it.
fn wait_placed(f: &Flotilla, name: &str, want: impl Fn(&[String]) -> bool) -> Value {
    wait_for(&format!("the WorkloadPlacement of {name}"), DEADLINE, || {
        let placement = wp(f, name);
        if want(&cluster_names(&placement)) {
            Ok(placement)
        } else {
            Err(format!("spec {}\n--- server log tail ---\n{}", placement["spec"], tail(&f.log())))
        }
    })
}

/// The `FailoverPaused` condition of a WorkloadPlacement, as `status: message` (empty: none).
fn failover_paused(wp: &Value) -> String {
    wp["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "FailoverPaused")
        .map(|c| format!("{}: {}", c["status"].as_str().unwrap_or_default(), c["message"].as_str().unwrap_or_default()))
        .unwrap_or_default()
}

/// `namespace/name` of each copy of `kind` `name` that Flotilla synced to `c`: labelled
/// for it, in any (hashed) namespace. Err when the cluster does not answer.
fn copies_on(c: &SimCluster, kind: &str, name: &str) -> Result<Vec<String>, String> {
    let label = format!("{SYNC_TARGET_LABEL}={}", c.name);
    let o = c.kubectl(&[
        "get",
        kind,
        "-A",
        "-l",
        &label,
        "--field-selector",
        &format!("metadata.name={name}"),
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}"#,
    ]);
    if !o.ok {
        return Err(format!("{} did not answer `kubectl get {kind} -A`: {}", c.name, o.stderr.trim()));
    }
    Ok(o.stdout.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect())
}

/// Waits until `c` has exactly one copy of `kind` `name`; returns its namespace.
fn the_copy(c: &SimCluster, kind: &str, name: &str) -> String {
    wait_for(&format!("the copy of {kind}/{name} on {}", c.name), DEADLINE, || match copies_on(c, kind, name)?.as_slice() {
        [one] => Ok(one.split_once('/').map(|(ns, _)| ns.to_string()).unwrap_or_default()),
        seen => Err(format!("copies {seen:?}")),
    })
}

/// Waits until no cluster of `clusters` has a copy of `kind` `name`.
fn wait_no_copies(clusters: &[&SimCluster], kind: &str, name: &str) {
    wait_for(&format!("the copies of {kind}/{name} removed"), DEADLINE, || {
        let left: Vec<String> = clusters.iter().map(|c| copies_on(c, kind, name)).collect::<Result<Vec<_>, _>>()?.concat();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still there: {left:?}"))
        }
    });
}

/// `name=phase` of the pods with label `selector` in namespace `ns` of `c`, sorted.
fn pods(c: &SimCluster, ns: &str, selector: &str) -> Result<Vec<String>, String> {
    let o = c.kubectl(&[
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        selector,
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}"#,
    ]);
    if !o.ok {
        return Err(format!("{} did not answer `kubectl get pods`: {}", c.name, o.stderr.trim()));
    }
    let mut all: Vec<String> = o.stdout.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect();
    all.sort();
    Ok(all)
}

/// The one cluster of `clusters` with this name.
fn named<'a>(clusters: &[&'a SimCluster], name: &str) -> &'a SimCluster {
    clusters.iter().copied().find(|c| c.name == name).unwrap_or_else(|| panic!("no cluster named {name:?}"))
}

/// A Placement that asks for two clusters, dividing replicas.
const SPREAD: &str = "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: spread}\n\
                      spec: {numberOfClusters: 2, replicaScheduling: Divide}\n";

/// A Placement that selects the clusters labelled `tier=edge`, and asks for one.
const EDGE: &str = "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: edge}\n\
                    spec: {clusterSelector: {matchLabels: {tier: edge}}, numberOfClusters: 1, replicaScheduling: Divide}\n";

/// A key-value store of three members with a claim each, under Placement `spread`.
const KV_STORE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: kv-peers}
spec:
  clusterIP: None
  selector: {app: kv}
  ports: [{name: peer, port: 7000}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: kv}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: kv}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: kv
  annotations: {scheduling.flotilla.io/placement: spread}
spec:
  serviceName: kv-peers
  replicas: 3
  selector: {matchLabels: {app: kv}}
  template:
    metadata: {labels: {app: kv}}
    spec:
      containers:
      - name: member
        image: registry.example.com/kv-member:0.7
        resources: {requests: {cpu: 100m, memory: 128Mi}}
        volumeMounts: [{name: state, mountPath: /srv/kv}]
  volumeClaimTemplates:
  - metadata: {name: state}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 2Gi}}
"#;

/// A database Deployment that mounts a claim of its own.
const DATABASE: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: db-data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 2Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: db}
spec:
  strategy: {type: Recreate}
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: registry.example.com/db:8
        volumeMounts: [{name: data, mountPath: /var/lib/db}]
      volumes:
      - {name: data, persistentVolumeClaim: {claimName: db-data}}
"#;

/// A StatefulSet of two whose claims name StorageClass `fast` (placed by `ws`'s default Placement).
fn ring(ws: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: ring}}
spec:
  serviceName: ring
  replicas: 2
  podManagementPolicy: Parallel
  selector: {{matchLabels: {{app: ring}}}}
  template:
    metadata: {{labels: {{app: ring, workspace: {ws}}}}}
    spec:
      containers: [{{name: node, image: "registry.example.com/ring:2", volumeMounts: [{{name: data, mountPath: /data}}]}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      storageClassName: fast
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

/// Workspace `ws`'s StorageClass `fast`, with a parameter that says whose it is.
fn fast_class(ws: &str) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: fast}}\nprovisioner: example.com/ssd\n\
         parameters: {{tier: {ws}}}\nreclaimPolicy: Delete\nvolumeBindingMode: WaitForFirstConsumer\n"
    )
}

/// A node agent, under Placement `edge`.
const NODE_AGENT: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: probe
  annotations: {scheduling.flotilla.io/placement: edge}
spec:
  selector: {matchLabels: {app: probe}}
  template:
    metadata: {labels: {app: probe}}
    spec:
      containers:
      - name: probe
        image: registry.example.com/node-probe:1.4
        resources: {requests: {cpu: 50m, memory: 32Mi}}
"#;

/// StatefulSets run whole on one cluster and DaemonSets on every selected cluster,
/// whatever `numberOfClusters` says; their copies run there (named pods with bound
/// claims, a pod per node), their summed status rolls out upstream, and deleting them
/// removes the copies.
#[test]
fn statefulsets_run_whole_on_one_cluster_and_daemonsets_on_every_selected_one() {
    let (east, west, north) = (cluster("east", 2), cluster("west", 3), cluster("north", 1));
    let f = fleet(&[], &[(&east, &["tier=edge"]), (&west, &["tier=edge"]), (&north, &[])]);
    let all = [&east, &west, &north];
    f.apply(&["--context", "demo"], &format!("{SPREAD}---\n{EDGE}"));

    // The Placement really asks for two clusters: a Deployment under it divides.
    f.apply(&["--context", "demo", "-n", "default"], &deployment("front").replicas(4).cpu("100m").placement("spread").manifest());
    let front = wait_assignment(&f, "front", |a| a.split_whitespace().count() == 2);

    // The StatefulSet under the same Placement runs whole on one cluster.
    f.apply(&["--context", "demo", "-n", "default"], KV_STORE);
    let kv = wait_placed(&f, "kv", |c| !c.is_empty());
    assert_eq!(kv["spec"]["workload"]["kind"], "StatefulSet", "{}", kv["spec"]);
    let shares = kv["spec"]["clusters"].as_array().cloned().unwrap_or_default();
    assert_eq!(shares.len(), 1, "a StatefulSet runs on one cluster even when its Placement asks for two (front got {front}): {shares:?}");
    assert_eq!(shares[0]["replicas"], 3, "all its replicas on that cluster: {shares:?}");
    let home = named(&all, shares[0]["name"].as_str().unwrap_or_default());
    let out = rolled_out(&f, "sts/kv");
    assert!(out.contains("roll out complete") || out.contains("rolling update complete"), "{out}");
    assert_eq!(kd(&f, &["get", "sts", "kv", "-o", "jsonpath={.status.readyReplicas}/{.spec.replicas}"]), "3/3");

    // Downstream: the pods by their ordinal names, each with its claim bound by the
    // cluster's default class; and no copy anywhere else.
    let ns = the_copy(home, "sts", "kv");
    wait_until(
        &format!("kv's pods running on {}", home.name),
        DEADLINE,
        || pods(home, &ns, "app=kv").map(|p| p.join(" ")).unwrap_or_else(|e| e),
        |p| p == "kv-0=Running kv-1=Running kv-2=Running",
    );
    // Each claim Bound, to a volume of the class `standard` (the PV says the class: a
    // claim that names none may keep none).
    let claims = || {
        let phases =
            home.kubectl(&["-n", &ns, "get", "pvc", "-o", r#"jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}"#]);
        let classes = home.kubectl(&[
            "get",
            "pv",
            "-o",
            r#"jsonpath={range .items[*]}{.spec.claimRef.namespace}/{.spec.claimRef.name}={.spec.storageClassName}{"\n"}{end}"#,
        ]);
        let mut lines: Vec<String> = phases.stdout.lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
        let prefix = format!("{ns}/");
        lines.extend(classes.stdout.lines().filter_map(|l| l.strip_prefix(&prefix)).map(|l| format!("pv of {l}")));
        lines.sort();
        format!("{}{}{}", lines.join(" "), phases.stderr.trim(), classes.stderr.trim())
    };
    wait_until(&format!("kv's claims bound on {}", home.name), DEADLINE, claims, |c| {
        c == "pv of state-kv-0=standard pv of state-kv-1=standard pv of state-kv-2=standard \
              state-kv-0=Bound state-kv-1=Bound state-kv-2=Bound"
    });
    for other in all.iter().filter(|c| c.name != home.name) {
        assert_eq!(copies_on(other, "sts", "kv"), Ok(vec![]), "kv runs on {} only", home.name);
    }
    // Its headless Service and disruption budget follow it there, as a Deployment's do.
    wait_until(
        "kv's companions listed",
        DEADLINE,
        || kd(&f, &["get", "wp", "kv", "-o", "jsonpath={.status.companions}"]),
        |c| c.contains("PodDisruptionBudget/kv") && c.contains("Service/kv-peers"),
    );
    for (kind, name) in [("svc", "kv-peers"), ("pdb", "kv")] {
        wait_until(
            &format!("{kind}/{name} on {}", home.name),
            DEADLINE,
            || copies_on(home, kind, name).map(|c| c.join(" ")).unwrap_or_else(|e| e),
            |c| c.ends_with(&format!("/{name}")) && !c.contains(' '),
        );
        for other in all.iter().filter(|c| c.name != home.name) {
            assert_eq!(copies_on(other, kind, name), Ok(vec![]), "{kind}/{name} follows kv to {} only", home.name);
        }
    }

    // A new image rolls out on its cluster, the workspace keeps the history, and an
    // undo brings the old image back there.
    let image_on_home = || {
        let o = home.kubectl(&["-n", &ns, "get", "sts", "kv", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]);
        format!("{}{}", o.stdout.trim(), o.stderr.trim())
    };
    let set = demo(&f, &["set", "image", "sts/kv", "member=registry.example.com/kv-member:0.8"]);
    assert!(set.ok, "{set:?}");
    rolled_out(&f, "sts/kv");
    wait_until("kv's copy runs 0.8", DEADLINE, image_on_home, |i| i == "registry.example.com/kv-member:0.8");
    let history = kd(&f, &["rollout", "history", "sts/kv"]);
    assert!(history.lines().filter(|l| l.trim_start().starts_with(['1', '2'])).count() == 2, "two revisions: {history}");
    let undo = demo(&f, &["rollout", "undo", "sts/kv"]);
    assert!(undo.ok && undo.stdout.contains("rolled back"), "{undo:?}");
    rolled_out(&f, "sts/kv");
    wait_until("kv's copy runs 0.7 again", DEADLINE, image_on_home, |i| i == "registry.example.com/kv-member:0.7");
    assert_eq!(kd(&f, &["get", "sts", "kv", "-o", "jsonpath={.status.readyReplicas}/{.spec.replicas}"]), "3/3");

    // The DaemonSet runs on both clusters its Placement selects, though it asks for one,
    // and its status counts the nodes of both: 2 on east, 3 on west.
    f.apply(&["--context", "demo", "-n", "default"], NODE_AGENT);
    let probe = wait_placed(&f, "probe", |c| c == ["east", "west"]);
    assert_eq!(probe["spec"]["workload"]["kind"], "DaemonSet", "{}", probe["spec"]);
    // Room is reserved for a pod on every node: each cluster's share is its nodes.
    assert_eq!(assignment(&f, "probe"), "east=2 west=3", "{}", probe["spec"]);
    let out = rolled_out(&f, "ds/probe");
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_until(
        "probe's status summed over east and west",
        DEADLINE,
        || kd(&f, &["get", "ds", "probe", "-o", "jsonpath={.status.desiredNumberScheduled}/{.status.numberReady}"]),
        |s| s == "5/5",
    );
    for (c, nodes) in [(&east, 2), (&west, 3)] {
        let ns = the_copy(c, "ds", "probe");
        wait_until(
            &format!("a probe pod on each of {}'s {nodes} nodes", c.name),
            DEADLINE,
            || pods(c, &ns, "app=probe").map(|p| p.join(" ")).unwrap_or_else(|e| e),
            |p| p.split_whitespace().filter(|p| p.ends_with("=Running")).count() == nodes,
        );
    }
    assert_eq!(copies_on(&north, "ds", "probe"), Ok(vec![]), "north is not selected by Placement edge");

    // A database's claim follows the Deployment that mounts it, and comes up Bound
    // from the cluster it is bound on.
    f.apply(&["--context", "demo", "-n", "default"], DATABASE);
    let db = wait_placed(&f, "db", |c| c.len() == 1);
    let db_home = named(&all, db["spec"]["clusters"][0]["name"].as_str().unwrap_or_default());
    let out = rolled_out(&f, "deploy/db");
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_until(
        "db-data Bound upstream",
        DEADLINE,
        || kd(&f, &["get", "pvc", "db-data", "-o", "jsonpath={.status.phase} {.status.capacity.storage}"]),
        |s| s == "Bound 2Gi",
    );
    assert_eq!(copies_on(db_home, "pvc", "db-data").map(|c| c.len()), Ok(1), "the claim is copied where db runs");
    for other in all.iter().filter(|c| c.name != db_home.name) {
        assert_eq!(copies_on(other, "pvc", "db-data"), Ok(vec![]), "db-data follows db to {} only", db_home.name);
    }

    // `flotilla status` lists every kind with the state the status aggregator wrote
    // into each WorkloadPlacement, which is what the dashboard shows; `flotilla
    // explain` explains a StatefulSet as the scheduler placed it, on one cluster.
    let listed = || {
        let o = f.flotilla(&["status", "-o", "json", "--workspace", "demo"]);
        let v: Value = serde_json::from_str(&o.stdout).map_err(|e| format!("{e}: {o:?}"))?;
        let mut rows: Vec<String> = v["workspaces"][0]["workloads"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| {
                format!(
                    "{}/{}={}",
                    w["kind"].as_str().unwrap_or("?"),
                    w["name"].as_str().unwrap_or("?"),
                    w["state"].as_str().unwrap_or("?")
                )
            })
            .collect();
        rows.sort();
        Ok::<_, String>(rows.join(" "))
    };
    let status = wait_for("every kind Available in flotilla status", DEADLINE, || match listed()? {
        s if s == "DaemonSet/probe=Available Deployment/db=Available Deployment/front=Available StatefulSet/kv=Available" => Ok(s),
        s => Err(s),
    });
    let written = kd(&f, &["get", "wp", "-o", r#"jsonpath={range .items[*]}{.spec.workload.kind}/{.metadata.name}={.status.state} {end}"#]);
    let mut written: Vec<&str> = written.split_whitespace().collect();
    written.sort();
    assert_eq!(written.join(" "), status, "the WorkloadPlacements' states (the dashboard's) are flotilla status's");
    let text = f.flotilla(&["status", "--workspace", "demo"]).stdout;
    for row in ["default     sts/kv ", "default     ds/probe ", "default     deploy/db "] {
        assert!(text.lines().any(|l| l.starts_with(row)), "no row {row:?} in:\n{text}");
    }
    let explained = f.flotilla(&["explain", "sts/kv"]);
    assert!(explained.ok, "{explained:?}");
    let out = explained.stdout;
    assert!(out.contains("sts/kv in namespace default of workspace demo: 3 replica(s)"), "{out}");
    assert!(out.contains("up to 1 cluster(s), Divide"), "a StatefulSet takes one cluster of Placement spread's two:\n{out}");
    assert!(out.contains(&format!("decision: {}=3 (the same as assigned now)", home.name)), "{out}");

    // A StatefulSet whose claims name a StorageClass of the workspace's own, applied
    // before the class, as a published manifest may have them; a second workspace has
    // a class of the same name. Each gets its own class on the cluster, and each
    // StatefulSet's claims are bound by its own workspace's.
    assert!(f.flotilla(&["workspace", "create", "other"]).ok);
    for ws in ["demo", "other"] {
        f.apply(&["--context", ws, "-n", "default"], &format!("{}---\n{}", ring(ws), fast_class(ws)));
    }
    let mut classes_seen = Vec::new();
    for ws in ["demo", "other"] {
        let o = f.k(&["--context", ws, "rollout", "status", "sts/ring", "--timeout=45s"]);
        assert!(o.contains("roll out complete"), "{ws}: {o}\n{}", tail(&f.log()));
        let placed = f.k(&["--context", ws, "get", "wp", "ring", "-o", "jsonpath={.spec.clusters[0].name}"]);
        let c = named(&all, placed.trim());
        // Both may run on one cluster: the copy of this workspace's is the one whose
        // upstream annotation names it.
        let ns = wait_for(&format!("{ws}'s copy of ring on {}", c.name), DEADLINE, || {
            let path = format!(
                r#"jsonpath={{range .items[?(@.metadata.annotations.workload\.flotilla\.io/upstream=="{ws}/default/ring")]}}{{.metadata.namespace}}{{end}}"#
            );
            let o = c.kubectl(&["get", "sts", "-A", "-o", &path]);
            Some(o.stdout.trim().to_string()).filter(|n| !n.is_empty()).ok_or_else(|| format!("none yet: {}", o.stderr.trim()))
        });
        let bound = wait_for(&format!("{ws}'s ring claims bound on {}", c.name), DEADLINE, || {
            let o = c.kubectl(&[
                "-n",
                &ns,
                "get",
                "pvc",
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.name}:{.spec.storageClassName}={.status.phase} {end}"#,
            ]);
            // The claims of ring's two pods, made from its template.
            let ring: Vec<&str> = o.stdout.split_whitespace().filter_map(|p| p.strip_prefix("data-ring-")).collect();
            let classes: BTreeSet<&str> = ring.iter().filter_map(|p| p.split_once(':')?.1.strip_suffix("=Bound")).collect();
            match (ring.len(), classes.len()) {
                (2, 1) if ring.iter().all(|p| p.ends_with("=Bound")) => Ok(classes.into_iter().next().unwrap_or_default().to_string()),
                _ => Err(format!("{} {}", o.stdout, o.stderr)),
            }
        });
        assert!(
            bound.starts_with("flotilla-") && bound.ends_with("-fast"),
            "{ws}'s claims name the workspace's class on the cluster: {bound}"
        );
        let class = c.kubectl(&[
            "get",
            "storageclass",
            &bound,
            "-o",
            "jsonpath={.parameters.tier} {.metadata.annotations.workload\\.flotilla\\.io/upstream}",
        ]);
        assert_eq!(class.stdout.trim(), format!("{ws} {ws}/fast"), "the class on {} is {ws}'s: {class:?}", c.name);
        classes_seen.push(bound);
    }
    assert_ne!(classes_seen[0], classes_seen[1], "two workspaces' classes named fast never meet on a cluster");

    // Deleting them upstream removes every copy.
    for what in ["sts/kv", "ds/probe"] {
        // from-report is the CronJob's too (kubectl makes it its controller), so its
        // history limit may have deleted it already.
        let o = demo(&f, &["delete", what, "--timeout=30s", "--ignore-not-found"]);
        assert!(o.ok, "kubectl delete {what}: {o:?}\n{}", tail(&f.log()));
    }
    wait_no_copies(&all, "sts", "kv");
    wait_no_copies(&all, "ds", "probe");
    wait_until(
        &format!("kv's pods on {} gone with its copy", home.name),
        DEADLINE,
        || pods(home, &ns, "app=kv").map(|p| p.join(" ")).unwrap_or_else(|e| e),
        str::is_empty,
    );
}

/// A Job of three completions under Placement `spread`.
const TALLY: &str = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: tally
  annotations: {scheduling.flotilla.io/placement: spread}
spec:
  completions: 3
  parallelism: 3
  template:
    metadata:
      annotations: {sim.flotilla.io/run-seconds: "1"}
    spec:
      restartPolicy: Never
      containers:
      - {name: count, image: "registry.example.com/tally:2.0", args: [--shard=auto]}
"#;

/// A Job whose image never runs: every pod fails.
const BROKEN: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: migrate, image: "registry.example.com/schema-migrate:broken"}
"#;

/// A CronJob every 3 s (`@every`, as Kubernetes' cron parser accepts it), under
/// Placement `spread`.
const REPORT: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
  annotations: {scheduling.flotilla.io/placement: spread}
spec:
  schedule: "@every 3s"
  successfulJobsHistoryLimit: 2
  jobTemplate:
    spec:
      backoffLimit: 0
      template:
        metadata:
          annotations: {sim.flotilla.io/run-seconds: "1"}
        spec:
          restartPolicy: Never
          containers:
          - {name: report, image: "registry.example.com/nightly-report:5.2", args: [--since=1h]}
"#;

/// Jobs run on exactly one cluster, even under a Placement that asks for two; a Job
/// completes or fails as its pods do; a CronJob's schedule fires in the workspace and
/// its Jobs run like any Job, with no cluster holding the schedule; kubectl's `create
/// job` (plain and `--from=cronjob`) runs, and deleting each removes its copies.
#[test]
fn jobs_and_cronjobs_run_on_one_cluster_and_report_completion_upstream() {
    let (east, west) = (cluster("east", 2), cluster("west", 2));
    let f = fleet(&[], &[(&east, &[]), (&west, &[])]);
    let all = [&east, &west];
    f.apply(&["--context", "demo"], SPREAD);

    let created = kd(&f, &["create", "job", "pi", "--image=perl", "--", "perl", "-e", "print 1"]);
    assert!(created.contains("job.batch/pi created"), "{created}");
    f.apply(&["--context", "demo", "-n", "default"], TALLY);
    f.apply(&["--context", "demo", "-n", "default"], BROKEN);
    f.apply(&["--context", "demo", "-n", "default"], REPORT);

    // Each on exactly one cluster, with a copy there and none on the other.
    for (name, kind, resource) in [("pi", "Job", "job"), ("tally", "Job", "job"), ("migrate", "Job", "job")] {
        let placed = wait_placed(&f, name, |c| !c.is_empty());
        assert_eq!(placed["spec"]["workload"]["kind"], kind, "{}", placed["spec"]);
        let on = cluster_names(&placed);
        assert_eq!(on.len(), 1, "a {kind} runs on exactly one cluster: {name} got {}", placed["spec"]);
        let c = named(&all, &on[0]);
        the_copy(c, resource, name);
        for other in all.iter().filter(|o| o.name != c.name) {
            assert_eq!(copies_on(other, resource, name), Ok(vec![]), "{name} runs on {} only", c.name);
        }
    }

    // Status up: completions, the failure of a broken image.
    met(&f, "job/pi", "complete", "45s");
    met(&f, "job/tally", "complete", "45s");
    assert_eq!(kd(&f, &["get", "job", "tally", "-o", "jsonpath={.status.succeeded}"]), "3", "tally's three completions counted");
    met(&f, "job/migrate", "failed", "45s");

    // The schedule fires in the workspace: its Jobs are made there, each placed on one
    // cluster and run like any Job, and no cluster holds the CronJob.
    let last = wait_until(
        "report's first schedule",
        DEADLINE,
        || kd(&f, &["get", "cronjob", "report", "-o", "jsonpath={.status.lastScheduleTime}"]),
        |t| !t.trim().is_empty(),
    );
    let first = wait_for("a Job of report's, completed", DEADLINE, || {
        let done = made_by(&f, "report")?.into_iter().find(|(_, complete)| *complete);
        done.map(|(name, _)| name).ok_or_else(|| format!("report's Jobs: {:?}", made_by(&f, "report")))
    });
    let placed = wait_placed(&f, &first, |c| c.len() == 1);
    assert_eq!(placed["spec"]["workload"]["kind"], "Job", "{}", placed["spec"]);
    wait_until(
        &format!("report's lastSuccessfulTime, from its completed Job {first} (last scheduled {last})"),
        DEADLINE,
        || kd(&f, &["get", "cronjob", "report", "-o", "jsonpath={.status.lastSuccessfulTime}"]),
        |t| !t.trim().is_empty(),
    );
    for c in &all {
        assert_eq!(cluster_made(c), Ok(vec![]), "no cluster runs report's schedule itself");
    }

    // A finished Job whose ttlSecondsAfterFinished is up is deleted in the workspace,
    // and with it its copy.
    f.apply(
        &["--context", "demo", "-n", "default"],
        &job("brief", 1).replace("spec:\n  template:", "spec:\n  ttlSecondsAfterFinished: 2\n  template:"),
    );
    let brief = wait_placed(&f, "brief", |c| c.len() == 1);
    let brief_home = named(&all, &cluster_names(&brief)[0]);
    met(&f, "job/brief", "complete", "45s");
    wait_until(
        "brief deleted 2s after it completed",
        DEADLINE,
        || {
            let o = demo(&f, &["get", "job", "brief", "-o", "name", "--ignore-not-found"]);
            format!("{}{}", o.stdout.trim(), o.stderr.trim())
        },
        |seen| seen.is_empty(),
    );
    wait_no_copies(&[brief_home], "job", "brief");

    // kubectl's Job from the CronJob's template runs too.
    let created = kd(&f, &["create", "job", "from-report", "--from=cronjob/report"]);
    assert!(created.contains("job.batch/from-report created"), "{created}");
    let placed = wait_placed(&f, "from-report", |c| c.len() == 1);
    assert_eq!(placed["spec"]["workload"]["kind"], "Job", "{}", placed["spec"]);
    met(&f, "job/from-report", "complete", "45s");

    // Deleting each upstream removes its copy, and the CronJob's Jobs with it.
    for what in ["job/pi", "job/tally", "job/migrate", "job/from-report", "cronjob/report"] {
        // from-report is the CronJob's too (kubectl makes it its controller), so its
        // history limit may have deleted it already.
        let o = demo(&f, &["delete", what, "--timeout=30s", "--ignore-not-found"]);
        assert!(o.ok, "kubectl delete {what}: {o:?}\n{}", tail(&f.log()));
    }
    for name in ["pi", "tally", "migrate", "from-report", &first] {
        wait_no_copies(&all, "job", name);
    }
    wait_for("the Jobs report made removed with it", DEADLINE, || match made_by(&f, "report")?.as_slice() {
        [] => Ok(()),
        left => Err(format!("still there: {left:?}")),
    });
}

/// The Jobs in `demo` that the CronJob `cronjob` made, by name, and whether each completed.
fn made_by(f: &Flotilla, cronjob: &str) -> Result<Vec<(String, bool)>, String> {
    let o = demo(
        f,
        &[
            "get",
            "jobs",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.status.succeeded}{"\n"}{end}"#,
        ],
    );
    if !o.ok {
        return Err(format!("kubectl get jobs: {}", o.stderr.trim()));
    }
    let owner = format!("CronJob/{cronjob}");
    Ok(o.stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let (name, by, succeeded) = (w.next()?, w.next()?, w.next().unwrap_or_default());
            (by == owner).then(|| (name.to_string(), succeeded == "1"))
        })
        .collect())
}

/// What `c` runs of its own accord from a schedule: its CronJobs, and the Jobs a
/// CronJob of its own made (a Job Flotilla copied there has no owner). Err when the
/// cluster does not answer.
fn cluster_made(c: &SimCluster) -> Result<Vec<String>, String> {
    let o = c.kubectl(&[
        "get",
        "cronjobs,jobs",
        "-A",
        "-o",
        r#"jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.ownerReferences[0].kind}{"\n"}{end}"#,
    ]);
    if !o.ok {
        return Err(format!("{} did not answer `kubectl get cronjobs,jobs -A`: {}", c.name, o.stderr.trim()));
    }
    Ok(o.stdout.lines().filter(|l| l.starts_with("CronJob/") || l.ends_with(" CronJob")).map(str::to_string).collect())
}

/// A CronJob every 2 s whose Jobs run a second each.
const TICK: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: "@every 2s"
  successfulJobsHistoryLimit: 30
  jobTemplate:
    spec:
      backoffLimit: 0
      template:
        metadata:
          annotations: {sim.flotilla.io/run-seconds: "1"}
        spec:
          restartPolicy: Never
          containers:
          - {name: tick, image: "busybox:1.36", args: [date]}
"#;

/// The copies of `cronjob`'s Jobs on `c` whose Jobs are not assigned to `c` (a
/// copy the syncer has still to remove); Err when a cluster or the workspace does not
/// answer.
fn stray_copies(f: &Flotilla, c: &SimCluster, cronjob: &str) -> Result<Vec<String>, String> {
    let mut stray = Vec::new();
    for (name, _) in made_by(f, cronjob)? {
        if !copies_on(c, "job", &name)?.is_empty() && !cluster_names(&wp(f, &name)).contains(&c.name) {
            stray.push(name);
        }
    }
    Ok(stray)
}

/// A CronJob's schedule never fires on two clusters. It runs in the workspace: while
/// the cluster its Jobs ran on is frozen, the schedule goes on and its Jobs run
/// elsewhere, and when the cluster is restored it fires nothing of its own, because no
/// cluster ever holds the CronJob.
#[test]
fn a_cronjob_never_fires_on_two_clusters_across_a_freeze_and_a_restore() {
    let (east, west) = (cluster("east", 2), cluster("west", 2));
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[])]);
    let all = [&east, &west];
    // Its Jobs start on east: west takes nothing new until one runs there.
    let o = f.flotilla(&["cluster", "cordon", "west"]);
    assert!(o.ok, "flotilla cluster cordon west: {o:?}");
    f.apply(&["--context", "demo", "-n", "default"], TICK);
    let first = wait_for("a Job of tick's with its copy on east", DEADLINE, || {
        let made = made_by(&f, "tick")?;
        for (name, _) in &made {
            if cluster_names(&wp(&f, name)) == ["east"] && !copies_on(&east, "job", name)?.is_empty() {
                return Ok(name.clone());
            }
        }
        Err(format!("tick's Jobs: {made:?}"))
    });
    for c in &all {
        assert_eq!(cluster_made(c), Ok(vec![]), "{} runs no schedule of its own, with {first} on east", c.name);
    }
    let o = f.flotilla(&["cluster", "uncordon", "west"]);
    assert!(o.ok, "flotilla cluster uncordon west: {o:?}");

    east.signal("STOP");
    let frozen_at = wait_until(
        "tick's lastScheduleTime",
        DEADLINE,
        || kd(&f, &["get", "cj", "tick", "-o", "jsonpath={.status.lastScheduleTime}"]),
        |t| !t.is_empty(),
    );
    // The schedule goes on without east: a Job made since completes on west. A Job is
    // named by its scheduled minute, as Kubernetes names it, so `@every 2s` makes at
    // most one a minute: the next may be a minute away.
    let next_minute = Duration::from_secs(60) + DEADLINE;
    let on_west = wait_for("a Job of tick's completed on west while east is frozen", next_minute, || {
        let made = made_by(&f, "tick")?;
        for (name, complete) in &made {
            if *complete && name != &first && cluster_names(&wp(&f, name)) == ["west"] {
                return Ok(name.clone());
            }
        }
        Err(format!("tick's Jobs: {made:?}"))
    });

    // Restored, east fires nothing of its own, now or once its syncer has caught up.
    east.signal("CONT");
    let ready = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    wait_until("east Ready again", DEADLINE, || f.k(&["get", "st", "east", "-o", ready]), |r| r == "True");
    wait_for("east's copies of tick's Jobs to be only those assigned to it", DEADLINE, || {
        match stray_copies(&f, &east, "tick")?.as_slice() {
            [] => Ok(()),
            stray => Err(format!("copies of Jobs no longer assigned to east: {stray:?}")),
        }
    });
    for c in &all {
        assert_eq!(
            cluster_made(c),
            Ok(vec![]),
            "{} fired no schedule of its own after east's restore (frozen near {frozen_at}; {on_west} ran on west meanwhile)",
            c.name
        );
    }
    // Each time the schedule fired made one Job, and each Job has one cluster.
    for (name, _) in made_by(&f, "tick").unwrap_or_default() {
        let on = cluster_names(&wp(&f, &name));
        assert!(on.len() <= 1, "{name} is assigned to one cluster at most: {on:?}");
    }
}

/// A StatefulSet of `replicas` pods with a claim each, under Placement `placement`
/// (none: the workspace's `default`).
fn stateful(name: &str, replicas: u32, placement: Option<&str>) -> String {
    let annotations = placement.map(|p| format!("\n  annotations: {{scheduling.flotilla.io/placement: {p}}}")).unwrap_or_default();
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}{annotations}
spec:
  serviceName: {name}
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - {{name: main, image: "registry.example.com/{name}:1.0", resources: {{requests: {{cpu: 100m}}}}}}
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
"#
    )
}

/// A Job whose one pod runs for `seconds`.
fn job(name: &str, seconds: u32) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  template:
    metadata:
      annotations: {{sim.flotilla.io/run-seconds: "{seconds}"}}
    spec:
      restartPolicy: Never
      containers:
      - {{name: work, image: "registry.example.com/{name}:1.0"}}
"#
    )
}

/// A Placement like `default`, whose StatefulSets move at once off a lost cluster.
const IMMEDIATE: &str = "apiVersion: scheduling.flotilla.io/v1alpha1\nkind: Placement\nmetadata: {name: immediate}\n\
                         spec: {numberOfClusters: 1, failover: {statefulSets: Immediate}}\n";

/// The loss of a cluster, kind by kind: a StatefulSet waits on the dead cluster, saying
/// so and how to confirm the loss, until `flotilla cluster confirm-lost`, then moves and
/// rolls out; one under `failover.statefulSets: Immediate` moves at once; a running Job
/// reruns and completes elsewhere; a finished Job stays where it ran and never reruns.
#[test]
fn a_lost_cluster_moves_each_kind_by_its_failover_rule() {
    let (mut east, west, north) = (cluster("east", 2), cluster("west", 2), cluster("north", 2));
    let f = fleet(&FAST, &[(&east, &[]), (&west, &[]), (&north, &[])]);
    // Everything starts on east: the others take nothing new until it is all placed.
    for c in ["west", "north"] {
        let o = f.flotilla(&["cluster", "cordon", c]);
        assert!(o.ok, "flotilla cluster cordon {c}: {o:?}");
    }
    f.apply(&["--context", "demo"], IMMEDIATE);
    let manifests = [stateful("ledger", 3, None), stateful("cache", 2, Some("immediate")), job("done", 1), job("long", 30)];
    f.apply(&["--context", "demo", "-n", "default"], &manifests.join("---\n"));
    for name in ["ledger", "cache", "done", "long"] {
        wait_placed(&f, name, |c| c == ["east"]);
    }
    rolled_out(&f, "sts/ledger");
    rolled_out(&f, "sts/cache");
    met(&f, "job/done", "complete", "45s");
    let done_before = assignment(&f, "done");
    // long's pod is running on east when east dies.
    let long_ns = the_copy(&east, "job", "long");
    wait_until(
        "long's pod running on east",
        DEADLINE,
        || pods(&east, &long_ns, "job-name=long").map(|p| p.join(" ")).unwrap_or_else(|e| e),
        |p| !p.contains(' ') && p.ends_with("=Running"),
    );
    for c in ["west", "north"] {
        let o = f.flotilla(&["cluster", "uncordon", c]);
        assert!(o.ok, "flotilla cluster uncordon {c}: {o:?}");
    }
    let running = pods(&east, &long_ns, "job-name=long").unwrap_or_default();
    assert!(running.len() == 1 && running[0].ends_with("=Running"), "long still runs on east before the kill: {running:?}");

    east.kill9();
    let alive = [&west, &north];

    // Immediate: cache moves as soon as east is lost, and rolls out on its new cluster.
    let cache = wait_assignment(&f, "cache", |a| !a.is_empty() && !a.contains("east="));
    assert_eq!(cache.split_whitespace().count(), 1, "cache moves whole to one cluster: {cache}");
    rolled_out(&f, "sts/cache");
    // WaitForConfirm: ledger stays on east, and says why and what to run.
    assert_eq!(assignment(&f, "ledger"), "east=3", "ledger waits for east to be confirmed lost while cache has moved to {cache}");
    let paused = wait_for("ledger's FailoverPaused condition", DEADLINE, || {
        let placement = wp(&f, "ledger");
        let paused = failover_paused(&placement);
        if paused.starts_with("True: ") {
            Ok((paused, cluster_names(&placement)))
        } else {
            Err(format!("FailoverPaused {paused:?}, spec {}", placement["spec"]))
        }
    });
    assert!(paused.0.contains("flotilla cluster confirm-lost east"), "the condition says how to confirm the loss: {}", paused.0);
    assert_eq!(paused.1, ["east"], "ledger is still assigned to the dead east: {}", paused.0);
    for c in alive {
        assert_eq!(copies_on(c, "sts", "ledger"), Ok(vec![]), "no second ledger on {} before the loss is confirmed", c.name);
    }

    // A running Job reruns elsewhere and completes there.
    let long = wait_assignment(&f, "long", |a| !a.is_empty() && !a.contains("east="));
    let long_home = named(&alive, long.split('=').next().unwrap_or_default());
    the_copy(long_home, "job", "long");
    met(&f, "job/long", "complete", "60s");

    // The operator confirms east is gone: ledger moves whole, rolls out, and is no
    // longer paused.
    let confirmed = wait_for("flotilla cluster confirm-lost east", DEADLINE, || {
        let o = f.flotilla(&["cluster", "confirm-lost", "east"]);
        match o.ok {
            true => Ok(o.stdout),
            // A write to east's SyncTarget between the command's read and its patch.
            false if o.stderr.contains("changed while confirming") => Err(o.stderr),
            false => panic!("flotilla cluster confirm-lost east: {o:?}"),
        }
    });
    assert!(confirmed.contains("confirmed lost"), "{confirmed}");
    let ledger = wait_assignment(&f, "ledger", |a| !a.is_empty() && !a.contains("east="));
    assert_eq!(ledger.split_whitespace().count(), 1, "ledger moves whole to one cluster: {ledger}");
    assert!(ledger.ends_with("=3"), "all three of ledger's replicas move: {ledger}");
    rolled_out(&f, "sts/ledger");
    let ledger_home = named(&alive, ledger.split('=').next().unwrap_or_default());
    let ns = the_copy(ledger_home, "sts", "ledger");
    wait_until(
        &format!("ledger's pods on {}", ledger_home.name),
        DEADLINE,
        || pods(ledger_home, &ns, "app=ledger").map(|p| p.join(" ")).unwrap_or_else(|e| e),
        |p| p == "ledger-0=Running ledger-1=Running ledger-2=Running",
    );
    wait_until("ledger's FailoverPaused condition to go", DEADLINE, || failover_paused(&wp(&f, "ledger")), |p| !p.starts_with("True"));

    // The finished Job stayed where it ran, done, and ran nowhere else.
    assert_eq!(assignment(&f, "done"), done_before, "a finished Job is not moved off its lost cluster");
    met(&f, "job/done", "complete", "5s");
    for c in alive {
        assert_eq!(copies_on(c, "job", "done"), Ok(vec![]), "a finished Job never reruns, on {} or anywhere", c.name);
    }
    assert_eq!(kd(&f, &["get", "job", "done", "-o", "jsonpath={.status.succeeded}"]), "1", "done succeeded once");
}
