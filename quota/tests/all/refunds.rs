//! Invariants of what the controller enforces of budgets
//! (docs/budgets.md §4, `budget::enforce`): a refund never exceeds what
//! the run accrued in the refunded stretch, nor what the period spent; a
//! reclaim mark is refunded at most once, however often it is offered; a
//! stretch of a run is refunded once, however many marks stop it; a
//! workload is overdue exactly from its declared end.

use proptest::prelude::*;
use quota::budget::enforce::{
    overdue, refund_due, refund_due_after, refunded_total, refunded_until, spent, take_refund,
    Running,
};
use quota::budget::report::share;
use quota::object::budgets::{Entry, Reason, RefundPolicy};
use quota::object::QuotaStatus;
use std::collections::BTreeMap;

const KEYS: [&str; 2] = ["cash/requests.nvidia.com/gpu", "cash/requests.cpu"];
const H: i64 = 3_600_000;

fn policy() -> impl Strategy<Value = RefundPolicy> {
    prop_oneof![
        Just(RefundPolicy::None),
        Just(RefundPolicy::WholeRun),
        (1i64..=86_400).prop_map(|s| RefundPolicy::LastStretch {
            checkpoint_every_seconds: s
        }),
    ]
}

/// Accrual entries of one workload's run: pieces of `[0, 10 h)` on either
/// key, for a model or none, of any size (acc).
fn accruals() -> impl Strategy<Value = Vec<Entry>> {
    prop::collection::vec(
        (
            0usize..2,
            0i64..10 * H,
            1i64..10 * H,
            0i128..1_000_000_000_000_000_000_000i128,
            prop::option::of(prop_oneof![Just("A100"), Just("T4")]),
        ),
        0..8,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(k, start, len, amount, model)| Entry {
                quota: "q".into(),
                key: KEYS[k].into(),
                workload: "batch/Job/ns/train".into(),
                namespace: "ns".into(),
                model: model.map(str::to_string),
                qos: None,
                user: None,
                start_ms: start,
                end_ms: start + len,
                amount,
                reason: Reason::Accrual,
                note: String::new(),
            })
            .collect()
    })
}

fn sum_by_key(entries: &[Entry], from: i64, to: i64) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for e in entries {
        *out.entry(e.key.clone()).or_insert(0) += share(e, from, to);
    }
    out
}

proptest! {
    /// Per key, a refund is at most what the run accrued in its stretch
    /// and at most what the period spent; every entry gives back (< 0).
    #[test]
    fn a_refund_never_exceeds_what_the_run_accrued(
        p in policy(),
        acc in accruals(),
        start in 0i64..H,
        stopped in 0i64..12 * H,
        spent_gpu in 0i128..2_000_000_000_000_000_000_000i128,
        spent_cpu in 0i128..2_000_000_000_000_000_000_000i128,
    ) {
        let spent = BTreeMap::from([
            (KEYS[0].to_string(), spent_gpu),
            (KEYS[1].to_string(), spent_cpu),
        ]);
        let r = refund_due(&p, start, stopped, &acc, &spent, "n");
        let run = sum_by_key(&acc, start, stopped.max(start));
        for (key, given) in refunded_total(&r) {
            prop_assert!(given > 0);
            prop_assert!(given <= run.get(&key).copied().unwrap_or(0), "{key}: {given} > run");
            prop_assert!(given <= spent[&key], "{key}: {given} > spent");
        }
        for e in &r {
            prop_assert!(e.amount < 0 && e.reason == Reason::Refund);
            prop_assert!(e.start_ms >= start && e.end_ms <= stopped);
        }
        if p == RefundPolicy::None {
            prop_assert!(r.is_empty());
        }
    }

    /// Offering the refund of one mark again — a replica that lost the
    /// race, a retried reconcile — changes nothing; a new mark refunds
    /// again. Spent never goes below zero.
    #[test]
    fn a_mark_is_refunded_at_most_once(
        acc in accruals(),
        stopped in 1i64..12 * H,
        spent_units in 0i128..2_000_000_000_000_000_000i128,
        offers in 1usize..5,
    ) {
        let mut st = QuotaStatus::default();
        for k in KEYS {
            st.add_accrued(k, spent_units);
        }
        let before = st.clone();
        let mut given = Vec::new();
        for i in 0..offers {
            let due = refund_due(&RefundPolicy::WholeRun, 0, stopped, &acc, &spent(&st), "n");
            let taken = take_refund(&mut st, "w", "mark-1", due, 1000 + i as i64);
            if i > 0 {
                prop_assert!(taken.is_empty(), "offer {i} refunded again");
            }
            given.extend(taken);
        }
        let total = refunded_total(&given);
        for k in KEYS {
            let back = total.get(k).copied().unwrap_or(0);
            prop_assert_eq!(st.accrued(k), before.accrued(k) - back / 1000);
            prop_assert!(st.accrued(k) >= 0);
        }
    }

    /// A run stopped by one mark after another — its stop failed and it
    /// was marked again, or a replica deciding on a stale view marked it
    /// anew — gives each stretch back once: every refund starts where the
    /// last one ended, and all of them together never exceed what the run
    /// accrued up to its last stop.
    #[test]
    fn a_stretch_of_a_run_is_refunded_once_whatever_the_marks(
        p in policy(),
        acc in accruals(),
        start in 0i64..H,
        mut stops in prop::collection::vec(0i64..12 * H, 1..5),
        spent_units in 0i128..20_000_000_000_000_000_000i128,
    ) {
        stops.sort_unstable();
        let mut st = QuotaStatus::default();
        for k in KEYS {
            st.add_accrued(k, spent_units);
        }
        let mut given: Vec<Entry> = Vec::new();
        let mut refunded_to = i64::MIN;
        for (i, &stopped) in stops.iter().enumerate() {
            let not_before = refunded_until(&st, "w").unwrap_or(i64::MIN);
            let due = refund_due_after(&p, start, stopped, not_before, &acc, &spent(&st), "n");
            let taken = take_refund(&mut st, "w", &format!("mark-{i}"), due, stopped);
            for e in &taken {
                prop_assert!(e.start_ms >= refunded_to, "mark {i} refunds from {} again (to {refunded_to})", e.start_ms);
                prop_assert!(e.end_ms <= stopped);
            }
            if let Some(end) = taken.iter().map(|e| e.end_ms).max() {
                refunded_to = end;
            }
            given.extend(taken);
        }
        let last = *stops.last().unwrap();
        let run = sum_by_key(&acc, start, last.max(start));
        for (key, back) in refunded_total(&given) {
            prop_assert!(back <= run.get(&key).copied().unwrap_or(0), "{key}: {back} > run");
        }
        for k in KEYS {
            prop_assert!(st.accrued(k) >= 0);
        }
    }

    /// Overdue exactly from `start + run`; the next wake-up is the
    /// earliest end still ahead.
    #[test]
    fn overdue_from_the_declared_end(
        runs in prop::collection::vec((0i64..10 * H, 1i64..10 * H), 0..8),
        now in 0i64..20 * H,
    ) {
        let names: Vec<String> = (0..runs.len()).map(|i| format!("w{i}")).collect();
        let rs: Vec<Running<'_>> = runs
            .iter()
            .zip(&names)
            .map(|(&(start_ms, run_ms), w)| Running { workload: w, start_ms, run_ms })
            .collect();
        let (over, next) = overdue(&rs, now);
        for r in &rs {
            prop_assert_eq!(over.contains(&r.workload), r.start_ms + r.run_ms <= now);
        }
        let ahead = rs.iter().map(|r| r.start_ms + r.run_ms).filter(|d| *d > now).min();
        prop_assert_eq!(next, ahead);
    }
}
