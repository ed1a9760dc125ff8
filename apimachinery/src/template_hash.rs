//! The `pod-template-hash`: the suffix of a Deployment's ReplicaSet names, and the label
//! on those ReplicaSets, their selectors and their pods; and template equality apart
//! from that label (`deploymentutil.EqualIgnoreHash`). The workspace's revisions
//! controller and the simulated clusters' deployment controller both ask this module,
//! so the same template gets the same name in both.
//!
//! Kubernetes (`controller.ComputeHash`) feeds a spew dump of the Go template struct,
//! then the collision count, to FNV-1a (32 bit), and renders the decimal sum through
//! `rand.SafeEncodeString`. A Go spew dump cannot be reproduced outside Go, so this
//! hashes the template's canonical JSON instead: the hash label removed, nulls, empty
//! lists and empty maps dropped (as `apiequality.Semantic.DeepEqual` treats nil and
//! empty alike), and the keys of every map sorted, so that the order a client wrote
//! them in does not matter. The rest follows Kubernetes exactly: a collision count,
//! when there is one, as 8 little-endian bytes of which the low 4 are used; FNV-1a 32;
//! decimal; safe encoding. The result has the shape of the real thing (up to 10
//! characters of `bcdfghjklmnpqrstvwxz2456789`) and is stable across runs and
//! machines, but it is not the hash a real cluster computes for the same template.

use serde_json::Value;

/// The label Kubernetes adds to a Deployment's ReplicaSets, their selectors and pods.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// The alphabet of `k8s.io/apimachinery/pkg/util/rand`: no vowels, and none of the
/// digits that look like them, so that generated names never spell words.
pub const ALPHANUMS: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1a, 32 bit.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    const OFFSET: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes.iter().fold(OFFSET, |h, b| (h ^ u32::from(*b)).wrapping_mul(PRIME))
}

/// Maps each character onto [`ALPHANUMS`] by its code, as `rand.SafeEncodeString` does.
pub fn safe_encode(s: &str) -> String {
    s.chars().map(|c| char::from(ALPHANUMS[(c as usize) % ALPHANUMS.len()])).collect()
}

/// A pod template (its JSON) in the form that is hashed and compared: without the
/// hash label, without empty values, its maps' keys sorted.
pub fn canonical(mut template: Value) -> Value {
    if let Some(labels) = template.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    prune(&mut template);
    template
}

/// Drops nulls, empty arrays and empty objects, and sorts every object's keys; false
/// when `value` itself is empty.
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
            map.sort_keys();
            !map.is_empty()
        }
        _ => true,
    }
}

/// The `pod-template-hash` of a template already in [`canonical`] form, with the
/// Deployment's `status.collisionCount`.
pub fn hash_canonical(canonical: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(canonical).unwrap_or_default();
    if let Some(count) = collision_count {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(count as u32).to_le_bytes());
        bytes.extend_from_slice(&buf);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// The `pod-template-hash` of a pod template (its JSON) and the Deployment's
/// `status.collisionCount`.
pub fn pod_template_hash(template: &Value, collision_count: Option<i32>) -> String {
    hash_canonical(&canonical(template.clone()), collision_count)
}

/// Whether two pod templates are equal apart from the hash label and empty values.
pub fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    canonical(a.clone()) == canonical(b.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": image}]}})
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn safe_encode_maps_digits() {
        // '0' is 48, 48 % 27 = 21 -> '4'; '1' -> '5'; '9' -> 57 % 27 = 3 -> 'f'.
        assert_eq!(safe_encode("019"), "45f");
    }

    #[test]
    fn the_hash_is_stable_short_safe_and_changes_with_the_template_and_the_collision_count() {
        let h = pod_template_hash(&template("nginx:1.27"), None);
        assert_eq!(h, pod_template_hash(&template("nginx:1.27"), None));
        assert!(!h.is_empty() && h.len() <= 10, "{h}");
        assert!(h.bytes().all(|c| ALPHANUMS.contains(&c)), "{h}");
        assert_ne!(h, pod_template_hash(&template("nginx:1.28"), None));
        // A collision count is hashed when there is one, even 0, as Kubernetes does.
        let counted: Vec<String> = [Some(0), Some(1), Some(2)].into_iter().map(|c| pod_template_hash(&template("nginx:1.27"), c)).collect();
        assert!(counted.iter().all(|c| c != &h), "{counted:?} against {h}");
        assert!(counted[0] != counted[1] && counted[1] != counted[2], "{counted:?}");
    }

    #[test]
    fn the_hash_label_empty_values_and_key_order_change_nothing() {
        let a = template("nginx");
        let b = json!({
            "spec": {"volumes": [], "containers": [{"image": "nginx", "name": "web", "env": null}]},
            "metadata": {"annotations": {}, "labels": {"pod-template-hash": "abc", "app": "web"}},
        });
        assert!(equal_ignore_hash(&a, &b));
        assert_eq!(pod_template_hash(&a, None), pod_template_hash(&b, None));
        assert!(!equal_ignore_hash(&a, &template("httpd")));
        // Only the hash label goes: another label is part of the template.
        let labelled = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}, "spec": a["spec"].clone()});
        assert!(!equal_ignore_hash(&a, &labelled));
    }
}
