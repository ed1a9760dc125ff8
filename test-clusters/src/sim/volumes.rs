//! The cluster's volume provisioner and binder: a claim of a StorageClass the cluster
//! has gets a volume of its own, as a CSI provisioner and the persistent-volume
//! controller would make and bind it.
//!
//! - A claim names its class (`spec.storageClassName`, or the beta annotation), or gets
//!   the cluster's default class (the one annotated
//!   `storageclass.kubernetes.io/is-default-class: "true"`). A claim whose class is
//!   `""` asks for no provisioning, and waits for a volume made by hand.
//! - The provisioner serves every StorageClass in the cluster, whatever its
//!   `provisioner` says: each is a simulated local disk. A class that does not exist
//!   leaves the claim Pending, with a `ProvisioningFailed` Warning Event.
//! - With `volumeBindingMode: WaitForFirstConsumer` (the default class's, as on kind)
//!   the volume is made once a pod that mounts the claim is bound to a node; with
//!   `Immediate`, at once.
//! - The volume `pvc-<claim uid>` has the claim's requested size and access modes, the
//!   class's reclaim policy and a `hostPath` under `/var/local-path-provisioner`; the
//!   claim is then Bound to it, with that capacity.
//! - A volume whose claim is gone is deleted (`Delete`) or `Released` (`Retain`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    PersistentVolumeStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};

/// The annotation that makes a StorageClass the cluster's default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The class every simulated cluster starts with, as kind's `standard`.
pub fn default_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some("standard".into()),
            annotations: Some(BTreeMap::from([(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())])),
            ..Default::default()
        },
        provisioner: "rancher.io/local-path".into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..Default::default()
    }
}

/// What the volume sync reads.
#[derive(Debug)]
pub struct VolumesInput<'a> {
    /// Every claim.
    pub claims: &'a [PersistentVolumeClaim],
    /// Every volume.
    pub volumes: &'a [PersistentVolume],
    /// Every class.
    pub classes: &'a [StorageClass],
    /// Every pod, to find the claims bound pods mount.
    pub pods: &'a [Pod],
}

/// Makes and binds volumes, and reclaims those whose claim is gone. `warned` holds the
/// claims already told their class is missing, so the Event is recorded once.
pub fn sync(input: &VolumesInput<'_>, warned: &mut BTreeSet<String>, rec: &mut Recorder) -> Vec<Action> {
    let mut out = Vec::new();
    let classes: BTreeMap<&str, &StorageClass> = input.classes.iter().filter_map(|c| Some((c.metadata.name.as_deref()?, c))).collect();
    let default = input
        .classes
        .iter()
        .find(|c| c.metadata.annotations.as_ref().and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION)).is_some_and(|v| v == "true"));
    let volumes: BTreeMap<&str, &PersistentVolume> = input.volumes.iter().filter_map(|v| Some((v.metadata.name.as_deref()?, v))).collect();
    // Claims mounted by a pod bound to a node: (namespace, claim).
    let consumed: BTreeSet<(&str, &str)> = input
        .pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()))
        .flat_map(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or_default();
            p.spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .filter_map(move |v| Some((ns, v.persistent_volume_claim.as_ref()?.claim_name.as_str())))
        })
        .collect();

    for claim in input.claims.iter().filter(|c| c.metadata.deletion_timestamp.is_none()) {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let spec = claim.spec.clone().unwrap_or_default();
        let bound_to = spec.volume_name.clone().filter(|v| !v.is_empty());
        if let Some(pv) = bound_to.as_deref().and_then(|v| volumes.get(v)) {
            // Bound in spec: the status says so too.
            if claim.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
                out.push(claim_status(claim, pv));
            }
            continue;
        }
        if bound_to.is_some() {
            continue;
        }
        let named = spec
            .storage_class_name
            .clone()
            .or_else(|| claim.metadata.annotations.as_ref().and_then(|a| a.get("volume.beta.kubernetes.io/storage-class")).cloned());
        let class = match named.as_deref() {
            Some("") => continue,
            Some(n) => classes.get(n).copied(),
            None => default,
        };
        let Some(class) = class else {
            if warned.insert(uid.clone()) {
                let message = match named {
                    Some(n) => format!("storageclass.storage.k8s.io \"{n}\" not found"),
                    None => "no storage class is set and the cluster has no default StorageClass".to_string(),
                };
                out.push(rec.warning(Kind::PersistentVolumeClaim, &claim.metadata, component::VOLUMES, "ProvisioningFailed", message));
            }
            continue;
        };
        let waits = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
        if waits && !consumed.contains(&(ns, name)) {
            continue;
        }
        warned.remove(&uid);
        let pv = new_volume(claim, class);
        let pv_name = pv.metadata.name.clone().unwrap_or_default();
        out.push(Action::Create(Object::PersistentVolume(Box::new(pv.clone()))));
        out.push(Action::Patch {
            target: ObjectRef::from_meta(Kind::PersistentVolumeClaim, &claim.metadata),
            patch: json!({
                "metadata": {"annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                    "volume.kubernetes.io/storage-provisioner": class.provisioner,
                }},
                "spec": {"volumeName": pv_name, "storageClassName": class.metadata.name},
            }),
        });
        out.push(claim_status(claim, &pv));
        out.push(rec.normal(
            Kind::PersistentVolumeClaim,
            &claim.metadata,
            component::VOLUMES,
            "ProvisioningSucceeded",
            format!("Successfully provisioned volume {pv_name}"),
        ));
    }

    // Volumes whose claim is gone.
    let claims: BTreeSet<(&str, &str)> = input
        .claims
        .iter()
        .map(|c| (c.metadata.namespace.as_deref().unwrap_or_default(), c.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    for pv in input.volumes {
        let spec = pv.spec.clone().unwrap_or_default();
        let Some(claim) = spec.claim_ref.as_ref() else { continue };
        let key = (claim.namespace.as_deref().unwrap_or_default(), claim.name.as_deref().unwrap_or_default());
        if claims.contains(&key) || pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete") {
            out.push(Action::Delete { target: ObjectRef::from_meta(Kind::PersistentVolume, &pv.metadata), grace_period_seconds: None });
        } else if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
            let mut released = pv.clone();
            released.status = Some(PersistentVolumeStatus { phase: Some("Released".into()), ..Default::default() });
            out.push(Action::UpdateStatus(Object::PersistentVolume(Box::new(released))));
        }
    }
    out
}

/// The volume made for `claim` of `class`.
fn new_volume(claim: &PersistentVolumeClaim, class: &StorageClass) -> PersistentVolume {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let ns = claim.metadata.namespace.clone().unwrap_or_default();
    let name = claim.metadata.name.clone().unwrap_or_default();
    let spec = claim.spec.clone().unwrap_or_default();
    let size = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage")).cloned();
    let pv_name = format!("pvc-{uid}");
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name.clone()),
            annotations: Some(BTreeMap::from([("pv.kubernetes.io/provisioned-by".to_string(), class.provisioner.clone())])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: size.map(|q| BTreeMap::from([("storage".to_string(), q)])),
            access_modes: spec.access_modes.clone(),
            persistent_volume_reclaim_policy: Some(class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into())),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: spec.volume_mode.clone().or_else(|| Some("Filesystem".into())),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                uid: Some(uid),
                ..Default::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: format!("/var/local-path-provisioner/{pv_name}_{ns}_{name}"),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus { phase: Some("Bound".into()), ..Default::default() }),
    }
}

/// The claim, Bound to `pv` with its capacity and access modes.
fn claim_status(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Action {
    let pv_spec = pv.spec.clone().unwrap_or_default();
    let mut bound = claim.clone();
    bound.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        capacity: pv_spec.capacity,
        access_modes: pv_spec.access_modes,
        ..Default::default()
    });
    Action::UpdateStatus(Object::PersistentVolumeClaim(Box::new(bound)))
}
