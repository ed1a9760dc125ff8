//! The docs cannot rot: every `console` block of the README and of the guides is run,
//! command by command, against a fresh `flotilla up`, and each command must do what
//! the page shows.
//!
//! How a page is read:
//! - A line `$ CMD` is a command; a trailing `\` continues it on the next line. The lines
//!   up to the next command are the output the page shows.
//! - `cargo run --release --` is the `flotilla` binary under test; `flotilla` and
//!   `kubectl` are found on PATH. Each page runs in its own directory (with `docs/` and
//!   `test-clusters/` linked in), with its own HOME and data dir, and no display.
//! - `... up` starts in the background on a free port and must print "ready".
//! - `export ...` lines change the environment of the commands after them.
//! - The README's test command is not run from inside the tests.
//! - A command must exit 0, unless the output shown starts with `error:` or
//!   `Error from server`, and then it must fail.
//! - The first and last lines shown must be among the lines printed, compared with
//!   every run of digits as one `#` and runs of spaces as one space (ports, ages,
//!   timings and column widths vary; the words and the shape may not).
//! - A command whose output does not match yet is tried again for up to 60 s, as a
//!   reader who types it a few seconds later would; `flotilla drill` runs once.
//!
//! Each page's test then checks, through kubectl, what a reader of the page would.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// How long a command may be retried until it shows what the page shows.
const SETTLE: Duration = Duration::from_secs(60);

/// One command of a page and the output the page shows for it.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    shown: Vec<String>,
}

/// The commands of the page's `console` blocks, in order.
fn steps(page: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_console = false;
    let mut continued = false;
    for (i, line) in page.lines().enumerate() {
        if line.starts_with("```") {
            in_console = !in_console && line.trim() == "```console";
            continued = false;
            continue;
        }
        if !in_console {
            continue;
        }
        if continued {
            let step = steps.last_mut().expect("a continued command");
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push(Step { line: i + 1, command: cmd.to_string(), shown: Vec::new() });
            continued = cmd.ends_with('\\');
        } else if let Some(step) = steps.last_mut() {
            step.shown.push(line.to_string());
        }
    }
    steps
}

/// Digits runs to `#`, space runs to one space, trimmed.
fn shape(line: &str) -> String {
    let mut out = String::new();
    let (mut digit, mut space) = (false, false);
    for c in line.trim().chars() {
        if c.is_ascii_digit() {
            if !digit {
                out.push('#');
            }
            (digit, space) = (true, false);
        } else if c.is_whitespace() {
            if !space {
                out.push(' ');
            }
            (digit, space) = (false, true);
        } else {
            out.push(c);
            (digit, space) = (false, false);
        }
    }
    out
}

/// Why the printed output does not match what the page shows, if it does not.
fn mismatch(shown: &[String], printed: &str) -> Option<String> {
    let shown: Vec<&String> = shown.iter().filter(|l| !l.trim().is_empty()).collect();
    let printed: Vec<String> = printed.lines().map(shape).collect();
    let ends = match shown.as_slice() {
        [] => vec![],
        [only] => vec![*only],
        [first, .., last] => vec![*first, *last],
    };
    ends.into_iter().find(|want| !printed.contains(&shape(want))).map(|want| format!("the page shows {want:?}, which was not printed"))
}

/// A page being run: its directory, environment and `flotilla up`.
struct Reader {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
    up: Option<Child>,
    up_log: PathBuf,
}

impl Reader {
    fn new() -> Reader {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for linked in ["docs", "test-clusters"] {
            std::os::unix::fs::symlink(root.join(linked), dir.path().join(linked)).unwrap();
        }
        // `flotilla` on PATH is the binary under test.
        let bin_dir = dir.path().join("bin");
        std::fs::create_dir(&bin_dir).unwrap();
        std::os::unix::fs::symlink(bin(), bin_dir.join("flotilla")).unwrap();
        // No display either: `flotilla dashboard` prints its link instead of opening it.
        let ours = |k: &str| k.starts_with("FLOTILLA_") || ["KUBECONFIG", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER"].contains(&k);
        let mut env: HashMap<String, String> = std::env::vars().filter(|(k, _)| !ours(k)).collect();
        env.insert("PATH".into(), format!("{}:{}", bin_dir.display(), env.get("PATH").cloned().unwrap_or_default()));
        env.insert("HOME".into(), dir.path().display().to_string());
        let up_log = dir.path().join("up.log");
        Reader { dir, env, up: None, up_log }
    }

    fn bash(&self, script: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg("-c").arg(script).current_dir(self.dir.path()).env_clear().envs(&self.env);
        c
    }

    fn up_tail(&self) -> String {
        tail(&std::fs::read_to_string(&self.up_log).unwrap_or_default())
    }

    /// Runs every step of `page` (a path from the repository root).
    fn run_page(&mut self, page: &str) {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
        let steps = steps(&text);
        assert!(!steps.is_empty(), "{page} has no console commands");
        for step in steps {
            let command = step.command.replace("cargo run --release --", "flotilla");
            let at = format!("{page}:{} `{}`", step.line, step.command);
            if command.starts_with("hack/test.sh") {
                continue;
            }
            if command.starts_with("export ") {
                let o = self.bash(&format!("{command} && env -0")).output().unwrap();
                assert!(o.status.success(), "{at}: {}", String::from_utf8_lossy(&o.stderr));
                self.env = String::from_utf8_lossy(&o.stdout)
                    .split('\0')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
            } else if command.starts_with("flotilla up") {
                self.start_up(&command, &step, &at);
            } else {
                self.run_step(&command, &step, &at);
            }
        }
    }

    fn start_up(&mut self, command: &str, step: &Step, at: &str) {
        assert!(self.up.is_none(), "{at}: a second `up` while one runs");
        let log = std::fs::File::create(&self.up_log).unwrap();
        let listen = if command.contains("--listen") { "" } else { " --listen 127.0.0.1:0" };
        let mut child = self.bash(&format!("exec {command}{listen}")).stdout(Stdio::piped()).stderr(log).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut printed = String::new();
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                printed.push_str(&line);
                printed.push('\n');
                if line == "ready" {
                    let _ = tx.send(printed.clone());
                }
            }
        });
        self.up = Some(child);
        let printed = rx.recv_timeout(SETTLE).unwrap_or_else(|_| panic!("{at}: no \"ready\" within {SETTLE:?}; log:\n{}", self.up_tail()));
        // The page shows the lines up to the "next:" block; what follows it is read later.
        if let Some(why) =
            mismatch(&step.shown[..step.shown.iter().position(|l| l == "ready").map_or(step.shown.len(), |i| i + 1)], &printed)
        {
            panic!("{at}: {why}; printed:\n{printed}");
        }
    }

    fn run_step(&mut self, command: &str, step: &Step, at: &str) {
        let expect_failure =
            step.shown.iter().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("error:") || l.starts_with("Error from server"));
        let once = command.starts_with("flotilla drill");
        let deadline = Instant::now() + SETTLE;
        loop {
            let o = self.bash(command).output().unwrap();
            let printed = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            let why = if o.status.success() == expect_failure {
                Some(format!("it exited with {}, the page expects {}", o.status, if expect_failure { "a failure" } else { "success" }))
            } else {
                mismatch(&step.shown, &printed)
            };
            match why {
                None => return,
                Some(why) if once || Instant::now() > deadline => {
                    panic!("{at}: {why}\nprinted:\n{printed}\nup's log:\n{}", self.up_tail())
                }
                Some(_) => std::thread::sleep(Duration::from_secs(1)),
            }
        }
    }

    /// kubectl as the page's reader runs it, and its stdout; it must succeed.
    fn kubectl(&self, args: &str) -> String {
        let o = self.bash(&format!("kubectl {args}")).output().unwrap();
        assert!(o.status.success(), "kubectl {args}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // SIGTERM, so that up stops its simulated clusters too.
        if let Some(mut up) = self.up.take() {
            signal(up.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(15);
            while up.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = up.kill();
        }
    }
}

#[test]
fn the_readme_tour_runs_as_written() {
    let mut r = Reader::new();
    r.run_page("README.md");
    // What the tour leaves, as its reader would check it: web was moved off the killed
    // cluster and is Available with all its replicas, west is back and Ready, and huge
    // still waits. (Once west is back, web may get its share there again.)
    let events = r.kubectl("describe deploy web");
    assert!(events.contains("Rescheduled") && events.contains("moved off west (NotReady)"), "{events}");
    let available =
        r.kubectl(r#"get deploy web -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}/{.status.availableReplicas}'"#);
    assert_eq!(available, "True/6");
    let west = r.kubectl(r#"--context root get st west -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'"#);
    assert_eq!(west, "True");
    assert!(r.kubectl("describe deploy huge").contains("FailedScheduling"));
    // web's Service moved with it: the addresses are those of its clusters now, and
    // none is west's (its pool is 172.18.254.0/24 in the demo fleet).
    let clusters = r.kubectl("get wp web -o 'jsonpath={.spec.clusters[*].name}'");
    assert!(!clusters.contains("west"), "{clusters}");
    let addresses = wait_until(
        "web's Service addresses, one per cluster",
        SETTLE,
        || r.kubectl("get svc web -o 'jsonpath={.status.loadBalancer.ingress[*].ip}'"),
        |a| a.split(' ').count() == clusters.split(' ').count(),
    );
    assert!(!addresses.contains("172.18.254."), "{addresses}");
}

#[test]
fn the_failure_drills_page_runs_as_written() {
    let mut r = Reader::new();
    r.run_page("docs/failure-drills.md");
}

#[test]
fn the_user_guide_runs_as_written() {
    let mut r = Reader::new();
    r.run_page("docs/user-guide.md");
}

#[test]
fn a_page_is_read_into_commands_and_shown_output() {
    let page =
        "text\n```console\n$ kubectl get st \\\n  -o wide\nNAME   READY\neast   True\n$ flotilla status\n```\n```sh\n$ not run\n```\n";
    let s = steps(page);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(s[0].command, "kubectl get st \\\n  -o wide");
    assert_eq!(s[0].shown, ["NAME   READY", "east   True"]);
    assert!(s[1].shown.is_empty());
    assert_eq!(shape("east      True    12s   7750m/8"), "east True #s #m/#");
    assert_eq!(mismatch(&s[0].shown, "NAME READY\nwest False\neast  True\n"), None);
    assert!(mismatch(&s[0].shown, "NAME READY\nwest True\n").is_some());
}
