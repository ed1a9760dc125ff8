//! The `pod-template-hash` that names a Deployment's ReplicaSets, and template equality.
//!
//! Kubernetes (`controller.ComputeHash`) feeds a spew dump of the Go template struct and the
//! collision count to FNV-1a (32 bit) and renders the decimal sum through
//! `rand.SafeEncodeString`. A Go spew dump cannot be reproduced outside Go, so this hashes the
//! template's canonical JSON instead (nulls, empty lists and empty maps dropped; map keys are
//! sorted because k8s-openapi keeps maps in `BTreeMap`s), then follows Kubernetes exactly:
//! the collision count as 8 little-endian bytes (the low 4 used), FNV-1a 32, decimal, safe
//! encoding. The result has the shape of the real thing (up to 10 characters of
//! `bcdfghjklmnpqrstvwxz2456789`) and is stable across runs and machines, but it differs from
//! the hash a real cluster would compute for the same template.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

use super::names::safe_encode;

/// The label Kubernetes adds to a Deployment's ReplicaSets, their selectors and their pods.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// FNV-1a, 32 bit.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    const OFFSET: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes.iter().fold(OFFSET, |h, b| (h ^ u32::from(*b)).wrapping_mul(PRIME))
}

/// The template as JSON without the hash label, with empty values dropped.
fn canonical(template: &PodTemplateSpec) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    let mut value = serde_json::to_value(&template).unwrap_or(Value::Null);
    prune(&mut value);
    value
}

/// Drops nulls, empty arrays and empty objects, so that "unset" and "set to empty" compare
/// equal, as `apiequality.Semantic.DeepEqual` treats nil and empty slices and maps.
fn prune(value: &mut Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => {
            for item in items.iter_mut() {
                prune(item);
            }
            !items.is_empty()
        }
        Value::Object(map) => {
            map.retain(|_, v| prune(v));
            !map.is_empty()
        }
        _ => true,
    }
}

/// The `pod-template-hash` for a template and the Deployment's `status.collisionCount`.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&canonical(template)).unwrap_or_default();
    if let Some(count) = collision_count {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(count as u32).to_le_bytes());
        bytes.extend_from_slice(&buf);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// Whether two templates are equal apart from the `pod-template-hash` label
/// (`deploymentutil.EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta { labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])), ..Default::default() }),
            spec: Some(PodSpec {
                containers: vec![Container { name: "web".into(), image: Some(image.into()), ..Default::default() }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn hash_is_stable_short_and_safe() {
        let h = compute_hash(&template("nginx:1.27"), None);
        assert_eq!(h, compute_hash(&template("nginx:1.27"), None));
        assert!(!h.is_empty() && h.len() <= 10, "{h}");
        assert!(h.bytes().all(|c| super::super::names::ALPHANUMS.contains(&c)), "{h}");
        assert_ne!(h, compute_hash(&template("nginx:1.28"), None));
        assert_ne!(h, compute_hash(&template("nginx:1.27"), Some(1)));
        assert_ne!(compute_hash(&template("nginx:1.27"), Some(1)), compute_hash(&template("nginx:1.27"), Some(2)));
    }

    #[test]
    fn equality_ignores_the_hash_label_and_empty_values() {
        let a = template("nginx");
        let mut b = a.clone();
        b.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert(POD_TEMPLATE_HASH_LABEL.into(), "abc".into());
        b.metadata.as_mut().unwrap().annotations = Some(BTreeMap::new());
        b.spec.as_mut().unwrap().volumes = Some(vec![]);
        assert!(equal_ignore_hash(&a, &b));
        assert_eq!(compute_hash(&a, None), compute_hash(&b, None));
        assert!(!equal_ignore_hash(&a, &template("httpd")));
    }
}
