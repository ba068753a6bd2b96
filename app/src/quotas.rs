//! Quota pages: the overview (my quotas, burn and forecast), one quota's
//! detail, and the create / edit forms. The server gathers the data and
//! decides what the viewer may do; these only render it.

use crate::layout::{Flash, Viewer};
use crate::KeyUsage;

#[cfg(feature = "ssr")]
use crate::layout::{document, CsrfField, Layout, Section};
#[cfg(feature = "ssr")]
use crate::KeyBar;
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One of the viewer's quotas on the overview.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverviewCard {
    pub name: String,
    /// "admin", "owner" or "member".
    pub role: String,
    /// The quota in one line (`strip_words`): GPUs free, budgets left.
    pub strip: Vec<String>,
    pub keys: Vec<KeyUsage>,
    pub workloads: usize,
    pub children: usize,
    /// One line per cash key: spent, burn and exhaustion date.
    pub forecasts: Vec<String>,
}

/// One key of a quota on its detail page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyDetail {
    pub usage: KeyUsage,
    pub self_used: String,
    /// What the children's carve-outs hold (empty for a cash key).
    pub allocated: String,
    pub max: Option<String>,
    /// What admission can still give within its hard, and what it could
    /// borrow beyond that now (`quota::rollup`; empty for a cash key).
    pub free_now: String,
    pub borrowable_now: String,
    /// The exact values, in nano-units, that the table sorts by.
    pub free_now_nanos: Option<i128>,
    pub borrowable_now_nanos: Option<i128>,
    pub self_used_nanos: i128,
    pub allocated_nanos: Option<i128>,
    pub max_nanos: Option<i128>,
}

/// A workload bound to a quota, as charged in its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadRow {
    /// `group/Kind/namespace/name`.
    pub reference: String,
    /// e.g. "worker: 4 × requests.nvidia.com/gpu=1, requests.cpu=8".
    pub pod_sets: Vec<String>,
    /// What it holds in total.
    pub charge: String,
    pub since: String,
}

/// Everything the detail page shows of one quota.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaDetail {
    pub name: String,
    pub parent: String,
    /// The quota in one line under its name (`strip_words`).
    pub strip: Vec<String>,
    pub keys: Vec<KeyDetail>,
    /// Inline SVG: one model breakdown per GPU key that has models.
    pub breakdowns: Vec<String>,
    /// The other keys' model breakdowns (CPU, memory), in the fold.
    pub other_breakdowns: Vec<String>,
    /// (heading, [(what, amount)]) for borrowed, lent, loans, reclaim marks,
    /// transfers in flight; empty sections are left out.
    pub extras: Vec<(String, Vec<(String, String)>)>,
    /// (child name, its hard as one line): at most [`ROWS_SHOWN`].
    pub children: Vec<(String, String)>,
    /// Children not listed (the tree lists them all).
    pub children_more: usize,
    /// At most [`ROWS_SHOWN`].
    pub workloads: Vec<WorkloadRow>,
    /// Bound workloads not listed (the quota's status in the JSON API
    /// holds them all).
    pub workloads_more: usize,
    /// Usage of each GPU key over the chosen range, the children's use
    /// stacked, and the burn-down of each budget (`chart_section::leads`).
    pub charts: crate::chart_section::Charts,
    /// (key, its name) of every other key with a chart: each a link to
    /// its charts' own page, so the page draws only what leads.
    pub other_charts: Vec<(String, String)>,
    pub forecasts: Vec<String>,
    pub resource_version: String,
    pub can_edit: bool,
    pub can_create_child: bool,
    /// May delete, and it is a leaf.
    pub can_delete: bool,
    /// May delete, but it has children.
    pub delete_blocked: bool,
    /// Who holds a role here: (user, role, whether the viewer may remove it).
    pub members: Vec<(String, String, bool)>,
    /// May bind users here: as member; as owner too.
    pub can_invite_member: bool,
    pub can_invite_owner: bool,
    /// The Budgets panel, one line per cash key.
    pub budgets: Vec<crate::budgets::BudgetLine>,
    /// The queue (docs/queueing.md): the policy in words and the waiting
    /// workloads; None for a quota that refuses and holds none.
    pub queue: Option<(String, Vec<crate::queue::QueueRow>, usize)>,
    /// Allocated against used (docs/real-usage.md); None where real usage
    /// was never read.
    pub efficiency: Option<crate::efficiency::Section>,
}

/// Rows a quota page lists at most of its children and of its workloads:
/// the page's size and rendering follow what it shows, not what the quota
/// holds (docs/limits.md).
pub const ROWS_SHOWN: usize = 200;

/// One key row of the create / edit form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FormKey {
    pub key: String,
    /// The key as people read it ("A100 GPUs"); empty: the key.
    pub name: String,
    pub hard: String,
    pub max: String,
    /// What is left of it in the parent (a hint), if known.
    pub left: Option<String>,
    /// The parent has it: the child must keep it.
    pub required: bool,
    /// A refusal about this key, shown beside its field.
    pub error: Option<String>,
    /// On the short new-child form: folded under "More keys" (not a GPU
    /// key nor a budget), with a choice of what the child takes.
    pub folded: bool,
    /// A folded key's choice (`mode:KEY`): `inherit` (hard 0, max the
    /// parent's hard: the child borrows the parent's idle room), `zero`,
    /// or `set` (the hard and max typed).
    pub mode: String,
}

/// What a folded key of the short form takes: (value, words).
pub const KEY_MODES: [(&str, &str); 3] = [
    (
        "inherit",
        "the parent's idle room (hard 0, borrows up to the parent's hard)",
    ),
    ("zero", "none (0)"),
    ("set", "the amounts typed here"),
];

/// The create-child or edit form, as first shown or as submitted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaForm {
    /// Editing this quota (None: creating a child of `parent`).
    pub editing: Option<String>,
    pub parent: String,
    pub name: String,
    pub keys: Vec<FormKey>,
    /// Extra keys the parent does not have (blank rows to fill in).
    pub extra: Vec<FormKey>,
    pub resource_version: String,
    /// What saving would do that needs a second look (a hard below what
    /// runs): shown above the Save button with a box to tick.
    pub consequences: Vec<String>,
    /// A refusal about the name, shown beside it.
    pub name_error: Option<String>,
    /// Period and carry-over of each cash key (editing only).
    pub budgets: Vec<crate::budgets::BudgetFormRow>,
}

impl QuotaForm {
    /// Puts a refusal beside the field it is about: the key it names (the
    /// longest, so `requests.nvidia.com/gpu.A100` wins over its generic
    /// key), else the name when it speaks of the name; the message also
    /// stays at the top of the page.
    pub fn place_error(&mut self, message: &str) {
        let named = |k: &FormKey| !k.key.is_empty() && message.contains(k.key.as_str());
        let best = self
            .keys
            .iter_mut()
            .chain(self.extra.iter_mut())
            .filter(|k| named(k))
            .max_by_key(|k| k.key.len());
        if let Some(k) = best {
            k.error = Some(message.to_string());
        } else if message.contains("name") {
            self.name_error = Some(message.to_string());
        }
    }
}

/// Blank rows offered for keys beyond the parent's.
pub const EXTRA_ROWS: usize = 2;

/// A quota's one line (`quota::strip`), in words, one string a part:
/// "A100 GPUs: 6 of 32 free (+14 borrowable)", "5,240 card-hours left ·
/// runs out 2026-12-07". Each figure as the keys table and the budget's
/// forecast give it; a budget is named where the quota has several.
pub fn strip_words(parts: &[quota::strip::Part], cfg: &quota::KeyConfig) -> Vec<String> {
    use quota::budget::runway::Runway;
    use quota::strip::Part;
    let budgets = parts
        .iter()
        .filter(|p| matches!(p, Part::Budget(_)))
        .count();
    parts
        .iter()
        .map(|p| match p {
            Part::Gpu { row, borrows } => {
                let show = |n| crate::display_quantity(&row.key, n, cfg);
                let more = if *borrows && !row.borrowable_now.is_zero() {
                    format!(" (+{} borrowable)", show(row.borrowable_now))
                } else {
                    String::new()
                };
                format!(
                    "{}: {} of {} free{more}",
                    crate::key_name(&row.key, cfg),
                    show(row.free_now),
                    show(row.hard)
                )
            }
            Part::Fullest(row) => {
                let show = |n| crate::display_quantity(&row.key, n, cfg);
                format!(
                    "{}: {} of {} free ({} % in use, the fullest key)",
                    crate::key_name(&row.key, cfg),
                    show(row.free_now),
                    show(row.hard),
                    row.in_use_percent()
                )
            }
            Part::Budget(o) => {
                let name = crate::key_name(&o.key, cfg);
                let named = if budgets > 1 {
                    format!("{name}: ")
                } else {
                    String::new()
                };
                // At a parent, what is left is its own work's (its
                // children spend their carve-outs), as the budgets box says.
                let own = if o.carved.is_zero() {
                    ""
                } else {
                    " for its own work"
                };
                let left = crate::display_quantity(&o.key, o.left, cfg);
                match o.runway {
                    Runway::Spent => format!("{name}{own}: run out"),
                    Runway::Until { .. } => format!(
                        "{named}{left} left{own} · runs out {}",
                        o.date().unwrap_or_default()
                    ),
                    Runway::OutlastsPeriod { .. } => {
                        format!("{named}{left} left{own} · lasts the period")
                    }
                    Runway::NotBurning => format!("{named}{left} left{own} · not burning"),
                    Runway::Unknown => format!("{named}{left} left{own} · no burn measured yet"),
                }
            }
        })
        .collect()
}

/// The one line under a quota's name, on its page and its card.
#[cfg(feature = "ssr")]
#[component]
pub fn Strip(parts: Vec<String>) -> impl IntoView {
    (!parts.is_empty()).then(|| {
        let n = parts.len();
        let items = parts
            .into_iter()
            .enumerate()
            // Each dot ends its part (after a no-break space): a wrapped
            // line starts with a part, never with a separator.
            .map(|(i, p)| {
                let more = i + 1 < n;
                view! { <span>{p}{more.then_some("\u{a0}·")}</span>{more.then_some(" ")} }
            })
            .collect_view();
        view! { <p class="strip">{items}</p> }
    })
}

#[cfg(feature = "ssr")]
fn svg(s: String) -> impl IntoView {
    view! { <figure class="chart" inner_html=s></figure> }
}

#[cfg(feature = "ssr")]
fn quota_link(name: &str) -> impl IntoView {
    let href = format!("/quotas/{name}");
    view! { <a href=href>{name.to_string()}</a> }
}

/// An overview card's counts: "3 workloads · 2 children".
pub fn card_counts(workloads: usize, children: usize) -> String {
    format!("{workloads} workloads · {children} children")
}

/// "Other keys: CPU cores, memory, pods": the fold's summary, naming each
/// folded key once (a model under its generic key's name).
pub fn other_keys_summary<'a>(keys: impl IntoIterator<Item = (&'a str, bool)>) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (name, model) in keys {
        if !model && !names.contains(&name) {
            names.push(name);
        }
    }
    format!("Other keys: {}", names.join(", "))
}

/// A card's keys: its one line, the GPU keys and budgets' bars, and the
/// other keys' bars folded below them (`quota::keys::leads`).
#[cfg(feature = "ssr")]
#[component]
fn CardKeys(strip: Vec<String>, keys: Vec<KeyUsage>) -> impl IntoView {
    let (lead, rest): (Vec<KeyUsage>, Vec<KeyUsage>) = keys.into_iter().partition(|k| k.lead);
    let fold = (!rest.is_empty()).then(|| {
        let summary = other_keys_summary(rest.iter().map(|k| (k.name.as_str(), k.model)));
        view! {
            <details class="other-keys">
                <summary>{summary}</summary>
                <div class="keys">{rest.into_iter().map(|k| view! { <KeyBar k=k/> }).collect_view()}</div>
            </details>
        }
    });
    view! {
        <Strip parts=strip/>
        {lead.into_iter().map(|k| view! { <KeyBar k=k/> }).collect_view()}
        {fold}
    }
}

/// An overview card's keys as HTML, as the page draws them (for
/// `/api/v1/live/overview`, which redraws the card's `.keys`).
#[cfg(feature = "ssr")]
pub fn card_keys_html(strip: Vec<String>, keys: Vec<crate::KeyUsage>) -> String {
    Owner::new().with(|| view! { <CardKeys strip=strip keys=keys/> }.to_html())
}

/// What the overview lists above its cards: what asks for the viewer,
/// what waits in queues, and GPUs held idle.
#[derive(Clone, Debug, Default)]
pub struct OverviewLists {
    pub awaiting_me: usize,
    pub attention: Vec<crate::attention::Item>,
    /// The waiting workloads, and how many more.
    pub queued: (Vec<crate::queue::WaitingRow>, usize),
    /// Where real usage is read: the workloads idle now, and since when
    /// real usage is unknown if it is (docs/real-usage.md).
    pub idle: Option<(Vec<crate::efficiency::IdleRow>, Option<String>)>,
}

/// The overview: the viewer's quotas with usage, burn and forecasts.
#[cfg(feature = "ssr")]
pub fn render_overview_page(
    viewer: Viewer,
    cards: Vec<OverviewCard>,
    alerts: Vec<crate::alerts::AlertRow>,
    lists: OverviewLists,
    flash: Option<Flash>,
) -> String {
    let OverviewLists {
        awaiting_me,
        attention,
        queued,
        idle,
    } = lists;
    let title = "Overview".to_string();
    let queued = crate::queue::overview_section(queued.0, queued.1);
    // Where real usage is read (docs/real-usage.md): GPUs held idle,
    // what a tenant can give back; as loaded (the island redraws the
    // sections it names only).
    let idle = idle.map(|(rows, unknown)| crate::efficiency::idle_now_section(rows, unknown));
    let open_total = viewer.open_alerts;
    let body = if cards.is_empty() {
        view! { <p class="empty">"No quota is shared with you yet. An admin can give you a role on one on the Users page."</p> }.into_any()
    } else {
        cards
            .into_iter()
            .map(|c| {
                let forecasts = if c.forecasts.is_empty() {
                    view! { <p class="hint">"No card-hour budget (cash key) on this quota."</p> }.into_any()
                } else {
                    view! { <ul class="forecasts">{c.forecasts.into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ul> }.into_any()
                };
                view! {
                    <section class="card quota-card" data-quota=c.name.clone()>
                        <h3>{quota_link(&c.name)}" "<span class=format!("role {}", c.role)>{c.role.clone()}</span></h3>
                        <p class="hint" data-live="counts">{card_counts(c.workloads, c.children)}</p>
                        <div class="keys"><CardKeys strip=c.strip keys=c.keys/></div>
                        <h4>"Burn and forecast"</h4>
                        {forecasts}
                    </section>
                }
            })
            .collect_view()
            .into_any()
    };
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Overview flash=flash>
                <p class="hint my-workloads"><a href="/workloads">"My workloads"</a>": what you submitted with kubectl, in every quota it runs or waits in."</p>
                // Redrawn in place every 15 s when scripts run (by the
                // navigation's badge island, which polls on every page).
                <div data-live="overview">
                    {crate::alerts::attention_section(alerts, open_total, awaiting_me, attention)}
                    // What waits comes before the bars: it is what a tenant
                    // acts on (the island redraws the parts it names only).
                    {queued}
                    {idle}
                    <crate::BarLegend/>
                    <div class="overview">{body}</div>
                </div>
            </Layout>
        }
    })
}

#[cfg(feature = "ssr")]
fn pairs_table(rows: Vec<(String, String)>) -> impl IntoView {
    view! {
        <table class="pairs">
            <tbody>{rows.into_iter().map(|(a, b)| view! { <tr><td class="key">{a}</td><td class="num">{b}</td></tr> }).collect_view()}</tbody>
        </table>
    }
}

/// A keys table of a quota's page: bars, hard, in use or spent,
/// allocated, free and borrowable now, own use and max; sortable in place
/// when scripts run, by the exact values. Drawn inside the document: the
/// island needs its context.
#[cfg(feature = "ssr")]
fn keys_table(rows: Vec<KeyDetail>, class: &'static str) -> impl IntoView {
    // One column, two words: a key is in use, a budget spent (by its
    // subtree); the header names both where the table has a budget, as
    // each row's phone label names its own.
    let used_header = if rows.iter().any(|k| k.usage.cash) {
        "In use / spent"
    } else {
        "In use"
    };
    view! {
            <bizrq_islands::SortTable>
            <table class=class>
                <thead><tr>
                    <th data-sort="text">"Key"</th>
                    <th data-sort="num" data-sort-first="desc">"Usage"</th>
                    <th data-sort="num" data-sort-first="desc">"Hard"</th>
                    <th data-sort="num" data-sort-first="desc">{used_header}</th>
                    <th data-sort="num" data-sort-first="desc">"Allocated to children"</th>
                    <th data-sort="num" data-sort-first="desc">"Free now"</th>
                    <th data-sort="num" data-sort-first="desc">"Borrowable now"</th>
                    <th data-sort="num" data-sort-first="desc">"Self used"</th>
                    <th data-sort="num" data-sort-first="desc">"Max"</th>
                </tr></thead>
                <tbody>
                    {rows.into_iter().map(|k| {
                        let class = if k.usage.model { "model" } else { "" };
                        let (hard, used) = (k.usage.hard.clone(), k.usage.used.clone());
                        let pct = k.usage.percent;
                        let bar_class = match pct { p if p > 100 => "bar over", p if p >= 80 => "bar warn", _ => "bar" };
                        let width = format!("width:{}%", pct.min(100));
                        let idle = format!("width:{}%", k.usage.idle_percent);
                        let detail = (!k.usage.detail.is_empty()).then(|| view! { <small class="detail">{k.usage.detail.clone()}</small> });
                        let alloc_class = if k.allocated.is_empty() { "num empty" } else { "num" };
                        let max_class = if k.max.is_none() { "num empty" } else { "num" };
                        let free_class = if k.free_now.is_empty() { "num empty" } else { "num" };
                        let borrow_class = if k.borrowable_now.is_empty() { "num empty" } else { "num" };
                        let exact = |n: Option<i128>| n.map(|n| n.to_string()).unwrap_or_default();
                        let (hard_n, used_n) = (k.usage.hard_nanos.to_string(), k.usage.used_nanos.to_string());
                        // A budget is spent (by its subtree), not in use.
                        let used_label = if k.usage.cash { "Spent" } else { "In use" };
                        view! {
                            <tr class=class>
                                <td class="key" title=k.usage.key>{k.usage.name}</td>
                                <td class="usage" data-label="Usage" data-sort-value=pct.to_string()><span class=bar_class><i class="use" style=width></i><i class="idle" style=idle></i></span><span class="num">{format!("{pct}%")}{detail}</span></td>
                                <td class="num" data-label="Hard" data-sort-value=hard_n>{hard}</td>
                                <td class="num" data-label=used_label data-sort-value=used_n>{used}</td>
                                <td class=alloc_class data-label="Allocated to children" data-sort-value=exact(k.allocated_nanos)>{k.allocated}</td>
                                <td class=free_class data-label="Free now" data-sort-value=exact(k.free_now_nanos)>{k.free_now}</td>
                                <td class=borrow_class data-label="Borrowable now" data-sort-value=exact(k.borrowable_now_nanos)>{k.borrowable_now}</td>
                                <td class="num" data-label="Self used" data-sort-value=k.self_used_nanos.to_string()>{k.self_used}</td>
                                <td class=max_class data-label="Max" data-sort-value=exact(k.max_nanos)>{k.max.unwrap_or_default()}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            </bizrq_islands::SortTable>
    }
}

/// One quota: keys, model breakdown, status extras, children, workloads,
/// charts, and the actions the viewer may take.
#[cfg(feature = "ssr")]
pub fn render_detail_page(viewer: Viewer, d: QuotaDetail, flash: Option<Flash>) -> String {
    let csrf = viewer.csrf.clone();
    let budgets = crate::budgets::panel(d.budgets);
    let strip = d.strip;
    let title = format!("Quota {}", d.name);
    let name = d.name.clone();
    let parent = (!d.parent.is_empty()).then(|| {
        view! { <p class="hint">"Parent: "{quota_link(&d.parent)}</p> }
    });
    let mut actions = Vec::new();
    if d.can_edit {
        actions.push(
            view! { <a class="button" href=format!("/quotas/{name}/edit")>"Edit hard / max"</a> }
                .into_any(),
        );
    }
    // Everyone who sees the quota sees its rules; owners change them there.
    actions.push(
        view! { <a class="button" href=format!("/quotas/{name}/alerts")>"Alert rules"</a> }
            .into_any(),
    );
    if d.can_create_child {
        actions.push(
            view! { <a class="button" href=format!("/quotas/{name}/children/new")>"New child"</a> }
                .into_any(),
        );
    }
    if d.can_delete {
        let rv = d.resource_version.clone();
        actions.push(
            view! {
                <form class="delete" method="post" action=format!("/quotas/{name}/delete")>
                    <CsrfField csrf=csrf.clone()/>
                    <input type="hidden" name="resourceVersion" value=rv/>
                    <label class="check"><input type="checkbox" name="confirm" value="yes" required/>"return its hard to the parent"</label>
                    <button type="submit" class="danger">"Delete"</button>
                </form>
            }
            .into_any(),
        );
    }
    if d.delete_blocked {
        actions.push(view! { <span class="hint">"Only leaves can be deleted: delete its children first."</span> }.into_any());
    }
    // GPU keys and budgets first; CPU, memory, pods folded below the
    // workloads (`quota::keys::leads`), in a `<details>`: no script needed.
    let (lead_keys, other_keys): (Vec<KeyDetail>, Vec<KeyDetail>) =
        d.keys.into_iter().partition(|k| k.usage.lead);
    let other_summary = other_keys_summary(
        other_keys
            .iter()
            .map(|k| (k.usage.name.as_str(), k.usage.model)),
    );
    let other_breakdowns = (!d.other_breakdowns.is_empty()).then(|| {
        view! {
            <h4>"By model"</h4>
            <div class="charts">{d.other_breakdowns.into_iter().map(svg).collect_view()}</div>
        }
    });
    let breakdowns = (!d.breakdowns.is_empty()).then(|| {
        view! {
            <h3>"By model"</h3>
            <div class="charts">{d.breakdowns.into_iter().map(svg).collect_view()}</div>
        }
    });
    let extras = d
        .extras
        .into_iter()
        .map(|(h, rows)| view! { <div class="card"><h4>{h}</h4>{pairs_table(rows)}</div> })
        .collect_view();
    let children_more = (d.children_more > 0).then(|| {
        view! {
            <p class="hint">{format!("and {} more children: ", d.children_more)}
                <a href=format!("/tree?under={}", d.name)>"all of them in the tree"</a></p>
        }
    });
    let workloads_more = (d.workloads_more > 0).then(|| {
        view! {
            <p class="hint">{format!("and {} more workloads: ", d.workloads_more)}
                <a href=format!("/api/v1/quotas/{}", d.name)>"all of them in its status (JSON API)"</a></p>
        }
    });
    let children = if d.children.is_empty() {
        view! { <p class="hint">"No children."</p> }.into_any()
    } else {
        view! {
            <table>
                <thead><tr><th>"Child"</th><th>"Hard"</th></tr></thead>
                <tbody>{d.children.into_iter().map(|(c, hard)| view! { <tr><td class="name">{quota_link(&c)}</td><td class="num">{hard}</td></tr> }).collect_view()}</tbody>
            </table>
            {children_more}
        }
        .into_any()
    };
    let workloads = if d.workloads.is_empty() {
        view! { <p class="hint">"No workloads bound to this quota."</p> }.into_any()
    } else {
        view! {
            <table class="workloads cards">
                <thead><tr><th>"Workload"</th><th>"Pod sets"</th><th>"Charge"</th><th>"Since"</th></tr></thead>
                <tbody>{d.workloads.into_iter().map(|w| view! {
                    <tr>
                        <td class="key" data-label="Workload">{w.reference}</td>
                        <td class="wide" data-label="Pod sets">{w.pod_sets.into_iter().map(|p| view! { <div class="num">{p}</div> }).collect_view()}</td>
                        <td class="num" data-label="Charge">{w.charge}</td>
                        <td class="num" data-label="Since">{w.since}</td>
                    </tr>
                }).collect_view()}</tbody>
            </table>
            {workloads_more}
        }
        .into_any()
    };
    let members_list = if d.members.is_empty() {
        view! { <p class="hint">"Nobody holds a role on this quota itself (roles on ancestors reach it too)."</p> }.into_any()
    } else {
        let rows = d
            .members
            .into_iter()
            .map(|(user, role, removable)| {
                let remove = removable.then(|| {
                    view! {
                        <form class="binding" method="post" action=format!("/quotas/{name}/members/delete")>
                            <CsrfField csrf=csrf.clone()/>
                            <input type="hidden" name="username" value=user.clone()/>
                            <button type="submit" class="link" title="remove">"×"</button>
                        </form>
                    }
                });
                view! { <tr><td class="name">{user}</td><td><span class=format!("role {role}")>{role.clone()}</span></td><td>{remove}</td></tr> }
            })
            .collect_view();
        view! { <table><thead><tr><th>"User"</th><th>"Role"</th><th></th></tr></thead><tbody>{rows}</tbody></table> }.into_any()
    };
    let invite = d.can_invite_member.then(|| {
        let owner = d.can_invite_owner.then(|| view! { <option value="owner">"owner"</option> });
        view! {
            <form class="card inline" method="post" action=format!("/quotas/{name}/members")>
                <CsrfField csrf=csrf.clone()/>
                <label>"User"<input name="username" required placeholder="an existing user"/></label>
                <label>"Role"<select name="role"><option value="member">"member"</option>{owner}</select></label>
                <button type="submit">"Invite"</button>
            </form>
        }
    });
    let forecasts = (!d.forecasts.is_empty()).then(|| {
        view! { <ul class="forecasts">{d.forecasts.into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ul> }
    });
    let queue = d
        .queue
        .map(|(policy, rows, more)| crate::queue::section(policy, rows, more));
    let efficiency = d.efficiency.map(crate::efficiency::section);
    let shares = format!("/quotas/{}/shares", crate::layout::encode_component(&name));
    let range = d.charts.range;
    let other_charts = other_charts_list(&name, range, d.other_charts);
    // Rendered inside the document: the chart island needs its context.
    let charts = d.charts;
    // GPUs first, then budgets, the queue and the workloads; the rest
    // after (docs/portal.md "Quota detail").
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Tree flash=flash>
                <Strip parts=strip/>
                {parent}
                <div class="actions">{actions}</div>
                <h3 id="keys">"GPUs and budgets"</h3>
                <crate::BarLegend/>
                {keys_table(lead_keys, "keys-table")}
                {breakdowns}
                {crate::chart_section::view(charts, "No GPU or budget to chart: this quota has no hard or use of either yet.")}
                {budgets}
                {forecasts}
                {efficiency}
                {queue}
                <p class="hint"><a href=shares>"Usage per submitter"</a>" (decayed, with each one's fair-share factor)"</p>
                <h3 id="workloads">"Bound workloads"</h3>
                {workloads}
                {(!other_keys.is_empty()).then(|| view! {
                    <details class="other-keys" id="other-keys">
                        <summary>{other_summary}</summary>
                        {keys_table(other_keys, "keys-table other-keys")}
                        {other_breakdowns}
                    </details>
                })}
                {other_charts}
                <div class="extras">{extras}</div>
                <h3 id="children">"Children"</h3>
                {children}
                <h3 id="members">"Members"</h3>
                {members_list}
                {invite}
            </Layout>
        }
    })
}

/// The other keys' charts as links to their own page, in the range shown
/// (`data-follows-range`: with JavaScript, a range click changes it).
#[cfg(feature = "ssr")]
fn other_charts_list(
    quota: &str,
    range: quota::series::Range,
    keys: Vec<(String, String)>,
) -> Option<impl IntoView> {
    if keys.is_empty() {
        return None;
    }
    let base = format!("/quotas/{}/charts", crate::layout::encode_component(quota));
    let all = format!("{base}?range={}", range.as_str());
    let links = keys
        .into_iter()
        .map(|(key, name)| {
            let href = format!(
                "{base}?key={}&range={}",
                crate::layout::encode_component(&key),
                range.as_str()
            );
            view! { <li><a href=href title=key data-follows-range="">{name}</a></li> }
        })
        .collect_view();
    Some(view! {
        <section class="other-charts">
            <h3>"Other keys' charts"</h3>
            <p class="hint">"Each on its own page, "<a href=all data-follows-range="">"or all of them on one"</a>"."</p>
            <ul class="inline-list">{links}</ul>
        </section>
    })
}

/// A quota's charts of one key, or of every key the quota page links
/// (`/quotas/{name}/charts?key=`), under the same range picker.
#[cfg(feature = "ssr")]
pub fn render_charts_page(
    viewer: Viewer,
    quota: String,
    what: String,
    charts: crate::chart_section::Charts,
) -> String {
    let title = format!("Quota {quota}: {what}");
    let back = format!("/quotas/{}", crate::layout::encode_component(&quota));
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Tree flash=None>
                <p class="hint"><a href=back>{format!("Back to {quota}")}</a></p>
                {crate::chart_section::view(charts, "Nothing to chart: no hard or use of this key in the range.")}
            </Layout>
        }
    })
}

#[cfg(feature = "ssr")]
fn key_row(k: FormKey, extra: Option<usize>) -> impl IntoView {
    let (hard_name, max_name) = match extra {
        None => (format!("hard:{}", k.key), format!("max:{}", k.key)),
        Some(i) => (format!("newhard:{i}"), format!("newmax:{i}")),
    };
    let display = if k.name.is_empty() {
        k.key.clone()
    } else {
        k.name.clone()
    };
    let key_cell = match extra {
        None => {
            view! { <td class="key" title=k.key.clone()>{display.clone()}{(k.required && !k.folded).then_some(" *")}</td> }.into_any()
        }
        Some(i) => view! { <td class="key"><input name=format!("newkey:{i}") value=k.key.clone() placeholder="e.g. limits.cpu.A4" aria-label="key"/></td> }.into_any(),
    };
    let left = k.left.clone().unwrap_or_default();
    let left_label = (!left.is_empty()).then_some("Left in parent");
    let invalid = k.error.is_some().then_some("true");
    let error = k
        .error
        .clone()
        .map(|e| view! { <small class="field-error" role="alert">{e}</small> });
    // A folded key: what the child takes of it, inherit unless chosen.
    let mode = k.folded.then(|| {
        let current = if k.mode.is_empty() { "inherit" } else { k.mode.as_str() };
        let options = KEY_MODES
            .iter()
            .map(|(v, words)| view! { <option value=*v selected=*v == current>{*words}</option> })
            .collect_view();
        view! {
            <td class="mode"><select name=format!("mode:{}", k.key) aria-label=format!("{display}: what the child takes")>{options}</select></td>
        }
    });
    // A folded key's amounts count only when "set" is chosen: never
    // required by the browser.
    let required = k.required && !k.folded;
    let (hard_label, max_label) = (format!("{display} hard"), format!("{display} max"));
    view! {
        <tr class:refused=k.error.is_some()>
            {key_cell}
            {mode}
            <td data-label="Hard"><input name=hard_name value=k.hard inputmode="decimal" aria-label=hard_label aria-invalid=invalid required=required/>{error}</td>
            <td data-label="Max"><input name=max_name value=k.max inputmode="decimal" aria-label=max_label placeholder="none"/></td>
            <td class="num" data-label=left_label>{left}</td>
        </tr>
    }
}

/// The create-child or edit form; `flash` carries the refusal, naming the
/// key and the amount.
#[cfg(feature = "ssr")]
pub fn render_form_page(viewer: Viewer, f: QuotaForm, flash: Option<Flash>) -> String {
    let csrf = viewer.csrf.clone();
    let (title, action, back, submit) = match &f.editing {
        Some(n) => (
            format!("Edit {n}"),
            format!("/quotas/{n}/edit"),
            format!("/quotas/{n}"),
            "Save",
        ),
        None => (
            format!("New child of {}", f.parent),
            format!("/quotas/{}/children/new", f.parent),
            format!("/quotas/{}", f.parent),
            "Create",
        ),
    };
    let name_field = match &f.editing {
        Some(_) => view! { <input type="hidden" name="resourceVersion" value=f.resource_version.clone()/> }.into_any(),
        None => view! {
            <label>"Name"<input name="name" value=f.name.clone() required pattern="[a-z0-9]([a-z0-9.-]*[a-z0-9])?" maxlength="253" autofocus aria-invalid=f.name_error.is_some().then_some("true")/>
                {f.name_error.clone().map(|e| view! { <small class="field-error" role="alert">{e}</small> })}
            </label>
        }
        .into_any(),
    };
    let confirm = (!f.consequences.is_empty()).then(|| {
        view! {
            <div class="flash error consequences">
                <p>"Saving this would:"</p>
                <ul>{f.consequences.iter().map(|c| view! { <li>{c.clone()}</li> }).collect_view()}</ul>
                <label class="check"><input type="checkbox" name="confirm_lower" value="yes" required/>"I understand; save it anyway"</label>
            </div>
        }
    });
    let budgets = crate::budgets::form_rows(f.budgets);
    // GPUs and budgets first, as on the cards (the default configuration
    // decides what a GPU is here: only the order depends on it).
    let mut keys = f.keys;
    keys.sort_by_cached_key(|k| quota::keys::display_order(&k.key, &quota::KeyConfig::default()));
    let (folded, keys): (Vec<FormKey>, Vec<FormKey>) = keys.into_iter().partition(|k| k.folded);
    let rows = keys.into_iter().map(|k| key_row(k, None)).collect_view();
    // The short form: the rest of the parent's keys folded, each taking
    // the parent's idle room unless chosen otherwise; open when one of
    // them was refused.
    let more = (!folded.is_empty()).then(|| {
        let open = folded.iter().any(|k| k.error.is_some());
        let names: Vec<String> = folded
            .iter()
            .map(|k| if k.name.is_empty() { k.key.clone() } else { k.name.clone() })
            .collect();
        let summary = format!("More keys ({}): {}", folded.len(), names.join(", "));
        let rows = folded.into_iter().map(|k| key_row(k, None)).collect_view();
        view! {
            <details class="more-keys" open=open>
                <summary>{summary}</summary>
                <p class="hint">"Each of these takes the parent's idle room unless you choose: hard 0 and a ceiling of the parent's hard, so the child borrows what its parent and siblings leave idle and gives it back when they need it. Choose none (0) to keep the child off a key, or set amounts of its own."</p>
                <table>
                    <thead><tr><th>"Key"</th><th>"The child takes"</th><th>"Hard"</th><th>"Max (borrowing ceiling)"</th><th>"Left in parent"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </details>
        }
    });
    let extra = f
        .extra
        .into_iter()
        .enumerate()
        .map(|(i, k)| key_row(k, Some(i)))
        .collect_view();
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Tree flash=flash>
                <form class="card quota-form" method="post" action=action>
                    <CsrfField csrf=csrf/>
                    {name_field}
                    <table class="key-form">
                        <thead><tr><th>"Key"</th><th>"Hard"</th><th>"Max (borrowing ceiling)"</th><th>"Left in parent"</th></tr></thead>
                        <tbody>{rows}{extra}</tbody>
                    </table>
                    {more}
                    {budgets}
                    <p class="hint">"* the parent has this key, so the child must carry it. Amounts are Kubernetes quantities (500m, 16Gi, 4); an empty hard drops the key. The server checks the tree rules: a child's hard must fit in what its parent has left."</p>
                    {confirm}
                    <div class="actions"><button type="submit">{submit}</button><a href=back>"Cancel"</a></div>
                </form>
            </Layout>
        }
    })
}

#[cfg(test)]
mod form_tests {
    use super::*;

    #[test]
    fn a_refusal_sits_beside_the_key_it_names() {
        let key = |k: &str| FormKey {
            key: k.into(),
            ..Default::default()
        };
        let mut f = QuotaForm {
            keys: vec![
                key("requests.nvidia.com/gpu"),
                key("requests.nvidia.com/gpu.A100"),
            ],
            ..Default::default()
        };
        f.place_error("requests.nvidia.com/gpu.A100 asks 100, 20 left of 32");
        assert_eq!(f.keys[0].error, None);
        assert!(f.keys[1].error.is_some());
        let mut f = QuotaForm::default();
        f.place_error("the name nlp is taken");
        assert!(f.name_error.is_some());
    }
}
