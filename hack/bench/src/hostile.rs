//! The hostile-bodies scenario: request bodies built to be expensive to refuse, each up
//! to the control plane's 3 MiB body limit, sent by a workspace's tenant.
//!
//! - **CPU to reject.** Against an otherwise idle `flotilla start`, each body is sent
//!   alone, several times in a row; the server's CPU time (`utime + stime` of
//!   `/proc/<pid>/stat`, all its threads) is read before the request and after the
//!   answer (and a short pause, so that work left after the answer counts too). The
//!   clock tick is 10 ms, so the figure of a body is the sum over its repeats divided by
//!   them. The floor is a small valid ConfigMap create, measured the same way.
//! - **Latency under attack.** An admin's GETs of one ConfigMap and heartbeat-like
//!   merge patches of a SyncTarget's status, each stream sequential and paced evenly
//!   over a window, run alone (the floor), then again while 16 tasks keep sending the
//!   costliest bodies of the first part, each a new one as soon as the last is answered.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::report::{int, num, Better, Report, Row};
use crate::{cm, flotilla_cli, summarize, ServerProc, WARMUP_REQUESTS};

/// The control plane's body limit (controlplane/src/http.rs `MAX_BODY`).
const LIMIT: usize = 3 * 1024 * 1024;

/// The ConfigMap the patches aim at, in the workspace's `default` namespace.
const TARGET: &str = "target";

/// Let the work a request leaves behind its answer (freeing a decoded body, closing
/// what it opened) land before the CPU is read again.
const SETTLE: Duration = Duration::from_millis(10);

/// From starting the hostile senders to measuring under their attack.
const RAMP: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Times each hostile body is sent alone; its CPU is the mean over them.
    pub repeats: usize,
    /// Times the floor's small create is sent, for the same measure.
    pub floor_repeats: usize,
    /// GETs, alone and under attack, one after the other and paced over the window.
    pub gets: usize,
    /// Heartbeat patches, likewise, at the same time as the GETs.
    pub heartbeats: usize,
    /// How long each phase (alone, under attack) lasts, s.
    pub window_secs: u64,
    /// Concurrent senders of hostile bodies.
    pub senders: usize,
    /// How many of the costliest bodies the senders cycle through.
    pub worst: usize,
}

/// One hostile request.
struct Hostile {
    name: &'static str,
    method: Method,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn apply(name: &'static str, body: Vec<u8>) -> Hostile {
    let path = format!("{CONFIGMAPS}/{TARGET}?fieldManager=bench");
    Hostile { name, method: Method::PATCH, path, content_type: "application/apply-patch+yaml", body }
}

fn create(name: &'static str, body: Vec<u8>) -> Hostile {
    Hostile { name, method: Method::POST, path: CONFIGMAPS.into(), content_type: "application/json", body }
}

fn patch(name: &'static str, content_type: &'static str, body: Vec<u8>) -> Hostile {
    Hostile { name, method: Method::PATCH, path: format!("{CONFIGMAPS}/{TARGET}"), content_type, body }
}

/// `unit` repeated as often as fits in `room` bytes.
fn repeat(unit: &str, room: usize) -> Vec<u8> {
    unit.repeat(room / unit.len()).into_bytes()
}

/// `head`, then `entry(i)` for i = 0, 1, … while it and `tail` fit in the limit, then
/// `tail`; `sep` between entries. Returns the body and how many entries it holds.
fn fill(head: &str, mut entry: impl FnMut(usize) -> String, sep: &str, tail: &str, max: usize) -> (Vec<u8>, usize) {
    let mut out = String::from(head);
    let mut n = 0;
    while n < max {
        let e = entry(n);
        let extra = if n == 0 { e.len() } else { sep.len() + e.len() };
        if out.len() + extra + tail.len() > LIMIT {
            break;
        }
        if n > 0 {
            out.push_str(sep);
        }
        out.push_str(&e);
        n += 1;
    }
    out.push_str(tail);
    (out.into_bytes(), n)
}

/// The hostile bodies, each at most [`LIMIT`] bytes.
fn bodies() -> Vec<Hostile> {
    let cm_json = |name: &str| format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"#);
    let cm_yaml = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {TARGET}\ndata:\n");
    // 100,000 keys of 18-byte values: 31 bytes an entry, 3.1 MB in all.
    let value = "v".repeat(18);
    let (keys_json, _) = fill(&cm_json("keys"), |i| format!(r#""k{i:06}":"{value}""#), ",", "}}", 100_000);
    let (keys_yaml, _) = fill(&cm_yaml, |i| format!("  k{i:06}: {value}\n"), "", "", 100_000);
    let string_json = {
        let (head, tail) = (cm_json("huge") + r#""big":""#, r#""}}"#);
        let mut b = head.into_bytes();
        b.resize(LIMIT - tail.len(), b'x');
        b.extend_from_slice(tail.as_bytes());
        b
    };
    let string_yaml = {
        let mut b = format!("{cm_yaml}  big: ").into_bytes();
        b.resize(LIMIT - 1, b'x');
        b.push(b'\n');
        b
    };
    let (merge_array, _) = fill("[", |_| r#"{"a":1}"#.into(), ",", "]", usize::MAX);
    // 10,001 operations, one over kube-apiserver's limit, each padded to fill the body.
    let pad = "v".repeat(LIMIT / 10_001 - 64);
    let (json_patch, ops) = fill("[", |i| format!(r#"{{"op":"add","path":"/data/k{i:05}","value":"{pad}"}}"#), ",", "]", 10_001);
    assert_eq!(ops, 10_001, "10,001 padded operations fit in the limit");
    let mut block = repeat("- ", LIMIT - 2);
    block.extend_from_slice(b"x\n");
    vec![
        apply("apply_json_nesting", repeat(r#"{"a":"#, LIMIT)),
        apply("apply_yaml_flow_nesting", repeat("{a: ", LIMIT)),
        apply("apply_yaml_block_nesting", block),
        create("create_json_brackets", repeat("[", LIMIT)),
        create("create_json_huge_string", string_json),
        apply("apply_yaml_huge_string", string_yaml),
        create("create_json_100k_keys", keys_json),
        apply("apply_yaml_100k_keys", keys_yaml),
        patch("merge_patch_array", "application/merge-patch+json", merge_array),
        patch("json_patch_10001_ops", "application/json-patch+json", json_patch),
    ]
}

/// Sends `h` and reads the whole answer; its HTTP status.
async fn send(client: &kube::Client, h: &Hostile) -> anyhow::Result<u16> {
    let req = http::Request::builder()
        .method(h.method.clone())
        .uri(&h.path)
        .header(http::header::CONTENT_TYPE, h.content_type)
        .body(kube::client::Body::from(h.body.clone()))?;
    let resp = client.send(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect_bytes().await?;
    Ok(status)
}

/// A client of `context` that hands back 429 and 503 as they come, where a kube client
/// would retry them: a hostile sender's answers are what is counted.
async fn client_without_retry(srv: &ServerProc, context: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(&srv.kubeconfig)?;
    let opts = kube::config::KubeConfigOptions { context: Some(context.into()), ..Default::default() };
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &opts).await?;
    cfg.default_retry = false;
    cfg.read_timeout = Some(Duration::from_secs(300));
    Ok(kube::Client::try_from(cfg)?)
}

/// One body's figures from the first part.
struct Rejected {
    name: &'static str,
    bytes: usize,
    /// Mean server CPU per request over the repeats, ms.
    cpu_ms: f64,
    /// The largest single request's CPU delta, ms (in whole clock ticks).
    cpu_max_ms: f64,
    /// Wall time per request, ms: p50, max.
    wall_p50_ms: f64,
    wall_max_ms: f64,
    /// The statuses answered, each distinct one once.
    statuses: Vec<u16>,
}

impl Rejected {
    fn refused(&self) -> bool {
        self.statuses.iter().all(|s| (400..500).contains(s))
    }
    fn to_json(&self) -> Value {
        json!({"body": self.name, "bytes": self.bytes, "cpu_ms": self.cpu_ms, "cpu_max_ms": self.cpu_max_ms,
               "wall_p50_ms": self.wall_p50_ms, "wall_max_ms": self.wall_max_ms, "statuses": self.statuses})
    }
}

/// Sends `h` `n` times in a row, reading the server's CPU around each.
async fn measure(srv: &ServerProc, client: &kube::Client, h: &Hostile, n: usize) -> anyhow::Result<Rejected> {
    let (mut cpu, mut wall, mut statuses) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let before = srv.cpu_secs();
        let t = Instant::now();
        // A transport error (the server cut the connection) counts as status 0.
        let status = send(client, h).await.unwrap_or(0);
        wall.push(t.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(SETTLE).await;
        cpu.push((srv.cpu_secs() - before) * 1e3);
        if !statuses.contains(&status) {
            statuses.push(status);
        }
    }
    let (wall_p50_ms, _, wall_max_ms) = summarize(wall);
    Ok(Rejected {
        name: h.name,
        bytes: h.body.len(),
        cpu_ms: cpu.iter().sum::<f64>() / n as f64,
        cpu_max_ms: cpu.iter().copied().fold(0.0, f64::max),
        wall_p50_ms,
        wall_max_ms,
        statuses,
    })
}

/// The SyncTarget the heartbeats are written to.
fn sync_targets(root: kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("workload.flotilla.io", "v1alpha1", "SyncTarget"), "synctargets");
    Api::all_with(root, &ar)
}

fn heartbeat() -> Value {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!({"status": {"lastSyncerHeartbeatTime": now,
                      "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "440"},
                      "available": {"cpu": "32", "memory": "128Gi", "pods": "440"}}})
}

/// Latencies of one phase, ms.
struct Phase {
    gets: Vec<f64>,
    beats: Vec<f64>,
    secs: f64,
    cpu_pct: f64,
}

/// Over `window`, `gets` GETs of the probe ConfigMap, evenly paced, and at the same
/// time `beats` heartbeat patches, likewise; each on its own client, each sent when the
/// one before has been answered and its turn has come.
async fn phase(srv: &ServerProc, window: Duration, gets: usize, beats: usize) -> anyhow::Result<Phase> {
    let cms: Api<ConfigMap> = Api::namespaced(srv.client("root", None).await?, "default");
    let targets = sync_targets(srv.client("root", None).await?);
    // Warm-up: each client's connection, unmeasured.
    for _ in 0..20 {
        cms.get("probe").await?;
    }
    targets.patch_status("beat", &PatchParams::default(), &Patch::Merge(heartbeat())).await?;
    let cpu0 = srv.cpu_secs();
    let start = Instant::now();
    let paced = |n: usize| {
        let mut tick = tokio::time::interval(window / n.max(1) as u32);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    };
    let reads = async {
        let mut lat = Vec::with_capacity(gets);
        let mut tick = paced(gets);
        for _ in 0..gets {
            tick.tick().await;
            let t = Instant::now();
            cms.get("probe").await?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        anyhow::Ok(lat)
    };
    let writes = async {
        let mut lat = Vec::with_capacity(beats);
        let mut tick = paced(beats);
        for _ in 0..beats {
            tick.tick().await;
            let t = Instant::now();
            targets.patch_status("beat", &PatchParams::default(), &Patch::Merge(heartbeat())).await?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        anyhow::Ok(lat)
    };
    let (gets, beats) = tokio::try_join!(reads, writes)?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Phase { gets, beats, secs, cpu_pct: (srv.cpu_secs() - cpu0) / secs * 100.0 })
}

/// What the hostile senders got during the attack.
#[derive(Default)]
struct Attack {
    sent: AtomicUsize,
    errors: AtomicUsize,
    /// (status, count)
    statuses: Mutex<Vec<(u16, usize)>>,
}

/// Runs the scenario and adds its rows.
pub async fn rows(bin: &Path, sz: Sizes, report: &mut Report) -> anyhow::Result<()> {
    let srv = ServerProc::start(bin)?;
    let data_dir = srv.kubeconfig.parent().map(Path::to_path_buf).unwrap_or_default();
    flotilla_cli(bin, &data_dir, &["workspace", "create", "bench"])?;
    let tenant = client_without_retry(&srv, "bench").await?;
    let tenant_cms: Api<ConfigMap> = Api::namespaced(tenant.clone(), "default");
    tenant_cms.create(&PostParams::default(), &cm(TARGET)).await?;
    let root = srv.client("root", None).await?;
    Api::<ConfigMap>::namespaced(root.clone(), "default").create(&PostParams::default(), &cm("probe")).await?;
    let st: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "workload.flotilla.io/v1alpha1", "kind": "SyncTarget",
        "metadata": {"name": "beat"}, "spec": {"syncMode": "Pull"},
    }))?;
    sync_targets(root.clone()).create(&PostParams::default(), &st).await?;
    let bodies = bodies();

    // Warm-up: the tenant's connection and the server's first allocations, unmeasured.
    for i in 0..WARMUP_REQUESTS {
        tenant_cms.create(&PostParams::default(), &cm(&format!("warm-{i}"))).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Part 1: the CPU of each refusal, on an otherwise idle server.
    let mut floor_cpu = Vec::new();
    let mut floor_wall = Vec::new();
    for i in 0..sz.floor_repeats {
        let before = srv.cpu_secs();
        let t = Instant::now();
        tenant_cms.create(&PostParams::default(), &cm(&format!("floor-{i}"))).await?;
        floor_wall.push(t.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(SETTLE).await;
        floor_cpu.push((srv.cpu_secs() - before) * 1e3);
    }
    let floor_cpu_ms = floor_cpu.iter().sum::<f64>() / floor_cpu.len().max(1) as f64;
    let (floor_wall_p50, _, _) = summarize(floor_wall);
    let mut rejected = Vec::new();
    for h in &bodies {
        let r = measure(&srv, &tenant, h, sz.repeats).await?;
        println!(
            "# hostile: {:<26} {:>9} bytes  CPU {:>7} ms/request (max {} ms)  wall p50 {} ms  status {:?}",
            r.name,
            int(r.bytes),
            num(r.cpu_ms),
            num(r.cpu_max_ms),
            num(r.wall_p50_ms),
            r.statuses
        );
        rejected.push(r);
    }
    rejected.sort_by(|a, b| b.cpu_ms.total_cmp(&a.cpu_ms));
    let worst = &rejected[0];
    let accepted: Vec<&str> = rejected.iter().filter(|r| !r.refused()).map(|r| r.name).collect();
    let detail = format!(
        "{}, {} bytes, wall p50 {} ms; {} of {} bodies refused with a 4xx{}",
        worst.name,
        int(worst.bytes),
        num(worst.wall_p50_ms),
        rejected.len() - accepted.len(),
        rejected.len(),
        if accepted.is_empty() { String::new() } else { format!(", not: {}", accepted.join(", ")) }
    );
    report.add(
        Row::new("hostile_bodies", "hostile bodies: worst CPU to refuse one, up to 3 MiB", worst.cpu_ms, "ms", Better::Lower)
            .detail(detail)
            .floor("a small create", floor_cpu_ms)
            .target(100.0, "≤ 100 ms"),
        json!({"scenario": "hostile_bodies", "worst_body": worst.name, "worst_cpu_ms": worst.cpu_ms, "worst_cpu_max_ms": worst.cpu_max_ms,
               "repeats": sz.repeats, "floor_cpu_ms": floor_cpu_ms, "floor_wall_p50_ms": floor_wall_p50, "floor_repeats": sz.floor_repeats,
               "clock_tick_ms": 1e3 / crate::clock_ticks_per_sec(), "accepted": accepted,
               "bodies": rejected.iter().map(Rejected::to_json).collect::<Vec<_>>()}),
    );

    // Part 2: GETs and heartbeats alone, then under attack by the costliest bodies.
    let window = Duration::from_secs(sz.window_secs);
    let alone = phase(&srv, window, sz.gets, sz.heartbeats).await?;
    let costliest: Arc<Vec<Hostile>> = {
        let names: Vec<&str> = rejected.iter().take(sz.worst).map(|r| r.name).collect();
        Arc::new(bodies.into_iter().filter(|h| names.contains(&h.name)).collect())
    };
    let attack = Arc::new(Attack::default());
    let senders: Vec<_> = (0..sz.senders)
        .map(|i| {
            let (tenant, costliest, attack) = (tenant.clone(), costliest.clone(), attack.clone());
            tokio::spawn(async move {
                let mut n = i;
                loop {
                    match send(&tenant, &costliest[n % costliest.len()]).await {
                        Ok(status) => {
                            let mut s = attack.statuses.lock().unwrap();
                            match s.iter_mut().find(|(k, _)| *k == status) {
                                Some((_, c)) => *c += 1,
                                None => s.push((status, 1)),
                            }
                        }
                        Err(_) => {
                            attack.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    attack.sent.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    // Every sender has its first body on the wire, then the window starts.
    tokio::time::sleep(RAMP).await;
    let sent_before = attack.sent.load(Ordering::Relaxed);
    let loaded = phase(&srv, window, sz.gets, sz.heartbeats).await;
    let sent_during = attack.sent.load(Ordering::Relaxed) - sent_before;
    // Requests still in flight are dropped; the server is stopped just after.
    for s in &senders {
        s.abort();
    }
    let loaded = loaded?;
    let mut statuses = attack.statuses.lock().unwrap().clone();
    statuses.sort();
    let errors = attack.errors.load(Ordering::Relaxed);
    let answered: String = statuses.iter().map(|(s, n)| format!("{}×{s}", int(*n))).collect::<Vec<_>>().join(", ");

    let (a50, a99, amax) = summarize(alone.gets.clone());
    let (l50, l99, lmax) = summarize(loaded.gets.clone());
    let (ha50, ha99, hamax) = summarize(alone.beats.clone());
    let (hl50, hl99, hlmax) = summarize(loaded.beats.clone());
    let names: Vec<&str> = costliest.iter().map(|h| h.name).collect();
    report.latencies(&format!("GET under {} hostile senders", sz.senders), &loaded.gets);
    report.add(
        Row::new("hostile_bodies_get", format!("hostile bodies: GET p99 under {} hostile senders", sz.senders), l99, "ms", Better::Lower)
            .detail(format!(
                "p50 {}, max {} ms; {} hostile requests in {} s, server CPU {}% of a core",
                num(l50),
                num(lmax),
                int(sent_during),
                num(loaded.secs),
                num(loaded.cpu_pct)
            ))
            .floor("GET alone p99", a99)
            .target(100.0, "≤ 100 ms"),
        json!({"scenario": "hostile_bodies_get", "senders": sz.senders, "bodies": names, "n": sz.gets,
               "p50_ms": l50, "p99_ms": l99, "max_ms": lmax, "floor_p50_ms": a50, "floor_p99_ms": a99, "floor_max_ms": amax,
               "hostile_requests": sent_during, "hostile_statuses": statuses.iter().map(|(s, n)| json!({"status": s, "count": n})).collect::<Vec<_>>(),
               "hostile_transport_errors": errors, "secs": loaded.secs, "floor_secs": alone.secs,
               "server_cpu_pct": loaded.cpu_pct, "floor_server_cpu_pct": alone.cpu_pct}),
    );
    report.add(
        Row::new(
            "hostile_bodies_heartbeat",
            format!("hostile bodies: heartbeat PATCH p99 under {} hostile senders", sz.senders),
            hl99,
            "ms",
            Better::Lower,
        )
        .detail(format!("p50 {}, max {} ms; the senders got {answered}, {errors} transport errors", num(hl50), num(hlmax)))
        .floor("heartbeat alone p99", ha99)
        .target(100.0, "≤ 100 ms"),
        json!({"scenario": "hostile_bodies_heartbeat", "senders": sz.senders, "n": sz.heartbeats,
               "p50_ms": hl50, "p99_ms": hl99, "max_ms": hlmax, "floor_p50_ms": ha50, "floor_p99_ms": ha99, "floor_max_ms": hamax}),
    );
    drop(srv);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_fits_the_limit_and_the_large_ones_fill_it() {
        for h in bodies() {
            assert!(h.body.len() <= LIMIT, "{} is {} bytes", h.name, h.body.len());
            assert!(h.body.len() > LIMIT * 9 / 10, "{} is only {} bytes", h.name, h.body.len());
        }
    }

    #[test]
    fn the_json_bodies_are_what_they_say() {
        let all = bodies();
        let body = |name: &str| -> Value { serde_json::from_slice(&all.iter().find(|h| h.name == name).unwrap().body).unwrap() };
        assert_eq!(body("create_json_100k_keys")["data"].as_object().unwrap().len(), 100_000);
        assert!(body("create_json_huge_string")["data"]["big"].as_str().unwrap().len() > 3_000_000);
        assert!(body("merge_patch_array").as_array().unwrap().len() > 300_000);
        assert_eq!(body("json_patch_10001_ops").as_array().unwrap().len(), 10_001);
    }
}
