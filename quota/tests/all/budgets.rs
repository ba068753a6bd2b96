//! Invariants of budgets (docs/budgets.md): reservations never let a
//! budget be overcommitted, accrual is additive over every cut, reports sum
//! to the ledger, closing periods conserves, periods tile time.

use proptest::prelude::*;
use quota::budget::period::{close, Closing};
use quota::budget::price_list::{accrue_priced, totals, Holding};
use quota::budget::report::{report, share};
use quota::budget::reserve::Ask;
use quota::budget::{
    from_quantity, Bucket, BudgetState, Dimension, PriceList, PriceVersion, ReportSpec, Weight,
};
use quota::cash::{accrue, Interval, QosMultipliers};
use quota::object::budgets::{Entry, Reason, WithoutRunTime};
use quota::object::period::split;
use quota::object::period::{Carry, Overspend, Period, Weekday};
use quota::usage::QosClass;
use quota::workload::PodSet;
use quota::{Quantity, ResourceList};
use std::collections::BTreeMap;

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";
const H: i64 = 3_600_000;
/// 2026-01-01T00:00:00Z
const T0: i64 = 1_767_225_600_000;
const YEAR: i64 = 366 * 86_400_000;

fn weekday() -> impl Strategy<Value = Weekday> {
    prop_oneof![
        Just(Weekday::Monday),
        Just(Weekday::Tuesday),
        Just(Weekday::Wednesday),
        Just(Weekday::Thursday),
        Just(Weekday::Friday),
        Just(Weekday::Saturday),
        Just(Weekday::Sunday),
    ]
}

fn period() -> impl Strategy<Value = Period> {
    prop_oneof![
        Just(Period::None),
        (weekday(), -720i32..=840).prop_map(|(starts_on, utc_offset_minutes)| Period::Weekly {
            starts_on,
            utc_offset_minutes
        }),
        (1u32..=31, -720i32..=840).prop_map(|(anchor_day, utc_offset_minutes)| {
            Period::Monthly {
                anchor_day,
                utc_offset_minutes,
            }
        }),
        (0..YEAR, 1..YEAR).prop_map(|(s, len)| Period::Term {
            start_ms: T0 + s,
            end_ms: T0 + s + len
        }),
    ]
}

fn qos() -> impl Strategy<Value = Option<QosClass>> {
    prop_oneof![
        Just(None),
        Just(Some(QosClass::Guaranteed)),
        Just(Some(QosClass::Burstable)),
        Just(Some(QosClass::BestEffort)),
    ]
}

fn prices() -> impl Strategy<Value = PriceList> {
    prop::collection::vec((1..30 * 86_400_000i64, 0i128..5000, 0i128..5000), 0..4).prop_map(|vs| {
        let mut at = T0 - 86_400_000;
        PriceList {
            versions: vs
                .into_iter()
                .map(|(gap, a100, default)| {
                    at += gap;
                    PriceVersion {
                        effective_ms: at,
                        weights: [("nvidia.com/gpu.A100".to_string(), Weight(a100))].into(),
                        default_weight: Weight(default),
                        quality: None,
                    }
                })
                .collect(),
            currency: None,
        }
    })
}

fn usage(cards: i64, model: Option<&str>) -> ResourceList {
    let mut u: ResourceList = [(GPU.to_string(), Quantity::from_nanos(cards as i128))].into();
    if let Some(m) = model {
        u.insert(format!("{GPU}.{m}"), Quantity::from_nanos(cards as i128));
    }
    u
}

/// Pods: (cards in nano-units, model?, qos, start offset, run length or running).
type Pod = (
    i64,
    Option<&'static str>,
    Option<QosClass>,
    i64,
    Option<i64>,
);

fn pods() -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec(
        (
            1i64..16_000_000_000,
            prop_oneof![Just(None), Just(Some("A100")), Just(Some("T4"))],
            qos(),
            -H..60 * 86_400_000,
            prop::option::of(1i64..40 * 86_400_000),
        ),
        1..6,
    )
}

fn holdings<'a>(pods: &[Pod], usages: &'a [ResourceList]) -> Vec<Holding<'a>> {
    pods.iter()
        .zip(usages)
        .enumerate()
        .map(|(i, (p, u))| Holding {
            workload: ["w0", "w1", "w2"][i % 3],
            namespace: "ns",
            user: None,
            usage: u,
            qos: p.2,
            start_ms: T0 + p.3,
            end_ms: p.4.map(|len| T0 + p.3 + len),
        })
        .collect()
}

fn keys() -> Vec<(String, String)> {
    vec![(CASH.to_string(), GPU.to_string())]
}

fn qos_prices() -> QosMultipliers {
    QosMultipliers {
        guaranteed: 1000,
        burstable: 700,
        best_effort: 300,
    }
}

proptest! {
    /// Periods tile time: every instant lies in its window, a window is
    /// the same seen from any instant of it, and the next one starts where
    /// it ends.
    #[test]
    fn periods_tile_time(p in period(), at in -YEAR..3 * YEAR) {
        let ms = T0 + at;
        let w = p.at(ms);
        prop_assert!(w.contains(ms));
        prop_assert_eq!(p.at(w.start_ms), w);
        prop_assert_eq!(p.at(w.end_ms - 1), w);
        if w.end_ms < i64::MAX {
            prop_assert_eq!(p.at(w.end_ms).start_ms, w.end_ms);
        }
        let len = w.end_ms.saturating_sub(w.start_ms);
        match p {
            Period::Weekly { .. } => prop_assert_eq!(len, 7 * 86_400_000),
            Period::Monthly { .. } => prop_assert!((27 * 86_400_000..=31 * 86_400_000).contains(&len)),
            _ => {}
        }
    }

    /// Accrual over [a, c) equals accrual over [a, b) plus [b, c) for any
    /// b, across period boundaries and price changes; no entry spans a
    /// boundary or a price change.
    #[test]
    fn accrual_is_additive_over_any_cut(
        pods in pods(),
        p in period(),
        list in prices(),
        a in -H..20 * 86_400_000,
        len in 1..50 * 86_400_000i64,
        cut in 0.0f64..1.0,
    ) {
        let usages: Vec<ResourceList> = pods.iter().map(|p| usage(p.0, p.1)).collect();
        let hs = holdings(&pods, &usages);
        let (a, c) = (T0 + a, T0 + a + len);
        let b = a + ((len as f64) * cut) as i64;
        let q = qos_prices();
        let whole = accrue_priced("q", &hs, &keys(), a, c, &q, &list, &p);
        let left = accrue_priced("q", &hs, &keys(), a, b, &q, &list, &p);
        let right = accrue_priced("q", &hs, &keys(), b, c, &q, &list, &p);
        let sum = |t: &BTreeMap<String, i128>| t.get(CASH).copied().unwrap_or(0);
        prop_assert_eq!(sum(&totals(&whole)), sum(&totals(&left)) + sum(&totals(&right)));
        for e in &whole {
            let w = p.at(e.start_ms);
            prop_assert!(e.end_ms <= w.end_ms, "entry crosses a period boundary");
            prop_assert_eq!(list.changes_within(e.start_ms, e.end_ms).count(), 0);
            prop_assert!(a <= e.start_ms && e.end_ms <= c && e.amount > 0);
        }
    }

    /// At face value (no price list) priced accrual is `cash::accrue`'s,
    /// whatever the period cuts.
    #[test]
    fn at_one_price_cuts_change_nothing(
        pods in pods(),
        p in period(),
        a in -H..20 * 86_400_000,
        len in 1..50 * 86_400_000i64,
    ) {
        let usages: Vec<ResourceList> = pods.iter().map(|p| usage(p.0, p.1)).collect();
        let hs = holdings(&pods, &usages);
        let (a, c) = (T0 + a, T0 + a + len);
        let q = qos_prices();
        let priced = accrue_priced("q", &hs, &keys(), a, c, &q, &PriceList::default(), &p);
        let ivs: Vec<Interval<'_>> = hs
            .iter()
            .map(|h| Interval { usage: h.usage, qos: h.qos, start_ms: h.start_ms, end_ms: h.end_ms })
            .collect();
        let plain = accrue(&ivs, &keys(), a, c, &q);
        let plain = plain.get(CASH).copied().unwrap_or(0);
        prop_assert_eq!(
            totals(&priced).get(CASH).copied().unwrap_or(0),
            quota::budget::from_cash_accrued(plain)
        );
    }

    /// Whatever admissions, accruals, completions and deletions happen,
    /// spent + what open reservations hold never exceeds the budget, nor
    /// the reservations their cap (reserved workloads are stopped at their
    /// deadline, so accrue at most what they reserved).
    #[test]
    fn reservations_never_overcommit(
        budget in 0i64..500,
        cap in prop::option::of(0i64..300),
        ops in prop::collection::vec((0u8..4, 0usize..6, 1i64..9, 1i64..40, 0.0f64..1.0), 1..80),
    ) {
        let mut s = BudgetState {
            quota: "q".into(),
            key: CASH.into(),
            budget: from_quantity(Quantity::from_units(budget)),
            cap: cap.map(|c| from_quantity(Quantity::from_units(c))),
            ..Default::default()
        };
        let names = ["a", "b", "c", "d", "e", "f"];
        for (op, w, cards, hours, frac) in ops {
            let name = names[w];
            match op {
                0 => {
                    let sets = vec![PodSet {
                        name: "w".into(),
                        count: cards,
                        per_pod: [(GPU.to_string(), Quantity::from_units(1))].into(),
                        qos: None,
                    }];
                    let ask = Ask { workload: name, declared_ms: Some(hours * H), pod_sets: &sets, now_ms: T0 };
                    let before = s.clone();
                    if let Err(d) = s.admit(&ask, WithoutRunTime::Refuse, GPU, &QosMultipliers::default(), &PriceList::default()) {
                        prop_assert_eq!(&s, &before, "a denial changes nothing");
                        prop_assert!(d.to_string().starts_with("bizrq q: "));
                    }
                }
                1 => {
                    if let Some(r) = s.reservations.get(name) {
                        let amount = (r.outstanding() as f64 * frac) as i128;
                        s.accrue(name, amount);
                    }
                }
                2 => {
                    if let Some(st) = s.settle(name) {
                        prop_assert_eq!(st.released + st.used - st.overrun, st.reserved);
                    }
                }
                _ => {
                    s.release(name);
                }
            }
            prop_assert!(s.spent + s.outstanding() <= s.available());
            if let Some(c) = s.cap {
                prop_assert!(s.outstanding() <= c);
            }
        }
    }

    /// A report's rows add up to its total; over a range holding every
    /// entry the total is the ledger's sum; reports of adjacent ranges add
    /// up to the report of both.
    #[test]
    fn reports_sum_to_the_ledger(
        raw in prop::collection::vec(
            (0usize..3, 0usize..3, 0i64..90 * 86_400_000, 0i64..10 * 86_400_000, -1_000_000_000_000i128..1_000_000_000_000_000, 0u8..4),
            0..30,
        ),
        by in prop_oneof![Just(Dimension::Quota), Just(Dimension::Model), Just(Dimension::Workload), Just(Dimension::Reason), Just(Dimension::Child)],
        bucket in prop_oneof![Just(Bucket::None), Just(Bucket::Day), weekday().prop_map(|starts_on| Bucket::Week { starts_on }), Just(Bucket::Month)],
        offset in -720i32..=840,
        mid in 0i64..100 * 86_400_000,
    ) {
        let reasons = [Reason::Accrual, Reason::Refund, Reason::TopUp, Reason::Carry];
        let entries: Vec<Entry> = raw
            .iter()
            .map(|&(q, m, start, len, amount, r)| Entry {
                quota: ["root", "a", "b"][q].into(),
                key: CASH.into(),
                workload: format!("w{m}"),
                namespace: "ns".into(),
                model: [None, Some("A100".to_string()), Some("T4".to_string())][m].clone(),
                qos: None,
                user: None,
                start_ms: T0 + start,
                end_ms: T0 + start + if reasons[r as usize].is_spending() { len } else { 0 },
                amount,
                reason: reasons[r as usize],
                note: String::new(),
            })
            .collect();
        let parents: BTreeMap<String, String> =
            [("root", ""), ("a", "root"), ("b", "a")].iter().map(|(c, p)| (c.to_string(), p.to_string())).collect();
        let spec = |from: i64, to: i64| ReportSpec {
            from_ms: from,
            to_ms: to,
            by,
            bucket,
            utc_offset_minutes: offset,
            subtree: Some("root".into()),
            key: None,
            reasons: reasons.to_vec(),
        };
        let (from, to) = (T0 - 86_400_000, T0 + 101 * 86_400_000);
        let all = report(&entries, &spec(from, to), &parents).unwrap();
        prop_assert_eq!(all.total, entries.iter().map(|e| e.amount).sum::<i128>());
        prop_assert_eq!(all.rows.iter().map(|r| r.amount).sum::<i128>(), all.total);
        let (l, r) = (
            report(&entries, &spec(from, T0 + mid), &parents).unwrap(),
            report(&entries, &spec(T0 + mid, to), &parents).unwrap(),
        );
        prop_assert_eq!(l.total + r.total, all.total);
        prop_assert_eq!(l.rows.iter().map(|r| r.amount).sum::<i128>(), l.total);
    }

    /// Shares of an entry over any partition of its span add up to it.
    #[test]
    fn shares_partition_exactly(
        amount in any::<i64>(),
        len in 1i64..1_000_000_000_000,
        cuts in prop::collection::vec(0.0f64..1.0, 0..10),
    ) {
        let e = Entry {
            quota: "q".into(), key: CASH.into(), workload: String::new(), namespace: String::new(),
            model: None, qos: None, user: None, start_ms: T0, end_ms: T0 + len,
            amount: amount as i128 * 1_000_000_000_000, reason: Reason::Accrual, note: String::new(),
        };
        let pieces = split(e.start_ms, e.end_ms, cuts.iter().map(|f| T0 + (len as f64 * f) as i64));
        prop_assert_eq!(pieces.iter().map(|&(a, b)| share(&e, a, b)).sum::<i128>(), e.amount);
    }

    /// Closing a period conserves: spent + carried + expired equals
    /// budget + carry-in + top-ups + forgiven; the carry stays within its
    /// rule, and nothing negative expires or is forgiven. Chained over
    /// many periods, the same holds for the sums.
    #[test]
    fn closing_periods_conserves(
        periods in prop::collection::vec((0i128..1_000_000, 0i128..200_000, 0i128..1_500_000), 1..12),
        carry in prop_oneof![
            Just(Carry::None),
            Just(Carry::All),
            (0u32..=100).prop_map(|percent| Carry::Percent { percent }),
            (0i64..500).prop_map(|n| Carry::Amount { amount: Quantity::from_nanos(n as i128) }),
        ],
        forgive in any::<bool>(),
    ) {
        let overspend = if forgive { Overspend::Forgive } else { Overspend::Carry };
        let p = Period::Monthly { anchor_day: 31, utc_offset_minutes: 0 };
        let mut at = T0;
        let mut carry_in = 0i128;
        let (mut total_in, mut total_out) = (0i128, 0i128);
        for (budget, top_ups, spent) in periods {
            let w = p.at(at);
            let r = close(Closing { window: w, budget, carry_in, top_ups, spent }, &carry, overspend);
            prop_assert_eq!(r.spent + r.carried + r.expired, r.budget + r.carry_in + r.top_ups + r.forgiven);
            prop_assert!(r.expired >= 0 && r.forgiven >= 0);
            if r.carried > 0 {
                let cap = match &carry {
                    Carry::None => 0,
                    Carry::All => i128::MAX,
                    Carry::Percent { percent } => budget * *percent as i128 / 100,
                    Carry::Amount { amount } => from_quantity(*amount),
                };
                prop_assert!(r.carried <= cap);
            }
            total_in += r.budget + r.top_ups + r.forgiven;
            total_out += r.spent + r.expired;
            carry_in = r.carried;
            at = w.end_ms;
        }
        // Over the chain: everything given is spent, expired or still carried.
        prop_assert_eq!(total_in, total_out + carry_in);
    }
}

proptest! {
    /// Applying a ledger across period boundaries loses nothing: what the
    /// closed records and the open period spent is what the entries spent,
    /// and every closed record conserves.
    #[test]
    fn applying_a_ledger_across_periods_conserves(
        raw in prop::collection::vec((0i64..120 * 86_400_000, -50i128..1000, any::<bool>()), 0..40),
        budget in 0i128..20_000,
        anchor in 1u32..=31,
        carry in prop_oneof![Just(Carry::None), Just(Carry::All), (0u32..=100).prop_map(|percent| Carry::Percent { percent })],
    ) {
        let period = Period::Monthly { anchor_day: anchor, utc_offset_minutes: 0 };
        let mut s = BudgetState {
            quota: "q".into(),
            key: CASH.into(),
            window: period.at(T0),
            budget,
            ..Default::default()
        };
        let entries: Vec<Entry> = raw
            .iter()
            .map(|&(at, amount, top_up)| Entry {
                quota: "q".into(), key: CASH.into(), workload: "w".into(), namespace: "ns".into(),
                model: None, qos: None, user: None, start_ms: T0 + at, end_ms: T0 + at + 1,
                amount,
                reason: if top_up { Reason::TopUp } else if amount < 0 { Reason::Refund } else { Reason::Accrual },
                note: String::new(),
            })
            .collect();
        let records = s.apply(&entries, &period, &carry, Overspend::Carry);
        let spent: i128 = entries.iter().filter(|e| e.reason.is_spending()).map(|e| e.amount).sum();
        let top_ups: i128 = entries.iter().filter(|e| e.reason == Reason::TopUp).map(|e| e.amount).sum();
        prop_assert_eq!(records.iter().map(|r| r.spent).sum::<i128>() + s.spent, spent);
        prop_assert_eq!(records.iter().map(|r| r.top_ups).sum::<i128>() + s.top_ups, top_ups);
        let mut carry_in = 0;
        for r in &records {
            prop_assert_eq!(r.carry_in, carry_in);
            prop_assert_eq!(r.spent + r.carried + r.expired, r.budget + r.carry_in + r.top_ups + r.forgiven);
            carry_in = r.carried;
        }
        prop_assert_eq!(s.carry_in, carry_in);
    }
}
