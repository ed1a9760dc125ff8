//! Which changes are the scheduler's own writes coming back, and the label and finalizer
//! patches it writes.

use super::*;

/// The labels other than the assignment labels.
pub(super) fn other_labels(labels: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    labels
        .into_iter()
        .flatten()
        .filter(|(k, v)| !(*v == SYNC_STATE_SYNC && sync_target_of_label(k).is_some()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The annotations without the workspace annotation a wildcard watch adds.
pub(super) fn without_cluster(annotations: Option<&BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    annotations.map(|a| {
        let mut a = a.clone();
        a.remove(placement_api::CLUSTER_ANNOTATION);
        a
    })
}

/// The clusters a workload is labelled for.
pub(super) fn labelled(m: &ObjectMeta) -> BTreeSet<String> {
    assigned_labels(m.labels.as_ref())
}

/// A merge patch of `metadata.labels` that makes the assignment labels say `want`.
pub(super) fn label_patch(have: &BTreeSet<String>, want: &BTreeSet<String>) -> Option<Map<String, Value>> {
    if have == want {
        return None;
    }
    let mut labels = Map::new();
    for c in want.difference(have) {
        labels.insert(sync_state_label(c), json!(SYNC_STATE_SYNC));
    }
    for c in have.difference(want) {
        labels.insert(sync_state_label(c), Value::Null);
    }
    Some(labels)
}

/// A strategic merge patch of the workload's metadata that makes its assignment labels
/// say `want`, and its syncer finalizers too: a cluster's finalizer goes on with its
/// label, in the same write, so that its syncer has nothing to add before it copies
/// the workload; a cluster that is no longer assigned loses its finalizer with its
/// label, since its syncer removes the copy whether or not the finalizer is there
/// (it only makes a deletion wait for the clusters the workload is assigned to).
/// Finalizers of clusters long gone (deregistered) are dropped the same way.
/// Finalizers are merged as a set, so those of others are kept, and no
/// resourceVersion is needed.
pub(super) fn workload_patch(d: &ObjectMeta, want: &BTreeSet<String>) -> Option<Value> {
    let present: BTreeSet<&str> = d.finalizers.iter().flatten().filter_map(|f| f.strip_prefix(SYNCER_FINALIZER_PREFIX)).collect();
    let add: Vec<String> = want.iter().filter(|c| !present.contains(c.as_str())).map(|c| syncer_finalizer(c)).collect();
    let drop: Vec<String> = present.iter().filter(|c| !want.contains(**c)).map(|c| syncer_finalizer(c)).collect();
    let labels = label_patch(&labelled(d), want);
    if labels.is_none() && add.is_empty() && drop.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    if let Some(l) = labels {
        meta.insert("labels".into(), Value::Object(l));
    }
    if !add.is_empty() {
        meta.insert("finalizers".into(), json!(add));
    }
    if !drop.is_empty() {
        meta.insert("$deleteFromPrimitiveList/finalizers".into(), json!(drop));
    }
    Some(json!({"metadata": meta}))
}
