//! List and map semantics that patches and field ownership both depend on.
//!
//! Strategic merge patch (apimachinery `util/strategicpatch`) and server-side apply
//! (structured-merge-diff) both need to know, for a field path, whether a list is
//! replaced atomically, merged by a key, or treated as a set of primitives. Built-in
//! types take that from their Go struct tags; custom resources take it from
//! `x-kubernetes-list-type` and `x-kubernetes-list-map-keys` in their schema.

/// How a list at some path is merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListStrategy {
    /// The whole list is replaced (no patch strategy tag, or `x-kubernetes-list-type: atomic`).
    Atomic,
    /// Elements are objects identified by these key fields (`patchMergeKey`, or
    /// `x-kubernetes-list-map-keys`). Strategic merge patch uses only the first key.
    Map(Vec<String>),
    /// Elements are primitives, merged as a set (`x-kubernetes-list-type: set`,
    /// or `patchStrategy:"merge"` on a primitive list such as `metadata.finalizers`).
    Set,
}

/// Answers merge questions for one resource type.
///
/// A path is the sequence of field names from the object root. List elements add
/// no segment: the containers' env list is `["spec","template","spec","containers","env"]`.
pub trait PatchMeta: Send + Sync {
    /// How the list at `path` merges.
    fn list_strategy(&self, path: &[&str]) -> ListStrategy;
    /// Whether the map at `path` carries `patchStrategy:"retainKeys"`.
    fn retain_keys(&self, _path: &[&str]) -> bool {
        false
    }
    /// The defaults of the key fields of the associative list at `path` (the
    /// `+default` markers of k8s.io/api), which server-side apply uses for an item
    /// that leaves a key field out.
    fn key_defaults(&self, _path: &[&str]) -> &'static [(&'static str, &'static str)] {
        &[]
    }
}

/// Metadata lists that every object shares, whatever its kind.
pub fn metadata_list(path: &[&str]) -> Option<ListStrategy> {
    match path {
        ["metadata", "finalizers"] => Some(ListStrategy::Set),
        ["metadata", "ownerReferences"] => Some(ListStrategy::Map(vec!["uid".into()])),
        ["metadata", "managedFields"] => Some(ListStrategy::Atomic),
        _ => None,
    }
}

/// The merge table of the built-in kinds Flotilla serves (apps/v1 Deployment, core/v1
/// pod template, and the shared metadata and conditions lists), from the struct tags
/// in k8s.io/api. See KUBE-API-NOTES §3.
#[derive(Debug, Default, Clone, Copy)]
pub struct BuiltinPatchMeta;

impl PatchMeta for BuiltinPatchMeta {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        if let Some(s) = metadata_list(path) {
            return s;
        }
        let key = |k: &str| ListStrategy::Map(vec![k.to_string()]);
        let last = path.last().copied().unwrap_or_default();
        // Pod-spec lists sit under spec.template.spec (workloads) or spec (pods).
        let in_pod_spec = path.windows(2).any(|w| w == ["template", "spec"]) || path.first() == Some(&"spec");
        match last {
            "conditions" if path.first() == Some(&"status") => key("type"),
            "containers" | "initContainers" | "ephemeralContainers" if in_pod_spec => key("name"),
            "env" | "imagePullSecrets" | "volumes" if in_pod_spec => key("name"),
            "ports" if path.iter().any(|p| p.ends_with("ontainers")) => key("containerPort"),
            "volumeMounts" => key("mountPath"),
            "volumeDevices" => key("devicePath"),
            "hostAliases" => key("ip"),
            "topologySpreadConstraints" => ListStrategy::Map(vec!["topologyKey".into(), "whenUnsatisfiable".into()]),
            "resourceClaims" | "schedulingGates" if in_pod_spec => key("name"),
            _ => ListStrategy::Atomic,
        }
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        let last = path.last().copied().unwrap_or_default();
        // Deployment spec.strategy and each element of pod-spec volumes.
        (last == "strategy" && path.len() == 2 && path[0] == "spec") || last == "volumes"
    }
}

/// Merge semantics taken from a custom resource's structural schema
/// (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`).
#[derive(Debug, Clone)]
pub struct SchemaPatchMeta {
    schema: serde_json::Value,
}

impl SchemaPatchMeta {
    /// Wraps a CRD version's `openAPIV3Schema`.
    pub fn new(schema: serde_json::Value) -> Self {
        Self { schema }
    }

    fn node(&self, path: &[&str]) -> Option<&serde_json::Value> {
        let mut node = &self.schema;
        for seg in path {
            // Step through list items transparently: paths name fields only.
            while node.get("type").and_then(|t| t.as_str()) == Some("array") {
                node = node.get("items")?;
            }
            node =
                node.get("properties").and_then(|p| p.get(*seg)).or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?;
        }
        Some(node)
    }
}

impl PatchMeta for SchemaPatchMeta {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        if let Some(s) = metadata_list(path) {
            return s;
        }
        let Some(node) = self.node(path) else {
            return ListStrategy::Atomic;
        };
        match node.get("x-kubernetes-list-type").and_then(|t| t.as_str()) {
            Some("map") => ListStrategy::Map(
                node.get("x-kubernetes-list-map-keys")
                    .and_then(|k| k.as_array())
                    .map(|k| k.iter().filter_map(|s| s.as_str().map(String::from)).collect())
                    .unwrap_or_default(),
            ),
            Some("set") => ListStrategy::Set,
            _ => ListStrategy::Atomic,
        }
    }
}
