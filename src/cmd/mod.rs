//! Subcommand implementations.

mod start;
mod workspace;

use crate::cli::{Cli, Command};

/// Runs the chosen subcommand.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let kubeconfig = cli.kubeconfig.clone().unwrap_or_else(|| cli.data_dir.join("admin.kubeconfig"));
    match cli.command {
        Command::Start(args) => start::run(&cli.data_dir, args).await,
        Command::Workspace(cmd) => workspace::run(&kubeconfig, cmd).await,
        Command::Crds => {
            print!("{}", placement_api::crds_yaml());
            Ok(())
        }
    }
}

/// Waits for Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
