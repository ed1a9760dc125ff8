//! Ingresses and NetworkPolicies (kubernetes pkg/registry/networking, pkg/apis/networking
//! defaults and validation).

use std::net::IpAddr;

use serde_json::{json, Value};

use super::print::{self, col, AGE, NAME};
use super::rules::{self, forbidden, invalid, required, unsupported};
use super::{decode_typed, decoded, set_default, Decoded, Strategy};
use crate::error::Cause;
use crate::objmeta;
use crate::patch::meta::{metadata_list, ListStrategy, PatchMeta};

/// networking.k8s.io/v1 Ingress: the generation moves on a spec change.
#[derive(Debug)]
pub struct Ingress;

/// networking.k8s.io/v1 NetworkPolicy: no status; the generation moves on a spec change.
#[derive(Debug)]
pub struct NetworkPolicy;

/// Every list of these kinds is atomic; only the shared metadata and conditions merge.
#[derive(Debug)]
pub(super) struct AtomicLists;

impl PatchMeta for AtomicLists {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path {
            ["status", "conditions"] => ListStrategy::Map(vec!["type".into()]),
            _ => metadata_list(path).unwrap_or(ListStrategy::Atomic),
        }
    }
}

/// The generation of a kind whose spec alone moves it.
pub(super) fn spec_changed(old: &Value, new: &Value) -> Option<bool> {
    Some(old.get("spec") != new.get("spec"))
}

const PATH_TYPES: [&str; 3] = ["Exact", "ImplementationSpecific", "Prefix"];

impl Strategy for Ingress {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::networking::v1::Ingress>("Ingress", obj, old, status_write, decoded)
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let rules_list = obj.pointer("/spec/rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let default_backend = obj.pointer("/spec/defaultBackend").filter(|b| !b.is_null());
        if rules_list.is_empty() && default_backend.is_none() {
            causes.push(invalid("spec", &Value::Null, "either `defaultBackend` or `rules` must be specified"));
        }
        if let Some(b) = default_backend {
            causes.extend(backend("spec.defaultBackend", b));
        }
        for (i, rule) in rules_list.iter().enumerate() {
            let field = format!("spec.rules[{i}]");
            if let Some(host) = rule.get("host").and_then(Value::as_str).filter(|h| !h.is_empty()) {
                causes.extend(host_causes(&format!("{field}.host"), host));
            }
            let Some(http) = rule.get("http").filter(|h| !h.is_null()) else { continue };
            let paths = http.get("paths").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            if paths.is_empty() {
                causes.push(required(&format!("{field}.http.paths")));
            }
            for (j, p) in paths.iter().enumerate() {
                let field = format!("{field}.http.paths[{j}]");
                let path = p.get("path").and_then(Value::as_str).unwrap_or_default();
                match p.get("pathType").and_then(Value::as_str) {
                    None => causes.push(Cause::new(
                        "FieldValueRequired",
                        &format!("{field}.pathType"),
                        "Required value: pathType must be specified",
                    )),
                    Some("Exact" | "Prefix") => causes.extend(absolute_path(&format!("{field}.path"), path)),
                    Some("ImplementationSpecific") if !path.is_empty() && !path.starts_with('/') => {
                        causes.push(invalid(&format!("{field}.path"), &json!(path), "must be an absolute path"))
                    }
                    Some("ImplementationSpecific") => {}
                    Some(other) => causes.push(unsupported(&format!("{field}.pathType"), other, &PATH_TYPES)),
                }
                match p.get("backend") {
                    Some(b) if !b.is_null() => causes.extend(backend(&format!("{field}.backend"), b)),
                    _ => causes.push(required(&format!("{field}.backend"))),
                }
            }
        }
        for (i, tls) in obj.pointer("/spec/tls").and_then(Value::as_array).into_iter().flatten().enumerate() {
            for (j, host) in tls.get("hosts").and_then(Value::as_array).into_iter().flatten().enumerate() {
                causes.extend(host_causes(&format!("spec.tls[{i}].hosts[{j}]"), host.as_str().unwrap_or_default()));
            }
            if let Some(secret) = tls.get("secretName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                if let Err(why) = objmeta::dns1123_subdomain(secret) {
                    causes.push(invalid(&format!("spec.tls[{i}].secretName"), &json!(secret), &why));
                }
            }
        }
        if let Some(class) = obj.pointer("/spec/ingressClassName").and_then(Value::as_str) {
            if let Err(why) = objmeta::dns1123_subdomain(class) {
                causes.push(invalid("spec.ingressClassName", &json!(class), &why));
            }
        }
        causes
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        spec_changed(old, new)
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &AtomicLists
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Class", "string", 0, "The name of the IngressClass resource that should be used for additional configuration"),
            col("Hosts", "string", 0, "Hosts that incoming requests are matched against before the ingress rule"),
            col("Address", "string", 0, "Address is a list containing ingress points for the load-balancer"),
            col("Ports", "string", 0, "Ports of TLS configurations that open"),
            AGE,
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let class = obj.pointer("/spec/ingressClassName").and_then(Value::as_str).unwrap_or("<none>");
        let rules_list = obj.pointer("/spec/rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        // Up to three hosts; beyond them, the count of the rules left (kubectl's own rule).
        let hosts: Vec<&str> =
            rules_list.iter().filter_map(|r| r.get("host").and_then(Value::as_str)).filter(|h| !h.is_empty()).take(3).collect();
        let hosts = match hosts.len() {
            0 => "*".to_string(),
            _ if rules_list.len() > 3 => format!("{} + {} more...", hosts.join(","), rules_list.len() - 3),
            _ => hosts.join(","),
        };
        let tls = obj.pointer("/spec/tls").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
        vec![
            print::name(obj),
            json!(class),
            json!(hosts),
            json!(super::service::load_balancer_addresses(obj).join(",")),
            json!(if tls { "80, 443" } else { "80" }),
            print::age_of(obj),
        ]
    }
}

/// A backend: a Service by name and port (number or name), or a typed resource.
fn backend(field: &str, b: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (service, resource) = (b.get("service").filter(|s| !s.is_null()), b.get("resource").filter(|r| !r.is_null()));
    match (service, resource) {
        (Some(_), Some(_)) => causes.push(invalid(field, &json!(""), "cannot set both resource and service backends")),
        (None, None) => causes.push(invalid(field, &json!(""), "resource or service backend is required")),
        (Some(svc), None) => {
            match svc.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                None => causes.push(required(&format!("{field}.service.name"))),
                Some(n) => {
                    if let Err(why) = objmeta::dns1035_label(n) {
                        causes.push(invalid(&format!("{field}.service.name"), &json!(n), &why));
                    }
                }
            }
            let port = svc.get("port");
            let name = port.and_then(|p| p.get("name")).and_then(Value::as_str).filter(|n| !n.is_empty());
            let number = port.and_then(|p| p.get("number")).filter(|n| !n.is_null());
            match (name, number) {
                (Some(_), Some(_)) => causes.push(invalid(field, &json!(""), "cannot set both port name & port number")),
                (None, None) => causes.push(Cause::new("FieldValueRequired", field, "Required value: port name or number is required")),
                (Some(n), None) => {
                    if let Err(why) = rules::port_name(n) {
                        causes.push(invalid(&format!("{field}.service.port.name"), &json!(n), why));
                    }
                }
                (None, Some(n)) => causes.extend(rules::port_number(&format!("{field}.service.port.number"), n)),
            }
        }
        (None, Some(r)) => {
            for f in ["kind", "name"] {
                if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    causes.push(Cause::new(
                        "FieldValueRequired",
                        &format!("{field}.resource.{f}"),
                        format!("Required value: {f} is required"),
                    ));
                }
            }
        }
    }
    causes
}

/// A rule's host: a DNS name, possibly with a leading `*.` wildcard, and not an IP.
fn host_causes(field: &str, host: &str) -> Option<Cause> {
    if host.parse::<IpAddr>().is_ok() {
        return Some(invalid(field, &json!(host), "must be a DNS name, not an IP address"));
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    objmeta::dns1123_subdomain(name).err().map(|why| invalid(field, &json!(host), &why))
}

/// An Exact or Prefix path: absolute, and without `//`, `/./`, `/../` or an encoded slash.
fn absolute_path(field: &str, path: &str) -> Option<Cause> {
    let why = if !path.starts_with('/') {
        "must be an absolute path".to_string()
    } else if let Some(bad) = ["//", "/./", "/../", "%2f", "%2F"].into_iter().find(|b| path.contains(b)) {
        format!("must not contain '{bad}'")
    } else if let Some(bad) = ["/..", "/."].into_iter().find(|b| path.ends_with(b)) {
        format!("cannot end with '{bad}'")
    } else {
        return None;
    };
    Some(invalid(field, &json!(path), &why))
}

impl Strategy for NetworkPolicy {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::networking::v1::NetworkPolicy>("NetworkPolicy", obj, old, status_write, decoded)
    }

    /// Ports are TCP unless they say otherwise; the policy types are Ingress, and Egress
    /// when there are egress rules, unless given.
    fn default(&self, obj: &mut Value) {
        for direction in ["ingress", "egress"] {
            if let Some(Value::Array(rules_list)) = obj.pointer_mut(&format!("/spec/{direction}")) {
                for rule in rules_list {
                    if let Some(Value::Array(ports)) = rule.get_mut("ports") {
                        for p in ports {
                            set_default(p, &["protocol"], json!("TCP"));
                        }
                    }
                }
            }
        }
        let given = obj.pointer("/spec/policyTypes").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
        if !given {
            let egress = obj.pointer("/spec/egress").and_then(Value::as_array).is_some_and(|e| !e.is_empty());
            let types = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("policyTypes".into(), types);
            }
        }
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        causes.extend(rules::label_selector("spec.podSelector", obj.pointer("/spec/podSelector").unwrap_or(&json!({}))));
        for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, rule) in obj.pointer(&format!("/spec/{direction}")).and_then(Value::as_array).into_iter().flatten().enumerate() {
                let field = format!("spec.{direction}[{i}]");
                for (j, p) in rule.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
                    causes.extend(policy_port(&format!("{field}.ports[{j}]"), p));
                }
                for (j, peer) in rule.get(peers).and_then(Value::as_array).into_iter().flatten().enumerate() {
                    causes.extend(policy_peer(&format!("{field}.{peers}[{j}]"), peer));
                }
            }
        }
        let types = obj.pointer("/spec/policyTypes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if types.len() > 2 {
            causes.push(invalid("spec.policyTypes", &json!(types), "may not specify more than two policyTypes"));
        }
        for (i, t) in types.iter().enumerate() {
            let t = t.as_str().unwrap_or_default();
            if !matches!(t, "Ingress" | "Egress") {
                causes.push(unsupported(&format!("spec.policyTypes[{i}]"), t, &["Ingress", "Egress"]));
            }
        }
        causes
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        spec_changed(old, new)
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &AtomicLists
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Pod-Selector", "string", 0, "Selects the pods to which this NetworkPolicy object applies."), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(rules::selector_cell(obj, "/spec/podSelector")), print::age_of(obj)]
    }
}

/// A policy port: a protocol, a port by number or name, and an end port only after a
/// numeric port.
fn policy_port(field: &str, p: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
    if !matches!(protocol, "TCP" | "UDP" | "SCTP") {
        causes.push(unsupported(&format!("{field}.protocol"), protocol, &["TCP", "UDP", "SCTP"]));
    }
    let port = p.get("port").filter(|v| !v.is_null());
    let end = p.get("endPort").filter(|v| !v.is_null());
    if let Some(port) = port {
        causes.extend(rules::port_number_or_name(&format!("{field}.port"), port));
    }
    if let Some(end) = end {
        let end_field = format!("{field}.endPort");
        match port {
            None => causes.push(forbidden(&end_field, "may not be specified when `port` is not specified")),
            Some(Value::String(_)) => causes.push(invalid(&end_field, end, "may not be specified when `port` is non-numeric")),
            Some(port) => {
                causes.extend(rules::port_number(&end_field, end));
                if end.as_i64() < port.as_i64() {
                    causes.push(invalid(&end_field, end, "must be greater than or equal to `port`"));
                }
            }
        }
    }
    causes
}

/// A peer: pods or namespaces by selector, or an IP block, and not both.
fn policy_peer(field: &str, peer: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let set = |k: &str| peer.get(k).filter(|v| !v.is_null());
    let selectors: Vec<&str> = ["podSelector", "namespaceSelector"].into_iter().filter(|k| set(k).is_some()).collect();
    match set("ipBlock") {
        Some(_) if !selectors.is_empty() => causes.push(forbidden(field, "may not specify both ipBlock and another peer")),
        Some(block) => {
            let cidr = block.get("cidr").and_then(Value::as_str).unwrap_or_default();
            match parse_cidr(cidr) {
                _ if cidr.is_empty() => causes.push(required(&format!("{field}.ipBlock.cidr"))),
                None => causes.push(invalid(&format!("{field}.ipBlock.cidr"), &json!(cidr), "must be a valid CIDR")),
                Some(outer) => {
                    for (i, e) in block.get("except").and_then(Value::as_array).into_iter().flatten().enumerate() {
                        let text = e.as_str().unwrap_or_default();
                        let inside = parse_cidr(text).is_some_and(|inner| strictly_inside(inner, outer));
                        if !inside {
                            causes.push(invalid(&format!("{field}.ipBlock.except[{i}]"), e, "must be a strict subset of `cidr`"));
                        }
                    }
                }
            }
        }
        None if selectors.is_empty() => causes.push(Cause::new("FieldValueRequired", field, "Required value: must specify a peer")),
        None => {}
    }
    for k in selectors {
        causes.extend(rules::label_selector(&format!("{field}.{k}"), peer.get(k).unwrap_or(&Value::Null)));
    }
    causes
}

/// An address and its prefix length.
fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = text.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((addr, bits))
}

/// Whether `inner` is a smaller block inside `outer`.
fn strictly_inside(inner: (IpAddr, u8), outer: (IpAddr, u8)) -> bool {
    let (a, b, width) = match (inner.0, outer.0) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    if inner.1 <= outer.1 {
        return false;
    }
    // Compare the outer block's prefix bits.
    let shift = width - u32::from(outer.1);
    shift >= 128 || (a >> shift) == (b >> shift)
}
