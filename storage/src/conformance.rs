//! The rules every [`Store`] backend keeps, as a suite a backend's tests run:
//! `storage::conformance::run(|| open_a_fresh_store()).await`.
//!
//! Each check gets a fresh, empty store from the factory and panics with the rule it
//! found broken. What the trait leaves to a backend (how long the event window is, how
//! a write is made durable, what survives a restart) is tested beside the backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{EventType, Revision, Store, StoreError, WriteOp, MAX_OBJECT_BYTES};

/// How long a watch may take to deliver an event that is already written.
const EVENT_DEADLINE: Duration = Duration::from_secs(5);

fn obj(name: &str, data: &str) -> Value {
    json!({"metadata": {"name": name}, "data": data})
}

fn create(key: &str, data: &str) -> WriteOp {
    WriteOp::Create { key: key.into(), value: obj(key, data) }
}

/// Runs every check, each on a fresh store from `fresh`.
pub async fn run<S, F, Fut>(fresh: F)
where
    S: Store + ?Sized,
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<S>>,
{
    writes_take_the_next_revision_and_stamp_it(&*fresh().await).await;
    writes_on_a_stale_revision_conflict_and_change_nothing(&*fresh().await).await;
    writes_of_missing_keys_are_refused(&*fresh().await).await;
    oversized_objects_are_refused(&*fresh().await).await;
    concurrent_writes_all_land_with_distinct_revisions(&*fresh().await).await;
    lists_are_by_prefix_in_key_order_and_page(&*fresh().await).await;
    lists_at_a_revision_see_the_data_as_it_stood(&*fresh().await).await;
    watches_replay_then_follow_by_prefix(&*fresh().await).await;
}

async fn write(s: &(impl Store + ?Sized), op: WriteOp) -> crate::Entry {
    let what = format!("{op:?}");
    s.write(op).await.unwrap_or_else(|e| panic!("{what} failed: {e}"))
}

async fn writes_take_the_next_revision_and_stamp_it(s: &(impl Store + ?Sized)) {
    let start = s.revision();
    let a = write(s, create("k/a", "1")).await;
    assert_eq!(a.rev, start + 1, "a create takes the next revision");
    assert_eq!(a.value["metadata"]["resourceVersion"], json!((start + 1).to_string()), "the stored value carries its revision");
    let got = s.get("k/a").expect("a created key can be read");
    assert_eq!((got.rev, got.value["data"].clone()), (a.rev, json!("1")));
    let doc = s.get_doc("k/a").expect("and read unparsed");
    assert_eq!(*doc.value(), *got.value, "get and get_doc agree");
    let b = write(s, WriteOp::Update { key: "k/a".into(), value: obj("k/a", "2"), expected: a.rev }).await;
    assert_eq!(b.rev, a.rev + 1, "an update takes the next revision");
    let gone = write(s, WriteOp::Delete { key: "k/a".into(), expected: Some(b.rev) }).await;
    assert_eq!(gone.rev, b.rev + 1, "a delete takes the next revision");
    assert_eq!(gone.value["metadata"]["resourceVersion"], json!(gone.rev.to_string()), "a delete returns the last value at its revision");
    assert_eq!(gone.value["data"], json!("2"));
    assert!(s.get("k/a").is_none() && s.get_doc("k/a").is_none(), "a deleted key is gone");
    assert_eq!(s.revision(), gone.rev, "the store's revision is its last write's");
    let c = write(s, create("k/a", "3")).await;
    assert_eq!(c.rev, gone.rev + 1, "a key created again takes the next revision, never an old one");
}

async fn writes_on_a_stale_revision_conflict_and_change_nothing(s: &(impl Store + ?Sized)) {
    let a = write(s, create("k/a", "1")).await;
    let b = write(s, WriteOp::Update { key: "k/a".into(), value: obj("k/a", "2"), expected: a.rev }).await;
    let stale = s.write(WriteOp::Update { key: "k/a".into(), value: obj("k/a", "lost"), expected: a.rev }).await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { expected, actual, .. }) if expected == a.rev && actual == b.rev),
        "an update at a stale revision conflicts, naming both revisions: {stale:?}"
    );
    let stale = s.write(WriteOp::Delete { key: "k/a".into(), expected: Some(a.rev) }).await;
    assert!(matches!(stale, Err(StoreError::Conflict { .. })), "a delete at a stale revision conflicts: {stale:?}");
    let dup = s.write(create("k/a", "again")).await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "a create of an existing key is refused: {dup:?}");
    assert_eq!(s.revision(), b.rev, "refused writes take no revision");
    assert_eq!(s.get("k/a").map(|e| (e.rev, e.value["data"].clone())), Some((b.rev, json!("2"))), "and change nothing");
}

async fn writes_of_missing_keys_are_refused(s: &(impl Store + ?Sized)) {
    let update = s.write(WriteOp::Update { key: "k/none".into(), value: obj("k/none", "x"), expected: 1 }).await;
    assert!(matches!(update, Err(StoreError::NotFound(_)) | Err(StoreError::Conflict { .. })), "an update of a missing key: {update:?}");
    let delete = s.write(WriteOp::Delete { key: "k/none".into(), expected: None }).await;
    assert!(matches!(delete, Err(StoreError::NotFound(_))), "a delete of a missing key: {delete:?}");
    assert!(s.get("k/none").is_none(), "nothing was created");
}

async fn oversized_objects_are_refused(s: &(impl Store + ?Sized)) {
    let start = s.revision();
    let big = s.write(create("k/big", &"x".repeat(MAX_OBJECT_BYTES + 1))).await;
    assert!(matches!(big, Err(StoreError::TooLarge { .. })), "an object over MAX_OBJECT_BYTES is refused: {:?}", big.map(|e| e.rev));
    assert!(s.get("k/big").is_none() && s.revision() == start, "and nothing is written");
}

async fn concurrent_writes_all_land_with_distinct_revisions(s: &(impl Store + ?Sized)) {
    let start = s.revision();
    let writes = (0..100).map(|i| s.write(create(&format!("k/{i:03}"), "x")));
    let mut revs: Vec<Revision> =
        futures::future::join_all(writes).await.into_iter().map(|r| r.expect("a concurrent create").rev).collect();
    revs.sort_unstable();
    assert_eq!(revs, (start + 1..=start + 100).collect::<Vec<_>>(), "100 concurrent writes take 100 consecutive revisions");
    assert_eq!(s.list("k/", None, None).0.len(), 100, "and all of them are there");
}

async fn lists_are_by_prefix_in_key_order_and_page(s: &(impl Store + ?Sized)) {
    for key in ["a/2", "a/1", "a/10", "ab/1", "b/1"] {
        write(s, create(key, key)).await;
    }
    let (all, rev) = s.list("a/", None, None);
    assert_eq!(all.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["a/1", "a/10", "a/2"], "a prefix, in key order");
    assert_eq!(rev, s.revision(), "a list reflects the latest revision");
    assert!(all.iter().all(|(k, e)| e.value["data"] == json!(k)), "each key with its own value");
    let (page, _) = s.list("a/", Some("a/1"), Some(1));
    assert_eq!(page.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["a/10"], "a page starts after the key given");
    let (docs, _) = s.list_docs("a/");
    assert_eq!(docs.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["a/1", "a/10", "a/2"], "list_docs lists the same");
}

async fn lists_at_a_revision_see_the_data_as_it_stood(s: &(impl Store + ?Sized)) {
    let a = write(s, create("k/a", "old")).await;
    write(s, create("k/b", "b")).await;
    let then = s.revision();
    write(s, WriteOp::Update { key: "k/a".into(), value: obj("k/a", "new"), expected: a.rev }).await;
    write(s, WriteOp::Delete { key: "k/b".into(), expected: None }).await;
    write(s, create("k/c", "c")).await;
    let old = s.list_at("k/", None, then).expect("a recent revision can be listed");
    let seen: Vec<(String, Value)> = old.iter().map(|(k, e)| (k.clone(), e.value["data"].clone())).collect();
    assert_eq!(seen, [("k/a".to_string(), json!("old")), ("k/b".to_string(), json!("b"))], "the data as it stood at {then}");
    let later = s.list_at("k/", Some("k/a"), then).expect("a later page of it");
    assert_eq!(later.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["k/b"]);
}

async fn watches_replay_then_follow_by_prefix(s: &(impl Store + ?Sized)) {
    let a = write(s, create("w/a", "1")).await;
    let from = a.rev;
    let b = write(s, WriteOp::Update { key: "w/a".into(), value: obj("w/a", "2"), expected: a.rev }).await;
    write(s, create("other/x", "x")).await;
    let mut w = s.watch("w/", from).expect("a watch from a recent revision");
    write(s, WriteOp::Delete { key: "w/a".into(), expected: Some(b.rev) }).await;
    write(s, create("w/b", "3")).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let ev = tokio::time::timeout(EVENT_DEADLINE, w.next())
            .await
            .unwrap_or_else(|_| panic!("no event within {EVENT_DEADLINE:?}; seen so far: {seen:?}"))
            .expect("the watch goes on")
            .expect("an event, not an error");
        if ev.kind == EventType::Deleted {
            assert_eq!(ev.prev().map(|p| p["data"].clone()), Some(json!("2")), "a deletion carries the value before it");
        }
        seen.push((ev.kind, ev.key.clone(), ev.rev));
    }
    let kinds: Vec<(EventType, &str)> = seen.iter().map(|(t, k, _)| (*t, k.as_str())).collect();
    assert_eq!(
        kinds,
        [(EventType::Modified, "w/a"), (EventType::Deleted, "w/a"), (EventType::Added, "w/b")],
        "the events after the revision, under the prefix, in order"
    );
    assert!(seen.windows(2).all(|p| p[0].2 < p[1].2), "in revision order: {seen:?}");
}
