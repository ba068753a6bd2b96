//! Numbers and times on their way to a pixel or a label: sorting and
//! decimating samples, exact decimals, tick values and time ticks.

use super::*;

pub(super) fn sorted(samples: &[Sample]) -> Vec<&Sample> {
    let mut v: Vec<&Sample> = samples.iter().collect();
    v.sort_by_key(|s| s.at_ms);
    v
}

pub(super) fn to_f64(nanos: i128, per: i128) -> f64 {
    nanos as f64 / per as f64
}

/// An x span that is never empty: a single instant gets an hour around it.
pub(super) fn time_span(t0: i64, t1: i64) -> (i64, i64) {
    if t1 > t0 {
        (t0, t1)
    } else {
        (t0 - MS_PER_HOUR / 2, t0 + MS_PER_HOUR / 2)
    }
}

pub(super) fn headroom(top: f64) -> f64 {
    if top > 0.0 {
        top * 1.1
    } else {
        1.0
    }
}

/// Splits time-ordered samples where a step is a gap: longer than three
/// times the local cadence (the upper median of up to four steps on either
/// side). The server keeps minute, hourly and daily samples by age, so one
/// global cadence would either break every hourly step or hide a two-hour
/// outage; the local median follows each tier, and its upper half keeps the
/// step where minute samples give way to hourly ones from counting as a gap.
pub(super) fn segments(times: &[i64]) -> Vec<Range<usize>> {
    let steps: Vec<i64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mut out = Vec::new();
    let mut start = 0;
    let mut near = Vec::with_capacity(8);
    for (i, &d) in steps.iter().enumerate() {
        near.clear();
        near.extend_from_slice(&steps[i.saturating_sub(4)..i]);
        near.extend_from_slice(&steps[i + 1..(i + 5).min(steps.len())]);
        if near.is_empty() {
            continue;
        }
        near.sort_unstable();
        let cadence = near[near.len() / 2].max(MS_PER_MIN);
        if d > cadence.saturating_mul(3) {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if !times.is_empty() {
        out.push(start..times.len());
    }
    out
}

/// At most four points per pixel column (first, lowest, highest, last), so
/// a long series stays small without losing a peak.
pub(super) fn decimate(pts: &[(i64, f64)], t0: i64, t1: i64, cols: usize) -> Vec<(i64, f64)> {
    if pts.len() <= 4 * cols.max(1) || t1 <= t0 {
        return pts.to_vec();
    }
    let col = |t: i64| (t - t0) as i128 * cols as i128 / (t1 - t0) as i128;
    let mut out = Vec::with_capacity(4 * cols);
    let mut i = 0;
    while i < pts.len() {
        let c = col(pts[i].0);
        let (mut j, mut lo, mut hi) = (i, i, i);
        while j < pts.len() && col(pts[j].0) == c {
            if pts[j].1 < pts[lo].1 {
                lo = j;
            }
            if pts[j].1 > pts[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = [i, lo, hi, j - 1];
        keep.sort_unstable();
        let mut last = usize::MAX;
        for k in keep {
            if k != last {
                out.push(pts[k]);
                last = k;
            }
        }
        i = j;
    }
    out
}

/// `nanos / per` in decimal, at most `places` decimals (rounded half away
/// from zero), trailing zeros dropped. Exact: integers only.
pub(super) fn decimal(nanos: i128, per: i128, places: u32) -> String {
    let scale = 10i128.pow(places);
    let r = nanos
        .saturating_abs()
        .saturating_mul(scale)
        .saturating_add(per / 2)
        / per;
    let sign = if nanos < 0 && r != 0 { "-" } else { "" };
    let (int, frac) = (r / scale, r % scale);
    if frac == 0 {
        return format!("{sign}{int}");
    }
    let frac = format!("{frac:0width$}", width = places as usize);
    format!("{sign}{int}.{}", frac.trim_end_matches('0'))
}

/// [`decimal`] with thousands separated (`15,000`), as every amount a
/// person reads on the pages (`quota::readable::group_thousands`).
pub(super) fn grouped(nanos: i128, per: i128, places: u32) -> String {
    quota::readable::group_thousands(&decimal(nanos, per, places))
}

pub(super) fn fmt_tick_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s == "-0" {
            "0".into()
        } else {
            s.into()
        }
    }
}

pub(super) const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Ms(i64),
    Months(i64),
}

/// Ticks for [t0, t1]: the finest calendar step giving at most `max` ticks,
/// on UTC boundaries (weeks start on Monday, months on the 1st).
pub(super) fn time_ticks(t0: i64, t1: i64, max: usize) -> (Vec<i64>, Step) {
    const STEPS: [i64; 15] = [
        MS_PER_MIN,
        2 * MS_PER_MIN,
        5 * MS_PER_MIN,
        10 * MS_PER_MIN,
        15 * MS_PER_MIN,
        30 * MS_PER_MIN,
        MS_PER_HOUR,
        2 * MS_PER_HOUR,
        3 * MS_PER_HOUR,
        6 * MS_PER_HOUR,
        12 * MS_PER_HOUR,
        MS_PER_DAY,
        2 * MS_PER_DAY,
        7 * MS_PER_DAY,
        14 * MS_PER_DAY,
    ];
    let span = t1.saturating_sub(t0).max(1);
    for s in STEPS {
        if ((span / s) as usize) < max {
            // 1970-01-01 was a Thursday: weeks count from Monday 1969-12-29.
            let origin = if s >= 7 * MS_PER_DAY {
                -3 * MS_PER_DAY
            } else {
                0
            };
            let first = (t0 - origin).div_euclid(s) * s + origin;
            let first = if first < t0 { first + s } else { first };
            let ticks = (0..)
                .map(|k| first + k * s)
                .take_while(|&t| t <= t1)
                .collect();
            return (ticks, Step::Ms(s));
        }
    }
    let month_index = |t: i64| {
        let (y, m, _) = civil_from_days(t.div_euclid(MS_PER_DAY));
        y * 12 + m - 1
    };
    let (m0, m1) = (month_index(t0), month_index(t1));
    let k = [1, 2, 3, 6, 12, 24, 60, 120, 600]
        .into_iter()
        .find(|k| (((m1 - m0) / k) as usize) < max)
        .unwrap_or(1200);
    let start = m0.div_euclid(k) * k;
    let ticks = (0..)
        .map(|i| start + i * k)
        .map(|mi| days_from_civil(mi.div_euclid(12), mi.rem_euclid(12) + 1, 1) * MS_PER_DAY)
        .skip_while(|&t| t < t0)
        .take_while(|&t| t <= t1)
        .collect();
    (ticks, Step::Months(k))
}

pub(super) fn tick_label(t: i64, step: Step) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(MS_PER_DAY));
    let sod = t.rem_euclid(MS_PER_DAY) / MS_PER_MIN;
    let day = format!("{} {d}", MONTHS[m as usize - 1]);
    match step {
        Step::Ms(s) if s < MS_PER_DAY && sod != 0 => format!("{:02}:{:02}", sod / 60, sod % 60),
        Step::Ms(_) => day,
        Step::Months(_) => format!("{} {y}", MONTHS[m as usize - 1]),
    }
}

/// `YYYY-MM-DD` (UTC) of a millisecond timestamp.
pub(super) fn date(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(MS_PER_DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

/// A step line through `values` at `times`: each holds until the next.
pub(super) fn steps(times: &[i64], values: &[f64]) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(2 * times.len());
    for (i, (&t, &v)) in times.iter().zip(values).enumerate() {
        if i > 0 {
            out.push((t, values[i - 1]));
        }
        out.push((t, v));
    }
    out
}
