//! A quota as its rows hold it: the statements that read a quota with
//! its charges (`with_charges`), the rows turned back into quotas
//! (`from_rows`), and a status turned into what a write stores.

use super::pool::Backend;
use super::query::Params;
use crate::store::{StoreError, Stored};
use quota::object::{ObjectMeta, Quota, QuotaSpec, QuotaStatus};
use sqlx::any::AnyRow;
use sqlx::Row;

pub(super) const COLUMNS: &str = "name, parent, spec, status, version, uid, created_at";

/// Quota rows and their charge rows in one statement (one snapshot: a
/// charge is never read from another version than its quota's row), for
/// the quotas `condition` (on columns of `quotas`) selects; `None`: every
/// quota. A charge row has `version` NULL, its quota in `name`, its
/// workload in `parent` and its JSON in `spec` (`from_rows`).
///
/// On PostgreSQL the charges of a few quotas are read quota by quota
/// through their index (a lateral subquery, kept apart by `OFFSET 0`):
/// joined, the planner hashes the whole table whenever it has no
/// statistics on it yet (autovacuum off, or a table that grew since), 70
/// ms a statement of 500 quotas at 240,000 charges instead of 12.
pub(super) fn with_charges(backend: Backend, condition: Option<&str>) -> String {
    let quotas = format!(
        "SELECT {COLUMNS} FROM quotas WHERE {}",
        condition.unwrap_or("true")
    );
    let charges = match (backend, condition) {
        (_, None) => "SELECT c.quota, c.workload, c.charge, NULL, NULL, NULL, NULL \
                      FROM charges c"
            .to_string(),
        (Backend::Sqlite, Some(cond)) => format!(
            "SELECT c.quota, c.workload, c.charge, NULL, NULL, NULL, NULL \
             FROM charges c JOIN quotas ON quotas.name = c.quota WHERE {cond}"
        ),
        (Backend::Postgres, Some(cond)) => format!(
            "SELECT c.quota, c.workload, c.charge, NULL, NULL, NULL, NULL \
             FROM quotas CROSS JOIN LATERAL ( \
               SELECT quota, workload, charge FROM charges \
                WHERE charges.quota = quotas.name OFFSET 0) c \
             WHERE {cond}"
        ),
    };
    format!("{quotas} UNION ALL {charges}")
}

/// What a write changes of a quota's charges (`Workloads::changes_since`
/// from the version it was decided on), as the `charges_delta` column
/// takes it: `{"written":{workload: charge, …},"removed":[workload, …]}`;
/// None when it changes none. The column's trigger applies it to the
/// `charges` rows in the statement that writes the row (migration 0018).
pub(super) fn charge_changes(
    old: &QuotaStatus,
    new: &QuotaStatus,
) -> Result<Option<String>, StoreError> {
    let bad = |e: serde_json::Error| StoreError::Backend(e.to_string());
    let changes = new.workloads.changes_since(&old.workloads).map_err(bad)?;
    if changes.is_empty() {
        return Ok(None);
    }
    let mut out = String::from(r#"{"written":{"#);
    for (i, (workload, json)) in changes.written.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(workload).map_err(bad)?);
        out.push(':');
        out.push_str(json.get());
    }
    out.push_str(r#"},"removed":"#);
    out.push_str(&serde_json::to_string(&changes.removed).map_err(bad)?);
    out.push('}');
    Ok(Some(out))
}

/// Names per statement in `get_many` (each bound twice on SQLite: 800
/// parameters, under the 999 of older SQLite builds).
pub(super) const GET_MANY_CHUNK: usize = 400;

pub(in crate::store) fn to_json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(e.to_string()))
}

/// A status's JSON as the `quotas` row holds it: without its charges,
/// which are rows of their own.
pub(super) fn status_to_json(status: &QuotaStatus) -> Result<String, StoreError> {
    status
        .to_json_without_workloads()
        .map_err(|e| StoreError::Backend(e.to_string()))
}

/// Quotas from the rows of a `with_charges` statement (in any order), in
/// name order, each with its charges.
/// `known`: a copy of one of them the caller holds (`add_charge`).
pub(super) fn from_rows(
    rows: &[AnyRow],
    known: Option<&Stored>,
) -> Result<Vec<Stored>, StoreError> {
    let mut quotas = std::collections::BTreeMap::new();
    let mut charges = Vec::new();
    for row in rows {
        if row.try_get::<Option<i64>, _>("version")?.is_some() {
            let s = from_row(row)?;
            quotas.insert(s.quota.name().to_string(), s);
        } else {
            charges.push(row);
        }
    }
    for row in charges {
        let quota: String = row.try_get("name")?;
        let workload: String = row.try_get("parent")?;
        // (The statement reads a charge only with its quota's row.)
        if let Some(s) = quotas.get_mut(&quota) {
            add_charge(s, workload, row.try_get("spec")?, known)?;
        }
    }
    Ok(quotas.into_values().collect())
}

pub(super) fn add_charge(
    s: &mut Stored,
    workload: String,
    json: String,
    known: Option<&Stored>,
) -> Result<(), StoreError> {
    let known = known.map(|k| &k.quota.status.workloads);
    s.quota
        .status
        .workloads
        .insert_json(workload.clone(), json, known)
        .map_err(|e| {
            StoreError::Backend(format!(
                "bizrq {}: the stored charge of {workload} is unreadable: {e}",
                s.quota.name()
            ))
        })
}

pub(super) fn from_row(row: &AnyRow) -> Result<Stored, StoreError> {
    let name: String = row.try_get("name")?;
    let bad = |what: &str, e: serde_json::Error| {
        StoreError::Backend(format!("bizrq {name}: stored {what} is unreadable: {e}"))
    };
    let spec: QuotaSpec =
        serde_json::from_str(&row.try_get::<String, _>("spec")?).map_err(|e| bad("spec", e))?;
    let status: QuotaStatus =
        serde_json::from_str(&row.try_get::<String, _>("status")?).map_err(|e| bad("status", e))?;
    let version: i64 = row.try_get("version")?;
    let mut quota = Quota::new(&name, spec);
    quota.status = status;
    quota.metadata = ObjectMeta {
        name,
        resource_version: Some(version.to_string()),
        uid: Some(row.try_get("uid")?),
        creation_timestamp: Some(row.try_get("created_at")?),
        ..Default::default()
    };
    Ok(Stored { quota, version })
}

/// The quotas `names` (with their charges) as `conn` sees them: on a
/// transaction's connection, in its snapshot (a report reads the budgeted
/// quotas with the ledger's rows, `SqlStore::ledger_aggregate_with`).
pub(in crate::store) async fn quotas_named(
    backend: Backend,
    conn: &mut sqlx::AnyConnection,
    names: &[String],
) -> Result<Vec<Stored>, StoreError> {
    // In chunks, as one statement's parameters are bounded (SQLite: 999
    // in older builds).
    let mut rows = Vec::new();
    for chunk in names.chunks(GET_MANY_CHUNK) {
        let params = Params::on(backend);
        let sql = with_charges(
            backend,
            Some(&format!("name IN ({})", params.list(chunk.len()))),
        );
        let mut q = sqlx::query(&sql);
        // The list is in the statement twice: `$n` name a parameter
        // again, `?` (SQLite) are bound again.
        let times = if params == Params::Anonymous { 2 } else { 1 };
        for _ in 0..times {
            for name in chunk {
                q = q.bind(name);
            }
        }
        rows.push(q.fetch_all(&mut *conn).await?);
    }
    let mut out = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for rows in &rows {
            out.extend(from_rows(rows, None)?);
        }
        Ok::<_, StoreError>(out)
    })
    .await
    .map_err(|e| StoreError::Backend(format!("reading quotas: {e}")))??;
    out.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
    Ok(out)
}
