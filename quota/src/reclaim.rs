//! Reclaim (§5, seeds 001 and 004): when a lender needs back what its
//! siblings borrowed, pick whole workloads of the borrowers to shrink or
//! stop, warn their owners, and act only after a grace period — unless the
//! pressure went away meanwhile.
//!
//! Pure, one parent at a time. The controller, for each parent:
//! 1. reads the children's standings (`borrow::Standing`) and, per child,
//!    the usage of its pods that are unschedulable for want of resources;
//! 2. `need(parent, children, pending)`: what must come back;
//! 3. `plan(borrowers, need)`: which workloads, and how (`Victim`s);
//! 4. per borrower, `reconcile_marks(quota, status.reclaim, plan, now,
//!    grace)`: writes the marks back (CAS on the borrower), notifies the
//!    owners of `marked`, then executes `due` (patch the workload: scale
//!    or suspend) and tells the owners of `cleared` the reclaim is off.

use crate::borrow::Standing;
use crate::keys::cash_target;
use crate::object::budgets::Exhaustion;
use crate::object::marks::{Action, Mark, Origin};
use crate::object::Quota;
use crate::quantity::{div_ceil, Quantity};
use crate::resources::{self, ResourceList};
use crate::time;
use crate::workload::PodSet;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// Annotation on a workload: the fewest replicas it can run with (elastic
/// training, seed 001: "3~6 replicas are all acceptable"). Reclaim scales
/// such a workload down towards it before stopping anything.
pub const MIN_REPLICAS_ANNOTATION: &str = "bizrq.io/min-replicas";

/// Label or annotation `"true"` on a workload: an online service, reclaimed
/// after batch work of the same priority. (A PriorityClass at or above a
/// configured value marks online services too; that is the caller's rule.)
pub const ONLINE_LABEL: &str = "bizrq.io/online";

/// How long a marked workload keeps running before it is reclaimed, unless
/// configured otherwise.
pub const DEFAULT_GRACE_MS: i64 = 300_000;

/// `bizrq.io/min-replicas` of a workload, if set to a count.
pub fn min_replicas(annotations: &BTreeMap<String, String>) -> Option<i64> {
    annotations
        .get(MIN_REPLICAS_ANNOTATION)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0)
}

/// Whether labels or annotations mark a workload online.
pub fn is_online(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> bool {
    [labels, annotations].iter().any(|m| {
        m.get(ONLINE_LABEL)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    })
}

/// How a workload of its kind can be stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Job-like: suspended (its parallelism can also be lowered).
    Suspend,
    /// Has replicas: scaled down, to zero to stop it.
    Scale,
    /// Neither: reclaim leaves it alone.
    Never,
}

impl Stop {
    /// How reclaim stops a workload of `adapter`'s kind.
    pub fn of(adapter: &crate::workload::Adapter) -> Stop {
        if !adapter.suspend_path.is_empty() {
            Stop::Suspend
        } else if adapter.scalable {
            Stop::Scale
        } else {
            Stop::Never
        }
    }
}

/// A workload of a borrower that reclaim may take from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `group/Kind/namespace/name`, as in `status.workloads`.
    pub workload_ref: String,
    pub stop: Stop,
    /// PriorityClass value of its pods (0 without one).
    pub priority: i32,
    /// An online service (see `is_online`): after batch work of its priority.
    pub online: bool,
    pub created_ms: i64,
    /// What it runs now: count × per-pod usage.
    pub pod_sets: Vec<PodSet>,
    /// `bizrq.io/min-replicas`: it is elastic down to this many, if it has
    /// a single pod set (multi-set kinds are stopped whole).
    pub min_replicas: Option<i64>,
    /// Already marked in its quota's `status.reclaim`: chosen before the
    /// unmarked of the same phase, so a warned victim is not swapped each
    /// round for a newer workload (which would restart its grace forever).
    pub marked: bool,
    /// Its GPUs sit idle now (real usage, docs/real-usage.md: idle for its
    /// quota's `idle.showAfter`): taken before busy work, so a borrower
    /// gives back first what it holds and does not use.
    pub idle: bool,
}

impl Candidate {
    fn usage(&self) -> ResourceList {
        let mut out = ResourceList::new();
        for s in &self.pod_sets {
            resources::add_into(&mut out, &s.usage(s.count));
        }
        out
    }

    /// (pod set, current count, floor) when it can shrink without stopping.
    /// Shrinking stops at one replica even for a minimum of 0: going to
    /// zero is stopping, done in the stop phase, in the kind's own way.
    fn elastic(&self) -> Option<(&PodSet, i64, i64)> {
        let floor = self.min_replicas?.max(1);
        match self.pod_sets.as_slice() {
            [set] if floor < set.count => Some((set, set.count, floor)),
            _ => None,
        }
    }

    fn stop_action(&self) -> Action {
        match self.stop {
            Stop::Suspend => Action::Suspend,
            _ => Action::ScaleTo(0),
        }
    }
}

/// A child that borrows from the parent under pressure, its debt, and its
/// workloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Borrower {
    pub quota: String,
    /// What it uses beyond its hard (`Standing::borrowed`): reclaim takes no
    /// more from it than this, but for the rest of the last whole workload.
    pub borrowed: ResourceList,
    pub workloads: Vec<Candidate>,
}

/// A workload to reclaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub quota: String,
    pub workload_ref: String,
    pub action: Action,
    pub frees: ResourceList,
}

fn positive(list: &ResourceList) -> ResourceList {
    list.iter()
        .filter(|(_, v)| v.nanos() > 0)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// (a) Pressure in quota terms: how far the parent's subtree uses more than
/// the parent can give — parent.selfUsed + Σ children's used beyond
/// max(parent.hard, parent.used) — capped by what the children borrow, per
/// non-cash key of the parent's hard. A parent over its own hard (lowered,
/// or itself borrowing from above) is its own parent's matter: its children
/// answer only for what their borrowing adds beyond their siblings' idle
/// guarantee and the parent's remainder. A child's own children are judged
/// at that child (each level reclaims its own loans). `children` must hold
/// every child.
pub fn quota_pressure(parent: &Quota, children: &BTreeMap<String, Standing>) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, hard) in &parent.spec.hard {
        if cash_target(k).is_some() {
            continue;
        }
        let mut total = resources::get(&parent.status.self_used, k);
        let mut borrowed = Quantity::ZERO;
        for s in children.values() {
            total = total.saturating_add(resources::get(&s.used, k));
            borrowed = borrowed.saturating_add(resources::get(&s.borrowed, k));
        }
        let ceiling = (*hard).max(resources::get(&parent.status.used, k));
        let over = total.saturating_sub(ceiling).min(borrowed);
        if over.nanos() > 0 {
            out.insert(k.clone(), over);
        }
    }
    out
}

/// (b) Pressure in physical terms (seed 001): children within their
/// guarantee whose pods cannot be scheduled — the cluster is full — while
/// siblings borrow. `pending` is, per child, the usage of its pods that are
/// unschedulable for want of resources (not for a node selector or a
/// taint). Per key, what is pending in children not borrowing that key
/// (used ≤ hard), capped by what the children borrow.
pub fn physical_pressure(
    children: &BTreeMap<String, Standing>,
    pending: &BTreeMap<String, ResourceList>,
) -> ResourceList {
    let mut wanted = ResourceList::new();
    for (child, usage) in pending {
        let Some(s) = children.get(child) else {
            continue;
        };
        for (k, q) in usage {
            let Some(h) = s.hard.get(k) else {
                continue;
            };
            if q.nanos() > 0 && resources::get(&s.used, k) <= *h {
                let e = wanted.entry(k.clone()).or_insert(Quantity::ZERO);
                *e = e.saturating_add(*q);
            }
        }
    }
    let borrowed = resources::sum(children.values().map(|s| &s.borrowed));
    wanted
        .into_iter()
        .filter_map(|(k, w)| {
            let n = w.min(resources::get(&borrowed, &k));
            (n.nanos() > 0).then_some((k, n))
        })
        .collect()
}

/// What reclaim must take back from the parent's borrowers: per key, the
/// larger of the quota and the physical pressure (two views of one
/// shortage, not two shortages).
pub fn need(
    parent: &Quota,
    children: &BTreeMap<String, Standing>,
    pending: &BTreeMap<String, ResourceList>,
) -> ResourceList {
    let mut out = quota_pressure(parent, children);
    for (k, v) in physical_pressure(children, pending) {
        let e = out.entry(k).or_insert(Quantity::ZERO);
        *e = (*e).max(v);
    }
    out
}

/// Whether taking `frees` from a borrower still owing `debt` helps `need`.
fn helps(frees: &ResourceList, need: &ResourceList, debt: &ResourceList) -> bool {
    need.iter().any(|(k, n)| {
        n.nanos() > 0 && resources::get(debt, k).nanos() > 0 && resources::get(frees, k).nanos() > 0
    })
}

fn take(need: &mut ResourceList, debt: &mut ResourceList, frees: &ResourceList) {
    for list in [need, debt] {
        for (k, v) in list.iter_mut() {
            *v = v
                .saturating_sub(resources::get(frees, k))
                .max(Quantity::ZERO);
        }
        list.retain(|_, v| v.nanos() > 0);
    }
}

/// Pods of `set` to remove so that `need` (as far as `debt` goes) is met.
fn pods_needed(set: &PodSet, need: &ResourceList, debt: &ResourceList) -> i64 {
    let mut pods = 0i128;
    for (k, n) in need {
        let per = resources::get(&set.per_pod, k);
        let owed = (*n).min(resources::get(debt, k));
        if per.nanos() > 0 && owed.nanos() > 0 {
            pods = pods.max(div_ceil(owed.nanos(), per.nanos()));
        }
    }
    pods.min(i64::MAX as i128) as i64
}

/// The order reclaim takes workloads in, first first: already marked,
/// idle, lowest priority, batch before online, newest, then by reference.
/// Also the order budget exhaustion suspends in (`budget::refund`).
pub fn order_key(c: &Candidate) -> (bool, bool, i32, bool, Reverse<i64>, &str) {
    (
        !c.marked,
        !c.idle,
        c.priority,
        c.online,
        Reverse(c.created_ms),
        c.workload_ref.as_str(),
    )
}

/// Which workloads of the borrowers to reclaim to cover `need`, in order:
///
/// - candidates are taken lowest priority first, batch before online,
///   newest first (already-marked ones first), ties by reference;
/// - first every elastic workload is scaled down — only as far as still
///   needed, never below its minimum nor to zero — and only then are
///   workloads stopped whole: Jobs suspended, others scaled to zero; kinds
///   that can be neither are left alone;
/// - a workload is taken only if it frees a key that is still needed and
///   that its borrower still owes: no borrower gives back more than it
///   borrowed, except for the rest of a whole workload;
/// - it stops as soon as the need is covered on every key.
///
/// A workload scaled down and then stopped appears once, with the stop.
/// Deterministic: the same borrowers in any order give the same plan.
pub fn plan(borrowers: &[Borrower], need: &ResourceList) -> Vec<Victim> {
    plan_with(borrowers, need, None)
}

/// `plan`, with fair sharing (docs/queueing.md, "Fair sharing"): whole
/// workloads are taken from the borrower whose dominant share of what the
/// parent can lend (`lendable`, with its weight in `weights`, 1 when
/// absent) is the largest, weighed again after each workload taken (what
/// it still borrows falls), marked ones still first; within a borrower in
/// the same order as `plan`. Elastic workloads are scaled down first, as
/// in `plan`.
pub fn plan_fair(
    borrowers: &[Borrower],
    need: &ResourceList,
    weights: &BTreeMap<String, crate::object::fair_sharing::Weight>,
    lendable: &ResourceList,
) -> Vec<Victim> {
    plan_with(borrowers, need, Some((weights, lendable)))
}

type Fair<'a> = (
    &'a BTreeMap<String, crate::object::fair_sharing::Weight>,
    &'a ResourceList,
);

fn plan_with(borrowers: &[Borrower], need: &ResourceList, fair: Option<Fair<'_>>) -> Vec<Victim> {
    let mut need = positive(need);
    let mut debt: Vec<ResourceList> = borrowers.iter().map(|b| positive(&b.borrowed)).collect();
    let mut order: Vec<(usize, usize)> = borrowers
        .iter()
        .enumerate()
        .flat_map(|(bi, b)| {
            b.workloads
                .iter()
                .enumerate()
                .filter(|(_, c)| c.stop != Stop::Never)
                .map(move |(ci, _)| (bi, ci))
        })
        .collect();
    order.sort_by_key(|&(bi, ci)| {
        (
            order_key(&borrowers[bi].workloads[ci]),
            borrowers[bi].quota.as_str(),
        )
    });

    let mut victims: Vec<Victim> = Vec::new();
    let mut scaled: BTreeMap<(usize, usize), (usize, i64)> = BTreeMap::new();
    for &(bi, ci) in &order {
        if need.is_empty() {
            return victims;
        }
        let c = &borrowers[bi].workloads[ci];
        let Some((set, count, floor)) = c.elastic() else {
            continue;
        };
        let to = (count - pods_needed(set, &need, &debt[bi])).max(floor);
        if to >= count {
            continue;
        }
        let frees = set.usage(count - to);
        if !helps(&frees, &need, &debt[bi]) {
            continue;
        }
        take(&mut need, &mut debt[bi], &frees);
        scaled.insert((bi, ci), (victims.len(), to));
        victims.push(Victim {
            quota: borrowers[bi].quota.clone(),
            workload_ref: c.workload_ref.clone(),
            action: Action::ScaleTo(to),
            frees,
        });
    }
    // The stop phase: in `order`, or with fair sharing, from the borrower
    // with the largest share at each step.
    let stop_order = &order;
    let mut taken = vec![false; stop_order.len()];
    // Without fairness one pass in order: a workload that does not help
    // now never will (need and debts only shrink).
    let mut cursor = 0;
    loop {
        if need.is_empty() {
            break;
        }
        let left_of = |bi: usize, ci: usize| {
            let c = &borrowers[bi].workloads[ci];
            match scaled.get(&(bi, ci)) {
                Some(&(_, to)) => c.pod_sets[0].usage(to),
                None => c.usage(),
            }
        };
        let helpful = |i: usize, need: &ResourceList, debt: &[ResourceList]| {
            let (bi, ci) = stop_order[i];
            let left = left_of(bi, ci);
            !left.is_empty() && helps(&left, need, &debt[bi])
        };
        let next = match fair {
            None => (cursor..stop_order.len()).find(|&i| helpful(i, &need, &debt)),
            Some((weights, lendable)) => {
                // Per borrower, its first helpful workload; then the one
                // marked, else of the largest share, else by name.
                let mut firsts: BTreeMap<usize, usize> = BTreeMap::new();
                for i in 0..stop_order.len() {
                    let bi = stop_order[i].0;
                    if !taken[i] && !firsts.contains_key(&bi) && helpful(i, &need, &debt) {
                        firsts.insert(bi, i);
                    }
                }
                firsts
                    .into_iter()
                    .map(|(bi, i)| {
                        let b = &borrowers[bi];
                        let w = weights.get(&b.quota).copied().unwrap_or_default();
                        let share = crate::fair::share(&debt[bi], lendable, w).share;
                        let marked = b.workloads[stop_order[i].1].marked;
                        ((marked, share, Reverse(b.quota.as_str())), i)
                    })
                    .max_by(|a, b| a.0.cmp(&b.0))
                    .map(|(_, i)| i)
            }
        };
        let Some(i) = next else { break };
        taken[i] = true;
        cursor = i + 1;
        let (bi, ci) = stop_order[i];
        let c = &borrowers[bi].workloads[ci];
        let left = left_of(bi, ci);
        take(&mut need, &mut debt[bi], &left);
        match scaled.get(&(bi, ci)) {
            Some(&(at, _)) => {
                let v = &mut victims[at];
                v.action = c.stop_action();
                resources::add_into(&mut v.frees, &left);
            }
            None => victims.push(Victim {
                quota: borrowers[bi].quota.clone(),
                workload_ref: c.workload_ref.clone(),
                action: c.stop_action(),
                frees: left,
            }),
        }
    }
    victims
}

/// Fair reclaim between siblings (docs/queueing.md §11; Kueue's
/// preemption within a cohort under fair sharing): `taker`'s queue head
/// (`ask`) waits for idle room its parent cannot lend (`room`: what it
/// could still lend it). Whole workloads are taken from the siblings that
/// borrow (`borrowers`, their standing in `siblings` by name), from the
/// largest share first, weighed again after each, and from a sibling only
/// while `fair::may_take` allows it under `strategy` — so a taker never
/// ends above its victim (`LessThanOrEqualToFinalShare`). Within a
/// sibling in `order_key` order (marked first, lowest priority, newest),
/// only workloads that free a key still short, never the taker's own.
/// Nothing at all unless what is allowed makes room for the head: no
/// work is stopped for a head that would still wait.
pub fn plan_for_fair_share(
    taker: &crate::fair::Sibling,
    ask: &ResourceList,
    room: &ResourceList,
    strategy: crate::object::fair_sharing::Strategy,
    borrowers: &[Borrower],
    siblings: &BTreeMap<String, crate::fair::Sibling>,
    lendable: &ResourceList,
) -> Vec<Victim> {
    let mut need: ResourceList = taker
        .more_borrowed(ask)
        .into_iter()
        .filter_map(|(k, m)| {
            let short = m.saturating_sub(resources::get(room, &k));
            (short.nanos() > 0).then_some((k, short))
        })
        .collect();
    if need.is_empty() {
        return Vec::new();
    }
    let mut sibs: Vec<Option<crate::fair::Sibling>> = borrowers
        .iter()
        .map(|b| {
            siblings
                .get(&b.quota)
                .cloned()
                .filter(|_| b.quota != taker.name)
        })
        .collect();
    // `LessThanInitialShare` weighs each victim as it was before anything
    // was taken; the final-share rule as it stands after each taking.
    let initial = sibs.clone();
    let mut orders: Vec<Vec<&Candidate>> = borrowers
        .iter()
        .map(|b| {
            let mut c: Vec<&Candidate> = b
                .workloads
                .iter()
                .filter(|c| c.stop != Stop::Never)
                .collect();
            c.sort_by(|x, y| order_key(x).cmp(&order_key(y)));
            c
        })
        .collect();
    let mut victims = Vec::new();
    while !need.is_empty() {
        // The sibling of the largest share with a workload that helps.
        let pick = (0..borrowers.len())
            .filter_map(|bi| {
                let s = sibs[bi].as_ref()?;
                let share = s.share(lendable).share;
                (!share.is_zero()).then_some((share, std::cmp::Reverse(&borrowers[bi].quota), bi))
            })
            .filter(|(_, _, bi)| {
                orders[*bi].iter().any(|c| {
                    need.keys()
                        .any(|k| resources::get(&c.usage(), k).nanos() > 0)
                })
            })
            .max_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
            .map(|(_, _, bi)| bi);
        let Some(bi) = pick else { break };
        let at = orders[bi]
            .iter()
            .position(|c| {
                need.keys()
                    .any(|k| resources::get(&c.usage(), k).nanos() > 0)
            })
            .expect("the pick has one");
        let c = orders[bi].remove(at);
        let frees = c.usage();
        let victim = match strategy {
            crate::object::fair_sharing::Strategy::LessThanInitialShare => initial[bi].as_ref(),
            crate::object::fair_sharing::Strategy::LessThanOrEqualToFinalShare => sibs[bi].as_ref(),
        }
        .expect("picked");
        if !crate::fair::may_take(strategy, taker, ask, victim, &frees, lendable) {
            // Taking this would leave the taker above it: no more from it.
            sibs[bi] = None;
            continue;
        }
        if let Some(v) = sibs[bi].as_mut() {
            resources::sub_into(&mut v.used, &frees);
        }
        for (k, n) in need.iter_mut() {
            *n = n.saturating_sub(resources::get(&frees, k));
        }
        need.retain(|_, n| n.nanos() > 0);
        victims.push(Victim {
            quota: borrowers[bi].quota.clone(),
            workload_ref: c.workload_ref.clone(),
            action: c.stop_action(),
            frees,
        });
    }
    if need.is_empty() {
        victims
    } else {
        Vec::new()
    }
}

/// Fair reclaim at a parent (docs/queueing.md §11): of its children whose
/// queue policy chooses a fair-share rule (`preemption.fairShare`) and
/// whose queue head waits for quota it would have to borrow, the one the
/// pick rule puts first (smallest share after its head) for which
/// `plan_for_fair_share` finds room; its victims, or none. One taker at
/// a time: the next reclaim weighs the others again.
pub fn for_fair_share(parent: &Quota, kids: &[&Quota], borrowers: &[Borrower]) -> Vec<Victim> {
    use crate::fair::{Head, Sibling};
    let standings = crate::borrow::Standing::of_all(kids.iter().copied());
    let lendable = crate::fair::lendable(parent);
    let siblings: BTreeMap<String, Sibling> = kids
        .iter()
        .map(|k| (k.name().to_string(), Sibling::of(k)))
        .collect();
    let mut takers: Vec<(Sibling, Head)> = Vec::new();
    let mut rules = Vec::new();
    for k in kids {
        let Some(strategy) = k.spec.queueing.fair_share else {
            continue;
        };
        let Some(head) = k.status.queue.first() else {
            continue;
        };
        if k.spec.max.is_empty() || head.waiting != crate::object::queue::Waiting::Quota {
            continue;
        }
        takers.push((
            Sibling::of(k),
            Head {
                usage: head.work.usage().clone(),
                priority: head.work.priority,
                since_ms: head.work.submitted_ms,
            },
        ));
        rules.push((*k, strategy));
    }
    while let Some(i) = crate::fair::pick(&takers, &lendable) {
        let (taker, head) = takers.remove(i);
        let (k, strategy) = rules.remove(i);
        let room = crate::borrow::idle_room(parent, k, &standings);
        let plan = plan_for_fair_share(
            &taker,
            &head.usage,
            &room,
            strategy,
            borrowers,
            &siblings,
            &lendable,
        );
        if !plan.is_empty() {
            return plan;
        }
    }
    Vec::new()
}

/// What `reconcile_marks` decided for one borrower.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkOutcome {
    /// The borrower's new `status.reclaim`.
    pub marks: BTreeMap<String, Mark>,
    /// Newly marked, or marked before and now planned differently: warn
    /// the owners (with the mark's due time).
    pub marked: Vec<Victim>,
    /// Grace is over and still needed: execute now. They are no longer in
    /// `marks`; a workload planned again later is marked afresh.
    pub due: Vec<Victim>,
    /// Marks dropped because the plan no longer needs them (the pressure
    /// went away, or the workload did): tell the owners it is off.
    pub cleared: Vec<String>,
    /// Whether `marks` differs from the ledger passed in.
    pub changed: bool,
}

/// Delayed reclaim for borrower `quota`, given its current marks and the
/// parent's current plan (victims of other quotas are ignored):
/// - a victim without a mark is marked, due `grace_ms` from now;
/// - a marked victim whose action changed keeps its due time, unless it now
///   stops a workload that was only to shrink: that is a new warning, with
///   a new grace (at most once per workload, so never postponed forever);
/// - a marked victim past its due time is due (and leaves the ledger);
/// - a mark the plan no longer has is cleared.
///
/// Write `marks` back (CAS on the borrower) before executing `due`: a lost
/// write then at worst re-marks a victim, never acts twice without grace.
///
/// The borrowing reclaim's marks (`Origin::Borrow`); marks of the queue's
/// preemption are left as they are (`reconcile_marks_of`).
pub fn reconcile_marks(
    quota: &str,
    marks: &BTreeMap<String, Mark>,
    plan: &[Victim],
    now_ms: i64,
    grace_ms: i64,
) -> MarkOutcome {
    reconcile_marks_of(Origin::Borrow, quota, marks, plan, now_ms, grace_ms)
}

/// `reconcile_marks` for the marks of `origin` only: marks of the other
/// origin stay in `marks` untouched and are never cleared; a victim the
/// other side has already marked keeps that mark (it is not marked twice,
/// nor executed by this side: the other side suspends it when due, or
/// clears it, and then this side's next plan marks it afresh if still
/// needed).
pub fn reconcile_marks_of(
    origin: Origin,
    quota: &str,
    marks: &BTreeMap<String, Mark>,
    plan: &[Victim],
    now_ms: i64,
    grace_ms: i64,
) -> MarkOutcome {
    let mut out = MarkOutcome::default();
    let now = time::format_rfc3339(now_ms);
    let fresh = |v: &Victim| Mark {
        action: v.action,
        frees: v.frees.clone(),
        marked: now.clone(),
        due: time::format_rfc3339(now_ms.saturating_add(grace_ms)),
        origin,
    };
    for (w, m) in marks.iter().filter(|(_, m)| m.origin != origin) {
        out.marks.insert(w.clone(), m.clone());
    }
    for v in plan.iter().filter(|v| v.quota == quota) {
        match marks.get(&v.workload_ref) {
            Some(m) if m.origin != origin => {}
            None => {
                out.marks.insert(v.workload_ref.clone(), fresh(v));
                out.marked.push(v.clone());
            }
            Some(m) => {
                let due = time::parse_rfc3339(&m.due).unwrap_or(now_ms);
                let escalates = v.action.stops() && !m.action.stops();
                if escalates {
                    out.marks.insert(v.workload_ref.clone(), fresh(v));
                    out.marked.push(v.clone());
                } else if now_ms >= due {
                    out.due.push(v.clone());
                } else {
                    if m.action != v.action || m.frees != v.frees {
                        out.marked.push(v.clone());
                    }
                    out.marks.insert(
                        v.workload_ref.clone(),
                        Mark {
                            action: v.action,
                            frees: v.frees.clone(),
                            ..m.clone()
                        },
                    );
                }
            }
        }
    }
    out.cleared = marks
        .iter()
        .filter(|(_, m)| m.origin == origin)
        .map(|(w, _)| w)
        .filter(|w| {
            !plan
                .iter()
                .any(|v| v.quota == quota && &v.workload_ref == *w)
        })
        .cloned()
        .collect();
    out.changed = out.marks != *marks;
    out
}

/// What to do about an exhausted budget now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExhaustionPlan {
    /// Since when the budget is spent, for the caller to keep (None: it is
    /// not spent, forget any earlier time).
    pub since_ms: Option<i64>,
    /// When the suspension is due (None: the policy suspends nothing).
    pub due_ms: Option<i64>,
    /// Whether to suspend now (`due_ms` reached).
    pub act: bool,
    /// The batch workloads using the budget, in the order to suspend them
    /// (to warn their owners before `due_ms`, to suspend at it).
    pub suspend: Vec<String>,
}

/// The plan for a budget with `left` (available − spent, acc) on
/// `target` (its usage key). `since_ms` is the caller's record of when it
/// was first seen spent. Candidates are the quota's workloads as reclaim
/// sees them; only suspendable batch work that uses `target` is taken —
/// never online services, never kinds that can only be scaled.
pub fn on_exhausted(
    policy: &Exhaustion,
    left: i128,
    since_ms: Option<i64>,
    now_ms: i64,
    target: &str,
    candidates: &[Candidate],
) -> ExhaustionPlan {
    if left > 0 {
        return ExhaustionPlan::default();
    }
    let since = since_ms.unwrap_or(now_ms).min(now_ms);
    let Exhaustion::SuspendBatch { grace_seconds } = *policy else {
        return ExhaustionPlan {
            since_ms: Some(since),
            ..Default::default()
        };
    };
    let due = since.saturating_add(grace_seconds.max(0).saturating_mul(1000));
    let mut batch: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| !c.online && c.stop == Stop::Suspend)
        .filter(|c| {
            c.pod_sets
                .iter()
                .any(|s| s.count > 0 && resources::get(&s.per_pod, target).nanos() > 0)
        })
        .collect();
    batch.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
    ExhaustionPlan {
        since_ms: Some(since),
        due_ms: Some(due),
        act: now_ms >= due,
        suspend: batch.into_iter().map(|c| c.workload_ref.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: &str = "requests.cpu";
    const GPU: &str = "requests.nvidia.com/gpu";
    const T0: i64 = 1_800_000_000_000;

    fn list(pairs: &[(&str, i64)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
            .collect()
    }
    fn cand(wref: &str, stop: Stop, count: i64, per_pod: &[(&str, i64)]) -> Candidate {
        Candidate {
            workload_ref: wref.into(),
            stop,
            priority: 0,
            online: false,
            created_ms: T0,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count,
                per_pod: list(per_pod),
                qos: None,
            }],
            min_replicas: None,
            marked: false,
            idle: false,
        }
    }
    fn borrower(quota: &str, borrowed: &[(&str, i64)], workloads: Vec<Candidate>) -> Borrower {
        Borrower {
            quota: quota.into(),
            borrowed: list(borrowed),
            workloads,
        }
    }
    fn refs(v: &[Victim]) -> Vec<(&str, Action)> {
        v.iter()
            .map(|v| (v.workload_ref.as_str(), v.action))
            .collect()
    }

    #[test]
    fn order_is_priority_then_batch_then_newest() {
        let mut hi = cand("hi", Stop::Suspend, 1, &[(CPU, 1)]);
        hi.priority = 10;
        let mut online = cand("online", Stop::Scale, 1, &[(CPU, 1)]);
        online.online = true;
        let old = cand("old", Stop::Suspend, 1, &[(CPU, 1)]);
        let mut new = cand("new", Stop::Suspend, 1, &[(CPU, 1)]);
        new.created_ms = T0 + 1;
        let b = borrower("a", &[(CPU, 10)], vec![hi, online, old, new]);
        let p = plan(std::slice::from_ref(&b), &list(&[(CPU, 4)]));
        assert_eq!(
            refs(&p),
            [
                ("new", Action::Suspend),
                ("old", Action::Suspend),
                ("online", Action::ScaleTo(0)),
                ("hi", Action::Suspend)
            ]
        );
        // Stops as soon as covered.
        assert_eq!(plan(&[b], &list(&[(CPU, 2)])).len(), 2);
    }

    /// A borrower gives back first what it holds and does not use: an
    /// idle workload before busier work of lower priority.
    #[test]
    fn an_idle_workload_is_reclaimed_before_busy_ones() {
        let busy = cand("busy", Stop::Suspend, 1, &[(GPU, 4)]);
        let mut idle = cand("idle", Stop::Suspend, 1, &[(GPU, 4)]);
        idle.idle = true;
        idle.priority = 100;
        let b = borrower("a", &[(GPU, 8)], vec![busy, idle]);
        let p = plan(std::slice::from_ref(&b), &list(&[(GPU, 4)]));
        assert_eq!(refs(&p), [("idle", Action::Suspend)]);
    }

    #[test]
    fn fair_reclaim_takes_from_the_largest_share_weighed_again_after_each() {
        use crate::object::fair_sharing::Weight;
        let jobs = |q: &str, n: usize| -> Vec<Candidate> {
            (0..n)
                .map(|i| {
                    let mut c = cand(&format!("{q}{i}"), Stop::Suspend, 1, &[(CPU, 2)]);
                    // a's are the lowest priority: `plan` takes them all.
                    c.priority = if q == "a" { 0 } else { 5 };
                    c
                })
                .collect()
        };
        // a borrows 4 (weight 1), b borrows 10 (weight 1), c 10 (weight 2).
        let bs = vec![
            borrower("a", &[(CPU, 4)], jobs("a", 2)),
            borrower("b", &[(CPU, 10)], jobs("b", 5)),
            borrower("c", &[(CPU, 10)], jobs("c", 5)),
        ];
        let lend = list(&[(CPU, 100)]);
        let need = list(&[(CPU, 10)]);
        // Without fairness: priority first, a's two jobs go first.
        let p = plan(&bs, &need);
        assert_eq!(p.iter().filter(|v| v.quota == "a").count(), 2);
        // With it: b (0.10) down to 0.04, then c (0.05), then a tie of
        // all three at 0.04 goes by name.
        let mut w = BTreeMap::new();
        w.insert("c".to_string(), Weight::from_milli(2000).unwrap());
        let p = plan_fair(&bs, &need, &w, &lend);
        let from: Vec<&str> = p.iter().map(|v| v.quota.as_str()).collect();
        assert_eq!(from, ["b", "b", "b", "c", "a"], "{p:?}");
        // Marked victims stay first, wherever their borrower stands.
        let mut marked = bs.clone();
        marked[0].workloads[1].marked = true;
        let p = plan_fair(&marked, &list(&[(CPU, 2)]), &w, &lend);
        assert_eq!(refs(&p), [("a1", Action::Suspend)]);
    }

    #[test]
    fn a_borrower_takes_from_a_sibling_only_while_it_stays_at_or_below_it() {
        use crate::fair::Sibling;
        use crate::object::fair_sharing::{Strategy, Weight};
        let sib = |n: &str, used: i64| Sibling {
            name: n.into(),
            hard: list(&[(CPU, 0)]),
            max: list(&[(CPU, 100)]),
            used: list(&[(CPU, used)]),
            weight: Weight::ONE,
        };
        let jobs = |q: &str, n: usize| -> Vec<Candidate> {
            (0..n)
                .map(|i| cand(&format!("{q}{i}"), Stop::Suspend, 1, &[(CPU, 2)]))
                .collect()
        };
        let lend = list(&[(CPU, 40)]);
        // t borrows 4, v 20 (10 Jobs of 2), w 14; the room is spent.
        let bs = vec![
            borrower("v", &[(CPU, 20)], jobs("v", 10)),
            borrower("w", &[(CPU, 14)], jobs("w", 7)),
        ];
        let sibs: BTreeMap<String, Sibling> = [("v", 20), ("w", 14), ("t", 4)]
            .into_iter()
            .map(|(n, u)| (n.to_string(), sib(n, u)))
            .collect();
        let t = sibs["t"].clone();
        let s = Strategy::LessThanOrEqualToFinalShare;
        // A head of 4: two of v's Jobs (v the largest), t ends at 8 ≤ 16.
        let p = plan_for_fair_share(
            &t,
            &list(&[(CPU, 4)]),
            &list(&[(CPU, 0)]),
            s,
            &bs,
            &sibs,
            &lend,
        );
        assert_eq!(
            p.iter().map(|v| v.quota.as_str()).collect::<Vec<_>>(),
            ["v", "v"]
        );
        // Room for half of it: one Job.
        let p = plan_for_fair_share(
            &t,
            &list(&[(CPU, 4)]),
            &list(&[(CPU, 2)]),
            s,
            &bs,
            &sibs,
            &lend,
        );
        assert_eq!(p.len(), 1);
        // It fits already: nothing.
        assert!(plan_for_fair_share(
            &t,
            &list(&[(CPU, 4)]),
            &list(&[(CPU, 4)]),
            s,
            &bs,
            &sibs,
            &lend
        )
        .is_empty());
        // A head of 12: t would end at 16; v gives 20 → 16 → 14 while
        // w (14) is taken alike; the final-share rule stops where the
        // victims would fall below 16: nothing, since it cannot be met.
        let p = plan_for_fair_share(
            &t,
            &list(&[(CPU, 12)]),
            &list(&[(CPU, 0)]),
            s,
            &bs,
            &sibs,
            &lend,
        );
        assert!(p.is_empty(), "{p:?}");
        // The initial-share rule allows more: t's 16 is below v's 20 as it
        // was, not below w's 14: six of v's Jobs.
        let i = Strategy::LessThanInitialShare;
        let p = plan_for_fair_share(
            &t,
            &list(&[(CPU, 12)]),
            &list(&[(CPU, 0)]),
            i,
            &bs,
            &sibs,
            &lend,
        );
        assert_eq!(p.len(), 6, "{p:?}");
        assert!(p.iter().all(|v| v.quota == "v"));
    }

    #[test]
    fn elastic_workloads_shrink_before_anything_stops() {
        let cheap = cand("cheap", Stop::Suspend, 1, &[(CPU, 2)]);
        let mut elastic = cand("elastic", Stop::Suspend, 6, &[(CPU, 1)]);
        elastic.priority = 100;
        elastic.min_replicas = Some(3);
        let b = borrower("a", &[(CPU, 10)], vec![cheap, elastic]);
        // 2 needed: the elastic job gives 2 of its 3 spare pods, the cheaper
        // job keeps running.
        let p = plan(std::slice::from_ref(&b), &list(&[(CPU, 2)]));
        assert_eq!(refs(&p), [("elastic", Action::ScaleTo(4))]);
        assert_eq!(p[0].frees, list(&[(CPU, 2)]));
        // 4 needed: down to its minimum (3), then the cheap job stops.
        let p = plan(std::slice::from_ref(&b), &list(&[(CPU, 4)]));
        assert_eq!(
            refs(&p),
            [("elastic", Action::ScaleTo(3)), ("cheap", Action::Suspend)]
        );
        // 8 needed: everything; the elastic job is stopped after all, once.
        let p = plan(&[b], &list(&[(CPU, 8)]));
        assert_eq!(
            refs(&p),
            [("elastic", Action::Suspend), ("cheap", Action::Suspend)]
        );
        assert_eq!(p[0].frees, list(&[(CPU, 6)]));
    }

    #[test]
    fn shrinking_stops_at_one_replica_and_a_job_is_then_suspended() {
        let mut job = cand("job", Stop::Suspend, 3, &[(CPU, 1)]);
        job.min_replicas = Some(0);
        let b = borrower("a", &[(CPU, 3)], vec![job]);
        assert_eq!(
            refs(&plan(std::slice::from_ref(&b), &list(&[(CPU, 2)]))),
            [("job", Action::ScaleTo(1))]
        );
        assert_eq!(
            refs(&plan(&[b], &list(&[(CPU, 3)]))),
            [("job", Action::Suspend)]
        );
    }

    #[test]
    fn no_borrower_gives_back_more_than_it_borrowed() {
        // a borrowed 1 and b 3; 4 needed. a gives one whole workload (2,
        // more than its 1: a whole workload must go), then nothing more.
        let a = borrower(
            "a",
            &[(CPU, 1)],
            vec![
                cand("a/1", Stop::Suspend, 1, &[(CPU, 2)]),
                cand("a/2", Stop::Suspend, 1, &[(CPU, 2)]),
            ],
        );
        let mut b2 = cand("b/2", Stop::Scale, 3, &[(CPU, 1)]);
        b2.priority = 5;
        let b = borrower("b", &[(CPU, 3)], vec![b2]);
        let p = plan(&[a, b], &list(&[(CPU, 4)]));
        assert_eq!(
            refs(&p),
            [("a/1", Action::Suspend), ("b/2", Action::ScaleTo(0))]
        );
    }

    #[test]
    fn only_workloads_that_free_a_needed_key_are_taken() {
        let a = borrower(
            "a",
            &[(GPU, 2), (CPU, 8)],
            vec![
                cand("cpu-only", Stop::Suspend, 4, &[(CPU, 2)]),
                cand("gpu", Stop::Suspend, 2, &[(CPU, 1), (GPU, 1)]),
                cand("fixed", Stop::Never, 2, &[(GPU, 1)]),
            ],
        );
        let p = plan(&[a], &list(&[(GPU, 2)]));
        assert_eq!(refs(&p), [("gpu", Action::Suspend)]);
        assert_eq!(p[0].frees, list(&[(CPU, 2), (GPU, 2)]));
    }

    #[test]
    fn the_plan_does_not_depend_on_input_order() {
        let mk = |q: &str| {
            borrower(
                q,
                &[(CPU, 3)],
                vec![
                    cand(&format!("{q}/x"), Stop::Suspend, 1, &[(CPU, 2)]),
                    cand(&format!("{q}/y"), Stop::Scale, 2, &[(CPU, 1)]),
                ],
            )
        };
        let (a, b) = (mk("a"), mk("b"));
        let mut b_rev = b.clone();
        b_rev.workloads.reverse();
        assert_eq!(
            plan(&[a.clone(), b.clone()], &list(&[(CPU, 5)])),
            plan(&[b_rev, a], &list(&[(CPU, 5)]))
        );
    }

    #[test]
    fn marked_victims_stay_chosen_over_newer_workloads() {
        let mut old = cand("old", Stop::Suspend, 1, &[(CPU, 2)]);
        old.marked = true;
        let mut new = cand("new", Stop::Suspend, 1, &[(CPU, 2)]);
        new.created_ms = T0 + 1;
        let p = plan(
            &[borrower("a", &[(CPU, 2)], vec![new, old])],
            &list(&[(CPU, 2)]),
        );
        assert_eq!(refs(&p), [("old", Action::Suspend)]);
    }

    #[test]
    fn quota_pressure_is_what_borrowing_adds_beyond_the_parent() {
        use crate::object::QuotaSpec;
        let mut p = Quota::new(
            "p",
            QuotaSpec {
                parent: String::new(),
                hard: list(&[(CPU, 18), ("cash/requests.cpu", 5)]),
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        for (name, hard) in [("a", 6), ("b", 12)] {
            crate::tree::carve(
                &mut p,
                name,
                &list(&[(CPU, hard), ("cash/requests.cpu", 0)]),
                "t",
            )
            .unwrap();
        }
        let standing = |hard: i64, used: i64, borrowed: i64| Standing {
            hard: list(&[(CPU, hard)]),
            used: list(&[(CPU, used)]),
            lent: ResourceList::new(),
            borrowed: list(&[(CPU, borrowed)]),
        };
        // a borrows 2 of b's idle guarantee: no pressure.
        let kids: BTreeMap<String, Standing> = [
            ("a".into(), standing(6, 8, 2)),
            ("b".into(), standing(12, 10, 0)),
        ]
        .into();
        assert!(quota_pressure(&p, &kids).is_empty());
        // b takes all of its guarantee back: 2 over, all of it a's loan.
        let kids: BTreeMap<String, Standing> = [
            ("a".into(), standing(6, 8, 2)),
            ("b".into(), standing(12, 12, 0)),
        ]
        .into();
        assert_eq!(quota_pressure(&p, &kids), list(&[(CPU, 2)]));
        // Over without anyone borrowing (b has no max; its hard was lowered
        // under its usage) is an over-quota alert, not reclaim's business.
        let kids: BTreeMap<String, Standing> = [
            ("a".into(), standing(6, 6, 0)),
            ("b".into(), standing(10, 14, 0)),
        ]
        .into();
        assert!(quota_pressure(&p, &kids).is_empty());
    }

    #[test]
    fn physical_pressure_counts_only_children_within_their_guarantee() {
        let s = |hard: i64, used: i64| Standing {
            hard: list(&[(CPU, hard)]),
            used: list(&[(CPU, used)]),
            lent: ResourceList::new(),
            borrowed: list(&[(CPU, (used - hard).max(0))]),
        };
        let kids: BTreeMap<String, Standing> =
            [("a".into(), s(6, 8)), ("b".into(), s(12, 8))].into();
        // b's 5 pending, a borrows 2: 2 to take back.
        let pending: BTreeMap<String, ResourceList> = [("b".into(), list(&[(CPU, 5)]))].into();
        assert_eq!(physical_pressure(&kids, &pending), list(&[(CPU, 2)]));
        // a's own pending pods are on loan: nothing owed to a borrower.
        let pending: BTreeMap<String, ResourceList> = [("a".into(), list(&[(CPU, 5)]))].into();
        assert!(physical_pressure(&kids, &pending).is_empty());
    }

    fn victim(wref: &str, action: Action, cpu: i64) -> Victim {
        Victim {
            quota: "a".into(),
            workload_ref: wref.into(),
            action,
            frees: list(&[(CPU, cpu)]),
        }
    }

    #[test]
    fn marks_wait_for_grace_then_fall_due_or_clear() {
        let grace = 60_000;
        let p = vec![victim("job", Action::Suspend, 4)];
        let r = reconcile_marks("a", &BTreeMap::new(), &p, T0, grace);
        assert_eq!(r.marked, p);
        assert!(r.due.is_empty() && r.changed);
        assert_eq!(r.marks["job"].due, time::format_rfc3339(T0 + grace));
        // Victims of other quotas are not this ledger's business.
        let other = vec![Victim {
            quota: "b".into(),
            ..p[0].clone()
        }];
        assert!(reconcile_marks("a", &BTreeMap::new(), &other, T0, grace)
            .marks
            .is_empty());
        // Within grace: nothing new.
        let r2 = reconcile_marks("a", &r.marks, &p, T0 + grace - 1, grace);
        assert!(r2.marked.is_empty() && r2.due.is_empty() && !r2.changed);
        // Grace over: due, and out of the ledger.
        let r3 = reconcile_marks("a", &r.marks, &p, T0 + grace, grace);
        assert_eq!(r3.due, p);
        assert!(r3.marks.is_empty() && r3.changed);
        // Pressure gone before grace: cleared.
        let r4 = reconcile_marks("a", &r.marks, &[], T0 + 1, grace);
        assert_eq!(r4.cleared, vec!["job".to_string()]);
        assert!(r4.marks.is_empty() && r4.due.is_empty());
    }

    #[test]
    fn a_mark_restarts_its_grace_only_when_a_shrink_becomes_a_stop() {
        let grace = 60_000;
        let first = vec![victim("w", Action::ScaleTo(4), 2)];
        let m = reconcile_marks("a", &BTreeMap::new(), &first, T0, grace).marks;
        // Shrinking further: owners told again, same due time.
        let more = vec![victim("w", Action::ScaleTo(3), 3)];
        let r = reconcile_marks("a", &m, &more, T0 + 10, grace);
        assert_eq!(r.marked, more);
        assert_eq!(r.marks["w"].due, m["w"].due);
        // Stopping it: a new warning, a new grace.
        let stop = vec![victim("w", Action::ScaleTo(0), 6)];
        let r = reconcile_marks("a", &r.marks, &stop, T0 + 20, grace);
        assert_eq!(r.marks["w"].due, time::format_rfc3339(T0 + 20 + grace));
        // ... once: from then on the due time holds.
        let r = reconcile_marks("a", &r.marks, &stop, T0 + 20 + grace, grace);
        assert_eq!(r.due, stop);
    }

    #[test]
    fn annotations_and_labels() {
        let a: BTreeMap<String, String> = [(MIN_REPLICAS_ANNOTATION.into(), "3".into())].into();
        assert_eq!(min_replicas(&a), Some(3));
        let bad: BTreeMap<String, String> = [(MIN_REPLICAS_ANNOTATION.into(), "-1".into())].into();
        assert_eq!(min_replicas(&bad), None);
        let l: BTreeMap<String, String> = [(ONLINE_LABEL.into(), "True".into())].into();
        assert!(is_online(&l, &BTreeMap::new()));
        assert!(is_online(&BTreeMap::new(), &l));
        assert!(!is_online(&BTreeMap::new(), &a));
    }

    #[test]
    fn mark_serialises_compactly() {
        let m = Mark {
            action: Action::ScaleTo(3),
            frees: list(&[(CPU, 2)]),
            marked: "2027-01-15T08:00:00.000Z".into(),
            due: "2027-01-15T08:05:00.000Z".into(),
            origin: Origin::Borrow,
        };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            r#"{"action":{"scaleTo":3},"frees":{"requests.cpu":"2"},"marked":"2027-01-15T08:00:00.000Z","due":"2027-01-15T08:05:00.000Z"}"#
        );
        let s: Mark =
            serde_json::from_str(&json.replace(r#"{"scaleTo":3}"#, r#""suspend""#)).unwrap();
        assert_eq!(s.action, Action::Suspend);
        assert_eq!(s.origin, Origin::Borrow, "no origin reads as borrow");
        let p = Mark {
            origin: Origin::Preempt,
            ..m
        };
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.ends_with(r#","origin":"preempt"}"#), "{json}");
        assert_eq!(serde_json::from_str::<Mark>(&json).unwrap(), p);
    }

    #[test]
    fn borrow_and_preempt_marks_never_clear_each_other() {
        let grace = 60_000;
        let loan = vec![victim("loan", Action::Suspend, 2)];
        let pre = vec![victim("low", Action::Suspend, 4)];
        // The parent marks a loan's workload, then the queue marks its own.
        let m = reconcile_marks("a", &BTreeMap::new(), &loan, T0, grace).marks;
        let r = reconcile_marks_of(Origin::Preempt, "a", &m, &pre, T0 + 1, grace);
        assert_eq!(r.marks.len(), 2, "{:?}", r.marks);
        assert_eq!(r.marks["loan"], m["loan"], "the loan's mark untouched");
        assert_eq!(r.marks["low"].origin, Origin::Preempt);
        assert!(r.cleared.is_empty());
        // The parent's next pass, whose plan has only its own victim,
        // keeps the preemption mark.
        let r2 = reconcile_marks("a", &r.marks, &loan, T0 + 2, grace);
        assert!(!r2.changed && r2.cleared.is_empty(), "{r2:?}");
        // Pressure gone on the queue's side: only its mark is cleared.
        let r3 = reconcile_marks_of(Origin::Preempt, "a", &r.marks, &[], T0 + 3, grace);
        assert_eq!(r3.cleared, ["low".to_string()]);
        assert_eq!(r3.marks.keys().collect::<Vec<_>>(), ["loan"]);
        // And the parent's pressure gone: only the loan's.
        let r4 = reconcile_marks("a", &r.marks, &[], T0 + 3, grace);
        assert_eq!(r4.cleared, ["loan".to_string()]);
        assert_eq!(r4.marks["low"], r.marks["low"]);
        // A victim the other side marked is neither re-marked nor executed
        // here, even past its due time.
        let both = vec![victim("loan", Action::Suspend, 2)];
        let r5 = reconcile_marks_of(Origin::Preempt, "a", &m, &both, T0 + grace * 2, grace);
        assert!(r5.marked.is_empty() && r5.due.is_empty() && !r5.changed);
        assert_eq!(r5.marks, m);
        // Due on its own side: executed and out of the ledger, the other
        // side's mark kept.
        let r6 = reconcile_marks_of(Origin::Preempt, "a", &r.marks, &pre, T0 + 1 + grace, grace);
        assert_eq!(r6.due, pre);
        assert_eq!(r6.marks.keys().collect::<Vec<_>>(), ["loan"]);
    }
}
