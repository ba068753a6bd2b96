//! The `BizGroupResourceQuota` CRD, generated from these Rust types.
//! `bizrq crd` prints it; `deploy/crd.yaml` is the committed copy, kept equal
//! by a test. The object's JSON is exactly `quota::Quota`'s, so converting
//! between the two is a serde round trip.

use kube::CustomResource;
use quota::object::{Quota, QuotaStatus};
use quota::ResourceList;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Guaranteed quota carved out of the parent (`hard`), and an optional
/// ceiling including borrowed capacity (`max`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bizrq.io",
    version = "v1",
    kind = "BizGroupResourceQuota",
    plural = "bizgroupresourcequotas",
    shortname = "bizrq",
    status = "Status",
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parent"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BizGroupResourceQuotaSpec {
    /// Name of the parent quota; "" for a root of the tree. Cannot change.
    #[serde(default)]
    pub parent: String,
    /// Guaranteed amounts per key: standard keys (requests.cpu, limits.memory,
    /// requests.nvidia.com/gpu, pods), model-qualified keys
    /// (limits.cpu.A4, requests.nvidia.com/gpu.A100) and cash keys
    /// (cash/requests.nvidia.com/gpu, in resource-hours).
    #[serde(default)]
    #[schemars(schema_with = "resource_list")]
    pub hard: ResourceList,
    /// Optional ceilings including capacity borrowed from siblings (≥ hard).
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[schemars(schema_with = "resource_list")]
    pub max: ResourceList,
}

/// Status as bizrq writes it: `quota::QuotaStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Status(pub QuotaStatus);

fn quantity() -> serde_json::Value {
    serde_json::json!({
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "x-kubernetes-int-or-string": true
    })
}

fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "additionalProperties": quantity() })
}

impl JsonSchema for Status {
    fn schema_name() -> Cow<'static, str> {
        "BizGroupResourceQuotaStatus".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let list = |description: &str| serde_json::json!({ "type": "object", "additionalProperties": quantity(), "description": description });
        let ledger = |description: &str| serde_json::json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": description });
        json_schema!({
            "type": "object",
            "properties": {
                "hard": list("spec.hard as last applied"),
                "used": list("selfUsed + the hard of every child (+ cash spent), for the keys of hard"),
                "selfUsed": list("usage of the workloads bound directly to this quota"),
                "lastReconcileTime": { "type": "string", "format": "date-time", "description": "end of the last cash accrual window" },
                "children": ledger("carve-out of each child, by child name"),
                "workloads": ledger("charge of each bound workload (pod sets, HPA reservation), by group/Kind/namespace/name"),
                "loans": ledger("loans granted to children beyond their hard, by child name: amount, since, raised"),
                "lent": list("sum of the loans granted to children"),
                "borrowed": list("used beyond hard on the keys of spec.max: on loan from the parent"),
                "reclaim": ledger("workloads marked for reclaim, by group/Kind/namespace/name: action, frees, marked, due"),
                "transfers": ledger("transfers in flight that hold children's carve-outs, by transfer id: children (their hard once done), since, decision (at the common ancestor)"),
                "cashAccrued": {
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                    "description": "exact cash accumulators: nano-units × milliseconds × per-mille price"
                }
            }
        })
    }
}

impl BizGroupResourceQuota {
    /// The same object in the engine's type.
    pub fn to_quota(&self) -> Result<Quota, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(self)?)
    }

    pub fn from_quota(q: &Quota) -> Result<BizGroupResourceQuota, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(q)?)
    }
}

/// The CRD as YAML, as `bizrq crd` prints it.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    serde_yaml_ng::to_string(&BizGroupResourceQuota::crd()).expect("the CRD serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    /// A structural schema prunes what it does not name: every field a
    /// status can carry must be in it, or the API server drops it.
    #[test]
    fn the_status_schema_names_every_status_field() {
        let full: quota::QuotaStatus = serde_json::from_value(serde_json::json!({
            "hard": {"pods": "1"}, "used": {"pods": "1"}, "selfUsed": {"pods": "1"},
            "lastReconcileTime": "2026-11-21T10:00:00Z",
            "children": {"c": {"hard": {"pods": "1"}, "since": "2026-11-21T10:00:00Z", "uid": "u"}},
            "workloads": {"apps/Deployment/ns/w": {"podSets": [], "since": "2026-11-21T10:00:00Z", "uid": "u"}},
            "cashAccrued": {"cash/pods": "1"},
            "loans": {"c": {"amount": {"pods": "1"}, "since": "2026-11-21T10:00:00Z"}},
            "lent": {"pods": "1"}, "borrowed": {"pods": "1"},
            "reclaim": {"apps/Deployment/ns/w": {"action": "suspend", "frees": {"pods": "1"}, "marked": "2026-11-21T10:00:00Z", "due": "2026-11-21T10:05:00Z"}},
            "transfers": {"7": {"children": {"c": {"pods": "2"}}, "since": "2026-11-21T10:00:00Z", "decision": {"outcome": "committed"}}}
        }))
        .unwrap();
        let fields = serde_json::to_value(&full).unwrap();
        let crd = serde_json::to_value(<BizGroupResourceQuota as kube::CustomResourceExt>::crd())
            .unwrap();
        let props = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"];
        for k in fields.as_object().unwrap().keys() {
            assert!(
                props.get(k).is_some(),
                "status.{k} is missing from the CRD schema"
            );
        }
        assert_eq!(
            fields.as_object().unwrap().len(),
            12,
            "a new status field: add it to the schema"
        );
    }

    #[test]
    fn names_match_the_engine() {
        assert_eq!(BizGroupResourceQuota::group(&()), quota::object::API_GROUP);
        assert_eq!(
            BizGroupResourceQuota::version(&()),
            quota::object::API_VERSION
        );
        assert_eq!(BizGroupResourceQuota::kind(&()), quota::object::KIND);
        assert_eq!(BizGroupResourceQuota::plural(&()), quota::object::PLURAL);
        use kube::CustomResourceExt;
        assert_eq!(
            BizGroupResourceQuota::shortnames(),
            &[quota::object::SHORT_NAME]
        );
    }

    #[test]
    fn committed_crd_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crd.yaml");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == crd_yaml(),
            "deploy/crd.yaml differs from the Rust types; regenerate it with: cargo run -p bizrq -- crd > deploy/crd.yaml"
        );
    }

    #[test]
    fn crd_is_cluster_scoped_with_status_and_columns() {
        use kube::CustomResourceExt;
        let crd = BizGroupResourceQuota::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let v = &crd.spec.versions[0];
        assert!(v
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some());
        let cols: Vec<&str> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(cols, ["Parent", "Age"]);
    }

    #[test]
    fn converts_both_ways_with_status_ledgers() {
        let mut q = Quota::new(
            "nlp-team",
            quota::QuotaSpec {
                parent: "ai".into(),
                hard: [("requests.nvidia.com/gpu".to_string(), "16".parse().unwrap())].into(),
                max: Default::default(),
            },
        );
        q.metadata.resource_version = Some("42".into());
        q.status.children.insert(
            "cv".into(),
            quota::object::Carve {
                hard: Default::default(),
                since: "2026-11-21T00:00:00.000Z".into(),
                uid: String::new(),
            },
        );
        let k = BizGroupResourceQuota::from_quota(&q).unwrap();
        assert_eq!(k.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(k.spec.hard, q.spec.hard);
        assert_eq!(k.to_quota().unwrap(), q);
    }
}
