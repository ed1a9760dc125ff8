//! The upstream status of a Deployment's companions, summed from their clusters' reports.
//!
//! A Service, an Ingress, a HorizontalPodAutoscaler or a PersistentVolumeClaim follows its workload to the
//! clusters it is assigned to (`state.workload.flotilla.io/<cluster>=Sync`), and each
//! cluster's syncer reports the `status` of its copy in the upstream object's annotation
//! `clusterstatus.workload.flotilla.io/<cluster>`. This controller, run once in the
//! control plane process, sums the reports of the clusters the object is assigned to
//! *now* into its `status` ([`desired_status`]), so that `kubectl get svc` shows every
//! cluster's load balancer address and `kubectl get hpa` the replicas of the whole
//! fleet. A report of a cluster the object is no longer assigned to (lost, drained,
//! moved) is not counted, whether or not its syncer has removed it yet.
//!
//! The sums are pure functions of the object; the controller only watches and writes,
//! and writes only when the sum differs from the stored status.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, PersistentVolumeClaim, PersistentVolumeClaimStatus, Service, ServiceStatus};
use k8s_openapi::api::networking::v1::{Ingress, IngressLoadBalancerStatus, IngressStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::serde::de::DeserializeOwned;
use k8s_openapi::serde::{Deserialize, Deserializer, Serialize};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use placement_api::{sync_target_of_label, sync_target_of_status_annotation, CLUSTER_ANNOTATION, SYNC_STATE_SYNC};
use serde_json::{json, Map, Value};

use runtime::cache::{self, Cache, ObjKey, Workspace};
use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{failed, is_conflict, is_not_found, Failed};

/// The field manager of the status fields this controller writes.
pub const FIELD_MANAGER: &str = "flotilla-companion-status";

/// The longest report that is read. The largest real status of these kinds (an
/// autoscaler with a dozen metrics and its conditions, a load balancer with a few
/// dozen addresses) is a few KiB; a longer annotation is garbage, and parsing it on
/// every pass would cost more than it could be worth. Kubernetes caps all of an
/// object's annotations together at 256 KiB (TotalAnnotationSizeLimitB).
pub const MAX_REPORT_BYTES: usize = 64 * 1024;

/// How soon a status write that found a newer object is tried again. The newer
/// object's watch event queues it anyway; this covers a watch that is slow to say so.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// How many objects are summed at once.
const CONCURRENCY: usize = 4;

/// The kinds whose status is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Companion {
    /// core/v1 Service: the load balancer addresses (type LoadBalancer only).
    Service,
    /// networking.k8s.io/v1 Ingress: the load balancer addresses.
    Ingress,
    /// autoscaling/v2 HorizontalPodAutoscaler: replicas summed, conditions combined.
    HorizontalPodAutoscaler,
    /// core/v1 PersistentVolumeClaim: the phase and capacity of the cluster's claim.
    PersistentVolumeClaim,
}

impl Companion {
    /// Every kind, in the order they are watched.
    pub const ALL: [Companion; 4] =
        [Companion::Service, Companion::Ingress, Companion::HorizontalPodAutoscaler, Companion::PersistentVolumeClaim];

    /// `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Companion::Service => "Service",
            Companion::Ingress => "Ingress",
            Companion::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
            Companion::PersistentVolumeClaim => "PersistentVolumeClaim",
        }
    }

    fn group(self) -> &'static str {
        match self {
            Companion::Service | Companion::PersistentVolumeClaim => "",
            Companion::Ingress => "networking.k8s.io",
            Companion::HorizontalPodAutoscaler => "autoscaling",
        }
    }

    fn version(self) -> &'static str {
        match self {
            Companion::Service | Companion::Ingress | Companion::PersistentVolumeClaim => "v1",
            // The version the control plane stores; v1 is a view of it.
            Companion::HorizontalPodAutoscaler => "v2",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Companion::Service => "services",
            Companion::Ingress => "ingresses",
            Companion::HorizontalPodAutoscaler => "horizontalpodautoscalers",
            Companion::PersistentVolumeClaim => "persistentvolumeclaims",
        }
    }
}

/// One cluster's report that was not counted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The cluster that reported.
    pub cluster: String,
    /// Why the report was not counted.
    pub why: String,
}

/// What the reports of an object's clusters sum to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summed {
    /// The whole `status` the object should have; `None`: leave it as it is.
    pub status: Option<Value>,
    /// The reports of assigned clusters that could not be read.
    pub skipped: Vec<Skipped>,
}

/// The status `object` (a companion of `kind`, as JSON) should have, from the reports
/// of the clusters it is assigned to:
/// - Service of type LoadBalancer, and Ingress: `loadBalancer.ingress` is the union of
///   the clusters' entries, without duplicates, in cluster-name order and then each
///   cluster's own order; with no entry, `loadBalancer` is `{}` (a pending load
///   balancer), but an object that no assigned cluster reports on and that shows no
///   address is left alone. The rest of the status (a Service's conditions) is kept.
///   Other Service types are left alone.
/// - HorizontalPodAutoscaler: see [`sum_autoscaler`]. With no report, it is left alone.
pub fn desired_status(kind: Companion, object: &Value) -> Summed {
    let mut skipped = Vec::new();
    let status = match kind {
        Companion::Service => sum_service(object, &mut skipped),
        Companion::Ingress => sum_ingress(object, &mut skipped),
        Companion::HorizontalPodAutoscaler => sum_autoscaler(object, &mut skipped),
        Companion::PersistentVolumeClaim => sum_claim(object, &mut skipped),
    };
    Summed { status, skipped }
}

/// The clusters an object is assigned to, from its labels.
fn assigned(object: &Value) -> BTreeSet<String> {
    let labels = object.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten();
    labels.filter(|(_, v)| v.as_str() == Some(SYNC_STATE_SYNC)).filter_map(|(k, _)| sync_target_of_label(k).map(String::from)).collect()
}

/// The readable reports of the assigned clusters, by cluster name, as the status type
/// `T`; each unreadable one is added to `skipped`.
fn reports<T: DeserializeOwned>(object: &Value, assigned: &BTreeSet<String>, skipped: &mut Vec<Skipped>) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let annotations = object.pointer("/metadata/annotations").and_then(Value::as_object).into_iter().flatten();
    for (key, value) in annotations {
        let Some(cluster) = sync_target_of_status_annotation(key).filter(|c| assigned.contains(*c)) else { continue };
        let mut skip = |why: String| skipped.push(Skipped { cluster: cluster.to_string(), why });
        let Some(text) = value.as_str() else {
            skip("the annotation's value is not a string".into());
            continue;
        };
        if text.len() > MAX_REPORT_BYTES {
            skip(format!("the report is {} bytes long, more than the {MAX_REPORT_BYTES} read", text.len()));
            continue;
        }
        let report = match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                skip("the report is not a JSON object".into());
                continue;
            }
            Err(e) => {
                skip(format!("the report is not JSON: {e}"));
                continue;
            }
        };
        // Read as the status type, as the API server reads a status write: unknown
        // fields go, and a field of the wrong type makes the report unreadable.
        match serde_json::from_value::<T>(report) {
            Ok(r) => {
                out.insert(cluster.to_string(), r);
            }
            Err(e) => skip(format!("the report is not a status of this kind: {e}")),
        }
    }
    out
}

/// The object's stored status as `T` (the default when it has none or, which the API
/// server does not allow, an unreadable one).
fn current<T: DeserializeOwned + Default>(object: &Value) -> T {
    object.get("status").filter(|s| !s.is_null()).and_then(|s| serde_json::from_value(s.clone()).ok()).unwrap_or_default()
}

/// The entries of `lists`, in order, each once.
fn union<T: PartialEq>(lists: impl IntoIterator<Item = Vec<T>>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for entry in lists.into_iter().flatten() {
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}

fn to_json<T: Serialize>(status: &T) -> Option<Value> {
    serde_json::to_value(status).ok()
}

fn sum_service(object: &Value, skipped: &mut Vec<Skipped>) -> Option<Value> {
    if object.pointer("/spec/type").and_then(Value::as_str) != Some("LoadBalancer") {
        return None;
    }
    let reports: BTreeMap<String, ServiceStatus> = reports(object, &assigned(object), skipped);
    let entries = union(reports.values().map(|r| {
        let mut ingress = r.load_balancer.as_ref().and_then(|l| l.ingress.clone()).unwrap_or_default();
        // The API server defaults ipMode of an address to VIP (SetDefaults_Service);
        // the sum does the same, so that it compares equal to what was stored.
        for i in ingress.iter_mut().filter(|i| i.ip.is_some() && i.ip_mode.is_none()) {
            i.ip_mode = Some("VIP".into());
        }
        ingress
    }));
    let mut status: ServiceStatus = current(object);
    let shown = status.load_balancer.as_ref().and_then(|l| l.ingress.as_ref()).is_some_and(|i| !i.is_empty());
    if reports.is_empty() && !shown {
        return None;
    }
    status.load_balancer = Some(LoadBalancerStatus { ingress: (!entries.is_empty()).then_some(entries) });
    to_json(&status)
}

fn sum_ingress(object: &Value, skipped: &mut Vec<Skipped>) -> Option<Value> {
    let reports: BTreeMap<String, IngressStatus> = reports(object, &assigned(object), skipped);
    let entries = union(reports.values().map(|r| r.load_balancer.as_ref().and_then(|l| l.ingress.clone()).unwrap_or_default()));
    let mut status: IngressStatus = current(object);
    let shown = status.load_balancer.as_ref().and_then(|l| l.ingress.as_ref()).is_some_and(|i| !i.is_empty());
    if reports.is_empty() && !shown {
        return None;
    }
    status.load_balancer = Some(IngressLoadBalancerStatus { ingress: (!entries.is_empty()).then_some(entries) });
    to_json(&status)
}

/// A PersistentVolumeClaim's status from its clusters' claims: a claim is bound where
/// its workload runs, so the status is that of a cluster where it is Bound (the first
/// by name, when its workload runs on several), else of the first that reported. With
/// no report, it is left alone.
fn sum_claim(object: &Value, skipped: &mut Vec<Skipped>) -> Option<Value> {
    let reports: BTreeMap<String, PersistentVolumeClaimStatus> = reports(object, &assigned(object), skipped);
    let bound = reports.values().find(|r| r.phase.as_deref() == Some("Bound"));
    let chosen = bound.or_else(|| reports.values().next())?;
    to_json(chosen)
}

/// A HorizontalPodAutoscaler's status from its clusters' autoscalers, each of which
/// scales its own cluster's share of the workload:
/// - `currentReplicas` and `desiredReplicas` are the sums, `lastScaleTime` the latest;
/// - `currentMetrics` are the first cluster's (by name) that reports any. Each
///   cluster measures its own pods, and an average over clusters would be a figure no
///   autoscaler acted on, so `kubectl get hpa`'s TARGETS shows one cluster's reading;
/// - `conditions`, per type: True if every cluster that reports it says True; else the
///   first other cluster's condition, its message prefixed by the cluster (`east: ...`);
/// - `observedGeneration` is the object's generation once every assigned cluster has
///   reported, and stays as it was until then.
fn sum_autoscaler(object: &Value, skipped: &mut Vec<Skipped>) -> Option<Value> {
    let assigned = assigned(object);
    let reports: BTreeMap<String, HorizontalPodAutoscalerStatus> = reports(object, &assigned, skipped);
    if reports.is_empty() {
        return None;
    }
    let before: HorizontalPodAutoscalerStatus = current(object);
    let all_reported = assigned.iter().all(|c| reports.contains_key(c));
    let status = HorizontalPodAutoscalerStatus {
        current_replicas: reports.values().filter_map(|r| r.current_replicas).reduce(i32::saturating_add),
        desired_replicas: reports.values().map(|r| r.desired_replicas).fold(0, i32::saturating_add),
        last_scale_time: reports.values().filter_map(|r| r.last_scale_time.clone()).max(),
        current_metrics: reports.values().find_map(|r| r.current_metrics.clone().filter(|m| !m.is_empty())),
        conditions: combined_conditions(&reports),
        observed_generation: if all_reported {
            object.pointer("/metadata/generation").and_then(Value::as_i64).or(before.observed_generation)
        } else {
            before.observed_generation
        },
    };
    to_json(&status)
}

/// The autoscaler conditions of all clusters as one list, per type in the order the
/// types first appear (see [`sum_autoscaler`]). A True condition keeps the first
/// cluster's reason and message, and the latest transition: it has been True
/// everywhere since the last cluster turned True.
fn combined_conditions(reports: &BTreeMap<String, HorizontalPodAutoscalerStatus>) -> Option<Vec<HorizontalPodAutoscalerCondition>> {
    let all = || reports.iter().flat_map(|(cluster, r)| r.conditions.iter().flatten().map(move |c| (cluster, c)));
    let mut types: Vec<&str> = Vec::new();
    for (_, c) in all() {
        if !types.contains(&c.type_.as_str()) {
            types.push(&c.type_);
        }
    }
    let combined: Vec<HorizontalPodAutoscalerCondition> = types
        .into_iter()
        .filter_map(|ty| {
            let of_type: Vec<(&String, &HorizontalPodAutoscalerCondition)> =
                all().filter(|(_, c)| c.type_ == ty).fold(Vec::new(), |mut seen, (cluster, c)| {
                    // A report listing a type twice counts its first.
                    if !seen.iter().any(|(c2, _)| *c2 == cluster) {
                        seen.push((cluster, c));
                    }
                    seen
                });
            if let Some((cluster, c)) = of_type.iter().find(|(_, c)| c.status != "True") {
                let message = match c.message.as_deref().filter(|m| !m.is_empty()) {
                    Some(m) => format!("{cluster}: {m}"),
                    None => cluster.to_string(),
                };
                return Some(HorizontalPodAutoscalerCondition { message: Some(message), ..(*c).clone() });
            }
            let (_, first) = of_type.first()?;
            let latest = of_type.iter().filter_map(|(_, c)| c.last_transition_time.clone()).max();
            Some(HorizontalPodAutoscalerCondition { last_transition_time: latest, ..(*first).clone() })
        })
        .collect();
    (!combined.is_empty()).then_some(combined)
}

/// The stored status of `object` as the status type of `kind` would write it, for
/// comparing with a sum: the API server stores a status through that type too.
fn normalized(kind: Companion, status: &Value) -> Option<Value> {
    fn through<T: DeserializeOwned + Serialize>(status: &Value) -> Option<Value> {
        to_json(&serde_json::from_value::<T>(status.clone()).ok()?)
    }
    match kind {
        Companion::Service => through::<ServiceStatus>(status),
        Companion::Ingress => through::<IngressStatus>(status),
        Companion::HorizontalPodAutoscaler => through::<HorizontalPodAutoscalerStatus>(status),
        Companion::PersistentVolumeClaim => through::<PersistentVolumeClaimStatus>(status),
    }
}

/// The merge patch that gives `object` the status `desired`, or `None` when it has it
/// already. The patch carries the object's resourceVersion, so it applies only to the
/// object the sum was computed from: a sum of annotations that have changed since is
/// refused (409) rather than written over a newer sum.
pub fn status_patch(kind: Companion, object: &Value, desired: &Value) -> Option<Value> {
    let stored = object.get("status").filter(|s| !s.is_null()).cloned().unwrap_or_else(|| json!({}));
    if normalized(kind, &stored).as_ref() == Some(desired) {
        return None;
    }
    let mut patch = json!({"status": merge_diff(&stored, desired)});
    if let Some(rv) = object.pointer("/metadata/resourceVersion").filter(|rv| rv.is_string()) {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    Some(patch)
}

/// The JSON merge patch (RFC 7386) that turns `from` into `to`: fields that go are
/// `null`, objects are patched field by field, anything else is replaced.
pub(crate) fn merge_diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = Map::new();
            for k in from.keys().filter(|k| !to.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            for (k, v) in to {
                match from.get(k) {
                    Some(old) if old == v => {}
                    Some(old) => {
                        patch.insert(k.clone(), merge_diff(old, v));
                    }
                    None => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(patch)
        }
        _ => to.clone(),
    }
}

/// All that the controller keeps of a watched companion: the labels and annotations it
/// sums by, the Service type, the generation and the status. The rest (the spec, and
/// `kubectl apply`'s last-applied annotation, the largest part of most objects) is
/// dropped as each object is read, so that watching every companion of every
/// workspace costs little memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(crate = "k8s_openapi::serde")]
struct Seen {
    #[serde(deserialize_with = "trimmed_meta")]
    metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<SeenSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(crate = "k8s_openapi::serde")]
struct SeenSpec {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    type_: Option<String>,
}

/// The metadata with only the labels and annotations the sums read, and the workspace.
fn trimmed_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let meta = ObjectMeta::deserialize(d)?;
    let labels = meta.labels.map(|mut l| {
        l.retain(|k, _| sync_target_of_label(k).is_some());
        l
    });
    let annotations = meta.annotations.map(|mut a| {
        a.retain(|k, _| k == CLUSTER_ANNOTATION || sync_target_of_status_annotation(k).is_some());
        a
    });
    Ok(ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        resource_version: meta.resource_version,
        generation: meta.generation,
        labels: labels.filter(|l| !l.is_empty()),
        annotations,
        ..Default::default()
    })
}

impl Seen {
    /// Whether the controller may have something to do for it: some cluster reports
    /// on it, or it shows an address that a sum may have to take away.
    fn concerned(&self) -> bool {
        let reported = self.metadata.annotations.iter().flatten().any(|(k, _)| sync_target_of_status_annotation(k).is_some());
        let shown = self.status.as_ref().and_then(|s| s.pointer("/loadBalancer/ingress")).and_then(Value::as_array);
        reported || shown.is_some_and(|i| !i.is_empty())
    }
}

impl Resource for Seen {
    type DynamicType = Companion;
    type Scope = NamespaceResourceScope;

    fn kind(kind: &Companion) -> Cow<'_, str> {
        kind.name().into()
    }
    fn group(kind: &Companion) -> Cow<'_, str> {
        kind.group().into()
    }
    fn version(kind: &Companion) -> Cow<'_, str> {
        kind.version().into()
    }
    fn plural(kind: &Companion) -> Cow<'_, str> {
        kind.plural().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// One companion: its kind and which object of that kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    kind: Companion,
    obj: ObjKey,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.name(), self.obj)
    }
}

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let mut controller = Controller::<Target>::new("companion-status").concurrency(CONCURRENCY);
    let tx = controller.trigger();
    let wildcard = clients::workspace(&base, "*");
    let caches: Arc<BTreeMap<Companion, Arc<Cache<Seen>>>> = Arc::new(
        Companion::ALL
            .into_iter()
            .map(|kind| {
                let tx = tx.clone();
                let cache = cache::spawn_indexed(
                    Api::<Seen>::all_with(wildcard.clone(), &kind),
                    watcher::Config::default(),
                    |o: &Seen| ObjKey::of(&o.metadata, Workspace::Annotated),
                    move |c| {
                        // Most companions no cluster reports on: their changes
                        // queue nothing.
                        let concerned = c.old.as_ref().is_some_and(|o| o.concerned()) || c.seen.concerned();
                        !concerned || tx.send(Target { kind, obj: c.key }).is_ok()
                    },
                    kind.plural(),
                );
                (kind, cache)
            })
            .collect(),
    );
    let c = caches.clone();
    controller.resync(resync, move || {
        c.iter()
            .flat_map(|(kind, cache)| cache.entries_where(|_, o| o.concerned()).into_iter().map(|obj| Target { kind: *kind, obj }))
            .collect::<Vec<_>>()
    });
    controller
        .run(|target| {
            let seen = caches.get(&target.kind).and_then(|c| c.get(&target.obj));
            let base = base.clone();
            async move { reconcile(&base, &target, seen.as_deref()).await }
        })
        .await;
}

/// Writes the sum of `target`'s reports as its status, if it differs. `seen` is the
/// object as cached: `None` when it is gone (or not listed yet: the list queues it).
async fn reconcile(base: &Client, target: &Target, seen: Option<&Seen>) -> Result<Next, Failed> {
    let Some(seen) = seen else { return Ok(Next::Done) };
    let Ok(object) = serde_json::to_value(seen) else { return Ok(Next::Done) };
    let summed = desired_status(target.kind, &object);
    for s in &summed.skipped {
        tracing::warn!(cluster = %s.cluster, reason = %s.why, "a cluster's status report was not counted");
    }
    let Some(desired) = summed.status else { return Ok(Next::Done) };
    let Some(patch) = status_patch(target.kind, &object, &desired) else { return Ok(Next::Done) };
    let client = clients::workspace(base, &target.obj.workspace);
    let (namespace, name) = (&target.obj.namespace, &target.obj.name);
    let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let patch = Patch::Merge(&patch);
    let written = match target.kind {
        Companion::Service => Api::<Service>::namespaced(client, namespace).patch_status(name, &pp, &patch).await.map(drop),
        Companion::Ingress => Api::<Ingress>::namespaced(client, namespace).patch_status(name, &pp, &patch).await.map(drop),
        Companion::HorizontalPodAutoscaler => {
            Api::<HorizontalPodAutoscaler>::namespaced(client, namespace).patch_status(name, &pp, &patch).await.map(drop)
        }
        Companion::PersistentVolumeClaim => {
            Api::<PersistentVolumeClaim>::namespaced(client, namespace).patch_status(name, &pp, &patch).await.map(drop)
        }
    };
    match written {
        Ok(()) => {
            tracing::debug!(status = %desired, "wrote the summed status");
            Ok(Next::Done)
        }
        // Changed since it was cached: its watch event brings the new version.
        Err(e) if is_conflict(&e) => Ok(Next::After(CONFLICT_RETRY)),
        Err(e) if is_not_found(&e) => Ok(Next::Done),
        Err(e) => Err(failed(format!("writing the status of {target}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement_api::{cluster_status_annotation, sync_state_label};

    /// A companion as JSON, built up field by field.
    #[derive(Clone)]
    struct Obj(Value);

    fn service() -> Obj {
        Obj(json!({"metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "generation": 1,
            "annotations": {CLUSTER_ANNOTATION: "demo"}}, "spec": {"type": "LoadBalancer"}}))
    }

    fn ingress() -> Obj {
        Obj(json!({"metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "generation": 1}, "spec": {}}))
    }

    fn hpa() -> Obj {
        Obj(json!({"metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "generation": 4}, "spec": {}}))
    }

    impl Obj {
        /// Assigned to `cluster`.
        fn on(self, cluster: &str) -> Self {
            self.label(&sync_state_label(cluster), SYNC_STATE_SYNC)
        }
        fn label(mut self, k: &str, v: &str) -> Self {
            self.0["metadata"]["labels"][k] = json!(v);
            self
        }
        /// `cluster` reports `status`.
        fn report(self, cluster: &str, status: Value) -> Self {
            self.raw_report(cluster, json!(status.to_string()))
        }
        fn raw_report(mut self, cluster: &str, value: Value) -> Self {
            self.0["metadata"]["annotations"][cluster_status_annotation(cluster)] = value;
            self
        }
        fn status(mut self, status: Value) -> Self {
            self.0["status"] = status;
            self
        }
        fn spec_type(mut self, ty: &str) -> Self {
            self.0["spec"]["type"] = json!(ty);
            self
        }
    }

    fn sum(kind: Companion, o: &Obj) -> Option<Value> {
        let summed = desired_status(kind, &o.0);
        assert!(summed.skipped.is_empty(), "skipped: {:?}", summed.skipped);
        summed.status
    }

    fn lb(ips: &[&str]) -> Value {
        json!({"loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}})
    }

    fn vips(ips: &[&str]) -> Value {
        json!({"loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip, "ipMode": "VIP"})).collect::<Vec<_>>()}})
    }

    #[test]
    fn service_addresses_are_the_union_in_cluster_order_without_duplicates() {
        let o = service()
            .on("west")
            .on("east")
            .report("west", lb(&["10.0.0.2", "10.0.0.1"]))
            .report("east", json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}, {"hostname": "east.lb.example"}]}}));
        assert_eq!(
            sum(Companion::Service, &o),
            Some(json!({"loadBalancer": {"ingress": [
                {"ip": "10.0.0.1", "ipMode": "VIP"}, {"hostname": "east.lb.example"}, {"ip": "10.0.0.2", "ipMode": "VIP"}
            ]}})),
            "east's entries first, west's own order after, 10.0.0.1 once"
        );
        // A report that carries ipMode already is the same address.
        let o = o.report("west", json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "ipMode": "VIP"}]}}));
        assert_eq!(sum(Companion::Service, &o).unwrap()["loadBalancer"]["ingress"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn only_clusters_the_object_is_assigned_to_now_count() {
        let both = service().on("east").on("west").report("east", lb(&["1.1.1.1"])).report("west", lb(&["2.2.2.2"]));
        assert_eq!(sum(Companion::Service, &both), Some(vips(&["1.1.1.1", "2.2.2.2"])));
        // west's Sync label goes (moved away, or lost): its report stays until its
        // syncer removes it, but no longer counts.
        let mut moved = both.clone();
        moved.0["metadata"]["labels"].as_object_mut().unwrap().remove(&sync_state_label("west"));
        assert_eq!(sum(Companion::Service, &moved), Some(vips(&["1.1.1.1"])));
        // A label that is not Sync does not assign.
        let pending = moved.label(&sync_state_label("west"), "Pending");
        assert_eq!(sum(Companion::Service, &pending), Some(vips(&["1.1.1.1"])));
        // A report of a cluster never assigned, on an object assigned nowhere.
        let stray = service().report("north", lb(&["3.3.3.3"])).label("app", "web");
        assert_eq!(sum(Companion::Service, &stray), None, "nothing to report and nothing shown: left alone");
    }

    #[test]
    fn no_address_left_is_a_pending_load_balancer() {
        // Shown before, no assigned cluster reports any more: the addresses go.
        let o = service().on("east").report("west", lb(&["2.2.2.2"])).status(vips(&["2.2.2.2"]));
        assert_eq!(sum(Companion::Service, &o), Some(json!({"loadBalancer": {}})));
        // Reported but empty (the cluster's load balancer is pending too).
        let o = service().on("east").report("east", json!({"loadBalancer": {}}));
        assert_eq!(sum(Companion::Service, &o), Some(json!({"loadBalancer": {}})));
        // Nobody reported and nothing is shown: nothing to do.
        assert_eq!(sum(Companion::Service, &service().on("east").status(json!({"loadBalancer": {}}))), None);
        assert_eq!(sum(Companion::Service, &service().on("east")), None);
    }

    #[test]
    fn only_load_balancer_services_are_summed_and_their_conditions_stay() {
        for ty in ["ClusterIP", "NodePort", "ExternalName"] {
            let o = service().spec_type(ty).on("east").report("east", lb(&["1.1.1.1"])).status(json!({"loadBalancer": {}}));
            assert_eq!(sum(Companion::Service, &o), None, "{ty}");
        }
        let condition =
            json!({"type": "Ready", "status": "True", "reason": "Test", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"});
        let o = service().on("east").report("east", lb(&["1.1.1.1"])).status(json!({"conditions": [condition.clone()]}));
        let status = sum(Companion::Service, &o).unwrap();
        assert_eq!(status["conditions"], json!([condition]));
        assert_eq!(status["loadBalancer"], vips(&["1.1.1.1"])["loadBalancer"]);
    }

    #[test]
    fn ingress_addresses_are_the_union_with_their_ports() {
        let ported = json!({"ip": "1.1.1.1", "ports": [{"port": 443, "protocol": "TCP"}]});
        let o = ingress()
            .on("east")
            .on("west")
            .report("west", json!({"loadBalancer": {"ingress": [{"hostname": "w.example"}, ported]}}))
            .report("east", json!({"loadBalancer": {"ingress": [ported, {"ip": "1.1.1.2"}]}}));
        assert_eq!(
            sum(Companion::Ingress, &o),
            Some(json!({"loadBalancer": {"ingress": [ported, {"ip": "1.1.1.2"}, {"hostname": "w.example"}]}})),
            "no ipMode on an Ingress"
        );
        let gone = ingress().on("east").status(json!({"loadBalancer": {"ingress": [{"ip": "1.1.1.2"}]}}));
        assert_eq!(sum(Companion::Ingress, &gone), Some(json!({"loadBalancer": {}})));
        assert_eq!(sum(Companion::Ingress, &ingress().on("east")), None);
    }

    #[test]
    fn unreadable_reports_are_skipped_with_the_reason_and_the_rest_counted() {
        let huge = format!(r#"{{"loadBalancer": {{"ingress": [{{"hostname": "{}"}}]}}}}"#, "a".repeat(MAX_REPORT_BYTES));
        let o = service()
            .on("a-not-json")
            .on("b-array")
            .on("c-huge")
            .on("d-wrong-type")
            .on("e-number")
            .on("f-good")
            .raw_report("a-not-json", json!("{\"loadBalancer\": "))
            .raw_report("b-array", json!("[1, 2]"))
            .raw_report("c-huge", json!(huge))
            .report("d-wrong-type", json!({"loadBalancer": {"ingress": "1.1.1.1"}}))
            .raw_report("e-number", json!(5))
            .report("f-good", json!({"loadBalancer": {"ingress": [{"ip": "9.9.9.9", "unknown": true}]}}));
        let summed = desired_status(Companion::Service, &o.0);
        assert_eq!(summed.status, Some(vips(&["9.9.9.9"])), "unknown fields go, as the API server drops them");
        let why: BTreeMap<&str, &str> = summed.skipped.iter().map(|s| (s.cluster.as_str(), s.why.as_str())).collect();
        assert_eq!(why.keys().copied().collect::<Vec<_>>(), ["a-not-json", "b-array", "c-huge", "d-wrong-type", "e-number"]);
        assert!(why["a-not-json"].starts_with("the report is not JSON"), "{why:?}");
        assert_eq!(why["b-array"], "the report is not a JSON object");
        assert!(why["c-huge"].contains("more than the 65536 read"), "{why:?}");
        assert!(why["d-wrong-type"].starts_with("the report is not a status of this kind"), "{why:?}");
        assert_eq!(why["e-number"], "the annotation's value is not a string");
        // The same garbage from every kind's point of view, never a panic. To an
        // autoscaler, d-wrong-type's report is one with only unknown fields.
        for (kind, unreadable) in [(Companion::Ingress, 5), (Companion::HorizontalPodAutoscaler, 4)] {
            assert_eq!(desired_status(kind, &o.0).skipped.len(), unreadable, "{kind:?}");
        }
        // An annotation key that names no cluster is not a report.
        let o = service().on("east").raw_report("", json!("garbage"));
        assert_eq!(desired_status(Companion::Service, &o.0), Summed::default());
    }

    fn condition(ty: &str, status: &str, message: &str, at: &str) -> Value {
        json!({"type": ty, "status": status, "reason": format!("{ty}{status}"), "message": message, "lastTransitionTime": at})
    }

    #[test]
    fn autoscaler_replicas_are_summed_and_the_latest_scale_taken() {
        let metrics = json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}]);
        let o = hpa()
            .on("east")
            .on("west")
            .report(
                "east",
                json!({"currentReplicas": 2, "desiredReplicas": 2, "lastScaleTime": "2025-01-01T10:00:00Z", "currentMetrics": []}),
            )
            .report(
                "west",
                json!({"currentReplicas": 3, "desiredReplicas": 4, "lastScaleTime": "2025-01-01T11:00:00Z", "currentMetrics": metrics,
                    "observedGeneration": 99}),
            )
            .status(json!({"desiredReplicas": 0, "observedGeneration": 2}));
        let status = sum(Companion::HorizontalPodAutoscaler, &o).unwrap();
        assert_eq!(status["currentReplicas"], 5);
        assert_eq!(status["desiredReplicas"], 6);
        assert_eq!(status["lastScaleTime"], "2025-01-01T11:00:00Z");
        assert_eq!(status["currentMetrics"], metrics, "the first cluster that has metrics");
        assert_eq!(status["observedGeneration"], 4, "every assigned cluster reported: the object's generation, not a cluster's");
        // A third cluster assigned but silent: the sums go on, the generation waits.
        let o = o.on("north");
        let status = sum(Companion::HorizontalPodAutoscaler, &o).unwrap();
        assert_eq!((status["currentReplicas"].clone(), status["observedGeneration"].clone()), (json!(5), json!(2)));
        // No report from an assigned cluster: the status is left as it is.
        let silent = hpa().on("east").report("west", json!({"currentReplicas": 3, "desiredReplicas": 3}));
        assert_eq!(sum(Companion::HorizontalPodAutoscaler, &silent), None);
        // Clusters that do not say currentReplicas do not make one up.
        let o = hpa().on("east").report("east", json!({"desiredReplicas": 1}));
        assert_eq!(sum(Companion::HorizontalPodAutoscaler, &o), Some(json!({"desiredReplicas": 1, "observedGeneration": 4})));
    }

    #[test]
    fn autoscaler_conditions_are_true_only_where_every_cluster_says_so() {
        let o = hpa()
            .on("east")
            .on("west")
            .report(
                "east",
                json!({"desiredReplicas": 1, "conditions": [
                    condition("AbleToScale", "True", "ready", "2025-01-01T10:00:00Z"),
                    condition("ScalingActive", "True", "ok", "2025-01-01T10:00:00Z"),
                ]}),
            )
            .report(
                "west",
                json!({"desiredReplicas": 1, "conditions": [
                    condition("ScalingActive", "False", "no metrics", "2025-01-01T09:00:00Z"),
                    condition("AbleToScale", "True", "also ready", "2025-01-01T12:00:00Z"),
                    condition("ScalingLimited", "Unknown", "", "2025-01-01T08:00:00Z"),
                ]}),
            );
        let status = sum(Companion::HorizontalPodAutoscaler, &o).unwrap();
        assert_eq!(
            status["conditions"],
            json!([
                // True everywhere: the first cluster's, since the last one turned True.
                condition("AbleToScale", "True", "ready", "2025-01-01T12:00:00Z"),
                condition("ScalingActive", "False", "west: no metrics", "2025-01-01T09:00:00Z"),
                // Only west says it: west's word, named.
                condition("ScalingLimited", "Unknown", "west", "2025-01-01T08:00:00Z"),
            ])
        );
    }

    #[test]
    fn a_write_is_a_guarded_merge_patch_only_when_the_sum_differs() {
        // Stored as the API server stores it: ipMode defaulted.
        let o = service().on("east").report("east", lb(&["1.1.1.1"])).status(vips(&["1.1.1.1"]));
        let desired = sum(Companion::Service, &o).unwrap();
        assert_eq!(status_patch(Companion::Service, &o.0, &desired), None, "nothing changed");
        // A second address.
        let o = o.on("west").report("west", lb(&["2.2.2.2"]));
        let desired = sum(Companion::Service, &o).unwrap();
        assert_eq!(
            status_patch(Companion::Service, &o.0, &desired),
            Some(json!({"status": vips(&["1.1.1.1", "2.2.2.2"]), "metadata": {"resourceVersion": "7"}}))
        );
        // Every address gone: `ingress` is taken out, not merged into.
        let o = service().on("east").status(vips(&["1.1.1.1"]));
        let desired = sum(Companion::Service, &o).unwrap();
        assert_eq!(
            status_patch(Companion::Service, &o.0, &desired),
            Some(json!({"status": {"loadBalancer": {"ingress": null}}, "metadata": {"resourceVersion": "7"}}))
        );
        // An autoscaler's fields no cluster reports any more go.
        let o = hpa().on("east").report("east", json!({"desiredReplicas": 2})).status(json!({"desiredReplicas": 2, "currentReplicas": 2,
            "lastScaleTime": "2025-01-01T10:00:00Z", "observedGeneration": 4}));
        let desired = sum(Companion::HorizontalPodAutoscaler, &o).unwrap();
        assert_eq!(
            status_patch(Companion::HorizontalPodAutoscaler, &o.0, &desired),
            Some(json!({"status": {"currentReplicas": null, "lastScaleTime": null}, "metadata": {"resourceVersion": "7"}}))
        );
    }

    #[test]
    fn merge_diff_takes_out_replaces_and_recurses() {
        let from = json!({"a": 1, "b": {"c": [1], "d": "x"}, "gone": true});
        let to = json!({"a": 1, "b": {"c": [2], "d": "x"}, "new": {"e": 1}});
        assert_eq!(merge_diff(&from, &to), json!({"gone": null, "b": {"c": [2]}, "new": {"e": 1}}));
        assert_eq!(merge_diff(&Value::Null, &to), to);
    }

    #[test]
    fn what_is_kept_of_a_watched_object_is_what_the_sums_read() {
        let full = service()
            .on("east")
            .label("app", "web")
            .report("east", lb(&["1.1.1.1"]))
            .raw_report("", json!("x"))
            .status(json!({"loadBalancer": {}}));
        let mut full = full.0;
        full["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!("{\"big\": true}");
        full["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update"}]);
        full["metadata"]["uid"] = json!("u");
        full["spec"]["ports"] = json!([{"port": 80}]);
        let seen: Seen = serde_json::from_value(full.clone()).unwrap();
        assert!(seen.concerned());
        let kept = serde_json::to_value(&seen).unwrap();
        assert_eq!(
            kept,
            json!({"metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "generation": 1,
                "labels": {sync_state_label("east"): "Sync"},
                "annotations": {CLUSTER_ANNOTATION: "demo", cluster_status_annotation("east"): lb(&["1.1.1.1"]).to_string()}},
                "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}})
        );
        assert_eq!(desired_status(Companion::Service, &kept), desired_status(Companion::Service, &full));
        assert_eq!(ObjKey::of(&seen.metadata, Workspace::Annotated), Some(ObjKey::new("demo", "default", "web")));
        // No report and no address: nothing to do for it.
        let quiet: Seen = serde_json::from_value(service().on("east").status(json!({"loadBalancer": {}})).0).unwrap();
        assert!(!quiet.concerned());
        let shown: Seen = serde_json::from_value(service().status(vips(&["1.1.1.1"])).0).unwrap();
        assert!(shown.concerned(), "an address to take away");
    }
}
