//! Budgets in depth (docs/budgets.md, §7a): periods and carry-over of cash
//! keys, safe admission with reservations, price weights per model,
//! refunds, exhaustion, reports and runway. Pure like the rest of the
//! crate: configuration, ledgers and "now" come in, decisions go out.
//!
//! One unit throughout: the *priced accumulator* ("acc"), nano-units ×
//! milliseconds × price in millionths (a model weight per mille times a QoS
//! multiplier per mille). Integers only, so every split of an interval —
//! at a period boundary, a price change or a report bucket — adds up
//! exactly. `to_quantity` turns acc into resource-hours for people.

pub mod config;
pub mod enforce;
pub mod ledger;
pub mod ledger_rollup;
pub mod period;
pub mod periods;
pub mod price_list;
pub mod price_list_doc;
pub mod quality;
pub mod refund;
pub mod report;
pub mod reservations;
pub mod reserve;
pub mod runway;
pub mod status;
pub mod topup;

pub use config::BudgetError;
pub use price_list::{Currency, PriceError, PriceList, PriceVersion, Weight};
pub use price_list_doc::{PriceListObject, PriceListSpec};
pub use report::{Bucket, Dimension, Report, ReportSpec};
pub use reserve::{BudgetDenial, BudgetState, Settlement};
pub use runway::Runway;

use crate::cash::MS_PER_HOUR;
use crate::quantity::{div_ceil, Quantity};

/// Price unit: 1 000 000 = charged at face value (weight 1.0 × QoS 1.0).
pub const PRICE_ONE: i128 = 1_000_000;

/// Acc per nano-unit-hour at face value.
const ACC_PER_NANO_HOUR: i128 = MS_PER_HOUR * PRICE_ONE;

/// Acc → resource-hours, rounded up to the nano-unit (a refund, negative,
/// rounds towards zero).
pub fn to_quantity(acc: i128) -> Quantity {
    Quantity::from_nanos(div_ceil(acc, ACC_PER_NANO_HOUR))
}

/// Resource-hours (a budget, a cap) → acc, exactly.
pub fn from_quantity(q: Quantity) -> i128 {
    q.nanos().saturating_mul(ACC_PER_NANO_HOUR)
}

/// The per-mille accumulators of `cash` (`status.cashAccrued`) → acc.
pub fn from_cash_accrued(per_mille: i128) -> i128 {
    per_mille.saturating_mul(PRICE_ONE / crate::cash::PER_MILLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_card_for_an_hour_at_face_value_is_one_card_hour() {
        let acc = crate::cash::cost(Quantity::from_units(1), 3_600_000, PRICE_ONE);
        assert_eq!(to_quantity(acc), Quantity::from_units(1));
        assert_eq!(from_quantity(Quantity::from_units(1)), acc);
        let per_mille = crate::cash::cost(Quantity::from_units(1), 3_600_000, 1000);
        assert_eq!(from_cash_accrued(per_mille), acc);
    }

    #[test]
    fn refunds_round_towards_zero() {
        assert_eq!(to_quantity(-1), Quantity::ZERO);
        assert_eq!(to_quantity(1), Quantity::from_nanos(1));
    }
}
