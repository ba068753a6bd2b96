//! Billing by quality of service, the formula (docs/real-usage.md,
//! "Billing by quality"): what one pod's run in one window of real usage
//! costs when Guaranteed pods pay for their request, Burstable pods for
//! their request and, cheaper, for what they use above it, and BestEffort
//! pods only for what they use. Exact: amounts are the ledger's acc
//! (nano-units × ms × millionths), as `cash::cost` makes them. A price
//! list version with `billing: ByQuality` carries the weights; requests
//! are accrued at `on_request` (`price_list::request_price`), use above
//! them is billed window by window (`real_usage::billing`).

pub use super::price_list::QualityWeights;
use super::price_list::Weight;
use crate::usage::QosClass;

/// One pod's run of one resource in one window, as real usage read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodUse {
    pub qos: Option<QosClass>,
    /// Its request, in nano-units.
    pub request: i128,
    /// How long it ran in the window.
    pub ran_ms: i64,
    /// Of that, how long real usage measured it.
    pub measured_ms: i64,
    /// Over the measured part, nano-unit-milliseconds of use above its
    /// request (a BestEffort pod's whole use): `measure::Quality`.
    pub above: i128,
}

/// What a pod's run costs, by quality, in acc; `on_request_ms`: the part
/// of its run no measurement covered, billed on request (at its class's
/// request weight) and to be marked so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QualityCharge {
    pub guaranteed: i128,
    pub burstable_request: i128,
    pub above_request: i128,
    pub best_effort: i128,
    pub on_request_ms: i64,
}

impl QualityCharge {
    pub fn total(&self) -> i128 {
        self.guaranteed
            .saturating_add(self.burstable_request)
            .saturating_add(self.above_request)
            .saturating_add(self.best_effort)
    }
}

/// `u`'s cost at the model's `weight` (the price list's, per mille) times
/// each quality's weight (per mille): millionths, as `price_list::price`.
pub fn charge(u: &PodUse, weight: Weight, w: &QualityWeights) -> QualityCharge {
    let price = |q: Weight| weight.per_mille().saturating_mul(q.per_mille());
    let held = |q: Weight| {
        u.request
            .saturating_mul(u.ran_ms.max(0) as i128)
            .saturating_mul(price(q))
    };
    let mut c = QualityCharge {
        on_request_ms: (u.ran_ms - u.measured_ms).max(0),
        ..QualityCharge::default()
    };
    match u.qos {
        Some(QosClass::Guaranteed) | None => c.guaranteed = held(w.guaranteed),
        Some(QosClass::Burstable) => {
            c.burstable_request = held(w.burstable_request);
            c.above_request = u.above.max(0).saturating_mul(price(w.above_request));
        }
        Some(QosClass::BestEffort) => {
            // Its request (none, or what it declared) for what nothing
            // measured; its use for the rest.
            let unmeasured = u
                .request
                .saturating_mul(c.on_request_ms as i128)
                .saturating_mul(price(w.best_effort));
            c.best_effort = u
                .above
                .max(0)
                .saturating_mul(price(w.best_effort))
                .saturating_add(unmeasured);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::to_quantity;
    use crate::quantity::NANO;

    const MIN: i64 = 60_000;

    /// A Burstable pod requesting 2 cores that used 3 for ten minutes:
    /// 2 cores × 10 min at 0.85, and the 1 core above at 0.5 —
    /// (2 × 0.85 + 1 × 0.5) × 10/60 = 0.3666… core-hours, to the acc.
    #[test]
    fn a_burstable_pod_above_its_request_pays_both_parts_exactly() {
        let u = PodUse {
            qos: Some(QosClass::Burstable),
            request: 2 * NANO,
            ran_ms: 10 * MIN,
            measured_ms: 10 * MIN,
            above: NANO * (10 * MIN) as i128,
        };
        let c = charge(&u, Weight::ONE, &QualityWeights::default());
        assert_eq!(c.burstable_request, 2 * NANO * (10 * MIN) as i128 * 850_000);
        assert_eq!(c.above_request, NANO * (10 * MIN) as i128 * 500_000);
        assert_eq!((c.guaranteed, c.best_effort, c.on_request_ms), (0, 0, 0));
        assert_eq!(
            crate::readable::exact(to_quantity(c.total())),
            "0.366666667"
        );
        // On an H100 priced 2.5, everything 2.5 times as much.
        let h = charge(&u, Weight(2500), &QualityWeights::default());
        assert_eq!(h.total(), c.total() * 5 / 2);
    }

    #[test]
    fn guaranteed_pays_its_request_and_best_effort_its_use() {
        let w = QualityWeights::default();
        let g = charge(
            &PodUse {
                qos: Some(QosClass::Guaranteed),
                request: NANO,
                ran_ms: 60 * MIN,
                measured_ms: 60 * MIN,
                above: 0,
            },
            Weight::ONE,
            &w,
        );
        assert_eq!(crate::readable::exact(to_quantity(g.total())), "1");
        let be = charge(
            &PodUse {
                qos: Some(QosClass::BestEffort),
                request: 0,
                ran_ms: 60 * MIN,
                measured_ms: 30 * MIN,
                above: NANO / 2 * (30 * MIN) as i128,
            },
            Weight::ONE,
            &w,
        );
        // Half a core for half an hour at 0.1; the unmeasured half hour
        // on its request, none, and marked so.
        assert_eq!(crate::readable::exact(to_quantity(be.total())), "0.025");
        assert_eq!(be.on_request_ms, 30 * MIN);
    }

    #[test]
    fn an_unmeasured_burstable_window_is_billed_on_request_and_marked() {
        let c = charge(
            &PodUse {
                qos: Some(QosClass::Burstable),
                request: NANO,
                ran_ms: 60 * MIN,
                measured_ms: 0,
                above: 0,
            },
            Weight::ONE,
            &QualityWeights::default(),
        );
        assert_eq!(crate::readable::exact(to_quantity(c.total())), "0.85");
        assert_eq!(c.on_request_ms, 60 * MIN);
    }
}
