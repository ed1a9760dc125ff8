//! One simulated cluster served by this process: the control plane's server as a single
//! logical cluster, with the [`Simulator`] driving its nodes, pods and Deployment status
//! through that server's admission path ([`driver`]).
//!
//! `flotilla sim-cluster` runs one as its own process; the in-process tests
//! ([`crate::harness`], feature `harness`) run several beside a control plane.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use controlplane::error::ApiError;
use controlplane::pod_logs::{LogLines, LogQuery, PodLogs};
use controlplane::server::{self, Server, ServerConfig};
use tokio::sync::watch;

use crate::driver;
use crate::sim::{logs, Simulator};
use crate::ClusterDef;

/// A running simulated cluster.
pub struct LocalCluster {
    server: Server,
    stop: watch::Sender<bool>,
    simulation: tokio::task::JoinHandle<()>,
}

impl LocalCluster {
    /// Starts the cluster `def` on `listen`, with its state in `state_dir` and its
    /// kind-shaped kubeconfig written to `kubeconfig`. A restart on the same state dir
    /// is the same cluster, with its workloads. The nodes of the definition are
    /// registered before it returns, so a cluster announced as ready has them.
    pub async fn start(def: ClusterDef, state_dir: &Path, kubeconfig: PathBuf, listen: SocketAddr) -> anyhow::Result<Self> {
        let mut config = ServerConfig::physical_cluster(&def.name, state_dir, kubeconfig, listen);
        config.service_cidr = def.service_cidr;
        let server = server::start(config, prometheus::Registry::new()).await?;
        server.serve_pod_logs(std::sync::Arc::new(SimulatedLogs));
        let simulator = Simulator::new(def);
        driver::register_nodes(&server.api, &simulator).await?;
        let (stop, stopped) = watch::channel(false);
        let simulation = tokio::spawn(driver::run(server.api.clone(), simulator, stopped));
        Ok(LocalCluster { server, stop, simulation })
    }

    /// The cluster's API server: its address and its admin kubeconfig.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Stops the simulation, then the server, so that nothing writes to the store after
    /// it has closed.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        let _ = self.simulation.await;
        self.server.shutdown().await
    }
}

/// The simulated containers' logs ([`crate::sim::logs`]), for `kubectl logs`.
struct SimulatedLogs;

impl PodLogs for SimulatedLogs {
    fn read(&self, pod: &serde_json::Value, query: &LogQuery, now: jiff::Timestamp) -> Result<LogLines, ApiError> {
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(pod.clone()).map_err(|e| ApiError::bad_request(format!("reading the pod: {e}")))?;
        let asked = logs::Query { container: query.container.as_deref(), previous: query.previous, since: query.since, tail: query.tail };
        let log = logs::read(&pod, &asked, now).map_err(|logs::Refused(why)| ApiError::bad_request(why))?;
        Ok(LogLines { lines: log.lines, running: log.running })
    }
}
