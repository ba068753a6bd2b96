//! The transfer pages (`/transfers…`), over the operations of
//! [`TransferDesk`](crate::service::transfer_ops::TransferDesk) (who may
//! see, request and decide: its module doc).

use super::auth::Viewer;
use super::PageError;
use crate::authz::{self, Principal};
use crate::edge::AppState;
use crate::service::transfer_ops::{non_empty, parse_statuses, Scope, TransferOpError};
use crate::service::transfers::TransferRequest;
use crate::service::ServiceError;
use crate::store::transfers::{TopUp, Transfer, TransferFilter, TransferKind, TransferStatus};
use app::layout::Flash;
use app::transfers::{PlanRow, RequestForm, TransferDetail, TransferQuery, TransferRow};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use quota::object::budgets::Source;
use quota::{KeyConfig, ResourceList};
use serde::Deserialize;
use std::collections::BTreeSet;

/// Rows the list shows at most.
pub const LIST_ROWS: i64 = 200;

/// The pages (`/transfers…`).
pub fn pages() -> Router<crate::edge::AppState> {
    Router::new()
        .route("/transfers", get(page_list).post(page_request))
        .route("/transfers/{id}", get(page_detail))
        .route("/transfers/{id}/approve", post(page_approve))
        .route("/transfers/{id}/reject", post(page_reject))
}

impl From<TransferOpError> for PageError {
    fn from(e: TransferOpError) -> Self {
        match e {
            TransferOpError::NotFound(m) => PageError::NotFound(m),
            TransferOpError::Forbidden(m) => PageError::Forbidden(m),
            TransferOpError::TooMany(m, secs) => PageError::TooMany(m, secs),
            TransferOpError::Service(e) => e.into(),
        }
    }
}

// ---- Pages ----

fn amounts(list: &ResourceList) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

/// A transfer's row; its ends are links where `p` may see them.
fn row(t: &Transfer, p: &Principal, scope: &Scope) -> TransferRow {
    let sees = |q: &str| p.is_admin || authz::can_view(p, q, &scope.tree);
    TransferRow {
        id: t.id,
        from_link: t.from_quota.as_deref().is_some_and(sees),
        to_link: sees(&t.to_quota),
        from: t.from_quota.clone(),
        to: t.to_quota.clone(),
        amounts: amounts(&t.amounts),
        reason: match &t.top_up {
            Some(u) => format!("[top-up, {}] {}", u.source.as_str(), t.reason),
            None => t.reason.clone(),
        },
        requested_by: t.requested_by.clone(),
        requested_at: quota::time::format_when(t.requested_at),
        expires_at: quota::time::format_when(t.expires_at),
        status: t.status.to_string(),
        revert_at: t.revert_at.map(quota::time::format_when),
    }
}

#[derive(Deserialize, Default)]
pub struct PageParams {
    #[serde(default)]
    status: String,
    #[serde(default)]
    quota: String,
    /// `me`: only the requests waiting for the viewer's decision.
    #[serde(default)]
    awaiting: String,
    /// The Budgets panel's "Ask for more budget": a top-up form for this
    /// quota and cash key.
    #[serde(default)]
    topup: String,
    #[serde(default)]
    key: String,
}

/// The request form's choices for `p`, with what was typed; None when `p`
/// owns nothing to give from.
fn request_form(
    p: &Principal,
    scope: &Scope,
    typed: RequestForm,
    cfg: &quota::KeyConfig,
) -> Option<RequestForm> {
    let owned: Vec<String> = scope
        .quotas
        .keys()
        .filter(|q| authz::can_request_transfer(p, Some(q), q, &scope.tree))
        .cloned()
        .collect();
    let visible: Vec<String> = authz::visible_names(p, &scope.tree).into_iter().collect();
    if owned.is_empty() {
        return budget_ask(p, scope, &visible, typed, cfg);
    }
    let keys: BTreeSet<String> = scope
        .quotas
        .values()
        .filter(|q| visible.iter().any(|v| v == q.name()))
        .flat_map(|q| q.spec.hard.keys().cloned())
        .collect();
    // A fresh form gives from the first quota owned; one sent back keeps
    // what was chosen ("" = more from the parent).
    let fresh = typed == RequestForm::default();
    Some(RequestForm {
        from: if fresh {
            owned[0].clone()
        } else {
            typed.from.clone()
        },
        sources: owned,
        destinations: visible,
        keys: {
            // Chosen from a list by name, GPUs first; the raw key is what
            // the form sends.
            let mut keys: Vec<(String, String)> = keys
                .into_iter()
                .map(|k| {
                    let name = app::key_name(&k, cfg);
                    (k, name)
                })
                .collect();
            keys.sort_by_cached_key(|(k, _)| quota::keys::display_order(k, cfg));
            keys
        },
        ..typed
    })
}

/// A member's form (it owns nothing to give from): more budget for a
/// quota it sees that has a budget and a parent; None when there is none.
fn budget_ask(
    p: &Principal,
    scope: &Scope,
    visible: &[String],
    typed: RequestForm,
    cfg: &quota::KeyConfig,
) -> Option<RequestForm> {
    let with_budget: Vec<&quota::Quota> = visible
        .iter()
        .filter_map(|n| scope.quotas.get(n))
        .filter(|q| {
            !q.spec.parent.is_empty() && authz::can_ask_for_budget(p, q.name(), &scope.tree)
        })
        .filter(|q| {
            q.spec
                .hard
                .keys()
                .any(|k| k.starts_with(quota::keys::CASH_PREFIX))
        })
        .collect();
    if with_budget.is_empty() {
        return None;
    }
    let mut keys: Vec<(String, String)> = with_budget
        .iter()
        .flat_map(|q| q.spec.hard.keys())
        .filter(|k| k.starts_with(quota::keys::CASH_PREFIX))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|k| (k.clone(), app::key_name(k, cfg)))
        .collect();
    keys.sort_by_cached_key(|(k, _)| quota::keys::display_order(k, cfg));
    Some(RequestForm {
        destinations: with_budget.iter().map(|q| q.name().to_string()).collect(),
        keys,
        kind: "topUp".into(),
        source: "parent".into(),
        budget_only: true,
        ..typed
    })
}

async fn list_page(
    app: &AppState,
    viewer: &Viewer,
    q: &PageParams,
    typed: RequestForm,
    flash: Option<Flash>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let statuses = parse_statuses(&q.status).map_err(PageError::Invalid)?;
    let filter = TransferFilter {
        statuses,
        quota: non_empty(&q.quota),
        limit: Some(LIST_ROWS),
        ..Default::default()
    };
    let scope = Scope::load(&app.service).await?;
    let p = &viewer.principal;
    let desk = app.transfer_desk();
    let mut rows = desk.list(p, filter, Some(&scope)).await?;
    // Requests the viewer may decide: a count on every list, the filter.
    let awaiting_me = desk.awaiting(p, Some(&scope)).await?;
    let only_mine = q.awaiting == "me";
    if only_mine {
        rows.retain(|t| awaiting_me.contains(&t.id));
    }
    let form = request_form(&viewer.principal, &scope, typed, &app.service.keys);
    Ok((
        status,
        Html(app::transfers::render_transfers_page(
            viewer.page(),
            rows.iter().map(|t| row(t, p, &scope)).collect(),
            TransferQuery {
                status: q.status.clone(),
                quota: q.quota.clone(),
                awaiting_me: only_mine,
            },
            awaiting_me.len(),
            TransferStatus::ALL.iter().map(|s| s.to_string()).collect(),
            form,
            flash,
        )),
    )
        .into_response())
}

/// GET /transfers?status=&quota=
async fn page_list(
    State(app): State<AppState>,
    viewer: Viewer,
    Query(q): Query<PageParams>,
) -> Result<Response, PageError> {
    let flash = viewer.take_flash().await;
    let form = if q.topup.is_empty() {
        RequestForm::default()
    } else {
        RequestForm {
            to: q.topup.chars().take(253).collect(),
            rows: vec![(q.key.chars().take(253).collect(), String::new())],
            kind: "topUp".into(),
            source: "parent".into(),
            ..Default::default()
        }
    };
    list_page(&app, &viewer, &q, form, flash, StatusCode::OK).await
}

/// The request form as posted: repeated `key`/`amount` fields pair up in
/// order; empty rows are skipped.
fn parse_request_form(
    fields: Vec<(String, String)>,
) -> (RequestForm, Result<TransferRequest, String>) {
    let mut typed = RequestForm::default();
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (k, v) in fields {
        match k.as_str() {
            "from" => typed.from = v.trim().to_string(),
            "to" => typed.to = v.trim().to_string(),
            "reason" => typed.reason = v,
            "revert_at" => typed.revert_at = v.trim().to_string(),
            "kind" => typed.kind = v.trim().to_string(),
            "source" => typed.source = v.trim().to_string(),
            "until" => typed.until = v.trim().to_string(),
            "key" => keys.push(v.trim().to_string()),
            "amount" => values.push(v.trim().to_string()),
            _ => {}
        }
    }
    values.resize(keys.len().max(values.len()), String::new());
    keys.resize(values.len(), String::new());
    typed.rows = keys
        .into_iter()
        .zip(values)
        .filter(|(k, v)| !k.is_empty() || !v.is_empty())
        .collect();
    let parsed = (|| {
        let mut list = ResourceList::new();
        for (k, v) in &typed.rows {
            if k.is_empty() {
                return Err(format!("the amount {v} has no key"));
            }
            if v.is_empty() {
                return Err(format!("{k} has no amount"));
            }
            let q = v
                .parse()
                .map_err(|e| format!("{k}: '{v}' is not an amount: {e}"))?;
            if list.insert(k.clone(), q).is_some() {
                return Err(format!("{k} is given twice"));
            }
        }
        let revert_at = match typed.revert_at.as_str() {
            "" => None,
            s => Some(super::audit::parse_time(s).ok_or_else(|| {
                format!("loan end '{s}' is not a time: use YYYY-MM-DDTHH:MM (UTC)")
            })?),
        };
        if typed.kind == "topUp" {
            let source = match typed.source.as_str() {
                "parent" => Source::Parent,
                "grant" => Source::Grant,
                s => {
                    return Err(format!(
                        "'{s}' is not a top-up's source: use parent or grant"
                    ))
                }
            };
            let until = match typed.until.as_str() {
                "" => None,
                s => Some(super::audit::parse_time(s).ok_or_else(|| {
                    format!("top-up end '{s}' is not a time: use YYYY-MM-DDTHH:MM (UTC)")
                })?),
            };
            return Ok(TransferRequest {
                from: None,
                to: typed.to.clone(),
                amounts: list,
                reason: typed.reason.clone(),
                revert_at,
                kind: TransferKind::TopUp,
                source: Some(source),
                until,
            });
        }
        Ok(TransferRequest {
            from: non_empty(&typed.from),
            to: typed.to.clone(),
            amounts: list,
            reason: typed.reason.clone(),
            revert_at,
            kind: Default::default(),
            source: None,
            until: None,
        })
    })();
    (typed, parsed)
}

/// POST /transfers: a request → 303 to its page; refused → the list again
/// with the message, the form as typed: 422 for a form that does not read,
/// else the status of the service's refusal (`edge::status_of`).
async fn page_request(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let (typed, parsed) = parse_request_form(fields);
    let refused = |message: String, typed: RequestForm, status: StatusCode| {
        let (app, viewer) = (&app, &viewer);
        async move {
            list_page(
                app,
                viewer,
                &PageParams::default(),
                typed,
                Some(Flash::Error(message)),
                status,
            )
            .await
        }
    };
    let req = match parsed {
        Ok(r) => r,
        Err(m) => return refused(m, typed, StatusCode::UNPROCESSABLE_ENTITY).await,
    };
    match app.transfer_desk().request(&viewer.principal, req).await {
        Ok(t) => {
            viewer
                .set_flash(Flash::Ok(format!(
                    "transfer #{} requested; it waits for approval until {}",
                    t.id,
                    quota::time::format_when(t.expires_at)
                )))
                .await;
            Ok(Redirect::to(&format!("/transfers/{}", t.id)).into_response())
        }
        Err(TransferOpError::Service(e)) if !matches!(e, ServiceError::Internal(_)) => {
            let keys: Vec<&str> = typed.rows.iter().map(|(k, _)| k.as_str()).collect();
            let said = super::refusal::words(&app, &e, &keys).await;
            refused(said, typed, crate::edge::status_of(&e).0).await
        }
        Err(e) => Err(e.into()),
    }
}

/// The plan's rows: the transfer's own once approved; before that, for
/// those who decide, the plan as it would be made from the tree as it is
/// now (or why it would be refused).
fn plan_rows(plan: &quota::transfer::Plan, cfg: &KeyConfig) -> Vec<PlanRow> {
    let list = |l: &ResourceList| {
        l.iter()
            .map(|(k, v)| {
                format!(
                    "{} {}",
                    app::key_name(k, cfg),
                    app::display_quantity(k, *v, cfg)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let side = |side: &'static str| {
        move |c: &quota::transfer::Change| PlanRow {
            side,
            quota: c.quota.clone(),
            parent: c.parent.clone(),
            before: list(&c.before),
            after: list(&c.after),
        }
    };
    plan.up
        .iter()
        .map(side("gives"))
        .chain(plan.down.iter().map(side("receives")))
        .collect()
}

/// Each end the viewer may see, on the transfer's keys, as it is now:
/// `nlp: GPUs 6 in use of 8, 2 unallocated` (keys by name).
fn ends_now(t: &Transfer, p: &Principal, scope: &Scope, cfg: &KeyConfig) -> Vec<(String, String)> {
    let in_use = quota::rollup::subtree_in_use(&scope.quotas.values().collect::<Vec<_>>());
    let ends = t.from_quota.iter().chain(std::iter::once(&t.to_quota));
    ends.filter(|q| p.is_admin || authz::can_view(p, q, &scope.tree))
        .filter_map(|name| {
            let q = scope.quotas.get(name)?;
            let rolled = quota::rollup::rollup(q, in_use.get(name).unwrap_or(&ResourceList::new()));
            let lines: Vec<String> = t
                .amounts
                .keys()
                .map(|k| {
                    let show = |n| app::display_quantity(k, n, cfg);
                    let name = app::key_name(k, cfg);
                    match rolled.iter().find(|r| &r.key == k) {
                        Some(r) => format!(
                            "{name} {} in use of {}, {} unallocated",
                            show(r.in_use),
                            show(r.hard),
                            show(r.unallocated)
                        ),
                        None => {
                            let used = quota::resources::get(&q.status.used, k);
                            let hard = quota::resources::get(&q.spec.hard, k);
                            format!("{name} {} used of {}", show(used), show(hard))
                        }
                    }
                })
                .collect();
            Some((name.clone(), lines.join("; ")))
        })
        .collect()
}

/// A top-up for people: where it comes from, who approves, its expiry
/// and what the expiry withdrew.
fn top_up_line(t: &Transfer, u: &TopUp, scope: &Scope) -> String {
    let mut s = match (u.source, scope.lca(t)) {
        (Source::Grant, _) => "granted as new budget (an admin approves)".to_string(),
        (Source::Parent, Some(l)) => {
            format!("from the budget of {l} this period (admins, owners of {l} or above approve)")
        }
        (Source::Parent, None) => "from the parent's budget this period".to_string(),
    };
    if let Some(f) = &u.scheduled_for {
        s.push_str(&format!(
            " · scheduled by the policy for the period from {f}"
        ));
    }
    if let Some(at) = u.until {
        s.push_str(&format!(
            " · what is unspent is withdrawn at {}",
            quota::time::format_when(at)
        ));
    }
    if let (Some(at), Some(w)) = (u.expired_at, u.withdrawn) {
        s.push_str(&format!(
            " · expired {}: {w} withdrawn",
            quota::time::format_when(at)
        ));
    }
    s
}

/// What approving a top-up now would do to the budgets: the receiving
/// quota's left rises by the amount, the parent's (from the parent)
/// falls by it (as the stored status reads them: `hard − used`).
fn top_up_rows(t: &Transfer, scope: &Scope, cfg: &KeyConfig) -> Vec<PlanRow> {
    let Some((key, amount)) = t.amounts.iter().next() else {
        return Vec::new();
    };
    let left = |name: &str| {
        scope
            .quotas
            .get(name)
            .map(|q| quota::budget::periods::left(&q.spec, &q.status, key))
    };
    let show = |v: quota::Quantity| format!("{key} {}", app::display_quantity(key, v, cfg));
    let mut rows = Vec::new();
    let parent = t.top_up.as_ref().and_then(|u| match u.source {
        Source::Parent => u.parent.clone(),
        Source::Grant => None,
    });
    if let Some(p) = parent {
        if let Some(l) = left(&p) {
            rows.push(PlanRow {
                side: "gives",
                quota: p.clone(),
                parent: String::new(),
                before: show(l),
                after: show(l.saturating_sub(*amount)),
            });
        }
    }
    if let Some(l) = left(&t.to_quota) {
        rows.push(PlanRow {
            side: "receives",
            quota: t.to_quota.clone(),
            parent: String::new(),
            before: show(l),
            after: show(l.saturating_add(*amount)),
        });
    }
    rows
}

async fn detail_page(
    app: &AppState,
    viewer: &Viewer,
    id: i64,
    flash: Option<Flash>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let (t, scope) = app.transfer_desk().get_one(&viewer.principal, id).await?;
    let p = &viewer.principal;
    let cfg = &app.service.keys;
    let may_decide = t.status == TransferStatus::Requested && scope.may_decide(p, &t);
    let top_up = t.top_up.as_ref().map(|u| top_up_line(&t, u, &scope));
    let (plan, plan_preview, plan_problem) = match &t.plan {
        _ if t.top_up.is_some() => match t.status {
            TransferStatus::Requested => (top_up_rows(&t, &scope, cfg), true, None),
            _ => (Vec::new(), false, None),
        },
        Some(plan) => (plan_rows(plan, cfg), false, None),
        None if may_decide => match quota::transfer::plan(
            &scope.quotas,
            t.from_quota.as_deref(),
            &t.to_quota,
            &t.amounts,
            cfg,
        ) {
            Ok(plan) => (plan_rows(&plan, cfg), true, None),
            Err(e) => {
                let keys = t.amounts.keys().map(String::as_str);
                let said = quota::keys::with_names(&e.to_string(), keys, cfg);
                (Vec::new(), true, Some(said))
            }
        },
        None => (Vec::new(), false, None),
    };
    let detail = TransferDetail {
        ends: ends_now(&t, p, &scope, cfg),
        plan_preview,
        plan_problem,
        row: row(&t, p, &scope),
        lca: scope.lca(&t),
        decided_by: t.decided_by.clone(),
        decided_at: t.decided_at.map(quota::time::format_when),
        decision_note: t.decision_note.clone().filter(|n| !n.is_empty()),
        result: t.result.clone(),
        finished_at: t.finished_at.map(quota::time::format_when),
        plan,
        reverts: t.reverts,
        reverted_by: t.reverted_by,
        may_decide,
        top_up,
    };
    Ok((
        status,
        Html(app::transfers::render_transfer_page(
            viewer.page(),
            detail,
            flash,
        )),
    )
        .into_response())
}

/// GET /transfers/{id}
async fn page_detail(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
) -> Result<Response, PageError> {
    let flash = viewer.take_flash().await;
    detail_page(&app, &viewer, id, flash, StatusCode::OK).await
}

/// A decision's answer: 303 back to the transfer with what happened, or
/// its page again with why not (the status of `edge::status_of`);
/// 403/404 as error pages.
async fn decided(
    app: &AppState,
    viewer: &Viewer,
    id: i64,
    result: Result<Transfer, TransferOpError>,
) -> Result<Response, PageError> {
    match result {
        Ok(t) => {
            let message = match t.status {
                TransferStatus::Done => format!("transfer #{id} approved and done"),
                TransferStatus::Rejected if t.decision_note.is_none() => format!(
                    "transfer #{id} approved, but it no longer fits and was rejected: {}",
                    quota::keys::with_names(
                        t.result.as_deref().unwrap_or(""),
                        t.amounts.keys().map(String::as_str),
                        &app.service.keys
                    )
                ),
                TransferStatus::Rejected => format!("transfer #{id} rejected"),
                s => format!(
                    "transfer #{id} approved; {s}: {}",
                    t.result.as_deref().unwrap_or("it runs shortly")
                ),
            };
            let flash = if t.status == TransferStatus::Rejected && t.decision_note.is_none() {
                Flash::Error(message)
            } else {
                Flash::Ok(message)
            };
            viewer.set_flash(flash).await;
            Ok(Redirect::to(&format!("/transfers/{id}")).into_response())
        }
        Err(TransferOpError::Service(e)) if !matches!(e, ServiceError::Internal(_)) => {
            let said = super::refusal::words(app, &e, &[]).await;
            detail_page(
                app,
                viewer,
                id,
                Some(Flash::Error(said)),
                crate::edge::status_of(&e).0,
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

/// POST /transfers/{id}/approve
/// The Approve form's box: a decider ticks it after reading the plan.
#[derive(Deserialize, Default)]
pub struct ApproveForm {
    #[serde(default)]
    confirm: String,
}

async fn page_approve(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
    Form(f): Form<ApproveForm>,
) -> Result<Response, PageError> {
    if f.confirm != "yes" {
        // Who may not decide hears that first; a decider, what is missing.
        app.transfer_desk()
            .decidable(&viewer.principal, id, "approve")
            .await?;
        return Err(PageError::Invalid(format!(
            "approving transfer #{id} needs confirming: tick the box next to Approve"
        )));
    }
    let result = app.transfer_desk().approve(&viewer.principal, id).await;
    decided(&app, &viewer, id, result).await
}

#[derive(Deserialize)]
pub struct RejectForm {
    #[serde(default)]
    note: String,
}

/// POST /transfers/{id}/reject (`note`)
async fn page_reject(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
    Form(f): Form<RejectForm>,
) -> Result<Response, PageError> {
    let result = app
        .transfer_desk()
        .reject(&viewer.principal, id, &f.note)
        .await;
    decided(&app, &viewer, id, result).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn form_rows_pair_up_in_order_and_empty_rows_are_skipped() {
        let (typed, req) = parse_request_form(fields(&[
            ("csrf", "x"),
            ("from", ""),
            ("to", "cv"),
            ("key", "requests.nvidia.com/gpu"),
            ("amount", "2"),
            ("key", ""),
            ("amount", ""),
            ("key", "pods"),
            ("amount", "5"),
            ("reason", "training run"),
            ("revert_at", "2030-01-02T03:04"),
        ]));
        let req = req.unwrap();
        assert_eq!(req.from, None, "empty from: more from the parent");
        assert_eq!(req.to, "cv");
        assert_eq!(req.amounts.len(), 2);
        assert_eq!(req.amounts["pods"].to_string(), "5");
        assert_eq!(
            req.revert_at,
            quota::time::parse_rfc3339("2030-01-02T03:04:00Z")
        );
        assert_eq!(typed.rows.len(), 2, "the form comes back as typed");
    }

    #[test]
    fn form_errors_name_the_key() {
        let err = |pairs: &[(&str, &str)]| parse_request_form(fields(pairs)).1.unwrap_err();
        assert_eq!(
            err(&[("key", "pods"), ("amount", "")]),
            "pods has no amount"
        );
        assert!(err(&[("key", "pods"), ("amount", "lots")]).starts_with("pods: 'lots'"));
        assert_eq!(
            err(&[
                ("key", "pods"),
                ("amount", "1"),
                ("key", "pods"),
                ("amount", "2")
            ]),
            "pods is given twice"
        );
        assert!(err(&[("key", "pods"), ("amount", "1"), ("revert_at", "soon")]).contains("soon"));
    }
}
