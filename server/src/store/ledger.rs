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

use super::history::{params_list, qos_text, values_list, Params};
use super::sql::SqlStore;
use super::StoreError;
use quota::budget::report::{self, Bucket, Dimension, ReportSpec};
use quota::budget::rollup;
use quota::object::budgets::{Entry, Reason};
use quota::usage::QosClass;
use sqlx::{Any, Row, Transaction};

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
    }
}

fn reason_from_text(s: &str) -> Result<Reason, StoreError> {
    Ok(match s {
        "accrual" => Reason::Accrual,
        "refund" => Reason::Refund,
        "topUp" => Reason::TopUp,
        "carry" => Reason::Carry,
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
/// append dirties a few of its pages, not one per entry (with the hash
/// alone the ledger benchmark wrote half as fast; migration 0017
/// gave stored ids the same lead).
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
    if rollup::rollable(e) {
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

const INSERT_COLUMNS: &str = "id, quota, key, workload, namespace, model, qos, username, \
     start_ms, end_ms, amount, reason, note, amount_hi, amount_mid, amount_lo, rollup";

/// Inserts `entries` in `tx`; an entry already stored is left as it is.
pub(super) async fn insert(
    tx: &mut Transaction<'_, Any>,
    entries: &[Entry],
) -> Result<u64, StoreError> {
    insert_at(tx, entries, None).await
}

/// `insert` for the entries a status write accrued, in that write's
/// transaction but under a savepoint of its own: entries the database
/// refuses are logged and left out, and the status write they ride on is
/// committed all the same. A quota whose every write failed because of one
/// entry (a username holding NUL, which PostgreSQL stores in no text) could
/// otherwise never be written again: not charged, not released, not
/// repaired. Strings are scrubbed first (`quota::text::scrub`), so such an
/// entry is kept, its bad characters replaced by U+FFFD.
pub(super) async fn insert_beside(
    tx: &mut Transaction<'_, Any>,
    quota: &str,
    entries: &[Entry],
) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut savepoint = sqlx::Acquire::begin(&mut *tx).await?;
    match insert(&mut savepoint, entries).await {
        Ok(_) => savepoint.commit().await?,
        Err(e) => {
            savepoint.rollback().await?;
            tracing::error!(quota = %quota.escape_debug(), entries = entries.len(), error = %e,
                "budget ledger entries not written; the status write goes on without them");
        }
    }
    Ok(())
}

/// An entry's strings as the ledger may hold them (`quota::text::scrub`),
/// or None when they already are.
fn scrubbed(e: &Entry) -> Option<Entry> {
    use quota::text::{hostile_char, scrub};
    let strings = [&e.quota, &e.key, &e.workload, &e.namespace, &e.note];
    let optional = [e.model.as_deref(), e.user.as_deref()];
    let hostile = strings.iter().any(|s| hostile_char(s).is_some())
        || optional.iter().flatten().any(|s| hostile_char(s).is_some());
    hostile.then(|| {
        let clean = |s: &str| scrub(s).into_owned();
        Entry {
            quota: clean(&e.quota),
            key: clean(&e.key),
            workload: clean(&e.workload),
            namespace: clean(&e.namespace),
            model: e.model.as_deref().map(clean),
            user: e.user.as_deref().map(clean),
            note: clean(&e.note),
            ..e.clone()
        }
    })
}

/// Inserts `entries` as written (`level` None: an entry already stored is
/// left alone) or as rolled rows of `level` (replacing the stored row of
/// the same cell: the caller has added it in).
async fn insert_at(
    tx: &mut Transaction<'_, Any>,
    entries: &[Entry],
    level: Option<i64>,
) -> Result<u64, StoreError> {
    let mut written = 0;
    let conflict = match level {
        None => "DO NOTHING",
        Some(_) => {
            "DO UPDATE SET amount = excluded.amount, amount_hi = excluded.amount_hi, \
             amount_mid = excluded.amount_mid, amount_lo = excluded.amount_lo"
        }
    };
    let clean: Vec<Entry>;
    let entries = if entries.iter().any(|e| scrubbed(e).is_some()) {
        clean = entries
            .iter()
            .map(|e| scrubbed(e).unwrap_or_else(|| e.clone()))
            .collect();
        &clean[..]
    } else {
        entries
    };
    for chunk in entries.chunks(BATCH) {
        let sql = format!(
            "INSERT INTO budget_ledger ({INSERT_COLUMNS}) VALUES {} ON CONFLICT (id) {conflict}",
            values_list(Params::of(tx), chunk.len(), 17)
        );
        let mut q = sqlx::query(&sql);
        for e in chunk {
            let (hi, mid, lo) = limbs(e.amount)?;
            let (id, lvl) = match level {
                None => (entry_id(e), written_level(e)),
                Some(l) => (rolled_id(e, l), l),
            };
            q = q
                .bind(id)
                .bind(e.quota.as_str())
                .bind(e.key.as_str())
                .bind(e.workload.as_str())
                .bind(e.namespace.as_str())
                .bind(e.model.as_deref())
                .bind(e.qos.map(qos_text))
                .bind(e.user.as_deref())
                .bind(e.start_ms)
                .bind(e.end_ms)
                .bind(e.amount.to_string())
                .bind(reason_text(e.reason))
                .bind(e.note.as_str())
                .bind(hi)
                .bind(mid)
                .bind(lo)
                .bind(lvl);
        }
        written += q.execute(&mut **tx).await?.rows_affected();
    }
    Ok(written)
}

/// How `append_window` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// The window's entries are in.
    Written,
    /// This window (same quota and start) was written before: nothing
    /// written again.
    AlreadyWritten,
    /// The window overlaps another stored window of the quota: refused,
    /// nothing written (a confirmed status window never overlaps another).
    Overlaps { start_ms: i64, end_ms: i64 },
}

/// A read that matched more entries than it may return.
#[derive(Debug, thiserror::Error)]
#[error("the range holds more than {limit} ledger entries: narrow it (a shorter range, a subtree or a key)")]
pub struct TooMany {
    pub limit: usize,
}

/// What a ledger read selects.
#[derive(Clone, Debug, Default)]
pub struct Selection<'a> {
    pub from_ms: i64,
    pub to_ms: i64,
    /// Only these quotas (None: all).
    pub quotas: Option<&'a [String]>,
    pub key: Option<&'a str>,
}

impl SqlStore {
    /// Appends entries (refunds, top-ups, anything not written with a
    /// status) in one transaction; entries already stored are left alone,
    /// so appending the same entries twice writes them once. Returns how
    /// many were new.
    pub async fn append_ledger(&self, entries: &[Entry]) -> Result<u64, StoreError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let mut tx = self.write.begin().await?;
        let n = insert(&mut tx, entries).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// Cluster mode: the entries of `quota`'s accrual window
    /// `[from_ms, to_ms)`, appended after the status write that accrued
    /// it, with the window itself, in one transaction. A window already
    /// stored (same start) is not written again; one overlapping another
    /// stored window is refused. Windows may arrive out of order (a
    /// retried append after a later one). Carry entries ride along.
    pub async fn append_window(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
        entries: &[Entry],
    ) -> Result<Appended, StoreError> {
        let mut tx = self.write.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO budget_ledger_windows (quota, start_ms, end_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (quota, start_ms) DO NOTHING",
        )
        .bind(quota)
        .bind(from_ms)
        .bind(to_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            return Ok(Appended::AlreadyWritten);
        }
        let overlap = sqlx::query(
            "SELECT start_ms, end_ms FROM budget_ledger_windows \
             WHERE quota = $1 AND start_ms <> $2 AND start_ms < $3 AND end_ms > $2 LIMIT 1",
        )
        .bind(quota)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(r) = overlap {
            return Ok(Appended::Overlaps {
                start_ms: r.try_get("start_ms")?,
                end_ms: r.try_get("end_ms")?,
            });
        }
        insert(&mut tx, entries).await?;
        tx.commit().await?;
        Ok(Appended::Written)
    }

    /// `quota`'s windows in the ledger that end after `from_ms`, by start
    /// (cluster mode; for reconciling a status against its ledger).
    pub async fn ledger_windows(
        &self,
        quota: &str,
        from_ms: i64,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT start_ms, end_ms FROM budget_ledger_windows \
             WHERE quota = $1 AND end_ms > $2 ORDER BY start_ms LIMIT 10000",
        )
        .bind(quota)
        .bind(from_ms)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("start_ms")?, r.try_get("end_ms")?)))
            .collect()
    }

    /// Drops window records that ended before `before_ms`: they only
    /// guard against a window appended twice, which happens within
    /// minutes — except each quota's newest, which its status's outbox
    /// may append again whenever the controller restarts. The entries stay.
    pub async fn forget_ledger_windows(&self, before_ms: i64) -> Result<u64, StoreError> {
        Ok(
            sqlx::query(
                "DELETE FROM budget_ledger_windows WHERE end_ms < $1 AND EXISTS \
                 (SELECT 1 FROM budget_ledger_windows n WHERE n.quota = budget_ledger_windows.quota \
                 AND n.start_ms > budget_ledger_windows.start_ms)",
            )
            .bind(before_ms)
                .execute(&self.write)
                .await?
                .rows_affected(),
        )
    }

    /// The entries that reach into `[from, to)` (an entry `[s, e)` with
    /// `s < to` and `e > from`, or an instant at `from ≤ s < to`), at
    /// most `limit`: more is `TooMany`, so no caller holds an unbounded
    /// read. Ordered by start, then id.
    pub async fn ledger_entries(
        &self,
        sel: &Selection<'_>,
        limit: usize,
    ) -> Result<Result<Vec<Entry>, TooMany>, StoreError> {
        let mut out = Vec::new();
        let chunks: Vec<Option<&[String]>> = match sel.quotas {
            None => vec![None],
            Some([]) => return Ok(Ok(Vec::new())),
            Some(names) => names.chunks(NAMES_PER_QUERY).map(Some).collect(),
        };
        for names in chunks {
            let mut sql = String::from(
                "SELECT quota, key, workload, namespace, model, qos, username, start_ms, end_ms, \
                 amount, reason, note FROM budget_ledger \
                 WHERE start_ms < $1 AND (end_ms > $2 OR start_ms >= $2)",
            );
            let mut next = 3;
            if sel.key.is_some() {
                sql.push_str(&format!(" AND key = ${next}"));
                next += 1;
            }
            if let Some(n) = names {
                sql.push_str(&format!(" AND quota IN ({})", params_list(next, n.len())));
                next += n.len();
            }
            let room = limit + 1 - out.len();
            sql.push_str(&format!(" ORDER BY start_ms, id LIMIT ${next}"));
            let mut q = sqlx::query(&sql).bind(sel.to_ms).bind(sel.from_ms);
            if let Some(k) = sel.key {
                q = q.bind(k);
            }
            for name in names.into_iter().flatten() {
                q = q.bind(name.as_str());
            }
            let rows = q
                .bind(room.min(i64::MAX as usize) as i64)
                .fetch_all(&self.read)
                .await?;
            for r in &rows {
                out.push(entry_of(r)?);
            }
            if out.len() > limit {
                return Ok(Err(TooMany { limit }));
            }
        }
        out.sort_by(|a, b| (a.start_ms, &a.quota).cmp(&(b.start_ms, &b.quota)));
        Ok(Ok(out))
    }

    /// The exact sum of `quota`'s `key` entries of `reasons` starting at
    /// or after `from_ms`, in acc (for reconciling a status against its
    /// ledger).
    pub async fn ledger_sum(
        &self,
        quota: &str,
        key: &str,
        reasons: &[Reason],
        from_ms: i64,
    ) -> Result<i128, StoreError> {
        let rows = sqlx::query(
            "SELECT amount, reason FROM budget_ledger WHERE quota = $1 AND key = $2 AND start_ms >= $3",
        )
        .bind(quota)
        .bind(key)
        .bind(from_ms)
        .fetch_all(&self.read)
        .await?;
        let mut sum = 0i128;
        for r in &rows {
            let reason = reason_from_text(&r.try_get::<String, _>("reason")?)?;
            if reasons.contains(&reason) {
                sum = sum.saturating_add(amount_of(&r.try_get::<String, _>("amount")?)?);
            }
        }
        Ok(sum)
    }
}

/// What one roll-up pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rolled {
    /// Rows taken in (as written, or hourly rows rolled into days).
    pub read: u64,
    /// Rolled rows written (a cell written again by a later chunk counts again).
    pub written: u64,
    pub chunks: u64,
}

/// Rows one roll-up transaction takes at most: a chunk holds the writer
/// for milliseconds, so admissions never wait behind a roll-up.
pub const ROLL_CHUNK: i64 = 2_000;

/// Why an aggregated read gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    TooMany(#[from] TooMany),
    #[error(transparent)]
    TooFine(#[from] rollup::TooFine),
}

/// A report's ledger, summed in SQL: entries that stand for the ledger's
/// rows as far as `report::report` can tell (each group of rows that lies
/// within one bucket as one instant holding its sum; each row that
/// crosses a bucket or the range's edge as itself).
#[derive(Clone, Debug, Default)]
pub struct Aggregated {
    pub entries: Vec<Entry>,
    /// Ledger rows summed.
    pub rows: u64,
    /// Of them, rows that cross an edge of the range (shared by time).
    pub straddling: u64,
}

const ENTRY_COLUMNS: &str = "quota, key, workload, namespace, model, qos, username, start_ms, \
     end_ms, amount, reason, note";

/// Quota names per `IN (…)` list of an aggregated read.
const NAMES_PER_SUM: usize = 10_000;

impl SqlStore {
    /// Sets how old ledger entries are rolled up (checked first).
    pub fn set_ledger_rollup(&self, p: rollup::Policy) -> Result<(), rollup::PolicyError> {
        p.validate()?;
        *self
            .ledger_rollup
            .write()
            .unwrap_or_else(|e| e.into_inner()) = p;
        Ok(())
    }

    pub fn ledger_rollup(&self) -> rollup::Policy {
        *self.ledger_rollup.read().unwrap_or_else(|e| e.into_inner())
    }

    /// How far the ledger is rolled up (`budget_ledger_rollup`).
    async fn stored_in<'c, E>(
        &self,
        ex: E,
        policy_offset: i32,
    ) -> Result<rollup::Stored, StoreError>
    where
        E: sqlx::Executor<'c, Database = Any>,
    {
        let rows = sqlx::query("SELECT level, until_ms FROM budget_ledger_rollup")
            .fetch_all(ex)
            .await?;
        let mut out = rollup::Stored {
            hourly_until_ms: i64::MIN,
            daily_until_ms: i64::MIN,
            daily_utc_offset_minutes: policy_offset,
        };
        for r in &rows {
            let until: i64 = r.try_get("until_ms")?;
            match r.try_get::<i64, _>("level")? {
                1 => out.hourly_until_ms = until,
                2 => out.daily_until_ms = until,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Rolls the ledger up as `policy` says at `now_ms`: rows as written
    /// into hours, rows (and hours) older still into days. Chunks of
    /// `ROLL_CHUNK` rows, each its own transaction: the rows are taken
    /// out (`DELETE … RETURNING`, so of two replicas only one gets a row)
    /// and their cells' rolled rows, summed with them, put back. Every
    /// chunk first takes the lock row of `budget_ledger_rollup`, so two
    /// replicas take turns. The level's mark moves first, so a report
    /// made meanwhile already refuses to cut inside cells being rolled.
    pub async fn roll_up_ledger(
        &self,
        policy: &rollup::Policy,
        now_ms: i64,
    ) -> Result<Rolled, StoreError> {
        let (hourly, daily) = policy.cutoffs(now_ms);
        let mut out = Rolled::default();
        self.roll_level(1, &[0], rollup::Grid::hours(), hourly, &mut out)
            .await?;
        let days = rollup::Grid::days(policy.daily_utc_offset_minutes);
        self.roll_level(2, &[0, 1], days, daily, &mut out).await?;
        Ok(out)
    }

    async fn roll_level(
        &self,
        level: i64,
        from_levels: &[i64],
        grid: rollup::Grid,
        until: i64,
        out: &mut Rolled,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE budget_ledger_rollup SET until_ms = $1 WHERE level = $2 AND until_ms < $1",
        )
        .bind(until)
        .bind(level)
        .execute(&self.write)
        .await?;
        for &src in from_levels {
            loop {
                let mut tx = self.write.begin().await?;
                sqlx::query("UPDATE budget_ledger_rollup SET until_ms = until_ms WHERE level = 0")
                    .execute(&mut *tx)
                    .await?;
                let taken = sqlx::query(&format!(
                    "DELETE FROM budget_ledger WHERE id IN (SELECT id FROM budget_ledger \
                     WHERE rollup = $1 AND start_ms < $2 AND end_ms <= $2 ORDER BY start_ms LIMIT $3) \
                     RETURNING {ENTRY_COLUMNS}"
                ))
                .bind(src)
                .bind(until)
                .bind(ROLL_CHUNK)
                .fetch_all(&mut *tx)
                .await?;
                if taken.is_empty() {
                    tx.rollback().await?;
                    break;
                }
                let mut entries = taken.iter().map(entry_of).collect::<Result<Vec<_>, _>>()?;
                // The cells' rolled rows so far, read to be summed in and
                // then overwritten in place (an upsert changes no indexed
                // column, so of a row's six b-trees only the table's is
                // touched): a cell is summed into once per chunk that holds
                // its entries, about twenty times an hour at this chunk
                // size in the benchmark, and was deleted and
                // inserted again each time (README, ledger benchmark).
                let ids: Vec<String> = rollup::roll_up(&entries, grid)
                    .iter()
                    .map(|e| rolled_id(e, level))
                    .collect();
                let mut stored: Vec<String> = Vec::new();
                for chunk in ids.chunks(NAMES_PER_QUERY) {
                    let sql = format!(
                        "SELECT id, {ENTRY_COLUMNS} FROM budget_ledger WHERE id IN ({})",
                        Params::of(&tx).list(chunk.len())
                    );
                    let rows = chunk
                        .iter()
                        .fold(sqlx::query(&sql), |q, id| q.bind(id.as_str()))
                        .fetch_all(&mut *tx)
                        .await?;
                    for r in &rows {
                        stored.push(r.try_get("id")?);
                        entries.push(entry_of(r)?);
                    }
                }
                let merged = rollup::roll_up(&entries, grid);
                // A stored cell whose sum came to nothing is not in
                // `merged`: it goes.
                let kept: std::collections::HashSet<String> =
                    merged.iter().map(|e| rolled_id(e, level)).collect();
                let gone: Vec<&String> = stored.iter().filter(|id| !kept.contains(*id)).collect();
                for chunk in gone.chunks(NAMES_PER_QUERY) {
                    let sql = format!(
                        "DELETE FROM budget_ledger WHERE id IN ({})",
                        Params::of(&tx).list(chunk.len())
                    );
                    chunk
                        .iter()
                        .fold(sqlx::query(&sql), |q, id| q.bind(id.as_str()))
                        .execute(&mut *tx)
                        .await?;
                }
                insert_at(&mut tx, &merged, Some(level)).await?;
                tx.commit().await?;
                out.read += taken.len() as u64;
                out.written += merged.len() as u64;
                out.chunks += 1;
                if (taken.len() as i64) < ROLL_CHUNK {
                    break;
                }
            }
        }
        Ok(())
    }

    /// How far the ledger is rolled up now, for fitting a report to it
    /// (`rollup::snap`) before reading (`ledger_aggregate` checks again in
    /// its own snapshot), and when its first entry starts (`None`: empty).
    pub async fn ledger_extent(&self) -> Result<(rollup::Stored, Option<i64>), StoreError> {
        let offset = self.ledger_rollup().daily_utc_offset_minutes;
        let stored = self.stored_in(&self.read, offset).await?;
        let first: Option<i64> = sqlx::query("SELECT MIN(start_ms) AS s FROM budget_ledger")
            .fetch_one(&self.read)
            .await?
            .try_get("s")?;
        Ok((stored, first))
    }

    /// The ledger rows `spec` reports on (its range, key and reasons;
    /// `quotas`: only these), summed in SQL per dimension, key and bucket,
    /// as `Aggregated` entries: `report::report` over them gives exactly
    /// what it gives over the rows. Refused when the report would cut
    /// inside a rolled cell (`rollup::check`, read in the same snapshot
    /// as the rows) or would sum more than `limit` groups.
    pub async fn ledger_aggregate(
        &self,
        spec: &ReportSpec,
        quotas: Option<&[String]>,
        limit: usize,
    ) -> Result<Result<Aggregated, Refused>, StoreError> {
        Ok(self
            .ledger_aggregate_with(spec, quotas, limit, &[])
            .await?
            .map(|(agg, _)| agg))
    }

    /// `ledger_aggregate`, and the quotas `also` (with their charges) read
    /// in the same snapshot as the rows: what each had written by then is
    /// in the rows, and what it spent since is not (a standalone report
    /// adds that, `Working::unwritten`), by construction.
    pub async fn ledger_aggregate_with(
        &self,
        spec: &ReportSpec,
        quotas: Option<&[String]>,
        limit: usize,
        also: &[String],
    ) -> Result<Result<(Aggregated, Vec<super::Stored>), Refused>, StoreError> {
        let mut out = Aggregated::default();
        let chunks: Vec<Option<&[String]>> = match quotas {
            None => vec![None],
            Some([]) => return Ok(Ok((out, Vec::new()))),
            Some(names) => names.chunks(NAMES_PER_SUM).map(Some).collect(),
        };
        // One snapshot for the marks, the quotas and every read.
        let mut tx = self.read.begin().await?;
        if self.backend == super::sql::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        let offset = self.ledger_rollup().daily_utc_offset_minutes;
        let stored = self.stored_in(&mut *tx, offset).await?;
        if let Err(e) = rollup::check(spec, &stored) {
            return Ok(Err(e.into()));
        }
        // (SQLite: a read transaction's snapshot starts at its first read,
        // the marks' above, so the quotas and the rows are one moment's.)
        let copies = match also.is_empty() {
            true => Vec::new(),
            false => super::sql::quotas_named(self.backend, &mut tx, also).await?,
        };
        let (dim, by_quota) = match spec.by {
            Dimension::Quota | Dimension::Child => ("''", true),
            Dimension::Workload => ("workload", false),
            Dimension::Namespace => ("namespace", false),
            Dimension::Model => ("model", false),
            Dimension::Qos => ("qos", false),
            Dimension::User => ("username", false),
            Dimension::Key => ("''", false),
            Dimension::Reason => ("reason", false),
        };
        let (cell, next) = bucket_sql(spec);
        let reasons: Vec<&str> = spec.reasons.iter().map(|r| reason_text(*r)).collect();
        if reasons.is_empty() {
            return Ok(Ok((out, copies)));
        }
        for names in chunks {
            let mut sql = format!(
                "SELECT {dim} AS g, {q} AS q, key, {cell} AS cell, \
                 CASE WHEN end_ms > {to} OR end_ms > {next} THEN id ELSE '' END AS x, \
                 MIN(start_ms) AS s, MAX(end_ms) AS e, CAST(SUM(amount_hi) AS BIGINT) AS hi, \
                 CAST(SUM(amount_mid) AS BIGINT) AS mid, CAST(SUM(amount_lo) AS BIGINT) AS lo, \
                 COUNT(*) AS n FROM budget_ledger WHERE start_ms >= {from} AND start_ms < {to} \
                 AND reason IN ({})",
                params_list(1, reasons.len()),
                q = if by_quota { "quota" } else { "''" },
                from = spec.from_ms,
                to = spec.to_ms,
            );
            let mut next_param = reasons.len() + 1;
            if spec.key.is_some() {
                sql.push_str(&format!(" AND key = ${next_param}"));
                next_param += 1;
            }
            if let Some(n) = names {
                sql.push_str(&format!(
                    " AND quota IN ({})",
                    params_list(next_param, n.len())
                ));
            }
            sql.push_str(&format!(
                " GROUP BY 1, 2, 3, 4, 5 LIMIT {}",
                limit as i64 + 1
            ));
            let mut q = sqlx::query(&sql);
            for r in &reasons {
                q = q.bind(*r);
            }
            if let Some(k) = spec.key.as_deref() {
                q = q.bind(k);
            }
            for name in names.into_iter().flatten() {
                q = q.bind(name.as_str());
            }
            let rows = q.fetch_all(&mut *tx).await?;
            for r in &rows {
                let x: String = r.try_get("x")?;
                let n: i64 = r.try_get("n")?;
                let (s, e): (i64, i64) = (r.try_get("s")?, r.try_get("e")?);
                let crossing = !x.is_empty();
                let mut entry = Entry {
                    quota: {
                        let q: String = r.try_get("q")?;
                        if q.is_empty() {
                            spec.subtree.clone().unwrap_or_default()
                        } else {
                            q
                        }
                    },
                    key: r.try_get("key")?,
                    workload: String::new(),
                    namespace: String::new(),
                    model: None,
                    qos: None,
                    user: None,
                    start_ms: s,
                    end_ms: if crossing { e } else { s },
                    amount: from_limbs(r.try_get("hi")?, r.try_get("mid")?, r.try_get("lo")?),
                    reason: spec.reasons[0],
                    note: String::new(),
                };
                let g: Option<String> = if dim == "''" { None } else { r.try_get("g")? };
                match spec.by {
                    Dimension::Workload => entry.workload = g.unwrap_or_default(),
                    Dimension::Namespace => entry.namespace = g.unwrap_or_default(),
                    Dimension::Model => entry.model = g,
                    Dimension::Qos => entry.qos = g.map(|s| qos_from(&s)).transpose()?,
                    Dimension::User => entry.user = g,
                    Dimension::Reason => {
                        entry.reason = reason_from_text(g.as_deref().unwrap_or_default())?
                    }
                    _ => {}
                }
                out.rows += n as u64;
                if crossing && e > spec.to_ms {
                    out.straddling += 1;
                }
                out.entries.push(entry);
            }
            if out.entries.len() > limit {
                return Ok(Err(TooMany { limit }.into()));
            }
        }
        // Rows that start before the range and reach into it, as they are.
        let mut sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM budget_ledger WHERE start_ms < {from} AND end_ms > {from} \
             AND reason IN ({})",
            params_list(1, reasons.len()),
            from = spec.from_ms
        );
        if spec.key.is_some() {
            sql.push_str(&format!(" AND key = ${}", reasons.len() + 1));
        }
        sql.push_str(&format!(" LIMIT {}", limit as i64 + 1));
        let mut q = sqlx::query(&sql);
        for r in &reasons {
            q = q.bind(*r);
        }
        if let Some(k) = spec.key.as_deref() {
            q = q.bind(k);
        }
        let wanted: Option<std::collections::BTreeSet<&str>> =
            quotas.map(|n| n.iter().map(String::as_str).collect());
        for r in &q.fetch_all(&mut *tx).await? {
            let e = entry_of(r)?;
            if wanted
                .as_ref()
                .is_some_and(|w| !w.contains(e.quota.as_str()))
            {
                continue;
            }
            out.rows += 1;
            out.straddling += 1;
            out.entries.push(e);
        }
        tx.rollback().await?;
        if out.entries.len() > limit {
            return Ok(Err(TooMany { limit }.into()));
        }
        Ok(Ok((out, copies)))
    }
}

/// SQL for a row's bucket (any value unique per bucket) and the bucket's
/// end, from `start_ms`: arithmetic on the regular grids (days, weeks),
/// a `CASE` over the cuts otherwise (months: a dozen a year). Numbers are
/// ours, written as literals.
fn bucket_sql(spec: &ReportSpec) -> (String, String) {
    use quota::object::period::MS_PER_DAY;
    let step = match spec.bucket {
        Bucket::Day => Some(MS_PER_DAY),
        Bucket::Week { .. } => Some(7 * MS_PER_DAY),
        Bucket::None | Bucket::Month => None,
    };
    if let Some(step) = step {
        let anchor = report::bucket_start(spec, spec.from_ms);
        return (
            format!("(start_ms - {anchor}) / {step}"),
            format!("({anchor} + ((start_ms - {anchor}) / {step} + 1) * {step})"),
        );
    }
    let cuts = report::cuts(spec);
    if cuts.is_empty() {
        return ("0".into(), spec.to_ms.to_string());
    }
    let mut cell = String::from("CASE");
    let mut next = String::from("CASE");
    for (i, c) in cuts.iter().enumerate() {
        cell.push_str(&format!(" WHEN start_ms < {c} THEN {i}"));
        next.push_str(&format!(" WHEN start_ms < {c} THEN {c}"));
    }
    cell.push_str(&format!(" ELSE {} END", cuts.len()));
    next.push_str(&format!(" ELSE {} END", spec.to_ms));
    (cell, next)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testdb::on_both_databases;

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
                include_str!("../../../migrations/sqlite/0017_ledger_ids_by_time.sql")
            }
            super::super::sql::Backend::Postgres => {
                include_str!("../../../migrations/postgres/0017_ledger_ids_by_time.sql")
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
        let policy = rollup::Policy {
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
        let policy = rollup::Policy {
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
        let policy = rollup::Policy {
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
