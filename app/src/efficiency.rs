//! Allocated against used on the pages (docs/real-usage.md): a quota's
//! chart (a panel of the page's chart grid, [`panel`]), its section (its
//! subtree's GPU-hours allocated and busy, efficiency, idle card-hours, by
//! workload and by submitter) and the overview's "idle now". The server
//! fills these from its one definition (`server::efficiency`); these only
//! render them.

use crate::chart_section::{span_words, Kind, Panel};
use crate::charts::{self, NARROW};
use bizrq_islands::Point;
use quota::real_usage::figures::{card_hours_words, GpuFigures};
use quota::series::Range;
use quota::time::{format_minute, format_when};
use quota::{KeyConfig, Quantity};

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// A span of real usage summed: where it starts, how long it covers (the
/// last one only up to what was read) and its GPU figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub at_ms: i64,
    pub span_ms: i64,
    pub gpu: GpuFigures,
}

impl Bucket {
    /// Cards held and busy on average over the bucket, exactly to the
    /// nano-unit (rounded down).
    fn cards(&self) -> (Quantity, Quantity) {
        let per = |card_ms: i64| {
            Quantity::from_nanos(
                card_ms as i128 * quota::quantity::NANO / self.span_ms.max(1) as i128,
            )
        };
        (per(self.gpu.allocated), per(self.gpu.busy))
    }
}

/// A figure with its unit kept on one line (`10.6 %`, `528.97 card-hours`).
fn unbroken(figure: &str) -> String {
    figure.replace(' ', "\u{a0}")
}

/// The chart of cards allocated against busy as a panel of the quota
/// page's chart grid, sized and styled as its other charts ([`NARROW`]),
/// with its values table (card-hours per row, efficiency) and the points
/// the island reads out. `key` is the GPU key the panel stands under
/// (its `data-key`: the samples API's address of the same panel);
/// `chart` and `table` are the buckets of the range
/// (`Range::bucket_ms`, `Range::table_bucket_ms`).
pub fn panel(
    key: &str,
    range: Range,
    chart: &[Bucket],
    table: &[Bucket],
    total: &GpuFigures,
    cfg: &KeyConfig,
) -> Panel {
    let cards = |q: Quantity| charts::amount(key, q, cfg);
    let drawn: Vec<(i64, f64, f64)> = chart
        .iter()
        .map(|b| {
            let span = b.span_ms.max(1) as f64;
            (
                b.at_ms,
                b.gpu.allocated as f64 / span,
                b.gpu.busy as f64 / span,
            )
        })
        .collect();
    let summary = if total.is_empty() {
        format!(
            "No GPU held in this quota or below in the {}.",
            range.words()
        )
    } else {
        format!(
            "{} allocated, {} busy: {} efficiency, {} idle ({}).",
            unbroken(&card_hours_words(total.allocated)),
            unbroken(&card_hours_words(total.busy)),
            unbroken(&total.efficiency_words()),
            unbroken(&card_hours_words(total.idle)),
            range.words()
        )
    };
    Panel {
        key: key.to_string(),
        kind: Kind::Efficiency,
        title: "GPUs: allocated against busy".into(),
        summary: Some(summary),
        figure: charts::efficiency_chart(&drawn, NARROW),
        caption: format!(
            "One row per {}: card-hours held and busy, efficiency (busy of what was measured) and idle card-hours; the last row up to the latest reading.",
            span_words(range.table_bucket_ms())
        ),
        columns: vec![
            "Time (UTC)".into(),
            "Allocated".into(),
            "Busy".into(),
            "Efficiency".into(),
            "Idle".into(),
        ],
        rows: table
            .iter()
            .map(|b| {
                vec![
                    format_minute(b.at_ms),
                    card_hours_words(b.gpu.allocated),
                    card_hours_words(b.gpu.busy),
                    b.gpu.efficiency_words(),
                    card_hours_words(b.gpu.idle),
                ]
            })
            .collect(),
        points: chart
            .iter()
            .map(|b| {
                let (held, busy) = b.cards();
                Point {
                    at_ms: b.at_ms,
                    values: vec![
                        ("allocated".into(), held.to_string()),
                        ("busy".into(), busy.to_string()),
                    ],
                    readout: format!(
                        "{} · allocated {}, busy {} ({})",
                        format_when(b.at_ms),
                        cards(held),
                        cards(busy),
                        b.gpu.efficiency_words()
                    ),
                }
            })
            .collect(),
    }
}

/// One row of figures, formatted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FigureRow {
    pub name: String,
    /// Under the name: its quota and submitter, for a workload.
    pub detail: String,
    pub allocated: String,
    pub busy: String,
    /// `34 %`, or `unknown` when nothing was measured.
    pub efficiency: String,
    pub efficiency_permille: Option<i64>,
    pub idle: String,
    /// Card-milliseconds, for sorting.
    pub allocated_ms: i64,
    pub idle_ms: i64,
}

/// The quota page's section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Section {
    /// "last 7 days".
    pub range: String,
    /// "Real usage unknown since 2026-12-01 14:00 UTC (Prometheus did not
    /// answer: …)", when it is.
    pub unknown: Option<String>,
    pub total: FigureRow,
    pub workloads: Vec<FigureRow>,
    pub workloads_more: usize,
    pub submitters: Vec<FigureRow>,
    pub children: Vec<FigureRow>,
    pub idle_now: Vec<IdleRow>,
    /// The JSON API's address of the same figures.
    pub api: String,
}

/// A workload idle now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleRow {
    /// Its name and reference.
    pub name: String,
    pub workload: String,
    pub quota: String,
    pub submitter: String,
    /// "8 A100 GPUs idle for 3 hours: 24 card-hours".
    pub words: String,
    /// "since 2026-12-01 11:00 UTC".
    pub since: String,
    /// What happens: "told", "suspended after the grace", or when it is
    /// told ("told at 2h").
    pub then: String,
}

/// The colour class of an efficiency: good from 60 %, poor under 20 %.
pub fn efficiency_class(permille: Option<i64>) -> &'static str {
    match permille {
        None => "eff unknown",
        Some(p) if p >= 600 => "eff good",
        Some(p) if p >= 200 => "eff fair",
        Some(_) => "eff poor",
    }
}

#[cfg(feature = "ssr")]
fn figures_table(rows: Vec<FigureRow>, first: &'static str, class: &'static str) -> impl IntoView {
    view! {
        <table class=format!("efficiency cards {class}")>
            <thead><tr>
                <th>{first}</th>
                <th class="num">"Allocated"</th>
                <th class="num">"Busy"</th>
                <th class="num">"Efficiency"</th>
                <th class="num">"Idle"</th>
            </tr></thead>
            <tbody>{rows.into_iter().map(|r| {
                let detail = (!r.detail.is_empty()).then(|| view! { <div class="hint">{r.detail.clone()}</div> });
                view! {
                    <tr>
                        <td class="key">{r.name}{detail}</td>
                        <td class="num" data-label="Allocated" data-sort-value=r.allocated_ms.to_string()>{unbroken(&r.allocated)}</td>
                        <td class="num" data-label="Busy">{unbroken(&r.busy)}</td>
                        <td class=format!("num {}", efficiency_class(r.efficiency_permille)) data-label="Efficiency"
                            data-sort-value=r.efficiency_permille.unwrap_or(-1).to_string()>{unbroken(&r.efficiency)}</td>
                        <td class="num" data-label="Idle" data-sort-value=r.idle_ms.to_string()>{unbroken(&r.idle)}</td>
                    </tr>
                }
            }).collect_view()}</tbody>
        </table>
    }
}

/// The workloads idle now, as a list a person acts on.
#[cfg(feature = "ssr")]
pub fn idle_list(rows: Vec<IdleRow>, with_quota: bool) -> impl IntoView {
    view! {
        <ul class="idle-now">{rows.into_iter().map(|r| {
            let quota = with_quota.then(|| view! {
                " in "<a href=format!("/quotas/{}", crate::layout::encode_component(&r.quota))>{r.quota.clone()}</a>
            });
            let by = (!r.submitter.is_empty()).then(|| format!(", submitted by {}", r.submitter));
            view! {
                <li>
                    <strong title=r.workload.clone()>{r.name}</strong>{quota}{by}": "{r.words}
                    <div class="hint">{r.since}" · "{r.then}</div>
                </li>
            }
        }).collect_view()}</ul>
    }
}

/// The quota page's "Allocated against used" section.
#[cfg(feature = "ssr")]
pub fn section(s: Section) -> impl IntoView {
    let unknown = s.unknown.map(|u| view! { <p class="notice warn">{u}</p> });
    let idle = (!s.idle_now.is_empty()).then(|| {
        view! {
            <h4>{format!("Idle now ({})", s.idle_now.len())}</h4>
            {idle_list(s.idle_now, false)}
        }
    });
    let more = (s.workloads_more > 0).then(|| {
        view! { <p class="hint">{format!("and {} more workloads: ", s.workloads_more)}<a href=s.api.clone()>"all of them in the JSON API"</a></p> }
    });
    let workloads = (!s.workloads.is_empty()).then(|| {
        view! { <h4>"By workload"</h4>{figures_table(s.workloads, "Workload", "by-workload")}{more} }
    });
    let submitters = (!s.submitters.is_empty()).then(|| {
        view! { <h4>"By submitter"</h4>{figures_table(s.submitters, "Submitter", "by-submitter")} }
    });
    let children = (s.children.len() > 1).then(|| {
        view! { <h4>"By child"</h4>{figures_table(s.children, "Child", "by-child")} }
    });
    let total = s.total;
    view! {
        <section class="real-usage">
            <h3 id="real-usage">"Allocated against used"</h3>
            <p class="hint">{format!("GPU card-hours held against card-hours busy in this quota and below, {}, as read from Prometheus. ", s.range)}
                <a href="#charts">"Its chart"</a>" is with the others above · "<a href=s.api.clone()>"as JSON"</a></p>
            {unknown}
            <dl class="efficiency-total">
                <div><dt>"Allocated"</dt><dd>{unbroken(&total.allocated)}</dd></div>
                <div><dt>"Busy"</dt><dd>{unbroken(&total.busy)}</dd></div>
                <div><dt>"Efficiency"</dt><dd class=efficiency_class(total.efficiency_permille)>{unbroken(&total.efficiency)}</dd></div>
                <div><dt>"Idle"</dt><dd>{unbroken(&total.idle)}</dd></div>
            </dl>
            {idle}
            {workloads}
            {submitters}
            {children}
        </section>
    }
}

/// The overview's "Idle now": workloads holding GPUs that compute nothing,
/// on the quotas the viewer may see.
#[cfg(feature = "ssr")]
pub fn idle_now_section(rows: Vec<IdleRow>, unknown: Option<String>) -> impl IntoView {
    let unknown = unknown.map(|u| view! { <p class="notice warn">{u}</p> });
    let body = if rows.is_empty() {
        view! { <p class="hint">"No workload holds GPUs idle now."</p> }.into_any()
    } else {
        idle_list(rows, true).into_any()
    };
    view! {
        <section class="idle-now-section">
            <h2 id="idle-now">"Idle now"</h2>
            {unknown}
            {body}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn bucket(at_ms: i64, allocated: i64, busy: i64, idle: i64) -> Bucket {
        Bucket {
            at_ms,
            span_ms: H,
            gpu: GpuFigures {
                allocated,
                measured: allocated,
                busy,
                idle,
            },
        }
    }

    #[test]
    fn the_efficiency_panel_is_a_grid_panel_with_its_figures_in_units() {
        let t = 1_796_140_800_000; // 2026-12-01 16:00 UTC
        let hours = [bucket(t, 8 * H, 2 * H, 0), bucket(t + H, 4 * H, 0, 4 * H)];
        let total = GpuFigures {
            allocated: 12 * H,
            measured: 12 * H,
            busy: 2 * H,
            idle: 4 * H,
        };
        let cfg = KeyConfig::default();
        let p = panel(
            "requests.nvidia.com/gpu",
            Range::Day,
            &hours,
            &hours,
            &total,
            &cfg,
        );
        assert_eq!(p.kind, Kind::Efficiency);
        assert_eq!(Kind::parse("efficiency", &p.key), Ok(Kind::Efficiency));
        // Drawn once, in the frame of the grid's other panels.
        assert!(p.figure.contains("viewBox=\"0 0 360 280\""), "{}", p.figure);
        assert_eq!(
            p.summary.as_deref(),
            Some(
                "12\u{a0}card-hours allocated, 2\u{a0}card-hours busy: 16.6\u{a0}% efficiency, \
                 4\u{a0}card-hours idle (last 24 hours)."
            )
        );
        assert_eq!(
            p.rows,
            [
                [
                    "2026-12-01 16:00",
                    "8 card-hours",
                    "2 card-hours",
                    "25 %",
                    "0 card-hours"
                ],
                [
                    "2026-12-01 17:00",
                    "4 card-hours",
                    "0 card-hours",
                    "0 %",
                    "4 card-hours"
                ],
            ]
        );
        assert_eq!(
            p.points[0].readout,
            "2026-12-01 16:00 UTC · allocated 8 cards, busy 2 cards (25 %)"
        );
        assert_eq!(
            p.points[1].values,
            [
                ("allocated".into(), "4".into()),
                ("busy".into(), "0".into())
            ]
        );
    }
}
