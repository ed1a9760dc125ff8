//! `flotilla explain TYPE/NAME` (`deploy/web`, `sts/db`, `ds/agent`, `job/pi`,
//! `cj/report`): why a workload runs where it runs. It reads what
//! the scheduler reads (the workload, its namespace, the workspace's Placements, the
//! WorkloadPlacement) and the clusters as the scheduler last reported them on their
//! SyncTargets, and runs the scheduler's own placement core on them
//! ([`scheduler::core::explain`]), so that its table and the scheduler's decision come
//! from the same rules.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams};
use kube::ResourceExt;
use placement_api::workload::{AnyWorkload, WorkloadKind};
use placement_api::{Placement, ReplicaScheduling, SyncTarget, TaintEffect, WorkloadPlacement, CLUSTER_ANNOTATION};
use scheduler::core::{self, Share};

use super::status::{cpu, memory};
use crate::cli::ExplainArgs;

/// Everything a decision about one workload takes, read from the API.
pub(super) struct Inputs {
    pub workspace: String,
    /// The workload, of whichever kind.
    pub object: AnyWorkload,
    pub placement: Placement,
    pub source: scheduler::resolve::Source,
    pub workload: core::Workload,
    pub current: Vec<Share>,
    /// Left on fewer clusters than its Placement asks for: only rebalancing widens it.
    pub short: bool,
}

impl Inputs {
    /// The rule of its Placement as its kind takes it, with `known` clusters registered
    /// ([`core::Rule::for_spread`]).
    pub fn rule(&self, known: usize) -> core::Rule<'_> {
        core::Rule::of(&self.placement.spec).for_spread(self.object.kind().describe().spread, known)
    }
}

/// The clusters as the scheduler last reported them.
pub(super) async fn clusters(root: &kube::Client) -> anyhow::Result<Vec<core::Cluster>> {
    let targets = Api::<SyncTarget>::all(root.clone()).list(&ListParams::default()).await.context("listing SyncTargets in root")?;
    let now = jiff::Timestamp::now();
    Ok(targets.items.iter().map(|t| scheduler::health::published_view(t, now)).collect())
}

/// Reads what the scheduler decides one workload from.
pub(super) async fn inputs(base: &kube::Client, workspace: &str, object: AnyWorkload) -> anyhow::Result<Inputs> {
    let client = runtime::clients::workspace(base, workspace);
    let (ns, name) = (object.meta().namespace.clone().unwrap_or_default(), object.meta().name.clone().unwrap_or_default());
    let namespace = Api::<Namespace>::all(client.clone()).get_opt(&ns).await.context("reading the namespace")?;
    let placements = Api::<Placement>::all(client.clone()).list(&ListParams::default()).await.context("listing Placements")?;
    let wp = Api::<WorkloadPlacement>::namespaced(client, &ns).get_opt(&name).await.context("reading the WorkloadPlacement")?;
    let refs: Vec<&Placement> = placements.items.iter().collect();
    resolve(workspace, object, namespace.as_ref(), &refs, wp.as_ref())
}

/// What the scheduler decides one workload from, out of the objects it reads: the
/// Placement that governs it (among `placements`, its workspace's), what one replica
/// asks for, and where it runs now.
pub(super) fn resolve(
    workspace: &str,
    object: AnyWorkload,
    namespace: Option<&Namespace>,
    placements: &[&Placement],
    wp: Option<&WorkloadPlacement>,
) -> anyhow::Result<Inputs> {
    let (ns, name) = (object.meta().namespace.clone().unwrap_or_default(), object.meta().name.clone().unwrap_or_default());
    let resolved = scheduler::resolve::governing(
        object.meta().annotations.as_ref(),
        scheduler::resolve::Namespace {
            name: &ns,
            labels: namespace.and_then(|n| n.metadata.labels.as_ref()),
            annotations: namespace.and_then(|n| n.metadata.annotations.as_ref()),
        },
        placements,
    );
    let (placement, source) = resolved.map_err(|why| anyhow::anyhow!("{workspace}/{ns}/{name} has no Placement to follow: {why}"))?;
    let placement = placement.clone();
    let workload = scheduler::inputs::workload(&object)
        .map_err(|e| anyhow::anyhow!("{workspace}/{ns}/{name}: the pod template's resource requests cannot be read: {e}"))?;
    let current = scheduler::inputs::current(wp, object.meta());
    let short = scheduler::inputs::short(wp);
    Ok(Inputs { workspace: workspace.to_string(), object, placement, source, workload, current, short })
}

/// `east=2 west=1`, or `nowhere`.
pub(super) fn shares_text(shares: &[Share]) -> String {
    if shares.is_empty() {
        return "nowhere".into();
    }
    shares.iter().map(|s| format!("{}={}", s.cluster, s.replicas)).collect::<Vec<_>>().join(" ")
}

fn parse_target(target: &str) -> anyhow::Result<(WorkloadKind, &str)> {
    match target.split_once('/').map(|(t, name)| (WorkloadKind::of_resource(t), name)) {
        Some((Some(kind), name)) if !name.is_empty() && kind.describe().placed() => Ok((kind, name)),
        Some((Some(kind), name)) if !name.is_empty() => anyhow::bail!(
            "a {} is not placed: its schedule runs in the workspace, and each Job it makes is placed as a Job; explain one of them, `flotilla explain job/JOB` (`kubectl get jobs` lists {name}'s)",
            kind.name()
        ),
        _ => anyhow::bail!(
            "name the workload as TYPE/NAME, with TYPE one of the kinds the scheduler places (deploy, sts, ds, job), not {target:?}"
        ),
    }
}

/// The workloads of `kind` named `name` in namespace `ns`, through `client`.
async fn list_named(client: &kube::Client, kind: WorkloadKind, ns: &str, name: &str) -> anyhow::Result<Vec<AnyWorkload>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.describe().api_resource());
    let found = api
        .list(&ListParams::default().fields(&format!("metadata.namespace={ns},metadata.name={name}")))
        .await
        .with_context(|| format!("looking for {}/{name}", kind.describe().short))?;
    found
        .items
        .into_iter()
        .map(|o| AnyWorkload::from_value(kind, serde_json::to_value(o)?))
        .collect::<Result<Vec<_>, serde_json::Error>>()
        .with_context(|| format!("reading {}/{name}", kind.describe().short))
}

/// Finds the workload of `kind` (of any kind, for `None`: the one its
/// WorkloadPlacement places, else the first kind that has the name), in `workspace` or
/// in the one workspace that has it.
async fn find(
    base: &kube::Client,
    kind: Option<WorkloadKind>,
    name: &str,
    ns: &str,
    workspace: Option<&str>,
) -> anyhow::Result<(String, AnyWorkload)> {
    let client = runtime::clients::workspace(base, workspace.unwrap_or("*"));
    let kinds: Vec<WorkloadKind> = match kind {
        Some(k) => vec![k],
        None => {
            let placed = match workspace {
                Some(ws) => Api::<WorkloadPlacement>::namespaced(runtime::clients::workspace(base, ws), ns)
                    .get_opt(name)
                    .await
                    .context("reading the WorkloadPlacement")?
                    .and_then(|wp| WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind)),
                None => None,
            };
            placed.into_iter().chain(placement_api::workload::KINDS.iter().filter(|k| k.placed()).map(|k| k.kind)).collect()
        }
    };
    let what = |k: WorkloadKind| format!("{}/{name}", k.describe().short);
    let mut hits: Vec<(String, AnyWorkload)> = Vec::new();
    for k in &kinds {
        let found = list_named(&client, *k, ns, name).await?;
        hits = found
            .into_iter()
            .map(|o| {
                let ws = workspace.map(str::to_string).or_else(|| o.meta().annotations.as_ref()?.get(CLUSTER_ANNOTATION).cloned());
                (ws.unwrap_or_default(), o)
            })
            .filter(|(ws, _)| !ws.is_empty())
            .collect();
        if !hits.is_empty() {
            break;
        }
    }
    let asked = kind.map_or_else(|| format!("a workload named {name}"), what);
    match (hits.len(), workspace) {
        (0, Some(ws)) => anyhow::bail!("workspace {ws} has no {asked} in namespace {ns}"),
        (0, None) => anyhow::bail!("no workspace has {asked} in namespace {ns}; check the name, -n and `flotilla status`"),
        (1, _) => Ok(hits.remove(0)),
        _ => {
            let names: Vec<&str> = hits.iter().map(|(ws, _)| ws.as_str()).collect();
            anyhow::bail!("{asked} in namespace {ns} is in several workspaces ({}): choose one with --workspace", names.join(", "))
        }
    }
}

/// The explanation of one workload, as `flotilla explain` prints it, read through
/// `base` (a client of the whole control plane): for the dashboard.
pub async fn text(base: &kube::Client, workspace: &str, namespace: &str, name: &str) -> anyhow::Result<String> {
    let (workspace, object) = find(base, None, name, namespace, Some(workspace)).await?;
    let inputs = inputs(base, &workspace, object).await?;
    let views = clusters(&runtime::clients::workspace(base, placement_api::ROOT_WORKSPACE)).await?;
    Ok(render(&inputs, &views))
}

/// Runs `flotilla explain`.
pub async fn run(kubeconfig: &Path, args: ExplainArgs) -> anyhow::Result<()> {
    let (kind, name) = parse_target(&args.workload)?;
    let root = super::root_client(kubeconfig).await?;
    let base = kube::Client::try_from(runtime::clients::base_config(super::root_config(kubeconfig).await?)?)?;
    let (workspace, object) = find(&base, Some(kind), name, &args.namespace, args.workspace.as_deref()).await?;
    let inputs = inputs(&base, &workspace, object).await?;
    let views = clusters(&root).await?;
    print!("{}", render(&inputs, &views));
    Ok(())
}

/// The explanation, as printed.
pub(super) fn render(inputs: &Inputs, views: &[core::Cluster]) -> String {
    let rule = inputs.rule(views.len());
    let (rows, decision) = core::explain(views, &inputs.workload, &rule, &inputs.current, !inputs.short);
    let per = inputs.workload.per_replica;
    let mut out = format!(
        "{}/{} in namespace {} of workspace {}: {} replica(s) of {} cpu, {} memory\n",
        inputs.object.kind().describe().short,
        inputs.object.meta().name.clone().unwrap_or_default(),
        inputs.object.meta().namespace.clone().unwrap_or_default(),
        inputs.workspace,
        inputs.workload.replicas,
        cpu(per.cpu_millis),
        memory(per.memory_bytes),
    );
    let mode = match rule.mode {
        ReplicaScheduling::Divide => "Divide",
        ReplicaScheduling::Duplicate => "Duplicate",
    };
    let selector = if scheduler::selector::is_empty(rule.cluster_selector) { "every cluster" } else { "its clusterSelector" };
    out.push_str(&format!(
        "Placement {} ({}): up to {} cluster(s), {mode}, over {selector}\n",
        inputs.placement.name_any(),
        inputs.source,
        rule.clusters
    ));
    for c in rule.spread {
        let skew = c.max_skew.map_or_else(String::new, |s| format!(", maxSkew {s}"));
        let groups = c.min_groups.map_or_else(String::new, |g| format!(", minGroups {g}"));
        out.push_str(&format!("spread over label {}{skew}{groups}\n", c.spread_by_label));
    }
    if !rule.tolerations.is_empty() {
        let tolerations: Vec<String> = rule.tolerations.iter().map(toleration_text).collect();
        out.push_str(&format!("tolerates: {}\n", tolerations.join(", ")));
    }
    out.push_str(&format!("assigned now: {}\n\n", shares_text(&inputs.current)));
    let weighted = rows.iter().any(|r| r.weight.is_some());
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let view = views.iter().find(|c| c.name == r.cluster);
            let free = view.map(|c| c.available).unwrap_or_default();
            let why = match (r.turned_away, view) {
                (Some(core::Reason::Tainted), Some(c)) => {
                    let taints: Vec<String> =
                        c.taints.iter().filter(|t| t.effect != TaintEffect::PreferNoSchedule).map(taint_text).collect();
                    format!("Tainted ({})", taints.join(", "))
                }
                (why, _) => why.map_or_else(String::new, |w| w.to_string()),
            };
            let mut row = vec![
                r.cluster.clone(),
                if r.turned_away.is_none() { "yes".into() } else { "no".into() },
                why,
                cpu(free.cpu_millis),
                memory(free.memory_bytes),
                free.pods.to_string(),
                if r.turned_away.is_none() { r.fits.to_string() } else { "-".into() },
                r.rank.map_or_else(|| "-".into(), |n| n.to_string()),
            ];
            if weighted {
                row.push(r.weight.map_or_else(|| "-".into(), |n| n.to_string()));
            }
            row.push(r.share.map_or_else(|| "-".into(), |n| n.to_string()));
            row
        })
        .collect();
    if table.is_empty() {
        out.push_str("no clusters are registered\n");
    } else {
        let mut headers = vec!["CLUSTER", "CANDIDATE", "WHY NOT", "FREE CPU", "FREE MEMORY", "FREE PODS", "FITS", "RANK"];
        if weighted {
            headers.push("WEIGHT");
        }
        headers.push("SHARE");
        out.push_str(&super::format_table(&headers, &table));
    }
    out.push('\n');
    match decision {
        Ok(d) => {
            let mut shares = d.shares.clone();
            shares.sort();
            let mut now = inputs.current.clone();
            now.sort();
            let same = if shares == now { "the same as assigned now" } else { "not yet what is assigned: the scheduler acts on it next" };
            out.push_str(&format!("decision: {} ({same})\n", shares_text(&shares)));
            if let Some(fewer) = d.fewer {
                out.push_str(&format!("on fewer clusters than asked for: {fewer}\n"));
            }
        }
        Err(no_fit) => {
            let stays = if inputs.current.is_empty() { String::new() } else { format!("; it stays on {}", shares_text(&inputs.current)) };
            out.push_str(&format!("decision: nothing fits: {no_fit}{stays}\n"));
        }
    }
    out.push_str(
        "RANK is the order the scheduler takes candidates in: where it runs now first, then those without an untolerated \
         PreferNoSchedule taint, then the highest weight, then the most room, then the name",
    );
    out.push_str(if rule.spread.is_empty() { ".\n" } else { "; each next one from the groups with the fewest chosen so far.\n" });
    out
}

/// A taint as `kubectl describe node` writes one: `key=value:Effect`.
pub(super) fn taint_text(t: &core::Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{}", t.key, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

/// A toleration, in the same way: `key=value:Effect`, `key:Effect` for `Exists`, `*`
/// for every key, and `for Ns` with `tolerationSeconds`.
fn toleration_text(t: &placement_api::ClusterToleration) -> String {
    let key = t.key.as_deref().filter(|k| !k.is_empty()).unwrap_or("*");
    let value = match (t.operator, &t.value) {
        (Some(placement_api::TolerationOperator::Exists), _) | (_, None) => String::new(),
        (_, Some(v)) => format!("={v}"),
    };
    let effect = t.effect.map_or_else(String::new, |e| format!(":{e}"));
    let time = t.toleration_seconds.map_or_else(String::new, |s| format!(" for {s}s"));
    format!("{key}{value}{effect}{time}")
}
