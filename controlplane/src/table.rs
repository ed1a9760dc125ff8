//! `meta.k8s.io/v1` Table responses: what `kubectl get` prints.
//!
//! Built-in kinds get the columns kube-apiserver's printers give them; custom
//! resources get Name, their `additionalPrinterColumns`, and Age; anything else gets
//! Name and Created At, the apiserver's default table.

use std::borrow::Borrow;

use serde_json::{json, Value};

use crate::api::Scope;
use crate::kinds::Builtin;
use crate::objmeta::{age, meta_str};
use crate::registry::Behavior;

/// One column definition.
struct Col {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    priority: i64,
    description: &'static str,
}

const fn col(name: &'static str, type_: &'static str, priority: i64, description: &'static str) -> Col {
    Col { name, type_, format: if matches!(name.as_bytes(), b"Name") { "name" } else { "" }, priority, description }
}

const NAME: Col = col("Name", "string", 0, "Name must be unique within a namespace.");
const AGE: Col = col("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.");

fn builtin_columns(b: Builtin) -> Vec<Col> {
    match b {
        Builtin::Deployment => vec![
            NAME,
            col("Ready", "string", 0, "Number of the pod with ready state"),
            col("Up-to-date", "string", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            col("Available", "string", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            col("Containers", "string", 1, "Names of each container in the template."),
            col("Images", "string", 1, "Images referenced by each container in the template."),
            col("Selector", "string", 1, "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
        ],
        Builtin::Namespace => vec![NAME, col("Status", "string", 0, "The status of the namespace"), AGE],
        Builtin::ConfigMap => vec![NAME, col("Data", "string", 0, "Number of data entries"), AGE],
        Builtin::Secret => vec![NAME, col("Type", "string", 0, "The type of the secret"), col("Data", "string", 0, "Number of data entries"), AGE],
        Builtin::ServiceAccount => vec![NAME, col("Secrets", "string", 0, "Number of secrets"), AGE],
        Builtin::Event | Builtin::EventV1 => vec![
            col("Last Seen", "string", 0, "Time when last event occurred"),
            col("Type", "string", 0, "Type of this event (Normal, Warning)"),
            col("Reason", "string", 0, "Short, machine understandable string that gives the reason for this event"),
            col("Object", "string", 0, "The object this event is about"),
            col("Message", "string", 0, "A human-readable description of the status of this operation"),
            col("Source", "string", 1, "Component reporting this event"),
            col("First Seen", "string", 1, "Time when this event first occurred"),
            col("Count", "string", 1, "Number of times this event occurred"),
            col("Name", "string", 1, "Name of the event"),
        ],
        Builtin::Lease => vec![NAME, col("Holder", "string", 0, "The holder of the lease"), AGE],
        Builtin::Crd => vec![NAME, col("Created At", "date", 0, "Creation time")],
        Builtin::Pod => vec![
            NAME,
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            col("IP", "string", 1, "IP address allocated to the pod."),
            col("Node", "string", 1, "Name of the Node this pod is assigned to."),
            col("Nominated Node", "string", 1, "Name of the node that is nominated by the scheduler."),
            col("Readiness Gates", "string", 1, "All of the readiness gates of the pod."),
        ],
        Builtin::Node => vec![
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col("Version", "string", 0, "Kubelet Version reported by the node."),
            col("Internal-IP", "string", 1, "List of internal IPs."),
            col("External-IP", "string", 1, "List of external IPs."),
            col("OS-Image", "string", 1, "OS Image reported by the node."),
            col("Kernel-Version", "string", 1, "Kernel Version reported by the node."),
            col("Container-Runtime", "string", 1, "Container Runtime Version reported by the node."),
        ],
        Builtin::ClusterRole => vec![NAME, col("Created At", "date", 0, "Creation time")],
        Builtin::ClusterRoleBinding => vec![NAME, col("Role", "string", 0, "The role bound"), AGE],
        Builtin::ReplicaSet => vec![
            NAME,
            col("Desired", "integer", 0, "Number of desired pods."),
            col("Current", "integer", 0, "Number of actual replicas."),
            col("Ready", "integer", 0, "Number of ready replicas."),
            AGE,
            col("Containers", "string", 1, "Names of each container in the template."),
            col("Images", "string", 1, "Images referenced by each container in the template."),
            col("Selector", "string", 1, "Label selector for pods."),
        ],
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}
fn n(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}
fn count(v: &Value, field: &str) -> usize {
    match v.get(field) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

/// Containers, images and selector of a pod template owner, for `-o wide`.
fn template_cells(obj: &Value) -> (Value, Value, Value) {
    let containers = obj.pointer("/spec/template/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
    let join = |f: &str| containers.iter().map(|c| c[f].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().join(",");
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    (json!(join("name")), json!(join("image")), json!(selector))
}

/// The STATUS column of `kubectl get pods`, as the apiserver's pod printer derives
/// it: the phase, overridden by the pod's reason, then by a waiting or terminated
/// container's reason, and `Terminating` once deletion started.
fn pod_status(pod: &Value, statuses: &[Value]) -> String {
    let mut reason = match s(pod, "/status/reason") {
        "" => s(pod, "/status/phase").to_string(),
        r => r.to_string(),
    };
    let mut running = false;
    for c in statuses.iter().rev() {
        if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            reason = r.to_string();
        } else if let Some(t) = c.pointer("/state/terminated") {
            reason = match t.get("reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
                Some(r) => r.to_string(),
                None => format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
            };
        } else if c.pointer("/state/running").is_some() && c["ready"] == json!(true) {
            running = true;
        }
    }
    if reason == "Completed" && running {
        reason = "Running".into();
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        reason = "Terminating".into();
    }
    reason
}

fn builtin_cells(b: Builtin, obj: &Value) -> Vec<Value> {
    let name = json!(meta_str(obj, "name").unwrap_or_default());
    let created = age(meta_str(obj, "creationTimestamp"));
    match b {
        Builtin::Deployment => {
            let (names, images, selector) = template_cells(obj);
            vec![
                name,
                json!(format!("{}/{}", n(obj, "/status/readyReplicas"), n(obj, "/spec/replicas"))),
                json!(n(obj, "/status/updatedReplicas")),
                json!(n(obj, "/status/availableReplicas")),
                json!(created),
                names,
                images,
                selector,
            ]
        }
        Builtin::ReplicaSet => {
            let (names, images, selector) = template_cells(obj);
            vec![
                name,
                json!(n(obj, "/spec/replicas")),
                json!(n(obj, "/status/replicas")),
                json!(n(obj, "/status/readyReplicas")),
                json!(created),
                names,
                images,
                selector,
            ]
        }
        Builtin::Pod => {
            let statuses = obj.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
            let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
            let ready = statuses.iter().filter(|c| c["ready"] == json!(true)).count();
            let restarts: i64 = statuses.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum();
            let or_none = |v: &str| if v.is_empty() { "<none>".to_string() } else { v.to_string() };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(obj, &statuses)),
                json!(restarts.to_string()),
                json!(created),
                json!(or_none(s(obj, "/status/podIP"))),
                json!(or_none(s(obj, "/spec/nodeName"))),
                json!(or_none(s(obj, "/status/nominatedNodeName"))),
                json!("<none>"),
            ]
        }
        Builtin::Node => {
            let ready = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .map(|c| if c["status"] == "True" { "Ready" } else { "NotReady" })
                .unwrap_or("Unknown");
            let status = if obj.pointer("/spec/unschedulable") == Some(&json!(true)) {
                format!("{ready},SchedulingDisabled")
            } else {
                ready.to_string()
            };
            let roles: Vec<&str> = obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/")).collect())
                .unwrap_or_default();
            let address = |t: &str| {
                obj.pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|x| x["type"] == t))
                    .and_then(|x| x["address"].as_str())
                    .unwrap_or("<none>")
                    .to_string()
            };
            vec![
                name,
                json!(status),
                json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
                json!(created),
                json!(s(obj, "/status/nodeInfo/kubeletVersion")),
                json!(address("InternalIP")),
                json!(address("ExternalIP")),
                json!(s(obj, "/status/nodeInfo/osImage")),
                json!(s(obj, "/status/nodeInfo/kernelVersion")),
                json!(s(obj, "/status/nodeInfo/containerRuntimeVersion")),
            ]
        }
        Builtin::Namespace => vec![name, json!(s(obj, "/status/phase")), json!(created)],
        Builtin::ConfigMap => vec![name, json!(count(obj, "data") + count(obj, "binaryData")), json!(created)],
        Builtin::Secret => vec![name, json!(s(obj, "/type")), json!(count(obj, "data")), json!(created)],
        Builtin::ServiceAccount => vec![name, json!(count(obj, "secrets")), json!(created)],
        Builtin::Event | Builtin::EventV1 => {
            let last = [s(obj, "/lastTimestamp"), s(obj, "/eventTime"), s(obj, "/metadata/creationTimestamp")]
                .into_iter()
                .find(|t| !t.is_empty())
                .map(|t| age(Some(t)))
                .unwrap_or_else(|| "<unknown>".into());
            let first = match s(obj, "/firstTimestamp") {
                "" => "<unknown>".to_string(),
                t => age(Some(t)),
            };
            let kind = s(obj, "/involvedObject/kind").to_lowercase();
            let source =
                [s(obj, "/source/component"), s(obj, "/reportingComponent")].into_iter().find(|c| !c.is_empty()).unwrap_or_default();
            let count =
                obj.pointer("/count").and_then(Value::as_i64).or_else(|| obj.pointer("/series/count").and_then(Value::as_i64)).unwrap_or(1);
            vec![
                json!(last),
                json!(s(obj, "/type")),
                json!(s(obj, "/reason")),
                json!(format!("{kind}/{}", s(obj, "/involvedObject/name"))),
                json!(s(obj, "/message")),
                json!(source),
                json!(first),
                json!(count.to_string()),
                name,
            ]
        }
        Builtin::Lease => vec![name, json!(s(obj, "/spec/holderIdentity")), json!(created)],
        Builtin::ClusterRole => vec![name, json!(s(obj, "/metadata/creationTimestamp"))],
        Builtin::ClusterRoleBinding => {
            vec![name, json!(format!("{}/{}", s(obj, "/roleRef/kind"), s(obj, "/roleRef/name"))), json!(created)]
        }
        Builtin::Crd => vec![name, json!(s(obj, "/metadata/creationTimestamp"))],
    }
}

/// Builds a Table from objects (already presented for the client).
pub fn table<T: std::borrow::Borrow<Value>>(
    scope: &Scope,
    objects: &[T],
    resource_version: &str,
    continue_token: Option<&str>,
    include_object: bool,
    with_columns: bool,
) -> Value {
    let objects = objects.iter().map(Borrow::borrow);
    let (columns, rows): (Vec<Value>, Vec<Value>) = match &scope.rt.behavior {
        Behavior::Builtin(b) => {
            let cols = builtin_columns(*b).iter().map(col_json).collect();
            (cols, objects.map(|o| row(o, builtin_cells(*b, o), include_object)).collect())
        }
        Behavior::Custom(def) => {
            let mut cols = vec![col_json(&NAME)];
            for c in &def.columns {
                cols.push(
                    json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}),
                );
            }
            // apiextensions serves a default Age column only when a version declares no
            // additionalPrinterColumns (serveDefaultColumnsIfEmpty).
            if def.columns.is_empty() {
                cols.push(col_json(&AGE));
            }
            let rows = objects
                .map(|o| {
                    let mut cells = vec![json!(meta_str(o, "name").unwrap_or_default())];
                    for c in &def.columns {
                        let vals = c.path.eval(o);
                        let cell = match vals.first() {
                            None => Value::Null,
                            // Date columns display as an age, as the apiserver renders them.
                            Some(Value::String(t)) if c.type_ == "date" => json!(age(Some(t))),
                            Some(v) if vals.len() == 1 => (*v).clone(),
                            Some(_) => json!(vals
                                .iter()
                                .map(|v| v.as_str().map(String::from).unwrap_or_else(|| v.to_string()))
                                .collect::<Vec<_>>()
                                .join(",")),
                        };
                        cells.push(cell);
                    }
                    if def.columns.is_empty() {
                        cells.push(json!(age(meta_str(o, "creationTimestamp"))));
                    }
                    row(o, cells, include_object)
                })
                .collect();
            (cols, rows)
        }
    };
    let mut metadata = json!({"resourceVersion": resource_version});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "rows": rows});
    // A watch sends the column definitions with its first table only.
    if with_columns {
        t["columnDefinitions"] = Value::Array(columns);
    } else {
        t["columnDefinitions"] = json!([]);
    }
    t
}

fn col_json(c: &Col) -> Value {
    json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
}

fn row(obj: &Value, cells: Vec<Value>, include_object: bool) -> Value {
    let object = if include_object {
        obj.clone()
    } else {
        // kubectl reads namespace and labels from the row's PartialObjectMetadata.
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
    };
    json!({"cells": cells, "object": object})
}
