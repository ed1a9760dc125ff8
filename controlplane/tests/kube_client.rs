//! The control plane as a real client sees it: kube-rs (`Api<K>`, `watcher`,
//! `reflector`, the finalizer helper, server-side apply) against an in-process server
//! over HTTPS. Each test starts its own server on an ephemeral port over its own
//! temp dir.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::{json, Value};

use support::{api_status, root_client, start, wait_until, workspace_client};

/// Deadline for anything that should happen "promptly" (controllers tick at 0.5 s).
const DEADLINE: Duration = Duration::from_secs(10);

fn configmap(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        },
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .unwrap()
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    }))
    .unwrap()
}

fn sorted_names<K: kube::Resource>(items: impl IntoIterator<Item = K>) -> Vec<String> {
    let mut v: Vec<String> = items.into_iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect();
    v.sort();
    v
}

fn data_of(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref().and_then(|d| d.get(key).cloned())
}

// ---------------------------------------------------------------------------------
// 1. CRUD
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_crud_with_selectors_stale_replace_conflict_merge_patch_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let client = root_client(&srv).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Create through the raw request first: kube-rs hides the status code, and a
    // create must answer 201 Created.
    let body = serde_json::to_vec(&configmap("web-fe", &[("app", "web"), ("tier", "fe")], &[("k", "v1")])).unwrap();
    let req = kube::core::Request::new("/api/v1/namespaces/default/configmaps").create(&PostParams::default(), body).unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(resp.status(), http::StatusCode::CREATED, "POST of a new ConfigMap must answer 201 Created");

    for (name, labels) in [("web-be", vec![("app", "web"), ("tier", "be")]), ("db", vec![("app", "db")])] {
        let created = cms.create(&PostParams::default(), &configmap(name, &labels, &[("k", "v1")])).await.unwrap();
        assert!(created.metadata.uid.as_deref().is_some_and(|u| !u.is_empty()), "uid is set on create: {:?}", created.metadata);
        assert!(created.metadata.creation_timestamp.is_some(), "creationTimestamp is set on create: {:?}", created.metadata);
        assert!(
            created.metadata.resource_version.as_deref().is_some_and(|r| !r.is_empty()),
            "resourceVersion is set: {:?}",
            created.metadata
        );
        assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    }
    let dup = api_status(cms.create(&PostParams::default(), &configmap("db", &[], &[])).await, "creating an existing name");
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"), "{dup:?}");

    // get
    let got = cms.get("web-fe").await.unwrap();
    assert_eq!(data_of(&got, "k").as_deref(), Some("v1"));
    assert!(got.metadata.uid.is_some() && got.metadata.creation_timestamp.is_some());

    // list with label and field selectors
    let list = |lp: ListParams| {
        let cms = cms.clone();
        async move { sorted_names(cms.list(&lp).await.unwrap()) }
    };
    assert_eq!(list(ListParams::default()).await, ["db", "web-be", "web-fe"]);
    assert_eq!(list(ListParams::default().labels("app=web")).await, ["web-be", "web-fe"]);
    assert_eq!(list(ListParams::default().labels("app=web,tier!=be")).await, ["web-fe"]);
    assert_eq!(list(ListParams::default().labels("tier in (fe,be),app notin (db)")).await, ["web-be", "web-fe"]);
    assert_eq!(list(ListParams::default().labels("!tier")).await, ["db"]);
    assert_eq!(list(ListParams::default().fields("metadata.name=db")).await, ["db"]);
    assert_eq!(list(ListParams::default().fields("metadata.name!=db").labels("tier")).await, ["web-be", "web-fe"]);
    assert_eq!(list(ListParams::default().fields("metadata.namespace=default,metadata.name=web-be")).await, ["web-be"]);
    let bad = api_status(cms.list(&ListParams::default().fields("data.k=v1")).await, "unsupported field selector");
    assert_eq!(bad.code, 400, "{bad:?}");

    // replace, then replace again from the now-stale copy → 409 Conflict
    let stale = cms.get("web-fe").await.unwrap();
    let mut fresh = stale.clone();
    fresh.data.get_or_insert_with(BTreeMap::new).insert("k".into(), "v2".into());
    let replaced = cms.replace("web-fe", &PostParams::default(), &fresh).await.unwrap();
    assert_ne!(replaced.metadata.resource_version, stale.metadata.resource_version, "a write moves resourceVersion");
    assert_eq!(replaced.metadata.uid, stale.metadata.uid);
    assert_eq!(replaced.metadata.creation_timestamp, stale.metadata.creation_timestamp);
    let mut stale_edit = stale.clone();
    stale_edit.data.get_or_insert_with(BTreeMap::new).insert("k".into(), "v3".into());
    let conflict = api_status(cms.replace("web-fe", &PostParams::default(), &stale_edit).await, "replace with a stale resourceVersion");
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"), "{conflict:?}");
    assert_eq!(data_of(&cms.get("web-fe").await.unwrap(), "k").as_deref(), Some("v2"), "the conflicting write changed nothing");

    // merge patch: add a key, remove a label with null
    let patched = cms
        .patch("web-fe", &PatchParams::default(), &Patch::Merge(json!({"data": {"extra": "e"}, "metadata": {"labels": {"tier": null}}})))
        .await
        .unwrap();
    assert_eq!(data_of(&patched, "k").as_deref(), Some("v2"));
    assert_eq!(data_of(&patched, "extra").as_deref(), Some("e"));
    assert_eq!(patched.labels().get("app").map(String::as_str), Some("web"));
    assert!(!patched.labels().contains_key("tier"), "null in a merge patch removes the key: {:?}", patched.labels());
    assert_eq!(list(ListParams::default().labels("tier")).await, ["web-be"]);

    // delete → get is 404 NotFound, and a second delete is 404 too
    cms.delete("web-fe", &DeleteParams::default()).await.unwrap();
    let gone = api_status(cms.get("web-fe").await, "get after delete");
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"), "{gone:?}");
    let again = api_status(cms.delete("web-fe", &DeleteParams::default()).await, "second delete");
    assert_eq!((again.code, again.reason.as_str()), (404, "NotFound"), "{again:?}");
    assert!(cms.get_opt("web-fe").await.unwrap().is_none());
    assert_eq!(list(ListParams::default()).await, ["db", "web-be"]);

    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_generation_bumps_on_spec_change_but_not_on_status_or_label_writes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let deploys: Api<Deployment> = Api::namespaced(root_client(&srv).await, "default");

    let created = deploys.create(&PostParams::default(), &deployment("web", 2)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1), "a new Deployment has generation 1");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert!(created.status.is_none() || created.status == Some(Default::default()), "status is not set by create: {:?}", created.status);

    // /status write: status changes, generation and spec do not — even if the body tries to change spec.
    let st = deploys
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 9}, "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(st.metadata.generation, Some(1), "a /status write must not bump generation");
    assert_eq!(st.spec.as_ref().and_then(|s| s.replicas), Some(2), "a /status write must not change spec");
    assert_eq!(st.status.as_ref().and_then(|s| s.ready_replicas), Some(2));
    // A status write decodes the status it brings (a wrong type is a 400), and the
    // stored object keeps the typed field order: spec before status.
    let bad = api_status(
        deploys.patch_status("web", &PatchParams::default(), &Patch::Merge(json!({"status": {"readyReplicas": "two"}}))).await,
        "a status write with a string for readyReplicas",
    );
    assert_eq!((bad.code, bad.reason.as_str()), (400, "BadRequest"), "{bad:?}");
    // managedFields a write changes are decoded as well (those it sends back as stored
    // skip the decode).
    let bad = api_status(
        deploys.patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"managedFields": [{"manager": 5}]}}))).await,
        "a write with a number for a managedFields manager",
    );
    assert_eq!((bad.code, bad.reason.as_str()), (400, "BadRequest"), "{bad:?}");
    let raw = root_client(&srv)
        .await
        .request_text(http::Request::get("/apis/apps/v1/namespaces/default/deployments/web").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&raw).unwrap().keys().cloned().collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"], "{raw}");

    // label-only change: no bump
    let labelled =
        deploys.patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"extra": "x"}}}))).await.unwrap();
    assert_eq!(labelled.metadata.generation, Some(1), "a label change must not bump a Deployment's generation");

    // An update that leaves spec and status as stored keeps them as stored (they skip
    // the typed round trip): sent back with every key order reversed, they come out
    // in the typed order, next to the label the update changed.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), reversed(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }
    let path = "/apis/apps/v1/namespaces/default/deployments/web";
    let client = root_client(&srv).await;
    let get_raw = || async {
        serde_json::from_str::<Value>(&client.request_text(http::Request::get(path).body(Vec::new()).unwrap()).await.unwrap()).unwrap()
    };
    let before = get_raw().await;
    let mut body = before.clone();
    body["spec"] = reversed(&before["spec"]);
    body["status"] = reversed(&before["status"]);
    body["metadata"]["labels"]["tier"] = json!("web");
    assert_ne!(body["spec"].to_string(), before["spec"].to_string(), "the test sends the spec in another order");
    let put = http::Request::put(path).header("content-type", "application/json").body(body.to_string().into_bytes()).unwrap();
    client.request_text(put).await.unwrap();
    let after = get_raw().await;
    assert_eq!(after["spec"].to_string(), before["spec"].to_string(), "the spec is stored as it was");
    assert_eq!(after["status"].to_string(), before["status"].to_string(), "the status is stored as it was");
    assert_eq!(after["metadata"]["labels"]["tier"], "web");
    assert_eq!(after["metadata"]["generation"], 1);

    // spec change through the main resource: bump; status preserved and not writable from here
    let scaled = deploys
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"readyReplicas": 99}})))
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2), "a spec change bumps generation");
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(3));
    assert_eq!(scaled.status.as_ref().and_then(|s| s.ready_replicas), Some(2), "the main resource must not change status");

    // a no-op spec write: no bump
    let same = deploys.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.unwrap();
    assert_eq!(same.metadata.generation, Some(2), "an unchanged spec must not bump generation");

    // replace with a spec change bumps again; a stale replace conflicts
    let mut d = deploys.get("web").await.unwrap();
    let stale = d.clone();
    d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.28".into());
    let replaced = deploys.replace("web", &PostParams::default(), &d).await.unwrap();
    assert_eq!(replaced.metadata.generation, Some(3));
    let conflict = api_status(deploys.replace("web", &PostParams::default(), &stale).await, "stale Deployment replace");
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"), "{conflict:?}");

    // status write after all that still leaves generation alone
    let st2 = deploys
        .patch_status("web", &PatchParams::default(), &Patch::Merge(json!({"status": {"observedGeneration": 3, "replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(st2.metadata.generation, Some(3));
    assert_eq!(st2.status.as_ref().and_then(|s| s.observed_generation), Some(3));

    // the scale subresource sees spec.replicas
    let scale = deploys.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));

    deploys.delete("web", &DeleteParams::default()).await.unwrap();
    let gone = api_status(deploys.get("web").await, "get after delete");
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));

    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_is_created_pending_and_bound_once_through_pods_binding() {
    // Pods are a physical cluster's: the simulated clusters serve them.
    let dir = tempfile::tempdir().unwrap();
    let config = controlplane::server::ServerConfig::physical_cluster(
        "pods",
        dir.path(),
        dir.path().join("pods.kubeconfig"),
        "127.0.0.1:0".parse().unwrap(),
    );
    let srv = controlplane::server::start(config, prometheus::Registry::new()).await.expect("the cluster starts");
    let kubeconfig = kube::config::Kubeconfig::read_from(&srv.kubeconfig).unwrap();
    let client_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(client_config).unwrap(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "10m"}}}]},
        // A client's status is dropped on create, as kube-apiserver drops it.
        "status": {"phase": "Running", "podIP": "10.0.0.9"}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = created.status.clone().unwrap_or_default();
    assert_eq!((status.phase.as_deref(), status.qos_class.as_deref()), (Some("Pending"), Some("Burstable")), "{status:?}");
    assert_eq!(status.pod_ip, None, "{status:?}");

    let binding = |name: &str, kind: &str, node: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": kind, "name": node}});
    let bind = |body: Value| {
        let pods = pods.clone();
        async move { pods.create_subresource::<Value, Value>("binding", "p", &PostParams::default(), &body).await }
    };

    let bad = api_status(bind(binding("p", "Pod", "")).await, "a binding to a Pod with no name");
    assert_eq!((bad.code, bad.reason.as_str()), (422, "Invalid"), "{bad:?}");
    assert!(bad.message.contains("target.kind") && bad.message.contains("target.name"), "{}", bad.message);
    let other = api_status(bind(binding("q", "Node", "n1")).await, "a binding naming another pod");
    assert_eq!(other.code, 400, "{other:?}");

    let answer = bind(binding("p", "Node", "n1")).await.unwrap();
    assert_eq!((answer["kind"].as_str(), answer["status"].as_str()), (Some("Status"), Some("Success")), "{answer}");
    let bound = pods.get("p").await.unwrap();
    assert_eq!(bound.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"));
    let scheduled = bound.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    assert_eq!(scheduled.map(|c| c.status.as_str()), Some("True"), "{:?}", bound.status);
    let rv = |p: &Pod| p.metadata.resource_version.clone().unwrap_or_default().parse::<u64>().unwrap();
    assert_eq!(rv(&bound), rv(&created) + 1, "the node and the condition are one write");
    assert_eq!(bound.status.as_ref().and_then(|s| s.qos_class.as_deref()), Some("Burstable"));

    let again = api_status(bind(binding("p", "Node", "n2")).await, "binding a bound pod");
    assert_eq!((again.code, again.reason.as_str()), (409, "Conflict"), "{again:?}");
    assert!(again.message.contains("pod p is already assigned to node \"n1\""), "{}", again.message);
    assert_eq!(rv(&pods.get("p").await.unwrap()), rv(&bound), "a refused binding writes nothing");

    srv.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------
// 2. watcher + reflector
// ---------------------------------------------------------------------------------

/// Runs `reflector(watcher(api, cfg))` in a task; returns the store and the errors seen.
fn spawn_reflector(
    api: Api<ConfigMap>,
    cfg: watcher::Config,
) -> (reflector::Store<ConfigMap>, Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let errs = errors.clone();
    let task = tokio::spawn(async move {
        let mut s = reflector(writer, watcher(api, cfg)).default_backoff().boxed();
        while let Some(ev) = s.next().await {
            if let Err(e) = ev {
                errs.lock().unwrap().push(e.to_string());
            }
        }
    });
    (reader, errors, task)
}

/// name → (resourceVersion, data.v)
type Snapshot = BTreeMap<String, (String, Option<String>)>;

fn snapshot<'a>(items: impl IntoIterator<Item = &'a ConfigMap>) -> Snapshot {
    items.into_iter().map(|c| (c.name_any(), (c.resource_version().unwrap_or_default(), data_of(c, "v")))).collect()
}

/// Waits until the reflector's cache equals what the server lists (names, resourceVersions, data).
async fn wait_converged(
    what: &str,
    store: &reflector::Store<ConfigMap>,
    api: &Api<ConfigMap>,
    errors: &Arc<Mutex<Vec<String>>>,
) -> Snapshot {
    wait_until(what, DEADLINE, || async {
        let server = snapshot(&api.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items);
        let cache = snapshot(store.state().iter().map(|c| &**c));
        if server == cache {
            Ok(server)
        } else {
            let missing: Vec<_> = server.iter().filter(|(k, v)| cache.get(*k) != Some(v)).map(|(k, v)| format!("{k}={v:?}")).collect();
            let extra: Vec<_> = cache.iter().filter(|(k, v)| server.get(*k) != Some(v)).map(|(k, v)| format!("{k}={v:?}")).collect();
            Err(format!("server-only/newer {missing:?}; cache-only/stale {extra:?}; watch errors {:?}", errors.lock().unwrap()))
        }
    })
    .await
}

/// N creates, M updates, K deletes, each burst issued concurrently.
async fn burst(api: &Api<ConfigMap>, n: usize, m: usize, k: std::ops::Range<usize>) {
    let creates = (0..n).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &configmap(&format!("b-{i:03}"), &[("burst", "yes")], &[("v", "created")])).await.unwrap()
        }
    });
    futures::future::join_all(creates).await;
    let updates = (0..m).map(|i| {
        let api = api.clone();
        async move {
            api.patch(&format!("b-{i:03}"), &PatchParams::default(), &Patch::Merge(json!({"data": {"v": format!("updated-{i}")}})))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(updates).await;
    let deletes = k.map(|i| {
        let api = api.clone();
        async move { api.delete(&format!("b-{i:03}"), &DeleteParams::default()).await.unwrap() }
    });
    futures::future::join_all(deletes).await;
}

fn check_burst_result(snap: &Snapshot, pre: &[&str], n: usize, m: usize, k: std::ops::Range<usize>) {
    let mut expected: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
    expected.extend((0..n).filter(|i| !k.contains(i)).map(|i| format!("b-{i:03}")));
    expected.sort();
    assert_eq!(snap.keys().cloned().collect::<Vec<_>>(), expected);
    for i in (0..n).filter(|i| !k.contains(i)) {
        let want = if i < m { format!("updated-{i}") } else { "created".to_string() };
        assert_eq!(snap[&format!("b-{i:03}")].1.as_deref(), Some(want.as_str()), "data.v of b-{i:03}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_stays_in_sync_through_a_burst_of_creates_updates_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    for name in ["pre-1", "pre-2"] {
        api.create(&PostParams::default(), &configmap(name, &[], &[("v", "pre")])).await.unwrap();
    }

    let (store, errors, task) = spawn_reflector(api.clone(), watcher::Config::default());
    tokio::time::timeout(DEADLINE, store.wait_until_ready()).await.expect("the reflector becomes ready after the initial list").unwrap();
    assert_eq!(sorted_names(store.state().iter().map(|c| (**c).clone())), ["pre-1", "pre-2"], "initial list is in the cache");

    let (n, m, k) = (40, 20, 10..25);
    burst(&api, n, m, k.clone()).await;
    let snap = wait_converged("the reflector matches the server after the burst", &store, &api, &errors).await;
    check_burst_result(&snap, &["pre-1", "pre-2"], n, m, k);
    assert!(errors.lock().unwrap().is_empty(), "no watch errors expected: {:?}", errors.lock().unwrap());

    task.abort();
    srv.shutdown().await.unwrap();
}

/// A kube client whose requests the server serves in this process, as `flotilla start`
/// builds for its controllers; `token` replaces the admin's credentials.
fn in_process_client(srv: &controlplane::server::Server, token: Option<&str>) -> kube::Client {
    let local = srv.in_process();
    let authorization = token.map(|t| http::HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
    kube::Client::new(
        tower::service_fn(move |mut req: http::Request<kube::client::Body>| {
            if let Some(a) = &authorization {
                req.headers_mut().insert(http::header::AUTHORIZATION, a.clone());
            }
            local.call(req)
        }),
        "default",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_client_is_authenticated_watches_like_a_network_one_and_is_cut_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::namespaced(in_process_client(&srv, None), "default");
    api.create(&PostParams::default(), &configmap("pre-1", &[], &[("v", "pre")])).await.unwrap();

    // The admin's credentials are added; anything else still has to authenticate.
    let stranger: Api<ConfigMap> = Api::namespaced(in_process_client(&srv, Some("not-a-token")), "default");
    let status = api_status(stranger.list(&ListParams::default()).await, "a request with an unknown token");
    assert_eq!(status.code, 401, "{status:?}");

    // A reflector over the in-process transport stays in step through a burst, and what
    // it holds is what a client over HTTPS lists.
    let (store, errors, task) = spawn_reflector(api.clone(), watcher::Config::default());
    tokio::time::timeout(DEADLINE, store.wait_until_ready()).await.expect("the reflector becomes ready").unwrap();
    let (n, m, k) = (30, 15, 5..20);
    burst(&api, n, m, k.clone()).await;
    let over_https: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let snap = wait_converged("the in-process reflector matches the server after the burst", &store, &over_https, &errors).await;
    check_burst_result(&snap, &["pre-1"], n, m, k);
    assert!(errors.lock().unwrap().is_empty(), "no watch errors expected: {:?}", errors.lock().unwrap());
    task.abort();

    // Shutting the server down ends an in-process watch, as it ends one over HTTPS.
    let mut raw = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    srv.shutdown().await.unwrap();
    let ended = tokio::time::timeout(DEADLINE, async {
        loop {
            match raw.next().await {
                None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "an in-process watch was still open {DEADLINE:?} after the server shut down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_reflector_gets_initial_events_end_bookmark_and_stays_in_sync() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    for name in ["pre-1", "pre-2", "pre-3"] {
        api.create(&PostParams::default(), &configmap(name, &[], &[("v", "pre")])).await.unwrap();
    }
    let list_rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();

    // Raw: sendInitialEvents=true gives ADDED for the current state, then a BOOKMARK
    // annotated k8s.io/initial-events-end at a revision not older than the state sent.
    let mut raw = api.watch(&WatchParams::streaming_lists(), "0").await.unwrap().boxed();
    let mut added = Vec::new();
    let bookmark = loop {
        let ev = tokio::time::timeout(DEADLINE, raw.next()).await.expect("initial events arrive").expect("stream open").unwrap();
        match ev {
            WatchEvent::Added(cm) => added.push(cm.name_any()),
            WatchEvent::Bookmark(b) => break b,
            other => panic!("unexpected event before the initial-events-end bookmark: {other:?}"),
        }
    };
    added.sort();
    assert_eq!(added, ["pre-1", "pre-2", "pre-3"]);
    assert_eq!(
        bookmark.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str),
        Some("true"),
        "{:?}",
        bookmark.metadata.annotations
    );
    let bm_rv: u64 = bookmark.metadata.resource_version.parse().unwrap();
    assert!(bm_rv >= list_rv.parse::<u64>().unwrap(), "bookmark rv {bm_rv} is not older than the list rv {list_rv}");
    drop(raw);

    // kube-runtime in streaming-list mode only becomes ready on that bookmark.
    let (store, errors, task) = spawn_reflector(api.clone(), watcher::Config::default().streaming_lists());
    tokio::time::timeout(DEADLINE, store.wait_until_ready())
        .await
        .unwrap_or_else(|_| {
            panic!("streaming-list watcher never saw the initial-events-end bookmark; errors: {:?}", errors.lock().unwrap())
        })
        .unwrap();
    assert_eq!(sorted_names(store.state().iter().map(|c| (**c).clone())), ["pre-1", "pre-2", "pre-3"]);

    let (n, m, k) = (30, 15, 5..20);
    burst(&api, n, m, k.clone()).await;
    let snap = wait_converged("the streaming-list reflector matches the server after the burst", &store, &api, &errors).await;
    check_burst_result(&snap, &["pre-1", "pre-2", "pre-3"], n, m, k);
    assert!(errors.lock().unwrap().is_empty(), "no watch errors expected: {:?}", errors.lock().unwrap());

    task.abort();
    srv.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------
// 3. server-side apply
// ---------------------------------------------------------------------------------

fn managed_fields_of(cm: &ConfigMap, manager: &str) -> Option<Value> {
    cm.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|e| e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply"))
        .map(|e| e.fields_v1.as_ref().map(|f| f.0.clone()).unwrap_or(Value::Null))
}

fn owns_data_key(cm: &ConfigMap, manager: &str, key: &str) -> bool {
    managed_fields_of(cm, manager).is_some_and(|f| f.pointer(&format!("/f:data/f:{key}")).is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflict_then_force_takes_ownership() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let cfg = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data});

    // Apply creates.
    let created = cms.patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(cfg(json!({"x": "1", "a": "from-a"})))).await.unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(data_of(&created, "x").as_deref(), Some("1"));
    assert!(
        owns_data_key(&created, "mgr-a", "x") && owns_data_key(&created, "mgr-a", "a"),
        "mgr-a owns what it applied: {:?}",
        created.metadata.managed_fields
    );
    let ops: Vec<_> = created.metadata.managed_fields.iter().flatten().map(|e| (e.manager.clone(), e.operation.clone())).collect();
    assert_eq!(ops, [(Some("mgr-a".to_string()), Some("Apply".to_string()))], "only the Apply entry of mgr-a after an apply-create");

    // A second manager applying a different value of x conflicts.
    let st = api_status(
        cms.patch("ssa", &PatchParams::apply("mgr-b"), &Patch::Apply(cfg(json!({"x": "2"})))).await,
        "applying a field owned by another manager with a different value",
    );
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"), "{st:?}");
    let causes = st.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
    assert!(
        causes.iter().any(|c| c.reason == "FieldManagerConflict" && c.field == ".data.x" && c.message.contains("mgr-a")),
        "expected a FieldManagerConflict cause on .data.x naming mgr-a: {causes:?}"
    );
    assert_eq!(data_of(&cms.get("ssa").await.unwrap(), "x").as_deref(), Some("1"), "a conflicting apply changes nothing");

    // Applying the same value is shared ownership, not a conflict.
    let shared = cms.patch("ssa", &PatchParams::apply("mgr-c"), &Patch::Apply(cfg(json!({"a": "from-a"})))).await.unwrap();
    assert!(owns_data_key(&shared, "mgr-a", "a") && owns_data_key(&shared, "mgr-c", "a"), "{:?}", shared.metadata.managed_fields);

    // force takes x over.
    let forced = cms.patch("ssa", &PatchParams::apply("mgr-b").force(), &Patch::Apply(cfg(json!({"x": "2"})))).await.unwrap();
    assert_eq!(data_of(&forced, "x").as_deref(), Some("2"));
    assert_eq!(data_of(&forced, "a").as_deref(), Some("from-a"), "fields of other managers are untouched");
    let mf = &forced.metadata.managed_fields;
    assert!(owns_data_key(&forced, "mgr-b", "x"), "mgr-b owns x after force: {mf:?}");
    assert!(!owns_data_key(&forced, "mgr-a", "x"), "mgr-a lost x: {mf:?}");
    assert!(owns_data_key(&forced, "mgr-a", "a"), "mgr-a keeps a: {mf:?}");
    assert!(owns_data_key(&forced, "mgr-c", "a"), "mgr-c keeps a: {mf:?}");
    assert!(!owns_data_key(&forced, "mgr-b", "a"), "mgr-b never applied a: {mf:?}");

    // mgr-a may now re-apply without x (it no longer owns it): no conflict, x stays with mgr-b.
    let reapplied = cms.patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(cfg(json!({"a": "from-a"})))).await.unwrap();
    assert_eq!(data_of(&reapplied, "x").as_deref(), Some("2"));
    assert!(owns_data_key(&reapplied, "mgr-b", "x"));

    // The persisted object agrees with the responses.
    let live = cms.get("ssa").await.unwrap();
    assert_eq!(live.metadata.managed_fields, reapplied.metadata.managed_fields);

    srv.shutdown().await.unwrap();
}

/// Controllers re-apply their desired state on every event; a write that changes nothing
/// must not bump the resourceVersion or wake the watchers, or they would chase each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_change_nothing_keep_the_resource_version_and_send_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same"}, "data": {"k": "v"}});
    let first = cms.patch("same", &PatchParams::apply("ctl"), &Patch::Apply(body.clone())).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    let mut events = cms.watch(&WatchParams::default().fields("metadata.name=same"), &rv).await.unwrap().boxed();

    let again = cms.patch("same", &PatchParams::apply("ctl"), &Patch::Apply(body.clone())).await.unwrap();
    assert_eq!(again.metadata.resource_version.as_deref(), Some(rv.as_str()), "an identical apply is a no-op");
    let replaced = cms.replace("same", &PostParams::default(), &again).await.unwrap();
    assert_eq!(replaced.metadata.resource_version.as_deref(), Some(rv.as_str()), "an identical update is a no-op");
    let merged = cms.patch("same", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    assert_eq!(merged.metadata.resource_version.as_deref(), Some(rv.as_str()), "a merge patch that changes nothing is a no-op");

    // A real change still goes through, and it is the first event the watch sees.
    let changed = cms.patch("same", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "w"}}))).await.unwrap();
    assert_ne!(changed.metadata.resource_version.as_deref(), Some(rv.as_str()));
    match tokio::time::timeout(DEADLINE, events.next()).await {
        Ok(Some(Ok(WatchEvent::Modified(cm)))) => {
            assert_eq!(data_of(&cm, "k").as_deref(), Some("w"), "the first event after the no-ops is the real change")
        }
        other => panic!("expected the MODIFIED event of the real change, got {other:?}"),
    }
    srv.shutdown().await.unwrap();
}

/// A label-selector watch sees an object come into its selection as ADDED, change
/// inside it as MODIFIED and leave it as DELETED, and nothing of an object outside it,
/// as kube-apiserver's watch cache sends them. A field selector combined with it
/// narrows the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_selector_watch_follows_objects_into_and_out_of_its_selection() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut labelled = cms.watch(&WatchParams::default().labels("app=web"), &rv).await.unwrap().boxed();
    let mut named = cms.watch(&WatchParams::default().labels("app=web").fields("metadata.name=b"), &rv).await.unwrap().boxed();

    let label = |name: &'static str, value: Value| {
        let cms = cms.clone();
        async move { cms.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": value}}}))).await.unwrap() }
    };
    cms.create(&PostParams::default(), &configmap("a", &[("app", "db")], &[])).await.unwrap();
    cms.create(&PostParams::default(), &configmap("b", &[], &[])).await.unwrap();
    label("a", json!("web")).await;
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    label("b", json!("web")).await;
    label("a", Value::Null).await;
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    cms.delete("b", &DeleteParams::default()).await.unwrap();

    let next = async |events: &mut futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>| match tokio::time::timeout(
        DEADLINE,
        events.next(),
    )
    .await
    {
        Ok(Some(Ok(WatchEvent::Added(cm)))) => format!("ADDED {}", cm.name_any()),
        Ok(Some(Ok(WatchEvent::Modified(cm)))) => format!("MODIFIED {} {:?}", cm.name_any(), data_of(&cm, "k")),
        Ok(Some(Ok(WatchEvent::Deleted(cm)))) => format!("DELETED {}", cm.name_any()),
        other => format!("{other:?}"),
    };
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(next(&mut labelled).await);
    }
    assert_eq!(seen, ["ADDED a", "MODIFIED a Some(\"v\")", "ADDED b", "DELETED a", "DELETED b"]);
    assert_eq!([next(&mut named).await, next(&mut named).await], ["ADDED b".to_string(), "DELETED b".to_string()]);
    srv.shutdown().await.unwrap();
}

/// A server-side apply that creates its object stores it once: a watcher from before
/// sees one ADDED event with the object as the apply answered it, whose managedFields
/// hold only the apply's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_creates_is_one_write_owned_by_the_apply() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let before = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut events = cms.watch(&WatchParams::default(), &before).await.unwrap().boxed();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh"}, "data": {"k": "v"}});
    let created = cms.patch("fresh", &PatchParams::apply("ctl"), &Patch::Apply(body)).await.unwrap();

    let managers: Vec<(String, String)> =
        created.metadata.managed_fields.iter().flatten().map(|m| (m.manager.clone().unwrap(), m.operation.clone().unwrap())).collect();
    assert_eq!(managers, [("ctl".to_string(), "Apply".to_string())], "only the apply owns the new object's fields");
    match tokio::time::timeout(DEADLINE, events.next()).await {
        Ok(Some(Ok(WatchEvent::Added(cm)))) => {
            assert_eq!(cm.metadata.resource_version, created.metadata.resource_version, "the ADDED event is the object as answered")
        }
        other => panic!("expected the ADDED event of the apply, got {other:?}"),
    }
    // A later write is the next event: nothing else was stored between the two.
    cms.patch("fresh", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "w"}}))).await.unwrap();
    match tokio::time::timeout(DEADLINE, events.next()).await {
        Ok(Some(Ok(WatchEvent::Modified(cm)))) => assert_eq!(data_of(&cm, "k").as_deref(), Some("w"), "the next event is the merge patch"),
        other => panic!("expected the MODIFIED event of the merge patch, got {other:?}"),
    }
    srv.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------
// 4. the finalizer helper
// ---------------------------------------------------------------------------------

const FINALIZER: &str = "flotilla.io/test-cleanup";

struct Ctx {
    api: Api<ConfigMap>,
    log: Mutex<Vec<String>>,
    errors: Mutex<Vec<String>>,
}

async fn reconcile(obj: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
    let c = ctx.clone();
    finalizer(&ctx.api, FINALIZER, obj, |ev| async move {
        match ev {
            FinalizerEvent::Apply(o) => c.log.lock().unwrap().push(format!("apply:{}", o.name_any())),
            FinalizerEvent::Cleanup(o) => {
                let deleting = o.metadata.deletion_timestamp.is_some();
                c.log.lock().unwrap().push(format!("cleanup:{}:deleting={deleting}", o.name_any()));
            }
        }
        Ok::<_, kube::Error>(Action::await_change())
    })
    .await
}

fn error_policy(obj: Arc<ConfigMap>, err: &kube::runtime::finalizer::Error<kube::Error>, ctx: Arc<Ctx>) -> Action {
    ctx.errors.lock().unwrap().push(format!("{}: {err:?}", obj.name_any()));
    Action::requeue(Duration::from_millis(100))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_helper_adds_finalizer_runs_cleanup_on_delete_and_object_disappears() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");

    // The helper refuses to clobber: a JSON patch whose `test` fails writes nothing (422).
    cms.create(&PostParams::default(), &configmap("probe", &[], &[("v", "1")])).await.unwrap();
    let failed = api_status(
        cms.patch(
            "probe",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": ["someone/else"]},
                    {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}
                ]))
                .unwrap(),
            ),
        )
        .await,
        "JSON patch with a failing test op",
    );
    assert_eq!(failed.code, 422, "{failed:?}");
    assert!(cms.get("probe").await.unwrap().finalizers().is_empty());
    cms.delete("probe", &DeleteParams::default()).await.unwrap();

    // "solo" has no finalizers (the helper sends test-null + add); "shared" already has
    // one of another owner (the helper sends test-list + add at /-).
    cms.create(&PostParams::default(), &configmap("solo", &[], &[("v", "1")])).await.unwrap();
    let mut shared = configmap("shared", &[], &[("v", "1")]);
    shared.metadata.finalizers = Some(vec!["example.com/other".into()]);
    cms.create(&PostParams::default(), &shared).await.unwrap();

    let ctx = Arc::new(Ctx { api: cms.clone(), log: Mutex::new(Vec::new()), errors: Mutex::new(Vec::new()) });
    let controller = tokio::spawn(
        Controller::new(cms.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| futures::future::ready(())),
    );
    let state = |ctx: &Arc<Ctx>| format!("log {:?}, errors {:?}", ctx.log.lock().unwrap(), ctx.errors.lock().unwrap());

    for (name, want) in [("solo", vec![FINALIZER]), ("shared", vec!["example.com/other", FINALIZER])] {
        wait_until(&format!("the helper added its finalizer to {name} and ran Apply"), DEADLINE, || async {
            let cm = cms.get(name).await.map_err(|e| e.to_string())?;
            let applied = ctx.log.lock().unwrap().iter().any(|l| l == &format!("apply:{name}"));
            if cm.finalizers() == want.as_slice() && applied {
                Ok(())
            } else {
                Err(format!("finalizers {:?}; {}", cm.finalizers(), state(&ctx)))
            }
        })
        .await;
    }

    // Delete: the object stays with a deletionTimestamp until the helper's Cleanup removes its finalizer.
    let marked = cms.delete("solo", &DeleteParams::default()).await.unwrap().left().expect("a finalized object is returned, not a Status");
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "DELETE of an object with finalizers sets deletionTimestamp: {:?}",
        marked.metadata
    );
    assert_eq!(marked.finalizers(), [FINALIZER]);
    wait_until("solo is gone after the helper's cleanup", DEADLINE, || async {
        match cms.get_opt("solo").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(cm) => Err(format!(
                "still there: deletionTimestamp {:?} finalizers {:?}; {}",
                cm.metadata.deletion_timestamp,
                cm.finalizers(),
                state(&ctx)
            )),
        }
    })
    .await;
    let gone = api_status(cms.get("solo").await, "get after the finalizer was removed");
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));
    assert!(ctx.log.lock().unwrap().iter().any(|l| l == "cleanup:solo:deleting=true"), "{}", state(&ctx));

    // With another owner's finalizer left, the helper removes only its own; the object stays.
    cms.delete("shared", &DeleteParams::default()).await.unwrap();
    wait_until("the helper removed only its own finalizer from shared", DEADLINE, || async {
        let cm = cms.get("shared").await.map_err(|e| e.to_string())?;
        if cm.finalizers() == ["example.com/other"] && cm.metadata.deletion_timestamp.is_some() {
            Ok(())
        } else {
            Err(format!("finalizers {:?} deletionTimestamp {:?}; {}", cm.finalizers(), cm.metadata.deletion_timestamp, state(&ctx)))
        }
    })
    .await;
    assert!(ctx.log.lock().unwrap().iter().any(|l| l == "cleanup:shared:deleting=true"), "{}", state(&ctx));
    // The other owner finishes: removing the last finalizer deletes the object.
    cms.patch("shared", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    let gone = api_status(cms.get("shared").await, "get after the last finalizer was removed");
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));

    assert!(ctx.errors.lock().unwrap().is_empty(), "reconcile errors: {}", state(&ctx));
    controller.abort();
    srv.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------
// 5. resume after restart
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_restart_old_resource_version_is_expired_data_survives_and_watcher_relists() {
    let dir = tempfile::tempdir().unwrap();

    let srv = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let mut before = BTreeMap::new();
    for i in 0..5 {
        let cm = api.create(&PostParams::default(), &configmap(&format!("old-{i}"), &[], &[("v", "old")])).await.unwrap();
        before.insert(cm.name_any(), (cm.metadata.uid.clone().unwrap(), cm.resource_version().unwrap()));
    }
    let old_rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    // One more write after the recorded revision, so that old_rv is strictly older than
    // the revision the restarted server starts its event window at. (A watch from
    // exactly the restart revision is servable, in Kubernetes too.)
    let cm = api.create(&PostParams::default(), &configmap("old-5", &[], &[("v", "old")])).await.unwrap();
    before.insert(cm.name_any(), (cm.metadata.uid.clone().unwrap(), cm.resource_version().unwrap()));
    let last_rv_before: u64 = cm.resource_version().unwrap().parse().unwrap();
    drop(api);
    srv.shutdown().await.unwrap();

    let srv = start(dir.path()).await;
    // The kubeconfig is rewritten with the new port; rebuild the client from it.
    let kubeconfig = std::fs::read_to_string(&srv.kubeconfig).unwrap();
    assert!(kubeconfig.contains(&format!("127.0.0.1:{}/clusters/root", srv.addr.port())), "kubeconfig names the new port:\n{kubeconfig}");
    let api: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");

    // Everything written before the restart is still there, unchanged.
    for (name, (uid, rv)) in &before {
        let cm = api.get(name).await.unwrap_or_else(|e| panic!("{name} survives the restart: {e}"));
        assert_eq!((cm.metadata.uid.as_ref().unwrap(), &cm.resource_version().unwrap()), (uid, rv), "{name} is unchanged");
    }
    let mut after = Vec::new();
    for i in 0..3 {
        let cm = api.create(&PostParams::default(), &configmap(&format!("new-{i}"), &[], &[("v", "new")])).await.unwrap();
        let rv: u64 = cm.resource_version().unwrap().parse().unwrap();
        assert!(rv > last_rv_before, "revisions keep growing across a restart: {rv} <= {last_rv_before}");
        after.push(cm.name_any());
    }

    // A raw watch from the pre-restart revision: 410 Expired as an ERROR event.
    let mut stream = api.watch(&WatchParams::default(), &old_rv).await.unwrap().boxed();
    let ev = tokio::time::timeout(DEADLINE, stream.next()).await.expect("an event arrives").expect("the stream has an event");
    match ev {
        Ok(WatchEvent::Error(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"), "{s:?}");
        }
        other => panic!("watch from the pre-restart resourceVersion {old_rv}: expected ERROR 410 Expired, got {other:?}"),
    }
    drop(stream);

    // kube-runtime's watcher against the new server converges on the full set.
    let (store, errors, task) = spawn_reflector(api.clone(), watcher::Config::default());
    let snap = wait_converged("a watcher on the restarted server sees everything", &store, &api, &errors).await;
    let mut want: Vec<String> = before.keys().cloned().chain(after).collect();
    want.sort();
    assert_eq!(snap.keys().cloned().collect::<Vec<_>>(), want);
    // And it follows live changes after its relist.
    api.delete("old-0", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &configmap("new-3", &[], &[("v", "new")])).await.unwrap();
    let snap = wait_converged("the watcher follows writes after the restart", &store, &api, &errors).await;
    assert!(!snap.contains_key("old-0") && snap.contains_key("new-3"));

    task.abort();
    srv.shutdown().await.unwrap();
}

/// A kube-runtime watcher that was running when the server restarted (same port) is
/// cut off, resumes from its last revision, gets 410 Expired from the new server's empty
/// event window, relists, and converges — without the caller doing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_watcher_survives_a_restart_on_the_same_port_by_relisting() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let addr = srv.addr;
    let api: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    for i in 0..3 {
        api.create(&PostParams::default(), &configmap(&format!("a-{i}"), &[], &[("v", "1")])).await.unwrap();
    }
    let (store, errors, task) = spawn_reflector(api.clone(), watcher::Config::default());
    wait_converged("the watcher is in sync before the restart", &store, &api, &errors).await;
    api.create(&PostParams::default(), &configmap("a-3", &[], &[("v", "1")])).await.unwrap();
    wait_converged("the watcher saw a-3", &store, &api, &errors).await;
    // A write outside the watched namespace moves the store revision past the watcher's
    // resume point, so the restarted server (whose window starts at the current
    // revision) must answer the resume with 410 Expired, forcing a relist.
    let others: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "kube-system");
    others.create(&PostParams::default(), &configmap("elsewhere", &[], &[])).await.unwrap();
    srv.shutdown().await.unwrap();

    let srv = controlplane::server::start(controlplane::server::ServerConfig::control_plane(dir.path(), addr), prometheus::Registry::new())
        .await
        .expect("restart on the same address");
    let api2: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    api2.delete("a-0", &DeleteParams::default()).await.unwrap();
    api2.create(&PostParams::default(), &configmap("b-0", &[], &[("v", "2")])).await.unwrap();
    api2.patch("a-1", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();

    // The old client (same URL) keeps working, and its watcher catches up.
    wait_converged("the pre-restart watcher catches up with the restarted server", &store, &api2, &errors).await;
    wait_converged("the pre-restart watcher catches up (old client)", &store, &api, &errors).await;
    let seen = errors.lock().unwrap().clone();
    assert!(
        seen.iter().any(|e| e.contains("Expired")),
        "the watcher's resume from its pre-restart revision must have been answered 410 Expired (that is what makes it relist); errors seen: {seen:?}"
    );
    task.abort();
    srv.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------
// 6. workspaces
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_isolates_objects_and_wildcard_lists_across_workspaces() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let root = root_client(&srv).await;
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("tenancy.flotilla.io", "v1alpha1", "Workspace"), "workspaces");
    let workspaces: Api<DynamicObject> = Api::all_with(root.clone(), &ar);

    let ws: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "tenancy.flotilla.io/v1alpha1", "kind": "Workspace", "metadata": {"name": "team-a"}}))
            .unwrap();
    workspaces.create(&PostParams::default(), &ws).await.unwrap();
    let ready = wait_until("workspace team-a is Ready", DEADLINE, || async {
        let w = workspaces.get("team-a").await.map_err(|e| e.to_string())?;
        match w.data.pointer("/status/phase").and_then(Value::as_str) {
            Some("Ready") => Ok(w),
            _ => Err(format!("status {:?}", w.data.get("status"))),
        }
    })
    .await;
    assert_eq!(ready.data.pointer("/status/url").and_then(Value::as_str), Some("/clusters/team-a"));

    let team = workspace_client(&srv, "team-a").await;
    let team_cms: Api<ConfigMap> = Api::namespaced(team.clone(), "default");
    let root_cms: Api<ConfigMap> = Api::namespaced(root.clone(), "default");
    team_cms.create(&PostParams::default(), &configmap("team-cm", &[("owner", "team-a")], &[("v", "t")])).await.unwrap();
    root_cms.create(&PostParams::default(), &configmap("root-cm", &[("owner", "root")], &[("v", "r")])).await.unwrap();

    // Isolation both ways.
    let hidden = api_status(root_cms.get("team-cm").await, "team-a's ConfigMap seen from root");
    assert_eq!((hidden.code, hidden.reason.as_str()), (404, "NotFound"));
    assert!(team_cms.get_opt("root-cm").await.unwrap().is_none(), "root's ConfigMap must not be visible in team-a");
    assert_eq!(sorted_names(root_cms.list(&ListParams::default()).await.unwrap()), ["root-cm"]);
    assert_eq!(sorted_names(team_cms.list(&ListParams::default()).await.unwrap()), ["team-cm"]);
    // The same name may exist in both workspaces independently.
    team_cms.create(&PostParams::default(), &configmap("root-cm", &[], &[("v", "shadow")])).await.unwrap();
    assert_eq!(data_of(&root_cms.get("root-cm").await.unwrap(), "v").as_deref(), Some("r"));

    // The wildcard view lists across workspaces and says where each object lives.
    let wildcard = workspace_client(&srv, "*").await;
    let all: Api<ConfigMap> = Api::all(wildcard);
    let items = all.list(&ListParams::default()).await.unwrap().items;
    let mut seen: Vec<(String, String)> = items
        .iter()
        .map(|c| {
            let ws = c
                .annotations()
                .get("kcp.io/cluster")
                .cloned()
                .unwrap_or_else(|| panic!("{} lacks the kcp.io/cluster annotation: {:?}", c.name_any(), c.metadata));
            (ws, c.name_any())
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [("root".to_string(), "root-cm".to_string()), ("team-a".into(), "root-cm".into()), ("team-a".into(), "team-cm".into())]
    );
    let selected = all.list(&ListParams::default().labels("owner=team-a")).await.unwrap().items;
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].annotations().get("kcp.io/cluster").map(String::as_str), Some("team-a"));
    // The annotation is presentation only: it is not stored on the object.
    assert!(!team_cms.get("team-cm").await.unwrap().annotations().contains_key("kcp.io/cluster"));

    // A wildcard watch event says where the object lives too, and carries managedFields
    // unless the client asked to go without them (Flotilla's controllers do).
    let slim_client = |workspace: &'static str| {
        let srv = &srv;
        async move {
            let mut cfg = support::root_config(srv).await;
            cfg.cluster_url = format!("https://127.0.0.1:{}/clusters/{workspace}", srv.addr.port()).parse().unwrap();
            cfg.headers.push((placement_api::MANAGED_FIELDS_HEADER.parse().unwrap(), placement_api::MANAGED_FIELDS_OMIT.parse().unwrap()));
            kube::Client::try_from(cfg).unwrap()
        }
    };
    let slim: Api<ConfigMap> = Api::all(slim_client("*").await);
    let rv = all.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let first_event = |api: Api<ConfigMap>| {
        let rv = rv.clone();
        async move {
            let stream = api.watch(&kube::api::WatchParams::default().timeout(10), &rv).await.unwrap();
            match Box::pin(stream).next().await {
                Some(Ok(kube::api::WatchEvent::Added(cm))) => cm,
                other => panic!("expected an ADDED event, got {other:?}"),
            }
        }
    };
    // Both watches start from the list's resourceVersion, so both see the create
    // whenever they connect.
    let (full, without) = (tokio::spawn(first_event(all.clone())), tokio::spawn(first_event(slim)));
    team_cms.create(&PostParams::default(), &configmap("watched", &[], &[("v", "w")])).await.unwrap();
    let (full, without) = (full.await.unwrap(), without.await.unwrap());
    for cm in [&full, &without] {
        assert_eq!((cm.name_any().as_str(), cm.annotations().get("kcp.io/cluster").map(String::as_str)), ("watched", Some("team-a")));
        assert_eq!(data_of(cm, "v").as_deref(), Some("w"));
    }
    assert!(full.metadata.managed_fields.as_ref().is_some_and(|m| !m.is_empty()), "{:?}", full.metadata);
    assert_eq!(without.metadata.managed_fields, None, "asked to go without: {:?}", without.metadata);

    // So does the object a write or a get answers with; the fields stay stored.
    let slim_team: Api<ConfigMap> = Api::namespaced(slim_client("team-a").await, "default");
    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}, "data": {"v": "slim"}});
    let applied = slim_team.patch("watched", &PatchParams::apply("slim").force(), &Patch::Apply(&body)).await.unwrap();
    let got = slim_team.get("watched").await.unwrap();
    for cm in [&applied, &got] {
        assert_eq!(data_of(cm, "v").as_deref(), Some("slim"));
        assert_eq!(cm.metadata.managed_fields, None, "asked to go without: {:?}", cm.metadata);
    }
    let stored = team_cms.get("watched").await.unwrap().metadata.managed_fields.unwrap_or_default();
    assert_eq!(stored.iter().filter_map(|m| m.manager.as_deref()).filter(|m| *m == "slim").count(), 1, "{stored:?}");

    srv.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------
// Wire details kube-rs clients depend on.
// ---------------------------------------------------------------------------------

/// An immediate DELETE of a built-in answers `Status{status: Success, details: {name,
/// kind: <resource>, uid}}`, as kube-apiserver does for storage without
/// `ReturnDeletedObject` (genericregistry `Store.finalizeDelete`). kube-rs relies on
/// it: `Api::delete` returns `Left(obj)` for "deletion started" (finalizers pending)
/// and `Right(Status)` for "gone".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_delete_answers_success_status_not_the_deleted_object() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let created = cms.create(&PostParams::default(), &configmap("gone-now", &[], &[("v", "1")])).await.unwrap();

    let res = cms.delete("gone-now", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("gone-now").await.unwrap().is_none(), "the object is gone at once (no finalizers)");
    let returned = res.as_ref().left().map(|cm| format!("ConfigMap {} (resourceVersion {:?})", cm.name_any(), cm.resource_version()));
    srv.shutdown().await.unwrap();
    let status = res.right().unwrap_or_else(|| {
        panic!(
            "DELETE /api/v1/namespaces/default/configmaps/gone-now (no finalizers, deleted at once) answered with the \
             ConfigMap itself (kube-rs: Either::Left = \"deletion started\"); kube-apiserver answers a Status with \
             status=Success and details {{name: gone-now, kind: configmaps, uid}} (kube-rs: Either::Right = \"gone\"). \
             Got: {returned:?}"
        )
    });
    assert!(status.is_success(), "{status:?}");
    let details = status.details.expect("details name the deleted object");
    assert_eq!((details.name.as_str(), details.kind.as_str()), ("gone-now", "configmaps"));
    assert_eq!(Some(details.uid), created.metadata.uid);
}

/// `Server::shutdown` cuts open watches at once (clients resume them) instead of
/// waiting out the grace period: every real deployment has watches open, and a
/// restart must not hold the data-dir lock for seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_open_watches_at_once() {
    let dir = tempfile::tempdir().unwrap();

    // Control: with only idle keep-alive connections, shutdown is prompt.
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    cms.create(&PostParams::default(), &configmap("w", &[], &[])).await.unwrap();
    let t = Instant::now();
    srv.shutdown().await.unwrap();
    let idle_shutdown = t.elapsed();
    assert!(idle_shutdown < Duration::from_secs(1), "shutdown without watches took {idle_shutdown:?}");

    // With one open watch.
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    let mut stream = cms.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let first = tokio::time::timeout(DEADLINE, stream.next()).await.expect("the watch is live");
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))), "watch established: {first:?}");
    let t = Instant::now();
    let shutdown = tokio::spawn(srv.shutdown());
    let client_saw_end = tokio::time::timeout(Duration::from_secs(10), async {
        while stream.next().await.is_some() {}
        t.elapsed()
    })
    .await
    .ok();
    shutdown.await.unwrap().unwrap();
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "Server::shutdown with one open watch took {took:?} (without watches: {idle_shutdown:?}); the watch stream \
         ended for the client after {client_saw_end:?}. Expected the watch to be cut at once."
    );
}

/// Every `continue` page is served from the snapshot the token names (410 once that
/// revision leaves the window), as kube-apiserver does: a client that lists in pages
/// and then watches from the list's resourceVersion relies on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginated_list_pages_are_one_consistent_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::namespaced(root_client(&srv).await, "default");
    for i in 0..4 {
        cms.create(&PostParams::default(), &configmap(&format!("p-{i}"), &[], &[("v", "orig")])).await.unwrap();
    }
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(sorted_names(first.items.clone()), ["p-0", "p-1"]);
    let token = first.metadata.continue_.clone().expect("a continue token for the rest");
    let list_rv: u64 = first.metadata.resource_version.clone().unwrap().parse().unwrap();

    // Changes between the pages, all after the list's revision.
    cms.create(&PostParams::default(), &configmap("p-2a", &[], &[("v", "new")])).await.unwrap();
    cms.patch("p-2", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "changed"}}))).await.unwrap();
    cms.delete("p-3", &DeleteParams::default()).await.unwrap();

    let second = cms.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    srv.shutdown().await.unwrap();
    let page: Vec<(String, u64, Option<String>)> =
        second.items.iter().map(|c| (c.name_any(), c.resource_version().unwrap().parse().unwrap(), data_of(c, "v"))).collect();
    assert_eq!(
        second.metadata.resource_version.as_deref(),
        first.metadata.resource_version.as_deref(),
        "every page reports the first page's revision"
    );
    assert!(
        page.iter().all(|(_, rv, _)| *rv <= list_rv) && sorted_names(second.items.clone()) == ["p-2", "p-3"],
        "the second page of a list at resourceVersion {list_rv} contains {page:?} (name, resourceVersion, data.v); \
         the snapshot at {list_rv} is [p-2 (v=orig), p-3 (v=orig)], with no item newer than {list_rv}"
    );
}

/// Tasks that each patch a label of one object as fast as they can, until it is gone
/// or they are stopped: other writes for the write under test to race.
struct Writers {
    stop: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    /// `n` writers of `name`, each pausing `pause` between its writes, returned once
    /// they have written a few times.
    async fn start<K>(api: &Api<K>, name: &str, n: usize, pause: Duration) -> Self
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let (stop, written) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let tasks = (0..n)
            .map(|w| {
                let (api, name, stop, written) = (api.clone(), name.to_string(), stop.clone(), written.clone());
                tokio::spawn(async move {
                    for i in 0.. {
                        let patch = json!({"metadata": {"labels": {format!("w{w}"): i.to_string()}}});
                        if stop.load(Ordering::Relaxed) || api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_err() {
                            return;
                        }
                        written.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        wait_until("the writers to be writing", DEADLINE, || {
            let seen = written.load(Ordering::Relaxed);
            async move {
                if seen >= 3 * n {
                    Ok(())
                } else {
                    Err(format!("{seen} writes"))
                }
            }
        })
        .await;
        Self { stop, tasks }
    }

    /// Stops them (those whose object is gone have stopped already).
    async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
    }
}

/// A delete that races other writes of its object is carried out, never answered 409:
/// the server tries it again from the new state, as kube-apiserver's storage does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_racing_other_writes_is_never_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let client = root_client(&srv).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for round in 0..20 {
        let name = format!("raced-{round}");
        cms.create(&PostParams::default(), &configmap(&name, &[], &[("n", "0")])).await.unwrap();
        let writers = Writers::start(&cms, &name, 3, Duration::ZERO).await;
        let deleted = cms.delete(&name, &DeleteParams::default()).await;
        assert!(deleted.is_ok(), "round {round}: the delete was refused: {deleted:?}");
        writers.stop().await;
    }
}

/// A scale patch that races another writer of its object is carried out too: without
/// a resourceVersion it is tried again from the new state, as patches are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_patch_racing_other_writes_is_never_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let client = root_client(&srv).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("scaled", 1)).await.unwrap();
    // A writer that leaves gaps: each scale patch can get through once it retries.
    let writers = Writers::start(&deployments, "scaled", 1, Duration::from_millis(1)).await;
    for replicas in 2..22 {
        let patch = json!({"spec": {"replicas": replicas}});
        let scaled = deployments.patch_scale("scaled", &PatchParams::default(), &Patch::Merge(&patch)).await;
        assert!(scaled.is_ok(), "scaling to {replicas} was refused: {scaled:?}");
    }
    writers.stop().await;
    assert_eq!(deployments.get("scaled").await.unwrap().spec.unwrap().replicas, Some(21));
}
