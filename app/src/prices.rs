//! The /prices page: the price list per model in force (docs/budgets.md
//! §3), each version with its weights and what an hour costs, the
//! currency budgets are shown in, and the QoS multipliers. The server
//! computes every string; this only renders.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One weight as the page shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightRow {
    /// `nvidia.com/gpu`
    pub resource: String,
    /// `H100`, or `others` (the models not named).
    pub model: String,
    /// `2.5`
    pub weight: String,
    /// What an hour of one card costs: `6.25 EUR` (or `2.5 h` of budget).
    pub per_hour: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionBlock {
    /// `From 2026-07-01 00:00 UTC · in force` / `· announced`.
    pub title: String,
    pub in_force: bool,
    pub rows: Vec<WeightRow>,
    /// `Any other resource or model: 1 (2.5 EUR per hour).`
    pub default_line: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PricesPage {
    /// `From file /etc/bizrq/prices.yaml, loaded 2026-11-25 10:00 UTC`, or
    /// that none is configured.
    pub source: String,
    /// `Budgets are shown in EUR: 2.5 EUR per weighted card-hour`, or in
    /// resource-hours.
    pub currency: String,
    /// `QoS multipliers: Guaranteed 1 · Burstable 1 · BestEffort 1`.
    pub qos: String,
    /// Newest first.
    pub versions: Vec<VersionBlock>,
}

#[cfg(feature = "ssr")]
pub fn render_prices_page(viewer: Viewer, page: PricesPage, flash: Option<Flash>) -> String {
    let versions = if page.versions.is_empty() {
        view! { <p class="empty">"No price list: every resource and model is charged at weight 1."</p> }.into_any()
    } else {
        page.versions
            .into_iter()
            .map(|v| {
                let class = if v.in_force { "card price-version in-force" } else { "card price-version" };
                view! {
                    <section class=class>
                        <h3>{v.title}</h3>
                        <table class="prices">
                            <thead><tr><th>"Resource"</th><th>"Model"</th><th class="num">"Weight"</th><th class="num">"Per hour"</th></tr></thead>
                            <tbody>{v.rows.into_iter().map(|r| view! {
                                <tr>
                                    <td class="key">{r.resource}</td>
                                    <td>{r.model}</td>
                                    <td class="num">{r.weight}</td>
                                    <td class="num">{r.per_hour}</td>
                                </tr>
                            }).collect_view()}</tbody>
                        </table>
                        <p class="hint">{v.default_line}</p>
                    </section>
                }
            })
            .collect_view()
            .into_any()
    };
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Prices".into() section=Section::None flash=flash>
                <p>{page.source}</p>
                <p>{page.currency}</p>
                <p>{page.qos}</p>
                <p class="hint">"A card-hour budget is charged weight × QoS multiplier for each hour a card is held, at the weights in force at each instant: a price change splits a running workload's accrual exactly at its time. A reservation assumes the highest price in force over its declared run."</p>
                {versions}
            </Layout>
        }
    })
}
