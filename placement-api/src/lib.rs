//! Flotilla's API types: the four custom resources (derived with kube-derive), the
//! label, annotation and finalizer keys that tie workloads to clusters, the CRDs
//! generated from the types, and what the types mean where more than one component
//! reads them: how the clusters' reports sum to a workload's status ([`status`]) and
//! which ConfigMaps and Secrets a pod template needs beside it ([`references`]). No
//! I/O: every other crate depends on this one.

#![warn(missing_docs)]
// kube-derive's repeated `printcolumn(...)` attributes trip this lint on every type.
#![allow(clippy::duplicated_attributes)]

mod crds;
pub mod keys;
mod placement;
pub mod quantity;
pub mod references;
pub mod status;
pub mod synced;
mod synctarget;
pub mod workload;
mod workloadplacement;
mod workspace;

pub use crds::{all_crds, crd_json, crds_yaml, installed_in_root, served_in_every_workspace};
pub use keys::*;
pub use placement::{
    ClusterToleration, ClusterWeight, FailoverSpec, Placement, PlacementSpec, PlacementStatus, Rebalance, ReplicaScheduling,
    SpreadConstraint, StatefulSetFailover, TolerationOperator,
};
pub use synctarget::{ClusterTaint, NodeHeadroom, SecretKeyRef, SyncMode, SyncTarget, SyncTargetSpec, SyncTargetStatus, TaintEffect};
pub use workloadplacement::{
    BatchReport, ClusterAssignment, ClusterSyncStatus, WorkloadPlacement, WorkloadPlacementSpec, WorkloadPlacementStatus, WorkloadRef,
};
pub use workspace::{Workspace, WorkspaceSpec, WorkspaceStatus};

/// The Workspace CRD as JSON, as the control plane installs it in `root`.
pub fn workspace_crd() -> serde_json::Value {
    crd_json::<Workspace>()
}
