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

use super::price_list::{
    split_model, Billing, Currency, PriceError, PriceList, PriceVersion, QualityWeights, Weight,
};
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
    /// `ByRequest` (absent) or `ByQuality` (docs/real-usage.md, "Billing
    /// by quality"); read as text so a wrong one is named in the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing: Option<String>,
    /// With `ByQuality` only: the weights of each quality (defaults 1,
    /// 0.85, 0.5, 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_weights: Option<QualityWeightsSpec>,
}

/// `qualityWeights` as written: each weight optional (its default), read
/// as text so a bad one is refused naming its field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QualityWeightsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guaranteed: Option<WeightText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstable_request: Option<WeightText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_request: Option<WeightText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_effort: Option<WeightText>,
}

/// A weight as written (a string or a number), checked by `compile`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightText(pub String);

impl Serialize for WeightText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for WeightText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<WeightText, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = WeightText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a weight such as 0.85")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WeightText, E> {
                Ok(WeightText(v.chars().take(64).collect()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<WeightText, E> {
                Ok(WeightText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<WeightText, E> {
                Ok(WeightText(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<WeightText, E> {
                Ok(WeightText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl QualityWeightsSpec {
    fn compile(&self, at: &str) -> Result<QualityWeights, PriceError> {
        let d = QualityWeights::default();
        let one = |name: &str, t: &Option<WeightText>, default: Weight| match t {
            None => Ok(default),
            Some(t) => t.0.parse::<Weight>().map_err(|e| {
                PriceError::Document(format!("version {at}: qualityWeights.{name}: {e}"))
            }),
        };
        Ok(QualityWeights {
            guaranteed: one("guaranteed", &self.guaranteed, d.guaranteed)?,
            burstable_request: one(
                "burstableRequest",
                &self.burstable_request,
                d.burstable_request,
            )?,
            above_request: one("aboveRequest", &self.above_request, d.above_request)?,
            best_effort: one("bestEffort", &self.best_effort, d.best_effort)?,
        })
    }
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
        let billing = match self.billing.as_deref() {
            None | Some("ByRequest") => Billing::ByRequest,
            Some("ByQuality") => Billing::ByQuality,
            Some(other) => {
                return Err(PriceError::Document(format!(
                    "version {at}: billing '{}' is not ByRequest or ByQuality",
                    short(other)
                )))
            }
        };
        let quality = match (billing, &self.quality_weights) {
            (Billing::ByRequest, Some(_)) => {
                return Err(PriceError::Document(format!(
                    "version {at}: qualityWeights are read with billing: ByQuality only; set billing: ByQuality or leave qualityWeights out"
                )))
            }
            (Billing::ByRequest, None) => None,
            (Billing::ByQuality, None) => Some(QualityWeights::default()),
            (Billing::ByQuality, Some(q)) => Some(q.compile(&at)?),
        };
        Ok(PriceVersion {
            effective_ms,
            weights,
            default_weight: self.default_weight.unwrap_or(Weight::ONE),
            quality,
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
                        billing: v.quality.map(|_| Billing::ByQuality.to_string()),
                        quality_weights: v.quality.map(|q| QualityWeightsSpec {
                            guaranteed: Some(WeightText(q.guaranteed.to_string())),
                            burstable_request: Some(WeightText(q.burstable_request.to_string())),
                            above_request: Some(WeightText(q.above_request.to_string())),
                            best_effort: Some(WeightText(q.best_effort.to_string())),
                        }),
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
        assert_eq!(v.billing(), Billing::ByRequest);
    }

    #[test]
    fn billing_by_quality_takes_its_weights_or_the_defaults() {
        let l = spec(serde_json::json!({"versions": [
            {"effectiveFrom": "2026-01-01T00:00:00Z", "billing": "ByQuality"},
            {"effectiveFrom": "2026-02-01T00:00:00Z", "billing": "ByQuality",
             "qualityWeights": {"burstableRequest": "0.9", "bestEffort": 0.05}},
            {"effectiveFrom": "2026-03-01T00:00:00Z", "billing": "ByRequest"}]}))
        .unwrap();
        assert_eq!(l.versions[0].quality, Some(QualityWeights::default()));
        let q = l.versions[1].quality.unwrap();
        assert_eq!(
            (
                q.guaranteed,
                q.burstable_request,
                q.above_request,
                q.best_effort
            ),
            (Weight(1000), Weight(900), Weight(500), Weight(50))
        );
        assert_eq!(l.versions[2].billing(), Billing::ByRequest);
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
        let billed = |b: serde_json::Value| {
            spec(serde_json::json!({"versions": [
                {"effectiveFrom": "2026-01-01T00:00:00Z", "billing": b["billing"], "qualityWeights": b["q"]}]}))
        };
        assert!(msg(billed(serde_json::json!({"billing": "ByUse"})))
            .contains("billing 'ByUse' is not ByRequest or ByQuality"));
        assert!(msg(billed(
            serde_json::json!({"billing": "ByQuality", "q": {"aboveRequest": -0.5}})
        ))
        .contains("qualityWeights.aboveRequest: '-0.5' is not a weight"));
        assert!(msg(billed(
            serde_json::json!({"billing": "ByQuality", "q": {"bestEffort": "0.1x"}})
        ))
        .contains("qualityWeights.bestEffort"));
        assert!(msg(billed(
            serde_json::json!({"billing": "ByQuality", "q": {"guaranteed": 1001}})
        ))
        .contains("qualityWeights.guaranteed"));
        assert!(msg(billed(serde_json::json!({"q": {"guaranteed": 1}})))
            .contains("qualityWeights are read with billing: ByQuality only"));
        assert!(msg(billed(
            serde_json::json!({"billing": "ByRequest", "q": {"guaranteed": 1}})
        ))
        .contains("qualityWeights"));
        assert!(msg(billed(
            serde_json::json!({"billing": "ByQuality", "q": {"premium": 1}})
        ))
        .contains("premium"));
        assert!(obj("cheap")
            .compile()
            .unwrap_err()
            .to_string()
            .contains("'default'"));
    }
}
