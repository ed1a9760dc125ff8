//! Shared helpers for the kube-client integration tests: starting an in-process
//! server on an ephemeral port, building `kube::Client`s for a workspace, and
//! polling with a deadline.

#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use controlplane::server::{Server, ServerConfig};

/// Starts a server on `127.0.0.1:0` over `dir` (a fresh or an existing data dir).
pub async fn start(dir: &Path) -> Server {
    controlplane::server::start(ServerConfig::control_plane(dir, "127.0.0.1:0".parse().unwrap()), prometheus::Registry::new())
        .await
        .expect("the control plane starts")
}

/// The admin client config for context `root`, read from the kubeconfig the server wrote.
pub async fn root_config(srv: &Server) -> kube::Config {
    let kc = kube::config::Kubeconfig::read_from(&srv.kubeconfig).expect("the server wrote a readable kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions { context: Some("root".into()), ..Default::default() })
        .await
        .expect("context root is usable")
}

/// An admin client for `root`.
pub async fn root_client(srv: &Server) -> kube::Client {
    kube::Client::try_from(root_config(srv).await).expect("client builds")
}

/// An admin client for `/clusters/<workspace>` (`*` for the wildcard view).
pub async fn workspace_client(srv: &Server, workspace: &str) -> kube::Client {
    let mut cfg = root_config(srv).await;
    cfg.cluster_url = format!("https://127.0.0.1:{}/clusters/{workspace}", srv.addr.port()).parse().expect("valid url");
    kube::Client::try_from(cfg).expect("client builds")
}

/// Polls `f` until it returns `Ok`, and panics with the last observation (`Err`) when
/// `timeout` passes first.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let mut delay = Duration::from_millis(5);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) => {
                if started.elapsed() >= timeout {
                    panic!("timed out after {timeout:?} waiting until {what}; last observation: {last}");
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(100));
    }
}

/// The `Status` of an API error, or a panic naming what was expected instead.
pub fn api_status<T: std::fmt::Debug>(res: Result<T, kube::Error>, what: &str) -> Box<kube::core::Status> {
    match res {
        Err(kube::Error::Api(s)) => s,
        other => panic!("{what}: expected an API error (metav1.Status), got {other:?}"),
    }
}
