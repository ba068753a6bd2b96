//! Estimated starts (docs/queueing.md §5): when would each queued entry be
//! admitted if nothing else arrived, no one finished early, and running
//! work ran to its declared end. A simulation on the same rules as a real
//! round (`admit::round`): release running work at its end time, in time
//! order, and admit what then fits; an admitted entry with a declared run
//! time ends in turn. Budgets are left out: a budget refills by top-ups
//! and periods nobody can foresee, so an estimate is about quota only.
//!
//! An entry gets no estimate when it would start only after work that
//! declares no end (it might run forever) — the estimate never guesses.

use super::admit::{self, Decision, Pool};
use crate::object::queue::Queued;
use crate::object::queueing::QueuePolicy;
use crate::resources::ResourceList;
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// Work that holds part of the pool now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    pub workload_ref: String,
    /// What it holds (its charge's usage; part of the pool's used).
    pub usage: ResourceList,
    /// When it ends at the latest (its start + declared run time), if it
    /// declares one.
    pub ends_ms: Option<i64>,
}

/// Estimated start (epoch ms) per workload reference, for the entries
/// that get one; `now_ms` for those that would be admitted at once.
pub fn estimate<Q: Borrow<Queued>>(
    queue: &[Q],
    pool: &Pool,
    running: &[Running],
    policy: &QueuePolicy,
    now_ms: i64,
) -> BTreeMap<String, i64> {
    let mut pool = pool.clone();
    // Borrowed: each event's round walks what still waits, never a copy.
    let mut waiting: Vec<&Queued> = queue.iter().map(Borrow::borrow).collect();
    // Ends to come, as (time, usage); kept sorted by time, then insertion.
    let mut ends: Vec<(i64, ResourceList)> = running
        .iter()
        .filter_map(|r| Some((r.ends_ms?.max(now_ms), r.usage.clone())))
        .collect();
    ends.sort_by_key(|e| e.0);
    let mut starts = BTreeMap::new();
    let mut t = now_ms;
    loop {
        // Release everything that has ended by t.
        let split = ends.partition_point(|e| e.0 <= t);
        for (_, usage) in ends.drain(..split) {
            pool.release(&usage);
        }
        let (taken, after) = admit::admitted(&waiting, &pool, &[], policy, t);
        pool = after;
        let mut admitted = vec![false; waiting.len()];
        for i in taken {
            admitted[i] = true;
            starts.insert(waiting[i].workload_ref.clone(), t);
        }
        let mut taken = admitted.into_iter();
        let (gone, rest): (Vec<&Queued>, Vec<&Queued>) = waiting
            .into_iter()
            .partition(|_| taken.next() == Some(true));
        waiting = rest;
        for q in gone {
            if let Some(run) = q.run_ms {
                let end = t.saturating_add(run.max(0));
                let at = ends.partition_point(|e| e.0 <= end);
                ends.insert(at, (end, q.usage().clone()));
            }
        }
        if waiting.is_empty() {
            break;
        }
        // Next event: the next end after t. Aging also changes blocking
        // over time, but only towards blocking more: it never admits
        // anything earlier than the next end would.
        match ends.first() {
            Some((next, _)) => t = (*next).max(t),
            None => break,
        }
    }
    starts
}

/// How many entries, from the head in admission order, `for_status`
/// estimates: an estimate is one round per end event, so its cost grows
/// with queue × events (§5); past these the tail gets none.
pub const ESTIMATE_HEAD: usize = 200;

/// The estimates `status.queue` shows after a real round (docs/queueing.md
/// §5): `decisions` are that round's, one per entry of `queue`, in
/// admission order, against `pool` as it stood before the round.
///
/// - Only the first `head` entries in admission order are simulated.
/// - An entry waiting for a budget, and every entry behind it, gets none:
///   a budget refills by top-ups and periods nobody can foresee, and the
///   simulation leaves budgets out, so it would guess.
/// - An entry that can never be admitted gets none.
/// - An estimate at or before `now` for an entry the real round left
///   waiting is dropped: the simulation does not see why (never a guess).
/// - Estimates are rounded up to the whole minute (epoch ms): the page says
///   minutes, and the status is not rewritten for a second's drift.
pub fn for_status(
    queue: &[Queued],
    decisions: &[Decision],
    pool: &Pool,
    running: &[Running],
    policy: &QueuePolicy,
    now_ms: i64,
    head: usize,
) -> BTreeMap<String, i64> {
    use crate::object::queue::Waiting;
    let by_ref: BTreeMap<&str, &Queued> =
        queue.iter().map(|q| (q.workload_ref.as_str(), q)).collect();
    let mut simulated: Vec<&Queued> = Vec::new();
    let mut waiting: Vec<&str> = Vec::new();
    for d in decisions.iter().take(head) {
        let Some(q) = by_ref.get(d.workload_ref()) else {
            continue;
        };
        if let Decision::Wait(w) = d {
            match w.reason.waiting() {
                Waiting::Budget => break,
                Waiting::Never => continue,
                Waiting::Quota | Waiting::Turn => waiting.push(&w.workload_ref),
            }
        }
        simulated.push(q);
    }
    if waiting.is_empty() {
        return BTreeMap::new();
    }
    let starts = estimate(&simulated, pool, running, policy, now_ms);
    const MINUTE: i64 = 60_000;
    waiting
        .into_iter()
        .filter_map(|w| {
            let t = *starts.get(w)?;
            (t > now_ms).then(|| {
                (
                    w.to_string(),
                    t.div_euclid(MINUTE)
                        .saturating_add(i64::from(t.rem_euclid(MINUTE) != 0))
                        .saturating_mul(MINUTE),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission;
    use crate::object::{Quota, QuotaSpec};
    use crate::quantity::Quantity;
    use crate::workload::PodSet;

    const GPU: &str = "requests.nvidia.com/gpu";
    const T0: i64 = 1_800_000_000_000;
    const H: i64 = 3_600_000;

    fn gpus(n: i64) -> ResourceList {
        [(GPU.to_string(), Quantity::from_units(n))].into()
    }
    fn job(name: &str, at: i64, n: i64, run_h: Option<i64>) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ns/{name}"),
            uid: String::new(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: T0 + at,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: n,
                per_pod: gpus(1),
                qos: None,
            }]
            .into(),
            run_ms: run_h.map(|h| h * H),
            submitted_by: None,
            preempted: false,
        }
    }

    #[test]
    fn releases_running_work_at_its_end_and_chains_declared_runs() {
        let mut q = Quota::new(
            "team",
            QuotaSpec {
                budgets: Default::default(),
                parent: String::new(),
                hard: gpus(8),
                max: ResourceList::new(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        let r1 = job("r1", 0, 4, None);
        let r2 = job("r2", 0, 4, None);
        admission::charge(&mut q, &r1.workload_ref, r1.charge(T0)).unwrap();
        admission::charge(&mut q, &r2.workload_ref, r2.charge(T0)).unwrap();
        let running = [
            Running {
                workload_ref: r1.workload_ref.clone(),
                usage: gpus(4),
                ends_ms: Some(T0 + H),
            },
            Running {
                workload_ref: r2.workload_ref.clone(),
                usage: gpus(4),
                ends_ms: Some(T0 + 3 * H),
            },
        ];
        let pool = Pool::new(&q, &ResourceList::new());
        let queue = [
            job("a", 1, 4, Some(1)), // at 1h (r1 ends), runs to 2h
            job("b", 2, 6, Some(1)), // needs r2 gone too: at 3h
            job("c", 3, 2, None),    // behind b (strict): at 3h as well
            job("d", 4, 8, None),    // needs c (no end) gone: never
        ];
        let e = estimate(&queue, &pool, &running, &QueuePolicy::queue(), T0);
        let at = |n: &str| e.get(&format!("batch/Job/ns/{n}")).map(|t| (t - T0) / H);
        assert_eq!(
            [at("a"), at("b"), at("c"), at("d")],
            [Some(1), Some(3), Some(3), None]
        );
    }
}
