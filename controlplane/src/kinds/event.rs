//! Events, served as core/v1 and as events.k8s.io/v1 from one storage, as in
//! Kubernetes: the events.k8s.io shape is converted on the way in and out.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::print::{self, col};
use super::{decode_typed, decoded, Decoded, Strategy};
use crate::objmeta::{age, NameRule};

/// core/v1 Event.
#[derive(Debug)]
pub struct Event;

/// events.k8s.io/v1 Event, stored as a core/v1 Event.
#[derive(Debug)]
pub struct EventV1;

/// Both versions select on the core fields, as kube-apiserver's event storage does.
const SELECTABLE: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

impl Strategy for Event {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::Event>("Event", obj, old, status_write, decoded)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        SELECTABLE
    }

    fn columns(&self) -> Vec<Value> {
        event_columns()
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        event_cells(obj)
    }
}

impl Strategy for EventV1 {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        let mut d = decode_typed::<k8s_openapi::api::events::v1::Event>("Event", obj, old, status_write, decoded)?;
        d.value = event_from_v1(&d.value);
        Ok(d)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        SELECTABLE
    }

    fn converts(&self) -> bool {
        true
    }

    fn to_external<'a>(&self, stored: &'a Value) -> Cow<'a, Value> {
        Cow::Owned(event_to_v1(stored))
    }

    fn stored_as(&self) -> Option<(&'static str, &'static str)> {
        Some(("core", "events"))
    }

    fn columns(&self) -> Vec<Value> {
        event_columns()
    }

    /// A table gets the objects in this version's shape; the cells read the core fields.
    fn cells(&self, obj: &Value) -> Vec<Value> {
        event_cells(&event_from_v1(obj))
    }
}

fn event_columns() -> Vec<Value> {
    print::columns(&[
        col("Last Seen", "string", 0, "Time when last event occurred"),
        col("Type", "string", 0, "Type of this event (Normal, Warning)"),
        col("Reason", "string", 0, "Short, machine understandable string that gives the reason for this event"),
        col("Object", "string", 0, "The object this event is about"),
        col("Message", "string", 0, "A human-readable description of the status of this operation"),
        col("Source", "string", 1, "Component reporting this event"),
        col("First Seen", "string", 1, "Time when this event first occurred"),
        col("Count", "string", 1, "Number of times this event occurred"),
        col("Name", "string", 1, "Name of the event"),
    ])
}

/// The cells of `kubectl get events`, from the stored (core) shape.
fn event_cells(obj: &Value) -> Vec<Value> {
    let s = print::s;
    let last = [s(obj, "/lastTimestamp"), s(obj, "/eventTime"), s(obj, "/metadata/creationTimestamp")]
        .into_iter()
        .find(|t| !t.is_empty())
        .map(|t| age(Some(t)))
        .unwrap_or_else(|| "<unknown>".into());
    let first = match s(obj, "/firstTimestamp") {
        "" => "<unknown>".to_string(),
        t => age(Some(t)),
    };
    let kind = s(obj, "/involvedObject/kind").to_lowercase();
    let source = [s(obj, "/source/component"), s(obj, "/reportingComponent")].into_iter().find(|c| !c.is_empty()).unwrap_or_default();
    let count = obj.pointer("/count").and_then(Value::as_i64).or_else(|| obj.pointer("/series/count").and_then(Value::as_i64)).unwrap_or(1);
    vec![
        json!(last),
        json!(s(obj, "/type")),
        json!(s(obj, "/reason")),
        json!(format!("{kind}/{}", s(obj, "/involvedObject/name"))),
        json!(s(obj, "/message")),
        json!(source),
        json!(first),
        json!(count.to_string()),
        print::name(obj),
    ]
}

/// Converts a stored core/v1 Event to its events.k8s.io/v1 shape.
pub fn event_to_v1(core: &Value) -> Value {
    Value::Object(renamed(core, "events.k8s.io/v1", |(core, v1)| (core, v1)))
}

/// Converts an events.k8s.io/v1 Event to the stored core/v1 shape. The core fields
/// kubectl prints (count, lastTimestamp) are filled from the series when absent, so
/// `kubectl describe` shows events that controllers record through the new API.
pub fn event_from_v1(v1: &Value) -> Value {
    let mut out = renamed(v1, "v1", |(core, v1)| (v1, core));
    out.entry("involvedObject").or_insert_with(|| json!({}));
    Value::Object(out)
}

/// `event` as an Event of `api_version`, its fields renamed by [`RENAMES`] read in the
/// direction `way` gives (from, to).
fn renamed(event: &Value, api_version: &str, way: fn((&'static str, &'static str)) -> (&'static str, &'static str)) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    for (from, to) in RENAMES.into_iter().map(way) {
        if let Some(v) = event.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    out
}

/// core/v1 field → events.k8s.io/v1 field.
const RENAMES: [(&str, &str); 15] = [
    ("metadata", "metadata"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_print_the_same_row() {
        let core = json!({"metadata": {"name": "e", "creationTimestamp": "2026-01-01T00:00:00Z"}, "involvedObject": {"kind": "Deployment", "name": "web"},
                          "reason": "Scheduled", "message": "placed", "type": "Normal", "source": {"component": "flotilla-scheduler"}, "count": 2});
        let row = Event.cells(&core);
        assert_eq!(row[3], "deployment/web");
        assert_eq!(EventV1.cells(&event_to_v1(&core)), row);
    }

    #[test]
    fn events_convert_both_ways() {
        let v1 = json!({"metadata": {"name": "e"}, "regarding": {"name": "web", "kind": "Deployment"}, "note": "hello", "reason": "Scheduled", "type": "Normal", "reportingController": "flotilla"});
        let core = event_from_v1(&v1);
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "hello");
        let back = event_to_v1(&core);
        assert_eq!(back["note"], "hello");
        assert_eq!(back["reportingController"], "flotilla");
    }
}
