//! GET /prices: the price list in force, for anyone logged in (rendered
//! by `app::prices`; the numbers come from `service::prices::PricesView`).

use super::auth::Viewer;
use super::PageError;
use crate::edge::AppState;
use crate::service::prices::PricesView;
use app::prices::{PricesPage, VersionBlock, WeightRow};
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use quota::budget::price_list_doc::ANY_MODEL;
use quota::budget::Weight;
use quota::time::format_when;

pub async fn page(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    let s = &app.service;
    let v = PricesView::of(&s.price_book.current(), s.prices, s.now());
    let flash = viewer.take_flash().await;
    Ok(Html(app::prices::render_prices_page(
        viewer.page(),
        page_of(&v),
        flash,
    ))
    .into_response())
}

/// The page's strings.
pub fn page_of(v: &PricesView) -> PricesPage {
    let source = if v.source.is_empty() {
        "No price list is configured (standalone: --price-list; cluster: the PriceList object 'default')."
            .to_string()
    } else {
        format!(
            "From {}, in force since {}.",
            v.source,
            format_when(v.loaded_ms)
        )
    };
    let currency = match &v.currency {
        Some(c) => format!(
            "Budgets are shown in {}: {} {} per weighted card-hour (or core-hour).",
            c.unit,
            quota::readable::grouped(c.per_card_hour),
            c.unit
        ),
        None => "Budgets are shown in weighted resource-hours (card-hours, core-hours): no currency is configured.".to_string(),
    };
    let m = |pm: i128| Weight(pm).to_string();
    let qos = format!(
        "QoS multipliers: Guaranteed {} · Burstable {} · BestEffort {}.",
        m(v.qos.guaranteed),
        m(v.qos.burstable),
        m(v.qos.best_effort)
    );
    let versions = v
        .versions
        .iter()
        .map(|ver| VersionBlock {
            title: format!("From {} · {}", format_when(ver.effective_ms), ver.state),
            in_force: ver.in_force,
            rows: ver
                .weights
                .iter()
                .map(|(r, model, w)| WeightRow {
                    resource: r.clone(),
                    model: if model == ANY_MODEL {
                        "others".into()
                    } else {
                        model.clone()
                    },
                    weight: w.to_string(),
                    per_hour: v.per_hour(*w),
                })
                .collect(),
            default_line: format!(
                "Any other resource or model: {} ({} per hour).{}",
                ver.default_weight,
                v.per_hour(ver.default_weight),
                match &ver.quality {
                    None => String::new(),
                    Some(q) => format!(
                        " Billed by quality of service: requests at Guaranteed {} · Burstable {} · BestEffort {} (cards always as Guaranteed); CPU and memory used above a Burstable request at {}, a BestEffort pod's use at {} (real usage).",
                        q.guaranteed, q.burstable_request, q.best_effort, q.above_request, q.best_effort
                    ),
                }
            ),
        })
        .collect();
    PricesPage {
        source,
        currency,
        qos,
        versions,
    }
}
