//! Queued admission (docs/queueing.md): invariants of a round under
//! arbitrary queues, quotas and budgets, and a Kueue-style day of three
//! teams end to end at the engine's level — each admission written through
//! the same `admission::charge_within` the webhook uses.

use proptest::prelude::*;
use quota::admission;
use quota::budget::{self, BudgetState, PriceList};
use quota::cash::QosMultipliers;
use quota::object::budgets::WithoutRunTime;
use quota::object::queue::{Queued, Waiting};
use quota::object::queueing::{Order, Preemption, QueuePolicy};
use quota::object::{Quota, QuotaSpec};
use quota::quantity::Quantity;
use quota::queue::{self, preempt, BudgetView, Decision, Pool};
use quota::reclaim::{Candidate, Stop};
use quota::resources::{self, ResourceList};
use quota::workload::PodSet;
use std::collections::BTreeMap;

const GPU: &str = "requests.nvidia.com/gpu";
const CPU: &str = "requests.cpu";
const T0: i64 = 1_800_000_000_000;

fn list(gpu: i64, cpu: i64) -> ResourceList {
    [
        (GPU.to_string(), Quantity::from_units(gpu)),
        (CPU.to_string(), Quantity::from_units(cpu)),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_zero())
    .collect()
}

fn quota(name: &str, hard: (i64, i64), max: Option<(i64, i64)>) -> Quota {
    Quota::new(
        name,
        QuotaSpec {
            parent: if max.is_some() {
                "org".into()
            } else {
                String::new()
            },
            hard: list(hard.0, hard.1),
            max: max.map(|m| list(m.0, m.1)).unwrap_or_default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    )
}

fn job(name: &str, priority: i32, at: i64, count: i64, per: (i64, i64)) -> Queued {
    Queued {
        workload_ref: format!("batch/Job/ns/{name}"),
        uid: name.to_string(),
        priority,
        priority_classes: Vec::new(),
        submitted_ms: at,
        pod_sets: vec![PodSet {
            name: "main".into(),
            count,
            per_pod: list(per.0, per.1),
            qos: None,
        }]
        .into(),
        run_ms: None,
        submitted_by: None,
        preempted: false,
    }
}

fn admitted(d: &[Decision]) -> Vec<&queue::Admission> {
    d.iter()
        .filter_map(|d| match d {
            Decision::Admit(a) => Some(a),
            Decision::Wait(_) => None,
        })
        .collect()
}

/// Write the round's admissions the way the controller does: each through
/// the webhook's own charge, against the same limits.
fn apply(q: &mut Quota, limits: &ResourceList, d: &[Decision]) {
    for a in admitted(d) {
        admission::charge_within(q, &a.workload_ref, a.charge.clone(), limits).unwrap_or_else(
            |e| panic!("{} was admitted but its charge fails: {e}", a.workload_ref),
        );
    }
}

fn arb_policy() -> impl Strategy<Value = QueuePolicy> {
    prop_oneof![
        Just(QueuePolicy::queue()),
        (1u64..200).prop_map(|s| QueuePolicy {
            order: Order::BestEffortFifo { aging_seconds: s },
            ..QueuePolicy::queue()
        }),
    ]
}

/// (priority, submitted offset s, count, per-pod gpu, per-pod cpu)
fn arb_queue() -> impl Strategy<Value = Vec<Queued>> {
    prop::collection::vec((0i32..3, 0i64..300, 0i64..5, 0i64..3, 0i64..4), 0..14).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (p, at, n, g, c))| job(&format!("j{i}"), p, T0 + at * 1000, n, (g, c)))
            .collect()
    })
}

/// (hard gpu, hard cpu, borrow extra gpu/cpu or none, running gpu, running cpu)
fn arb_quota() -> impl Strategy<Value = (Quota, ResourceList)> {
    (
        1i64..16,
        1i64..24,
        prop::option::of((0i64..8, 0i64..8)),
        0i64..16,
        0i64..24,
    )
        .prop_map(|(hg, hc, extra, ug, uc)| {
            let max = extra.map(|(eg, ec)| (hg + eg, hc + ec));
            let mut q = quota("team", (hg, hc), max);
            let running = job("running", 0, T0, 1, (ug.min(hg), uc.min(hc)));
            admission::charge(&mut q, &running.workload_ref, running.charge(T0)).unwrap();
            // Borrowers may go up to max (all lent); others to hard.
            let limits = max.map(|(g, c)| list(g, c)).unwrap_or_default();
            (q, limits)
        })
}

fn ceiling(q: &Quota, limits: &ResourceList, key: &str) -> Quantity {
    admission::ceiling(q, key, limits).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn never_over_admitted_and_never_partial(
        (q, limits) in arb_quota(),
        entries in arb_queue(),
        policy in arb_policy(),
        now in 0i64..400,
    ) {
        let now = T0 + now * 1000;
        let pool = Pool::new(&q, &limits);
        let d = queue::next_admissions(&entries, &pool, &[], &policy, now);
        let mut total = q.status.used.clone();
        for a in admitted(&d) {
            let e = entries.iter().find(|e| e.workload_ref == a.workload_ref).unwrap();
            prop_assert_eq!(&a.usage, e.usage(), "admitted whole");
            prop_assert_eq!(&a.charge.pod_sets[..], &e.pod_sets[..]);
            resources::add_into(&mut total, &a.usage);
        }
        for key in [GPU, CPU] {
            prop_assert!(resources::get(&total, key) <= ceiling(&q, &limits, key),
                "{key}: {} over {}", resources::get(&total, key), ceiling(&q, &limits, key));
        }
        // And the webhook's own charge accepts every one of them, in order.
        let mut written = q.clone();
        apply(&mut written, &limits, &d);
    }

    #[test]
    fn the_rest_is_the_queue_minus_the_admitted_in_order(
        (q, limits) in arb_quota(),
        entries in arb_queue(),
        policy in arb_policy(),
    ) {
        let pool = Pool::new(&q, &limits);
        let d = queue::next_admissions(&entries, &pool, &[], &policy, T0 + 100_000);
        prop_assert_eq!(d.len(), entries.len());
        let mut seen: Vec<&str> = d.iter().map(|d| d.workload_ref()).collect();
        seen.sort();
        let mut want: Vec<&str> = entries.iter().map(|e| e.workload_ref.as_str()).collect();
        want.sort();
        prop_assert_eq!(seen, want, "a permutation: nothing lost, nothing doubled");
        let order = queue::order(&entries, &policy, T0 + 100_000);
        let in_order: Vec<&str> = order.iter().map(|s| entries[s.index].workload_ref.as_str()).collect();
        let got: Vec<&str> = d.iter().map(|d| d.workload_ref()).collect();
        prop_assert_eq!(got, in_order);
        let positions: Vec<u32> = d.iter().filter_map(|d| match d {
            Decision::Wait(w) => Some(w.position),
            Decision::Admit(_) => None,
        }).collect();
        prop_assert_eq!(positions.clone(), (1..=positions.len() as u32).collect::<Vec<_>>());
        let s = queue::status(&entries, &d, &BTreeMap::new());
        prop_assert_eq!(s.len(), positions.len());
    }

    /// Preemption weighed against budgets and the order
    /// (docs/queueing.md §6): whenever `weigh` takes running work, the
    /// round over the quota with exactly those workloads released admits
    /// the head it took them for; victims are of lower priority and
    /// suspendable; and when it declines (`Futile`), the head would
    /// still wait with the reason it gives, never for quota alone.
    #[test]
    fn never_preempts_when_the_freed_room_cannot_admit_the_head(
        hard in 2i64..12,
        running in prop::collection::vec((0i32..3, 1i64..5), 0..6),
        entries in prop::collection::vec((0i32..4, 0i64..300, 1i64..6, prop::option::of(1i64..5)), 1..6),
        budget_h in prop::option::of(0i64..40),
        spent_h in 0i64..20,
        best_effort in any::<bool>(),
    ) {
        let mut q = quota("team", (hard, 0), None);
        let mut cands = Vec::new();
        for (i, (p, cards)) in running.iter().enumerate() {
            let j = job(&format!("r{i}"), *p, T0 - 1000 * i as i64, *cards, (1, 0));
            if admission::charge(&mut q, &j.workload_ref, j.charge(T0 - 1000)).is_err() {
                continue;
            }
            let charged = resources::get(&q.status.used, GPU);
            if charged > Quantity::from_units(hard) {
                admission::release(&mut q, &j.workload_ref);
                continue;
            }
            cands.push(Candidate {
                workload_ref: j.workload_ref.clone(),
                stop: Stop::Suspend,
                priority: *p,
                online: false,
                created_ms: j.submitted_ms,
                pod_sets: j.pod_sets.to_vec(),
                min_replicas: None,
                marked: false, idle: false,
            });
        }
        let queued: Vec<Queued> = entries.iter().enumerate().map(|(i, (p, at, cards, run))| {
            let mut j = job(&format!("q{i}"), *p, T0 + at * 1000, *cards, (1, 0));
            j.run_ms = run.map(|h| h * 3_600_000);
            j
        }).collect();
        let state = budget_h.map(|b| BudgetState {
            quota: "team".into(),
            key: format!("cash/{GPU}"),
            budget: budget::from_quantity(Quantity::from_units(b)),
            spent: budget::from_quantity(Quantity::from_units(spent_h.min(b))),
            ..Default::default()
        });
        let (qos, prices) = (QosMultipliers::default(), PriceList::default());
        let views: Vec<BudgetView> = state.iter().map(|s| BudgetView {
            state: s,
            target: GPU,
            without_run_time: WithoutRunTime::ReserveDefault { horizon_seconds: 7200 },
            qos: &qos,
            prices: &prices,
        }).collect();
        let policy = QueuePolicy {
            preemption: Preemption::LowerPriority,
            order: if best_effort { Order::BestEffortFifo { aging_seconds: 60 } } else { Order::StrictFifo },
            ..QueuePolicy::queue()
        };
        let none = ResourceList::new();
        let now = T0 + 400_000;
        match preempt::weigh(&queued, &Pool::new(&q, &none), &views, &policy, now, &cands, None) {
            preempt::Weighed::Reclaim { head, victims } => {
                let h = queued.iter().find(|e| e.workload_ref == head).unwrap();
                prop_assert!(!victims.is_empty());
                let mut freed = q.clone();
                for v in &victims {
                    let c = cands.iter().find(|c| c.workload_ref == v.workload_ref).unwrap();
                    prop_assert!(c.priority < h.priority, "only lower priority is taken");
                    admission::release(&mut freed, &v.workload_ref);
                }
                let d = queue::next_admissions(&queued, &Pool::new(&freed, &none), &views, &policy, now);
                prop_assert!(
                    admitted(&d).iter().any(|a| a.workload_ref == head),
                    "{head} took {victims:?} but the round after does not admit it: {d:?}"
                );
            }
            preempt::Weighed::Futile { after, .. } => {
                prop_assert!(after.waiting() != Waiting::Quota, "{after}");
            }
            preempt::Weighed::Nothing => {}
        }
    }

    /// Estimated starts as `status.queue` shows them (docs/queueing.md §5):
    /// only for entries that wait for quota or their turn, after now, on
    /// whole minutes; under strict FIFO in admission order, and none
    /// behind an entry that has none (nothing passes it); and no estimate
    /// at all when nothing running or queued declares an end.
    #[test]
    fn start_estimates_never_guess_and_keep_strict_order(
        (q, limits) in arb_quota(),
        entries in arb_queue(),
        runs in prop::collection::vec(prop::option::of(1i64..10), 14),
        running_end in prop::option::of(1i64..10),
    ) {
        const H: i64 = 3_600_000;
        let entries: Vec<Queued> = entries.into_iter().zip(runs).map(|(mut e, r)| {
            e.run_ms = r.map(|h| h * H);
            e
        }).collect();
        let running = [queue::Running {
            workload_ref: "batch/Job/ns/running".into(),
            usage: q.status.workloads["batch/Job/ns/running"].usage(),
            ends_ms: running_end.map(|h| T0 + h * H + 1),
        }];
        let pool = Pool::new(&q, &limits);
        let policy = QueuePolicy::queue();
        let d = queue::next_admissions(&entries, &pool, &[], &policy, T0);
        let est = queue::estimate::for_status(&entries, &d, &pool, &running, &policy, T0, queue::estimate::ESTIMATE_HEAD);
        let mut last: Option<i64> = None;
        let mut unestimated = false;
        for x in &d {
            let Decision::Wait(w) = x else {
                prop_assert!(!est.contains_key(x.workload_ref()), "admitted now: no estimate");
                continue;
            };
            if w.reason.waiting() == Waiting::Never {
                prop_assert!(!est.contains_key(&w.workload_ref));
                continue;
            }
            match est.get(&w.workload_ref) {
                Some(&t) => {
                    prop_assert!(t > T0 && t % 60_000 == 0, "{t}");
                    prop_assert!(!unestimated, "{} estimated behind an entry with none", w.workload_ref);
                    prop_assert!(last.is_none_or(|l| l <= t), "out of order");
                    last = Some(t);
                }
                None => unestimated = true,
            }
        }
        if running_end.is_none() && entries.iter().all(|e| e.run_ms.is_none()) {
            prop_assert!(est.is_empty(), "nothing declares an end: {est:?}");
        }
    }

    #[test]
    fn strict_fifo_never_admits_behind_a_blocked_head(
        (q, limits) in arb_quota(),
        entries in arb_queue(),
    ) {
        let pool = Pool::new(&q, &limits);
        let d = queue::next_admissions(&entries, &pool, &[], &QueuePolicy::queue(), T0);
        let mut blocked = false;
        for x in &d {
            match x {
                Decision::Wait(w) => blocked |= w.reason.waiting() != Waiting::Never,
                Decision::Admit(a) => prop_assert!(!blocked, "{} passed a blocked head", a.workload_ref),
            }
        }
    }

    #[test]
    fn admitting_is_idempotent(
        (q, limits) in arb_quota(),
        entries in arb_queue(),
        policy in arb_policy(),
        later in 0i64..1000,
    ) {
        let now = T0 + 50_000;
        let d = queue::next_admissions(&entries, &Pool::new(&q, &limits), &[], &policy, now);
        let mut written = q.clone();
        apply(&mut written, &limits, &d);
        let gone: Vec<&str> = admitted(&d).iter().map(|a| a.workload_ref.as_str()).collect();
        let rest: Vec<Queued> = entries.iter().filter(|e| !gone.contains(&e.workload_ref.as_str())).cloned().collect();
        // Same capacity, same or later time: nothing more is admitted.
        for at in [now, now + later * 1000] {
            let again = queue::next_admissions(&rest, &Pool::new(&written, &limits), &[], &policy, at);
            prop_assert!(admitted(&again).is_empty());
        }
    }

    #[test]
    fn budgets_are_never_over_reserved(
        entries in arb_queue(),
        runs in prop::collection::vec(prop::option::of(1i64..10), 14),
        budget_h in 0i64..200,
        spent_h in 0i64..100,
    ) {
        let entries: Vec<Queued> = entries.into_iter().zip(runs).map(|(mut e, r)| {
            e.run_ms = r.map(|h| h * 3_600_000);
            e
        }).collect();
        let q = quota("team", (1000, 1000), None);
        let state = BudgetState {
            quota: "team".into(),
            key: format!("cash/{GPU}"),
            budget: budget::from_quantity(Quantity::from_units(budget_h)),
            spent: budget::from_quantity(Quantity::from_units(spent_h)),
            ..Default::default()
        };
        let (qos, prices) = (QosMultipliers::default(), PriceList::default());
        let view = BudgetView {
            state: &state,
            target: GPU,
            without_run_time: WithoutRunTime::ReserveDefault { horizon_seconds: 7200 },
            qos: &qos,
            prices: &prices,
        };
        let pool = Pool::new(&q, &ResourceList::new());
        let d = queue::next_admissions(&entries, &pool, std::slice::from_ref(&view), &QueuePolicy::queue(), T0);
        let reserved: i128 = admitted(&d).iter()
            .flat_map(|a| a.reserves.values())
            .map(|r| r.expect("every use of the budget reserves under ReserveDefault"))
            .sum();
        prop_assert!(reserved <= state.left().max(0));
        for x in &d {
            if let Decision::Wait(w) = x {
                prop_assert!(matches!(w.reason.waiting(), Waiting::Budget | Waiting::Turn), "{}", w.reason);
            }
        }
    }

    /// Best-effort with aging: a big job is admitted within a bounded
    /// number of rounds although one-card jobs keep arriving that always
    /// fill the gaps it waits for. The running work is staggered so that
    /// fewer cards than it needs ever free at once: without aging it would
    /// wait forever.
    #[test]
    fn no_starvation_under_best_effort_with_aging(
        hard in 4i64..16,
        run_rounds in 2usize..5,
        big_extra in 0i64..16,
        aging_s in 1u64..120,
        step_s in 1i64..60,
        ahead in prop::collection::vec(1i64..4, 0..3),
    ) {
        let policy = QueuePolicy {
            order: Order::BestEffortFifo { aging_seconds: aging_s },
            ..QueuePolicy::queue()
        };
        let mut q = quota("team", (hard, 0), None);
        // Per round at most ceil(hard / run_rounds) cards free; big needs more.
        let per_round = (hard + run_rounds as i64 - 1) / run_rounds as i64;
        let big_n = (per_round + 1 + big_extra).min(hard);
        prop_assume!(big_n > per_round);
        let mut running: Vec<(String, usize)> = Vec::new(); // (ref, round it ends)
        for i in 0..hard {
            let j = job(&format!("r{i}"), 0, T0, 1, (1, 0));
            admission::charge(&mut q, &j.workload_ref, j.charge(T0)).unwrap();
            running.push((j.workload_ref, 1 + i as usize % run_rounds));
        }
        let mut waiting: Vec<Queued> = ahead.iter().enumerate()
            .map(|(i, n)| job(&format!("ahead{i}"), 0, T0, (*n).min(hard), (1, 0)))
            .collect();
        waiting.push(job("big", 0, T0 + 1, big_n, (1, 0)));
        let step = step_s * 1000;
        let aging_rounds = ((aging_s as i64 * 1000 + step - 1) / step) as usize;
        let bound = aging_rounds + (ahead.len() + 1) * (run_rounds + 1);
        let mut admitted_at = None;
        for round in 1..=bound {
            let now = T0 + 1 + round as i64 * step;
            for (w, _) in running.iter().filter(|(_, end)| *end <= round) {
                admission::release(&mut q, w);
            }
            running.retain(|(_, end)| *end > round);
            for i in 0..hard {
                waiting.push(job(&format!("s{round}-{i}"), 0, now, 1, (1, 0)));
            }
            let d = queue::next_admissions(&waiting, &Pool::new(&q, &ResourceList::new()), &[], &policy, now);
            apply(&mut q, &ResourceList::new(), &d);
            for a in admitted(&d) {
                running.push((a.workload_ref.clone(), round + run_rounds));
                if a.workload_ref.ends_with("/big") {
                    admitted_at = Some(round);
                }
            }
            let gone: Vec<String> = admitted(&d).iter().map(|a| a.workload_ref.clone()).collect();
            waiting.retain(|e| !gone.contains(&e.workload_ref));
            if admitted_at.is_some() {
                break;
            }
        }
        prop_assert!(admitted_at.is_some(), "big not admitted within {bound} rounds");
    }
}

/// A day of three teams, Kueue style: 200 jobs of mixed sizes and
/// priorities arrive over time into three quotas with different policies;
/// jobs run their declared time and free their quota; the controller runs
/// a round at every arrival and every end. The admitted order is pinned.
#[derive(Clone, Copy)]
struct Team {
    name: &'static str,
    hard: i64,
    policy: QueuePolicy,
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Runs the day; returns per team the admissions as (ref, at ms) in order,
/// and checks on the way that no quota ever exceeds its hard.
fn day() -> BTreeMap<&'static str, Vec<(String, i64)>> {
    let teams = [
        Team {
            name: "vision",
            hard: 16,
            policy: QueuePolicy::queue(),
        },
        Team {
            name: "nlp",
            hard: 24,
            policy: QueuePolicy {
                order: Order::BestEffortFifo {
                    aging_seconds: 1800,
                },
                ..QueuePolicy::queue()
            },
        },
        Team {
            name: "speech",
            hard: 8,
            policy: QueuePolicy {
                preemption: Preemption::LowerPriority,
                ..QueuePolicy::queue()
            },
        },
    ];
    let mut rng = Lcg(15);
    // (team index, job) — arrivals every 0..4 minutes.
    let mut arrivals: Vec<(usize, Queued)> = Vec::new();
    let mut t = T0;
    for i in 0..200 {
        t += rng.next(4) as i64 * 60_000;
        let team = [0, 0, 1, 1, 1, 2][rng.next(6) as usize];
        let cards = [1, 1, 2, 2, 4, 8][rng.next(6) as usize].min(teams[team].hard / 2);
        let priority = [0, 0, 0, 100, 1000][rng.next(5) as usize];
        let mut j = job(
            &format!("{}-{i:03}", teams[team].name),
            priority,
            t,
            cards,
            (1, 0),
        );
        j.run_ms = Some((5 + rng.next(35) as i64) * 60_000);
        arrivals.push((team, j));
    }
    let mut quotas: Vec<Quota> = teams
        .iter()
        .map(|t| quota(t.name, (t.hard, 0), None))
        .collect();
    let mut queues: Vec<Vec<Queued>> = vec![Vec::new(); 3];
    // Running: (team, job, ends at).
    let mut running: Vec<(usize, Queued, i64)> = Vec::new();
    let mut out: BTreeMap<&'static str, Vec<(String, i64)>> = BTreeMap::new();
    let mut next_arrival = 0;
    let mut now = T0;
    let none = ResourceList::new();
    loop {
        // Ends first, then arrivals, at the same instant.
        let (ended, still): (Vec<_>, Vec<_>) = running.into_iter().partition(|r| r.2 <= now);
        running = still;
        for (ti, j, _) in ended {
            admission::release(&mut quotas[ti], &j.workload_ref);
        }
        while next_arrival < arrivals.len() && arrivals[next_arrival].1.submitted_ms <= now {
            let (ti, j) = arrivals[next_arrival].clone();
            queues[ti].push(j);
            next_arrival += 1;
        }
        for (ti, team) in teams.iter().enumerate() {
            // Preemption: suspend the victims at once (the grace period of
            // the reclaim path is the server's), and requeue them as they
            // were submitted.
            let cands: Vec<Candidate> = running
                .iter()
                .filter(|r| r.0 == ti)
                .map(|(_, j, _)| Candidate {
                    workload_ref: j.workload_ref.clone(),
                    stop: Stop::Suspend,
                    priority: j.priority,
                    online: false,
                    created_ms: j.submitted_ms,
                    pod_sets: j.pod_sets.to_vec(),
                    min_replicas: None,
                    marked: false,
                    idle: false,
                })
                .collect();
            let pool = Pool::new(&quotas[ti], &none);
            if let Some((_, victims)) =
                preempt::for_queue(&queues[ti], &pool, &[], &team.policy, now, &cands)
            {
                for v in victims {
                    admission::release(&mut quotas[ti], &v.workload_ref);
                    let at = running
                        .iter()
                        .position(|r| r.1.workload_ref == v.workload_ref)
                        .unwrap();
                    let (_, j, _) = running.remove(at);
                    out.entry(team.name)
                        .or_default()
                        .push((format!("preempted {}", j.workload_ref), now));
                    queues[ti].push(j);
                }
            }
            let pool = Pool::new(&quotas[ti], &none);
            let d = queue::next_admissions(&queues[ti], &pool, &[], &team.policy, now);
            apply(&mut quotas[ti], &none, &d);
            assert!(
                resources::get(&quotas[ti].status.used, GPU) <= Quantity::from_units(team.hard),
                "{} over its hard",
                team.name
            );
            for a in admitted(&d) {
                let at = queues[ti]
                    .iter()
                    .position(|q| q.workload_ref == a.workload_ref)
                    .unwrap();
                let j = queues[ti].remove(at);
                let end = now + j.run_ms.unwrap();
                out.entry(team.name)
                    .or_default()
                    .push((a.workload_ref.clone(), now));
                running.push((ti, j, end));
            }
        }
        let next_end = running.iter().map(|r| r.2).min();
        let next_in = arrivals.get(next_arrival).map(|a| a.1.submitted_ms);
        now = match (next_end, next_in) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
    }
    assert!(queues.iter().all(|q| q.is_empty()), "everything ran");
    out
}

#[test]
fn a_day_of_three_teams_runs_everything_in_a_pinned_order() {
    let a = day();
    assert_eq!(a, day(), "deterministic");
    let admissions = |team: &str| -> Vec<&str> {
        a[team]
            .iter()
            .filter(|(w, _)| !w.starts_with("preempted"))
            .map(|(w, _)| &w[13..])
            .collect()
    };
    let total: usize = ["vision", "nlp", "speech"]
        .iter()
        .map(|t| admissions(t).len())
        .sum();
    let preempted: usize = a
        .values()
        .flatten()
        .filter(|(w, _)| w.starts_with("preempted"))
        .count();
    assert_eq!(
        total,
        200 + preempted,
        "every job admitted, preempted ones again"
    );
    assert_eq!(preempted, 8);
    let counts: Vec<usize> = ["vision", "nlp", "speech"]
        .iter()
        .map(|t| admissions(t).len())
        .collect();
    assert_eq!(counts, [64, 102, 42]);
    // Strict FIFO by priority: vision-030 (priority 1000) before -028 (0).
    assert_eq!(
        admissions("vision")[..12],
        [
            "vision-003",
            "vision-005",
            "vision-007",
            "vision-010",
            "vision-016",
            "vision-017",
            "vision-022",
            "vision-024",
            "vision-025",
            "vision-030",
            "vision-028",
            "vision-035"
        ]
    );
    // Best-effort: smaller work passes a head that does not fit yet:
    // nlp-014 (4 cards, priority 100) before -013 (8 cards, priority 1000).
    assert_eq!(
        admissions("nlp")[..12],
        [
            "nlp-000", "nlp-001", "nlp-002", "nlp-006", "nlp-008", "nlp-009", "nlp-011", "nlp-012",
            "nlp-014", "nlp-013", "nlp-018", "nlp-023"
        ]
    );
    // Preemption: speech-019 (priority 100) is suspended for priority-1000
    // work and admitted again later, in its first place.
    assert_eq!(
        admissions("speech")[..12],
        [
            "speech-004",
            "speech-015",
            "speech-019",
            "speech-021",
            "speech-031",
            "speech-019",
            "speech-026",
            "speech-036",
            "speech-043",
            "speech-019",
            "speech-026",
            "speech-039"
        ]
    );
    let victims: Vec<&str> = a["speech"]
        .iter()
        .filter_map(|(w, _)| w.strip_prefix("preempted batch/Job/ns/"))
        .collect();
    assert_eq!(
        victims,
        [
            "speech-019",
            "speech-026",
            "speech-019",
            "speech-026",
            "speech-044",
            "speech-039",
            "speech-019",
            "speech-070"
        ]
    );
}
