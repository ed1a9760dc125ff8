//! `flotilla up`: the control plane with a fleet of simulated clusters, registered, and
//! a workspace as the current context. What `start` runs, plus:
//! - one `flotilla sim-cluster` process per cluster of the definition file, each with
//!   its state in `<data-dir>/clusters/<name>/` and its log in `<data-dir>/logs/`;
//! - each cluster registered as a push-mode SyncTarget with the file's labels;
//! - the workspace created and made the admin kubeconfig's current context.
//!
//! Running it again on the same data dir brings back the same fleet: each cluster keeps
//! its state and its port (kept in `<data-dir>/clusters/<name>/listen`), so its
//! registration is unchanged and its workloads stay where they were.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::Api;
use placement_api::{SyncTarget, CONDITION_READY};
use test_clusters::config::ClusterDef;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cli::{RegisterArgs, UpArgs};

/// How long a simulated cluster may take to start, and the clusters to turn Ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs until Ctrl-C or SIGTERM, then stops the clusters and the control plane.
pub async fn run(data_dir: &Path, args: UpArgs) -> anyhow::Result<()> {
    let defs = test_clusters::config::load(&args.clusters)
        .with_context(|| format!("reading the cluster definitions {} (pass another with --clusters)", args.clusters.display()))?;
    println!("starting the control plane on {}", args.start.listen);
    let (clusters, workspace) = (args.clusters.clone(), args.workspace.clone());
    super::start::serve(data_dir, args.start, |kubeconfig| fleet_up(data_dir.to_path_buf(), kubeconfig, clusters, defs, workspace)).await
}

/// The simulated clusters `up` started; dropping it stops them.
struct Fleet {
    children: Vec<(String, Child)>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // SIGTERM lets each cluster close its store; a cluster that does not stop in
        // time is killed.
        for (_, child) in &self.children {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (name, child) in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        eprintln!("simulated cluster {name} did not stop in 5 s; killing it");
                        let _ = child.start_kill();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        println!("stopped {} simulated cluster(s)", self.children.len());
    }
}

async fn fleet_up(
    data_dir: PathBuf,
    kubeconfig: PathBuf,
    file: PathBuf,
    defs: Vec<ClusterDef>,
    workspace: String,
) -> anyhow::Result<Fleet> {
    let exe = std::env::current_exe().context("finding the flotilla binary to run the simulated clusters")?;
    let logs = data_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut fleet = Fleet { children: Vec::new() };
    for def in &defs {
        let child = spawn_cluster(&exe, &data_dir, &logs, &file, &def.name)?;
        fleet.children.push((def.name.clone(), child));
    }
    for (name, child) in &mut fleet.children {
        let url = wait_serving(name, child, &logs).await?;
        std::fs::write(data_dir.join("clusters").join(&*name).join("listen"), url.trim_start_matches("https://"))
            .with_context(|| format!("keeping cluster {name}'s port in the data dir"))?;
        println!("simulated cluster {name} serving on {url}");
    }
    let root = super::root_client(&kubeconfig).await?;
    for def in &defs {
        let args = RegisterArgs {
            name: def.name.clone(),
            kubeconfig: Some(data_dir.join(format!("{}.kubeconfig", def.name))),
            context: None,
            labels: def.labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            pull: false,
            upstream_kubeconfig_out: None,
            syncer_image: String::new(),
        };
        super::cluster::register(&root, &kubeconfig, args, false).await.with_context(|| format!("registering cluster {}", def.name))?;
    }
    let workspaces = Api::all_with(root.clone(), &super::workspace::workspace_resource());
    super::workspace::create(&root, &workspaces, &kubeconfig, &workspace, true).await?;
    wait_ready(&root, &defs).await?;
    println!("ready");
    println!();
    println!("next:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  kubectl apply -f docs/examples/         # Deployments and Placements in workspace {workspace}");
    println!("  kubectl get deploy,wp                   # where each runs, and how many replicas are ready");
    println!("  flotilla cluster list                   # the clusters: ready, capacity, workloads");
    println!("Ctrl-C stops the control plane and the clusters; run `flotilla up` again to get them back.");
    Ok(fleet)
}

/// Starts `flotilla sim-cluster` for `name`, on the port it had last time if it ran
/// before.
fn spawn_cluster(exe: &Path, data_dir: &Path, logs: &Path, file: &Path, name: &str) -> anyhow::Result<Child> {
    let state = data_dir.join("clusters").join(name);
    std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
    let listen = std::fs::read_to_string(state.join("listen")).map(|l| l.trim().to_string()).unwrap_or_else(|_| "127.0.0.1:0".into());
    let log_path = logs.join(format!("{name}.log"));
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    println!("starting simulated cluster {name} (log: {})", log_path.display());
    Command::new(exe)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("sim-cluster")
        .arg("--config")
        .arg(file)
        .args(["--name", name, "--listen", &listen])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting simulated cluster {name} with {}", exe.display()))
}

/// Reads the cluster's start-up lines until "ready"; returns the URL it serves on.
async fn wait_serving(name: &str, child: &mut Child, logs: &Path) -> anyhow::Result<String> {
    let out = child.stdout.take().context("the simulated cluster's output is not piped")?;
    let mut lines = BufReader::new(out).lines();
    let mut url = None;
    let read = async {
        while let Some(line) = lines.next_line().await? {
            if let Some(rest) = line.split_once(" serving on ").map(|(_, r)| r) {
                url = rest.split_whitespace().next().map(str::to_string);
            }
            if line == "ready" {
                return Ok::<_, std::io::Error>(true);
            }
        }
        Ok(false)
    };
    let ready = tokio::time::timeout(START_TIMEOUT, read).await;
    let log = logs.join(format!("{name}.log"));
    match ready {
        Ok(Ok(true)) => {
            // Nothing more is printed there, but the pipe is kept drained.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            url.with_context(|| format!("simulated cluster {name} did not say where it serves"))
        }
        Ok(_) => anyhow::bail!("simulated cluster {name} exited while starting; see {}", log.display()),
        Err(_) => anyhow::bail!("simulated cluster {name} did not start within {START_TIMEOUT:?}; see {}", log.display()),
    }
}

/// Waits for every cluster's SyncTarget to turn Ready (its first heartbeat).
async fn wait_ready(root: &kube::Client, defs: &[ClusterDef]) -> anyhow::Result<()> {
    let targets: Api<SyncTarget> = Api::all(root.clone());
    let deadline = Instant::now() + START_TIMEOUT;
    let mut pending: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for name in pending {
            let st = targets.get_opt(name).await?;
            let ready = st
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == CONDITION_READY && c.status == "True"));
            if ready {
                println!("cluster {name} Ready");
            } else {
                still.push(name);
            }
        }
        pending = still;
        if !pending.is_empty() && Instant::now() > deadline {
            anyhow::bail!(
                "cluster(s) {} not Ready after {START_TIMEOUT:?}; see `kubectl --context root describe synctarget` and the logs",
                pending.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
