//! The workloads the scheduler places, of every kind of the workload model that is
//! placed (a CronJob is not: its Jobs are), watched across every workspace: one watch
//! cache per kind, read as one set.
//!
//! A WorkloadPlacement has its workload's name, so two workloads of different kinds
//! with the same name in one namespace cannot both have one. The first one placed
//! keeps it (the kind its WorkloadPlacement names); before either is placed, the older
//! one wins, and the kinds in the model's order break a tie. The other is not placed,
//! and says so in a Warning Event: renaming it places it.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher;
use kube::{Client, Resource};
use placement_api::workload::{AnyWorkload, WorkloadKind};
use placement_api::WorkloadPlacement;
use runtime::cache::{self as store, Cache as Store, Change, ObjKey, Workspace};
use serde::de::DeserializeOwned;

/// One watch cache per workload kind.
pub(crate) struct Workloads {
    deployments: Arc<Store<Deployment>>,
    stateful_sets: Arc<Store<StatefulSet>>,
    daemon_sets: Arc<Store<DaemonSet>>,
    jobs: Arc<Store<Job>>,
}

/// What a change of a workload's metadata may be: the key, and the metadata before
/// and after.
pub(crate) type OnChange = Arc<dyn Fn(&ObjKey, Option<&ObjectMeta>, Option<&ObjectMeta>) + Send + Sync>;

fn spawn<K>(wildcard: &Client, resource: &'static str, on_change: &OnChange) -> Arc<Store<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let f = on_change.clone();
    store::spawn(Api::<K>::all(wildcard.clone()), watcher::Config::default(), Workspace::Annotated, resource, move |c: Change<K>| {
        f(&c.key, c.old.as_deref().map(Resource::meta), c.new.as_deref().map(Resource::meta))
    })
}

impl Workloads {
    /// Starts the watches; `on_change` sees every change of each.
    pub(crate) fn spawn(wildcard: &Client, on_change: OnChange) -> Self {
        Workloads {
            deployments: spawn(wildcard, "deployments", &on_change),
            stateful_sets: spawn(wildcard, "statefulsets", &on_change),
            daemon_sets: spawn(wildcard, "daemonsets", &on_change),
            jobs: spawn(wildcard, "jobs", &on_change),
        }
    }

    /// Waits until every cache has listed.
    pub(crate) async fn wait_synced(&self) {
        self.deployments.wait_synced().await;
        self.stateful_sets.wait_synced().await;
        self.daemon_sets.wait_synced().await;
        self.jobs.wait_synced().await;
    }

    /// Every workload at `key`, of each kind that has one, in the model's order.
    fn all_at(&self, key: &ObjKey) -> Vec<AnyWorkload> {
        let mut found = Vec::new();
        found.extend(self.deployments.get(key).map(AnyWorkload::Deployment));
        found.extend(self.stateful_sets.get(key).map(AnyWorkload::StatefulSet));
        found.extend(self.daemon_sets.get(key).map(AnyWorkload::DaemonSet));
        found.extend(self.jobs.get(key).map(AnyWorkload::Job));
        found
    }

    /// The workload placed at `key` (see the module's doc), and those of other kinds
    /// that have its name and so are not placed.
    pub(crate) fn at(&self, key: &ObjKey, wp: Option<&WorkloadPlacement>) -> Option<(AnyWorkload, Vec<AnyWorkload>)> {
        let mut all = self.all_at(key);
        if all.is_empty() {
            return None;
        }
        let placed = wp.and_then(|wp| WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind));
        let winner = match all.iter().position(|w| Some(w.kind()) == placed) {
            Some(i) => i,
            None => {
                let created = |w: &AnyWorkload| w.meta().creation_timestamp.as_ref().map(|t| t.0);
                // The kinds are in the model's order already: a stable minimum keeps it for ties.
                let oldest = all.iter().map(created).enumerate().min_by_key(|(_, t)| *t);
                oldest.map_or(0, |(i, _)| i)
            }
        };
        let w = all.remove(winner);
        Some((w, all))
    }

    /// The keys of every workload, of every kind (a key may repeat).
    pub(crate) fn keys(&self) -> Vec<ObjKey> {
        let mut keys = self.deployments.keys();
        keys.extend(self.stateful_sets.keys());
        keys.extend(self.daemon_sets.keys());
        keys.extend(self.jobs.keys());
        keys
    }

    /// The keys of the workloads whose key passes `keep_key` and whose metadata passes
    /// `keep`.
    pub(crate) fn keys_where(&self, keep_key: impl Fn(&ObjKey) -> bool, keep: impl Fn(&ObjectMeta) -> bool) -> Vec<ObjKey> {
        let mut keys = self.deployments.entries_where(|k, d| keep_key(k) && keep(&d.metadata));
        keys.extend(self.stateful_sets.entries_where(|k, d| keep_key(k) && keep(&d.metadata)));
        keys.extend(self.daemon_sets.entries_where(|k, d| keep_key(k) && keep(&d.metadata)));
        keys.extend(self.jobs.entries_where(|k, d| keep_key(k) && keep(&d.metadata)));
        keys
    }

    /// How many workloads there are, of every kind.
    pub(crate) fn len(&self) -> usize {
        self.deployments.len() + self.stateful_sets.len() + self.daemon_sets.len() + self.jobs.len()
    }
}
