//! `flotilla scheduler`: the scheduler as its own process, against any control plane
//! that serves the Flotilla APIs (DESIGN: it uses only the Kubernetes API).

use std::path::Path;

use crate::cli::SchedulerArgs;

/// Runs until Ctrl-C or SIGTERM, then gives up the Lease.
pub async fn run(kubeconfig: &Path, args: SchedulerArgs) -> anyhow::Result<()> {
    let config = super::root_config(kubeconfig).await?;
    let base = kube::Client::try_from(runtime::clients::base_config(config)?)?;
    let identity = args.identity.unwrap_or_else(|| format!("flotilla-scheduler-{}", std::process::id()));
    let options = args.failover.apply(scheduler::Options {
        heartbeat_grace: args.heartbeat_grace,
        resync: args.resync,
        instance: identity.clone(),
        ..Default::default()
    });
    let election = args.leader_elect.then(scheduler::leader::Timing::default);
    println!(
        "scheduler {identity} running (heartbeat grace {:?}, leader election {})",
        args.heartbeat_grace,
        if args.leader_elect { "on" } else { "off" }
    );
    println!("ready");
    scheduler::run_until(base, options, election, super::shutdown_signal()).await;
    tracing::info!("shutting down");
    Ok(())
}
