//! Safe admission as the server runs it (`budget::reservations`): decide, charge
//! and write the reservation together; accrue the ledger as time passes;
//! release at the end. Under any interleaving of admissions (retries
//! included), time and releases, with every workload stopped at its
//! declared run time, what is spent plus what open reservations still hold
//! never exceeds the budget, and the reservations never exceed the cap.

use proptest::prelude::*;
use quota::admission;
use quota::budget::reservations::{self, RunDecl};
use quota::budget::{from_quantity, PriceList};
use quota::cash::QosMultipliers;
use quota::object::budgets::{BudgetPolicy, WithoutRunTime};
use quota::object::{Charge, Quota, QuotaSpec};
use quota::quantity::Quantity;
use quota::time::format_rfc3339;
use quota::workload::PodSet;
use std::collections::BTreeMap;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const GPU: &str = "requests.nvidia.com/gpu";
const MIN: i64 = 60_000;

#[derive(Clone, Debug)]
enum Op {
    /// Workload `w` asks `cards` for `minutes` (None: declares none).
    Admit {
        w: u8,
        cards: i64,
        minutes: Option<i64>,
    },
    /// Time passes.
    Wait { minutes: i64 },
    /// Workload `w` ends early.
    Release { w: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 1i64..5, proptest::option::weighted(0.8, 1i64..600))
            .prop_map(|(w, cards, minutes)| Op::Admit { w, cards, minutes }),
        3 => (1i64..300).prop_map(|minutes| Op::Wait { minutes }),
        1 => (0u8..12).prop_map(|w| Op::Release { w }),
    ]
}

fn quota(budget: i64, cap: Option<i64>, without: WithoutRunTime) -> Quota {
    Quota::new(
        "q",
        QuotaSpec {
            hard: [
                (CASH.to_string(), Quantity::from_units(budget)),
                (GPU.to_string(), Quantity::from_units(1000)),
            ]
            .into(),
            budgets: [(
                CASH.to_string(),
                BudgetPolicy {
                    without_run_time: without,
                    reservation_cap: cap.map(Quantity::from_units),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        },
    )
}

fn wref(w: u8) -> String {
    format!("batch/Job/ml/w{w}")
}

/// As the service: accrue to now, decide, charge, write the reservation.
fn admit(q: &mut Quota, w: u8, cards: i64, run: Option<i64>, now: i64) -> bool {
    let spec = q.spec.clone();
    q.status
        .accrue_ledger(&spec, now, &QosMultipliers::default());
    let wref = wref(w);
    let t = format_rfc3339(now);
    let new = Charge {
        pod_sets: vec![PodSet {
            name: "main".into(),
            count: cards,
            per_pod: [(GPU.to_string(), Quantity::from_units(1))].into(),
            qos: None,
        }],
        hpa: None,
        since: t.clone(),
        uid: String::new(),
        admitted: Some(t),
    };
    let old = q.status.workloads.get(&wref).cloned();
    let run = RunDecl::Object(Ok(run));
    let Ok(held) = reservations::decide(
        q,
        &wref,
        old.as_ref(),
        &new,
        &run,
        now,
        &QosMultipliers::default(),
        &PriceList::default(),
    ) else {
        return false;
    };
    if admission::charge(q, &wref, new).is_err() {
        return false;
    }
    reservations::apply(&mut q.status, &wref, held);
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn spent_and_reserved_never_exceed_the_budget(
        budget in 1i64..200,
        cap in proptest::option::of(1i64..150),
        default in proptest::option::of(60i64..3600),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        // Every workload reserves (a declared run time or the default
        // horizon), so every spender is bounded by its reservation.
        let horizon = default.unwrap_or(600);
        let mut q = quota(budget, cap, WithoutRunTime::ReserveDefault { horizon_seconds: horizon });
        let mut now = 0i64;
        q.status.last_reconcile_time = Some(format_rfc3339(now));
        // When each admitted workload must be stopped (its deadline).
        let mut ends: BTreeMap<u8, i64> = BTreeMap::new();
        let available = from_quantity(Quantity::from_units(budget));
        for op in ops {
            match op {
                Op::Admit { w, cards, minutes } => {
                    let run = minutes.map(|m| m * MIN);
                    if admit(&mut q, w, cards, run, now) {
                        // It stops at the end of the run it reserved for
                        // (a Job's activeDeadlineSeconds, from its start).
                        let r = &q.status.reservations[CASH][&wref(w)];
                        ends.insert(w, r.at_ms + r.run_ms);
                    }
                }
                Op::Wait { minutes } => {
                    let target = now + minutes * MIN;
                    // Workloads stop at their deadline (Kubernetes enforces
                    // activeDeadlineSeconds): accrue to it, then release.
                    while let Some((&w, &end)) = ends.iter().min_by_key(|(_, e)| **e) {
                        if end > target {
                            break;
                        }
                        let spec = q.spec.clone();
                        q.status.accrue_ledger(&spec, end.max(now), &QosMultipliers::default());
                        now = end.max(now);
                        admission::release(&mut q, &wref(w));
                        ends.remove(&w);
                    }
                    let spec = q.spec.clone();
                    q.status.accrue_ledger(&spec, target, &QosMultipliers::default());
                    now = target;
                }
                Op::Release { w } => {
                    admission::release(&mut q, &wref(w));
                    ends.remove(&w);
                }
            }
            let s = reservations::state_of(&q, CASH);
            let outstanding = s.outstanding();
            prop_assert!(
                s.spent + outstanding <= available,
                "spent {} + held {} > budget {}", s.spent, outstanding, available
            );
            if let Some(c) = cap {
                prop_assert!(outstanding <= from_quantity(Quantity::from_units(c)));
            }
            // A reservation never outlives its charge.
            for w in q.status.reservations.values().flat_map(|m| m.keys()) {
                prop_assert!(q.status.workloads.contains_key(w));
            }
        }
    }
}
