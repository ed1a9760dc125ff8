//! The types a workspace serves from what its clusters report rather than from the
//! store: the pods of its workloads ([`crate::pod_view`] takes the reports in).
//!
//! They live in a [`MemoryStore`] of their own, beside the store: a pod changes far
//! more often than anything a user writes, and a cluster's syncer reports all of its
//! pods again whenever it (or the control plane) starts, so none of it is worth a
//! durable write. Reads, lists, selectors, tables and watches are the engine's, over
//! this store instead of the other; the resourceVersions of a view are its own.
//!
//! Two clusters may each run a pod of one name (the same StatefulSet on both, say), so
//! a view's key names the cluster too: `NAME.CLUSTER`. A cluster's name is a DNS label
//! and has no dot. `NAME.CLUSTER` addresses one cluster's object, and `NAME` every
//! cluster's object of that name ([`find`]).

use std::sync::Arc;

use crate::store::{Entry, MemoryStore, Store, WindowLimits, EVENT_WINDOW};

/// The event window of the views: about 20,000 pod updates, for watchers that resume.
pub const LIMITS: WindowLimits = WindowLimits { events: EVENT_WINDOW, bytes: 64 << 20 };

/// A new, empty store for the views.
pub fn new_store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(MemoryStore::clock_revision(), LIMITS))
}

/// The name under which `cluster`'s object `name` is kept, and by which it is always
/// addressed alone.
pub fn key_name(name: &str, cluster: &str) -> String {
    format!("{name}.{cluster}")
}

/// The objects that `name` addresses, given `key`, the key the scope gives that name:
/// the one kept under it (when `name` is `NAME.CLUSTER`) and every cluster's object
/// named `name`, in the order of the clusters' names.
pub fn find(store: &dyn Store, key: &str, name: &str) -> Vec<Entry> {
    let exact = store.get(key);
    let (others, _) = store.list(&format!("{key}."), None, None);
    let named = others.into_iter().map(|(_, e)| e).filter(|e| e.value.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(name));
    exact.into_iter().chain(named).collect()
}

/// The cluster an object of a view came from (its `workload.flotilla.io/cluster` label).
pub fn cluster_of(obj: &serde_json::Value) -> Option<&str> {
    obj.pointer("/metadata/labels")?.get(placement_api::CLUSTER_LABEL)?.as_str()
}

/// What a read of `name` that found `found` should warn about: that several clusters
/// have an object of that name, which one was answered, and how to address each.
pub fn ambiguity(resource: &str, name: &str, found: &[Entry]) -> Option<String> {
    if found.len() < 2 {
        return None;
    }
    let clusters: Vec<&str> = found.iter().filter_map(|e| cluster_of(&e.value)).collect();
    let addresses: Vec<String> = clusters.iter().map(|c| key_name(name, c)).collect();
    Some(format!(
        "{resource} \"{name}\" runs on {} clusters ({}); this answer is {}'s. Name one as {}",
        clusters.len(),
        clusters.join(", "),
        clusters.first().copied().unwrap_or_default(),
        addresses.join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WriteOp;
    use serde_json::json;

    async fn put(store: &dyn Store, name: &str, cluster: &str) {
        let value = json!({"metadata": {"name": name, "labels": {placement_api::CLUSTER_LABEL: cluster}}});
        store.write(WriteOp::Create { key: format!("core/pods/ws/ns/{}", key_name(name, cluster)), value }).await.unwrap();
    }

    fn clusters(found: &[Entry]) -> Vec<&str> {
        found.iter().filter_map(|e| cluster_of(&e.value)).collect()
    }

    #[tokio::test]
    async fn a_name_finds_every_clusters_object_of_that_name_and_name_dot_cluster_finds_one() {
        let store = new_store();
        put(&*store, "store-0", "west").await;
        put(&*store, "store-0", "east").await;
        put(&*store, "store-01", "east").await;
        // A pod whose own name has a dot, which a prefix alone would confuse.
        put(&*store, "store-0.x", "east").await;
        let key = |n: &str| format!("core/pods/ws/ns/{n}");
        let both = find(&*store, &key("store-0"), "store-0");
        assert_eq!(clusters(&both), ["east", "west"]);
        let warning = ambiguity("pods", "store-0", &both).unwrap();
        assert!(warning.contains("store-0.east or store-0.west"), "{warning}");
        let one = find(&*store, &key("store-0.west"), "store-0.west");
        assert_eq!(clusters(&one), ["west"]);
        assert!(ambiguity("pods", "store-0.west", &one).is_none());
        assert_eq!(clusters(&find(&*store, &key("store-0.x"), "store-0.x")), ["east"]);
        assert!(find(&*store, &key("store-1"), "store-1").is_empty());
    }
}
