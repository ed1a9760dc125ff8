//! Server-side apply and `metadata.managedFields` tracking.
//!
//! kube-apiserver records, for every object, which client ("manager") set which
//! field, so that `kubectl apply --server-side` can merge a partial configuration
//! into the live object, refuse to silently overwrite another manager's values,
//! and delete exactly the fields an applier stopped mentioning. Kubernetes does this
//! with structured-merge-diff over typed values; this module does the same over
//! `serde_json::Value`, taking list semantics (atomic, associative by key, or set)
//! from [`PatchMeta`].
//!
//! Ownership is a set of field paths per manager, stored on the wire as `fieldsV1`:
//! nested objects keyed `f:<field>`, `k:<key json>` (associative-list element),
//! `v:<value json>` (set element), with `".": {}` marking that a node with children
//! is itself owned and `{}` marking an owned leaf. Internally a set is a
//! [`FieldSet`] tree with union, difference and intersection.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::patch::identity_text;
use crate::patch::meta::{ListStrategy, PatchMeta};

/// `operation` of an entry written by server-side apply.
pub const OPERATION_APPLY: &str = "Apply";
/// `operation` of an entry written by create, update or patch.
pub const OPERATION_UPDATE: &str = "Update";
/// The only `fieldsType` Kubernetes defines.
pub const FIELDS_TYPE_V1: &str = "FieldsV1";
/// Manager that Kubernetes credits with every existing field when an object that
/// has no managedFields at all is applied to, so those fields still conflict.
pub const BEFORE_FIRST_APPLY_MANAGER: &str = "before-first-apply";

/// Metadata fields the server owns; they never appear in a field set.
const UNTRACKED_METADATA: &[&str] =
    &["name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "managedFields", "selfLink"];

/// Identity fields an apply configuration carries; copied only when the apply creates the object.
const IDENTITY_METADATA: &[&str] = &["name", "namespace"];

/// One entry of `metadata.managedFields`.
///
/// Missing fields decode to their defaults so that a malformed entry never fails a
/// request; entries that are unusable are dropped when read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedFieldsEntry {
    /// Name of the client that made the change (the `fieldManager` parameter).
    pub manager: String,
    /// `"Apply"` or `"Update"`.
    pub operation: String,
    /// Version of the resource the field set refers to.
    pub api_version: String,
    /// RFC 3339 time of the manager's last change; omitted when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Always `"FieldsV1"`.
    pub fields_type: String,
    /// The owned field set in fieldsV1 form. Only written: a stored entry's fieldsV1
    /// is decoded straight into its field set (see `read_owners`).
    #[serde(rename = "fieldsV1", skip_deserializing)]
    pub fields_v1: Value,
    /// Subresource the change was made through (`"status"`), absent for the main resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
}

impl ManagedFieldsEntry {
    /// Managers are told apart by name, operation and subresource.
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == subresource
    }
}

/// A field conflict: another manager owns `field` with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: String,
    /// The field path as Kubernetes prints it, e.g. `.spec.replicas` or
    /// `.spec.template.spec.containers[name="nginx"].image`.
    pub field: String,
}

/// Server-side apply of `applied` (the user's partial object) by `manager`.
///
/// `live` is the current object (`None` when creating). Returns the new full
/// object with `metadata.managedFields` updated. Without `force`, a field in
/// `applied` that another manager owns with a different value is a conflict, and
/// all conflicts are returned together; with `force` those fields move to
/// `manager`. Fields this manager applied before but omits now are removed from
/// the object unless another manager also owns them.
///
/// For the main resource `status` is neither merged nor tracked; for the `status`
/// subresource only `status` is. `metadata.managedFields` and other server-owned
/// metadata in `applied` are ignored, and `apiVersion`, `kind`, `metadata.name`
/// and `metadata.namespace` are copied only when creating.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
    meta: &dyn PatchMeta,
    subresource: Option<&str>,
) -> Result<Value, Vec<Conflict>> {
    // An empty subresource name means the main resource, as when read from an entry.
    let subresource = subresource.filter(|s| !s.is_empty());
    let walker = Walker::new(meta, subresource);
    let empty = Value::Object(Map::new());
    let live_obj = match live {
        Some(v) if v.is_object() => v,
        _ => &empty,
    };
    let mut merged = live_obj.clone();
    // The merged object's list is replaced below: its entries move into the owners.
    let mut owners = read_owners(merged.pointer_mut("/metadata/managedFields").map(Value::take), true);
    if live.is_some() && owners.is_empty() {
        // Fields that existed before anyone tracked ownership must still be protected.
        let set = walker.object_set(live_obj);
        if !set.is_empty() {
            owners.push(Owner {
                entry: new_entry(BEFORE_FIRST_APPLY_MANAGER, OPERATION_UPDATE, api_version, now, subresource),
                set,
                stored: None,
                opaque: false,
            });
        }
    }

    let config = walker.config(applied, live.is_none());
    let applied_set = walker.object_set(&config);
    walker.merge(&mut merged, &config, &mut Vec::new());

    let changed = walker.changed_root(Some(live_obj), &merged);
    let removed = walker.removed_root(live_obj, &merged);

    let is_self = |e: &ManagedFieldsEntry| e.is(manager, OPERATION_APPLY, subresource);
    let conflicts: Vec<Conflict> = owners
        .iter()
        .filter(|o| !is_self(&o.entry))
        .flat_map(|o| {
            o.set.intersection(&changed).paths().into_iter().map(|p| Conflict { manager: o.entry.manager.clone(), field: path_string(&p) })
        })
        .collect();
    if !force && !conflicts.is_empty() {
        return Err(conflicts);
    }

    let mut previous = FieldSet::default();
    for owner in &mut owners {
        if is_self(&owner.entry) {
            previous.union_with(&owner.set);
        } else {
            // Forced fields move to the applier; removed fields no longer exist to be owned.
            if owner.set.subtract(&changed) | owner.set.subtract(&removed) {
                owner.stored = None;
            }
        }
    }
    owners.retain(|o| !is_self(&o.entry));
    owners.push(Owner {
        entry: new_entry(manager, OPERATION_APPLY, api_version, now, subresource),
        set: applied_set,
        stored: None,
        opaque: false,
    });

    let mut owned = FieldSet::default();
    for owner in &owners {
        owned.union_with(&owner.set);
    }
    let to_remove = previous.difference(&owned);
    walker.prune(&mut merged, &to_remove, Some(&owned), &mut Vec::new(), &[]);

    store_owners(&mut merged, owners);
    Ok(merged)
}

/// Records a non-apply write (create, update, patch) by `manager`.
///
/// Fields whose value changed between `old` and `new` (all fields of `new` on
/// create) become owned by `manager` under an `"Update"` entry and are removed from
/// other managers' sets; fields that disappeared are removed from every set.
/// Mutates `new`'s `metadata.managedFields`. If `new` carries a managedFields list
/// that differs from `old`'s and decodes to at least one entry, the client is
/// rewriting ownership and that list is the starting point; `[{}]` resets ownership,
/// as in Kubernetes; otherwise `old`'s list is used.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    now: &str,
    meta: &dyn PatchMeta,
    subresource: Option<&str>,
) {
    if !new.is_object() {
        return;
    }
    let subresource = subresource.filter(|s| !s.is_empty());
    let walker = Walker::new(meta, subresource);
    // `new`'s list is replaced below: its entries move into the owners.
    let new_fields = new.pointer_mut("/metadata/managedFields").map(Value::take);
    let old_fields = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let changed = walker.changed_root(old, new);
    let removed = match old {
        Some(o) => walker.removed_root(o, new),
        None => FieldSet::default(),
    };
    let is_self = |e: &ManagedFieldsEntry| e.is(manager, OPERATION_UPDATE, subresource);
    // Another manager's stored set that holds none of the changed or removed fields
    // stays as it is, so it is not decoded (a status update of a pod leaves the spec
    // owners' large sets alone).
    let needed = |e: &ManagedFieldsEntry, fields: &Value| is_self(e) || touches(fields, &changed) || touches(fields, &removed);
    // A client may rewrite managedFields; a list that decodes to nothing counts only
    // when it is the explicit reset `[{}]`, so clients unaware of the field cannot
    // wipe it by accident.
    let reset = matches!(&new_fields, Some(Value::Array(a)) if a.len() == 1 && a[0] == json!({}));
    let mut owners = if reset {
        Vec::new()
    } else if new_fields.as_ref() == old_fields {
        // Sent back unchanged (or absent from both): the stored entries, moved.
        read_owners_where(new_fields, true, &needed)
    } else {
        // A client's own list is decoded and encoded again, never kept as sent.
        let rewritten = read_owners(new_fields, false);
        if rewritten.is_empty() {
            read_owners_where(old_fields.cloned(), true, &needed)
        } else {
            rewritten
        }
    };

    let mut own: Option<Owner> = None;
    for owner in owners.iter_mut() {
        if owner.opaque {
            continue;
        }
        if owner.set.subtract(&removed) {
            owner.stored = None;
        }
        if is_self(&owner.entry) {
            let taken = std::mem::take(&mut owner.set);
            match own.as_mut() {
                Some(o) => {
                    o.set.union(taken);
                    o.stored = None;
                }
                None => own = Some(Owner { entry: owner.entry.clone(), set: taken, stored: owner.stored.take(), opaque: false }),
            }
        } else if owner.set.subtract(&changed) {
            owner.stored = None;
        }
    }
    owners.retain(|o| !is_self(&o.entry));
    if !changed.is_empty() {
        // Only a write that changed something refreshes the entry's time and version.
        let mut o =
            own.unwrap_or_else(|| Owner { entry: ManagedFieldsEntry::default(), set: FieldSet::default(), stored: None, opaque: false });
        o.entry = new_entry(manager, OPERATION_UPDATE, api_version, now, subresource);
        match o.stored.as_mut().and_then(Value::as_object_mut) {
            // A controller that keeps writing the same fields (a status) owns them
            // already: its stored entry only gets the new time and version, with no
            // encoding of its set again.
            Some(entry) if o.set.contains(&changed) => {
                entry.insert("apiVersion".into(), Value::String(api_version.to_string()));
                entry.insert("time".into(), Value::String(now.to_string()));
            }
            _ => {
                o.set.union_with(&changed);
                o.stored = None;
            }
        }
        own = Some(o);
    }
    owners.extend(own);
    store_owners(new, owners);
}

/// Formats conflicts as Kubernetes does in the 409 message.
///
/// One conflict: `Apply failed with 1 conflict: conflict with "mgr" using apps/v1: .spec.replicas`.
/// Several: `Apply failed with N conflicts: ` followed by, per manager in name
/// order, a `conflicts with "mgr" using apps/v1:` line and one `- <field>` line per field.
pub fn conflict_message(conflicts: &[Conflict], api_version: &str) -> String {
    let who = |m: &str| format!("{} using {}", quote(m), api_version);
    if let [c] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", who(&c.manager), c.field);
    }
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in conflicts {
        by_manager.entry(&c.manager).or_default().push(&c.field);
    }
    let mut lines = Vec::new();
    for (manager, fields) in by_manager {
        lines.push(format!("conflicts with {}:", who(manager)));
        lines.extend(fields.into_iter().map(|f| format!("- {f}")));
    }
    format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
}

/// Decodes the usable entries of an object's `metadata.managedFields`.
pub fn managed_fields(obj: &Value) -> Vec<ManagedFieldsEntry> {
    read_owners(obj.pointer("/metadata/managedFields").cloned(), false)
        .into_iter()
        .map(|o| ManagedFieldsEntry { fields_v1: o.set.to_fields_v1(), ..o.entry })
        .collect()
}

/// Go's `%q` for a manager name; JSON string quoting agrees for ordinary names.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn new_entry(manager: &str, operation: &str, api_version: &str, now: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: manager.to_string(),
        operation: operation.to_string(),
        api_version: api_version.to_string(),
        time: Some(now.to_string()),
        fields_type: FIELDS_TYPE_V1.to_string(),
        fields_v1: Value::Object(Map::new()),
        subresource: subresource.map(str::to_string),
    }
}

// ---------------------------------------------------------------------------
// Field sets
// ---------------------------------------------------------------------------

/// One step of a field path.
///
/// The derived order (fields, then keys, then values, then indexes) is the order
/// structured-merge-diff serializes children in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum PathElement {
    /// `f:<name>`: a field of a map.
    Field(String),
    /// `k:<json>`: an associative-list element, by its key fields as a compact JSON
    /// object sorted by field name (canonical, so parsed and computed keys compare equal).
    Key(String),
    /// `v:<json>`: a set element, by its compact JSON value.
    Value(String),
    /// `i:<n>`: a list index. Never produced (atomic lists are owned whole) but
    /// kept when read so foreign entries survive a round trip.
    Index(usize),
}

impl PathElement {
    fn encode(&self) -> String {
        match self {
            PathElement::Field(n) => format!("f:{n}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Option<PathElement> {
        let (prefix, rest) = s.split_at_checked(2)?;
        match prefix {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => Some(PathElement::Key(match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) => canonical_key(m.iter()),
                _ => rest.to_string(),
            })),
            "v:" => Some(PathElement::Value(match serde_json::from_str::<Value>(rest) {
                Ok(v) => v.to_string(),
                Err(_) => rest.to_string(),
            })),
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }

    /// Kubernetes' human form: `.name`, `[k1=v1,k2=v2]`, `[=value]`, `[3]`.
    fn display(&self) -> String {
        match self {
            PathElement::Field(n) => format!(".{n}"),
            PathElement::Key(k) => match serde_json::from_str::<Value>(k) {
                Ok(Value::Object(m)) => {
                    let parts: Vec<String> = m.iter().map(|(n, v)| format!("{n}={v}")).collect();
                    format!("[{}]", parts.join(","))
                }
                _ => format!("[{k}]"),
            },
            PathElement::Value(v) => format!("[={v}]"),
            PathElement::Index(i) => format!("[{i}]"),
        }
    }
}

/// Compact JSON object of key fields, sorted by name (the last of equal names wins).
/// Written straight into the text: it is made for every element of an associative
/// list, several times per request, so no intermediate map is built.
fn canonical_key<'a>(fields: impl Iterator<Item = (&'a String, &'a Value)>) -> String {
    let mut sorted: Vec<(&String, &Value)> = fields.collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (i, (name, value)) in sorted.iter().enumerate() {
        if sorted.get(i + 1).is_some_and(|next| next.0 == *name) {
            continue;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(name).unwrap_or_default());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push('}');
    out
}

fn path_string(path: &[PathElement]) -> String {
    path.iter().map(PathElement::display).collect()
}

/// A set of field paths, as a tree keyed by path element.
///
/// Invariant: no child is empty, so "has children" means "has owned descendants".
#[derive(Debug, Clone, Default, PartialEq)]
struct FieldSet {
    /// The path leading to this node is itself in the set.
    member: bool,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    fn leaf() -> FieldSet {
        FieldSet { member: true, children: BTreeMap::new() }
    }

    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Adds `child` under `pe`, merging with what is there; empty children are not stored.
    fn insert(&mut self, pe: PathElement, child: FieldSet) {
        if child.is_empty() {
            return;
        }
        match self.children.get_mut(&pe) {
            Some(existing) => existing.union(child),
            None => {
                self.children.insert(pe, child);
            }
        }
    }

    /// Adds `other`'s members, moving its nodes in.
    fn union(&mut self, other: FieldSet) {
        self.member |= other.member;
        for (pe, child) in other.children {
            self.insert(pe, child);
        }
    }

    /// Adds `other`'s members: the paths both have are walked, and only a subtree this
    /// set lacks is copied, once (copying each child before merging it copied every
    /// node once per level above it).
    fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, child) in &other.children {
            if child.is_empty() {
                continue;
            }
            match self.children.get_mut(pe) {
                Some(existing) => existing.union_with(child),
                None => {
                    self.children.insert(pe.clone(), child.clone());
                }
            }
        }
    }

    /// Removes `other`'s members from this set in place; whether anything was removed.
    /// The same as `*self = self.difference(other)`, walking only `other`'s paths.
    fn subtract(&mut self, other: &FieldSet) -> bool {
        let mut hit = self.member && other.member;
        if hit {
            self.member = false;
        }
        for (pe, o) in &other.children {
            if let Some(child) = self.children.get_mut(pe) {
                if child.subtract(o) {
                    hit = true;
                    if child.is_empty() {
                        self.children.remove(pe);
                    }
                }
            }
        }
        hit
    }

    /// Whether every member of `other` is a member of this set.
    fn contains(&self, other: &FieldSet) -> bool {
        (!other.member || self.member) && other.children.iter().all(|(pe, o)| self.children.get(pe).is_some_and(|c| c.contains(o)))
    }

    fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && !other.member, children: BTreeMap::new() };
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(o) => child.difference(o),
                None => child.clone(),
            };
            out.insert(pe.clone(), rest);
        }
        out
    }

    fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && other.member, children: BTreeMap::new() };
        for (pe, child) in &self.children {
            if let Some(o) = other.children.get(pe) {
                out.insert(pe.clone(), child.intersection(o));
            }
        }
        out
    }

    /// Every member path, depth first in serialization order.
    fn paths(&self) -> Vec<Vec<PathElement>> {
        fn walk(set: &FieldSet, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
            if set.member && !prefix.is_empty() {
                out.push(prefix.clone());
            }
            for (pe, child) in &set.children {
                prefix.push(pe.clone());
                walk(child, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".to_string(), Value::Object(Map::new()));
        }
        for (pe, child) in &self.children {
            map.insert(pe.encode(), child.to_fields_v1());
        }
        Value::Object(map)
    }

    /// Parses fieldsV1; unknown prefixes and non-object nodes are skipped.
    fn from_fields_v1(v: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        let Some(map) = v.as_object() else {
            return set;
        };
        for (k, child) in map {
            if k == "." {
                set.member = true;
                continue;
            }
            let Some(pe) = PathElement::decode(k) else {
                continue;
            };
            let mut sub = FieldSet::from_fields_v1(child);
            // A node without children can only mean an owned leaf.
            if sub.children.is_empty() {
                sub.member = true;
            }
            set.insert(pe, sub);
        }
        set
    }
}

/// Whether the set that the stored (canonical) fieldsV1 `v` encodes has a member in
/// common with `other`, read from `v` without decoding it: the walk follows `other`'s
/// paths only. Agrees with `FieldSet::from_fields_v1(v)` having such a member.
fn touches(v: &Value, other: &FieldSet) -> bool {
    fn walk(map: &Map<String, Value>, other: &FieldSet, root: bool) -> bool {
        // Below the root, a node without children is an owned leaf.
        let member = map.contains_key(".") || (!root && map.is_empty());
        if other.member && member {
            return true;
        }
        other.children.iter().any(|(pe, o)| match map.get(&pe.encode()) {
            Some(Value::Object(child)) => walk(child, o, false),
            // from_fields_v1 reads a node that is not an object as an owned leaf.
            Some(_) => o.member,
            None => false,
        })
    }
    v.as_object().is_some_and(|m| walk(m, other, true))
}

// ---------------------------------------------------------------------------
// Managers
// ---------------------------------------------------------------------------

/// A managedFields entry with its decoded field set.
struct Owner {
    /// The entry, without its fieldsV1 (the set is the truth).
    entry: ManagedFieldsEntry,
    set: FieldSet,
    /// The entry as it was stored, while neither it nor its set has changed: written
    /// back as it is, instead of encoding the set again.
    stored: Option<Value>,
    /// The set was left undecoded (it is empty here) because the write cannot touch
    /// it: `stored` is the entry, and goes back as it is.
    opaque: bool,
}

impl Owner {
    /// Decodes the set of an [`Owner::opaque`] entry.
    fn decode(&mut self) {
        if std::mem::take(&mut self.opaque) {
            self.set = FieldSet::from_fields_v1(self.stored.as_ref().and_then(|s| s.get("fieldsV1")).unwrap_or(&Value::Null));
        }
    }
}

/// Decodes a managedFields list, dropping unusable entries and folding duplicates
/// of one manager into a single entry. The entries of a `stored` list (one this module
/// wrote, so in canonical form) are kept to be written back as they are.
fn read_owners(list: Option<Value>, stored: bool) -> Vec<Owner> {
    read_owners_where(list, stored, &|_, _| true)
}

/// [`read_owners`], leaving the set of a `stored` entry undecoded ([`Owner::opaque`])
/// unless `decode(entry, fieldsV1)` says the write needs it.
fn read_owners_where(list: Option<Value>, stored: bool, decode: &dyn Fn(&ManagedFieldsEntry, &Value) -> bool) -> Vec<Owner> {
    let Some(Value::Array(items)) = list else {
        return Vec::new();
    };
    let mut owners: Vec<Owner> = Vec::new();
    // Where each (manager, operation, subresource) is in `owners`: a client may send a
    // long list, which a scan per entry made quadratic.
    let mut seen: HashMap<(String, String, Option<String>), usize> = HashMap::new();
    for item in items {
        // Without its fieldsV1, which is decoded into the set below.
        let Ok(mut entry) = ManagedFieldsEntry::deserialize(&item) else {
            continue;
        };
        let known_op = entry.operation == OPERATION_APPLY || entry.operation == OPERATION_UPDATE;
        let known_type = entry.fields_type.is_empty() || entry.fields_type == FIELDS_TYPE_V1;
        if !known_op || !known_type {
            continue;
        }
        if entry.subresource.as_deref() == Some("") {
            entry.subresource = None;
        }
        let fields = item.get("fieldsV1").unwrap_or(&Value::Null);
        let id = (entry.manager.clone(), entry.operation.clone(), entry.subresource.clone());
        let same = seen.get(&id).and_then(|&i| owners.get_mut(i));
        match same {
            Some(o) => {
                // A manager listed twice (never in a list this module wrote) is folded.
                o.decode();
                o.set.union(FieldSet::from_fields_v1(fields));
                o.stored = None;
            }
            None if stored && !decode(&entry, fields) => {
                seen.insert(id, owners.len());
                owners.push(Owner { entry, set: FieldSet::default(), stored: Some(item), opaque: true })
            }
            None => {
                seen.insert(id, owners.len());
                let set = FieldSet::from_fields_v1(fields);
                owners.push(Owner { entry, set, stored: stored.then_some(item), opaque: false })
            }
        }
    }
    owners
}

/// Writes the non-empty sets back as `metadata.managedFields`, in Kubernetes'
/// order (operation, time, manager, apiVersion, subresource).
fn store_owners(obj: &mut Value, owners: Vec<Owner>) {
    let mut entries: Vec<Owner> = owners.into_iter().filter(|o| o.opaque || !o.set.is_empty()).collect();
    entries.sort_by(|Owner { entry: a, .. }, Owner { entry: b, .. }| {
        (&a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(
            &b.operation,
            &b.time,
            &b.manager,
            &b.api_version,
            &b.subresource,
        ))
    });
    let list: Vec<Value> = entries
        .into_iter()
        .filter_map(|o| match o.stored {
            Some(v) => Some(v),
            None => {
                let e = ManagedFieldsEntry { fields_type: FIELDS_TYPE_V1.to_string(), fields_v1: o.set.to_fields_v1(), ..o.entry };
                serde_json::to_value(e).ok()
            }
        })
        .collect();
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    if list.is_empty() {
        if let Some(Value::Object(m)) = root.get_mut("metadata") {
            m.retain(|k, _| k != "managedFields");
        }
        return;
    }
    let metadata = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if metadata.is_null() {
        *metadata = Value::Object(Map::new());
    }
    if let Value::Object(m) = metadata {
        m.insert("managedFields".to_string(), Value::Array(list));
    }
}

// ---------------------------------------------------------------------------
// Walking objects
// ---------------------------------------------------------------------------

/// Which part of the object a request may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The main resource: everything but `status`.
    Main,
    /// The `status` subresource: only `status`.
    Status,
}

/// How a list is treated once its contents have been checked against [`PatchMeta`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListKind {
    Atomic,
    Map(Vec<String>),
    Set,
}

fn is_scalar(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

fn is_nonempty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

/// The `k:` element of an associative-list item, from the key fields it has.
fn element_key(item: &Value, keys: &[String], defaults: &[(&str, &str)]) -> Option<PathElement> {
    let obj = item.as_object()?;
    if !defaults.is_empty() {
        // A key field the item leaves out takes its default, as the apiserver's
        // defaulted key fields do (a Service port without a protocol is TCP).
        let missing: Vec<(&str, &str)> = defaults.iter().copied().filter(|(k, _)| !obj.contains_key(*k)).collect();
        if !missing.is_empty() {
            let mut filled = obj.clone();
            for (k, v) in missing {
                filled.insert(k.into(), Value::String(v.into()));
            }
            return element_key(&Value::Object(filled), keys, &[]);
        }
    }
    if let [key] = keys {
        // The usual single key (`name`, `containerPort`...), written without sorting.
        let value = obj.get(key.as_str()).filter(|v| is_scalar(v))?;
        let mut text = String::with_capacity(key.len() + 16);
        text.push('{');
        text.push_str(&serde_json::to_string(key).unwrap_or_default());
        text.push(':');
        text.push_str(&value.to_string());
        text.push('}');
        return Some(PathElement::Key(text));
    }
    let present: Vec<(&String, &Value)> = keys.iter().filter_map(|k| obj.get_key_value(k.as_str())).filter(|(_, v)| is_scalar(v)).collect();
    if present.is_empty() {
        return None;
    }
    Some(PathElement::Key(canonical_key(present.into_iter())))
}

/// Computes field sets, differences, merges and pruning for one resource type.
struct Walker<'a> {
    meta: &'a dyn PatchMeta,
    scope: Scope,
}

impl<'a> Walker<'a> {
    fn new(meta: &'a dyn PatchMeta, subresource: Option<&str>) -> Self {
        let scope = if subresource == Some("status") { Scope::Status } else { Scope::Main };
        Walker { meta, scope }
    }

    /// Whether `field` under `parent` can be owned in this scope.
    fn tracked(&self, parent: &[String], field: &str) -> bool {
        match parent {
            [] => match self.scope {
                Scope::Main => !matches!(field, "apiVersion" | "kind" | "status"),
                Scope::Status => field == "status",
            },
            [m] if m == "metadata" => !UNTRACKED_METADATA.contains(&field),
            _ => true,
        }
    }

    /// List semantics for the list at `path`, downgraded to atomic when the items do
    /// not fit (an element without key fields, duplicate keys, a non-scalar in a set),
    /// so that malformed input still merges deterministically. For an associative list
    /// also each item's `k:` element, in item order (empty for the other kinds): the
    /// callers use them rather than making each again.
    fn list_kind(&self, path: &[String], items: &[Value]) -> (ListKind, Vec<PathElement>) {
        let segments: Vec<&str> = path.iter().map(String::as_str).collect();
        match self.meta.list_strategy(&segments) {
            ListStrategy::Atomic => (ListKind::Atomic, Vec::new()),
            ListStrategy::Set if items.iter().all(is_scalar) => (ListKind::Set, Vec::new()),
            ListStrategy::Set => (ListKind::Atomic, Vec::new()),
            ListStrategy::Map(keys) if keys.is_empty() => (ListKind::Atomic, Vec::new()),
            ListStrategy::Map(keys) => {
                let defaults = self.meta.key_defaults(&segments);
                let Some(element_keys) = items.iter().map(|i| element_key(i, &keys, defaults)).collect::<Option<Vec<PathElement>>>() else {
                    return (ListKind::Atomic, Vec::new());
                };
                let mut seen = HashSet::with_capacity(element_keys.len());
                if element_keys.iter().all(|k| seen.insert(k)) {
                    (ListKind::Map(keys), element_keys)
                } else {
                    (ListKind::Atomic, Vec::new())
                }
            }
        }
    }

    /// The apply configuration restricted to what this request may set.
    fn config(&self, applied: &Value, creating: bool) -> Value {
        let mut out = Map::new();
        let Some(obj) = applied.as_object() else {
            return Value::Object(out);
        };
        let meta_path = ["metadata".to_string()];
        for (k, v) in obj {
            if k == "metadata" && self.tracked(&[], k) {
                let Some(m) = v.as_object() else { continue };
                let kept: Map<String, Value> = m
                    .iter()
                    .filter(|(mk, _)| self.tracked(&meta_path, mk) || (creating && IDENTITY_METADATA.contains(&mk.as_str())))
                    .map(|(mk, mv)| (mk.clone(), mv.clone()))
                    .collect();
                if !kept.is_empty() {
                    out.insert(k.clone(), Value::Object(kept));
                }
            } else if self.tracked(&[], k) || (creating && self.scope == Scope::Main && (k == "apiVersion" || k == "kind")) {
                out.insert(k.clone(), v.clone());
            }
        }
        Value::Object(out)
    }

    /// Every owned path of a whole object (the root itself is never a member).
    fn object_set(&self, obj: &Value) -> FieldSet {
        match obj.as_object() {
            Some(m) => self.fields_set(m, &mut Vec::new()),
            None => FieldSet::default(),
        }
    }

    fn fields_set(&self, obj: &Map<String, Value>, path: &mut Vec<String>) -> FieldSet {
        let mut set = FieldSet::default();
        for (k, v) in obj {
            if !self.tracked(path, k) {
                continue;
            }
            path.push(k.clone());
            let child = self.value_set(v, path);
            path.pop();
            set.insert(PathElement::Field(k.clone()), child);
        }
        set
    }

    /// Leaves are scalars, nulls, atomic lists and empty containers; maps contribute
    /// their fields; associative and set lists contribute their elements.
    fn value_set(&self, v: &Value, path: &mut Vec<String>) -> FieldSet {
        match v {
            Value::Object(m) if !m.is_empty() => self.fields_set(m, path),
            Value::Array(items) if !items.is_empty() => {
                let mut set = FieldSet::default();
                let (kind, element_keys) = self.list_kind(path, items);
                match kind {
                    ListKind::Atomic => set.member = true,
                    ListKind::Map(_) => {
                        for (item, pe) in items.iter().zip(element_keys) {
                            let Some(obj) = item.as_object() else {
                                continue;
                            };
                            let mut child = self.fields_set(obj, path);
                            child.member = true;
                            set.insert(pe, child);
                        }
                    }
                    ListKind::Set => {
                        for item in items {
                            set.insert(PathElement::Value(item.to_string()), FieldSet::leaf());
                        }
                    }
                }
                set
            }
            _ => FieldSet::leaf(),
        }
    }

    /// Paths of `old` that `new` no longer has: `object_set(old) − object_set(new)`,
    /// computed without walking the subtrees the two share unchanged.
    fn removed_root(&self, old: &Value, new: &Value) -> FieldSet {
        self.removed_value(old, new, &mut Vec::new())
    }

    fn removed_value(&self, old: &Value, new: &Value, path: &mut Vec<String>) -> FieldSet {
        if old == new {
            return FieldSet::default();
        }
        match (old, new) {
            (Value::Object(o), Value::Object(n)) if !o.is_empty() && !n.is_empty() => self.removed_fields(o, n, path),
            (Value::Array(o), Value::Array(n)) if !o.is_empty() && !n.is_empty() => {
                let (kind, old_keys) = self.list_kind(path, o);
                let (new_kind, new_keys) = match &kind {
                    ListKind::Map(_) => self.list_kind(path, n),
                    _ => (ListKind::Atomic, Vec::new()),
                };
                match kind {
                    ListKind::Map(keys) if matches!(&new_kind, ListKind::Map(k) if *k == keys) => {
                        let new_items: HashMap<&PathElement, &Map<String, Value>> =
                            new_keys.iter().zip(n).filter_map(|(k, i)| Some((k, i.as_object()?))).collect();
                        let mut set = FieldSet::default();
                        for (item, pe) in o.iter().zip(old_keys) {
                            let Some(obj) = item.as_object() else { continue };
                            let child = match new_items.get(&pe) {
                                // Both sides hold the element, so the element itself stays.
                                Some(n) => self.removed_fields(obj, n, path),
                                None => {
                                    let mut c = self.fields_set(obj, path);
                                    c.member = true;
                                    c
                                }
                            };
                            set.insert(pe, child);
                        }
                        set
                    }
                    // A set on both sides: the old elements the new list lacks, found
                    // without making either side's whole set.
                    ListKind::Set if matches!(self.list_kind(path, n).0, ListKind::Set) => {
                        let kept: HashSet<String> = n.iter().map(Value::to_string).collect();
                        let mut set = FieldSet::default();
                        for item in o {
                            let text = item.to_string();
                            if !kept.contains(&text) {
                                set.insert(PathElement::Value(text), FieldSet::leaf());
                            }
                        }
                        set
                    }
                    _ => self.value_set(old, path).difference(&self.value_set(new, path)),
                }
            }
            _ => self.value_set(old, path).difference(&self.value_set(new, path)),
        }
    }

    fn removed_fields(&self, old: &Map<String, Value>, new: &Map<String, Value>, path: &mut Vec<String>) -> FieldSet {
        let mut set = FieldSet::default();
        for (k, ov) in old {
            if !self.tracked(path, k) {
                continue;
            }
            path.push(k.clone());
            let child = match new.get(k) {
                Some(nv) => self.removed_value(ov, nv, path),
                None => self.value_set(ov, path),
            };
            path.pop();
            set.insert(PathElement::Field(k.clone()), child);
        }
        set
    }

    /// Paths of `new` that were added or whose leaf value differs from `old`
    /// (structured-merge-diff's `Added ∪ Modified`).
    fn changed_root(&self, old: Option<&Value>, new: &Value) -> FieldSet {
        match new.as_object() {
            Some(m) => self.changed_fields(old.and_then(Value::as_object), m, &mut Vec::new()),
            None => FieldSet::default(),
        }
    }

    fn changed_fields(&self, old: Option<&Map<String, Value>>, new: &Map<String, Value>, path: &mut Vec<String>) -> FieldSet {
        let mut set = FieldSet::default();
        for (k, nv) in new {
            // An unchanged subtree has no changed paths: comparing it is much cheaper
            // than walking it (a status write leaves the whole spec as it was).
            if !self.tracked(path, k) || old.and_then(|o| o.get(k)) == Some(nv) {
                continue;
            }
            path.push(k.clone());
            let child = self.changed_value(old.and_then(|o| o.get(k)), nv, path);
            path.pop();
            set.insert(PathElement::Field(k.clone()), child);
        }
        set
    }

    fn changed_value(&self, old: Option<&Value>, new: &Value, path: &mut Vec<String>) -> FieldSet {
        let leaf_if_changed = || {
            if old == Some(new) {
                FieldSet::default()
            } else {
                FieldSet::leaf()
            }
        };
        match new {
            Value::Object(m) if !m.is_empty() => self.changed_fields(old.and_then(Value::as_object), m, path),
            Value::Array(items) if !items.is_empty() => match self.list_kind(path, items) {
                (ListKind::Atomic, _) => leaf_if_changed(),
                (ListKind::Map(keys), new_keys) => {
                    let old_list = match old {
                        Some(Value::Array(o)) => Some((o, self.list_kind(path, o))),
                        _ => None,
                    };
                    let mut old_items: HashMap<&PathElement, &Map<String, Value>> = HashMap::new();
                    if let Some((o, (ListKind::Map(old_keys), old_elements))) = &old_list {
                        if *old_keys == keys {
                            old_items = old_elements.iter().zip(o.iter()).filter_map(|(k, i)| Some((k, i.as_object()?))).collect();
                        }
                    }
                    let mut set = FieldSet::default();
                    for (item, pe) in items.iter().zip(new_keys) {
                        let Some(obj) = item.as_object() else {
                            continue;
                        };
                        let child = match old_items.get(&pe) {
                            Some(o) => self.changed_fields(Some(o), obj, path),
                            None => {
                                let mut c = self.fields_set(obj, path);
                                c.member = true;
                                c
                            }
                        };
                        set.insert(pe, child);
                    }
                    set
                }
                (ListKind::Set, _) => {
                    let old_items: HashSet<String> = match old {
                        Some(Value::Array(o)) => o.iter().map(identity_text).collect(),
                        _ => HashSet::new(),
                    };
                    let mut set = FieldSet::default();
                    for item in items.iter().filter(|i| !old_items.contains(&identity_text(i))) {
                        set.insert(PathElement::Value(item.to_string()), FieldSet::leaf());
                    }
                    set
                }
            },
            _ => leaf_if_changed(),
        }
    }

    /// Merges an apply configuration into the live object: maps recursively,
    /// associative lists by key, sets as a union; everything else is replaced.
    fn merge(&self, live: &mut Value, applied: &Value, path: &mut Vec<String>) {
        match (live, applied) {
            (Value::Object(lm), Value::Object(am)) => {
                for (k, av) in am {
                    path.push(k.clone());
                    match lm.get_mut(k) {
                        Some(lv) => self.merge(lv, av, path),
                        None => {
                            lm.insert(k.clone(), av.clone());
                        }
                    }
                    path.pop();
                }
            }
            (Value::Array(li), Value::Array(ai)) => match (self.list_kind(path, li), self.list_kind(path, ai)) {
                ((ListKind::Map(lk), live_keys), (ListKind::Map(ak), applied_keys)) if lk == ak => {
                    self.merge_keyed(li, live_keys, ai, &applied_keys, path)
                }
                ((ListKind::Set, _), (ListKind::Set, _)) => {
                    let mut present: HashSet<String> = li.iter().map(identity_text).collect();
                    for v in ai {
                        if present.insert(identity_text(v)) {
                            li.push(v.clone());
                        }
                    }
                }
                _ => *li = ai.clone(),
            },
            (live, applied) => *live = applied.clone(),
        }
    }

    /// Applied items come out in the applied order; an item only the live list has
    /// stays right after the live item it followed (or at the front).
    fn merge_keyed(
        &self,
        live: &mut Vec<Value>,
        live_keys: Vec<PathElement>,
        applied: &[Value],
        applied_keys: &[PathElement],
        path: &mut Vec<String>,
    ) {
        let wanted: HashSet<&PathElement> = applied_keys.iter().collect();
        let mut front = Vec::new();
        let mut after: HashMap<PathElement, Vec<Value>> = HashMap::new();
        let mut matched: HashMap<PathElement, Value> = HashMap::new();
        let mut anchor: Option<PathElement> = None;
        for (item, k) in std::mem::take(live).into_iter().zip(live_keys) {
            if wanted.contains(&k) {
                anchor = Some(k.clone());
                matched.insert(k, item);
            } else {
                match &anchor {
                    Some(a) => after.entry(a.clone()).or_default().push(item),
                    None => front.push(item),
                }
            }
        }
        let mut out = front;
        for (a, key) in applied.iter().zip(applied_keys) {
            let item = match matched.remove(key) {
                Some(mut l) => {
                    self.merge(&mut l, a, path);
                    l
                }
                None => a.clone(),
            };
            out.push(item);
            if let Some(tail) = after.remove(key) {
                out.extend(tail);
            }
        }
        *live = out;
    }

    /// Removes the members of `remove` from `value`. A node that still has owned
    /// descendants (per `owned`) is kept and only its unowned parts go; containers
    /// emptied this way go too unless someone owns them. `protected` names the key
    /// fields of the list element being walked, which must stay while it does.
    fn prune(&self, value: &mut Value, remove: &FieldSet, owned: Option<&FieldSet>, path: &mut Vec<String>, protected: &[String]) {
        // A removed path goes whole unless someone still owns something beneath it.
        let remove_whole = |r: &FieldSet, o: Option<&FieldSet>| r.member && o.is_none_or(|o| o.children.is_empty());
        match value {
            Value::Object(map) => {
                let mut dropped: HashSet<&str> = HashSet::new();
                for (pe, r) in &remove.children {
                    let PathElement::Field(name) = pe else {
                        continue;
                    };
                    if protected.contains(name) {
                        continue;
                    }
                    let o = owned.and_then(|o| o.children.get(pe));
                    let drop = match map.get_mut(name) {
                        None => false,
                        Some(_) if remove_whole(r, o) => true,
                        Some(child) => {
                            let was_full = is_nonempty_container(child);
                            path.push(name.clone());
                            self.prune(child, r, o, path, &[]);
                            path.pop();
                            was_full && !is_nonempty_container(child) && !o.is_some_and(|o| o.member)
                        }
                    };
                    if drop {
                        dropped.insert(name);
                    }
                }
                // One pass for all (a pass per field was quadratic in the fields an
                // applier stopped sending); retain keeps the other keys in order.
                if !dropped.is_empty() {
                    map.retain(|k, _| !dropped.contains(k.as_str()));
                }
            }
            Value::Array(items) => match self.list_kind(path, items) {
                (ListKind::Map(keys), element_keys) => {
                    let mut kept = Vec::with_capacity(items.len());
                    for (mut item, pe) in std::mem::take(items).into_iter().zip(element_keys) {
                        let r = remove.children.get(&pe);
                        let o = owned.and_then(|o| o.children.get(&pe));
                        match r {
                            Some(r) if remove_whole(r, o) => continue,
                            Some(r) => self.prune(&mut item, r, o, path, &keys),
                            None => {}
                        }
                        kept.push(item);
                    }
                    *items = kept;
                }
                (ListKind::Set, _) => items.retain(|v| !remove.children.get(&PathElement::Value(v.to_string())).is_some_and(|r| r.member)),
                // Owned as a whole; the parent removes it.
                (ListKind::Atomic, _) => {}
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::meta::BuiltinPatchMeta;

    const V: &str = "apps/v1";
    const T1: &str = "2024-01-01T00:00:00Z";
    const T2: &str = "2024-01-01T00:01:00Z";

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "template": {"spec": {"containers": [
                    {"name": "nginx", "image": image, "env": [{"name": "A", "value": "1"}]}
                ]}}
            }
        })
    }

    fn apply_as(live: Option<&Value>, cfg: &Value, mgr: &str, force: bool) -> Result<Value, Vec<Conflict>> {
        apply(live, cfg, mgr, force, V, T1, &BuiltinPatchMeta, None)
    }

    fn entry<'a>(obj: &'a Value, mgr: &str, op: &str) -> Option<&'a Value> {
        obj.pointer("/metadata/managedFields")?.as_array()?.iter().find(|e| e["manager"] == mgr && e["operation"] == op)
    }

    fn fields<'a>(obj: &'a Value, mgr: &str, op: &str) -> &'a Value {
        &entry(obj, mgr, op).expect("entry present")["fieldsV1"]
    }

    /// `touches`, which reads a stored fieldsV1 without decoding it, finds a common
    /// member exactly when the decoded set has one.
    #[test]
    fn touches_agrees_with_the_decoded_set() {
        let walker = Walker::new(&BuiltinPatchMeta, None);
        let mut objects = vec![deployment(3, "nginx:1"), json!({"metadata": {"name": "web"}}), json!({})];
        let mut with_status = deployment(3, "nginx:1");
        with_status["status"] = json!({"replicas": 3, "conditions": [{"type": "Available", "status": "True"}]});
        objects.push(with_status);
        let mut edited = deployment(4, "nginx:2");
        edited["metadata"]["labels"]["tier"] = json!("x");
        objects.push(edited);
        for owner in &objects {
            let set = walker.object_set(owner);
            let stored = set.to_fields_v1();
            for (a, b) in objects.iter().flat_map(|a| objects.iter().map(move |b| (a, b))) {
                for other in [walker.changed_root(Some(a), b), walker.removed_root(a, b), walker.object_set(b)] {
                    let expected = !set.intersection(&other).is_empty();
                    assert_eq!(touches(&stored, &other), expected, "owner {owner} against {:?}", other.paths());
                }
            }
        }
        // A node that is not an object reads as an owned leaf, as from_fields_v1 has it.
        let leaf = FieldSet { member: false, children: [(PathElement::Field("a".into()), FieldSet::leaf())].into() };
        assert!(touches(&json!({"f:a": null}), &leaf));
        assert!(!touches(&json!({"f:b": {}}), &leaf));
    }

    /// A controller that keeps updating the same status fields leaves the other
    /// managers' entries exactly as stored, and only refreshes its own entry's time;
    /// a field it writes for the first time is added to its set.
    #[test]
    fn repeated_status_updates_refresh_only_their_own_entry() {
        let mut live = deployment(3, "nginx:1");
        track_update(None, &mut live, "ctl", V, T1, &BuiltinPatchMeta, None);
        let mut first = live.clone();
        first["status"] = json!({"replicas": 3});
        track_update(Some(&live), &mut first, "ctrl", V, T1, &BuiltinPatchMeta, Some("status"));
        let mut second = first.clone();
        second["status"] = json!({"replicas": 2});
        track_update(Some(&first), &mut second, "ctrl", V, T2, &BuiltinPatchMeta, Some("status"));
        assert_eq!(entry(&second, "ctl", "Update"), entry(&first, "ctl", "Update"), "another manager's entry is untouched");
        assert_eq!(fields(&second, "ctrl", "Update"), fields(&first, "ctrl", "Update"));
        assert_eq!(entry(&second, "ctrl", "Update").unwrap()["time"], T2);
        let mut third = second.clone();
        third["status"] = json!({"replicas": 2, "readyReplicas": 1});
        track_update(Some(&second), &mut third, "ctrl", V, T2, &BuiltinPatchMeta, Some("status"));
        assert_eq!(fields(&third, "ctrl", "Update"), &json!({"f:status": {"f:readyReplicas": {}, "f:replicas": {}}}));
        // Another status writer then takes a field from it.
        let mut fourth = third.clone();
        fourth["status"]["replicas"] = json!(5);
        track_update(Some(&third), &mut fourth, "other", V, T2, &BuiltinPatchMeta, Some("status"));
        assert_eq!(fields(&fourth, "other", "Update"), &json!({"f:status": {"f:replicas": {}}}));
        assert_eq!(fields(&fourth, "ctrl", "Update"), &json!({"f:status": {"f:readyReplicas": {}}}));
    }

    /// The removed paths, computed while skipping unchanged subtrees, are exactly the
    /// difference of the two objects' full field sets.
    #[test]
    fn removed_paths_match_the_difference_of_the_full_field_sets() {
        let base = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "uid": "u1", "labels": {"app": "web", "tier": "x"}, "finalizers": ["a", "b"]},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "nginx", "image": "nginx:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "side", "image": "busybox", "args": ["x", "y"]}
                ]}}
            },
            "status": {"replicas": 3, "conditions": [{"type": "Available", "status": "True"}]}
        });
        let edits: Vec<fn(&mut Value)> = vec![
            |_| {},
            |v| v["spec"]["replicas"] = json!(4),
            |v| drop(v["metadata"]["labels"].as_object_mut().unwrap().remove("tier")),
            |v| v["metadata"]["finalizers"] = json!(["b"]),
            |v| drop(v["metadata"].as_object_mut().unwrap().remove("finalizers")),
            |v| drop(v["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap().pop()),
            |v| v["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "B", "value": "3"}]),
            |v| v["spec"]["template"]["spec"]["containers"][1]["args"] = json!(["x"]),
            |v| v["spec"]["template"]["spec"]["containers"][0]["name"] = json!("renamed"),
            |v| v["spec"]["template"]["spec"]["containers"] = json!([{"image": "no-name"}]),
            |v| v["spec"]["selector"] = json!("not an object"),
            |v| v["spec"]["selector"] = json!({}),
            |v| v["spec"] = json!({"replicas": 1}),
            |v| v["metadata"]["uid"] = json!("u2"),
            |v| v["status"]["conditions"][0]["status"] = json!("False"),
            |v| drop(v.as_object_mut().unwrap().remove("status")),
        ];
        for sub in [None, Some("status")] {
            let walker = Walker::new(&BuiltinPatchMeta, sub);
            for (i, a) in edits.iter().enumerate() {
                for (j, b) in edits.iter().enumerate() {
                    let (mut old, mut new) = (base.clone(), base.clone());
                    a(&mut old);
                    b(&mut new);
                    let (old_set, new_set) = (walker.object_set(&old), walker.object_set(&new));
                    let oracle = old_set.difference(&new_set);
                    assert_eq!(walker.removed_root(&old, &new), oracle, "edit {i} to edit {j}, subresource {sub:?}");
                    // In place, and saying whether it took anything (which decides
                    // whether a stored managedFields entry may be written back as it is).
                    let mut rest = old_set.clone();
                    let hit = rest.subtract(&new_set);
                    assert_eq!((&rest, hit), (&oracle, oracle != old_set), "subtract, edit {i} from edit {j}, subresource {sub:?}");
                }
            }
        }
    }

    #[test]
    fn create_records_fields_v1() {
        let obj = apply_as(None, &deployment(3, "nginx:1"), "kubectl", false).unwrap();
        let mf = obj["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1);
        assert_eq!(
            mf[0],
            json!({
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "time": T1, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:template": {"f:spec": {"f:containers": {
                            "k:{\"name\":\"nginx\"}": {
                                ".": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                                "f:image": {}, "f:name": {}
                            }
                        }}}
                    }
                }
            })
        );
        // Key order on the wire matches Kubernetes: `.` first, `subresource` omitted.
        let text = serde_json::to_string(&mf[0]).unwrap();
        assert!(text.contains("\"k:{\\\"name\\\":\\\"nginx\\\"}\":{\".\":{},\"f:env\""), "{text}");
        assert!(!text.contains("subresource"));
        assert_eq!(obj["spec"]["replicas"], 3);
        assert_eq!(obj["metadata"]["name"], "web");
        assert_eq!(obj["kind"], "Deployment");
    }

    #[test]
    fn different_value_conflicts() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let errs = apply_as(Some(&live), &json!({"spec": {"replicas": 5}}), "b", false).unwrap_err();
        assert_eq!(errs, vec![Conflict { manager: "a".into(), field: ".spec.replicas".into() }]);
        assert_eq!(conflict_message(&errs, V), "Apply failed with 1 conflict: conflict with \"a\" using apps/v1: .spec.replicas");
    }

    #[test]
    fn several_conflicts_are_reported_together() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let errs = apply_as(Some(&live), &deployment(5, "nginx:2"), "b", false).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, [".spec.replicas", ".spec.template.spec.containers[name=\"nginx\"].image"]);
        assert_eq!(
            conflict_message(&errs, V),
            "Apply failed with 2 conflicts: conflicts with \"a\" using apps/v1:\n\
             - .spec.replicas\n\
             - .spec.template.spec.containers[name=\"nginx\"].image"
        );
    }

    #[test]
    fn same_value_is_shared() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let obj = apply_as(Some(&live), &json!({"spec": {"replicas": 3}}), "b", false).unwrap();
        assert_eq!(fields(&obj, "a", "Apply")["f:spec"]["f:replicas"], json!({}));
        assert_eq!(fields(&obj, "b", "Apply"), &json!({"f:spec": {"f:replicas": {}}}));
    }

    #[test]
    fn force_moves_ownership() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let obj = apply_as(Some(&live), &json!({"spec": {"replicas": 5}}), "b", true).unwrap();
        assert_eq!(obj["spec"]["replicas"], 5);
        assert!(fields(&obj, "a", "Apply")["f:spec"].get("f:replicas").is_none());
        assert_eq!(fields(&obj, "b", "Apply"), &json!({"f:spec": {"f:replicas": {}}}));
        // The loser keeps its other fields.
        assert!(fields(&obj, "a", "Apply")["f:spec"]["f:template"].is_object());
    }

    #[test]
    fn forcing_away_everything_drops_the_entry() {
        let live = apply_as(None, &json!({"spec": {"replicas": 3}}), "a", false).unwrap();
        let obj = apply_as(Some(&live), &json!({"spec": {"replicas": 5}}), "b", true).unwrap();
        assert!(entry(&obj, "a", "Apply").is_none());
        assert_eq!(obj["metadata"]["managedFields"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn dropping_a_field_removes_it() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let mut cfg = deployment(3, "nginx:1");
        cfg["metadata"].as_object_mut().unwrap().remove("labels");
        cfg["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("env");
        let obj = apply_as(Some(&live), &cfg, "a", false).unwrap();
        // The emptied labels map goes too, since nobody owns it.
        assert!(obj["metadata"].get("labels").is_none());
        assert!(obj["spec"]["template"]["spec"]["containers"][0].get("env").is_none());
        assert!(fields(&obj, "a", "Apply")["f:metadata"].is_null());
    }

    #[test]
    fn dropping_a_list_element_removes_it() {
        let mut two = deployment(3, "nginx:1");
        two["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap().push(json!({"name": "sidecar", "image": "busybox"}));
        let live = apply_as(None, &two, "a", false).unwrap();
        let obj = apply_as(Some(&live), &deployment(3, "nginx:1"), "a", false).unwrap();
        let names: Vec<&Value> = obj["spec"]["template"]["spec"]["containers"].as_array().unwrap().iter().map(|c| &c["name"]).collect();
        assert_eq!(names, [&json!("nginx")]);
    }

    #[test]
    fn dropping_a_co_owned_field_keeps_it() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let live = apply_as(Some(&live), &json!({"spec": {"replicas": 3}}), "b", false).unwrap();
        let mut cfg = deployment(3, "nginx:1");
        cfg["spec"].as_object_mut().unwrap().remove("replicas");
        let obj = apply_as(Some(&live), &cfg, "a", false).unwrap();
        assert_eq!(obj["spec"]["replicas"], 3);
        assert!(fields(&obj, "a", "Apply")["f:spec"].get("f:replicas").is_none());
        assert_eq!(fields(&obj, "b", "Apply"), &json!({"f:spec": {"f:replicas": {}}}));
    }

    #[test]
    fn dropped_element_with_field_owned_elsewhere_keeps_element_and_keys() {
        let mut two = deployment(3, "nginx:1");
        two["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "busybox", "args": ["x"]}));
        let live = apply_as(None, &two, "a", false).unwrap();
        // Another applier shares the sidecar's image.
        let shared = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar", "image": "busybox"}
        ]}}}});
        let live = apply_as(Some(&live), &shared, "b", false).unwrap();
        let obj = apply_as(Some(&live), &deployment(3, "nginx:1"), "a", false).unwrap();
        let sidecar = &obj["spec"]["template"]["spec"]["containers"][1];
        assert_eq!(sidecar, &json!({"name": "sidecar", "image": "busybox"}));
    }

    #[test]
    fn update_takes_ownership_from_applier() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let mut updated = live.clone();
        updated["spec"]["replicas"] = json!(5);
        track_update(Some(&live), &mut updated, "kubectl-edit", V, T2, &BuiltinPatchMeta, None);
        assert!(fields(&updated, "a", "Apply")["f:spec"].get("f:replicas").is_none());
        let edit = entry(&updated, "kubectl-edit", "Update").unwrap();
        assert_eq!(edit["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(edit["time"], T2);
        // Apply entries sort before Update entries.
        assert_eq!(updated["metadata"]["managedFields"][0]["operation"], "Apply");

        let errs = apply_as(Some(&updated), &deployment(3, "nginx:1"), "a", false).unwrap_err();
        assert_eq!(
            conflict_message(&errs, V),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1: .spec.replicas"
        );
    }

    #[test]
    fn update_entries_of_one_manager_merge() {
        let mut created = json!({"metadata": {"name": "x"}, "spec": {"replicas": 1}});
        track_update(None, &mut created, "ctl", V, T1, &BuiltinPatchMeta, None);
        let mut second = created.clone();
        second["spec"]["paused"] = json!(true);
        track_update(Some(&created), &mut second, "ctl", V, T2, &BuiltinPatchMeta, None);
        let mf = second["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1);
        assert_eq!(mf[0]["fieldsV1"], json!({"f:spec": {"f:paused": {}, "f:replicas": {}}}));
        assert_eq!(mf[0]["time"], T2);

        // A no-op write keeps the entry as it was.
        let mut third = second.clone();
        track_update(Some(&second), &mut third, "ctl", V, "2030-01-01T00:00:00Z", &BuiltinPatchMeta, None);
        assert_eq!(third, second);
    }

    #[test]
    fn update_removal_drops_ownership_everywhere() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let mut updated = live.clone();
        updated["metadata"].as_object_mut().unwrap().remove("labels");
        track_update(Some(&live), &mut updated, "ctl", V, T2, &BuiltinPatchMeta, None);
        assert!(fields(&updated, "a", "Apply").get("f:metadata").is_none());
        assert!(entry(&updated, "ctl", "Update").is_none());
    }

    #[test]
    fn status_is_not_tracked_on_main_resource() {
        let mut cfg = deployment(3, "nginx:1");
        cfg["status"] = json!({"replicas": 3});
        let obj = apply_as(None, &cfg, "a", false).unwrap();
        assert!(fields(&obj, "a", "Apply").get("f:status").is_none());
        assert!(obj.get("status").is_none());

        let mut with_status = obj.clone();
        with_status["status"] = json!({"readyReplicas": 1});
        let mut changed = with_status.clone();
        changed["status"]["readyReplicas"] = json!(2);
        track_update(Some(&with_status), &mut changed, "ctl", V, T2, &BuiltinPatchMeta, None);
        assert!(entry(&changed, "ctl", "Update").is_none());

        let mut via_status = with_status.clone();
        via_status["status"]["readyReplicas"] = json!(2);
        via_status["spec"]["replicas"] = json!(9);
        track_update(Some(&with_status), &mut via_status, "ctrl", V, T2, &BuiltinPatchMeta, Some("status"));
        let e = entry(&via_status, "ctrl", "Update").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {"f:readyReplicas": {}}}));
    }

    #[test]
    fn create_via_update_owns_everything_tracked() {
        let mut obj = deployment(2, "nginx:1");
        obj["status"] = json!({"replicas": 0});
        track_update(None, &mut obj, "kubectl-create", V, T1, &BuiltinPatchMeta, None);
        let f = fields(&obj, "kubectl-create", "Update");
        assert_eq!(f["f:metadata"], json!({"f:labels": {"f:app": {}}}));
        assert_eq!(f["f:spec"]["f:replicas"], json!({}));
        assert!(f.get("f:status").is_none());
        assert!(f.get("f:apiVersion").is_none());
    }

    #[test]
    fn keyed_lists_merge_in_applied_order_and_sets_union() {
        let live = json!({"metadata": {"name": "x", "finalizers": ["a"]}, "spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "1"}, {"name": "x", "image": "live-only"}, {"name": "b", "image": "2"}
        ]}}}});
        let cfg = json!({"metadata": {"finalizers": ["b"]}, "spec": {"template": {"spec": {"containers": [
            {"name": "b", "image": "2"}, {"name": "a", "image": "1"}, {"name": "c", "image": "3"}
        ]}}}});
        let obj = apply_as(Some(&live), &cfg, "a", false).unwrap();
        let names: Vec<&str> =
            obj["spec"]["template"]["spec"]["containers"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["b", "a", "x", "c"]);
        assert_eq!(obj["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(fields(&obj, "a", "Apply")["f:metadata"], json!({"f:finalizers": {"v:\"b\"": {}}}));
    }

    #[test]
    fn first_apply_to_untracked_object_protects_existing_fields() {
        let live = deployment(3, "nginx:1");
        let errs = apply_as(Some(&live), &json!({"spec": {"replicas": 4}}), "a", false).unwrap_err();
        assert_eq!(errs[0].manager, BEFORE_FIRST_APPLY_MANAGER);
    }

    #[test]
    fn fields_v1_round_trips() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let f = fields(&live, "a", "Apply");
        let set = FieldSet::from_fields_v1(f);
        assert_eq!(&set.to_fields_v1(), f);
        // Multi-field keys are canonicalised by name whatever order they arrive in.
        let k = PathElement::decode("k:{\"protocol\":\"TCP\",\"containerPort\":80}").unwrap();
        assert_eq!(k.encode(), "k:{\"containerPort\":80,\"protocol\":\"TCP\"}");
        assert_eq!(k.display(), "[containerPort=80,protocol=\"TCP\"]");
    }

    #[test]
    fn hostile_input_does_not_panic() {
        let garbage = json!({"metadata": {"managedFields": [
            {}, 7, {"manager": "m", "operation": "Apply", "fieldsV1": {"f:spec": 3, "x:y": {}, "k:nope": {}}},
            {"manager": "m", "operation": "Update", "fieldsType": "FieldsV9"}
        ]}, "spec": [1, 2]});
        for cfg in
            [json!(null), json!([1]), json!({"metadata": 3}), json!({"spec": {"template": {"spec": {"containers": [1, {"image": "x"}]}}}})]
        {
            let _ = apply(Some(&garbage), &cfg, "x", true, V, T1, &BuiltinPatchMeta, None);
            let _ = apply(Some(&json!("str")), &cfg, "x", false, V, T1, &BuiltinPatchMeta, Some("status"));
            let mut new = cfg.clone();
            track_update(Some(&garbage), &mut new, "x", V, T1, &BuiltinPatchMeta, None);
        }
        assert_eq!(conflict_message(&[], V), "Apply failed with 0 conflicts: ");
    }

    #[test]
    fn user_can_reset_managed_fields() {
        let live = apply_as(None, &deployment(3, "nginx:1"), "a", false).unwrap();
        let mut new = live.clone();
        new["metadata"]["managedFields"] = json!([{}]);
        track_update(Some(&live), &mut new, "ctl", V, T2, &BuiltinPatchMeta, None);
        assert!(new["metadata"].get("managedFields").is_none());

        // A list that does not decode is not a rewrite: ownership stays as it was.
        let mut new = live.clone();
        new["metadata"]["managedFields"] = json!([{"bogus": true}, 3]);
        track_update(Some(&live), &mut new, "ctl", V, T2, &BuiltinPatchMeta, None);
        assert_eq!(new, live);
    }
}
