//! The ledger read back: its entries and sums for a selection, and the
//! reports' aggregates, summed in SQL.

use super::*;
use crate::store::sql::query::params_list;
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::budget::ledger_rollup;
use quota::budget::report::{self, Bucket, Dimension, ReportSpec};
use quota::object::budgets::{Entry, Reason};
use sqlx::Row;

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

/// Why an aggregated read gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    TooMany(#[from] TooMany),
    #[error(transparent)]
    TooFine(#[from] ledger_rollup::TooFine),
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

/// Quota names per `IN (…)` list of an aggregated read.
pub(super) const NAMES_PER_SUM: usize = 10_000;

/// SQL for a row's bucket (any value unique per bucket) and the bucket's
/// end, from `start_ms`: arithmetic on the regular grids (days, weeks),
/// a `CASE` over the cuts otherwise (months: a dozen a year). Numbers are
/// ours, written as literals.
pub(super) fn bucket_sql(spec: &ReportSpec) -> (String, String) {
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

impl SqlStore {
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

    /// How far the ledger is rolled up now, for fitting a report to it
    /// (`ledger_rollup::snap`) before reading (`ledger_aggregate` checks again in
    /// its own snapshot), and when its first entry starts (`None`: empty).
    pub async fn ledger_extent(&self) -> Result<(ledger_rollup::Stored, Option<i64>), StoreError> {
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
    /// inside a rolled cell (`ledger_rollup::check`, read in the same snapshot
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
    ) -> Result<Result<(Aggregated, Vec<crate::store::Stored>), Refused>, StoreError> {
        let mut out = Aggregated::default();
        let chunks: Vec<Option<&[String]>> = match quotas {
            None => vec![None],
            Some([]) => return Ok(Ok((out, Vec::new()))),
            Some(names) => names.chunks(NAMES_PER_SUM).map(Some).collect(),
        };
        // One snapshot for the marks, the quotas and every read.
        let mut tx = self.read.begin().await?;
        if self.backend == crate::store::sql::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        let offset = self.ledger_rollup().daily_utc_offset_minutes;
        let stored = self.stored_in(&mut *tx, offset).await?;
        if let Err(e) = ledger_rollup::check(spec, &stored) {
            return Ok(Err(e.into()));
        }
        // (SQLite: a read transaction's snapshot starts at its first read,
        // the marks' above, so the quotas and the rows are one moment's.)
        let copies = match also.is_empty() {
            true => Vec::new(),
            false => crate::store::sql::rows::quotas_named(self.backend, &mut tx, also).await?,
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
            Dimension::Quality => ("reason || ':' || COALESCE(qos, '')", false),
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
                    Dimension::Quality => {
                        let g = g.unwrap_or_default();
                        let (reason, qos) = g.split_once(':').unwrap_or((&g, ""));
                        entry.reason = reason_from_text(reason)?;
                        entry.qos = (!qos.is_empty()).then(|| qos_from(qos)).transpose()?;
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
