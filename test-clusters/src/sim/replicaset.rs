//! The replicaset controller (pkg/controller/replicaset/replica_set.go): create or delete
//! pods until a ReplicaSet has `spec.replicas` active pods, and report its status.
//!
//! Ownership is by controller reference only; pods are not adopted or released by selector.
//! All missing pods are created in one pass (Kubernetes creates them in growing batches
//! within one sync), up to the controller's burst of 500.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::names::NameSource;
use super::pod;

/// At most this many pods are created or deleted per sync (`BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// What the controller sees of one ReplicaSet.
#[derive(Debug, Clone)]
pub struct ReplicaSetInput<'a> {
    /// The ReplicaSet.
    pub replica_set: &'a ReplicaSet,
    /// Pods whose controller is the ReplicaSet, in any state.
    pub pods: Vec<&'a Pod>,
    /// Pods of every ReplicaSet with the same controller (its Deployment's pods), used to
    /// prefer deleting pods that share a node with their siblings. Empty means just `pods`.
    pub related_pods: Vec<&'a Pod>,
    /// Whether to create and delete pods. False while earlier creates or deletes have not
    /// shown up in the input yet (the controller's "expectations"); status is still reported.
    pub manage: bool,
}

/// What one sync decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaSetSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// Names of the pods asked for.
    pub created: Vec<String>,
    /// Uids of the pods asked to be deleted.
    pub deleted: Vec<String>,
    /// When a Ready pod becomes available (minReadySeconds), the status needs another look.
    pub wake_at: Option<Timestamp>,
}

/// Syncs one ReplicaSet. `taken` holds the pod names already used in the namespace; new
/// names are added to it.
pub fn sync(
    input: &ReplicaSetInput<'_>,
    now: Timestamp,
    names: &mut dyn NameSource,
    taken: &mut BTreeSet<String>,
    rec: &mut Recorder,
) -> ReplicaSetSync {
    let rs = input.replica_set;
    let mut out = ReplicaSetSync::default();
    let active: Vec<&Pod> = input.pods.iter().copied().filter(|p| pod::is_active(p)).collect();
    let min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);

    if input.manage && rs.metadata.deletion_timestamp.is_none() && rs.metadata.uid.is_some() {
        let want = replicas(rs).max(0) as usize;
        if active.len() < want {
            let count = (want - active.len()).min(BURST_REPLICAS);
            for _ in 0..count {
                let template = rs.spec.as_ref().and_then(|s| s.template.clone());
                let pod = pod::from_template(&rs.metadata, "apps/v1", "ReplicaSet", template, names, taken);
                let name = pod.metadata.name.clone().unwrap_or_default();
                out.created.push(name.clone());
                out.actions.push(Action::Create(Object::Pod(Box::new(pod))));
                out.actions.push(rec.normal(
                    Kind::ReplicaSet,
                    &rs.metadata,
                    component::REPLICASET,
                    "SuccessfulCreate",
                    format!("Created pod: {name}"),
                ));
            }
        } else if active.len() > want {
            let count = (active.len() - want).min(BURST_REPLICAS);
            let related = if input.related_pods.is_empty() { &input.pods } else { &input.related_pods };
            for victim in pods_to_delete(&active, related, count, now) {
                out.deleted.push(victim.metadata.uid.clone().unwrap_or_default());
                out.actions.push(Action::Delete { target: ObjectRef::from_meta(Kind::Pod, &victim.metadata), grace_period_seconds: None });
                let name = victim.metadata.name.clone().unwrap_or_default();
                out.actions.push(rec.normal(
                    Kind::ReplicaSet,
                    &rs.metadata,
                    component::REPLICASET,
                    "SuccessfulDelete",
                    format!("Deleted pod: {name}"),
                ));
            }
        }
    }

    // Status describes the pods seen at the start of the sync, as Kubernetes' does.
    let status = calculate_status(rs, &active, now);
    if normalized(&status) != normalized(&rs.status.clone().unwrap_or_default()) {
        let mut updated = rs.clone();
        updated.status = Some(status);
        out.actions.push(Action::UpdateStatus(Object::ReplicaSet(Box::new(updated))));
    }
    out.wake_at = pod::next_available(active.iter().copied(), min_ready, now);
    out
}

/// `spec.replicas`, defaulting to 1 as the API does.
pub fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// The status Kubernetes computes (`calculateStatus`): counts over the active pods.
pub fn calculate_status(rs: &ReplicaSet, active: &[&Pod], now: Timestamp) -> ReplicaSetStatus {
    let spec = rs.spec.as_ref();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let template_labels =
        spec.and_then(|s| s.template.as_ref()).and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let fully_labeled = active
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            template_labels.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .count();
    let ready = active.iter().filter(|p| pod::is_ready(p)).count();
    let available = active.iter().filter(|p| pod::is_available(p, min_ready, now)).count();
    let previous = rs.status.clone().unwrap_or_default();
    ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: nonzero(fully_labeled),
        ready_replicas: nonzero(ready),
        available_replicas: nonzero(available),
        observed_generation: rs.metadata.generation.filter(|g| *g != 0),
        conditions: previous.conditions.filter(|c| !c.is_empty()),
        terminating_replicas: None,
    }
}

/// Counts are `omitempty` in Kubernetes' JSON: zero is written as absent.
fn nonzero(n: usize) -> Option<i32> {
    (n > 0).then_some(n as i32)
}

/// The status with zero counts and empty lists made absent, for comparisons.
fn normalized(s: &ReplicaSetStatus) -> ReplicaSetStatus {
    let z = |v: Option<i32>| v.filter(|n| *n != 0);
    ReplicaSetStatus {
        replicas: s.replicas,
        fully_labeled_replicas: z(s.fully_labeled_replicas),
        ready_replicas: z(s.ready_replicas),
        available_replicas: z(s.available_replicas),
        observed_generation: s.observed_generation.filter(|g| *g != 0),
        conditions: s.conditions.clone().filter(|c| !c.is_empty()),
        terminating_replicas: z(s.terminating_replicas),
    }
}

/// The pods to delete, best candidates first (`getPodsToDelete`, ordered by
/// `controller.ActivePodsWithRanks`):
///
/// 1. not yet bound to a node before bound;
/// 2. `Pending` before `Unknown` before `Running`;
/// 3. not Ready before Ready;
/// 4. lower `controller.kubernetes.io/pod-deletion-cost` first;
/// 5. more sibling pods on the same node first (spreads what remains);
/// 6. Ready more recently first, comparing on a log2 scale of how long ago (LogarithmicScaleDown);
/// 7. more container restarts first;
/// 8. created more recently first, also on a log2 scale; then by uid.
pub fn pods_to_delete<'a>(active: &[&'a Pod], related: &[&Pod], count: usize, now: Timestamp) -> Vec<&'a Pod> {
    if count >= active.len() {
        return active.to_vec();
    }
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for p in related.iter().filter(|p| pod::is_active(p)) {
        *per_node.entry(node_name(p)).or_default() += 1;
    }
    let mut ranked: Vec<(&'a Pod, usize)> = active.iter().map(|p| (*p, per_node.get(node_name(p)).copied().unwrap_or(0))).collect();
    ranked.sort_by(|(a, ra), (b, rb)| deletion_order(a, *ra, b, *rb, now));
    ranked.into_iter().take(count).map(|(p, _)| p).collect()
}

fn node_name(p: &Pod) -> &str {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

fn phase_rank(p: &Pod) -> u8 {
    match pod::phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

fn deletion_cost(p: &Pod) -> i32 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn max_restarts(p: &Pod) -> i32 {
    p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).into_iter().flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

/// `floor(log2(now - t in ns))`, -1 when `t` is not in the past (`logarithmicRankDiff`).
fn log_rank(t: Timestamp, now: Timestamp) -> i64 {
    let d = now.as_nanosecond() - t.as_nanosecond();
    if d > 0 {
        i64::from(d.ilog2())
    } else {
        -1
    }
}

/// Orders two optional times "empty first, then later first" (`afterOrZero` with
/// LogarithmicScaleDown): equal log-scale ranks compare as equal here and fall to the uid.
fn newer_first(a: Option<Timestamp>, b: Option<Timestamp>, now: Timestamp) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    match (a, b) {
        (None, None) => None,
        (None, Some(_)) => Some(Ordering::Less),
        (Some(_), None) => Some(Ordering::Greater),
        (Some(a), Some(b)) if a == b => None,
        (Some(a), Some(b)) => Some(log_rank(a, now).cmp(&log_rank(b, now))),
    }
}

fn deletion_order(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize, now: Timestamp) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (na, nb) = (node_name(a), node_name(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() { Ordering::Less } else { Ordering::Greater };
    }
    let by_uid = || a.metadata.uid.cmp(&b.metadata.uid);
    phase_rank(a)
        .cmp(&phase_rank(b))
        .then_with(|| pod::is_ready(a).cmp(&pod::is_ready(b)))
        .then_with(|| deletion_cost(a).cmp(&deletion_cost(b)))
        .then_with(|| rank_b.cmp(&rank_a))
        .then_with(|| {
            if pod::is_ready(a) && pod::is_ready(b) {
                match newer_first(pod::ready_since(a), pod::ready_since(b), now) {
                    Some(Ordering::Equal) => return by_uid(),
                    Some(o) => return o,
                    None => {}
                }
            }
            Ordering::Equal
        })
        .then_with(|| max_restarts(b).cmp(&max_restarts(a)))
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            match newer_first(created(a), created(b), now) {
                Some(Ordering::Equal) => by_uid(),
                Some(o) => o,
                None => Ordering::Equal,
            }
        })
        // Not in Kubernetes (which leaves such ties unordered): makes the choice deterministic.
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// How long the controller waits for its own creates and deletes to show up in its input
/// before acting again anyway (`ExpectationsTimeout` in pkg/controller/controller_utils.go).
pub const EXPECTATIONS_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::names::SeededNames;
    use crate::sim::testutil::*;

    fn run(rs: &ReplicaSet, pods: &[Pod], now: Timestamp) -> ReplicaSetSync {
        let input = ReplicaSetInput { replica_set: rs, pods: pods.iter().collect(), related_pods: vec![], manage: true };
        let mut taken = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
        sync(&input, now, &mut SeededNames::new(1), &mut taken, &mut Recorder::new(now))
    }

    #[test]
    fn creates_missing_pods_from_the_template() {
        let rs = ReplicaSet::test("web-abc").replicas(3).build();
        let out = run(&rs, &[], t(0));
        let pods: Vec<&Pod> = out
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Create(Object::Pod(p)) => Some(&**p),
                _ => None,
            })
            .collect();
        assert_eq!(pods.len(), 3);
        assert_eq!(out.created.len(), 3);
        for p in &pods {
            let name = p.metadata.name.as_deref().unwrap();
            assert!(name.starts_with("web-abc-") && name.len() == "web-abc-".len() + 5, "{name}");
            assert_eq!(p.metadata.generate_name.as_deref(), Some("web-abc-"));
            assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "web");
            let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("ReplicaSet", "uid-web-abc", Some(true)));
            assert_eq!(owner.block_owner_deletion, Some(true));
        }
        let names: BTreeSet<_> = pods.iter().map(|p| p.metadata.name.clone()).collect();
        assert_eq!(names.len(), 3);
        assert_eq!(
            event_messages(&out.actions),
            [
                "Created pod: ".to_string() + pods[0].metadata.name.as_deref().unwrap(),
                "Created pod: ".to_string() + pods[1].metadata.name.as_deref().unwrap(),
                "Created pod: ".to_string() + pods[2].metadata.name.as_deref().unwrap()
            ]
        );
    }

    #[test]
    fn does_not_manage_without_expectations_met() {
        let rs = ReplicaSet::test("web-abc").replicas(3).build();
        let input = ReplicaSetInput { replica_set: &rs, pods: vec![], related_pods: vec![], manage: false };
        let out = sync(&input, t(0), &mut SeededNames::new(1), &mut BTreeSet::new(), &mut Recorder::new(t(0)));
        assert!(out.created.is_empty());
        assert!(!out.actions.iter().any(|a| matches!(a, Action::Create(Object::Pod(_)))));
    }

    #[test]
    fn status_counts_ready_and_available_pods() {
        let rs = ReplicaSet::test("web-abc").replicas(3).min_ready_seconds(10).generation(4).build();
        let pods = vec![
            Pod::test("a").owned_by(&rs).on_node("n1").ready_at(t(0)).build(),
            Pod::test("b").owned_by(&rs).on_node("n1").ready_at(t(55)).build(),
            Pod::test("c").owned_by(&rs).pending().build(),
            Pod::test("d").owned_by(&rs).on_node("n1").ready_at(t(0)).deleting().build(),
        ];
        let out = run(&rs, &pods, t(60));
        let status = status_of(&out.actions).unwrap();
        assert_eq!(status.replicas, 3);
        assert_eq!(status.fully_labeled_replicas, Some(3));
        assert_eq!(status.ready_replicas, Some(2));
        assert_eq!(status.available_replicas, Some(1));
        assert_eq!(status.observed_generation, Some(4));
        // b turns available strictly after 55s + 10s; ready times have 1s precision.
        assert_eq!(out.wake_at, Some(t(66)));
        // Nothing to create: the pod being deleted does not count, and c is still pending.
        assert!(out.created.is_empty());
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let rs = ReplicaSet::test("web-abc").replicas(1).build();
        let pods = vec![Pod::test("a").owned_by(&rs).on_node("n1").ready_at(t(0)).build()];
        let first = run(&rs, &pods, t(5));
        let mut rs2 = rs.clone();
        rs2.status = status_of(&first.actions);
        let second = run(&rs2, &pods, t(6));
        assert!(second.actions.is_empty(), "{:?}", second.actions);
    }

    #[test]
    fn scale_down_deletes_the_cheapest_pods_first() {
        let rs = ReplicaSet::test("web-abc").replicas(2).build();
        let now = t(10_000);
        let pods = vec![
            Pod::test("running-old").owned_by(&rs).on_node("n1").ready_at(t(100)).created(t(0)).build(),
            Pod::test("unscheduled").owned_by(&rs).pending().created(t(50)).build(),
            Pod::test("running-new").owned_by(&rs).on_node("n2").ready_at(t(9_000)).created(t(8_000)).build(),
            Pod::test("creating").owned_by(&rs).on_node("n2").container_creating().created(t(9_990)).build(),
            Pod::test("not-ready").owned_by(&rs).on_node("n1").running_not_ready().created(t(1)).build(),
        ];
        let order = |n: usize| {
            let active: Vec<&Pod> = pods.iter().collect();
            pods_to_delete(&active, &active, n, now).iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>()
        };
        // Unscheduled, then pending, then not ready, then the most recently ready.
        assert_eq!(order(4), ["unscheduled", "creating", "not-ready", "running-new"]);
        let out = run(&rs, &pods, now);
        let deleted: Vec<_> = out
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { target, .. } => Some(target.name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, ["unscheduled", "creating", "not-ready"]);
        assert_eq!(out.deleted, ["uid-unscheduled", "uid-creating", "uid-not-ready"]);
    }

    #[test]
    fn scale_down_prefers_doubled_up_nodes_and_deletion_cost() {
        let rs = ReplicaSet::test("web-abc").replicas(1).build();
        let now = t(10_000);
        let a = Pod::test("alone").owned_by(&rs).on_node("n1").ready_at(t(100)).created(t(0)).build();
        let b = Pod::test("crowded").owned_by(&rs).on_node("n2").ready_at(t(100)).created(t(0)).build();
        let c = Pod::test("crowded2").owned_by(&rs).on_node("n2").ready_at(t(100)).created(t(0)).build();
        let active = vec![&a, &b, &c];
        let victims = pods_to_delete(&active, &active, 1, now);
        assert_eq!(victims[0].metadata.name.as_deref(), Some("crowded"));

        let mut cheap = a.clone();
        cheap.metadata.annotations = Some(BTreeMap::from([("controller.kubernetes.io/pod-deletion-cost".to_string(), "-5".to_string())]));
        let active = vec![&cheap, &b, &c];
        assert_eq!(pods_to_delete(&active, &active, 1, now)[0].metadata.name.as_deref(), Some("alone"));
    }

    #[test]
    fn ready_times_compare_on_a_log_scale() {
        let now = t(100_000);
        // Ready 100s and 90s ago: different times in the same power-of-two bucket of
        // nanoseconds, so the uid decides. Without the log scale "y", Ready and created more
        // recently, would go first.
        let x = Pod::test("x").on_node("n").ready_at(t(100_000 - 100)).created(t(10)).build();
        let y = Pod::test("y").on_node("m").ready_at(t(100_000 - 90)).created(t(99_000)).build();
        assert_eq!(log_rank(t(100_000 - 100), now), log_rank(t(100_000 - 90), now));
        let active = vec![&y, &x];
        assert_eq!(pods_to_delete(&active, &[], 1, now)[0].metadata.name.as_deref(), Some("x"));
        // Ready 1000s ago is a bucket further: the more recently Ready pod goes first.
        let z = Pod::test("a-old").on_node("n").ready_at(t(100_000 - 1000)).created(t(10)).build();
        let active = vec![&z, &y];
        assert_eq!(pods_to_delete(&active, &[], 1, now)[0].metadata.name.as_deref(), Some("y"));
    }
}
