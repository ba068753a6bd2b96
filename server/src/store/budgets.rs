//! Closed budget periods (table `budget_periods`, migration 0012): written
//! with the status write that closed them (`SqlStore::write_object`), read
//! by the budgets API and the portal. Standalone only: in cluster mode the
//! last periods live in the quota's status (`status.budgets[key].closed`).

use super::sql::SqlStore;
use super::StoreError;
use quota::object::period::PeriodRecord;
use sqlx::{Any, Row, Transaction};

/// The most records one read returns.
pub const MAX_PAGE: i64 = 200;

/// Inserts `records` of `quota` in `tx`; a record already stored (same
/// quota, key and start) is left as it is, so a repeated close is a no-op.
pub(super) async fn insert(
    tx: &mut Transaction<'_, Any>,
    quota: &str,
    records: &[(String, PeriodRecord)],
) -> Result<(), StoreError> {
    for (key, r) in records {
        let json = serde_json::to_string(r).map_err(|e| StoreError::Backend(e.to_string()))?;
        sqlx::query(
            "INSERT INTO budget_periods (quota, key, start_ms, end_ms, record) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (quota, key, start_ms) DO NOTHING",
        )
        .bind(quota)
        .bind(key)
        .bind(r.start_ms)
        .bind(r.end_ms)
        .bind(json)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

impl SqlStore {
    /// The closed periods of `quota`'s `key`, newest first, starting
    /// before `before_ms` (paging), at most `limit` (1 to `MAX_PAGE`).
    pub async fn budget_periods(
        &self,
        quota: &str,
        key: &str,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<PeriodRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT record FROM budget_periods WHERE quota = $1 AND key = $2 AND start_ms < $3 \
             ORDER BY start_ms DESC LIMIT $4",
        )
        .bind(quota)
        .bind(key)
        .bind(before_ms)
        .bind(limit.clamp(1, MAX_PAGE))
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                let text: String = r.try_get("record")?;
                serde_json::from_str(&text).map_err(|e| {
                    StoreError::Backend(format!("bizrq {quota}: stored period is unreadable: {e}"))
                })
            })
            .collect()
    }
}
