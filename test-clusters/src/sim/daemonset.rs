//! The daemonset controller: a pod on every node that fits the template.
//!
//! As kube-controller-manager's daemonset controller does:
//! - a node should run the daemon when it matches the template's `nodeSelector` and
//!   required node affinity (cordoned nodes included: daemon pods tolerate
//!   `node.kubernetes.io/unschedulable`);
//! - each such node without a daemon pod gets one, pinned to it by a required node
//!   affinity on `metadata.name`, which kube-scheduler then binds if it fits; a pod on a
//!   node that should not run it is deleted;
//! - a `RollingUpdate` replaces pods of an old template, at most `maxUnavailable`
//!   (default 1) unavailable at a time; `OnDelete` only once someone deletes them;
//! - the status counts nodes: desired, current (scheduled), ready, updated,
//!   available, unavailable and misscheduled.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::names::NameSource;
use super::statefulset::REVISION_LABEL;
use super::{pod, scheduler, template_hash};

/// What one DaemonSet sync reads.
#[derive(Debug)]
pub struct DaemonSetInput<'a> {
    /// The DaemonSet.
    pub set: &'a DaemonSet,
    /// The pods it controls.
    pub pods: Vec<&'a Pod>,
    /// Every node.
    pub nodes: &'a [Node],
    /// Whether its earlier creates and deletes have all been seen.
    pub manage: bool,
}

/// What one DaemonSet sync decided.
#[derive(Debug, Default)]
pub struct DaemonSetSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// Names of the pods asked for.
    pub created: Vec<String>,
    /// Uids of the pods asked to be deleted.
    pub deleted: Vec<String>,
    /// When a Ready pod becomes available (minReadySeconds).
    pub wake_at: Option<Timestamp>,
}

/// The node a daemon pod is for: the one its node affinity pins it to, or where it runs.
fn node_of(p: &Pod) -> Option<&str> {
    let spec = p.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    let terms =
        &spec.affinity.as_ref()?.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref()?.node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name")?
        .values
        .as_ref()?
        .first()
        .map(String::as_str)
}

/// Syncs one DaemonSet. `taken` holds the pod names used in its namespace.
pub fn sync(
    input: &DaemonSetInput<'_>,
    now: Timestamp,
    names: &mut dyn NameSource,
    taken: &mut BTreeSet<String>,
    rec: &mut Recorder,
) -> DaemonSetSync {
    let set = input.set;
    let mut out = DaemonSetSync::default();
    if set.metadata.deletion_timestamp.is_some() || set.metadata.uid.is_none() {
        return out;
    }
    let spec = set.spec.clone().unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let revision = template_hash::compute_hash(&spec.template, None);
    let should_run: BTreeSet<&str> = input
        .nodes
        .iter()
        .filter(|n| scheduler::node_matches(spec.template.spec.as_ref(), n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let active: Vec<&Pod> = input.pods.iter().copied().filter(|p| pod::is_active(p)).collect();
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in &active {
        if let Some(n) = node_of(p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    if input.manage {
        for node in &should_run {
            match by_node.get(node).map(Vec::as_slice) {
                None | Some([]) => {
                    let p = new_pod(set, node, &revision, names, taken);
                    let pod_name = p.metadata.name.clone().unwrap_or_default();
                    out.created.push(pod_name.clone());
                    out.actions.push(Action::Create(Object::Pod(Box::new(p))));
                    out.actions.push(rec.normal(
                        Kind::DaemonSet,
                        &set.metadata,
                        component::DAEMONSET,
                        "SuccessfulCreate",
                        format!("Created pod: {pod_name}"),
                    ));
                }
                Some([_, extra @ ..]) => extra.iter().for_each(|p| delete(set, p, &mut out, rec)),
            }
        }
        for (node, pods) in &by_node {
            if !should_run.contains(node) {
                pods.iter().for_each(|p| delete(set, p, &mut out, rec));
            }
        }
        // Rolling update: old pods go while fewer than maxUnavailable are unavailable.
        let rolling = spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate";
        if rolling {
            let max = match spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.max_unavailable.clone()) {
                Some(IntOrString::Int(n)) => n.max(0) as usize,
                Some(IntOrString::String(pct)) => {
                    let pct: usize = pct.trim_end_matches('%').parse().unwrap_or(0);
                    (should_run.len() * pct / 100).max(1)
                }
                None => 1,
            };
            let unavailable = should_run
                .iter()
                .filter(|n| !by_node.get(*n).is_some_and(|ps| ps.iter().any(|p| pod::is_available(p, min_ready, now))))
                .count();
            let stale = active.iter().filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get(REVISION_LABEL)) != Some(&revision));
            for p in stale.take(max.saturating_sub(unavailable)) {
                delete(set, p, &mut out, rec);
            }
        }
    }

    let scheduled =
        |n: &&&str| by_node.get(**n).is_some_and(|ps| ps.iter().any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(**n)));
    let count =
        |f: &dyn Fn(&Pod) -> bool| should_run.iter().filter(|n| by_node.get(*n).is_some_and(|ps| ps.iter().any(|p| f(p)))).count() as i32;
    let desired = should_run.len() as i32;
    let available = count(&|p| pod::is_available(p, min_ready, now));
    let status = DaemonSetStatus {
        observed_generation: set.metadata.generation,
        desired_number_scheduled: desired,
        current_number_scheduled: should_run.iter().filter(scheduled).count() as i32,
        number_ready: count(&|p| pod::is_ready(p)),
        updated_number_scheduled: Some(count(&|p| p.metadata.labels.as_ref().and_then(|l| l.get(REVISION_LABEL)) == Some(&revision))),
        number_available: Some(available),
        number_unavailable: Some(desired - available).filter(|n| *n > 0),
        number_misscheduled: by_node.keys().filter(|n| !should_run.contains(*n)).count() as i32,
        collision_count: set.status.as_ref().and_then(|s| s.collision_count),
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    if set.status.as_ref() != Some(&status) {
        let mut written = set.clone();
        written.status = Some(status);
        out.actions.push(Action::UpdateStatus(Object::DaemonSet(Box::new(written))));
    }
    out.wake_at = pod::next_available(active.iter().copied(), min_ready, now);
    out
}

fn delete(set: &DaemonSet, p: &Pod, out: &mut DaemonSetSync, rec: &mut Recorder) {
    out.deleted.push(p.metadata.uid.clone().unwrap_or_default());
    out.actions.push(Action::Delete { target: ObjectRef::from_meta(Kind::Pod, &p.metadata), grace_period_seconds: None });
    let pod_name = p.metadata.name.clone().unwrap_or_default();
    out.actions.push(rec.normal(
        Kind::DaemonSet,
        &set.metadata,
        component::DAEMONSET,
        "SuccessfulDelete",
        format!("Deleted pod: {pod_name}"),
    ));
}

/// A daemon pod for `node`: the template's pod, pinned to the node by a required node
/// affinity on its name, tolerating a cordon, at `revision`.
fn new_pod(set: &DaemonSet, node: &str, revision: &str, names: &mut dyn NameSource, taken: &mut BTreeSet<String>) -> Pod {
    let mut template: PodTemplateSpec = set.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let meta = template.metadata.get_or_insert_with(Default::default);
    meta.labels.get_or_insert_with(BTreeMap::new).insert(REVISION_LABEL.into(), revision.into());
    let spec = template.spec.get_or_insert_with(Default::default);
    let pin = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        ..Default::default()
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    affinity.node_affinity.get_or_insert_with(NodeAffinity::default).required_during_scheduling_ignored_during_execution =
        Some(NodeSelector { node_selector_terms: vec![pin] });
    spec.tolerations.get_or_insert_with(Vec::new).push(Toleration {
        key: Some(scheduler::UNSCHEDULABLE_TAINT.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    });
    pod::from_template(&set.metadata, "apps/v1", "DaemonSet", Some(template), names, taken)
}
