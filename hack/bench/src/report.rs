//! What a benchmark run reports: one row per figure per run, then, across the runs,
//! each figure's median and spread beside its floor and its target; the machine and
//! the method; the peers' published figures; and the plots. It prints a table, and
//! writes `results.json`, `report.md` and the SVG plots to the output directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::plot;

/// Which way a figure improves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Better {
    Lower,
    Higher,
}

/// A figure's goal, from the issue that asked for it.
#[derive(Clone, Debug)]
pub struct Target {
    pub limit: f64,
    /// As the issue states it, for example "≤ 10 s".
    pub text: String,
}

/// What a figure is compared with, measured in the same run and in the same unit.
#[derive(Clone, Debug)]
pub struct Floor {
    pub label: String,
    pub value: f64,
}

/// One figure of one run.
#[derive(Clone, Debug)]
pub struct Row {
    /// Stable across runs: the rows of different runs with the same key are one figure.
    pub key: String,
    pub label: String,
    pub unit: &'static str,
    pub value: f64,
    pub better: Better,
    /// Secondary figures of the same run, already formatted.
    pub detail: String,
    pub floor: Option<Floor>,
    pub target: Option<Target>,
}

impl Row {
    pub fn new(key: impl Into<String>, label: impl Into<String>, value: f64, unit: &'static str, better: Better) -> Self {
        Self { key: key.into(), label: label.into(), unit, value, better, detail: String::new(), floor: None, target: None }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub fn floor(mut self, label: impl Into<String>, value: f64) -> Self {
        self.floor = Some(Floor { label: label.into(), value });
        self
    }

    pub fn target(mut self, limit: f64, text: impl Into<String>) -> Self {
        self.target = Some(Target { limit, text: text.into() });
        self
    }

    fn meets(&self, value: f64) -> Option<bool> {
        let t = self.target.as_ref()?;
        Some(match self.better {
            Better::Lower => value <= t.limit,
            Better::Higher => value >= t.limit,
        })
    }
}

/// One failover run's timeline, in seconds from the kill.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// For example "beat 2 s / grace 8 s".
    pub setting: String,
    /// File-name safe form of the setting, for example "2s-8s".
    pub slug: String,
    pub detected: f64,
    pub grace: f64,
    pub target: Option<f64>,
    pub moved: Vec<f64>,
    pub available: Vec<f64>,
    /// What `available` counts, for example "Available elsewhere".
    pub available_label: &'static str,
}

impl Timeline {
    fn all_available(&self) -> f64 {
        self.available.iter().copied().fold(0.0, f64::max)
    }
}

/// The machine and the method, printed before the results and kept with them.
#[derive(Clone, Debug)]
pub struct Meta {
    pub date: String,
    pub commit: String,
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub transparent_hugepages: String,
    pub mode: &'static str,
    pub runs: usize,
}

impl Meta {
    pub fn read(quick: bool, runs: usize) -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu =
            cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string());
        let memory_gib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        // The selected mode is the bracketed one: "always [madvise] never".
        let thp = read("/sys/kernel/mm/transparent_hugepage/enabled");
        let thp = thp.split_whitespace().find(|w| w.starts_with('[')).map(|w| w.trim_matches(['[', ']']).to_string());
        Self {
            date: jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string(),
            commit: git_commit(),
            cpu: cpu.unwrap_or_else(|| "unknown CPU".into()),
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            memory_gib,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            transparent_hugepages: thp.unwrap_or_else(|| "unknown".into()),
            mode: if quick { "quick" } else { "full" },
            runs,
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{} · commit {} · {} cores ({}), {:.1} GiB, Linux {}, transparent huge pages {} · {} mode, {} per scenario",
            self.date,
            self.commit,
            self.cores,
            self.cpu,
            self.memory_gib,
            self.kernel,
            self.transparent_hugepages,
            self.mode,
            runs(self.runs)
        )
    }

    fn to_json(&self) -> Value {
        json!({"scenario": "meta", "date": self.date, "commit": self.commit, "cpu": self.cpu, "cores": self.cores,
               "memory_gib": self.memory_gib, "kernel": self.kernel, "transparent_hugepages": self.transparent_hugepages,
               "mode": self.mode, "runs": self.runs})
    }
}

/// The checked-out commit, with `-dirty` when the tree has changes; "unknown" outside git.
fn git_commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(sha) if git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()) => format!("{sha}-dirty"),
        Some(sha) => sha,
        None => "unknown".into(),
    }
}

/// Everything a run of the harness reports.
pub struct Report {
    pub meta: Meta,
    /// (run, row), in the order measured.
    rows: Vec<(usize, Row)>,
    json: Vec<Value>,
    /// Latency samples by series name, ms, pooled over the runs.
    latencies: BTreeMap<String, Vec<f64>>,
    /// Floors drawn on the latency plot: label, ms.
    latency_floors: BTreeMap<String, f64>,
    timelines: Vec<Timeline>,
    /// Scenario groups that did not complete, with their error.
    failures: Vec<String>,
    /// The run being measured, from 1.
    pub run: usize,
    /// Every calibration ([`calibrate`]): (run, scenario group, ms). The last is the
    /// one of the scenario being measured.
    calibrations: Vec<(usize, String, f64)>,
}

/// How long a fixed single-threaded workload of JSON decoding and encoding (the kind
/// of work that fills the measured processes) takes on this machine now, in ms. Timed
/// before each scenario group starts its processes, so that a run in one of the
/// machine's slow spells, when the same work costs more CPU, can be told from a run of
/// slower code.
pub fn calibrate() -> f64 {
    let doc = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "calibration", "namespace": "default", "labels": {"app": "calibration", "tier": "web"},
                     "annotations": {"note": "x".repeat(200)}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "calibration"}},
                 "template": {"metadata": {"labels": {"app": "calibration"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.example/app:1.2.3",
                                                       "env": (0..20).map(|i| json!({"name": format!("VAR_{i}"), "value": i.to_string()})).collect::<Vec<_>>(),
                                                       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}},
        "status": {"replicas": 3, "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}
    })
    .to_string();
    let start = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..CALIBRATION_ROUNDS {
        let v: Value = serde_json::from_str(std::hint::black_box(&doc)).unwrap_or_default();
        bytes += std::hint::black_box(serde_json::to_string(&v).unwrap_or_default()).len();
    }
    std::hint::black_box(bytes);
    start.elapsed().as_secs_f64() * 1000.0
}

/// 0.2 to 0.4 s on the benchmark machine, by its speed at the moment.
const CALIBRATION_ROUNDS: usize = 10_000;

/// A calibration this much slower than the fastest of the report marks a slow spell.
const SLOW_SPELL: f64 = 1.2;

/// A figure across its runs.
struct Aggregate<'a> {
    first: &'a Row,
    rows: Vec<&'a Row>,
    values: Vec<f64>,
    floors: Vec<f64>,
    ratios: Vec<f64>,
}

impl<'a> Aggregate<'a> {
    fn median(&self) -> f64 {
        median(&self.values)
    }
    /// The run whose figure is the median (the nearest, for an even number of runs),
    /// so that the detail printed beside the median belongs to it.
    fn median_row(&self) -> &'a Row {
        let m = self.median();
        self.rows.iter().copied().min_by(|a, b| (a.value - m).abs().total_cmp(&(b.value - m).abs())).unwrap_or(self.first)
    }
    fn spread(&self) -> (f64, f64) {
        let min = self.values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }
    /// "met", "missed", with how many runs met it when there were several.
    fn verdict(&self) -> Option<String> {
        let met = self.first.meets(self.median())?;
        let runs_met = self.values.iter().filter(|v| self.first.meets(**v) == Some(true)).count();
        let word = if met { "**met**" } else { "**missed**" };
        Some(if self.values.len() > 1 { format!("{word} ({runs_met}/{} runs)", self.values.len()) } else { word.to_string() })
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A number with as many digits as its size deserves, and thousands separated.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let a = x.abs();
    let s = if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    match s.split_once('.') {
        Some((int, frac)) => format!("{}.{frac}", grouped(int)),
        None => grouped(&s),
    }
}

/// An integer's digits with a comma every three, its sign kept.
pub fn grouped(int: &str) -> String {
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut out = String::from(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "1 run", "3 runs".
fn runs(n: usize) -> String {
    if n == 1 {
        "1 run".into()
    } else {
        format!("{n} runs")
    }
}

/// A count, with thousands separated.
pub fn int(n: usize) -> String {
    grouped(&n.to_string())
}

fn with_unit(x: f64, unit: &str) -> String {
    match unit {
        "/s" => format!("{}/s", num(x)),
        "" => num(x),
        u => format!("{} {u}", num(x)),
    }
}

impl Report {
    pub fn new(meta: Meta) -> Self {
        let json = vec![meta.to_json()];
        Self {
            meta,
            rows: vec![],
            json,
            latencies: BTreeMap::new(),
            latency_floors: BTreeMap::new(),
            timelines: vec![],
            failures: vec![],
            run: 1,
            calibrations: vec![],
        }
    }

    /// Records one figure of the current run, with its JSON record (printed at once).
    pub fn add(&mut self, row: Row, mut json: Value) {
        if let Some(o) = json.as_object_mut() {
            o.insert("run".into(), json!(self.run));
            if let Some(&(.., ms)) = self.calibrations.last() {
                o.insert("calibration_ms".into(), json!(ms));
            }
        }
        println!("{}", serde_json::to_string(&json).unwrap_or_default());
        self.rows.push((self.run, row));
        self.json.push(json);
    }

    /// Times [`calibrate`] before scenario group `group` starts; its figures carry it.
    pub async fn calibrate(&mut self, group: &str) {
        let ms = tokio::task::spawn_blocking(calibrate).await.unwrap_or(f64::NAN);
        println!("# {group}, run {}: calibration {ms:.0} ms", self.run);
        self.calibrated(group, ms);
    }

    /// Keeps a calibration of `ms` before `group` for its figures and the report.
    fn calibrated(&mut self, group: &str, ms: f64) {
        self.calibrations.push((self.run, group.to_string(), ms));
    }

    /// Records how a scenario group ended; a failure is printed and kept for the report.
    pub fn outcome(&mut self, group: &str, result: anyhow::Result<()>) {
        if let Err(e) = result {
            let line = format!("{group}, run {}: {e:#}", self.run);
            eprintln!("# FAILED: {line}");
            self.json.push(json!({"scenario": "failed", "group": group, "run": self.run, "error": format!("{e:#}")}));
            self.failures.push(line);
        }
    }

    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    /// Records a figure whose numbers are in an earlier JSON record of the same run.
    pub fn add_row(&mut self, row: Row) {
        self.rows.push((self.run, row));
    }

    /// Keeps latency samples (ms) for the distribution plot.
    pub fn latencies(&mut self, series: &str, samples: &[f64]) {
        self.latencies.entry(series.to_string()).or_default().extend_from_slice(samples);
    }

    /// A floor to draw on the latency plot (ms); the last run's value is kept.
    pub fn latency_floor(&mut self, label: &str, ms: f64) {
        self.latency_floors.insert(label.to_string(), ms);
    }

    pub fn timeline(&mut self, t: Timeline) {
        self.timelines.push(t);
    }

    fn aggregates(&self) -> Vec<Aggregate<'_>> {
        let mut order: Vec<&str> = Vec::new();
        let mut by_key: BTreeMap<&str, Aggregate<'_>> = BTreeMap::new();
        for (_, row) in &self.rows {
            let a = by_key.entry(&row.key).or_insert_with(|| {
                order.push(&row.key);
                Aggregate { first: row, rows: vec![], values: vec![], floors: vec![], ratios: vec![] }
            });
            a.rows.push(row);
            a.values.push(row.value);
            if let Some(f) = &row.floor {
                a.floors.push(f.value);
                if f.value > 0.0 {
                    a.ratios.push(row.value / f.value);
                }
            }
        }
        order.into_iter().filter_map(|k| by_key.remove(k)).collect()
    }

    /// The table printed at the end of a run.
    pub fn print_table(&self) {
        println!();
        println!("# {}", self.meta.line());
        println!("{:<58} {:>14} {:>22} {:<36} {:>8}  TARGET", "SCENARIO", "MEDIAN", "SPREAD (min-max)", "FLOOR (same run)", "RATIO");
        for a in self.aggregates() {
            let r = a.first;
            let (min, max) = a.spread();
            let spread = if a.values.len() > 1 { format!("{}-{}", num(min), num(max)) } else { "1 run".into() };
            let floor = r.floor.as_ref().map_or("-".into(), |f| format!("{} {}", f.label, with_unit(median(&a.floors), r.unit)));
            let ratio = if a.ratios.is_empty() { "-".into() } else { format!("{}x", num(median(&a.ratios))) };
            let target = match (&r.target, a.verdict()) {
                (Some(t), Some(v)) => format!("{} {}", t.text, v.replace("**", "")),
                _ => "-".into(),
            };
            println!("{:<58} {:>14} {:>22} {:<36} {:>8}  {target}", r.label, with_unit(a.median(), r.unit), spread, floor, ratio);
        }
        for f in &self.failures {
            println!("FAILED: {f}");
        }
    }

    /// Writes `results.json`, the SVG plots and `report.md` (whose images link to
    /// `image_prefix` + file name) into `dir`; returns the report's Markdown.
    pub fn write(&self, dir: &Path, image_prefix: &str) -> anyhow::Result<String> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&self.json)?)?;
        let mut images = Vec::new();
        for (file, title, svg) in self.plots() {
            std::fs::write(dir.join(&file), svg)?;
            images.push((file, title));
        }
        let md = self.markdown(&images, image_prefix);
        std::fs::write(dir.join("report.md"), &md)?;
        Ok(md)
    }

    /// (file name, title, SVG): the latency distributions, and the median run's
    /// failover timeline for each heartbeat setting.
    fn plots(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        if !self.latencies.is_empty() {
            let runs = if self.meta.runs == 1 { "one run".to_string() } else { format!("{} runs pooled", self.meta.runs) };
            let title = format!("Latency distributions ({runs})");
            let chart = plot::Chart {
                title: title.clone(),
                x_label: "latency, ms (log scale)".into(),
                y_label: "fraction of requests or objects".into(),
                log_x: true,
                series: self.latencies.iter().map(|(name, xs)| plot::Series { name: name.clone(), points: plot::cdf(xs) }).collect(),
                markers: self.latency_floors.iter().map(|(label, x)| plot::Marker { x: *x, label: label.clone() }).collect(),
            };
            out.push(("latency.svg".to_string(), title, plot::render(&chart)));
        }
        // One plot per setting, in the order first run: the runs interleave settings.
        let mut slugs: Vec<&str> = Vec::new();
        for t in &self.timelines {
            if !slugs.contains(&t.slug.as_str()) {
                slugs.push(&t.slug);
            }
        }
        for slug in slugs {
            let mut runs: Vec<&Timeline> = self.timelines.iter().filter(|t| t.slug == slug).collect();
            runs.sort_by(|a, b| a.all_available().total_cmp(&b.all_available()));
            let t = runs[runs.len() / 2];
            let which = if runs.len() == 1 { "one run".to_string() } else { format!("the median of {} runs", runs.len()) };
            let title = format!("Failover of {} Deployments, {} ({which})", int(t.moved.len()), t.setting);
            let mut markers = vec![
                plot::Marker { x: t.detected, label: format!("loss detected {:.1} s", t.detected) },
                plot::Marker { x: t.grace, label: format!("grace {:.0} s", t.grace) },
            ];
            if let Some(target) = t.target {
                markers.push(plot::Marker { x: target, label: format!("target {target:.0} s") });
            }
            let chart = plot::Chart {
                title: title.clone(),
                x_label: "seconds since the cluster was killed".into(),
                y_label: "Deployments".into(),
                log_x: false,
                series: vec![
                    plot::Series { name: "reassigned".into(), points: plot::cumulative(&t.moved) },
                    plot::Series { name: t.available_label.into(), points: plot::cumulative(&t.available) },
                ],
                markers,
            };
            out.push((format!("failover-{slug}.svg"), title, plot::render(&chart)));
        }
        out
    }

    fn markdown(&self, images: &[(String, String)], image_prefix: &str) -> String {
        let m = &self.meta;
        let mut s = String::new();
        let _ = writeln!(s, "## Results, {} (commit `{}`)\n", m.date, m.commit);
        let _ = writeln!(
            s,
            "- **Machine:** {} cores ({}), {:.1} GiB, Linux {}, transparent huge pages `{}`. The load generator shares the cores with the processes it measures.",
            m.cores, m.cpu, m.memory_gib, m.kernel, m.transparent_hugepages
        );
        let _ = writeln!(
            s,
            "- **Runs:** {} mode, {} of each scenario, each on fresh processes and data dirs (the steady-state scenarios once); the table gives the median and the spread (min-max) across runs.",
            m.mode,
            runs(m.runs)
        );
        if !self.calibrations.is_empty() {
            let all: Vec<f64> = self.calibrations.iter().map(|c| c.2).collect();
            let fastest = all.iter().copied().fold(f64::INFINITY, f64::min);
            let slow: Vec<String> = self
                .calibrations
                .iter()
                .filter(|c| c.2 > SLOW_SPELL * fastest)
                .map(|c| format!("{} run {} ({:.0} ms)", c.1, c.0, c.2))
                .collect();
            let _ = writeln!(
                s,
                "- **Machine speed:** a fixed single-threaded JSON workload, timed before each scenario group (`calibration_ms` in the JSON records), took {:.0} ms at the median ({:.0} - {:.0}). {}",
                median(&all),
                fastest,
                all.iter().copied().fold(0.0, f64::max),
                if slow.is_empty() {
                    "No group started in a slow spell (over 1.2× the fastest).".to_string()
                } else {
                    format!("Started in a slow spell (over 1.2× the fastest): {}.", slow.join(", "))
                }
            );
        }
        let _ =
            writeln!(s, "- **Floors** are measured in the same run; the ratio is the figure over its floor, per run, then the median.\n");
        s.push_str("| scenario | median | spread | floor, same run | ratio | target |\n|---|---|---|---|---|---|\n");
        for a in self.aggregates() {
            let r = a.first;
            let (min, max) = a.spread();
            let spread = if a.values.len() > 1 { format!("{} - {}", num(min), num(max)) } else { "1 run".into() };
            let detail = &a.median_row().detail;
            let value =
                if detail.is_empty() { with_unit(a.median(), r.unit) } else { format!("{} ({detail})", with_unit(a.median(), r.unit)) };
            let floor = r.floor.as_ref().map_or("-".into(), |f| format!("{} {}", f.label, with_unit(median(&a.floors), r.unit)));
            let ratio = if a.ratios.is_empty() { "-".into() } else { format!("{}×", num(median(&a.ratios))) };
            let target = match (&r.target, a.verdict()) {
                (Some(t), Some(v)) => format!("{}: {v}", t.text),
                _ => "-".into(),
            };
            let _ = writeln!(s, "| {} | {value} | {spread} | {floor} | {ratio} | {target} |", r.label);
        }
        s.push_str("\nThe detail in brackets is that of the median run.\n\n");
        if !self.failures.is_empty() {
            s.push_str("**Did not complete:**\n\n");
            for f in &self.failures {
                let _ = writeln!(s, "- {f}");
            }
            s.push('\n');
        }
        s.push_str(&self.peers());
        for (file, title) in images {
            let _ = writeln!(s, "![{title}]({image_prefix}{file})\n");
        }
        s.push_str("<details><summary>The raw JSON of this run</summary>\n\n```json\n");
        for j in &self.json {
            let _ = writeln!(s, "{}", serde_json::to_string(j).unwrap_or_default());
        }
        s.push_str("```\n\n</details>\n");
        s
    }

    fn median_of(&self, key: &str) -> Option<f64> {
        let xs: Vec<f64> = self.rows.iter().filter(|(_, r)| r.key == key).map(|(_, r)| r.value).collect();
        (!xs.is_empty()).then(|| median(&xs))
    }

    /// Our figures beside the peers' published ones.
    fn peers(&self) -> String {
        let ours = |key: &str, unit: &str| self.median_of(key).map_or("not run".into(), |v| with_unit(v, unit));
        let detected = self
            .json
            .iter()
            .filter(|j| j["scenario"] == "scheduler_failover" && j["heartbeat_interval_s"] == 2 && j["grace_s"] == 8)
            .filter_map(|j| j["detected_s"].as_f64())
            .collect::<Vec<_>>();
        let detected = if detected.is_empty() { "not run".into() } else { format!("{} s", num(median(&detected))) };
        let mut s = String::from(
            "### Beside the peers' published figures\n\nThe peers were not re-run here: their control planes need Docker \
             or a Go toolchain, and our machines have neither. Their figures come from their own reports and documented \
             defaults, on their hardware, so compare orders of magnitude, not ratios.\n\n\
             | figure | Flotilla, this run (median) | peer, published | source |\n|---|---|---|---|\n",
        );
        let _ = writeln!(
            s,
            "| scheduling decision p99 | {} | Karmada `cluster_schedule` p99: 32 ms | [Test Report on Karmada's Support for 100 Large-Scale Clusters](https://karmada.io/blog/2022/10/26/test-report/) (2022) |",
            ours("scheduler_decision", "µs")
        );
        let _ = writeln!(
            s,
            "| apply to copy created on the cluster, p99 | {} (push) | Karmada `resource_distribution` p99: 1,298 ms push, 989 ms pull | the same Karmada report |",
            ours("syncer_apply_to_created", "ms")
        );
        let _ = writeln!(
            s,
            "| a lost cluster detected, defaults | {detected} (heartbeat 2 s, grace 8 s) | Karmada: NotReady after 40 s · kcp TMC: heartbeat every 20 s, unhealthy after 60 s (about 65 s) · OCM: lease 60 s × 5 = 300 s | Karmada's `cluster-monitor-grace-period` default, kcp TMC's and OCM's documented lease defaults; karmada-io/website `docs/userguide/failover/failover-analysis.md` |"
        );
        let _ = writeln!(
            s,
            "| a lost cluster's workloads Available elsewhere, defaults | {} | Karmada: not by default (failover is off; a NotReady cluster gets a `NoSchedule` taint only) · kcp TMC and OCM: rescheduled after detection | the same docs |\n",
            ours("scheduler_failover/2s-8s", "s")
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            date: "2026-11-24 10:00 UTC".into(),
            commit: "abc1234".into(),
            cpu: "test cpu".into(),
            cores: 2,
            memory_gib: 23.5,
            kernel: "6.1".into(),
            transparent_hugepages: "always".into(),
            mode: "quick",
            runs: 3,
        }
    }

    #[test]
    fn numbers_are_rounded_to_their_size_and_grouped() {
        assert_eq!(num(12_646.6), "12,647");
        assert_eq!(num(-1_234_567.0), "-1,234,567");
        assert_eq!(num(15.94), "15.9");
        assert_eq!(num(0.286), "0.29");
        assert_eq!(num(0.0123), "0.012");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(int(50), "50");
        assert_eq!(int(10_000), "10,000");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn runs_aggregate_to_median_spread_ratio_and_verdict() {
        let mut r = Report::new(meta());
        for (run, (v, floor)) in [(12.0, 8.0), (16.0, 8.0), (14.0, 7.0)].into_iter().enumerate() {
            r.run = run + 1;
            r.add(
                Row::new("failover", "kill to all Available", v, "s", Better::Lower)
                    .detail(format!("run {}", run + 1))
                    .floor("grace", floor)
                    .target(13.0, "≤ 13 s"),
                json!({"scenario": "scheduler_failover"}),
            );
        }
        let a = &r.aggregates()[0];
        assert_eq!(a.median(), 14.0);
        assert_eq!(a.median_row().detail, "run 3", "the detail shown is the median run's, not the first's");
        assert_eq!(a.spread(), (12.0, 16.0));
        assert_eq!(median(&a.ratios), 2.0);
        assert_eq!(a.verdict().as_deref(), Some("**missed** (1/3 runs)"));
        let md = r.markdown(&[], "");
        assert!(
            md.contains("| kill to all Available | 14.0 s (run 3) | 12.0 - 16.0 | grace 8.00 s | 2.00× | ≤ 13 s: **missed** (1/3 runs) |"),
            "{md}"
        );
        assert!(md.contains("\"run\":3"), "each JSON record says its run: {md}");
        assert!(md.contains("commit `abc1234`") && md.contains("2 cores (test cpu)"), "{md}");
    }

    #[test]
    fn higher_is_better_targets_and_peers() {
        let mut r = Report::new(meta());
        r.add(
            Row::new("api_creates", "creates", 12_000.0, "/s", Better::Higher).target(3_000.0, "≥ 3,000/s"),
            json!({"scenario": "api_creates"}),
        );
        r.add(Row::new("scheduler_decision", "decision p99", 450.0, "µs", Better::Lower), json!({"scenario": "scheduler_decision"}));
        r.outcome("scale", Err(anyhow::anyhow!("only 3/10 Deployments were Available")));
        let md = r.markdown(&[], "");
        assert_eq!(r.failures(), ["scale, run 1: only 3/10 Deployments were Available"]);
        assert!(md.contains("**Did not complete:**\n\n- scale, run 1: only 3/10"), "{md}");
        assert!(md.contains("| creates | 12,000/s | 1 run | - | - | ≥ 3,000/s: **met** |"), "{md}");
        assert!(md.contains("| scheduling decision p99 | 450 µs | Karmada"), "{md}");
        assert!(md.contains("| a lost cluster detected, defaults | not run"), "{md}");
    }

    #[test]
    fn the_machine_speed_goes_into_the_records_and_slow_spells_are_named() {
        let mut r = Report::new(meta());
        r.calibrated("sim", 250.0);
        r.add(Row::new("sim_create", "raw create", 0.5, "ms", Better::Lower), json!({"scenario": "sim_create"}));
        r.run = 2;
        r.calibrated("sim", 340.0);
        r.add(Row::new("sim_create", "raw create", 0.7, "ms", Better::Lower), json!({"scenario": "sim_create"}));
        assert_eq!(r.json[1]["calibration_ms"], 250.0);
        assert_eq!(r.json[2]["calibration_ms"], 340.0);
        let md = r.markdown(&[], "");
        assert!(
            md.contains("took 295 ms at the median (250 - 340). Started in a slow spell (over 1.2× the fastest): sim run 2 (340 ms)."),
            "{md}"
        );
        r.calibrations.pop();
        assert!(r.markdown(&[], "").contains("No group started in a slow spell"));
    }

    #[test]
    fn writes_results_plots_and_report() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Report::new(meta());
        r.latencies("API create", &[1.0, 2.0, 3.0]);
        r.latency_floor("healthz p99", 0.3);
        // Each run has both settings, as the harness runs them.
        for (run, end) in [(1, 15.0), (2, 13.0), (3, 14.0)] {
            r.run = run;
            r.timeline(Timeline {
                setting: "beat 2 s / grace 8 s".into(),
                slug: "2s-8s".into(),
                detected: 7.0,
                grace: 8.0,
                target: Some(13.0),
                moved: vec![7.0, 9.0],
                available: vec![10.0, end],
                available_label: "Available elsewhere",
            });
            r.timeline(Timeline {
                setting: "beat 1 s / grace 4 s".into(),
                slug: "1s-4s".into(),
                detected: 3.0,
                grace: 4.0,
                target: None,
                moved: vec![3.0, 5.0],
                available: vec![6.0, end - 4.0],
                available_label: "Available elsewhere",
            });
        }
        let md = r.write(dir.path(), "bench/").unwrap();
        assert!(md.contains("![Failover of 2 Deployments, beat 2 s / grace 8 s (the median of 3 runs)](bench/failover-2s-8s.svg)"), "{md}");
        for plot in ["failover-2s-8s.svg", "failover-1s-4s.svg"] {
            assert_eq!(md.matches(plot).count(), 1, "one plot per setting, not one per run: {md}");
        }
        assert!(md.contains("(bench/latency.svg)"), "{md}");
        let svg = std::fs::read_to_string(dir.path().join("failover-2s-8s.svg")).unwrap();
        assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{svg}");
        assert!(svg.contains("target 13 s"), "the median run's markers are drawn: {svg}");
        let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap()).unwrap();
        assert_eq!(json[0]["scenario"], "meta");
    }
}
