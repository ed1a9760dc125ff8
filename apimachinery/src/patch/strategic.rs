//! Strategic merge patch (`application/strategic-merge-patch+json`), applied the way
//! kube-apiserver applies it.
//!
//! kubectl's client-side apply, `kubectl patch` and many controllers send strategic
//! merge patches, so Flotilla must reproduce apimachinery's
//! `pkg/util/strategicpatch` (`StrategicMergeMapPatch` → `mergeMap`) over plain
//! `serde_json::Value`s. Maps merge recursively and `null` deletes a key; lists merge
//! according to [`PatchMeta`]: by merge key (`ListStrategy::Map`, first key only), as a
//! set of primitives (`ListStrategy::Set`) or by replacement (`ListStrategy::Atomic`).
//! The directives `$patch` (`replace`/`delete`/`merge`), `$retainKeys`,
//! `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>` are applied and
//! never appear in the result.
//!
//! Where Go's behaviour is surprising it is kept, because clients are written against
//! it:
//! - `$patch: delete` on a map that exists leaves an empty map (`{}`), not a missing
//!   key (Go's `handleDirectiveInMergeMap` returns an empty map; upstream test "delete
//!   map from nested map").
//! - Without `$setElementOrder`, merged lists are ordered by `normalizeElementOrder`:
//!   patch items in patch order, interleaved with server-only items by their live
//!   order; a patch item that the live list does not know sorts *before* the remaining
//!   server-only items. So a set union `[a, b] + [c]` yields `[c, a, b]`. kubectl apply
//!   always sends `$setElementOrder` for changed merge lists, which fixes the order.
//! - A value copied from the patch without a live counterpart (a new field, a field
//!   whose JSON type changed, an appended list element) is cleaned the way Go's
//!   `removeDirectives` and `discardNullValuesFromPatch` clean new fields: any map
//!   carrying `$patch` is dropped and `null` map values are dropped.
//! - `$retainKeys` is honoured wherever it appears, as in Go's apply path
//!   (`applyRetainKeysDirective` does not consult the schema; `meta.retain_keys` only
//!   matters when *building* patches). A patch key missing from the list is an error,
//!   as in Go.
//!
//! Deliberate deviations (all on inputs kubectl does not produce):
//! - `$patch: merge` on a map is accepted as the default (Go rejects it as an unknown
//!   patch type); inside a list element it is rejected, as in Go.
//! - Directive keys nested in values Go copies verbatim (a `$patch: replace` map, an
//!   atomic list, a replaced or appended list element) are removed with the same
//!   `removeDirectives` rule, so `$retainKeys`, `$setElementOrder/…` and
//!   `$deleteFromPrimitiveList/…` are also stripped there (after checking they are well
//!   formed); Go leaves them for the typed decoder to ignore. `null` map values there
//!   are dropped rather than stored.
//! - `$deleteFromPrimitiveList` aimed at a list of objects, a `$deleteFromPrimitiveList`
//!   value that is not a list, non-string `$retainKeys` entries, and a `null` patch are
//!   errors (Go silently ignores or mis-merges them). Go's error for `$setElementOrder` over a list
//!   that is empty on both sides is not reproduced (the empty list is kept), nor is its
//!   error for a `$patch` element trailing the last element `$setElementOrder` names.
//! - Go visits patch keys in random map order; here ordinary keys are merged first
//!   and `$deleteFromPrimitiveList` lists last, so a value both added and deleted in one
//!   patch ends up deleted.
//!
//! Recursion follows the depth of the input; `serde_json`'s parser caps that at 128.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::patch::identity_text;
use crate::patch::meta::{ListStrategy, PatchMeta};

type Object = Map<String, Value>;

/// `$patch`: `replace`, `delete` or `merge` for a map or list element.
const PATCH_DIRECTIVE: &str = "$patch";
/// `$retainKeys`: the keys a map keeps after merging.
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
/// `$setElementOrder/<field>`: the final order of the list `<field>`.
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";
/// `$deleteFromPrimitiveList/<field>`: values to remove from the primitive list `<field>`.
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";

/// Why a strategic merge patch could not be applied. Every message starts with the
/// dotted field path it concerns (`<root>` for the top level).
#[derive(Debug, thiserror::Error)]
pub enum StrategicPatchError {
    /// The patch or the object being patched is not a JSON object.
    #[error("the {what} must be a JSON object, got {found}")]
    NotAnObject {
        /// `"patch"` or `"original object"`.
        what: &'static str,
        /// JSON type that was found instead.
        found: &'static str,
    },
    /// A list element merged by key lacks the merge key.
    #[error("{path}: {what} {index} has no merge key \"{key}\"")]
    MissingMergeKey {
        /// Field path of the list.
        path: String,
        /// Which list the element belongs to (`element` means the patch list).
        what: &'static str,
        /// Position of the element in that list.
        index: usize,
        /// The merge key.
        key: String,
    },
    /// An element of a list merged by key is not an object.
    #[error("{path}: {what} {index} is not an object")]
    ElementNotObject {
        /// Field path of the list.
        path: String,
        /// Which list the element belongs to (`element` means the patch list).
        what: &'static str,
        /// Position of the element in that list.
        index: usize,
    },
    /// `$patch` holds something other than `replace`, `delete` or `merge`.
    #[error("{path}: unknown $patch directive {value}")]
    UnknownPatchDirective {
        /// Field path of the map or list holding the directive.
        path: String,
        /// The offending value, as JSON.
        value: String,
    },
    /// A directive's value has the wrong JSON type.
    #[error("{path}: {directive} must be {expected}")]
    DirectiveType {
        /// Field path of the map holding the directive.
        path: String,
        /// The directive key.
        directive: String,
        /// What it should have been.
        expected: &'static str,
    },
    /// A key starts with a directive prefix but is not `<prefix>/<field>`.
    #[error("{path}: malformed directive key \"{key}\"")]
    MalformedDirectiveKey {
        /// Field path of the map holding the key.
        path: String,
        /// The key.
        key: String,
    },
    /// The patch sets a field that its own `$retainKeys` list would drop.
    #[error("{path}: field \"{field}\" is set in the patch but not listed in $retainKeys")]
    NotRetained {
        /// Field path of the map.
        path: String,
        /// The field missing from `$retainKeys`.
        field: String,
    },
    /// The patch list names its elements in a different order than `$setElementOrder`,
    /// or names an element that `$setElementOrder` omits.
    #[error("{path}: the patch list does not follow the order given by $setElementOrder")]
    OrderMismatch {
        /// Field path of the list.
        path: String,
    },
    /// A list field that must be a list is something else.
    #[error("{path}: expected a list in the {side}, got {found}")]
    NotAList {
        /// Field path of the value.
        path: String,
        /// `"patch"` or `"original object"`.
        side: &'static str,
        /// JSON type that was found instead.
        found: &'static str,
    },
    /// A list cannot be merged as asked (mixed element types, nested lists, objects
    /// without a merge key, ...).
    #[error("{path}: {problem}")]
    InvalidList {
        /// Field path of the list.
        path: String,
        /// What is wrong.
        problem: &'static str,
    },
}

type Result<T> = std::result::Result<T, StrategicPatchError>;

/// Applies `patch` to `original`, returning the merged object. Directives are applied
/// and never appear in the result.
///
/// `original` may be `null` (treated as `{}`); otherwise both must be JSON objects.
/// `meta` says how each list merges; see the module docs for the exact semantics.
pub fn apply(original: &Value, patch: &Value, meta: &dyn PatchMeta) -> std::result::Result<Value, StrategicPatchError> {
    let Value::Object(patch) = patch else {
        return Err(StrategicPatchError::NotAnObject { what: "patch", found: type_name(patch) });
    };
    let original = match original {
        Value::Object(map) => map.clone(),
        Value::Null => Object::new(),
        other => return Err(StrategicPatchError::NotAnObject { what: "original object", found: type_name(other) }),
    };
    let mut merger = Merger { meta, path: Vec::new() };
    merger.merge_map(original, patch).map(Value::Object)
}

/// The JSON type of list elements, as Go's `sliceElementType` distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    String,
    Number,
    Bool,
}

/// Walks the patch, tracking the field path for list strategies and error messages.
struct Merger<'m> {
    meta: &'m dyn PatchMeta,
    path: Vec<String>,
}

impl Merger<'_> {
    /// The current path, dotted, for error messages.
    fn at(&self) -> String {
        if self.path.is_empty() {
            "<root>".to_owned()
        } else {
            self.path.join(".")
        }
    }

    /// Runs `f` one field deeper, restoring the path afterwards.
    fn nested<T>(&mut self, field: &str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.path.push(field.to_owned());
        let out = f(self);
        self.path.pop();
        out
    }

    fn strategy(&self) -> ListStrategy {
        let path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        self.meta.list_strategy(&path)
    }

    /// Go's `mergeMap`: directive first, then `$retainKeys`, then `$setElementOrder`
    /// lists, then every other key.
    fn merge_map(&mut self, mut original: Object, patch: &Object) -> Result<Object> {
        match patch.get(PATCH_DIRECTIVE) {
            None => {}
            // `$patch: replace` takes the patch map as the new value, unmerged.
            Some(Value::String(s)) if s == "replace" => return self.strip_object(patch),
            // Go returns an empty map here rather than dropping the key.
            Some(Value::String(s)) if s == "delete" => return Ok(Object::new()),
            // Accepted as the default strategy (Go would reject it; see module docs).
            Some(Value::String(s)) if s == "merge" => {}
            Some(other) => return Err(StrategicPatchError::UnknownPatchDirective { path: self.at(), value: other.to_string() }),
        }

        if let Some(keys) = patch.get(RETAIN_KEYS_DIRECTIVE) {
            self.apply_retain_keys(&mut original, patch, keys)?;
        }

        // Lists named by `$setElementOrder` are merged and ordered together, then
        // skipped by the main loop (Go's `mergePatchIntoOriginal`).
        let mut ordered: HashSet<&str> = HashSet::new();
        for (key, value) in patch {
            if let Some(field) = self.directive_field(key, SET_ELEMENT_ORDER_PREFIX)? {
                self.apply_element_order(&mut original, patch, field, value)?;
                ordered.insert(field);
            }
        }

        let mut deletions = Vec::new();
        for (key, value) in patch {
            if key == PATCH_DIRECTIVE
                || key == RETAIN_KEYS_DIRECTIVE
                || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
                || ordered.contains(key.as_str())
            {
                continue;
            }
            if let Some(field) = self.directive_field(key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)? {
                deletions.push((key, field, value));
                continue;
            }
            self.merge_field(&mut original, key, value)?;
        }
        for (key, field, value) in deletions {
            self.delete_from_primitive_list(&mut original, key, field, value)?;
        }
        Ok(original)
    }

    /// Splits `<prefix>/<field>`; `None` when `key` does not start with `prefix`.
    /// Go's `extractKey` rejects a prefixed key without the `/<field>` part.
    fn directive_field<'k>(&self, key: &'k str, prefix: &str) -> Result<Option<&'k str>> {
        if !key.starts_with(prefix) {
            return Ok(None);
        }
        match key.split_once('/') {
            Some((head, field)) if head == prefix => Ok(Some(field)),
            _ => Err(StrategicPatchError::MalformedDirectiveKey { path: self.at(), key: key.to_owned() }),
        }
    }

    /// Go's `applyRetainKeysDirective`: every field the patch sets must be listed, and
    /// the original loses every field that is not.
    fn apply_retain_keys(&self, original: &mut Object, patch: &Object, keys: &Value) -> Result<()> {
        let wrong_type = || StrategicPatchError::DirectiveType {
            path: self.at(),
            directive: RETAIN_KEYS_DIRECTIVE.to_owned(),
            expected: "a list of field names",
        };
        let Value::Array(list) = keys else {
            return Err(wrong_type());
        };
        let mut retained = HashSet::new();
        for key in list {
            let Value::String(key) = key else {
                return Err(wrong_type());
            };
            retained.insert(key.as_str());
        }
        for (key, value) in patch {
            if value.is_null() || is_directive_key(key) {
                continue;
            }
            if !retained.contains(key.as_str()) {
                return Err(StrategicPatchError::NotRetained { path: self.at(), field: key.clone() });
            }
        }
        original.retain(|key, _| retained.contains(key.as_str()));
        Ok(())
    }

    /// Merges one ordinary key of the patch into `original`.
    fn merge_field(&mut self, original: &mut Object, key: &str, patch_value: &Value) -> Result<()> {
        if patch_value.is_null() {
            // `null` deletes; a null for a key the original lacks is ignored
            // (`IgnoreUnmatchedNulls` on the server).
            original.shift_remove(key);
            return Ok(());
        }
        let merged = match (original.get_mut(key), patch_value) {
            (Some(Value::Object(live)), Value::Object(patch_map)) => {
                let live = std::mem::take(live);
                Some(Value::Object(self.nested(key, |m| m.merge_map(live, patch_map))?))
            }
            (Some(Value::Array(live)), Value::Array(patch_list)) => {
                let live = std::mem::take(live);
                Some(Value::Array(self.nested(key, |m| {
                    let strategy = m.strategy();
                    m.merge_list(live, patch_list, &strategy)
                })?))
            }
            // New field, changed JSON type, or a scalar: the patch value wins, cleaned
            // as Go's `removeDirectives` cleans it.
            (_, value) => self.nested(key, |m| m.strip(value))?,
        };
        match merged {
            Some(value) => {
                original.insert(key.to_owned(), value);
            }
            None => {
                original.shift_remove(key);
            }
        }
        Ok(())
    }

    /// Go's `mergeSliceHandler`: merge lists by strategy, replace atomic ones.
    fn merge_list(&mut self, original: Vec<Value>, patch: &[Value], strategy: &ListStrategy) -> Result<Vec<Value>> {
        match strategy {
            ListStrategy::Atomic => self.strip_list(patch),
            ListStrategy::Set => self.merge_slice(original, patch, None),
            ListStrategy::Map(keys) => self.merge_slice(original, patch, keys.first().map(String::as_str)),
        }
    }

    /// Go's `sliceElementType`: all elements of all lists share one JSON type, which is
    /// not a list. `None` when the lists are all empty.
    fn element_kind(&self, lists: &[&[Value]]) -> Result<Option<Kind>> {
        let mut kind = None;
        for value in lists.iter().flat_map(|list| list.iter()) {
            let this = match value {
                Value::Object(_) => Kind::Object,
                Value::String(_) => Kind::String,
                Value::Number(_) => Kind::Number,
                Value::Bool(_) => Kind::Bool,
                Value::Array(_) => return Err(self.invalid("lists of lists are not supported")),
                Value::Null => return Err(self.invalid("list elements must not be null")),
            };
            match kind {
                None => kind = Some(this),
                Some(previous) if previous != this => return Err(self.invalid("list elements are not all of the same type")),
                Some(_) => {}
            }
        }
        Ok(kind)
    }

    fn invalid(&self, problem: &'static str) -> StrategicPatchError {
        StrategicPatchError::InvalidList { path: self.at(), problem }
    }

    /// Go's `mergeSlice` for lists with a merge strategy.
    fn merge_slice(&mut self, original: Vec<Value>, patch: &[Value], merge_key: Option<&str>) -> Result<Vec<Value>> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        match (self.element_kind(&[original.as_slice(), patch])?, merge_key) {
            (None, _) => Ok(original),
            (Some(Kind::Object), Some(key)) => self.merge_object_list(original, patch, key),
            (Some(Kind::Object), None) => Err(self.invalid("cannot merge a list of objects without a merge key")),
            // A keyed list of primitives fails Go's partitioning step.
            (Some(_), Some(_)) => {
                let (what, index) = match patch.iter().position(|v| !v.is_object()) {
                    Some(index) => ("element", index),
                    None => ("existing element", 0),
                };
                Err(StrategicPatchError::ElementNotObject { path: self.at(), what, index })
            }
            (Some(_), None) => Ok(merge_primitive_list(original, patch)),
        }
    }

    /// Merges a list of objects by `key`: `$patch` elements first
    /// (`mergeSliceWithSpecialElements`), then merge-or-append
    /// (`mergeSliceWithoutSpecialElements`), then ordering.
    fn merge_object_list(&mut self, original: Vec<Value>, patch: &[Value], key: &str) -> Result<Vec<Value>> {
        let mut live = original;
        let mut plain: Vec<(usize, &Object)> = Vec::new();
        let mut replace = false;
        // The merge-key values of `$patch: delete` elements, removed in one pass below.
        let mut deleted: HashSet<String> = HashSet::new();
        for (index, element) in patch.iter().enumerate() {
            let Value::Object(element) = element else {
                return Err(StrategicPatchError::ElementNotObject { path: self.at(), what: "element", index });
            };
            match element.get(PATCH_DIRECTIVE) {
                None => plain.push((index, element)),
                Some(Value::String(s)) if s == "delete" => {
                    let Some(id) = element.get(key) else {
                        return Err(self.missing_key("element", index, key));
                    };
                    deleted.insert(identity_text(id));
                }
                // The list becomes the remaining patch elements; keep scanning so
                // other `$patch` elements are still validated, as Go does.
                Some(Value::String(s)) if s == "replace" => replace = true,
                Some(Value::String(s)) if s == "merge" => return Err(self.invalid("$patch: merge is not supported for list elements")),
                Some(other) => return Err(StrategicPatchError::UnknownPatchDirective { path: self.at(), value: other.to_string() }),
            }
        }

        if !deleted.is_empty() {
            // Every live element with such a key goes, duplicates included.
            live.retain(|e| e.get(key).is_none_or(|id| !deleted.contains(&identity_text(id))));
        }

        if replace {
            for (index, element) in &plain {
                if !element.contains_key(key) {
                    return Err(self.missing_key("element", *index, key));
                }
            }
            let mut replacement = Vec::with_capacity(plain.len());
            for (_, element) in &plain {
                replacement.push(Value::Object(self.strip_object(element)?));
            }
            live = replacement;
            plain.clear();
        } else {
            // Go's ordering step validates that live elements carry the merge key.
            for (index, element) in live.iter().enumerate() {
                if element.get(key).is_none() {
                    return Err(self.missing_key("existing element", index, key));
                }
            }
        }
        let live_order = identities(&live, Some(key));

        let mut merged = live;
        // Where each merge-key value sits in `merged`, kept up to date as elements are
        // merged (which can change a key that is an object) and appended.
        let mut positions: HashMap<String, BTreeSet<usize>> = HashMap::new();
        for (position, element) in merged.iter().enumerate() {
            if let Some(id) = element.get(key) {
                positions.entry(identity_text(id)).or_default().insert(position);
            }
        }
        let mut patch_order = Vec::with_capacity(plain.len());
        for (index, element) in plain {
            let Some(id) = element.get(key) else {
                return Err(self.missing_key("element", index, key));
            };
            patch_order.push(id.clone());
            let id = identity_text(id);
            // Merge into the first element with that key (including one appended by
            // an earlier patch element), else append.
            let (position, was) = match positions.get(&id).and_then(|p| p.first().copied()) {
                Some(position) => {
                    if let Some(slot) = merged.get_mut(position) {
                        let current = match slot.take() {
                            Value::Object(map) => map,
                            _ => Object::new(),
                        };
                        *slot = Value::Object(self.merge_map(current, element)?);
                    }
                    (position, Some(id))
                }
                None => {
                    merged.push(Value::Object(self.strip_object(element)?));
                    (merged.len() - 1, None)
                }
            };
            let now = merged.get(position).and_then(|e| e.get(key)).map(identity_text);
            if was != now {
                if let Some(set) = was.as_ref().and_then(|was| positions.get_mut(was)) {
                    set.remove(&position);
                }
                if let Some(now) = now {
                    positions.entry(now).or_default().insert(position);
                }
            }
        }

        let (patch_items, server_only) = self.partition(merged, &patch_order, Some(key))?;
        Ok(normalize_element_order(patch_items, server_only, &patch_order, &live_order, Some(key)))
    }

    fn missing_key(&self, what: &'static str, index: usize, key: &str) -> StrategicPatchError {
        StrategicPatchError::MissingMergeKey { path: self.at(), what, index, key: key.to_owned() }
    }

    /// Go's `partition*ByPresentInList`: elements named in `ids` (by merge key, or by
    /// value for primitives) versus the rest, each in list order.
    fn partition(&self, merged: Vec<Value>, ids: &[Value], key: Option<&str>) -> Result<(Vec<Value>, Vec<Value>)> {
        let ids: HashSet<String> = ids.iter().map(identity_text).collect();
        let mut named = Vec::new();
        let mut rest = Vec::new();
        for (index, element) in merged.into_iter().enumerate() {
            let present = match key {
                None => ids.contains(&identity_text(&element)),
                Some(key) => {
                    let Value::Object(map) = &element else {
                        return Err(StrategicPatchError::ElementNotObject { path: self.at(), what: "merged element", index });
                    };
                    let Some(id) = map.get(key) else {
                        return Err(self.missing_key("merged element", index, key));
                    };
                    ids.contains(&identity_text(id))
                }
            };
            if present {
                named.push(element);
            } else {
                rest.push(element);
            }
        }
        Ok((named, rest))
    }

    /// Go's `mergePatchIntoOriginal` for one `$setElementOrder/<field>`: merge the list
    /// (if the patch has it), then order it. Precedence: `$setElementOrder`, then
    /// the live order for elements it does not name.
    fn apply_element_order(&mut self, original: &mut Object, patch: &Object, field: &str, order: &Value) -> Result<()> {
        let Value::Array(order) = order else {
            return Err(StrategicPatchError::DirectiveType {
                path: self.at(),
                directive: format!("{SET_ELEMENT_ORDER_PREFIX}/{field}"),
                expected: "a list",
            });
        };
        self.nested(field, |m| {
            let strategy = m.strategy();
            let merge_key = match &strategy {
                ListStrategy::Map(keys) => keys.first().map(String::as_str),
                _ => None,
            };
            let live: Option<Vec<Value>> = match original.get(field) {
                None => None,
                Some(Value::Array(list)) => Some(list.clone()),
                Some(other) => {
                    return Err(StrategicPatchError::NotAList { path: m.at(), side: "original object", found: type_name(other) })
                }
            };
            let patch_list: Option<&[Value]> = match patch.get(field) {
                None => None,
                Some(Value::Array(list)) => Some(list),
                Some(other) => return Err(StrategicPatchError::NotAList { path: m.at(), side: "patch", found: type_name(other) }),
            };
            m.validate_order(patch_list.unwrap_or(&[]), order, merge_key)?;
            let kind = m.element_kind(&[live.as_deref().unwrap_or(&[]), patch_list.unwrap_or(&[])])?;

            let merged = match (&live, patch_list) {
                (None, None) => return Ok(()),
                (Some(live), None) => live.clone(),
                (None, Some(patch_list)) => m.strip_list(patch_list)?,
                (Some(live), Some(patch_list)) => m.merge_list(live.clone(), patch_list, &strategy)?,
            };
            let Some(kind) = kind else {
                // Nothing on either side; Go errors here, an empty list is harmless.
                original.insert(field.to_owned(), Value::Array(merged));
                return Ok(());
            };
            let id_key = match (merge_key, kind) {
                (Some(key), _) => Some(key),
                (None, Kind::Object) => return Err(m.invalid("cannot order a list of objects without a merge key")),
                (None, _) => None,
            };

            let order_ids = match id_key {
                None => order.clone(),
                Some(key) => {
                    let mut ids = Vec::with_capacity(order.len());
                    for (index, element) in order.iter().enumerate() {
                        let Value::Object(map) = element else {
                            return Err(StrategicPatchError::ElementNotObject { path: m.at(), what: "$setElementOrder element", index });
                        };
                        let Some(id) = map.get(key) else {
                            return Err(m.missing_key("$setElementOrder element", index, key));
                        };
                        ids.push(id.clone());
                    }
                    ids
                }
            };
            let live = live.unwrap_or_default();
            if let Some(key) = id_key {
                for (index, element) in live.iter().enumerate() {
                    if element.get(key).is_none() {
                        return Err(m.missing_key("existing element", index, key));
                    }
                }
            }
            let live_order = identities(&live, id_key);

            let (named, rest) = m.partition(merged, &order_ids, id_key)?;
            let ordered = normalize_element_order(named, rest, &order_ids, &live_order, id_key);
            original.insert(field.to_owned(), Value::Array(ordered));
            Ok(())
        })
    }

    /// Go's `validatePatchWithSetOrderList`: the patch list's elements (deletions and
    /// other `$patch` elements aside) must appear in `$setElementOrder`, in the same
    /// relative order.
    fn validate_order(&self, patch_list: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
        if order.is_empty() || patch_list.is_empty() {
            return Ok(());
        }
        let mut candidates: Vec<(usize, &Value)> = Vec::with_capacity(patch_list.len());
        for (index, element) in patch_list.iter().enumerate() {
            if key.is_some() {
                if !element.is_object() {
                    return Err(StrategicPatchError::ElementNotObject { path: self.at(), what: "element", index });
                }
                if element.get(PATCH_DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                    continue;
                }
            }
            candidates.push((index, element));
        }

        let (mut next_patch, mut next_order) = (0, 0);
        while let (Some(&(index, element)), Some(wanted)) = (candidates.get(next_patch), order.get(next_order)) {
            if element.get(PATCH_DIRECTIVE).is_some() {
                // A `$patch` element has no identity of its own: Go skips it without
                // consuming an order entry.
                next_patch += 1;
                continue;
            }
            let same = match key {
                None => element == wanted,
                Some(key) => {
                    let Some(id) = element.get(key) else {
                        return Err(self.missing_key("element", index, key));
                    };
                    let Value::Object(wanted) = wanted else {
                        return Err(StrategicPatchError::ElementNotObject {
                            path: self.at(),
                            what: "$setElementOrder element",
                            index: next_order,
                        });
                    };
                    let Some(wanted_id) = wanted.get(key) else {
                        return Err(self.missing_key("$setElementOrder element", next_order, key));
                    };
                    id == wanted_id
                }
            };
            if same {
                next_patch += 1;
            }
            next_order += 1;
        }
        // Elements left over once the order list is exhausted were not named by it (or
        // not in its order). Trailing `$patch` elements are tolerated; Go rejects them.
        let leftover = candidates.get(next_patch..).unwrap_or(&[]);
        if leftover.iter().any(|(_, element)| element.get(PATCH_DIRECTIVE).is_none()) {
            return Err(StrategicPatchError::OrderMismatch { path: self.at() });
        }
        Ok(())
    }

    /// Applies `$deleteFromPrimitiveList/<field>`: removes every listed value from the
    /// list `<field>`, whatever its strategy (as current apimachinery does).
    fn delete_from_primitive_list(&mut self, original: &mut Object, directive: &str, field: &str, value: &Value) -> Result<()> {
        if value.is_null() {
            // Go rewrites the key to `<field>` before its null check, so a null
            // deletion list deletes the field itself.
            original.shift_remove(field);
            return Ok(());
        }
        let Value::Array(remove) = value else {
            return Err(StrategicPatchError::DirectiveType { path: self.at(), directive: directive.to_owned(), expected: "a list" });
        };
        // Nothing to delete from, or not a list: Go leaves the field alone.
        let Some(Value::Array(list)) = original.get_mut(field) else {
            return Ok(());
        };
        self.nested(field, |m| {
            if m.element_kind(&[list.as_slice(), remove.as_slice()])? == Some(Kind::Object) {
                return Err(m.invalid("$deleteFromPrimitiveList applies only to lists of primitives"));
            }
            let remove: HashSet<String> = remove.iter().map(identity_text).collect();
            list.retain(|v| !remove.contains(&identity_text(v)));
            Ok(())
        })
    }

    /// Cleans a value taken from the patch without merging. Follows Go's
    /// `removeDirectives` (a map carrying `$patch` disappears, from its parent map or
    /// list) and `discardNullValuesFromPatch` (null map values disappear), and also drops
    /// the other directive keys, after checking that they are well formed. `None` means
    /// "omit this value".
    fn strip(&mut self, value: &Value) -> Result<Option<Value>> {
        match value {
            Value::Object(map) if map.contains_key(PATCH_DIRECTIVE) => {
                self.check_directives(map)?;
                Ok(None)
            }
            Value::Object(map) => Ok(Some(Value::Object(self.strip_object(map)?))),
            Value::Array(list) => Ok(Some(Value::Array(self.strip_list(list)?))),
            other => Ok(Some(other.clone())),
        }
    }

    /// A map's own fields, cleaned; its own directive keys (including `$patch`) are
    /// checked and dropped.
    fn strip_object(&mut self, map: &Object) -> Result<Object> {
        self.check_directives(map)?;
        let mut out = Object::new();
        for (key, value) in map {
            if value.is_null() || is_directive_key(key) {
                continue;
            }
            if let Some(value) = self.nested(key, |m| m.strip(value))? {
                out.insert(key.clone(), value);
            }
        }
        Ok(out)
    }

    fn strip_list(&mut self, list: &[Value]) -> Result<Vec<Value>> {
        let mut out = Vec::with_capacity(list.len());
        for value in list {
            if let Some(value) = self.strip(value)? {
                out.push(value);
            }
        }
        Ok(out)
    }

    /// Rejects malformed directives in a map that is about to be cleaned rather than
    /// merged, so a bad patch fails the same way wherever its directives sit.
    fn check_directives(&self, map: &Object) -> Result<()> {
        for (key, value) in map {
            if key == PATCH_DIRECTIVE {
                if !matches!(value.as_str(), Some("replace" | "delete" | "merge")) {
                    return Err(StrategicPatchError::UnknownPatchDirective { path: self.at(), value: value.to_string() });
                }
            } else if key == RETAIN_KEYS_DIRECTIVE {
                let names = value.as_array().is_some_and(|list| list.iter().all(Value::is_string));
                if !names {
                    return Err(StrategicPatchError::DirectiveType {
                        path: self.at(),
                        directive: key.clone(),
                        expected: "a list of field names",
                    });
                }
            } else if self.directive_field(key, SET_ELEMENT_ORDER_PREFIX)?.is_some() {
                if !value.is_array() {
                    return Err(StrategicPatchError::DirectiveType { path: self.at(), directive: key.clone(), expected: "a list" });
                }
            } else if self.directive_field(key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?.is_some() && !(value.is_array() || value.is_null()) {
                return Err(StrategicPatchError::DirectiveType { path: self.at(), directive: key.clone(), expected: "a list" });
            }
        }
        Ok(())
    }
}

/// Union of two primitive lists without duplicates, then Go's ordering.
fn merge_primitive_list(original: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    let live_order = original.clone();
    let mut seen = HashSet::new();
    let mut merged = Vec::with_capacity(original.len() + patch.len());
    for value in original.into_iter().chain(patch.iter().cloned()) {
        // The JSON text identifies a primitive exactly (`1` and `1.0` stay distinct,
        // as Go's int64/float64 do).
        if seen.insert(value.to_string()) {
            merged.push(value);
        }
    }
    let in_patch: HashSet<String> = patch.iter().map(identity_text).collect();
    let (named, rest): (Vec<Value>, Vec<Value>) = merged.into_iter().partition(|v| in_patch.contains(&identity_text(v)));
    normalize_element_order(named, rest, patch, &live_order, None)
}

/// The identity of a list element: its merge-key value, or the value itself.
fn identity<'v>(element: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    match key {
        Some(key) => element.get(key),
        None => Some(element),
    }
}

fn identities(list: &[Value], key: Option<&str>) -> Vec<Value> {
    list.iter().filter_map(|e| identity(e, key).cloned()).collect()
}

/// Where each identity first sits in a list of identities.
struct Order(HashMap<String, usize>);

impl Order {
    fn new(order: &[Value]) -> Self {
        let mut first = HashMap::with_capacity(order.len());
        for (i, id) in order.iter().enumerate() {
            first.entry(identity_text(id)).or_insert(i);
        }
        Order(first)
    }

    /// Where `element` sits in the order.
    fn position(&self, element: &Value, key: Option<&str>) -> Option<usize> {
        self.0.get(&identity_text(identity(element, key)?)).copied()
    }
}

/// Go's `normalizeSliceOrder`: stable sort by position in `order`. Go's comparator
/// calls unknown elements "less" than everything; inputs never contain such elements
/// once validated, so they simply go last here.
fn sort_by_order(items: Vec<Value>, order: &Order, key: Option<&str>) -> Vec<Value> {
    let mut keyed: Vec<(usize, Value)> = items.into_iter().map(|item| (order.position(&item, key).unwrap_or(usize::MAX), item)).collect();
    keyed.sort_by_key(|(rank, _)| *rank);
    keyed.into_iter().map(|(_, item)| item).collect()
}

/// Go's `normalizeElementOrder` + `mergeSortedSlice`: patch items keep the patch's
/// order, server-only items keep the live order, and the two are interleaved. A
/// server-only item goes first only when both it and the next patch item appear in
/// the live list and it comes earlier there; otherwise the patch item goes first.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    live_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let live_order = Order::new(live_order);
    let in_live = |items: Vec<Value>| -> Vec<(Option<usize>, Value)> {
        items.into_iter().map(|item| (live_order.position(&item, key), item)).collect()
    };
    let right = in_live(sort_by_order(patch_items, &Order::new(patch_order), key));
    let left = in_live(sort_by_order(server_only, &live_order, key));
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((l, _)), Some((r, _))) => matches!((l, r), (Some(li), Some(ri)) if li < ri),
        };
        let next = if take_left { left.next() } else { right.next() };
        if let Some((_, item)) = next {
            out.push(item);
        }
    }
    out
}

/// Whether `key` is a patch directive rather than a field.
fn is_directive_key(key: &str) -> bool {
    key == PATCH_DIRECTIVE
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::meta::BuiltinPatchMeta;
    use serde_json::json;

    /// Applies with the built-in (Deployment/Pod) merge table.
    fn smp(original: Value, patch: Value) -> Value {
        match apply(&original, &patch, &BuiltinPatchMeta) {
            Ok(v) => v,
            Err(e) => panic!("patch failed: {e}"),
        }
    }

    fn smp_err(original: Value, patch: Value) -> String {
        match apply(&original, &patch, &BuiltinPatchMeta) {
            Ok(v) => panic!("expected an error, got {v}"),
            Err(e) => e.to_string(),
        }
    }

    /// The merge table of apimachinery's own test type `MergeItem`, for cases lifted
    /// from `patch_test.go`.
    struct MergeItemMeta;
    impl PatchMeta for MergeItemMeta {
        fn list_strategy(&self, path: &[&str]) -> ListStrategy {
            match path.last().copied() {
                Some("mergingList" | "retainKeysMergingList") => ListStrategy::Map(vec!["name".into()]),
                Some("mergingIntList") => ListStrategy::Set,
                _ => ListStrategy::Atomic,
            }
        }
    }

    fn go_case(original: Value, patch: Value) -> Value {
        match apply(&original, &patch, &MergeItemMeta) {
            Ok(v) => v,
            Err(e) => panic!("patch failed: {e}"),
        }
    }

    fn deployment(containers: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": containers}
                }
            }
        })
    }

    fn containers(obj: &Value) -> &Value {
        &obj["spec"]["template"]["spec"]["containers"]
    }

    /// Fails if any directive key survives anywhere in `v`.
    fn assert_no_directives(v: &Value) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    assert!(!is_directive_key(k), "directive {k} left in {v}");
                    assert_no_directives(child);
                }
            }
            Value::Array(list) => list.iter().for_each(assert_no_directives),
            _ => {}
        }
    }

    #[test]
    fn kubectl_apply_drops_a_container_and_adds_an_env_var() {
        let live = deployment(json!([
            {
                "name": "app",
                "image": "app:1",
                "env": [{"name": "MODE", "value": "prod"}],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "terminationMessagePath": "/dev/termination-log"
            },
            {"name": "sidecar", "image": "proxy:1"}
        ]));
        // What `kubectl apply` computes when the new manifest removes `sidecar` and
        // adds LOG_LEVEL to `app`.
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "app"}],
                "containers": [
                    {
                        "$setElementOrder/env": [{"name": "MODE"}, {"name": "LOG_LEVEL"}],
                        "env": [{"name": "LOG_LEVEL", "value": "debug"}],
                        "name": "app"
                    },
                    {"$patch": "delete", "name": "sidecar"}
                ]
            }}}
        });
        let merged = smp(live, patch);
        assert_eq!(
            containers(&merged),
            &json!([{
                "name": "app",
                "image": "app:1",
                "env": [
                    {"name": "MODE", "value": "prod"},
                    {"name": "LOG_LEVEL", "value": "debug"}
                ],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "terminationMessagePath": "/dev/termination-log"
            }])
        );
        assert_eq!(merged["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], json!("{}"));
        assert_eq!(merged["spec"]["replicas"], json!(2));
        assert_no_directives(&merged);
    }

    #[test]
    fn set_element_order_reorders_containers() {
        let live = deployment(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]
        }}}});
        let merged = smp(live, patch);
        assert_eq!(containers(&merged), &json!([{"name": "c"}, {"name": "a"}, {"name": "b"}]));
    }

    #[test]
    fn null_deletes_a_field_and_unmatched_null_is_ignored() {
        let live = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        let patch = json!({"metadata": {"labels": {"tier": null, "absent": null}}});
        assert_eq!(smp(live, patch), json!({"metadata": {"labels": {"app": "web"}}}));
    }

    #[test]
    fn nested_null_in_a_new_field_is_discarded() {
        let live = json!({"metadata": {"name": "x"}});
        let patch = json!({"metadata": {"labels": {"a": "1", "b": null}}});
        assert_eq!(smp(live, patch), json!({"metadata": {"name": "x", "labels": {"a": "1"}}}));
    }

    #[test]
    fn replace_directive_on_a_map() {
        let live = deployment(json!([]));
        let patch = json!({"spec": {"selector": {"$patch": "replace", "matchLabels": {"new": "yes"}}}});
        let merged = smp(live, patch);
        assert_eq!(merged["spec"]["selector"], json!({"matchLabels": {"new": "yes"}}));
    }

    #[test]
    fn replace_directive_at_the_root() {
        let live = json!({"a": 1, "b": {"c": 2}});
        let patch = json!({"$patch": "replace", "d": 3});
        assert_eq!(smp(live, patch), json!({"d": 3}));
    }

    #[test]
    fn delete_directive_on_a_nested_map_leaves_an_empty_map() {
        // apimachinery test "delete map from nested map".
        let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "name": "x"}});
        let patch = json!({"metadata": {"labels": {"$patch": "delete"}}});
        assert_eq!(smp(live, patch), json!({"metadata": {"labels": {}, "name": "x"}}));
    }

    #[test]
    fn replace_directive_in_a_list() {
        let live = deployment(json!([{"name": "a", "image": "a:1"}, {"name": "b"}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"$patch": "replace"},
            {"name": "c", "image": "c:1"}
        ]}}}});
        let merged = smp(live, patch);
        assert_eq!(containers(&merged), &json!([{"name": "c", "image": "c:1"}]));
    }

    #[test]
    fn replace_directive_alone_empties_a_list() {
        // apimachinery test "delete all items from merging list".
        let merged = go_case(json!({"mergingList": [{"name": "1"}, {"name": "2"}]}), json!({"mergingList": [{"$patch": "replace"}]}));
        assert_eq!(merged, json!({"mergingList": []}));
    }

    #[test]
    fn delete_directive_removes_every_duplicate() {
        // apimachinery test "delete all duplicate entries in a merging list".
        let merged = go_case(
            json!({"mergingList": [
                {"name": "1"}, {"name": "1"}, {"name": "2", "value": "a"}, {"name": "3"}, {"name": "3"}
            ]}),
            json!({"mergingList": [
                {"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}
            ]}),
        );
        assert_eq!(merged, json!({"mergingList": [{"name": "2", "value": "a"}]}));
    }

    #[test]
    fn retain_keys_switching_rolling_update_to_recreate() {
        let mut live = deployment(json!([]));
        live["spec"]["strategy"] = json!({
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}
        });
        // kubectl's patch when the manifest switches to Recreate.
        let patch = json!({"spec": {"strategy": {
            "$retainKeys": ["type"],
            "rollingUpdate": null,
            "type": "Recreate"
        }}});
        let merged = smp(live, patch);
        assert_eq!(merged["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn retain_keys_drops_unlisted_fields_even_without_a_null() {
        let live = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        assert_eq!(smp(live, patch), json!({"spec": {"strategy": {"type": "Recreate"}}}));
    }

    #[test]
    fn retain_keys_inside_a_volume_element() {
        let live = json!({"spec": {"volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "cfg", "configMap": {"name": "c"}}
        ]}});
        let patch = json!({"spec": {"volumes": [
            {"$retainKeys": ["name", "hostPath"], "name": "data", "hostPath": {"path": "/d"}}
        ]}});
        let merged = smp(live, patch);
        assert_eq!(
            merged["spec"]["volumes"],
            json!([{"name": "data", "hostPath": {"path": "/d"}}, {"name": "cfg", "configMap": {"name": "c"}}])
        );
    }

    #[test]
    fn retain_keys_rejects_a_patched_field_it_does_not_list() {
        let live = json!({"spec": {"strategy": {"type": "RollingUpdate"}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 1}}}});
        let err = smp_err(live, patch);
        assert!(err.contains("spec.strategy") && err.contains("rollingUpdate"), "{err}");
    }

    #[test]
    fn delete_from_primitive_list_finalizers() {
        let live = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
        let patch = json!({"metadata": {
            "$setElementOrder/finalizers": ["a", "c"],
            "$deleteFromPrimitiveList/finalizers": ["b"]
        }});
        assert_eq!(smp(live, patch), json!({"metadata": {"finalizers": ["a", "c"]}}));
    }

    #[test]
    fn delete_from_primitive_list_on_atomic_list_and_missing_list() {
        // apimachinery: deletion lists work whatever the list's strategy, and never
        // create a list.
        let merged = go_case(
            json!({"nonMergingIntList": [1, 2, 3], "foo": ["bar"]}),
            json!({"$deleteFromPrimitiveList/nonMergingIntList": [2], "$deleteFromPrimitiveList/mergingIntList": [3]}),
        );
        assert_eq!(merged, json!({"nonMergingIntList": [1, 3], "foo": ["bar"]}));
    }

    #[test]
    fn set_union_keeps_live_items_and_dedupes() {
        // apimachinery test "unique scalars when merging lists".
        let merged = go_case(json!({"mergingIntList": [1, 2]}), json!({"mergingIntList": [2, 3]}));
        assert_eq!(merged, json!({"mergingIntList": [1, 2, 3]}));
    }

    #[test]
    fn set_union_without_order_puts_unknown_items_first_like_go() {
        let live = json!({"metadata": {"finalizers": ["a", "b"]}});
        let merged = smp(live.clone(), json!({"metadata": {"finalizers": ["c"]}}));
        assert_eq!(merged["metadata"]["finalizers"], json!(["c", "a", "b"]));
        // With the order kubectl sends, the new value lands where the manifest has it.
        let merged = smp(live, json!({"metadata": {"$setElementOrder/finalizers": ["a", "b", "c"], "finalizers": ["c"]}}));
        assert_eq!(merged["metadata"]["finalizers"], json!(["a", "b", "c"]));
    }

    #[test]
    fn patch_order_wins_over_live_order() {
        // apimachinery test "preserve the order from the patch in a merging list 2".
        let merged = go_case(
            json!({"mergingList": [{"name": "1"}, {"name": "2", "value": "b"}, {"name": "3"}]}),
            json!({"mergingList": [{"name": "3", "value": "c"}, {"name": "1", "value": "a"}]}),
        );
        assert_eq!(
            merged,
            json!({"mergingList": [
                {"name": "2", "value": "b"}, {"name": "3", "value": "c"}, {"name": "1", "value": "a"}
            ]})
        );
    }

    #[test]
    fn set_element_order_with_server_only_items() {
        // apimachinery test "merge lists of maps" (three-way result).
        let merged = go_case(
            json!({"mergingList": [{"name": "1", "other": "a"}, {"name": "2", "value": "2", "other": "b"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": "4"}, {"name": "1"}, {"name": "2"}, {"name": "3"}],
                "mergingList": [{"name": "4", "value": "4"}, {"name": "3", "value": "3"}]
            }),
        );
        assert_eq!(
            merged,
            json!({"mergingList": [
                {"name": "4", "value": "4"},
                {"name": "1", "other": "a"},
                {"name": "2", "value": "2", "other": "b"},
                {"name": "3", "value": "3"}
            ]})
        );
    }

    #[test]
    fn new_list_with_delete_directive_and_order_against_other_live_items() {
        // apimachinery test "nested patch merge with empty list", two-way and three-way.
        let patch = json!({"mergingList": [{"name": "hello"}, {"$patch": "delete", "name": "doesntexist"}]});
        assert_eq!(go_case(json!({"name": "hi"}), patch), json!({"name": "hi", "mergingList": [{"name": "hello"}]}));
        let three_way = json!({
            "$setElementOrder/mergingList": [{"name": "hello"}, {"name": "doesntexist"}],
            "mergingList": [{"name": "hello"}, {"$patch": "delete", "name": "doesntexist"}]
        });
        assert_eq!(
            go_case(json!({"name": "hi", "mergingList": [{"name": "hello2"}]}), three_way),
            json!({"name": "hi", "mergingList": [{"name": "hello"}, {"name": "hello2"}]})
        );
    }

    #[test]
    fn set_element_order_mismatch_is_an_error() {
        // apimachinery test "should check if order in $setElementOrder and patch list match".
        let err = apply(
            &json!({"mergingList": [{"name": "1"}, {"name": "3"}, {"name": "2"}]}),
            &json!({
                "$setElementOrder/mergingList": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
                "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]
            }),
            &MergeItemMeta,
        );
        assert!(matches!(err, Err(StrategicPatchError::OrderMismatch { .. })), "{err:?}");
    }

    #[test]
    fn conditions_merge_by_type() {
        let live = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Starting"},
            {"type": "Available", "status": "True"}
        ]}});
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": null}]}});
        assert_eq!(
            smp(live, patch),
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Available", "status": "True"}
            ]}})
        );
    }

    #[test]
    fn ports_merge_by_container_port() {
        let live = deployment(json!([{"name": "app", "ports": [
            {"containerPort": 80, "protocol": "TCP"},
            {"containerPort": 443, "protocol": "TCP"}
        ]}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "ports": [
            {"containerPort": 443, "name": "https"}
        ]}]}}}});
        let merged = smp(live, patch);
        assert_eq!(
            containers(&merged)[0]["ports"],
            json!([
                {"containerPort": 80, "protocol": "TCP"},
                {"containerPort": 443, "protocol": "TCP", "name": "https"}
            ])
        );
    }

    #[test]
    fn atomic_args_are_replaced() {
        let live = deployment(json!([{"name": "app", "args": ["--a", "--b"]}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "args": ["--c"]}]}}}});
        assert_eq!(containers(&smp(live, patch))[0]["args"], json!(["--c"]));
    }

    #[test]
    fn appended_element_goes_first_without_order_like_go() {
        let live = deployment(json!([{"name": "a"}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:1"}]}}}});
        assert_eq!(containers(&smp(live, patch)), &json!([{"name": "b", "image": "b:1"}, {"name": "a"}]));
    }

    #[test]
    fn missing_merge_key_is_an_error() {
        let live = deployment(json!([{"name": "app"}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "x"},
            {"image": "nameless"}
        ]}}}});
        assert_eq!(smp_err(live, patch), "spec.template.spec.containers: element 1 has no merge key \"name\"");
    }

    #[test]
    fn delete_directive_without_merge_key_is_an_error() {
        let live = deployment(json!([{"name": "app"}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "delete"}]}}}});
        assert!(smp_err(live, patch).contains("element 0 has no merge key"));
    }

    #[test]
    fn malformed_patches_are_errors() {
        let live = deployment(json!([{"name": "app"}]));
        let cases = [
            json!(["not", "an", "object"]),
            json!(null),
            json!({"spec": {"$patch": "explode"}}),
            json!({"spec": {"$patch": 7}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "$patch": "bogus"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}}}),
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
            json!({"spec": {"$setElementOrder/x": "nope"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            json!({"metadata": {"$setElementOrder": []}}),
            json!({"spec": {"template": {"spec": {"containers": ["app"]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [[{"name": "app"}]]}}}}),
        ];
        for patch in cases {
            assert!(apply(&live, &patch, &BuiltinPatchMeta).is_err(), "accepted {patch}");
        }
        assert!(apply(&json!("str"), &json!({}), &BuiltinPatchMeta).is_err());
    }

    #[test]
    fn merge_directive_on_a_map_is_the_default() {
        let live = json!({"spec": {"a": 1}});
        let patch = json!({"spec": {"$patch": "merge", "b": 2}});
        assert_eq!(smp(live, patch), json!({"spec": {"a": 1, "b": 2}}));
    }

    #[test]
    fn type_change_takes_the_patch_value_cleaned() {
        let live = json!({"spec": {"x": "scalar"}});
        let patch = json!({"spec": {"x": {"keep": 1, "drop": null, "gone": {"$patch": "delete"}, "$retainKeys": ["keep"]}}});
        assert_eq!(smp(live, patch), json!({"spec": {"x": {"keep": 1}}}));
    }

    #[test]
    fn null_original_is_an_empty_object() {
        assert_eq!(smp(Value::Null, json!({"a": {"b": 1}})), json!({"a": {"b": 1}}));
    }

    /// Throws awkward shapes at every combination of live value and patch value, in
    /// map, keyed-list, set and atomic positions: the result must be `Ok` or `Err`,
    /// never a panic, and an `Ok` result must carry no directive.
    #[test]
    fn odd_inputs_never_panic_or_leak_directives() {
        let odd = [
            json!(null),
            json!(true),
            json!(1),
            json!("s"),
            json!([]),
            json!([null]),
            json!([1, "a"]),
            json!([[1]]),
            json!(["a", "b"]),
            json!({}),
            json!([{}]),
            json!([{"name": "a"}, {"name": "a", "x": 1}]),
            json!([{"$patch": "replace"}]),
            json!([{"$patch": "delete", "name": "a"}, {"name": "b", "$retainKeys": ["name"]}]),
            json!([{"name": "a", "$setElementOrder/env": [{"name": "e"}], "env": [{"name": "e"}]}]),
            json!({"$patch": "delete"}),
            json!({"$patch": "replace", "a": {"$patch": "delete"}, "b": [{"$patch": "merge"}]}),
            json!({"$patch": 5}),
            json!({"$retainKeys": ["a"], "a": 1}),
            json!({"$retainKeys": [1]}),
            json!({"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "a"}]}),
            json!({"$setElementOrder/finalizers": ["a"], "finalizers": null}),
            json!({"$setElementOrder/finalizers": [{"x": 1}]}),
            json!({"$deleteFromPrimitiveList/finalizers": [{"a": 1}]}),
            json!({"$deleteFromPrimitiveList/finalizers": null}),
            json!({"$deleteFromPrimitiveList": []}),
            json!({"$setElementOrder/": []}),
        ];
        let positions: [&[&str]; 5] = [
            &["metadata", "finalizers"],
            &["spec", "template", "spec", "containers"],
            &["status", "conditions"],
            &["spec", "strategy"],
            &["spec", "args"],
        ];
        let wrap = |path: &[&str], leaf: &Value| {
            path.iter().rev().fold(leaf.clone(), |inner, seg| {
                let mut map = Object::new();
                map.insert((*seg).to_owned(), inner);
                Value::Object(map)
            })
        };
        for path in positions {
            for live in &odd {
                for patch in &odd {
                    let original = wrap(path, live);
                    for patch in [wrap(path, patch), patch.clone()] {
                        if let Ok(merged) = apply(&original, &patch, &BuiltinPatchMeta) {
                            let mut clean_original = true;
                            check_clean(&original, &mut clean_original);
                            if clean_original {
                                assert_no_directives(&merged);
                            }
                        }
                    }
                }
            }
        }
    }

    fn check_clean(v: &Value, clean: &mut bool) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    *clean &= !is_directive_key(k);
                    check_clean(child, clean);
                }
            }
            Value::Array(list) => list.iter().for_each(|c| check_clean(c, clean)),
            _ => {}
        }
    }
}
