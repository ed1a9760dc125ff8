//! `meta.k8s.io/v1` Table responses: what `kubectl get` prints.
//!
//! The columns and cells are the kind's ([`crate::kinds::Strategy::columns`]): built-in
//! kinds get the columns kube-apiserver's printers give them, custom resources their
//! `additionalPrinterColumns`, and anything else Name and Created At, the apiserver's
//! default table.

use std::borrow::Borrow;

use serde_json::{json, Value};

use crate::api::Scope;

/// Builds a Table from objects (already presented for the client).
pub fn table<T: std::borrow::Borrow<Value>>(
    scope: &Scope,
    objects: &[T],
    resource_version: &str,
    continue_token: Option<&str>,
    include_object: bool,
    with_columns: bool,
) -> Value {
    let objects = objects.iter().map(Borrow::borrow);
    let strategy = &scope.rt.strategy;
    let rows: Vec<Value> = objects.map(|o| row(o, strategy.cells(o), include_object)).collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "rows": rows});
    // A watch sends the column definitions with its first table only.
    if with_columns {
        t["columnDefinitions"] = Value::Array(strategy.columns());
    } else {
        t["columnDefinitions"] = json!([]);
    }
    t
}

fn row(obj: &Value, cells: Vec<Value>, include_object: bool) -> Value {
    let object = if include_object {
        obj.clone()
    } else {
        // kubectl reads namespace and labels from the row's PartialObjectMetadata.
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
    };
    json!({"cells": cells, "object": object})
}
