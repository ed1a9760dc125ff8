//! The etcd store: durable creates through `EtcdStore` from the same writers as the
//! SQLite store's figure, on one and on three local etcd members, each beside etcd's
//! own floor in the same run: raw puts of the same documents, from the same number of
//! concurrent writers over one client, as the store uses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use storage::local_etcd::{free_ports, LocalEtcd};
use storage::{EtcdConfig, EtcdStore};

use crate::report::{Better, Report, Row};
use crate::ServerProc;

/// The document every writer writes, `n`th of writer `w`: a small ConfigMap, as the
/// SQLite floor writes.
pub fn doc(w: usize, n: u64) -> serde_json::Value {
    json!({"metadata": {"name": format!("{w}-{n}")}, "data": {"k": "v".repeat(64)}})
}

/// Durable creates through the etcd store on one member and on three, against raw
/// puts from as many writers, and the SQLite store's, in the same run.
pub async fn stores(s: &crate::Sizes, report: &mut Report) -> anyhow::Result<()> {
    let (writers, secs) = (s.write_clients, s.write_secs);
    let sqlite = crate::store_floor(writers, secs).await?;
    for members in [1, 3] {
        let dir = tempfile::tempdir()?;
        let cluster = LocalEtcd::start(dir.path(), &free_ports(members)?).map_err(anyhow::Error::msg)?;
        let store = connect(&cluster).await?;
        let floor = raw_puts(&cluster.endpoints(), writers, secs).await?;
        let creates = crate::store_creates(store.clone(), writers, secs).await?;
        report.add(
            Row::new(
                format!("etcd_store_creates/{members}"),
                format!("etcd store: durable creates, {writers} writers, {members} etcd member(s)"),
                creates,
                "/s",
                Better::Higher,
            )
            .floor("etcd raw puts", floor)
            .detail(format!("the SQLite store in the same run: {sqlite:.0}/s")),
            json!({"scenario": "etcd_store_creates", "members": members, "writers": writers, "per_sec": creates,
                   "etcd_put_floor_per_sec": floor, "sqlite_per_sec": sqlite}),
        );
    }
    Ok(())
}

/// Reads and watches across two replicas, then the loss of one.
pub async fn replicas(bin: &std::path::Path, s: &crate::Sizes, report: &mut Report) -> anyhow::Result<()> {
    across_replicas(bin, s, report).await?;
    replica_loss(bin, report).await
}

/// The failover of the scheduler scenario, at the default heartbeat (2 s / 8 s), with
/// the control plane on a local etcd of one member.
pub async fn failover(bin: &std::path::Path, s: &crate::Sizes, report: &mut Report) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster = LocalEtcd::start(dir.path(), &free_ports(1)?).map_err(anyhow::Error::msg)?;
    let servers = cluster.endpoints().join(",");
    let (interval, grace) = (Duration::from_secs(crate::DEFAULT_HEARTBEAT.0), Duration::from_secs(crate::DEFAULT_HEARTBEAT.1));
    let f = crate::scheduler::failover(bin, s.failover_deployments, interval, grace, false, Some(&servers)).await?;
    let g = grace.as_secs_f64();
    let mut row = Row::new(
        "etcd_failover",
        format!("etcd: failover, kill to all {} Available elsewhere, beat 2 s / grace 8 s", f.deployments),
        f.all_available_s,
        "s",
        Better::Lower,
    )
    .detail(format!("detected {:.1}, moved {:.1}-{:.1} s", f.detected_s, f.first_moved_s, f.all_moved_s))
    .floor("grace", g);
    if f.deployments >= 1_000 {
        row = row.target(g + 5.0, "≤ grace + 5 s = 13 s");
    }
    report.add(
        row,
        json!({"scenario": "etcd_failover", "deployments": f.deployments, "all_available_s": f.all_available_s,
               "detected_s": f.detected_s, "all_moved_s": f.all_moved_s}),
    );
    Ok(())
}

/// Two replicas on one etcd: GETs and LISTs through B of objects written through A,
/// and watchers on B of creates through A. A GET or a LIST without a resourceVersion
/// confirms with etcd that B has every earlier write (one linearizable read of the
/// keys); its floor is the same request with `resourceVersion=0`, served from B's copy
/// as it is. The fan-out's floor is A's create round trip. All in the same run.
async fn across_replicas(bin: &std::path::Path, s: &crate::Sizes, report: &mut Report) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, GetParams, ListParams, PostParams};

    let dir = tempfile::tempdir()?;
    let cluster = LocalEtcd::start(dir.path(), &free_ports(1)?).map_err(anyhow::Error::msg)?;
    let servers = cluster.endpoints().join(",");
    let a = ServerProc::replica(bin, "replica-a", &servers)?;
    let b = ServerProc::replica(bin, "replica-b", &servers)?;
    let on_a: Api<ConfigMap> = Api::namespaced(a.client("root", None).await?, "default");
    let b_client = b.client("root", None).await?;
    let on_b: Api<ConfigMap> = Api::namespaced(b_client.clone(), "default");
    for i in 0..50 {
        on_a.create(&PostParams::default(), &crate::cm(&format!("g{i}"))).await?;
    }
    // A LIST of the latest state first: after it, B's copy has all 50, which the reads
    // with resourceVersion=0 (B's copy as it is) rely on.
    let listed = on_b.list(&ListParams::default()).await?.items.len();
    anyhow::ensure!(listed >= 50, "B listed {listed} of the 50 ConfigMaps just created through A");
    let (mut gets, mut cached) = (Vec::new(), Vec::new());
    for i in 0..s.gets {
        let name = format!("g{}", i % 50);
        let t = Instant::now();
        on_b.get_with(&name, &GetParams::any()).await?;
        cached.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        on_b.get(&name).await?;
        gets.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (mut lists, mut cached_lists) = (Vec::new(), Vec::new());
    for _ in 0..(s.gets / 20).max(50) {
        let t = Instant::now();
        on_b.list(&ListParams::default().match_any()).await?;
        cached_lists.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        on_b.list(&ListParams::default()).await?;
        lists.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (f50, f99, _) = crate::summarize(cached);
    let (g50, g99, _) = crate::summarize(gets);
    report.add(
        Row::new("etcd_get", "etcd, two replicas: GET p99 on B of objects written on A", g99, "ms", Better::Lower)
            .floor("GET ?resourceVersion=0 p99", f99)
            .detail(format!("p50 {g50:.2} ms, ?resourceVersion=0 p50 {f50:.2} ms"))
            .target(5.0, "≤ 5 ms"),
        json!({"scenario": "etcd_get", "p50_ms": g50, "p99_ms": g99, "floor_p50_ms": f50, "floor_p99_ms": f99, "n": s.gets}),
    );
    let (n, (f50, f99, _), (l50, l99, _)) = (lists.len(), crate::summarize(cached_lists), crate::summarize(lists));
    report.add(
        Row::new("etcd_list", "etcd, two replicas: LIST of 50 p99 on B", l99, "ms", Better::Lower)
            .floor("LIST ?resourceVersion=0 p99", f99)
            .detail(format!("p50 {l50:.2} ms, ?resourceVersion=0 p50 {f50:.2} ms")),
        json!({"scenario": "etcd_list", "items": 50, "p50_ms": l50, "p99_ms": l99, "floor_p50_ms": f50, "floor_p99_ms": f99, "n": n}),
    );
    let f = crate::watch_fanout(&a, &b, s.watchers, s.watch_writes).await?;
    report.add(
        Row::new(
            "etcd_watch_fanout",
            format!("etcd, two replicas: create on A to each of {} watchers on B, p99", s.watchers),
            f.from_send.1,
            "ms",
            Better::Lower,
        )
        .floor("A's create round trip p99", f.create_rtt.1)
        .detail(format!("after A's ack: p50 {:.1}, p99 {:.1} ms", f.after_ack.0, f.after_ack.1)),
        json!({"scenario": "etcd_watch_fanout", "watchers": s.watchers, "writes": s.watch_writes, "from_send_p50_ms": f.from_send.0,
               "after_ack_p50_ms": f.after_ack.0, "after_ack_p99_ms": f.after_ack.1,
               "from_send_p99_ms": f.from_send.1, "create_rtt_p99_ms": f.create_rtt.1, "samples": f.samples}),
    );
    Ok(())
}

/// Clusters in the replica-loss scenario.
const LOSS_CLUSTERS: usize = 4;

/// Two replicas on one etcd and four simulated clusters; kill -9 of the replica that
/// holds the scheduler's Lease (and, by the shares, half the clusters' syncers). From
/// the kill, measured on this process's clock by polling the surviving replica every
/// 100 ms: until a Deployment created right after the kill is assigned (scheduling
/// resumed), and until every cluster that the killed replica synced shows a heartbeat
/// written after the kill (its syncer resumed elsewhere). The floor is the Lease's
/// duration: no replica may take a Lease sooner. Target: the duration + 2 s.
async fn replica_loss(bin: &std::path::Path, report: &mut Report) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, PostParams};
    use placement_api::SyncTarget;

    let dir = tempfile::tempdir()?;
    let cluster = LocalEtcd::start(dir.path(), &free_ports(1)?).map_err(anyhow::Error::msg)?;
    let servers = cluster.endpoints().join(",");
    let mut a = ServerProc::replica(bin, "replica-a", &servers)?;
    let names: Vec<String> = (0..LOSS_CLUSTERS).map(|i| format!("c{i}")).collect();
    let mut sims = Vec::new();
    for name in &names {
        sims.push(crate::registered_sim(bin, a.data_dir(), name)?);
    }
    crate::flotilla_cli(bin, a.data_dir(), &["workspace", "create", "demo"])?;
    let b = ServerProc::replica(bin, "replica-b", &servers)?;
    let root = b.client("root", None).await?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(root.clone(), placement_api::SYSTEM_NAMESPACE);
    let holder =
        |l: &k8s_openapi::api::coordination::v1::Lease| l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    // Settled: every cluster's syncer holds its Lease, in the shares the assignment gives.
    let want = syncer::shard::assign(&names, &["replica-a".into(), "replica-b".into()]);
    let settled = Instant::now() + Duration::from_secs(60);
    loop {
        let list = leases.list(&Default::default()).await?;
        let held = |name: &str| list.items.iter().find(|l| l.metadata.name.as_deref() == Some(name)).map(holder).unwrap_or_default();
        if held("flotilla-scheduler") == "replica-a" && want.iter().all(|(c, r)| held(&format!("flotilla-syncer-{c}")) == *r) {
            break;
        }
        anyhow::ensure!(Instant::now() < settled, "the replicas did not settle within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lost: Vec<&String> = want.iter().filter(|(_, r)| *r == "replica-a").map(|(c, _)| c).collect();
    let deployments: Api<Deployment> = Api::namespaced(b.client("demo", None).await?, "default");
    let placements = crate::placements_api(b.client("demo", None).await?);
    let targets: Api<SyncTarget> = Api::all(root);

    a.child.kill()?;
    let killed = Instant::now();
    let killed_at = jiff::Timestamp::now();
    deployments.create(&PostParams::default(), &crate::bench_deployment("after-the-kill", 1)?).await?;
    let (mut scheduled, mut beating) = (None, None);
    while scheduled.is_none() || beating.is_none() {
        anyhow::ensure!(killed.elapsed() < Duration::from_secs(60), "60 s after the kill: scheduled {scheduled:?}, heartbeats {beating:?}");
        if scheduled.is_none() {
            let wp = placements.get_opt("after-the-kill").await?;
            if wp.is_some_and(|w| w.data.pointer("/spec/clusters/0/replicas").is_some()) {
                scheduled = Some(killed.elapsed().as_secs_f64());
            }
        }
        if beating.is_none() {
            let fresh = targets.list(&Default::default()).await?.items.into_iter().filter(|t| {
                let beat = t.status.as_ref().and_then(|s| s.last_syncer_heartbeat_time.as_ref()).map(|t| t.0);
                lost.iter().any(|c| t.metadata.name.as_deref() == Some(c.as_str())) && beat.is_some_and(|b| b > killed_at)
            });
            if fresh.count() == lost.len() {
                beating = Some(killed.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lease = runtime::leader::Timing::default().lease.as_secs_f64();
    let (scheduled, beating) = (scheduled.unwrap_or_default(), beating.unwrap_or_default());
    report.add(
        Row::new("replica_loss/scheduling", "replica loss (kill -9): until scheduling resumes", scheduled, "s", Better::Lower)
            .floor("lease duration", lease)
            .target(lease + 2.0, "≤ lease + 2 s = 17 s"),
        json!({"scenario": "replica_loss", "what": "scheduling", "seconds": scheduled, "lease_s": lease}),
    );
    report.add(
        Row::new(
            "replica_loss/heartbeats",
            format!("replica loss (kill -9): until its {} clusters' heartbeats resume", lost.len()),
            beating,
            "s",
            Better::Lower,
        )
        .floor("lease duration", lease)
        .target(lease + 2.0, "≤ lease + 2 s = 17 s"),
        json!({"scenario": "replica_loss", "what": "heartbeats", "seconds": beating, "lease_s": lease, "clusters": lost.len()}),
    );
    drop(sims);
    Ok(())
}

/// The store on a cluster that has just started, once it has a leader.
async fn connect(cluster: &LocalEtcd) -> anyhow::Result<Arc<EtcdStore>> {
    let config = EtcdConfig { prefix: "/bench".into(), compaction_interval: None, ..EtcdConfig::new(cluster.endpoints()) };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match EtcdStore::connect(config.clone()).await {
            Ok(s) => return Ok(s),
            // A new cluster answers once it has elected its leader.
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => anyhow::bail!("etcd did not take a connection within 30 s: {e}"),
        }
    }
}

/// Puts of the same documents straight to etcd, `writers` at a time on one client.
async fn raw_puts(endpoints: &[String], writers: usize, secs: f64) -> anyhow::Result<f64> {
    let kv = etcd_client::Client::connect(endpoints, None).await?.kv_client();
    crate::per_second(writers, secs, move |w, n| {
        let mut kv = kv.clone();
        async move {
            kv.put(format!("/floor/{w}-{n}"), serde_json::to_vec(&doc(w, n))?, None).await?;
            Ok(())
        }
    })
    .await
}
