//! The scheduler: decides which clusters each workload runs on, and keeps clusters'
//! health from their heartbeats.
//!
//! The decisions are pure functions, tested without a server:
//! - [`core`]: where one workload runs, or why nothing fits;
//! - [`resolve`]: which Placement governs a workload;
//! - [`selector`]: label selectors over cluster labels;
//! - [`health`]: when a cluster is Ready, from its heartbeats, and the disruption brake;
//! - [`inputs`]: what a decision about one workload is made from, out of its objects;
//! - [`assumed`]: room handed out that heartbeats do not show yet.
//!
//! Around them, [`controller`] watches and writes, [`events`] records Events on the
//! workloads, [`leader`] (the runtime's) makes sure only one scheduler process acts
//! at a time, and
//! [`metrics`] counts decisions, failures, failovers and cluster health.

#![warn(missing_docs)]

pub mod assumed;
pub mod controller;
pub mod core;
pub mod events;
pub mod health;
pub mod inputs;
pub mod metrics;
pub mod resolve;
pub mod selector;
pub mod syncers;
mod workloads;

pub use controller::{run, Options};
/// Leader election, the runtime's ([`runtime::leader`]).
pub use runtime::leader;

/// The Lease the schedulers contend for, in `root`/`flotilla-system`.
pub const LEASE_NAME: &str = "flotilla-scheduler";

use std::future::Future;

use kube::Client;

/// Runs the scheduler until `shutdown` completes. With `election`, it first wins the
/// scheduler Lease in `root` and acts only while it holds it; on shutdown it gives
/// the Lease up so that a standby takes over at once.
pub async fn run_until(base: Client, options: Options, election: Option<leader::Timing>, shutdown: impl Future<Output = ()>) {
    match election {
        None => {
            tokio::select! {
                _ = run(base, options) => {}
                _ = shutdown => {}
            }
        }
        Some(timing) => {
            let root = runtime::clients::workspace(&base, placement_api::ROOT_WORKSPACE);
            let mut elector = leader::Elector::new(root, LEASE_NAME, options.instance.clone(), timing);
            tokio::select! {
                _ = elector.run(|| run(base.clone(), options.clone())) => {}
                _ = shutdown => {}
            }
            elector.release().await;
        }
    }
}
