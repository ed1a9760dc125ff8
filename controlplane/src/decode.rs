//! Decoding request bodies, in time linear in their size, off the async workers.
//!
//! A body is hostile until decoded. Two rules keep any body up to the 3 MiB limit
//! cheap to refuse:
//! - **Depth.** serde_json stops at 128 levels of nesting. YAML gets the same limit,
//!   checked by [`flow_depth`] before the YAML parser runs: libyaml re-checks every
//!   pending flow level at each token, so its cost grows with the product of the
//!   tokens and the nesting of `{`/`[`, and it builds every level of block indicators
//!   on one line (`- - - …`, 1.57 million deep in 3 MiB) before serde_yaml's own
//!   limit looks. Both are counted. Nesting by indentation needs a line per level and
//!   more spaces on each, so a body's size bounds it. The same object is thus accepted
//!   as JSON and as YAML.
//! - **Expansion.** A YAML alias (`*a`) stands for a whole copy of its anchor's node,
//!   so a few kilobytes of anchors, each a list of aliases to the one before, expand
//!   to billions of values ("billion laughs"); serde_yaml bounds only the number of
//!   alias jumps, not what they expand to. [`yaml_or_json`] builds the value itself and
//!   stops once it has made [`MAX_YAML_NODES_PER_BYTE`] values per byte of the body
//!   (plus [`YAML_NODE_ALLOWANCE`]): more than a document without aliases can hold, so
//!   only aliasing is refused, and decoding stays linear in the body's size.
//!
//! Work that grows with a large body or object runs off the async workers, at most
//! [`decoders`] at a time, so a burst of large bodies waits its turn there while GETs,
//! watches and heartbeats keep the async workers: decoding through [`offload`] (on the
//! blocking pool), and applying a patch through [`heavy`] (the worker hands its other
//! tasks to another thread while it computes). Small requests, nearly all of them, are
//! handled inline: moving them would cost more than it spares.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// The deepest nesting a body may have: serde_json's own recursion limit, applied to
/// YAML too. No Kubernetes object comes near it (a CRD schema uses two levels per
/// level of its own nesting).
pub const MAX_DEPTH: usize = 128;

/// How many values a YAML body may decode to per byte of its size. A document without
/// aliases stays below it: each value needs a byte of its own (a character, a separator
/// or an indicator), and the densest form found, lines of `- ?` (a list of maps with
/// a null key and a null value), makes 3 values of 4 bytes (see
/// `dense_documents_without_aliases_fit_the_budget`).
pub const MAX_YAML_NODES_PER_BYTE: usize = 1;

/// Values every YAML body may decode to whatever its size, so that a small manifest
/// may still reuse an anchor a few times.
pub const YAML_NODE_ALLOWANCE: usize = 4096;

/// How many bodies are decoded (or large objects patched) at once: half the cores, at
/// least one. Each uses a core while it runs, so the other half is left to the async
/// workers (GETs, watches, heartbeats) however many large bodies arrive; the rest wait
/// on this semaphore, not on the workers.
pub fn decoders() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// From this size on, a body or an object is decoded or patched off the async workers.
/// serde_json decodes 64 KiB in well under a millisecond.
pub const HEAVY_BYTES: usize = 64 * 1024;

static PERMITS: std::sync::LazyLock<Semaphore> = std::sync::LazyLock::new(|| Semaphore::new(decoders()));

/// Runs `f` over a body of `size` bytes: inline when it is small, else on the blocking
/// pool, at most [`decoders`] at a time.
pub async fn offload<T: Send + 'static>(size: usize, f: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    if size < HEAVY_BYTES {
        return Ok(f());
    }
    let _permit = PERMITS.acquire().await.map_err(|_| ApiError::unavailable("the decoder pool is closed"))?;
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::internal(format!("decoding the request body failed: {e}")))
}

/// Runs `f`, CPU work over `size` bytes that borrows the caller's data: inline when it
/// is small, else with this async worker's other tasks handed to another thread
/// (`block_in_place`), at most [`decoders`] at a time. A current-thread runtime (some
/// tests) has no other thread to hand them to, and runs it inline.
pub async fn heavy<T>(size: usize, f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if size < HEAVY_BYTES || Handle::current().runtime_flavor() != RuntimeFlavor::MultiThread {
        return f();
    }
    let _permit = PERMITS.acquire().await;
    tokio::task::block_in_place(f)
}

/// A JSON body.
pub fn json(body: &[u8], what: &str) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding {what}: {e}")))
}

/// A YAML body (JSON is YAML too).
pub fn yaml_or_json(body: &[u8]) -> Result<Value, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{' | b'[')) {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            return Ok(v);
        }
    }
    let depth = flow_depth(body);
    if depth > MAX_DEPTH {
        return Err(ApiError::bad_request(format!("error decoding YAML: the document is nested deeper than {MAX_DEPTH} levels")));
    }
    let budget = Cell::new(body.len().saturating_mul(MAX_YAML_NODES_PER_BYTE).saturating_add(YAML_NODE_ALLOWANCE));
    Node(&budget)
        .deserialize(serde_yaml::Deserializer::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// Builds a [`Value`] as serde_json's own `Deserialize` does, spending one unit of a
/// shared budget per value (map keys included) and failing once it is spent, so an
/// aliased document stops expanding there.
struct Node<'b>(&'b Cell<usize>);

impl Node<'_> {
    fn spend<E: de::Error>(&self) -> Result<(), E> {
        match self.0.get().checked_sub(1) {
            Some(left) => {
                self.0.set(left);
                Ok(())
            }
            None => Err(E::custom("the document expands to more values than it has bytes; its aliases repeat too much of it")),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.spend()?;
        <Number as de::Deserialize>::deserialize(de::value::I128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.spend()?;
        <Number as de::Deserialize>::deserialize(de::value::U128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.spend()?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Node(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend()?;
        // Gathered first, so the map is built at its size instead of rehashed as it grows.
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(Key)? {
            self.spend()?;
            let value = map.next_value_seed(Node(self.0))?;
            entries.push((key, value));
        }
        let mut object = Map::with_capacity(entries.len());
        // A repeated key keeps its first place and its last value, as inserting does.
        for (key, value) in entries {
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A map key, which JSON requires to be a string (serde_json's `KeyClassifier`).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}

/// The deepest nesting of YAML flow collections (`{…}`, `[…]`) in `body`, in one pass:
/// brackets inside quoted scalars and comments do not count. It may count a bracket
/// inside a plain scalar (`a: x[1]`), which only errs towards refusing a body nested
/// near the limit, never towards parsing a deep one.
pub fn flow_depth(body: &[u8]) -> usize {
    // Once a line's leading indicators are passed, only these bytes change anything.
    const MATTERS: [bool; 256] = {
        let mut t = [false; 256];
        let bytes = b"\n{[}]\"'#";
        let mut k = 0;
        while k < bytes.len() {
            t[bytes[k] as usize] = true;
            k += 1;
        }
        t
    };
    let n = body.len();
    let (mut depth, mut deepest) = (0usize, 0usize);
    // Block indicators that open a level without indentation: `- - - x` nests three
    // sequences on one line, `? ? x` two complex keys. They are counted at a line's
    // start, where they can stand. A line break inside a quoted scalar counts as one.
    let (mut line_start, mut line_levels) = (true, 0usize);
    let mut i = 0;
    while i < n {
        let b = body[i];
        if b == b'\n' {
            (line_start, line_levels) = (true, 0);
            i += 1;
            continue;
        }
        if line_start {
            if matches!(b, b'-' | b'?' | b':') && body.get(i + 1).is_none_or(u8::is_ascii_whitespace) {
                line_levels += 1;
                deepest = deepest.max(depth + line_levels);
                i += 1;
                continue;
            }
            if matches!(b, b' ' | b'\t' | b'\r') {
                i += 1;
                continue;
            }
            line_start = false;
        }
        // The end of a scalar or a comment starting after `i`: the index of its closing
        // byte (or `n`), and whether a line break came first.
        let scan = |from: usize, stop: &dyn Fn(u8) -> bool| -> (usize, bool) {
            let mut broke = false;
            let mut j = from;
            while j < n {
                match body[j] {
                    b'\n' => broke = true,
                    c if stop(c) => return (j, broke),
                    _ => {}
                }
                j += 1;
            }
            (n, broke)
        };
        match b {
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth + line_levels);
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' => {
                let mut j = i + 1;
                let mut broke = false;
                loop {
                    let (at, nl) = scan(j, &|c| c == b'"' || c == b'\\');
                    broke |= nl;
                    if at < n && body[at] == b'\\' {
                        // The escaped byte is skipped, but a line break still counts.
                        broke |= body.get(at + 1) == Some(&b'\n');
                        j = at + 2;
                        continue;
                    }
                    i = at + 1;
                    break;
                }
                if broke {
                    (line_start, line_levels) = (true, 0);
                }
            }
            // `''` inside a single-quoted scalar closes and reopens it: the same count.
            b'\'' => {
                let (at, broke) = scan(i + 1, &|c| c == b'\'');
                i = at + 1;
                if broke {
                    (line_start, line_levels) = (true, 0);
                }
            }
            // A comment runs to the line's end, which the loop then reads.
            b'#' if i == 0 || body[i - 1].is_ascii_whitespace() => {
                i = body[i..].iter().position(|&c| c == b'\n').map_or(n, |p| i + p);
            }
            _ => {
                i += 1;
                while i < n && !MATTERS[body[i] as usize] {
                    i += 1;
                }
            }
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The byte-at-a-time state machine [`flow_depth`] was first written as: slower,
    /// and the definition it must agree with.
    fn flow_depth_reference(body: &[u8]) -> usize {
        #[derive(PartialEq)]
        enum In {
            Plain,
            Double,
            Single,
            Comment,
        }
        let (mut depth, mut deepest, mut state, mut escaped) = (0usize, 0usize, In::Plain, false);
        // Block indicators that open a level without indentation: `- - - x` nests three
        // sequences on one line, `? ? x` two complex keys. They are counted at a line's
        // start, where they can stand.
        let (mut line_start, mut line_levels) = (true, 0usize);
        let mut prev = b'\n';
        for (i, &b) in body.iter().enumerate() {
            if b == b'\n' {
                (line_start, line_levels) = (true, 0);
            }
            match state {
                In::Plain if line_start && matches!(b, b'-' | b'?' | b':') && body.get(i + 1).is_none_or(u8::is_ascii_whitespace) => {
                    line_levels += 1;
                    deepest = deepest.max(depth + line_levels);
                }
                In::Plain if line_start && matches!(b, b' ' | b'\t' | b'\n' | b'\r') => {}
                In::Plain => {
                    line_start = false;
                    match b {
                        b'{' | b'[' => {
                            depth += 1;
                            deepest = deepest.max(depth + line_levels);
                        }
                        b'}' | b']' => depth = depth.saturating_sub(1),
                        b'"' => state = In::Double,
                        b'\'' => state = In::Single,
                        b'#' if prev.is_ascii_whitespace() => state = In::Comment,
                        _ => {}
                    }
                }
                In::Double if escaped => escaped = false,
                In::Double if b == b'\\' => escaped = true,
                In::Double if b == b'"' => state = In::Plain,
                // `''` inside a single-quoted scalar closes and reopens it: the same count.
                In::Single if b == b'\'' => state = In::Plain,
                In::Comment if b == b'\n' => state = In::Plain,
                _ => {}
            }
            prev = b;
        }
        deepest
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]
        #[test]
        fn flow_depth_agrees_with_the_byte_at_a_time_definition(
            parts in proptest::collection::vec(prop_oneof![
                Just("\n"), Just("{"), Just("["), Just("}"), Just("]"), Just("\""), Just("'"), Just("''"),
                Just("#"), Just(" #"), Just("\\"), Just("\\\n"), Just("- "), Just("-"), Just("? "), Just(": "),
                Just(" "), Just("\t"), Just("\r"), Just("a"), Just("key: value"),
            ], 0..60)
        ) {
            let body = parts.concat();
            prop_assert_eq!(flow_depth(body.as_bytes()), flow_depth_reference(body.as_bytes()), "{:?}", body);
        }
    }

    #[test]
    fn flow_depth_counts_brackets_outside_scalars_and_comments() {
        assert_eq!(flow_depth(b"a: {b: [1, {c: 2}]}"), 3);
        assert_eq!(flow_depth(b"a: \"{{{[[[\"\nb: '{{'' [['\n# {{{{\nc: d # [[[["), 0);
        assert_eq!(flow_depth(b"a: \"\\\"{\"\n"), 0);
        assert_eq!(flow_depth(b"{\"a\":".repeat(1000).as_slice()), 1000);
        // Block indicators at a line's start nest without indentation.
        assert_eq!(flow_depth(b"- - - [x]\n- y\n"), 4);
        assert_eq!(flow_depth(&b"- ".repeat(100_000)), 100_000);
        assert_eq!(flow_depth(b"? ? a\n: b\nitems:\n- a-b\n- -1\n"), 2);
    }

    #[test]
    fn deep_bodies_are_refused_and_ordinary_ones_decoded() {
        let deep = b"{\"a\":".repeat(100_000);
        assert_eq!(yaml_or_json(&deep).unwrap_err().code, 400);
        let deep_yaml = b"{a: ".repeat(100_000);
        let e = yaml_or_json(&deep_yaml).unwrap_err();
        assert!(e.message.contains("nested deeper than 128"), "{}", e.message);
        assert_eq!(yaml_or_json(b"apiVersion: v1\nkind: ConfigMap\ndata: {a: \"1\"}\n").unwrap()["data"]["a"], "1");
        assert_eq!(yaml_or_json(b"{\"kind\": \"ConfigMap\"}").unwrap()["kind"], "ConfigMap");
        // YAML flow style that is not JSON still decodes.
        assert_eq!(yaml_or_json(b"{kind: ConfigMap}").unwrap()["kind"], "ConfigMap");
    }

    #[test]
    fn aliases_that_expand_past_the_budget_are_refused() {
        // "Billion laughs": nine levels of ten aliases each, 10^9 strings from 300 bytes.
        let mut lol = String::from("a0: &a0 lol\n");
        for i in 1..10 {
            lol.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(",")));
        }
        let e = yaml_or_json(lol.as_bytes()).unwrap_err();
        assert!(e.message.contains("expands to more values than it has bytes"), "{}", e.message);
        // Found by tests/fuzz.rs: 40 KB that serde_yaml alone expands to 1.2 * 10^9 values.
        let body = format!("a: &a [{}]\nb: &b [{}]\nc: [{}]\n", ["x"; 2000].join(","), ["*a"; 12_000].join(","), ["*b"; 50].join(","));
        let start = std::time::Instant::now();
        assert_eq!(yaml_or_json(body.as_bytes()).unwrap_err().code, 400);
        assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
        // Ordinary reuse of an anchor is fine.
        let v = yaml_or_json(b"base: &b {image: nginx, ports: [80, 443]}\nweb: *b\napi: *b\n").unwrap();
        assert_eq!(v["api"]["ports"][1], 443);
    }

    #[test]
    fn dense_documents_without_aliases_fit_the_budget() {
        let n = 16_000;
        for body in [
            "- ?\n".repeat(n),
            "- a:\n".repeat(n),
            "-\n".repeat(n),
            "- -\n".repeat(n),
            "- {}\n".repeat(n),
            format!("[{}]", vec!["~"; n].join(",")),
            format!("{{{}}}", (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>().join(",")),
            (0..n).map(|i| format!("? {i}\n")).collect(),
        ] {
            if let Err(e) = yaml_or_json(body.as_bytes()) {
                panic!("{:?}...: {}", &body[..8], e.message);
            }
        }
    }

    /// The budgeted builder makes what serde_yaml's own `Value` deserialization makes.
    #[test]
    fn yaml_decodes_as_serde_yaml_does() {
        let docs = [
            "",
            "~",
            "a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: \"x\"\ng: [1, {h: i}]\n",
            "big: 18446744073709551616\nneg: -9223372036854775809\nhuge: 1e400\nnan: .nan\ninf: -.inf\n",
            "1: a\ntrue: b\nnull: c\n~: d\n",
            "? [a]\n: b\n",
            "a: !!str 1\nb: !custom x\n",
            "---\na: 1\n---\nb: 2\n",
            "a: &x 1\nb: *x\n",
            "a: *nope\n",
            "- - - x\n",
            "a: |\n  text\n  more\nb: >-\n  folded\n",
            "{a: 1, a: 2}",
            "\"\\u00e9\": 0x1f\n",
        ];
        for doc in docs {
            let ours = yaml_or_json(doc.as_bytes()).map_err(|e| e.message);
            let theirs = serde_yaml::from_slice::<Value>(doc.as_bytes()).map_err(|e| format!("error decoding YAML: {e}"));
            assert_eq!(ours, theirs, "{doc:?}");
        }
    }
}
