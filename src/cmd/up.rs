//! `flotilla up`: the control plane with a fleet of simulated clusters, registered, and
//! a workspace as the current context. What `start` runs, plus:
//! - one `flotilla sim-cluster` process per cluster of the definition file (`--clusters`,
//!   or the demo fleet built into the binary, written to `<data-dir>/demo.yaml` for the
//!   processes to read), each with its state in `<data-dir>/clusters/<name>/` and its log
//!   in `<data-dir>/logs/`;
//! - each cluster registered as a push-mode SyncTarget with the file's labels;
//! - the workspace created and made the admin kubeconfig's current context.
//!
//! Running it again on the same data dir brings back the same fleet: each cluster keeps
//! its state and its port (kept in `<data-dir>/clusters/<name>/listen`), so its
//! registration is unchanged and its workloads stay where they were.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::Api;
use placement_api::{SyncTarget, CONDITION_READY};
use test_clusters::config::ClusterDef;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use super::sims;

use crate::cli::{RegisterArgs, UpArgs};

/// How long a simulated cluster may take to start, and the clusters to turn Ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The demo fleet, used without `--clusters`. It is built in so that `up` works from
/// any directory, not only from a checkout of the repository.
const DEMO: &str = include_str!("../../test-clusters/demo.yaml");

/// Where the built-in definition is written in the data dir: the simulated clusters,
/// and a drill that restarts one, read it from there.
const DEMO_FILE: &str = "demo.yaml";

/// Runs until Ctrl-C or SIGTERM, then stops the clusters and the control plane. The
/// logs go to `log_file` if it is given (the terminal then shows only the progress and
/// the warnings); it is named in the first line.
pub async fn run(data_dir: &Path, log_file: Option<&Path>, args: UpArgs) -> anyhow::Result<()> {
    if args.ha {
        return super::ha::run(data_dir, args).await;
    }
    let defs = definitions(&args)?;
    match log_file {
        Some(log) => println!("starting the control plane on {} (log: {})", args.start.listen, log.display()),
        None => println!("starting the control plane on {}", args.start.listen),
    }
    let (clusters, workspace) = (args.clusters.clone(), args.workspace.clone());
    super::start::serve(data_dir, args.start, |kubeconfig| fleet_up(data_dir.to_path_buf(), kubeconfig, clusters, defs, workspace, &[]))
        .await
}

/// The definitions of the clusters to run: `--clusters`, or the demo fleet.
pub(super) fn definitions(args: &UpArgs) -> anyhow::Result<Vec<ClusterDef>> {
    match &args.clusters {
        Some(file) => test_clusters::config::load(file).context("reading the cluster definitions (--clusters)"),
        None => demo(),
    }
}

/// The simulated clusters `up` runs; dropping it stops them, including any that a
/// drill restarted (see [`super::sims`]).
pub(super) struct Fleet {
    data_dir: PathBuf,
    names: Vec<String>,
    stopping: Arc<AtomicBool>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // SIGTERM lets each cluster close its store; one that does not stop in time is killed.
        let stopped = sims::stop_all(&self.data_dir, &self.names, Duration::from_secs(5));
        println!("stopped {stopped} simulated cluster(s)");
    }
}

/// The built-in demo fleet.
fn demo() -> anyhow::Result<Vec<ClusterDef>> {
    test_clusters::config::parse(DEMO, "the built-in demo fleet").context("the built-in definition of the demo fleet")
}

/// `file` is the definition file, None for the built-in demo fleet.
pub(super) async fn fleet_up(
    data_dir: PathBuf,
    kubeconfig: PathBuf,
    file: Option<PathBuf>,
    defs: Vec<ClusterDef>,
    workspace: String,
    more_next: &[&str],
) -> anyhow::Result<Fleet> {
    let exe = std::env::current_exe().context("finding the flotilla binary to run the simulated clusters")?;
    let logs = data_dir.join("logs");
    controlplane::fsutil::create_private_dir(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let file = match file {
        Some(file) => file,
        None => {
            let file = data_dir.join(DEMO_FILE);
            controlplane::fsutil::write_private(&file, DEMO.as_bytes()).with_context(|| format!("writing {}", file.display()))?;
            file
        }
    };
    // A drill restarts a cluster from the same file, whatever the working directory.
    let file = std::path::absolute(&file).with_context(|| format!("resolving {}", file.display()))?;
    let stopping = Arc::new(AtomicBool::new(false));
    let fleet = Fleet { data_dir: data_dir.clone(), names: defs.iter().map(|d| d.name.clone()).collect(), stopping: stopping.clone() };
    let mut children = Vec::new();
    for def in &defs {
        if let sims::State::Running(pid) | sims::State::Frozen(pid) = sims::state(&data_dir, &def.name) {
            anyhow::bail!(
                "simulated cluster {} of {} still runs as pid {pid}, left by an earlier `flotilla up` that did not stop cleanly; \
                 stop it with `kill {pid}` and run `flotilla up` again",
                def.name,
                data_dir.display()
            );
        }
        let child = spawn_cluster(&exe, &data_dir, &logs, &file, &def.name)?;
        children.push((def.name.clone(), child));
    }
    for (name, mut child) in children {
        let url = wait_serving(&name, &mut child, &logs).await?;
        controlplane::fsutil::write_private(&sims::dir(&data_dir, &name).join("listen"), url.trim_start_matches("https://").as_bytes())
            .with_context(|| format!("keeping cluster {name}'s port in the data dir"))?;
        println!("simulated cluster {name} serving on {url}");
        tokio::spawn(reap(name, child, stopping.clone()));
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
    let bin_dir = exe.parent().map(|d| d.display().to_string()).unwrap_or_default();
    // The examples are in the repository, and `up` runs from anywhere.
    let here = if Path::new("docs/examples").is_dir() { "here" } else { "in the Flotilla repository" };
    println!("next, in another terminal {here}:");
    let kc = std::path::absolute(&kubeconfig).unwrap_or_else(|_| kubeconfig.clone());
    println!("  export PATH={bin_dir}:$PATH KUBECONFIG={}", kc.display());
    println!("  kubectl apply -f docs/examples/       # an app of every kind, and Placements, in workspace {workspace}");
    println!("  flotilla status                       # the clusters, and where each workload runs");
    println!("  flotilla dashboard                    # the same, live in a browser");
    println!("  flotilla drill kill west              # lose a cluster, and watch its workloads move");
    for line in more_next {
        println!("  {line}");
    }
    println!("Ctrl-C stops the control plane and the clusters; `flotilla up` again brings them back.");
    Ok(fleet)
}

/// Waits for a cluster's process to exit, and says so unless `up` is stopping: a drill
/// killed it, or it failed.
async fn reap(name: String, mut child: Child, stopping: Arc<AtomicBool>) {
    let status = child.wait().await;
    if !stopping.load(Ordering::SeqCst) {
        let how = status.map_or_else(|e| e.to_string(), |s| s.to_string());
        println!("simulated cluster {name} exited ({how}); `flotilla drill restore {name}` starts it again");
    }
}

/// Starts `flotilla sim-cluster` for `name`, on the port it had last time if it ran
/// before.
fn spawn_cluster(exe: &Path, data_dir: &Path, logs: &Path, file: &Path, name: &str) -> anyhow::Result<Child> {
    let state = sims::dir(data_dir, name);
    controlplane::fsutil::create_private_dir(&state).with_context(|| format!("creating {}", state.display()))?;
    controlplane::fsutil::write_private(&state.join("definition"), file.as_os_str().as_encoded_bytes())
        .with_context(|| format!("keeping cluster {name}'s definition file in the data dir"))?;
    let listen = sims::kept_listen(data_dir, name).unwrap_or_else(|| "127.0.0.1:0".into());
    let log_path = logs.join(format!("{name}.log"));
    let log = controlplane::fsutil::append_private(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    println!("starting simulated cluster {name} (log: {})", log_path.display());
    sims::command(exe, data_dir, file, name, &listen)
        .stdout(Stdio::piped())
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal reaches `up` alone, which
        // stops its controllers and then the clusters, rather than the clusters going
        // first and their syncers and `up` reporting them gone.
        .process_group(0)
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

#[cfg(test)]
mod tests {
    /// The README's tour and `flotilla drill kill west` rely on these three clusters.
    #[test]
    fn the_built_in_demo_fleet_is_east_west_and_eu() {
        let names: Vec<String> = super::demo().unwrap().into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["east", "west", "eu"]);
    }
}
