//! The watch cache every controller reads from, and the one key of an object across
//! workspaces.
//!
//! kube-runtime's own `reflector::Store` keys objects by namespace and name, which
//! collide across workspaces in the wildcard view (`/clusters/*`), so a [`Cache`]
//! keeps its own map, by [`ObjKey`] (workspace, namespace, name) unless a controller
//! indexes it otherwise (a syncer finds its downstream copies by where they are).
//! Everything else is kube-runtime's: the watcher lists, then watches from the list's
//! resourceVersion, resumes after errors with backoff, and relists on 410 Expired.
//!
//! A relist replaces the map only once it is complete, so a failed or partial list
//! never makes objects look deleted. Every change, those a relist finds included, is
//! handed to the controller as a [`Change`] (the object before and after), so it can
//! decide what the change could affect instead of re-evaluating the world; the cache
//! says it is synced only after the first list's changes have been handed over.
//!
//! Objects are kept without `metadata.managedFields`: no controller reads them, and as
//! `FieldsV1` value trees they were the largest part of a cached object. An object
//! written back from the cache (a status `PUT`) without them keeps the server's, as
//! Kubernetes does when a request leaves the field out.

use std::collections::HashSet;
use std::fmt::{self, Debug};
use std::hash::Hash;
use std::sync::Arc;

use dashmap::DashMap;
use futures::StreamExt;
use kube::api::{Api, ObjectMeta};
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

    /// The key of an object in `ws`; `None` when it has no name, or when the wildcard
    /// view did not say which workspace it is in (never the case for a Flotilla
    /// control plane).
    pub fn of(meta: &ObjectMeta, ws: Workspace) -> Option<Self> {
        let workspace = match ws {
            Workspace::Fixed(w) => w,
            Workspace::Annotated => meta.annotations.as_ref()?.get(CLUSTER_ANNOTATION)?.as_str(),
        };
        Some(ObjKey::new(workspace, meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref()?))
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
    /// The `kcp.io/cluster` annotation the wildcard view adds.
    Annotated,
}

/// A change the watch saw to the entry under `key`.
pub struct Change<K, I = ObjKey> {
    /// The entry's key.
    pub key: I,
    /// What the cache held before.
    pub old: Option<Arc<K>>,
    /// What it holds now; `None` when the object was deleted.
    pub new: Option<Arc<K>>,
    /// The object as the watch last saw it: `new`, or for a deletion the deleted
    /// object's last state (which the cache may not have held).
    pub seen: Arc<K>,
}

/// The objects of one watch, by key (`I`).
pub struct Cache<K, I = ObjKey> {
    map: DashMap<I, Arc<K>>,
    /// The keys of each group, when the cache was started with a grouping
    /// ([`spawn_grouped`]); empty otherwise.
    groups: DashMap<I, HashSet<I>>,
    synced: watch::Sender<bool>,
}

/// Which group an object belongs to (such as the key of its controller), if any.
pub type GroupOf<K, I> = Box<dyn Fn(&I, &K) -> Option<I> + Send + Sync>;

impl<K, I: Clone + Eq + Hash> Cache<K, I> {
    /// The object under `key`.
    pub fn get(&self, key: &I) -> Option<Arc<K>> {
        self.map.get(key).map(|e| e.value().clone())
    }

    /// Every key.
    pub fn keys(&self) -> Vec<I> {
        self.map.iter().map(|e| e.key().clone()).collect()
    }

    /// Every key with its object.
    pub fn entries(&self) -> Vec<(I, Arc<K>)> {
        self.map.iter().map(|e| (e.key().clone(), e.value().clone())).collect()
    }

    /// Every object.
    pub fn values(&self) -> Vec<Arc<K>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }

    /// The objects whose keys pass `keep`, without copying any key.
    pub fn values_where(&self, keep: impl Fn(&I) -> bool) -> Vec<Arc<K>> {
        self.map.iter().filter(|e| keep(e.key())).map(|e| e.value().clone()).collect()
    }

    /// The objects of `group` (see [`spawn_grouped`]): a lookup, not a scan.
    pub fn grouped(&self, group: &I) -> Vec<Arc<K>> {
        let Some(keys) = self.groups.get(group).map(|g| g.value().iter().cloned().collect::<Vec<_>>()) else { return Vec::new() };
        keys.iter().filter_map(|k| self.get(k)).collect()
    }

    /// Moves `key` from the group of `old` to that of `new`.
    fn regroup(&self, group_of: Option<&GroupOf<K, I>>, key: &I, old: Option<&K>, new: Option<&K>) {
        let Some(group_of) = group_of else { return };
        let (from, to) = (old.and_then(|o| group_of(key, o)), new.and_then(|n| group_of(key, n)));
        if from == to {
            return;
        }
        if let Some(g) = from {
            if let dashmap::mapref::entry::Entry::Occupied(mut e) = self.groups.entry(g) {
                e.get_mut().remove(key);
                if e.get().is_empty() {
                    e.remove();
                }
            }
        }
        if let Some(g) = to {
            self.groups.entry(g).or_default().insert(key.clone());
        }
    }

    /// The keys that pass `keep`.
    pub fn keys_where(&self, keep: impl Fn(&I) -> bool) -> Vec<I> {
        self.map.iter().filter(|e| keep(e.key())).map(|e| e.key().clone()).collect()
    }

    /// The keys whose entries pass `keep`.
    pub fn entries_where(&self, keep: impl Fn(&I, &K) -> bool) -> Vec<I> {
        self.map.iter().filter(|e| keep(e.key(), e.value())).map(|e| e.key().clone()).collect()
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether the first complete list has arrived and been handed over. Before that,
    /// an absent key means nothing, and nobody may act on it.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first complete list.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Starts watching `api` with `config`, keeping each object under its [`ObjKey`] in
/// `ws`; `on_change` sees every change. See [`spawn_indexed`].
pub fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    ws: Workspace,
    what: impl std::fmt::Display,
    mut on_change: impl FnMut(Change<K>) + Send + 'static,
) -> Arc<Cache<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    spawn_indexed(
        api,
        config,
        move |o: &K| ObjKey::of(o.meta(), ws),
        move |c| {
            on_change(c);
            true
        },
        what,
    )
}

/// Starts watching `api` with `config`. Each object is kept under `index` of it (an
/// object without one is not kept), and every change to an entry, or its removal, is
/// handed to `on_change`, which returns whether to go on watching. The watch runs
/// until the returned cache is dropped, `on_change` says stop, or the task is aborted.
pub fn spawn_indexed<K, I>(
    api: Api<K>,
    config: watcher::Config,
    index: impl Fn(&K) -> Option<I> + Send + Sync + 'static,
    on_change: impl FnMut(Change<K, I>) -> bool + Send + 'static,
    what: impl std::fmt::Display,
) -> Arc<Cache<K, I>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    spawn_grouped(api, config, index, None, on_change, what)
}

/// [`spawn_indexed`], and with `group_of`, each object's key is also kept under its
/// group (for example, a ReplicaSet under the key of the Deployment that controls it),
/// so that [`Cache::grouped`] finds a group's objects without a scan.
pub fn spawn_grouped<K, I>(
    api: Api<K>,
    config: watcher::Config,
    index: impl Fn(&K) -> Option<I> + Send + Sync + 'static,
    group_of: Option<GroupOf<K, I>>,
    mut on_change: impl FnMut(Change<K, I>) -> bool + Send + 'static,
    what: impl std::fmt::Display,
) -> Arc<Cache<K, I>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    let cache: Arc<Cache<K, I>> = Arc::new(Cache { map: DashMap::new(), groups: DashMap::new(), synced: watch::channel(false).0 });
    let weak = Arc::downgrade(&cache);
    let span = tracing::info_span!("watch", what = %what);
    tokio::spawn(
        async move {
            let mut stream = watcher::watcher(api, config).default_backoff().modify(|o: &mut K| o.meta_mut().managed_fields = None).boxed();
            let mut relist: Option<Vec<(I, Arc<K>)>> = None;
            while let Some(ev) = stream.next().await {
                let Some(cache) = weak.upgrade() else { return };
                let listed = matches!(ev, Ok(Event::InitDone));
                let changes = match ev {
                    Ok(Event::Init) => {
                        relist = Some(Vec::new());
                        continue;
                    }
                    Ok(Event::InitApply(o)) => {
                        if let (Some(list), Some(i)) = (relist.as_mut(), index(&o)) {
                            list.push((i, Arc::new(o)));
                        }
                        continue;
                    }
                    // The whole list is in the map before anyone hears of it.
                    Ok(Event::InitDone) => {
                        let fresh = relist.take().unwrap_or_default();
                        let seen: HashSet<I> = fresh.iter().map(|(i, _)| i.clone()).collect();
                        let gone: Vec<I> = cache.map.iter().filter(|e| !seen.contains(e.key())).map(|e| e.key().clone()).collect();
                        let mut changes = Vec::with_capacity(gone.len() + fresh.len());
                        for key in gone {
                            if let Some((key, old)) = cache.map.remove(&key) {
                                cache.regroup(group_of.as_ref(), &key, Some(&old), None);
                                changes.push(Change { key, seen: old.clone(), old: Some(old), new: None });
                            }
                        }
                        for (key, o) in fresh {
                            let old = cache.map.insert(key.clone(), o.clone());
                            cache.regroup(group_of.as_ref(), &key, old.as_deref(), Some(&o));
                            changes.push(Change { key, old, new: Some(o.clone()), seen: o });
                        }
                        tracing::debug!(objects = cache.map.len(), changes = changes.len(), "listed");
                        changes
                    }
                    Ok(Event::Apply(o)) => match index(&o) {
                        Some(key) => {
                            let o = Arc::new(o);
                            let old = cache.map.insert(key.clone(), o.clone());
                            cache.regroup(group_of.as_ref(), &key, old.as_deref(), Some(&o));
                            vec![Change { key, old, new: Some(o.clone()), seen: o }]
                        }
                        None => continue,
                    },
                    Ok(Event::Delete(o)) => match index(&o) {
                        Some(key) => {
                            let old = cache.map.remove(&key).map(|(_, o)| o);
                            cache.regroup(group_of.as_ref(), &key, old.as_deref(), None);
                            vec![Change { key, old, new: None, seen: Arc::new(o) }]
                        }
                        None => continue,
                    },
                    // The watcher retries by itself, with backoff; what it had stays.
                    Err(e) => {
                        tracing::warn!(error = %e, "watch failed; retrying");
                        continue;
                    }
                };
                for change in changes {
                    if !on_change(change) {
                        return;
                    }
                }
                if listed {
                    cache.synced.send_if_modified(|s| !std::mem::replace(s, true));
                }
            }
        }
        .instrument(span),
    );
    cache
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grouped_cache_finds_a_groups_objects_and_follows_moves_and_removals() {
        let cache: Cache<String, String> = Cache { map: DashMap::new(), groups: DashMap::new(), synced: watch::channel(false).0 };
        // The group is the object's text up to its first dash.
        let group_of: GroupOf<String, String> = Box::new(|_, o: &String| o.split_once('-').map(|(g, _)| g.to_string()));
        let put = |key: &str, o: Option<&str>| {
            let old = match o {
                Some(o) => cache.map.insert(key.into(), Arc::new(o.into())),
                None => cache.map.remove(key).map(|(_, o)| o),
            };
            cache.regroup(Some(&group_of), &key.to_string(), old.as_deref(), o.map(String::from).as_ref());
        };
        let sorted = |g: &str| {
            let mut v: Vec<String> = cache.grouped(&g.to_string()).iter().map(|o| o.to_string()).collect();
            v.sort();
            v
        };
        put("1", Some("web-a"));
        put("2", Some("web-b"));
        put("3", Some("db-a"));
        put("4", Some("loose"));
        assert_eq!(sorted("web"), ["web-a", "web-b"]);
        assert_eq!(sorted("db"), ["db-a"]);
        // An object whose group changes moves; one removed leaves, and an empty group goes.
        put("2", Some("db-b"));
        assert_eq!((sorted("web"), sorted("db")), (vec!["web-a".to_string()], vec!["db-a".to_string(), "db-b".to_string()]));
        put("1", None);
        assert!(sorted("web").is_empty());
        assert!(!cache.groups.contains_key("web"));
        assert!(sorted("none").is_empty());
    }
}
