//! Authorization: the one place that decides what an authenticated principal may do.
//!
//! Every request passes [`authorize`] once, after authentication and before any
//! handler runs, with its attributes as kube-apiserver's `RequestInfo` describes them
//! (workspace, verb, group, resource, subresource, namespace, name). The decision may
//! carry object-level rules, because some principals are held to individual objects
//! and not only to paths (a syncer to the objects assigned to its cluster, as the
//! NodeRestriction admission plugin holds a kubelet to its own node):
//! - a [`ReadCheck`], applied to an object before it is returned;
//! - a [`WriteGuard`], which the resource engine ([`crate::api`]) applies to every
//!   write it is about to store (create, update, patch, apply, apply-create, delete,
//!   every subresource), with the stored object and the one about to be stored.
//!
//! The rules:
//! - the admin may do everything;
//! - a workspace's token reaches only its own workspace, never `root`, the wildcard
//!   view, `/metrics`, or the minting of tokens;
//! - a metrics token reads `/metrics` and nothing else;
//! - a dashboard session reads (get, list, watch) what its scope covers, Secrets
//!   excepted, and renews itself; a sign-in link only opens a session;
//! - a syncer's token reaches what [`crate::syncer_scope`] allows;
//! - and whatever its principal may otherwise do, only the admin writes what Flotilla's
//!   own controllers keep in a workspace: its ReplicaSets and ControllerRevisions are
//!   read-only to everyone else.

pub use crate::access::{Attributes, Decision, ReadCheck, ReadFn, Request};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::syncer_scope;

/// Where a dashboard session is opened or renewed (`POST`, in `root` or a workspace).
pub const DASHBOARD_SESSION_PATH: &str = "/dashboard/session";
/// Where the admin or a workspace mints a sign-in link (`POST`).
pub const DASHBOARD_LINK_PATH: &str = "/dashboard/link";

/// Subresources that mint credentials: only the admin may call them.
fn mints_token(r: &Request<'_>) -> bool {
    match r {
        Request::Resource(a) => a.subresource == Some("token"),
        Request::NonResource { path, .. } => *path == "/metrics/token",
    }
}

/// The dashboard's explanation of a placement: it shows the fleet's clusters (their
/// room, labels and taints), which only the admin's view covers.
fn needs_fleet(r: &Request<'_>) -> bool {
    matches!(r, Request::NonResource { path, .. } if path.starts_with(crate::dashboard::EXPLAIN_PREFIX))
}

fn is_metrics(r: &Request<'_>) -> bool {
    matches!(r, Request::NonResource { path: "/metrics" | "/metrics/token", .. })
}

/// Why the request `a` is the admin's alone, and what to do instead; `None` when it is
/// a read or names nothing Flotilla keeps.
///
/// A workspace runs no pods, so its ReplicaSets and ControllerRevisions only record
/// the rollout history of its workloads, one per template revision, for `kubectl
/// rollout history` and `undo`. The revisions and controller-revisions controllers
/// (`workspace-controllers`, with the admin's credentials) derive them from the
/// templates: anyone else's write would be undone on their next pass, or would rewrite
/// the history an undo goes back to. Every verb but a read is refused, whatever the
/// subresource (`status`, `scale`), since a subresource write changes the same object.
fn kept_by_flotilla(a: &Attributes<'_>) -> Option<&'static str> {
    if a.group != "apps" || matches!(a.verb, "get" | "list" | "watch") {
        return None;
    }
    match a.resource {
        "replicasets" => Some(
            "a workspace's ReplicaSets are kept by Flotilla from its Deployments' templates; \
             change the Deployment, or use kubectl rollout undo",
        ),
        "controllerrevisions" => Some(
            "a workspace's ControllerRevisions are kept by Flotilla from its StatefulSets' and DaemonSets' templates; \
             change the StatefulSet or DaemonSet, or use kubectl rollout undo",
        ),
        _ => None,
    }
}

/// Decides whether `principal` may make `request`; see the module's rules. The rules of
/// the principal come first, so a refusal there keeps its own reason (another
/// workspace, a read-only session); what they allow is then held to
/// `kept_by_flotilla`, which no principal but the admin passes.
pub fn authorize(principal: &Principal, request: &Request<'_>) -> Result<Decision, ApiError> {
    let decision = by_principal(principal, request)?;
    let Request::Resource(a) = request else { return Ok(decision) };
    match kept_by_flotilla(a) {
        Some(why) if !matches!(principal, Principal::Admin) => {
            let what = a.subresource.map_or_else(|| a.resource.to_string(), |s| format!("{}/{s}", a.resource));
            Err(ApiError::forbidden(format!("User \"{}\" cannot {} {what}: {why}", principal.user(), a.verb)))
        }
        _ => Ok(decision),
    }
}

/// What `principal`'s own rules allow, before [`kept_by_flotilla`].
fn by_principal(principal: &Principal, request: &Request<'_>) -> Result<Decision, ApiError> {
    let user = principal.user();
    let ws = request.workspace();
    match principal {
        Principal::Admin => Ok(Decision::allow()),
        _ if mints_token(request) => {
            Err(ApiError::forbidden(format!("User \"{user}\" cannot mint tokens: only the admin can; use the admin kubeconfig")))
        }
        Principal::Metrics if is_metrics(request) => Ok(Decision::allow()),
        Principal::Metrics => {
            Err(ApiError::forbidden(format!("User \"{user}\" may only read /metrics: a metrics token carries no other right")))
        }
        _ if is_metrics(request) => Err(ApiError::forbidden(format!(
            "User \"{user}\" cannot read /metrics: use the admin token, or a metrics token (`flotilla metrics-token`)"
        ))),
        Principal::Workspace(_) | Principal::Dashboard { workspace: Some(_), .. } | Principal::SignInLink(_) | Principal::SyncTarget(_)
            if needs_fleet(request) =>
        {
            Err(ApiError::forbidden(format!(
                "User \"{user}\" cannot see why workloads run where they run: it shows the fleet's clusters; use the admin's kubeconfig or sign-in link"
            )))
        }
        Principal::Workspace(own) if own == ws => Ok(Decision::allow()),
        Principal::Workspace(_) => Err(ApiError::forbidden(format!(
            "User \"{user}\" cannot access workspace \"{ws}\": its token is scoped to another workspace; use the context named after the workspace"
        ))),
        // Discovery stays open to every authenticated principal, as in Kubernetes.
        Principal::SyncTarget(_) if matches!(request, Request::NonResource { .. }) => Ok(Decision::allow()),
        Principal::Dashboard { workspace: scope, .. } | Principal::SignInLink(scope) if scope.as_ref().is_some_and(|own| own != ws) => {
            Err(ApiError::forbidden(format!("User \"{user}\" cannot access workspace \"{ws}\": the dashboard session is scoped to another workspace")))
        }
        Principal::SignInLink(_) => match request {
            Request::NonResource { path: DASHBOARD_SESSION_PATH, .. } => Ok(Decision::allow()),
            _ => Err(ApiError::forbidden(format!("User \"{user}\" can only open a dashboard session: POST it to {DASHBOARD_SESSION_PATH}"))),
        },
        Principal::Dashboard { .. } => match request {
            Request::NonResource { path: DASHBOARD_SESSION_PATH, .. } => Ok(Decision::allow()),
            _ if needs_fleet(request) => Ok(Decision::allow()),
            Request::Resource(a) if matches!(a.verb, "get" | "list" | "watch") && a.resource != "secrets" => Ok(Decision::allow()),
            Request::Resource(a) if a.resource == "secrets" => {
                Err(ApiError::forbidden(format!("User \"{user}\" cannot read secrets: the dashboard never shows them")))
            }
            Request::Resource(a) => Err(ApiError::forbidden(format!(
                "User \"{user}\" cannot {} {}: the dashboard only reads; use kubectl with your kubeconfig to change things",
                a.verb, a.resource
            ))),
            Request::NonResource { path, .. } => {
                Err(ApiError::forbidden(format!("User \"{user}\" cannot get {path}: a dashboard session reads resources only")))
            }
        },
        Principal::SyncTarget(target) => {
            let Request::Resource(attrs) = request else { unreachable!("non-resource requests are decided above") };
            syncer_scope::check_request(target, attrs)?;
            Ok(syncer_scope::object_rules(target, attrs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res<'a>(workspace: &'a str, verb: &'a str, resource: &'a str, sub: Option<&'a str>) -> Request<'a> {
        Request::Resource(Attributes {
            workspace,
            verb,
            group: "",
            version: "v1",
            resource,
            namespace: "",
            name: Some("x"),
            subresource: sub,
            labels: None,
            fields: None,
        })
    }

    #[test]
    fn a_workspace_token_reaches_its_workspace_only() {
        let p = Principal::Workspace("team-a".into());
        assert!(authorize(&p, &res("team-a", "create", "configmaps", None)).is_ok());
        for other in ["team-b", "root", "*"] {
            assert_eq!(authorize(&p, &res(other, "get", "configmaps", None)).err().map(|e| e.code), Some(403), "{other}");
        }
        assert_eq!(authorize(&p, &res("team-a", "create", "workspaces", Some("token"))).err().map(|e| e.code), Some(403));
        let metrics = Request::NonResource { workspace: "team-a", path: "/metrics" };
        assert_eq!(authorize(&p, &metrics).err().map(|e| e.code), Some(403));
        assert!(authorize(&p, &Request::NonResource { workspace: "team-a", path: "/apis" }).is_ok());
    }

    #[test]
    fn a_dashboard_session_reads_its_scope_and_writes_nothing() {
        let scoped = Principal::Dashboard { workspace: Some("team-a".into()), until: u64::MAX };
        assert!(authorize(&scoped, &res("team-a", "watch", "deployments", None)).is_ok());
        for other in ["team-b", "root", "*"] {
            assert_eq!(authorize(&scoped, &res(other, "list", "deployments", None)).err().map(|e| e.code), Some(403), "{other}");
        }
        let all = Principal::Dashboard { workspace: None, until: u64::MAX };
        for ws in ["team-a", "root", "*"] {
            assert!(authorize(&all, &res(ws, "list", "synctargets", None)).is_ok(), "{ws}");
        }
        for (verb, resource) in
            [("create", "deployments"), ("patch", "synctargets"), ("delete", "workspaces"), ("get", "secrets"), ("list", "secrets")]
        {
            assert_eq!(authorize(&all, &res("root", verb, resource, None)).err().map(|e| e.code), Some(403), "{verb} {resource}");
        }
        assert_eq!(authorize(&all, &res("root", "create", "workspaces", Some("token"))).err().map(|e| e.code), Some(403));
        for path in ["/metrics", "/metrics/token", DASHBOARD_LINK_PATH] {
            assert_eq!(authorize(&all, &Request::NonResource { workspace: "root", path }).err().map(|e| e.code), Some(403), "{path}");
        }
        assert!(authorize(&all, &Request::NonResource { workspace: "root", path: DASHBOARD_SESSION_PATH }).is_ok());
        // Why a workload runs where it runs shows the fleet: the fleet's session only.
        let explain = Request::NonResource { workspace: "team-a", path: "/dashboard/explain/default/web" };
        assert!(authorize(&all, &explain).is_ok());
        assert!(authorize(&Principal::Admin, &explain).is_ok());
        for p in [scoped, Principal::Workspace("team-a".into()), Principal::SignInLink(None), Principal::SyncTarget("east".into())] {
            assert_eq!(authorize(&p, &explain).err().map(|e| e.code), Some(403), "{p:?}");
        }
        // A sign-in link opens a session of its scope and does nothing else.
        let link = Principal::SignInLink(Some("team-a".into()));
        assert!(authorize(&link, &Request::NonResource { workspace: "team-a", path: DASHBOARD_SESSION_PATH }).is_ok());
        assert_eq!(
            authorize(&link, &Request::NonResource { workspace: "team-b", path: DASHBOARD_SESSION_PATH }).err().map(|e| e.code),
            Some(403)
        );
        assert_eq!(authorize(&link, &res("team-a", "get", "deployments", None)).err().map(|e| e.code), Some(403));
        assert_eq!(
            authorize(&link, &Request::NonResource { workspace: "team-a", path: DASHBOARD_LINK_PATH }).err().map(|e| e.code),
            Some(403)
        );
    }

    /// An `apps` request in the namespace `default` of `team-a`.
    fn apps<'a>(verb: &'a str, resource: &'a str, sub: Option<&'a str>) -> Request<'a> {
        let Request::Resource(a) = res("team-a", verb, resource, sub) else { unreachable!() };
        Request::Resource(Attributes { group: "apps", namespace: "default", ..a })
    }

    const WRITES: [(&str, Option<&str>); 9] = [
        ("create", None),
        ("update", None),
        ("patch", None),
        ("delete", None),
        ("deletecollection", None),
        ("update", Some("status")),
        ("patch", Some("status")),
        ("update", Some("scale")),
        ("patch", Some("scale")),
    ];

    #[test]
    fn a_workspace_token_reads_replicasets_and_controller_revisions_but_cannot_write_them() {
        let p = Principal::Workspace("team-a".into());
        for resource in ["replicasets", "controllerrevisions"] {
            for (verb, sub) in [("get", None), ("list", None), ("watch", None), ("get", Some("scale")), ("get", Some("status"))] {
                assert!(authorize(&p, &apps(verb, resource, sub)).is_ok(), "{verb} {resource} {sub:?}");
            }
            for (verb, sub) in WRITES {
                let e = authorize(&p, &apps(verb, resource, sub)).err();
                assert_eq!(e.as_ref().map(|e| e.code), Some(403), "{verb} {resource} {sub:?}");
                let message = e.unwrap().message;
                let what = sub.map_or_else(|| resource.to_string(), |s| format!("{resource}/{s}"));
                assert!(message.starts_with(&format!("User \"flotilla:workspace:team-a\" cannot {verb} {what}: ")), "{message}");
                assert!(message.contains("kept by Flotilla") && message.contains("kubectl rollout undo"), "{message}");
            }
        }
        let e = authorize(&p, &apps("delete", "replicasets", None)).err().unwrap();
        assert_eq!(
            e.message,
            "User \"flotilla:workspace:team-a\" cannot delete replicasets: a workspace's ReplicaSets are kept by Flotilla from its \
             Deployments' templates; change the Deployment, or use kubectl rollout undo"
        );
        let e = authorize(&p, &apps("patch", "controllerrevisions", None)).err().unwrap();
        assert!(
            e.message.contains("ControllerRevisions are kept by Flotilla from its StatefulSets' and DaemonSets' templates"),
            "{}",
            e.message
        );
        // The workloads they come from stay the workspace's to change, and a custom
        // resource that happens to share the plural is not Flotilla's.
        for resource in ["deployments", "statefulsets", "daemonsets"] {
            assert!(authorize(&p, &apps("patch", resource, None)).is_ok(), "{resource}");
        }
        let Request::Resource(a) = apps("delete", "replicasets", None) else { unreachable!() };
        assert!(authorize(&p, &Request::Resource(Attributes { group: "example.com", ..a })).is_ok());
        // Another workspace's keeps its own reason.
        let Request::Resource(a) = apps("delete", "replicasets", None) else { unreachable!() };
        let e = authorize(&p, &Request::Resource(Attributes { workspace: "team-b", ..a })).err().unwrap();
        assert!(e.message.contains("scoped to another workspace"), "{}", e.message);
    }

    #[test]
    fn only_the_admin_writes_replicasets_and_controller_revisions() {
        let others = [
            Principal::Workspace("team-a".into()),
            Principal::Dashboard { workspace: Some("team-a".into()), until: u64::MAX },
            Principal::Dashboard { workspace: None, until: u64::MAX },
            Principal::SignInLink(Some("team-a".into())),
            Principal::SyncTarget("east".into()),
            Principal::Metrics,
        ];
        for resource in ["replicasets", "controllerrevisions"] {
            for (verb, sub) in WRITES {
                assert!(authorize(&Principal::Admin, &apps(verb, resource, sub)).is_ok(), "admin {verb} {resource} {sub:?}");
                for p in &others {
                    assert_eq!(
                        authorize(p, &apps(verb, resource, sub)).err().map(|e| e.code),
                        Some(403),
                        "{p:?} {verb} {resource} {sub:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_metrics_token_reads_metrics_only() {
        let p = Principal::Metrics;
        assert!(authorize(&p, &Request::NonResource { workspace: "root", path: "/metrics" }).is_ok());
        assert_eq!(authorize(&p, &Request::NonResource { workspace: "root", path: "/metrics/token" }).err().map(|e| e.code), Some(403));
        assert_eq!(authorize(&p, &Request::NonResource { workspace: "root", path: "/api" }).err().map(|e| e.code), Some(403));
        assert_eq!(authorize(&p, &res("root", "get", "secrets", None)).err().map(|e| e.code), Some(403));
        assert!(authorize(&Principal::Admin, &Request::NonResource { workspace: "root", path: "/metrics/token" }).is_ok());
    }
}
