//! Which ConfigMaps, Secrets and ServiceAccount a pod template needs beside it: what
//! the companions controller labels for a workload's clusters, and what a syncer
//! copies down with it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodSpec;

use crate::synced::Kind;

/// The ConfigMaps and Secrets a pod spec needs, by name: volumes (plain and projected),
/// `env[].valueFrom`, `envFrom` of every container kind, and image pull secrets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct References {
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
    /// Secret names.
    pub secrets: BTreeSet<String>,
    /// The ServiceAccount the pods run as, unless it is `default`, which every
    /// namespace of every cluster has of its own.
    pub service_account: Option<String>,
    /// The PersistentVolumeClaims its volumes mount.
    pub claims: BTreeSet<String>,
}

impl References {
    /// The references of `spec`.
    pub fn of(spec: &PodSpec) -> Self {
        let mut r = References::default();
        for v in spec.volumes.iter().flatten() {
            if let Some(claim) = &v.persistent_volume_claim {
                r.claims.insert(claim.claim_name.clone());
            }
            if let Some(cm) = &v.config_map {
                r.config_maps.insert(cm.name.clone());
            }
            if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                r.secrets.insert(name);
            }
            for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
                if let Some(cm) = &source.config_map {
                    r.config_maps.insert(cm.name.clone());
                }
                if let Some(s) = &source.secret {
                    r.secrets.insert(s.name.clone());
                }
            }
        }
        let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
        for c in containers {
            for from in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
                if let Some(k) = &from.config_map_key_ref {
                    r.config_maps.insert(k.name.clone());
                }
                if let Some(k) = &from.secret_key_ref {
                    r.secrets.insert(k.name.clone());
                }
            }
            for from in c.env_from.iter().flatten() {
                if let Some(cm) = &from.config_map_ref {
                    r.config_maps.insert(cm.name.clone());
                }
                if let Some(s) = &from.secret_ref {
                    r.secrets.insert(s.name.clone());
                }
            }
        }
        for s in spec.image_pull_secrets.iter().flatten() {
            r.secrets.insert(s.name.clone());
        }
        let account = spec.service_account_name.as_ref().or(spec.service_account.as_ref());
        r.service_account = account.filter(|n| !n.is_empty() && n.as_str() != "default").cloned();
        r.config_maps.retain(|n| !n.is_empty());
        r.secrets.retain(|n| !n.is_empty());
        r.claims.retain(|n| !n.is_empty());
        r
    }

    /// Whether this set names `kind`/`name`.
    pub fn names(&self, kind: Kind, name: &str) -> bool {
        match kind {
            Kind::ConfigMap => self.config_maps.contains(name),
            Kind::Secret => self.secrets.contains(name),
            Kind::ServiceAccount => self.service_account.as_deref() == Some(name),
            Kind::PersistentVolumeClaim => self.claims.contains(name),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_cover_volumes_env_env_from_and_pull_secrets() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "a", "env": [
                {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}},
                {"name": "Z", "value": "plain"}],
              "envFrom": [{"configMapRef": {"name": "cm-from"}}, {"secretRef": {"name": "s-from"}}]}],
            "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "cm-init"}}]}],
            "volumes": [{"name": "v1", "configMap": {"name": "cm-vol"}}, {"name": "v2", "secret": {"secretName": "s-vol"}},
                        {"name": "v3", "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}}]}},
                        {"name": "v4", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "s-pull"}],
            "serviceAccountName": "runner"
        }))
        .unwrap();
        let r = References::of(&spec);
        assert_eq!(r.config_maps.iter().map(String::as_str).collect::<Vec<_>>(), ["cm-env", "cm-from", "cm-init", "cm-proj", "cm-vol"]);
        assert_eq!(r.secrets.iter().map(String::as_str).collect::<Vec<_>>(), ["s-env", "s-from", "s-proj", "s-pull", "s-vol"]);
        assert!(r.names(Kind::ConfigMap, "cm-vol") && !r.names(Kind::Secret, "cm-vol"));
        assert!(r.names(Kind::ServiceAccount, "runner"));
        let default: PodSpec = serde_json::from_value(json!({"containers": [], "serviceAccountName": "default"})).unwrap();
        assert_eq!(References::of(&default).service_account, None, "every namespace has its own default account");
    }
}
