//! Bounded fuzzing of everything that reads a client's bytes: the body decoders, the
//! four patch engines and the selector and JSONPath parsers.
//!
//! Each target is a proptest property with a fixed number of cases, so the file runs in
//! CI (`cargo nextest run --workspace`) in a bounded time. A target fails on a panic,
//! and on any single call that takes more than [`LIMIT`] of wall time: each call is
//! timed alone, and one over the limit is timed twice more so that a busy CI machine
//! does not fail it by chance (the fastest of the three must pass). The generators mix
//! arbitrary bytes and strings with structure-aware inputs (JSON trees nested to the
//! decoders' limit, Kubernetes-like objects with real merge keys, patches made of random
//! operations and directives), and keep every input under [`MAX_INPUT`], well within
//! the 3 MiB body limit but large enough that a quadratic algorithm shows. Server-side
//! apply, linear but heavy in the dev profile, gets smaller lists ([`APPLY_WIDE_BYTES`]).
//!
//! The seed is fixed, so a run is reproducible; `PROPTEST_RNG_SEED=<n>` (or `random`)
//! explores other inputs, and `PROPTEST_CASES=<n>` runs more cases per target. A bug a
//! target found is kept below as a plain `#[test]`, with the minimized input or, where
//! that one was only just over the limit, the same input made larger.

use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use controlplane::error::ObjRef;
use controlplane::jsonpath::JsonPath;
use controlplane::patch::meta::PatchMeta;
use controlplane::registry::{Profile, Registry, ResourceType};
use controlplane::selector::{FieldSelector, LabelSelector};
use controlplane::{decode, patch, protobuf};
use proptest::prelude::*;
use proptest::test_runner::{RngSeed, TestCaseError};
use serde_json::{json, Map, Value};

/// The most one call may take.
const LIMIT: Duration = Duration::from_millis(100);

/// The largest input a generator produces.
const MAX_INPUT: usize = 64 * 1024;

/// The most JSON a wide object (one long list) has: two of them, the object and its
/// patch, fit in [`MAX_INPUT`].
const WIDE_BYTES: usize = 30 * 1024;

/// The same for server-side apply, which walks each object a dozen times (field sets,
/// merge, changes, removals, pruning, managedFields): about 25 us per list element in
/// the dev profile, so 48 KiB of list is 40-110 ms there, linear but within reach of
/// [`LIMIT`] on a busy machine. At 20 KiB the linear cost stays well under it while a
/// quadratic step (a scan per element) still takes seconds.
const APPLY_WIDE_BYTES: usize = 20 * 1024;

/// The decoders' nesting limit (serde_json's, applied to YAML by `decode`).
const MAX_DEPTH: usize = decode::MAX_DEPTH;

// ------------------------------------------------------------------------------------------
// Running and timing

/// `cases` cases unless `PROPTEST_CASES` says otherwise; a fixed seed unless
/// `PROPTEST_RNG_SEED` gives one (or `random`); no regression files written.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(cases);
    let rng_seed = match std::env::var("PROPTEST_RNG_SEED").ok().as_deref() {
        Some("random") => RngSeed::Random,
        Some(s) => s.parse().map(RngSeed::Fixed).unwrap_or(RngSeed::Fixed(0x666c_6f74)),
        None => RngSeed::Fixed(0x666c_6f74),
    };
    ProptestConfig {
        cases,
        rng_seed,
        failure_persistence: None,
        // A failing case is shrunk for at most this long (milliseconds).
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    }
}

/// Calls `f` once and returns what it returned, failing the case when the call took
/// longer than [`LIMIT`] three times in a row. `input` describes the input for the
/// failure message (proptest prints the minimized input as well).
fn timed<T>(what: &str, input: &dyn Debug, mut f: impl FnMut() -> T) -> Result<T, TestCaseError> {
    let start = Instant::now();
    let out = f();
    let mut fastest = start.elapsed();
    for _ in 0..2 {
        if fastest <= LIMIT {
            break;
        }
        let start = Instant::now();
        drop(f());
        fastest = fastest.min(start.elapsed());
    }
    if fastest > LIMIT {
        let mut shown = format!("{input:?}");
        if shown.len() > 4096 {
            let cut = (0..=4096).rev().find(|&i| shown.is_char_boundary(i)).unwrap_or(0);
            shown = format!("{}... ({} bytes of Debug output)", &shown[..cut], shown.len());
        }
        return Err(TestCaseError::fail(format!("{what} took {fastest:?} (limit {LIMIT:?}) on {shown}")));
    }
    Ok(out)
}

/// The size of a value as compact JSON.
fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

// ------------------------------------------------------------------------------------------
// Patch metadata from the registry

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry::new(Profile::ControlPlane))
}

/// The Deployment type as the server serves it: built-in merge keys from its struct tags.
fn deployments() -> std::sync::Arc<ResourceType> {
    registry().lookup("fuzz", "apps", "v1", "deployments").expect("apps/v1 deployments is served")
}

/// WorkloadPlacement, a type whose merge keys come from its schema
/// (`x-kubernetes-list-map-keys`), bound into every workspace but root.
fn workload_placements() -> std::sync::Arc<ResourceType> {
    registry()
        .types("fuzz")
        .into_iter()
        .find(|t| t.kind == "WorkloadPlacement")
        .expect("WorkloadPlacement is served in every workspace but root")
}

/// Which type a patch target merges with.
#[derive(Debug, Clone, Copy)]
enum Meta {
    Deployment,
    WorkloadPlacement,
}

impl Meta {
    fn resource(self) -> std::sync::Arc<ResourceType> {
        match self {
            Meta::Deployment => deployments(),
            Meta::WorkloadPlacement => workload_placements(),
        }
    }
}

fn meta() -> impl Strategy<Value = Meta> {
    prop_oneof![3 => Just(Meta::Deployment), 1 => Just(Meta::WorkloadPlacement)]
}

// ------------------------------------------------------------------------------------------
// JSON trees

/// Keys a patch engine treats specially, field names with merge keys, and odd ones.
const KEYS: &[&str] = &[
    "a",
    "b",
    "",
    "0",
    "-",
    "~1",
    "a/b",
    "name",
    "image",
    "value",
    "env",
    "ports",
    "containerPort",
    "protocol",
    "volumeMounts",
    "mountPath",
    "volumes",
    "containers",
    "initContainers",
    "template",
    "spec",
    "metadata",
    "labels",
    "finalizers",
    "ownerReferences",
    "uid",
    "managedFields",
    "status",
    "conditions",
    "type",
    "strategy",
    "clusters",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/env",
    "$setElementOrder/finalizers",
    "$deleteFromPrimitiveList/finalizers",
    "$setElementOrder",
    "$deleteFromPrimitiveList",
    "replace",
    "delete",
    "merge",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(KEYS).prop_map(String::from),
        1 => "[a-z$/.~0-9-]{0,6}",
        1 => "\\PC{0,6}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-2i64..4).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        key().prop_map(Value::String),
    ]
}

/// A random JSON tree: up to 8 levels, a few hundred nodes.
fn tree() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(8, 256, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// `leaf` wrapped in `depth` arrays and objects.
fn nest(leaf: Value, depth: usize, shape: &[bool], key: &str) -> Value {
    let mut v = leaf;
    for i in 0..depth {
        v = if shape.get(i % shape.len().max(1)).copied().unwrap_or(false) {
            Value::Array(vec![v])
        } else {
            let mut m = Map::new();
            m.insert(key.to_owned(), v);
            Value::Object(m)
        };
    }
    v
}

/// A tree nested up to the decoders' depth limit (what a body can reach the engines with).
fn deep_tree() -> impl Strategy<Value = Value> {
    (tree(), 0..=MAX_DEPTH - 9, prop::collection::vec(any::<bool>(), 1..4), prop::sample::select(KEYS))
        .prop_map(|(leaf, depth, shape, key)| nest(leaf, depth, &shape, key))
}

fn any_json() -> impl Strategy<Value = Value> {
    prop_oneof![4 => tree(), 1 => deep_tree(), 3 => deployment(), 1 => workload_placement(), 2 => wide_object(WIDE_BYTES)]
}

// ------------------------------------------------------------------------------------------
// Kubernetes-like objects

/// Mostly `s`, sometimes a random tree in its place (a wrong type, a missing key...).
fn or_garbage<S: Strategy<Value = Value> + 'static>(s: S) -> BoxedStrategy<Value> {
    prop_oneof![12 => s, 1 => tree()].boxed()
}

/// An object from optional fields.
fn obj(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(fields.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v))).collect())
}

fn short_name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(&["a", "b", "c", "web", "sidecar", "init", "data"][..]).prop_map(String::from),
        1 => "[a-z0-9-]{0,12}",
        1 => Just(String::new()),
    ]
}

fn name_value() -> impl Strategy<Value = Value> {
    short_name().prop_map(Value::String)
}

fn string_map() -> impl Strategy<Value = Value> {
    prop::collection::vec((short_name(), short_name()), 0..5)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k, Value::String(v))).collect()))
}

fn env_var() -> BoxedStrategy<Value> {
    or_garbage(
        (prop::option::weighted(0.9, name_value()), prop::option::of(name_value()))
            .prop_map(|(name, value)| obj(vec![("name", name), ("value", value)])),
    )
}

fn port() -> BoxedStrategy<Value> {
    or_garbage(
        (
            prop::option::weighted(0.9, prop::sample::select(&[80i64, 443, 8080, 0][..]).prop_map(Value::from)),
            prop::option::of(prop::sample::select(&["TCP", "UDP"][..]).prop_map(Value::from)),
            prop::option::of(name_value()),
        )
            .prop_map(|(p, proto, name)| obj(vec![("containerPort", p), ("protocol", proto), ("name", name)])),
    )
}

fn mount() -> BoxedStrategy<Value> {
    or_garbage(
        (
            prop::option::weighted(0.9, prop::sample::select(&["/a", "/b", "/data"][..]).prop_map(Value::from)),
            prop::option::of(name_value()),
        )
            .prop_map(|(path, name)| obj(vec![("mountPath", path), ("name", name)])),
    )
}

fn container() -> BoxedStrategy<Value> {
    or_garbage(
        (
            prop::option::weighted(0.9, name_value()),
            prop::option::of(prop::sample::select(&["nginx:1", "nginx:2", "busybox"][..]).prop_map(Value::from)),
            prop::option::of(prop::collection::vec(env_var(), 0..5).prop_map(Value::Array)),
            prop::option::of(prop::collection::vec(port(), 0..4).prop_map(Value::Array)),
            prop::option::of(prop::collection::vec(mount(), 0..3).prop_map(Value::Array)),
            prop::option::of(prop::collection::vec(name_value(), 0..3).prop_map(Value::Array)),
        )
            .prop_map(|(name, image, env, ports, mounts, args)| {
                obj(vec![("name", name), ("image", image), ("env", env), ("ports", ports), ("volumeMounts", mounts), ("args", args)])
            }),
    )
}

fn named_list() -> BoxedStrategy<Value> {
    prop::collection::vec(or_garbage(name_value().prop_map(|n| json!({"name": n, "configMap": {"name": n}}))), 0..4)
        .prop_map(Value::Array)
        .boxed()
}

fn pod_spec() -> BoxedStrategy<Value> {
    or_garbage(
        (
            prop::option::weighted(0.9, prop::collection::vec(container(), 0..5).prop_map(Value::Array)),
            prop::option::of(prop::collection::vec(container(), 0..3).prop_map(Value::Array)),
            prop::option::of(named_list()),
            prop::option::of(named_list()),
            prop::option::of(
                prop::collection::vec(
                    (name_value(), prop::sample::select(&["DoNotSchedule", "ScheduleAnyway"][..]))
                        .prop_map(|(k, w)| json!({"topologyKey": k, "whenUnsatisfiable": w, "maxSkew": 1})),
                    0..3,
                )
                .prop_map(Value::Array),
            ),
            prop::option::of(prop::collection::vec(
                (prop::sample::select(&["10.0.0.1", "10.0.0.2"][..]), name_value()).prop_map(|(ip, h)| json!({"ip": ip, "hostnames": [h]})),
                0..3,
            ))
            .prop_map(|v| v.map(Value::Array)),
        )
            .prop_map(|(containers, init, volumes, secrets, spread, aliases)| {
                obj(vec![
                    ("containers", containers),
                    ("initContainers", init),
                    ("volumes", volumes),
                    ("imagePullSecrets", secrets),
                    ("topologySpreadConstraints", spread),
                    ("hostAliases", aliases),
                ])
            }),
    )
}

fn metadata() -> BoxedStrategy<Value> {
    or_garbage(
        (
            prop::option::weighted(0.9, name_value()),
            prop::option::of(string_map()),
            prop::option::of(string_map()),
            prop::option::of(prop::collection::vec(name_value(), 0..4).prop_map(Value::Array)),
            prop::option::of(
                prop::collection::vec(or_garbage(name_value().prop_map(|u| json!({"uid": u, "kind": "ReplicaSet", "name": u}))), 0..3)
                    .prop_map(Value::Array),
            ),
            prop::option::weighted(0.1, tree()),
        )
            .prop_map(|(name, labels, annotations, finalizers, owners, managed)| {
                obj(vec![
                    ("name", name),
                    ("labels", labels),
                    ("annotations", annotations),
                    ("finalizers", finalizers),
                    ("ownerReferences", owners),
                    ("managedFields", managed),
                ])
            }),
    )
}

fn conditions() -> BoxedStrategy<Value> {
    prop::collection::vec(
        or_garbage(
            (prop::sample::select(&["Available", "Progressing", "Ready"][..]), prop::sample::select(&["True", "False"][..]))
                .prop_map(|(t, s)| json!({"type": t, "status": s})),
        ),
        0..4,
    )
    .prop_map(Value::Array)
    .boxed()
}

/// An apps/v1 Deployment, partial or whole, now and then with a wrong type somewhere.
fn deployment() -> BoxedStrategy<Value> {
    (
        metadata(),
        prop::option::of((0i64..5).prop_map(Value::from)),
        prop::option::of(string_map().prop_map(|m| json!({ "matchLabels": m }))),
        prop::option::of(or_garbage(
            prop::sample::select(&["Recreate", "RollingUpdate"][..]).prop_map(|t| json!({"type": t, "rollingUpdate": {"maxSurge": 1}})),
        )),
        prop::option::weighted(
            0.9,
            (prop::option::of(string_map()), pod_spec()).prop_map(|(l, s)| json!({"metadata": {"labels": l}, "spec": s})),
        ),
        prop::option::of(conditions().prop_map(|c| json!({ "conditions": c, "replicas": 1 }))),
        prop::option::weighted(0.1, (key(), tree())),
    )
        .prop_map(|(metadata, replicas, selector, strategy, template, status, extra)| {
            let spec = obj(vec![("replicas", replicas), ("selector", selector), ("strategy", strategy), ("template", template)]);
            let mut d = obj(vec![
                ("apiVersion", Some(json!("apps/v1"))),
                ("kind", Some(json!("Deployment"))),
                ("metadata", Some(metadata)),
                ("spec", Some(spec)),
                ("status", status),
            ]);
            if let (Some((k, v)), Some(m)) = (extra, d.as_object_mut()) {
                m.insert(k, v);
            }
            d
        })
        .boxed()
}

/// A WorkloadPlacement, whose keyed lists come from its schema.
fn workload_placement() -> BoxedStrategy<Value> {
    (
        metadata(),
        prop::collection::vec(
            or_garbage((name_value(), 0i64..4).prop_map(|(n, r)| json!({"name": n, "replicas": r, "syncTarget": n}))),
            0..5,
        ),
        conditions(),
        prop::collection::vec(or_garbage(name_value().prop_map(|n| json!({"name": n, "phase": "Synced"}))), 0..4),
    )
        .prop_map(|(metadata, clusters, conditions, synced)| {
            json!({
                "apiVersion": "workload.flotilla.io/v1alpha1",
                "kind": "WorkloadPlacement",
                "metadata": metadata,
                "spec": {"workload": {"kind": "Deployment", "name": "web"}, "clusters": clusters},
                "status": {"conditions": conditions, "clusters": synced},
            })
        })
        .boxed()
}

/// The lists (and one map) a wide object makes long.
const WIDE: &[&str] = &[
    "containers",
    "env",
    "ports",
    "volumeMounts",
    "volumes",
    "finalizers",
    "ownerReferences",
    "conditions",
    "args",
    "labels",
    "managedFields",
    "clusters",
];

/// One element of a wide list: the `id`th of its kind.
fn wide_element(list: &str, id: usize, directive: Option<&str>) -> Value {
    let mut element = match list {
        "containers" => json!({"name": format!("c{id}"), "image": "nginx"}),
        "env" => json!({"name": format!("E{id}"), "value": "v"}),
        "ports" => json!({"containerPort": id, "protocol": "TCP"}),
        "volumeMounts" => json!({"mountPath": format!("/m{id}"), "name": "v"}),
        "volumes" => json!({"name": format!("v{id}"), "emptyDir": {}}),
        "ownerReferences" => json!({"uid": format!("u{id}"), "kind": "ReplicaSet", "name": "r"}),
        "conditions" => json!({"type": format!("T{id}"), "status": "True"}),
        "clusters" => json!({"name": format!("k{id}"), "replicas": 1}),
        "managedFields" => json!({
            "manager": format!("m{id}"),
            "operation": (["Update", "Apply"][id % 2]),
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {format!("f:l{id}"): {}}}},
        }),
        _ => json!(format!("s{id}")),
    };
    if let (Some(d), Value::Object(m)) = (directive, &mut element) {
        m.insert("$patch".into(), json!(d));
    }
    element
}

/// A Deployment (or WorkloadPlacement, for `clusters`) with one list of up to
/// thousands of elements, about `max_bytes` of JSON at most, ids taken modulo
/// `distinct` (so some repeat), in order or reversed, each element maybe carrying a
/// `$patch` directive: quadratic merging shows.
fn wide_object(max_bytes: usize) -> BoxedStrategy<Value> {
    (
        prop::sample::select(WIDE),
        0usize..=8192,
        prop_oneof![Just(usize::MAX), 1usize..2000],
        any::<bool>(),
        prop::option::weighted(0.1, prop::sample::select(&["delete", "replace", "merge"][..])),
    )
        .prop_map(move |(list, n, distinct, reverse, directive)| {
            let n = n * (max_bytes / (json_len(&wide_element(list, 1000, directive)) + 1)) / 8192;
            let mut items: Vec<Value> = (0..n).map(|i| wide_element(list, i % distinct, directive)).collect();
            if reverse {
                items.reverse();
            }
            let items = Value::Array(items);
            match list {
                "env" | "ports" | "volumeMounts" | "args" => {
                    let mut c = json!({"name": "web", "image": "nginx"});
                    c[list] = items;
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {"containers": [c]}}}})
                }
                "containers" | "volumes" => {
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {list: items}}}})
                }
                "finalizers" | "ownerReferences" | "managedFields" => {
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", list: items}})
                }
                "conditions" => json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {"conditions": items}}),
                "labels" => {
                    let labels: Map<String, Value> = (0..n).map(|i| (format!("l{}", i % distinct), json!("v"))).collect();
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels}})
                }
                _ => json!({
                    "apiVersion": "workload.flotilla.io/v1alpha1",
                    "kind": "WorkloadPlacement",
                    "spec": {"clusters": items},
                    "status": {"clusters": items},
                }),
            }
        })
        .boxed()
}

/// An object to patch or a patch to apply: up to `max_bytes` when wide.
fn object_for(meta: Meta, max_bytes: usize) -> BoxedStrategy<Value> {
    match meta {
        Meta::Deployment => prop_oneof![6 => deployment(), 3 => wide_object(max_bytes), 1 => tree(), 1 => deep_tree()].boxed(),
        Meta::WorkloadPlacement => prop_oneof![6 => workload_placement(), 3 => wide_object(max_bytes), 1 => tree()].boxed(),
    }
}

// ------------------------------------------------------------------------------------------
// Strategic merge patches: an object with directives sprinkled in

/// A directive to put into one object node of a patch.
#[derive(Debug, Clone)]
enum Directive {
    /// `$patch: <value>`.
    Patch(Value),
    /// `$retainKeys`: the node's own keys, some dropped, maybe one extra.
    RetainKeys(usize, Option<Value>),
    /// `$setElementOrder/<list>` for a list the node holds, rotated, maybe shortened.
    SetElementOrder(usize, usize, bool),
    /// `$deleteFromPrimitiveList/<field>` with these values.
    DeleteFromPrimitiveList(usize, Value),
    /// `<field>: null`.
    Null(usize),
    /// A list element `{<key>: <value>, "$patch": "delete"|"replace"|...}`.
    InElement(usize, Value),
}

fn directive() -> impl Strategy<Value = Directive> {
    let patch_value = prop_oneof![
        4 => prop::sample::select(&["replace", "delete", "merge"][..]).prop_map(Value::from),
        1 => scalar(),
    ];
    prop_oneof![
        patch_value.clone().prop_map(Directive::Patch),
        (any::<usize>(), prop::option::of(scalar())).prop_map(|(n, extra)| Directive::RetainKeys(n, extra)),
        (any::<usize>(), any::<usize>(), any::<bool>()).prop_map(|(l, r, s)| Directive::SetElementOrder(l, r, s)),
        (any::<usize>(), prop_oneof![prop::collection::vec(name_value(), 0..3).prop_map(Value::Array), scalar()])
            .prop_map(|(f, v)| Directive::DeleteFromPrimitiveList(f, v)),
        any::<usize>().prop_map(Directive::Null),
        (any::<usize>(), patch_value).prop_map(|(l, v)| Directive::InElement(l, v)),
    ]
}

/// JSON pointers of every object node of `v`.
fn object_pointers(v: &Value, at: &mut String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            out.push(at.clone());
            for (k, child) in m {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                object_pointers(child, at, out);
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                object_pointers(child, at, out);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// The identity `$setElementOrder` uses for a list element: its merge key, or itself.
fn order_entry(element: &Value) -> Value {
    for key in ["name", "containerPort", "mountPath", "type", "uid", "topologyKey", "ip"] {
        if let Some(id) = element.get(key) {
            return json!({ key: id });
        }
    }
    element.clone()
}

fn sprinkle(mut patch: Value, directives: &[(usize, Directive)]) -> Value {
    let mut pointers = Vec::new();
    object_pointers(&patch, &mut String::new(), &mut pointers);
    if pointers.is_empty() {
        return patch;
    }
    for (at, directive) in directives {
        let Some(Value::Object(node)) = patch.pointer_mut(&pointers[at % pointers.len()]) else { continue };
        let keys: Vec<String> = node.keys().cloned().collect();
        let pick = |n: usize| keys.get(n % keys.len().max(1)).cloned();
        let lists: Vec<String> = node.iter().filter(|(_, v)| v.is_array()).map(|(k, _)| k.clone()).collect();
        match directive {
            Directive::Patch(v) => {
                node.insert("$patch".into(), v.clone());
            }
            Directive::RetainKeys(n, extra) => {
                let mut retained: Vec<Value> =
                    keys.iter().enumerate().filter(|(i, _)| (n >> (i % 64)) & 1 == 1 || n % 3 == 0).map(|(_, k)| json!(k)).collect();
                retained.extend(extra.clone());
                node.insert("$retainKeys".into(), Value::Array(retained));
            }
            Directive::SetElementOrder(list, rotate, shorten) => {
                let Some(field) = lists.get(list % lists.len().max(1)).cloned().or_else(|| pick(*list)) else { continue };
                let mut order: Vec<Value> = match node.get(&field) {
                    Some(Value::Array(items)) => items.iter().map(order_entry).collect(),
                    _ => vec![json!({"name": "a"})],
                };
                if !order.is_empty() {
                    let r = rotate % order.len();
                    order.rotate_left(r);
                    if *shorten {
                        order.pop();
                    }
                }
                node.insert(format!("$setElementOrder/{field}"), Value::Array(order));
            }
            Directive::DeleteFromPrimitiveList(field, values) => {
                let field = pick(*field).unwrap_or_else(|| "finalizers".into());
                node.insert(format!("$deleteFromPrimitiveList/{field}"), values.clone());
            }
            Directive::Null(field) => {
                if let Some(k) = pick(*field) {
                    node.insert(k, Value::Null);
                }
            }
            Directive::InElement(list, v) => {
                let Some(field) = lists.get(list % lists.len().max(1)).cloned() else { continue };
                if let Some(Value::Array(items)) = node.get_mut(&field) {
                    let mut element = items.first().map(order_entry).unwrap_or_else(|| json!({"name": "a"}));
                    if let Value::Object(m) = &mut element {
                        m.insert("$patch".into(), v.clone());
                    }
                    items.push(element);
                }
            }
        }
    }
    patch
}

fn strategic_patch(meta: Meta) -> BoxedStrategy<Value> {
    (object_for(meta, WIDE_BYTES), prop::collection::vec((any::<usize>(), directive()), 0..8))
        .prop_map(|(base, directives)| {
            // Patches are objects; the engine refuses anything else up front.
            let base = if base.is_object() { base } else { json!({ "spec": base }) };
            sprinkle(base, &directives)
        })
        .boxed()
}

// ------------------------------------------------------------------------------------------
// JSON patches: random operations over the document's own paths

fn pointer_escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Pointers of every node of `v` (the root is "").
fn all_pointers(v: &Value, at: &mut String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let len = at.len();
                at.push('/');
                at.push_str(&pointer_escape(k));
                all_pointers(child, at, out);
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                all_pointers(child, at, out);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// One operation, its paths chosen among the document's pointers (or made up).
#[derive(Debug, Clone)]
struct RawOp {
    op: Value,
    path: (bool, usize, &'static str, String),
    from: Option<(bool, usize, &'static str, String)>,
    value: Option<Value>,
    extra: Option<(String, Value)>,
}

fn raw_path() -> impl Strategy<Value = (bool, usize, &'static str, String)> {
    (
        prop::bool::weighted(0.85),
        any::<usize>(),
        prop::sample::select(&["", "", "", "/-", "/0", "/1", "/x", "/~1a", "/~", "/~2", "/00", "/-1", "/99999999999999999999"][..]),
        "(/[a-z0-9~-]{0,3}){0,4}",
    )
}

fn raw_op() -> impl Strategy<Value = RawOp> {
    (
        prop_oneof![
            8 => prop::sample::select(&["add", "remove", "replace", "move", "copy", "test"][..]).prop_map(Value::from),
            1 => scalar(),
        ],
        raw_path(),
        prop::option::weighted(0.9, raw_path()),
        prop::option::weighted(0.9, prop_oneof![4 => scalar(), 1 => tree()]),
        prop::option::weighted(0.05, (key(), scalar())),
    )
        .prop_map(|(op, path, from, value, extra)| RawOp { op, path, from, value, extra })
}

fn resolve_path(pointers: &[String], (existing, index, suffix, made_up): &(bool, usize, &'static str, String)) -> String {
    if *existing && !pointers.is_empty() {
        format!("{}{suffix}", pointers[index % pointers.len()])
    } else {
        made_up.clone()
    }
}

fn json_patch_for(doc: &Value, ops: &[RawOp]) -> Value {
    let mut pointers = Vec::new();
    all_pointers(doc, &mut String::new(), &mut pointers);
    let ops = ops
        .iter()
        .map(|raw| {
            let mut op = Map::new();
            op.insert("op".into(), raw.op.clone());
            op.insert("path".into(), Value::String(resolve_path(&pointers, &raw.path)));
            if let Some(from) = &raw.from {
                op.insert("from".into(), Value::String(resolve_path(&pointers, from)));
            }
            if let Some(value) = &raw.value {
                op.insert("value".into(), value.clone());
            }
            if let Some((k, v)) = &raw.extra {
                op.insert(k.clone(), v.clone());
            }
            Value::Object(op)
        })
        .collect();
    Value::Array(ops)
}

fn json_patch_case() -> impl Strategy<Value = (Value, Value)> {
    (
        prop_oneof![3 => deployment(), 1 => tree(), 1 => deep_tree(), 2 => wide_object(WIDE_BYTES)],
        prop_oneof![3 => prop::collection::vec(raw_op(), 0..24), 1 => prop::collection::vec(raw_op(), 0..600)],
    )
        .prop_map(|(doc, ops)| {
            let patch = json_patch_for(&doc, &ops);
            (doc, patch)
        })
        .prop_filter("inputs stay under 64 KiB", |(doc, patch)| json_len(doc) + json_len(patch) <= MAX_INPUT)
}

// ------------------------------------------------------------------------------------------
// Bodies for the decoders

/// Tokens YAML and JSON are made of, and the ones libyaml finds hard.
const YAML_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ": ",
    ",",
    "- ",
    "-",
    "\n",
    "  ",
    "    ",
    "\t",
    "a",
    "b",
    "key",
    "'",
    "\"",
    "\\",
    "#",
    " #c\n",
    "&a ",
    "&b ",
    "*a",
    "*b",
    "!!str ",
    "!!map ",
    "!tag ",
    "---\n",
    "...\n",
    "? ",
    "|\n",
    ">-\n",
    "<<: *a\n",
    "1",
    "-1",
    "0x1f",
    "1e9",
    "null",
    "~",
    "true",
    "%YAML 1.2\n",
    "%TAG ! !x\n",
    "\u{feff}",
    "é",
    "\r\n",
    "\0",
    "\"\\u12",
    "{a: b}",
    "[1, 2]",
];

fn yaml_tokens(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(YAML_TOKENS), 0..max).prop_map(|t| t.concat().into_bytes())
}

/// A document that nests `depth` levels with one construct.
fn deep_yaml() -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(&["{a: ", "[", "- ", "a:\n ", "? ", "{\"a\":", "[{", "!!seq [", "&x ["][..]), 0usize..4000, any::<bool>())
        .prop_map(|(open, depth, close)| {
            let mut body = open.repeat(depth);
            if close {
                body.push('x');
                for c in open.chars().rev().collect::<String>().chars() {
                    match c {
                        '{' => body.push_str(&"}".repeat(depth)),
                        '[' => body.push_str(&"]".repeat(depth)),
                        _ => {}
                    }
                }
            }
            body.into_bytes()
        })
}

/// Anchors and aliases: a list of `leaves` scalars, then `aliases` references to it,
/// then maybe a further level of references to those.
fn alias_yaml() -> impl Strategy<Value = Vec<u8>> {
    (1usize..2000, 0usize..12_000, 0usize..50).prop_map(|(leaves, aliases, second)| {
        let mut body = String::from("a: &a [");
        body.push_str(&vec!["x"; leaves].join(","));
        body.push_str("]\nb: &b [");
        body.push_str(&vec!["*a"; aliases].join(","));
        body.push_str("]\nc: [");
        body.push_str(&vec!["*b"; second].join(","));
        body.push_str("]\n");
        body.into_bytes()
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..4096),
        1 => prop::collection::vec(any::<u8>(), 0..MAX_INPUT),
        3 => yaml_tokens(3000),
        2 => any_json().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        1 => any_json().prop_map(|v| serde_json::to_vec_pretty(&v).unwrap_or_default()),
        1 => any_json().prop_map(|v| serde_yaml::to_string(&v).unwrap_or_default().into_bytes()),
        2 => deep_yaml(),
        2 => alias_yaml(),
    ]
    .prop_filter("bodies stay under 64 KiB", |b| b.len() <= MAX_INPUT)
}

// ------------------------------------------------------------------------------------------
// Protobuf bodies

/// A protobuf field as written on the wire.
#[derive(Debug, Clone)]
enum PbField {
    Varint(u32, u64),
    Fixed64(u32, u64),
    Fixed32(u32, u32),
    Bytes(u32, Vec<u8>),
    Message(u32, Vec<PbField>),
    /// Bytes that are not a field at all.
    Raw(Vec<u8>),
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn encode_fields(fields: &[PbField], out: &mut Vec<u8>) {
    for f in fields {
        match f {
            PbField::Varint(tag, v) => {
                varint(u64::from(*tag) << 3, out);
                varint(*v, out);
            }
            PbField::Fixed64(tag, v) => {
                varint((u64::from(*tag) << 3) | 1, out);
                out.extend_from_slice(&v.to_le_bytes());
            }
            PbField::Fixed32(tag, v) => {
                varint((u64::from(*tag) << 3) | 5, out);
                out.extend_from_slice(&v.to_le_bytes());
            }
            PbField::Bytes(tag, b) => {
                varint((u64::from(*tag) << 3) | 2, out);
                varint(b.len() as u64, out);
                out.extend_from_slice(b);
            }
            PbField::Message(tag, fields) => {
                let mut inner = Vec::new();
                encode_fields(fields, &mut inner);
                varint((u64::from(*tag) << 3) | 2, out);
                varint(inner.len() as u64, out);
                out.extend_from_slice(&inner);
            }
            PbField::Raw(b) => out.extend_from_slice(b),
        }
    }
}

fn pb_tag() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 1u32..16, 1 => any::<u32>().prop_map(|t| t >> 3), 1 => Just(0u32)]
}

fn pb_fields() -> impl Strategy<Value = Vec<PbField>> {
    let leaf = prop_oneof![
        (pb_tag(), prop_oneof![any::<u64>(), 0u64..3, Just(u64::MAX)]).prop_map(|(t, v)| PbField::Varint(t, v)),
        (pb_tag(), any::<u64>()).prop_map(|(t, v)| PbField::Fixed64(t, v)),
        (pb_tag(), any::<u32>()).prop_map(|(t, v)| PbField::Fixed32(t, v)),
        (
            pb_tag(),
            prop_oneof![Just(b"{}".to_vec()), "[a-z0-9:./-]{0,12}".prop_map(String::into_bytes), prop::collection::vec(any::<u8>(), 0..16)]
        )
            .prop_map(|(t, b)| PbField::Bytes(t, b)),
        prop::collection::vec(any::<u8>(), 0..6).prop_map(PbField::Raw),
    ];
    let field = leaf.prop_recursive(12, 256, 6, |inner| {
        (pb_tag(), prop::collection::vec(inner, 0..6)).prop_map(|(t, fields)| PbField::Message(t, fields))
    });
    prop::collection::vec(field, 0..12)
}

/// `fields` inside a chain of `tags` nested messages (deeper than the decoder's limit).
fn pb_nested(tags: &[u32], fields: Vec<PbField>) -> Vec<PbField> {
    tags.iter().rev().fold(fields, |inner, &tag| vec![PbField::Message(tag, inner)])
}

const PB_KINDS: &[(&str, &str)] = &[
    ("v1", "Namespace"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
    ("meta.k8s.io/v1", "DeleteOptions"),
    ("v1", "Service"),
    ("", ""),
];

/// `k8s\0` and a `runtime.Unknown` around a random object message.
fn pb_envelope() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(PB_KINDS),
        pb_fields(),
        prop::collection::vec(prop_oneof![4 => 1u32..12, 1 => 1u32..40], 0..70),
        prop::option::weighted(0.1, "(application/vnd.kubernetes.protobuf|gzip|x)"),
    )
        .prop_map(|((api_version, kind), fields, chain, content_type)| {
            let mut raw = Vec::new();
            encode_fields(&pb_nested(&chain, fields), &mut raw);
            let mut envelope = vec![
                PbField::Message(1, vec![PbField::Bytes(1, api_version.into()), PbField::Bytes(2, kind.into())]),
                PbField::Bytes(2, raw),
            ];
            if let Some(ct) = content_type {
                envelope.push(PbField::Bytes(4, ct.into_bytes()));
            }
            let mut body = b"k8s\0".to_vec();
            encode_fields(&envelope, &mut body);
            body
        })
}

/// The bodies kubectl sent (apimachinery/tests/data/protobuf/*.bin).
fn pb_fixtures() -> &'static [Vec<u8>] {
    static FIXTURES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../apimachinery/tests/data/protobuf");
        let mut bodies: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .expect("the protobuf fixtures")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bin"))
            .map(|p| std::fs::read(p).expect("a fixture"))
            .collect();
        bodies.sort();
        bodies
    })
}

/// A real body with some bytes changed, inserted or cut off.
fn pb_mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<usize>(),
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        prop::collection::vec((any::<usize>(), prop::collection::vec(any::<u8>(), 1..8)), 0..3),
        prop::option::weighted(0.3, any::<usize>()),
    )
        .prop_map(|(which, flips, inserts, cut)| {
            let fixtures = pb_fixtures();
            let mut body = fixtures[which % fixtures.len()].clone();
            for (at, bytes) in inserts {
                let at = at % (body.len() + 1);
                body.splice(at..at, bytes);
            }
            for (at, byte) in flips {
                let len = body.len();
                if len > 4 {
                    // The magic stays, or almost every case stops at it.
                    body[4 + at % (len - 4)] = byte;
                }
            }
            if let Some(cut) = cut {
                body.truncate(cut % (body.len() + 1));
            }
            body
        })
}

/// A real body whose object has a few random fields repeated thousands of times
/// (list items, map entries, a message merged into itself again and again).
fn pb_wide() -> impl Strategy<Value = Vec<u8>> {
    (any::<usize>(), prop::collection::vec(pb_fields(), 1..3), 0usize..6000).prop_map(|(which, groups, times)| {
        let fixtures = pb_fixtures();
        let mut body = fixtures[which % fixtures.len()].clone();
        let mut extra = Vec::new();
        for fields in &groups {
            let mut one = Vec::new();
            encode_fields(fields, &mut one);
            for _ in 0..times.min(MAX_INPUT / one.len().max(1) / groups.len()) {
                extra.extend_from_slice(&one);
            }
        }
        // Appended to the envelope as another `raw` (field 2), which replaces the first:
        // the object decoded is these fields, read with the table of the fixture's kind.
        let mut wrapped = Vec::new();
        encode_fields(&[PbField::Bytes(2, extra)], &mut wrapped);
        body.extend_from_slice(&wrapped);
        body
    })
}

fn pb_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..4096),
        1 => prop::collection::vec(any::<u8>(), 0..4096).prop_map(|b| [b"k8s\0".as_slice(), &b].concat()),
        3 => pb_envelope(),
        3 => pb_mutated(),
        2 => pb_wide(),
    ]
    .prop_filter("bodies stay under 64 KiB", |b| b.len() <= MAX_INPUT)
}

// ------------------------------------------------------------------------------------------
// Selectors and JSONPath

fn concat_tokens(tokens: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(tokens), 0..max).prop_map(|t| t.concat())
}

const LABEL_TOKENS: &[&str] = &[
    "a",
    "b",
    "app",
    "tier",
    "x.io/a",
    "example.com/name",
    "a/b/c",
    "/",
    "!",
    "=",
    "==",
    "!=",
    ">",
    "<",
    "in",
    "notin",
    "(",
    ")",
    ",",
    " ",
    "\t",
    "-",
    "_",
    ".",
    "1",
    "-5",
    "a-",
    "é",
    "\0",
    "in (",
    "notin (",
    "a=b",
    "!a",
    "a in (x,y)",
    "a notin ()",
];

/// A key or value; long ones pass the length limits by one.
fn label_word() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?",
        1 => "[A-Za-z0-9._/-]{0,12}",
        1 => (60usize..70).prop_map(|n| "k".repeat(n)),
        1 => (250usize..258).prop_map(|n| format!("{}/n", "p".repeat(n))),
        1 => "\\PC{0,6}",
    ]
}

/// `key op (v1,v2,...)` with many values, many of them invalid: error reporting for
/// each value must not be quadratic.
fn big_label_set() -> impl Strategy<Value = String> {
    (
        label_word(),
        prop::sample::select(&["in", "notin"][..]),
        0usize..12_000,
        prop::sample::select(&["-{}", "v{}", "{}-", "x{}y", "é{}", "{}"][..]),
    )
        .prop_map(|(key, op, n, pattern)| {
            let values: Vec<String> = (0..n).map(|i| pattern.replace("{}", &i.to_string())).collect();
            format!("{key} {op} ({})", values.join(","))
        })
}

/// Many requirements joined by commas.
fn many_requirements() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::option::of(Just("!")),
            label_word(),
            prop::sample::select(&["", "=", "==", "!=", " in ", " notin ", ">", "<"][..]),
            label_word(),
        )
            .prop_map(|(not, k, op, v)| match (not, op) {
                (Some(_), _) => format!("!{k}"),
                (None, "") => k,
                (None, " in " | " notin ") => format!("{k}{op}({v})"),
                (None, _) => format!("{k}{op}{v}"),
            }),
        0..3000,
    )
    .prop_map(|r| r.join(","))
}

fn label_selector() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "\\PC{0,300}",
        1 => prop::collection::vec(any::<char>(), 0..2000).prop_map(|c| c.into_iter().collect()),
        4 => concat_tokens(LABEL_TOKENS, 600),
        2 => many_requirements(),
        2 => big_label_set(),
    ]
    .prop_filter("selectors stay under 64 KiB", |s| s.len() <= MAX_INPUT)
}

const FIELD_TOKENS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "spec.nodeName",
    "a",
    "=",
    "==",
    "!=",
    "!",
    ",",
    "\\",
    "\\,",
    "\\=",
    "\\\\",
    " ",
    "é",
    "\0",
    "x",
    "Running",
];

fn field_selector() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "\\PC{0,300}",
        4 => concat_tokens(FIELD_TOKENS, 2000),
        2 => prop::collection::vec(
            (concat_tokens(FIELD_TOKENS, 4), prop::sample::select(&["=", "==", "!="][..]), concat_tokens(FIELD_TOKENS, 4))
                .prop_map(|(f, op, v)| format!("{f}{op}{v}")),
            0..3000,
        )
        .prop_map(|t| t.join(",")),
        1 => (1usize..20_000).prop_map(|n| "a=".repeat(n)),
        1 => (1usize..20_000).prop_map(|n| format!("a={}", "\\,".repeat(n))),
    ]
    .prop_filter("selectors stay under 64 KiB", |s| s.len() <= MAX_INPUT)
}

const JSONPATH_TOKENS: &[&str] = &[
    ".",
    "..",
    "[",
    "]",
    "*",
    "?",
    "(",
    ")",
    "@",
    "$",
    "{",
    "}",
    "'",
    "\"",
    "\\",
    "a",
    "name",
    "spec",
    "items",
    "containers",
    "0",
    "-1",
    "1",
    ":",
    ",",
    "==",
    "!=",
    "<",
    ">=",
    "true",
    "false",
    "1.5e3",
    "-",
    " ",
    "\\u0041",
    "\\u",
    "é",
    "[*]",
    "[0]",
    "[-1:]",
    "[?(@.name==\"a\")]",
    "['a']",
    "[1,2]",
    ".metadata",
    ".name",
    "..name",
    "..*",
    "[?(@.a)]",
    "[?(@.x > 1)]",
];

/// Filters nested `depth` deep (the parser recurses per level).
fn nested_filters() -> impl Strategy<Value = String> {
    (0usize..3000, any::<bool>()).prop_map(|(depth, closed)| {
        let mut s = format!(".a{}", "[?(@.b".repeat(depth));
        if closed {
            s.push_str(&")]".repeat(depth));
        }
        s
    })
}

fn jsonpath_expr() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "\\PC{0,200}",
        5 => concat_tokens(JSONPATH_TOKENS, 800),
        1 => nested_filters(),
        1 => (1usize..5000).prop_map(|n| format!("{{{}}}", ".a".repeat(n))),
        1 => (1usize..5000).prop_map(|n| format!(".a[{}]", vec!["0"; n].join(","))),
    ]
    .prop_filter("expressions stay under 64 KiB", |s| s.len() <= MAX_INPUT)
}

/// Recursive descents and wildcards one after another: each multiplies what the
/// steps before it selected.
fn jsonpath_descents() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&["..*", "..[*]", "[*]", ".*", "..a", "..name", "..[0]", "..[?(@.a)]", "[0:]"][..]), 1..12)
        .prop_map(|steps| steps.concat())
}

/// Expressions that parse, to evaluate: printer columns of CRDs are such paths.
fn jsonpath_valid() -> impl Strategy<Value = JsonPath> {
    prop_oneof![concat_tokens(JSONPATH_TOKENS, 40), jsonpath_descents()].prop_filter_map("parses", |s| JsonPath::parse(&s).ok())
}

// ------------------------------------------------------------------------------------------
// The targets

fn obj_ref() -> ObjRef<'static> {
    ObjRef { group: "apps", resource: "deployments", name: "fuzz" }
}

proptest! {
    #![proptest_config(config(384))]

    /// Request bodies as the API server reads them (YAML or JSON).
    #[test]
    fn decode_yaml_or_json(body in body()) {
        timed("decode::yaml_or_json", &String::from_utf8_lossy(&body), || decode::yaml_or_json(&body).is_ok())?;
    }

    /// JSON bodies.
    #[test]
    fn decode_json(body in body()) {
        timed("decode::json", &String::from_utf8_lossy(&body), || decode::json(&body, "fuzz").is_ok())?;
    }

    /// The YAML pre-scan: linear, and never deeper than the brackets and block
    /// indicators in the body.
    #[test]
    fn decode_flow_depth(body in body()) {
        let depth = timed("decode::flow_depth", &String::from_utf8_lossy(&body), || decode::flow_depth(&body))?;
        let opening = body.iter().filter(|b| matches!(b, b'{' | b'[' | b'-' | b'?' | b':')).count();
        prop_assert!(depth <= opening, "flow_depth {} > {} brackets and indicators", depth, opening);
    }

    /// Kubernetes protobuf bodies.
    #[test]
    fn decode_protobuf(body in pb_body()) {
        timed("protobuf::decode", &body, || protobuf::decode(&body).is_ok())?;
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// JSON patch (RFC 6902) as the API server applies it.
    #[test]
    fn patch_json((doc, ops) in json_patch_case()) {
        timed("api::json_patch_apply", &(&doc, &ops), || controlplane::api::json_patch_apply(&doc, &ops, "Deployment", obj_ref()).is_ok())?;
    }

    /// JSON merge patch (RFC 7386).
    #[test]
    fn patch_merge(doc in any_json(), patch in any_json()) {
        prop_assume!(json_len(&doc) + json_len(&patch) <= MAX_INPUT);
        timed("json_patch::merge", &(&doc, &patch), || {
            let mut v = doc.clone();
            json_patch::merge(&mut v, &patch);
            v
        })?;
    }

    /// Strategic merge patch with a type's real merge keys.
    #[test]
    fn patch_strategic((meta, original, patch) in meta().prop_flat_map(|m| (Just(m), object_for(m, WIDE_BYTES), strategic_patch(m)))) {
        prop_assume!(json_len(&original) + json_len(&patch) <= MAX_INPUT);
        let rt = meta.resource();
        timed("patch::strategic::apply", &(&original, &patch), || patch::strategic::apply(&original, &patch, rt.patch_meta()).is_ok())?;
    }

    /// Server-side apply: a create, another manager's apply, the first manager again,
    /// then an ordinary update tracked on top, all with a type's real merge keys.
    #[test]
    fn patch_apply(
        (meta, live, configs, update) in meta().prop_flat_map(|m| (
            Just(m),
            prop::option::of(object_for(m, APPLY_WIDE_BYTES)),
            prop::collection::vec((object_for(m, APPLY_WIDE_BYTES), any::<bool>(), prop::option::weighted(0.2, Just("status"))), 1..4),
            object_for(m, APPLY_WIDE_BYTES),
        ))
    ) {
        let size = live.as_ref().map_or(0, json_len) + configs.iter().map(|(c, _, _)| json_len(c)).sum::<usize>() + json_len(&update);
        prop_assume!(size <= MAX_INPUT);
        let rt = meta.resource();
        let pm: &dyn PatchMeta = rt.patch_meta();
        let api_version = rt.api_version();
        let mut current = live.clone();
        for (i, (config, force, sub)) in configs.iter().enumerate() {
            let manager = ["kubectl", "controller", "kubectl"][i % 3];
            let out = timed("patch::apply::apply", &(&current, config, manager, force, sub), || {
                patch::apply::apply(current.as_ref(), config, manager, *force, &api_version, "2024-01-01T00:00:00Z", pm, *sub)
            })?;
            if let Ok(v) = out {
                current = Some(v);
            }
        }
        let mut new = update.clone();
        timed("patch::apply::track_update", &(&current, &update), || {
            new = update.clone();
            patch::apply::track_update(current.as_ref(), &mut new, "editor", &api_version, "2024-01-01T00:01:00Z", pm, None);
        })?;
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// `labelSelector=` query parameters.
    #[test]
    fn selector_label(s in label_selector()) {
        timed("LabelSelector::parse", &s, || LabelSelector::parse(&s).map(|l| l.to_string()).is_ok())?;
    }

    /// `fieldSelector=` query parameters.
    #[test]
    fn selector_field(s in field_selector()) {
        timed("FieldSelector::parse", &s, || FieldSelector::parse(&s).map(|f| f.to_string()).is_ok())?;
    }

    /// JSONPath expressions (CRD printer columns, scale paths).
    #[test]
    fn jsonpath_parse(s in jsonpath_expr()) {
        timed("JsonPath::parse", &s, || JsonPath::parse(&s).is_ok())?;
    }

    /// Evaluating a parsed expression over an object, as a printer column does.
    #[test]
    fn jsonpath_eval(path in jsonpath_valid(), doc in any_json()) {
        prop_assume!(json_len(&doc) <= MAX_INPUT);
        timed("JsonPath::eval", &(path.as_str(), &doc), || path.eval(&doc).len())?;
    }
}

// ------------------------------------------------------------------------------------------
// Regressions: what the targets found, minimized

/// Fails the test when one call of `f` takes longer than [`LIMIT`] (three times).
fn within_limit<T>(what: &str, input: &dyn Debug, f: impl FnMut() -> T) -> T {
    timed(what, input, f).unwrap_or_else(|e| panic!("{e}"))
}

/// `decode_yaml_or_json` never finished (nextest ended it after 300 s): serde_yaml
/// expands aliases without bound, and these 40 KB make 1.2 * 10^9 values.
#[test]
fn regression_yaml_aliases_expand_without_bound() {
    let body = format!("a: &a [{}]\nb: &b [{}]\nc: [{}]\n", ["x"; 2000].join(","), ["*a"; 12_000].join(","), ["*b"; 50].join(","));
    let decoded = within_limit("decode::yaml_or_json", &"a: &a [x * 2000], b: &b [*a * 12000], c: [*b * 50]", || {
        decode::yaml_or_json(body.as_bytes())
    });
    let e = decoded.expect_err("the aliases expand past the budget");
    assert!(e.message.contains("aliases"), "{}", e.message);
}

/// `selector_label`: one error per value of a long `in` list, deduplicated by scanning
/// the list of errors so far (116 ms for this 21 KB selector).
#[test]
fn regression_label_selector_errors_deduplicated_quadratically() {
    let s = format!("a in ({})", (0..=3766).map(|i| format!("-{i}")).collect::<Vec<_>>().join(","));
    let e = within_limit("LabelSelector::parse", &s, || LabelSelector::parse(&s)).expect_err("values must not start with '-'");
    assert!(e.to_string().contains("more invalid values"), "{e}");
}

/// `selector_label` (another seed): with a 257-byte key each value's error repeats the
/// key and the rule, so 64 KB of bad values made about 10 MB of error text (117 ms).
#[test]
fn regression_label_selector_error_text_amplified() {
    let s = format!("{}/n in ({})", "p".repeat(257), (0..14_000).map(|i| format!("{i}-")).collect::<Vec<_>>().join(","));
    let e = within_limit("LabelSelector::parse", &"<257-byte key> in (0-, 1-, ... 13999-)", || LabelSelector::parse(&s))
        .expect_err("the prefix is too long and the values end with '-'");
    assert!(e.to_string().len() < 64 * 1024, "{} bytes of error", e.to_string().len());
}

/// `jsonpath_eval`: each recursive descent multiplies what the steps before it selected
/// (164 ms here, and exponential in the number of `..`).
#[test]
fn regression_jsonpath_descents_multiply() {
    let path = JsonPath::parse("..[*]..*..a").expect("parses");
    let doc = nest(json!({"a": 1, "b": [null, "x"]}), 102, &[true, false], "$deleteFromPrimitiveList/finalizers");
    within_limit("JsonPath::eval", &path.as_str(), || path.eval(&doc).len());
}

/// `patch_strategic`: a patch list of 1357 containers merged into a Deployment looked
/// each one up by scanning the merged list, then ordered them by scanning again (113 ms);
/// with these 1900, about 250 ms.
#[test]
fn regression_strategic_merge_list_scanned_per_element() {
    let original = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}, "spec": {"template": {"spec": {
        "containers": [{"name": "a", "image": "nginx:2"}, {"name": "b", "image": "nginx:1"}],
    }}}});
    let containers: Vec<Value> = (0..1900).map(|i| json!({"name": format!("c{i}"), "image": "nginx"})).collect();
    let patch = json!({"spec": {"template": {"spec": {"containers": containers}}}});
    let rt = deployments();
    let merged =
        within_limit("patch::strategic::apply", &"1900 containers", || patch::strategic::apply(&original, &patch, rt.patch_meta()))
            .expect("merges");
    assert_eq!(merged.pointer("/spec/template/spec/containers").and_then(Value::as_array).map(Vec::len), Some(1902));
}

/// `patch_apply`: creating a Deployment whose container has 1271 volume mounts took
/// 103 ms on a busy machine: linear, but each mount's key was made a dozen times over
/// and field sets were copied once per level. A second manager's apply (untimed: it is
/// twice the work) checks the merge.
#[test]
fn regression_apply_made_element_keys_again_and_again() {
    let mounts = |from: usize| (from..from + 1271).map(|i| json!({"mountPath": format!("/m{i}"), "name": "v"})).collect::<Vec<_>>();
    let config = |from: usize| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "web", "image": "nginx", "volumeMounts": mounts(from)}],
        }}}})
    };
    let rt = deployments();
    let (first, second) = (config(0), config(600));
    let created = within_limit("patch::apply::apply", &"create with 1271 volumeMounts", || {
        patch::apply::apply(None, &first, "kubectl", false, "apps/v1", "2024-01-01T00:00:00Z", rt.patch_meta(), None)
    })
    .expect("creates");
    let applied =
        patch::apply::apply(Some(&created), &second, "controller", true, "apps/v1", "2024-01-01T00:00:01Z", rt.patch_meta(), None)
            .expect("forced");
    let n = applied.pointer("/spec/template/spec/containers/0/volumeMounts").and_then(Value::as_array).map(Vec::len);
    assert_eq!(n, Some(600 + 1271), "the first manager's mounts it still owns stay");
}

/// `patch_apply` (seed 3): an applier that stopped sending 1759 labels had each removed
/// by its own pass over the labels map (109 ms); with these 4000, 400 ms.
#[test]
fn regression_apply_pruned_each_field_with_a_pass_over_the_map() {
    let labels: Map<String, Value> = (0..4000).map(|i| (format!("l{i}"), json!("v"))).collect();
    let first = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels}});
    let second = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"l0": "v"}}});
    let rt = deployments();
    let live =
        patch::apply::apply(None, &first, "kubectl", false, "apps/v1", "2024-01-01T00:00:00Z", rt.patch_meta(), None).expect("creates");
    let applied = within_limit("patch::apply::apply", &"the same manager, 3999 labels fewer", || {
        patch::apply::apply(Some(&live), &second, "kubectl", false, "apps/v1", "2024-01-01T00:00:01Z", rt.patch_meta(), None)
    })
    .expect("applies");
    assert_eq!(applied.pointer("/metadata/labels"), Some(&json!({"l0": "v"})));
}

/// Each copy of the root into a list doubles the document: these 20 operations (761
/// bytes) made 8.9 MB in 0.6 s, 30 of them (1.1 KB) about 9 GB, until
/// `controlplane::api::json_patch_apply` bounded what `copy` adds, as kube-apiserver's
/// JSON patch library does (`AccumulatedCopySizeLimit`). The targets' random operations
/// rarely chain such copies, so `patch_json` alone did not find it.
#[test]
fn regression_json_patch_copies_double_the_document() {
    let doc = json!({"l": []});
    let ops = Value::Array((0..20).map(|_| json!({"op": "copy", "from": "", "path": "/l/-"})).collect());
    let out = within_limit("api::json_patch_apply", &ops, || controlplane::api::json_patch_apply(&doc, &ops, "Deployment", obj_ref()));
    let size = out.as_ref().map(json_len).unwrap_or(0);
    assert!(size <= 3 * 1024 * 1024, "a 761-byte patch made a {size}-byte object");
}
