//! The `pod-template-hash` and template equality for typed templates: the rule itself
//! is [`apimachinery::template_hash`]'s, which the workspace's revisions controller
//! asks too, so a template gets the same ReplicaSet name upstream and here.

use k8s_openapi::api::core::v1::PodTemplateSpec;

use apimachinery::template_hash::{canonical, hash_canonical};
pub use apimachinery::template_hash::{fnv32a, POD_TEMPLATE_HASH_LABEL};

fn canonical_of(template: &PodTemplateSpec) -> serde_json::Value {
    canonical(serde_json::to_value(template).unwrap_or_default())
}

/// The `pod-template-hash` for a template and the Deployment's `status.collisionCount`.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    hash_canonical(&canonical_of(template), collision_count)
}

/// Whether two templates are equal apart from the `pod-template-hash` label
/// (`deploymentutil.EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    canonical_of(a) == canonical_of(b)
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
    fn a_typed_template_hashes_as_its_json_does() {
        let t = template("nginx:1.27");
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(compute_hash(&t, None), apimachinery::template_hash::pod_template_hash(&json, None));
        assert_eq!(compute_hash(&t, Some(2)), apimachinery::template_hash::pod_template_hash(&json, Some(2)));
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
