//! A quota's card-hour budgets as a round of the queue weighs them
//! (docs/queueing.md §3, step 3): one `BudgetState` per cash key of its
//! hard, read from its spec and status — the current period, its budget
//! (zero outside a term), the carry-in and what was spent this period —
//! so that `available − spent` is exactly `hard − used` of the key, what
//! the webhook's cash check reads.
//!
//! The state is the one admission decides on (`budget::reservations::state_of`):
//! the quota's own budget (hard less its children's carve-outs), its
//! open reservations included, so a round never admits what the admission
//! itself would refuse.

use super::admit::BudgetView;
use crate::budget::{reservations, BudgetState, PriceList};
use crate::cash::QosMultipliers;
use crate::keys::cash_target;
use crate::object::budgets::{BudgetPolicy, WithoutRunTime};
use crate::object::Quota;

/// One budget of a quota, owned, for `BudgetView`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub state: BudgetState,
    /// The cash key's usage key (`requests.nvidia.com/gpu.A100`).
    pub target: String,
    pub without_run_time: WithoutRunTime,
}

impl Budget {
    /// As `next_admissions` and `would_queue_at` take it.
    pub fn view<'a>(&'a self, qos: &'a QosMultipliers, prices: &'a PriceList) -> BudgetView<'a> {
        BudgetView {
            state: &self.state,
            target: &self.target,
            without_run_time: self.without_run_time,
            qos,
            prices,
        }
    }
}

/// The budgets of `q`: one per cash key of its hard.
pub fn of(q: &Quota) -> Vec<Budget> {
    q.spec
        .hard
        .keys()
        .filter_map(|key| {
            let target = cash_target(key).filter(|t| !t.is_empty())?;
            let policy: BudgetPolicy = q.spec.budgets.get(key).cloned().unwrap_or_default();
            // As admission reads it: its own budget (hard less what children
            // carved out), this period's spending, its open reservations.
            let state = reservations::state_of(q, key);
            Some(Budget {
                state,
                target: target.to_string(),
                without_run_time: policy.without_run_time,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{from_quantity, to_quantity};
    use crate::object::QuotaSpec;
    use crate::quantity::Quantity;

    #[test]
    fn what_a_budget_has_left_is_what_the_cash_check_reads() {
        let key = "cash/requests.nvidia.com/gpu";
        let mut q = Quota::new(
            "nlp",
            QuotaSpec {
                hard: [
                    (key.to_string(), Quantity::from_units(100)),
                    (
                        "requests.nvidia.com/gpu".to_string(),
                        Quantity::from_units(8),
                    ),
                ]
                .into(),
                ..Default::default()
            },
        );
        // 30 card-hours spent (`cashAccrued` counts per mille of acc's unit).
        let per_mille = crate::budget::PRICE_ONE / crate::cash::PER_MILLE;
        q.status
            .add_accrued(key, from_quantity(Quantity::from_units(30)) / per_mille);
        let spec = q.spec.clone();
        q.status.refresh(&spec);
        let b = of(&q);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].target, "requests.nvidia.com/gpu");
        let left = to_quantity(b[0].state.left());
        assert_eq!(left, Quantity::from_units(70));
        assert_eq!(
            left,
            q.spec.hard[key].saturating_sub(q.status.used[key]),
            "the same as hard − used"
        );
    }
}
