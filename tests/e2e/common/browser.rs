//! A headless Chromium for the dashboard's tests, driven through Playwright
//! (`tests/browser/driver.mjs`, one JSON command and answer per line).
//!
//! It needs Node.js, `npm ci` in `tests/browser` (hack/browser.sh) and Debian's
//! `chromium`. Without them a test skips and says so, unless FLOTILLA_REQUIRE_BROWSER is
//! set, as CI sets it. The benchmark harness uses this file too (hack/bench/src/dashboard.rs).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

/// How long one command may take (a page load, a screenshot).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<String>,
    next: u64,
    log: PathBuf,
}

fn chromium() -> PathBuf {
    std::env::var_os("FLOTILLA_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// `tests/browser` of the repository: found from the crate being built, which is the
/// repository's root for the tests and `hack/bench` for the benchmark harness.
fn browser_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().map(|d| d.join("tests/browser")).find(|d| d.join("driver.mjs").exists()).unwrap_or_else(|| here.join("tests/browser"))
}

/// What is missing to run a browser, if anything.
fn missing() -> Option<String> {
    if Command::new("node").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        return Some("node is not on PATH".into());
    }
    if !browser_dir().join("node_modules/playwright-core/package.json").exists() {
        return Some("tests/browser/node_modules lacks playwright-core: run hack/browser.sh".into());
    }
    if !chromium().exists() {
        return Some(format!("{} is missing: install Debian's chromium (hack/browser.sh does)", chromium().display()));
    }
    None
}

impl Browser {
    /// Starts Chromium, or `None` when this machine cannot (the test then skips).
    pub fn launch(log: &Path) -> Option<Self> {
        if let Some(why) = missing() {
            if std::env::var_os("FLOTILLA_REQUIRE_BROWSER").is_some() {
                panic!("FLOTILLA_REQUIRE_BROWSER is set, but {why}");
            }
            eprintln!("skipping: {why}");
            return None;
        }
        let stderr = std::fs::File::create(log).expect("create the browser's log");
        let mut child = Command::new("node")
            .arg(browser_dir().join("driver.mjs"))
            .env("FLOTILLA_CHROMIUM", chromium())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start node tests/browser/driver.mjs");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Some(Self { child, stdin, answers, next: 0, log: log.to_path_buf() })
    }

    /// Runs one command; `Err` carries the driver's error (a selector that never
    /// matched, a page that did not load).
    pub fn call(&mut self, op: &str, args: Value) -> Result<Value, String> {
        self.next += 1;
        let mut cmd = args;
        cmd["op"] = json!(op);
        cmd["id"] = json!(self.next);
        writeln!(self.stdin, "{cmd}").map_err(|e| format!("writing to the driver: {e}; its log: {}", self.log_text()))?;
        loop {
            let line = self
                .answers
                .recv_timeout(COMMAND_TIMEOUT)
                .map_err(|e| format!("no answer to {op} from the driver ({e}); its log: {}", self.log_text()))?;
            let answer: Value = serde_json::from_str(&line).map_err(|e| format!("driver said {line:?}: {e}"))?;
            if answer["id"] != json!(self.next) {
                continue;
            }
            return match answer["ok"].as_bool() {
                Some(true) => Ok(answer["value"].clone()),
                _ => Err(answer["error"].as_str().unwrap_or("?").to_string()),
            };
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn must(&mut self, op: &str, args: Value) -> Value {
        let what = format!("{op} {args}");
        self.call(op, args).unwrap_or_else(|e| panic!("browser: {what}: {e}"))
    }

    pub fn goto(&mut self, url: &str) {
        self.must("goto", json!({ "url": url }));
    }

    pub fn fill(&mut self, selector: &str, value: &str) {
        self.must("fill", json!({ "selector": selector, "value": value }));
    }

    pub fn click(&mut self, selector: &str) {
        self.must("click", json!({ "selector": selector }));
    }

    /// The text of the first element `selector` matches, if one does.
    pub fn text(&mut self, selector: &str) -> Option<String> {
        self.must("text", json!({ "selector": selector })).as_str().map(str::to_string)
    }

    /// The texts of every element `selector` matches.
    pub fn texts(&mut self, selector: &str) -> Vec<String> {
        let v = self.must("texts", json!({ "selector": selector }));
        v.as_array().into_iter().flatten().filter_map(|t| t.as_str().map(str::to_string)).collect()
    }

    pub fn attr(&mut self, selector: &str, name: &str) -> Option<String> {
        self.must("attr", json!({ "selector": selector, "name": name })).as_str().map(str::to_string)
    }

    pub fn count(&mut self, selector: &str) -> usize {
        self.must("count", json!({ "selector": selector })).as_u64().unwrap_or_default() as usize
    }

    pub fn visible(&mut self, selector: &str) -> bool {
        self.must("visible", json!({ "selector": selector })).as_bool().unwrap_or_default()
    }

    pub fn eval(&mut self, expression: &str) -> Value {
        self.must("eval", json!({ "expression": expression }))
    }

    pub fn screenshot(&mut self, path: &Path, full_page: bool) {
        self.must("screenshot", json!({ "path": path, "fullPage": full_page }));
    }

    /// axe-core's WCAG 2 A and AA violations on the page as it is now.
    pub fn accessibility_violations(&mut self) -> Vec<serde_json::Value> {
        self.must("axe", json!({})).as_array().cloned().unwrap_or_default()
    }

    /// Collects the page's garbage, so that a heap figure counts what it keeps.
    pub fn gc(&mut self) {
        self.must("gc", json!({}));
    }

    /// The page's errors since the last call: uncaught exceptions, console errors,
    /// and what the Content-Security-Policy refused.
    pub fn errors(&mut self) -> Vec<String> {
        let v = self.must("errors", json!({}));
        v.as_array().into_iter().flatten().filter_map(|t| t.as_str().map(str::to_string)).collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("close", json!({}));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
