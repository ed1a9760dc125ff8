//! Workspaces through the flotilla CLI and kubectl: creation, isolation, scoped
//! tokens, the wildcard view, and deletion.

use crate::common;

use common::Flotilla;

#[test]
fn workspaces_are_isolated_and_their_tokens_are_scoped() {
    let f = Flotilla::start();
    for ws in ["team-a", "team-b"] {
        let o = f.flotilla(&["workspace", "create", ws]);
        assert!(o.ok && o.stdout.contains(&format!("workspace {ws} created")), "{o:?}");
    }
    let list = f.flotilla(&["workspace", "list"]);
    assert!(list.ok && list.stdout.contains("team-a") && list.stdout.contains("Ready"), "{list:?}");
    f.apply(&["--context", "team-a"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: only-a}\n");
    assert!(f.k(&["--context", "team-a", "get", "cm", "-o", "name"]).contains("configmap/only-a"));
    assert!(!f.k(&["--context", "team-b", "get", "cm", "-o", "name"]).contains("only-a"), "team-b sees team-a's object");
    assert!(!f.k(&["--context", "root", "get", "cm", "-o", "name"]).contains("only-a"), "root sees team-a's object");
    // A new workspace starts with the usual namespaces.
    let ns = f.k(&["--context", "team-b", "get", "ns", "-o", "name"]);
    assert!(ns.contains("namespace/default") && ns.contains("namespace/kube-system"), "{ns}");

    // team-b's token used against team-a's URL: 403. A wrong token: 401.
    let a_url = format!("{}/clusters/team-a", f.url);
    let o = f.kubectl(&["--context", "team-b", "--server", &a_url, "get", "cm"]);
    assert!(!o.ok && o.stderr.contains("Forbidden"), "{}", o.stderr);
    let o = f.kubectl(&["--context", "team-a", "--token", "not-a-token", "get", "cm"]);
    assert!(!o.ok && o.stderr.contains("Unauthorized"), "{}", o.stderr);

    // The wildcard view spans workspaces and names each object's workspace.
    let star = format!("{}/clusters/*", f.url);
    let all = f.k(&[
        "--server",
        &star,
        "get",
        "cm",
        "-A",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations.kcp\.io/cluster}{"\n"}{end}"#,
    ]);
    assert!(all.lines().any(|l| l == "only-a=team-a"), "{all}");

    let o = f.flotilla(&["workspace", "delete", "team-a"]);
    assert!(o.ok, "{o:?}");
    let o = f.kubectl(&["--server", &a_url, "get", "cm"]);
    assert!(!o.ok && o.stderr.contains("NotFound"), "a deleted workspace must not be served: {}", o.stderr);
    // Recreating it gives an empty workspace: nothing of the old one survives.
    assert!(f.flotilla(&["workspace", "create", "team-a"]).ok);
    assert!(!f.k(&["--context", "team-a", "get", "cm", "-o", "name"]).contains("only-a"));
}

#[test]
fn a_second_server_on_the_same_data_dir_is_refused_with_a_clear_message() {
    let f = Flotilla::start();
    let o = f.flotilla(&["start", "--listen", "127.0.0.1:0"]);
    assert!(!o.ok, "a second server started on a data dir in use");
    assert!(o.stderr.contains("already using the data dir"), "{}", o.stderr);
    assert_eq!(f.raw("/readyz").stdout, "ok");
}

#[test]
fn sigterm_shuts_down_cleanly_and_a_restart_keeps_everything() {
    let mut f = Flotilla::start();
    assert!(f.flotilla(&["workspace", "create", "keep"]).ok);
    f.apply(&["--context", "keep"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept}\ndata: {v: \"1\"}\n");
    let status = f.stop();
    assert!(status.success(), "exit status {status:?}; log:\n{}", f.log());
    f.launch();
    assert_eq!(f.k(&["--context", "keep", "get", "cm", "kept", "-o", "jsonpath={.data.v}"]), "1");
}

#[test]
fn the_serving_certificate_covers_the_names_given_with_tls_san() {
    let f = Flotilla::start_with(&["--tls-san", "flotilla.example,flotilla.flotilla-system.svc"]);
    for name in ["flotilla.example", "flotilla.flotilla-system.svc", "localhost"] {
        let o = f.kubectl(&["--tls-server-name", name, "get", "namespaces", "-o", "name"]);
        assert!(o.ok && o.stdout.contains("namespace/default"), "{name}: {o:?}");
    }
    let o = f.kubectl(&["--tls-server-name", "other.example", "get", "namespaces"]);
    assert!(!o.ok && o.stderr.contains("certificate"), "a name not given is not covered: {o:?}");
}
