//! Clients for the control plane's workspaces.
//!
//! The control plane serves each workspace under `/clusters/<workspace>` and the view
//! across all of them under `/clusters/*`, which is read-only. A syncer reads through
//! the wildcard view and writes into each object's own workspace. Rather than one
//! connection pool per workspace, every workspace client shares one base client and
//! only puts the workspace's path in front of each request.

use anyhow::Context;
use kube::client::Body;
use kube::{Client, Config};

/// The control plane's base URL without a path, from a kubeconfig context whose server
/// may point at one workspace (`https://host/clusters/root`).
pub fn base_config(mut config: Config) -> anyhow::Result<Config> {
    let uri = config.cluster_url.clone();
    let authority = uri.authority().context("the kubeconfig's server URL has no host")?.clone();
    let scheme = uri.scheme().cloned().unwrap_or(http::uri::Scheme::HTTPS);
    config.cluster_url = http::Uri::builder().scheme(scheme).authority(authority).path_and_query("/").build()?;
    Ok(config)
}

/// A client whose requests go to `/clusters/<workspace>` of `base`'s server. `*` is the
/// read-only view across every workspace. Its watches leave out managedFields
/// ([`placement_api::MANAGED_FIELDS_HEADER`]).
pub fn workspace(base: &Client, workspace: &str) -> Client {
    let base = base.clone();
    let prefix = if workspace == "*" { "/clusters/%2A".to_string() } else { format!("/clusters/{workspace}") };
    let svc = tower::service_fn(move |mut req: http::Request<Body>| {
        let base = base.clone();
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let rewritten = format!("{prefix}{pq}").parse::<http::Uri>();
        async move {
            *req.uri_mut() = rewritten.map_err(|e| kube::Error::Service(e.into()))?;
            // Nothing Flotilla's controllers do reads managedFields: their watches
            // stream objects without them, which saves parsing them on every event.
            req.headers_mut()
                .insert(placement_api::MANAGED_FIELDS_HEADER, http::HeaderValue::from_static(placement_api::MANAGED_FIELDS_OMIT));
            base.send(req).await
        }
    });
    Client::new(svc, "default")
}

/// A client of a physical cluster. Its requests ask for objects without managedFields
/// ([`placement_api::MANAGED_FIELDS_HEADER`]): Flotilla's simulated clusters honour
/// that, and a Kubernetes API server ignores the header.
pub fn downstream(mut config: Config) -> anyhow::Result<Client> {
    config.headers.push((
        http::HeaderName::from_static(placement_api::MANAGED_FIELDS_HEADER),
        http::HeaderValue::from_static(placement_api::MANAGED_FIELDS_OMIT),
    ));
    Ok(Client::try_from(config)?)
}

/// Server-side applies `status` to the WorkloadPlacement `name` as `manager`. Each
/// writer of that status applies only the fields it owns (a syncer its own entry of
/// `clusters`, the scheduler the `Scheduled` condition, the status aggregator the rest),
/// so writers never conflict, and a field a writer stops applying is removed. `force`
/// takes over fields an older version of Flotilla wrote with a plain update.
pub async fn apply_placement_status(
    api: &kube::Api<placement_api::WorkloadPlacement>,
    name: &str,
    manager: &str,
    status: serde_json::Value,
) -> kube::Result<placement_api::WorkloadPlacement> {
    use kube::Resource;
    let body = serde_json::json!({
        "apiVersion": placement_api::WorkloadPlacement::api_version(&()),
        "kind": placement_api::WorkloadPlacement::kind(&()),
        "metadata": {"name": name},
        "status": status,
    });
    api.patch_status(name, &kube::api::PatchParams::apply(manager).force(), &kube::api::Patch::Apply(body)).await
}
