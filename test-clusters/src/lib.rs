//! Simulated Kubernetes clusters for tests and `flotilla up`.
//!
//! - [`config`] reads cluster definition files (`test-clusters/*.yaml`).
//! - [`quantity`] parses and formats Kubernetes resource quantities.
//! - [`sim`] is the pure core of a simulated cluster: it does what the deployment and
//!   replicaset controllers, kube-scheduler and the kubelet would do, taking typed objects in
//!   and returning [`sim::Action`]s out. It performs no I/O; a driver applies the actions
//!   through a Kubernetes API.
//! - [`local`] serves one simulated cluster from this process: an API server with the
//!   [`driver`] applying the simulator's actions to it, and the [`load_balancer`]
//!   provider giving addresses to its LoadBalancer Services and Ingresses.
//! - [`fixtures`] builds the objects that tests and benchmarks apply, typed.
//! - `harness` (feature `harness`, for tests only) runs a control plane and simulated
//!   clusters in the test's process, for in-process tests of the controllers.
#![warn(missing_docs)]

pub mod config;
pub mod driver;
/// Go-style duration strings, as cluster definitions write them: the shared parser.
pub use apimachinery::duration;
pub mod fixtures;
#[cfg(feature = "harness")]
pub mod harness;
pub mod load_balancer;
pub mod local;
/// Resource quantities, shared with the scheduler and the syncer.
pub use placement_api::quantity;
pub mod sim;

pub use config::{AddressPool, ClusterDef, ConfigError, NodeGroup};
pub use quantity::{QuantityError, Resources};
