//! The controller: watches feed triggers, triggers become keys, and a reconcile
//! function runs once per key at a time, as kube-runtime's `Controller` has it.
//!
//! Every Flotilla controller is one of these:
//!
//! ```text
//!   watch caches ──trigger()──┐
//!   other events ──fan_in()───┼──▶ queue (merge, one per key, backoff) ──▶ reconcile(key)
//!   resync(period, keys) ─────┘                                             │
//!                                 ◀── Next::After(d) / Err(e) ─ error policy ┘
//! ```
//!
//! - A watch cache is spawned with [`Controller::trigger`] as the channel it sends its
//!   changed keys on ([`crate::key::spawn`]), or sends them from its own callback.
//! - [`Controller::fan_in`] maps a coarser trigger (a cluster changed, a workspace's
//!   rules changed) to the keys it affects.
//! - [`Controller::resync`] queues every known key again every period, the first time
//!   one period after the start ([`crate::resync`]).
//! - [`Controller::run`] reconciles. A reconcile answers [`Next::Done`] (nothing until
//!   something changes) or [`Next::After`] (look again then); an error is retried by
//!   the error policy, exponential backoff unless [`Controller::error_policy`] says
//!   otherwise.
//!
//! Each reconcile runs in a span naming the controller and the key, and is counted in
//! `flotilla_controller_reconcile_duration_seconds{controller, result}`, whose labels
//! are the controller's static name and one of `done`, `requeue` or `error`.

use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, Registry};
use tokio::sync::mpsc;
use tracing::Instrument;

pub use crate::queue::Next;
use crate::AbortOnDrop;

/// The first retry delay of the default error policy; it doubles per failure up to
/// [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest retry delay of the default error policy: a cluster that is down is
/// tried this often.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The default error policy: 100 ms after the first failure, doubling per failure in a
/// row, at most 30 s.
pub fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(MAX_BACKOFF)
}

/// When a key whose reconcile failed `failures` times in a row runs again.
pub type ErrorPolicy = Box<dyn Fn(u32) -> Duration + Send + Sync>;

/// From a cached no-op to a slow cluster's timeout.
const BUCKETS: [f64; 14] = [0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

static RECONCILES: LazyLock<HistogramVec> = LazyLock::new(|| {
    HistogramVec::new(
        HistogramOpts::new(
            "flotilla_controller_reconcile_duration_seconds",
            "Time of one reconcile, by controller and result: done, requeue (it asked to look again later) or error",
        )
        .buckets(BUCKETS.to_vec()),
        &["controller", "result"],
    )
    .expect("the controller histogram's definition is valid")
});

/// Exposes the controllers' metrics on `registry`.
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(RECONCILES.clone()))
}

/// A controller being put together; [`Controller::run`] runs it.
pub struct Controller<Q> {
    name: &'static str,
    tx: mpsc::UnboundedSender<Q>,
    rx: mpsc::UnboundedReceiver<Q>,
    concurrency: usize,
    policy: ErrorPolicy,
    /// What lives as long as the controller: resyncs, fan-ins, its own tasks.
    tasks: Vec<AbortOnDrop<()>>,
}

impl<Q> Controller<Q>
where
    Q: Clone + Eq + Hash + Display + Unpin + Send + 'static,
{
    /// A controller named `name` (its spans and its metrics' `controller` label), with
    /// 4 reconciles at once and the default error policy.
    pub fn new(name: &'static str) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Controller { name, tx, rx, concurrency: 4, policy: Box::new(backoff), tasks: Vec::new() }
    }

    /// The channel that queues a key: hand it to the watches.
    pub fn trigger(&self) -> mpsc::UnboundedSender<Q> {
        self.tx.clone()
    }

    /// How many different keys reconcile at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// When a failed key runs again, from how many times in a row it failed.
    pub fn error_policy(mut self, policy: impl Fn(u32) -> Duration + Send + Sync + 'static) -> Self {
        self.policy = Box::new(policy);
        self
    }

    /// Queues every key `keys` gives every `period`, the first time one period from now.
    pub fn resync<I>(&mut self, period: Duration, keys: impl FnMut() -> I + Send + 'static)
    where
        I: IntoIterator<Item = Q>,
    {
        self.tasks.push(crate::resync::keys(period, self.tx.clone(), keys));
    }

    /// Runs `round` every `period`, the first time one period from now, beside the
    /// resync: the periodic work that is not one key's (sweeping what nothing owns).
    pub fn every<F, Fut>(&mut self, period: Duration, round: F)
    where
        F: FnMut(mpsc::UnboundedSender<Q>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (tx, mut round) = (self.tx.clone(), round);
        self.tasks.push(crate::resync::every(period, move || round(tx.clone())));
    }

    /// Maps every trigger received on `from` to the keys it affects, and queues them.
    pub fn fan_in<T, I>(&mut self, mut from: mpsc::UnboundedReceiver<T>, mut affected: impl FnMut(T) -> I + Send + 'static)
    where
        T: Send + 'static,
        I: IntoIterator<Item = Q>,
    {
        let tx = self.tx.clone();
        self.tasks.push(AbortOnDrop(tokio::spawn(async move {
            while let Some(t) = from.recv().await {
                for key in affected(t) {
                    let _ = tx.send(key);
                }
            }
        })));
    }

    /// Runs `task` for as long as the controller runs.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(AbortOnDrop(tokio::spawn(task)));
    }

    /// Reconciles every key queued, until the task is dropped. The controller's own
    /// tasks stop with it.
    pub async fn run<F, Fut, E>(self, reconcile: F)
    where
        F: Fn(Q) -> Fut,
        Fut: Future<Output = Result<Next, E>>,
        E: Display,
    {
        let Controller { name, tx, rx, concurrency, policy, tasks } = self;
        // Keys come from the triggers handed out; this one only kept the channel open.
        drop(tx);
        let _tasks = tasks;
        let observed = |key: Q| {
            let span = tracing::info_span!("reconcile", controller = name, object = %key);
            let work = reconcile(key);
            async move {
                let started = std::time::Instant::now();
                let result = work.await;
                let outcome = match &result {
                    Ok(Next::Done) => "done",
                    Ok(Next::After(_)) => "requeue",
                    Err(_) => "error",
                };
                RECONCILES.with_label_values(&[name, outcome]).observe(started.elapsed().as_secs_f64());
                result
            }
            .instrument(span)
        };
        crate::queue::run(rx, concurrency, &*policy, observed).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    #[test]
    fn the_default_policy_doubles_from_a_tenth_of_a_second_to_thirty() {
        let delays: Vec<u64> = [1, 2, 3, 4, 9, 10, 40].into_iter().map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 25_600, 30_000, 30_000]);
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_fan_ins_and_resyncs_reach_the_reconcile() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut c = Controller::<String>::new("test");
        let (coarse_tx, coarse_rx) = mpsc::unbounded_channel::<u32>();
        c.fan_in(coarse_rx, |n| (0..n).map(|i| format!("fanned-{i}")));
        c.resync(Duration::from_secs(10), || vec!["resynced".to_string()]);
        let trigger = c.trigger();
        let s = seen.clone();
        let task = tokio::spawn(c.run(move |key: String| {
            s.lock().unwrap().push(key);
            async { Ok::<_, String>(Next::Done) }
        }));
        trigger.send("watched".into()).unwrap();
        coarse_tx.send(2).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut got = seen.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, ["fanned-0", "fanned-1", "watched"], "nothing resynced at the start");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(seen.lock().unwrap().contains(&"resynced".to_string()), "the resync came one period later");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_key_is_retried_by_the_error_policy() {
        let tries = Arc::new(AtomicU32::new(0));
        let c = Controller::<&'static str>::new("test").error_policy(|failures| Duration::from_secs(u64::from(failures) * 5));
        let trigger = c.trigger();
        let t = tries.clone();
        let task = tokio::spawn(c.run(move |_key| {
            let n = t.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err("not yet")
                } else {
                    Ok(Next::Done)
                }
            }
        }));
        trigger.send("k").unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(tries.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(tries.load(Ordering::SeqCst), 2, "5 s after the first failure");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(tries.load(Ordering::SeqCst), 3, "10 s after the second");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(tries.load(Ordering::SeqCst), 3, "done after it succeeded");
        task.abort();
    }
}
