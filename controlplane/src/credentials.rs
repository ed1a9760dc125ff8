//! The credentials that every replica of one control plane shares, kept in etcd.
//!
//! Replicas on one etcd serve one control plane, so a client must not care which one
//! answers: they present the same CA, accept the same admin token, and sign and check
//! workspace and syncer tokens with the same key. The first replica to start puts its
//! credentials (made then if its data dir has none) under `<prefix>/meta/credentials`,
//! in one create that only one replica can win; every replica, the first included,
//! then writes what etcd holds into its data dir, where the rest of the server reads
//! them as it does without etcd. These secrets are as safe as etcd is: run etcd with
//! TLS client certificates (docs/ha.md).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use crate::store::EtcdStore;

/// The files of the data dir that every replica shares.
const SHARED: [&str; 4] = ["ca.crt", "ca.key", "admin.token", "token-signing.key"];

/// The etcd meta key they live under.
const KEY: &str = "credentials";

/// Makes this replica's credentials the control plane's: its own if it is the first,
/// otherwise those of the first, written into `dir`.
pub async fn share(store: &EtcdStore, dir: &Path, ca_name: &str) -> anyhow::Result<()> {
    let stored = match store.get_meta(KEY).await? {
        Some(bytes) => bytes,
        None => {
            crate::auth::Auth::load_or_create(dir).context("creating the admin token and the token-signing key")?;
            crate::tls::load_or_create(dir, ca_name, &[]).context("creating the CA")?;
            let mut mine = BTreeMap::new();
            for name in SHARED {
                let path = dir.join(name);
                mine.insert(name, std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?);
            }
            store.create_meta(KEY, serde_json::to_vec(&mine)?).await?
        }
    };
    let shared: BTreeMap<String, String> = serde_json::from_slice(&stored)
        .with_context(|| format!("the credentials in etcd under {} are not what Flotilla stores there", store.meta_key(KEY)))?;
    for name in SHARED {
        let content = shared.get(name).with_context(|| format!("the credentials in etcd lack {name}"))?;
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(content.as_str()) {
            continue;
        }
        if path.exists() {
            tracing::warn!(file = %path.display(), "replacing this data dir's {name} with the one the control plane in etcd uses");
        }
        crate::fsutil::write_private(&path, content.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    }
    tracing::info!(key = %store.meta_key(KEY), "using the credentials shared by every replica");
    Ok(())
}
