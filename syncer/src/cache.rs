//! A reflector keyed by [`Key`], fed by a kube-runtime watcher.
//!
//! kube-runtime's own `reflector::Store` keys objects by namespace and name, which
//! collide across workspaces in the wildcard view, so the syncer keeps its own map with
//! the workspace in the key. Everything else is kube-runtime's: the watcher lists, then
//! watches from the list's resourceVersion, resumes after errors with backoff, and
//! relists on 410 Expired. A relist replaces the map only once it is complete, so a
//! failed or partial list never makes objects look deleted.
//!
//! Objects are kept without `metadata.managedFields`: nothing here reads them, and as
//! `FieldsV1` value trees they were the largest part of a cached object. An object
//! written back from the cache (a status `PUT`) without them keeps the server's, as
//! Kubernetes does when a request leaves the field out.

use std::collections::HashSet;
use std::fmt::Debug;
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

use crate::key::{Key, Kind};

/// How an object's key is found: upstream objects name their workspace in an
/// annotation, downstream copies name their upstream object.
pub type KeyOf = fn(Kind, &ObjectMeta) -> Option<Key>;

/// The objects of one watch, by key.
pub struct Cache<K> {
    map: DashMap<Key, Arc<K>>,
    synced: watch::Sender<bool>,
}

impl<K> Cache<K> {
    /// The object under `key`.
    pub fn get(&self, key: &Key) -> Option<Arc<K>> {
        self.map.get(key).map(|e| e.value().clone())
    }

    /// Every key.
    pub fn keys(&self) -> Vec<Key> {
        self.map.iter().map(|e| e.key().clone()).collect()
    }

    /// Every key with its object.
    pub fn entries(&self) -> Vec<(Key, Arc<K>)> {
        self.map.iter().map(|e| (e.key().clone(), e.value().clone())).collect()
    }

    /// The objects whose keys pass `keep`, without copying any key.
    pub fn values_where(&self, keep: impl Fn(&Key) -> bool) -> Vec<Arc<K>> {
        self.map.iter().filter(|e| keep(e.key())).map(|e| e.value().clone()).collect()
    }

    /// The keys that pass `keep`.
    pub fn keys_where(&self, keep: impl Fn(&Key) -> bool) -> Vec<Key> {
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

/// Starts watching `api` with `config`; every key that changes (and every key of a
/// relist) is sent on `changed`. The watch runs until the returned cache and every
/// receiver are dropped, or the task is aborted.
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
    let cache: Arc<Cache<K>> = Arc::new(Cache { map: DashMap::new(), synced: watch::channel(false).0 });
    let weak = Arc::downgrade(&cache);
    let span = tracing::info_span!("watch", what);
    tokio::spawn(
        async move {
            let mut stream = watcher::watcher(api, config).default_backoff().modify(|o: &mut K| o.meta_mut().managed_fields = None).boxed();
            let mut relist: Option<Vec<(Key, Arc<K>)>> = None;
            while let Some(ev) = stream.next().await {
                let Some(cache) = weak.upgrade() else { return };
                let key = |o: &K| key_of(kind, o.meta());
                match ev {
                    Ok(Event::Init) => relist = Some(Vec::new()),
                    Ok(Event::InitApply(o)) => {
                        if let (Some(list), Some(k)) = (relist.as_mut(), key(&o)) {
                            list.push((k, Arc::new(o)));
                        }
                    }
                    Ok(Event::InitDone) => {
                        let fresh = relist.take().unwrap_or_default();
                        let seen: HashSet<Key> = fresh.iter().map(|(k, _)| k.clone()).collect();
                        let gone: Vec<Key> = cache.map.iter().map(|e| e.key().clone()).filter(|k| !seen.contains(k)).collect();
                        for k in &gone {
                            cache.map.remove(k);
                        }
                        for (k, o) in fresh {
                            cache.map.insert(k, o);
                        }
                        cache.synced.send_replace(true);
                        tracing::debug!(objects = cache.map.len(), removed = gone.len(), "listed");
                        for k in gone.into_iter().chain(seen) {
                            if changed.send(k).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(Event::Apply(o)) => {
                        if let Some(k) = key(&o) {
                            cache.map.insert(k.clone(), Arc::new(o));
                            if changed.send(k).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(Event::Delete(o)) => {
                        if let Some(k) = key(&o) {
                            cache.map.remove(&k);
                            if changed.send(k).is_err() {
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
