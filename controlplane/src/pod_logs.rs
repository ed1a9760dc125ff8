//! `GET .../pods/NAME/log`: a container's log, read from whatever the server was given
//! to read logs with ([`PodLogs`]; a simulated cluster installs its simulation's). The
//! query parameters are kube-apiserver's (`PodLogOptions`): `container`, `previous`,
//! `tailLines`, `sinceSeconds` or `sinceTime`, `timestamps`, `limitBytes` and `follow`.
//!
//! A followed log is polled every [`FOLLOW_EVERY`] from the pod as stored, and ends when
//! the container stops, the pod is deleted, or the server stops. Its lines go through a
//! small channel: a client that reads slowly holds the poller back, never the server's
//! memory.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response};
use jiff::Timestamp;
use serde_json::Value;

use crate::api::{Api, Scope};
use crate::error::{ApiError, Cause, ObjRef};

/// How often a followed log looks for new lines.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// Chunks of a followed log waiting for a slow client before the poller waits too.
const FOLLOW_BUFFER: usize = 16;

/// What a log request asks of one container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogQuery {
    /// The container; may be left out when the pod has exactly one.
    pub container: Option<String>,
    /// The instance before the current one.
    pub previous: bool,
    /// Only lines written at or after this time.
    pub since: Option<Timestamp>,
    /// Only the last this many lines.
    pub tail: Option<usize>,
}

/// One container's log, as far as it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLines {
    /// Each line with the time it was written, oldest first.
    pub lines: Vec<(Timestamp, String)>,
    /// Whether the container still runs, so that more lines will come.
    pub running: bool,
}

/// Reads a container's log from a pod as stored.
pub trait PodLogs: Send + Sync + 'static {
    /// The log of one container of `pod` at `now`, as `query` asks for it; a refusal is
    /// the error kube-apiserver gives (a BadRequest that names the container and pod).
    fn read(&self, pod: &Value, query: &LogQuery, now: Timestamp) -> Result<LogLines, ApiError>;
}

/// The options of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub query: LogQuery,
    pub follow: bool,
    pub timestamps: bool,
    pub limit_bytes: Option<usize>,
}

fn invalid(field: &str, message: String, pod: &str) -> ApiError {
    ApiError::invalid(
        "PodLogOptions",
        ObjRef { group: "", resource: "pods", name: pod },
        vec![Cause::new("FieldValueInvalid", field, &message)],
    )
}

/// The options in `query`, checked as kube-apiserver checks `PodLogOptions`.
pub fn parse(query: &HashMap<String, String>, pod: &str, now: Timestamp) -> Result<LogOptions, ApiError> {
    let get = |k: &str| query.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let flag = |k: &str| get(k).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
    let number = |k: &str| -> Result<Option<i64>, ApiError> {
        get(k)
            .map(|v| v.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid value {v:?} for the query parameter {k}"))))
            .transpose()
    };
    let tail = number("tailLines")?;
    if let Some(n) = tail.filter(|n| *n < 0) {
        return Err(invalid("tailLines", format!("Invalid value: {n}: must be greater than or equal to 0"), pod));
    }
    let since_seconds = number("sinceSeconds")?;
    if let Some(n) = since_seconds.filter(|n| *n < 1) {
        return Err(invalid("sinceSeconds", format!("Invalid value: {n}: must be greater than 0"), pod));
    }
    let since_time = get("sinceTime")
        .map(|v| {
            v.parse::<Timestamp>().map_err(|_| ApiError::bad_request(format!("invalid value {v:?} for the query parameter sinceTime")))
        })
        .transpose()?;
    let since = match (since_seconds, since_time) {
        (Some(_), Some(_)) => return Err(invalid("", "at most one of `sinceTime` or `sinceSeconds` may be specified".into(), pod)),
        (Some(s), None) => Some(now - jiff::SignedDuration::from_secs(s)),
        (None, t) => t,
    };
    let limit = number("limitBytes")?;
    if let Some(n) = limit.filter(|n| *n < 1) {
        return Err(invalid("limitBytes", format!("Invalid value: {n}: must be greater than 0"), pod));
    }
    Ok(LogOptions {
        query: LogQuery {
            container: get("container").map(String::from),
            previous: flag("previous"),
            since,
            tail: tail.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        },
        follow: flag("follow"),
        timestamps: flag("timestamps"),
        limit_bytes: limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    })
}

/// Lines as the response carries them: one a line, after an RFC 3339 time when asked.
fn render(lines: &[(Timestamp, String)], timestamps: bool) -> String {
    let mut out = String::new();
    for (at, line) in lines {
        if timestamps {
            out.push_str(&at.to_string());
            out.push(' ');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn text_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// The log of pod `name` in `scope`, whole or followed.
pub fn respond(
    api: Arc<Api>,
    logs: Arc<dyn PodLogs>,
    scope: Scope,
    name: &str,
    pod: &Value,
    opts: LogOptions,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<Response<Body>, ApiError> {
    let first = logs.read(pod, &opts.query, Timestamp::now())?;
    let mut text = render(&first.lines, opts.timestamps);
    if let Some(limit) = opts.limit_bytes {
        if text.len() >= limit {
            text.truncate(floor_char_boundary(&text, limit));
            return Ok(text_response(Body::from(text)));
        }
    }
    if !opts.follow || !first.running {
        return Ok(text_response(Body::from(text)));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::convert::Infallible>>(FOLLOW_BUFFER);
    let name = name.to_string();
    tokio::spawn(async move {
        let mut sent = text.len();
        if tx.send(Ok(text)).await.is_err() {
            return;
        }
        // The last line sent, and how many sent lines share its time: a later read from
        // that time skips those.
        let mut last = first.lines.last().map(|(at, _)| *at);
        let mut at_last = last.map_or(0, |l| first.lines.iter().rev().take_while(|(at, _)| *at == l).count());
        loop {
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
                _ = stopping.changed() => return,
                _ = tx.closed() => return,
            }
            let Some(entry) = api.get_raw(&scope, &name) else { return };
            let query = LogQuery { since: last.or(opts.query.since), tail: None, ..opts.query.clone() };
            let Ok(read) = logs.read(&entry.value, &query, Timestamp::now()) else { return };
            let skip = if last.is_some() { read.lines.iter().take_while(|(at, _)| Some(*at) == last).count().min(at_last) } else { 0 };
            let new = &read.lines[skip..];
            if let Some((l, _)) = new.last() {
                at_last = if Some(*l) == last { at_last + new.len() } else { new.iter().rev().take_while(|(at, _)| at == l).count() };
                last = Some(*l);
            }
            let mut chunk = render(new, opts.timestamps);
            let full = opts.limit_bytes.is_some_and(|limit| sent + chunk.len() >= limit);
            if let Some(limit) = opts.limit_bytes.filter(|_| full) {
                chunk.truncate(floor_char_boundary(&chunk, limit - sent));
            }
            sent += chunk.len();
            if !chunk.is_empty() && tx.send(Ok(chunk)).await.is_err() {
                return;
            }
            if full || !read.running {
                return;
            }
        }
    });
    Ok(text_response(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))))
}

/// The largest index ≤ `at` on a character boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len())).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_are_read_and_checked_as_kube_apiserver_does() {
        let now: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let o = parse(
            &q(&[("container", "web"), ("tailLines", "3"), ("sinceSeconds", "60"), ("follow", "true"), ("timestamps", "true")]),
            "p",
            now,
        )
        .unwrap();
        assert_eq!(o.query.container.as_deref(), Some("web"));
        assert_eq!((o.query.tail, o.follow, o.timestamps), (Some(3), true, true));
        assert_eq!(o.query.since, Some("2026-12-02T11:59:00Z".parse().unwrap()));
        let o = parse(&q(&[("sinceTime", "2026-12-02T11:00:00Z"), ("previous", "true")]), "p", now).unwrap();
        assert_eq!((o.query.since, o.query.previous), (Some("2026-12-02T11:00:00Z".parse().unwrap()), true));
        let message = |pairs: &[(&str, &str)]| parse(&q(pairs), "p", now).unwrap_err().message;
        assert!(message(&[("tailLines", "-1")]).contains("tailLines: Invalid value: -1: must be greater than or equal to 0"));
        assert!(message(&[("sinceSeconds", "0")]).contains("sinceSeconds: Invalid value: 0: must be greater than 0"));
        assert!(message(&[("sinceSeconds", "5"), ("sinceTime", "2026-12-02T11:00:00Z")])
            .contains("at most one of `sinceTime` or `sinceSeconds`"));
        assert!(message(&[("tailLines", "x")]).contains("tailLines"));
        assert_eq!(parse(&q(&[("tailLines", "x")]), "p", now).unwrap_err().code, 400);
    }

    #[test]
    fn lines_are_rendered_one_a_line_with_their_times_when_asked() {
        let at: Timestamp = "2026-12-02T12:00:05Z".parse().unwrap();
        let lines = vec![(at, "a".to_string()), (at, "b".to_string())];
        assert_eq!(render(&lines, false), "a\nb\n");
        assert_eq!(render(&lines, true), "2026-12-02T12:00:05Z a\n2026-12-02T12:00:05Z b\n");
        assert_eq!(floor_char_boundary("héllo", 2), 1);
    }
}
