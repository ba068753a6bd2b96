//! The budget ledger (docs/budgets.md §6, §9): the entries each accrual
//! writes add up to what it adds to `status.cashAccrued`, to the acc, in
//! both modes, across price changes and period boundaries; and a report's
//! total is the ledger's sum, whatever it groups by.

use proptest::prelude::*;
use quota::budget::ledger::{charge_entries, run_entries};
use quota::budget::price_list::{accrue_weighted, totals};
use quota::budget::report::{report, Bucket, Dimension, ReportSpec};
use quota::budget::{from_cash_accrued, PriceList, PriceVersion, Weight};
use quota::cash::{Interval, QosMultipliers};
use quota::object::budgets::BudgetPolicy;
use quota::object::budgets::{Entry, Reason};
use quota::object::{Charge, Quota, QuotaSpec};
use quota::usage::QosClass;
use quota::workload::PodSet;
use quota::{Quantity, ResourceList};
use std::collections::BTreeMap;

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";
const H: i64 = 3_600_000;
/// 2026-01-01T00:00:00Z
const T0: i64 = 1_767_225_600_000;

fn list() -> impl Strategy<Value = PriceList> {
    prop::collection::vec((1..10 * H, 0i128..5000), 0..4).prop_map(|vs| {
        let mut at = T0 - H;
        PriceList {
            versions: vs
                .into_iter()
                .map(|(gap, a100)| {
                    at += gap;
                    PriceVersion {
                        effective_ms: at,
                        weights: [("nvidia.com/gpu.A100".to_string(), Weight(a100))].into(),
                        default_weight: Weight(1000),
                        quality: None,
                    }
                })
                .collect(),
            currency: None,
        }
    })
}

fn qos() -> impl Strategy<Value = Option<QosClass>> {
    prop_oneof![
        Just(None),
        Just(Some(QosClass::Guaranteed)),
        Just(Some(QosClass::Burstable)),
    ]
}

fn multipliers() -> QosMultipliers {
    QosMultipliers {
        guaranteed: 1000,
        burstable: 700,
        best_effort: 333,
    }
}

/// (micro-units per pod, count, model, qos, start offset)
type Set = (i64, i64, Option<&'static str>, Option<QosClass>, i64);

fn sets() -> impl Strategy<Value = Vec<Vec<Set>>> {
    let set = (
        1i64..8_000_000,
        1i64..5,
        prop_oneof![Just(None), Just(Some("A100")), Just(Some("H100"))],
        qos(),
        -H..30 * H,
    );
    prop::collection::vec(prop::collection::vec(set, 1..3), 1..5)
}

fn usage(micro: i64, model: Option<&str>) -> ResourceList {
    let q = Quantity::from_nanos(micro as i128 * 1000);
    let mut u: ResourceList = [(GPU.to_string(), q)].into();
    if let Some(m) = model {
        u.insert(format!("{GPU}.{m}"), q);
    }
    u
}

fn spec(period: bool) -> QuotaSpec {
    let mut s = QuotaSpec {
        hard: [(CASH.to_string(), Quantity::from_units(1_000_000))].into(),
        ..Default::default()
    };
    if period {
        let p: BudgetPolicy = serde_json::from_value(serde_json::json!({
            "period": {"kind": "weekly", "startsOn": "thursday", "utcOffsetMinutes": 330}
        }))
        .unwrap();
        s.budgets.insert(CASH.to_string(), p);
    }
    s
}

fn quota_with(workloads: &[Vec<Set>], spec: &QuotaSpec) -> Quota {
    let mut q = Quota::new("q", spec.clone());
    q.status.last_reconcile_time = Some(quota::time::format_rfc3339(T0));
    for (i, w) in workloads.iter().enumerate() {
        let wref = format!("batch/Job/ml/w{i}");
        let since = T0 + w[0].4.max(0);
        q.status.workloads.insert(
            wref.clone(),
            Charge {
                pod_sets: w
                    .iter()
                    .enumerate()
                    .map(|(j, s)| PodSet {
                        name: format!("s{j}"),
                        count: s.1,
                        per_pod: usage(s.0, s.2),
                        qos: s.3,
                    })
                    .collect(),
                hpa: None,
                since: quota::time::format_rfc3339(since),
                uid: String::new(),
                admitted: None,
            },
        );
        if i.is_multiple_of(2) {
            q.status.users.insert(wref, format!("user{i}"));
        }
    }
    q
}

/// What the status says was spent, in acc: this period's `cashAccrued`
/// plus what the closed periods spent.
fn spent_per_status(q: &Quota) -> i128 {
    let closed: i128 = q
        .status
        .budgets
        .get(CASH)
        .map(|b| b.closed.iter().map(|r| r.spent).sum())
        .unwrap_or(0);
    from_cash_accrued(q.status.accrued(CASH)) + closed
}

proptest! {
    /// Standalone: accruing in any number of windows, across price
    /// changes and weekly boundaries at +05:30, the entries add up to
    /// what the status accrued, to the acc; each carries its workload,
    /// namespace, model, QoS class and user, and crosses no boundary.
    #[test]
    fn standalone_entries_equal_what_status_accrued(
        w in sets(), list in list(), cuts in prop::collection::vec(1..20 * H, 1..4), period in any::<bool>(),
    ) {
        let spec = spec(period);
        let mut q = quota_with(&w, &spec);
        let m = multipliers();
        let mut at = T0;
        for c in &cuts {
            at += c;
            q.status.accrue_ledger_priced(&spec, at, &m, &list);
        }
        let entries = &q.status.ledger.0;
        prop_assert_eq!(totals(entries).get(CASH).copied().unwrap_or(0), spent_per_status(&q));
        for e in entries {
            prop_assert_eq!(e.reason, Reason::Accrual);
            prop_assert!(e.amount > 0 && e.start_ms < e.end_ms && e.end_ms <= at);
            prop_assert_eq!(e.namespace.as_str(), "ml");
            let i: usize = e.workload.trim_start_matches("batch/Job/ml/w").parse().unwrap();
            prop_assert_eq!(e.user.clone(), i.is_multiple_of(2).then(|| format!("user{i}")));
            if period {
                let p = &spec.budgets[CASH].period;
                prop_assert_eq!(p.at(e.start_ms).start_ms, p.at(e.end_ms - 1).start_ms);
            }
        }
        // Also what `charge_entries` gives for the whole stretch at once.
        let whole = quota_with(&w, &spec);
        let once = charge_entries("q", &spec, &whole.status.workloads, &whole.status.users, T0, at, &m, &list);
        prop_assert_eq!(totals(&once), totals(entries));
    }

    /// Cluster mode: the entries of pod runs are what `accrue_weighted`
    /// adds to the status, × 1000 (its per-mille unit), to the acc.
    #[test]
    fn run_entries_equal_the_controllers_accrual(
        w in sets(), list in list(), len in 1..40 * H, ends in prop::collection::vec(prop::option::of(1..30 * H), 8),
    ) {
        let m = multipliers();
        let mut usages = Vec::new();
        for (i, wl) in w.iter().enumerate() {
            for (j, s) in wl.iter().enumerate() {
                let u = usage(s.0 * s.1, s.2);
                let end = ends[(i + j) % ends.len()].map(|l| T0 + s.4 + l);
                usages.push((format!("batch/Job/ml/w{i}"), u, s.3, T0 + s.4, end));
            }
        }
        let runs: Vec<(&str, Interval<'_>)> = usages.iter().map(|(w, u, q, s, e)| {
            (w.as_str(), Interval { usage: u, qos: *q, start_ms: *s, end_ms: *e })
        }).collect();
        let ivs: Vec<Interval<'_>> = runs.iter().map(|(_, iv)| iv.clone()).collect();
        let keys = vec![(CASH.to_string(), GPU.to_string())];
        let status = accrue_weighted(&ivs, &keys, T0, T0 + len, &m, &list).get(CASH).copied().unwrap_or(0);
        let entries = run_entries("q", &spec(true), &runs, &BTreeMap::new(), T0, T0 + len, &m, &list);
        prop_assert_eq!(totals(&entries).get(CASH).copied().unwrap_or(0), from_cash_accrued(status));
    }

    /// A report over a range that holds every entry totals the ledger's
    /// sum, to the acc, whatever it groups by and buckets in; and rows
    /// add up to the total.
    #[test]
    fn a_reports_total_equals_the_ledger(
        w in sets(), list in list(), len in 1..60 * H, by in 0usize..9, bucket in 0usize..4, off in -720i32..840,
    ) {
        let spec_q = spec(true);
        let mut q = quota_with(&w, &spec_q);
        q.status.accrue_ledger_priced(&spec_q, T0 + len, &multipliers(), &list);
        let entries: Vec<Entry> = q.status.ledger.0.iter().cloned().map(|mut e| { e.quota = "q".into(); e }).collect();
        let dims = [Dimension::Quota, Dimension::Child, Dimension::Workload, Dimension::Namespace,
            Dimension::Model, Dimension::Qos, Dimension::User, Dimension::Key, Dimension::Reason];
        let buckets = [Bucket::None, Bucket::Day, Bucket::Week { starts_on: quota::object::period::Weekday::Sunday }, Bucket::Month];
        let parents: BTreeMap<String, String> = [("q".to_string(), "root".to_string()), ("root".to_string(), String::new())].into();
        let r = report(&entries, &ReportSpec {
            from_ms: T0 - 40 * 24 * H, to_ms: T0 + 80 * 24 * H, by: dims[by], bucket: buckets[bucket],
            utc_offset_minutes: off, subtree: Some("root".into()), key: None,
            reasons: vec![Reason::Accrual, Reason::Refund],
        }, &parents).unwrap();
        let ledger: i128 = entries.iter().map(|e| e.amount).sum();
        prop_assert_eq!(r.total, ledger);
        prop_assert_eq!(r.rows.iter().map(|x| x.amount).sum::<i128>(), ledger);
        prop_assert_eq!(ledger, spent_per_status(&q));
    }
}

#[test]
fn no_accrual_no_entries_and_the_first_window_only_starts_the_clock() {
    let spec = spec(false);
    let mut q = quota_with(&[vec![(1_000_000, 1, None, None, 0)]], &spec);
    q.status.last_reconcile_time = None;
    q.status
        .accrue_ledger_priced(&spec, T0, &multipliers(), &PriceList::default());
    assert!(q.status.ledger.0.is_empty());
    // One card for one hour at face value: 3.6e21 acc, one entry.
    q.status
        .accrue_ledger_priced(&spec, T0 + H, &multipliers(), &PriceList::default());
    assert_eq!(q.status.ledger.0.len(), 1);
    assert_eq!(q.status.ledger.0[0].amount, 3_600_000_000_000_000_000_000);
    assert_eq!(spent_per_status(&q), 3_600_000_000_000_000_000_000);
    // The entries are never part of what is stored or compared.
    let json = serde_json::to_string(&q.status).unwrap();
    assert!(!json.contains("ledger"), "{json}");
    let back: quota::QuotaStatus = serde_json::from_str(&json).unwrap();
    assert_eq!(back, q.status);
}
