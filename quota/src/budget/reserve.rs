//! Safe admission (docs/budgets.md §2; SLURM's
//! `AccountingStorageEnforce=safe` with `GrpTRESRunMins`): a workload that
//! declares its maximum run time reserves cards × run time × price when
//! it is admitted, and is admitted only if what is left of the budget
//! after spending and every open reservation covers it. While it runs its
//! accrual moves from its reservation to spent; when it ends the
//! reservation is settled against what it really used and the rest is
//! released.
//!
//! Invariant: as long as reserved workloads accrue no more than they
//! reserved (their deadline stops them), `spent + outstanding ≤ available`
//! once it holds — every admission checks it, accrual moves amounts from
//! outstanding to spent, settling only lowers outstanding.

use super::period::{close, Closing};
use super::price_list::{model_of, request_price, split_model, PriceList};
use super::to_quantity;
use crate::cash::QosMultipliers;
use crate::object::budgets::{Entry, Reason};
use crate::object::budgets::{Reservation, WithoutRunTime};
use crate::object::period::{Carry, Overspend, Period, PeriodRecord, Window};
use crate::quantity::serde_acc;
use crate::quantity::Quantity;
use crate::readable;
use crate::resources;
use crate::workload::PodSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

impl Reservation {
    /// What the reservation still holds back: reserved − used, never < 0.
    pub fn outstanding(&self) -> i128 {
        self.reserved.saturating_sub(self.used).max(0)
    }
}

/// A reservation closed against real use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settlement {
    #[serde(with = "serde_acc")]
    pub reserved: i128,
    #[serde(with = "serde_acc")]
    pub used: i128,
    /// Reserved and not used: back to the budget.
    #[serde(with = "serde_acc")]
    pub released: i128,
    /// Used beyond the reservation (a price rise, a run past its declared
    /// time); already in spent.
    #[serde(with = "serde_acc")]
    pub overrun: i128,
}

/// One cash key's budget in its current period, with its reservations:
/// the head of the key's ledger, what the server keeps per quota and key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetState {
    pub quota: String,
    pub key: String,
    /// The current period.
    pub window: Window,
    /// The period's own budget: the cash key's hard, in acc (the caller
    /// keeps it equal to the spec; zero counts outside a term).
    #[serde(with = "serde_acc")]
    pub budget: i128,
    /// Carried in from the period before (negative: a debt).
    #[serde(with = "serde_acc")]
    pub carry_in: i128,
    /// Added during this period.
    #[serde(with = "serde_acc")]
    pub top_ups: i128,
    /// Accrual − refunds this period (acc).
    #[serde(with = "serde_acc")]
    pub spent: i128,
    /// Open reservations by workload reference.
    #[serde(default)]
    pub reservations: BTreeMap<String, Reservation>,
    /// At most this much (acc) held by all open reservations at once.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_acc")]
    pub cap: Option<i128>,
}

impl Default for BudgetState {
    fn default() -> Self {
        BudgetState {
            quota: String::new(),
            key: String::new(),
            window: Period::None.at(0),
            budget: 0,
            carry_in: 0,
            top_ups: 0,
            spent: 0,
            reservations: BTreeMap::new(),
            cap: None,
        }
    }
}

mod opt_acc {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<i128>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| s.trim().parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The numbers behind a budget denial, in the key's resource-hours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Numbers {
    pub quota: String,
    pub key: String,
    pub workload: String,
    /// What the reservation is for: `8 × nvidia.com/gpu for 4h`.
    pub basis: String,
    pub needs: Quantity,
    /// available − spent − reserved by others (may be negative).
    pub left: Quantity,
    pub available: Quantity,
    pub spent: Quantity,
    /// Held by the other open reservations.
    pub reserved: Quantity,
    /// The reservation cap, for `Cap`.
    pub cap: Quantity,
}

/// Why a budget refuses a workload.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetDenial {
    #[error("bizrq {}: {} needs {} for {} ({}), {} left ({} this period, {} spent, {} reserved)",
        .0.quota, .0.key, readable::cash(&.0.key, .0.needs), .0.workload, .0.basis,
        readable::decimal(.0.left.max(Quantity::ZERO)), readable::decimal(.0.available),
        readable::decimal(.0.spent), readable::decimal(.0.reserved))]
    Short(Box<Numbers>),
    #[error("bizrq {}: {} needs {} for {}, but open reservations already hold {} of the {} they may hold at once",
        .0.quota, .0.key, readable::cash(&.0.key, .0.needs), .0.workload,
        readable::decimal(.0.reserved), readable::decimal(.0.cap))]
    Cap(Box<Numbers>),
    #[error("bizrq {}: {} has nothing left for {} ({} this period, {} spent, {} reserved)",
        .0.quota, .0.key, .0.workload, readable::decimal(.0.available),
        readable::decimal(.0.spent), readable::decimal(.0.reserved))]
    Spent(Box<Numbers>),
    #[error("bizrq {quota}: {key} admits only workloads that declare a maximum run time: set spec.activeDeadlineSeconds (Job), spec.runPolicy.activeDeadlineSeconds (Kubeflow) or the annotation {} (e.g. \"4h\") on {workload}", crate::workload::runtime::MAX_RUNTIME_ANNOTATION)]
    NoRunTime {
        quota: String,
        key: String,
        workload: String,
    },
}

/// What a workload asks of a budget at admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask<'a> {
    pub workload: &'a str,
    /// The run time it declares (`runtime::max_runtime`), if any.
    pub declared_ms: Option<i64>,
    pub pod_sets: &'a [PodSet],
    pub now_ms: i64,
}

impl BudgetState {
    /// Σ outstanding of the open reservations.
    pub fn outstanding(&self) -> i128 {
        self.outstanding_except(None)
    }

    fn outstanding_except(&self, workload: Option<&str>) -> i128 {
        self.reservations
            .iter()
            .filter(|(w, _)| Some(w.as_str()) != workload)
            .fold(0i128, |s, (_, r)| s.saturating_add(r.outstanding()))
    }

    /// What this period has: its budget (if funded) + carry-in + top-ups.
    pub fn available(&self) -> i128 {
        let budget = if self.window.funded { self.budget } else { 0 };
        budget
            .saturating_add(self.carry_in)
            .saturating_add(self.top_ups)
    }

    /// available − spent (may be negative): what exhaustion looks at.
    pub fn unspent(&self) -> i128 {
        self.available().saturating_sub(self.spent)
    }

    /// available − spent − outstanding (may be negative).
    pub fn left(&self) -> i128 {
        self.available()
            .saturating_sub(self.spent)
            .saturating_sub(self.outstanding())
    }

    /// Whether reserving `need` for `workload` fits: the budget (its own
    /// earlier reservation, being replaced, not counted) and the cap.
    pub fn check(&self, workload: &str, need: i128, basis: &str) -> Result<(), BudgetDenial> {
        let others = self.outstanding_except(Some(workload));
        let left = self
            .available()
            .saturating_sub(self.spent)
            .saturating_sub(others);
        let numbers = || Numbers {
            quota: self.quota.clone(),
            key: self.key.clone(),
            workload: workload.to_string(),
            basis: basis.to_string(),
            needs: to_quantity(need),
            left: to_quantity(left),
            available: to_quantity(self.available()),
            spent: to_quantity(self.spent),
            reserved: to_quantity(others),
            cap: self.cap.map_or(Quantity::ZERO, to_quantity),
        };
        if need > left {
            return Err(BudgetDenial::Short(Box::new(numbers())));
        }
        if self
            .cap
            .is_some_and(|cap| others.saturating_add(need) > cap)
        {
            return Err(BudgetDenial::Cap(Box::new(numbers())));
        }
        Ok(())
    }

    /// Reserves (or re-reserves, on an update) `need` for `workload` if it
    /// fits; on a denial nothing changes. Accrual already made under an
    /// earlier reservation counts against the new one.
    pub fn reserve(
        &mut self,
        workload: &str,
        need: i128,
        at_ms: i64,
        run_ms: i64,
        basis: &str,
    ) -> Result<(), BudgetDenial> {
        let used = self.reservations.get(workload).map_or(0, |r| r.used);
        let reserved = need.max(0).saturating_add(used);
        self.check(workload, need.max(0), basis)?;
        self.reservations.insert(
            workload.to_string(),
            Reservation {
                reserved,
                used,
                at_ms,
                run_ms,
            },
        );
        Ok(())
    }

    /// Use by `workload` (its accrual, acc): spent, and its reservation's
    /// used. A refund is a negative amount.
    pub fn accrue(&mut self, workload: &str, amount: i128) {
        self.spent = self.spent.saturating_add(amount);
        if let Some(r) = self.reservations.get_mut(workload) {
            r.used = r.used.saturating_add(amount);
        }
    }

    /// The workload finished or was deleted: its reservation is closed
    /// against what it used (its accrual, already in spent), and what it
    /// did not use is released. None if it held no reservation.
    pub fn settle(&mut self, workload: &str) -> Option<Settlement> {
        let r = self.reservations.remove(workload)?;
        Some(Settlement {
            reserved: r.reserved,
            used: r.used,
            released: r.outstanding(),
            overrun: r.used.saturating_sub(r.reserved).max(0),
        })
    }

    /// Drops a reservation whose admission did not happen after all (the
    /// request was refused by another quota, or its write failed): returns
    /// what it held.
    pub fn release(&mut self, workload: &str) -> i128 {
        self.reservations
            .remove(workload)
            .map_or(0, |r| r.outstanding())
    }

    /// Closes every period that ends at or before `ms`: each becomes a
    /// record, and the next starts with its carry, no top-ups, nothing
    /// spent, and each open reservation holding only what it still held
    /// back. The budget stays (the caller sets it from the spec).
    pub fn advance_to(
        &mut self,
        ms: i64,
        period: &Period,
        carry: &Carry,
        overspend: Overspend,
    ) -> Vec<PeriodRecord> {
        let mut records = Vec::new();
        while self.window.end_ms <= ms && self.window.end_ms < i64::MAX {
            let record = close(
                Closing {
                    window: self.window,
                    budget: self.budget,
                    carry_in: self.carry_in,
                    top_ups: self.top_ups,
                    spent: self.spent,
                },
                carry,
                overspend,
            );
            let next = period.at(self.window.end_ms);
            if next.start_ms != self.window.end_ms {
                break; // the period changed under us; the caller restarts it
            }
            self.window = next;
            self.carry_in = record.carried;
            self.top_ups = 0;
            self.spent = 0;
            for r in self.reservations.values_mut() {
                r.reserved = r.outstanding();
                r.used = 0;
            }
            records.push(record);
        }
        records
    }

    /// Applies ledger entries of this quota and key, in time order,
    /// closing periods as their boundaries pass (`advance_to`): accrual and
    /// refunds to spent (and to the workload's reservation), top-ups to
    /// this period's budget; carry entries are the records' own and change
    /// nothing. An entry from before the current period counts in it (a
    /// closed period is not reopened). Returns the periods closed.
    pub fn apply(
        &mut self,
        entries: &[Entry],
        period: &Period,
        carry: &Carry,
        overspend: Overspend,
    ) -> Vec<PeriodRecord> {
        let mut ordered: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.quota == self.quota && e.key == self.key)
            .collect();
        ordered.sort_by_key(|e| e.start_ms);
        let mut records = Vec::new();
        for e in ordered {
            records.extend(self.advance_to(e.start_ms, period, carry, overspend));
            match e.reason {
                Reason::Accrual | Reason::Refund | Reason::Use => {
                    self.accrue(&e.workload, e.amount)
                }
                Reason::TopUp => self.top_ups = self.top_ups.saturating_add(e.amount),
                Reason::Carry => {}
            }
        }
        records
    }

    /// Admission of `ask` under `policy`: reserves what it needs, admits
    /// without a reservation (policy `Admit`, when anything is left), or
    /// refuses with the numbers. `target` is the cash key's usage key;
    /// prices as for accrual. Returns the amount reserved.
    pub fn admit(
        &mut self,
        ask: &Ask<'_>,
        policy: WithoutRunTime,
        target: &str,
        qos: &QosMultipliers,
        prices: &PriceList,
    ) -> Result<Option<i128>, BudgetDenial> {
        let run_ms = match (ask.declared_ms, policy) {
            (Some(ms), _) => ms,
            (None, WithoutRunTime::ReserveDefault { horizon_seconds }) => {
                horizon_seconds.saturating_mul(1000)
            }
            (None, WithoutRunTime::Refuse) => {
                return Err(BudgetDenial::NoRunTime {
                    quota: self.quota.clone(),
                    key: self.key.clone(),
                    workload: ask.workload.to_string(),
                })
            }
            (None, WithoutRunTime::Admit) => {
                // As before reservations: refused only once nothing is left.
                // A reservation of its own (an update that stops declaring
                // a run time) is dropped, so it does not count.
                let others = self.outstanding_except(Some(ask.workload));
                let left = self.unspent().saturating_sub(others);
                if left > 0 {
                    return Ok(None);
                }
                return Err(BudgetDenial::Spent(Box::new(Numbers {
                    quota: self.quota.clone(),
                    key: self.key.clone(),
                    workload: ask.workload.to_string(),
                    basis: "no declared run time".into(),
                    left: to_quantity(left),
                    available: to_quantity(self.available()),
                    spent: to_quantity(self.spent),
                    reserved: to_quantity(others),
                    ..Default::default()
                })));
            }
        };
        let need = reservation_cost(ask.pod_sets, target, ask.now_ms, run_ms, qos, prices);
        let basis = basis(ask.pod_sets, target, run_ms);
        self.reserve(ask.workload, need, ask.now_ms, run_ms, &basis)?;
        Ok(Some(need))
    }
}

/// What `pod_sets` cost on `target` over `run_ms` from `now_ms`, each set
/// at the highest weight of its model in force during the run and the
/// highest price of its class then (its QoS multiplier, or a `ByQuality`
/// version's request weight) (acc). Use above requests, billed by quality
/// from real usage, is not reserved: it is not known in advance.
pub fn reservation_cost(
    pod_sets: &[PodSet],
    target: &str,
    now_ms: i64,
    run_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
) -> i128 {
    let end = now_ms.saturating_add(run_ms.max(0));
    let resource = split_model(
        target
            .strip_prefix("requests.")
            .or_else(|| target.strip_prefix("limits."))
            .unwrap_or(target),
    )
    .0;
    pod_sets.iter().fold(0i128, |sum, s| {
        let q = resources::get(&s.per_pod, target).saturating_mul(s.count.max(0) as i128);
        let w = prices.max_weight_within(
            now_ms,
            end.max(now_ms + 1),
            resource,
            model_of(&s.per_pod, target),
        );
        let end = end.max(now_ms + 1);
        let p = prices
            .changes_within(now_ms, end)
            .chain([now_ms])
            .map(|t| request_price(prices, t, w, target, qos, s.qos))
            .max()
            .unwrap_or_default();
        sum.saturating_add(crate::cash::cost(q, run_ms, p))
    })
}

/// `8 × nvidia.com/gpu for 4h` — what the reservation is for, in words.
fn basis(pod_sets: &[PodSet], target: &str, run_ms: i64) -> String {
    let total = pod_sets.iter().fold(Quantity::ZERO, |s, p| {
        s.saturating_add(resources::get(&p.per_pod, target).saturating_mul(p.count.max(0) as i128))
    });
    format!(
        "{} × {} for {}",
        readable::decimal(total),
        target.strip_prefix("requests.").unwrap_or(target),
        crate::workload::runtime::format_duration(run_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::from_quantity;

    const GPU: &str = "requests.nvidia.com/gpu";

    fn state(budget: i64) -> BudgetState {
        BudgetState {
            quota: "nlp".into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            budget: from_quantity(Quantity::from_units(budget)),
            ..Default::default()
        }
    }

    fn cards(n: i64) -> Vec<PodSet> {
        vec![PodSet {
            name: "worker".into(),
            count: n,
            per_pod: [(GPU.to_string(), Quantity::from_units(1))].into(),
            qos: None,
        }]
    }

    fn ask<'a>(w: &'a str, sets: &'a [PodSet], hours: Option<i64>) -> Ask<'a> {
        Ask {
            workload: w,
            declared_ms: hours.map(|h| h * 3_600_000),
            pod_sets: sets,
            now_ms: 0,
        }
    }

    fn admit(
        s: &mut BudgetState,
        a: &Ask<'_>,
        p: WithoutRunTime,
    ) -> Result<Option<i128>, BudgetDenial> {
        s.admit(a, p, GPU, &QosMultipliers::default(), &PriceList::default())
    }

    #[test]
    fn a_reservation_holds_cards_times_hours() {
        let mut s = state(100);
        let sets = cards(8);
        let got = admit(&mut s, &ask("a", &sets, Some(10)), WithoutRunTime::Admit).unwrap();
        assert_eq!(got.map(to_quantity), Some(Quantity::from_units(80)));
        // 20 left: a second 8-card job for 3 h (24) does not fit.
        let err = admit(&mut s, &ask("b", &sets, Some(3)), WithoutRunTime::Admit).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq nlp: cash/requests.nvidia.com/gpu needs 24 card-hours for b \
             (8 × nvidia.com/gpu for 3h), 20 left (100 this period, 0 spent, 80 reserved)"
        );
        assert!(admit(&mut s, &ask("b", &sets, Some(2)), WithoutRunTime::Admit).is_ok());
    }

    #[test]
    fn accrual_moves_from_reserved_to_spent_and_settling_releases_the_rest() {
        let mut s = state(100);
        let sets = cards(8);
        admit(&mut s, &ask("a", &sets, Some(10)), WithoutRunTime::Admit).unwrap();
        let hour8 = from_quantity(Quantity::from_units(8));
        s.accrue("a", 3 * hour8);
        assert_eq!(to_quantity(s.left()), Quantity::from_units(20));
        let st = s.settle("a").unwrap();
        assert_eq!(
            (st.used, st.released, st.overrun),
            (3 * hour8, 7 * hour8, 0)
        );
        assert_eq!(to_quantity(s.left()), Quantity::from_units(76));
        assert_eq!(s.settle("a"), None);
    }

    #[test]
    fn policies_without_a_run_time() {
        let sets = cards(1);
        let mut s = state(10);
        assert_eq!(
            admit(&mut s, &ask("a", &sets, None), WithoutRunTime::Admit),
            Ok(None)
        );
        let e = admit(&mut s, &ask("a", &sets, None), WithoutRunTime::Refuse).unwrap_err();
        assert!(e.to_string().contains("activeDeadlineSeconds"), "{e}");
        let r = admit(
            &mut s,
            &ask("a", &sets, None),
            WithoutRunTime::ReserveDefault {
                horizon_seconds: 7200,
            },
        )
        .unwrap();
        assert_eq!(r.map(to_quantity), Some(Quantity::from_units(2)));
        s.spent = s.available();
        s.release("a");
        assert!(admit(&mut s, &ask("b", &sets, None), WithoutRunTime::Admit).is_err());
    }

    #[test]
    fn the_cap_limits_all_open_reservations() {
        let mut s = state(1000);
        s.cap = Some(from_quantity(Quantity::from_units(50)));
        let sets = cards(4);
        admit(&mut s, &ask("a", &sets, Some(10)), WithoutRunTime::Admit).unwrap();
        let e = admit(&mut s, &ask("b", &sets, Some(3)), WithoutRunTime::Admit).unwrap_err();
        assert!(e.to_string().contains("already hold 40 of the 50"), "{e}");
        // Re-reserving the same workload replaces its reservation.
        admit(&mut s, &ask("a", &sets, Some(12)), WithoutRunTime::Admit).unwrap();
        assert_eq!(to_quantity(s.outstanding()), Quantity::from_units(48));
    }

    #[test]
    fn a_known_price_rise_during_the_run_is_reserved() {
        let prices: PriceList = serde_json::from_str(
            r#"{"versions":[
              {"effective":"1970-01-01T00:00:00Z"},
              {"effective":"1970-01-01T05:00:00Z","weights":{"nvidia.com/gpu":"2"}}]}"#,
        )
        .unwrap();
        let sets = cards(1);
        let short = reservation_cost(
            &sets,
            GPU,
            0,
            3_600_000,
            &QosMultipliers::default(),
            &prices,
        );
        let long = reservation_cost(
            &sets,
            GPU,
            0,
            6 * 3_600_000,
            &QosMultipliers::default(),
            &prices,
        );
        assert_eq!(to_quantity(short), Quantity::from_units(1));
        assert_eq!(to_quantity(long), Quantity::from_units(12));
    }

    #[test]
    fn a_new_period_keeps_what_reservations_still_hold() {
        let period = Period::Monthly {
            anchor_day: 1,
            utc_offset_minutes: 0,
        };
        let mut s = state(100);
        s.window = period.at(0);
        let sets = cards(1);
        admit(&mut s, &ask("a", &sets, Some(10)), WithoutRunTime::Admit).unwrap();
        let end = s.window.end_ms;
        let four = from_quantity(Quantity::from_units(4));
        let accrual = |at: i64, amount: i128, reason: Reason| Entry {
            quota: "nlp".into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            workload: "a".into(),
            namespace: "ns".into(),
            model: None,
            qos: None,
            user: None,
            start_ms: at,
            end_ms: at + 1,
            amount,
            reason,
            note: String::new(),
        };
        let entries = [
            accrual(end, four, Reason::Accrual),
            accrual(0, four, Reason::Accrual),
            accrual(5, four, Reason::TopUp),
        ];
        let records = s.apply(&entries, &period, &Carry::All, Overspend::Carry);
        assert_eq!(records.len(), 1);
        let r = &records[0];
        assert_eq!((r.spent, r.top_ups, r.carried), (four, four, 25 * four));
        // The new period: 100 + 100 carried, 4 spent, 2 still reserved.
        assert_eq!(s.window.start_ms, end);
        assert_eq!(to_quantity(s.available()), Quantity::from_units(200));
        assert_eq!(to_quantity(s.outstanding()), Quantity::from_units(2));
        assert_eq!(to_quantity(s.left()), Quantity::from_units(194));
    }
}
