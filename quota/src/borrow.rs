//! Borrowing (§5, seed 001): a node may use more than its guaranteed
//! `hard`, up to `spec.max`, on loan from its parent — out of its siblings'
//! idle guarantee and the parent's uncarved remainder.
//!
//! The loan is recorded in the parent (`status.loans[child]`), not in the
//! child, so two children borrowing at once serialise on the parent's
//! compare-and-swap and can never both take the last idle unit. A borrowing
//! admission is therefore two writes, parent first, as a carve-out is:
//!
//! 1. `needed(child, delta)`: within hard → `None`, charge the child as
//!    always (the parent is never consulted); beyond `max` → denied; else a
//!    `LoanRequest`.
//! 2. `lend(parent, &request, &children, now)` in the parent's CAS: grants
//!    (raises the child's loan to at least what it wants) only out of idle
//!    capacity.
//! 3. `charge_or_request(child, wref, charge, Some(&lent))` in the child's
//!    CAS: within `limits(child, loan)`, the loan read from the parent
//!    step 2 wrote — unless the child has fenced that grant since.
//!
//! A release that ends borrowing gives the loan back at once, in three
//! steps whose order makes it safe beside admissions in flight: the
//! parent's loan generation is read (every grant takes a new one); the
//! release's write in the child fences every grant up to it
//! (`fence_release`: no charge rides them any more) and reads what the
//! child still borrows; the parent's CAS shrinks the loan to that, only if
//! no grant came after the fence (`return_loan`). A charge in flight on the
//! old loan asks again; one granted after the fence keeps its loan.
//!
//! A cut of a loan no longer backed (a lender took its guarantee back) is
//! a return as well: `lend` makes it only for a child fenced at the
//! loan's generation, and otherwise answers `Lending::FenceFirst`.
//!
//! A loan granted whose charge then fails is left in place: it is a
//! reservation that `repair_loans` shrinks once it is older than
//! `LOAN_TTL_MS`. A loan only reserves: every borrowing admission goes
//! through `lend` again, which checks the capacity it wants is still idle.
//!
//! Borrowing is within one parent: a child never borrows from its
//! grandparent through its parent, and a parent lends only out of its own
//! `hard` (not out of what it borrowed itself).
//!
//! The siblings' figures come from their stored statuses and may be a little
//! stale. That is safe: a lender's admissions within its own hard are
//! honoured without asking anyone (they may over-commit the parent; reclaim
//! then takes the loan back), and a loan never needs a sibling's consent —
//! what must never happen is two borrowers taking the same idle unit, and
//! both loans are written to the same parent object under its CAS.

use crate::admission::{Borrowing, Denial, Shortfall};
use crate::object::loans::Loan;
use crate::object::Quota;
use crate::quantity::Quantity;
use crate::resources::{self, ResourceList};
use crate::time;
use std::collections::{BTreeMap, BTreeSet};

/// How long a loan raised or renewed by `lend` is left alone by
/// `repair_loans`: long enough for the child's charge, which follows the
/// parent's write, to land.
pub const LOAN_TTL_MS: i64 = 120_000;

/// A loan as one grant left it: what a charge riding it may use beyond
/// hard, and the grant's generation, which the child's `loanFence` may
/// have retired since (`charge_or_request`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lent {
    pub amount: ResourceList,
    pub generation: u64,
}

/// The loan `parent` holds for `child` as a charge rides it: its amount
/// and generation (empty and 0 if none).
pub fn lent_to(parent: &Quota, child: &str) -> Lent {
    parent
        .status
        .loans
        .get(child)
        .map(|l| Lent {
            amount: l.amount.clone(),
            generation: l.generation,
        })
        .unwrap_or_default()
}

impl Loan {
    fn raised_ms(&self) -> Option<i64> {
        let t = if self.raised.is_empty() {
            &self.since
        } else {
            &self.raised
        };
        time::parse_rfc3339(t)
    }

    fn younger_than(&self, now_ms: i64, age_ms: i64) -> bool {
        self.raised_ms().is_some_and(|t| now_ms - t < age_ms)
    }
}

/// A child of a parent as lending and reclaim see it, read from the child's
/// status (which may be a little stale; see the module comment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    pub hard: ResourceList,
    pub used: ResourceList,
    /// Σ of the loans this child granted its own children.
    pub lent: ResourceList,
    /// used − hard where positive, on the keys of the child's max.
    pub borrowed: ResourceList,
}

impl Standing {
    /// Read from the child's stored object. `lent` and `borrowed` are
    /// recomputed from spec and ledgers rather than trusted.
    pub fn of(child: &Quota) -> Standing {
        Standing {
            hard: child.spec.hard.clone(),
            used: child.status.used.clone(),
            lent: resources::sum(child.status.loans.values().map(|l| &l.amount)),
            borrowed: child.spec.borrowed(&child.status.used),
        }
    }

    /// Standings of the given children by name.
    pub fn of_all<'a>(children: impl IntoIterator<Item = &'a Quota>) -> BTreeMap<String, Standing> {
        children
            .into_iter()
            .map(|q| (q.name().to_string(), Standing::of(q)))
            .collect()
    }
}

/// What a child asks of its parent to admit a delta beyond its hard; only the
/// keys that need a loan. Carries what the denial message needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoanRequest {
    pub child: String,
    /// The loan the child needs in total, per key: used + asked − hard.
    pub want: ResourceList,
    /// What the admission asks, per key.
    pub asked: ResourceList,
    /// The child's used, hard and max when it asked.
    pub used: ResourceList,
    pub hard: ResourceList,
    pub max: ResourceList,
    /// The child's `loanFence` when it asked: the grant takes a generation
    /// above it, or the charge riding it would be refused.
    pub fence: u64,
}

impl LoanRequest {
    /// A request of `child` for nothing yet: keys are added as they need a loan.
    pub fn of(child: &str) -> LoanRequest {
        LoanRequest {
            child: child.to_string(),
            want: ResourceList::new(),
            asked: ResourceList::new(),
            used: ResourceList::new(),
            hard: ResourceList::new(),
            max: ResourceList::new(),
            fence: 0,
        }
    }

    /// The denial when only `room` more (per key, beyond the child's current
    /// borrowing) can be lent; a root, which has no one to borrow from,
    /// passes an empty list.
    pub fn denial(&self, room: &ResourceList) -> Denial {
        Denial::Short(
            self.want
                .keys()
                .filter(|k| resources::get(room, k) < self.more(k))
                .map(|k| self.shortfall(k, resources::get(room, k)))
                .collect(),
        )
    }

    /// How much more than it borrows now the child needs on key `k`.
    fn more(&self, k: &str) -> Quantity {
        let (u, h) = (resources::get(&self.used, k), resources::get(&self.hard, k));
        resources::get(&self.want, k).saturating_sub(u.saturating_sub(h).max(Quantity::ZERO))
    }

    fn shortfall(&self, k: &str, to_borrow: Quantity) -> Shortfall {
        let (u, h) = (resources::get(&self.used, k), resources::get(&self.hard, k));
        let m = resources::get(&self.max, k);
        Shortfall {
            quota: self.child.clone(),
            key: k.to_string(),
            asked: resources::get(&self.asked, k),
            left: h.saturating_sub(u),
            hard: h,
            borrowing: Some(Borrowing {
                max: m,
                to_borrow: to_borrow
                    .min(m.saturating_sub(u.max(h)))
                    .max(Quantity::ZERO),
            }),
        }
    }
}

/// The loan `child` would need beyond its hard to admit `delta`: `Ok(None)`
/// when every increase fits within hard (admit as always, without the
/// parent), `Ok(Some(request))` when some key needs a loan and every key
/// fits under `max`, and the denial otherwise — a key without `max` that
/// does not fit its hard, a key past `max`
/// (`bizrq a: requests.cpu asks 7, 2 left of 6 (max 10, 4 to borrow)`),
/// or a spent cash budget. Reads `status.used` as stored (refreshed).
pub fn needed(child: &Quota, delta: &ResourceList) -> Result<Option<LoanRequest>, Denial> {
    crate::admission::check_fits_within(child, delta, &child.spec.max)?;
    let mut req = LoanRequest::of(child.name());
    req.fence = child.status.loan_fence;
    for (k, d) in delta {
        let Some(h) = child.spec.hard.get(k) else {
            continue;
        };
        let u = resources::get(&child.status.used, k);
        let want = u.saturating_add(*d).saturating_sub(*h);
        if d.nanos() <= 0 || want.nanos() <= 0 {
            continue;
        }
        req.want.insert(k.clone(), want);
        req.asked.insert(k.clone(), *d);
        req.used.insert(k.clone(), u);
        req.hard.insert(k.clone(), *h);
        req.max
            .insert(k.clone(), resources::get(&child.spec.max, k));
    }
    Ok((!req.want.is_empty()).then_some(req))
}

/// Admission of one charge with borrowing (§5): `charge_within` the
/// child's hard, or, once its parent answered a request (`loan`: the loan
/// `lend` left, possibly none), within hard + loan — unless the child has
/// fenced that grant since (`fence_release`: a release gave back the loan
/// it rode on), when it is charged as if no loan had been answered and a
/// denial asks for a new grant. On a denial, the loan that would make room
/// when the child may borrow (it has `max` and a parent) and every key
/// fits under `max`; a key past `max` is the denial then. The difference
/// is worked out only for a child that may borrow.
pub fn charge_or_request(
    child: &mut Quota,
    wref: &str,
    charge: crate::object::Charge,
    loan: Option<&Lent>,
) -> Result<bool, (Denial, Option<Box<LoanRequest>>)> {
    let may_borrow = !child.spec.max.is_empty() && !child.spec.parent.is_empty();
    let delta = may_borrow.then(|| {
        let old = child.status.workloads.get(wref);
        let old = old.map(crate::object::Charge::usage).unwrap_or_default();
        resources::diff(&charge.usage(), &old)
    });
    let fence = child.status.loan_fence;
    let within = loan
        .filter(|l| l.generation > fence)
        .map(|l| limits(child, &l.amount))
        .unwrap_or_default();
    match crate::admission::charge_within(child, wref, charge, &within) {
        Ok(changed) => Ok(changed),
        Err(d) => match delta {
            None => Err((d, None)),
            Some(delta) => match needed(child, &delta) {
                Ok(req) => Err((d, req.map(Box::new))),
                Err(past_max) => Err((past_max, None)),
            },
        },
    }
}

/// A child's admission limits while it holds `loan`: hard + loan, capped by
/// max, on the keys of its max (see `admission::ceiling`). `loan` is the
/// child's loan as its `lend` left it (`loan_of` the parent it wrote).
pub fn limits(child: &Quota, loan: &ResourceList) -> ResourceList {
    child
        .spec
        .max
        .iter()
        .map(|(k, m)| {
            let h = resources::get(&child.spec.hard, k);
            (k.clone(), h.saturating_add(resources::get(loan, k)).min(*m))
        })
        .collect()
}

/// The loan `parent` has granted `child` (empty if none).
pub fn loan_of(parent: &Quota, child: &str) -> ResourceList {
    parent
        .status
        .loans
        .get(child)
        .map(|l| l.amount.clone())
        .unwrap_or_default()
}

/// How much of the parent's hard a child holds or may use without asking,
/// on one key. `used` is None for a child whose status is not known (its
/// create is in flight): it is assumed to use its whole hard.
/// - A child with a loan on the key may use hard + loan (or more, if its
///   hard was lowered beneath its usage).
/// - Otherwise it holds what it uses, plus what it lent its own children up
///   to its hard: capacity a grandchild borrows is taken, but a child's
///   internal over-commitment is its own to reclaim, within its hard.
fn claim(hard: Quantity, used: Option<Quantity>, lent: Quantity, loan: Quantity) -> Quantity {
    let Some(used) = used else {
        return hard.saturating_add(loan);
    };
    let base = used.max(used.saturating_add(lent).min(hard));
    if loan.nanos() > 0 {
        base.max(hard.saturating_add(loan))
    } else {
        base
    }
}

/// Everything the parent holds on `key` except `except`'s claim: its own
/// workloads and every other child's claim.
fn claimed_by_others(
    parent: &Quota,
    except: &str,
    key: &str,
    children: &BTreeMap<String, Standing>,
) -> Quantity {
    let names: BTreeSet<&String> = parent
        .status
        .children
        .keys()
        .chain(parent.status.loans.keys())
        .chain(children.keys())
        .filter(|n| n.as_str() != except)
        .collect();
    let mut total = resources::get(&parent.status.self_used, key);
    for name in names {
        let standing = children.get(name);
        let carved = parent
            .status
            .children
            .get(name)
            .map(|c| resources::get(&c.hard, key))
            .unwrap_or(Quantity::ZERO);
        let hard = standing.map_or(carved, |s| carved.max(resources::get(&s.hard, key)));
        let loan = parent
            .status
            .loans
            .get(name)
            .map(|l| resources::get(&l.amount, key))
            .unwrap_or(Quantity::ZERO);
        total = total.saturating_add(claim(
            hard,
            standing.map(|s| resources::get(&s.used, key)),
            standing.map_or(Quantity::ZERO, |s| resources::get(&s.lent, key)),
            loan,
        ));
    }
    total
}

/// What `parent` could still lend `child` beyond what the child uses (or
/// its hard, if more), per key of the child's `max` that the parent
/// limits, whatever the child's `max`: the idle room all borrowing
/// siblings compete for, as `lend` counts it (the child's own loan is not
/// held against it). Fair sharing weighs who gets it (`crate::fair`).
pub fn idle_room(
    parent: &Quota,
    child: &Quota,
    children: &BTreeMap<String, Standing>,
) -> ResourceList {
    let carved = parent.status.carved(child.name());
    child
        .spec
        .max
        .keys()
        .filter_map(|key| {
            let cap = parent.spec.hard.get(key)?;
            let hard = resources::get(&child.spec.hard, key).max(resources::get(&carved, key));
            let used = resources::get(&child.status.used, key);
            let others = claimed_by_others(parent, child.name(), key, children);
            let room = cap
                .saturating_sub(others)
                .saturating_sub(hard.max(used))
                .max(Quantity::ZERO);
            Some((key.clone(), room))
        })
        .collect()
}

/// Lend `req.child` what it wants, in `parent` (call inside the parent's
/// compare-and-swap). `children` holds the standing of every child of the
/// parent as stored (the borrower's own entry is ignored: the request has
/// its figures). Granted only if, on every key of the request the parent
/// limits,
///
///   parent.selfUsed + Σ other children's claims + max(used, hard + want) ≤ parent.hard
///
/// where a child's claim is what it uses (with its own lending) or, holding
/// a loan, hard + loan — loans already granted stay reserved for their
/// holders. Keys the parent does not limit are lent freely, as they are
/// carved freely. On success the child's loan on each key of the request
/// becomes `want`, or what it was if larger, but no more than is still
/// idle: every loan `lend` writes is fully backed, so the child may be
/// charged against hard + loan (`limits`) by each of its admissions in
/// flight, together. A loan changed or renewed is safe from `repair_loans`
/// for `LOAN_TTL_MS` (every grant renews it). Every
/// grant, even of a loan already right, takes the parent's next
/// `loanGeneration`, so the parent is always written (`Lending::Granted`):
/// the charge that rides the grant is one a release reading the loan
/// before it has not seen (`fence_release`). The denial names the child,
/// the key, what it asked and how much could be borrowed.
///
/// A cut is a return: a loan no longer backed (a lender took its guarantee
/// back) is cut only once the child has fenced every grant of it
/// (`req.fence` at or above the loan's generation), since a charge may
/// still be in flight on the larger grant and would land past the cut,
/// on room the cut frees for a sibling. Otherwise nothing changes and the
/// answer is `Lending::FenceFirst(generation)`: fence the child at it
/// (`fence`, in its compare-and-swap) and ask again. A fenced cut keeps
/// at least what the child borrowed as its request read it (after the
/// fence: no charge beyond hard lands until this grant).
pub fn lend(
    parent: &mut Quota,
    req: &LoanRequest,
    children: &BTreeMap<String, Standing>,
    now_ms: i64,
) -> Result<Lending, Denial> {
    parent.status.refresh(&parent.spec);
    let carved = parent.status.carved(&req.child);
    let mut short = Vec::new();
    // Per limited key, the largest loan the child could hold now.
    let mut backed = ResourceList::new();
    for (key, want) in &req.want {
        let Some(cap) = parent.spec.hard.get(key) else {
            continue;
        };
        let hard = resources::get(&req.hard, key).max(resources::get(&carved, key));
        let used = resources::get(&req.used, key);
        let others = claimed_by_others(parent, &req.child, key, children);
        if others.saturating_add(used.max(hard.saturating_add(*want))) > *cap {
            // What more than it borrows now the child could have.
            let room = cap.saturating_sub(others).saturating_sub(hard.max(used));
            short.push(req.shortfall(key, room));
        }
        backed.insert(key.clone(), cap.saturating_sub(others).saturating_sub(hard));
    }
    if !short.is_empty() {
        return Err(Denial::Short(short));
    }
    // What each key of the loan becomes: what the child wants, or what it
    // holds if more — but only as far as that is still backed (a lender
    // took its guarantee back), and never below what it borrows.
    let current = parent
        .status
        .loans
        .get(&req.child)
        .map(|l| (l.amount.clone(), l.generation));
    let next: ResourceList = req
        .want
        .iter()
        .map(|(key, want)| {
            let held = current
                .as_ref()
                .map_or(Quantity::ZERO, |(a, _)| resources::get(a, key));
            let borrows = resources::get(&req.used, key)
                .saturating_sub(resources::get(&req.hard, key))
                .max(Quantity::ZERO);
            let kept = backed
                .get(key)
                .map_or(held, |b| held.min((*b).max(borrows)));
            (key.clone(), (*want).max(kept))
        })
        .collect();
    if let Some((amount, generation)) = &current {
        let cut = next.iter().any(|(k, n)| *n < resources::get(amount, k));
        if cut && *generation > req.fence {
            return Ok(Lending::FenceFirst(*generation));
        }
    }

    let now = time::format_rfc3339(now_ms);
    let generation = parent
        .status
        .loan_generation
        .max(req.fence)
        .saturating_add(1);
    let loan = parent
        .status
        .loans
        .entry(req.child.clone())
        .or_insert_with(|| Loan {
            amount: ResourceList::new(),
            since: now.clone(),
            raised: String::new(),
            generation: 0,
        });
    // A loan cut to what is backed keeps hard + loan a safe limit for
    // every admission of the child from now on; those before the cut are
    // fenced (above).
    for (key, next) in next {
        if next != resources::get(&loan.amount, &key) {
            loan.amount.insert(key, next);
        }
    }
    // Every grant is written (below), so every grant renews the loan's
    // age: `repair_loans` never shrinks a loan a charge may be riding.
    loan.raised = now;
    // Every grant takes a new generation, changed or not: a charge may ride
    // it, so a release that read the loan before it must not give it back
    // (`return_loan`).
    loan.generation = generation;
    parent.status.loan_generation = generation;
    parent.status.refresh(&parent.spec);
    Ok(Lending::Granted)
}

/// What `lend` did when it did not deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lending {
    /// Granted at the parent's next generation (the parent changed).
    Granted,
    /// Nothing changed: the loan must be cut to what is still backed, and
    /// a charge may still ride its grant at this generation. Fence the
    /// child at it (`fence`, in the child's compare-and-swap), then ask
    /// again with the fenced child's request.
    FenceFirst(u64),
}

/// Repair a parent's ledgers of its children from the children as stored
/// (every existing child): each carve-out follows its child's hard
/// (`tree::repair_carves`), each loan shrinks to what its child borrows
/// (`repair_loans`). The one repair both the standalone resync and the
/// controller run.
pub fn repair_children(parent: &mut Quota, children: &[&Quota], now_ms: i64) {
    let hards: BTreeMap<String, ResourceList> = children
        .iter()
        .map(|c| (c.name().to_string(), c.spec.hard.clone()))
        .collect();
    crate::tree::repair_carves(parent, &hards, now_ms);
    repair_loans(parent, &Standing::of_all(children.iter().copied()), now_ms);
}

/// Shrink each loan of `parent` to what its child borrows now
/// (max(0, used − hard), never more than the loan) and drop empty loans and
/// loans of children that are gone — except loans raised or renewed less
/// than `LOAN_TTL_MS` ago, whose charge may be in flight. `children` must
/// hold every existing child of the parent. Refreshes the parent; returns
/// whether any loan changed.
pub fn repair_loans(
    parent: &mut Quota,
    children: &BTreeMap<String, Standing>,
    now_ms: i64,
) -> bool {
    let mut changed = false;
    parent.status.loans.retain(|child, loan| {
        if loan.younger_than(now_ms, LOAN_TTL_MS) {
            return true;
        }
        let Some(s) = children.get(child) else {
            changed = true;
            return false;
        };
        let before = loan.amount.clone();
        loan.amount = before
            .iter()
            .filter_map(|(k, amount)| {
                let over = resources::get(&s.used, k).saturating_sub(resources::get(&s.hard, k));
                let keep = (*amount).min(over);
                (keep.nanos() > 0).then(|| (k.clone(), keep))
            })
            .collect();
        changed |= loan.amount != before;
        !loan.amount.is_empty()
    });
    parent.status.refresh(&parent.spec);
    changed
}

/// How much a child's borrowing fell, per key of its `max`, between its
/// use `before` and `after` a release: whether that release ended any of
/// its loan (`fence_release`). Keys whose borrowing did not fall are left
/// out.
pub fn ended(child: &Quota, before: &ResourceList, after: &ResourceList) -> ResourceList {
    let (was, now) = (child.spec.borrowed(before), child.spec.borrowed(after));
    was.iter()
        .filter_map(|(k, b)| {
            let fell = b.saturating_sub(resources::get(&now, k));
            (fell.nanos() > 0).then(|| (k.clone(), fell))
        })
        .collect()
}

/// What a release that ended borrowing gives back at once (§9): the
/// fence it wrote in the child, and what the child still borrowed as that
/// write left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Giveback {
    pub fence: u64,
    pub borrowed: ResourceList,
}

/// In the child's compare-and-swap of a release, `before` being its use
/// before the release: when the release ended borrowing (`ended`) and its
/// parent's loan to it was at generation `seen` (read before this write;
/// None: no loan), fence every grant up to `seen` (`fence`). None when
/// there is nothing to give back.
pub fn fence_release(
    child: &mut Quota,
    before: &ResourceList,
    seen: Option<u64>,
) -> Option<Giveback> {
    let seen = seen?;
    if ended(child, before, &child.status.used).is_empty() {
        return None;
    }
    Some(fence(child, seen))
}

/// Retire the grants of the child's loan up to `generation` (the fence
/// never falls): no charge rides them any more (`charge_or_request`), so
/// until a new grant the child never borrows more than it does as this
/// write leaves it — what its loan must still cover.
pub fn fence(child: &mut Quota, generation: u64) -> Giveback {
    child.status.loan_fence = child.status.loan_fence.max(generation);
    Giveback {
        fence: child.status.loan_fence,
        borrowed: child.spec.borrowed(&child.status.used),
    }
}

/// What `return_loan` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Returned {
    /// The loan now covers no more than what the child borrowed at the
    /// fence (whether it changed).
    Back(bool),
    /// Granted again after the fence, at this generation: a charge may
    /// ride it, so nothing went back (fence it and try again).
    Granted(u64),
    /// No loan to give back.
    NoLoan,
}

/// Give back to `parent`, at once, what `child`'s loan holds beyond what
/// the child borrowed at its fence (`give`), whatever the loan's age — but
/// only if the loan was not granted again after that fence: every charge
/// that could still ride it then was written before the fence (and is in
/// `give.borrowed`) or is refused by it. An empty loan is removed.
/// Refreshes the parent when it changed. Call in the parent's
/// compare-and-swap.
pub fn return_loan(parent: &mut Quota, child: &str, give: &Giveback) -> Returned {
    let Some(loan) = parent.status.loans.get_mut(child) else {
        return Returned::NoLoan;
    };
    if loan.generation > give.fence {
        return Returned::Granted(loan.generation);
    }
    let before = loan.amount.clone();
    loan.amount = before
        .iter()
        .filter_map(|(k, amount)| {
            let keep = (*amount).min(resources::get(&give.borrowed, k));
            (keep.nanos() > 0).then(|| (k.clone(), keep))
        })
        .collect();
    let changed = loan.amount != before;
    if loan.amount.is_empty() {
        parent.status.loans.remove(child);
    }
    if changed {
        parent.status.refresh(&parent.spec);
    }
    Returned::Back(changed)
}

/// Drop a child's loan (the child was deleted, with `tree::uncarve`).
pub fn drop_loan(parent: &mut Quota, child: &str) -> bool {
    let changed = parent.status.loans.remove(child).is_some();
    if changed {
        parent.status.refresh(&parent.spec);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission;
    use crate::object::{Charge, QuotaSpec};
    use crate::workload::PodSet;

    pub(crate) const T0: i64 = 1_800_000_000_000;
    const CPU: &str = "requests.cpu";

    fn cpu(n: i64) -> ResourceList {
        [(CPU.to_string(), Quantity::from_units(n))].into()
    }
    fn node(name: &str, parent: &str, hard: i64, max: Option<i64>) -> Quota {
        Quota::new(
            name,
            QuotaSpec {
                parent: parent.into(),
                hard: cpu(hard),
                max: max.map(cpu).unwrap_or_default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        )
    }
    fn pods(n: i64, each: i64) -> Charge {
        Charge {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: n,
                per_pod: cpu(each),
                qos: None,
            }],
            hpa: None,
            since: time::format_rfc3339(T0),
            uid: String::new(),
            admitted: None,
        }
    }
    /// Parent p (hard `p`) with children carved out of it.
    fn family(p: i64, kids: &[(&str, i64, Option<i64>)]) -> (Quota, Vec<Quota>) {
        let mut parent = node("p", "", p, None);
        let mut out = Vec::new();
        for (name, hard, max) in kids {
            crate::tree::carve(&mut parent, name, &cpu(*hard), "2026-01-01T00:00:00Z").unwrap();
            out.push(node(name, "p", *hard, *max));
        }
        (parent, out)
    }
    /// The whole borrowing admission: needed, lend, charge within limits.
    fn admit(
        parent: &mut Quota,
        kids: &mut [Quota],
        who: usize,
        wref: &str,
        c: Charge,
        now: i64,
    ) -> Result<bool, Denial> {
        let old = kids[who]
            .status
            .workloads
            .get(wref)
            .map(Charge::usage)
            .unwrap_or_default();
        let delta = resources::diff(&c.usage(), &old);
        match needed(&kids[who], &delta)? {
            None => admission::charge(&mut kids[who], wref, c),
            Some(mut req) => {
                // A cut asks for the child's fence first, then its
                // request again.
                while let Lending::FenceFirst(g) =
                    lend(parent, &req, &Standing::of_all(kids.iter()), now)?
                {
                    fence(&mut kids[who], g);
                    req = needed(&kids[who], &delta)?.expect("still beyond hard");
                }
                let l = limits(&kids[who], &loan_of(parent, kids[who].name()));
                admission::charge_within(&mut kids[who], wref, c, &l)
            }
        }
    }

    /// A release's return, as the server makes it: the parent's loan
    /// generation read first, the release and its fence in the child's
    /// write, then the return in the parent's.
    fn release_and_return(parent: &mut Quota, kid: &mut Quota, wref: &str) -> Returned {
        let seen = parent.status.loans.get(kid.name()).map(|l| l.generation);
        let before = kid.status.used.clone();
        admission::release(kid, wref);
        match fence_release(kid, &before, seen) {
            Some(give) => return_loan(parent, kid.name(), &give),
            None => Returned::NoLoan,
        }
    }

    /// Every child's borrowing is covered by the loan its parent records.
    fn covered(parent: &Quota, kids: &[Quota]) {
        for k in kids {
            let b = resources::get(&k.spec.borrowed(&k.status.used), CPU);
            let l = resources::get(&loan_of(parent, k.name()), CPU);
            assert!(b <= l, "{} borrows {b} on a loan of {l}", k.name());
        }
    }

    #[test]
    fn a_release_returns_its_loan_at_once_down_to_what_is_still_borrowed() {
        let (mut parent, mut kids) = family(12, &[("a", 4, Some(10)), ("b", 8, None)]);
        // a runs 4 within hard, then two jobs of 2 on a loan of 4.
        admit(&mut parent, &mut kids, 0, "base", pods(1, 4), T0).unwrap();
        admit(&mut parent, &mut kids, 0, "j1", pods(1, 2), T0).unwrap();
        admit(&mut parent, &mut kids, 0, "j2", pods(1, 2), T0).unwrap();
        assert_eq!(loan_of(&parent, "a"), cpu(4));
        // j1 finishes: its 2 go back at once, though the loan is young
        // (repair_loans would keep it for LOAN_TTL_MS).
        let back = release_and_return(&mut parent, &mut kids[0], "j1");
        assert_eq!(back, Returned::Back(true));
        assert_eq!(loan_of(&parent, "a"), cpu(2), "j2 stays covered");
        assert_eq!(parent.status.lent, cpu(2));
        covered(&parent, &kids);
        // Releasing within hard ends no borrowing: no fence, nothing back.
        let mut b = kids[1].clone();
        admission::charge(&mut b, "w", pods(1, 2)).unwrap();
        let before = b.status.used.clone();
        admission::release(&mut b, "w");
        assert_eq!(fence_release(&mut b, &before, Some(1)), None);
        assert_eq!(b.status.loan_fence, 0);
        // Told twice (a retried write), it changes nothing more.
        let give = fence(&mut kids[0], parent.status.loans["a"].generation);
        assert_eq!(return_loan(&mut parent, "a", &give), Returned::Back(false));
        assert_eq!(loan_of(&parent, "a"), cpu(2));
        // All of it ends: the loan goes, and the parent lends nothing.
        assert_eq!(
            release_and_return(&mut parent, &mut kids[0], "j2"),
            Returned::Back(true)
        );
        assert!(parent.status.loans.is_empty());
        assert!(parent.status.lent.values().all(|v| v.nanos() == 0));
        let give = fence(&mut kids[0], 99);
        assert_eq!(return_loan(&mut parent, "a", &give), Returned::NoLoan);
    }

    #[test]
    fn every_grant_takes_a_new_generation_and_none_is_reused() {
        let (mut p, mut kids) = family(12, &[("a", 0, Some(8)), ("b", 0, Some(8))]);
        let req = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        let view = Standing::of_all(kids.iter());
        assert_eq!(lend(&mut p, &req, &view, T0).unwrap(), Lending::Granted);
        assert_eq!(p.status.loans["a"].generation, 1);
        // The same request again: the loan is already right, but a charge
        // may ride this grant, so it is a grant of its own.
        assert_eq!(lend(&mut p, &req, &view, T0 + 1).unwrap(), Lending::Granted);
        assert_eq!(p.status.loans["a"].generation, 2);
        let rb = needed(&kids[1], &cpu(1)).unwrap().unwrap();
        lend(&mut p, &rb, &view, T0 + 2).unwrap();
        assert_eq!(p.status.loans["b"].generation, 3);
        assert_eq!(p.status.loan_generation, 3);
        // a's loan is dropped and granted anew: never a generation seen
        // before, so a release that read generation 2 cannot mistake it.
        assert!(drop_loan(&mut p, "a"));
        lend(&mut p, &req, &view, T0 + 3).unwrap();
        assert_eq!(p.status.loans["a"].generation, 4);
        // A child fenced past the parent's count (moved from another
        // parent) is granted above its fence.
        kids[1].status.loan_fence = 40;
        let rb = needed(&kids[1], &cpu(1)).unwrap().unwrap();
        lend(&mut p, &rb, &view, T0 + 4).unwrap();
        assert_eq!(p.status.loans["b"].generation, 41);
        let lent = lent_to(&p, "b");
        let mut b = kids[1].clone();
        assert!(charge_or_request(&mut b, "w", pods(1, 1), Some(&lent)).is_ok());
    }

    #[test]
    fn a_return_never_takes_the_loan_an_admission_in_flight_rides() {
        // a (hard 0, max 8) borrows everything. X and Z ask for 2 each
        // from the same view (a borrows nothing yet): both are granted the
        // same loan of 2, and Z's charge lands first.
        let (mut p, mut kids) = family(8, &[("a", 0, Some(8)), ("b", 0, Some(8))]);
        let view = Standing::of_all(kids.iter());
        let rx = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        let rz = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        lend(&mut p, &rx, &view, T0).unwrap();
        let x = lent_to(&p, "a");
        lend(&mut p, &rz, &view, T0).unwrap();
        let z = lent_to(&p, "a");
        charge_or_request(&mut kids[0], "z", pods(1, 2), Some(&z)).unwrap();
        // X alone would not fit beside Z (4 > 2)...
        let mut probe = kids[0].clone();
        assert!(charge_or_request(&mut probe, "x", pods(1, 2), Some(&x)).is_err());
        // ...but Z finishes first: its release gives the loan back at once.
        assert_eq!(
            release_and_return(&mut p, &mut kids[0], "z"),
            Returned::Back(true)
        );
        assert!(p.status.loans.is_empty());
        // X's charge now lands on the loan it was granted: without the
        // fence it would borrow 2 on no loan at all, and b could be lent
        // all 8 meanwhile. The fence refuses it and it asks again.
        let Err((_, Some(again))) = charge_or_request(&mut kids[0], "x", pods(1, 2), Some(&x))
        else {
            panic!("a fenced grant carries no charge beyond hard")
        };
        covered(&p, &kids);
        lend(&mut p, &again, &Standing::of_all(kids.iter()), T0 + 1).unwrap();
        let x = lent_to(&p, "a");
        charge_or_request(&mut kids[0], "x", pods(1, 2), Some(&x)).unwrap();
        covered(&p, &kids);
        // b is lent only what is left: 6.
        let rb = needed(&kids[1], &cpu(7)).unwrap().unwrap();
        assert!(lend(&mut p, &rb, &Standing::of_all(kids.iter()), T0 + 2).is_err());
        let rb = needed(&kids[1], &cpu(6)).unwrap().unwrap();
        lend(&mut p, &rb, &Standing::of_all(kids.iter()), T0 + 2).unwrap();
        assert!(resources::get(&p.status.lent, CPU) <= Quantity::from_units(8));
    }

    #[test]
    fn a_return_after_a_new_grant_gives_nothing_back_until_fenced_again() {
        let (mut p, mut kids) = family(8, &[("a", 0, Some(8))]);
        admit(&mut p, &mut kids, 0, "j1", pods(1, 2), T0).unwrap();
        admit(&mut p, &mut kids, 0, "j2", pods(1, 2), T0).unwrap();
        // The release reads the loan's generation, then an admission is
        // granted again (a charge of 2 in flight on a loan of 6).
        let seen = p.status.loans["a"].generation;
        let req = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        lend(&mut p, &req, &Standing::of_all(kids.iter()), T0 + 1).unwrap();
        let flying = lent_to(&p, "a");
        let before = kids[0].status.used.clone();
        admission::release(&mut kids[0], "j1");
        let give = fence_release(&mut kids[0], &before, Some(seen)).unwrap();
        let granted = p.status.loans["a"].generation;
        assert_eq!(
            return_loan(&mut p, "a", &give),
            Returned::Granted(granted),
            "the grant after the read may carry a charge"
        );
        assert_eq!(loan_of(&p, "a"), cpu(6));
        // The charge in flight lands (its grant is after the fence).
        charge_or_request(&mut kids[0], "j3", pods(1, 2), Some(&flying)).unwrap();
        // Fenced again at the grant: now what a borrows (4) is kept.
        let give = fence(&mut kids[0], granted);
        assert_eq!(return_loan(&mut p, "a", &give), Returned::Back(true));
        assert_eq!(loan_of(&p, "a"), cpu(4));
        covered(&p, &kids);
    }

    #[test]
    fn within_hard_never_asks_the_parent() {
        let (_, kids) = family(18, &[("a", 6, Some(10))]);
        assert_eq!(needed(&kids[0], &cpu(6)).unwrap(), None);
        // A child that is borrowing cpu already admits pods within its hard
        // without a loan; only more cpu needs one.
        let mut a = kids[0].clone();
        a.spec.hard.insert("pods".into(), Quantity::from_units(10));
        admission::charge_within(&mut a, "w", pods(1, 8), &cpu(8)).unwrap();
        assert_eq!(a.status.borrowed, cpu(2));
        let pods_only: ResourceList = [("pods".to_string(), Quantity::from_units(3))].into();
        assert_eq!(needed(&a, &pods_only).unwrap(), None);
        assert_eq!(needed(&a, &cpu(1)).unwrap().unwrap().want, cpu(3));
    }

    #[test]
    fn beyond_hard_asks_for_exactly_the_excess() {
        let (_, mut kids) = family(18, &[("a", 6, Some(10))]);
        admission::charge(&mut kids[0], "job", pods(2, 2)).unwrap();
        let req = needed(&kids[0], &cpu(4)).unwrap().unwrap();
        assert_eq!(req.want, cpu(2));
        assert_eq!(req.asked, cpu(4));
    }

    #[test]
    fn exceeding_max_is_denied_with_what_could_be_borrowed() {
        let (_, mut kids) = family(18, &[("team-a", 6, Some(10))]);
        admission::charge(&mut kids[0], "job", pods(2, 2)).unwrap();
        let err = needed(&kids[0], &cpu(7)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq team-a: requests.cpu asks 7, 2 left of 6 (max 10, 4 to borrow)"
        );
        // A key without max is held to its hard, as before.
        let (_, kids) = family(18, &[("b", 6, None)]);
        let err = needed(&kids[0], &cpu(7)).unwrap_err();
        assert_eq!(err.to_string(), "bizrq b: requests.cpu asks 7, 6 left of 6");
    }

    #[test]
    fn lends_idle_guarantee_and_says_how_much_is_left_when_short() {
        // p 10 = a 4 + b 4 + c 2; c idle, b uses 3: 3 idle in all.
        let (mut p, mut kids) = family(
            10,
            &[("team-a", 4, Some(10)), ("b", 4, None), ("c", 2, None)],
        );
        admission::charge(&mut kids[1], "w", pods(1, 3)).unwrap();
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        let err = admit(&mut p, &mut kids, 0, "x", pods(1, 4), T0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq team-a: requests.cpu asks 4, 0 left of 4 (max 10, 3 to borrow)"
        );
        assert!(p.status.loans.is_empty(), "a refused loan leaves no trace");
        admit(&mut p, &mut kids, 0, "x", pods(1, 3), T0).unwrap();
        assert_eq!(loan_of(&p, "team-a"), cpu(3));
        assert_eq!(p.status.lent, cpu(3));
        assert_eq!(kids[0].status.borrowed, cpu(3));
        assert_eq!(kids[0].status.used, cpu(7));
    }

    #[test]
    fn two_borrowers_cannot_take_the_last_idle_unit() {
        // p 10 = a 4 + b 4 + c 2; c idle: 2 units to lend.
        let (mut p, mut kids) = family(10, &[("a", 4, Some(8)), ("b", 4, Some(8)), ("c", 2, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        admission::charge(&mut kids[1], "w", pods(1, 4)).unwrap();
        // Both ask at once, from the same view of their siblings.
        let view = Standing::of_all(kids.iter());
        let ra = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        let rb = needed(&kids[1], &cpu(1)).unwrap().unwrap();
        // The parent's CAS orders them: the first wins, the second sees the
        // first's loan reserved although neither has charged yet.
        assert_eq!(lend(&mut p, &ra, &view, T0).unwrap(), Lending::Granted);
        let err = lend(&mut p, &rb, &view, T0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq b: requests.cpu asks 1, 0 left of 4 (max 8, 0 to borrow)"
        );
    }

    #[test]
    fn a_loan_reserves_for_its_holder_and_is_rechecked_when_used() {
        let (mut p, mut kids) = family(10, &[("a", 4, Some(8)), ("b", 6, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        admit(&mut p, &mut kids, 0, "x", pods(1, 3), T0).unwrap();
        admission::release(&mut kids[0], "x");
        // b takes its guarantee back, as it always may.
        admission::charge(&mut kids[1], "w", pods(1, 6)).unwrap();
        // a's loan of 3 is still recorded, but is no longer backed: a new
        // borrowing admission is refused.
        assert_eq!(loan_of(&p, "a"), cpu(3));
        assert!(admit(&mut p, &mut kids, 0, "x", pods(1, 1), T0 + 1).is_err());
    }

    #[test]
    fn two_admissions_of_one_child_cannot_ride_a_loan_no_longer_backed() {
        // p 6 = a 0 + b 5 + 1 spare. a borrowed 3 and gave them back; then
        // b took 4 within its hard: 2 idle, though a's loan still says 3.
        let (mut p, mut kids) = family(6, &[("a", 0, Some(3)), ("b", 5, None)]);
        admit(&mut p, &mut kids, 0, "x", pods(1, 3), T0).unwrap();
        admission::release(&mut kids[0], "x");
        admission::charge(&mut kids[1], "w", pods(1, 4)).unwrap();
        // Two admissions of a at once, 1 and 2: each alone fits the 2 idle.
        let view = Standing::of_all(kids.iter());
        let r1 = needed(&kids[0], &cpu(1)).unwrap().unwrap();
        let r2 = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        // Trimming the loan is a return: a is fenced at its grant first.
        assert_eq!(
            lend(&mut p, &r1, &view, T0 + 1).unwrap(),
            Lending::FenceFirst(1)
        );
        assert_eq!(loan_of(&p, "a"), cpu(3), "nothing changed yet");
        fence(&mut kids[0], 1);
        let r1 = needed(&kids[0], &cpu(1)).unwrap().unwrap();
        assert_eq!(lend(&mut p, &r1, &view, T0 + 1).unwrap(), Lending::Granted);
        assert_eq!(lend(&mut p, &r2, &view, T0 + 1).unwrap(), Lending::Granted);
        assert_eq!(loan_of(&p, "a"), cpu(2), "trimmed to what is idle");
        let l = limits(&kids[0], &loan_of(&p, "a"));
        admission::charge_within(&mut kids[0], "y", pods(1, 1), &l).unwrap();
        assert!(admission::charge_within(&mut kids[0], "z", pods(1, 2), &l).is_err());
    }

    #[test]
    fn a_cut_waits_for_the_fence_of_the_grant_a_charge_may_ride() {
        // p 4 = a 0 + b 4. a is lent b's idle 4 for X (4); X's charge is
        // still in flight when b takes 3 of its guarantee back.
        let (mut p, mut kids) = family(4, &[("a", 0, Some(4)), ("b", 4, Some(4))]);
        let rx = needed(&kids[0], &cpu(4)).unwrap().unwrap();
        let view = Standing::of_all(kids.iter());
        assert_eq!(lend(&mut p, &rx, &view, T0).unwrap(), Lending::Granted);
        let x = lent_to(&p, "a");
        admission::charge(&mut kids[1], "w", pods(1, 3)).unwrap();
        // a asks for 1 more (Y): only 1 is backed now, so the loan of 4
        // would be cut to 1 — but X may still land on it.
        let ry = needed(&kids[0], &cpu(1)).unwrap().unwrap();
        let view = Standing::of_all(kids.iter());
        let before = p.clone();
        assert_eq!(
            lend(&mut p, &ry, &view, T0 + 1).unwrap(),
            Lending::FenceFirst(x.generation)
        );
        assert_eq!(p, before, "nothing changes before the fence");
        // The fence, in a's write: X's charge is refused from now on.
        let give = fence(&mut kids[0], x.generation);
        assert_eq!(give.borrowed, ResourceList::new());
        let mut probe = kids[0].clone();
        assert!(charge_or_request(&mut probe, "x", pods(1, 4), Some(&x)).is_err());
        // Asked again, fenced: the loan is cut to the 1 backed.
        let ry = needed(&kids[0], &cpu(1)).unwrap().unwrap();
        assert_eq!(lend(&mut p, &ry, &view, T0 + 2).unwrap(), Lending::Granted);
        assert_eq!(loan_of(&p, "a"), cpu(1));
        let y = lent_to(&p, "a");
        charge_or_request(&mut kids[0], "y", pods(1, 1), Some(&y)).unwrap();
        // b lets go; the room the cut freed is b's again, and X, late,
        // cannot take it on its old grant.
        admission::release(&mut kids[1], "w");
        assert!(charge_or_request(&mut kids[0], "x", pods(1, 4), Some(&x)).is_err());
        covered(&p, &kids);
    }

    #[test]
    fn a_fenced_cut_never_goes_below_what_the_child_borrows() {
        // a's hard was lowered from 1 to 0 and its carve-out not yet
        // repaired, so the parent counts 1 for it beside the 3 it borrows.
        let (mut p, mut kids) = family(4, &[("a", 1, Some(4)), ("b", 3, None)]);
        kids[0].spec.hard = cpu(0);
        admit(&mut p, &mut kids, 0, "x", pods(1, 3), T0).unwrap();
        assert_eq!(loan_of(&p, "a"), cpu(3));
        // b takes 1 of its guarantee back: 2 of a's loan are backed now.
        admission::charge(&mut kids[1], "w", pods(1, 1)).unwrap();
        // A request for nothing more (a queue round keeping its loan),
        // fenced: the loan is not cut below the 3 a still borrows.
        let g = p.status.loans["a"].generation;
        fence(&mut kids[0], g);
        let mut keep = needed(&kids[0], &cpu(1)).unwrap().unwrap();
        keep.want.insert(CPU.into(), Quantity::ZERO);
        let view = Standing::of_all(kids.iter());
        assert_eq!(
            lend(&mut p, &keep, &view, T0 + 1).unwrap(),
            Lending::Granted
        );
        assert_eq!(loan_of(&p, "a"), cpu(3));
        covered(&p, &kids);
    }

    #[test]
    fn every_grant_renews_the_loan() {
        let (mut p, mut kids) = family(10, &[("a", 4, Some(8)), ("b", 6, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        let req = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        let view = Standing::of_all(kids.iter());
        assert_eq!(lend(&mut p, &req, &view, T0).unwrap(), Lending::Granted);
        lend(&mut p, &req, &view, T0 + 1000).unwrap();
        assert_eq!(
            p.status.loans["a"].raised,
            time::format_rfc3339(T0 + 1000),
            "a charge may ride the second grant: the repair must leave it its full age"
        );
        lend(&mut p, &req, &view, T0 + LOAN_TTL_MS / 2).unwrap();
        assert_eq!(p.status.loans["a"].since, time::format_rfc3339(T0));
        assert_eq!(
            p.status.loans["a"].raised,
            time::format_rfc3339(T0 + LOAN_TTL_MS / 2)
        );
    }

    #[test]
    fn repair_shrinks_loans_to_what_is_borrowed_but_not_young_ones() {
        let (mut p, mut kids) = family(10, &[("a", 4, Some(8)), ("b", 6, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        admit(&mut p, &mut kids, 0, "x", pods(1, 3), T0).unwrap();
        admission::charge(&mut kids[0], "x", pods(1, 1)).unwrap();
        let view = Standing::of_all(kids.iter());
        // A moment later the loan is left alone, whatever the child shows.
        assert!(!repair_loans(&mut p, &view, T0 + LOAN_TTL_MS - 1));
        assert_eq!(loan_of(&p, "a"), cpu(3));
        // Past the TTL it shrinks to what a borrows now: 5 − 4.
        assert!(repair_loans(&mut p, &view, T0 + LOAN_TTL_MS));
        assert_eq!(loan_of(&p, "a"), cpu(1));
        assert_eq!(p.status.lent, cpu(1));
        // Back within hard: the loan goes; and stays gone.
        admission::release(&mut kids[0], "x");
        let view = Standing::of_all(kids.iter());
        assert!(repair_loans(&mut p, &view, T0 + LOAN_TTL_MS));
        assert!(p.status.loans.is_empty() && p.status.lent.is_empty());
        assert!(!repair_loans(&mut p, &view, T0 + LOAN_TTL_MS));
    }

    #[test]
    fn repair_drops_loans_of_children_that_are_gone() {
        let (mut p, mut kids) = family(10, &[("a", 4, Some(8)), ("b", 6, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        admit(&mut p, &mut kids, 0, "x", pods(1, 3), T0).unwrap();
        let only_b = Standing::of_all(kids[1..].iter());
        assert!(!repair_loans(&mut p, &only_b, T0 + 1));
        assert!(repair_loans(&mut p, &only_b, T0 + LOAN_TTL_MS));
        assert!(p.status.loans.is_empty());
        assert!(!drop_loan(&mut p, "a"));
    }

    #[test]
    fn a_child_not_yet_seen_is_assumed_to_use_its_hard() {
        // c's create is in flight: carved, but no status to read.
        let (mut p, mut kids) = family(10, &[("a", 4, Some(8)), ("b", 2, None), ("c", 4, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 4)).unwrap();
        let view = Standing::of_all(kids[..2].iter());
        let req = needed(&kids[0], &cpu(3)).unwrap().unwrap();
        assert!(
            lend(&mut p, &req, &view, T0).is_err(),
            "only b's 2 are idle"
        );
        let req = needed(&kids[0], &cpu(2)).unwrap().unwrap();
        assert!(lend(&mut p, &req, &view, T0).is_ok());
    }

    #[test]
    fn capacity_a_grandchild_borrowed_is_not_lent_again() {
        // p 10 = a 5 + b 5. b lent 3 of its uncarved rest to its child bb,
        // which uses them: b is idle on paper (used 2 = bb's hard) but holds 5.
        let (mut p, mut kids) = family(10, &[("a", 5, Some(10)), ("b", 5, None)]);
        admission::charge(&mut kids[0], "w", pods(1, 5)).unwrap();
        crate::tree::carve(&mut kids[1], "bb", &cpu(2), "2026-01-01T00:00:00Z").unwrap();
        kids[1].status.loans.insert(
            "bb".into(),
            Loan {
                amount: cpu(3),
                since: time::format_rfc3339(T0),
                raised: String::new(),
                generation: 0,
            },
        );
        let spec = kids[1].spec.clone();
        kids[1].status.refresh(&spec);
        assert_eq!(kids[1].status.used, cpu(2));
        assert_eq!(kids[1].status.lent, cpu(3));
        let view = Standing::of_all(kids.iter());
        let req = needed(&kids[0], &cpu(1)).unwrap().unwrap();
        assert!(lend(&mut p, &req, &view, T0).is_err());
    }

    #[test]
    fn a_root_has_no_one_to_borrow_from() {
        let mut root = node("root", "", 4, Some(8));
        admission::charge(&mut root, "w", pods(1, 4)).unwrap();
        let req = needed(&root, &cpu(1)).unwrap().unwrap();
        assert_eq!(
            req.denial(&ResourceList::new()).to_string(),
            "bizrq root: requests.cpu asks 1, 0 left of 4 (max 8, 0 to borrow)"
        );
    }

    #[test]
    fn limits_are_hard_plus_loan_capped_by_max() {
        let (_, kids) = family(18, &[("a", 6, Some(10))]);
        assert_eq!(limits(&kids[0], &cpu(2)), cpu(8));
        assert_eq!(limits(&kids[0], &cpu(9)), cpu(10));
        assert_eq!(limits(&kids[0], &ResourceList::new()), cpu(6));
    }

    #[test]
    fn unchanged_statuses_serialise_as_before() {
        let q = node("a", "p", 6, None);
        let json = serde_json::to_value(&q.status).unwrap();
        for field in ["loans", "lent", "borrowed", "reclaim"] {
            assert!(json.get(field).is_none(), "{field} in {json}");
        }
        // Old stored JSON still reads.
        let old: crate::object::QuotaStatus =
            serde_json::from_str(r#"{"hard":{"requests.cpu":"6"},"used":{"requests.cpu":"0"},"selfUsed":{"requests.cpu":"0"}}"#)
                .unwrap();
        assert!(old.loans.is_empty() && old.reclaim.is_empty());
    }
}
