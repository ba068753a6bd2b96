//! Budget rules at a thousand-GPU cluster's scale (prints figures; not a
//! timed test):
//!
//!   cargo bench -p quota --bench budgets
//!   cargo test  -p quota --bench budgets -- --smoke     # small, for CI
//!
//! One reconcile window of priced accrual for every pod of a busy quota
//! (cut at a period boundary and a price change), then a month's report
//! by day and model over the ledger such windows write.

use quota::budget::price_list::{accrue_priced, Holding};
use quota::budget::report::report;
use quota::budget::{Bucket, Dimension, PriceList, PriceVersion, ReportSpec, Weight};
use quota::cash::QosMultipliers;
use quota::object::budgets::{Entry, Reason};
use quota::object::period::Period;
use quota::{Quantity, ResourceList};
use std::collections::BTreeMap;
use std::time::Instant;

const GPU: &str = "requests.nvidia.com/gpu";
/// 2026-01-31T23:50:00Z: a window across the month's boundary.
const T0: i64 = 1_769_903_400_000;
const DAY: i64 = 86_400_000;

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (pods, entries) = if smoke {
        (100, 10_000)
    } else {
        (10_000, 1_000_000)
    };
    let models = ["A100", "H100", "T4"];
    let usages: Vec<ResourceList> = (0..pods)
        .map(|i| {
            let m = models[i % 3];
            [
                (GPU.to_string(), Quantity::from_units(8)),
                (format!("{GPU}.{m}"), Quantity::from_units(8)),
            ]
            .into()
        })
        .collect();
    let names: Vec<String> = (0..pods)
        .map(|i| format!("batch/Job/ns/w{}", i / 8))
        .collect();
    let holdings: Vec<Holding<'_>> = usages
        .iter()
        .zip(&names)
        .map(|(u, n)| Holding {
            workload: n,
            namespace: "ns",
            user: None,
            usage: u,
            qos: None,
            start_ms: T0 - DAY,
            end_ms: None,
        })
        .collect();
    let prices = PriceList {
        versions: vec![
            PriceVersion {
                effective_ms: 0,
                weights: [("nvidia.com/gpu.H100".to_string(), Weight(2500))].into(),
                default_weight: Weight::ONE,
                quality: None,
            },
            PriceVersion {
                effective_ms: T0 + 300_000,
                weights: [("nvidia.com/gpu.H100".to_string(), Weight(2000))].into(),
                default_weight: Weight::ONE,
                quality: None,
            },
        ],
        currency: None,
    };
    let period = Period::Monthly {
        anchor_day: 1,
        utc_offset_minutes: 0,
    };
    let keys = vec![(format!("cash/{GPU}"), GPU.to_string())];
    let t = Instant::now();
    let window = accrue_priced(
        "q",
        &holdings,
        &keys,
        T0,
        T0 + 20 * 60_000,
        &QosMultipliers::default(),
        &prices,
        &period,
    );
    println!(
        "accrue_priced: {pods} pods, 20-min window cut in 3 → {} entries in {:.1} ms",
        window.len(),
        t.elapsed().as_secs_f64() * 1e3
    );

    let ledger: Vec<Entry> = (0..entries)
        .map(|i| {
            let start = T0 + (i as i64 % (30 * 24 * 12)) * 300_000;
            Entry {
                quota: format!("q{}", i % 50),
                key: keys[0].0.clone(),
                workload: format!("batch/Job/ns/w{}", i % 2000),
                namespace: "ns".into(),
                model: Some(models[i % 3].to_string()),
                qos: None,
                user: None,
                start_ms: start,
                end_ms: start + 300_000,
                amount: 8 * 3_600_000_000_000_000_000 / 12,
                reason: Reason::Accrual,
                note: String::new(),
            }
        })
        .collect();
    let spec = ReportSpec {
        from_ms: T0,
        to_ms: T0 + 31 * DAY,
        by: Dimension::Model,
        bucket: Bucket::Day,
        utc_offset_minutes: 480,
        subtree: None,
        key: None,
        reasons: vec![Reason::Accrual, Reason::Refund],
    };
    let t = Instant::now();
    let r = report(&ledger, &spec, &BTreeMap::new()).expect("valid spec");
    println!(
        "report by day and model: {entries} entries → {} rows in {:.1} ms",
        r.rows.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(r.total, ledger.iter().map(|e| e.amount).sum::<i128>());
}
