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
use super::policy::QueuePolicy;
use super::Queued;
use crate::resources::ResourceList;
use std::collections::{BTreeMap, BTreeSet};

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
pub fn estimate(
    queue: &[Queued],
    pool: &Pool,
    running: &[Running],
    policy: &QueuePolicy,
    now_ms: i64,
) -> BTreeMap<String, i64> {
    let mut pool = pool.clone();
    let mut waiting: Vec<Queued> = queue.to_vec();
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
        let (decisions, after, _) = admit::round(&waiting, &pool, &[], policy, t);
        pool = after;
        let mut admitted = BTreeSet::new();
        for d in decisions {
            if let Decision::Admit(a) = d {
                admitted.insert(a.workload_ref);
            }
        }
        for w in &admitted {
            starts.insert(w.clone(), t);
        }
        let (gone, rest): (Vec<Queued>, Vec<Queued>) = waiting
            .into_iter()
            .partition(|q| admitted.contains(&q.workload_ref));
        waiting = rest;
        for q in gone {
            if let Some(run) = q.run_ms {
                let end = t.saturating_add(run.max(0));
                let at = ends.partition_point(|e| e.0 <= end);
                ends.insert(at, (end, q.usage()));
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
            }],
            run_ms: run_h.map(|h| h * H),
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
