//! What a simulated container writes to its log, as a pure function of its pod's status
//! and the time: nothing is stored, and the same pod at the same time always has the
//! same log.
//!
//! An instance of a container (one run, from its `startedAt`) writes:
//! - when it starts, a line naming its image, its pod and its node;
//! - every [`LINE_EVERY`] while it runs, a line saying how long it has run;
//! - when it ends, a line with its exit code and reason.
//!
//! Only the last [`KEPT_LINES`] lines of an instance are kept, as a kubelet rotates a
//! long-running container's log. `kubectl logs` reads the current instance (for a
//! container waiting to be restarted, the one that ended last, as the kubelet does);
//! `--previous` reads the one before, from `lastState`.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// How often a running container writes a line.
pub const LINE_EVERY: SignedDuration = SignedDuration::from_secs(5);

/// The lines kept of one instance: older ones are rotated away.
pub const KEPT_LINES: i64 = 10_000;

/// What a log request asks of one container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query<'a> {
    /// The container; may be left out when the pod has exactly one.
    pub container: Option<&'a str>,
    /// The instance before the current one.
    pub previous: bool,
    /// Only lines written at or after this time.
    pub since: Option<Timestamp>,
    /// Only the last this many lines.
    pub tail: Option<usize>,
}

/// One container's log, as far as it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// The container read.
    pub container: String,
    /// Each line with the time it was written, oldest first.
    pub lines: Vec<(Timestamp, String)>,
    /// Whether the instance still runs, so that more lines will come.
    pub running: bool,
}

/// Why a log cannot be read, in the words kube-apiserver and the kubelet use; each is a
/// BadRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// One run of a container: when it started, and how it ended if it did.
struct Instance<'a> {
    started: Timestamp,
    ended: Option<(Timestamp, i32, &'a str)>,
}

/// The log of one container of `pod` at `now`, as `query` asks for it.
pub fn read(pod: &Pod, query: &Query<'_>, now: Timestamp) -> Result<Log, Refused> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let containers: Vec<&str> = spec.iter().flat_map(|s| &s.containers).map(|c| c.name.as_str()).collect();
    let init: Vec<&str> = spec.iter().flat_map(|s| s.init_containers.iter().flatten()).map(|c| c.name.as_str()).collect();
    let container = match query.container {
        Some(c) if containers.contains(&c) || init.contains(&c) => c,
        Some(c) => return Err(Refused(format!("container {c} is not valid for pod {name}"))),
        None if containers.len() == 1 => containers[0],
        None => {
            let mut why = format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !init.is_empty() {
                why.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            return Err(Refused(why));
        }
    };
    let status = pod.status.as_ref();
    let statuses = status.iter().flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()));
    let Some(cs) = statuses.into_iter().find(|s| s.name == container) else {
        return Err(Refused(format!("container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating")));
    };
    let instance = if query.previous { previous(cs, name)? } else { current(cs, name)? };
    let image = spec.and_then(|s| s.containers.iter().chain(s.init_containers.iter().flatten()).find(|c| c.name == container));
    let image = image.and_then(|c| c.image.as_deref()).unwrap_or_default();
    let node = spec.and_then(|s| s.node_name.as_deref()).unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let start_line = format!("{image} started in pod {namespace}/{name} on node {node}");
    Ok(Log {
        container: container.to_string(),
        lines: lines(&instance, container, &start_line, query, now),
        running: instance.ended.is_none(),
    })
}

/// The instance `kubectl logs` reads: the running one, the one that ended, or for a
/// container waiting to be restarted the one that ended last.
fn current<'a>(cs: &'a ContainerStatus, pod: &str) -> Result<Instance<'a>, Refused> {
    let state = cs.state.as_ref();
    if let Some(r) = state.and_then(|s| s.running.as_ref()) {
        return Ok(Instance { started: r.started_at.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0), ended: None });
    }
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        return Ok(ended(t));
    }
    if let Some(t) = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
        return Ok(ended(t));
    }
    let reason = state.and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref()).unwrap_or("ContainerCreating");
    Err(Refused(format!("container \"{}\" in pod \"{pod}\" is waiting to start: {reason}", cs.name)))
}

/// The instance before the current one, from `lastState`. A container waiting to be
/// restarted has no current instance: its previous one is the one that ended last.
fn previous<'a>(cs: &'a ContainerStatus, pod: &str) -> Result<Instance<'a>, Refused> {
    match cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
        Some(t) => Ok(ended(t)),
        None => Err(Refused(format!("previous terminated container \"{}\" in pod \"{pod}\" not found", cs.name))),
    }
}

fn ended(t: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> Instance<'_> {
    let started = t.started_at.as_ref().map_or(Timestamp::UNIX_EPOCH, |s| s.0);
    let finished = t.finished_at.as_ref().map_or(started, |f| f.0);
    Instance { started, ended: Some((finished.max(started), t.exit_code, t.reason.as_deref().unwrap_or("Error"))) }
}

/// The lines of `instance` written by `now`, of those `query` keeps. Line 0 is the
/// start, line k ≥ 1 is written k × [`LINE_EVERY`] after it while the instance runs,
/// and one more says how it ended. Only what is asked for is made.
fn lines(instance: &Instance<'_>, container: &str, start_line: &str, query: &Query<'_>, now: Timestamp) -> Vec<(Timestamp, String)> {
    let until = instance.ended.map_or(now, |(at, ..)| at.min(now));
    if until < instance.started {
        return Vec::new();
    }
    let every = LINE_EVERY.as_secs();
    let periodic = until.duration_since(instance.started).as_secs() / every;
    let exit = instance.ended.filter(|(at, ..)| *at <= now);
    // Lines 0..=periodic, then the exit line as number periodic + 1.
    let last = periodic + i64::from(exit.is_some());
    let mut first = (last + 1 - KEPT_LINES).max(0);
    let at = |k: i64| -> Timestamp {
        match exit {
            Some((ended, ..)) if k == last => ended,
            _ => instance.started + SignedDuration::from_secs(k * every),
        }
    };
    if let Some(since) = query.since {
        while first <= last && at(first) < since {
            // The periodic lines are evenly spaced: skip to the first at or after `since`.
            let skip = since.duration_since(at(first)).as_secs() / every;
            first += skip.max(1);
        }
    }
    if let Some(tail) = query.tail {
        first = first.max(last + 1 - i64::try_from(tail).unwrap_or(i64::MAX).min(last + 1));
    }
    (first..=last)
        .map(|k| {
            let text = match exit {
                Some((_, code, reason)) if k == last => format!("{container} exited with code {code} ({reason})"),
                _ if k == 0 => start_line.to_string(),
                _ => format!("{container} is running: {}s since it started", k * every),
            };
            (at(k), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn time(secs: i64) -> String {
        t(secs).to_string()
    }

    fn pod(containers: &[&str], statuses: serde_json::Value) -> Pod {
        let specs: Vec<_> = containers.iter().map(|c| json!({"name": c, "image": format!("{c}:1")})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "node-a", "containers": specs},
            "status": {"containerStatuses": statuses},
        }))
        .unwrap()
    }

    fn running(name: &str, since: i64) -> serde_json::Value {
        json!({"name": name, "image": "x", "imageID": "", "ready": true, "restartCount": 0,
               "state": {"running": {"startedAt": time(since)}}})
    }

    fn texts(log: &Log) -> Vec<&str> {
        log.lines.iter().map(|(_, l)| l.as_str()).collect()
    }

    #[test]
    fn a_running_container_names_its_image_and_pod_then_writes_a_line_every_few_seconds() {
        let p = pod(&["web"], json!([running("web", 0)]));
        let log = read(&p, &Query::default(), t(12)).unwrap();
        assert_eq!(
            texts(&log),
            [
                "web:1 started in pod default/web-1 on node node-a",
                "web is running: 5s since it started",
                "web is running: 10s since it started"
            ]
        );
        assert_eq!(log.lines.iter().map(|(at, _)| *at).collect::<Vec<_>>(), [t(0), t(5), t(10)]);
        assert!(log.running);
        // The same pod at the same time has the same log.
        assert_eq!(read(&p, &Query::default(), t(12)).unwrap(), log);
    }

    #[test]
    fn tail_and_since_keep_the_last_lines_and_the_recent_ones() {
        let p = pod(&["web"], json!([running("web", 0)]));
        let tail = read(&p, &Query { tail: Some(2), ..Default::default() }, t(21)).unwrap();
        assert_eq!(texts(&tail), ["web is running: 15s since it started", "web is running: 20s since it started"]);
        let since = read(&p, &Query { since: Some(t(9)), ..Default::default() }, t(21)).unwrap();
        assert_eq!(since.lines.iter().map(|(at, _)| *at).collect::<Vec<_>>(), [t(10), t(15), t(20)]);
        assert!(read(&p, &Query { since: Some(t(30)), ..Default::default() }, t(21)).unwrap().lines.is_empty());
        assert!(read(&p, &Query { tail: Some(0), ..Default::default() }, t(21)).unwrap().lines.is_empty());
        // A container up for a year keeps its last lines only, and costs no more to read.
        let year = read(&p, &Query::default(), t(365 * 86_400)).unwrap();
        assert_eq!(year.lines.len(), KEPT_LINES as usize);
        assert_eq!(year.lines.last().unwrap().0, t(365 * 86_400));
    }

    #[test]
    fn a_crashed_container_shows_its_last_run_and_previous_reads_it_too() {
        let crashing = json!([{"name": "web", "image": "x", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": time(40), "finishedAt": time(40)}}}]);
        let p = pod(&["web"], crashing);
        let log = read(&p, &Query::default(), t(50)).unwrap();
        assert_eq!(texts(&log), ["web:1 started in pod default/web-1 on node node-a", "web exited with code 1 (Error)"]);
        assert!(!log.running);
        assert_eq!(read(&p, &Query { previous: true, ..Default::default() }, t(50)).unwrap(), log);
    }

    #[test]
    fn a_finished_container_ends_with_its_exit() {
        let done = json!([{"name": "job", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": time(0), "finishedAt": time(7)}}}]);
        let log = read(&pod(&["job"], done), &Query::default(), t(100)).unwrap();
        assert_eq!(
            texts(&log),
            [
                "job:1 started in pod default/web-1 on node node-a",
                "job is running: 5s since it started",
                "job exited with code 0 (Completed)"
            ]
        );
        assert_eq!(log.lines.last().unwrap().0, t(7));
    }

    #[test]
    fn refusals_say_what_kubernetes_says() {
        let two = pod(&["web", "proxy"], json!([running("web", 0), running("proxy", 0)]));
        assert_eq!(
            read(&two, &Query::default(), t(1)),
            Err(Refused("a container name must be specified for pod web-1, choose one of: [web proxy]".into()))
        );
        assert_eq!(
            read(&two, &Query { container: Some("db"), ..Default::default() }, t(1)),
            Err(Refused("container db is not valid for pod web-1".into()))
        );
        assert_eq!(read(&two, &Query { container: Some("proxy"), ..Default::default() }, t(1)).unwrap().container, "proxy");
        assert_eq!(
            read(&two, &Query { container: Some("web"), previous: true, ..Default::default() }, t(1)),
            Err(Refused("previous terminated container \"web\" in pod \"web-1\" not found".into()))
        );
        let pending = pod(
            &["web"],
            json!([{"name": "web", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]),
        );
        assert_eq!(
            read(&pending, &Query::default(), t(1)),
            Err(Refused("container \"web\" in pod \"web-1\" is waiting to start: ContainerCreating".into()))
        );
    }
}
