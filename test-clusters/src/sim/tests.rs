//! Whole-cluster tests: the simulator's actions applied to an in-memory API, step by step.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::deployment::util;
use super::testutil::*;
use super::*;
use crate::config;

fn cluster(yaml: &str) -> ClusterDef {
    config::parse(yaml, "test.yaml").unwrap().remove(0)
}

/// Two nodes of 4 cpu / 8Gi, one second to start a pod.
fn east() -> ClusterDef {
    cluster("name: east\nnodes: [{count: 2, cpu: '4', memory: 8Gi}]\nstartupDelay: 1s")
}

/// One node of 1 cpu / 2Gi and 10 pod slots.
fn small() -> ClusterDef {
    cluster("name: small\nnodes: [{count: 1, cpu: '1', memory: 2Gi, pods: 10}]\nstartupDelay: 300ms")
}

fn ms(n: i64) -> SignedDuration {
    SignedDuration::from_millis(n)
}

fn start(def: ClusterDef) -> (FakeApi, Simulator) {
    let mut api = FakeApi::default();
    let mut sim = Simulator::new(def);
    api.settle(&mut sim, t(0));
    (api, sim)
}

fn complete(api: &FakeApi, name: &str) -> bool {
    let d = api.deployment(name);
    let s = api.deployment_status(name);
    let want = d.spec.as_ref().unwrap().replicas.unwrap_or(1);
    let n = |v: Option<i32>| v.unwrap_or(0);
    s.observed_generation >= d.metadata.generation
        && n(s.updated_replicas) == want
        && n(s.replicas) == want
        && n(s.available_replicas) == want
        && util::get_condition(&s, "Progressing").and_then(|c| c.reason.as_deref()) == Some(util::reason::NEW_RS_AVAILABLE)
}

fn events_with_reason(api: &FakeApi, reason: &str) -> Vec<String> {
    api.events.iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.message.clone()).collect()
}

#[test]
fn nodes_are_registered_once() {
    let (api, mut sim) = start(east());
    let names: Vec<_> = api.state.nodes.iter().map(|n| n.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["east-worker", "east-worker2"]);
    assert!(sim.reconcile(&api.state, t(1)).actions.is_empty());
}

#[test]
fn a_deployment_becomes_available() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(3).requests("500m", "1Gi").build(), t(1));
    let (_, wake) = api.settle(&mut sim, t(1));
    // All three pods are bound and starting; the next thing to happen is their start.
    assert_eq!(wake, Some(t(2)));
    let pods = api.live_pods();
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert!(p.spec.as_ref().unwrap().node_name.is_some());
        let waiting = p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().waiting.clone();
        assert_eq!(waiting.unwrap().reason.as_deref(), Some("ContainerCreating"));
    }
    let s = api.deployment_status("web");
    assert_eq!((s.replicas, s.updated_replicas, s.available_replicas), (Some(3), Some(3), None));
    assert_eq!(util::get_condition(&s, "Available").unwrap().status, "False");

    let (_, wake) = api.settle(&mut sim, t(2));
    assert_eq!(wake, None, "nothing left to wait for");
    assert!(complete(&api, "web"));
    let s = api.deployment_status("web");
    assert_eq!((s.ready_replicas, s.unavailable_replicas, s.observed_generation), (Some(3), None, Some(1)));
    assert_eq!(util::get_condition(&s, "Available").unwrap().status, "True");
    for p in api.live_pods() {
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
        assert!(p.status.as_ref().unwrap().pod_ip.as_deref().unwrap().starts_with("10.244."));
    }
    // Replicas are spread: both nodes are used.
    let nodes: BTreeSet<_> = api.live_pods().iter().map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap()).collect();
    assert_eq!(nodes.len(), 2);

    let rs_name = api.state.replicasets[0].metadata.name.clone().unwrap();
    assert_eq!(events_with_reason(&api, "ScalingReplicaSet"), [format!("Scaled up replica set {rs_name} from 0 to 3")]);
    assert_eq!(events_with_reason(&api, "SuccessfulCreate").len(), 3);
    assert_eq!(events_with_reason(&api, "Scheduled").len(), 3);
    assert!(events_with_reason(&api, "Scheduled")[0].starts_with("Successfully assigned default/web-"));

    // Settled means idempotent: nothing more to do, now or later.
    assert!(sim.reconcile(&api.state, t(2)).actions.is_empty());
    assert!(sim.reconcile(&api.state, t(5000)).actions.is_empty());
}

#[test]
fn rolling_update_with_surge_1_unavailable_0_keeps_full_availability() {
    let (mut api, mut sim) = start(east());
    let d = Deployment::test("web").replicas(3).requests("500m", "1Gi").rolling(IntOrString::Int(1), IntOrString::Int(0)).build();
    api.create_deployment(d, t(0));
    let mut now = run_until(&mut api, &mut sim, t(0), ms(500), 20, |api, _| complete(api, "web"));
    let old_rs = api.state.replicasets[0].metadata.uid.clone();

    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    let mut max_pods = 0;
    let mut min_available = usize::MAX;
    let mut passes = 0;
    while !complete(&api, "web") {
        passes += 1;
        assert!(passes < 500, "rollout did not finish");
        let out = sim.reconcile(&api.state, now);
        if out.actions.is_empty() {
            now += ms(250);
            continue;
        }
        api.apply(&out.actions, now);
        max_pods = max_pods.max(api.live_pods().len());
        min_available = min_available.min(api.available_pods(0, now));
    }
    assert_eq!(max_pods, 4, "never more than replicas + maxSurge pods");
    assert_eq!(min_available, 3, "never fewer than replicas available");
    // The old ReplicaSet is kept (revision history) at zero; all pods are new.
    let old = api.state.replicasets.iter().find(|rs| rs.metadata.uid == old_rs).unwrap();
    assert_eq!(util::rs_replicas(old), 0);
    for p in api.live_pods() {
        assert_ne!(pod::controller_uid(&p.metadata), old_rs.as_deref());
        assert_eq!(p.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:1.28"));
    }
    let scaling = events_with_reason(&api, "ScalingReplicaSet");
    // Up 0→1 on creation, then three down/up pairs.
    assert_eq!(scaling.len(), 1 + 1 + 3 + 2, "{scaling:#?}");
}

#[test]
fn default_rolling_update_stays_within_its_bounds() {
    // 10 replicas with the default 25%/25%: at most 13 pods, at least 8 available.
    let (mut api, mut sim) = start(cluster("name: big\nnodes: [{count: 3, cpu: '16', memory: 32Gi}]\nstartupDelay: 2s"));
    api.create_deployment(Deployment::test("web").replicas(10).requests("100m", "128Mi").build(), t(0));
    let mut now = run_until(&mut api, &mut sim, t(0), ms(500), 40, |api, _| complete(api, "web"));
    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    let (mut max_pods, mut min_available) = (0, usize::MAX);
    for _ in 0..1000 {
        if complete(&api, "web") {
            break;
        }
        let out = sim.reconcile(&api.state, now);
        if out.actions.is_empty() {
            now += ms(500);
            continue;
        }
        api.apply(&out.actions, now);
        max_pods = max_pods.max(api.live_pods().len());
        min_available = min_available.min(api.available_pods(0, now));
    }
    assert!(complete(&api, "web"));
    assert!(max_pods <= 13, "{max_pods}");
    assert!(min_available >= 8, "{min_available}");
}

#[test]
fn recreate_never_mixes_old_and_new_pods() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(2).recreate().build(), t(0));
    let mut now = run_until(&mut api, &mut sim, t(0), ms(500), 20, |api, _| complete(api, "web"));
    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    for _ in 0..200 {
        if complete(&api, "web") {
            break;
        }
        let out = sim.reconcile(&api.state, now);
        if out.actions.is_empty() {
            now += ms(250);
            continue;
        }
        api.apply(&out.actions, now);
        let images: BTreeSet<_> = api.live_pods().iter().map(|p| p.spec.as_ref().unwrap().containers[0].image.clone()).collect();
        assert!(images.len() <= 1, "old and new pods at once: {images:?}");
    }
    assert!(complete(&api, "web"));
}

#[test]
fn pods_that_do_not_fit_stay_pending_and_the_deadline_passes() {
    let (mut api, mut sim) = start(small());
    api.create_deployment(Deployment::test("web").replicas(3).requests("400m", "256Mi").progress_deadline(60).build(), t(0));
    run_until(&mut api, &mut sim, t(0), ms(500), 10, |api, _| api.deployment_status("web").available_replicas == Some(2));
    let pending: Vec<_> = api.live_pods().into_iter().filter(|p| p.spec.as_ref().unwrap().node_name.is_none()).collect();
    assert_eq!(pending.len(), 1);
    let cond = pod::condition(pending[0], "PodScheduled").unwrap();
    assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("False", Some("Unschedulable")));
    let msg = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod..";
    assert_eq!(cond.message.as_deref(), Some(msg));
    // One FailedScheduling event, not one per pass.
    assert_eq!(events_with_reason(&api, "FailedScheduling"), [msg]);

    let s = api.deployment_status("web");
    assert_eq!((s.replicas, s.available_replicas, s.unavailable_replicas), (Some(3), Some(2), Some(1)));
    assert_eq!(util::get_condition(&s, "Available").unwrap().status, "False");
    let progressing = util::get_condition(&s, "Progressing").unwrap();
    assert_eq!(progressing.reason.as_deref(), Some(util::reason::RS_UPDATED));

    // Nothing moves until the progress deadline, which the simulator asks to be woken for.
    let last_progress = progressing.last_update_time.clone().unwrap().0;
    let (_, wake) = api.settle(&mut sim, last_progress + SignedDuration::from_secs(30));
    assert_eq!(wake, Some(last_progress + SignedDuration::from_secs(61)));
    api.settle(&mut sim, wake.unwrap());
    let p = util::get_condition(&api.deployment_status("web"), "Progressing").cloned().unwrap();
    assert_eq!((p.status.as_str(), p.reason.as_deref()), ("False", Some(util::reason::TIMED_OUT)));

    // Freeing room lets the pod run.
    api.update_deployment("web", |s| s.replicas = Some(2));
    let now = wake.unwrap() + SignedDuration::from_secs(1);
    api.settle(&mut sim, now);
    assert_eq!(api.live_pods().len(), 2);
    assert!(api.live_pods().iter().all(|p| p.spec.as_ref().unwrap().node_name.is_some()), "the pending pod is deleted first");
}

#[test]
fn scaling_down_removes_pods_and_scaling_up_adds_them() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(4).build(), t(0));
    run_until(&mut api, &mut sim, t(0), ms(500), 20, |api, _| complete(api, "web"));
    api.update_deployment("web", |s| s.replicas = Some(1));
    let now = run_until(&mut api, &mut sim, t(10), ms(500), 10, |api, _| complete(api, "web"));
    assert_eq!(api.live_pods().len(), 1);
    assert_eq!(events_with_reason(&api, "SuccessfulDelete").len(), 3);
    api.update_deployment("web", |s| s.replicas = Some(5));
    run_until(&mut api, &mut sim, now, ms(500), 10, |api, _| complete(api, "web"));
    assert_eq!(api.live_pods().len(), 5);
    let rs = &api.state.replicasets[0].metadata.name;
    let scaling = events_with_reason(&api, "ScalingReplicaSet");
    let rs = rs.as_deref().unwrap();
    assert_eq!(
        scaling,
        [
            format!("Scaled up replica set {rs} from 0 to 4"),
            format!("Scaled down replica set {rs} from 4 to 1"),
            format!("Scaled up replica set {rs} from 1 to 5")
        ]
    );
}

#[test]
fn node_selectors_pick_nodes() {
    let def = cluster("name: mixed\nnodes: [{count: 1, cpu: '2', memory: 4Gi, labels: {disk: ssd}}, {count: 1, cpu: '2', memory: 4Gi}]");
    let (mut api, mut sim) = start(def);
    api.create_deployment(Deployment::test("db").replicas(2).node_selector("disk", "ssd").build(), t(0));
    api.settle(&mut sim, t(0));
    let nodes: BTreeSet<_> = api.live_pods().iter().filter_map(|p| p.spec.as_ref().unwrap().node_name.clone()).collect();
    assert_eq!(nodes, BTreeSet::from(["mixed-worker".to_string()]));
}

#[test]
fn graceful_pod_deletion_is_finished_by_the_kubelet() {
    let (mut api, mut sim) = start(east());
    api.graceful_pod_deletion = true;
    api.create_deployment(Deployment::test("web").replicas(2).build(), t(0));
    run_until(&mut api, &mut sim, t(0), ms(500), 20, |api, _| complete(api, "web"));
    api.update_deployment("web", |s| s.replicas = Some(1));
    run_until(&mut api, &mut sim, t(10), ms(500), 10, |api, _| complete(api, "web"));
    assert_eq!(api.state.pods.len(), 1, "the deleted pod is gone, not left terminating");
}

#[test]
fn the_simulation_is_deterministic() {
    let run = || {
        let (mut api, mut sim) = start(east());
        api.create_deployment(Deployment::test("web").replicas(3).build(), t(0));
        let mut log = Vec::new();
        let mut now = t(0);
        for _ in 0..20 {
            let out = sim.reconcile(&api.state, now);
            api.apply(&out.actions, now);
            log.push(out);
            now += ms(400);
        }
        (log, api.state)
    };
    let (a_log, a_state) = run();
    let (b_log, b_state) = run();
    assert_eq!(a_log, b_log);
    assert_eq!(a_state, b_state);
}

#[test]
fn unapplied_creates_are_not_repeated_until_forgotten() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(2).build(), t(0));
    // Create the ReplicaSet, but do not apply anything after that.
    let first = sim.reconcile(&api.state, t(0));
    api.apply(&first.actions, t(0));
    let creates =
        |out: &Reconciled| out.actions.iter().filter(|a| matches!(a, Action::Create(Object::Pod(_)))).cloned().collect::<Vec<_>>();
    let second = sim.reconcile(&api.state, t(0));
    assert_eq!(creates(&second).len(), 2);
    // The pods did not show up: the controller waits for them instead of asking again.
    let third = sim.reconcile(&api.state, t(1));
    assert!(creates(&third).is_empty());
    assert_eq!(third.next_wakeup, Some(t(0) + replicaset::EXPECTATIONS_TIMEOUT));
    // Forgetting one of two failed creates is not enough: the other is still awaited.
    sim.forget(&creates(&second)[0]);
    assert!(creates(&sim.reconcile(&api.state, t(2))).is_empty());
    sim.forget(&creates(&second)[1]);
    let retried = creates(&sim.reconcile(&api.state, t(3)));
    assert_eq!(retried.len(), 2);
    assert!(retried.iter().all(|a| !creates(&second).contains(a)), "new names");
    // Unreported and unseen creates are retried once the expectations time out.
    let later = t(3) + replicaset::EXPECTATIONS_TIMEOUT;
    assert!(creates(&sim.reconcile(&api.state, later - ms(1000))).is_empty());
    assert_eq!(creates(&sim.reconcile(&api.state, later)).len(), 2);
}

#[test]
fn unapplied_bindings_are_assumed() {
    let (mut api, mut sim) = start(small());
    api.create_deployment(Deployment::test("web").replicas(3).requests("400m", "64Mi").build(), t(0));
    // Apply everything except bindings.
    for _ in 0..5 {
        let out = sim.reconcile(&api.state, t(0));
        let not_binds: Vec<Action> = out.actions.into_iter().filter(|a| !matches!(a, Action::Bind { .. })).collect();
        api.apply(&not_binds, t(0));
    }
    let out = sim.reconcile(&api.state, t(1));
    assert!(!out.actions.iter().any(|a| matches!(a, Action::Bind { .. })), "bindings are not repeated");
    let binds_after_timeout = sim.reconcile(&api.state, t(0) + ASSUME_TIMEOUT);
    // Two pods fit on the 1-cpu node; the third was found unschedulable.
    assert_eq!(binds_after_timeout.actions.iter().filter(|a| matches!(a, Action::Bind { .. })).count(), 2);
}

#[test]
fn pod_names_are_unique_across_passes() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(30).requests("10m", "10Mi").build(), t(0));
    api.settle(&mut sim, t(0));
    let names: BTreeSet<_> = api.state.pods.iter().map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names.len(), 30);
    let per_node: BTreeMap<_, usize> = api.state.pods.iter().fold(BTreeMap::new(), |mut m, p| {
        *m.entry(p.spec.as_ref().unwrap().node_name.clone()).or_default() += 1;
        m
    });
    assert_eq!(per_node.values().copied().collect::<Vec<_>>(), [15, 15], "equal nodes share the pods");
}

#[test]
fn clusters_name_pods_differently() {
    let first_pod = |def: ClusterDef| {
        let (mut api, mut sim) = start(def);
        api.create_deployment(Deployment::test("web").build(), t(0));
        api.settle(&mut sim, t(0));
        api.state.pods[0].metadata.name.clone().unwrap()
    };
    assert_ne!(first_pod(east()), first_pod(cluster("name: west\nnodes: [{count: 2, cpu: '4', memory: 8Gi}]")));
}

#[test]
fn startup_delay_counts_from_the_first_status_not_the_whole_second() {
    let (mut api, mut sim) = start(small());
    // startTime keeps whole seconds (t(0)); the 300ms delay counts from t(0)+900ms.
    let now: Timestamp = t(0) + ms(900);
    api.create_deployment(Deployment::test("web").build(), now);
    let (actions, wake) = api.settle(&mut sim, now);
    let p = &api.live_pods()[0];
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(p.status.as_ref().unwrap().start_time.as_ref().unwrap().0, t(0));
    assert_eq!(wake, Some(now + ms(300)));
    assert!(actions.iter().any(|a| matches!(a, Action::UpdateStatus(Object::Pod(_)))));
    // Still starting 299ms later.
    assert!(sim.reconcile(&api.state, now + ms(299)).actions.is_empty());
    let (_, wake) = api.settle(&mut sim, now + ms(300));
    assert_eq!(wake, None);
    assert_eq!(api.live_pods()[0].status.as_ref().unwrap().phase.as_deref(), Some("Running"));
}

#[test]
fn a_restarted_simulator_falls_back_to_start_time() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").build(), t(0) + ms(500));
    api.settle(&mut sim, t(0) + ms(500));
    // A new simulator does not know the exact start: it counts from startTime, t(0).
    let mut fresh = Simulator::new(east());
    assert!(fresh.reconcile(&api.state, t(0) + ms(999)).actions.is_empty());
    api.settle(&mut fresh, t(1));
    assert_eq!(api.live_pods()[0].status.as_ref().unwrap().phase.as_deref(), Some("Running"));
}

#[test]
fn settled_objects_are_not_recomputed_until_they_or_theirs_change() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(2).requests("100m", "128Mi").build(), t(0));
    api.settle(&mut sim, t(0));
    api.settle(&mut sim, t(2));
    assert!(complete(&api, "web"), "{:?}", api.deployment_status("web"));
    let d_uid = api.deployment("web").metadata.uid.clone().unwrap();
    let rs_uid = api.state.replicasets[0].metadata.uid.clone().unwrap();

    // Nothing to do: both answers are kept, and a later pass with the same objects
    // gives the same (empty) answer from them.
    assert!(sim.reconcile(&api.state, t(3)).actions.is_empty());
    assert!(sim.quiet.contains_key(&d_uid) && sim.quiet.contains_key(&rs_uid), "{:?}", sim.quiet.keys());
    assert!(sim.reconcile(&api.state, t(4)).actions.is_empty());

    // A change to the Deployment is seen at once: the scale-up goes through.
    api.update_deployment("web", |s| s.replicas = Some(3));
    api.settle(&mut sim, t(5));
    api.settle(&mut sim, t(7));
    assert!(complete(&api, "web"), "{:?}", api.deployment_status("web"));
    assert_eq!(api.live_pods().len(), 3);

    // A pod that changes under a quiet ReplicaSet is seen too: deleted, it is replaced.
    let victim = api.live_pods()[0].metadata.clone();
    api.apply(&[Action::Delete { target: ObjectRef::from_meta(Kind::Pod, &victim), grace_period_seconds: Some(0) }], t(8));
    api.settle(&mut sim, t(8));
    assert_eq!(api.live_pods().len(), 3, "the deleted pod was replaced");

    // Objects that are gone are forgotten.
    api.state.deployments.clear();
    api.state.replicasets.clear();
    api.state.pods.clear();
    sim.reconcile(&api.state, t(9));
    assert!(sim.quiet.is_empty(), "{:?}", sim.quiet.keys());
}

/// A container whose image is tagged `broken` crash-loops, so a Deployment of it never
/// becomes available and stops progressing at its deadline, as the deployment
/// controller reports it.
#[test]
fn a_broken_image_crash_loops_until_the_progress_deadline() {
    let (mut api, mut sim) = start(east());
    api.create_deployment(Deployment::test("web").replicas(2).image("nginx:broken").progress_deadline(30).build(), t(0));
    let end = run_until(&mut api, &mut sim, t(0), ms(1000), 60, |api, _| {
        util::get_condition(&api.deployment_status("web"), "Progressing").is_some_and(|c| c.status == "False")
    });
    let p = util::get_condition(&api.deployment_status("web"), "Progressing").cloned().unwrap();
    assert_eq!(p.reason.as_deref(), Some(util::reason::TIMED_OUT));
    assert!(end >= t(30), "not before the deadline: {end}");
    assert_eq!(api.deployment_status("web").available_replicas.unwrap_or(0), 0);
    for pod in api.live_pods() {
        let c = &pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref());
        assert_eq!(waiting, Some("CrashLoopBackOff"), "{:?}", pod.metadata.name);
        assert!(c.restart_count >= 1, "restarted by now: {c:?}");
    }
    let backoffs = events_with_reason(&api, "BackOff");
    assert!(!backoffs.is_empty() && backoffs[0].starts_with("Back-off restarting failed container web in pod web-"), "{backoffs:?}");
}

fn job(name: &str, yaml: &str) -> k8s_openapi::api::batch::v1::Job {
    let mut j: k8s_openapi::api::batch::v1::Job = serde_yaml::from_str(yaml).expect("a Job");
    j.metadata.name = Some(name.into());
    j
}

const JOB: &str = "spec:
  completions: 2
  parallelism: 1
  backoffLimit: 1
  template:
    metadata: {annotations: {sim.flotilla.io/run-seconds: '3'}}
    spec:
      restartPolicy: Never
      containers: [{name: pi, image: perl:5.34.0}]
";

#[test]
fn a_job_runs_its_pods_one_after_another_to_completion() {
    let (mut api, mut sim) = start(east());
    api.create_job(job("pi", JOB), t(0));
    let end = run_until(&mut api, &mut sim, t(0), ms(1000), 30, |api, _| api.job_status("pi").completion_time.is_some());
    let s = api.job_status("pi");
    assert_eq!((s.succeeded, s.failed, s.active), (Some(2), None, None));
    let types: Vec<(&str, &str)> = s.conditions.iter().flatten().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
    assert_eq!(types, [("SuccessCriteriaMet", "True"), ("Complete", "True")]);
    assert_eq!(s.start_time.as_ref().unwrap().0, t(0));
    // Each pod takes about 1 s to start and runs 3 s; one at a time.
    assert!(end >= t(8) && end <= t(12), "completed at {end}");
    assert_eq!(api.state.pods.len(), 2, "no pod beyond the completions");
    assert_eq!(events_with_reason(&api, "Completed"), ["Job completed"]);
    // Nothing runs again.
    api.settle(&mut sim, end + SignedDuration::from_secs(60));
    assert_eq!(api.state.pods.len(), 2);
}

#[test]
fn a_job_of_a_broken_image_fails_past_its_backoff_limit() {
    let (mut api, mut sim) = start(east());
    api.create_job(job("bad", &JOB.replace("perl:5.34.0", "perl:broken")), t(0));
    run_until(&mut api, &mut sim, t(0), ms(1000), 30, |api, _| {
        api.job_status("bad").conditions.iter().flatten().any(|c| c.type_ == "Failed" && c.status == "True")
    });
    let s = api.job_status("bad");
    assert_eq!(s.failed, Some(2), "backoffLimit 1: the second failure ends it");
    assert_eq!(s.completion_time, None);
    let failed = s.conditions.iter().flatten().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(events_with_reason(&api, "BackoffLimitExceeded"), ["Job has reached the specified backoff limit"]);
}

#[test]
fn a_suspended_job_runs_nothing_until_resumed() {
    let (mut api, mut sim) = start(east());
    api.create_job(job("later", &JOB.replace("backoffLimit: 1", "backoffLimit: 1\n  suspend: true")), t(0));
    api.settle(&mut sim, t(5));
    assert!(api.state.pods.is_empty());
    let s = api.job_status("later");
    assert!(s.conditions.iter().flatten().any(|c| c.type_ == "Suspended" && c.status == "True"));
    assert_eq!(s.start_time, None);
    api.update_job("later", |spec| spec.suspend = Some(false));
    api.settle(&mut sim, t(6));
    assert_eq!(api.state.pods.len(), 1);
    let s = api.job_status("later");
    assert!(s.conditions.iter().flatten().any(|c| c.type_ == "Suspended" && c.status == "False"));
}

fn cronjob(yaml: &str) -> k8s_openapi::api::batch::v1::CronJob {
    serde_yaml::from_str(yaml).expect("a CronJob")
}

const HELLO: &str = "metadata: {name: hello, namespace: default}
spec:
  schedule: '* * * * *'
  concurrencyPolicy: Allow
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: hello, image: busybox:1.28}]
";

#[test]
fn a_cronjob_makes_a_job_each_minute_and_keeps_its_history_short() {
    let (mut api, mut sim) = start(east());
    let cj = cronjob(HELLO);
    api.apply(&[Action::Create(Object::CronJob(Box::new(cj)))], t(0));
    // t(0) is 22:13:20 UTC: the first minute is 40 s away, and the simulator says so.
    let (_, wake) = api.settle(&mut sim, t(1));
    assert!(api.state.jobs.is_empty());
    assert_eq!(wake, Some(t(40)));
    api.settle(&mut sim, t(40));
    assert_eq!(api.state.jobs.iter().map(|j| j.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["hello-28333334"]);
    let job = &api.state.jobs[0];
    assert_eq!(job.metadata.annotations.as_ref().unwrap()[cronjob::SCHEDULED_TIMESTAMP_ANNOTATION], "2023-11-14T22:14:00Z");
    let status = api.state.cronjobs[0].status.clone().unwrap();
    assert_eq!(status.last_schedule_time.unwrap().0, t(40));
    assert_eq!(status.active.unwrap().len(), 1);
    // The Job runs its 2 s and completes; the CronJob says when.
    run_until(&mut api, &mut sim, t(41), ms(1000), 10, |api, _| api.state.cronjobs[0].status.as_ref().unwrap().active.is_none());
    assert!(api.state.cronjobs[0].status.as_ref().unwrap().last_successful_time.is_some());
    // The next minute's Job replaces the first in a history of one.
    run_until(&mut api, &mut sim, t(100), ms(1000), 10, |api, _| {
        api.state.jobs.len() == 1 && api.state.jobs[0].metadata.name.as_deref() == Some("hello-28333335")
    });
}

#[test]
fn forbid_holds_a_time_back_while_a_job_runs_and_suspend_makes_none() {
    let (mut api, mut sim) = start(east());
    let slow = HELLO
        .replace("concurrencyPolicy: Allow", "concurrencyPolicy: Forbid")
        .replace("      template:\n", "      template:\n        metadata: {annotations: {sim.flotilla.io/run-seconds: '90'}}\n");
    api.apply(&[Action::Create(Object::CronJob(Box::new(cronjob(&slow))))], t(0));
    api.settle(&mut sim, t(40));
    api.settle(&mut sim, t(100));
    assert_eq!(api.state.jobs.len(), 1, "the first Job still runs at the second minute");
    assert_eq!(api.state.cronjobs[0].status.as_ref().unwrap().last_schedule_time.as_ref().unwrap().0, t(40));
    // Once it ends, the time held back runs, late.
    run_until(&mut api, &mut sim, t(101), ms(2000), 40, |api, _| api.state.jobs.len() == 2);
    assert!(api.state.jobs.iter().any(|j| j.metadata.name.as_deref() == Some("hello-28333335")));

    let (mut api, mut sim) = start(east());
    let suspended = HELLO.replace("concurrencyPolicy: Allow", "concurrencyPolicy: Allow\n  suspend: true");
    api.apply(&[Action::Create(Object::CronJob(Box::new(cronjob(&suspended))))], t(0));
    api.settle(&mut sim, t(40));
    api.settle(&mut sim, t(200));
    assert!(api.state.jobs.is_empty());
}

const STORE: &str = "metadata: {name: store, namespace: default}
spec:
  serviceName: store-hs
  replicas: 3
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec:
      containers: [{name: store, image: registry.example.com/store:3.9, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
";

fn statefulset(yaml: &str) -> k8s_openapi::api::apps::v1::StatefulSet {
    serde_yaml::from_str(yaml).expect("a StatefulSet")
}

fn pod_names(api: &FakeApi) -> Vec<String> {
    let mut names: Vec<String> = api.live_pods().iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    names.sort();
    names
}

#[test]
fn a_statefulset_makes_its_pods_in_order_each_with_its_claim() {
    let (mut api, mut sim) = start(east());
    api.apply(&[Action::Create(Object::StatefulSet(Box::new(statefulset(STORE))))], t(0));
    api.settle(&mut sim, t(0));
    assert_eq!(pod_names(&api), ["store-0"], "OrderedReady: one at a time");
    let mut seen = vec![pod_names(&api).len()];
    let end = run_until(&mut api, &mut sim, t(0), ms(500), 40, |api, _| {
        seen.push(api.live_pods().len());
        api.statefulset_status("store").ready_replicas == Some(3)
    });
    assert!(seen.windows(2).all(|w| w[1] <= w[0] + 1), "never two new pods at once: {seen:?}");
    assert!(end > t(2), "each waits for the one before to be Ready");
    assert_eq!(pod_names(&api), ["store-0", "store-1", "store-2"]);
    let claims: Vec<String> = api.state.claims.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    assert_eq!(claims, ["data-store-0", "data-store-1", "data-store-2"]);
    let p1 = api.live_pods().into_iter().find(|p| p.metadata.name.as_deref() == Some("store-1")).unwrap();
    let spec = p1.spec.as_ref().unwrap();
    assert_eq!((spec.hostname.as_deref(), spec.subdomain.as_deref()), (Some("store-1"), Some("store-hs")));
    let volume = spec.volumes.as_ref().unwrap().iter().find(|v| v.name == "data").unwrap();
    assert_eq!(volume.persistent_volume_claim.as_ref().unwrap().claim_name, "data-store-1");
    assert_eq!(p1.metadata.labels.as_ref().unwrap()[statefulset::POD_INDEX_LABEL], "1");
    let s = api.statefulset_status("store");
    assert_eq!((s.replicas, s.updated_replicas, s.current_replicas, s.available_replicas), (3, Some(3), Some(3), Some(3)));
    assert_eq!(s.current_revision, s.update_revision);
}

#[test]
fn a_statefulset_scales_down_from_the_top_and_rolls_out_from_the_top() {
    let (mut api, mut sim) = start(east());
    api.apply(&[Action::Create(Object::StatefulSet(Box::new(statefulset(STORE))))], t(0));
    let now = run_until(&mut api, &mut sim, t(0), ms(500), 40, |api, _| api.statefulset_status("store").ready_replicas == Some(3));
    api.update_statefulset("store", |s| s.replicas = Some(2));
    api.settle(&mut sim, now);
    assert_eq!(pod_names(&api), ["store-0", "store-1"]);
    assert_eq!(api.state.claims.len(), 3, "claims outlive their pods (Retain)");

    let old = api.statefulset_status("store").update_revision.unwrap();
    api.update_statefulset("store", |s| {
        s.template.spec.as_mut().unwrap().containers[0].image = Some("registry.example.com/store:3.10".into())
    });
    let mut order = Vec::new();
    run_until(&mut api, &mut sim, now, ms(500), 60, |api, _| {
        for p in api.live_pods() {
            let rev = &p.metadata.labels.as_ref().unwrap()[statefulset::REVISION_LABEL];
            let name = p.metadata.name.clone().unwrap();
            if *rev != old && !order.contains(&name) {
                order.push(name);
            }
        }
        let s = api.statefulset_status("store");
        s.updated_replicas == Some(2) && s.ready_replicas == Some(2)
    });
    assert_eq!(order, ["store-1", "store-0"], "the highest ordinal first");
    let s = api.statefulset_status("store");
    assert_ne!(s.update_revision.as_deref(), Some(old.as_str()));
    assert_eq!(s.current_revision, s.update_revision);
}

#[test]
fn a_parallel_statefulset_makes_all_its_pods_at_once() {
    let (mut api, mut sim) = start(east());
    let parallel = STORE.replace("  replicas: 3\n", "  replicas: 3\n  podManagementPolicy: Parallel\n");
    api.apply(&[Action::Create(Object::StatefulSet(Box::new(statefulset(&parallel))))], t(0));
    api.settle(&mut sim, t(0));
    assert_eq!(pod_names(&api), ["store-0", "store-1", "store-2"]);
}

#[test]
fn claims_get_volumes_of_their_class_when_their_pods_are_placed() {
    let (mut api, mut sim) = start(east());
    let fast = "metadata: {name: fast}\nprovisioner: k8s.io/minikube-hostpath\nreclaimPolicy: Retain\nvolumeBindingMode: Immediate\n";
    let fast: k8s_openapi::api::storage::v1::StorageClass = serde_yaml::from_str(fast).unwrap();
    api.apply(
        &[Action::Create(Object::StorageClass(Box::new(volumes::default_class()))), Action::Create(Object::StorageClass(Box::new(fast)))],
        t(0),
    );
    let claim = |name: &str, class: Option<&str>| {
        let class = class.map(|c| format!("  storageClassName: {c}\n")).unwrap_or_default();
        let yaml = format!("metadata: {{name: {name}, namespace: default}}\nspec:\n  accessModes: [ReadWriteOnce]\n{class}  resources: {{requests: {{storage: 5Gi}}}}\n");
        let c: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_yaml::from_str(&yaml).unwrap();
        Action::Create(Object::PersistentVolumeClaim(Box::new(c)))
    };
    api.apply(&[claim("now", Some("fast")), claim("lazy", None), claim("lost", Some("gold"))], t(0));
    api.settle(&mut sim, t(1));
    let phase = |api: &FakeApi, name: &str| {
        let c = api.state.claims.iter().find(|c| c.metadata.name.as_deref() == Some(name)).unwrap();
        (c.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default(), c.spec.as_ref().unwrap().volume_name.clone())
    };
    // Immediate binds at once; the default class waits for a consumer; an unknown class says so.
    let (p, volume) = phase(&api, "now");
    assert_eq!(p, "Bound");
    let pv = api.state.volumes.iter().find(|v| v.metadata.name == volume).unwrap();
    let spec = pv.spec.as_ref().unwrap();
    assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "5Gi");
    assert_eq!((spec.storage_class_name.as_deref(), spec.persistent_volume_reclaim_policy.as_deref()), (Some("fast"), Some("Retain")));
    assert_eq!(phase(&api, "lazy"), ("Pending".to_string(), None));
    assert_eq!(events_with_reason(&api, "ProvisioningFailed"), ["storageclass.storage.k8s.io \"gold\" not found"]);

    // A StatefulSet's pods mount their claims, and then the default class provisions them.
    api.apply(&[Action::Create(Object::StatefulSet(Box::new(statefulset(&STORE.replace("replicas: 3", "replicas: 1")))))], t(1));
    api.settle(&mut sim, t(2));
    let (p, _) = phase(&api, "data-store-0");
    assert_eq!(p, "Bound");
    let class = api
        .state
        .claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("data-store-0"))
        .unwrap()
        .spec
        .clone()
        .unwrap()
        .storage_class_name;
    assert_eq!(class.as_deref(), Some("standard"), "the default class is written into the claim");

    // A volume whose claim goes is deleted or released, by its class's policy.
    let now = api.state.claims.iter().find(|c| c.metadata.name.as_deref() == Some("now")).unwrap().clone();
    api.apply(
        &[Action::Delete { target: ObjectRef::from_meta(Kind::PersistentVolumeClaim, &now.metadata), grace_period_seconds: None }],
        t(3),
    );
    api.settle(&mut sim, t(3));
    let pv = api.state.volumes.iter().find(|v| v.metadata.name == volume).unwrap();
    assert_eq!(pv.status.as_ref().unwrap().phase.as_deref(), Some("Released"));
}

#[test]
fn a_daemonset_runs_a_pod_on_every_node_that_fits() {
    let def = cluster(
        "name: mixed\nnodes: [{count: 2, cpu: '4', memory: 8Gi, labels: {disk: ssd}}, {count: 1, cpu: '4', memory: 8Gi}]\nstartupDelay: 1s",
    );
    let (mut api, mut sim) = start(def);
    let yaml = "metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {disk: ssd}
      containers: [{name: agent, image: registry.example.com/agent:1.0}]
";
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_yaml::from_str(yaml).unwrap();
    api.apply(&[Action::Create(Object::DaemonSet(Box::new(ds)))], t(0));
    run_until(&mut api, &mut sim, t(0), ms(500), 20, |api, _| api.state.daemonsets[0].status.as_ref().is_some_and(|s| s.number_ready == 2));
    let s = api.state.daemonsets[0].status.clone().unwrap();
    assert_eq!((s.desired_number_scheduled, s.current_number_scheduled, s.number_available, s.number_misscheduled), (2, 2, Some(2), 0));
    let mut nodes: Vec<String> = api.live_pods().iter().map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap()).collect();
    nodes.sort();
    let ssd: Vec<String> = api
        .state
        .nodes
        .iter()
        .filter(|n| n.metadata.labels.as_ref().unwrap().get("disk").is_some())
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(nodes, ssd, "one pod on each ssd node, none elsewhere");
}

#[test]
fn an_indexed_job_runs_each_index_once_and_a_finished_job_goes_after_its_ttl() {
    let (mut api, mut sim) = start(east());
    let indexed = JOB.replace(
        "completions: 2\n  parallelism: 1",
        "completions: 3\n  parallelism: 2\n  completionMode: Indexed\n  ttlSecondsAfterFinished: 5",
    );
    api.create_job(job("work", &indexed), t(0));
    api.settle(&mut sim, t(0));
    let indexes = |api: &FakeApi| {
        let mut i: Vec<String> =
            api.live_pods().iter().map(|p| p.metadata.annotations.as_ref().unwrap()[job::COMPLETION_INDEX].clone()).collect();
        i.sort();
        i
    };
    assert_eq!(indexes(&api), ["0", "1"], "the lowest indexes first, parallelism at a time");
    let p0 = api.live_pods().into_iter().find(|p| p.metadata.annotations.as_ref().unwrap()[job::COMPLETION_INDEX] == "0").unwrap();
    assert_eq!(p0.spec.as_ref().unwrap().hostname.as_deref(), Some("work-0"));
    assert!(p0.spec.as_ref().unwrap().containers[0].env.iter().flatten().any(|e| e.name == "JOB_COMPLETION_INDEX"));
    let done = run_until(&mut api, &mut sim, t(0), ms(1000), 30, |api, _| api.job_status("work").completion_time.is_some());
    assert_eq!(api.job_status("work").completed_indexes.as_deref(), Some("0-2"));
    assert_eq!(api.state.pods.len(), 3, "each index ran once");
    // Five seconds after it finished, the Job goes, and its pods with it.
    api.settle(&mut sim, done + SignedDuration::from_secs(4));
    assert_eq!(api.state.jobs.len(), 1);
    api.settle(&mut sim, done + SignedDuration::from_secs(5));
    assert!(api.state.jobs.is_empty() && api.state.pods.is_empty());
}
