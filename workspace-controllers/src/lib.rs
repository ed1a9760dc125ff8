//! The controllers that keep objects in the workspaces right, from what the scheduler
//! and the syncers write: [`aggregate`] sums each workload's status from its clusters'
//! reports, and [`references`] labels the ConfigMaps and Secrets that assigned pod
//! templates need, so that they follow their workloads to the same clusters. One of
//! each runs in the control plane's process.

#![warn(missing_docs)]

pub mod aggregate;
pub mod references;
