//! Entries written to the ledger: idempotent inserts (an entry already
//! stored is left alone), in a quota's own transaction standalone or as a
//! window the controller appends after its status write.

use super::*;
use crate::store::sql::query::{qos_text, values_list, Params};
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::object::budgets::Entry;
use sqlx::{Any, Row, Transaction};

pub(super) const INSERT_COLUMNS: &str =
    "id, quota, key, workload, namespace, model, qos, username, \
     start_ms, end_ms, amount, reason, note, amount_hi, amount_mid, amount_lo, rollup";

/// Inserts `entries` in `tx`; an entry already stored is left as it is.
pub(in crate::store) async fn insert(
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
pub(in crate::store) async fn insert_beside(
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
pub(super) fn scrubbed(e: &Entry) -> Option<Entry> {
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
pub(super) async fn insert_at(
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
}
