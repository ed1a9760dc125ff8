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
//! A metrics token (`fmt1.metrics.<mac>`) reads `/metrics` and nothing else. What each
//! principal may do is decided in one place, [`crate::authz`].

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
}
