//! The heartbeat: every interval, the SyncTarget's status gets the time and the
//! cluster's capacity.
//!
//! It runs on its own task at a fixed interval, and its requests never queue behind
//! sync traffic: a pull-mode syncer gives it a connection pool of its own, and in push
//! mode every request is served in-process on a task of its own. The capacity
//! comes from reflectors of the cluster's nodes and pods, kept current by watches, so
//! a beat costs one probe of the cluster and one PATCH whatever the cluster's size. The
//! pods are kept cut down to what the capacity needs ([`capacity::slim_pod`]): the
//! reflector holds every pod of the cluster, Flotilla's or not.
//!
//! A beat says that the syncer works *and* reaches its cluster: before each one, the
//! syncer asks the cluster for its version. If that fails, no heartbeat is written,
//! so the health controller sees the cluster go quiet after the grace period even when
//! the syncer runs inside the control plane (push mode), and the SyncTarget's
//! `ClusterReachable` condition says why. The probe's result is shared with the syncer
//! ([`Reachability`]), which leaves what it would delete on a cluster that does not
//! answer until the cluster answers again.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use placement_api::{SyncTarget, CONDITION_CLUSTER_REACHABLE};
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::capacity;

/// Whether the cluster answered the heartbeat's last probe, shared by the heartbeat that
/// probes and the syncer that acts on it. Until the first probe the cluster counts as
/// reachable.
#[derive(Clone)]
pub struct Reachability(Arc<watch::Sender<Option<String>>>);

impl Default for Reachability {
    fn default() -> Self {
        Reachability(Arc::new(watch::channel(None).0))
    }
}

impl Reachability {
    /// Why the cluster did not answer the last probe; `None` when it did.
    pub fn unreachable(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Records a probe's result. Waiters wake only when the answer turns around, not
    /// when only the reason a cluster is unreachable changes.
    pub fn record(&self, probe: &Result<(), String>) {
        self.0.send_if_modified(|last| {
            let turned = last.is_some() != probe.is_err();
            *last = probe.clone().err();
            turned
        });
    }

    /// Waits until the cluster stops answering, then until it answers again.
    pub async fn comes_back(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
        let _ = rx.wait_for(Option::is_none).await;
    }
}

/// Intervals one beat may take, the cluster probe and the write together. At the
/// defaults (2 s, grace 8 s) a beat that lands at all lands within the grace.
const BEAT_BUDGET: u32 = 3;

/// Beats every `interval` until the task is dropped. `root` is a client of the control
/// plane's `root` workspace; `workloads` says how many workloads are assigned now;
/// each probe's result goes to `reach`.
pub async fn run(
    sync_target: String,
    interval: Duration,
    root: Client,
    downstream: Client,
    reach: Reachability,
    workloads: impl Fn() -> usize,
) {
    let span = tracing::info_span!("heartbeat", sync_target = %sync_target);
    async move {
        let (nodes, nodes_w) = reflector::store::<Node>();
        let (pods, pods_w) = reflector::store::<Pod>();
        let (me, me_w) = reflector::store::<SyncTarget>();
        let watch_nodes = watcher(Api::<Node>::all(downstream.clone()), watcher::Config::default())
            .default_backoff()
            .modify(|n: &mut Node| n.metadata.managed_fields = None)
            .reflect(nodes_w);
        // Every pod of the cluster, kept with only what the capacity needs.
        let watch_pods = watcher(Api::<Pod>::all(downstream.clone()), watcher::Config::default())
            .default_backoff()
            .modify(capacity::slim_pod)
            .reflect(pods_w);
        let api: Api<SyncTarget> = Api::all(root);
        let own = watcher::Config::default().fields(&format!("metadata.name={sync_target}"));
        let watch_me = watcher(api.clone(), own).default_backoff().reflect(me_w);
        let _feed = crate::AbortOnDrop(tokio::spawn(
            async move {
                let mut all = futures::stream::select_all([
                    watch_nodes.map(|e| e.map(|_| ())).boxed(),
                    watch_pods.map(|e| e.map(|_| ())).boxed(),
                    watch_me.map(|e| e.map(|_| ())).boxed(),
                ]);
                while let Some(r) = all.next().await {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "watching the cluster's nodes and pods or the SyncTarget failed; retrying");
                    }
                }
            }
            // In the heartbeat's span, so that its warnings name the cluster.
            .in_current_span(),
        ));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // A beat that lands late still counts (the health controller times beats
            // by when it sees them), so a slow cluster or a busy control plane gets
            // BEAT_BUDGET intervals for the probe and the write together, the probe
            // at most two of them, rather than losing every beat that takes longer
            // than one interval.
            let deadline = tokio::time::Instant::now() + interval * BEAT_BUDGET;
            let probe_within = interval * 2;
            let reached = match tokio::time::timeout(probe_within, downstream.apiserver_version()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {probe_within:?}")),
            };
            reach.record(&reached);
            let now = crate::sync::now();
            let mut status = serde_json::Map::new();
            let mut patch = json!({});
            let current = me.get(&reflector::ObjectRef::new(&sync_target));
            if let Some(conds) = current.as_ref().and_then(|st| reachable_condition(st, &reached, &now)) {
                // The conditions list is replaced whole: guard it against other writers.
                status.insert("conditions".into(), json!(conds));
                patch["metadata"] = json!({"resourceVersion": current.as_ref().and_then(|c| c.metadata.resource_version.clone())});
            }
            match &reached {
                Ok(()) => {
                    status.insert("lastSyncerHeartbeatTime".into(), json!(now));
                    status.insert("workloads".into(), json!(workloads()));
                    // Until both are listed, the capacity would be wrong: beat without it.
                    if nodes.wait_until_ready().now_or_never().is_some() && pods.wait_until_ready().now_or_never().is_some() {
                        let (nodes, pods) = (nodes.state(), pods.state());
                        let f = capacity::compute(nodes.iter().map(|n| &**n), pods.iter().map(|p| &**p)).status_fields();
                        status.insert("allocatable".into(), json!(f.allocatable));
                        status.insert("available".into(), json!(f.available));
                        status.insert("nodeHeadroom".into(), json!(f.node_headroom));
                        status.insert("nodes".into(), json!(f.nodes));
                        status.insert("cpu".into(), json!(f.cpu));
                        status.insert("memory".into(), json!(f.memory));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the cluster does not answer; no heartbeat until it does"),
            }
            if status.is_empty() {
                continue;
            }
            patch["status"] = serde_json::Value::Object(status.clone());
            let pp = PatchParams::default();
            let mut result = tokio::time::timeout_at(deadline, api.patch_status(&sync_target, &pp, &Patch::Merge(patch))).await;
            if matches!(&result, Ok(Err(e)) if crate::error::is_conflict(e)) {
                // Someone else changed the conditions: the beat goes now, the condition
                // on the next one, from the fresher copy.
                status.remove("conditions");
                let beat = json!({"status": status});
                result = tokio::time::timeout_at(deadline, api.patch_status(&sync_target, &pp, &Patch::Merge(beat))).await;
            }
            match result {
                Ok(Ok(_)) => tracing::trace!("beat"),
                Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
                Err(_) => tracing::warn!(budget = ?interval * BEAT_BUDGET, "heartbeat timed out"),
            }
        }
    }
    .instrument(span)
    .await
}

/// The SyncTarget's conditions with `ClusterReachable` set from the probe's result, or
/// `None` if it says that already.
fn reachable_condition(
    st: &SyncTarget,
    reached: &Result<(), String>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Option<Vec<Condition>> {
    let name = st.metadata.name.as_deref().unwrap_or_default();
    let (status, reason, message) = match reached {
        Ok(()) => ("True", "Reachable", "the syncer reaches the cluster's API".to_string()),
        Err(e) => (
            "False",
            "Unreachable",
            format!(
                "the syncer cannot reach the cluster's API: {e}; it retries every heartbeat. Check that the cluster runs, and that its kubeconfig is current (flotilla cluster register {name} --kubeconfig F)"
            ),
        ),
    };
    let mut conds = st.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let old = conds.iter().find(|c| c.type_ == CONDITION_CLUSTER_REACHABLE);
    // The message of a failure changes with each error; only the status and the reason
    // are worth a write.
    if old.is_some_and(|o| o.status == status && o.reason == reason) {
        return None;
    }
    let c = Condition {
        type_: CONDITION_CLUSTER_REACHABLE.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: st.metadata.generation,
    };
    crate::status::set_condition(&mut conds, c);
    Some(conds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement_api::SyncTargetSpec;

    #[test]
    fn the_reachable_condition_is_written_only_when_it_changes() {
        let now = crate::sync::now();
        let mut st = SyncTarget::new("east", SyncTargetSpec::default());
        let conds = reachable_condition(&st, &Ok(()), &now).expect("first report");
        assert_eq!((conds[0].type_.as_str(), conds[0].status.as_str()), ("ClusterReachable", "True"));
        st.status = Some(placement_api::SyncTargetStatus { conditions: conds, ..Default::default() });
        assert_eq!(reachable_condition(&st, &Ok(()), &now), None);
        let down = reachable_condition(&st, &Err("connection refused".into()), &now).expect("a change");
        assert_eq!(down[0].status, "False");
        assert!(
            down[0].message.contains("connection refused") && down[0].message.contains("flotilla cluster register east"),
            "{}",
            down[0].message
        );
        st.status.as_mut().unwrap().conditions = down;
        assert_eq!(reachable_condition(&st, &Err("timeout".into()), &now), None, "a new message alone is not worth a write");
    }

    #[tokio::test]
    async fn reachability_wakes_its_waiter_when_the_cluster_comes_back_not_when_the_reason_changes() {
        let reach = Reachability::default();
        assert_eq!(reach.unreachable(), None, "a cluster not probed yet counts as reachable");
        let waiter = tokio::spawn({
            let reach = reach.clone();
            async move { reach.comes_back().await }
        });
        reach.record(&Err("connection refused".into()));
        reach.record(&Err("no answer within 4s".into()));
        assert_eq!(reach.unreachable().as_deref(), Some("no answer within 4s"));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "woken while the cluster still does not answer");
        reach.record(&Ok(()));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken when it answers").unwrap();
        assert_eq!(reach.unreachable(), None);
    }
}
