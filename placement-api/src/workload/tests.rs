//! Table tests of the workload model's rules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;

fn entry(counts: [i32; 4], observed: bool, conditions: &[(&str, &str, &str)]) -> ClusterSyncStatus {
    let [replicas, updated_replicas, ready_replicas, available_replicas] = counts;
    ClusterSyncStatus {
        name: "east".into(),
        replicas,
        updated_replicas,
        ready_replicas,
        available_replicas,
        observed,
        conditions: conditions
            .iter()
            .map(|(t, s, r)| Condition {
                type_: (*t).into(),
                status: (*s).into(),
                reason: (*r).into(),
                message: String::new(),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn each_kind_reads_its_copies_reports_by_its_own_rule() {
    use CopyState::*;
    use WorkloadKind::*;
    let done = ("Progressing", "True", "NewReplicaSetAvailable");
    let rolling = ("Progressing", "True", "ReplicaSetUpdated");
    let deadline = ("Progressing", "False", "ProgressDeadlineExceeded");
    let cases: &[(WorkloadKind, ClusterSyncStatus, i32, CopyState)] = &[
        (Deployment, entry([3, 3, 3, 3], true, &[done]), 3, Available),
        (Deployment, entry([3, 3, 3, 3], true, &[rolling]), 3, Progressing),
        (Deployment, entry([3, 3, 3, 3], false, &[done]), 3, Progressing),
        (Deployment, entry([4, 3, 3, 3], true, &[done]), 3, Progressing),
        (Deployment, entry([3, 1, 3, 3], true, &[deadline]), 3, Stalled("ProgressDeadlineExceeded".into())),
        (Deployment, entry([0, 0, 0, 0], true, &[]), 0, Available),
        (StatefulSet, entry([3, 3, 3, 3], true, &[]), 3, Available),
        (StatefulSet, entry([3, 3, 2, 2], true, &[]), 3, Progressing),
        (StatefulSet, entry([3, 2, 3, 3], true, &[]), 3, Progressing),
        // A DaemonSet's share is its cluster's nodes, whatever was assigned.
        (DaemonSet, entry([5, 5, 5, 5], true, &[]), 1, Available),
        (DaemonSet, entry([5, 5, 4, 4], true, &[]), 1, Progressing),
        (Job, entry([0, 0, 0, 0], true, &[("Complete", "True", "CompletionsReached")]), 1, Complete),
        (Job, entry([0, 0, 0, 0], true, &[("Failed", "True", "BackoffLimitExceeded")]), 1, Failed("BackoffLimitExceeded".into())),
        (Job, entry([1, 0, 1, 0], true, &[]), 1, Progressing),
        // Never copied, so no report of a copy means anything for it.
        (CronJob, entry([0, 0, 0, 0], true, &[]), 1, Progressing),
    ];
    for (kind, e, share, want) in cases {
        assert_eq!(&copy_state(*kind, e, *share), want, "{kind:?} with share {share}: {e:?}");
    }
}

#[test]
fn kinds_are_found_by_api_version_and_by_what_kubectl_accepts() {
    for k in &KINDS {
        assert_eq!(k.kind.describe().name, k.name, "KINDS is in the order of WorkloadKind");
        assert_eq!(WorkloadKind::of(&k.api_version(), k.name), Some(k.kind));
    }
    assert_eq!(WorkloadKind::of("apps/v1", "ReplicaSet"), None);
    assert_eq!(WorkloadKind::of("batch/v1beta1", "CronJob"), None);
    for (name, kind) in [
        ("deploy", WorkloadKind::Deployment),
        ("deployments.apps", WorkloadKind::Deployment),
        ("sts", WorkloadKind::StatefulSet),
        ("StatefulSet", WorkloadKind::StatefulSet),
        ("ds", WorkloadKind::DaemonSet),
        ("jobs.batch", WorkloadKind::Job),
        ("cronjob", WorkloadKind::CronJob),
    ] {
        assert_eq!(WorkloadKind::of_resource(name), Some(kind), "{name}");
    }
    assert_eq!(WorkloadKind::of_resource("jobs.apps"), None);
    assert_eq!(WorkloadKind::of_resource("pods"), None);
}

#[test]
fn the_replicas_placed_come_from_each_kinds_own_fields() {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch};
    let v = |j: serde_json::Value| j;
    let deploy: apps::Deployment =
        serde_json::from_value(v(serde_json::json!({"spec": {"replicas": 4, "selector": {}, "template": {}}}))).unwrap();
    let sts: apps::StatefulSet = serde_json::from_value(v(serde_json::json!({"spec": {"selector": {}, "template": {}}}))).unwrap();
    let ds: apps::DaemonSet = serde_json::from_value(v(serde_json::json!({"spec": {"selector": {}, "template": {}}}))).unwrap();
    let job: batch::Job =
        serde_json::from_value(v(serde_json::json!({"spec": {"parallelism": 5, "completions": 2, "template": {}}}))).unwrap();
    let cron: batch::CronJob = serde_json::from_value(v(
        serde_json::json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"parallelism": 3, "template": {}}}}}),
    ))
    .unwrap();
    assert_eq!([deploy.replicas(), sts.replicas(), ds.replicas(), job.replicas(), cron.replicas()], [4, 1, 1, 2, 3]);
    assert!(cron.pod_template().is_some() && job.pod_template().is_some());
}

#[test]
fn a_cronjob_is_not_placed_and_its_state_is_its_schedules() {
    use k8s_openapi::api::batch::v1 as batch;
    assert!(KINDS.iter().all(|k| k.placed() == (k.kind != WorkloadKind::CronJob)), "only the CronJob runs in the workspace");
    let cron = |suspend: bool, active: usize| -> batch::CronJob {
        let active: Vec<_> = (0..active).map(|i| serde_json::json!({"name": format!("r-{i}")})).collect();
        serde_json::from_value(serde_json::json!({
            "spec": {"schedule": "* * * * *", "suspend": suspend, "jobTemplate": {"spec": {"template": {}}}},
            "status": {"active": active},
        }))
        .unwrap()
    };
    let state = |cj: &batch::CronJob| crate::status::in_workspace_state(&cj.headline(cj.status()));
    assert_eq!(state(&cron(false, 2)), (crate::status::WorkloadState::Available, None));
    assert_eq!(cron(false, 2).headline(cron(false, 2).status()).ready, 2, "its running Jobs count");
    let (suspended, why) = state(&cron(true, 0));
    assert_eq!(suspended, crate::status::WorkloadState::Progressing);
    assert!(why.unwrap_or_default().contains("spec.suspend"));
}

#[test]
fn a_copy_shows_ready_over_its_share_and_a_job_its_successes_over_its_completions() {
    use WorkloadKind::*;
    let job = |succeeded, completions| ClusterSyncStatus {
        batch: Some(crate::BatchReport { succeeded, completions, ..Default::default() }),
        ..entry([0, 0, 0, 0], true, &[])
    };
    // The kind, its copy's report, its share there, and what the copy shows.
    type Case = (WorkloadKind, Option<ClusterSyncStatus>, i32, (i32, i32));
    let cases: &[Case] = &[
        (Deployment, Some(entry([3, 3, 2, 2], true, &[])), 3, (2, 3)),
        (StatefulSet, Some(entry([3, 3, 3, 3], true, &[])), 3, (3, 3)),
        // A DaemonSet's share is the nodes its copy reports.
        (DaemonSet, Some(entry([4, 4, 1, 1], true, &[])), 1, (1, 4)),
        (Deployment, None, 2, (0, 2)),
        // A finished Job has no pod ready: it shows its successes, as its READY does.
        (Job, Some(job(1, Some(1))), 1, (1, 1)),
        (Job, Some(job(3, Some(5))), 2, (3, 5)),
        // From a syncer that does not report completions: the share.
        (Job, Some(job(0, None)), 1, (0, 1)),
        (Job, None, 1, (0, 1)),
    ];
    for (kind, e, share, want) in cases {
        assert_eq!(copy_counts(*kind, e.as_ref(), *share), *want, "{kind:?} {e:?} share {share}");
    }
}
