//! Custom resources: every rule comes from the CRD version that serves them, as in
//! kube-apiserver's apiextensions handler: the structural schema prunes, defaults and
//! validates them, and its printer columns make their table.

use std::sync::Arc;

use serde_json::{json, Value};

use super::print::{self, AGE, NAME};
use super::{Decoded, Strategy};
use crate::error::Cause;
use crate::jsonpath::JsonPath;
use crate::objmeta::{age, meta_str, NameRule};
use crate::patch::meta::{PatchMeta, SchemaPatchMeta};

/// An `additionalPrinterColumns` entry, compiled.
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// OpenAPI format.
    pub format: String,
    /// Description shown by `kubectl explain`-like tools.
    pub description: String,
    /// 0 shows by default; higher only with `-o wide`.
    pub priority: i64,
    /// The compiled JSONPath.
    pub path: Arc<JsonPath>,
}

/// What a CRD version contributes.
#[derive(Debug)]
pub struct CustomDef {
    /// The version's `openAPIV3Schema`.
    pub schema: Value,
    /// The version's printer columns.
    pub columns: Vec<PrinterColumn>,
    /// List semantics from the schema.
    pub patch_meta: SchemaPatchMeta,
    /// The name of the CRD object (`<plural>.<group>`).
    pub crd_name: String,
}

/// The strategy of one served version of a CRD.
#[derive(Debug, Clone)]
pub struct CustomResource(pub Arc<CustomDef>);

/// ObjectMeta fields a custom resource may carry; everything else in metadata is pruned.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn prune_meta(obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let extra: Vec<String> = m.keys().filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str())).cloned().collect();
        for k in extra {
            m.remove(&k);
            unknown.push(format!("metadata.{k}"));
        }
    }
    unknown
}

impl Strategy for CustomResource {
    fn decode(&self, mut obj: Value, _old: Option<&Value>, _status_write: bool) -> Result<Decoded, String> {
        let mut unknown = prune_meta(&mut obj);
        unknown.extend(crate::crd::schema::prune(&mut obj, &self.0.schema));
        Ok(Decoded { value: obj, unknown })
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, obj: &mut Value) {
        crate::crd::schema::apply_defaults(obj, &self.0.schema);
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        crate::crd::schema::validate_update(obj, old, &self.0.schema)
    }

    /// The generation moves on any change outside metadata and status.
    fn generation_changed(&self, old: &Value, new: &Value) -> Option<bool> {
        fn rest(v: &Value) -> Vec<(&String, &Value)> {
            let mut fields: Vec<_> = v.as_object().into_iter().flatten().filter(|(k, _)| *k != "metadata" && *k != "status").collect();
            fields.sort_unstable_by_key(|(k, _)| *k);
            fields
        }
        Some(rest(old) != rest(new))
    }

    /// An update must name the resourceVersion it replaces.
    fn allow_unconditional_update(&self) -> bool {
        false
    }

    fn delete_answers_with_object(&self) -> bool {
        true
    }

    fn patch_meta(&self) -> &dyn PatchMeta {
        &self.0.patch_meta
    }

    fn openapi_schema(&self) -> Value {
        self.0.schema.clone()
    }

    fn crd_name(&self) -> Option<&str> {
        Some(&self.0.crd_name)
    }

    /// Name, the printer columns, and Age only when a version declares none
    /// (apiextensions' serveDefaultColumnsIfEmpty).
    fn columns(&self) -> Vec<Value> {
        let def = &self.0;
        let mut cols = vec![print::column(&NAME)];
        for c in &def.columns {
            cols.push(json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}));
        }
        if def.columns.is_empty() {
            cols.push(print::column(&AGE));
        }
        cols
    }

    fn cells(&self, o: &Value) -> Vec<Value> {
        let def = &self.0;
        let mut cells = vec![json!(meta_str(o, "name").unwrap_or_default())];
        for c in &def.columns {
            let vals = c.path.eval(o);
            let cell = match vals.first() {
                None => Value::Null,
                // Date columns display as an age, as the apiserver renders them.
                Some(Value::String(t)) if c.type_ == "date" => json!(age(Some(t))),
                Some(v) if vals.len() == 1 => (*v).clone(),
                Some(_) => {
                    json!(vals.iter().map(|v| v.as_str().map(String::from).unwrap_or_else(|| v.to_string())).collect::<Vec<_>>().join(","))
                }
            };
            cells.push(cell);
        }
        if def.columns.is_empty() {
            cells.push(print::age_of(o));
        }
        cells
    }
}
