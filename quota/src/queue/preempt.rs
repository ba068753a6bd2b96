//! Preemption (docs/queueing.md §3, policy `preemption: LowerPriority`):
//! the queue's head, waiting for quota, may take capacity back from
//! running batch work of lower priority in the same quota. The plan goes
//! through the existing reclaim path — `reclaim::reconcile_marks` warns the
//! owners, waits the grace period, then suspends — so a preemption is as
//! visible and as reversible as a reclaim.
//!
//! Only whole workloads that can be suspended (`Stop::Suspend`) and are
//! not online services are taken, in `reclaim::order_key` order (already
//! marked first, lowest priority, newest); the set is minimal: dropping
//! any victim would leave the head short. If even every eligible workload
//! would not make room, nothing is taken.

use super::admit::{self, BudgetView, Decision, Pool};
use super::policy::{Preemption, QueuePolicy};
use super::reason::Waiting;
use super::Queued;
use crate::reclaim::{self, Action, Candidate, Stop, Victim};
use crate::resources::{self, ResourceList};

/// What preemption would do for one queued entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Preempt {
    /// It fits without taking anything.
    Fits,
    /// Suspend these (through reclaim marks) and it fits.
    Reclaim(Vec<Victim>),
    /// Even every eligible workload would not make room; take nothing.
    Cannot,
}

fn usage(c: &Candidate) -> ResourceList {
    let mut out = ResourceList::new();
    for s in &c.pod_sets {
        resources::add_into(&mut out, &s.usage(s.count));
    }
    out
}

/// Whether freeing `frees` from `pool` leaves nothing of `short` short.
fn covers(short: &ResourceList, frees: &ResourceList) -> bool {
    short.iter().all(|(k, s)| resources::get(frees, k) >= *s)
}

/// The minimal set of `running` workloads of this quota to suspend so that
/// `entry` fits `pool` (quota only: preemption does not refill a budget,
/// and cannot help a spent cash key).
pub fn plan(entry: &Queued, pool: &Pool, running: &[Candidate]) -> Preempt {
    let need = entry.usage();
    if pool.fits(&need).is_ok() {
        return Preempt::Fits;
    }
    let short = pool.short(&need);
    if short.is_empty() {
        return Preempt::Cannot; // short of something freeing pods cannot give
    }
    let mut eligible: Vec<&Candidate> = running
        .iter()
        .filter(|c| c.priority < entry.priority && !c.online && c.stop == Stop::Suspend)
        .collect();
    eligible.sort_by(|a, b| reclaim::order_key(a).cmp(&reclaim::order_key(b)));

    // Greedy in reclaim order, taking only what frees a key still short.
    let mut chosen: Vec<(&Candidate, ResourceList)> = Vec::new();
    let mut freed = ResourceList::new();
    for c in eligible {
        if covers(&short, &freed) {
            break;
        }
        let frees = usage(c);
        let helps = short
            .iter()
            .any(|(k, s)| resources::get(&freed, k) < *s && resources::get(&frees, k).nanos() > 0);
        if helps {
            resources::add_into(&mut freed, &frees);
            chosen.push((c, frees));
        }
    }
    if !covers(&short, &freed) {
        return Preempt::Cannot;
    }
    // Minimal: drop, last taken first, any victim the others cover without.
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let without = resources::diff(&freed, &chosen[i].1);
        if covers(&short, &without) {
            freed = without;
            chosen.remove(i);
        }
    }
    Preempt::Reclaim(
        chosen
            .into_iter()
            .map(|(c, frees)| Victim {
                quota: pool.quota().name().to_string(),
                workload_ref: c.workload_ref.clone(),
                action: Action::Suspend,
                frees,
            })
            .collect(),
    )
}

/// The queue's preemption this round, under `policy`: after the round's
/// admissions, the first entry in admission order that waits for quota
/// and whose plan can make room, with its victims. None when the policy
/// never preempts or no waiting entry can be helped. One head at a time,
/// so two entries never count on the same victims.
pub fn for_queue(
    queue: &[Queued],
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
    running: &[Candidate],
) -> Option<(String, Vec<Victim>)> {
    if policy.preemption == Preemption::Never {
        return None;
    }
    let (decisions, after, _) = admit::round(queue, pool, budgets, policy, now_ms);
    let head = decisions.iter().find_map(|d| match d {
        Decision::Wait(w) if w.reason.waiting() == Waiting::Quota => Some(&w.workload_ref),
        _ => None,
    })?;
    let entry = queue.iter().find(|q| &q.workload_ref == head)?;
    match plan(entry, &after, running) {
        Preempt::Reclaim(v) if !v.is_empty() => Some((head.clone(), v)),
        _ => None,
    }
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

    fn gpus(n: i64) -> ResourceList {
        [(GPU.to_string(), Quantity::from_units(n))].into()
    }
    fn sets(n: i64) -> Vec<PodSet> {
        vec![PodSet {
            name: "main".into(),
            count: n,
            per_pod: gpus(1),
            qos: None,
        }]
    }
    fn running(name: &str, priority: i32, created: i64, n: i64) -> Candidate {
        Candidate {
            workload_ref: format!("batch/Job/ns/{name}"),
            stop: Stop::Suspend,
            priority,
            online: false,
            created_ms: T0 + created,
            pod_sets: sets(n),
            min_replicas: None,
            marked: false,
        }
    }
    fn setup(hard: i64, run: &[Candidate]) -> Pool {
        let mut q = Quota::new(
            "team",
            QuotaSpec {
                budgets: Default::default(),
                parent: String::new(),
                hard: gpus(hard),
                max: ResourceList::new(),
                queueing: Default::default(),
            },
        );
        for c in run {
            let charge = crate::object::Charge {
                pod_sets: c.pod_sets.clone(),
                hpa: None,
                since: crate::time::format_rfc3339(c.created_ms),
                uid: String::new(),
                admitted: None,
            };
            admission::charge(&mut q, &c.workload_ref, charge).unwrap();
        }
        Pool::new(&q, &ResourceList::new())
    }
    fn entry(priority: i32, n: i64) -> Queued {
        Queued {
            workload_ref: "batch/Job/ns/urgent".into(),
            uid: String::new(),
            priority,
            priority_classes: Vec::new(),
            submitted_ms: T0,
            pod_sets: sets(n),
            run_ms: None,
            submitted_by: None,
        }
    }
    fn names(p: &Preempt) -> Vec<&str> {
        match p {
            Preempt::Reclaim(v) => v.iter().map(|v| &v.workload_ref[13..]).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn takes_lowest_priority_newest_first_and_only_what_is_needed() {
        let mut online = running("online", 0, 9, 4);
        online.online = true;
        let run = [
            running("old", 0, 0, 2),
            running("new", 0, 5, 2),
            running("mid", 5, 1, 2),
            running("peer", 10, 2, 2),
            online,
        ];
        let pool = setup(12, &run);
        // 12 used, 3 needed: new (2) then old (2) of priority 0; mid not needed.
        assert_eq!(names(&plan(&entry(10, 3), &pool, &run)), ["new", "old"]);
        // Equal priority is never taken, nor online services: 6 at most.
        assert_eq!(plan(&entry(10, 7), &pool, &run), Preempt::Cannot);
        assert_eq!(plan(&entry(0, 1), &pool, &run), Preempt::Cannot);
    }

    #[test]
    fn the_set_is_minimal() {
        // new (1) is taken first but then old (4) alone suffices.
        let run = [running("old", 0, 0, 4), running("new", 0, 5, 1)];
        let pool = setup(5, &run);
        assert_eq!(names(&plan(&entry(1, 4), &pool, &run)), ["old"]);
    }

    #[test]
    fn nothing_when_it_fits_or_the_policy_never_preempts() {
        let run = [running("a", 0, 0, 2)];
        let pool = setup(4, &run);
        assert_eq!(plan(&entry(1, 2), &pool, &run), Preempt::Fits);
        let q = [entry(1, 4)];
        let p = QueuePolicy::queue();
        assert_eq!(for_queue(&q, &pool, &[], &p, T0, &run), None);
        let p = QueuePolicy {
            preemption: Preemption::LowerPriority,
            ..p
        };
        let (head, v) = for_queue(&q, &pool, &[], &p, T0, &run).unwrap();
        assert_eq!(head, "batch/Job/ns/urgent");
        assert_eq!(v[0].frees, gpus(2));
        assert_eq!(v[0].action, Action::Suspend);
    }

    #[test]
    fn a_budget_wait_is_never_a_reason_to_preempt() {
        use crate::budget::{self, BudgetState, PriceList, WithoutRunTime};
        use crate::cash::Prices;
        // 2 of 4 cards used by low work: the urgent job (2) fits the quota
        // but its card-hour budget is spent. It waits for the budget, and
        // taking cards from anyone would not help.
        let run = [running("low", 0, 0, 2)];
        let pool = setup(4, &run);
        let state = BudgetState {
            quota: "team".into(),
            key: format!("cash/{GPU}"),
            budget: budget::from_quantity(Quantity::from_units(1)),
            spent: budget::from_quantity(Quantity::from_units(1)),
            ..Default::default()
        };
        let (qos, prices) = (Prices::default(), PriceList::default());
        let view = BudgetView {
            state: &state,
            target: GPU,
            without_run_time: WithoutRunTime::ReserveDefault {
                horizon_seconds: 7200,
            },
            qos: &qos,
            prices: &prices,
        };
        let p = QueuePolicy {
            preemption: Preemption::LowerPriority,
            ..QueuePolicy::queue()
        };
        let mut e = entry(10, 2);
        e.run_ms = Some(3_600_000);
        let q = [e];
        let (d, _, _) = admit::round(&q, &pool, std::slice::from_ref(&view), &p, T0);
        assert!(
            matches!(&d[0], Decision::Wait(w) if w.reason.waiting() == Waiting::Budget),
            "{d:?}"
        );
        assert_eq!(
            for_queue(&q, &pool, std::slice::from_ref(&view), &p, T0, &run),
            None
        );
        // Without the budget the same job would take the low work's cards
        // if it needed them: 4 asked, 2 free.
        let mut big = entry(10, 4);
        big.run_ms = Some(3_600_000);
        assert!(for_queue(&[big], &pool, &[], &p, T0, &run).is_some());
    }
}
