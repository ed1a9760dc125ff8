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
use kube::api::{Api, Patch, PatchParams};
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

/// The field manager of the status fields the aggregator owns.
pub const FIELD_MANAGER: &str = "flotilla-status-aggregator";

/// Runs until the task is dropped. `base` is a client of the control plane with no
/// workspace path.
pub async fn run(base: Client, resync: Duration) {
    let span = tracing::info_span!("status-aggregator");
    async move {
        let (tx, rx) = mpsc::unbounded_channel();
        let wildcard = clients::workspace(&base, "*");
        let placements = cache::spawn(
            Api::<WorkloadPlacement>::all(wildcard.clone()),
            watcher::Config::default(),
            Kind::Deployment,
            Key::upstream,
            tx.clone(),
            "workloadplacements",
        );
        // The Deployments come from a cache rather than a GET per event: a moved
        // workload's WorkloadPlacement changes about seven times on its way to
        // Available. A Deployment's own changes (its generation) queue it too.
        let deployments = cache::spawn(
            Api::<Deployment>::all(wildcard),
            watcher::Config::default(),
            Kind::Deployment,
            Key::upstream,
            tx.clone(),
            "deployments",
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
            // A key whose Deployment is not cached yet comes back when the first list
            // of Deployments completes, which queues every key.
            let (wp, d) = (placements.get(&key), deployments.get(&key));
            let base = base.clone();
            let span = tracing::info_span!("aggregate", object = %key);
            async move {
                let (Some(wp), Some(d)) = (wp, d) else { return Ok::<_, Error>(Next::Done) };
                let client = clients::workspace(&base, &key.workspace);
                let now = crate::sync::now();
                let generation = d.metadata.generation.unwrap_or(0);
                // First the WorkloadPlacement's derived fields: the syncers write only
                // their own entries, the scheduler its condition.
                let derived = status::aggregator_fields(&status::derived(&wp, generation, &now));
                if status::aggregator_fields(&wp.status.clone().unwrap_or_default()) != derived {
                    let api: Api<WorkloadPlacement> = Api::namespaced(client.clone(), &key.namespace);
                    match clients::apply_placement_status(&api, &key.name, FIELD_MANAGER, derived).await {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => return Ok(Next::Done),
                        Err(e) => return Err(upstream(format!("writing the status of WorkloadPlacement {key}"))(e)),
                    }
                }
                let Some(next) = status::aggregate(&d, &wp, &now) else { return Ok(Next::Done) };
                if d.status.as_ref() == Some(&next) {
                    return Ok(Next::Done);
                }
                // The aggregator is the only writer of this status and runs one key at a
                // time, so the patch needs no resourceVersion: a cached Deployment that
                // is a write behind would only make every patch conflict.
                let api: Api<Deployment> = Api::namespaced(client, &key.namespace);
                match api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(json!({"status": next}))).await {
                    Ok(_) => Ok(Next::Done),
                    Err(e) if is_not_found(&e) => Ok(Next::Done),
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
