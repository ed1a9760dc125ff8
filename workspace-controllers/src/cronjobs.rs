//! CronJobs, run in the workspace: a CronJob's schedule makes its Jobs here, and each
//! Job is placed as a Job.
//!
//! A schedule held by a cluster could fire twice: once on the cluster a failover moved
//! it to, and once more on the old cluster when it comes back, before its syncer can
//! remove the copy there. So no cluster holds one. This controller runs every
//! workspace's schedules under one Lease, by the rule the clusters' own cronjob
//! controllers follow ([`cron_schedule::plan`]): at each due time it creates the Job
//! `<cronjob>-<minutes>` in the workspace (its name makes a second create of the same
//! time fail, whoever tries), deletes what `Replace` and the history limits say, and
//! writes `active`, `lastScheduleTime` and `lastSuccessfulTime`. The scheduler places
//! the Job on one cluster, under the CronJob's Placement; if that cluster is lost while
//! the Job runs, the Job runs again elsewhere, as any Job does; the schedule itself
//! never moves.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::Client;
use placement_api::workload::cron_schedule::{self, Plan};
use serde_json::json;

use runtime::cache::{self, Change, ObjKey, Workspace};
use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{failed, is_already_exists, is_conflict, is_not_found, Failed};
use runtime::events::{Recorder, Settings, Type};

/// The field manager of what this controller writes.
pub const FIELD_MANAGER: &str = "flotilla-cronjobs";

/// The key of the CronJob that controls `job`, if one does.
fn owner(key: &ObjKey, job: &Job) -> Option<ObjKey> {
    let o = job.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true) && o.kind == "CronJob")?;
    o.api_version.starts_with("batch/").then(|| ObjKey::new(&key.workspace, &key.namespace, &o.name))
}

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let mut controller = Controller::<ObjKey>::new("cronjobs");
    let tx = controller.trigger();
    let cronjobs = cache::spawn(
        Api::<CronJob>::all(clients::workspace(&base, "*")),
        watcher::Config::default(),
        Workspace::Annotated,
        "cronjobs",
        move |c: Change<CronJob>| {
            let _ = tx.send(c.key);
        },
    );
    // Each Job is also kept under its CronJob's key, so that a pass finds a CronJob's
    // Jobs without looking at every Job; a Job's changes queue its CronJob.
    let tx = controller.trigger();
    let jobs = cache::spawn_grouped(
        Api::<Job>::all(clients::workspace(&base, "*")),
        watcher::Config::default(),
        |j: &Job| ObjKey::of(&j.metadata, Workspace::Annotated),
        Some(Box::new(owner)),
        move |c: Change<Job>| match owner(&c.key, &c.seen) {
            Some(cj) => tx.send(cj).is_ok(),
            None => !tx.is_closed(),
        },
        "jobs",
    );
    let recorder = Arc::new(Recorder::new(
        base.clone(),
        Settings { component: "cronjob-controller", instance: FIELD_MANAGER.into(), queue: 1_000, writers: 2, dropped: None },
    ));
    let c = cronjobs.clone();
    controller.resync(resync, move || c.keys());
    controller
        .run(|key: ObjKey| {
            let cj = cronjobs.get(&key);
            let (jobs, base, recorder) = (jobs.clone(), base.clone(), recorder.clone());
            async move {
                let Some(cj) = cj else { return Ok::<_, Failed>(Next::Done) };
                // Until the first list, a Job not seen may only be unseen yet: the
                // schedule would make it again.
                if !jobs.synced() {
                    return Ok(Next::After(Duration::from_millis(200)));
                }
                let uid = cj.metadata.uid.clone().unwrap_or_default();
                let own: Vec<Arc<Job>> = jobs
                    .grouped(&key)
                    .into_iter()
                    .filter(|j| j.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid))
                    .collect();
                let own: Vec<&Job> = own.iter().map(|j| &**j).collect();
                let now = jiff::Timestamp::now();
                let plan = cron_schedule::plan(&cj, &own, now);
                let wake_at = plan.wake_at;
                apply(&base, &key, &cj, &own, plan, &recorder).await?;
                Ok(match wake_at {
                    Some(at) => Next::After(Duration::try_from(now.duration_until(at)).unwrap_or_default().max(Duration::from_millis(50))),
                    None => Next::Done,
                })
            }
        })
        .await;
}

/// Carries out `plan` for the CronJob `cj` at `key`, whose Jobs are `own`: deletes,
/// then the new Job, then the status. Each write's watch event brings the CronJob back.
async fn apply(base: &Client, key: &ObjKey, cj: &CronJob, own: &[&Job], plan: Plan, recorder: &Recorder) -> Result<(), Failed> {
    let client = clients::workspace(base, &key.workspace);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &key.namespace);
    for (name, why) in &plan.delete {
        // Only the Job that was planned for: one made again with its name is not.
        let uid = own.iter().find(|j| j.metadata.name.as_deref() == Some(name)).and_then(|j| j.metadata.uid.clone());
        let dp = DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..DeleteParams::background() };
        match jobs.delete(name, &dp).await {
            Ok(_) => tracing::info!(job = %name, reason = ?why, "deleted"),
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(failed(format!("deleting Job {name} of CronJob {key}"))(e)),
        }
    }
    if let Some(job) = &plan.create {
        let name = job.metadata.name.clone().unwrap_or_default();
        let post = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match jobs.create(&post, job).await {
            Ok(_) => tracing::info!(job = %name, "scheduled"),
            // Made already (an earlier pass whose Job the cache had not shown yet).
            Err(e) if is_already_exists(&e) => {}
            Err(e) => return Err(failed(format!("creating Job {name} for CronJob {key}"))(e)),
        }
    }
    let involved = ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("CronJob".into()),
        name: Some(key.name.clone()),
        namespace: Some(key.namespace.clone()),
        uid: cj.metadata.uid.clone(),
        resource_version: cj.metadata.resource_version.clone(),
        field_path: None,
    };
    for (reason, message) in plan.events {
        recorder.record(Some(&key.workspace), &key.namespace, involved.clone(), Type::Normal, reason, message);
    }
    if let Some(status) = plan.status {
        // Every field named, so that a list now empty is cleared rather than left.
        let patch = json!({"status": {
            "active": status.active,
            "lastScheduleTime": status.last_schedule_time,
            "lastSuccessfulTime": status.last_successful_time,
        }});
        let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        let api: Api<CronJob> = Api::namespaced(client, &key.namespace);
        match api.patch_status(&key.name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(failed(format!("writing the status of CronJob {key}"))(e)),
        }
    }
    Ok(())
}
