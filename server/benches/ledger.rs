//! Budget ledger benchmark (prints figures; not a timed test):
//!
//!   cargo bench -p bizrq --bench ledger                    # 10,000 quotas, 500,000 pod runs
//!   cargo bench -p bizrq --bench ledger -- --windows 60 --window-minutes 1
//!   cargo bench -p bizrq --bench ledger -- --postgres postgres://postgres@127.0.0.1:5432/bench
//!   cargo test  -p bizrq --bench ledger -- --smoke         # small, for CI
//!   cargo bench -p bizrq --bench ledger -- --issue         # issue 13's scenario (below)
//!   cargo bench -p bizrq --bench ledger -- --issue --days 3   # its first 3 days
//!
//! `--issue`: issue 13's benchmark, a month (`--days`, 30) of per-minute
//! accrual for `--quotas` (10,000) quotas and `--runs` (500,000 per 30
//! days, scaled to `--days`) pod runs, each starting at a minute drawn
//! evenly over the span and lasting 1 to 119 minutes (60 on average; one
//! card of one of four models). Every minute, the entries of every quota
//! holding a run (`run_entries`, one per run) are written in one
//! `append_ledger` transaction (the real, idempotent insert path), and
//! every simulated hour the roll-up runs as in production (`--hourly-days`,
//! 7; `--daily-days`, 90). Then a report over the year ending with the
//! span, for the whole tree, by child per month and by model per day,
//! checked against the sum of what was written to the acc; then again
//! once the roll-up has made the span daily rows (as the year's older
//! months would be). Beside these, a floor measured in the same run: as
//! many rows INSERTed, as many a transaction, into a bare table with only
//! a primary key, and one `GROUP BY` over them.
//! Databases under /tmp/ledger/, deleted after.
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
//! times. docs/benchmarks.md "Budget ledger and reports" has the figures.

use bizrq::store::sql::SqlStore;
use quota::budget::ledger::run_entries;
use quota::budget::report::{report, Bucket, Dimension, ReportSpec};
use quota::budget::PriceList;
use quota::cash::{Interval, QosMultipliers};
use quota::object::budgets::{Entry, Reason};
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
    if flag("--issue") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(issue());
        return;
    }
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
    std::fs::create_dir_all("/tmp/ledger").unwrap();
    let dir = tempfile::tempdir_in("/tmp/ledger").unwrap();
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
    let (prices, list) = (QosMultipliers::default(), PriceList::default());
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
        let agg = store
            .ledger_aggregate(&spec, None, usize::MAX - 1)
            .await
            .unwrap()
            .unwrap();
        let read = t.elapsed().as_secs_f64();
        let r = report(&agg.entries, &spec, &parents).unwrap();
        let all = t.elapsed().as_secs_f64();
        assert_eq!(
            r.total, ledger_sum,
            "the report's total is the ledger's sum"
        );
        println!(
            "  report over the whole tree and span, {name}: {} entries summed in SQL into {} groups in {read:.2} s, {} rows, {all:.2} s in all; total = ledger sum to the acc",
            agg.rows,
            agg.entries.len(),
            r.rows.len()
        );
    }
    store.close().await;
}

/// A small deterministic generator (no clock, no crate): the same runs
/// every time.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

fn sqlite_size(db: &std::path::Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|x| std::fs::metadata(format!("{}{x}", db.display())).ok())
        .map(|m| m.len())
        .sum()
}

async fn db_size(pool: &sqlx::AnyPool, url: &str, db: &std::path::Path) -> u64 {
    if url.starts_with("sqlite") {
        return sqlite_size(db);
    }
    let r = sqlx::query("SELECT pg_database_size(current_database()) AS n")
        .fetch_one(pool)
        .await
        .unwrap();
    sqlx::Row::try_get::<i64, _>(&r, "n").unwrap() as u64
}

async fn count(pool: &sqlx::AnyPool, table: &str) -> i64 {
    let r = sqlx::query(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap();
    sqlx::Row::try_get(&r, "n").unwrap()
}

/// The floor: `n` rows shaped like ledger entries into a table with only
/// a primary key, `per_tx` a transaction, 200 rows a statement.
async fn floor_insert(pool: &sqlx::AnyPool, n: usize, per_tx: usize, sqlite: bool) -> usize {
    sqlx::query(
        "CREATE TABLE floor_rows (id TEXT PRIMARY KEY, quota TEXT NOT NULL, key TEXT NOT NULL, \
         workload TEXT NOT NULL, model TEXT, start_ms BIGINT NOT NULL, end_ms BIGINT NOT NULL, \
         amount TEXT NOT NULL, amount_lo BIGINT NOT NULL)",
    )
    .execute(pool)
    .await
    .unwrap();
    let mut done = 0;
    while done < n {
        let mut tx = pool.begin().await.unwrap();
        let end = (done + per_tx).min(n);
        while done < end {
            let k = (end - done).min(200);
            // Anonymous `?` on SQLite, as the ledger writes them (a named
            // parameter costs SQLite a walk of all of them to bind).
            let values: Vec<String> = (0..k)
                .map(|j| {
                    let b = j * 9;
                    if sqlite {
                        return "(?, ?, ?, ?, ?, ?, ?, ?, ?)".to_string();
                    }
                    format!(
                        "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                        b + 1,
                        b + 2,
                        b + 3,
                        b + 4,
                        b + 5,
                        b + 6,
                        b + 7,
                        b + 8,
                        b + 9
                    )
                })
                .collect();
            let sql = format!("INSERT INTO floor_rows VALUES {}", values.join(", "));
            let mut q = sqlx::query(&sql);
            for i in done..done + k {
                q = q
                    .bind(format!("{i:064x}"))
                    .bind(format!("t{}", i % 9_900))
                    .bind(CASH)
                    .bind(format!("batch/Job/ns{}/job{}", i % 97, i / 60))
                    .bind(["A100", "H100", "T4", "L40S"][i % 4])
                    .bind(T0 + i as i64)
                    .bind(T0 + i as i64 + MINUTE)
                    .bind("60000000000000000000")
                    .bind(i as i64);
            }
            q.execute(&mut *tx).await.unwrap();
            done += k;
        }
        tx.commit().await.unwrap();
    }
    n
}

async fn floor_group(pool: &sqlx::AnyPool) -> usize {
    sqlx::query("SELECT model, CAST(SUM(amount_lo) AS BIGINT) AS s FROM floor_rows GROUP BY model")
        .fetch_all(pool)
        .await
        .unwrap()
        .len()
}

/// Issue 13's scenario (`--issue`; the module doc says what it models).
async fn issue() {
    use quota::budget::ledger_rollup::{Policy, MS_PER_DAY as D};
    let days: i64 = arg("--days").unwrap_or(30);
    let quotas: usize = arg("--quotas").unwrap_or(10_000);
    let runs_month: usize = arg("--runs").unwrap_or(500_000);
    let runs = (runs_month as i64 * days / 30).max(1) as usize;
    let policy = Policy {
        hourly_after_ms: arg::<i64>("--hourly-days").unwrap_or(7) * D,
        daily_after_ms: arg::<i64>("--daily-days").unwrap_or(90) * D,
        daily_utc_offset_minutes: 0,
    };
    policy.validate().unwrap();
    let pg: Option<String> = arg("--postgres");
    std::fs::create_dir_all("/tmp/ledger").unwrap();
    let dir = tempfile::tempdir_in("/tmp/ledger").unwrap();
    let db = dir.path().join("ledger.db");
    let url = pg.unwrap_or_else(|| format!("sqlite://{}", db.display()));
    let store = SqlStore::connect(&url).await.expect("database");
    store.set_ledger_rollup(policy).unwrap();
    // The bench's own connection: checkpoints (the server sets
    // wal_autocheckpoint = 0), counts, sizes and the floor.
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let sqlite = url.starts_with("sqlite");
    // The tree: root → √n departments → teams.
    let depts = ((quotas as f64).sqrt() as usize).max(1);
    let mut parents: BTreeMap<String, String> = BTreeMap::new();
    parents.insert("root".into(), String::new());
    for d in 0..depts {
        parents.insert(format!("d{d}"), "root".into());
    }
    let mut teams = Vec::new();
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
    let minutes = days * 1440;
    let mut rng = Lcg(13);
    // (start minute, end minute, team, run)
    let mut plan: Vec<(i64, i64, usize, Run, String)> = (0..runs)
        .map(|i| {
            let start = rng.next(minutes as u64) as i64;
            let len = 1 + rng.next(119) as i64;
            let team = rng.next(teams.len() as u64) as usize;
            let run = Run {
                workload: format!("batch/Job/ns{}/job{i}", team % 97),
                usage: usages[i % usages.len()].clone(),
                qos: qos[i % qos.len()],
            };
            (start, start + len, team, run, format!("user{}", i % 13))
        })
        .collect();
    plan.sort_by_key(|p| p.0);
    let run_minutes: i64 = plan.iter().map(|p| p.1.min(minutes) - p.0).sum();
    let spec = QuotaSpec {
        hard: [(CASH.to_string(), Quantity::from_units(1_000_000))].into(),
        ..Default::default()
    };
    let (prices, list) = (QosMultipliers::default(), PriceList::default());
    println!(
        "ledger --issue: {} quotas ({} teams), {runs} pod runs of 1–119 min over {days} days ({run_minutes} run-minutes), per-minute accrual, roll-up hourly after {} days, daily after {} days, {}",
        parents.len(),
        teams.len(),
        policy.hourly_after_ms / D,
        policy.daily_after_ms / D,
        if url.starts_with("sqlite") { "SQLite" } else { "PostgreSQL" }
    );
    let mut next = 0usize;
    let mut active: Vec<usize> = Vec::new();
    let (mut written, mut ledger_sum, mut tx_count) = (0usize, 0i128, 0usize);
    let (mut roll_secs, mut rolled_rows) = (0f64, 0u64);
    let t = Instant::now();
    for m in 0..minutes {
        while next < plan.len() && plan[next].0 <= m {
            active.push(next);
            next += 1;
        }
        active.retain(|&i| plan[i].1 > m);
        let from = T0 + m * MINUTE;
        let to = from + MINUTE;
        let mut by_team: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in &active {
            by_team.entry(plan[i].2).or_default().push(i);
        }
        let mut entries: Vec<Entry> = Vec::new();
        for (team, idx) in &by_team {
            let ivs: Vec<(&str, Interval<'_>)> = idx
                .iter()
                .map(|&i| {
                    let r = &plan[i].3;
                    (
                        r.workload.as_str(),
                        Interval {
                            usage: &r.usage,
                            qos: r.qos,
                            start_ms: T0 + plan[i].0 * MINUTE,
                            end_ms: Some(T0 + plan[i].1 * MINUTE),
                        },
                    )
                })
                .collect();
            let users: BTreeMap<String, String> = idx
                .iter()
                .map(|&i| (plan[i].3.workload.clone(), plan[i].4.clone()))
                .collect();
            entries.extend(run_entries(
                &teams[*team],
                &spec,
                &ivs,
                &users,
                from,
                to,
                &prices,
                &list,
            ));
        }
        ledger_sum += entries.iter().map(|e| e.amount).sum::<i128>();
        written += entries.len();
        if !entries.is_empty() {
            store.append_ledger(&entries).await.unwrap();
            tx_count += 1;
        }
        if (m + 1) % 60 == 0 {
            let tr = Instant::now();
            let r = store.roll_up_ledger(&policy, to).await.unwrap();
            roll_secs += tr.elapsed().as_secs_f64();
            rolled_rows += r.read;
            if sqlite {
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        }
        if (m + 1) % 1440 == 0 {
            println!(
                "  day {}: {written} entries in {:.0} s ({:.0} entries/s), roll-up {:.1} s so far",
                (m + 1) / 1440,
                t.elapsed().as_secs_f64(),
                written as f64 / t.elapsed().as_secs_f64(),
                roll_secs
            );
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let stored = count(&pool, "budget_ledger").await;
    if sqlite {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await
            .unwrap();
    }
    let size = db_size(&pool, &url, &db).await;
    let free = if sqlite {
        let r = sqlx::query("PRAGMA freelist_count")
            .fetch_one(&pool)
            .await
            .unwrap();
        sqlx::Row::try_get::<i64, _>(&r, 0).unwrap() * 4096
    } else {
        0
    };
    println!(
        "  wrote {written} entries in {tx_count} transactions in {secs:.1} s: {:.0} entries/s (roll-up included: {roll_secs:.1} s, {rolled_rows} rows rolled)",
        written as f64 / secs
    );
    println!(
        "  stored after roll-up: {stored} rows ({:.1}% of the entries), database {:.1} MB ({:.1} MB of it free pages the roll-up left for reuse)",
        stored as f64 * 100.0 / written.max(1) as f64,
        size as f64 / 1e6,
        free as f64 / 1e6
    );
    let end = T0 + minutes * MINUTE;
    year_reports(&store, &parents, end, ledger_sum, "at the end of the span").await;
    // Later: what a year's report reads once the span is old (all of it
    // in daily rows, as the eleven months before it would be).
    let later = end + policy.daily_after_ms + D;
    let tr = Instant::now();
    let r = store.roll_up_ledger(&policy, later).await.unwrap();
    if sqlite {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await
            .unwrap();
    }
    println!(
        "  {} days later the roll-up takes {} rows into daily ones in {:.1} s ({} chunks): {} rows stored, database {:.1} MB",
        (later - end) / D,
        r.read,
        tr.elapsed().as_secs_f64(),
        r.chunks,
        count(&pool, "budget_ledger").await,
        db_size(&pool, &url, &db).await as f64 / 1e6
    );
    year_reports(&store, &parents, end, ledger_sum, "in daily rows").await;
    // The floor: the same number of rows into a bare table, then one GROUP BY.
    let tf = Instant::now();
    store.close().await;
    if sqlite {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await
            .unwrap();
    }
    // As many rows a transaction as the ledger's writes had on average.
    let per_tx = (written / tx_count.max(1)).max(1);
    let floor_rows = floor_insert(&pool, written, per_tx, sqlite).await;
    let fsecs = tf.elapsed().as_secs_f64();
    let tr = Instant::now();
    let groups = floor_group(&pool).await;
    println!(
        "  floor: {floor_rows} bare rows INSERTed ({per_tx} a transaction, as above) in {fsecs:.1} s: {:.0} rows/s; one GROUP BY over them ({groups} groups) {:.2} s",
        floor_rows as f64 / fsecs,
        tr.elapsed().as_secs_f64()
    );
    if !url.starts_with("sqlite") {
        sqlx::query("DROP TABLE floor_rows")
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;
    drop(dir);
}

/// A year's report on the whole tree ending at `end`, by child per month
/// and by model per day, each total checked against what was written.
async fn year_reports(
    store: &SqlStore,
    parents: &BTreeMap<String, String>,
    end: i64,
    ledger_sum: i128,
    when: &str,
) {
    for (by, bucket, name) in [
        (Dimension::Child, Bucket::Month, "by child per month"),
        (Dimension::Model, Bucket::Day, "by model per day"),
    ] {
        let spec = ReportSpec {
            from_ms: end - 365 * DAY,
            to_ms: end,
            by,
            bucket,
            utc_offset_minutes: 0,
            subtree: Some("root".into()),
            key: None,
            reasons: vec![Reason::Accrual, Reason::Refund],
        };
        let t = Instant::now();
        let agg = store
            .ledger_aggregate(&spec, None, usize::MAX - 1)
            .await
            .unwrap()
            .unwrap();
        let read = t.elapsed().as_secs_f64();
        let r = report(&agg.entries, &spec, parents).unwrap();
        assert_eq!(
            r.total, ledger_sum,
            "the report's total is the ledger's sum"
        );
        println!(
            "  a year's report on the whole tree {name}, {when}: {} rows summed into {} groups in {read:.2} s, {} report rows, {:.2} s in all; total = what was written, to the acc",
            agg.rows,
            agg.entries.len(),
            r.rows.len(),
            t.elapsed().as_secs_f64()
        );
    }
}
