//! Fairness between the submitters of one quota, read from the budget
//! ledger (docs/queueing.md §11, "Between the submitters of one quota"):
//! the `sshare`-like table of the API and the portal (`read`, `to_json`)
//! over the ledger read the controller's round uses too
//! (`SqlStore::submitter_usage`, `cluster/controller/submitters.rs`).
//! The rules are `quota::submitters`'.

use super::{Service, ServiceError};
use crate::store::shares::Refused;
use crate::store::sql::SqlStore;
use quota::object::queueing::DEFAULT_HALF_LIFE_DAYS;
use quota::submitters::{self, Row};
use serde_json::{json, Value};

const DAY_MS: i64 = 86_400_000;

/// Which quotas' ledger a table adds up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The quota's own workloads: what its queue orders by.
    Own,
    /// The quota and every quota under it.
    Subtree,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Own => "own",
            Scope::Subtree => "subtree",
        }
    }
}

/// The longest query string the table takes.
pub const MAX_QUERY: usize = 256;

/// The table's query string: `scope=own` (the default) or
/// `scope=subtree`, nothing else; anything wrong says what to fix.
pub fn parse_query(raw: Option<&str>) -> Result<Scope, String> {
    const TAKES: &str = "the shares table takes only scope=own or scope=subtree";
    let raw = raw.unwrap_or("");
    if raw.len() > MAX_QUERY {
        return Err(format!(
            "the query string is longer than {MAX_QUERY} characters: {TAKES}"
        ));
    }
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw).map_err(|e| format!("{e}: {TAKES}"))?;
    let mut scope = None;
    for (k, v) in pairs {
        if k != "scope" {
            let k = quota::text::scrub(&k);
            let k: String = k.chars().take(40).collect();
            return Err(format!("unknown parameter '{k}': {TAKES}"));
        }
        if scope.is_some() {
            return Err(format!("scope is given twice: {TAKES}"));
        }
        scope = Some(match v.as_str() {
            "own" => Scope::Own,
            "subtree" => Scope::Subtree,
            _ => return Err(format!("scope must be own or subtree: {TAKES}")),
        });
    }
    Ok(scope.unwrap_or(Scope::Own))
}

/// An `sshare`-like table of one quota.
#[derive(Clone, Debug)]
pub struct Table {
    pub quota: String,
    pub scope: Scope,
    /// Quotas whose ledger was read.
    pub quotas: usize,
    pub half_life_days: u32,
    /// Whether the quota's queue orders by this (`submitterFairness`).
    pub orders_queue: bool,
    pub now_ms: i64,
    /// The oldest instant read (`HORIZON_HALF_LIVES` half-lives back).
    pub from_ms: i64,
    /// In the queue's order among equals: least normalised usage first.
    pub rows: Vec<Row>,
    /// Submitters past `submitters::MAX_ROWS`, not listed.
    pub left_out: usize,
    /// Submitters with usage: each one's shares S is 1 ÷ this.
    pub with_usage: usize,
}

/// The table of `name` (already authorised) at `now_ms`. Too busy a
/// ledger is 400 naming the bound (too many submitter × key pairs), too
/// slow a read 503, never a partial table.
pub async fn read(
    service: &Service,
    sql: &SqlStore,
    name: &str,
    scope: Scope,
) -> Result<Table, ServiceError> {
    let q = service.get(name).await?.quota;
    let now_ms = service.now();
    let names: Vec<String> = match scope {
        Scope::Own => vec![name.to_string()],
        Scope::Subtree => service
            .subtrees(&[name.to_string()])
            .await?
            .iter()
            .map(|q| q.name().to_string())
            .collect(),
    };
    let days = q
        .spec
        .queueing
        .submitter_half_life_days
        .unwrap_or(DEFAULT_HALF_LIFE_DAYS);
    let h = i64::from(days) * DAY_MS;
    let days_read = h * submitters::HORIZON_HALF_LIVES / DAY_MS;
    let tally = match sql
        .submitter_usage(&names, now_ms, h, submitters::MAX_PAIRS)
        .await
        .map_err(|e| ServiceError::Internal(format!("reading the budget ledger: {e}")))?
    {
        Ok(t) => t,
        Err(Refused::TooMany(e)) => {
            return Err(ServiceError::BadRequest(format!(
                "bizrq {name}: the ledger names more than {} submitter × cash key pairs over \
                 the last {days_read} days: ask for scope=own, or a smaller subtree",
                e.limit
            )))
        }
        Err(Refused::TooSlow { seconds }) => {
            return Err(ServiceError::Unavailable(format!(
                "bizrq {name}: summing the ledger's last {days_read} days took longer than \
                 {seconds} s: ask for scope=own, or a smaller subtree"
            )))
        }
    };
    let shares = submitters::table(&tally);
    Ok(Table {
        quota: name.to_string(),
        scope,
        quotas: names.len(),
        half_life_days: days,
        orders_queue: q.spec.queueing.orders_by_submitters(),
        now_ms,
        from_ms: submitters::horizon(now_ms, h),
        rows: shares.rows,
        left_out: shares.left_out,
        with_usage: shares.with_usage,
    })
}

/// Resource-hours of `acc` on `key`, for people (`12.5 card-hours`).
pub fn hours(key: &str, acc: i128) -> String {
    quota::readable::cash(key, quota::budget::to_quantity(acc))
}

/// The table as the API answers it: amounts in the key's unit (exact
/// decimal) with the ledger's acc beside them.
pub fn to_json(t: &Table) -> Value {
    let rows: Vec<Value> = t
        .rows
        .iter()
        .map(|r| {
            let usage: Vec<Value> = r
                .usage
                .iter()
                .map(|(k, u)| {
                    json!({
                        "key": k,
                        "unit": quota::keys::cash_unit(k),
                        "raw": quota::readable::exact(quota::budget::to_quantity(u.raw)),
                        "rawAcc": u.raw.to_string(),
                        "decayed": quota::readable::exact(quota::budget::to_quantity(u.decayed)),
                        "decayedAcc": u.decayed.to_string(),
                    })
                })
                .collect();
            json!({
                "user": r.user,
                "usage": usage,
                "normalizedUsage": r.normalised.display(),
                "rankedAtMedian": r.at_median,
                "shares": share_text(t.with_usage),
                "weight": 1,
                "fairShareFactor": submitters::factor_display(r.factor),
            })
        })
        .collect();
    json!({
        "quota": t.quota,
        "scope": t.scope.as_str(),
        "quotasRead": t.quotas,
        "halfLifeDays": t.half_life_days,
        "ordersQueue": t.orders_queue,
        "asOf": quota::time::format_rfc3339(t.now_ms),
        "from": quota::time::format_rfc3339(t.from_ms),
        "factor": "2^(-normalizedUsage/shares) (SLURM's fair-share factor)",
        "submitters": t.rows.len() + t.left_out,
        "withUsage": t.with_usage,
        "leftOut": t.left_out,
        "rows": rows,
    })
}

/// Each submitter's normalised shares (all weigh 1): `0.33` of three
/// with usage.
pub fn share_text(submitters: usize) -> String {
    quota::fair::Share::Ratio {
        num: 1,
        den: submitters.max(1) as u128,
    }
    .display()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_takes_one_scope_and_says_what_is_wrong() {
        assert_eq!(parse_query(None), Ok(Scope::Own));
        assert_eq!(parse_query(Some("")), Ok(Scope::Own));
        assert_eq!(parse_query(Some("scope=subtree")), Ok(Scope::Subtree));
        for (bad, says) in [
            ("scope=all", "scope must be own or subtree"),
            ("scope=own&scope=subtree", "twice"),
            ("limit=5", "unknown parameter 'limit'"),
            ("%E2%80%AEevil=1", "unknown parameter"),
            ("scope=%00", "scope must be"),
        ] {
            let e = parse_query(Some(bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(quota::text::hostile_char(&e).is_none(), "{bad}: {e:?}");
        }
        let long = format!("scope={}", "x".repeat(MAX_QUERY));
        assert!(parse_query(Some(&long))
            .unwrap_err()
            .contains("longer than"));
    }

    #[test]
    fn shares_are_equal_for_every_submitter() {
        assert_eq!(share_text(3), "0.33");
        assert_eq!(share_text(0), "1.00");
    }
}
