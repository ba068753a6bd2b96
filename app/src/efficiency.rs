//! Allocated against used on the pages (docs/real-usage.md): a quota's
//! section (its subtree's GPU-hours allocated and busy, efficiency, idle
//! card-hours, by workload and by submitter, with the chart) and the
//! overview's "idle now". The server fills these from its one definition
//! (`server::efficiency`); these only render them.

#[cfg(feature = "ssr")]
use leptos::prelude::*;

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
    /// The chart, both frames (`charts::both`).
    pub chart: String,
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
    /// "8 A100 GPUs idle for 3h: 24 card-hours".
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
                <th class="num">"GPU-hours allocated"</th>
                <th class="num">"GPU-hours busy"</th>
                <th class="num">"Efficiency"</th>
                <th class="num">"Idle card-hours"</th>
            </tr></thead>
            <tbody>{rows.into_iter().map(|r| {
                let detail = (!r.detail.is_empty()).then(|| view! { <div class="hint">{r.detail.clone()}</div> });
                view! {
                    <tr>
                        <td class="key">{r.name}{detail}</td>
                        <td class="num" data-label="Allocated" data-sort-value=r.allocated_ms.to_string()>{r.allocated}</td>
                        <td class="num" data-label="Busy">{r.busy}</td>
                        <td class=format!("num {}", efficiency_class(r.efficiency_permille)) data-label="Efficiency"
                            data-sort-value=r.efficiency_permille.unwrap_or(-1).to_string()>{r.efficiency}</td>
                        <td class="num" data-label="Idle" data-sort-value=r.idle_ms.to_string()>{r.idle}</td>
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
            <p class="hint">{format!("GPU cards held against cards busy in this quota and below, {} (real usage read from Prometheus). ", s.range)}
                <a href=s.api.clone()>"As JSON"</a></p>
            {unknown}
            <dl class="efficiency-total">
                <div><dt>"GPU-hours allocated"</dt><dd>{total.allocated}</dd></div>
                <div><dt>"GPU-hours busy"</dt><dd>{total.busy}</dd></div>
                <div><dt>"Efficiency"</dt><dd class=efficiency_class(total.efficiency_permille)>{total.efficiency}</dd></div>
                <div><dt>"Idle card-hours"</dt><dd>{total.idle}</dd></div>
            </dl>
            <figure class="chart" inner_html=s.chart></figure>
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
