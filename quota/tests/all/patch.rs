//! The status merge patch (`quota::patch`): applied to the document the old
//! status serialises to, it gives exactly the document the new one
//! serialises to, and it carries only what changed.

use proptest::collection::btree_map;
use proptest::prelude::*;
use quota::object::budgets::Reservation;
use quota::object::loans::Loan;
use quota::object::marks::{Action, Mark, Origin};
use quota::object::refunds::Refunded;
use quota::object::transfers::Hold;
use quota::object::{Carve, Charge, HpaCharge, QuotaStatus};
use quota::patch::{apply_merge_patch, derived_patch, status_merge_patch};
use quota::workload::PodSet;
use quota::{KeyConfig, Quantity, QuotaSpec, ResourceList};
use serde_json::Value;

/// Few names and few values, so two statuses drawn apart share entries,
/// some equal and some changed.
fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c/x", "d~1"]).prop_map(str::to_string)
}

fn time() -> impl Strategy<Value = String> {
    (0u8..3).prop_map(|h| format!("2026-11-2{h}T10:00:00.000Z"))
}

fn resources() -> impl Strategy<Value = ResourceList> {
    btree_map(
        prop::sample::select(vec![
            "requests.nvidia.com/gpu",
            "pods",
            "cash/requests.nvidia.com/gpu",
        ])
        .prop_map(str::to_string),
        (0i64..3).prop_map(Quantity::from_units),
        0..3,
    )
}

fn charge() -> impl Strategy<Value = Charge> {
    (
        prop::collection::vec((1i64..3, resources()), 1..3),
        prop::option::of((1i64..3).prop_map(|m| HpaCharge {
            name: "h".into(),
            max_replicas: m,
        })),
        time(),
        prop::sample::select(vec!["", "u1", "u2"]),
        prop::option::of(time()),
    )
        .prop_map(|(sets, hpa, since, uid, admitted)| Charge {
            pod_sets: sets
                .into_iter()
                .map(|(count, per_pod)| PodSet {
                    name: "main".into(),
                    count,
                    per_pod,
                    qos: None,
                })
                .collect(),
            hpa,
            since,
            uid: uid.into(),
            admitted,
        })
}

fn status() -> impl Strategy<Value = QuotaStatus> {
    let totals = (
        resources(),
        resources(),
        resources(),
        prop::option::of(time()),
        resources(),
        resources(),
    );
    let ledgers = (
        btree_map(name(), charge(), 0..4),
        btree_map(
            name(),
            (resources(), time(), prop::sample::select(vec!["", "r1"])).prop_map(
                |(hard, since, uid)| Carve {
                    hard,
                    since,
                    uid: uid.into(),
                },
            ),
            0..3,
        ),
        btree_map(name(), (0u8..3).prop_map(|n| format!("{n}000")), 0..3),
        btree_map(
            name(),
            prop::sample::select(vec!["ann", "bo"]).prop_map(str::to_string),
            0..3,
        ),
        btree_map(name(), time(), 0..2),
    );
    let rest = (
        btree_map(
            name(),
            (resources(), time(), prop::option::of(time()), 0u64..3).prop_map(
                |(amount, since, raised, generation)| Loan {
                    amount,
                    since,
                    raised: raised.unwrap_or_default(),
                    generation,
                },
            ),
            0..3,
        ),
        btree_map(
            name(),
            (
                time(),
                prop::option::of(1i64..3),
                resources(),
                any::<bool>(),
            )
                .prop_map(|(t, scale, frees, preempt)| Mark {
                    action: scale.map_or(Action::Suspend, Action::ScaleTo),
                    frees,
                    marked: t.clone(),
                    due: t,
                    origin: if preempt {
                        Origin::Preempt
                    } else {
                        Origin::Borrow
                    },
                }),
            0..2,
        ),
        btree_map(
            name(),
            (btree_map(name(), resources(), 0..2), time()).prop_map(|(children, since)| Hold {
                children,
                since,
                decision: None,
            }),
            0..2,
        ),
        btree_map(
            name(),
            (time(), 0u8..3).prop_map(|(t, n)| Refunded {
                mark: t.clone(),
                at: t.clone(),
                from: t.clone(),
                to: t,
                amounts: [("cash/requests.nvidia.com/gpu".to_string(), format!("{n}"))].into(),
            }),
            0..2,
        ),
        btree_map(
            name(),
            btree_map(
                name(),
                (0i128..3, 0i64..3).prop_map(|(n, ms)| Reservation {
                    reserved: n * 1000,
                    used: n,
                    at_ms: ms,
                    run_ms: 3_600_000,
                }),
                0..2,
            ),
            0..2,
        ),
    );
    // The cluster ledger's outbox: absent, or a window of 0–2 entries and
    // a refund taken since riding along (none, or one).
    let outbox = prop::option::of(
        (0i64..3, 0usize..3, 0i128..5).prop_map(|(from, n, amount)| {
            let entry =
                |workload: String, amount, reason, note: &str| quota::object::budgets::Entry {
                    quota: "q".into(),
                    key: "cash/requests.nvidia.com/gpu".into(),
                    workload,
                    namespace: "ns".into(),
                    model: None,
                    qos: None,
                    user: None,
                    start_ms: from * 60_000,
                    end_ms: (from + 1) * 60_000,
                    amount,
                    reason,
                    note: note.into(),
                };
            quota::object::budgets::Outbox {
                from_ms: from * 60_000,
                to_ms: (from + 1) * 60_000,
                entries: (0..n)
                    .map(|i| {
                        let w = format!("batch/Job/ns/w{i}");
                        entry(w, amount, quota::object::budgets::Reason::Accrual, "")
                    })
                    .collect(),
                extra: (0..n / 2)
                    .map(|_| {
                        let w = "batch/Job/ns/stopped".to_string();
                        entry(
                            w,
                            -amount,
                            quota::object::budgets::Reason::Refund,
                            "reclaim mark",
                        )
                    })
                    .collect(),
            }
        }),
    );
    (totals, ledgers, rest, outbox).prop_map(
        |(
            (hard, used, self_used, last_reconcile_time, lent, borrowed),
            (workloads, children, cash_accrued, users, exhausted),
            (loans, reclaim, transfers, refunds, reservations),
            ledger_outbox,
        )| QuotaStatus {
            // Released DELETEs drawn from the submitters: none, some, many.
            deleted: users
                .iter()
                .map(|(w, u)| {
                    let d = quota::object::deleted::Deleted {
                        uid: format!("uid-{u}"),
                        at: "2026-11-21T10:00:00.000Z".into(),
                    };
                    (w.clone(), d)
                })
                .collect(),
            // Counters drawn from what varies with them: zero and not.
            loan_generation: loans.values().map(|l| l.generation).max().unwrap_or(0),
            loan_fence: cash_accrued.len() as u64,
            hard,
            used,
            self_used,
            last_reconcile_time,
            lent,
            borrowed,
            workloads: workloads.into(),
            children,
            cash_accrued,
            users,
            exhausted,
            loans,
            reclaim,
            transfers,
            refunds,
            reservations,
            ledger_outbox,
            ..Default::default()
        },
    )
}

/// A status drawn apart from `old`, or `old` with some members redrawn.
fn pair() -> impl Strategy<Value = (QuotaStatus, QuotaStatus)> {
    (status(), status(), prop::collection::vec(any::<bool>(), 8)).prop_map(|(old, other, keep)| {
        let mut new = old.clone();
        if keep[0] {
            new.workloads = other.workloads.clone();
        }
        if keep[1] {
            new.used = other.used.clone();
            new.self_used = other.self_used.clone();
        }
        if keep[2] {
            new.children = other.children.clone();
            new.users = other.users.clone();
        }
        if keep[3] {
            new.last_reconcile_time = other.last_reconcile_time.clone();
            new.cash_accrued = other.cash_accrued.clone();
        }
        if keep[4] {
            new.loans = other.loans.clone();
            new.lent = other.lent.clone();
            new.borrowed = other.borrowed.clone();
        }
        if keep[5] {
            new.reclaim = other.reclaim.clone();
            new.transfers = other.transfers.clone();
        }
        if keep[6] {
            new.refunds = other.refunds.clone();
            new.reservations = other.reservations.clone();
            new.exhausted = other.exhausted.clone();
            new.ledger_outbox = other.ledger_outbox.clone();
        }
        if keep[7] {
            new = other;
        }
        (old, new)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Merged over the old document, the patch leaves the new one, member
    /// for member (a member left out when empty is left out), and it reads
    /// back as the new status.
    #[test]
    fn the_patch_turns_the_old_document_into_the_new((old, new) in pair()) {
        let mut doc = serde_json::to_value(&old).unwrap();
        let patch = status_merge_patch(&old, &new);
        apply_merge_patch(&mut doc, &Value::Object(patch.clone()));
        prop_assert_eq!(&doc, &serde_json::to_value(&new).unwrap());
        let back: QuotaStatus = serde_json::from_value(doc).unwrap();
        prop_assert_eq!(back, new.clone());
        // Nothing changed, nothing to write.
        prop_assert_eq!(patch.is_empty(), old == new);
    }
}

fn one_card_charge(uid: &str) -> Charge {
    Charge {
        pod_sets: vec![PodSet {
            name: "main".into(),
            count: 1,
            per_pod: [(
                "requests.nvidia.com/gpu".to_string(),
                Quantity::from_units(1),
            )]
            .into(),
            qos: None,
        }],
        hpa: None,
        since: "2026-11-21T10:00:00.000Z".into(),
        uid: uid.into(),
        admitted: None,
    }
}

/// A hot quota's write: one charge of sixty changed, the patch carries
/// that one (its changed members only) and the totals, not the others.
#[test]
fn a_charge_changed_among_many_is_all_the_patch_carries_of_them() {
    let mut old = QuotaStatus::default();
    for i in 0..60 {
        old.workloads
            .insert(format!("apps/Deployment/ml/w{i}"), one_card_charge("u0"));
    }
    old.used
        .insert("requests.nvidia.com/gpu".into(), Quantity::from_units(60));
    let mut new = old.clone();
    new.workloads
        .get_mut("apps/Deployment/ml/w7")
        .unwrap()
        .pod_sets[0]
        .count = 2;
    new.workloads.get_mut("apps/Deployment/ml/w7").unwrap().uid = "u1".into();
    new.used
        .insert("requests.nvidia.com/gpu".into(), Quantity::from_units(61));
    let patch = Value::Object(status_merge_patch(&old, &new));
    assert_eq!(
        patch,
        serde_json::json!({
            "used": {"requests.nvidia.com/gpu": "61"},
            "workloads": {"apps/Deployment/ml/w7": {
                "podSets": [{"name": "main", "count": 2, "perPod": {"requests.nvidia.com/gpu": "1"}}],
                "uid": "u1"}}
        })
    );
}

/// The summaries for people replace whatever is stored: a member the new
/// summary lacks, and a balance of a cash key the spec no longer has,
/// are removed rather than left behind.
#[test]
fn the_summaries_replace_what_is_stored() {
    let spec = QuotaSpec {
        hard: [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(16),
        )]
        .into(),
        ..Default::default()
    };
    let mut status = QuotaStatus::default();
    status.refresh(&spec);
    let stale: std::collections::BTreeMap<String, String> = [(
        "cash/requests.nvidia.com/gpu".to_string(),
        "0 of 10 card-hours used, 10 left".to_string(),
    )]
    .into();
    let mut stored = serde_json::json!({
        "summary": {"gpu": "3/16", "borrowing": "requests.nvidia.com/gpu=2", "reclaimPending": 1, "queued": 0},
        "readable": stale,
    });
    let in_use = status.self_used.clone();
    let patch = derived_patch(&spec, &status, &in_use, &KeyConfig::default(), &[&stale]);
    apply_merge_patch(&mut stored, &Value::Object(patch));
    let (summary, readable) =
        quota::summary::summarize(&spec, &status, &in_use, &KeyConfig::default());
    assert_eq!(stored["summary"], serde_json::to_value(&summary).unwrap());
    assert!(readable.is_empty());
    assert!(
        stored
            .get("readable")
            .is_none_or(|r| r == &serde_json::json!({})),
        "{stored}"
    );
}
