//! End-to-end harness: starts the real `flotilla` binary with its own data dir on an
//! ephemeral port, and runs the real `kubectl` against it with its own discovery
//! cache, so tests run in parallel without sharing anything.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to print "ready".
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The outcome of a command.
#[derive(Debug)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    fn from(o: Output) -> Self {
        Self { ok: o.status.success(), stdout: String::from_utf8_lossy(&o.stdout).into(), stderr: String::from_utf8_lossy(&o.stderr).into() }
    }
}

/// A running `flotilla start`.
pub struct Flotilla {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub url: String,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_flotilla")
}

impl Flotilla {
    /// Starts a control plane on a fresh data dir.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = Self { child: None, dir, url: String::new() };
        f.launch();
        f
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// Starts the server process on this data dir and waits for "ready".
    pub fn launch(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("server.log")).expect("log file");
        let mut child = Command::new(bin())
            .args(["--data-dir", self.dir.path().to_str().unwrap(), "start", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn flotilla");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut url = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(u) = line.strip_prefix("flotilla control plane serving on ") {
                    url = u.trim().to_string();
                }
                if line.trim() == "ready" {
                    let _ = tx.send(url.clone());
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => self.url = url,
            Err(_) => {
                let _ = child.kill();
                panic!("flotilla did not print ready within {START_TIMEOUT:?}; log:\n{}", self.log());
            }
        }
        self.child = Some(child);
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// SIGKILL, no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                return st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("flotilla did not exit within 15s of SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", self.kubeconfig())
            .arg("--cache-dir")
            .arg(self.dir.path().join("kubecache"))
            .args(args);
        c
    }

    /// Runs kubectl and returns what happened.
    pub fn kubectl(&self, args: &[&str]) -> Out {
        Out::from(self.kubectl_cmd(args).output().expect("run kubectl"))
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Out {
        let mut child = self.kubectl_cmd(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn kubectl");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        Out::from(child.wait_with_output().expect("kubectl"))
    }

    /// Runs kubectl, which must succeed; returns stdout.
    pub fn k(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(o.ok, "kubectl {} failed:\nstdout: {}\nstderr: {}\nserver log tail:\n{}", args.join(" "), o.stdout, o.stderr, tail(&self.log()));
        o.stdout
    }

    /// Applies a manifest from a string; must succeed.
    pub fn apply(&self, args: &[&str], manifest: &str) -> String {
        let mut all = vec!["apply", "-f", "-"];
        all.extend_from_slice(args);
        let o = self.kubectl_stdin(&all, manifest);
        assert!(o.ok, "kubectl {} failed:\nstdout: {}\nstderr: {}", all.join(" "), o.stdout, o.stderr);
        o.stdout
    }

    /// Runs the flotilla CLI against this data dir.
    pub fn flotilla(&self, args: &[&str]) -> Out {
        let mut all = vec!["--data-dir", self.dir.path().to_str().unwrap()];
        all.extend_from_slice(args);
        Out::from(Command::new(bin()).args(&all).output().expect("run flotilla"))
    }

    /// Starts a long-running kubectl (e.g. `get -w`), output captured to a file.
    pub fn kubectl_background(&self, args: &[&str], out: &Path) -> Child {
        let f = std::fs::File::create(out).expect("out file");
        self.kubectl_cmd(args).stdout(f.try_clone().unwrap()).stderr(f).spawn().expect("spawn kubectl")
    }

    /// GET through curl-free raw HTTP via `kubectl get --raw`.
    pub fn raw(&self, path: &str) -> Out {
        self.kubectl(&["get", "--raw", path])
    }
}

impl Drop for Flotilla {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Polls `check` until it returns Ok or `timeout` passes; panics with the last
/// observation, so a failure says what was seen instead of just "timed out".
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
