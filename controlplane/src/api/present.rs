//! What a client is shown: stored objects converted and annotated, lists serialized
//! from the shared stored values.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::objmeta;
use crate::store::Entry;

use super::*;

/// A List response, serialized straight from the shared stored values: a large list
/// costs one serialization pass, not a deep copy of every object first.
#[derive(serde::Serialize)]
pub struct ListBody {
    /// `<Kind>List`.
    pub kind: String,
    /// The group/version.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The list's revision and continue token.
    pub metadata: ListMeta,
    /// The objects, as clients see them.
    pub items: Vec<Presented>,
}

/// `metav1.ListMeta`.
#[derive(serde::Serialize)]
pub struct ListMeta {
    /// The revision the list was read at.
    #[serde(rename = "resourceVersion")]
    pub resource_version: String,
    /// Where the next page starts, when the list was cut at `limit`.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// An object as a response shows it: the stored value itself when no change is
/// needed (shared, not copied), or a changed copy.
#[derive(Debug, Clone)]
pub enum Presented {
    /// The stored value, unchanged.
    Stored(Arc<Value>),
    /// A copy changed for this response (another version, the cluster annotation).
    Changed(Value),
    /// The stored document, unparsed: serialized by copying its text; parsed only if
    /// someone looks inside (a Table, a delete-collection).
    Raw(Arc<crate::store::Doc>, Arc<std::sync::OnceLock<Arc<Value>>>),
}

impl Presented {
    pub(super) fn raw(doc: Arc<crate::store::Doc>) -> Self {
        Presented::Raw(doc, Arc::default())
    }
}

impl std::ops::Deref for Presented {
    type Target = Value;
    fn deref(&self) -> &Value {
        match self {
            Presented::Stored(v) => v,
            Presented::Changed(v) => v,
            Presented::Raw(doc, parsed) => parsed.get_or_init(|| doc.value()),
        }
    }
}

impl serde::Serialize for Presented {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Presented::Raw(doc, _) => {
                let raw: &serde_json::value::RawValue = serde_json::from_str(doc.raw()).map_err(serde::ser::Error::custom)?;
                raw.serialize(s)
            }
            other => (**other).serialize(s),
        }
    }
}

impl std::borrow::Borrow<Value> for Presented {
    fn borrow(&self) -> &Value {
        self
    }
}

impl Presented {
    /// The object as an owned value (copies a shared one).
    pub fn into_value(self) -> Value {
        match self {
            Presented::Stored(v) => Arc::unwrap_or_clone(v),
            Presented::Changed(v) => v,
            Presented::Raw(doc, _) => Arc::unwrap_or_clone(doc.value()),
        }
    }
}

/// Whether objects are shown to this scope exactly as stored: not in the wildcard
/// view (which adds the workspace annotation), and not as events.k8s.io Events.
pub(super) fn shown_as_stored(scope: &Scope) -> bool {
    !scope.wildcard() && !scope.rt.strategy.converts()
}

/// [`present`] without copying when the stored value is shown as it is.
pub fn present_shared(scope: &Scope, workspace: &str, stored: &Entry) -> Presented {
    if !shown_as_stored(scope) {
        return Presented::Changed(present(scope, workspace, &stored.value));
    }
    match &stored.doc {
        // Shown as stored: the response copies the stored text, and whoever looks
        // inside finds the value already parsed.
        Some(doc) => Presented::Raw(doc.clone(), Arc::new(std::sync::OnceLock::from(stored.value.clone()))),
        None => Presented::Stored(stored.value.clone()),
    }
}

/// The object as the client sees it: converted to the requested group's shape, and
/// annotated with its workspace on wildcard requests.
pub fn present(scope: &Scope, workspace: &str, stored: &Value) -> Value {
    let mut v = to_external(scope, stored).into_owned();
    if scope.wildcard() {
        let m = objmeta::meta_mut(&mut v);
        let ann = m.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            a.insert(CLUSTER_ANNOTATION.into(), json!(workspace));
        }
    }
    v
}

/// A stored document's text with its metadata changed as a watch presents it: with
/// the annotation naming its workspace (`workspace`, for the wildcard view) and
/// without managedFields (`omit_managed_fields`). Only the annotations are parsed into
/// a tree; everything else is copied as text, so a watch event costs one pass over the
/// text instead of a deep copy and a full serialization. `None` when the text is not a
/// JSON object with an object `metadata` (never for stored objects).
pub fn with_metadata(raw: &str, workspace: Option<&str>, omit_managed_fields: bool) -> Option<String> {
    let fields: RawFields<'_> = serde_json::from_str(raw).ok()?;
    let mut out = String::with_capacity(raw.len() + CLUSTER_ANNOTATION.len() + 64);
    let mut has_metadata = false;
    out.push('{');
    for (i, (key, value)) in fields.0.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_key(&mut out, key)?;
        if key != "metadata" {
            out.push_str(value.get());
            continue;
        }
        has_metadata = true;
        let meta: RawFields<'_> = serde_json::from_str(value.get()).ok()?;
        let mut annotations: Option<Map<String, Value>> = None;
        let mut first = true;
        out.push('{');
        for (k, v) in &meta.0 {
            if k == "managedFields" && omit_managed_fields {
                continue;
            }
            if k == "annotations" && workspace.is_some() {
                annotations = Some(serde_json::from_str(v.get()).unwrap_or_default());
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            push_key(&mut out, k)?;
            out.push_str(v.get());
        }
        if let Some(ws) = workspace {
            let mut annotations = annotations.unwrap_or_default();
            annotations.insert(CLUSTER_ANNOTATION.into(), json!(ws));
            if !first {
                out.push(',');
            }
            push_key(&mut out, "annotations")?;
            out.push_str(&serde_json::to_string(&annotations).ok()?);
        }
        out.push('}');
    }
    out.push('}');
    has_metadata.then_some(out)
}

/// A stored document's text with `metadata.resourceVersion` set to `rv`, everything
/// else copied as text. `None` when the text is not a JSON object with an object
/// `metadata`.
pub fn with_resource_version(raw: &str, rv: &str) -> Option<String> {
    // A field's key, after a comma unless it is the first.
    let key = |out: &mut String, first: bool, key: &str| -> Option<()> {
        if !first {
            out.push(',');
        }
        push_key(out, key)
    };
    let fields: RawFields<'_> = serde_json::from_str(raw).ok()?;
    let rv = serde_json::to_string(rv).ok()?;
    let mut out = String::with_capacity(raw.len() + 16);
    let mut has_metadata = false;
    out.push('{');
    for (i, (name, value)) in fields.0.iter().enumerate() {
        key(&mut out, i == 0, name)?;
        if name != "metadata" {
            out.push_str(value.get());
            continue;
        }
        has_metadata = true;
        let meta: RawFields<'_> = serde_json::from_str(value.get()).ok()?;
        out.push('{');
        for (j, (k, v)) in meta.0.iter().enumerate() {
            key(&mut out, j == 0, k)?;
            out.push_str(if k == "resourceVersion" { &rv } else { v.get() });
        }
        if !meta.0.iter().any(|(k, _)| k == "resourceVersion") {
            key(&mut out, meta.0.is_empty(), "resourceVersion")?;
            out.push_str(&rv);
        }
        out.push('}');
    }
    out.push('}');
    has_metadata.then_some(out)
}

/// Appends `"key":` to a JSON text being written.
fn push_key(out: &mut String, key: &str) -> Option<()> {
    out.push_str(&serde_json::to_string(key).ok()?);
    out.push(':');
    Some(())
}

/// An object's fields in order, each value left as text.
struct RawFields<'a>(Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawFields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = RawFields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Self::Value, M::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = m.next_entry::<String, &'de serde_json::value::RawValue>()? {
                    fields.push(entry);
                }
                Ok(RawFields(fields))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

pub(super) fn to_external<'a>(scope: &Scope, stored: &'a Value) -> std::borrow::Cow<'a, Value> {
    scope.rt.strategy.to_external(stored)
}

/// Patches and scale writes work on the external shape; admission converts it back.
pub(super) fn to_internal(_scope: &Scope, external: Value) -> Value {
    external
}
