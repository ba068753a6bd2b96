//! What a usage chart draws: the range a person picks, the samples of that
//! range at one resolution, the current status as the last point, which
//! keys are worth a chart, and children's usage on one time grid for a
//! stacked chart. Pure; the server reads the samples and the status.
//!
//! The store keeps samples at falling resolution (raw for 48 hours, hourly
//! peaks for 90 days, daily peaks for two years); a range folds what it
//! reads into one bucket width so that its points are evenly spaced and
//! bounded in number, with the store's rule: the peak of `used` and
//! `selfUsed` per key (a cash key's latest value: it is a running total),
//! and the latest `hard`.

use crate::forecast::Sample;
use crate::keys::cash_target;
use crate::{resources, Quantity, QuotaStatus, ResourceList};
use std::collections::BTreeMap;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The most points a chart draws of one series, whatever the sampler's
/// interval: a range whose samples are kept as stored (a day) is folded to
/// whole minutes until it fits.
pub const MAX_POINTS: usize = 1_500;

/// The most children whose samples one chart reads and stacks: those using
/// the most now ([`children_to_draw`]); the others are counted, not read.
pub const MAX_CHART_CHILDREN: usize = 24;

/// The most series of children (children × keys) a quota page reads for
/// its charts: a page draws a children chart per key, so a quota of many
/// keys stacks fewer children on each ([`page_children`]). One key's
/// children chart (the samples API) still reads [`MAX_CHART_CHILDREN`].
pub const MAX_PAGE_CHILD_SERIES: usize = 384;

/// How many children a quota page of `keys` keys stacks on its charts:
/// [`MAX_CHART_CHILDREN`] up to 16 keys, fewer beyond, at least one. What
/// a page holds of its children is then bounded whatever its keys.
pub fn page_children(keys: usize) -> usize {
    (MAX_PAGE_CHILD_SERIES / keys.max(1)).clamp(1, MAX_CHART_CHILDREN)
}

/// The time ranges a chart offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Range {
    Day,
    #[default]
    Week,
    Month,
    Quarter,
    Year,
}

impl Range {
    pub const ALL: [Range; 5] = [
        Range::Day,
        Range::Week,
        Range::Month,
        Range::Quarter,
        Range::Year,
    ];

    /// The query parameter's value: `24h`, `7d`, `30d`, `90d`, `1y`.
    pub fn as_str(self) -> &'static str {
        match self {
            Range::Day => "24h",
            Range::Week => "7d",
            Range::Month => "30d",
            Range::Quarter => "90d",
            Range::Year => "1y",
        }
    }

    /// A link's text: `24 h`, `7 d`, …
    pub fn short(self) -> &'static str {
        match self {
            Range::Day => "24 h",
            Range::Week => "7 d",
            Range::Month => "30 d",
            Range::Quarter => "90 d",
            Range::Year => "1 y",
        }
    }

    /// A heading's words: "last 24 hours", …
    pub fn words(self) -> &'static str {
        match self {
            Range::Day => "last 24 hours",
            Range::Week => "last 7 days",
            Range::Month => "last 30 days",
            Range::Quarter => "last 90 days",
            Range::Year => "last year",
        }
    }

    /// Reads a query parameter; empty means the default (7 days).
    pub fn parse(s: &str) -> Result<Range, String> {
        match s.trim() {
            "" => Ok(Range::default()),
            t => Range::ALL
                .into_iter()
                .find(|r| r.as_str() == t)
                .ok_or_else(|| format!("unknown range '{t}': 24h, 7d, 30d, 90d or 1y")),
        }
    }

    pub fn span_ms(self) -> i64 {
        match self {
            Range::Day => DAY_MS,
            Range::Week => 7 * DAY_MS,
            Range::Month => 30 * DAY_MS,
            Range::Quarter => 90 * DAY_MS,
            Range::Year => 365 * DAY_MS,
        }
    }

    /// The width the chart's samples are folded to; 0 keeps them as stored
    /// (a day of minute samples). At most about 1,440 points per range.
    pub fn bucket_ms(self) -> i64 {
        match self {
            Range::Day => 0,
            Range::Week | Range::Month => HOUR_MS,
            Range::Quarter => 3 * HOUR_MS,
            Range::Year => DAY_MS,
        }
    }

    /// The width of a row of the values table: 24 to 53 rows per range.
    pub fn table_bucket_ms(self) -> i64 {
        match self {
            Range::Day => HOUR_MS,
            Range::Week => 6 * HOUR_MS,
            Range::Month => DAY_MS,
            Range::Quarter => 3 * DAY_MS,
            Range::Year => 7 * DAY_MS,
        }
    }
}

/// Start of the UTC bucket of `width` holding `at_ms`.
fn bucket_start(at_ms: i64, width: i64) -> i64 {
    at_ms - at_ms.rem_euclid(width)
}

/// Per key, the peak (non-cash) or the latest (cash) of `list` into `into`.
fn fold_list(into: &mut BTreeMap<String, (i64, Quantity)>, at_ms: i64, list: &ResourceList) {
    for (key, &value) in list {
        let e = into.entry(key.clone()).or_insert((at_ms, value));
        let replace = if cash_target(key).is_some() {
            at_ms >= e.0
        } else {
            value > e.1
        };
        if replace {
            *e = (at_ms, value);
        }
    }
}

/// Folds samples (in any order) into one per UTC bucket of `width_ms`,
/// oldest first, each at its bucket's start: `used`/`selfUsed` the peak
/// per key (cash keys: the latest), `hard` the latest. A width of 0 or
/// less only sorts them.
pub fn fold(samples: &[Sample], width_ms: i64) -> Vec<Sample> {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by_key(|s| s.at_ms);
    if width_ms <= 0 {
        return sorted.into_iter().cloned().collect();
    }
    type Peaks = BTreeMap<String, (i64, Quantity)>;
    let mut buckets: BTreeMap<i64, (ResourceList, Peaks, Peaks)> = BTreeMap::new();
    for s in sorted {
        let b = buckets.entry(bucket_start(s.at_ms, width_ms)).or_default();
        // Sorted: the last one seen is the latest.
        b.0 = s.hard.clone();
        fold_list(&mut b.1, s.at_ms, &s.used);
        fold_list(&mut b.2, s.at_ms, &s.self_used);
    }
    let list = |p: Peaks| p.into_iter().map(|(k, (_, v))| (k, v)).collect();
    buckets
        .into_iter()
        .map(|(at_ms, (hard, used, self_used))| Sample {
            at_ms,
            hard,
            used: list(used),
            self_used: list(self_used),
        })
        .collect()
}

/// The samples of `range` ending at `now_ms`, folded to its resolution,
/// with the current status as the last point: a chart shows a change the
/// moment it is made, not when the sampler next writes. Samples after
/// `now_ms` are dropped.
pub fn chart_samples(
    samples: &[Sample],
    range: Range,
    now_ms: i64,
    live: &QuotaStatus,
) -> Vec<Sample> {
    window(samples, range, now_ms, live, range.bucket_ms())
}

/// As [`chart_samples`], folded to the values table's rows.
pub fn table_samples(
    samples: &[Sample],
    range: Range,
    now_ms: i64,
    live: &QuotaStatus,
) -> Vec<Sample> {
    window(samples, range, now_ms, live, range.table_bucket_ms())
}

fn window(
    samples: &[Sample],
    range: Range,
    now_ms: i64,
    live: &QuotaStatus,
    width_ms: i64,
) -> Vec<Sample> {
    let from = now_ms - range.span_ms();
    let kept: Vec<Sample> = samples
        .iter()
        .filter(|s| s.at_ms >= from && s.at_ms < now_ms)
        .cloned()
        .collect();
    let mut out = fold(&kept, point_width(range, width_ms, kept.len()));
    out.push(live_sample(now_ms, live));
    out
}

/// `width_ms`, or (when it keeps samples as stored and there are more than
/// [`MAX_POINTS`] of them) the least whole number of minutes that folds the
/// range into at most `MAX_POINTS` buckets (one more for a range that does
/// not start on a bucket's edge, the live point aside).
fn point_width(range: Range, width_ms: i64, samples: usize) -> i64 {
    if width_ms > 0 || samples < MAX_POINTS {
        return width_ms;
    }
    let per_point = range.span_ms() / (MAX_POINTS as i64 - 1) + 1;
    let minutes = (per_point + MINUTE_MS - 1) / MINUTE_MS;
    minutes.max(1) * MINUTE_MS
}

/// Per key whose children chart is drawn: the children it stacks (ranked
/// by that key's use now, [`children_to_draw`]) and how many it leaves
/// out.
pub type Stacks = std::collections::BTreeMap<String, (Vec<String>, usize)>;

/// Which children a chart of a parent reads and stacks: at most `max`, the
/// ones using the most now (of `key`, or for the page's charts of every key
/// (`None`) the greatest share of any hard), in their given order; and how
/// many are left out. `children` holds each child's current status.
pub fn children_to_draw<'a>(
    children: &[(&'a str, &QuotaStatus)],
    key: Option<&str>,
    max: usize,
) -> (Vec<&'a str>, usize) {
    if children.len() <= max {
        return (children.iter().map(|(n, _)| *n).collect(), 0);
    }
    // Shares in parts per million of a hard, or (one key) the use itself.
    let weight = |st: &QuotaStatus| -> i128 {
        match key {
            Some(k) => resources::get(&st.used, k).nanos(),
            None => st
                .used
                .iter()
                .map(|(k, used)| {
                    let hard = resources::get(&st.hard, k).nanos();
                    if hard > 0 {
                        used.nanos().max(0).saturating_mul(1_000_000) / hard
                    } else if used.nanos() > 0 {
                        1_000_000
                    } else {
                        0
                    }
                })
                .max()
                .unwrap_or(0),
        }
    };
    let mut ranked: Vec<(usize, i128)> = children
        .iter()
        .enumerate()
        .map(|(i, (_, st))| (i, weight(st)))
        .collect();
    // Most used first; of equals, the given order.
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept: Vec<usize> = ranked.into_iter().take(max).map(|(i, _)| i).collect();
    kept.sort_unstable();
    let names = kept.into_iter().map(|i| children[i].0).collect();
    (names, children.len() - max)
}

/// The status as a sample at `now_ms`.
pub fn live_sample(now_ms: i64, live: &QuotaStatus) -> Sample {
    Sample {
        at_ms: now_ms,
        hard: live.hard.clone(),
        used: live.used.clone(),
        self_used: live.self_used.clone(),
    }
}

/// Whether `key` is worth a chart over `samples`: it has a hard above zero
/// or a use above zero somewhere. A key with a zero hard that nothing uses
/// would be a flat line on an axis with no scale.
pub fn drawn(samples: &[Sample], key: &str) -> bool {
    samples.iter().any(|s| {
        resources::get(&s.hard, key).nanos() > 0 || resources::get(&s.used, key).nanos() > 0
    })
}

/// The keys that have a chart, in the order of the keys (a model key
/// right after its generic key).
pub fn keys_to_draw(samples: &[Sample]) -> Vec<String> {
    let mut keys: Vec<&String> = samples
        .iter()
        .flat_map(|s| s.hard.keys().chain(s.used.keys()))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| drawn(samples, k))
        .cloned()
        .collect()
}

/// Children's use of one key on a common time grid, for a stacked chart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    /// The grid: every instant any child has a point, oldest first.
    pub times: Vec<i64>,
    /// (child, its use at each instant of the grid). A child's value holds
    /// from one of its samples to the next (the sampler writes on change);
    /// before its first sample it is zero.
    pub layers: Vec<(String, Vec<Quantity>)>,
}

/// Stacks the children's `used` of `key`. Each child's samples are
/// already a chart's (folded, with the live point). Children that never
/// use the key are left out.
pub fn stack(children: &[(String, Vec<Sample>)], key: &str) -> Stack {
    let mut times: Vec<i64> = children
        .iter()
        .flat_map(|(_, s)| s.iter().map(|s| s.at_ms))
        .collect();
    times.sort_unstable();
    times.dedup();
    let layers = children
        .iter()
        .filter(|(_, s)| s.iter().any(|s| resources::get(&s.used, key).nanos() > 0))
        .map(|(name, s)| {
            let mut sorted: Vec<&Sample> = s.iter().collect();
            sorted.sort_by_key(|s| s.at_ms);
            let mut i = 0;
            let mut held = Quantity::ZERO;
            let values = times
                .iter()
                .map(|&t| {
                    while i < sorted.len() && sorted[i].at_ms <= t {
                        held = resources::get(&sorted[i].used, key);
                        i += 1;
                    }
                    held
                })
                .collect();
            (name.clone(), values)
        })
        .collect();
    Stack { times, layers }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";
    /// 2026-11-21T00:00:00Z
    const T0: i64 = 1_795_219_200_000;

    fn list(items: &[(&str, i64)]) -> ResourceList {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
            .collect()
    }

    fn s(at_ms: i64, used: &[(&str, i64)], hard: &[(&str, i64)]) -> Sample {
        Sample {
            at_ms,
            hard: list(hard),
            used: list(used),
            self_used: ResourceList::new(),
        }
    }

    #[test]
    fn ranges_parse_and_default_to_a_week() {
        for r in Range::ALL {
            assert_eq!(Range::parse(r.as_str()), Ok(r));
        }
        assert_eq!(Range::parse(""), Ok(Range::Week));
        assert_eq!(
            Range::parse("2w"),
            Err("unknown range '2w': 24h, 7d, 30d, 90d or 1y".into())
        );
        // A range never draws more than a day of minute samples.
        for r in Range::ALL {
            let points = match r.bucket_ms() {
                0 => r.span_ms() / MINUTE_MS,
                b => r.span_ms() / b,
            };
            assert!(points <= 1440, "{r:?}: {points}");
            let rows = r.span_ms() / r.table_bucket_ms();
            assert!((24..=53).contains(&rows), "{r:?}: {rows} rows");
        }
    }

    #[test]
    fn a_day_of_second_samples_is_folded_to_at_most_max_points() {
        let now = T0 + DAY_MS;
        let live = QuotaStatus::default();
        // One sample a second for a day: 86,400.
        let stored: Vec<Sample> = (0..86_400)
            .map(|i| s(T0 + i * 1_000, &[(GPU, i % 7)], &[(GPU, 8)]))
            .collect();
        let got = chart_samples(&stored, Range::Day, now, &live);
        assert!(got.len() <= MAX_POINTS + 2, "{} points", got.len());
        assert!(got.len() > MAX_POINTS / 2, "{} points", got.len());
        // Folded into whole minutes, peaks kept.
        assert!(got[..got.len() - 1]
            .iter()
            .all(|p| p.at_ms % MINUTE_MS == 0));
        assert_eq!(resources::get(&got[0].used, GPU), Quantity::from_units(6));
        // A day of minute samples is drawn as stored.
        let minutes: Vec<Sample> = (0..1_440)
            .map(|i| s(T0 + i * MINUTE_MS + 7, &[(GPU, 1)], &[]))
            .collect();
        assert_eq!(chart_samples(&minutes, Range::Day, now, &live).len(), 1_441);
        for n in [MAX_POINTS, 10_000, 86_400, 1_000_000] {
            let w = point_width(Range::Day, 0, n);
            assert!(w % MINUTE_MS == 0 && w > 0);
            assert!(Range::Day.span_ms() / w < MAX_POINTS as i64, "{n}: {w}");
        }
    }

    #[test]
    fn a_chart_reads_the_children_using_the_most() {
        let st = |used: i64, hard: i64| QuotaStatus {
            hard: list(&[(GPU, hard)]),
            used: list(&[(GPU, used)]),
            ..QuotaStatus::default()
        };
        let (a, b, c, d) = (st(1, 10), st(9, 100), st(5, 10), st(0, 0));
        let kids = [("a", &a), ("b", &b), ("c", &c), ("d", &d)];
        assert_eq!(
            children_to_draw(&kids, None, 4),
            (vec!["a", "b", "c", "d"], 0)
        );
        // Share of hard: c 50 %, a 10 %, b 9 %.
        assert_eq!(children_to_draw(&kids, None, 2), (vec!["a", "c"], 2));
        // Use of one key: b 9, c 5.
        assert_eq!(children_to_draw(&kids, Some(GPU), 2), (vec!["b", "c"], 2));
        assert_eq!(children_to_draw(&kids, Some(GPU), 0), (vec![], 4));
    }

    #[test]
    fn folding_keeps_peaks_latest_cash_and_latest_hard() {
        let m = MINUTE_MS;
        let got = fold(
            &[
                // Out of order on purpose.
                s(T0 + 30 * m, &[(GPU, 2), (CASH, 7)], &[(GPU, 8)]),
                s(T0 + 10 * m, &[(GPU, 6), (CASH, 5)], &[(GPU, 4)]),
                s(T0 + HOUR_MS + m, &[(GPU, 1)], &[(GPU, 8)]),
            ],
            HOUR_MS,
        );
        assert_eq!(
            got,
            vec![
                s(T0, &[(GPU, 6), (CASH, 7)], &[(GPU, 8)]),
                s(T0 + HOUR_MS, &[(GPU, 1)], &[(GPU, 8)]),
            ]
        );
        assert_eq!(fold(&[], HOUR_MS), vec![]);
        let raw = [s(T0 + m, &[], &[]), s(T0, &[], &[])];
        assert_eq!(fold(&raw, 0), vec![raw[1].clone(), raw[0].clone()]);
    }

    #[test]
    fn the_live_status_is_the_last_point() {
        let now = T0 + 2 * DAY_MS;
        let live = QuotaStatus {
            hard: list(&[(GPU, 16)]),
            used: list(&[(GPU, 3)]),
            ..QuotaStatus::default()
        };
        let stored = [
            s(now - 8 * DAY_MS, &[(GPU, 9)], &[(GPU, 8)]),
            s(now - DAY_MS, &[(GPU, 5)], &[(GPU, 8)]),
            // A sample at `now` or later is replaced by the status.
            s(now, &[(GPU, 4)], &[(GPU, 8)]),
        ];
        let got = chart_samples(&stored, Range::Week, now, &live);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].at_ms, now - DAY_MS, "folded to the hour it fell in");
        assert_eq!(got[1], s(now, &[(GPU, 3)], &[(GPU, 16)]));
    }

    #[test]
    fn only_keys_with_a_hard_or_a_use_are_drawn() {
        let samples = [
            s(
                T0,
                &[("requests.cpu", 0)],
                &[(GPU, 8), ("requests.cpu", 0), ("pods", 0)],
            ),
            s(
                T0 + HOUR_MS,
                &[("pods", 2)],
                &[(GPU, 8), ("requests.cpu", 0), ("pods", 0)],
            ),
        ];
        assert_eq!(keys_to_draw(&samples), vec!["pods", GPU]);
        assert!(!drawn(&samples, "requests.cpu"));
    }

    #[test]
    fn children_stack_on_one_grid_holding_values() {
        let a = vec![s(T0, &[(GPU, 2)], &[]), s(T0 + 20, &[(GPU, 4)], &[])];
        let b = vec![s(T0 + 10, &[(GPU, 1)], &[])];
        let idle = vec![s(T0 + 5, &[(GPU, 0)], &[])];
        let got = stack(
            &[("a".into(), a), ("b".into(), b), ("idle".into(), idle)],
            GPU,
        );
        assert_eq!(got.times, vec![T0, T0 + 5, T0 + 10, T0 + 20]);
        let q = Quantity::from_units;
        assert_eq!(
            got.layers,
            vec![
                ("a".to_string(), vec![q(2), q(2), q(2), q(4)]),
                ("b".to_string(), vec![q(0), q(0), q(1), q(1)]),
            ]
        );
    }

    #[test]
    fn a_page_stacks_fewer_children_the_more_keys_it_has() {
        assert_eq!(page_children(0), MAX_CHART_CHILDREN);
        assert_eq!(page_children(16), MAX_CHART_CHILDREN);
        assert_eq!(page_children(17), 22);
        assert_eq!(page_children(64), 6);
        assert_eq!(page_children(256), 1);
        for keys in 1..=crate::tree::MAX_KEYS {
            assert!(page_children(keys) * keys <= MAX_PAGE_CHILD_SERIES.max(keys));
        }
    }
}
