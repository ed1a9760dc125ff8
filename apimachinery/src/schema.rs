//! What the apiextensions server does with a CRD version's `openAPIV3Schema`,
//! over plain `serde_json::Value`s: checking that a schema is structural when
//! a CRD is created or updated ([`check_structural`]), dropping fields the
//! schema does not describe ([`prune`]), filling in `default` values
//! ([`apply_defaults`]) and validating custom resources ([`validate`]).
//!
//! The schema is deliberately kept as raw JSON rather than a typed struct: a
//! CRD is stored as the user sent it, and every function here must cope with
//! whatever shape it has without panicking. Malformed keywords are reported by
//! [`check_structural`]; the other functions simply ignore what they cannot
//! understand, because only schemas that passed the check reach them.
//!
//! Causes are shaped like `metav1.StatusCause` and their messages follow the
//! wording of Kubernetes (kube-openapi's validator wrapped in apimachinery's
//! field errors), so clients that match on them keep working.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Map, Number, Value};

pub use crate::Cause;

const INVALID: &str = "FieldValueInvalid";
const REQUIRED: &str = "FieldValueRequired";
const NOT_SUPPORTED: &str = "FieldValueNotSupported";
const TYPE_INVALID: &str = "FieldValueTypeInvalid";
const FORBIDDEN: &str = "FieldValueForbidden";
const TOO_LONG: &str = "FieldValueTooLong";
const TOO_MANY: &str = "FieldValueTooMany";
const DUPLICATE: &str = "FieldValueDuplicate";

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const LIST_TYPE: &str = "x-kubernetes-list-type";
const LIST_MAP_KEYS: &str = "x-kubernetes-list-map-keys";
const MAP_TYPE: &str = "x-kubernetes-map-type";
const VALIDATIONS: &str = "x-kubernetes-validations";

/// Fields of TypeMeta/ObjectMeta that pruning leaves alone at a resource root.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The types Kubernetes accepts in a CRD schema, in the order its messages list them.
const SCHEMA_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// Recursion guard. Parsed JSON is already limited to 128 levels by serde_json,
/// but values built in code are not, and overflowing the stack would abort the
/// whole server rather than fail one request.
const MAX_DEPTH: usize = 256;

// ---------------------------------------------------------------------------
// Schema accessors: everything tolerates a schema of the wrong shape.
// ---------------------------------------------------------------------------

fn get<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
    s.as_object()?.get(key)
}

fn str_of<'a>(s: &'a Value, key: &str) -> Option<&'a str> {
    get(s, key)?.as_str()
}

/// True only for a literal `true`: Kubernetes' booleans default to false.
fn flag(s: &Value, key: &str) -> bool {
    matches!(get(s, key), Some(Value::Bool(true)))
}

fn type_of(s: &Value) -> &str {
    str_of(s, "type").unwrap_or("")
}

fn props_of(s: &Value) -> Option<&Map<String, Value>> {
    get(s, "properties")?.as_object()
}

fn items_of(s: &Value) -> Option<&Value> {
    get(s, "items").filter(|v| v.is_object())
}

/// A `default: null` is no default at all, as in Kubernetes (`Default.Object == nil`).
fn default_of(s: &Value) -> Option<&Value> {
    get(s, "default").filter(|v| !v.is_null())
}

fn array_of<'a>(s: &'a Value, key: &str) -> &'a [Value] {
    match get(s, key) {
        Some(Value::Array(a)) => a,
        _ => &[],
    }
}

fn num_of(s: &Value, key: &str) -> Option<f64> {
    get(s, key)?.as_f64()
}

/// A non-negative count such as `maxLength`; tolerates `3.0`.
fn count_of(s: &Value, key: &str) -> Option<u64> {
    let v = get(s, key)?;
    if let Some(u) = v.as_u64() {
        return Some(u);
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0).then_some(f as u64)
}

/// `additionalProperties` is either absent, a boolean or a schema.
#[derive(Clone, Copy)]
enum Addl<'a> {
    Absent,
    Bool(bool),
    Schema(&'a Value),
}

fn addl_of(s: &Value) -> Addl<'_> {
    match get(s, "additionalProperties") {
        Some(Value::Bool(b)) => Addl::Bool(*b),
        Some(v @ Value::Object(_)) => Addl::Schema(v),
        _ => Addl::Absent,
    }
}

/// The schema that applies to `key` of an object described by `s`, if any.
fn field_schema<'a>(s: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = s?;
    if let Some(p) = props_of(s).and_then(|p| p.get(key)) {
        return Some(p);
    }
    match addl_of(s) {
        Addl::Schema(a) => Some(a),
        _ => None,
    }
}

/// Whether a keyword holds its Go zero value, i.e. is effectively unset.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(_) => false,
    }
}

fn is_set(s: &Value, key: &str) -> bool {
    get(s, key).is_some_and(|v| !is_zero(v))
}

// ---------------------------------------------------------------------------
// Paths and message formatting.
// ---------------------------------------------------------------------------

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn keyed(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

fn indexed(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Appends a value path to a field prefix (used when validating defaults).
fn join_field(base: &str, rel: &str) -> String {
    if base.is_empty() {
        rel.to_string()
    } else if rel.is_empty() {
        base.to_string()
    } else if rel.starts_with('[') {
        format!("{base}{rel}")
    } else {
        format!("{base}.{rel}")
    }
}

/// kube-openapi's "<name> in body" subject; the name is empty for the value itself.
fn in_body(path: &str) -> String {
    if path.is_empty() {
        "in body".to_string()
    } else {
        format!("{path} in body")
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// Formats a float like Go's `%v`, which Kubernetes messages use for numbers.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        // Go switches to exponent form here, with a sign and two exponent digits.
        let s = format!("{f:e}");
        if let Some((mantissa, exp)) = s.split_once('e') {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            let pad = if digits.len() < 2 { "0" } else { "" };
            return format!("{mantissa}e{sign}{pad}{digits}");
        }
        return s;
    }
    format!("{f}")
}

fn fmt_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        go_float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Renders a bad value the way apimachinery does for scalars (`%v`, strings `%q`);
/// compound values are shown as compact JSON instead of Go's `%#v`.
fn fmt_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => fmt_number(n),
        Value::String(s) => quote(s),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A canonical text form used for equality (enum, sets, list-map keys): object
/// keys sorted and integral floats written as integers, so `1` equals `1.0`.
fn canon(v: &Value, out: &mut String, depth: usize) {
    if depth > MAX_DEPTH {
        out.push('~');
        return;
    }
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    out.push_str(&(f as i64).to_string());
                } else {
                    out.push_str(&format!("{f:?}"));
                }
            }
        }
        Value::String(s) => out.push_str(&quote(s)),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canon(x, out, depth + 1);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&quote(k));
                out.push(':');
                if let Some(x) = m.get(k) {
                    canon(x, out, depth + 1);
                }
            }
            out.push('}');
        }
    }
}

fn canonical(v: &Value) -> String {
    let mut s = String::new();
    canon(v, &mut s, 0);
    s
}

fn json_eq(a: &Value, b: &Value) -> bool {
    canonical(a) == canonical(b)
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

fn required(out: &mut Vec<Cause>, field: String, detail: &str) {
    out.push(Cause { reason: REQUIRED, message: with_detail("Required value".into(), detail), field });
}

fn forbidden(out: &mut Vec<Cause>, field: String, detail: &str) {
    out.push(Cause { reason: FORBIDDEN, message: with_detail("Forbidden".into(), detail), field });
}

fn invalid(out: &mut Vec<Cause>, field: String, value: &str, detail: &str) {
    out.push(Cause { reason: INVALID, message: with_detail(format!("Invalid value: {value}"), detail), field });
}

fn type_invalid(out: &mut Vec<Cause>, field: String, value: &str, detail: &str) {
    out.push(Cause { reason: TYPE_INVALID, message: with_detail(format!("Invalid value: {value}"), detail), field });
}

fn not_supported(out: &mut Vec<Cause>, field: String, value: &str, supported: &[String]) {
    let quoted: Vec<String> = supported.iter().map(|s| quote(s)).collect();
    let detail = if quoted.is_empty() { String::new() } else { format!("supported values: {}", quoted.join(", ")) };
    out.push(Cause { reason: NOT_SUPPORTED, message: with_detail(format!("Unsupported value: {value}"), &detail), field });
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// Structural schema check.
// ---------------------------------------------------------------------------

/// Checks that a schema is structural (used when a CRD is created or updated).
///
/// `field_prefix` is where the schema sits in the CRD, normally
/// `spec.versions[i].schema.openAPIV3Schema`; every cause's field starts with
/// it and continues in Kubernetes' notation (`properties[spec].type`).
///
/// This combines what Kubernetes does in three places: the static OpenAPI
/// checks of CRD validation (unsupported keywords, `$ref`, `uniqueItems`,
/// `additionalProperties` next to `properties`, list/map extensions), the
/// structural invariants (every node typed, value validations under
/// `allOf`/`anyOf`/`oneOf`/`not` free of structure, root metadata restricted
/// to `name`/`generateName`), and — when the schema is otherwise structural —
/// that every `default` is pruned and valid against its own schema.
pub fn check_structural(schema: &Value, field_prefix: &str) -> Vec<Cause> {
    let mut c = Checker::default();
    if !schema.is_object() {
        invalid(&mut c.out, field_prefix.to_string(), &fmt_value(schema), "must be a schema object");
        return c.out;
    }
    if flag(schema, "nullable") {
        forbidden(&mut c.out, child(field_prefix, "nullable"), "nullable cannot be true at the root");
    }
    c.spec_node(schema, field_prefix, &SpecCtx::root(), 0);

    let before = c.out.len();
    c.structural_node(schema, field_prefix, Level::Root, 0);
    c.completeness_vv(schema, Some(schema), field_prefix, field_prefix, 0);
    // Kubernetes only looks at defaults once the schema is structural: before
    // that, pruning and validating them has no well-defined meaning.
    if c.out.len() == before {
        c.check_defaults(schema, field_prefix, true, false, 0);
    }
    c.out
}

#[derive(Default)]
struct Checker {
    out: Vec<Cause>,
}

/// Context threaded through the static checks, like Kubernetes' specStandardValidator.
#[derive(Clone)]
struct SpecCtx {
    is_root: bool,
    /// Set when defaults are not allowed here; the text says why.
    no_defaults: Option<String>,
    /// Inside the schema of TypeMeta/ObjectMeta (of the root or an embedded resource).
    inside_meta: bool,
}

impl SpecCtx {
    fn root() -> Self {
        SpecCtx { is_root: true, no_defaults: None, inside_meta: false }
    }

    fn nested(&self) -> Self {
        SpecCtx { is_root: false, ..self.clone() }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

const STRING_KEYS: [&str; 7] = ["type", "format", "pattern", "title", "description", LIST_TYPE, MAP_TYPE];
const BOOL_KEYS: [&str; 7] = ["nullable", "uniqueItems", PRESERVE, EMBEDDED, INT_OR_STRING, "exclusiveMinimum", "exclusiveMaximum"];
const NUMBER_KEYS: [&str; 3] = ["minimum", "maximum", "multipleOf"];
const COUNT_KEYS: [&str; 6] = ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"];
const STRING_LIST_KEYS: [&str; 2] = ["required", LIST_MAP_KEYS];
const LIST_KEYS: [&str; 5] = ["enum", "allOf", "anyOf", "oneOf", VALIDATIONS];
const OBJECT_KEYS: [&str; 3] = ["properties", "not", "externalDocs"];

impl Checker {
    /// Keyword shapes: Kubernetes decodes the schema into a typed struct, so a
    /// keyword of the wrong JSON type would be rejected before any other check.
    fn keyword_shapes(&mut self, s: &Map<String, Value>, p: &str) {
        for (k, v) in s {
            if v.is_null() {
                continue;
            }
            let k = k.as_str();
            let want = if STRING_KEYS.contains(&k) {
                (!v.is_string()).then_some("must be a string")
            } else if BOOL_KEYS.contains(&k) {
                (!v.is_boolean()).then_some("must be a boolean")
            } else if NUMBER_KEYS.contains(&k) {
                (!v.is_number()).then_some("must be a number")
            } else if COUNT_KEYS.contains(&k) {
                let ok = v.as_u64().is_some() || v.as_f64().is_some_and(|f| f >= 0.0 && f.fract() == 0.0);
                (!ok).then_some("must be a non-negative integer")
            } else if STRING_LIST_KEYS.contains(&k) {
                let ok = v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
                (!ok).then_some("must be a list of strings")
            } else if LIST_KEYS.contains(&k) {
                (!v.is_array()).then_some("must be a list")
            } else if OBJECT_KEYS.contains(&k) {
                (!v.is_object()).then_some("must be an object")
            } else if k == "items" {
                (!v.is_object() && !v.is_array()).then_some("must be a schema object")
            } else if k == "additionalProperties" {
                (!v.is_object() && !v.is_boolean()).then_some("must be a boolean or a schema object")
            } else {
                None
            };
            if let Some(detail) = want {
                invalid(&mut self.out, child(p, k), &fmt_value(v), detail);
            }
        }
    }

    /// The static checks Kubernetes applies to every schema node, including
    /// those under logical junctors.
    fn spec_node(&mut self, s: &Value, p: &str, ctx: &SpecCtx, depth: usize) {
        if depth > MAX_DEPTH {
            forbidden(&mut self.out, p.to_string(), "schema is nested too deeply");
            return;
        }
        let Some(m) = s.as_object() else {
            invalid(&mut self.out, p.to_string(), &fmt_value(s), "must be a schema object");
            return;
        };
        self.keyword_shapes(m, p);

        let ty = type_of(s);
        if ty == "null" {
            forbidden(&mut self.out, child(p, "type"), "type cannot be set to null, use nullable as an alternative");
        } else if !ty.is_empty() && !SCHEMA_TYPES.contains(&ty) {
            not_supported(&mut self.out, child(p, "type"), &quote(ty), &strings(&SCHEMA_TYPES));
        }
        if default_of(s).is_some() {
            if let Some(reason) = &ctx.no_defaults {
                forbidden(&mut self.out, child(p, "default"), &format!("must not be set {reason}"));
            }
        }
        for key in ["id", "$schema", "additionalItems", "patternProperties", "definitions", "dependencies", "$ref"] {
            if get(s, key).is_some_and(|v| !v.is_null()) {
                forbidden(&mut self.out, child(p, key), &format!("{key} is not supported"));
            }
        }
        if get(s, "items").is_some_and(Value::is_array) {
            forbidden(&mut self.out, child(p, "items"), "items must be a schema object and not an array");
        }
        if ctx.inside_meta && flag(s, EMBEDDED) {
            forbidden(&mut self.out, child(p, EMBEDDED), "must not be used inside of resource meta");
        }
        if flag(s, "uniqueItems") {
            forbidden(
                &mut self.out,
                child(p, "uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            );
        }

        let has_props = props_of(s).is_some_and(|p| !p.is_empty());
        match addl_of(s) {
            Addl::Absent => {}
            Addl::Bool(allows) => {
                if has_props && !allows {
                    forbidden(&mut self.out, child(p, "additionalProperties"), "additionalProperties and properties are mutual exclusive");
                }
            }
            Addl::Schema(a) => {
                if has_props {
                    forbidden(&mut self.out, child(p, "additionalProperties"), "additionalProperties and properties are mutual exclusive");
                }
                let mut sub = ctx.nested();
                if ctx.inside_meta {
                    // Pruning cannot tell which map entries a default would belong to.
                    sub.no_defaults = Some("inside additionalProperties applying to object metadata".into());
                }
                self.spec_node(a, &child(p, "additionalProperties"), &sub, depth + 1);
            }
        }
        if let Some(props) = props_of(s) {
            for (k, ps) in props {
                let mut sub = ctx.nested();
                if (ctx.is_root || flag(s, EMBEDDED)) && META_FIELDS.contains(&k.as_str()) {
                    sub.inside_meta = true;
                    if ctx.is_root {
                        sub.no_defaults = Some(format!("in top-level {k}"));
                    }
                }
                self.spec_node(ps, &keyed(&child(p, "properties"), k), &sub, depth + 1);
            }
        }
        if let Some(not) = get(s, "not").filter(|v| v.is_object()) {
            self.spec_node(not, &child(p, "not"), &ctx.nested(), depth + 1);
        }
        for junctor in ["allOf", "oneOf", "anyOf"] {
            for (i, x) in array_of(s, junctor).iter().enumerate() {
                self.spec_node(x, &indexed(&child(p, junctor), i), &ctx.nested(), depth + 1);
            }
        }
        if let Some(items) = items_of(s) {
            self.spec_node(items, &child(p, "items"), &ctx.nested(), depth + 1);
        }

        if matches!(get(s, PRESERVE), Some(Value::Bool(false))) {
            invalid(&mut self.out, child(p, PRESERVE), "false", "must be true or undefined");
        }
        self.spec_extensions(s, m, p, ty);

        if let Some(pattern) = str_of(s, "pattern") {
            if let Err(e) = Regex::new(pattern) {
                let detail = format!("must be a valid regular expression, but isn't: {e}");
                invalid(&mut self.out, child(p, "pattern"), &quote(pattern), &detail);
            }
        }
        for (i, rule) in array_of(s, VALIDATIONS).iter().enumerate() {
            let rp = indexed(&child(p, VALIDATIONS), i);
            if !rule.is_object() {
                invalid(&mut self.out, rp, &fmt_value(rule), "must be an object");
            } else if str_of(rule, "rule").is_none_or(|r| r.trim().is_empty()) {
                required(&mut self.out, child(&rp, "rule"), "rule is not specified");
            }
        }
    }

    /// `x-kubernetes-map-type`, `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`.
    fn spec_extensions(&mut self, s: &Value, m: &Map<String, Value>, p: &str, ty: &str) {
        let map_type = str_of(s, MAP_TYPE);
        if m.get(MAP_TYPE).is_some_and(|v| !v.is_null()) && ty != "object" {
            let d = "must be object if x-kubernetes-map-type is specified";
            if ty.is_empty() {
                required(&mut self.out, child(p, "type"), d);
            } else {
                invalid(&mut self.out, child(p, "type"), &quote(ty), d);
            }
        }
        if let Some(mt) = map_type {
            if mt != "atomic" && mt != "granular" {
                not_supported(&mut self.out, child(p, MAP_TYPE), &quote(mt), &strings(&["atomic", "granular"]));
            }
        }

        let list_type = str_of(s, LIST_TYPE);
        if m.get(LIST_TYPE).is_some_and(|v| !v.is_null()) && ty != "array" {
            let d = "must be array if x-kubernetes-list-type is specified";
            if ty.is_empty() {
                required(&mut self.out, child(p, "type"), d);
            } else {
                invalid(&mut self.out, child(p, "type"), &quote(ty), d);
            }
        }
        if let Some(lt) = list_type {
            if !["atomic", "set", "map"].contains(&lt) {
                not_supported(&mut self.out, child(p, LIST_TYPE), &quote(lt), &strings(&["atomic", "set", "map"]));
            }
        }

        let keys: Vec<&str> = array_of(s, LIST_MAP_KEYS).iter().filter_map(Value::as_str).collect();
        let keys_repr = get(s, LIST_MAP_KEYS).map(fmt_value).unwrap_or_default();
        if !keys.is_empty() {
            let d = "must be map if x-kubernetes-list-map-keys is non-empty";
            match list_type {
                None => required(&mut self.out, child(p, LIST_TYPE), d),
                Some("map") => {}
                Some(lt) => invalid(&mut self.out, child(p, LIST_TYPE), &quote(lt), d),
            }
        }
        if list_type == Some("map") {
            if keys.is_empty() {
                required(&mut self.out, child(p, LIST_MAP_KEYS), "must not be empty if x-kubernetes-list-type is map");
            }
            match items_of(s) {
                None => {
                    if !get(s, "items").is_some_and(Value::is_array) {
                        required(&mut self.out, child(p, "items"), "must have a schema if x-kubernetes-list-type is map");
                    }
                }
                Some(items) if type_of(items) != "object" => {
                    invalid(
                        &mut self.out,
                        child(&child(p, "items"), "type"),
                        &quote(type_of(items)),
                        "must be object if parent array's x-kubernetes-list-type is map",
                    );
                }
                Some(items) => {
                    let mut seen: Vec<&str> = Vec::new();
                    let item_props = props_of(items);
                    for k in &keys {
                        match item_props.and_then(|ip| ip.get(*k)) {
                            Some(ks) => {
                                let kt = type_of(ks);
                                if kt == "array" || kt == "object" {
                                    invalid(
                                        &mut self.out,
                                        child(&keyed(&child(&child(p, "items"), "properties"), k), "type"),
                                        &quote(kt),
                                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                    );
                                }
                            }
                            None => {
                                invalid(&mut self.out, child(p, LIST_MAP_KEYS), &keys_repr, "entries must all be names of item properties")
                            }
                        }
                        if seen.contains(k) {
                            invalid(&mut self.out, child(p, LIST_MAP_KEYS), &keys_repr, "must not contain duplicate entries");
                        }
                        seen.push(k);
                    }
                }
            }
        }

        // Set and map lists compare whole items or keys; null would make that ambiguous.
        if let (Some(lt @ ("set" | "map")), Some(items)) = (list_type, items_of(s)) {
            if flag(items, "nullable") {
                forbidden(
                    &mut self.out,
                    child(&child(p, "items"), "nullable"),
                    &format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
                );
            }
            if lt == "map" {
                let req: Vec<&str> = array_of(items, "required").iter().filter_map(Value::as_str).collect();
                for k in &keys {
                    let Some(ks) = props_of(items).and_then(|ip| ip.get(*k)) else { continue };
                    let kp = keyed(&child(&child(p, "items"), "properties"), k);
                    if !req.contains(k) && default_of(ks).is_none() {
                        required(
                            &mut self.out,
                            child(&kp, "default"),
                            "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                        );
                    }
                    if flag(ks, "nullable") {
                        forbidden(
                            &mut self.out,
                            child(&kp, "nullable"),
                            "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                        );
                    }
                }
            }
        }
    }

    /// The invariants of a structural schema along its structure
    /// (properties, items, additionalProperties).
    fn structural_node(&mut self, s: &Value, p: &str, lvl: Level, depth: usize) {
        if depth > MAX_DEPTH || !s.is_object() {
            // Already reported by the static checks.
            return;
        }
        let ty = type_of(s);
        if ty == "array" && get(s, "items").is_none_or(Value::is_null) {
            required(&mut self.out, child(p, "items"), "must be specified");
        }
        if let Some(items) = items_of(s) {
            self.structural_node(items, &child(p, "items"), Level::Item, depth + 1);
        }
        if let Some(props) = props_of(s) {
            for (k, ps) in props {
                self.structural_node(ps, &keyed(&child(p, "properties"), k), Level::Field, depth + 1);
            }
        }
        let addl = addl_of(s);
        if !matches!(addl, Addl::Absent) {
            if lvl == Level::Root {
                forbidden(&mut self.out, child(p, "additionalProperties"), "must not be used at the root");
            }
            if let Addl::Schema(a) = addl {
                self.structural_node(a, &child(p, "additionalProperties"), Level::Field, depth + 1);
            }
        }

        let int_or_string = flag(s, INT_OR_STRING);
        let preserve = flag(s, PRESERVE);
        let embedded = flag(s, EMBEDDED);
        if int_or_string && preserve {
            invalid(&mut self.out, child(p, PRESERVE), "true", "must be false if x-kubernetes-int-or-string is true");
        }
        if int_or_string && embedded {
            invalid(&mut self.out, child(p, EMBEDDED), "true", "must be false if x-kubernetes-int-or-string is true");
        }

        // The int-or-string idiom puts types under anyOf, which is otherwise forbidden.
        let skip_any_of = is_int_or_string_any_of(s);
        let skip_first_all_of = array_of(s, "allOf").first().is_some_and(is_int_or_string_any_of);
        self.nested_junctors(s, p, skip_any_of, skip_first_all_of, lvl, depth);

        let check_meta = lvl == Level::Root || embedded;
        if embedded && ty != "object" {
            let d = "must be object if x-kubernetes-embedded-resource is true";
            if ty.is_empty() {
                required(&mut self.out, child(p, "type"), d);
            } else {
                invalid(&mut self.out, child(p, "type"), &quote(ty), d);
            }
        } else if ty.is_empty() && !int_or_string && !preserve {
            let d = match lvl {
                Level::Root => "must not be empty at the root",
                Level::Item => "must not be empty for specified array items",
                Level::Field => "must not be empty for specified object fields",
            };
            required(&mut self.out, child(p, "type"), d);
        }
        if embedded && !matches!(addl, Addl::Absent) {
            forbidden(&mut self.out, child(p, "additionalProperties"), "must not be used if x-kubernetes-embedded-resource is set");
        }
        if lvl == Level::Root && !ty.is_empty() && ty != "object" {
            invalid(&mut self.out, child(p, "type"), &quote(ty), "must be object at the root");
        }

        let props = props_of(s);
        if check_meta {
            for k in ["kind", "apiVersion"] {
                if let Some(ks) = props.and_then(|ps| ps.get(k)) {
                    let kt = type_of(ks);
                    if kt != "string" {
                        invalid(&mut self.out, child(&keyed(&child(p, "properties"), k), "type"), &quote(kt), "must be string");
                    }
                }
            }
        }
        if let Some(md) = props.and_then(|ps| ps.get("metadata")) {
            let mp = keyed(&child(p, "properties"), "metadata");
            if check_meta && type_of(md) != "object" {
                invalid(&mut self.out, child(&mp, "type"), &quote(type_of(md)), "must be object");
            }
            if lvl == Level::Root && !root_metadata_restricts_only_names(md) {
                forbidden(
                    &mut self.out,
                    mp,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                );
            }
        }
        if embedded && !preserve && props.is_none_or(|ps| ps.is_empty()) {
            required(
                &mut self.out,
                child(p, "properties"),
                "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            );
        }
    }

    /// Walks allOf/anyOf/oneOf/not of a node, whose schemas may only validate values.
    fn nested_junctors(&mut self, s: &Value, p: &str, skip_any_of: bool, skip_first_all_of: bool, lvl: Level, depth: usize) {
        if !skip_any_of {
            for (i, x) in array_of(s, "anyOf").iter().enumerate() {
                self.nested_node(x, &indexed(&child(p, "anyOf"), i), false, lvl, depth + 1);
            }
        }
        for (i, x) in array_of(s, "allOf").iter().enumerate() {
            self.nested_node(x, &indexed(&child(p, "allOf"), i), skip_first_all_of && i == 0, lvl, depth + 1);
        }
        for (i, x) in array_of(s, "oneOf").iter().enumerate() {
            self.nested_node(x, &indexed(&child(p, "oneOf"), i), false, lvl, depth + 1);
        }
        if let Some(not) = get(s, "not") {
            self.nested_node(not, &child(p, "not"), false, lvl, depth + 1);
        }
    }

    fn nested_node(&mut self, v: &Value, p: &str, skip_any_of: bool, lvl: Level, depth: usize) {
        if depth > MAX_DEPTH || !v.is_object() {
            return;
        }
        self.nested_junctors(v, p, skip_any_of, false, lvl, depth);
        if let Some(items) = items_of(v) {
            self.nested_node(items, &child(p, "items"), false, lvl, depth + 1);
        }
        if let Some(props) = props_of(v) {
            for (k, ps) in props {
                self.nested_node(ps, &keyed(&child(p, "properties"), k), false, Level::Field, depth + 1);
            }
        }
        let out = &mut self.out;
        if !type_of(v).is_empty() {
            forbidden(out, child(p, "type"), "must be empty to be structural");
        }
        if get(v, "additionalProperties").is_some_and(|a| !a.is_null()) {
            forbidden(out, child(p, "additionalProperties"), "must be undefined to be structural");
        }
        if default_of(v).is_some() {
            forbidden(out, child(p, "default"), "must be undefined to be structural");
        }
        for key in ["title", "description"] {
            if is_set(v, key) {
                forbidden(out, child(p, key), "must be empty to be structural");
            }
        }
        if flag(v, "nullable") {
            forbidden(out, child(p, "nullable"), "must be false to be structural");
        }
        if get(v, "externalDocs").is_some_and(|d| !d.is_null()) {
            forbidden(out, child(p, "externalDocs"), "must be undefined to be structural");
        }
        for key in [PRESERVE, EMBEDDED, INT_OR_STRING] {
            if flag(v, key) {
                forbidden(out, child(p, key), "must be false to be structural");
            }
        }
        if is_set(v, LIST_MAP_KEYS) {
            forbidden(out, child(p, LIST_MAP_KEYS), "must be empty to be structural");
        }
        for key in [LIST_TYPE, MAP_TYPE] {
            if get(v, key).is_some_and(|x| !x.is_null()) {
                forbidden(out, child(p, key), "must be undefined to be structural");
            }
        }
        if is_set(v, VALIDATIONS) {
            forbidden(out, child(p, VALIDATIONS), "must be empty to be structural");
        }
        if props_of(v).is_some_and(|ps| ps.contains_key("metadata")) {
            forbidden(out, keyed(&child(p, "properties"), "metadata"), "must not be specified in a nested context");
        }
    }

    /// Fields and items mentioned under the root's junctors must also be part of
    /// the structure. Kubernetes checks this from the root's junctors only.
    fn completeness_vv(&mut self, v: &Value, s: Option<&Value>, sp: &str, vp: &str, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(not) = get(v, "not").filter(|x| x.is_object()) {
            self.completeness_nested(not, s, sp, &child(vp, "not"), depth + 1);
        }
        for junctor in ["allOf", "anyOf", "oneOf"] {
            for (i, x) in array_of(v, junctor).iter().enumerate() {
                if x.is_object() {
                    self.completeness_nested(x, s, sp, &indexed(&child(vp, junctor), i), depth + 1);
                }
            }
        }
    }

    fn completeness_nested(&mut self, v: &Value, s: Option<&Value>, sp: &str, vp: &str, depth: usize) {
        let Some(s) = s else {
            required(&mut self.out, sp.to_string(), &format!("because it is defined in {vp}"));
            return;
        };
        self.completeness_vv(v, Some(s), sp, vp, depth);
        if let Some(items) = items_of(v) {
            self.completeness_nested(items, items_of(s), &child(sp, "items"), &child(vp, "items"), depth + 1);
        }
        if let Some(props) = props_of(v) {
            for (k, pv) in props {
                let ssub = keyed(&child(sp, "properties"), k);
                let vsub = keyed(&child(vp, "properties"), k);
                match props_of(s).and_then(|ps| ps.get(k)) {
                    Some(sk) => self.completeness_nested(pv, Some(sk), &ssub, &vsub, depth + 1),
                    None => required(&mut self.out, ssub, &format!("because it is defined in {vsub}")),
                }
            }
        }
    }

    /// Defaults must survive pruning unchanged and validate against their own schema.
    fn check_defaults(&mut self, s: &Value, p: &str, is_root: bool, inside_meta: bool, depth: usize) {
        if depth > MAX_DEPTH || !s.is_object() {
            return;
        }
        let embedded = flag(s, EMBEDDED);
        let resource_root = is_root || embedded;
        let inside_meta = inside_meta && !embedded;
        // Defaults inside TypeMeta/ObjectMeta would need ObjectMeta coercion, which
        // lives with the caller; the top-level ones are forbidden outright anyway.
        if let (Some(d), false) = (default_of(s), inside_meta) {
            let dp = child(p, "default");
            let mut pruned = d.clone();
            let mut dropped = Vec::new();
            prune_node(&mut pruned, Some(s), "", resource_root, &mut dropped, 0);
            if !dropped.is_empty() {
                invalid(&mut self.out, dp.clone(), &fmt_value(d), "must not have unknown fields");
            }
            let mut v = Validator::new(dp);
            v.node(d, None, s, "", 0, is_root);
            self.out.append(&mut v.out);
        }
        if let Some(items) = items_of(s) {
            self.check_defaults(items, &child(p, "items"), false, inside_meta, depth + 1);
        }
        if let Some(props) = props_of(s) {
            for (k, ps) in props {
                let sub_meta = inside_meta || (resource_root && META_FIELDS.contains(&k.as_str()));
                self.check_defaults(ps, &keyed(&child(p, "properties"), k), false, sub_meta, depth + 1);
            }
        }
    }
}

/// Exactly `{type: <ty>}`, ignoring keywords left at their zero value.
fn only_type(v: &Value, ty: &str) -> bool {
    let Some(m) = v.as_object() else { return false };
    m.iter().all(|(k, x)| if k == "type" { x.as_str() == Some(ty) } else { is_zero(x) })
        && m.get("type").and_then(Value::as_str) == Some(ty)
}

fn is_int_or_string_any_of(s: &Value) -> bool {
    match array_of(s, "anyOf") {
        [a, b] => only_type(a, "integer") && only_type(b, "string"),
        _ => false,
    }
}

/// Root metadata may only restrict name and generateName (and say it is an object).
fn root_metadata_restricts_only_names(md: &Value) -> bool {
    let Some(m) = md.as_object() else { return true };
    m.iter().all(|(k, v)| match k.as_str() {
        "type" | "default" => true,
        "properties" => match v.as_object() {
            Some(ps) => ps.keys().all(|n| n == "name" || n == "generateName"),
            None => is_zero(v),
        },
        _ => is_zero(v),
    })
}

// ---------------------------------------------------------------------------
// Pruning.
// ---------------------------------------------------------------------------

/// Drops fields not described by the schema (pruning) and returns their paths,
/// sorted, e.g. `spec.foo` or `spec.items[0].bar`.
///
/// At the root, `apiVersion`, `kind` and `metadata` are kept (metadata is
/// pruned to ObjectMeta by the caller, not here). Subtrees with
/// `x-kubernetes-preserve-unknown-fields: true` are kept, although properties
/// they do describe are still pruned; `x-kubernetes-embedded-resource` keeps
/// `apiVersion`/`kind`/`metadata` in that subtree.
pub fn prune(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    prune_node(obj, Some(schema), "", true, &mut out, 0);
    out.sort();
    out
}

/// `s == None` means "no schema here": every object key below is unknown.
/// `resource_root` marks the root of a resource, where meta fields are kept.
fn prune_node(x: &mut Value, s: Option<&Value>, path: &str, resource_root: bool, out: &mut Vec<String>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(sv) = s {
        if flag(sv, PRESERVE) {
            skip_prune(x, sv, path, resource_root, out, depth);
            return;
        }
    }
    match x {
        Value::Object(m) => {
            let Some(sv) = s else {
                out.extend(m.keys().map(|k| child(path, k)));
                m.clear();
                return;
            };
            let keep_meta = resource_root || flag(sv, EMBEDDED);
            let props = props_of(sv);
            let addl = addl_of(sv);
            // retain keeps the remaining keys in their original order.
            m.retain(|k, v| {
                if keep_meta && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                let p = child(path, k);
                if let Some(ps) = props.and_then(|ps| ps.get(k)) {
                    prune_node(v, Some(ps), &p, false, out, depth + 1);
                    return true;
                }
                match addl {
                    Addl::Schema(a) => {
                        prune_node(v, Some(a), &p, false, out, depth + 1);
                        true
                    }
                    // Like Kubernetes: a boolean additionalProperties keeps the key
                    // but has no schema for what is inside it.
                    Addl::Bool(_) => {
                        prune_node(v, None, &p, false, out, depth + 1);
                        true
                    }
                    Addl::Absent => {
                        out.push(p);
                        false
                    }
                }
            });
        }
        Value::Array(a) => {
            let items = s.and_then(items_of);
            for (i, v) in a.iter_mut().enumerate() {
                prune_node(v, items, &indexed(path, i), false, out, depth + 1);
            }
        }
        _ => {}
    }
}

/// Under x-kubernetes-preserve-unknown-fields unknown keys stay, but whatever
/// the schema does describe is pruned normally again.
fn skip_prune(x: &mut Value, s: &Value, path: &str, resource_root: bool, out: &mut Vec<String>, depth: usize) {
    match x {
        Value::Object(m) => {
            let keep_meta = resource_root || flag(s, EMBEDDED);
            let props = props_of(s);
            let addl = addl_of(s);
            for (k, v) in m.iter_mut() {
                if keep_meta && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let p = child(path, k);
                if let Some(ps) = props.and_then(|ps| ps.get(k)) {
                    prune_node(v, Some(ps), &p, false, out, depth + 1);
                } else {
                    match addl {
                        Addl::Schema(a) => prune_node(v, Some(a), &p, false, out, depth + 1),
                        Addl::Bool(_) => prune_node(v, None, &p, false, out, depth + 1),
                        Addl::Absent => {}
                    }
                }
            }
        }
        Value::Array(a) => {
            // Without an items schema the preserved array stays as it is.
            if let Some(items) = items_of(s) {
                for (i, v) in a.iter_mut().enumerate() {
                    prune_node(v, Some(items), &indexed(path, i), false, out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Defaulting.
// ---------------------------------------------------------------------------

/// Applies `default` values from the schema where a field is absent, or is
/// null while the schema does not say `nullable: true`. Recurses into objects,
/// additionalProperties and array items, including into defaults just applied.
///
/// As Kubernetes does right before defaulting, nulls of non-nullable fields
/// that have no default are removed, so that they read as "unset" rather than
/// failing validation; nulls of nullable fields are kept as they are.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    prune_nulls(obj, Some(schema), 0);
    default_node(obj, schema, 0);
}

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

fn prune_nulls(x: &mut Value, s: Option<&Value>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => m.retain(|k, v| {
            let fs = field_schema(s, k);
            if v.is_null() {
                if let Some(fs) = fs {
                    return nullable(fs) || default_of(fs).is_some();
                }
                return true;
            }
            prune_nulls(v, fs, depth + 1);
            true
        }),
        Value::Array(a) => {
            let items = s.and_then(items_of);
            for v in a.iter_mut() {
                prune_nulls(v, items, depth + 1);
            }
        }
        _ => {}
    }
}

fn default_node(x: &mut Value, s: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => {
            let props = props_of(s);
            if let Some(props) = props {
                for (k, ps) in props {
                    let Some(d) = default_of(ps) else { continue };
                    let missing = match m.get(k) {
                        None => true,
                        Some(Value::Null) => !nullable(ps),
                        Some(_) => false,
                    };
                    if missing {
                        m.insert(k.clone(), d.clone());
                    }
                }
            }
            let addl = match addl_of(s) {
                Addl::Schema(a) => Some(a),
                _ => None,
            };
            for (k, v) in m.iter_mut() {
                if let Some(ps) = props.and_then(|ps| ps.get(k)) {
                    default_node(v, ps, depth + 1);
                } else if let Some(a) = addl {
                    if v.is_null() && !nullable(a) {
                        if let Some(d) = default_of(a) {
                            *v = d.clone();
                        }
                    }
                    default_node(v, a, depth + 1);
                }
            }
        }
        Value::Array(a) => {
            let Some(items) = items_of(s) else { return };
            for v in a.iter_mut() {
                if v.is_null() && !nullable(items) {
                    if let Some(d) = default_of(items) {
                        *v = d.clone();
                    }
                }
                default_node(v, items, depth + 1);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Validation.
// ---------------------------------------------------------------------------

/// Validates an object against the schema and returns every failure.
///
/// Covers type (with `x-kubernetes-int-or-string`), nullable, required, enum,
/// minimum/maximum (and their exclusive forms), multipleOf, minLength/
/// maxLength, pattern, minItems/maxItems, uniqueItems, min/maxProperties,
/// `additionalProperties: false`, formats (loosely: int32, int64, date-time,
/// date, byte, uuid, ipv4, ipv6, cidr, hostname, email), list-type set/map
/// uniqueness, embedded resources' apiVersion/kind, and allOf/anyOf/oneOf/not.
/// `metadata` at the root is skipped except for restrictions on its `name`
/// and `generateName`. Fields are value paths such as `spec.items[0].name`.
pub fn validate(obj: &Value, schema: &Value) -> Vec<Cause> {
    validate_update(obj, None, schema)
}

/// Validates an update of `old` to `obj`, ratcheting as kube-apiserver does for custom
/// resources (CRDValidationRatcheting, on by default since 1.30): a value that is
/// unchanged from the value it correlates with in `old` is not validated again, so a
/// schema tightened after an object was stored does not block writes that leave its
/// invalid fields alone. Object properties correlate by name, the items of a
/// list-type map by their keys and of a list-type set by value; the items of other
/// lists do not correlate (only the list as a whole). With `old` None (a create) it is
/// [`validate`].
pub fn validate_update(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<Cause> {
    let mut v = Validator::new(String::new());
    v.node(obj, old, schema, "", 0, true);
    v.out
}

struct Validator {
    /// Prefix of every cause's field (the CRD path of a default being checked).
    base: String,
    /// Compiled patterns, shared by all nodes of one validation.
    regexes: HashMap<String, Result<Regex, String>>,
    out: Vec<Cause>,
}

impl Validator {
    fn new(base: String) -> Self {
        Validator { base, regexes: HashMap::new(), out: Vec::new() }
    }

    /// Runs a node into a separate list, for the logical junctors.
    fn sub(&mut self, x: &Value, s: &Value, path: &str, depth: usize, root: bool) -> Vec<Cause> {
        let saved = std::mem::take(&mut self.out);
        self.node(x, None, s, path, depth, root);
        std::mem::replace(&mut self.out, saved)
    }

    /// Validates `x` against `s`; `old` is the value it correlates with in the object
    /// being updated, if any.
    fn node(&mut self, x: &Value, old: Option<&Value>, s: &Value, path: &str, depth: usize, root: bool) {
        if !s.is_object() || old == Some(x) {
            return;
        }
        if depth > MAX_DEPTH {
            invalid(&mut self.out, join_field(&self.base, path), "\"\"", "value is nested too deeply");
            return;
        }
        let types: Vec<&str> = if flag(s, INT_OR_STRING) {
            vec!["integer", "string"]
        } else {
            match type_of(s) {
                "" => Vec::new(),
                t => vec![t],
            }
        };
        if x.is_null() {
            // Only the type and enum apply to null, as in kube-openapi.
            if nullable(s) {
                return;
            }
            if !types.is_empty() {
                let detail = format!("{} must be of type {}: \"null\"", in_body(path), types.join(","));
                type_invalid(&mut self.out, join_field(&self.base, path), "\"null\"", &detail);
            } else {
                self.check_enum(x, s, path);
            }
            return;
        }
        if !types.is_empty() && !type_matches(&types, x) {
            let actual = json_type(x);
            let detail = format!("{} must be of type {}: {}", in_body(path), types.join(","), quote(actual));
            type_invalid(&mut self.out, join_field(&self.base, path), &quote(actual), &detail);
        }
        self.junctors(x, s, path, depth, root);
        match x {
            Value::String(st) => self.check_string(st, s, path),
            Value::Number(n) => self.check_number(n, s, path),
            Value::Array(a) => self.check_array(a, old.and_then(Value::as_array), s, path, depth),
            _ => {}
        }
        self.check_enum(x, s, path);
        if let Value::Object(m) = x {
            self.check_object(m, old.and_then(Value::as_object), s, path, depth, root);
            if !root && flag(s, EMBEDDED) {
                self.check_embedded(m, path);
            }
        }
    }

    fn composite(&mut self, path: &str, msg: String) {
        invalid(&mut self.out, join_field(&self.base, path), "\"\"", &msg);
    }

    fn junctors(&mut self, x: &Value, s: &Value, path: &str, depth: usize, root: bool) {
        let any_of = array_of(s, "anyOf");
        if !any_of.is_empty() {
            // Like kube-openapi, report the alternative that came closest.
            let mut best: Option<Vec<Cause>> = None;
            let mut ok = false;
            for alt in any_of {
                let r = self.sub(x, alt, path, depth + 1, root);
                if r.is_empty() {
                    ok = true;
                    break;
                }
                if best.as_ref().is_none_or(|b| r.len() < b.len()) {
                    best = Some(r);
                }
            }
            if !ok {
                self.composite(path, format!("{} must validate at least one schema (anyOf)", quote(path)));
                self.out.extend(best.unwrap_or_default());
            }
        }

        let one_of = array_of(s, "oneOf");
        if !one_of.is_empty() {
            let mut valid = 0usize;
            let mut best: Option<Vec<Cause>> = None;
            for alt in one_of {
                let r = self.sub(x, alt, path, depth + 1, root);
                if r.is_empty() {
                    valid += 1;
                } else if best.as_ref().is_none_or(|b| r.len() < b.len()) {
                    best = Some(r);
                }
            }
            if valid != 1 {
                let found = if valid == 0 { "Found none valid".to_string() } else { format!("Found {valid} valid alternatives") };
                self.composite(path, format!("{} must validate one and only one schema (oneOf). {found}", quote(path)));
                if valid == 0 {
                    self.out.extend(best.unwrap_or_default());
                }
            }
        }

        let all_of = array_of(s, "allOf");
        if !all_of.is_empty() {
            let mut valid = 0usize;
            let mut errs = Vec::new();
            for alt in all_of {
                let mut r = self.sub(x, alt, path, depth + 1, root);
                if r.is_empty() {
                    valid += 1;
                }
                errs.append(&mut r);
            }
            self.out.append(&mut errs);
            if valid != all_of.len() {
                let none = if valid == 0 { ". None validated" } else { "" };
                self.composite(path, format!("{} must validate all the schemas (allOf){none}", quote(path)));
            }
        }

        if let Some(not) = get(s, "not").filter(|n| n.is_object()) {
            if self.sub(x, not, path, depth + 1, root).is_empty() {
                self.composite(path, format!("{} must not validate the schema (not)", quote(path)));
            }
        }
    }

    fn regex(&mut self, pattern: &str) -> Result<Regex, String> {
        self.regexes.entry(pattern.to_string()).or_insert_with(|| Regex::new(pattern).map_err(|e| e.to_string())).clone()
    }

    fn check_string(&mut self, st: &str, s: &Value, path: &str) {
        // Lengths count characters (runes), not bytes, as in kube-openapi.
        let len = st.chars().count() as u64;
        let value = quote(st);
        if let Some(max) = count_of(s, "maxLength") {
            if len > max {
                self.out.push(Cause {
                    reason: TOO_LONG,
                    message: format!("Too long: may not be longer than {max}"),
                    field: join_field(&self.base, path),
                });
            }
        }
        if let Some(min) = count_of(s, "minLength") {
            if len < min {
                let d = format!("{} should be at least {min} chars long", in_body(path));
                invalid(&mut self.out, join_field(&self.base, path), &value, &d);
            }
        }
        if let Some(pattern) = str_of(s, "pattern") {
            match self.regex(pattern) {
                Ok(re) => {
                    if !re.is_match(st) {
                        let d = format!("{} should match '{pattern}'", in_body(path));
                        invalid(&mut self.out, join_field(&self.base, path), &value, &d);
                    }
                }
                Err(e) => {
                    let d = format!("{} should match '{pattern}, but pattern is invalid: {e}'", in_body(path));
                    invalid(&mut self.out, join_field(&self.base, path), &value, &d);
                }
            }
        }
        if let Some(format) = str_of(s, "format") {
            if !string_format_ok(format, st) {
                let d = format!("{} must be of type {format}: {value}", in_body(path));
                type_invalid(&mut self.out, join_field(&self.base, path), &value, &d);
            }
        }
    }

    fn check_number(&mut self, n: &Number, s: &Value, path: &str) {
        let f = n.as_f64().unwrap_or(f64::NAN);
        let value = fmt_number(n);
        if let Some(m) = num_of(s, "multipleOf").filter(|m| *m > 0.0) {
            let not_multiple = match n.as_i64() {
                // Exact arithmetic for integers, as kube-openapi does.
                Some(i) if m.fract() == 0.0 && m < 9.0e18 => i.checked_rem(m as i64).is_some_and(|r| r != 0),
                _ => {
                    let q = if m < 1.0 { (1.0 / m) * f } else { f / m };
                    !(q.is_finite() && (q - q.round()).abs() < 1e-9)
                }
            };
            if not_multiple {
                let d = format!("{} should be a multiple of {}", in_body(path), go_float(m));
                invalid(&mut self.out, join_field(&self.base, path), &value, &d);
            }
        }
        let bound = |key: &str, excl_key: &str| -> Option<(f64, bool)> {
            // OpenAPI 3.0 spells exclusivity as a boolean next to the bound;
            // a numeric exclusive bound (newer JSON Schema) is accepted too.
            match (num_of(s, key), get(s, excl_key)) {
                (_, Some(Value::Number(e))) => e.as_f64().map(|e| (e, true)),
                (Some(b), e) => Some((b, matches!(e, Some(Value::Bool(true))))),
                (None, _) => None,
            }
        };
        if let Some((max, excl)) = bound("maximum", "exclusiveMaximum") {
            if (excl && f >= max) || (!excl && f > max) {
                let rel = if excl { "less than" } else { "less than or equal to" };
                let d = format!("{} should be {rel} {}", in_body(path), go_float(max));
                invalid(&mut self.out, join_field(&self.base, path), &value, &d);
            }
        }
        if let Some((min, excl)) = bound("minimum", "exclusiveMinimum") {
            if (excl && f <= min) || (!excl && f < min) {
                let rel = if excl { "greater than" } else { "greater than or equal to" };
                let d = format!("{} should be {rel} {}", in_body(path), go_float(min));
                invalid(&mut self.out, join_field(&self.base, path), &value, &d);
            }
        }
        if let Some(format) = str_of(s, "format") {
            let fits = match format {
                "int32" => match n.as_i64() {
                    Some(i) => i32::try_from(i).is_ok(),
                    None => n.as_u64().is_none() && (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&f),
                },
                "int64" => {
                    n.as_i64().is_some() || (n.as_u64().is_none() && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f))
                }
                _ => true,
            };
            if !fits {
                let d = format!("{} must be of type {format}: {}", in_body(path), quote(&value));
                type_invalid(&mut self.out, join_field(&self.base, path), &value, &d);
            }
        }
    }

    fn check_array(&mut self, a: &[Value], old: Option<&Vec<Value>>, s: &Value, path: &str, depth: usize) {
        if let Some(items) = items_of(s) {
            // The old items by what correlates them, indexed once: a long list would
            // otherwise cost a scan of the old list per item.
            let keys: Vec<&str> = array_of(s, LIST_MAP_KEYS).iter().filter_map(Value::as_str).collect();
            let correlation = |v: &Value| -> Option<String> {
                match str_of(s, LIST_TYPE) {
                    Some("set") => Some(canonical(v)),
                    Some("map") if v.is_object() && !keys.is_empty() => {
                        Some(canonical(&Value::Array(keys.iter().map(|k| v.get(*k).cloned().unwrap_or(Value::Null)).collect())))
                    }
                    _ => None,
                }
            };
            let old: HashMap<String, &Value> = old.into_iter().flatten().filter_map(|o| Some((correlation(o)?, o))).collect();
            for (i, v) in a.iter().enumerate() {
                let was = if old.is_empty() { None } else { correlation(v).and_then(|c| old.get(&c).copied()) };
                self.node(v, was, items, &indexed(path, i), depth + 1, false);
            }
        }
        let len = a.len() as u64;
        if let Some(min) = count_of(s, "minItems") {
            if len < min {
                let d = format!("{} should have at least {min} items", in_body(path));
                invalid(&mut self.out, join_field(&self.base, path), &len.to_string(), &d);
            }
        }
        if let Some(max) = count_of(s, "maxItems") {
            if len > max {
                self.out.push(Cause {
                    reason: TOO_MANY,
                    message: format!("Too many: {len}: must have at most {max} items"),
                    field: join_field(&self.base, path),
                });
            }
        }
        if flag(s, "uniqueItems") && !first_duplicates(a.iter().map(canonical)).is_empty() {
            let d = format!("{} shouldn't contain duplicates", in_body(path));
            invalid(&mut self.out, join_field(&self.base, path), "\"\"", &d);
        }
        match str_of(s, LIST_TYPE) {
            Some("set") => {
                for i in first_duplicates(a.iter().map(canonical)) {
                    let shown = a.get(i).map(fmt_value).unwrap_or_default();
                    self.out.push(Cause {
                        reason: DUPLICATE,
                        message: format!("Duplicate value: {shown}"),
                        field: join_field(&self.base, &indexed(path, i)),
                    });
                }
            }
            Some("map") => self.check_list_map(a, s, path),
            _ => {}
        }
    }

    /// Items of a list-type map must be objects with distinct key tuples.
    fn check_list_map(&mut self, a: &[Value], s: &Value, path: &str) {
        for (i, x) in a.iter().enumerate() {
            if !x.is_null() && !x.is_object() {
                invalid(
                    &mut self.out,
                    join_field(&self.base, &indexed(path, i)),
                    &fmt_value(x),
                    "must be an object for an array of list-type map",
                );
                return;
            }
        }
        let keys: Vec<&str> = array_of(s, LIST_MAP_KEYS).iter().filter_map(Value::as_str).collect();
        let tuples: Vec<Value> = a
            .iter()
            .map(|x| {
                let mut t = Map::new();
                for k in &keys {
                    if let Some(v) = x.get(*k) {
                        t.insert((*k).to_string(), v.clone());
                    }
                }
                Value::Object(t)
            })
            .collect();
        for i in first_duplicates(tuples.iter().map(canonical)) {
            let shown = tuples.get(i).map(fmt_value).unwrap_or_default();
            self.out.push(Cause {
                reason: DUPLICATE,
                message: format!("Duplicate value: {shown}"),
                field: join_field(&self.base, &indexed(path, i)),
            });
        }
    }

    fn check_enum(&mut self, x: &Value, s: &Value, path: &str) {
        let allowed = array_of(s, "enum");
        if allowed.is_empty() || allowed.iter().any(|e| json_eq(e, x)) {
            return;
        }
        let listed: Vec<String> = allowed
            .iter()
            .map(|e| match e {
                Value::String(v) => v.clone(),
                other => serde_json::to_string(other).unwrap_or_default(),
            })
            .collect();
        not_supported(&mut self.out, join_field(&self.base, path), &fmt_value(x), &listed);
    }

    fn check_object(&mut self, m: &Map<String, Value>, old: Option<&Map<String, Value>>, s: &Value, path: &str, depth: usize, root: bool) {
        let was = |k: &str| old.and_then(|o| o.get(k));
        let count = m.len() as u64;
        if let Some(min) = count_of(s, "minProperties") {
            if count < min {
                let d = format!("{} should have at least {min} properties", in_body(path));
                invalid(&mut self.out, join_field(&self.base, path), &count.to_string(), &d);
            }
        }
        if let Some(max) = count_of(s, "maxProperties") {
            if count > max {
                self.out.push(Cause {
                    reason: TOO_MANY,
                    message: format!("Too many: {count}: must have at most {max} items"),
                    field: join_field(&self.base, path),
                });
            }
        }
        let props = props_of(s);
        let declared = |k: &str| props.is_some_and(|ps| ps.contains_key(k));
        match addl_of(s) {
            Addl::Bool(false) => {
                for k in m.keys().filter(|k| !declared(k)) {
                    let d = format!("{} is a forbidden property", in_body(&child(path, k)));
                    invalid(&mut self.out, join_field(&self.base, path), &quote(k), &d);
                }
            }
            Addl::Schema(a) => {
                for (k, v) in m.iter().filter(|(k, _)| !declared(k)) {
                    if root && k == "metadata" {
                        continue;
                    }
                    self.node(v, was(k), a, &child(path, k), depth + 1, false);
                }
            }
            _ => {}
        }
        if let Some(props) = props {
            for (k, ps) in props {
                let Some(v) = m.get(k) else { continue };
                if root && k == "metadata" {
                    self.check_root_metadata(v, ps, depth);
                    continue;
                }
                self.node(v, was(k), ps, &child(path, k), depth + 1, false);
            }
        }
        for r in array_of(s, "required").iter().filter_map(Value::as_str) {
            if !m.contains_key(r) {
                required(&mut self.out, join_field(&self.base, &child(path, r)), "");
            }
        }
    }

    /// ObjectMeta is validated by the caller; the schema may only restrict
    /// name and generateName, which are checked here.
    fn check_root_metadata(&mut self, md: &Value, ms: &Value, depth: usize) {
        let Some(props) = props_of(ms) else { return };
        for k in ["name", "generateName"] {
            if let (Some(v), Some(ks)) = (md.get(k), props.get(k)) {
                self.node(v, None, ks, &child("metadata", k), depth + 2, false);
            }
        }
    }

    /// An embedded resource needs its TypeMeta, like any object sent to the API.
    fn check_embedded(&mut self, m: &Map<String, Value>, path: &str) {
        for k in ["apiVersion", "kind"] {
            let p = join_field(&self.base, &child(path, k));
            match m.get(k) {
                None => required(&mut self.out, p, "must not be empty"),
                Some(Value::String(v)) if v.is_empty() => invalid(&mut self.out, p, "\"\"", "must not be empty"),
                Some(Value::String(_)) => {}
                Some(other) => invalid(&mut self.out, p, &fmt_value(other), "must be a string"),
            }
        }
    }
}

/// Indices of the first repeat of each value, the ones Kubernetes reports.
fn first_duplicates(keys: impl Iterator<Item = String>) -> Vec<usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut dups = Vec::new();
    for (i, k) in keys.enumerate() {
        let times = seen.entry(k).or_insert(0);
        *times += 1;
        if *times == 2 {
            dups.push(i);
        }
    }
    dups
}

fn json_type(x: &Value) -> &'static str {
    match x {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// kube-openapi's type check: integral floats count as integers and integers as numbers.
fn type_matches(types: &[&str], x: &Value) -> bool {
    let actual = json_type(x);
    if types.contains(&actual) {
        return true;
    }
    match x {
        Value::Number(n) if actual == "number" => {
            types.contains(&"integer") && n.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
        }
        Value::Number(_) => types.contains(&"number"),
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// String formats (loose versions of the strfmt checks Kubernetes uses).
// ---------------------------------------------------------------------------

fn string_format_ok(format: &str, v: &str) -> bool {
    match format {
        "date-time" | "datetime" => is_date_time(v),
        "date" => is_date(v),
        "byte" => is_base64(v),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(v),
        "ipv4" => v.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => v.contains(':') && v.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(v),
        "hostname" => is_hostname(v),
        "email" => is_email(v),
        // Unknown formats, and numeric formats on strings, are not enforced.
        _ => true,
    }
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

fn is_date(v: &str) -> bool {
    let mut parts = v.split('-');
    let (Some(y), Some(m), Some(d), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    digits(y, 4).is_some() && digits(m, 2).is_some_and(|m| (1..=12).contains(&m)) && digits(d, 2).is_some_and(|d| (1..=31).contains(&d))
}

/// RFC 3339, loosely: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; the zone may be
/// omitted or written without colon, as strfmt's layouts allow.
fn is_date_time(v: &str) -> bool {
    let Some(sep) = v.find(['T', 't', ' ']) else { return false };
    let (date, rest) = (v.get(..sep).unwrap_or(""), v.get(sep + 1..).unwrap_or(""));
    // `get` rather than slicing: the input may hold multi-byte characters anywhere.
    let (Some(clock), Some(mut tail)) = (rest.get(..8), rest.get(8..)) else { return false };
    if !is_date(date) {
        return false;
    }
    let mut hms = clock.split(':');
    let (Some(h), Some(mi), Some(s), None) = (hms.next(), hms.next(), hms.next(), hms.next()) else {
        return false;
    };
    if !(digits(h, 2).is_some_and(|h| h < 24) && digits(mi, 2).is_some_and(|m| m < 60) && digits(s, 2).is_some_and(|s| s <= 60)) {
        return false;
    }
    if let Some(frac) = tail.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        tail = frac.get(n..).unwrap_or("");
    }
    match tail {
        "" | "Z" | "z" => true,
        zone => {
            let Some(off) = zone.strip_prefix(['+', '-']) else { return false };
            let (hh, mm) = match off.split_once(':') {
                Some(p) => p,
                None if off.len() == 4 => match (off.get(..2), off.get(2..)) {
                    (Some(h), Some(m)) => (h, m),
                    _ => return false,
                },
                None => return false,
            };
            digits(hh, 2).is_some_and(|h| h < 24) && digits(mm, 2).is_some_and(|m| m < 60)
        }
    }
}

fn is_base64(v: &str) -> bool {
    let body = v.trim_end_matches('=');
    v.len().is_multiple_of(4) && v.len() - body.len() <= 2 && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn is_uuid(v: &str) -> bool {
    let groups: Vec<&str> = v.split('-').collect();
    groups.len() == 5 && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_cidr(v: &str) -> bool {
    let Some((ip, bits)) = v.split_once('/') else { return false };
    let Ok(bits) = bits.parse::<u8>() else { return false };
    if ip.parse::<std::net::Ipv4Addr>().is_ok() {
        bits <= 32
    } else {
        ip.parse::<std::net::Ipv6Addr>().is_ok() && bits <= 128
    }
}

fn is_hostname(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 255
        && v.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn is_email(v: &str) -> bool {
    match v.rsplit_once('@') {
        Some((local, domain)) => !local.is_empty() && !domain.is_empty() && !domain.contains(char::is_whitespace),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PREFIX: &str = "spec.versions[0].schema.openAPIV3Schema";

    #[test]
    fn an_update_validates_only_what_changed_from_the_value_it_correlates_with() {
        let short = json!({"type": "string", "maxLength": 3});
        let schema = json!({"type": "object", "properties": {
            "name": short,
            "other": {"type": "string"},
            "entries": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}, "v": short}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": short},
            "plain": {"type": "array", "items": short},
        }});
        // Stored before the schema was tightened: every value is too long.
        let old = json!({"name": "toolong", "other": "a",
            "entries": [{"k": "a", "v": "toolong"}], "tags": ["toolong"], "plain": ["toolong"]});
        let fields = |new: &Value| -> Vec<String> {
            let mut f: Vec<String> = validate_update(new, Some(&old), &schema).into_iter().map(|c| c.field).collect();
            f.sort();
            f
        };
        let mut new = old.clone();
        new["other"] = json!("b");
        assert_eq!(fields(&new), Vec::<String>::new(), "only a valid field changed");
        assert_eq!(validate(&new, &schema).len(), 4, "a create is validated whole");
        new["name"] = json!("stilltoolong");
        new["entries"] = json!([{"k": "b", "v": "new-and-long"}, {"k": "a", "v": "toolong"}]);
        new["tags"] = json!(["toolong", "longer-still"]);
        new["plain"] = json!(["toolong", "ok"]);
        assert_eq!(
            fields(&new),
            ["entries[0].v", "name", "plain[0]", "tags[1]"],
            "the changed values, and the items of a list that do not correlate"
        );
        assert_eq!(fields(&old), Vec::<String>::new(), "an unchanged object");
    }

    fn placement_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["clusterSelector"],
                    "properties": {
                        "clusterSelector": {
                            "type": "object",
                            "properties": {
                                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                            }
                        },
                        "numberOfClusters": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
                        "replicaScheduling": {"type": "string", "enum": ["Divide", "Duplicate"], "default": "Divide"},
                        "maxSurge": {"x-kubernetes-int-or-string": true},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "workloads": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string"}, "weight": {"type": "integer"}}
                            }
                        }
                    }
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        })
    }

    fn placement(spec: Value) -> Value {
        json!({"apiVersion": "x.io/v1", "kind": "Placement", "metadata": {"name": "p"}, "spec": spec})
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn placement_schema_is_structural() {
        assert_eq!(check_structural(&placement_schema(), PREFIX), vec![]);
    }

    #[test]
    fn defaults_are_applied_to_absent_and_non_nullable_null_fields() {
        let schema = placement_schema();
        let mut obj = placement(json!({"clusterSelector": {}}));
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj["spec"]["numberOfClusters"], json!(1));
        assert_eq!(obj["spec"]["replicaScheduling"], json!("Divide"));

        let mut obj = placement(json!({"clusterSelector": {}, "numberOfClusters": null, "replicaScheduling": "Duplicate"}));
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj["spec"]["numberOfClusters"], json!(1));
        assert_eq!(obj["spec"]["replicaScheduling"], json!("Duplicate"));
        assert_eq!(validate(&obj, &schema), vec![]);
    }

    #[test]
    fn defaults_keep_nullable_nulls_and_drop_other_nulls() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "nullable": true, "default": "x"},
            "b": {"type": "string"},
            "c": {"type": "object", "default": {}, "properties": {"d": {"type": "integer", "default": 7}}},
            "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"e": {"type": "string", "default": "E"}}}},
            "l": {"type": "array", "items": {"type": "object", "properties": {"f": {"type": "boolean", "default": true}}}}
        }});
        let mut obj = json!({"a": null, "b": null, "m": {"k": {}}, "l": [{}, {"f": false}]});
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj, json!({"a": null, "m": {"k": {"e": "E"}}, "l": [{"f": true}, {"f": false}], "c": {"d": 7}}));
    }

    #[test]
    fn enum_violation_lists_supported_values() {
        let obj = placement(json!({"clusterSelector": {}, "replicaScheduling": "Foo"}));
        let causes = validate(&obj, &placement_schema());
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldValueNotSupported",
                message: "Unsupported value: \"Foo\": supported values: \"Divide\", \"Duplicate\"".into(),
                field: "spec.replicaScheduling".into(),
            }]
        );
    }

    #[test]
    fn minimum_violation_matches_kubernetes_wording() {
        let obj = placement(json!({"clusterSelector": {}, "numberOfClusters": 0}));
        let causes = validate(&obj, &placement_schema());
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldValueInvalid",
                message: "Invalid value: 0: spec.numberOfClusters in body should be greater than or equal to 1".into(),
                field: "spec.numberOfClusters".into(),
            }]
        );
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let mut obj = placement(json!({
            "clusterSelector": {"matchLabels": {"env": "prod"}, "bogus": 1},
            "foo": {"bar": 1},
            "workloads": [{"name": "a", "junk": true}]
        }));
        obj["extra"] = json!("x");
        obj["metadata"]["whatever"] = json!(1);
        let pruned = prune(&mut obj, &placement_schema());
        assert_eq!(pruned, vec!["extra", "spec.clusterSelector.bogus", "spec.foo", "spec.workloads[0].junk"]);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "x.io/v1", "kind": "Placement", "metadata": {"name": "p", "whatever": 1},
                "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}}, "workloads": [{"name": "a"}]}
            })
        );
        // Order of the remaining keys is preserved.
        let keys: Vec<&String> = obj.as_object().map(|m| m.keys().collect()).unwrap_or_default();
        assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec"]);
    }

    #[test]
    fn preserve_unknown_fields_subtree_is_kept() {
        let mut obj = placement(json!({"clusterSelector": {}}));
        obj["status"] = json!({"anything": {"deep": [1, {"x": null}]}, "n": 3});
        let before = obj.clone();
        assert_eq!(prune(&mut obj, &placement_schema()), Vec::<String>::new());
        assert_eq!(obj, before);

        // Described fields inside a preserved subtree are pruned again.
        let schema = json!({"type": "object", "properties": {"s": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}
        }}});
        let mut obj = json!({"s": {"free": {"z": 1}, "known": {"a": "1", "b": 2}}});
        assert_eq!(prune(&mut obj, &schema), vec!["s.known.b"]);
        assert_eq!(obj, json!({"s": {"free": {"z": 1}, "known": {"a": "1"}}}));
    }

    #[test]
    fn embedded_resource_keeps_type_and_object_meta() {
        let schema = json!({"type": "object", "properties": {"template": {
            "type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}
        }}});
        let mut obj = json!({"template": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}},
            "spec": {"replicas": 1, "junk": 1}, "other": 2
        }});
        assert_eq!(prune(&mut obj, &schema), vec!["template.other", "template.spec.junk"]);
        assert_eq!(obj["template"]["metadata"], json!({"labels": {"a": "b"}}));
        assert_eq!(validate(&obj, &schema), vec![]);

        let causes = validate(&json!({"template": {"spec": {}}}), &schema);
        assert_eq!(fields(&causes), ["template.apiVersion", "template.kind"]);
        assert!(causes.iter().all(|c| c.message == "Required value: must not be empty"));
    }

    #[test]
    fn missing_required_field_is_reported() {
        let obj = placement(json!({"numberOfClusters": 2}));
        let causes = validate(&obj, &placement_schema());
        assert_eq!(
            causes,
            vec![Cause { reason: "FieldValueRequired", message: "Required value".into(), field: "spec.clusterSelector".into() }]
        );
    }

    #[test]
    fn wrong_types_are_reported() {
        let obj = placement(json!({
            "clusterSelector": "all",
            "numberOfClusters": "three",
            "tags": [1],
        }));
        let causes = validate(&obj, &placement_schema());
        assert_eq!(
            causes,
            vec![
                Cause {
                    reason: "FieldValueTypeInvalid",
                    message: "Invalid value: \"string\": spec.clusterSelector in body must be of type object: \"string\"".into(),
                    field: "spec.clusterSelector".into(),
                },
                Cause {
                    reason: "FieldValueTypeInvalid",
                    message: "Invalid value: \"string\": spec.numberOfClusters in body must be of type integer: \"string\"".into(),
                    field: "spec.numberOfClusters".into(),
                },
                Cause {
                    reason: "FieldValueTypeInvalid",
                    message: "Invalid value: \"integer\": spec.tags[0] in body must be of type string: \"integer\"".into(),
                    field: "spec.tags[0]".into(),
                },
            ]
        );
        // An integral float is an integer; a fractional one is not.
        let ok = placement(json!({"clusterSelector": {}, "numberOfClusters": 2.0}));
        assert_eq!(validate(&ok, &placement_schema()), vec![]);
        let bad = placement(json!({"clusterSelector": {}, "numberOfClusters": 2.5}));
        assert_eq!(fields(&validate(&bad, &placement_schema())), ["spec.numberOfClusters"]);
        // A null for a non-nullable field.
        let null = placement(json!({"clusterSelector": null}));
        assert_eq!(
            validate(&null, &placement_schema())[0].message,
            "Invalid value: \"null\": spec.clusterSelector in body must be of type object: \"null\""
        );
    }

    #[test]
    fn int_or_string_accepts_both() {
        let schema = placement_schema();
        for v in [json!(3), json!("25%")] {
            let obj = placement(json!({"clusterSelector": {}, "maxSurge": v}));
            assert_eq!(validate(&obj, &schema), vec![]);
        }
        let obj = placement(json!({"clusterSelector": {}, "maxSurge": true}));
        assert_eq!(
            validate(&obj, &schema)[0].message,
            "Invalid value: \"boolean\": spec.maxSurge in body must be of type integer,string: \"boolean\""
        );
        // The structural anyOf idiom is accepted too.
        let idiom = json!({"type": "object", "properties": {"port": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^[0-9]+%?$"
        }}});
        assert_eq!(check_structural(&idiom, PREFIX), vec![]);
        assert_eq!(validate(&json!({"port": 80}), &idiom), vec![]);
        assert_eq!(validate(&json!({"port": "50%"}), &idiom), vec![]);
        assert_eq!(fields(&validate(&json!({"port": "x"}), &idiom)), ["port"]);
    }

    #[test]
    fn missing_type_is_not_structural() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "foo": {"description": "no type"},
            "list": {"type": "array"},
            "free": {"x-kubernetes-preserve-unknown-fields": true}
        }}}});
        let causes = check_structural(&schema, PREFIX);
        assert_eq!(
            causes,
            vec![
                Cause {
                    reason: "FieldValueRequired",
                    message: "Required value: must not be empty for specified object fields".into(),
                    field: format!("{PREFIX}.properties[spec].properties[foo].type"),
                },
                Cause {
                    reason: "FieldValueRequired",
                    message: "Required value: must be specified".into(),
                    field: format!("{PREFIX}.properties[spec].properties[list].items"),
                },
            ]
        );
        let root = check_structural(&json!({"properties": {}}), PREFIX);
        assert_eq!(root[0].message, "Required value: must not be empty at the root");
        let root = check_structural(&json!({"type": "string"}), PREFIX);
        assert_eq!(root[0].message, "Invalid value: \"string\": must be object at the root");
    }

    #[test]
    fn additional_properties_with_properties_is_rejected() {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "additionalProperties": {"type": "string"}
        }}});
        let causes = check_structural(&schema, PREFIX);
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldValueForbidden",
                message: "Forbidden: additionalProperties and properties are mutual exclusive".into(),
                field: format!("{PREFIX}.properties[spec].additionalProperties"),
            }]
        );
        // `additionalProperties: true` next to properties is tolerated, at the root it is not.
        let ok = json!({"type": "object", "properties": {"s": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true}}});
        assert_eq!(check_structural(&ok, PREFIX), vec![]);
        let root = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(check_structural(&root, PREFIX)[0].message, "Forbidden: must not be used at the root");
    }

    #[test]
    fn unsupported_keywords_and_nested_structure_are_rejected() {
        let schema = json!({"type": "object", "properties": {
            "r": {"$ref": "#/definitions/x"},
            "u": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
            "n": {"type": "object", "anyOf": [{"type": "object", "properties": {"a": {"description": "d"}}}]},
            "p": {"type": "string", "pattern": "("},
            "t": {"type": "null"}
        }});
        let got: Vec<(String, String)> = check_structural(&schema, "").into_iter().map(|c| (c.field, c.message)).collect();
        let want = [
            ("properties[r].$ref", "Forbidden: $ref is not supported"),
            ("properties[u].uniqueItems", "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"),
            ("properties[t].type", "Forbidden: type cannot be set to null, use nullable as an alternative"),
            ("properties[r].type", "Required value: must not be empty for specified object fields"),
            ("properties[n].anyOf[0].properties[a].description", "Forbidden: must be empty to be structural"),
            ("properties[n].anyOf[0].type", "Forbidden: must be empty to be structural"),
        ];
        for (f, m) in want {
            assert!(got.iter().any(|(gf, gm)| gf == f && gm == m), "missing {f}: {m} in {got:#?}");
        }
        assert!(got.iter().any(|(f, m)| f == "properties[p].pattern" && m.contains("must be a valid regular expression")));
    }

    #[test]
    fn root_metadata_may_only_restrict_name() {
        let ok = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 5}
        }}}});
        assert_eq!(check_structural(&ok, PREFIX), vec![]);
        let long = json!({"metadata": {"name": "toolong"}});
        assert_eq!(
            validate(&long, &ok),
            vec![Cause {
                reason: "FieldValueTooLong",
                message: "Too long: may not be longer than 5".into(),
                field: "metadata.name".into(),
            }]
        );
        let bad = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object"}
        }}}});
        let causes = check_structural(&bad, PREFIX);
        assert_eq!(fields(&causes), [format!("{PREFIX}.properties[metadata]")]);
        assert!(causes[0].message.starts_with("Forbidden: must not specify anything other than name and generateName"));
        let defaulted = json!({"type": "object", "properties": {"metadata": {"type": "object", "default": {}}}});
        assert_eq!(check_structural(&defaulted, "")[0].message, "Forbidden: must not be set in top-level metadata");
    }

    #[test]
    fn defaults_must_be_pruned_and_valid() {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1, "default": 0},
                "o": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}}
            }
        }}});
        let got: Vec<(String, String)> = check_structural(&schema, PREFIX).into_iter().map(|c| (c.field, c.message)).collect();
        assert_eq!(
            got,
            vec![
                (
                    format!("{PREFIX}.properties[spec].properties[n].default"),
                    "Invalid value: 0: in body should be greater than or equal to 1".to_string()
                ),
                (
                    format!("{PREFIX}.properties[spec].properties[o].default"),
                    "Invalid value: {\"a\":\"x\",\"b\":1}: must not have unknown fields".to_string()
                ),
            ]
        );
    }

    #[test]
    fn list_types_enforce_uniqueness() {
        let obj = placement(json!({
            "clusterSelector": {},
            "tags": ["a", "b", "a", "a"],
            "workloads": [{"name": "x"}, {"name": "y", "weight": 1}, {"name": "x", "weight": 2}]
        }));
        let causes = validate(&obj, &placement_schema());
        assert_eq!(
            causes,
            vec![
                Cause { reason: "FieldValueDuplicate", message: "Duplicate value: \"a\"".into(), field: "spec.tags[2]".into() },
                Cause {
                    reason: "FieldValueDuplicate",
                    message: "Duplicate value: {\"name\":\"x\"}".into(),
                    field: "spec.workloads[2]".into()
                },
            ]
        );
        let causes = validate(&placement(json!({"clusterSelector": {}, "workloads": [{"weight": 1}]})), &placement_schema());
        assert_eq!(fields(&causes), ["spec.workloads[0].name"]);
    }

    #[test]
    fn string_number_and_collection_constraints() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
            "when": {"type": "string", "format": "date-time"},
            "n": {"type": "number", "maximum": 10, "exclusiveMaximum": true, "multipleOf": 0.5},
            "i": {"type": "integer", "format": "int32"},
            "l": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
            "m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
            "c": {"type": "object", "additionalProperties": false}
        }});
        let obj = json!({
            "s": "A", "when": "yesterday", "n": 10, "i": 3_000_000_000u64,
            "l": [1, 2, 3], "m": {"a": "1", "b": "2"}, "c": {"x": 1}
        });
        let got: Vec<String> = validate(&obj, &schema).into_iter().map(|c| format!("{}|{}|{}", c.field, c.reason, c.message)).collect();
        assert_eq!(
            got,
            vec![
                "s|FieldValueInvalid|Invalid value: \"A\": s in body should be at least 2 chars long",
                "s|FieldValueInvalid|Invalid value: \"A\": s in body should match '^[a-z]+$'",
                "when|FieldValueTypeInvalid|Invalid value: \"yesterday\": when in body must be of type date-time: \"yesterday\"",
                "n|FieldValueInvalid|Invalid value: 10: n in body should be less than 10",
                "i|FieldValueTypeInvalid|Invalid value: 3000000000: i in body must be of type int32: \"3000000000\"",
                "l|FieldValueTooMany|Too many: 3: must have at most 2 items",
                "m|FieldValueTooMany|Too many: 2: must have at most 1 items",
                "c|FieldValueInvalid|Invalid value: \"x\": c.x in body is a forbidden property",
            ]
        );
        let good = json!({"s": "ab", "when": "2024-05-01T10:00:00.5+02:00", "n": 9.5, "i": 7, "l": [1], "m": {"a": "1"}, "c": {}});
        assert_eq!(validate(&good, &schema), vec![]);
    }

    #[test]
    fn logical_junctors() {
        let schema = json!({"type": "object", "properties": {
            "one": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "not": {"type": "string", "not": {"enum": ["forbidden"]}},
            "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}
        }});
        assert_eq!(validate(&json!({"one": {"a": "x"}, "not": "ok", "all": 3}), &schema), vec![]);
        let causes = validate(&json!({"one": {"a": "x", "b": "y"}, "not": "forbidden", "all": 9}), &schema);
        let msgs: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "Invalid value: \"\": \"one\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
                "Invalid value: \"\": \"not\" must not validate the schema (not)",
                "Invalid value: 9: all in body should be less than or equal to 5",
                "Invalid value: \"\": \"all\" must validate all the schemas (allOf)",
            ]
        );
        assert_eq!(check_structural(&schema, PREFIX), vec![]);
    }

    #[test]
    fn nullable_fields_accept_null() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string", "nullable": true, "enum": ["x"]}}});
        assert_eq!(validate(&json!({"a": null}), &schema), vec![]);
    }

    #[test]
    fn malformed_input_never_panics() {
        let schemas = [
            json!(null),
            json!(42),
            json!([]),
            json!({"type": 5, "properties": [], "items": "x", "required": "a", "enum": {}, "anyOf": {}, "minimum": "1"}),
            json!({"type": "array", "items": [{"type": "string"}], "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k", "k"]}),
            json!({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 0, "maxLength": -1, "pattern": "[", "format": "int32"}}}),
            json!({"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-int-or-string": true, "additionalProperties": 3}),
        ];
        let objs =
            [json!(null), json!("s"), json!([1, [2], {"a": null}]), json!({"a": i64::MIN, "b": u64::MAX, "c": -1.5e300, "metadata": 1})];
        for s in &schemas {
            let _ = check_structural(s, PREFIX);
            for o in &objs {
                let mut o = o.clone();
                let _ = validate(&o, s);
                apply_defaults(&mut o, s);
                let _ = prune(&mut o, s);
            }
        }
        let tricky = json!({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 1, "minimum": -1}}});
        assert_eq!(validate(&json!({"a": i64::MIN}), &tricky).len(), 1);
        let mut deep = json!(1);
        for _ in 0..1000 {
            deep = json!({"x": deep});
        }
        let any = json!({"type": "object", "properties": {"x": {"type": "object"}}});
        let _ = validate(&deep, &any);
        // (No clone here: serde_json's own Clone recurses and would overflow in debug builds.)
        let _ = prune(&mut deep, &any);
        assert!(!is_date_time("2024-05-01Té:00:00Z"));
        assert!(!is_date_time("2024-05-01T10:00:00+0é:0"));
    }

    #[test]
    fn go_style_numbers() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(2.5), "2.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.00001), "1e-05");
    }
}
