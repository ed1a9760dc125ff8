//! An in-process fleet for the tests of Flotilla's controllers (feature `harness`): a
//! control plane and simulated clusters, each served by the test's own process on an
//! ephemeral port of 127.0.0.1 over a temp dir of its own, so that tests run in
//! parallel; kube-rs clients of them; and a wait with a deadline that says what it saw
//! last.
//!
//! It runs none of the controllers. A test starts the ones it tests through their
//! public entry points (`scheduler::run_until`, `syncer::push::run`,
//! `workspace_controllers::aggregate::run`) on [`ControlPlane::in_process`], the
//! transport `flotilla start` gives its own controllers, and looks at what they did
//! through [`ControlPlane::client`] and [`SimCluster::client`], over HTTPS as any
//! client would. The scheduler's and the syncers' tests (`scheduler/tests/`,
//! `syncer/tests/`) use it as a dev-dependency; the `flotilla` binary does not.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use controlplane::server::{self, Server, ServerConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use placement_api::{SecretKeyRef, SyncMode, SyncTarget, SyncTargetSpec, Workspace, WorkspaceSpec, ROOT_WORKSPACE, SYSTEM_NAMESPACE};
use tempfile::TempDir;

use crate::local::LocalCluster;

/// How long a test waits for one outcome. On an idle machine each takes from a few
/// hundred milliseconds to a few seconds; the rest is for a CI machine that runs every
/// other test beside it, so that only a real failure runs into the deadline.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Every server here listens on an ephemeral port of the loopback interface.
const EPHEMERAL: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// The data key of the kubeconfig in a cluster's Secret, as `flotilla cluster register`
/// stores it.
const KUBECONFIG_KEY: &str = "kubeconfig";

/// A control plane served by this process, with its data dir in a temp dir that goes
/// with it.
pub struct ControlPlane {
    server: Server,
    registry: prometheus::Registry,
    /// The admin's client of the server's root URL, over HTTPS.
    https: Client,
    _dir: TempDir,
}

impl ControlPlane {
    /// Starts a control plane: workspace `root` with its SyncTarget and Workspace
    /// types, and nothing else.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir for the control plane");
        let registry = prometheus::Registry::new();
        let server =
            server::start(ServerConfig::control_plane(dir.path(), EPHEMERAL), registry.clone()).await.expect("the control plane starts");
        let https = admin_client(&server.kubeconfig).await;
        ControlPlane { server, registry, https, _dir: dir }
    }

    /// The registry that the server's `/metrics` serves, for the controllers' metrics.
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    /// A client of the server's root URL for controllers, with the admin's
    /// credentials, whose requests the server handles in this process: what `flotilla
    /// start` gives the scheduler, the push-mode syncers and the workspace controllers.
    pub fn in_process(&self) -> Client {
        let local = self.server.in_process();
        Client::new(tower::service_fn(move |req| local.call(req)), "default")
    }

    /// The admin's client of `/clusters/<workspace>` over HTTPS.
    pub fn client(&self, workspace: &str) -> Client {
        runtime::clients::workspace(&self.https, workspace)
    }

    /// Creates workspace `name` and waits until it is Ready: it has its namespaces and
    /// its `default` Placement.
    pub async fn create_workspace(&self, name: &str) {
        let api: Api<Workspace> = Api::all(self.client(ROOT_WORKSPACE));
        api.create(&PostParams::default(), &Workspace::new(name, WorkspaceSpec::default())).await.expect("the workspace is created");
        wait_until(&format!("workspace {name} Ready"), DEADLINE, || async {
            let phase = api.get(name).await.map_err(|e| e.to_string())?.status.and_then(|s| s.phase);
            match phase.as_deref() {
                Some("Ready") => Ok(()),
                _ => Err(format!("phase {phase:?}")),
            }
        })
        .await;
    }

    /// Registers `cluster` as a push-mode SyncTarget labelled as its definition says,
    /// with its kubeconfig in a Secret of `root`/`flotilla-system`, as `flotilla cluster
    /// register NAME --kubeconfig F` does. The push-mode syncers start its syncer from
    /// these two objects.
    pub async fn register(&self, cluster: &SimCluster) {
        let root = self.client(ROOT_WORKSPACE);
        let secret_name = placement_api::kubeconfig_secret_name(&cluster.name);
        let mut secret = Secret {
            data: Some(BTreeMap::from([(KUBECONFIG_KEY.to_string(), ByteString(cluster.kubeconfig.clone().into_bytes()))])),
            ..Default::default()
        };
        secret.metadata.name = Some(secret_name.clone());
        secret.metadata.labels = Some(BTreeMap::from([(placement_api::KUBECONFIG_SECRET_LABEL.to_string(), cluster.name.clone())]));
        Api::<Secret>::namespaced(root.clone(), SYSTEM_NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .expect("the kubeconfig Secret is created");
        let secret_ref = SecretKeyRef { namespace: SYSTEM_NAMESPACE.into(), name: secret_name, key: KUBECONFIG_KEY.into() };
        let spec = SyncTargetSpec { kubeconfig_secret_ref: Some(secret_ref), sync_mode: SyncMode::Push, ..Default::default() };
        let mut target = SyncTarget::new(&cluster.name, spec);
        target.metadata.labels = Some(cluster.labels.clone());
        Api::<SyncTarget>::all(root).create(&PostParams::default(), &target).await.expect("the SyncTarget is created");
    }

    /// What the server's `/metrics` says now.
    pub async fn metrics(&self) -> String {
        let req = http::Request::get("/metrics").body(Vec::new()).expect("a valid request");
        self.https.request_text(req).await.expect("/metrics answers the admin")
    }
}

/// A simulated cluster served by this process, with its state in a temp dir that goes
/// with it.
pub struct SimCluster {
    name: String,
    labels: BTreeMap<String, String>,
    /// The admin kubeconfig the cluster wrote: self-contained, with the CA and the
    /// token inline.
    kubeconfig: String,
    client: Client,
    cluster: LocalCluster,
    _dir: TempDir,
}

impl SimCluster {
    /// Starts the one cluster that `definition` defines, in the format of the
    /// definition files ([`crate::config`]).
    pub async fn start(definition: &str) -> Self {
        let mut defs = crate::config::parse(definition, "the test's cluster definition").expect("a valid cluster definition");
        assert_eq!(defs.len(), 1, "a SimCluster is one cluster: {definition}");
        let def = defs.remove(0);
        let (name, labels) = (def.name.clone(), def.labels.clone());
        let dir = tempfile::tempdir().expect("a temp dir for the cluster");
        let path = dir.path().join("kubeconfig");
        let cluster = LocalCluster::start(def, dir.path(), path.clone(), EPHEMERAL).await.expect("the simulated cluster starts");
        let kubeconfig = std::fs::read_to_string(&path).expect("the cluster wrote its kubeconfig");
        let client = admin_client(&path).await;
        SimCluster { name, labels, kubeconfig, client, cluster, _dir: dir }
    }

    /// The cluster's name, which its SyncTarget takes.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The admin's client of the cluster, over HTTPS.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The copy of the workload `name` that this cluster's syncer made, in whichever
    /// namespace, or `None`. `Err` says why it could not tell: the list failed, or
    /// found more than one.
    pub async fn copy(&self, name: &str) -> Result<Option<Deployment>, String> {
        let lp = ListParams::default()
            .labels(&format!("{}={}", placement_api::SYNC_TARGET_LABEL, self.name))
            .fields(&format!("metadata.name={name}"));
        let mut copies = Api::<Deployment>::all(self.client()).list(&lp).await.map_err(|e| e.to_string())?.items;
        match copies.len() {
            0 | 1 => Ok(copies.pop()),
            n => Err(format!("{n} copies of {name} on {}", self.name)),
        }
    }

    /// Stops the cluster's API server and its simulation, as a cluster that is lost:
    /// from now on its syncer's probes find nothing listening.
    pub async fn lose(self) {
        self.cluster.shutdown().await.expect("the simulated cluster stops");
    }
}

/// An admin client of the server a kubeconfig's current context names, at the server's
/// root URL whatever workspace the context points at.
async fn admin_client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("the server wrote a readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("its current context is usable");
    let base = runtime::clients::base_config(config).expect("its server URL has a host");
    Client::try_from(base).expect("a client builds")
}

/// Polls `observe` until it returns `Ok`, and returns its value. Once `deadline` has
/// passed it panics, naming `what` it waited for and the last `Err`: what it saw
/// instead. The deadline holds even if an observation hangs (a request to a cluster
/// that is gone). Polls come quickly at first, then every 100 ms.
pub async fn wait_until<T, F, Fut>(what: &str, deadline: Duration, mut observe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let mut seen = String::from("nothing: no observation finished");
    let polling = async {
        let mut pause = Duration::from_millis(10);
        loop {
            match observe().await {
                Ok(v) => return v,
                Err(last) => seen = last,
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    };
    match tokio::time::timeout(deadline, polling).await {
        Ok(v) => v,
        Err(_) => panic!("waited {deadline:?} for {what}; saw last: {seen}"),
    }
}
