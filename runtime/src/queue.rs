//! The work queue: keys in, one reconcile per key at a time out.
//!
//! A key queued many times before it runs runs once (kube-runtime's scheduler merges
//! them); a key queued while it runs runs again right after; different keys run
//! concurrently up to a limit. A failed reconcile is retried when its error policy
//! says (exponential backoff by default). Controllers use it through
//! [`crate::controller::Controller`].

use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use kube::runtime::scheduler::{scheduler, ScheduleRequest};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What a reconcile asks for next.
pub enum Next {
    /// Nothing until something changes.
    Done,
    /// Look again after this long (waiting for another object to catch up).
    After(Duration),
}

/// Runs `work` for every key received on `keys` until the channel closes; a key whose
/// work failed `n` times in a row runs again after `retry(n)`.
pub async fn run<Q, F, Fut, E>(
    keys: mpsc::UnboundedReceiver<Q>,
    concurrency: usize,
    retry: &(dyn Fn(u32) -> Duration + Send + Sync),
    work: F,
) where
    Q: Clone + Eq + Hash + Display + Unpin,
    F: Fn(Q) -> Fut,
    Fut: Future<Output = Result<Next, E>>,
    E: std::fmt::Display,
{
    let (delayed_tx, delayed_rx) = mpsc::unbounded_channel::<ScheduleRequest<Q>>();
    let now = UnboundedReceiverStream::new(keys).map(|message| ScheduleRequest { message, run_at: Instant::now() });
    let mut due = Box::pin(scheduler(futures::stream::select(now, UnboundedReceiverStream::new(delayed_rx))));
    let mut running = FuturesUnordered::new();
    let mut in_flight: HashSet<Q> = HashSet::new();
    let mut again: HashSet<Q> = HashSet::new();
    let mut failures: HashMap<Q, u32> = HashMap::new();
    loop {
        tokio::select! {
            key = due.next(), if running.len() < concurrency => {
                let Some(key) = key else { break };
                if in_flight.contains(&key) {
                    again.insert(key);
                    continue;
                }
                in_flight.insert(key.clone());
                let fut = work(key.clone());
                running.push(async move { (key, fut.await) });
            }
            Some((key, result)) = running.next() => {
                in_flight.remove(&key);
                let delay = match result {
                    Ok(Next::Done) => {
                        failures.remove(&key);
                        None
                    }
                    Ok(Next::After(d)) => {
                        failures.remove(&key);
                        Some(d)
                    }
                    Err(e) => {
                        let n = failures.entry(key.clone()).or_insert(0);
                        *n += 1;
                        let d = retry(*n);
                        tracing::warn!(object = %key, error = %e, retry_in = ?d, failures = *n, "reconcile failed");
                        Some(d)
                    }
                };
                let delay = if again.remove(&key) { Some(Duration::ZERO) } else { delay };
                if let Some(d) = delay {
                    let _ = delayed_tx.send(ScheduleRequest { message: key, run_at: Instant::now() + d });
                }
            }
        }
    }
}
