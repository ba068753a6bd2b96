//! The admission order of a quota's queue (docs/queueing.md §3): higher
//! PriorityClass first, then first come first served, ties by reference so
//! the order never depends on how the queue was stored. The policy says
//! which entries, when they do not fit, block everything behind them.

use super::policy::{Order, QueuePolicy};
use super::Queued;
use std::cmp::Reverse;

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
    let mut idx: Vec<usize> = (0..entries.len()).collect();
    idx.sort_by(|&a, &b| key(&entries[a]).cmp(&key(&entries[b])));
    idx.into_iter()
        .map(|index| Slot {
            index,
            blocks: aged(&entries[index], policy, now_ms),
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
            pod_sets: vec![],
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
