//! A Deployment's companions (Services, Ingresses, NetworkPolicies,
//! PodDisruptionBudgets, HorizontalPodAutoscalers) through the real kubectl against a
//! real `flotilla start`: applied from an ordinary app manifest, printed as kubectl
//! prints them from a cluster, patched by their merge keys, made by kubectl's own
//! generators (which send protobuf), and refused with the field named when invalid.

use crate::common;

use common::Flotilla;

const APP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      serviceAccountName: web
      containers: [{name: nginx, image: nginx:1.27, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 80}
  - {name: https, port: 443, targetPort: 8443}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  tls: [{hosts: [web.example.com], secretName: web-tls}]
  rules:
  - host: web.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{ports: [{port: 80}]}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 6
"#;

#[test]
fn an_app_manifest_applies_and_prints_as_on_a_cluster() {
    let f = Flotilla::start();
    let out = f.apply(&[], APP);
    for created in [
        "deployment.apps/web created",
        "serviceaccount/web created",
        "service/web created",
        "ingress.networking.k8s.io/web created",
        "networkpolicy.networking.k8s.io/web created",
        "poddisruptionbudget.policy/web created",
        "horizontalpodautoscaler.autoscaling/web created",
    ] {
        assert!(out.contains(created), "{created} missing from:\n{out}");
    }
    // A second apply stores nothing. (kubectl still says "configured" for the
    // NetworkPolicy and the PodDisruptionBudget, as it does against kube-apiserver: its
    // patch restates a list the server defaulted, and a selector it always replaces.)
    let versions = |f: &Flotilla| f.k(&["get", "deploy,sa,svc,ing,netpol,pdb,hpa", "-o", "jsonpath={.items[*].metadata.resourceVersion}"]);
    let before = versions(&f);
    let again = f.apply(&[], APP);
    assert!(again.contains("service/web unchanged") && again.contains("horizontalpodautoscaler.autoscaling/web unchanged"), "{again}");
    assert_eq!(versions(&f), before, "a second apply stored something:\n{again}");

    // A workspace allocates no address: no cluster IP, and a load balancer pending.
    let svc = f.row(&["svc", "web", "-o", "wide"]);
    assert_eq!(svc[..5], ["web", "LoadBalancer", "<none>", "<pending>", "80/TCP,443/TCP"], "{svc:?}");
    assert_eq!(svc.last().map(String::as_str), Some("app=web"), "{svc:?}");
    let ing = f.row(&["ingress", "web"]);
    assert_eq!(ing[..4], ["web", "<none>", "web.example.com", "80, 443"], "{ing:?}");
    assert_eq!(f.row(&["netpol", "web"])[..2], ["web", "app=web"]);
    assert_eq!(f.row(&["pdb", "web"])[..4], ["web", "1", "N/A", "0"]);
    // No metric named: the CPU target that autoscaling/v2 defaults.
    assert_eq!(f.row(&["hpa", "web"])[..6], ["web", "Deployment/web", "cpu: <unknown>/80%", "2", "6", "0"]);

    // Services and autoscalers are in the "all" category, as on a cluster.
    let all = f.k(&["get", "all", "-o", "name"]);
    for name in ["deployment.apps/web", "service/web", "horizontalpodautoscaler.autoscaling/web"] {
        assert!(all.lines().any(|l| l == name), "{name} missing from `get all`:\n{all}");
    }
    // The defaults kube-apiserver fills.
    let spec = f.k(&[
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.spec.sessionAffinity}/{.spec.externalTrafficPolicy}/{.spec.allocateLoadBalancerNodePorts}/{.spec.ports[0].protocol}",
    ]);
    assert_eq!(spec, "None/Cluster/true/TCP");
    let types =
        f.k(&["get", "netpol", "web", "-o", "jsonpath={.spec.policyTypes}/{.spec.ingress[0].ports[0].protocol}/{.metadata.generation}"]);
    assert_eq!(types, r#"["Ingress"]/TCP/1"#);
    // Field selectors kubectl and kube-proxy use on Services.
    let lbs = f.k(&["get", "svc", "--field-selector", "spec.type=LoadBalancer", "-o", "name"]);
    assert_eq!(lbs.trim(), "service/web");
    let none = f.kubectl(&["get", "pdb", "--field-selector", "spec.minAvailable=1"]);
    assert!(!none.ok && none.stderr.contains("is not a known field selector"), "{none:?}");
}

#[test]
fn service_ports_merge_by_port_through_apply_patch_edit_and_server_side_apply() {
    let f = Flotilla::start();
    f.apply(&[], APP);
    // Client-side apply: a strategic merge patch keyed by port.
    let changed = APP.replace("targetPort: 8443", "targetPort: 9443");
    assert!(f.apply(&[], &changed).contains("service/web configured"));
    let ports = |f: &Flotilla| {
        f.k(&["get", "svc", "web", "-o", r#"jsonpath={range .spec.ports[*]}{.name}:{.port}>{.targetPort}/{.protocol} {end}"#])
    };
    assert_eq!(ports(&f).trim(), "http:80>80/TCP https:443>9443/TCP");
    let patched = f.k(&["patch", "svc", "web", "-p", r#"{"spec":{"ports":[{"port":443,"targetPort":7443}]}}"#]);
    assert!(patched.contains("patched"), "{patched}");
    assert_eq!(ports(&f).trim(), "http:80>80/TCP https:443>7443/TCP", "the patch names port 443 alone");
    // kubectl edit, with an editor that changes one target port.
    let editor = f.dir.path().join("editor.sh");
    std::fs::write(&editor, "#!/bin/sh\nsed -i 's/targetPort: 7443/targetPort: 6443/' \"$1\"\n").unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let edit = common::kubectl_cmd(&f.kubeconfig(), f.dir.path(), &["edit", "svc", "web"]).env("KUBE_EDITOR", &editor).output().unwrap();
    assert!(edit.status.success(), "kubectl edit: {}", String::from_utf8_lossy(&edit.stderr));
    assert_eq!(ports(&f).trim(), "http:80>80/TCP https:443>6443/TCP");

    // Server-side apply keys ports by port and protocol, a missing protocol being TCP:
    // the same port over TCP and UDP are two ports, and applying twice changes nothing.
    let dns = "apiVersion: v1\nkind: Service\nmetadata: {name: dns}\nspec:\n  selector: {app: dns}\n  ports:\n  - {name: dns, port: 53}\n  - {name: dns-udp, port: 53, protocol: UDP}\n";
    f.apply(&["--server-side"], dns);
    let rv = f.k(&["get", "svc", "dns", "-o", "jsonpath={.metadata.resourceVersion}"]);
    f.apply(&["--server-side"], dns);
    assert_eq!(f.k(&["get", "svc", "dns", "-o", "jsonpath={.metadata.resourceVersion}"]), rv, "the second apply stored nothing");
    let dns_ports = f.k(&["get", "svc", "dns", "-o", r#"jsonpath={range .spec.ports[*]}{.port}/{.protocol} {end}"#]);
    assert_eq!(dns_ports.trim(), "53/TCP 53/UDP");
    let fields = f.k(&["get", "svc", "dns", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[0].fieldsV1}"]);
    assert!(fields.contains(r#"k:{\"port\":53,\"protocol\":\"TCP\"}"#) || fields.contains(r#"k:{"port":53,"protocol":"TCP"}"#), "{fields}");
    // Another manager adds a port; the first one's stay.
    let more = "apiVersion: v1\nkind: Service\nmetadata: {name: dns}\nspec:\n  ports:\n  - {name: metrics, port: 9153}\n";
    f.apply(&["--server-side", "--field-manager=metrics"], more);
    let dns_ports = f.k(&["get", "svc", "dns", "-o", r#"jsonpath={range .spec.ports[*]}{.port}/{.protocol} {end}"#]);
    assert_eq!(dns_ports.trim(), "53/TCP 53/UDP 9153/TCP");
}

#[test]
fn kubectl_expose_create_and_autoscale_make_companions() {
    let f = Flotilla::start();
    f.apply(&[], APP);
    // kubectl expose sends JSON; the create subcommands and autoscale send protobuf.
    assert!(f.k(&["expose", "deployment", "web", "--name=web2", "--port=8080", "--target-port=80"]).contains("service/web2 exposed"));
    let exposed =
        f.k(&["get", "svc", "web2", "-o", "jsonpath={.spec.type} {.spec.selector.app} {.spec.ports[0].port}>{.spec.ports[0].targetPort}"]);
    assert_eq!(exposed, "ClusterIP web 8080>80");
    assert!(f.k(&["create", "service", "nodeport", "np", "--tcp=5678:8080", "--node-port=30080"]).contains("service/np created"));
    assert_eq!(f.row(&["svc", "np"])[..5], ["np", "NodePort", "<none>", "<none>", "5678:30080/TCP"]);
    assert!(f.k(&["create", "ingress", "shop", "--rule=shop.example.com/cart*=web:80", "--class=nginx"]).contains("created"));
    let ing = f.k(&[
        "get",
        "ing",
        "shop",
        "-o",
        "jsonpath={.spec.ingressClassName} {.spec.rules[0].http.paths[0].path} {.spec.rules[0].http.paths[0].pathType}",
    ]);
    assert_eq!(ing, "nginx /cart Prefix");
    assert!(f.k(&["create", "pdb", "half", "--selector=app=web", "--max-unavailable=50%"]).contains("created"));
    assert_eq!(f.row(&["pdb", "half"])[..4], ["half", "N/A", "50%", "0"]);
    // kubectl 1.32 autoscales through autoscaling/v1; the v2 object holds its CPU target.
    assert!(f.k(&["autoscale", "deployment", "web", "--name=auto", "--min=2", "--max=5", "--cpu-percent=70"]).contains("autoscaled"));
    assert_eq!(f.row(&["hpa", "auto"])[..5], ["auto", "Deployment/web", "cpu: <unknown>/70%", "2", "5"]);
    let v1 = f.k(&["get", "--raw", "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/auto"]);
    let v1: serde_json::Value = serde_json::from_str(&v1).unwrap();
    assert_eq!(v1["apiVersion"], "autoscaling/v1", "{v1}");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70, "{v1}");
    // A v1 update keeps what only v2 can say.
    f.k(&["patch", "hpa", "auto", "--type=merge", "-p", r#"{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":60}}}}"#]);
    let put =
        f.kubectl_stdin(&["replace", "--raw", "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/auto", "-f", "-"], &{
            let mut v1 = v1.clone();
            v1["spec"]["maxReplicas"] = serde_json::json!(7);
            v1["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            v1.to_string()
        });
    assert!(put.ok, "{put:?}");
    let v2 = f.k(&["get", "hpa", "auto", "-o", "jsonpath={.spec.maxReplicas} {.spec.behavior.scaleDown.stabilizationWindowSeconds} {.spec.metrics[0].resource.target.averageUtilization}"]);
    assert_eq!(v2, "7 60 70");
    // Each spec change, through either version, bumped the generation; a status
    // write does not.
    assert_eq!(f.k(&["get", "hpa", "auto", "-o", "jsonpath={.metadata.generation}"]), "3");
    let o = f.kubectl(&[
        "patch",
        "hpa",
        "auto",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"currentReplicas":2,"desiredReplicas":2}}"#,
    ]);
    assert!(o.ok, "{o:?}");
    assert_eq!(f.k(&["get", "hpa", "auto", "-o", "jsonpath={.metadata.generation} {.status.currentReplicas}"]), "3 2");
}

#[test]
fn invalid_companions_are_refused_with_the_field_named() {
    let f = Flotilla::start();
    let cases = [
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: two}\nspec:\n  ports: [{port: 80}, {port: 81}]\n",
            "spec.ports[0].name: Required value",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: 1st}\nspec:\n  ports: [{port: 80}]\n",
            "a DNS-1035 label must consist of lower case alphanumeric characters",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: cip}\nspec:\n  ports: [{port: 80, nodePort: 30001}]\n",
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
        ),
        (
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: empty}\nspec: {}\n",
            "either `defaultBackend` or `rules` must be specified",
        ),
        (
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: rel}\nspec:\n  rules: [{http: {paths: [{path: cart, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]\n",
            "spec.rules[0].http.paths[0].path: Invalid value: \"cart\": must be an absolute path",
        ),
        (
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: both}\nspec: {minAvailable: 1, maxUnavailable: 1}\n",
            "minAvailable and maxUnavailable cannot be both set",
        ),
        (
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\nspec:\n  scaleTargetRef: {kind: Deployment, name: web}\n  minReplicas: 3\n  maxReplicas: 2\n",
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
        ),
        (
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: np}\nspec:\n  podSelector: {}\n  egress: [{ports: [{port: 90, endPort: 80}]}]\n",
            "spec.egress[0].ports[0].endPort: Invalid value: 80: must be greater than or equal to `port`",
        ),
    ];
    for (manifest, want) in cases {
        let out = f.kubectl_stdin(&["apply", "-f", "-"], manifest);
        assert!(!out.ok && out.stderr.contains(want), "want {want:?} for:\n{manifest}\ngot {out:?}");
    }
    // Nothing was stored, and the server is still serving.
    let listed = f.k(&["get", "svc,ing,pdb,hpa,netpol", "-o", "name"]);
    assert!(listed.trim().is_empty(), "{listed}");
}
