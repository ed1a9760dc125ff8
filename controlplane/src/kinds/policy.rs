//! PodDisruptionBudgets (kubernetes pkg/registry/policy/poddisruptionbudget,
//! pkg/apis/policy/validation).

use serde_json::{json, Value};

use super::networking::{spec_changed, AtomicLists};
use super::print::{self, col, AGE, NAME};
use super::rules::{self, invalid, unsupported};
use super::{decode_typed, decoded, Decoded, Strategy};
use crate::error::Cause;
use crate::patch::meta::PatchMeta;

/// policy/v1 PodDisruptionBudget: the generation moves on a spec change, and an update
/// must name the resourceVersion it replaces.
#[derive(Debug)]
pub struct PodDisruptionBudget;

impl Strategy for PodDisruptionBudget {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::policy::v1::PodDisruptionBudget>("PodDisruptionBudget", obj, old, status_write, decoded)
    }

    fn validate(&self, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        let set = |f: &str| spec.get(f).filter(|v| !v.is_null());
        if set("minAvailable").is_some() && set("maxUnavailable").is_some() {
            causes.push(invalid("spec", &spec, "minAvailable and maxUnavailable cannot be both set"));
        }
        for f in ["minAvailable", "maxUnavailable"] {
            if let Some(v) = set(f) {
                causes.extend(int_or_percent(&format!("spec.{f}"), v));
            }
        }
        if let Some(selector) = set("selector") {
            causes.extend(rules::label_selector("spec.selector", selector));
        }
        if let Some(policy) = set("unhealthyPodEvictionPolicy").and_then(Value::as_str) {
            if !matches!(policy, "AlwaysAllow" | "IfHealthyBudget") {
                causes.push(unsupported("spec.unhealthyPodEvictionPolicy", policy, &["AlwaysAllow", "IfHealthyBudget"]));
            }
        }
        causes
    }

    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        spec_changed(old, new)
    }

    fn allow_unconditional_update(&self) -> bool {
        false
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &AtomicLists
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Min Available", "string", 0, "The minimum number of pods that must be available."),
            col("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
            col("Allowed Disruptions", "integer", 0, "Calculated number of pods that may be disrupted at this time."),
            AGE,
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let shown = |f: &str| match obj.pointer(&format!("/spec/{f}")) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => "N/A".into(),
        };
        vec![
            print::name(obj),
            json!(shown("minAvailable")),
            json!(shown("maxUnavailable")),
            json!(print::n(obj, "/status/disruptionsAllowed")),
            print::age_of(obj),
        ]
    }
}

/// A count (at least 0) or a percentage (`0%` to `100%`).
fn int_or_percent(field: &str, v: &Value) -> Option<Cause> {
    match v {
        Value::String(s) => {
            let digits = s.strip_suffix('%').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            match digits.map(str::parse::<u64>) {
                None => Some(invalid(
                    field,
                    v,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )),
                Some(Ok(p)) if p <= 100 => None,
                Some(_) => Some(invalid(field, v, "must not be greater than 100%")),
            }
        }
        _ if v.as_i64().is_some_and(|n| n < 0) => Some(invalid(field, v, "must be greater than or equal to 0")),
        _ => None,
    }
}
