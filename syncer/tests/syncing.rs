//! The push-mode syncer against a real control plane and a simulated cluster, all in
//! the test's process: started as `flotilla start` starts it, from a SyncTarget and its
//! kubeconfig Secret, it copies an assigned Deployment down, reports the copy's status
//! up (which the status aggregator sums into the workspace's Deployment), and removes
//! the copy when the Deployment is deleted or unassigned. Each test writes the
//! assignment itself, as the scheduler writes it: the WorkloadPlacement with the
//! cluster's share, then the `state.workload.flotilla.io/<cluster>: Sync` label on the
//! Deployment. Everything is read through kube-rs over HTTPS.
//!
//! The end-to-end tests of `tests/e2e/syncer_push.rs` cover the same ground through the
//! `flotilla` binary, processes and kubectl; these take seconds, and fail with what
//! they saw.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use placement_api::{WorkloadPlacement, CONDITION_AVAILABLE, SYNCED_GENERATION_ANNOTATION, SYNC_TARGET_LABEL, UPSTREAM_ANNOTATION};
use runtime::followers::Followers;
use runtime::AbortOnDrop;
use serde_json::json;
use test_clusters::fixtures::deployment;
use test_clusters::harness::{wait_until, ControlPlane, SimCluster, DEADLINE};

/// The product's heartbeat: no scheduler runs here, so nothing waits on one.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// The product's resync: nothing here may need one to happen.
const RESYNC: Duration = Duration::from_secs(30);
/// The workspace the Deployments are applied to.
const WS: &str = "demo";
/// Two nodes of four cores; pods turn Ready 100 ms after they are bound.
const EAST: &str = "name: east\nnodes: [{count: 2, cpu: \"4\", memory: 16Gi}]\nstartupDelay: 100ms\n";

/// A control plane with workspace `demo`, the simulated cluster `east` registered in
/// push mode, and the push-mode syncers and the status aggregator running; no
/// scheduler. The controllers stop when what is returned is dropped.
async fn fleet() -> (ControlPlane, SimCluster, Vec<AbortOnDrop<()>>) {
    fleet_with(None).await
}

/// [`fleet`], whose syncers also carry the companions that `followers` publishes.
async fn fleet_with(followers: Option<Arc<Followers>>) -> (ControlPlane, SimCluster, Vec<AbortOnDrop<()>>) {
    let east = SimCluster::start(EAST).await;
    let cp = ControlPlane::start().await;
    cp.register(&east).await;
    cp.create_workspace(WS).await;
    let controllers = vec![
        AbortOnDrop(tokio::spawn(syncer::push::run(
            cp.in_process(),
            syncer::push::Options { heartbeat_interval: HEARTBEAT, resync: RESYNC, followers, shard: None },
        ))),
        AbortOnDrop(tokio::spawn(workspace_controllers::aggregate::run(cp.in_process(), RESYNC))),
    ];
    (cp, east, controllers)
}

fn deployments(cp: &ControlPlane) -> Api<Deployment> {
    Api::namespaced(cp.client(WS), "default")
}

/// Creates the Deployment `name` in `demo/default`, assigned to `east` with all its
/// replicas, in the order the scheduler writes it: the WorkloadPlacement first, so a
/// syncer that sees the label also finds its share.
async fn assign(cp: &ControlPlane, name: &str, replicas: i32) {
    let label = placement_api::sync_state_label("east");
    let wp: WorkloadPlacement = serde_json::from_value(json!({
        "apiVersion": "scheduling.flotilla.io/v1alpha1",
        "kind": "WorkloadPlacement",
        "metadata": {"name": name, "labels": {&label: "Sync"}},
        "spec": {
            "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "placement": "default",
            "clusters": [{"name": "east", "replicas": replicas}],
        },
    }))
    .expect("a valid WorkloadPlacement");
    Api::<WorkloadPlacement>::namespaced(cp.client(WS), "default").create(&PostParams::default(), &wp).await.unwrap();
    let d = deployment(name).replicas(replicas).cpu("100m").label(&label, "Sync").build();
    deployments(cp).create(&PostParams::default(), &d).await.unwrap();
}

/// Waits until the copy of `name` on `east` passes `ok`, and returns it.
async fn wait_copy(east: &SimCluster, name: &str, what: &str, ok: impl Fn(&Deployment) -> bool) -> Deployment {
    wait_until(&format!("the copy of {name} {what}"), DEADLINE, || async {
        let copy = east.copy(name).await?.ok_or("no copy yet")?;
        if ok(&copy) {
            Ok(copy)
        } else {
            Err(format!("{:?} {:?}", copy.metadata.annotations, copy.spec))
        }
    })
    .await
}

/// The copy's first container image.
fn image(d: &Deployment) -> Option<&str> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.as_deref()
}

/// Waits until the WorkloadPlacement of `name` has one entry in its status, the
/// cluster's report on its copy, and it reads `want`: the cluster, the replicas
/// (all, updated, ready, available), the generation synced, and whether the copy has
/// observed it.
async fn wait_reported(cp: &ControlPlane, name: &str, want: &str) {
    let placements: Api<WorkloadPlacement> = Api::namespaced(cp.client(WS), "default");
    wait_until(&format!("the report on {name}'s copy: {want}"), DEADLINE, || async {
        let wp = placements.get(name).await.map_err(|e| e.to_string())?;
        let entries = wp.status.map(|s| s.clusters).unwrap_or_default();
        let seen: Vec<String> = entries
            .iter()
            .map(|c| {
                let counts = (c.replicas, c.updated_replicas, c.ready_replicas, c.available_replicas);
                format!("{} {counts:?} generation {} observed {}", c.name, c.synced_generation, c.observed)
            })
            .collect();
        if seen == [want] {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
}

/// Waits until the status of the workload `name` upstream reads `want`: observed
/// generation, replicas, updated, ready, available, and the `Available` condition.
async fn wait_upstream_status(cp: &ControlPlane, name: &str, want: &str) {
    wait_until(&format!("{name}'s status upstream: {want}"), DEADLINE, || async {
        let d = deployments(cp).get(name).await.map_err(|e| e.to_string())?;
        let s = d.status.unwrap_or_default();
        let available = s.conditions.iter().flatten().find(|c| c.type_ == CONDITION_AVAILABLE).map(|c| c.status.clone());
        let seen = format!(
            "observedGeneration={:?} replicas={:?} updated={:?} ready={:?} available={:?} Available={:?}",
            s.observed_generation, s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas, available
        );
        if seen == want {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assigned_deployment_runs_downstream_and_its_status_comes_back_up() {
    let (cp, east, _controllers) = fleet().await;
    assign(&cp, "web", 3).await;

    // Down: one copy, in the namespace hashed from demo/default, with the share and
    // the marks that lead back upstream, and none of the upstream's own.
    let copy = wait_copy(&east, "web", "with 3 replicas", |c| c.spec.as_ref().and_then(|s| s.replicas) == Some(3)).await;
    let ns = copy.namespace().unwrap_or_default();
    assert!(ns.starts_with("flotilla-") && ns.len() == "flotilla-".len() + 12, "a hashed namespace: {ns}");
    let annotation = |key: &str| copy.annotations().get(key).cloned();
    assert_eq!(annotation(UPSTREAM_ANNOTATION).as_deref(), Some("demo/default/web"));
    assert_eq!(annotation(SYNCED_GENERATION_ANNOTATION).as_deref(), Some("1"));
    assert_eq!(copy.labels().get(SYNC_TARGET_LABEL).map(String::as_str), Some("east"));
    assert!(!copy.labels().keys().any(|k| k.starts_with(placement_api::SYNC_STATE_LABEL_PREFIX)), "{:?}", copy.labels());
    assert!(copy.finalizers().is_empty(), "{:?}", copy.finalizers());
    let locator = Api::<Namespace>::all(east.client()).get(&ns).await.unwrap();
    assert_eq!(
        locator.annotations().get(placement_api::NAMESPACE_LOCATOR_ANNOTATION).map(String::as_str),
        Some(r#"{"workspace":"demo","namespace":"default"}"#)
    );
    // The upstream Deployment waits for this cluster's copy to go before it can go.
    let finalizers = deployments(&cp).get("web").await.unwrap().finalizers().to_vec();
    assert_eq!(finalizers, [placement_api::syncer_finalizer("east")]);

    // Up: the cluster's entry, then the Deployment's status summed from it.
    wait_reported(&cp, "web", "east (3, 3, 3, 3) generation 1 observed true").await;
    let rolled_out = |generation: i64| {
        format!("observedGeneration=Some({generation}) replicas=Some(3) updated=Some(3) ready=Some(3) available=Some(3) Available=Some(\"True\")")
    };
    wait_upstream_status(&cp, "web", &rolled_out(1)).await;

    // A new template goes down as a new generation and rolls out, and the status
    // upstream says so only once the cluster has observed it.
    let new_image = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}});
    deployments(&cp).patch("web", &PatchParams::default(), &Patch::Strategic(new_image)).await.unwrap();
    wait_copy(&east, "web", "running nginx:1.28 from generation 2", |c| {
        image(c) == Some("nginx:1.28") && c.annotations().get(SYNCED_GENERATION_ANNOTATION).map(String::as_str) == Some("2")
    })
    .await;
    wait_upstream_status(&cp, "web", &rolled_out(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_or_unassigning_upstream_removes_the_copy_downstream() {
    let (cp, east, _controllers) = fleet().await;
    assign(&cp, "gone", 1).await;
    assign(&cp, "moved", 1).await;
    // "gone" is deleted as soon as the syncer holds it, while its copy is being made
    // and before the syncer's own watch of the copies may have seen it: the finalizer
    // must still wait for the copy to go.
    wait_until("gone held for east's copy", DEADLINE, || async {
        let fins = deployments(&cp).get("gone").await.map_err(|e| e.to_string())?.finalizers().to_vec();
        if fins == [placement_api::syncer_finalizer("east")] {
            Ok(())
        } else {
            Err(format!("finalizers {fins:?}"))
        }
    })
    .await;
    deployments(&cp).delete("gone", &DeleteParams::default()).await.expect("a delete is accepted, even racing other writes");
    wait_until("gone deleted upstream", DEADLINE, || async {
        match deployments(&cp).get_opt("gone").await {
            Ok(None) => Ok(()),
            Ok(Some(d)) => Err(format!("still there, finalizers {:?}", d.finalizers())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let left = east.copy("gone").await.unwrap().map(|c| c.name_any());
    assert_eq!(left, None, "the copy outlived its upstream");

    // Unassigned (the label removed), once it runs: the copy goes, and the finalizer with it.
    wait_reported(&cp, "moved", "east (1, 1, 1, 1) generation 1 observed true").await;
    let unlabel = json!({"metadata": {"labels": {placement_api::sync_state_label("east"): null}}});
    deployments(&cp).patch("moved", &PatchParams::default(), &Patch::Merge(unlabel)).await.unwrap();
    wait_until("moved's copy removed and its finalizer released", DEADLINE, || async {
        let copy = east.copy("moved").await?.map(|c| c.name_any());
        let fins = deployments(&cp).get("moved").await.map_err(|e| e.to_string())?.finalizers().to_vec();
        if copy.is_none() && fins.is_empty() {
            Ok(())
        } else {
            Err(format!("copy {copy:?}, finalizers {fins:?}"))
        }
    })
    .await;

    // Nothing of ours is left downstream, not even the namespace.
    wait_until("the emptied namespace removed", DEADLINE, || async {
        let lp = ListParams::default().labels(&format!("{SYNC_TARGET_LABEL}=east"));
        let left = Api::<Namespace>::all(east.client()).list(&lp).await.map_err(|e| e.to_string())?;
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{:?}", left.items.iter().map(|n| n.name_any()).collect::<Vec<_>>()))
        }
    })
    .await;
}

/// An object of companion kind `kind` that follows Deployment `web` (pods labelled
/// `app: web`, which names `web-config`, `web-secret`, `web-runner` and `web-data`). Every kind of
/// the table of synced kinds has one: a kind added to the table without one does not
/// compile here.
fn follower_of_web(kind: placement_api::synced::Kind) -> serde_json::Value {
    use placement_api::synced::Kind;
    let pods = json!({"matchLabels": {"app": "web"}});
    let spec = match kind {
        Kind::ConfigMap => return json!({"data": {"greeting": "hello"}}),
        Kind::Secret => return json!({"stringData": {"password": "s3cret"}}),
        Kind::ServiceAccount => return json!({}),
        Kind::PersistentVolumeClaim => json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
        Kind::Service => json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
        Kind::Ingress => json!({"defaultBackend": {"service": {"name": "web-service", "port": {"number": 80}}}}),
        Kind::NetworkPolicy => json!({"podSelector": pods}),
        Kind::PodDisruptionBudget => json!({"maxUnavailable": 1, "selector": pods}),
        Kind::HorizontalPodAutoscaler => {
            json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 2, "maxReplicas": 4})
        }
        Kind::Deployment | Kind::StatefulSet | Kind::DaemonSet | Kind::Job | Kind::Namespace => {
            unreachable!("not a companion")
        }
    };
    json!({"spec": spec})
}

/// The name of `web`'s follower of `kind`.
fn follower_name(kind: placement_api::synced::Kind) -> String {
    format!("web-{}", kind.label())
        .replace("web-configmap", "web-config")
        .replace("web-serviceaccount", "web-runner")
        .replace("web-persistentvolumeclaim", "web-data")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_the_table_follows_its_deployment_down_and_goes_with_it() {
    every_kind_follows(Path::Labels).await;
}

/// The same without a single label: the companions controller of the process may not
/// write any (its label patches are refused), and the syncer carries what it publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_the_table_follows_as_published_by_the_companions_controller_before_any_label() {
    every_kind_follows(Path::Published).await;
}

/// How the syncer learns where companions go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Path {
    /// From their labels only, as in pull mode.
    Labels,
    /// From what the companions controller of the process publishes only.
    Published,
}

/// A client of the control plane in process that refuses every patch but of a
/// WorkloadPlacement: what the companions controller writes besides labels.
fn refusing_label_patches(cp: &ControlPlane) -> kube::Client {
    let inner = cp.in_process();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        async move {
            if req.method() == http::Method::PATCH && !req.uri().path().contains("/workloadplacements/") {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                                    "message": "this test lets no label be written"});
                let body = kube::client::Body::from(serde_json::to_vec(&status).unwrap());
                let refused = http::Response::builder().status(403).header("content-type", "application/json").body(body).unwrap();
                return Ok::<_, kube::Error>(refused);
            }
            inner.send(req).await
        }
    });
    kube::Client::new(service, "default")
}

async fn every_kind_follows(path: Path) {
    use kube::api::{ApiResource, DynamicObject};
    use placement_api::synced::Kind;
    let followers = Arc::new(Followers::default());
    let (cp, east, mut controllers) = fleet_with((path == Path::Published).then(|| followers.clone())).await;
    let controller_client = if path == Path::Published { refusing_label_patches(&cp) } else { cp.in_process() };
    controllers.push(AbortOnDrop(tokio::spawn(workspace_controllers::companions::run(controller_client, RESYNC, followers))));
    let api = |ar: &ApiResource| Api::<DynamicObject>::namespaced_with(cp.client(WS), "default", ar);
    for kind in Kind::companions() {
        let ar = kind.api_resource();
        let mut o: DynamicObject = serde_json::from_value(follower_of_web(kind)).unwrap();
        o.types = Some(kube::api::TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() });
        o.metadata.name = Some(follower_name(kind));
        api(&ar).create(&PostParams::default(), &o).await.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    }
    // web names its ConfigMap, Secret, ServiceAccount and claim; the others select it.
    let mut web = deployment("web").replicas(2).cpu("100m").build();
    let pod = web.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    pod.service_account_name = Some("web-runner".into());
    pod.volumes = Some(serde_json::from_value(json!([{"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}}])).unwrap());
    pod.containers[0].env_from =
        Some(serde_json::from_value(json!([{"configMapRef": {"name": "web-config"}}, {"secretRef": {"name": "web-secret"}}])).unwrap());
    let label = placement_api::sync_state_label("east");
    let wp: WorkloadPlacement = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {&label: "Sync"}},
        "spec": {"workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "placement": "default",
                 "clusters": [{"name": "east", "replicas": 2}]},
    }))
    .unwrap();
    Api::<WorkloadPlacement>::namespaced(cp.client(WS), "default").create(&PostParams::default(), &wp).await.unwrap();
    web.labels_mut().insert(label, "Sync".into());
    deployments(&cp).create(&PostParams::default(), &web).await.unwrap();
    let ns = wait_copy(&east, "web", "made", |_| true).await.namespace().unwrap_or_default();

    let copies = |want: bool| {
        let (east, ns) = (east.client(), ns.clone());
        async move {
            let mut wrong = Vec::new();
            for kind in Kind::companions() {
                let found = Api::<DynamicObject>::namespaced_with(east.clone(), &ns, &kind.api_resource())
                    .get_opt(&follower_name(kind))
                    .await
                    .map_err(|e| e.to_string())?;
                if found.is_some() != want {
                    wrong.push(format!("{kind:?}"));
                }
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(format!("{} for {wrong:?}", if want { "no copy yet" } else { "a copy still" }))
            }
        }
    };
    wait_until("a copy of every companion on east", DEADLINE, || copies(true)).await;
    let hpa = Api::<DynamicObject>::namespaced_with(east.client(), &ns, &Kind::HorizontalPodAutoscaler.api_resource());
    let bounds = hpa.get(&follower_name(Kind::HorizontalPodAutoscaler)).await.unwrap();
    assert_eq!(
        (bounds.data["spec"]["minReplicas"].clone(), bounds.data["spec"]["maxReplicas"].clone()),
        (json!(2), json!(4)),
        "one cluster: whole bounds"
    );

    // A label added upstream reaches the copy, and goes from it when it goes upstream.
    let services = api(&Kind::Service.api_resource());
    let service_name = follower_name(Kind::Service);
    let service_copy = Api::<DynamicObject>::namespaced_with(east.client(), &ns, &Kind::Service.api_resource());
    for (value, want) in [(json!("yes"), Some("yes")), (serde_json::Value::Null, None)] {
        let patch = json!({"metadata": {"labels": {"team": value}}});
        services.patch(&service_name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        wait_until(&format!("the copy's label team={want:?}"), DEADLINE, || {
            let service_copy = service_copy.clone();
            let service_name = service_name.clone();
            async move {
                let copy = service_copy.get(&service_name).await.map_err(|e| e.to_string())?;
                let team = copy.labels().get("team").cloned();
                if team.as_deref() == want {
                    Ok(())
                } else {
                    Err(format!("the copy's labels are {:?}", copy.labels()))
                }
            }
        })
        .await;
    }

    // The Deployment goes: so does every companion's copy, and upstream they stay.
    deployments(&cp).delete("web", &DeleteParams::default()).await.unwrap();
    wait_until("every companion's copy gone", DEADLINE, || copies(false)).await;
    for kind in Kind::companions() {
        let upstream = api(&kind.api_resource()).get_opt(&follower_name(kind)).await.unwrap();
        let upstream = upstream.unwrap_or_else(|| panic!("{kind:?} stays upstream"));
        if path == Path::Published {
            assert!(upstream.labels().get(&placement_api::sync_state_label("east")).is_none(), "{kind:?} was never labelled");
        }
    }
}
