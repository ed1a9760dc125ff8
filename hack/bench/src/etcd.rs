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

/// The document every writer writes, `n`th of writer `w`: a small ConfigMap, as the
/// SQLite floor writes.
pub fn doc(w: usize, n: u64) -> serde_json::Value {
    json!({"metadata": {"name": format!("{w}-{n}")}, "data": {"k": "v".repeat(64)}})
}

pub async fn rows(writers: usize, secs: f64, report: &mut Report) -> anyhow::Result<()> {
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
    let client = etcd_client::Client::connect(endpoints, None).await?;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let mut kv = client.kv_client();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    kv.put(format!("/floor/{w}-{n}"), serde_json::to_vec(&doc(w, n))?, None).await?;
                    n += 1;
                }
                anyhow::Ok(n)
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}
