//! Flotilla's control plane: a Kubernetes-compatible API server that serves many
//! logical clusters (workspaces) from one process and one store.
//!
//! Layers, bottom up: [`store`] (revisioned key-value store and watch window),
//! [`registry`] and [`kinds`]/[`crd`] (what is served and its rules), [`api`] (the one
//! generic resource engine), [`watch`], [`discovery`], [`openapi`] and [`table`]
//! (wire formats), [`tenancy`] with [`auth`] and [`authz`] (who may do what, in which
//! logical cluster), [`http`] (routing, negotiation) and [`server`] (running it).

pub mod access;
pub mod allocator;
pub mod api;
pub mod auth;
pub mod authz;
pub mod controllers;
pub mod crd;
pub mod credentials;
pub mod dashboard;
pub mod decode;
pub mod discovery;
pub mod error;
pub mod fsutil;
pub mod http;
pub mod kinds;
pub mod kubeconfig;
pub mod listener;
pub mod metrics;
pub mod openapi;
pub mod pod_logs;
pub mod registry;
pub mod server;
pub mod syncer_scope;
pub mod table;
pub mod tenancy;
pub mod tls;
pub mod views;
pub mod watch;

// The machinery and the storage this server is built on, under the paths its modules
// name them by.
pub use apimachinery::{jsonpath, objmeta, patch, protobuf, selector};
pub use storage as store;
