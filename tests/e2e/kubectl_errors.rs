//! Bad input gets a clear `Status` error, nothing is half-written, and the server
//! keeps serving.

use crate::common;

use common::Flotilla;

fn assert_healthy(f: &Flotilla) {
    assert_eq!(f.raw("/readyz").stdout, "ok");
    f.apply(&[], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: still-works}\n");
}

#[test]
fn invalid_names_and_values_are_422_with_the_field() {
    let f = Flotilla::start();
    let o = f.kubectl_stdin(&["apply", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n");
    assert!(!o.ok);
    assert!(o.stderr.contains("The ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""), "{}", o.stderr);
    let bad_deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: -1\n  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: other}}\n    spec: {containers: [{name: c, image: nginx}]}\n";
    let o = f.kubectl_stdin(&["apply", "-f", "-"], bad_deploy);
    assert!(!o.ok);
    assert!(o.stderr.contains("spec.replicas") && o.stderr.contains("selector` does not match template `labels`"), "{}", o.stderr);
    assert!(!f.kubectl(&["get", "deploy", "d"]).ok, "an invalid object must not be stored");
    assert_healthy(&f);
}

#[test]
fn unknown_fields_are_rejected_under_strict_validation() {
    let f = Flotilla::start();
    let o = f.kubectl_stdin(&["apply", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: uf}\nbogus: 1\ndata: {a: b}\n");
    assert!(!o.ok);
    assert!(o.stderr.contains("strict decoding error: unknown field \"bogus\""), "{}", o.stderr);
    // --validate=warn stores the object without the field and says so.
    let o = f.kubectl_stdin(&["apply", "--validate=warn", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: uf}\nbogus: 1\n");
    assert!(o.ok && o.stderr.contains("unknown field \"bogus\""), "{o:?}");
    assert_eq!(f.k(&["get", "cm", "uf", "-o", "jsonpath={.bogus}"]), "", "the unknown field must not be stored");
    // A wrong type is a 400 that names the field.
    let o = f.kubectl_stdin(
        &["create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", "-"],
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"wt","labels":{"on":true}}}"#,
    );
    assert!(!o.ok && o.stderr.contains("metadata.labels.on") && o.stderr.contains("expected a string"), "{}", o.stderr);
    assert_healthy(&f);
}

#[test]
fn malformed_and_oversized_bodies_are_refused() {
    let f = Flotilla::start();
    let dir = f.dir.path();
    std::fs::write(dir.join("bad.json"), "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":").unwrap();
    let o = f.kubectl(&["create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", dir.join("bad.json").to_str().unwrap()]);
    assert!(!o.ok && o.stderr.contains("BadRequest"), "{}", o.stderr);
    assert!(o.stderr.contains("error decoding"), "the message should say what was wrong: {}", o.stderr);

    let big = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"x\":\"{}\"}}}}",
        "a".repeat(4 * 1024 * 1024)
    );
    std::fs::write(dir.join("big.json"), big).unwrap();
    let o = f.kubectl(&["create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", dir.join("big.json").to_str().unwrap()]);
    assert!(!o.ok && o.stderr.contains("RequestEntityTooLarge"), "{}", o.stderr);
    assert!(!f.kubectl(&["get", "cm", "big"]).ok);

    let o = f.kubectl(&["get", "--raw", "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(b"]);
    assert!(!o.ok && o.stderr.contains("BadRequest"), "{}", o.stderr);
    let o = f.kubectl(&["get", "--raw", "/apis/apps/v1/nosuchthings"]);
    assert!(!o.ok && o.stderr.contains("NotFound"), "{}", o.stderr);
    assert_healthy(&f);
}

#[test]
fn stale_resource_version_is_a_conflict() {
    let f = Flotilla::start();
    f.apply(&[], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cc}\ndata: {v: \"1\"}\n");
    let rv = f.k(&["get", "cm", "cc", "-o", "jsonpath={.metadata.resourceVersion}"]);
    f.k(&["patch", "cm", "cc", "--type=merge", "-p", r#"{"data":{"v":"2"}}"#]);
    let stale = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cc, resourceVersion: \"{rv}\"}}\ndata: {{v: \"3\"}}\n");
    let o = f.kubectl_stdin(&["replace", "-f", "-"], &stale);
    assert!(
        !o.ok && o.stderr.contains("the object has been modified; please apply your changes to the latest version and try again"),
        "{}",
        o.stderr
    );
    assert_eq!(f.k(&["get", "cm", "cc", "-o", "jsonpath={.data.v}"]), "2");
}
