//! CustomResourceDefinitions: established, served with schema validation,
//! defaulting and pruning, printer columns, and status and scale subresources.

use crate::common;

use common::Flotilla;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Mode, type: string, jsonPath: .spec.mode}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Note, type: string, jsonPath: .spec.note, priority: 1}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              mode: {type: string, enum: [Divide, Duplicate], default: Divide}
              replicas: {type: integer, minimum: 0}
              note: {type: string}
          status:
            type: object
            properties:
              replicas: {type: integer}
"#;

#[test]
fn a_crd_is_established_and_its_objects_are_validated_and_printed() {
    let f = Flotilla::start();
    f.apply(&[], CRD);
    f.k(&["wait", "--for", "condition=established", "--timeout=20s", "crd/widgets.example.com"]);
    f.apply(&[], "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {replicas: 2, note: hello}\n");
    // Defaulting: mode comes from the schema's default.
    assert_eq!(f.k(&["get", "wd", "w1", "-o", "jsonpath={.spec.mode}"]), "Divide");
    let table = f.k(&["get", "widgets"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    // Only the declared columns: the apiserver adds Age only to a CRD that declares none.
    assert_eq!(header, ["NAME", "MODE", "REPLICAS"], "{table}");
    assert!(table.lines().nth(1).unwrap().starts_with("w1"), "{table}");
    let wide = f.k(&["get", "widgets", "-o", "wide"]);
    assert!(wide.contains("NOTE") && wide.contains("hello"), "{wide}");

    // Schema validation: enum and minimum violations are 422 with the field.
    let o = f.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2}\nspec: {mode: Sideways, replicas: -1}\n",
    );
    assert!(!o.ok && o.stderr.contains("spec.mode") && o.stderr.contains("Unsupported value: \"Sideways\""), "{}", o.stderr);
    assert!(o.stderr.contains("spec.replicas"), "{}", o.stderr);
    // Unknown fields: a strict error naming the field.
    let o = f.kubectl_stdin(&["apply", "-f", "-"], "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w3}\nspec: {colour: red}\n");
    assert!(!o.ok && o.stderr.contains("unknown field \"spec.colour\""), "{}", o.stderr);

    // apply of a changed CR uses a merge patch and bumps the generation.
    f.apply(&[], "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {replicas: 2, note: changed}\n");
    assert_eq!(f.k(&["get", "wd", "w1", "-o", "jsonpath={.spec.note}/{.metadata.generation}"]), "changed/2");
    // Strategic merge patch is not for custom resources.
    let o = f.kubectl(&["patch", "wd", "w1", "--type=strategic", "-p", r#"{"spec":{"note":"x"}}"#]);
    assert!(!o.ok && o.stderr.contains("application/strategic-merge-patch+json is not supported"), "{}", o.stderr);

    // Scale subresource, and status writes that do not bump the generation.
    f.k(&["scale", "widget", "w1", "--replicas=4"]);
    assert_eq!(f.k(&["get", "wd", "w1", "-o", "jsonpath={.spec.replicas}"]), "4");
    let gen = f.k(&["get", "wd", "w1", "-o", "jsonpath={.metadata.generation}"]);
    f.k(&["patch", "wd", "w1", "--subresource=status", "--type=merge", "-p", r#"{"status":{"replicas":4}}"#]);
    assert_eq!(f.k(&["get", "wd", "w1", "-o", "jsonpath={.status.replicas}/{.metadata.generation}"]), format!("4/{gen}"));
    // The main resource cannot write status.
    f.k(&["patch", "wd", "w1", "--type=merge", "-p", r#"{"status":{"replicas":9}}"#]);
    assert_eq!(f.k(&["get", "wd", "w1", "-o", "jsonpath={.status.replicas}"]), "4");

    // Deleting the CRD stops serving it and removes its objects.
    f.k(&["delete", "crd", "widgets.example.com"]);
    common::wait_for("widgets to stop being served", std::time::Duration::from_secs(10), || {
        let o = f.kubectl(&["get", "--raw", "/apis/example.com/v1/namespaces/default/widgets"]);
        if o.ok {
            Err(o.stdout)
        } else {
            Ok(())
        }
    });
}

#[test]
fn an_invalid_crd_is_rejected() {
    let f = Flotilla::start();
    let bad = CRD
        .replace("metadata: {name: widgets.example.com}", "metadata: {name: gadgets.example.com}")
        .replace("        type: object\n        properties:\n          spec:", "        properties:\n          spec:");
    let o = f.kubectl_stdin(&["apply", "-f", "-"], &bad);
    assert!(!o.ok, "an invalid CRD was accepted");
    assert!(o.stderr.contains("metadata.name") && o.stderr.contains("spec.names.plural+\".\"+spec.group"), "{}", o.stderr);
    assert!(o.stderr.contains("openAPIV3Schema.type"), "the missing root type must be named: {}", o.stderr);
}
