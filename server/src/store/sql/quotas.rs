//! Quotas in SQL: the `QuotaStore` over the `quotas` and `charges`
//! tables, each write a compare-and-swap on the row's version, with the
//! budget periods it closes and the ledger entries it accrued in the same
//! transaction (else through the write queue, `queue`).

use super::pool::Backend;
use super::queue::{
    max_flushers, take_distinct, update_rows, PendingWrite, Running, UPDATE_ONE,
    WRITES_PER_STATEMENT,
};
use super::rows::{charge_changes, from_rows, quotas_named, status_to_json, to_json, with_charges};
use super::SqlStore;
use crate::store::{QuotaStore, ResultExt, Stamp, StoreError, Stored};
use async_trait::async_trait;
use quota::object::{Quota, QuotaSpec, QuotaStatus};
use sqlx::Row;

/// The ledger entries a status write adds (docs/budgets.md §6): what the
/// new status accrued since the stored one (`QuotaStatus::ledger`, windows
/// from the stored `lastReconcileTime` on), the carry of the periods it
/// closed and the scheduled top-ups it granted, as entries of `name`.
fn ledger_entries_of(
    name: &str,
    old: &QuotaStatus,
    new: &QuotaStatus,
    closed: &[(String, quota::object::period::PeriodRecord)],
) -> Vec<quota::object::budgets::Entry> {
    let from = old
        .last_reconcile_time
        .as_deref()
        .and_then(quota::time::parse_rfc3339);
    let mut out = new.ledger.since(from);
    for e in &mut out {
        e.quota = name.to_string();
    }
    out.extend(quota::budget::ledger::carry_entries(name, closed));
    out.extend(quota::budget::ledger::scheduled_entries(name, old, new));
    out
}

impl SqlStore {
    /// A guarded write touched no row: the object moved on, or is gone.
    async fn lost_race(&self, name: &str) -> StoreError {
        match self.get(name).await {
            Ok(Some(_)) => StoreError::Conflict(name.to_string()),
            Ok(None) => StoreError::NotFound(name.to_string()),
            Err(e) => e,
        }
    }

    async fn write_object(
        &self,
        current: &Stored,
        spec: &QuotaSpec,
        status: &QuotaStatus,
    ) -> Result<i64, StoreError> {
        let name = current.quota.name();
        let spec_json = to_json(spec)?;
        let status_json = status_to_json(status)?;
        let charges = charge_changes(&current.quota.status, status)?;
        // Budget periods this write closes, and the ledger entries it
        // accrued, are stored with it, or not at all.
        let closed = quota::budget::periods::new_records(&current.quota.status, status);
        let entries = ledger_entries_of(name, &current.quota.status, status, &closed);
        if !closed.is_empty() || !entries.is_empty() {
            let mut tx = self.write.begin().await?;
            let done = sqlx::query(UPDATE_ONE)
                .bind(&spec_json)
                .bind(&status_json)
                .bind(name)
                .bind(current.version)
                .bind(&charges)
                .bind(&current.quota.metadata.uid)
                .execute(&mut *tx)
                .await?;
            if done.rows_affected() == 0 {
                drop(tx);
                return Err(self.lost_race(name).await);
            }
            crate::store::budgets::insert(&mut tx, name, &closed).await?;
            crate::store::ledger::insert_beside(&mut tx, name, &entries).await?;
            tx.commit().await?;
            return Ok(current.version + 1);
        }
        // Perhaps with other quotas' writes (`Writes`).
        let (done, written) = tokio::sync::oneshot::channel();
        let start = {
            let mut q = self.writes.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.pending.push(PendingWrite {
                name: name.to_string(),
                version: current.version,
                uid: current.quota.metadata.uid.clone(),
                spec: spec_json,
                status: status_json,
                charges,
                done,
            });
            let start = q.flushers < max_flushers(self.backend);
            if start {
                q.flushers += 1;
            }
            start
        };
        if start {
            // The guard is made before the task: dropped unpolled (the
            // runtime shutting down), it still gives the flusher's place back.
            let running = Running {
                writes: self.writes.clone(),
                armed: true,
            };
            let store = self.clone();
            tokio::spawn(async move { store.flush_writes(running).await });
        }
        match written.await {
            Ok(Ok(true)) => Ok(current.version + 1),
            Ok(Ok(false)) => Err(self.lost_race(name).await),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StoreError::Backend(
                "the quota write stopped before it was answered".into(),
            )),
        }
    }

    /// Writes what is queued, a statement at a time, until nothing is.
    async fn flush_writes(self, mut running: Running) {
        loop {
            let batch = {
                let mut q = self.writes.queue.lock().unwrap_or_else(|e| e.into_inner());
                if q.pending.is_empty() {
                    q.flushers -= 1;
                    running.armed = false;
                    return;
                }
                take_distinct(&mut q.pending, WRITES_PER_STATEMENT)
            };
            self.write_batch(batch).await;
        }
    }

    async fn write_batch(&self, batch: Vec<PendingWrite>) {
        if let Some(sizes) = self.writes.sizes.get() {
            sizes.observe(batch.len() as f64);
        }
        if batch.len() > 1 {
            match update_rows(&self.write, self.backend, &batch).await {
                Ok(written) => {
                    self.writes
                        .coalesced
                        .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    for w in batch {
                        let ok = written.contains(w.name.as_str());
                        let _ = w.done.send(Ok(ok));
                    }
                    return;
                }
                // (On PostgreSQL, say, a deadlock with another replica's
                // statement over the same quotas in another order.) Each
                // write alone, so one row's trouble is its own.
                Err(e) => tracing::debug!(
                    "a statement of {} quota writes failed, writing each alone: {e}",
                    batch.len()
                ),
            }
        }
        for w in batch {
            let done = update_rows(&self.write, self.backend, std::slice::from_ref(&w)).await;
            let _ = w.done.send(done.map(|names| names.contains(&w.name)));
        }
    }
}

#[async_trait]
impl QuotaStore for SqlStore {
    async fn get(&self, name: &str) -> Result<Option<Stored>, StoreError> {
        // On the writer: a read-modify-write stays on one connection, whose
        // page cache is never invalidated by another writer.
        let rows = sqlx::query(&with_charges(self.backend, Some("name = $1")))
            .bind(name)
            .fetch_all(&self.fresh)
            .await?;
        Ok(from_rows(&rows, None)?.pop())
    }

    async fn stamp(&self, name: &str) -> Result<Option<Stamp>, StoreError> {
        // Two short columns, on the writer as `get`: no spec or status parsed.
        let row = sqlx::query("SELECT version, uid FROM quotas WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.fresh)
            .await?;
        row.map(|r| -> Result<Stamp, StoreError> {
            Ok(Stamp {
                name: name.to_string(),
                version: r.try_get("version")?,
                uid: r.try_get("uid")?,
            })
        })
        .transpose()
    }

    async fn list(&self) -> Result<Vec<Stored>, StoreError> {
        let rows = sqlx::query(&with_charges(self.backend, None))
            .fetch_all(&self.read)
            .await?;
        // Parsing every quota is the cost of a list (hundreds of ms at
        // 10,000 quotas): off the async workers, so admissions keep them.
        tokio::task::spawn_blocking(move || from_rows(&rows, None))
            .await
            .map_err(|e| StoreError::Backend(format!("listing quotas: {e}")))?
    }

    async fn stamps(&self) -> Result<Vec<Stamp>, StoreError> {
        // Three short columns: no spec or status to parse.
        let rows = sqlx::query("SELECT name, version, uid FROM quotas ORDER BY name")
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Stamp {
                    name: r.try_get("name")?,
                    version: r.try_get("version")?,
                    uid: r.try_get("uid")?,
                })
            })
            .collect()
    }

    async fn get_many(&self, names: &[String]) -> Result<Vec<Stored>, StoreError> {
        let mut conn = self.read.acquire().await?;
        quotas_named(self.backend, &mut conn, names).await
    }

    async fn children(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        let rows = sqlx::query(&with_charges(self.backend, Some("parent = $1")))
            .bind(name)
            .fetch_all(&self.read)
            .await?;
        from_rows(&rows, None)
    }

    async fn subtrees(&self, roots: &[String]) -> Result<Vec<Stored>, StoreError> {
        // One recursive query per root; UNION (not UNION ALL) ends a cycle.
        let mut by_name = std::collections::BTreeMap::new();
        for root in roots {
            if by_name.contains_key(root.as_str()) {
                continue;
            }
            let rows = sqlx::query(&format!(
                "WITH RECURSIVE sub(name) AS ( \
                   SELECT name FROM quotas WHERE name = $1 \
                   UNION SELECT q.name FROM quotas q JOIN sub ON q.parent = sub.name) \
                 {}",
                with_charges(self.backend, Some("quotas.name IN (SELECT name FROM sub)"))
            ))
            .bind(root)
            .fetch_all(&self.read)
            .await?;
            for s in from_rows(&rows, None)? {
                by_name.insert(s.quota.name().to_string(), s);
            }
        }
        Ok(by_name.into_values().collect())
    }

    async fn create(&self, quota: &Quota) -> Result<Stored, StoreError> {
        let uid = quota
            .metadata
            .uid
            .clone()
            .unwrap_or_else(crate::util::new_uid);
        let created = quota
            .metadata
            .creation_timestamp
            .clone()
            .unwrap_or_else(|| quota::time::format_rfc3339(crate::util::now_ms()));
        sqlx::query(
            "INSERT INTO quotas (name, parent, spec, status, version, uid, created_at, charges_delta) \
             VALUES ($1, $2, $3, $4, 1, $5, $6, $7)",
        )
            .bind(quota.name())
            .bind(&quota.spec.parent)
            .bind(to_json(&quota.spec)?)
            .bind(status_to_json(&quota.status)?)
            .bind(&uid)
            .bind(&created)
            .bind(charge_changes(&QuotaStatus::default(), &quota.status)?)
            .execute(&self.write)
            .await
            .on_unique(|| StoreError::AlreadyExists(quota.name().to_string()))?;
        let mut q = quota.clone();
        q.metadata.resource_version = Some("1".into());
        q.metadata.uid = Some(uid);
        q.metadata.creation_timestamp = Some(created);
        Ok(Stored {
            quota: q,
            version: 1,
        })
    }

    async fn replace(&self, current: &Stored, quota: &Quota) -> Result<i64, StoreError> {
        self.write_object(current, &quota.spec, &quota.status).await
    }

    async fn replace_status(
        &self,
        current: &Stored,
        status: &QuotaStatus,
    ) -> Result<i64, StoreError> {
        self.write_object(current, &current.quota.spec, status)
            .await
    }

    /// PostgreSQL: one transaction that reads the row `FOR UPDATE`, decides,
    /// and writes (the version is still checked). Replicas writing one
    /// quota then take turns instead of losing swaps to each other until
    /// they give up. SQLite has no row locks (and one writer per file):
    /// the caller keeps to compare-and-swap.
    async fn modify_locked(
        &self,
        name: &str,
        known: Option<&Stored>,
        decide: &mut (dyn for<'s> FnMut(&'s Stored) -> Option<Quota> + Send),
    ) -> Option<Result<Option<Stored>, StoreError>> {
        if self.backend != Backend::Postgres {
            return None;
        }
        let locked = async {
            let mut tx = self.write.begin().await?;
            // The row locked, then it and its charges read, in one round
            // trip (migration 0018's `bizrq_lock_quota`): the row lock is
            // what replicas on one hot quota take turns on, so every trip
            // made under it counts.
            let rows = sqlx::query("SELECT * FROM bizrq_lock_quota($1)")
                .bind(name)
                .fetch_all(&mut *tx)
                .await?;
            let Some(current) = from_rows(&rows, known)?.pop() else {
                return Err(StoreError::NotFound(name.to_string()));
            };
            let Some(mut q) = decide(&current) else {
                tx.commit().await?;
                return Ok(None);
            };
            let done = sqlx::query(UPDATE_ONE)
                .bind(to_json(&q.spec)?)
                .bind(status_to_json(&q.status)?)
                .bind(name)
                .bind(current.version)
                .bind(charge_changes(&current.quota.status, &q.status)?)
                .bind(&current.quota.metadata.uid)
                .execute(&mut *tx)
                .await?;
            if done.rows_affected() != 1 {
                // Under the row lock this cannot happen; never write blind.
                return Err(StoreError::Conflict(name.to_string()));
            }
            let closed = quota::budget::periods::new_records(&current.quota.status, &q.status);
            crate::store::budgets::insert(&mut tx, name, &closed).await?;
            let entries = ledger_entries_of(name, &current.quota.status, &q.status, &closed);
            crate::store::ledger::insert_beside(&mut tx, name, &entries).await?;
            tx.commit().await?;
            let version = current.version + 1;
            q.metadata.resource_version = Some(version.to_string());
            Ok(Some(Stored { quota: q, version }))
        };
        Some(locked.await)
    }

    async fn delete(&self, current: &Stored) -> Result<(), StoreError> {
        let name = current.quota.name();
        let done = sqlx::query("DELETE FROM quotas WHERE name = $1 AND version = $2")
            .bind(name)
            .bind(current.version)
            .execute(&self.write)
            .await?;
        if done.rows_affected() == 0 {
            return Err(self.lost_race(name).await);
        }
        Ok(())
    }

    async fn workload_quota(&self, workload: &str) -> Result<Option<String>, StoreError> {
        // The holder that took it last (a move holds it in two quotas for
        // a moment). Not `ORDER BY id DESC LIMIT 1`: with no statistics
        // PostgreSQL may walk the whole id index backwards for it.
        let rows = sqlx::query("SELECT quota, id FROM charges WHERE workload = $1")
            .bind(workload)
            .fetch_all(&self.read)
            .await?;
        let mut last: Option<(i64, String)> = None;
        for r in &rows {
            let id: i64 = r.try_get(1)?;
            if last.as_ref().is_none_or(|(l, _)| id > *l) {
                last = Some((id, r.try_get(0)?));
            }
        }
        Ok(last.map(|(_, quota)| quota))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").fetch_one(&self.read).await?;
        Ok(())
    }
}
