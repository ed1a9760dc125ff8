//! The periodic resync every controller runs beside its watches, as kube-runtime's
//! and client-go's informers have it: every so often each known key is queued again,
//! so that what a missed event or a failed write left wrong is put right.
//!
//! The first round comes one period after the start, never at once: the first list of
//! the watches has just queued every key, and doing it all again in the same instant
//! would only double the start's work.

use std::future::Future;
use std::time::Duration;

use crate::AbortOnDrop;

/// Runs `round` every `period`, the first time one period from now, until the handle
/// is dropped. A round that takes longer than the period delays the next one rather
/// than overlapping it.
pub fn every<F, Fut>(period: Duration, mut round: F) -> AbortOnDrop<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            round().await;
        }
    }))
}

/// Queues every key `keys` gives into `tx` every `period` (see [`every`]).
pub fn keys<K, I, F>(period: Duration, tx: tokio::sync::mpsc::UnboundedSender<K>, mut keys: F) -> AbortOnDrop<()>
where
    K: Send + 'static,
    I: IntoIterator<Item = K>,
    F: FnMut() -> I + Send + 'static,
{
    every(period, move || {
        for k in keys() {
            let _ = tx.send(k);
        }
        std::future::ready(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn the_first_round_is_one_period_after_the_start() {
        let rounds = Arc::new(AtomicUsize::new(0));
        let r = rounds.clone();
        let _resync = every(Duration::from_secs(30), move || {
            r.fetch_add(1, Ordering::SeqCst);
            std::future::ready(())
        });
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 0, "nothing at the start");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn every_key_is_queued_each_round_and_dropping_the_handle_stops_it() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let resync = keys(Duration::from_secs(10), tx, || vec!["a", "b"]);
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!((rx.try_recv(), rx.try_recv(), rx.try_recv().is_err()), (Ok("a"), Ok("b"), true));
        drop(resync);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(rx.try_recv().is_err(), "no round after the handle is dropped");
    }
}
