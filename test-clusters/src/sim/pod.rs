//! Facts about pods that several controllers share: ownership, activity, readiness,
//! availability and QoS class.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::quantity::Resources;

/// The uid of the object's controller (the owner reference with `controller: true`).
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true)).map(|r| r.uid.as_str())
}

/// An owner reference marking `owner` as the controller, as `metav1.NewControllerRef` builds it.
pub fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pod's phase, `Pending` when unset.
pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

/// Whether the pod has finished (`Succeeded` or `Failed`).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether a controller counts the pod: not finished and not being deleted
/// (`controller.IsPodActive`).
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// The pod condition of the given type.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// Whether the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// When the pod last turned Ready, if it is Ready.
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    condition(pod, "Ready").filter(|c| c.status == "True").and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0)
}

/// Whether the pod has been Ready for more than `min_ready_seconds` (`podutil.IsPodAvailable`:
/// with zero it is available as soon as it is Ready, otherwise strictly after the interval).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !is_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    match ready_since(pod) {
        Some(since) => since + SignedDuration::from_secs(i64::from(min_ready_seconds)) < now,
        None => false,
    }
}

/// When a Ready pod that is not yet available will become available.
pub fn available_at(pod: &Pod, min_ready_seconds: i32) -> Option<Timestamp> {
    if min_ready_seconds <= 0 {
        return None;
    }
    // One second past the interval: availability needs "strictly after", and the Ready
    // time has whole-second precision.
    ready_since(pod).map(|t| t + SignedDuration::from_secs(i64::from(min_ready_seconds) + 1))
}

/// When the first of `pods` that is Ready but not yet available becomes available
/// (minReadySeconds): the moment its controller's status needs another look.
pub fn next_available<'a>(pods: impl IntoIterator<Item = &'a Pod>, min_ready_seconds: i32, now: Timestamp) -> Option<Timestamp> {
    pods.into_iter()
        .filter(|p| is_ready(p) && !is_available(p, min_ready_seconds, now))
        .filter_map(|p| available_at(p, min_ready_seconds))
        .min()
}

/// The pod's effective resource request (see [`Resources::for_pod`]).
pub fn requests(pod: &Pod) -> Result<Resources, crate::quantity::QuantityError> {
    match &pod.spec {
        Some(spec) => Resources::for_pod(spec),
        None => Ok(Resources::new(0, 0, 1)),
    }
}

/// The QoS class the API server assigns ([`apimachinery::qos`]).
pub fn qos_class(spec: &PodSpec) -> &'static str {
    use apimachinery::qos::ContainerResources;
    fn pairs(list: Option<&BTreeMap<String, Quantity>>) -> Vec<(&str, &str)> {
        list.into_iter().flatten().map(|(k, q)| (k.as_str(), q.0.as_str())).collect()
    }
    apimachinery::qos::qos_class(spec.containers.iter().chain(spec.init_containers.iter().flatten()).map(|c| {
        let res = c.resources.as_ref();
        ContainerResources { requests: pairs(res.and_then(|r| r.requests.as_ref())), limits: pairs(res.and_then(|r| r.limits.as_ref())) }
    }))
}

/// A pod from a controller's template (`controller.GetPodFromTemplate`): the template's
/// labels, annotations and finalizers, `owner` (of `api_version` and `kind`) as
/// controller, `generateName` `<owner>-` and a name already filled in from `names`.
/// `taken` holds the pod names used in the namespace; the new one is added.
pub fn from_template(
    owner: &ObjectMeta,
    api_version: &str,
    kind: &str,
    template: Option<PodTemplateSpec>,
    names: &mut dyn super::NameSource,
    taken: &mut BTreeSet<String>,
) -> Pod {
    let prefix = format!("{}-", owner.name.as_deref().unwrap_or_default());
    let name = loop {
        let candidate = format!("{prefix}{}", names.suffix());
        if taken.insert(candidate.clone()) {
            break candidate;
        }
    };
    let template = template.unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let spec = template.spec.unwrap_or_default();
    let qos = qos_class(&spec).to_string();
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            generate_name: Some(prefix),
            namespace: owner.namespace.clone(),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            finalizers: template_meta.finalizers,
            owner_references: Some(vec![controller_ref(api_version, kind, owner)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: Some(PodStatus { phase: Some("Pending".into()), qos_class: Some(qos), ..Default::default() }),
    }
}

/// `namespace/name`, the key pods are tracked by.
pub fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or_default(), pod.metadata.name.as_deref().unwrap_or_default())
}
