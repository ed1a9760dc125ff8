//! Running the control plane: the data dir, TLS, tokens, bootstrap of the root
//! workspace, the in-process controllers, and the HTTPS server ([`listener`]) with
//! graceful shutdown.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::allocator::{Ipv4Cidr, ServiceAllocator};
use crate::api::{Api, FieldValidation, Scope, WriteOptions};
use crate::auth::Auth;
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::registry::{Profile, Registry};
use crate::store::{EtcdConfig, EtcdStore, SqliteStore, Store, WindowLimits};
use crate::tenancy::{SingleCluster, Tenancy, Workspaces};
use crate::{controllers, kubeconfig, listener, tls};

/// How long in-flight requests get to finish on shutdown. Watches are cut at once
/// (clients resume them); short requests finish well within this.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How the server is run.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Data dir: store, CA, tokens.
    pub data_dir: PathBuf,
    /// Where the admin kubeconfig is written.
    pub kubeconfig: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Serve one logical cluster at `/` (simulated physical clusters).
    pub single_cluster: bool,
    /// Name used for the CA, kubeconfig cluster and context names.
    pub name: String,
    /// How far back watches can resume.
    pub event_window: WindowLimits,
    /// The service range a single-cluster server allocates cluster IPs from; a control
    /// plane allocates none.
    pub service_cidr: Ipv4Cidr,
    /// Keep the data in etcd instead of `<data-dir>/store.db`, shared with every other
    /// replica on the same etcd and prefix.
    pub etcd: Option<EtcdConfig>,
    /// Names the serving certificate is valid for besides localhost and the listen address.
    pub tls_sans: Vec<String>,
    /// Run the control plane's own controllers ([`controllers::run`]) in the server.
    /// Replicas on etcd run them elsewhere, under a Lease, so that one runs them.
    pub run_controllers: bool,
}

impl ServerConfig {
    /// Flotilla's control plane: workspaces, kubeconfig at `<data-dir>/admin.kubeconfig`.
    pub fn control_plane(data_dir: &Path, listen: SocketAddr) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            kubeconfig: data_dir.join("admin.kubeconfig"),
            listen,
            single_cluster: false,
            name: "flotilla".into(),
            event_window: WindowLimits::CONTROL_PLANE,
            service_cidr: Ipv4Cidr::default(),
            etcd: None,
            tls_sans: Vec::new(),
            run_controllers: true,
        }
    }

    /// A simulated physical cluster named `name`: one logical cluster at `/`, state in
    /// `data_dir`, and a kind-shaped kubeconfig at `kubeconfig`.
    pub fn physical_cluster(name: &str, data_dir: &Path, kubeconfig: PathBuf, listen: SocketAddr) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            kubeconfig,
            listen,
            single_cluster: true,
            name: name.into(),
            event_window: WindowLimits::PHYSICAL_CLUSTER,
            service_cidr: Ipv4Cidr::default(),
            etcd: None,
            tls_sans: Vec::new(),
            run_controllers: true,
        }
    }
}

/// A started server.
pub struct Server {
    /// The engine, for in-process callers (tests, the simulator).
    pub api: Arc<Api>,
    /// The address actually bound (useful with port 0).
    pub addr: SocketAddr,
    /// The admin kubeconfig path.
    pub kubeconfig: PathBuf,
    /// Token authority.
    pub auth: Arc<Auth>,
    router: axum::Router,
    serving: listener::Serving,
    controllers: Option<tokio::task::JoinHandle<()>>,
    stop: tokio::sync::watch::Sender<bool>,
    explain: Arc<std::sync::OnceLock<crate::dashboard::Explainer>>,
    pod_logs: Arc<std::sync::OnceLock<Arc<dyn crate::pod_logs::PodLogs>>>,
    _lock: File,
}

impl Server {
    /// The API for controllers that run in this process (the scheduler and the push-mode
    /// syncers of `flotilla start`), as the admin.
    pub fn in_process(&self) -> InProcess {
        let mut authorization =
            ::http::HeaderValue::from_str(&format!("Bearer {}", self.auth.admin_token())).expect("a token is printable ASCII");
        authorization.set_sensitive(true);
        InProcess { router: self.router.clone(), authorization }
    }

    /// Lets the dashboard explain placements with `explainer` (the first one set stays).
    pub fn serve_explain(&self, explainer: crate::dashboard::Explainer) {
        let _ = self.explain.set(explainer);
    }

    /// Serves `pods/log` from `logs`: a cluster that runs its pods says how their
    /// containers' logs are read (the first one set stays).
    pub fn serve_pod_logs(&self, logs: Arc<dyn crate::pod_logs::PodLogs>) {
        let _ = self.pod_logs.set(logs);
    }

    /// Stops serving: new connections are refused, in-flight requests get a grace period.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        // End watches and controllers first, so the graceful phase only waits for
        // short requests, and nothing writes to the store after we return.
        let _ = self.stop.send(true);
        if let Some(controllers) = self.controllers {
            controllers.abort();
            let _ = controllers.await;
        }
        self.serving.shutdown(SHUTDOWN_GRACE).await?;
        Ok(())
    }
}

/// The API served to callers in the same process: each request goes through the same
/// router as one that came in over HTTPS (authentication, admission, watch, metrics), but
/// skips the socket, TLS and HTTP framing on both sides. Over loopback those were a
/// seventh of the control plane's CPU during a failover. A server that is shutting down
/// ends in-process watches as it ends the others.
#[derive(Clone)]
pub struct InProcess {
    router: axum::Router,
    authorization: ::http::HeaderValue,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").finish_non_exhaustive()
    }
}

impl InProcess {
    /// Serves `req`, with the admin's credentials unless it carries its own. The
    /// request runs on a task of its own, as it would on a connection's task, so the
    /// API's work spreads over the runtime's threads instead of running on the caller's
    /// task, and a request is served to the end even if the caller stops waiting.
    pub fn call<B>(
        &self,
        mut req: ::http::Request<B>,
    ) -> impl std::future::Future<Output = Result<::http::Response<axum::body::Body>, tokio::task::JoinError>> + Send + 'static
    where
        B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        use tower::ServiceExt;
        if !req.headers().contains_key(::http::header::AUTHORIZATION) {
            req.headers_mut().insert(::http::header::AUTHORIZATION, self.authorization.clone());
        }
        let served = self.router.clone().oneshot(req.map(axum::body::Body::new));
        tokio::spawn(async move {
            match served.await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        })
    }
}

/// Creates or tightens the data dir (0700, its files 0600: it holds every Secret),
/// takes its lock, and creates the store's file private before SQLite opens it.
fn open_data_dir(dir: &Path, sqlite: bool) -> anyhow::Result<File> {
    let tightened = crate::fsutil::secure_data_dir(dir).with_context(|| format!("creating the data dir {}", dir.display()))?;
    let paths: Vec<String> = tightened.iter().map(|p| p.display().to_string()).collect();
    // Files in a private dir were never exposed (other users cannot enter it): those are
    // tightened quietly. An open dir exposed everything in it, and is reported.
    if tightened.first().is_some_and(|p| p == dir) {
        tracing::warn!(
            data_dir = %dir.display(),
            tightened = %paths.join(", "),
            "the data dir was readable by other local users; it is now 0700 and its files 0600"
        );
    } else if !tightened.is_empty() {
        tracing::debug!(data_dir = %dir.display(), tightened = %paths.join(", "), "made files in the data dir private");
    }
    let lock = lock_data_dir(dir)?;
    if sqlite {
        let store = dir.join("store.db");
        crate::fsutil::create_private(&store).with_context(|| format!("creating {}", store.display()))?;
    }
    Ok(lock)
}

/// Takes the data dir's lock, so two servers never share one store.
fn lock_data_dir(dir: &Path) -> anyhow::Result<File> {
    let path = dir.join("flotilla.lock");
    let f = std::os::unix::fs::OpenOptionsExt::mode(File::options().create(true).truncate(false).write(true), 0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another flotilla process is already using the data dir {} (it holds {}); stop it first, or pass a different --data-dir",
            dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Opens the data dir, bootstraps, binds and starts serving.
pub async fn start(config: ServerConfig, prometheus: prometheus::Registry) -> anyhow::Result<Server> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let lock = open_data_dir(&config.data_dir, config.etcd.is_none())?;
    let store: Arc<dyn Store> = match &config.etcd {
        None => {
            let store =
                SqliteStore::open_with_window(&config.data_dir.join("store.db"), config.event_window).context("opening the store")?;
            store.register_metrics(&prometheus).context("registering the store's metrics")?;
            store
        }
        Some(etcd) => {
            let store = EtcdStore::connect(EtcdConfig { window: config.event_window, ..etcd.clone() }).await?;
            crate::credentials::share(&store, &config.data_dir, &format!("{}-ca", config.name)).await?;
            store
        }
    };
    let profile = if config.single_cluster { Profile::PhysicalCluster } else { Profile::ControlPlane };
    let registry = Arc::new(Registry::new(profile));
    let api = Api::new(store, registry);
    if profile == Profile::PhysicalCluster {
        api.install_allocator(ServiceAllocator::new(config.service_cidr));
    }
    bootstrap(&api).await.context("bootstrapping the root workspace")?;

    let auth = Arc::new(Auth::load_or_create(&config.data_dir).context("loading tokens")?);
    let hosts: Vec<String> = std::iter::once(config.listen.ip().to_string()).chain(config.tls_sans.iter().cloned()).collect();
    let tls = tls::load_or_create(&config.data_dir, &format!("{}-ca", config.name), &hosts)?;
    let listener = std::net::TcpListener::bind(config.listen)
        .with_context(|| format!("cannot listen on {}: is another server using it? Choose another with --listen", config.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let metrics = Arc::new(Metrics::new(&prometheus)?);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let tenancy: Arc<dyn Tenancy> = match profile {
        Profile::ControlPlane => Arc::new(Workspaces::new(api.clone(), auth.clone())),
        Profile::PhysicalCluster => Arc::new(SingleCluster::new(auth.clone())),
    };
    let state = Arc::new(AppState {
        api: api.clone(),
        tenancy,
        metrics: metrics.clone(),
        prometheus,
        ready: std::sync::atomic::AtomicBool::new(false),
        stopping,
        explain: Arc::default(),
        pod_logs: Arc::default(),
    });
    let controllers = config.run_controllers.then(|| tokio::spawn(controllers::run(api.clone())));

    let router = http::router(state.clone());
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let serving = listener::serve(listener, tls.server_config()?, router.clone(), listener::Limits::default(), metrics);
    let kubeconfig = config.kubeconfig.clone();
    let contexts = workspace_contexts(&api, &auth);
    kubeconfig::write_admin(&kubeconfig, &config.name, addr, &tls.ca_pem, auth.admin_token(), &contexts, config.single_cluster)?;
    state.ready.store(true, Ordering::Release);
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "control plane serving");
    let (explain, pod_logs) = (state.explain.clone(), state.pod_logs.clone());
    Ok(Server { api, addr, kubeconfig, auth, router, serving, controllers, stop, explain, pod_logs, _lock: lock })
}

/// (workspace, scoped token) for every workspace, for the kubeconfig.
fn workspace_contexts(api: &Api, auth: &Auth) -> Vec<(String, String)> {
    let root = placement_api::ROOT_WORKSPACE;
    let Some(workspaces) = api.registry.lookup(root, placement_api::TENANCY_GROUP, placement_api::VERSION, "workspaces") else {
        return Vec::new();
    };
    let (items, _) = api.store.list(&workspaces.prefix(Some(root), None), None, None);
    items
        .iter()
        .filter_map(|(_, e)| {
            let name = e.value.pointer("/metadata/name")?.as_str()?;
            let uid = e.value.pointer("/metadata/uid")?.as_str()?;
            Some((name.to_string(), auth.workspace_token(name, uid)))
        })
        .collect()
}

/// Makes sure `root` has its namespaces and the Flotilla CRDs, and that every stored
/// CRD is registered, before the first request is served.
async fn bootstrap(api: &Arc<Api>) -> anyhow::Result<()> {
    let root = placement_api::ROOT_WORKSPACE;
    controllers::ensure_namespaces(api, root).await?;
    if api.registry.profile() == Profile::PhysicalCluster {
        return register_stored_crds(api).await;
    }
    controllers::ensure_namespace(api, root, placement_api::SYSTEM_NAMESPACE).await?;
    let crd_rt = api.registry.lookup(root, "apiextensions.k8s.io", "v1", "customresourcedefinitions").context("CRDs not registered")?;
    let crd_scope = Scope { rt: crd_rt, workspace: root.into(), namespace: String::new() };
    let opts =
        WriteOptions { field_manager: "flotilla-controlplane".into(), validation: FieldValidation::Ignore, dry_run: false, guard: None };
    for c in placement_api::installed_in_root() {
        let name = c["metadata"]["name"].as_str().unwrap_or_default().to_string();
        match api.get_raw(&crd_scope, &name) {
            None => {
                api.create(&crd_scope, c, &opts).await.map_err(|e| anyhow::anyhow!("installing CRD {name}: {e}"))?;
            }
            Some(existing) if existing.value.get("spec") != c.get("spec") => {
                let mut v = (*existing.value).clone();
                v["spec"] = c["spec"].clone();
                api.update(&crd_scope, &name, v, crate::api::Sub::Main, &opts)
                    .await
                    .map_err(|e| anyhow::anyhow!("upgrading CRD {name}: {e}"))?;
            }
            Some(_) => {}
        }
    }
    register_stored_crds(api).await
}

/// Registers every stored CRD in every workspace (established ones are served at once).
async fn register_stored_crds(api: &Arc<Api>) -> anyhow::Result<()> {
    let (crds, _) = api.store.list("apiextensions.k8s.io/customresourcedefinitions/", None, None);
    for (key, _) in crds {
        if let Some((ws, _, name)) = crate::registry::split_key(&key) {
            controllers::reconcile_crd(api, ws, name).await?;
        }
    }
    Ok(())
}
