//! The registry of resource types that drives the one generic resource handler.
//!
//! A [`ResourceType`] says everything the handler needs about a resource: its names
//! for discovery, its scope, its subresources, and the [`Strategy`] that holds the
//! rules of its kind (built-in rules, or a CRD's schema). Built-in types are served in
//! every workspace; types defined by a CRD are served only in the workspace that holds
//! the CRD, once it is Established.

use std::sync::Arc;

use dashmap::DashMap;
use serde_json::{json, Value};

use crate::jsonpath::JsonPath;
use crate::kinds::{self, CustomDef, CustomResource, PrinterColumn, Strategy};
use crate::patch::meta::{PatchMeta, SchemaPatchMeta};

/// Where the scale subresource finds its fields (CRD `subresources.scale`).
#[derive(Debug, Clone)]
pub struct ScalePaths {
    /// e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// e.g. `.status.replicas`.
    pub status_replicas: String,
    /// e.g. `.status.selector`.
    pub label_selector: Option<String>,
}

/// One served resource.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group; "" for core.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: Vec<String>,
    /// Categories, such as `all`.
    pub categories: Vec<String>,
    /// Whether a `/status` subresource exists.
    pub status: bool,
    /// The `/scale` subresource, when it exists.
    pub scale: Option<ScalePaths>,
    /// The rules of the kind.
    pub strategy: Arc<dyn Strategy>,
    /// Served from what the clusters report ([`crate::views`]), not from the store:
    /// the objects are the clusters' own and never written by a client.
    pub view: bool,
}

impl ResourceType {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `<Kind>List`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        self.strategy.crd_name().is_some()
    }

    /// List semantics for patches and field ownership.
    pub fn patch_meta(&self) -> &dyn PatchMeta {
        self.strategy.patch_meta()
    }

    /// The group and resource under which objects are stored. Kinds served in two
    /// groups (core and events.k8s.io Events) share one storage, as in Kubernetes.
    fn storage_group_resource(&self) -> (&str, &str) {
        self.strategy.stored_as().unwrap_or((if self.group.is_empty() { "core" } else { &self.group }, &self.plural))
    }

    /// The store key of one object.
    pub fn key(&self, workspace: &str, namespace: &str, name: &str) -> String {
        let (g, r) = self.storage_group_resource();
        storage::object_key(g, r, workspace, namespace, name)
    }

    /// The key prefix for a collection: every workspace (`None`), one workspace, or
    /// one namespace of one workspace.
    pub fn prefix(&self, workspace: Option<&str>, namespace: Option<&str>) -> String {
        let (g, r) = self.storage_group_resource();
        match (workspace, namespace) {
            (None, _) => format!("{g}/{r}/"),
            (Some(ws), None) => format!("{g}/{r}/{ws}/"),
            (Some(ws), Some(ns)) => format!("{g}/{r}/{ws}/{ns}/"),
        }
    }
}

/// Splits a store key into (workspace, namespace, name).
pub fn split_key(key: &str) -> Option<(&str, &str, &str)> {
    let mut parts = key.splitn(5, '/');
    let (_g, _r, ws, ns, name) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some((ws, ns, name))
}

/// Which API a server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Flotilla's control plane: workspaces, with the Flotilla types bound into every
    /// workspace but `root`.
    ControlPlane,
    /// A simulated physical cluster: one logical cluster, with nodes and pods.
    PhysicalCluster,
}

/// The resource types served: the built-ins everywhere, the bound Flotilla types in
/// every workspace but `root`, plus each workspace's own CRDs.
///
/// Bound types are what kcp calls APIBindings: Placements and WorkloadPlacements are
/// served in every workspace from one shared definition, without a CRD object in each
/// workspace (so `kubectl get crd` there lists only the workspace's own CRDs), which
/// keeps a thousand workspaces from holding a thousand copies of the same schemas.
pub struct Registry {
    profile: Profile,
    builtins: Vec<Arc<ResourceType>>,
    bound: Vec<Arc<ResourceType>>,
    custom: DashMap<String, Vec<Arc<ResourceType>>>,
}

impl Registry {
    /// A registry with every built-in kind of the profile.
    pub fn new(profile: Profile) -> Self {
        let bound = match profile {
            Profile::ControlPlane => placement_api::served_in_every_workspace().iter().flat_map(custom_types).map(Arc::new).collect(),
            Profile::PhysicalCluster => Vec::new(),
        };
        Self { profile, builtins: builtin_types(profile).into_iter().map(Arc::new).collect(), bound, custom: DashMap::new() }
    }

    /// What this server serves.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    fn bound_in(&self, workspace: &str) -> &[Arc<ResourceType>] {
        if workspace == placement_api::ROOT_WORKSPACE {
            &[]
        } else {
            &self.bound
        }
    }

    /// Every type served in `workspace`, built-ins first.
    pub fn types(&self, workspace: &str) -> Vec<Arc<ResourceType>> {
        let mut all = self.builtins.clone();
        all.extend(self.bound_in(workspace).iter().cloned());
        if workspace == "*" {
            for entry in self.custom.iter() {
                for t in entry.value() {
                    if !all.iter().any(|a| a.group == t.group && a.version == t.version && a.plural == t.plural) {
                        all.push(t.clone());
                    }
                }
            }
        } else if let Some(c) = self.custom.get(workspace) {
            let shadowed = |t: &Arc<ResourceType>| all.iter().any(|a| a.group == t.group && a.version == t.version && a.plural == t.plural);
            let own: Vec<_> = c.iter().filter(|t| !shadowed(t)).cloned().collect();
            all.extend(own);
        }
        all
    }

    /// Finds a type by group, version and plural in `workspace` (`*` searches all).
    pub fn lookup(&self, workspace: &str, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        let hit = |t: &&Arc<ResourceType>| t.group == group && t.version == version && t.plural == plural;
        if let Some(t) = self.builtins.iter().chain(self.bound_in(workspace)).find(hit) {
            return Some(t.clone());
        }
        if workspace == "*" {
            return self.custom.iter().find_map(|e| e.value().iter().find(hit).cloned());
        }
        self.custom.get(workspace).and_then(|c| c.iter().find(hit).cloned())
    }

    /// Whether `group/version` is served at all in `workspace`.
    pub fn has_group_version(&self, workspace: &str, group: &str, version: &str) -> bool {
        self.types(workspace).iter().any(|t| t.group == group && t.version == version)
    }

    /// Replaces the custom types that one CRD contributes to a workspace.
    pub fn set_crd(&self, workspace: &str, crd_name: &str, types: Vec<ResourceType>) {
        let mut entry = self.custom.entry(workspace.to_string()).or_default();
        entry.retain(|t| t.strategy.crd_name() != Some(crd_name));
        entry.extend(types.into_iter().map(Arc::new));
    }

    /// Drops the custom types of one CRD.
    pub fn remove_crd(&self, workspace: &str, crd_name: &str) {
        self.set_crd(workspace, crd_name, Vec::new());
    }

    /// Drops every custom type of a workspace.
    pub fn remove_workspace(&self, workspace: &str) {
        self.custom.remove(workspace);
    }
}

// The built-in types, and the types of a CRD.

fn rt(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    strategy: impl Strategy + 'static,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: vec![],
        status: false,
        scale: None,
        strategy: Arc::new(strategy),
        view: false,
    }
}

/// Every built-in resource type of a profile. Workspaces never run anything, so only
/// a physical cluster serves nodes and pods.
pub fn builtin_types(profile: Profile) -> Vec<ResourceType> {
    let mut types = workspace_types();
    if profile == Profile::PhysicalCluster {
        let mut node = rt("", "v1", "Node", "nodes", false, &["no"], kinds::Node);
        node.status = true;
        let mut pod = rt("", "v1", "Pod", "pods", true, &["po"], kinds::Pod);
        pod.status = true;
        pod.categories = vec!["all".into()];
        let mut pv = rt("", "v1", "PersistentVolume", "persistentvolumes", false, &["pv"], kinds::PersistentVolume);
        pv.status = true;
        // A pull-mode syncer's manifest carries RBAC objects; a simulated cluster
        // stores them (and kubectl applies them) but authorizes by token alone.
        let rbac = "rbac.authorization.k8s.io";
        types.extend([
            node,
            pod,
            pv,
            rt(rbac, "v1", "ClusterRole", "clusterroles", false, &[], kinds::ClusterRole),
            rt(rbac, "v1", "ClusterRoleBinding", "clusterrolebindings", false, &[], kinds::ClusterRoleBinding),
        ]);
    }
    if profile == Profile::ControlPlane {
        let mut pod = rt("", "v1", "Pod", "pods", true, &["po"], kinds::WorkspacePod);
        pod.status = true;
        pod.view = true;
        pod.categories = vec!["all".into()];
        types.push(pod);
    }
    types
}

/// A kind with a status subresource, in the `all` category.
fn workload(mut t: ResourceType) -> ResourceType {
    t.status = true;
    t.categories = vec!["all".into()];
    t
}

/// The scale subresource at `.spec.replicas` and `.status.replicas`.
fn replicas_scale() -> Option<ScalePaths> {
    Some(ScalePaths { spec_replicas: ".spec.replicas".into(), status_replicas: ".status.replicas".into(), label_selector: None })
}

fn workspace_types() -> Vec<ResourceType> {
    let mut ns = rt("", "v1", "Namespace", "namespaces", false, &["ns"], kinds::Namespace);
    ns.status = true;
    let mut deploy = rt("apps", "v1", "Deployment", "deployments", true, &["deploy"], kinds::Deployment);
    deploy.status = true;
    deploy.categories = vec!["all".into()];
    deploy.scale =
        Some(ScalePaths { spec_replicas: ".spec.replicas".into(), status_replicas: ".status.replicas".into(), label_selector: None });
    let mut crd = rt(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        kinds::CustomResourceDefinition,
    );
    crd.status = true;
    // A Deployment's companions: served with their full API, and run by no controller
    // in a workspace.
    let mut service = rt("", "v1", "Service", "services", true, &["svc"], kinds::Service);
    service.status = true;
    service.categories = vec!["all".into()];
    let mut ingress = rt("networking.k8s.io", "v1", "Ingress", "ingresses", true, &["ing"], kinds::Ingress);
    ingress.status = true;
    let mut pdb = rt("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, &["pdb"], kinds::PodDisruptionBudget);
    pdb.status = true;
    // A Deployment's rollout history: in a workspace, kept by the revisions controller.
    let mut rs = rt("apps", "v1", "ReplicaSet", "replicasets", true, &["rs"], kinds::ReplicaSet);
    rs.status = true;
    rs.categories = vec!["all".into()];
    rs.scale =
        Some(ScalePaths { spec_replicas: ".spec.replicas".into(), status_replicas: ".status.replicas".into(), label_selector: None });
    fn hpa(version: &str, strategy: impl Strategy + 'static) -> ResourceType {
        let mut t = rt("autoscaling", version, "HorizontalPodAutoscaler", "horizontalpodautoscalers", true, &["hpa"], strategy);
        t.status = true;
        t.categories = vec!["all".into()];
        t
    }
    let mut sts = workload(rt("apps", "v1", "StatefulSet", "statefulsets", true, &["sts"], kinds::StatefulSet));
    sts.scale = replicas_scale();
    let mut pvc = rt("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, &["pvc"], kinds::PersistentVolumeClaim);
    pvc.status = true;
    vec![
        ns,
        rt("", "v1", "ConfigMap", "configmaps", true, &["cm"], kinds::ConfigMap),
        rt("", "v1", "Secret", "secrets", true, &[], kinds::Secret),
        rt("", "v1", "ServiceAccount", "serviceaccounts", true, &["sa"], kinds::ServiceAccount),
        rt("", "v1", "Event", "events", true, &["ev"], kinds::Event),
        rt("events.k8s.io", "v1", "Event", "events", true, &["ev"], kinds::EventV1),
        deploy,
        rs,
        sts,
        workload(rt("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"], kinds::DaemonSet)),
        rt("apps", "v1", "ControllerRevision", "controllerrevisions", true, &[], kinds::ControllerRevision),
        workload(rt("batch", "v1", "Job", "jobs", true, &[], kinds::Job)),
        workload(rt("batch", "v1", "CronJob", "cronjobs", true, &["cj"], kinds::CronJob)),
        pvc,
        rt("storage.k8s.io", "v1", "StorageClass", "storageclasses", false, &["sc"], kinds::StorageClass),
        rt("coordination.k8s.io", "v1", "Lease", "leases", true, &[], kinds::Lease),
        crd,
        service,
        ingress,
        rt("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true, &["netpol"], kinds::NetworkPolicy),
        pdb,
        hpa("v2", kinds::HorizontalPodAutoscaler),
        hpa("v1", kinds::HorizontalPodAutoscalerV1),
    ]
}

/// The resource types an Established CRD serves: one per served version.
pub fn custom_types(crd: &Value) -> Vec<ResourceType> {
    let name = crate::crd::s(crd, "/metadata/name").to_string();
    let group = crate::crd::s(crd, "/spec/group").to_string();
    let names = crd.pointer("/status/acceptedNames").filter(|n| n.is_object()).or_else(|| crd.pointer("/spec/names"));
    let Some(names) = names else { return Vec::new() };
    let strs = |key: &str| -> Vec<String> {
        names.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
    };
    let kind = crate::crd::s(names, "/kind").to_string();
    let plural = crate::crd::s(names, "/plural").to_string();
    let singular = match crate::crd::s(names, "/singular") {
        "" => kind.to_lowercase(),
        sng => sng.to_string(),
    };
    let namespaced = crate::crd::s(crd, "/spec/scope") == "Namespaced";
    let mut out = Vec::new();
    for v in crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten() {
        if v.get("served") == Some(&json!(false)) {
            continue;
        }
        let schema = v.pointer("/schema/openAPIV3Schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some(PrinterColumn {
                    name: c.get("name")?.as_str()?.to_string(),
                    type_: crate::crd::s(c, "/type").to_string(),
                    format: crate::crd::s(c, "/format").to_string(),
                    description: crate::crd::s(c, "/description").to_string(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    path: Arc::new(JsonPath::parse(crate::crd::s(c, "/jsonPath")).ok()?),
                })
            })
            .collect();
        let scale = v.pointer("/subresources/scale").map(|sc| ScalePaths {
            spec_replicas: crate::crd::s(sc, "/specReplicasPath").to_string(),
            status_replicas: crate::crd::s(sc, "/statusReplicasPath").to_string(),
            label_selector: sc.get("labelSelectorPath").and_then(Value::as_str).map(String::from),
        });
        out.push(ResourceType {
            group: group.clone(),
            version: crate::crd::s(v, "/name").to_string(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            short_names: strs("shortNames"),
            categories: strs("categories"),
            status: v.pointer("/subresources/status").is_some(),
            scale,
            strategy: Arc::new(CustomResource(Arc::new(CustomDef {
                patch_meta: SchemaPatchMeta::new(schema.clone()),
                schema,
                columns,
                crd_name: name.clone(),
            }))),
            view: false,
        });
    }
    out
}
