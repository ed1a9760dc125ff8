//! `flotilla workspace create|delete|list`, through the Kubernetes API like any client.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::cli::WorkspaceCmd;

/// How long `create` and `delete` wait for the control plane to finish.
const WAIT: Duration = Duration::from_secs(30);

pub(super) fn workspace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(placement_api::TENANCY_GROUP, placement_api::VERSION, "Workspace"),
        "workspaces",
    )
}

/// Runs a workspace subcommand.
pub async fn run(kubeconfig: &Path, cmd: WorkspaceCmd) -> anyhow::Result<()> {
    let client = super::root_client(kubeconfig).await?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &workspace_resource());
    match cmd {
        WorkspaceCmd::Create { name, use_it } => create(&client, &api, kubeconfig, &name, use_it).await,
        WorkspaceCmd::Delete { name } => {
            api.delete(&name, &DeleteParams::default()).await.with_context(|| format!("deleting workspace {name}"))?;
            let start = Instant::now();
            loop {
                match api.get_opt(&name).await? {
                    None => break,
                    Some(_) if start.elapsed() > WAIT => {
                        anyhow::bail!("workspace {name} still exists after {WAIT:?}; check the control plane's log")
                    }
                    Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            controlplane::kubeconfig::remove_workspace_context(kubeconfig, &name)?;
            println!("workspace {name} deleted");
            Ok(())
        }
        WorkspaceCmd::List => {
            let list = api.list(&ListParams::default()).await?;
            let rows: Vec<[String; 3]> = list
                .items
                .into_iter()
                .map(|ws| {
                    let phase = ws.data.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Unknown").to_string();
                    let name = ws.metadata.name.unwrap_or_default();
                    let url = format!("/clusters/{name}");
                    [name, phase, url]
                })
                .collect();
            super::print_table(&["NAME", "PHASE", "URL"], &rows);
            Ok(())
        }
    }
}

/// Creates the workspace (or finds it), waits for it to be Ready, and adds its context
/// to `kubeconfig`, the current one with `use_it`. Running it again changes nothing.
pub(super) async fn create(
    client: &kube::Client,
    api: &Api<DynamicObject>,
    kubeconfig: &Path,
    name: &str,
    use_it: bool,
) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", placement_api::TENANCY_GROUP, placement_api::VERSION),
        "kind": "Workspace",
        "metadata": {"name": name},
    }))?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => println!("workspace {name} created"),
        Err(kube::Error::Api(e)) if e.code == 409 => println!("workspace {name} already exists"),
        Err(e) => return Err(e).with_context(|| format!("creating workspace {name}")),
    }
    let start = Instant::now();
    loop {
        let ws = api.get(name).await?;
        if ws.data.pointer("/status/phase").and_then(Value::as_str) == Some("Ready") {
            break;
        }
        if start.elapsed() > WAIT {
            anyhow::bail!("workspace {name} is not Ready after {WAIT:?}; check the control plane's log");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let req = http::Request::post(format!("/apis/{}/{}/workspaces/{name}/token", placement_api::TENANCY_GROUP, placement_api::VERSION))
        .body(Vec::new())?;
    let resp: Value = client.request(req).await.with_context(|| format!("minting a token for workspace {name}"))?;
    let token = resp.pointer("/status/token").and_then(Value::as_str).context("the token response has no status.token")?;
    controlplane::kubeconfig::add_workspace_context(kubeconfig, placement_api::keys::ROOT_WORKSPACE, name, token, use_it)?;
    println!("context {name} added to {}{}", kubeconfig.display(), if use_it { " and made current" } else { "" });
    Ok(())
}
