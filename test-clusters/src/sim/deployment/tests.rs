//! Deployment controller tests: one sync at a time, against hand-set ReplicaSet states.

use std::collections::BTreeSet;

use super::util::{self, reason};
use super::*;
use crate::sim::testutil::*;
use k8s_openapi::api::apps::v1::ReplicaSetStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Runs one deployment sync over the API's state.
fn sync_once(api: &FakeApi, name: &str, now: Timestamp) -> DeploymentSync {
    let d = api.deployment(name);
    let uid = d.metadata.uid.as_deref();
    let replica_sets: Vec<&ReplicaSet> = api.state.replicasets.iter().filter(|rs| pod::controller_uid(&rs.metadata) == uid).collect();
    let rs_uids: BTreeSet<&str> = replica_sets.iter().filter_map(|rs| rs.metadata.uid.as_deref()).collect();
    let pods = api.state.pods.iter().filter(|p| pod::controller_uid(&p.metadata).is_some_and(|u| rs_uids.contains(u))).collect();
    let taken_names = api.state.replicasets.iter().filter_map(|rs| rs.metadata.name.as_deref()).collect();
    sync(&DeploymentInput { deployment: d, replica_sets, pods, taken_names }, now, &mut Recorder::new(now))
}

/// Syncs and applies.
fn step(api: &mut FakeApi, name: &str, now: Timestamp) -> DeploymentSync {
    let out = sync_once(api, name, now);
    api.apply(&out.actions, now);
    out
}

fn rs_named<'a>(api: &'a FakeApi, name: &str) -> &'a ReplicaSet {
    api.state.replicasets.iter().find(|rs| rs.metadata.name.as_deref() == Some(name)).unwrap()
}

/// Sets a ReplicaSet's status as its controller would report `n` ready and available pods.
fn report(api: &mut FakeApi, rs_name: &str, actual: i32, available: i32) {
    let rs = api.state.replicasets.iter_mut().find(|rs| rs.metadata.name.as_deref() == Some(rs_name)).unwrap();
    let nz = |n: i32| (n != 0).then_some(n);
    rs.status = Some(ReplicaSetStatus {
        replicas: actual,
        ready_replicas: nz(available),
        available_replicas: nz(available),
        fully_labeled_replicas: nz(actual),
        observed_generation: rs.metadata.generation,
        ..Default::default()
    });
}

fn new_rs_name(api: &FakeApi, name: &str) -> String {
    let d = api.deployment(name);
    let template = &d.spec.as_ref().unwrap().template;
    api.state
        .replicasets
        .iter()
        .find(|rs| equal_ignore_hash(rs.spec.as_ref().unwrap().template.as_ref().unwrap(), template))
        .and_then(|rs| rs.metadata.name.clone())
        .unwrap()
}

fn sizes(api: &FakeApi) -> Vec<(String, i32)> {
    let mut v: Vec<_> = api.state.replicasets.iter().map(|rs| (rs.metadata.name.clone().unwrap(), util::rs_replicas(rs))).collect();
    v.sort();
    v
}

fn condition(api: &FakeApi, name: &str, type_: &str) -> (String, String, String) {
    let status = api.deployment_status(name);
    let c = util::get_condition(&status, type_).unwrap_or_else(|| panic!("no {type_} condition in {status:#?}"));
    (c.status.clone(), c.reason.clone().unwrap(), c.message.clone().unwrap())
}

#[test]
fn a_new_deployment_gets_a_replica_set_and_status() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(3).build(), t(0));
    let out = step(&mut api, "web", t(0));

    assert_eq!(api.state.replicasets.len(), 1);
    let rs = &api.state.replicasets[0];
    let name = rs.metadata.name.clone().unwrap();
    let hash = name.strip_prefix("web-").unwrap();
    assert!(!hash.is_empty() && hash.len() <= 10, "{name}");
    assert_eq!(rs.metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH_LABEL], hash);
    assert_eq!(rs.metadata.labels.as_ref().unwrap()["app"], "web");
    let spec = rs.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.selector.match_labels.as_ref().unwrap()[POD_TEMPLATE_HASH_LABEL], hash);
    assert_eq!(spec.template.as_ref().unwrap().metadata.as_ref().unwrap().labels.as_ref().unwrap()[POD_TEMPLATE_HASH_LABEL], hash);
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller, owner.block_owner_deletion),
        ("Deployment", "web", Some(true), Some(true))
    );
    assert_eq!(util::annotation(rs, util::REVISION_ANNOTATION), Some("1"));
    assert_eq!(util::annotation(rs, util::DESIRED_REPLICAS_ANNOTATION), Some("3"));
    // 25% of 3 rounds up to a surge of 1.
    assert_eq!(util::annotation(rs, util::MAX_REPLICAS_ANNOTATION), Some("4"));

    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {name} from 0 to 3")]);
    let d = api.deployment("web");
    assert_eq!(d.metadata.annotations.as_ref().unwrap()[util::REVISION_ANNOTATION], "1");
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.replicas, None);
    let types: Vec<&str> = status.conditions.as_ref().unwrap().iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Progressing", "Available"]);
    assert_eq!(
        condition(&api, "web", "Progressing"),
        ("True".into(), reason::NEW_RS_CREATED.into(), format!("Created new replica set \"{name}\""))
    );
    assert_eq!(
        condition(&api, "web", "Available"),
        ("False".into(), reason::MINIMUM_REPLICAS_UNAVAILABLE.into(), "Deployment does not have minimum availability.".into())
    );
    assert_eq!(status.unavailable_replicas, Some(3));
}

#[test]
fn status_follows_the_replica_set_to_completion() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(3).build(), t(0));
    step(&mut api, "web", t(0));
    let name = new_rs_name(&api, "web");

    report(&mut api, &name, 3, 1);
    step(&mut api, "web", t(5));
    let s = api.deployment_status("web");
    assert_eq!(
        (s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas, s.unavailable_replicas),
        (Some(3), Some(3), Some(1), Some(1), Some(2))
    );
    assert_eq!(
        condition(&api, "web", "Progressing"),
        ("True".into(), reason::RS_UPDATED.into(), format!("ReplicaSet \"{name}\" is progressing."))
    );
    let p = util::get_condition(&s, "Progressing").unwrap();
    // Still True: the transition time is the creation's, the update time is now.
    assert_eq!((p.last_transition_time.as_ref().unwrap().0, p.last_update_time.as_ref().unwrap().0), (t(0), t(5)));
    assert_eq!(condition(&api, "web", "Available").0, "False");

    report(&mut api, &name, 3, 3);
    step(&mut api, "web", t(9));
    let s = api.deployment_status("web");
    assert_eq!((s.available_replicas, s.unavailable_replicas), (Some(3), None));
    assert_eq!(
        condition(&api, "web", "Available"),
        ("True".into(), reason::MINIMUM_REPLICAS_AVAILABLE.into(), "Deployment has minimum availability.".into())
    );
    assert_eq!(
        condition(&api, "web", "Progressing"),
        ("True".into(), reason::NEW_RS_AVAILABLE.into(), format!("ReplicaSet \"{name}\" has successfully progressed."))
    );
    let types: Vec<String> = s.conditions.unwrap().into_iter().map(|c| c.type_).collect();
    assert_eq!(types, ["Available", "Progressing"]);
    let available = util::get_condition(&api.deployment_status("web"), "Available").cloned().unwrap();
    assert_eq!(available.last_transition_time.unwrap().0, t(9));

    // Nothing changed: no write, no event.
    let again = sync_once(&api, "web", t(100));
    assert!(again.actions.is_empty(), "{:#?}", again.actions);
    assert_eq!(again.wake_at, None);
}

#[test]
fn rolling_update_surges_then_retires_the_old_replica_set() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(4).rolling(IntOrString::Int(1), IntOrString::Int(0)).build(), t(0));
    step(&mut api, "web", t(0));
    let old = new_rs_name(&api, "web");
    report(&mut api, &old, 4, 4);
    step(&mut api, "web", t(1));

    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    let out = step(&mut api, "web", t(10));
    let new = new_rs_name(&api, "web");
    assert_ne!(new, old);
    // One surge pod; the old ReplicaSet keeps all 4 until the new one has available pods.
    assert_eq!(sizes(&api), {
        let mut v = vec![(old.clone(), 4), (new.clone(), 1)];
        v.sort();
        v
    });
    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {new} from 0 to 1")]);
    assert_eq!(util::annotation(rs_named(&api, &new), util::REVISION_ANNOTATION), Some("2"));
    assert_eq!(api.deployment("web").metadata.annotations.as_ref().unwrap()[util::REVISION_ANNOTATION], "2");
    assert_eq!(condition(&api, "web", "Progressing").1, reason::NEW_RS_CREATED);

    // The new pod exists but is not available: nothing may go.
    report(&mut api, &new, 1, 0);
    let out = step(&mut api, "web", t(11));
    assert!(event_messages(&out.actions).is_empty());
    assert_eq!(util::rs_replicas(rs_named(&api, &old)), 4);

    // It is available: one old replica goes, then the new ReplicaSet grows by one.
    report(&mut api, &new, 1, 1);
    let out = step(&mut api, "web", t(12));
    assert_eq!(event_messages(&out.actions), [format!("Scaled down replica set {old} from 4 to 3")]);
    report(&mut api, &old, 3, 3);
    let out = step(&mut api, "web", t(13));
    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {new} from 1 to 2")]);
}

#[test]
fn recreate_empties_the_old_replica_set_before_creating_the_new() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(2).recreate().build(), t(0));
    step(&mut api, "web", t(0));
    let old = new_rs_name(&api, "web");
    assert_eq!(util::annotation(rs_named(&api, &old), util::MAX_REPLICAS_ANNOTATION), Some("2"));
    report(&mut api, &old, 2, 2);
    step(&mut api, "web", t(1));

    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    let out = step(&mut api, "web", t(10));
    assert_eq!(event_messages(&out.actions), [format!("Scaled down replica set {old} from 2 to 0")]);
    assert_eq!(api.state.replicasets.len(), 1, "no new ReplicaSet while old pods run");

    // The old ReplicaSet still reports pods: keep waiting.
    let out = step(&mut api, "web", t(11));
    assert!(!out.actions.iter().any(|a| matches!(a, Action::Create(_))));

    report(&mut api, &old, 0, 0);
    let out = step(&mut api, "web", t(12));
    let new = new_rs_name(&api, "web");
    assert_ne!(new, old);
    assert_eq!(util::rs_replicas(rs_named(&api, &new)), 2);
    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {new} from 0 to 2")]);
}

#[test]
fn paused_deployments_scale_but_do_not_roll_out() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(2).build(), t(0));
    step(&mut api, "web", t(0));
    let rs = new_rs_name(&api, "web");
    report(&mut api, &rs, 2, 2);
    step(&mut api, "web", t(1));

    api.update_deployment("web", |s| {
        s.paused = Some(true);
        s.replicas = Some(5);
        s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into());
    });
    let out = step(&mut api, "web", t(10));
    assert_eq!(api.state.replicasets.len(), 1, "no rollout while paused");
    assert_eq!(util::rs_replicas(rs_named(&api, &rs)), 5);
    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {rs} from 2 to 5")]);
    assert_eq!(condition(&api, "web", "Progressing"), ("Unknown".into(), reason::PAUSED.into(), "Deployment is paused".into()));
    assert_eq!(out.wake_at, None, "no progress deadline while paused");

    api.update_deployment("web", |s| s.paused = None);
    step(&mut api, "web", t(20));
    assert_eq!(api.state.replicasets.len(), 2, "resuming starts the rollout");
    let (status, reason_, _) = condition(&api, "web", "Progressing");
    // Resumed, then the new ReplicaSet replaces the Unknown condition.
    assert_eq!((status.as_str(), reason_.as_str()), ("True", reason::NEW_RS_CREATED));
}

#[test]
fn scaling_mid_rollout_is_proportional() {
    // The example from the Kubernetes documentation: 10 replicas, maxSurge 3, maxUnavailable 2,
    // a rollout stuck with 8 old and 5 new; scaling to 15 adds 3 to the old and 2 to the new.
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(10).rolling(IntOrString::Int(3), IntOrString::Int(2)).build(), t(0));
    step(&mut api, "web", t(0));
    let old = new_rs_name(&api, "web");
    report(&mut api, &old, 10, 10);
    step(&mut api, "web", t(1));
    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:bad".into()));
    step(&mut api, "web", t(2));
    let new = new_rs_name(&api, "web");
    report(&mut api, &new, 3, 0);
    step(&mut api, "web", t(3));
    // Drive the sizes to 8 old / 5 new as in the docs.
    for rs in api.state.replicasets.iter_mut() {
        let size = if rs.metadata.name.as_deref() == Some(old.as_str()) { 8 } else { 5 };
        rs.spec.as_mut().unwrap().replicas = Some(size);
        util::set_replicas_annotations(rs, 10, 13);
    }
    report(&mut api, &old, 8, 8);
    report(&mut api, &new, 5, 0);

    api.update_deployment("web", |s| s.replicas = Some(15));
    let out = step(&mut api, "web", t(10));
    assert_eq!(util::rs_replicas(rs_named(&api, &old)), 11);
    assert_eq!(util::rs_replicas(rs_named(&api, &new)), 7);
    let msgs = event_messages(&out.actions);
    assert!(msgs.contains(&format!("Scaled up replica set {old} from 8 to 11")), "{msgs:?}");
    assert!(msgs.contains(&format!("Scaled up replica set {new} from 5 to 7")), "{msgs:?}");
    for name in [&old, &new] {
        assert_eq!(util::annotation(rs_named(&api, name), util::DESIRED_REPLICAS_ANNOTATION), Some("15"));
        assert_eq!(util::annotation(rs_named(&api, name), util::MAX_REPLICAS_ANNOTATION), Some("18"));
    }
}

#[test]
fn scale_down_to_zero_and_back() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(3).build(), t(0));
    step(&mut api, "web", t(0));
    let rs = new_rs_name(&api, "web");
    report(&mut api, &rs, 3, 3);
    step(&mut api, "web", t(1));
    api.update_deployment("web", |s| s.replicas = Some(0));
    let out = step(&mut api, "web", t(2));
    assert_eq!(event_messages(&out.actions), [format!("Scaled down replica set {rs} from 3 to 0")]);
    report(&mut api, &rs, 0, 0);
    step(&mut api, "web", t(3));
    // Zero of zero is complete and available.
    assert_eq!(condition(&api, "web", "Available").0, "True");
    api.update_deployment("web", |s| s.replicas = Some(2));
    let out = step(&mut api, "web", t(4));
    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {rs} from 0 to 2")]);
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(1).history(1).build(), t(0));
    let mut names = Vec::new();
    for (i, image) in ["a", "b", "c"].iter().enumerate() {
        let now = t(100 * i as i64);
        api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some(format!("nginx:{image}")));
        step(&mut api, "web", now);
        let name = new_rs_name(&api, "web");
        names.push(name.clone());
        // Let the rollout finish: the new one available, the others scaled away.
        for _ in 0..5 {
            for rs in api.state.replicasets.clone() {
                let n = rs.metadata.name.clone().unwrap();
                let size = util::rs_replicas(&rs);
                report(&mut api, &n, size, size);
            }
            step(&mut api, "web", now + SignedDuration::from_secs(1));
        }
    }
    let left: Vec<String> = api.state.replicasets.iter().map(|rs| rs.metadata.name.clone().unwrap()).collect();
    // The newest plus one old ReplicaSet (revision 2) survive.
    assert_eq!(left.iter().collect::<BTreeSet<_>>(), [&names[1], &names[2]].into_iter().collect::<BTreeSet<_>>());
}

#[test]
fn rolling_back_reuses_the_old_replica_set_with_a_new_revision() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(1).build(), t(0));
    step(&mut api, "web", t(0));
    let first = new_rs_name(&api, "web");
    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    step(&mut api, "web", t(10));
    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into()));
    step(&mut api, "web", t(20));
    assert_eq!(new_rs_name(&api, "web"), first);
    assert_eq!(api.state.replicasets.len(), 2);
    let rs = rs_named(&api, &first);
    assert_eq!(util::annotation(rs, util::REVISION_ANNOTATION), Some("3"));
    assert_eq!(util::annotation(rs, util::REVISION_HISTORY_ANNOTATION), Some("1"));
    assert_eq!(api.deployment("web").metadata.annotations.as_ref().unwrap()[util::REVISION_ANNOTATION], "3");
}

#[test]
fn no_progress_within_the_deadline_times_out() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(2).progress_deadline(30).build(), t(0));
    let out = step(&mut api, "web", t(0));
    // Look again just after the deadline.
    assert_eq!(out.wake_at, Some(t(31)));
    let name = new_rs_name(&api, "web");
    let out = step(&mut api, "web", t(30));
    assert!(out.actions.is_empty(), "not yet: {:?}", out.actions);
    step(&mut api, "web", t(31));
    assert_eq!(
        condition(&api, "web", "Progressing"),
        ("False".into(), reason::TIMED_OUT.into(), format!("ReplicaSet \"{name}\" has timed out progressing."))
    );
    let out = sync_once(&api, "web", t(40));
    assert!(out.actions.is_empty());
    assert_eq!(out.wake_at, None);

    // Progress afterwards makes it progressing again.
    report(&mut api, &name, 2, 1);
    step(&mut api, "web", t(50));
    assert_eq!(condition(&api, "web", "Progressing").1, reason::RS_UPDATED);
}

#[test]
fn a_hash_collision_bumps_the_collision_count() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(1).build(), t(0));
    let template = api.deployment("web").spec.as_ref().unwrap().template.clone();
    let squatter = format!("web-{}", compute_hash(&template, None));
    // Same name, different template, not owned by the Deployment.
    let mut other = ReplicaSet::test(&squatter).build();
    other.spec.as_mut().unwrap().template.as_mut().unwrap().spec.as_mut().unwrap().containers[0].image = Some("httpd".into());
    api.state.replicasets.push(other);
    let out = step(&mut api, "web", t(0));
    assert!(!out.actions.iter().any(|a| matches!(a, Action::Create(_))));
    assert_eq!(api.deployment_status("web").collision_count, Some(1));
    step(&mut api, "web", t(1));
    let uid = api.deployment("web").metadata.uid.clone();
    let created: Vec<_> = api
        .state
        .replicasets
        .iter()
        .filter(|rs| pod::controller_uid(&rs.metadata) == uid.as_deref())
        .map(|rs| rs.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(created, [format!("web-{}", compute_hash(&template, Some(1)))]);
}

#[test]
fn an_empty_selector_is_refused_once_per_generation() {
    let mut d = Deployment::test("web").build();
    d.spec.as_mut().unwrap().selector = Default::default();
    let mut api = FakeApi::default();
    api.create_deployment(d, t(0));
    let out = step(&mut api, "web", t(0));
    assert_eq!(event_messages(&out.actions), ["This deployment is selecting all pods. A non-empty selector is required."]);
    assert!(api.state.replicasets.is_empty());
    assert!(sync_once(&api, "web", t(1)).actions.is_empty());
}

#[test]
fn min_ready_seconds_reaches_the_replica_set() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(1).min_ready_seconds(5).build(), t(0));
    step(&mut api, "web", t(0));
    let name = new_rs_name(&api, "web");
    assert_eq!(rs_named(&api, &name).spec.as_ref().unwrap().min_ready_seconds, Some(5));
    api.update_deployment("web", |s| s.min_ready_seconds = Some(9));
    let out = step(&mut api, "web", t(1));
    assert!(out.actions.iter().any(|a| matches!(a, Action::Patch { .. })));
    assert_eq!(rs_named(&api, &name).spec.as_ref().unwrap().min_ready_seconds, Some(9));
}

#[test]
fn deleted_deployments_only_report_status() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(2).build(), t(0));
    step(&mut api, "web", t(0));
    let name = new_rs_name(&api, "web");
    report(&mut api, &name, 2, 2);
    api.state.deployments[0].metadata.deletion_timestamp = Some(Time(t(5)));
    api.update_deployment("web", |s| s.replicas = Some(9));
    let out = step(&mut api, "web", t(6));
    assert!(event_messages(&out.actions).is_empty());
    assert_eq!(util::rs_replicas(rs_named(&api, &name)), 2);
    assert_eq!(api.deployment_status("web").available_replicas, Some(2));
}

#[test]
fn unhealthy_old_replicas_are_removed_first() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(3).rolling(IntOrString::Int(1), IntOrString::Int(1)).build(), t(0));
    step(&mut api, "web", t(0));
    let old = new_rs_name(&api, "web");
    report(&mut api, &old, 3, 3);
    step(&mut api, "web", t(1));
    api.update_deployment("web", |s| s.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into()));
    step(&mut api, "web", t(2));
    let new = new_rs_name(&api, "web");
    // Surge 1 and one unavailable allowed: new 0→1 and old 3→2 at once.
    assert_eq!(sizes(&api), {
        let mut v = vec![(old.clone(), 2), (new.clone(), 1)];
        v.sort();
        v
    });
    // The new ReplicaSet grows first while it can.
    report(&mut api, &old, 2, 2);
    report(&mut api, &new, 1, 0);
    let out = step(&mut api, "web", t(3));
    assert_eq!(event_messages(&out.actions), [format!("Scaled up replica set {new} from 1 to 2")]);
    // One old pod broke. Three pods are available where two must be: the broken old replica
    // goes first (it costs no availability), then one healthy old replica.
    report(&mut api, &old, 2, 1);
    report(&mut api, &new, 2, 2);
    let out = step(&mut api, "web", t(4));
    assert_eq!(
        event_messages(&out.actions),
        [format!("Scaled down replica set {old} from 2 to 1"), format!("Scaled down replica set {old} from 1 to 0")]
    );
}

#[test]
fn an_existing_new_replica_set_is_found_not_recreated() {
    let mut api = FakeApi::default();
    api.create_deployment(Deployment::test("web").replicas(1).build(), t(0));
    step(&mut api, "web", t(0));
    let name = new_rs_name(&api, "web");
    // Status lost (say, restored from a backup without it): the ReplicaSet is found again.
    api.state.deployments[0].status = None;
    let out = step(&mut api, "web", t(5));
    assert!(!out.actions.iter().any(|a| matches!(a, Action::Create(_))));
    assert_eq!(api.state.replicasets.len(), 1);
    assert_eq!(
        condition(&api, "web", "Progressing"),
        ("True".into(), reason::FOUND_NEW_RS.into(), format!("Found new replica set \"{name}\""))
    );
}
