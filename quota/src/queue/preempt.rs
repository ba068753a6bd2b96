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
use super::reason::Reason;
use crate::object::marks::Action;
use crate::object::queue::Queued;
use crate::object::queue::Waiting;
use crate::object::queueing::{Preemption, QueuePolicy};
use crate::reclaim::{self, Candidate, Stop, Victim};
use crate::resources::{self, ResourceList};

/// Whether `running` holds anything preemption could ever take for an
/// entry of `queue`: a workload it may suspend (`Stop::Suspend`, not an
/// online service) of a priority below the highest queued. When not,
/// every entry's `plan` is `Fits` or `Cannot`, and `weigh` is `Nothing`
/// whatever the round: asked first, in time linear in the two lists, so a
/// queue whose running work is all of its own priority or above (a
/// backlog of equals behind work that outranks it) is never walked for a
/// preemption that cannot be.
pub fn may_take<Q: std::borrow::Borrow<Queued>>(queue: &[Q], running: &[Candidate]) -> bool {
    let Some(top) = queue.iter().map(|q| q.borrow().priority).max() else {
        return false;
    };
    running
        .iter()
        .any(|c| c.priority < top && !c.online && c.stop == Stop::Suspend)
}

/// Whether preemptions for `q`'s queue are under way: a reclaim mark of
/// its own (`Origin::Preempt`) waits its grace or its suspend. The step
/// after each round makes, cancels or carries them out.
pub fn under_way(q: &crate::object::Quota) -> bool {
    q.status
        .reclaim
        .values()
        .any(|m| m.origin == crate::object::marks::Origin::Preempt)
}

/// Whether a round would admit none of `arrivals` — entries queued since
/// a round that admitted nothing, on `pool` with no more room than that
/// round had (its quota unchanged, its room to borrow no larger) — so that
/// a round run for them alone would admit nothing too (docs/queueing.md
/// §12, "Rounds that would change nothing"): each needs more than is free
/// now, and none could take anything from `running`, the quota's running
/// work where its policy preempts (`None`: it never does). What was
/// queued before waited on that round's room, which has not grown, and an
/// arrival that does not fit alone is admitted by no round; one that fits
/// now or may preempt is not judged here: its round runs.
pub fn arrivals_wait<Q: std::borrow::Borrow<Queued>>(
    arrivals: &[Q],
    pool: &Pool,
    running: Option<&[Candidate]>,
) -> bool {
    arrivals.iter().all(|a| {
        let a = a.borrow();
        pool.fits(a.usage()).is_err()
            && running.is_none_or(|r| !may_take(std::slice::from_ref(a), r))
    })
}

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
    super::room::fits_on(short, frees)
}

/// The minimal set of `running` workloads of this quota to suspend so that
/// `entry` fits `pool` (quota only: preemption does not refill a budget,
/// and cannot help a spent cash key).
pub fn plan(entry: &Queued, pool: &Pool, running: &[Candidate]) -> Preempt {
    let need = entry.usage();
    if pool.fits(need).is_ok() {
        return Preempt::Fits;
    }
    let short = pool.short(need);
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

/// What the queue's preemption does this round (`weigh`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Weighed {
    /// Nothing to take: the policy never preempts, no entry waits for
    /// quota, or no eligible set of running work makes room.
    Nothing,
    /// Suspend `victims`, and the round after admits `head`.
    Reclaim { head: String, victims: Vec<Victim> },
    /// The room could be made, but `head` would still not be admitted:
    /// `after` says why (its card-hour budget, a reservation cap, an entry
    /// ahead that blocks it). Nothing is taken: suspending running work
    /// for a job that would go on waiting only stops work.
    Futile { head: String, after: Reason },
}

impl Weighed {
    /// The head and its victims, when something is to be taken.
    pub fn reclaim(self) -> Option<(String, Vec<Victim>)> {
        match self {
            Weighed::Reclaim { head, victims } => Some((head, victims)),
            _ => None,
        }
    }
}

/// The queue's preemption this round, under `policy`: after the round's
/// admissions, the first entry in admission order that waits for quota,
/// and whose plan can make room, with its victims — but only when the
/// same round over the pool with the victims' usage freed **admits** it
/// (budgets, reservation caps and the order weighed exactly as the next
/// real round will). One head at a time, so two entries never count on
/// the same victims.
///
/// `made`: the round (`admit::round`) of these very `queue`, `pool`,
/// `budgets`, `policy` and `now_ms` — its decisions and the pool it
/// leaves — when the caller has just made it (a queue round), so the
/// queue is not walked once more for the same answer; None, and it is
/// made here.
pub fn weigh(
    queue: &[Queued],
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
    running: &[Candidate],
    made: Option<(&[Decision], &Pool)>,
) -> Weighed {
    if policy.preemption == Preemption::Never || !may_take(queue, running) {
        return Weighed::Nothing;
    }
    let own;
    let (decisions, after) = match made {
        Some(m) => m,
        None => {
            own = admit::round(queue, pool, budgets, policy, now_ms);
            (own.0.as_slice(), &own.1)
        }
    };
    let Some(head) = decisions.iter().find_map(|d| match d {
        Decision::Wait(w) if w.reason.waiting() == Waiting::Quota => Some(&w.workload_ref),
        _ => None,
    }) else {
        return Weighed::Nothing;
    };
    let Some(entry) = queue.iter().find(|q| &q.workload_ref == head) else {
        return Weighed::Nothing;
    };
    let victims = match plan(entry, after, running) {
        Preempt::Reclaim(v) if !v.is_empty() => v,
        _ => return Weighed::Nothing,
    };
    // The round as it would run once the victims are suspended.
    let mut freed = pool.clone();
    for v in &victims {
        freed.release(&v.frees);
    }
    let (again, _, _) = admit::round(queue, &freed, budgets, policy, now_ms);
    match again.iter().find(|d| d.workload_ref() == head.as_str()) {
        Some(Decision::Admit(_)) => Weighed::Reclaim {
            head: head.clone(),
            victims,
        },
        Some(Decision::Wait(w)) => Weighed::Futile {
            head: head.clone(),
            after: w.reason.clone(),
        },
        None => Weighed::Nothing,
    }
}

/// `weigh`'s head and victims, when it takes any.
pub fn for_queue(
    queue: &[Queued],
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
    running: &[Candidate],
) -> Option<(String, Vec<Victim>)> {
    weigh(queue, pool, budgets, policy, now_ms, running, None).reclaim()
}

/// What the head's reason adds when preemption would not help it
/// (`Weighed::Futile`): which wait remains, so a person sees it waits for
/// its budget as well as for quota.
pub fn futile_words(after: &Reason) -> String {
    format!("no lower-priority work is preempted for it: with the room made, it still {after}")
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
            idle: false,
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
                fair_sharing: Default::default(),
                idle: None,
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
            pod_sets: sets(n).into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
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

    /// Arrivals after an idle round wait only where none fits now and
    /// none outranks suspendable running work (where the policy preempts).
    #[test]
    fn arrivals_wait_only_where_none_fits_and_none_may_preempt() {
        let mut online = running("online", 1, 9, 2);
        online.online = true;
        let run = [running("low", 5, 0, 4), running("peer", 10, 1, 4), online];
        let pool = setup(12, &run);
        // 10 used of 12: 2 free.
        assert!(!arrivals_wait(&[entry(0, 2)], &pool, None), "fits now");
        assert!(arrivals_wait(&[entry(0, 3)], &pool, None), "never preempts");
        assert!(arrivals_wait(&[entry(5, 3)], &pool, Some(&run)), "an equal");
        assert!(
            !arrivals_wait(&[entry(6, 3)], &pool, Some(&run)),
            "outranks low"
        );
        assert!(
            arrivals_wait(&[entry(0, 3), entry(5, 9)], &pool, Some(&run)),
            "no arrival fits or outranks a suspendable one"
        );
        assert!(
            !arrivals_wait(&[entry(0, 3), entry(0, 1)], &pool, Some(&run)),
            "one of them fits"
        );
        let empty: [Queued; 0] = [];
        assert!(arrivals_wait(&empty, &pool, Some(&run)));
        // Online services and work that cannot be suspended are never taken.
        let mut stays = running("stays", 0, 0, 4);
        stays.stop = Stop::Never;
        let kept = [online_only(), stays];
        assert!(arrivals_wait(
            &[entry(9, 3)],
            &setup(12, &kept),
            Some(&kept)
        ));
    }

    fn online_only() -> Candidate {
        let mut c = running("svc", 0, 0, 6);
        c.online = true;
        c
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
        use crate::budget::{self, BudgetState, PriceList};
        use crate::cash::QosMultipliers;
        use crate::object::budgets::WithoutRunTime;
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
        let (qos, prices) = (QosMultipliers::default(), PriceList::default());
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

    #[test]
    fn a_head_short_of_budget_after_preemption_takes_nothing_and_says_why() {
        use crate::budget::{self, BudgetState, PriceList};
        use crate::cash::QosMultipliers;
        use crate::object::budgets::WithoutRunTime;
        // All 4 cards run low work; the urgent job needs 2 for an hour
        // (2 card-hours) and its budget has 1 left: freeing the cards
        // would leave it waiting for card-hours.
        let run = [running("low", 0, 0, 4)];
        let pool = setup(4, &run);
        let state = BudgetState {
            quota: "team".into(),
            key: format!("cash/{GPU}"),
            budget: budget::from_quantity(Quantity::from_units(10)),
            spent: budget::from_quantity(Quantity::from_units(9)),
            ..Default::default()
        };
        let (qos, prices) = (QosMultipliers::default(), PriceList::default());
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
        let q = [e.clone()];
        let w = weigh(&q, &pool, std::slice::from_ref(&view), &p, T0, &run, None);
        assert_eq!(given_its_round(&q, &pool, &view, &p, &run), w);
        let Weighed::Futile { head, after } = &w else {
            panic!("{w:?}")
        };
        assert_eq!(head, "batch/Job/ns/urgent");
        assert_eq!(after.waiting(), Waiting::Budget);
        assert_eq!(
            futile_words(after),
            "no lower-priority work is preempted for it: with the room made, it still waits for \
             card-hours of cash/requests.nvidia.com/gpu: needs 2, 1 left"
        );
        // With the budget topped up, the same head preempts.
        let topped = BudgetState {
            budget: budget::from_quantity(Quantity::from_units(20)),
            ..state.clone()
        };
        let view = BudgetView {
            state: &topped,
            ..view
        };
        let w = weigh(&q, &pool, std::slice::from_ref(&view), &p, T0, &run, None);
        assert!(matches!(w, Weighed::Reclaim { .. }));
        assert_eq!(given_its_round(&q, &pool, &view, &p, &run), w);
    }

    #[test]
    fn only_suspendable_batch_work_below_the_highest_queued_can_be_taken() {
        let q = [entry(50, 1), entry(100, 1)];
        // All running work at the top priority or above: nothing to take.
        let equals = [running("a", 100, 0, 1), running("b", 200, 0, 1)];
        assert!(!may_take(&q, &equals));
        // Below it, but an online service, or work that cannot be suspended.
        let mut online = running("svc", 50, 0, 1);
        online.online = true;
        let mut fixed = running("fixed", 50, 0, 1);
        fixed.stop = Stop::Never;
        assert!(!may_take(&q, &[online.clone(), fixed.clone()]));
        // Suspendable batch work below the highest queued: it may be taken.
        assert!(may_take(&q, &[online, fixed, running("low", 99, 0, 1)]));
        // An empty queue takes nothing.
        assert!(!may_take::<Queued>(&[], &[running("low", 0, 0, 1)]));
    }

    proptest::proptest! {
        /// Where `may_take` says no, no entry's plan takes anything and
        /// `weigh` is `Nothing`: the check only skips work whose answer
        /// is known.
        #[test]
        fn nothing_is_taken_where_may_take_says_no(
            hard in 1i64..8,
            run in proptest::collection::vec((0i32..4, 1i64..4, proptest::bool::ANY, proptest::bool::ANY), 0..5),
            queued in proptest::collection::vec((0i32..4, 1i64..6), 1..5),
        ) {
            let run: Vec<Candidate> = run
                .iter()
                .enumerate()
                .map(|(i, (p, n, online, stops))| {
                    let mut c = running(&format!("r{i}"), *p, i as i64, *n);
                    c.online = *online;
                    if !*stops {
                        c.stop = Stop::Never;
                    }
                    c
                })
                .collect();
            let total: i64 = run.iter().map(|c| c.pod_sets[0].count).sum();
            let pool = setup(hard.max(total), &run);
            let q: Vec<Queued> = queued
                .iter()
                .enumerate()
                .map(|(i, (p, n))| Queued {
                    workload_ref: format!("batch/Job/ns/q{i}"),
                    submitted_ms: T0 + i as i64,
                    ..entry(*p, *n)
                })
                .collect();
            let policy = QueuePolicy {
                preemption: Preemption::LowerPriority,
                ..QueuePolicy::queue()
            };
            if !may_take(&q, &run) {
                for e in &q {
                    proptest::prop_assert!(!matches!(plan(e, &pool, &run), Preempt::Reclaim(_)));
                }
                proptest::prop_assert_eq!(weigh(&q, &pool, &[], &policy, T0, &run, None), Weighed::Nothing);
            }
        }
    }

    /// `weigh` given the round a queue round made of the same inputs:
    /// what it says when it makes that round itself.
    fn given_its_round(
        q: &[Queued],
        pool: &Pool,
        view: &BudgetView<'_>,
        p: &QueuePolicy,
        run: &[Candidate],
    ) -> Weighed {
        let views = std::slice::from_ref(view);
        let (decisions, after, _) = admit::round(q, pool, views, p, T0);
        weigh(q, pool, views, p, T0, run, Some((&decisions, &after)))
    }
}
