//! The etcd store against a real etcd, started here from the `etcd` binary on PATH
//! (Debian's `etcd-server`). Without one these tests say so and pass, unless
//! FLOTILLA_REQUIRE_ETCD is set, as CI sets it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use storage::local_etcd::{LocalEtcd, SlowLink};
use storage::{EtcdConfig, EtcdStore, EventType, Range, Store, StoreError, WriteOp};

fn etcd(members: usize) -> Option<(tempfile::TempDir, LocalEtcd)> {
    let dir = tempfile::tempdir().unwrap();
    LocalEtcd::for_test(dir.path(), members).map(|cluster| (dir, cluster))
}

fn config(cluster: &LocalEtcd, prefix: &str) -> EtcdConfig {
    EtcdConfig { prefix: prefix.into(), compaction_interval: None, ..EtcdConfig::new(cluster.endpoints()) }
}

async fn connect(config: EtcdConfig) -> Arc<EtcdStore> {
    // A cluster that has just started may still be electing its leader.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match EtcdStore::connect(config.clone()).await {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("etcd not ready yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("connecting to etcd: {e}"),
        }
    }
}

fn obj(name: &str, data: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "data": data})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keeps_every_rule_of_the_store() {
    let Some((_dir, cluster)) = etcd(1) else { return };
    let n = AtomicUsize::new(0);
    storage::conformance::run(|| {
        let config = config(&cluster, &format!("/conformance{}", n.fetch_add(1, Ordering::Relaxed)));
        connect(config)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_one_replica_is_read_and_watched_on_another() {
    let Some((_dir, cluster)) = etcd(1) else { return };
    let a = connect(config(&cluster, "/shared")).await;
    let b = connect(config(&cluster, "/shared")).await;
    let mut watch = b.watch("k/", b.revision()).unwrap();
    let created = a.write(WriteOp::Create { key: "k/x".into(), value: obj("x", "1") }).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), watch.next()).await.expect("B sees A's write").unwrap().unwrap();
    assert_eq!((ev.kind, ev.key.as_str(), ev.rev), (EventType::Added, "k/x", created.rev));
    let got = b.get("k/x").expect("B reads A's write once its watch delivered it");
    assert_eq!((got.rev, got.value["metadata"]["resourceVersion"].clone()), (created.rev, json!(created.rev.to_string())));
    // A write on B at A's revision wins; A's next write at the old revision conflicts.
    let updated = b.write(WriteOp::Update { key: "k/x".into(), value: obj("x", "2"), expected: created.rev }).await.unwrap();
    assert!(updated.rev > created.rev, "revisions grow across replicas");
    let stale = a.write(WriteOp::Update { key: "k/x".into(), value: obj("x", "3"), expected: created.rev }).await;
    assert!(matches!(stale, Err(StoreError::Conflict { actual, .. }) if actual == updated.rev), "{stale:?}");
    assert_eq!(a.get("k/x").map(|e| e.value["data"].clone()), Some(json!("2")), "A has taken in B's write");
    // A third replica started now loads what both wrote.
    let c = connect(config(&cluster, "/shared")).await;
    assert_eq!(c.get("k/x").map(|e| e.rev), Some(updated.rev));
    assert!(c.watch("k/", updated.rev - 1).is_err(), "a new replica's window starts where it loaded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sync_a_replica_whose_watch_lags_reads_every_write_made_before() {
    let Some((_dir, cluster)) = etcd(1) else { return };
    let lag = Duration::from_millis(400);
    let link = SlowLink::start(&cluster.endpoints()[0], lag).unwrap();
    let a = connect(config(&cluster, "/lag")).await;
    let b = connect(EtcdConfig { endpoints: vec![link.url()], ..config(&cluster, "/lag") }).await;
    let write = |op| {
        let a = a.clone();
        async move { a.write(op).await.unwrap() }
    };
    let listed = |b: &EtcdStore| b.list("k/", None, None).0.into_iter().map(|(k, e)| (k, e.rev)).collect::<Vec<_>>();

    let x = write(WriteOp::Create { key: "k/x".into(), value: obj("x", "1") }).await;
    assert!(b.get("k/x").is_none(), "B's watch is {lag:?} behind, so B has not taken in A's create yet");
    let t = Instant::now();
    b.sync(Range::Key("k/x")).await.unwrap();
    assert_eq!(b.get("k/x").map(|e| e.rev), Some(x.rev), "after sync, B reads A's create");
    eprintln!("sync of one key through a {lag:?} lag took {:?}", t.elapsed());

    let y = write(WriteOp::Create { key: "k/y".into(), value: obj("y", "1") }).await;
    let x2 = write(WriteOp::Update { key: "k/x".into(), value: obj("x", "2"), expected: x.rev }).await;
    assert_eq!(listed(&b), [("k/x".to_string(), x.rev)], "B lags");
    b.sync(Range::Prefix("k/")).await.unwrap();
    assert_eq!(listed(&b), [("k/x".to_string(), x2.rev), ("k/y".to_string(), y.rev)], "after sync, B lists both writes");

    // A deletion leaves no key behind for etcd to name: B waits until it has it too.
    write(WriteOp::Delete { key: "k/x".into(), expected: None }).await;
    assert!(b.get("k/x").is_some(), "B lags");
    b.sync(Range::Key("k/x")).await.unwrap();
    assert!(b.get("k/x").is_none(), "after sync, B no longer reads what A deleted");
    write(WriteOp::Delete { key: "k/y".into(), expected: None }).await;
    b.sync(Range::Prefix("k/")).await.unwrap();
    assert_eq!(listed(&b), [], "after sync, B lists nothing that A deleted");

    // With nothing on its way, sync costs one read of etcd, not a wait for the watch.
    let t = Instant::now();
    b.sync(Range::Prefix("k/")).await.unwrap();
    assert!(t.elapsed() < lag * 2 + Duration::from_millis(300), "a sync with nothing to wait for took {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_past_a_compaction_reads_everything_again_and_expires_its_watches() {
    let Some((_dir, cluster)) = etcd(1) else { return };
    let link = SlowLink::start(&cluster.endpoints()[0], Duration::ZERO).unwrap();
    let a = connect(config(&cluster, "/compacted")).await;
    let b = connect(EtcdConfig { endpoints: vec![link.url()], ..config(&cluster, "/compacted") }).await;
    let first = a.write(WriteOp::Create { key: "k/first".into(), value: obj("first", "1") }).await.unwrap();
    b.sync(Range::Key("k/first")).await.unwrap();
    let before = b.revision();
    let mut open = b.watch("k/", before).unwrap();

    // B is cut off from etcd while A writes and etcd compacts past B's revision.
    link.cut();
    let wait_unhealthy = Instant::now() + Duration::from_secs(20);
    while b.health().is_ok() {
        assert!(Instant::now() < wait_unhealthy, "B never noticed that its etcd connection was cut");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.write(WriteOp::Delete { key: "k/first".into(), expected: Some(first.rev) }).await.unwrap();
    let later = a.write(WriteOp::Create { key: "k/later".into(), value: obj("later", "1") }).await.unwrap();
    let mut etcd = etcd_client::Client::connect(cluster.endpoints(), None).await.unwrap();
    etcd.compact(later.rev as i64, None).await.unwrap();
    link.restore();

    // B's watch resumes from before the compaction: etcd refuses, B reads everything again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.health().is_err() || b.get("k/later").is_none() {
        assert!(Instant::now() < deadline, "B did not catch up after the link came back: {:?}", b.health());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(b.get("k/first").is_none(), "B dropped what was deleted while it was cut off");
    assert_eq!(b.get("k/later").map(|e| e.rev), Some(later.rev));
    // The watch open across the gap ends with Expired, so its client relists; so does
    // a new one from before the gap.
    let ended = tokio::time::timeout(Duration::from_secs(5), open.next()).await.expect("the open watch ends");
    assert!(matches!(ended, Some(Err(StoreError::Expired { .. })) | None), "the open watch ends expired: {ended:?}");
    assert!(matches!(b.watch("k/", before), Err(StoreError::Expired { .. })), "a watch from before the gap is expired");
    assert!(b.watch("k/", b.revision()).is_ok(), "a watch from B's new revision is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_writes_fail_fast_and_everything_recovers_when_it_returns() {
    let Some((_dir, mut cluster)) = etcd(3) else { return };
    let timeout = storage::DEFAULT_REQUEST_TIMEOUT;
    let store = connect(config(&cluster, "/quorum")).await;
    store.write(WriteOp::Create { key: "k/a".into(), value: obj("a", "1") }).await.unwrap();

    // One member of three down: writes go on.
    cluster.kill(2);
    // The store sends again, to a live member, what could not reach the dead one.
    // If the dead one led, a write may wait for the election and time out: a client
    // sees at most that one failed request, and its retry lands.
    let started = Instant::now();
    let b = match store.write(WriteOp::Create { key: "k/b".into(), value: obj("b", "1") }).await {
        Ok(b) => b,
        Err(e @ (StoreError::Unavailable(_) | StoreError::Timeout(_))) => {
            eprintln!("the first write after losing one member of three failed after {:?}: {e}", started.elapsed());
            match store.write(WriteOp::Create { key: "k/b".into(), value: obj("b", "1") }).await {
                Ok(b) => b,
                Err(StoreError::AlreadyExists(_)) => store.get("k/b").expect("the first try landed, and the mirror has it"),
                Err(e) => panic!("the retry of a write with two of three members failed too: {e}"),
            }
        }
        Err(e) => panic!("a write with two of three members: {e}"),
    };
    eprintln!("a write after losing one member of three landed after {:?}", started.elapsed());

    // Two down: no quorum. A write fails within the timeout, and says why.
    cluster.kill(1);
    let started = Instant::now();
    let refused = store.write(WriteOp::Create { key: "k/c".into(), value: obj("c", "1") }).await;
    let took = started.elapsed();
    assert!(matches!(refused, Err(StoreError::Unavailable(_) | StoreError::Timeout(_))), "{refused:?}");
    assert!(took <= timeout + Duration::from_millis(500), "the write failed after {took:?}");
    eprintln!("a write without quorum failed after {took:?}");
    assert!(refused.unwrap_err().to_string().contains("etcd"), "the error names etcd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.health().is_ok() {
        assert!(Instant::now() < deadline, "the store still reports itself healthy 20s after quorum was lost");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let why = store.health().unwrap_err();
    assert!(why.contains("serving the data as of revision"), "{why}");
    assert_eq!(store.get("k/b").map(|e| e.rev), Some(b.rev), "reads are served from the mirror meanwhile");

    // Quorum back: the same store writes again, and its watch resumes.
    cluster.restart(1).unwrap();
    cluster.restart(2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let c = loop {
        match store.write(WriteOp::Create { key: "k/c".into(), value: obj("c", "2") }).await {
            Ok(c) => break c,
            Err(StoreError::AlreadyExists(_)) => {
                break store.get("k/c").expect("a create refused as existing is in the mirror when it is answered")
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("while quorum returns: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("30s after quorum returned, writes still fail: {e}"),
        }
    };
    assert!(c.rev > b.rev);
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(why) = store.health() {
        assert!(Instant::now() < deadline, "10s after quorum returned the store still says: {why}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (keys, _) = store.list("k/", None, None);
    assert_eq!(keys.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["k/a", "k/b", "k/c"]);
}
