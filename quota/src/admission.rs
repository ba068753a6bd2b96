//! Admission decisions: does a change of usage fit a quota, and what a
//! workload review asks of which quotas. Pure: quotas in, decisions out.

use crate::keys::cash_target;
use crate::object::{Charge, Quota};
use crate::quantity::Quantity;
use crate::quantity::MAX_NANOS;
use crate::resources::{self, ResourceList};
use crate::workload::{ChargeMode, Workload, MAX_REPLICAS};
use std::fmt;

/// One key that does not fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub quota: String,
    pub key: String,
    pub asked: Quantity,
    /// hard − used (shown as 0 when negative).
    pub left: Quantity,
    pub hard: Quantity,
    /// Set when the key can be borrowed (it has a `max`): how far.
    pub borrowing: Option<Borrowing>,
}

/// The borrowing side of a shortfall (§5): the ceiling, and how much more
/// than `left` could still be had on loan — under `max` and, when a parent
/// was asked, out of what it can lend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Borrowing {
    pub max: Quantity,
    pub to_borrow: Quantity,
}

impl Shortfall {
    /// `k asks 8, 6 left of 16`, and when borrowing ` (max 24, 2 to borrow)`.
    fn write_key(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let left = self.left.max(Quantity::ZERO);
        write!(
            out,
            "{} asks {}, {left} left of {}",
            self.key, self.asked, self.hard
        )?;
        if let Some(b) = &self.borrowing {
            let to_borrow = b.to_borrow.max(Quantity::ZERO);
            write!(out, " (max {}, {to_borrow} to borrow)", b.max)?;
        }
        Ok(())
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bizrq {}: ", self.quota)?;
        self.write_key(f)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    #[error("{}", join(.0))]
    Short(Vec<Shortfall>),
    #[error("{0}")]
    CashExhausted(Box<CashShortfall>),
    /// A charge no workload could hold (see `check_charge`).
    #[error("{0}")]
    Invalid(String),
    /// A budget's reservation rules refuse it (docs/budgets.md §2).
    #[error("{0}")]
    Budget(Box<crate::budget::reservations::BudgetRefusal>),
}

/// A cash budget that is spent while the request asks for its resource.
/// The amounts read in the key's unit, rounded (`4.06 card-hours used of
/// 3`); the exact ones are in the quota's status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bizrq {quota}: {key} is exhausted, {} used of {}; {asked_key} asks {asked}",
    crate::readable::cash(key, *used), crate::readable::decimal(*hard))]
pub struct CashShortfall {
    pub quota: String,
    pub key: String,
    pub used: Quantity,
    pub hard: Quantity,
    pub asked_key: String,
    pub asked: Quantity,
}

/// `bizrq q: k1 asks 8, 6 left of 16; k2 asks …` — one quota named once.
pub fn join(s: &[Shortfall]) -> String {
    let mut out = String::new();
    for (i, x) in s.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        if i == 0 || s[i - 1].quota != x.quota {
            out.push_str("bizrq ");
            out.push_str(&x.quota);
            out.push_str(": ");
        }
        let _ = x.write_key(&mut out);
    }
    out
}

/// The keys of `quota`'s hard that an increase of `delta` would push past
/// hard. Decreases never fall short. The one home of "does it fit", for
/// workload charges and for children's carve-outs alike.
pub fn shortfalls(quota: &Quota, delta: &ResourceList) -> Vec<Shortfall> {
    shortfalls_within(quota, delta, &ResourceList::new())
}

/// The ceiling admission holds a key of `quota` to (None: not limited): its
/// hard, or — for a key that has a `max` and that `limits` names — the
/// limit, capped by max and never below hard, since admission within hard
/// is always honoured (§5). A borrower's limits are `borrow::limits`
/// (hard + loan); passing `spec.max` itself asks "would it fit if
/// everything up to max were lent".
pub fn ceiling(quota: &Quota, key: &str, limits: &ResourceList) -> Option<Quantity> {
    let hard = *quota.spec.hard.get(key)?;
    if limits.is_empty() {
        return Some(hard);
    }
    Some(match (limits.get(key), quota.spec.max.get(key)) {
        (Some(l), Some(m)) => hard.max((*l).min(*m)),
        _ => hard,
    })
}

/// `shortfalls` against `ceiling(quota, key, limits)` instead of hard. A key
/// held to a borrowing limit says how much more could be borrowed.
pub fn shortfalls_within(
    quota: &Quota,
    delta: &ResourceList,
    limits: &ResourceList,
) -> Vec<Shortfall> {
    let mut short = Vec::new();
    for (key, d) in delta {
        if d.nanos() <= 0 {
            continue;
        }
        let Some(ceiling) = ceiling(quota, key, limits) else {
            continue;
        };
        let u = resources::get(&quota.status.used, key);
        if u.saturating_add(*d) > ceiling {
            let h = resources::get(&quota.spec.hard, key);
            let borrowing = match (limits.contains_key(key), quota.spec.max.get(key)) {
                (true, Some(m)) => Some(Borrowing {
                    max: *m,
                    to_borrow: ceiling.saturating_sub(u.max(h)),
                }),
                _ => None,
            };
            short.push(Shortfall {
                quota: quota.name().to_string(),
                key: key.clone(),
                asked: *d,
                left: left(quota, key).unwrap_or_default(),
                hard: h,
                borrowing,
            });
        }
    }
    short
}

/// What is left of `key` in `quota`: hard − used, never negative; None
/// when its hard does not name the key.
pub fn left(quota: &Quota, key: &str) -> Option<Quantity> {
    let hard = quota.spec.hard.get(key)?;
    Some(hard.saturating_sub(resources::get(&quota.status.used, key)))
}

/// Whether adding `delta` to `quota` keeps every key of its hard within
/// bounds. Only increases are checked: a decrease always passes, even when
/// the quota is already over. Cash keys deny when spent, for any increase
/// of the resource they budget.
pub fn check_fits(quota: &Quota, delta: &ResourceList) -> Result<(), Denial> {
    check_fits_within(quota, delta, &ResourceList::new())
}

/// `check_fits` with keys held to `ceiling(quota, key, limits)`. Cash is
/// never borrowed: a spent budget denies whatever the limits.
pub fn check_fits_within(
    quota: &Quota,
    delta: &ResourceList,
    limits: &ResourceList,
) -> Result<(), Denial> {
    let short = shortfalls_within(quota, delta, limits);
    if !short.is_empty() {
        return Err(Denial::Short(short));
    }
    for key in quota.status.exhausted_cash_keys(&quota.spec) {
        let target = cash_target(key).expect("a cash key");
        let asked = resources::get(delta, target);
        if asked.nanos() > 0 {
            return Err(Denial::CashExhausted(Box::new(CashShortfall {
                quota: quota.name().to_string(),
                key: key.to_string(),
                used: resources::get(&quota.status.used, key),
                hard: resources::get(&quota.spec.hard, key),
                asked_key: target.to_string(),
                asked,
            })));
        }
    }
    Ok(())
}

/// Whether `usage` would fit `quota` now, without charging it (a CronJob's
/// one run, a dry check). Derives usage from the ledgers first.
pub fn check(quota: &mut Quota, usage: &ResourceList) -> Result<(), Denial> {
    check_within(quota, usage, &ResourceList::new())
}

/// `check` against a borrower's limits (see `ceiling`).
pub fn check_within(
    quota: &mut Quota,
    usage: &ResourceList,
    limits: &ResourceList,
) -> Result<(), Denial> {
    quota.status.refresh(&quota.spec);
    check_fits_within(quota, usage, limits)
}

/// Record `charge` for workload `wref`, charging only the difference from
/// what it already holds. Returns whether anything changed (a retried
/// request finds its charge already in place and changes nothing).
pub fn charge(quota: &mut Quota, wref: &str, charge: Charge) -> Result<bool, Denial> {
    charge_within(quota, wref, charge, &ResourceList::new())
}

/// `charge` against a borrower's limits (see `ceiling`): how a child that
/// its parent lent capacity to (`borrow::lend`) is charged beyond hard.
pub fn charge_within(
    quota: &mut Quota,
    wref: &str,
    mut charge: Charge,
    limits: &ResourceList,
) -> Result<bool, Denial> {
    check_charge(wref, &charge)?;
    quota.status.refresh(&quota.spec);
    let old = quota.status.workloads.get(wref);
    if let Some(old) = old {
        if old.same_as(&charge) {
            return Ok(false);
        }
        charge.since = old.since.clone();
    }
    let old_usage = old.map(Charge::usage).unwrap_or_default();
    let delta = resources::diff(&charge.usage(), &old_usage);
    check_fits_within(quota, &delta, limits)?;
    quota.status.workloads.insert(wref.to_string(), charge);
    quota.status.refresh(&quota.spec);
    Ok(true)
}

/// A charge is refused unless each count is within `MAX_REPLICAS`, each
/// per-pod amount is non-negative, and all it comes to is at most
/// `MAX_NANOS` a key: then releasing it gives back exactly what charging
/// it took, and sums of billions of charges stay exact in i128. The
/// adapters refuse such objects first, with the field named; this holds
/// for counts that arrive later (a scale, an HPA's maxReplicas) too.
pub fn check_charge(wref: &str, charge: &Charge) -> Result<(), Denial> {
    check_sized(wref, &charge.pod_sets, charge.hpa.as_ref(), &charge.usage())
}

/// `check_charge` of a charge's parts, its `usage` summed by the caller:
/// a queue's round checks every entry it weighs, and building a whole
/// charge for each (its pod sets copied, two times formatted) was most of
/// a round's cost over a long queue.
pub fn check_sized(
    wref: &str,
    pod_sets: &[crate::workload::PodSet],
    hpa: Option<&crate::object::HpaCharge>,
    usage: &ResourceList,
) -> Result<(), Denial> {
    let bad = |problem: String| Err(Denial::Invalid(format!("bizrq: {wref}: {problem}")));
    let counts = pod_sets.iter().map(|s| (s.name.as_str(), s.count));
    let hpa = hpa.iter().map(|h| ("maxReplicas", h.max_replicas));
    for (name, n) in counts.chain(hpa) {
        if !(0..=MAX_REPLICAS).contains(&n) {
            return bad(format!(
                "{name:?} counts {n} pods; 0 to {MAX_REPLICAS} allowed"
            ));
        }
    }
    for set in pod_sets {
        if let Some((k, v)) = set
            .per_pod
            .iter()
            .find(|(_, v)| v.is_negative() || v.nanos() > MAX_NANOS)
        {
            return bad(format!("a {:?} pod asks {v} of {k}", set.name));
        }
    }
    if let Some((k, v)) = usage.iter().find(|(_, v)| v.nanos() > MAX_NANOS) {
        return bad(format!(
            "its pods come to {v} of {k}, more than a quota accounts"
        ));
    }
    Ok(())
}

/// Drop the charge of `wref`. Always allowed.
pub fn release(quota: &mut Quota, wref: &str) -> bool {
    let changed = quota.status.workloads.remove(wref).is_some();
    if changed {
        quota.status.refresh(&quota.spec);
    }
    changed
}

/// What a workload review asks of one quota.
#[derive(Clone, Debug)]
pub enum Step<'a> {
    /// Charge the workload's pod sets (the difference from what it holds).
    Charge {
        quota: &'a str,
        workload: &'a Workload,
    },
    /// Only check that this usage would fit (CronJob).
    Check { quota: &'a str, usage: ResourceList },
    /// Give back what the workload holds.
    Release { quota: &'a str },
}

/// Steps for a CREATE (old = None), UPDATE, or DELETE (new = None): charge
/// the quota the new object is bound to, then release the one the old
/// object was bound to if it moved. Charges come first so a denied move
/// leaves the old charge in place.
pub fn plan<'a>(old: Option<&'a Workload>, new: Option<&'a Workload>) -> Vec<Step<'a>> {
    let mut steps = Vec::new();
    let new_quota = new.and_then(|w| w.quota());
    if let (Some(q), Some(w)) = (new_quota, new) {
        match w.mode {
            ChargeMode::Charge => steps.push(Step::Charge {
                quota: q,
                workload: w,
            }),
            ChargeMode::CheckOnly => steps.push(Step::Check {
                quota: q,
                usage: w.usage(),
            }),
        }
    }
    if let Some(old) = old {
        if let Some(q) = old.quota() {
            if Some(q) != new_quota && old.mode == ChargeMode::Charge {
                steps.push(Step::Release { quota: q });
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::QuotaSpec;
    use crate::workload::PodSet;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }
    fn quota(name: &str, hard: &[(&str, &str)]) -> Quota {
        Quota::new(
            name,
            QuotaSpec {
                parent: String::new(),
                hard: list(hard),
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        )
    }
    fn charge_of(per_pod: &[(&str, &str)], count: i64) -> Charge {
        Charge {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count,
                per_pod: list(per_pod),
                qos: None,
            }],
            hpa: None,
            since: "2026-01-01T00:00:00.000Z".into(),
            uid: "u".into(),
            admitted: None,
        }
    }

    #[test]
    fn denial_names_quota_key_asked_and_left() {
        let mut q = quota("nlp-team", &[("requests.nvidia.com/gpu.A100", "16")]);
        charge(
            &mut q,
            "a",
            charge_of(&[("requests.nvidia.com/gpu.A100", "1")], 10),
        )
        .unwrap();
        let err = charge(
            &mut q,
            "b",
            charge_of(&[("requests.nvidia.com/gpu.A100", "1")], 8),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq nlp-team: requests.nvidia.com/gpu.A100 asks 8, 6 left of 16"
        );
    }

    #[test]
    fn model_and_generic_keys_both_bind() {
        // limits.cpu: 10 and limits.cpu.A4: 4 — after 4 cores of A4, no more
        // A4, yet 6 cores of another model fit.
        let mut q = quota("g", &[("limits.cpu", "10"), ("limits.cpu.A4", "4")]);
        let a4 = [("limits.cpu", "4"), ("limits.cpu.A4", "4")];
        charge(&mut q, "w1", charge_of(&a4, 1)).unwrap();
        assert!(charge(
            &mut q,
            "w2",
            charge_of(&[("limits.cpu", "1"), ("limits.cpu.A4", "1")], 1)
        )
        .is_err());
        charge(
            &mut q,
            "w3",
            charge_of(&[("limits.cpu", "6"), ("limits.cpu.A1", "6")], 1),
        )
        .unwrap();
        assert_eq!(q.status.used["limits.cpu"], "10".parse().unwrap());
        assert!(charge(&mut q, "w4", charge_of(&[("limits.cpu", "1")], 1)).is_err());
    }

    #[test]
    fn update_charges_difference_and_decrease_always_passes() {
        let mut q = quota("g", &[("pods", "5")]);
        charge(&mut q, "w", charge_of(&[("pods", "1")], 4)).unwrap();
        charge(&mut q, "w", charge_of(&[("pods", "1")], 5)).unwrap();
        assert!(charge(&mut q, "w", charge_of(&[("pods", "1")], 6)).is_err());
        // Lower hard below used: a decrease still passes, any increase fails.
        q.spec.hard = list(&[("pods", "2")]);
        charge(&mut q, "w", charge_of(&[("pods", "1")], 3)).unwrap();
        assert!(charge(&mut q, "x", charge_of(&[("pods", "1")], 1)).is_err());
    }

    #[test]
    fn retried_charge_changes_nothing() {
        let mut q = quota("g", &[("pods", "5")]);
        assert!(charge(&mut q, "w", charge_of(&[("pods", "1")], 5)).unwrap());
        assert!(!charge(&mut q, "w", charge_of(&[("pods", "1")], 5)).unwrap());
        assert_eq!(q.status.used["pods"], Quantity::from_units(5));
    }

    #[test]
    fn exhausted_cash_denies_new_gpu_work_only() {
        let mut q = quota(
            "g",
            &[
                ("cash/requests.nvidia.com/gpu", "100"),
                ("requests.cpu", "100"),
            ],
        );
        q.status.add_accrued(
            "cash/requests.nvidia.com/gpu",
            100 * crate::quantity::NANO * crate::cash::MS_PER_HOUR * crate::cash::PER_MILLE,
        );
        q.status.refresh(&q.spec.clone());
        let err = charge(
            &mut q,
            "w",
            charge_of(&[("requests.nvidia.com/gpu", "1")], 1),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with(
                "bizrq g: cash/requests.nvidia.com/gpu is exhausted, 100 card-hours used of 100"
            ),
            "{err}"
        );
        charge(&mut q, "cpu-only", charge_of(&[("requests.cpu", "1")], 1)).unwrap();
    }
}
