//! The heartbeat: every interval, the SyncTarget's status gets the time and the
//! cluster's capacity.
//!
//! It has a client of its own, so its requests never queue behind sync traffic on a
//! shared connection, and it runs on its own task at a fixed interval. The capacity
//! comes from reflectors of the cluster's nodes and pods, kept current by watches, so
//! a beat costs one PATCH whatever the cluster's size.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use placement_api::SyncTarget;
use serde_json::json;
use tracing::Instrument;

use crate::capacity;

/// Beats every `interval` until the task is dropped. `root` is a client of the control
/// plane's `root` workspace; `workloads` says how many workloads are assigned now.
pub async fn run(sync_target: String, interval: Duration, root: Client, downstream: Client, workloads: impl Fn() -> usize) {
    let span = tracing::info_span!("heartbeat", sync_target = %sync_target);
    async move {
        let (nodes, nodes_w) = reflector::store::<Node>();
        let (pods, pods_w) = reflector::store::<Pod>();
        let watch_nodes = watcher(Api::<Node>::all(downstream.clone()), watcher::Config::default()).default_backoff().reflect(nodes_w);
        let watch_pods = watcher(Api::<Pod>::all(downstream), watcher::Config::default()).default_backoff().reflect(pods_w);
        let _feed = crate::AbortOnDrop(tokio::spawn(async move {
            let mut both = futures::stream::select(watch_nodes.map(|e| e.map(|_| ())).boxed(), watch_pods.map(|e| e.map(|_| ())).boxed());
            while let Some(r) = both.next().await {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "watching the cluster's nodes and pods failed; retrying");
                }
            }
        }));
        let api: Api<SyncTarget> = Api::all(root);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Until both are listed, the capacity would be wrong: beat without it.
            let ready = nodes.wait_until_ready().now_or_never().is_some() && pods.wait_until_ready().now_or_never().is_some();
            let now = jiff::Timestamp::now();
            let time = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now).to_string();
            let mut status = json!({"lastSyncerHeartbeatTime": time, "workloads": workloads()});
            if ready {
                let (nodes, pods) = (nodes.state(), pods.state());
                let f = capacity::compute(nodes.iter().map(|n| &**n), pods.iter().map(|p| &**p)).status_fields();
                status["allocatable"] = json!(f.allocatable);
                status["available"] = json!(f.available);
                status["nodeHeadroom"] = json!(f.node_headroom);
                status["cpu"] = json!(f.cpu);
                status["memory"] = json!(f.memory);
            }
            let patch = Patch::Merge(json!({"status": status}));
            let pp = PatchParams::default();
            match tokio::time::timeout(interval, api.patch_status(&sync_target, &pp, &patch)).await {
                Ok(Ok(_)) => tracing::trace!("beat"),
                Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
                Err(_) => tracing::warn!(?interval, "heartbeat timed out"),
            }
        }
    }
    .instrument(span)
    .await
}
