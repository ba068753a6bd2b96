//! What the controller enforces of budgets (docs/budgets.md §2, §4):
//! which workloads ran past the run time they declared, and the refund a
//! workload stopped by reclaim is due — once per reclaim mark, a stretch
//! of a run once whatever the marks, never more than the run accrued nor
//! than the period has spent.
//!
//! Pure: the workloads, their accrual entries, the quota's status and
//! "now" come in; what to stop and what to refund go out. The controller
//! writes the refund into the same compare-and-swap of the quota's status
//! that removes the reclaim mark, so two replicas never refund one mark
//! twice (`take_refund` also refuses a mark already recorded).

use super::refund::refund_after;
use crate::object::budgets::RefundPolicy;
use crate::object::budgets::{Entry, Reason};
use crate::object::refunds::Refunded;
use crate::object::QuotaStatus;
use crate::time;
use std::collections::BTreeMap;

/// At most this many refunds are kept in `status.refunds` (the newest).
pub const KEEP_REFUNDS: usize = 64;

/// One acc unit of `status.cashAccrued` (per mille): refunds are whole
/// multiples of it, rounded towards zero, so the status and the entries
/// agree exactly.
const PER_MILLE_ACC: i128 = super::PRICE_ONE / crate::cash::PER_MILLE;

/// A workload with a declared run time, as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running<'a> {
    pub workload: &'a str,
    /// When its run started (its reservation's `atMs`, else when it was
    /// charged).
    pub start_ms: i64,
    /// The run time it declared.
    pub run_ms: i64,
}

impl<'a> Running<'a> {
    /// `workload`, charged since `charged_ms` (None: not known), declaring `declared_ms` by
    /// its annotation (as the controller's watch shows it), holding
    /// `reserved` (the earliest of its reservations, if any). Its run
    /// starts at the reservation's `atMs`, else when it was charged, and
    /// lasts the declared run time or the reservation's `runMs`, whichever
    /// is longer: the reservation is what admission judged, written before
    /// the object it judged is stored, so a watch lagging a `kubectl
    /// annotate` that lengthened the run never has it stopped at the end
    /// it no longer declares; a reservation bounded by
    /// `activeDeadlineSeconds` (which the API server enforces itself) never
    /// brings the stop ahead of the annotation's end.
    pub fn declared(
        workload: &'a str,
        declared_ms: i64,
        reserved: Option<&crate::object::budgets::Reservation>,
        charged_ms: Option<i64>,
    ) -> Option<Running<'a>> {
        let (start_ms, run_ms) = match reserved {
            Some(r) => (r.at_ms, declared_ms.max(r.run_ms)),
            None => (charged_ms?, declared_ms),
        };
        Some(Running {
            workload,
            start_ms,
            run_ms,
        })
    }

    /// When its declared run time ends.
    pub fn deadline_ms(&self) -> i64 {
        self.start_ms.saturating_add(self.run_ms.max(0))
    }
}

/// The workloads whose declared run time is over at `now_ms` (the end is
/// exclusive: at `start + run` the run time is used up), in the order
/// given, and the earliest deadline still ahead (when to look again).
pub fn overdue<'a>(running: &[Running<'a>], now_ms: i64) -> (Vec<&'a str>, Option<i64>) {
    let mut over = Vec::new();
    let mut next: Option<i64> = None;
    for r in running {
        let d = r.deadline_ms();
        if d <= now_ms {
            over.push(r.workload);
        } else {
            next = Some(next.map_or(d, |n: i64| n.min(d)));
        }
    }
    (over, next)
}

/// The refund due to `workload`, stopped by reclaim at `stopped_ms` after
/// a run from `start_ms`, under `policy`: `refund`'s entries, each cut to
/// a whole per-mille unit (towards zero) and, per cash key, capped at what
/// the period has spent (`spent`, acc). Empty when nothing is due.
pub fn refund_due(
    policy: &RefundPolicy,
    start_ms: i64,
    stopped_ms: i64,
    accruals: &[Entry],
    spent: &BTreeMap<String, i128>,
    note: &str,
) -> Vec<Entry> {
    refund_due_after(
        policy,
        start_ms,
        stopped_ms,
        i64::MIN,
        accruals,
        spent,
        note,
    )
}

/// `refund_due` of a workload that may have been refunded before
/// (`refunded_until`): only the lost stretch's part from `not_before_ms`
/// on. A stretch of a run is refunded once, not once per mark: a workload
/// whose stop failed (the refund stands) and is marked again, or one a
/// replica deciding on a stale view marked again, is refunded only for
/// what it ran since.
pub fn refund_due_after(
    policy: &RefundPolicy,
    start_ms: i64,
    stopped_ms: i64,
    not_before_ms: i64,
    accruals: &[Entry],
    spent: &BTreeMap<String, i128>,
    note: &str,
) -> Vec<Entry> {
    let mut room: BTreeMap<String, i128> = spent.iter().map(|(k, v)| (k.clone(), *v)).collect();
    refund_after(policy, start_ms, stopped_ms, not_before_ms, accruals, note)
        .into_iter()
        .filter_map(|mut e| {
            let left = room.entry(e.key.clone()).or_insert(0);
            let give = (-e.amount).min(*left).max(0);
            let give = give - give % PER_MILLE_ACC;
            if give == 0 {
                return None;
            }
            *left -= give;
            e.amount = -give;
            Some(e)
        })
        .collect()
}

/// Take the refund of the reclaim mark `mark` (its `marked` time) of
/// `workload` into `status`: unless that mark was refunded already, lower
/// each cash key's spent (`cashAccrued`) by the entries and record it in
/// `status.refunds` (the newest `KEEP_REFUNDS` kept). Returns the entries
/// taken (empty: nothing was due, or this mark was refunded before).
pub fn take_refund(
    status: &mut QuotaStatus,
    workload: &str,
    mark: &str,
    entries: Vec<Entry>,
    now_ms: i64,
) -> Vec<Entry> {
    if entries.is_empty() || status.refunds.get(workload).is_some_and(|r| r.mark == mark) {
        return Vec::new();
    }
    let mut amounts: BTreeMap<String, i128> = BTreeMap::new();
    for e in &entries {
        *amounts.entry(e.key.clone()).or_insert(0) -= e.amount;
    }
    for (key, amount) in &amounts {
        status.add_accrued(key, -(amount / PER_MILLE_ACC));
    }
    let from = entries.iter().map(|e| e.start_ms).min().unwrap_or(now_ms);
    let to = entries.iter().map(|e| e.end_ms).max().unwrap_or(now_ms);
    status.refunds.insert(
        workload.to_string(),
        Refunded {
            mark: mark.to_string(),
            at: time::format_rfc3339(now_ms),
            from: time::format_rfc3339(from),
            to: time::format_rfc3339(to),
            amounts: amounts
                .into_iter()
                .map(|(k, v)| (k, v.to_string()))
                .collect(),
        },
    );
    while status.refunds.len() > KEEP_REFUNDS {
        let oldest = status
            .refunds
            .iter()
            .min_by(|a, b| a.1.at.cmp(&b.1.at).then(a.0.cmp(b.0)))
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => status.refunds.remove(&k),
            None => break,
        };
    }
    entries
}

/// Of one quota, the accrual windows one controller wrote itself, one
/// after another: from `from` to `to`, the `lastReconcileTime` its last
/// write set. A run it recorded late is billed back only over them
/// (`bill_late`): a window another writer wrote (an earlier life, a stale
/// leader still running) may have billed the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnWindows {
    pub from: i64,
    pub to: i64,
}

impl OwnWindows {
    /// Where late runs may be billed back from when the stored status was
    /// paid to `paid_to`: the start of this controller's windows if the
    /// stored one is its last; None (nothing is billed back) otherwise.
    pub fn bill_back_from(mine: Option<OwnWindows>, paid_to: i64) -> Option<i64> {
        mine.filter(|w| w.to == paid_to).map(|w| w.from)
    }

    /// This controller's windows after one of its writes landed, `now`
    /// being the write's time. `stamped`: the write set
    /// `lastReconcileTime` (its window is `[paid_to, now)`, or none when
    /// nothing was paid yet); the windows go on if the stored one was
    /// already this controller's. Not stamped: the stored window stays,
    /// and they survive only if it is this controller's.
    pub fn after_write(
        mine: Option<OwnWindows>,
        stamped: bool,
        paid_to: Option<i64>,
        now: i64,
    ) -> Option<OwnWindows> {
        match (stamped, paid_to) {
            (true, Some(paid)) => Some(OwnWindows {
                from: Self::bill_back_from(mine, paid).unwrap_or(paid),
                to: now,
            }),
            (true, None) => Some(OwnWindows { from: now, to: now }),
            (false, _) => mine.filter(|w| Some(w.to) == paid_to),
        }
    }
}

/// Bill runs the controller recorded late (`pods::PodRuns`: seen only
/// after a status write had paid past their start) back, into `q`: each of
/// `late` (workload reference, run) from the latest of its start, its
/// workload's charge (`before`: the status as stored), the end of a
/// refund it already had (`refunded_until`) and `from_ms` (where the
/// caller's own windows begin, `OwnWindows::bill_back_from`), up to
/// `paid_to` (the stored `lastReconcileTime`; what comes after is the
/// current window's). The amounts are added to what the current period
/// has spent, at the prices in force during the stretch; returns the
/// ledger entries, which carry the stretch's own times. A run of a
/// workload no longer charged is not billed back (nothing says since when
/// the quota held it).
pub fn bill_late(
    q: &mut crate::object::Quota,
    before: &QuotaStatus,
    late: &[(&str, crate::cash::Interval<'_>)],
    from_ms: i64,
    paid_to: i64,
    prices: &crate::cash::QosMultipliers,
    list: &super::price_list::PriceList,
) -> Vec<Entry> {
    let runs: Vec<(&str, crate::cash::Interval<'_>)> = late
        .iter()
        .filter_map(|(wref, iv)| {
            let since = time::parse_rfc3339(&before.workloads.get(wref)?.since)?;
            let refunded = refunded_until(before, wref).unwrap_or(i64::MIN);
            let start = iv.start_ms.max(since).max(from_ms).max(refunded);
            let end = iv.end_ms.map_or(paid_to, |e| e.min(paid_to));
            (start < end).then(|| {
                (
                    *wref,
                    crate::cash::Interval {
                        start_ms: start,
                        end_ms: Some(end),
                        ..iv.clone()
                    },
                )
            })
        })
        .collect();
    let Some(from) = runs.iter().map(|(_, iv)| iv.start_ms).min() else {
        return Vec::new();
    };
    let crate::object::Quota {
        metadata,
        spec,
        status,
        ..
    } = q;
    let entries = super::ledger::run_entries(
        &metadata.name,
        spec,
        &runs,
        &status.users,
        from,
        paid_to,
        prices,
        list,
    );
    let mut amounts: BTreeMap<&str, i128> = BTreeMap::new();
    for e in &entries {
        *amounts.entry(&e.key).or_insert(0) += e.amount;
    }
    for (key, acc) in amounts {
        status.add_accrued(key, super::price_list::to_cash_accrued(acc));
    }
    if !entries.is_empty() {
        status.refresh(spec);
    }
    entries
}

/// Until when `status.refunds` says `workload` was refunded (the end of
/// its last refunded stretch), if it was: a later refund of the same run
/// starts there (`refund_due_after`). A run started after it is not
/// touched by it (its lost stretch starts later anyway).
pub fn refunded_until(status: &QuotaStatus, workload: &str) -> Option<i64> {
    status
        .refunds
        .get(workload)
        .and_then(|r| time::parse_rfc3339(&r.to))
}

/// Per cash key, what the period has spent (acc), from `status`.
pub fn spent(status: &QuotaStatus) -> BTreeMap<String, i128> {
    status
        .cash_accrued
        .keys()
        .map(|k| {
            (
                k.clone(),
                super::from_cash_accrued(status.accrued(k)).max(0),
            )
        })
        .collect()
}

/// The total of refund entries per key, as a positive amount (acc).
pub fn refunded_total(entries: &[Entry]) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for e in entries.iter().filter(|e| e.reason == Reason::Refund) {
        *out.entry(e.key.clone()).or_insert(0) -= e.amount;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "cash/requests.nvidia.com/gpu";
    const H: i64 = 3_600_000;

    fn accrual(start: i64, end: i64, amount: i128) -> Entry {
        Entry {
            quota: "q".into(),
            key: KEY.into(),
            workload: "batch/Job/ns/train".into(),
            namespace: "ns".into(),
            model: None,
            qos: None,
            user: None,
            start_ms: start,
            end_ms: end,
            amount,
            reason: Reason::Accrual,
            note: String::new(),
        }
    }

    /// A late run is billed from the later of its start and its charge up
    /// to where the status was paid, exactly what the windows it missed
    /// would have billed; a workload not charged is not billed back.
    #[test]
    fn a_late_run_is_billed_from_its_charge_to_the_paid_window() {
        use crate::cash::{Interval, QosMultipliers};
        use crate::object::{Charge, QuotaSpec};
        use crate::quantity::Quantity;
        let spec = QuotaSpec {
            hard: [(KEY.to_string(), Quantity::from_units(1000))].into(),
            ..Default::default()
        };
        let charge = |since: i64| Charge {
            pod_sets: Vec::new(),
            hpa: None,
            since: time::format_rfc3339(since),
            uid: String::new(),
            admitted: None,
        };
        let before = QuotaStatus {
            workloads: crate::object::Workloads::from([
                ("batch/Job/ns/a".to_string(), charge(H)),
                ("batch/Job/ns/b".to_string(), charge(0)),
            ]),
            ..Default::default()
        };
        let usage: crate::resources::ResourceList = [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(2),
        )]
        .into();
        let run = |start, end| Interval {
            usage: &usage,
            qos: None,
            start_ms: start,
            end_ms: end,
        };
        let late = [
            // Started before its charge: billed from the charge, 1 h to 3 h.
            ("batch/Job/ns/a", run(0, None)),
            // Ended at 2 h: 0 to 2 h.
            ("batch/Job/ns/b", run(0, Some(2 * H))),
            // Not charged: nothing.
            ("batch/Job/ns/c", run(0, None)),
        ];
        let quota = || crate::object::Quota {
            metadata: crate::object::ObjectMeta {
                name: "q".into(),
                ..Default::default()
            },
            spec: spec.clone(),
            ..Default::default()
        };
        let bill = |before: &QuotaStatus, late: &[(&str, Interval<'_>)], from, paid_to| {
            let mut q = quota();
            let entries = bill_late(
                &mut q,
                before,
                late,
                from,
                paid_to,
                &QosMultipliers::default(),
                &super::super::price_list::PriceList::default(),
            );
            (q.status, entries)
        };
        let (status, entries) = bill(&before, &late, 0, 3 * H);
        // 2 cards × (2 h + 2 h) = 8 card-hours, in the status and the entries.
        assert_eq!(
            crate::cash::to_quantity(status.accrued(KEY)),
            Quantity::from_units(8),
            "{status:?}"
        );
        let total: i128 = entries.iter().map(|e| e.amount).sum();
        assert_eq!(
            super::super::price_list::to_cash_accrued(total),
            status.accrued(KEY)
        );
        assert!(entries.iter().all(|e| e.start_ms >= 0 && e.end_ms <= 3 * H));
        assert!(entries.iter().all(|e| e.workload != "batch/Job/ns/c"));
        // Nothing late before the paid mark: nothing billed.
        let (untouched, entries) = bill(&before, &late[..1], 0, H);
        assert!(entries.is_empty());
        assert_eq!(untouched, quota().status);
        // Windows before `from_ms` (another writer's, here before 1 h)
        // and a refunded stretch are not billed back: b from 1.5 h (its
        // refund's end) to 2 h, a from 1 h to 3 h: 2 cards × 2.5 h.
        let mut refunded = before.clone();
        refunded.refunds.insert(
            "batch/Job/ns/b".into(),
            Refunded {
                mark: String::new(),
                at: time::format_rfc3339(2 * H),
                from: time::format_rfc3339(0),
                to: time::format_rfc3339(H + H / 2),
                amounts: BTreeMap::new(),
            },
        );
        let (clipped, _) = bill(&refunded, &late, H, 3 * H);
        assert_eq!(
            crate::cash::to_quantity(clipped.accrued(KEY)),
            Quantity::from_units(5),
            "{clipped:?}"
        );
    }

    /// Late runs are billed back over a controller's own windows only:
    /// they go on while each stored window is its last, and break at a
    /// window another writer stored.
    #[test]
    fn own_windows_go_on_until_another_writer_stores_one() {
        let w = |from, to| Some(OwnWindows { from, to });
        // The first write (nothing paid yet), then two more of its own.
        let mine = OwnWindows::after_write(None, true, None, 10);
        assert_eq!(mine, w(10, 10));
        let mine = OwnWindows::after_write(mine, true, Some(10), 20);
        let mine = OwnWindows::after_write(mine, true, Some(20), 30);
        assert_eq!(mine, w(10, 30));
        assert_eq!(OwnWindows::bill_back_from(mine, 30), Some(10));
        // A write that did not set lastReconcileTime keeps them while the
        // stored window is still its own.
        assert_eq!(OwnWindows::after_write(mine, false, Some(30), 31), mine);
        // Another writer stored the window to 40: nothing is billed back
        // over it, and this controller's next window starts a new run.
        assert_eq!(OwnWindows::bill_back_from(mine, 40), None);
        assert_eq!(OwnWindows::after_write(mine, false, Some(40), 41), None);
        assert_eq!(OwnWindows::after_write(mine, true, Some(40), 50), w(40, 50));
    }

    #[test]
    fn a_declared_run_starts_and_lasts_as_admission_reserved_it() {
        let reservation = |at_ms: i64, run_ms: i64| crate::object::budgets::Reservation {
            reserved: 0,
            used: 0,
            at_ms,
            run_ms,
        };
        // No reservation: from the charge, for the annotation's time.
        assert_eq!(
            Running::declared("w", H, None, Some(5)).map(|r| r.deadline_ms()),
            Some(5 + H)
        );
        assert_eq!(Running::declared("w", H, None, None), None, "start unknown");
        // Reserved: from its start. The watch still shows the minute the
        // annotation declared before it was lengthened to an hour, which
        // admission judged and reserved: the hour.
        let r = reservation(10, H);
        let run = Running::declared("w", 60_000, Some(&r), Some(500)).unwrap();
        assert_eq!((run.start_ms, run.run_ms), (10, H));
        // A reservation shorter than the annotation (bounded by
        // activeDeadlineSeconds, which the API server enforces): the
        // annotation's end, as before.
        let r = reservation(10, 60_000);
        let run = Running::declared("w", H, Some(&r), Some(500)).unwrap();
        assert_eq!(run.deadline_ms(), 10 + H);
    }

    #[test]
    fn overdue_at_the_declared_end() {
        let rs = [
            Running {
                workload: "a",
                start_ms: 0,
                run_ms: H,
            },
            Running {
                workload: "b",
                start_ms: 0,
                run_ms: 2 * H,
            },
        ];
        assert_eq!(overdue(&rs, H - 1), (vec![], Some(H)));
        assert_eq!(overdue(&rs, H), (vec!["a"], Some(2 * H)));
        assert_eq!(overdue(&rs, 3 * H), (vec!["a", "b"], None));
    }

    #[test]
    fn capped_at_the_period_spent_and_taken_once_per_mark() {
        let acc = [accrual(0, H, 3_600_000_000)];
        let spent = BTreeMap::from([(KEY.to_string(), 1_000_000_500)]);
        let r = refund_due(&RefundPolicy::WholeRun, 0, H, &acc, &spent, "n");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].amount, -1_000_000_000, "capped, whole per-mille units");
        let mut st = QuotaStatus::default();
        st.add_accrued(KEY, 1_000_000);
        assert_eq!(take_refund(&mut st, "w", "m1", r.clone(), 5).len(), 1);
        assert_eq!(st.accrued(KEY), 0);
        assert!(take_refund(&mut st, "w", "m1", r.clone(), 6).is_empty());
        assert_eq!(st.accrued(KEY), 0, "refunded at most once per mark");
        assert_eq!(st.refunds["w"].amounts[KEY], "1000000000");
    }
}
