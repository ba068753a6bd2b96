//! What a quota's charts are drawn from: the stored samples of the quota
//! and of its children over a range, and their current statuses (the last
//! point of every chart, so an edit shows at once). The portal's page and
//! the samples API both read through here and draw with `app::chart_section`;
//! each authorises the caller first.

use crate::store::history::{Sample as StoredSample, SampleRows};
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

/// `Gathered` as read, its samples' JSON not yet parsed: a heavy request
/// parses it on the render threads (`parse`).
pub struct Unparsed {
    pub own: SampleRows,
    pub children: Vec<(String, SampleRows, QuotaStatus)>,
    pub children_omitted: usize,
    /// The range's chart resolution (`Range::bucket_ms`).
    width_ms: i64,
    /// The one key a children chart stacks, if one.
    key: Option<String>,
}

impl Unparsed {
    /// The samples, each folded as it is parsed to the range's chart
    /// resolution (exactly what the charts and their tables fold them to:
    /// a table's rows are whole multiples of a chart's points), and of
    /// the children only `used` (of the one key, for one key's chart),
    /// which is all a children chart stacks. A year of a quota's samples
    /// is then at most 366 points whatever was stored, and no more than
    /// one row is held unfolded.
    pub fn parse(self) -> Result<Gathered, StoreError> {
        let width = self.width_ms;
        let key = self.key;
        let child_wants = |column: &str, k: &str| {
            column == "used" && (k.is_empty() || key.as_deref().is_none_or(|want| want == k))
        };
        Ok(Gathered {
            own: folded(self.own, width, |_, _| true)?,
            children: self
                .children
                .into_iter()
                .map(|(name, rows, status)| Ok((name, folded(rows, width, child_wants)?, status)))
                .collect::<Result<_, StoreError>>()?,
            children_omitted: self.children_omitted,
        })
    }
}

/// `rows` parsed and folded as they come to buckets of `width_ms` (none
/// when 0), each folded point at its first sample's instant (so that a
/// range's first bucket, which starts before the range, keeps it).
fn folded(
    rows: SampleRows,
    width_ms: i64,
    wanted: impl Fn(&str, &str) -> bool,
) -> Result<Vec<Sample>, StoreError> {
    let mut out: Vec<Sample> = Vec::new();
    let mut open: Option<(i64, Sample)> = None;
    rows.parse_each(wanted, |s| {
        let s = Sample {
            at_ms: s.at_ms,
            hard: s.hard,
            used: s.used,
            self_used: s.self_used,
        };
        if width_ms <= 0 {
            out.push(s);
            return;
        }
        let bucket = s.at_ms - s.at_ms.rem_euclid(width_ms);
        match &mut open {
            Some((b, acc)) if *b == bucket => {
                let first = acc.at_ms;
                let both = [std::mem::replace(acc, s.clone()), s];
                if let Some(mut f) = quota::series::fold(&both, width_ms).pop() {
                    f.at_ms = first;
                    *acc = f;
                }
            }
            _ => {
                if let Some((_, acc)) = open.replace((bucket, s)) {
                    out.push(acc);
                }
            }
        }
    })?;
    out.extend(open.map(|(_, acc)| acc));
    Ok(out)
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

/// Reads `q`'s samples over `range` up to `now_ms` (unparsed) and those of the
/// `children` of it in `all` a chart stacks (one range scan each, at most
/// `MAX_CHART_CHILDREN` of them whatever the number of children, and for
/// a page's every chart `series::page_children`: fewer, the more keys). The
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
) -> Result<Unparsed, StoreError> {
    // What a chart keeps: from the range's start to before now (now is the
    // live status's point).
    let (from, to) = (now_ms - range.span_ms(), now_ms - 1);
    let own = sql.sample_rows(q.name(), from, to).await?;
    let width_ms = range.bucket_ms();
    let (key, max) = match children {
        Children::None => {
            return Ok(Unparsed {
                own,
                children: Vec::new(),
                children_omitted: 0,
                width_ms,
                key: None,
            })
        }
        Children::ByKey(k) => (Some(k), quota::series::MAX_CHART_CHILDREN),
        Children::All => {
            let keys = q.spec.hard.len().max(q.status.used.len());
            (None, quota::series::page_children(keys))
        }
    };
    let mut kids: Vec<&Quota> = all.iter().filter(|c| c.spec.parent == q.name()).collect();
    kids.sort_by(|a, b| a.name().cmp(b.name()));
    let statuses: Vec<(&str, &QuotaStatus)> = kids.iter().map(|c| (c.name(), &c.status)).collect();
    let (drawn, omitted) = quota::series::children_to_draw(&statuses, key, max);
    let mut read = Vec::with_capacity(drawn.len());
    for c in kids.into_iter().filter(|c| drawn.contains(&c.name())) {
        let s = sql.sample_rows(c.name(), from, to).await?;
        read.push((c.name().to_string(), s, c.status.clone()));
    }
    Ok(Unparsed {
        own,
        children: read,
        children_omitted: omitted,
        width_ms,
        key: key.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::series::{chart_samples, table_samples};
    use quota::Quantity;

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";

    fn list(pairs: &[(&str, i64)]) -> quota::ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
            .collect()
    }

    /// Samples every 7 minutes over a year, peaks and cash as a sampler
    /// writes them, one key more now and then.
    fn stored(now: i64) -> Vec<StoredSample> {
        let span = Range::Year.span_ms();
        (0..(span / 420_000))
            .map(|i| {
                let at = now - span + i * 420_000 + 13_000;
                let mut used = list(&[(GPU, (i * 7919) % 97), (CASH, i)]);
                if i % 11 == 0 {
                    used.insert("pods".into(), Quantity::from_units(i % 5));
                }
                StoredSample {
                    at_ms: at,
                    hard: list(&[(GPU, 100 + (i / 5000)), (CASH, 1_000_000)]),
                    used: used.clone(),
                    self_used: used,
                }
            })
            .collect()
    }

    #[test]
    fn samples_folded_as_parsed_draw_the_same_charts_and_tables() {
        let now = 1_800_000_000_000;
        let live = QuotaStatus::default();
        for range in Range::ALL {
            let raw = stored(now);
            let all = to_samples(raw.clone());
            let from = now - range.span_ms();
            let rows: Vec<StoredSample> = raw
                .into_iter()
                .filter(|s| s.at_ms >= from && s.at_ms < now)
                .collect();
            let n = rows.len();
            let pre = folded(SampleRows::of("q", &rows), range.bucket_ms(), |_, _| true).unwrap();
            if range.bucket_ms() > 0 {
                assert!(pre.len() < n / 5, "{range:?}: {} of {n}", pre.len());
            }
            assert_eq!(
                chart_samples(&pre, range, now, &live),
                chart_samples(&all, range, now, &live),
                "{range:?}"
            );
            assert_eq!(
                table_samples(&pre, range, now, &live),
                table_samples(&all, range, now, &live),
                "{range:?}"
            );
        }
    }

    #[test]
    fn a_childs_samples_keep_only_what_its_chart_stacks() {
        let now = 1_800_000_000_000;
        let rows = stored(now);
        let only = |col: &str, k: &str| col == "used" && (k.is_empty() || k == GPU);
        let pre = folded(SampleRows::of("q", &rows[..50]), 0, only).unwrap();
        assert_eq!(pre.len(), 50);
        assert!(pre
            .iter()
            .all(|s| s.hard.is_empty() && s.self_used.is_empty() && s.used.len() == 1));
    }
}
