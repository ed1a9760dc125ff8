//! Command-line definitions (the CLI contract in shared/DESIGN.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Flotilla: apply Deployments to a workspace and run them on a fleet of clusters.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version, about, propagate_version = true)]
pub struct Cli {
    /// Kubeconfig to use [default: <data-dir>/admin.kubeconfig].
    #[arg(long, global = true, env = "FLOTILLA_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Data directory for the store, CA, tokens and kubeconfig.
    #[arg(long, global = true, default_value = ".flotilla", env = "FLOTILLA_DATA_DIR")]
    pub data_dir: PathBuf,
    /// More logging (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane (Kubernetes-compatible API server with workspaces).
    Start(StartArgs),
    /// Manage workspaces (logical clusters).
    #[command(subcommand)]
    Workspace(WorkspaceCmd),
    /// Print the Flotilla CRDs as YAML, to install them on another Kubernetes API server.
    Crds,
}

/// `flotilla start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
}

/// `flotilla workspace ...`.
#[derive(Debug, Subcommand)]
pub enum WorkspaceCmd {
    /// Create a workspace and add a kubeconfig context for it, with a token scoped to it.
    Create {
        /// Workspace name (an RFC 1123 label).
        name: String,
        /// Switch the current context to the new workspace.
        #[arg(long = "use")]
        use_it: bool,
    },
    /// Delete a workspace, everything in it, and its kubeconfig context.
    Delete {
        /// Workspace name.
        name: String,
    },
    /// List workspaces.
    List,
}

/// Sets up `tracing` from -v, RUST_LOG and --log-format.
pub fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let default = match cli.verbose {
        0 => "info",
        1 => "info,controlplane=debug,flotilla=debug",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
