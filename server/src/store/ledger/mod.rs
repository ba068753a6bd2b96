//! The budget ledger (table `budget_ledger`, migration 0015;
//! docs/budgets.md §6): every accrual, refund, top-up and carry as a
//! `report::Entry`, read back by the reports.
//!
//! Writing is idempotent: an entry's `id` is a hash of everything that
//! identifies it, and an entry already stored is left alone. Standalone,
//! the entries a status write accrued are inserted in the same transaction
//! as that write (`SqlStore::write_object`), so a lost compare-and-swap,
//! a crash or a second replica can never write a window twice or lose
//! one. In cluster mode the controller appends each window after its
//! status write (`append_window`), guarded by a per-quota mark.

mod append;
mod compaction;
mod query;

pub(in crate::store) use append::insert_beside;
pub use append::Appended;
pub use compaction::{Rolled, ROLL_CHUNK};
pub use query::{Aggregated, Refused, Selection, TooMany};

use super::sql::query::qos_text;
use super::StoreError;
use quota::budget::ledger_rollup;
use quota::object::budgets::{Entry, Reason};
use quota::usage::QosClass;
use sqlx::Row;

/// How long a ledger window's record is kept (`forget_ledger_windows`).
pub const KEEP_WINDOWS_MS: i64 = 24 * 3_600_000;

/// Entries per INSERT statement (17 parameters each).
const BATCH: usize = 200;
/// Quota names per `IN (…)` list when reading a subtree.
const NAMES_PER_QUERY: usize = 500;

fn reason_text(r: Reason) -> &'static str {
    match r {
        Reason::Accrual => "accrual",
        Reason::Refund => "refund",
        Reason::TopUp => "topUp",
        Reason::Carry => "carry",
        Reason::Use => "use",
    }
}

fn reason_from_text(s: &str) -> Result<Reason, StoreError> {
    Ok(match s {
        "accrual" => Reason::Accrual,
        "refund" => Reason::Refund,
        "topUp" => Reason::TopUp,
        "carry" => Reason::Carry,
        "use" => Reason::Use,
        other => {
            return Err(StoreError::Backend(format!(
                "ledger: stored reason '{other}' is unknown"
            )))
        }
    })
}

fn qos_from(s: &str) -> Result<QosClass, StoreError> {
    match s {
        "Guaranteed" => Ok(QosClass::Guaranteed),
        "Burstable" => Ok(QosClass::Burstable),
        "BestEffort" => Ok(QosClass::BestEffort),
        other => Err(StoreError::Backend(format!(
            "ledger: stored QoS class '{other}' is unknown"
        ))),
    }
}

/// An entry's identity: two writes of the same entry have the same id.
/// Fields are separated by a byte no Kubernetes name or key can hold.
/// The hash is led by the entry's start (16 hex digits and `-`), so the
/// entries of one window sit together in the primary key's index and an
/// append dirties a few of its pages, not one per entry, which would
/// slow the ledger's writes (docs/benchmarks.md, "Budget ledger and reports");
/// migration 0017 gives stored ids the same lead.
pub fn entry_id(e: &Entry) -> String {
    let parts = [
        e.quota.as_str(),
        e.key.as_str(),
        reason_text(e.reason),
        e.workload.as_str(),
        e.namespace.as_str(),
        e.model.as_deref().unwrap_or("\u{1}"),
        e.qos.map(qos_text).unwrap_or("\u{1}"),
        e.user.as_deref().unwrap_or("\u{1}"),
        &e.start_ms.to_string(),
        &e.end_ms.to_string(),
        e.note.as_str(),
    ];
    format!(
        "{:016x}-{}",
        e.start_ms.max(0),
        crate::util::sha256_hex(&parts.join("\u{0}"))
    )
}

/// One amount as the three limbs reports add in SQL (migration 0016):
/// `hi × 10^18 + mid × 10^9 + lo`, each limb with the amount's sign.
pub fn limbs(amount: i128) -> Result<(i64, i64, i64), StoreError> {
    const G: i128 = 1_000_000_000;
    let hi = i64::try_from(amount / (G * G)).map_err(|_| {
        StoreError::Backend(format!(
            "ledger: the amount {amount} acc is beyond what the ledger adds exactly"
        ))
    })?;
    Ok((hi, ((amount / G) % G) as i64, (amount % G) as i64))
}

/// The amount of three limb sums (exact: each sum is at most 64 bits).
pub fn from_limbs(hi: i64, mid: i64, lo: i64) -> i128 {
    const G: i128 = 1_000_000_000;
    hi as i128 * G * G + mid as i128 * G + lo as i128
}

/// Roll-up level of an entry as written: 0, or 3 (kept as written for
/// good) for what is never rolled.
fn written_level(e: &Entry) -> i64 {
    if ledger_rollup::rollable(e) {
        0
    } else {
        3
    }
}

/// The id of a rolled row: the entry's identity with its level, so a
/// rolled row never takes the place of an entry as written.
fn rolled_id(e: &Entry, level: i64) -> String {
    format!("{}:{level}", entry_id(e))
}

fn amount_of(s: &str) -> Result<i128, StoreError> {
    s.parse()
        .map_err(|_| StoreError::Backend(format!("ledger: stored amount '{s}' is not an integer")))
}

fn entry_of(r: &sqlx::any::AnyRow) -> Result<Entry, StoreError> {
    Ok(Entry {
        quota: r.try_get("quota")?,
        key: r.try_get("key")?,
        workload: r.try_get("workload")?,
        namespace: r.try_get("namespace")?,
        model: r.try_get("model")?,
        qos: r
            .try_get::<Option<String>, _>("qos")?
            .map(|s| qos_from(&s))
            .transpose()?,
        user: r.try_get("username")?,
        start_ms: r.try_get("start_ms")?,
        end_ms: r.try_get("end_ms")?,
        amount: amount_of(&r.try_get::<String, _>("amount")?)?,
        reason: reason_from_text(&r.try_get::<String, _>("reason")?)?,
        note: r.try_get("note")?,
    })
}

/// The columns of an entry as `entry_of` reads them.
const ENTRY_COLUMNS: &str = "quota, key, workload, namespace, model, qos, username, start_ms, \
     end_ms, amount, reason, note";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sql::SqlStore;
    use crate::store::testdb::on_both_databases;
    use quota::budget::report::{self, Bucket, Dimension, ReportSpec};

    on_both_databases!(
        appending_twice_writes_once,
        ids_stored_before_migration_0017_still_match,
        windows_are_written_once,
        reads_are_bounded_and_filtered,
        sums_in_sql_equal_the_entries,
        rolling_up_keeps_every_report,
        a_rolled_cell_that_comes_to_nothing_goes,
        reports_finer_than_the_rolled_grid_are_refused,
    );

    fn accrual(quota: &str, workload: &str, start: i64, end: i64, amount: i128) -> Entry {
        Entry {
            quota: quota.into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            workload: workload.into(),
            namespace: "ml".into(),
            model: Some("A100".into()),
            qos: Some(QosClass::Guaranteed),
            user: Some("alice".into()),
            start_ms: start,
            end_ms: end,
            amount,
            reason: Reason::Accrual,
            note: String::new(),
        }
    }

    const KEY: &str = "cash/requests.nvidia.com/gpu";
    // Beyond 64 bits: one card-hour is 3.6e21 acc.
    const BIG: i128 = 36_000_000_000_000_000_000_123;

    async fn appending_twice_writes_once(store: &SqlStore) {
        let e = vec![
            accrual("a", "batch/Job/ml/x", 0, 60_000, BIG),
            accrual("a", "batch/Job/ml/y", 0, 60_000, 7),
        ];
        assert_eq!(store.append_ledger(&e).await.unwrap(), 2);
        // A retry, and two replicas at once: nothing doubles.
        assert_eq!(store.append_ledger(&e).await.unwrap(), 0);
        let (a, b) = tokio::join!(store.append_ledger(&e), store.append_ledger(&e));
        assert_eq!(a.unwrap() + b.unwrap(), 0);
        assert_eq!(
            store
                .ledger_sum("a", KEY, &[Reason::Accrual], 0)
                .await
                .unwrap(),
            BIG + 7
        );
        let sel = Selection {
            from_ms: 0,
            to_ms: 60_000,
            ..Default::default()
        };
        let back = store.ledger_entries(&sel, 10).await.unwrap().unwrap();
        assert_eq!(back.len(), 2);
        assert!(back.contains(&e[0]) && back.contains(&e[1]), "{back:?}");
    }

    /// Rows stored with the hash alone (before migration 0017) get the
    /// lead `entry_id` now gives: the same entry appended again after the
    /// upgrade writes nothing, and a new one sorts by its start.
    async fn ids_stored_before_migration_0017_still_match(store: &SqlStore) {
        let old = vec![
            accrual(
                "a",
                "batch/Job/ml/x",
                1_767_225_600_000,
                1_767_225_660_000,
                5,
            ),
            accrual("a", "batch/Job/ml/y", 60_000, 120_000, 7),
        ];
        assert_eq!(store.append_ledger(&old).await.unwrap(), 2);
        // As the rows were before 0017: the hash alone.
        sqlx::query("UPDATE budget_ledger SET id = substr(id, 18)")
            .execute(&store.write)
            .await
            .unwrap();
        let migration = match store.backend {
            super::super::sql::Backend::Sqlite => {
                include_str!("../../../../migrations/sqlite/0017_ledger_ids_by_time.sql")
            }
            super::super::sql::Backend::Postgres => {
                include_str!("../../../../migrations/postgres/0017_ledger_ids_by_time.sql")
            }
        };
        sqlx::raw_sql(migration)
            .execute(&store.write)
            .await
            .unwrap();
        assert_eq!(store.append_ledger(&old).await.unwrap(), 0);
        let ids: Vec<String> = sqlx::query("SELECT id FROM budget_ledger ORDER BY id")
            .fetch_all(&store.write)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>(0))
            .collect();
        let mut want: Vec<String> = old.iter().map(entry_id).collect();
        want.sort();
        assert_eq!(ids, want);
        assert!(ids[0].starts_with("000000000000ea60-"), "{ids:?}");
        assert!(ids[1].starts_with("0000019b76daa800-"), "{ids:?}");
    }

    async fn windows_are_written_once(store: &SqlStore) {
        let w1 = vec![accrual("a", "w", 0, 100, 10)];
        assert_eq!(
            store.append_window("a", 0, 100, &w1).await.unwrap(),
            Appended::Written
        );
        // The same window again (a retried append) writes nothing; one
        // overlapping it (what a second controller could compute from a
        // stale start) is refused.
        assert_eq!(
            store.append_window("a", 0, 100, &w1).await.unwrap(),
            Appended::AlreadyWritten
        );
        let other = vec![accrual("a", "w", 50, 150, 15)];
        assert_eq!(
            store.append_window("a", 50, 150, &other).await.unwrap(),
            Appended::Overlaps {
                start_ms: 0,
                end_ms: 100
            }
        );
        // Out of order: [200, 300) before [100, 200) (a retried append).
        let w3 = vec![accrual("a", "w", 200, 300, 10)];
        let w2 = vec![accrual("a", "w", 100, 200, 10)];
        assert_eq!(
            store.append_window("a", 200, 300, &w3).await.unwrap(),
            Appended::Written
        );
        assert_eq!(
            store.append_window("a", 100, 200, &w2).await.unwrap(),
            Appended::Written
        );
        // Another quota's windows are its own.
        assert_eq!(
            store.append_window("b", 0, 100, &[]).await.unwrap(),
            Appended::Written
        );
        assert_eq!(
            store
                .ledger_sum("a", KEY, &[Reason::Accrual], 0)
                .await
                .unwrap(),
            30
        );
        // Two appends of the next window at once: it is written once.
        let w4 = vec![accrual("a", "w", 300, 400, 10)];
        let (x, y) = tokio::join!(
            store.append_window("a", 300, 400, &w4),
            store.append_window("a", 300, 400, &w4)
        );
        let written = [x, y]
            .into_iter()
            .filter(|r| matches!(r, Ok(Appended::Written)))
            .count();
        assert_eq!(written, 1);
        assert_eq!(
            store
                .ledger_sum("a", KEY, &[Reason::Accrual], 0)
                .await
                .unwrap(),
            40
        );
        assert_eq!(
            store.ledger_windows("a", 0).await.unwrap(),
            vec![(0, 100), (100, 200), (200, 300), (300, 400)]
        );
        // Records that ended before 250 go, but each quota's newest stays
        // (b's [0, 100) is b's only one).
        assert_eq!(store.forget_ledger_windows(250).await.unwrap(), 2);
        assert_eq!(store.ledger_windows("b", -1).await.unwrap(), vec![(0, 100)]);
    }

    async fn reads_are_bounded_and_filtered(store: &SqlStore) {
        let mut all = Vec::new();
        for i in 0..30 {
            all.push(accrual(
                if i % 2 == 0 { "a" } else { "b" },
                "w",
                i * 10,
                i * 10 + 10,
                1,
            ));
        }
        let mut carry = accrual("a", "", 50, 50, -3);
        carry.reason = Reason::Carry;
        carry.workload.clear();
        all.push(carry);
        store.append_ledger(&all).await.unwrap();
        let sel = Selection {
            from_ms: 0,
            to_ms: 1000,
            ..Default::default()
        };
        assert_eq!(
            store.ledger_entries(&sel, 31).await.unwrap().unwrap().len(),
            31
        );
        assert!(store.ledger_entries(&sel, 30).await.unwrap().is_err());
        // [45, 55): the entries [40,50) and [50,60) reach into it, and the
        // instant at 50; [30,40) ends before it.
        let sel = Selection {
            from_ms: 45,
            to_ms: 55,
            ..Default::default()
        };
        assert_eq!(
            store
                .ledger_entries(&sel, 100)
                .await
                .unwrap()
                .unwrap()
                .len(),
            3
        );
        let names = vec!["a".to_string()];
        let sel = Selection {
            from_ms: 0,
            to_ms: 1000,
            quotas: Some(names.as_slice()),
            key: Some(KEY),
        };
        assert_eq!(
            store
                .ledger_entries(&sel, 100)
                .await
                .unwrap()
                .unwrap()
                .len(),
            16
        );
        let sel = Selection {
            key: Some("cash/requests.cpu"),
            ..sel
        };
        assert!(store
            .ledger_entries(&sel, 100)
            .await
            .unwrap()
            .unwrap()
            .is_empty());
    }

    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;

    /// Three days of 61-second windows (so windows cross hours and days)
    /// for two quotas and three workloads, amounts beyond 64 bits, a
    /// refund with a note, a top-up and a carry.
    fn three_days() -> Vec<Entry> {
        let mut out = Vec::new();
        let models = ["A100", "H100", "T4"];
        let mut t = T0 - 30_000;
        let mut i: i128 = 0;
        while t < T0 + 3 * DAY {
            for (w, model) in models.iter().enumerate() {
                let q = if w == 2 { "b" } else { "a" };
                let mut e = accrual(
                    q,
                    &format!("batch/Job/ml/w{w}"),
                    t,
                    t + 61_000,
                    BIG + i * 7919,
                );
                e.model = Some(model.to_string());
                e.user = (w != 1).then(|| format!("user{w}"));
                out.push(e);
                i += 1;
            }
            t += 61_000;
        }
        let mut refund = accrual("a", "batch/Job/ml/w0", T0 + DAY, T0 + DAY + HOUR, -BIG);
        refund.reason = Reason::Refund;
        refund.note = "reclaimed".into();
        out.push(refund);
        let mut top = accrual("b", "", T0 + 2 * DAY + 5, T0 + 2 * DAY + 5, 12_345);
        top.reason = Reason::TopUp;
        top.workload.clear();
        out.push(top);
        out
    }

    fn spec_of(
        by: Dimension,
        bucket: Bucket,
        from: i64,
        to: i64,
        reasons: &[Reason],
    ) -> ReportSpec {
        ReportSpec {
            from_ms: from,
            to_ms: to,
            by,
            bucket,
            utc_offset_minutes: 0,
            subtree: None,
            key: None,
            reasons: reasons.to_vec(),
        }
    }

    /// The reports the tests compare: every dimension, several buckets,
    /// ranges on whole hours and days (what a rolled ledger answers).
    fn specs() -> Vec<ReportSpec> {
        use quota::object::period::Weekday;
        let all = [
            Reason::Accrual,
            Reason::Refund,
            Reason::TopUp,
            Reason::Carry,
        ];
        let spend = [Reason::Accrual, Reason::Refund];
        let mut out = Vec::new();
        for by in [
            Dimension::Quota,
            Dimension::Workload,
            Dimension::Namespace,
            Dimension::Model,
            Dimension::Qos,
            Dimension::User,
            Dimension::Key,
            Dimension::Reason,
        ] {
            out.push(spec_of(by, Bucket::Day, T0 - DAY, T0 + 4 * DAY, &all));
        }
        out.push(spec_of(
            Dimension::Model,
            Bucket::None,
            T0 + DAY,
            T0 + 3 * DAY + 7 * HOUR,
            &spend,
        ));
        out.push(spec_of(
            Dimension::Quota,
            Bucket::Month,
            T0 - DAY,
            T0 + 40 * DAY,
            &spend,
        ));
        out.push(spec_of(
            Dimension::User,
            Bucket::Week {
                starts_on: Weekday::Thursday,
            },
            T0,
            T0 + 3 * DAY,
            &spend,
        ));
        let mut sub = spec_of(Dimension::Child, Bucket::Day, T0, T0 + 2 * DAY, &spend);
        sub.subtree = Some("root".into());
        sub.key = Some(KEY.into());
        out.push(sub);
        out
    }

    fn parents() -> std::collections::BTreeMap<String, String> {
        [("root", ""), ("a", "root"), ("b", "root")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    async fn summed(store: &SqlStore, spec: &ReportSpec) -> report::Report {
        let names: Vec<String> = ["root", "a", "b"].iter().map(|s| s.to_string()).collect();
        let quotas = spec.subtree.as_ref().map(|_| names.as_slice());
        let agg = store
            .ledger_aggregate(spec, quotas, 1_000_000)
            .await
            .unwrap()
            .unwrap();
        report::report(&agg.entries, spec, &parents()).unwrap()
    }

    async fn sums_in_sql_equal_the_entries(store: &SqlStore) {
        let entries = three_days();
        store.append_ledger(&entries).await.unwrap();
        for spec in specs() {
            let direct = report::report(&entries, &spec, &parents()).unwrap();
            assert_eq!(summed(store, &spec).await, direct, "{spec:?}");
        }
        // Also a range that starts and ends mid-minute (not rolled yet).
        let odd = spec_of(
            Dimension::Workload,
            Bucket::Day,
            T0 + 12_345,
            T0 + DAY + 777,
            &[Reason::Accrual],
        );
        assert_eq!(
            summed(store, &odd).await,
            report::report(&entries, &odd, &parents()).unwrap()
        );
    }

    /// A rolled cell is summed into in place; one whose sum comes to
    /// nothing (an entry appended late into an hour already rolled, which
    /// cancels it) is removed, not kept at its old amount.
    async fn a_rolled_cell_that_comes_to_nothing_goes(store: &SqlStore) {
        const MIN: i64 = 60_000;
        const HOUR: i64 = 3_600_000;
        let policy = ledger_rollup::Policy {
            hourly_after_ms: HOUR,
            daily_after_ms: 400 * DAY,
            daily_utc_offset_minutes: 0,
        };
        let w = "batch/Job/ml/x";
        store
            .append_ledger(&[accrual("a", w, T0, T0 + MIN, 5)])
            .await
            .unwrap();
        let first = store.roll_up_ledger(&policy, T0 + 2 * HOUR).await.unwrap();
        assert_eq!((first.read, first.written), (1, 1));
        let total = |s: &SqlStore| {
            let s = s.read.clone();
            async move {
                let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM budget_ledger")
                    .fetch_one(&s)
                    .await
                    .unwrap()
                    .try_get("n")
                    .unwrap();
                n
            }
        };
        assert_eq!(total(store).await, 1);
        // Late, into the rolled hour: it cancels the cell.
        store
            .append_ledger(&[accrual("a", w, T0 + 10 * MIN, T0 + 11 * MIN, -5)])
            .await
            .unwrap();
        let second = store.roll_up_ledger(&policy, T0 + 3 * HOUR).await.unwrap();
        assert_eq!(second.read, 1);
        assert_eq!(
            total(store).await,
            0,
            "the cell that came to nothing is gone"
        );
        assert_eq!(
            store
                .ledger_sum("a", KEY, &[Reason::Accrual], 0)
                .await
                .unwrap(),
            0
        );
        // A cell summed into in place keeps its sum: +7 late, then +2.
        for (at, amount) in [(20, 7), (30, 2)] {
            store
                .append_ledger(&[accrual("a", w, T0 + at * MIN, T0 + (at + 1) * MIN, amount)])
                .await
                .unwrap();
            store
                .roll_up_ledger(&policy, T0 + (4 + at) * HOUR)
                .await
                .unwrap();
        }
        assert_eq!(total(store).await, 1);
        assert_eq!(
            store
                .ledger_sum("a", KEY, &[Reason::Accrual], 0)
                .await
                .unwrap(),
            9
        );
    }

    async fn rolling_up_keeps_every_report(store: &SqlStore) {
        let entries = three_days();
        store.append_ledger(&entries).await.unwrap();
        let mut before = Vec::new();
        for spec in specs() {
            before.push(summed(store, &spec).await);
        }
        let rows = |s: &SqlStore| {
            let s = s.read.clone();
            async move {
                sqlx::query("SELECT COUNT(*) AS n FROM budget_ledger")
                    .fetch_one(&s)
                    .await
                    .unwrap()
                    .try_get::<i64, _>("n")
                    .unwrap()
            }
        };
        assert_eq!(rows(store).await as usize, entries.len());
        // Hours after one day, days after two: at T0 + 4 days the first
        // two days are daily rows, the third hourly.
        let policy = ledger_rollup::Policy {
            hourly_after_ms: DAY,
            daily_after_ms: 2 * DAY,
            daily_utc_offset_minutes: 0,
        };
        let now = T0 + 4 * DAY;
        // Two replicas at once: each row is rolled by one of them.
        let (x, y) = tokio::join!(
            store.roll_up_ledger(&policy, now),
            store.roll_up_ledger(&policy, now)
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x.read + y.read >= entries.len() as u64 - 5, "{x:?} {y:?}");
        let after = rows(store).await as usize;
        // 2 days × 3 tuples (+ the cells of the first half minute), 24 hours
        // × 3 tuples, the refund, the top-up.
        assert!(after < 100, "{after} rows after the roll-up");
        for (spec, b) in specs().iter().zip(&before) {
            assert_eq!(&summed(store, spec).await, b, "{spec:?}");
        }
        // Again: nothing left to roll, nothing changes.
        let again = store.roll_up_ledger(&policy, now).await.unwrap();
        assert_eq!(again.read, 0);
        assert_eq!(rows(store).await as usize, after);
        // Later still, the hourly rows become days; sums stay.
        store.roll_up_ledger(&policy, now + DAY).await.unwrap();
        assert!((rows(store).await as usize) < after);
        for (spec, b) in specs().iter().zip(&before) {
            assert_eq!(&summed(store, spec).await, b, "{spec:?}");
        }
        assert_eq!(
            store
                .ledger_sum("a", KEY, &[Reason::Accrual, Reason::Refund], 0)
                .await
                .unwrap(),
            entries
                .iter()
                .filter(|e| e.quota == "a" && e.reason.is_spending())
                .map(|e| e.amount)
                .sum::<i128>()
        );
    }

    async fn reports_finer_than_the_rolled_grid_are_refused(store: &SqlStore) {
        store.append_ledger(&three_days()).await.unwrap();
        let policy = ledger_rollup::Policy {
            hourly_after_ms: DAY,
            daily_after_ms: 2 * DAY,
            daily_utc_offset_minutes: 0,
        };
        store.roll_up_ledger(&policy, T0 + 4 * DAY).await.unwrap();
        let mut india = spec_of(
            Dimension::Model,
            Bucket::Day,
            T0,
            T0 + 3 * DAY,
            &[Reason::Accrual],
        );
        india.utc_offset_minutes = 330;
        match store.ledger_aggregate(&india, None, 1000).await.unwrap() {
            Err(Refused::TooFine(e)) => assert_eq!(e.unit, "day"),
            other => panic!("{other:?}"),
        }
        let half_hour = spec_of(
            Dimension::Model,
            Bucket::None,
            T0 + 2 * DAY + 1_800_000,
            T0 + 3 * DAY,
            &[Reason::Accrual],
        );
        match store
            .ledger_aggregate(&half_hour, None, 1000)
            .await
            .unwrap()
        {
            Err(Refused::TooFine(e)) => assert_eq!(e.unit, "hour"),
            other => panic!("{other:?}"),
        }
        // After the rolled rows any cut is exact.
        let late = spec_of(
            Dimension::Model,
            Bucket::None,
            T0 + 3 * DAY + 1_234,
            T0 + 4 * DAY,
            &[Reason::Accrual],
        );
        assert!(store
            .ledger_aggregate(&late, None, 1000)
            .await
            .unwrap()
            .is_ok());
    }
}
