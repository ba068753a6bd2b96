//! Prices per model (docs/budgets.md §3): billing weights per resource and
//! model (A100 1.0, H100 2.5, T4 0.3), versioned by the instant they take
//! effect, multiplied by the QoS multipliers of `cash::QosMultipliers`. Accrual
//! is cut exactly at every price change and period boundary, so each piece
//! is charged at the one price in force over all of it.

use super::PRICE_ONE;
use crate::cash::QosMultipliers;
use crate::keys::{cash_target, is_model_name};
use crate::object::budgets::{Entry, Reason};
use crate::object::period::{split, Period};
use crate::quantity::Quantity;
use crate::resources::{self, ResourceList};
use crate::usage::QosClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A weight, exactly, in per mille: `"2.5"` is 2500. Written as a decimal
/// string (or a JSON number) with at most three decimals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Weight(pub i128);

impl Weight {
    pub const ONE: Weight = Weight(1000);
    /// The heaviest weight accepted: 1000 × face value. Anything above is a
    /// typo (a price, not a weight) and would risk overflowing the accrual.
    pub const MAX: Weight = Weight(1_000_000);

    pub fn per_mille(self) -> i128 {
        self.0
    }
}

impl std::str::FromStr for Weight {
    type Err = PriceError;
    fn from_str(s: &str) -> Result<Weight, PriceError> {
        let bad = || PriceError::BadWeight(s.to_string());
        let t = s.trim();
        let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
        let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) {
            return Err(bad());
        }
        let frac = frac.trim_end_matches('0');
        if frac.len() > 3 || whole.len() > 9 {
            return Err(bad());
        }
        let w: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let f: i128 = format!("{frac:0<3}").parse().map_err(|_| bad())?;
        let w = Weight(w * 1000 + f);
        if w > Weight::MAX {
            return Err(PriceError::TooHeavy(s.to_string()));
        }
        Ok(w)
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (w, m) = (self.0 / 1000, self.0 % 1000);
        if m == 0 {
            write!(f, "{w}")
        } else {
            write!(f, "{w}.{}", format!("{m:03}").trim_end_matches('0'))
        }
    }
}

impl Serialize for Weight {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Weight, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Weight;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a weight such as \"2.5\" (at most three decimals)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Weight, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Weight, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Weight, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Weight, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

fn one() -> Weight {
    Weight::ONE
}

/// The weights in force from `effective` until the next version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceVersion {
    #[serde(rename = "effective", with = "crate::time::serde_stamp")]
    pub effective_ms: i64,
    /// `<resource>.<MODEL>` (`nvidia.com/gpu.H100`, `cpu.A4`) or a bare
    /// resource (`nvidia.com/gpu`: any model not named) → weight.
    #[serde(default)]
    pub weights: BTreeMap<String, Weight>,
    /// For a resource and model named nowhere in `weights`.
    #[serde(default = "one")]
    pub default_weight: Weight,
    /// `billing: ByQuality` (docs/real-usage.md, "Billing by quality"):
    /// requests are billed at these weights instead of the QoS
    /// multipliers, and real usage above requests at theirs. None:
    /// `ByRequest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<QualityWeights>,
}

impl PriceVersion {
    pub fn billing(&self) -> Billing {
        match self.quality {
            Some(_) => Billing::ByQuality,
            None => Billing::ByRequest,
        }
    }
}

/// The weight of each quality (the design source's example: 1 for
/// Guaranteed, 0.85 for a Burstable pod's request, 0.5 for its use above
/// it, 0.1 for BestEffort use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QualityWeights {
    pub guaranteed: Weight,
    pub burstable_request: Weight,
    pub above_request: Weight,
    pub best_effort: Weight,
}

impl Default for QualityWeights {
    fn default() -> Self {
        QualityWeights {
            guaranteed: Weight(1000),
            burstable_request: Weight(850),
            above_request: Weight(500),
            best_effort: Weight(100),
        }
    }
}

impl QualityWeights {
    /// Each weight with its name in the price list (`qualityWeights.<name>`).
    pub fn named(&self) -> [(&'static str, Weight); 4] {
        [
            ("guaranteed", self.guaranteed),
            ("burstableRequest", self.burstable_request),
            ("aboveRequest", self.above_request),
            ("bestEffort", self.best_effort),
        ]
    }

    /// The weight of a request of `resource` (`cpu`, `nvidia.com/gpu`)
    /// held by a pod of `class`. Only CPU and memory have quality of
    /// service in Kubernetes; any other resource (a GPU, an extended
    /// resource) is held whole, its limit its request, so it is billed as
    /// guaranteed whatever the pod's class — a pod cannot get cards at
    /// the BestEffort weight by asking no CPU.
    pub fn on_request(&self, class: Option<QosClass>, resource: &str) -> Weight {
        if !matches!(resource, "cpu" | "memory") {
            return self.guaranteed;
        }
        match class {
            Some(QosClass::Guaranteed) | None => self.guaranteed,
            Some(QosClass::Burstable) => self.burstable_request,
            Some(QosClass::BestEffort) => self.best_effort,
        }
    }
}

/// How a price list version bills (its `billing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Billing {
    /// Requests, at the QoS multipliers (`--price-*`).
    #[default]
    ByRequest,
    /// Requests at the quality weights, and real usage above them.
    ByQuality,
}

impl fmt::Display for Billing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Billing::ByRequest => "ByRequest",
            Billing::ByQuality => "ByQuality",
        })
    }
}

/// Budgets shown in money: `perCardHour` units of `unit` per weighted
/// resource-hour (a card-hour for GPUs, a core-hour for CPU).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Currency {
    pub unit: String,
    pub per_card_hour: Quantity,
}

impl Currency {
    /// Weighted resource-hours → money, exact to the nano-unit of money
    /// (rounded up), e.g. `1,250.5 EUR`.
    pub fn amount(&self, hours: Quantity) -> Quantity {
        let n = hours.nanos().saturating_mul(self.per_card_hour.nanos());
        Quantity::from_nanos(crate::quantity::div_ceil(n, crate::quantity::NANO))
    }

    pub fn format(&self, hours: Quantity) -> String {
        format!(
            "{} {}",
            crate::readable::grouped(self.amount(hours)),
            self.unit
        )
    }
}

/// The price list: versions in strictly increasing effective order.
/// Before the first version every weight is 1 (face value, as cash keys
/// were charged before weights existed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceList {
    #[serde(default)]
    pub versions: Vec<PriceVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("'{0}' is not a weight: write a non-negative decimal with at most three decimals, such as 2.5")]
    BadWeight(String),
    #[error("weight '{0}' is above the largest accepted, 1000")]
    TooHeavy(String),
    #[error("price key '{0}' is not a resource or <resource>.<MODEL> (e.g. nvidia.com/gpu.H100, cpu.A4)")]
    BadKey(String),
    #[error("price versions must take effect in strictly increasing order: {later} is not after {earlier}")]
    Order { earlier: String, later: String },
    #[error("weight of '{key}' is {weight}, above the largest accepted, 1000")]
    KeyTooHeavy { key: String, weight: Weight },
    #[error("currency: {0}")]
    Currency(String),
    #[error("{0}")]
    Document(String),
}

impl PriceList {
    /// Checks what serde cannot: weight keys, bounds (also of weights built
    /// in code), version order, the currency.
    pub fn validate(&self) -> Result<(), PriceError> {
        for pair in self.versions.windows(2) {
            if pair[1].effective_ms <= pair[0].effective_ms {
                return Err(PriceError::Order {
                    earlier: crate::time::format_rfc3339(pair[0].effective_ms),
                    later: crate::time::format_rfc3339(pair[1].effective_ms),
                });
            }
        }
        for v in &self.versions {
            let all = v
                .weights
                .iter()
                .map(|(k, w)| (k.as_str(), *w))
                .chain([("defaultWeight", v.default_weight)]);
            for (k, w) in all {
                if !(Weight(0)..=Weight::MAX).contains(&w) {
                    return Err(PriceError::KeyTooHeavy {
                        key: k.to_string(),
                        weight: w,
                    });
                }
            }
            if let Some(q) = &v.quality {
                for (k, w) in q.named() {
                    if !(Weight(0)..=Weight::MAX).contains(&w) {
                        return Err(PriceError::KeyTooHeavy {
                            key: format!("qualityWeights.{k}"),
                            weight: w,
                        });
                    }
                }
            }
            if let Some(k) = v.weights.keys().find(|k| !valid_price_key(k)) {
                return Err(PriceError::BadKey(k.clone()));
            }
        }
        if let Some(c) = &self.currency {
            if c.unit.trim().is_empty() || c.unit.len() > 16 {
                return Err(PriceError::Currency(
                    "unit must be 1 to 16 characters, e.g. EUR or CNY".into(),
                ));
            }
            if c.per_card_hour.is_negative() {
                return Err(PriceError::Currency(format!(
                    "perCardHour {} is negative",
                    c.per_card_hour
                )));
            }
        }
        Ok(())
    }

    /// The version in force at `ms`, if any.
    pub fn version_at(&self, ms: i64) -> Option<&PriceVersion> {
        let i = self.versions.partition_point(|v| v.effective_ms <= ms);
        i.checked_sub(1).map(|i| &self.versions[i])
    }

    /// The weight of `resource` (no `requests.`/`limits.` prefix) of
    /// `model` at `ms`: `<resource>.<model>`, else `<resource>`, else the
    /// version's default; 1 before the first version.
    pub fn weight_at(&self, ms: i64, resource: &str, model: Option<&str>) -> Weight {
        let Some(v) = self.version_at(ms) else {
            return Weight::ONE;
        };
        model
            .and_then(|m| v.weights.get(&format!("{resource}.{m}")))
            .or_else(|| v.weights.get(resource))
            .copied()
            .unwrap_or(v.default_weight)
    }

    /// Instants strictly inside `(from, to)` where the price changes.
    pub fn changes_within(&self, from_ms: i64, to_ms: i64) -> impl Iterator<Item = i64> + '_ {
        self.versions
            .iter()
            .map(|v| v.effective_ms)
            .filter(move |t| from_ms < *t && *t < to_ms)
    }

    /// The highest weight in force at any instant of `[from, to)`: what a
    /// reservation must assume, so that a price rise already announced
    /// cannot make a run cost more than it reserved.
    pub fn max_weight_within(
        &self,
        from_ms: i64,
        to_ms: i64,
        resource: &str,
        model: Option<&str>,
    ) -> Weight {
        self.changes_within(from_ms, to_ms)
            .map(|t| self.weight_at(t, resource, model))
            .fold(self.weight_at(from_ms, resource, model), Weight::max)
    }
}

/// `nvidia.com/gpu`, `cpu`, `nvidia.com/gpu.A100`, `cpu.A4`.
fn valid_price_key(k: &str) -> bool {
    let (resource, model) = split_model(k);
    let resource_ok = !resource.is_empty()
        && resource.len() <= 253
        && resource
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b));
    resource_ok && model.is_none_or(is_model_name)
}

/// A resource name with an optional model: `nvidia.com/gpu.A100` →
/// (`nvidia.com/gpu`, `A100`); `cpu.A4` → (`cpu`, `A4`); `nvidia.com/gpu`
/// → no model (the dot of a domain comes before its `/`). Native resource
/// names have no dot, extended ones are domain-qualified.
pub fn split_model(resource: &str) -> (&str, Option<&str>) {
    match resource.rfind('.') {
        Some(i) if !resource[i..].contains('/') => (&resource[..i], Some(&resource[i + 1..])),
        _ => (resource, None),
    }
}

/// `requests.nvidia.com/gpu` → `nvidia.com/gpu`.
pub fn strip_kind(key: &str) -> &str {
    key.strip_prefix("requests.")
        .or_else(|| key.strip_prefix("limits."))
        .unwrap_or(key)
}

/// The model a usage list holds of `usage_key`'s resource: the key's own
/// model (`requests.nvidia.com/gpu.A100`), else the model key next to the
/// generic one in the same list (a pod's usage counts both).
pub fn model_of<'a>(usage: &'a ResourceList, usage_key: &'a str) -> Option<&'a str> {
    if let (_, Some(m)) = split_model(strip_kind(usage_key)) {
        return Some(m);
    }
    let prefix = format!("{usage_key}.");
    usage
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .find(|(k, q)| !q.is_zero() && is_model_name(&k[prefix.len()..]))
        .map(|(k, _)| &k[prefix.len()..])
}

/// The weight of a usage key, for the model `usage` holds, at `ms`.
pub fn weight_for(prices: &PriceList, ms: i64, usage: &ResourceList, usage_key: &str) -> Weight {
    let model = model_of(usage, usage_key);
    let (resource, _) = split_model(strip_kind(usage_key));
    prices.weight_at(ms, resource, model)
}

/// Price in millionths: weight (‰) × QoS multiplier (‰).
pub fn price(weight: Weight, qos: &QosMultipliers, class: Option<QosClass>) -> i128 {
    weight.0.saturating_mul(qos.for_class(class))
}

/// The price of holding a request of `usage_key` (`requests.cpu`) at
/// `weight`, for a pod of `class`, at `ms`: `price` (the QoS multiplier),
/// or, while a `ByQuality` version is in force, the weight × the quality
/// weight of its class's request (`QualityWeights::on_request`).
pub fn request_price(
    prices: &PriceList,
    ms: i64,
    weight: Weight,
    usage_key: &str,
    qos: &QosMultipliers,
    class: Option<QosClass>,
) -> i128 {
    match prices.version_at(ms).and_then(|v| v.quality.as_ref()) {
        Some(q) => {
            let (resource, _) = split_model(strip_kind(usage_key));
            weight
                .0
                .saturating_mul(q.on_request(class, resource).per_mille())
        }
        None => price(weight, qos, class),
    }
}

/// Acc → the unit of `status.cashAccrued` (nano-units × ms × per mille),
/// rounded up. Exact whenever the quantities are whole micro-units (every
/// card count, millicore and byte count is): only a quantity written to
/// the nano-unit, at a weight and QoS multiplier whose product is not a
/// multiple of 1000, rounds, by less than 10^-12 of a resource-hour.
pub fn to_cash_accrued(acc: i128) -> i128 {
    crate::quantity::div_ceil(acc, PRICE_ONE / crate::cash::PER_MILLE)
}

/// `cash::accrue` at the weights in force at each instant: `[from, to)` is
/// cut at every price change within it and each piece is charged at its
/// own weight. Per cash key, in `status.cashAccrued`'s unit. With no
/// versions every weight is 1 and this is `cash::accrue`, exactly.
pub fn accrue_weighted(
    intervals: &[crate::cash::Interval<'_>],
    cash_keys: &[(String, String)],
    from_ms: i64,
    to_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
) -> BTreeMap<String, i128> {
    let pieces = split(from_ms, to_ms, prices.changes_within(from_ms, to_ms));
    let mut acc: BTreeMap<&str, i128> = BTreeMap::new();
    for iv in intervals {
        for (ck, uk) in cash_keys {
            let q = resources::get(iv.usage, uk);
            if q.is_zero() {
                continue;
            }
            for &(a, b) in &pieces {
                let start = iv.start_ms.max(a);
                let end = iv.end_ms.unwrap_or(b).min(b);
                if end <= start {
                    continue;
                }
                let w = weight_for(prices, a, iv.usage, uk);
                let p = request_price(prices, a, w, uk, qos, iv.qos);
                let cost = crate::cash::cost(q, end - start, p);
                let e = acc.entry(ck.as_str()).or_insert(0);
                *e = e.saturating_add(cost);
            }
        }
    }
    acc.into_iter()
        .map(|(k, v)| (k.to_string(), to_cash_accrued(v)))
        .collect()
}

/// What `charge` costs on `target` (a cash key's usage key) over
/// `[from, to)` at the weights in force at each instant, in acc: its pod
/// sets counted as charged, each at its model's weight and its QoS
/// multiplier.
pub fn charge_cost_weighted(
    charge: &crate::object::Charge,
    target: &str,
    from_ms: i64,
    to_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
) -> i128 {
    if to_ms <= from_ms {
        return 0;
    }
    let pieces = split(from_ms, to_ms, prices.changes_within(from_ms, to_ms));
    let mut total = 0i128;
    for s in &charge.pod_sets {
        let Some(q) = s.per_pod.get(target) else {
            continue;
        };
        let q = q.saturating_mul(charge.charged_count(s) as i128);
        for &(a, b) in &pieces {
            let w = weight_for(prices, a, &s.per_pod, target);
            let p = request_price(prices, a, w, target, qos, s.qos);
            total = total.saturating_add(crate::cash::cost(q, b - a, p));
        }
    }
    total
}

/// Who holds what, for the ledger: one pod (or pod set) of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding<'a> {
    pub workload: &'a str,
    pub namespace: &'a str,
    pub user: Option<&'a str>,
    pub usage: &'a ResourceList,
    pub qos: Option<QosClass>,
    pub start_ms: i64,
    /// None: still running at the end of the window.
    pub end_ms: Option<i64>,
}

/// What the holdings cost within `[from, to)`, as ledger entries of
/// `quota`: one per cash key, workload, model, QoS class and piece, the
/// window cut at every price change and every boundary of `period` (so no
/// entry spans two periods or two prices). `cash_keys` pairs each cash key
/// with its usage key, as `cash::accrue` takes them. An entry's span is
/// the piece narrowed to when its holdings actually ran.
#[allow(clippy::too_many_arguments)]
pub fn accrue_priced(
    quota: &str,
    holdings: &[Holding<'_>],
    cash_keys: &[(String, String)],
    from_ms: i64,
    to_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
    period: &Period,
) -> Vec<Entry> {
    let cuts: Vec<i64> = period
        .boundaries(from_ms, to_ms)
        .chain(prices.changes_within(from_ms, to_ms))
        .collect();
    let pieces = split(from_ms, to_ms, cuts);
    // QoS as its index: the class has no order of its own.
    type Group<'b> = (
        usize,
        &'b str,
        &'b str,
        Option<&'b str>,
        Option<u8>,
        Option<&'b str>,
    );
    let mut out: BTreeMap<(i64, Group<'_>), Entry> = BTreeMap::new();
    for h in holdings {
        for (ki, (ck, uk)) in cash_keys.iter().enumerate() {
            let q = resources::get(h.usage, uk);
            if q.is_zero() || cash_target(ck).is_none() {
                continue;
            }
            let model = model_of(h.usage, uk);
            for &(a, b) in &pieces {
                let start = h.start_ms.max(a);
                let end = h.end_ms.unwrap_or(b).min(b);
                if end <= start {
                    continue;
                }
                let w = weight_for(prices, a, h.usage, uk);
                let p = request_price(prices, a, w, uk, qos, h.qos);
                let amount = crate::cash::cost(q, end - start, p);
                if amount == 0 {
                    continue;
                }
                let group = (
                    ki,
                    h.workload,
                    h.namespace,
                    model,
                    h.qos.map(|q| q as u8),
                    h.user,
                );
                let e = out.entry((a, group)).or_insert_with(|| Entry {
                    quota: quota.to_string(),
                    key: ck.clone(),
                    workload: h.workload.to_string(),
                    namespace: h.namespace.to_string(),
                    model: model.map(str::to_string),
                    qos: h.qos,
                    user: h.user.map(str::to_string),
                    start_ms: start,
                    end_ms: end,
                    amount: 0,
                    reason: Reason::Accrual,
                    note: String::new(),
                });
                e.start_ms = e.start_ms.min(start);
                e.end_ms = e.end_ms.max(end);
                e.amount = e.amount.saturating_add(amount);
            }
        }
    }
    out.into_values().collect()
}

/// Per cash key, the sum of `entries`' amounts.
pub fn totals(entries: &[Entry]) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for e in entries {
        let t = out.entry(e.key.clone()).or_insert(0i128);
        *t = t.saturating_add(e.amount);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_rfc3339;

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";

    fn w(s: &str) -> Weight {
        s.parse().unwrap()
    }

    fn list(json: &str) -> PriceList {
        let p: PriceList = serde_json::from_str(json).unwrap();
        p.validate().unwrap();
        p
    }

    fn a100(n: i64) -> ResourceList {
        [
            (GPU.to_string(), Quantity::from_units(n)),
            (format!("{GPU}.A100"), Quantity::from_units(n)),
        ]
        .into()
    }

    #[test]
    fn weights_parse_exactly() {
        assert_eq!(w("2.5"), Weight(2500));
        assert_eq!(w("0.3"), Weight(300));
        assert_eq!(w("1"), Weight::ONE);
        assert_eq!(w(".125"), Weight(125));
        assert_eq!(w("2.500"), Weight(2500));
        assert_eq!(w("1000"), Weight::MAX);
        for bad in ["", ".", "-1", "1.2345", "1e3", "abc", "1.2.3", "+1"] {
            assert!(bad.parse::<Weight>().is_err(), "{bad}");
        }
        assert!(matches!(
            "1000.001".parse::<Weight>(),
            Err(PriceError::TooHeavy(_))
        ));
        assert_eq!(Weight(2500).to_string(), "2.5");
        assert_eq!(Weight(300).to_string(), "0.3");
        let v: Vec<Weight> = serde_json::from_str(r#"["2.5", 1, 0.3]"#).unwrap();
        assert_eq!(v, vec![Weight(2500), Weight(1000), Weight(300)]);
    }

    #[test]
    fn models_split_after_the_domain() {
        assert_eq!(
            split_model("nvidia.com/gpu.A100"),
            ("nvidia.com/gpu", Some("A100"))
        );
        assert_eq!(split_model("nvidia.com/gpu"), ("nvidia.com/gpu", None));
        assert_eq!(split_model("cpu.A4"), ("cpu", Some("A4")));
        assert_eq!(split_model("cpu"), ("cpu", None));
        assert_eq!(model_of(&a100(2), GPU), Some("A100"));
        assert_eq!(
            model_of(&a100(2), "requests.nvidia.com/gpu.A100"),
            Some("A100")
        );
        assert_eq!(model_of(&a100(2), "requests.cpu"), None);
    }

    #[test]
    fn validation_catches_order_keys_and_bounds() {
        let bad_order = r#"{"versions":[
            {"effective":"2026-02-01T00:00:00Z"},
            {"effective":"2026-01-01T00:00:00Z"}]}"#;
        let p: PriceList = serde_json::from_str(bad_order).unwrap();
        assert!(matches!(p.validate(), Err(PriceError::Order { .. })));
        let p: PriceList = serde_json::from_str(
            r#"{"versions":[{"effective":"2026-01-01T00:00:00Z","weights":{"nvidia.com/gpu.A 100":"1"}}]}"#,
        )
        .unwrap();
        assert!(matches!(p.validate(), Err(PriceError::BadKey(_))));
        let mut p = PriceList::default();
        p.versions.push(PriceVersion {
            effective_ms: 0,
            weights: [("cpu".to_string(), Weight(-1))].into(),
            default_weight: Weight::ONE,
            quality: None,
        });
        assert!(p.validate().unwrap_err().to_string().contains("cpu"));
        assert!(serde_json::from_str::<PriceList>(r#"{"versions":[],"bogus":1}"#).is_err());
    }

    #[test]
    fn weights_look_up_model_then_resource_then_default() {
        let p = list(
            r#"{"versions":[{"effective":"2026-01-01T00:00:00Z","weights":{
                "nvidia.com/gpu.H100":"2.5","nvidia.com/gpu.T4":"0.3","nvidia.com/gpu":"1.2"},
                "defaultWeight":"0.5"}]}"#,
        );
        let t = parse_rfc3339("2026-06-01T00:00:00Z").unwrap();
        assert_eq!(p.weight_at(t, "nvidia.com/gpu", Some("H100")), Weight(2500));
        assert_eq!(p.weight_at(t, "nvidia.com/gpu", Some("V100")), Weight(1200));
        assert_eq!(p.weight_at(t, "cpu", None), Weight(500));
        assert_eq!(p.weight_at(0, "nvidia.com/gpu", Some("H100")), Weight::ONE);
    }

    #[test]
    fn a_price_change_cuts_the_accrual_exactly() {
        let p = list(
            r#"{"versions":[
              {"effective":"2026-01-01T00:00:00Z","weights":{"nvidia.com/gpu.A100":"1"}},
              {"effective":"2026-01-01T01:00:00Z","weights":{"nvidia.com/gpu.A100":"2.5"}}]}"#,
        );
        let t0 = parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let u = a100(4);
        let h = Holding {
            workload: "batch/Job/ns/train",
            namespace: "ns",
            user: Some("ada"),
            usage: &u,
            qos: Some(QosClass::Guaranteed),
            start_ms: t0,
            end_ms: None,
        };
        let keys = vec![(CASH.to_string(), GPU.to_string())];
        let e = accrue_priced(
            "q",
            &[h],
            &keys,
            t0,
            t0 + 7_200_000,
            &QosMultipliers::default(),
            &p,
            &Period::None,
        );
        assert_eq!(e.len(), 2);
        // 4 cards × 1 h × 1 + 4 × 1 h × 2.5 = 14 card-hours.
        assert_eq!(
            super::super::to_quantity(totals(&e)[CASH]),
            Quantity::from_units(14)
        );
        assert_eq!(e[1].model.as_deref(), Some("A100"));
        assert_eq!(
            (e[0].end_ms, e[1].start_ms),
            (t0 + 3_600_000, t0 + 3_600_000)
        );
    }

    #[test]
    fn money_reads_in_its_unit() {
        let c = Currency {
            unit: "EUR".into(),
            per_card_hour: "2.5".parse().unwrap(),
        };
        assert_eq!(c.format(Quantity::from_units(500)), "1,250 EUR");
    }
}
