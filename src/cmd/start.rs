//! `flotilla start`: the control plane in one process.

use std::path::Path;

use controlplane::server::{self, ServerConfig};

use crate::cli::StartArgs;

/// Runs until Ctrl-C or SIGTERM, then shuts down gracefully.
pub async fn run(data_dir: &Path, args: StartArgs) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    let srv = server::start(ServerConfig::control_plane(data_dir, args.listen), registry).await?;
    println!("flotilla control plane serving on {}", controlplane::kubeconfig::server_url(srv.addr));
    println!("kubeconfig: {}", srv.kubeconfig.display());
    println!("try: kubectl --kubeconfig {} get namespaces", srv.kubeconfig.display());
    println!("ready");
    super::shutdown_signal().await;
    tracing::info!("shutting down");
    srv.shutdown().await?;
    Ok(())
}
