//! Transfers for people (§6, docs/semantics.md): the pages and the JSON API over
//! [`TransferService`](crate::service::transfers::TransferService), with one set of
//! authorised operations both go through.
//!
//! Who may do what (`authz::can_*_transfer`):
//! - **see** a transfer: admins, and whoever sees either end; others get
//!   404, as for a transfer that does not exist;
//! - **request**: an owner of the quota that pays — `from`, or, asking for
//!   more from the parent, the destination. The destination need not be
//!   visible to the requester (a team gives to a sibling it cannot see);
//! - **approve / reject**: an admin, or an owner of the lowest common
//!   ancestor of both ends or of any ancestor of it — so an owner of `nlp`
//!   cannot approve its own `nlp → cv` (they meet at the parent), nor its
//!   own request for more from the parent, but decides moves inside `nlp`.
//!
//! Every request, approval and rejection is audited here (the expiry and a
//! loan's return by the service itself, as `bizrq`).

use super::auth::Viewer;
use super::PageError;
use crate::authz::{self, Principal, Tree};
use crate::http::{ApiError, AppState};
use crate::service::audit::{action, transfer_json, transfer_summary, transfer_target};
use crate::service::transfers::{
    Transfer, TransferFilter, TransferRequest, TransferStatus, DEFAULT_TTL_MS,
};
use crate::service::ServiceError;
use app::layout::Flash;
use app::transfers::{PlanRow, RequestForm, TransferDetail, TransferQuery, TransferRow};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use quota::{Quota, ResourceList};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

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

/// The JSON API (`/api/v1/transfers…`); the caller's router authenticates.
pub fn api() -> Router<crate::http::AppState> {
    Router::new()
        .route("/api/v1/transfers", get(api_list).post(api_request))
        .route("/api/v1/transfers/{id}", get(api_get))
        .route("/api/v1/transfers/{id}/approve", post(api_approve))
        .route("/api/v1/transfers/{id}/reject", post(api_reject))
}

/// Why an operation on transfers was refused.
#[derive(Debug, thiserror::Error)]
pub enum TransferOpError {
    /// Missing, or not the caller's to see.
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    /// A per-user cap on requests (429); retry after so many seconds.
    #[error("{0}")]
    TooMany(String, u64),
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Requests a user may have waiting for a decision at once.
pub const MAX_OPEN_REQUESTS: i64 = 20;
/// Requests a user may make in an hour.
pub const MAX_REQUESTS_PER_HOUR: i64 = 30;
const HOUR_MS: i64 = 3_600_000;

impl From<TransferOpError> for ApiError {
    fn from(e: TransferOpError) -> Self {
        match e {
            TransferOpError::NotFound(m) => ApiError::Service(ServiceError::NotFound(m)),
            TransferOpError::Forbidden(m) => ApiError::Forbidden(m),
            TransferOpError::TooMany(m, secs) => ApiError::TooMany(m, secs),
            TransferOpError::Service(e) => ApiError::Service(e),
        }
    }
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

fn not_found(id: i64) -> TransferOpError {
    TransferOpError::NotFound(format!("transfer {id} not found"))
}

/// The tree as it is now: who sees and owns what, and where transfers meet.
struct Scope {
    quotas: BTreeMap<String, Quota>,
    tree: Tree,
}

impl Scope {
    async fn load(app: &AppState) -> Result<Scope, ServiceError> {
        let all = app.service.list().await?;
        let tree = Tree::from_quotas(&all);
        let quotas = all.into_iter().map(|q| (q.name().to_string(), q)).collect();
        Ok(Scope { quotas, tree })
    }

    fn sees(&self, p: &Principal, t: &Transfer) -> bool {
        authz::can_view_transfer(p, t.from_quota.as_deref(), &t.to_quota, &self.tree)
    }

    /// Where the ends meet: the plan's, once it is made; else the tree's.
    fn lca(&self, t: &Transfer) -> Option<String> {
        t.plan.as_ref().map(|p| p.lca.clone()).or_else(|| {
            quota::transfer::approvers_scope(&self.quotas, t.from_quota.as_deref(), &t.to_quota)
                .ok()
        })
    }

    fn may_decide(&self, p: &Principal, t: &Transfer) -> bool {
        authz::can_decide_transfer(p, self.lca(t).as_deref(), &self.tree)
    }
}

/// The transfers `p` may see, newest first.
/// `scope`: the tree, when the caller has it (else read for non-admins).
async fn list(
    app: &AppState,
    p: &Principal,
    mut filter: TransferFilter,
    scope: Option<&Scope>,
) -> Result<Vec<Transfer>, TransferOpError> {
    let want = filter.limit.unwrap_or(100).clamp(1, 1000) as usize;
    if p.is_admin {
        return Ok(app.transfers.list(&filter).await?);
    }
    // Filtered after reading: read as many as one page may hold.
    filter.limit = Some(1000);
    let loaded;
    let scope = match scope {
        Some(s) => s,
        None => {
            loaded = Scope::load(app).await?;
            &loaded
        }
    };
    let mut out: Vec<Transfer> = app
        .transfers
        .list(&filter)
        .await?
        .into_iter()
        .filter(|t| scope.sees(p, t))
        .collect();
    out.truncate(want);
    Ok(out)
}

/// One transfer, if `p` may see it, and whether `p` may decide it.
async fn get_one(
    app: &AppState,
    p: &Principal,
    id: i64,
) -> Result<(Transfer, Scope), TransferOpError> {
    let t = match app.transfers.get(id).await {
        Ok(t) => t,
        Err(ServiceError::NotFound(_)) => return Err(not_found(id)),
        Err(e) => return Err(e.into()),
    };
    let scope = Scope::load(app).await?;
    if !scope.sees(p, &t) {
        return Err(not_found(id));
    }
    Ok((t, scope))
}

async fn request(
    app: &AppState,
    p: &Principal,
    req: TransferRequest,
) -> Result<Transfer, TransferOpError> {
    let scope = Scope::load(app).await?;
    let payer = req.from.as_deref().unwrap_or(&req.to);
    // Both ends answer as a quota that does not exist unless the requester
    // sees them: a request can then neither probe which names exist nor
    // mail the owners of quotas the requester knows nothing of. (The payer
    // first: a caller that may not give out of it learns nothing more.)
    let unseen = |end: &str| {
        (!p.is_admin && !authz::can_view(p, end, &scope.tree))
            .then(|| TransferOpError::NotFound(format!("bizrq {end} not found")))
    };
    if let Some(e) = unseen(payer) {
        return Err(e);
    }
    if !authz::can_request_transfer(p, req.from.as_deref(), &req.to, &scope.tree) {
        return Err(TransferOpError::Forbidden(match &req.from {
            Some(f) => format!("only an owner of {f} may give quota out of it"),
            None => format!("only an owner of {} may ask its parent for more", req.to),
        }));
    }
    if let Some(e) = unseen(&req.to) {
        return Err(e);
    }
    // One request at a time in this process, so the caps below hold.
    let _gate = app.portal.transfer_gate.lock().await;
    if !p.is_admin {
        let now = app.service.now();
        let (open, recent, first) = app
            .portal
            .sql
            .requests_by(p.actor(), now - HOUR_MS)
            .await
            .map_err(ServiceError::from)?;
        if open >= MAX_OPEN_REQUESTS {
            return Err(TransferOpError::TooMany(
                format!(
                    "you have {open} transfer requests waiting for a decision, the most allowed; \
                     wait for them to be decided or expire"
                ),
                3600,
            ));
        }
        if recent >= MAX_REQUESTS_PER_HOUR {
            let secs = (first.unwrap_or(now) + HOUR_MS - now).max(1000) / 1000;
            return Err(TransferOpError::TooMany(
                format!(
                    "you made {recent} transfer requests in the last hour, the most allowed; \
                     try again in {} minutes",
                    (secs + 59) / 60
                ),
                secs as u64,
            ));
        }
    }
    let t = app
        .transfers
        .request(req, p.actor(), app.service.now(), DEFAULT_TTL_MS)
        .await?;
    app.audit(
        p,
        action::TRANSFER_REQUEST,
        &transfer_target(&t),
        None,
        Some(transfer_json(&t)),
        &format!("{}; {}", transfer_summary(&t), t.reason),
    )
    .await;
    Ok(t)
}

/// The check both decisions make: visible (else 404), and `p` may decide.
async fn decidable(
    app: &AppState,
    p: &Principal,
    id: i64,
    verb: &str,
) -> Result<Transfer, TransferOpError> {
    let (t, scope) = get_one(app, p, id).await?;
    if !scope.may_decide(p, &t) {
        let who = match scope.lca(&t) {
            Some(l) => format!("an admin or an owner of {l} (where both ends meet) or above"),
            None => "an admin (its quotas are gone)".to_string(),
        };
        return Err(TransferOpError::Forbidden(format!(
            "only {who} may {verb} transfer {id}"
        )));
    }
    Ok(t)
}

async fn approve(app: &AppState, p: &Principal, id: i64) -> Result<Transfer, TransferOpError> {
    let before = decidable(app, p, id, "approve").await?;
    let result = app
        .transfers
        .approve(id, p.actor(), app.service.now())
        .await;
    let after = match &result {
        Ok(t) => t.clone(),
        // Refused before anything changed: nothing to log.
        Err(ServiceError::Conflict(_) | ServiceError::NotFound(_)) => return Ok(result?),
        // Approved, then the execution stopped (recovery finishes it).
        Err(_) => app.transfers.get(id).await?,
    };
    let outcome = match after.status {
        TransferStatus::Done => "executed".to_string(),
        TransferStatus::Rejected => format!(
            "refused on re-validation: {}",
            after.result.as_deref().unwrap_or("")
        ),
        s => format!(
            "{s}: {}",
            after.result.as_deref().unwrap_or("the sweep runs it")
        ),
    };
    app.audit(
        p,
        action::TRANSFER_APPROVE,
        &transfer_target(&after),
        Some(transfer_json(&before)),
        Some(transfer_json(&after)),
        &format!("{}; {outcome}", transfer_summary(&after)),
    )
    .await;
    Ok(result?)
}

async fn reject(
    app: &AppState,
    p: &Principal,
    id: i64,
    note: &str,
) -> Result<Transfer, TransferOpError> {
    let before = decidable(app, p, id, "reject").await?;
    let note = note.trim();
    let after = app
        .transfers
        .reject(id, p.actor(), note, app.service.now())
        .await?;
    let detail = match note {
        "" => transfer_summary(&after),
        n => format!("{}; {n}", transfer_summary(&after)),
    };
    app.audit(
        p,
        action::TRANSFER_REJECT,
        &transfer_target(&after),
        Some(transfer_json(&before)),
        Some(transfer_json(&after)),
        &detail,
    )
    .await;
    Ok(after)
}

// ---- JSON API ----

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// Comma-separated statuses.
    #[serde(default)]
    status: String,
    #[serde(default)]
    quota: String,
    #[serde(default)]
    requested_by: String,
    #[serde(default)]
    before: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

fn parse_statuses(s: &str) -> Result<Vec<TransferStatus>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            TransferStatus::parse(s).ok_or_else(|| {
                let all: Vec<&str> = TransferStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("'{s}' is not a transfer status: use {}", all.join(", "))
            })
        })
        .collect()
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

impl ListParams {
    fn filter(&self) -> Result<TransferFilter, String> {
        Ok(TransferFilter {
            statuses: parse_statuses(&self.status)?,
            quota: non_empty(&self.quota),
            requested_by: non_empty(&self.requested_by),
            before_id: self.before,
            limit: self.limit,
        })
    }
}

/// GET /api/v1/transfers?status=a,b&quota=&requestedBy=&before=&limit=
async fn api_list(
    State(app): State<AppState>,
    p: Principal,
    Query(q): Query<ListParams>,
) -> Result<Response, ApiError> {
    let filter = q.filter().map_err(ApiError::BadRequest)?;
    let items = list(&app, &p, filter, None).await?;
    Ok(Json(serde_json::json!({ "items": items })).into_response())
}

/// GET /api/v1/transfers/{id}
async fn api_get(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<i64>,
) -> Result<Response, ApiError> {
    let (t, _) = get_one(&app, &p, id).await?;
    Ok(Json(t).into_response())
}

/// POST /api/v1/transfers: a [`TransferRequest`]; 201 with the transfer.
async fn api_request(
    State(app): State<AppState>,
    p: Principal,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let req: TransferRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid transfer request: {e}")))?;
    let t = request(&app, &p, req).await?;
    Ok((StatusCode::CREATED, Json(t)).into_response())
}

/// POST /api/v1/transfers/{id}/approve: the transfer as it ended (`done`,
/// `rejected` by re-validation, or `approved` and waiting).
async fn api_approve(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<i64>,
) -> Result<Response, ApiError> {
    Ok(Json(approve(&app, &p, id).await?).into_response())
}

#[derive(Deserialize, Default)]
struct RejectBody {
    #[serde(default)]
    note: String,
}

/// POST /api/v1/transfers/{id}/reject, optionally `{"note": "…"}`.
async fn api_reject(
    State(app): State<AppState>,
    p: Principal,
    Path(id): Path<i64>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let b: RejectBody = if body.iter().all(u8::is_ascii_whitespace) {
        RejectBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("invalid rejection: {e}")))?
    };
    Ok(Json(reject(&app, &p, id, &b.note).await?).into_response())
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
        requested_at: quota::time::format_minute(t.requested_at),
        expires_at: quota::time::format_minute(t.expires_at),
        status: t.status.to_string(),
        revert_at: t.revert_at.map(quota::time::format_minute),
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
    let scope = Scope::load(app).await?;
    let rows = list(app, &viewer.principal, filter, Some(&scope)).await?;
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
    match request(&app, &viewer.principal, req).await {
        Ok(t) => {
            viewer
                .set_flash(Flash::Ok(format!(
                    "transfer #{} requested; it waits for approval until {} UTC",
                    t.id,
                    quota::time::format_minute(t.expires_at)
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
    let (t, scope) = get_one(app, &viewer.principal, id).await?;
    let detail = TransferDetail {
        row: row(&t),
        lca: scope.lca(&t),
        decided_by: t.decided_by.clone(),
        decided_at: t.decided_at.map(quota::time::format_minute),
        decision_note: t.decision_note.clone().filter(|n| !n.is_empty()),
        result: t.result.clone(),
        finished_at: t.finished_at.map(quota::time::format_minute),
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
    let result = approve(&app, &viewer.principal, id).await;
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
    let result = reject(&app, &viewer.principal, id, &f.note).await;
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
