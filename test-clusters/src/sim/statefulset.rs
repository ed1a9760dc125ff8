//! The statefulset controller: pods with stable names and their own claims.
//!
//! As kube-controller-manager's statefulset controller does:
//! - pod `i` is `<sts>-<i>` (from `ordinals.start`), with the labels
//!   `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
//!   `controller-revision-hash`, `hostname` its name and `subdomain` the governing
//!   Service;
//! - for each `volumeClaimTemplates` entry it makes the claim `<claim>-<sts>-<i>` before
//!   the pod, and mounts it in place of the template's volume of that name; claims are
//!   kept when pods go (the `Retain` policy);
//! - `OrderedReady` creates the lowest missing pod once every lower one is Running and
//!   Ready, and removes the highest first, one at a time; `Parallel` creates and
//!   removes them all at once;
//! - a `RollingUpdate` replaces the pods of an old revision from the highest ordinal
//!   down to `partition`, one at a time and only while all are Ready; `OnDelete`
//!   replaces a pod only once someone deletes it;
//! - a pod that failed or finished is deleted and made again.
//!
//! The revision is `<sts>-<hash of the template>`; the status counts the pods at the
//! current and the update revision, ready and available ones, and the revisions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodStatus, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::{pod, template_hash};

/// The label that names a StatefulSet's pod.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label with a pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label with the revision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// At most this many pods are created for one StatefulSet in one pass.
const BURST: usize = 500;

/// What one StatefulSet sync reads.
#[derive(Debug)]
pub struct StatefulSetInput<'a> {
    /// The StatefulSet.
    pub set: &'a StatefulSet,
    /// The pods it controls.
    pub pods: Vec<&'a Pod>,
    /// The claims in its namespace, by name.
    pub claims: BTreeMap<&'a str, &'a PersistentVolumeClaim>,
}

/// What one StatefulSet sync decided.
#[derive(Debug, Default)]
pub struct StatefulSetSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// When a Ready pod becomes available (minReadySeconds).
    pub wake_at: Option<Timestamp>,
}

/// The revision name of the StatefulSet's current template.
pub fn update_revision(set: &StatefulSet) -> String {
    let template = set.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    format!("{}-{}", set.metadata.name.as_deref().unwrap_or_default(), template_hash::compute_hash(&template, None))
}

fn ordinal_of(set_name: &str, p: &Pod) -> Option<i32> {
    p.metadata.name.as_deref()?.strip_prefix(set_name)?.strip_prefix('-')?.parse().ok()
}

fn revision_of(p: &Pod) -> &str {
    p.metadata.labels.as_ref().and_then(|l| l.get(REVISION_LABEL)).map_or("", String::as_str)
}

/// Syncs one StatefulSet.
pub fn sync(input: &StatefulSetInput<'_>, now: Timestamp, rec: &mut Recorder) -> StatefulSetSync {
    let set = input.set;
    let mut out = StatefulSetSync::default();
    if set.metadata.deletion_timestamp.is_some() || set.metadata.uid.is_none() {
        return out;
    }
    let name = set.metadata.name.clone().unwrap_or_default();
    let spec = set.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0).max(0);
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let update = update_revision(set);
    let old_status = set.status.clone().unwrap_or_default();
    let current = old_status.current_revision.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| update.clone());

    let mut by_ordinal: BTreeMap<i32, &Pod> = BTreeMap::new();
    for p in &input.pods {
        if let Some(i) = ordinal_of(&name, p) {
            by_ordinal.insert(i, p);
        }
    }
    let healthy = |p: &Pod| pod::is_active(p) && pod::phase(p) == "Running" && pod::is_ready(p);
    let wanted = start..start + replicas;
    let mut event = |reason: &str, message: String, out: &mut StatefulSetSync| {
        out.actions.push(rec.normal(Kind::StatefulSet, &set.metadata, component::STATEFULSET, reason, message));
    };

    // Pods that ended are made again.
    for (i, p) in &by_ordinal {
        if pod::is_terminal(p) && p.metadata.deletion_timestamp.is_none() {
            out.actions.push(delete(p));
            event("SuccessfulDelete", format!("delete Pod {name}-{i} in StatefulSet {name} successful"), &mut out);
        }
    }
    let mut blocked = false;
    let mut created = 0;
    for i in wanted.clone() {
        // At most a burst of pods a pass, as the controller's; the rest come next pass.
        if blocked || created >= BURST {
            break;
        }
        match by_ordinal.get(&i) {
            None => {
                for claim in claims_for(set, i) {
                    let claim_name = claim.metadata.name.clone().unwrap_or_default();
                    if !input.claims.contains_key(claim_name.as_str()) {
                        out.actions.push(Action::Create(Object::PersistentVolumeClaim(Box::new(claim))));
                        event(
                            "SuccessfulCreate",
                            format!("create Claim {claim_name} Pod {name}-{i} in StatefulSet {name} success"),
                            &mut out,
                        );
                    }
                }
                out.actions.push(Action::Create(Object::Pod(Box::new(new_pod(set, i, &update)))));
                created += 1;
                event("SuccessfulCreate", format!("create Pod {name}-{i} in StatefulSet {name} successful"), &mut out);
                blocked = !parallel;
            }
            Some(p) if !parallel && !healthy(p) => blocked = true,
            Some(_) => {}
        }
    }
    // Scale down: the highest first.
    let extra: Vec<&&Pod> = by_ordinal.iter().filter(|(i, p)| !wanted.contains(i) && pod::is_active(p)).map(|(_, p)| p).rev().collect();
    let all_healthy = wanted.clone().all(|i| by_ordinal.get(&i).is_some_and(|p| healthy(p)));
    let terminating = input.pods.iter().any(|p| p.metadata.deletion_timestamp.is_some());
    for p in extra.iter().take(if parallel { extra.len() } else { 1 }) {
        if parallel || (all_healthy && !terminating) {
            out.actions.push(delete(p));
            event(
                "SuccessfulDelete",
                format!("delete Pod {} in StatefulSet {name} successful", p.metadata.name.as_deref().unwrap_or("")),
                &mut out,
            );
        }
    }
    // Rolling update: the highest pod of an old revision at or above the partition.
    let rolling = spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate";
    if rolling && extra.is_empty() && all_healthy && !terminating {
        let partition = spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.partition).unwrap_or(0);
        let stale =
            wanted.clone().rev().filter(|i| *i >= start + partition).find_map(|i| by_ordinal.get(&i).filter(|p| revision_of(p) != update));
        if let Some(p) = stale {
            out.actions.push(delete(p));
            event(
                "SuccessfulDelete",
                format!("delete Pod {} in StatefulSet {name} successful", p.metadata.name.as_deref().unwrap_or("")),
                &mut out,
            );
        }
    }

    // Status, of the pods seen at the start of the sync.
    let live: Vec<&Pod> = by_ordinal.iter().filter(|(i, _)| wanted.contains(i)).map(|(_, p)| *p).filter(|p| pod::is_active(p)).collect();
    let count = |f: &dyn Fn(&Pod) -> bool| live.iter().filter(|p| f(p)).count() as i32;
    let updated = count(&|p| revision_of(p) == update);
    let all_updated = updated == replicas && live.len() as i32 == replicas;
    let status = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas: live.len() as i32,
        ready_replicas: Some(count(&|p| pod::is_ready(p))),
        available_replicas: Some(count(&|p| pod::is_available(p, min_ready, now))),
        current_replicas: Some(if all_updated { updated } else { count(&|p| revision_of(p) == current) }),
        updated_replicas: Some(updated),
        current_revision: Some(if all_updated { update.clone() } else { current }),
        update_revision: Some(update),
        collision_count: Some(old_status.collision_count.unwrap_or(0)),
        conditions: old_status.conditions.clone(),
    };
    if status != old_status {
        let mut written = set.clone();
        written.status = Some(status);
        out.actions.push(Action::UpdateStatus(Object::StatefulSet(Box::new(written))));
    }
    out.wake_at = pod::next_available(live.iter().copied(), min_ready, now);
    out
}

fn delete(p: &Pod) -> Action {
    Action::Delete { target: ObjectRef::from_meta(Kind::Pod, &p.metadata), grace_period_seconds: None }
}

/// The claims pod `i` needs, from the claim templates: `<claim>-<sts>-<i>`, labelled
/// with the template's labels and the StatefulSet's selector.
pub fn claims_for(set: &StatefulSet, i: i32) -> Vec<PersistentVolumeClaim> {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let spec = set.spec.as_ref();
    let selector = spec.and_then(|s| s.selector.match_labels.clone()).unwrap_or_default();
    spec.and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let template_meta = t.metadata.clone();
            let mut labels = template_meta.labels.clone().unwrap_or_default();
            labels.extend(selector.clone());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(format!("{}-{name}-{i}", template_meta.name.as_deref().unwrap_or_default())),
                    namespace: set.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: template_meta.annotations,
                    ..Default::default()
                },
                spec: t.spec,
                status: None,
            }
        })
        .collect()
}

/// Pod `i` of the StatefulSet at `revision`.
fn new_pod(set: &StatefulSet, i: i32, revision: &str) -> Pod {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let spec = set.spec.clone().unwrap_or_default();
    let template_meta = spec.template.metadata.clone().unwrap_or_default();
    let mut pod_spec = spec.template.spec.clone().unwrap_or_default();
    let pod_name = format!("{name}-{i}");
    for claim in claims_for(set, i) {
        let template_name =
            claim.metadata.name.as_deref().unwrap_or_default().strip_suffix(&format!("-{name}-{i}")).unwrap_or_default().to_string();
        let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != template_name);
        volumes.push(Volume {
            name: template_name,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.metadata.name.unwrap_or_default(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    pod_spec.hostname = Some(pod_name.clone());
    pod_spec.subdomain = Some(spec.service_name.clone().unwrap_or_default()).filter(|s| !s.is_empty());
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), pod_name.clone());
    labels.insert(POD_INDEX_LABEL.into(), i.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let qos = pod::qos_class(&pod_spec).to_string();
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![pod::controller_ref("apps/v1", "StatefulSet", &set.metadata)]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: Some(PodStatus { phase: Some("Pending".into()), qos_class: Some(qos), ..Default::default() }),
    }
}
