//! The scale scenario: many workspaces, each with a few Deployments, placed by the
//! scheduler over many simulated clusters, all in one process tree on this machine.
//! Once every Deployment is Available upstream, each process's RSS and CPU are
//! sampled over a steady window.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams, WatchParams};
use serde_json::json;

use crate::report::{int, num, Better, Report, Row};
use crate::scheduler::watch_readiness;
use crate::{
    available, bench_deployment, create_workspaces, flotilla_cli, sample_window, summarize, wait_until, watch_applied, ServerProc,
};

#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub workspaces: usize,
    pub deployments_per_workspace: usize,
    pub clusters: usize,
    /// The steady window the processes are sampled over, once a second.
    pub window_secs: u64,
}

/// How often a long convergence prints where it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Processes started or registered at once: enough to overlap their start-up, few
/// enough not to starve the ones already running.
const START_CONCURRENCY: usize = 8;

fn workspace(i: usize) -> String {
    format!("team-{i:04}")
}

/// Runs the scenario and adds its rows.
pub async fn rows(bin: &Path, sz: Sizes, report: &mut Report) -> anyhow::Result<()> {
    let total = sz.workspaces * sz.deployments_per_workspace;
    let cp = ServerProc::start(bin)?;
    let data_dir = cp.kubeconfig.parent().map(Path::to_path_buf).unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cp_idle = cp.rss_mib();

    // Clusters with twice the room their share needs (110 pods a node), so that
    // placement is by headroom, never by a full cluster.
    let share = total.div_ceil(sz.clusters);
    let nodes = (share * 2).div_ceil(100).max(1);
    let started = Instant::now();
    let sims: Vec<(String, ServerProc)> = futures::stream::iter(0..sz.clusters)
        .map(|i| {
            let (bin, data_dir) = (bin.to_path_buf(), data_dir.clone());
            tokio::task::spawn_blocking(move || {
                let name = format!("s{i:03}");
                let yaml = format!(
                    "name: {name}\nlabels: {{region: r{}}}\nnodes:\n  - {{count: {nodes}, cpu: \"32\", memory: 128Gi, pods: 110}}\nstartupDelay: 50ms\n",
                    i % 4
                );
                let sim = ServerProc::sim(&bin, &name, &yaml)?;
                let kubeconfig = sim.kubeconfig.to_str().unwrap_or_default().to_string();
                flotilla_cli(&bin, &data_dir, &["cluster", "register", &name, "--kubeconfig", &kubeconfig, "--label", &format!("region=r{}", i % 4)])?;
                anyhow::Ok((name, sim))
            })
        })
        .buffer_unordered(START_CONCURRENCY)
        .map(|joined| joined?)
        .try_collect()
        .await?;
    let clusters_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sim_idle = summarize(sims.iter().map(|(_, s)| s.rss_mib()).collect()).0;

    // Workspaces, then their Deployments, 32 requests in flight.
    let root = cp.client("root", None).await?;
    let (not_ready, _, readiness) = watch_readiness(root.clone());
    let load = Instant::now();
    create_workspaces(root.clone(), sz.workspaces, workspace, Duration::from_secs(600)).await?;
    futures::stream::iter(0..sz.workspaces)
        .map(|w| {
            let cp = &cp;
            async move {
                let api: Api<Deployment> = Api::namespaced(cp.client("root", Some(&workspace(w))).await?, "default");
                for d in 0..sz.deployments_per_workspace {
                    api.create(&PostParams::default(), &bench_deployment(&format!("app-{d}"), 1)?).await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let created_secs = load.elapsed().as_secs_f64();

    // Converged: every Deployment of every workspace Available upstream, seen through
    // one watch across the workspaces; progress is printed every 30 s.
    let available_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = available_at.clone();
    let watch = watch_applied(Api::<Deployment>::all(cp.client("root", Some("*")).await?), WatchParams::default(), move |d, now| {
        if available(&d) {
            // Every workspace has its own `default/app-N`: the workspace makes the key.
            let ws = d.metadata.annotations.as_ref().and_then(|a| a.get("kcp.io/cluster")).cloned().unwrap_or_default();
            seen.lock().unwrap().entry(format!("{ws}/{}", d.metadata.name.unwrap_or_default())).or_insert(now);
        }
    });
    let count = || available_at.lock().unwrap().len();
    let mut next_progress = Instant::now() + PROGRESS_EVERY;
    wait_until(
        Duration::from_secs(1800),
        Duration::from_millis(200),
        || {
            if Instant::now() >= next_progress {
                next_progress += PROGRESS_EVERY;
                println!("# scale: {}/{total} Deployments Available after {:.0} s", count(), load.elapsed().as_secs_f64());
            }
            count() >= total
        },
        || format!("after {:.0} s only {}/{total} Deployments were Available", load.elapsed().as_secs_f64(), count()),
    )
    .await?;
    watch.abort();
    let converge_secs = load.elapsed().as_secs_f64();
    drop(root);

    // Steady state: heartbeats, resyncs, and nothing else happening.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut procs: Vec<&ServerProc> = vec![&cp];
    procs.extend(sims.iter().map(|(_, s)| s));
    let windows = sample_window(&procs, Duration::from_secs(sz.window_secs)).await;
    readiness.abort();
    // Every cluster beat on time throughout; any fall to NotReady was false.
    let false_not_ready = not_ready.lock().unwrap().len();
    let (cpw, simw) = windows.split_first().ok_or_else(|| anyhow::anyhow!("no samples"))?;
    let sim_rss: Vec<f64> = simw.iter().map(|w| w.rss_mib).collect();
    let sim_cpu: Vec<f64> = simw.iter().map(|w| w.cpu_pct).collect();
    let (rss_median, _, rss_max) = summarize(sim_rss.clone());
    let (cpu_median, _, cpu_max) = summarize(sim_cpu.clone());
    let (rss_sum, cpu_sum): (f64, f64) = (sim_rss.iter().sum(), sim_cpu.iter().sum());
    let what = format!("{} workspaces × {} Deployments on {} clusters", int(sz.workspaces), sz.deployments_per_workspace, sz.clusters);
    let json = json!({"scenario": "scale", "workspaces": sz.workspaces, "deployments": total, "clusters": sz.clusters, 
        "clusters_up_secs": clusters_secs, "created_secs": created_secs, "converge_secs": converge_secs, "window_secs": sz.window_secs, "false_not_ready": false_not_ready,
        "control_plane_rss_mib": cpw.rss_mib, "control_plane_rss_max_mib": cpw.rss_max_mib, "control_plane_idle_rss_mib": cp_idle,
        "control_plane_cpu_pct": cpw.cpu_pct, "control_plane_cpu_peak_1s_pct": cpw.cpu_peak_pct,
        "sim_rss_median_mib": rss_median, "sim_rss_max_mib": rss_max, "sim_rss_total_mib": rss_sum, "sim_idle_rss_mib": sim_idle,
        "sim_cpu_median_pct": cpu_median, "sim_cpu_max_pct": cpu_max, "sim_cpu_total_pct": cpu_sum,
        "sim_rss_mib": sim_rss, "sim_cpu_pct": sim_cpu});
    report.add(
        Row::new("scale_converge", format!("scale: apply to all Available, {what}"), converge_secs, "s", Better::Lower).detail(format!(
            "creates done at {} s; clusters up and registered in {} s; {false_not_ready} clusters falsely declared NotReady",
            num(created_secs),
            num(clusters_secs)
        )),
        json,
    );
    report.add_row(
        Row::new("scale_cp_rss", "scale: control plane RSS, steady", cpw.rss_mib, "MiB", Better::Lower)
            .detail(format!("CPU {}% of a core, busiest second {}%", num(cpw.cpu_pct), num(cpw.cpu_peak_pct)))
            .floor("the same server empty", cp_idle),
    );
    report.add_row(
        Row::new("scale_sim_rss", "scale: each simulated cluster's RSS, steady, median", rss_median, "MiB", Better::Lower)
            .detail(format!("max {} MiB; all {} together {} MiB", num(rss_max), sz.clusters, num(rss_sum)))
            .floor("an empty cluster", sim_idle),
    );
    report.add_row(
        Row::new("scale_cpu", "scale: CPU of the whole tree, steady, % of one core", cpw.cpu_pct + cpu_sum, "%", Better::Lower).detail(
            format!(
                "control plane {}%, clusters {}% together (median {}%, max {}% each)",
                num(cpw.cpu_pct),
                num(cpu_sum),
                num(cpu_median),
                num(cpu_max)
            ),
        ),
    );
    drop(cp);
    drop(sims);
    Ok(())
}
