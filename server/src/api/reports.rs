//! `GET /api/v1/reports`: budget consumption from the ledger, grouped and
//! bucketed (`crate::reports`; docs/budgets.md "Reports"). Authenticated; a member
//! sees only the quotas under their roles. `?format=csv` answers the same
//! report as CSV. Every parameter is checked: a wrong one is 422 with
//! what to fix, and nothing is read.

use crate::authz::Principal;
use crate::edge::{ApiError, AppState};
use crate::reports::{self, params_of, Format, ReportError};
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

impl From<ReportError> for ApiError {
    fn from(e: ReportError) -> ApiError {
        match e {
            ReportError::Invalid(m) => ApiError::Invalid(m),
            ReportError::Service(s) => ApiError::Service(s),
        }
    }
}

pub async fn get(
    State(app): State<AppState>,
    p: Principal,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = params_of(raw.as_deref())?;
    let (spec, format) = reports::parse(&params, app.service.now())?;
    // A heavy request (`crate::heavy`): a place before the ledger is read,
    // the report aggregated and written on the render threads.
    let place = app.portal.heavy.enter(&p.username)?;
    let read = reports::read(&app.service, &app.portal.sql, &p, spec).await?;
    Ok(match format {
        Format::Json => Json(
            place
                .render(move || read.make().map(|m| reports::to_json(&m)))
                .await??,
        )
        .into_response(),
        Format::Csv => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"bizrq-report.csv\"",
                ),
            ],
            place
                .render(move || read.make().map(|m| reports::to_csv(&m)))
                .await??,
        )
            .into_response(),
    })
}
