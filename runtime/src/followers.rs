//! Where each companion must be, as this process's companions controller knows it,
//! shared with the push-mode syncers of the same process.
//!
//! The companions controller labels every companion with the clusters of the
//! Deployments it follows, and a syncer carries what is labelled for its cluster. A
//! label is one more write, and one more watch event, after the Deployment's own
//! assignment: a companion would reach its cluster one round trip after its
//! Deployment. The syncers that run in the controller's process do not wait for it:
//! the controller publishes here, from its index, which clusters each companion must
//! be on, as soon as an event changes them, and keeps the objects in its caches. A
//! push-mode syncer carries what is published for its cluster as well as what is
//! labelled for it, and removes a copy only when neither says so, so a move is
//! make-before-break whichever of the two comes first.
//!
//! The labels stay the contract: pull-mode syncers, and syncers of processes that do
//! not run the controller, see only them.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use kube::api::DynamicObject;
use placement_api::synced::Kind;
use tokio::sync::mpsc;

use crate::key::{Cache, Key};

/// The published clusters of every companion that must be somewhere, the objects
/// themselves, and the syncers to tell.
#[derive(Default)]
pub struct Followers {
    /// Per companion that must be on some cluster, those clusters.
    wanted: DashMap<Key, BTreeSet<String>>,
    /// The controller's caches, by kind: every object of the kinds that follow by rule,
    /// and the labelled ones of the kinds a template names.
    objects: OnceLock<HashMap<Kind, Arc<Cache<DynamicObject>>>>,
    /// Whether the controller's caches have listed and its index holds them all.
    synced: AtomicBool,
    /// Per cluster, the companions that must be on it, in key order (by kind, then
    /// workspace and namespace).
    by_cluster: DashMap<String, BTreeSet<Key>>,
    /// Per cluster, its syncer's queue.
    syncers: DashMap<String, mpsc::UnboundedSender<Key>>,
}

impl std::fmt::Debug for Followers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Followers")
            .field("companions", &self.wanted.len())
            .field("synced", &self.synced())
            .field("syncers", &self.syncers.len())
            .finish()
    }
}

impl Followers {
    /// The controller hands over its caches, once.
    pub fn attach(&self, objects: HashMap<Kind, Arc<Cache<DynamicObject>>>) {
        let _ = self.objects.set(objects);
    }

    /// The controller's caches have listed, and its index holds what they hold.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Whether what is published is complete: before, an absent companion means
    /// nothing, and no syncer may remove a copy on its word.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Publishes that companion `key` must be on `clusters` (none: nowhere), and queues
    /// it in the syncers of those clusters and of the ones it was on. `changed` says
    /// that the object itself changed, which its clusters' syncers must see even if
    /// its clusters stay.
    pub fn publish(&self, key: &Key, clusters: BTreeSet<String>, changed: bool) {
        let before =
            if clusters.is_empty() { self.wanted.remove(key).map(|(_, c)| c) } else { self.wanted.insert(key.clone(), clusters.clone()) };
        let before = before.unwrap_or_default();
        for gone in before.difference(&clusters) {
            if let Some(mut keys) = self.by_cluster.get_mut(gone) {
                keys.remove(key);
            }
        }
        for new in clusters.difference(&before) {
            self.by_cluster.entry(new.clone()).or_default().insert(key.clone());
        }
        let tell: BTreeSet<&String> =
            if changed { before.union(&clusters).collect() } else { before.symmetric_difference(&clusters).collect() };
        for cluster in tell {
            let gone = self.syncers.get(cluster).is_some_and(|tx| tx.send(key.clone()).is_err());
            if gone {
                self.syncers.remove_if(cluster, |_, tx| tx.is_closed());
            }
        }
    }

    /// The syncer of `cluster` wants to hear of its companions on `queue`; it is sent
    /// every one published for it so far.
    pub fn subscribe(&self, cluster: &str, queue: mpsc::UnboundedSender<Key>) {
        // In first, so that nothing published meanwhile is missed; a key sent twice
        // is looked at twice.
        self.syncers.insert(cluster.to_string(), queue.clone());
        for k in self.keys_for(cluster) {
            let _ = queue.send(k);
        }
    }

    /// Whether companion `key` must be on `cluster`.
    pub fn wants(&self, key: &Key, cluster: &str) -> bool {
        self.wanted.get(key).is_some_and(|c| c.contains(cluster))
    }

    /// Companion `key`, if it must be on `cluster` and the controller's caches hold it
    /// (of the kinds a template names, they hold only the labelled ones).
    pub fn get(&self, key: &Key, cluster: &str) -> Option<Arc<DynamicObject>> {
        if !self.wants(key, cluster) {
            return None;
        }
        self.objects.get()?.get(&key.kind)?.get(key)
    }

    /// Every companion that must be on `cluster`.
    pub fn keys_for(&self, cluster: &str) -> Vec<Key> {
        self.by_cluster.get(cluster).map(|keys| keys.iter().cloned().collect()).unwrap_or_default()
    }

    /// The companions of `kind` in namespace `namespace` of `workspace` that must be on
    /// `cluster`.
    pub fn in_namespace(&self, cluster: &str, kind: Kind, workspace: &str, namespace: &str) -> Vec<Key> {
        let Some(keys) = self.by_cluster.get(cluster) else { return Vec::new() };
        let from = Key::new(kind, workspace, namespace, "");
        let within = |k: &&Key| k.kind == kind && k.workspace == workspace && k.namespace == namespace;
        keys.range(from..).take_while(within).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_is_told_to_both_clusters_and_a_change_to_every_cluster_it_is_on() {
        let f = Followers::default();
        let key = Key::new(Kind::Service, "ws", "default", "web");
        let (east, mut east_rx) = mpsc::unbounded_channel();
        let (west, mut west_rx) = mpsc::unbounded_channel();
        f.subscribe("east", east);
        f.subscribe("west", west);
        let set = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        f.publish(&key, set(&["east"]), false);
        assert_eq!(east_rx.try_recv().ok(), Some(key.clone()));
        assert!(west_rx.try_recv().is_err(), "west has nothing to do with it");
        assert_eq!(f.keys_for("east"), vec![key.clone()]);
        f.publish(&key, set(&["east"]), false);
        assert!(east_rx.try_recv().is_err(), "nothing changed");
        f.publish(&key, set(&["east"]), true);
        assert_eq!(east_rx.try_recv().ok(), Some(key.clone()), "the object changed");
        f.publish(&key, set(&["west"]), false);
        assert_eq!(east_rx.try_recv().ok(), Some(key.clone()), "it leaves east");
        assert_eq!(west_rx.try_recv().ok(), Some(key.clone()), "it comes to west");
        f.publish(&key, BTreeSet::new(), false);
        assert_eq!(west_rx.try_recv().ok(), Some(key.clone()), "it goes");
        assert!(f.keys_for("west").is_empty() && f.wanted.is_empty());
        // By namespace and kind, for one cluster.
        let other_ns = Key::new(Kind::Service, "ws", "other", "web");
        let account = Key::new(Kind::ServiceAccount, "ws", "default", "web");
        for k in [&key, &other_ns, &account] {
            f.publish(k, set(&["east"]), false);
        }
        assert_eq!(f.in_namespace("east", Kind::Service, "ws", "default"), vec![key.clone()]);
        assert_eq!(f.in_namespace("east", Kind::ServiceAccount, "ws", "default"), vec![account.clone()]);
        assert!(f.in_namespace("west", Kind::Service, "ws", "default").is_empty());
        for k in [&key, &other_ns, &account] {
            f.publish(k, BTreeSet::new(), false);
        }
        for _ in 0..6 {
            east_rx.try_recv().unwrap();
        }
        // A syncer that subscribes late hears of what is already published for it.
        f.publish(&key, set(&["north"]), false);
        let (north, mut north_rx) = mpsc::unbounded_channel();
        f.subscribe("north", north);
        assert_eq!(north_rx.try_recv().ok(), Some(key.clone()));
        assert!(f.get(&key, "north").is_none(), "no object before the controller attaches its caches");
    }
}
