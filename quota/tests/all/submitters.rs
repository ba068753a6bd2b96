//! Fairness between the submitters of one quota (`quota::submitters`,
//! `queue::order::order_by`): usage halves after each half-life, the order
//! does not depend on the units usage is counted in, and a submitter with
//! no usage goes first among equals.

use proptest::prelude::*;
use quota::object::queue::Queued;
use quota::object::queueing::{Order, QueuePolicy};
use quota::queue::order::{order_by, Slot};
use quota::submitters::{decay, tally, Spent, Usages};
use std::collections::BTreeMap;

const DAY: i64 = 86_400_000;
const USERS: [&str; 4] = ["alice", "bob", "carol", "dave"];

fn entry(i: usize, user: usize, priority: i32, at: i64) -> Queued {
    Queued {
        workload_ref: format!("batch/Job/ns/j{i:03}"),
        uid: format!("u{i}"),
        priority,
        priority_classes: Vec::new(),
        submitted_ms: at,
        pod_sets: vec![].into(),
        run_ms: None,
        submitted_by: (user < USERS.len()).then(|| USERS[user].to_string()),
        preempted: false,
    }
}

fn usages(amounts: &[(usize, u128, u128)], scale: u128) -> Usages {
    let mut by: BTreeMap<String, BTreeMap<String, u128>> = BTreeMap::new();
    for (user, gpu, cpu) in amounts {
        let Some(name) = USERS.get(*user) else {
            continue;
        };
        let keys = by.entry(name.to_string()).or_default();
        for (k, v) in [("cash/gpu", gpu), ("cash/cpu", cpu)] {
            if *v > 0 {
                *keys.entry(k.to_string()).or_default() += v * scale;
            }
        }
    }
    by.retain(|_, k| !k.is_empty());
    Usages::from_decayed(by)
}

fn policy(best_effort: bool) -> QueuePolicy {
    QueuePolicy {
        order: if best_effort {
            Order::BestEffortFifo { aging_seconds: 60 }
        } else {
            Order::StrictFifo
        },
        submitter_half_life_days: Some(7),
        ..QueuePolicy::queue()
    }
}

fn entries() -> impl Strategy<Value = Vec<Queued>> {
    prop::collection::vec((0usize..5, 0i32..3, 0i64..120_000), 1..24).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (u, p, at))| entry(i, u, p, at))
            .collect()
    })
}

fn indices(o: &[Slot]) -> Vec<(usize, bool)> {
    o.iter().map(|s| (s.index, s.blocks)).collect()
}

proptest! {
    #[test]
    fn usage_halves_after_one_half_life(
        amount in -(1i128 << 100)..(1i128 << 100),
        age in 0i64..(400 * DAY),
        days in 1i64..366,
    ) {
        let h = days * DAY;
        // Exactly, for whole half-lives (rounded towards zero).
        prop_assert_eq!(decay(amount, h, h), amount / 2);
        prop_assert_eq!(decay(decay(amount, 0, h), 3 * h, h), amount / 8);
        // For any age, one half-life more halves it (to the float's part in 10^15).
        let now = decay(amount, age, h);
        let later = decay(amount, age + h, h);
        let diff = (later - now / 2).unsigned_abs();
        prop_assert!(diff <= 1 + now.unsigned_abs() / 1_000_000_000_000, "{now} {later}");
        // Never grows with age, never changes sign.
        prop_assert!(later.unsigned_abs() <= now.unsigned_abs());
        prop_assert!(later == 0 || (later < 0) == (amount < 0));
    }

    #[test]
    fn a_tally_decays_as_its_rows_do(
        rows in prop::collection::vec((0usize..4, 0i64..(30 * DAY), 1i128..(1i128 << 80)), 1..20),
        days in 1i64..60,
    ) {
        let h = days * DAY;
        let now = 30 * DAY;
        let spent: Vec<Spent> = rows.iter().map(|(u, at, a)| Spent {
            user: USERS[*u].into(), key: "cash/gpu".into(), start_ms: *at, end_ms: *at, amount: *a,
        }).collect();
        let t0 = tally(&spent, now, h);
        let t1 = tally(&spent, now + h, h);
        for (user, keys) in &t0 {
            let (a, b) = (keys["cash/gpu"], t1[user]["cash/gpu"]);
            prop_assert_eq!(a.raw, b.raw);
            let n = spent.iter().filter(|s| &s.user == user).count() as u128;
            prop_assert!((b.decayed - a.decayed / 2).unsigned_abs() <= n + a.decayed.unsigned_abs() / 1_000_000_000_000);
        }
    }

    #[test]
    fn the_order_is_invariant_to_uniform_scaling(
        e in entries(),
        amounts in prop::collection::vec((0usize..4, 0u128..1_000_000, 0u128..1_000_000), 0..6),
        scale in 1u128..(1u128 << 64),
        best_effort in any::<bool>(),
        now in 0i64..200_000,
    ) {
        let p = policy(best_effort);
        let one = order_by(&e, &p, now, Some(&usages(&amounts, 1)));
        let many = order_by(&e, &p, now, Some(&usages(&amounts, scale)));
        prop_assert_eq!(indices(&one), indices(&many));
    }

    #[test]
    fn among_equals_the_lowest_usage_goes_first_and_the_unknown_at_the_median(
        e in entries(),
        amounts in prop::collection::vec((0usize..4, 1u128..1_000_000, 0u128..10), 0..4),
    ) {
        let p = policy(true);
        let u = usages(&amounts, 1);
        // At 0 nothing has aged: every entry is ordered by usage.
        let o = order_by(&e, &p, 0, Some(&u));
        // A permutation, priority never rising, none blocking yet.
        let mut seen: Vec<usize> = o.iter().map(|s| s.index).collect();
        seen.sort();
        prop_assert_eq!(seen, (0..e.len()).collect::<Vec<_>>());
        prop_assert!(o.iter().all(|s| !s.blocks));
        // A submitter without usage ranks at the median of the known:
        // never below every known one.
        if !u.is_empty() {
            let fresh = u.share(Some("system:serviceaccount:x:never-seen"));
            prop_assert_eq!(fresh, u.median());
            let below = USERS.iter().filter(|n| u.has_usage(Some(n)) && u.share(Some(n)) < fresh).count();
            let above = USERS.iter().filter(|n| u.has_usage(Some(n)) && u.share(Some(n)) > fresh).count();
            prop_assert!(below <= u.len() / 2 && above <= u.len() / 2, "{} {} {}", below, above, u.len());
        }
        for w in o.windows(2) {
            let (a, b) = (&e[w[0].index], &e[w[1].index]);
            prop_assert!(a.priority >= b.priority);
            if a.priority == b.priority {
                let (sa, sb) = (u.share(a.submitted_by.as_deref()), u.share(b.submitted_by.as_deref()));
                // Lowest usage first.
                prop_assert!(sa <= sb);
                // One submitter's own entries in first-come order.
                if a.submitted_by == b.submitted_by {
                    prop_assert!(a.submitted_ms <= b.submitted_ms);
                }
            }
        }
    }

    #[test]
    fn under_best_effort_aging_still_bounds_the_wait(
        e in entries(),
        amounts in prop::collection::vec((0usize..4, 1u128..1_000_000, 0u128..10), 0..4),
        now in 0i64..200_000,
    ) {
        let p = policy(true);
        let o = order_by(&e, &p, now, Some(&usages(&amounts, 1)));
        // Within a priority the aged (blocking) entries are a prefix, in
        // first-come order: fairness reorders only those not yet aged.
        for w in o.windows(2) {
            let (a, b) = (&e[w[0].index], &e[w[1].index]);
            if a.priority == b.priority {
                prop_assert!(w[0].blocks || !w[1].blocks);
                if w[0].blocks && w[1].blocks {
                    prop_assert!(a.submitted_ms <= b.submitted_ms);
                }
            }
        }
    }
}
