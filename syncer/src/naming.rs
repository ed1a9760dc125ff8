//! Downstream namespace names. Every upstream `{workspace, namespace}` pair maps to one
//! downstream namespace `flotilla-<12 base36 characters>`: short enough for any
//! workspace and namespace name (kcp's longer names ran into the 63-character limit),
//! stable across restarts, and annotated with the pair it holds so that it can always
//! be traced back.
//!
//! That annotation is on an object of the physical cluster, which the cluster's users
//! may edit; a hash cannot be read back. [`Locators`] is what a syncer knows of which
//! pair each of its namespaces holds: learnt from the upstream objects it syncs, and
//! from what downstream objects claim only when the claim hashes to the namespace's
//! name.

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Prefix of every downstream namespace Flotilla creates.
pub const NAMESPACE_PREFIX: &str = "flotilla-";
/// Base36 characters of hash in a downstream namespace name: 36^12 ≈ 4.7e18 names.
const HASH_CHARS: usize = 12;

/// The upstream place a downstream namespace holds, stored as JSON in the
/// `workload.flotilla.io/namespace-locator` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceLocator {
    /// The upstream workspace.
    pub workspace: String,
    /// The namespace in that workspace.
    pub namespace: String,
}

impl NamespaceLocator {
    /// The locator of `namespace` in `workspace`.
    pub fn new(workspace: &str, namespace: &str) -> Self {
        Self { workspace: workspace.into(), namespace: namespace.into() }
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("two strings serialize")
    }

    /// Reads an annotation value; `None` when it is not a locator.
    pub fn from_annotation(value: &str) -> Option<Self> {
        serde_json::from_str(value).ok()
    }

    /// The downstream namespace name.
    pub fn downstream_namespace(&self) -> String {
        let digest = Sha256::digest(self.to_annotation().as_bytes());
        let mut n = u128::from_be_bytes(digest[..16].try_into().expect("a SHA-256 digest has 32 bytes"));
        let mut out = String::with_capacity(NAMESPACE_PREFIX.len() + HASH_CHARS);
        out.push_str(NAMESPACE_PREFIX);
        for _ in 0..HASH_CHARS {
            let d = (n % 36) as u32;
            n /= 36;
            out.push(char::from_digit(d, 36).expect("a base-36 digit"));
        }
        out
    }
}

/// The name on a cluster of workspace `workspace`'s StorageClass `class`:
/// `flotilla-<12 base36 characters of the workspace>-<class>`, or, when that is longer
/// than a name may be (253), `flotilla-<12 characters of both>`. Each workspace's
/// classes have names of their own, so two workspaces' classes of one name never meet.
pub fn cluster_storage_class(workspace: &str, class: &str) -> String {
    let named = format!("{}-{class}", NamespaceLocator::new(workspace, "").downstream_namespace());
    if named.len() <= 253 {
        named
    } else {
        NamespaceLocator::new(workspace, class).downstream_namespace()
    }
}

/// Which upstream `{workspace, namespace}` each downstream namespace holds, by the
/// downstream namespace's name, as far as this syncer has seen.
#[derive(Debug, Default)]
pub struct Locators {
    by_name: DashMap<String, NamespaceLocator>,
}

impl Locators {
    /// Learns the downstream namespace of an upstream `{workspace, namespace}`, seen
    /// upstream; returns its name.
    pub fn learn(&self, workspace: &str, namespace: &str) -> String {
        let locator = NamespaceLocator::new(workspace, namespace);
        let name = locator.downstream_namespace();
        if !self.by_name.contains_key(&name) {
            self.by_name.insert(name.clone(), locator);
        }
        name
    }

    /// Learns `claimed` as the locator of the downstream namespace `name` if it is
    /// that namespace's locator, which its hash tells; whether it is.
    pub fn learn_claim(&self, name: &str, claimed: &NamespaceLocator) -> bool {
        if self.by_name.contains_key(name) {
            return self.by_name.get(name).is_some_and(|l| *l == *claimed);
        }
        let true_claim = claimed.downstream_namespace() == name;
        if true_claim {
            self.by_name.insert(name.to_string(), claimed.clone());
        }
        true_claim
    }

    /// The locator of the downstream namespace `name`, if known.
    pub fn get(&self, name: &str) -> Option<NamespaceLocator> {
        self.by_name.get(name).map(|l| l.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_workspace_has_class_names_of_its_own() {
        let a = cluster_storage_class("team-a", "fast");
        assert!(a.starts_with("flotilla-") && a.ends_with("-fast") && a.len() == "flotilla-".len() + 12 + "-fast".len(), "{a}");
        assert_ne!(a, cluster_storage_class("team-b", "fast"));
        assert_eq!(a, cluster_storage_class("team-a", "fast"), "stable");
        let long = "c".repeat(250);
        let named = cluster_storage_class("team-a", &long);
        assert!(named.len() <= 253 && named.starts_with("flotilla-"), "{named}");
    }

    #[test]
    fn only_a_locator_that_hashes_to_the_name_is_learnt() {
        let locators = Locators::default();
        let shop = NamespaceLocator::new("demo", "shop");
        let name = shop.downstream_namespace();
        assert_eq!(locators.get(&name), None);
        assert!(!locators.learn_claim(&name, &NamespaceLocator::new("demo", "other")), "a rewritten locator");
        assert_eq!(locators.get(&name), None);
        assert!(locators.learn_claim(&name, &shop));
        assert_eq!(locators.get(&name), Some(shop.clone()));
        assert!(!locators.learn_claim(&name, &NamespaceLocator::new("x", "y")));
        assert_eq!(locators.get(&name), Some(shop));

        let fresh = Locators::default();
        assert_eq!(fresh.learn("demo", "shop"), name);
        assert_eq!(fresh.get(&name), Some(NamespaceLocator::new("demo", "shop")));
    }

    #[test]
    fn names_are_short_stable_and_distinct() {
        let a = NamespaceLocator::new("team-a", "default");
        let name = a.downstream_namespace();
        assert_eq!(name.len(), "flotilla-".len() + 12);
        assert!(name.starts_with("flotilla-") && name[9..].chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()), "{name}");
        assert_eq!(name, NamespaceLocator::new("team-a", "default").downstream_namespace(), "stable");
        // The pair is hashed, not concatenated: "a-b"/"c" and "a"/"b-c" differ.
        assert_ne!(NamespaceLocator::new("a-b", "c").downstream_namespace(), NamespaceLocator::new("a", "b-c").downstream_namespace());
        assert_ne!(name, NamespaceLocator::new("team-b", "default").downstream_namespace());
        // Even the longest names fit in a namespace name.
        let long = NamespaceLocator::new(&"w".repeat(63), &"n".repeat(63)).downstream_namespace();
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn the_annotation_round_trips() {
        let l = NamespaceLocator::new("demo", "shop");
        assert_eq!(l.to_annotation(), r#"{"workspace":"demo","namespace":"shop"}"#);
        assert_eq!(NamespaceLocator::from_annotation(&l.to_annotation()), Some(l));
        assert_eq!(NamespaceLocator::from_annotation("not json"), None);
    }
}
