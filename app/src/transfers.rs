//! Transfer pages: the list with its filters and the request form, and one
//! transfer with its plan, outcome and (for those allowed) the decision.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, CsrfField, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// Key/amount rows the request form offers (no JavaScript to add more).
pub const AMOUNT_ROWS: usize = 4;

/// A transfer as the list shows it; times already formatted (UTC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferRow {
    pub id: i64,
    /// None: more from the parent of `to`.
    pub from: Option<String>,
    pub to: String,
    /// The viewer may see the end: its name links to the quota.
    pub from_link: bool,
    pub to_link: bool,
    /// (key, amount)
    pub amounts: Vec<(String, String)>,
    pub reason: String,
    pub requested_by: String,
    pub requested_at: String,
    pub expires_at: String,
    pub status: String,
    /// A loan: given back at this time.
    pub revert_at: Option<String>,
}

/// The list's filters as typed (echoed back into the form).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferQuery {
    pub status: String,
    pub quota: String,
    /// Only the requests waiting for the viewer's decision.
    pub awaiting_me: bool,
}

/// The request form: what the viewer may choose, and what it typed (a
/// refused request is shown again as it was).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestForm {
    /// Quotas the viewer may give from (it owns them).
    pub sources: Vec<String>,
    /// Quotas to suggest as destinations (those the viewer sees).
    pub destinations: Vec<String>,
    /// The keys to choose from, (key, its display name), GPUs first.
    pub keys: Vec<(String, String)>,
    /// "" = more from the parent of `to`.
    pub from: String,
    pub to: String,
    /// (key, amount), up to [`AMOUNT_ROWS`].
    pub rows: Vec<(String, String)>,
    pub reason: String,
    pub revert_at: String,
    /// `move` (or empty) or `topUp` (docs/budgets.md §5).
    pub kind: String,
    /// A top-up's source: `parent` or `grant`.
    pub source: String,
    /// A top-up's expiry (UTC, optional).
    pub until: String,
    /// The viewer owns nothing to give from but may ask for more budget
    /// (a member): the form is a top-up from the parent's budget only,
    /// `destinations` the quotas it sees, `keys` their budgets.
    pub budget_only: bool,
}

/// One quota the plan changes: its hard (and its parent's carve-out of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRow {
    /// "gives" or "receives".
    pub side: &'static str,
    pub quota: String,
    pub parent: String,
    pub before: String,
    pub after: String,
}

/// One transfer in full.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferDetail {
    pub row: TransferRow,
    /// Who may approve besides admins: owners of this quota or above.
    pub lca: Option<String>,
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    pub decision_note: Option<String>,
    /// Why it was rejected or failed; the plan's warnings when done.
    pub result: Option<String>,
    pub finished_at: Option<String>,
    pub plan: Vec<PlanRow>,
    /// The plan is what approving now would do (not yet approved).
    pub plan_preview: bool,
    /// Approving now would be refused, and why.
    pub plan_problem: Option<String>,
    /// Each end the viewer may see, on the transfer's keys, as it is now.
    pub ends: Vec<(String, String)>,
    pub reverts: Option<i64>,
    pub reverted_by: Option<i64>,
    /// The viewer may approve or reject it now.
    pub may_decide: bool,
    /// A top-up: `granted (an admin approves) · until …`; its `plan` rows
    /// are then the budgets left before and after.
    pub top_up: Option<String>,
}

#[cfg(feature = "ssr")]
fn amounts_text(amounts: &[(String, String)]) -> String {
    amounts
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(feature = "ssr")]
#[component]
fn Status(status: String) -> impl IntoView {
    view! { <span class=format!("badge status {status}")>{status.clone()}</span> }
}

#[cfg(feature = "ssr")]
#[component]
fn Source(from: Option<String>, to: String, link: bool) -> impl IntoView {
    match from {
        Some(f) => view! { <QuotaName name=f link=link/> }.into_any(),
        None => view! { <span class="muted">{format!("parent of {to}")}</span> }.into_any(),
    }
}

/// A quota's name, a link to its page when the viewer may see it.
#[cfg(feature = "ssr")]
#[component]
fn QuotaName(name: String, link: bool) -> impl IntoView {
    if link {
        let href = format!("/quotas/{name}");
        view! { <a class="name" href=href>{name}</a> }.into_any()
    } else {
        view! { <span class="name">{name}</span> }.into_any()
    }
}

/// A member's "Ask for more budget": a top-up of one budget of a quota it
/// sees, from the parent's budget; the parent's owners (or an admin)
/// decide.
#[cfg(feature = "ssr")]
#[component]
fn BudgetAskView(form: RequestForm, csrf: String) -> impl IntoView {
    let quotas = form
        .destinations
        .iter()
        .map(|d| view! { <option value=d.clone() selected=*d == form.to>{d.clone()}</option> })
        .collect_view();
    let (key, amount) = form.rows.first().cloned().unwrap_or_default();
    let keys = form
        .keys
        .iter()
        .map(|(k, name)| view! { <option value=k.clone() title=k.clone() selected=*k == key>{name.clone()}</option> })
        .collect_view();
    view! {
        <form class="card request" method="post" action="/transfers" id="top-up">
            <CsrfField csrf=csrf/>
            <h3>"Ask for more budget"</h3>
            <input type="hidden" name="kind" value="topUp"/>
            <input type="hidden" name="source" value="parent"/>
            <div class="inline">
                <label>"For quota"<select name="to" required>{quotas}</select></label>
                <label>"Budget"<select name="key" required>{keys}</select></label>
                <label>"Amount"<input name="amount" value=amount placeholder="e.g. 500" inputmode="decimal" required/></label>
                <label>"Withdraw what is unspent at (UTC, optional)"<input name="until" type="datetime-local" value=form.until/></label>
            </div>
            <label>"Reason (for the approver and the audit log)"<textarea name="reason" rows="2" required maxlength="2000">{crate::layout::escape_text(&form.reason)}</textarea></label>
            <p class="hint">"A top-up of this period's budget out of the parent's. An admin or an owner of the parent approves it; requests expire after 7 days."</p>
            <button type="submit">"Ask"</button>
        </form>
    }
}

#[cfg(feature = "ssr")]
#[component]
fn RequestFormView(form: RequestForm, csrf: String) -> impl IntoView {
    if form.budget_only {
        return view! { <BudgetAskView form=form csrf=csrf/> }.into_any();
    }
    let sources = form
        .sources
        .iter()
        .map(|s| {
            let selected = *s == form.from;
            view! { <option value=s.clone() selected=selected>{s.clone()}</option> }
        })
        .collect_view();
    let destinations = form
        .destinations
        .iter()
        .map(|d| view! { <option value=d.clone()></option> })
        .collect_view();
    let rows = (0..AMOUNT_ROWS)
        .map(|i| {
            let (k, v) = form.rows.get(i).cloned().unwrap_or_default();
            let first = i == 0;
            // A key typed before (a refused form sent back) stays chosen,
            // even one the list does not offer.
            let known = form.keys.iter().any(|(key, _)| *key == k);
            let typed = (!k.is_empty() && !known)
                .then(|| view! { <option value=k.clone() selected=true>{k.clone()}</option> });
            let options = form
                .keys
                .iter()
                .map(|(key, name)| {
                    let selected = *key == k;
                    view! { <option value=key.clone() title=key.clone() selected=selected>{format!("{name} ({key})")}</option> }
                })
                .collect_view();
            let blank = if first { "choose a key" } else { "no more keys" };
            view! {
                <div class="amount">
                    <label>{format!("Key {}", i + 1)}
                        <select name="key" required=first>
                            <option value="" selected=k.is_empty()>{blank}</option>
                            {typed}
                            {options}
                        </select>
                    </label>
                    <label>{format!("Amount {}", i + 1)}
                        <input name="amount" value=v placeholder="e.g. 4" inputmode="decimal" required=first/>
                    </label>
                </div>
            }
        })
        .collect_view();
    let from_parent = form.from.is_empty();
    let top_up = form.kind == "topUp";
    let grant = form.source == "grant";
    view! {
        <form class="card request" method="post" action="/transfers">
            <CsrfField csrf=csrf/>
            <h3>"Request a transfer"</h3>
            <div class="inline">
                <label>"From"
                    <select name="from">
                        {sources}
                        <option value="" selected=from_parent>"more from the parent of the destination"</option>
                    </select>
                </label>
                <label>"To"<input name="to" list="transfer-quotas" value=form.to required/></label>
                <label>"Loan: give back at (UTC, optional)"<input name="revert_at" type="datetime-local" value=form.revert_at/></label>
            </div>
            <datalist id="transfer-quotas">{destinations}</datalist>
            <div class="amounts">{rows}</div>
            <fieldset class="inline top-up" id="top-up">
                <legend>"Or ask for more budget (a top-up of one cash key of the destination, this period)"</legend>
                <label class="check"><input type="checkbox" name="kind" value="topUp" checked=top_up/>"top-up"</label>
                <label>"Source"
                    <select name="source">
                        <option value="parent" selected=!grant>"the parent's budget"</option>
                        <option value="grant" selected=grant>"a grant (an admin approves)"</option>
                    </select>
                </label>
                <label>"Withdraw what is unspent at (UTC, optional)"<input name="until" type="datetime-local" value=form.until/></label>
            </fieldset>
            <label>"Reason (for the approver and the audit log)"<textarea name="reason" rows="2" required maxlength="2000">{crate::layout::escape_text(&form.reason)}</textarea></label>
            <p class="hint">"An admin, or an owner of the lowest common ancestor of both ends, approves. Requests expire after 7 days. A loan cannot carry card-hours. A top-up names one cash key; From is ignored for it."</p>
            <button type="submit">"Request"</button>
        </form>
    }
    .into_any()
}

/// The transfers the viewer may see, filters, and (when it owns a quota)
/// the request form.
#[cfg(feature = "ssr")]
pub fn render_transfers_page(
    viewer: Viewer,
    rows: Vec<TransferRow>,
    query: TransferQuery,
    awaiting_me: usize,
    statuses: Vec<String>,
    form: Option<RequestForm>,
    flash: Option<Flash>,
) -> String {
    let csrf = viewer.csrf.clone();
    let options = statuses
        .into_iter()
        .map(|s| {
            let selected = s == query.status;
            view! { <option value=s.clone() selected=selected>{s.clone()}</option> }
        })
        .collect_view();
    let body = if rows.is_empty() {
        view! { <p class="empty">"No transfers match."</p> }.into_any()
    } else {
        let rows = rows
            .into_iter()
            .map(|r| {
                let href = format!("/transfers/{}", r.id);
                view! {
                    <tr>
                        <td class="num" data-label="#" data-sort-value=r.id.to_string()><a href=href>{format!("#{}", r.id)}</a></td>
                        <td data-label="Status"><Status status=r.status/></td>
                        <td data-label="From"><Source from=r.from to=r.to.clone() link=r.from_link/></td>
                        <td data-label="To"><QuotaName name=r.to link=r.to_link/></td>
                        <td class="key" data-label="Amounts">{amounts_text(&r.amounts)}</td>
                        <td class="wide" data-label="Reason">{r.reason}{r.revert_at.map(|at| view! { <div class="hint">{format!("loan until {at}")}</div> })}</td>
                        <td data-label="By">{r.requested_by}</td>
                        <td class="num" data-label="Requested" data-sort-value=r.id.to_string()>{r.requested_at}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <table class="transfers cards">
                <thead><tr>
                    <th data-sort="num" data-sort-first="desc">"#"</th><th data-sort="text">"Status"</th><th data-sort="text">"From"</th>
                    <th data-sort="text">"To"</th><th data-sort="text">"Amounts"</th><th data-sort="text">"Reason"</th>
                    <th data-sort="text">"By"</th><th data-sort="num" data-sort-first="desc">"Requested"</th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    // Sortable in place when scripts run (drawn inside the document: the
    // island needs its context).
    let body = move || view! { <bizrq_islands::SortTable>{body}</bizrq_islands::SortTable> };
    let form = form.map(|f| view! { <RequestFormView form=f csrf=csrf/> });
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Transfers".into() section=Section::Transfers flash=flash>
                <form class="card inline" method="get" action="/transfers">
                    <label>"Status"
                        <select name="status">
                            <option value="" selected=query.status.is_empty()>"any"</option>
                            {options}
                        </select>
                    </label>
                    <label>"Quota (from or to)"<input name="quota" value=query.quota/></label>
                    <label class="check"><input type="checkbox" name="awaiting" value="me" checked=query.awaiting_me/>"awaiting my decision"</label>
                    <button type="submit">"Filter"</button>
                </form>
                {(awaiting_me > 0 && !query.awaiting_me).then(|| view! {
                    <p class="awaiting"><a href="/transfers?awaiting=me">{if awaiting_me == 1 { "1 request awaits your decision".to_string() } else { format!("{awaiting_me} requests await your decision") }}</a></p>
                })}
                {body()}
                {form}
            </Layout>
        }
    })
}

#[cfg(feature = "ssr")]
#[component]
fn Field(label: &'static str, value: Option<String>) -> impl IntoView {
    value.map(|v| view! { <dt>{label}</dt><dd>{v}</dd> })
}

/// One transfer: what was asked, what the plan changes, how it ended, and
/// the Approve / Reject forms for those who may decide.
#[cfg(feature = "ssr")]
pub fn render_transfer_page(viewer: Viewer, d: TransferDetail, flash: Option<Flash>) -> String {
    let csrf = viewer.csrf.clone();
    let id = d.row.id;
    let title = format!("Transfer #{id}");
    let from = d
        .row
        .from
        .clone()
        .unwrap_or_else(|| format!("the parent of {}", d.row.to));
    let heading = if d.plan_preview {
        "What approving now would do"
    } else {
        "Plan"
    };
    let (before_h, after_h) = if d.top_up.is_some() {
        ("Budget left before", "Budget left after")
    } else {
        ("Hard before", "Hard after")
    };
    let problem = d.plan_problem.map(|m| {
        view! { <p class="flash error">{format!("Approving now would be refused: {m}")}</p> }
    });
    let ends = (!d.ends.is_empty()).then(|| {
        let rows = d
            .ends
            .into_iter()
            .map(|(q, line)| {
                let href = format!("/quotas/{q}");
                view! { <tr><td><a class="name" href=href>{q}</a></td><td class="key">{line}</td></tr> }
            })
            .collect_view();
        view! {
            <h3>"Both ends now"</h3>
            <table class="pairs"><tbody>{rows}</tbody></table>
        }
    });
    let plan = (!d.plan.is_empty()).then(|| {
        let rows = d
            .plan
            .into_iter()
            .map(|p| {
                view! {
                    <tr>
                        <td data-label="Side">{p.side}</td>
                        <td class="name">{p.quota}</td>
                        <td data-label="Parent (carve-out)">{p.parent}</td>
                        <td class="key" data-label=before_h>{p.before}</td>
                        <td class="key" data-label=after_h>{p.after}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>{heading}</h3>
            <table class="plan cards">
                <thead><tr><th>"Side"</th><th>"Quota"</th><th>"Parent (carve-out)"</th><th>{before_h}</th><th>{after_h}</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
    });
    let decide = d.may_decide.then(|| {
        view! {
            <div class="card decide">
                <form method="post" action=format!("/transfers/{id}/approve")>
                    <CsrfField csrf=csrf.clone()/>
                    <label class="check"><input type="checkbox" name="confirm" value="yes" required/>"I have read what approving does"</label>
                    <button type="submit">"Approve"</button>
                </form>
                <form method="post" action=format!("/transfers/{id}/reject")>
                    <CsrfField csrf=csrf/>
                    <input name="note" placeholder="note for the requester" aria-label="note"/>
                    <button type="submit" class="reject">"Reject"</button>
                </form>
            </div>
        }
    });
    let link = |id: Option<i64>| id.map(|i| format!("#{i}"));
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Transfers flash=flash>
                <p><a href="/transfers">"← All transfers"</a></p>
                <dl class="card facts">
                    <dt>"Status"</dt><dd><Status status=d.row.status/></dd>
                    <dt>"From"</dt><dd><QuotaName name=from link=d.row.from_link/></dd>
                    <dt>"To"</dt><dd><QuotaName name=d.row.to.clone() link=d.row.to_link/></dd>
                    <dt>"Amounts"</dt><dd class="key">{amounts_text(&d.row.amounts)}</dd>
                    <dt>"Reason"</dt><dd>{d.row.reason}</dd>
                    <dt>"Requested"</dt><dd>{format!("by {} at {}", d.row.requested_by, d.row.requested_at)}</dd>
                    <dt>"Expires"</dt><dd>{d.row.expires_at.clone()}</dd>
                    <Field label="Loan: given back at" value=d.row.revert_at/>
                    <Field label="Top-up" value=d.top_up/>
                    <Field label="Approvers" value=d.lca.map(|l| format!("admins, owners of {l} or above"))/>
                    <Field label="Decided by" value=d.decided_by/>
                    <Field label="Decided at" value=d.decided_at/>
                    <Field label="Note" value=d.decision_note/>
                    <Field label="Result" value=d.result/>
                    <Field label="Finished" value=d.finished_at/>
                    <Field label="Gives back loan" value=link(d.reverts)/>
                    <Field label="Given back by" value=link(d.reverted_by)/>
                </dl>
                {ends}
                {problem}
                {plan}
                {decide}
            </Layout>
        }
    })
}
