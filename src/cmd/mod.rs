//! Subcommand implementations.

mod cluster;
mod dashboard;
mod drill;
mod explain;
mod ha;
mod ha_drill;
mod scheduler;
mod sim_cluster;
mod sims;
mod start;
mod status;
mod syncer;
mod up;
mod whatif;
mod workspace;

use std::path::Path;

use anyhow::Context;

use crate::cli::{Cli, ClusterCmd, Command};

/// Runs the chosen subcommand. `log_file` is where the logs go, if not to stderr.
pub async fn run(cli: Cli, log_file: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let kubeconfig = control_plane_kubeconfig(&cli);
    match cli.command {
        Command::Start(args) => start::run(&cli.data_dir, args).await,
        Command::Up(args) => up::run(&cli.data_dir, log_file.as_deref(), args).await,
        Command::Workspace(cmd) => workspace::run(&kubeconfig, cmd).await,
        Command::Cluster(cmd) => cluster::run(&kubeconfig, cmd).await,
        Command::SimCluster(args) => sim_cluster::run(&cli.data_dir, args).await,
        Command::Syncer(args) => syncer::run(args).await,
        Command::Scheduler(args) => scheduler::run(&kubeconfig, args).await,
        Command::Status(args) => status::run(&kubeconfig, args).await,
        Command::Explain(args) => explain::run(&kubeconfig, args).await,
        Command::WhatIf(args) => whatif::run(&kubeconfig, args).await,
        Command::Drill(args) => drill::run(&cli.data_dir, &kubeconfig, args).await,
        Command::Completion { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let name = cmd.get_bin_name().unwrap_or("flotilla").to_string();
            clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
            Ok(())
        }
        Command::Crds => {
            print!("{}", placement_api::crds_yaml());
            Ok(())
        }
        Command::MetricsToken => metrics_token(&kubeconfig).await,
        Command::Dashboard(args) => dashboard::run(&kubeconfig, args).await,
    }
}

/// Prints a token that reads `/metrics` and nothing else, minted by the control plane
/// for the admin (docs/user-guide.md shows a Prometheus scrape config that uses it).
async fn metrics_token(kubeconfig: &Path) -> anyhow::Result<()> {
    let client = root_client(kubeconfig).await?;
    let req = http::Request::post("/metrics/token").body(Vec::new())?;
    let resp: serde_json::Value = client.request(req).await.context("minting a metrics token (it takes the admin kubeconfig)")?;
    let token = resp.pointer("/status/token").and_then(serde_json::Value::as_str).context("the token response has no status.token")?;
    println!("{token}");
    Ok(())
}

/// Waits for Ctrl-C, SIGTERM or SIGHUP (the terminal closed: `up`'s clusters run in
/// their own process group, and the terminal's hangup reaches only `up`, which stops them).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut hup) = match (signal(SignalKind::terminate()), signal(SignalKind::hangup())) {
            (Ok(term), Ok(hup)) => (term, hup),
            _ => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The control plane's kubeconfig: `--kubeconfig`, else `<data-dir>/admin.kubeconfig`.
///
/// `cluster register` has a `--kubeconfig` of its own, the physical cluster's, and
/// clap hands its value to the global flag as well; there, the control plane's comes
/// from `FLOTILLA_KUBECONFIG` or the data dir.
fn control_plane_kubeconfig(cli: &Cli) -> std::path::PathBuf {
    let default = || {
        std::env::var_os("FLOTILLA_KUBECONFIG")
            .map(Into::into)
            .or_else(plugin_kubeconfig)
            .unwrap_or_else(|| cli.data_dir.join("admin.kubeconfig"))
    };
    match &cli.command {
        Command::Cluster(ClusterCmd::Register(args)) if args.kubeconfig.is_some() && args.kubeconfig == cli.kubeconfig => default(),
        _ => cli.kubeconfig.clone().unwrap_or_else(default),
    }
}

/// Whether this process runs as the kubectl plugin (`kubectl flotilla ...` runs the
/// binary when it is on PATH as `kubectl-flotilla`).
pub fn is_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_name().map(|n| n.to_string_lossy().starts_with("kubectl-flotilla")))
        .unwrap_or(false)
}

/// As a kubectl plugin, the kubeconfig kubectl uses: the first file of `KUBECONFIG`.
fn plugin_kubeconfig() -> Option<std::path::PathBuf> {
    if !is_kubectl_plugin() {
        return None;
    }
    let paths = std::env::var_os("KUBECONFIG")?;
    std::env::split_paths(&paths).find(|p| !p.as_os_str().is_empty())
}

/// A client for the control plane's `root` workspace, from its admin kubeconfig.
pub async fn root_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(root_config(kubeconfig).await?)?)
}

/// The client configuration of the admin kubeconfig's `root` context.
pub async fn root_config(kubeconfig: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {} (is the control plane started? pass --kubeconfig or --data-dir)", kubeconfig.display()))?;
    let opts = kube::config::KubeConfigOptions { context: Some("root".into()), ..Default::default() };
    kube::Config::from_custom_kubeconfig(kc, &opts).await.context("the kubeconfig has no usable \"root\" context")
}

/// Prints rows under a header in kubectl's style: columns three spaces apart.
pub fn print_table<R: AsRef<[String]>>(header: &[&str], rows: &[R]) {
    print!("{}", format_table(header, rows));
}

/// Rows under a header in kubectl's style, columns three spaces apart, one line each.
pub fn format_table<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> String {
    let n = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == n {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}   "));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.as_ref().iter().map(String::as_str).collect());
    }
    out
}
