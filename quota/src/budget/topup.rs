//! Top-ups (docs/budgets.md §5): one-off additions to a cash key's
//! **current period**, as its status keeps them (`status.budgets[key]`),
//! and the scheduled top-up a policy adds at every period start.
//!
//! - A top-up adds to the period's `topUps`, which counts like carry-in
//!   (`PeriodStatus::extra`): `hard − used` grows by it, so every existing
//!   check of the key reads it. At the boundary it is closed into the
//!   period's record (`PeriodRecord::top_ups`); what is left then carries
//!   under the carry rule like any other budget.
//! - A key **without a period** keeps an entry too once topped up: one
//!   window for all time, so the top-up adds to the budget for good (until
//!   it expires, if it has an expiry).
//! - Sources: a **grant** (new budget, no source) or the **parent**, whose
//!   current period of the same key gives the amount up (a negative
//!   top-up) if what it has left for its own use, after its open
//!   reservations, covers it ([`give`]).
//! - Every change is recorded as a [`TopUpMark`] under an id the caller
//!   chooses (the transfer's), so applying a top-up twice (a retried
//!   write, a recovered execution) changes nothing the second time. Marks
//!   outlive their period (the newest [`KEEP_MARKS`] are kept) so a retry
//!   across a boundary still finds its mark.
//! - **Expiry** withdraws the unspent part of a top-up ([`unspent_part`]):
//!   `min(amount, max(0, available − spent))` — the top-up counts as spent
//!   last, and what is withdrawn was never spent, so spending never ends
//!   up beyond what is available. A top-up whose period has closed has
//!   nothing to withdraw: it closed with its period.

use super::reservations::state_of;
use super::{from_quantity, to_quantity};
use crate::keys::cash_target;
use crate::object::budgets::PeriodStatus;
use crate::object::budgets::{ScheduledTopUp, Source, TopUpMark};
use crate::object::period::Period;
use crate::object::Quota;
use crate::quantity::Quantity;
use crate::time::format_rfc3339;

/// The largest top-up, in resource-hours (a billion card-hours): far
/// beyond any budget, small enough that every sum stays exact.
pub const MAX_TOP_UP_HOURS: i64 = 1_000_000_000;
/// Top-ups one key may receive or give in one period.
pub const MAX_PER_PERIOD: usize = 32;
/// Marks kept per key (the current period's always among them).
pub const KEEP_MARKS: usize = 64;
/// The id of the mark a scheduled top-up leaves.
pub const SCHEDULED: &str = "scheduled";

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Parent => "parent",
            Source::Grant => "grant",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopUpError {
    #[error("bizrq {quota}: {key} is not a cash key of its hard, so it has no budget to top up")]
    NotABudget { quota: String, key: String },
    #[error("a top-up of {0} is not positive: ask for more than zero")]
    NotPositive(Quantity),
    #[error(
        "a top-up of {0} is more than the {MAX_TOP_UP_HOURS} resource-hours one top-up may be"
    )]
    TooLarge(Quantity),
    #[error("bizrq {quota}: {key} gives {asked}, only {left} is left of its budget this period")]
    NotCovered {
        quota: String,
        key: String,
        asked: Quantity,
        left: Quantity,
    },
    #[error("bizrq {quota}: {key} already has {MAX_PER_PERIOD} top-ups this period, the most one period takes")]
    TooMany { quota: String, key: String },
    #[error("budget {key}: scheduledTopUp {detail}")]
    Scheduled { key: String, detail: String },
}

/// Checks a top-up's amount: more than zero, at most [`MAX_TOP_UP_HOURS`].
pub fn check_amount(amount: Quantity) -> Result<(), TopUpError> {
    if amount <= Quantity::ZERO {
        return Err(TopUpError::NotPositive(amount));
    }
    if amount > Quantity::from_units(MAX_TOP_UP_HOURS) {
        return Err(TopUpError::TooLarge(amount));
    }
    Ok(())
}

impl ScheduledTopUp {
    /// A positive amount within bounds, on a key with a period (there is
    /// no period start to add it at otherwise).
    pub fn validate(&self, key: &str, period: &Period) -> Result<(), TopUpError> {
        let bad = |detail: String| TopUpError::Scheduled {
            key: key.to_string(),
            detail,
        };
        if *period == Period::None {
            return Err(bad(
                "needs a period (weekly, monthly or term): it is added at each period start".into(),
            ));
        }
        check_amount(self.amount).map_err(|e| bad(format!("amount: {e}")))
    }
}

/// The part of a top-up of `added` acc that is still unspent when
/// `available` (budget + carry-in + top-ups) has `spent` against it: the
/// top-up counts as spent last. Never more than was added, never more than
/// is left, never negative.
pub fn unspent_part(added: i128, available: i128, spent: i128) -> i128 {
    if added <= 0 {
        return 0;
    }
    added.min(available.saturating_sub(spent).max(0))
}

impl PeriodStatus {
    fn mark(&self, id: &str) -> Option<&TopUpMark> {
        self.top_up_log.iter().find(|m| m.id == id)
    }

    /// Marks of the current period.
    pub fn current_marks(&self) -> impl Iterator<Item = &TopUpMark> {
        self.top_up_log.iter().filter(|m| m.period == self.start)
    }

    /// Adds `amount` acc to the current period under `id`; false when a
    /// mark of `id` is there already (nothing changes).
    fn add(
        &mut self,
        quota: &str,
        key: &str,
        id: &str,
        amount: i128,
        at: i64,
    ) -> Result<bool, TopUpError> {
        if self.mark(id).is_some() {
            return Ok(false);
        }
        if id != SCHEDULED && self.current_marks().count() >= MAX_PER_PERIOD {
            return Err(TopUpError::TooMany {
                quota: quota.to_string(),
                key: key.to_string(),
            });
        }
        self.top_ups = self.top_ups.saturating_add(amount);
        self.top_up_log.push(TopUpMark {
            id: id.to_string(),
            amount,
            at,
            period: self.start.clone(),
            expired: false,
            withdrawn: 0,
        });
        self.prune();
        Ok(true)
    }

    /// Keeps the newest [`KEEP_MARKS`] marks (by time), never one of the
    /// current period.
    pub(crate) fn prune(&mut self) {
        while self.top_up_log.len() > KEEP_MARKS {
            let start = self.start.clone();
            let Some(oldest) = self
                .top_up_log
                .iter()
                .enumerate()
                .filter(|(_, m)| m.period != start)
                .min_by_key(|(_, m)| m.at)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.top_up_log.remove(oldest);
        }
    }

    /// A scheduled top-up's mark is one per period: the one of a period
    /// that closed makes room for the next.
    pub(crate) fn schedule(&mut self, amount: i128, at: i64) {
        if self.scheduled.is_some() && self.scheduled == self.start {
            return;
        }
        self.top_up_log.retain(|m| m.id != SCHEDULED);
        self.top_ups = self.top_ups.saturating_add(amount);
        self.top_up_log.push(TopUpMark {
            id: SCHEDULED.to_string(),
            amount,
            at,
            period: self.start.clone(),
            expired: false,
            withdrawn: 0,
        });
        self.scheduled = self.start.clone();
        self.prune();
    }
}

/// The status entry of `key` in `q`, created if the key has none: the
/// current window of its period, or all time for a key without one.
fn entry<'a>(q: &'a mut Quota, key: &str, now_ms: i64) -> Result<&'a mut PeriodStatus, TopUpError> {
    if cash_target(key).is_none_or(str::is_empty) || !q.spec.hard.contains_key(key) {
        return Err(TopUpError::NotABudget {
            quota: q.name().to_string(),
            key: key.to_string(),
        });
    }
    super::periods::sync(&q.spec, &mut q.status, now_ms);
    let period = q
        .spec
        .budgets
        .get(key)
        .map_or(Period::None, |p| p.period.clone());
    Ok(q.status
        .budgets
        .entry(key.to_string())
        .or_insert_with(|| PeriodStatus::new(period.at(now_ms))))
}

/// Adds a top-up of `amount` to `key`'s current period of `q` (a grant, or
/// the receiving side of one from the parent), under `id`. Returns false
/// when `id` was applied already (a retry: nothing changes).
pub fn receive(
    q: &mut Quota,
    key: &str,
    id: &str,
    amount: Quantity,
    now_ms: i64,
) -> Result<bool, TopUpError> {
    check_amount(amount)?;
    receive_acc(q, key, id, from_quantity(amount), now_ms)
}

/// [`receive`] of an amount in acc (> 0; anything else changes nothing):
/// what an expiry gives back to the parent it came from.
pub fn receive_acc(
    q: &mut Quota,
    key: &str,
    id: &str,
    acc: i128,
    now_ms: i64,
) -> Result<bool, TopUpError> {
    if acc <= 0 {
        return Ok(false);
    }
    let name = q.name().to_string();
    // On a copy: a refusal changes nothing.
    let mut work = q.clone();
    if !entry(&mut work, key, now_ms)?.add(&name, key, id, acc, now_ms)? {
        return Ok(false);
    }
    work.status.refresh(&work.spec);
    *q = work;
    Ok(true)
}

/// What `key` of `q` has left for its own use this period, after its open
/// reservations (acc): what a parent may give.
pub fn left_to_give(q: &Quota, key: &str) -> i128 {
    state_of(q, key).left()
}

/// The giving side of a top-up from the parent: `q` (the parent) gives up
/// `amount` of its current period of `key`, if what it has left after its
/// open reservations covers it; else nothing changes. Returns false when
/// `id` was applied already.
pub fn give(
    q: &mut Quota,
    key: &str,
    id: &str,
    amount: Quantity,
    now_ms: i64,
) -> Result<bool, TopUpError> {
    check_amount(amount)?;
    let name = q.name().to_string();
    let mut work = q.clone();
    if entry(&mut work, key, now_ms)?.mark(id).is_some() {
        return Ok(false);
    }
    let left = left_to_give(&work, key);
    let asked = from_quantity(amount);
    if asked > left {
        return Err(TopUpError::NotCovered {
            quota: name,
            key: key.to_string(),
            asked: amount,
            left: to_quantity(left.max(0)),
        });
    }
    entry(&mut work, key, now_ms)?.add(&name, key, id, -asked, now_ms)?;
    work.status.refresh(&work.spec);
    *q = work;
    Ok(true)
}

/// Applies the expiry of top-up `id` to `q`: withdraws its unspent part
/// from the current period and records it in the mark. Returns what was
/// withdrawn (acc) and whether `q` changed: zero when its period closed
/// (it closed with it) or no mark is left; the recorded amount, unchanged,
/// when the expiry was applied already (a retry).
pub fn expire(q: &mut Quota, key: &str, id: &str, now_ms: i64) -> (i128, bool) {
    if cash_target(key).is_none() || !q.spec.hard.contains_key(key) {
        return (0, false);
    }
    if let Some(m) = mark(q, key, id) {
        if m.expired {
            return (m.withdrawn, false);
        }
    } else {
        return (0, false);
    }
    super::periods::sync(&q.spec, &mut q.status, now_ms);
    let state = state_of(q, key);
    let Some(p) = q.status.budgets.get_mut(key) else {
        return (0, false);
    };
    let start = p.start.clone();
    let Some(m) = p.top_up_log.iter_mut().find(|m| m.id == id) else {
        return (0, false);
    };
    let withdrawn = if m.period == start {
        unspent_part(m.amount, state.available(), state.spent)
    } else {
        0
    };
    m.expired = true;
    m.withdrawn = withdrawn;
    p.top_ups = p.top_ups.saturating_sub(withdrawn);
    q.status.refresh(&q.spec);
    (withdrawn, true)
}

/// The mark of `id` on `key` of `q`, if it is still kept.
pub fn mark<'a>(q: &'a Quota, key: &str, id: &str) -> Option<&'a TopUpMark> {
    q.status.budgets.get(key)?.mark(id)
}

/// `2026-12-01T00:00:00.000Z`, or `all time` for a key without a period.
pub fn period_label(start: Option<&str>) -> String {
    start.map_or_else(|| "all time".to_string(), str::to_string)
}

/// When a mark was made, for people.
pub fn when(m: &TopUpMark) -> String {
    format_rfc3339(m.at)
}
