//! Real usage in SQL (migration 0023, docs/real-usage.md): each reading's
//! figures added to the hourly rows of its workloads (`real_usage`), the
//! window it covered (`real_usage_windows`, so a reading is written once),
//! the workloads idle at that reading (`real_usage_idle`), and where the
//! readings stand (settings: known up to when, or down since when and
//! why). The controller's leader writes; every replica's pages, API and
//! alerts read.

use super::sql::query::{values_list, Params};
use super::sql::SqlStore;
use super::StoreError;
use quota::real_usage::figures::{Figures, GpuFigures, UseFigures};
use quota::real_usage::idle::{IdleNow, Streak};
use quota::real_usage::reading::Row;
use quota::real_usage::readings::Readings;
use quota::real_usage::report::HourRow;
use sqlx::any::AnyRow;
use sqlx::Row as _;
use std::collections::BTreeMap;

use quota::real_usage::reading::HOUR_MS;
/// Settings: the end of the last window written (ms).
pub const KNOWN_TO: &str = "real_usage_known_to_ms";
/// Settings: since when readings fail (ms), and the last failure's words.
pub const DOWN_SINCE: &str = "real_usage_down_since_ms";
pub const DOWN_ERROR: &str = "real_usage_error";
/// Rows of figures are kept this long (as usage samples are).
pub const KEEP_MS: i64 = 730 * 24 * HOUR_MS;
/// Rows per multi-row statement (13 columns: 1,300 parameters).
const BATCH_ROWS: usize = 100;

/// What writing a reading did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    Written,
    /// This window, or one overlapping it, was written before: nothing
    /// was added (a retry, or another leader read it).
    AlreadyRead,
}

/// Figures summed by a grouping (workload, submitter, quota, hour).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub key: String,
    /// For a workload: its quota, namespace and submitter (the latest).
    pub quota: String,
    pub namespace: String,
    pub username: String,
    pub figures: Figures,
}

const SUMS: &str = "SUM(gpu_allocated), SUM(gpu_measured), SUM(gpu_busy), SUM(gpu_idle), \
    SUM(cpu_requested), SUM(cpu_used), SUM(memory_requested), SUM(memory_used)";

/// The eight sums of `SUMS` from column `first` on. PostgreSQL's SUM of
/// a BIGINT is NUMERIC: read through a cast in the statement (`sums`).
fn figures_at(row: &AnyRow, first: usize) -> Result<Figures, StoreError> {
    let g = |i: usize| -> Result<i64, StoreError> {
        Ok(row.try_get::<Option<i64>, _>(first + i)?.unwrap_or(0))
    };
    Ok(Figures {
        gpu: GpuFigures {
            allocated: g(0)?,
            measured: g(1)?,
            busy: g(2)?,
            idle: g(3)?,
        },
        cpu: UseFigures {
            requested: g(4)?,
            used: g(5)?,
        },
        memory: UseFigures {
            requested: g(6)?,
            used: g(7)?,
        },
    })
}

/// `SUMS` cast back to BIGINT (PostgreSQL sums BIGINTs as NUMERIC).
fn sums() -> String {
    SUMS.split(", ")
        .map(|s| format!("CAST({s} AS BIGINT)"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl SqlStore {
    /// Writes one reading of `[from_ms, to_ms)`: its rows added to the
    /// hourly rows, the idle workloads replaced by `idle`, the readings
    /// known up to `to_ms`, all in one transaction — or nothing, when
    /// that window (or one overlapping it) was written before.
    pub async fn record_reading(
        &self,
        from_ms: i64,
        to_ms: i64,
        rows: &[Row],
        idle: &[IdleNow],
    ) -> Result<Recorded, StoreError> {
        let mut tx = self.write.begin().await?;
        let overlapping = sqlx::query(
            "SELECT COUNT(*) FROM real_usage_windows WHERE start_ms < $1 AND end_ms > $2",
        )
        .bind(to_ms)
        .bind(from_ms)
        .fetch_one(&mut *tx)
        .await?
        .try_get::<i64, _>(0)?;
        if overlapping > 0 {
            return Ok(Recorded::AlreadyRead);
        }
        sqlx::query("INSERT INTO real_usage_windows (start_ms, end_ms) VALUES ($1, $2)")
            .bind(from_ms)
            .bind(to_ms)
            .execute(&mut *tx)
            .await?;
        // One statement may not touch a row twice on PostgreSQL.
        let mut merged: BTreeMap<(&str, i64, &str), Row> = BTreeMap::new();
        for r in rows {
            merged
                .entry((&r.quota, r.hour_ms, &r.workload))
                .and_modify(|m| m.figures.add(&r.figures))
                .or_insert_with(|| r.clone());
        }
        let rows: Vec<Row> = merged.into_values().collect();
        for chunk in rows.chunks(BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO real_usage (quota, hour_ms, workload, namespace, username, \
                 gpu_allocated, gpu_measured, gpu_busy, gpu_idle, cpu_requested, cpu_used, \
                 memory_requested, memory_used) VALUES {} \
                 ON CONFLICT (quota, hour_ms, workload) DO UPDATE SET \
                 namespace = excluded.namespace, username = excluded.username, \
                 gpu_allocated = real_usage.gpu_allocated + excluded.gpu_allocated, \
                 gpu_measured = real_usage.gpu_measured + excluded.gpu_measured, \
                 gpu_busy = real_usage.gpu_busy + excluded.gpu_busy, \
                 gpu_idle = real_usage.gpu_idle + excluded.gpu_idle, \
                 cpu_requested = real_usage.cpu_requested + excluded.cpu_requested, \
                 cpu_used = real_usage.cpu_used + excluded.cpu_used, \
                 memory_requested = real_usage.memory_requested + excluded.memory_requested, \
                 memory_used = real_usage.memory_used + excluded.memory_used",
                values_list(Params::of(&tx), chunk.len(), 13)
            );
            let mut q = sqlx::query(&sql);
            for r in chunk {
                let f = &r.figures;
                q = q
                    .bind(r.quota.as_str())
                    .bind(r.hour_ms)
                    .bind(r.workload.as_str())
                    .bind(r.namespace.as_str())
                    .bind(r.username.as_str())
                    .bind(f.gpu.allocated)
                    .bind(f.gpu.measured)
                    .bind(f.gpu.busy)
                    .bind(f.gpu.idle)
                    .bind(f.cpu.requested)
                    .bind(f.cpu.used)
                    .bind(f.memory.requested)
                    .bind(f.memory.used);
            }
            q.execute(&mut *tx).await?;
        }
        sqlx::query("DELETE FROM real_usage_idle")
            .execute(&mut *tx)
            .await?;
        for chunk in idle.chunks(BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO real_usage_idle (workload, quota, namespace, username, model, \
                 since_ms, until_ms, cards, idle, peak_permille) VALUES {}",
                values_list(Params::of(&tx), chunk.len(), 10)
            );
            let mut q = sqlx::query(&sql);
            for i in chunk {
                q = q
                    .bind(i.workload.as_str())
                    .bind(i.quota.as_str())
                    .bind(i.namespace.as_str())
                    .bind(i.user.as_str())
                    .bind(i.model.as_deref())
                    .bind(i.streak.since_ms)
                    .bind(i.streak.until_ms)
                    .bind(i.streak.cards.to_string())
                    .bind(i.streak.idle)
                    .bind(i.streak.peak_permille);
            }
            q.execute(&mut *tx).await?;
        }
        for (key, value) in [
            (KNOWN_TO, Some(to_ms.to_string())),
            (DOWN_SINCE, None),
            (DOWN_ERROR, None),
        ] {
            match value {
                Some(v) => {
                    sqlx::query(
                        "INSERT INTO settings (key, value) VALUES ($1, $2) \
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    )
                    .bind(key)
                    .bind(v)
                    .execute(&mut *tx)
                    .await?;
                }
                None => {
                    sqlx::query("DELETE FROM settings WHERE key = $1")
                        .bind(key)
                        .execute(&mut *tx)
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(Recorded::Written)
    }

    /// Readings fail since `since_ms` (kept when already failing), for
    /// `error`.
    pub async fn record_real_usage_down(
        &self,
        since_ms: i64,
        error: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.write.begin().await?;
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(DOWN_SINCE)
        .bind(since_ms.to_string())
        .execute(&mut *tx)
        .await?;
        let error: String = error.chars().take(500).collect();
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(DOWN_ERROR)
        .bind(error)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Where the readings stand.
    pub async fn real_usage_state(&self) -> Result<Readings, StoreError> {
        let rows = sqlx::query("SELECT key, value FROM settings WHERE key IN ($1, $2, $3)")
            .bind(KNOWN_TO)
            .bind(DOWN_SINCE)
            .bind(DOWN_ERROR)
            .fetch_all(&self.read)
            .await?;
        let mut s = Readings::default();
        for r in rows {
            let (k, v): (String, String) = (r.try_get(0)?, r.try_get(1)?);
            match k.as_str() {
                KNOWN_TO => s.known_to_ms = v.parse().ok(),
                DOWN_SINCE => s.down_since_ms = v.parse().ok(),
                _ => s.error = Some(v),
            }
        }
        Ok(s)
    }

    /// Figures of `[from_ms, to_ms)` (whole hours: an hour counts when it
    /// starts in the range) of the quotas named, summed by `by`.
    pub async fn real_usage_by(
        &self,
        by: By,
        quotas: &[String],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Group>, StoreError> {
        let mut out = Vec::new();
        for chunk in quotas.chunks(500) {
            let params = super::sql::query::params_list(3, chunk.len());
            let sql = match by {
                By::Workload => format!(
                    "SELECT workload, MAX(quota), MAX(namespace), MAX(username), {} FROM real_usage \
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND quota IN ({params}) \
                     GROUP BY workload ORDER BY workload",
                    sums()
                ),
                By::User => format!(
                    "SELECT username, '', '', username, {} FROM real_usage \
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND quota IN ({params}) \
                     GROUP BY username ORDER BY username",
                    sums()
                ),
                By::Quota => format!(
                    "SELECT quota, quota, '', '', {} FROM real_usage \
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND quota IN ({params}) \
                     GROUP BY quota ORDER BY quota",
                    sums()
                ),
                By::Hour => format!(
                    "SELECT CAST(hour_ms AS TEXT), '', '', '', {} FROM real_usage \
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND quota IN ({params}) \
                     GROUP BY hour_ms ORDER BY hour_ms",
                    sums()
                ),
            };
            let mut q = sqlx::query(&sql).bind(from_ms).bind(to_ms);
            for name in chunk {
                q = q.bind(name.as_str());
            }
            for row in q.fetch_all(&self.read).await? {
                out.push(Group {
                    key: row.try_get(0)?,
                    quota: row.try_get(1)?,
                    namespace: row.try_get(2)?,
                    username: row.try_get(3)?,
                    figures: figures_at(&row, 4)?,
                });
            }
        }
        // Chunks of quotas answer a key each time it appears in them.
        if quotas.len() > 500 {
            let mut merged: BTreeMap<String, Group> = BTreeMap::new();
            for g in out {
                merged
                    .entry(g.key.clone())
                    .and_modify(|m| m.figures.add(&g.figures))
                    .or_insert(g);
            }
            out = merged.into_values().collect();
        }
        if by == By::Hour {
            out.sort_by_key(|g| g.key.parse::<i64>().unwrap_or(0));
        }
        Ok(out)
    }

    /// The hourly GPU figures of the quotas named (all with None) whose
    /// hour starts in `[from, to)`, for a report to group
    /// (`quota::real_usage::report`); None when there are more than
    /// `limit` rows (the report then goes without them).
    pub async fn real_usage_hours(
        &self,
        quotas: Option<&[String]>,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Option<Vec<HourRow>>, StoreError> {
        const COLS: &str = "quota, hour_ms, workload, namespace, username, \
            gpu_allocated, gpu_measured, gpu_busy, gpu_idle";
        let read = |row: &AnyRow| -> Result<HourRow, StoreError> {
            Ok(HourRow {
                quota: row.try_get(0)?,
                hour_ms: row.try_get(1)?,
                workload: row.try_get(2)?,
                namespace: row.try_get(3)?,
                user: row.try_get(4)?,
                gpu: GpuFigures {
                    allocated: row.try_get(5)?,
                    measured: row.try_get(6)?,
                    busy: row.try_get(7)?,
                    idle: row.try_get(8)?,
                },
            })
        };
        let mut out = Vec::new();
        let chunks: Vec<Option<&[String]>> = match quotas {
            None => vec![None],
            Some(names) => names.chunks(500).map(Some).collect(),
        };
        for chunk in chunks {
            let cap = (limit - out.len().min(limit)) as i64 + 1;
            let rows = match chunk {
                None => {
                    let sql = format!(
                        "SELECT {COLS} FROM real_usage WHERE hour_ms >= $1 AND hour_ms < $2 LIMIT $3"
                    );
                    sqlx::query(&sql)
                        .bind(from_ms)
                        .bind(to_ms)
                        .bind(cap)
                        .fetch_all(&self.read)
                        .await?
                }
                Some([]) => Vec::new(),
                Some(names) => {
                    let params = super::sql::query::params_list(4, names.len());
                    let sql = format!(
                        "SELECT {COLS} FROM real_usage WHERE hour_ms >= $1 AND hour_ms < $2 \
                         AND quota IN ({params}) LIMIT $3"
                    );
                    let mut q = sqlx::query(&sql).bind(from_ms).bind(to_ms).bind(cap);
                    for name in names {
                        q = q.bind(name.as_str());
                    }
                    q.fetch_all(&self.read).await?
                }
            };
            for row in &rows {
                out.push(read(row)?);
            }
            if out.len() > limit {
                return Ok(None);
            }
        }
        Ok(Some(out))
    }

    /// The workloads idle at the last reading, of the quotas named (all
    /// with None), longest idle first.
    pub async fn idle_now(&self, quotas: Option<&[String]>) -> Result<Vec<IdleNow>, StoreError> {
        const COLS: &str = "workload, quota, namespace, username, model, since_ms, until_ms, \
                            cards, idle, peak_permille";
        let rows = match quotas {
            None => {
                sqlx::query(&format!(
                    "SELECT {COLS} FROM real_usage_idle ORDER BY since_ms, workload"
                ))
                .fetch_all(&self.read)
                .await?
            }
            Some(names) => {
                let mut all = Vec::new();
                for chunk in names.chunks(500) {
                    let sql = format!(
                        "SELECT {COLS} FROM real_usage_idle WHERE quota IN ({}) \
                         ORDER BY since_ms, workload",
                        super::sql::query::params_list(1, chunk.len())
                    );
                    let mut q = sqlx::query(&sql);
                    for n in chunk {
                        q = q.bind(n.as_str());
                    }
                    all.extend(q.fetch_all(&self.read).await?);
                }
                all
            }
        };
        let mut out = rows
            .iter()
            .map(|r| {
                let cards: String = r.try_get("cards")?;
                Ok(IdleNow {
                    workload: r.try_get("workload")?,
                    quota: r.try_get("quota")?,
                    namespace: r.try_get("namespace")?,
                    user: r.try_get("username")?,
                    model: r.try_get("model")?,
                    streak: Streak {
                        since_ms: r.try_get("since_ms")?,
                        until_ms: r.try_get("until_ms")?,
                        cards: cards.parse().map_err(|_| {
                            StoreError::Backend(format!("real_usage_idle: cards {cards:?}"))
                        })?,
                        idle: r.try_get("idle")?,
                        peak_permille: r.try_get("peak_permille")?,
                    },
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        out.sort_by(|a, b| (a.streak.since_ms, &a.workload).cmp(&(b.streak.since_ms, &b.workload)));
        Ok(out)
    }

    /// Drops figures older than `before_ms` and window records older than
    /// a day before the newest (they guard against a reading written twice,
    /// which happens within minutes).
    pub async fn forget_real_usage_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        let n = sqlx::query("DELETE FROM real_usage WHERE hour_ms < $1")
            .bind(before_ms)
            .execute(&self.write)
            .await?
            .rows_affected();
        sqlx::query(
            "DELETE FROM real_usage_windows WHERE end_ms < \
             (SELECT MAX(end_ms) FROM real_usage_windows) - $1",
        )
        .bind(24 * HOUR_MS)
        .execute(&self.write)
        .await?;
        Ok(n)
    }
}

/// How `real_usage_by` sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Workload,
    User,
    Quota,
    Hour,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testdb::on_both_databases;

    const T: i64 = 1_795_255_200_000;

    fn row(quota: &str, hour: i64, workload: &str, user: &str, busy: i64) -> Row {
        Row {
            quota: quota.into(),
            hour_ms: T + hour * HOUR_MS,
            workload: workload.into(),
            namespace: "ml".into(),
            username: user.into(),
            figures: Figures {
                gpu: GpuFigures {
                    allocated: 8 * 60_000,
                    measured: 8 * 60_000,
                    busy,
                    idle: 0,
                },
                cpu: UseFigures {
                    requested: 1000,
                    used: 2000,
                },
                memory: UseFigures::default(),
            },
        }
    }

    fn idle(workload: &str, quota: &str) -> IdleNow {
        IdleNow {
            workload: workload.into(),
            quota: quota.into(),
            namespace: "ml".into(),
            user: "alice".into(),
            model: Some("A100".into()),
            streak: Streak {
                since_ms: T,
                until_ms: T + HOUR_MS,
                cards: 8_000_000_000,
                idle: 8 * HOUR_MS,
                peak_permille: 12,
            },
        }
    }

    async fn a_reading_adds_once_and_sums_by_workload_user_quota_and_hour(s: &SqlStore) {
        assert_eq!(s.real_usage_state().await.unwrap(), Readings::default());
        let first = [
            row("nlp", 0, "batch/Job/ml/a", "alice", 60_000),
            row("nlp", 0, "batch/Job/ml/b", "bob", 0),
            row("cv", 0, "batch/Job/ml/c", "alice", 120_000),
        ];
        let w = s
            .record_reading(T, T + 60_000, &first, &[idle("batch/Job/ml/b", "nlp")])
            .await
            .unwrap();
        assert_eq!(w, Recorded::Written);
        // The same window again (a retry) or one overlapping it: nothing.
        assert_eq!(
            s.record_reading(T, T + 60_000, &first, &[]).await.unwrap(),
            Recorded::AlreadyRead
        );
        assert_eq!(
            s.record_reading(T + 30_000, T + 120_000, &first, &[])
                .await
                .unwrap(),
            Recorded::AlreadyRead
        );
        // The next minute, and the next hour.
        let next = [
            row("nlp", 0, "batch/Job/ml/a", "alice", 60_000),
            row("nlp", 1, "batch/Job/ml/a", "alice", 30_000),
        ];
        s.record_reading(T + 60_000, T + 120_000, &next, &[])
            .await
            .unwrap();
        let state = s.real_usage_state().await.unwrap();
        assert_eq!(state.known_to_ms, Some(T + 120_000));
        assert_eq!(state.unknown_since(T + 180_000, 600_000), None);
        assert_eq!(state.unknown_since(T + 900_000, 600_000), Some(T + 120_000));
        // The idle workloads are the last reading's.
        assert!(s.idle_now(None).await.unwrap().is_empty());

        let nlp = vec!["nlp".to_string()];
        let w = s
            .real_usage_by(By::Workload, &nlp, T, T + 2 * HOUR_MS)
            .await
            .unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].key, "batch/Job/ml/a");
        assert_eq!(w[0].figures.gpu.busy, 150_000);
        assert_eq!(w[0].figures.gpu.allocated, 3 * 8 * 60_000);
        assert_eq!(w[0].username, "alice");
        let both = vec!["nlp".to_string(), "cv".to_string()];
        let u = s
            .real_usage_by(By::User, &both, T, T + 2 * HOUR_MS)
            .await
            .unwrap();
        assert_eq!(
            u.iter()
                .map(|g| (g.key.as_str(), g.figures.gpu.busy))
                .collect::<Vec<_>>(),
            [("alice", 270_000), ("bob", 0)]
        );
        let h = s
            .real_usage_by(By::Hour, &nlp, T, T + 2 * HOUR_MS)
            .await
            .unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[1].key, (T + HOUR_MS).to_string());
        let q = s
            .real_usage_by(By::Quota, &both, T + HOUR_MS, T + 2 * HOUR_MS)
            .await
            .unwrap();
        assert_eq!(q.len(), 1, "only the second hour: {q:?}");

        // Down: unknown since the last window's end; a success clears it.
        s.record_real_usage_down(T + 300_000, "timed out")
            .await
            .unwrap();
        s.record_real_usage_down(T + 360_000, "connection refused")
            .await
            .unwrap();
        let state = s.real_usage_state().await.unwrap();
        assert_eq!(state.down_since_ms, Some(T + 300_000), "the first failure");
        assert_eq!(state.error.as_deref(), Some("connection refused"));
        assert_eq!(state.unknown_since(T + 360_000, 600_000), Some(T + 120_000));
        s.record_reading(
            T + 120_000,
            T + 180_000,
            &[],
            &[idle("batch/Job/ml/b", "nlp"), idle("batch/Job/ml/c", "cv")],
        )
        .await
        .unwrap();
        let state = s.real_usage_state().await.unwrap();
        assert_eq!((state.down_since_ms, state.error), (None, None));
        assert_eq!(s.idle_now(None).await.unwrap().len(), 2);
        let only = s.idle_now(Some(&nlp)).await.unwrap();
        assert_eq!(only, vec![idle("batch/Job/ml/b", "nlp")]);
        // The hourly rows a report groups: of the quotas named (all with
        // None), and none past the limit.
        let hours = s
            .real_usage_hours(Some(&nlp), T, T + 2 * HOUR_MS, 10)
            .await
            .unwrap()
            .unwrap();
        let mut seen: Vec<(i64, &str, i64)> = hours
            .iter()
            .map(|h| (h.hour_ms, h.workload.as_str(), h.gpu.busy))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                (T, "batch/Job/ml/a", 120_000),
                (T, "batch/Job/ml/b", 0),
                (T + HOUR_MS, "batch/Job/ml/a", 30_000)
            ]
        );
        let all = s.real_usage_hours(None, T, T + HOUR_MS, 10).await.unwrap();
        assert_eq!(all.map(|h| h.len()), Some(3), "nlp's two and cv's one");
        assert_eq!(
            s.real_usage_hours(None, T, T + 2 * HOUR_MS, 3)
                .await
                .unwrap(),
            None
        );
        assert_eq!(s.forget_real_usage_before(T + HOUR_MS).await.unwrap(), 3);
    }

    on_both_databases!(a_reading_adds_once_and_sums_by_workload_user_quota_and_hour);
}
