//! HTTP: routes `/clusters/<workspace>/…` (and bare paths, which address `root`) to
//! discovery, OpenAPI and the generic resource engine; negotiates content types; and
//! renders every error as a `metav1.Status`. Who the caller is, what it may do, which
//! logical clusters exist and the routes that mint tokens are the server's
//! [`Tenancy`]'s to say.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::api::{self, Api, DeleteOptions, FieldValidation, ListOptions, PatchKind, ScaleWrite, Scope, Sub, WriteOptions};
use crate::error::{ApiError, Cause, ObjRef};
use crate::metrics::Metrics;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::Range;
use crate::tenancy::Tenancy;
use crate::watch::{self, WatchOptions};
use crate::{authz, dashboard, decode, discovery, openapi};

/// Request bodies above this are refused with 413, as kube-apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The workspace that bare paths (without `/clusters/<name>`) address.
pub use placement_api::keys::ROOT_WORKSPACE;

/// Shared state of the HTTP server.
pub struct AppState {
    /// The resource engine.
    pub api: Arc<Api>,
    /// Who may do what, and which logical clusters are served.
    pub tenancy: Arc<dyn Tenancy>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The process metrics registry, for `/metrics`.
    pub prometheus: prometheus::Registry,
    /// Whether start-up finished (readyz).
    pub ready: std::sync::atomic::AtomicBool,
    /// Becomes true on shutdown; open watches end.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Explains a workload for the dashboard, once the process that runs the scheduler's
    /// core has said how.
    pub explain: Arc<std::sync::OnceLock<dashboard::Explainer>>,
    /// Reads containers' logs for `pods/log`, in a cluster whose pods run, once it has
    /// said how ([`crate::pod_logs`]); without it `pods/log` is not served.
    pub pod_logs: Arc<std::sync::OnceLock<Arc<dyn crate::pod_logs::PodLogs>>>,
}

/// The router: everything goes through one handler, because Kubernetes paths are
/// parsed by rules (namespaces, subresources, workspaces) rather than by patterns.
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

fn json_response(code: u16, body: &impl serde::Serialize) -> Response {
    body_response(code, serde_json::to_vec(body).unwrap_or_default())
}

/// One object, without its managedFields when the client asked so (see
/// [`placement_api::MANAGED_FIELDS_HEADER`]).
fn object_response(code: u16, object: &api::Presented, omit_managed_fields: bool) -> Response {
    // A stored document goes out as its stored text, with its managedFields cut out in
    // one pass over that text if asked: no tree is built or serialized.
    let text = match object {
        api::Presented::Raw(doc, _) => std::borrow::Cow::Borrowed(doc.raw()),
        other => std::borrow::Cow::Owned(serde_json::to_string(other).unwrap_or_default()),
    };
    let slim = if omit_managed_fields { crate::api::with_metadata(&text, None, true) } else { None };
    body_response(code, slim.unwrap_or_else(|| text.into_owned()).into_bytes())
}

fn body_response(code: u16, body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.to_status())
}

fn text(code: StatusCode, body: String) -> Response {
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The version kubectl sees; it matches the Kubernetes API level served.
pub fn version_info() -> Value {
    json!({
        "major": "1", "minor": "32",
        "gitVersion": format!("v1.32.0+flotilla-{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
        "goVersion": "", "compiler": "rustc", "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

async fn handle(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query: HashMap<String, String> = form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
    let (parts, body) = req.into_parts();
    let mut labels = ("other".to_string(), "other".to_string());
    // A panic in a handler is a bug; it answers 500 with a Status, and the worker and
    // the connection live on.
    let routed = std::panic::AssertUnwindSafe(route(&state, &method, &path, &query, &parts.headers, body, &mut labels));
    let outcome = futures::FutureExt::catch_unwind(routed).await.unwrap_or_else(|panic| {
        let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
        tracing::error!(%method, %path, panic = what.as_deref().unwrap_or("?"), "a request handler panicked");
        Err(ApiError::internal(format!(
            "the server hit a bug while handling {method} {path} and refused the request; it is still serving. Please report it with the server's log"
        )))
    });
    let resp = match outcome {
        Ok(r) => r,
        Err(e) => {
            if e.code >= 500 {
                tracing::error!(%method, %path, error = %e, "request failed");
            } else {
                tracing::debug!(%method, %path, error = %e, "request rejected");
            }
            error_response(&e)
        }
    };
    let code = resp.status().as_u16().to_string();
    let (verb, resource) = labels;
    if verb != "watch" {
        state.metrics.requests.with_label_values(&[&verb, &resource, &code]).observe(started.elapsed().as_secs_f64());
    }
    state.metrics.request_total.with_label_values(&[&verb, &resource, &code]).inc();
    resp
}

/// Splits `/clusters/<ws>/rest` into the workspace and the rest.
fn split_workspace(path: &str) -> Result<(String, String), ApiError> {
    match path.strip_prefix("/clusters/") {
        Some(rest) => {
            let (ws, tail) = rest.split_once('/').unwrap_or((rest, ""));
            // Clients percent-encode the wildcard (`/clusters/%2A/...`).
            let ws = if ws == "%2A" || ws == "%2a" { "*" } else { ws };
            let valid = ws == "*" || crate::objmeta::dns1123_label(ws).is_ok();
            if !valid {
                return Err(ApiError::bad_request(format!("invalid workspace name {ws:?} in the path")));
            }
            Ok((ws.to_string(), format!("/{tail}")))
        }
        None => Ok((ROOT_WORKSPACE.to_string(), path.to_string())),
    }
}

#[allow(clippy::too_many_arguments)]
async fn route(
    state: &Arc<AppState>,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Body,
    labels: &mut (String, String),
) -> Result<Response, ApiError> {
    let (ws, rest) = split_workspace(path)?;
    // Health and version need no credentials (kubectl get --raw /readyz sends none of
    // the prefix); `/version/` is the same document (kube-apiserver's route matches both).
    match rest.as_str() {
        "/healthz" | "/livez" | "/healthz/ping" | "/livez/ping" => return Ok(text(StatusCode::OK, "ok".into())),
        "/readyz" => {
            return Ok(if !state.ready.load(std::sync::atomic::Ordering::Acquire) {
                text(StatusCode::SERVICE_UNAVAILABLE, "[-]startup failed: the server is still starting\nreadyz check failed".into())
            } else if let Err(why) = state.api.store.health() {
                text(StatusCode::SERVICE_UNAVAILABLE, format!("[-]etcd failed: {why}\nreadyz check failed"))
            } else {
                text(StatusCode::OK, "ok".into())
            })
        }
        "/version" | "/version/" => return Ok(json_response(200, &version_info())),
        _ => {}
    }
    // The dashboard's files are public, like a login page; what it shows is read with
    // the session's token, below.
    if state.tenancy.serves_dashboard() && !path.starts_with("/clusters/") {
        if let Some(answer) = dashboard::serve(&rest, method) {
            return answer;
        }
    }
    let auth_header = headers.get(header::AUTHORIZATION).and_then(|h| h.to_str().ok());
    let principal = state.tenancy.authenticate(auth_header)?;
    let segs: Vec<&str> = rest.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let target = match segs.as_slice() {
        ["api", v, tail @ ..] if !tail.is_empty() => Some(ResourcePath::parse(&ws, "", v, tail, method, query)?),
        ["apis", g, v, tail @ ..] if !tail.is_empty() => Some(ResourcePath::parse(&ws, g, v, tail, method, query)?),
        _ => None,
    };
    // The one authorization point: every request below is decided here, before the
    // workspace's existence is revealed and before any handler runs.
    let (label_selector, field_selector) = (parse_labels(query)?, parse_fields(query)?);
    let request = match &target {
        Some(t) => authz::Request::Resource(t.attributes(label_selector.as_ref(), field_selector.as_ref())),
        None => authz::Request::NonResource { workspace: &ws, path: &rest },
    };
    let decision = state.tenancy.authorize(&principal, &request)?;
    state.tenancy.check_served(&ws, path)?;
    if let Some(target) = state.tenancy.serves_dashboard().then(|| dashboard::explain_target(&rest)).flatten() {
        return explain(state, &ws, method, target?).await;
    }
    if let Some(answer) = state.tenancy.dashboard(&principal, &ws, &rest, method) {
        let (code, body) = answer?;
        return Ok(json_response(code, &body));
    }
    if let Some(answer) = state.tenancy.route(&request, method) {
        if let Some(t) = &target {
            *labels = (t.verb.to_string(), t.plural.to_string());
        }
        let (code, body) = answer?;
        return Ok(json_response(code, &body));
    }
    if let Some(t) = target {
        let selectors = (label_selector, field_selector);
        let reads = matches!(t.verb, "get" | "list" | "watch");
        let mut resp = resource(state, &decision, method, &ws, &t, selectors, query, headers, body, labels).await?;
        // While the store cannot be reached, reads are served from this replica's copy:
        // say so, and as of when, as a warning that kubectl prints.
        if let (true, Err(why)) = (reads, state.api.store.health()) {
            if let Ok(h) = HeaderValue::from_str(&format!("299 - \"{}\"", why.replace('"', "'"))) {
                resp.headers_mut().append(header::WARNING, h);
            }
        }
        return Ok(resp);
    }
    let types = || state.api.registry.types(&ws);
    let get_only =
        |m: &Method| if m == Method::GET { Ok(()) } else { Err(ApiError::method_not_allowed(format!("{m} is not supported on {path}"))) };
    match segs.as_slice() {
        ["metrics"] => {
            get_only(method)?;
            use prometheus::Encoder;
            let mut buf = Vec::new();
            let _ = prometheus::TextEncoder::new().encode(&state.prometheus.gather(), &mut buf);
            Ok(text(StatusCode::OK, String::from_utf8_lossy(&buf).into_owned()))
        }
        ["api"] => {
            get_only(method)?;
            Ok(json_response(200, &discovery::api_versions()))
        }
        ["apis"] => {
            get_only(method)?;
            Ok(json_response(200, &discovery::api_group_list(&types())))
        }
        ["apis", g] => {
            get_only(method)?;
            discovery::api_group(&types(), g).map(|v| json_response(200, &v)).ok_or_else(|| ApiError::no_route(path))
        }
        ["api", v] => {
            get_only(method)?;
            discovery::resource_list(&types(), "", v).map(|d| json_response(200, &d)).ok_or_else(|| ApiError::no_route(path))
        }
        ["apis", g, v] => {
            get_only(method)?;
            discovery::resource_list(&types(), g, v).map(|d| json_response(200, &d)).ok_or_else(|| ApiError::no_route(path))
        }
        ["openapi", "v2"] => {
            get_only(method)?;
            let protobuf = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("protobuf"));
            let mut resp = body_response(200, openapi::v2_document(protobuf));
            let media = if protobuf { openapi::V2_PROTOBUF } else { "application/json" };
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
            Ok(resp)
        }
        ["openapi", "v3"] => Ok(json_response(200, &openapi::index(&openapi::documents(&types())))),
        ["openapi", "v3", gv @ ..] => {
            let docs = openapi::documents(&types());
            docs.get(&gv.join("/")).map(|d| json_response(200, d)).ok_or_else(|| ApiError::no_route(path))
        }
        _ => Err(ApiError::no_route(path)),
    }
}

/// `GET /clusters/<ws>/dashboard/explain/<ns>/<name>`: what `flotilla explain` prints
/// for that workload, as `{"text": ...}`, or `{"error": ...}` when it cannot be explained
/// (no Placement governs it, say).
async fn explain(state: &AppState, ws: &str, method: &Method, (ns, name): (String, String)) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(format!("{method} is not supported on the dashboard's explain: GET it")));
    }
    let Some(explainer) = state.explain.get() else {
        return Err(ApiError::unavailable("this server does not run the scheduler's core, so it cannot explain placements"));
    };
    Ok(match explainer(ws.to_string(), ns, name).await {
        Ok(text) => json_response(200, &json!({ "text": text })),
        Err(error) => json_response(200, &json!({ "error": error })),
    })
}

/// A query parameter read as a boolean the way kube-apiserver converts query
/// parameters: absent is false, `0` and `false` (any case) are false, and every other
/// value, the empty one included, is true (apimachinery `Convert_Slice_string_To_bool`).
/// Older clients write `watch=True` and `force=True`.
pub fn query_bool(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// A request for a resource, as its path and method say (apiserver's RequestInfo).
struct ResourcePath<'a> {
    workspace: &'a str,
    group: &'a str,
    version: &'a str,
    namespace: &'a str,
    plural: &'a str,
    name: Option<&'a str>,
    sub: Option<&'a str>,
    verb: &'static str,
}

impl<'a> ResourcePath<'a> {
    fn parse(
        workspace: &'a str,
        group: &'a str,
        version: &'a str,
        tail: &[&'a str],
        method: &Method,
        query: &HashMap<String, String>,
    ) -> Result<Self, ApiError> {
        let (namespace, parts): (&str, &[&str]) = match tail {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() && (rest.len() != 1 || !NAMESPACE_SUBRESOURCES.contains(&rest[0])) => {
                (ns, rest)
            }
            other => ("", other),
        };
        let (plural, name, sub) = match parts {
            [r] => (*r, None, None),
            [r, n] => (*r, Some(*n), None),
            [r, n, s] => (*r, Some(*n), Some(*s)),
            _ => return Err(ApiError::no_route(&tail.join("/"))),
        };
        let verb = match (method.as_str(), name) {
            ("GET", _) if query_bool(query, "watch") => "watch",
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => return Err(ApiError::method_not_allowed(format!("{method} is not supported"))),
        };
        Ok(Self { workspace, group, version, namespace, plural, name, sub, verb })
    }

    fn attributes<'s>(&'s self, labels: Option<&'s LabelSelector>, fields: Option<&'s FieldSelector>) -> authz::Attributes<'s> {
        authz::Attributes {
            workspace: self.workspace,
            verb: self.verb,
            group: self.group,
            version: self.version,
            resource: self.plural,
            namespace: self.namespace,
            name: self.name,
            subresource: self.sub,
            labels,
            fields,
        }
    }
}

/// Namespace subresources, which are not resource names (apiserver RequestInfoFactory).
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

#[allow(clippy::too_many_arguments)]
async fn resource(
    state: &Arc<AppState>,
    decision: &authz::Decision,
    method: &Method,
    ws: &str,
    target: &ResourcePath<'_>,
    (label_selector, field_selector): (Option<LabelSelector>, Option<FieldSelector>),
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Body,
    labels: &mut (String, String),
) -> Result<Response, ApiError> {
    let ResourcePath { group, version, namespace, plural, name, sub, verb, .. } = *target;
    let rt = state
        .api
        .registry
        .lookup(ws, group, version, plural)
        .ok_or_else(|| ApiError::no_route(&format!("{}/{version}/{plural}", if group.is_empty() { "api" } else { group })))?;
    *labels = (verb.to_string(), metric_resource(&rt));
    if !rt.namespaced && !namespace.is_empty() {
        return Err(ApiError::no_route(&format!("{plural} is cluster-scoped and cannot be addressed in a namespace")));
    }
    let scope = Scope { rt: rt.clone(), workspace: ws.to_string(), namespace: namespace.to_string() };
    let span = tracing::debug_span!("request", verb, resource = %rt.plural, workspace = %ws, namespace, name = name.unwrap_or_default());
    let _enter = span.enter();
    let table = wants_table(headers);
    // Flotilla's own controllers ask for objects without managedFields: they never
    // read them, and decoding them is most of the cost of a response.
    let omit_managed_fields =
        headers.get(placement_api::MANAGED_FIELDS_HEADER).is_some_and(|v| v.as_bytes() == placement_api::MANAGED_FIELDS_OMIT.as_bytes());
    let include_object = query.get("includeObject").map(String::as_str) == Some("Object");
    let dry_run = dry_run(query, verb)?;
    let write_opts = || -> Result<WriteOptions, ApiError> {
        Ok(WriteOptions {
            field_manager: field_manager(query, headers, verb, patch_kind(headers, false).ok())?,
            validation: FieldValidation::parse(query.get("fieldValidation").map(String::as_str))?,
            dry_run,
            guard: decision.write.clone(),
        })
    };
    // A get or a list of the latest state must show every write made before it, on
    // whichever replica: confirm with the store that this one has them.
    let unconfirmed = match verb {
        "get" | "list" if !rt.view && wants_latest(verb, query, state.api.store.revision()) => {
            let key = name.map_or_else(|| scope.prefix(), |n| scope.key(n));
            let range = if name.is_some() { Range::Key(&key) } else { Range::Prefix(&key) };
            let started = Instant::now();
            let result = state.api.store.sync(range).await;
            let outcome = if result.is_ok() { "confirmed" } else { "unconfirmed" };
            state.metrics.read_syncs.with_label_values(&[outcome]).observe(started.elapsed().as_secs_f64());
            result.err()
        }
        _ => None,
    };
    let mut resp = match (verb, sub) {
        ("watch", None) => {
            if name.is_some() {
                return Err(ApiError::bad_request("watch a single object with fieldSelector=metadata.name=<name>"));
            }
            let opts = WatchOptions {
                resource_version: query.get("resourceVersion").cloned(),
                bookmarks: query_bool(query, "allowWatchBookmarks"),
                send_initial_events: query.contains_key("sendInitialEvents").then(|| query_bool(query, "sendInitialEvents")),
                timeout: query_number::<u64>(query, "timeoutSeconds")?.map(Duration::from_secs),
                labels: label_selector,
                fields: field_selector,
                table,
                omit_managed_fields,
            };
            if opts.send_initial_events.is_some() && query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
                return Err(ApiError::invalid(
                    "WatchOptions",
                    ObjRef { group: "", resource: "", name: "" },
                    vec![crate::error::Cause::new(
                        "FieldValueForbidden",
                        "resourceVersionMatch",
                        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )],
                ));
            }
            // An unsupported field selector is refused before the stream starts, as
            // kube-apiserver refuses it (400), not as an ERROR event after a 200.
            state.api.check_field_selector(&scope, opts.fields.as_ref())?;
            let rx = watch::start(state.api.clone(), scope, opts, state.metrics.watchers.clone(), state.stopping.clone())?;
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            let body = Body::from_stream(futures::StreamExt::map(stream, Ok::<_, std::convert::Infallible>));
            let mut resp = Response::new(body);
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
            Ok(resp)
        }
        ("list", None) => {
            if query.contains_key("sendInitialEvents") {
                return Err(ApiError::bad_request("sendInitialEvents is forbidden for list"));
            }
            let opts = ListOptions {
                labels: label_selector,
                fields: field_selector,
                limit: query_number::<i64>(query, "limit")?.and_then(|l| usize::try_from(l).ok()),
                continue_token: query.get("continue").cloned(),
                exact: list_revision(query)?,
            };
            if table {
                let (items, rv, cont) = state.api.list_items(&scope, &opts)?;
                Ok(json_response(200, &crate::table::table(&scope, &items, &rv.to_string(), cont.as_deref(), include_object, true)))
            } else {
                Ok(json_response(200, &state.api.list(&scope, &opts)?))
            }
        }
        ("get", None) => {
            let obj = state.api.get(&scope, name.unwrap_or_default())?;
            decision.check_read(&obj)?;
            if table {
                let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string();
                Ok(json_response(200, &crate::table::table(&scope, &[obj], &rv, None, include_object, true)))
            } else {
                Ok(object_response(200, &obj, omit_managed_fields))
            }
        }
        ("get", Some("status")) if rt.status => {
            let obj = state.api.get(&scope, name.unwrap_or_default())?;
            decision.check_read(&obj)?;
            Ok(object_response(200, &obj, omit_managed_fields))
        }
        ("get", Some("log")) if rt.plural == "pods" && rt.group.is_empty() && state.pod_logs.get().is_some() => {
            let name = name.unwrap_or_default();
            let pod = state.api.get(&scope, name)?;
            decision.check_read(&pod)?;
            let opts = crate::pod_logs::parse(query, name, jiff::Timestamp::now())?;
            let logs = state.pod_logs.get().cloned().ok_or_else(|| ApiError::no_route("pods/log"))?;
            crate::pod_logs::respond(state.api.clone(), logs, scope.clone(), name, &pod, opts, state.stopping.clone())
        }
        ("get", Some("scale")) if rt.scale.is_some() => {
            decision.check_read(&*state.api.get(&scope, name.unwrap_or_default())?)?;
            Ok(json_response(200, &state.api.get_scale(&scope, name.unwrap_or_default())?))
        }
        ("create", None) => {
            if name.is_some() {
                return Err(ApiError::method_not_allowed("POST is not supported on a named object"));
            }
            let obj = read_object(headers, body).await?;
            let w = state.api.create(&scope, obj, &write_opts()?).await?;
            Ok(written(w, omit_managed_fields))
        }
        ("update", s @ (None | Some("status"))) => {
            let sub = subresource(&rt, s)?;
            let obj = read_object(headers, body).await?;
            let w = state.api.update(&scope, name.unwrap_or_default(), obj, sub, &write_opts()?).await?;
            Ok(written(w, omit_managed_fields))
        }
        ("update", Some("scale")) if rt.scale.is_some() => {
            let obj = read_object(headers, body).await?;
            Ok(json_response(
                200,
                &state.api.write_scale(&scope, name.unwrap_or_default(), ScaleWrite::Replace(obj), &write_opts()?).await?,
            ))
        }
        ("patch", s) => {
            let force = query_bool(query, "force");
            let kind = patch_kind(headers, force)?;
            if force && !matches!(kind, PatchKind::Apply { .. }) {
                return Err(ApiError::bad_request("force: Forbidden: may not be specified for non-apply patch"));
            }
            let bytes = read_body(body).await?;
            let doc = decode::offload(bytes.len(), move || api::decode_patch(kind, &bytes)).await??;
            if s == Some("scale") && rt.scale.is_some() {
                return Ok(json_response(
                    200,
                    &state.api.write_scale(&scope, name.unwrap_or_default(), ScaleWrite::Patch(kind, doc), &write_opts()?).await?,
                ));
            }
            let sub = subresource(&rt, s)?;
            let w = state.api.patch_doc(&scope, name.unwrap_or_default(), kind, doc, sub, &write_opts()?).await?;
            Ok(written(w, omit_managed_fields))
        }
        ("delete", None) => {
            let opts = DeleteOptions { guard: decision.write.clone(), ..delete_options(dry_run, query, body).await? };
            Ok(json_response(200, &state.api.delete(&scope, name.unwrap_or_default(), &opts).await?))
        }
        ("deletecollection", None) => {
            let list = ListOptions { labels: label_selector, fields: field_selector, ..Default::default() };
            let opts = DeleteOptions { guard: decision.write.clone(), ..delete_options(dry_run, query, body).await? };
            Ok(json_response(200, &state.api.delete_collection(&scope, &list, &opts).await?))
        }
        ("create", Some("binding")) if rt.strategy.has_binding() => {
            let binding = read_object(headers, body).await?;
            Ok(json_response(201, &state.api.bind(&scope, name.unwrap_or_default(), &binding, &write_opts()?).await?))
        }
        (_, Some(s)) => Err(ApiError::no_route(&format!("{}/{s}", rt.plural))),
        _ => Err(ApiError::method_not_allowed(format!("{method} is not supported here"))),
    }?;
    // Unless the store is down altogether, which the caller reports for every read.
    if let (Some(why), Ok(())) = (unconfirmed, state.api.store.health()) {
        tracing::warn!(verb, resource = %rt.plural, workspace = %ws, namespace, reason = %why, "serving a read that could not be confirmed current");
        if let Ok(h) = HeaderValue::from_str(&format!("299 - \"{}\"", why.replace('"', "'"))) {
            resp.headers_mut().append(header::WARNING, h);
        }
    }
    Ok(resp)
}

/// Whether a get or a list asks for the latest state, which on several replicas needs
/// confirming (apimachinery's resourceVersion semantics): without a resourceVersion it
/// does; `0` takes any state this replica has; a number asks for a state at least that
/// new, which needs confirming only when this replica has not reached it; an `Exact`
/// list, and the later pages of a list, are served at their own revision.
fn wants_latest(verb: &str, query: &HashMap<String, String>, have: crate::store::Revision) -> bool {
    if verb == "list" && query.get("continue").is_some_and(|c| !c.is_empty()) {
        return false;
    }
    match query.get("resourceVersion").map(String::as_str).filter(|v| !v.is_empty()) {
        None => true,
        Some("0") => false,
        Some(_) if verb == "list" && query.get("resourceVersionMatch").map(String::as_str) == Some("Exact") => false,
        Some(v) => v.parse::<crate::store::Revision>().is_ok_and(|asked| asked > have),
    }
}

fn metric_resource(rt: &crate::registry::ResourceType) -> String {
    if rt.is_custom() && !rt.group.ends_with("flotilla.io") {
        "custom".into()
    } else {
        rt.plural.clone()
    }
}

fn subresource(rt: &crate::registry::ResourceType, s: Option<&str>) -> Result<Sub, ApiError> {
    match s {
        None => Ok(Sub::Main),
        Some("status") if rt.status => Ok(Sub::Status),
        Some(other) => Err(ApiError::no_route(&format!("{}/{other}", rt.plural))),
    }
}

fn written(w: api::Written, omit_managed_fields: bool) -> Response {
    let mut resp = object_response(if w.created { 201 } else { 200 }, &w.object, omit_managed_fields);
    for warning in w.warnings {
        // RFC 7234 warn-code 299 ("miscellaneous persistent warning"), as the apiserver sends.
        let v = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(h) = HeaderValue::from_str(&v) {
            resp.headers_mut().append(header::WARNING, h);
        }
    }
    resp
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .any(|a| a.split(',').next().is_some_and(|first| first.contains("as=Table")))
}

/// The longest `fieldManager` kube-apiserver accepts (apimachinery ValidateFieldManager).
const FIELD_MANAGER_MAX: usize = 128;

fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap, verb: &str, patch: Option<PatchKind>) -> Result<String, ApiError> {
    let options = options_kind(verb);
    let invalid = |cause: Cause| ApiError::invalid(options, ObjRef { group: "meta.k8s.io", resource: "", name: "" }, vec![cause]);
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        if m.chars().count() > FIELD_MANAGER_MAX {
            return Err(invalid(Cause::new(
                "FieldValueTooLong",
                "fieldManager",
                format!("Too long: may not be more than {FIELD_MANAGER_MAX} bytes"),
            )));
        }
        if m.chars().any(|c| c.is_control()) {
            return Err(invalid(Cause::new(
                "FieldValueInvalid",
                "fieldManager",
                format!("Invalid value: {m:?}: may not contain control characters"),
            )));
        }
        return Ok(m.clone());
    }
    // An apply names its manager (apimachinery ValidatePatchOptions): the fields it sets
    // are owned by that name, and a user agent is no stable owner.
    if matches!(patch, Some(PatchKind::Apply { .. })) && verb == "patch" {
        return Err(invalid(Cause::new("FieldValueRequired", "fieldManager", "Required value: is required for apply patch")));
    }
    // Without one, the apiserver names the manager after the client's user agent.
    Ok(headers
        .get(header::USER_AGENT)
        .and_then(|u| u.to_str().ok())
        .and_then(|u| u.split('/').next())
        .filter(|u| !u.is_empty())
        .unwrap_or("unknown")
        .chars()
        .take(FIELD_MANAGER_MAX)
        .collect())
}

/// The options type of a verb, as kube-apiserver names it in its refusals.
fn options_kind(verb: &str) -> &'static str {
    match verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        "delete" | "deletecollection" => "DeleteOptions",
        _ => "ListOptions",
    }
}

/// `dryRun`: `All` is the only value there is (apimachinery ValidateDryRun). Any other
/// is refused with 422, never ignored: ignoring it would write for real.
fn dry_run(query: &HashMap<String, String>, verb: &str) -> Result<bool, ApiError> {
    dry_run_values(query.get("dryRun").map(String::as_str), options_kind(verb))
}

fn dry_run_values<'a>(values: impl IntoIterator<Item = &'a str>, options: &str) -> Result<bool, ApiError> {
    let mut any = false;
    for v in values {
        if v != "All" {
            return Err(ApiError::invalid(
                options,
                ObjRef { group: "meta.k8s.io", resource: "", name: "" },
                vec![Cause::new("FieldValueNotSupported", "dryRun", format!("Unsupported value: {v:?}: supported values: \"All\""))],
            ));
        }
        any = true;
    }
    Ok(any)
}

/// A numeric query parameter; one that is not a number is a 400, as kube-apiserver's
/// query decoding refuses it, never read as absent.
fn query_number<T: std::str::FromStr>(query: &HashMap<String, String>, key: &str) -> Result<Option<T>, ApiError>
where
    T::Err: std::fmt::Display,
{
    query
        .get(key)
        .filter(|v| !v.is_empty())
        .map(|v| v.parse::<T>().map_err(|e| ApiError::bad_request(format!("invalid value {v:?} for the query parameter {key}: {e}"))))
        .transpose()
}

/// The revision a list is served at, from `resourceVersion` and `resourceVersionMatch`
/// (apimachinery ValidateListOptions and the storage's list semantics):
/// - no resourceVersion, or `0`: the latest state (`0` allows any state, and the
///   latest is one);
/// - `NotOlderThan`, or a resourceVersion with no match: the latest state, which is
///   never older than any revision this server has issued;
/// - `Exact`: the state at that revision, or 410 Expired once it has left the window.
fn list_revision(query: &HashMap<String, String>) -> Result<Option<crate::store::Revision>, ApiError> {
    let rv = query.get("resourceVersion").filter(|v| !v.is_empty());
    let rv_match = query.get("resourceVersionMatch").filter(|v| !v.is_empty()).map(String::as_str);
    let parsed = rv
        .map(|v| {
            v.parse::<crate::store::Revision>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v:?} is not a number")))
        })
        .transpose()?;
    match (rv_match, parsed) {
        (None, _) => Ok(None),
        (Some(_), None) => Err(ApiError::bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")),
        (Some("NotOlderThan"), Some(_)) => Ok(None),
        (Some("Exact"), Some(0)) => Err(ApiError::bad_request("resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"")),
        (Some("Exact"), Some(rv)) => Ok(Some(rv)),
        (Some(other), Some(_)) => Err(ApiError::bad_request(format!(
            "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
        ))),
    }
}

fn parse_labels(query: &HashMap<String, String>) -> Result<Option<LabelSelector>, ApiError> {
    selector_param(query, "labelSelector", LabelSelector::parse, "unable to parse requirement")
}

fn parse_fields(query: &HashMap<String, String>) -> Result<Option<FieldSelector>, ApiError> {
    selector_param(query, "fieldSelector", FieldSelector::parse, "invalid field selector")
}

/// The selector in query parameter `name`, if it is there and not empty; a 400 that
/// opens with `what` if it does not parse.
fn selector_param<T, E: std::fmt::Display>(
    query: &HashMap<String, String>,
    name: &str,
    parse: fn(&str) -> Result<T, E>,
    what: &str,
) -> Result<Option<T>, ApiError> {
    query.get(name).filter(|s| !s.is_empty()).map(|s| parse(s).map_err(|e| ApiError::bad_request(format!("{what}: {e}")))).transpose()
}

async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| ApiError::too_large(MAX_BODY))
}

async fn read_object(headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|h| h.to_str().ok()).unwrap_or("application/json");
    let base = ct.split(';').next().unwrap_or_default().trim();
    let decoder: fn(&[u8]) -> Result<Value, ApiError> = match base {
        "application/json" | "" | "*/*" => |b| decode::json(b, "JSON body"),
        "application/yaml" | "application/x-yaml" | "text/yaml" => decode::yaml_or_json,
        crate::protobuf::CONTENT_TYPE => |b| {
            crate::protobuf::decode(b).map_err(|e| match e {
                crate::protobuf::ProtobufError::UnsupportedKind { .. } => ApiError::unsupported_media_type_because(e.to_string()),
                other => ApiError::bad_request(other.to_string()),
            })
        },
        other => {
            return Err(ApiError::unsupported_media_type(other, &["application/json", "application/yaml", crate::protobuf::CONTENT_TYPE]))
        }
    };
    let bytes = read_body(body).await?;
    decode::offload(bytes.len(), move || decoder(&bytes)).await?
}

fn patch_kind(headers: &HeaderMap, force: bool) -> Result<PatchKind, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|h| h.to_str().ok()).unwrap_or_default();
    match ct.split(';').next().unwrap_or_default().trim() {
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply { force }),
        other => Err(ApiError::unsupported_media_type(
            other,
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
                "application/strategic-merge-patch+json",
            ],
        )),
    }
}

async fn delete_options(dry_run: bool, query: &HashMap<String, String>, body: Body) -> Result<DeleteOptions, ApiError> {
    let bytes = read_body(body).await?;
    let doc: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
    };
    let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(String::from);
    Ok(DeleteOptions {
        propagation: query.get("propagationPolicy").cloned().or_else(|| s(&doc, "/propagationPolicy")),
        uid: s(&doc, "/preconditions/uid"),
        resource_version: s(&doc, "/preconditions/resourceVersion"),
        dry_run: dry_run
            || dry_run_values(
                doc.get("dryRun").and_then(Value::as_array).into_iter().flatten().map(|d| d.as_str().unwrap_or("")),
                "DeleteOptions",
            )?,
        guard: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_of_the_latest_state_are_confirmed_with_the_store() {
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>();
        let have = 100;
        for (verb, query, latest) in [
            ("get", q(&[]), true),
            ("get", q(&[("resourceVersion", "")]), true),
            ("get", q(&[("resourceVersion", "0")]), false),
            ("get", q(&[("resourceVersion", "100")]), false),
            ("get", q(&[("resourceVersion", "101")]), true),
            ("list", q(&[]), true),
            ("list", q(&[("resourceVersion", "0")]), false),
            ("list", q(&[("resourceVersion", "150"), ("resourceVersionMatch", "NotOlderThan")]), true),
            ("list", q(&[("resourceVersion", "50"), ("resourceVersionMatch", "NotOlderThan")]), false),
            ("list", q(&[("resourceVersion", "150"), ("resourceVersionMatch", "Exact")]), false),
            ("list", q(&[("continue", "abc")]), false),
            ("list", q(&[("continue", "")]), true),
        ] {
            assert_eq!(wants_latest(verb, &query, have), latest, "{verb} {query:?}");
        }
    }
}
