//! What the kinds' table columns are made of: column definitions, and the readers
//! their cells share.

use serde_json::{json, Value};

use crate::objmeta::{age, meta_str};

/// One column definition.
pub struct Col {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    priority: i64,
    description: &'static str,
}

/// A column; `priority` 0 shows by default, higher only with `-o wide`.
pub const fn col(name: &'static str, type_: &'static str, priority: i64, description: &'static str) -> Col {
    Col { name, type_, format: if matches!(name.as_bytes(), b"Name") { "name" } else { "" }, priority, description }
}

pub const NAME: Col = col("Name", "string", 0, "Name must be unique within a namespace.");
pub const AGE: Col = col("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.");
pub const CONTAINERS: Col = col("Containers", "string", 1, "Names of each container in the template.");
pub const IMAGES: Col = col("Images", "string", 1, "Images referenced by each container in the template.");
pub const CREATED_AT: Col = col("Created At", "date", 0, "Creation time");

/// The definitions of `cols`, as a Table carries them.
pub fn columns(cols: &[Col]) -> Vec<Value> {
    cols.iter().map(column).collect()
}

/// One column's definition, as a Table carries it.
pub fn column(c: &Col) -> Value {
    json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
}

/// The string at `ptr`, or "".
pub fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// The integer at `ptr`, or 0.
pub fn n(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

/// The number of entries of the map or list `field`.
pub fn count(v: &Value, field: &str) -> usize {
    match v.get(field) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

/// The Name cell.
pub fn name(obj: &Value) -> Value {
    json!(meta_str(obj, "name").unwrap_or_default())
}

/// The Age cell.
pub fn age_of(obj: &Value) -> Value {
    json!(age(meta_str(obj, "creationTimestamp")))
}
