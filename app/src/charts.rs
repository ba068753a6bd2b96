//! The portal's charts: pure functions from usage samples to inline SVG drawn
//! with plotters, and the exact cash forecast the burn-down shows.
//!
//! Quantities stay exact (`i128` nano-units, integer milliseconds) through
//! every decision; they become `f64` only on their way to a pixel. The SVG
//! has no XML declaration, a `viewBox` and `width="100%"`, so it can be
//! inlined in a page and scale with it; the same input gives the same bytes.
//!
//! Each chart is drawn in two [`Frame`]s, [`WIDE`] and [`NARROW`], and the
//! stylesheet shows the one that fits: a chart scaled down to a phone would
//! shrink its text below what people can read. A frame's text size is
//! chosen for the narrowest width the stylesheet shows it at, so its text
//! is never rendered smaller than 12 px. Titles are the page's headings,
//! not part of the picture, so they wrap on a phone instead of shrinking.
//!
//! The root `<svg>` carries where its time axis is drawn (`data-x0`,
//! `data-x1` in viewBox units, `data-t0`, `data-t1` in epoch ms), so a
//! pointer can be turned into a time without knowing plotters' layout.

use crate::layout::escape_text;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::{RangedCoordf64, RangedCoordi64};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use quota::forecast::Sample;
use quota::keys::{self, Key, KeyConfig};
use quota::quantity::NANO;
use quota::series::Stack;
use quota::time::{civil_from_days, days_from_civil};
use quota::{resources, Quantity, ResourceList};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::error::Error;
use std::ops::Range;

const MS_PER_MIN: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

/// How a key's amounts are shown: nano-units per display unit, and the
/// unit's name. Bytes show as GiB; cash keys are resource-hours. `cfg`
/// says which resources are GPUs (cards): the configured `--gpu-resources`.
pub fn unit_of(key: &str, cfg: &KeyConfig) -> (i128, &'static str) {
    const GIB: i128 = 1 << 30;
    let resource = Key::parse(key, cfg).map(|k| k.resource).unwrap_or_default();
    let (per, unit, cash_unit) = match resource.as_str() {
        "cpu" => (1, "cores", "core-hours"),
        "memory" | "ephemeral-storage" => (GIB, "GiB", "GiB-hours"),
        r if r.starts_with("hugepages-") => (GIB, "GiB", "GiB-hours"),
        "pods" => (1, "pods", "pod-hours"),
        r if cfg.is_gpu(r) => (1, "cards", "card-hours"),
        _ => (1, "units", "unit-hours"),
    };
    let cash = key.starts_with(keys::CASH_PREFIX);
    (per * NANO, if cash { cash_unit } else { unit })
}

/// An amount of `key` with its unit, for a value in a table or a readout:
/// `5 cards`, `64 GiB`, `12.5 card-hours` (two decimals at most, exact).
pub fn amount(key: &str, q: Quantity, cfg: &KeyConfig) -> String {
    let (per, unit) = unit_of(key, cfg);
    format!("{} {unit}", grouped(q.nanos(), per, 2))
}

// ---------------------------------------------------------------------------
// Forecast

/// A budget's sentence on the overview's cards, the quota page and under
/// its burn-down chart, from its one forecast (`quota::forecast::outlook`):
/// "GPU card-hours: 5,240 card-hours left · runs out in 8.3 days
/// (2026-12-07), burning 26 card-hours/h". The run-out words are
/// `Outlook::words`, the same on every page, the API and the alerts.
pub fn describe_outlook(o: &quota::forecast::Outlook, cfg: &KeyConfig) -> String {
    use quota::budget::runway::Runway;
    let k = &crate::key_name(&o.key, cfg);
    let amount = |q: Quantity| crate::display_quantity(&o.key, q, cfg);
    let left = o.left.nanos();
    // At a parent, what is left and what burns are its own work's, beside
    // its subtree's spending: say whose, and what went to its children.
    if !o.carved.is_zero() {
        let own = format!(
            "{k} for its own work ({} allocated to children)",
            amount(o.carved)
        );
        return match o.runway {
            Runway::Spent if left < 0 => format!(
                "{own}: run out, {} over budget",
                amount(Quantity::from_nanos(-left))
            ),
            Runway::Spent => format!("{own}: run out"),
            Runway::NotBurning => {
                format!("{own}: {} left, its own work not burning", amount(o.left))
            }
            Runway::Unknown => format!("{own}: {} left, no burn measured yet", amount(o.left)),
            Runway::Until { .. } | Runway::OutlastsPeriod { .. } => format!(
                "{own}: {} left · {}, its own work burning {}/h",
                amount(o.left),
                o.words(),
                amount(o.burn_per_hour)
            ),
        };
    }
    match o.runway {
        Runway::Spent if left < 0 => {
            format!(
                "{k} has run out: {} over budget",
                amount(Quantity::from_nanos(-left))
            )
        }
        Runway::Spent => format!("{k} has run out: budget spent"),
        Runway::NotBurning => format!("{k}: {} left, not burning", amount(o.left)),
        Runway::Unknown => format!("{k}: {} left, no burn measured yet", amount(o.left)),
        Runway::Until { .. } | Runway::OutlastsPeriod { .. } => format!(
            "{k}: {} left · {}, burning {}/h",
            amount(o.left),
            o.words(),
            amount(o.burn_per_hour)
        ),
    }
}

// ---------------------------------------------------------------------------
// Charts

/// The size a chart is drawn at (viewBox units) and its text size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub w: u32,
    pub h: u32,
    /// Text size in viewBox units.
    pub text_px: f64,
}

/// Shown where the chart is at least 760 px wide (style/bizrq.css: wider
/// than 800 px screens, up to 960 px): 13 px text renders at 13–16 px.
pub const WIDE: Frame = Frame {
    w: 760,
    h: 300,
    text_px: 13.0,
};

/// Shown on screens up to 800 px, at most 480 px wide: on a 320 px phone
/// (300 px of chart) 14.5 px text renders at 12 px, at 480 px at 19 px.
pub const NARROW: Frame = Frame {
    w: 360,
    h: 280,
    text_px: 14.5,
};

impl Frame {
    /// plotters' font size for this frame's text: its SVG backend writes a
    /// font of size `s` as `s / 1.24` px.
    fn size(&self) -> f64 {
        self.text_px * 1.24
    }

    fn font(&self, colour: RGBColor) -> TextStyle<'static> {
        font(self.size(), colour)
    }

    /// Rough width of `text` in viewBox units (no font metrics without ttf).
    fn text_w(&self, text: &str) -> i32 {
        (text.chars().count() as f64 * self.text_px * 0.58).ceil() as i32
    }

    fn line_h(&self) -> i32 {
        (self.text_px * 1.6).ceil() as i32
    }
}

/// Used over time with hard as a step line; breaks the lines across gaps.
pub fn usage_chart(samples: &[Sample], key: &str, cfg: &KeyConfig, frame: Frame) -> String {
    let title = format!("{}: in use and hard", crate::key_name(key, cfg));
    let pts = sorted(samples);
    if pts.is_empty() {
        return message_svg("chart-usage", &title, "no data yet", frame);
    }
    let (per, unit) = unit_of(key, cfg);
    let times: Vec<i64> = pts.iter().map(|s| s.at_ms).collect();
    let used: Vec<(i64, f64)> = pts
        .iter()
        .map(|s| (s.at_ms, to_f64(resources::get(&s.used, key).nanos(), per)))
        .collect();
    let hard: Vec<Option<i128>> = pts
        .iter()
        .map(|s| s.hard.get(key).map(Quantity::nanos))
        .collect();
    let (t0, t1) = time_span(times[0], times[times.len() - 1]);
    let top = used
        .iter()
        .map(|p| p.1)
        .chain(hard.iter().flatten().map(|h| to_f64(*h, per)))
        .fold(0.0, f64::max);
    let mut legend = vec![("in use", Swatch::Area(USED))];
    if hard.iter().any(Option::is_some) {
        legend.push(("hard", Swatch::Line(HARD)));
    }
    render(
        "chart-usage",
        &title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, 0.0..headroom(top), unit)?;
            let cols = chart.plotting_area().dim_in_pixel().0 as usize;
            for seg in segments(&times) {
                draw_line_with_area(
                    &mut chart,
                    &decimate(&used[seg.clone()], t0, t1, cols),
                    USED,
                    0.0,
                )?;
                for run in hard_steps(&times[seg.clone()], &hard[seg], per) {
                    draw_line(&mut chart, &run, HARD)?;
                }
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

/// Fill colours of children in a stacked chart, in order; the last one
/// also stands for "other children" beyond the first seven.
const LAYERS: [RGBColor; 8] = [
    RGBColor(0x2e, 0x90, 0xfa),
    RGBColor(0x12, 0xb7, 0x6a),
    RGBColor(0x7a, 0x5a, 0xf8),
    RGBColor(0xf7, 0x90, 0x09),
    RGBColor(0xee, 0x46, 0xbc),
    RGBColor(0x15, 0xb7, 0x9e),
    RGBColor(0x9e, 0x77, 0x42),
    RGBColor(0x98, 0xa2, 0xb3),
];

/// The colour a stacked chart gives its `i`-th layer (as [`children_layers`] orders them).
pub fn layer_colour(i: usize) -> String {
    let c = LAYERS[i.min(LAYERS.len() - 1)];
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The layers a stacked chart draws: the first seven children as they
/// are, the rest summed as "other children".
pub fn children_layers(stack: &Stack) -> Vec<(String, Vec<Quantity>)> {
    let keep = LAYERS.len() - 1;
    let mut layers: Vec<(String, Vec<Quantity>)> =
        stack.layers.iter().take(keep).cloned().collect();
    if stack.layers.len() > keep {
        let mut rest = vec![Quantity::ZERO; stack.times.len()];
        for (_, values) in &stack.layers[keep..] {
            for (r, v) in rest.iter_mut().zip(values) {
                *r = r.saturating_add(*v);
            }
        }
        layers.push((
            format!("{} other children", stack.layers.len() - keep),
            rest,
        ));
    }
    layers
}

/// The children's use of `key`, stacked, with this quota's hard as a
/// step line (from `own`, its own samples): what each child holds of it.
pub fn children_chart(
    stack: &Stack,
    own: &[Sample],
    key: &str,
    cfg: &KeyConfig,
    frame: Frame,
) -> String {
    let title = format!("{}: used by children", crate::key_name(key, cfg));
    let layers = children_layers(stack);
    if layers.is_empty() || stack.times.is_empty() {
        return message_svg("chart-children", &title, "no child uses it", frame);
    }
    let (per, unit) = unit_of(key, cfg);
    let times = &stack.times;
    // Running totals: layer i is drawn between tops[i] and tops[i + 1].
    let mut tops: Vec<Vec<f64>> = vec![vec![0.0; times.len()]];
    for (_, values) in &layers {
        let below = tops.last().cloned().unwrap_or_default();
        tops.push(
            below
                .iter()
                .zip(values)
                .map(|(b, v)| b + to_f64(v.nanos(), per))
                .collect(),
        );
    }
    let own = sorted(own);
    let own_times: Vec<i64> = own.iter().map(|s| s.at_ms).collect();
    let hard: Vec<Option<i128>> = own
        .iter()
        .map(|s| s.hard.get(key).map(Quantity::nanos))
        .collect();
    let first = times[0].min(own_times.first().copied().unwrap_or(times[0]));
    let last = times[times.len() - 1].max(own_times.last().copied().unwrap_or(0));
    let (t0, t1) = time_span(first, last);
    let top = tops
        .last()
        .into_iter()
        .flatten()
        .copied()
        .chain(hard.iter().flatten().map(|h| to_f64(*h, per)))
        .fold(0.0, f64::max);
    let mut legend: Vec<(&str, Swatch)> = layers
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            (
                name.as_str(),
                Swatch::Stack(LAYERS[i.min(LAYERS.len() - 1)]),
            )
        })
        .collect();
    if hard.iter().any(Option::is_some) {
        legend.push(("hard", Swatch::Line(HARD)));
    }
    render(
        "chart-children",
        &title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, 0.0..headroom(top), unit)?;
            for (i, pair) in tops.windows(2).enumerate() {
                let colour = LAYERS[i.min(LAYERS.len() - 1)];
                // Each value holds until the next point: steps, as sampled.
                let upper = steps(times, &pair[1]);
                let mut poly = upper.clone();
                poly.extend(steps(times, &pair[0]).into_iter().rev());
                chart.draw_series(std::iter::once(Polygon::new(
                    poly,
                    colour.mix(0.55).filled(),
                )))?;
                chart.draw_series(LineSeries::new(upper, colour.stroke_width(1)))?;
            }
            for run in hard_steps(&own_times, &hard, per) {
                draw_line(&mut chart, &run, HARD)?;
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

/// A step line through `values` at `times`: each holds until the next.
fn steps(times: &[i64], values: &[f64]) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(2 * times.len());
    for (i, (&t, &v)) in times.iter().zip(values).enumerate() {
        if i > 0 {
            out.push((t, values[i - 1]));
        }
        out.push((t, v));
    }
    out
}

/// Remaining cash budget over time, with a dashed forecast from the latest
/// point to the budget's run-out date (`outlook`, its one forecast: the
/// date and words every page shows).
pub fn burn_down_chart(
    samples: &[Sample],
    outlook: &quota::forecast::Outlook,
    now_ms: i64,
    cfg: &KeyConfig,
    frame: Frame,
) -> String {
    let cash_key = outlook.key.as_str();
    let title = format!("{}: remaining budget", crate::key_name(cash_key, cfg));
    let pts: Vec<&Sample> = sorted(samples)
        .into_iter()
        .filter(|s| s.at_ms <= now_ms)
        .collect();
    if pts.is_empty() {
        return message_svg("chart-burn-down", &title, "no data yet", frame);
    }
    let f = outlook.as_forecast();
    let (per, unit) = unit_of(cash_key, cfg);
    let times: Vec<i64> = pts.iter().map(|s| s.at_ms).collect();
    let rem: Vec<(i64, f64)> = pts
        .iter()
        .map(|s| {
            let left = resources::get(&s.hard, cash_key)
                .nanos()
                .saturating_sub(resources::get(&s.used, cash_key).nanos());
            (s.at_ms, to_f64(left, per))
        })
        .collect();
    let (t_first, t_last) = (times[0], times[times.len() - 1]);
    let last = rem[rem.len() - 1];
    // Show at most as much future as there is history (a day at least), so
    // a far-off date does not squash the history into a sliver.
    let horizon = (t_last - t_first).max(MS_PER_DAY);
    // Where the forecast ends and how it is labelled. The line starts at
    // the latest point and falls at the forecast's rate, so it meets zero
    // exactly at the date named, or leaves the chart at its right edge.
    let (forecast_line, mark, t_end) = match f.exhausted_at_ms {
        _ if f.remaining.nanos() <= 0 => (
            None,
            Mark::Date(now_ms, "exhausted".to_string()),
            now_ms + horizon / 20,
        ),
        Some(at) if at.saturating_sub(now_ms) <= horizon => {
            let end = at.max(last.0);
            (
                Some(vec![last, (end, 0.0)]),
                Mark::Date(end, format!("runs out {}", date(at))),
                end + (end - t_first) / 20,
            )
        }
        Some(at) => {
            let end = now_ms + horizon;
            let v = last.1 * (1.0 - (end - last.0) as f64 / (at - last.0).max(1) as f64);
            (
                Some(vec![last, (end, v)]),
                Mark::Beyond((end, v), format!("runs out {} →", date(at))),
                end,
            )
        }
        None => {
            let end = now_ms + horizon / 10;
            (
                Some(vec![last, (end, last.1)]),
                // Below the level line: above it sits the "now" label.
                Mark::End((end, last.1), "not burning".into(), VPos::Top),
                end,
            )
        }
    };
    let (t0, t1) = time_span(t_first, t_end.max(t_last));
    let lo = rem.iter().map(|p| p.1).fold(0.0, f64::min);
    let hi = rem.iter().map(|p| p.1).fold(0.0, f64::max);
    let y = if lo < 0.0 {
        lo * 1.1..headroom(hi)
    } else {
        0.0..headroom(hi)
    };
    let mut legend = vec![("remaining", Swatch::Area(USED))];
    if forecast_line.is_some() {
        legend.push(("forecast (what runs now)", Swatch::Dashed(WARN)));
    }
    let summary = describe_outlook(outlook, cfg);
    render(
        "chart-burn-down",
        &title,
        Some(&summary),
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, y.clone(), unit)?;
            let cols = chart.plotting_area().dim_in_pixel().0 as usize;
            if y.start < 0.0 {
                draw_line(&mut chart, &[(t0, 0.0), (t1, 0.0)], FG)?;
            }
            chart.draw_series(DashedLineSeries::new(
                vec![(now_ms, y.start), (now_ms, y.end)],
                3,
                3,
                MUTED.stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(
                EmptyElement::at((now_ms, y.end))
                    + Text::new(
                        "now",
                        (-4, 2),
                        frame.font(MUTED).pos(Pos::new(HPos::Right, VPos::Top)),
                    ),
            ))?;
            for seg in segments(&times) {
                draw_line_with_area(&mut chart, &decimate(&rem[seg], t0, t1, cols), USED, 0.0)?;
            }
            if let Some(line) = forecast_line {
                chart.draw_series(DashedLineSeries::new(line, 6, 4, WARN.stroke_width(2)))?;
            }
            let below_now = frame.line_h() + 2;
            match mark {
                Mark::Date(at, label) => {
                    chart.draw_series(DashedLineSeries::new(
                        vec![(at, y.start), (at, y.end)],
                        3,
                        3,
                        WARN.stroke_width(1),
                    ))?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((at, 0.0)) + Circle::new((0, 0), 4, WARN.filled()),
                    ))?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((at, y.end))
                            + Text::new(
                                label,
                                (-4, below_now),
                                frame.font(FG).pos(Pos::new(HPos::Right, VPos::Top)),
                            ),
                    ))?;
                }
                Mark::Beyond(at, label) => {
                    // The dot where the line leaves the chart; the words at
                    // the top right, under "now": beside a low dot they sat
                    // on the axis's dates.
                    chart.draw_series(std::iter::once(
                        EmptyElement::at(at) + Circle::new((0, 0), 4, WARN.filled()),
                    ))?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((at.0, y.end))
                            + Text::new(
                                label,
                                (-4, below_now),
                                frame.font(FG).pos(Pos::new(HPos::Right, VPos::Top)),
                            ),
                    ))?;
                }
                Mark::End(at, label, v) => {
                    // Words under a dot in the lowest third would sit on the
                    // axis's dates: above it then.
                    let low = at.1 - y.start < (y.end - y.start) / 3.0;
                    let v = if low && matches!(v, VPos::Top) {
                        VPos::Bottom
                    } else {
                        v
                    };
                    let dy = if matches!(v, VPos::Top) { 6 } else { -6 };
                    chart.draw_series(std::iter::once(
                        EmptyElement::at(at)
                            + Circle::new((0, 0), 4, WARN.filled())
                            + Text::new(
                                label,
                                (-6, dy),
                                frame.font(FG).pos(Pos::new(HPos::Right, v)),
                            ),
                    ))?;
                }
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

/// Horizontal bars of the models under a generic key (`A100`, `V100`, … under
/// `requests.nvidia.com/gpu`): used against hard where a model has one, plus
/// what the generic key counts that no model accounts for.
pub fn model_breakdown_chart(
    used: &ResourceList,
    hard: &ResourceList,
    generic_key: &str,
    cfg: &KeyConfig,
    frame: Frame,
) -> String {
    let title = model_breakdown_title(used, hard, generic_key, cfg);
    let (per, unit) = unit_of(generic_key, cfg);
    let generic_used = resources::get(used, generic_key).nanos();
    let prefix = format!("{generic_key}.");
    let model_of = |k: &'_ str| -> Option<String> {
        k.strip_prefix(&prefix)
            .filter(|m| keys::is_model_name(m))
            .map(str::to_string)
    };
    let mut models: BTreeMap<String, (i128, Option<i128>)> = BTreeMap::new();
    for (k, q) in used {
        if let Some(m) = model_of(k) {
            models.entry(m).or_default().0 = q.nanos();
        }
    }
    for (k, q) in hard {
        if let Some(m) = model_of(k) {
            models.entry(m).or_default().1 = Some(q.nanos());
        }
    }
    let modelled: i128 = models.values().map(|v| v.0).sum();
    // A model with no hard and no use is not drawn (a row of "0 / 0").
    let mut rows: Vec<(String, i128, Option<i128>)> = models
        .into_iter()
        .filter(|(_, (u, h))| *u != 0 || h.is_some_and(|h| h != 0))
        .map(|(m, (u, h))| (m, u, h))
        .collect();
    if generic_used - modelled > 0 {
        rows.push(("other".into(), (generic_used - modelled).max(0), None));
    }
    if rows.is_empty() {
        return message_svg("chart-models", &title, "no data yet", frame);
    }
    let n = rows.len();
    let top = rows
        .iter()
        .map(|r| r.1.max(r.2.unwrap_or(0)))
        .max()
        .unwrap_or(0);
    // Room on the right for the value labels.
    let x_max = if top > 0 {
        to_f64(top, per) * 1.45
    } else {
        1.0
    };
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let label_px = names.iter().map(|s| frame.text_w(s)).max().unwrap_or(0) + 14;
    // Rows are 100 y-units tall; row i is centred at 100·(n − i) − 50 so
    // the first model is at the top. (Integer y: plotters' f64 axis does not
    // take a label formatter once its key points are given.)
    let centre = |i: usize| 100 * (n - i) as i64 - 50;
    // The legend names exactly the colours drawn.
    let colours: Vec<RGBColor> = rows.iter().map(|r| bar_colour(r.1, r.2)).collect();
    let mut legend = vec![("in use", Swatch::Bar(OK))];
    if colours.contains(&WARN) {
        legend.push(("≥ 80 % of hard", Swatch::Bar(WARN)));
    }
    if colours.contains(&BAD) {
        legend.push(("over hard", Swatch::Bar(BAD)));
    }
    if rows.iter().any(|r| r.2.is_some()) {
        legend.push(("hard", Swatch::Track));
    }
    render(
        "chart-models",
        &title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let centres: Vec<i64> = (0..n).map(centre).collect();
            let mut chart = ChartBuilder::on(root)
                .margin_top(top_px)
                .margin_right(16)
                .margin_left(8)
                .margin_bottom(6)
                .x_label_area_size(frame.line_h() as u32 * 2 + 6)
                .y_label_area_size(label_px.clamp(40, frame.w as i32 / 3) as u32)
                .build_cartesian_2d(0.0..x_max, (0..100 * n as i64).with_key_points(centres))?;
            let name_at = |v: &i64| {
                let i = n as i64 - 1 - v.div_euclid(100);
                usize::try_from(i)
                    .ok()
                    .and_then(|i| names.get(i))
                    .cloned()
                    .unwrap_or_default()
            };
            chart
                .configure_mesh()
                .disable_y_mesh()
                .bold_line_style(GRID)
                .light_line_style(TRANSPARENT)
                .axis_style(MUTED)
                .label_style(frame.font(MUTED))
                .axis_desc_style(frame.font(FG))
                .x_labels((frame.w as usize / (frame.text_px as usize * 6)).clamp(3, 8))
                .x_label_formatter(&|v| fmt_tick_value(*v))
                .y_label_formatter(&name_at)
                .x_desc(unit)
                .draw()?;
            for (i, (_, u, h)) in rows.iter().enumerate() {
                let y = centre(i);
                let uf = to_f64(*u, per);
                if let Some(h) = h {
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y - 30), (to_f64(*h, per), y + 30)],
                        TRACK.filled(),
                    )))?;
                }
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y - 30), (uf, y + 30)],
                    colours[i].filled(),
                )))?;
                // The hard tick goes on top, so an overrun bar still shows it.
                if let Some(h) = h {
                    let hf = to_f64(*h, per);
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(hf, y - 40), (hf, y + 40)],
                        FG.stroke_width(2),
                    )))?;
                }
                let label = match h {
                    Some(h) => format!("{} / {}", decimal(*u, per, 2), decimal(*h, per, 2)),
                    None => decimal(*u, per, 2),
                };
                let end = uf.max(h.map_or(0.0, |h| to_f64(h, per)));
                chart.draw_series(std::iter::once(
                    EmptyElement::at((end, y))
                        + Text::new(
                            label,
                            (6, 0),
                            frame.font(FG).pos(Pos::new(HPos::Left, VPos::Center)),
                        ),
                ))?;
            }
            Ok(None)
        },
    )
}

/// "GPUs by model: 1,400 of 2,000 cards in use" (thousands grouped, as
/// every figure on the pages).
pub fn model_breakdown_title(
    used: &ResourceList,
    hard: &ResourceList,
    generic_key: &str,
    cfg: &KeyConfig,
) -> String {
    let (per, unit) = unit_of(generic_key, cfg);
    let generic_used = resources::get(used, generic_key).nanos();
    match hard.get(generic_key).map(Quantity::nanos) {
        Some(h) => format!(
            "{} by model: {} of {} {unit} in use",
            crate::key_name(generic_key, cfg),
            grouped(generic_used, per, 2),
            grouped(h, per, 2)
        ),
        None => format!(
            "{} by model: {} {unit} in use",
            crate::key_name(generic_key, cfg),
            grouped(generic_used, per, 2)
        ),
    }
}

/// A report's stacked bars (`/reports`): one bar per bucket, one layer
/// per group (the first seven groups by total, the rest summed as
/// "others"), in `unit`. Drawn by hand as SVG (bars need no plotters):
/// the y axis at a round step, every label that fits on the x axis, and
/// a legend wrapping onto rows. Negative amounts (refunds beyond use)
/// are drawn as zero; the values table shows them.
pub fn report_chart(
    title: &str,
    buckets: &[String],
    layers: &[(String, Vec<f64>)],
    unit: &str,
    frame: Frame,
) -> String {
    let class = "chart-report";
    if buckets.is_empty() || layers.is_empty() {
        return message_svg(class, title, "nothing spent in this range", frame);
    }
    let (w, h) = (frame.w as f64, frame.h as f64);
    let tp = frame.text_px;
    let line = frame.line_h() as f64;
    // Legend rows.
    let mut legend = String::new();
    let (mut lx, mut ly) = (8.0, line * 0.8);
    for (i, (name, _)) in layers.iter().enumerate() {
        let label: String = name.chars().take(28).collect();
        let lw = frame.text_w(&label) as f64 + tp + 14.0;
        if lx + lw > w - 8.0 && lx > 8.0 {
            lx = 8.0;
            ly += line;
        }
        legend.push_str(&format!(
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"{tp:.1}\" height=\"{tp:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{ly:.1}\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#1D2330\">{}</text>\n",
            ly - tp * 0.85,
            layer_colour(i),
            lx + tp + 4.0,
            escape_text(&label)
        ));
        lx += lw;
    }
    let totals: Vec<f64> = (0..buckets.len())
        .map(|b| {
            layers
                .iter()
                .map(|(_, v)| v.get(b).copied().unwrap_or(0.0).max(0.0))
                .sum()
        })
        .collect();
    let top = totals.iter().copied().fold(0.0, f64::max);
    let (step, ticks) = round_step(top);
    let y_max = step * ticks as f64;
    let tick_label = |v: f64| crate_group(v);
    let label_w = (0..=ticks)
        .map(|i| frame.text_w(&tick_label(step * i as f64)))
        .max()
        .unwrap_or(0) as f64;
    let (x0, x1) = (label_w + 12.0, w - 8.0);
    // Below the legend, a row of its own for the unit, then the bars.
    let unit_y = ly + line;
    let (y0, y1) = (unit_y + line * 0.7, h - line * 1.6);
    let yv = |v: f64| y1 - (y1 - y0) * if y_max > 0.0 { v / y_max } else { 0.0 };
    let mut body = String::new();
    for i in 0..=ticks {
        let v = step * i as f64;
        let y = yv(v);
        body.push_str(&format!(
            "<line x1=\"{x0:.1}\" x2=\"{x1:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#E4E7EC\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#667085\">{}</text>\n",
            x0 - 6.0,
            y + tp * 0.35,
            tick_label(v)
        ));
    }
    let slot = (x1 - x0) / buckets.len() as f64;
    let bar = (slot * 0.7).max(1.0);
    for (b, label) in buckets.iter().enumerate() {
        let x = x0 + slot * b as f64 + (slot - bar) / 2.0;
        let mut base = 0.0;
        for (i, (name, values)) in layers.iter().enumerate() {
            let v = values.get(b).copied().unwrap_or(0.0).max(0.0);
            if v <= 0.0 {
                continue;
            }
            let (ya, yb) = (yv(base + v), yv(base));
            body.push_str(&format!(
                "<rect x=\"{x:.1}\" y=\"{ya:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{} · {}: {} {}</title></rect>\n",
                (yb - ya).max(0.5),
                layer_colour(i),
                escape_text(label),
                escape_text(name),
                crate_group(v),
                escape_text(unit)
            ));
            base += v;
        }
    }
    // x labels: as many as fit, evenly.
    let widest = buckets.iter().map(|l| frame.text_w(l)).max().unwrap_or(0) as f64 + 8.0;
    let every = ((widest / slot).ceil() as usize).max(1);
    for (b, label) in buckets.iter().enumerate().step_by(every) {
        // Centred under its bar, but never past the chart's edges (the
        // last day's date was cut at the right).
        let half = frame.text_w(label) as f64 / 2.0;
        let x = (x0 + slot * (b as f64 + 0.5)).clamp(half + 2.0, (w - half - 2.0).max(half + 2.0));
        body.push_str(&format!(
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#667085\">{}</text>\n",
            y1 + line,
            escape_text(label)
        ));
    }
    body.push_str(&format!(
        "<text x=\"{x0:.1}\" y=\"{unit_y:.1}\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#667085\">{}</text>\n",
        escape_text(unit)
    ));
    format!(
        "{}<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#FFFFFF\"/>\n{legend}{body}</svg>\n",
        svg_open(class, title, frame, None)
    )
}

/// A round step for an axis up to `top`: 1, 2 or 5 × 10^n, and how many
/// steps reach it (at least one).
fn round_step(top: f64) -> (f64, usize) {
    if top <= 0.0 || !top.is_finite() {
        return (1.0, 1);
    }
    let rough = top / 4.0;
    let mag = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * mag);
    (step, ((top / step).ceil() as usize).max(1))
}

/// An axis number with thousands separated: `12,500`, `0.25`.
fn crate_group(v: f64) -> String {
    let text = if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    };
    quota::readable::group_thousands(&text)
}

/// A chart in both frames, for a `<figure>`: the stylesheet shows one.
pub fn both(draw: impl Fn(Frame) -> String) -> String {
    let wide = draw(WIDE).replacen("class=\"chart ", "class=\"chart wide ", 1);
    let narrow = draw(NARROW).replacen("class=\"chart ", "class=\"chart narrow ", 1);
    format!("{wide}{narrow}")
}

// ---------------------------------------------------------------------------
// Drawing helpers

type Area<'b> = DrawingArea<SVGBackend<'b>, Shift>;
type TimeChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<WithKeyPoints<RangedCoordi64>, RangedCoordf64>>;
type Drawn<T = ()> = Result<T, Box<dyn Error>>;

// The console palette (style/bizrq.css).
const FG: RGBColor = RGBColor(0x1d, 0x23, 0x30);
const MUTED: RGBColor = RGBColor(0x66, 0x70, 0x85);
const GRID: RGBColor = RGBColor(0xe4, 0xe7, 0xec);
const TRACK: RGBColor = RGBColor(0xd0, 0xd5, 0xdd);
const USED: RGBColor = RGBColor(0x2e, 0x90, 0xfa);
const HARD: RGBColor = RGBColor(0xd9, 0x2d, 0x20);
const OK: RGBColor = RGBColor(0x12, 0xb7, 0x6a);
const WARN: RGBColor = RGBColor(0xf7, 0x90, 0x09);
const BAD: RGBColor = RGBColor(0xd9, 0x2d, 0x20);

/// How the burn-down marks the forecast: a date line with its label at the
/// top, or a label at the end of the forecast line (above or below it).
enum Mark {
    Date(i64, String),
    End((i64, f64), String, VPos),
    /// The forecast leaves the chart at this point before its date: a dot
    /// there, the words at the top right.
    Beyond((i64, f64), String),
}

/// A legend entry's picture: drawn the way its series is.
enum Swatch {
    Line(RGBColor),
    Dashed(RGBColor),
    /// A line over its light fill (usage, remaining budget).
    Area(RGBColor),
    /// A stacked layer: stronger fill, thin top line.
    Stack(RGBColor),
    Bar(RGBColor),
    /// The hard of a model: a grey track with a dark tick.
    Track,
}

/// Where a time chart's x axis is, for the pointer's readout.
struct Mapping {
    x: Range<i32>,
    t: Range<i64>,
}

fn mapping(chart: &TimeChart<'_, '_>, t: Range<i64>) -> Mapping {
    Mapping {
        x: chart.plotting_area().get_pixel_range().0,
        t,
    }
}

fn font(size: f64, colour: RGBColor) -> TextStyle<'static> {
    let style = ("sans-serif", size).into_font();
    TextStyle {
        font: style,
        color: colour.to_backend_color(),
        pos: Pos::new(HPos::Left, VPos::Top),
    }
}

/// Draws the frame (background, legend) and then `body`, and wraps the
/// result as inline SVG. A drawing error becomes a message, not a panic.
fn render(
    class: &str,
    title: &str,
    summary: Option<&str>,
    frame: Frame,
    legend: &[(&str, Swatch)],
    body: impl FnOnce(&Area<'_>, u32) -> Drawn<Option<Mapping>>,
) -> String {
    let mut buf = String::new();
    let map = Cell::new(None);
    let drawn: Drawn = (|| {
        let root = SVGBackend::with_string(&mut buf, (frame.w, frame.h)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = header(&root, frame, legend)?;
        map.set(body(&root, top)?);
        root.present()?;
        Ok(())
    })();
    match drawn {
        Ok(()) => {
            let body = buf.split_once('\n').map_or("", |(_, rest)| rest);
            let label = match summary {
                Some(s) => format!("{title}. {s}"),
                None => title.to_string(),
            };
            format!("{}{body}", svg_open(class, &label, frame, map.take()))
        }
        Err(e) => message_svg(
            class,
            title,
            &format!("chart could not be drawn: {e}"),
            frame,
        ),
    }
}

fn svg_open(class: &str, title: &str, frame: Frame, map: Option<Mapping>) -> String {
    let t = escape_text(title);
    let (w, h) = (frame.w, frame.h);
    let data = map.map_or(String::new(), |m| {
        format!(
            " data-x0=\"{}\" data-x1=\"{}\" data-t0=\"{}\" data-t1=\"{}\"",
            m.x.start, m.x.end, m.t.start, m.t.end
        )
    });
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart {class}\" viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-label=\"{t}\"{data}>\n<title>{t}</title>\n"
    )
}

/// A chart-sized frame holding a message ("no data yet").
fn message_svg(class: &str, title: &str, message: &str, frame: Frame) -> String {
    let (w, h) = (frame.w, frame.h);
    format!(
        "{}<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#FFFFFF\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"{}\" fill=\"#667085\">{}</text>\n</svg>\n",
        svg_open(class, &format!("{title}: {message}"), frame, None),
        w / 2,
        h / 2,
        frame.text_px,
        escape_text(message)
    )
}

/// The legend, left to right, wrapping onto more rows where the width
/// ends; returns the height it takes.
fn header(root: &Area<'_>, frame: Frame, legend: &[(&str, Swatch)]) -> Drawn<u32> {
    let line = frame.line_h();
    let (mut x, mut y) = (12, 8 + line / 2);
    let entry_w = |label: &str| 16 + 6 + frame.text_w(label) + 16;
    for (label, swatch) in legend {
        if x > 12 && x + entry_w(label) > frame.w as i32 - 8 {
            x = 12;
            y += line;
        }
        match swatch {
            Swatch::Line(c) => root.draw(&PathElement::new(
                vec![(x, y), (x + 16, y)],
                c.stroke_width(2),
            ))?,
            Swatch::Dashed(c) => {
                root.draw(&PathElement::new(
                    vec![(x, y), (x + 6, y)],
                    c.stroke_width(2),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x + 10, y), (x + 16, y)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::Area(c) => {
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    c.mix(0.15).filled(),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x, y - 5), (x + 16, y - 5)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::Stack(c) => {
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    c.mix(0.55).filled(),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x, y - 5), (x + 16, y - 5)],
                    c.stroke_width(1),
                ))?;
            }
            Swatch::Bar(c) => {
                root.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled()))?
            }
            Swatch::Track => {
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    TRACK.filled(),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x + 15, y - 7), (x + 15, y + 7)],
                    FG.stroke_width(2),
                ))?;
            }
        }
        root.draw(&Text::new(
            label.to_string(),
            (x + 22, y),
            frame.font(FG).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        x += entry_w(label);
    }
    Ok((y + line / 2 + 6) as u32)
}

/// A chart with time (UTC) on x, ticked at calendar boundaries, and the
/// key's unit on y.
fn time_chart<'a, 'b>(
    root: &'a Area<'b>,
    frame: Frame,
    top: u32,
    t: Range<i64>,
    y: Range<f64>,
    unit: &str,
) -> Drawn<TimeChart<'a, 'b>> {
    let y_labels = (frame.text_px * 5.0) as u32;
    let plot_w = root.dim_in_pixel().0.saturating_sub(y_labels + 24) as usize;
    // A tick label ("Nov 23", "14:00") is about six characters wide.
    let tick_w = (frame.text_px * 6.0) as usize;
    let (ticks, step) = time_ticks(t.start, t.end, (plot_w / tick_w).clamp(2, 12));
    let mut chart = ChartBuilder::on(root)
        .margin_top(top)
        .margin_right(24)
        .margin_left(8)
        .margin_bottom(6)
        .x_label_area_size(frame.line_h() as u32 * 2 + 6)
        .y_label_area_size(y_labels)
        .build_cartesian_2d(t.clone().with_key_points(ticks), y)?;
    let x_desc = match step {
        Step::Ms(s) if s < MS_PER_DAY => format!("time (UTC), from {}", date(t.start)),
        _ => "date (UTC)".to_string(),
    };
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(MUTED)
        .label_style(frame.font(MUTED))
        .axis_desc_style(frame.font(FG))
        .y_labels(
            ((frame.h as usize).saturating_sub(top as usize) / (frame.line_h() as usize * 2))
                .clamp(3, 6),
        )
        .x_label_formatter(&|t| tick_label(*t, step))
        .y_label_formatter(&|v| fmt_tick_value(*v))
        .x_desc(x_desc)
        .y_desc(unit)
        .draw()?;
    Ok(chart)
}

fn draw_line(chart: &mut TimeChart<'_, '_>, pts: &[(i64, f64)], colour: RGBColor) -> Drawn {
    match pts {
        [] => {}
        [p] => {
            chart.draw_series(std::iter::once(Circle::new(*p, 3, colour.filled())))?;
        }
        _ => {
            chart.draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?;
        }
    }
    Ok(())
}

fn draw_line_with_area(
    chart: &mut TimeChart<'_, '_>,
    pts: &[(i64, f64)],
    colour: RGBColor,
    base: f64,
) -> Drawn {
    if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
        if pts.len() > 1 {
            let mut poly = pts.to_vec();
            poly.push((last.0, base));
            poly.push((first.0, base));
            chart.draw_series(std::iter::once(Polygon::new(
                poly,
                colour.mix(0.15).filled(),
            )))?;
        }
    }
    draw_line(chart, pts, colour)
}

/// The hard line as steps: each value holds until the next sample changes
/// it. Splits where the key had no hard (unlimited then).
fn hard_steps(times: &[i64], hard: &[Option<i128>], per: i128) -> Vec<Vec<(i64, f64)>> {
    let mut runs = Vec::new();
    let mut run: Vec<(i64, f64)> = Vec::new();
    let mut prev: Option<i128> = None;
    for (&t, &h) in times.iter().zip(hard) {
        match (prev, h) {
            (_, None) => {
                if let Some(p) = prev {
                    run.push((t, to_f64(p, per)));
                }
                runs.push(std::mem::take(&mut run));
            }
            (None, Some(h)) => run.push((t, to_f64(h, per))),
            (Some(p), Some(h)) if p != h => {
                run.push((t, to_f64(p, per)));
                run.push((t, to_f64(h, per)));
            }
            _ => {}
        }
        prev = h;
    }
    if let (Some(p), Some(&t)) = (prev, times.last()) {
        if run.last().map(|l| l.0) != Some(t) {
            run.push((t, to_f64(p, per)));
        }
    }
    runs.push(run);
    runs.retain(|r| !r.is_empty());
    runs
}

fn bar_colour(used: i128, hard: Option<i128>) -> RGBColor {
    match hard {
        Some(h) if used > h => BAD,
        Some(h) if used * 5 >= h * 4 && h > 0 => WARN,
        _ => OK,
    }
}

// ---------------------------------------------------------------------------
// Series shaping

fn sorted(samples: &[Sample]) -> Vec<&Sample> {
    let mut v: Vec<&Sample> = samples.iter().collect();
    v.sort_by_key(|s| s.at_ms);
    v
}

fn to_f64(nanos: i128, per: i128) -> f64 {
    nanos as f64 / per as f64
}

/// An x span that is never empty: a single instant gets an hour around it.
fn time_span(t0: i64, t1: i64) -> (i64, i64) {
    if t1 > t0 {
        (t0, t1)
    } else {
        (t0 - MS_PER_HOUR / 2, t0 + MS_PER_HOUR / 2)
    }
}

fn headroom(top: f64) -> f64 {
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
fn segments(times: &[i64]) -> Vec<Range<usize>> {
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
fn decimate(pts: &[(i64, f64)], t0: i64, t1: i64, cols: usize) -> Vec<(i64, f64)> {
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

// ---------------------------------------------------------------------------
// Numbers, dates and ticks

/// `nanos / per` in decimal, at most `places` decimals (rounded half away
/// from zero), trailing zeros dropped. Exact: integers only.
fn decimal(nanos: i128, per: i128, places: u32) -> String {
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
fn grouped(nanos: i128, per: i128, places: u32) -> String {
    quota::readable::group_thousands(&decimal(nanos, per, places))
}

fn fmt_tick_value(v: f64) -> String {
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

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Ms(i64),
    Months(i64),
}

/// Ticks for [t0, t1]: the finest calendar step giving at most `max` ticks,
/// on UTC boundaries (weeks start on Monday, months on the 1st).
fn time_ticks(t0: i64, t1: i64, max: usize) -> (Vec<i64>, Step) {
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

fn tick_label(t: i64, step: Step) -> String {
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
fn date(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(MS_PER_DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::forecast::{forecast, Forecast, FORECAST_WINDOW_MS};

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";
    /// 2026-11-21T00:00:00Z
    const T0: i64 = 1_795_219_200_000;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    /// A month's report by day: every date stays inside the chart (the
    /// last one was cut at the right edge at 1440 px), and the unit sits
    /// on a row of its own, below the legend it overlapped.
    #[test]
    fn a_reports_dates_and_unit_fit_and_do_not_overlap_its_legend() {
        let days: Vec<String> = (1..=30).map(|d| format!("2026-11-{d:02}")).collect();
        let layers: Vec<(String, Vec<f64>)> = ["nlp", "cv", "speech", "platform", "product"]
            .iter()
            .map(|n| (n.to_string(), vec![120.0; 30]))
            .collect();
        for frame in [WIDE, NARROW] {
            let svg = report_chart("spent", &days, &layers, "card-hours", frame);
            let texts: Vec<(f64, f64, String, bool)> = svg
                .split("<text ")
                .skip(1)
                .map(|t| {
                    let attr = |a: &str| -> f64 {
                        let from = t.find(&format!("{a}=\"")).unwrap() + a.len() + 2;
                        t[from..from + t[from..].find('"').unwrap()]
                            .parse()
                            .unwrap()
                    };
                    let text = t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].to_string();
                    (
                        attr("x"),
                        attr("y"),
                        text,
                        t.contains("text-anchor=\"middle\""),
                    )
                })
                .collect();
            let w = frame.w as f64;
            for (x, _, text, middle) in texts.iter().filter(|t| t.2.starts_with("2026-")) {
                let tw = frame.text_w(text) as f64;
                let (a, b) = if *middle {
                    (x - tw / 2.0, x + tw / 2.0)
                } else {
                    (*x, x + tw)
                };
                assert!(
                    a >= 0.0 && b <= w,
                    "{text} at {a:.0}..{b:.0} outside 0..{w}"
                );
            }
            let legend_y = texts
                .iter()
                .filter(|t| layers.iter().any(|(n, _)| *n == t.2))
                .map(|t| t.1)
                .fold(0.0, f64::max);
            let unit = texts.iter().find(|t| t.2 == "card-hours").unwrap();
            assert!(
                unit.1 - frame.text_px * 0.8 >= legend_y + frame.text_px * 0.2,
                "the unit ({}) overlaps the legend's last row ({legend_y})",
                unit.1
            );
        }
    }

    fn list(items: &[(&str, Quantity)]) -> ResourceList {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// A measured forecast as the one forecast the pages read (the chart
    /// draws and words an `Outlook`; these tests measure burns from samples).
    fn outlook_of(f: &Forecast) -> quota::forecast::Outlook {
        let runway = if f.as_of_ms.is_none() {
            quota::budget::Runway::Unknown
        } else {
            quota::forecast::runway(f, None)
        };
        quota::forecast::Outlook {
            key: f.key.clone(),
            now_ms: f.now_ms,
            left: f.remaining,
            carved: quota::Quantity::ZERO,
            burn_per_hour: f.burn_per_hour,
            runway,
        }
    }

    /// The burn-down of `samples` with the burn measured from them.
    fn burn_down(s: &[Sample], key: &str, now: i64, cfg: &KeyConfig, frame: Frame) -> String {
        let o = outlook_of(&forecast(s, key, now, FORECAST_WINDOW_MS));
        burn_down_chart(s, &o, now, cfg, frame)
    }

    fn describe(f: &Forecast, cfg: &KeyConfig) -> String {
        describe_outlook(&outlook_of(f), cfg)
    }

    /// A cash sample: `budget` card-hours, `spent_nanos` spent.
    fn cash(at_ms: i64, budget: i64, spent_nanos: i128) -> Sample {
        Sample {
            at_ms,
            hard: list(&[(CASH, Quantity::from_units(budget))]),
            used: list(&[(CASH, Quantity::from_nanos(spent_nanos))]),
            self_used: ResourceList::new(),
        }
    }

    /// Minute samples over `hours` of a steady burn of `rate` card-hours/h,
    /// ending with `left` card-hours of the budget remaining.
    fn steady_burn(hours: i64, rate: i64, left: i64) -> Vec<Sample> {
        let minutes = hours * 60;
        let budget = rate * hours + left;
        (0..=minutes)
            .map(|m| {
                // Per-minute spend is not a whole nano-unit: floor it, as a
                // meter would, and let first/last difference stay exact.
                let spent = m as i128 * rate as i128 * NANO / 60;
                cash(T0 + m * MS_PER_MIN, budget, spent)
            })
            .collect()
    }

    fn usage(at_ms: i64, used: &str, hard: Option<&str>) -> Sample {
        Sample {
            at_ms,
            hard: hard.map(|h| list(&[(GPU, q(h))])).unwrap_or_default(),
            used: list(&[(GPU, q(used))]),
            self_used: ResourceList::new(),
        }
    }

    #[test]
    fn units_follow_the_resource() {
        assert_eq!(
            unit_of("requests.cpu", &KeyConfig::default()),
            (NANO, "cores")
        );
        assert_eq!(
            unit_of("limits.cpu.A4", &KeyConfig::default()),
            (NANO, "cores")
        );
        assert_eq!(
            unit_of("requests.memory", &KeyConfig::default()),
            ((1 << 30) * NANO, "GiB")
        );
        assert_eq!(
            unit_of("limits.ephemeral-storage", &KeyConfig::default()).1,
            "GiB"
        );
        assert_eq!(unit_of(GPU, &KeyConfig::default()), (NANO, "cards"));
        assert_eq!(
            unit_of("requests.nvidia.com/gpu.A100", &KeyConfig::default()).1,
            "cards"
        );
        assert_eq!(unit_of("pods", &KeyConfig::default()).1, "pods");
        assert_eq!(unit_of(CASH, &KeyConfig::default()), (NANO, "card-hours"));
        assert_eq!(
            unit_of("cash/requests.cpu", &KeyConfig::default()).1,
            "core-hours"
        );
        assert_eq!(
            unit_of("cash/requests.memory", &KeyConfig::default()).1,
            "GiB-hours"
        );
        assert_eq!(
            unit_of("requests.example.com/fpga", &KeyConfig::default()).1,
            "units"
        );
    }

    #[test]
    fn steady_burn_of_ten_per_hour_with_a_hundred_left_lasts_ten_hours() {
        let now = T0 + 24 * MS_PER_HOUR;
        let f = forecast(&steady_burn(24, 10, 100), CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(100));
        assert_eq!(f.burn_per_hour, Quantity::from_units(10));
        assert_eq!(f.burned, Quantity::from_units(240));
        assert_eq!(f.burn_from_ms, Some(T0));
        assert_eq!(f.exhausted_at_ms, Some(now + 10 * MS_PER_HOUR));
        assert_eq!(f.days_left, Some(10.0 / 24.0));
        assert_eq!(
            describe(&f, &KeyConfig::default()),
            "GPU card-hours: 100 card-hours left · runs out in 10 hours (2026-11-22), burning 10 card-hours/h"
        );
    }

    #[test]
    fn the_rate_comes_from_the_window_only() {
        // 5/h for the first two days, then 10/h for the last day.
        let mut s: Vec<Sample> = Vec::new();
        let mut spent = 0i128;
        for h in 0..=72 {
            s.push(cash(T0 + h * MS_PER_HOUR, 1000, spent));
            spent += if h < 48 { 5 } else { 10 } * NANO;
        }
        let now = T0 + 72 * MS_PER_HOUR;
        let f = forecast(&s, CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(f.burn_per_hour, Quantity::from_units(10));
        // 1000 − (48·5 + 24·10) = 520 left at 10/h: 52 h.
        assert_eq!(f.exhausted_at_ms, Some(now + 52 * MS_PER_HOUR));
        assert_eq!(
            describe(&f, &KeyConfig::default()),
            // 52 h is 2.17 days: rounded down, never overstated.
            "GPU card-hours: 520 card-hours left · runs out in 2.1 days (2026-11-26), burning 10 card-hours/h"
        );
    }

    #[test]
    fn no_burn_means_no_exhaustion_date() {
        let s: Vec<Sample> = (0..=24)
            .map(|h| cash(T0 + h * MS_PER_HOUR, 100, 40 * NANO))
            .collect();
        let f = forecast(&s, CASH, T0 + 24 * MS_PER_HOUR, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(60));
        assert_eq!(f.burn_per_hour, Quantity::ZERO);
        assert_eq!((f.exhausted_at_ms, f.days_left), (None, None));
        assert_eq!(
            describe(&f, &KeyConfig::default()),
            "GPU card-hours: 60 card-hours left, not burning"
        );
    }

    /// At a parent (research: 42,000 of its 51,000 card-hours allocated
    /// to its teams, which spent 18,096), "9,000 left, not burning" beside
    /// "18,096 spent in its subtree" read as a contradiction: the words
    /// say whose the figures are.
    #[test]
    fn a_parents_outlook_says_it_is_its_own_works() {
        let mut o = quota::forecast::Outlook {
            key: CASH.into(),
            now_ms: T0,
            left: Quantity::from_units(9_000),
            carved: Quantity::from_units(42_000),
            burn_per_hour: Quantity::ZERO,
            runway: quota::budget::Runway::NotBurning,
        };
        let cfg = KeyConfig::default();
        assert_eq!(
            describe_outlook(&o, &cfg),
            "GPU card-hours for its own work (42,000 card-hours allocated to children): \
             9,000 card-hours left, its own work not burning"
        );
        o.burn_per_hour = Quantity::from_units(10);
        o.runway = quota::budget::Runway::Until {
            at_ms: T0 + 900 * MS_PER_HOUR,
        };
        let words = describe_outlook(&o, &cfg);
        assert!(
            words.starts_with("GPU card-hours for its own work (42,000 card-hours allocated to children): 9,000 card-hours left · runs out in 37.5 days")
                && words.ends_with(", its own work burning 10 card-hours/h"),
            "{words}"
        );
        o.carved = Quantity::ZERO;
        assert_eq!(
            describe_outlook(&o, &cfg),
            format!(
                "GPU card-hours: 9,000 card-hours left · {}, burning 10 card-hours/h",
                o.words()
            )
        );
    }

    #[test]
    fn big_amounts_read_with_thousands_separated() {
        let s: Vec<Sample> = (0..=24)
            .map(|h| cash(T0 + h * MS_PER_HOUR, 158_500, 143_500 * NANO))
            .collect();
        let f = forecast(&s, CASH, T0 + 24 * MS_PER_HOUR, FORECAST_WINDOW_MS);
        assert_eq!(
            describe(&f, &KeyConfig::default()),
            "GPU card-hours: 15,000 card-hours left, not burning"
        );
        let cfg = KeyConfig::default();
        let gib = Quantity::from_nanos(1_099_511_627_776 * NANO);
        assert_eq!(amount("requests.memory", gib, &cfg), "1,024 GiB");
        assert_eq!(
            amount(CASH, Quantity::from_nanos(-1_234_567_500_000_000), &cfg),
            "-1,234,567.5 card-hours"
        );
    }

    #[test]
    fn a_spent_budget_is_exhausted_now() {
        let now = T0 + 2 * MS_PER_HOUR;
        let s = vec![
            cash(T0, 100, 90 * NANO),
            cash(T0 + MS_PER_HOUR, 100, 120 * NANO),
        ];
        let f = forecast(&s, CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(-20));
        assert_eq!((f.exhausted_at_ms, f.days_left), (Some(now), Some(0.0)));
        assert_eq!(
            describe(&f, &KeyConfig::default()),
            "GPU card-hours has run out: 20 card-hours over budget"
        );
        let exact = forecast(&[cash(T0, 100, 100 * NANO)], CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(exact.exhausted_at_ms, Some(now));
    }

    #[test]
    fn unmeasurable_burns_give_no_date() {
        let now = T0 + MS_PER_HOUR;
        assert_eq!(
            describe(
                &forecast(&[], CASH, now, FORECAST_WINDOW_MS),
                &KeyConfig::default()
            ),
            "GPU card-hours: 0 card-hours left, no burn measured yet"
        );
        // One sample: a level, not a rate.
        let one = forecast(&[cash(T0, 100, 5 * NANO)], CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(one.exhausted_at_ms, None);
        // Nothing in the last day: the burn is unknown, not zero-or-old.
        let stale = vec![cash(T0, 100, 0), cash(T0 + MS_PER_HOUR, 100, 10 * NANO)];
        let f = forecast(&stale, CASH, T0 + 3 * MS_PER_DAY, FORECAST_WINDOW_MS);
        assert_eq!(
            (f.exhausted_at_ms, f.remaining),
            (None, Quantity::from_units(90))
        );
        // Samples after `now` are ignored.
        let f = forecast(&stale, CASH, T0 + MS_PER_MIN, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(100));
    }

    #[test]
    fn gaps_split_lines_but_tiers_do_not() {
        let m = MS_PER_MIN;
        // Minute samples with a two-hour outage.
        let mut t: Vec<i64> = (0..10).map(|i| i * m).collect();
        t.extend((0..10).map(|i| 2 * MS_PER_HOUR + i * m));
        assert_eq!(segments(&t), vec![0..10, 10..20]);
        // Hourly peaks giving way to minute samples: one line.
        let mut t: Vec<i64> = (0..10).map(|i| i * MS_PER_HOUR).collect();
        t.extend((1..=10).map(|i| 10 * MS_PER_HOUR + i * m));
        assert_eq!(segments(&t), vec![0..20]);
        // Daily → hourly → minute, with one missing hourly peak: one line.
        let mut t: Vec<i64> = (0..6).map(|i| i * MS_PER_DAY).collect();
        t.extend(
            (1..8)
                .filter(|&i| i != 4)
                .map(|i| 5 * MS_PER_DAY + i * MS_PER_HOUR),
        );
        t.extend((1..8).map(|i| 5 * MS_PER_DAY + 8 * MS_PER_HOUR + i * m));
        assert_eq!(segments(&t), vec![0..t.len()]);
        assert_eq!(segments(&[5]), vec![0..1]);
        assert!(segments(&[]).is_empty());
    }

    #[test]
    fn hard_is_a_step_line_broken_where_unset() {
        let per = NANO;
        let runs = hard_steps(
            &[0, 10, 20, 30, 40, 50],
            &[
                Some(4 * per),
                Some(4 * per),
                Some(8 * per),
                None,
                Some(2 * per),
                Some(2 * per),
            ],
            per,
        );
        assert_eq!(
            runs,
            vec![
                vec![(0, 4.0), (20, 4.0), (20, 8.0), (30, 8.0)],
                vec![(40, 2.0), (50, 2.0)],
            ]
        );
    }

    #[test]
    fn ticks_land_on_calendar_boundaries() {
        let (ticks, step) = time_ticks(T0 + 7 * MS_PER_MIN, T0 + 6 * MS_PER_HOUR, 8);
        assert_eq!(step, Step::Ms(MS_PER_HOUR));
        assert_eq!(ticks[0], T0 + MS_PER_HOUR);
        assert_eq!(tick_label(ticks[0], step), "01:00");
        let (ticks, step) = time_ticks(T0 - 3 * MS_PER_HOUR, T0 + 20 * MS_PER_HOUR, 8);
        assert_eq!(step, Step::Ms(3 * MS_PER_HOUR));
        assert_eq!(tick_label(ticks[1], step), "Nov 21");
        // Weeks start on Monday: 2026-11-23.
        let (ticks, step) = time_ticks(T0, T0 + 50 * MS_PER_DAY, 8);
        assert_eq!(step, Step::Ms(7 * MS_PER_DAY));
        assert_eq!(date(ticks[0]), "2026-11-23");
        assert_eq!(tick_label(ticks[0], step), "Nov 23");
        let (ticks, step) = time_ticks(T0, T0 + 400 * MS_PER_DAY, 8);
        assert_eq!(step, Step::Months(2));
        assert_eq!(tick_label(ticks[0], step), "Jan 2027");
        assert_eq!(date(ticks[1]), "2027-03-01");
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal(12_500_000_000, NANO, 1), "12.5");
        assert_eq!(decimal(10 * NANO, NANO, 2), "10");
        assert_eq!(decimal(-1_250_000_000, NANO, 1), "-1.3");
        assert_eq!(decimal(3 * (1 << 29) * NANO, (1 << 30) * NANO, 2), "1.5");
        assert_eq!(decimal(1, NANO, 2), "0");
        assert_eq!(date(T0), "2026-11-21");
        assert_eq!(days_from_civil(2026, 11, 21) * MS_PER_DAY, T0);
    }

    fn week_of_gpu_usage() -> Vec<Sample> {
        (0..7 * 24)
            .map(|h| {
                let used = format!("{}", 2 + (h % 24) / 4);
                let hard = if h < 72 { "6" } else { "8" };
                usage(T0 + h * MS_PER_HOUR, &used, Some(hard))
            })
            .collect()
    }

    #[test]
    fn usage_chart_is_labelled_and_inline() {
        let svg = usage_chart(&week_of_gpu_usage(), GPU, &KeyConfig::default(), WIDE);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart chart-usage\" viewBox=\"0 0 760 300\" width=\"100%\" role=\"img\" aria-label=\"GPUs: in use and hard\" data-x0=\""), "{}", &svg[..200]);
        assert!(!svg.contains("<?xml"));
        assert!(svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<svg").count(), 1);
        for text in [
            "<title>GPUs: in use and hard</title>",
            ">\ncards\n</text>",
            ">\ndate (UTC)\n</text>",
            ">\nin use\n</text>",
            ">\nhard\n</text>",
            ">\nNov 23\n</text>",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        // The hard line steps from 6 to 8 cards on day 4.
        assert!(svg.contains("stroke=\"#D92D20\""));
        assert!(svg.contains("<polygon"));
    }

    #[test]
    fn usage_chart_handles_empty_single_and_gaps() {
        let empty = usage_chart(&[], GPU, &KeyConfig::default(), WIDE);
        assert!(empty.contains(">no data yet</text>"));
        assert!(empty.contains("viewBox=\"0 0 760 300\""));
        let one = usage_chart(
            &[usage(T0, "3", Some("8"))],
            GPU,
            &KeyConfig::default(),
            WIDE,
        );
        assert!(one.contains("<circle"), "a lone sample shows as a dot");
        assert!(
            one.contains(">\ntime (UTC), from 2026-11-20\n</text>")
                || one.contains(">\ntime (UTC), from 2026-11-21\n</text>")
        );
        let mut gappy: Vec<Sample> = (0..30)
            .map(|i| usage(T0 + i * MS_PER_MIN, "2", Some("4")))
            .collect();
        gappy.extend((0..30).map(|i| usage(T0 + 3 * MS_PER_HOUR + i * MS_PER_MIN, "3", None)));
        let svg = usage_chart(&gappy, GPU, &KeyConfig::default(), WIDE);
        assert_eq!(
            svg.matches("<polygon").count(),
            2,
            "one area per side of the gap"
        );
        // Memory is drawn in GiB.
        let mem = vec![Sample {
            at_ms: T0,
            hard: ResourceList::new(),
            used: list(&[("requests.memory", q("64Gi"))]),
            self_used: ResourceList::new(),
        }];
        assert!(
            usage_chart(&mem, "requests.memory", &KeyConfig::default(), WIDE)
                .contains(">\nGiB\n</text>")
        );
    }

    #[test]
    fn burn_down_shows_the_forecast_date() {
        let now = T0 + 24 * MS_PER_HOUR;
        let svg = burn_down(
            &steady_burn(24, 10, 100),
            CASH,
            now,
            &KeyConfig::default(),
            WIDE,
        );
        for text in [
            "<title>GPU card-hours: remaining budget. ",
            ">\ncard-hours\n</text>",
            ">\nremaining\n</text>",
            ">\nforecast (what runs now)\n</text>",
            ">\nruns out 2026-11-22\n</text>",
            ">\nnow\n</text>",
            "runs out in 10 hours (2026-11-22), burning 10 card-hours/h",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        let idle: Vec<Sample> = (0..=24)
            .map(|h| cash(T0 + h * MS_PER_HOUR, 100, 40 * NANO))
            .collect();
        assert!(burn_down(&idle, CASH, now, &KeyConfig::default(), WIDE)
            .contains(">\nnot burning\n</text>"));
        let spent = vec![cash(T0, 100, 150 * NANO)];
        assert!(burn_down(&spent, CASH, now, &KeyConfig::default(), WIDE)
            .contains(">\nexhausted\n</text>"));
        // A date beyond the shown horizon is named at the edge.
        let slow = vec![cash(now - MS_PER_HOUR, 10_000, 0), cash(now, 10_000, NANO)];
        assert!(burn_down(&slow, CASH, now, &KeyConfig::default(), WIDE)
            .contains(">\nruns out 2028-01-12 →\n</text>"));
        // Beyond the horizon with little left there: the line leaves the
        // chart low, and its words sit at the top, not on the axis's dates.
        let low = burn_down(
            &steady_burn(24, 10, 280),
            CASH,
            now,
            &KeyConfig::default(),
            WIDE,
        );
        let y_of = |svg: &str, words: &str| -> f64 {
            let at = svg.find(&format!(">\n{words}\n</text>")).unwrap();
            let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
            let y = &tag[tag.find(" y=\"").unwrap() + 4..];
            y[..y.find('"').unwrap()].parse().unwrap()
        };
        let words = "runs out 2026-11-23 →";
        assert!(
            y_of(&low, words) < y_of(&low, "now") + 40.0,
            "{words} under now at the top: {low}"
        );
        assert!(
            burn_down(&[], CASH, now, &KeyConfig::default(), WIDE).contains(">no data yet</text>")
        );
    }

    #[test]
    fn model_breakdown_lists_models_and_the_rest() {
        let used = list(&[
            (GPU, q("14")),
            ("requests.nvidia.com/gpu.A100", q("7")),
            ("requests.nvidia.com/gpu.V100", q("3")),
            ("requests.nvidia.com/gpu.T4", q("1")),
            ("requests.cpu", q("40")),
        ]);
        let hard = list(&[
            (GPU, q("20")),
            ("requests.nvidia.com/gpu.A100", q("8")),
            ("requests.nvidia.com/gpu.V100", q("2")),
        ]);
        let svg = model_breakdown_chart(&used, &hard, GPU, &KeyConfig::default(), WIDE);
        for text in [
            "<title>GPUs by model: 14 of 20 cards in use</title>",
            ">\nA100\n</text>",
            ">\nV100\n</text>",
            ">\nT4\n</text>",
            ">\nother\n</text>",
            ">\n7 / 8\n</text>",
            ">\n3 / 2\n</text>",
            ">\n3\n</text>",
            ">\ncards\n</text>",
            ">\nin use\n</text>",
            ">\nhard\n</text>",
            ">\nover hard\n</text>",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(svg.contains("fill=\"#D92D20\""), "V100 is over its hard");
        // A100 is at 7 of 8: the legend names that colour too, as drawn.
        assert!(svg.contains(">\n≥ 80 % of hard\n</text>"));
        assert!(!svg.contains(">requests.cpu"));
        let none = model_breakdown_chart(
            &ResourceList::new(),
            &ResourceList::new(),
            GPU,
            &KeyConfig::default(),
            WIDE,
        );
        assert!(none.contains(">no data yet</text>"));
    }

    /// Every `font-size` of an SVG, in viewBox units.
    fn font_sizes(svg: &str) -> Vec<f64> {
        svg.split("font-size=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next()?.parse().ok())
            .collect()
    }

    #[test]
    fn text_is_never_rendered_below_twelve_pixels() {
        // The narrowest each frame is shown at (style/bizrq.css): the wide
        // one from 767 px of chart, the narrow one from 300 px (320 px screens).
        let cfg = KeyConfig::default();
        let used = list(&[(GPU, q("14")), ("requests.nvidia.com/gpu.A100", q("7"))]);
        let hard = list(&[(GPU, q("20")), ("requests.nvidia.com/gpu.A100", q("8"))]);
        let now = T0 + 24 * MS_PER_HOUR;
        for (frame, shown_from) in [(WIDE, 767.0), (NARROW, 300.0)] {
            let scale = shown_from / frame.w as f64;
            for svg in [
                usage_chart(&week_of_gpu_usage(), GPU, &cfg, frame),
                burn_down(&steady_burn(24, 10, 100), CASH, now, &cfg, frame),
                model_breakdown_chart(&used, &hard, GPU, &cfg, frame),
                usage_chart(&[], GPU, &cfg, frame),
            ] {
                let sizes = font_sizes(&svg);
                assert!(!sizes.is_empty());
                for s in sizes {
                    assert!(s * scale >= 12.0, "{s} × {scale} in {frame:?}");
                }
            }
        }
    }

    #[test]
    fn the_by_model_caption_groups_thousands() {
        let cfg = KeyConfig::default();
        let list = |v: i64| -> ResourceList { [(GPU.to_string(), Quantity::from_units(v))].into() };
        assert_eq!(
            model_breakdown_title(&list(1400), &list(2000), GPU, &cfg),
            "GPUs by model: 1,400 of 2,000 cards in use"
        );
        assert_eq!(
            model_breakdown_title(&list(12_345), &ResourceList::new(), GPU, &cfg),
            "GPUs by model: 12,345 cards in use"
        );
    }

    #[test]
    fn both_frames_are_drawn_and_marked() {
        let svg = both(|f| usage_chart(&week_of_gpu_usage(), GPU, &KeyConfig::default(), f));
        assert!(svg.contains("class=\"chart wide chart-usage\" viewBox=\"0 0 760 300\""));
        assert!(svg.contains("class=\"chart narrow chart-usage\" viewBox=\"0 0 360 280\""));
        // Where the time axis is: the plot's pixels and its time span.
        let t0 = format!("data-t0=\"{T0}\"");
        assert!(svg.contains(&t0), "the axis starts at the first sample");
    }

    #[test]
    fn the_forecast_is_drawn_in_its_legend_colour() {
        let now = T0 + 24 * MS_PER_HOUR;
        let svg = burn_down(
            &steady_burn(24, 10, 100),
            CASH,
            now,
            &KeyConfig::default(),
            WIDE,
        );
        // The dashed forecast is drawn as one path from the last point to
        // (exhaustion, 0): its last point lies on the zero line's y, the
        // bottom of the plot, which is where the x axis is drawn.
        let x_axis_y: Vec<&str> = svg
            .lines()
            .filter(|l| l.contains("stroke=\"#F79009\"") && l.contains("stroke-width=\"2\""))
            .collect();
        assert!(!x_axis_y.is_empty(), "a forecast line is drawn");
        let legend_dashed = svg.matches("stroke=\"#F79009\"").count();
        assert!(legend_dashed >= 3, "legend and line share the colour");
    }

    #[test]
    fn charts_are_deterministic() {
        let s = week_of_gpu_usage();
        assert_eq!(
            usage_chart(&s, GPU, &KeyConfig::default(), WIDE),
            usage_chart(&s, GPU, &KeyConfig::default(), WIDE)
        );
        let b = steady_burn(24, 10, 100);
        let now = T0 + 24 * MS_PER_HOUR;
        assert_eq!(
            burn_down(&b, CASH, now, &KeyConfig::default(), WIDE),
            burn_down(&b, CASH, now, &KeyConfig::default(), WIDE)
        );
    }

    /// A chart's text is escaped for XML, apostrophes too: a title or a
    /// message cannot end the attribute or element it is written into.
    #[test]
    fn chart_text_is_escaped() {
        let svg = message_svg("chart-usage", "nlp's <GPU> & \"cards\"", "a'b", WIDE);
        assert!(
            svg.contains("aria-label=\"nlp&#39;s &lt;GPU&gt; &amp; &quot;cards&quot;: a&#39;b\""),
            "{svg}"
        );
        assert!(svg.contains(">a&#39;b</text>"), "{svg}");
        assert!(!svg.contains('\''), "{svg}");
    }

    /// The points of the longest line stroked in `colour` (a series, not
    /// its legend's swatch), in pixels.
    fn line_points(svg: &str, colour: RGBColor) -> Vec<(i32, i32)> {
        let stroke = format!(
            "stroke=\"#{:02X}{:02X}{:02X}\"",
            colour.0, colour.1, colour.2
        );
        svg.lines()
            .filter(|l| l.starts_with("<polyline") && l.contains(&stroke))
            .map(|l| {
                let from = l.find("points=\"").unwrap() + "points=\"".len();
                l[from..from + l[from..].find('"').unwrap()]
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect::<Vec<_>>()
            })
            .max_by_key(Vec::len)
            .unwrap_or_default()
    }

    /// A long series is drawn decimated: at most four points per pixel
    /// column of the plot (`decimate`), every column of its span drawn,
    /// each column's highest and lowest value kept, and the SVG a fraction
    /// of what ten thousand points written out would take.
    #[test]
    fn ten_thousand_points_render_small_without_losing_a_peak() {
        // Every five consecutive minutes take each of 3..=7 once.
        let s: Vec<Sample> = (0..10_000)
            .map(|i| {
                usage(
                    T0 + i * MS_PER_MIN,
                    &format!("{}", 3 + (i * 7919) % 5),
                    Some("8"),
                )
            })
            .collect();
        let svg = usage_chart(&s, GPU, &KeyConfig::default(), WIDE);
        let cash: Vec<Sample> = steady_burn(166, 10, 100);
        let burn = burn_down(
            &cash,
            CASH,
            T0 + 166 * MS_PER_HOUR,
            &KeyConfig::default(),
            WIDE,
        );
        for (name, svg, n) in [("usage", &svg, s.len()), ("burn-down", &burn, cash.len())] {
            let pts = line_points(svg, USED);
            let xs: Vec<i32> = pts.iter().map(|p| p.0).collect();
            assert!(xs.is_sorted(), "{name}: drawn left to right");
            let mut columns = xs.clone();
            columns.dedup();
            let span = (xs[xs.len() - 1] - xs[0] + 1) as usize;
            assert_eq!(
                columns.len(),
                span,
                "{name}: every column of the span drawn"
            );
            assert!(
                pts.len() <= 4 * span && pts.len() < n / 3,
                "{name}: {} points of {n} in {span} columns",
                pts.len()
            );
            // Written out, the points take at least `x,y ` (8 bytes) each,
            // once for the line and once for its area: over twice this.
            assert!(svg.len() < 64 * 1024, "{name}: {} bytes", svg.len());
        }
        // Each column of the usage line rises to 7 and falls to 3 (the
        // last column may hold fewer than five samples).
        let pts = line_points(&svg, USED);
        let top = pts.iter().map(|p| p.1).min().unwrap();
        let bottom = pts.iter().map(|p| p.1).max().unwrap();
        let mut by_x: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (x, y) in &pts {
            by_x.entry(*x).or_default().push(*y);
        }
        let both = by_x
            .values()
            .filter(|ys| ys.contains(&top) && ys.contains(&bottom))
            .count();
        assert!(both + 1 >= by_x.len(), "{both} of {} columns", by_x.len());
    }
}

#[cfg(test)]
mod samples_out {
    /// `CHARTS_OUT=dir cargo test -p app write_sample_charts -- --ignored`
    /// writes the test charts as files, to look at them in a browser.
    #[test]
    #[ignore]
    fn write_sample_charts() {
        use super::*;
        let dir = std::env::var("CHARTS_OUT").unwrap_or_else(|_| "target/charts".into());
        std::fs::create_dir_all(&dir).unwrap();
        let t0: i64 = 1_795_219_200_000;
        let gpu = "requests.nvidia.com/gpu";
        let week: Vec<Sample> = (0..7 * 24 * 60)
            .map(|m| {
                let h = m / 60;
                let wave = ((m as f64 / 300.0).sin() * 2.5 + 4.0).round() as i64;
                let hard = if h < 72 { 6 } else { 8 };
                Sample {
                    at_ms: t0 + m * MS_PER_MIN,
                    hard: [(gpu.to_string(), Quantity::from_units(hard))].into(),
                    used: [(gpu.to_string(), Quantity::from_units(wave))].into(),
                    self_used: ResourceList::new(),
                }
            })
            .filter(|s| !(s.at_ms > t0 + 100 * MS_PER_HOUR && s.at_ms < t0 + 104 * MS_PER_HOUR))
            .collect();
        let cash = "cash/requests.nvidia.com/gpu";
        let burn: Vec<Sample> = (0..=5 * 24)
            .map(|h| Sample {
                at_ms: t0 + h * MS_PER_HOUR,
                hard: [(cash.to_string(), Quantity::from_units(2000))].into(),
                used: [(cash.to_string(), Quantity::from_units(h * 12 + (h % 7)))].into(),
                self_used: ResourceList::new(),
            })
            .collect();
        let used: ResourceList = [
            (gpu, "14"),
            ("requests.nvidia.com/gpu.A100", "7"),
            ("requests.nvidia.com/gpu.V100", "3"),
            ("requests.nvidia.com/gpu.T4", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
        let hard: ResourceList = [
            (gpu, "20"),
            ("requests.nvidia.com/gpu.A100", "8"),
            ("requests.nvidia.com/gpu.V100", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
        let now = t0 + 5 * MS_PER_DAY + 30 * MS_PER_MIN;
        let charts = [
            (
                "usage.svg",
                usage_chart(&week, gpu, &KeyConfig::default(), WIDE),
            ),
            ("burn-down.svg", {
                let f = quota::forecast::forecast(
                    &burn,
                    cash,
                    now,
                    quota::forecast::FORECAST_WINDOW_MS,
                );
                let o = quota::forecast::Outlook {
                    key: cash.to_string(),
                    now_ms: now,
                    left: f.remaining,
                    carved: quota::Quantity::ZERO,
                    burn_per_hour: f.burn_per_hour,
                    runway: quota::forecast::runway(&f, None),
                };
                burn_down_chart(&burn, &o, now, &KeyConfig::default(), WIDE)
            }),
            (
                "models.svg",
                model_breakdown_chart(&used, &hard, gpu, &KeyConfig::default(), WIDE),
            ),
            (
                "empty.svg",
                usage_chart(&[], gpu, &KeyConfig::default(), WIDE),
            ),
            (
                "narrow.svg",
                usage_chart(&week, gpu, &KeyConfig::default(), NARROW),
            ),
        ];
        for (name, svg) in charts {
            println!("{name}: {} bytes", svg.len());
            std::fs::write(format!("{dir}/{name}"), svg).unwrap();
        }
    }
}
