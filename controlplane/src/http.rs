//! HTTP: routes `/clusters/<workspace>/…` (and bare paths, which address `root`) to
//! discovery, OpenAPI and the generic resource engine; authenticates; negotiates
//! content types; and renders every error as a `metav1.Status`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::api::{self, Api, DeleteOptions, FieldValidation, ListOptions, PatchKind, ScaleWrite, Scope, Sub, WriteOptions};
use crate::auth::{authorize, Auth, Principal, Scoped};
use crate::error::{ApiError, ObjRef};
use crate::metrics::Metrics;
use crate::selector::{FieldSelector, LabelSelector};
use crate::watch::{self, WatchOptions};
use crate::{discovery, openapi, syncer_scope};

/// Request bodies above this are refused with 413, as kube-apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The workspace that bare paths (without `/clusters/<name>`) address.
pub const ROOT: &str = "root";

/// Shared state of the HTTP server.
pub struct AppState {
    /// The resource engine.
    pub api: Arc<Api>,
    /// Token authority.
    pub auth: Arc<Auth>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The process metrics registry, for `/metrics`.
    pub prometheus: prometheus::Registry,
    /// Whether start-up finished (readyz).
    pub ready: std::sync::atomic::AtomicBool,
    /// Serve only `root` (a simulated physical cluster has one logical cluster).
    pub single_cluster: bool,
    /// Becomes true on shutdown; open watches end.
    pub stopping: tokio::sync::watch::Receiver<bool>,
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
    let resp = match route(&state, &method, &path, &query, &parts.headers, body, &mut labels).await {
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
        None => Ok((ROOT.to_string(), path.to_string())),
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
    // Health and version need no credentials (kubectl get --raw /readyz sends none of the prefix).
    match rest.as_str() {
        "/healthz" | "/livez" | "/healthz/ping" | "/livez/ping" => return Ok(text(StatusCode::OK, "ok".into())),
        "/readyz" => {
            return Ok(if state.ready.load(std::sync::atomic::Ordering::Acquire) {
                text(StatusCode::OK, "ok".into())
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "[-]startup failed: the server is still starting\nreadyz check failed".into())
            })
        }
        "/version" => return Ok(json_response(200, &version_info())),
        "/metrics" => {
            use prometheus::Encoder;
            let mut buf = Vec::new();
            let _ = prometheus::TextEncoder::new().encode(&state.prometheus.gather(), &mut buf);
            return Ok(text(StatusCode::OK, String::from_utf8_lossy(&buf).into_owned()));
        }
        _ => {}
    }
    let auth_header = headers.get(header::AUTHORIZATION).and_then(|h| h.to_str().ok());
    let principal = state.auth.authenticate(auth_header, |kind, name| match kind {
        Scoped::Workspace => workspace_uid(&state.api, name),
        Scoped::SyncTarget => sync_target_uid(&state.api, name),
    })?;
    authorize(&principal, &ws)?;
    if state.single_cluster && ws != ROOT {
        return Err(ApiError::no_route(path));
    }
    if ws != ROOT && ws != "*" && workspace_uid(&state.api, &ws).is_none() {
        return Err(ApiError::not_found(ObjRef { group: placement_api::TENANCY_GROUP, resource: "workspaces", name: &ws }));
    }
    let segs: Vec<&str> = rest.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let types = || state.api.registry.types(&ws);
    let get_only =
        |m: &Method| if m == Method::GET { Ok(()) } else { Err(ApiError::method_not_allowed(format!("{m} is not supported on {path}"))) };
    match segs.as_slice() {
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
        ["openapi", "v3"] => Ok(json_response(200, &openapi::index(&openapi::documents(&types())))),
        ["openapi", "v3", gv @ ..] => {
            let docs = openapi::documents(&types());
            docs.get(&gv.join("/")).map(|d| json_response(200, d)).ok_or_else(|| ApiError::no_route(path))
        }
        ["api", v, tail @ ..] => resource(state, &principal, method, &ws, "", v, tail, query, headers, body, labels).await,
        ["apis", g, v, tail @ ..] => resource(state, &principal, method, &ws, g, v, tail, query, headers, body, labels).await,
        _ => Err(ApiError::no_route(path)),
    }
}

/// The uid of a served workspace (root has a fixed one), for token checks.
/// The uid of a SyncTarget in `root`, if it exists and is not being deleted.
pub fn sync_target_uid(api: &Api, name: &str) -> Option<String> {
    api.store.get_doc(&format!("{}/synctargets/{ROOT}//{name}", placement_api::WORKLOAD_GROUP))?.live_uid()
}

pub fn workspace_uid(api: &Api, ws: &str) -> Option<String> {
    if ws == ROOT {
        return Some(ROOT.to_string());
    }
    api.store.get_doc(&placement_api::workspace_key(ws))?.live_uid()
}

/// Namespace subresources, which are not resource names (apiserver RequestInfoFactory).
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

#[allow(clippy::too_many_arguments)]
async fn resource(
    state: &Arc<AppState>,
    principal: &Principal,
    method: &Method,
    ws: &str,
    group: &str,
    version: &str,
    tail: &[&str],
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Body,
    labels: &mut (String, String),
) -> Result<Response, ApiError> {
    let (namespace, parts): (&str, &[&str]) = match tail {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() && (rest.len() != 1 || !NAMESPACE_SUBRESOURCES.contains(&rest[0])) => (ns, rest),
        other => ("", other),
    };
    let (plural, name, sub) = match parts {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(*n), None),
        [r, n, s] => (*r, Some(*n), Some(*s)),
        _ => return Err(ApiError::no_route(&tail.join("/"))),
    };
    let rt = state
        .api
        .registry
        .lookup(ws, group, version, plural)
        .ok_or_else(|| ApiError::no_route(&format!("{}/{version}/{plural}", if group.is_empty() { "api" } else { group })))?;
    let verb = match (method.as_str(), name, query.get("watch").map(String::as_str)) {
        ("GET", _, Some("true" | "1")) => "watch",
        ("GET", Some(_), _) => "get",
        ("GET", None, _) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", Some(_), _) => "delete",
        ("DELETE", None, _) => "deletecollection",
        _ => return Err(ApiError::method_not_allowed(format!("{method} is not supported"))),
    };
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
    // A syncer's token reaches only what its syncer needs (syncer_scope).
    let syncer = match principal {
        Principal::SyncTarget(t) => Some(t.as_str()),
        _ => None,
    };
    let (label_selector, field_selector) = if syncer.is_some() { (parse_labels(query)?, parse_fields(query)?) } else { (None, None) };
    let request = syncer_scope::Request {
        workspace: ws,
        verb,
        group: &rt.group,
        resource: &rt.plural,
        namespace,
        name,
        subresource: sub,
        labels: label_selector.as_ref(),
        fields: field_selector.as_ref(),
    };
    let write_opts = || -> Result<WriteOptions, ApiError> {
        let guard = syncer.map(|t| syncer_scope::update_guard(t, &request));
        Ok(WriteOptions {
            field_manager: field_manager(query, headers),
            validation: FieldValidation::parse(query.get("fieldValidation").map(String::as_str))?,
            dry_run: query.get("dryRun").is_some_and(|d| d == "All"),
            guard,
        })
    };
    // The one non-Kubernetes route: minting a workspace-scoped token (admin only).
    if rt.group == placement_api::TENANCY_GROUP && rt.plural == "workspaces" && sub == Some("token") {
        return workspace_token(state, principal, name.unwrap_or_default(), method);
    }
    if rt.group == placement_api::WORKLOAD_GROUP && rt.plural == "synctargets" && sub == Some("token") {
        return sync_target_token(state, principal, name.unwrap_or_default(), method);
    }
    if let Some(t) = syncer {
        syncer_scope::check_request(t, &request)?;
    }
    match (verb, sub) {
        ("watch", None) => {
            if name.is_some() {
                return Err(ApiError::bad_request("watch a single object with fieldSelector=metadata.name=<name>"));
            }
            let opts = WatchOptions {
                resource_version: query.get("resourceVersion").cloned(),
                bookmarks: query.get("allowWatchBookmarks").is_some_and(|b| b == "true"),
                send_initial_events: query.get("sendInitialEvents").map(|v| v == "true"),
                timeout: query.get("timeoutSeconds").and_then(|t| t.parse().ok()).map(Duration::from_secs),
                labels: parse_labels(query)?,
                fields: parse_fields(query)?,
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
            if query.contains_key("resourceVersionMatch") && !query.contains_key("resourceVersion") {
                return Err(ApiError::bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided"));
            }
            let opts = ListOptions {
                labels: parse_labels(query)?,
                fields: parse_fields(query)?,
                limit: query.get("limit").and_then(|l| l.parse().ok()),
                continue_token: query.get("continue").cloned(),
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
            if let Some(t) = syncer {
                syncer_scope::check_read(t, &request, &obj)?;
            }
            if table {
                let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string();
                Ok(json_response(200, &crate::table::table(&scope, &[obj], &rv, None, include_object, true)))
            } else {
                Ok(object_response(200, &obj, omit_managed_fields))
            }
        }
        ("get", Some("status")) if rt.status => {
            Ok(object_response(200, &state.api.get(&scope, name.unwrap_or_default())?, omit_managed_fields))
        }
        ("get", Some("scale")) if rt.scale.is_some() => Ok(json_response(200, &state.api.get_scale(&scope, name.unwrap_or_default())?)),
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
            let force = query.get("force").is_some_and(|f| f == "true");
            let kind = patch_kind(headers, force)?;
            if force && !matches!(kind, PatchKind::Apply { .. }) {
                return Err(ApiError::bad_request("force: Forbidden: may not be specified for non-apply patch"));
            }
            let bytes = read_body(body).await?;
            if s == Some("scale") && rt.scale.is_some() {
                return Ok(json_response(
                    200,
                    &state.api.write_scale(&scope, name.unwrap_or_default(), ScaleWrite::Patch(kind, &bytes), &write_opts()?).await?,
                ));
            }
            let sub = subresource(&rt, s)?;
            let w = state.api.patch(&scope, name.unwrap_or_default(), kind, &bytes, sub, &write_opts()?).await?;
            Ok(written(w, omit_managed_fields))
        }
        ("delete", None) => {
            let opts = delete_options(query, body).await?;
            Ok(json_response(200, &state.api.delete(&scope, name.unwrap_or_default(), &opts).await?))
        }
        ("deletecollection", None) => {
            let list = ListOptions { labels: parse_labels(query)?, fields: parse_fields(query)?, ..Default::default() };
            let opts = delete_options(query, body).await?;
            Ok(json_response(200, &state.api.delete_collection(&scope, &list, &opts).await?))
        }
        ("create", Some("binding")) if rt.builtin() == Some(crate::kinds::Builtin::Pod) => {
            let binding = read_object(headers, body).await?;
            Ok(json_response(201, &state.api.bind(&scope, name.unwrap_or_default(), &binding, &write_opts()?).await?))
        }
        (_, Some(s)) => Err(ApiError::no_route(&format!("{}/{s}", rt.plural))),
        _ => Err(ApiError::method_not_allowed(format!("{method} is not supported here"))),
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

fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.chars().take(128).collect();
    }
    // Without one, the apiserver names the manager after the client's user agent.
    headers
        .get(header::USER_AGENT)
        .and_then(|u| u.to_str().ok())
        .and_then(|u| u.split('/').next())
        .filter(|u| !u.is_empty())
        .unwrap_or("unknown")
        .chars()
        .take(128)
        .collect()
}

fn parse_labels(query: &HashMap<String, String>) -> Result<Option<LabelSelector>, ApiError> {
    query
        .get("labelSelector")
        .filter(|s| !s.is_empty())
        .map(|s| LabelSelector::parse(s).map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}"))))
        .transpose()
}

fn parse_fields(query: &HashMap<String, String>) -> Result<Option<FieldSelector>, ApiError> {
    query
        .get("fieldSelector")
        .filter(|s| !s.is_empty())
        .map(|s| FieldSelector::parse(s).map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}"))))
        .transpose()
}

async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| ApiError::too_large(MAX_BODY))
}

async fn read_object(headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|h| h.to_str().ok()).unwrap_or("application/json");
    let base = ct.split(';').next().unwrap_or_default().trim();
    let bytes = read_body(body).await?;
    match base {
        "application/json" | "" | "*/*" => {
            serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => api::parse_yaml_or_json(&bytes),
        crate::protobuf::CONTENT_TYPE => crate::protobuf::decode(&bytes).map_err(|e| match e {
            crate::protobuf::ProtobufError::UnsupportedKind { .. } => ApiError::unsupported_media_type_because(e.to_string()),
            other => ApiError::bad_request(other.to_string()),
        }),
        other => Err(ApiError::unsupported_media_type(other, &["application/json", "application/yaml", crate::protobuf::CONTENT_TYPE])),
    }
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

async fn delete_options(query: &HashMap<String, String>, body: Body) -> Result<DeleteOptions, ApiError> {
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
        dry_run: query.get("dryRun").is_some_and(|d| d == "All")
            || doc.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|d| d == "All")),
    })
}

fn workspace_token(state: &Arc<AppState>, principal: &Principal, name: &str, method: &Method) -> Result<Response, ApiError> {
    let uid = workspace_uid(&state.api, name);
    mint_token(
        principal,
        method,
        ObjRef { group: placement_api::TENANCY_GROUP, resource: "workspaces", name },
        "WorkspaceToken",
        uid,
        |uid| state.auth.workspace_token(name, uid),
    )
}

fn sync_target_token(state: &Arc<AppState>, principal: &Principal, name: &str, method: &Method) -> Result<Response, ApiError> {
    let uid = sync_target_uid(&state.api, name);
    mint_token(
        principal,
        method,
        ObjRef { group: placement_api::WORKLOAD_GROUP, resource: "synctargets", name },
        "SyncTargetToken",
        uid,
        |uid| state.auth.sync_target_token(name, uid),
    )
}

/// `POST .../<resource>/<name>/token`: the admin mints a token scoped to the object.
fn mint_token(
    principal: &Principal,
    method: &Method,
    obj: ObjRef<'_>,
    kind: &str,
    uid: Option<String>,
    token: impl Fn(&str) -> String,
) -> Result<Response, ApiError> {
    if *principal != Principal::Admin {
        return Err(ApiError::forbidden(format!(
            "User \"{}\" cannot create {} tokens: only the admin can",
            principal.user(),
            obj.resource
        )));
    }
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!("POST a {kind} request to mint a token")));
    }
    let uid = uid.ok_or_else(|| ApiError::not_found(obj.clone()))?;
    Ok(json_response(
        201,
        &json!({
            "apiVersion": format!("{}/{}", obj.group, placement_api::VERSION),
            "kind": kind,
            "metadata": {"name": obj.name},
            "status": {"token": token(&uid)},
        }),
    ))
}
