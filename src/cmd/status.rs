//! `flotilla status`: the fleet at a glance. The clusters (ready, heartbeat age, what
//! is used of their capacity, how many workloads they run) and, per workspace, each
//! workload: where it runs, its replicas ready per cluster, and why it waits if it does.
//!
//! Everything comes from the API, as `kubectl` sees it: SyncTargets in `root`, and the
//! Deployments and WorkloadPlacements of every workspace through the read-only view
//! across them (`/clusters/*`). `-o json` prints the same facts in a stable shape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::ResourceExt;
use placement_api::quantity::Resources;
use placement_api::workload::{AnyWorkload, WorkloadKind};
use placement_api::{SyncTarget, WorkloadPlacement, CLUSTER_ANNOTATION, CONDITION_FAILOVER_PAUSED, CONDITION_READY};
use serde::Serialize;

use crate::cli::{OutputFormat, StatusArgs};

/// How often `-w` looks again.
const REFRESH: Duration = Duration::from_secs(1);

/// The fleet, as `-o json` prints it. Field names and meanings are kept stable for
/// scripts; new fields may be added.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    /// Every registered cluster, by name.
    pub clusters: Vec<ClusterStatus>,
    /// Each workspace with its workloads, by name.
    pub workspaces: Vec<WorkspaceStatus>,
}

/// One registered cluster (a SyncTarget).
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub name: String,
    /// Whether the scheduler may count on it: its `Ready` condition is True.
    pub ready: bool,
    /// The `Ready` condition's reason when it is not True.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready_reason: Option<String>,
    /// Seconds since its syncer last reported; null before the first report.
    pub heartbeat_age_seconds: Option<i64>,
    /// `True`, `Cordoned` or `Draining`.
    pub schedulable: String,
    pub cpu_millicores: Usage,
    pub memory_bytes: Usage,
    pub pods: Usage,
    /// Workloads assigned to it.
    pub workloads: i32,
    pub labels: BTreeMap<String, String>,
    /// Why its workloads are not moved though it is lost, while the disruption brake
    /// holds it (its `FailoverPaused` condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_paused: Option<String>,
}

/// How much of a resource is requested, out of what the nodes offer.
#[derive(Debug, Serialize, PartialEq, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub used: u64,
    pub allocatable: u64,
}

/// One workspace and its workloads.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStatus {
    pub name: String,
    pub workloads: Vec<WorkloadStatus>,
}

/// One workload of a workspace and where it runs.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    pub namespace: String,
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `Job` or `CronJob`.
    pub kind: String,
    pub name: String,
    /// What its ready count counts towards: its replicas, a DaemonSet's nodes, a
    /// Job's completions ([`placement_api::workload::Headline`]).
    pub replicas: i32,
    /// Ready replicas summed over its clusters (a Job's succeeded pods).
    pub ready_replicas: i32,
    /// `Available`, `Progressing`, `Pending` (placed nowhere yet, or not all of it),
    /// or for a Job `Complete` or `Failed`.
    pub state: String,
    /// Why it is not Available, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its clusters, with each one's share and how much of it is ready.
    pub clusters: Vec<Share>,
    /// What follows it to its clusters, as `Kind/name`.
    pub companions: Vec<String>,
    /// Why a cluster left some of them unapplied, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub companions_refused: Option<String>,
    /// Why it stays on a cluster that was lost, while it does: the disruption brake
    /// holds the cluster, or its kind waits for the loss to be confirmed (its
    /// WorkloadPlacement's `FailoverPaused`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_paused: Option<String>,
}

/// A workload's share on one cluster.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Share {
    pub name: String,
    /// Replicas assigned there (a DaemonSet's: its nodes); 0 for a cluster the workload
    /// is leaving.
    pub replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
    /// What the copy there shows as done over wanted ([`placement_api::workload::copy_counts`]),
    /// as the WorkloadPlacement's summary says it: ready replicas over the share, or a
    /// Job's pods that succeeded over its completions.
    pub shown: String,
}

/// Runs `flotilla status`.
pub async fn run(kubeconfig: &Path, args: StatusArgs) -> anyhow::Result<()> {
    let source = Source::new(kubeconfig, args.workspace.clone()).await?;
    if !args.watch {
        let fleet = source.collect().await?;
        print!("{}", render(&fleet, args.output));
        return Ok(());
    }
    let tty = std::io::stdout().is_terminal();
    let mut last = String::new();
    let mut first = true;
    // One listener for the whole watch, polled from the start: a SIGTERM that arrived
    // while the fleet was being read, with no listener, was lost, and the process kept
    // running.
    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let collected = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            c = source.collect() => c,
        };
        let body = match collected {
            // One line per change, so a script can read it line by line.
            Ok(fleet) if args.output == OutputFormat::Json => serde_json::to_string(&fleet)? + "\n",
            Ok(fleet) => render(&fleet, args.output),
            // The control plane may be restarting in a drill: say so and keep looking.
            Err(e) if args.output == OutputFormat::Text => format!("cannot read the fleet: {e:#}\nretrying every {REFRESH:?}\n"),
            Err(e) => return Err(e),
        };
        let mut out = std::io::stdout().lock();
        if tty && args.output == OutputFormat::Text {
            let now = jiff::Zoned::now().strftime("%H:%M:%S");
            let frame = format!("flotilla status, every {}s; Ctrl-C to stop.   {now}\n\n{body}", REFRESH.as_secs());
            out.write_all(redraw(&frame, first).as_bytes())?;
        } else if body != last {
            // Not a terminal, or JSON: each change once, for a log or a script.
            let sep = if first || args.output == OutputFormat::Json { "" } else { "\n" };
            write!(out, "{sep}{body}")?;
        }
        out.flush()?;
        first = false;
        last = body;
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(REFRESH) => {}
        }
    }
}

/// The terminal bytes that replace the previous frame with `frame` without clearing the
/// screen first, so nothing flickers: home the cursor, overwrite each line and clear
/// what is left of it, then clear below the frame. The first frame clears the screen.
fn redraw(frame: &str, first: bool) -> String {
    let mut s = String::with_capacity(frame.len() + 256);
    s.push_str(if first { "\x1b[2J\x1b[H" } else { "\x1b[H" });
    for line in frame.lines() {
        s.push_str(line);
        s.push_str("\x1b[K\n");
    }
    s.push_str("\x1b[J");
    s
}

/// Where the facts come from.
pub(super) struct Source {
    pub root: kube::Client,
    pub base: kube::Client,
    pub workspace: Option<String>,
}

impl Source {
    /// Clients for every workspace from the admin kubeconfig.
    pub async fn new(kubeconfig: &Path, workspace: Option<String>) -> anyhow::Result<Source> {
        let root = super::root_client(kubeconfig).await?;
        let base = kube::Client::try_from(runtime::clients::base_config(super::root_config(kubeconfig).await?)?)?;
        Ok(Source { root, base, workspace })
    }

    pub async fn collect(&self) -> anyhow::Result<FleetStatus> {
        let targets =
            Api::<SyncTarget>::all(self.root.clone()).list(&ListParams::default()).await.context("listing SyncTargets in root")?;
        let workspaces: Api<DynamicObject> = Api::all_with(self.root.clone(), &super::workspace::workspace_resource());
        let mut names: Vec<String> = match &self.workspace {
            Some(w) => {
                workspaces
                    .get_opt(w)
                    .await
                    .context("reading the workspace")?
                    .with_context(|| format!("workspace {w:?} does not exist; `flotilla workspace list` shows the workspaces"))?;
                vec![w.clone()]
            }
            None => {
                workspaces.list(&ListParams::default()).await.context("listing workspaces")?.items.iter().map(|w| w.name_any()).collect()
            }
        };
        names.retain(|n| n != placement_api::ROOT_WORKSPACE);
        let view = runtime::clients::workspace(&self.base, self.workspace.as_deref().unwrap_or("*"));
        let workloads = list_workloads(&view).await?;
        let placements = Api::<WorkloadPlacement>::all(view).list(&ListParams::default()).await.context("listing WorkloadPlacements")?;
        let now = jiff::Timestamp::now();
        Ok(assemble(now, targets.items, &names, self.workspace.as_deref(), workloads, placements.items))
    }
}

/// Every workload of every kind the scheduler places, through `view` (a workspace's
/// client, or the wildcard view's).
pub(super) async fn list_workloads(view: &kube::Client) -> anyhow::Result<Vec<AnyWorkload>> {
    let mut workloads = Vec::new();
    for kind in placement_api::workload::KINDS.iter().map(|k| k.kind) {
        let api: Api<DynamicObject> = Api::all_with(view.clone(), &kind.describe().api_resource());
        let items = api.list(&ListParams::default()).await.with_context(|| format!("listing {}s", kind.name()))?.items;
        for o in items {
            workloads.push(AnyWorkload::from_value(kind, serde_json::to_value(o)?).with_context(|| format!("reading a {}", kind.name()))?);
        }
    }
    Ok(workloads)
}

/// Puts the listed objects together. `only` is the workspace asked for, whose objects
/// carry no workspace annotation.
fn assemble(
    now: jiff::Timestamp,
    targets: Vec<SyncTarget>,
    workspaces: &[String],
    only: Option<&str>,
    workloads: Vec<AnyWorkload>,
    placements: Vec<WorkloadPlacement>,
) -> FleetStatus {
    let ws_of = |meta: &kube::core::ObjectMeta| {
        only.map(str::to_string).or_else(|| meta.annotations.as_ref().and_then(|a| a.get(CLUSTER_ANNOTATION).cloned())).unwrap_or_default()
    };
    let mut clusters: Vec<ClusterStatus> = targets.iter().map(|t| cluster_status(now, t)).collect();
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let mut wps: HashMap<(String, String, String), WorkloadPlacement> = HashMap::new();
    for wp in placements {
        let key = (ws_of(&wp.metadata), wp.namespace().unwrap_or_default(), wp.name_any());
        wps.insert(key, wp);
    }
    let lost: BTreeSet<String> = clusters.iter().filter(|c| c.not_ready_reason.is_some()).map(|c| c.name.clone()).collect();
    let mut by_ws: BTreeMap<String, Vec<WorkloadStatus>> = workspaces.iter().map(|w| (w.clone(), Vec::new())).collect();
    for d in workloads {
        let meta = d.meta();
        let (ws, ns, name) = (ws_of(meta), meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
        // A lost cluster's last report is not counted, as in the workload's status. A
        // WorkloadPlacement of another kind of the same name is not this one's.
        let named = wps.get(&(ws.clone(), ns.clone(), name.clone()));
        let placed_kind = named.and_then(|wp| WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind));
        let wp = named.filter(|_| placed_kind == Some(d.kind())).map(|wp| placement_api::status::without_lost(wp, &lost));
        let mut status = workload_status(ns, name, &d, wp.as_deref());
        if let Some(other) = placed_kind.filter(|k| *k != d.kind()) {
            status.reason = Some(placement_api::workload::name_taken(&status.name, other, d.kind()));
        }
        by_ws.entry(ws).or_default().push(status);
    }
    let workspaces = by_ws
        .into_iter()
        .map(|(name, mut workloads)| {
            workloads.sort_by(|a, b| (&a.namespace, &a.name, &a.kind).cmp(&(&b.namespace, &b.name, &b.kind)));
            WorkspaceStatus { name, workloads }
        })
        .collect();
    FleetStatus { clusters, workspaces }
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether new workloads may go to the cluster: `True`, `Cordoned` or `Draining`.
pub(super) fn schedulable(t: &SyncTarget) -> &'static str {
    if t.spec.evict_after.is_some() {
        "Draining"
    } else if t.spec.unschedulable {
        "Cordoned"
    } else {
        "True"
    }
}

fn cluster_status(now: jiff::Timestamp, t: &SyncTarget) -> ClusterStatus {
    let status = t.status.clone().unwrap_or_default();
    let ready = condition(&status.conditions, CONDITION_READY);
    let is_ready = ready.is_some_and(|c| c.status == "True");
    let allocatable = Resources::from_resource_list(&status.allocatable).unwrap_or_default();
    let available = Resources::from_resource_list(&status.available).unwrap_or_default();
    let used = allocatable.saturating_sub(available);
    ClusterStatus {
        name: t.name_any(),
        ready: is_ready,
        not_ready_reason: (!is_ready).then(|| ready.map_or_else(|| "NoHeartbeatYet".to_string(), |c| c.reason.clone())),
        heartbeat_age_seconds: status.last_syncer_heartbeat_time.map(|h| (now.as_second() - h.0.as_second()).max(0)),
        schedulable: schedulable(t).into(),
        cpu_millicores: Usage { used: used.cpu_millis, allocatable: allocatable.cpu_millis },
        memory_bytes: Usage { used: used.memory_bytes, allocatable: allocatable.memory_bytes },
        pods: Usage { used: used.pods, allocatable: allocatable.pods },
        workloads: status.workloads,
        labels: t.labels().clone(),
        failover_paused: condition(&status.conditions, CONDITION_FAILOVER_PAUSED).map(|c| c.message.clone()),
    }
}

fn workload_status(namespace: String, name: String, d: &AnyWorkload, wp: Option<&WorkloadPlacement>) -> WorkloadStatus {
    let headline = d.headline();
    let (replicas, ready_replicas) = (headline.desired, headline.ready);
    let mut clusters = Vec::new();
    if let Some(wp) = wp {
        let reported: HashMap<&str, _> = wp.status.iter().flat_map(|s| &s.clusters).map(|c| (c.name.as_str(), c)).collect();
        for a in &wp.spec.clusters {
            let r = reported.get(a.name.as_str());
            // As the WorkloadPlacement's summary counts it: a DaemonSet's share is its
            // nodes there, a Job's its completions.
            let (done, of) = placement_api::workload::copy_counts(d.kind(), r.copied(), a.replicas);
            clusters.push(Share {
                name: a.name.clone(),
                replicas: r.map_or(a.replicas, |r| placement_api::workload::desired_on(d.kind(), r, a.replicas)),
                ready_replicas: r.map_or(0, |r| r.ready_replicas),
                available_replicas: r.map_or(0, |r| r.available_replicas),
                shown: format!("{done}/{of}"),
            });
        }
        for (cluster, r) in &reported {
            if !wp.spec.clusters.iter().any(|a| a.name == *cluster) {
                clusters.push(Share {
                    name: cluster.to_string(),
                    replicas: 0,
                    ready_replicas: r.ready_replicas,
                    available_replicas: r.available_replicas,
                    shown: format!("{}/0", r.ready_replicas),
                });
            }
        }
        // The clusters it runs on by name, then those it is leaving.
        clusters.sort_by(|a, b| (a.replicas == 0, &a.name).cmp(&(b.replicas == 0, &b.name)));
    }
    let (state, reason) = if d.kind().describe().placed() {
        placement_api::status::workload_state(d.replicas(), &headline, wp)
    } else {
        placement_api::status::in_workspace_state(&headline)
    };
    let state = state.as_str().to_string();
    let companions = wp.and_then(|wp| wp.status.as_ref()).map(|s| s.companions.clone()).unwrap_or_default();
    let conds = wp.and_then(|wp| wp.status.as_ref()).map(|s| s.conditions.as_slice()).unwrap_or_default();
    let companions_refused =
        condition(conds, placement_api::CONDITION_COMPANIONS_SYNCED).filter(|c| c.status == "False").map(|c| c.message.clone());
    let kind = d.kind().name().to_string();
    let failover_paused =
        condition(conds, placement_api::CONDITION_FAILOVER_PAUSED).filter(|c| c.status == "True").map(|c| c.message.clone());
    WorkloadStatus {
        namespace,
        kind,
        name,
        replicas,
        ready_replicas,
        state,
        reason,
        clusters,
        companions,
        companions_refused,
        failover_paused,
    }
}

/// The fleet as text or JSON.
fn render(fleet: &FleetStatus, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => serde_json::to_string_pretty(fleet).expect("the fleet status serializes") + "\n",
        OutputFormat::Text => render_text(fleet),
    }
}

fn render_text(fleet: &FleetStatus) -> String {
    let mut out = String::new();
    if fleet.clusters.is_empty() {
        out.push_str(
            "No clusters registered. Register one with `flotilla cluster register NAME --kubeconfig FILE`, or run `flotilla up`.\n",
        );
    } else {
        let rows: Vec<[String; 8]> = fleet
            .clusters
            .iter()
            .map(|c| {
                let ready = match (&c.not_ready_reason, c.ready) {
                    (_, true) => "True".to_string(),
                    (Some(r), false) => format!("False ({r})"),
                    (None, false) => "False".to_string(),
                };
                [
                    c.name.clone(),
                    ready,
                    c.heartbeat_age_seconds.map_or_else(|| "never".into(), apimachinery::objmeta::human_duration),
                    format!("{}/{}", cpu(c.cpu_millicores.used), cpu(c.cpu_millicores.allocatable)),
                    format!("{}/{}", memory(c.memory_bytes.used), memory(c.memory_bytes.allocatable)),
                    format!("{}/{}", c.pods.used, c.pods.allocatable),
                    c.workloads.to_string(),
                    c.schedulable.clone(),
                ]
            })
            .collect();
        out.push_str(&super::format_table(
            &["CLUSTER", "READY", "HEARTBEAT", "CPU USED", "MEMORY USED", "PODS", "WORKLOADS", "SCHEDULABLE"],
            &rows,
        ));
        let paused: Vec<&ClusterStatus> = fleet.clusters.iter().filter(|c| c.failover_paused.is_some()).collect();
        if let Some(first) = paused.first() {
            let names: Vec<&str> = paused.iter().map(|c| c.name.as_str()).collect();
            out.push_str(&format!(
                "\nFAILOVER PAUSED for {} (disruption brake): {}\n",
                names.join(", "),
                first.failover_paused.as_deref().unwrap_or_default()
            ));
        }
    }
    if fleet.workspaces.is_empty() {
        out.push_str("\nNo workspaces. Create one with `flotilla workspace create NAME --use`.\n");
    }
    for ws in &fleet.workspaces {
        out.push_str(&format!("\nWORKSPACE {}\n", ws.name));
        if ws.workloads.is_empty() {
            out.push_str(&format!(
                "No workloads. Apply Deployments, StatefulSets, DaemonSets, Jobs or CronJobs with `kubectl --context {} apply -f FILE`.\n",
                ws.name
            ));
            continue;
        }
        let rows: Vec<[String; 6]> = ws
            .workloads
            .iter()
            .map(|w| {
                let clusters = if w.clusters.is_empty() {
                    "-".to_string()
                } else {
                    w.clusters.iter().map(|s| format!("{} {}", s.name, s.shown)).collect::<Vec<_>>().join(", ")
                };
                let mut state = match &w.reason {
                    Some(r) => format!("{}: {r}", w.state),
                    None => w.state.clone(),
                };
                if let Some(why) = &w.companions_refused {
                    state.push_str(&format!("; companions refused: {why}"));
                }
                if let Some(why) = &w.failover_paused {
                    state.push_str(&format!("; {why}"));
                }
                let companions = match (w.companions.len(), &w.companions_refused) {
                    (0, None) => "-".to_string(),
                    (n, None) => n.to_string(),
                    (n, Some(_)) => format!("{n} (refused)"),
                };
                let short = WorkloadKind::of_resource(&w.kind).map_or("deploy", |k| k.describe().short);
                [
                    w.namespace.clone(),
                    format!("{short}/{}", w.name),
                    format!("{}/{}", w.ready_replicas, w.replicas),
                    clusters,
                    companions,
                    state,
                ]
            })
            .collect();
        out.push_str(&super::format_table(&["NAMESPACE", "WORKLOAD", "READY", "CLUSTERS (ready/assigned)", "COMPANIONS", "STATUS"], &rows));
    }
    out
}

/// CPU the way kubectl shows it, `1500m` or `8`, with at most one decimal from 10 cores up.
// `is_multiple_of` needs Rust 1.87; the workspace supports 1.85.
#[allow(clippy::manual_is_multiple_of)]
pub(super) fn cpu(millis: u64) -> String {
    if millis % 1000 == 0 || millis >= 10_000 {
        format!("{}", (millis as f64 / 1000.0 * 10.0).round() / 10.0)
    } else {
        format!("{}m", millis)
    }
}

/// Memory with a binary suffix and at most one decimal: `3.5Gi`, `512Mi`.
pub(super) fn memory(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    for (suffix, shift) in UNITS {
        let unit = (1u64 << shift) as f64;
        if bytes as f64 >= unit {
            let v = (bytes as f64 / unit * 10.0).round() / 10.0;
            return format!("{v}{suffix}");
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;
    use std::sync::Arc;

    fn target(name: &str, ready: &str, beat_secs_ago: i64, now: jiff::Timestamp) -> SyncTarget {
        let beat = jiff::Timestamp::from_second(now.as_second() - beat_secs_ago).unwrap();
        serde_json::from_value(json!({
            "apiVersion": "workload.flotilla.io/v1alpha1", "kind": "SyncTarget",
            "metadata": {"name": name, "labels": {"region": "us"}},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": ready, "reason": if ready == "True" { "HeartbeatFresh" } else { "HeartbeatExpired" },
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "lastSyncerHeartbeatTime": beat.to_string(),
                "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "220"},
                "available": {"cpu": "6500m", "memory": "14848Mi", "pods": "217"},
                "workloads": 2,
            },
        }))
        .unwrap()
    }

    fn deployment(ns: &str, name: &str, replicas: i32, ready: i32, available: bool) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {"readyReplicas": ready, "conditions": [{"type": "Available", "status": if available { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    fn placement(name: &str, spec: serde_json::Value, status: serde_json::Value) -> WorkloadPlacement {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.flotilla.io/v1alpha1", "kind": "WorkloadPlacement",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "clusters": spec},
            "status": status,
        }))
        .unwrap()
    }

    fn cond(type_: &str, status: &str, message: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": "R", "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn clusters_show_use_of_capacity_and_heartbeat_age() {
        let now = jiff::Timestamp::now();
        let fleet = assemble(now, vec![target("west", "True", 1, now), target("east", "False", 9, now)], &[], None, vec![], vec![]);
        let east = &fleet.clusters[0];
        assert_eq!((east.name.as_str(), east.ready, east.not_ready_reason.as_deref()), ("east", false, Some("HeartbeatExpired")));
        assert_eq!(east.heartbeat_age_seconds, Some(9));
        assert_eq!(east.cpu_millicores, Usage { used: 1500, allocatable: 8000 });
        assert_eq!(east.memory_bytes, Usage { used: 1536 << 20, allocatable: 16 << 30 });
        assert_eq!(east.pods, Usage { used: 3, allocatable: 220 });
        let text = render_text(&fleet);
        assert!(
            text.contains("east      False (HeartbeatExpired)   9s          1500m/8    1.5Gi/16Gi    3/220   2           True"),
            "{text}"
        );
    }

    #[test]
    fn workloads_show_shares_states_and_pending_reasons() {
        let now = jiff::Timestamp::now();
        let deployments = vec![
            deployment("default", "web", 6, 6, true),
            deployment("default", "huge", 1, 0, false),
            deployment("default", "moving", 2, 1, false),
            deployment("default", "new", 1, 0, false),
        ];
        let placements = vec![
            placement(
                "web",
                json!([{"name": "east", "replicas": 3}, {"name": "west", "replicas": 3}]),
                json!({"clusters": [{"name": "east", "readyReplicas": 3, "availableReplicas": 3}, {"name": "west", "readyReplicas": 3, "availableReplicas": 3}],
                       "conditions": [cond("Scheduled", "True", ""), cond("Available", "True", "6/6")],
                       "companions": ["Ingress/web", "Service/web"]}),
            ),
            placement("huge", json!([]), json!({"conditions": [cond("Scheduled", "False", "0/3 clusters fit: 3 Insufficient cpu")]})),
            placement(
                "moving",
                json!([{"name": "west", "replicas": 2}]),
                json!({"clusters": [{"name": "east", "readyReplicas": 1, "availableReplicas": 1}],
                       "conditions": [cond("Scheduled", "True", ""), cond("Available", "False", "1/2 replicas ready"),
                                      cond("CompanionsSynced", "False", "west: Service moving: someone else's")],
                       "companions": ["Service/moving"]}),
            ),
        ];
        let workloads = deployments.into_iter().map(|d| AnyWorkload::Deployment(Arc::new(d))).collect();
        let fleet = assemble(now, vec![], &["demo".to_string(), "empty".to_string()], Some("demo"), workloads, placements);
        let demo = &fleet.workspaces[0];
        let states: Vec<(&str, &str, Option<&str>)> =
            demo.workloads.iter().map(|w| (w.name.as_str(), w.state.as_str(), w.reason.as_deref())).collect();
        assert_eq!(
            states,
            [
                ("huge", "Pending", Some("0/3 clusters fit: 3 Insufficient cpu")),
                ("moving", "Progressing", Some("1/2 replicas ready")),
                ("new", "Pending", Some("not scheduled yet: the scheduler has not placed it")),
                ("web", "Available", None),
            ]
        );
        let moving = &demo.workloads[1];
        let shares: Vec<(&str, i32, i32)> = moving.clusters.iter().map(|s| (s.name.as_str(), s.ready_replicas, s.replicas)).collect();
        assert_eq!(shares, [("west", 0, 2), ("east", 1, 0)], "the cluster it leaves comes last, with no share");
        assert!(fleet.workspaces[1].workloads.is_empty() && fleet.workspaces[1].name == "empty");
        let text = render_text(&fleet);
        assert!(text.contains("default     deploy/web      6/6     east 3/3, west 3/3          2             Available\n"), "{text}");
        assert!(
            text.contains("1 (refused)   Progressing: 1/2 replicas ready; companions refused: west: Service moving: someone else's"),
            "{text}"
        );
        assert!(text.contains("default     deploy/new      0/1     -                           -             Pending"), "{text}");
        let json = serde_json::to_value(&fleet).unwrap();
        assert_eq!(json["workspaces"][0]["workloads"][3]["companions"], json!(["Ingress/web", "Service/web"]));
        assert_eq!(
            json["workspaces"][0]["workloads"][3]["clusters"][0],
            json!({"name": "east", "replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "shown": "3/3"})
        );
    }

    #[test]
    fn a_workload_whose_name_another_kind_holds_says_so() {
        let now = jiff::Timestamp::now();
        let job: k8s_openapi::api::batch::v1::Job =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"template": {}}})).unwrap();
        let placements = vec![placement("web", json!([{"name": "east", "replicas": 2}]), json!({}))];
        let workloads = vec![AnyWorkload::Deployment(Arc::new(deployment("default", "web", 2, 2, true))), AnyWorkload::Job(Arc::new(job))];
        let fleet = assemble(now, vec![], &["demo".to_string()], Some("demo"), workloads, placements);
        let listed: Vec<(&str, &str, &str)> =
            fleet.workspaces[0].workloads.iter().map(|w| (w.kind.as_str(), w.state.as_str(), w.reason.as_deref().unwrap_or(""))).collect();
        assert_eq!(listed[0].0, "Deployment");
        assert_eq!(
            listed[1],
            (
                "Job",
                "Pending",
                "not placed: WorkloadPlacement web is the Deployment web's, and a WorkloadPlacement has its workload's name; rename this Job to place it"
            )
        );
    }

    #[test]
    fn a_finished_jobs_cluster_shows_its_successes_over_its_completions() {
        let now = jiff::Timestamp::now();
        let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
            "metadata": {"name": "pi", "namespace": "default"},
            "spec": {"completions": 1, "template": {"spec": {"containers": []}}},
            "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
        }))
        .unwrap();
        let wp = placement(
            "pi",
            json!([{"name": "west", "replicas": 1}]),
            json!({"clusters": [{"name": "west", "batch": {"succeeded": 1, "completions": 1}}]}),
        );
        let mut wp = wp;
        // What the syncer of this build reports of it, and a workload of kind Job.
        wp.spec.workload.kind = "Job".into();
        wp.spec.workload.api_version = "batch/v1".into();
        let fleet = assemble(now, vec![], &["demo".to_string()], Some("demo"), vec![AnyWorkload::Job(Arc::new(job))], vec![wp]);
        let text = render_text(&fleet);
        assert!(text.contains("job/pi     1/1     west 1/1"), "{text}");
        assert!(text.contains("Complete"), "{text}");
    }

    #[test]
    fn a_lost_clusters_replicas_are_not_counted_ready() {
        let now = jiff::Timestamp::now();
        let placements = vec![placement(
            "api",
            json!([{"name": "east", "replicas": 2}]),
            json!({"clusters": [{"name": "east", "readyReplicas": 2, "availableReplicas": 2}], "conditions": [cond("Scheduled", "True", "")]}),
        )];
        let fleet = assemble(
            now,
            vec![target("east", "False", 20, now)],
            &["demo".to_string()],
            Some("demo"),
            vec![AnyWorkload::Deployment(Arc::new(deployment("default", "api", 2, 0, false)))],
            placements,
        );
        let api = &fleet.workspaces[0].workloads[0];
        assert_eq!((api.clusters[0].ready_replicas, api.state.as_str()), (0, "Progressing"));
        assert_eq!(api.reason.as_deref(), Some("cluster east is not Ready: its replicas cannot be seen"));
    }

    #[test]
    fn a_redraw_overwrites_in_place() {
        assert_eq!(redraw("a\nb\n", false), "\x1b[Ha\x1b[K\nb\x1b[K\n\x1b[J");
        assert!(redraw("a", true).starts_with("\x1b[2J\x1b[H"));
    }

    #[test]
    fn quantities_read_well() {
        assert_eq!((cpu(0), cpu(500), cpu(8000), cpu(12_500)), ("0".into(), "500m".into(), "8".into(), "12.5".into()));
        assert_eq!((memory(0), memory(512 << 20), memory(3584 << 20)), ("0".into(), "512Mi".into(), "3.5Gi".into()));
    }
}
