//! Reservations as a quota's status holds them (docs/budgets.md §2, §9):
//! `status.reservations[cash key][workload]`, beside the workload's charge
//! in `status.workloads` and changed only with it, in the same write.
//!
//! - `decide` is the admission's part: the reservations a workload holds
//!   after a charge, made with `BudgetState::admit` on the state the status
//!   holds (`state_of`), or the refusal. It changes nothing; the caller
//!   writes the result (`apply`) in the write that makes the charge, so a
//!   denial leaves the status as it was and a retried admission, finding
//!   its charge and reservation in place, reserves nothing twice.
//! - `consume` moves a reservation's use along as cash accrues (both modes
//!   call it over each accrual window): what its workload's admitted charge
//!   costs in the window. Standalone that is exactly the workload's accrual;
//!   in cluster mode its pods accrue at most that, so what the reservation
//!   still holds bounds what the workload can still spend before its
//!   deadline.
//! - A reservation whose charge is gone is settled: `QuotaStatus::refresh`
//!   drops it (`settle_released`), so every path that releases a charge —
//!   a DELETE, a move to another quota, a deferred release, the
//!   controller's reconcile of a workload that is gone — releases what it
//!   still held, in that same write. What it used is already in spent.
//!
//! Budgets are checked where cash is checked today: in the quota the
//! workload is bound to (`admission::check_fits`), not in its ancestors,
//! whose cash is carved out to their children. The quota's own budget is
//! its hard less what its children's carve-outs hold of the key.

use super::price_list::PriceList;
use super::reserve::{Ask, BudgetDenial, BudgetState};
use super::{from_cash_accrued, from_quantity};
use crate::cash::QosMultipliers;
use crate::keys::cash_target;
use crate::object::budgets::{Reservation, WithoutRunTime};
use crate::object::{Charge, Quota, QuotaSpec, QuotaStatus};
use crate::resources;
use crate::workload::runtime::RunTimeError;
use crate::workload::{PodSet, Workload, WorkloadRef};
use std::collections::BTreeMap;

/// Most open reservations one budget keeps. Past it new reservations are
/// refused (with `BudgetRefusal::TooMany`) until some settle: the status
/// is one object, and each reservation is a line of it.
pub const MAX_OPEN: usize = 10_000;

/// Why a budget refuses a charge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetRefusal {
    #[error("{0}")]
    Denied(BudgetDenial),
    #[error("bizrq {quota}: {key} already holds {open} open reservations, the most one budget keeps; {workload} can be admitted once some of them settle")]
    TooMany {
        quota: String,
        key: String,
        workload: String,
        open: usize,
    },
    #[error("bizrq {quota}: {key} cannot reserve for {workload}: {error}")]
    RunTime {
        quota: String,
        key: String,
        workload: String,
        error: RunTimeError,
    },
}

impl BudgetRefusal {
    /// The quota whose budget refused.
    pub fn quota(&self) -> &str {
        match self {
            BudgetRefusal::Denied(
                BudgetDenial::Short(n) | BudgetDenial::Cap(n) | BudgetDenial::Spent(n),
            ) => &n.quota,
            BudgetRefusal::Denied(BudgetDenial::NoRunTime { quota, .. })
            | BudgetRefusal::TooMany { quota, .. }
            | BudgetRefusal::RunTime { quota, .. } => quota,
        }
    }
}

/// Where the run time of a charge comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunDecl {
    /// Read from the object under review (`runtime::declared`), in ms.
    Object(Result<Option<i64>, RunTimeError>),
    /// Read from the new object of an update that changes what a budget
    /// reads (`update::Changes::budget`: counts, requests, model, QoS
    /// class, run time): its reservation is judged again as a create of
    /// the new object would be, even when no count rises.
    Changed(Result<Option<i64>, RunTimeError>),
    /// Not in the request (a scale, an HPA): what is left of the run time
    /// the workload's reservation was made for.
    AsReserved,
}

impl RunDecl {
    /// What `w` declares (`Workload::run_time`), as budgets reserve on it.
    pub fn of(w: &Workload) -> RunDecl {
        RunDecl::Object(w.run_time.clone().map(|r| r.map(|r| r.ms)))
    }
}

/// The state of `key`'s budget as `q`'s status holds it now: the period
/// (none: one window for all time), the quota's own budget (hard less its
/// children's carve-outs of the key), carry-in, spent, the open
/// reservations and the cap.
pub fn state_of(q: &Quota, key: &str) -> BudgetState {
    let hard = resources::get(&q.spec.hard, key);
    let carved = resources::get(&q.status.allocated(), key);
    let period = q.status.budgets.get(key);
    BudgetState {
        quota: q.name().to_string(),
        key: key.to_string(),
        window: period.map_or_else(|| crate::object::period::Period::None.at(0), |p| p.window()),
        budget: from_quantity(hard.saturating_sub(carved)),
        carry_in: period.map_or(0, |p| p.carry_in),
        top_ups: period.map_or(0, |p| p.top_ups),
        spent: from_cash_accrued(q.status.accrued(key)),
        reservations: q.status.reservations.get(key).cloned().unwrap_or_default(),
        cap: q
            .spec
            .budgets
            .get(key)
            .and_then(|p| p.reservation_cap)
            .map(from_quantity),
    }
}

/// `Job team/train` for `batch/Job/team/train`: the workload as a denial
/// names it.
pub fn workload_name(wref: &str) -> String {
    match WorkloadRef::parse(wref) {
        Some(r) => format!("{} {}/{}", r.kind, r.namespace, r.name),
        None => wref.to_string(),
    }
}

/// What `charge` holds of `target`, its pod sets counted as charged.
fn held_of(charge: &Charge, target: &str) -> i128 {
    charge.pod_sets.iter().fold(0i128, |sum, s| {
        let per_pod = resources::get(&s.per_pod, target).nanos();
        sum.saturating_add(per_pod.saturating_mul(charge.charged_count(s) as i128))
    })
}

/// The reservations `wref` holds after charging `new` in `q` (its charge
/// before: `old`), by cash key; or why a budget refuses it. For each cash
/// key of hard whose resource the charge uses:
///
/// - an update that changes what a budget reads (`RunDecl::Changed`) is
///   judged as a create of the new object would be, given what the old
///   one holds: its run still counts from its start (past its end, what
///   is left is nothing). One that asks no more (its cost rate not
///   higher, its end not later) is never refused: the reservation keeps
///   or shrinks to what the rest of the run needs. One that asks more
///   is decided below, refused in a create's words when that does not
///   fit, unless it needs no more than its reservation still holds back;
///   if its rate rose after its run ended, the run starts again now;
/// - any other charge that does not raise what the workload holds of the
///   resource (a retry, a scale through the subresource) keeps the
///   reservation it has: decreases are never refused;
/// - otherwise `BudgetState::admit` decides under the key's policy: with a
///   declared run time (or `reserveDefault`) it reserves, replacing the
///   workload's earlier reservation (what it used of that counts against
///   the new one); without one under `admit`, it needs something left
///   after the open reservations (with none open, the quota's own spent
///   check decides, as before reservations existed).
///
/// Pure: nothing in `q` changes.
#[allow(clippy::too_many_arguments)]
pub fn decide(
    q: &Quota,
    wref: &str,
    old: Option<&Charge>,
    new: &Charge,
    run: &RunDecl,
    now_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
) -> Result<BTreeMap<String, Reservation>, BudgetRefusal> {
    let mut out = BTreeMap::new();
    let name = workload_name(wref);
    for key in q.spec.hard.keys() {
        let Some(target) = cash_target(key) else {
            continue;
        };
        let asks = held_of(new, target);
        if asks <= 0 {
            continue; // nothing of the resource: nothing to spend
        }
        let held = q.status.reservations.get(key).and_then(|m| m.get(wref));
        let rejudged = matches!(run, RunDecl::Changed(_));
        if !rejudged && old.is_some_and(|o| held_of(o, target) >= asks) {
            if let Some(h) = held {
                out.insert(key.clone(), h.clone());
            }
            continue;
        }
        let policy = q.spec.budgets.get(key).cloned().unwrap_or_default();
        // The run counts from the workload's start: when it first reserved
        // (Kubernetes counts activeDeadlineSeconds from the Job's start), so
        // an update re-reserves what is left of it, never a new run.
        let run_ms = match run {
            RunDecl::Object(Ok(ms)) | RunDecl::Changed(Ok(ms)) => *ms,
            RunDecl::Object(Err(error)) | RunDecl::Changed(Err(error)) => {
                return Err(BudgetRefusal::RunTime {
                    quota: q.name().to_string(),
                    key: key.clone(),
                    workload: name,
                    error: error.clone(),
                })
            }
            RunDecl::AsReserved => held.map(|r| r.run_ms),
        }
        .or(match policy.without_run_time {
            WithoutRunTime::ReserveDefault { horizon_seconds } => {
                Some(horizon_seconds.saturating_mul(1000))
            }
            _ => None,
        });
        let sets = charged_sets(new);
        // Under `Changed`, whether the update asks more than the old object
        // held: a higher cost rate (at the same prices, over the same
        // window) or, below, an end later than the reservation's.
        let rate_rose = rejudged
            && old.is_none_or(|o| {
                let span = held.map_or(1, |h| {
                    h.at_ms
                        .saturating_add(h.run_ms)
                        .saturating_sub(now_ms)
                        .max(1)
                });
                let rate = |s: &[PodSet]| {
                    super::reserve::reservation_cost(s, target, now_ms, span, qos, prices)
                };
                rate(&sets) > rate(&charged_sets(o))
            });
        // The run counts from the workload's start, as Kubernetes counts
        // activeDeadlineSeconds from the Job's start, so declaring a shorter
        // run than has run leaves nothing of it. A run that is over (its
        // workload past its declared end, or none held) starts again now
        // when the workload asks more: a scale-up of a long-lived workload
        // is judged in full, never as the nothing left of its old run.
        let start = held
            .map(|r| r.at_ms)
            .filter(|s| {
                let live = |run: i64| s.saturating_add(run) > now_ms;
                match held {
                    Some(h) if rejudged => !rate_rose || live(h.run_ms),
                    _ => run_ms.is_some_and(live),
                }
            })
            .unwrap_or(now_ms);
        let declared_ms = run_ms.map(|run| start.saturating_add(run).saturating_sub(now_ms).max(0));
        // No reservation held (none was needed) is an unbounded end.
        let end_later = match (held, run_ms) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(h), Some(run)) => start.saturating_add(run) > h.at_ms.saturating_add(h.run_ms),
        };
        // A decrease (no higher rate, no later end) is never refused: the
        // reservation keeps or shrinks, whatever the budget has left.
        let decrease = rejudged && !rate_rose && !end_later;
        if let (true, Some(h), Some(left_ms)) = (rejudged, held, declared_ms) {
            // What the new object needs of the rest of its run, at the
            // prices in force then; no more than the reservation holds
            // back is released down to that, never refused.
            let need =
                super::reserve::reservation_cost(&sets, target, now_ms, left_ms, qos, prices);
            if need <= h.outstanding() || decrease {
                out.insert(
                    key.clone(),
                    Reservation {
                        reserved: need.min(h.outstanding()).saturating_add(h.used),
                        used: h.used,
                        at_ms: start,
                        run_ms: run_ms.unwrap_or(left_ms),
                    },
                );
                continue;
            }
        }
        if decrease && declared_ms.is_none() {
            continue; // held nothing and still runs unbounded: nothing to judge
        }
        let mut state = state_of(q, key);
        // Its own reservation, dropped when it stops declaring a run time,
        // does not count: the decision is a create's.
        let others = state
            .reservations
            .iter()
            .filter(|(w, _)| w.as_str() != wref)
            .fold(0i128, |s, (_, r)| s.saturating_add(r.outstanding()));
        if declared_ms.is_none() && policy.without_run_time == WithoutRunTime::Admit && others == 0
        {
            continue; // as before reservations: `check_fits` decides
        }
        let open = state.reservations.len();
        // The transient state names the workload as people read it, so a
        // denial does; its own earlier reservation moves with the name.
        if let Some(r) = state.reservations.remove(wref) {
            state.reservations.insert(name.clone(), r);
        }
        let ask = Ask {
            workload: &name,
            declared_ms,
            pod_sets: &sets,
            now_ms,
        };
        let reserved = match state.admit(&ask, policy.without_run_time, target, qos, prices) {
            Ok(reserved) => reserved,
            // A decrease that held nothing (it ran unbounded) reserves for
            // the run it now declares when that fits, and else holds nothing.
            Err(_) if decrease => continue,
            Err(denial) => return Err(BudgetRefusal::Denied(denial)),
        };
        if reserved.is_some() {
            if decrease && held.is_none() && open >= MAX_OPEN {
                continue;
            }
            if held.is_none() && open >= MAX_OPEN {
                return Err(BudgetRefusal::TooMany {
                    quota: q.name().to_string(),
                    key: key.clone(),
                    workload: name,
                    open,
                });
            }
            if let Some(mut r) = state.reservations.remove(&name) {
                // Kept from the start: its end is start + declared run.
                r.run_ms = r.at_ms.saturating_add(r.run_ms).saturating_sub(start);
                r.at_ms = start;
                out.insert(key.clone(), r);
            }
        }
    }
    Ok(out)
}

/// `charge`'s pod sets at their charged counts (an HPA's maxReplicas).
fn charged_sets(charge: &Charge) -> Vec<PodSet> {
    charge
        .pod_sets
        .iter()
        .map(|s| PodSet {
            count: charge.charged_count(s),
            ..s.clone()
        })
        .collect()
}

/// Writes the reservations `wref` holds (from `decide`) into `status`,
/// replacing those it held. Whether anything changed.
pub fn apply(status: &mut QuotaStatus, wref: &str, held: BTreeMap<String, Reservation>) -> bool {
    let mut before = BTreeMap::new();
    for (key, m) in status.reservations.iter_mut() {
        if let Some(r) = m.remove(wref) {
            before.insert(key.clone(), r);
        }
    }
    let changed = before != held;
    for (key, r) in held {
        status
            .reservations
            .entry(key)
            .or_default()
            .insert(wref.to_string(), r);
    }
    status.reservations.retain(|_, m| !m.is_empty());
    changed
}

/// Settles every reservation whose charge is gone (released, moved,
/// dropped by a reconcile) or whose key left hard: what it did not use is
/// released. Returns whether anything was settled.
pub fn settle_released(status: &mut QuotaStatus, spec: &QuotaSpec) -> bool {
    if status.reservations.is_empty() {
        return false;
    }
    let before: usize = status.reservations.values().map(BTreeMap::len).sum();
    let workloads = &status.workloads;
    status.reservations.retain(|key, m| {
        m.retain(|w, _| workloads.contains_key(w));
        spec.hard.contains_key(key) && !m.is_empty()
    });
    let after: usize = status.reservations.values().map(BTreeMap::len).sum();
    after != before
}

/// Settles the reservations of workloads that finished (their status says
/// so; the controller sees it): what they did not use is released, though
/// their charge stays until they are deleted. Whether anything settled.
pub fn settle_finished<'a>(
    status: &mut QuotaStatus,
    finished: impl IntoIterator<Item = &'a String>,
) -> bool {
    let mut settled = false;
    for wref in finished {
        for m in status.reservations.values_mut() {
            settled |= m.remove(wref).is_some();
        }
    }
    status.reservations.retain(|_, m| !m.is_empty());
    settled
}

/// Moves each open reservation's use along over `[from_ms, to_ms)`: what
/// its workload's charge costs in the part of the window after the
/// reservation was made (acc).
pub fn consume(
    status: &mut QuotaStatus,
    from_ms: i64,
    to_ms: i64,
    qos: &QosMultipliers,
    prices: &super::PriceList,
) {
    let workloads = &status.workloads;
    for (key, m) in status.reservations.iter_mut() {
        let Some(target) = cash_target(key) else {
            continue;
        };
        for (wref, r) in m.iter_mut() {
            let Some(c) = workloads.get(wref) else {
                continue;
            };
            let start = from_ms.max(r.at_ms);
            let cost =
                super::price_list::charge_cost_weighted(c, target, start, to_ms, qos, prices);
            r.used = r.used.saturating_add(cost);
        }
    }
}

/// Open reservations of `key` in `status`: how many, and what they still
/// hold back (acc).
pub fn open(status: &QuotaStatus, key: &str) -> (usize, i128) {
    status.reservations.get(key).map_or((0, 0), |m| {
        let held = m
            .values()
            .fold(0i128, |s, r| s.saturating_add(r.outstanding()));
        (m.len(), held)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::to_quantity;
    use crate::object::budgets::BudgetPolicy;
    use crate::object::period::Period;
    use crate::object::QuotaSpec;
    use crate::quantity::Quantity;

    const KEY: &str = "cash/requests.nvidia.com/gpu";
    const GPU: &str = "requests.nvidia.com/gpu";
    const H: i64 = 3_600_000;

    fn quota(budget: i64, policy: BudgetPolicy) -> Quota {
        Quota::new(
            "nlp",
            QuotaSpec {
                hard: [
                    (KEY.to_string(), Quantity::from_units(budget)),
                    (GPU.to_string(), Quantity::from_units(64)),
                ]
                .into(),
                budgets: [(KEY.to_string(), policy)].into(),
                ..Default::default()
            },
        )
    }

    fn charge(cards: i64) -> Charge {
        Charge {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: cards,
                per_pod: [(GPU.to_string(), Quantity::from_units(1))].into(),
                qos: None,
            }],
            hpa: None,
            since: "1970-01-01T00:00:00.000Z".into(),
            uid: "u".into(),
            admitted: None,
        }
    }

    /// Charge and reserve as the service does: decide, then write both.
    fn admit(
        q: &mut Quota,
        wref: &str,
        cards: i64,
        run: RunDecl,
        now: i64,
    ) -> Result<(), BudgetRefusal> {
        let old = q.status.workloads.get(wref).cloned();
        let new = charge(cards);
        let held = decide(
            q,
            wref,
            old.as_ref(),
            &new,
            &run,
            now,
            &QosMultipliers::default(),
            &PriceList::default(),
        )?;
        q.status.workloads.insert(wref.to_string(), new);
        apply(&mut q.status, wref, held);
        q.status.refresh(&q.spec.clone());
        Ok(())
    }

    fn hours(h: i64) -> RunDecl {
        RunDecl::Object(Ok(Some(h * H)))
    }

    #[test]
    fn the_denial_names_the_workload_and_what_is_left_and_reserved() {
        let mut q = quota(100, BudgetPolicy::default());
        admit(&mut q, "batch/Job/nlp/a", 8, hours(10), 0).unwrap();
        let e = admit(&mut q, "batch/Job/nlp/b", 8, hours(3), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bizrq nlp: cash/requests.nvidia.com/gpu needs 24 card-hours for Job nlp/b \
             (8 × nvidia.com/gpu for 3h), 20 left (100 this period, 0 spent, 80 reserved)"
        );
        assert_eq!(open(&q.status, KEY).0, 1);
        assert!(!q.status.workloads.contains_key("batch/Job/nlp/b"));
    }

    #[test]
    fn a_retry_reserves_nothing_twice_and_a_release_settles() {
        let mut q = quota(100, BudgetPolicy::default());
        admit(&mut q, "batch/Job/nlp/a", 8, hours(10), 0).unwrap();
        let once = q.status.reservations.clone();
        admit(&mut q, "batch/Job/nlp/a", 8, hours(10), 5).unwrap();
        assert_eq!(q.status.reservations, once);
        // A scale-down keeps the reservation; a release settles it.
        admit(&mut q, "batch/Job/nlp/a", 4, hours(10), 6).unwrap();
        assert_eq!(q.status.reservations, once);
        crate::admission::release(&mut q, "batch/Job/nlp/a");
        assert!(q.status.reservations.is_empty());
    }

    #[test]
    fn use_moves_from_the_reservation_to_spent() {
        let mut q = quota(100, BudgetPolicy::default());
        q.status.last_reconcile_time = Some(crate::time::format_rfc3339(0));
        admit(&mut q, "batch/Job/nlp/a", 8, hours(10), 0).unwrap();
        let spec = q.spec.clone();
        q.status
            .accrue_ledger(&spec, 3 * H, &QosMultipliers::default());
        let (n, held) = open(&q.status, KEY);
        assert_eq!((n, to_quantity(held)), (1, Quantity::from_units(56)));
        let st = state_of(&q, KEY);
        assert_eq!(to_quantity(st.spent), Quantity::from_units(24));
        assert_eq!(to_quantity(st.left()), Quantity::from_units(20));
    }

    #[test]
    fn policies_without_a_run_time_and_the_cap() {
        let refuse = BudgetPolicy {
            without_run_time: WithoutRunTime::Refuse,
            ..Default::default()
        };
        let mut q = quota(100, refuse);
        let e = admit(&mut q, "batch/Job/nlp/a", 1, RunDecl::Object(Ok(None)), 0).unwrap_err();
        assert!(e.to_string().contains("activeDeadlineSeconds"), "{e}");
        let horizon = BudgetPolicy {
            without_run_time: WithoutRunTime::ReserveDefault {
                horizon_seconds: 7200,
            },
            reservation_cap: Some(Quantity::from_units(3)),
            ..Default::default()
        };
        let mut q = quota(100, horizon);
        admit(&mut q, "batch/Job/nlp/a", 1, RunDecl::Object(Ok(None)), 0).unwrap();
        assert_eq!(to_quantity(open(&q.status, KEY).1), Quantity::from_units(2));
        let e = admit(&mut q, "batch/Job/nlp/b", 1, RunDecl::Object(Ok(None)), 0).unwrap_err();
        assert!(e.to_string().contains("already hold 2 of the 3"), "{e}");
        // Admit without a run time: refused only when nothing is left
        // after the open reservations.
        let mut q = quota(10, BudgetPolicy::default());
        admit(&mut q, "batch/Job/nlp/r", 1, hours(10), 0).unwrap();
        let e = admit(
            &mut q,
            "apps/Deployment/nlp/d",
            1,
            RunDecl::Object(Ok(None)),
            0,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("has nothing left for Deployment nlp/d"),
            "{e}"
        );
    }

    #[test]
    fn a_wrong_declaration_is_refused_only_where_a_budget_reserves() {
        let bad = RunDecl::Object(Err(RunTimeError::BadDuration {
            value: "1.5h".into(),
            why: "fractions",
        }));
        let mut q = quota(100, BudgetPolicy::default());
        let e = admit(&mut q, "batch/Job/nlp/a", 1, bad.clone(), 0).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "bizrq nlp: cash/requests.nvidia.com/gpu cannot reserve for Job nlp/a: annotation"
            ),
            "{e}"
        );
        // No card asked of the budget's resource: no budget, no error.
        admit(&mut q, "batch/Job/nlp/a", 0, bad, 0).unwrap();
    }

    #[test]
    fn an_update_keeps_the_run_counted_from_the_start() {
        let mut q = quota(100, BudgetPolicy::default());
        admit(&mut q, "apps/Deployment/nlp/a", 1, hours(10), 0).unwrap();
        admit(
            &mut q,
            "apps/Deployment/nlp/a",
            2,
            RunDecl::AsReserved,
            4 * H,
        )
        .unwrap();
        let r = &q.status.reservations[KEY]["apps/Deployment/nlp/a"];
        assert_eq!((r.at_ms, r.run_ms), (0, 10 * H));
        assert_eq!(to_quantity(r.outstanding()), Quantity::from_units(12));
        // An update declaring 12 h counts them from the start: 8 h left.
        admit(&mut q, "apps/Deployment/nlp/a", 3, hours(12), 4 * H).unwrap();
        let r = &q.status.reservations[KEY]["apps/Deployment/nlp/a"];
        assert_eq!((r.at_ms, r.run_ms), (0, 12 * H));
        assert_eq!(to_quantity(r.outstanding()), Quantity::from_units(24));
        // Past its declared end, a scale-up's run starts again now.
        admit(&mut q, "apps/Deployment/nlp/a", 4, hours(1), 13 * H).unwrap();
        let r = &q.status.reservations[KEY]["apps/Deployment/nlp/a"];
        assert_eq!((r.at_ms, r.run_ms), (13 * H, H));
    }

    #[test]
    fn an_update_that_changes_its_run_counts_it_from_the_start() {
        let mut q = quota(100, BudgetPolicy::default());
        let a = "batch/Job/nlp/a";
        admit(&mut q, a, 4, hours(1), 0).unwrap();
        // Half an hour on it declares 3 h: 2.5 h of 4 cards are what the
        // rest of its run needs, more than the 4 it holds, so reserved.
        let three = RunDecl::Changed(Ok(Some(3 * H)));
        admit(&mut q, a, 4, three, H / 2).unwrap();
        let r = &q.status.reservations[KEY][a];
        assert_eq!((r.at_ms, r.run_ms), (0, 3 * H));
        assert_eq!(to_quantity(r.outstanding()), Quantity::from_units(10));
        // At 4 h it declares 2 h: its run is over, it needs nothing more,
        // and its end does not move past what it declared.
        admit(&mut q, a, 4, RunDecl::Changed(Ok(Some(2 * H))), 4 * H).unwrap();
        let r = &q.status.reservations[KEY][a];
        assert_eq!((r.at_ms, r.run_ms, r.outstanding()), (0, 2 * H, 0));
        // The same count without `Changed` (a retry, a scale) keeps it.
        let kept = r.clone();
        admit(&mut q, a, 4, hours(9), 5 * H).unwrap();
        assert_eq!(q.status.reservations[KEY][a], kept);
    }

    #[test]
    fn a_finished_workload_settles_and_keeps_its_charge() {
        let mut q = quota(100, BudgetPolicy::default());
        admit(&mut q, "batch/Job/nlp/a", 8, hours(10), 0).unwrap();
        admit(&mut q, "batch/Job/nlp/b", 1, hours(10), 0).unwrap();
        let done = ["batch/Job/nlp/a".to_string()];
        assert!(settle_finished(&mut q.status, &done));
        assert!(!settle_finished(&mut q.status, &done));
        assert_eq!(open(&q.status, KEY).0, 1);
        assert!(q.status.workloads.contains_key("batch/Job/nlp/a"));
    }

    #[test]
    fn past_the_most_open_reservations_a_new_one_is_refused() {
        let mut q = quota(1_000_000, BudgetPolicy::default());
        let r = Reservation {
            reserved: 1,
            used: 0,
            at_ms: 0,
            run_ms: H,
        };
        let full: BTreeMap<String, Reservation> = (0..MAX_OPEN)
            .map(|i| (format!("batch/Job/nlp/w{i}"), r.clone()))
            .collect();
        for w in full.keys() {
            q.status.workloads.insert(w.clone(), charge(0));
        }
        q.status.reservations.insert(KEY.into(), full);
        let started = std::time::Instant::now();
        let e = admit(&mut q, "batch/Job/nlp/new", 1, hours(1), 0).unwrap_err();
        let took = started.elapsed();
        assert_eq!(
            e.to_string(),
            "bizrq nlp: cash/requests.nvidia.com/gpu already holds 10000 open reservations, \
             the most one budget keeps; Job nlp/new can be admitted once some of them settle"
        );
        // One already holding a reservation may still renew it.
        admit(&mut q, "batch/Job/nlp/w7", 1, hours(1), 0).unwrap();
        eprintln!("a decision among {MAX_OPEN} open reservations took {took:?}");
    }

    #[test]
    fn the_budget_of_a_parent_is_what_its_children_leave() {
        let mut q = quota(100, BudgetPolicy::default());
        q.status.children.insert(
            "kid".into(),
            crate::object::Carve {
                hard: [(KEY.to_string(), Quantity::from_units(90))].into(),
                since: String::new(),
                uid: String::new(),
            },
        );
        let e = admit(&mut q, "batch/Job/nlp/a", 1, hours(11), 0).unwrap_err();
        assert!(e.to_string().contains("10 left (10 this period"), "{e}");
        let p = Period::None;
        assert_eq!(state_of(&q, KEY).window, p.at(0));
    }
}
