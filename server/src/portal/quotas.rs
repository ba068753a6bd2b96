//! Quota pages: overview, tree, detail, and the create / edit / delete
//! forms. Reading is authorised here with `authz`; changes go through
//! [`crate::service::quota_ops`], the same authorised and audited path as the JSON API,
//! and the service checks the tree rules. A refused form comes back with
//! the service's message, which names the key and the amount.

use super::auth::Viewer;
use super::PageError;
use crate::authz::{self, Role, Tree};
use crate::edge::AppState;
use crate::service::quota_ops::{self, ChangeError};
use crate::service::ServiceError;
use app::chart_section::{self, Charts};
use app::charts;
use app::layout::Flash;
use app::quotas::{
    FormKey, KeyDetail, OverviewCard, QuotaDetail, QuotaForm, WorkloadRow, EXTRA_ROWS, ROWS_SHOWN,
};
use app::{generic_key, key_usages, TreeFilter, TreeQuery, TreeSort};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use quota::keys::cash_target;
use quota::rollup::subtree_in_use;
use quota::series::Range;
use quota::{resources, KeyConfig, Quantity, Quota, QuotaSpec, ResourceList};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The detail page's query: `?range=24h|7d|30d|90d|1y` for the charts.
#[derive(Deserialize, Default)]
pub struct DetailParams {
    #[serde(default)]
    range: String,
}

/// One line per cash key of `q`: what is left and when it runs out, from
/// its one forecast (`quota::forecast::outlook`).
fn forecasts(outlooks: &[quota::forecast::Outlook], cfg: &KeyConfig) -> Vec<String> {
    outlooks
        .iter()
        .map(|o| charts::describe_outlook(o, cfg))
        .collect()
}

/// `2 A100 GPUs, 8 CPU cores, 64 GiB memory, 1 pod`: amounts in words,
/// GPUs first, on the keys `q` limits (a workload's aliases such as `cpu`
/// beside `requests.cpu`, and the keys nothing here counts, left out; all
/// of it, in words, where none is limited); the exact amounts and raw keys
/// are in the JSON API.
fn list_line(l: &ResourceList, q: &Quota, cfg: &KeyConfig) -> String {
    let counted = |(k, v): (&String, &Quantity)| {
        (!v.is_zero() && cash_target(k).is_none()).then(|| (k.clone(), *v))
    };
    let limited: ResourceList = l
        .iter()
        .filter(|(k, _)| q.spec.hard.contains_key(*k))
        .filter_map(counted)
        .collect();
    let shown = if limited.is_empty() {
        l.iter().filter_map(counted).collect()
    } else {
        limited
    };
    app::queue::needs_words(&shown, cfg)
}

/// A child's hard as its row in the children table: keys by name, GPUs and
/// budgets first (`quota::keys::display_order`), zero amounts left out,
/// each raw key in the page's keys table and the JSON API:
/// `A100 GPUs 32 · GPU card-hours 11,000 card-hours · CPU cores 96`.
fn hard_line(l: &ResourceList, cfg: &KeyConfig) -> String {
    let mut keys: Vec<(&String, &Quantity)> = l.iter().filter(|(_, v)| !v.is_zero()).collect();
    keys.sort_by_cached_key(|(k, _)| quota::keys::display_order(k, cfg));
    keys.into_iter()
        .map(|(k, v)| {
            format!(
                "{} {}",
                app::key_name(k, cfg),
                quota::readable::amount(k, *v)
            )
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A form's prefill: exact and parseable, in the shorter of its own and the
/// binary form (`1Ti`, not `1099511627776`).
fn prefill(q: &Quantity) -> String {
    let own = q.to_string();
    let binary = q.with_format(quota::quantity::Format::BinarySi).to_string();
    if binary.len() < own.len() {
        binary
    } else {
        own
    }
}

/// The overview's cards: the viewer's bound quotas with its role, or the
/// roots for an admin (also what `/api/v1/live/overview` redraws).
pub fn my_quotas<'a, Q: std::borrow::Borrow<Quota>>(
    all: &'a [Q],
    p: &authz::Principal,
) -> Vec<(&'a Quota, String)> {
    let names: BTreeSet<&str> = all.iter().map(|q| q.borrow().name()).collect();
    if p.is_admin {
        all.iter()
            .map(|q| q.borrow())
            .filter(|q| !names.contains(q.spec.parent.as_str()))
            .map(|q| (q, "admin".to_string()))
            .collect()
    } else {
        let roles: BTreeMap<&str, Role> = p
            .bindings
            .iter()
            .map(|b| (b.quota.as_str(), b.role))
            .collect();
        all.iter()
            .map(|q| q.borrow())
            .filter_map(|q| roles.get(q.name()).map(|r| (q, r.to_string())))
            .collect()
    }
}

/// What the overview shows that changes, read once for the page and for
/// its island (`/api/v1/live/overview`): the quotas the viewer may see with
/// their subtree use, the transfers awaiting the viewer, what needs
/// someone.
pub struct OverviewData {
    /// As of the request's `now`: the budgeted quotas copied and accrued,
    /// the rest shared with the kept forest.
    pub forest: std::sync::Arc<crate::service::working::Accrued>,
    pub awaiting_me: usize,
    pub attention: Vec<app::attention::Item>,
}

pub async fn overview_data(
    app: &AppState,
    p: &authz::Principal,
    place: &crate::heavy::Permit,
    w: &crate::service::working::Working,
) -> Result<OverviewData, ServiceError> {
    let forest = quota_ops::visible_forest_on(&app.service, p, place).await?;
    // As of the request's `now` (`service::working`), as the quota pages
    // and `/tree` show them: on the render threads.
    let copies = w.clone();
    let forest = place
        .work(move || std::sync::Arc::new(copies.accrued(forest)))
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    // From the quotas already read: no second list of the tree (an admin
    // needs none: it decides every request).
    let scope = (!p.is_admin).then(|| {
        let quotas = forest.quotas().into_iter().cloned().collect();
        crate::service::transfer_ops::Scope::of(quotas)
    });
    let awaiting_me = app
        .transfer_desk()
        .awaiting(p, scope.as_ref())
        .await
        .map(|ids| ids.len())
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not count the transfers awaiting the viewer");
            0
        });
    let attention = app::attention::items(
        &forest.quotas(),
        forest.as_ref(),
        &app.service.keys,
        &w.pricing(),
    );
    Ok(OverviewData {
        forest,
        awaiting_me,
        attention,
    })
}

/// GET / — the viewer's quotas (their bindings', or the roots for an
/// admin) with usage, card-hour burn and forecasts.
pub async fn overview(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    // Its cost grows with the visible forest: a heavy request's place.
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let p = &viewer.principal;
    let w = app.service.working(app.service.now());
    let data = overview_data(&app, p, &place, &w).await?;
    let all = data.forest.quotas();
    let pricing = w.pricing();
    let mine = my_quotas(&all, p);
    let family = cards_family(&app.service, mine.iter().map(|(q, _)| *q)).await?;
    let mut cards = Vec::new();
    for (q, role) in mine {
        let in_use = data.forest.in_use_of(q.name());
        cards.push(OverviewCard {
            name: q.name().to_string(),
            role,
            strip: card_strip(q, in_use, family.as_deref(), &pricing, &app.service.keys),
            keys: key_usages(q, in_use, &app.service.keys),
            workloads: q.status.workloads.len(),
            children: all.iter().filter(|c| c.spec.parent == q.name()).count(),
            forecasts: forecasts(&quota::forecast::outlooks(q, &pricing), &app.service.keys),
        });
    }
    // The queues' budget reasons restated as of `now`: CPU that grows
    // with the queues shown, on the render threads.
    let linked = app.portal.sql.kube_usernames().await?;
    let queued = {
        let (forest, p, w, cfg) = (
            data.forest.clone(),
            p.clone(),
            w.clone(),
            app.service.keys.clone(),
        );
        place
            .work(move || queued_in_my_quotas(&forest.quotas(), &p, &w, &cfg, &linked))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
    };
    // GPUs held idle on what the viewer may see, where real usage is read.
    let idle = {
        let readings = app.portal.sql.real_usage_state().await?;
        let rows = crate::efficiency::idle_now(&app.portal.sql, &app.service, &all).await?;
        let unknown = readings.unknown_since(w.now(), crate::efficiency::STALE_MS);
        let read = readings.known_to_ms.is_some() || readings.down_since_ms.is_some();
        (read || !rows.is_empty()).then(|| {
            (
                rows.iter()
                    .map(|(i, pol)| super::efficiency::idle_row(i, pol))
                    .collect(),
                super::efficiency::unknown_words(&readings, unknown),
            )
        })
    };
    let flash = viewer.take_flash().await;
    Ok(Html(app::quotas::render_overview_page(
        viewer.page(),
        cards,
        super::alerts::open_for(&app, p).await?,
        app::quotas::OverviewLists {
            awaiting_me: data.awaiting_me,
            attention: data.attention,
            queued,
            idle,
        },
        flash,
    ))
    .into_response())
}

#[derive(Deserialize, Default)]
pub struct TreeParams {
    #[serde(default)]
    q: String,
    #[serde(default)]
    filter: String,
    #[serde(default)]
    under: Option<String>,
    #[serde(default)]
    depth: Option<usize>,
    #[serde(default)]
    sort: String,
    /// Quotas opened below the fold, comma-separated.
    #[serde(default)]
    open: String,
    /// Quotas folded above it.
    #[serde(default)]
    closed: String,
}

/// GET /tree — the quotas the viewer may see, searchable and filterable.
pub async fn tree(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(t): Query<TreeParams>,
) -> Result<Response, PageError> {
    // A heavy request (`crate::heavy`): the whole visible forest.
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    let w = app.service.working(app.service.now());
    // What the viewer may see holds every descendant of what it shows, so
    // each subtree's usage is whole.
    let forest = quota_ops::visible_forest_on(&app.service, &viewer.principal, &place).await?;
    let query = TreeQuery {
        search: t.q,
        filter: TreeFilter::parse(&t.filter),
        under: t.under.filter(|u| !u.is_empty() && u.len() <= 253),
        depth: t.depth,
        sort: TreeSort::parse(&t.sort),
        open: TreeQuery::names(&t.open),
        closed: TreeQuery::names(&t.closed),
    };
    let (page, cfg, pricing) = (viewer.page(), app.service.keys.clone(), w.pricing());
    let html = place
        .render(move || {
            // As of the request's `now`, as the quota pages show them:
            // the budgeted quotas copied, the rest shared.
            let forest = w.accrued(forest);
            app::render_tree_page(page, &forest.quotas(), &forest, &cfg, &pricing, query)
        })
        .await?;
    Ok(Html(html).into_response())
}

/// `visible_tree`, and the quota with the version its edit form names
/// (that very version in the quotas returned too, so the page shows the
/// quota its form edits).
async fn visible_quota(
    app: &AppState,
    viewer: &Viewer,
    name: &str,
) -> Result<(Quota, i64, Vec<Quota>, Tree), PageError> {
    let (mut all, tree) = super::scope::visible_tree(app, viewer, name).await?;
    let stored = app.service.get_for_view(name).await?;
    if let Some(q) = all.iter_mut().find(|q| q.name() == name) {
        q.clone_from(&stored.quota);
    }
    Ok((stored.quota, stored.version, all, tree))
}

/// Each quota's subtree use (Σ `selfUsed` of it and its descendants).
type SubtreeUse = BTreeMap<String, ResourceList>;

/// A page's quotas as of the request's one `now` (`service::working`):
/// the quota `name` and its descendants — every quota whose figures the
/// page shows: its own, its children's — accrued, and their subtree use
/// (spending included) summed from those same copies, on the render
/// threads, never the runtime's. The rest of what the viewer may see (a
/// member bound at a forest's root who opens a leaf reads the whole
/// forest for its names, specs and rights) is left as stored, not copied
/// nor accrued, and has no subtree use here. The quota `name` among them.
async fn working_page(
    place: &crate::heavy::Permit,
    w: &crate::service::working::Working,
    all: Vec<Quota>,
    name: &str,
) -> Result<(Quota, Vec<Quota>, SubtreeUse), PageError> {
    let (w, at) = (w.clone(), name.to_string());
    place
        .work(move || page_copies(&w, all, &at))
        .await
        .map_err(PageError::from)
        .and_then(|(q, all, in_use)| match q {
            Some(q) => Ok((q, all, in_use)),
            None => Err(PageError::NotFound(format!("bizrq {name} not found"))),
        })
}

/// `working_page`'s CPU part: `name` and its descendants copied and
/// accrued, their subtree use summed; the rest of `all` as read, after.
fn page_copies(
    w: &crate::service::working::Working,
    all: Vec<Quota>,
    name: &str,
) -> (Option<Quota>, Vec<Quota>, SubtreeUse) {
    let below = subtree_names(&all, name);
    // Split in place, each part in the order read (children stay in their
    // order).
    let (shown, rest): (Vec<Quota>, Vec<Quota>) =
        all.into_iter().partition(|q| below.contains(q.name()));
    let shown = w.quotas(shown);
    let in_use = subtree_in_use(&shown);
    let q = shown.iter().find(|q| q.name() == name).cloned();
    let mut all = shown;
    all.extend(rest);
    (q, all, in_use)
}

/// `name` and every quota below it in `all` (a cycle ends a walk).
fn subtree_names(all: &[Quota], name: &str) -> BTreeSet<String> {
    let mut kids: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for q in all {
        kids.entry(q.spec.parent.as_str())
            .or_default()
            .push(q.name());
    }
    let mut out = BTreeSet::from([name.to_string()]);
    let mut next = vec![name];
    while let Some(at) = next.pop() {
        for c in kids.get(at).into_iter().flatten() {
            if out.insert(c.to_string()) {
                next.push(c);
            }
        }
    }
    out
}

/// The first `at_most` of the workloads bound to `q`, in words.
fn workload_rows(q: &Quota, at_most: usize, cfg: &KeyConfig) -> Vec<WorkloadRow> {
    q.status
        .workloads
        .iter()
        .take(at_most)
        .map(|(reference, c)| WorkloadRow {
            reference: reference.clone(),
            pod_sets: c
                .pod_sets
                .iter()
                .map(|s| {
                    format!(
                        "{}: {} × ({})",
                        s.name,
                        c.charged_count(s),
                        list_line(&s.per_pod, q, cfg)
                    )
                })
                .collect(),
            charge: list_line(&c.usage(), q, cfg),
            since: quota::time::format_stamp(&c.since),
        })
        .collect()
}

/// Borrowing, fair sharing, loans, reclaim marks and transfers in flight,
/// amounts in words (`A100 GPUs` · `4`, not `requests.nvidia.com/gpu.A100`
/// · `4`).
fn extras(q: &Quota, cfg: &KeyConfig) -> Vec<(String, Vec<(String, String)>)> {
    let st = &q.status;
    let mut out = Vec::new();
    let amounts = |l: &ResourceList| {
        let mut keys: Vec<(&String, &Quantity)> = l.iter().filter(|(_, v)| !v.is_zero()).collect();
        keys.sort_by_cached_key(|(k, _)| quota::keys::display_order(k, cfg));
        keys.into_iter()
            .map(|(k, v)| (app::key_name(k, cfg), app::display_quantity(k, *v, cfg)))
            .collect::<Vec<_>>()
    };
    let list_line = |l: &ResourceList| list_line(l, q, cfg);
    let borrowed = amounts(&st.borrowed);
    if !borrowed.is_empty() {
        out.push(("Borrowed beyond hard".to_string(), borrowed));
    }
    // Fair sharing of the parent's idle capacity (docs/queueing.md §11).
    if !q.spec.max.is_empty() && !q.spec.parent.is_empty() {
        let mut rows = vec![("weight".to_string(), q.spec.fair_sharing.weight.to_string())];
        if let Some(f) = &st.fair_sharing {
            let of = if f.dominant.is_empty() {
                String::new()
            } else {
                format!(" (of {})", f.dominant)
            };
            rows.push(("share".to_string(), format!("{}{of}", f.share)));
        }
        out.push(("Fair sharing".to_string(), rows));
    }
    let lent = amounts(&st.lent);
    if !lent.is_empty() {
        out.push(("Lent to children".to_string(), lent));
    }
    if !st.loans.is_empty() {
        let loans = st
            .loans
            .iter()
            .map(|(child, l)| {
                (
                    child.clone(),
                    format!(
                        "{} since {}",
                        list_line(&l.amount),
                        quota::time::format_stamp(&l.since)
                    ),
                )
            })
            .collect();
        out.push(("Loans".to_string(), loans));
    }
    if !st.reclaim.is_empty() {
        let marks = st
            .reclaim
            .iter()
            .map(|(w, m)| {
                let what = match m.action {
                    quota::Action::ScaleTo(n) => format!("scale to {n}"),
                    quota::Action::Suspend => "suspend".to_string(),
                };
                (
                    w.clone(),
                    format!("{what} (frees {}) at {}", list_line(&m.frees), m.due),
                )
            })
            .collect();
        out.push(("Marked for reclaim".to_string(), marks));
    }
    if !st.transfers.is_empty() {
        let holds = st
            .transfers
            .iter()
            .map(|(id, h)| {
                let children: Vec<&str> = h.children.keys().map(String::as_str).collect();
                (
                    id.clone(),
                    format!(
                        "holds {} since {}",
                        children.join(", "),
                        quota::time::format_stamp(&h.since)
                    ),
                )
            })
            .collect();
        out.push(("Transfers in flight".to_string(), holds));
    }
    out
}

/// Model breakdowns: one chart per generic (non-cash) key of hard that has
/// model keys in hard or in what the bound workloads hold.
/// What runs of each model in `q`'s whole subtree (`in_use`), never what
/// a parent carved out for its children. The GPUs' (`quota::keys::leads`)
/// first, then the others' (CPU, memory), which the page folds below.
fn breakdowns(q: &Quota, in_use: &ResourceList, cfg: &KeyConfig) -> (Vec<String>, Vec<String>) {
    let mut used = q.status.self_usage();
    used.extend(in_use.iter().map(|(k, v)| (k.clone(), *v)));
    let generics: BTreeSet<String> = q
        .spec
        .hard
        .keys()
        .chain(used.keys())
        .filter(|k| cash_target(k).is_none())
        .filter_map(|k| generic_key(k, cfg))
        .filter(|g| q.spec.hard.contains_key(g))
        .collect();
    // GPUs first, as everywhere.
    let mut generics: Vec<String> = generics.into_iter().collect();
    generics.sort_by_cached_key(|g| quota::keys::display_order(g, cfg));
    let (lead, rest): (Vec<String>, Vec<String>) = generics
        .into_iter()
        .partition(|g| quota::keys::leads(g, cfg));
    let draw = |g: &String| {
        let title = charts::model_breakdown_title(&used, &q.spec.hard, g, cfg);
        format!(
            "<figcaption>{}</figcaption>{}",
            app::layout::escape_text(&title),
            charts::model_breakdown_chart(&used, &q.spec.hard, g, cfg, charts::NARROW)
        )
    };
    (
        lead.iter().map(draw).collect(),
        rest.iter().map(draw).collect(),
    )
}

/// GET /quotas/{name} — a heavy request (`crate::heavy`): it takes a
/// place before reading, and draws its charts and renders on the render
/// threads.
pub async fn detail(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(params): Query<DetailParams>,
) -> Result<Response, PageError> {
    let range = Range::parse(&params.range).map_err(PageError::Invalid)?;
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    // One `now` and one copy of each quota for every figure of the page.
    let w = app.service.working(app.service.now());
    let now = w.now();
    let (q, version, all, tree) = visible_quota(&app, &viewer, &name).await?;
    // A page of many keys holds the folded samples of each while it
    // draws: it counts as several heavy requests (docs/limits.md).
    place.widen(crate::heavy::page_places(
        q.spec.hard.len(),
        range == Range::Day,
    ))?;
    let (q, all, subtree_use) = working_page(&place, &w, all, &name).await?;
    let in_use = subtree_use.get(&name).cloned().unwrap_or_default();
    let p = &viewer.principal;
    let cfg = app.service.keys.clone();
    // The children chart of each key the page draws stacks that key's
    // busiest children, as its range switch (the samples API) does.
    let kids_keys = crate::service::charts::children_keys(&q, &cfg, |k| {
        chart_section::leads(k, chart_section::Kind::Children, &cfg)
    });
    let gathered = crate::service::charts::gather(
        &app.portal.sql,
        &place,
        (&all, &subtree_use),
        &q,
        (range, now),
        crate::service::charts::Children::ByKeys(&kids_keys),
        None,
    )
    .await?;
    // A child that may borrow: its share of what this quota can lend,
    // against its fair line (docs/queueing.md §11).
    let lendable = quota::fair::lendable(&q);
    let weights: u64 = all
        .iter()
        .filter(|c| c.spec.parent == name && !c.spec.max.is_empty())
        .map(|c| u64::from(c.spec.fair_sharing.weight.milli()))
        .sum();
    let mut children: Vec<(String, String)> = all
        .iter()
        .filter(|c| c.spec.parent == name)
        .map(|c| {
            let hard = hard_line(&c.spec.hard, &cfg);
            let line = match quota::fair::against_line(c, &lendable, weights) {
                Some(w) => format!("{hard} · {w}"),
                None => hard,
            };
            (c.name().to_string(), line)
        })
        .collect();
    let children_more = children.len().saturating_sub(ROWS_SHOWN);
    children.truncate(ROWS_SHOWN);
    let has_children = !children.is_empty();
    let may_delete = authz::can_delete(p, &name, &tree);
    let members = app
        .portal
        .sql
        .bindings_on(&name)
        .await?
        .into_iter()
        .map(|(user, role)| {
            let removable = authz::can_grant(p, &name, role, &tree);
            (user.username, role.as_str().to_string(), removable)
        })
        .collect();
    let pricing = w.pricing();
    let budgets = super::budgets::lines(&app, &q, &in_use, &pricing).await?;
    // Allocated against used in its subtree over the page's range, its
    // ancestors read for the idle policy they pass down.
    let efficiency = {
        let above = crate::efficiency::ancestors_missing(&app.service, all.iter()).await?;
        let quotas: Vec<Quota> = all.iter().cloned().chain(above).collect();
        let e = crate::efficiency::gather(&app.portal.sql, &quotas, &name, range, now).await?;
        (super::efficiency::section(&e), e.panel(&cfg))
    };
    let (efficiency, efficiency_panel) = efficiency;
    let outlooks = quota::forecast::outlooks(&q, &pricing);
    // Its parent and siblings, for what it could borrow now.
    let family = app.service.family_of(&q).await?;
    let page = viewer.page();
    let flash = viewer.take_flash().await;
    let d = QuotaDetail {
        parent: q.spec.parent.clone(),
        strip: Vec::new(),
        keys: Vec::new(),
        breakdowns: Vec::new(),
        other_breakdowns: Vec::new(),
        extras: Vec::new(),
        workloads: Vec::new(),
        workloads_more: q.status.workloads.len().saturating_sub(ROWS_SHOWN),
        forecasts: Vec::new(),
        charts: Charts::default(),
        other_charts: Vec::new(),
        resource_version: version.to_string(),
        can_edit: authz::can_edit_hard(p, &name, &tree),
        can_create_child: authz::can_manage_children(p, &name, &tree),
        can_delete: may_delete && !has_children,
        delete_blocked: may_delete && has_children,
        members,
        can_invite_member: authz::can_grant(p, &name, Role::Member, &tree),
        can_invite_owner: authz::can_grant(p, &name, Role::Owner, &tree),
        budgets,
        queue: None,
        efficiency,
        children,
        children_more,
        name,
    };
    drop(all);
    // What grows with the quota's keys, samples and workloads, drawn off
    // the runtime's threads.
    let html = place
        .render(move || {
            let (mut d, mut q) = (d, q);
            let (parent, siblings) = crate::service::forest::family_in(family.as_deref(), &q);
            // Its budget reasons as of the page's `now`, as its budgets box.
            w.restate_budget_reasons(&mut q, parent, &siblings);
            d.queue = queue_section(&q, now, &cfg);
            // One set of rows for the keys table and the line under the
            // name: one free now and one borrowable now on the page.
            let rows = rows_now(&q, &in_use, (parent, &siblings), now);
            d.keys = key_details(&q, &in_use, &rows, &cfg);
            d.strip =
                app::quotas::strip_words(&quota::strip::parts(&q, &rows, &outlooks, &cfg), &cfg);
            (d.breakdowns, d.other_breakdowns) = breakdowns(&q, &in_use, &cfg);
            d.extras = extras(&q, &cfg);
            d.workloads = workload_rows(&q, ROWS_SHOWN, &cfg);
            d.forecasts = forecasts(&outlooks, &cfg);
            let inputs = chart_section::Inputs {
                own: &gathered.own,
                live: &gathered.live,
                children: &gathered.children,
                children_omitted: gathered.children_omitted,
                stacks: &gathered.stacks,
                range,
                now_ms: now,
                cfg: &cfg,
                outlooks: &outlooks,
            };
            // GPUs and budgets drawn here; the other keys a link away.
            d.other_charts = chart_section::other_keys(&inputs)
                .into_iter()
                .map(|(k, usage_drawn)| {
                    let name = app::key_name(&k, &cfg);
                    let name = if usage_drawn {
                        format!("{name} by child")
                    } else {
                        name
                    };
                    (k, name)
                })
                .collect();
            let mut panels =
                chart_section::panels_of(&inputs, |k, kind| chart_section::leads(k, kind, &cfg));
            // Allocated against busy joins the grid after the GPUs' own
            // charts, before the budgets'.
            if let Some(p) = efficiency_panel {
                let at = panels
                    .iter()
                    .position(|p| quota::keys::cash_target(&p.key).is_some())
                    .unwrap_or(panels.len());
                panels.insert(at, p);
            }
            d.charts = Charts {
                quota: q.name().to_string(),
                range,
                panels,
                query: String::new(),
            };
            app::quotas::render_detail_page(page, d, flash)
        })
        .await?;
    Ok(Html(html).into_response())
}

/// The charts page's query: `?key=` (empty: every key the quota page
/// does not draw) and `?range=`.
#[derive(Deserialize, Default)]
pub struct ChartsParams {
    #[serde(default)]
    key: String,
    #[serde(default)]
    range: String,
}

/// GET /quotas/{name}/charts — the charts of one key, or of every key the
/// quota page links rather than draws (`chart_section::leads`): a heavy
/// request, authorised as the quota page.
pub async fn charts_page(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(params): Query<ChartsParams>,
) -> Result<Response, PageError> {
    let range = Range::parse(&params.range).map_err(PageError::Invalid)?;
    let key = params.key.trim().to_string();
    if key.len() > 253 || quota::text::hostile_char(&key).is_some() {
        return Err(PageError::Invalid(
            "key: at most 253 characters, no control or bidi characters".into(),
        ));
    }
    let place = app.portal.heavy.enter(&viewer.principal.username)?;
    // The quota page's one `now` and copies, so the two pages agree.
    let w = app.service.working(app.service.now());
    let now = w.now();
    let (q, _, all, _) = visible_quota(&app, &viewer, &name).await?;
    // Every key's charts at once weigh as the quota page does.
    place.widen(crate::heavy::page_places(
        if key.is_empty() { q.spec.hard.len() } else { 1 },
        range == Range::Day,
    ))?;
    let (q, all, subtree_use) = working_page(&place, &w, all, &name).await?;
    let cfg = app.service.keys.clone();
    // Every other key's children chart stacks that key's busiest
    // children, as its range switch does.
    let kids_keys = crate::service::charts::children_keys(&q, &cfg, |k| {
        !chart_section::leads(k, chart_section::Kind::Children, &cfg)
    });
    let gathered = crate::service::charts::gather(
        &app.portal.sql,
        &place,
        (&all, &subtree_use),
        &q,
        (range, now),
        if key.is_empty() {
            crate::service::charts::Children::ByKeys(&kids_keys)
        } else {
            crate::service::charts::Children::ByKey(&key)
        },
        (!key.is_empty()).then_some(key.as_str()),
    )
    .await?;
    drop(all);
    let outlooks = quota::forecast::outlooks(&q, &w.pricing());
    let page = viewer.page();
    let html = place
        .render(move || {
            let inputs = chart_section::Inputs {
                own: &gathered.own,
                live: &gathered.live,
                children: &gathered.children,
                children_omitted: gathered.children_omitted,
                stacks: &gathered.stacks,
                range,
                now_ms: now,
                cfg: &cfg,
                outlooks: &outlooks,
            };
            let (what, query, panels) = if key.is_empty() {
                (
                    "other keys' charts".to_string(),
                    String::new(),
                    chart_section::panels_of(&inputs, |k, kind| {
                        !chart_section::leads(k, kind, &cfg)
                    }),
                )
            } else {
                (
                    format!("{} charts", app::key_name(&key, &cfg)),
                    format!("key={}&", app::layout::encode_component(&key)),
                    chart_section::panels_of(&inputs, |k, _| k == key),
                )
            };
            let charts = Charts {
                quota: q.name().to_string(),
                range,
                panels,
                query,
            };
            app::quotas::render_charts_page(page, q.name().to_string(), what, charts)
        })
        .await?;
    Ok(Html(html).into_response())
}

/// The key rows of a quota's page: its bars, with what is allocated, free
/// and borrowable now (`quota::rollup`, with its parent and siblings for
/// what it could borrow), its own use and its max.
fn key_details(
    q: &Quota,
    in_use: &ResourceList,
    rolled: &[quota::rollup::KeyRollup],
    cfg: &KeyConfig,
) -> Vec<KeyDetail> {
    let allocated = q.status.allocated();
    key_usages(q, in_use, cfg)
        .into_iter()
        .map(|u| {
            let r = rolled.iter().find(|r| r.key == u.key);
            let show = |n: Option<Quantity>| {
                n.map(|n| app::display_quantity(&u.key, n, cfg))
                    .unwrap_or_default()
            };
            KeyDetail {
                allocated: if u.cash {
                    String::new()
                } else {
                    app::display_quantity(&u.key, resources::get(&allocated, &u.key), cfg)
                },
                allocated_nanos: (!u.cash).then(|| resources::get(&allocated, &u.key).nanos()),
                free_now: show(r.map(|r| r.free_now)),
                free_now_nanos: r.map(|r| r.free_now.nanos()),
                borrowable_now: show(
                    r.filter(|_| q.spec.max.contains_key(&u.key))
                        .map(|r| r.borrowable_now),
                ),
                borrowable_now_nanos: r
                    .filter(|_| q.spec.max.contains_key(&u.key))
                    .map(|r| r.borrowable_now.nanos()),
                self_used: app::display_quantity(
                    &u.key,
                    resources::get(&q.status.self_used, &u.key),
                    cfg,
                ),
                self_used_nanos: resources::get(&q.status.self_used, &u.key).nanos(),
                max: q
                    .spec
                    .max
                    .get(&u.key)
                    .map(|m| app::display_quantity(&u.key, *m, cfg)),
                max_nanos: q.spec.max.get(&u.key).map(|m| m.nanos()),
                usage: u,
            }
        })
        .collect()
}

/// The rows of `q`'s keys as its page's keys table and its one line read
/// them: `quota::rollup` of its subtree use `in_use`, with what it could
/// borrow now from its parent and siblings (`family`).
fn rows_now(
    q: &Quota,
    in_use: &ResourceList,
    family: (Option<&Quota>, &[&Quota]),
    now: i64,
) -> Vec<quota::rollup::KeyRollup> {
    quota::rollup::with_borrowing(q, quota::rollup::rollup(q, in_use), family.0, family.1, now)
}

/// The forest the cards of `quotas` read their borrowing from, as the
/// quota page does (`Service::family_of`): none when none of them borrows.
pub async fn cards_family<'a>(
    service: &crate::service::Service,
    mut quotas: impl Iterator<Item = &'a Quota>,
) -> Result<Option<std::sync::Arc<crate::service::forest::Forest>>, ServiceError> {
    match quotas.find(|q| !q.spec.max.is_empty()) {
        Some(q) => service.family_of(q).await,
        None => Ok(None),
    }
}

/// A card's one line (`quota::strip`): its keys' rows as its page reads
/// them (`rows_now`) and its budgets' one forecast, in words.
pub fn card_strip(
    q: &Quota,
    in_use: &ResourceList,
    family: Option<&crate::service::forest::Forest>,
    pricing: &quota::forecast::Pricing,
    cfg: &KeyConfig,
) -> Vec<String> {
    let (parent, siblings) = crate::service::forest::family_in(family, q);
    let rows = rows_now(q, in_use, (parent, &siblings), pricing.now_ms);
    let outlooks = quota::forecast::outlooks(q, pricing);
    app::quotas::strip_words(&quota::strip::parts(q, &rows, &outlooks, cfg), cfg)
}

/// The quota's queue for its page: None for a quota that refuses and
/// holds no queued work.
fn queue_section(
    q: &Quota,
    now: i64,
    cfg: &quota::KeyConfig,
) -> Option<(String, Vec<app::queue::QueueRow>, usize)> {
    use crate::service::queue as words;
    if !q.spec.queueing.queues() && q.status.queue.is_empty() {
        return None;
    }
    let rows = (0..q.status.queue.len())
        .map(|i| queue_row(q, i, now, cfg))
        .collect();
    Some((words::policy_words(&q.spec.queueing), rows, unlisted(q)))
}

/// How many wait in `q`'s queue beyond the entries its status lists (with
/// queue marks on it lists the head, `quota::queue::summary`).
fn unlisted(q: &Quota) -> usize {
    quota::queue::summary::waiting(&q.status.queue, q.status.queue_summary.as_ref())
        .saturating_sub(q.status.queue.len())
}

/// Entry `i` of `q`'s queue as the quota page and the overview show it.
fn queue_row(q: &Quota, i: usize, now: i64, cfg: &quota::KeyConfig) -> app::queue::QueueRow {
    use crate::service::queue as words;
    let e = &q.status.queue[i];
    app::queue::QueueRow {
        // Entries that joined since the last round have no place yet:
        // they are shown after the others, in the order they joined.
        position: if e.position > 0 {
            e.position
        } else {
            u32::try_from(i + 1).unwrap_or(u32::MAX)
        },
        workload: e.work.workload_ref.clone(),
        priority: words::priority_words(&e.work),
        needs: app::queue::needs_words(&words::needs(q, &e.work), cfg),
        // The stored reason names raw keys (the API and `kubectl` keep
        // them); the page names them in words.
        reason: quota::keys::with_names(&e.reason, q.spec.hard.keys().map(String::as_str), cfg),
        waiting: format!("{:?}", e.waiting),
        since: words::ago(now, e.work.submitted_ms),
        since_exact: quota::time::format_when(e.work.submitted_ms),
        estimate: words::estimate_words(&q.status.queue, i),
    }
}

/// Rows the overview lists at most in "Queued in your quotas".
pub const OVERVIEW_QUEUED: usize = 50;

/// The overview's queued work (docs/queueing.md §7): the entries waiting in
/// the quotas the viewer holds a role on and, for an owner, every quota
/// of the subtree it owns (its teams' queues; every visible quota for an
/// admin), by quota then place, at most `OVERVIEW_QUEUED`, and how many
/// more. Each row says who submitted it as the API server named them, and
/// the portal user that name is linked to (`linked`: Kubernetes username →
/// portal username; docs/oidc.md "One name from kubectl to the portal").
pub(crate) fn queued_in_my_quotas(
    all: &[&Quota],
    p: &authz::Principal,
    w: &crate::service::working::Working,
    cfg: &quota::KeyConfig,
    linked: &HashMap<String, String>,
) -> (Vec<app::queue::WaitingRow>, usize) {
    let now = w.now();
    let bound: BTreeSet<&str> = p.bindings.iter().map(|b| b.quota.as_str()).collect();
    let owns = p.bindings.iter().any(|b| b.role == authz::Role::Owner);
    // Only an owner's view needs the tree: what it owns below its bindings.
    let tree = (owns && !p.is_admin).then(|| Tree::from_quotas(all.iter().copied()));
    let mine = |q: &Quota| {
        p.is_admin
            || bound.contains(q.name())
            || tree
                .as_ref()
                .is_some_and(|t| authz::role_on(p, q.name(), t) == Some(authz::Role::Owner))
    };
    let mut rows = Vec::new();
    let mut more = 0usize;
    let queued: Vec<&Quota> = all
        .iter()
        .copied()
        .filter(|q| !q.status.queue.is_empty() && mine(q))
        .collect();
    if queued.is_empty() {
        return (rows, more);
    }
    let by_name: HashMap<&str, &Quota> = all.iter().map(|q| (q.name(), *q)).collect();
    let mut kids: HashMap<&str, Vec<&Quota>> = HashMap::new();
    for &q in all {
        kids.entry(q.spec.parent.as_str()).or_default().push(q);
    }
    for q in queued {
        // Past what the overview lists: counted, not restated.
        more += unlisted(q);
        if rows.len() >= OVERVIEW_QUEUED {
            more += q.status.queue.len();
            continue;
        }
        // Budget reasons as of the page's `now` (its quota's page says
        // the same).
        let mut q = q.clone();
        let parent = by_name.get(q.spec.parent.as_str()).copied();
        let siblings: &[&Quota] = match parent {
            Some(_) => kids.get(q.spec.parent.as_str()).map_or(&[], Vec::as_slice),
            None => &[],
        };
        w.restate_budget_reasons(&mut q, parent, siblings);
        let q = &q;
        for i in 0..q.status.queue.len() {
            if rows.len() >= OVERVIEW_QUEUED {
                more += 1;
                continue;
            }
            rows.push(app::queue::WaitingRow {
                quota: q.name().to_string(),
                row: queue_row(q, i, now, cfg),
                submitted_by: q.status.queue[i]
                    .work
                    .submitted_by
                    .as_deref()
                    .map(|k| crate::identity::kube_name::shown(linked, k))
                    .unwrap_or_else(|| "unknown".into()),
            });
        }
    }
    (rows, more)
}

/// What is left in `parent` of each key (hard − used), for the form's
/// hints, as people read amounts (`5,740 card-hours`, not nano-units).
fn left_in(parent: Option<&Quota>, key: &str, cfg: &KeyConfig) -> Option<String> {
    quota::admission::left(parent?, key).map(|l| app::display_quantity(key, l, cfg))
}

fn blank_extra() -> Vec<FormKey> {
    vec![FormKey::default(); EXTRA_ROWS]
}

/// A submitted form: what to render again, and the spec it asks for (or
/// why it cannot be read).
struct Submitted {
    form: QuotaForm,
    spec: Result<QuotaSpec, String>,
    version: Option<i64>,
    /// Whether the form named `queueing`; an edit without it keeps the
    /// quota's (a form that does not show it must not switch it off).
    queueing_given: bool,
}

/// Reads `hard:KEY`, `max:KEY`, `newkey:N` / `newhard:N` / `newmax:N`,
/// `name` and `resourceVersion`. An empty hard drops the key.
fn read_form(
    fields: Vec<(String, String)>,
    mut form: QuotaForm,
    parent: Option<&Quota>,
    cfg: &KeyConfig,
) -> Submitted {
    let mut hard: BTreeMap<String, String> = BTreeMap::new();
    let mut max: BTreeMap<String, String> = BTreeMap::new();
    let mut extra: BTreeMap<usize, FormKey> = BTreeMap::new();
    let mut version = None;
    let mut queueing: Option<String> = None;
    let mut modes: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in fields {
        let v = v.trim().to_string();
        if let Some(key) = k.strip_prefix("mode:") {
            modes.insert(key.to_string(), v);
        } else if k == "queueing" {
            queueing = Some(v);
        } else if k == "name" {
            form.name = v;
        } else if k == "resourceVersion" {
            version = v.parse::<i64>().ok();
            form.resource_version = v;
        } else if let Some(key) = k.strip_prefix("hard:") {
            hard.insert(key.to_string(), v);
        } else if let Some(key) = k.strip_prefix("max:") {
            max.insert(key.to_string(), v);
        } else if let Some((what, i)) = k.split_once(':') {
            let Ok(i) = i.parse::<usize>() else { continue };
            if i >= EXTRA_ROWS {
                continue;
            }
            let row = extra.entry(i).or_default();
            match what {
                "newkey" => row.key = v,
                "newhard" => row.hard = v,
                "newmax" => row.max = v,
                _ => {}
            }
        }
    }
    let required: BTreeSet<&String> = parent
        .map(|p| p.spec.hard.keys().collect())
        .unwrap_or_default();
    // The short form's folded keys: what each takes, as the spec says it.
    let mut bad_mode = None;
    for (k, mode) in &modes {
        hard.entry(k.clone()).or_default();
        let (h, m) = match mode.as_str() {
            "inherit" => (
                "0".to_string(),
                parent
                    .and_then(|p| p.spec.hard.get(k))
                    .map(prefill)
                    .unwrap_or_default(),
            ),
            "zero" => ("0".to_string(), String::new()),
            "set" | "" => continue,
            other => {
                bad_mode.get_or_insert(format!(
                    "{k}: '{other}' is not a choice: inherit, zero or set"
                ));
                continue;
            }
        };
        hard.insert(k.clone(), h);
        max.insert(k.clone(), m);
    }
    form.keys = hard
        .iter()
        .map(|(k, h)| FormKey {
            key: k.clone(),
            name: app::key_name(k, cfg),
            hard: h.clone(),
            max: max.get(k).cloned().unwrap_or_default(),
            left: left_in(parent, k, cfg),
            required: required.contains(k),
            error: None,
            folded: modes.contains_key(k),
            mode: modes.get(k).cloned().unwrap_or_default(),
        })
        .collect();
    form.extra = (0..EXTRA_ROWS)
        .map(|i| extra.remove(&i).unwrap_or_default())
        .collect();
    let mut spec = QuotaSpec {
        parent: form.parent.clone(),
        ..Default::default()
    };
    let rows = form
        .keys
        .iter()
        .chain(form.extra.iter().filter(|r| !r.key.is_empty()));
    let parse = |key: &str, v: &str, what: &str| -> Result<Option<Quantity>, String> {
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<Quantity>().map(Some).map_err(|_| {
            format!("{key}: {what} '{v}' is not a quantity (write e.g. 500m, 16Gi or 4)")
        })
    };
    let queueing_given = queueing.is_some();
    let read = (|| {
        if let Some(why) = bad_mode {
            return Err(why);
        }
        if let Some(v) = queueing.filter(|v| !v.is_empty()) {
            // The short form (`Refuse`, `Queue`), as spec.queueing spells it.
            spec.queueing = serde_json::from_value(serde_json::Value::String(v))
                .map_err(|e| format!("queueing: {e}"))?;
        }
        for r in rows {
            if let Some(h) = parse(&r.key, &r.hard, "hard")? {
                spec.hard.insert(r.key.clone(), h);
            }
            if let Some(m) = parse(&r.key, &r.max, "max")? {
                spec.max.insert(r.key.clone(), m);
            }
        }
        Ok(())
    })();
    Submitted {
        form,
        spec: read.map(|()| spec),
        version,
        queueing_given,
    }
}

/// The form again with what went wrong, answering `status`. `raw` (the
/// service's words, raw keys) places the refusal beside the field it names;
/// the person reads `said` there and at the top (`super::refusal`), or, for
/// a form's own complaint, `raw` with its keys named.
fn refused_form(
    viewer: &Viewer,
    mut form: QuotaForm,
    raw: String,
    said: Option<String>,
    status: StatusCode,
    cfg: &KeyConfig,
) -> Response {
    form.place_error(&raw);
    let said = said.unwrap_or_else(|| {
        let keys = form.keys.iter().chain(form.extra.iter());
        quota::keys::with_names(&raw, keys.map(|k| k.key.as_str()), cfg)
    });
    for k in form.keys.iter_mut().chain(form.extra.iter_mut()) {
        if k.error.is_some() {
            k.error = Some(said.clone());
        }
    }
    if form.name_error.is_some() {
        form.name_error = Some(said.clone());
    }
    let html = app::quotas::render_form_page(viewer.page(), form, Some(Flash::Error(said)));
    (status, Html(html)).into_response()
}

/// A refused change: a permission refusal, 404 and 500 as pages of their
/// own; anything the person can fix (a quota or tree rule, a name taken, a
/// stale form) on the form, with the status of the one table
/// (`edge::status_of`), the service's words and the same in words
/// that say what to do (`super::refusal::words`).
async fn form_status(
    app: &AppState,
    e: ChangeError,
    form: &QuotaForm,
) -> Result<(StatusCode, String, String), PageError> {
    match e {
        ChangeError::Forbidden(m) => Err(PageError::Forbidden(m)),
        ChangeError::Service(e) => match e {
            ServiceError::NotFound(_) | ServiceError::Internal(_) => Err(e.into()),
            e => {
                let keys: Vec<&str> = form
                    .keys
                    .iter()
                    .chain(form.extra.iter())
                    .map(|k| k.key.as_str())
                    .collect();
                let said = super::refusal::words(app, &e, &keys).await;
                Ok((crate::edge::status_of(&e).0, e.to_string(), said))
            }
        },
    }
}

fn page_error(e: ChangeError) -> PageError {
    match e {
        ChangeError::Forbidden(m) => PageError::Forbidden(m),
        ChangeError::Service(e) => e.into(),
    }
}

/// GET /quotas/{name}/children/new — keys pre-filled with the parent's,
/// since a child must carry every key of its parent: the short form, GPU
/// keys and budgets first at 0, the rest folded under "More keys", each
/// taking the parent's idle room (hard 0, max the parent's hard) unless
/// chosen otherwise.
pub async fn new_child_form(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(parent): Path<String>,
) -> Result<Response, PageError> {
    let tree = quota_ops::tree_for(&app.audited(), &viewer.principal).await?;
    quota_ops::require_manage_children(&viewer.principal, &parent, &tree).map_err(page_error)?;
    // What is left in the parent as the next decision reads it.
    let p = app
        .service
        .working(app.service.now())
        .copy(&app.service.get(&parent).await?.quota);
    let form = QuotaForm {
        editing: None,
        parent: parent.clone(),
        keys: p
            .spec
            .hard
            .keys()
            .map(|k| {
                let folded = quota::keys::display_order(k, &app.service.keys).0 > 2;
                FormKey {
                    key: k.clone(),
                    name: app::key_name(k, &app.service.keys),
                    left: left_in(Some(&p), k, &app.service.keys),
                    required: true,
                    hard: if folded { String::new() } else { "0".into() },
                    folded,
                    ..Default::default()
                }
            })
            .collect(),
        extra: blank_extra(),
        ..Default::default()
    };
    Ok(Html(app::quotas::render_form_page(viewer.page(), form, None)).into_response())
}

/// POST /quotas/{name}/children/new
pub async fn create_child(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(parent): Path<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let p = &viewer.principal;
    let tree = quota_ops::tree_for(&app.audited(), p).await?;
    quota_ops::require_manage_children(p, &parent, &tree).map_err(page_error)?;
    let parent_q = app
        .service
        .working(app.service.now())
        .copy(&app.service.get(&parent).await?.quota);
    let base = QuotaForm {
        parent: parent.clone(),
        ..Default::default()
    };
    let sub = read_form(fields, base, Some(&parent_q), &app.service.keys);
    let spec = match sub.spec {
        Ok(s) => s,
        Err(m) => {
            return Ok(refused_form(
                &viewer,
                sub.form,
                m,
                None,
                StatusCode::UNPROCESSABLE_ENTITY,
                &app.service.keys,
            ))
        }
    };
    let name = sub.form.name.clone();
    match quota_ops::create(&app.audited(), p, &tree, &name, spec, false).await {
        Ok(q) => {
            viewer
                .set_flash(Flash::Ok(format!("created {} under {parent}", q.name())))
                .await;
            Ok(Redirect::to(&format!("/quotas/{}", q.name())).into_response())
        }
        Err(e) => {
            let (status, m, said) = form_status(&app, e, &sub.form).await?;
            Ok(refused_form(
                &viewer,
                sub.form,
                m,
                Some(said),
                status,
                &app.service.keys,
            ))
        }
    }
}

fn edit_form(q: &Quota, version: i64, parent: Option<&Quota>, cfg: &KeyConfig) -> QuotaForm {
    let required: BTreeSet<&String> = parent
        .map(|p| p.spec.hard.keys().collect())
        .unwrap_or_default();
    QuotaForm {
        editing: Some(q.name().to_string()),
        parent: q.spec.parent.clone(),
        name: q.name().to_string(),
        keys: q
            .spec
            .hard
            .iter()
            .map(|(k, h)| FormKey {
                key: k.clone(),
                name: app::key_name(k, cfg),
                hard: prefill(h),
                max: q.spec.max.get(k).map(prefill).unwrap_or_default(),
                left: left_in(parent, k, cfg),
                required: required.contains(k),
                ..Default::default()
            })
            .collect(),
        extra: blank_extra(),
        resource_version: version.to_string(),
        consequences: Vec::new(),
        name_error: None,
        budgets: super::budgets::form_rows(&q.spec),
    }
}

async fn parent_of(app: &AppState, q: &Quota) -> Option<Quota> {
    if q.spec.parent.is_empty() {
        return None;
    }
    // Its hints say what is left as the next decision reads it.
    let w = app.service.working(app.service.now());
    app.service
        .get(&q.spec.parent)
        .await
        .ok()
        .map(|s| w.copy(&s.quota))
}

/// GET /quotas/{name}/edit — an owner of `name` itself may not (403): raising
/// one's own hard takes the owner of an ancestor, or an admin.
pub async fn edit_page(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let tree = quota_ops::tree_for(&app.audited(), &viewer.principal).await?;
    quota_ops::require_edit(&viewer.principal, &name, &tree).map_err(page_error)?;
    let stored = app.service.get(&name).await?;
    let parent = parent_of(&app, &stored.quota).await;
    let form = edit_form(
        &stored.quota,
        stored.version,
        parent.as_ref(),
        &app.service.keys,
    );
    Ok(Html(app::quotas::render_form_page(viewer.page(), form, None)).into_response())
}

/// POST /quotas/{name}/edit — with the form's resourceVersion: a form
/// opened before someone else's change is refused (409) and shown again
/// with the current values.
pub async fn edit(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let p = &viewer.principal;
    let tree = quota_ops::tree_for(&app.audited(), p).await?;
    quota_ops::require_edit(p, &name, &tree).map_err(page_error)?;
    let confirmed = fields
        .iter()
        .any(|(k, v)| k == "confirm_lower" && v == "yes");
    let current = app.service.get(&name).await?;
    let parent = parent_of(&app, &current.quota).await;
    let base = QuotaForm {
        editing: Some(name.clone()),
        parent: current.quota.spec.parent.clone(),
        name: name.clone(),
        ..Default::default()
    };
    let budget_fields = fields.clone();
    let mut sub = read_form(fields, base, parent.as_ref(), &app.service.keys);
    let queueing_given = sub.queueing_given;
    let spec = sub.spec.and_then(|mut spec| {
        let (rows, budgets) = super::budgets::read(&budget_fields, &current.quota.spec, &spec.hard);
        sub.form.budgets = rows;
        spec.budgets = budgets?;
        // A form that does not show the queueing choice keeps the quota's.
        if !queueing_given {
            spec.queueing = current.quota.spec.queueing;
        }
        // The form does not show the fair-sharing weight: an edit keeps it.
        spec.fair_sharing = current.quota.spec.fair_sharing;
        Ok(spec)
    });
    let spec = match spec {
        Ok(s) => s,
        Err(m) => {
            return Ok(refused_form(
                &viewer,
                sub.form,
                m,
                None,
                StatusCode::UNPROCESSABLE_ENTITY,
                &app.service.keys,
            ))
        }
    };
    if !confirmed {
        let below = app.service.subtrees(std::slice::from_ref(&name)).await?;
        let in_use = subtree_in_use(&below).remove(&name).unwrap_or_default();
        let consequences = lowering_consequences(&name, &spec, &in_use, &app.service.keys);
        if !consequences.is_empty() {
            let form = QuotaForm {
                consequences,
                ..sub.form
            };
            return Ok(refused_form(
                &viewer,
                form,
                format!("{name} is not saved yet: check what saving would do, then confirm"),
                None,
                StatusCode::CONFLICT,
                &app.service.keys,
            ));
        }
    }
    match quota_ops::update(&app.audited(), p, &tree, &name, spec, sub.version, false).await {
        Ok(_) => {
            viewer.set_flash(Flash::Ok(format!("saved {name}"))).await;
            Ok(Redirect::to(&format!("/quotas/{name}")).into_response())
        }
        Err(ChangeError::Service(ServiceError::Conflict(m))) if m.contains("resourceVersion") => {
            let fresh = app.service.get(&name).await?;
            let form = edit_form(
                &fresh.quota,
                fresh.version,
                parent.as_ref(),
                &app.service.keys,
            );
            tracing::debug!(quota = %name, conflict = %m, "stale edit form");
            let m = format!("Someone else changed {name} after you opened this form; these are its current values: check them and save again.");
            Ok(refused_form(
                &viewer,
                form,
                m,
                None,
                StatusCode::CONFLICT,
                &app.service.keys,
            ))
        }
        Err(e) => {
            let (status, m, said) = form_status(&app, e, &sub.form).await?;
            Ok(refused_form(
                &viewer,
                sub.form,
                m,
                Some(said),
                status,
                &app.service.keys,
            ))
        }
    }
}

/// What a new spec would do to what runs: each key whose new hard is below
/// what its subtree uses now (nothing is stopped; new work is refused until
/// use falls under it).
pub fn lowering_consequences(
    name: &str,
    spec: &QuotaSpec,
    in_use: &ResourceList,
    cfg: &KeyConfig,
) -> Vec<String> {
    spec.hard
        .iter()
        .filter(|(k, _)| cash_target(k).is_none())
        .filter_map(|(k, hard)| {
            let using = resources::get(in_use, k);
            (*hard < using).then(|| {
                let show = |n| app::display_quantity(k, n, cfg);
                format!(
                    "set {} to {}, below the {} in use in {name} and below: nothing running is \
                     stopped, but {name} is over quota by {} and new work is refused until use falls under it",
                    app::key_name(k, cfg),
                    show(*hard),
                    show(using),
                    show(using.saturating_sub(*hard))
                )
            })
        })
        .collect()
}

#[derive(Deserialize)]
pub struct DeleteForm {
    #[serde(default)]
    confirm: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
}

/// POST /quotas/{name}/delete — leaves only, confirmed with `confirm=yes`;
/// the carve-out returns to the parent.
pub async fn delete(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<DeleteForm>,
) -> Result<Response, PageError> {
    let p = &viewer.principal;
    let tree = quota_ops::tree_for(&app.audited(), p).await?;
    quota_ops::require_edit(p, &name, &tree).map_err(page_error)?;
    if f.confirm != "yes" {
        return Err(PageError::Invalid(format!(
            "deleting {name} needs confirming: tick the box next to Delete"
        )));
    }
    let version = f.resource_version.trim().parse::<i64>().ok();
    let parent = quota_ops::delete(&app.audited(), p, &tree, &name, version, false)
        .await
        .map_err(page_error)?
        .spec
        .parent;
    viewer
        .set_flash(Flash::Ok(format!(
            "deleted {name}; its hard went back to {}",
            if parent.is_empty() {
                "nobody (it was a root)"
            } else {
                &parent
            }
        )))
        .await;
    let to = if parent.is_empty() {
        "/tree".to_string()
    } else {
        format!("/quotas/{parent}")
    };
    Ok(Redirect::to(&to).into_response())
}

#[derive(serde::Deserialize)]
pub struct MemberForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    role: Option<String>,
}

/// An owner invites a user onto its subtree (§6, docs/semantics.md): `member` anywhere in
/// it, `owner` below itself (`authz::can_grant`); admins anything. Audited
/// like the admin's `/users` binding.
pub async fn add_member(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<MemberForm>,
) -> Result<Response, PageError> {
    let (_, tree) = super::scope::visible_tree(&app, &viewer, &name).await?;
    let Some(role) = f.role.as_deref().and_then(Role::parse) else {
        return Err(PageError::Invalid(
            "the role must be owner or member".into(),
        ));
    };
    if !authz::can_grant(&viewer.principal, &name, role, &tree) {
        return Err(PageError::Forbidden(format!(
            "you may not make anyone {role} of {name}"
        )));
    }
    let username = f.username.trim().to_lowercase();
    let Some(user) = app.portal.sql.user_by_name(&username).await? else {
        return Err(PageError::Invalid(format!("there is no user {username}")));
    };
    // The role replaced counts as much as the one given: an owner may not
    // demote a co-owner it could not have made owner.
    let held = app
        .portal
        .sql
        .bindings_on(&name)
        .await?
        .into_iter()
        .find(|(u, _)| u.id == user.id)
        .map(|(_, r)| r);
    if !authz::can_replace(&viewer.principal, &name, held, role, &tree) {
        return Err(PageError::Forbidden(format!(
            "{username} is {} of {name}; only an admin or an owner above {name} may change that",
            held.map(|r| r.as_str()).unwrap_or("nothing")
        )));
    }
    if !super::accounts::grant_replacing(&app, &viewer.principal, &user, &name, role, held).await? {
        return Err(PageError::Invalid(format!(
            "{username}'s role on {name} changed meanwhile; look again and retry"
        )));
    }
    viewer
        .set_flash(Flash::Ok(format!("{username} is now {role} of {name}")))
        .await;
    Ok(Redirect::to(&format!("/quotas/{name}")).into_response())
}

/// Take a user's role on this quota away (same rule as giving it).
pub async fn remove_member(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<MemberForm>,
) -> Result<Response, PageError> {
    let (_, tree) = super::scope::visible_tree(&app, &viewer, &name).await?;
    let username = f.username.trim().to_lowercase();
    let held = app
        .portal
        .sql
        .bindings_on(&name)
        .await?
        .into_iter()
        .find(|(u, _)| u.username == username);
    let Some((user, role)) = held else {
        return Err(PageError::NotFound(format!(
            "{username} has no role on {name}"
        )));
    };
    if !authz::can_grant(&viewer.principal, &name, role, &tree) {
        return Err(PageError::Forbidden(format!(
            "you may not take {role} of {name} away"
        )));
    }
    super::accounts::revoke(&app, &viewer.principal, &user, &name, role).await?;
    viewer
        .set_flash(Flash::Ok(format!(
            "{username} is no longer {role} of {name}"
        )))
        .await;
    Ok(Redirect::to(&format!("/quotas/{name}")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::working::tests::big_forest;
    use crate::service::working::Working;

    const HOUR: i64 = 3_600_000;

    /// A page copies and accrues its quota and what is below it, and
    /// nothing else: its figures (the quota, its subtree's use, each
    /// child's) are those of copying every quota the viewer may see, its
    /// children keep their order, and the rest is left as read.
    #[test]
    fn a_page_copies_only_its_subtree() {
        let t0 = quota::time::parse_rfc3339("2026-11-30T00:00:00Z").unwrap();
        let all = big_forest(3, 4, true, t0);
        let w = Working::for_tests(true, t0 + 10 * HOUR);
        let whole = w.quotas(all.clone());
        let whole_use = subtree_in_use(&whole);
        let find = |v: &[Quota], n: &str| v.iter().find(|q| q.name() == n).cloned().unwrap();
        let kids = |v: &[Quota], n: &str| -> Vec<String> {
            v.iter()
                .filter(|c| c.spec.parent == n)
                .map(|c| c.name().to_string())
                .collect()
        };
        for name in ["d001-t002", "d001", "root"] {
            let (q, got, in_use) = page_copies(&w, all.clone(), name);
            assert_eq!(q.unwrap(), find(&whole, name), "{name}");
            assert_eq!(in_use[name], whole_use[name], "{name}");
            for c in kids(&whole, name) {
                assert_eq!(in_use[&c], whole_use[&c], "{c}");
                assert_eq!(find(&got, &c), find(&whole, &c), "{c}");
            }
            assert_eq!(got.len(), all.len());
            assert_eq!(kids(&got, name), kids(&all, name));
        }
        let (_, got, in_use) = page_copies(&w, all.clone(), "d001-t002");
        assert_eq!(in_use.len(), 1, "only the leaf is summed");
        assert_eq!(
            find(&got, "d000-t000"),
            find(&all, "d000-t000"),
            "another team is left as read"
        );
    }

    /// A parent cycle in a hand-edited store (a → b → c → a, x below b):
    /// a quota's page sums its copies again, `/tree` moves the copies'
    /// spending along their lines (`quota::rollup::line_above`); both say
    /// one figure for every member.
    #[test]
    fn a_cycle_shows_one_figure_on_the_page_and_on_the_tree() {
        use crate::service::forest::Forest;
        use crate::service::working::tests::{budget, running};
        let t0 = quota::time::parse_rfc3339("2026-11-30T00:00:00Z").unwrap();
        let all = vec![
            running(budget("a", "b", "1000"), 1, t0),
            running(budget("b", "c", "1000"), 2, t0),
            running(budget("c", "a", "1000"), 4, t0),
            running(budget("x", "b", "1000"), 8, t0),
        ];
        let w = Working::for_tests(true, t0 + 10 * HOUR);
        let tree = w.accrued(std::sync::Arc::new(Forest::of(all.clone())));
        for name in ["a", "b", "c", "x"] {
            let (_, _, page) = page_copies(&w, all.clone(), name);
            assert_eq!(&page[name], tree.in_use_of(name), "{name}");
        }
    }

    /// Debug timings of the working copies on a forest of 10,101 quotas
    /// (root → 100 departments → 100 teams, each team running a card),
    /// the way each reader makes them, beside the whole-forest way they replace
    /// (docs/benchmarks.md "Working copies on a big forest"):
    /// `cargo test -p bizrq --lib -- --ignored copies_on_a_big_forest --nocapture`.
    #[test]
    #[ignore]
    fn copies_on_a_big_forest_cost() {
        use crate::service::forest::Forest;
        use std::sync::Arc;
        let t0 = quota::time::parse_rfc3339("2026-11-30T00:00:00Z").unwrap();
        let ms = |label: &str, runs: u32, f: &mut dyn FnMut()| {
            f();
            let start = std::time::Instant::now();
            for _ in 0..runs {
                f();
            }
            let each = start.elapsed().as_secs_f64() * 1000.0 / f64::from(runs);
            println!("{label}: {each:.1} ms");
        };
        for team_budgets in [true, false] {
            let all = big_forest(100, 100, team_budgets, t0);
            let w = Working::for_tests(true, t0 + 10 * HOUR);
            let f = Arc::new(Forest::of(all.clone()));
            let budgets = if team_budgets {
                "every quota"
            } else {
                "root and departments"
            };
            println!("{} quotas, a budget on {budgets}:", all.len());
            ms(
                "  a leaf's page, before: every visible quota copied and summed",
                5,
                &mut || {
                    let c = w.quotas(all.clone());
                    std::hint::black_box(subtree_in_use(&c));
                },
            );
            ms(
                "  a leaf's page, then: its subtree copied and summed, every visible quota read",
                5,
                &mut || {
                    std::hint::black_box(page_copies(&w, all.clone(), "d050-t050"));
                },
            );
            // What a member's page reads now: the leaf and its line.
            let read: Vec<Quota> = all
                .iter()
                .filter(|q| ["d050-t050", "d050", "root"].contains(&q.name()))
                .cloned()
                .collect();
            ms(
                "  a leaf's page, now: its subtree and line read, its subtree copied",
                5,
                &mut || {
                    std::hint::black_box(page_copies(&w, read.clone(), "d050-t050"));
                },
            );
            ms(
                "  /tree, overview, CSV, before: the kept forest copied and summed",
                5,
                &mut || {
                    std::hint::black_box(Forest::of(w.quotas(f.quotas.clone())));
                },
            );
            ms(
                "  /tree, overview, CSV, now: budgeted copies, the rest shared",
                5,
                &mut || {
                    let a = w.accrued(f.clone());
                    std::hint::black_box(a.quotas());
                },
            );
        }
    }

    /// Debug timings of what a member's quota page reads from SQLite on
    /// the same forest of 10,101 quotas, the member bound at the root
    /// (docs/benchmarks.md "A member's page reads what it shows"), beside
    /// every quota the member may see (`quota_ops::visible_quotas`, the
    /// root's subtree): a leaf's page reads its subtree and its line
    /// (`line_above`), a department's its 101 quotas and the root:
    /// `cargo test -p bizrq --lib -- --ignored a_members_page_reads --nocapture`.
    #[tokio::test]
    #[ignore]
    async fn a_members_page_reads_cost() {
        use crate::store::QuotaStore;
        let t0 = quota::time::parse_rfc3339("2026-11-30T00:00:00Z").unwrap();
        let db = crate::store::testdb::sqlite().await;
        let all = big_forest(100, 100, true, t0);
        for q in &all {
            db.store.create(q).await.unwrap();
        }
        let s = &db.store;
        let line = |name: &str| {
            let mut out = Vec::new();
            let mut at = all
                .iter()
                .find(|q| q.name() == name)
                .unwrap()
                .spec
                .parent
                .clone();
            while !at.is_empty() {
                out.push(at.clone());
                at = all
                    .iter()
                    .find(|q| q.name() == at)
                    .unwrap()
                    .spec
                    .parent
                    .clone();
            }
            out
        };
        for (label, name) in [("a leaf", "d050-t050"), ("a department", "d050")] {
            let mut before = Vec::new();
            let mut after = Vec::new();
            for _ in 0..5 {
                let start = std::time::Instant::now();
                let read = s.subtrees(&["root".to_string()]).await.unwrap();
                before.push(start.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(read.len(), all.len());
                let start = std::time::Instant::now();
                let mut read = s.subtrees(&[name.to_string()]).await.unwrap();
                for a in line(name) {
                    read.push(s.get(&a).await.unwrap().unwrap());
                }
                after.push(start.elapsed().as_secs_f64() * 1000.0);
                std::hint::black_box(read);
            }
            let range = |v: &[f64]| {
                let lo = v.iter().cloned().fold(f64::MAX, f64::min);
                let hi = v.iter().cloned().fold(0.0, f64::max);
                format!("{lo:.1}–{hi:.1} ms")
            };
            println!(
                "{label}'s page for a member bound at the root, read before: {}",
                range(&before)
            );
            println!(
                "{label}'s page, read now (its subtree and line): {}",
                range(&after)
            );
        }
        db.finish().await;
    }

    /// A quota that may borrow shows its weight, and its share once the
    /// controller has stated it; one that cannot borrow shows neither.
    #[test]
    fn the_quota_page_shows_the_weight_and_the_share() {
        let q: Quota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cv"},
            "spec": {"parent": "org", "hard": {"requests.cpu": "4"},
                "max": {"requests.cpu": "8"}, "fairSharing": {"weight": "0.5"}},
            "status": {"fairSharing": {"weight": "0.5", "share": "0.25", "dominant": "requests.cpu"}}
        }))
        .unwrap();
        let fair = extras(&q, &KeyConfig::default())
            .into_iter()
            .find(|(h, _)| h == "Fair sharing")
            .unwrap();
        assert_eq!(
            fair.1,
            [
                ("weight".to_string(), "0.5".to_string()),
                ("share".to_string(), "0.25 (of requests.cpu)".to_string())
            ]
        );
        let mut root = q.clone();
        root.spec.parent.clear();
        assert!(extras(&root, &KeyConfig::default())
            .iter()
            .all(|(h, _)| h != "Fair sharing"));
    }

    /// The children table and a form's prefill showed `1099511627776` and
    /// `20k` as the spec stored them.
    #[test]
    fn lists_and_prefills_read_as_amounts() {
        let l: ResourceList = [
            ("cash/requests.nvidia.com/gpu", "20k"),
            ("pods", "2600"),
            ("requests.memory", "1099511627776"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
        let q = |s: &str| s.parse::<Quantity>().unwrap();
        let cfg = KeyConfig::default();
        // A workload's charge: in words, GPUs first, one of a thing
        // singular, on the keys the quota counts (not the alias `cpu`).
        let mut quota = Quota::default();
        quota.spec.hard = l.clone();
        quota.spec.hard.insert("requests.cpu".into(), q("64"));
        quota
            .spec
            .hard
            .insert("requests.nvidia.com/gpu.A100".into(), q("8"));
        let mut charge = l.clone();
        charge.insert("cpu".into(), q("1"));
        charge.insert("requests.cpu".into(), q("1"));
        charge.insert("pods".into(), q("1"));
        charge.insert("requests.nvidia.com/gpu.A100".into(), q("2"));
        assert_eq!(
            list_line(&charge, &quota, &cfg),
            "2 A100 GPUs, 1 CPU core, 1,024 GiB memory, 1 pod"
        );
        let mut hard = l.clone();
        hard.insert("requests.nvidia.com/gpu.A100".into(), q("32"));
        hard.insert("requests.cpu".into(), q("0"));
        assert_eq!(
            hard_line(&hard, &cfg),
            "A100 GPUs 32 · GPU card-hours 20,000 card-hours · memory 1,024 GiB · pods 2,600",
            "by name, GPUs first, no zeros"
        );
        assert_eq!(prefill(&q("1099511627776")), "1Ti");
        assert_eq!(prefill(&q("11500")), "11500");
        assert_eq!(prefill(&q("1500m")), "1500m");
        assert_eq!(prefill(&q("20k")), "20k");
        assert_eq!(prefill(&q("1099511627777")), "1099511627777");
    }

    /// With `--gpu-resources example.com/tpu`, the quota page counts that
    /// resource in cards and card-hours and breaks it down by model, as it
    /// does the default GPUs (it showed "units" and no breakdown when the
    /// page used the default key configuration).
    #[test]
    fn a_configured_gpu_resource_shows_its_units_on_the_quota_page() {
        let cfg = KeyConfig {
            gpu_resources: vec!["example.com/tpu".into()],
            ..KeyConfig::default()
        };
        let hard: ResourceList = [
            ("cash/requests.example.com/tpu", "100"),
            ("requests.example.com/tpu", "8"),
            ("requests.example.com/tpu.v5", "4"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
        let q = Quota::new(
            "ml",
            QuotaSpec {
                parent: String::new(),
                hard,
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        let pricing = quota::forecast::Pricing {
            now_ms: 1_800_000_000_000,
            ..Default::default()
        };
        let outlooks = quota::forecast::outlooks(&q, &pricing);
        assert_eq!(
            forecasts(&outlooks, &cfg),
            ["GPU card-hours: 100 card-hours left, not burning"]
        );
        let (charts, others) = breakdowns(&q, &ResourceList::new(), &cfg);
        assert!(others.is_empty(), "a configured GPU's models lead the page");
        assert_eq!(charts.len(), 1);
        assert!(charts[0].contains("GPUs by model"));
        assert!(charts[0].contains("cards"), "{}", charts[0]);
        // What the default configuration (the page's before) made of it.
        let (charts, others) = breakdowns(&q, &ResourceList::new(), &KeyConfig::default());
        assert!(charts.is_empty() && others.is_empty());
        assert_eq!(
            forecasts(&outlooks, &KeyConfig::default()),
            ["example.com/tpu budget: 100 unit-hours left, not burning"]
        );
    }
}
