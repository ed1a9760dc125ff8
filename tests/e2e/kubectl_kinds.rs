//! kubectl against a real `flotilla start` for the kinds of a whole app beyond
//! Deployments: StatefulSets (with claim templates), DaemonSets, Jobs, CronJobs,
//! PersistentVolumeClaims and StorageClasses. Each is applied in the shape the
//! Kubernetes tutorials give it (a replicated store behind a headless Service and a
//! PDB; a database with its claim and a generated Secret; a StatefulSet with its own
//! StorageClass; a CronJob), and the API answers as kube-apiserver does: defaults,
//! validation, tables, scale, kubectl's typed `create` commands, and the refusals of
//! Pods and of unserved kinds.

use crate::common;

use std::time::Duration;

use common::{wait_until, Flotilla};

/// A replicated store: headless and client Services, a PDB, and a StatefulSet with
/// anti-affinity, probes, a security context and a claim template.
const STORE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: store-hs, labels: {app: store}}
spec:
  clusterIP: None
  selector: {app: store}
  ports: [{name: peer, port: 2888}, {name: election, port: 3888}]
---
apiVersion: v1
kind: Service
metadata: {name: store, labels: {app: store}}
spec:
  selector: {app: store}
  ports: [{name: client, port: 2181}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: store-pdb}
spec:
  selector: {matchLabels: {app: store}}
  maxUnavailable: 1
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: store}
spec:
  serviceName: store-hs
  replicas: 3
  podManagementPolicy: OrderedReady
  updateStrategy: {type: RollingUpdate}
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchExpressions: [{key: app, operator: In, values: [store]}]}
            topologyKey: kubernetes.io/hostname
      securityContext: {runAsUser: 1000, fsGroup: 1000}
      containers:
      - name: store
        image: registry.example.com/store:3.9
        imagePullPolicy: Always
        command: [sh, -c, "start-store --servers=3 --data-dir=/var/lib/store"]
        resources: {requests: {cpu: 500m, memory: 1Gi}}
        ports: [{name: client, containerPort: 2181}, {name: peer, containerPort: 2888}]
        readinessProbe: {exec: {command: [sh, -c, "store-ready 2181"]}, initialDelaySeconds: 10, timeoutSeconds: 5}
        livenessProbe: {exec: {command: [sh, -c, "store-ready 2181"]}, initialDelaySeconds: 10, timeoutSeconds: 5}
        volumeMounts: [{name: data, mountPath: /var/lib/store}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Gi}}
"#;

/// A StatefulSet that brings its own StorageClass and names it in its claim template.
const RING: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
provisioner: k8s.io/minikube-hostpath
parameters: {type: pd-ssd}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: ring, labels: {app: ring}}
spec:
  serviceName: ring
  replicas: 3
  selector: {matchLabels: {app: ring}}
  template:
    metadata: {labels: {app: ring}}
    spec:
      terminationGracePeriodSeconds: 500
      containers:
      - name: ring
        image: registry.example.com/ring:4.1
        env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
        lifecycle: {preStop: {exec: {command: [/bin/sh, -c, ring-drain]}}}
        volumeMounts: [{name: data, mountPath: /var/lib/ring}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: fast
      resources: {requests: {storage: 1Gi}}
"#;

/// A database with its claim; its password comes from a Secret that kustomize
/// generates (`kubectl apply -k`), as the tutorials have it.
const DATABASE: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: db-claim, labels: {app: blog}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 20Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: blog-db, labels: {app: blog}}
spec:
  selector: {matchLabels: {app: blog, tier: db}}
  strategy: {type: Recreate}
  template:
    metadata: {labels: {app: blog, tier: db}}
    spec:
      containers:
      - name: db
        image: mysql:8.0
        env: [{name: MYSQL_ROOT_PASSWORD, valueFrom: {secretKeyRef: {name: db-pass, key: password}}}]
        ports: [{containerPort: 3306, name: db}]
        volumeMounts: [{name: data, mountPath: /var/lib/mysql}]
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: db-claim}
"#;

const KUSTOMIZATION: &str = r#"
secretGenerator:
- name: db-pass
  literals: [password=not-a-real-password]
resources: [database.yaml]
"#;

/// A CronJob, every minute.
const HELLO: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata: {name: hello}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: hello
            image: busybox:1.28
            imagePullPolicy: IfNotPresent
            command: [/bin/sh, -c, date; echo Hello]
"#;

#[test]
fn stateful_apps_apply_unchanged_and_print_as_kubectl_expects() {
    let f = Flotilla::start();
    let out = f.apply(&[], STORE);
    for made in ["service/store-hs created", "poddisruptionbudget.policy/store-pdb created", "statefulset.apps/store created"] {
        assert!(out.contains(made), "{out}");
    }
    assert!(f.apply(&[], RING).contains("storageclass.storage.k8s.io/fast created"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kustomization.yaml"), KUSTOMIZATION).unwrap();
    std::fs::write(dir.path().join("database.yaml"), DATABASE).unwrap();
    let out = f.k(&["apply", "-k", dir.path().to_str().unwrap()]);
    assert!(out.contains("persistentvolumeclaim/db-claim created"), "{out}");
    // A second apply changes nothing. kubectl still patches the StatefulSet (its claim
    // templates are a list it replaces whole, and the server has defaulted them) and
    // the PDB (whose selector it always replaces), as it does against kube-apiserver.
    let out = f.apply(&[], STORE);
    assert!(out.contains("service/store unchanged"), "{out}");
    assert_eq!(f.k(&["get", "sts", "store", "-o", "jsonpath={.metadata.generation}"]), "1", "{out}");

    // The defaults kube-apiserver fills, on the StatefulSet and its claim template.
    let got = f.k(&[
        "get",
        "sts",
        "store",
        "-o",
        "jsonpath={.spec.updateStrategy.rollingUpdate.partition}|{.spec.persistentVolumeClaimRetentionPolicy.whenDeleted}|\
         {.spec.volumeClaimTemplates[0].spec.volumeMode}|{.spec.revisionHistoryLimit}|{.metadata.generation}",
    ]);
    assert_eq!(got, "0|Retain|Filesystem|10|1");
    assert_eq!(f.row(&["sts", "store"])[..2], ["store", "0/3"]);
    assert_eq!(f.row(&["sc", "fast"])[..5], ["fast", "k8s.io/minikube-hostpath", "Delete", "Immediate", "false"]);
    assert_eq!(f.row(&["pvc", "db-claim"])[..2], ["db-claim", "Pending"]);

    // Scale and set image change it; its identity fields are fixed, as in Kubernetes.
    f.k(&["scale", "sts", "store", "--replicas=5"]);
    f.k(&["set", "image", "sts/store", "store=registry.example.com/store:3.10"]);
    let got =
        f.k(&["get", "sts", "store", "-o", "jsonpath={.spec.replicas}|{.spec.template.spec.containers[0].image}|{.metadata.generation}"]);
    assert_eq!(got, "5|registry.example.com/store:3.10|3");
    let o = f.kubectl(&["patch", "sts", "store", "--type=merge", "-p", r#"{"spec":{"serviceName":"other"}}"#]);
    assert!(!o.ok && o.stderr.contains("Forbidden: updates to statefulset spec for fields other than 'replicas'"), "{}", o.stderr);
    let o = f.kubectl(&["patch", "sc", "fast", "--type=merge", "-p", r#"{"parameters":{"type":"pd-standard"}}"#]);
    assert!(!o.ok && o.stderr.contains("parameters: Forbidden: updates to parameters are forbidden."), "{}", o.stderr);
    let o = f.kubectl(&["patch", "pvc", "db-claim", "--type=merge", "-p", r#"{"spec":{"accessModes":["ReadWriteMany"]}}"#]);
    assert!(!o.ok && o.stderr.contains("spec is immutable after creation"), "{}", o.stderr);
    f.k(&["patch", "pvc", "db-claim", "--type=merge", "-p", r#"{"spec":{"resources":{"requests":{"storage":"30Gi"}}}}"#]);

    // A DaemonSet, and `kubectl get all` lists every workload kind.
    let ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  selector: {matchLabels: {app: agent}}\n  \
              template:\n    metadata: {labels: {app: agent}}\n    spec:\n      nodeSelector: {disk: ssd}\n      \
              containers: [{name: agent, image: registry.example.com/agent:1.0}]\n";
    assert!(f.apply(&[], ds).contains("daemonset.apps/agent created"));
    assert_eq!(f.row(&["ds", "agent"])[1..7], ["0", "0", "0", "0", "0", "disk=ssd"]);
    let all = f.k(&["get", "all"]);
    for name in ["statefulset.apps/store", "statefulset.apps/ring", "daemonset.apps/agent", "deployment.apps/blog-db"] {
        assert!(all.contains(name), "{name} missing from kubectl get all:\n{all}");
    }
}

#[test]
fn batch_work_comes_from_kubectl_create_and_bad_input_is_refused() {
    let f = Flotilla::start();
    // kubectl's typed create commands send protobuf.
    assert!(f
        .k(&["create", "job", "pi", "--image=perl:5.34.0", "--", "perl", "-Mbignum=bpi", "-wle", "print bpi(200)"])
        .contains("job.batch/pi created"));
    assert!(f.apply(&[], HELLO).contains("cronjob.batch/hello created"));
    assert!(f.k(&["create", "job", "hello-now", "--from=cronjob/hello"]).contains("job.batch/hello-now created"));
    let got = f.k(&[
        "get",
        "job",
        "pi",
        "-o",
        "jsonpath={.spec.completions}|{.spec.backoffLimit}|{.spec.template.spec.restartPolicy}|{.spec.template.metadata.labels.batch\\.kubernetes\\.io/job-name}",
    ]);
    assert_eq!(got, "1|6|Never|pi");
    let uid = f.k(&["get", "job", "pi", "-o", "jsonpath={.metadata.uid}"]);
    let selector = f.k(&["get", "job", "pi", "-o", "jsonpath={.spec.selector.matchLabels.batch\\.kubernetes\\.io/controller-uid}"]);
    assert_eq!(selector, uid, "the selector is generated from the Job's uid");
    let from_cron = f.k(&["get", "job", "hello-now", "-o", "jsonpath={.metadata.annotations.cronjob\\.kubernetes\\.io/instantiate}"]);
    assert_eq!(from_cron, "manual");
    assert_eq!(f.row(&["job", "pi"])[1..3], ["Running", "0/1"]);
    assert_eq!(f.row(&["cronjob", "hello"])[1..4], ["* * * * *", "<none>", "False"]);
    // kubectl makes the CronJob hello-now's controller, so the schedule, which runs in
    // the workspace, counts it active, as kube-controller-manager does.
    wait_until(
        "hello's ACTIVE column to count hello-now",
        Duration::from_secs(20),
        || f.row(&["cronjob", "hello"])[4].clone(),
        |a| a != "0",
    );
    let unfinished = f.k(&["get", "jobs", "--field-selector", "status.successful=0", "-o", "name"]);
    assert!(unfinished.contains("job.batch/pi\n") && unfinished.contains("job.batch/hello-now\n"), "{unfinished}");

    // Kubernetes' refusals, with its messages.
    let o = f.kubectl(&["patch", "job", "pi", "--type=merge", "-p", r#"{"spec":{"template":{"spec":{"activeDeadlineSeconds":5}}}}"#]);
    assert!(!o.ok && o.stderr.contains("spec.template: Invalid value") && o.stderr.contains("field is immutable"), "{}", o.stderr);
    let bad = HELLO.replace("* * * * *", "every minute");
    let o = f.kubectl_stdin(&["apply", "-f", "-"], &bad.replace("name: hello}", "name: bad}"));
    assert!(!o.ok && o.stderr.contains("expected exactly 5 fields, found 2: [every minute]"), "{}", o.stderr);
    let always = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: loop}\nspec:\n  template:\n    spec:\n      \
                  containers: [{name: c, image: busybox}]\n";
    let o = f.kubectl_stdin(&["apply", "-f", "-"], always);
    assert!(!o.ok && o.stderr.contains(r#"spec.template.spec.restartPolicy: Unsupported value: "Always""#), "{}", o.stderr);

    // A Pod is never created in a workspace; the message says what to create instead.
    let o = f.kubectl(&["run", "p", "--image=nginx"]);
    assert!(!o.ok && o.stderr.contains(r#"pods "p" is forbidden"#) && o.stderr.contains("Deployment"), "{}", o.stderr);
    assert!(f.k(&["get", "pods", "-o", "name"]).trim().is_empty());

    // A kind nobody serves gets kubectl's own answer.
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n";
    let o = f.kubectl_stdin(&["apply", "-f", "-"], widget);
    assert!(!o.ok && o.stderr.contains(r#"no matches for kind "Widget" in version "example.com/v1""#), "{}", o.stderr);
}

/// A Deployment and a StatefulSet, whose rollout history Flotilla keeps.
const HISTORY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: store}
spec:
  serviceName: store
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec: {containers: [{name: store, image: "registry.example.com/store:1"}]}
"#;

/// A workspace's ReplicaSets and ControllerRevisions are the rollout history Flotilla
/// keeps of its workloads: the workspace's own token reads them, and each write is
/// refused with what to do instead. Deleting the Deployment, or the namespace, still
/// takes them (the server's garbage collector and namespace deletion).
#[test]
fn a_workspace_reads_its_replicasets_and_controller_revisions_but_cannot_write_them() {
    let f = Flotilla::start();
    assert!(f.flotilla(&["workspace", "create", "team-a"]).ok);
    let k = |args: &[&str]| {
        let mut all = vec!["--context", "team-a", "-n", "shop"];
        all.extend_from_slice(args);
        f.kubectl(&all)
    };
    let o = k(&["create", "namespace", "shop"]);
    assert!(o.ok, "{o:?}");
    f.apply(&["--context", "team-a", "-n", "shop"], HISTORY);
    let rs_why = "a workspace's ReplicaSets are kept by Flotilla from its Deployments' templates; change the Deployment, \
                  or use kubectl rollout undo";
    let revision_why = "a workspace's ControllerRevisions are kept by Flotilla from its StatefulSets' and DaemonSets' templates; \
                        change the StatefulSet or DaemonSet, or use kubectl rollout undo";
    let kept = [("rs", "app=web", rs_why, "{.spec.replicas}"), ("controllerrevisions", "app=store", revision_why, "{.revision}")];
    for (resource, selector, why, field) in kept {
        let seen = wait_until(
            &format!("{resource} -l {selector}"),
            Duration::from_secs(20),
            || {
                let o = k(&["get", resource, "-l", selector, "-o", "name"]);
                format!("{}{}", o.stdout, o.stderr)
            },
            |o| o.lines().count() == 1 && o.contains(".apps/"),
        );
        let name = seen.trim().rsplit('/').next().unwrap().to_string();
        let before = k(&["get", resource, &name, "-o", &format!("jsonpath={field}|{{.metadata.labels.x}}")]);
        let mut writes = vec![vec!["delete", resource, &name], vec!["label", resource, &name, "x=y"]];
        if resource == "rs" {
            writes.push(vec!["scale", resource, &name, "--replicas=5"]);
        }
        for args in writes {
            let o = k(&args);
            assert!(!o.ok && o.stderr.contains("(Forbidden)") && o.stderr.contains(why), "kubectl {args:?}: {o:?}");
        }
        let after = k(&["get", resource, &name, "-o", &format!("jsonpath={field}|{{.metadata.labels.x}}")]);
        assert!(before.ok && after.stdout == before.stdout, "{resource} {name} changed: {before:?} -> {after:?}");
    }

    // The workload's deletion takes its history, as does the namespace's.
    assert!(k(&["delete", "deployment", "web"]).ok);
    wait_until("the ReplicaSets deleted", Duration::from_secs(20), || k(&["get", "rs", "-o", "name"]).stdout, |o| o.trim().is_empty());
    let o = k(&["delete", "namespace", "shop", "--timeout=30s"]);
    assert!(o.ok, "{o:?}");
    let left = f.kubectl(&["--context", "team-a", "get", "controllerrevisions,statefulsets", "-A", "-o", "name"]);
    assert!(left.ok && left.stdout.trim().is_empty(), "{left:?}");
}
