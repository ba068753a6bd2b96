//! One round of admissions from a quota's queue (docs/queueing.md §3):
//! walk the queue in admission order, admit every entry that fits whole —
//! quota first (hard, or the borrowing ceiling), then its budgets — and
//! stop passing at the first entry that does not fit and blocks.
//!
//! A round is a simulation on copies: the caller's quota and budgets are
//! not changed. The controller then writes each `Admit` (charge in the
//! quota's compare-and-swap, as the webhook does, then unsuspend); a write
//! that loses a race leaves that entry queued for the next round.

use super::order::{self, Slot};
use super::reason::{Need, Reason};
use crate::admission::{self, Denial};
use crate::budget::reserve::Ask;
use crate::budget::{BudgetDenial, BudgetState, PriceList};
use crate::cash::QosMultipliers;
use crate::object::budgets::WithoutRunTime;
use crate::object::queue::QueueEntry;
use crate::object::queue::Queued;
use crate::object::queue::Waiting;
use crate::object::queueing::QueuePolicy;
use crate::object::{Charge, Quota};
use crate::quantity::Quantity;
use crate::resources::{self, ResourceList};
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// A quota as the queue admits against: its spec, its used, and the
/// ceiling per key. `limits` is what `admission::ceiling` reads: empty for
/// hard only; for a borrower, hard + the loan it holds or could be granted
/// now (`borrow::limits`), capped by max.
#[derive(Clone, Debug)]
pub struct Pool {
    quota: Quota,
    limits: ResourceList,
    /// What the quota's own workloads hold, those admitted in the
    /// simulation included: all that finishing work could ever free.
    held: ResourceList,
    /// The submitters' decayed usage, when the queue orders by it
    /// (`submitterFairness`, `order::order_by`); shared by every copy.
    submitters: Option<std::sync::Arc<crate::submitters::Usages>>,
}

impl Pool {
    /// The pool of `quota` (its used derived from its ledgers) under
    /// `limits` (see above).
    pub fn new(quota: &Quota, limits: &ResourceList) -> Pool {
        // Admission reads the name, the spec and used only: the ledgers
        // (charges, loans, the queue) stay behind, or every copy of the
        // pool (one per round of an estimate, one per create's review)
        // would cost their size.
        let (self_used, used) = quota.status.usage_of(&quota.spec);
        let held = quota.status.self_usage();
        let status = crate::object::QuotaStatus {
            hard: quota.spec.hard.clone(),
            borrowed: quota.spec.borrowed(&used),
            self_used,
            used,
            ..Default::default()
        };
        Pool {
            quota: Quota {
                api_version: quota.api_version.clone(),
                kind: quota.kind.clone(),
                metadata: quota.metadata.clone(),
                spec: quota.spec.clone(),
                status,
            },
            limits: limits.clone(),
            held,
            submitters: None,
        }
    }

    /// The pool whose rounds order entries of equal priority by their
    /// submitters' decayed `usages` (where the policy asks for it).
    pub fn with_submitters(mut self, usages: std::sync::Arc<crate::submitters::Usages>) -> Pool {
        self.submitters = Some(usages);
        self
    }

    /// The submitters' usage this pool's rounds order by, if any.
    pub fn submitters(&self) -> Option<&crate::submitters::Usages> {
        self.submitters.as_deref()
    }

    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    pub fn used(&self) -> &ResourceList {
        &self.quota.status.used
    }

    /// The ceiling admission holds `key` to, None when not limited.
    pub fn ceiling(&self, key: &str) -> Option<Quantity> {
        admission::ceiling(&self.quota, key, &self.limits)
    }

    /// Charges `usage` (in the simulation).
    pub fn take(&mut self, usage: &ResourceList) {
        resources::add_into(&mut self.quota.status.used, usage);
        resources::add_into(&mut self.held, usage);
    }

    /// Gives `usage` back (running work that ended, in an estimate).
    pub fn release(&mut self, usage: &ResourceList) {
        for list in [&mut self.quota.status.used, &mut self.held] {
            for (k, v) in usage {
                if let Some(u) = list.get_mut(k) {
                    *u = u.saturating_sub(*v).max(Quantity::ZERO);
                }
            }
        }
    }

    /// Per key, how much `usage` is over what is free (empty: it fits the
    /// quantities; a spent cash key is `fits`' business).
    pub fn short(&self, usage: &ResourceList) -> ResourceList {
        usage
            .iter()
            .filter(|(_, d)| d.nanos() > 0)
            .filter_map(|(k, d)| {
                let c = self.ceiling(k)?;
                let over = resources::get(self.used(), k)
                    .saturating_add(*d)
                    .saturating_sub(c);
                (over.nanos() > 0).then(|| (k.clone(), over))
            })
            .collect()
    }

    /// Whether `usage` fits now; why not otherwise.
    pub fn fits(&self, usage: &ResourceList) -> Result<(), Reason> {
        match admission::check_fits_within(&self.quota, usage, &self.limits) {
            Ok(()) => Ok(()),
            Err(Denial::Short(s)) => Err(Reason::Quota(
                s.iter()
                    .map(|s| {
                        let used = resources::get(self.used(), &s.key);
                        let free = self
                            .ceiling(&s.key)
                            .unwrap_or_default()
                            .saturating_sub(used)
                            .max(Quantity::ZERO);
                        // Free within hard now; the rest of `free` is a loan.
                        let free_now = resources::get(&self.quota.spec.hard, &s.key)
                            .saturating_sub(used)
                            .max(Quantity::ZERO)
                            .min(free);
                        Need {
                            key: s.key.clone(),
                            free,
                            borrowable: free.saturating_sub(free_now),
                            needed: s.asked,
                        }
                    })
                    .collect(),
            )),
            Err(Denial::CashExhausted(c)) => Err(Reason::Budget(BudgetDenial::Spent(Box::new(
                crate::budget::reserve::Numbers {
                    quota: c.quota.clone(),
                    key: c.key.clone(),
                    available: c.hard,
                    spent: c.used,
                    left: c.hard.saturating_sub(c.used),
                    ..Default::default()
                },
            )))),
            Err(Denial::Invalid(why)) => Err(Reason::Never(why)),
            // Not from `check_fits_within`: only a charge's reservation.
            Err(Denial::Budget(d)) => Err(Reason::Never(d.to_string())),
        }
    }

    /// Why `q` can never be admitted here, if so: its charge is one no
    /// workload could hold, or it asks more of a key than the quota could
    /// give with all its own work gone (carve-outs of children stay) and —
    /// where it may borrow — everything up to max on loan.
    pub fn never(&self, q: &Queued) -> Option<String> {
        self.never_with(q, q.usage())
    }

    /// `never`, for `q` whose usage the caller has (`q.usage()`).
    pub fn never_with(&self, q: &Queued, usage: &ResourceList) -> Option<String> {
        if let Err(d) = admission::check_sized(&q.workload_ref, &q.pod_sets, None, usage) {
            return Some(d.to_string());
        }
        let may_borrow = !self.quota.spec.max.is_empty() && !self.quota.spec.parent.is_empty();
        let widest = if may_borrow {
            &self.quota.spec.max
        } else {
            &self.limits
        };
        for (k, &d) in usage {
            let Some(c) = admission::ceiling(&self.quota, k, widest) else {
                continue;
            };
            let others = resources::get(self.used(), k)
                .saturating_sub(resources::get(&self.held, k))
                .max(Quantity::ZERO);
            if others.saturating_add(d) > c {
                let room = c.saturating_sub(others).max(Quantity::ZERO);
                return Some(format!(
                    "bizrq {}: {k} asks {}, more than the {} it can ever give",
                    self.quota.name(),
                    crate::readable::amount(k, d),
                    crate::readable::amount(k, room)
                ));
            }
        }
        None
    }
}

/// A card-hour budget of the quota, as admission reads it: its state and
/// how a workload is priced against it (as the webhook admits).
#[derive(Clone, Debug)]
pub struct BudgetView<'a> {
    pub state: &'a BudgetState,
    /// The cash key's usage key (`requests.nvidia.com/gpu`).
    pub target: &'a str,
    pub without_run_time: WithoutRunTime,
    pub qos: &'a QosMultipliers,
    pub prices: &'a PriceList,
}

/// An entry to admit now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub workload_ref: String,
    /// What to write in `status.workloads` (in the quota's CAS).
    pub charge: Charge,
    /// What the charge comes to.
    pub usage: ResourceList,
    /// What of it lies beyond hard, per key: the loan it rides on
    /// (`borrow::needed` asks the parent for the same).
    pub borrows: ResourceList,
    /// Per budget (cash key) it uses: the reservation made (acc), or None
    /// when admitted without one (`WithoutRunTime::Admit`).
    pub reserves: BTreeMap<String, Option<i128>>,
}

/// An entry that keeps waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub workload_ref: String,
    /// 1-based, among the entries still waiting, in admission order.
    pub position: u32,
    pub reason: Reason,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit(Admission),
    Wait(Wait),
}

impl Decision {
    pub fn workload_ref(&self) -> &str {
        match self {
            Decision::Admit(a) => &a.workload_ref,
            Decision::Wait(w) => &w.workload_ref,
        }
    }
}

/// Try `q` against the pool and budgets; on success the reservations made
/// (on `states`, which the caller commits or drops).
fn try_fit(
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    states: &mut [BudgetState],
    q: &Queued,
    usage: &ResourceList,
    now_ms: i64,
) -> Result<BTreeMap<String, Option<i128>>, Reason> {
    pool.fits(usage)?;
    let mut reserves = BTreeMap::new();
    for (view, state) in budgets.iter().zip(states.iter_mut()) {
        if resources::get(usage, view.target).nanos() <= 0 {
            continue; // a budget only weighs on work that asks its resource
        }
        let ask = Ask {
            workload: &q.workload_ref,
            declared_ms: q.run_ms,
            pod_sets: &q.pod_sets,
            now_ms,
        };
        match state.admit(
            &ask,
            view.without_run_time,
            view.target,
            view.qos,
            view.prices,
        ) {
            Ok(r) => {
                reserves.insert(state.key.clone(), r);
            }
            Err(d @ BudgetDenial::NoRunTime { .. }) => return Err(Reason::Never(d.to_string())),
            Err(d) => return Err(Reason::Budget(d)),
        }
    }
    Ok(reserves)
}

/// A round's walk through a queue in admission order: the pool and the
/// budgets' states as the admissions so far leave them, and the entry
/// that blocks everything behind it. `round`, `admitted` and
/// `would_queue_at` all take each entry with `step`, so the rule that
/// decides an entry lives here alone.
struct Walk<'q> {
    pool: Pool,
    states: Vec<BudgetState>,
    blocker: Option<&'q str>,
}

/// What `Walk::step` decided for one entry.
enum Step<'q> {
    /// Taken: the reservations made, and what of it lies beyond hard.
    Admit {
        reserves: BTreeMap<String, Option<i128>>,
        borrows: ResourceList,
    },
    /// It fits, but waits its turn behind this blocked head.
    Turn(&'q str),
    /// It does not fit (or never can): why.
    Wait(Reason),
}

impl<'q> Walk<'q> {
    fn new(pool: &Pool, budgets: &[BudgetView<'_>]) -> Walk<'q> {
        Walk {
            pool: pool.clone(),
            states: states_of(budgets),
            blocker: None,
        }
    }

    /// Take `q` (whose usage is `usage`) at its turn: admitted when it
    /// fits whole and no head blocks, which takes its room and its
    /// budgets' reservations; else it waits, and — where `blocks` and it
    /// could fit some day — blocks everything behind it.
    fn step(
        &mut self,
        q: &'q Queued,
        usage: &ResourceList,
        blocks: bool,
        budgets: &[BudgetView<'_>],
        now_ms: i64,
    ) -> Step<'q> {
        if let Some(why) = self.pool.never_with(q, usage) {
            return Step::Wait(Reason::Never(why));
        }
        let mut trial = self.states.clone();
        match try_fit(&self.pool, budgets, &mut trial, q, usage, now_ms) {
            Ok(reserves) => match self.blocker {
                None => {
                    let borrows = beyond_hard(&self.pool, usage);
                    self.pool.take(usage);
                    self.states = trial;
                    Step::Admit { reserves, borrows }
                }
                Some(head) => Step::Turn(head),
            },
            Err(reason) => {
                if blocks && reason.waiting() != Waiting::Never && self.blocker.is_none() {
                    self.blocker = Some(&q.workload_ref);
                }
                Step::Wait(reason)
            }
        }
    }
}

/// One round: the decisions in admission order, and the pool and budget
/// states as they would be once the admissions are written.
pub fn round<Q: Borrow<Queued>>(
    queue: &[Q],
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
) -> (Vec<Decision>, Pool, Vec<BudgetState>) {
    let mut walk = Walk::new(pool, budgets);
    let mut position = 0u32;
    let mut out = Vec::with_capacity(queue.len());
    for Slot { index, blocks } in order::order_by(queue, policy, now_ms, pool.submitters()) {
        let q = queue[index].borrow();
        let usage = q.usage();
        let reason = match walk.step(q, usage, blocks, budgets, now_ms) {
            Step::Admit { reserves, borrows } => {
                out.push(Decision::Admit(Admission {
                    workload_ref: q.workload_ref.clone(),
                    charge: q.charge(now_ms),
                    usage: usage.clone(),
                    borrows,
                    reserves,
                }));
                continue;
            }
            Step::Turn(head) => Reason::Turn {
                head: head.to_string(),
            },
            Step::Wait(reason) => reason,
        };
        position += 1;
        out.push(Decision::Wait(Wait {
            workload_ref: q.workload_ref.clone(),
            position,
            reason,
        }));
    }
    (out, walk.pool, walk.states)
}

/// Which entries of `queue` one round admits — their indices, in
/// admission order — and the pool it leaves: `round`'s walk, without its
/// decisions (no charge, reason or position is built). An estimate's
/// simulation asks only this, once per event.
pub fn admitted<Q: Borrow<Queued>>(
    queue: &[Q],
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
) -> (Vec<usize>, Pool) {
    let mut walk = Walk::new(pool, budgets);
    let taken = order::order_by(queue, policy, now_ms, pool.submitters())
        .into_iter()
        .filter(|Slot { index, blocks }| {
            let q = queue[*index].borrow();
            matches!(
                walk.step(q, q.usage(), *blocks, budgets, now_ms),
                Step::Admit { .. }
            )
        })
        .map(|s| s.index)
        .collect();
    (taken, walk.pool)
}

/// What of `usage`, added to the pool's used, lies beyond hard, per key.
fn beyond_hard(pool: &Pool, usage: &ResourceList) -> ResourceList {
    let q = pool.quota();
    usage
        .iter()
        .filter_map(|(k, d)| {
            let h = q.spec.hard.get(k)?;
            let u = resources::get(pool.used(), k);
            let over = u
                .saturating_add(*d)
                .saturating_sub(u.max(*h))
                .max(Quantity::ZERO);
            (over.nanos() > 0).then(|| (k.clone(), over))
        })
        .collect()
}

/// The admissions of one round from `queue` into `pool` at `now_ms`, and
/// why the rest wait, in admission order (docs/queueing.md §3). Never
/// partial, never past a key's ceiling, never past a budget.
pub fn next_admissions<Q: Borrow<Queued>>(
    queue: &[Q],
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
) -> Vec<Decision> {
    round(queue, pool, budgets, policy, now_ms).0
}

/// What `POST /api/v1/check` says of a workload that would queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// It fits now, ahead of or past the queue.
    AdmitsNow,
    /// It would wait at this 1-based position, for this reason.
    Queues { position: u32, reason: Reason },
    /// Waiting would not help (`Waiting::Never`): refuse it.
    Never(Reason),
}

/// Where `candidate` (submitted now) would land in the queue: admitted at
/// once, queued at position N (after this round's admissions leave), or
/// never. The caller asks only for work whose `disposition` is `Queue`.
/// The queue may be borrowed from where it is kept (the mutating
/// webhook's review of every create: the status's entries and the
/// pending marks, hundreds of each, never copied for it).
///
/// A candidate the pool can never hold, or that does not fit the pool as
/// it is now, is judged alone, in time independent of the queue's length:
/// a round only takes room, so no round admits it (exact), and it waits
/// behind every entry ordered ahead of it (its position counts them all;
/// the controller's next round, which restates it, leaves out those it
/// admits meanwhile). Only one that fits now is judged by the round's
/// walk over the entries of its priority and above, up to its own turn
/// (the entries ahead may leave it without room): no decision, charge or
/// reason is built for them, and nothing after its turn is looked at.
pub fn would_queue_at<Q: Borrow<Queued>>(
    queue: &[Q],
    candidate: &Queued,
    pool: &Pool,
    budgets: &[BudgetView<'_>],
    policy: &QueuePolicy,
    now_ms: i64,
) -> Check {
    if let Some(why) = pool.never(candidate) {
        return Check::Never(Reason::Never(why));
    }
    let usage = candidate.usage();
    let mut states = states_of(budgets);
    if let Err(reason) = try_fit(pool, budgets, &mut states, candidate, usage, now_ms) {
        if reason.waiting() == Waiting::Never {
            return Check::Never(reason);
        }
        let me = order::key(candidate);
        let ahead = queue
            .iter()
            .map(Borrow::borrow)
            .filter(|q| q.workload_ref != candidate.workload_ref && order::key(q) < me)
            .count();
        return Check::Queues {
            position: u32::try_from(ahead + 1).unwrap_or(u32::MAX),
            reason,
        };
    }
    // Entries of a lower priority come after it in every order (fairness
    // between submitters orders within one priority only): they change
    // neither its decision nor its position, and are left out.
    let mut all: Vec<&Queued> = queue
        .iter()
        .map(Borrow::borrow)
        .filter(|q| q.workload_ref != candidate.workload_ref && q.priority >= candidate.priority)
        .collect();
    all.push(candidate);
    let me = all.len() - 1;
    // The round's walk up to the candidate's turn (what comes after its
    // turn changes neither its decision nor its place): no decision or
    // charge is built for the entries ahead, only whether each is taken.
    let mut walk = Walk::new(pool, budgets);
    let mut waiting = 0u32;
    for Slot { index, blocks } in order::order_by(&all, policy, now_ms, pool.submitters()) {
        let q = all[index];
        if index != me {
            if !matches!(
                walk.step(q, q.usage(), blocks, budgets, now_ms),
                Step::Admit { .. }
            ) {
                waiting += 1;
            }
            continue;
        }
        let position = waiting.saturating_add(1);
        return match walk.step(q, usage, blocks, budgets, now_ms) {
            Step::Admit { .. } => Check::AdmitsNow,
            Step::Turn(head) => Check::Queues {
                position,
                reason: Reason::Turn {
                    head: head.to_string(),
                },
            },
            Step::Wait(reason) if reason.waiting() == Waiting::Never => Check::Never(reason),
            Step::Wait(reason) => Check::Queues { position, reason },
        };
    }
    // The candidate is always in the walk.
    Check::AdmitsNow
}

/// A fresh copy of each budget's state, for a round's simulation.
fn states_of(budgets: &[BudgetView<'_>]) -> Vec<BudgetState> {
    budgets.iter().map(|b| b.state.clone()).collect()
}

/// `status.queue` after a round: the entries still waiting, in admission
/// order, with position, reason and, where known, the estimated start.
pub fn status(
    queue: &[Queued],
    decisions: &[Decision],
    estimates: &BTreeMap<String, i64>,
) -> Vec<QueueEntry> {
    let by_ref: BTreeMap<&str, &Queued> =
        queue.iter().map(|q| (q.workload_ref.as_str(), q)).collect();
    // A long queue behind a full pool waits for the same reason entry
    // after entry (a backlog of equal jobs): said once, copied after.
    let mut said: Option<(&Reason, String)> = None;
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Wait(w) => Some(w),
            Decision::Admit(_) => None,
        })
        .filter_map(|w| {
            let work = (*by_ref.get(w.workload_ref.as_str())?).clone();
            let reason = match &said {
                Some((r, text)) if **r == w.reason => text.clone(),
                _ => {
                    let text = w.reason.to_string();
                    said = Some((&w.reason, text.clone()));
                    text
                }
            };
            Some(QueueEntry {
                estimated_start: estimates
                    .get(&w.workload_ref)
                    .map(|t| crate::time::format_rfc3339(*t)),
                work,
                position: w.position,
                waiting: w.reason.waiting(),
                reason,
            })
        })
        .collect()
}

/// Entries that have waited past the policy's alert threshold.
pub fn overdue<'a>(queue: &'a [Queued], policy: &QueuePolicy, now_ms: i64) -> Vec<&'a Queued> {
    queue
        .iter()
        .filter(|q| policy.alerts(q.submitted_ms, now_ms))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::queueing::Order;
    use crate::object::QuotaSpec;
    use crate::workload::PodSet;

    const GPU: &str = "requests.nvidia.com/gpu.A100";
    const T0: i64 = 1_800_000_000_000;

    fn gpus(n: i64) -> ResourceList {
        [(GPU.to_string(), Quantity::from_units(n))].into()
    }
    fn quota(hard: i64, used: i64) -> Quota {
        let mut q = Quota::new(
            "nlp",
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
        if used > 0 {
            admission::charge(
                &mut q,
                "batch/Job/ns/running",
                job("running", 0, 0, used).charge(T0),
            )
            .unwrap();
        }
        q
    }
    fn job(name: &str, priority: i32, at: i64, cards: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ns/{name}"),
            uid: name.into(),
            priority,
            priority_classes: Vec::new(),
            submitted_ms: T0 + at,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: cards,
                per_pod: gpus(1),
                qos: None,
            }]
            .into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        }
    }
    fn summary(d: &[Decision]) -> Vec<String> {
        d.iter()
            .map(|d| match d {
                Decision::Admit(a) => format!("+{}", &a.workload_ref[13..]),
                Decision::Wait(w) => format!("{}:{}", w.position, &w.workload_ref[13..]),
            })
            .collect()
    }

    #[test]
    fn strict_fifo_stops_at_a_head_that_does_not_fit() {
        let pool = Pool::new(&quota(8, 2), &ResourceList::new());
        let q = [
            job("a", 0, 0, 4),
            job("big", 0, 1, 6),
            job("small", 0, 2, 1),
        ];
        let d = next_admissions(&q, &pool, &[], &QueuePolicy::queue(), T0 + 10);
        assert_eq!(summary(&d), ["+a", "1:big", "2:small"]);
        let Decision::Wait(w) = &d[1] else { panic!() };
        assert_eq!(
            w.reason.to_string(),
            "waits for 4 × requests.nvidia.com/gpu.A100: 2 free, 6 needed"
        );
        let Decision::Wait(w) = &d[2] else { panic!() };
        assert_eq!(
            w.reason.to_string(),
            "waits its turn behind batch/Job/ns/big"
        );
    }

    #[test]
    fn lower_priorities_wait_behind_a_blocked_head_too() {
        let pool = Pool::new(&quota(8, 4), &ResourceList::new());
        let q = [job("hi", 10, 5, 6), job("lo", 0, 0, 1)];
        let d = next_admissions(&q, &pool, &[], &QueuePolicy::queue(), T0 + 10);
        assert_eq!(summary(&d), ["1:hi", "2:lo"]);
    }

    #[test]
    fn best_effort_lets_smaller_pass_until_the_head_ages() {
        let pool = Pool::new(&quota(8, 4), &ResourceList::new());
        let p = QueuePolicy {
            order: Order::BestEffortFifo { aging_seconds: 60 },
            ..QueuePolicy::queue()
        };
        let q = [
            job("big", 0, 0, 6),
            job("small", 0, 1, 2),
            job("tiny", 0, 2, 3),
        ];
        let d = next_admissions(&q, &pool, &[], &p, T0 + 59_999);
        assert_eq!(summary(&d), ["1:big", "+small", "2:tiny"]);
        let Decision::Wait(w) = &d[2] else { panic!() };
        assert_eq!(w.reason.waiting(), Waiting::Quota, "tiny no longer fits");
        let d = next_admissions(&q, &pool, &[], &p, T0 + 60_000);
        assert_eq!(summary(&d), ["1:big", "2:small", "3:tiny"]);
    }

    #[test]
    fn work_that_can_never_fit_blocks_no_one() {
        let pool = Pool::new(&quota(8, 0), &ResourceList::new());
        let q = [job("huge", 0, 0, 9), job("a", 0, 1, 8)];
        let d = next_admissions(&q, &pool, &[], &QueuePolicy::queue(), T0);
        assert_eq!(summary(&d), ["1:huge", "+a"]);
        let Decision::Wait(w) = &d[0] else { panic!() };
        assert_eq!(w.reason.waiting(), Waiting::Never);
        assert_eq!(
            w.reason.to_string(),
            "cannot be admitted: bizrq nlp: requests.nvidia.com/gpu.A100 asks 9, more than the 8 it can ever give"
        );
    }

    #[test]
    fn borrowing_admits_up_to_the_limits_and_says_what_is_on_loan() {
        let mut q = quota(4, 2);
        q.spec.parent = "org".into();
        q.spec.max = gpus(10);
        // Hard only: 2 free.
        let pool = Pool::new(&q, &ResourceList::new());
        let d = next_admissions(&[job("a", 0, 0, 5)], &pool, &[], &QueuePolicy::queue(), T0);
        assert_eq!(summary(&d), ["1:a"]);
        // The parent could lend 4 more: ceiling 8.
        let pool = Pool::new(&q, &gpus(8));
        let d = next_admissions(
            &[job("a", 0, 0, 5), job("b", 0, 1, 2)],
            &pool,
            &[],
            &QueuePolicy::queue(),
            T0,
        );
        assert_eq!(summary(&d), ["+a", "1:b"]);
        let Decision::Admit(a) = &d[0] else { panic!() };
        assert_eq!(a.borrows, gpus(3));
        let Decision::Wait(w) = &d[1] else { panic!() };
        assert_eq!(
            w.reason.to_string(),
            "waits for 1 × requests.nvidia.com/gpu.A100: 0 free now, 1 more to borrow, 2 needed"
        );
    }

    #[test]
    fn budgets_wait_like_quota_and_say_so() {
        let state = gpu_budget(20);
        let (qos, prices) = (QosMultipliers::default(), PriceList::default());
        let view = gpu_view(&state, &qos, &prices);
        let pool = Pool::new(&quota(16, 0), &ResourceList::new());
        let mut a = job("a", 0, 0, 4);
        a.run_ms = Some(3 * 3_600_000); // 12 card-hours
        let mut b = job("b", 0, 1, 8);
        b.run_ms = Some(3 * 3_600_000); // 24: 8 left
        let c = job("c", 0, 2, 1); // no run time: never, blocks no one
        let mut e = job("e", 0, 3, 1);
        e.run_ms = Some(3_600_000);
        let q = [a, b, c, e];
        let p = QueuePolicy {
            order: Order::BestEffortFifo { aging_seconds: 600 },
            ..QueuePolicy::queue()
        };
        let d = next_admissions(&q, &pool, std::slice::from_ref(&view), &p, T0 + 10);
        assert_eq!(summary(&d), ["+a", "1:b", "2:c", "+e"]);
        let Decision::Wait(w) = &d[1] else { panic!() };
        assert_eq!(
            w.reason.to_string(),
            "waits for card-hours of cash/requests.nvidia.com/gpu.A100: needs 24, 8 left"
        );
        let Decision::Wait(w) = &d[2] else { panic!() };
        assert_eq!(w.reason.waiting(), Waiting::Never);
        let Decision::Admit(a) = &d[0] else { panic!() };
        let reserved = a.reserves["cash/requests.nvidia.com/gpu.A100"].unwrap();
        assert_eq!(
            crate::budget::to_quantity(reserved),
            Quantity::from_units(12)
        );
    }

    #[test]
    fn would_queue_at_says_where_a_new_job_lands() {
        let pool = Pool::new(&quota(8, 6), &ResourceList::new());
        let q = [job("big", 0, 0, 4), job("hi", 5, 1, 4)];
        let p = QueuePolicy::queue();
        let c = job("new", 0, 100, 1);
        match would_queue_at(&q, &c, &pool, &[], &p, T0 + 100) {
            Check::Queues { position, reason } => {
                assert_eq!(position, 3);
                assert_eq!(reason.waiting(), Waiting::Turn);
            }
            other => panic!("{other:?}"),
        }
        let urgent = job("urgent", 9, 100, 1);
        assert_eq!(
            would_queue_at(&q, &urgent, &pool, &[], &p, T0 + 100),
            Check::AdmitsNow
        );
        let huge = job("huge", 9, 100, 9);
        assert!(matches!(
            would_queue_at(&q, &huge, &pool, &[], &p, T0 + 100),
            Check::Never(_)
        ));
    }

    /// A candidate that does not fit the pool now is judged alone: the
    /// same answer as the round over the whole queue when nothing ahead
    /// of it is admitted, and never admitted whatever the queue holds.
    #[test]
    fn a_candidate_that_does_not_fit_now_is_judged_without_the_round() {
        let pool = Pool::new(&quota(8, 6), &ResourceList::new());
        let p = QueuePolicy::queue();
        // Two ahead that do not fit either (by priority, then age), one
        // behind (lower priority).
        let q = [job("a", 5, 0, 4), job("b", 0, 1, 3), job("low", -1, 2, 3)];
        let c = job("new", 0, 100, 3);
        let full = {
            let mut all = q.to_vec();
            all.push(c.clone());
            next_admissions(&all, &pool, &[], &p, T0 + 100)
        };
        let Some(Decision::Wait(w)) = full
            .iter()
            .find(|d| d.workload_ref() == c.workload_ref)
            .cloned()
        else {
            panic!("{full:?}")
        };
        assert_eq!(
            would_queue_at(&q, &c, &pool, &[], &p, T0 + 100),
            Check::Queues {
                position: w.position,
                reason: w.reason.clone()
            }
        );
        assert_eq!(w.position, 3);
        // One that fits is judged by the round over what is ahead of it:
        // lower priorities behind it change nothing.
        let fits = job("fits", 0, 100, 2);
        let mut behind = q.to_vec();
        behind.extend((0..50).map(|i| job(&format!("lo{i}"), -5, 0, 1)));
        assert_eq!(
            would_queue_at(&behind, &fits, &pool, &[], &p, T0 + 100),
            would_queue_at(&q, &fits, &pool, &[], &p, T0 + 100)
        );
        // A queue of 100,000 entries answers the same.
        let long: Vec<Queued> = (0..100_000)
            .map(|i| job(&format!("j{i}"), 0, 1, 3))
            .collect();
        assert!(matches!(
            would_queue_at(&long, &c, &pool, &[], &p, T0 + 100),
            Check::Queues {
                position: 100_001,
                ..
            }
        ));
    }

    #[test]
    fn status_lists_the_waiting_in_order() {
        let pool = Pool::new(&quota(8, 2), &ResourceList::new());
        let q = [
            job("small", 0, 2, 1),
            job("a", 0, 0, 4),
            job("big", 0, 1, 6),
        ];
        let d = next_admissions(&q, &pool, &[], &QueuePolicy::queue(), T0 + 10);
        let est: BTreeMap<String, i64> = [("batch/Job/ns/big".to_string(), T0 + 3_600_000)].into();
        let s = status(&q, &d, &est);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].position, s[0].waiting), (1, Waiting::Quota));
        let json = serde_json::to_value(&s[0]).unwrap();
        assert_eq!(json["workloadRef"], "batch/Job/ns/big");
        assert_eq!(json["since"], "2027-01-15T08:00:00.001Z");
        assert_eq!(json["estimatedStart"], "2027-01-15T09:00:00.000Z");
        assert_eq!(
            json["reason"],
            "waits for 4 × requests.nvidia.com/gpu.A100: 2 free, 6 needed"
        );
        let back: QueueEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, s[0]);
    }

    #[test]
    fn status_states_each_reason_as_its_own_even_when_said_once_for_a_run() {
        // A full pool: every entry waits; equal ones in a run, then a
        // larger one, then an equal one again.
        let pool = Pool::new(&quota(4, 4), &ResourceList::new());
        let q = [
            job("a", 0, 0, 1),
            job("b", 0, 1, 1),
            job("c", 0, 2, 1),
            job("big", 0, 3, 3),
            job("d", 0, 4, 1),
        ];
        let d = next_admissions(&q, &pool, &[], &QueuePolicy::queue(), T0 + 10);
        let s = status(&q, &d, &BTreeMap::new());
        assert_eq!(s.len(), 5);
        for (e, d) in s.iter().zip(d.iter()) {
            let Decision::Wait(w) = d else {
                panic!("{d:?}")
            };
            assert_eq!(e.reason, w.reason.to_string(), "{}", e.work.workload_ref);
        }
        assert_eq!(s[0].reason, s[1].reason);
        assert_ne!(s[2].reason, s[3].reason);
        assert_eq!(s[4].reason, s[0].reason);
    }

    /// A card-hour budget of `units` on the A100s.
    fn gpu_budget(units: i64) -> BudgetState {
        BudgetState {
            quota: "nlp".into(),
            key: "cash/requests.nvidia.com/gpu.A100".into(),
            budget: crate::budget::from_quantity(Quantity::from_units(units)),
            ..Default::default()
        }
    }

    /// `state` as admission reads it, refusing work without a run time.
    fn gpu_view<'a>(
        state: &'a BudgetState,
        qos: &'a QosMultipliers,
        prices: &'a PriceList,
    ) -> BudgetView<'a> {
        BudgetView {
            state,
            target: GPU,
            without_run_time: WithoutRunTime::Refuse,
            qos,
            prices,
        }
    }

    /// What a whole round's `decisions` say of `c`, as `would_queue_at`
    /// answers.
    fn round_says(decisions: &[Decision], c: &Queued) -> Check {
        match decisions
            .iter()
            .find(|d| d.workload_ref() == c.workload_ref)
        {
            Some(Decision::Wait(w)) if w.reason.waiting() == Waiting::Never => {
                Check::Never(w.reason.clone())
            }
            Some(Decision::Wait(w)) => Check::Queues {
                position: w.position,
                reason: w.reason.clone(),
            },
            _ => Check::AdmitsNow,
        }
    }

    proptest::proptest! {
        /// The review's walk up to the candidate's turn gives what a whole
        /// round over the queue and the candidate gives for it: admitted,
        /// or waiting at the same place for the same reason, under either
        /// order, with entries that never fit, a blocked head and entries
        /// of every priority around it.
        #[test]
        fn the_walk_to_the_candidate_decides_as_the_whole_round(
            hard in 1i64..24,
            used in 0i64..24,
            entries in proptest::collection::vec((0i32..3, 0i64..40, 1i64..30), 0..24),
            candidate in (0i32..3, 1i64..12),
            strict in proptest::bool::ANY,
            aged in proptest::bool::ANY,
        ) {
            let used = used.min(hard);
            let pool = Pool::new(&quota(hard, used), &ResourceList::new());
            let p = if strict {
                QueuePolicy::queue()
            } else {
                QueuePolicy {
                    order: Order::BestEffortFifo { aging_seconds: 600 },
                    ..QueuePolicy::queue()
                }
            };
            let now = T0 + 100 + if aged { 600_000 } else { 0 };
            let q: Vec<Queued> = entries
                .iter()
                .enumerate()
                .map(|(i, &(prio, at, cards))| job(&format!("e{i}"), prio, at, cards))
                .collect();
            let c = job("new", candidate.0, 100, candidate.1);
            let mut all = q.clone();
            all.push(c.clone());
            let want = round_says(&next_admissions(&all, &pool, &[], &p, now), &c);
            let got = would_queue_at(&q, &c, &pool, &[], &p, now);
            // A candidate that does not fit now is judged alone: its place
            // counts every entry ordered ahead (the next round restates
            // it); its decision and reason are the round's.
            let fits_now = pool.fits(c.usage()).is_ok();
            match (&got, &want) {
                (
                    Check::Queues { position: a, reason: r },
                    Check::Queues { position: b, reason: s },
                ) if !fits_now => {
                    proptest::prop_assert!(a >= b);
                    proptest::prop_assert_eq!(r.waiting(), s.waiting());
                }
                _ => proptest::prop_assert_eq!(got, want),
            }
        }

        /// The same with a card-hour budget (entries with and without a
        /// declared run time) and the submitters' decayed usage ordering
        /// entries of one priority: the budget's trial states and the
        /// fair order are walked as the round walks them.
        #[test]
        fn the_walk_decides_as_the_round_with_budgets_and_submitters(
            hard in 1i64..24,
            budget in 0i64..80,
            entries in proptest::collection::vec(
                (0i32..3, 0i64..40, 1i64..12, proptest::option::of(1i64..4), 0usize..3),
                0..16,
            ),
            candidate in (0i32..3, 1i64..8, proptest::option::of(1i64..4), 0usize..3),
            usage in proptest::collection::vec(0u128..1_000, 3),
            aged in proptest::bool::ANY,
        ) {
            let state = gpu_budget(budget);
            let (qos, prices) = (QosMultipliers::default(), PriceList::default());
            let view = gpu_view(&state, &qos, &prices);
            let users = ["ann", "bob", "cy"];
            let raw = users
                .iter()
                .zip(&usage)
                .filter(|(_, u)| **u > 0)
                .map(|(n, u)| (n.to_string(), [(GPU.to_string(), *u)].into()))
                .collect();
            let pool = Pool::new(&quota(hard, 0), &ResourceList::new())
                .with_submitters(std::sync::Arc::new(crate::submitters::Usages::from_decayed(raw)));
            let p = QueuePolicy {
                order: Order::BestEffortFifo { aging_seconds: 600 },
                submitter_half_life_days: Some(7),
                ..QueuePolicy::queue()
            };
            proptest::prop_assert!(p.orders_by_submitters());
            let now = T0 + 100 + if aged { 600_000 } else { 0 };
            let make = |name: &str, (prio, at, cards, hours, by): (i32, i64, i64, Option<i64>, usize)| {
                let mut j = job(name, prio, at, cards);
                j.run_ms = hours.map(|h| h * 3_600_000);
                j.submitted_by = Some(users[by].to_string());
                j
            };
            let q: Vec<Queued> = entries
                .iter()
                .enumerate()
                .map(|(i, e)| make(&format!("e{i}"), *e))
                .collect();
            let c = make("new", (candidate.0, 100, candidate.1, candidate.2, candidate.3));
            let budgets = std::slice::from_ref(&view);
            let mut all = q.clone();
            all.push(c.clone());
            // An estimate's walk without decisions takes what the round
            // admits, in its order, and leaves the same pool.
            let (decisions, after, _) = round(&all, &pool, budgets, &p, now);
            let (taken, left) = admitted(&all, &pool, budgets, &p, now);
            let admits: Vec<&str> = decisions
                .iter()
                .filter(|d| matches!(d, Decision::Admit(_)))
                .map(Decision::workload_ref)
                .collect();
            let took: Vec<&str> = taken.iter().map(|&i| all[i].workload_ref.as_str()).collect();
            proptest::prop_assert_eq!(took, admits);
            proptest::prop_assert_eq!(left.used(), after.used());
            let want = round_says(&next_admissions(&all, &pool, budgets, &p, now), &c);
            let got = would_queue_at(&q, &c, &pool, budgets, &p, now);
            let mut states = states_of(budgets);
            let fits_now = try_fit(&pool, budgets, &mut states, &c, c.usage(), now).is_ok();
            // One that does not fit now is judged alone, before any walk
            // (a budget that can never take it says so at once, where the
            // round would first name the room it waits for): only the
            // walk is held to the round here.
            if fits_now {
                proptest::prop_assert_eq!(got, want);
            }
        }
    }
}
