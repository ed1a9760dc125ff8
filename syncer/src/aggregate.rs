//! The upstream Deployments' status, summed from their WorkloadPlacements.
//!
//! Each syncer reports its own cluster in the WorkloadPlacement; this controller, run
//! once in the control plane process, derives the WorkloadPlacement's summary and
//! conditions from the entries ([`status::derived`]) and turns them into the
//! Deployment's `.status` ([`status::aggregate`]), so that `kubectl rollout status` and `kubectl wait
//! --for=condition=Available` work in a workspace. One writer for the Deployment
//! status means the syncers of different clusters never race on it.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use placement_api::WorkloadPlacement;
use serde_json::json;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::error::{is_not_found, upstream, Error};
use crate::key::{Key, Kind};
use crate::queue::{self, Next};
use crate::{cache, clients, status};

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let span = tracing::info_span!("status-aggregator");
    async move {
        let (tx, rx) = mpsc::unbounded_channel();
        let wildcard = clients::workspace(&base, "*");
        let placements = cache::spawn(
            Api::<WorkloadPlacement>::all(wildcard),
            watcher::Config::default(),
            Kind::Deployment,
            Key::upstream,
            tx.clone(),
            "workloadplacements",
        );
        let p = placements.clone();
        let _resync = crate::AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(resync);
            loop {
                tick.tick().await;
                for k in p.keys() {
                    let _ = tx.send(k);
                }
            }
        }));
        queue::run(rx, 8, |key| {
            let wp = placements.get(&key);
            let base = base.clone();
            let span = tracing::info_span!("aggregate", object = %key);
            async move {
                let Some(wp) = wp else { return Ok::<_, Error>(Next::Done) };
                let api: Api<Deployment> = Api::namespaced(clients::workspace(&base, &key.workspace), &key.namespace);
                let d = match api.get_opt(&key.name).await.map_err(upstream(format!("reading {key}")))? {
                    Some(d) => d,
                    None => return Ok(Next::Done),
                };
                let now = crate::sync::now();
                let generation = d.metadata.generation.unwrap_or(0);
                // First the WorkloadPlacement's derived fields: the syncers write only
                // their own entries.
                let placement = status::derived(&wp, generation, &now);
                if wp.status.as_ref() != Some(&placement) {
                    let api: Api<WorkloadPlacement> = Api::namespaced(clients::workspace(&base, &key.workspace), &key.namespace);
                    let mut next = (*wp).clone();
                    next.status = Some(placement);
                    match api.replace_status(&key.name, &PostParams::default(), &next).await {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => return Ok(Next::Done),
                        // A syncer wrote its entry meanwhile; its event brings the key back.
                        Err(e) if crate::error::is_conflict(&e) => return Ok(Next::Done),
                        Err(e) => return Err(upstream(format!("writing the status of WorkloadPlacement {key}"))(e)),
                    }
                }
                let Some(next) = status::aggregate(&d, &wp, &now) else { return Ok(Next::Done) };
                if d.status.as_ref() == Some(&next) {
                    return Ok(Next::Done);
                }
                let patch = json!({"metadata": {"resourceVersion": d.metadata.resource_version}, "status": next});
                match api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
                    Ok(_) => Ok(Next::Done),
                    Err(e) if is_not_found(&e) => Ok(Next::Done),
                    Err(e) if crate::error::is_conflict(&e) => Ok(Next::After(Duration::ZERO)),
                    Err(e) => Err(upstream(format!("writing the status of {key}"))(e)),
                }
            }
            .instrument(span)
        })
        .await;
    }
    .instrument(span)
    .await
}
