//! Cluster IPs and node ports for the Services of a physical cluster, allocated while
//! the Service is written, as kube-apiserver allocates them
//! (pkg/registry/core/service/storage/alloc.go, ipallocator, portallocator).
//!
//! A workspace runs no proxy and allocates nothing: only the physical-cluster profile
//! installs a [`ServiceAllocator`] in the engine (`Api::install_allocator`),
//! which calls [`ServiceAllocator::admit`] on every create and update of the main
//! resource, after admission and just before the write.
//!
//! What is in use is what the stored Services hold: listed once per workspace, then
//! kept up to date from the store's events (creates, updates, deletes, a namespace's
//! cascade alike), which are read before each allocation, so an allocation costs the
//! same with ten Services as with ten thousand, and a restart lists again. Allocations
//! are serialized by one lock, and a value handed out stays reserved ([`Held`]) until
//! the write that carries it has been stored or has failed, so two concurrent creates
//! never receive the same value.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Mutex;

use rand::Rng;
use serde_json::{json, Value};

use crate::error::{ApiError, Cause, ObjRef};
use crate::registry::ResourceType;
use crate::store::{EventType, Store, WatchStream};

/// kube-apiserver's default `--service-node-port-range`.
pub const NODE_PORTS: RangeInclusive<u16> = 30000..=32767;

/// An IPv4 service range (`--service-cluster-ip-range`), such as `10.96.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    base: u32,
    prefix: u8,
}

impl Ipv4Cidr {
    /// kind's default service subnet.
    pub const KIND_DEFAULT: Ipv4Cidr = Ipv4Cidr { base: u32::from_be_bytes([10, 96, 0, 0]), prefix: 16 };

    /// How many addresses can be handed out: all but the network and broadcast addresses.
    pub fn size(&self) -> u32 {
        (1u32 << (32 - self.prefix)) - 2
    }

    /// The `i`-th address that can be handed out (0 is the one after the network address).
    fn nth(&self, i: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1 + i)
    }

    /// The index of `ip` among the addresses that can be handed out, if it is one.
    fn index_of(&self, ip: Ipv4Addr) -> Option<u32> {
        u32::from(ip).checked_sub(self.base + 1).filter(|i| *i < self.size())
    }

    /// Whether `ip` can be handed out from this range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.index_of(ip).is_some()
    }
}

impl Default for Ipv4Cidr {
    fn default() -> Self {
        Self::KIND_DEFAULT
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = String;

    /// An IPv4 CIDR whose host bits are zero. kube-apiserver refuses service ranges
    /// wider than /12 (1M addresses); a /31 or /32 has no address to hand out.
    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, prefix) =
            s.split_once('/').ok_or_else(|| format!("{s:?} is not a CIDR (expected an address/prefix, such as 10.96.0.0/16)"))?;
        let ip: Ipv4Addr =
            ip.parse().map_err(|_| format!("{s:?}: {ip:?} is not an IPv4 address (only IPv4 service ranges are supported)"))?;
        let prefix: u8 = prefix.parse().map_err(|_| format!("{s:?}: {prefix:?} is not a prefix length"))?;
        if !(12..=30).contains(&prefix) {
            return Err(format!("{s:?}: the prefix length must be between 12 and 30"));
        }
        let base = u32::from(ip);
        let mask = u32::MAX << (32 - prefix);
        if base & !mask != 0 {
            return Err(format!("{s:?}: the address has host bits set; the network is {}/{prefix}", Ipv4Addr::from(base & mask)));
        }
        Ok(Self { base, prefix })
    }
}

/// Values that are taken: cluster IPs and node ports (one range for every protocol, as
/// kube-apiserver's port allocator has).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Cluster IPs.
    pub ips: HashSet<Ipv4Addr>,
    /// Node ports and health-check node ports.
    pub ports: HashSet<u16>,
}

impl Taken {
    /// What the stored Service `svc` holds.
    pub fn add_service(&mut self, svc: &Value) {
        let ips = svc.pointer("/spec/clusterIPs").and_then(Value::as_array).into_iter().flatten().chain(svc.pointer("/spec/clusterIP"));
        self.ips.extend(ips.filter_map(|ip| ip.as_str()?.parse::<Ipv4Addr>().ok()));
        let node_ports = ports(svc).iter().filter_map(|p| p.get("nodePort"));
        self.ports.extend(node_ports.chain(svc.pointer("/spec/healthCheckNodePort")).filter_map(port_value));
    }

    fn extend(&mut self, other: &Taken) {
        self.ips.extend(&other.ips);
        self.ports.extend(&other.ports);
    }

    fn remove(&mut self, other: &Taken) {
        self.ips.retain(|ip| !other.ips.contains(ip));
        self.ports.retain(|p| !other.ports.contains(p));
    }
}

/// Whether a cluster IP or a node port is in use, for [`assign`].
pub trait InUse {
    /// Whether `ip` is taken.
    fn ip(&self, ip: &Ipv4Addr) -> bool;
    /// Whether node port `port` is taken.
    fn port(&self, port: u16) -> bool;
}

impl InUse for Taken {
    fn ip(&self, ip: &Ipv4Addr) -> bool {
        self.ips.contains(ip)
    }
    fn port(&self, port: u16) -> bool {
        self.ports.contains(&port)
    }
}

/// What the stored Services of one workspace hold, by key and counted by value, kept
/// up to date from the store's events.
struct Stored {
    events: WatchStream,
    by_key: HashMap<String, Taken>,
    ips: HashMap<Ipv4Addr, u32>,
    ports: HashMap<u16, u32>,
}

impl Stored {
    /// Lists the Services under `prefix`, and watches them from there.
    fn list(store: &dyn Store, prefix: &str) -> Result<Self, ApiError> {
        let (entries, rev) = store.list(prefix, None, None);
        let events = store.watch(prefix, rev).map_err(|e| ApiError::internal(format!("watching the Services to allocate from: {e}")))?;
        let mut stored = Stored { events, by_key: HashMap::new(), ips: HashMap::new(), ports: HashMap::new() };
        for (key, entry) in entries {
            stored.set(key, Some(&entry.value));
        }
        Ok(stored)
    }

    /// Takes in the Service stored at `key` now (`None`: deleted).
    fn set(&mut self, key: String, svc: Option<&Value>) {
        if let Some(old) = self.by_key.remove(&key) {
            for ip in &old.ips {
                count_down(&mut self.ips, ip);
            }
            for port in &old.ports {
                count_down(&mut self.ports, port);
            }
        }
        let Some(svc) = svc else { return };
        let mut now = Taken::default();
        now.add_service(svc);
        for ip in &now.ips {
            *self.ips.entry(*ip).or_default() += 1;
        }
        for port in &now.ports {
            *self.ports.entry(*port).or_default() += 1;
        }
        if !now.ips.is_empty() || !now.ports.is_empty() {
            self.by_key.insert(key, now);
        }
    }

    /// Takes in every write stored since the last call; `false` when the events were
    /// lost (the window moved past them), and the Services must be listed again.
    fn catch_up(&mut self) -> bool {
        while let Some(ev) = self.events.try_next() {
            let Ok(ev) = ev else { return false };
            let now = (ev.kind != EventType::Deleted).then(|| ev.object());
            self.set(ev.key.clone(), now.as_deref());
        }
        true
    }
}

fn count_down<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, k: &K) {
    if let Some(n) = counts.get_mut(k) {
        *n -= 1;
        if *n == 0 {
            counts.remove(k);
        }
    }
}

/// What one allocation sees as taken: what is stored but what the Service being
/// written holds itself, and what writes in flight were handed.
struct View<'a> {
    stored: &'a Stored,
    own: Option<&'a Taken>,
    in_flight: &'a Taken,
}

impl InUse for View<'_> {
    fn ip(&self, ip: &Ipv4Addr) -> bool {
        let own = self.own.is_some_and(|o| o.ips.contains(ip)) as u32;
        self.in_flight.ips.contains(ip) || self.stored.ips.get(ip).is_some_and(|n| *n > own)
    }
    fn port(&self, port: u16) -> bool {
        let own = self.own.is_some_and(|o| o.ports.contains(&port)) as u32;
        self.in_flight.ports.contains(&port) || self.stored.ports.get(&port).is_some_and(|n| *n > own)
    }
}

#[derive(Default)]
struct State {
    /// Per workspace's Services (by store prefix), what they hold.
    stored: HashMap<String, Stored>,
    /// Values handed out to writes that are not stored yet.
    in_flight: Taken,
}

/// The allocator of one physical cluster's cluster IPs and node ports.
pub struct ServiceAllocator {
    range: Ipv4Cidr,
    /// What is taken. The lock also serializes allocations: the store's events are
    /// read and the new values reserved under it.
    state: Mutex<State>,
}

impl fmt::Debug for ServiceAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAllocator").field("range", &self.range).finish_non_exhaustive()
    }
}

/// Values reserved for a write until it has been stored (or has failed); dropping it
/// releases the reservation, and the stored Service then holds them, or nothing does.
#[must_use = "the values are reserved only while this is held"]
#[derive(Debug)]
pub struct Held<'a> {
    allocator: &'a ServiceAllocator,
    taken: Taken,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.allocator.state.lock().unwrap_or_else(|e| e.into_inner()).in_flight.remove(&self.taken);
    }
}

impl ServiceAllocator {
    /// An allocator of cluster IPs from `range` and node ports from [`NODE_PORTS`].
    pub fn new(range: Ipv4Cidr) -> Self {
        Self { range, state: Mutex::default() }
    }

    /// The service range.
    pub fn range(&self) -> Ipv4Cidr {
        self.range
    }

    /// Gives a Service about to be stored (its type, workspace and namespace) what it needs: `obj` is the
    /// admitted object, `old` the stored one of an update. Anything other than a
    /// Service, and an update that leaves the spec as it was, pass untouched.
    pub fn admit(
        &self,
        store: &dyn Store,
        (rt, workspace, namespace): (&ResourceType, &str, &str),
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<Option<Held<'_>>, ApiError> {
        if !rt.group.is_empty() || rt.plural != "services" {
            return Ok(None);
        }
        if old.is_some_and(|old| old.get("spec") == obj.get("spec")) {
            return Ok(None);
        }
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let own_key = rt.key(workspace, namespace, &name);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let prefix = rt.prefix(Some(workspace), None);
        let caught_up = state.stored.get_mut(&prefix).is_some_and(Stored::catch_up);
        if !caught_up {
            let listed = Stored::list(store, &prefix)?;
            state.stored.insert(prefix.clone(), listed);
        }
        let State { stored, in_flight } = &mut *state;
        let stored = &stored[&prefix];
        let used = View { stored, own: stored.by_key.get(&own_key), in_flight };
        let mut rng = rand::rng();
        let taken = assign(obj, old, self.range, &used, &mut |n| rng.random_range(0..n)).map_err(|refusal| refusal.into_error(&name))?;
        in_flight.extend(&taken);
        Ok(Some(Held { allocator: self, taken }))
    }
}

/// Why a Service cannot have what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// 422 Invalid, with its causes.
    Invalid(Vec<Cause>),
    /// 500: a range is full, or a health-check port is taken (kube answers both so).
    Internal(String),
}

impl Refusal {
    fn into_error(self, name: &str) -> ApiError {
        match self {
            Refusal::Invalid(causes) => ApiError::invalid("Service", ObjRef { group: "", resource: "services", name }, causes),
            Refusal::Internal(message) => ApiError::internal(format!("Internal error occurred: {message}")),
        }
    }
}

fn invalid(field: &str, value: impl fmt::Display, why: &str) -> Refusal {
    Refusal::Invalid(vec![Cause::new("FieldValueInvalid", field, format!("Invalid value: {value}: {why}"))])
}

fn spec_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/spec/{field}")).and_then(Value::as_str).unwrap_or_default()
}

fn ports(obj: &Value) -> &[Value] {
    obj.pointer("/spec/ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn port_value(v: &Value) -> Option<u16> {
    v.as_u64().and_then(|n| u16::try_from(n).ok()).filter(|n| *n != 0)
}

fn spec_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    obj["spec"].as_object_mut().expect("spec is an object")
}

/// `[]string{"a", "b"}`, as Go's `%#v` prints the clusterIPs in kube's messages.
fn go_strings(ips: &[&str]) -> String {
    let quoted: Vec<String> = ips.iter().map(|ip| format!("{ip:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// The index of a free value among `size`, as kube's allocators pick one: a random
/// start in the upper band, scanning on, then the lower band, which is kept for values
/// that clients ask for by number (KEP-3070 and KEP-3668). `offset` is the size of the
/// lower band, `random(n)` a uniform pick below `n`.
fn pick(size: u32, offset: u32, random: &mut dyn FnMut(u32) -> u32, taken: impl Fn(u32) -> bool) -> Option<u32> {
    let offset = offset.min(size);
    let upper = size - offset;
    let start = if upper > 0 { random(upper) } else { 0 };
    let upper_band = (0..upper).map(|i| offset + (start + i) % upper);
    upper_band.chain(0..offset).find(|i| !taken(*i))
}

/// The lower band's size: `size / step`, within `[min, max]` (ipallocator and
/// portallocator `calculateRangeOffset`).
fn band(size: u32, min: u32, max: u32, step: u32) -> u32 {
    (size / step).clamp(min, max)
}

/// The pure core of [`ServiceAllocator::admit`]: gives `obj` (a defaulted and
/// validated Service; `old` the stored one of an update) its cluster IP, node ports
/// and health-check node port, honouring requested values that are free, given what
/// `used` holds. Returns what it newly took.
pub fn assign(
    obj: &mut Value,
    old: Option<&Value>,
    range: Ipv4Cidr,
    used: &dyn InUse,
    random: &mut dyn FnMut(u32) -> u32,
) -> Result<Taken, Refusal> {
    let mut taken = Taken::default();
    assign_cluster_ip(obj, old, range, used, random, &mut taken)?;
    assign_node_ports(obj, old, used, random, &mut taken)?;
    Ok(taken)
}

/// The cluster IP, `clusterIPs` and the IP family fields (allocClusterIPs and
/// initIPFamilyFields, for a single-stack IPv4 cluster).
fn assign_cluster_ip(
    obj: &mut Value,
    old: Option<&Value>,
    range: Ipv4Cidr,
    used: &dyn InUse,
    random: &mut dyn FnMut(u32) -> u32,
    taken: &mut Taken,
) -> Result<(), Refusal> {
    if spec_str(obj, "type") == "ExternalName" {
        return Ok(());
    }
    let requested = match spec_str(obj, "clusterIP") {
        "" => obj.pointer("/spec/clusterIPs/0").and_then(Value::as_str).unwrap_or_default().to_string(),
        ip => ip.to_string(),
    };
    let policy = spec_str(obj, "ipFamilyPolicy").to_string();
    if requested == "None" {
        // A headless Service without a selector asks for every family the cluster has;
        // a single-stack cluster records both, as kube-apiserver does.
        let selectorless = obj.pointer("/spec/selector").and_then(Value::as_object).is_none_or(|m| m.is_empty());
        let spec = spec_mut(obj);
        spec.insert("clusterIP".into(), json!("None"));
        spec.insert("clusterIPs".into(), json!(["None"]));
        let policy = if policy.is_empty() && selectorless { "RequireDualStack".to_string() } else { policy };
        let policy = if policy.is_empty() { "SingleStack".to_string() } else { policy };
        if spec.get("ipFamilies").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
            let families = if policy == "SingleStack" { json!(["IPv4"]) } else { json!(["IPv4", "IPv6"]) };
            spec.insert("ipFamilies".into(), families);
        }
        spec.insert("ipFamilyPolicy".into(), json!(policy));
        return Ok(());
    }
    if policy == "RequireDualStack" {
        return Err(invalid("spec.ipFamilyPolicy", "\"RequireDualStack\"", "this cluster is not configured for dual-stack services"));
    }
    let families = obj.pointer("/spec/ipFamilies").and_then(Value::as_array).cloned().unwrap_or_default();
    for (i, family) in families.iter().enumerate() {
        if family.as_str() != Some("IPv4") {
            return Err(invalid(&format!("spec.ipFamilies[{i}]"), family, "not configured on this cluster"));
        }
    }
    let kept = old
        .filter(|old| spec_str(old, "type") != "ExternalName")
        .map(|old| spec_str(old, "clusterIP"))
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(String::from);
    let ip = match (requested.as_str(), kept) {
        // Validation refuses a change of a set cluster IP; what is left is keeping it.
        ("", Some(kept)) => kept,
        (requested, Some(kept)) if requested == kept => kept,
        ("", None) => {
            let size = range.size();
            let free = pick(size, band(size, 16, 256, 16), random, |i| used.ip(&range.nth(i)));
            let ip = free.map(|i| range.nth(i)).ok_or_else(|| Refusal::Internal("failed to allocate a serviceIP: range is full".into()))?;
            taken.ips.insert(ip);
            ip.to_string()
        }
        (requested, _) => {
            let failed = |why: String| {
                Refusal::Invalid(vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.clusterIPs",
                    format!("Invalid value: {}: failed to allocate IP {requested}: {why}", go_strings(&[requested])),
                )])
            };
            let ip: Ipv4Addr = match requested.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(ip)) => ip,
                Ok(std::net::IpAddr::V6(_)) => {
                    return Err(Refusal::Invalid(vec![Cause::new(
                        "FieldValueInvalid",
                        "spec.clusterIPs[0]",
                        format!("Invalid value: {}: IPv6 is not configured on this cluster", go_strings(&[requested])),
                    )]))
                }
                Err(_) => return Err(failed("not a valid IP address".into())),
            };
            if !range.contains(ip) {
                return Err(failed(format!("the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}")));
            }
            if used.ip(&ip) {
                return Err(failed("provided IP is already allocated".into()));
            }
            taken.ips.insert(ip);
            ip.to_string()
        }
    };
    let spec = spec_mut(obj);
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.insert("ipFamilies".into(), json!(["IPv4"]));
    if policy.is_empty() {
        spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
    }
    Ok(())
}

/// Node ports (initNodePorts, updateNodePorts) and the health-check node port
/// (allocHealthCheckNodePort, updateHealthCheckNodePort).
fn assign_node_ports(
    obj: &mut Value,
    old: Option<&Value>,
    used: &dyn InUse,
    random: &mut dyn FnMut(u32) -> u32,
    taken: &mut Taken,
) -> Result<(), Refusal> {
    let ty = spec_str(obj, "type").to_string();
    let mut kept = Taken::default();
    if let Some(old) = old {
        kept.add_service(old);
    }
    let size = u32::from(NODE_PORTS.end() - NODE_PORTS.start()) + 1;
    let lower = band(size, 16, 128, 32);
    let mut next_free = |taken: &Taken| {
        let free = pick(size, lower, random, |i| {
            let port = NODE_PORTS.start() + i as u16;
            used.port(port) || taken.ports.contains(&port)
        });
        free.map(|i| NODE_PORTS.start() + i as u16).ok_or_else(|| Refusal::Internal("failed to allocate a nodePort: range is full".into()))
    };
    // A port number served over two protocols (DNS on 53/TCP and 53/UDP) shares one
    // node port, the requested one if either asks.
    let mut by_port: HashMap<u64, u16> = HashMap::new();
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
        let allocate_new = ty == "NodePort" || obj.pointer("/spec/allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false);
        let mut list = ports(obj).to_vec();
        for p in &list {
            if let (Some(port), Some(np)) = (p.get("port").and_then(Value::as_u64), p.get("nodePort").and_then(port_value)) {
                by_port.entry(port).or_insert(np);
            }
        }
        for (i, p) in list.iter_mut().enumerate() {
            let port = p.get("port").and_then(Value::as_u64).unwrap_or_default();
            let node_port = match p.get("nodePort").and_then(port_value) {
                Some(np) => np,
                None if !allocate_new => continue,
                None => match by_port.get(&port) {
                    Some(np) => *np,
                    None => next_free(taken)?,
                },
            };
            if !kept.ports.contains(&node_port) && !taken.ports.contains(&node_port) {
                if used.port(node_port) {
                    return Err(invalid(&format!("spec.ports[{i}].nodePort"), node_port, "provided port is already allocated"));
                }
                taken.ports.insert(node_port);
            }
            by_port.entry(port).or_insert(node_port);
            p["nodePort"] = json!(node_port);
        }
        if !list.is_empty() {
            spec_mut(obj).insert("ports".into(), Value::Array(list));
        }
    }
    let needs_health_check = ty == "LoadBalancer" && spec_str(obj, "externalTrafficPolicy") == "Local";
    let requested = obj.pointer("/spec/healthCheckNodePort").and_then(port_value);
    let old_health_check = old.and_then(|o| o.pointer("/spec/healthCheckNodePort")).and_then(port_value);
    if !needs_health_check {
        match requested {
            // What an update carried over from when it was needed goes, and is freed.
            Some(np) if Some(np) == old_health_check => {
                spec_mut(obj).remove("healthCheckNodePort");
            }
            Some(np) => {
                return Err(invalid(
                    "spec.healthCheckNodePort",
                    np,
                    "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
                ))
            }
            None => {}
        }
        return Ok(());
    }
    let health_check = match requested {
        Some(np) if Some(np) == old_health_check => np,
        Some(np) if used.port(np) || taken.ports.contains(&np) => {
            return Err(Refusal::Internal(format!(
                "failed to allocate requested HealthCheck NodePort {np}: provided port is already allocated"
            )))
        }
        Some(np) => np,
        None => match old_health_check {
            Some(np) => np,
            None => next_free(taken)?,
        },
    };
    if Some(health_check) != old_health_check {
        taken.ports.insert(health_check);
    }
    spec_mut(obj).insert("healthCheckNodePort".into(), json!(health_check));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    /// A defaulted Service of `ty` with the `ports` (port, nodePort; 0 for none).
    fn svc(ty: &str, ports: &[(u16, u16)]) -> Value {
        let ports: Vec<Value> = ports
            .iter()
            .enumerate()
            .map(|(i, (port, np))| {
                let mut p = json!({"name": format!("p{i}"), "port": port, "protocol": "TCP", "targetPort": port});
                if *np != 0 {
                    p["nodePort"] = json!(np);
                }
                p
            })
            .collect();
        json!({"metadata": {"name": "web"}, "spec": {"type": ty, "ports": ports, "selector": {"app": "web"}}})
    }

    fn with(mut v: Value, field: &str, value: Value) -> Value {
        v["spec"][field] = value;
        v
    }

    /// Always the first candidate: deterministic picks.
    fn first(_: u32) -> u32 {
        0
    }

    fn run(obj: &mut Value, old: Option<&Value>, range: &str, used: &Taken) -> Result<Taken, Refusal> {
        assign(obj, old, cidr(range), used, &mut first)
    }

    fn message(r: Refusal) -> String {
        match r {
            Refusal::Invalid(causes) => causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect::<Vec<_>>().join("; "),
            Refusal::Internal(m) => m,
        }
    }

    #[test]
    fn ranges_parse_as_kube_apiserver_accepts_them() {
        let r = cidr("10.96.0.0/16");
        assert_eq!(r, Ipv4Cidr::default());
        assert_eq!(r.to_string(), "10.96.0.0/16");
        assert_eq!(r.size(), 65534);
        assert!(r.contains("10.96.0.1".parse().unwrap()) && r.contains("10.96.255.254".parse().unwrap()));
        assert!(!r.contains("10.96.0.0".parse().unwrap()), "the network address");
        assert!(!r.contains("10.96.255.255".parse().unwrap()), "the broadcast address");
        assert!(!r.contains("10.97.0.1".parse().unwrap()));
        for bad in ["10.96.0.0", "10.96.0.1/16", "10.96.0.0/8", "10.96.0.0/31", "fd00::/108", "ten/16", "10.96.0.0/x"] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cluster_ip_service_gets_a_free_ip_of_the_upper_band_and_single_stack_fields() {
        let mut used = Taken::default();
        // With the deterministic pick, the first candidate is the first of the upper band.
        let upper_start: Ipv4Addr = "10.96.1.1".parse().unwrap();
        used.ips.insert(upper_start);
        let mut s = svc("ClusterIP", &[(80, 0)]);
        let taken = run(&mut s, None, "10.96.0.0/16", &used).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "10.96.1.2");
        assert_eq!(s["spec"]["clusterIPs"], json!(["10.96.1.2"]));
        assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
        assert!(taken.ips.contains(&"10.96.1.2".parse().unwrap()) && taken.ports.is_empty());
        assert!(s["spec"]["ports"][0].get("nodePort").is_none(), "a ClusterIP Service gets no node port");
    }

    #[test]
    fn random_picks_stay_in_range_and_are_distinct_until_the_range_is_full() {
        // A /28 has 14 addresses: all of them are handed out, then the range is full.
        let mut used = Taken::default();
        let mut rng = rand::rng();
        for _ in 0..14 {
            let mut s = svc("ClusterIP", &[(80, 0)]);
            let taken = assign(&mut s, None, cidr("10.0.0.0/28"), &used, &mut |n| rng.random_range(0..n)).unwrap();
            let ip: Ipv4Addr = s["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
            assert!(cidr("10.0.0.0/28").contains(ip));
            assert!(!used.ips.contains(&ip));
            used.extend(&taken);
        }
        let mut s = svc("ClusterIP", &[(80, 0)]);
        let full = run(&mut s, None, "10.0.0.0/28", &used).unwrap_err();
        assert_eq!(message(full), "failed to allocate a serviceIP: range is full");
        // Released (the Service holding it is gone): handed out again.
        used.ips.remove(&"10.0.0.7".parse().unwrap());
        run(&mut s, None, "10.0.0.0/28", &used).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "10.0.0.7");
    }

    #[test]
    fn a_requested_ip_is_honoured_when_free_and_refused_as_kube_refuses_it() {
        let mut used = Taken::default();
        let mut s = with(svc("ClusterIP", &[(53, 0)]), "clusterIP", json!("10.96.0.10"));
        let taken = run(&mut s, None, "10.96.0.0/16", &used).unwrap();
        assert_eq!(s["spec"]["clusterIPs"], json!(["10.96.0.10"]));
        used.extend(&taken);

        let mut again = with(svc("ClusterIP", &[(53, 0)]), "clusterIP", json!("10.96.0.10"));
        assert_eq!(
            message(run(&mut again, None, "10.96.0.0/16", &used).unwrap_err()),
            "spec.clusterIPs: Invalid value: []string{\"10.96.0.10\"}: failed to allocate IP 10.96.0.10: provided IP is already allocated"
        );
        let mut outside = with(svc("ClusterIP", &[(53, 0)]), "clusterIP", json!("1.1.1.1"));
        assert_eq!(
            message(run(&mut outside, None, "10.96.0.0/16", &used).unwrap_err()),
            "spec.clusterIPs: Invalid value: []string{\"1.1.1.1\"}: failed to allocate IP 1.1.1.1: the provided IP (1.1.1.1) is not in the valid range. The range of valid IPs is 10.96.0.0/16"
        );
        let mut v6 = with(svc("ClusterIP", &[(53, 0)]), "clusterIP", json!("fd00::1"));
        assert!(message(run(&mut v6, None, "10.96.0.0/16", &used).unwrap_err()).contains("IPv6 is not configured on this cluster"));
        let mut dual = with(svc("ClusterIP", &[(53, 0)]), "ipFamilyPolicy", json!("RequireDualStack"));
        assert!(message(run(&mut dual, None, "10.96.0.0/16", &used).unwrap_err()).contains("not configured for dual-stack"));
    }

    #[test]
    fn headless_and_external_name_services_get_no_ip() {
        let mut headless = with(svc("ClusterIP", &[]), "clusterIP", json!("None"));
        assert!(run(&mut headless, None, "10.96.0.0/16", &Taken::default()).unwrap().ips.is_empty());
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(headless["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(headless["spec"]["ipFamilies"], json!(["IPv4"]));
        let mut selectorless = with(with(svc("ClusterIP", &[]), "clusterIP", json!("None")), "selector", Value::Null);
        run(&mut selectorless, None, "10.96.0.0/16", &Taken::default()).unwrap();
        assert_eq!(selectorless["spec"]["ipFamilyPolicy"], "RequireDualStack");
        assert_eq!(selectorless["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));

        let mut external = with(svc("ExternalName", &[]), "externalName", json!("db.example.com"));
        assert_eq!(run(&mut external, None, "10.96.0.0/16", &Taken::default()).unwrap(), Taken::default());
        assert!(external["spec"].get("clusterIP").is_none() && external["spec"].get("ipFamilies").is_none());
    }

    #[test]
    fn node_ports_are_allocated_honoured_refused_and_shared_by_protocols() {
        let mut used = Taken::default();
        let mut s = svc("NodePort", &[(80, 30080), (443, 0)]);
        let taken = run(&mut s, None, "10.96.0.0/16", &used).unwrap();
        assert_eq!(s["spec"]["ports"][0]["nodePort"], 30080);
        // The first port of the upper band (30000 + 86).
        assert_eq!(s["spec"]["ports"][1]["nodePort"], 30086);
        assert_eq!(taken.ports, HashSet::from([30080, 30086]));
        used.extend(&taken);

        let mut dup = svc("NodePort", &[(8080, 30080)]);
        assert_eq!(
            message(run(&mut dup, None, "10.96.0.0/16", &used).unwrap_err()),
            "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        );

        let mut dns = svc("NodePort", &[(53, 0), (53, 0)]);
        dns["spec"]["ports"][1]["protocol"] = json!("UDP");
        let taken = run(&mut dns, None, "10.96.0.0/16", &used).unwrap();
        assert_eq!(dns["spec"]["ports"][0]["nodePort"], dns["spec"]["ports"][1]["nodePort"]);
        assert_eq!(taken.ports.len(), 1);

        let mut no_lb_ports = with(svc("LoadBalancer", &[(80, 0)]), "allocateLoadBalancerNodePorts", json!(false));
        run(&mut no_lb_ports, None, "10.96.0.0/16", &used).unwrap();
        assert!(no_lb_ports["spec"]["ports"][0].get("nodePort").is_none());
    }

    #[test]
    fn node_ports_run_out_with_kubes_message() {
        let used = Taken { ips: HashSet::new(), ports: NODE_PORTS.collect() };
        let mut s = svc("NodePort", &[(80, 0)]);
        assert_eq!(message(run(&mut s, None, "10.96.0.0/16", &used).unwrap_err()), "failed to allocate a nodePort: range is full");
    }

    #[test]
    fn a_local_load_balancer_gets_a_health_check_node_port_that_an_update_keeps() {
        let mut s = with(svc("LoadBalancer", &[(80, 0)]), "externalTrafficPolicy", json!("Local"));
        let taken = run(&mut s, None, "10.96.0.0/16", &Taken::default()).unwrap();
        let hc = s["spec"]["healthCheckNodePort"].as_u64().unwrap() as u16;
        assert!(NODE_PORTS.contains(&hc) && taken.ports.contains(&hc) && taken.ports.len() == 2);

        // An update that changes something else keeps every value and takes nothing new.
        let mut update = s.clone();
        update["spec"]["selector"] = json!({"app": "web2"});
        assert_eq!(run(&mut update, Some(&s), "10.96.0.0/16", &taken).unwrap(), Taken::default());
        assert_eq!(update["spec"], {
            let mut expected = s["spec"].clone();
            expected["selector"] = json!({"app": "web2"});
            expected
        });

        // Back to Cluster: the health-check port goes.
        let mut cluster = with(s.clone(), "externalTrafficPolicy", json!("Cluster"));
        run(&mut cluster, Some(&s), "10.96.0.0/16", &taken).unwrap();
        assert!(cluster["spec"].get("healthCheckNodePort").is_none());
    }

    #[test]
    fn type_changes_allocate_what_the_new_type_needs() {
        let mut s = svc("ClusterIP", &[(80, 0)]);
        let used = run(&mut s, None, "10.96.0.0/16", &Taken::default()).unwrap();
        let ip = s["spec"]["clusterIP"].clone();

        // ClusterIP to NodePort: the IP stays, a node port is allocated.
        let mut node_port = with(s.clone(), "type", json!("NodePort"));
        let taken = run(&mut node_port, Some(&s), "10.96.0.0/16", &Taken::default()).unwrap();
        assert_eq!(node_port["spec"]["clusterIP"], ip);
        assert!(taken.ips.is_empty() && taken.ports.len() == 1);

        // ExternalName to ClusterIP: a new IP.
        let external = with(svc("ExternalName", &[(80, 0)]), "externalName", json!("db.example.com"));
        let mut back = svc("ClusterIP", &[(80, 0)]);
        let taken = run(&mut back, Some(&external), "10.96.0.0/16", &used).unwrap();
        assert_eq!(taken.ips.len(), 1);
        assert_ne!(back["spec"]["clusterIP"], ip);
    }

    #[test]
    fn what_stored_services_hold_is_in_use_so_a_restart_rebuilds_it() {
        let stored = [
            json!({"spec": {"type": "NodePort", "clusterIP": "10.96.1.2", "clusterIPs": ["10.96.1.2"], "ports": [{"port": 80, "nodePort": 30086}]}}),
            json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.96.1.3", "ports": [{"port": 80, "nodePort": 30087}], "healthCheckNodePort": 30088}}),
            json!({"spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}}),
        ];
        let mut used = Taken::default();
        stored.iter().for_each(|s| used.add_service(s));
        assert_eq!(used.ips, HashSet::from(["10.96.1.2".parse().unwrap(), "10.96.1.3".parse().unwrap()]));
        assert_eq!(used.ports, HashSet::from([30086, 30087, 30088]));
        let mut s = svc("NodePort", &[(80, 0)]);
        run(&mut s, None, "10.96.0.0/16", &used).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "10.96.1.1");
        assert_eq!(s["spec"]["ports"][0]["nodePort"], 30089);
    }

    #[test]
    fn picks_scan_the_upper_band_then_the_lower_one() {
        assert_eq!(band(65534, 16, 256, 16), 256);
        assert_eq!(band(14, 16, 256, 16), 16);
        assert_eq!(band(2768, 16, 128, 32), 86);
        // Start in the middle of the upper band, wrap inside it, then fall back to the lower.
        let taken = |i: u32| i >= 5;
        assert_eq!(pick(10, 3, &mut |_| 4, taken), Some(3));
        assert_eq!(pick(10, 3, &mut |_| 4, |i| (3..10).contains(&i)), Some(0));
        assert_eq!(pick(10, 3, &mut |_| 4, |_| true), None);
        assert_eq!(pick(10, 3, &mut |_| 0, |i| i == 3), Some(4));
    }
}
