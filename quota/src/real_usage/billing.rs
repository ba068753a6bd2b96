//! Billing by quality of service, wired (docs/real-usage.md, "Billing by
//! quality"): what one window of real usage adds to each quota's budgets
//! while a price list version with `billing: ByQuality` is in force.
//!
//! Requests are accrued as always, at the quality weights of their class
//! (`price_list::request_price`); this adds the part only real usage
//! knows: a Burstable pod's use above its request (at `aboveRequest`) and
//! a BestEffort pod's use (at `bestEffort`), on the budgets of CPU and
//! memory (`cash/requests.cpu`, `cash/requests.memory`, and their
//! `limits.` spellings), each at the resource's weight in the list.
//!
//! Exactly once: a quota's status keeps where its billing stands
//! (`qualityBilledTo`); `apply` bills a window only from there on and
//! advances it in the same write that adds the amount to the period's
//! spending and carries the entries to the ledger (`ledgerOutbox`, whose
//! appends are idempotent). A retry, a second replica or a new leader
//! reading the same window is refused by the mark. A quota with nothing
//! to bill in a window is not written. A stretch no reading covered
//! (Prometheus down past the catch-up: the reader's gap) or whose bill
//! could not be written, and a pod's run no point measured, are billed on
//! request only, and marked so in the ledger: entries of 0 with the note
//! `ON_REQUEST`.

use super::answer::Answer;
use super::measure::{measure, Answers, Held, Quality, Reading, Window};
use super::template::Metric;
use crate::budget::price_list::{strip_kind, to_cash_accrued, PriceList};
use crate::budget::quality::{charge, PodUse, QualityWeights};
use crate::keys::cash_target;
use crate::object::budgets::{Entry, Reason};
use crate::object::period::split;
use crate::object::{QuotaSpec, QuotaStatus};
use crate::usage::QosClass;
use std::collections::BTreeMap;

/// The note of an entry that marks a stretch billed on request.
pub const ON_REQUEST: &str = "billed on request: no real usage";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    Cpu,
    Memory,
}

/// The cash keys of `spec` billed on use, with their resource: CPU and
/// memory budgets not narrowed to a model.
fn use_keys(spec: &QuotaSpec) -> Vec<(String, Resource)> {
    spec.hard
        .keys()
        .filter_map(|k| {
            let r = match strip_kind(cash_target(k)?) {
                "cpu" => Resource::Cpu,
                "memory" => Resource::Memory,
                _ => return None,
            };
            Some((k.clone(), r))
        })
        .collect()
}

/// Whether `spec` has a budget billed on use.
pub fn bills_use(spec: &QuotaSpec) -> bool {
    !use_keys(spec).is_empty()
}

/// The quality weights in force at `ms`, if its version bills by quality.
fn quality_at(list: &PriceList, ms: i64) -> Option<QualityWeights> {
    list.version_at(ms).and_then(|v| v.quality)
}

/// Whether a `ByQuality` version is in force at any instant of `[from, to)`.
pub fn by_quality_within(list: &PriceList, from_ms: i64, to_ms: i64) -> bool {
    quality_at(list, from_ms).is_some()
        || list
            .changes_within(from_ms, to_ms)
            .any(|t| quality_at(list, t).is_some())
}

/// `w` cut where the price list changes: at the first point of its grid
/// at or after each change within it. Use is measured per step, so a
/// step is billed at the version in force at its start.
pub fn pieces(w: &Window, list: &PriceList) -> Vec<Window> {
    let step = w.step_ms.max(1);
    let cuts = list
        .changes_within(w.from_ms, w.to_ms)
        .map(|c| w.from_ms + (c - w.from_ms + step - 1).div_euclid(step) * step);
    split(w.from_ms, w.to_ms, cuts)
        .into_iter()
        .map(|(a, b)| Window {
            from_ms: a,
            to_ms: b,
            step_ms: w.step_ms,
        })
        .collect()
}

/// Each piece of `window` (`pieces`) measured: the workloads' readings,
/// whose `above_request` this bills. Empty when no `ByQuality` version is
/// in force within it.
pub fn measure_pieces(
    window: &Window,
    held: &[Held],
    answers: &BTreeMap<Metric, Answer>,
    list: &PriceList,
) -> Vec<(Window, BTreeMap<String, Reading>)> {
    if !by_quality_within(list, window.from_ms, window.to_ms) {
        return Vec::new();
    }
    let ans = Answers {
        gpu_busy: None,
        gpu_memory: None,
        cpu: answers.get(&Metric::Cpu),
        memory: answers.get(&Metric::Memory),
    };
    pieces(window, list)
        .into_iter()
        .filter(|p| quality_at(list, p.from_ms).is_some())
        .map(|p| {
            let readings = measure(&p, held, ans, |_| 0);
            (p, readings)
        })
        .collect()
}

/// What one window adds to one quota's budgets: entries of reason `Use`
/// (and markers of 0), per cash key, workload, QoS class and piece; and
/// the stretches before it to mark as billed on request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bill {
    pub quota: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub entries: Vec<Entry>,
    pub on_request: Vec<(i64, i64)>,
}

impl Bill {
    /// The amount per cash key, in acc.
    pub fn by_key(&self) -> BTreeMap<String, i128> {
        let mut out: BTreeMap<String, i128> = BTreeMap::new();
        for e in &self.entries {
            let s = out.entry(e.key.clone()).or_default();
            *s = s.saturating_add(e.amount);
        }
        out
    }
}

/// The bills of `window` (measured in `parts`, `measure_pieces`): one per
/// quota that has a budget billed on use and something to bill or mark.
/// `quotas` gives each quota's spec and who submitted each workload;
/// `gap`, a stretch before the window no reading covered (marked for
/// every such quota); `unbilled`, per quota, stretches whose bill could
/// not be written (marked in its next).
pub fn bills<'a>(
    window: &Window,
    parts: &[(Window, BTreeMap<String, Reading>)],
    list: &PriceList,
    quotas: impl Iterator<Item = (&'a str, &'a QuotaSpec, &'a BTreeMap<String, String>)>,
    gap: Option<(i64, i64)>,
    unbilled: &BTreeMap<String, Vec<(i64, i64)>>,
) -> Vec<Bill> {
    let gap = gap.filter(|(a, b)| a < b && by_quality_within(list, *a, *b));
    let mut out = Vec::new();
    for (name, spec, users) in quotas {
        let keys = use_keys(spec);
        if keys.is_empty() {
            continue;
        }
        let mut entries = Vec::new();
        for (piece, readings) in parts {
            let Some(weights) = quality_at(list, piece.from_ms) else {
                continue;
            };
            for (wref, r) in readings.iter().filter(|(_, r)| r.quota == name) {
                for (key, resource) in &keys {
                    let entry = |qos: QosClass, amount: i128, note: &str| Entry {
                        quota: name.to_string(),
                        key: key.clone(),
                        workload: wref.clone(),
                        namespace: r.namespace.clone(),
                        model: None,
                        qos: Some(qos),
                        user: users.get(wref).cloned(),
                        start_ms: piece.from_ms,
                        end_ms: piece.to_ms,
                        amount,
                        reason: Reason::Use,
                        note: note.to_string(),
                    };
                    let weight = list.weight_at(
                        piece.from_ms,
                        match resource {
                            Resource::Cpu => "cpu",
                            Resource::Memory => "memory",
                        },
                        None,
                    );
                    for (qos, above, unmeasured) in by_class(&r.above_request, *resource) {
                        let c = charge(
                            &PodUse {
                                qos: Some(qos),
                                above,
                                ..PodUse::default()
                            },
                            weight,
                            &weights,
                        );
                        let amount = c.above_request.saturating_add(c.best_effort);
                        if amount > 0 {
                            entries.push(entry(qos, amount, ""));
                        }
                        if unmeasured > 0 {
                            entries.push(entry(qos, 0, ON_REQUEST));
                        }
                    }
                }
            }
        }
        let on_request: Vec<(i64, i64)> = gap
            .into_iter()
            .chain(unbilled.get(name).into_iter().flatten().copied())
            .collect();
        if entries.is_empty() && on_request.is_empty() {
            continue;
        }
        out.push(Bill {
            quota: name.to_string(),
            from_ms: window.from_ms,
            to_ms: window.to_ms,
            entries,
            on_request,
        });
    }
    out
}

/// A workload's use above request of `resource`, by class: (class, use
/// in nano-unit-ms, unmeasured pod-ms).
fn by_class(q: &Quality, resource: Resource) -> [(QosClass, i128, i64); 2] {
    match resource {
        Resource::Cpu => [
            (
                QosClass::Burstable,
                q.burstable_cpu,
                q.burstable_cpu_unmeasured_ms,
            ),
            (
                QosClass::BestEffort,
                q.best_effort_cpu,
                q.best_effort_cpu_unmeasured_ms,
            ),
        ],
        Resource::Memory => [
            (
                QosClass::Burstable,
                q.burstable_memory,
                q.burstable_memory_unmeasured_ms,
            ),
            (
                QosClass::BestEffort,
                q.best_effort_memory,
                q.best_effort_memory_unmeasured_ms,
            ),
        ],
    }
}

/// Where `status` stands: the end of the last window billed.
pub fn billed_to(status: &QuotaStatus) -> Option<i64> {
    status
        .quality_billed_to
        .as_deref()
        .and_then(crate::time::parse_rfc3339)
}

/// Bills `bill` into `status`, once: refused (None) when its window
/// starts before where the status's billing stands — it, or part of it,
/// was billed already. Otherwise the amounts are added to each key's
/// spending in the current period (`cashAccrued`, rounded up to its
/// per-mille unit as all accrual is), the mark moves to the window's end,
/// and the entries to write are returned: the bill's, and a marker of 0
/// per use key for each of its `on_request` stretches not already billed
/// (the parts of it while `ByQuality` was in force).
pub fn apply(
    status: &mut QuotaStatus,
    spec: &QuotaSpec,
    bill: &Bill,
    list: &PriceList,
) -> Option<Vec<Entry>> {
    let mark = billed_to(status);
    if mark.is_some_and(|m| bill.from_ms < m) || bill.to_ms <= bill.from_ms {
        return None;
    }
    let mut entries = Vec::new();
    let stretches = bill
        .on_request
        .iter()
        .map(|&(a, b)| (a.max(mark.unwrap_or(i64::MIN)), b.min(bill.from_ms)))
        .filter(|(a, b)| a < b);
    for (from, to) in stretches {
        for (a, b) in split(from, to, list.changes_within(from, to)) {
            if quality_at(list, a).is_none() {
                continue;
            }
            for (key, _) in use_keys(spec) {
                entries.push(Entry {
                    quota: bill.quota.clone(),
                    key,
                    workload: String::new(),
                    namespace: String::new(),
                    model: None,
                    qos: None,
                    user: None,
                    start_ms: a,
                    end_ms: b,
                    amount: 0,
                    reason: Reason::Use,
                    note: ON_REQUEST.to_string(),
                });
            }
        }
    }
    for (key, acc) in bill.by_key() {
        status.add_accrued(&key, to_cash_accrued(acc));
    }
    entries.extend(bill.entries.iter().cloned());
    status.quality_billed_to = Some(crate::time::format_rfc3339(bill.to_ms));
    status.refresh(spec);
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::price_list::{PriceVersion, Weight};
    use crate::budget::to_quantity;
    use crate::quantity::{Quantity, NANO};
    use crate::readable::exact;
    use crate::real_usage::answer::{PodName, Point, Rejected};

    const MIN: i64 = 60_000;
    const T: i64 = 1_795_255_200_000;

    fn list(by_quality_from: Option<i64>) -> PriceList {
        let mut versions = vec![PriceVersion {
            effective_ms: T - 60 * MIN,
            weights: [("cpu".to_string(), Weight(2000))].into(),
            default_weight: Weight::ONE,
            quality: None,
        }];
        if let Some(at) = by_quality_from {
            versions.push(PriceVersion {
                effective_ms: at,
                weights: [("cpu".to_string(), Weight(2000))].into(),
                default_weight: Weight::ONE,
                quality: Some(QualityWeights::default()),
            });
        }
        PriceList {
            versions,
            currency: None,
        }
    }

    fn spec() -> QuotaSpec {
        let mut s = QuotaSpec::default();
        for k in [
            "cash/requests.cpu",
            "cash/requests.nvidia.com/gpu",
            "requests.cpu",
        ] {
            s.hard.insert(k.into(), Quantity::from_units(1000));
        }
        s
    }

    fn pod(name: &str, qos: QosClass) -> Held {
        Held {
            name: PodName {
                namespace: "ml".into(),
                pod: name.into(),
            },
            workload: format!("batch/Job/ml/{name}"),
            quota: "team".into(),
            cards: 0,
            model: None,
            cpu_request: if qos == QosClass::BestEffort {
                0
            } else {
                2 * NANO
            },
            memory_request: 0,
            qos,
            start_ms: T - 5 * MIN,
            end_ms: None,
        }
    }

    /// Every pod uses 3 cores at each step of `[from, to)`.
    fn cpu_answer(pods: &[&str], from: i64, to: i64) -> BTreeMap<Metric, Answer> {
        let pts: Vec<Point> = (1..)
            .map(|k| from + k * MIN)
            .take_while(|t| *t <= to)
            .map(|at_ms| Point {
                at_ms,
                nanos: 3 * NANO,
            })
            .collect();
        let answer = Answer {
            pods: pods
                .iter()
                .map(|p| {
                    (
                        PodName {
                            namespace: "ml".into(),
                            pod: p.to_string(),
                        },
                        pts.clone(),
                    )
                })
                .collect(),
            rejected: Rejected::default(),
            series: pods.len(),
        };
        [(Metric::Cpu, answer)].into()
    }

    fn bill_of(
        list: &PriceList,
        w: &Window,
        held: &[Held],
        ans: &BTreeMap<Metric, Answer>,
    ) -> Bill {
        bill_after(list, w, held, ans, None)
    }

    fn bill_after(
        list: &PriceList,
        w: &Window,
        held: &[Held],
        ans: &BTreeMap<Metric, Answer>,
        gap: Option<(i64, i64)>,
    ) -> Bill {
        let parts = measure_pieces(w, held, ans, list);
        let spec = spec();
        let users: BTreeMap<String, String> =
            [("batch/Job/ml/b".to_string(), "alice".to_string())].into();
        let mut b = bills(
            w,
            &parts,
            list,
            [("team", &spec, &users)].into_iter(),
            gap,
            &BTreeMap::new(),
        );
        assert!(b.len() <= 1);
        b.pop().unwrap_or_default()
    }

    /// The test, pure: a Burstable pod requesting 2 cores that
    /// uses 3 for ten minutes pays, on top of its request, its 1 core
    /// above at 0.5 × the CPU weight 2; a BestEffort pod its 3 cores at
    /// 0.1 × 2; a Guaranteed pod nothing here (its request is accrued).
    #[test]
    fn use_above_request_is_billed_exactly_by_class() {
        let l = list(Some(T - 30 * MIN));
        let w = Window {
            from_ms: T,
            to_ms: T + 10 * MIN,
            step_ms: MIN,
        };
        let held = [
            pod("b", QosClass::Burstable),
            pod("e", QosClass::BestEffort),
            pod("g", QosClass::Guaranteed),
        ];
        let ans = cpu_answer(&["b", "e", "g"], T, T + 10 * MIN);
        let bill = bill_of(&l, &w, &held, &ans);
        let amount = |wl: &str| {
            bill.entries
                .iter()
                .filter(|e| e.workload.ends_with(wl))
                .map(|e| e.amount)
                .sum::<i128>()
        };
        let ten = (10 * MIN) as i128;
        assert_eq!(amount("/b"), NANO * ten * 2000 * 500);
        assert_eq!(amount("/e"), 3 * NANO * ten * 2000 * 100);
        assert_eq!(amount("/g"), 0);
        assert_eq!(exact(to_quantity(amount("/b"))), "0.166666667");
        let b = bill
            .entries
            .iter()
            .find(|e| e.workload.ends_with("/b"))
            .unwrap();
        assert_eq!(
            (b.key.as_str(), b.qos, b.user.as_deref(), b.reason),
            (
                "cash/requests.cpu",
                Some(QosClass::Burstable),
                Some("alice"),
                Reason::Use
            )
        );
        // Only CPU and memory budgets are billed on use.
        assert!(bill.entries.iter().all(|e| e.key == "cash/requests.cpu"));
    }

    #[test]
    fn a_window_is_billed_once_and_gaps_are_marked_on_request() {
        let l = list(Some(T - 30 * MIN));
        let spec = spec();
        let held = [pod("b", QosClass::Burstable)];
        let mut status = QuotaStatus::default();
        let w1 = Window {
            from_ms: T,
            to_ms: T + 5 * MIN,
            step_ms: MIN,
        };
        let b1 = bill_of(&l, &w1, &held, &cpu_answer(&["b"], T, T + 5 * MIN));
        let written = apply(&mut status, &spec, &b1, &l).unwrap();
        assert_eq!(written, b1.entries);
        let spent = status.accrued("cash/requests.cpu");
        assert_eq!(spent * 1000, b1.by_key()["cash/requests.cpu"]);
        // The same window again (a second reader, a new leader): refused,
        // nothing added.
        assert_eq!(apply(&mut status, &spec, &b1, &l), None);
        assert_eq!(status.accrued("cash/requests.cpu"), spent);
        // The next window after a gap of 10 minutes the reader never
        // read: billed, and the gap marked as billed on request.
        let w2 = Window {
            from_ms: T + 15 * MIN,
            to_ms: T + 20 * MIN,
            step_ms: MIN,
        };
        let b2 = bill_after(
            &l,
            &w2,
            &held,
            &cpu_answer(&["b"], T + 15 * MIN, T + 20 * MIN),
            Some((T + 5 * MIN, T + 15 * MIN)),
        );
        let written = apply(&mut status, &spec, &b2, &l).unwrap();
        let marks: Vec<_> = written.iter().filter(|e| e.note == ON_REQUEST).collect();
        assert_eq!(marks.len(), 1);
        assert_eq!(
            (marks[0].start_ms, marks[0].end_ms, marks[0].amount),
            (T + 5 * MIN, T + 15 * MIN, 0)
        );
        assert_eq!(status.accrued("cash/requests.cpu"), spent * 2);
        assert_eq!(billed_to(&status), Some(T + 20 * MIN));
        // A stretch to mark that a write thought lost had billed after
        // all: not marked.
        let mut late = b2.clone();
        (late.from_ms, late.to_ms) = (T + 20 * MIN, T + 25 * MIN);
        late.entries.clear();
        late.on_request = vec![(T + 15 * MIN, T + 20 * MIN)];
        assert_eq!(apply(&mut status, &spec, &late, &l), Some(Vec::new()));
        // Nothing to bill and nothing to mark: no bill, no write.
        let idle = Window {
            from_ms: T + 25 * MIN,
            to_ms: T + 30 * MIN,
            step_ms: MIN,
        };
        let g = [pod("g", QosClass::Guaranteed)];
        assert_eq!(
            bill_of(&l, &idle, &g, &cpu_answer(&["g"], idle.from_ms, idle.to_ms)),
            Bill::default()
        );
    }

    #[test]
    fn an_unmeasured_run_is_marked_and_billed_nothing_on_use() {
        let l = list(Some(T - 30 * MIN));
        let w = Window {
            from_ms: T,
            to_ms: T + 10 * MIN,
            step_ms: MIN,
        };
        // Points for the first 4 minutes only.
        let bill = bill_of(
            &l,
            &w,
            &[pod("b", QosClass::Burstable)],
            &cpu_answer(&["b"], T, T + 4 * MIN),
        );
        assert_eq!(
            bill.entries.iter().map(|e| e.amount).sum::<i128>(),
            NANO * (4 * MIN) as i128 * 2000 * 500
        );
        assert!(bill
            .entries
            .iter()
            .any(|e| e.note == ON_REQUEST && e.amount == 0 && e.qos == Some(QosClass::Burstable)));
    }

    #[test]
    fn billing_starts_at_the_first_step_of_a_by_quality_version() {
        // ByQuality from T + 3.5 min: the steps from T + 4 min are billed.
        let l = list(Some(T + 3 * MIN + MIN / 2));
        let w = Window {
            from_ms: T,
            to_ms: T + 10 * MIN,
            step_ms: MIN,
        };
        let bill = bill_of(
            &l,
            &w,
            &[pod("b", QosClass::Burstable)],
            &cpu_answer(&["b"], T, T + 10 * MIN),
        );
        assert_eq!(bill.entries.len(), 1);
        assert_eq!(bill.entries[0].start_ms, T + 4 * MIN);
        assert_eq!(
            bill.entries[0].amount,
            NANO * (6 * MIN) as i128 * 2000 * 500
        );
        // Without a ByQuality version nothing is billed and no bill made.
        let none = measure_pieces(
            &w,
            &[pod("b", QosClass::Burstable)],
            &BTreeMap::new(),
            &list(None),
        );
        assert!(none.is_empty());
    }

    #[test]
    fn requests_are_accrued_at_the_quality_weight_of_their_class_from_the_cut() {
        use crate::budget::price_list::request_price;
        use crate::cash::QosMultipliers;
        let l = list(Some(T));
        let m = QosMultipliers::default();
        let w = Weight(2000);
        let p = |ms, key, class| request_price(&l, ms, w, key, &m, Some(class));
        // Before the cut: the QoS multiplier (1).
        assert_eq!(p(T - 1, "requests.cpu", QosClass::Burstable), 2000 * 1000);
        assert_eq!(p(T, "requests.cpu", QosClass::Burstable), 2000 * 850);
        assert_eq!(p(T, "requests.cpu", QosClass::Guaranteed), 2000 * 1000);
        assert_eq!(p(T, "requests.memory", QosClass::BestEffort), 2000 * 100);
        // Cards are held whole: guaranteed, whatever the pod's class.
        assert_eq!(
            p(T, "requests.nvidia.com/gpu", QosClass::BestEffort),
            2000 * 1000
        );
    }
}
