//! The kinds that are stored as they are typed, with no rule of their own beyond
//! their columns: ServiceAccounts, Leases, Nodes, and the RBAC objects that a
//! simulated cluster stores (and authorizes by token alone).

use serde_json::{json, Value};

use super::print::{self, col, AGE, NAME};
use super::{decode_typed, decoded, Decoded, Strategy};

/// core/v1 ServiceAccount.
#[derive(Debug)]
pub struct ServiceAccount;

/// coordination.k8s.io/v1 Lease.
#[derive(Debug)]
pub struct Lease;

/// core/v1 Node (physical clusters only).
#[derive(Debug)]
pub struct Node;

/// rbac.authorization.k8s.io/v1 ClusterRole (physical clusters only; stored, not enforced).
#[derive(Debug)]
pub struct ClusterRole;

/// rbac.authorization.k8s.io/v1 ClusterRoleBinding (physical clusters only; stored, not enforced).
#[derive(Debug)]
pub struct ClusterRoleBinding;

impl Strategy for ServiceAccount {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::ServiceAccount>("ServiceAccount", obj, old, status_write, decoded)
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Secrets", "string", 0, "Number of secrets"), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(print::count(obj, "secrets")), print::age_of(obj)]
    }
}

impl Strategy for Lease {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::coordination::v1::Lease>("Lease", obj, old, status_write, decoded)
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Holder", "string", 0, "The holder of the lease"), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(print::s(obj, "/spec/holderIdentity")), print::age_of(obj)]
    }
}

impl Strategy for Node {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::core::v1::Node>("Node", obj, old, status_write, decoded)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.unschedulable"]
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col("Version", "string", 0, "Kubelet Version reported by the node."),
            col("Internal-IP", "string", 1, "List of internal IPs."),
            col("External-IP", "string", 1, "List of external IPs."),
            col("OS-Image", "string", 1, "OS Image reported by the node."),
            col("Kernel-Version", "string", 1, "Kernel Version reported by the node."),
            col("Container-Runtime", "string", 1, "Container Runtime Version reported by the node."),
        ])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let ready = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .map(|c| if c["status"] == "True" { "Ready" } else { "NotReady" })
            .unwrap_or("Unknown");
        let status = if obj.pointer("/spec/unschedulable") == Some(&json!(true)) {
            format!("{ready},SchedulingDisabled")
        } else {
            ready.to_string()
        };
        let roles: Vec<&str> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|l| l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/")).collect())
            .unwrap_or_default();
        let address = |t: &str| {
            obj.pointer("/status/addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|x| x["type"] == t))
                .and_then(|x| x["address"].as_str())
                .unwrap_or("<none>")
                .to_string()
        };
        vec![
            print::name(obj),
            json!(status),
            json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
            print::age_of(obj),
            json!(print::s(obj, "/status/nodeInfo/kubeletVersion")),
            json!(address("InternalIP")),
            json!(address("ExternalIP")),
            json!(print::s(obj, "/status/nodeInfo/osImage")),
            json!(print::s(obj, "/status/nodeInfo/kernelVersion")),
            json!(print::s(obj, "/status/nodeInfo/containerRuntimeVersion")),
        ]
    }
}

impl Strategy for ClusterRole {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::rbac::v1::ClusterRole>("ClusterRole", obj, old, status_write, decoded)
    }
}

impl Strategy for ClusterRoleBinding {
    fn decode(&self, obj: Value, old: Option<&Value>, status_write: bool) -> Result<Decoded, String> {
        decode_typed::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>("ClusterRoleBinding", obj, old, status_write, decoded)
    }

    fn columns(&self) -> Vec<Value> {
        print::columns(&[NAME, col("Role", "string", 0, "The role bound"), AGE])
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![print::name(obj), json!(format!("{}/{}", print::s(obj, "/roleRef/kind"), print::s(obj, "/roleRef/name"))), print::age_of(obj)]
    }
}
