//! The ledger entries each accrual writes (docs/budgets.md §6, §9 "the
//! ledger"). Both modes accrue `status.cashAccrued` in windows
//! `[lastReconcileTime, now)`; the same window, over the same holdings at
//! the same prices, is written to the ledger as `report::Entry`s, one per
//! cash key, workload, model, QoS class, user and piece (`accrue_priced`).
//! Because accrual is exact integer arithmetic, the entries of a window
//! add up to what the window added to `cashAccrued`, to the acc (× 1000
//! of its per-mille unit) whenever quantities are whole micro-units.

use super::price_list::{accrue_priced, Holding, PriceList};
use crate::cash::{Interval, QosMultipliers};
use crate::keys::cash_target;
use crate::object::budgets::Entry;
use crate::object::budgets::Outbox;
use crate::object::period::Period;
use crate::object::QuotaSpec;
use crate::quantity::Quantity;
use crate::resources::ResourceList;
use crate::time;
use crate::workload::WorkloadRef;
use std::collections::BTreeMap;

impl Outbox {
    pub fn bounds(&self) -> (i64, i64) {
        (self.from_ms, self.to_ms)
    }

    /// What tells two outboxes of one quota apart: its window, and how
    /// many extra entries rode along (a write only ever adds them).
    pub fn key(&self) -> (i64, i64, usize) {
        (self.from_ms, self.to_ms, self.extra.len())
    }

    /// Whether it carries an accrual window (else only `extra`).
    pub fn has_window(&self) -> bool {
        self.from_ms < self.to_ms
    }

    /// `entries` (a refund's, at `now_ms`) added to the outbox of a status
    /// being written, so they reach the ledger even if the writer stops
    /// right after the write: the next reconcile appends the stored outbox
    /// before it writes over it.
    pub fn carry_extra(outbox: &mut Option<Outbox>, now_ms: i64, entries: Vec<Entry>) {
        if entries.is_empty() {
            return;
        }
        match outbox {
            Some(o) => o.extra.extend(entries),
            None => {
                *outbox = Some(Outbox {
                    from_ms: now_ms,
                    to_ms: now_ms,
                    entries: Vec::new(),
                    extra: entries,
                })
            }
        }
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
    workloads: &crate::object::Workloads,
    users: &BTreeMap<String, String>,
    from_ms: i64,
    to_ms: i64,
    qos: &QosMultipliers,
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
    qos: &QosMultipliers,
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
    qos: &QosMultipliers,
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

/// The top-up entries of the scheduled grants a write added
/// (`BudgetPolicy::scheduled_top_up`, source grant): one instant per cash
/// key whose current period got its scheduled mark between `old` and
/// `new`, at the mark's time. The same write gives the same entry, so
/// writing it again is a no-op.
pub fn scheduled_entries(
    quota: &str,
    old: &crate::object::QuotaStatus,
    new: &crate::object::QuotaStatus,
) -> Vec<Entry> {
    let mut out = Vec::new();
    for (key, p) in &new.budgets {
        let Some(period) = p.scheduled.as_ref() else {
            continue;
        };
        if old.budgets.get(key).and_then(|o| o.scheduled.as_ref()) == Some(period) {
            continue;
        }
        let mark = p
            .top_up_log
            .iter()
            .find(|m| m.id == super::topup::SCHEDULED && m.period.as_ref() == Some(period));
        if let Some(m) = mark.filter(|m| m.amount != 0) {
            out.push(Entry {
                quota: quota.to_string(),
                key: key.clone(),
                workload: String::new(),
                namespace: String::new(),
                model: None,
                qos: None,
                user: None,
                start_ms: m.at,
                end_ms: m.at,
                amount: m.amount,
                reason: crate::object::budgets::Reason::TopUp,
                note: format!("scheduled top-up, period from {period}"),
            });
        }
    }
    out
}

/// The carry entries of the periods a write closed (`periods::new_records`).
pub fn carry_entries(
    quota: &str,
    closed: &[(String, crate::object::period::PeriodRecord)],
) -> Vec<Entry> {
    closed
        .iter()
        .filter_map(|(k, r)| Entry::carry(r, quota, k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::QuotaStatus;
    use crate::time::parse_rfc3339;

    const CASH: &str = "cash/requests.nvidia.com/gpu";

    fn spec_with(top_up: serde_json::Value) -> QuotaSpec {
        serde_json::from_value(serde_json::json!({
            "hard": {"requests.nvidia.com/gpu": "4", CASH: "100"},
            "budgets": {CASH: {
                "period": {"kind": "monthly", "anchorDay": 1},
                "scheduledTopUp": top_up,
            }},
        }))
        .unwrap()
    }

    /// A scheduled grant is budget added: the write that opens its period
    /// leaves a top-up entry, once per period.
    #[test]
    fn scheduled_grants_leave_top_up_entries() {
        let spec = spec_with(serde_json::json!({"amount": "5", "source": "grant"}));
        let nov = parse_rfc3339("2026-11-20T00:00:00Z").unwrap();
        let dec = parse_rfc3339("2026-12-01T00:00:00Z").unwrap();
        let mut old = QuotaStatus::default();
        super::super::periods::sync(&spec, &mut old, nov);
        let first = scheduled_entries("q", &QuotaStatus::default(), &old);
        assert_eq!(first.len(), 1, "{old:?}");
        assert_eq!(first[0].reason, crate::object::budgets::Reason::TopUp);
        assert_eq!(
            first[0].amount,
            super::super::from_quantity(Quantity::from_units(5))
        );
        // The same period again: nothing new.
        let mut same = old.clone();
        super::super::periods::sync(&spec, &mut same, nov + 3_600_000);
        assert!(scheduled_entries("q", &old, &same).is_empty());
        // The next period: its own grant, at its start.
        let mut next = old.clone();
        super::super::periods::accrue_in_periods(&spec, &mut next, nov, dec + 1000, |_, _| {
            BTreeMap::new()
        });
        let second = scheduled_entries("q", &old, &next);
        assert_eq!(second.len(), 1, "{next:?}");
        assert_eq!(second[0].start_ms, dec);
        assert_ne!(first[0], second[0]);
        // A scheduled top-up from the parent is a transfer (its entries
        // are the transfer's): none here.
        let parent = spec_with(serde_json::json!({"amount": "5", "source": "parent"}));
        let mut p = QuotaStatus::default();
        super::super::periods::sync(&parent, &mut p, nov);
        assert!(scheduled_entries("q", &QuotaStatus::default(), &p).is_empty());
    }
}
