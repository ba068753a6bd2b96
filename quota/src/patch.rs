//! A status write as a JSON merge patch (RFC 7386): only what changed
//! between the status a write was decided on and the status it writes.
//! A hot quota's status holds every workload's charge, and a batch of
//! admissions changes a few of them (and the totals derived from them):
//! serialising the whole status on every write was most of a write's cost.
//!
//! The patch is exact against the document the old status serialises to:
//! applied to it, it gives the document the new status serialises to,
//! member for member (`tests/all/patch.rs`). Maps keyed by name (workloads,
//! children, users, …) are patched entry by entry, an entry that changed
//! by its changed members; a member a status leaves out when empty is
//! removed (`null`) when it becomes empty, as a whole write would leave it
//! out. Lists are replaced whole, as merge patch does.
//!
//! What it does not carry: `summary` and `readable`, which are derived for
//! people from spec and status when written (`derived_patch`), and the
//! ledger entries of the copy (never serialised).

use crate::keys::KeyConfig;
use crate::object::{QuotaSpec, QuotaStatus};
use crate::summary;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The merge patch of `status` that turns `old` into `new` (empty: nothing
/// to write).
pub fn status_merge_patch(old: &QuotaStatus, new: &QuotaStatus) -> Map<String, Value> {
    // Every member named: a member added to the status cannot be left out
    // of its patch without this failing to compile.
    let QuotaStatus {
        hard,
        used,
        self_used,
        last_reconcile_time,
        children,
        workloads,
        cash_accrued,
        budgets,
        reservations,
        loans,
        loan_generation,
        loan_fence,
        lent,
        borrowed,
        reclaim,
        transfers,
        summary: _,
        queue,
        queue_summary,
        users,
        deleted,
        ledger: _,
        ledger_outbox,
        quality_billed_to,
        readable: _,
        refunds,
        exhausted,
        fair_sharing,
    } = new;
    let mut p = Patch(Map::new());
    // Written even when empty (`#[serde(default)]` only).
    p.map("hard", &old.hard, hard, Always);
    p.map("used", &old.used, used, Always);
    p.map("selfUsed", &old.self_used, self_used, Always);
    // Left out when empty or absent.
    p.whole(
        "lastReconcileTime",
        &old.last_reconcile_time,
        last_reconcile_time,
    );
    p.map("children", &old.children, children, IfAny);
    p.map("workloads", &old.workloads, workloads, IfAny);
    p.map("cashAccrued", &old.cash_accrued, cash_accrued, IfAny);
    p.map("budgets", &old.budgets, budgets, IfAny);
    p.map("reservations", &old.reservations, reservations, IfAny);
    p.map("loans", &old.loans, loans, IfAny);
    p.count("loanGeneration", old.loan_generation, *loan_generation);
    p.count("loanFence", old.loan_fence, *loan_fence);
    p.map("lent", &old.lent, lent, IfAny);
    p.map("borrowed", &old.borrowed, borrowed, IfAny);
    p.map("reclaim", &old.reclaim, reclaim, IfAny);
    p.map("transfers", &old.transfers, transfers, IfAny);
    p.list("queue", &old.queue, queue);
    p.whole("queueSummary", &old.queue_summary, queue_summary);
    p.map("users", &old.users, users, IfAny);
    p.map("deleted", &old.deleted, deleted, IfAny);
    p.map("refunds", &old.refunds, refunds, IfAny);
    p.map("exhausted", &old.exhausted, exhausted, IfAny);
    p.whole("fairSharing", &old.fair_sharing, fair_sharing);
    p.whole("qualityBilledTo", &old.quality_billed_to, quality_billed_to);
    // Every member of a window is always written: replaced whole.
    p.whole("ledgerOutbox", &old.ledger_outbox, ledger_outbox);
    p.0
}

/// `summary` and `readable` of a status written with `spec`, as members of
/// a merge patch that replaces whatever a reader may find stored there:
/// `summary` whole, every member the written one lacks removed, and
/// `readable` with every key of `stored` (the status as last read, and as
/// derived from the last spec) it no longer has removed. `in_use` is
/// what runs in the quota's subtree (`summary::summarize`). Derived for
/// people, so not worth a comparison: a few short strings per write.
pub fn derived_patch(
    spec: &QuotaSpec,
    status: &QuotaStatus,
    in_use: &crate::ResourceList,
    cfg: &KeyConfig,
    stored: &[&BTreeMap<String, String>],
) -> Map<String, Value> {
    let (summary, readable) = summary::summarize(spec, status, in_use, cfg);
    let mut out = Map::new();
    let mut s = to_value(&summary);
    if let Value::Object(members) = &mut s {
        // The optional members left out of the JSON: removed, not kept.
        let everything = to_value(&crate::object::Summary {
            gpu: Some(String::new()),
            card_hours_left: Some(String::new()),
            borrowing: Some(String::new()),
            ..Default::default()
        });
        if let Value::Object(all) = everything {
            for k in all.keys() {
                members.entry(k.clone()).or_insert(Value::Null);
            }
        }
    }
    out.insert("summary".into(), s);
    let mut r: Map<String, Value> = stored
        .iter()
        .flat_map(|m| m.keys())
        .map(|k| (k.clone(), Value::Null))
        .collect();
    for (k, v) in readable {
        r.insert(k, Value::String(v));
    }
    if !r.is_empty() {
        out.insert("readable".into(), Value::Object(r));
    }
    out
}

/// Applies merge patch `patch` to `target` (RFC 7386): what the API server
/// does with one. For tests and for readers of a patch's effect.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            apply_merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Whether a member is written when its map is empty.
#[derive(Clone, Copy, PartialEq)]
enum Empty {
    Always,
    IfAny,
}
use Empty::{Always, IfAny};

struct Patch(Map<String, Value>);

impl Patch {
    /// A map member, entry by entry.
    fn map<'a, M, V>(&mut self, name: &str, old: &'a M, new: &'a M, empty: Empty)
    where
        M: Serialize + PartialEq,
        &'a M: IntoIterator<Item = (&'a String, &'a V)>,
        V: Serialize + PartialEq + 'a,
    {
        if old == new {
            return;
        }
        if new.into_iter().next().is_none() && empty == IfAny {
            self.0.insert(name.into(), Value::Null);
            return;
        }
        if old.into_iter().next().is_none() {
            self.0.insert(name.into(), to_value(new));
            return;
        }
        let mut out = Map::new();
        let (mut a, mut b) = (old.into_iter().peekable(), new.into_iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some((k, _)), None) => {
                    out.insert((*k).clone(), Value::Null);
                    a.next();
                }
                (None, Some((k, v))) => {
                    out.insert((*k).clone(), to_value(v));
                    b.next();
                }
                (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                    std::cmp::Ordering::Less => {
                        out.insert((*ka).clone(), Value::Null);
                        a.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.insert((*kb).clone(), to_value(vb));
                        b.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if va != vb {
                            if let Some(d) = diff(&to_value(va), &to_value(vb)) {
                                out.insert((*kb).clone(), d);
                            }
                        }
                        a.next();
                        b.next();
                    }
                },
            }
        }
        if !out.is_empty() {
            self.0.insert(name.into(), Value::Object(out));
        }
    }

    /// A member left out when absent, patched by its changed members.
    fn whole<V: Serialize + PartialEq>(&mut self, name: &str, old: &Option<V>, new: &Option<V>) {
        if old == new {
            return;
        }
        let d = match (old, new) {
            (_, None) => Some(Value::Null),
            (None, Some(v)) => Some(to_value(v)),
            (Some(a), Some(b)) => diff(&to_value(a), &to_value(b)),
        };
        if let Some(d) = d {
            self.0.insert(name.into(), d);
        }
    }

    /// A counter left out when zero.
    fn count(&mut self, name: &str, old: u64, new: u64) {
        if old != new {
            let v = if new == 0 { Value::Null } else { new.into() };
            self.0.insert(name.into(), v);
        }
    }

    /// A list member left out when empty: replaced whole.
    fn list<V: Serialize + PartialEq>(&mut self, name: &str, old: &[V], new: &[V]) {
        if old == new {
            return;
        }
        let v = if new.is_empty() {
            Value::Null
        } else {
            to_value(&new)
        };
        self.0.insert(name.into(), v);
    }
}

/// The merge patch that turns document `old` into `new` (None: equal).
fn diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            for (k, v) in b {
                match a.get(k) {
                    Some(old) => {
                        if let Some(d) = diff(old, v) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (a, b) if a == b => None,
        (_, b) => Some(b.clone()),
    }
}

fn to_value<T: Serialize + ?Sized>(v: &T) -> Value {
    // A status member always serialises: its maps are keyed by strings.
    serde_json::to_value(v).expect("a status member serialises to JSON")
}
