//! The `PriceList` custom resource (cluster-scoped, one object named
//! `default`): the price list per model in cluster mode, the same document
//! as the standalone file (docs/budgets.md §3). The validating webhook
//! (`/validate/prices`) refuses a bad one at the API server; every replica
//! follows the object with a watch (`follow`), since every replica's
//! webhook reserves and the leader's controller accrues at its prices.

use crate::service::prices::{InForce, PriceBook};
use kube::api::Api;
use kube::{Client, CustomResource};
use quota::budget::price_list_doc::{
    PriceListObject, ANY_MODEL, MAX_PER_CARD_HOUR, MAX_VERSIONS, MAX_WEIGHTS, NAME,
};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Spec of a PriceList: versions of billing weights per resource and
/// model, each from an instant, and an optional currency for display.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bizrq.io",
    version = "v1",
    kind = "PriceList",
    plural = "pricelists",
    doc = "bizrq's billing weights per GPU and CPU model (A100 1.0, H100 2.5, T4 0.3), versioned by the instant each takes effect; card-hour budgets accrue at the weight in force at each instant times the QoS multiplier. bizrq reads the one named 'default'.",
    validation = (
        "self.metadata.name == 'default'",
        "bizrq reads one price list, named 'default'"
    ),
    printcolumn = r#"{"name":"Currency","type":"string","jsonPath":".spec.currency.unit","description":"Unit budgets are shown in"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PriceListSpec {
    /// Versions in strictly increasing effectiveFrom order; each replaces
    /// the whole table from its instant on.
    #[serde(default)]
    #[schemars(schema_with = "versions")]
    pub versions: Vec<serde_json::Value>,
    /// Budgets shown in money: unit (EUR, CNY) and perCardHour, the
    /// price of one weighted resource-hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "currency")]
    pub currency: Option<serde_json::Value>,
}

fn weight() -> serde_json::Value {
    serde_json::json!({ "type": "number", "minimum": 0, "maximum": 1000 })
}

fn versions(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": MAX_VERSIONS,
        "items": {
            "type": "object",
            "description": "the weights in force from effectiveFrom until the next version",
            "properties": {
                "effectiveFrom": { "type": "string", "maxLength": 64, "description": "RFC 3339, e.g. 2026-07-01T00:00:00Z" },
                "defaultWeight": weight(),
                "billing": {
                    "type": "string",
                    "enum": ["ByRequest", "ByQuality"],
                    "description": "ByRequest (default): requests billed at the QoS multipliers. ByQuality: requests billed at qualityWeights by QoS class, and real usage above them (Burstable) and of BestEffort pods at theirs (docs/real-usage.md)"
                },
                "qualityWeights": {
                    "type": "object",
                    "description": "with billing ByQuality: the weight of each quality (defaults 1, 0.85, 0.5, 0.1)",
                    "properties": {
                        "guaranteed": weight(),
                        "burstableRequest": weight(),
                        "aboveRequest": weight(),
                        "bestEffort": weight()
                    }
                },
                "weights": {
                    "type": "object",
                    "maxProperties": MAX_WEIGHTS,
                    "description": format!("resource (requests.nvidia.com/gpu, cpu) → model (H100, or {ANY_MODEL} for the models not named) → weight (0 to 1000)"),
                    "additionalProperties": {
                        "type": "object",
                        "maxProperties": MAX_WEIGHTS,
                        "additionalProperties": weight()
                    }
                }
            },
            "required": ["effectiveFrom"],
            "x-kubernetes-validations": [{
                "rule": "!has(self.qualityWeights) || (has(self.billing) && self.billing == 'ByQuality')",
                "message": "qualityWeights are read with billing: ByQuality only"
            }]
        }
    })
}

fn currency(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "unit": { "type": "string", "minLength": 1, "maxLength": 16 },
            "perCardHour": { "type": "number", "minimum": 0, "maximum": MAX_PER_CARD_HOUR }
        },
        "required": ["unit", "perCardHour"]
    })
}

/// The object as the engine reads it (the same document as a file).
pub fn to_document(obj: &PriceList) -> Result<PriceListObject, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(obj)?)
}

/// Follows the `default` object: each version of it that compiles is put
/// in force; once it is deleted (or a re-list finds none) every weight is
/// 1 again. One stored past the webhook that does not compile is logged
/// and changes nothing.
pub async fn follow(client: Client, book: Arc<PriceBook>, clock: crate::service::Clock) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::runtime::WatchStreamExt;
    let api: Api<PriceList> = Api::all(client);
    let feed = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut feed = std::pin::pin!(feed);
    let mut seen_in_list = false;
    while let Some(ev) = feed.next().await {
        match ev {
            Ok(Event::Apply(obj)) => apply(&book, &obj, clock()),
            Ok(Event::InitApply(obj)) => {
                seen_in_list |= kube::ResourceExt::name_any(&obj) == NAME;
                apply(&book, &obj, clock());
            }
            Ok(Event::Delete(obj)) if kube::ResourceExt::name_any(&obj) == NAME => {
                clear(&book, clock())
            }
            Ok(Event::Delete(_)) => {}
            Ok(Event::Init) => seen_in_list = false,
            Ok(Event::InitDone) if !seen_in_list => clear(&book, clock()),
            Ok(Event::InitDone) => {}
            Err(e) => tracing::debug!(error = %e, "price list watch error; retrying"),
        }
    }
}

/// Reads the object once at start, so the first admissions already see
/// it; `follow` keeps it current. An error is logged (the watch retries).
pub async fn load_once(client: Client, book: &PriceBook, now_ms: i64) {
    let api: Api<PriceList> = Api::all(client);
    match api.get_opt(NAME).await {
        Ok(Some(obj)) => apply(book, &obj, now_ms),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "PriceList {NAME} not read at start; the watch retries")
        }
    }
}

/// No price list object: face value.
fn clear(book: &PriceBook, now_ms: i64) {
    if book.current().source.is_empty() {
        return;
    }
    book.set(InForce {
        loaded_ms: now_ms,
        ..Default::default()
    });
    tracing::info!("PriceList {NAME} is gone: every weight is 1 again");
}

/// Puts one version of the object in force if it compiles.
pub fn apply(book: &PriceBook, obj: &PriceList, now_ms: i64) {
    use kube::ResourceExt;
    if obj.name_any() != NAME {
        return;
    }
    let rv = obj.resource_version().unwrap_or_default();
    let source = format!("PriceList {NAME} (resourceVersion {rv})");
    let compiled = to_document(obj)
        .map_err(|e| e.to_string())
        .and_then(|d| d.compile().map_err(|e| e.to_string()));
    match compiled {
        Ok(list) => {
            let before = book.current();
            if *before.list == list {
                return;
            }
            let versions = list.versions.len();
            book.set(InForce {
                list: Arc::new(list),
                source: source.clone(),
                loaded_ms: now_ms,
            });
            tracing::info!(%source, versions, "price list in force");
        }
        Err(e) => {
            tracing::warn!(%source, error = %e, "price list refused; the one in force stays")
        }
    }
}
