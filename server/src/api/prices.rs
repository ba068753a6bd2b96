//! `GET /api/v1/prices`: the price list in force (docs/budgets.md §3) —
//! where it came from, each version newest first with its weights per
//! resource and model and whether it is in force, the currency, and the
//! QoS multipliers. Any authenticated caller may read it: prices are what
//! every budget is charged at.

use crate::authz::Principal;
use crate::edge::AppState;
use crate::service::prices::PricesView;
use axum::extract::State;
use axum::Json;

pub async fn get(State(app): State<AppState>, _p: Principal) -> Json<serde_json::Value> {
    let s = &app.service;
    Json(PricesView::of(&s.price_book.current(), s.prices, s.now()).to_json())
}
