//! One cluster's syncer: assigned workloads down, their status up.
//!
//! Upstream, it watches through the wildcard view only the Deployments and
//! WorkloadPlacements labelled `state.workload.flotilla.io/<target>=Sync`. Downstream,
//! it watches only the copies it made (labelled with its SyncTarget). Every change on
//! either side queues the upstream object's key, and [`Syncer::reconcile`] makes the
//! downstream side match what is assigned now:
//! - assigned: put the per-cluster finalizer on the upstream object, server-side apply
//!   the copy (reverting any drift, since the apply is forced), and report the copy's
//!   status in this cluster's WorkloadPlacement entry;
//! - being deleted upstream: delete the copy, then release the finalizer;
//! - no longer assigned, or a copy with no upstream object (left behind while this
//!   cluster was away): release the finalizer if it is still there, then delete the copy.
//!
//! Nothing is deleted before both sides have been listed completely, so a cluster that
//! comes back first learns what is assigned to it now and only then removes what is not
//! (the fencing that keeps a returning cluster from running stale copies), and an
//! unreachable control plane never makes workloads look unassigned.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use placement_api::{sync_state_label, syncer_finalizer, WorkloadPlacement, SYNC_STATE_SYNC, SYNC_TARGET_LABEL};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::cache::{self, Cache};
use crate::error::{downstream, is_conflict, is_not_found, upstream, Error};
use crate::key::{Key, Kind};
use crate::queue::{self, Next};
use crate::{clients, status, transform};

/// The field manager of everything the syncer applies downstream.
pub const FIELD_MANAGER: &str = "flotilla-syncer";
/// How many objects are synced at once.
const CONCURRENCY: usize = 16;
/// How long to wait before looking again at an object waiting for another one.
const WAIT_FOR_PEER: Duration = Duration::from_secs(1);

/// Settings of one syncer.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The SyncTarget's name.
    pub sync_target: String,
    /// How often every object is looked at again, events or not.
    pub resync: Duration,
}

/// One cluster's syncer.
pub struct Syncer {
    settings: Settings,
    /// The control plane, without a workspace path.
    upstream: Client,
    /// The physical cluster.
    downstream: Client,
    finalizer: String,
    deployments: Arc<Cache<Deployment>>,
    placements: Arc<Cache<WorkloadPlacement>>,
    copies: Arc<Cache<Deployment>>,
}

pub(crate) fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

impl Syncer {
    /// Runs the syncer until the task is dropped. `upstream` is a client of the control
    /// plane with no workspace path (see [`clients::base_config`]).
    /// `started` gets the syncer once its watches are set up.
    pub async fn run(settings: Settings, upstream: Client, downstream: Client, started: impl FnOnce(Arc<Syncer>)) {
        let span = tracing::info_span!("syncer", sync_target = %settings.sync_target);
        async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let target = &settings.sync_target;
            let assigned = watcher::Config::default().labels(&format!("{}={SYNC_STATE_SYNC}", sync_state_label(target)));
            let wildcard = clients::workspace(&upstream, "*");
            let deployments = cache::spawn(
                Api::<Deployment>::all(wildcard.clone()),
                assigned.clone(),
                Kind::Deployment,
                Key::upstream,
                tx.clone(),
                "upstream deployments",
            );
            // A WorkloadPlacement has its workload's name: its changes queue the workload.
            let placements = cache::spawn(
                Api::<WorkloadPlacement>::all(wildcard),
                assigned,
                Kind::Deployment,
                Key::upstream,
                tx.clone(),
                "upstream workloadplacements",
            );
            let mine = watcher::Config::default().labels(&format!("{SYNC_TARGET_LABEL}={target}"));
            let copies = cache::spawn(
                Api::<Deployment>::all(downstream.clone()),
                mine,
                Kind::Deployment,
                Key::of_copy,
                tx.clone(),
                "downstream deployments",
            );
            let syncer = Arc::new(Syncer {
                finalizer: syncer_finalizer(target),
                settings: settings.clone(),
                upstream,
                downstream,
                deployments,
                placements,
                copies,
            });
            started(syncer.clone());
            let resync = {
                let s = syncer.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(s.settings.resync);
                    tick.tick().await;
                    loop {
                        tick.tick().await;
                        for k in s.deployments.keys().into_iter().chain(s.copies.keys()) {
                            let _ = tx.send(k);
                        }
                    }
                })
            };
            drop(tx);
            queue::run(rx, CONCURRENCY, |key| {
                let s = syncer.clone();
                let span = tracing::info_span!("sync", object = %key);
                async move { s.reconcile(&key).await }.instrument(span)
            })
            .await;
            resync.abort();
        }
        .instrument(span)
        .await
    }

    /// How many workloads are assigned to this cluster now.
    pub fn assigned(&self) -> usize {
        self.deployments.len()
    }

    fn upstream_api<K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>>(&self, key: &Key) -> Api<K> {
        Api::namespaced(clients::workspace(&self.upstream, &key.workspace), &key.namespace)
    }

    fn copy_api(&self, key: &Key) -> Api<Deployment> {
        Api::namespaced(self.downstream.clone(), &transform::downstream_namespace(key))
    }

    /// Makes the downstream side of `key` match what is assigned now.
    pub async fn reconcile(&self, key: &Key) -> Result<Next, Error> {
        let copy = self.copies.get(key);
        match self.deployments.get(key) {
            Some(d) if d.metadata.deletion_timestamp.is_none() => self.push(key, &d, copy.as_deref()).await,
            Some(d) => self.clean_up_deleted(key, &d, copy.as_deref()).await,
            None if !(self.deployments.synced() && self.placements.synced() && self.copies.synced()) => Ok(Next::After(WAIT_FOR_PEER)),
            None => self.clean_up_unassigned(key, copy.as_deref()).await,
        }
    }

    async fn push(&self, key: &Key, d: &Deployment, copy: Option<&Deployment>) -> Result<Next, Error> {
        let target = &self.settings.sync_target;
        // The share comes with the WorkloadPlacement; the scheduler writes it first, but
        // the two watches may deliver in either order.
        let Some(wp) = self.placements.get(key) else { return Ok(Next::After(WAIT_FOR_PEER)) };
        let Some(share) = wp.spec.clusters.iter().find(|c| &c.name == target).map(|c| c.replicas) else {
            return Ok(Next::After(WAIT_FOR_PEER));
        };
        if !d.metadata.finalizers.iter().flatten().any(|f| f == &self.finalizer) {
            let mut finalizers = d.metadata.finalizers.clone().unwrap_or_default();
            finalizers.push(self.finalizer.clone());
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": d.metadata.resource_version}});
            match self.upstream_api::<Deployment>(key).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
                Ok(_) => {}
                // A newer version is on its way through the watch.
                Err(e) if is_conflict(&e) => return Ok(Next::After(Duration::ZERO)),
                Err(e) => return Err(upstream(format!("adding finalizer to {key}"))(e)),
            }
        }
        let ssa = PatchParams::apply(FIELD_MANAGER).force();
        let ns = transform::downstream_namespace(key);
        if copy.is_none() {
            Api::<Namespace>::all(self.downstream.clone())
                .patch(&ns, &ssa, &Patch::Apply(transform::downstream_namespace_object(key, target)))
                .await
                .map_err(downstream(format!("applying namespace {ns}")))?;
        }
        let upstream_json = serde_json::to_value(d).unwrap_or_default();
        let desired = transform::downstream_object(&upstream_json, key, target, Some(share));
        let applied = self
            .copy_api(key)
            .patch(&key.name, &ssa, &Patch::Apply(desired))
            .await
            .map_err(downstream(format!("applying {ns}/{}", key.name)))?;
        self.report(key, d, &wp, Some(status::cluster_entry(target, &applied, now()))).await
    }

    /// Writes this cluster's entry of the WorkloadPlacement status, if it changed.
    async fn report(
        &self,
        key: &Key,
        d: &Deployment,
        wp: &WorkloadPlacement,
        entry: Option<placement_api::ClusterSyncStatus>,
    ) -> Result<Next, Error> {
        let target = &self.settings.sync_target;
        let current = wp.status.as_ref().and_then(|s| s.clusters.iter().find(|c| &c.name == target));
        let unchanged = match (current, &entry) {
            (Some(a), Some(b)) => status::same_report(a, b),
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return Ok(Next::Done);
        }
        let generation = d.metadata.generation.unwrap_or(0);
        let mut next = wp.clone();
        next.status = Some(status::with_entry(wp, target, entry, generation, &now()));
        let api: Api<WorkloadPlacement> = self.upstream_api(key);
        match api.replace_status(&key.name, &PostParams::default(), &next).await {
            Ok(_) => Ok(Next::Done),
            // Another cluster's syncer wrote its entry first; the watch brings it.
            Err(e) if is_conflict(&e) => Ok(Next::After(Duration::from_millis(50))),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(upstream(format!("writing the status of WorkloadPlacement {}/{}/{}", key.workspace, key.namespace, key.name))(e)),
        }
    }

    async fn clean_up_deleted(&self, key: &Key, d: &Deployment, copy: Option<&Deployment>) -> Result<Next, Error> {
        if copy.is_some() {
            self.delete_copy(key).await?;
            // The copy's DELETED event queues this key again.
            return Ok(Next::Done);
        }
        self.release_finalizer(key, d).await
    }

    async fn clean_up_unassigned(&self, key: &Key, copy: Option<&Deployment>) -> Result<Next, Error> {
        if copy.is_none() {
            return Ok(Next::Done);
        }
        // The finalizer first: if the syncer stops between the two steps, the copy is
        // still there to bring it back here.
        match self.upstream_api::<Deployment>(key).get_opt(&key.name).await {
            Ok(Some(d)) if !self.assigned_here(&d) => {
                self.release_finalizer(key, &d).await?;
            }
            Ok(Some(_)) => return Ok(Next::After(WAIT_FOR_PEER)),
            Ok(None) => {}
            Err(e) => return Err(upstream(format!("reading {key}"))(e)),
        }
        if let Ok(Some(wp)) = self.upstream_api::<WorkloadPlacement>(key).get_opt(&key.name).await {
            let d = Deployment::default();
            self.report(key, &d, &wp, None).await?;
        }
        self.delete_copy(key).await?;
        Ok(Next::Done)
    }

    fn assigned_here(&self, d: &Deployment) -> bool {
        let label = sync_state_label(&self.settings.sync_target);
        d.metadata.labels.as_ref().and_then(|l| l.get(&label)).is_some_and(|v| v == SYNC_STATE_SYNC)
            && d.metadata.deletion_timestamp.is_none()
    }

    async fn release_finalizer(&self, key: &Key, d: &Deployment) -> Result<Next, Error> {
        let finalizers = d.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.contains(&self.finalizer) {
            return Ok(Next::Done);
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| **f != self.finalizer).collect();
        let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": d.metadata.resource_version}});
        match self.upstream_api::<Deployment>(key).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(e) if is_conflict(&e) => Ok(Next::After(Duration::ZERO)),
            Err(e) if is_not_found(&e) => Ok(Next::Done),
            Err(e) => Err(upstream(format!("releasing the finalizer of {key}"))(e)),
        }
    }

    async fn delete_copy(&self, key: &Key) -> Result<(), Error> {
        let ns = transform::downstream_namespace(key);
        match self.copy_api(key).delete(&key.name, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(namespace = %ns, "deleted the downstream copy"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(downstream(format!("deleting {ns}/{}", key.name))(e)),
        }
        // A Flotilla namespace with nothing of ours left in it goes too.
        let others = self
            .copies
            .values()
            .iter()
            .any(|c| c.metadata.namespace.as_deref() == Some(&ns) && c.metadata.name.as_deref() != Some(&key.name));
        if !others {
            match Api::<Namespace>::all(self.downstream.clone()).delete(&ns, &DeleteParams::background()).await {
                Ok(_) => tracing::info!(namespace = %ns, "deleted the empty downstream namespace"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(downstream(format!("deleting namespace {ns}"))(e)),
            }
        }
        Ok(())
    }
}
