//! Cash: budgets of resource × hours. Accrual is exact: accumulators hold
//! nano-units × milliseconds × per-mille price, so accruing [a,c) equals
//! accruing [a,b) and then [b,c), whatever the split.

use crate::quantity::{div_ceil, Quantity};
use crate::resources::{self, ResourceList};
use crate::usage::QosClass;
use std::collections::BTreeMap;

pub const MS_PER_HOUR: i128 = 3_600_000;
/// Price unit: 1000 ‰ = charged at face value.
pub const PER_MILLE: i128 = 1000;

/// Price multipliers per QoS class in per-mille (seed 002's tiers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QosMultipliers {
    pub guaranteed: i128,
    pub burstable: i128,
    pub best_effort: i128,
}

impl Default for QosMultipliers {
    fn default() -> Self {
        QosMultipliers {
            guaranteed: PER_MILLE,
            burstable: PER_MILLE,
            best_effort: PER_MILLE,
        }
    }
}

impl QosMultipliers {
    pub fn for_class(&self, qos: Option<QosClass>) -> i128 {
        match qos {
            Some(QosClass::Guaranteed) | None => self.guaranteed,
            Some(QosClass::Burstable) => self.burstable,
            Some(QosClass::BestEffort) => self.best_effort,
        }
    }
}

/// Something that held `usage` from `start_ms` until `end_ms` (or still
/// does). Borrows its usage: many pods share their pod set's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval<'a> {
    pub usage: &'a ResourceList,
    pub qos: Option<QosClass>,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
}

/// What the intervals cost within the window [from, to), per cash key.
/// `cash_keys` pairs each cash key with the usage key it accrues from.
pub fn accrue(
    intervals: &[Interval<'_>],
    cash_keys: &[(String, String)],
    from_ms: i64,
    to_ms: i64,
    prices: &QosMultipliers,
) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for iv in intervals {
        let start = iv.start_ms.max(from_ms);
        let end = iv.end_ms.unwrap_or(to_ms).min(to_ms);
        if end <= start {
            continue;
        }
        let price = prices.for_class(iv.qos);
        for (ck, uk) in cash_keys {
            let q = resources::get(iv.usage, uk);
            if q.is_zero() {
                continue;
            }
            let e = out.entry(ck.clone()).or_insert(0i128);
            *e = e.saturating_add(cost(q, end - start, price));
        }
    }
    out
}

/// What holding `q` for `ms` milliseconds at `price` per mille costs, in
/// accumulator units (nano-units × ms × per mille). Negative spans cost 0.
pub fn cost(q: Quantity, ms: i64, price: i128) -> i128 {
    if ms <= 0 {
        return 0;
    }
    q.nanos().saturating_mul(ms as i128).saturating_mul(price)
}

/// What `count` pods of `set` cost on `target` (a cash key's resource) over
/// `ms`, at the price of the set's QoS class.
pub fn set_cost(
    set: &crate::workload::PodSet,
    count: i64,
    target: &str,
    ms: i64,
    prices: &QosMultipliers,
) -> i128 {
    match set.per_pod.get(target) {
        Some(q) => cost(
            q.saturating_mul(count as i128),
            ms,
            prices.for_class(set.qos),
        ),
        None => 0,
    }
}

/// What `charge` costs on `target` over `ms`, its pod sets counted as
/// charged (an HPA's reservation included).
pub fn charge_cost(
    charge: &crate::object::Charge,
    target: &str,
    ms: i64,
    prices: &QosMultipliers,
) -> i128 {
    charge.pod_sets.iter().fold(0i128, |sum, s| {
        sum.saturating_add(set_cost(s, charge.charged_count(s), target, ms, prices))
    })
}

/// Accumulator → resource-hours, rounded up to the nano-unit.
pub fn to_quantity(accrued: i128) -> Quantity {
    Quantity::from_nanos(div_ceil(accrued, MS_PER_HOUR * PER_MILLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: i64) -> ResourceList {
        [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(n),
        )]
        .into()
    }
    fn keys() -> Vec<(String, String)> {
        vec![(
            "cash/requests.nvidia.com/gpu".into(),
            "requests.nvidia.com/gpu".into(),
        )]
    }

    #[test]
    fn ten_cards_for_an_hour_is_ten_card_hours() {
        let u = gpus(10);
        let iv = Interval {
            usage: &u,
            qos: None,
            start_ms: 0,
            end_ms: None,
        };
        let acc = accrue(&[iv], &keys(), 0, 3_600_000, &QosMultipliers::default());
        assert_eq!(
            to_quantity(acc["cash/requests.nvidia.com/gpu"]),
            Quantity::from_units(10)
        );
    }

    #[test]
    fn intervals_clip_to_the_window_and_prices_scale() {
        let (two, four) = (gpus(2), gpus(4));
        let ivs = [
            Interval {
                usage: &two,
                qos: Some(QosClass::BestEffort),
                start_ms: -1000,
                end_ms: Some(1_800_000),
            },
            Interval {
                usage: &four,
                qos: Some(QosClass::Guaranteed),
                start_ms: 5_000_000,
                end_ms: None,
            },
        ];
        let prices = QosMultipliers {
            best_effort: 500,
            ..QosMultipliers::default()
        };
        let acc = accrue(&ivs, &keys(), 0, 3_600_000, &prices);
        // 2 cards × 0.5 h × 0.5 = 0.5 card-hour; the second starts after the window.
        assert_eq!(
            to_quantity(acc["cash/requests.nvidia.com/gpu"]),
            "500m".parse().unwrap()
        );
    }
}
