//! Transfers (§6, docs/semantics.md): moving amounts of keys of `hard` from one quota to
//! another, or from a parent's uncarved remainder into a child. This is the
//! pure part: which quotas change and how (a [`Plan`]), whether it fits, and
//! the guarded steps that carry it out one object at a time. The server's
//! `transfers` module runs the steps and explains the protocol end to end.
//!
//! ## What moves where
//!
//! The amount flows from the source up to the lowest common ancestor (LCA)
//! of source and destination, then down to the destination. Every quota on
//! the way up (source included, LCA excluded) gives the amount out of its
//! hard; every quota on the way down (LCA excluded, destination included)
//! gains it; and each parent's carve-out of the child on the way changes by
//! the same amount, so `used = selfUsed + Σ children's hard` stays true.
//! - Siblings A → B under L: A −a, B +a; L's carve-outs of A and B follow.
//! - "More from the parent" is the case where the source *is* the LCA: its
//!   hard does not change, its uncarved remainder pays. Giving back to an
//!   ancestor is the case where the destination is the LCA.
//! - Across subtrees, the quotas between each end and the LCA change too.
//!
//! A quota changes only on the moved keys it carries: a parent's keys are
//! a subset of its child's, so an ancestor without, say, a model key does
//! not govern it and has nothing to give or check for it.
//!
//! ## Rules
//! - Every moved key is in the hard of the source and of the destination;
//!   amounts are positive.
//! - Giving: a quota gives at most its hard. It may drop below its used —
//!   lowering is always allowed (§2) — and the plan then carries a warning.
//!   A quota between the source and the LCA loses the amount from its hard
//!   *and* from its carve-out of the child below, so its remainder does not
//!   move: it never needs room and is never refused for it.
//! - Receiving: at the LCA, and at every parent on the way down, the raised
//!   carve-out must fit the parent's remainder once the lowered ones are
//!   returned — the §2 rule for raising a child, once per parent. For a
//!   parent below the LCA, whose hard rises by the same amount, that only
//!   refuses one that is over-committed already. Refusals name the quota,
//!   the key, what is asked and what is left, as admission does:
//!   `bizrq cv: requests.nvidia.com/gpu asks 4, 2 left of 16`.
//! - `max`: a receiving quota whose max would fall below its new hard gets
//!   max raised to it (a ceiling is never below the guarantee). Undoing a
//!   transfer leaves max where it is.
//! - Cash budgets move like any key and mix freely with others in one
//!   transfer: they are carved out of the parent like the rest. A loan (a
//!   transfer that returns on its own) cannot carry cash, since card-hours
//!   spent meanwhile cannot be given back ([`check_loan`]).
//!
//! ## Steps, holds and the decision
//!
//! A plan runs as single-object writes ([`Step`]), each guarded: it finds
//! its `from` values and writes its `to` values, finds `to` already (a
//! retry: nothing to do), or finds anything else and refuses
//! ([`TransferError::Moved`]). Their order keeps every carve-out at least
//! its child's hard, so no capacity is ever promised twice:
//! - giving, bottom-up: a quota's hard is lowered before its parent's
//!   carve-out of it, and a parent's own hard before its carve-out of the
//!   child below (so no free room appears in between);
//! - the decision at the LCA ([`commit`]): one write lowers the giving
//!   side's carve-out and raises the receiving side's if it fits — or
//!   records that it does not;
//! - receiving, top-down: a parent raises its carve-out of the child below
//!   before its own hard rises, and a child's hard rises only after its
//!   parent's carve-out of it did;
//! - after a refusal, the giving side is undone top-down, by the same rules.
//!
//! Before the first step, every carve-out the plan changes is held
//! ([`hold`]): recorded in its parent's `status.transfers` under the
//! transfer's id. While held, a carve-out differs from its child's hard by
//! design, so the resync's repair leaves it alone, and edits of the child
//! that are not the transfer's own are refused (`tree::check_not_held`).

use crate::admission::{self, Shortfall};
use crate::keys::{cash_target, Key, KeyConfig};
use crate::lineage::{End, Forest};
use crate::object::transfers::{Decision, Hold};
use crate::object::Quota;
use crate::quantity::Quantity;
use crate::resources::{self, ResourceList};
use crate::time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    #[error("bizrq transfer: {0}")]
    Invalid(String),
    #[error("bizrq {0} not found")]
    NotFound(String),
    #[error("bizrq {quota}: {key} is not in its hard, so it cannot {role} it: choose a key both ends have")]
    MissingKey {
        quota: String,
        key: String,
        role: &'static str,
    },
    #[error("bizrq {quota}: {key} gives {asked}, its hard is only {hard}: give {hard} at most")]
    Insufficient {
        quota: String,
        key: String,
        asked: Quantity,
        hard: Quantity,
    },
    #[error("{}", admission::join(.0))]
    DoesNotFit(Vec<Shortfall>),
    #[error("bizrq {parent}: its carve-out of {child} is held by transfer {by}; try again when that one is done")]
    Held {
        parent: String,
        child: String,
        by: String,
    },
    #[error("bizrq {parent}: its carve-out of {child} is not {child}'s hard ({detail}); a change is in flight, try again in a moment")]
    InFlux {
        parent: String,
        child: String,
        detail: String,
    },
    #[error("{0}")]
    Moved(Box<Moved>),
    #[error("bizrq {quota}: transfer {id} holds nothing here")]
    NotHeld { id: String, quota: String },
}

/// A value a step did not find as planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bizrq {quota}: {what} {key} is {found}, transfer {id} expected {expected}; it was changed meanwhile")]
pub struct Moved {
    pub id: String,
    pub quota: String,
    pub what: String,
    pub key: String,
    pub expected: Quantity,
    pub found: Quantity,
}

/// Where a transfer goes: its source (the quota that pays: `from`, or the
/// destination's parent), destination, lowest common ancestor, and the
/// quotas in between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    pub source: String,
    pub to: String,
    pub lca: String,
    /// From the source up to the LCA's child (empty when the source is the
    /// LCA).
    pub up: Vec<String>,
    /// From the LCA's child down to the destination (empty when the
    /// destination is the LCA).
    pub down: Vec<String>,
}

/// The path of a transfer `from` → `to` (`from` None: from `to`'s parent)
/// through `quotas`, which must hold both ends and all their ancestors.
pub fn path(
    quotas: &BTreeMap<String, Quota>,
    from: Option<&str>,
    to: &str,
) -> Result<Path, TransferError> {
    let target = quotas
        .get(to)
        .ok_or_else(|| TransferError::NotFound(to.into()))?;
    let source = match from {
        Some(f) => {
            if !quotas.contains_key(f) {
                return Err(TransferError::NotFound(f.into()));
            }
            f.to_string()
        }
        None if target.spec.parent.is_empty() => {
            return Err(TransferError::Invalid(format!(
                "{to} is a root of the tree: it has no parent to take quota from"
            )))
        }
        None => target.spec.parent.clone(),
    };
    if source == to {
        return Err(TransferError::Invalid(format!(
            "{to} would give quota to itself"
        )));
    }
    let forest = Forest::from_quotas(quotas.values());
    let chain = |start: &str| -> Result<Vec<String>, TransferError> {
        let line = forest.line(start);
        match line.end {
            End::Root => Ok(line.names.iter().map(|n| n.to_string()).collect()),
            End::Unknown => Err(TransferError::NotFound(
                line.names[line.names.len() - 1].into(),
            )),
            End::Cycle(_) => Err(TransferError::Invalid(format!(
                "the parents of {start} form a cycle"
            ))),
        }
    };
    let up = chain(&source)?;
    let down = chain(to)?;
    let Some(lca) = forest.lca(&source, to).map(str::to_string) else {
        return Err(TransferError::Invalid(format!(
            "{source} and {to} are in different trees: no common ancestor to move quota through"
        )));
    };
    let at = up.iter().position(|n| *n == lca).unwrap_or(up.len());
    let below = down.iter().position(|n| *n == lca).unwrap_or(down.len());
    Ok(Path {
        source,
        to: to.to_string(),
        lca,
        up: up[..at].to_vec(),
        down: down[..below].iter().rev().cloned().collect(),
    })
}

/// Whose approval a transfer needs besides an admin's: an owner of the
/// lowest common ancestor of its ends (or of any ancestor of that, who owns
/// its subtree too). Returns the LCA's name.
pub fn approvers_scope(
    quotas: &BTreeMap<String, Quota>,
    from: Option<&str>,
    to: &str,
) -> Result<String, TransferError> {
    Ok(path(quotas, from, to)?.lca)
}

/// One quota on a transfer's way and what changes for it, on the moved
/// keys it carries: its hard, and (the same values) its parent's carve-out
/// of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub quota: String,
    pub parent: String,
    pub before: ResourceList,
    pub after: ResourceList,
}

/// What a transfer does, as data: computed from fresh state when it is
/// approved, stored with it, and run step by step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub source: String,
    pub to: String,
    pub lca: String,
    pub amounts: ResourceList,
    /// The giving side, from the source up to the LCA's child.
    pub up: Vec<Change>,
    /// The receiving side, from the LCA's child down to the destination.
    pub down: Vec<Change>,
    /// Quotas left below their used by giving (allowed, worth saying).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One guarded single-object write of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `quota`'s hard on the moved keys, `from` → `to` (a spec write).
    Hard {
        quota: String,
        from: ResourceList,
        to: ResourceList,
    },
    /// `parent`'s carve-out of `child` on the moved keys (a status write).
    Carve {
        parent: String,
        child: String,
        from: ResourceList,
        to: ResourceList,
    },
}

impl Step {
    /// The object the step writes.
    pub fn quota(&self) -> &str {
        match self {
            Step::Hard { quota, .. } => quota,
            Step::Carve { parent, .. } => parent,
        }
    }

    /// A step on keys its quota does not carry changes nothing.
    pub fn is_noop(&self) -> bool {
        match self {
            Step::Hard { from, .. } | Step::Carve { from, .. } => from.is_empty(),
        }
    }

    fn undo(self) -> Step {
        match self {
            Step::Hard { quota, from, to } => Step::Hard {
                quota,
                from: to,
                to: from,
            },
            Step::Carve {
                parent,
                child,
                from,
                to,
            } => Step::Carve {
                parent,
                child,
                from: to,
                to: from,
            },
        }
    }
}

fn hard_step(c: &Change) -> Step {
    Step::Hard {
        quota: c.quota.clone(),
        from: c.before.clone(),
        to: c.after.clone(),
    }
}

fn carve_step(c: &Change) -> Step {
    Step::Carve {
        parent: c.parent.clone(),
        child: c.quota.clone(),
        from: c.before.clone(),
        to: c.after.clone(),
    }
}

impl Plan {
    /// Steps before the decision: bottom-up, each quota's hard before its
    /// parent's carve-out of it, and a parent's hard before its carve-out
    /// of the child below.
    pub fn giving(&self) -> Vec<Step> {
        let mut out = Vec::new();
        for (i, c) in self.up.iter().enumerate() {
            out.push(hard_step(c));
            if i > 0 {
                out.push(carve_step(&self.up[i - 1]));
            }
        }
        out.retain(|s| !s.is_noop());
        out
    }

    /// Steps after a commit: top-down, a parent's carve-out of the child
    /// below before its own hard, and a child's hard after its parent's
    /// carve-out of it.
    pub fn receiving(&self) -> Vec<Step> {
        let mut out = Vec::new();
        for (j, c) in self.down.iter().enumerate() {
            if let Some(below) = self.down.get(j + 1) {
                out.push(carve_step(below));
            }
            out.push(hard_step(c));
        }
        out.retain(|s| !s.is_noop());
        out
    }

    /// Steps after an abort: the giving steps undone, top-down.
    pub fn undo_giving(&self) -> Vec<Step> {
        self.giving().into_iter().rev().map(Step::undo).collect()
    }

    /// The carve-outs the transfer changes, by parent: child → its hard on
    /// the moved keys when done. The LCA is always present (it records the
    /// decision), even when it changes nothing.
    pub fn holds(&self) -> BTreeMap<String, BTreeMap<String, ResourceList>> {
        let mut out: BTreeMap<String, BTreeMap<String, ResourceList>> = BTreeMap::new();
        out.entry(self.lca.clone()).or_default();
        for c in self.up.iter().chain(&self.down) {
            if !c.before.is_empty() {
                out.entry(c.parent.clone())
                    .or_default()
                    .insert(c.quota.clone(), c.after.clone());
            }
        }
        out
    }

    /// The carve-out changes the decision makes at the LCA.
    fn at_lca(&self) -> Vec<&Change> {
        self.up
            .last()
            .into_iter()
            .chain(self.down.first())
            .collect()
    }
}

/// Amounts must be positive, of valid keys, and not empty.
pub fn check_amounts(amounts: &ResourceList, cfg: &KeyConfig) -> Result<(), TransferError> {
    if amounts.is_empty() {
        return Err(TransferError::Invalid("no amounts to transfer".into()));
    }
    for (k, v) in amounts {
        Key::parse(k, cfg).map_err(|e| TransferError::Invalid(e.to_string()))?;
        if v.nanos() <= 0 {
            return Err(TransferError::Invalid(format!(
                "{k}: amounts must be positive, not {v}"
            )));
        }
    }
    Ok(())
}

/// A loan returns on its own; cash spent meanwhile could not be returned,
/// so a loan moves no cash keys.
pub fn check_loan(amounts: &ResourceList) -> Result<(), TransferError> {
    match amounts.keys().find(|k| cash_target(k).is_some()) {
        Some(k) => Err(TransferError::Invalid(format!(
            "a loan cannot carry {k}: budget spent during the loan could not be returned; transfer it for good instead"
        ))),
        None => Ok(()),
    }
}

/// Plan the transfer of `amounts` from `from` (None: `to`'s parent) to
/// `to`, from the quotas as they are now. `quotas` must hold both ends and
/// all their ancestors, with fresh status.
pub fn plan(
    quotas: &BTreeMap<String, Quota>,
    from: Option<&str>,
    to: &str,
    amounts: &ResourceList,
    cfg: &KeyConfig,
) -> Result<Plan, TransferError> {
    check_amounts(amounts, cfg)?;
    let path = path(quotas, from, to)?;
    let get = |n: &str| {
        quotas
            .get(n)
            .ok_or_else(|| TransferError::NotFound(n.into()))
    };
    for (end, role) in [(&path.source, "give"), (&path.to, "receive")] {
        let q = get(end)?;
        if let Some(k) = amounts.keys().find(|k| !q.spec.hard.contains_key(*k)) {
            return Err(TransferError::MissingKey {
                quota: end.clone(),
                key: k.clone(),
                role,
            });
        }
    }
    let change = |name: &String, gives: bool| -> Result<Change, TransferError> {
        let q = get(name)?;
        let mut before = ResourceList::new();
        let mut after = ResourceList::new();
        for (k, a) in amounts {
            let Some(h) = q.spec.hard.get(k) else {
                continue;
            };
            let new = if gives {
                if h < a {
                    return Err(TransferError::Insufficient {
                        quota: name.clone(),
                        key: k.clone(),
                        asked: *a,
                        hard: *h,
                    });
                }
                h.saturating_sub(*a)
            } else {
                h.saturating_add(*a)
            };
            before.insert(k.clone(), *h);
            after.insert(k.clone(), new);
        }
        Ok(Change {
            quota: name.clone(),
            parent: q.spec.parent.clone(),
            before,
            after,
        })
    };
    let up = path
        .up
        .iter()
        .map(|n| change(n, true))
        .collect::<Result<Vec<_>, _>>()?;
    let down = path
        .down
        .iter()
        .map(|n| change(n, false))
        .collect::<Result<Vec<_>, _>>()?;
    // Each carve-out to change must be its child's hard now: otherwise a
    // create, an edit or a repair is half-way, and the plan would be built
    // on a value about to change.
    for c in up.iter().chain(&down) {
        let parent = get(&c.parent)?;
        let Some(carve) = parent.status.children.get(&c.quota) else {
            return Err(TransferError::InFlux {
                parent: c.parent.clone(),
                child: c.quota.clone(),
                detail: "none recorded".into(),
            });
        };
        for (k, h) in &c.before {
            let carved = resources::get(&carve.hard, k);
            if carved != *h {
                return Err(TransferError::InFlux {
                    parent: c.parent.clone(),
                    child: c.quota.clone(),
                    detail: format!("{k} carved {carved}, hard {h}"),
                });
            }
        }
    }
    let plan = Plan {
        source: path.source.clone(),
        to: path.to.clone(),
        lca: path.lca.clone(),
        amounts: amounts.clone(),
        up,
        down,
        warnings: Vec::new(),
    };
    // Room: at the LCA, then at each parent on the way down.
    settle(get(&plan.lca)?, None, &plan.at_lca()).map_err(TransferError::DoesNotFit)?;
    for (j, c) in plan.down.iter().enumerate() {
        if let Some(below) = plan.down.get(j + 1) {
            settle(get(&c.quota)?, Some(c), &[below]).map_err(TransferError::DoesNotFit)?;
        }
    }
    let mut warnings = Vec::new();
    for c in &plan.up {
        let q = get(&c.quota)?;
        for (k, after) in &c.after {
            let used = resources::get(&q.status.used, k);
            if *after < used {
                warnings.push(if cash_target(k).is_some() {
                    format!("bizrq {}: {k} becomes {after}, below the {used} already spent: the budget is exhausted", c.quota)
                } else {
                    format!("bizrq {}: {k} becomes {after}, below the {used} in use: it is over quota and new workloads asking for {k} are denied", c.quota)
                });
            }
        }
    }
    Ok(Plan { warnings, ..plan })
}

/// `parent` after the changes it makes for a transfer: its own hard (when
/// it is on the receiving side), its carve-outs lowered, then raised where
/// the remainder allows. Refused with the shortfalls otherwise.
fn settle(parent: &Quota, own: Option<&Change>, kids: &[&Change]) -> Result<Quota, Vec<Shortfall>> {
    let mut q = parent.clone();
    if let Some(c) = own {
        set_hard_keys(&mut q, &c.after);
    }
    let mut raise = ResourceList::new();
    for c in kids {
        let Some(carve) = q.status.children.get_mut(&c.quota) else {
            continue;
        };
        for (k, after) in &c.after {
            let before = resources::get(&c.before, k);
            if *after < before {
                carve.hard.insert(k.clone(), *after);
            } else {
                let e = raise.entry(k.clone()).or_insert(Quantity::ZERO);
                *e = e.saturating_add(after.saturating_sub(before));
            }
        }
    }
    q.status.refresh(&q.spec);
    let short = admission::shortfalls(&q, &raise);
    if !short.is_empty() {
        return Err(short);
    }
    for c in kids {
        if let Some(carve) = q.status.children.get_mut(&c.quota) {
            carve
                .hard
                .extend(c.after.iter().map(|(k, v)| (k.clone(), *v)));
        }
    }
    q.status.refresh(&q.spec);
    Ok(q)
}

/// Set hard on some keys, raising max where it would fall below.
fn set_hard_keys(q: &mut Quota, values: &ResourceList) {
    for (k, v) in values {
        q.spec.hard.insert(k.clone(), *v);
        if let Some(m) = q.spec.max.get_mut(k) {
            if *m < *v {
                *m = *v;
            }
        }
    }
    q.status.refresh(&q.spec);
}

/// Hold `children`'s carve-outs in `parent` for transfer `id`. Refused when
/// one is held by another transfer, or not recorded. Holding again the
/// same is a no-op; an undecided hold left by an earlier attempt takes the
/// new targets; a decided one stays as it is. Returns whether the parent
/// changed.
pub fn hold(
    parent: &mut Quota,
    id: &str,
    children: &BTreeMap<String, ResourceList>,
    now_ms: i64,
) -> Result<bool, TransferError> {
    if let Some(h) = parent.status.transfers.get(id) {
        if h.decision.is_some() || h.children == *children {
            return Ok(false);
        }
    }
    for child in children.keys() {
        let other = parent
            .status
            .transfers
            .iter()
            .find(|(by, h)| by.as_str() != id && h.children.contains_key(child));
        if let Some((by, _)) = other {
            return Err(TransferError::Held {
                parent: parent.name().into(),
                child: child.clone(),
                by: by.clone(),
            });
        }
        if !parent.status.children.contains_key(child) {
            return Err(TransferError::InFlux {
                parent: parent.name().into(),
                child: child.clone(),
                detail: "none recorded".into(),
            });
        }
    }
    parent.status.transfers.insert(
        id.to_string(),
        Hold {
            children: children.clone(),
            since: time::format_rfc3339(now_ms),
            decision: None,
        },
    );
    Ok(true)
}

/// Let go of what transfer `id` holds in `parent`.
pub fn release(parent: &mut Quota, id: &str) -> bool {
    parent.status.transfers.remove(id).is_some()
}

/// Where a guarded write stands on its keys.
enum Found {
    /// Every key has `from`: write.
    From,
    /// Every key has `to` already: done before.
    To,
    /// Something else, on this key.
    Other(String, Quantity, Quantity),
}

fn found(current: &ResourceList, from: &ResourceList, to: &ResourceList) -> Found {
    if to.iter().all(|(k, v)| current.get(k) == Some(v)) {
        return Found::To;
    }
    for (k, v) in from {
        let cur = resources::get(current, k);
        if cur != *v {
            return Found::Other(k.clone(), *v, cur);
        }
    }
    Found::From
}

/// Apply one step of transfer `id` to the quota it writes. Guarded: `from`
/// found → written (true); `to` found → a retry, nothing to do (false);
/// anything else → `Moved`.
pub fn apply(q: &mut Quota, step: &Step, id: &str) -> Result<bool, TransferError> {
    let moved = |what: String, key: String, expected, found| {
        TransferError::Moved(Box::new(Moved {
            id: id.into(),
            quota: q.name().into(),
            what,
            key,
            expected,
            found,
        }))
    };
    match step {
        Step::Hard { from, to, .. } => match found(&q.spec.hard, from, to) {
            Found::To => Ok(false),
            Found::Other(k, e, f) => Err(moved("hard".into(), k, e, f)),
            Found::From => {
                set_hard_keys(q, to);
                Ok(true)
            }
        },
        Step::Carve {
            child, from, to, ..
        } => {
            let current = q.status.carved(child);
            match found(&current, from, to) {
                Found::To => Ok(false),
                Found::Other(k, e, f) => Err(moved(format!("carve-out of {child}"), k, e, f)),
                Found::From => {
                    if let Some(c) = q.status.children.get_mut(child) {
                        c.hard.extend(to.iter().map(|(k, v)| (k.clone(), *v)));
                    }
                    q.status.refresh(&q.spec);
                    Ok(true)
                }
            }
        }
    }
}

/// Decide transfer `id` at its LCA, once: if the carve-outs there are as
/// planned and the receiving side's raise fits the remainder left after
/// the giving side's is lowered, both change in this one write —
/// `Committed`; otherwise nothing changes but the recorded `Aborted`, with
/// the reason. A decision already taken is returned as it is. Returns
/// whether the LCA changed, and the decision.
pub fn commit(lca: &mut Quota, id: &str, plan: &Plan) -> Result<(bool, Decision), TransferError> {
    let Some(hold) = lca.status.transfers.get(id) else {
        return Err(TransferError::NotHeld {
            id: id.into(),
            quota: lca.name().into(),
        });
    };
    if let Some(d) = &hold.decision {
        return Ok((false, d.clone()));
    }
    let mut moved = None;
    for c in plan.at_lca() {
        let current = lca.status.carved(&c.quota);
        if let Found::Other(k, e, f) = found(&current, &c.before, &c.before) {
            moved = Some(format!(
                "bizrq {}: carve-out of {} {k} is {f}, transfer {id} expected {e}; it was changed meanwhile",
                lca.name(),
                c.quota
            ));
        }
    }
    let decision = match moved {
        Some(reason) => Decision::Aborted { reason },
        None => match settle(lca, None, &plan.at_lca()) {
            Ok(after) => {
                *lca = after;
                Decision::Committed
            }
            Err(short) => Decision::Aborted {
                reason: admission::join(&short),
            },
        },
    };
    decide(lca, id, decision)
}

/// Record that transfer `id` is aborted (a step before the decision could
/// not be made), unless it was decided already. Returns whether the LCA
/// changed, and the decision that stands.
pub fn abort(lca: &mut Quota, id: &str, reason: &str) -> Result<(bool, Decision), TransferError> {
    decide(
        lca,
        id,
        Decision::Aborted {
            reason: reason.into(),
        },
    )
}

fn decide(
    lca: &mut Quota,
    id: &str,
    decision: Decision,
) -> Result<(bool, Decision), TransferError> {
    let name = lca.name().to_string();
    let hold = lca
        .status
        .transfers
        .get_mut(id)
        .ok_or_else(|| TransferError::NotHeld {
            id: id.into(),
            quota: name,
        })?;
    if let Some(d) = &hold.decision {
        return Ok((false, d.clone()));
    }
    hold.decision = Some(decision.clone());
    Ok((true, decision))
}

#[cfg(test)]
mod tests;
