//! A pod's quality-of-service class, by Kubernetes' rule (pkg/apis/core/helper/qos):
//! only cpu and memory count, and only quantities above zero.
//! - **BestEffort**: no container requests or limits either.
//! - **Guaranteed**: every container (init containers too) limits both, and the pod's
//!   requests, summed over its containers, equal its limits, resource by resource.
//! - **Burstable**: anything else.
//!
//! Quantities are compared by value, so `1` and `1000m` are the same CPU. A request left
//! out stands for the limit, as the API server's defaulting fills it in before the class
//! is computed.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::quantity;

/// One container's requests and limits, as (resource name, quantity) pairs.
#[derive(Debug, Default, Clone)]
pub struct ContainerResources<'a> {
    /// `resources.requests`.
    pub requests: Vec<(&'a str, &'a str)>,
    /// `resources.limits`.
    pub limits: Vec<(&'a str, &'a str)>,
}

/// The class of a pod with these containers: `"Guaranteed"`, `"Burstable"` or
/// `"BestEffort"`.
pub fn qos_class<'a>(containers: impl IntoIterator<Item = ContainerResources<'a>>) -> &'static str {
    // Above zero, in thousandths; a quantity that does not parse counts as none (the
    // API server refuses it before this is asked).
    let positive = |q: &str| quantity::parse(q).ok().and_then(|p| p.milli_value()).filter(|m| *m > 0);
    let counted = |name: &str| name == "cpu" || name == "memory";
    let (mut requests, mut limits) = (BTreeMap::<&str, i128>::new(), BTreeMap::<&str, i128>::new());
    let mut guaranteed = true;
    for c in containers {
        let mut limited = Vec::new();
        for &(name, q) in c.limits.iter().filter(|(n, _)| counted(n)) {
            if let Some(v) = positive(q) {
                *limits.entry(name).or_default() += v;
                limited.push(name);
            }
        }
        for name in ["cpu", "memory"] {
            let request = c.requests.iter().find(|(n, _)| *n == name).map(|(_, q)| *q);
            let request = request.or_else(|| c.limits.iter().find(|(n, _)| *n == name).map(|(_, q)| *q));
            if let Some(v) = request.and_then(positive) {
                *requests.entry(name).or_default() += v;
            }
        }
        if !(limited.contains(&"cpu") && limited.contains(&"memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// [`qos_class`] of a pod as JSON (its `spec.containers` and `spec.initContainers`).
pub fn pod_qos_class(pod: &Value) -> &'static str {
    fn pairs<'v>(c: &'v Value, field: &str) -> Vec<(&'v str, &'v str)> {
        c.get("resources")
            .and_then(|r| r.get(field))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            .collect()
    }
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.pointer(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .map(|c| ContainerResources { requests: pairs(c, "requests"), limits: pairs(c, "limits") });
    qos_class(containers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: Value) -> Value {
        json!({"spec": {"containers": containers}})
    }

    #[test]
    fn classes_follow_kubernetes() {
        let cases = [
            (json!([{"name": "a"}]), "BestEffort"),
            // Zero quantities count as none.
            (json!([{"resources": {"requests": {"cpu": "0"}}}]), "BestEffort"),
            // Only cpu and memory count.
            (json!([{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]), "BestEffort"),
            (json!([{"resources": {"requests": {"cpu": "100m"}}}]), "Burstable"),
            (json!([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]), "Guaranteed"),
            // The same value in other units.
            (
                json!([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1024Mi"}}}]),
                "Guaranteed",
            ),
            (json!([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]), "Burstable"),
            // A container without a memory limit spoils it for the pod.
            (json!([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"resources": {"limits": {"cpu": "1"}}}]), "Burstable"),
        ];
        for (containers, want) in cases {
            assert_eq!(pod_qos_class(&pod(containers.clone())), want, "{containers}");
        }
        let init = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
                                   "initContainers": [{"resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(pod_qos_class(&init), "Burstable", "init containers count");
    }
}
