//! The reader's alerts (docs/real-usage.md): after each reading, the
//! workloads idle past their quota's `idle.after` and whether Prometheus
//! has been silent too long are judged (`alerts::real_usage`, pure) and
//! stored with their emails in one transaction, as the engine stores its
//! own. An `idle_gpus` alert goes to the quota's owners (the nearest with
//! owners) and to its submitter when a portal user has that name; a
//! `real_usage_unknown` alert to the admins. Each kind can be taken in
//! the daily digest (`/account`).

use crate::alerts::real_usage::{evaluate, idle_conditions, unknown_condition};
use crate::alerts::{Condition, Kind};
use crate::store::alerts::{AlertFilter, Applied, Observed, Recipient};
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::lineage::Forest;
use quota::real_usage::idle::{policy_of, IdleNow};
use quota::real_usage::readings::Readings;
use quota::Quota;
use std::collections::{BTreeMap, HashMap};

/// What the reader judges its alerts on.
pub struct Judged<'a> {
    pub quotas: &'a [Quota],
    pub idle: &'a [IdleNow],
    pub readings: &'a Readings,
    pub now_ms: i64,
    /// `--prometheus-alert-after-seconds`, in ms.
    pub alert_after_ms: i64,
    pub public_url: &'a str,
    pub keys: &'a quota::KeyConfig,
}

/// Judges and stores the reader's alerts; what it opened and resolved.
pub async fn judge(
    sql: &SqlStore,
    j: Judged<'_>,
    suspends: fn(&str) -> bool,
) -> Result<Applied, StoreError> {
    let by_name: HashMap<&str, &Quota> = j.quotas.iter().map(|q| (q.name(), q)).collect();
    let policy = |q: &str| match by_name.get(q) {
        Some(quota) => policy_of(quota, |n| by_name.get(n).copied()),
        None => Default::default(),
    };
    let mut conditions = idle_conditions(j.idle, policy, suspends);
    conditions.extend(unknown_condition(j.readings, j.now_ms, j.alert_after_ms));
    let mut open = Vec::new();
    for kind in [Kind::IdleGpus, Kind::RealUsageUnknown] {
        let f = AlertFilter {
            open: Some(true),
            kind: Some(kind),
            ..AlertFilter::default()
        };
        open.extend(sql.alerts(&f, 10_000).await?.iter().map(|a| a.as_open()));
    }
    let e = evaluate(conditions, &open);
    if e.is_empty() {
        return Ok(Applied::default());
    }
    let parents = Forest::from_quotas(j.quotas.iter());
    let mut recipients: BTreeMap<String, Vec<Recipient>> = BTreeMap::new();
    for c in &e.open {
        recipients.insert(c.fingerprint(), recipients_of(sql, &parents, c).await?);
    }
    sql.apply_evaluation(
        &e,
        &recipients,
        j.public_url,
        j.keys,
        &Observed::at(j.now_ms),
        j.now_ms,
    )
    .await
}

/// Who is told of `c`: for idle GPUs the owners on its quota's line and
/// its submitter; for real usage unknown the admins.
async fn recipients_of(
    sql: &SqlStore,
    parents: &Forest,
    c: &Condition,
) -> Result<Vec<Recipient>, StoreError> {
    match c.kind {
        Kind::RealUsageUnknown => sql.alert_recipients(&[], c.kind, true).await,
        _ => {
            let mut to = sql
                .alert_recipients(&parents.line(&c.quota).names, c.kind, false)
                .await?;
            let submitter = c.numbers["submitter"].as_str().unwrap_or_default();
            if let Some(r) = sql.alert_recipient_named(submitter, c.kind).await? {
                if !to.iter().any(|t| t.user_id == r.user_id) {
                    to.push(r);
                }
            }
            Ok(to)
        }
    }
}
