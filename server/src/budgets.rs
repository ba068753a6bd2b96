//! A quota's budgets as people read them (the budgets API and the quota
//! page's panel): per cash key of hard, its policy, the current period,
//! what it has and what is left, when it renews, its one forecast
//! (`quota::forecast::outlook`), and the closed periods. Pure arithmetic is
//! `quota`'s (`budget::periods`, `forecast`); this gathers it.

use crate::store::budgets::MAX_PAGE;
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::budget::periods::{self, KEEP_CLOSED};
use quota::budget::{to_quantity, Currency};
use quota::keys::cash_target;
use quota::object::budgets::BudgetPolicy;
use quota::object::period::PeriodRecord;
use quota::object::Quota;
use quota::Quantity;
use serde_json::{json, Value};

/// One cash key's budget now. Amounts in the key's resource-hours.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetView {
    pub key: String,
    /// `card-hours`, `core-hours`, …
    pub unit: &'static str,
    /// As in spec (the default, `{}`, when the key has none).
    pub policy: BudgetPolicy,
    /// The current period; None without one (one budget for all time).
    pub period: Option<quota::object::period::Window>,
    /// The period's own budget (hard; zero outside a term).
    pub budget: Quantity,
    pub carry_in: Quantity,
    /// This period's top-ups, net (docs/budgets.md §5).
    pub top_ups: Quantity,
    pub spent: Quantity,
    /// What the quota's whole subtree spent on the key: Σ each quota's own
    /// spending (`quota::rollup::subtree_in_use`, the figure budget alerts
    /// read), never what a parent carved out for its children.
    pub subtree_spent: Quantity,
    pub carved: Quantity,
    /// budget + carry-in + top-ups − spent − carved, as admission reads it
    /// (`periods::left`; negative: overspent).
    pub left: Quantity,
    /// The budget's one forecast (`quota::forecast::outlook`), whose words
    /// (`runs out in 8.3 days (2026-12-07)`) every page, the API and the
    /// alerts show.
    pub outlook: quota::forecast::Outlook,
    /// Open reservations (docs/budgets.md §2): how many, and what they
    /// still hold back.
    pub open: usize,
    pub reserved: Quantity,
    /// Closed periods, newest first.
    pub closed: Vec<PeriodRecord>,
    /// The price list's currency: amounts are also shown in money.
    pub currency: Option<Currency>,
}

/// The budgets of `q` (a current copy: accrued up to `now` where the
/// service accrues itself), with at most `limit` closed periods each from
/// the store (merged with those in status that the store may not have yet).
/// A quota's own spending on `key` (its `selfUsed`): its subtree's where
/// it has no children.
fn resources_own(q: &Quota, key: &str) -> Quantity {
    quota::resources::get(&q.status.self_used, key)
}

pub async fn views(
    sql: &SqlStore,
    q: &Quota,
    pricing: &quota::forecast::Pricing,
    subtree: Option<&quota::ResourceList>,
    now: i64,
    limit: i64,
    currency: Option<&Currency>,
) -> Result<Vec<BudgetView>, StoreError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut out = Vec::new();
    for (key, hard) in q.spec.hard.iter().filter(|(k, _)| cash_target(k).is_some()) {
        let policy = q.spec.budgets.get(key).cloned().unwrap_or_default();
        let (period, budget, carry_in, top_ups, spent) =
            match periods::balance(&q.spec, &q.status, key) {
                Some(b) => (Some(b.window), b.budget, b.carry_in, b.top_ups, b.spent),
                None => (
                    None,
                    *hard,
                    Quantity::ZERO,
                    Quantity::ZERO,
                    periods::own_used(&q.status, &q.spec, key),
                ),
            };
        let carved = periods::carved(&q.status, key);
        let subtree_spent = match subtree {
            Some(sub) => quota::resources::get(sub, key),
            None => resources_own(q, key),
        };
        let left = periods::left(&q.spec, &q.status, key);
        let mut closed = sql.budget_periods(q.name(), key, i64::MAX, limit).await?;
        if let Some(p) = q.status.budgets.get(key) {
            for r in p.closed.iter().take(KEEP_CLOSED) {
                if !closed.iter().any(|c| c.start_ms == r.start_ms) {
                    closed.push(r.clone());
                }
            }
        }
        closed.sort_by_key(|r| std::cmp::Reverse(r.start_ms));
        closed.truncate(limit as usize);
        let (open, reserved) = quota::budget::reservations::open(&q.status, key);
        let outlook = quota::forecast::outlook(q, key, now, &pricing.qos, &pricing.list);
        out.push(BudgetView {
            key: key.clone(),
            unit: quota::keys::cash_unit(key),
            policy,
            period,
            budget,
            carry_in,
            top_ups,
            spent,
            subtree_spent,
            carved,
            left,
            outlook,
            open,
            reserved: to_quantity(reserved),
            closed,
            currency: currency.cloned(),
        });
    }
    Ok(out)
}

fn stamp(ms: i64, unbounded: i64) -> Value {
    if ms == unbounded {
        Value::Null
    } else {
        Value::String(quota::time::format_rfc3339(ms))
    }
}

/// A closed period in resource-hours, as the API shows it.
pub fn record_json(r: &PeriodRecord) -> Value {
    let q = |acc: i128| to_quantity(acc).to_string();
    json!({
        "start": stamp(r.start_ms, i64::MIN),
        "end": stamp(r.end_ms, i64::MAX),
        "budget": q(r.budget),
        "carryIn": q(r.carry_in),
        "topUps": q(r.top_ups),
        "spent": q(r.spent),
        "carried": q(r.carried),
        "expired": q(r.expired),
        "forgiven": q(r.forgiven),
    })
}

impl BudgetView {
    /// The API's shape: amounts as quantities in the key's unit, times in
    /// RFC 3339 (null when unbounded).
    pub fn to_json(&self) -> Value {
        let (start, end) = match self.period {
            Some(w) => (stamp(w.start_ms, i64::MIN), stamp(w.end_ms, i64::MAX)),
            None => (Value::Null, Value::Null),
        };
        json!({
            "key": self.key,
            "unit": self.unit,
            "policy": self.policy,
            "period": self.period.map(|w| json!({
                "start": start,
                "end": end,
                "funded": w.funded,
            })),
            "budget": self.budget.to_string(),
            "carryIn": self.carry_in.to_string(),
            "topUps": self.top_ups.to_string(),
            "spent": self.spent.to_string(),
            "subtreeSpent": self.subtree_spent.to_string(),
            "carvedOut": self.carved.to_string(),
            "left": self.left.to_string(),
            "renewsAt": end,
            "runway": self.outlook.words(),
            "runsOutAt": self.outlook.runs_out_ms().map(quota::time::format_rfc3339),
            "burnPerHour": self.outlook.burn_per_hour.to_string(),
            "reservations": {
                "open": self.open,
                "reserved": self.reserved.to_string(),
                "cap": self.policy.reservation_cap.map(|c| c.to_string()),
                "leftAfterReservations": self.left.saturating_sub(self.reserved).to_string(),
            },
            "closed": self.closed.iter().map(record_json).collect::<Vec<_>>(),
            "money": self.currency.as_ref().map(|c| json!({
                "unit": c.unit,
                "perCardHour": quota::readable::exact(c.per_card_hour),
                "budget": quota::readable::exact(c.amount(self.budget)),
                "carryIn": quota::readable::exact(c.amount(self.carry_in)),
                "spent": quota::readable::exact(c.amount(self.spent)),
                "left": quota::readable::exact(c.amount(self.left)),
            })),
        })
    }

    /// For people: `2 open reservations hold 24 card-hours (cap 50) ·
    /// 1,210 card-hours left after them`; None with no open reservation
    /// and no cap.
    pub fn reservations_line(&self) -> Option<String> {
        let cap = self.policy.reservation_cap;
        if self.open == 0 && cap.is_none() {
            return None;
        }
        let show = |q: Quantity| format!("{} {}", quota::readable::grouped(q), self.unit);
        let (plural, verb) = if self.open == 1 {
            ("", "holds")
        } else {
            ("s", "hold")
        };
        let mut s = format!(
            "{} open reservation{plural} {verb} {}",
            self.open,
            show(self.reserved)
        );
        if let Some(c) = cap {
            s.push_str(&format!(" (cap {})", quota::readable::grouped(c)));
        }
        s.push_str(&format!(
            " · {} left after them",
            show(self.left.saturating_sub(self.reserved))
        ));
        Some(s)
    }

    /// For people: `1,234 card-hours left of 5,000 this month (carry-in
    /// 200) · renews 2026-12-01 00:00 UTC · runs out in 8.8 days`.
    pub fn line(&self) -> String {
        let show = |q: Quantity| quota::readable::grouped(q);
        let this = match &self.policy.period {
            quota::object::period::Period::None => "in all",
            quota::object::period::Period::Weekly { .. } => "this week",
            quota::object::period::Period::Monthly { .. } => "this month",
            quota::object::period::Period::Term { .. } => "this term",
        };
        let mut s = match &self.currency {
            // In money where a currency is configured, the hours beside.
            Some(c) => format!(
                "{} left of {} {this} ({} of {} {})",
                c.format(self.left),
                c.format(self.budget),
                show(self.left),
                show(self.budget),
                self.unit
            ),
            None => format!(
                "{} {} left of {} {this}",
                show(self.left),
                self.unit,
                show(self.budget)
            ),
        };
        if !self.carry_in.is_zero() {
            match &self.currency {
                Some(c) => s.push_str(&format!(" (carry-in {})", c.format(self.carry_in))),
                None => s.push_str(&format!(" (carry-in {})", show(self.carry_in))),
            }
        }
        if !self.top_ups.is_zero() {
            match &self.currency {
                Some(c) => s.push_str(&format!(" (top-ups {})", c.format(self.top_ups))),
                None => s.push_str(&format!(" (top-ups {})", show(self.top_ups))),
            }
        }
        if !self.carved.is_zero() {
            // At a parent: what its subtree spent (the figure its budget
            // alerts read) and what it allocated to children, each named;
            // "left" and the run-out are its own work's.
            let allocated = match &self.currency {
                Some(c) => c.format(self.carved),
                None => format!("{} {}", show(self.carved), self.unit),
            };
            s = format!(
                "{} {} spent in its subtree · {allocated} allocated to children · {s} for its own work",
                show(self.subtree_spent),
                self.unit
            );
        }
        if let Some(w) = self.period {
            if !w.funded {
                s.push_str(" · outside the term");
            }
            if w.end_ms != i64::MAX {
                s.push_str(&format!(" · renews {}", quota::time::format_when(w.end_ms)));
            }
        }
        if self.carved.is_zero() {
            s.push_str(&format!(" · {}", self.outlook.words()));
        } else {
            // The run-out is its own work's, not its subtree's.
            s.push_str(&format!(" · its own work: {}", self.outlook.words()));
        }
        s
    }
}
