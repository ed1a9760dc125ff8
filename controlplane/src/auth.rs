//! Bearer-token authentication and workspace scoping.
//!
//! The admin token (random, `<data-dir>/admin.token`, mode 0600) is valid in every
//! workspace. A workspace token is `fws1.<workspace>.<mac>`, where the MAC is an
//! HMAC-SHA256 over the workspace's name and uid with a key kept in the data dir: it is
//! valid only in that workspace, needs no storage, and dies with the workspace, since a
//! recreated workspace gets a new uid.
//!
//! A syncer's token is `fst1.<synctarget>.<mac>`, bound the same way to its
//! SyncTarget's uid. What it may do is narrower than any workspace: its own
//! SyncTarget, and the objects assigned to its cluster ([`crate::syncer_scope`]).
//!
//! A metrics token (`fmt1.metrics.<mac>`) reads `/metrics` and nothing else.
//!
//! The dashboard's tokens expire: `<kind>.<scope>.<expires>.<until>.<mac>`, where the
//! scope is a workspace or `*` (every workspace, for the admin), `expires` is in Unix
//! seconds, and `until` is the latest that renewals may carry the token to. A sign-in
//! link (`fdl1`, minutes) opens a session and nothing else; a session (`fds1`, hours,
//! renewed while its page is open, for a week at most) reads what its scope covers and
//! writes nothing. Both are bound to the workspace's uid like a workspace token.
//!
//! What each principal may do is decided in one place, [`crate::authz`].

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::ApiError;
use crate::fsutil::write_private;

/// Who a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The admin: every workspace.
    Admin,
    /// Scoped to one workspace.
    Workspace(String),
    /// A pull-mode syncer: its own SyncTarget and the objects assigned to its cluster.
    SyncTarget(String),
    /// A metrics scraper: `/metrics` and nothing else.
    Metrics,
    /// A dashboard session: reads one workspace (`Some`) or every one (`None`); its
    /// renewals reach `until` (Unix seconds) at the latest.
    Dashboard { workspace: Option<String>, until: u64 },
    /// A dashboard sign-in link: opens a session of its scope, and nothing else.
    SignInLink(Option<String>),
}

/// How long a sign-in link printed by `flotilla dashboard` works.
pub const SIGN_IN_LINK_TTL: std::time::Duration = std::time::Duration::from_secs(10 * 60);
/// How long a dashboard session lasts; the page renews it while it is open.
pub const DASHBOARD_SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(12 * 3600);
/// How long renewals may keep a dashboard session alive after its sign-in: a stolen
/// session dies a week after it began at the latest.
pub const DASHBOARD_SESSION_MAX: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The two kinds of expiring dashboard token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DashboardToken {
    /// `fdl1`: a sign-in link.
    Link,
    /// `fds1`: a session.
    Session,
}

impl DashboardToken {
    fn prefix(self) -> &'static str {
        match self {
            DashboardToken::Link => "fdl1",
            DashboardToken::Session => "fds1",
        }
    }
}

/// The scope of a dashboard token that covers every workspace.
const ALL_WORKSPACES: &str = "*";

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// What a scoped token is bound to: its uid is looked up to check the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoped {
    /// A Workspace in `root`.
    Workspace,
    /// A SyncTarget in `root`.
    SyncTarget,
}

impl Principal {
    /// A readable user name, for messages.
    pub fn user(&self) -> String {
        match self {
            Principal::Admin => "flotilla-admin".into(),
            Principal::Workspace(ws) => format!("flotilla:workspace:{ws}"),
            Principal::SyncTarget(t) => format!("flotilla:syncer:{t}"),
            Principal::Metrics => "flotilla:metrics".into(),
            Principal::Dashboard { workspace: Some(ws), .. } => format!("flotilla:dashboard:{ws}"),
            Principal::Dashboard { workspace: None, .. } => "flotilla:dashboard".into(),
            Principal::SignInLink(_) => "flotilla:dashboard-sign-in".into(),
        }
    }
}

/// The server's token authority.
pub struct Auth {
    admin: String,
    key: Vec<u8>,
}

fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

fn load_or_create_secret(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        _ => {
            let s = random_hex(32);
            write_private(path, s.as_bytes())?;
            Ok(s)
        }
    }
}

impl Auth {
    /// Loads or creates the admin token and the signing key in `dir`.
    pub fn load_or_create(dir: &Path) -> std::io::Result<Self> {
        let admin = load_or_create_secret(&dir.join("admin.token"))?;
        let key = load_or_create_secret(&dir.join("token-signing.key"))?.into_bytes();
        Ok(Self { admin, key })
    }

    /// The admin token.
    pub fn admin_token(&self) -> &str {
        &self.admin
    }

    fn mac(&self, workspace: &str, uid: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(workspace.as_bytes());
        mac.update(b"\0");
        mac.update(uid.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The token scoped to a workspace with the given uid.
    pub fn workspace_token(&self, workspace: &str, uid: &str) -> String {
        format!("fws1.{workspace}.{}", self.mac(workspace, uid))
    }

    /// The token of a pull-mode syncer for the SyncTarget with the given uid.
    pub fn sync_target_token(&self, sync_target: &str, uid: &str) -> String {
        // The prefix keeps a SyncTarget's MAC from ever equalling a Workspace's.
        format!("fst1.{sync_target}.{}", self.mac(&format!("synctarget:{sync_target}"), uid))
    }

    /// The token that reads `/metrics` and nothing else: `fmt1.metrics.<mac>`. It is
    /// bound to the signing key alone, so it lasts until the key is replaced.
    pub fn metrics_token(&self) -> String {
        format!("fmt1.metrics.{}", self.mac("metrics:", ""))
    }

    /// An expiring dashboard token of `kind` for `workspace` (`None`: every workspace)
    /// whose uid is `uid` (ignored for every workspace), valid for `ttl` from now but
    /// not past `until`. A session renewed passes its own `until`; a new one (`None`)
    /// may be renewed for [`DASHBOARD_SESSION_MAX`], a link not at all. Returns the
    /// token and when it expires, in Unix seconds.
    pub fn dashboard_token(
        &self,
        kind: DashboardToken,
        workspace: Option<&str>,
        uid: &str,
        ttl: std::time::Duration,
        until: Option<u64>,
    ) -> (String, u64) {
        let now = unix_now();
        let until = until.unwrap_or(match kind {
            DashboardToken::Link => now + ttl.as_secs(),
            DashboardToken::Session => now + DASHBOARD_SESSION_MAX.as_secs(),
        });
        let expires = (now + ttl.as_secs()).min(until);
        let scope = workspace.unwrap_or(ALL_WORKSPACES);
        let mac = self.dashboard_mac(kind, scope, uid, expires, until);
        (format!("{}.{scope}.{expires}.{until}.{mac}", kind.prefix()), expires)
    }

    fn dashboard_mac(&self, kind: DashboardToken, scope: &str, uid: &str, expires: u64, until: u64) -> String {
        let uid = if scope == ALL_WORKSPACES { "" } else { uid };
        // The kind is in the MAC, so a link never passes for a session.
        self.mac(&format!("dashboard:{}:{scope}", kind.prefix()), &format!("{uid}\0{expires}\0{until}"))
    }

    /// Checks a dashboard token (`fdl1` or `fds1`): its MAC, its expiry, and the uid of
    /// the workspace it names.
    fn dashboard_principal(
        &self,
        kind: DashboardToken,
        rest: &str,
        uid_of: impl Fn(Scoped, &str) -> Option<String>,
    ) -> Result<Principal, ApiError> {
        let mut parts = rest.splitn(4, '.');
        let mut next = || parts.next().unwrap_or_default();
        let (scope, expires, until, mac) = (next(), next(), next(), next());
        let expires: u64 = expires.parse().map_err(|_| ApiError::unauthorized())?;
        let until: u64 = until.parse().map_err(|_| ApiError::unauthorized())?;
        let uid = match scope {
            ALL_WORKSPACES => String::new(),
            ws => uid_of(Scoped::Workspace, ws).ok_or_else(ApiError::unauthorized)?,
        };
        if !constant_time_eq(mac.as_bytes(), self.dashboard_mac(kind, scope, &uid, expires, until).as_bytes()) {
            return Err(ApiError::unauthorized());
        }
        if expires <= unix_now() {
            let what = match kind {
                DashboardToken::Link => "this dashboard sign-in link has expired; run `flotilla dashboard` for a new one",
                DashboardToken::Session => "this dashboard session has expired; sign in again (`flotilla dashboard` prints a link)",
            };
            return Err(ApiError::unauthorized_because(what));
        }
        let scope = (scope != ALL_WORKSPACES).then(|| scope.to_string());
        Ok(match kind {
            DashboardToken::Link => Principal::SignInLink(scope),
            DashboardToken::Session => Principal::Dashboard { workspace: scope, until },
        })
    }

    /// Authenticates an `Authorization` header. `uid_of` resolves the uid of the
    /// Workspace or SyncTarget a scoped token names.
    pub fn authenticate(&self, header: Option<&str>, uid_of: impl Fn(Scoped, &str) -> Option<String>) -> Result<Principal, ApiError> {
        let token = header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim).ok_or_else(ApiError::unauthorized)?;
        if constant_time_eq(token.as_bytes(), self.admin.as_bytes()) {
            return Ok(Principal::Admin);
        }
        if token.starts_with("fmt1.") {
            return match constant_time_eq(token.as_bytes(), self.metrics_token().as_bytes()) {
                true => Ok(Principal::Metrics),
                false => Err(ApiError::unauthorized()),
            };
        }
        for kind in [DashboardToken::Link, DashboardToken::Session] {
            if let Some(rest) = token.strip_prefix(kind.prefix()).and_then(|r| r.strip_prefix('.')) {
                return self.dashboard_principal(kind, rest, uid_of);
            }
        }
        let mut parts = token.splitn(3, '.');
        let (kind, name, mac) = (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        type Mint = fn(&Auth, &str, &str) -> String;
        let (scoped, expected): (Scoped, Mint) = match kind {
            Some("fws1") => (Scoped::Workspace, Self::workspace_token),
            Some("fst1") => (Scoped::SyncTarget, Self::sync_target_token),
            _ => return Err(ApiError::unauthorized()),
        };
        let uid = uid_of(scoped, name).ok_or_else(ApiError::unauthorized)?;
        let want = expected(self, name, &uid);
        let want_mac = want.rsplit('.').next().unwrap_or_default();
        if !constant_time_eq(mac.as_bytes(), want_mac.as_bytes()) {
            return Err(ApiError::unauthorized());
        }
        Ok(match scoped {
            Scoped::Workspace => Principal::Workspace(name.to_string()),
            Scoped::SyncTarget => Principal::SyncTarget(name.to_string()),
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_tokens_are_scoped_and_die_with_the_uid() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load_or_create(dir.path()).unwrap();
        let tok = auth.workspace_token("team-a", "uid-1");
        let header = format!("Bearer {tok}");
        let p = auth.authenticate(Some(&header), |_, _| Some("uid-1".into())).unwrap();
        assert_eq!(p, Principal::Workspace("team-a".into()));
        // Recreated workspace (new uid): the old token no longer works.
        assert_eq!(auth.authenticate(Some(&header), |_, _| Some("uid-2".into())).unwrap_err().code, 401);
        assert_eq!(auth.authenticate(None, |_, _| None).unwrap_err().code, 401);
        let admin = format!("Bearer {}", auth.admin_token());
        assert_eq!(auth.authenticate(Some(&admin), |_, _| None).unwrap(), Principal::Admin);
        // A syncer token is never valid as a workspace token (syncer_scope decides the rest).
        let st = format!("Bearer {}", auth.sync_target_token("team-a", "uid-1"));
        let p = auth.authenticate(Some(&st), |kind, _| (kind == Scoped::SyncTarget).then(|| "uid-1".into())).unwrap();
        assert_eq!(p, Principal::SyncTarget("team-a".into()));
        let forged = header.replace("fws1", "fst1");
        assert_eq!(auth.authenticate(Some(&forged), |_, _| Some("uid-1".into())).unwrap_err().code, 401);
        let metrics = format!("Bearer {}", auth.metrics_token());
        assert_eq!(auth.authenticate(Some(&metrics), |_, _| None).unwrap(), Principal::Metrics);
        assert_eq!(auth.authenticate(Some(&format!("{metrics}0")), |_, _| None).unwrap_err().code, 401);
        // The same data dir gives the same admin token.
        assert_eq!(Auth::load_or_create(dir.path()).unwrap().admin_token(), auth.admin_token());
    }

    #[test]
    fn dashboard_tokens_expire_keep_their_kind_and_die_with_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::load_or_create(dir.path()).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let bearer = |t: &str| format!("Bearer {t}");
        let uid = |_: Scoped, _: &str| Some("uid-1".to_string());
        let (session, _) = auth.dashboard_token(DashboardToken::Session, Some("team-a"), "uid-1", hour, None);
        let until = unix_now() + DASHBOARD_SESSION_MAX.as_secs();
        match auth.authenticate(Some(&bearer(&session)), uid).unwrap() {
            Principal::Dashboard { workspace, until: u } => assert!(workspace.as_deref() == Some("team-a") && u.abs_diff(until) <= 1),
            p => panic!("{p:?}"),
        }
        // A renewal keeps the first sign-in's limit, and never expires past it.
        let (renewed, expires) = auth.dashboard_token(DashboardToken::Session, Some("team-a"), "uid-1", hour, Some(unix_now() + 60));
        assert!(expires <= unix_now() + 60, "{expires}");
        assert!(matches!(auth.authenticate(Some(&bearer(&renewed)), uid).unwrap(), Principal::Dashboard { .. }));
        // A new workspace of the same name (a new uid) does not inherit it.
        assert_eq!(auth.authenticate(Some(&bearer(&session)), |_, _| Some("uid-2".into())).unwrap_err().code, 401);
        let (link, _) = auth.dashboard_token(DashboardToken::Link, None, "", hour, None);
        assert_eq!(auth.authenticate(Some(&bearer(&link)), |_, _| None).unwrap(), Principal::SignInLink(None));
        // A link relabelled as a session, a changed scope or a later expiry fail the MAC.
        let forged = link.replacen("fdl1", "fds1", 1);
        assert_eq!(auth.authenticate(Some(&bearer(&forged)), |_, _| None).unwrap_err().code, 401);
        let widened = session.replacen(".team-a.", ".*.", 1);
        assert_eq!(auth.authenticate(Some(&bearer(&widened)), uid).unwrap_err().code, 401);
        // A later expiry, or a later limit of renewals, fails the MAC.
        let parts: Vec<&str> = session.split('.').collect();
        let later = format!("{}.{}.{}.{}.{}", parts[0], parts[1], parts[2].parse::<u64>().unwrap() + 1, parts[3], parts[4]);
        assert_eq!(auth.authenticate(Some(&bearer(&later)), uid).unwrap_err().code, 401);
        let longer = format!("{}.{}.{}.{}.{}", parts[0], parts[1], parts[2], parts[3].parse::<u64>().unwrap() + 86400, parts[4]);
        assert_eq!(auth.authenticate(Some(&bearer(&longer)), uid).unwrap_err().code, 401);
        // An expired token is refused, and says what to do.
        let (old, _) = auth.dashboard_token(DashboardToken::Link, Some("team-a"), "uid-1", std::time::Duration::ZERO, None);
        let e = auth.authenticate(Some(&bearer(&old)), uid).unwrap_err();
        assert_eq!(e.code, 401);
        assert!(e.to_string().contains("flotilla dashboard"), "{e}");
        for junk in ["fds1", "fds1.", "fds1.team-a", "fds1.team-a.x.y", "fds1.team-a.1.x.y", "fds1.*.99999999999999999999999.1.ab"] {
            assert_eq!(auth.authenticate(Some(&bearer(junk)), uid).unwrap_err().code, 401, "{junk}");
        }
    }
}
