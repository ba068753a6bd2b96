//! Budget ledger benchmark (prints figures; not a timed test):
//!
//!   cargo bench -p bizrq --bench ledger                    # 10,000 quotas, 500,000 pod runs
//!   cargo bench -p bizrq --bench ledger -- --windows 60 --window-minutes 1
//!   cargo bench -p bizrq --bench ledger -- --postgres postgres://postgres@127.0.0.1:5432/bench
//!   cargo test  -p bizrq --bench ledger -- --smoke         # small, for CI
//!
//! Writes the ledger the way the controller does (`ledger::run_entries`
//! per quota and accrual window, appended with `SqlStore::append_window`,
//! one transaction per window) for `--quotas` quotas (a tree: root →
//! departments → teams) holding `--runs` pod runs between them (each its
//! own workload, with a model, QoS class and user), for `--windows`
//! windows of `--window-minutes`, spread evenly over `--days` days (so a
//! year of ledger can be written in minutes: the rows per window are what
//! per-minute accrual writes, the span is what a year's report reads).
//! Then reports on the whole tree over the whole span, by child per month
//! and by model per day, and checks each total against the ledger's sum.
//! Prints rows written per second, the database's size, and the report
//! times. README, "Reports", has the figures.

use bizrq::store::sql::SqlStore;
use quota::budget::ledger::run_entries;
use quota::budget::report::{report, Bucket, Dimension, Entry, Reason, ReportSpec};
use quota::budget::PriceList;
use quota::cash::{Interval, Prices};
use quota::object::QuotaSpec;
use quota::usage::QosClass;
use quota::{Quantity, ResourceList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const GPU: &str = "requests.nvidia.com/gpu";
/// 2026-01-01T00:00:00Z
const T0: i64 = 1_767_225_600_000;
const MINUTE: i64 = 60_000;
const DAY: i64 = 86_400_000;

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

struct Run {
    workload: String,
    usage: Arc<ResourceList>,
    qos: Option<QosClass>,
}

fn main() {
    let smoke = flag("--smoke");
    let quotas: usize = arg("--quotas").unwrap_or(if smoke { 40 } else { 10_000 });
    let runs: usize = arg("--runs").unwrap_or(if smoke { 400 } else { 500_000 });
    let windows: usize = arg("--windows").unwrap_or(if smoke { 3 } else { 12 });
    let window_min: i64 = arg("--window-minutes").unwrap_or(1);
    let days: i64 = arg("--days").unwrap_or(if smoke { 2 } else { 365 });
    let pg: Option<String> = arg("--postgres");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(bench(quotas, runs, windows, window_min, days, pg));
}

async fn bench(
    quotas: usize,
    runs: usize,
    windows: usize,
    window_min: i64,
    days: i64,
    pg: Option<String>,
) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let url = pg.unwrap_or_else(|| format!("sqlite://{}", db.display()));
    let store = SqlStore::connect(&url).await.expect("database");
    // The tree: root → √n departments → teams.
    let depts = ((quotas as f64).sqrt() as usize).max(1);
    let mut parents: BTreeMap<String, String> = BTreeMap::new();
    parents.insert("root".into(), String::new());
    let mut teams = Vec::new();
    for d in 0..depts {
        parents.insert(format!("d{d}"), "root".into());
    }
    while parents.len() < quotas.max(depts + 2) {
        let t = format!("t{}", teams.len());
        parents.insert(t.clone(), format!("d{}", teams.len() % depts));
        teams.push(t);
    }
    let models = ["A100", "H100", "T4", "L40S"];
    let qos = [
        Some(QosClass::Guaranteed),
        Some(QosClass::Burstable),
        Some(QosClass::BestEffort),
    ];
    let usages: Vec<Arc<ResourceList>> = models
        .iter()
        .map(|m| {
            let mut u = ResourceList::new();
            u.insert(GPU.into(), Quantity::from_units(1));
            u.insert(format!("{GPU}.{m}"), Quantity::from_units(1));
            Arc::new(u)
        })
        .collect();
    let mut by_team: Vec<Vec<Run>> = (0..teams.len()).map(|_| Vec::new()).collect();
    for i in 0..runs {
        let t = i % teams.len();
        by_team[t].push(Run {
            workload: format!("batch/Job/ns{}/job{i}", t % 97),
            usage: usages[i % usages.len()].clone(),
            qos: qos[i % qos.len()],
        });
    }
    let users: Vec<BTreeMap<String, String>> = by_team
        .iter()
        .map(|rs| {
            rs.iter()
                .enumerate()
                .map(|(i, r)| (r.workload.clone(), format!("user{}", i % 13)))
                .collect()
        })
        .collect();
    let spec = QuotaSpec {
        hard: [(CASH.to_string(), Quantity::from_units(1_000_000))].into(),
        ..Default::default()
    };
    let (prices, list) = (Prices::default(), PriceList::default());
    let span = days * DAY;
    let step = (span / windows as i64).max(window_min * MINUTE);
    println!(
        "ledger: {} quotas ({} teams with runs), {runs} pod runs, {windows} windows of {window_min} min spread over {days} days, {}",
        parents.len(),
        teams.len(),
        if url.starts_with("sqlite") { "SQLite" } else { "PostgreSQL" }
    );
    let mut written = 0usize;
    let mut ledger_sum = 0i128;
    let t = Instant::now();
    for w in 0..windows {
        let from = T0 + w as i64 * step;
        let to = from + window_min * MINUTE;
        let tw = Instant::now();
        let mut rows_w = 0;
        for (ti, team) in teams.iter().enumerate() {
            let ivs: Vec<(&str, Interval<'_>)> = by_team[ti]
                .iter()
                .map(|r| {
                    (
                        r.workload.as_str(),
                        Interval {
                            usage: &r.usage,
                            qos: r.qos,
                            start_ms: T0,
                            end_ms: None,
                        },
                    )
                })
                .collect();
            let entries: Vec<Entry> =
                run_entries(team, &spec, &ivs, &users[ti], from, to, &prices, &list);
            ledger_sum += entries.iter().map(|e| e.amount).sum::<i128>();
            rows_w += entries.len();
            store.append_window(team, from, to, &entries).await.unwrap();
        }
        written += rows_w;
        if w == 0 || w + 1 == windows {
            println!(
                "  window {}: {rows_w} entries in {:.2} s ({:.0} entries/s)",
                w + 1,
                tw.elapsed().as_secs_f64(),
                rows_w as f64 / tw.elapsed().as_secs_f64()
            );
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "  wrote {written} entries in {secs:.1} s: {:.0} entries/s, {:.1} ms per quota window",
        written as f64 / secs,
        secs * 1000.0 / (windows * teams.len()) as f64
    );
    let per_minute_month = runs as f64 * 30.0 * 1440.0;
    println!(
        "  a month of per-minute accrual is {:.3e} entries (one per run and minute): {:.1} h at this rate",
        per_minute_month,
        per_minute_month / (written as f64 / secs) / 3600.0
    );
    if url.starts_with("sqlite") {
        // The file and its write-ahead log.
        let size: u64 = ["", "-wal"]
            .iter()
            .filter_map(|x| std::fs::metadata(format!("{}{x}", db.display())).ok())
            .map(|m| m.len())
            .sum();
        println!(
            "  database: {:.1} MB, {:.0} bytes per entry",
            size as f64 / 1e6,
            size as f64 / written.max(1) as f64
        );
    }
    for (by, bucket, name) in [
        (Dimension::Child, Bucket::Month, "by child per month"),
        (Dimension::Model, Bucket::Day, "by model per day"),
    ] {
        let spec = ReportSpec {
            from_ms: T0,
            to_ms: T0 + span + DAY,
            by,
            bucket,
            utc_offset_minutes: 0,
            subtree: Some("root".into()),
            key: None,
            reasons: vec![Reason::Accrual, Reason::Refund],
        };
        let t = Instant::now();
        let sel = bizrq::store::ledger::Selection {
            from_ms: spec.from_ms,
            to_ms: spec.to_ms,
            quotas: None,
            key: None,
        };
        let entries = store
            .ledger_entries(&sel, usize::MAX - 1)
            .await
            .unwrap()
            .unwrap();
        let read = t.elapsed().as_secs_f64();
        let r = report(&entries, &spec, &parents).unwrap();
        let all = t.elapsed().as_secs_f64();
        assert_eq!(
            r.total, ledger_sum,
            "the report's total is the ledger's sum"
        );
        println!(
            "  report over the whole tree and span, {name}: {} entries read in {read:.2} s, {} rows, {all:.2} s in all; total = ledger sum to the acc",
            entries.len(),
            r.rows.len()
        );
    }
    store.close().await;
}
