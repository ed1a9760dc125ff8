//! What a syncer's scoped token (`fst1.<synctarget>...`) may do.
//!
//! A pull-mode syncer runs next to its cluster, outside the operators' trust, so its
//! token reaches exactly what its own syncer needs and nothing else:
//! - in `root`: read its own SyncTarget (a get, or a list or watch pinned to its name
//!   with `fieldSelector=metadata.name=<target>`) and write that SyncTarget's status;
//! - through the wildcard view `/clusters/*`: list and watch WorkloadPlacements and
//!   the kinds a syncer copies ([`placement_api::synced`]), only with a label selector that pins
//!   `state.workload.flotilla.io/<target>=Sync`, so every object it can see is assigned
//!   to its cluster; and list and watch StorageClasses, which the claims it copies may
//!   name;
//! - in a workspace: read a Deployment or WorkloadPlacement that is assigned to its
//!   cluster or still carries its mark (the cluster's finalizer, or its status entry,
//!   which it must be able to clean up after an unassignment); add or remove its own
//!   finalizer on such a Deployment and nothing else; and replace its own entry of
//!   such a WorkloadPlacement's `status.clusters` and nothing else; and write its own
//!   cluster status annotation on an assigned companion, and nothing else.
//!
//! It never creates or deletes anything: [`check_write`] refuses both on the object,
//! whichever verb or content type the request used.
//!
//! Everything else is refused with 403 Forbidden, worded as kube-apiserver's RBAC
//! refusals are, plus the rule that refused it. Discovery stays open to every
//! authenticated principal, as in Kubernetes.

use std::sync::Arc;

use serde_json::Value;

use placement_api::keys::ROOT_WORKSPACE;
use placement_api::synced::Kind;

use crate::access::{Decision, ReadCheck};
use crate::api::WriteGuard;
use crate::error::ApiError;

/// The attributes of a request, as [`crate::authz`] got them.
pub type Request<'a> = crate::access::Attributes<'a>;

const WORKLOAD_GROUP: &str = placement_api::WORKLOAD_GROUP;
const SCHEDULING_GROUP: &str = placement_api::SCHEDULING_GROUP;

fn is(r: &Request<'_>, group: &str, resource: &str) -> bool {
    r.group == group && r.resource == resource
}

/// The kinds a syncer watches across workspaces.
fn assignable(r: &Request<'_>) -> bool {
    is(r, SCHEDULING_GROUP, "workloadplacements") || Kind::of_resource(r.group, r.resource).is_some()
}

/// The kinds that follow a workload, on whose objects a syncer reports its copy's
/// status.
fn companion(r: &Request<'_>) -> bool {
    Kind::of_resource(r.group, r.resource).is_some_and(|k| k.workload().is_none())
}

/// The workload kinds, on which a syncer keeps its finalizer.
fn workload(r: &Request<'_>) -> bool {
    Kind::of_resource(r.group, r.resource).is_some_and(|k| k.workload().is_some())
}

fn forbidden(target: &str, r: &Request<'_>, why: &str) -> ApiError {
    let resource = if r.group.is_empty() { r.resource.to_string() } else { format!("{}.{}", r.resource, r.group) };
    let what = match r.name {
        Some(n) => format!("{resource} \"{n}\" is forbidden"),
        None => format!("{resource} is forbidden"),
    };
    let resource = match r.subresource {
        Some(s) => format!("{}/{s}", r.resource),
        None => r.resource.to_string(),
    };
    let place = match (r.workspace, r.namespace) {
        ("*", _) => "across workspaces".to_string(),
        (ws, "") => format!("in workspace \"{ws}\""),
        (ws, ns) => format!("in the namespace \"{ns}\" of workspace \"{ws}\""),
    };
    ApiError::forbidden(format!(
        "{what}: User \"flotilla:syncer:{target}\" cannot {} resource \"{resource}\" in API group \"{}\" {place}: {why}",
        r.verb, r.group
    ))
}

/// Whether the syncer of `target` may make this request at all. Reads in a workspace
/// are checked again on the object ([`check_read`]), and updates on the change
/// ([`check_update`]).
pub fn check_request(target: &str, r: &Request<'_>) -> Result<(), ApiError> {
    let own_sync_target = is(r, WORKLOAD_GROUP, "synctargets");
    match (r.workspace, r.verb, r.subresource) {
        (ROOT_WORKSPACE, "get", None | Some("status")) if own_sync_target && r.name == Some(target) => Ok(()),
        (ROOT_WORKSPACE, "list" | "watch", None) if own_sync_target => {
            match r.fields.and_then(|f| f.single_equality("metadata.name")) {
                Some(n) if n == target => Ok(()),
                _ => Err(forbidden(target, r, &format!("a syncer lists and watches only its own SyncTarget: add fieldSelector=metadata.name={target}"))),
            }
        }
        (ROOT_WORKSPACE, "patch" | "update", Some("status")) if own_sync_target && r.name == Some(target) => Ok(()),
        (ROOT_WORKSPACE, _, _) => Err(forbidden(target, r, "a syncer may read its own SyncTarget and write its status, nothing else in root")),
        // The workspaces' StorageClasses, which the claims a syncer copies may name: a
        // class says how volumes are made, nothing of what runs.
        ("*", "list" | "watch", None) if is(r, "storage.k8s.io", "storageclasses") => Ok(()),
        ("*", "list" | "watch", None) if assignable(r) => {
            let label = placement_api::sync_state_label(target);
            match r.labels.and_then(|l| l.requires_exact_match(&label)) {
                Some(placement_api::SYNC_STATE_SYNC) => Ok(()),
                _ => Err(forbidden(
                    target,
                    r,
                    &format!("a syncer sees only what is assigned to its cluster: add labelSelector={label}={}", placement_api::SYNC_STATE_SYNC),
                )),
            }
        }
        ("*", _, _) => Err(forbidden(
            target,
            r,
            "through the wildcard view a syncer may only list and watch WorkloadPlacements and the kinds it copies",
        )),
        (_, "get", None) if workload(r) || is(r, SCHEDULING_GROUP, "workloadplacements") => Ok(()),
        (_, "patch" | "update", None) if workload(r) || companion(r) => Ok(()),
        (_, "patch" | "update", Some("status")) if is(r, SCHEDULING_GROUP, "workloadplacements") => Ok(()),
        _ => Err(forbidden(
            target,
            r,
            "in a workspace a syncer may read its workloads and WorkloadPlacements, change its own finalizer on a workload, write its own WorkloadPlacement status entry, and its own cluster status annotation on what follows a workload",
        )),
    }
}

/// The object-level rules of an allowed request: reads are held to [`check_read`],
/// and every write the resource engine would store to [`check_write`].
pub fn object_rules(target: &str, r: &Request<'_>) -> Decision {
    let target: Arc<str> = target.into();
    let owned: [String; 6] = [r.workspace, r.verb, r.group, r.version, r.resource, r.namespace].map(String::from);
    let (name, subresource) = (r.name.map(String::from), r.subresource.map(String::from));
    let attrs = Arc::new((owned, name, subresource));
    let with_request = move |f: &dyn Fn(&Request<'_>) -> Result<(), ApiError>| {
        let ([workspace, verb, group, version, resource, namespace], name, subresource) = &*attrs;
        f(&Request {
            workspace,
            verb,
            group,
            version,
            resource,
            namespace,
            name: name.as_deref(),
            subresource: subresource.as_deref(),
            labels: None,
            fields: None,
        })
    };
    let with_request = Arc::new(with_request);
    let (t, w) = (target.clone(), with_request.clone());
    Decision {
        read: Some(ReadCheck::new(move |obj| w(&|r| check_read(&t, r, obj)))),
        write: Some(WriteGuard(Arc::new(move |old, new| with_request(&|r| check_write(&target, r, old, new))))),
    }
}

/// Whether the syncer of `target` may store `new` where `old` is stored (`None`:
/// absent). A syncer never creates or deletes anything: the apply that would create
/// a missing object, or a delete, is refused here whatever path it came by.
pub fn check_write(target: &str, r: &Request<'_>, old: Option<&Value>, new: Option<&Value>) -> Result<(), ApiError> {
    match (old, new) {
        (Some(old), Some(new)) => check_update(target, r, old, new),
        (None, _) => Err(forbidden(target, &Request { verb: "create", ..*r }, "a syncer never creates objects")),
        (Some(_), None) => Err(forbidden(target, &Request { verb: "delete", ..*r }, "a syncer never deletes objects")),
    }
}

fn assigned(target: &str, obj: &Value) -> bool {
    obj.pointer("/metadata/labels").and_then(|l| l.get(placement_api::sync_state_label(target))).and_then(Value::as_str)
        == Some(placement_api::SYNC_STATE_SYNC)
}

fn has_finalizer(target: &str, obj: &Value) -> bool {
    let mine = placement_api::syncer_finalizer(target);
    crate::objmeta::finalizers(obj).contains(&mine)
}

fn has_entry(target: &str, obj: &Value) -> bool {
    obj.pointer("/status/clusters").and_then(Value::as_array).is_some_and(|c| c.iter().any(|e| e["name"] == target))
}

/// Whether the object is the syncer's business: assigned to its cluster, or still
/// carrying its mark from when it was.
fn concerns(target: &str, r: &Request<'_>, obj: &Value) -> bool {
    assigned(target, obj)
        || (workload(r) && has_finalizer(target, obj))
        || (is(r, SCHEDULING_GROUP, "workloadplacements") && has_entry(target, obj))
}

/// Whether the syncer of `target` may read `obj` (a get in a workspace).
pub fn check_read(target: &str, r: &Request<'_>, obj: &Value) -> Result<(), ApiError> {
    if r.workspace == ROOT_WORKSPACE || concerns(target, r, obj) {
        return Ok(());
    }
    Err(forbidden(target, r, "it is not assigned to the syncer's cluster"))
}

/// The object without what every write changes, and without `strip`'s parts.
fn comparable(obj: &Value, strip: impl Fn(&mut Value)) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    strip(&mut o);
    o
}

/// The path of the first field where `a` and `b` differ, as `metadata.labels.x`.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x
            .keys()
            .chain(y.keys())
            .find_map(|k| first_difference(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), &join(k))),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(if path.is_empty() { "the object".into() } else { path.to_string() }),
    }
}

/// Whether the syncer of `target` may change `old` into `new` (an update in a
/// workspace, or of its SyncTarget's status in root).
pub fn check_update(target: &str, r: &Request<'_>, old: &Value, new: &Value) -> Result<(), ApiError> {
    if r.workspace == ROOT_WORKSPACE {
        // check_request let through only its own SyncTarget's status.
        return Ok(());
    }
    if !concerns(target, r, old) {
        return Err(forbidden(target, r, "it is not assigned to the syncer's cluster"));
    }
    if workload(r) {
        let mine = placement_api::syncer_finalizer(target);
        let others = |o: &mut Value| {
            if let Some(f) = o.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
                f.retain(|x| x.as_str() != Some(mine.as_str()));
                if f.is_empty() {
                    o["metadata"].as_object_mut().map(|m| m.remove("finalizers"));
                }
            }
        };
        if let Some(path) = first_difference(&comparable(old, others), &comparable(new, others), "") {
            return Err(forbidden(target, r, &format!("a syncer may change only its own finalizer {mine} on a workload, not {path}")));
        }
        return Ok(());
    }
    if companion(r) {
        let mine = placement_api::cluster_status_annotation(target);
        let others = |o: &mut Value| {
            if let Some(a) = o.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
                a.remove(&mine);
                if a.is_empty() {
                    o["metadata"].as_object_mut().map(|m| m.remove("annotations"));
                }
            }
        };
        if let Some(path) = first_difference(&comparable(old, others), &comparable(new, others), "") {
            return Err(forbidden(target, r, &format!("a syncer may change only its own annotation {mine} here, not {path}")));
        }
        return Ok(());
    }
    // Without this cluster's entry, and with an emptied list or status the same as none.
    let other_entries = |o: &mut Value| {
        let Some(status) = o.get_mut("status").and_then(Value::as_object_mut) else { return };
        if let Some(c) = status.get_mut("clusters").and_then(Value::as_array_mut) {
            c.retain(|e| e["name"] != target);
            if c.is_empty() {
                status.remove("clusters");
            }
        }
        if status.is_empty() {
            o.as_object_mut().map(|m| m.remove("status"));
        }
    };
    if let Some(path) = first_difference(&comparable(old, other_entries), &comparable(new, other_entries), "") {
        return Err(forbidden(
            target,
            r,
            &format!("a syncer may change only its own entry (name: {target}) of status.clusters, not {path}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{FieldSelector, LabelSelector};
    use serde_json::json;

    fn req<'a>(workspace: &'a str, verb: &'a str, group: &'a str, resource: &'a str) -> Request<'a> {
        Request {
            workspace,
            verb,
            group,
            version: "v1",
            resource,
            namespace: "",
            name: None,
            subresource: None,
            labels: None,
            fields: None,
        }
    }

    #[test]
    fn root_holds_only_its_own_synctarget() {
        let st = |verb, name, sub| Request { name, subresource: sub, ..req("root", verb, WORKLOAD_GROUP, "synctargets") };
        assert!(check_request("east", &st("get", Some("east"), None)).is_ok());
        assert!(check_request("east", &st("patch", Some("east"), Some("status"))).is_ok());
        assert_eq!(check_request("east", &st("get", Some("west"), None)).unwrap_err().code, 403);
        assert_eq!(check_request("east", &st("patch", Some("east"), None)).unwrap_err().code, 403, "its spec is the operators'");
        let mine = FieldSelector::parse("metadata.name=east").unwrap();
        let theirs = FieldSelector::parse("metadata.name=west").unwrap();
        assert!(check_request("east", &Request { fields: Some(&mine), ..st("watch", None, None) }).is_ok());
        assert_eq!(check_request("east", &Request { fields: Some(&theirs), ..st("watch", None, None) }).unwrap_err().code, 403);
        assert_eq!(check_request("east", &st("list", None, None)).unwrap_err().code, 403);
        let e = check_request("east", &req("root", "list", "", "secrets")).unwrap_err();
        assert_eq!(e.code, 403);
        assert!(
            e.message.starts_with("secrets is forbidden: User \"flotilla:syncer:east\" cannot list resource \"secrets\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn across_workspaces_it_sees_only_its_assignments() {
        let sync = LabelSelector::parse("state.workload.flotilla.io/east=Sync").unwrap();
        let narrower = LabelSelector::parse("app=web,state.workload.flotilla.io/east in (Sync)").unwrap();
        let other = LabelSelector::parse("state.workload.flotilla.io/west=Sync").unwrap();
        let any = LabelSelector::parse("state.workload.flotilla.io/east").unwrap();
        let kinds = [
            ("apps", "deployments"),
            ("", "secrets"),
            ("", "configmaps"),
            (SCHEDULING_GROUP, "workloadplacements"),
            ("", "services"),
            ("networking.k8s.io", "ingresses"),
            ("autoscaling", "horizontalpodautoscalers"),
        ];
        for resource in kinds {
            let r = req("*", "watch", resource.0, resource.1);
            assert!(check_request("east", &Request { labels: Some(&sync), ..r }).is_ok());
            assert!(check_request("east", &Request { labels: Some(&narrower), ..r }).is_ok());
            for bad in [Some(&other), Some(&any), None] {
                assert_eq!(check_request("east", &Request { labels: bad, ..r }).unwrap_err().code, 403, "{resource:?} {bad:?}");
            }
        }
        let pods = Request { labels: Some(&sync), ..req("*", "list", "", "pods") };
        assert_eq!(check_request("east", &pods).unwrap_err().code, 403);
        assert_eq!(
            check_request("east", &Request { labels: Some(&sync), ..req("*", "delete", "apps", "deployments") }).unwrap_err().code,
            403
        );
    }

    #[test]
    fn in_a_workspace_it_touches_only_its_mark() {
        let d = |labels: Value, finalizers: Value| json!({"metadata": {"name": "web", "resourceVersion": "5", "labels": labels, "finalizers": finalizers}, "spec": {"replicas": 3}});
        let r = req("demo", "patch", "apps", "deployments");
        assert!(check_request("east", &r).is_ok());
        assert_eq!(check_request("east", &req("demo", "create", "apps", "deployments")).unwrap_err().code, 403);
        assert_eq!(check_request("east", &req("demo", "delete", "apps", "deployments")).unwrap_err().code, 403);
        assert_eq!(check_request("east", &req("demo", "get", "", "secrets")).unwrap_err().code, 403);
        let assigned = d(json!({"state.workload.flotilla.io/east": "Sync"}), json!(["other"]));
        let mut with_mine = assigned.clone();
        with_mine["metadata"]["finalizers"] = json!(["other", "workload.flotilla.io/syncer-east"]);
        with_mine["metadata"]["resourceVersion"] = json!("6");
        assert!(check_update("east", &r, &assigned, &with_mine).is_ok());
        assert!(check_update("east", &r, &with_mine, &assigned).is_ok(), "and take it away");
        let mut scaled = with_mine.clone();
        scaled["spec"]["replicas"] = json!(9);
        assert_eq!(check_update("east", &r, &with_mine, &scaled).unwrap_err().code, 403);
        let mut theirs = assigned.clone();
        theirs["metadata"]["finalizers"] = json!([]);
        assert_eq!(check_update("east", &r, &assigned, &theirs).unwrap_err().code, 403, "another finalizer is not its own");
        // Unassigned but still carrying its finalizer: it may read it and release it.
        let left = d(json!({}), json!(["workload.flotilla.io/syncer-east"]));
        let get = req("demo", "get", "apps", "deployments");
        assert!(check_read("east", &get, &left).is_ok());
        assert!(check_update("east", &r, &left, &d(json!({}), json!([]))).is_ok());
        let unrelated = d(json!({"state.workload.flotilla.io/west": "Sync"}), json!([]));
        assert_eq!(check_read("east", &get, &unrelated).unwrap_err().code, 403);
        // A patch that would create (server-side apply of a missing name), or a delete,
        // is refused on the object whatever the request looked like.
        let e = check_write("east", &r, None, Some(&assigned)).unwrap_err();
        assert_eq!(e.code, 403);
        assert!(e.message.contains("cannot create resource"), "{}", e.message);
        assert_eq!(check_write("east", &r, Some(&assigned), None).unwrap_err().code, 403);
        assert!(check_write("east", &r, Some(&assigned), Some(&with_mine)).is_ok());
    }

    #[test]
    fn it_writes_only_its_own_status_entry() {
        let r = Request { subresource: Some("status"), ..req("demo", "update", SCHEDULING_GROUP, "workloadplacements") };
        let wp = |east: i64, west: i64, summary: &str| {
            json!({"metadata": {"name": "web", "labels": {"state.workload.flotilla.io/east": "Sync"}},
                   "status": {"summary": summary, "clusters": [{"name": "east", "readyReplicas": east}, {"name": "west", "readyReplicas": west}]}})
        };
        assert!(check_update("east", &r, &wp(0, 1, "s"), &wp(2, 1, "s")).is_ok());
        assert_eq!(check_update("east", &r, &wp(0, 1, "s"), &wp(0, 5, "s")).unwrap_err().code, 403, "west's entry");
        let e = check_update("east", &r, &wp(0, 1, "s"), &wp(0, 1, "lies")).unwrap_err();
        assert!(e.message.ends_with("not status.summary"), "the derived fields: {}", e.message);
        let mut gone = wp(0, 1, "s");
        gone["status"]["clusters"].as_array_mut().unwrap().remove(0);
        assert!(check_update("east", &r, &wp(0, 1, "s"), &gone).is_ok(), "removing its own entry");
        let bare = json!({"metadata": {"name": "web", "labels": {"state.workload.flotilla.io/east": "Sync"}}});
        let first = json!({"metadata": bare["metadata"], "status": {"clusters": [{"name": "east", "readyReplicas": 0}]}});
        assert!(check_update("east", &r, &bare, &first).is_ok(), "the first entry of a status that was not there");
    }

    #[test]
    fn on_a_companion_it_writes_only_its_own_status_annotation() {
        let r = req("demo", "patch", "", "services");
        assert!(check_request("east", &r).is_ok());
        assert_eq!(check_request("east", &req("demo", "patch", "", "pods")).unwrap_err().code, 403);
        let svc = |annotations: Value, selector: &str| {
            json!({"metadata": {"name": "web", "labels": {"state.workload.flotilla.io/east": "Sync"}, "annotations": annotations},
                   "spec": {"selector": {"app": selector}}})
        };
        let before = svc(json!({"team": "a"}), "web");
        let reported = svc(json!({"team": "a", "clusterstatus.workload.flotilla.io/east": "{}"}), "web");
        assert!(check_update("east", &r, &before, &reported).is_ok());
        let theirs = svc(json!({"team": "a", "clusterstatus.workload.flotilla.io/west": "{}"}), "web");
        assert_eq!(check_update("east", &r, &before, &theirs).unwrap_err().code, 403, "west's annotation");
        let e = check_update("east", &r, &before, &svc(json!({"team": "a"}), "evil")).unwrap_err();
        assert!(e.message.ends_with("not spec.selector.app"), "{}", e.message);
        let bare = json!({"metadata": {"name": "web", "labels": {"state.workload.flotilla.io/east": "Sync"}}});
        let first = json!({"metadata": {"name": "web", "labels": bare["metadata"]["labels"], "annotations": {"clusterstatus.workload.flotilla.io/east": "{}"}}});
        assert!(check_update("east", &r, &bare, &first).is_ok(), "the first annotation of an object that had none");
        let unassigned = json!({"metadata": {"name": "web"}});
        assert_eq!(check_update("east", &r, &unassigned, &unassigned).unwrap_err().code, 403);
    }
}
