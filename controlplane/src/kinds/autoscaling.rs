//! HorizontalPodAutoscalers (kubernetes pkg/registry/autoscaling, pkg/apis/autoscaling),
//! served as autoscaling/v2 and as autoscaling/v1 from one storage in the v2 shape.
//! kubectl 1.32's `kubectl autoscale` writes v1; `kubectl get` reads v2.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::networking::AtomicLists;
use super::print::{self, col, AGE, NAME};
use super::rules::{invalid, required, unsupported};
use super::{decode_typed, decoded, set_default, Decoded, Strategy};
use crate::error::Cause;
use crate::patch::meta::PatchMeta;

/// autoscaling/v2 HorizontalPodAutoscaler.
#[derive(Debug)]
pub struct HorizontalPodAutoscaler;

/// autoscaling/v1 HorizontalPodAutoscaler: the v2 object seen through the v1 fields
/// (one CPU target), stored as v2.
#[derive(Debug)]
pub struct HorizontalPodAutoscalerV1;

const METRIC_TYPES: [&str; 5] = ["ContainerResource", "External", "Object", "Pods", "Resource"];

/// The field that carries each metric type's source.
fn source_field(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "ContainerResource" => "containerResource",
        "External" => "external",
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        _ => return None,
    })
}

/// The average CPU utilization a v2 autoscaler targets when it names no metric
/// (autoscaling.DefaultCPUUtilization).
const DEFAULT_CPU_UTILIZATION: i64 = 80;

impl Strategy for HorizontalPodAutoscaler {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler as Hpa;
        decode_typed::<Hpa>("HorizontalPodAutoscaler", obj, old, status_write, decoded)
    }

    /// SetDefaults_HorizontalPodAutoscaler: one replica at least, the CPU target when
    /// no metric is named, and the scaling rules filled in only when some are given.
    fn default(&self, obj: &mut Value) {
        set_default(obj, &["spec", "minReplicas"], json!(1));
        let no_metrics = obj.pointer("/spec/metrics").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if no_metrics {
            obj["spec"]["metrics"] = json!([cpu_metric(DEFAULT_CPU_UTILIZATION)]);
        }
        if let Some(behavior) = obj.pointer_mut("/spec/behavior").filter(|b| b.is_object()) {
            let scale_up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ]});
            let scale_down = json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]});
            for (direction, defaults) in [("scaleUp", scale_up), ("scaleDown", scale_down)] {
                let mut rules = defaults;
                for (k, v) in behavior.get(direction).and_then(Value::as_object).into_iter().flatten() {
                    if !v.is_null() {
                        rules[k] = v.clone();
                    }
                }
                behavior[direction] = rules;
            }
        }
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let target = obj.pointer("/spec/scaleTargetRef");
        for f in ["kind", "name"] {
            if target.and_then(|t| t.get(f)).and_then(Value::as_str).is_none_or(str::is_empty) {
                causes.push(required(&format!("spec.scaleTargetRef.{f}")));
            }
        }
        // Zero is allowed only to an autoscaler that had it (HPAScaleToZero is off).
        let had_zero = old.and_then(|o| o.pointer("/spec/minReplicas")).and_then(Value::as_i64) == Some(0);
        let min = obj.pointer("/spec/minReplicas").and_then(Value::as_i64);
        let max = obj.pointer("/spec/maxReplicas").and_then(Value::as_i64).unwrap_or(0);
        if let Some(m) = min.filter(|m| *m < if had_zero { 0 } else { 1 }) {
            causes.push(invalid("spec.minReplicas", &json!(m), "must be greater than or equal to 1"));
        }
        if max < 1 {
            causes.push(invalid("spec.maxReplicas", &json!(max), "must be greater than 0"));
        } else if min.is_some_and(|m| max < m) {
            causes.push(invalid("spec.maxReplicas", &json!(max), "must be greater than or equal to `minReplicas`"));
        }
        for (i, m) in obj.pointer("/spec/metrics").and_then(Value::as_array).into_iter().flatten().enumerate() {
            causes.extend(metric(&format!("spec.metrics[{i}]"), m));
        }
        for direction in ["scaleUp", "scaleDown"] {
            if let Some(rules) = obj.pointer(&format!("/spec/behavior/{direction}")).filter(|r| r.is_object()) {
                causes.extend(scaling_rules(&format!("spec.behavior.{direction}"), rules));
            }
        }
        causes
    }

    /// As kube-apiserver does with its HPAGeneration feature: a spec change bumps the
    /// generation, which the autoscaler reports back as `status.observedGeneration`.
    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        super::networking::spec_changed(old, new)
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &AtomicLists
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Reference", "string", 0, "scaleTargetRef points to the target resource to scale."),
            col("Targets", "string", 0, "metrics contains the specifications for which to use to calculate the desired replica count."),
            col(
                "MinPods",
                "string",
                0,
                "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
            ),
            col("MaxPods", "string", 0, "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up."),
            col("Replicas", "string", 0, "currentReplicas is current number of replicas of pods managed by this autoscaler."),
            AGE,
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let reference = format!("{}/{}", print::s(obj, "/spec/scaleTargetRef/kind"), print::s(obj, "/spec/scaleTargetRef/name"));
        let min = obj.pointer("/spec/minReplicas").and_then(Value::as_i64).map_or("<unset>".to_string(), |m| m.to_string());
        vec![
            print::name(obj),
            json!(reference),
            json!(targets(obj)),
            json!(min),
            json!(print::n(obj, "/spec/maxReplicas")),
            json!(print::n(obj, "/status/currentReplicas")),
            print::age_of(obj),
        ]
    }
}

/// The TARGETS column: each metric as `current/target`, current from the status entry
/// at the same index; two at most, then how many more.
fn targets(obj: &Value) -> String {
    let specs = obj.pointer("/spec/metrics").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if specs.is_empty() {
        return "<none>".into();
    }
    let current = obj.pointer("/status/currentMetrics").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "<unknown>".into(),
    };
    let percent = |v: Option<&Value>| v.and_then(Value::as_i64).map_or("<unknown>".to_string(), |p| format!("{p}%"));
    let shown: Vec<String> = specs
        .iter()
        .take(2)
        .enumerate()
        .map(|(i, m)| {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
            let Some(source) = source_field(ty) else { return "<unknown type>".to_string() };
            let (spec, status) = (&m[source], current.get(i).map(|c| &c[source]));
            let now = |f: &str| status.and_then(|s| s.pointer(&format!("/current/{f}")));
            let target = &spec["target"];
            match ty {
                "Resource" | "ContainerResource" => {
                    let name = spec["name"].as_str().unwrap_or_default();
                    match target.get("averageValue") {
                        Some(avg) => format!("{name}: {}/{}", text(now("averageValue")), text(Some(avg))),
                        None => {
                            let goal =
                                target.get("averageUtilization").and_then(Value::as_i64).map_or("<auto>".into(), |p| format!("{p}%"));
                            format!("{name}: {}/{goal}", percent(now("averageUtilization")))
                        }
                    }
                }
                "Pods" => format!("{}/{}", text(now("averageValue")), text(target.get("averageValue"))),
                _ => match target.get("averageValue") {
                    Some(avg) => format!("{}/{} (avg)", text(now("averageValue")), text(Some(avg))),
                    None => format!("{}/{}", text(now("value")), text(target.get("value"))),
                },
            }
        })
        .collect();
    let mut out = shown.join(", ");
    if specs.len() > 2 {
        out.push_str(&format!(" + {} more...", specs.len() - 2));
    }
    out
}

/// A metric names its type and carries that source, and only that one.
fn metric(field: &str, m: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
    if ty.is_empty() {
        causes.push(Cause::new("FieldValueRequired", &format!("{field}.type"), "Required value: must specify a metric source type"));
        return causes;
    }
    let Some(own) = source_field(ty) else {
        causes.push(unsupported(&format!("{field}.type"), ty, &METRIC_TYPES));
        return causes;
    };
    if m.get(own).is_none_or(Value::is_null) {
        causes.push(Cause::new(
            "FieldValueRequired",
            &format!("{field}.{own}"),
            "Required value: must populate information for the given metric source",
        ));
    }
    for other in METRIC_TYPES.iter().filter_map(|t| source_field(t)).filter(|o| *o != own) {
        if m.get(other).is_some_and(|v| !v.is_null()) {
            causes.push(Cause::new(
                "FieldValueForbidden",
                &format!("{field}.{other}"),
                "Forbidden: must populate the given metric source only",
            ));
        }
    }
    causes
}

/// A direction's scaling rules (validateScalingRules).
fn scaling_rules(field: &str, rules: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(w) = rules.get("stabilizationWindowSeconds").and_then(Value::as_i64) {
        if w < 0 {
            causes.push(invalid(&format!("{field}.stabilizationWindowSeconds"), &json!(w), "must be greater than or equal to zero"));
        } else if w > 3600 {
            causes.push(invalid(&format!("{field}.stabilizationWindowSeconds"), &json!(w), "must be less than or equal to 3600"));
        }
    }
    if let Some(p) = rules.get("selectPolicy").and_then(Value::as_str) {
        if !matches!(p, "Max" | "Min" | "Disabled") {
            causes.push(unsupported(&format!("{field}.selectPolicy"), p, &["Disabled", "Max", "Min"]));
        }
    }
    let policies = rules.get("policies").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if policies.is_empty() {
        causes.push(Cause::new("FieldValueRequired", &format!("{field}.policies"), "Required value: must specify at least one Policy"));
    }
    for (i, p) in policies.iter().enumerate() {
        let f = format!("{field}.policies[{i}]");
        let ty = p.get("type").and_then(Value::as_str).unwrap_or_default();
        if !matches!(ty, "Pods" | "Percent") {
            causes.push(unsupported(&format!("{f}.type"), ty, &["Percent", "Pods"]));
        }
        let value = p.get("value").and_then(Value::as_i64).unwrap_or(0);
        if value <= 0 {
            causes.push(invalid(&format!("{f}.value"), &json!(value), "must be greater than zero"));
        }
        let period = p.get("periodSeconds").and_then(Value::as_i64).unwrap_or(0);
        if period <= 0 {
            causes.push(invalid(&format!("{f}.periodSeconds"), &json!(period), "must be greater than zero"));
        } else if period > 1800 {
            causes.push(invalid(&format!("{f}.periodSeconds"), &json!(period), "must be less than or equal to 1800"));
        }
    }
    causes
}

/// A v2 metric on the pods' average CPU utilization.
fn cpu_metric(percent: i64) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": percent}}})
}

/// Whether a v2 metric is the CPU utilization target that v1 can express.
fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m.pointer("/resource/name") == Some(&json!("cpu"))
        && m.pointer("/resource/target/type") == Some(&json!("Utilization"))
}

/// The v2 object a v1 one stands for. What v1 cannot say (other metrics, scaling
/// rules, conditions) is kept from the stored object, so a v1 client's update loses
/// nothing a v2 client wrote.
fn v1_to_v2(v1: &Value, stored: Option<&Value>) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("autoscaling/v2"));
    out.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    if let Some(m) = v1.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    if let Some(spec) = v1.get("spec").and_then(Value::as_object) {
        let mut s = Map::new();
        for f in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
            if let Some(v) = spec.get(f) {
                s.insert(f.into(), v.clone());
            }
        }
        let kept = stored.and_then(|o| o.pointer("/spec/metrics")).and_then(Value::as_array).into_iter().flatten();
        let mut metrics: Vec<Value> =
            spec.get("targetCPUUtilizationPercentage").and_then(Value::as_i64).map(cpu_metric).into_iter().collect();
        metrics.extend(kept.filter(|m| !is_cpu_utilization(m)).cloned());
        if !metrics.is_empty() {
            s.insert("metrics".into(), Value::Array(metrics));
        }
        if let Some(b) = stored.and_then(|o| o.pointer("/spec/behavior")) {
            s.insert("behavior".into(), b.clone());
        }
        out.insert("spec".into(), Value::Object(s));
    }
    if let Some(status) = v1.get("status").and_then(Value::as_object) {
        let mut s = Map::new();
        for f in ["observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"] {
            if let Some(v) = status.get(f) {
                s.insert(f.into(), v.clone());
            }
        }
        if let Some(cpu) = status.get("currentCPUUtilizationPercentage").and_then(Value::as_i64) {
            s.insert(
                "currentMetrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}}]),
            );
        }
        if let Some(c) = stored.and_then(|o| o.pointer("/status/conditions")) {
            s.insert("conditions".into(), c.clone());
        }
        out.insert("status".into(), Value::Object(s));
    }
    Value::Object(out)
}

/// The v1 view of a stored v2 object: its CPU utilization target and reading.
fn v2_to_v1(v2: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("autoscaling/v1"));
    out.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    if let Some(m) = v2.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    if let Some(spec) = v2.get("spec").and_then(Value::as_object) {
        let mut s = Map::new();
        for f in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
            if let Some(v) = spec.get(f) {
                s.insert(f.into(), v.clone());
            }
        }
        let metrics = spec.get("metrics").and_then(Value::as_array).into_iter().flatten();
        if let Some(cpu) = metrics.filter(|m| is_cpu_utilization(m)).find_map(|m| m.pointer("/resource/target/averageUtilization")) {
            s.insert("targetCPUUtilizationPercentage".into(), cpu.clone());
        }
        out.insert("spec".into(), Value::Object(s));
    }
    if let Some(status) = v2.get("status").and_then(Value::as_object) {
        let mut s = Map::new();
        for f in ["observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"] {
            if let Some(v) = status.get(f) {
                s.insert(f.into(), v.clone());
            }
        }
        let current = status.get("currentMetrics").and_then(Value::as_array).into_iter().flatten();
        let cpu = current
            .filter(|m| m["type"] == "Resource" && m.pointer("/resource/name") == Some(&json!("cpu")))
            .find_map(|m| m.pointer("/resource/current/averageUtilization"));
        if let Some(cpu) = cpu {
            s.insert("currentCPUUtilizationPercentage".into(), cpu.clone());
        }
        out.insert("status".into(), Value::Object(s));
    }
    Value::Object(out)
}

impl Strategy for HorizontalPodAutoscalerV1 {
    /// The v1 body is checked against its own type, then stored as v2. Nothing is taken
    /// as stored: the stored object is in the other shape.
    fn decode(&self, obj: Value, old: Option<&Value>, _status_write: bool) -> Result<Decoded, String> {
        use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler as Hpa;
        let mut d = decode_typed::<Hpa>("HorizontalPodAutoscaler", obj, None, false, decoded)?;
        d.value = v1_to_v2(&d.value, old);
        Ok(d)
    }

    fn default(&self, obj: &mut Value) {
        HorizontalPodAutoscaler.default(obj)
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        HorizontalPodAutoscaler.validate(obj, old)
    }

    /// As kube-apiserver does with its HPAGeneration feature: a spec change bumps the
    /// generation, which the autoscaler reports back as `status.observedGeneration`.
    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        super::networking::spec_changed(old, new)
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &AtomicLists
    }

    fn converts(&self) -> bool {
        true
    }

    fn to_external<'a>(&self, stored: &'a Value) -> Cow<'a, Value> {
        Cow::Owned(v2_to_v1(stored))
    }

    fn stored_as(&self) -> Option<(&'static str, &'static str)> {
        Some(("autoscaling", "horizontalpodautoscalers"))
    }

    fn columns(&self) -> Vec<Value> {
        HorizontalPodAutoscaler.columns()
    }

    /// The cells of the v2 object this v1 one stands for.
    fn cells(&self, obj: &Value) -> Vec<Value> {
        HorizontalPodAutoscaler.cells(&v1_to_v2(obj, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_update_keeps_what_only_v2_can_say() {
        let stored = json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5, "metrics": [
            cpu_metric(70),
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 60}}},
        ], "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}, "status": {"conditions": [{"type": "AbleToScale"}]}});
        let v1 = v2_to_v1(&stored);
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
        let mut changed = v1.clone();
        changed["spec"]["targetCPUUtilizationPercentage"] = json!(50);
        let back = v1_to_v2(&changed, Some(&stored));
        assert_eq!(back["spec"]["metrics"][0], cpu_metric(50));
        assert_eq!(back["spec"]["metrics"][1]["resource"]["name"], "memory");
        assert_eq!(back["spec"]["behavior"], stored["spec"]["behavior"]);
        assert_eq!(back["status"]["conditions"], stored["status"]["conditions"]);
    }

    #[test]
    fn targets_read_as_kubectl_prints_them() {
        let mut hpa = json!({"spec": {"metrics": [cpu_metric(80)]}});
        assert_eq!(targets(&hpa), "cpu: <unknown>/80%");
        hpa["status"] =
            json!({"currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 12}}}]});
        assert_eq!(targets(&hpa), "cpu: 12%/80%");
        hpa["spec"]["metrics"] = json!([cpu_metric(80), cpu_metric(70), cpu_metric(60)]);
        assert_eq!(targets(&hpa), "cpu: 12%/80%, cpu: <unknown>/70% + 1 more...");
        assert_eq!(targets(&json!({"spec": {}})), "<none>");
    }
}
