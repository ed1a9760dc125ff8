//! Services (kubernetes pkg/registry/core/service, pkg/apis/core/v1 defaults and
//! validation). A workspace runs no proxy and owns no address range, so it allocates
//! no cluster IP and no node port: each cluster allocates its own for its copy.

use serde_json::{json, Value};

use super::print::{self, col, AGE, NAME};
use super::rules::{self, duplicate, forbidden, invalid, required, unsupported};
use super::{decode_typed, decoded, set_default, Decoded, Strategy};
use crate::error::Cause;
use crate::objmeta::{self, NameRule};
use crate::patch::meta::{metadata_list, ListStrategy, PatchMeta};

/// core/v1 Service.
#[derive(Debug)]
pub struct Service;

const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
/// kube-apiserver's default `--service-node-port-range`.
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

fn spec_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/spec/{field}")).and_then(Value::as_str).unwrap_or_default()
}

fn ports(obj: &Value) -> &[Value] {
    obj.pointer("/spec/ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// Reachable from outside the cluster: the kinds that get `externalTrafficPolicy`.
fn externally_accessible(obj: &Value) -> bool {
    let has_external_ips = obj.pointer("/spec/externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    match spec_str(obj, "type") {
        "LoadBalancer" | "NodePort" => true,
        "ClusterIP" => has_external_ips,
        _ => false,
    }
}

fn headless(obj: &Value) -> bool {
    spec_str(obj, "clusterIP") == "None"
}

impl Strategy for Service {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        let mut d = decode_typed::<k8s_openapi::api::core::v1::Service>("Service", obj, old, status_write, decoded)?;
        // Both run before validation in kube-apiserver (PrepareForUpdate, and the
        // storage's patchAllocatedValues), so a type change or a replace that leaves out
        // what the cluster allocated is valid.
        if let (Some(old), false) = (old, status_write) {
            drop_type_dependent_fields(&mut d.value, old);
            keep_allocated(&mut d.value, old);
        }
        Ok(d)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035Label
    }

    /// SetDefaults_Service.
    fn default(&self, obj: &mut Value) {
        if obj.get("spec").is_none_or(Value::is_null) {
            obj["spec"] = json!({});
        }
        set_default(obj, &["spec", "type"], json!("ClusterIP"));
        set_default(obj, &["spec", "sessionAffinity"], json!("None"));
        match spec_str(obj, "sessionAffinity") {
            "None" => {
                obj["spec"].as_object_mut().map(|s| s.remove("sessionAffinityConfig"));
            }
            "ClientIP" => set_default(obj, &["spec", "sessionAffinityConfig", "clientIP", "timeoutSeconds"], json!(10800)),
            _ => {}
        }
        if let Some(Value::Array(ports)) = obj.pointer_mut("/spec/ports") {
            for p in ports {
                set_default(p, &["protocol"], json!("TCP"));
                let unset = match p.get("targetPort") {
                    None | Some(Value::Null) => true,
                    Some(Value::String(s)) => s.is_empty(),
                    Some(v) => v.as_i64() == Some(0),
                };
                if unset {
                    p["targetPort"] = p.get("port").cloned().unwrap_or(Value::Null);
                }
            }
        }
        if externally_accessible(obj) {
            set_default(obj, &["spec", "externalTrafficPolicy"], json!("Cluster"));
        }
        let ty = spec_str(obj, "type").to_string();
        if matches!(ty.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
            set_default(obj, &["spec", "internalTrafficPolicy"], json!("Cluster"));
        }
        if ty == "LoadBalancer" {
            set_default(obj, &["spec", "allocateLoadBalancerNodePorts"], json!(true));
            if let Some(Value::Array(ingress)) = obj.pointer_mut("/status/loadBalancer/ingress") {
                for i in ingress.iter_mut().filter(|i| i.get("ip").is_some_and(|ip| ip.is_string())) {
                    set_default(i, &["ipMode"], json!("VIP"));
                }
            }
        }
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let ty = spec_str(obj, "type");
        if !TYPES.contains(&ty) {
            causes.push(unsupported("spec.type", ty, &TYPES));
        }
        let cluster_ip = spec_str(obj, "clusterIP");
        if !cluster_ip.is_empty() && cluster_ip != "None" && cluster_ip.parse::<std::net::IpAddr>().is_err() {
            causes.push(invalid("spec.clusterIP", &json!(cluster_ip), "must be empty, 'None', or a valid IP address"));
        }
        match ty {
            "ExternalName" => {
                if !cluster_ip.is_empty() {
                    causes.push(forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
                }
                let name = spec_str(obj, "externalName");
                if name.is_empty() {
                    causes.push(required("spec.externalName"));
                } else if let Err(why) = objmeta::dns1123_subdomain(name.strip_suffix('.').unwrap_or(name)) {
                    causes.push(invalid("spec.externalName", &json!(name), &why));
                }
            }
            "LoadBalancer" | "NodePort" if headless(obj) => {
                causes.push(invalid("spec.clusterIPs[0]", &json!("None"), &format!("may not be set to 'None' for {ty} services")));
            }
            _ => {}
        }
        let ports = ports(obj);
        if ports.is_empty() && !headless(obj) && ty != "ExternalName" {
            causes.push(required("spec.ports"));
        }
        let mut names = std::collections::HashSet::new();
        let mut keys = std::collections::HashSet::new();
        let mut node_ports = std::collections::HashSet::new();
        for (i, p) in ports.iter().enumerate() {
            let field = format!("spec.ports[{i}]");
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                if ports.len() > 1 {
                    causes.push(required(&format!("{field}.name")));
                }
            } else if let Err(why) = objmeta::dns1123_label(name) {
                causes.push(invalid(&format!("{field}.name"), &json!(name), &why));
            } else if !names.insert(name) {
                causes.push(duplicate(&format!("{field}.name"), &json!(name)));
            }
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            causes.extend(rules::port_number(&format!("{field}.port"), &port));
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or_default();
            if protocol.is_empty() {
                causes.push(required(&format!("{field}.protocol")));
            } else if !PROTOCOLS.contains(&protocol) {
                causes.push(unsupported(&format!("{field}.protocol"), protocol, &PROTOCOLS));
            }
            if let Some(target) = p.get("targetPort") {
                causes.extend(rules::port_number_or_name(&format!("{field}.targetPort"), target));
            }
            if !keys.insert((port.as_i64(), protocol)) {
                causes.push(duplicate(&field, &json!({"port": port, "protocol": protocol})));
            }
            if ty == "LoadBalancer" && port.as_i64() == Some(10250) {
                causes.push(invalid(&field, &port, "may not expose port 10250 externally since it is used by kubelet"));
            }
            match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n != 0) {
                Some(_) if ty == "ClusterIP" || ty == "ExternalName" => {
                    causes.push(forbidden(&format!("{field}.nodePort"), &format!("may not be used when `type` is '{ty}'")));
                }
                Some(n) if !NODE_PORTS.contains(&n) => causes.push(invalid(
                    &format!("{field}.nodePort"),
                    &json!(n),
                    "provided port is not in the valid range. The range of valid ports is 30000-32767",
                )),
                Some(n) if !node_ports.insert((n, protocol)) => causes.push(duplicate(&format!("{field}.nodePort"), &json!(n))),
                _ => {}
            }
        }
        causes.extend(rules::labels("spec.selector", obj.pointer("/spec/selector")));
        match spec_str(obj, "sessionAffinity") {
            "None" => {}
            "ClientIP" => {
                let timeout = obj.pointer("/spec/sessionAffinityConfig/clientIP/timeoutSeconds").and_then(Value::as_i64).unwrap_or(0);
                if !(1..=86400).contains(&timeout) {
                    causes.push(invalid(
                        "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                        &json!(timeout),
                        "must be greater than 0 and less than 86400",
                    ));
                }
            }
            other => causes.push(unsupported("spec.sessionAffinity", other, &["ClientIP", "None"])),
        }
        match spec_str(obj, "externalTrafficPolicy") {
            "" if externally_accessible(obj) => causes.push(required("spec.externalTrafficPolicy")),
            "" => {}
            policy if !externally_accessible(obj) => {
                causes.push(invalid("spec.externalTrafficPolicy", &json!(policy), "may only be set for externally-accessible services"))
            }
            "Cluster" | "Local" => {}
            other => causes.push(unsupported("spec.externalTrafficPolicy", other, &["Cluster", "Local"])),
        }
        if ty != "LoadBalancer" && obj.pointer("/spec/allocateLoadBalancerNodePorts").is_some_and(|v| !v.is_null()) {
            causes.push(forbidden("spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'"));
        }
        if ty != "LoadBalancer" && obj.pointer("/spec/loadBalancerSourceRanges").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            causes.push(forbidden("spec.loadBalancerSourceRanges", "may only be used when `type` is 'LoadBalancer'"));
        }
        for (i, ip) in obj.pointer("/spec/externalIPs").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if ip.as_str().and_then(|s| s.parse::<std::net::IpAddr>().ok()).is_none() {
                causes.push(invalid(
                    &format!("spec.externalIPs[{i}]"),
                    ip,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                ));
            }
        }
        // An update keeps the cluster IP, unless the type moves to or from ExternalName.
        if let Some(old) = old {
            let (was, is) = (spec_str(old, "clusterIP"), cluster_ip);
            let external_name = spec_str(old, "type") == "ExternalName" || ty == "ExternalName";
            if !was.is_empty() && was != is && !external_name {
                causes.push(invalid("spec.clusterIPs[0]", &json!([is]), "may not change once set"));
            }
        }
        causes
    }

    /// What a change of type leaves behind goes, unless the write set it itself
    /// (dropTypeDependentFields): node ports when no longer needed, the cluster IP when
    /// the Service becomes an ExternalName, and the load balancer's fields and status.
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        drop_type_dependent_fields(obj, old);
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.clusterIP", "spec.type"]
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &ServicePatchMeta
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Type", "string", 0, "type determines how the Service is exposed."),
            col("Cluster-IP", "string", 0, "clusterIP is the IP address of the service and is usually assigned randomly."),
            col(
                "External-IP",
                "string",
                0,
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
            ),
            col("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
            AGE,
            col("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        // A headless Service says `None`, as kubectl prints it; a workspace allocates no IP.
        let cluster_ip = obj
            .pointer("/spec/clusterIPs/0")
            .or_else(|| obj.pointer("/spec/clusterIP"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("<none>");
        let port_cells: Vec<String> = ports(obj)
            .iter()
            .map(|p| {
                let (port, protocol) = (p["port"].as_i64().unwrap_or(0), p["protocol"].as_str().unwrap_or_default());
                match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                    Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                    None => format!("{port}/{protocol}"),
                }
            })
            .collect();
        let selector = obj.pointer("/spec/selector").and_then(Value::as_object).filter(|m| !m.is_empty()).map_or("<none>".into(), |m| {
            let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
            pairs.sort();
            pairs.join(",")
        });
        vec![
            print::name(obj),
            json!(spec_str(obj, "type")),
            json!(cluster_ip),
            json!(external_ip(obj)),
            json!(if port_cells.is_empty() { "<none>".to_string() } else { port_cells.join(",") }),
            print::age_of(obj),
            json!(selector),
        ]
    }
}

/// What a change of type leaves behind goes, unless the write set it itself
/// (dropTypeDependentFields): node ports when no longer needed, the cluster IP when
/// the Service becomes an ExternalName, and the load balancer's fields and status (an
/// empty `loadBalancer`, as kube-apiserver leaves it). A write that leaves the type
/// out means ClusterIP, its default.
fn drop_type_dependent_fields(obj: &mut Value, old: &Value) {
    let was = spec_str(old, "type").to_string();
    let is = match spec_str(obj, "type") {
        "" => "ClusterIP".to_string(),
        ty => ty.to_string(),
    };
    if was == is {
        return;
    }
    let unchanged = |obj: &Value, field: &str| obj.pointer(&format!("/spec/{field}")) == old.pointer(&format!("/spec/{field}"));
    if is == "ExternalName" {
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if unchanged(obj, f) {
                obj["spec"].as_object_mut().map(|s| s.remove(f));
            }
        }
    }
    if matches!(is.as_str(), "ClusterIP" | "ExternalName") {
        let old_ports = ports(old).to_vec();
        if let Some(Value::Array(ps)) = obj.pointer_mut("/spec/ports") {
            for p in ps.iter_mut() {
                let same = old_ports.iter().any(|o| o.get("port") == p.get("port") && o.get("nodePort") == p.get("nodePort"));
                if same {
                    p.as_object_mut().map(|m| m.remove("nodePort"));
                }
            }
        }
    }
    if was == "LoadBalancer" {
        for f in ["allocateLoadBalancerNodePorts", "loadBalancerClass", "healthCheckNodePort"] {
            if unchanged(obj, f) {
                obj["spec"].as_object_mut().map(|s| s.remove(f));
            }
        }
    }
    if !externally_accessible(obj) && unchanged(obj, "externalTrafficPolicy") {
        obj["spec"].as_object_mut().map(|s| s.remove("externalTrafficPolicy"));
    }
    if is != "LoadBalancer" {
        if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("loadBalancer".into(), json!({}));
        }
    }
}

/// Puts back, on an update, what was allocated that the write leaves out, so that a
/// client can send the same manifest again without reading the object first (kube's
/// patchAllocatedValues, which runs before validation): the cluster IPs while both
/// versions need one, the node ports (by port name, unless another port took the
/// number) while both need them, and the health-check node port while both need one.
fn keep_allocated(obj: &mut Value, old: &Value) {
    let needs_ip = |s: &Value| spec_str(s, "type") != "ExternalName";
    let needs_node_ports = |s: &Value| matches!(spec_str(s, "type"), "NodePort" | "LoadBalancer");
    let needs_health_check = |s: &Value| spec_str(s, "type") == "LoadBalancer" && spec_str(s, "externalTrafficPolicy") == "Local";
    if obj.get("spec").is_none_or(|s| !s.is_object()) {
        return;
    }
    if needs_ip(old) && needs_ip(obj) {
        if spec_str(obj, "clusterIP").is_empty() && !spec_str(old, "clusterIP").is_empty() {
            obj["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        }
        let empty = obj.pointer("/spec/clusterIPs").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if empty && old.pointer("/spec/clusterIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            obj["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
    }
    if needs_node_ports(old) && needs_node_ports(obj) {
        let node_port = |p: &Value| p.get("nodePort").and_then(Value::as_i64).filter(|n| *n != 0);
        let name = |p: &Value| p.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        let used_by_new: std::collections::HashSet<i64> = ports(obj).iter().filter_map(node_port).collect();
        let by_name: std::collections::HashMap<String, i64> = ports(old).iter().filter_map(|p| Some((name(p), node_port(p)?))).collect();
        if let Some(Value::Array(ps)) = obj.pointer_mut("/spec/ports") {
            for p in ps.iter_mut().filter(|p| node_port(p).is_none()) {
                if let Some(np) = by_name.get(&name(p)).filter(|np| !used_by_new.contains(np)) {
                    p["nodePort"] = json!(np);
                }
            }
        }
    }
    if needs_health_check(old)
        && needs_health_check(obj)
        && obj.pointer("/spec/healthCheckNodePort").and_then(Value::as_i64).unwrap_or(0) == 0
    {
        if let Some(hc) = old.pointer("/spec/healthCheckNodePort").filter(|v| v.as_i64().unwrap_or(0) != 0) {
            obj["spec"]["healthCheckNodePort"] = hc.clone();
        }
    }
}

/// The EXTERNAL-IP column: the external IPs, and for a load balancer its ingress
/// addresses first (sorted), or `<pending>` while it has none.
fn external_ip(obj: &Value) -> String {
    let external: Vec<&str> =
        obj.pointer("/spec/externalIPs").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    match spec_str(obj, "type") {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut lb = load_balancer_addresses(obj);
            lb.extend(external.iter().map(|s| s.to_string()));
            if lb.is_empty() {
                "<pending>".into()
            } else {
                lb.join(",")
            }
        }
        "ExternalName" => spec_str(obj, "externalName").to_string(),
        _ => "<unknown>".into(),
    }
}

/// The sorted IPs (or host names) of `status.loadBalancer.ingress`.
pub(super) fn load_balancer_addresses(obj: &Value) -> Vec<String> {
    let ingress = obj.pointer("/status/loadBalancer/ingress").and_then(Value::as_array).into_iter().flatten();
    let mut out: Vec<String> = ingress
        .filter_map(|i| {
            let ip = i.get("ip").and_then(Value::as_str).filter(|s| !s.is_empty());
            ip.or_else(|| i.get("hostname").and_then(Value::as_str)).map(String::from)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The merge keys of a Service (k8s.io/api core/v1 struct tags): ports by port and
/// protocol (strategic merge patch uses the port alone), conditions by type; every
/// other list is atomic.
#[derive(Debug)]
struct ServicePatchMeta;

impl PatchMeta for ServicePatchMeta {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path {
            ["spec", "ports"] => ListStrategy::Map(vec!["port".into(), "protocol".into()]),
            ["status", "conditions"] => ListStrategy::Map(vec!["type".into()]),
            _ => metadata_list(path).unwrap_or(ListStrategy::Atomic),
        }
    }

    fn key_defaults(&self, path: &[&str]) -> &'static [(&'static str, &'static str)] {
        match path {
            ["spec", "ports"] => &[("protocol", "TCP")],
            _ => &[],
        }
    }
}
