//! A reflector keyed by [`Key`] (or, for downstream copies, by [`Place`]), fed by a
//! kube-runtime watcher.
//!
//! kube-runtime's own `reflector::Store` keys objects by namespace and name, which
//! collide across workspaces in the wildcard view, so the syncer keeps its own map with
//! the workspace in the key. Everything else is kube-runtime's: the watcher lists, then
//! watches from the list's resourceVersion, resumes after errors with backoff, and
//! relists on 410 Expired. A relist replaces the map only once it is complete, so a
//! failed or partial list never makes objects look deleted.
//!
//! How an object is indexed and which upstream object its change queues are two
//! functions. Every event updates or removes its entry, whatever the object says: a
//! downstream copy is indexed by where it is ([`Place`]), which its cluster's users
//! cannot change, not by the annotations they can. An event whose upstream object
//! cannot be told (yet) still updates the entry; it only queues nothing.
//!
//! Objects are kept without `metadata.managedFields`: nothing here reads them, and as
//! `FieldsV1` value trees they were the largest part of a cached object. An object
//! written back from the cache (a status `PUT`) without them keeps the server's, as
//! Kubernetes does when a request leaves the field out.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use dashmap::DashMap;
use futures::StreamExt;
use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

#[cfg(doc)]
use crate::key::Place;
use crate::key::{Key, Kind};

/// How an object's key is found: upstream objects name their workspace in an
/// annotation.
pub type KeyOf = fn(Kind, &ObjectMeta) -> Option<Key>;

/// The objects of one watch, by index (`I`): a [`Key`] upstream, a [`Place`] downstream.
pub struct Cache<K, I = Key> {
    map: DashMap<I, Arc<K>>,
    synced: watch::Sender<bool>,
}

impl<K, I: Clone + Eq + Hash> Cache<K, I> {
    /// The object under `index`.
    pub fn get(&self, index: &I) -> Option<Arc<K>> {
        self.map.get(index).map(|e| e.value().clone())
    }

    /// Every index.
    pub fn keys(&self) -> Vec<I> {
        self.map.iter().map(|e| e.key().clone()).collect()
    }

    /// Every index with its object.
    pub fn entries(&self) -> Vec<(I, Arc<K>)> {
        self.map.iter().map(|e| (e.key().clone(), e.value().clone())).collect()
    }

    /// The objects whose indexes pass `keep`, without copying any index.
    pub fn values_where(&self, keep: impl Fn(&I) -> bool) -> Vec<Arc<K>> {
        self.map.iter().filter(|e| keep(e.key())).map(|e| e.value().clone()).collect()
    }

    /// The indexes that pass `keep`.
    pub fn keys_where(&self, keep: impl Fn(&I) -> bool) -> Vec<I> {
        self.map.iter().filter(|e| keep(e.key())).map(|e| e.key().clone()).collect()
    }

    /// Every object.
    pub fn values(&self) -> Vec<Arc<K>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether the first complete list has arrived. Before that, an absent key means
    /// nothing, and nobody may act on it.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first complete list.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

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
/// `queue` of it on `changed`; `queue` gets the object as the event has it (for a
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
    let cache: Arc<Cache<K, I>> = Arc::new(Cache { map: DashMap::new(), synced: watch::channel(false).0 });
    let weak = Arc::downgrade(&cache);
    let span = tracing::info_span!("watch", what);
    tokio::spawn(
        async move {
            let mut stream = watcher::watcher(api, config).default_backoff().modify(|o: &mut K| o.meta_mut().managed_fields = None).boxed();
            let mut relist: Option<Vec<(I, Arc<K>)>> = None;
            let send = |i: &I, o: &K| match queue(i, o) {
                Some(k) => changed.send(k).is_ok(),
                None => !changed.is_closed(),
            };
            while let Some(ev) = stream.next().await {
                let Some(cache) = weak.upgrade() else { return };
                match ev {
                    Ok(Event::Init) => relist = Some(Vec::new()),
                    Ok(Event::InitApply(o)) => {
                        if let (Some(list), Some(i)) = (relist.as_mut(), index(&o)) {
                            list.push((i, Arc::new(o)));
                        }
                    }
                    Ok(Event::InitDone) => {
                        let fresh = relist.take().unwrap_or_default();
                        let seen: HashSet<I> = fresh.iter().map(|(i, _)| i.clone()).collect();
                        let gone: Vec<(I, Arc<K>)> =
                            cache.map.iter().filter(|e| !seen.contains(e.key())).map(|e| (e.key().clone(), e.value().clone())).collect();
                        for (i, _) in &gone {
                            cache.map.remove(i);
                        }
                        for (i, o) in &fresh {
                            cache.map.insert(i.clone(), o.clone());
                        }
                        cache.synced.send_replace(true);
                        tracing::debug!(objects = cache.map.len(), removed = gone.len(), "listed");
                        for (i, o) in gone.iter().chain(&fresh) {
                            if !send(i, o) {
                                return;
                            }
                        }
                    }
                    Ok(Event::Apply(o)) => {
                        if let Some(i) = index(&o) {
                            let o = Arc::new(o);
                            cache.map.insert(i.clone(), o.clone());
                            if !send(&i, &o) {
                                return;
                            }
                        }
                    }
                    Ok(Event::Delete(o)) => {
                        if let Some(i) = index(&o) {
                            cache.map.remove(&i);
                            if !send(&i, &o) {
                                return;
                            }
                        }
                    }
                    // The watcher retries by itself, with backoff; what it had stays.
                    Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
                }
            }
        }
        .instrument(span),
    );
    cache
}
