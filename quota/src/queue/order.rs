//! The admission order of a quota's queue (docs/queueing.md §3): higher
//! PriorityClass first, then first come first served, ties by reference so
//! the order never depends on how the queue was stored. The policy says
//! which entries, when they do not fit, block everything behind them.
//!
//! With `submitterFairness` (docs/queueing.md §11, "Between the
//! submitters of one quota") entries of equal priority go by their
//! submitter's decayed usage (`crate::submitters`), lowest first, before
//! first come first served, under best-effort FIFO for those not yet
//! aged (the aged keep their place ahead, by age, so aging bounds every
//! wait). Strict FIFO has no aging and takes no fairness.

use crate::fair::Share;
use crate::object::queue::Queued;
use crate::object::queueing::{Order, QueuePolicy};
use crate::submitters::Usages;
use std::borrow::Borrow;
use std::cmp::{Ordering, Reverse};

/// An entry's place in the admission order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index into the entries given to `order`.
    pub index: usize,
    /// If it does not fit, nothing behind it is admitted: always under
    /// strict FIFO; under best-effort once it has waited `agingSeconds`.
    pub blocks: bool,
}

/// The sort key: priority descending, then submitted, then reference.
pub fn key(q: &Queued) -> (Reverse<i32>, i64, &str, &str) {
    (
        Reverse(q.priority),
        q.submitted_ms,
        q.workload_ref.as_str(),
        q.uid.as_str(),
    )
}

/// Whether `q` has waited long enough at `now_ms` to block under `policy`.
pub fn aged(q: &Queued, policy: &QueuePolicy, now_ms: i64) -> bool {
    match policy.order {
        Order::StrictFifo => true,
        Order::BestEffortFifo { .. } => now_ms.saturating_sub(q.submitted_ms) >= policy.aging_ms(),
    }
}

/// The admission order of `entries` at `now_ms`, first first.
pub fn order(entries: &[Queued], policy: &QueuePolicy, now_ms: i64) -> Vec<Slot> {
    order_by(entries, policy, now_ms, None)
}

/// `order`, with the submitters' decayed `usages` when the policy orders
/// by them (`submitterFairness` with best-effort FIFO; ignored
/// otherwise). Within one priority the aged entries first, by `since` as
/// without it, then the rest by usage (a submitter without usage at the
/// median, `Usages::share`), then `since`.
///
/// Priority always comes first, and one submitter's entries keep their
/// first-come order among themselves.
pub fn order_by<Q: Borrow<Queued>>(
    entries: &[Q],
    policy: &QueuePolicy,
    now_ms: i64,
    usages: Option<&Usages>,
) -> Vec<Slot> {
    let aged: Vec<bool> = entries
        .iter()
        .map(|q| aged(q.borrow(), policy, now_ms))
        .collect();
    // Only under best-effort FIFO, whose aging bounds how long fairness
    // may pass an entry (`QueuePolicy::validate` refuses it with strict
    // FIFO; a policy that bypassed that is first come, first served).
    let usages = usages.filter(|_| policy.orders_by_submitters());
    let shares: Vec<Share> = match usages {
        Some(u) => entries
            .iter()
            .map(|q| u.share(q.borrow().submitted_by.as_deref()))
            .collect(),
        None => Vec::new(),
    };
    let fair = |a: usize, b: usize| -> Ordering {
        if shares.is_empty() {
            return Ordering::Equal;
        }
        aged[b].cmp(&aged[a]).then_with(|| {
            if aged[a] {
                Ordering::Equal
            } else {
                shares[a].cmp(&shares[b])
            }
        })
    };
    let mut idx: Vec<usize> = (0..entries.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (entries[a].borrow(), entries[b].borrow());
        Reverse(x.priority)
            .cmp(&Reverse(y.priority))
            .then_with(|| fair(a, b))
            .then_with(|| key(x).cmp(&key(y)))
    });
    idx.into_iter()
        .map(|index| Slot {
            index,
            blocks: aged[index],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str, priority: i32, at: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ns/{name}"),
            uid: String::new(),
            priority,
            priority_classes: Vec::new(),
            submitted_ms: at,
            pod_sets: vec![].into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        }
    }

    #[test]
    fn priority_then_first_come_then_reference() {
        let e = [q("c", 0, 5), q("b", 10, 9), q("a", 0, 5), q("d", 0, 1)];
        let o = order(&e, &QueuePolicy::queue(), 10);
        let names: Vec<&str> = o.iter().map(|s| &e[s.index].workload_ref[13..]).collect();
        assert_eq!(names, ["b", "d", "a", "c"]);
        assert!(o.iter().all(|s| s.blocks), "strict: every head blocks");
    }

    fn by(name: &str, user: &str, priority: i32, at: i64) -> Queued {
        Queued {
            submitted_by: Some(user.into()),
            ..q(name, priority, at)
        }
    }

    fn usages(pairs: &[(&str, u128)]) -> Usages {
        Usages::from_decayed(
            pairs
                .iter()
                .map(|(u, v)| (u.to_string(), [("cash/gpu".to_string(), *v)].into()))
                .collect(),
        )
    }

    fn names(e: &[Queued], o: &[Slot]) -> Vec<String> {
        o.iter()
            .map(|s| e[s.index].workload_ref[13..].to_string())
            .collect()
    }

    fn fair() -> QueuePolicy {
        QueuePolicy {
            order: Order::BestEffortFifo { aging_seconds: 60 },
            submitter_half_life_days: Some(7),
            ..QueuePolicy::queue()
        }
    }

    #[test]
    fn equal_priorities_go_by_the_submitters_decayed_usage_then_age() {
        let fair = fair();
        let e = [
            by("a1", "alice", 0, 1),
            by("b1", "bob", 0, 5),
            by("a2", "alice", 0, 2),
            by("c1", "carol", 0, 9),
            by("hi", "alice", 10, 10),
        ];
        let u = usages(&[("alice", 30), ("bob", 10), ("dave", 1)]);
        let o = order_by(&e, &fair, 10, Some(&u));
        // Priority first; among equals dave 1/41, then bob 10/41 and carol
        // (no usage: the median, bob's) by age, then alice; each
        // submitter's own in first-come order. Nothing aged: none blocks.
        assert_eq!(names(&e, &o), ["hi", "b1", "c1", "a1", "a2"]);
        assert!(o.iter().all(|s| !s.blocks));
        // Without the policy, or without usages, first come first served;
        // and strict FIFO takes no fairness (nothing ages to bound it).
        let plain = ["hi", "a1", "a2", "b1", "c1"];
        let strict = QueuePolicy {
            order: Order::StrictFifo,
            ..fair
        };
        for p in [&QueuePolicy::queue(), &strict] {
            assert_eq!(names(&e, &order_by(&e, p, 10, Some(&u))), plain);
        }
        assert_eq!(names(&e, &order_by(&e, &fair, 10, None)), plain);
    }

    #[test]
    fn a_stream_of_fresh_identities_never_passes_the_light_or_the_aged() {
        let p = fair();
        let mut e = vec![by("heavy", "alice", 0, 0), by("light", "bob", 0, 30_000)];
        for i in 0..20 {
            e.push(by(&format!("new{i:02}"), &format!("sa-{i}"), 0, 31_000 + i));
        }
        let u = usages(&[("alice", 90), ("bob", 5), ("carol", 40)]);
        // Fresh identities rank at the median (carol's): after bob, before
        // alice.
        let o = names(&e, &order_by(&e, &p, 59_999, Some(&u)));
        assert_eq!(o[0], "light");
        assert_eq!(o.last().map(String::as_str), Some("heavy"));
        // Once alice's entry has aged, it heads and blocks, whoever comes.
        let o = order_by(&e, &p, 60_000, Some(&u));
        assert_eq!(names(&e, &o)[0], "heavy");
        assert!(o[0].blocks);
    }

    #[test]
    fn under_best_effort_the_aged_keep_their_place_ahead() {
        let p = fair();
        let e = [
            by("old", "alice", 0, 0),
            by("a2", "alice", 0, 50_000),
            by("b1", "bob", 0, 55_000),
        ];
        let u = usages(&[("alice", 30), ("bob", 10)]);
        // Nothing aged yet: bob first.
        assert_eq!(
            names(&e, &order_by(&e, &p, 59_999, Some(&u))),
            ["b1", "old", "a2"]
        );
        // alice's old entry has aged: it heads and blocks.
        let o = order_by(&e, &p, 60_000, Some(&u));
        assert_eq!(names(&e, &o), ["old", "b1", "a2"]);
        assert_eq!(
            o.iter().map(|s| s.blocks).collect::<Vec<_>>(),
            [true, false, false]
        );
    }

    #[test]
    fn best_effort_blocks_only_once_aged() {
        let p = QueuePolicy {
            order: Order::BestEffortFifo { aging_seconds: 60 },
            ..QueuePolicy::queue()
        };
        let e = [q("old", 0, 0), q("new", 0, 30_000)];
        let blocks = |now| -> Vec<bool> { order(&e, &p, now).iter().map(|s| s.blocks).collect() };
        assert_eq!(blocks(59_999), [false, false]);
        assert_eq!(blocks(60_000), [true, false]);
        assert_eq!(blocks(90_000), [true, true]);
    }
}
