//! `flotilla syncer`: one cluster's syncer as its own process (pull mode).
//!
//! The same code as the push-mode syncers that `flotilla start` runs, with the
//! SyncTarget's scoped token upstream: the control plane refuses it anything but this
//! cluster's assignments, its own SyncTarget's status and its own WorkloadPlacement
//! entries.

use std::path::Path;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::SyncerArgs;

/// Runs until Ctrl-C or SIGTERM.
pub async fn run(args: SyncerArgs) -> anyhow::Result<()> {
    let name = args.sync_target.clone();
    let upstream = load(&args.upstream_kubeconfig, "upstream").await?;
    let downstream = match &args.downstream_kubeconfig {
        Some(path) => load(path, "downstream").await?,
        None => kube::Config::incluster().context("--downstream-in-cluster: not running in a pod with a service account")?,
    };
    let base_config = runtime::clients::base_config(upstream)?;
    let base = kube::Client::try_from(base_config.clone())?;
    // Heartbeats get a connection pool of their own.
    let root = runtime::clients::workspace(&kube::Client::try_from(base_config)?, placement_api::ROOT_WORKSPACE);
    let downstream = runtime::clients::downstream(downstream)?;
    // Fail fast, with the cause, on credentials that cannot work at all.
    let targets: kube::Api<placement_api::SyncTarget> = kube::Api::all(root.clone());
    targets.get(&name).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 401 => anyhow::anyhow!(
            "the control plane refused the syncer's token (401): SyncTarget {name} was deregistered or registered again; mint a new one with `flotilla cluster register {name} --pull`"
        ),
        kube::Error::Api(s) if s.code == 403 => {
            anyhow::anyhow!("the control plane refused the syncer's token (403): {}; is it the token of SyncTarget {name}?", s.message)
        }
        kube::Error::Api(s) if s.code == 404 => {
            anyhow::anyhow!("SyncTarget {name} is not registered; register it with `flotilla cluster register {name} --pull`")
        }
        other => anyhow::Error::from(other).context(format!("reading SyncTarget {name} from the control plane")),
    })?;
    let settings = syncer::sync::Settings { sync_target: name.clone(), resync: args.resync, followers: None };
    println!("syncer for {name} running (heartbeat every {:?}, resync every {:?})", args.heartbeat_interval, args.resync);
    println!("ready");
    let task = runtime::AbortOnDrop(tokio::spawn(syncer::run_with_heartbeat(settings, args.heartbeat_interval, base, root, downstream)));
    tokio::select! {
        r = task => r.context("the syncer stopped")?,
        _ = super::shutdown_signal() => tracing::info!("shutting down"),
    }
    Ok(())
}

/// The client configuration of a kubeconfig file's current context.
async fn load(path: &Path, which: &str) -> anyhow::Result<kube::Config> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading the {which} kubeconfig {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("the {which} kubeconfig {} has no usable current context", path.display()))
}
