//! Push-mode syncers shared out among the replicas of a control plane on etcd.
//!
//! Each replica keeps a membership Lease, `flotilla-replica-<identity>`, in
//! `root`/`flotilla-system`, and counts as live while that Lease's record keeps changing,
//! timed on its own clock as leader election does. Each SyncTarget has a preferred
//! replica among the live ones ([`assign`]): rendezvous hashing of the pair (target,
//! replica) ranks the replicas for each target, and each target, in name order, goes
//! to the first in its ranking that has fewer than its share (the targets over the
//! replicas, rounded up). Every replica computes the same answer from the same sets,
//! the load is even, and a lost replica's targets spread over the rest while theirs
//! stay put. The preferred replica syncs a target while it holds the target's Lease,
//! `flotilla-syncer-<target>`; a replica that holds one but is no longer preferred
//! hands it over by giving the Lease up. The Lease, not the hashing, is what keeps two
//! replicas from syncing one cluster at once, so replicas that briefly disagree on who
//! is live are safe.
//!
//! The scheduler reads the same Leases: while a cluster's syncer Lease is not being
//! renewed, the silence of that cluster's heartbeat is the control plane's, not the
//! cluster's (scheduler/src/syncers.rs).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::Client;
use placement_api::SYSTEM_NAMESPACE;
use runtime::leader::{Elector, Timing};
use tokio::sync::watch;
use tokio::time::Instant;

use runtime::leader::{MEMBER_LEASE_PREFIX as MEMBER_PREFIX, SYNCER_LEASE_PREFIX as SYNCER_PREFIX};

/// Target name to the identity of the replica that should sync it.
pub type Assignment = BTreeMap<String, String>;

/// How this replica takes part.
#[derive(Debug, Clone)]
pub struct Shard {
    /// This replica's identity, as in its other Leases.
    pub identity: String,
    /// The Leases' timings.
    pub timing: Timing,
}

/// The replica that should sync each target, among the `live` ones (see the module's
/// doc): the same for every caller that has the same sets, whatever their order.
pub fn assign(targets: &[String], live: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if live.is_empty() {
        return out;
    }
    let mut targets: Vec<&String> = targets.iter().collect();
    targets.sort();
    targets.dedup();
    let share = targets.len().div_ceil(live.len());
    let mut load: HashMap<&str, usize> = HashMap::new();
    for target in targets {
        let mut ranked: Vec<&String> = live.iter().collect();
        ranked.sort_by_key(|id| std::cmp::Reverse((pair_hash(&[target.as_bytes(), b"\0", id.as_bytes()]), id.as_str())));
        if let Some(owner) = ranked.into_iter().find(|id| load.get(id.as_str()).copied().unwrap_or(0) < share) {
            *load.entry(owner.as_str()).or_default() += 1;
            out.insert(target.clone(), owner.clone());
        }
    }
    out
}

/// FNV-1a, 64 bits, then MurmurHash3's finalizer, so that names that differ only in
/// their last characters still spread over the whole range: the same in every process
/// and every build, unlike std's hasher.
fn pair_hash(parts: &[&[u8]]) -> u64 {
    let h = parts.iter().flat_map(|p| p.iter()).fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let h = (h ^ (h >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Keeps this replica's membership Lease and publishes the live replicas, this one
/// always among them, until dropped.
pub async fn members(root: Client, shard: Shard, live: watch::Sender<Vec<String>>) {
    let mut me = Elector::new(root.clone(), format!("{MEMBER_PREFIX}{}", shard.identity), shard.identity.clone(), shard.timing);
    let leases: Api<Lease> = Api::namespaced(root, SYSTEM_NAMESPACE);
    let mut seen: HashMap<String, (String, Option<String>, Instant)> = HashMap::new();
    loop {
        if let Err(e) = me.try_acquire_or_renew().await {
            tracing::warn!(error = %e, "could not renew this replica's membership Lease; retrying");
        }
        match leases.list(&ListParams::default()).await {
            Ok(list) => {
                let now = Instant::now();
                let mut ids = vec![shard.identity.clone()];
                for lease in list.items {
                    let Some(name) = lease.metadata.name.filter(|n| n.starts_with(MEMBER_PREFIX)) else { continue };
                    let spec = lease.spec.unwrap_or_default();
                    let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else { continue };
                    let renewed = spec.renew_time.map(|t| t.0.to_string());
                    let entry = seen.entry(name).or_insert_with(|| (holder.clone(), renewed.clone(), now));
                    if (entry.0.as_str(), &entry.1) != (holder.as_str(), &renewed) {
                        *entry = (holder.clone(), renewed, now);
                    }
                    if now.saturating_duration_since(entry.2) < shard.timing.lease && !ids.contains(&holder) {
                        ids.push(holder);
                    }
                }
                ids.sort();
                live.send_if_modified(|current| {
                    let changed = *current != ids;
                    if changed {
                        tracing::info!(replicas = %ids.join(","), "the live replicas changed");
                        *current = ids;
                    }
                    changed
                });
            }
            Err(e) => tracing::warn!(error = %e, "could not list the replicas' Leases; keeping the last list"),
        }
        // Twice per renewal, so that a lost replica is noticed soon after its Lease runs out.
        tokio::time::sleep(shard.timing.retry / 2).await;
    }
}

/// Runs `sync` (a fresh future each time this replica takes the target over) while this
/// replica is the target's preferred one in `assigned` and holds its Lease; never
/// returns.
pub async fn run_target<F, Fut>(root: Client, target: String, shard: Shard, mut assigned: watch::Receiver<Assignment>, sync: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut elector = Elector::new(root, format!("{SYNCER_PREFIX}{target}"), shard.identity.clone(), shard.timing);
    let mut running: Option<runtime::AbortOnDrop<()>> = None;
    let mut renewed = Instant::now();
    loop {
        let preferred = assigned.borrow().get(&target).cloned();
        if preferred.as_deref() == Some(shard.identity.as_str()) {
            match tokio::time::timeout(shard.timing.renew_deadline, elector.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    renewed = Instant::now();
                    if running.is_none() {
                        tracing::info!(sync_target = %target, "took over this cluster's syncer");
                        running = Some(runtime::AbortOnDrop(tokio::spawn(sync())));
                    }
                }
                Ok(Ok(false)) => {
                    if running.take().is_some() {
                        tracing::warn!(sync_target = %target, "another replica holds this cluster's syncer Lease; stopping its syncer here");
                    }
                }
                Ok(Err(_)) | Err(_) if running.is_some() && renewed.elapsed() >= shard.timing.renew_deadline => {
                    tracing::error!(sync_target = %target, "could not renew this cluster's syncer Lease in time; stopping its syncer here");
                    running = None;
                }
                Ok(Err(e)) => tracing::warn!(sync_target = %target, error = %e, "could not renew this cluster's syncer Lease; retrying"),
                Err(_) => tracing::warn!(sync_target = %target, "renewing this cluster's syncer Lease timed out; retrying"),
            }
        } else if running.take().is_some() {
            tracing::info!(sync_target = %target, to = preferred.as_deref().unwrap_or("nobody"), "handing this cluster's syncer over");
            elector.release().await;
        } else if let Err(e) = elector.observe().await {
            tracing::debug!(sync_target = %target, error = %e, "could not read this cluster's syncer Lease");
        }
        // A change of the assignment is acted on at once: a lost replica's targets are
        // taken as soon as their Leases allow.
        // A preferred replica that waits for the Lease tries again as soon as it expires.
        let waiting = running.is_none() && preferred.as_deref() == Some(shard.identity.as_str());
        let pause = if waiting { elector.until_next_try() } else { shard.timing.retry };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            changed = assigned.changed() => if changed.is_err() {
                tokio::time::sleep(shard.timing.retry).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_shared_evenly_and_a_lost_replica_moves_only_its_own() {
        let ids = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let targets: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();
        let three = assign(&targets, &ids(&["a", "b", "c"]));
        let mut shares: HashMap<&str, usize> = HashMap::new();
        for owner in three.values() {
            *shares.entry(owner.as_str()).or_default() += 1;
        }
        assert_eq!(shares.values().copied().collect::<std::collections::BTreeSet<_>>(), [100].into(), "300 over 3: {shares:?}");
        let two = assign(&targets, &ids(&["c", "a"]));
        for t in &targets {
            let (before, after) = (&three[t], &two[t]);
            assert!(before == "b" || before == after, "{t} moved from {before} to {after}, though {before} is still live");
        }
        assert_eq!(assign(&targets, &ids(&["c", "b", "a"])), three, "the order of the lists does not matter");
        // Three targets over three replicas: one each, whatever the names hash to.
        let demo = assign(&ids(&["east", "west", "eu"]), &ids(&["replica-0", "replica-1", "replica-2"]));
        assert_eq!(demo.values().collect::<std::collections::BTreeSet<_>>().len(), 3, "{demo:?}");
        assert!(assign(&targets, &[]).is_empty());
    }
}
