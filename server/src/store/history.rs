//! The controller's memory in SQL: usage samples for the portal's charts,
//! kept at falling resolution so they stay bounded, and the pod runs, so a
//! restart still charges pods that ended while the controller was away.
//!
//! Samples are one row per quota and instant (`usage_samples`, migration
//! 0003): a chart reads every key of one quota over a time range, which is
//! one range scan of the primary key `(quota, at_ms)`, and recording 10,000
//! quotas writes 10,000 rows rather than one per key. Quantities are stored
//! as exact Kubernetes quantity strings inside JSON, never as floats.

use super::sql::query::{params_list, qos_text, values_list, Params};
use super::sql::rows::to_json;
use super::sql::SqlStore;
use super::StoreError;
use futures::TryStreamExt;
use quota::keys::cash_target;
use quota::pods::PodRun;
use quota::usage::QosClass;
use quota::{Quantity, Quota, QuotaStatus, ResourceList};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 60 * MINUTE_MS;
pub const DAY_MS: i64 = 24 * HOUR_MS;

// Retention, all in one place. With at most one sample a minute, right
// after a compaction (run it about hourly) a quota holds at most
//   raw:    48 h × 60 + 60 (the hour not yet whole)          ≤ 2,940
//   hourly: (90 d − 48 h) / 1 h + 24 + 1 (day alignment)     ≤ 2,137
//   daily:  730 − 90 + 1                                     ≤   641
// rows, about 5,700 (under 48×60 + 90×24 + 730 = 5,770).

/// An unchanged quota is still sampled this often, so charts have points.
pub const KEEPALIVE_MS: i64 = HOUR_MS;
/// Raw samples younger than this stay as they are; older ones fold into one
/// per hour.
pub const RAW_FOR_MS: i64 = 48 * HOUR_MS;
/// Hourly samples older than this fold into one per day.
pub const HOURLY_FOR_MS: i64 = 90 * DAY_MS;
/// Samples older than this are deleted.
pub const KEEP_FOR_MS: i64 = 730 * DAY_MS;

/// Rows per multi-row statement. Through sqlx, 100 rows a statement records
/// a large forest on SQLite faster than 500 do (docs/benchmarks.md, "Figures
/// once kept in code comments"), and 600 parameters are far below either database's limit.
const BATCH_ROWS: usize = 100;
/// Quotas per usage-sample transaction: each holds SQLite's one writer
/// (which admissions wait for) for about a millisecond.
pub const SAMPLE_ROWS: usize = 50;
/// Quotas the sampler compares (digest, JSON) between two yields to the
/// runtime when none of them needs a row.
const SAMPLE_SCAN: usize = 200;
/// Quotas per fold transaction: at one sample a minute, at most 6,000 raw
/// rows (an hour) or 2,400 hourly rows (a day) are read and rewritten.
pub const FOLD_QUOTAS: usize = 100;
/// Expired rows deleted per statement.
pub const DELETE_ROWS: i64 = 5_000;

/// One point of a quota's usage history. A folded point (older than
/// [`RAW_FOR_MS`]) stands for its whole hour or day: `at_ms` is the start of
/// the bucket, `used`/`selfUsed` the peak within it (cash keys: the last
/// value) and `hard` the last.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub at_ms: i64,
    pub hard: ResourceList,
    pub used: ResourceList,
    pub self_used: ResourceList,
}

/// What one compaction did, in rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Rows older than [`KEEP_FOR_MS`], deleted.
    pub deleted: u64,
    /// Raw rows older than [`RAW_FOR_MS`], replaced by…
    pub folded_into_hours: u64,
    /// …this many hourly rows.
    pub hours_written: u64,
    /// Hourly rows older than [`HOURLY_FOR_MS`], replaced by…
    pub folded_into_days: u64,
    /// …this many daily rows.
    pub days_written: u64,
}

/// The resolution a row stands for (column `grain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grain {
    Raw = 0,
    Hour = 1,
    Day = 2,
}

impl Grain {
    fn code(self) -> i16 {
        self as i16
    }
}

/// Rows of `source` become one row of `into` per quota and `width_ms`.
struct Folding {
    source: Grain,
    into: Grain,
    width_ms: i64,
}

const INTO_HOURS: Folding = Folding {
    source: Grain::Raw,
    into: Grain::Hour,
    width_ms: HOUR_MS,
};

const INTO_DAYS: Folding = Folding {
    source: Grain::Hour,
    into: Grain::Day,
    width_ms: DAY_MS,
};

/// Start of the UTC bucket of `width` that holds `at_ms`.
fn bucket_start(at_ms: i64, width: i64) -> i64 {
    at_ms - at_ms.rem_euclid(width)
}

/// What a sample records of a status (hard, used, selfUsed by value, so
/// `16Gi` and `17179869184` are the same, and the exact cash accumulators),
/// hashed with 64-bit FNV-1a: stable across builds, unlike std's hasher, and
/// cheap for 10,000 quotas a minute. A collision would only delay a chart
/// point until the next keepalive.
fn digest(status: &QuotaStatus, used: &ResourceList) -> String {
    let mut h = Fnv1a::default();
    for list in [&status.hard, used, &status.self_used] {
        h.write(&(list.len() as u64).to_le_bytes());
        for (key, value) in list {
            h.write(key.as_bytes());
            h.write(&[0]);
            h.write(&value.nanos().to_le_bytes());
        }
    }
    h.write(&(status.cash_accrued.len() as u64).to_le_bytes());
    for (key, value) in &status.cash_accrued {
        for part in [key, value] {
            h.write(part.as_bytes());
            h.write(&[0]);
        }
    }
    format!("{:016x}", h.0)
}

struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn read_sample(row: &AnyRow) -> Result<(String, Sample), StoreError> {
    let quota: String = row.try_get("quota")?;
    let at_ms: i64 = row.try_get("at_ms")?;
    let list = |column: &str| -> Result<ResourceList, StoreError> {
        let text: String = row.try_get(column)?;
        serde_json::from_str(&text).map_err(|e| {
            StoreError::Backend(format!(
                "usage sample of bizrq {quota} at {at_ms}: stored {column} is unreadable: {e}"
            ))
        })
    };
    let sample = Sample {
        at_ms,
        hard: list("hard")?,
        used: list("used")?,
        self_used: list("self_used")?,
    };
    Ok((quota, sample))
}

/// One quota's stored samples, their JSON (`hard`, `used`, `selfUsed`)
/// not yet parsed.
pub struct SampleRows {
    quota: String,
    rows: Vec<(i64, String, String, String)>,
}

impl SampleRows {
    /// Rows as they would be stored for `samples` (tests, benchmarks).
    pub fn of(quota: &str, samples: &[Sample]) -> SampleRows {
        let json = |l: &ResourceList| serde_json::to_string(l).unwrap_or_default();
        SampleRows {
            quota: quota.to_string(),
            rows: samples
                .iter()
                .map(|s| (s.at_ms, json(&s.hard), json(&s.used), json(&s.self_used)))
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The instant of the newest row, if any.
    pub fn last_at(&self) -> Option<i64> {
        self.rows.last().map(|r| r.0)
    }

    /// Each sample in turn, oldest first, to `sink`, with only what
    /// `wanted(column, key)` keeps of its lists (`hard`, `used`,
    /// `self_used`; `wanted(column, "")` says whether the column is read at
    /// all): a chart that needs one list or one key holds no more than
    /// that, and never every row at once.
    pub fn parse_each(
        self,
        wanted: impl Fn(&str, &str) -> bool,
        mut sink: impl FnMut(Sample),
    ) -> Result<(), StoreError> {
        let quota = self.quota;
        for (at_ms, hard, used, self_used) in self.rows {
            let list = |column: &str, text: &str| -> Result<ResourceList, StoreError> {
                if !wanted(column, "") {
                    return Ok(ResourceList::new());
                }
                let mut l: ResourceList = serde_json::from_str(text).map_err(|e| {
                    StoreError::Backend(format!(
                        "usage sample of bizrq {quota} at {at_ms}: stored {column} is unreadable: {e}"
                    ))
                })?;
                l.retain(|k, _| wanted(column, k));
                Ok(l)
            };
            sink(Sample {
                at_ms,
                hard: list("hard", &hard)?,
                used: list("used", &used)?,
                self_used: list("self_used", &self_used)?,
            });
        }
        Ok(())
    }

    /// The samples, oldest first; an unreadable one is an error naming it.
    pub fn parse(self) -> Result<Vec<Sample>, StoreError> {
        let quota = self.quota;
        self.rows
            .into_iter()
            .map(|(at_ms, hard, used, self_used)| {
                let list = |column: &str, text: &str| -> Result<ResourceList, StoreError> {
                    serde_json::from_str(text).map_err(|e| {
                        StoreError::Backend(format!(
                            "usage sample of bizrq {quota} at {at_ms}: stored {column} is unreadable: {e}"
                        ))
                    })
                };
                Ok(Sample {
                    at_ms,
                    hard: list("hard", &hard)?,
                    used: list("used", &used)?,
                    self_used: list("self_used", &self_used)?,
                })
            })
            .collect()
    }
}

/// Per key, the value a folded row keeps: the peak, or for cash keys the
/// latest (what has been spent so far, not the most ever counted).
#[derive(Default)]
struct Peaks(BTreeMap<String, (i64, Quantity)>);

impl Peaks {
    fn add(&mut self, at_ms: i64, list: ResourceList) {
        for (key, value) in list {
            match self.0.entry(key) {
                Entry::Vacant(e) => {
                    e.insert((at_ms, value));
                }
                Entry::Occupied(mut e) => {
                    let (was_at, was) = *e.get();
                    let replace = if cash_target(e.key()).is_some() {
                        at_ms > was_at
                    } else {
                        value > was
                    };
                    if replace {
                        e.insert((at_ms, value));
                    }
                }
            }
        }
    }

    fn into_list(self) -> ResourceList {
        self.0.into_iter().map(|(k, (_, v))| (k, v)).collect()
    }
}

/// One quota's bucket being folded. Rows may arrive in any order: "last" is
/// decided by `at_ms`, the peak by value.
#[derive(Default)]
struct Fold {
    hard_at: Option<i64>,
    hard: ResourceList,
    used: Peaks,
    self_used: Peaks,
}

impl Fold {
    fn add(&mut self, s: Sample) {
        if self.hard_at.is_none_or(|at| s.at_ms > at) {
            self.hard_at = Some(s.at_ms);
            self.hard = s.hard;
        }
        self.used.add(s.at_ms, s.used);
        self.self_used.add(s.at_ms, s.self_used);
    }
}

fn qos_from_text(uid: &str, s: &str) -> Result<QosClass, StoreError> {
    match s {
        "Guaranteed" => Ok(QosClass::Guaranteed),
        "Burstable" => Ok(QosClass::Burstable),
        "BestEffort" => Ok(QosClass::BestEffort),
        other => Err(StoreError::Backend(format!(
            "pod run {uid}: stored QoS class '{other}' is unknown"
        ))),
    }
}

/// One quota's row of a usage sample (`SqlStore::record_samples`).
struct NewSample<'a> {
    quota: &'a str,
    digest: String,
    hard: String,
    used: String,
    self_used: String,
}

impl SqlStore {
    /// Records one sample per quota at `at_ms`, in transactions of
    /// [`SAMPLE_ROWS`] quotas (so a sample of 10,000 quotas never holds the
    /// database's writer for long: admissions commit between them), and
    /// returns how many were written. `quotas` is the whole forest: a
    /// sample's `used` is what runs in the quota's subtree (its
    /// descendants' `selfUsed` with its own; cash keys: what it spent),
    /// never what a parent carved out for its children. A quota whose hard, used, selfUsed and
    /// cash accumulators equal its latest sample is skipped unless that
    /// sample is [`KEEPALIVE_MS`] old; an `at_ms` not after a quota's latest
    /// sample writes nothing for it (samples only move forward).
    pub async fn record_samples(&self, at_ms: i64, quotas: &[Quota]) -> Result<usize, StoreError> {
        // One row per name (the last given): one statement may not touch a
        // row twice on PostgreSQL.
        let by_name: BTreeMap<&str, &Quota> = quotas.iter().map(|q| (q.name(), q)).collect();
        // What runs in each quota's subtree: a sample's `used`
        // (`quota::rollup::sampled_used`), at a parent never its carve-outs.
        let in_use = quota::rollup::subtree_in_use(quotas);
        // Read outside the writes: a sample written meanwhile by another
        // replica is newer, and the writes below keep the newest
        // (`ON CONFLICT … WHERE excluded.at_ms > …`, `DO NOTHING`).
        let latest: HashMap<String, (i64, String)> =
            sqlx::query("SELECT quota, at_ms, digest FROM usage_latest")
                .fetch_all(&self.read)
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?))))
                .collect::<Result<_, sqlx::Error>>()?;

        // Built a transaction's worth at a time, with a rest (`Pace`) after
        // each commit and every `SAMPLE_SCAN` quotas skipped: the digests
        // and JSON of 10,000 quotas are tens of ms of CPU (and the
        // database's inserts more) that admissions would otherwise wait
        // behind.
        let mut written = 0;
        let mut rows: Vec<NewSample> = Vec::with_capacity(SAMPLE_ROWS);
        let mut scanned = 0;
        let mut pace = crate::util::Pace::start();
        let last = by_name.len();
        for (i, (name, q)) in by_name.into_iter().enumerate() {
            let used = quota::rollup::sampled_used(&q.status, in_use.get(name));
            let digest = digest(&q.status, &used);
            let skip = latest.get(name).is_some_and(|(last_at, last_digest)| {
                let due = at_ms - last_at >= KEEPALIVE_MS;
                at_ms <= *last_at || (*last_digest == digest && !due)
            });
            if !skip {
                rows.push(NewSample {
                    quota: name,
                    digest,
                    hard: to_json(&q.status.hard)?,
                    used: to_json(&used)?,
                    self_used: to_json(&q.status.self_used)?,
                });
            }
            scanned += 1;
            if rows.len() < SAMPLE_ROWS && i + 1 < last {
                if scanned >= SAMPLE_SCAN {
                    scanned = 0;
                    pace.rest().await;
                }
                continue;
            }
            scanned = 0;
            if rows.is_empty() {
                continue;
            }
            self.write_samples(at_ms, &rows).await?;
            written += rows.len();
            rows.clear();
            pace.rest().await;
        }
        Ok(written)
    }

    /// One transaction of samples (`record_samples`).
    async fn write_samples(&self, at_ms: i64, rows: &[NewSample<'_>]) -> Result<(), StoreError> {
        let mut tx = self.write.begin().await?;
        if self.backend == super::sql::Backend::Postgres {
            // A sample lost in a crash is taken again at the next tick:
            // its commit need not wait for the log's flush, and so does
            // not queue 200 flushes a sample among the admissions' own
            // (which stay durable: this is this transaction's only).
            sqlx::query("SET LOCAL synchronous_commit = off")
                .execute(&mut *tx)
                .await?;
        }
        let sql = format!(
            "INSERT INTO usage_samples (quota, at_ms, grain, hard, used, self_used) \
             VALUES {} ON CONFLICT (quota, at_ms) DO NOTHING",
            values_list(Params::of(&tx), rows.len(), 6)
        );
        let mut query = sqlx::query(&sql);
        for r in rows {
            query = query
                .bind(r.quota)
                .bind(at_ms)
                .bind(Grain::Raw.code())
                .bind(r.hard.as_str())
                .bind(r.used.as_str())
                .bind(r.self_used.as_str());
        }
        query.execute(&mut *tx).await?;

        let sql = format!(
            "INSERT INTO usage_latest (quota, at_ms, digest) VALUES {} \
             ON CONFLICT (quota) DO UPDATE SET at_ms = excluded.at_ms, digest = excluded.digest \
             WHERE excluded.at_ms > usage_latest.at_ms",
            values_list(Params::of(&tx), rows.len(), 3)
        );
        let mut query = sqlx::query(&sql);
        for r in rows {
            query = query.bind(r.quota).bind(at_ms).bind(r.digest.as_str());
        }
        query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Samples of one quota with `from_ms ≤ at_ms ≤ to_ms`, oldest first.
    pub async fn samples(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Sample>, StoreError> {
        self.sample_rows(quota, from_ms, to_ms).await?.parse()
    }

    /// `samples` as stored, their JSON not yet parsed: parsing thousands
    /// of rows of up to 256 keys is CPU work a heavy request does on the
    /// render threads (`SampleRows::parse`), not on the runtime's.
    pub async fn sample_rows(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<SampleRows, StoreError> {
        self.sample_rows_from(quota, from_ms, to_ms, i64::MAX, false)
            .await
    }

    /// At most `limit` of `quota`'s rows with `from_ms ≤ at_ms ≤ to_ms`,
    /// oldest first, unparsed; `used_only`: the other lists read as empty
    /// (a child's samples in a children chart). A reader of many rows goes
    /// through them a `limit` at a time, so what it holds unparsed stays
    /// bounded.
    pub async fn sample_rows_from(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
        limit: i64,
        used_only: bool,
    ) -> Result<SampleRows, StoreError> {
        let columns = if used_only {
            "at_ms, '{}' AS hard, used, '{}' AS self_used"
        } else {
            "at_ms, hard, used, self_used"
        };
        let rows = sqlx::query(&format!(
            "SELECT {columns} FROM usage_samples \
             WHERE quota = $1 AND at_ms >= $2 AND at_ms <= $3 ORDER BY at_ms LIMIT $4"
        ))
        .bind(quota)
        .bind(from_ms)
        .bind(to_ms)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        let rows = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(SampleRows {
            quota: quota.to_string(),
            rows,
        })
    }

    /// Applies retention as of `now_ms`: deletes what is older than
    /// [`KEEP_FOR_MS`], folds raw samples older than [`RAW_FOR_MS`] into one
    /// row per UTC hour and hourly rows older than [`HOURLY_FOR_MS`] into one
    /// row per UTC day. Only whole buckets are folded, so running it again
    /// with the same `now_ms` changes nothing.
    ///
    /// Work goes in short transactions (at most [`FOLD_QUOTAS`] quotas × one
    /// bucket, or [`DELETE_ROWS`] deletions, each): on SQLite admissions
    /// share the one writer and must not wait behind a whole pass.
    pub async fn compact_samples(&self, now_ms: i64) -> Result<CompactStats, StoreError> {
        let mut stats = CompactStats::default();
        // Oldest first: nothing is folded only to be deleted.
        let expired = now_ms - KEEP_FOR_MS;
        for grain in [Grain::Raw, Grain::Hour, Grain::Day] {
            loop {
                let done = sqlx::query(
                    "DELETE FROM usage_samples WHERE (quota, at_ms) IN \
                     (SELECT quota, at_ms FROM usage_samples WHERE grain = $1 AND at_ms < $2 LIMIT $3)",
                )
                .bind(grain.code())
                .bind(expired)
                .bind(DELETE_ROWS)
                .execute(&self.write)
                .await?
                .rows_affected();
                stats.deleted += done;
                if done == 0 {
                    break;
                }
            }
        }
        // A quota unsampled for that long has no samples left either.
        sqlx::query("DELETE FROM usage_latest WHERE at_ms < $1")
            .bind(expired)
            .execute(&self.write)
            .await?;

        // Every quota with samples has a latest sample at least as recent
        // (both are written in one transaction, and dropped together above).
        let quotas: Vec<String> = sqlx::query("SELECT quota FROM usage_latest ORDER BY quota")
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        // Hours first: raw rows past both lines (a long outage) become hours,
        // then days.
        let hour_cutoff = bucket_start(now_ms - RAW_FOR_MS, HOUR_MS);
        (stats.folded_into_hours, stats.hours_written) =
            self.fold(&INTO_HOURS, hour_cutoff, &quotas).await?;
        let day_cutoff = bucket_start(now_ms - HOURLY_FOR_MS, DAY_MS);
        (stats.folded_into_days, stats.days_written) =
            self.fold(&INTO_DAYS, day_cutoff, &quotas).await?;
        Ok(stats)
    }

    /// Folds the rows of the next finer grain older than `before` (a bucket
    /// boundary) into one row per quota and bucket, bucket by bucket, oldest
    /// first. Returns (rows folded, rows written).
    async fn fold(
        &self,
        folding: &Folding,
        before: i64,
        quotas: &[String],
    ) -> Result<(u64, u64), StoreError> {
        let width = folding.width_ms;
        let (mut folded, mut written) = (0, 0);
        let mut from = i64::MIN;
        loop {
            let next = sqlx::query(
                "SELECT at_ms FROM usage_samples WHERE grain = $1 AND at_ms >= $2 AND at_ms < $3 \
                 ORDER BY at_ms LIMIT 1",
            )
            .bind(folding.source.code())
            .bind(from)
            .bind(before)
            .fetch_optional(&self.read)
            .await?;
            let Some(next) = next else {
                break;
            };
            let start = bucket_start(next.try_get(0)?, width);
            for chunk in quotas.chunks(FOLD_QUOTAS) {
                let (f, w) = self.fold_bucket(folding, start, chunk).await?;
                folded += f;
                written += w;
            }
            // Onwards even if a row was left (a quota missing from the list):
            // a pass always ends.
            from = start + width;
        }
        Ok((folded, written))
    }

    /// Folds one bucket of a few quotas, in one transaction.
    async fn fold_bucket(
        &self,
        folding: &Folding,
        start: i64,
        quotas: &[String],
    ) -> Result<(u64, u64), StoreError> {
        // `+grain` keeps both planners off the (grain, at_ms) index, which
        // would read the bucket of every quota for each chunk: these rows are
        // found by primary key, quota by quota.
        let range = format!(
            "FROM usage_samples WHERE +grain = $1 AND at_ms >= $2 AND at_ms < $3 AND quota IN ({})",
            params_list(4, quotas.len())
        );
        let select = format!("SELECT quota, at_ms, hard, used, self_used {range}");
        let delete = format!("DELETE {range}");
        fn bind_range<'q>(
            sql: &'q str,
            folding: &Folding,
            start: i64,
            quotas: &'q [String],
        ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
            let mut query = sqlx::query(sql)
                .bind(folding.source.code())
                .bind(start)
                .bind(start + folding.width_ms);
            for quota in quotas {
                query = query.bind(quota.as_str());
            }
            query
        }

        let mut tx = self.write.begin().await?;
        let mut buckets: BTreeMap<String, Fold> = BTreeMap::new();
        let mut folded = 0;
        let mut rows = bind_range(&select, folding, start, quotas).fetch(&mut *tx);
        while let Some(row) = rows.try_next().await? {
            let (quota, sample) = read_sample(&row)?;
            buckets.entry(quota).or_default().add(sample);
            folded += 1;
        }
        drop(rows);
        if buckets.is_empty() {
            return Ok((0, 0));
        }
        bind_range(&delete, folding, start, quotas)
            .execute(&mut *tx)
            .await?;

        let sql = format!(
            "INSERT INTO usage_samples (quota, at_ms, grain, hard, used, self_used) VALUES {}",
            values_list(Params::of(&tx), buckets.len(), 6)
        );
        let rows = buckets
            .into_iter()
            .map(|(quota, f)| {
                Ok((
                    quota,
                    to_json(&f.hard)?,
                    to_json(&f.used.into_list())?,
                    to_json(&f.self_used.into_list())?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let mut insert = sqlx::query(&sql);
        for (quota, hard, used, self_used) in &rows {
            insert = insert
                .bind(quota.as_str())
                .bind(start)
                .bind(folding.into.code())
                .bind(hard.as_str())
                .bind(used.as_str())
                .bind(self_used.as_str());
        }
        insert.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok((folded, rows.len() as u64))
    }

    /// Writes pod runs by uid (insert or replace) and then removes `deletes`,
    /// all in one transaction: a uid in both ends up removed.
    pub async fn save_pod_runs(
        &self,
        upserts: &[(String, PodRun)],
        deletes: &[String],
    ) -> Result<(), StoreError> {
        // The last run given for a uid wins; one statement may not touch a
        // row twice on PostgreSQL.
        let by_uid: BTreeMap<&str, &PodRun> = upserts
            .iter()
            .map(|(uid, run)| (uid.as_str(), run))
            .collect();
        let rows = by_uid
            .into_iter()
            .map(|(uid, run)| Ok((uid, run, to_json(&run.usage)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;

        let mut tx = self.write.begin().await?;
        for chunk in rows.chunks(BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO pod_runs (uid, quota, usage, qos, start_ms, end_ms, workload) VALUES {} \
                 ON CONFLICT (uid) DO UPDATE SET quota = excluded.quota, usage = excluded.usage, \
                 qos = excluded.qos, start_ms = excluded.start_ms, end_ms = excluded.end_ms, \
                 workload = excluded.workload",
                values_list(Params::of(&tx), chunk.len(), 7)
            );
            let mut query = sqlx::query(&sql);
            for (uid, run, usage) in chunk {
                query = query
                    .bind(*uid)
                    .bind(run.quota.as_str())
                    .bind(usage.as_str())
                    .bind(run.qos.map(qos_text))
                    .bind(run.start_ms)
                    .bind(run.end_ms)
                    .bind(&*run.workload);
            }
            query.execute(&mut *tx).await?;
        }
        for chunk in deletes.chunks(BATCH_ROWS) {
            let sql = format!(
                "DELETE FROM pod_runs WHERE uid IN ({})",
                Params::of(&tx).list(chunk.len())
            );
            let mut query = sqlx::query(&sql);
            for uid in chunk {
                query = query.bind(uid.as_str());
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every stored pod run, by uid.
    pub async fn load_pod_runs(&self) -> Result<Vec<(String, PodRun)>, StoreError> {
        let rows = sqlx::query(
            "SELECT uid, quota, usage, qos, start_ms, end_ms, workload FROM pod_runs ORDER BY uid",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                let uid: String = row.try_get("uid")?;
                let usage: String = row.try_get("usage")?;
                let usage = serde_json::from_str(&usage).map_err(|e| {
                    StoreError::Backend(format!("pod run {uid}: stored usage is unreadable: {e}"))
                })?;
                let qos = row
                    .try_get::<Option<String>, _>("qos")?
                    .map(|s| qos_from_text(&uid, &s))
                    .transpose()?;
                let run = PodRun {
                    quota: row.try_get("quota")?,
                    usage,
                    qos,
                    start_ms: row.try_get("start_ms")?,
                    end_ms: row.try_get("end_ms")?,
                    workload: row.try_get::<String, _>("workload")?.into(),
                };
                Ok((uid, run))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::QuotaSpec;
    use std::time::Instant;

    use crate::store::testdb::on_both_databases;

    on_both_databases!(
        record_skips_unchanged_and_keeps_hourly,
        samples_in_range_oldest_first,
        compaction_folds_and_is_idempotent,
        ten_thousand_quotas_in_one_call,
        a_sample_commits_in_bounded_transactions_that_writers_get_between,
        a_checkpoint_copies_the_whole_log_while_nothing_reads,
        pod_runs_round_trip,
    );

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";
    /// A UTC midnight (2024-10-04), so buckets are easy to reason about.
    const T: i64 = 20_000 * DAY_MS;

    fn list(entries: &[(&str, &str)]) -> ResourceList {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }

    /// A quota with `hard` GPUs, `gpus` of them used and `cash` card-hours
    /// spent (the accumulator follows the cash).
    fn quota(name: &str, hard: &str, gpus: &str, cash: &str) -> Quota {
        let mut q = Quota::new(
            name,
            QuotaSpec {
                hard: list(&[(GPU, hard), (CASH, "1000")]),
                ..Default::default()
            },
        );
        q.status.hard = q.spec.hard.clone();
        q.status.used = list(&[(GPU, gpus), (CASH, cash)]);
        q.status.self_used = q.status.used.clone();
        q.status
            .cash_accrued
            .insert(CASH.into(), format!("{cash}000"));
        q
    }

    fn at_and(samples: &[Sample], key: &str) -> Vec<(i64, String)> {
        samples
            .iter()
            .map(|s| (s.at_ms, quota::resources::get(&s.used, key).to_string()))
            .collect()
    }

    /// Records one quota; returns how many samples were written (0 or 1).
    async fn record_one(store: &SqlStore, at_ms: i64, q: &Quota) -> usize {
        store
            .record_samples(at_ms, std::slice::from_ref(q))
            .await
            .unwrap()
    }

    async fn record_skips_unchanged_and_keeps_hourly(store: &SqlStore) {
        let t0 = T + 10 * HOUR_MS;
        let a = quota("a", "16", "4", "10");
        assert_eq!(record_one(store, t0, &a).await, 1);
        assert_eq!(record_one(store, t0 + MINUTE_MS, &a).await, 0, "unchanged");
        // Same values written differently are the same sample.
        let mut same = a.clone();
        same.status
            .used
            .insert(GPU.into(), "4000m".parse().unwrap());
        assert_eq!(record_one(store, t0 + 2 * MINUTE_MS, &same).await, 0);

        let t1 = t0 + 3 * MINUTE_MS;
        let b = quota("a", "16", "6", "10");
        assert_eq!(record_one(store, t1, &b).await, 1, "used changed");
        assert_eq!(
            record_one(store, t1 + KEEPALIVE_MS - 1, &b).await,
            0,
            "unchanged, last sample under an hour old"
        );
        let t2 = t1 + KEEPALIVE_MS;
        assert_eq!(
            record_one(store, t2, &b).await,
            1,
            "unchanged for an hour: a keepalive sample"
        );
        // Only the exact cash accumulator moved.
        let mut c = b.clone();
        c.status.cash_accrued.insert(CASH.into(), "10001".into());
        let t3 = t2 + MINUTE_MS;
        assert_eq!(record_one(store, t3, &c).await, 1, "cash accrued");
        // Not after the latest sample: nothing is written.
        let d = quota("a", "16", "9", "11");
        assert_eq!(record_one(store, t3, &d).await, 0);
        assert_eq!(record_one(store, t3 - 1, &d).await, 0);

        let got = store.samples("a", 0, i64::MAX).await.unwrap();
        assert_eq!(
            at_and(&got, GPU),
            vec![
                (t0, "4".to_string()),
                (t1, "6".to_string()),
                (t2, "6".to_string()),
                (t3, "6".to_string()),
            ]
        );
        assert_eq!(
            got[0],
            Sample {
                at_ms: t0,
                hard: a.status.hard.clone(),
                used: a.status.used.clone(),
                self_used: a.status.self_used.clone(),
            }
        );
    }

    async fn samples_in_range_oldest_first(store: &SqlStore) {
        let t0 = T;
        for i in 0..6 {
            let a = quota("a", "16", &i.to_string(), "0");
            let b = quota("b", "8", &(10 + i).to_string(), "0");
            // Order within a call does not matter.
            let n = store
                .record_samples(t0 + i * MINUTE_MS, &[b, a])
                .await
                .unwrap();
            assert_eq!(n, 2);
        }
        let got = store
            .samples("a", t0 + MINUTE_MS, t0 + 3 * MINUTE_MS)
            .await
            .unwrap();
        assert_eq!(
            at_and(&got, GPU),
            (1..=3)
                .map(|i| (t0 + i * MINUTE_MS, i.to_string()))
                .collect::<Vec<_>>(),
            "both ends included, oldest first, only quota a"
        );
        assert!(store
            .samples("a", t0 + 10 * MINUTE_MS, t0 + HOUR_MS)
            .await
            .unwrap()
            .is_empty());
        assert!(store
            .samples("nobody", 0, i64::MAX)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(store.samples("b", 0, i64::MAX).await.unwrap().len(), 6);
    }

    async fn compaction_folds_and_is_idempotent(store: &SqlStore) {
        let rec = |at: i64, q: Quota| async move {
            assert_eq!(record_one(store, at, &q).await, 1, "at {at}");
        };
        // Past retention: deleted.
        rec(T - 800 * DAY_MS, quota("a", "16", "1", "1")).await;
        // A day 100 days back, still raw (compaction never ran): one daily
        // row with the peak of used, the last hard and the last cash (lower
        // than before: a child's cash carve-out went back).
        let day = T - 100 * DAY_MS;
        rec(day + HOUR_MS, quota("a", "16", "2", "45")).await;
        rec(day + 5 * HOUR_MS, quota("a", "16", "9", "50")).await;
        rec(day + 13 * HOUR_MS, quota("a", "12", "3", "40")).await;
        // Two hours three days back: one hourly row each.
        let hour = T - 3 * DAY_MS + 7 * HOUR_MS;
        rec(hour + 10 * MINUTE_MS, quota("a", "16", "2", "100")).await;
        rec(hour + 15 * MINUTE_MS, quota("b", "8", "3", "0")).await;
        rec(hour + 20 * MINUTE_MS, quota("a", "16", "8", "101")).await;
        rec(hour + 40 * MINUTE_MS, quota("b", "8", "1", "0")).await;
        rec(hour + 50 * MINUTE_MS, quota("a", "16", "5", "102")).await;
        rec(hour + 90 * MINUTE_MS, quota("a", "16", "1", "103")).await;
        // Either side of the 48-hour line: the hour before it folds, the
        // one after stays raw.
        rec(
            T - 48 * HOUR_MS - 30 * MINUTE_MS,
            quota("a", "16", "7", "104"),
        )
        .await;
        rec(T - 47 * HOUR_MS, quota("a", "16", "4", "105")).await;
        rec(T - 10 * MINUTE_MS, quota("a", "16", "5", "106")).await;

        let stats = store.compact_samples(T).await.unwrap();
        assert_eq!(
            stats,
            CompactStats {
                deleted: 1,
                folded_into_hours: 10,
                hours_written: 7,
                folded_into_days: 3,
                days_written: 1,
            }
        );
        let expected_a = vec![
            (day, "12", "9", "40"),
            (hour, "16", "8", "102"),
            (hour + HOUR_MS, "16", "1", "103"),
            (T - 49 * HOUR_MS, "16", "7", "104"),
            (T - 47 * HOUR_MS, "16", "4", "105"),
            (T - 10 * MINUTE_MS, "16", "5", "106"),
        ];
        let check = |got: Vec<Sample>, want: &[(i64, &str, &str, &str)]| {
            let got: Vec<_> = got
                .iter()
                .map(|s| {
                    assert_eq!(s.used, s.self_used, "at {}", s.at_ms);
                    (
                        s.at_ms,
                        quota::resources::get(&s.hard, GPU).to_string(),
                        quota::resources::get(&s.used, GPU).to_string(),
                        quota::resources::get(&s.used, CASH).to_string(),
                    )
                })
                .collect();
            let want: Vec<_> = want
                .iter()
                .map(|(at, h, u, c)| (*at, h.to_string(), u.to_string(), c.to_string()))
                .collect();
            assert_eq!(got, want);
        };
        let a1 = store.samples("a", 0, i64::MAX).await.unwrap();
        check(a1.clone(), &expected_a);
        let b1 = store.samples("b", 0, i64::MAX).await.unwrap();
        check(b1.clone(), &[(hour, "8", "3", "0")]);

        assert_eq!(
            store.compact_samples(T).await.unwrap(),
            CompactStats::default()
        );
        assert_eq!(store.samples("a", 0, i64::MAX).await.unwrap(), a1);
        assert_eq!(store.samples("b", 0, i64::MAX).await.unwrap(), b1);

        // 88 days on, the hourly rows of three days back are 91 days old:
        // they fold into their day; the raw rows fold into hours.
        let later = T + 88 * DAY_MS;
        let stats = store.compact_samples(later).await.unwrap();
        assert_eq!(
            stats,
            CompactStats {
                deleted: 0,
                folded_into_hours: 2,
                hours_written: 2,
                folded_into_days: 4,
                days_written: 2,
            }
        );
        check(
            store.samples("a", 0, i64::MAX).await.unwrap(),
            &[
                (day, "12", "9", "40"),
                (T - 3 * DAY_MS, "16", "8", "104"),
                (T - 47 * HOUR_MS, "16", "4", "105"),
                (T - HOUR_MS, "16", "5", "106"),
            ],
        );
        check(
            store.samples("b", 0, i64::MAX).await.unwrap(),
            &[(T - 3 * DAY_MS, "8", "3", "0")],
        );
        assert_eq!(
            store.compact_samples(later).await.unwrap(),
            CompactStats::default()
        );

        // Two years after the oldest day, it goes.
        let stats = store.compact_samples(day + KEEP_FOR_MS + 1).await.unwrap();
        assert_eq!(stats.deleted, 1);
        assert_eq!(store.samples("a", 0, day).await.unwrap(), vec![]);
    }

    async fn ten_thousand_quotas_in_one_call(store: &SqlStore) {
        let quotas = |gpus: &str| -> Vec<Quota> {
            (0..10_000)
                .map(|i| {
                    let mut q = quota(&format!("team-{i:05}"), "64", gpus, "123.5");
                    for l in [
                        &mut q.status.hard,
                        &mut q.status.used,
                        &mut q.status.self_used,
                    ] {
                        l.insert("requests.cpu".into(), "250500m".parse().unwrap());
                        l.insert("requests.memory".into(), "512Gi".parse().unwrap());
                        l.insert(format!("{GPU}.A100"), "16".parse().unwrap());
                        l.insert("pods".into(), "200".parse().unwrap());
                    }
                    q
                })
                .collect()
        };
        let (first, second) = (quotas("8"), quotas("9"));
        let backend = store.backend;

        let started = Instant::now();
        assert_eq!(store.record_samples(T, &first).await.unwrap(), 10_000);
        eprintln!("{backend:?}: 10,000 new samples in {:?}", started.elapsed());

        let started = Instant::now();
        assert_eq!(
            store.record_samples(T + MINUTE_MS, &first).await.unwrap(),
            0
        );
        eprintln!(
            "{backend:?}: 10,000 unchanged, skipped in {:?}",
            started.elapsed()
        );

        let started = Instant::now();
        assert_eq!(
            store
                .record_samples(T + 2 * MINUTE_MS, &second)
                .await
                .unwrap(),
            10_000
        );
        eprintln!(
            "{backend:?}: 10,000 changed samples in {:?}",
            started.elapsed()
        );

        let got = store.samples("team-04242", 0, i64::MAX).await.unwrap();
        assert_eq!(
            at_and(&got, GPU),
            vec![(T, "8".into()), (T + 2 * MINUTE_MS, "9".into())]
        );
        assert_eq!(got[1].used, second[4242].status.used);
    }

    /// A sample of 10,000 quotas is written in transactions of
    /// `SAMPLE_ROWS` through the background's connections, and another
    /// writer (an admission's commit, here a setting) gets in between them:
    /// it sees part of the sample committed, never part of a transaction.
    /// Structure, not timing: what the writer saw, not how long it waited.
    async fn a_sample_commits_in_bounded_transactions_that_writers_get_between(store: &SqlStore) {
        let quotas: Vec<Quota> = (0..10_000)
            .map(|i| quota(&format!("team-{i:05}"), "64", "8", "1"))
            .collect();
        let background = store.background();
        let done = std::sync::atomic::AtomicBool::new(false);
        let sampler = async {
            let n = background.record_samples(T, &quotas).await.unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            n
        };
        let writer = async {
            let mut seen = Vec::new();
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                store.set_setting("probe", &i.to_string()).await.unwrap();
                let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM usage_samples")
                    .fetch_one(&store.write)
                    .await
                    .unwrap();
                seen.push(n as usize);
            }
            seen
        };
        let (written, seen) = tokio::join!(sampler, writer);
        assert_eq!(written, 10_000);
        assert!(
            seen.iter().all(|n| n % SAMPLE_ROWS == 0),
            "only whole transactions of {SAMPLE_ROWS} are ever seen: {seen:?}"
        );
        let between = seen.iter().filter(|n| **n > 0 && **n < 10_000).count();
        assert!(
            between >= 10,
            "the writer committed {between} times while the sample was under way: {seen:?}"
        );
    }

    /// What the writer's own checkpoints (every 1,000 pages of log) left,
    /// `checkpoint` copies into the database when nothing else holds the
    /// log, so the log is reused instead of growing. PostgreSQL has
    /// nothing to do.
    async fn a_checkpoint_copies_the_whole_log_while_nothing_reads(store: &SqlStore) {
        use crate::store::sql::Backend;
        let quotas: Vec<Quota> = (0..500)
            .map(|i| quota(&format!("team-{i:03}"), "64", "8", "1"))
            .collect();
        store.record_samples(T, &quotas).await.unwrap();
        match (store.backend, store.checkpoint().await.unwrap()) {
            (Backend::Sqlite, Some((log, copied))) => {
                assert!(log > 0, "the samples went to the log");
                assert_eq!(copied, log, "all of it copied");
            }
            (Backend::Postgres, None) => {}
            (b, got) => panic!("{b:?}: {got:?}"),
        }
    }

    async fn pod_runs_round_trip(store: &SqlStore) {
        let run = |quota: &str, usage: &[(&str, &str)], qos, start_ms, end_ms| PodRun {
            quota: quota.into(),
            usage: list(usage).into(),
            qos,
            start_ms,
            end_ms,
            workload: format!("batch/Job/ml/{quota}").into(),
        };
        let mut runs = vec![
            (
                "uid-1".to_string(),
                run(
                    "a",
                    &[
                        (GPU, "2"),
                        ("requests.memory", "16Gi"),
                        ("requests.cpu", "500m"),
                    ],
                    Some(QosClass::Guaranteed),
                    1_000,
                    None,
                ),
            ),
            ("uid-2".to_string(), run("b", &[], None, 2_000, Some(3_000))),
            (
                "uid-3".to_string(),
                run(
                    "a",
                    &[("requests.cpu", "1n")],
                    Some(QosClass::Burstable),
                    -5,
                    Some(i64::MAX),
                ),
            ),
            (
                "uid-4".to_string(),
                run("b", &[(GPU, "8")], Some(QosClass::BestEffort), 0, Some(0)),
            ),
        ];
        store.save_pod_runs(&runs, &[]).await.unwrap();
        assert_eq!(store.load_pod_runs().await.unwrap(), runs);
        let loaded = store.load_pod_runs().await.unwrap();
        assert_eq!(loaded[0].1.usage["requests.memory"].to_string(), "16Gi");

        // Upsert (uid-1 ended, moved), insert uid-5, delete uid-2 and an
        // unknown uid.
        runs[0].1.end_ms = Some(9_000);
        runs[0].1.quota = "c".into();
        let new = (
            "uid-5".to_string(),
            run("c", &[(GPU, "1")], None, 7_000, None),
        );
        store
            .save_pod_runs(
                &[runs[0].clone(), new.clone()],
                &["uid-2".into(), "uid-unknown".into()],
            )
            .await
            .unwrap();
        runs.remove(1);
        runs.push(new);
        assert_eq!(store.load_pod_runs().await.unwrap(), runs);

        // A uid both written and deleted ends up deleted.
        store
            .save_pod_runs(&[runs[0].clone()], &[runs[0].0.clone()])
            .await
            .unwrap();
        runs.remove(0);
        assert_eq!(store.load_pod_runs().await.unwrap(), runs);

        // Thousands at once (a restart), then all gone at once.
        let many: Vec<(String, PodRun)> = (0..3_000)
            .map(|i| {
                let end = (i % 2 == 0).then_some(i + 10);
                (format!("pod-{i:05}"), run("d", &[(GPU, "1")], None, i, end))
            })
            .collect();
        store.save_pod_runs(&many, &[]).await.unwrap();
        let all = store.load_pod_runs().await.unwrap();
        assert_eq!(all.len(), runs.len() + many.len());
        assert_eq!(&all[..many.len()], &many[..]);
        let uids: Vec<String> = many.iter().map(|(u, _)| u.clone()).collect();
        store.save_pod_runs(&[], &uids).await.unwrap();
        assert_eq!(store.load_pod_runs().await.unwrap(), runs);
    }
}
