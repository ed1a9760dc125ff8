//! The per-cluster syncer: pushes assigned workloads down to a physical cluster,
//! pulls their status back up, and reports the cluster's capacity.
//!
//! The decisions are pure functions, tested without a server:
//! - [`naming`]: where an upstream namespace lives downstream;
//! - [`capacity`]: what the heartbeat reports about free room.

#![warn(missing_docs)]

pub mod capacity;
pub mod naming;
