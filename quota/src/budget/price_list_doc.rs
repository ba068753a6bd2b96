//! The price list as people write it (docs/budgets.md §3): one document,
//! the same in a file (standalone, `--price-list`) and as the cluster's
//! `PriceList` object named `default`. Weights are grouped by resource,
//! models under it:
//!
//! ```yaml
//! apiVersion: bizrq.io/v1
//! kind: PriceList
//! metadata: {name: default}
//! spec:
//!   currency: {unit: EUR, perCardHour: 2.5}
//!   versions:
//!   - effectiveFrom: "2026-01-01T00:00:00Z"
//!     weights:
//!       requests.nvidia.com/gpu: {A100: 1.0, H100: 2.5, T4: 0.3, "*": 1}
//! ```
//!
//! `compile` checks everything a hostile document could get wrong (sizes,
//! lengths, times, order, weights) and turns it into the `PriceList` the
//! accrual reads. A document that does not compile changes nothing.

use super::price_list::{split_model, Currency, PriceError, PriceList, PriceVersion, Weight};
use crate::keys::is_model_name;
use crate::quantity::Quantity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const API_VERSION: &str = "bizrq.io/v1";
pub const KIND: &str = "PriceList";
/// The one price list bizrq reads; other names are refused.
pub const NAME: &str = "default";
/// Versions one list may hold (a price change a week for over a year).
pub const MAX_VERSIONS: usize = 64;
/// Weights one version may hold, over all its resources.
pub const MAX_WEIGHTS: usize = 256;
/// The largest document read (bytes), file or object.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// The highest `perCardHour` accepted, in units of money.
pub const MAX_PER_CARD_HOUR: i64 = 1_000_000;
/// The model key that stands for every model of a resource not named.
pub const ANY_MODEL: &str = "*";

/// The spec: versions in effective order, and an optional currency.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceListSpec {
    #[serde(default)]
    pub versions: Vec<VersionSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
}

/// The weights in force from `effectiveFrom` until the next version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionSpec {
    /// RFC 3339 (`2026-07-01T00:00:00Z`), to the millisecond.
    pub effective_from: String,
    /// For every resource and model named nowhere below (1 when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_weight: Option<Weight>,
    /// Resource (`requests.nvidia.com/gpu`, `nvidia.com/gpu` or `cpu`) →
    /// model (`H100`, or `*` for the models not named) → weight.
    #[serde(default)]
    pub weights: BTreeMap<String, BTreeMap<String, Weight>>,
}

/// The whole object, as a file holds it and the API server stores it
/// (metadata and other fields beyond these are ignored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceListObject {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: crate::object::ObjectMeta,
    #[serde(default)]
    pub spec: PriceListSpec,
}

impl PriceListObject {
    /// The object checked as a whole: its kind, its name, its spec.
    pub fn compile(&self) -> Result<PriceList, PriceError> {
        if !self.api_version.is_empty() && self.api_version != API_VERSION
            || !self.kind.is_empty() && self.kind != KIND
        {
            return Err(PriceError::Document(format!(
                "a price list is apiVersion {API_VERSION}, kind {KIND}, not {} {}",
                short(&self.api_version),
                short(&self.kind)
            )));
        }
        check_name(&self.metadata.name)?;
        self.spec.compile()
    }
}

/// bizrq reads one price list, named `default` (empty: a file that names
/// none).
pub fn check_name(name: &str) -> Result<(), PriceError> {
    if name.is_empty() || name == NAME {
        Ok(())
    } else {
        Err(PriceError::Document(format!(
            "bizrq reads one price list, named '{NAME}'; '{}' would never be read",
            short(name)
        )))
    }
}

/// At most 64 characters of what someone wrote, for an error message.
fn short(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

impl PriceListSpec {
    /// Every rule, then the `PriceList` it means.
    pub fn compile(&self) -> Result<PriceList, PriceError> {
        if self.versions.len() > MAX_VERSIONS {
            return Err(PriceError::Document(format!(
                "{} versions; a price list holds at most {MAX_VERSIONS} (drop the oldest: a version before the oldest accrual still open changes nothing)",
                self.versions.len()
            )));
        }
        let mut list = PriceList {
            versions: Vec::with_capacity(self.versions.len()),
            currency: self.currency.clone(),
        };
        for v in &self.versions {
            list.versions.push(v.compile()?);
        }
        if let Some(c) = &list.currency {
            if c.unit.chars().any(char::is_control) {
                return Err(PriceError::Currency(
                    "unit must be printable, e.g. EUR or CNY".into(),
                ));
            }
            if c.per_card_hour > Quantity::from_units(MAX_PER_CARD_HOUR) {
                return Err(PriceError::Currency(format!(
                    "perCardHour {} is above the largest accepted, {MAX_PER_CARD_HOUR}",
                    c.per_card_hour
                )));
            }
        }
        list.validate()?;
        Ok(list)
    }
}

impl VersionSpec {
    fn compile(&self) -> Result<PriceVersion, PriceError> {
        let at = short(&self.effective_from);
        let effective_ms = (self.effective_from.len() <= 64)
            .then(|| crate::time::parse_rfc3339(&self.effective_from))
            .flatten()
            .ok_or_else(|| {
                PriceError::Document(format!(
                    "effectiveFrom '{at}' is not an RFC 3339 time such as 2026-07-01T00:00:00Z"
                ))
            })?;
        let n: usize = self.weights.values().map(BTreeMap::len).sum();
        if n > MAX_WEIGHTS {
            return Err(PriceError::Document(format!(
                "version {at} has {n} weights; at most {MAX_WEIGHTS}"
            )));
        }
        let mut weights = BTreeMap::new();
        for (resource, models) in &self.weights {
            let bare = resource
                .strip_prefix("requests.")
                .or_else(|| resource.strip_prefix("limits."))
                .unwrap_or(resource);
            if split_model(bare).1.is_some() || bare.is_empty() || bare.len() > 253 {
                return Err(PriceError::Document(format!(
                    "version {at}: '{}' is not a resource: write the resource (requests.nvidia.com/gpu, cpu) and its models under it ({{H100: 2.5}})",
                    short(resource)
                )));
            }
            for (model, w) in models {
                let key = if model == ANY_MODEL {
                    bare.to_string()
                } else if is_model_name(model) {
                    format!("{bare}.{model}")
                } else {
                    return Err(PriceError::Document(format!(
                        "version {at}: model '{}' of {} is not a model name (letters, digits, '-', '_', at most 63) nor '*'",
                        short(model),
                        short(resource)
                    )));
                };
                if weights.insert(key.clone(), *w).is_some() {
                    return Err(PriceError::Document(format!(
                        "version {at}: {key} is weighted twice (requests., limits. and the bare resource name the same resource)"
                    )));
                }
            }
        }
        Ok(PriceVersion {
            effective_ms,
            weights,
            default_weight: self.default_weight.unwrap_or(Weight::ONE),
        })
    }
}

impl PriceList {
    /// The document of this list (for showing what is in force).
    pub fn to_spec(&self) -> PriceListSpec {
        PriceListSpec {
            versions: self
                .versions
                .iter()
                .map(|v| {
                    let mut weights: BTreeMap<String, BTreeMap<String, Weight>> = BTreeMap::new();
                    for (k, w) in &v.weights {
                        let (r, m) = split_model(k);
                        weights
                            .entry(r.to_string())
                            .or_default()
                            .insert(m.unwrap_or(ANY_MODEL).to_string(), *w);
                    }
                    VersionSpec {
                        effective_from: crate::time::format_rfc3339(v.effective_ms),
                        default_weight: Some(v.default_weight),
                        weights,
                    }
                })
                .collect(),
            currency: self.currency.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Result<PriceList, PriceError> {
        serde_json::from_value::<PriceListSpec>(json)
            .map_err(|e| PriceError::Document(e.to_string()))?
            .compile()
    }

    #[test]
    fn models_under_their_resource_become_weight_keys() {
        let l = spec(serde_json::json!({
            "currency": {"unit": "EUR", "perCardHour": 2.5},
            "versions": [{"effectiveFrom": "2026-01-01T00:00:00Z", "defaultWeight": 0.5,
              "weights": {"requests.nvidia.com/gpu": {"A100": 1.0, "H100": 2.5, "T4": 0.3, "*": 1.2},
                          "cpu": {"*": "0.01"}}}]
        }))
        .unwrap();
        let v = &l.versions[0];
        assert_eq!(v.weights["nvidia.com/gpu.H100"], Weight(2500));
        assert_eq!(v.weights["nvidia.com/gpu.T4"], Weight(300));
        assert_eq!(v.weights["nvidia.com/gpu"], Weight(1200));
        assert_eq!(v.weights["cpu"], Weight(10));
        assert_eq!(v.default_weight, Weight(500));
        assert_eq!(l.to_spec().compile().unwrap(), l);
    }

    #[test]
    fn hostile_documents_are_refused_with_what_to_fix() {
        let v = |w: serde_json::Value| {
            spec(
                serde_json::json!({"versions": [{"effectiveFrom": "2026-01-01T00:00:00Z", "weights": w}]}),
            )
        };
        let msg = |r: Result<PriceList, PriceError>| r.unwrap_err().to_string();
        assert!(msg(v(serde_json::json!({"cpu": {"*": -1}}))).contains("weight"));
        assert!(msg(v(serde_json::json!({"cpu": {"*": 1000.5}}))).contains("1000"));
        assert!(msg(v(serde_json::json!({"cpu": {"A 1": 1}}))).contains("model"));
        assert!(msg(v(serde_json::json!({"nvidia.com/gpu.A100": {"*": 1}}))).contains("resource"));
        assert!(msg(v(
            serde_json::json!({"requests.cpu": {"*": 1}, "limits.cpu": {"*": 2}})
        ))
        .contains("twice"));
        let many: serde_json::Map<_, _> = (0..300)
            .map(|i| (format!("M{i}"), serde_json::json!(1)))
            .collect();
        assert!(msg(v(serde_json::json!({ "cpu": many }))).contains("at most 256"));
        let versions: Vec<_> = (0..65)
            .map(|i| serde_json::json!({"effectiveFrom": crate::time::format_rfc3339(i * 1000)}))
            .collect();
        assert!(msg(spec(serde_json::json!({ "versions": versions }))).contains("at most 64"));
        assert!(msg(spec(serde_json::json!({"versions": [
            {"effectiveFrom": "2026-02-01T00:00:00Z"}, {"effectiveFrom": "2026-01-01T00:00:00Z"}]})))
        .contains("increasing"));
        assert!(msg(spec(
            serde_json::json!({"versions": [{"effectiveFrom": "next tuesday"}]})
        ))
        .contains("RFC 3339"));
        assert!(msg(spec(
            serde_json::json!({"currency": {"unit": "EUR", "perCardHour": "2000000"}})
        ))
        .contains("perCardHour"));
        assert!(msg(spec(
            serde_json::json!({"currency": {"unit": "EURO-DOLLAR-YEN-X", "perCardHour": 1}})
        ))
        .contains("16"));
        assert!(
            serde_json::from_value::<PriceListSpec>(serde_json::json!({"version": []})).is_err()
        );
        let obj = |name: &str| PriceListObject {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: crate::object::ObjectMeta {
                name: name.into(),
                ..Default::default()
            },
            spec: PriceListSpec::default(),
        };
        assert!(obj("default").compile().is_ok());
        assert!(obj("cheap")
            .compile()
            .unwrap_err()
            .to_string()
            .contains("'default'"));
    }
}
