//! What every Flotilla controller shares, whatever it controls: the work queue
//! ([`queue`]), the workspace-aware watch cache and its one object key ([`cache`];
//! with the kind of a synced object, [`key`]),
//! clients of one workspace or of all of them ([`clients`]), Events on the objects a
//! controller acts on ([`events`]), Lease-based leader election ([`leader`]), and the
//! error predicates retries and metrics are decided by ([`errors`]), and the periodic
//! resync beside every watch ([`resync`]), the [`controller`] builder that puts
//! watches, triggers, resync and a reconcile function together, and the [`manager`]
//! that starts, leases and stops a process's controllers. The scheduler,
//! the syncers and the workspace-side controllers are built on it; none of them
//! depends on another.

#![warn(missing_docs)]

pub mod cache;
pub mod clients;
pub mod controller;
pub mod errors;
pub mod events;
pub mod followers;
pub mod key;
pub mod leader;
pub mod manager;
pub mod queue;
pub mod resync;
pub mod settled;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pub use cache::ObjKey;
pub use key::Key;

/// A task that is aborted when its handle is dropped, so that stopping a parent task
/// stops what it started.
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}
