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

use super::history::{params_list, qos_text, values_list};
use super::sql::SqlStore;
use super::StoreError;
use quota::budget::report::{Entry, Reason};
use quota::usage::QosClass;
use sqlx::{Any, Row, Transaction};

/// How long a ledger window's record is kept (`forget_ledger_windows`).
pub const KEEP_WINDOWS_MS: i64 = 24 * 3_600_000;

/// Entries per INSERT statement (13 parameters each).
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
    crate::util::sha256_hex(&parts.join("\u{0}"))
}

/// Inserts `entries` in `tx`; an entry already stored is left as it is.
pub(super) async fn insert(
    tx: &mut Transaction<'_, Any>,
    entries: &[Entry],
) -> Result<u64, StoreError> {
    let mut written = 0;
    for chunk in entries.chunks(BATCH) {
        let sql = format!(
            "INSERT INTO budget_ledger (id, quota, key, workload, namespace, model, qos, username, \
             start_ms, end_ms, amount, reason, note) VALUES {} ON CONFLICT (id) DO NOTHING",
            values_list(chunk.len(), 13)
        );
        let mut q = sqlx::query(&sql);
        for e in chunk {
            q = q
                .bind(entry_id(e))
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
                .bind(e.note.as_str());
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
    /// minutes. The entries stay.
    pub async fn forget_ledger_windows(&self, before_ms: i64) -> Result<u64, StoreError> {
        Ok(
            sqlx::query("DELETE FROM budget_ledger_windows WHERE end_ms < $1")
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
        windows_are_written_once,
        reads_are_bounded_and_filtered,
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
        assert_eq!(store.forget_ledger_windows(250).await.unwrap(), 3);
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
}
