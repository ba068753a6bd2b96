//! A quota's budgets as its object holds them (docs/budgets.md): the
//! policy of each cash key (`spec.budgets`: period, carry-over,
//! overspend, run-time rule, refunds, exhaustion, scheduled top-up), and
//! in status each key's current period with its top-ups, the open
//! reservations, and the ledger entries accrued and not yet written. The
//! rules that keep them are `crate::budget`'s.

use super::period::{Carry, Overspend, Period, PeriodRecord};
use crate::quantity::{serde_acc, Quantity};
use crate::time::serde_stamp;
use crate::usage::QosClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetPolicy {
    #[serde(default)]
    pub period: Period,
    #[serde(default)]
    pub carry: Carry,
    #[serde(default)]
    pub overspend: Overspend,
    #[serde(default)]
    pub without_run_time: WithoutRunTime,
    /// At most this many resource-hours held by all open reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_cap: Option<Quantity>,
    #[serde(default)]
    pub refund: RefundPolicy,
    #[serde(default)]
    pub on_exhausted: Exhaustion,
    /// Added at every period start (docs/budgets.md §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_top_up: Option<ScheduledTopUp>,
    /// The forecast alert's horizon, in days: an alert opens when the burn
    /// of the last day would spend the budget within it. Absent: the
    /// default, `DEFAULT_FORECAST_DAYS`; `0` turns the alert off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast_days: Option<i64>,
}

/// What a workload stopped by reclaim gets back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum RefundPolicy {
    /// Nothing: reclaim is a risk of borrowing.
    #[default]
    None,
    /// The work since its last checkpoint, assuming one every
    /// `checkpointEverySeconds` from the start of the run.
    #[serde(rename_all = "camelCase")]
    LastStretch { checkpoint_every_seconds: i64 },
    /// Everything the run spent.
    WholeRun,
}

/// What happens when a budget is spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Exhaustion {
    /// New admissions that need it are refused; running work goes on.
    #[default]
    RefuseNew,
    /// Also suspend the batch work using it, `graceSeconds` after the
    /// budget ran out, unless it is no longer spent by then.
    #[serde(rename_all = "camelCase")]
    SuspendBatch { grace_seconds: i64 },
}

/// What admission does with a workload that declares no run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum WithoutRunTime {
    /// Admit without a reservation while anything is left (as before).
    #[default]
    Admit,
    /// Refuse: every workload using the budget must declare a run time.
    Refuse,
    /// Reserve as if it declared `horizonSeconds`.
    #[serde(rename_all = "camelCase")]
    ReserveDefault { horizon_seconds: i64 },
}

/// An open reservation of one workload on one budget. Amounts in acc.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    #[serde(with = "serde_acc")]
    pub reserved: i128,
    /// Accrued by the workload since it was reserved (this period).
    #[serde(with = "serde_acc")]
    pub used: i128,
    pub at_ms: i64,
    /// The run time reserved for, from `at_ms`.
    pub run_ms: i64,
}

/// Where a top-up's amount comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// The parent's current period of the same key gives it up.
    Parent,
    /// New budget, granted by an admin.
    Grant,
}

/// A policy's top-up at every period start (`BudgetPolicy::scheduled_top_up`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduledTopUp {
    /// Resource-hours added at each period start.
    pub amount: Quantity,
    pub source: Source,
}

/// One top-up as the status of the quota it changed records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopUpMark {
    /// Who applied it: `t<transfer id>` (received), `t<id>-from` (given by
    /// the parent), `t<id>-back` (an expiry's return to the parent), or
    /// `scheduled`.
    pub id: String,
    /// Acc added to the period (negative: given away).
    #[serde(with = "serde_acc")]
    pub amount: i128,
    #[serde(with = "serde_stamp")]
    pub at: i64,
    /// The start of the period it counts in (absent: all time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// Set once its expiry was applied, with what it withdrew.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
    #[serde(default, with = "serde_acc", skip_serializing_if = "is_zero")]
    pub withdrawn: i128,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeriodStatus {
    /// Start of the current period (RFC 3339); absent before a term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// When it ends and the budget starts again; absent after a term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// False outside a term: the budget counts as zero.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub funded: bool,
    /// Carried in from the period before, in acc (negative: a debt).
    #[serde(default, with = "serde_acc")]
    pub carry_in: i128,
    /// Top-ups of this period, net, in acc (docs/budgets.md §5): added by
    /// grants and by the parent, less what a parent gave its children and
    /// what expiries withdrew. Counts like carry-in.
    #[serde(default, with = "serde_acc", skip_serializing_if = "is_zero")]
    pub top_ups: i128,
    /// The top-ups applied here, newest last (`topup::KEEP_MARKS`), so a
    /// retried one is applied once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_up_log: Vec<TopUpMark>,
    /// The start of the period the policy's scheduled top-up was added to
    /// (`start`, or absent): once per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<String>,
    /// The last closed periods, newest first (at most `KEEP_CLOSED`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<PeriodRecord>,
}

fn is_zero(v: &i128) -> bool {
    *v == 0
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Open reservations by cash key, then by workload reference.
pub type Reservations = BTreeMap<String, BTreeMap<String, Reservation>>;

/// Why a budget changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// Use: `amount` > 0 is spent.
    Accrual,
    /// Use given back (reclaimed work, `refund`): `amount` < 0.
    Refund,
    /// Budget added for the current period: `amount` > 0.
    TopUp,
    /// Carried in from the period before at its start; < 0 for a debt.
    Carry,
    /// Use measured by real usage and billed by quality of service
    /// (`billing: ByQuality`): a Burstable pod's use above its request, a
    /// BestEffort pod's use; `amount` ≥ 0. An entry of 0 with the note
    /// `real_usage::billing::ON_REQUEST` marks a stretch billed on
    /// request because no real usage covered it.
    Use,
}

/// One change of one cash key's budget in one quota. `amount` in acc.
/// Spending entries carry the workload's identity; budget entries
/// (top-up, carry) leave the workload fields empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub quota: String,
    pub key: String,
    #[serde(default)]
    pub workload: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub start_ms: i64,
    /// Equal to `start_ms` for an instant (top-up, carry).
    pub end_ms: i64,
    #[serde(with = "serde_acc")]
    pub amount: i128,
    pub reason: Reason,
    /// For people: why a refund or top-up was made.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Cluster mode: the window a status write accrued, carried in that very
/// write (`status.ledgerOutbox`), so a controller that stops between the
/// write and the ledger append loses nothing: the next reconcile, before
/// it writes again, appends the outbox it reads (a no-op when it was
/// appended: the window records refuse a window twice), and only then
/// replaces it with its own window (docs/budgets.md §6 "Cluster mode").
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outbox {
    #[serde(rename = "from", with = "crate::time::serde_stamp")]
    pub from_ms: i64,
    #[serde(rename = "to", with = "crate::time::serde_stamp")]
    pub to_ms: i64,
    #[serde(default)]
    pub entries: Vec<Entry>,
    /// Entries of no accrual window — a refund's, taken in the write that
    /// removed its reclaim mark — carried until appended by their ids
    /// (idempotent), with the window's. An outbox of `extra` alone has
    /// `from == to` and no window to append.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<Entry>,
}

/// Entries accrued on a working copy and not yet written: the store
/// writes them with the status, in the same transaction (standalone), or
/// the controller appends them after its status write (cluster mode).
/// Never serialized, and never part of a status's equality, so a status
/// read back equals the one written.
#[derive(Clone, Debug, Default)]
pub struct Pending(pub Vec<Entry>);

impl PartialEq for Pending {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Pending {}

impl Pending {
    /// The entries of windows that start at or after `from_ms`: what this
    /// copy accrued since the stored status it was read from (a copy
    /// cloned from one that was already written keeps its old entries,
    /// which start before).
    pub fn since(&self, from_ms: Option<i64>) -> Vec<Entry> {
        self.0
            .iter()
            .filter(|e| from_ms.is_none_or(|f| e.start_ms >= f))
            .cloned()
            .collect()
    }
}
