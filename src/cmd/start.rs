//! `flotilla start`: the control plane in one process.

use std::path::Path;

use futures::FutureExt;

use controlplane::server::{self, ServerConfig};

use crate::cli::StartArgs;

/// The scheduler's Lease identity, kept in the data dir. Only one process can serve a
/// data dir, so a restarted control plane is the same scheduler as before: it renews
/// the Lease its predecessor held at once, instead of waiting for it to expire (15 s
/// without scheduling or failover after a crash).
fn scheduler_identity(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("scheduler-identity");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
        _ => {
            let id = format!("flotilla-start-{:016x}", rand::random::<u64>());
            // Private like everything in the data dir (controlplane::fsutil).
            controlplane::fsutil::write_private(&path, format!("{id}\n").as_bytes())
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}; check the data dir's permissions", path.display()))?;
            Ok(id)
        }
    }
}

/// Runs until Ctrl-C or SIGTERM, then shuts down gracefully.
pub async fn run(data_dir: &Path, args: StartArgs) -> anyhow::Result<()> {
    serve(data_dir, args, |_| async {
        println!("ready");
        Ok(())
    })
    .await
}

/// Runs the control plane and its controllers. Once they run, `started` gets the admin
/// kubeconfig and finishes the start-up (it prints "ready"); what it returns is kept
/// until Ctrl-C or SIGTERM, and dropped after the controllers have stopped and before
/// the server does. An error from `started` stops everything and is returned.
pub async fn serve<G, F, Fut>(data_dir: &Path, args: StartArgs, started: F) -> anyhow::Result<()>
where
    F: FnOnce(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<G>>,
{
    let registry = prometheus::Registry::new();
    // The scheduler's metrics are served on the control plane's /metrics.
    let scheduler_metrics = scheduler::metrics::Metrics::new(&registry)?;
    syncer::metrics::register(&registry)?;
    runtime::controller::register(&registry)?;
    let etcd = args.etcd();
    let replicated = etcd.is_some();
    // On etcd other replicas may share the control plane: its controllers run below,
    // each under a Lease, instead of in every server.
    let config = ServerConfig {
        etcd,
        run_controllers: !replicated,
        tls_sans: args.tls_san.clone(),
        ..ServerConfig::control_plane(data_dir, args.listen)
    };
    let srv = server::start(config, registry).await?;
    println!("flotilla control plane serving on {}", controlplane::kubeconfig::server_url(srv.addr));
    println!("kubeconfig: {}", srv.kubeconfig.display());
    println!("try: kubectl --kubeconfig {} get namespaces", srv.kubeconfig.display());
    // The controllers use the Kubernetes API as any client does (DESIGN: the syncer and
    // scheduler use only the Kubernetes API), through kube clients whose requests the
    // server handles in this process rather than over a loopback TLS connection.
    let local = srv.in_process();
    let client = move || {
        kube::Client::new(
            tower::service_fn({
                let local = local.clone();
                move |req| local.call(req)
            }),
            "default",
        )
    };
    // The dashboard explains a placement with the scheduler's own core, as the CLI does.
    srv.serve_explain(std::sync::Arc::new({
        let client = client.clone();
        move |workspace: String, namespace: String, name: String| {
            let base = client();
            async move { super::explain::text(&base, &workspace, &namespace, &name).await.map_err(|e| format!("{e:#}")) }.boxed()
        }
    }));
    // The companions controller tells this process's syncers at once where each
    // companion goes, before its labels say so.
    let followers = std::sync::Arc::new(runtime::followers::Followers::default());
    let identity = scheduler_identity(data_dir)?;
    // Replicas share the clusters out: each syncs those it holds the Lease of.
    let shard = replicated.then(|| syncer::shard::Shard { identity: identity.clone(), timing: runtime::leader::Timing::default() });
    let options = syncer::push::Options {
        heartbeat_interval: args.heartbeat_interval,
        resync: args.resync,
        followers: Some(followers.clone()),
        shard,
    };
    let resync = args.resync;
    // Alone on its data dir, a server is the only one: its controllers just run.
    // Replicas on etcd each hold a Lease per controller, and run it while they do. They
    // stop in the order they are added: the syncers first, the control plane's own
    // controllers last.
    let mut controllers = runtime::manager::Manager::new(client(), replicated.then(|| identity.clone()));
    controllers.add_unleased("push-mode syncers", syncer::push::run(client(), options).boxed());
    controllers.add("flotilla-companions", {
        let (client, followers) = (client.clone(), followers.clone());
        Box::new(move || workspace_controllers::companions::run(client(), resync, followers.clone()).boxed())
    });
    // Rollout history: ReplicaSets for Deployments, ControllerRevisions for
    // StatefulSets and DaemonSets, under one lease.
    controllers.add("flotilla-revisions", {
        let client = client.clone();
        Box::new(move || {
            let c = client();
            async move {
                tokio::join!(
                    workspace_controllers::revisions::run(c.clone(), resync),
                    workspace_controllers::controller_revisions::run(c, resync)
                );
            }
            .boxed()
        })
    });
    // The workloads' status, and the finished Jobs it says are due
    // (ttlSecondsAfterFinished), under one lease.
    controllers.add("flotilla-status-aggregator", {
        let client = client.clone();
        Box::new(move || {
            let c = client();
            async move {
                tokio::join!(workspace_controllers::aggregate::run(c.clone(), resync), workspace_controllers::job_ttl::run(c, resync));
            }
            .boxed()
        })
    });
    // CronJobs' schedules, which run in the workspace so that no cluster fires one.
    controllers.add("flotilla-cronjobs", {
        let client = client.clone();
        Box::new(move || workspace_controllers::cronjobs::run(client(), resync).boxed())
    });
    controllers.add("flotilla-companion-status", {
        let client = client.clone();
        Box::new(move || workspace_controllers::companion_status::run(client(), resync).boxed())
    });
    if replicated {
        let api = srv.api.clone();
        controllers.add("flotilla-controlplane-controllers", Box::new(move || controlplane::controllers::run(api.clone()).boxed()));
    }
    let scheduling = (!args.no_scheduler).then(|| -> anyhow::Result<_> {
        let options = args.failover.apply(scheduler::Options {
            heartbeat_grace: args.heartbeat_grace,
            instance: identity.clone(),
            metrics: scheduler_metrics,
            ..Default::default()
        });
        Ok((client(), options))
    });
    let scheduling = scheduling.transpose()?;
    let mut kept = None;
    let mut failed = None;
    let until_stopped = async {
        // Ctrl-C or SIGTERM also stops a start-up that is still under way (`up` may
        // wait up to a minute for its clusters); what it started is dropped with it.
        tokio::select! {
            r = started(srv.kubeconfig.clone()) => match r {
                Ok(g) => {
                    kept = Some(g);
                    super::shutdown_signal().await;
                }
                Err(e) => failed = Some(e),
            },
            _ = super::shutdown_signal() => tracing::info!("stopped while starting"),
        }
    };
    match scheduling {
        // The scheduler stops first, giving up its Lease, so a standby takes over at once.
        Some((base, options)) => {
            scheduler::run_until(base, options, Some(scheduler::leader::Timing::default()), until_stopped).await;
        }
        None => until_stopped.await,
    }
    tracing::info!("shutting down");
    crate::logging::stopping();
    // The controllers stop before what `started` runs (`up`'s clusters) and before the
    // server, so none of them writes to the store after it has shut down, and none
    // warns that a cluster or the server went away.
    // Everything a replica held has stopped: the others may take it at once.
    let released = controllers.stop().await;
    if replicated {
        tracing::info!(released, "gave this replica's Leases up");
    }
    drop(kept);
    srv.shutdown().await?;
    failed.map_or(Ok(()), Err)
}
