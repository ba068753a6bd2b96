//! Alerts in the portal: the overview's section and the alerts page (open
//! alerts and history, filtered by quota and kind). The server picks the
//! alerts the viewer may see; these only render them.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// An alert kind as people read it (the stored name stays in URLs and the
/// API): `threshold` → "Usage threshold".
pub fn kind_label(kind: &str) -> &str {
    match kind {
        "threshold" => "Usage threshold",
        "allocation" => "Allocation notice",
        "over_quota" => "Over quota",
        "cash_forecast" => "Budget running out",
        "reclaim_pending" => "Reclaim pending",
        "transfer_requested" => "Transfer requested",
        "transfer_approved" => "Transfer approved",
        "transfer_rejected" => "Transfer rejected",
        "queue_overdue" => "Queued too long",
        "idle_gpus" => "Idle GPUs",
        "real_usage_unknown" => "Real usage unknown",
        other => other,
    }
}

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
    /// e.g. "2026-11-22 01:02 UTC".
    pub opened: String,
    /// When it opened (and resolved), ms since the epoch: what sorting
    /// compares, and the cells' `data-sort-value`.
    pub opened_ms: i64,
    pub resolved: Option<String>,
    pub resolved_ms: Option<i64>,
    /// "acknowledged by alice, 2026-11-25 16:30 UTC" or "snoozed by bob
    /// until …": it asks nobody now.
    pub quiet: Option<String>,
    /// The viewer may acknowledge or snooze it (an owner of its quota, an admin).
    pub can_quiet: bool,
}

impl AlertRow {
    /// The id its forms send.
    pub fn ids(&self) -> String {
        self.id.to_string()
    }
}

/// Kinds whose alerts are about keys of the quota: one alert per quota,
/// kind and level, listing the keys it covers (the server's
/// `alerts::grouped`).
pub const PER_KEY_KINDS: [&str; 4] = ["threshold", "over_quota", "cash_forecast", "allocation"];

/// Links to the rest: the next page of open alerts (how many are left,
/// and where) and the older resolved ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlertPages {
    pub more_open: Option<(usize, String)>,
    pub older: Option<String>,
    /// More open alerts than a page: the sort orders this page's only.
    pub sorted_within: bool,
}

/// The filters as typed (echoed back into the form), and the order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlertQuery {
    pub quota: String,
    pub kind: String,
    pub level: String,
    pub sort: AlertSort,
    pub dir: SortDir,
    /// The page of open alerts shown (`open_from`), kept by the sort links.
    pub open_from: usize,
}

/// A column the open alerts sort by (`?sort=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlertSort {
    /// Worst first by default: critical, warning, info.
    #[default]
    Level,
    Quota,
    Kind,
    /// When it opened (`since` in links).
    Since,
    /// Asks someone now, then acknowledged or snoozed.
    State,
}

/// A sort direction (`?dir=asc|desc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortDir {
    Asc,
    #[default]
    Desc,
}

impl SortDir {
    pub fn parse(s: &str) -> Result<Option<SortDir>, String> {
        match s.trim() {
            "" => Ok(None),
            "asc" => Ok(Some(SortDir::Asc)),
            "desc" => Ok(Some(SortDir::Desc)),
            o => Err(format!("dir must be asc or desc, not '{o}'")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SortDir::Asc => "asc",
            SortDir::Desc => "desc",
        }
    }

    fn flip(self) -> SortDir {
        match self {
            SortDir::Asc => SortDir::Desc,
            SortDir::Desc => SortDir::Asc,
        }
    }

    /// The `aria-sort` value of a column sorted this way.
    pub fn aria(self) -> &'static str {
        match self {
            SortDir::Asc => "ascending",
            SortDir::Desc => "descending",
        }
    }
}

impl AlertSort {
    /// (column, its name in links, its label on the page).
    pub const ALL: [(AlertSort, &'static str, &'static str); 5] = [
        (AlertSort::Level, "level", "Level"),
        (AlertSort::Quota, "quota", "Quota"),
        (AlertSort::Kind, "kind", "Kind"),
        (AlertSort::Since, "since", "Opened"),
        (AlertSort::State, "state", "State"),
    ];

    /// "" is the default (level); anything else unknown is refused with
    /// the choices.
    pub fn parse(s: &str) -> Result<AlertSort, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(AlertSort::default());
        }
        AlertSort::ALL
            .iter()
            .find(|(_, v, _)| *v == s)
            .map(|(c, _, _)| *c)
            .ok_or_else(|| {
                format!("sort must be one of level, quota, kind, since or state, not '{s}'")
            })
    }

    pub fn as_str(self) -> &'static str {
        AlertSort::ALL
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or("level", |(_, v, _)| *v)
    }

    /// The direction a first click asks for: the worst and the newest
    /// first, names A to Z, those asking someone now first.
    pub fn first_dir(self) -> SortDir {
        match self {
            AlertSort::Level | AlertSort::Since => SortDir::Desc,
            AlertSort::Quota | AlertSort::Kind | AlertSort::State => SortDir::Asc,
        }
    }
}

/// A level's rank: critical 3, warning 2, info (or anything else) 1.
pub fn level_rank(level: &str) -> u8 {
    match level {
        "critical" => 3,
        "warning" => 2,
        _ => 1,
    }
}

/// Orders `rows` by `sort` in `dir`; ties go worst first, then newest
/// first (the order the page reads them in), so the order is total.
pub fn sort_rows(rows: &mut [AlertRow], sort: AlertSort, dir: SortDir) {
    use std::cmp::Ordering;
    let by = |a: &AlertRow, b: &AlertRow| -> Ordering {
        match sort {
            AlertSort::Level => level_rank(&a.level).cmp(&level_rank(&b.level)),
            AlertSort::Quota => a.quota.cmp(&b.quota),
            AlertSort::Kind => kind_label(&a.kind).cmp(kind_label(&b.kind)),
            AlertSort::Since => a.opened_ms.cmp(&b.opened_ms),
            AlertSort::State => a.quiet.is_some().cmp(&b.quiet.is_some()),
        }
    };
    rows.sort_by(|a, b| {
        let o = by(a, b);
        let o = if dir == SortDir::Desc { o.reverse() } else { o };
        o.then_with(|| level_rank(&b.level).cmp(&level_rank(&a.level)))
            .then_with(|| b.opened_ms.cmp(&a.opened_ms))
            .then_with(|| b.id.cmp(&a.id))
    });
}

/// Percent-encodes a query value.
fn enc(v: &str) -> String {
    crate::layout::encode_component(v)
}

impl AlertQuery {
    /// This page of alerts sorted by `sort` in `dir` (filters and page kept).
    pub fn sorted_href(&self, sort: AlertSort, dir: SortDir) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("quota", self.quota.as_str()),
            ("kind", self.kind.as_str()),
            ("level", self.level.as_str()),
        ] {
            if !v.is_empty() {
                parts.push(format!("{k}={}", enc(v)));
            }
        }
        parts.push(format!("sort={}", sort.as_str()));
        parts.push(format!("dir={}", dir.as_str()));
        if self.open_from > 0 {
            parts.push(format!("open_from={}", self.open_from));
        }
        format!("/alerts?{}", parts.join("&"))
    }

    /// Where a column's header leads: the other direction when it is the
    /// column sorted now, else the column's first direction.
    pub fn header_href(&self, sort: AlertSort) -> String {
        let dir = if self.sort == sort {
            self.dir.flip()
        } else {
            sort.first_dir()
        };
        self.sorted_href(sort, dir)
    }
}

/// Snooze choices offered on the page: (hours, label).
pub const SNOOZE_CHOICES: [(i64, &str); 4] = [
    (1, "1 hour"),
    (4, "4 hours"),
    (24, "1 day"),
    (168, "1 week"),
];

/// A sortable column's header. With `query` (the open alerts) it is the
/// server's sort link (`?sort=&dir=`); either way the sort-table island
/// sorts the rows in place by the cells' `data-sort-value` when scripts run.
#[cfg(feature = "ssr")]
fn sort_th(
    label: &'static str,
    sort: AlertSort,
    kind: &'static str,
    query: Option<&AlertQuery>,
) -> AnyView {
    let first = sort.first_dir().as_str();
    match query {
        Some(q) => {
            let aria = (q.sort == sort).then(|| q.dir.aria());
            let href = q.header_href(sort);
            view! {
                <th data-sort=kind data-sort-key=sort.as_str() data-sort-first=first aria-sort=aria>
                    <a href=href>{label}</a>
                </th>
            }
            .into_any()
        }
        None => view! { <th data-sort=kind data-sort-first=first>{label}</th> }.into_any(),
    }
}

/// The open alerts (with `csrf`: their acknowledge and snooze forms, where
/// the viewer may, and `query`: its header links sort on the server) or
/// the resolved ones.
#[cfg(feature = "ssr")]
fn alert_table(
    rows: Vec<AlertRow>,
    empty: &'static str,
    csrf: Option<String>,
    query: Option<&AlertQuery>,
) -> AnyView {
    use crate::layout::CsrfField;
    if rows.is_empty() {
        return view! { <p class="empty">{empty}</p> }.into_any();
    }
    let open = csrf.is_some();
    let rows = rows
        .into_iter()
        .map(|r| {
            let href = format!("/quotas/{}", r.quota);
            let row_ids = r.ids();
            // Selected for the bulk form above the table (`form=`: no form
            // inside a form).
            let pick = (open && r.can_quiet && r.quiet.is_none()).then(|| {
                let label = format!("select the {} alert on {}", kind_label(&r.kind), r.quota);
                view! { <input type="checkbox" name="id" value=r.ids() form="bulk-quiet" aria-label=label/> }
            });
            let state = match (&r.quiet, r.can_quiet, &csrf) {
                (Some(q), _, _) => view! { <small class="quiet">{q.clone()}</small> }.into_any(),
                (None, true, Some(csrf)) => {
                    // One form per action, for the row's alert or group.
                    let ids = r.ids();
                    let choices = SNOOZE_CHOICES
                        .iter()
                        .map(|(h, l)| view! { <option value=h.to_string()>{*l}</option> })
                        .collect_view();
                    view! {
                        <form class="quiet" method="post" action="/alerts/quiet">
                            <CsrfField csrf=csrf.clone()/>
                            <input type="hidden" name="id" value=ids.clone()/>
                            <button type="submit" name="action" value="ack">"Acknowledge"</button>
                        </form>
                        <form class="quiet" method="post" action="/alerts/quiet">
                            <CsrfField csrf=csrf.clone()/>
                            <input type="hidden" name="id" value=ids/>
                            <label class="sr-only" for=format!("snooze-{}", r.id)>"Snooze for"</label>
                            <select name="hours" id=format!("snooze-{}", r.id)>{choices}</select>
                            <button type="submit" name="action" value="snooze">"Snooze"</button>
                        </form>
                    }
                    .into_any()
                }
                _ => view! { "" }.into_any(),
            };
            let last = if open {
                // Asking someone now (0) before quieted (1), as ?sort=state.
                let quiet = if r.quiet.is_some() { "1" } else { "0" };
                view! { <td class="state" data-sort-value=quiet>{state}</td> }.into_any()
            } else {
                let at = r.resolved_ms.map(|m| m.to_string());
                view! { <td class="num" data-sort-value=at>{r.resolved.unwrap_or_default()}</td> }.into_any()
            };
            let rank = level_rank(&r.level).to_string();
            view! {
                <tr class=format!("alert {}", r.level) data-ids=row_ids>
                    <td data-sort-value=rank>{pick}<span class=format!("level {}", r.level)>{r.level.clone()}</span></td>
                    <td><a href=href>{r.quota}</a></td>
                    <td>{kind_label(&r.kind).to_string()}</td>
                    <td>{r.message}</td>
                    <td class="num" data-sort-value=r.opened_ms.to_string()>{r.opened}</td>
                    {last}
                </tr>
            }
        })
        .collect_view();
    let last = if open {
        sort_th("State", AlertSort::State, "num", query)
    } else {
        view! { <th data-sort="num" data-sort-first="desc">"Resolved"</th> }.into_any()
    };
    // With the server's links the address follows a sort done in place.
    let url = query.map(|_| "sort,dir");
    let head = view! {
        <thead><tr>
            {sort_th("Level", AlertSort::Level, "num", query)}
            {sort_th("Quota", AlertSort::Quota, "text", query)}
            {sort_th("Kind", AlertSort::Kind, "text", query)}
            <th data-sort="text">"What"</th>
            {sort_th("Opened", AlertSort::Since, "num", query)}
            {last}
        </tr></thead>
    };
    view! {
        <bizrq_islands::SortTable>
        <div class="table-wrap">
        <table class="alerts" data-sort-url=url>
            {head}
            <tbody>{rows}</tbody>
        </table>
        </div>
        </bizrq_islands::SortTable>
    }
    .into_any()
}

/// The bulk form: the rows' boxes belong to it (`form="bulk-quiet"`), so
/// the viewer ticks several and acknowledges or snoozes them at once.
#[cfg(feature = "ssr")]
fn bulk_form(open: &[AlertRow], csrf: String) -> Option<impl IntoView> {
    use crate::layout::CsrfField;
    open.iter()
        .any(|r| r.can_quiet && r.quiet.is_none())
        .then(|| {
            let choices = SNOOZE_CHOICES
                .iter()
                .map(|(h, l)| view! { <option value=h.to_string()>{*l}</option> })
                .collect_view();
            view! {
                <form id="bulk-quiet" class="card inline bulk" method="post" action="/alerts/quiet">
                    <CsrfField csrf=csrf/>
                    <span>"Selected alerts:"</span>
                    <button type="submit" name="action" value="ack">"Acknowledge selected"</button>
                    <label>"Snooze for"<select name="hours">{choices}</select></label>
                    <button type="submit" name="action" value="snooze">"Snooze selected"</button>
                </form>
            }
        })
}

/// Quotas shown in the overview's "needs attention" list; the rest are a
/// link away.
pub const ATTENTION_QUOTAS: usize = 6;

/// Open alerts grouped by quota, worst first: (quota, worst level, counts
/// by level as "2 critical, 1 warning", the worst alert's message).
pub fn group_by_quota(open: &[AlertRow]) -> Vec<(String, String, String, String)> {
    let rank = |l: &str| match l {
        "critical" => 3,
        "warning" => 2,
        _ => 1,
    };
    let mut by: std::collections::BTreeMap<&str, Vec<&AlertRow>> = Default::default();
    for a in open {
        by.entry(a.quota.as_str()).or_default().push(a);
    }
    let mut groups: Vec<(i32, usize, String, String, String, String)> = by
        .into_iter()
        .map(|(q, mut alerts)| {
            alerts.sort_by_key(|a| -rank(&a.level));
            let worst = alerts[0];
            let counts = ["critical", "warning", "info"]
                .iter()
                .filter_map(|l| {
                    let n = alerts.iter().filter(|a| a.level == *l).count();
                    (n > 0).then(|| format!("{n} {l}"))
                })
                .collect::<Vec<_>>()
                .join(", ");
            (
                rank(&worst.level),
                alerts.len(),
                q.to_string(),
                worst.level.clone(),
                counts,
                worst.message.clone(),
            )
        })
        .collect();
    groups.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    groups
        .into_iter()
        .map(|(_, _, q, level, counts, message)| (q, level, counts, message))
        .collect()
}

/// The overview's first section: what needs the viewer — transfers
/// awaiting its decision, then open alerts grouped by quota, worst first.
#[cfg(feature = "ssr")]
pub fn attention_section(
    open: Vec<AlertRow>,
    open_total: usize,
    awaiting_me: usize,
    items: Vec<crate::attention::Item>,
) -> impl IntoView {
    // `open` may be the worst part of more (a big tree's admin).
    let count = open_total.max(open.len());
    let more_items = items.len().saturating_sub(crate::attention::MAX_ITEMS);
    let has_items = !items.is_empty();
    let items = items
        .into_iter()
        .take(crate::attention::MAX_ITEMS)
        .map(|i| {
            view! {
                <li>
                    <span class=format!("level {}", i.level)>{i.level}</span>" "
                    <a href=i.href>{i.text}</a>
                </li>
            }
        })
        .collect_view();
    let more_items = (more_items > 0).then(|| {
        view! { <li><a href="/tree?filter=over">{format!("and {more_items} more quotas over quota, short of budget or reclaiming →")}</a></li> }
    });
    let groups = group_by_quota(&open);
    let more = groups.len().saturating_sub(ATTENTION_QUOTAS);
    let transfers = (awaiting_me > 0).then(|| {
        let text = if awaiting_me == 1 {
            "1 transfer request awaits your decision".to_string()
        } else {
            format!("{awaiting_me} transfer requests await your decision")
        };
        view! { <li><a href="/transfers?awaiting=me">{text}</a></li> }
    });
    let rows = groups
        .into_iter()
        .take(ATTENTION_QUOTAS)
        .map(|(q, level, counts, message)| {
            let href = format!("/alerts?quota={q}");
            view! {
                <li>
                    <span class=format!("level {level}")>{level.clone()}</span>" "
                    <a class="name" href=href>{q}</a>
                    <span class="hint">{format!(" · {counts}")}</span>
                    <div>{message}</div>
                </li>
            }
        })
        .collect_view();
    let nothing = (count == 0 && awaiting_me == 0 && !has_items)
        .then(|| view! { <p class="empty">"Nothing needs you now: nothing over quota or short of budget, no open alerts on your quotas, no transfer waiting for you."</p> });
    let more = (more > 0).then(
        || view! { <p><a href="/alerts">{format!("and {more} more quotas with alerts →")}</a></p> },
    );
    view! {
        <section class="card attention">
            <h3>"Needs attention"</h3>
            {nothing}
            <ul class="attention">{transfers}{items}{more_items}</ul>
            {(count > 0).then(|| view! { <h4>"Open alerts by quota"</h4> })}
            <ul class="attention">{rows}</ul>
            {more}
            {(count > 0).then(|| view! { <p><a href="/alerts">{format!("All alerts ({count} open) →")}</a></p> })}
        </section>
    }
}

/// [`attention_section`] as HTML (for `/api/v1/live/overview`).
#[cfg(feature = "ssr")]
pub fn attention_html(
    open: Vec<AlertRow>,
    open_total: usize,
    awaiting_me: usize,
    items: Vec<crate::attention::Item>,
) -> String {
    Owner::new().with(|| attention_section(open, open_total, awaiting_me, items).to_html())
}

/// GET /alerts: open alerts first, then the history.
#[cfg(feature = "ssr")]
pub fn render_alerts_page(
    viewer: Viewer,
    open: Vec<AlertRow>,
    resolved: Vec<AlertRow>,
    query: AlertQuery,
    pages: AlertPages,
    kinds: Vec<String>,
    flash: Option<Flash>,
) -> String {
    let AlertPages {
        older,
        more_open,
        sorted_within,
    } = pages;
    let csrf = viewer.csrf.clone();
    let csv_href = format!(
        "/alerts.csv?quota={}&kind={}&level={}",
        enc(&query.quota),
        enc(&query.kind),
        enc(&query.level)
    );
    let more_open = more_open.map(|(n, h)| {
        view! { <p><a href=h>{format!("{n} more open alerts →")}</a>" (or narrow them with the filter)"</p> }
    });
    let levels = ["critical", "warning", "info"]
        .into_iter()
        .map(|l| view! { <option value=l selected=query.level == l>{l}</option> })
        .collect_view();
    let older = older.map(|h| view! { <p><a href=h>"Older resolved alerts →"</a></p> });
    // The header links' choice as a form too (a phone shows no header).
    let sorts = AlertSort::ALL
        .into_iter()
        .map(|(c, v, label)| view! { <option value=v selected=c == query.sort>{label}</option> })
        .collect_view();
    let dirs = [(SortDir::Asc, "ascending"), (SortDir::Desc, "descending")]
        .into_iter()
        .map(|(d, label)| view! { <option value=d.as_str() selected=d == query.dir>{label}</option> })
        .collect_view();
    let sort_note = sorted_within.then(|| {
        view! { <p class="hint">"More than a page is open: pages go worst first, and the sort orders the alerts of this page."</p> }
    });
    let table_query = query.clone();
    let options = kinds
        .into_iter()
        .map(|k| {
            let selected = k == query.kind;
            view! { <option value=k.clone() selected=selected>{kind_label(&k).to_string()}</option> }
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
                    <label>"Level"
                        <select name="level">
                            <option value="" selected=query.level.is_empty()>"any"</option>
                            {levels}
                        </select>
                    </label>
                    <label>"Sort by"<select name="sort">{sorts}</select></label>
                    <label>"Order"<select name="dir">{dirs}</select></label>
                    <button type="submit">"Filter"</button>
                    <a href=csv_href download>"CSV"</a>
                </form>
                <h3>"Open"</h3>
                {sort_note}
                {bulk_form(&open, csrf.clone())}
                {alert_table(open, "No open alerts match.", Some(csrf), Some(&table_query))}
                {more_open}
                <h3>"Resolved"</h3>
                {alert_table(resolved, "No resolved alerts match.", None, None)}
                {older}
            </Layout>
        }
    })
}

/// One stored rule of a quota, as the rules page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleRow {
    /// A key, or "*" for every key without its own rule.
    pub key: String,
    pub warn_percent: i64,
    pub crit_percent: i64,
    pub forecast_horizon_hours: Option<i64>,
    /// An info notice at this share allocated (children + own use); None: none.
    pub allocation_percent: Option<i64>,
}

/// A budget's forecast alert on the rules page: its key, name, horizon
/// (None: off) and where the horizon comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForecastLine {
    pub key: String,
    pub name: String,
    pub hours: Option<i64>,
    /// "a rule", "the budget's forecastDays", …
    pub from: String,
    /// Its budget suspends batch work when spent (`onExhausted:
    /// suspendBatch`): a critical forecast alert while it is, whatever the
    /// horizon.
    pub suspends: bool,
    /// The forecast alerts open on it now: (level, what it says).
    pub open: Vec<(String, String)>,
}

/// `168` → "7 days", `36` → "36 hours".
pub fn horizon_words(hours: i64) -> String {
    match hours {
        1 => "1 hour".into(),
        h if h % 24 == 0 && h >= 48 => format!("{} days", h / 24),
        24 => "1 day".into(),
        h => format!("{h} hours"),
    }
}

/// GET /quotas/{name}/alerts: the quota's rules, and (for its owners and
/// admins) the form to set or remove one. `keys` are the quota's keys, raw
/// and by name, in display order; `defaults` says in words which keys the
/// default rule watches (`server::alerts::Defaults::words`).
#[cfg(feature = "ssr")]
#[allow(clippy::too_many_arguments)]
pub fn render_rules_page(
    viewer: Viewer,
    quota: String,
    rules: Vec<RuleRow>,
    keys: Vec<(String, String)>,
    defaults: String,
    forecasts: Vec<ForecastLine>,
    can_edit: bool,
    flash: Option<Flash>,
) -> String {
    use crate::layout::CsrfField;
    let action = format!("/quotas/{quota}/alerts");
    let csrf = viewer.csrf.clone();
    let named: std::collections::BTreeMap<String, String> = keys.iter().cloned().collect();
    let name_of = move |k: &str| match k {
        "*" => "every key (*)".to_string(),
        k => named.get(k).cloned().unwrap_or_else(|| k.to_string()),
    };
    // What applies where no rule does, always in view: the rules below
    // replace it for their keys ('*': for every key without its own).
    let defaults = view! { <p class="defaults">{format!("{defaults}. A rule below replaces the default for its key; a rule for every key (*) applies to CPU, memory and pods too.")}</p> };
    let rows = if rules.is_empty() {
        view! { <p class="empty">"No rules set: the defaults apply; no allocation notice. Budgets forecast as below."</p> }.into_any()
    } else {
        let rows = rules
            .into_iter()
            .map(|r| {
                let remove = can_edit.then(|| {
                    view! {
                        <form method="post" action=action.clone()>
                            <CsrfField csrf=csrf.clone()/>
                            <input type="hidden" name="key" value=r.key.clone()/>
                            <input type="hidden" name="delete" value="1"/>
                            <button type="submit">"Remove"</button>
                        </form>
                    }
                });
                view! {
                    <tr>
                        <td title=r.key.clone() class="name">{name_of(&r.key)}</td>
                        <td class="num" data-label="Warn at">{format!("{} %", r.warn_percent)}</td>
                        <td class="num" data-label="Critical at">{format!("{} %", r.crit_percent)}</td>
                        <td class="num" data-label="Forecast horizon">{r.forecast_horizon_hours.map(|h| format!("{h} h")).unwrap_or_else(|| "—".into())}</td>
                        <td class="num" data-label="Allocation notice at">{r.allocation_percent.map(|p| format!("{p} %")).unwrap_or_else(|| "off".into())}</td>
                        <td>{remove}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <table class="rules cards">
                <thead><tr><th>"Key"</th><th>"Warn at"</th><th>"Critical at"</th><th>"Forecast horizon"</th><th>"Allocation notice at"</th><th></th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    let form = can_edit.then(|| {
        let options = std::iter::once(("*".to_string(), "every key (*)".to_string()))
            .chain(keys)
            .map(|(k, name)| view! { <option value=k.clone() title=k>{name}</option> })
            .collect_view();
        view! {
            <form class="card inline" method="post" action=action.clone()>
                <CsrfField csrf=viewer.csrf.clone()/>
                <label>"Key"<select name="key">{options}</select></label>
                <label>"Warn at % in use"<input name="warn_percent" type="number" min="1" value="80"/></label>
                <label>"Critical at % in use"<input name="crit_percent" type="number" min="1" value="100"/></label>
                <label>"Forecast horizon (hours, cash keys)"<input name="forecast_horizon_hours" type="number" min="1" placeholder="none"/></label>
                <label>"Allocation notice at % (children + own use)"<input name="allocation_percent" type="number" min="1" placeholder="off"/></label>
                <button type="submit">"Save rule"</button>
            </form>
        }
    });
    // What each budget's forecast alert does: the one horizon the engine
    // uses (`alerts::forecast_horizon`), a rule's or the budget's own.
    let forecasts = (!forecasts.is_empty()).then(|| {
        let items = forecasts
            .into_iter()
            .map(|f| {
                let mut words = match f.hours {
                    Some(h) => format!(
                        "\"Budget running out\" when it would run out within {} at what runs now ({})",
                        horizon_words(h),
                        f.from
                    ),
                    None => format!("no warning before it runs out ({})", f.from),
                };
                if f.suspends {
                    words.push_str(
                        "; critical while it is spent, as its batch work is suspended (onExhausted suspendBatch)",
                    );
                }
                // What is open now, from the alerts themselves: the page
                // never says "none" beside an open one.
                let open = (!f.open.is_empty()).then(|| {
                    let items = f
                        .open
                        .into_iter()
                        .map(|(level, said)| {
                            view! { <li><span class=format!("level {level}")>{level.clone()}</span>" open now: "{said}</li> }
                        })
                        .collect_view();
                    view! { <ul class="open-now">{items}</ul> }
                });
                view! { <li><span title=f.key>{f.name}</span>": "{words}{open}</li> }
            })
            .collect_view();
        view! {
            <h2>"Forecast alerts"</h2>
            <ul class="forecasts">{items}</ul>
        }
    });
    let title = format!("Alert rules of {quota}");
    let back = format!("/quotas/{quota}");
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Alerts flash=flash>
                <p><a href=back>"← the quota"</a></p>
                {defaults}
                {rows}
                {forecasts}
                {form}
            </Layout>
        }
    })
}

/// The viewer's alert settings on the account page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountAlerts {
    pub email: String,
    /// (kind, muted, daily digest).
    pub kinds: Vec<(String, bool, bool)>,
    /// When digests go out (hour, UTC).
    pub digest_hour: u8,
}

/// GET /account: the viewer's email address and alert preferences.
#[cfg(feature = "ssr")]
pub fn render_account_page(viewer: Viewer, a: AccountAlerts, flash: Option<Flash>) -> String {
    use crate::layout::CsrfField;
    let rows = a
        .kinds
        .into_iter()
        .map(|(kind, muted, digest)| {
            let m = format!("mute.{kind}");
            let d = format!("digest.{kind}");
            view! {
                <tr>
                    <td>{kind_label(&kind).to_string()}</td>
                    <td><input type="checkbox" name=m value="1" checked=muted aria-label=format!("no email for {}", kind_label(&kind))/></td>
                    <td><input type="checkbox" name=d value="1" checked=digest aria-label=format!("daily digest for {}", kind_label(&kind))/></td>
                </tr>
            }
        })
        .collect_view();
    document(move || {
        view! {
            <Layout viewer=Some(viewer.clone()) title="Account".into() section=Section::None flash=flash>
                <form class="card" method="post" action="/account">
                    <CsrfField csrf=viewer.csrf.clone()/>
                    <label>"Email for alerts"<input name="email" type="email" value=a.email/></label>
                    <table class="prefs">
                        <thead><tr><th>"Alert kind"</th><th>"No email"</th><th>"Daily digest"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                    <p class="hint">{format!(
                        "A kind taken as a daily digest sends no email per alert: its alerts come \
                         together in one email a day at {:02}:00 UTC. \"No email\" wins over the digest. \
                         The portal shows every alert either way.",
                        a.digest_hour
                    )}</p>
                    <button type="submit">"Save"</button>
                </form>
                <p><a href="/account/password">"Change your password"</a></p>
            </Layout>
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(quota: &str, level: &str, message: &str) -> AlertRow {
        AlertRow {
            id: 0,
            kind: "threshold".into(),
            quota: quota.into(),
            level: level.into(),
            message: message.into(),
            opened: String::new(),
            opened_ms: 0,
            resolved: None,
            resolved_ms: None,
            quiet: None,
            can_quiet: false,
        }
    }

    #[test]
    fn alerts_group_by_quota_worst_first() {
        let open = [
            alert("cv", "warning", "cv at 80 %"),
            alert("nlp", "warning", "nlp at 80 %"),
            alert("nlp", "critical", "nlp at 100 %"),
            alert("ai", "info", "ai allocated"),
            alert("cv", "warning", "cv budget"),
        ];
        let g = group_by_quota(&open);
        let names: Vec<&str> = g.iter().map(|(q, ..)| q.as_str()).collect();
        assert_eq!(names, ["nlp", "cv", "ai"]);
        assert_eq!(g[0].1, "critical");
        assert_eq!(g[0].2, "1 critical, 1 warning");
        assert_eq!(g[0].3, "nlp at 100 %");
        assert_eq!(g[1].2, "2 warning");
    }

    #[test]
    fn the_open_alerts_sort_by_a_column_in_either_direction() {
        let mut rows = vec![
            alert("nlp", "warning", "a"),
            alert("ai", "critical", "b"),
            alert("cv", "info", "c"),
        ];
        for (i, (r, at)) in rows.iter_mut().zip([30, 10, 20]).enumerate() {
            r.id = i as i64;
            r.opened_ms = at;
        }
        rows[2].quiet = Some("acknowledged by alice".into());
        let order = |rows: &[AlertRow]| rows.iter().map(|r| r.quota.clone()).collect::<Vec<_>>();
        sort_rows(&mut rows, AlertSort::Level, SortDir::Desc);
        assert_eq!(order(&rows), ["ai", "nlp", "cv"]);
        sort_rows(&mut rows, AlertSort::Level, SortDir::Asc);
        assert_eq!(order(&rows), ["cv", "nlp", "ai"]);
        sort_rows(&mut rows, AlertSort::Quota, SortDir::Asc);
        assert_eq!(order(&rows), ["ai", "cv", "nlp"]);
        sort_rows(&mut rows, AlertSort::Since, SortDir::Desc);
        assert_eq!(order(&rows), ["nlp", "cv", "ai"]);
        sort_rows(&mut rows, AlertSort::Since, SortDir::Asc);
        assert_eq!(order(&rows), ["ai", "cv", "nlp"]);
        // Loud first; among the loud, worst first.
        sort_rows(&mut rows, AlertSort::State, SortDir::Asc);
        assert_eq!(order(&rows), ["ai", "nlp", "cv"]);
        sort_rows(&mut rows, AlertSort::State, SortDir::Desc);
        assert_eq!(order(&rows), ["cv", "ai", "nlp"]);
    }

    #[test]
    fn sort_parameters_are_checked_and_links_keep_the_filters() {
        assert_eq!(AlertSort::parse(""), Ok(AlertSort::Level));
        assert_eq!(AlertSort::parse("since"), Ok(AlertSort::Since));
        let e = AlertSort::parse("opened_at; drop").unwrap_err();
        assert!(e.contains("level, quota, kind, since or state"), "{e}");
        assert_eq!(SortDir::parse(""), Ok(None));
        assert_eq!(SortDir::parse("asc"), Ok(Some(SortDir::Asc)));
        assert!(SortDir::parse("up").is_err());
        let q = AlertQuery {
            quota: "a b".into(),
            level: "warning".into(),
            sort: AlertSort::Quota,
            dir: SortDir::Asc,
            open_from: 100,
            ..Default::default()
        };
        // The column sorted now flips; another starts in its first direction.
        assert_eq!(
            q.header_href(AlertSort::Quota),
            "/alerts?quota=a%20b&level=warning&sort=quota&dir=desc&open_from=100"
        );
        assert_eq!(
            q.header_href(AlertSort::Since),
            "/alerts?quota=a%20b&level=warning&sort=since&dir=desc&open_from=100"
        );
    }
}
