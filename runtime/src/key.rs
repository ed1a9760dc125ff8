//! The key of one object of a kind Flotilla syncs: its [`Kind`] and its [`ObjKey`];
//! and watch caches whose changes queue such keys on a channel, for the controllers
//! (the syncers, the companions controller) whose work is per object of those kinds.

use std::fmt::{self, Debug};
use std::hash::Hash;
use std::sync::Arc;

use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher;
use kube::Resource;
use placement_api::synced::Kind;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::cache::{ObjKey, Workspace};

/// One upstream object: its kind, and its [`ObjKey`] (workspace, namespace, name),
/// whose fields it reads as its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// What it is.
    pub kind: Kind,
    /// Which object of that kind.
    pub obj: ObjKey,
}

impl std::ops::Deref for Key {
    type Target = ObjKey;
    fn deref(&self) -> &ObjKey {
        &self.obj
    }
}

impl Key {
    /// A key from its parts.
    pub fn new(kind: Kind, workspace: &str, namespace: &str, name: &str) -> Self {
        Self { kind, obj: ObjKey::new(workspace, namespace, name) }
    }

    /// The key of an object read through the wildcard view; `None` when the object is
    /// outside any namespace or does not say which workspace it is in (never the case
    /// for a Flotilla control plane).
    pub fn upstream(kind: Kind, meta: &ObjectMeta) -> Option<Self> {
        meta.namespace.as_ref()?;
        Some(Self { kind, obj: ObjKey::of(meta, Workspace::Annotated)? })
    }

    /// The key of the downstream namespace of `{workspace, namespace}`.
    pub fn namespace(workspace: &str, namespace: &str) -> Self {
        Self::new(Kind::Namespace, workspace, namespace, "")
    }

    /// The same object as another kind (a Deployment's WorkloadPlacement has its name).
    pub fn with_kind(&self, kind: Kind) -> Self {
        Self { kind, obj: self.obj.clone() }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Namespace => write!(f, "Namespace {}/{}", self.workspace, self.namespace),
            _ => write!(f, "{} {}/{}/{}", self.kind.name(), self.workspace, self.namespace, self.name),
        }
    }
}

/// How an object's key is found: upstream objects name their workspace in an
/// annotation.
pub type KeyOf = fn(Kind, &ObjectMeta) -> Option<Key>;

/// The objects of one watch, by index (`I`): a [`Key`] by default.
pub type Cache<K, I = Key> = crate::cache::Cache<K, I>;

/// Starts watching `api` with `config`, indexing each object by its key; every key
/// that changes (and every key of a relist) is sent on `changed`. The watch runs until
/// the returned cache and every receiver are dropped, or the task is aborted.
pub fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    key_of: KeyOf,
    changed: mpsc::UnboundedSender<Key>,
    what: impl std::fmt::Display,
) -> Arc<Cache<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    spawn_indexed(api, config, move |o: &K| key_of(kind, o.meta()), |k: &Key, _: &K| Some(k.clone()), changed, what)
}

/// Starts watching `api` with `config`. Each object is kept under `index` of it (an
/// object without one is not kept), and each change to an entry, or its removal, sends
/// `queue` of it on `changed`; `queue` gets the object as the watch last saw it (for a
/// removal, its last state). Every event updates the cache, whatever `queue` makes of it.
pub fn spawn_indexed<K, I>(
    api: Api<K>,
    config: watcher::Config,
    index: impl Fn(&K) -> Option<I> + Send + Sync + 'static,
    queue: impl Fn(&I, &K) -> Option<Key> + Send + Sync + 'static,
    changed: mpsc::UnboundedSender<Key>,
    what: impl std::fmt::Display,
) -> Arc<Cache<K, I>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    spawn_grouped(api, config, index, None, queue, changed, what)
}

/// [`spawn_indexed`], with each object's key also kept under its group
/// ([`crate::cache::spawn_grouped`]).
pub fn spawn_grouped<K, I>(
    api: Api<K>,
    config: watcher::Config,
    index: impl Fn(&K) -> Option<I> + Send + Sync + 'static,
    group_of: Option<crate::cache::GroupOf<K, I>>,
    queue: impl Fn(&I, &K) -> Option<Key> + Send + Sync + 'static,
    changed: mpsc::UnboundedSender<Key>,
    what: impl std::fmt::Display,
) -> Arc<Cache<K, I>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    crate::cache::spawn_grouped(
        api,
        config,
        index,
        group_of,
        move |c| match queue(&c.key, &c.seen) {
            Some(k) => changed.send(k).is_ok(),
            None => !changed.is_closed(),
        },
        what,
    )
}
