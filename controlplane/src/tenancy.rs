//! Tenancy: who a request is, what it may do, which logical clusters are served, and
//! the routes that mint credentials. The generic server ([`crate::http`]) calls these
//! hooks and knows nothing of workspaces, syncers or tokens, as kcp keeps its tenancy
//! in filters and authorizers over a generic API server.
//!
//! Two tenancies exist:
//! - [`Workspaces`], Flotilla's control plane: workspaces in `root` are the logical
//!   clusters; workspace, syncer and metrics tokens are minted by the admin and bound
//!   to the uid of their object, and [`crate::authz`] decides what each may do;
//! - [`SingleCluster`], a simulated physical cluster: one logical cluster, `root`, and
//!   the admin and metrics tokens only.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{json, Value};

use placement_api::keys::ROOT_WORKSPACE;

use crate::access::{Decision, Request};
use crate::api::Api;
use crate::auth::{Auth, DashboardToken, Principal, Scoped, DASHBOARD_SESSION_TTL, SIGN_IN_LINK_TTL};
use crate::authz::{DASHBOARD_LINK_PATH, DASHBOARD_SESSION_PATH};
use crate::error::{ApiError, ObjRef};

/// An answer of a tenancy's own route: the status code and the JSON body.
pub type Answer = Result<(u16, Value), ApiError>;

/// The hooks a tenancy plugs into the server with.
pub trait Tenancy: Send + Sync {
    /// Who the request is, from its `Authorization` header (401 when no one).
    fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, ApiError>;

    /// The one authorization point: whether `principal` may make `request`, with the
    /// object-level rules that come with the answer.
    fn authorize(&self, principal: &Principal, request: &Request<'_>) -> Result<Decision, ApiError>;

    /// Refuses a logical cluster that is not served. It runs after authorization, so
    /// a principal learns only of the clusters it may reach whether they exist.
    fn check_served(&self, workspace: &str, path: &str) -> Result<(), ApiError>;

    /// Answers a request on a route of the tenancy's own (minting a token), or `None`
    /// when the request is not for one.
    fn route(&self, request: &Request<'_>, method: &Method) -> Option<Answer>;

    /// Whether the web dashboard is served (`/dashboard/`).
    fn serves_dashboard(&self) -> bool {
        false
    }

    /// Answers the dashboard's token routes, [`DASHBOARD_SESSION_PATH`] and
    /// [`DASHBOARD_LINK_PATH`], for an authorized `principal`; `None` for other paths.
    fn dashboard(&self, _principal: &Principal, _workspace: &str, _path: &str, _method: &Method) -> Option<Answer> {
        None
    }
}

/// Flotilla's control plane: workspaces as logical clusters, and scoped tokens.
pub struct Workspaces {
    api: Arc<Api>,
    auth: Arc<Auth>,
}

impl Workspaces {
    /// The tenancy of a control plane whose engine is `api` and whose token authority is `auth`.
    pub fn new(api: Arc<Api>, auth: Arc<Auth>) -> Self {
        Self { api, auth }
    }

    /// The uid of a live object of `root` (`group`/`plural`, cluster-scoped), found
    /// through the registry's storage layout.
    fn live_uid_in_root(&self, group: &str, plural: &str, name: &str) -> Option<String> {
        let rt = self.api.registry.lookup(ROOT_WORKSPACE, group, placement_api::VERSION, plural)?;
        self.api.store.get_doc(&rt.key(ROOT_WORKSPACE, "", name))?.live_uid()
    }

    /// The uid of a served workspace (`root` has a fixed one).
    fn workspace_uid(&self, name: &str) -> Option<String> {
        if name == ROOT_WORKSPACE {
            return Some(ROOT_WORKSPACE.to_string());
        }
        self.live_uid_in_root(placement_api::TENANCY_GROUP, "workspaces", name)
    }

    /// The uid of a SyncTarget in `root` that is not being deleted.
    fn sync_target_uid(&self, name: &str) -> Option<String> {
        self.live_uid_in_root(placement_api::WORKLOAD_GROUP, "synctargets", name)
    }
}

impl Tenancy for Workspaces {
    fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, ApiError> {
        self.auth.authenticate(authorization, |kind, name| match kind {
            Scoped::Workspace => self.workspace_uid(name),
            Scoped::SyncTarget => self.sync_target_uid(name),
        })
    }

    fn authorize(&self, principal: &Principal, request: &Request<'_>) -> Result<Decision, ApiError> {
        crate::authz::authorize(principal, request)
    }

    fn check_served(&self, workspace: &str, _path: &str) -> Result<(), ApiError> {
        if workspace != ROOT_WORKSPACE && workspace != "*" && self.workspace_uid(workspace).is_none() {
            return Err(ApiError::not_found(ObjRef { group: placement_api::TENANCY_GROUP, resource: "workspaces", name: workspace }));
        }
        Ok(())
    }

    /// `POST .../workspaces/<name>/token` and `.../synctargets/<name>/token` in `root`,
    /// and `POST /metrics/token` ([`crate::authz`] lets only the admin here).
    fn route(&self, request: &Request<'_>, method: &Method) -> Option<Answer> {
        let a = match request {
            Request::NonResource { path: "/metrics/token", .. } => return Some(metrics_token(&self.auth, method)),
            Request::NonResource { .. } => return None,
            Request::Resource(a) => a,
        };
        let root_object = a.workspace == ROOT_WORKSPACE && a.namespace.is_empty();
        if !root_object || a.subresource != Some("token") || a.version != placement_api::VERSION {
            return None;
        }
        let name = a.name.unwrap_or_default();
        let (uid, kind, token): (_, _, &dyn Fn(&str) -> String) = match (a.group, a.resource) {
            (placement_api::TENANCY_GROUP, "workspaces") => {
                (self.workspace_uid(name), "WorkspaceToken", &|uid| self.auth.workspace_token(name, uid))
            }
            (placement_api::WORKLOAD_GROUP, "synctargets") => {
                (self.sync_target_uid(name), "SyncTargetToken", &|uid| self.auth.sync_target_token(name, uid))
            }
            _ => return None,
        };
        Some(mint(method, ObjRef { group: a.group, resource: a.resource, name }, kind, uid, token))
    }

    fn serves_dashboard(&self) -> bool {
        true
    }

    /// A session opens on any credential that may read a scope (the admin's, a
    /// workspace's, a sign-in link, a session being renewed) and is never wider than
    /// it; a link is minted by the admin or a workspace for its own scope. The admin
    /// gets the workspace of the path, or every workspace on a bare path.
    fn dashboard(&self, principal: &Principal, workspace: &str, path: &str, method: &Method) -> Option<Answer> {
        let kind = match path {
            DASHBOARD_SESSION_PATH => DashboardToken::Session,
            DASHBOARD_LINK_PATH => DashboardToken::Link,
            _ => return None,
        };
        Some(self.dashboard_token(principal, workspace, kind, method))
    }
}

impl Workspaces {
    fn dashboard_token(&self, principal: &Principal, workspace: &str, kind: DashboardToken, method: &Method) -> Answer {
        if method != Method::POST {
            return Err(ApiError::method_not_allowed("POST to open a dashboard session or to mint a sign-in link"));
        }
        let path_scope = (workspace != ROOT_WORKSPACE && workspace != "*").then(|| workspace.to_string());
        // A renewed session keeps the limit its sign-in set; any other opens a new one.
        let (scope, until) = match (principal, kind) {
            (Principal::Admin, _) => (path_scope, None),
            (Principal::Workspace(ws), _) => (Some(ws.clone()), None),
            (Principal::SignInLink(scope), DashboardToken::Session) => (scope.clone(), None),
            (Principal::Dashboard { workspace, until }, DashboardToken::Session) => (workspace.clone(), Some(*until)),
            (p, _) => {
                return Err(ApiError::forbidden(format!(
                    "User \"{}\" cannot open the dashboard: sign in with the admin token, a workspace's token or a link from `flotilla dashboard`",
                    p.user()
                )))
            }
        };
        let uid = match &scope {
            Some(ws) => self
                .workspace_uid(ws)
                .ok_or_else(|| ApiError::not_found(ObjRef { group: placement_api::TENANCY_GROUP, resource: "workspaces", name: ws }))?,
            None => String::new(),
        };
        let ttl = match kind {
            DashboardToken::Link => SIGN_IN_LINK_TTL,
            DashboardToken::Session => DASHBOARD_SESSION_TTL,
        };
        let (token, expires) = self.auth.dashboard_token(kind, scope.as_deref(), &uid, ttl, until);
        let expires_at =
            jiff::Timestamp::from_second(expires as i64).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
        Ok((
            201,
            json!({
                "kind": match kind { DashboardToken::Link => "DashboardSignInLink", DashboardToken::Session => "DashboardSession" },
                "apiVersion": format!("{}/{}", placement_api::TENANCY_GROUP, placement_api::VERSION),
                "status": {"token": token, "expiresAt": expires_at, "workspace": scope},
            }),
        ))
    }
}

/// A simulated physical cluster: one logical cluster, and no scoped tokens.
pub struct SingleCluster {
    auth: Arc<Auth>,
}

impl SingleCluster {
    /// The tenancy of a single-cluster server whose token authority is `auth`.
    pub fn new(auth: Arc<Auth>) -> Self {
        Self { auth }
    }
}

impl Tenancy for SingleCluster {
    fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, ApiError> {
        self.auth.authenticate(authorization, |_, _| None)
    }

    fn authorize(&self, principal: &Principal, request: &Request<'_>) -> Result<Decision, ApiError> {
        crate::authz::authorize(principal, request)
    }

    fn check_served(&self, workspace: &str, path: &str) -> Result<(), ApiError> {
        if workspace != ROOT_WORKSPACE {
            return Err(ApiError::no_route(path));
        }
        Ok(())
    }

    fn route(&self, request: &Request<'_>, method: &Method) -> Option<Answer> {
        matches!(request, Request::NonResource { path: "/metrics/token", .. }).then(|| metrics_token(&self.auth, method))
    }
}

/// `POST /metrics/token`: a token that reads `/metrics` and nothing else.
fn metrics_token(auth: &Auth, method: &Method) -> Answer {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed("POST to /metrics/token to mint a metrics token"));
    }
    Ok((
        201,
        json!({
            "apiVersion": format!("{}/{}", placement_api::TENANCY_GROUP, placement_api::VERSION),
            "kind": "MetricsToken",
            "metadata": {"name": "metrics"},
            "status": {"token": auth.metrics_token()},
        }),
    ))
}

/// `POST .../<resource>/<name>/token`: a token scoped to the object, bound to its `uid`.
fn mint(method: &Method, obj: ObjRef<'_>, kind: &str, uid: Option<String>, token: &dyn Fn(&str) -> String) -> Answer {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!("POST a {kind} request to mint a token")));
    }
    let uid = uid.ok_or_else(|| ApiError::not_found(obj.clone()))?;
    Ok((
        201,
        json!({
            "apiVersion": format!("{}/{}", obj.group, placement_api::VERSION),
            "kind": kind,
            "metadata": {"name": obj.name},
            "status": {"token": token(&uid)},
        }),
    ))
}
