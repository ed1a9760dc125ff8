//! Which upstream object a piece of syncer work is about.
//!
//! Upstream objects come from the wildcard view `/clusters/*`, where two workspaces may
//! hold objects with the same namespace and name. kube-runtime's `ObjectRef` knows only
//! namespace and name, so everything here is keyed by [`Key`]: the kind, and the
//! runtime's [`ObjKey`], which adds the workspace (the `kcp.io/cluster` annotation the
//! wildcard view puts on every object).
//!
//! Downstream, a copy is found by where it is, its [`Place`]: its namespace (which
//! names its upstream workspace and namespace, hashed; see [`Locators`]) and its name.
//! Its annotations say the same, but a cluster's user may rewrite them, and a copy the
//! syncer could no longer trace would be a copy whose drift nobody reverts.

use std::fmt;

use kube::api::ObjectMeta;
use placement_api::UPSTREAM_ANNOTATION;

use crate::naming::{Locators, NamespaceLocator};

pub use placement_api::synced::Kind;
pub use runtime::key::Key;

/// What only a syncer asks of a [`Key`]: where the object's copy is, and which object a
/// copy is of.
pub trait CopyKey: Sized {
    /// The upstream object the copy at `place` was made from. Where a copy is says
    /// which object it is of: the namespace's locator, as the syncer knows it, and the
    /// name. Its `workload.flotilla.io/upstream` annotation only teaches the locator of
    /// a namespace not known yet, and only if the workspace and namespace it names hash
    /// to that namespace and the name it names is the copy's: an annotation rewritten
    /// downstream never makes a copy look like another object's. `None` when the
    /// namespace is not known and the annotation does not say it.
    fn of_copy_at(kind: Kind, place: &Place, meta: &ObjectMeta, locators: &Locators) -> Option<Self>;
    /// What a copy's `workload.flotilla.io/upstream` annotation says it was made from.
    /// Only a claim: see [`Key::of_copy_at`].
    fn of_copy(kind: Kind, meta: &ObjectMeta) -> Option<Self>;
    /// The value of the `workload.flotilla.io/upstream` annotation on the copy.
    fn copy_annotation(&self) -> String;
    /// Where its copy is (for a namespace key, the namespace itself has an empty name).
    fn place(&self) -> Place;
}

impl CopyKey for Key {
    /// The upstream object the copy at `place` was made from. Where a copy is says
    /// which object it is of: the namespace's locator, as the syncer knows it, and the
    /// name. Its `workload.flotilla.io/upstream` annotation only teaches the locator of
    /// a namespace not known yet, and only if the workspace and namespace it names hash
    /// to that namespace and the name it names is the copy's: an annotation rewritten
    /// downstream never makes a copy look like another object's. `None` when the
    /// namespace is not known and the annotation does not say it.
    fn of_copy_at(kind: Kind, place: &Place, meta: &ObjectMeta, locators: &Locators) -> Option<Self> {
        if let Some(l) = locators.get(&place.namespace) {
            return Some(Self::new(kind, &l.workspace, &l.namespace, &place.name));
        }
        let claim = Self::of_copy(kind, meta)?;
        let believed =
            claim.name == place.name && locators.learn_claim(&place.namespace, &NamespaceLocator::new(&claim.workspace, &claim.namespace));
        believed.then_some(claim)
    }

    /// What a copy's `workload.flotilla.io/upstream` annotation says it was made from.
    /// Only a claim: see [`Key::of_copy_at`].
    fn of_copy(kind: Kind, meta: &ObjectMeta) -> Option<Self> {
        let value = meta.annotations.as_ref()?.get(UPSTREAM_ANNOTATION)?;
        let mut parts = value.splitn(3, '/');
        let (ws, ns, name) = (parts.next()?, parts.next()?, parts.next()?);
        (!ws.is_empty() && !ns.is_empty() && !name.is_empty()).then(|| Self::new(kind, ws, ns, name))
    }

    /// The value of the `workload.flotilla.io/upstream` annotation on the copy.
    fn copy_annotation(&self) -> String {
        format!("{}/{}/{}", self.workspace, self.namespace, self.name)
    }

    /// Where its copy is (for a namespace key, the namespace itself has an empty name).
    fn place(&self) -> Place {
        Place { namespace: NamespaceLocator::new(&self.workspace, &self.namespace).downstream_namespace(), name: self.name.clone() }
    }
}

/// Where a downstream copy is: its namespace and name in the physical cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// The downstream namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl Place {
    /// Where the object of `meta` is; `None` for an object outside any namespace.
    pub fn of(meta: &ObjectMeta) -> Option<Self> {
        Some(Self { namespace: meta.namespace.clone()?, name: meta.name.clone()? })
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement_api::CLUSTER_ANNOTATION;
    use std::collections::BTreeMap;

    #[test]
    fn upstream_keys_come_from_the_cluster_annotation_and_copies_point_back() {
        let meta = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            annotations: Some(BTreeMap::from([(CLUSTER_ANNOTATION.to_string(), "demo".to_string())])),
            ..Default::default()
        };
        let key = Key::upstream(Kind::Deployment, &meta).unwrap();
        assert_eq!(key, Key::new(Kind::Deployment, "demo", "default", "web"));
        assert_eq!(key.to_string(), "Deployment demo/default/web");
        let copy = ObjectMeta {
            annotations: Some(BTreeMap::from([(UPSTREAM_ANNOTATION.to_string(), key.copy_annotation())])),
            ..Default::default()
        };
        assert_eq!(Key::of_copy(Kind::Deployment, &copy), Some(key));
        assert_eq!(Key::upstream(Kind::Deployment, &ObjectMeta { name: Some("x".into()), ..Default::default() }), None);
        let broken = ObjectMeta {
            annotations: Some(BTreeMap::from([(UPSTREAM_ANNOTATION.to_string(), "demo/x".to_string())])),
            ..Default::default()
        };
        assert_eq!(Key::of_copy(Kind::Deployment, &broken), None);
    }

    fn copy_meta(annotation: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            annotations: annotation.map(|a| BTreeMap::from([(UPSTREAM_ANNOTATION.to_string(), a.to_string())])),
            ..Default::default()
        }
    }

    #[test]
    fn a_copy_is_what_its_place_says_whatever_its_annotation_says() {
        let web = Key::new(Kind::Deployment, "demo", "default", "web");
        let place = web.place();
        assert!(place.namespace.starts_with("flotilla-") && place.name == "web", "{place}");

        // A namespace not known yet: an annotation that agrees with the place teaches it.
        let locators = Locators::default();
        for wrong in [None, Some("tampered"), Some("demo/default/api"), Some("demo/other/web"), Some("other/default/web")] {
            assert_eq!(Key::of_copy_at(Kind::Deployment, &place, &copy_meta(wrong), &locators), None, "{wrong:?} is not believed");
        }
        assert_eq!(Key::of_copy_at(Kind::Deployment, &place, &copy_meta(Some("demo/default/web")), &locators), Some(web.clone()));

        // Known now, the place alone says it, whatever the annotation says.
        for annotation in [None, Some("tampered"), Some("demo/default/api"), Some("other/ns/x")] {
            assert_eq!(Key::of_copy_at(Kind::Deployment, &place, &copy_meta(annotation), &locators), Some(web.clone()), "{annotation:?}");
        }
        let config = Place { namespace: place.namespace.clone(), name: "config".into() };
        assert_eq!(
            Key::of_copy_at(Kind::ConfigMap, &config, &copy_meta(None), &locators),
            Some(Key::new(Kind::ConfigMap, "demo", "default", "config"))
        );

        // Learnt from the upstream side, with no annotation at all.
        let fresh = Locators::default();
        fresh.learn("demo", "default");
        assert_eq!(Key::of_copy_at(Kind::Deployment, &place, &copy_meta(Some("x/y/z")), &fresh), Some(web));
        assert_eq!(Key::namespace("demo", "default").to_string(), "Namespace demo/default");
        assert_eq!(Key::namespace("demo", "default").place().namespace, place.namespace);
    }
}
