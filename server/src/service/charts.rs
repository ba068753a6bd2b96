//! What a quota's charts are drawn from: the stored samples of the quota
//! and of its children over a range, and their current statuses (the last
//! point of every chart, so an edit shows at once). The portal's page and
//! the samples API both read through here and draw with `app::chart_section`;
//! each authorises the caller first.

use crate::heavy::Permit;
use crate::service::ServiceError;
use crate::store::history::{Sample as StoredSample, SampleRows};
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use quota::forecast::Sample;
use quota::series::Range;
use quota::{Quota, QuotaStatus};
use std::collections::BTreeMap;

/// The samples and statuses a quota's charts need.
pub struct Gathered {
    pub own: Vec<Sample>,
    /// The quota's status as its charts' last point ([`live_status`]).
    pub live: QuotaStatus,
    /// (child, its samples, its status as its last point), children in
    /// name order: at most `quota::series::MAX_CHART_CHILDREN`, those
    /// running the most now.
    pub children: Vec<(String, Vec<Sample>, QuotaStatus)>,
    /// Children whose samples were not read.
    pub children_omitted: usize,
    /// Per key whose children chart is drawn, the children it stacks and
    /// how many it leaves out: ranked by that key's use now, as the
    /// samples API's children chart of the key ranks them.
    pub stacks: quota::series::Stacks,
}

/// Rows a chart reads at a time: about 6 MB of JSON for rows of 256 keys.
pub const CHUNK_ROWS: i64 = 256;

/// What a chart keeps of each stored sample's lists.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    /// Only `used` (a child's samples: all a children chart stacks).
    pub used_only: bool,
    /// Only this key (one chart of one key).
    pub key: Option<String>,
}

impl Wanted {
    fn wants(&self, column: &str, key: &str) -> bool {
        (!self.used_only || column == "used")
            && (key.is_empty() || self.key.as_deref().is_none_or(|want| want == key))
    }
}

/// Samples folded as they are parsed, chunk after chunk, to buckets of
/// `width_ms` (none when 0): exactly what the charts and their tables fold
/// them to (a table's rows are whole multiples of a chart's points), each
/// folded point at its first sample's instant so that a range's first
/// bucket, which starts before the range, keeps it. A year of a quota's
/// samples is then at most 366 points whatever was stored, and no more than
/// one sample is held unfolded.
pub struct Folder {
    width_ms: i64,
    out: Vec<Sample>,
    open: Option<(i64, Sample)>,
}

impl Folder {
    pub fn new(width_ms: i64) -> Folder {
        Folder {
            width_ms,
            out: Vec::new(),
            open: None,
        }
    }

    /// Parses and folds `rows` (newer than every row fed before).
    pub fn feed(&mut self, rows: SampleRows, wanted: &Wanted) -> Result<(), StoreError> {
        let width_ms = self.width_ms;
        let (out, open) = (&mut self.out, &mut self.open);
        rows.parse_each(
            |column, key| wanted.wants(column, key),
            |s| {
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
                match open {
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
            },
        )
    }

    pub fn finish(mut self) -> Vec<Sample> {
        self.out.extend(self.open.map(|(_, acc)| acc));
        self.out
    }
}

/// `quota`'s samples from `from_ms` to `to_ms`, read `CHUNK_ROWS` at a time
/// and parsed and folded (`Folder`) on the render threads under `place`:
/// what the request holds is its folded points and one chunk of rows.
pub async fn read_folded(
    sql: &SqlStore,
    place: &Permit,
    quota: &str,
    (from_ms, to_ms): (i64, i64),
    width_ms: i64,
    wanted: Wanted,
) -> Result<Vec<Sample>, ServiceError> {
    let wanted = std::sync::Arc::new(wanted);
    let mut folder = Folder::new(width_ms);
    let mut from = from_ms;
    loop {
        let rows = sql
            .sample_rows_from(quota, from, to_ms, CHUNK_ROWS, wanted.used_only)
            .await?;
        let (n, last) = (rows.len(), rows.last_at());
        let w = wanted.clone();
        folder = place
            .work(move || folder.feed(rows, &w).map(|()| folder))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))??;
        match last {
            Some(at) if n as i64 == CHUNK_ROWS && at < to_ms => from = at + 1,
            _ => return Ok(folder.finish()),
        }
    }
}

/// `q`'s status as a chart's point now (`series::live_sample`, the
/// burn-down's "left", and `children_to_draw`'s ranking read no more):
/// `hard`, `self_used`, and as `used` what a sample records
/// (`quota::rollup::sampled_used`: what runs in its subtree, and what its
/// budgets spent), so the last point continues the stored line instead of
/// jumping to a parent's carve-outs. Its workloads, queue and the rest are
/// never copied: a chart request holds what it draws, not whole statuses.
pub fn live_status(q: &Quota, in_use: &BTreeMap<String, quota::ResourceList>) -> QuotaStatus {
    QuotaStatus {
        hard: q.status.hard.clone(),
        self_used: q.status.self_used.clone(),
        used: quota::rollup::sampled_used(&q.status, in_use.get(q.name())),
        ..QuotaStatus::default()
    }
}

/// Whose samples besides the quota's a chart reads.
#[derive(Clone, Copy, Debug)]
pub enum Children<'a> {
    None,
    /// The children using the most of this key now (one children chart).
    ByKey(&'a str),
    /// For each of these keys' children charts, the children using the
    /// most of that key now (`series::page_children` of them per key:
    /// `MAX_CHART_CHILDREN` up to 16 keys). One ranking per chart key,
    /// the one the range switch's `ByKey` reads, so a range click never
    /// changes which children a chart draws.
    ByKeys(&'a [String]),
}

/// The non-cash keys of `q` (its hard and what it uses) whose children
/// chart `drawn` says is drawn, GPUs first: what a page passes as
/// [`Children::ByKeys`].
pub fn children_keys(
    q: &Quota,
    cfg: &quota::KeyConfig,
    drawn: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut keys: Vec<String> = q
        .spec
        .hard
        .keys()
        .chain(q.status.used.keys())
        .filter(|k| quota::keys::cash_target(k).is_none() && drawn(k))
        .cloned()
        .collect();
    keys.sort_by_cached_key(|k| quota::keys::display_order(k, cfg));
    keys.dedup();
    keys
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
/// children of it in `all` (which holds `q`'s whole subtree, with `in_use`
/// its subtree usage, `quota::rollup::subtree_in_use`, summed by the
/// caller on the render threads) a chart stacks; in detail, those of the
/// `children` of it in `all` a chart stacks (at most `MAX_CHART_CHILDREN`
/// of them whatever the number of children, and for a page's every chart
/// `series::page_children`: fewer, the more keys), each folded to the
/// range's chart resolution as it is read (`read_folded`), a child's
/// `used` alone; `own_key`: only that key of the quota's own (one chart of
/// one key). What one chart holds is its points, not the rows stored.
pub async fn gather(
    sql: &SqlStore,
    place: &Permit,
    (all, in_use): (&[Quota], &BTreeMap<String, quota::ResourceList>),
    q: &Quota,
    (range, now_ms): (Range, i64),
    children: Children<'_>,
    own_key: Option<&str>,
) -> Result<Gathered, ServiceError> {
    // What a chart keeps: from the range's start to before now (now is the
    // live status's point).
    let span = (now_ms - range.span_ms(), now_ms - 1);
    let width = range.bucket_ms();
    let own = read_folded(
        sql,
        place,
        q.name(),
        span,
        width,
        Wanted {
            used_only: false,
            key: own_key.map(str::to_string),
        },
    )
    .await?;
    let live = live_status(q, in_use);
    let one;
    let keys: &[String] = match children {
        Children::None => {
            return Ok(Gathered {
                own,
                live,
                children: Vec::new(),
                children_omitted: 0,
                stacks: Default::default(),
            })
        }
        Children::ByKey(k) => {
            one = [k.to_string()];
            &one
        }
        Children::ByKeys(keys) => keys,
    };
    let max = quota::series::page_children(keys.len());
    let mut kids: Vec<(&str, QuotaStatus)> = all
        .iter()
        .filter(|c| c.spec.parent == q.name())
        .map(|c| (c.name(), live_status(c, in_use)))
        .collect();
    kids.sort_by(|a, b| a.0.cmp(b.0));
    let statuses: Vec<(&str, &QuotaStatus)> = kids.iter().map(|(n, s)| (*n, s)).collect();
    // Each chart's children, ranked by its own key; read once for all.
    let mut stacks = quota::series::Stacks::new();
    let mut drawn: Vec<String> = Vec::new();
    for key in keys {
        let (names, omitted) = quota::series::children_to_draw(&statuses, Some(key), max);
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        drawn.extend(names.iter().cloned());
        stacks.insert(key.clone(), (names, omitted));
    }
    drawn.sort();
    drawn.dedup();
    let omitted = kids.len() - drawn.len();
    drop(statuses);
    let mut read = Vec::with_capacity(drawn.len());
    for (name, status) in kids
        .into_iter()
        .filter(|(n, _)| drawn.binary_search_by(|d| d.as_str().cmp(n)).is_ok())
    {
        let wanted = Wanted {
            used_only: true,
            key: match keys {
                [one] => Some(one.clone()),
                _ => None,
            },
        };
        let s = read_folded(sql, place, name, span, width, wanted).await?;
        read.push((name.to_string(), s, status));
    }
    Ok(Gathered {
        own,
        live,
        children: read,
        children_omitted: omitted,
        stacks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::series::{chart_samples, table_samples};
    use quota::Quantity;

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";

    /// A live point holds what a chart reads and none of the quota's
    /// workloads: a chart request's memory follows what it draws.
    #[test]
    fn a_live_status_copies_no_workloads() {
        let mut q = Quota::default();
        q.metadata.name = "team".into();
        q.status.hard = list(&[(GPU, 4)]);
        q.status.self_used = list(&[(GPU, 2)]);
        q.status.workloads.insert(
            "batch/Job/team/a".into(),
            quota::object::Charge {
                pod_sets: Vec::new(),
                hpa: None,
                since: "2026-11-29T00:00:00Z".into(),
                uid: String::new(),
                admitted: None,
            },
        );
        let p = live_status(&q, &BTreeMap::new());
        assert_eq!(p.hard, q.status.hard);
        assert_eq!(p.self_used, q.status.self_used);
        assert_eq!(
            p.used,
            quota::rollup::sampled_used(&q.status, None),
            "the used a sample records"
        );
        assert!(p.workloads.is_empty());
    }

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
            // Fed in chunks, as read.
            let mut f = Folder::new(range.bucket_ms());
            for chunk in rows.chunks(CHUNK_ROWS as usize) {
                f.feed(SampleRows::of("q", chunk), &Wanted::default())
                    .unwrap();
            }
            let pre = f.finish();
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
        let only = Wanted {
            used_only: true,
            key: Some(GPU.into()),
        };
        let mut f = Folder::new(0);
        f.feed(SampleRows::of("q", &rows[..50]), &only).unwrap();
        let pre = f.finish();
        assert_eq!(pre.len(), 50);
        assert!(pre
            .iter()
            .all(|s| s.hard.is_empty() && s.self_used.is_empty() && s.used.len() == 1));
    }
}
