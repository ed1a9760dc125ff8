//! The processes of the simulated clusters that `flotilla up` runs, as `up` and
//! `flotilla drill` both see them. Each cluster's directory under the data dir holds:
//! - `pid`: the running process, written by `flotilla sim-cluster` when it starts and
//!   removed when it stops cleanly;
//! - `listen`: the address it serves on, kept so that a restart keeps its URL;
//! - `definition`: the definition file it was started from, so a drill can restart it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The directory where cluster `name` keeps its state and the files above.
pub fn dir(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("clusters").join(name)
}

/// Records this process as cluster `name`'s.
pub fn write_pid(data_dir: &Path, name: &str) -> anyhow::Result<()> {
    let path = dir(data_dir, name).join("pid");
    controlplane::fsutil::write_private(&path, format!("{}\n", std::process::id()).as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Forgets this process as cluster `name`'s, if the pid file still names it.
pub fn remove_pid(data_dir: &Path, name: &str) {
    let path = dir(data_dir, name).join("pid");
    if std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse::<u32>().ok()) == Some(std::process::id()) {
        let _ = std::fs::remove_file(path);
    }
}

/// What the process of a simulated cluster is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// It runs.
    Running(Pid),
    /// It is stopped by SIGSTOP (a `freeze` drill).
    Frozen(Pid),
    /// No process serves the cluster.
    Gone,
}

/// The state of cluster `name`'s process. A pid file naming a process that has exited,
/// or that is no longer a simulated cluster (its pid reused), counts as gone.
pub fn state(data_dir: &Path, name: &str) -> State {
    let Some(pid) = std::fs::read_to_string(dir(data_dir, name).join("pid")).ok().and_then(|s| s.trim().parse::<i32>().ok()) else {
        return State::Gone;
    };
    let pid = Pid::from_raw(pid);
    if kill(pid, None).is_err() {
        return State::Gone;
    }
    match proc_info(pid) {
        // Not Linux: trust the pid file.
        None => State::Running(pid),
        Some((cmdline, _)) if !(cmdline.contains("sim-cluster") && cmdline.contains(name)) => State::Gone,
        Some((_, 'Z' | 'X')) => State::Gone,
        Some((_, 'T')) => State::Frozen(pid),
        Some(_) => State::Running(pid),
    }
}

/// A process's command line (arguments joined by spaces) and its state letter, from
/// `/proc`; None where there is no `/proc`.
fn proc_info(pid: Pid) -> Option<(String, char)> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold spaces.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    Some((cmdline, state))
}

/// The command that runs cluster `name` from `definition`, on `listen`.
pub fn command(exe: &Path, data_dir: &Path, definition: &Path, name: &str, listen: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--data-dir").arg(data_dir).arg("sim-cluster").arg("--config").arg(definition).args(["--name", name, "--listen", listen]);
    cmd.stdin(Stdio::null());
    cmd
}

/// The address cluster `name` served on last, if it ran before.
pub fn kept_listen(data_dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir(data_dir, name).join("listen")).ok().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}

/// The definition file cluster `name` was started from.
pub fn kept_definition(data_dir: &Path, name: &str) -> Option<PathBuf> {
    std::fs::read_to_string(dir(data_dir, name).join("definition"))
        .ok()
        .map(|l| PathBuf::from(l.trim()))
        .filter(|p| !p.as_os_str().is_empty())
}

/// Stops the processes of the named clusters: SIGTERM (and SIGCONT, so a frozen one
/// gets it), then SIGKILL for any still running after `grace`. Returns how many it
/// stopped.
pub fn stop_all(data_dir: &Path, names: &[String], grace: Duration) -> usize {
    let pids: Vec<(&String, Pid)> = names
        .iter()
        .filter_map(|n| match state(data_dir, n) {
            State::Running(p) | State::Frozen(p) => Some((n, p)),
            State::Gone => None,
        })
        .collect();
    for (_, pid) in &pids {
        let _ = kill(*pid, Signal::SIGTERM);
        let _ = kill(*pid, Signal::SIGCONT);
    }
    let deadline = Instant::now() + grace;
    for (name, pid) in &pids {
        while state(data_dir, name) != State::Gone {
            if Instant::now() > deadline {
                eprintln!("simulated cluster {name} did not stop in {grace:?}; killing it");
                let _ = kill(*pid, Signal::SIGKILL);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    pids.len()
}
