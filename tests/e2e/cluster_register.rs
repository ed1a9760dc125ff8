//! `flotilla cluster register|list|cordon|uncordon|drain|deregister` against a running
//! control plane and a simulated cluster, including every way a registration fails.

use crate::common;

use common::{Flotilla, Out, SimCluster};

const WEST: &str = "name: west\nnodes:\n  - {count: 3, cpu: \"4\", memory: 8Gi, pods: 50}\nstartupDelay: 100ms\n";

fn kubeconfig_arg(c: &SimCluster) -> String {
    c.kubeconfig().to_str().unwrap().to_string()
}

/// A control plane and the simulated cluster west, and what `flotilla cluster register
/// west --kubeconfig <west's> FLAGS` printed.
fn register_west(flags: &[&str]) -> (Flotilla, SimCluster, Out) {
    let f = Flotilla::start();
    let west = SimCluster::start(WEST);
    let kubeconfig = kubeconfig_arg(&west);
    let args = [&["cluster", "register", "west", "--kubeconfig", kubeconfig.as_str()], flags].concat();
    let o = f.flotilla(&args);
    (f, west, o)
}

#[test]
fn a_reachable_cluster_is_registered_with_its_labels_and_kubeconfig() {
    let (f, _west, o) = register_west(&["--label", "region=us", "--label", "tier=gold"]);
    assert!(o.ok, "{o:?}");
    assert!(o.stdout.contains("cluster west registered: 3 node(s) at https://127.0.0.1:"), "{}", o.stdout);

    let st = f.k(&["--context", "root", "get", "st", "west", "-o", "jsonpath={.metadata.labels.region}/{.metadata.labels.tier} {.spec.syncMode} {.spec.kubeconfigSecretRef.namespace}/{.spec.kubeconfigSecretRef.name}"]);
    assert_eq!(st, "us/gold Push flotilla-system/west-kubeconfig");
    // The stored kubeconfig is self-contained and reaches the cluster.
    let stored =
        f.k(&["--context", "root", "get", "secret", "-n", "flotilla-system", "west-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"]);
    let decoded = std::process::Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(stored.as_bytes())?;
            c.wait_with_output()
        });
    let kubeconfig = String::from_utf8(decoded.unwrap().stdout).unwrap();
    let path = f.data_dir().join("west-from-secret.kubeconfig");
    std::fs::write(&path, &kubeconfig).unwrap();
    let nodes = std::process::Command::new("kubectl")
        .args(["--kubeconfig", path.to_str().unwrap(), "get", "nodes", "-o", "name"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&nodes.stdout).lines().count(), 3, "{kubeconfig}");

    // list, cordon, uncordon, drain, deregister.
    let list = f.flotilla(&["cluster", "list"]);
    assert!(
        list.ok
            && list.stdout.lines().next().unwrap().starts_with("NAME")
            && list.stdout.contains("west")
            && list.stdout.contains("region=us"),
        "{list:?}"
    );
    assert!(f.flotilla(&["cluster", "cordon", "west"]).ok);
    assert_eq!(f.k(&["--context", "root", "get", "st", "west", "-o", "jsonpath={.spec.unschedulable}"]), "true");
    assert!(f.flotilla(&["cluster", "list"]).stdout.contains("Cordoned"));
    assert!(f.flotilla(&["cluster", "uncordon", "west"]).ok);
    assert_eq!(f.k(&["--context", "root", "get", "st", "west", "-o", "jsonpath={.spec.unschedulable}"]), "");
    assert!(f.flotilla(&["cluster", "drain", "west"]).ok);
    let drained = f.k(&["--context", "root", "get", "st", "west", "-o", "jsonpath={.spec.unschedulable} {.spec.evictAfter}"]);
    assert!(drained.starts_with("true 20"), "drain cordons and sets evictAfter: {drained}");
    let o = f.flotilla(&["cluster", "deregister", "west"]);
    assert!(o.ok && o.stdout.contains("cluster west deregistered"), "{o:?}");
    assert!(f.k(&["--context", "root", "get", "st,secrets", "-A", "-o", "name"]).lines().all(|l| !l.contains("west")));
    let o = f.flotilla(&["cluster", "cordon", "west"]);
    assert!(!o.ok && o.stderr.contains("cluster \"west\" is not registered"), "{o:?}");
}

#[test]
fn registration_fails_with_the_cause_and_registers_nothing() {
    let f = Flotilla::start();
    let mut west = SimCluster::start(WEST);
    let good = std::fs::read_to_string(west.kubeconfig()).unwrap();
    let dir = f.data_dir();
    let registered = || f.k(&["--context", "root", "get", "st", "-o", "name"]);

    // Missing file.
    let o = f.flotilla(&["cluster", "register", "west", "--kubeconfig", "/nonexistent/west.kubeconfig"]);
    assert!(!o.ok && o.stderr.contains("cannot read kubeconfig /nonexistent/west.kubeconfig"), "{o:?}");
    // Wrong credentials.
    let token_line = good.lines().find(|l| l.trim_start().starts_with("token:")).unwrap();
    let bad_token = dir.join("bad-token.kubeconfig");
    std::fs::write(&bad_token, good.replace(token_line, "    token: not-the-token")).unwrap();
    let o = f.flotilla(&["cluster", "register", "west", "--kubeconfig", bad_token.to_str().unwrap()]);
    assert!(!o.ok && o.stderr.contains("rejected the kubeconfig's credentials (401 Unauthorized)"), "{o:?}");
    // A user that may not list nodes: a workspace token of our own control plane,
    // pointed at a workspace it does not own.
    assert!(f.flotilla(&["workspace", "create", "a"]).ok && f.flotilla(&["workspace", "create", "b"]).ok);
    let admin = std::fs::read_to_string(f.kubeconfig()).unwrap();
    let cp: serde_yaml::Value = serde_yaml::from_str(&admin).unwrap();
    let token_a = cp["users"].as_sequence().unwrap().iter().find(|u| u["name"] == "workspace-a").unwrap()["user"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let ca = cp["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap().to_string();
    let forbidden = dir.join("forbidden.kubeconfig");
    std::fs::write(
        &forbidden,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{}/clusters/b\", certificate-authority-data: {ca}}}}}]\n\
             users: [{{name: u, user: {{token: \"{token_a}\"}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
            f.url
        ),
    )
    .unwrap();
    let o = f.flotilla(&["cluster", "register", "west", "--kubeconfig", forbidden.to_str().unwrap()]);
    assert!(!o.ok && o.stderr.contains("the kubeconfig's user may not list nodes"), "{o:?}");
    // Unreachable: the cluster is down.
    west.kill9();
    let o = f.flotilla(&["cluster", "register", "west", "--kubeconfig", west.kubeconfig().to_str().unwrap()]);
    let url = west.url.clone();
    assert!(!o.ok && o.stderr.contains(&format!("cannot reach cluster \"west\" at {url}: connection refused")), "{o:?}");
    // Bad input: a label that is not key=value, an invalid name.
    let o = f.flotilla(&["cluster", "register", "west", "--kubeconfig", "x", "--label", "region"]);
    assert!(!o.ok && o.stderr.contains("invalid label \"region\": use key=value"), "{o:?}");
    let o = f.flotilla(&["cluster", "register", "West_1", "--kubeconfig", "x"]);
    assert!(!o.ok && o.stderr.contains("invalid cluster name \"West_1\""), "{o:?}");

    assert_eq!(registered().trim(), "", "a failed registration leaves nothing behind");
    assert!(f.k(&["--context", "root", "get", "secrets", "-n", "flotilla-system", "-o", "name"]).trim().is_empty());
}

#[test]
fn pull_mode_prints_the_manifest_for_the_cluster() {
    let (f, west, o) = register_west(&["--pull", "--syncer-image", "example.com/flotilla:test"]);
    assert!(o.ok, "{o:?}");
    for kind in
        ["kind: Namespace", "kind: ServiceAccount", "kind: ClusterRole", "kind: ClusterRoleBinding", "kind: Secret", "kind: Deployment"]
    {
        assert!(o.stdout.contains(kind), "{kind} missing from:\n{}", o.stdout);
    }
    assert!(o.stdout.contains("image: example.com/flotilla:test") && o.stdout.contains("--sync-target"), "{}", o.stdout);
    assert_eq!(f.k(&["--context", "root", "get", "st", "west", "-o", "jsonpath={.spec.syncMode}"]), "Pull");
    // Pull mode stores no kubeconfig: the control plane never reaches the cluster.
    assert!(f.k(&["--context", "root", "get", "secrets", "-n", "flotilla-system", "-o", "name"]).trim().is_empty());
    // The upstream credential is scoped: it reaches root, not a workspace.
    let docs: Vec<serde_yaml::Value> =
        o.stdout.split("---\n").filter(|d| !d.trim().is_empty()).map(|d| serde_yaml::from_str(d).unwrap()).collect();
    let secret = docs.iter().find(|d| d["kind"] == "Secret").unwrap();
    let upstream = secret["stringData"]["kubeconfig"].as_str().unwrap();
    let path = f.data_dir().join("upstream.kubeconfig");
    std::fs::write(&path, upstream).unwrap();
    let k = |args: &[&str]| std::process::Command::new("kubectl").arg("--kubeconfig").arg(&path).args(args).output().unwrap();
    let own = k(&["get", "synctarget", "west", "-o", "name"]);
    assert!(own.status.success(), "{}", String::from_utf8_lossy(&own.stderr));
    assert!(f.flotilla(&["workspace", "create", "demo"]).ok);
    let ws = k(&["--server", &format!("{}/clusters/demo", f.url), "get", "deployments"]);
    assert!(!ws.status.success() && String::from_utf8_lossy(&ws.stderr).contains("Forbidden"), "{}", String::from_utf8_lossy(&ws.stderr));
    // The manifest applies to the cluster as a whole.
    let applied = std::process::Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig_arg(&west), "apply", "--dry-run=client", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(o.stdout.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(String::from_utf8_lossy(&applied.stdout).contains("deployment.apps/flotilla-syncer created (dry run)"), "{applied:?}");
}
