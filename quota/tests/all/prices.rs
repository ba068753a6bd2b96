//! Price lists in the status accumulators (docs/budgets.md §3, §9): the
//! accrual both modes write splits exactly at a price change, so accruing
//! a window in any two pieces gives what accruing it whole gives, and the
//! weighted amounts agree with the ledger's priced entries.

use proptest::prelude::*;
use quota::budget::price_list::{accrue_priced, accrue_weighted, to_cash_accrued, totals, Holding};
use quota::budget::{PriceList, PriceVersion, Weight};
use quota::cash::{Interval, QosMultipliers};
use quota::object::period::Period;
use quota::object::{Charge, Quota, QuotaSpec};
use quota::usage::QosClass;
use quota::workload::PodSet;
use quota::{Quantity, ResourceList};

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";
const H: i64 = 3_600_000;
/// 2026-01-01T00:00:00Z
const T0: i64 = 1_767_225_600_000;

fn list() -> impl Strategy<Value = PriceList> {
    prop::collection::vec((1..10 * H, 0i128..5000, 0i128..3000), 0..5).prop_map(|vs| {
        let mut at = T0 - H;
        PriceList {
            versions: vs
                .into_iter()
                .map(|(gap, a100, default)| {
                    at += gap;
                    PriceVersion {
                        effective_ms: at,
                        weights: [
                            ("nvidia.com/gpu.A100".to_string(), Weight(a100)),
                            ("nvidia.com/gpu.H100".to_string(), Weight(2500)),
                        ]
                        .into(),
                        default_weight: Weight(default),
                        quality: None,
                    }
                })
                .collect(),
            currency: None,
        }
    })
}

fn qos() -> impl Strategy<Value = Option<QosClass>> {
    prop_oneof![
        Just(None),
        Just(Some(QosClass::Guaranteed)),
        Just(Some(QosClass::Burstable)),
        Just(Some(QosClass::BestEffort)),
    ]
}

fn multipliers() -> QosMultipliers {
    QosMultipliers {
        guaranteed: 1000,
        burstable: 700,
        best_effort: 333,
    }
}

/// (micro-units of cards, model, qos, start offset, run length or running)
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
            1i64..16_000_000,
            prop_oneof![Just(None), Just(Some("A100")), Just(Some("H100"))],
            qos(),
            -H..30 * H,
            prop::option::of(1i64..40 * H),
        ),
        1..6,
    )
}

fn usage(micro: i64, model: Option<&str>) -> ResourceList {
    let q = Quantity::from_nanos(micro as i128 * 1000);
    let mut u: ResourceList = [(GPU.to_string(), q)].into();
    if let Some(m) = model {
        u.insert(format!("{GPU}.{m}"), q);
    }
    u
}

fn keys() -> Vec<(String, String)> {
    vec![(CASH.to_string(), GPU.to_string())]
}

fn spec() -> QuotaSpec {
    QuotaSpec {
        hard: [(CASH.to_string(), Quantity::from_units(1_000_000))].into(),
        ..Default::default()
    }
}

proptest! {
    /// The controller's accrual (cluster mode): any cut, across any price
    /// change, adds up exactly, and equals the priced ledger's total.
    #[test]
    fn weighted_accrual_splits_exactly_at_any_cut(
        pods in pods(), list in list(), a in -H..20 * H, len in 1..40 * H, cut in 0.0f64..1.0,
    ) {
        let usages: Vec<ResourceList> = pods.iter().map(|p| usage(p.0, p.1)).collect();
        let ivs: Vec<Interval<'_>> = pods.iter().zip(&usages).map(|(p, u)| Interval {
            usage: u, qos: p.2, start_ms: T0 + p.3, end_ms: p.4.map(|l| T0 + p.3 + l),
        }).collect();
        let (a, c) = (T0 + a, T0 + a + len);
        let b = a + ((len as f64) * cut) as i64;
        let q = multipliers();
        let get = |m: std::collections::BTreeMap<String, i128>| m.get(CASH).copied().unwrap_or(0);
        let whole = get(accrue_weighted(&ivs, &keys(), a, c, &q, &list));
        let parts = get(accrue_weighted(&ivs, &keys(), a, b, &q, &list))
            + get(accrue_weighted(&ivs, &keys(), b, c, &q, &list));
        prop_assert_eq!(whole, parts);
        let holdings: Vec<Holding<'_>> = ivs.iter().map(|iv| Holding {
            workload: "w", namespace: "ns", user: None, usage: iv.usage, qos: iv.qos,
            start_ms: iv.start_ms, end_ms: iv.end_ms,
        }).collect();
        let entries = accrue_priced("q", &holdings, &keys(), a, c, &q, &list, &Period::None);
        let acc = totals(&entries).get(CASH).copied().unwrap_or(0);
        prop_assert_eq!(acc % 1000, 0, "micro-unit quantities are exact in the status unit");
        prop_assert_eq!(whole, to_cash_accrued(acc));
    }

    /// Standalone accrual from the charge ledger: accruing up to b then up
    /// to c (b before, at or after a price change) is accruing up to c
    /// once, and equals the controller's accrual of the same holdings.
    #[test]
    fn ledger_accrual_splits_exactly_at_a_price_change(
        pods in pods(), list in list(), len in 1..40 * H, cut in 0.0f64..1.0,
    ) {
        let mut q = Quota::new("q", spec());
        q.status.last_reconcile_time = Some(quota::time::format_rfc3339(T0));
        let mut usages = Vec::new();
        for (i, p) in pods.iter().enumerate() {
            let since = T0 + p.3.max(0);
            let set = PodSet {
                name: "main".into(),
                count: 1,
                per_pod: usage(p.0, p.1),
                qos: p.2,
            };
            usages.push((set.per_pod.clone(), p.2, since));
            q.status.workloads.insert(format!("w{i}"), Charge {
                pod_sets: vec![set],
                hpa: None,
                since: quota::time::format_rfc3339(since),
                uid: String::new(),
                admitted: None,
            });
        }
        let (b, c) = (T0 + ((len as f64) * cut) as i64, T0 + len);
        let m = multipliers();
        let mut split = q.clone();
        split.status.accrue_ledger_priced(&spec(), b, &m, &list);
        split.status.accrue_ledger_priced(&spec(), c, &m, &list);
        let mut once = q.clone();
        once.status.accrue_ledger_priced(&spec(), c, &m, &list);
        prop_assert_eq!(split.status.accrued(CASH), once.status.accrued(CASH));
        let ivs: Vec<Interval<'_>> = usages.iter().map(|(u, qos, since)| Interval {
            usage: u, qos: *qos, start_ms: *since, end_ms: None,
        }).collect();
        let expect = accrue_weighted(&ivs, &keys(), T0, c, &m, &list).get(CASH).copied().unwrap_or(0);
        prop_assert_eq!(once.status.accrued(CASH), expect);
    }
}

#[test]
fn four_a100_for_two_hours_across_a_rise_cost_the_two_prices() {
    let list: PriceList = serde_json::from_value(serde_json::json!({"versions": [
        {"effective": "2026-01-01T00:00:00Z", "weights": {"nvidia.com/gpu.A100": "1"}},
        {"effective": "2026-01-01T01:00:00.001Z", "weights": {"nvidia.com/gpu.A100": "2.5"}}]}))
    .unwrap();
    let u = usage(4_000_000, Some("A100"));
    let iv = Interval {
        usage: &u,
        qos: None,
        start_ms: T0,
        end_ms: None,
    };
    let acc = accrue_weighted(
        &[iv],
        &keys(),
        T0,
        T0 + 2 * H,
        &QosMultipliers::default(),
        &list,
    )[CASH];
    // 4 × (1 h + 1 ms) × 1 + 4 × (1 h − 1 ms) × 2.5, per mille.
    let expect = 4_000_000_000i128 * ((H as i128 + 1) * 1000 + (H as i128 - 1) * 2500);
    assert_eq!(acc, expect);
}

proptest! {
    /// The runway's burn (`runway::burn_per_hour`, what the tree and the
    /// overview divide a budget's left by) is what accrual charges for the
    /// next hour when nothing changes: at each model's weight, across any
    /// price change within the hour, at each QoS multiplier — to the
    /// nano-unit (accrual rounds to the status unit first).
    #[test]
    fn the_runway_burn_is_the_next_hours_accrual(
        pods in pods(), list in list(), at in 0..30 * H,
    ) {
        let mut q = Quota::new("q", spec());
        let now = T0 + at;
        q.status.last_reconcile_time = Some(quota::time::format_rfc3339(now));
        for (i, p) in pods.iter().enumerate() {
            q.status.workloads.insert(format!("w{i}"), Charge {
                pod_sets: vec![PodSet {
                    name: "main".into(),
                    count: 1,
                    per_pod: usage(p.0, p.1),
                    qos: p.2,
                }],
                hpa: None,
                since: quota::time::format_rfc3339(T0.min(now)),
                uid: String::new(),
                admitted: None,
            });
        }
        let m = multipliers();
        let burn = quota::budget::runway::burn_per_hour(q.status.workloads.values(), GPU, now, &m, &list);
        let mut next = q.clone();
        next.status.accrue_ledger_priced(&spec(), now + H, &m, &list);
        let accrued = quota::budget::to_quantity(quota::budget::from_cash_accrued(next.status.accrued(CASH)));
        prop_assert!((accrued.nanos() - burn.nanos()).abs() <= 1, "burn {burn:?}, accrued {accrued:?}");
    }
}

#[test]
fn an_h100_at_two_and_a_half_burns_two_and_a_half_card_hours_an_hour() {
    let list: PriceList = serde_json::from_value(serde_json::json!({"versions": [
        {"effective": "2026-01-01T00:00:00Z", "weights": {"nvidia.com/gpu.H100": "2.5"}}]}))
    .unwrap();
    let charge = |model| Charge {
        pod_sets: vec![PodSet {
            name: "main".into(),
            count: 4,
            per_pod: usage(1_000_000, Some(model)),
            qos: None,
        }],
        hpa: None,
        since: quota::time::format_rfc3339(T0),
        uid: String::new(),
        admitted: None,
    };
    let burn = |c: &Charge| {
        quota::budget::runway::burn_per_hour([c], GPU, T0 + H, &QosMultipliers::default(), &list)
    };
    assert_eq!(burn(&charge("H100")), Quantity::from_units(10));
    assert_eq!(
        burn(&charge("A100")),
        Quantity::from_units(4),
        "no weight: face price"
    );
}
