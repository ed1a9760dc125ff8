//! The kubelet of every simulated node: the status of the pods bound to it.
//!
//! A bound pod first shows what a real kubelet reports while the sandbox is being set up:
//! phase `Pending`, containers waiting with reason `ContainerCreating` (or `PodInitializing`
//! behind init containers), `PodReadyToStartContainers=False`, `Ready=False`
//! (`ContainersNotReady`), a `hostIP` and a `startTime`. That first status is always written,
//! however short the startup delay, so the `ContainerCreating` state is observable. Once
//! `startTime + startupDelay` has passed the pod is `Running`: every container running,
//! started and ready (there are no probes), init containers terminated with `Completed`,
//! all conditions `True`, and a pod IP.
//!
//! Condition transition times, `startTime` and `startedAt` are kept once written, so
//! recomputing an unchanged pod gives an identical status and no write. Pod IPs come from the
//! node's pod CIDR (`10.244.N.0/24`): the lowest free host address from `.2`, skipping the
//! addresses of the other pods on the node. Image references are normalized the way
//! containerd reports them (`nginx` → `docker.io/library/nginx:latest`), and image and
//! container IDs are SHA-256 digests of stable inputs.
//!
//! A pod being deleted is finished at once: the kubelet deletes it with a grace period of 0.
//!
//! What a running pod does next follows the two rules of the simulation ([`Course`], and
//! the cluster definition's documentation): a pod that does not restart forever runs for
//! its `sim.flotilla.io/run-seconds` and then `Succeeded`; a container of a failing image
//! (tag `broken`, or one the definition lists) crash-loops in a pod that restarts, and
//! fails a pod that does not.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP, Node, Pod,
    PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sha2::{Digest, Sha256};

use super::action::{Action, Kind, Object, ObjectRef};
use super::events::{component, Recorder};
use super::{k8s_time, nodes, pod};

/// What one pass of the kubelets decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletSync {
    /// Requests to make, in order.
    pub actions: Vec<Action>,
    /// The earliest moment a pod will start running.
    pub wake_at: Option<Timestamp>,
    /// Uids of the pods whose first status this pass writes; they started at `now`.
    pub started: Vec<String>,
}

/// Brings the status of every pod bound to one of `nodes` up to date. `started` maps pod
/// uids to the exact moment their first status was written.
pub fn sync(
    nodes: &[Node],
    pods: &[Pod],
    started: &BTreeMap<String, Timestamp>,
    startup_delay: Duration,
    failing_images: &[String],
    now: Timestamp,
    rec: &mut Recorder,
) -> KubeletSync {
    let mut out = KubeletSync::default();
    let by_name: BTreeMap<&str, &Node> = nodes.iter().filter_map(|n| Some((n.metadata.name.as_deref()?, n))).collect();
    let mut used_ips: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for p in pods {
        if let (Some(node), Some(ip)) = (bound_node(p), p.status.as_ref().and_then(|s| s.pod_ip.clone())) {
            used_ips.entry(node).or_default().insert(ip);
        }
    }
    let mut bound: Vec<&Pod> = pods.iter().filter(|p| bound_node(p).is_some_and(|n| by_name.contains_key(n))).collect();
    bound.sort_by_key(|p| pod::key(p));
    for p in bound {
        let node_name = bound_node(p).unwrap_or_default();
        let node = by_name[node_name];
        if p.metadata.deletion_timestamp.is_some() {
            let running = p.status.iter().flat_map(|s| s.container_statuses.iter().flatten());
            for c in running.filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some())) {
                let message = format!("Stopping container {}", c.name);
                out.actions.push(rec.normal_from(Kind::Pod, &p.metadata, component::KUBELET, node_name, "Killing", message));
            }
            out.actions.push(Action::Delete { target: ObjectRef::from_meta(Kind::Pod, &p.metadata), grace_period_seconds: Some(0) });
            continue;
        }
        if pod::is_terminal(p) {
            continue;
        }
        let ips = used_ips.entry(node_name).or_default();
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let anchor = started.get(&uid).copied();
        let status = desired_status(p, node, startup_delay, failing_images, now, anchor, |cidr| allocate_ip(cidr, ips));
        if p.status.as_ref().and_then(|s| s.start_time.as_ref()).is_none() {
            out.started.push(uid);
        }
        if p.status.as_ref() != Some(&status) {
            out.actions.extend(container_events(p, &status, node_name, rec));
            let mut updated = p.clone();
            updated.status = Some(status);
            out.actions.push(Action::UpdateStatus(Object::Pod(Box::new(updated))));
        }
        if let Some(at) = next_transition(p, startup_delay, failing_images, now, anchor) {
            out.wake_at = Some(out.wake_at.map_or(at, |w| w.min(at)));
        }
    }
    out
}

/// The Events a kubelet records about a pod's containers: `Pulled`, `Created` and
/// `Started` each time one starts (a crash-looping one at each restart), `BackOff` each
/// time a crash-looping container is restarted, and `Failed` when a pod that does not
/// restart fails.
fn container_events(p: &Pod, status: &PodStatus, node: &str, rec: &mut Recorder) -> Vec<Action> {
    let old = p.status.as_ref();
    let mut out = Vec::new();
    let pod_name = p.metadata.name.as_deref().unwrap_or_default();
    let ns = p.metadata.namespace.as_deref().unwrap_or_default();
    let uid = p.metadata.uid.as_deref().unwrap_or_default();
    for c in status.container_statuses.iter().flatten() {
        let before = find_status(old.and_then(|s| s.container_statuses.as_ref()), &c.name);
        if started_anew(before, c) {
            let image = p.spec.iter().flat_map(|s| &s.containers).find(|s| s.name == c.name).and_then(|s| s.image.as_deref());
            let image = image.unwrap_or_default();
            for (reason, message) in [
                ("Pulled", format!("Container image \"{image}\" already present on machine")),
                ("Created", format!("Created container: {}", c.name)),
                ("Started", format!("Started container {}", c.name)),
            ] {
                out.push(rec.normal_from(Kind::Pod, &p.metadata, component::KUBELET, node, reason, message));
            }
        }
        let looping = c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff");
        let was_looping = before.and_then(|b| b.state.as_ref()?.waiting.as_ref()?.reason.as_deref()) == Some("CrashLoopBackOff");
        if looping && (!was_looping || before.is_some_and(|b| b.restart_count != c.restart_count)) {
            let message = format!("Back-off restarting failed container {} in pod {pod_name}_{ns}({uid})", c.name);
            out.push(rec.warning_from(Kind::Pod, &p.metadata, component::KUBELET, node, "BackOff", message));
        }
    }
    let failed_now = status.phase.as_deref() == Some("Failed") && old.and_then(|s| s.phase.as_deref()) != Some("Failed");
    if failed_now {
        let message = "Error: the container exited with code 1 (its image is one the cluster fails)".to_string();
        out.push(rec.warning_from(Kind::Pod, &p.metadata, component::KUBELET, node, "Failed", message));
    }
    out
}

/// Whether a container ran a new instance since `before`: it runs or has run where it
/// had not, or it was restarted.
fn started_anew(before: Option<&ContainerStatus>, now: &ContainerStatus) -> bool {
    let ran = |c: &ContainerStatus| {
        c.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || c.last_state.as_ref().is_some_and(|s| s.terminated.is_some())
    };
    match before {
        None => ran(now),
        Some(b) => (ran(now) && !ran(b)) || now.restart_count > b.restart_count,
    }
}

fn bound_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

/// The next moment the pod's status changes by itself, if it has started (has a
/// `startTime`): when it turns Running, when a pod that runs to completion is done, or
/// when a crash-looping container restarts. `started` is the exact start when known. A
/// pod without a `startTime` changes on the next sync, which writes it.
pub fn next_transition(
    pod: &Pod,
    startup_delay: Duration,
    failing_images: &[String],
    now: Timestamp,
    started: Option<Timestamp>,
) -> Option<Timestamp> {
    let status = pod.status.as_ref()?;
    let course = Course::of(pod, failing_images);
    let start = exact_start(started, status.start_time.as_ref()?.0);
    let running_at = start + signed(startup_delay);
    let at = if status.phase.as_deref() != Some("Running") {
        running_at
    } else {
        match course {
            Course::RunsForever | Course::Fails => return None,
            Course::RunsFor(d) => running_at + d,
            Course::CrashLoops => running_at + crash_loop(now.duration_since(running_at)).1,
        }
    };
    Some(at.max(now))
}

/// What a pod's containers do once they run, by the simulation's two rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Course {
    /// They keep running (a pod that restarts, with no failing image).
    RunsForever,
    /// They exit 0 after this long (a pod that does not restart: a Job's).
    RunsFor(SignedDuration),
    /// A failing image's container exits 1 and is restarted on the kubelet's back-off.
    CrashLoops,
    /// A failing image's container exits 1 and the pod, which does not restart, fails.
    Fails,
}

/// The annotation that says how long a pod that does not restart runs.
pub const RUN_SECONDS_ANNOTATION: &str = "sim.flotilla.io/run-seconds";
/// How long such a pod runs without the annotation.
pub const DEFAULT_RUN_SECONDS: i64 = 2;

impl Course {
    /// The course of `pod`, where `failing_images` fail beside any image tagged `broken`.
    pub fn of(pod: &Pod, failing_images: &[String]) -> Course {
        let spec = pod.spec.as_ref();
        let restarts = spec.and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always") == "Always";
        let failing =
            spec.is_some_and(|s| s.containers.iter().any(|c| image_fails(c.image.as_deref().unwrap_or_default(), failing_images)));
        match (restarts, failing) {
            (true, false) => Course::RunsForever,
            (true, true) => Course::CrashLoops,
            (false, true) => Course::Fails,
            (false, false) => {
                let secs = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(RUN_SECONDS_ANNOTATION))
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .filter(|s| *s >= 0)
                    .unwrap_or(DEFAULT_RUN_SECONDS);
                Course::RunsFor(SignedDuration::from_secs(secs))
            }
        }
    }
}

/// Whether a container of `image` never runs: its tag is `broken`, or the cluster's
/// definition lists it (compared as containerd names images).
pub fn image_fails(image: &str, failing_images: &[String]) -> bool {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let tag = name.rsplit('/').next().and_then(|last| last.rsplit_once(':')).map(|(_, t)| t);
    tag == Some("broken") || failing_images.iter().any(|f| normalize_image(f) == normalize_image(image))
}

/// The kubelet's restart back-off for a container that keeps failing: 10 s, doubling,
/// at most 5 min. For a container that first failed `elapsed` ago: how many times it
/// has been restarted, and when (from its first failure) the next restart comes.
pub fn crash_loop(elapsed: SignedDuration) -> (i32, SignedDuration) {
    let (mut restarts, mut at, mut delay) = (0i64, 0i64, 10i64);
    let elapsed = elapsed.as_secs();
    // The doubling delays first (10, 20, 40, 80, 160), then the cap: a count, not a walk,
    // however long the container has been failing.
    while delay < 300 {
        if at + delay > elapsed {
            return (restarts as i32, SignedDuration::from_secs(at + delay));
        }
        (restarts, at, delay) = (restarts + 1, at + delay, delay * 2);
    }
    let capped = (elapsed - at).max(0) / 300;
    let (restarts, at) = (restarts + capped, at + capped * 300);
    (i32::try_from(restarts).unwrap_or(i32::MAX), SignedDuration::from_secs(at + 300))
}

/// The back-off a container waits after its `restarts`th restart.
fn back_off(restarts: i32) -> i64 {
    (10i64 << restarts.clamp(0, 5)).min(300)
}

/// The remembered start moment if it agrees with the stored `startTime` (same second), else
/// `startTime`: a status written in a later pass than remembered wins.
fn exact_start(remembered: Option<Timestamp>, start_time: Timestamp) -> Timestamp {
    remembered.filter(|r| r.as_second() == start_time.as_second()).unwrap_or(start_time)
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

/// The status the kubelet reports for a pod bound to `node` at `now`. `started` is the
/// exact moment the pod's first status was written, if known (else its `startTime`).
/// `allocate_ip` gets the node's pod CIDR and returns a free address; it is called only when
/// the pod starts running without an IP.
pub fn desired_status(
    pod: &Pod,
    node: &Node,
    startup_delay: Duration,
    failing_images: &[String],
    now: Timestamp,
    started: Option<Timestamp>,
    allocate_ip: impl FnOnce(&str) -> String,
) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let start = old.start_time.clone().unwrap_or_else(|| k8s_time(now));
    let anchor = exact_start(started, start.0);
    // The first status is always ContainerCreating, however short the delay.
    let running_at = anchor + signed(startup_delay);
    let running = old.start_time.is_some() && now >= running_at;
    let course = Course::of(pod, failing_images);
    // How a running pod ends, if it has: Succeeded or Failed, with its containers' exit.
    let ended = match course {
        _ if !running => None,
        Course::RunsFor(d) if now >= running_at + d => Some(("Succeeded", 0, "Completed", "PodCompleted")),
        Course::Fails => Some(("Failed", 1, "Error", "PodFailed")),
        _ => None,
    };
    let host_ip = nodes::internal_ip(node).unwrap_or_default().to_string();

    let init: Vec<&Container> = spec.init_containers.iter().flatten().collect();
    let regular_init: Vec<&str> = init.iter().filter(|c| !is_sidecar(c)).map(|c| c.name.as_str()).collect();
    let init_statuses: Vec<ContainerStatus> = init
        .iter()
        .map(|c| {
            let previous = find_status(old.init_container_statuses.as_ref(), &c.name);
            match (running, is_sidecar(c)) {
                (false, _) => waiting(c, "PodInitializing"),
                (true, true) => running_status(pod, c, previous, now),
                (true, false) => completed(pod, c, previous, now),
            }
        })
        .collect();
    let container_statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| {
            let previous = find_status(old.container_statuses.as_ref(), &c.name);
            let fails = image_fails(c.image.as_deref().unwrap_or_default(), failing_images);
            if let Some((_, code, reason, _)) = ended {
                terminated(pod, c, previous, code, reason, now)
            } else if running && fails {
                crash_looping(pod, c, now.duration_since(running_at), running_at)
            } else if running {
                running_status(pod, c, previous, now)
            } else {
                waiting(c, if regular_init.is_empty() { "ContainerCreating" } else { "PodInitializing" })
            }
        })
        .collect();

    // Ready: every container running and ready. An ended pod is not Ready, for the
    // reason the kubelet gives (PodCompleted, PodFailed).
    let not_ready: Vec<&str> =
        spec.containers.iter().zip(&container_statuses).filter(|(_, st)| !st.ready || !running).map(|(c, _)| c.name.as_str()).collect();
    let ready = running && not_ready.is_empty() && ended.is_none();
    let unready = format!("containers with unready status: [{}]", not_ready.join(" "));
    let (unready_reason, unready_message) = match ended {
        Some((_, _, _, reason)) => (reason, None),
        None => ("ContainersNotReady", Some(unready)),
    };
    let mut conditions = vec![
        condition(&old, "PodReadyToStartContainers", running && ended.is_none(), None, None, now),
        if running || regular_init.is_empty() {
            condition(&old, "Initialized", true, None, None, now)
        } else {
            let msg = format!("containers with incomplete status: [{}]", regular_init.join(" "));
            condition(&old, "Initialized", false, Some("ContainersNotInitialized"), Some(msg), now)
        },
        if ready {
            condition(&old, "Ready", true, None, None, now)
        } else {
            condition(&old, "Ready", false, Some(unready_reason), unready_message.clone(), now)
        },
        if ready {
            condition(&old, "ContainersReady", true, None, None, now)
        } else {
            condition(&old, "ContainersReady", false, Some(unready_reason), unready_message, now)
        },
        // Binding set PodScheduled=True; the kubelet reports it too.
        condition(&old, "PodScheduled", true, None, None, now),
    ];
    // Keep conditions the kubelet does not own (readiness gates, DisruptionTarget, ...).
    const OWNED: [&str; 5] = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];
    conditions.extend(old.conditions.iter().flatten().filter(|c| !OWNED.contains(&c.type_.as_str())).cloned());

    let pod_ip = if running {
        Some(old.pod_ip.clone().unwrap_or_else(|| {
            let cidr = node.spec.as_ref().and_then(|s| s.pod_cidr.clone()).unwrap_or_else(|| "10.244.0.0/24".to_string());
            allocate_ip(&cidr)
        }))
    } else {
        None
    };
    PodStatus {
        phase: Some(
            match ended {
                Some((phase, ..)) => phase,
                None if running => "Running",
                None => "Pending",
            }
            .to_string(),
        ),
        conditions: Some(conditions),
        host_ip: Some(host_ip.clone()),
        host_ips: Some(vec![HostIP { ip: host_ip }]),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: Some(start),
        qos_class: Some(pod::qos_class(&spec).to_string()),
        container_statuses: Some(container_statuses),
        init_container_statuses: Some(init_statuses).filter(|s| !s.is_empty()),
        ..Default::default()
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn find_status<'a>(statuses: Option<&'a Vec<ContainerStatus>>, name: &str) -> Option<&'a ContainerStatus> {
    statuses?.iter().find(|s| s.name == name)
}

/// A condition, keeping the old transition time when the status has not changed.
fn condition(old: &PodStatus, type_: &str, ok: bool, reason: Option<&str>, message: Option<String>, now: Timestamp) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = old.conditions.iter().flatten().find(|c| c.type_ == type_);
    let transition = match previous {
        Some(c) if c.status == status && c.last_transition_time.is_some() => c.last_transition_time.clone(),
        _ => Some(k8s_time(now)),
    };
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: transition,
        last_probe_time: None,
        observed_generation: None,
    }
}

fn waiting(c: &Container, reason: &str) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        started: Some(false),
        restart_count: 0,
        last_state: Some(ContainerState::default()),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some(reason.to_string()), message: None }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A time kept from the previous status, or `now`.
fn kept(previous: Option<&Time>, now: Timestamp) -> Time {
    previous.cloned().unwrap_or_else(|| k8s_time(now))
}

fn running_status(pod: &Pod, c: &Container, previous: Option<&ContainerStatus>, now: Timestamp) -> ContainerStatus {
    let started_at = previous.and_then(|s| s.state.as_ref()?.running.as_ref()?.started_at.as_ref());
    ContainerStatus {
        state: Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(kept(started_at, now)) }),
            ..Default::default()
        }),
        ready: true,
        started: Some(true),
        ..started(pod, c)
    }
}

fn completed(pod: &Pod, c: &Container, previous: Option<&ContainerStatus>, now: Timestamp) -> ContainerStatus {
    let previous = previous.and_then(|s| s.state.as_ref()?.terminated.as_ref());
    let base = started(pod, c);
    ContainerStatus {
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: base.container_id.clone(),
                exit_code: 0,
                reason: Some("Completed".to_string()),
                started_at: Some(kept(previous.and_then(|t| t.started_at.as_ref()), now)),
                finished_at: Some(kept(previous.and_then(|t| t.finished_at.as_ref()), now)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ready: true,
        started: Some(false),
        ..base
    }
}

/// A container that exited with `code` and is not restarted: its pod has ended.
fn terminated(pod: &Pod, c: &Container, previous: Option<&ContainerStatus>, code: i32, reason: &str, now: Timestamp) -> ContainerStatus {
    let state = previous.and_then(|s| s.state.as_ref());
    let was = state.and_then(|s| s.terminated.as_ref());
    let started_at = was.and_then(|t| t.started_at.as_ref()).or_else(|| state?.running.as_ref()?.started_at.as_ref());
    let base = started(pod, c);
    ContainerStatus {
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: base.container_id.clone(),
                exit_code: code,
                reason: Some(reason.to_string()),
                started_at: Some(kept(started_at, now)),
                finished_at: Some(kept(was.and_then(|t| t.finished_at.as_ref()), now)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ready: false,
        started: Some(false),
        ..base
    }
}

/// A container of a failing image in a pod that restarts, `elapsed` after it first
/// failed (at `first`): waiting in `CrashLoopBackOff`, with its restarts so far and
/// the last one's exit in `lastState`. Every field is a function of `elapsed`'s
/// restart count, so a status recomputed between restarts is unchanged.
fn crash_looping(pod: &Pod, c: &Container, elapsed: SignedDuration, first: Timestamp) -> ContainerStatus {
    let (restarts, next) = crash_loop(elapsed);
    // The last restart was one back-off before the next.
    let last_start = first + next - SignedDuration::from_secs(back_off(restarts));
    let base = started(pod, c);
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let message = format!(
        "back-off {}s restarting failed container={} pod={pod_name}_{}({})",
        back_off(restarts),
        c.name,
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    );
    ContainerStatus {
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some("CrashLoopBackOff".into()), message: Some(message) }),
            ..Default::default()
        }),
        last_state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: base.container_id.clone(),
                exit_code: 1,
                reason: Some("Error".into()),
                started_at: Some(k8s_time(last_start)),
                finished_at: Some(k8s_time(last_start)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ready: false,
        started: Some(false),
        restart_count: restarts,
        ..base
    }
}

/// The fields of a container that has been created: resolved image, image and container IDs.
fn started(pod: &Pod, c: &Container) -> ContainerStatus {
    let image = normalize_image(c.image.as_deref().unwrap_or_default());
    let repo = image.rsplit_once('@').map(|(r, _)| r).unwrap_or_else(|| strip_tag(&image));
    let image_digest = hex::encode(Sha256::digest(image.as_bytes()));
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let container_digest = hex::encode(Sha256::digest(format!("{uid}/{}", c.name).as_bytes()));
    ContainerStatus {
        name: c.name.clone(),
        image: image.clone(),
        image_id: format!("{repo}@sha256:{image_digest}"),
        container_id: Some(format!("containerd://{container_digest}")),
        restart_count: 0,
        last_state: Some(ContainerState::default()),
        ..Default::default()
    }
}

fn strip_tag(image: &str) -> &str {
    // A ':' after the last '/' starts the tag; one before it belongs to a registry port.
    let last_slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[last_slash..].rfind(':') {
        Some(i) => &image[..last_slash + i],
        None => image,
    }
}

/// The image reference as containerd reports it: Docker Hub names get `docker.io/` (and
/// `library/` for official images), and a reference without tag or digest gets `:latest`.
pub fn normalize_image(image: &str) -> String {
    if image.is_empty() {
        return String::new();
    }
    let (first, rest) = image.split_once('/').unwrap_or(("", image));
    let has_registry = !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_registry {
        image.to_string()
    } else if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else {
        format!("docker.io/{image}")
    };
    if !full.contains('@') && strip_tag(&full) == full {
        full.push_str(":latest");
    }
    full
}

/// The lowest host address from `.2` in an IPv4 `/24` CIDR that is not in `used`; recorded in `used`.
pub fn allocate_ip(cidr: &str, used: &mut BTreeSet<String>) -> String {
    let base = cidr.split('/').next().unwrap_or("10.244.0.0");
    let prefix = base.rsplit_once('.').map(|(p, _)| p).unwrap_or("10.244.0");
    for host in 2..=254 {
        let ip = format!("{prefix}.{host}");
        if used.insert(ip.clone()) {
            return ip;
        }
    }
    // A full /24 cannot happen with the pod limits of simulated nodes; reuse the last address.
    format!("{prefix}.254")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::testutil::*;

    const DELAY: Duration = Duration::from_millis(1500);

    fn node() -> Node {
        Node::test("n1").capacity("4", "8Gi", 110).build()
    }

    fn status_after(p: &Pod, now: Timestamp) -> PodStatus {
        desired_status(p, &node(), DELAY, &[], now, None, |cidr| allocate_ip(cidr, &mut BTreeSet::new()))
    }

    fn with_status(p: &Pod, s: PodStatus) -> Pod {
        Pod { status: Some(s), ..p.clone() }
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn a_bound_pod_is_container_creating_first() {
        let p = Pod::test("web-1").on_node("n1").image("nginx").build();
        let s = status_after(&p, t(10));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.start_time.as_ref().unwrap().0, t(10));
        assert_eq!(s.host_ip.as_deref(), Some("10.89.0.2"));
        assert_eq!(s.pod_ip, None);
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("ContainerCreating"));
        assert_eq!((c.ready, c.started, c.image.as_str(), c.image_id.as_str()), (false, Some(false), "nginx", ""));
        let types: Vec<&str> = s.conditions.as_ref().unwrap().iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]);
        let ready = cond(&s, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("ContainersNotReady")));
        assert_eq!(ready.message.as_deref(), Some("containers with unready status: [web]"));
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        // Even a zero delay shows ContainerCreating once.
        let s0 = desired_status(&p, &node(), Duration::ZERO, &[], t(10), None, |_| unreachable!());
        assert_eq!(s0.phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn the_pod_runs_after_the_startup_delay() {
        let p = Pod::test("web-1").on_node("n1").image("nginx").requests("100m", "64Mi").build();
        let creating = with_status(&p, status_after(&p, t(10)));
        assert_eq!(next_transition(&creating, DELAY, &[], t(10), None), Some(t(10) + SignedDuration::from_millis(1500)));
        // An exact start moment, when known, beats the whole-second startTime.
        let exact = t(10) + SignedDuration::from_millis(700);
        assert_eq!(next_transition(&creating, DELAY, &[], t(10), Some(exact)), Some(exact + SignedDuration::from_millis(1500)));
        let s = desired_status(&creating, &node(), DELAY, &[], t(11) + SignedDuration::from_millis(600), Some(exact), |_| unreachable!());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        // Still creating just before the delay has passed.
        let s = status_after(&creating, t(11));
        assert_eq!(s, creating.status.clone().unwrap());

        let s = status_after(&creating, t(12));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.1.2"));
        assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "10.244.1.2");
        assert_eq!(s.start_time.as_ref().unwrap().0, t(10));
        for t_ in ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"] {
            assert_eq!(cond(&s, t_).status, "True", "{t_}");
        }
        assert_eq!(cond(&s, "Ready").last_transition_time.as_ref().unwrap().0, t(12));
        // Initialized stayed True: its transition time is the first one.
        assert_eq!(cond(&s, "Initialized").last_transition_time.as_ref().unwrap().0, t(10));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!((c.ready, c.started, c.restart_count), (true, Some(true), 0));
        assert_eq!(c.image, "docker.io/library/nginx:latest");
        assert!(
            c.image_id.starts_with("docker.io/library/nginx@sha256:") && c.image_id.len() == "docker.io/library/nginx@sha256:".len() + 64
        );
        assert!(c.container_id.as_ref().unwrap().starts_with("containerd://"));
        assert_eq!(c.state.as_ref().unwrap().running.as_ref().unwrap().started_at.as_ref().unwrap().0, t(12));
        assert_eq!(s.qos_class.as_deref(), Some("Burstable"));

        // Recomputing later changes nothing.
        let running = with_status(&creating, s.clone());
        assert_eq!(status_after(&running, t(500)), s);
        assert_eq!(next_transition(&running, DELAY, &[], t(500), None), None);
    }

    #[test]
    fn init_containers_show_while_starting_and_complete() {
        let p = Pod::test("job").on_node("n1").image("busybox").init_container("setup", "busybox:1.36").build();
        let s = status_after(&p, t(0));
        let init = cond(&s, "Initialized");
        assert_eq!((init.status.as_str(), init.reason.as_deref()), ("False", Some("ContainersNotInitialized")));
        assert_eq!(init.message.as_deref(), Some("containers with incomplete status: [setup]"));
        let main = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(main.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("PodInitializing"));

        let running = status_after(&with_status(&p, s), t(5));
        let setup = &running.init_container_statuses.as_ref().unwrap()[0];
        let term = setup.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((term.exit_code, term.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(setup.image, "docker.io/library/busybox:1.36");
        assert_eq!(cond(&running, "Initialized").status, "True");
    }

    #[test]
    fn sync_writes_only_changes_and_allocates_distinct_ips() {
        let nodes = [node()];
        let a = Pod::test("a").on_node("n1").build();
        let b = Pod::test("b").on_node("n1").build();
        let elsewhere = Pod::test("c").on_node("other-node").build();
        let none = BTreeMap::new();
        let first = sync(&nodes, &[a.clone(), b.clone(), elsewhere], &none, DELAY, &[], t(0), &mut Recorder::new(t(0)));
        assert_eq!(first.actions.len(), 2);
        assert_eq!(first.started, ["uid-a", "uid-b"]);
        assert_eq!(first.wake_at, None, "no pod has a startTime yet");
        let statuses: Vec<Pod> = first
            .actions
            .iter()
            .map(|x| match x {
                Action::UpdateStatus(Object::Pod(p)) => (**p).clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let again = sync(&nodes, &statuses, &none, DELAY, &[], t(1), &mut Recorder::new(t(1)));
        assert!(again.actions.is_empty());
        assert_eq!(again.wake_at, Some(t(0) + SignedDuration::from_millis(1500)));
        let later = sync(&nodes, &statuses, &none, DELAY, &[], t(2), &mut Recorder::new(t(2)));
        let ips: BTreeSet<String> = later
            .actions
            .iter()
            .filter_map(|x| match x {
                Action::UpdateStatus(Object::Pod(p)) => Some(p.status.as_ref().unwrap().pod_ip.clone().unwrap()),
                _ => None,
            })
            .collect();
        assert_eq!(ips, BTreeSet::from(["10.244.1.2".to_string(), "10.244.1.3".to_string()]));
        // Each container that starts is pulled, created and started, as a kubelet records.
        let events: Vec<(String, String)> = later
            .actions
            .iter()
            .filter_map(|x| match x {
                Action::Create(Object::Event(e)) => Some((e.reason.clone()?, e.message.clone()?)),
                _ => None,
            })
            .collect();
        let reasons: Vec<&str> = events.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(reasons, ["Pulled", "Created", "Started", "Pulled", "Created", "Started"], "{events:?}");
        assert_eq!(events[0].1, "Container image \"nginx:1.27\" already present on machine");
        assert!(events[1].1.starts_with("Created container: ") && events[2].1.starts_with("Started container "), "{events:?}");
        let after = sync(&nodes, &statuses_of(&later), &none, DELAY, &[], t(3), &mut Recorder::new(t(3)));
        assert!(after.actions.is_empty(), "nothing is recorded twice: {:?}", after.actions);
    }

    fn statuses_of(out: &KubeletSync) -> Vec<Pod> {
        out.actions
            .iter()
            .filter_map(|x| match x {
                Action::UpdateStatus(Object::Pod(p)) => Some((**p).clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn deleting_pods_are_finished() {
        let mut p = Pod::test("a").on_node("n1").ready_at(t(0)).deleting().build();
        // Its container runs.
        let running: ContainerStatus = serde_json::from_value(serde_json::json!({
            "name": "c", "image": "nginx:1.27", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": "2023-11-14T22:13:20Z"}}
        }))
        .unwrap();
        p.status.get_or_insert_with(Default::default).container_statuses = Some(vec![running]);
        let out = sync(&[node()], &[p], &BTreeMap::new(), DELAY, &[], t(5), &mut Recorder::new(t(5)));
        assert!(
            matches!(&out.actions[..], [Action::Create(Object::Event(e)), Action::Delete { target, grace_period_seconds: Some(0) }]
                if target.name == "a" && e.reason.as_deref() == Some("Killing")),
            "{:?}",
            out.actions
        );
    }

    /// Statuses from the first sync to `until`, a second at a time, as a driver that
    /// writes every change would see them.
    fn run(p: &Pod, failing: &[String], until: i64) -> Vec<PodStatus> {
        let mut p = p.clone();
        let mut seen = Vec::new();
        for sec in 0..=until {
            let s = desired_status(&p, &node(), DELAY, failing, t(sec), None, |cidr| allocate_ip(cidr, &mut BTreeSet::new()));
            p.status = Some(s.clone());
            seen.push(s);
        }
        seen
    }

    #[test]
    fn a_pod_that_does_not_restart_runs_for_its_seconds_then_succeeds() {
        let p =
            Pod::test("pi-x").on_node("n1").image("perl:5.34.0").restart_policy("Never").annotation(RUN_SECONDS_ANNOTATION, "3").build();
        let seen = run(&p, &[], 8);
        // Running from t(2) (the 1.5 s delay, seen at the next whole second) to t(5).
        let phases: Vec<&str> = seen.iter().map(|s| s.phase.as_deref().unwrap()).collect();
        assert_eq!(phases, ["Pending", "Pending", "Running", "Running", "Running", "Succeeded", "Succeeded", "Succeeded", "Succeeded"]);
        let done = seen.last().unwrap();
        let c = &done.container_statuses.as_ref().unwrap()[0];
        let term = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((term.exit_code, term.reason.as_deref(), c.ready), (0, Some("Completed"), false));
        assert_eq!(term.started_at.as_ref().unwrap().0, t(2), "it started when it ran");
        let ready = cond(done, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("PodCompleted")));
        assert_eq!(seen[5], seen[8], "an ended pod's status no longer changes");
        let with = |status: &PodStatus| with_status(&p, status.clone());
        assert_eq!(next_transition(&with(&seen[2]), DELAY, &[], t(2), None), Some(t(0) + SignedDuration::from_millis(4500)));
    }

    #[test]
    fn a_failing_image_crash_loops_where_pods_restart_and_fails_where_they_do_not() {
        assert!(image_fails("nginx:broken", &[]) && image_fails("registry.example.com:5000/app:broken", &[]));
        assert!(!image_fails("nginx:1.27", &[]) && !image_fails("broken:1.0", &[]));
        assert!(image_fails("nginx", &["docker.io/library/nginx:latest".to_string()]), "names compare as containerd reports them");

        let web = Pod::test("web-x").on_node("n1").image("nginx:broken").build();
        let seen = run(&web, &[], 40);
        let last = seen.last().unwrap();
        assert_eq!(last.phase.as_deref(), Some("Running"));
        let c = &last.container_statuses.as_ref().unwrap()[0];
        let waiting = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
        // Failed first at t(2); restarted at +10 s and +30 s: 2 restarts by t(40).
        assert_eq!(c.restart_count, 2);
        assert_eq!(c.last_state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);
        assert_eq!(cond(last, "Ready").status, "False");
        let counts: Vec<i32> = seen.iter().map(|s| s.container_statuses.as_ref().unwrap()[0].restart_count).collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "the restart count only rises: {counts:?}");
        assert_eq!(crash_loop(SignedDuration::from_secs(1000)), (7, SignedDuration::from_secs(1210)), "the back-off stops at 5 min");
        assert_eq!(crash_loop(SignedDuration::from_secs(9)), (0, SignedDuration::from_secs(10)));
        assert_eq!(crash_loop(SignedDuration::from_secs(310)), (5, SignedDuration::from_secs(610)));
        let year = 365 * 86_400;
        assert_eq!(i64::from(crash_loop(SignedDuration::from_secs(year)).0), 5 + (year - 310) / 300, "counted, not walked");

        let job = Pod::test("job-x").on_node("n1").image("busybox:broken").restart_policy("Never").build();
        let last = run(&job, &[], 5).pop().unwrap();
        assert_eq!(last.phase.as_deref(), Some("Failed"));
        let term = last.container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
    }

    #[test]
    fn image_normalization() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(normalize_image("nginx:1.27"), "docker.io/library/nginx:1.27");
        assert_eq!(normalize_image("bitnami/redis"), "docker.io/bitnami/redis:latest");
        assert_eq!(normalize_image("registry.k8s.io/pause:3.10"), "registry.k8s.io/pause:3.10");
        assert_eq!(normalize_image("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(normalize_image("ghcr.io/a/b@sha256:abc"), "ghcr.io/a/b@sha256:abc");
    }
}
