//! What a quota's charts are drawn from: the stored samples of the quota
//! and of its children over a range, and their current statuses (the last
//! point of every chart, so an edit shows at once). The portal's page and
//! the samples API both read through here and draw with `app::chart_section`;
//! each authorises the caller first.

use crate::store::history::Sample as StoredSample;
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::forecast::Sample;
use quota::series::Range;
use quota::{Quota, QuotaStatus};

/// The samples and statuses a quota's charts need.
pub struct Gathered {
    pub own: Vec<Sample>,
    /// (child, its samples, its status), children in name order.
    pub children: Vec<(String, Vec<Sample>, QuotaStatus)>,
}

/// Stored samples as the pure side reads them.
pub fn to_samples(rows: Vec<StoredSample>) -> Vec<Sample> {
    rows.into_iter()
        .map(|s| Sample {
            at_ms: s.at_ms,
            hard: s.hard,
            used: s.used,
            self_used: s.self_used,
        })
        .collect()
}

/// Reads `q`'s samples over `range` up to `now_ms` and, when
/// `with_children`, those of its children in `all` (one range scan each).
/// The store keeps at most about 5,700 rows per quota whatever the range
/// (raw for 48 hours, then hourly, then daily), so a year is no heavier
/// than its tiers.
pub async fn gather(
    sql: &SqlStore,
    all: &[Quota],
    q: &Quota,
    range: Range,
    now_ms: i64,
    with_children: bool,
) -> Result<Gathered, StoreError> {
    let from = now_ms - range.span_ms();
    let own = to_samples(sql.samples(q.name(), from, now_ms).await?);
    let mut children = Vec::new();
    if with_children {
        let mut kids: Vec<&Quota> = all.iter().filter(|c| c.spec.parent == q.name()).collect();
        kids.sort_by(|a, b| a.name().cmp(b.name()));
        for c in kids {
            let s = to_samples(sql.samples(c.name(), from, now_ms).await?);
            children.push((c.name().to_string(), s, c.status.clone()));
        }
    }
    Ok(Gathered { own, children })
}
