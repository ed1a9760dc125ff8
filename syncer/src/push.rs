//! Push mode: the control plane process runs one syncer (and its heartbeat) per
//! SyncTarget that has a kubeconfig Secret.
//!
//! Tasks start and stop as SyncTargets and their Secrets come and go, and restart when
//! the kubeconfig changes. Each runs on its own tokio task: a panic in one is logged and
//! that syncer restarted after a pause, and never reaches the others.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use placement_api::{SyncMode, SyncTarget};
use runtime::followers::Followers;
use tracing::Instrument;

use crate::sync::Settings;
use crate::AbortOnDrop;

/// How long a syncer that panicked waits before it starts again.
const RESTART_PAUSE: Duration = Duration::from_secs(2);

/// The settings every push-mode syncer gets.
#[derive(Debug, Clone)]
pub struct Options {
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Resync interval.
    pub resync: Duration,
    /// Where companions go, from the companions controller of this process, if it runs
    /// one ([`runtime::followers`]).
    pub followers: Option<Arc<Followers>>,
    /// Share the SyncTargets out among the replicas of the control plane, each synced
    /// by one replica under its Lease ([`crate::shard`]); `None` syncs every one here.
    pub shard: Option<crate::shard::Shard>,
}

/// Runs push-mode syncers for the SyncTargets of the control plane that `base` reaches
/// (a client of the server's root URL, without a workspace path) until the task is
/// dropped. `flotilla start` serves `base` in-process, so a heartbeat never waits behind
/// sync traffic on a shared connection.
pub async fn run(base: Client, options: Options) {
    let root = crate::clients::workspace(&base, placement_api::ROOT_WORKSPACE);
    let (targets, targets_w) = reflector::store::<SyncTarget>();
    let (secrets, secrets_w) = reflector::store::<Secret>();
    let t = watcher(Api::<SyncTarget>::all(root.clone()), watcher::Config::default()).default_backoff().reflect(targets_w).map(|_| ());
    let s = watcher(Api::<Secret>::namespaced(root.clone(), placement_api::SYSTEM_NAMESPACE), watcher::Config::default())
        .default_backoff()
        .reflect(secrets_w)
        .map(|_| ());
    let mut changes = futures::stream::select(t, s).boxed();
    let (live_tx, mut live) = tokio::sync::watch::channel(Vec::new());
    let _members = options.shard.clone().map(|shard| AbortOnDrop(tokio::spawn(crate::shard::members(root.clone(), shard, live_tx))));
    let (assignment_tx, assignment) = tokio::sync::watch::channel(crate::shard::Assignment::new());
    let mut sharded = options.shard.is_some();
    // SyncTarget name → (the kubeconfig it runs with, its task).
    let mut running: HashMap<String, (String, AbortOnDrop<()>)> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            c = changes.next() => if c.is_none() { return },
            _ = tick.tick() => {}
            changed = live.changed(), if sharded => sharded = changed.is_ok(),
        }
        if targets.wait_until_ready().now_or_never().is_none() || secrets.wait_until_ready().now_or_never().is_none() {
            continue;
        }
        let mut wanted: HashMap<String, String> = HashMap::new();
        for st in targets.state() {
            let Some(name) = st.metadata.name.clone() else { continue };
            let Some(r) = st.spec.kubeconfig_secret_ref.as_ref().filter(|_| st.spec.sync_mode == SyncMode::Push) else { continue };
            let secret = secrets.state().into_iter().find(|s| s.metadata.name.as_deref() == Some(r.name.as_str()));
            let kubeconfig =
                secret.and_then(|s| s.data.as_ref().and_then(|d| d.get(&r.key)).map(|b| String::from_utf8_lossy(&b.0).into_owned()));
            match kubeconfig {
                Some(k) => {
                    wanted.insert(name, k);
                }
                None => tracing::warn!(sync_target = %name, secret = %r.name, "the kubeconfig Secret is missing; its syncer waits for it"),
            }
        }
        if options.shard.is_some() {
            let names: Vec<String> = wanted.keys().cloned().collect();
            let next = crate::shard::assign(&names, &live.borrow());
            assignment_tx.send_if_modified(|current| {
                let changed = *current != next;
                if changed {
                    *current = next;
                }
                changed
            });
        }
        running.retain(|name, (kubeconfig, _)| {
            let keep = wanted.get(name) == Some(kubeconfig);
            if !keep {
                tracing::info!(sync_target = %name, "stopping its syncer");
                crate::metrics::forget(name);
            }
            keep
        });
        for (name, kubeconfig) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            let sync = {
                let (name, kubeconfig, base, root, options) =
                    (name.clone(), kubeconfig.clone(), base.clone(), root.clone(), options.clone());
                move || supervise(name.clone(), kubeconfig.clone(), base.clone(), root.clone(), options.clone())
            };
            let task = match options.shard.clone() {
                None => {
                    tracing::info!(sync_target = %name, "starting its syncer");
                    tokio::spawn(sync())
                }
                Some(shard) => tokio::spawn(crate::shard::run_target(root.clone(), name.clone(), shard, assignment.clone(), sync)),
            };
            running.insert(name, (kubeconfig, AbortOnDrop(task)));
        }
    }
}

/// Runs one cluster's syncer and heartbeat, restarting them if they panic.
async fn supervise(name: String, kubeconfig: String, base: Client, root: Client, options: Options) {
    let span = tracing::info_span!("push", sync_target = %name);
    async move {
        loop {
            let downstream = match downstream_client(&kubeconfig).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "cannot use the stored kubeconfig; fix it with `flotilla cluster register` again");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    continue;
                }
            };
            let settings = Settings { sync_target: name.clone(), resync: options.resync, followers: options.followers.clone() };
            let task = AbortOnDrop(tokio::spawn(crate::run_with_heartbeat(
                settings,
                options.heartbeat_interval,
                base.clone(),
                root.clone(),
                downstream,
            )));
            match task.await {
                Ok(()) => return,
                Err(e) if e.is_panic() => {
                    tracing::error!(error = %e, pause = ?RESTART_PAUSE, "the syncer panicked; restarting it");
                    tokio::time::sleep(RESTART_PAUSE).await;
                }
                Err(_) => return,
            }
        }
    }
    .instrument(span)
    .await
}

async fn downstream_client(kubeconfig: &str) -> anyhow::Result<Client> {
    let kc = Kubeconfig::from_yaml(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    crate::clients::downstream(config)
}
