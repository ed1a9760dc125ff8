//! The built-in kinds and their rules: how each is validated (by decoding into the
//! `k8s-openapi` type, the way kube-apiserver decodes into its Go types), defaulted,
//! shown in tables, and which field selectors it supports.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::error::Cause;
use crate::objmeta::{self, NameRule};

/// The built-in kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// core/v1 Namespace.
    Namespace,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Secret.
    Secret,
    /// core/v1 ServiceAccount.
    ServiceAccount,
    /// core/v1 Event.
    Event,
    /// events.k8s.io/v1 Event, stored as core/v1 Events.
    EventV1,
    /// apps/v1 Deployment.
    Deployment,
    /// coordination.k8s.io/v1 Lease.
    Lease,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition.
    Crd,
    /// core/v1 Node (physical clusters only).
    Node,
    /// core/v1 Pod (physical clusters only).
    Pod,
    /// apps/v1 ReplicaSet (physical clusters only).
    ReplicaSet,
    /// rbac.authorization.k8s.io/v1 ClusterRole (physical clusters only; stored, not enforced).
    ClusterRole,
    /// rbac.authorization.k8s.io/v1 ClusterRoleBinding (physical clusters only; stored, not enforced).
    ClusterRoleBinding,
}

/// The outcome of decoding a built-in object.
pub struct Decoded {
    /// The object as the typed decode understood it (unknown fields dropped).
    pub value: Value,
    /// Paths of fields the type does not have, for `fieldValidation`.
    pub unknown: Vec<String>,
}

/// Decodes into the `k8s-openapi` type and back. What the type does not know is
/// reported and dropped, exactly as kube-apiserver's decoder drops unknown fields
/// unless strict validation turns them into an error.
fn roundtrip<T: DeserializeOwned + Serialize>(kind: &str, input: &Value) -> Result<Decoded, String> {
    // The path makes the message name the field, as the apiserver's decoder does.
    let typed: T = serde_path_to_error::deserialize(input.clone())
        .map_err(|e| format!("{kind} in version \"v1\" cannot be handled as a {kind}: {}: {}", e.path(), e.inner()))?;
    let value = serde_json::to_value(&typed).map_err(|e| format!("re-encoding {kind}: {e}"))?;
    let mut unknown = Vec::new();
    diff_unknown(input, &value, "", &mut unknown);
    unknown.sort();
    Ok(Decoded { value, unknown })
}

fn diff_unknown(input: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(i), Value::Object(k)) => {
            for (key, v) in i {
                let p = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match k.get(key) {
                    Some(kv) => diff_unknown(v, kv, &p, out),
                    // A null is "unset", which the typed decode also drops.
                    None if !v.is_null() => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(i), Value::Array(k)) => {
            for (n, (iv, kv)) in i.iter().zip(k).enumerate() {
                diff_unknown(iv, kv, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

impl Builtin {
    /// The name format this kind requires.
    pub fn name_rule(self) -> NameRule {
        match self {
            Builtin::Namespace => NameRule::Label,
            Builtin::Event | Builtin::EventV1 => NameRule::PathSegment,
            _ => NameRule::Subdomain,
        }
    }

    /// Decodes and normalises an object of this kind.
    pub fn decode(self, obj: &Value) -> Result<Decoded, String> {
        use k8s_openapi::api::{apps::v1 as apps, coordination::v1 as coord, core::v1 as core, events::v1 as events};
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
        match self {
            Builtin::Namespace => roundtrip::<core::Namespace>("Namespace", obj),
            Builtin::ConfigMap => roundtrip::<core::ConfigMap>("ConfigMap", obj),
            Builtin::Secret => roundtrip::<core::Secret>("Secret", obj),
            Builtin::ServiceAccount => roundtrip::<core::ServiceAccount>("ServiceAccount", obj),
            Builtin::Event => roundtrip::<core::Event>("Event", obj),
            Builtin::EventV1 => roundtrip::<events::Event>("Event", obj),
            Builtin::Deployment => roundtrip::<apps::Deployment>("Deployment", obj).and_then(|d| quantities_parse("Deployment", d)),
            Builtin::Lease => roundtrip::<coord::Lease>("Lease", obj),
            Builtin::Crd => roundtrip::<ext::CustomResourceDefinition>("CustomResourceDefinition", obj),
            Builtin::Node => roundtrip::<core::Node>("Node", obj),
            Builtin::Pod => roundtrip::<core::Pod>("Pod", obj).and_then(|d| quantities_parse("Pod", d)),
            Builtin::ReplicaSet => roundtrip::<apps::ReplicaSet>("ReplicaSet", obj).and_then(|d| quantities_parse("ReplicaSet", d)),
            Builtin::ClusterRole => roundtrip::<k8s_openapi::api::rbac::v1::ClusterRole>("ClusterRole", obj),
            Builtin::ClusterRoleBinding => roundtrip::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>("ClusterRoleBinding", obj),
        }
    }

    /// Fills defaults on create and update, as the Kubernetes defaulters do for the
    /// fields users see in `kubectl get -o yaml`.
    pub fn default(self, obj: &mut Value) {
        match self {
            Builtin::Deployment => default_deployment(obj),
            Builtin::ReplicaSet => {
                set_default(obj, &["spec", "replicas"], json!(1));
                if let Some(pod) = obj.pointer_mut("/spec/template/spec") {
                    default_pod_spec(pod);
                }
            }
            Builtin::Pod => {
                if let Some(pod) = obj.get_mut("spec") {
                    default_pod_spec(pod);
                    set_default(pod, &["enableServiceLinks"], json!(true));
                    set_default(pod, &["preemptionPolicy"], json!("PreemptLowerPriority"));
                    set_default(pod, &["priority"], json!(0));
                }
                // The QoS class is fixed at creation; a status write that leaves it out
                // keeps it, as the pod status strategy backfills it.
                if obj.get("status").is_some_and(Value::is_object) {
                    let qos = qos_class(obj);
                    set_default(obj, &["status", "qosClass"], json!(qos));
                }
            }
            Builtin::Secret => {
                // stringData is write-only: it is merged into data and never stored.
                if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
                    use base64::Engine;
                    let data = obj.as_object_mut().map(|o| o.entry("data").or_insert_with(|| json!({})));
                    if let Some(Value::Object(data)) = data {
                        for (k, v) in sd {
                            let raw = v.as_str().unwrap_or_default();
                            data.insert(k, Value::String(base64::engine::general_purpose::STANDARD.encode(raw)));
                        }
                    }
                }
                set_default(obj, &["type"], json!("Opaque"));
            }
            Builtin::Namespace => {
                let name = objmeta::meta_str(obj, "name").unwrap_or_default().to_string();
                // The apiserver always labels namespaces with their own name.
                let labels = objmeta::meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
                }
            }
            _ => {}
        }
    }

    /// Kind-specific validation beyond decoding (422 causes).
    pub fn validate(self, obj: &Value) -> Vec<Cause> {
        match self {
            Builtin::Deployment | Builtin::ReplicaSet => validate_deployment(obj),
            Builtin::Pod => validate_containers(obj.pointer("/spec/containers"), "spec.containers"),
            Builtin::Crd => crate::crd::validate_crd(obj),
            Builtin::ConfigMap => validate_config_map(obj),
            Builtin::Secret => validate_secret(obj),
            _ => Vec::new(),
        }
    }

    /// Whether a change bumps `metadata.generation`, and whether the kind has one.
    /// Deployments bump on spec or annotation changes (kubernetes
    /// pkg/registry/apps/deployment/strategy.go); CRDs bump on spec changes.
    pub fn generation_changed(self, old: &Value, new: &Value) -> Option<bool> {
        match self {
            Builtin::Deployment => {
                Some(old.get("spec") != new.get("spec") || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations"))
            }
            Builtin::Crd | Builtin::ReplicaSet => Some(old.get("spec") != new.get("spec")),
            _ => None,
        }
    }

    /// Field selectors this kind supports beyond metadata.name and metadata.namespace.
    pub fn selectable_fields(self) -> &'static [&'static str] {
        match self {
            Builtin::Event | Builtin::EventV1 => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            Builtin::Namespace => &["status.phase"],
            Builtin::Secret => &["type"],
            // kubectl describe node lists a node's pods with spec.nodeName and status.phase.
            Builtin::Pod => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            Builtin::Node => &["spec.unschedulable"],
            Builtin::ReplicaSet => &["status.replicas"],
            _ => &[],
        }
    }
}

fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, seg) in path.iter().enumerate() {
        let Some(map) = cur.as_object_mut() else { return };
        if i == path.len() - 1 {
            if map.get(*seg).is_none_or(Value::is_null) {
                map.insert((*seg).into(), value);
            }
            return;
        }
        cur = map.entry(*seg).or_insert_with(|| json!({}));
    }
}

fn default_deployment(obj: &mut Value) {
    set_default(obj, &["spec", "replicas"], json!(1));
    set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
    set_default(obj, &["spec", "progressDeadlineSeconds"], json!(600));
    let strategy_type = obj.pointer("/spec/strategy/type").and_then(Value::as_str).unwrap_or("RollingUpdate").to_string();
    set_default(obj, &["spec", "strategy", "type"], json!(strategy_type));
    if strategy_type == "RollingUpdate" {
        set_default(obj, &["spec", "strategy", "rollingUpdate", "maxSurge"], json!("25%"));
        set_default(obj, &["spec", "strategy", "rollingUpdate", "maxUnavailable"], json!("25%"));
    }
    if let Some(pod) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(pod);
    }
}

/// The pod-spec defaults kube-apiserver fills, wherever a pod spec appears.
fn default_pod_spec(pod: &mut Value) {
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

pub(crate) use apimachinery::qos::pod_qos_class as qos_class;

fn validate_deployment(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if obj.pointer("/spec/replicas").and_then(Value::as_i64).is_some_and(|r| r < 0) {
        causes.push(Cause::new("FieldValueInvalid", "spec.replicas", "Invalid value: must be greater than or equal to 0"));
    }
    let selector = obj.pointer("/spec/selector");
    let match_labels = selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object);
    let has_exprs = selector.and_then(|s| s.get("matchExpressions")).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if match_labels.is_none_or(Map::is_empty) && !has_exprs {
        causes.push(Cause::new("FieldValueRequired", "spec.selector", "Required value"));
    }
    let template_labels = obj.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
    if let Some(ml) = match_labels {
        let matches = ml.iter().all(|(k, v)| template_labels.and_then(|t| t.get(k)) == Some(v));
        if !matches {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.template.metadata.labels",
                format!(
                    "Invalid value: {}: `selector` does not match template `labels`",
                    serde_json::to_string(&template_labels).unwrap_or_default()
                ),
            ));
        }
    }
    causes.extend(validate_containers(obj.pointer("/spec/template/spec/containers"), "spec.template.spec.containers"));
    causes
}

fn validate_containers(containers: Option<&Value>, path: &str) -> Vec<Cause> {
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

/// Every quantity in a pod template's resources parses: Kubernetes' decoder refuses a
/// malformed quantity (400) before validation runs. The k8s-openapi type keeps it a string.
fn quantities_parse(kind: &str, decoded: Decoded) -> Result<Decoded, String> {
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

/// The most data a ConfigMap or a Secret may hold (kubernetes pkg/apis/core MaxSecretSize).
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

/// A ConfigMap or Secret key (kubernetes apimachinery IsConfigMapKey).
fn config_key_causes(key: &str, field: &str) -> Option<Cause> {
    let ok_chars = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let why = if key.len() > 253 {
        "must be no more than 253 characters"
    } else if !ok_chars {
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    } else if key == "." || key == ".." {
        "must not be '.' or '..'"
    } else if key.starts_with("..") {
        "must not start with '..'"
    } else {
        return None;
    };
    Some(Cause::new("FieldValueInvalid", &format!("{field}[{key}]"), format!("Invalid value: \"{key}\": {why}")))
}

fn too_large(field: &str) -> Cause {
    Cause::new("FieldValueTooLong", field, format!("Too long: may not be more than {MAX_DATA_SIZE} bytes"))
}

fn validate_config_map(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0usize;
    let data = obj.get("data").and_then(Value::as_object);
    for (key, v) in data.into_iter().flatten() {
        causes.extend(config_key_causes(key, "data"));
        total += v.as_str().map_or(0, str::len);
    }
    for (key, v) in obj.get("binaryData").and_then(Value::as_object).into_iter().flatten() {
        causes.extend(config_key_causes(key, "binaryData"));
        if data.is_some_and(|d| d.contains_key(key)) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("data[{key}]"),
                format!("Invalid value: \"{key}\": duplicate of key present in binaryData"),
            ));
        }
        total += v.as_str().map_or(0, base64_len);
    }
    if total > MAX_DATA_SIZE {
        causes.push(too_large(""));
    }
    causes
}

fn validate_secret(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0usize;
    for (key, v) in obj.get("data").and_then(Value::as_object).into_iter().flatten() {
        causes.extend(config_key_causes(key, "data"));
        total += v.as_str().map_or(0, base64_len);
    }
    if total > MAX_DATA_SIZE {
        causes.push(too_large("data"));
    }
    causes
}

/// The cause for data over [`MAX_DATA_SIZE`] that `doc` already carries, for a
/// ConfigMap or a Secret; `doc` may be the object, an apply configuration or a merge
/// patch. Every string value it sets is in the object written from it (a Secret's
/// `stringData` goes into `data`, replacing the same key there), and keys that are not
/// config keys (a strategic patch's `$patch`) are left out, so the figure never exceeds
/// the written object's.
pub fn data_size_cause(b: Builtin, doc: &Value) -> Option<Cause> {
    let map = |f: &str| doc.get(f).and_then(Value::as_object);
    let sum = |f: &str, len: fn(&str) -> usize, skip: Option<&Map<String, Value>>| -> usize {
        map(f)
            .into_iter()
            .flatten()
            .filter(|(k, _)| !k.starts_with('$') && !skip.is_some_and(|s| s.contains_key(*k)))
            .filter_map(|(_, v)| Some(len(v.as_str()?)))
            .sum()
    };
    let (total, field) = match b {
        Builtin::ConfigMap => (sum("data", str::len, None) + sum("binaryData", base64_len, None), ""),
        Builtin::Secret => (sum("data", base64_len, map("stringData")) + sum("stringData", str::len, None), "data"),
        _ => return None,
    };
    (total > MAX_DATA_SIZE).then(|| too_large(field))
}

/// A floor under the bytes `doc`'s data maps take in the stored JSON, for a ConfigMap
/// or a Secret (see [`crate::objmeta::string_entries_floor`]); 0 for other kinds.
pub fn data_bytes_floor(b: Builtin, doc: &Value) -> usize {
    let map = |f: &str| doc.get(f).and_then(Value::as_object);
    let floor = |m: Option<&Map<String, Value>>| m.map_or(0, objmeta::string_entries_floor);
    match b {
        Builtin::ConfigMap => floor(map("data")) + floor(map("binaryData")),
        // stringData is stored base64-encoded in data (longer than it is sent), in
        // place of the same key's entry there.
        Builtin::Secret => {
            let string_data = map("stringData");
            let replaced: usize = map("data")
                .into_iter()
                .flatten()
                .filter(|(k, _)| string_data.is_some_and(|s| s.contains_key(*k)))
                .filter_map(|(k, v)| Some(k.len() + v.as_str()?.len() + 5))
                .sum();
            floor(map("data")) - replaced + floor(string_data)
        }
        _ => 0,
    }
}

/// The decoded length of standard base64 text.
fn base64_len(text: &str) -> usize {
    let body = text.trim_end_matches('=');
    body.len() * 3 / 4
}

/// A string rendering of the value at a dotted path, for field selectors.
pub fn field_value(obj: &Value, field: &str) -> Option<String> {
    let mut cur = obj;
    for seg in field.split('.') {
        cur = cur.get(seg)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Converts a stored core/v1 Event to its events.k8s.io/v1 shape.
pub fn event_to_v1(core: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    let renames = [
        ("metadata", "metadata"),
        ("involvedObject", "regarding"),
        ("related", "related"),
        ("message", "note"),
        ("reason", "reason"),
        ("type", "type"),
        ("action", "action"),
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("source", "deprecatedSource"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
    ];
    for (from, to) in renames {
        if let Some(v) = core.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// Converts an events.k8s.io/v1 Event to the stored core/v1 shape. The core fields
/// kubectl prints (count, lastTimestamp) are filled from the series when absent, so
/// `kubectl describe` shows events that controllers record through the new API.
pub fn event_from_v1(v1: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    let renames = [
        ("metadata", "metadata"),
        ("regarding", "involvedObject"),
        ("related", "related"),
        ("note", "message"),
        ("reason", "reason"),
        ("type", "type"),
        ("action", "action"),
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
    ];
    for (from, to) in renames {
        if let Some(v) = v1.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    if !out.contains_key("involvedObject") {
        out.insert("involvedObject".into(), json!({}));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}
            }
        })
    }

    #[test]
    fn unknown_fields_are_reported_with_their_paths_and_dropped() {
        let mut d = deployment();
        d["spec"]["replicaz"] = json!(3);
        d["spec"]["template"]["spec"]["containers"][0]["imagee"] = json!("x");
        let out = Builtin::Deployment.decode(&d).unwrap();
        assert_eq!(out.unknown, ["spec.replicaz", "spec.template.spec.containers[0].imagee"]);
        assert!(out.value["spec"].get("replicaz").is_none());
    }

    #[test]
    fn wrong_types_fail_to_decode_with_the_kind_named() {
        let mut d = deployment();
        d["spec"]["replicas"] = json!("three");
        let err = Builtin::Deployment.decode(&d).err().unwrap();
        assert!(err.starts_with("Deployment in version \"v1\" cannot be handled as a Deployment"), "{err}");
    }

    #[test]
    fn deployment_defaults_and_selector_validation() {
        let mut d = deployment();
        Builtin::Deployment.default(&mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(validate_deployment(&d).is_empty());
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        let causes = validate_deployment(&d);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }

    /// The early size checks never refuse what validation would pass, and their floor
    /// never exceeds the stored data: each case is checked against the object as it is
    /// defaulted, validated and serialized.
    #[test]
    fn early_size_checks_agree_with_validation_and_the_stored_size() {
        use base64::Engine;
        let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n]);
        let kib = 1024;
        let cases = [
            (Builtin::ConfigMap, json!({"data": {"a": "x".repeat(MAX_DATA_SIZE)}}), false),
            (Builtin::ConfigMap, json!({"data": {"a": "x".repeat(MAX_DATA_SIZE + 1)}}), true),
            (Builtin::ConfigMap, json!({"data": {"a": "x".repeat(600 * kib)}, "binaryData": {"b": b64(600 * kib)}}), true),
            // A merge patch's null removes a key: it weighs nothing.
            (Builtin::ConfigMap, json!({"data": {"a": "x".repeat(600 * kib), "b": null}}), false),
            (Builtin::Secret, json!({"data": {"a": b64(MAX_DATA_SIZE)}}), false),
            (Builtin::Secret, json!({"data": {"a": b64(MAX_DATA_SIZE + 1)}}), true),
            (Builtin::Secret, json!({"stringData": {"a": "x".repeat(MAX_DATA_SIZE + 1)}}), true),
            // stringData replaces data's entry of the same key: counted once.
            (Builtin::Secret, json!({"data": {"a": b64(900 * kib)}, "stringData": {"a": "x".repeat(900 * kib)}}), false),
            (Builtin::Secret, json!({"data": {"a": b64(600 * kib)}, "stringData": {"b": "x".repeat(600 * kib)}}), true),
        ];
        for (i, (b, doc, over)) in cases.into_iter().enumerate() {
            assert_eq!(data_size_cause(b, &doc).is_some(), over, "case {i}: the early check");
            let mut full = doc.clone();
            full["metadata"] = json!({"name": "n"});
            let floor = data_bytes_floor(b, &full);
            // Nulls are a patch's, not an object's.
            if let Some(d) = full.get_mut("data").and_then(Value::as_object_mut) {
                d.retain(|_, v| !v.is_null());
            }
            b.default(&mut full);
            let too_long = b.validate(&full).iter().any(|c| c.reason == "FieldValueTooLong");
            assert_eq!(too_long, over, "case {i}: validation");
            let stored = ["data", "binaryData"].iter().filter_map(|f| full.get(f)).map(|v| serde_json::to_vec(v).unwrap().len()).sum();
            assert!(floor <= stored, "case {i}: floor {floor} over the stored {stored}");
        }
    }

    #[test]
    fn secret_string_data_becomes_data() {
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"k": "hi"}});
        Builtin::Secret.default(&mut s);
        assert_eq!(s["data"]["k"], "aGk=");
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
    }

    #[test]
    fn events_convert_both_ways() {
        let v1 = json!({"metadata": {"name": "e"}, "regarding": {"name": "web", "kind": "Deployment"}, "note": "hello", "reason": "Scheduled", "type": "Normal", "reportingController": "flotilla"});
        let core = event_from_v1(&v1);
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "hello");
        let back = event_to_v1(&core);
        assert_eq!(back["note"], "hello");
        assert_eq!(back["reportingController"], "flotilla");
    }
}
