//! The ledger rolled up as it ages: rows as written into hours, hours
//! into days, by the configured policy, a chunk per transaction.

use super::*;
use crate::store::sql::query::Params;
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::budget::ledger_rollup;
use sqlx::{Any, Row};

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

impl SqlStore {
    /// Sets how old ledger entries are rolled up (checked first).
    pub fn set_ledger_rollup(
        &self,
        p: ledger_rollup::Policy,
    ) -> Result<(), ledger_rollup::PolicyError> {
        p.validate()?;
        *self
            .ledger_rollup
            .write()
            .unwrap_or_else(|e| e.into_inner()) = p;
        Ok(())
    }

    pub fn ledger_rollup(&self) -> ledger_rollup::Policy {
        *self.ledger_rollup.read().unwrap_or_else(|e| e.into_inner())
    }

    /// How far the ledger is rolled up (`budget_ledger_rollup`).
    pub(super) async fn stored_in<'c, E>(
        &self,
        ex: E,
        policy_offset: i32,
    ) -> Result<ledger_rollup::Stored, StoreError>
    where
        E: sqlx::Executor<'c, Database = Any>,
    {
        let rows = sqlx::query("SELECT level, until_ms FROM budget_ledger_rollup")
            .fetch_all(ex)
            .await?;
        let mut out = ledger_rollup::Stored {
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
        policy: &ledger_rollup::Policy,
        now_ms: i64,
    ) -> Result<Rolled, StoreError> {
        let (hourly, daily) = policy.cutoffs(now_ms);
        let mut out = Rolled::default();
        self.roll_level(1, &[0], ledger_rollup::Grid::hours(), hourly, &mut out)
            .await?;
        let days = ledger_rollup::Grid::days(policy.daily_utc_offset_minutes);
        self.roll_level(2, &[0, 1], days, daily, &mut out).await?;
        Ok(out)
    }

    async fn roll_level(
        &self,
        level: i64,
        from_levels: &[i64],
        grid: ledger_rollup::Grid,
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
                // its entries, many times over a long history, and a delete
                // and insert each time would touch all six b-trees
                // (docs/benchmarks.md, "Budget ledger and reports").
                let ids: Vec<String> = ledger_rollup::roll_up(&entries, grid)
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
                let merged = ledger_rollup::roll_up(&entries, grid);
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
                super::append::insert_at(&mut tx, &merged, Some(level)).await?;
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
}
