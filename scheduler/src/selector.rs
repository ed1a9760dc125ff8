//! Matching a `metav1.LabelSelector` against a label set, as the API machinery does
//! (`LabelSelectorAsSelector` in apimachinery/pkg/apis/meta/v1/helpers.go): every
//! `matchLabels` pair and every `matchExpressions` requirement must hold; an empty
//! selector matches everything.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The operator is not one of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("matchExpressions[{index}]: operator {operator:?} is not one of In, NotIn, Exists, DoesNotExist")]
    Operator {
        /// The requirement's position.
        index: usize,
        /// What was given.
        operator: String,
    },
    /// `In` and `NotIn` need values; `Exists` and `DoesNotExist` take none.
    #[error("matchExpressions[{index}]: operator {operator} {problem}")]
    Values {
        /// The requirement's position.
        index: usize,
        /// The operator.
        operator: String,
        /// What is wrong with the values.
        problem: &'static str,
    },
}

/// Whether `labels` satisfy `selector`.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
    let mut ok = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    for (index, r) in selector.match_expressions.iter().flatten().enumerate() {
        let values = r.values.as_deref().unwrap_or_default();
        let needs_values = |problem| SelectorError::Values { index, operator: r.operator.clone(), problem };
        let holds = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => return Err(needs_values("needs at least one value")),
            "Exists" | "DoesNotExist" if !values.is_empty() => return Err(needs_values("takes no values")),
            "In" => labels.get(&r.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&r.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&r.key),
            "DoesNotExist" => !labels.contains_key(&r.key),
            other => return Err(SelectorError::Operator { index, operator: other.to_string() }),
        };
        ok &= holds;
    }
    Ok(ok)
}

/// Whether the selector selects nothing in particular (no labels, no expressions).
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty()) && selector.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn empty_selects_everything_and_match_labels_must_all_hold() {
        let us = labels(&[("region", "us"), ("tier", "gold")]);
        assert!(matches(&LabelSelector::default(), &us).unwrap());
        assert!(is_empty(&LabelSelector::default()));
        let sel = LabelSelector { match_labels: Some(labels(&[("region", "us")])), ..Default::default() };
        assert!(matches(&sel, &us).unwrap());
        assert!(!is_empty(&sel));
        let both = LabelSelector { match_labels: Some(labels(&[("region", "us"), ("tier", "silver")])), ..Default::default() };
        assert!(!matches(&both, &us).unwrap());
    }

    #[test]
    fn expressions_follow_the_api_machinery_semantics() {
        let us = labels(&[("region", "us")]);
        let case = |e: LabelSelectorRequirement| matches(&LabelSelector { match_expressions: Some(vec![e]), ..Default::default() }, &us);
        assert_eq!(case(expr("region", "In", &["us", "eu"])), Ok(true));
        assert_eq!(case(expr("region", "In", &["eu"])), Ok(false));
        assert_eq!(case(expr("region", "NotIn", &["eu"])), Ok(true));
        // NotIn holds when the key is absent, as in Kubernetes.
        assert_eq!(case(expr("zone", "NotIn", &["a"])), Ok(true));
        assert_eq!(case(expr("region", "Exists", &[])), Ok(true));
        assert_eq!(case(expr("region", "DoesNotExist", &[])), Ok(false));
        assert!(matches!(case(expr("region", "Equals", &["us"])), Err(SelectorError::Operator { index: 0, .. })));
        assert!(matches!(case(expr("region", "In", &[])), Err(SelectorError::Values { .. })));
        assert!(matches!(case(expr("region", "Exists", &["us"])), Err(SelectorError::Values { .. })));
    }
}
