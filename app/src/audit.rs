//! The audit log page: filters, entries newest first, CSV export.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One entry as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRow {
    pub id: i64,
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    /// For an update: the fields it changed, a line each.
    pub changes: Vec<String>,
    /// Pretty JSON of the object before and after (None: there was none).
    pub before: Option<String>,
    pub after: Option<String>,
    pub detail: String,
}

/// The filters as typed (echoed back into the form).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub actor: String,
    pub target: String,
    pub action: String,
    pub from: String,
    pub to: String,
}

#[cfg(feature = "ssr")]
#[component]
fn Change(label: &'static str, json: Option<String>) -> impl IntoView {
    json.map(|j| {
        view! {
            <details><summary>{label}</summary><pre>{j}</pre></details>
        }
    })
}

/// The audit page. `actions` are the known actions (the filter's choices),
/// `csv_href` the export of the same filter, `older_href` the next page.
#[cfg(feature = "ssr")]
pub fn render_audit_page(
    viewer: Viewer,
    rows: Vec<AuditRow>,
    query: AuditQuery,
    actions: Vec<String>,
    csv_href: String,
    older_href: Option<String>,
    flash: Option<Flash>,
) -> String {
    let options = actions
        .into_iter()
        .map(|a| {
            let selected = a == query.action;
            view! { <option value=a.clone() selected=selected>{a.clone()}</option> }
        })
        .collect_view();
    let body = if rows.is_empty() {
        view! { <p class="empty">"No audit entries match."</p> }.into_any()
    } else {
        let rows = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr>
                        <td class="num" data-label="When" data-sort-value=r.id.to_string()>{r.at}</td>
                        <td data-label="Who">{r.actor}</td>
                        <td data-label="Action"><code>{r.action}</code></td>
                        <td class="name" data-label="Target">{r.target}</td>
                        <td class="wide" data-label="Change">
                            {(!r.detail.is_empty()).then(|| view! { <div>{r.detail}</div> })}
                            {(!r.changes.is_empty()).then(|| view! {
                                <ul class="changes">{r.changes.into_iter().map(|c| view! { <li><code>{c}</code></li> }).collect_view()}</ul>
                            })}
                            <Change label="before" json=r.before/>
                            <Change label="after" json=r.after/>
                        </td>
                    </tr>
                }
            })
            .collect_view();
        // "When" sorts by the entry's id: the log is appended in time order.
        view! {
            <table class="audit cards">
                <thead><tr><th data-sort="num" data-sort-first="desc">"When"</th><th data-sort="text">"Who"</th><th data-sort="text">"Action"</th><th data-sort="text">"Target"</th><th>"Change"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    // Sortable in place when scripts run (drawn inside the document: the
    // island needs its context).
    let body = move || view! { <bizrq_islands::SortTable>{body}</bizrq_islands::SortTable> };
    let older = older_href.map(|h| view! { <p><a href=h>"Older entries →"</a></p> });
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Audit log".into() section=Section::Audit flash=flash>
                <form class="card inline" method="get" action="/audit">
                    <label>"Who"<input name="actor" value=query.actor/></label>
                    <label>"Target"<input name="target" value=query.target placeholder="quota or user:NAME"/></label>
                    <label>"Action"
                        <select name="action">
                            <option value="" selected=query.action.is_empty()>"any"</option>
                            {options}
                        </select>
                    </label>
                    <label>"From (UTC)"<input name="from" type="datetime-local" value=query.from/></label>
                    <label>"To (UTC)"<input name="to" type="datetime-local" value=query.to/></label>
                    <button type="submit">"Filter"</button>
                    <a class="button" href=csv_href>"Export CSV"</a>
                </form>
                {body()}
                {older}
            </Layout>
        }
    })
}
