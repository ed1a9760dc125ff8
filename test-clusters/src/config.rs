//! Cluster definition files.
//!
//! A file holds one cluster (a YAML mapping) or several (a YAML sequence of mappings):
//!
//! ```yaml
//! name: east
//! labels: {region: us}
//! nodes:
//!   - count: 2          # a node group; each of its nodes gets these
//!     cpu: "4"
//!     memory: 8Gi
//!     pods: 110         # optional, default 110 (the kubelet's default maxPods)
//!     labels: {}        # optional
//! startupDelay: 300ms   # optional, default 1s
//! serviceCIDR: 10.96.0.0/16                      # optional, this is the default
//! loadBalancerPool: 172.18.255.200-172.18.255.219 # optional: a range, a CIDR, or a list of them
//! ingressAddress: 172.18.255.10                  # optional: an IP address or a host name
//! failingImages: [registry.example.com/app:1.2]   # optional: images that never run
//! ```
//!
//! `labels` describe the cluster as a whole (they go on its SyncTarget); node group labels go
//! on the nodes. `startupDelay` is how long a bound pod stays `ContainerCreating` before it
//! runs and turns Ready; it is a Go duration. The 1s default is long enough for
//! `kubectl rollout status` to show intermediate states and short enough for tests.
//!
//! `serviceCIDR` is the range Services get their cluster IPs from (kube-apiserver's
//! `--service-cluster-ip-range`; kind's default). `loadBalancerPool` holds the addresses
//! that Services of type LoadBalancer get, as MetalLB's address pools do; without one they
//! stay `<pending>`, as on a kind cluster with no load-balancer provider. `ingressAddress`
//! is what every Ingress reports as its address; without one Ingresses report none.
//!
//! Two rules make failures easy to stage in tests and demos:
//! - a pod that does not restart forever (`restartPolicy: Never` or `OnFailure`, a
//!   Job's) runs for the seconds in its annotation `sim.flotilla.io/run-seconds`
//!   (default 2, counted from when it is Running), then exits 0 and is `Succeeded`;
//! - a container whose image has the tag `broken` (`nginx:broken`), or is listed in
//!   `failingImages`, never becomes Ready: in a pod that restarts (a Deployment's,
//!   StatefulSet's or DaemonSet's) it crash-loops, its restart count rising on the
//!   kubelet's back-off (10 s, doubling, at most 5 min) with the container waiting in
//!   `CrashLoopBackOff`; in a pod that does not, it exits 1 and the pod is `Failed`.
//!
//! Unknown fields are errors, and every error names the file, the cluster and the field.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use controlplane::allocator::Ipv4Cidr;
use serde::Deserialize;

use crate::duration;
use crate::quantity::{self, Resources};

/// The kubelet's default `maxPods`, used when a node group does not say.
pub const DEFAULT_PODS: u32 = 110;

/// How long a bound pod takes to become Ready when the definition does not say.
pub const DEFAULT_STARTUP_DELAY: Duration = Duration::from_secs(1);

/// One simulated cluster, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDef {
    /// The cluster name, a DNS-1123 label.
    pub name: String,
    /// Labels describing the cluster (for example `region`).
    pub labels: BTreeMap<String, String>,
    /// Groups of identical nodes, in file order.
    pub node_groups: Vec<NodeGroup>,
    /// Time from a pod's first kubelet sync until it runs and is Ready.
    pub startup_delay: Duration,
    /// The range cluster IPs are allocated from.
    pub service_cidr: Ipv4Cidr,
    /// The addresses Services of type LoadBalancer get (empty: they stay pending).
    pub load_balancer_pool: AddressPool,
    /// The address (an IP or a host name) every Ingress reports, if any.
    pub ingress_address: Option<String>,
    /// Images whose containers never run (beside any image tagged `broken`).
    pub failing_images: Vec<String>,
}

/// IPv4 addresses to hand out, as ranges in the order they are handed out, such as
/// MetalLB's `IPAddressPool` lists them: `172.18.255.200-172.18.255.219` or a CIDR
/// (every address of it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPool {
    ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
}

impl AddressPool {
    /// Parses ranges (`first-last`) and CIDRs; they must not overlap.
    pub fn parse<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut ranges: Vec<(Ipv4Addr, Ipv4Addr)> = Vec::new();
        for item in items {
            let item = item.trim();
            let ip = |s: &str| s.trim().parse::<Ipv4Addr>().map_err(|_| format!("{item:?}: {:?} is not an IPv4 address", s.trim()));
            let range = if let Some((first, last)) = item.split_once('-') {
                let (first, last) = (ip(first)?, ip(last)?);
                if first > last {
                    return Err(format!("{item:?}: the first address is after the last"));
                }
                (first, last)
            } else if let Some((net, prefix)) = item.split_once('/') {
                let base = u32::from(ip(net)?);
                let prefix: u32 = prefix.parse().ok().filter(|p| *p <= 32).ok_or_else(|| format!("{item:?}: bad prefix length"))?;
                let size = 1u64 << (32 - prefix);
                if u64::from(base) % size != 0 {
                    return Err(format!("{item:?}: the address has host bits set"));
                }
                (Ipv4Addr::from(base), Ipv4Addr::from((u64::from(base) + size - 1) as u32))
            } else {
                let one = ip(item)?;
                (one, one)
            };
            if let Some(other) = ranges.iter().find(|(a, b)| range.0 <= *b && *a <= range.1) {
                return Err(format!("{item:?} overlaps {}-{}", other.0, other.1));
            }
            ranges.push(range);
        }
        Ok(Self { ranges })
    }

    /// Whether the pool has no address.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `ip` is in the pool.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.ranges.iter().any(|(a, b)| (*a..=*b).contains(&ip))
    }

    /// Every address, in the order they are handed out.
    pub fn addresses(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.ranges.iter().flat_map(|(a, b)| (u32::from(*a)..=u32::from(*b)).map(Ipv4Addr::from))
    }
}

impl fmt::Display for AddressPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.ranges.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        f.write_str(&parts.join(", "))
    }
}

/// A group of identical nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    /// How many nodes the group has (at least 1).
    pub count: u32,
    /// Allocatable CPU per node, in millicores.
    pub cpu_millis: u64,
    /// Allocatable memory per node, in bytes.
    pub memory_bytes: u64,
    /// Pod slots per node.
    pub pods: u32,
    /// Labels put on each node of the group.
    pub labels: BTreeMap<String, String>,
}

impl NodeGroup {
    /// The allocatable resources of one node of the group.
    pub fn node_allocatable(&self) -> Resources {
        Resources::new(self.cpu_millis, self.memory_bytes, u64::from(self.pods))
    }
}

impl ClusterDef {
    /// The total number of nodes.
    pub fn node_count(&self) -> u32 {
        self.node_groups.iter().map(|g| g.count).sum()
    }

    /// The sum of the allocatable resources of all nodes.
    pub fn allocatable(&self) -> Resources {
        self.node_groups.iter().fold(Resources::ZERO, |acc, g| {
            let one = g.node_allocatable();
            let n = u64::from(g.count);
            acc.saturating_add(Resources::new(
                one.cpu_millis.saturating_mul(n),
                one.memory_bytes.saturating_mul(n),
                one.pods.saturating_mul(n),
            ))
        })
    }
}

/// Why a definition file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML, or a value has the wrong type.
    #[error("{source_name}: {context}{source}")]
    Yaml {
        /// The file (or other source) name.
        source_name: String,
        /// Which cluster or node group, followed by ": ", or empty.
        context: String,
        /// The YAML error.
        #[source]
        source: serde_yaml::Error,
    },
    /// A field has a value that parses but is not allowed.
    #[error("{source_name}: cluster {cluster}: {field}: {message}")]
    Invalid {
        /// The file (or other source) name.
        source_name: String,
        /// The cluster name, or `#<index>` when it has none.
        cluster: String,
        /// The field path, such as `nodes[0].cpu`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The document is neither a mapping nor a sequence of mappings.
    #[error("{source_name}: expected a cluster (a mapping) or a list of clusters, found {found}")]
    Shape {
        /// The file (or other source) name.
        source_name: String,
        /// What was found instead.
        found: &'static str,
    },
    /// Two clusters in one file share a name.
    #[error("{source_name}: cluster name {name:?} is defined more than once")]
    Duplicate {
        /// The file (or other source) name.
        source_name: String,
        /// The repeated name.
        name: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCluster {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    nodes: Vec<serde_yaml::Value>,
    #[serde(default)]
    startup_delay: Option<String>,
    #[serde(default, rename = "serviceCIDR")]
    service_cidr: Option<String>,
    #[serde(default)]
    load_balancer_pool: Option<OneOrMany>,
    #[serde(default)]
    ingress_address: Option<String>,
    #[serde(default)]
    failing_images: Vec<String>,
}

/// A string, or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeGroup {
    count: u32,
    cpu: QuantityText,
    memory: QuantityText,
    #[serde(default)]
    pods: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// A quantity may be written as a YAML string (`"4"`, `8Gi`) or a bare number (`4`, `0.5`).
#[derive(Deserialize)]
#[serde(untagged)]
enum QuantityText {
    Text(String),
    Int(u64),
    Float(f64),
}

impl QuantityText {
    fn text(&self) -> String {
        match self {
            QuantityText::Text(s) => s.clone(),
            QuantityText::Int(n) => n.to_string(),
            QuantityText::Float(f) => f.to_string(),
        }
    }
}

/// Reads and validates a definition file.
pub fn load(path: impl AsRef<Path>) -> Result<Vec<ClusterDef>, ConfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    parse(&text, &path.display().to_string())
}

/// Parses and validates definition text; `source_name` names it in errors.
pub fn parse(text: &str, source_name: &str) -> Result<Vec<ClusterDef>, ConfigError> {
    let yaml_err = |context: String, source| ConfigError::Yaml { source_name: source_name.to_string(), context, source };
    let doc: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| yaml_err(String::new(), e))?;
    let items = match doc {
        serde_yaml::Value::Sequence(items) => items,
        m @ serde_yaml::Value::Mapping(_) => vec![m],
        other => return Err(ConfigError::Shape { source_name: source_name.to_string(), found: kind_of(&other) }),
    };
    let mut clusters = Vec::with_capacity(items.len());
    let mut seen = BTreeSet::new();
    for (index, item) in items.into_iter().enumerate() {
        let label = cluster_label(&item, index);
        if !item.is_mapping() {
            return Err(ConfigError::Shape { source_name: source_name.to_string(), found: kind_of(&item) });
        }
        let raw: RawCluster = serde_yaml::from_value(item).map_err(|e| yaml_err(format!("cluster {label}: "), e))?;
        let def = validate(raw, source_name, &label)?;
        if !seen.insert(def.name.clone()) {
            return Err(ConfigError::Duplicate { source_name: source_name.to_string(), name: def.name });
        }
        clusters.push(def);
    }
    Ok(clusters)
}

fn kind_of(v: &serde_yaml::Value) -> &'static str {
    match v {
        serde_yaml::Value::Null => "nothing",
        serde_yaml::Value::Bool(_) => "a boolean",
        serde_yaml::Value::Number(_) => "a number",
        serde_yaml::Value::String(_) => "a string",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Mapping(_) => "a mapping",
        serde_yaml::Value::Tagged(_) => "a tagged value",
    }
}

/// `"east"` when the mapping has a string name, else `#<index>`, for error messages.
fn cluster_label(item: &serde_yaml::Value, index: usize) -> String {
    match item.get("name").and_then(|n| n.as_str()) {
        Some(name) => format!("{name:?}"),
        None => format!("#{index}"),
    }
}

fn validate(raw: RawCluster, source_name: &str, label: &str) -> Result<ClusterDef, ConfigError> {
    let invalid = |field: &str, message: String| ConfigError::Invalid {
        source_name: source_name.to_string(),
        cluster: label.to_string(),
        field: field.to_string(),
        message,
    };
    if let Err(m) = check_dns1123_label(&raw.name) {
        return Err(invalid("name", m));
    }
    check_labels(&raw.labels).map_err(|(k, m)| invalid(&format!("labels[{k:?}]"), m))?;
    if raw.nodes.is_empty() {
        return Err(invalid("nodes", "at least one node group is required".into()));
    }
    let mut node_groups = Vec::with_capacity(raw.nodes.len());
    for (i, value) in raw.nodes.into_iter().enumerate() {
        let field = |name: &str| format!("nodes[{i}].{name}");
        let group: RawNodeGroup = serde_yaml::from_value(value).map_err(|source| ConfigError::Yaml {
            source_name: source_name.to_string(),
            context: format!("cluster {label}: nodes[{i}]: "),
            source,
        })?;
        if group.count == 0 {
            return Err(invalid(&field("count"), "must be at least 1".into()));
        }
        let cpu_millis = quantity::parse_cpu(&group.cpu.text()).map_err(|e| invalid(&field("cpu"), e.to_string()))?;
        if cpu_millis == 0 {
            return Err(invalid(&field("cpu"), "must be more than zero".into()));
        }
        let memory_bytes = quantity::parse_memory(&group.memory.text()).map_err(|e| invalid(&field("memory"), e.to_string()))?;
        if memory_bytes == 0 {
            return Err(invalid(&field("memory"), "must be more than zero".into()));
        }
        let pods = group.pods.unwrap_or(DEFAULT_PODS);
        if pods == 0 {
            return Err(invalid(&field("pods"), "must be at least 1".into()));
        }
        check_labels(&group.labels).map_err(|(k, m)| invalid(&format!("nodes[{i}].labels[{k:?}]"), m))?;
        node_groups.push(NodeGroup { count: group.count, cpu_millis, memory_bytes, pods, labels: group.labels });
    }
    let startup_delay = match &raw.startup_delay {
        None => DEFAULT_STARTUP_DELAY,
        Some(text) => duration::parse(text).map_err(|e| invalid("startupDelay", e.to_string()))?,
    };
    let service_cidr = match &raw.service_cidr {
        None => Ipv4Cidr::default(),
        Some(text) => text.parse().map_err(|e| invalid("serviceCIDR", e))?,
    };
    let load_balancer_pool = match &raw.load_balancer_pool {
        None => Ok(AddressPool::default()),
        Some(OneOrMany::One(one)) => AddressPool::parse([one.as_str()]),
        Some(OneOrMany::Many(many)) => AddressPool::parse(many.iter().map(String::as_str)),
    }
    .map_err(|e| invalid("loadBalancerPool", e))?;
    if let Some(address) = &raw.ingress_address {
        let hostname = apimachinery::objmeta::dns1123_subdomain(address);
        if address.parse::<IpAddr>().is_err() && hostname.is_err() {
            return Err(invalid("ingressAddress", format!("{address:?} is neither an IP address nor a DNS host name")));
        }
    }
    Ok(ClusterDef {
        name: raw.name,
        labels: raw.labels,
        node_groups,
        startup_delay,
        service_cidr,
        load_balancer_pool,
        ingress_address: raw.ingress_address,
        failing_images: raw.failing_images,
    })
}

/// A DNS-1123 label, as the apiserver checks names (shared with the control plane).
pub fn check_dns1123_label(s: &str) -> Result<(), String> {
    apimachinery::objmeta::dns1123_label(s).map_err(|e| format!("{s:?}: {e}"))
}

/// Label keys and values, as the apiserver checks them (shared with the control plane).
fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), (String, String)> {
    for (key, value) in labels {
        apimachinery::objmeta::validate_label(key, value).map_err(|e| (key.clone(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EAST: &str = r#"
name: east
labels: {region: us}
nodes:
  - count: 2
    cpu: "4"
    memory: 8Gi
    pods: 110
    labels: {}
startupDelay: 300ms
"#;

    #[test]
    fn parses_the_documented_example() {
        let defs = parse(EAST, "east.yaml").unwrap();
        assert_eq!(defs.len(), 1);
        let east = &defs[0];
        assert_eq!(east.name, "east");
        assert_eq!(east.labels["region"], "us");
        assert_eq!(east.node_count(), 2);
        assert_eq!(east.startup_delay, Duration::from_millis(300));
        assert_eq!(east.allocatable(), Resources::new(8000, 16 << 30, 220));
    }

    #[test]
    fn a_list_holds_several_clusters_and_defaults_apply() {
        let text = r#"
- name: a
  nodes: [{count: 1, cpu: 2, memory: 4Gi}, {count: 3, cpu: 0.5, memory: 512Mi, labels: {disk: ssd}}]
- name: b
  nodes: [{count: 1, cpu: 500m, memory: "1G"}]
"#;
        let defs = parse(text, "two.yaml").unwrap();
        assert_eq!(defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let a = &defs[0];
        assert_eq!(a.node_groups[0].pods, DEFAULT_PODS);
        assert_eq!(a.node_groups[1].cpu_millis, 500);
        assert_eq!(a.node_groups[1].labels["disk"], "ssd");
        assert_eq!(a.startup_delay, DEFAULT_STARTUP_DELAY);
        assert_eq!(a.allocatable().cpu_millis, 3500);
        assert_eq!(defs[1].node_groups[0].memory_bytes, 1_000_000_000);
    }

    #[test]
    fn service_and_address_fields_have_defaults_and_shapes() {
        let plain = &parse(EAST, "east.yaml").unwrap()[0];
        assert_eq!(plain.service_cidr.to_string(), "10.96.0.0/16");
        assert!(plain.load_balancer_pool.is_empty());
        assert_eq!(plain.ingress_address, None);

        let one = "name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]\nserviceCIDR: 10.200.0.0/20\n\
                   loadBalancerPool: 172.18.255.200-172.18.255.202\ningressAddress: 172.18.255.10";
        let e = &parse(one, "one.yaml").unwrap()[0];
        assert_eq!(e.service_cidr.to_string(), "10.200.0.0/20");
        assert_eq!(
            e.load_balancer_pool.addresses().map(|a| a.to_string()).collect::<Vec<_>>(),
            ["172.18.255.200", "172.18.255.201", "172.18.255.202"]
        );
        assert_eq!(e.ingress_address.as_deref(), Some("172.18.255.10"));

        let many =
            "name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]\nloadBalancerPool: [10.0.0.8/30, 10.0.1.1]\ningressAddress: lb.example.com";
        let e = &parse(many, "many.yaml").unwrap()[0];
        assert_eq!(e.load_balancer_pool.to_string(), "10.0.0.8-10.0.0.11, 10.0.1.1");
        assert!(
            e.load_balancer_pool.contains("10.0.0.11".parse().unwrap()) && !e.load_balancer_pool.contains("10.0.0.12".parse().unwrap())
        );
        assert_eq!(e.ingress_address.as_deref(), Some("lb.example.com"));
    }

    #[test]
    fn bad_service_and_address_fields_are_named() {
        let base = "name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]\n";
        let e = error_of(&format!("{base}serviceCIDR: 10.96.0.0/8"));
        assert!(e.starts_with("bad.yaml: cluster \"e\": serviceCIDR: "), "{e}");
        let e = error_of(&format!("{base}loadBalancerPool: 172.18.255.250-172.18.255.200"));
        assert!(e.contains("loadBalancerPool: \"172.18.255.250-172.18.255.200\": the first address is after the last"), "{e}");
        let e = error_of(&format!("{base}loadBalancerPool: [10.0.0.0/30, 10.0.0.2-10.0.0.9]"));
        assert!(e.contains("loadBalancerPool: \"10.0.0.2-10.0.0.9\" overlaps 10.0.0.0-10.0.0.3"), "{e}");
        let e = error_of(&format!("{base}loadBalancerPool: fd00::1-fd00::9"));
        assert!(e.contains("is not an IPv4 address"), "{e}");
        let e = error_of(&format!("{base}ingressAddress: not a host"));
        assert!(e.contains("ingressAddress: \"not a host\" is neither"), "{e}");
    }

    fn error_of(text: &str) -> String {
        parse(text, "bad.yaml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_file_cluster_and_field() {
        let e = error_of("name: East\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]");
        assert!(e.starts_with("bad.yaml: cluster \"East\": name:"), "{e}");

        let e = error_of("name: e\nnodes: [{count: 0, cpu: 1, memory: 1Gi}]");
        assert_eq!(e, "bad.yaml: cluster \"e\": nodes[0].count: must be at least 1");

        let e = error_of("name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi}, {count: 1, cpu: lots, memory: 1Gi}]");
        assert_eq!(e, "bad.yaml: cluster \"e\": nodes[1].cpu: invalid quantity \"lots\": expected a number");

        let e = error_of("name: e\nnodes: [{count: 1, cpu: 1, memory: 8Gb}]");
        assert!(e.contains("nodes[0].memory: invalid quantity \"8Gb\""), "{e}");

        let e = error_of("name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi, pods: 0}]");
        assert!(e.contains("cluster \"e\": nodes[0].pods: must be at least 1"), "{e}");

        let e = error_of("name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]\nstartupDelay: 3 seconds");
        assert!(e.contains("cluster \"e\": startupDelay: invalid duration \"3 seconds\""), "{e}");

        let e = error_of("name: e\nnodes: []");
        assert!(e.contains("cluster \"e\": nodes: at least one node group"), "{e}");
    }

    #[test]
    fn unknown_fields_are_errors() {
        let e = error_of("name: e\nregion: us\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]");
        assert!(e.starts_with("bad.yaml: cluster \"e\": unknown field `region`"), "{e}");
        let e = error_of("name: e\nnodes: [{count: 1, cpus: 1, memory: 1Gi}]");
        assert!(e.starts_with("bad.yaml: cluster \"e\": nodes[0]: unknown field `cpus`"), "{e}");
    }

    #[test]
    fn duplicate_names_and_bad_shapes() {
        let e = error_of("- {name: a, nodes: [{count: 1, cpu: 1, memory: 1Gi}]}\n- {name: a, nodes: [{count: 1, cpu: 1, memory: 1Gi}]}");
        assert_eq!(e, "bad.yaml: cluster name \"a\" is defined more than once");
        assert!(error_of("just text").contains("found a string"));
        assert!(error_of("- 1").contains("found a number"));
        let e = error_of("- nodes: [{count: 1, cpu: 1, memory: 1Gi}]");
        assert!(e.starts_with("bad.yaml: cluster #0: missing field `name`"), "{e}");
        assert!(error_of("name: [unclosed").starts_with("bad.yaml: "));
    }

    #[test]
    fn labels_are_checked() {
        let e = error_of("name: e\nlabels: {\"bad key!\": x}\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]");
        assert!(e.contains("labels[\"bad key!\"]"), "{e}");
        let e = error_of("name: e\nnodes: [{count: 1, cpu: 1, memory: 1Gi, labels: {zone: \"-a\"}}]");
        assert!(e.contains("nodes[0].labels[\"zone\"]: value \"-a\""), "{e}");
        parse(
            "name: e\nlabels: {topology.kubernetes.io/region: us-east-1, empty: \"\"}\nnodes: [{count: 1, cpu: 1, memory: 1Gi}]",
            "ok.yaml",
        )
        .unwrap();
    }

    #[test]
    fn dns_labels() {
        assert!(check_dns1123_label("east-1").is_ok());
        for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
            assert!(check_dns1123_label(bad).is_err(), "{bad}");
        }
    }

    /// Every shipped definition file (test-clusters/*.yaml) must load.
    #[test]
    fn shipped_definition_files_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut loaded = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let defs = load(&path).unwrap_or_else(|e| panic!("{e}"));
                assert!(!defs.is_empty(), "{}", path.display());
                loaded.insert(path.file_name().unwrap().to_string_lossy().into_owned(), defs);
            }
        }
        let names = |file: &str| loaded[file].iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        assert_eq!(names("demo.yaml"), ["east", "west", "eu"]);
        assert_eq!(names("east.yaml"), ["east"]);
        assert_eq!(names("west.yaml"), ["west"]);
        assert_eq!(names("small.yaml"), ["small"]);
        let small = &loaded["small.yaml"][0];
        assert_eq!(small.allocatable(), Resources::new(1000, 2 << 30, 10));
        let regions: BTreeSet<_> = loaded["demo.yaml"].iter().map(|d| d.labels["region"].clone()).collect();
        assert_eq!(regions.len(), 2);
        // Every cluster of the demo fleet has its own addresses, and east.yaml and
        // west.yaml are the demo's east and west.
        let demo = &loaded["demo.yaml"];
        let ingress: BTreeSet<_> = demo.iter().map(|d| d.ingress_address.clone().expect("an ingress address")).collect();
        assert_eq!(ingress.len(), 3);
        for (i, a) in demo.iter().enumerate() {
            assert!(!a.load_balancer_pool.is_empty(), "{}", a.name);
            for b in &demo[i + 1..] {
                assert!(
                    a.load_balancer_pool.addresses().all(|ip| !b.load_balancer_pool.contains(ip)),
                    "{} and {} share addresses",
                    a.name,
                    b.name
                );
            }
        }
        for file in ["east.yaml", "west.yaml"] {
            let single = &loaded[file][0];
            let in_demo = demo.iter().find(|d| d.name == single.name).unwrap();
            assert_eq!((&single.load_balancer_pool, &single.ingress_address), (&in_demo.load_balancer_pool, &in_demo.ingress_address));
        }
    }
}
