//! `flotilla what-if --lose C[,C] | --drain C | --cordon C`: a dry run of a failure or
//! of an operator's action. It reads every workload once, changes the clusters as the
//! scheduler would see them, and decides again every workload that runs on a changed
//! cluster, with the scheduler's own placement core ([`scheduler::core::place`]).
//! Each decision takes its room from the clusters before the next is made, as the
//! scheduler's assumed room does; workloads are taken in name order, where the
//! scheduler takes them as its queue gives them, so when room is short the two may
//! pick different winners. Nothing is written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use placement_api::workload::{AnyWorkload, WorkloadKind};
use placement_api::{Placement, WorkloadPlacement, CLUSTER_ANNOTATION};
use scheduler::core::{self, Share};

use super::explain::{clusters, resolve, shares_text};
use super::status::{cpu, memory};
use crate::cli::WhatIfArgs;

/// What changes, as the scheduler would see it.
enum Change {
    Lose(Vec<String>),
    Drain(String),
    Cordon(String),
}

impl Change {
    fn of(args: &WhatIfArgs) -> Change {
        match (&args.drain, &args.cordon) {
            (Some(c), _) => Change::Drain(c.clone()),
            (None, Some(c)) => Change::Cordon(c.clone()),
            (None, None) => Change::Lose(args.lose.clone()),
        }
    }

    fn names(&self) -> Vec<&str> {
        match self {
            Change::Lose(v) => v.iter().map(String::as_str).collect(),
            Change::Drain(c) | Change::Cordon(c) => vec![c.as_str()],
        }
    }

    fn text(&self) -> String {
        match self {
            Change::Lose(v) => format!("{} were lost", v.join(" and ")),
            Change::Drain(c) => format!("{c} were drained"),
            Change::Cordon(c) => format!("{c} were cordoned"),
        }
    }
}

/// Runs `flotilla what-if`.
pub async fn run(kubeconfig: &Path, args: WhatIfArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let root = super::root_client(kubeconfig).await?;
    let base = kube::Client::try_from(runtime::clients::base_config(super::root_config(kubeconfig).await?)?)?;
    let change = Change::of(&args);
    let before = clusters(&root).await?;
    for name in change.names() {
        if !before.iter().any(|c| c.name == name) {
            let known: Vec<&str> = before.iter().map(|c| c.name.as_str()).collect();
            anyhow::bail!("no cluster {name:?} is registered (registered: {}); `flotilla cluster list` shows them", known.join(", "));
        }
    }
    let view = runtime::clients::workspace(&base, args.workspace.as_deref().unwrap_or("*"));
    let list = ListParams::default();
    let workloads = super::status::list_workloads(&view).await?;
    let placements = Api::<Placement>::all(view.clone()).list(&list).await.context("listing Placements")?.items;
    let namespaces = Api::<Namespace>::all(view.clone()).list(&list).await.context("listing namespaces")?.items;
    let wps = Api::<WorkloadPlacement>::all(view).list(&list).await.context("listing WorkloadPlacements")?.items;
    let ws_of = |m: &kube::core::ObjectMeta| {
        args.workspace.clone().or_else(|| m.annotations.as_ref().and_then(|a| a.get(CLUSTER_ANNOTATION).cloned())).unwrap_or_default()
    };
    let mut rules: BTreeMap<String, Vec<&Placement>> = BTreeMap::new();
    for p in &placements {
        rules.entry(ws_of(&p.metadata)).or_default().push(p);
    }
    let ns_by: BTreeMap<(String, String), &Namespace> = namespaces.iter().map(|n| ((ws_of(&n.metadata), n.name_any()), n)).collect();
    let wp_by: BTreeMap<(String, String, String), &WorkloadPlacement> =
        wps.iter().map(|w| ((ws_of(&w.metadata), w.namespace().unwrap_or_default(), w.name_any()), w)).collect();

    // The clusters after the change.
    let mut after = before.clone();
    let changed: BTreeSet<&str> = change.names().into_iter().collect();
    let mut out = format!("what if {}:\n", change.text());
    let mut brake = false;
    if let Change::Lose(lost) = &change {
        let ready = before.iter().filter(|c| c.ready).count();
        let lost_ready = before.iter().filter(|c| c.ready && lost.contains(&c.name)).count();
        brake = scheduler::health::brake_engaged(lost_ready, ready, args.unhealthy_cluster_threshold);
        if brake {
            out.push_str(&format!(
                "the disruption brake would hold: {lost_ready} of {ready} Ready clusters lost at once, more than {:.0}%; their workloads \
                 stay until the clusters return or `flotilla cluster confirm-lost NAME`\n",
                args.unhealthy_cluster_threshold * 100.0
            ));
        }
    }
    for c in after.iter_mut().filter(|c| changed.contains(c.name.as_str())) {
        match &change {
            Change::Lose(_) => {
                c.ready = false;
                c.braked = brake;
            }
            Change::Drain(_) => {
                c.draining = true;
                c.cordoned = true;
            }
            Change::Cordon(_) => c.cordoned = true,
        }
    }

    let mut keyed: Vec<((String, String, String), AnyWorkload)> = workloads
        .into_iter()
        .map(|d| {
            let m = d.meta();
            ((ws_of(m), m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()), d)
        })
        // A WorkloadPlacement places one kind of the name: the others are not placed.
        .filter(|(key, d)| {
            wp_by.get(key).is_none_or(|wp| WorkloadKind::of(&wp.spec.workload.api_version, &wp.spec.workload.kind) == Some(d.kind()))
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut affected, mut moved, mut stuck) = (0, 0, 0);
    for (key, d) in keyed {
        let (ws, ns, _) = &key;
        let runs_there = wp_by.get(&key).is_some_and(|wp| wp.spec.clusters.iter().any(|c| changed.contains(c.name.as_str())));
        if !runs_there || d.meta().deletion_timestamp.is_some() || d.finished() {
            continue;
        }
        affected += 1;
        let empty = Vec::new();
        let inputs = match resolve(
            ws,
            d,
            ns_by.get(&(ws.clone(), ns.clone())).copied(),
            rules.get(ws).unwrap_or(&empty),
            wp_by.get(&key).copied(),
        ) {
            Ok(i) => i,
            Err(e) => {
                stuck += 1;
                out.push_str(&format!("{}/{}/{}: cannot be decided: {e:#}\n", key.0, key.1, key.2));
                continue;
            }
        };
        let kind = inputs.object.kind();
        let of_kind = if kind == WorkloadKind::Deployment { String::new() } else { format!(" ({})", kind.name()) };
        let name = format!("{}/{}/{}{of_kind}", key.0, key.1, key.2);
        // A kind that never runs on two clusters stays on a lost cluster until its loss
        // is confirmed, as the brake holds what runs on the clusters it holds.
        let mut views = after.clone();
        let waits = matches!(change, Change::Lose(_)) && scheduler::inputs::waits_for_confirm(inputs.object.kind(), &inputs.placement.spec);
        if waits {
            for c in views.iter_mut().filter(|c| changed.contains(c.name.as_str())) {
                c.braked = true;
            }
        }
        match core::place(&views, &inputs.workload, &inputs.rule(views.len()), &inputs.current, !inputs.short) {
            Ok(_) if waits => {
                out.push_str(&format!(
                    "{name}: stays on {} until the loss is confirmed (`flotilla cluster confirm-lost`): a {} never runs on two clusters at once\n",
                    shares_text(&inputs.current),
                    inputs.object.kind().name()
                ));
            }
            Ok(d) if same(&d.shares, &inputs.current) => {
                let why = match &change {
                    Change::Lose(_) => "the disruption brake holds its cluster",
                    Change::Drain(_) => "nothing else fits",
                    Change::Cordon(_) => "a cordoned cluster keeps what it runs",
                };
                out.push_str(&format!("{name}: stays on {} ({why})\n", shares_text(&inputs.current)));
            }
            Ok(d) => {
                moved += 1;
                take_room(&mut after, &inputs.current, &d.shares, inputs.workload.per_replica);
                let fewer = d.fewer.map(|f| format!(" (on fewer clusters than asked for: {f})")).unwrap_or_default();
                out.push_str(&format!("{name}: {} -> {}{fewer}\n", shares_text(&inputs.current), shares_text(&d.shares)));
            }
            Err(no_fit) => {
                stuck += 1;
                out.push_str(&format!("{name}: stays on {}: nothing fits: {no_fit}\n", shares_text(&inputs.current)));
            }
        }
    }
    if affected == 0 {
        out.push_str("no workload runs there: nothing would move\n");
    }
    let table: Vec<[String; 7]> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            let state = if changed.contains(a.name.as_str()) {
                match &change {
                    Change::Lose(_) if brake => "lost, held",
                    Change::Lose(_) => "lost",
                    Change::Drain(_) => "draining",
                    Change::Cordon(_) => "cordoned",
                }
            } else if !a.ready {
                "NotReady"
            } else {
                "Ready"
            };
            [
                a.name.clone(),
                state.to_string(),
                cpu(b.available.cpu_millis),
                cpu(a.available.cpu_millis),
                memory(b.available.memory_bytes),
                memory(a.available.memory_bytes),
                format!("{} -> {}", b.available.pods, a.available.pods),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&super::format_table(
        &["CLUSTER", "AFTER", "FREE CPU NOW", "FREE CPU AFTER", "FREE MEMORY NOW", "FREE MEMORY AFTER", "FREE PODS"],
        &table,
    ));
    out.push_str(&format!(
        "\n{affected} workload(s) affected: {moved} would move, {stuck} would stay for want of room or a usable Placement, {} would stay put; \
         worked out in {:.0} ms, and nothing was changed\n",
        affected - moved - stuck,
        started.elapsed().as_secs_f64() * 1e3
    ));
    print!("{out}");
    Ok(())
}

fn same(a: &[Share], b: &[Share]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

/// Takes from each cluster's free room what a decision adds there, as the scheduler's
/// assumed room does until the next heartbeat shows it.
fn take_room(clusters: &mut [core::Cluster], before: &[Share], after: &[Share], per: placement_api::quantity::Resources) {
    for s in after {
        let had = before.iter().find(|b| b.cluster == s.cluster).map_or(0, |b| b.replicas);
        let added = u64::from(s.replicas.saturating_sub(had));
        if let Some(c) = clusters.iter_mut().find(|c| c.name == s.cluster) {
            let used = placement_api::quantity::Resources::new(per.cpu_millis * added, per.memory_bytes * added, per.pods * added);
            c.available = c.available.saturating_sub(used);
        }
    }
}
