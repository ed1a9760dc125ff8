//! Command-line definitions (the CLI contract in shared/DESIGN.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Flotilla: apply Deployments to a workspace and run them on a fleet of clusters.
#[derive(Debug, Parser)]
#[command(
    name = "flotilla",
    version,
    about,
    propagate_version = true,
    after_help = "Start here: `flotilla up` runs a control plane with three simulated clusters; then \
                  `kubectl apply -f docs/examples/`, `flotilla status` and `flotilla drill kill west`. \
                  The README and docs/user-guide.md say more."
)]
pub struct Cli {
    /// Kubeconfig to use [default: <data-dir>/admin.kubeconfig].
    #[arg(long, global = true, env = "FLOTILLA_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Data directory for the store, CA, tokens and kubeconfig.
    #[arg(long, global = true, default_value = ".flotilla", env = "FLOTILLA_DATA_DIR")]
    pub data_dir: PathBuf,
    /// More logging (-v debug, -vv debug from the libraries too); RUST_LOG overrides.
    /// `up` writes its logs to <data-dir>/logs/flotilla.log, or to stderr with -v.
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
    /// Run the control plane: the Kubernetes-compatible API server with workspaces, the
    /// scheduler, and the syncers of the push-mode clusters, in one process.
    Start(StartArgs),
    /// Run the control plane with a fleet of simulated clusters, registered, and a
    /// workspace `demo` as the current context: everything a first tour needs.
    Up(UpArgs),
    /// Manage workspaces (logical clusters).
    #[command(subcommand)]
    Workspace(WorkspaceCmd),
    /// Register and manage physical clusters (SyncTargets).
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Run one simulated cluster (a kind-like Kubernetes API with simulated nodes and pods).
    SimCluster(SimClusterArgs),
    /// Run one cluster's syncer as its own process (pull mode), with the scoped token
    /// that `flotilla cluster register NAME --pull` minted.
    Syncer(SyncerArgs),
    /// Run the scheduler as its own process against any control plane. With leader
    /// election (the default), several can run; one acts and the others stand by.
    Scheduler(SchedulerArgs),
    /// The fleet at a glance: each cluster's health and capacity, and where each
    /// workload runs, with its replicas ready per cluster and why it waits if it does.
    Status(StatusArgs),
    /// Why a workload runs where it runs: each cluster, a candidate or not and why, its
    /// free room, the replicas it fits, its rank and its share, by the scheduler's own
    /// rules on the clusters as the scheduler last reported them.
    Explain(ExplainArgs),
    /// A dry run of a failure: where every affected workload would go, what would not
    /// fit and why, and each cluster's room afterwards. Nothing is changed.
    WhatIf(WhatIfArgs),
    /// Inject a fault into a simulated cluster that `flotilla up` runs, and print the
    /// failover that follows: when the loss was detected, when each workload moved and
    /// was Available again, and the total time.
    Drill(DrillArgs),
    /// Print the Flotilla CRDs as YAML, to install them on another Kubernetes API server.
    Crds,
    /// Print a token that may read `/metrics` and nothing else, for a Prometheus scrape
    /// config. It needs the admin kubeconfig, and lasts as long as the data dir's
    /// token-signing key.
    MetricsToken,
    /// Print the URL of the web dashboard and a sign-in link that works for 10 minutes,
    /// and open it in a browser where one is available. The link opens a read-only
    /// session: the whole fleet with the admin kubeconfig, one workspace otherwise.
    Dashboard(DashboardArgs),
    /// Print a shell completion script: `source <(flotilla completion bash)`.
    Completion {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `flotilla up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Simulated clusters to run and register (a definition file with one cluster or a
    /// list) [default: the demo fleet east, west and eu, built in].
    #[arg(long, value_name = "FILE")]
    pub clusters: Option<PathBuf>,
    /// The workspace to create and make the current context.
    #[arg(long, default_value = "demo")]
    pub workspace: String,
    /// Run the control plane highly available: a local etcd of three members (the
    /// `etcd` binary on PATH), three replicas, and a load balancer on --listen.
    #[arg(long)]
    pub ha: bool,
    #[command(flatten)]
    pub start: StartArgs,
}

/// `flotilla status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Show only this workspace's workloads [default: every workspace].
    #[arg(long)]
    pub workspace: Option<String>,
    /// Keep watching: redraw every second (in a terminal), or print each change.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format; `json` is stable for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `flotilla dashboard`.
#[derive(Debug, clap::Args)]
pub struct DashboardArgs {
    /// Sign in to this workspace only [default: every workspace with the admin
    /// kubeconfig; the current context's workspace otherwise].
    #[arg(long)]
    pub workspace: Option<String>,
    /// Only print the link; do not start a browser.
    #[arg(long)]
    pub no_open: bool,
}

/// `flotilla explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The workload, as `deploy/NAME`.
    pub workload: String,
    /// Its namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Its workspace [default: the one workspace that has such a workload].
    #[arg(long)]
    pub workspace: Option<String>,
}

/// `flotilla what-if`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("change").required(true).args(["lose", "drain", "cordon"])))]
pub struct WhatIfArgs {
    /// Clusters lost at once, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub lose: Vec<String>,
    /// A cluster drained.
    #[arg(long)]
    pub drain: Option<String>,
    /// A cluster cordoned.
    #[arg(long)]
    pub cordon: Option<String>,
    /// Only this workspace's workloads [default: every workspace].
    #[arg(long)]
    pub workspace: Option<String>,
    /// The scheduler's --unhealthy-cluster-threshold, for the disruption brake.
    #[arg(long, default_value = "55%", value_parser = share)]
    pub unhealthy_cluster_threshold: f64,
}

/// `flotilla drill`.
#[derive(Debug, clap::Args)]
pub struct DrillArgs {
    /// The fault to inject, or `restore` to end it.
    #[arg(value_enum)]
    pub fault: Fault,
    /// The cluster (SyncTarget) name, or several separated by commas to lose them at
    /// once; for the replica and etcd drills, the number of the replica or etcd member
    /// (0, 1 or 2).
    pub cluster: String,
    /// Give up waiting for the failover (or the recovery) after this long.
    #[arg(long, default_value = "2m", value_parser = duration)]
    pub timeout: std::time::Duration,
}

/// A fault a drill injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// The cluster's API goes away (its process is killed).
    Kill,
    /// The cluster accepts connections but never answers (its process is stopped).
    Freeze,
    /// Back to normal: thaw a frozen cluster, or start a killed one again.
    Restore,
    /// Kill replica N of `flotilla up --ha` (SIGKILL).
    KillReplica,
    /// Start replica N of `flotilla up --ha` again.
    RestoreReplica,
    /// Kill etcd member N of `flotilla up --ha` (SIGKILL).
    KillEtcd,
    /// Start etcd member N of `flotilla up --ha` again.
    RestoreEtcd,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fault::Kill => "kill",
            Fault::Freeze => "freeze",
            Fault::Restore => "restore",
            Fault::KillReplica => "kill-replica",
            Fault::RestoreReplica => "restore-replica",
            Fault::KillEtcd => "kill-etcd",
            Fault::RestoreEtcd => "restore-etcd",
        })
    }
}

/// How a command prints what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Tables for people.
    Text,
    /// JSON for scripts (with `-w`, one line per change).
    Json,
}

/// `flotilla sim-cluster`.
#[derive(Debug, clap::Args)]
pub struct SimClusterArgs {
    /// Cluster definition file (one cluster, or a list of them).
    #[arg(long)]
    pub config: PathBuf,
    /// Which cluster of the file to run; required when the file defines several.
    #[arg(long)]
    pub name: Option<String>,
    /// Address to serve HTTPS on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
}

/// `flotilla cluster ...`.
#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Check that a cluster is reachable and usable, store its kubeconfig, and create its SyncTarget.
    Register(RegisterArgs),
    /// List the registered clusters (the same facts as `kubectl get synctargets`).
    List,
    /// Place no new workloads on the cluster; running ones stay.
    Cordon {
        /// SyncTarget name.
        name: String,
    },
    /// Allow new workloads on the cluster again.
    Uncordon {
        /// SyncTarget name.
        name: String,
    },
    /// Cordon the cluster and move every workload that can move elsewhere,
    /// make-before-break: each old copy stays until its replacement is Available.
    Drain {
        /// SyncTarget name.
        name: String,
        /// Remove the old copies after this long even if their replacements are not
        /// Available yet.
        #[arg(long, default_value = "5m", value_parser = duration)]
        timeout: std::time::Duration,
    },
    /// Add or remove taints, as `kubectl taint nodes` does: `key=value:Effect` adds
    /// (or replaces the value of the taint with that key and effect), `key:Effect-`
    /// and `key-` remove. Effects: NoSchedule, PreferNoSchedule, NoExecute.
    Taint {
        /// SyncTarget name.
        name: String,
        /// Taints to add or remove.
        #[arg(required = true)]
        taints: Vec<String>,
    },
    /// Confirm that a NotReady cluster is really gone, so that the disruption brake
    /// lets its workloads move; its next heartbeat ends the confirmation.
    ConfirmLost {
        /// SyncTarget name.
        name: String,
    },
    /// Remove the SyncTarget and its kubeconfig Secret.
    Deregister {
        /// SyncTarget name.
        name: String,
    },
}

/// `flotilla cluster register`.
#[derive(Debug, clap::Args)]
pub struct RegisterArgs {
    /// SyncTarget name (an RFC 1123 label).
    pub name: String,
    /// The physical cluster's kubeconfig. The control plane's is taken from
    /// `flotilla --kubeconfig F cluster register ...` or the data dir.
    #[arg(long = "kubeconfig", id = "kubeconfig")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the cluster's kubeconfig to use [default: its current context].
    #[arg(long)]
    pub context: Option<String>,
    /// Labels for Placements to select on, as key=value. Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// The syncer runs on the cluster (pull mode): print the manifest to apply there.
    #[arg(long)]
    pub pull: bool,
    /// With --pull: write the syncer's upstream kubeconfig (its scoped token) to this
    /// file, mode 0600, instead of printing a manifest; for a syncer you run yourself
    /// with `flotilla syncer`.
    #[arg(long, value_name = "FILE", requires = "pull")]
    pub upstream_kubeconfig_out: Option<PathBuf>,
    /// Syncer image for the pull-mode manifest: by default the one hack/image.sh builds
    /// (hack/kind-up.sh loads it into kind clusters).
    #[arg(long, default_value = concat!("localhost/flotilla:", env!("CARGO_PKG_VERSION")))]
    pub syncer_image: String,
}

/// `flotilla syncer`.
#[derive(Debug, clap::Args)]
pub struct SyncerArgs {
    /// The SyncTarget this syncer serves.
    #[arg(long)]
    pub sync_target: String,
    /// The control plane's kubeconfig, with the syncer's scoped token.
    #[arg(long)]
    pub upstream_kubeconfig: PathBuf,
    /// The physical cluster's kubeconfig.
    #[arg(long, required_unless_present = "downstream_in_cluster")]
    pub downstream_kubeconfig: Option<PathBuf>,
    /// Reach the physical cluster with the pod's service account (the syncer runs there).
    #[arg(long, conflicts_with = "downstream_kubeconfig")]
    pub downstream_in_cluster: bool,
    /// How often the syncer reports its cluster's heartbeat and capacity.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub heartbeat_interval: std::time::Duration,
    /// How often every synced object is looked at again, events or not.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub resync: std::time::Duration,
}

/// How far the scheduler goes in moving workloads off lost clusters.
#[derive(Debug, Clone, clap::Args)]
pub struct FailoverArgs {
    /// When more than this share of the Ready clusters go NotReady within one heartbeat
    /// grace, their workloads stay where they are (the disruption brake) until the
    /// clusters return, or until `flotilla cluster confirm-lost NAME`. A percentage
    /// (55%) or a fraction (0.55).
    #[arg(long, default_value = "55%", value_parser = share)]
    pub unhealthy_cluster_threshold: f64,
    /// Workloads moved off lost or draining clusters per second, at most.
    #[arg(long, default_value = "1000", value_parser = rate)]
    pub eviction_rate: f64,
}

impl FailoverArgs {
    /// The scheduler's options with these set.
    pub fn apply(&self, options: scheduler::Options) -> scheduler::Options {
        scheduler::Options { unhealthy_threshold: self.unhealthy_cluster_threshold, eviction_rate: self.eviction_rate, ..options }
    }
}

/// A share: `55%`, or `0.55`, from 0 to 1.
fn share(s: &str) -> Result<f64, String> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("{s:?} is not a share: give a percentage such as 55% or a fraction such as 0.55"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s:?} is out of range: a share is from 0% to 100%"))
    }
}

/// A positive rate per second.
fn rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a rate: give a number of workloads per second above 0, such as 1000 or 0.5")),
    }
}

/// `flotilla scheduler`.
#[derive(Debug, clap::Args)]
pub struct SchedulerArgs {
    /// A cluster whose heartbeat is older than this is not Ready, and its workloads move.
    #[arg(long, default_value = "8s", value_parser = duration)]
    pub heartbeat_grace: std::time::Duration,
    #[command(flatten)]
    pub failover: FailoverArgs,
    /// How often every workload is looked at again, events or not.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub resync: std::time::Duration,
    /// Take the scheduler Lease in root before acting, so that only one scheduler acts.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// This scheduler's name in the Lease and in Events [default: flotilla-scheduler-<pid>].
    #[arg(long)]
    pub identity: Option<String>,
}

/// `flotilla start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// How often each push-mode syncer reports its cluster's heartbeat and capacity.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub heartbeat_interval: std::time::Duration,
    /// How often the syncers, the status aggregator and the companions controller look
    /// at every object again, events or not (the scheduler looks at every workload every
    /// 60 s).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub resync: std::time::Duration,
    /// A cluster whose heartbeat is older than this is not Ready, and its workloads move.
    #[arg(long, default_value = "8s", value_parser = duration)]
    pub heartbeat_grace: std::time::Duration,
    #[command(flatten)]
    pub failover: FailoverArgs,
    /// Do not run the scheduler in this process (run `flotilla scheduler` elsewhere, or
    /// assign workloads by hand).
    #[arg(long)]
    pub no_scheduler: bool,
    /// More names (DNS names or IP addresses, comma-separated) that the serving
    /// certificate is valid for, besides localhost and the --listen address: the
    /// Service or load balancer in front of the replicas.
    #[arg(long, value_delimiter = ',')]
    pub tls_san: Vec<String>,
    /// Keep the data in etcd at these client URLs (comma-separated) instead of
    /// <data-dir>/store.db. Every replica started on the same etcd and prefix serves
    /// the same control plane.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// The etcd key prefix this control plane's keys live under.
    #[arg(long, default_value = "/flotilla")]
    pub etcd_prefix: String,
    /// The CA that signed etcd's serving certificates, for https:// etcd URLs.
    #[arg(long)]
    pub etcd_cafile: Option<std::path::PathBuf>,
    /// The client certificate to present to etcd.
    #[arg(long, requires = "etcd_keyfile")]
    pub etcd_certfile: Option<std::path::PathBuf>,
    /// The key of --etcd-certfile.
    #[arg(long, requires = "etcd_certfile")]
    pub etcd_keyfile: Option<std::path::PathBuf>,
    /// How often to compact etcd's history (0 never compacts).
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub etcd_compaction_interval: std::time::Duration,
}

impl StartArgs {
    /// The etcd store these flags ask for, if any.
    pub fn etcd(&self) -> Option<controlplane::store::EtcdConfig> {
        if self.etcd_servers.is_empty() {
            return None;
        }
        let tls = (self.etcd_cafile.is_some() || self.etcd_certfile.is_some()).then(|| controlplane::store::EtcdTls {
            ca: self.etcd_cafile.clone(),
            cert: self.etcd_certfile.clone(),
            key: self.etcd_keyfile.clone(),
        });
        Some(controlplane::store::EtcdConfig {
            prefix: self.etcd_prefix.clone(),
            tls,
            compaction_interval: (!self.etcd_compaction_interval.is_zero()).then_some(self.etcd_compaction_interval),
            ..controlplane::store::EtcdConfig::new(self.etcd_servers.clone())
        })
    }
}

/// A Go-style duration flag (`500ms`, `2s`, `1m`).
fn duration(s: &str) -> Result<std::time::Duration, String> {
    test_clusters::duration::parse(s).map_err(|e| e.to_string())
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command and every flag says what it is for, in `--help`.
    #[test]
    fn every_command_and_flag_has_help() {
        fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() {
                missing.push(format!("{path}: no about"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    missing.push(format!("{path} {id}: no help"));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                check(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        check(&super::Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "{missing:#?}");
        super::Cli::command().debug_assert();
    }
}
