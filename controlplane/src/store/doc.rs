//! Stored documents: kept as their serialized JSON, parsed on demand.
//!
//! A `serde_json::Value` tree takes about nine times the memory of its JSON text (a
//! 3.5 KB pod is 31 KB of tree), and the store keeps every object plus the older
//! versions its watch window holds. So the store keeps the text, and hands out parsed
//! trees on read. The last tree parsed is remembered weakly: while any reader still
//! holds it (a watch event fanning out to many watchers, a controller working on it),
//! other readers share it instead of parsing again, and it is freed with its last reader.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde_json::{Map, Value};

/// The metadata that routing and access checks need, a few strings where the whole
/// tree of a pod is some 30 KB.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocMeta {
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<String>,
    /// `metadata.finalizers`.
    pub finalizers: Option<Vec<String>>,
    /// `metadata.ownerReferences`, by uid.
    pub owner_references: Option<Vec<OwnerUid>>,
}

/// The uid of one owner reference.
#[derive(Debug, serde::Deserialize)]
pub struct OwnerUid {
    /// `uid`.
    pub uid: Option<String>,
}

/// One stored JSON document.
pub struct Doc {
    raw: Box<str>,
    parsed: Mutex<Weak<Value>>,
    /// `metadata.labels`, once a label selector has looked at them.
    labels: OnceLock<Box<Map<String, Value>>>,
}

impl std::fmt::Debug for Doc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doc").field("bytes", &self.raw.len()).finish()
    }
}

impl Doc {
    /// A document from a parsed value, which readers share while it lives.
    pub fn new(value: &Arc<Value>) -> Arc<Self> {
        let raw = serde_json::to_string(&**value).expect("a JSON value serializes").into_boxed_str();
        Arc::new(Self { raw, parsed: Mutex::new(Arc::downgrade(value)), labels: OnceLock::new() })
    }

    /// A document from stored text, checked to be JSON.
    pub fn from_raw(raw: String) -> Result<Arc<Self>, serde_json::Error> {
        serde_json::from_str::<serde::de::IgnoredAny>(&raw)?;
        Ok(Arc::new(Self { raw: raw.into_boxed_str(), parsed: Mutex::new(Weak::new()), labels: OnceLock::new() }))
    }

    /// The serialized document.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The metadata fields in [`DocMeta`], read from the text without building the
    /// tree; all empty if the document has no metadata.
    pub fn meta(&self) -> DocMeta {
        #[derive(serde::Deserialize)]
        struct Object {
            metadata: Option<DocMeta>,
        }
        serde_json::from_str::<Object>(&self.raw).ok().and_then(|o| o.metadata).unwrap_or_default()
    }

    /// `metadata.labels` (empty when absent or not an object), read from the text the
    /// first time and kept: each change of a kind is tested against every label-selector
    /// watcher's selector, and a change's previous document is the one the change before
    /// it brought, so each document's labels are read once for all of them.
    pub fn labels(&self) -> &Map<String, Value> {
        self.labels.get_or_init(|| {
            #[derive(serde::Deserialize)]
            struct Object {
                metadata: Option<Meta>,
            }
            #[derive(serde::Deserialize)]
            struct Meta {
                labels: Option<Map<String, Value>>,
            }
            let labels = serde_json::from_str::<Object>(&self.raw).ok().and_then(|o| o.metadata?.labels);
            Box::new(labels.unwrap_or_default())
        })
    }

    /// `metadata.uid`, unless `metadata.deletionTimestamp` is set: every request checks
    /// its workspace's and its token's this way.
    pub fn live_uid(&self) -> Option<String> {
        let meta = self.meta();
        meta.deletion_timestamp.is_none().then_some(meta.uid).flatten()
    }

    /// The parsed document.
    pub fn value(&self) -> Arc<Value> {
        let mut cached = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = cached.upgrade() {
            return v;
        }
        // The text was valid JSON when it was stored, and is never changed.
        let v = Arc::new(serde_json::from_str(&self.raw).unwrap_or(Value::Null));
        *cached = Arc::downgrade(&v);
        v
    }
}

/// The parts of a document that a reader wants, by field path: a filtered watch
/// needs `metadata.labels` and its field selector's paths, not the whole tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Paths {
    /// The whole value.
    All,
    /// Only these members of an object, each with the part of it wanted.
    Members(std::collections::BTreeMap<String, Paths>),
}

impl Paths {
    /// The parts named by dotted paths such as `metadata.labels` or `spec.nodeName`.
    /// No path at all wants nothing.
    pub fn of<'a>(paths: impl IntoIterator<Item = &'a str>) -> Self {
        let mut root = Paths::Members(Default::default());
        for path in paths {
            let mut at = &mut root;
            for seg in path.split('.') {
                at = match at {
                    // Wanted whole already: a deeper path adds nothing.
                    Paths::All => break,
                    Paths::Members(m) => m.entry(seg.to_string()).or_insert_with(|| Paths::Members(Default::default())),
                };
            }
            *at = Paths::All;
        }
        root
    }
}

impl Doc {
    /// The document with only the parts `paths` wants, read from the text without
    /// building the rest of the tree: what a filtered watch's selectors look at, at a
    /// fraction of the cost of [`Doc::value`] for a large object.
    pub fn partial(&self, paths: &Paths) -> Value {
        let mut de = serde_json::Deserializer::from_str(&self.raw);
        serde::de::DeserializeSeed::deserialize(Keep(paths), &mut de).ok().flatten().unwrap_or(Value::Null)
    }
}

/// Reads a value, keeping what its [`Paths`] want: `None` when nothing of it is wanted.
struct Keep<'a>(&'a Paths);

impl<'de> serde::de::DeserializeSeed<'de> for Keep<'_> {
    type Value = Option<Value>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.0 {
            Paths::All => serde::Deserialize::deserialize(d).map(Some),
            Paths::Members(wanted) => d.deserialize_any(KeepMembers(wanted)),
        }
    }
}

struct KeepMembers<'a>(&'a std::collections::BTreeMap<String, Paths>);

/// Looks a member's name up among the wanted ones without copying it.
struct WantedKey<'a>(&'a std::collections::BTreeMap<String, Paths>);

impl<'de, 'a> serde::de::DeserializeSeed<'de> for WantedKey<'a> {
    type Value = Option<(&'a String, &'a Paths)>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, 'a> serde::de::Visitor<'de> for WantedKey<'a> {
    type Value = Option<(&'a String, &'a Paths)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.get_key_value(v))
    }
}

impl<'de> serde::de::Visitor<'de> for KeepMembers<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key_seed(WantedKey(self.0))? {
            match key {
                Some((name, paths)) => {
                    if let Some(v) = map.next_value_seed(Keep(paths))? {
                        out.insert(name.clone(), v);
                    }
                }
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Some(Value::Object(out)))
    }

    // Where members are wanted, anything but an object has none of them.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_partial_read_keeps_the_wanted_paths_and_nothing_else() {
        let v = json!({
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "1"}, "managedFields": [{"manager": "x"}], "uid": "u"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}], "priority": 3},
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}
        });
        let d = Doc::from_raw(v.to_string()).unwrap();
        let paths = Paths::of(["metadata.labels", "spec.nodeName", "status.phase", "spec.priority"]);
        assert_eq!(
            d.partial(&paths),
            json!({"metadata": {"labels": {"app": "web", "tier": "1"}}, "spec": {"nodeName": "n1", "priority": 3}, "status": {"phase": "Running"}})
        );
        // A path into something that is not an object, or absent, keeps nothing there.
        assert_eq!(d.partial(&Paths::of(["spec.containers.name", "spec.missing.x"])), json!({"spec": {}}));
        assert_eq!(d.partial(&Paths::of(["metadata", "metadata.labels.app"])), json!({"metadata": v["metadata"]}));
        assert_eq!(d.partial(&Paths::of([])), json!({}));
        assert_eq!(Value::Object(d.labels().clone()), v["metadata"]["labels"]);
        assert!(std::ptr::eq(d.labels(), d.labels()), "the labels are read once and kept");
        for odd in [json!({"metadata": {"labels": null}}), json!({"metadata": {"labels": 3}}), json!({"kind": "x"})] {
            assert!(Doc::from_raw(odd.to_string()).unwrap().labels().is_empty(), "{odd}");
        }
        // Selectors read the partial document exactly as they read the whole one.
        for p in ["metadata.name", "metadata.labels", "spec.nodeName", "status.phase", "spec.none"] {
            let partial = d.partial(&Paths::of([p]));
            assert_eq!(crate::kinds::field_value(&partial, p), crate::kinds::field_value(&v, p), "{p}");
        }
    }

    #[test]
    fn readers_share_a_parse_while_it_lives() {
        let v = Arc::new(json!({"metadata": {"name": "a"}}));
        let d = Doc::new(&v);
        assert_eq!(d.raw(), r#"{"metadata":{"name":"a"}}"#);
        assert!(Arc::ptr_eq(&d.value(), &v), "the writer's tree is shared");
        drop(v);
        let first = d.value();
        assert!(Arc::ptr_eq(&first, &d.value()), "a live parse is shared");
        assert_eq!(*first, json!({"metadata": {"name": "a"}}));
        assert!(Doc::from_raw("{not json".into()).is_err());
    }

    #[test]
    fn the_live_uid_is_read_from_the_text() {
        let doc = |v: Value| Doc::from_raw(v.to_string()).unwrap();
        assert_eq!(doc(json!({"metadata": {"name": "a", "uid": "u1"}, "spec": {}})).live_uid().as_deref(), Some("u1"));
        assert_eq!(doc(json!({"metadata": {"uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"}})).live_uid(), None);
        assert_eq!(doc(json!({"metadata": {"uid": "u1", "deletionTimestamp": null}})).live_uid().as_deref(), Some("u1"));
        assert_eq!(doc(json!({"metadata": {"name": "a"}})).live_uid(), None);
        assert_eq!(doc(json!({"kind": "Workspace"})).live_uid(), None);
    }
}
