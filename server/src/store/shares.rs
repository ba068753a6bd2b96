//! What each submitter spent, read from the budget ledger (docs/queueing.md
//! §11, "Between the submitters of one quota"): the accruals and refunds
//! of some quotas over a range, summed in SQL per username, cash key and
//! time bucket, so the read is bounded by submitters × keys × buckets and
//! never by the ledger's rows.

use super::history::params_list;
use super::ledger::{from_limbs, TooMany};
use super::sql::SqlStore;
use super::StoreError;
use quota::submitters::Spent;
use sqlx::Row;

/// Quota names per `IN (…)` list.
const NAMES_PER_QUERY: usize = 500;

impl SqlStore {
    /// The spending (accruals less refunds) of `quotas` in `[from_ms,
    /// to_ms)`, per username (empty: none recorded), cash key and bucket of
    /// `bucket_ms` (by each row's start): each bucket one `Spent` spanning
    /// its rows. More than `limit` groups is `TooMany`.
    pub async fn submitter_spending(
        &self,
        quotas: &[String],
        from_ms: i64,
        to_ms: i64,
        bucket_ms: i64,
        limit: usize,
    ) -> Result<Result<Vec<Spent>, TooMany>, StoreError> {
        let bucket_ms = bucket_ms.max(1);
        let mut out: Vec<Spent> = Vec::new();
        for names in quotas.chunks(NAMES_PER_QUERY) {
            let room = limit + 1 - out.len().min(limit);
            let sql = format!(
                "SELECT username AS u, key, CAST(start_ms / {bucket_ms} AS BIGINT) AS b, \
                 MIN(start_ms) AS s, MAX(end_ms) AS e, CAST(SUM(amount_hi) AS BIGINT) AS hi, \
                 CAST(SUM(amount_mid) AS BIGINT) AS mid, CAST(SUM(amount_lo) AS BIGINT) AS lo \
                 FROM budget_ledger WHERE start_ms >= $1 AND start_ms < $2 \
                 AND reason IN ('accrual', 'refund') AND quota IN ({}) \
                 GROUP BY 1, 2, 3 LIMIT {room}",
                params_list(3, names.len()),
            );
            let mut q = sqlx::query(&sql).bind(from_ms).bind(to_ms);
            for n in names {
                q = q.bind(n.as_str());
            }
            for r in q.fetch_all(&self.read).await? {
                let user: Option<String> = r.try_get("u")?;
                out.push(Spent {
                    user: user.unwrap_or_default(),
                    key: r.try_get("key")?,
                    start_ms: r.try_get("s")?,
                    end_ms: r.try_get("e")?,
                    amount: from_limbs(r.try_get("hi")?, r.try_get("mid")?, r.try_get("lo")?),
                });
            }
            if out.len() > limit {
                return Ok(Err(TooMany { limit }));
            }
        }
        Ok(Ok(out))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::sql::SqlStore;
    use crate::store::testdb::on_both_databases;
    use quota::budget::{Entry, Reason};

    on_both_databases!(spending_is_summed_per_user_key_and_bucket);

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

    async fn spending_is_summed_per_user_key_and_bucket(s: &SqlStore) {
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
            let mut rows = s
                .submitter_spending(&["ml".to_string()], 0, 20_000, 5_000, 100)
                .await
                .unwrap()
                .unwrap();
            rows.sort_by(|a, b| (&a.user, a.start_ms).cmp(&(&b.user, b.start_ms)));
            let got: Vec<(&str, i64, i64, i128)> = rows
                .iter()
                .map(|r| (r.user.as_str(), r.start_ms, r.end_ms, r.amount))
                .collect();
            assert_eq!(
                got,
                [
                    ("", 0, 500, 9),
                    ("alice", 0, 2_000, big + 5 - 3),
                    ("alice", 10_000, 11_000, 7),
                ]
            );
            // Bounded: more groups than the limit is refused, not cut.
            assert!(s
                .submitter_spending(&["ml".to_string()], 0, 20_000, 5_000, 2)
                .await
                .unwrap()
                .is_err());
            assert!(s
                .submitter_spending(&[], 0, 20_000, 5_000, 2)
                .await
                .unwrap()
                .unwrap()
                .is_empty());
        }
    }
}
