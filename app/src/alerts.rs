//! Alerts in the portal: the overview's section and the alerts page (open
//! alerts and history, filtered by quota and kind). The server picks the
//! alerts the viewer may see; these only render them.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One alert as the portal shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertRow {
    pub id: i64,
    /// e.g. "threshold", "over_quota", "transfer_requested".
    pub kind: String,
    pub quota: String,
    /// "info", "warning" or "critical".
    pub level: String,
    pub message: String,
    /// UTC, e.g. "2026-11-22 01:02".
    pub opened: String,
    pub resolved: Option<String>,
}

/// The filters as typed (echoed back into the form).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlertQuery {
    pub quota: String,
    pub kind: String,
}

#[cfg(feature = "ssr")]
fn alert_table(rows: Vec<AlertRow>, empty: &'static str) -> AnyView {
    if rows.is_empty() {
        return view! { <p class="empty">{empty}</p> }.into_any();
    }
    let rows = rows
        .into_iter()
        .map(|r| {
            let href = format!("/quotas/{}", r.quota);
            view! {
                <tr class=format!("alert {}", r.level)>
                    <td><span class=format!("level {}", r.level)>{r.level.clone()}</span></td>
                    <td><a href=href>{r.quota}</a></td>
                    <td><code>{r.kind}</code></td>
                    <td>{r.message}</td>
                    <td class="num">{r.opened}</td>
                    <td class="num">{r.resolved.unwrap_or_default()}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="alerts">
            <thead><tr><th>"Level"</th><th>"Quota"</th><th>"Kind"</th><th>"What"</th><th>"Opened (UTC)"</th><th>"Resolved (UTC)"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

/// The overview's section: the open alerts on quotas the viewer can see.
#[cfg(feature = "ssr")]
pub fn overview_section(open: Vec<AlertRow>) -> impl IntoView {
    let count = open.len();
    view! {
        <section class="card alerts">
            <h3>"Alerts"</h3>
            {alert_table(open, "No open alerts on your quotas.")}
            <p><a href="/alerts">{format!("All alerts ({count} open) →")}</a></p>
        </section>
    }
}

/// GET /alerts: open alerts first, then the history.
#[cfg(feature = "ssr")]
pub fn render_alerts_page(
    viewer: Viewer,
    open: Vec<AlertRow>,
    resolved: Vec<AlertRow>,
    query: AlertQuery,
    kinds: Vec<String>,
    flash: Option<Flash>,
) -> String {
    let options = kinds
        .into_iter()
        .map(|k| {
            let selected = k == query.kind;
            view! { <option value=k.clone() selected=selected>{k.clone()}</option> }
        })
        .collect_view();
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Alerts".into() section=Section::Alerts flash=flash>
                <form class="card inline" method="get" action="/alerts">
                    <label>"Quota"<input name="quota" value=query.quota/></label>
                    <label>"Kind"
                        <select name="kind">
                            <option value="" selected=query.kind.is_empty()>"any"</option>
                            {options}
                        </select>
                    </label>
                    <button type="submit">"Filter"</button>
                </form>
                <h3>"Open"</h3>
                {alert_table(open, "No open alerts match.")}
                <h3>"Resolved"</h3>
                {alert_table(resolved, "No resolved alerts match.")}
            </Layout>
        }
    })
}
