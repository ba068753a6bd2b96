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
    /// (child, its samples, its status), children in name order: at most
    /// `quota::series::MAX_CHART_CHILDREN`, those using the most now.
    pub children: Vec<(String, Vec<Sample>, QuotaStatus)>,
    /// Children whose samples were not read.
    pub children_omitted: usize,
}

/// Whose samples besides the quota's a chart reads.
#[derive(Clone, Copy, Debug)]
pub enum Children<'a> {
    None,
    /// The children using the most of this key now (one children chart).
    ByKey(&'a str),
    /// The children using the greatest share of any hard (every chart of
    /// the page).
    All,
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

/// Reads `q`'s samples over `range` up to `now_ms` and those of the
/// `children` of it in `all` a chart stacks (one range scan each, at most
/// `MAX_CHART_CHILDREN` of them whatever the number of children). The
/// store keeps at most about 5,700 rows per quota whatever the range (raw
/// for 48 hours, then hourly, then daily), and a quota at most
/// `quota::tree::MAX_KEYS` keys, so what one chart holds is bounded.
pub async fn gather(
    sql: &SqlStore,
    all: &[Quota],
    q: &Quota,
    range: Range,
    now_ms: i64,
    children: Children<'_>,
) -> Result<Gathered, StoreError> {
    let from = now_ms - range.span_ms();
    let own = to_samples(sql.samples(q.name(), from, now_ms).await?);
    let key = match children {
        Children::None => {
            return Ok(Gathered {
                own,
                children: Vec::new(),
                children_omitted: 0,
            })
        }
        Children::ByKey(k) => Some(k),
        Children::All => None,
    };
    let mut kids: Vec<&Quota> = all.iter().filter(|c| c.spec.parent == q.name()).collect();
    kids.sort_by(|a, b| a.name().cmp(b.name()));
    let statuses: Vec<(&str, &QuotaStatus)> = kids.iter().map(|c| (c.name(), &c.status)).collect();
    let (drawn, omitted) =
        quota::series::children_to_draw(&statuses, key, quota::series::MAX_CHART_CHILDREN);
    let mut read = Vec::with_capacity(drawn.len());
    for c in kids.into_iter().filter(|c| drawn.contains(&c.name())) {
        let s = to_samples(sql.samples(c.name(), from, now_ms).await?);
        read.push((c.name().to_string(), s, c.status.clone()));
    }
    Ok(Gathered {
        own,
        children: read,
        children_omitted: omitted,
    })
}
