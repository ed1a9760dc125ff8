//! The generic resource engine: one admission and storage pipeline for every type in
//! the registry. HTTP handlers and the in-process controllers both call it, so a
//! controller's write is validated, versioned and watched exactly like a client's.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::error::{ApiError, Cause, ObjRef};
use crate::kinds;
use crate::objmeta::{self, meta_str};
use crate::patch;
use crate::registry::{Registry, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Entry, Revision, Store, StoreError, WriteOp};

mod patch_verbs;
mod present;
mod rfc6902;

pub use present::{present, present_shared, with_metadata, with_resource_version, ListBody, ListMeta, Presented};
use present::{shown_as_stored, to_external, to_internal};
pub use rfc6902::json_patch_apply;

/// Annotation that names an object's workspace on wildcard responses (kcp's convention).
pub use placement_api::keys::CLUSTER_ANNOTATION;

/// How many times a patch is retried against a concurrently changing object before
/// answering 409, matching the apiserver's patcher retry budget.
const PATCH_RETRIES: usize = 5;

/// How many times a delete is tried again after another write of its object landed
/// first. kube-apiserver retries without a bound; this one is far above what any
/// writer but a tight loop against the same object causes.
const DELETE_RETRIES: usize = 100;

/// `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields are a 400.
    Strict,
    /// Unknown fields produce a `Warning` header (the server default).
    #[default]
    Warn,
    /// Unknown fields are dropped silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query parameter value.
    pub fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Strict") => Ok(Self::Strict),
            Some("Ignore") => Ok(Self::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// The last check on every write, given the stored object and the one about to be
/// stored after admission (`None` where there is none: a create has no stored object,
/// a delete none to store). It is how [`crate::authz`] keeps a scoped principal to the
/// objects and changes it may touch; every write of this engine passes it, through
/// [`WriteGuard::check`], before it is stored or a dry run answers.
#[derive(Clone)]
pub struct WriteGuard(pub Arc<GuardFn>);

/// The check of a [`WriteGuard`]: (stored, about to be stored) → allowed or the refusal.
pub type GuardFn = dyn Fn(Option<&Value>, Option<&Value>) -> Result<(), ApiError> + Send + Sync;

impl WriteGuard {
    /// Applies the guard, if there is one (`None` is the control plane's own controllers).
    pub fn check(guard: Option<&WriteGuard>, old: Option<&Value>, new: Option<&Value>) -> Result<(), ApiError> {
        guard.map_or(Ok(()), |g| (g.0)(old, new))
    }
}

impl std::fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteGuard")
    }
}

/// Options common to writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// The field manager recorded in managedFields.
    pub field_manager: String,
    /// Unknown-field handling.
    pub validation: FieldValidation,
    /// `dryRun=All`: run admission, write nothing.
    pub dry_run: bool,
    /// Checked on every write before it is stored ([`WriteGuard`]).
    pub guard: Option<WriteGuard>,
}

/// The result of a write.
#[derive(Debug)]
pub struct Written {
    /// The object as stored (or as it would be, for dry runs), shared with the store
    /// when the response shows it unchanged.
    pub object: Presented,
    /// Whether the write created the object (201).
    pub created: bool,
    /// `Warning` headers for the client.
    pub warnings: Vec<String>,
}

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply { force: bool },
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// The object itself.
    Main,
    /// `/status`.
    Status,
    /// `pods/binding`: the node, the Binding's annotations and the `PodScheduled`
    /// condition at once, without touching managedFields (see [`Api::bind`]).
    Binding,
}

impl PatchKind {
    fn name(self) -> &'static str {
        match self {
            PatchKind::Json => "JSON",
            PatchKind::Merge => "merge",
            PatchKind::Strategic => "strategic merge",
            PatchKind::Apply { .. } => "apply",
        }
    }
}

/// Decodes a patch body of the given kind (YAML for apply, JSON otherwise).
pub fn decode_patch(kind: PatchKind, body: &[u8]) -> Result<Value, ApiError> {
    // A merge patch is an object and a JSON patch a list: a body that opens otherwise is
    // refused before it is decoded (a 3 MiB array of objects took 174 ms to decode).
    let opens = body.iter().find(|b| !b.is_ascii_whitespace());
    match (kind, opens) {
        (PatchKind::Apply { .. }, _) => crate::decode::yaml_or_json(body),
        (PatchKind::Merge | PatchKind::Strategic, Some(b)) if *b != b'{' => {
            Err(ApiError::bad_request(format!("invalid {} patch: the patch must be a JSON object", kind.name())))
        }
        (PatchKind::Json, Some(b)) if *b != b'[' => Err(ApiError::bad_request("a JSON patch must be a list of operations")),
        _ => crate::decode::json(body, "patch"),
    }
}

impl Sub {
    fn name(self) -> Option<&'static str> {
        match self {
            Sub::Main => None,
            Sub::Status => Some("status"),
            Sub::Binding => Some("binding"),
        }
    }
}

/// `DeleteOptions` that matter here.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Background, Foreground or Orphan.
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// Checked before the object is deleted or marked for deletion ([`WriteGuard`]).
    pub guard: Option<WriteGuard>,
}

/// List options.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Parsed `labelSelector`.
    pub labels: Option<LabelSelector>,
    /// Parsed `fieldSelector`.
    pub fields: Option<FieldSelector>,
    /// `limit`.
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersionMatch=Exact`: the state at this revision.
    pub exact: Option<Revision>,
}

/// Where a request points: a type, a workspace (or `*`), and a namespace.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The resource type.
    pub rt: Arc<ResourceType>,
    /// Workspace name, or `*` for every workspace.
    pub workspace: String,
    /// Namespace, or "" for cluster-scoped types and all-namespace requests.
    pub namespace: String,
}

impl Scope {
    /// Whether this scope spans every workspace.
    pub fn wildcard(&self) -> bool {
        self.workspace == "*"
    }
    fn obj<'a>(&'a self, name: &'a str) -> ObjRef<'a> {
        ObjRef { group: &self.rt.group, resource: &self.rt.plural, name }
    }
    /// The store key of the object `name` in this scope.
    pub fn key(&self, name: &str) -> String {
        self.rt.key(&self.workspace, &self.namespace, name)
    }
    /// The store prefix of this collection.
    pub fn prefix(&self) -> String {
        let ws = (!self.wildcard()).then_some(self.workspace.as_str());
        let ns = (!self.namespace.is_empty()).then_some(self.namespace.as_str());
        self.rt.prefix(ws, ns)
    }
}

/// The engine.
pub struct Api {
    /// The store.
    pub store: Arc<dyn Store>,
    /// What the clusters report, for the types served from it ([`crate::views`]).
    pub views: Arc<dyn Store>,
    /// The served types.
    pub registry: Arc<Registry>,
    /// Cluster IPs and node ports, in a physical cluster only ([`crate::allocator`]).
    allocator: std::sync::OnceLock<crate::allocator::ServiceAllocator>,
}

/// A continue token: where the next page starts and the revision of the first page.
#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: Revision,
    start: String,
}

impl Api {
    /// The engine over a store and registry.
    pub fn new(store: Arc<dyn Store>, registry: Arc<Registry>) -> Arc<Self> {
        Arc::new(Self { store, views: crate::views::new_store(), registry, allocator: Default::default() })
    }

    /// The store that holds `rt`'s objects: the views' for a type served from what the
    /// clusters report, the store for every other.
    pub fn store_for(&self, rt: &ResourceType) -> &Arc<dyn Store> {
        if rt.view {
            &self.views
        } else {
            &self.store
        }
    }

    /// The objects of a view that `name` addresses in `scope` ([`crate::views::find`]).
    pub fn find_in_view(&self, scope: &Scope, name: &str) -> Vec<Entry> {
        crate::views::find(&*self.views, &scope.key(name), name)
    }

    /// Makes every Service written from now on get its cluster IP and node ports from
    /// `allocator`, as in a physical cluster; a second call changes nothing.
    pub fn install_allocator(&self, allocator: crate::allocator::ServiceAllocator) {
        let _ = self.allocator.set(allocator);
    }

    /// What a physical cluster allocates for a Service about to be stored, reserved
    /// until the returned value is dropped (after the write).
    fn allocate(&self, scope: &Scope, obj: &mut Value, old: Option<&Value>) -> Result<Option<crate::allocator::Held<'_>>, ApiError> {
        self.allocator.get().map_or(Ok(None), |a| a.admit(&*self.store, (&scope.rt, &scope.workspace, &scope.namespace), obj, old))
    }

    fn entry(&self, scope: &Scope, name: &str) -> Result<Entry, ApiError> {
        self.get_raw(scope, name).ok_or_else(|| ApiError::not_found(scope.obj(name)))
    }

    /// GET one object.
    pub fn get(&self, scope: &Scope, name: &str) -> Result<Presented, ApiError> {
        if scope.rt.view {
            return Ok(present_shared(scope, &scope.workspace, &self.entry(scope, name)?));
        }
        if shown_as_stored(scope) {
            let doc = self.store.get_doc(&scope.key(name)).ok_or_else(|| ApiError::not_found(scope.obj(name)))?;
            return Ok(Presented::raw(doc));
        }
        let e = self.entry(scope, name)?;
        Ok(Presented::Changed(present(scope, &scope.workspace, &e.value)))
    }

    /// The stored object and its revision, without presentation.
    pub fn get_raw(&self, scope: &Scope, name: &str) -> Option<Entry> {
        if scope.rt.view {
            return self.find_in_view(scope, name).into_iter().next();
        }
        self.store.get(&scope.key(name))
    }

    /// LIST a collection. Returns the list object (kind `<Kind>List`).
    pub fn list(&self, scope: &Scope, opts: &ListOptions) -> Result<ListBody, ApiError> {
        let (items, rv, cont) = self.list_items(scope, opts)?;
        Ok(ListBody {
            kind: scope.rt.list_kind(),
            api_version: scope.rt.api_version(),
            metadata: ListMeta { resource_version: rv.to_string(), continue_token: cont },
            items,
        })
    }

    /// The matching objects of a collection, the list revision, and a continue token.
    pub fn list_items(&self, scope: &Scope, opts: &ListOptions) -> Result<(Vec<Presented>, Revision, Option<String>), ApiError> {
        self.check_field_selector(scope, opts.fields.as_ref())?;
        let store = self.store_for(&scope.rt);
        let prefix = scope.prefix();
        let (mut start, mut list_rv) = (None, None);
        if let Some(tok) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            let t = decode_continue(tok)?;
            if !t.start.starts_with(&prefix) {
                return Err(ApiError::bad_request("continue key is not valid for this collection"));
            }
            start = Some(t.start);
            list_rv = Some(t.rv);
        }
        if let Some(rv) = opts.exact {
            if list_rv.is_some() {
                return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
            }
            let current = store.revision();
            if rv > current {
                return Err(ApiError::too_large_resource_version(rv, current));
            }
            list_rv = Some(rv);
        }
        let limit = opts.limit.filter(|l| *l > 0);
        // Nothing to filter or change: pass the stored documents through unparsed.
        let passthrough = list_rv.is_none() && opts.labels.is_none() && opts.fields.is_none() && shown_as_stored(scope);
        if passthrough {
            let (docs, rev) = store.list_docs(&prefix);
            let mut items = Vec::new();
            let mut cont = None;
            for (key, doc) in docs {
                if limit.is_some_and(|l| items.len() >= l) {
                    let last = items.last().map(|(k, _): &(String, _)| k.clone()).unwrap_or_default();
                    cont = Some(encode_continue(&ContinueToken { rv: rev, start: last }));
                    break;
                }
                items.push((key, Presented::raw(doc)));
            }
            return Ok((items.into_iter().map(|(_, p)| p).collect(), rev, cont));
        }
        // Every page of one list is served from the snapshot of the first page.
        let (entries, list_rv) = match list_rv {
            Some(rv) => (
                store.list_at(&prefix, start.as_deref(), rv).map_err(|_| match opts.exact {
                    Some(rv) => ApiError::expired(format!("too old resource version: {rv} ({})", store.revision())),
                    None => ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."),
                })?,
                rv,
            ),
            None => store.list(&prefix, None, None),
        };
        let mut items = Vec::new();
        let mut cont = None;
        let mut last_key = None;
        for (key, entry) in entries {
            if !matches(scope, &entry.value, opts) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                cont = last_key.map(|k: String| encode_continue(&ContinueToken { rv: list_rv, start: k }));
                break;
            }
            let ws = crate::registry::split_key(&key).map(|(w, _, _)| w).unwrap_or_default();
            items.push(present_shared(scope, ws, &entry));
            last_key = Some(key);
        }
        Ok((items, list_rv, cont))
    }

    /// Refuses a field selector on a field the type does not index (400), as
    /// kube-apiserver does for lists and watches alike.
    pub fn check_field_selector(&self, scope: &Scope, fields: Option<&FieldSelector>) -> Result<(), ApiError> {
        let Some(fs) = fields else { return Ok(()) };
        let extra = scope.rt.strategy.selectable_fields();
        for f in fs.fields() {
            let ok = f == "metadata.name" || (f == "metadata.namespace" && scope.rt.namespaced) || extra.contains(&f);
            if !ok {
                return Err(ApiError::bad_request(format!(
                    "\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"{}",
                    extra.iter().map(|e| format!(", \"{e}\"")).collect::<String>()
                )));
            }
        }
        Ok(())
    }

    /// CREATE.
    pub async fn create(&self, scope: &Scope, obj: Value, opts: &WriteOptions) -> Result<Written, ApiError> {
        self.create_owned(scope, obj, opts, None).await
    }

    /// CREATE, with `applied` as the new object's managedFields when a server-side
    /// apply creates it (the apply computed them), so the object is stored in one write.
    async fn create_owned(&self, scope: &Scope, mut obj: Value, opts: &WriteOptions, applied: Option<Value>) -> Result<Written, ApiError> {
        if scope.wildcard() {
            return Err(ApiError::method_not_allowed("writes are not allowed through the wildcard workspace; use /clusters/<workspace>"));
        }
        let mut warnings = Vec::new();
        self.fill_identity(scope, &mut obj, None)?;
        if meta_str(&obj, "name").unwrap_or_default().is_empty() {
            if let Some(prefix) = meta_str(&obj, "generateName").map(String::from).filter(|p| !p.is_empty()) {
                objmeta::meta_mut(&mut obj).insert("name".into(), json!(objmeta::generate_name(&prefix)));
            }
        }
        if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
        }
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        scope.rt.strategy.check_create(&name)?;
        self.check_namespace_writable(scope, &name)?;
        let mut obj = self.admit(scope, &name, obj, None, Sub::Main, opts, &mut warnings)?;
        {
            let m = objmeta::meta_mut(&mut obj);
            m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            m.insert("creationTimestamp".into(), json!(objmeta::now_rfc3339()));
            for f in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
                m.remove(f);
            }
        }
        if scope.rt.strategy.has_generation() {
            objmeta::meta_mut(&mut obj).insert("generation".into(), json!(1));
        }
        // A freshly created object has no status when a status subresource owns it.
        if scope.rt.status {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        scope.rt.strategy.prepare_for_create(&mut obj);
        let _allocated = self.allocate(scope, &mut obj, None)?;
        match applied {
            Some(managed) => {
                objmeta::meta_mut(&mut obj).insert("managedFields".into(), managed);
            }
            None => patch::apply::track_update(
                None,
                &mut obj,
                &opts.field_manager,
                &scope.rt.api_version(),
                &objmeta::now_rfc3339(),
                scope.rt.patch_meta(),
                None,
            ),
        }
        WriteGuard::check(opts.guard.as_ref(), None, Some(&obj))?;
        if opts.dry_run {
            return Ok(Written { object: Presented::Changed(present(scope, &scope.workspace, &obj)), created: true, warnings });
        }
        let stored = self
            .store
            .write(WriteOp::Create { key: scope.key(&name), value: obj })
            .await
            .map_err(|e| ApiError::from_store(e, scope.obj(&name)))?;
        Ok(Written { object: present_shared(scope, &scope.workspace, &stored), created: true, warnings })
    }

    /// UPDATE (PUT) of the object or its status.
    pub async fn update(&self, scope: &Scope, name: &str, obj: Value, sub: Sub, opts: &WriteOptions) -> Result<Written, ApiError> {
        if scope.wildcard() {
            return Err(ApiError::method_not_allowed("writes are not allowed through the wildcard workspace; use /clusters/<workspace>"));
        }
        let current = self.entry(scope, name)?;
        let rv = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty()).map(String::from);
        let expected = match rv {
            Some(rv) => rv.parse::<Revision>().map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
            None if !scope.rt.strategy.allow_unconditional_update() => {
                return Err(ApiError::invalid(
                    &scope.rt.kind,
                    scope.obj(name),
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )],
                ))
            }
            None => current.rev,
        };
        if expected != current.rev {
            return Err(ApiError::conflict(scope.obj(name)));
        }
        self.write_update(scope, name, &current, obj, sub, opts, Vec::new(), None).await
    }

    /// The shared tail of update and patch: admission, system fields, storage.
    /// `applied_fields` are the managedFields a server-side apply computed (`Null` for
    /// none); other writes (`None`) have theirs tracked here.
    #[allow(clippy::too_many_arguments)]
    async fn write_update(
        &self,
        scope: &Scope,
        name: &str,
        current: &Entry,
        mut obj: Value,
        sub: Sub,
        opts: &WriteOptions,
        mut warnings: Vec<String>,
        applied_fields: Option<Value>,
    ) -> Result<Written, ApiError> {
        let old = &*current.value;
        self.fill_identity(scope, &mut obj, Some(name))?;
        let mut obj = if sub == Sub::Status {
            // A status write changes only status; everything else comes from storage
            // (copied field by field: the stored status would only be thrown away), in
            // the shape of the version written.
            let stored = to_external(scope, old);
            let mut merged: Map<String, Value> =
                stored.as_object().into_iter().flatten().filter(|(k, _)| *k != "status").map(|(k, v)| (k.clone(), v.clone())).collect();
            if let Some(status) = obj.as_object_mut().and_then(|o| o.remove("status")).filter(|s| !s.is_null()) {
                merged.insert("status".into(), status);
            }
            let mut merged = Value::Object(merged);
            scope.rt.strategy.prepare_for_status_update(&mut merged, &obj);
            merged
        } else {
            obj
        };
        obj = self.admit(scope, name, obj, Some(old), sub, opts, &mut warnings)?;
        {
            let old_meta = objmeta::meta(old);
            let m = objmeta::meta_mut(&mut obj);
            for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
                match old_meta.and_then(|o| o.get(f)) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
        }
        if sub == Sub::Main && scope.rt.status {
            // The main resource cannot change status when a status subresource exists.
            match old.get("status") {
                Some(s) => obj["status"] = s.clone(),
                None => {
                    obj.as_object_mut().map(|o| o.remove("status"));
                }
            }
        }
        if sub == Sub::Main {
            scope.rt.strategy.prepare_for_update(&mut obj, old);
            bump_generation(&scope.rt, old, &mut obj);
        }
        let _allocated = if sub == Sub::Main { self.allocate(scope, &mut obj, Some(old))? } else { None };
        let now = objmeta::now_rfc3339();
        match applied_fields {
            Some(fields) => obj = self.merge_apply_fields(obj, fields),
            // kube-apiserver binds below its field manager.
            None if sub == Sub::Binding => {}
            None => patch::apply::track_update(
                Some(old),
                &mut obj,
                &opts.field_manager,
                &scope.rt.api_version(),
                &now,
                scope.rt.patch_meta(),
                sub.name(),
            ),
        }
        WriteGuard::check(opts.guard.as_ref(), Some(old), Some(&obj))?;
        if opts.dry_run {
            return Ok(Written { object: Presented::Changed(present(scope, &scope.workspace, &obj)), created: false, warnings });
        }
        // A write that changes nothing is not stored: the resourceVersion stays and no
        // watch event goes out, as kube-apiserver's GuaranteedUpdate skips identical
        // bytes (storage/etcd3/store.go). Controllers that re-apply their desired
        // state on every event rely on this to settle instead of waking each other.
        if same_but_for_times(old, &obj) {
            return Ok(Written { object: present_shared(scope, &scope.workspace, current), created: false, warnings });
        }
        // An object that is being deleted goes away once its last finalizer is removed.
        let deleting = objmeta::meta_str(old, "deletionTimestamp").is_some();
        if deleting && objmeta::finalizers(&obj).is_empty() && !scope.rt.strategy.finalizing(&obj) {
            self.store
                .write(WriteOp::Delete { key: scope.key(name), expected: Some(current.rev) })
                .await
                .map_err(|e| ApiError::from_store(e, scope.obj(name)))?;
            return Ok(Written { object: Presented::Changed(present(scope, &scope.workspace, &obj)), created: false, warnings });
        }
        let stored = self
            .store
            .write(WriteOp::Update { key: scope.key(name), value: obj, expected: current.rev })
            .await
            .map_err(|e| ApiError::from_store(e, scope.obj(name)))?;
        Ok(Written { object: present_shared(scope, &scope.workspace, &stored), created: false, warnings })
    }

    /// The `pods/binding` subresource: assigns an unbound pod to a node. `spec.nodeName`,
    /// the Binding's annotations and `PodScheduled=True` are stored in one write, as
    /// kube-apiserver's binding storage does, and the answer is a Success `Status`.
    /// A pod that is bound already or being deleted is a 409 on `pods/binding`.
    pub async fn bind(&self, scope: &Scope, name: &str, binding: &Value, opts: &WriteOptions) -> Result<Value, ApiError> {
        if scope.wildcard() {
            return Err(ApiError::method_not_allowed("writes are not allowed through the wildcard workspace; use /clusters/<workspace>"));
        }
        if !scope.rt.strategy.has_binding() {
            return Err(ApiError::no_route(&format!("{}/binding", scope.rt.plural)));
        }
        let text = |p: &str| binding.pointer(p).and_then(Value::as_str).unwrap_or_default();
        if text("/metadata/name") != name {
            return Err(ApiError::bad_request("name in URL does not match name in Binding object"));
        }
        let (kind, node) = (text("/target/kind"), text("/target/name"));
        let mut causes = Vec::new();
        if !kind.is_empty() && kind != "Node" {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                "target.kind",
                format!("Unsupported value: \"{kind}\": supported values: \"Node\", \"<empty>\""),
            ));
        }
        if node.is_empty() {
            causes.push(Cause::new("FieldValueRequired", "target.name", "Required value"));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("Binding", scope.obj(name), causes));
        }
        let binding_ref = ObjRef { group: "", resource: "pods/binding", name };
        let refuse = |why: String| {
            ApiError::conflict_with(
                binding_ref.clone(),
                format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}"),
                Vec::new(),
            )
        };
        // A concurrent write between the read and the write is retried from the new
        // state, as GuaranteedUpdate does, within the patches' retry budget.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.entry(scope, name)?;
            let old = &*current.value;
            if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str).filter(|u| !u.is_empty()) {
                let actual = meta_str(old, "uid").unwrap_or_default();
                if actual != uid {
                    return Err(refuse(format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}")));
                }
            }
            if meta_str(old, "deletionTimestamp").is_some() {
                return Err(refuse(format!("pod {name} is being deleted, cannot be assigned to a host")));
            }
            if let Some(bound) = old.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                return Err(refuse(format!("pod {name} is already assigned to node \"{bound}\"")));
            }
            let mut obj = old.clone();
            obj["spec"]["nodeName"] = json!(node);
            if let Some(add) = binding.pointer("/metadata/annotations").and_then(Value::as_object).filter(|a| !a.is_empty()) {
                let m = objmeta::meta_mut(&mut obj);
                let annotations = m.entry("annotations").or_insert_with(|| json!({}));
                if let Some(a) = annotations.as_object_mut() {
                    a.extend(add.clone());
                }
            }
            set_pod_scheduled(&mut obj);
            match self.write_update(scope, name, &current, obj, Sub::Binding, opts, Vec::new(), None).await {
                Err(e) if e.reason == "Conflict" && attempt < PATCH_RETRIES => continue,
                other => return other.map(|_| json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})),
            }
        }
    }

    /// DELETE one object.
    pub async fn delete(&self, scope: &Scope, name: &str, opts: &DeleteOptions) -> Result<Value, ApiError> {
        if scope.wildcard() {
            return Err(ApiError::method_not_allowed("writes are not allowed through the wildcard workspace; use /clusters/<workspace>"));
        }
        // A write that lands between the read and the delete is no reason to refuse the
        // delete: it is tried again from the new state, as kube-apiserver's storage
        // retries its conditional delete. A precondition the new state fails still
        // answers 409, and so does an object written faster than it can be deleted.
        let stale = |e: &ApiError| !e.message.starts_with("Precondition failed");
        retry_conflicts(DELETE_RETRIES, stale, || self.delete_once(scope, name, opts)).await
    }

    /// One attempt of [`Api::delete`], from the stored state it reads.
    async fn delete_once(&self, scope: &Scope, name: &str, opts: &DeleteOptions) -> Result<Value, ApiError> {
        let current = self.entry(scope, name)?;
        let obj = &*current.value;
        if let Some(uid) = &opts.uid {
            let actual = meta_str(obj, "uid").unwrap_or_default();
            if uid != actual {
                return Err(ApiError::conflict_with(
                    scope.obj(name),
                    format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                    vec![],
                ));
            }
        }
        if let Some(rv) = &opts.resource_version {
            if *rv != current.rev.to_string() {
                return Err(ApiError::conflict_with(
                    scope.obj(name),
                    format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", current.rev),
                    vec![],
                ));
            }
        }
        WriteGuard::check(opts.guard.as_ref(), Some(obj), None)?;
        let mut finalizers = objmeta::finalizers(obj);
        // Foreground and Orphan are carried out by the garbage collector through these
        // finalizers, as in Kubernetes; Background needs none.
        let policy_finalizer = match opts.propagation.as_deref() {
            Some("Foreground") => Some("foregroundDeletion"),
            Some("Orphan") => Some("orphan"),
            None | Some("Background") => None,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Background\", \"Foreground\", \"Orphan\""
                )))
            }
        };
        if let Some(f) = policy_finalizer {
            if !finalizers.iter().any(|x| x == f) {
                finalizers.push(f.into());
            }
        }
        let strategy = &scope.rt.strategy;
        strategy.check_delete(name)?;
        if !finalizers.is_empty() || strategy.deletes_gracefully() {
            // Graceful: mark for deletion, and let the finalizers' owners finish it.
            if meta_str(obj, "deletionTimestamp").is_some() {
                return Ok(present(scope, &scope.workspace, obj));
            }
            let mut v = obj.clone();
            {
                let m = objmeta::meta_mut(&mut v);
                m.insert("deletionTimestamp".into(), json!(objmeta::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                m.insert("finalizers".into(), json!(finalizers));
                if finalizers.is_empty() {
                    m.remove("finalizers");
                }
            }
            strategy.prepare_for_delete(&mut v);
            if opts.dry_run {
                return Ok(present(scope, &scope.workspace, &v));
            }
            let stored = self
                .store
                .write(WriteOp::Update { key: scope.key(name), value: v, expected: current.rev })
                .await
                .map_err(|e| ApiError::from_store(e, scope.obj(name)))?;
            return Ok(present(scope, &scope.workspace, &stored.value));
        }
        if opts.dry_run {
            return Ok(present(scope, &scope.workspace, obj));
        }
        let deleted = self
            .store
            .write(WriteOp::Delete { key: scope.key(name), expected: Some(current.rev) })
            .await
            .map_err(|e| ApiError::from_store(e, scope.obj(name)))?;
        // Built-in kinds answer a finished delete with Status Success (kube-rs reads it
        // as "gone"); custom resources answer with the object, as apiextensions does.
        if strategy.delete_answers_with_object() {
            Ok(present(scope, &scope.workspace, &deleted.value))
        } else {
            Ok(crate::error::success_status(scope.obj(name), meta_str(&deleted.value, "uid").unwrap_or_default()))
        }
    }

    /// DELETE a collection: every object that matches the selectors.
    pub async fn delete_collection(&self, scope: &Scope, list: &ListOptions, opts: &DeleteOptions) -> Result<Value, ApiError> {
        let (items, _, _) = self.list_items(scope, &ListOptions { limit: None, continue_token: None, ..list.clone() })?;
        let mut deleted = Vec::new();
        for item in items {
            let name = meta_str(&item, "name").unwrap_or_default().to_string();
            let s = Scope { namespace: meta_str(&item, "namespace").unwrap_or_default().to_string(), ..scope.clone() };
            match self.delete(&s, &name, opts).await {
                Ok(v) => deleted.push(v),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(
            json!({"kind": scope.rt.list_kind(), "apiVersion": scope.rt.api_version(), "metadata": {"resourceVersion": self.store.revision().to_string()}, "items": deleted}),
        )
    }

    /// GET of the scale subresource.
    pub fn get_scale(&self, scope: &Scope, name: &str) -> Result<Value, ApiError> {
        let e = self.entry(scope, name)?;
        scale_of(scope, &e.value)
    }

    /// PUT or PATCH of the scale subresource: the new Scale's `spec.replicas` is
    /// written to the object, with the object's own resourceVersion as precondition.
    pub async fn write_scale(&self, scope: &Scope, name: &str, scale_body: ScaleWrite, opts: &WriteOptions) -> Result<Value, ApiError> {
        // A write that names no resourceVersion is tried again from the new state when
        // another write of the object lands first, as patches are; one that names one
        // is a precondition, and its conflict is the client's to see.
        let conditional = match &scale_body {
            ScaleWrite::Replace(v) => meta_str(v, "resourceVersion").is_some_and(|rv| !rv.is_empty()),
            ScaleWrite::Patch(PatchKind::Json, doc) => doc.to_string().contains("resourceVersion"),
            ScaleWrite::Patch(_, doc) => doc.pointer("/metadata/resourceVersion").is_some_and(|rv| !rv.is_null()),
        };
        retry_conflicts(PATCH_RETRIES, |_| !conditional, || self.write_scale_once(scope, name, &scale_body, opts)).await
    }

    async fn write_scale_once(&self, scope: &Scope, name: &str, scale_body: &ScaleWrite, opts: &WriteOptions) -> Result<Value, ApiError> {
        let paths = scope.rt.scale.clone().ok_or_else(|| ApiError::no_route("scale"))?;
        let current = self.entry(scope, name)?;
        let old_scale = scale_of(scope, &current.value)?;
        let new_scale = match scale_body {
            ScaleWrite::Replace(v) => v.clone(),
            ScaleWrite::Patch(PatchKind::Json, doc) => json_patch_apply(&old_scale, doc, "Scale", scope.obj(name))?,
            ScaleWrite::Patch(kind, doc) => {
                if !doc.is_object() {
                    return Err(ApiError::bad_request(format!("invalid {} patch: the patch must be a JSON object", kind.name())));
                }
                let mut v = old_scale.clone();
                json_patch::merge(&mut v, doc);
                v
            }
        };
        if let Some(rv) = meta_str(&new_scale, "resourceVersion").filter(|rv| !rv.is_empty()) {
            if rv != current.rev.to_string() {
                return Err(ApiError::conflict(scope.obj(name)));
            }
        }
        // spec.replicas is an int32: anything else fails to decode, as in
        // kube-apiserver (400), and is never read as 0. Absent is 0, as Go decodes it.
        let replicas = match new_scale.pointer("/spec/replicas") {
            None | Some(Value::Null) => 0,
            Some(v) => v.as_i64().and_then(|r| i32::try_from(r).ok()).map(i64::from).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Scale in version \"{}\" cannot be handled as a Scale: spec.replicas: {v} is not an int32",
                    scope.rt.version
                ))
            })?,
        };
        if replicas < 0 {
            return Err(ApiError::invalid(
                "Scale",
                ObjRef { group: "autoscaling", resource: "scale", name },
                vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.replicas",
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                )],
            ));
        }
        let mut obj = to_external(scope, &current.value).into_owned();
        set_json_path(&mut obj, &paths.spec_replicas, json!(replicas));
        let written = self.write_update(scope, name, &current, to_internal(scope, obj), Sub::Main, opts, Vec::new(), None).await?;
        scale_of(scope, &to_internal(scope, written.object.into_value()))
    }

    fn fill_identity(&self, scope: &Scope, obj: &mut Value, url_name: Option<&str>) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON or YAML object"));
        }
        let api_version = scope.rt.api_version();
        match obj.get("apiVersion").and_then(Value::as_str) {
            Some(v) if v != api_version => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({v}) does not match the expected API version ({api_version})"
                )))
            }
            _ => obj["apiVersion"] = json!(api_version),
        }
        match obj.get("kind").and_then(Value::as_str) {
            Some(k) if k != scope.rt.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    scope.rt.kind
                )))
            }
            _ => obj["kind"] = json!(scope.rt.kind),
        }
        let m = objmeta::meta_mut(obj);
        if scope.rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != scope.namespace => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => {
                    m.insert("namespace".into(), json!(scope.namespace));
                }
            }
        } else {
            m.remove("namespace");
        }
        if let Some(url) = url_name {
            match m.get("name").and_then(Value::as_str) {
                Some(n) if n != url => {
                    return Err(ApiError::bad_request(format!("the name of the object ({n}) does not match the name on the URL ({url})")))
                }
                _ => {
                    m.insert("name".into(), json!(url));
                }
            }
        }
        Ok(())
    }

    fn check_namespace_writable(&self, scope: &Scope, name: &str) -> Result<(), ApiError> {
        if !scope.rt.namespaced {
            return Ok(());
        }
        if scope.namespace.is_empty() {
            return Err(ApiError::bad_request("a namespace is required to create a namespaced object"));
        }
        let ns_rt = self
            .registry
            .lookup(&scope.workspace, "", "v1", "namespaces")
            .ok_or_else(|| ApiError::internal("namespaces are not registered"))?;
        let key = ns_rt.key(&scope.workspace, "", &scope.namespace);
        // Every create of a namespaced object asks; the metadata is read from the
        // stored text, without building the namespace's tree.
        match self.store.get_doc(&key).map(|doc| doc.meta()) {
            None => Err(ApiError::not_found(ObjRef { group: "", resource: "namespaces", name: &scope.namespace })),
            Some(ns) if ns.deletion_timestamp.is_some() => Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                scope.rt.plural, name, scope.namespace
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Decoding, defaulting and validation: what the apiserver's decoder, defaulters
    /// and strategy Validate do, for built-ins and custom resources alike.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        scope: &Scope,
        name: &str,
        obj: Value,
        old: Option<&Value>,
        sub: Sub,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Value, ApiError> {
        if sub == Sub::Main {
            refuse_oversized(scope, name, &obj)?;
        }
        let strategy = &scope.rt.strategy;
        let decoded = strategy.decode(obj, old, sub == Sub::Status).map_err(ApiError::bad_request)?;
        let (mut obj, unknown) = (decoded.value, decoded.unknown);
        if !unknown.is_empty() {
            match opts.validation {
                FieldValidation::Strict => {
                    let list: Vec<String> = unknown.iter().map(|u| format!("unknown field \"{u}\"")).collect();
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        scope.rt.kind,
                        scope.rt.version,
                        scope.rt.kind,
                        list.join(", ")
                    )));
                }
                FieldValidation::Warn => warnings.extend(unknown.iter().map(|u| format!("unknown field \"{u}\""))),
                FieldValidation::Ignore => {}
            }
        }
        // ObjectMeta's lists and maps are `omitempty` in Go, so an emptied one disappears.
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in ["labels", "annotations", "finalizers", "ownerReferences", "managedFields"] {
                let empty = match m.get(f) {
                    Some(Value::Array(a)) => a.is_empty(),
                    Some(Value::Object(o)) => o.is_empty(),
                    Some(Value::Null) => true,
                    _ => false,
                };
                if empty {
                    m.remove(f);
                }
            }
        }
        let mut causes = objmeta::validate_meta(&obj, strategy.name_rule());
        if meta_str(&obj, "name") != Some(name) && !name.is_empty() {
            causes.push(Cause::new("FieldValueInvalid", "metadata.name", "Invalid value: the name may not change"));
        }
        strategy.default(&mut obj);
        causes.extend(strategy.validate(&obj, old));
        if !causes.is_empty() {
            return Err(ApiError::invalid(
                &scope.rt.kind,
                scope.obj(if name.is_empty() { meta_str(&obj, "name").unwrap_or_default() } else { name }),
                causes,
            ));
        }
        Ok(obj)
    }
}

/// Refuses `doc` (an object, or an apply configuration for one) when it alone breaks a
/// size limit: its annotations or its data over Kubernetes' limits (422, as validation
/// would), or its labels, annotations and data over what the store holds (413). These
/// fields survive decoding and every merge, so nothing that comes after could make the
/// write succeed, and checking them costs one pass over the maps. It runs before the
/// costly steps (server-side apply's field sets, the typed decoding), so a body of
/// 100,000 keys is refused in the time it takes to read it. The 422 names these causes
/// only; a body within the limits gets every cause from validation.
fn refuse_oversized(scope: &Scope, name: &str, doc: &Value) -> Result<(), ApiError> {
    let strategy = &scope.rt.strategy;
    let causes: Vec<Cause> = objmeta::annotation_size_cause(doc).into_iter().chain(strategy.data_size_cause(doc)).collect();
    let name = if name.is_empty() { meta_str(doc, "name").unwrap_or_default() } else { name };
    if !causes.is_empty() {
        return Err(ApiError::invalid(&scope.rt.kind, scope.obj(name), causes));
    }
    let floor = objmeta::metadata_bytes_floor(doc) + strategy.data_bytes_floor(doc);
    if floor > crate::store::MAX_OBJECT_BYTES {
        return Err(ApiError::too_large_because(format!(
            "Request entity too large: {} \"{name}\" would be over {floor} bytes when stored; an object may be at most {} bytes",
            scope.rt.plural,
            crate::store::MAX_OBJECT_BYTES
        )));
    }
    Ok(())
}

/// Runs `attempt` again, up to `budget` more times, while it fails with a 409 Conflict
/// that `stale` says came from a write landing between its read and its write (and not
/// from the client's own precondition). Each try reads the stored state afresh.
async fn retry_conflicts<T, F, Fut>(budget: usize, stale: impl Fn(&ApiError) -> bool, mut attempt: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if e.reason == "Conflict" && tries < budget && stale(&e) => {
                tries += 1;
                tokio::task::yield_now().await;
            }
            other => return other,
        }
    }
}

/// The body of a scale write.
pub enum ScaleWrite {
    /// PUT with a full Scale.
    Replace(Value),
    /// PATCH of the Scale, decoded ([`decode_patch`]).
    Patch(PatchKind, Value),
}

fn bump_generation(rt: &ResourceType, old: &Value, new: &mut Value) {
    if rt.strategy.generation_changed(old, new) == Some(true) {
        let g = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
        objmeta::meta_mut(new).insert("generation".into(), json!(g + 1));
    }
}

/// Whether `new` is `old` apart from the resourceVersion and the times of managedFields
/// entries, which the field manager stamps on every write. (kube-apiserver does not even
/// restamp them when a manager's fields are unchanged, so such a write is a no-op there.)
fn same_but_for_times(old: &Value, new: &Value) -> bool {
    /// Whether two maps hold the same entries, but for the keys `skip` ignores and
    /// for values that `same` finds equal.
    fn same_map(
        a: &Map<String, Value>,
        b: &Map<String, Value>,
        skip: &dyn Fn(&str) -> bool,
        same: &dyn Fn(&str, &Value, &Value) -> bool,
    ) -> bool {
        let count = |m: &Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
        count(a) == count(b) && a.iter().filter(|(k, _)| !skip(k)).all(|(k, v)| b.get(k).is_some_and(|w| same(k, v, w)))
    }
    let no_time = |k: &str| k == "time";
    let entries_same = |a: &Value, b: &Value| match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (x.as_object(), y.as_object()) {
                    (Some(x), Some(y)) => same_map(x, y, &no_time, &|_, v, w| v == w),
                    _ => x == y,
                })
        }
        _ => a == b,
    };
    let meta_same = |a: Option<&Value>, b: Option<&Value>| match (a.and_then(Value::as_object), b.and_then(Value::as_object)) {
        (Some(a), Some(b)) => {
            same_map(a, b, &|k| k == "resourceVersion", &|k, v, w| if k == "managedFields" { entries_same(v, w) } else { v == w })
        }
        _ => a == b,
    };
    match (old.as_object(), new.as_object()) {
        // Everything outside metadata first: most writes change something there.
        (Some(o), Some(n)) => same_map(o, n, &|k| k == "metadata", &|_, v, w| v == w) && meta_same(o.get("metadata"), n.get("metadata")),
        _ => false,
    }
}

fn matches(scope: &Scope, obj: &Value, opts: &ListOptions) -> bool {
    if let Some(ls) = &opts.labels {
        let empty = Map::new();
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
        if !ls.matches(labels) {
            return false;
        }
    }
    if let Some(fs) = &opts.fields {
        if !fs.matches(|f| scope.rt.strategy.field(obj, f)) {
            return false;
        }
    }
    true
}

/// Sets a pod's `PodScheduled` condition to True, as a binding does: a new transition
/// time only when the status changes, and no reason or message.
fn set_pod_scheduled(pod: &mut Value) {
    let status = pod.as_object_mut().map(|o| o.entry("status").or_insert_with(|| json!({})));
    let Some(status) = status.and_then(Value::as_object_mut) else { return };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    let Some(list) = conditions.as_array_mut() else { return };
    let existing = list.iter().position(|c| c["type"] == "PodScheduled");
    let since = match existing.map(|i| &list[i]) {
        Some(c) if c["status"] == "True" => c["lastTransitionTime"].clone(),
        _ => json!(objmeta::now_rfc3339()),
    };
    let condition = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": since});
    match existing {
        Some(i) => list[i] = condition,
        None => list.push(condition),
    }
}

/// Whether a stored object passes a scope's selectors (used by watch).
pub fn selected(strategy: &dyn kinds::Strategy, obj: &Value, labels: Option<&LabelSelector>, fields: Option<&FieldSelector>) -> bool {
    let empty = Map::new();
    let l = obj.pointer("/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
    labels.is_none_or(|s| s.matches(l)) && fields.is_none_or(|f| f.matches(|p| strategy.field(obj, p)))
}

fn scale_of(scope: &Scope, obj: &Value) -> Result<Value, ApiError> {
    let paths = scope.rt.scale.as_ref().ok_or_else(|| ApiError::no_route("scale"))?;
    let get = |p: &str| crate::jsonpath::JsonPath::parse(p).ok().and_then(|jp| jp.eval(obj).first().map(|v| (*v).clone()));
    let spec = get(&paths.spec_replicas).unwrap_or(json!(0));
    let status = get(&paths.status_replicas).unwrap_or(json!(0));
    let selector = match &paths.label_selector {
        Some(p) => get(p).unwrap_or(json!("")),
        // Deployments report their selector in label-query form.
        None => json!(obj
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(","))
            .unwrap_or_default()),
    };
    let m = objmeta::meta(obj).cloned().unwrap_or_default();
    let pick = |f: &str| m.get(f).cloned().unwrap_or(Value::Null);
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": pick("name"), "namespace": pick("namespace"), "uid": pick("uid"), "resourceVersion": pick("resourceVersion"), "creationTimestamp": pick("creationTimestamp")},
        "spec": {"replicas": spec},
        "status": {"replicas": status, "selector": selector},
    }))
}

fn set_json_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        if i == segs.len() - 1 {
            cur[*seg] = value;
            return;
        }
        if !cur.get(*seg).is_some_and(Value::is_object) {
            cur[*seg] = json!({});
        }
        cur = &mut cur[*seg];
    }
}

fn encode_continue(t: &ContinueToken) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(t).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<ContinueToken, ApiError> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| ApiError::bad_request("continue key is not valid: not base64"))?;
    serde_json::from_slice(&bytes).map_err(|_| ApiError::bad_request("continue key is not valid"))
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::from_store(e, ObjRef { group: "", resource: "", name: "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_version_is_set_in_the_text_and_nothing_else_changes() {
        let raw = r#"{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7","labels":{"x":"1"}},"data":{"v":"1"}}"#;
        assert_eq!(
            with_resource_version(raw, "12").as_deref(),
            Some(r#"{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"12","labels":{"x":"1"}},"data":{"v":"1"}}"#)
        );
        assert_eq!(
            with_resource_version(r#"{"metadata":{"name":"a"}}"#, "3").as_deref(),
            Some(r#"{"metadata":{"name":"a","resourceVersion":"3"}}"#)
        );
        assert_eq!(with_resource_version(r#"{"metadata":{}}"#, "3").as_deref(), Some(r#"{"metadata":{"resourceVersion":"3"}}"#));
        assert_eq!(with_resource_version(r#"{"kind":"x"}"#, "3"), None);
        assert_eq!(with_resource_version("[1]", "3"), None);
    }

    #[test]
    fn a_write_is_the_same_when_only_its_resource_version_and_managed_times_differ() {
        let obj = |rv: &str, time: &str, replicas: i64, labels: Value| {
            json!({
                "metadata": {"name": "a", "resourceVersion": rv, "labels": labels,
                    "managedFields": [{"manager": "m", "time": time, "fieldsV1": {"f:spec": {}}}]},
                "spec": {"replicas": replicas},
            })
        };
        let old = obj("1", "2026-01-01T00:00:00Z", 1, json!({"x": "1"}));
        assert!(same_but_for_times(&old, &obj("7", "2026-01-02T00:00:00Z", 1, json!({"x": "1"}))));
        assert!(!same_but_for_times(&old, &obj("1", "2026-01-01T00:00:00Z", 2, json!({"x": "1"}))), "spec differs");
        assert!(!same_but_for_times(&old, &obj("1", "2026-01-01T00:00:00Z", 1, json!({"x": "2"}))), "labels differ");
        let mut other_manager = old.clone();
        other_manager["metadata"]["managedFields"][0]["manager"] = json!("n");
        assert!(!same_but_for_times(&old, &other_manager), "a managedFields entry differs beyond its time");
        let mut extra = old.clone();
        extra["status"] = json!({});
        assert!(!same_but_for_times(&old, &extra) && !same_but_for_times(&extra, &old), "a field only on one side");
        let mut no_meta = old.clone();
        no_meta.as_object_mut().unwrap().remove("metadata");
        assert!(!same_but_for_times(&old, &no_meta) && same_but_for_times(&no_meta, &no_meta.clone()));
    }

    #[test]
    fn the_workspace_annotation_is_spliced_into_the_stored_text() {
        let with = |v: Value| {
            with_metadata(&serde_json::to_string(&v).unwrap(), Some("team-a"), false).map(|t| serde_json::from_str::<Value>(&t).unwrap())
        };
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "annotations": {"x": "y\"z"}},
                         "spec": {"template": {"metadata": {"annotations": {"inner": "untouched"}}}}});
        let mut expected = pod.clone();
        expected["metadata"]["annotations"][CLUSTER_ANNOTATION] = json!("team-a");
        assert_eq!(with(pod), Some(expected));
        let bare = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        let mut expected = bare.clone();
        expected["metadata"]["annotations"] = json!({CLUSTER_ANNOTATION: "team-a"});
        assert_eq!(with(bare), Some(expected));
        let replaced = json!({"metadata": {"annotations": {CLUSTER_ANNOTATION: "elsewhere"}}});
        assert_eq!(with(replaced), Some(json!({"metadata": {"annotations": {CLUSTER_ANNOTATION: "team-a"}}})));
        assert_eq!(with(json!({"kind": "NoMetadata"})), None);
        assert_eq!(with_metadata("[1]", Some("team-a"), false), None);
    }

    #[test]
    fn managed_fields_are_left_out_on_request_and_nothing_else_changes() {
        let obj =
            json!({"kind": "ConfigMap", "metadata": {"managedFields": [{"manager": "m"}], "name": "c", "labels": {"a": "b"}}, "data": {}});
        let slim = |ws: Option<&str>| serde_json::from_str::<Value>(&with_metadata(&obj.to_string(), ws, true).unwrap()).unwrap();
        assert_eq!(slim(None), json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "b"}}, "data": {}}));
        assert_eq!(
            slim(Some("w")),
            json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "b"}, "annotations": {CLUSTER_ANNOTATION: "w"}}, "data": {}})
        );
        let only = json!({"metadata": {"managedFields": []}});
        assert_eq!(with_metadata(&only.to_string(), None, true).as_deref(), Some(r#"{"metadata":{}}"#));
        assert_eq!(
            with_metadata(&obj.to_string(), None, false).as_deref(),
            Some(obj.to_string().as_str()),
            "nothing asked, nothing changed"
        );
    }
}
