//! The drills of `flotilla up --ha` (src/cmd/ha.rs):
//! - `kill-replica N`: SIGKILL of replica N. The timeline shows each Lease it held as
//!   another replica takes it over, any cluster whose readiness changes meanwhile (none
//!   should), and when all its work has moved.
//! - `kill-etcd N`: SIGKILL of etcd member N. The timeline shows a write every 200 ms
//!   for 10 s through the load balancer, with each failure and how long writes took.
//! - `restore-replica N`, `restore-etcd N`: start it again on its data; a replica
//!   rejoins the control plane.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use nix::sys::signal::{kill, Signal};
use placement_api::{SyncTarget, CONDITION_READY, SYSTEM_NAMESPACE};

use super::ha::{self, REPLICAS};
use crate::cli::{DrillArgs, Fault};

/// How often the timeline looks.
const POLL: Duration = Duration::from_millis(200);
/// How long `kill-etcd` keeps writing.
const PROBE_FOR: Duration = Duration::from_secs(10);

fn say(start: Instant, what: impl AsRef<str>) {
    println!("{:>8}  {}", format!("+{:.1}s", start.elapsed().as_secs_f64()), what.as_ref());
}

fn number(args: &DrillArgs, what: &str, count: usize) -> anyhow::Result<usize> {
    match args.cluster.parse::<usize>() {
        Ok(n) if n < count => Ok(n),
        _ => anyhow::bail!("{} takes the number of a {what}, 0 to {}; got {:?}", args.fault, count - 1, args.cluster),
    }
}

/// Runs one of the drills above.
pub async fn run(data_dir: &Path, kubeconfig: &Path, args: &DrillArgs) -> anyhow::Result<()> {
    match args.fault {
        Fault::KillReplica => kill_replica(data_dir, kubeconfig, number(args, "replica", REPLICAS)?, args.timeout).await,
        Fault::RestoreReplica => restore_replica(data_dir, number(args, "replica", REPLICAS)?, args.timeout).await,
        Fault::KillEtcd => kill_etcd(data_dir, kubeconfig, number(args, "etcd member", ha::etcd_ports(data_dir)?.len())?).await,
        Fault::RestoreEtcd => restore_etcd(data_dir, number(args, "etcd member", ha::etcd_ports(data_dir)?.len())?).await,
        _ => unreachable!("cluster drills are run by drill::run"),
    }
}

fn identity(data_dir: &Path, n: usize) -> anyhow::Result<String> {
    let path = ha::replica_dir(data_dir, n).join("scheduler-identity");
    Ok(std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?.trim().to_string())
}

/// Who holds each Lease but the replicas' own, and which clusters are Ready.
async fn look(root: &kube::Client) -> anyhow::Result<(BTreeMap<String, String>, BTreeMap<String, bool>)> {
    let leases = Api::<Lease>::namespaced(root.clone(), SYSTEM_NAMESPACE).list(&Default::default()).await?;
    let holders = leases
        .items
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.name?;
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            (!name.starts_with(runtime::leader::MEMBER_LEASE_PREFIX)).then_some((name, holder))
        })
        .collect();
    let targets = Api::<SyncTarget>::all(root.clone()).list(&Default::default()).await?;
    let ready = targets
        .items
        .into_iter()
        .filter_map(|t| {
            let ready = t.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == CONDITION_READY && c.status == "True"));
            Some((t.metadata.name?, ready))
        })
        .collect();
    Ok((holders, ready))
}

async fn kill_replica(data_dir: &Path, kubeconfig: &Path, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let pid = ha::replica_pid(data_dir, n).with_context(|| {
        format!("replica {n} does not run under {}; `flotilla drill restore-replica {n}` starts it", data_dir.display())
    })?;
    let me = identity(data_dir, n)?;
    // Read through another live replica directly, as a client connected there does:
    // through the load balancer, the connection this command holds to replica n would
    // break with it, and the first read after the kill fail.
    let other = (1..REPLICAS).map(|i| (n + i) % REPLICAS).find(|m| ha::replica_pid(data_dir, *m).is_some());
    let root = match other {
        Some(m) => super::root_client(&ha::replica_dir(data_dir, m).join("admin.kubeconfig")).await?,
        None => super::root_client(kubeconfig).await?,
    };
    let (mut holders, mut ready) = look(&root).await?;
    let held: Vec<&String> = holders.iter().filter(|(_, h)| **h == me).map(|(l, _)| l).collect();
    kill(pid, Signal::SIGKILL).with_context(|| format!("killing replica {n} (pid {pid})"))?;
    let start = Instant::now();
    println!("drill: kill-replica {n} (pid {pid}, {me}) at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
    say(
        start,
        match held.len() {
            0 => format!("replica {n} held no Lease: it only served requests"),
            _ => format!("replica {n} held {}", held.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
        },
    );
    loop {
        match look(&root).await {
            Ok((now_holders, now_ready)) => {
                for (lease, holder) in &now_holders {
                    if holders.get(lease) != Some(holder) {
                        let before = holders.get(lease).map(String::as_str).unwrap_or("nobody");
                        say(start, format!("{lease}: {before} -> {}", if holder.is_empty() { "nobody" } else { holder }));
                    }
                }
                for (cluster, r) in &now_ready {
                    if ready.get(cluster) != Some(r) {
                        say(start, format!("cluster {cluster} {}", if *r { "Ready" } else { "NotReady" }));
                    }
                }
                (holders, ready) = (now_holders, now_ready);
                if !holders.values().any(|h| *h == me) {
                    println!(
                        "replica {n}'s work was taken over in {:.1}s; clients went on through the other replicas. \
                         next: `flotilla drill restore-replica {n}`",
                        start.elapsed().as_secs_f64()
                    );
                    return Ok(());
                }
            }
            Err(e) => say(start, format!("cannot read the control plane: {e}; still trying")),
        }
        if start.elapsed() > timeout {
            anyhow::bail!(
                "replica {n}'s Leases were not taken over within {timeout:?}; see the other replicas' logs in {}",
                data_dir.join("logs").display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn restore_replica(data_dir: &Path, n: usize, timeout: Duration) -> anyhow::Result<()> {
    if let Some(pid) = ha::replica_pid(data_dir, n) {
        anyhow::bail!("replica {n} runs already (pid {pid})");
    }
    let start = Instant::now();
    println!("drill: restore-replica {n} at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
    let log = data_dir.join("logs").join(format!("replica-{n}.log"));
    let from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut child = ha::spawn_replica(data_dir, n, true)?;
    say(start, format!("replica {n} started again (pid {})", child.id().unwrap_or(0)));
    tokio::time::timeout(timeout, ha::wait_ready_in_log(n, &mut child, data_dir, from)).await.context("waiting for the replica")??;
    say(start, format!("replica {n} serves again: it rejoined the control plane and takes its share of the clusters' syncers"));
    // Dropping the handle leaves the process running (tokio kills on drop only when asked).
    drop(child);
    Ok(())
}

async fn kill_etcd(data_dir: &Path, kubeconfig: &Path, n: usize) -> anyhow::Result<()> {
    let pid = ha::etcd_pid(data_dir, n).with_context(|| {
        format!("etcd member {n} does not run under {}; `flotilla drill restore-etcd {n}` starts it", data_dir.display())
    })?;
    let root = super::root_client(kubeconfig).await?;
    let probes: Api<ConfigMap> = Api::namespaced(root, SYSTEM_NAMESPACE);
    kill(pid, Signal::SIGKILL).with_context(|| format!("killing etcd member {n} (pid {pid})"))?;
    let start = Instant::now();
    println!("drill: kill-etcd {n} (pid {pid}) at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
    say(start, format!("etcd member {n} killed; writing every {}ms for {}s", POLL.as_millis(), PROBE_FOR.as_secs()));
    let (mut ok, mut failed, mut slowest) = (0u32, 0u32, Duration::ZERO);
    let mut failing = false;
    let mut i = 0u64;
    while start.elapsed() < PROBE_FOR {
        i += 1;
        let patch = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flotilla-drill-probe"}, "data": {"write": i.to_string()}});
        let sent = Instant::now();
        match probes.patch("flotilla-drill-probe", &PatchParams::apply("flotilla-drill").force(), &Patch::Apply(&patch)).await {
            Ok(_) => {
                ok += 1;
                slowest = slowest.max(sent.elapsed());
                if failing {
                    say(start, format!("writes go through again ({:.0} ms)", sent.elapsed().as_secs_f64() * 1e3));
                    failing = false;
                }
            }
            Err(e) => {
                failed += 1;
                if !failing {
                    say(start, format!("a write failed after {:.0} ms: {e}", sent.elapsed().as_secs_f64() * 1e3));
                    failing = true;
                }
            }
        }
        tokio::time::sleep(POLL.saturating_sub(sent.elapsed())).await;
    }
    println!(
        "with etcd member {n} gone: {ok} writes went through (the slowest took {:.0} ms), {failed} failed. next: `flotilla drill restore-etcd {n}`",
        slowest.as_secs_f64() * 1e3
    );
    Ok(())
}

async fn restore_etcd(data_dir: &Path, n: usize) -> anyhow::Result<()> {
    if let Some(pid) = ha::etcd_pid(data_dir, n) {
        anyhow::bail!("etcd member {n} runs already (pid {pid})");
    }
    let start = Instant::now();
    println!("drill: restore-etcd {n} at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
    let dir = ha::etcd_dir(data_dir);
    let ports = ha::etcd_ports(data_dir)?;
    tokio::task::spawn_blocking(move || {
        let mut cluster = controlplane::store::local_etcd::LocalEtcd::attach(&dir, &ports)?;
        cluster.start_member(n)?;
        cluster.detach();
        Ok::<_, String>(())
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    say(start, format!("etcd member {n} serves again, on its data; it catches up with the others"));
    Ok(())
}
