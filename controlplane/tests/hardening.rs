//! The control plane against hostile and careless clients, over HTTPS: who may do what
//! (the whole matrix of verbs, resources and credentials), bodies that must be refused
//! without harm, and query parameters read as kube-apiserver reads them.

mod support;

use std::time::Duration;

use serde_json::{json, Value};

use support::{root_client, start, wait_until};

const DEADLINE: Duration = Duration::from_secs(10);

/// A raw HTTPS client for one server: every request carries the given bearer token
/// (or none), so one TLS client serves every credential.
struct Http {
    client: kube::Client,
}

/// An answer: the status code and the body.
#[derive(Debug)]
struct Answer {
    code: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

impl Http {
    async fn new(srv: &controlplane::server::Server) -> Self {
        let mut cfg = support::root_config(srv).await;
        cfg.cluster_url = format!("https://127.0.0.1:{}", srv.addr.port()).parse().unwrap();
        cfg.auth_info = Default::default();
        Self { client: kube::Client::try_from(cfg).unwrap() }
    }

    async fn call(&self, token: Option<&str>, method: &str, path: &str, content_type: &str, body: Vec<u8>) -> Answer {
        let mut req = http::Request::builder().method(method).uri(path).header("content-type", content_type);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = self.client.send(req.body(kube::client::Body::from(body)).unwrap()).await.expect("the server answers");
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect_bytes().await.unwrap_or_default();
        Answer { code, body: String::from_utf8_lossy(&bytes).into_owned() }
    }

    async fn get(&self, token: &str, path: &str) -> Answer {
        self.call(Some(token), "GET", path, "application/json", Vec::new()).await
    }

    async fn send_json(&self, token: &str, method: &str, path: &str, content_type: &str, body: &Value) -> Answer {
        self.call(Some(token), method, path, content_type, serde_json::to_vec(body).unwrap()).await
    }
}

async fn create_workspace(root: &kube::Client, name: &str) -> String {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("tenancy.flotilla.io", "v1alpha1", "Workspace"), "workspaces");
    let workspaces: Api<DynamicObject> = Api::all_with(root.clone(), &ar);
    let ws = serde_json::from_value(json!({"apiVersion": "tenancy.flotilla.io/v1alpha1", "kind": "Workspace", "metadata": {"name": name}}))
        .unwrap();
    workspaces.create(&PostParams::default(), &ws).await.unwrap();
    wait_until(&format!("workspace {name} is Ready"), DEADLINE, || async {
        let w = workspaces.get(name).await.map_err(|e| e.to_string())?;
        match w.data.pointer("/status/phase").and_then(Value::as_str) {
            Some("Ready") => Ok(w.metadata.uid.clone().unwrap_or_default()),
            _ => Err(format!("status {:?}", w.data.get("status"))),
        }
    })
    .await
}

fn deployment(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "c", "image": "nginx", "envFrom": [{"secretRef": {"name": "db"}}]}]}}
        }
    })
}

/// What a credential should get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Past authorization: anything but 401 and 403.
    Allowed,
    Unauthorized,
    Forbidden,
}

fn classify(code: u16) -> Expect {
    match code {
        401 => Expect::Unauthorized,
        403 => Expect::Forbidden,
        _ => Expect::Allowed,
    }
}

/// One request of the matrix.
struct Case {
    verb: &'static str,
    method: &'static str,
    /// Relative to `/clusters/<ws>`.
    path: String,
    content_type: &'static str,
    body: Value,
}

/// Every verb on one resource: `collection` is its collection's path, `name` an object
/// that exists in the workspace, `fresh` a name that does not, `object` a valid body.
fn verbs(collection: &str, name: &str, fresh: &str, object: &Value) -> Vec<Case> {
    let one = format!("{collection}/{name}");
    // Every write changes something (a label), so none is a no-op that any
    // principal may make.
    let with_name = |n: &str| {
        let mut o = object.clone();
        o["metadata"]["name"] = json!(n);
        o["metadata"]["labels"]["matrix"] = json!("changed");
        o
    };
    let case = |verb, method, path: String, content_type, body| Case { verb, method, path, content_type, body };
    vec![
        case("get", "GET", one.clone(), "application/json", Value::Null),
        case("list", "GET", collection.to_string(), "application/json", Value::Null),
        case("watch", "GET", format!("{collection}?watch=true&timeoutSeconds=1"), "application/json", Value::Null),
        case("create", "POST", format!("{collection}?dryRun=All"), "application/json", with_name(fresh)),
        case("update", "PUT", format!("{one}?dryRun=All"), "application/json", with_name(name)),
        case("patch", "PATCH", format!("{one}?dryRun=All"), "application/merge-patch+json", json!({"metadata": {"labels": {"x": "y"}}})),
        case("apply", "PATCH", format!("{one}?fieldManager=m&force=true&dryRun=All"), "application/apply-patch+yaml", with_name(name)),
        case(
            "apply-create",
            "PATCH",
            format!("{collection}/{fresh}?fieldManager=m&dryRun=All"),
            "application/apply-patch+yaml",
            with_name(fresh),
        ),
        case(
            "status",
            "PATCH",
            format!("{one}/status?dryRun=All"),
            "application/merge-patch+json",
            json!({"status": {"clusters": [{"name": "west", "readyReplicas": 1}]}}),
        ),
        case("delete", "DELETE", format!("{one}?dryRun=All"), "application/json", Value::Null),
        case(
            "deletecollection",
            "DELETE",
            format!("{collection}?dryRun=All&fieldSelector=metadata.name%3D{name}"),
            "application/json",
            Value::Null,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_resource_and_credential_passes_one_authorization() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let root = root_client(&srv).await;
    let http = Http::new(&srv).await;
    let admin = srv.auth.admin_token().to_string();
    let team_uid = create_workspace(&root, "team-a").await;
    let gone_uid = create_workspace(&root, "gone").await;
    let team = srv.auth.workspace_token("team-a", &team_uid);
    let gone = srv.auth.workspace_token("gone", &gone_uid);
    let ws_path = |ws: &str, rest: &str| format!("/clusters/{ws}{rest}");

    // A pull-mode cluster, east, and its syncer's token.
    let st = json!({"apiVersion": "workload.flotilla.io/v1alpha1", "kind": "SyncTarget", "metadata": {"name": "east"}, "spec": {"syncMode": "Pull"}});
    let made =
        http.send_json(&admin, "POST", "/clusters/root/apis/workload.flotilla.io/v1alpha1/synctargets", "application/json", &st).await;
    assert_eq!(made.code, 201, "{made:?}");
    let syncer = srv.auth.sync_target_token("east", made.json()["metadata"]["uid"].as_str().unwrap());

    // The deleted workspace's token must die with it.
    let del = http
        .call(Some(&admin), "DELETE", "/clusters/root/apis/tenancy.flotilla.io/v1alpha1/workspaces/gone", "application/json", vec![])
        .await;
    assert!(del.code < 300, "{del:?}");
    wait_until("workspace gone is deleted", DEADLINE, || async {
        match http.get(&admin, "/clusters/root/apis/tenancy.flotilla.io/v1alpha1/workspaces/gone").await.code {
            404 => Ok(()),
            other => Err(format!("GET answers {other}")),
        }
    })
    .await;

    // Objects in team-a: a Secret, a ConfigMap, and a Deployment assigned to east.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "stringData": {"password": "hunter2"}});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}});
    let assigned = deployment("web", json!({"state.workload.flotilla.io/east": "Sync"}));
    let wp = json!({"apiVersion": "scheduling.flotilla.io/v1alpha1", "kind": "WorkloadPlacement", "metadata": {"name": "web", "labels": {"state.workload.flotilla.io/east": "Sync"}},
        "spec": {"workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "clusters": [{"name": "east", "replicas": 2}]}});
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}});
    for (collection, obj) in [
        ("/api/v1/namespaces/default/secrets", &secret),
        ("/api/v1/namespaces/default/configmaps", &cm),
        ("/apis/apps/v1/namespaces/default/deployments", &assigned),
        ("/apis/scheduling.flotilla.io/v1alpha1/namespaces/default/workloadplacements", &wp),
        ("/api/v1/namespaces", &ns),
    ] {
        let a = http.send_json(&admin, "POST", &ws_path("team-a", collection), "application/json", obj).await;
        assert_eq!(a.code, 201, "creating {collection}: {a:?}");
    }

    let resources: Vec<(&str, &str, Value)> = vec![
        ("/api/v1/namespaces/default/secrets", "db", secret.clone()),
        ("/api/v1/namespaces/default/configmaps", "cfg", cm.clone()),
        ("/apis/apps/v1/namespaces/default/deployments", "web", assigned.clone()),
        ("/apis/scheduling.flotilla.io/v1alpha1/namespaces/default/workloadplacements", "web", wp.clone()),
        ("/api/v1/namespaces", "apps", ns.clone()),
    ];
    let mut failures = Vec::new();
    let mut checked = 0;
    for (collection, name, object) in &resources {
        for case in verbs(collection, name, "evil", object) {
            for (who, token, ws, want) in [
                ("admin", Some(admin.as_str()), "team-a", Expect::Allowed),
                ("workspace token", Some(team.as_str()), "team-a", Expect::Allowed),
                ("workspace token in another workspace", Some(team.as_str()), "gone", Expect::Forbidden),
                ("workspace token in root", Some(team.as_str()), "root", Expect::Forbidden),
                ("no token", None, "team-a", Expect::Unauthorized),
                ("a deleted workspace's token", Some(gone.as_str()), "gone", Expect::Unauthorized),
                ("a deleted workspace's token elsewhere", Some(gone.as_str()), "team-a", Expect::Unauthorized),
                ("syncer token", Some(syncer.as_str()), "team-a", syncer_expects(collection, case.verb)),
            ] {
                let body = if case.body.is_null() { Vec::new() } else { serde_json::to_vec(&case.body).unwrap() };
                let a = http.call(token, case.method, &ws_path(ws, &case.path), case.content_type, body).await;
                checked += 1;
                if classify(a.code) != want {
                    failures.push(format!("{who}: {} {} → {} (want {want:?}): {}", case.verb, ws_path(ws, &case.path), a.code, a.body));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} requests were decided wrongly:\n{}", failures.len(), failures.join("\n"));

    // The hole this closes: a syncer's apply of a new name created a Deployment, whose
    // Secret the references controller then exposed to it. Nothing was created.
    let evil = ws_path("team-a", "/apis/apps/v1/namespaces/default/deployments/evil?fieldManager=m");
    let a = http
        .call(Some(&syncer), "PATCH", &evil, "application/apply-patch+yaml", serde_json::to_vec(&deployment("evil", json!({}))).unwrap())
        .await;
    assert_eq!(a.code, 403, "{a:?}");
    assert!(a.body.contains("a syncer never creates objects"), "{a:?}");
    assert_eq!(http.get(&admin, &ws_path("team-a", "/apis/apps/v1/namespaces/default/deployments/evil")).await.code, 404);

    // Through the wildcard view the syncer sees what is assigned to it, and only that.
    let pinned = "/clusters/*/apis/apps/v1/deployments?labelSelector=state.workload.flotilla.io%2Feast%3DSync";
    let listed = http.get(&syncer, pinned).await;
    assert_eq!(listed.code, 200, "{listed:?}");
    assert_eq!(listed.json()["items"].as_array().map(Vec::len), Some(1), "{listed:?}");
    assert_eq!(http.get(&syncer, "/clusters/*/api/v1/secrets").await.code, 403);
    // Its own SyncTarget, and not another's.
    assert_eq!(http.get(&syncer, "/clusters/root/apis/workload.flotilla.io/v1alpha1/synctargets/east").await.code, 200);
    assert_eq!(http.get(&syncer, "/clusters/root/apis/workload.flotilla.io/v1alpha1/synctargets/west").await.code, 403);
    // Minting tokens is the admin's alone.
    for token in [&team, &syncer] {
        let path = "/clusters/root/apis/tenancy.flotilla.io/v1alpha1/workspaces/team-a/token";
        assert_eq!(http.call(Some(token), "POST", path, "application/json", vec![]).await.code, 403);
    }
}

/// What a syncer's token may do in a workspace: read its Deployments and
/// WorkloadPlacements, change its finalizer, write its own status entry. Never create
/// or delete, never a Secret, ConfigMap or Namespace directly.
fn syncer_expects(collection: &str, verb: &str) -> Expect {
    let deployments = collection.ends_with("/deployments");
    let wps = collection.ends_with("/workloadplacements");
    match verb {
        "get" if deployments || wps => Expect::Allowed,
        // Patches and updates pass the request check and meet the object check, which
        // refuses these changes (a label, a whole new spec) with 403 as well.
        _ => Expect::Forbidden,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_admin_or_a_metrics_token() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let root = root_client(&srv).await;
    let http = Http::new(&srv).await;
    let uid = create_workspace(&root, "team-a").await;
    let team = srv.auth.workspace_token("team-a", &uid);
    let admin = srv.auth.admin_token().to_string();
    assert_eq!(http.call(None, "GET", "/metrics", "text/plain", vec![]).await.code, 401);
    assert_eq!(http.get(&team, "/clusters/team-a/metrics").await.code, 403);
    let minted = http.call(Some(&admin), "POST", "/metrics/token", "application/json", vec![]).await;
    assert_eq!(minted.code, 201, "{minted:?}");
    let metrics = minted.json()["status"]["token"].as_str().unwrap().to_string();
    let scraped = http.get(&metrics, "/metrics").await;
    assert_eq!(scraped.code, 200, "{scraped:?}");
    assert!(
        scraped.body.contains("flotilla_apiserver_"),
        "the scrape has the server's metrics: {}",
        &scraped.body[..200.min(scraped.body.len())]
    );
    assert_eq!(http.get(&admin, "/metrics").await.code, 200);
    // The metrics token reads nothing else, and mints nothing.
    assert_eq!(http.get(&metrics, "/api/v1/namespaces/default/secrets").await.code, 403);
    assert_eq!(http.get(&metrics, "/api").await.code, 403);
    assert_eq!(http.call(Some(&metrics), "POST", "/metrics/token", "application/json", vec![]).await.code, 403);
    // Health stays open, as on kube-apiserver.
    assert_eq!(http.call(None, "GET", "/readyz", "text/plain", vec![]).await.code, 200);
}

/// The admin mints a workspace's token on `workspaces/<name>/token` in `root`, and the
/// token works in that workspace; the route exists nowhere else, and mints nothing for
/// an object that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_minted_only_on_their_routes_in_root() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let root = root_client(&srv).await;
    let http = Http::new(&srv).await;
    create_workspace(&root, "team-a").await;
    let admin = srv.auth.admin_token().to_string();
    let post = |path: String| {
        let (http, admin) = (&http, &admin);
        async move { http.call(Some(admin), "POST", &path, "application/json", vec![]).await }
    };
    let minted = post("/clusters/root/apis/tenancy.flotilla.io/v1alpha1/workspaces/team-a/token".into()).await;
    assert_eq!(minted.code, 201, "{minted:?}");
    assert_eq!(minted.json()["kind"], "WorkspaceToken", "{minted:?}");
    let token = minted.json()["status"]["token"].as_str().unwrap().to_string();
    assert_eq!(http.get(&token, "/clusters/team-a/api/v1/namespaces/default/configmaps").await.code, 200);
    assert_eq!(http.get(&token, "/clusters/root/api/v1/namespaces/default/configmaps").await.code, 403);
    let refused = [
        // No such workspace, and no such SyncTarget.
        ("/clusters/root/apis/tenancy.flotilla.io/v1alpha1/workspaces/team-b/token", 404),
        ("/clusters/root/apis/workload.flotilla.io/v1alpha1/synctargets/east/token", 404),
        // A version that is not served, a namespace, another workspace.
        ("/clusters/root/apis/tenancy.flotilla.io/v9/workspaces/team-a/token", 404),
        ("/clusters/root/apis/tenancy.flotilla.io/v1alpha1/namespaces/default/workspaces/team-a/token", 404),
        ("/clusters/team-a/apis/tenancy.flotilla.io/v1alpha1/workspaces/team-a/token", 404),
        // Another resource's token subresource.
        ("/clusters/root/api/v1/namespaces/default/configmaps/x/token", 404),
    ];
    for (path, code) in refused {
        let a = post(path.to_string()).await;
        assert_eq!(a.code, code, "POST {path}: {a:?}");
        assert!(!a.body.contains("\"token\""), "POST {path} minted a token: {a:?}");
    }
    let get = http.get(&admin, "/clusters/root/apis/tenancy.flotilla.io/v1alpha1/workspaces/team-a/token").await;
    assert_eq!(get.code, 405, "{get:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_and_its_files_are_private_and_an_open_one_is_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let srv = start(&dir).await;
        let http = Http::new(&srv).await;
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let admin = srv.auth.admin_token().to_string();
        assert_eq!(http.send_json(&admin, "POST", "/api/v1/namespaces/default/configmaps", "application/json", &cm).await.code, 201);
        assert_eq!(mode(&dir), 0o700, "the data dir");
        let mut exposed = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_file() && mode(&p) & 0o077 != 0 {
                exposed.push(format!("{} {:o}", p.display(), mode(&p)));
            }
        }
        assert!(exposed.is_empty(), "files others may read: {exposed:?}");
        assert!(dir.join("store.db-wal").exists(), "the WAL was checked too");
        srv.shutdown().await.unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("store.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let srv = start(&dir).await;
    assert_eq!((mode(&dir), mode(&dir.join("store.db"))), (0o700, 0o600), "an open data dir is tightened on start");
    srv.shutdown().await.unwrap();
}

/// One request that must be refused, and how.
struct Refusal {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    code: u16,
    /// A piece of the Status message.
    says: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_refused_as_kubernetes_refuses_them_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let http = Http::new(&srv).await;
    let admin = srv.auth.admin_token().to_string();
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let cms = "/api/v1/namespaces/default/configmaps";
    let made = http.send_json(&admin, "POST", deployments, "application/json", &deployment("web", json!({"app": "web"}))).await;
    assert_eq!(made.code, 201, "{made:?}");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}});
    assert_eq!(http.send_json(&admin, "POST", cms, "application/json", &cm).await.code, 201);
    let rv_before = http.get(&admin, &format!("{cms}/cfg")).await.json()["metadata"]["resourceVersion"].clone();

    let j = |v: Value| serde_json::to_vec(&v).unwrap();
    let with_cpu = |name: &str, cpu: &str| {
        let mut d = deployment(name, json!({}));
        d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
        j(d)
    };
    let labels: serde_json::Map<String, Value> = (0..100_000).map(|i| (format!("l{i}"), json!("v"))).collect();
    let labelled = j(json!({"metadata": {"name": "labelled", "labels": labels}}));
    let labelled_yaml =
        (0..100_000).fold(String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels:\n"), |mut y, i| {
            y.push_str(&format!("    l{i}: v\n"));
            y
        });
    let labelled_yaml = labelled_yaml.into_bytes();
    let r = |what, method, path: String, content_type, body, code, says| Refusal { what, method, path, content_type, body, code, says };
    let web = format!("{deployments}/web");
    let cases = vec![
        r(
            "a merge patch that is an array",
            "PATCH",
            web.clone(),
            "application/merge-patch+json",
            j(json!([1, 2])),
            400,
            "must be a JSON object",
        ),
        r(
            "a merge patch that is a string",
            "PATCH",
            web.clone(),
            "application/merge-patch+json",
            j(json!("x")),
            400,
            "must be a JSON object",
        ),
        r(
            "a JSON patch that replaces the object",
            "PATCH",
            web.clone(),
            "application/json-patch+json",
            j(json!([{"op": "replace", "path": "", "value": 7}])),
            422,
            "not an object",
        ),
        r(
            "scale replicas that are a string",
            "PATCH",
            format!("{web}/scale"),
            "application/merge-patch+json",
            j(json!({"spec": {"replicas": "x"}})),
            400,
            "is not an int32",
        ),
        r(
            "scale replicas of 1e100",
            "PATCH",
            format!("{web}/scale"),
            "application/merge-patch+json",
            b"{\"spec\":{\"replicas\":1e100}}".to_vec(),
            400,
            "is not an int32",
        ),
        r(
            "dryRun=all",
            "PATCH",
            format!("{cms}/cfg?dryRun=all"),
            "application/merge-patch+json",
            j(json!({"data": {"k": "dry"}})),
            422,
            "supported values: \"All\"",
        ),
        r(
            "dryRun=Maybe on create",
            "POST",
            format!("{cms}?dryRun=Maybe"),
            "application/json",
            j(json!({"metadata": {"name": "maybe"}})),
            422,
            "Unsupported value: \"Maybe\"",
        ),
        r(
            "a 2 MiB ConfigMap",
            "POST",
            cms.to_string(),
            "application/json",
            j(json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(2 << 20)}})),
            422,
            "may not be more than 1048576 bytes",
        ),
        r(
            "a 1.5 MiB ConfigMap",
            "POST",
            cms.to_string(),
            "application/json",
            j(json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(3 << 19)}})),
            422,
            "may not be more than 1048576 bytes",
        ),
        r(
            "a JSON patch of doubling copies",
            "PATCH",
            format!("{cms}/cfg"),
            "application/json-patch+json",
            j(Value::Array(
                [json!({"op": "add", "path": "/metadata/finalizers", "value": ["x"]})]
                    .into_iter()
                    .chain((0..30).map(|_| json!({"op": "copy", "from": "/metadata", "path": "/metadata/finalizers/-"})))
                    .collect(),
            )),
            413,
            "copy operations add more than",
        ),
        r(
            "YAML block sequences nested 100,000 deep",
            "POST",
            cms.to_string(),
            "application/yaml",
            b"- ".repeat(100_000),
            400,
            "nested deeper than 128",
        ),
        r("100,000 labels", "POST", cms.to_string(), "application/json", labelled, 413, "an object may be at most 1572864 bytes"),
        // Applies over a limit are refused before server-side apply computes their fields.
        r(
            "an apply of 100,000 labels",
            "PATCH",
            format!("{cms}/cfg?fieldManager=m"),
            "application/apply-patch+yaml",
            labelled_yaml,
            413,
            "an object may be at most 1572864 bytes",
        ),
        r(
            "an apply of annotations over 256 KiB",
            "PATCH",
            format!("{cms}/cfg?fieldManager=m"),
            "application/apply-patch+yaml",
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  annotations:\n    a: {}\n", "x".repeat(300 << 10))
                .into_bytes(),
            422,
            "must have at most 262144 bytes",
        ),
        r(
            "an apply creating a Secret with 2 MiB of stringData",
            "PATCH",
            "/api/v1/namespaces/default/secrets/s?fieldManager=m".to_string(),
            "application/apply-patch+yaml",
            format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: {}\n", "x".repeat(2 << 20)).into_bytes(),
            422,
            "may not be more than 1048576 bytes",
        ),
        r(
            "a data key with a slash",
            "POST",
            cms.to_string(),
            "application/json",
            j(json!({"metadata": {"name": "slash"}, "data": {"bad/key": "v"}})),
            422,
            "a valid config key",
        ),
        r("cpu: lots", "POST", deployments.to_string(), "application/json", with_cpu("lots", "lots"), 400, "quantity \"lots\""),
        r(
            "cpu: -1",
            "POST",
            deployments.to_string(),
            "application/json",
            with_cpu("minus", "-1"),
            422,
            "must be greater than or equal to 0",
        ),
        r(
            "an apply for another kind",
            "PATCH",
            format!("{cms}/cfg?fieldManager=m"),
            "application/apply-patch+yaml",
            b"apiVersion: v1\nkind: Secret\nmetadata:\n  name: cfg\n".to_vec(),
            400,
            "Incorrect version specified in apply patch",
        ),
        r(
            "an apply for another name",
            "PATCH",
            format!("{cms}/cfg?fieldManager=m"),
            "application/apply-patch+yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n".to_vec(),
            400,
            "does not match the name on the URL",
        ),
        r(
            "an apply creating another name",
            "PATCH",
            format!("{cms}/new?fieldManager=m"),
            "application/apply-patch+yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n".to_vec(),
            400,
            "does not match the name on the URL",
        ),
        r(
            "an apply without a fieldManager",
            "PATCH",
            format!("{cms}/cfg"),
            "application/apply-patch+yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n".to_vec(),
            422,
            "fieldManager: Required value",
        ),
        r(
            "a fieldManager over 128 characters",
            "POST",
            format!("{cms}?fieldManager={}", "m".repeat(129)),
            "application/json",
            j(json!({"metadata": {"name": "long"}})),
            422,
            "fieldManager: Too long",
        ),
        r("limit=abc", "GET", format!("{cms}?limit=abc"), "application/json", vec![], 400, "limit"),
        r(
            "a list at resourceVersion=abc",
            "GET",
            format!("{cms}?resourceVersion=abc"),
            "application/json",
            vec![],
            400,
            "invalid resource version",
        ),
        r(
            "resourceVersionMatch=Sometimes",
            "GET",
            format!("{cms}?resourceVersion=1&resourceVersionMatch=Sometimes"),
            "application/json",
            vec![],
            400,
            "resourceVersionMatch",
        ),
        r(
            "a watch on an unindexed field",
            "GET",
            format!("{cms}?watch=true&fieldSelector=data.k%3Dv"),
            "application/json",
            vec![],
            400,
            "not a known field selector",
        ),
        r(
            "a YAML body nested 100,000 deep",
            "POST",
            cms.to_string(),
            "application/yaml",
            b"{a: ".repeat(100_000),
            400,
            "nested deeper than 128",
        ),
        r(
            "an apply nested 100,000 deep",
            "PATCH",
            format!("{cms}/cfg?fieldManager=m"),
            "application/apply-patch+yaml",
            b"{\"a\":".repeat(100_000),
            400,
            "nested deeper than 128",
        ),
        r("a JSON body nested 100,000 deep", "POST", cms.to_string(), "application/json", b"[".repeat(100_000), 400, "recursion limit"),
    ];
    let mut wrong = Vec::new();
    for c in &cases {
        let a = http.call(Some(&admin), c.method, &c.path, c.content_type, c.body.clone()).await;
        let status = a.json();
        let is_status = status["kind"] == "Status" && status["code"] == c.code;
        if a.code != c.code || !is_status || !status["message"].as_str().unwrap_or_default().contains(c.says) {
            wrong.push(format!(
                "{}: {} {} → {} {}",
                c.what,
                c.method,
                &c.path[..c.path.len().min(120)],
                a.code,
                &a.body[..a.body.len().min(300)]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} invalid requests were not refused as Kubernetes refuses them:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );

    // Nothing was written: the ConfigMap and the Deployment are as they were, and no
    // refused create left an object behind.
    let cfg = http.get(&admin, &format!("{cms}/cfg")).await.json();
    assert_eq!((cfg["metadata"]["resourceVersion"].clone(), cfg["data"]["k"].clone()), (rv_before, json!("v")));
    assert_eq!(http.get(&admin, &format!("{web}/scale")).await.json()["spec"]["replicas"], 2);
    let names: Vec<String> = http.get(&admin, cms).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names, ["cfg"], "refused creates left objects behind");
    let d = http.get(&admin, deployments).await.json();
    assert_eq!(d["items"].as_array().map(Vec::len), Some(1), "refused Deployments left objects behind: {d}");
    let secret = http.get(&admin, "/api/v1/namespaces/default/secrets/s").await;
    assert_eq!(secret.code, 404, "the refused apply created its Secret: {secret:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_parameters_and_patches_read_as_kube_apiserver_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path()).await;
    let http = Http::new(&srv).await;
    let admin = srv.auth.admin_token().to_string();
    let cms = "/api/v1/namespaces/default/configmaps";

    // `/version/` is `/version` (kr8s and the Python client's VersionApi call it so).
    let v = http.call(None, "GET", "/version/", "application/json", vec![]).await;
    assert_eq!((v.code, v.json()["major"].clone()), (200, json!("1")), "{v:?}");

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v1"}});
    let first = http.send_json(&admin, "POST", cms, "application/json", &cm).await;
    let rv1 = first.json()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let second =
        http.send_json(&admin, "PATCH", &format!("{cms}/cfg"), "application/merge-patch+json", &json!({"data": {"k": "v2"}})).await;
    assert_eq!(second.code, 200, "{second:?}");

    // A watch written `watch=True` (the Python client before 37) is a watch.
    let watched = http.get(&admin, &format!("{cms}?watch=True&timeoutSeconds=1")).await;
    let events: Vec<Value> = watched.body.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(
        events.iter().any(|e| e["type"] == "ADDED" && e["object"]["metadata"]["name"] == "cfg"),
        "watch=True must stream events: {watched:?}"
    );
    for off in ["false", "False", "0"] {
        let listed = http.get(&admin, &format!("{cms}?watch={off}")).await;
        assert_eq!(listed.json()["kind"], "ConfigMapList", "watch={off} is a list: {listed:?}");
    }

    // resourceVersionMatch=Exact lists the state at that revision.
    let exact = http.get(&admin, &format!("{cms}?resourceVersion={rv1}&resourceVersionMatch=Exact")).await;
    assert_eq!(exact.code, 200, "{exact:?}");
    assert_eq!(exact.json()["items"][0]["data"]["k"], "v1", "{exact:?}");
    assert_eq!(exact.json()["metadata"]["resourceVersion"], json!(rv1));
    let latest = http.get(&admin, &format!("{cms}?resourceVersion={rv1}&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(latest.json()["items"][0]["data"]["k"], "v2", "{latest:?}");

    // A forced apply written `force=True` takes the field over.
    let apply = |force: &str, value: &str| {
        let body = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  k: {value}\n");
        let path = format!("{cms}/cfg?fieldManager=other{force}");
        let http = &http;
        let admin = admin.clone();
        async move { http.call(Some(&admin), "PATCH", &path, "application/apply-patch+yaml", body.into_bytes()).await }
    };
    let conflict = apply("", "v3").await;
    assert_eq!(conflict.code, 409, "another manager owns data.k: {conflict:?}");
    let forced = apply("&force=True", "v3").await;
    assert_eq!((forced.code, forced.json()["data"]["k"].clone()), (200, json!("v3")), "{forced:?}");

    // A JSON patch `replace` of an absent key sets it, as kube-apiserver's library does;
    // one whose parent is absent is still refused.
    let json_patch = "application/json-patch+json";
    let replace = json!([{"op": "replace", "path": "/data/absent", "value": "set"}]);
    let replaced = http.send_json(&admin, "PATCH", &format!("{cms}/cfg"), json_patch, &replace).await;
    assert_eq!((replaced.code, replaced.json()["data"]["absent"].clone()), (200, json!("set")), "{replaced:?}");
    let orphan = json!([{"op": "replace", "path": "/nothing/here", "value": "x"}]);
    let orphan = http.send_json(&admin, "PATCH", &format!("{cms}/cfg"), json_patch, &orphan).await;
    assert_eq!(orphan.code, 422, "{orphan:?}");

    // Large bodies and objects are decoded and patched off the async workers, with the
    // same results as small ones.
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(300 << 10)}});
    assert_eq!(http.send_json(&admin, "POST", cms, "application/yaml", &big).await.code, 201);
    for (content_type, body) in [
        ("application/merge-patch+json", json!({"data": {"m": "merge"}})),
        ("application/strategic-merge-patch+json", json!({"data": {"s": "strategic"}})),
        ("application/json-patch+json", json!([{"op": "add", "path": "/data/j", "value": "json"}])),
    ] {
        let a = http.send_json(&admin, "PATCH", &format!("{cms}/big"), content_type, &body).await;
        assert_eq!(a.code, 200, "{content_type}: {}", &a.body[..a.body.len().min(300)]);
    }
    let applied = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  a: apply\n";
    let a = http.call(Some(&admin), "PATCH", &format!("{cms}/big?fieldManager=m"), "application/apply-patch+yaml", applied.into()).await;
    assert_eq!(a.code, 200, "{}", &a.body[..a.body.len().min(300)]);
    let data = http.get(&admin, &format!("{cms}/big")).await.json()["data"].clone();
    let keys: Vec<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["a", "j", "k", "m", "s"], "every patch of the large object applied");

    // The server is alive and well after all of it.
    assert_eq!(http.get(&admin, "/api/v1/namespaces").await.code, 200);
}
