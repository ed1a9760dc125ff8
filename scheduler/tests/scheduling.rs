//! The scheduler against a real control plane, all in the test's process: simulated
//! clusters report their room through the heartbeats of the push-mode syncers, and the
//! scheduler, started as `flotilla start` starts it, assigns Deployments to clusters by
//! their labels and room, and moves them off a cluster that stops beating. The tests
//! read what the product writes, through kube-rs over HTTPS: the WorkloadPlacement, the
//! Deployment's assignment labels and syncer finalizers, the SyncTargets' conditions,
//! the Events, the metrics, and the copies on the clusters.
//!
//! The end-to-end tests of `tests/e2e/scheduler.rs` cover the same ground through the
//! `flotilla` binary, processes and kubectl; these take seconds, and fail with what
//! they saw.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use placement_api::{Placement, SyncTarget, WorkloadPlacement, CONDITION_READY, CONDITION_SCHEDULED, ROOT_WORKSPACE};
use runtime::AbortOnDrop;
use serde_json::json;
use test_clusters::fixtures::deployment;
use test_clusters::harness::{wait_until, ControlPlane, SimCluster, DEADLINE};

/// Heartbeats come this often, and a cluster is lost after this grace without a new
/// one: the product's 2 s and 8 s scaled down, so that a failover takes about three
/// seconds. A heartbeat's time is in whole seconds, so the scheduler sees a new one
/// once a second however often they come. The grace spans three of those: the
/// scheduler holds its judgement while no cluster's heartbeat has been new for half
/// the grace (`scheduler/src/health.rs`), and with a grace of two seconds that
/// happened often enough to postpone failovers by whole graces.
const HEARTBEAT: Duration = Duration::from_millis(250);
const GRACE: Duration = Duration::from_secs(3);
/// The product's resync: nothing here may need one to happen.
const RESYNC: Duration = Duration::from_secs(30);
/// The workspace the Deployments are applied to.
const WS: &str = "demo";

/// The definition of a cluster with the labels `labels` (`k: v, ...`) and `nodes`
/// nodes of `cpu` cores each.
fn cluster(name: &str, labels: &str, nodes: u32, cpu: u32) -> String {
    format!("name: {name}\nlabels: {{{labels}}}\nnodes: [{{count: {nodes}, cpu: \"{cpu}\", memory: 32Gi}}]\nstartupDelay: 100ms\n")
}

/// A control plane with workspace `demo`, the `clusters` registered in push mode, and
/// the push-mode syncers and the scheduler running, once every cluster is Ready. The
/// controllers stop when what is returned is dropped.
async fn fleet(clusters: &[&SimCluster]) -> (ControlPlane, Vec<AbortOnDrop<()>>) {
    let cp = ControlPlane::start().await;
    for c in clusters {
        cp.register(c).await;
    }
    cp.create_workspace(WS).await;
    let syncers = syncer::push::Options { heartbeat_interval: HEARTBEAT, resync: RESYNC, followers: None, shard: None };
    let options = scheduler::Options {
        heartbeat_grace: GRACE,
        resync: RESYNC,
        instance: "in-process-test".into(),
        metrics: scheduler::metrics::Metrics::new(cp.registry()).expect("the scheduler's metrics register"),
        ..Default::default()
    };
    let election = Some(scheduler::leader::Timing::default());
    let controllers = vec![
        AbortOnDrop(tokio::spawn(syncer::push::run(cp.in_process(), syncers))),
        AbortOnDrop(tokio::spawn(scheduler::run_until(cp.in_process(), options, election, std::future::pending()))),
    ];
    let mut all_ready: Vec<String> = clusters.iter().map(|c| format!("{}=True", c.name())).collect();
    all_ready.sort();
    wait_readiness(&cp, &all_ready.join(" ")).await;
    (cp, controllers)
}

/// `east=True west=False(HeartbeatMissed)`: each SyncTarget's `Ready` condition as the
/// scheduler wrote it, with its reason when it is not True, by cluster name.
async fn readiness(cp: &ControlPlane) -> Result<String, String> {
    let targets = Api::<SyncTarget>::all(cp.client(ROOT_WORKSPACE)).list(&ListParams::default()).await.map_err(|e| e.to_string())?;
    let each = targets.items.iter().map(|st| {
        let ready = st.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY));
        match ready {
            Some(c) if c.status == "True" => format!("{}=True", st.name_any()),
            Some(c) => format!("{}={}({})", st.name_any(), c.status, c.reason),
            None => format!("{}=Unknown", st.name_any()),
        }
    });
    Ok(each.collect::<Vec<_>>().join(" "))
}

async fn wait_readiness(cp: &ControlPlane, want: &str) {
    wait_until(&format!("readiness {want}"), DEADLINE, || async {
        let seen = readiness(cp).await?;
        if seen == want {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
}

fn workloads(cp: &ControlPlane, namespace: &str) -> Api<Deployment> {
    Api::namespaced(cp.client(WS), namespace)
}

fn placements(cp: &ControlPlane, namespace: &str) -> Api<WorkloadPlacement> {
    Api::namespaced(cp.client(WS), namespace)
}

/// `east=4 west=2`: the clusters a WorkloadPlacement assigns, and their shares.
fn assignment(wp: &WorkloadPlacement) -> String {
    wp.spec.clusters.iter().map(|c| format!("{}={}", c.name, c.replicas)).collect::<Vec<_>>().join(" ")
}

/// Waits until the workload `namespace/name` is assigned as `want` says (`east=4
/// west=2`) by all that the scheduler writes for it, one after the other: the shares
/// in its WorkloadPlacement; the assignment labels and syncer finalizers of those
/// clusters, and no others, on the Deployment; and `Scheduled=True`. Returns the
/// WorkloadPlacement.
async fn wait_assignment(cp: &ControlPlane, namespace: &str, name: &str, want: &str) -> WorkloadPlacement {
    let clusters: Vec<&str> = want.split_whitespace().filter_map(|s| s.split_once('=')).map(|(c, _)| c).collect();
    let (placements, deployments) = (placements(cp, namespace), workloads(cp, namespace));
    wait_until(&format!("{namespace}/{name} assigned {want}"), DEADLINE, || async {
        let wp = placements.get(name).await.map_err(|e| e.to_string())?;
        let on = marks(&deployments.get(name).await.map_err(|e| e.to_string())?);
        let done = scheduled(&wp).is_some_and(|(status, _, _)| status == "True");
        if assignment(&wp) == want && on == marks_for(&clusters) && done {
            Ok(wp)
        } else {
            Err(format!("assigned {:?}, Scheduled {:?}, the Deployment marked {on:?}", assignment(&wp), scheduled(&wp)))
        }
    })
    .await
}

/// The `Scheduled` condition of a WorkloadPlacement: status, reason and message.
fn scheduled(wp: &WorkloadPlacement) -> Option<(String, String, String)> {
    let c = wp.status.as_ref()?.conditions.iter().find(|c| c.type_ == CONDITION_SCHEDULED)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// What the scheduler wrote on a Deployment: its assignment labels and its finalizers,
/// each sorted.
fn marks(d: &Deployment) -> (Vec<String>, Vec<String>) {
    let mut labels: Vec<String> =
        d.labels().iter().filter(|(k, _)| k.starts_with(placement_api::SYNC_STATE_LABEL_PREFIX)).map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    let mut finalizers = d.finalizers().to_vec();
    finalizers.sort();
    (labels, finalizers)
}

/// The assignment labels and syncer finalizers of a workload on `clusters`.
fn marks_for(clusters: &[&str]) -> (Vec<String>, Vec<String>) {
    let labels = clusters.iter().map(|c| format!("{}=Sync", placement_api::sync_state_label(c))).collect();
    let finalizers = clusters.iter().map(|c| placement_api::syncer_finalizer(c)).collect();
    (labels, finalizers)
}

/// Waits until the copy of `name` on `cluster` runs `replicas` replicas.
async fn wait_copy(cluster: &SimCluster, name: &str, replicas: i32) {
    wait_until(&format!("the copy of {name} on {} with {replicas} replicas", cluster.name()), DEADLINE, || async {
        let copy = cluster.copy(name).await?.ok_or("no copy yet")?;
        let has = copy.spec.as_ref().and_then(|s| s.replicas);
        if has == Some(replicas) {
            Ok(())
        } else {
            Err(format!("the copy has {has:?} replicas"))
        }
    })
    .await;
}

/// Waits for an Event with `reason` on the workload `name` in `namespace`, and returns
/// its message.
async fn wait_event(cp: &ControlPlane, namespace: &str, name: &str, reason: &str) -> String {
    let api: Api<Event> = Api::namespaced(cp.client(WS), namespace);
    wait_until(&format!("a {reason} Event on {name}"), DEADLINE, || async {
        let events = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let mine = events.iter().find(|e| e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(name));
        match mine {
            Some(e) => Ok(e.message.clone().unwrap_or_default()),
            None => {
                Err(format!("Events: {:?}", events.iter().map(|e| (&e.reason, &e.involved_object.name, &e.message)).collect::<Vec<_>>()))
            }
        }
    })
    .await
}

fn placement(name: &str, spec: serde_json::Value) -> Placement {
    serde_json::from_value(
        json!({"apiVersion": "scheduling.flotilla.io/v1alpha1", "kind": "Placement", "metadata": {"name": name}, "spec": spec}),
    )
    .expect("a valid Placement")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_by_cluster_labels_and_room_and_divides_as_its_placement_says() {
    let east = SimCluster::start(&cluster("east", "region: us", 2, 4)).await;
    let west = SimCluster::start(&cluster("west", "region: us", 2, 2)).await;
    let eu = SimCluster::start(&cluster("eu", "region: eu", 2, 8)).await;
    let (cp, _controllers) = fleet(&[&east, &west, &eu]).await;
    let deployments = workloads(&cp, "default");

    // The workspace's default Placement: one cluster, any, the roomiest first.
    deployments.create(&PostParams::default(), &deployment("plain").replicas(2).cpu("100m").build()).await.unwrap();
    let wp = wait_assignment(&cp, "default", "plain", "eu=2").await;
    assert_eq!(
        (wp.spec.placement.as_str(), wp.spec.workload.kind.as_str(), wp.spec.workload.name.as_str()),
        ("default", "Deployment", "plain")
    );
    assert_eq!(wp.labels().get(&placement_api::sync_state_label("eu")).map(String::as_str), Some("Sync"), "{:?}", wp.labels());
    wait_copy(&eu, "plain", 2).await;

    // A Placement named by the Deployment's annotation: the two clusters of region us,
    // never eu however roomy, and six replicas of one core divided by what each
    // holds: east holds 8, west 4; each gets one, then the other four go 7:3, and the
    // remainder to the roomiest.
    let us = placement(
        "us",
        json!({"clusterSelector": {"matchLabels": {"region": "us"}}, "numberOfClusters": 2, "replicaScheduling": "Divide"}),
    );
    Api::<Placement>::all(cp.client(WS)).create(&PostParams::default(), &us).await.unwrap();
    let web = deployment("web").replicas(6).cpu("1").placement("us").build();
    deployments.create(&PostParams::default(), &web).await.unwrap();
    let wp = wait_assignment(&cp, "default", "web", "east=4 west=2").await;
    assert_eq!(wp.spec.placement, "us");
    // Each cluster's syncer runs its share.
    wait_copy(&east, "web", 4).await;
    wait_copy(&west, "web", 2).await;
    assert!(eu.copy("web").await.unwrap().is_none(), "a cluster the Placement does not select runs nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_goes_only_where_one_node_holds_it_and_what_fits_nowhere_says_why() {
    // east has more room in all (four cores against three), but on nodes of one core.
    let east = SimCluster::start(&cluster("east", "region: us", 4, 1)).await;
    let west = SimCluster::start(&cluster("west", "region: us", 1, 3)).await;
    let (cp, _controllers) = fleet(&[&east, &west]).await;
    let deployments = workloads(&cp, "default");

    deployments.create(&PostParams::default(), &deployment("chunky").replicas(1).cpu("2").build()).await.unwrap();
    wait_assignment(&cp, "default", "chunky", "west=1").await;

    // Too big for any cluster: no assignment, and the reason, counted by cluster.
    deployments.create(&PostParams::default(), &deployment("huge").replicas(1).cpu("16").build()).await.unwrap();
    let why = "0/2 clusters fit: 2 Insufficient cpu";
    let message = wait_event(&cp, "default", "huge", "FailedScheduling").await;
    assert_eq!(message, why);
    let wp = placements(&cp, "default").get("huge").await.unwrap();
    assert_eq!(scheduled(&wp), Some(("False".into(), scheduler::controller::REASON_UNSCHEDULABLE.into(), why.into())));
    assert_eq!(assignment(&wp), "");
    assert_eq!(marks(&deployments.get("huge").await.unwrap()), (vec![], vec![]), "nothing marks a workload that runs nowhere");

    // A Placement named by the namespace's annotation, selecting no cluster.
    let eu_only = placement("eu", json!({"clusterSelector": {"matchLabels": {"region": "eu"}}}));
    Api::<Placement>::all(cp.client(WS)).create(&PostParams::default(), &eu_only).await.unwrap();
    let mut europe = Namespace::default();
    europe.metadata.name = Some("europe".into());
    europe.metadata.annotations = Some(BTreeMap::from([(placement_api::PLACEMENT_ANNOTATION.into(), "eu".into())]));
    Api::<Namespace>::all(cp.client(WS)).create(&PostParams::default(), &europe).await.unwrap();
    workloads(&cp, "europe").create(&PostParams::default(), &deployment("api").replicas(1).cpu("100m").build()).await.unwrap();
    assert_eq!(wait_event(&cp, "europe", "api", "FailedScheduling").await, "0/2 clusters fit: 2 NotSelected");
    let wp = placements(&cp, "europe").get("api").await.unwrap();
    assert_eq!((wp.spec.placement.as_str(), assignment(&wp).as_str()), ("eu", ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_stops_beating_past_the_grace_loses_its_workloads_to_a_ready_one() {
    let east = SimCluster::start(&cluster("east", "", 2, 4)).await;
    let west = SimCluster::start(&cluster("west", "", 2, 2)).await;
    let (cp, _controllers) = fleet(&[&east, &west]).await;
    let deployments = workloads(&cp, "default");
    deployments.create(&PostParams::default(), &deployment("web").replicas(2).cpu("100m").build()).await.unwrap();
    wait_assignment(&cp, "default", "web", "east=2").await;
    wait_copy(&east, "web", 2).await;

    let lost = Instant::now();
    east.lose().await;
    // The lost cluster's label and finalizer leave with the move, so a deletion would
    // not wait for a cluster that is gone.
    wait_assignment(&cp, "default", "web", "west=2").await;
    let moved = lost.elapsed();
    // The last new heartbeat came at most a second (their times are whole seconds) and
    // an interval before the loss: the move waited for the grace to run out.
    assert!(moved >= GRACE - Duration::from_secs(1) - HEARTBEAT, "moved {moved:?} after the loss, within the grace of {GRACE:?}");
    wait_readiness(&cp, "east=False(HeartbeatMissed) west=True").await;
    wait_copy(&west, "web", 2).await;
    assert_eq!(wait_event(&cp, "default", "web", "Rescheduled").await, "moved off east (NotReady); now on west=2 (Placement default)");
    let metrics = cp.metrics().await;
    let failovers = metrics.lines().find(|l| l.starts_with(r#"flotilla_scheduler_failovers_total{cause="NotReady"}"#));
    assert_eq!(failovers, Some(r#"flotilla_scheduler_failovers_total{cause="NotReady"} 1"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_clusters_workload_stays_while_nothing_fits_and_moves_once_a_cluster_registers() {
    let east = SimCluster::start(&cluster("east", "", 2, 4)).await;
    let (cp, _controllers) = fleet(&[&east]).await;
    let deployments = workloads(&cp, "default");
    deployments.create(&PostParams::default(), &deployment("web").replicas(2).cpu("100m").build()).await.unwrap();
    wait_assignment(&cp, "default", "web", "east=2").await;

    east.lose().await;
    let why = "0/1 clusters fit: 1 NotReady; it stays on east=2 until a cluster fits";
    assert_eq!(wait_event(&cp, "default", "web", "FailedScheduling").await, why);
    let wp = placements(&cp, "default").get("web").await.unwrap();
    assert_eq!(scheduled(&wp), Some(("False".into(), scheduler::controller::REASON_UNSCHEDULABLE.into(), why.into())));
    assert_eq!(assignment(&wp), "east=2", "nothing is taken away when nothing else fits");
    assert_eq!(marks(&deployments.get("web").await.unwrap()), marks_for(&["east"]));

    // A new cluster wakes the waiting workload.
    let west = SimCluster::start(&cluster("west", "", 2, 2)).await;
    cp.register(&west).await;
    wait_assignment(&cp, "default", "web", "west=2").await;
    wait_copy(&west, "web", 2).await;
}
