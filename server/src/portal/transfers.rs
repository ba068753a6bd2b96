//! The transfer pages (`/transfers…`), over the operations of
//! [`TransferDesk`](crate::service::transfer_ops::TransferDesk) (who may
//! see, request and decide: its module doc).

use super::auth::Viewer;
use super::PageError;
use crate::authz::{self, Principal};
use crate::http::AppState;
use crate::service::transfer_ops::{non_empty, parse_statuses, Scope, TransferOpError};
use crate::service::transfers::{Transfer, TransferFilter, TransferRequest, TransferStatus};
use crate::service::ServiceError;
use app::layout::Flash;
use app::transfers::{PlanRow, RequestForm, TransferDetail, TransferQuery, TransferRow};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use quota::ResourceList;
use serde::Deserialize;
use std::collections::BTreeSet;

/// Rows the list shows at most.
pub const LIST_ROWS: i64 = 200;

/// The pages (`/transfers…`).
pub fn pages() -> Router<crate::http::AppState> {
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

fn row(t: &Transfer) -> TransferRow {
    TransferRow {
        id: t.id,
        from: t.from_quota.clone(),
        to: t.to_quota.clone(),
        amounts: amounts(&t.amounts),
        reason: t.reason.clone(),
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
}

/// The request form's choices for `p`, with what was typed; None when `p`
/// owns nothing to give from.
fn request_form(p: &Principal, scope: &Scope, typed: RequestForm) -> Option<RequestForm> {
    let owned: Vec<String> = scope
        .quotas
        .keys()
        .filter(|q| authz::can_request_transfer(p, Some(q), q, &scope.tree))
        .cloned()
        .collect();
    if owned.is_empty() {
        return None;
    }
    let visible: Vec<String> = authz::visible_names(p, &scope.tree).into_iter().collect();
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
        keys: keys.into_iter().collect(),
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
    let rows = app
        .transfer_desk()
        .list(&viewer.principal, filter, Some(&scope))
        .await?;
    let form = request_form(&viewer.principal, &scope, typed);
    Ok((
        status,
        Html(app::transfers::render_transfers_page(
            viewer.page(),
            rows.iter().map(row).collect(),
            TransferQuery {
                status: q.status.clone(),
                quota: q.quota.clone(),
            },
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
    list_page(
        &app,
        &viewer,
        &q,
        RequestForm::default(),
        flash,
        StatusCode::OK,
    )
    .await
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
        Ok(TransferRequest {
            from: non_empty(&typed.from),
            to: typed.to.clone(),
            amounts: list,
            reason: typed.reason.clone(),
            revert_at,
        })
    })();
    (typed, parsed)
}

/// POST /transfers: a request → 303 to its page; refused → the list again
/// with the message, the form as typed: 422 for a form that does not read,
/// else the status of the service's refusal (`ServiceError::status`).
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
            refused(e.to_string(), typed, e.status().0).await
        }
        Err(e) => Err(e.into()),
    }
}

fn plan_rows(t: &Transfer) -> Vec<PlanRow> {
    let Some(plan) = &t.plan else {
        return Vec::new();
    };
    let list = |l: &ResourceList| {
        l.iter()
            .map(|(k, v)| format!("{k} {v}"))
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

async fn detail_page(
    app: &AppState,
    viewer: &Viewer,
    id: i64,
    flash: Option<Flash>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let (t, scope) = app.transfer_desk().get_one(&viewer.principal, id).await?;
    let detail = TransferDetail {
        row: row(&t),
        lca: scope.lca(&t),
        decided_by: t.decided_by.clone(),
        decided_at: t.decided_at.map(quota::time::format_when),
        decision_note: t.decision_note.clone().filter(|n| !n.is_empty()),
        result: t.result.clone(),
        finished_at: t.finished_at.map(quota::time::format_when),
        plan: plan_rows(&t),
        reverts: t.reverts,
        reverted_by: t.reverted_by,
        may_decide: t.status == TransferStatus::Requested
            && scope.may_decide(&viewer.principal, &t),
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
/// its page again with why not (the status of `ServiceError::status`);
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
                    t.result.as_deref().unwrap_or("")
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
            detail_page(
                app,
                viewer,
                id,
                Some(Flash::Error(e.to_string())),
                e.status().0,
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

/// POST /transfers/{id}/approve
async fn page_approve(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
) -> Result<Response, PageError> {
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
