//! The ledger entries each accrual writes (docs/budgets.md §6, §9 "the
//! ledger"). Both modes accrue `status.cashAccrued` in windows
//! `[lastReconcileTime, now)`; the same window, over the same holdings at
//! the same prices, is written to the ledger as `report::Entry`s, one per
//! cash key, workload, model, QoS class, user and piece (`accrue_priced`).
//! Because accrual is exact integer arithmetic, the entries of a window
//! add up to what the window added to `cashAccrued`, to the acc (× 1000
//! of its per-mille unit) whenever quantities are whole micro-units.

use super::period::Period;
use super::price::{accrue_priced, Holding, PriceList};
use super::report::Entry;
use crate::cash::{Interval, Prices};
use crate::keys::cash_target;
use crate::object::{Charge, QuotaSpec};
use crate::quantity::Quantity;
use crate::resources::ResourceList;
use crate::time;
use crate::workload::WorkloadRef;
use std::collections::BTreeMap;

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

/// The cash keys of `spec` with their usage keys and periods.
fn cash_keys(spec: &QuotaSpec) -> Vec<(String, String, Period)> {
    spec.hard
        .keys()
        .filter_map(|k| {
            let target = cash_target(k)?;
            let period = spec
                .budgets
                .get(k)
                .map(|p| p.period.clone())
                .unwrap_or_default();
            Some((k.clone(), target.to_string(), period))
        })
        .collect()
}

/// A pod set as held: workload, user, usage at its charged count, QoS
/// class, charged since.
type Held<'a> = (
    &'a str,
    Option<&'a str>,
    ResourceList,
    Option<crate::usage::QosClass>,
    i64,
);

fn namespace_of(wref: &str) -> &str {
    WorkloadRef::parse(wref).map_or("", |r| r.namespace)
}

/// Standalone: what the charges of `workloads` cost over `[from, to)`, as
/// ledger entries of `quota` — the same amounts `accrue_ledger_priced`
/// adds to `cashAccrued` (each pod set counted as charged, from the later
/// of its charge and `from`).
#[allow(clippy::too_many_arguments)]
pub fn charge_entries(
    quota: &str,
    spec: &QuotaSpec,
    workloads: &BTreeMap<String, Charge>,
    users: &BTreeMap<String, String>,
    from_ms: i64,
    to_ms: i64,
    qos: &Prices,
    list: &PriceList,
) -> Vec<Entry> {
    let keys = cash_keys(spec);
    if keys.is_empty() || to_ms <= from_ms {
        return Vec::new();
    }
    // Each pod set as one holding of its charged count.
    let mut usages: Vec<Held<'_>> = Vec::new();
    for (wref, c) in workloads {
        let since = time::parse_rfc3339(&c.since).unwrap_or(from_ms);
        for s in &c.pod_sets {
            let n = c.charged_count(s) as i128;
            let usage: ResourceList = s
                .per_pod
                .iter()
                .map(|(k, q)| (k.clone(), q.saturating_mul(n)))
                .filter(|(_, q): &(String, Quantity)| !q.is_zero())
                .collect();
            if usage.is_empty() {
                continue;
            }
            usages.push((
                wref,
                users.get(wref).map(String::as_str),
                usage,
                s.qos,
                since,
            ));
        }
    }
    let holdings: Vec<Holding<'_>> = usages
        .iter()
        .map(|(wref, user, usage, q, since)| Holding {
            workload: wref,
            namespace: namespace_of(wref),
            user: *user,
            usage,
            qos: *q,
            start_ms: *since,
            end_ms: None,
        })
        .collect();
    entries_of(quota, &keys, &holdings, from_ms, to_ms, qos, list)
}

/// Cluster mode: what pod runs cost over `[from, to)`, as ledger entries
/// of `quota` — the same amounts `accrue_weighted` adds. Each run comes
/// with its workload reference (empty when unknown) and the user the
/// workload's charge recorded.
#[allow(clippy::too_many_arguments)]
pub fn run_entries(
    quota: &str,
    spec: &QuotaSpec,
    runs: &[(&str, Interval<'_>)],
    users: &BTreeMap<String, String>,
    from_ms: i64,
    to_ms: i64,
    qos: &Prices,
    list: &PriceList,
) -> Vec<Entry> {
    let keys = cash_keys(spec);
    if keys.is_empty() || to_ms <= from_ms {
        return Vec::new();
    }
    let holdings: Vec<Holding<'_>> = runs
        .iter()
        .map(|(wref, iv)| Holding {
            workload: wref,
            namespace: namespace_of(wref),
            user: users.get(*wref).map(String::as_str),
            usage: iv.usage,
            qos: iv.qos,
            start_ms: iv.start_ms,
            end_ms: iv.end_ms,
        })
        .collect();
    entries_of(quota, &keys, &holdings, from_ms, to_ms, qos, list)
}

fn entries_of(
    quota: &str,
    keys: &[(String, String, Period)],
    holdings: &[Holding<'_>],
    from_ms: i64,
    to_ms: i64,
    qos: &Prices,
    list: &PriceList,
) -> Vec<Entry> {
    let mut out = Vec::new();
    for (ck, uk, period) in keys {
        let one = [(ck.clone(), uk.clone())];
        out.extend(accrue_priced(
            quota, holdings, &one, from_ms, to_ms, qos, list, period,
        ));
    }
    out
}

/// The carry entries of the periods a write closed (`periods::new_records`).
pub fn carry_entries(quota: &str, closed: &[(String, super::PeriodRecord)]) -> Vec<Entry> {
    closed
        .iter()
        .filter_map(|(k, r)| Entry::carry(r, quota, k))
        .collect()
}
