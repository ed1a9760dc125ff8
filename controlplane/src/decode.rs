//! Decoding request bodies, in time linear in their size, off the async workers.
//!
//! A body is hostile until decoded. Two rules keep any body up to the 3 MiB limit
//! cheap to refuse:
//! - **Depth.** serde_json stops at 128 levels of nesting. YAML gets the same limit,
//!   checked by [`flow_depth`] before the YAML parser runs: libyaml re-checks every
//!   pending flow level at each token, so its cost grows with the product of the
//!   tokens and the nesting of `{`/`[`. Block nesting needs indentation, so a body's
//!   size already bounds it. The same object is thus accepted as JSON and as YAML.
//!
//! Work that grows with a large body or object runs off the async workers, at most
//! [`DECODERS`] at a time, so a burst of large bodies waits its turn there while GETs,
//! watches and heartbeats keep the async workers: decoding through [`offload`] (on the
//! blocking pool), and applying a patch through [`heavy`] (the worker hands its other
//! tasks to another thread while it computes). Small requests, nearly all of them, are
//! handled inline: moving them would cost more than it spares.

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// The deepest nesting a body may have: serde_json's own recursion limit, applied to
/// YAML too. No Kubernetes object comes near it (a CRD schema uses two levels per
/// level of its own nesting).
pub const MAX_DEPTH: usize = 128;

/// How many bodies are decoded at once. Each uses a core while it runs; the rest wait
/// on this semaphore, not on the async workers.
pub const DECODERS: usize = 4;

/// From this size on, a body or an object is decoded or patched off the async workers.
/// serde_json decodes 64 KiB in well under a millisecond.
pub const HEAVY_BYTES: usize = 64 * 1024;

static PERMITS: Semaphore = Semaphore::const_new(DECODERS);

/// Runs `f` over a body of `size` bytes: inline when it is small, else on the blocking
/// pool, at most [`DECODERS`] at a time.
pub async fn offload<T: Send + 'static>(size: usize, f: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    if size < HEAVY_BYTES {
        return Ok(f());
    }
    let _permit = PERMITS.acquire().await.map_err(|_| ApiError::unavailable("the decoder pool is closed"))?;
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::internal(format!("decoding the request body failed: {e}")))
}

/// Runs `f`, CPU work over `size` bytes that borrows the caller's data: inline when it
/// is small, else with this async worker's other tasks handed to another thread
/// (`block_in_place`), at most [`DECODERS`] at a time. A current-thread runtime (some
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
    serde_yaml::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// The deepest nesting of YAML flow collections (`{…}`, `[…]`) in `body`, in one pass:
/// brackets inside quoted scalars and comments do not count. It may count a bracket
/// inside a plain scalar (`a: x[1]`), which only errs towards refusing a body nested
/// near the limit, never towards parsing a deep one.
pub fn flow_depth(body: &[u8]) -> usize {
    #[derive(PartialEq)]
    enum In {
        Plain,
        Double,
        Single,
        Comment,
    }
    let (mut depth, mut deepest, mut state, mut escaped) = (0usize, 0usize, In::Plain, false);
    let mut prev = b'\n';
    for &b in body {
        match state {
            In::Plain => match b {
                b'{' | b'[' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                b'"' => state = In::Double,
                b'\'' => state = In::Single,
                b'#' if prev.is_ascii_whitespace() => state = In::Comment,
                _ => {}
            },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_depth_counts_brackets_outside_scalars_and_comments() {
        assert_eq!(flow_depth(b"a: {b: [1, {c: 2}]}"), 3);
        assert_eq!(flow_depth(b"a: \"{{{[[[\"\nb: '{{'' [['\n# {{{{\nc: d # [[[["), 0);
        assert_eq!(flow_depth(b"a: \"\\\"{\"\n"), 0);
        assert_eq!(flow_depth(b"{\"a\":".repeat(1000).as_slice()), 1000);
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
}
