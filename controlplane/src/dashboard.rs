//! The web dashboard's files, built into the binary and served at `/dashboard/`.
//!
//! The page is plain HTML, CSS, one JavaScript module and an icon, written by hand:
//! nothing to build, nothing fetched from elsewhere. It signs in with a bearer token, trades
//! it for a read-only session ([`crate::authz::DASHBOARD_SESSION_PATH`]), and then
//! lists and watches through the ordinary API paths, so it goes through the same
//! authorization as kubectl and shows nothing kubectl would not.
//!
//! Every answer carries a Content-Security-Policy that allows only these files and
//! same-origin requests, with no inline script or style and Trusted Types required,
//! so the page cannot write markup from a string: everything it shows goes in as text.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use futures::future::BoxFuture;

use crate::error::ApiError;

/// Explains one workload (workspace, namespace, name) as `flotilla explain` does: the
/// scheduler's own placement core on the clusters as the scheduler last reported them.
/// The control plane's process provides it ([`crate::server::Server::serve_explain`]);
/// the API server alone knows no scheduler.
pub type Explainer = Arc<dyn Fn(String, String, String) -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// Where the page asks for a workload's explanation: `<prefix><namespace>/<name>`, in
/// the workload's workspace.
pub const EXPLAIN_PREFIX: &str = "/dashboard/explain/";

/// The namespace and name of an explain path, if the rest of the path is one.
pub fn explain_target(path: &str) -> Option<Result<(String, String), ApiError>> {
    let rest = path.strip_prefix(EXPLAIN_PREFIX)?;
    let Some((ns, name)) = rest.split_once('/') else {
        return Some(Err(ApiError::bad_request(format!("{path}: ask for {EXPLAIN_PREFIX}<namespace>/<name>"))));
    };
    for (what, v) in [("namespace", ns), ("name", name)] {
        if let Err(why) = crate::objmeta::dns1123_subdomain(v) {
            return Some(Err(ApiError::bad_request(format!("invalid {what} {v:?} in {path}: {why}"))));
        }
    }
    Some(Ok((ns.to_string(), name.to_string())))
}

/// The policy every dashboard answer carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'";

/// The page's files: path under `/dashboard/`, content type, body.
const FILES: &[(&str, &str, &str)] = &[
    ("", "text/html; charset=utf-8", include_str!("../dashboard/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../dashboard/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../dashboard/app.css")),
    ("icon.svg", "image/svg+xml", include_str!("../dashboard/icon.svg")),
];

/// Answers `GET` (or `HEAD`) of `/dashboard` and the files under `/dashboard/`;
/// `None` for a path that is not the dashboard's.
pub fn serve(path: &str, method: &Method) -> Option<Result<Response, ApiError>> {
    if path == "/dashboard" {
        // Relative links in the page resolve against `/dashboard/`.
        let mut resp = respond(StatusCode::MOVED_PERMANENTLY, "text/plain; charset=utf-8", "see /dashboard/\n");
        resp.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/dashboard/"));
        return Some(Ok(resp));
    }
    let file = path.strip_prefix("/dashboard/")?;
    let (_, content_type, body) = FILES.iter().find(|(name, _, _)| *name == file)?;
    if method != Method::GET && method != Method::HEAD {
        return Some(Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {path}: the dashboard's files are read with GET"
        ))));
    }
    Some(Ok(respond(StatusCode::OK, content_type, body)))
}

fn respond(code: StatusCode, content_type: &'static str, body: &'static str) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = code;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The files change with the binary: always ask, so an upgrade is seen at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_served_with_the_policy_and_others_are_not_found() {
        let page = serve("/dashboard/", &Method::GET).unwrap().unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(page.headers()[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
        assert_eq!(page.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let moved = serve("/dashboard", &Method::GET).unwrap().unwrap();
        assert_eq!(moved.headers()[header::LOCATION], "/dashboard/");
        assert!(serve("/dashboard/../admin.token", &Method::GET).is_none());
        assert!(serve("/dashboard/app.js.map", &Method::GET).is_none());
        assert!(serve("/dashboards/", &Method::GET).is_none());
        assert_eq!(serve("/dashboard/app.js", &Method::POST).unwrap().err().map(|e| e.code), Some(405));
    }

    #[test]
    fn explain_paths_name_one_workload() {
        assert!(explain_target("/dashboard/session").is_none());
        assert_eq!(explain_target("/dashboard/explain/default/web").unwrap().unwrap(), ("default".into(), "web".into()));
        for bad in
            ["/dashboard/explain/default", "/dashboard/explain/default/web/x", "/dashboard/explain/De fault/web", "/dashboard/explain//web"]
        {
            assert_eq!(explain_target(bad).unwrap().err().map(|e| e.code), Some(400), "{bad}");
        }
    }

    #[test]
    fn the_page_loads_nothing_inline_and_nothing_from_elsewhere() {
        let html = FILES[0].2;
        assert!(!html.contains("<script>") && !html.contains("style="), "inline script or style would be refused by the policy");
        for (name, _, body) in FILES {
            assert!(!body.contains("http://") && !body.contains("https://") || *name == "icon.svg", "{name} refers to another origin");
            assert!(!body.contains("innerHTML") && !body.contains("insertAdjacentHTML"), "{name} writes markup from a string");
        }
    }
}
