//! `flotilla cluster register|list|cordon|uncordon|drain|confirm-lost|deregister`: physical clusters
//! as SyncTargets in `root`, through the Kubernetes API like any client.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use placement_api::{ClusterTaint, SecretKeyRef, SyncMode, SyncTarget, SyncTargetSpec, TaintEffect};
use serde_json::json;

use crate::cli::{ClusterCmd, RegisterArgs};

/// How long each check against a cluster may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// The field manager of every write this command makes.
const MANAGER: &str = "flotilla-cli";

/// Runs a cluster subcommand against the control plane at `kubeconfig`.
pub async fn run(kubeconfig: &Path, cmd: ClusterCmd) -> anyhow::Result<()> {
    let root = super::root_client(kubeconfig).await?;
    let targets: Api<SyncTarget> = Api::all(root.clone());
    match cmd {
        ClusterCmd::Register(args) => register(&root, kubeconfig, args, true).await,
        ClusterCmd::List => list(&targets).await,
        ClusterCmd::Cordon { name } => set_spec(&targets, &name, json!({"unschedulable": true}), "cordoned").await,
        ClusterCmd::Uncordon { name } => {
            let patch = json!({
                "metadata": {"annotations": {placement_api::DRAIN_DEADLINE_ANNOTATION: null}},
                "spec": {"unschedulable": null, "evictAfter": null},
            });
            targets.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(|e| not_registered(&name, e))?;
            println!("cluster {name} uncordoned");
            Ok(())
        }
        ClusterCmd::Drain { name, timeout } => {
            let now = k8s_openapi::jiff::Timestamp::now();
            let deadline = k8s_openapi::jiff::SignedDuration::try_from(timeout)
                .ok()
                .and_then(|t| now.checked_add(t).ok())
                .context("--timeout is too long")?;
            let patch = json!({
                "metadata": {"annotations": {placement_api::DRAIN_DEADLINE_ANNOTATION: deadline.to_string()}},
                "spec": {"unschedulable": true, "evictAfter": Time(now)},
            });
            targets.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(|e| not_registered(&name, e))?;
            println!(
                "cluster {name} draining: its workloads move to other clusters, each old copy kept until its replacement is Available, or until {deadline}"
            );
            Ok(())
        }
        ClusterCmd::ConfirmLost { name } => confirm_lost(&targets, &name).await,
        ClusterCmd::Taint { name, taints } => taint(&targets, &name, &taints).await,
        ClusterCmd::Deregister { name } => deregister(&root, &targets, &name).await,
    }
}

/// Marks a NotReady cluster lost at its current heartbeat (see
/// [`placement_api::LOST_CONFIRMED_ANNOTATION`]): the disruption brake then lets its
/// workloads move. The write is conditional on the object read, so a heartbeat that
/// lands in between makes it fail rather than confirm a cluster that just came back.
async fn confirm_lost(targets: &Api<SyncTarget>, name: &str) -> anyhow::Result<()> {
    let st = targets.get(name).await.with_context(|| format!("reading SyncTarget {name}"))?;
    let status = st.status.as_ref();
    let condition = |type_: &str| status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
    if condition(placement_api::CONDITION_READY).is_some_and(|c| c.status == "True") {
        anyhow::bail!(
            "cluster {name} is Ready: its syncer's heartbeat is current, so there is no loss to confirm (cordon or drain it to move its workloads)"
        );
    }
    let beat = status
        .and_then(|s| s.last_syncer_heartbeat_time.as_ref())
        .map_or(placement_api::LOST_CONFIRMED_NO_HEARTBEAT.to_string(), |t| t.0.to_string());
    let patch = json!({
        "metadata": {"resourceVersion": st.metadata.resource_version, "annotations": {placement_api::LOST_CONFIRMED_ANNOTATION: beat}},
    });
    match targets.patch(name, &PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &Patch::Merge(patch)).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => anyhow::bail!(
            "cluster {name} changed while confirming (a heartbeat may have arrived): run `flotilla cluster list` and confirm again if it is still NotReady"
        ),
        Err(e) => return Err(e).with_context(|| format!("annotating SyncTarget {name}")),
    }
    let held = condition(placement_api::CONDITION_FAILOVER_PAUSED).is_some();
    println!(
        "cluster {name} confirmed lost at its last heartbeat ({beat}): {}; a new heartbeat from it ends the confirmation",
        if held { "the disruption brake lets its workloads move to the other clusters" } else { "the disruption brake will not hold it" }
    );
    Ok(())
}

/// One argument of `flotilla cluster taint`.
#[derive(Debug, Clone, PartialEq)]
enum TaintEdit {
    /// Add this taint, or set the value of the one with its key and effect.
    Add(ClusterTaint),
    /// Remove the taints with this key (and effect, if given).
    Remove(String, Option<TaintEffect>),
}

/// Parses `key[=value]:Effect` or `key[:Effect]-`, as `kubectl taint` does.
fn parse_taint(arg: &str) -> anyhow::Result<TaintEdit> {
    let effect = |e: &str| -> anyhow::Result<TaintEffect> {
        match e {
            "NoSchedule" => Ok(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
            "NoExecute" => Ok(TaintEffect::NoExecute),
            other => anyhow::bail!("invalid taint effect {other:?} in {arg:?}: use NoSchedule, PreferNoSchedule or NoExecute"),
        }
    };
    // A taint's key and value follow a label's rules.
    let key_ok = |k: &str, v: &str| -> anyhow::Result<()> {
        apimachinery::objmeta::validate_label(k, v).map_err(|e| anyhow::anyhow!("invalid taint {arg:?}: {e}"))
    };
    if let Some(rest) = arg.strip_suffix('-') {
        let (key, eff) = match rest.split_once(':') {
            Some((k, e)) => (k, Some(effect(e)?)),
            None => (rest, None),
        };
        key_ok(key, "")?;
        return Ok(TaintEdit::Remove(key.to_string(), eff));
    }
    let Some((kv, eff)) = arg.rsplit_once(':') else {
        anyhow::bail!("invalid taint {arg:?}: write key=value:Effect (or key:Effect), or key:Effect- to remove one")
    };
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    key_ok(key, value.as_deref().unwrap_or(""))?;
    Ok(TaintEdit::Add(ClusterTaint { key: key.to_string(), value, effect: effect(eff)?, time_added: None }))
}

/// Applies the edits to `taints`; what each did, for the message. A `NoExecute` taint
/// gets `timeAdded` when added, since tolerations' `tolerationSeconds` count from it.
fn edit_taints(taints: &mut Vec<ClusterTaint>, edits: Vec<TaintEdit>, now: Time) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    for edit in edits {
        match edit {
            TaintEdit::Add(mut t) => {
                let text = taint_text(&t);
                match taints.iter_mut().find(|have| have.key == t.key && have.effect == t.effect) {
                    Some(have) if have.value == t.value => done.push(format!("{text} already there")),
                    Some(have) => {
                        have.value = t.value;
                        done.push(format!("{text} replaced"));
                    }
                    None => {
                        if t.effect == TaintEffect::NoExecute {
                            t.time_added = Some(now.clone());
                        }
                        taints.push(t);
                        done.push(format!("{text} added"));
                    }
                }
            }
            TaintEdit::Remove(key, effect) => {
                let before = taints.len();
                taints.retain(|t| !(t.key == key && effect.is_none_or(|e| e == t.effect)));
                let what = effect.map_or(key.clone(), |e| format!("{key}:{e}"));
                if taints.len() == before {
                    anyhow::bail!("taint {what} not found");
                }
                done.push(format!("{what} removed"));
            }
        }
    }
    Ok(done)
}

fn taint_text(t: &ClusterTaint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{}", t.key, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

/// `flotilla cluster taint`: a read, the edits, and a write conditional on what was
/// read, so that a concurrent change is not overwritten.
/// How many times a taint edit is made again on the SyncTarget as it now is, when it
/// changed between the read and the write (a heartbeat lands every few seconds).
const TAINT_ATTEMPTS: usize = 5;

async fn taint(targets: &Api<SyncTarget>, name: &str, args: &[String]) -> anyhow::Result<()> {
    let edits = args.iter().map(|a| parse_taint(a)).collect::<anyhow::Result<Vec<_>>>()?;
    for _ in 0..TAINT_ATTEMPTS {
        let st = targets.get(name).await.map_err(|e| not_registered(name, e))?;
        let mut taints = st.spec.taints.clone();
        let done = edit_taints(&mut taints, edits.clone(), Time(k8s_openapi::jiff::Timestamp::now()))
            .with_context(|| format!("cluster {name}"))?;
        let patch = json!({"metadata": {"resourceVersion": st.metadata.resource_version}, "spec": {"taints": taints}});
        match targets.patch(name, &PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &Patch::Merge(patch)).await {
            Ok(_) => {
                println!("cluster {name}: {}", done.join(", "));
                return Ok(());
            }
            // Edited again on what it now holds.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e).with_context(|| format!("updating the taints of SyncTarget {name}")),
        }
    }
    anyhow::bail!("cluster {name} changed {TAINT_ATTEMPTS} times while its taints were edited: run the command again")
}

/// Registers a cluster; `hint` adds the line that says how to look at it.
pub(super) async fn register(root: &Client, cp_kubeconfig: &Path, args: RegisterArgs, hint: bool) -> anyhow::Result<()> {
    let name = args.name.clone();
    if let Err(e) = apimachinery::objmeta::dns1123_label(&name) {
        anyhow::bail!("invalid cluster name {name:?}: {e}");
    }
    let labels = parse_labels(&args.labels)?;
    let mode = if args.pull { SyncMode::Pull } else { SyncMode::Push };
    let checked = match &args.kubeconfig {
        Some(path) => Some(check_cluster(&name, path, args.context.as_deref()).await?),
        None if args.pull => None,
        None => anyhow::bail!("--kubeconfig is required: the control plane reaches a push-mode cluster with it (or register with --pull)"),
    };
    let secret_ref = match (&checked, mode) {
        (Some(c), SyncMode::Push) => Some(store_kubeconfig(root, &name, &c.kubeconfig).await?),
        _ => None,
    };
    let targets: Api<SyncTarget> = Api::all(root.clone());
    let mut st =
        SyncTarget::new(&name, SyncTargetSpec { kubeconfig_secret_ref: secret_ref.clone(), sync_mode: mode, ..Default::default() });
    st.metadata.labels = Some(labels.clone());
    let verb = match targets.create(&PostParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &st).await {
        Ok(_) => "registered",
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let patch = json!({"metadata": {"labels": labels}, "spec": {"kubeconfigSecretRef": secret_ref, "syncMode": mode}});
            targets
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .with_context(|| format!("updating SyncTarget {name}"))?;
            "updated"
        }
        Err(e) => return Err(e).with_context(|| format!("creating SyncTarget {name}")),
    };
    let summary = match &checked {
        Some(c) => format!("cluster {name} {verb}: {} node(s) at {}, sync mode {mode:?}", c.nodes, c.server),
        None => format!("cluster {name} {verb}, sync mode {mode:?}"),
    };
    if args.pull {
        // stdout carries only the manifest, so it can be piped to kubectl apply.
        eprintln!("{summary}");
        let token = mint_sync_target_token(root, &name).await?;
        let upstream = upstream_kubeconfig(cp_kubeconfig, &name, &token)?;
        match &args.upstream_kubeconfig_out {
            Some(out) => {
                controlplane::fsutil::write_private(out, upstream.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
                let downstream = args.kubeconfig.as_ref().map_or("<the cluster's kubeconfig>".into(), |p| p.display().to_string());
                println!("the syncer's upstream kubeconfig is in {} (it holds the syncer's token: keep it private)", out.display());
                println!(
                    "run the syncer: flotilla syncer --sync-target {name} --upstream-kubeconfig {} --downstream-kubeconfig {downstream}",
                    out.display()
                );
            }
            None => {
                eprintln!(
                    "apply the manifest below on cluster {name} (kubectl apply -f -); it holds the syncer's credential, so keep it private"
                );
                print!("{}", pull_manifest(&name, &args.syncer_image, &upstream)?);
            }
        }
    } else {
        println!("{summary}");
        if hint {
            println!("see it with: kubectl --context root get synctarget {name}");
        }
    }
    Ok(())
}

fn parse_labels(raw: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    raw.iter()
        .map(|l| {
            let (k, v) = l.split_once('=').with_context(|| format!("invalid label {l:?}: use key=value"))?;
            apimachinery::objmeta::validate_label(k, v).map_err(|e| anyhow::anyhow!("invalid label {l:?}: {e}"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// What the checks learned about a cluster.
struct Checked {
    server: String,
    nodes: usize,
    /// A self-contained kubeconfig (files inlined) with one context.
    kubeconfig: String,
}

/// Contacts the cluster, lists its nodes and checks what the syncer will need to do
/// there, before anything is registered. Each failure says what went wrong.
async fn check_cluster(name: &str, path: &Path, context: Option<&str>) -> anyhow::Result<Checked> {
    let kc = kube::config::Kubeconfig::read_from(path).with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    let flat = flatten_kubeconfig(&kc, context, name).with_context(|| format!("kubeconfig {}", path.display()))?;
    let opts = kube::config::KubeConfigOptions { context: context.map(String::from), ..Default::default() };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .with_context(|| format!("kubeconfig {} has no usable context", path.display()))?;
    config.connect_timeout = Some(CHECK_TIMEOUT);
    config.read_timeout = Some(CHECK_TIMEOUT);
    let server = config.cluster_url.to_string().trim_end_matches('/').to_string();
    let client = Client::try_from(config).with_context(|| format!("building a client for cluster {name:?} at {server}"))?;
    let unreachable = |e: kube::Error| anyhow::anyhow!("cannot reach cluster {name:?} at {server}: {}", describe_transport_error(&e));
    match tokio::time::timeout(CHECK_TIMEOUT, client.apiserver_version()).await {
        Err(_) => anyhow::bail!("cannot reach cluster {name:?} at {server}: no answer within {CHECK_TIMEOUT:?}"),
        Ok(Err(kube::Error::Api(e))) if e.code == 401 => {
            anyhow::bail!(
                "cluster {name:?} at {server} rejected the kubeconfig's credentials (401 Unauthorized): check the user in {}",
                path.display()
            )
        }
        // /version may be closed to the user; the node list below tells.
        Ok(Err(kube::Error::Api(_))) => {}
        Ok(Err(e)) => return Err(unreachable(e)),
        Ok(Ok(_)) => {}
    }
    let denied = |what: &str, e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 401 => {
            anyhow::anyhow!("cluster {name:?} at {server} rejected the kubeconfig's credentials (401 Unauthorized)")
        }
        kube::Error::Api(s) if s.code == 403 => anyhow::anyhow!("the kubeconfig's user may not {what} on cluster {name:?}: {}", s.message),
        kube::Error::Api(s) if s.code == 404 => {
            anyhow::anyhow!(
                "cluster {name:?} at {server} does not serve what is needed to {what} (404): is it a Kubernetes cluster's API server?"
            )
        }
        other => anyhow::anyhow!("cannot {what} on cluster {name:?} at {server}: {}", describe_transport_error(&other)),
    };
    let nodes = Api::<Node>::all(client.clone()).list_metadata(&ListParams::default()).await.map_err(|e| denied("list nodes", e))?;
    if nodes.items.is_empty() {
        anyhow::bail!("cluster {name:?} at {server} has no nodes: nothing could run there");
    }
    Api::<Pod>::all(client.clone()).list_metadata(&ListParams::default().limit(1)).await.map_err(|e| denied("list pods", e))?;
    // Server-side dry runs: the syncer creates namespaces and workloads in them.
    let dry = PostParams { dry_run: true, field_manager: Some(MANAGER.into()) };
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "flotilla-register-check"}}))?;
    match Api::<Namespace>::all(client.clone()).create(&dry, &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(denied("create namespaces", e)),
    }
    Ok(Checked { server, nodes: nodes.items.len(), kubeconfig: flat })
}

/// The innermost cause of a transport error, in words: "connection refused",
/// "invalid peer certificate: UnknownIssuer", ...
fn describe_transport_error(e: &kube::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    let lower = text.to_lowercase();
    if lower.contains("connection refused") {
        "connection refused".into()
    } else if lower.contains("certificate") {
        format!("TLS: {text}; check certificate-authority-data in the kubeconfig")
    } else {
        text
    }
}

/// One context of a kubeconfig, with every file it references inlined, so it works
/// from the Secret it is stored in.
fn flatten_kubeconfig(kc: &kube::config::Kubeconfig, context: Option<&str>, name: &str) -> anyhow::Result<String> {
    use base64::Engine;
    let b64 = |path: &str| -> anyhow::Result<String> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let ctx_name = context.map(String::from).or_else(|| kc.current_context.clone()).context("it has no current context; pass --context")?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.clone())
        .with_context(|| format!("it has no context {ctx_name:?}"))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .with_context(|| format!("it has no cluster {:?}", ctx.cluster))?;
    let mut cluster_json = json!({"server": cluster.server});
    match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
        (Some(data), _) => cluster_json["certificate-authority-data"] = json!(data),
        (None, Some(file)) => cluster_json["certificate-authority-data"] = json!(b64(file)?),
        _ => {}
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        cluster_json["insecure-skip-tls-verify"] = json!(true);
    }
    let user_name = ctx.user.clone().unwrap_or_default();
    let auth = kc.auth_infos.iter().find(|u| u.name == user_name).and_then(|u| u.auth_info.clone()).unwrap_or_default();
    let mut user = json!({});
    if let Some(t) = &auth.token {
        use secrecy::ExposeSecret;
        user["token"] = json!(t.expose_secret());
    } else if let Some(f) = &auth.token_file {
        user["token"] = json!(std::fs::read_to_string(f).with_context(|| format!("reading token file {f}"))?.trim());
    }
    match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(d), _) => user["client-certificate-data"] = json!(d),
        (None, Some(f)) => user["client-certificate-data"] = json!(b64(f)?),
        _ => {}
    }
    match (&auth.client_key_data, &auth.client_key) {
        (Some(d), _) => {
            use secrecy::ExposeSecret;
            user["client-key-data"] = json!(d.expose_secret());
        }
        (None, Some(f)) => user["client-key-data"] = json!(b64(f)?),
        _ => {}
    }
    if auth.exec.is_some() || auth.auth_provider.is_some() {
        anyhow::bail!("its user authenticates with an exec or auth-provider plugin, which the control plane cannot run; use a token or client certificate");
    }
    let doc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster_json}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    });
    Ok(serde_yaml::to_string(&doc)?)
}

async fn store_kubeconfig(root: &Client, name: &str, kubeconfig: &str) -> anyhow::Result<SecretKeyRef> {
    let secrets: Api<Secret> = Api::namespaced(root.clone(), placement_api::SYSTEM_NAMESPACE);
    let secret_name = placement_api::kubeconfig_secret_name(name);
    let mut secret = Secret {
        data: Some(BTreeMap::from([("kubeconfig".to_string(), ByteString(kubeconfig.as_bytes().to_vec()))])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    secret.metadata.name = Some(secret_name.clone());
    secret.metadata.labels = Some(BTreeMap::from([(placement_api::KUBECONFIG_SECRET_LABEL.to_string(), name.to_string())]));
    let pp = PatchParams::apply(MANAGER).force();
    let mut applied = serde_json::to_value(&secret)?;
    applied["apiVersion"] = json!("v1");
    applied["kind"] = json!("Secret");
    secrets
        .patch(&secret_name, &pp, &Patch::Apply(applied))
        .await
        .with_context(|| format!("storing the kubeconfig in Secret {}/{secret_name} of root", placement_api::SYSTEM_NAMESPACE))?;
    Ok(SecretKeyRef { namespace: placement_api::SYSTEM_NAMESPACE.into(), name: secret_name, key: "kubeconfig".into() })
}

async fn mint_sync_target_token(root: &Client, name: &str) -> anyhow::Result<String> {
    let req = http::Request::post(format!("/apis/{}/{}/synctargets/{name}/token", placement_api::WORKLOAD_GROUP, placement_api::VERSION))
        .body(Vec::new())?;
    let resp: serde_json::Value = root.request(req).await.with_context(|| format!("minting the syncer token of {name}"))?;
    resp.pointer("/status/token").and_then(|t| t.as_str()).map(String::from).context("the token response has no status.token")
}

/// A kubeconfig for a pull-mode syncer: the control plane's address and CA from the
/// admin kubeconfig's root context, with the syncer's scoped token.
fn upstream_kubeconfig(cp_kubeconfig: &Path, name: &str, token: &str) -> anyhow::Result<String> {
    let kc = kube::config::Kubeconfig::read_from(cp_kubeconfig).context("reading the control plane's kubeconfig")?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == placement_api::keys::ROOT_WORKSPACE)
        .and_then(|c| c.cluster.clone())
        .context("the control plane's kubeconfig has no root cluster")?;
    let base = cluster.server.clone().unwrap_or_default();
    let base = base.split("/clusters/").next().unwrap_or(&base).to_string();
    let doc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "flotilla", "cluster": {"server": format!("{base}/clusters/root"), "certificate-authority-data": cluster.certificate_authority_data}}],
        "users": [{"name": format!("syncer-{name}"), "user": {"token": token}}],
        "contexts": [{"name": "flotilla", "context": {"cluster": "flotilla", "user": format!("syncer-{name}")}}],
        "current-context": "flotilla",
    });
    Ok(serde_yaml::to_string(&doc)?)
}

/// The objects a pull-mode cluster needs: namespace, service account, the least
/// privilege the syncer needs there, the upstream credential, and the syncer.
fn pull_manifest(name: &str, image: &str, upstream: &str) -> anyhow::Result<String> {
    let ns = "flotilla-system";
    let sa = "flotilla-syncer";
    let rules = json!([
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        // The syncer reports a drift it reverted as an Event on the copy.
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]);
    let docs = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "flotilla-syncer"}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "flotilla-syncer"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "flotilla-syncer"},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "flotilla-upstream", "namespace": ns}, "type": "Opaque", "stringData": {"kubeconfig": upstream}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "flotilla-syncer", "namespace": ns, "labels": {"app": "flotilla-syncer"}},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "flotilla-syncer"}},
                        "template": {"metadata": {"labels": {"app": "flotilla-syncer"}},
                                     "spec": {"serviceAccountName": sa,
                                              "containers": [{"name": "syncer", "image": image,
                                                              "args": ["syncer", "--sync-target", name, "--upstream-kubeconfig", "/etc/flotilla/upstream/kubeconfig", "--downstream-in-cluster"],
                                                              "volumeMounts": [{"name": "upstream", "mountPath": "/etc/flotilla/upstream", "readOnly": true}]}],
                                              "volumes": [{"name": "upstream", "secret": {"secretName": "flotilla-upstream"}}]}}}}),
    ];
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&d)?);
    }
    Ok(out)
}

async fn list(targets: &Api<SyncTarget>) -> anyhow::Result<()> {
    let items = targets.list(&ListParams::default()).await.context("listing SyncTargets")?.items;
    let rows: Vec<[String; 8]> = items
        .iter()
        .map(|t| {
            let status = t.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == placement_api::CONDITION_READY)
                .map(|c| c.status.clone())
                .unwrap_or_else(|| "Unknown".into());
            let heartbeat = status
                .last_syncer_heartbeat_time
                .map(|t| apimachinery::objmeta::age(Some(&t.0.to_string())))
                .unwrap_or_else(|| "<none>".into());
            let labels = t.labels().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
            let labels = if labels.is_empty() { "<none>".to_string() } else { labels };
            [
                t.name_any(),
                ready,
                status.cpu.unwrap_or_else(|| "-".into()),
                status.memory.unwrap_or_else(|| "-".into()),
                status.workloads.to_string(),
                heartbeat,
                super::status::schedulable(t).to_string(),
                labels,
            ]
        })
        .collect();
    super::print_table(&["NAME", "READY", "CPU", "MEMORY", "WORKLOADS", "HEARTBEAT", "SCHEDULABLE", "LABELS"], &rows);
    Ok(())
}

async fn set_spec(targets: &Api<SyncTarget>, name: &str, spec: serde_json::Value, what: &str) -> anyhow::Result<()> {
    targets.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await.map_err(|e| not_registered(name, e))?;
    println!("cluster {name} {what}");
    Ok(())
}

fn not_registered(name: &str, e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!("cluster {name:?} is not registered; see: flotilla cluster list"),
        other => anyhow::Error::from(other).context(format!("updating SyncTarget {name}")),
    }
}

async fn deregister(root: &Client, targets: &Api<SyncTarget>, name: &str) -> anyhow::Result<()> {
    let st = targets.get(name).await.map_err(|e| not_registered(name, e))?;
    targets.delete(name, &DeleteParams::default()).await.with_context(|| format!("deleting SyncTarget {name}"))?;
    if let Some(r) = st.spec.kubeconfig_secret_ref {
        let secrets: Api<Secret> = Api::namespaced(root.clone(), &r.namespace);
        match secrets.delete(&r.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting Secret {}/{} of root", r.namespace, r.name)),
        }
    }
    println!("cluster {name} deregistered");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> ClusterTaint {
        ClusterTaint { key: key.into(), value: value.map(Into::into), effect, time_added: None }
    }

    #[test]
    fn taint_arguments_parse_as_kubectl_taint_reads_them() {
        use TaintEffect::*;
        assert_eq!(parse_taint("gpu=true:NoSchedule").unwrap(), TaintEdit::Add(taint("gpu", Some("true"), NoSchedule)));
        assert_eq!(parse_taint("example.com/maint:NoExecute").unwrap(), TaintEdit::Add(taint("example.com/maint", None, NoExecute)));
        assert_eq!(parse_taint("gpu:NoSchedule-").unwrap(), TaintEdit::Remove("gpu".into(), Some(NoSchedule)));
        assert_eq!(parse_taint("gpu-").unwrap(), TaintEdit::Remove("gpu".into(), None));
        for (bad, says) in [
            ("gpu=true", "write key=value:Effect"),
            ("gpu:Sometimes", "invalid taint effect \"Sometimes\""),
            ("bad key:NoSchedule", "invalid taint \"bad key:NoSchedule\": key"),
            ("gpu=no way:NoSchedule", "value \"no way\""),
        ] {
            let err = parse_taint(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn taint_edits_add_replace_and_remove_and_stamp_no_execute() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let mut taints = vec![taint("gpu", Some("a"), TaintEffect::NoSchedule)];
        let done = edit_taints(
            &mut taints,
            vec![
                TaintEdit::Add(taint("gpu", Some("b"), TaintEffect::NoSchedule)),
                TaintEdit::Add(taint("maint", None, TaintEffect::NoExecute)),
            ],
            now.clone(),
        )
        .unwrap();
        assert_eq!(done, ["gpu=b:NoSchedule replaced", "maint:NoExecute added"]);
        assert_eq!(taints[0].value.as_deref(), Some("b"));
        assert_eq!(taints[1].time_added, Some(now.clone()));
        let done = edit_taints(&mut taints, vec![TaintEdit::Remove("maint".into(), None)], now.clone()).unwrap();
        assert_eq!((done, taints.len()), (vec!["maint removed".to_string()], 1));
        let err = edit_taints(&mut taints, vec![TaintEdit::Remove("gpu".into(), Some(TaintEffect::NoExecute))], now).unwrap_err();
        assert_eq!(err.to_string(), "taint gpu:NoExecute not found");
    }
}
