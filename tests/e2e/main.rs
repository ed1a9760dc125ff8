//! The end-to-end tests: each starts the real `flotilla` binary (control plane, simulated
//! clusters, syncers) on its own data dir and ephemeral ports, and drives it with the real
//! `kubectl`, third-party clients or a browser, as a user would.
//!
//! They are one test binary, so that the server, the scheduler, the syncer and the
//! simulated clusters are linked once, not once per file; cargo-nextest still runs every
//! test in a process of its own, in parallel. One module per area; what they share
//! (starting processes, waiting on a condition, fixtures) is in `common`.

mod common;

mod clients;
mod cluster_register;
mod companion_status;
mod companions_sync;
mod dashboard;
mod disruption_brake;
mod docs;
mod durability;
mod etcd_replicas;
mod explain;
mod hostile_connections;
mod image;
mod kubectl_companions;
mod kubectl_crds;
mod kubectl_errors;
mod kubectl_kinds;
mod kubectl_placement_api;
mod kubectl_resources;
mod kubectl_rollout;
mod kubectl_workspaces;
mod rebalance;
mod scheduler;
mod scheduler_drills;
mod scheduler_stall;
mod shaping;
mod sim_cluster;
mod sim_cluster_services;
mod status;
mod syncer_drift;
mod syncer_pull;
mod syncer_push;
mod up;
mod up_ha;
mod workload_kinds;
