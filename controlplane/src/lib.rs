//! Flotilla's control plane: a Kubernetes-compatible API server that serves many
//! logical clusters (workspaces) from one process and one store.

pub mod store;
