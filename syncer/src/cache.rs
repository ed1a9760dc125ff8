//! The syncer's watch caches: the runtime's ([`runtime::cache`]), keyed by [`Key`]
//! upstream (or, for downstream copies, by [`Place`]), each change queueing the
//! upstream object it concerns.
//!
//! How an object is indexed and which upstream object its change queues are two
//! functions. Every event updates or removes its entry, whatever the object says: a
//! downstream copy is indexed by where it is ([`Place`]), which its cluster's users
//! cannot change, not by the annotations they can. An event whose upstream object
//! cannot be told (yet) still updates the entry; it only queues nothing.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher;
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

#[cfg(doc)]
use crate::key::Place;
use crate::key::{Key, Kind};

/// How an object's key is found: upstream objects name their workspace in an
/// annotation.
pub type KeyOf = fn(Kind, &ObjectMeta) -> Option<Key>;

/// The objects of one watch, by index (`I`): a [`Key`] upstream, a [`Place`] downstream.
pub type Cache<K, I = Key> = runtime::cache::Cache<K, I>;

/// Starts watching `api` with `config`, indexing each object by its key; every key
/// that changes (and every key of a relist) is sent on `changed`. The watch runs until
/// the returned cache and every receiver are dropped, or the task is aborted.
pub fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    key_of: KeyOf,
    changed: mpsc::UnboundedSender<Key>,
    what: &'static str,
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
    what: &'static str,
) -> Arc<Cache<K, I>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    runtime::cache::spawn_indexed(
        api,
        config,
        index,
        move |c| match queue(&c.key, &c.seen) {
            Some(k) => changed.send(k).is_ok(),
            None => !changed.is_closed(),
        },
        what,
    )
}
