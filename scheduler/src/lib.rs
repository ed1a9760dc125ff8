//! The scheduler: decides which clusters each workload runs on, and keeps clusters'
//! health from their heartbeats.
//!
//! The decisions are pure functions, tested without a server:
//! - [`core`]: where one workload runs, or why nothing fits;
//! - [`selector`]: label selectors over cluster labels.

#![warn(missing_docs)]

pub mod core;
pub mod selector;
