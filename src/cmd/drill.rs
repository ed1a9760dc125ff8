//! `flotilla drill kill|freeze|restore CLUSTER[,CLUSTER...]`: faults injected into
//! simulated clusters that `flotilla up` runs, with the failover that follows printed
//! as a timeline. Several clusters at once show the disruption brake.
//! - `kill`: SIGKILL. The cluster's API goes away; connections are refused.
//! - `freeze`: SIGSTOP. The kernel still accepts connections, but nothing answers, as
//!   with a hung API server or a network that drops replies.
//! - `restore`: SIGCONT for a frozen cluster; a killed one is started again, with its
//!   kept state and port, detached from the terminal.
//!
//! The timeline comes from the API, as any client sees it ([`super::status`]): when
//! the cluster turned NotReady, when each of its workloads was rescheduled and was
//! Available again, and the total.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{kill, Signal};

use super::sims::{self, State};
use super::status::{FleetStatus, Source, WorkloadStatus};
use crate::cli::{DrillArgs, Fault};

/// How often the timeline looks at the fleet.
const POLL: Duration = Duration::from_millis(200);

/// A workload, by workspace, namespace and name.
type WorkloadKey = (String, String, String);

/// Runs a drill.
pub async fn run(data_dir: &Path, kubeconfig: &Path, args: DrillArgs) -> anyhow::Result<()> {
    if matches!(args.fault, Fault::KillReplica | Fault::RestoreReplica | Fault::KillEtcd | Fault::RestoreEtcd) {
        return super::ha_drill::run(data_dir, kubeconfig, &args).await;
    }
    let source = Source::new(kubeconfig, None).await?;
    let before = source.collect().await?;
    let names: Vec<&str> = args.cluster.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    for name in &names {
        if !before.clusters.iter().any(|c| c.name == *name) {
            let known: Vec<&str> = before.clusters.iter().map(|c| c.name.as_str()).collect();
            anyhow::bail!("no cluster {name:?} is registered (registered: {}); `flotilla cluster list` shows them", known.join(", "));
        }
    }
    if names.is_empty() {
        anyhow::bail!("name the cluster to drill, or several separated by commas (east,west)");
    }
    match args.fault {
        Fault::Kill | Fault::Freeze => inject(data_dir, &source, before, &names, &args).await,
        _ => {
            // Every cluster comes back first, then each is waited for: one by one, the
            // first back would end the disruption and the others' workloads would move.
            let start = Instant::now();
            let mut children = Vec::new();
            for name in &names {
                children.push(bring_back(data_dir, name, start)?);
            }
            for (name, child) in names.iter().zip(children) {
                wait_back(data_dir, &source, name, child, start, &args).await?;
            }
            Ok(())
        }
    }
}

/// The error for a cluster without a process of its own under the data dir.
fn not_simulated(data_dir: &Path, name: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "cluster {name} has no simulated-cluster process under {} (no live pid in {}); drills work on the clusters \
         `flotilla up` runs with this --data-dir. For a kind cluster, `docker stop` or `docker pause` its node container instead.",
        data_dir.display(),
        sims::dir(data_dir, name).join("pid").display()
    )
}

/// Prints one timeline line, `elapsed` seconds after the fault.
fn say(start: Instant, what: impl AsRef<str>) {
    println!("{:>8}  {}", format!("+{:.1}s", start.elapsed().as_secs_f64()), what.as_ref());
}

/// Whether a workload ran to its end (a Job Complete or Failed).
fn finished(w: &WorkloadStatus) -> bool {
    matches!(w.state.as_str(), "Complete" | "Failed")
}

fn workloads(fleet: &FleetStatus) -> impl Iterator<Item = (WorkloadKey, &WorkloadStatus)> {
    fleet.workspaces.iter().flat_map(|ws| ws.workloads.iter().map(move |w| ((ws.name.clone(), w.namespace.clone(), w.name.clone()), w)))
}

fn key_str((ws, ns, name): &WorkloadKey) -> String {
    format!("{ws}/{ns}/{name}")
}

/// The replicas a workload has assigned on `cluster`.
fn share_on(w: &WorkloadStatus, cluster: &str) -> i32 {
    w.clusters.iter().find(|s| s.name == cluster).map_or(0, |s| s.replicas)
}

/// Where a workload runs, as `west=3 eu=1`.
fn shares(w: &WorkloadStatus) -> String {
    let s: Vec<String> = w.clusters.iter().filter(|s| s.replicas > 0).map(|s| format!("{}={}", s.name, s.replicas)).collect();
    if s.is_empty() {
        "nowhere".into()
    } else {
        s.join(" ")
    }
}

/// What happened to one workload of the lost cluster so far.
#[derive(Default)]
struct Progress {
    moved: bool,
    available: bool,
    stuck: bool,
    /// It stays by its kind's rule until the loss is confirmed (or the brake holds it).
    held: bool,
}

/// The replicas a workload has assigned on any of `clusters`.
fn share_on_any(w: &WorkloadStatus, clusters: &[&str]) -> i32 {
    clusters.iter().map(|c| share_on(w, c)).sum()
}

async fn inject(data_dir: &Path, source: &Source, before: FleetStatus, names: &[&str], args: &DrillArgs) -> anyhow::Result<()> {
    let mut pids = Vec::new();
    for name in names {
        pids.push(match (sims::state(data_dir, name), args.fault) {
            (State::Gone, _) => return Err(not_simulated(data_dir, name)),
            (State::Frozen(_), Fault::Freeze) => {
                anyhow::bail!("cluster {name} is frozen already; `flotilla drill restore {name}` thaws it")
            }
            (State::Running(pid) | State::Frozen(pid), _) => pid,
        });
    }
    // A finished Job stays where it ran: it is not one that moves.
    let affected: BTreeMap<WorkloadKey, i32> =
        workloads(&before).filter(|(_, w)| share_on_any(w, names) > 0 && !finished(w)).map(|(k, w)| (k, share_on_any(w, names))).collect();
    let (signal, what) = match args.fault {
        Fault::Kill => (Signal::SIGKILL, "killed: its API is gone, connections are refused"),
        _ => (Signal::SIGSTOP, "frozen: it accepts connections but never answers"),
    };
    for (name, pid) in names.iter().zip(&pids) {
        kill(*pid, signal).with_context(|| format!("sending {signal} to cluster {name}'s process {pid}"))?;
    }
    let start = Instant::now();
    let all = names.join(", ");
    let shown: Vec<String> = names.iter().zip(&pids).map(|(n, p)| format!("{n} (pid {p})")).collect();
    println!("drill: {} cluster {} at {}", args.fault, shown.join(", "), jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
    for name in names {
        say(start, format!("{name} {what}"));
    }
    let listed: Vec<String> = affected.iter().map(|(k, n)| format!("{} ({n})", key_str(k))).collect();
    say(
        start,
        match listed.len() {
            0 => format!("{all} run(s) no workloads; waiting for the loss to be detected"),
            n => format!("{n} workload(s) had replicas there: {}", listed.join(", ")),
        },
    );
    let deadline = start + args.timeout;
    let mut lost: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut braked: Option<Duration> = None;
    let mut progress: BTreeMap<WorkloadKey, Progress> = affected.keys().map(|k| (k.clone(), Progress::default())).collect();
    let mut unreadable = false;
    loop {
        let fleet = match source.collect().await {
            Ok(f) => {
                unreadable = false;
                f
            }
            Err(e) => {
                if !unreadable {
                    say(start, format!("cannot read the fleet from the control plane: {e:#}; still trying"));
                }
                unreadable = true;
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        for c in fleet.clusters.iter().filter(|c| names.contains(&c.name.as_str()) && !c.ready) {
            let name = names.iter().find(|n| **n == c.name).copied().unwrap_or_default();
            if !lost.contains_key(name) {
                lost.insert(name, start.elapsed());
                let age = c.heartbeat_age_seconds.map_or_else(String::new, |s| format!(", last heartbeat {s}s ago"));
                say(start, format!("loss detected: {name} is NotReady ({}{age})", c.not_ready_reason.as_deref().unwrap_or("unknown")));
            }
        }
        let paused: Vec<&str> = fleet.clusters.iter().filter(|c| c.failover_paused.is_some()).map(|c| c.name.as_str()).collect();
        match (braked, paused.is_empty()) {
            (None, false) => {
                braked = Some(start.elapsed());
                let why = fleet.clusters.iter().find_map(|c| c.failover_paused.clone()).unwrap_or_default();
                say(start, format!("disruption brake engaged: failover paused for {}: {why}", paused.join(", ")));
            }
            (Some(_), true) => {
                braked = None;
                say(start, "disruption brake released: the clusters still lost are failed over");
            }
            _ => {}
        }
        let detected = (lost.len() == names.len()).then(|| lost.values().max().copied()).flatten();
        let now: BTreeMap<WorkloadKey, &WorkloadStatus> = workloads(&fleet).collect();
        for (key, p) in progress.iter_mut() {
            let Some(w) = now.get(key) else {
                if !p.available {
                    say(start, format!("{} was deleted", key_str(key)));
                }
                (p.moved, p.available) = (true, true);
                continue;
            };
            if !p.moved && share_on_any(w, names) == 0 {
                p.moved = true;
                say(start, format!("{} rescheduled: {all} -> {}", key_str(key), shares(w)));
            }
            if p.moved && !p.available && w.state == "Available" {
                p.available = true;
                say(start, format!("{} Available again ({}/{} ready)", key_str(key), w.ready_replicas, w.replicas));
            }
            if let (Some(_), false, false, Some(why)) = (detected, p.moved, p.stuck, &w.failover_paused) {
                (p.stuck, p.held) = (true, true);
                say(start, format!("{}: {why}", key_str(key)));
            }
            if detected.is_some() && !p.moved && !p.stuck && w.state == "Pending" {
                p.stuck = true;
                say(
                    start,
                    format!(
                        "{} cannot move, and keeps its place on {all}: {}",
                        key_str(key),
                        w.reason.as_deref().unwrap_or("no other cluster fits")
                    ),
                );
            }
        }
        // Held by the brake: every workload not moved yet has replicas on a paused cluster.
        let held = braked.is_some()
            && progress.iter().filter(|(_, p)| !p.moved).all(|(k, _)| now.get(k).is_some_and(|w| share_on_any(w, &paused) > 0));
        if let (Some(detected), true) = (detected, held) {
            let waiting = progress.values().filter(|p| !p.moved).count();
            println!(
                "failover paused after {:.1}s: {} lost at once, detected after {:.1}s; the disruption brake keeps {waiting} workload(s) where they are",
                start.elapsed().as_secs_f64(),
                match names.len() {
                    1 => "the cluster".to_string(),
                    2 => "both clusters".to_string(),
                    n => format!("all {n} clusters"),
                },
                detected.as_secs_f64()
            );
            println!(
                "next: `flotilla cluster confirm-lost NAME` for each cluster that is really gone moves its workloads; `flotilla drill restore {}` brings them back.",
                names.join(",")
            );
            return Ok(());
        }
        let settled = progress.values().all(|p| p.available || (p.stuck && !p.moved));
        if let (Some(detected), true) = (detected, settled) {
            let total = start.elapsed();
            let recovered = progress.values().filter(|p| p.available).count();
            let held = progress.values().filter(|p| p.held && !p.available).count();
            let stuck = progress.len() - recovered - held;
            let mut summary = format!("failover took {:.1}s: loss detected after {:.1}s", total.as_secs_f64(), detected.as_secs_f64());
            if !progress.is_empty() {
                let _ = write!(summary, ", {recovered} of {} workload(s) Available elsewhere", progress.len());
            }
            if held > 0 {
                let _ = write!(summary, "; {held} wait for `flotilla cluster confirm-lost` (see `flotilla status`)");
            }
            if stuck > 0 {
                let _ = write!(summary, "; {stuck} wait for room (see `flotilla status`)");
            }
            say(
                start,
                match (progress.len(), recovered) {
                    (0, _) => format!("{all} {} out of the fleet", if names.len() == 1 { "is" } else { "are" }),
                    (_, 0) => "no workload could move".into(),
                    _ => "every workload that could move is Available".into(),
                },
            );
            println!("{summary}");
            println!("next: `flotilla drill restore {}` brings the cluster back.", names.join(","));
            return Ok(());
        }
        if Instant::now() > deadline {
            let waiting: Vec<String> = progress
                .iter()
                .filter(|(_, p)| !p.available && !p.stuck)
                .map(|(k, p)| format!("{} ({})", key_str(k), if p.moved { "moved, not Available yet" } else { "not moved" }))
                .collect();
            anyhow::bail!(
                "the failover did not finish within {:?}: {}{}; look at `flotilla status` and `kubectl describe deploy` in the workspace, \
                 and the control plane's log",
                args.timeout,
                if detected.is_none() { format!("{all}: not every one was marked NotReady; ") } else { String::new() },
                if waiting.is_empty() { "nothing moved".into() } else { format!("still waiting for {}", waiting.join(", ")) }
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A cluster started again (a killed one, with its log) or thawed.
type Restarted = Option<(tokio::process::Child, std::path::PathBuf)>;

/// Thaws a frozen cluster, or starts a killed one again.
fn bring_back(data_dir: &Path, name: &str, start: Instant) -> anyhow::Result<Restarted> {
    let mut child = None;
    match sims::state(data_dir, name) {
        State::Frozen(pid) => {
            kill(pid, Signal::SIGCONT).with_context(|| format!("sending SIGCONT to cluster {name}'s process {pid}"))?;
            println!("drill: restore cluster {name} at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
            say(start, format!("{name} thawed (pid {pid}): it answers again"));
        }
        State::Running(pid) => {
            println!("drill: restore cluster {name} at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
            say(start, format!("{name} runs already (pid {pid}); waiting for it to be Ready"));
        }
        State::Gone => {
            let (Some(definition), Some(listen)) = (sims::kept_definition(data_dir, name), sims::kept_listen(data_dir, name)) else {
                return Err(not_simulated(data_dir, name));
            };
            let exe = std::env::current_exe().context("finding the flotilla binary to run the simulated cluster")?;
            let log_path = data_dir.join("logs").join(format!("{name}.log"));
            let log = controlplane::fsutil::append_private(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
            // Its own process group: a Ctrl-C meant for this terminal does not stop it;
            // `flotilla up` stops it with the rest of the fleet.
            let spawned = sims::command(&exe, data_dir, &definition, name, &listen)
                .stdout(log.try_clone()?)
                .stderr(log)
                .process_group(0)
                .spawn()
                .with_context(|| format!("starting simulated cluster {name} again"))?;
            println!("drill: restore cluster {name} at {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"));
            say(
                start,
                format!(
                    "{name} started again (pid {}) on {listen}, with its state; log: {}",
                    spawned.id().unwrap_or(0),
                    log_path.display()
                ),
            );
            child = Some((spawned, log_path));
        }
    }
    Ok(child)
}

/// Waits until a cluster brought back is Ready, and the workloads that stayed on it
/// are Available there.
async fn wait_back(
    data_dir: &Path,
    source: &Source,
    name: &str,
    mut child: Restarted,
    start: Instant,
    args: &DrillArgs,
) -> anyhow::Result<()> {
    let deadline = start + args.timeout;
    let mut ready_at: Option<Duration> = None;
    let mut waiting: BTreeMap<WorkloadKey, bool> = BTreeMap::new();
    loop {
        if let Some((c, log)) = &mut child {
            if let Ok(Some(status)) = c.try_wait() {
                anyhow::bail!("simulated cluster {name} exited while starting ({status}); see {}", log.display());
            }
        }
        if let Ok(fleet) = source.collect().await {
            if ready_at.is_none() && fleet.clusters.iter().any(|c| c.name == name && c.ready) {
                ready_at = Some(start.elapsed());
                say(start, format!("{name} is Ready again: its syncer reports heartbeats"));
                // The workloads that stayed on it (they had nowhere else to go) come back.
                // A finished Job that stayed is done, not coming back.
                waiting = workloads(&fleet).filter(|(_, w)| share_on(w, name) > 0 && !finished(w)).map(|(k, _)| (k, false)).collect();
            }
            if ready_at.is_some() {
                let now: BTreeMap<WorkloadKey, &WorkloadStatus> = workloads(&fleet).collect();
                for (key, done) in waiting.iter_mut().filter(|(_, d)| !**d) {
                    // A Job that stayed may run to its end before it is seen running.
                    match now.get(key) {
                        None => *done = true,
                        Some(w) if w.state == "Available" || finished(w) => {
                            *done = true;
                            say(start, format!("{} {} on {name}", key_str(key), w.state));
                        }
                        Some(_) => {}
                    }
                }
                if waiting.values().all(|d| *d) {
                    println!(
                        "{name} is back after {:.1}s, with {} workload(s) that stayed on it; the scheduler may place workloads there again.",
                        start.elapsed().as_secs_f64(),
                        waiting.len()
                    );
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            let still: Vec<String> = waiting.iter().filter(|(_, d)| !**d).map(|(k, _)| key_str(k)).collect();
            anyhow::bail!(
                "{name} {} within {:?}; see its log under {} and `kubectl --context root describe synctarget {name}`",
                if ready_at.is_none() {
                    "did not turn Ready".to_string()
                } else {
                    format!("is Ready, but these workloads that stayed on it are not Available: {}", still.join(", "))
                },
                args.timeout,
                data_dir.join("logs").display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
