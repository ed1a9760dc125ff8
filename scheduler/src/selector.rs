//! Matching a `metav1.LabelSelector` against a label set, as the API machinery does
//! (`LabelSelectorAsSelector` in apimachinery/pkg/apis/meta/v1/helpers.go): every
//! `matchLabels` pair and every `matchExpressions` requirement must hold; an empty
//! selector matches everything.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub use apimachinery::selector::SelectorError;

/// A typed `metav1.LabelSelector`, checked and ready to match many label sets.
pub fn compile(selector: &LabelSelector) -> Result<apimachinery::selector::LabelSelector, SelectorError> {
    // Most Placements select every cluster; that needs no conversion.
    if is_empty(selector) {
        return Ok(apimachinery::selector::LabelSelector::everything());
    }
    let value = serde_json::to_value(selector).map_err(|e| SelectorError::InvalidLabelSelector(e.to_string()))?;
    apimachinery::selector::LabelSelector::from_label_selector(&value)
}

/// Whether `labels` satisfy `selector`.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
    Ok(compile(selector)?.matches(labels))
}

/// Whether the selector has no terms at all (and so selects everything).
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
        let refused = |e: Result<bool, SelectorError>| e.unwrap_err().to_string();
        assert!(refused(case(expr("region", "Equals", &["us"]))).contains("\"Equals\" is not a valid label selector operator"));
        assert!(refused(case(expr("region", "In", &[]))).contains("values set can't be empty"));
        assert!(refused(case(expr("region", "Exists", &["us"]))).contains("values set must be empty"));
    }
}
