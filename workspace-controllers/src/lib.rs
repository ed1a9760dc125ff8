//! The controllers that keep objects in the workspaces right, from what users, the
//! scheduler and the syncers write: [`aggregate`] sums each workload's status from its
//! clusters' reports, [`references`] labels the ConfigMaps and Secrets that assigned pod
//! templates need, so that they follow their workloads to the same clusters, and
//! [`revisions`] keeps a Deployment's rollout history as ReplicaSets. One of each runs
//! in the control plane's process.

#![warn(missing_docs)]

pub mod aggregate;
pub mod references;
pub mod revisions;
