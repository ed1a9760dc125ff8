//! The per-cluster syncer: pushes assigned workloads down to a physical cluster,
//! pulls their status back up, and reports the cluster's capacity.
//!
//! The decisions are pure functions, tested without a server:
//! - [`naming`]: where an upstream namespace lives downstream;
//! - [`transform`]: what a downstream copy looks like;
//! - [`status`] (placement-api's): what a cluster reports;
//! - [`capacity`]: what the heartbeat reports about free room.
//!
//! Around them, [`sync::Syncer`] watches and writes, [`heartbeat`] beats, and [`push`]
//! runs a syncer per registered cluster inside the control plane process. What the
//! syncers' reports sum to upstream is the workspace controllers' job.

#![warn(missing_docs)]

pub mod budget;
pub mod cache;
pub mod capacity;
pub mod error;
pub mod events;
pub mod heartbeat;
pub mod key;
pub mod metrics;
pub mod naming;
pub mod push;
pub mod shard;
pub mod sync;
pub mod transform;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
pub use placement_api::status;
pub use runtime::{clients, queue, AbortOnDrop};

/// Runs one cluster's syncer and its heartbeat until the task is dropped. `base` is a
/// client of the control plane with no workspace path; `root` one of its `root`
/// workspace, used only for heartbeats (in pull mode a connection pool of their own).
pub async fn run_with_heartbeat(settings: sync::Settings, heartbeat_interval: Duration, base: Client, root: Client, downstream: Client) {
    let syncer = Arc::new(tokio::sync::OnceCell::new());
    let name = settings.sync_target.clone();
    let counting = syncer.clone();
    let reach = heartbeat::Reachability::default();
    let beat = AbortOnDrop(tokio::spawn(heartbeat::run(name, heartbeat_interval, root, downstream.clone(), reach.clone(), move || {
        counting.get().map_or(0, |s: &Arc<sync::Syncer>| s.assigned())
    })));
    sync::Syncer::run(settings, base, downstream, reach, move |s| {
        let _ = syncer.set(s);
    })
    .await;
    drop(beat);
}
