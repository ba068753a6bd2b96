//! What each submitter spent, read from the budget ledger (docs/queueing.md
//! §11, "Between the submitters of one quota"): the accruals and refunds
//! of some quotas within the horizon, summed in SQL per username, cash key
//! and time bucket and folded as they stream in (`submitters::Folder`), so
//! the read holds (submitter, key) pairs, never rows or buckets; it is
//! refused past `submitters::MAX_PAIRS` pairs or `READ_SECONDS`.

use super::ledger::from_limbs;
use super::sql::query::params_list;
use super::sql::SqlStore;
use super::StoreError;
use futures::TryStreamExt;
use quota::submitters::{self, Folder, Spent, Tally, TooManyPairs};
use sqlx::Row;
use std::time::Duration;

/// Quota names per `IN (…)` list.
const NAMES_PER_QUERY: usize = 500;

/// The longest one read of submitters' usage may take: PostgreSQL's
/// `statement_timeout` for its statements, and a deadline around the
/// whole read on either database.
pub const READ_SECONDS: u64 = 10;

/// Why a read of submitters' usage gave no tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("more than {} submitter × cash key pairs", .0.limit)]
    TooMany(TooManyPairs),
    #[error("the read took longer than {seconds} s")]
    TooSlow { seconds: u64 },
}

impl SqlStore {
    /// The usage at `now_ms` of every submitter of `quotas` (accruals less
    /// refunds, decayed with `half_life_ms`) over the horizon
    /// (`submitters::horizon`), at most `max_pairs` (submitter, key) pairs.
    pub async fn submitter_usage(
        &self,
        quotas: &[String],
        now_ms: i64,
        half_life_ms: i64,
        max_pairs: usize,
    ) -> Result<Result<Tally, Refused>, StoreError> {
        let read = self.fold_usage(quotas, now_ms, half_life_ms, max_pairs);
        match tokio::time::timeout(Duration::from_secs(READ_SECONDS), read).await {
            Ok(Err(StoreError::Backend(e))) if e.contains("statement timeout") => {
                Ok(Err(Refused::TooSlow {
                    seconds: READ_SECONDS,
                }))
            }
            Ok(r) => r,
            Err(_) => Ok(Err(Refused::TooSlow {
                seconds: READ_SECONDS,
            })),
        }
    }

    async fn fold_usage(
        &self,
        quotas: &[String],
        now_ms: i64,
        half_life_ms: i64,
        max_pairs: usize,
    ) -> Result<Result<Tally, Refused>, StoreError> {
        let h = half_life_ms.max(1);
        let bucket_ms = (h / submitters::BUCKETS_PER_HALF_LIFE).max(1);
        let (from_ms, to_ms) = (submitters::horizon(now_ms, h), now_ms.saturating_add(1));
        let mut folder = Folder::new(now_ms, h, max_pairs);
        let mut tx = self.read.begin().await?;
        if self.backend == super::sql::Backend::Postgres {
            sqlx::query(&format!(
                "SET LOCAL statement_timeout = {}",
                READ_SECONDS * 1000
            ))
            .execute(&mut *tx)
            .await?;
        }
        for names in quotas.chunks(NAMES_PER_QUERY) {
            let sql = format!(
                "SELECT username AS u, key, CAST(start_ms / {bucket_ms} AS BIGINT) AS b, \
                 MIN(start_ms) AS s, MAX(end_ms) AS e, CAST(SUM(amount_hi) AS BIGINT) AS hi, \
                 CAST(SUM(amount_mid) AS BIGINT) AS mid, CAST(SUM(amount_lo) AS BIGINT) AS lo \
                 FROM budget_ledger WHERE start_ms >= $1 AND start_ms < $2 \
                 AND reason IN ('accrual', 'refund', 'use') AND quota IN ({}) \
                 GROUP BY 1, 2, 3",
                params_list(3, names.len()),
            );
            let mut q = sqlx::query(&sql).bind(from_ms).bind(to_ms);
            for n in names {
                q = q.bind(n.as_str());
            }
            let mut rows = q.fetch(&mut *tx);
            while let Some(r) = rows.try_next().await? {
                let user: Option<String> = r.try_get("u")?;
                let spent = Spent {
                    user: user.unwrap_or_default(),
                    key: r.try_get("key")?,
                    start_ms: r.try_get("s")?,
                    end_ms: r.try_get("e")?,
                    amount: from_limbs(r.try_get("hi")?, r.try_get("mid")?, r.try_get("lo")?),
                };
                if let Err(e) = folder.add(&spent) {
                    return Ok(Err(Refused::TooMany(e)));
                }
            }
        }
        Ok(Ok(folder.into_tally()))
    }
}

#[cfg(test)]
mod tests {
    use super::Refused;
    use crate::store::sql::SqlStore;
    use crate::store::testdb::on_both_databases;
    use quota::object::budgets::{Entry, Reason};

    on_both_databases!(usage_is_folded_per_user_and_key_and_bounded_by_pairs);

    fn entry(
        quota: &str,
        user: Option<&str>,
        start: i64,
        end: i64,
        amount: i128,
        reason: Reason,
    ) -> Entry {
        Entry {
            quota: quota.into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            workload: format!("batch/Job/ml/j{start}"),
            namespace: "ml".into(),
            model: None,
            qos: None,
            user: user.map(Into::into),
            start_ms: start,
            end_ms: end,
            amount,
            reason,
            note: String::new(),
        }
    }

    async fn usage_is_folded_per_user_and_key_and_bounded_by_pairs(s: &SqlStore) {
        {
            let big = 3_600_000_000_000_000_000_000i128 * 1000;
            s.append_ledger(&[
                entry("ml", Some("alice"), 0, 1_000, big, Reason::Accrual),
                entry("ml", Some("alice"), 1_000, 2_000, 5, Reason::Accrual),
                entry("ml", Some("alice"), 2_000, 2_000, -3, Reason::Refund),
                entry("ml", Some("alice"), 10_000, 11_000, 7, Reason::Accrual),
                entry("ml", None, 0, 500, 9, Reason::Accrual),
                entry("ml", Some("bob"), 0, 500, 100, Reason::TopUp),
                entry("other", Some("bob"), 0, 500, 100, Reason::Accrual),
                entry("ml", Some("bob"), 50_000, 50_500, 100, Reason::Accrual),
            ])
            .await
            .unwrap();
            // At 20,000 with a half-life of 5,000: the horizon reaches
            // back past 0; bob's row at 50,000 is in the future and his
            // top-up is not usage; `other` is not read.
            const H: i64 = 5_000;
            let t = s
                .submitter_usage(&["ml".to_string()], 20_000, H, 10)
                .await
                .unwrap()
                .unwrap();
            // Each row in a bucket of its own (a 32nd of the half-life):
            // the fold is the tally of the rows.
            let row =
                |user: &str, start_ms: i64, end_ms: i64, amount: i128| quota::submitters::Spent {
                    user: user.into(),
                    key: "cash/requests.nvidia.com/gpu".into(),
                    start_ms,
                    end_ms,
                    amount,
                };
            let want = quota::submitters::tally(
                &[
                    row("", 0, 500, 9),
                    row("alice", 0, 1_000, big),
                    row("alice", 1_000, 2_000, 5),
                    row("alice", 2_000, 2_000, -3),
                    row("alice", 10_000, 11_000, 7),
                ],
                20_000,
                H,
            );
            assert_eq!(t, want);
            assert_eq!(t["alice"]["cash/requests.nvidia.com/gpu"].raw, big + 9);
            assert!(!t.contains_key("bob"), "{t:?}");
            // Bounded by (submitter, key) pairs, not by buckets: alice's
            // two buckets are one pair; two pairs here, a bound of one is
            // refused.
            assert_eq!(
                s.submitter_usage(&["ml".to_string()], 20_000, H, 1)
                    .await
                    .unwrap(),
                Err(Refused::TooMany(quota::submitters::TooManyPairs {
                    limit: 1
                }))
            );
            assert!(s
                .submitter_usage(&["ml".to_string()], 20_000, H, 2)
                .await
                .unwrap()
                .is_ok());
            assert!(s
                .submitter_usage(&[], 20_000, H, 2)
                .await
                .unwrap()
                .unwrap()
                .is_empty());
        }
    }
}
