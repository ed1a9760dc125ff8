//! Pods (kubernetes pkg/registry/core/pod), and the pod-spec rules that the workload
//! kinds apply to their templates.

use serde_json::{json, Value};

use super::print::{self, col, AGE, NAME};
use super::{decode_typed, set_default, Decoded, Strategy};
use crate::error::{ApiError, Cause};
use crate::objmeta;

/// core/v1 Pod (physical clusters only): Pending with its QoS class on creation, the
/// `binding` subresource, and the columns of `kubectl get pods`.
#[derive(Debug)]
pub struct Pod;

/// core/v1 Pod in a workspace: served so that kubectl can name the kind, and never
/// created there, since a workspace runs nothing itself; its clusters run the pods of
/// its workloads.
#[derive(Debug)]
pub struct WorkspacePod;

impl Strategy for WorkspacePod {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        Pod.decode(obj, old, status_write)
    }

    fn check_create(&self, name: &str) -> Result<(), ApiError> {
        Err(ApiError::forbidden(format!(
            "pods \"{name}\" is forbidden: a workspace runs no pods of its own; its clusters run the pods of its workloads. \
             Create a Deployment, StatefulSet or DaemonSet for pods that keep running, or a Job for pods that run to completion"
        )))
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        Pod.selectable_fields()
    }

    /// kubectl's pod columns, and with `-o wide` the cluster the pod runs on.
    fn columns(&self) -> Vec<Value> {
        let mut cols = Pod.columns();
        cols.push(print::column(&CLUSTER));
        cols
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let mut cells = Pod.cells(obj);
        cells.push(json!(crate::views::cluster_of(obj).unwrap_or("<none>")));
        cells
    }
}

const CLUSTER: print::Col = col("Cluster", "string", 1, "The cluster this pod runs on, as its workload.flotilla.io/cluster label says.");

impl Strategy for Pod {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::Pod>("Pod", obj, old, status_write, quantities_parse)
    }

    fn default(&self, obj: &mut Value) {
        if let Some(pod) = obj.get_mut("spec") {
            default_pod_spec(pod);
            set_default(pod, &["enableServiceLinks"], json!(true));
            set_default(pod, &["preemptionPolicy"], json!("PreemptLowerPriority"));
            set_default(pod, &["priority"], json!(0));
        }
        // The QoS class is fixed at creation; a status write that leaves it out keeps
        // it, as the pod status strategy backfills it.
        if obj.get("status").is_some_and(Value::is_object) {
            let qos = apimachinery::qos::pod_qos_class(obj);
            set_default(obj, &["status", "qosClass"], json!(qos));
        }
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate_containers(obj.pointer("/spec/containers"), "spec.containers")
    }

    /// As the pod strategy's PrepareForCreate: Pending, with the QoS class, which
    /// never changes after.
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Pending", "qosClass": apimachinery::qos::pod_qos_class(obj)});
    }

    /// kubectl describe node lists a node's pods with spec.nodeName and status.phase.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }

    fn has_binding(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col(
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            col("IP", "string", 1, "IP address allocated to the pod."),
            col("Node", "string", 1, "Name of the Node this pod is assigned to."),
            col("Nominated Node", "string", 1, "Name of the node that is nominated by the scheduler."),
            col("Readiness Gates", "string", 1, "All of the readiness gates of the pod."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let statuses = obj.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
        let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
        let ready = statuses.iter().filter(|c| c["ready"] == json!(true)).count();
        let restarts: i64 = statuses.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum();
        // With how long ago the last restart was, as the pod printer shows it.
        let last_restart = statuses
            .iter()
            .filter_map(|c| c.pointer("/lastState/terminated/finishedAt").and_then(Value::as_str))
            .filter_map(|t| t.parse::<jiff::Timestamp>().ok())
            .max();
        let restarts = match last_restart {
            Some(at) if restarts > 0 => {
                format!("{restarts} ({} ago)", objmeta::human_duration(jiff::Timestamp::now().as_second() - at.as_second()))
            }
            _ => restarts.to_string(),
        };
        let or_none = |v: &str| if v.is_empty() { "<none>".to_string() } else { v.to_string() };
        vec![
            print::name(obj),
            json!(format!("{ready}/{total}")),
            json!(pod_status(obj, &statuses)),
            json!(restarts),
            print::age_of(obj),
            json!(or_none(print::s(obj, "/status/podIP"))),
            json!(or_none(print::s(obj, "/spec/nodeName"))),
            json!(or_none(print::s(obj, "/status/nominatedNodeName"))),
            json!("<none>"),
        ]
    }
}

/// The STATUS column of `kubectl get pods`, as the apiserver's pod printer derives
/// it: the phase, overridden by the pod's reason, then by a waiting or terminated
/// container's reason, and `Terminating` once deletion started.
fn pod_status(pod: &Value, statuses: &[Value]) -> String {
    let mut reason = match print::s(pod, "/status/reason") {
        "" => print::s(pod, "/status/phase").to_string(),
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

/// The pod-spec defaults kube-apiserver fills, wherever a pod spec appears.
pub(super) fn default_pod_spec(pod: &mut Value) {
    set_default(pod, &["restartPolicy"], json!("Always"));
    set_default(pod, &["terminationGracePeriodSeconds"], json!(30));
    set_default(pod, &["dnsPolicy"], json!("ClusterFirst"));
    set_default(pod, &["schedulerName"], json!("default-scheduler"));
    set_default(pod, &["securityContext"], json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = pod.get_mut(list) {
            for c in cs {
                let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                // imagePullPolicy defaults to Always for :latest or untagged images.
                let tag = image.rsplit('/').next().unwrap_or_default();
                let policy = if !tag.contains(':') || tag.ends_with(":latest") { "Always" } else { "IfNotPresent" };
                set_default(c, &["imagePullPolicy"], json!(policy));
                set_default(c, &["terminationMessagePath"], json!("/dev/termination-log"));
                set_default(c, &["terminationMessagePolicy"], json!("File"));
                set_default(c, &["resources"], json!({}));
                if let Some(Value::Array(ports)) = c.get_mut("ports") {
                    for p in ports {
                        set_default(p, &["protocol"], json!("TCP"));
                    }
                }
            }
        }
    }
}

/// The containers of a pod spec: at least one, each named by a unique DNS label, with
/// an image, and resources that [`validate_resources`] accepts.
pub(super) fn validate_containers(containers: Option<&Value>, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    match containers.and_then(Value::as_array) {
        None => causes.push(Cause::new("FieldValueRequired", path, "Required value")),
        Some(cs) if cs.is_empty() => causes.push(Cause::new("FieldValueRequired", path, "Required value")),
        Some(cs) => {
            let mut seen = std::collections::HashSet::new();
            for (i, c) in cs.iter().enumerate() {
                let field = format!("{path}[{i}]");
                match c.get("name").and_then(Value::as_str) {
                    None | Some("") => causes.push(Cause::new("FieldValueRequired", &format!("{field}.name"), "Required value")),
                    Some(n) => {
                        if let Err(e) = objmeta::dns1123_label(n) {
                            causes.push(Cause::new("FieldValueInvalid", &format!("{field}.name"), format!("Invalid value: \"{n}\": {e}")));
                        }
                        if !seen.insert(n.to_string()) {
                            causes.push(Cause::new("FieldValueDuplicate", &format!("{field}.name"), format!("Duplicate value: \"{n}\"")));
                        }
                    }
                }
                if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                    causes.push(Cause::new("FieldValueRequired", &format!("{field}.image"), "Required value"));
                }
                causes.extend(validate_resources(c, &field));
            }
        }
    }
    causes
}

/// Every quantity in a pod (template)'s resources parses: Kubernetes' decoder refuses
/// a malformed quantity (400) before validation runs. The k8s-openapi type keeps it a
/// string.
pub(super) fn quantities_parse(kind: &str, decoded: Decoded) -> Result<Decoded, String> {
    let specs = [decoded.value.pointer("/spec/template/spec"), decoded.value.get("spec")];
    for spec in specs.into_iter().flatten() {
        for list in ["initContainers", "containers"] {
            for c in spec.get(list).and_then(Value::as_array).into_iter().flatten() {
                for (part, q) in container_quantities(c) {
                    let text = q.as_str().unwrap_or_default();
                    if let Err(e) = placement_api::quantity::parse(text) {
                        return Err(format!(
                            "{kind} in version \"v1\" cannot be handled as a {kind}: resources.{part}: quantity {text:?}: {e}"
                        ));
                    }
                }
            }
        }
    }
    Ok(decoded)
}

/// `(requests[cpu], "500m")`-style pairs of a container's resources.
fn container_quantities(c: &Value) -> impl Iterator<Item = (String, &Value)> {
    ["requests", "limits"].into_iter().flat_map(move |part| {
        c.pointer(&format!("/resources/{part}"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(move |(name, q)| (format!("{part}[{name}]"), q))
    })
}

/// Requests and limits are not negative, and no request exceeds its limit
/// (kubernetes pkg/apis/core/validation ValidateResourceRequirements).
fn validate_resources(c: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let parsed = |v: &Value| v.as_str().and_then(|t| placement_api::quantity::parse(t).ok());
    for (part, q) in container_quantities(c) {
        if parsed(q).is_some_and(|p| p.is_negative()) {
            let text = q.as_str().unwrap_or_default();
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("{field}.resources.{part}"),
                format!("Invalid value: \"{text}\": must be greater than or equal to 0"),
            ));
        }
    }
    let limits = c.pointer("/resources/limits").and_then(Value::as_object);
    for (name, request) in c.pointer("/resources/requests").and_then(Value::as_object).into_iter().flatten() {
        let limit = limits.and_then(|l| l.get(name));
        let (Some(r), Some(l)) = (parsed(request), limit.and_then(parsed)) else { continue };
        if r.milli_value().zip(l.milli_value()).is_some_and(|(r, l)| r > l) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("{field}.resources.requests"),
                format!(
                    "Invalid value: \"{}\": must be less than or equal to {name} limit of {}",
                    request.as_str().unwrap_or_default(),
                    limit.and_then(Value::as_str).unwrap_or_default()
                ),
            ));
        }
    }
    causes
}
