//! The simulated cluster's load-balancer provider and Ingress controller: Services of
//! type LoadBalancer get an address of the cluster's pool in `status.loadBalancer`, as
//! MetalLB (or kind's cloud-provider-kind) gives them, and every Ingress reports the
//! cluster's Ingress address.
//!
//! [`plan`] is the pure core: from the Services as stored it decides who holds which
//! address. An address stays with the Service that holds it; one that is free goes to
//! the oldest Service waiting, lowest address first, as MetalLB allocates; a Service
//! that finds the pool exhausted stays pending with a Warning Event. What a Service
//! holds is read back from its status, so a restart changes nothing. Services that name
//! a `loadBalancerClass` belong to another provider and are left alone. [`run`] watches
//! the store and writes only what differs, each write conditional on the
//! resourceVersion it was computed from.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use controlplane::api::{Api, FieldValidation, Scope, Sub, WriteOptions};
use jiff::Timestamp;
use serde_json::{json, Value};
use tokio::sync::watch;
use tracing::Instrument;

use crate::config::{AddressPool, ClusterDef};

/// The only logical cluster a simulated cluster serves.
const CLUSTER: &str = placement_api::keys::ROOT_WORKSPACE;
/// The field manager of the status writes, and the component of the Events.
const MANAGER: &str = "metallb-controller";
/// How long to wait for more changes before reconciling a burst.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// The longest pause between reconciles, as a periodic resync.
const RESYNC: Duration = Duration::from_secs(10);

/// What a Service of type LoadBalancer gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It keeps the address its status holds.
    Kept(Ipv4Addr),
    /// It gets a free address of the pool.
    Assigned(Ipv4Addr),
    /// The pool has no free address: it waits.
    Exhausted,
}

/// A Service as [`plan`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its store key, which names it in the plan.
    pub key: String,
    /// Its creation time (RFC 3339, which sorts as time does).
    pub created: String,
    /// The IPv4 addresses its status reports.
    pub holds: Vec<Ipv4Addr>,
}

impl Candidate {
    /// A stored Service, if it is one this provider serves (type LoadBalancer, no class).
    pub fn of(key: &str, svc: &Value) -> Option<Self> {
        let spec = svc.get("spec")?;
        if spec.get("type").and_then(Value::as_str) != Some("LoadBalancer") {
            return None;
        }
        if spec.get("loadBalancerClass").and_then(Value::as_str).is_some_and(|c| !c.is_empty()) {
            return None;
        }
        let created = svc.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or_default().to_string();
        let holds = lb_ingress(svc).iter().filter_map(|i| i.get("ip")?.as_str()?.parse().ok()).collect();
        Some(Self { key: key.to_string(), created, holds })
    }
}

/// Who gets which address: `services` are the load balancers of the cluster. An address
/// of the pool that a Service already holds stays with it (the oldest, should two claim
/// one); then the Services with none take the lowest free addresses, oldest first.
pub fn plan(pool: &AddressPool, services: &[Candidate]) -> HashMap<String, Outcome> {
    let mut order: Vec<&Candidate> = services.iter().collect();
    order.sort_by(|a, b| (&a.created, &a.key).cmp(&(&b.created, &b.key)));
    let mut taken: HashSet<Ipv4Addr> = HashSet::new();
    let mut out = HashMap::new();
    for svc in &order {
        if let Some(ip) = svc.holds.iter().find(|ip| pool.contains(**ip) && !taken.contains(*ip)) {
            taken.insert(*ip);
            out.insert(svc.key.clone(), Outcome::Kept(*ip));
        }
    }
    let mut free = pool.addresses().filter(|ip| !taken.contains(ip));
    for svc in order {
        out.entry(svc.key.clone()).or_insert_with(|| free.next().map_or(Outcome::Exhausted, Outcome::Assigned));
    }
    out
}

fn lb_ingress(obj: &Value) -> &[Value] {
    obj.pointer("/status/loadBalancer/ingress").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The `status.loadBalancer.ingress` entry of an address: a Service's is a VIP; an
/// Ingress's is an IP or a host name.
fn ingress_entry(address: &str, service: bool) -> Value {
    match (address.parse::<std::net::IpAddr>(), service) {
        (Ok(_), true) => json!({"ip": address, "ipMode": "VIP"}),
        (Ok(_), false) => json!({"ip": address}),
        (Err(_), _) => json!({"hostname": address}),
    }
}

/// The provider of one simulated cluster.
struct Provider {
    api: Arc<Api>,
    pool: AddressPool,
    ingress_address: Option<String>,
    services: Option<Scope>,
    ingresses: Option<Scope>,
    /// Services (by uid) that have been told the pool is exhausted, so that a Service
    /// waiting gets one Warning, not one per reconcile.
    warned: HashSet<String>,
}

fn opts() -> WriteOptions {
    WriteOptions { field_manager: MANAGER.into(), validation: FieldValidation::Ignore, dry_run: false, guard: None }
}

fn scope(api: &Api, group: &str, plural: &str) -> Option<Scope> {
    let rt = api.registry.lookup(CLUSTER, group, "v1", plural)?;
    Some(Scope { rt, workspace: CLUSTER.into(), namespace: String::new() })
}

fn in_namespace(scope: &Scope, obj: &Value) -> Scope {
    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    Scope { namespace: ns.to_string(), ..scope.clone() }
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

impl Provider {
    /// Writes `status.loadBalancer.ingress = entries` (none: an empty `loadBalancer`)
    /// on `obj` unless it already says so, conditional on the version read.
    async fn set_ingress(&self, scope: &Scope, obj: &Value, entries: Vec<Value>) -> bool {
        if lb_ingress(obj) == entries.as_slice() {
            return false;
        }
        let mut updated = obj.clone();
        updated["status"]["loadBalancer"] = if entries.is_empty() { json!({}) } else { json!({"ingress": entries}) };
        let scope = in_namespace(scope, obj);
        match self.api.update(&scope, name_of(obj), updated, Sub::Status, &opts()).await {
            Ok(_) => true,
            // Changed or gone since it was read: its next event brings another reconcile.
            Err(e) if matches!(e.code, 404 | 409) => false,
            Err(e) => {
                tracing::warn!(object = %name_of(obj), error = %e, "writing the load-balancer status failed; retrying on the next reconcile");
                false
            }
        }
    }

    /// Records an Event about the Service `svc`, as MetalLB's controller does.
    async fn event(&self, svc: &Value, type_: &str, reason: &str, message: String) {
        let Some(events) = scope(&self.api, "", "events") else { return };
        let now = Timestamp::now();
        let time = Timestamp::from_second(now.as_second()).unwrap_or(now).to_string();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{}.{:x}", name_of(svc), now.as_nanosecond())},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Service",
                "name": name_of(svc),
                "namespace": svc.pointer("/metadata/namespace"),
                "uid": svc.pointer("/metadata/uid"),
                "resourceVersion": svc.pointer("/metadata/resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": MANAGER},
            "reportingComponent": MANAGER,
            "reportingInstance": MANAGER,
            "firstTimestamp": time,
            "lastTimestamp": time,
            "count": 1,
        });
        if let Err(e) = self.api.create(&in_namespace(&events, svc), event, &opts()).await {
            tracing::warn!(service = %name_of(svc), error = %e, "recording an event failed");
        }
    }

    async fn reconcile(&mut self) {
        if let (Some(services), false) = (self.services.clone(), self.pool.is_empty()) {
            let (stored, _) = self.api.store.list(&services.prefix(), None, None);
            let candidates: Vec<Candidate> = stored.iter().filter_map(|(key, e)| Candidate::of(key, &e.value)).collect();
            let outcomes = plan(&self.pool, &candidates);
            for (key, entry) in &stored {
                let svc = &*entry.value;
                let uid = svc.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string();
                match outcomes.get(key) {
                    // No longer a load balancer of ours: what it held goes.
                    None => {
                        if !lb_ingress(svc).is_empty() && !is_classed_lb(svc) {
                            self.set_ingress(&services, svc, Vec::new()).await;
                        }
                    }
                    Some(Outcome::Kept(ip)) | Some(Outcome::Assigned(ip)) => {
                        self.warned.remove(&uid);
                        let ip = ip.to_string();
                        if self.set_ingress(&services, svc, vec![ingress_entry(&ip, true)]).await {
                            self.event(svc, "Normal", "IPAllocated", format!("Assigned IP [\"{ip}\"]")).await;
                        }
                    }
                    Some(Outcome::Exhausted) => {
                        self.set_ingress(&services, svc, Vec::new()).await;
                        if self.warned.insert(uid) {
                            let ns = svc.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
                            let message = format!("Failed to allocate IP for \"{ns}/{}\": no available IPs", name_of(svc));
                            self.event(svc, "Warning", "AllocationFailed", message).await;
                        }
                    }
                }
            }
            let live: HashSet<&str> = stored.iter().filter_map(|(_, e)| e.value.pointer("/metadata/uid")?.as_str()).collect();
            self.warned.retain(|uid| live.contains(uid.as_str()));
        }
        if let (Some(ingresses), Some(address)) = (self.ingresses.clone(), self.ingress_address.clone()) {
            let (stored, _) = self.api.store.list(&ingresses.prefix(), None, None);
            for (_, entry) in &stored {
                self.set_ingress(&ingresses, &entry.value, vec![ingress_entry(&address, false)]).await;
            }
        }
    }
}

fn is_classed_lb(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer")
        && svc.pointer("/spec/loadBalancerClass").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
}

/// Runs the provider of the cluster `def` until `stop` turns true or the store closes.
/// With neither a pool nor an Ingress address there is nothing to do, and nothing runs.
pub async fn run(api: Arc<Api>, def: &ClusterDef, mut stop: watch::Receiver<bool>) {
    if def.load_balancer_pool.is_empty() && def.ingress_address.is_none() {
        return;
    }
    let services = scope(&api, "", "services");
    let ingresses = scope(&api, "networking.k8s.io", "ingresses");
    let prefixes: Vec<String> = [&services, &ingresses].into_iter().flatten().map(Scope::prefix).collect();
    let mut provider = Provider {
        api: api.clone(),
        pool: def.load_balancer_pool.clone(),
        ingress_address: def.ingress_address.clone(),
        services,
        ingresses,
        warned: HashSet::new(),
    };
    let span = tracing::info_span!("load-balancers", cluster = %def.name);
    async move {
        'watch: loop {
            // Watch from before the first read, so that nothing written after it is missed.
            let mut events = match api.store.watch("", api.store.revision()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot watch the store");
                    return;
                }
            };
            loop {
                provider.reconcile().await;
                // Wait for a change of a Service or an Ingress, then take the rest of its burst.
                let resync = tokio::time::sleep(RESYNC);
                tokio::pin!(resync);
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        _ = &mut resync => break,
                        ev = events.next() => match ev {
                            None => return,
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "the store watch failed; watching again");
                                continue 'watch;
                            }
                            Some(Ok(ev)) if prefixes.iter().any(|p| ev.key.starts_with(p.as_str())) => {
                                let until = tokio::time::Instant::now() + DEBOUNCE;
                                while let Ok(next) = tokio::time::timeout_at(until, events.next()).await {
                                    match next {
                                        Some(Ok(_)) => {}
                                        None => return,
                                        Some(Err(e)) => {
                                            tracing::warn!(error = %e, "the store watch failed; watching again");
                                            continue 'watch;
                                        }
                                    }
                                }
                                break;
                            }
                            Some(Ok(_)) => {}
                        },
                    }
                }
                if *stop.borrow() {
                    return;
                }
            }
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(s: &str) -> AddressPool {
        AddressPool::parse(s.split(',')).unwrap()
    }

    fn lb(key: &str, created: &str, holds: &[&str]) -> Candidate {
        Candidate { key: key.into(), created: created.into(), holds: holds.iter().map(|ip| ip.parse().unwrap()).collect() }
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn the_oldest_waiting_service_gets_the_lowest_free_address_and_holders_keep_theirs() {
        let p = pool("10.0.0.1-10.0.0.3");
        let services =
            [lb("c", "2024-01-01T00:00:03Z", &[]), lb("a", "2024-01-01T00:00:01Z", &["10.0.0.2"]), lb("b", "2024-01-01T00:00:02Z", &[])];
        let out = plan(&p, &services);
        assert_eq!(out["a"], Outcome::Kept(ip("10.0.0.2")));
        assert_eq!(out["b"], Outcome::Assigned(ip("10.0.0.1")));
        assert_eq!(out["c"], Outcome::Assigned(ip("10.0.0.3")));
    }

    #[test]
    fn an_exhausted_pool_leaves_the_newest_pending_until_an_address_is_freed() {
        let p = pool("10.0.0.1-10.0.0.2");
        let mut services = vec![
            lb("a", "2024-01-01T00:00:01Z", &["10.0.0.1"]),
            lb("b", "2024-01-01T00:00:02Z", &["10.0.0.2"]),
            lb("c", "2024-01-01T00:00:03Z", &[]),
        ];
        assert_eq!(plan(&p, &services)["c"], Outcome::Exhausted);
        // `a` is deleted: its address goes to the one waiting.
        services.remove(0);
        let out = plan(&p, &services);
        assert_eq!(out["b"], Outcome::Kept(ip("10.0.0.2")));
        assert_eq!(out["c"], Outcome::Assigned(ip("10.0.0.1")));
    }

    #[test]
    fn addresses_outside_the_pool_or_claimed_twice_are_replaced() {
        let p = pool("10.0.0.1-10.0.0.3");
        let services = [
            lb("old", "2024-01-01T00:00:01Z", &["10.0.0.3"]),
            lb("copy", "2024-01-01T00:00:02Z", &["10.0.0.3"]),
            lb("foreign", "2024-01-01T00:00:03Z", &["192.168.1.1"]),
        ];
        let out = plan(&p, &services);
        assert_eq!(out["old"], Outcome::Kept(ip("10.0.0.3")));
        assert_eq!(out["copy"], Outcome::Assigned(ip("10.0.0.1")));
        assert_eq!(out["foreign"], Outcome::Assigned(ip("10.0.0.2")));
    }

    #[test]
    fn only_classless_load_balancers_are_candidates() {
        let svc = |spec: Value| {
            json!({"metadata": {"creationTimestamp": "2024-01-01T00:00:01Z"}, "spec": spec,
                                        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "ipMode": "VIP"}]}}})
        };
        let c = Candidate::of("k", &svc(json!({"type": "LoadBalancer"}))).unwrap();
        assert_eq!(c.holds, [ip("10.0.0.1")]);
        assert!(Candidate::of("k", &svc(json!({"type": "NodePort"}))).is_none());
        assert!(Candidate::of("k", &svc(json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}))).is_none());
    }

    #[test]
    fn ingress_entries_are_vips_ips_or_host_names() {
        assert_eq!(ingress_entry("172.18.255.200", true), json!({"ip": "172.18.255.200", "ipMode": "VIP"}));
        assert_eq!(ingress_entry("172.18.255.10", false), json!({"ip": "172.18.255.10"}));
        assert_eq!(ingress_entry("lb.example.com", false), json!({"hostname": "lb.example.com"}));
    }
}
