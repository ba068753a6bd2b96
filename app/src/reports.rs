//! The /reports page (docs/budgets.md §6, docs/budgets.md "Reports"): a form
//! (range, grouping, buckets, subtree, key, UTC offset) that works
//! without scripts, a stacked bar chart per bucket (inline SVG, wide and
//! narrow frames), the values table with units and thousands separators,
//! and links to the same report as CSV and JSON. The server computes
//! every string and the chart; this only renders.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

pub const BY: [&str; 10] = [
    "quota",
    "child",
    "workload",
    "namespace",
    "model",
    "qos",
    "user",
    "key",
    "reason",
    "quality",
];
pub const BUCKETS: [&str; 4] = ["none", "day", "week", "month"];

/// The form as shown (what was asked, or the defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportForm {
    /// `2026-11-01` (or the RFC 3339 time asked for).
    pub from: String,
    pub to: String,
    pub by: String,
    pub bucket: String,
    pub subtree: String,
    pub key: String,
    pub utc_offset_minutes: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportRow {
    /// `2026-11-01`, `2026-11`.
    pub bucket: String,
    pub group: String,
    /// `1,234.5 card-hours`.
    pub amount: String,
    /// Exact, for sorting: resource-hours to the nano-unit.
    pub sort: String,
    /// Where real usage is read (docs/real-usage.md): "2 of 8 GPU-hours
    /// busy (25 %), 4 idle", or "no GPU held".
    pub efficiency: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportsPage {
    pub form: ReportForm,
    /// Quotas the viewer may report on (the subtree field's suggestions).
    pub quotas: Vec<String>,
    /// Cash keys of those quotas (the key field's suggestions).
    pub keys: Vec<String>,
    /// What is wrong with the request (the page answers 422), if anything.
    pub error: Option<String>,
    /// `Spending by model per day, 2026-11-01 – 2026-11-30 (UTC+08:00)`.
    pub title: String,
    /// Both frames of the chart (`charts::both`); empty with an error.
    pub chart: String,
    pub rows: Vec<ReportRow>,
    /// `12,345.67 card-hours`.
    pub total: String,
    /// How it reconciles: `Total 12,345.67 card-hours = the sum of the 412
    /// ledger entries in range (exact: … acc); 3 crossing its edges are
    /// shared by time.`
    pub reconcile: String,
    pub csv_href: String,
    pub json_href: String,
    /// What was chosen for the reader or moved to fit the ledger, in
    /// words (`reports::Made::notes`).
    pub notes: Vec<String>,
}

#[cfg(feature = "ssr")]
fn select(name: &'static str, options: &'static [&'static str], chosen: &str) -> impl IntoView {
    let chosen = chosen.to_string();
    view! {
        <select name=name>
            {options.iter().map(|o| {
                let selected = *o == chosen;
                view! { <option value=*o selected=selected>{*o}</option> }
            }).collect_view()}
        </select>
    }
}

#[cfg(feature = "ssr")]
pub fn render_reports_page(viewer: Viewer, page: ReportsPage, flash: Option<Flash>) -> String {
    let f = page.form.clone();
    let quotas = page
        .quotas
        .iter()
        .map(|q| view! { <option value=q.clone()></option> })
        .collect_view();
    let keys = page
        .keys
        .iter()
        .map(|k| view! { <option value=k.clone()></option> })
        .collect_view();
    let body = match page.error.clone() {
        Some(e) => view! { <p class="flash error" role="alert">{e}</p> }.into_any(),
        None if page.rows.is_empty() => view! {
            <h3>{page.title.clone()}</h3>
            <p class="empty">"Nothing was spent in this range."</p>
            <p class="hint">{page.reconcile.clone()}</p>
        }
        .into_any(),
        None => {
            let rows = page
                .rows
                .iter()
                .cloned()
                .map(|r| {
                    let efficiency = r.efficiency.map(|e| view! { <td data-label="GPUs used">{e}</td> });
                    view! {
                        <tr>
                            <td data-label="Bucket">{r.bucket}</td>
                            <td class="name" data-label="Group">{r.group}</td>
                            <td class="num" data-label="Amount" data-sort-value=r.sort>{r.amount}</td>
                            {efficiency}
                        </tr>
                    }
                })
                .collect_view();
            let with_usage = page.rows.iter().any(|r| r.efficiency.is_some());
            let usage_head = with_usage.then(|| view! { <th>"GPUs used (real usage)"</th> });
            let usage_foot = with_usage.then(|| view! { <th></th> });
            let chart = page.chart.clone();
            view! {
                <h3>{page.title.clone()}</h3>
                // The answer first: the total, then how it is made up.
                <p class="report-total"><strong>{format!("Total: {}", page.total)}</strong></p>
                <figure class="chart report-chart" inner_html=chart></figure>
                <table class="report cards">
                    <thead><tr><th>"Bucket"</th><th>"Group"</th><th class="num">"Amount"</th>{usage_head}</tr></thead>
                    <tbody>{rows}</tbody>
                    <tfoot><tr><th>"Total"</th><th></th><th class="num">{page.total.clone()}</th>{usage_foot}</tr></tfoot>
                </table>
                <p class="hint">{page.reconcile.clone()}</p>
            }
            .into_any()
        }
    };
    let (csv, json) = (page.csv_href.clone(), page.json_href.clone());
    let notes = page
        .notes
        .iter()
        .map(|n| view! { <p class="hint report-note">{n.clone()}</p> })
        .collect_view();
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Reports".into() section=Section::Reports flash=flash>
                <form class="card inline report-form" method="get" action="/reports">
                    <label>"From"<input name="from" value=f.from placeholder="2026-11-01" size="12" maxlength="64"/></label>
                    <label>"To (inclusive date)"<input name="to" value=f.to placeholder="2026-11-30" size="12" maxlength="64"/></label>
                    <label>"By"{select("by", &BY, &f.by)}</label>
                    <label>"Per"{select("bucket", &BUCKETS, &f.bucket)}</label>
                    <label>"Subtree"<input name="subtree" value=f.subtree list="report-quotas" placeholder="all I may see" size="16" maxlength="253"/></label>
                    <datalist id="report-quotas">{quotas}</datalist>
                    <label>"Key"<input name="key" value=f.key list="report-keys" placeholder="every cash key" size="24" maxlength="316"/></label>
                    <datalist id="report-keys">{keys}</datalist>
                    <label>"UTC offset (minutes)"<input name="utcOffsetMinutes" value=f.utc_offset_minutes inputmode="numeric" placeholder="0" size="5" maxlength="5"/></label>
                    <button type="submit">"Report"</button>
                    <a class="button" href=csv>"CSV"</a>
                    <a class="button" href=json>"JSON"</a>
                </form>
                {notes}
                {body}
                <p class="hint">"Amounts are spending from the budget ledger (accrual less refunds) in weighted resource-hours. An entry that crosses a bucket or the range's edge is shared by time, each share rounded down cumulatively, so rows add up exactly to the total and the total to the ledger. Dates are local midnights at the UTC offset."</p>
            </Layout>
        }
    })
}
