//! Watch-fed caches of the objects the scheduler reads, keyed across workspaces.
//!
//! Each cache is kept by a kube-runtime watcher (list, then watch, relisting after a
//! 410). Every change is handed to a callback with the object before and after, so
//! the controller can decide what the change could affect instead of re-evaluating
//! the world.

use std::collections::HashSet;
use std::fmt::{self, Debug};
use std::sync::Arc;

use dashmap::DashMap;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use placement_api::CLUSTER_ANNOTATION;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::Instrument;

/// An object's identity across workspaces. Cluster-scoped objects have an empty namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// The workspace (logical cluster).
    pub workspace: String,
    /// The namespace, or empty.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjKey {
    /// A key from its parts.
    pub fn new(workspace: &str, namespace: &str, name: &str) -> Self {
        ObjKey { workspace: workspace.into(), namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.workspace, self.name)
        } else {
            write!(f, "{}/{}/{}", self.workspace, self.namespace, self.name)
        }
    }
}

/// Where a watched object's workspace comes from.
#[derive(Debug, Clone, Copy)]
pub enum Workspace {
    /// Every object is in this workspace (a watch of one workspace).
    Fixed(&'static str),
    /// The `kcp.io/cluster` annotation a wildcard watch adds.
    Annotated,
}

/// The key of an object, if it has a name (and, for wildcard watches, a workspace).
pub fn key_of<K: Resource>(o: &K, ws: Workspace) -> Option<ObjKey> {
    let meta = o.meta();
    let workspace = match ws {
        Workspace::Fixed(w) => w,
        Workspace::Annotated => meta.annotations.as_ref()?.get(CLUSTER_ANNOTATION)?.as_str(),
    };
    Some(ObjKey::new(workspace, meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref()?))
}

/// A change the watch saw: the object before (if cached) and after (if it still exists).
pub struct Change<K> {
    /// The object's key.
    pub key: ObjKey,
    /// What the cache held before.
    pub old: Option<Arc<K>>,
    /// What it holds now; `None` when the object was deleted.
    pub new: Option<Arc<K>>,
}

/// A cache of one kind of object.
pub struct Store<K> {
    map: DashMap<ObjKey, Arc<K>>,
    synced: watch::Sender<bool>,
}

impl<K> Store<K> {
    /// The cached object.
    pub fn get(&self, key: &ObjKey) -> Option<Arc<K>> {
        self.map.get(key).map(|e| e.value().clone())
    }

    /// The cached objects whose key passes `keep`, without copying the other keys.
    pub fn values_where(&self, keep: impl Fn(&ObjKey) -> bool) -> Vec<Arc<K>> {
        self.map.iter().filter(|e| keep(e.key())).map(|e| e.value().clone()).collect()
    }

    /// The keys of the cached objects that pass `keep`.
    pub fn entries_where(&self, keep: impl Fn(&ObjKey, &K) -> bool) -> Vec<ObjKey> {
        self.map.iter().filter(|e| keep(e.key(), e.value())).map(|e| e.key().clone()).collect()
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<ObjKey> {
        self.map.iter().map(|e| e.key().clone()).collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Waits until the first list has been loaded.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Starts watching `api` into a new cache; `on_change` sees every change, including
/// those a relist finds. The watch stops when the cache is dropped.
pub fn spawn<K, F>(api: Api<K>, config: watcher::Config, ws: Workspace, what: &'static str, on_change: F) -> Arc<Store<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: Fn(Change<K>) + Send + 'static,
{
    let store: Arc<Store<K>> = Arc::new(Store { map: DashMap::new(), synced: watch::channel(false).0 });
    let weak = Arc::downgrade(&store);
    let span = tracing::info_span!("watch", what);
    tokio::spawn(
        async move {
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            let mut relist: Option<Vec<(ObjKey, Arc<K>)>> = None;
            while let Some(ev) = stream.next().await {
                let Some(store) = weak.upgrade() else { return };
                match ev {
                    Ok(Event::Init) => relist = Some(Vec::new()),
                    Ok(Event::InitApply(o)) => {
                        if let (Some(list), Some(k)) = (relist.as_mut(), key_of(&o, ws)) {
                            list.push((k, Arc::new(o)));
                        }
                    }
                    Ok(Event::InitDone) => {
                        let fresh = relist.take().unwrap_or_default();
                        let seen: HashSet<&ObjKey> = fresh.iter().map(|(k, _)| k).collect();
                        let gone: Vec<ObjKey> = store.map.iter().map(|e| e.key().clone()).filter(|k| !seen.contains(k)).collect();
                        for key in gone {
                            let old = store.map.remove(&key).map(|(_, o)| o);
                            on_change(Change { key, old, new: None });
                        }
                        for (key, o) in fresh {
                            let old = store.map.insert(key.clone(), o.clone());
                            on_change(Change { key, old, new: Some(o) });
                        }
                        store.synced.send_replace(true);
                        tracing::debug!(objects = store.map.len(), "listed");
                    }
                    Ok(Event::Apply(o)) => {
                        if let Some(key) = key_of(&o, ws) {
                            let o = Arc::new(o);
                            let old = store.map.insert(key.clone(), o.clone());
                            on_change(Change { key, old, new: Some(o) });
                        }
                    }
                    Ok(Event::Delete(o)) => {
                        if let Some(key) = key_of(&o, ws) {
                            let old = store.map.remove(&key).map(|(_, o)| o);
                            on_change(Change { key, old, new: None });
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
                }
            }
        }
        .instrument(span),
    );
    store
}
