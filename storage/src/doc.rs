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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_are_read_from_the_text_once_and_kept() {
        let v = json!({
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "1"}, "managedFields": [{"manager": "x"}]},
            "spec": {"nodeName": "n1"}
        });
        let d = Doc::from_raw(v.to_string()).unwrap();
        assert_eq!(Value::Object(d.labels().clone()), v["metadata"]["labels"]);
        assert!(std::ptr::eq(d.labels(), d.labels()), "the labels are read once and kept");
        for odd in [json!({"metadata": {"labels": null}}), json!({"metadata": {"labels": 3}}), json!({"kind": "x"})] {
            assert!(Doc::from_raw(odd.to_string()).unwrap().labels().is_empty(), "{odd}");
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
