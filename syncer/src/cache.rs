//! The syncer's watch caches: the runtime's, keyed by [`Key`] upstream (or, for
//! downstream copies, by [`Place`]), each change queueing the upstream object it
//! concerns ([`runtime::key`]).
//!
//! How an object is indexed and which upstream object its change queues are two
//! functions. Every event updates or removes its entry, whatever the object says: a
//! downstream copy is indexed by where it is ([`Place`]), which its cluster's users
//! cannot change, not by the annotations they can. An event whose upstream object
//! cannot be told (yet) still updates the entry; it only queues nothing.

#[cfg(doc)]
use crate::key::{Key, Place};

pub use runtime::key::{spawn, spawn_indexed, Cache, KeyOf};
