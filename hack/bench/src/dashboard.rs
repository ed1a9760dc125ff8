//! The dashboard scenario: a headless Chromium, driven through Playwright as the
//! browser tests drive it, signed in to a control plane that holds `workloads`
//! Deployments with their WorkloadPlacements over `clusters` SyncTargets, written
//! through the API as the scheduler and the syncers write them (no scheduler runs, so
//! nothing else moves).
//!
//! - Load: sign-in to every workload counted on the page. Floor: this process listing
//!   the same Deployments and WorkloadPlacements.
//! - Event to page: Rescheduled Events are created at a steady rate while a storm of
//!   moves rewrites WorkloadPlacements; for each Event, from its create being
//!   acknowledged to the page first drawing it (the page records that moment,
//!   `window.flotillaDashboard.shownAt`). Floor: a watch in this process, from the same
//!   acknowledgement to the watch delivering the Event.
//! - Frames: the time between animation frames during the storm, and the long tasks.
//! - Memory: the page's JavaScript heap once loaded, and after the storm.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::report::{int, num, Better, Report, Row};
use crate::{bench_deployment, create_workspaces, placements_api, summarize, wait_until, watch_applied, ServerProc};

#[allow(dead_code)]
#[path = "../../../tests/e2e/common/browser.rs"]
mod browser;

#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub workloads: usize,
    pub clusters: usize,
    /// Rescheduled Events created during the storm, at `events_per_sec`.
    pub events: usize,
    pub events_per_sec: f64,
    /// Workloads moved from one cluster to another during the storm.
    pub moves: usize,
}

/// The workspace the workloads are in.
const WORKSPACE: &str = "bench";
/// Requests in flight while the workloads are written.
const IN_FLIGHT: usize = 32;

fn epoch_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or_default()
}

fn cluster(i: usize) -> String {
    format!("c{i:03}")
}

fn sync_targets(root: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("workload.flotilla.io", "v1alpha1", "SyncTarget");
    Api::all_with(root, &ApiResource::from_gvk_with_plural(&gvk, "synctargets"))
}

/// A Ready SyncTarget's status as the scheduler and its syncer write it.
fn cluster_status(now: &str) -> Value {
    json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "HeartbeatCurrent", "message": "bench", "lastTransitionTime": now}],
        "lastSyncerHeartbeatTime": now, "workloads": 100,
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1100"},
        "available": {"cpu": "40", "memory": "200Gi", "pods": "1000"},
        "cpu": "40/64", "memory": "200Gi/256Gi", "schedulable": "True"}})
}

/// A WorkloadPlacement's status with one cluster's report, Available.
fn placement_status(cluster: &str, now: &str) -> Value {
    json!({"status": {
        "clusters": [{"name": cluster, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
                      "observed": true, "syncedGeneration": 1, "lastSyncTime": now}],
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": "placed by Placement default", "lastTransitionTime": now},
            {"type": "Available", "status": "True", "reason": "AllClustersAvailable", "message": "1/1 replicas ready", "lastTransitionTime": now}],
        "ready": "1/1", "summary": format!("{cluster}=1/1"), "state": "Available"}})
}

fn placement(name: &str, cluster: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.flotilla.io/v1alpha1", "kind": "WorkloadPlacement",
        "metadata": {"name": name},
        "spec": {"workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "placement": "default",
                 "clusters": [{"name": cluster, "replicas": 1}]}
    }))?)
}

fn rescheduled(name: &str, workload: &str, from: &str, to: &str, now: &str) -> anyhow::Result<Event> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": workload},
        "reason": "Rescheduled", "type": "Normal", "count": 1,
        "message": format!("moved off {from} (bench); now on {to}=1"),
        "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "flotilla-bench"}
    }))?)
}

/// Runs a blocking browser command without holding up the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Runs the scenario and adds its rows.
pub async fn rows(bin: &Path, sz: Sizes, report: &mut Report) -> anyhow::Result<()> {
    let cp = ServerProc::start_without_scheduler(bin)?;
    let root = cp.client("root", None).await?;
    create_workspaces(root.clone(), 1, |_| WORKSPACE.to_string(), Duration::from_secs(60)).await?;
    let ws = cp.client("root", Some(WORKSPACE)).await?;
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();

    // The fleet and the workloads, as the scheduler and the syncers leave them.
    let targets = sync_targets(root.clone());
    for i in 0..sz.clusters {
        let st: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "workload.flotilla.io/v1alpha1", "kind": "SyncTarget",
            "metadata": {"name": cluster(i), "labels": {"region": format!("r{}", i % 4)}},
            "spec": {"syncMode": "Pull"}}))?;
        targets.create(&PostParams::default(), &st).await?;
        targets.patch_status(&cluster(i), &PatchParams::default(), &Patch::Merge(cluster_status(&now))).await?;
    }
    let deployments: Api<Deployment> = Api::namespaced(ws.clone(), "default");
    let wps = placements_api(ws.clone());
    let written = Instant::now();
    futures::stream::iter(0..sz.workloads)
        .map(|i| {
            let (deployments, wps, now) = (deployments.clone(), wps.clone(), now.clone());
            async move {
                let (name, at) = (format!("app-{i:05}"), cluster(i % sz.clusters));
                deployments.create(&PostParams::default(), &bench_deployment(&name, 1)?).await?;
                wps.create(&PostParams::default(), &placement(&name, &at)?).await?;
                wps.patch_status(&name, &PatchParams::default(), &Patch::Merge(placement_status(&at, &now))).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    println!("# dashboard: {} workloads written in {} s", int(sz.workloads), num(written.elapsed().as_secs_f64()));

    // The floor of the load: this process listing what the page lists.
    let listed = Instant::now();
    let (d, w) = (deployments.list(&Default::default()).await?.items.len(), wps.list(&Default::default()).await?.items.len());
    let list_secs = listed.elapsed().as_secs_f64();
    anyhow::ensure!(d == sz.workloads && w == sz.workloads, "listed {d} Deployments and {w} WorkloadPlacements of {}", sz.workloads);

    // Sign in with a link, as a person would, and wait for every workload on the page.
    let o = std::process::Command::new(bin)
        .args(["--data-dir", cp.data_dir().to_str().unwrap_or_default(), "dashboard", "--no-open"])
        .output()?;
    anyhow::ensure!(o.status.success(), "flotilla dashboard: {}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let link =
        stdout.lines().map(str::trim).find(|l| l.contains("#signin=")).ok_or_else(|| anyhow::anyhow!("no link in {stdout}"))?.to_string();
    let log = cp.data_dir().join("browser.log");
    let mut b = blocking(|| browser::Browser::launch(&log))
        .ok_or_else(|| anyhow::anyhow!("no browser to drive: run hack/browser.sh (Debian's chromium and playwright-core)"))?;
    let loading = Instant::now();
    blocking(|| b.goto(&link));
    let counted = format!("window.flotillaDashboard && document.getElementById('workload-count').textContent === '({})'", sz.workloads);
    let poll = Duration::from_millis(50);
    let counted_all = || blocking(|| b.eval(&counted)).as_bool() == Some(true);
    wait_until(Duration::from_secs(300), poll, counted_all, || format!("the page did not count {} workloads in 300 s", sz.workloads))
        .await?;
    let load_secs = loading.elapsed().as_secs_f64();
    // What the page keeps, after a full collection.
    let heap = |b: &mut browser::Browser| {
        blocking(|| {
            b.gc();
            b.eval("performance.memory.usedJSHeapSize")
        })
        .as_f64()
        .unwrap_or(f64::NAN)
            / 1048576.0
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let heap_loaded = heap(&mut b);
    let dom_nodes = blocking(|| b.eval("document.getElementsByTagName('*').length")).as_u64().unwrap_or_default();

    // The storm: moves and Events together, while the page's frames are timed.
    blocking(|| {
        b.eval(
            "window.benchFrames = []; window.benchLong = []; window.benchStop = false;
             window.flotillaDashboard.costs(true);
             new PerformanceObserver((l) => { for (const e of l.getEntries()) window.benchLong.push(e.duration); }).observe({ type: 'longtask' });
             (function frame(t) { if (window.benchStop) return; window.benchFrames.push(t); requestAnimationFrame(frame); })(performance.now()); true",
        )
    });
    let delivered: Arc<Mutex<HashMap<String, f64>>> = Arc::default();
    let seen = delivered.clone();
    let events: Api<Event> = Api::namespaced(ws.clone(), "default");
    let watch = watch_applied(events.clone(), WatchParams::default(), move |e: Event, _| {
        if let Some(name) = e.metadata.name {
            seen.lock().unwrap().entry(name).or_insert_with(epoch_ms);
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let storm_started = Instant::now();
    let moves = {
        let (wps, now) = (wps.clone(), now.clone());
        tokio::spawn(async move {
            futures::stream::iter(0..sz.moves)
                .map(|i| {
                    let (wps, now) = (wps.clone(), now.clone());
                    async move {
                        let (name, to) = (format!("app-{:05}", i % sz.workloads), cluster((i + 1) % sz.clusters));
                        let spec = json!({"spec": {"clusters": [{"name": to, "replicas": 1}]}});
                        wps.patch(&name, &PatchParams::default(), &Patch::Merge(spec)).await?;
                        wps.patch_status(&name, &PatchParams::default(), &Patch::Merge(placement_status(&to, &now))).await?;
                        anyhow::Ok(())
                    }
                })
                .buffer_unordered(8)
                .try_collect::<Vec<_>>()
                .await
        })
    };
    let every = Duration::from_secs_f64(1.0 / sz.events_per_sec);
    let mut acked: Vec<(String, f64)> = Vec::with_capacity(sz.events);
    let mut tick = tokio::time::interval(every);
    for i in 0..sz.events {
        tick.tick().await;
        let (name, workload) = (format!("bench-{i:05}"), format!("app-{:05}", i % sz.workloads));
        events
            .create(
                &PostParams::default(),
                &rescheduled(&name, &workload, &cluster(i % sz.clusters), &cluster((i + 1) % sz.clusters), &now)?,
            )
            .await?;
        acked.push((name, epoch_ms()));
    }
    moves.await??;
    let storm_secs = storm_started.elapsed().as_secs_f64();
    // Everything drawn: the last Event is on the page.
    let last = format!("bench/default/{}", acked.last().map(|(n, _)| n.as_str()).unwrap_or_default());
    let shown_last = format!("window.flotillaDashboard.shownAt({last:?}) !== undefined");
    let drawn = || blocking(|| b.eval(&shown_last)).as_bool() == Some(true);
    wait_until(Duration::from_secs(60), poll, drawn, || format!("the page never drew {last} in 60 s")).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let frames: Vec<f64> = serde_json::from_value(blocking(|| {
        b.eval("window.benchStop = true; const f = window.benchFrames; f.slice(1).map((t, i) => t - f[i])")
    }))?;
    let long: Vec<f64> = serde_json::from_value(blocking(|| b.eval("window.benchLong")))?;
    // The page's own account of its time: drawing, and taking in the watches' data.
    let costs = blocking(|| b.eval("window.flotillaDashboard.costs()"));
    let cost = |k: &str| costs.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let heap_after = heap(&mut b);
    let names: Vec<String> = acked.iter().map(|(n, _)| format!("bench/default/{n}")).collect();
    let shown: Vec<Option<f64>> = serde_json::from_value(blocking(|| {
        b.eval(&format!("{}.map((k) => window.flotillaDashboard.shownAt(k) ?? null)", serde_json::to_string(&names).unwrap_or_default()))
    }))?;
    let errors = blocking(|| b.errors());
    drop(b);

    let delivered = delivered.lock().unwrap().clone();
    let (mut page, mut floor, mut missing) = (Vec::new(), Vec::new(), 0usize);
    for ((name, at), shown) in acked.iter().zip(&shown) {
        match shown {
            Some(t) => page.push(t - at),
            None => missing += 1,
        }
        if let Some(t) = delivered.get(name) {
            floor.push(t - at);
        }
    }
    anyhow::ensure!(missing == 0, "the page never drew {missing} of {} Events", acked.len());
    let (p50, p99, max) = summarize(page.clone());
    let (f50, f99, _) = summarize(floor);
    let (fr50, fr99, frmax) = summarize(frames.clone());
    let long_total: f64 = long.iter().sum();
    let what = format!("{} workloads on {} clusters", int(sz.workloads), sz.clusters);
    report.add(
        Row::new("dashboard_event_to_page", format!("dashboard: Rescheduled Event to the page, p99, {what}"), p99, "ms", Better::Lower)
            .detail(format!(
                "p50 {} ms, max {} ms; {} Events at {}/s during {} moves ({} s)",
                num(p50),
                num(max),
                int(acked.len()),
                num(sz.events_per_sec),
                int(sz.moves),
                num(storm_secs)
            ))
            .floor("a watch in the harness, p99", f99)
            .target(500.0, "≤ 500 ms"),
        json!({"scenario": "dashboard", "workloads": sz.workloads, "clusters": sz.clusters, "events": acked.len(), "events_per_sec": sz.events_per_sec,
            "moves": sz.moves, "storm_secs": storm_secs, "event_to_page_ms": {"p50": p50, "p99": p99, "max": max},
            "event_to_watch_ms": {"p50": f50, "p99": f99}, "load_secs": load_secs, "list_secs": list_secs,
            "heap_loaded_mib": heap_loaded, "heap_after_storm_mib": heap_after, "dom_nodes": dom_nodes,
            "frame_ms": {"p50": fr50, "p99": fr99, "max": frmax, "frames": frames.len()}, "long_tasks": long.len(), "long_tasks_ms": long_total, "page_costs": costs,
            "page_errors": errors}),
    );
    report.add_row(
        Row::new("dashboard_load", format!("dashboard: sign-in to every workload on the page, {what}"), load_secs, "s", Better::Lower)
            .detail(format!("{dom_nodes} elements in the page"))
            .floor("the harness listing the same objects", list_secs),
    );
    report.add_row(
        Row::new("dashboard_frames", format!("dashboard: time between frames during the storm, p99, {what}"), fr99, "ms", Better::Lower)
            .detail(format!(
                "p50 {} ms, max {} ms over {} frames; {} long tasks, {} ms in all; drawing {} ms at most, {} ms in all; \
                 taking in the watches {} ms at most, {} ms in all",
                num(fr50),
                num(frmax),
                frames.len(),
                long.len(),
                num(long_total),
                num(cost("renderMaxMs")),
                num(cost("renderMs")),
                num(cost("applyMaxMs")),
                num(cost("applyMs")),
            ))
            .floor("one frame at 60 Hz", 1000.0 / 60.0),
    );
    report.add_row(
        Row::new("dashboard_heap", format!("dashboard: the page's JavaScript heap, {what}"), heap_loaded, "MiB", Better::Lower)
            .detail(format!("{} MiB after the storm", num(heap_after))),
    );
    anyhow::ensure!(errors.is_empty(), "the page reported errors: {errors:?}");
    drop(cp);
    Ok(())
}
