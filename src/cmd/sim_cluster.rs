//! `flotilla sim-cluster`: one simulated physical cluster as its own process, a real
//! Kubernetes API at `/` with simulated nodes, scheduling and kubelets behind it.

use std::path::Path;

use anyhow::Context;
use test_clusters::local::LocalCluster;

use crate::cli::SimClusterArgs;

/// Runs until Ctrl-C or SIGTERM. State lives in `<data-dir>/clusters/<name>/`, so a
/// restart on the same data dir is the same cluster, with its workloads.
pub async fn run(data_dir: &Path, args: SimClusterArgs) -> anyhow::Result<()> {
    let defs = test_clusters::config::load(&args.config)?;
    let def = match (&args.name, defs.len()) {
        (Some(name), _) => defs.iter().find(|d| &d.name == name).cloned().with_context(|| {
            let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
            format!("{} defines no cluster {name:?}; it defines: {}", args.config.display(), names.join(", "))
        })?,
        (None, 1) => defs[0].clone(),
        (None, _) => {
            let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
            anyhow::bail!("{} defines {} clusters ({}); choose one with --name", args.config.display(), defs.len(), names.join(", "))
        }
    };
    let name = def.name.clone();
    let state_dir = data_dir.join("clusters").join(&name);
    controlplane::fsutil::create_private_dir(&state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
    let kubeconfig = data_dir.join(format!("{name}.kubeconfig"));
    let nodes = def.node_count();
    let cluster = LocalCluster::start(def, &state_dir, kubeconfig, args.listen).await?;
    let srv = cluster.server();
    println!("simulated cluster {name} serving on {} ({nodes} nodes)", controlplane::kubeconfig::server_url(srv.addr));
    println!("kubeconfig: {}", srv.kubeconfig.display());
    println!("try: kubectl --kubeconfig {} get nodes", srv.kubeconfig.display());
    super::sims::write_pid(data_dir, &name)?;
    println!("ready");
    super::shutdown_signal().await;
    super::sims::remove_pid(data_dir, &name);
    tracing::info!(cluster = %name, "shutting down");
    cluster.shutdown().await?;
    Ok(())
}
