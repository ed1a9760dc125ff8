//! Leader election over a `coordination.k8s.io/v1` Lease in `root`, so that two
//! processes of one controller (two schedulers) never both act.
//!
//! It follows client-go's leaderelection package in its rules:
//! - a Lease is taken only when it is free (no holder, released on shutdown) or when
//!   its record has not changed for a whole lease duration *as measured on this
//!   process's clock*, so clock skew between processes cannot steal a live lease;
//! - the holder renews every [`Timing::retry`]; if it cannot renew within
//!   [`Timing::renew_deadline`], it stops acting before the lease can expire for
//!   anyone else;
//! - every write is conditional on the resourceVersion read, so two candidates
//!   racing for a free Lease cannot both win.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use placement_api::SYSTEM_NAMESPACE;
use tokio::time::Instant;

/// A replica's membership Lease is this plus its identity (syncer/src/shard.rs).
pub const MEMBER_LEASE_PREFIX: &str = "flotilla-replica-";
/// The Lease of a SyncTarget's push-mode syncer, when replicas share them out, is
/// this plus the SyncTarget's name (syncer/src/shard.rs, scheduler/src/syncers.rs).
pub const SYNCER_LEASE_PREFIX: &str = "flotilla-syncer-";

/// Gives up every Lease in `root`/`flotilla-system` that `identity` holds, so that the
/// other replicas take its work over at once instead of after the Leases expire. For a
/// clean shutdown, once the work the Leases guard has stopped. Returns how many it gave up.
pub async fn release_all(root: Client, identity: &str) -> usize {
    let api: Api<Lease> = Api::namespaced(root, SYSTEM_NAMESPACE);
    let Ok(list) = api.list(&Default::default()).await else { return 0 };
    let mut released = 0;
    for mut lease in list.items {
        let Some(name) = lease.metadata.name.clone() else { continue };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(identity) {
            continue;
        }
        spec.holder_identity = None;
        spec.renew_time = Some(now());
        // Conditional on the version read: a Lease taken over meanwhile stays taken.
        match api.replace(&name, &PostParams::default(), &lease).await {
            Ok(_) => released += 1,
            Err(e) => tracing::warn!(error = %e, lease = %name, "could not give the Lease up; it expires in its own time"),
        }
    }
    released
}

/// Lease timings.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long a Lease lasts without renewal.
    pub lease: Duration,
    /// The holder gives up if it has not renewed for this long.
    pub renew_deadline: Duration,
    /// How often the holder renews, and candidates try.
    pub retry: Duration,
}

impl Default for Timing {
    /// client-go's defaults, scaled down: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Timing { lease: Duration::from_secs(15), renew_deadline: Duration::from_secs(10), retry: Duration::from_secs(2) }
    }
}

/// What identifies one renewal of a Lease: its holder and renew time.
type Record = (Option<String>, Option<MicroTime>);

/// One candidate.
pub struct Elector {
    api: Api<Lease>,
    /// The Lease's name, in `root`/`flotilla-system`: the controller's.
    lease: String,
    identity: String,
    timing: Timing,
    /// The record last seen (holder, renew time) and when it was first seen.
    observed: Option<(Record, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Elector {
    /// A candidate named `identity` for the Lease `lease`; `root` is a client of the
    /// `root` workspace.
    pub fn new(root: Client, lease: impl Into<String>, identity: String, timing: Timing) -> Self {
        Elector { api: Api::namespaced(root, SYSTEM_NAMESPACE), lease: lease.into(), identity, timing, observed: None }
    }

    /// Notes the Lease's record, and returns since when (on this process's clock) it has
    /// not changed.
    fn note(&mut self, spec: &LeaseSpec) -> Instant {
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder, spec.renew_time.clone());
        let seen_at = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record, seen_at));
        seen_at
    }

    /// How long a candidate waits before it tries again: the retry period, or less when
    /// the Lease it saw expires sooner, so that a dead holder is replaced as soon as its
    /// Lease runs out rather than up to a retry later.
    pub fn until_next_try(&self) -> Duration {
        let expires_in = self.observed.as_ref().map(|(_, seen)| self.timing.lease.saturating_sub(seen.elapsed()));
        match expires_in {
            Some(left) if left < self.timing.retry => left + Duration::from_millis(10),
            _ => self.timing.retry,
        }
    }

    /// Reads the Lease without taking it, so that its expiry is timed from now on even
    /// while this candidate does not compete; returns its holder, if any.
    pub async fn observe(&mut self) -> Result<Option<String>, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.lease).await? else { return Ok(None) };
        let spec = lease.spec.unwrap_or_default();
        self.note(&spec);
        Ok(spec.holder_identity.filter(|h| !h.is_empty()))
    }

    /// Tries once to take or renew the Lease. `Ok(true)`: this candidate holds it.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let seconds = i32::try_from(self.timing.lease.as_secs()).unwrap_or(15);
        let Some(mut lease) = self.api.get_opt(&self.lease).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.lease.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let seen_at = self.note(spec);
        let mine = holder.as_deref() == Some(self.identity.as_str());
        let expired = seen_at.elapsed() >= self.timing.lease;
        if !(mine || holder.is_none() || expired) {
            return Ok(false);
        }
        if !mine {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.acquire_time = Some(now());
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(seconds);
        match self.api.replace(&self.lease, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up, so the next candidate takes over at once.
    pub async fn release(&mut self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.lease).await {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                spec.renew_time = Some(now());
                if let Err(e) = self.api.replace(&self.lease, &PostParams::default(), &lease).await {
                    tracing::warn!(error = %e, lease = %self.lease, "could not release the Lease; the next candidate waits for it to expire");
                }
            }
        }
    }

    /// Runs `work` whenever this candidate holds the Lease, and stops it as soon as the
    /// Lease cannot be renewed in time. Never returns.
    pub async fn run<F, Fut>(&mut self, work: F) -> !
    where
        F: Fn() -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            loop {
                match self.try_acquire_or_renew().await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, lease = %self.lease, "could not read the Lease; retrying"),
                }
                tokio::time::sleep(self.until_next_try()).await;
            }
            tracing::info!(identity = %self.identity, lease = %self.lease, "became the leader");
            let task = crate::AbortOnDrop(tokio::spawn(work()));
            let mut renewed = Instant::now();
            loop {
                tokio::time::sleep(self.timing.retry).await;
                // A slow answer still renews: under load an attempt may take until the
                // renew deadline, which stays inside the Lease, so no other candidate can
                // take over meanwhile. Cutting each attempt at `retry` made a control
                // plane that answered in 2-3 s drop its scheduler.
                let left = self.timing.renew_deadline.saturating_sub(renewed.elapsed());
                let attempt = tokio::time::timeout(left, self.try_acquire_or_renew()).await;
                match attempt.unwrap_or_else(|_| Err(kube::Error::Service("the renewal timed out".into()))) {
                    Ok(true) => renewed = Instant::now(),
                    Ok(false) => {
                        tracing::error!(identity = %self.identity, lease = %self.lease, "another process holds the Lease; stopping");
                        break;
                    }
                    Err(e) if renewed.elapsed() >= self.timing.renew_deadline => {
                        tracing::error!(error = %e, lease = %self.lease, "could not renew the Lease in time; stopping");
                        break;
                    }
                    Err(e) => tracing::warn!(error = %e, lease = %self.lease, "could not renew the Lease; retrying"),
                }
            }
            drop(task);
        }
    }
}
