//! kube-scheduler, reduced to what the simulated clusters need: bind each pending pod to a
//! node its requests fit on, or report why none does.
//!
//! Filters, in kube-scheduler's order, with its reason texts:
//! - NodeUnschedulable: a cordoned node → "node(s) were unschedulable";
//! - NodeAffinity: `spec.nodeSelector`, and the required node affinity's terms (label
//!   `matchExpressions`, and `matchFields` on `metadata.name`, which pins a DaemonSet's
//!   pod to its node) → "node(s) didn't match Pod's node affinity/selector";
//! - NodeResourcesFit: pod slots, then cpu, then memory → "Too many pods",
//!   "Insufficient cpu", "Insufficient memory" (every one that applies).
//!
//! A cordoned node takes only pods that tolerate `node.kubernetes.io/unschedulable` (a
//! DaemonSet's). Preferred node affinity, taints and other tolerations, pod
//! (anti-)affinity, topology spread constraints, host ports and volumes are ignored, and
//! nothing is preempted.
//!
//! When no node fits, the pod gets `PodScheduled=False` with reason `Unschedulable` and the
//! scheduler's FitError text, which (Kubernetes 1.32) reads for example
//! `0/3 nodes are available: 1 Insufficient cpu, 2 Too many pods. preemption: 0/3 nodes are
//! available: 3 No preemption victims found for incoming pod..` — the doubled period is
//! real: the preemption message is itself a FitError ending in "." and is then wrapped in
//! " %v.". Every pod here has the same priority, so preemption finds no victims on nodes that
//! failed on resources, and "is not helpful" on nodes that failed a hard filter.
//!
//! Among the nodes that fit, the pod goes to the one with the highest score, where the score
//! adds NodeResourcesFit's LeastAllocated score and NodeResourcesBalancedAllocation's (both
//! on cpu and memory, using the scheduler's non-zero default requests of 100m and 200Mi for
//! containers that request nothing). Ties go to the node running fewer pods of the same
//! controller, then to the first node by name (kube-scheduler picks among ties at random).
//! Pods are scheduled oldest first, then by namespace and name.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodSpec};

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::{k8s_time, nodes, pod};
use crate::quantity::Resources;

/// kube-scheduler's name; pods naming another scheduler are left alone.
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Default cpu request, for scoring only, of a container that requests none (millicores).
pub const DEFAULT_MILLI_CPU_REQUEST: u64 = 100;
/// Default memory request, for scoring only, of a container that requests none (bytes).
pub const DEFAULT_MEMORY_REQUEST: u64 = 200 << 20;

const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
const REASON_SELECTOR: &str = "node(s) didn't match Pod's node affinity/selector";
const REASON_TOO_MANY_PODS: &str = "Too many pods";
const REASON_CPU: &str = "Insufficient cpu";
const REASON_MEMORY: &str = "Insufficient memory";
const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// What one scheduling pass decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scheduled {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// `(pod key "namespace/name", node)` for every binding asked for.
    pub bindings: Vec<(String, String)>,
}

/// Why one node cannot take the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rejection {
    reasons: Vec<&'static str>,
    /// `UnschedulableAndUnresolvable`: preemption could not help.
    unresolvable: bool,
}

struct NodeState<'a> {
    node: &'a Node,
    name: &'a str,
    allocatable: Resources,
    requested: Resources,
    /// Requests with the scoring defaults for containers that request nothing.
    nonzero_requested: Resources,
    /// Pods per controller uid, to spread replicas on ties.
    per_owner: BTreeMap<String, usize>,
}

/// Schedules every pending pod in `pods` onto `nodes`.
///
/// `assumed` maps pods (by `namespace/name`) to the node an earlier pass bound them to,
/// for bindings the input does not show yet: those pods are not scheduled again and count
/// against their node.
pub fn schedule(nodes: &[Node], pods: &[Pod], assumed: &BTreeMap<String, String>, now: Timestamp, rec: &mut Recorder) -> Scheduled {
    let mut out = Scheduled::default();
    let mut states: Vec<NodeState<'_>> = nodes
        .iter()
        .map(|n| NodeState {
            node: n,
            name: n.metadata.name.as_deref().unwrap_or_default(),
            allocatable: nodes::allocatable(n),
            requested: Resources::ZERO,
            nonzero_requested: Resources::ZERO,
            per_owner: BTreeMap::new(),
        })
        .collect();
    states.sort_by(|a, b| a.name.cmp(b.name));

    let mut pending: Vec<&Pod> = Vec::new();
    for p in pods.iter().filter(|p| !pod::is_terminal(p)) {
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty());
        let node = bound.or_else(|| assumed.get(&pod::key(p)).map(String::as_str));
        match node {
            Some(node) => {
                if let Some(state) = states.iter_mut().find(|s| s.name == node) {
                    account(state, p);
                }
            }
            None if wants_default_scheduler(p) && p.metadata.deletion_timestamp.is_none() => pending.push(p),
            None => {}
        }
    }
    pending.sort_by(|a, b| {
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a).cmp(&created(b)).then_with(|| pod::key(a).cmp(&pod::key(b)))
    });

    for p in pending {
        let request = match pod::requests(p) {
            Ok(r) => r,
            Err(e) => {
                unschedulable(&mut out, p, "SchedulerError", e.to_string(), now, rec);
                continue;
            }
        };
        if states.is_empty() {
            unschedulable(&mut out, p, "Unschedulable", "no nodes available to schedule pods".into(), now, rec);
            continue;
        }
        let verdicts: Vec<Result<(), Rejection>> = states.iter().map(|s| filter(p, request, s)).collect();
        let best = verdicts.iter().enumerate().filter(|(_, v)| v.is_ok()).map(|(i, _)| i).max_by(|a, b| {
            let (sa, sb) = (&states[*a], &states[*b]);
            let owner = pod::controller_uid(&p.metadata).unwrap_or_default();
            score(p, sa)
                .cmp(&score(p, sb))
                .then_with(|| sb.per_owner.get(owner).cmp(&sa.per_owner.get(owner)))
                .then_with(|| sb.name.cmp(sa.name))
        });
        match best {
            Some(i) => {
                let node = states[i].name.to_string();
                account(&mut states[i], p);
                let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                let name = p.metadata.name.as_deref().unwrap_or_default();
                out.actions.push(Action::Bind { pod: ObjectRef::from_meta(Kind::Pod, &p.metadata), node: node.clone() });
                out.actions.push(rec.normal(
                    Kind::Pod,
                    &p.metadata,
                    component::SCHEDULER,
                    "Scheduled",
                    format!("Successfully assigned {ns}/{name} to {node}"),
                ));
                out.bindings.push((pod::key(p), node));
            }
            None => {
                let rejections: Vec<&Rejection> = verdicts.iter().filter_map(|v| v.as_ref().err()).collect();
                unschedulable(&mut out, p, "Unschedulable", fit_error(states.len(), &rejections), now, rec);
            }
        }
    }
    out
}

fn wants_default_scheduler(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).is_none_or(|n| n == SCHEDULER_NAME)
}

fn account(state: &mut NodeState<'_>, p: &Pod) {
    let request = pod::requests(p).unwrap_or(Resources::new(0, 0, 1));
    state.requested = state.requested.saturating_add(request);
    state.nonzero_requested = state.nonzero_requested.saturating_add(nonzero_requests(p));
    if let Some(owner) = pod::controller_uid(&p.metadata) {
        *state.per_owner.entry(owner.to_string()).or_default() += 1;
    }
}

/// Runs the filters on one node.
fn filter(p: &Pod, request: Resources, s: &NodeState<'_>) -> Result<(), Rejection> {
    let unresolvable = |reason| Err(Rejection { reasons: vec![reason], unresolvable: true });
    if nodes::is_unschedulable(s.node) && !tolerates_unschedulable(p) {
        return unresolvable(REASON_UNSCHEDULABLE);
    }
    if !node_matches(p.spec.as_ref(), s.node) {
        return unresolvable(REASON_SELECTOR);
    }
    // fitsRequest: the pod count first; cpu and memory only when the pod requests any.
    let mut reasons = Vec::new();
    if s.requested.pods + 1 > s.allocatable.pods {
        reasons.push(REASON_TOO_MANY_PODS);
    }
    if request.cpu_millis > 0 && request.cpu_millis > s.allocatable.cpu_millis.saturating_sub(s.requested.cpu_millis) {
        reasons.push(REASON_CPU);
    }
    if request.memory_bytes > 0 && request.memory_bytes > s.allocatable.memory_bytes.saturating_sub(s.requested.memory_bytes) {
        reasons.push(REASON_MEMORY);
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Rejection { reasons, unresolvable: false })
    }
}

/// The taint key of a cordoned node.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

fn tolerates_unschedulable(p: &Pod) -> bool {
    let tolerations = p.spec.as_ref().and_then(|s| s.tolerations.as_ref());
    tolerations
        .into_iter()
        .flatten()
        .any(|t| t.key.as_deref() == Some(UNSCHEDULABLE_TAINT) || (t.key.is_none() && t.operator.as_deref() == Some("Exists")))
}

/// Whether a pod of `spec` may go to `node`: its `nodeSelector`, and one of the terms
/// of its required node affinity, if it has any.
pub fn node_matches(spec: Option<&PodSpec>, node: &Node) -> bool {
    let labels = node.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let selector_ok = spec.and_then(|s| s.node_selector.as_ref()).is_none_or(|sel| sel.iter().all(|(k, v)| label(k) == Some(v.as_str())));
    let terms = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| &r.node_selector_terms);
    let name = node.metadata.name.as_deref();
    let matches = |op: &str, value: Option<&str>, values: &[String]| match op {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    };
    let term_ok = |t: &k8s_openapi::api::core::v1::NodeSelectorTerm| {
        let exprs =
            t.match_expressions.iter().flatten().all(|e| matches(&e.operator, label(&e.key), e.values.as_deref().unwrap_or_default()));
        let fields = t.match_fields.iter().flatten().all(|f| {
            let value = if f.key == "metadata.name" { name } else { None };
            matches(&f.operator, value, f.values.as_deref().unwrap_or_default())
        });
        exprs && fields
    };
    selector_ok && terms.is_none_or(|terms| terms.iter().any(term_ok))
}

/// The FitError text for a pod no node takes (`FitError.Error()` in
/// pkg/scheduler/framework/types.go, preemption's included).
fn fit_error(node_count: usize, rejections: &[&Rejection]) -> String {
    let mut filter_counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut preemption_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rejections {
        for reason in &r.reasons {
            *filter_counts.entry(reason).or_default() += 1;
        }
        *preemption_counts.entry(if r.unresolvable { NOT_HELPFUL } else { NO_VICTIMS }).or_default() += 1;
    }
    let preemption = format!("preemption: 0/{node_count} nodes are available: {}.", histogram(&preemption_counts));
    format!("0/{node_count} nodes are available: {}. {preemption}.", histogram(&filter_counts))
}

/// "N reason" entries sorted as strings (so "10 x" sorts before "2 y"), joined by ", ".
fn histogram(counts: &BTreeMap<&str, usize>) -> String {
    let mut entries: Vec<String> = counts.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
    entries.sort();
    entries.join(", ")
}

/// Records that the pod cannot be scheduled, unless the pod already says exactly that.
fn unschedulable(out: &mut Scheduled, p: &Pod, reason: &str, message: String, now: Timestamp, rec: &mut Recorder) {
    let current = pod::condition(p, "PodScheduled");
    if current.is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message.as_str()))
    {
        return;
    }
    let transition = match current {
        Some(c) if c.status == "False" => c.last_transition_time.clone(),
        _ => Some(k8s_time(now)),
    };
    let condition = PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: Some(message.clone()),
        last_transition_time: transition,
        last_probe_time: None,
        observed_generation: None,
    };
    let mut updated = p.clone();
    let status = updated.status.get_or_insert_with(Default::default);
    status.phase.get_or_insert_with(|| "Pending".into());
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == "PodScheduled") {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
    out.actions.push(Action::UpdateStatus(Object::Pod(Box::new(updated))));
    out.actions.push(rec.warning(Kind::Pod, &p.metadata, component::SCHEDULER, "FailedScheduling", message));
}

/// The pod's requests with 100m cpu and 200Mi memory for containers that request none
/// (`schedutil.GetNonzeroRequests`), as the scoring plugins use them.
fn nonzero_requests(p: &Pod) -> Resources {
    let Some(spec) = &p.spec else {
        return Resources::new(DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST, 1);
    };
    let mut spec: PodSpec = spec.clone();
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        let r = Resources::from_requests(&c.resources.clone().unwrap_or_default()).unwrap_or_default();
        let mut requests = c.resources.as_ref().and_then(|r| r.requests.clone()).unwrap_or_default();
        if r.cpu_millis == 0 {
            requests.insert("cpu".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!("{DEFAULT_MILLI_CPU_REQUEST}m")));
        }
        if r.memory_bytes == 0 {
            requests.insert("memory".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(DEFAULT_MEMORY_REQUEST.to_string()));
        }
        c.resources.get_or_insert_with(Default::default).requests = Some(requests);
    }
    Resources::for_pod(&spec).unwrap_or(Resources::new(DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST, 1))
}

/// LeastAllocated plus BalancedAllocation, each 0–100, as integers like kube-scheduler's.
fn score(p: &Pod, s: &NodeState<'_>) -> u64 {
    let want = s.nonzero_requested.saturating_add(nonzero_requests(p));
    let pairs = [(want.cpu_millis, s.allocatable.cpu_millis), (want.memory_bytes, s.allocatable.memory_bytes)];
    let least: u64 = pairs
        .iter()
        .map(|&(requested, capacity)| if capacity == 0 || requested > capacity { 0 } else { (capacity - requested) * 100 / capacity })
        .sum::<u64>()
        / 2;
    let fractions: Vec<f64> = pairs.iter().map(|&(r, c)| if c == 0 { 1.0 } else { (r as f64 / c as f64).min(1.0) }).collect();
    // With two resources the standard deviation is half the difference.
    let std = (fractions[0] - fractions[1]).abs() / 2.0;
    let balanced = ((1.0 - std) * 100.0) as u64;
    least + balanced
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::testutil::*;

    fn node(name: &str, cpu: &str, mem: &str, pods: u32) -> Node {
        Node::test(name).capacity(cpu, mem, pods).build()
    }

    fn run(nodes: &[Node], pods: &[Pod]) -> Scheduled {
        schedule(nodes, pods, &BTreeMap::new(), t(100), &mut Recorder::new(t(100)))
    }

    /// The PodScheduled condition of the first pod status the run writes.
    fn scheduled_condition(out: &Scheduled) -> PodCondition {
        out.actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateStatus(Object::Pod(p)) => pod::condition(p, "PodScheduled").cloned(),
                _ => None,
            })
            .expect("an unschedulable condition")
    }

    fn message(out: &Scheduled) -> String {
        scheduled_condition(out).message.expect("a message")
    }

    #[test]
    fn binds_a_fitting_pod_with_an_event() {
        let nodes = [node("n1", "2", "4Gi", 110)];
        let p = Pod::test("web-1").requests("500m", "1Gi").build();
        let out = run(&nodes, &[p]);
        assert_eq!(out.bindings, [("default/web-1".to_string(), "n1".to_string())]);
        assert!(matches!(&out.actions[0], Action::Bind { pod, node } if pod.name == "web-1" && node == "n1"));
        assert_eq!(event_messages(&out.actions), ["Successfully assigned default/web-1 to n1"]);
    }

    #[test]
    fn counts_reasons_per_node_in_the_fit_error() {
        let nodes = [node("a", "1", "8Gi", 110), node("b", "8", "8Gi", 1), node("c", "8", "8Gi", 1)];
        let busy_b = Pod::test("old-b").on_node("b").ready_at(t(0)).build();
        let busy_c = Pod::test("old-c").on_node("c").ready_at(t(0)).build();
        let p = Pod::test("big").requests("2", "1Gi").build();
        let out = run(&nodes, &[busy_b, busy_c, p]);
        assert!(out.bindings.is_empty());
        let msg = message(&out);
        assert_eq!(
            msg,
            "0/3 nodes are available: 1 Insufficient cpu, 2 Too many pods. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
        );
        assert_eq!(event_messages(&out.actions), [msg]);
        let cond = scheduled_condition(&out);
        assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("False", Some("Unschedulable")));
    }

    #[test]
    fn one_node_can_fail_several_ways() {
        let nodes = [node("a", "1", "1Gi", 110)];
        let out = run(&nodes, &[Pod::test("big").requests("2", "2Gi").build()]);
        assert_eq!(
            message(&out),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.."
        );
    }

    #[test]
    fn requests_add_up_on_a_node() {
        let nodes = [node("a", "1", "4Gi", 110)];
        let pods =
            [Pod::test("p1").requests("600m", "1Gi").created(t(1)).build(), Pod::test("p2").requests("600m", "1Gi").created(t(2)).build()];
        let out = run(&nodes, &pods);
        // The older pod gets the node; the second no longer fits next to it.
        assert_eq!(out.bindings, [("default/p1".to_string(), "a".to_string())]);
        assert!(message(&out).starts_with("0/1 nodes are available: 1 Insufficient cpu."));
    }

    #[test]
    fn node_selector_and_cordon_are_hard_filters() {
        let mut cordoned = Node::test("c").capacity("4", "4Gi", 110).label("disk", "ssd").build();
        cordoned.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        let nodes = [
            Node::test("a").capacity("4", "4Gi", 110).label("disk", "hdd").build(),
            Node::test("b").capacity("4", "4Gi", 110).label("disk", "ssd").build(),
            cordoned,
        ];
        let p = Pod::test("p").node_selector("disk", "ssd").build();
        let out = run(&nodes, &[p]);
        assert_eq!(out.bindings, [("default/p".to_string(), "b".to_string())]);

        let p = Pod::test("p").node_selector("disk", "nvme").build();
        let out = run(&nodes, &[p]);
        assert_eq!(
            message(&out),
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
        );
    }

    #[test]
    fn mixed_preemption_verdicts() {
        let nodes =
            [Node::test("a").capacity("1", "4Gi", 110).label("disk", "ssd").build(), Node::test("b").capacity("4", "4Gi", 110).build()];
        let p = Pod::test("p").requests("2", "1Gi").node_selector("disk", "ssd").build();
        assert_eq!(
            message(&run(&nodes, &[p])),
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.."
        );
    }

    #[test]
    fn histogram_sorts_as_strings() {
        let counts = BTreeMap::from([("Too many pods", 2), ("Insufficient cpu", 10)]);
        assert_eq!(histogram(&counts), "10 Insufficient cpu, 2 Too many pods");
    }

    #[test]
    fn no_nodes_at_all() {
        assert_eq!(message(&run(&[], &[Pod::test("p").build()])), "no nodes available to schedule pods");
    }

    #[test]
    fn an_unchanged_verdict_is_not_rewritten() {
        let nodes = [node("a", "1", "1Gi", 110)];
        let p = Pod::test("p").requests("2", "1Gi").build();
        let first = run(&nodes, &[p]);
        let updated = first
            .actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateStatus(Object::Pod(p)) => Some((**p).clone()),
                _ => None,
            })
            .unwrap();
        let second = run(&nodes, std::slice::from_ref(&updated));
        assert!(second.actions.is_empty(), "{:?}", second.actions);
        // A different verdict (the node filled up further) is written, keeping the transition time.
        let filler = Pod::test("filler").on_node("a").requests("0", "900Mi").ready_at(t(0)).build();
        let third = schedule(&nodes, &[updated, filler], &BTreeMap::new(), t(200), &mut Recorder::new(t(200)));
        let cond = scheduled_condition(&third);
        assert!(cond.message.unwrap().contains("1 Insufficient cpu, 1 Insufficient memory"));
        assert_eq!(cond.last_transition_time.unwrap().0, t(100));
    }

    #[test]
    fn spreads_replicas_over_equal_nodes_and_prefers_free_ones() {
        let nodes = [node("a", "4", "8Gi", 110), node("b", "4", "8Gi", 110), node("c", "4", "8Gi", 110)];
        let rs = k8s_openapi::api::apps::v1::ReplicaSet::test("web-x").build();
        let pods: Vec<Pod> =
            (0..3).map(|i| Pod::test(&format!("web-{i}")).owned_by(&rs).requests("1", "1Gi").created(t(i)).build()).collect();
        let out = run(&nodes, &pods);
        let used: Vec<&str> = out.bindings.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(used, ["a", "b", "c"]);

        // A busier node scores lower.
        let busy = Pod::test("busy").on_node("a").requests("3", "1Gi").ready_at(t(0)).build();
        let out = run(&nodes, &[busy, Pod::test("p").requests("1", "1Gi").build()]);
        assert_eq!(out.bindings[0].1, "b");
    }

    #[test]
    fn assumed_bindings_hold_capacity_and_are_not_redone() {
        let nodes = [node("a", "1", "4Gi", 110), node("b", "1", "4Gi", 110)];
        let p1 = Pod::test("p1").requests("1", "1Gi").created(t(1)).build();
        let p2 = Pod::test("p2").requests("1", "1Gi").created(t(2)).build();
        let assumed = BTreeMap::from([("default/p1".to_string(), "a".to_string())]);
        let out = schedule(&nodes, &[p1, p2], &assumed, t(5), &mut Recorder::new(t(5)));
        assert_eq!(out.bindings, [("default/p2".to_string(), "b".to_string())]);
    }

    #[test]
    fn other_schedulers_and_finished_pods_are_ignored() {
        let nodes = [node("a", "1", "1Gi", 1)];
        let mut other = Pod::test("other").build();
        other.spec.as_mut().unwrap().scheduler_name = Some("my-scheduler".into());
        let done = Pod::test("done").on_node("a").phase("Succeeded").build();
        let out = run(&nodes, &[other, done, Pod::test("p").build()]);
        // The finished pod does not hold the only pod slot.
        assert_eq!(out.bindings, [("default/p".to_string(), "a".to_string())]);
    }
}
