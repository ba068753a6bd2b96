//! The write queue: quota writes that arrive while another is under way
//! wait here and go to the database together, as one statement.

use super::pool::Backend;
use super::query::{values_list, Params};
use crate::store::StoreError;
use sqlx::{Executor, Row};
use std::sync::{Arc, Mutex};

/// Quota writes, coalesced: a compare-and-swap that arrives while another
/// is under way queues, and the queued ones go to the database as one
/// statement (`UPDATE … FROM (VALUES …) RETURNING name`), each row still
/// compared on its version. With reviews spread over many quotas every
/// group commit (`service::group_commit`) is a write of its own; one statement
/// for many is one trip to sqlx's SQLite thread, one commit and one
/// write-ahead-log append instead of one each (docs/benchmarks.md,
/// "Writes of many quotas in one statement").
/// A writer is answered only once the statement that holds its row is
/// committed; one whose row the statement did not match lost its swap.
#[derive(Default)]
pub(super) struct Writes {
    pub(super) queue: Mutex<WriteQueue>,
    /// Writes per statement, for `/metrics` (`SqlStore::observe_writes`).
    pub(super) sizes: std::sync::OnceLock<prometheus_client::metrics::histogram::Histogram>,
    /// Writes that went out in a statement with others.
    pub(super) coalesced: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
pub(super) struct WriteQueue {
    pub(super) pending: Vec<PendingWrite>,
    /// Flushers running (`SqlStore::flush_writes`).
    pub(super) flushers: usize,
}

pub(super) struct PendingWrite {
    pub(super) name: String,
    pub(super) version: i64,
    /// The uid of the quota it was decided on (`UPDATE_ONE`).
    pub(super) uid: Option<String>,
    pub(super) spec: String,
    pub(super) status: String,
    /// The charges it changes (`charge_changes`).
    pub(super) charges: Option<String>,
    /// Whether the row was written (false: its version moved on, or it is gone).
    pub(super) done: tokio::sync::oneshot::Sender<Result<bool, StoreError>>,
}

/// A flusher's place (`WriteQueue::flushers`). Should the flusher end
/// any other way than by finding the queue empty (a panic, or its task
/// dropped before it ran), the place is given back and what is queued is
/// answered with an error (its senders dropped), rather than left waiting
/// for a flusher that may never start.
pub(super) struct Running {
    pub(super) writes: Arc<Writes>,
    pub(super) armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            let mut q = self.writes.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.flushers -= 1;
            if q.flushers == 0 {
                q.pending.clear();
            }
        }
    }
}

/// Writes one statement carries at most (4 parameters each).
pub(super) const WRITES_PER_STATEMENT: usize = 128;

/// Flushers at once: SQLite has one writer; on PostgreSQL two statements
/// can be in flight (one committing while the next is built).
pub(super) fn max_flushers(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 1,
        Backend::Postgres => 2,
    }
}

/// One quota's compare-and-swap: spec `$1`, status `$2`, name `$3`, the
/// version it was decided on `$4`, what it changes of the charges `$5`
/// (`charge_changes`), and the uid of the quota it was decided on `$6`: a
/// quota deleted and made again under its name counts its versions from
/// 1 again, and a copy of the one before must not pass for the new one.
pub(super) const UPDATE_ONE: &str =
    "UPDATE quotas SET spec = $1, status = $2, charges_delta = $5, \
     version = version + 1 WHERE name = $3 AND version = $4 AND uid = COALESCE($6, uid)";

/// Writes the quota rows of `batch`, each compared on its version, with
/// the charges each changes (one statement: `UPDATE … FROM (VALUES …)
/// RETURNING name` for more than one); the names written.
pub(super) async fn update_rows<'e>(
    e: impl Executor<'e, Database = sqlx::Any>,
    backend: Backend,
    batch: &[PendingWrite],
) -> Result<std::collections::HashSet<String>, StoreError> {
    if let [w] = batch {
        let done = sqlx::query(UPDATE_ONE)
            .bind(&w.spec)
            .bind(&w.status)
            .bind(&w.name)
            .bind(w.version)
            .bind(&w.charges)
            .bind(&w.uid)
            .execute(e)
            .await?;
        return Ok(if done.rows_affected() == 1 {
            [w.name.clone()].into()
        } else {
            Default::default()
        });
    }
    {
        let values = values_list(Params::on(backend), batch.len(), 6);
        // VALUES columns are column1 … column6 on both databases.
        let sql = format!(
            "UPDATE quotas SET spec = v.column3, status = v.column4, charges_delta = v.column5, \
             version = quotas.version + 1 \
             FROM (VALUES {values}) AS v \
             WHERE quotas.name = v.column1 AND quotas.version = CAST(v.column2 AS BIGINT) \
               AND quotas.uid = COALESCE(v.column6, quotas.uid) \
             RETURNING name"
        );
        let mut query = sqlx::query(&sql);
        for w in batch {
            query = query
                .bind(&w.name)
                .bind(w.version)
                .bind(&w.spec)
                .bind(&w.status)
                .bind(&w.charges)
                .bind(&w.uid);
        }
        let rows = query.fetch_all(e).await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>(0).map_err(Into::into))
            .collect()
    }
}

/// Up to `max` of the oldest pending writes, at most one per quota (one
/// statement must not compare one row twice); the rest stay queued.
pub(super) fn take_distinct(pending: &mut Vec<PendingWrite>, max: usize) -> Vec<PendingWrite> {
    let mut names = std::collections::HashSet::new();
    let mut batch = Vec::new();
    let mut rest = Vec::new();
    for w in pending.drain(..) {
        if batch.len() < max && names.insert(w.name.clone()) {
            batch.push(w);
        } else {
            rest.push(w);
        }
    }
    *pending = rest;
    // In name order: two replicas' statements over the same quotas then
    // lock their rows in the same order on PostgreSQL, not into a deadlock.
    batch.sort_by(|a, b| a.name.cmp(&b.name));
    batch
}
