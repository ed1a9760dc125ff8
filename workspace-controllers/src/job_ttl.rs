//! `ttlSecondsAfterFinished` in the workspaces: a finished Job whose time is up is
//! deleted, with its dependents, as kube-controller-manager's ttl-after-finished
//! controller does. The Job finished when its `Complete` or `Failed` condition turned
//! True (the status aggregator copies it from the Job's cluster); the syncer then
//! removes the cluster's copy, as for any deleted workload.
//!
//! When a Job is due is a pure function ([`due`]); the controller only watches, waits
//! and deletes.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::watcher;
use kube::Client;
use placement_api::synced::Kind;

use runtime::clients;
use runtime::controller::{Controller, Next};
use runtime::errors::{failed, is_conflict, is_not_found, Failed};
use runtime::key as cache;
use runtime::Key;

/// When a finished Job's time is up: when its `Complete` or `Failed` condition turned
/// True, plus `ttlSecondsAfterFinished`. `None` while it runs, or when it sets no ttl.
pub fn due(job: &Job) -> Option<jiff::Timestamp> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let finished = conditions.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?;
    let at = finished
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| job.status.as_ref()?.completion_time.as_ref().map(|t: &Time| t.0))?;
    at.checked_add(jiff::SignedDuration::from_secs(i64::from(ttl.max(0)))).ok()
}

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let mut controller = Controller::<Key>::new("job-ttl");
    let wildcard = clients::workspace(&base, "*");
    let jobs = cache::spawn(Api::<Job>::all(wildcard), watcher::Config::default(), Kind::Job, Key::upstream, controller.trigger(), "jobs");
    let j = jobs.clone();
    controller.resync(resync, move || j.keys());
    controller
        .run(|key: Key| {
            let job = jobs.get(&key);
            let base = base.clone();
            async move {
                let Some(job) = job else { return Ok::<_, Failed>(Next::Done) };
                if job.metadata.deletion_timestamp.is_some() {
                    return Ok(Next::Done);
                }
                let Some(due) = due(&job) else { return Ok(Next::Done) };
                let left = jiff::Timestamp::now().duration_until(due);
                if left.is_positive() {
                    return Ok(Next::After(Duration::try_from(left).unwrap_or(Duration::from_secs(1))));
                }
                // Only the Job that was found due: one made again with the same name is not.
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid: job.metadata.uid.clone(), resource_version: None }),
                    ..DeleteParams::background()
                };
                let api: Api<Job> = Api::namespaced(clients::workspace(&base, &key.workspace), &key.namespace);
                match api.delete(&key.name, &dp).await {
                    Ok(_) => {
                        tracing::info!(ttl = ?job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished), "finished, and its ttlSecondsAfterFinished is up: deleted");
                        Ok(Next::Done)
                    }
                    Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(Next::Done),
                    Err(e) => Err(failed(format!("deleting {key}, whose ttlSecondsAfterFinished is up"))(e)),
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(ttl: Option<i32>, condition: Option<(&str, &str)>) -> Job {
        let conditions: Vec<_> =
            condition.map(|(t, s)| json!({"type": t, "status": s, "lastTransitionTime": "2026-01-01T00:00:00Z"})).into_iter().collect();
        serde_json::from_value(json!({
            "metadata": {"name": "pi"},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn a_finished_job_is_due_its_ttl_after_it_finished_and_a_running_one_never() {
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert_eq!(due(&job(Some(30), Some(("Complete", "True")))), Some(at("2026-01-01T00:00:30Z")));
        assert_eq!(due(&job(Some(0), Some(("Failed", "True")))), Some(at("2026-01-01T00:00:00Z")));
        assert_eq!(due(&job(Some(30), Some(("Complete", "False")))), None, "not finished");
        assert_eq!(due(&job(Some(30), Some(("Suspended", "True")))), None, "not finished");
        assert_eq!(due(&job(Some(30), None)), None, "running");
        assert_eq!(due(&job(None, Some(("Complete", "True")))), None, "no ttl: kept");
    }
}
