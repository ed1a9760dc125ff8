//! Where the logs go.
//!
//! Every command logs to stderr, except `flotilla up` without `-v`. Its terminal is for
//! the person who ran it: the logs of the control plane, the scheduler and the syncers
//! go to `<data-dir>/logs/flotilla.log`, beside the simulated clusters' own logs, and
//! the terminal shows `up`'s progress lines and the warnings and errors, each once
//! ([`Terminal`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::cli::{Cli, Command, LogFormat};

/// Sets up `tracing` from the command, -v, RUST_LOG and --log-format. Returns the log
/// file when the logs go to one.
pub fn init(cli: &Cli) -> anyhow::Result<Option<PathBuf>> {
    let default = match cli.verbose {
        0 => "info",
        1 => "info,controlplane=debug,flotilla=debug",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if !(matches!(cli.command, Command::Up(_)) && cli.verbose == 0) {
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        match cli.log_format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().flatten_event(true).init(),
        }
        return Ok(None);
    }
    let path = cli.data_dir.join("logs").join("flotilla.log");
    let file = open(&path)?;
    let writer = || file.try_clone().map(Mutex::new);
    let logs = tracing_subscriber::registry().with(filter).with(Terminal::default());
    match cli.log_format {
        LogFormat::Text => logs.with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(writer()?)).init(),
        LogFormat::Json => logs.with(tracing_subscriber::fmt::layer().json().flatten_event(true).with_writer(writer()?)).init(),
    }
    Ok(Some(path))
}

/// Opens the log file for appending. The data dir holds every Secret, so what is created
/// here is private (0700 and 0600), as the control plane makes the rest of it.
fn open(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).with_context(|| format!("opening {}", path.display()))
}

/// How long a warning must have stayed away to be shown again. A condition that
/// persists (a cluster that stays down, its syncer retrying every heartbeat) is shown
/// once; the same one after a minute of quiet is news.
const QUIET: Duration = Duration::from_secs(60);

/// Warnings remembered at most, so a long run with many distinct ones stays small.
const REMEMBERED: usize = 1024;

/// The terminal's share of the logs: each warning and error of Flotilla's own crates as
/// one line, `warning: what (where; details)`, and not again while it repeats.
/// - Only Flotilla's own: they are written for the person who runs it. A library's
///   (kube's, hyper's) come with one of ours that says what failed (a watch that fails
///   logs kube's error, then the syncer's warning), and go only to the log file.
/// - A repeat is the same call site in the same component: the same outermost span
///   with the same fields, such as the syncer of cluster `west`. A cluster that goes
///   away makes each of its syncer's watches fail and retry; the terminal says so once.
#[derive(Default)]
pub struct Terminal {
    shown: Repeats<(Identifier, String)>,
}

/// A span's fields as text, kept in the span for the events inside it.
struct SpanFields(String);

/// When each warning was last seen.
struct Repeats<K>(Mutex<HashMap<K, Instant>>);

impl<K> Default for Repeats<K> {
    fn default() -> Self {
        Repeats(Mutex::new(HashMap::new()))
    }
}

impl<K: std::hash::Hash + Eq> Repeats<K> {
    /// Whether the warning `key`, seen at `now`, is news: not seen in the [`QUIET`]
    /// before. Remembers it.
    fn news(&self, key: K, now: Instant) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= REMEMBERED {
            seen.retain(|_, at| now.saturating_duration_since(*at) < QUIET);
        }
        seen.insert(key, now).is_none_or(|at| now.saturating_duration_since(at) >= QUIET)
    }
}

impl<S> Layer<S> for Terminal
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.text));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut ext = span.extensions_mut();
        match ext.get_mut::<SpanFields>() {
            Some(SpanFields(text)) => join(text, &fields.text),
            None => ext.insert(SpanFields(fields.text)),
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        // Levels compare by verbosity: INFO, DEBUG and TRACE are greater than WARN.
        if *meta.level() > Level::WARN || !ours(meta.target()) || STOPPING.load(Ordering::Relaxed) {
            return;
        }
        // The fields of every span around the event, for the line; those of the
        // outermost one (a cluster's syncer, its heartbeat, the scheduler) for the key.
        let (mut scope, mut outermost) = (String::new(), None);
        for span in ctx.event_scope(event).into_iter().flat_map(|s| s.from_root()) {
            if let Some(SpanFields(text)) = span.extensions().get::<SpanFields>() {
                outermost.get_or_insert_with(|| format!("{}{{{text}}}", span.name()));
                join(&mut scope, text);
            }
        }
        if !self.shown.news((meta.callsite(), outermost.unwrap_or_default()), Instant::now()) {
            return;
        }
        let level = *meta.level();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let _ = writeln!(std::io::stderr().lock(), "{}", line(level, &fields.message, &scope, &fields.text));
    }
}

/// Set once the process is stopping: see [`stopping`].
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Says that the process is stopping: from now on the terminal shows no more warnings,
/// and the log file has them all. The controllers are stopped before the clusters and
/// the server, but their tasks end a moment after they are told to, and what they log
/// in that moment (a watch of a cluster that has just stopped) is about the stop itself.
/// An error that stops the process is returned and printed anyway.
pub fn stopping() {
    STOPPING.store(true, Ordering::Relaxed);
}

/// The crates whose warnings and errors the terminal shows: Flotilla's.
const OURS: [&str; 10] = [
    "flotilla",
    "controlplane",
    "scheduler",
    "syncer",
    "workspace_controllers",
    "runtime",
    "test_clusters",
    "placement_api",
    "storage",
    "apimachinery",
];

/// Whether an event's target (its module path, unless it names another) is one of
/// Flotilla's crates.
fn ours(target: &str) -> bool {
    OURS.contains(&target.split("::").next().unwrap_or(target))
}

/// One warning or error as the terminal shows it.
fn line(level: Level, message: &str, scope: &str, details: &str) -> String {
    let kind = if level == Level::ERROR { "error" } else { "warning" };
    let mut context = scope.to_string();
    if !details.is_empty() {
        if !context.is_empty() {
            context.push_str("; ");
        }
        context.push_str(details);
    }
    if context.is_empty() {
        format!("{kind}: {message}")
    } else {
        format!("{kind}: {message} ({context})")
    }
}

/// Appends `more` to `text`, a space between.
fn join(text: &mut String, more: &str) {
    if more.is_empty() {
        return;
    }
    if !text.is_empty() {
        text.push(' ');
    }
    text.push_str(more);
}

/// The message of an event and its other fields as `key=value`.
#[derive(Default)]
struct Fields {
    message: String,
    text: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            let sep = if self.text.is_empty() { "" } else { " " };
            let _ = write!(self.text, "{sep}{}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            let sep = if self.text.is_empty() { "" } else { " " };
            let _ = write!(self.text, "{sep}{}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every crate of the workspace is one of ours (the benchmark harness aside): a
    /// crate added later must not lose its warnings from `up`'s terminal.
    #[test]
    fn every_workspace_crate_is_ours() {
        let manifest = include_str!("../Cargo.toml");
        let members = manifest.lines().find(|l| l.starts_with("members")).expect("a members line");
        for member in members.split('"').skip(1).step_by(2).filter(|m| !m.starts_with("hack/")) {
            assert!(ours(&member.replace('-', "_")), "crate {member} is missing from OURS");
        }
    }

    #[test]
    fn a_warning_names_where_it_happened_and_its_details() {
        assert_eq!(
            line(Level::WARN, "the cluster does not answer", "sync_target=west", "error=connection refused"),
            "warning: the cluster does not answer (sync_target=west; error=connection refused)"
        );
        assert_eq!(line(Level::ERROR, "stopping", "", ""), "error: stopping");
        assert_eq!(line(Level::WARN, "retrying", "", "error=x"), "warning: retrying (error=x)");
    }

    #[test]
    fn only_flotillas_own_crates_speak_to_the_terminal() {
        assert!(ours("syncer::heartbeat") && ours("scheduler") && ours("flotilla::cmd::up"));
        assert!(!ours("kube_client::client::builder") && !ours("hyper_util") && !ours("syncers"));
    }

    #[test]
    fn a_repeated_warning_is_shown_again_only_after_a_quiet_minute() {
        let repeats = Repeats::default();
        let at = |s| Instant::now() + Duration::from_secs(s);
        assert!(repeats.news(("heartbeat", "sync_target=west"), at(0)));
        assert!(!repeats.news(("heartbeat", "sync_target=west"), at(2)), "a repeat");
        assert!(repeats.news(("heartbeat", "sync_target=east"), at(3)), "another cluster");
        assert!(repeats.news(("sync", "sync_target=west"), at(3)), "another call site");
        // Still repeating every few seconds: the same episode, however long it lasts.
        assert!(!repeats.news(("heartbeat", "sync_target=west"), at(50)));
        assert!(!repeats.news(("heartbeat", "sync_target=west"), at(100)));
        assert!(repeats.news(("heartbeat", "sync_target=west"), at(160)), "after a quiet minute");
    }
}
