//! Which Placement governs a workload. Exactly one, chosen in this order:
//! 1. the annotation `scheduling.flotilla.io/placement: NAME` on the workload;
//! 2. else the same annotation on its namespace;
//! 3. else a Placement whose non-empty `namespaceSelector` selects the namespace;
//!    when several do, the oldest, then the first by name;
//! 4. else the Placement named `default`.
//!
//! A named Placement that does not exist is an error, not a fall-through: the user
//! asked for it, and placing the workload elsewhere would hide the typo.

use std::collections::BTreeMap;
use std::fmt;

use placement_api::{Placement, DEFAULT_PLACEMENT, PLACEMENT_ANNOTATION};

use crate::selector;

/// Why a Placement was chosen, for Events and conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The workload's own annotation.
    WorkloadAnnotation,
    /// Its namespace's annotation.
    NamespaceAnnotation,
    /// The Placement's namespaceSelector selects the namespace.
    NamespaceSelector,
    /// Nothing else applied.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::WorkloadAnnotation => "named by the workload's annotation",
            Source::NamespaceAnnotation => "named by the namespace's annotation",
            Source::NamespaceSelector => "its namespaceSelector selects the namespace",
            Source::Default => "the workspace default",
        })
    }
}

/// The namespace facts resolution needs.
#[derive(Debug, Clone, Copy)]
pub struct Namespace<'a> {
    /// The namespace's name.
    pub name: &'a str,
    /// Its labels (namespaceSelectors match these).
    pub labels: Option<&'a BTreeMap<String, String>>,
    /// Its annotations.
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

/// Finds the Placement that governs a workload, among `placements` (those of its
/// workspace). The error names what is missing and what to do.
pub fn governing<'p>(
    workload_annotations: Option<&BTreeMap<String, String>>,
    namespace: Namespace<'_>,
    placements: &[&'p Placement],
) -> Result<(&'p Placement, Source), String> {
    let named = |name: &str, source: Source, on: &str| {
        placements
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(|p| (*p, source))
            .ok_or_else(|| format!("Placement {name:?}, named by the {PLACEMENT_ANNOTATION} annotation on {on}, does not exist in this workspace; create it or fix the annotation"))
    };
    if let Some(name) = workload_annotations.and_then(|a| a.get(PLACEMENT_ANNOTATION)) {
        return named(name, Source::WorkloadAnnotation, "the workload");
    }
    if let Some(name) = namespace.annotations.and_then(|a| a.get(PLACEMENT_ANNOTATION)) {
        return named(name, Source::NamespaceAnnotation, &format!("namespace {}", namespace.name));
    }
    let empty = BTreeMap::new();
    let ns_labels = namespace.labels.unwrap_or(&empty);
    let mut selecting: Vec<&'p Placement> = placements
        .iter()
        .copied()
        .filter(|p| {
            p.spec.namespace_selector.as_ref().is_some_and(|s| !selector::is_empty(s) && selector::matches(s, ns_labels).unwrap_or(false))
        })
        .collect();
    selecting.sort_by(|a, b| {
        let created = |p: &Placement| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a).cmp(&created(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    if let Some(p) = selecting.first() {
        return Ok((p, Source::NamespaceSelector));
    }
    placements
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(DEFAULT_PLACEMENT))
        .map(|p| (*p, Source::Default))
        .ok_or_else(|| {
            format!("no Placement governs namespace {}: the workspace has no {DEFAULT_PLACEMENT:?} Placement and none selects the namespace; create one", namespace.name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
    use placement_api::PlacementSpec;

    fn placement(name: &str, created: i64, selects: Option<(&str, &str)>) -> Placement {
        let mut p = Placement::new(
            name,
            PlacementSpec {
                namespace_selector: selects.map(|(k, v)| LabelSelector {
                    match_labels: Some(BTreeMap::from([(k.to_string(), v.to_string())])),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        p.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(created).unwrap()));
        p
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn name(r: Result<(&Placement, Source), String>) -> Result<(String, Source), String> {
        r.map(|(p, s)| (p.metadata.name.clone().unwrap(), s))
    }

    #[test]
    fn the_order_is_workload_namespace_selector_default() {
        let all = [
            placement("default", 1, None),
            placement("gpu", 2, None),
            placement("team-a", 3, Some(("team", "a"))),
            placement("eu", 4, None),
        ];
        let refs: Vec<&Placement> = all.iter().collect();
        let ann = map(&[(PLACEMENT_ANNOTATION, "gpu")]);
        let ns_ann = map(&[(PLACEMENT_ANNOTATION, "eu")]);
        let team = map(&[("team", "a")]);
        let ns = |labels, annotations| Namespace { name: "apps", labels, annotations };

        assert_eq!(name(governing(Some(&ann), ns(Some(&team), Some(&ns_ann)), &refs)), Ok(("gpu".into(), Source::WorkloadAnnotation)));
        assert_eq!(name(governing(None, ns(Some(&team), Some(&ns_ann)), &refs)), Ok(("eu".into(), Source::NamespaceAnnotation)));
        assert_eq!(name(governing(None, ns(Some(&team), None), &refs)), Ok(("team-a".into(), Source::NamespaceSelector)));
        assert_eq!(name(governing(None, ns(None, None), &refs)), Ok(("default".into(), Source::Default)));
    }

    #[test]
    fn several_selecting_placements_go_to_the_oldest_then_the_name() {
        let all = [placement("b", 5, Some(("team", "a"))), placement("a", 5, Some(("team", "a"))), placement("c", 1, Some(("team", "a")))];
        let team = map(&[("team", "a")]);
        let ns = Namespace { name: "apps", labels: Some(&team), annotations: None };
        let refs: Vec<&Placement> = all.iter().collect();
        assert_eq!(name(governing(None, ns, &refs)).unwrap().0, "c");
        let refs: Vec<&Placement> = all[..2].iter().collect();
        assert_eq!(name(governing(None, ns, &refs)).unwrap().0, "a");
    }

    #[test]
    fn an_empty_namespace_selector_selects_nothing() {
        let mut p = placement("catch-all", 0, None);
        p.spec.namespace_selector = Some(LabelSelector::default());
        let all = [p, placement("default", 1, None)];
        let refs: Vec<&Placement> = all.iter().collect();
        let ns = Namespace { name: "apps", labels: None, annotations: None };
        assert_eq!(name(governing(None, ns, &refs)).unwrap().0, "default");
    }

    #[test]
    fn a_missing_named_placement_or_default_is_an_error_that_says_what_to_do() {
        let all = [placement("default", 1, None)];
        let refs: Vec<&Placement> = all.iter().collect();
        let ann = map(&[(PLACEMENT_ANNOTATION, "gpu")]);
        let ns = Namespace { name: "apps", labels: None, annotations: None };
        let err = governing(Some(&ann), ns, &refs).unwrap_err();
        assert!(
            err.starts_with("Placement \"gpu\", named by the scheduling.flotilla.io/placement annotation on the workload, does not exist"),
            "{err}"
        );
        let err = governing(None, ns, &[]).unwrap_err();
        assert!(err.contains("no \"default\" Placement"), "{err}");
    }
}
