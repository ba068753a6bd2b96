//! A quota's budget periods as its status keeps them (docs/budgets.md §9):
//! per cash key with a period, the current window and its carry-in, and the
//! last closed periods. What was spent in the window is the key's
//! `cashAccrued`, which starts again from zero at each boundary.
//!
//! `used` of such a key is what is spent this period less what the period
//! has beyond its own budget (`spent − carryIn`, plus the whole budget
//! outside a term), so `hard − used` is exactly what is left and every
//! existing check of a cash key (`used ≥ hard` refuses new work, the
//! tree's card-hours left) reads the period without knowing of it.

use super::reserve::BudgetState;
use super::{from_cash_accrued, from_quantity, to_quantity};
use crate::keys::cash_target;
use crate::object::budgets::PeriodStatus;
use crate::object::period::{split, Period, PeriodRecord, Window};
use crate::object::{QuotaSpec, QuotaStatus};
use crate::quantity::Quantity;
use crate::resources;
use crate::time::{format_rfc3339, parse_rfc3339};
use std::collections::BTreeMap;

/// Closed periods kept in status per key, newest first. The SQL store
/// keeps every one (table `budget_periods`); cluster mode keeps these.
pub const KEEP_CLOSED: usize = 12;

/// Most boundaries one accrual may cross (a weekly period left alone for
/// about ten years): past it the window is re-anchored at its end, so a
/// clock gone wild cannot make a reconcile loop for ever.
const MAX_CUTS: usize = 520;

impl PeriodStatus {
    pub(crate) fn new(w: Window) -> PeriodStatus {
        let mut p = PeriodStatus {
            start: None,
            end: None,
            funded: true,
            carry_in: 0,
            top_ups: 0,
            top_up_log: Vec::new(),
            scheduled: None,
            closed: Vec::new(),
        };
        p.set_window(w);
        p
    }

    pub fn window(&self) -> Window {
        Window {
            start_ms: self
                .start
                .as_deref()
                .and_then(parse_rfc3339)
                .unwrap_or(i64::MIN),
            end_ms: self
                .end
                .as_deref()
                .and_then(parse_rfc3339)
                .unwrap_or(i64::MAX),
            funded: self.funded,
        }
    }

    fn set_window(&mut self, w: Window) {
        self.start = (w.start_ms != i64::MIN).then(|| format_rfc3339(w.start_ms));
        self.end = (w.end_ms != i64::MAX).then(|| format_rfc3339(w.end_ms));
        self.funded = w.funded;
    }

    /// What this period has beyond its own budget `hard` (acc): carry-in
    /// and top-ups, less the budget itself outside a term.
    pub fn extra(&self, hard: i128) -> i128 {
        let own = if self.funded { 0 } else { hard };
        self.carry_in
            .saturating_add(self.top_ups)
            .saturating_sub(own)
    }

    /// Whether the entry holds top-ups, so a key without a period keeps it.
    fn topped_up(&self) -> bool {
        self.top_ups != 0 || !self.top_up_log.is_empty()
    }
}

/// The numbers of one budget now, in the key's resource-hours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Balance {
    pub window: Window,
    /// The period's own budget (hard; zero outside a term).
    pub budget: Quantity,
    pub carry_in: Quantity,
    /// This period's top-ups, net (docs/budgets.md §5).
    pub top_ups: Quantity,
    pub spent: Quantity,
    /// What sub-quotas carve out of it (the sum of the children's hard).
    pub carved: Quantity,
    /// budget + carry-in + top-ups − spent − carved (negative: overspent),
    /// rounded down: `left`, the one rule.
    pub left: Quantity,
}

/// The balance of `key` in `status` (None: no period on it).
pub fn balance(spec: &QuotaSpec, status: &QuotaStatus, key: &str) -> Option<Balance> {
    let p = status.budgets.get(key)?;
    let hard = resources::get(&spec.hard, key);
    let spent = from_cash_accrued(status.accrued(key));
    Some(Balance {
        window: p.window(),
        budget: if p.funded { hard } else { Quantity::ZERO },
        carry_in: to_quantity(p.carry_in),
        top_ups: to_quantity(p.top_ups),
        spent: to_quantity(spent),
        carved: carved(status, key),
        left: left(spec, status, key),
    })
}

/// What is left of the cash budget `key` for the quota's own new work:
/// hard − its own spending (`own_used`) − what its sub-quotas carve out
/// of it (`carved`). The one rule: admission reads the same (`hard −
/// used`, which `QuotaStatus::refresh` builds from these two parts), and
/// so do the tree, the overview, the quota page's budgets, the budgets
/// API and a top-up's plan. Negative when overspent. Computed from the
/// parts, so a copy accrued since its last refresh reads right too.
pub fn left(spec: &QuotaSpec, status: &QuotaStatus, key: &str) -> Quantity {
    resources::get(&spec.hard, key)
        .saturating_sub(own_used(status, spec, key))
        .saturating_sub(carved(status, key))
}

/// What the sub-quotas of `status` carve out of `key`: the sum of their hard.
pub fn carved(status: &QuotaStatus, key: &str) -> Quantity {
    status.children.values().fold(Quantity::ZERO, |acc, c| {
        acc.saturating_add(resources::get(&c.hard, key))
    })
}

/// A cash key's own `used`: spent this period less what the period has
/// beyond its budget (see the module's doc). Without a period, what was
/// spent since the budget began.
pub fn own_used(status: &QuotaStatus, spec: &QuotaSpec, key: &str) -> Quantity {
    let spent = from_cash_accrued(status.accrued(key));
    match status.budgets.get(key) {
        None => to_quantity(spent),
        Some(p) => {
            let hard = from_quantity(resources::get(&spec.hard, key));
            to_quantity(spent.saturating_sub(p.extra(hard)))
        }
    }
}

/// The keys that have a period: in hard, cash, with a policy whose period
/// is not `none`.
fn periodic(
    spec: &QuotaSpec,
) -> impl Iterator<Item = (&String, &crate::object::budgets::BudgetPolicy)> {
    spec.budgets.iter().filter(|(k, p)| {
        cash_target(k).is_some()
            && spec.hard.contains_key(*k)
            && p.period != crate::object::period::Period::None
    })
}

/// Brings `status.budgets` in line with the spec at `at_ms`: a key that
/// gained a period starts in the period of `at_ms` (what it had spent
/// counts in it); a key whose period changed is re-anchored there, keeping
/// its spending, carry-in and top-ups; a key that lost its period drops
/// its entry (its spending stays, its carry-in is gone) unless it holds
/// top-ups, which then count for all time. A window opened here gets the
/// policy's scheduled top-up (once per period).
pub fn sync(spec: &QuotaSpec, status: &mut QuotaStatus, at_ms: i64) {
    status.budgets.retain(|k, p| {
        periodic(spec).any(|(pk, _)| pk == k)
            || (p.topped_up() && cash_target(k).is_some() && spec.hard.contains_key(k))
    });
    for (k, p) in status.budgets.iter_mut() {
        if periodic(spec).any(|(pk, _)| pk == k) {
            continue;
        }
        // Topped up, without a period: one window for all time.
        let all = Period::None.at(at_ms);
        if p.window() != all {
            p.set_window(all);
            p.carry_in = 0;
        }
    }
    for (k, policy) in periodic(spec) {
        let want = |probe: i64| policy.period.at(probe);
        match status.budgets.get_mut(k) {
            None => {
                status
                    .budgets
                    .insert(k.clone(), PeriodStatus::new(want(at_ms)));
            }
            Some(p) => {
                let w = p.window();
                let probe = if w.start_ms == i64::MIN {
                    w.end_ms.saturating_sub(1)
                } else {
                    w.start_ms
                };
                if want(probe) != w {
                    p.set_window(want(at_ms));
                }
            }
        }
        if let Some(p) = status.budgets.get_mut(k) {
            scheduled_in(spec, p, k);
        }
    }
}

/// Closes every period that ended by `now_ms`: each becomes a record (kept
/// in `closed`, newest first), the next period starts with its carry and
/// nothing spent. Returns the records, by key, oldest first.
pub fn close_ended(
    spec: &QuotaSpec,
    status: &mut QuotaStatus,
    now_ms: i64,
) -> Vec<(String, PeriodRecord)> {
    let mut out = Vec::new();
    let keys: Vec<String> = status.budgets.keys().cloned().collect();
    for k in keys {
        let Some(policy) = spec.budgets.get(&k) else {
            continue;
        };
        let Some(p) = status.budgets.get_mut(&k) else {
            continue;
        };
        let window = p.window();
        if window.end_ms > now_ms {
            continue;
        }
        let spent = status
            .cash_accrued
            .get(&k)
            .and_then(|s| s.parse::<i128>().ok())
            .map_or(0, from_cash_accrued);
        let mut state = BudgetState {
            quota: String::new(),
            key: k.clone(),
            window,
            budget: from_quantity(resources::get(&spec.hard, &k)),
            carry_in: p.carry_in,
            top_ups: p.top_ups,
            spent,
            ..Default::default()
        };
        // One period at a time, so each new one gets its scheduled top-up.
        let mut records = Vec::new();
        while state.window.end_ms <= now_ms {
            let end = state.window.end_ms;
            let closed = state.advance_to(end, &policy.period, &policy.carry, policy.overspend);
            if closed.is_empty() {
                break;
            }
            records.extend(closed);
            p.set_window(state.window);
            p.top_ups = 0;
            scheduled_in(spec, p, &k);
            state.top_ups = p.top_ups;
        }
        if state.window == window {
            // The period no longer has this window: start the current one.
            p.set_window(policy.period.at(now_ms));
            scheduled_in(spec, p, &k);
            continue;
        }
        p.set_window(state.window);
        p.carry_in = state.carry_in;
        p.top_ups = state.top_ups;
        status.cash_accrued.remove(&k);
        for r in &records {
            p.closed.insert(0, r.clone());
            out.push((k.clone(), r.clone()));
        }
        p.closed.truncate(KEEP_CLOSED);
    }
    out
}

/// Adds `key`'s scheduled grant to the entry's current period if the
/// period has not had it (`PeriodStatus::scheduled`) and the window is
/// funded: part of the write that opens the period, so once per period
/// whoever writes. A scheduled top-up from the parent is the server's (it
/// needs the parent's write too).
fn scheduled_in(spec: &QuotaSpec, p: &mut PeriodStatus, key: &str) {
    let Some(s) = spec
        .budgets
        .get(key)
        .and_then(|p| p.scheduled_top_up.as_ref())
    else {
        return;
    };
    if s.source == crate::object::budgets::Source::Grant && p.funded {
        let at = p.window().start_ms;
        p.schedule(from_quantity(s.amount), at);
    }
}

/// Accrues `[from, to)` into `status`, cut at every boundary of the
/// spec's periods so that each piece lands in its own period, closing the
/// periods that end on the way. `accrue(a, b)` gives the per-mille
/// accumulators of `[a, b)` per cash key (`cash::accrue`, or the charge
/// ledger's); accrual is linear in time, so the pieces add up exactly to
/// the whole. Returns the records closed.
pub fn accrue_in_periods(
    spec: &QuotaSpec,
    status: &mut QuotaStatus,
    from_ms: i64,
    to_ms: i64,
    mut accrue: impl FnMut(i64, i64) -> BTreeMap<String, i128>,
) -> Vec<(String, PeriodRecord)> {
    sync(spec, status, from_ms);
    let mut cuts: Vec<i64> = Vec::new();
    for (_, policy) in periodic(spec) {
        cuts.extend(policy.period.boundaries(from_ms, to_ms).take(MAX_CUTS));
    }
    let mut closed = close_ended(spec, status, from_ms);
    for (a, b) in split(from_ms, to_ms, cuts) {
        for (k, amount) in accrue(a, b) {
            status.add_accrued(&k, amount);
        }
        closed.extend(close_ended(spec, status, b));
    }
    closed
}

/// Closed records in `new` that `old` did not hold yet (what a write must
/// store), by key, oldest first.
pub fn new_records(old: &QuotaStatus, new: &QuotaStatus) -> Vec<(String, PeriodRecord)> {
    let mut out = Vec::new();
    for (k, p) in &new.budgets {
        let newest_old = old
            .budgets
            .get(k)
            .and_then(|o| o.closed.first())
            .map_or(i64::MIN, |r| r.start_ms);
        for r in p.closed.iter().rev() {
            if r.start_ms > newest_old {
                out.push((k.clone(), r.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cash::MS_PER_HOUR;
    use crate::object::budgets::BudgetPolicy;
    use crate::object::period::{Carry, Period};

    const KEY: &str = "cash/requests.nvidia.com/gpu";

    fn t(s: &str) -> i64 {
        parse_rfc3339(s).unwrap()
    }

    fn spec(carry: Carry) -> QuotaSpec {
        QuotaSpec {
            hard: [(KEY.to_string(), Quantity::from_units(100))].into(),
            budgets: [(
                KEY.to_string(),
                BudgetPolicy {
                    period: Period::Monthly {
                        anchor_day: 1,
                        utc_offset_minutes: 0,
                    },
                    carry,
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        }
    }

    /// One card held all the time: per mille accumulators of [a, b).
    fn one_card(a: i64, b: i64) -> BTreeMap<String, i128> {
        [(KEY.to_string(), 1_000_000_000 * (b - a) as i128 * 1000)].into()
    }

    #[test]
    fn an_accrual_across_the_boundary_is_split_to_the_millisecond() {
        let s = spec(Carry::All);
        let mut st = QuotaStatus::default();
        sync(&s, &mut st, t("2026-11-30T00:00:00Z"));
        // 30 h in November (10 h before the last day), 2 h 0.001 s after.
        let from = t("2026-11-30T00:00:00Z") - 6 * MS_PER_HOUR as i64;
        let to = t("2026-12-01T02:00:00.001Z");
        let closed = accrue_in_periods(&s, &mut st, from, to, one_card);
        assert_eq!(closed.len(), 1);
        let r = &closed[0].1;
        assert_eq!(r.end_ms, t("2026-12-01T00:00:00Z"));
        assert_eq!(to_quantity(r.spent), Quantity::from_units(30));
        // 70 card-hours left carry in whole.
        assert_eq!(to_quantity(r.carried), Quantity::from_units(70));
        let b = balance(&s, &st, KEY).unwrap();
        assert_eq!(b.window.start_ms, t("2026-12-01T00:00:00Z"));
        assert_eq!(b.spent, Quantity::from_nanos(2_000_000_278));
        assert_eq!(b.carry_in, Quantity::from_units(70));
        // hard − used is what is left: 100 + 70 − 2.000000277.
        st.refresh(&s);
        let used = resources::get(&st.used, KEY);
        assert_eq!(Quantity::from_units(100).saturating_sub(used), b.left);
        assert_eq!(st.budgets[KEY].closed.len(), 1);
        // The same window again (a retried write) closes nothing new.
        assert!(close_ended(&s, &mut st, to).is_empty());
        assert_eq!(new_records(&QuotaStatus::default(), &st).len(), 1);
        let mut again = st.clone();
        accrue_in_periods(&s, &mut again, to, to + 1, one_card);
        assert!(new_records(&st, &again).is_empty());
    }

    #[test]
    fn without_carry_the_budget_starts_again_and_a_long_gap_closes_each_period() {
        let s = spec(Carry::None);
        let mut st = QuotaStatus::default();
        let from = t("2026-09-15T00:00:00Z");
        let closed = accrue_in_periods(&s, &mut st, from, t("2026-12-02T00:00:00Z"), |_, _| {
            BTreeMap::new()
        });
        let ends: Vec<String> = closed
            .iter()
            .map(|(_, r)| format_rfc3339(r.end_ms))
            .collect();
        assert_eq!(
            ends,
            [
                "2026-10-01T00:00:00.000Z",
                "2026-11-01T00:00:00.000Z",
                "2026-12-01T00:00:00.000Z"
            ]
        );
        assert_eq!(st.budgets[KEY].closed[0].end_ms, t("2026-12-01T00:00:00Z"));
        assert_eq!(st.budgets[KEY].carry_in, 0);
        st.refresh(&s);
        assert_eq!(resources::get(&st.used, KEY), Quantity::ZERO);
    }

    #[test]
    fn a_policy_removed_drops_the_entry_and_a_changed_one_re_anchors() {
        let mut s = spec(Carry::None);
        let mut st = QuotaStatus::default();
        sync(&s, &mut st, t("2026-11-10T00:00:00Z"));
        s.budgets.get_mut(KEY).unwrap().period = Period::Monthly {
            anchor_day: 15,
            utc_offset_minutes: 0,
        };
        sync(&s, &mut st, t("2026-11-20T00:00:00Z"));
        assert_eq!(
            st.budgets[KEY].start.as_deref(),
            Some("2026-11-15T00:00:00.000Z")
        );
        s.budgets.clear();
        sync(&s, &mut st, t("2026-11-20T00:00:00Z"));
        assert!(st.budgets.is_empty());
    }

    #[test]
    fn outside_a_term_nothing_is_left() {
        let mut s = spec(Carry::None);
        s.budgets.get_mut(KEY).unwrap().period = Period::Term {
            start_ms: t("2027-01-01T00:00:00Z"),
            end_ms: t("2027-02-01T00:00:00Z"),
        };
        let mut st = QuotaStatus::default();
        sync(&s, &mut st, t("2026-12-01T00:00:00Z"));
        st.refresh(&s);
        assert_eq!(st.exhausted_cash_keys(&s).collect::<Vec<_>>(), [KEY]);
        accrue_in_periods(
            &s,
            &mut st,
            t("2026-12-01T00:00:00Z"),
            t("2027-01-01T00:00:00Z"),
            |_, _| BTreeMap::new(),
        );
        st.refresh(&s);
        assert!(st.exhausted_cash_keys(&s).next().is_none());
        let json = serde_json::to_value(&st.budgets[KEY]).unwrap();
        assert_eq!(json["end"], "2027-02-01T00:00:00.000Z");
        assert!(json.get("funded").is_none());
    }
}
