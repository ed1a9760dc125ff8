//! The small resource vector (cpu, memory, pods) that the scheduler, the syncer's
//! capacity report and the simulated clusters do their arithmetic with, over
//! Kubernetes' typed quantities. The parser itself is [`apimachinery::quantity`].

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use apimachinery::quantity::{format_cpu, format_memory, parse, parse_cpu, parse_memory, ParsedQuantity, QuantityError};

/// [`parse_cpu`] on a typed `Quantity`.
pub fn cpu_millis(q: &Quantity) -> Result<u64, QuantityError> {
    parse_cpu(&q.0)
}

/// [`parse_memory`] on a typed `Quantity`.
pub fn memory_bytes(q: &Quantity) -> Result<u64, QuantityError> {
    parse_memory(&q.0)
}

/// The three resources the simulated scheduler accounts for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Pod slots.
    pub pods: u64,
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu={} memory={} pods={}", format_cpu(self.cpu_millis), format_memory(self.memory_bytes), self.pods)
    }
}

impl Resources {
    /// No resources at all.
    pub const ZERO: Resources = Resources { cpu_millis: 0, memory_bytes: 0, pods: 0 };

    /// A resource vector from its parts.
    pub fn new(cpu_millis: u64, memory_bytes: u64, pods: u64) -> Self {
        Resources { cpu_millis, memory_bytes, pods }
    }

    /// Component-wise sum, saturating at `u64::MAX`.
    pub fn saturating_add(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            pods: self.pods.saturating_add(other.pods),
        }
    }

    /// Component-wise difference, saturating at zero.
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            pods: self.pods.saturating_sub(other.pods),
        }
    }

    /// Component-wise maximum.
    pub fn max(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            pods: self.pods.max(other.pods),
        }
    }

    /// Whether `self` fits inside `available`, component by component.
    pub fn fits(&self, available: &Resources) -> bool {
        self.cpu_millis <= available.cpu_millis && self.memory_bytes <= available.memory_bytes && self.pods <= available.pods
    }

    /// Reads `cpu`, `memory` and `pods` from a resource list (node capacity, requests, overhead).
    /// Other resource names are ignored.
    pub fn from_resource_list(list: &BTreeMap<String, Quantity>) -> Result<Resources, QuantityError> {
        let mut r = Resources::ZERO;
        if let Some(q) = list.get("cpu") {
            r.cpu_millis = cpu_millis(q)?;
        }
        if let Some(q) = list.get("memory") {
            r.memory_bytes = memory_bytes(q)?;
        }
        if let Some(q) = list.get("pods") {
            r.pods = memory_bytes(q)?;
        }
        Ok(r)
    }

    /// A container's requests for cpu and memory (`pods` is 0).
    ///
    /// A resource with a limit but no request is requested at its limit, as API defaulting
    /// (`SetDefaults_ResourceRequirements` in pkg/apis/core/v1/defaults.go) would have set it.
    pub fn from_requests(req: &ResourceRequirements) -> Result<Resources, QuantityError> {
        let mut merged = req.limits.clone().unwrap_or_default();
        merged.remove("pods");
        if let Some(requests) = &req.requests {
            merged.extend(requests.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Ok(Resources { pods: 0, ..Resources::from_resource_list(&merged)? })
    }

    /// The effective request of a pod, as kube-scheduler computes it
    /// (`resourcehelper.PodRequests`): the sum over the regular containers and the restartable
    /// (sidecar) init containers, raised to what each ordinary init container needs while it
    /// runs next to the sidecars started before it, plus the pod overhead. `pods` is 1.
    pub fn for_pod(spec: &PodSpec) -> Result<Resources, QuantityError> {
        let container = |c: &Container| c.resources.as_ref().map(Resources::from_requests).unwrap_or(Ok(Resources::ZERO));
        let mut sum = Resources::ZERO;
        for c in &spec.containers {
            sum = sum.saturating_add(container(c)?);
        }
        let mut sidecars = Resources::ZERO;
        let mut init_peak = Resources::ZERO;
        for c in spec.init_containers.iter().flatten() {
            let req = container(c)?;
            if c.restart_policy.as_deref() == Some("Always") {
                sum = sum.saturating_add(req);
                sidecars = sidecars.saturating_add(req);
                init_peak = init_peak.max(sidecars);
            } else {
                init_peak = init_peak.max(req.saturating_add(sidecars));
            }
        }
        let mut total = sum.max(init_peak);
        if let Some(overhead) = &spec.overhead {
            total = total.saturating_add(Resources { pods: 0, ..Resources::from_resource_list(overhead)? });
        }
        total.pods = 1;
        Ok(total)
    }

    /// The vector as a resource list with canonical quantity strings.
    pub fn to_resource_list(&self) -> BTreeMap<String, Quantity> {
        BTreeMap::from([
            ("cpu".to_string(), Quantity(format_cpu(self.cpu_millis))),
            ("memory".to_string(), Quantity(format_memory(self.memory_bytes))),
            ("pods".to_string(), Quantity(self.pods.to_string())),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    #[test]
    fn typed_quantities() {
        assert_eq!(cpu_millis(&Quantity("250m".into())).unwrap(), 250);
        assert_eq!(memory_bytes(&Quantity("1Mi".into())).unwrap(), 1 << 20);
    }

    #[test]
    fn resource_arithmetic() {
        let a = Resources::new(1000, 100, 1);
        let b = Resources::new(300, 200, 2);
        assert_eq!(a.saturating_add(b), Resources::new(1300, 300, 3));
        assert_eq!(a.saturating_sub(b), Resources::new(700, 0, 0));
        assert_eq!(a.max(b), Resources::new(1000, 200, 2));
        assert!(Resources::new(300, 100, 1).fits(&a));
        assert!(!b.fits(&a));
        assert_eq!(Resources::new(u64::MAX, 0, 0).saturating_add(a).cpu_millis, u64::MAX);
    }

    fn container(cpu: &str, mem: &str) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(mem.into()))])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_requests_follow_the_scheduler() {
        // The example from kube-scheduler's computePodResourceRequest doc comment.
        let spec = PodSpec {
            init_containers: Some(vec![container("2", "1G"), container("2", "3G")]),
            containers: vec![container("2", "1G"), container("1", "1G")],
            ..Default::default()
        };
        assert_eq!(Resources::for_pod(&spec).unwrap(), Resources::new(3000, 3_000_000_000, 1));

        // A sidecar adds to the sum and to each later init container.
        let mut sidecar = container("500m", "1G");
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            init_containers: Some(vec![sidecar, container("1", "1G")]),
            containers: vec![container("100m", "100M")],
            overhead: Some(BTreeMap::from([("cpu".to_string(), Quantity("10m".into()))])),
            ..Default::default()
        };
        // containers + sidecar = 600m/1.1G; init while sidecar runs = 1.5/2G; plus 10m overhead.
        assert_eq!(Resources::for_pod(&spec).unwrap(), Resources::new(1510, 2_000_000_000, 1));
    }

    #[test]
    fn limits_stand_in_for_missing_requests() {
        let req = ResourceRequirements {
            limits: Some(BTreeMap::from([("cpu".to_string(), Quantity("1".into())), ("memory".to_string(), Quantity("1Gi".into()))])),
            requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("250m".into()))])),
            ..Default::default()
        };
        assert_eq!(Resources::from_requests(&req).unwrap(), Resources::new(250, 1 << 30, 0));
    }

    #[test]
    fn resource_list_round_trip() {
        let r = Resources::new(4000, 8 << 30, 110);
        let list = r.to_resource_list();
        assert_eq!(list["cpu"].0, "4");
        assert_eq!(list["memory"].0, "8Gi");
        assert_eq!(Resources::from_resource_list(&list).unwrap(), r);
    }
}

/// A duration as the Placement API writes it: one or more numbers with a unit each,
/// `ms`, `s`, `m` or `h`, such as `5m`, `30s` or `1h30m`; `None` for anything else.
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let value: f64 = number.parse().ok()?;
        let (scale, unit_len) = if tail.starts_with("ms") {
            (0.001, 2)
        } else if tail.starts_with('s') {
            (1.0, 1)
        } else if tail.starts_with('m') {
            (60.0, 1)
        } else if tail.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        total += value * scale;
        rest = &tail[unit_len..];
    }
    std::time::Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod duration_tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_as_the_placement_api_writes_them() {
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "5", "m", "5 m", "5d", "-1s", "1e3s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
