//! The CRDs generated from the types, and where the control plane serves each.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::{Placement, SyncTarget, WorkloadPlacement, Workspace};

/// One type's CRD as JSON.
pub fn crd_json<K: CustomResourceExt>() -> Value {
    serde_json::to_value(crd::<K>()).expect("a generated CRD serializes")
}

/// One type's CRD, without the long generic descriptions schemars copies from the
/// Kubernetes types (every `Quantity` would carry two pages of prose).
fn crd<K: CustomResourceExt>() -> CustomResourceDefinition {
    let mut crd = K::crd();
    for v in &mut crd.spec.versions {
        if let Some(schema) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            let mut value = serde_json::to_value(&*schema).expect("a schema serializes");
            trim_upstream_descriptions(&mut value);
            optional_empty_spec(&mut value);
            *schema = serde_json::from_value(value).expect("a trimmed schema deserializes");
        }
    }
    crd
}

/// A spec without fields need not be sent: `kubectl create` of a Workspace with just a
/// name must work.
fn optional_empty_spec(root: &mut Value) {
    let empty = root.pointer("/properties/spec").is_some_and(|spec| {
        spec.get("properties").and_then(Value::as_object).is_none_or(|p| p.is_empty()) && spec.get("required").is_none()
    });
    if let (true, Some(required)) = (empty, root.get_mut("required").and_then(Value::as_array_mut)) {
        required.retain(|r| r != "spec");
    }
}

fn trim_upstream_descriptions(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                m.remove("description");
            }
            m.values_mut().for_each(trim_upstream_descriptions);
        }
        Value::Array(a) => a.iter_mut().for_each(trim_upstream_descriptions),
        _ => {}
    }
}

/// Installed as CRDs in `root`: Workspaces and SyncTargets.
pub fn installed_in_root() -> Vec<Value> {
    vec![crd_json::<Workspace>(), crd_json::<SyncTarget>()]
}

/// Served in every workspace: Placements and WorkloadPlacements.
pub fn served_in_every_workspace() -> Vec<Value> {
    vec![crd_json::<Placement>(), crd_json::<WorkloadPlacement>()]
}

/// Every Flotilla CRD, for tools that install them on another server.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![crd::<Workspace>(), crd::<SyncTarget>(), crd::<Placement>(), crd::<WorkloadPlacement>()]
}

/// Every Flotilla CRD as one multi-document YAML stream (`flotilla crds`).
pub fn crds_yaml() -> String {
    all_crds().iter().map(|c| serde_yaml::to_string(c).expect("a generated CRD serializes")).collect::<Vec<_>>().join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(crd: &Value) -> &Value {
        &crd["spec"]["versions"][0]
    }

    fn columns(crd: &Value) -> Vec<&str> {
        version(crd)["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.get("priority").is_none())
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn names_scopes_and_short_names() {
        let got: Vec<(String, String, String)> = all_crds()
            .iter()
            .map(|c| {
                (c.metadata.name.clone().unwrap(), c.spec.scope.clone(), c.spec.names.short_names.clone().unwrap_or_default().join(","))
            })
            .collect();
        let want = [
            ("workspaces.tenancy.flotilla.io", "Cluster", "ws"),
            ("synctargets.workload.flotilla.io", "Cluster", "st"),
            ("placements.scheduling.flotilla.io", "Cluster", "pl"),
            ("workloadplacements.scheduling.flotilla.io", "Namespaced", "wp"),
        ];
        assert_eq!(got, want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())));
        for crd in all_crds() {
            let v = &crd.spec.versions[0];
            assert!(
                v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
                "{} has a status subresource",
                crd.metadata.name.unwrap()
            );
        }
    }

    #[test]
    fn printer_columns_are_the_documented_ones() {
        assert_eq!(columns(&crd_json::<SyncTarget>()), ["Ready", "CPU", "Memory", "Workloads", "Heartbeat", "Age"]);
        assert_eq!(columns(&crd_json::<WorkloadPlacement>()), ["Clusters", "Ready", "Age"]);
        assert_eq!(columns(&crd_json::<Placement>()), ["Mode", "Clusters", "Age"]);
        assert_eq!(columns(&crd_json::<Workspace>()), ["Phase", "Age"]);
    }

    #[test]
    fn placement_schema_bounds_clusters_and_modes() {
        let crd = crd_json::<Placement>();
        let spec = &version(&crd)["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(spec["numberOfClusters"]["minimum"], 1.0, "{spec:#}");
        assert_eq!(spec["numberOfClusters"]["default"], 1, "{spec:#}");
        assert_eq!(spec["replicaScheduling"]["enum"], serde_json::json!(["Divide", "Duplicate"]), "{spec:#}");
        assert_eq!(spec["replicaScheduling"]["default"], "Divide", "{spec:#}");
    }

    #[test]
    fn placement_status_lists_are_keyed_for_server_side_apply() {
        let crd = crd_json::<WorkloadPlacement>();
        let status = &version(&crd)["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        for (list, key) in [("clusters", "name"), ("conditions", "type")] {
            assert_eq!(status[list]["x-kubernetes-list-type"], "map", "{status:#}");
            assert_eq!(status[list]["x-kubernetes-list-map-keys"], serde_json::json!([key]), "{status:#}");
            let required = status[list]["items"]["required"].as_array().cloned().unwrap_or_default();
            assert!(required.contains(&serde_json::json!(key)), "a list-map key must be required: {status:#}");
        }
    }

    #[test]
    fn yaml_holds_every_crd() {
        let yaml = crds_yaml();
        assert_eq!(yaml.matches("kind: CustomResourceDefinition").count(), 4, "{yaml}");
        for doc in yaml.split("---\n") {
            let crd: CustomResourceDefinition = serde_yaml::from_str(doc).unwrap();
            assert_eq!(crd.spec.versions.len(), 1);
        }
    }
}
