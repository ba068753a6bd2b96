//! The portal's islands: the few parts of its server-rendered pages that
//! do more when JavaScript runs. Every page is complete without them (links
//! and forms); an island only saves a reload or adds a readout.
//!
//! - [`ChartSection`] wraps a quota's charts. Its range links (`?range=30d`)
//!   are plain links; with the bundle loaded, a click fetches each chart of
//!   the new range from `GET /api/v1/quotas/{name}/samples` and swaps the
//!   SVG and its values table in place, and moving the pointer over a chart
//!   names the nearest point. The links to the quota's other charts
//!   (`data-follows-range`) then name the new range too (`links`).
//! - [`AlertsBadge`] is the navigation's count of open alerts; it asks
//!   `GET /api/v1/live` every [`POLL_SECONDS`] and redraws itself. On the
//!   overview (an element marked `data-live="overview"`) it asks
//!   `GET /api/v1/live/overview` instead and also redraws the quotas' bars
//!   and the "needs attention" section as the server drew them: one poll
//!   per page, and no island of its own.
//! - [`SortTable`] wraps a flat table: a click on a header marked
//!   `data-sort="num|text"` (or Enter or Space on it: such headers are
//!   made focusable when the island runs) orders the rows in place by their cells'
//!   `data-sort-value` (numbers compared exactly, as `i128`, never by the
//!   formatted text) or, without one, their text, and sets `aria-sort`.
//!   When the header holds the server's sort link, the address follows
//!   (`data-sort-url` on the table names the parameters).
//!   On the quota tree (`data-tree`) it sorts each level, keeping children
//!   under their parent, and its ▸/▾ links open and fold a level in place:
//!   ▸ fetches the rows the server would render under that quota
//!   (`GET /tree/rows`, HTML) and inserts them.
//!
//! The crate is built twice: with `ssr` into the server (the islands render
//! to HTML like any component, wrapped in `<leptos-island>`), and with
//! `hydrate` into the browser's WASM bundle, which only holds this crate:
//! no plotters, no quota rules, no server code. What the browser needs to
//! show (SVG, formatted values) comes ready-made in the JSON below.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "hydrate")]
mod client;
pub mod links;
pub mod order;

/// How often the badge asks for the count, in seconds.
pub const POLL_SECONDS: u64 = 15;

/// `GET /api/v1/quotas/{name}/samples?key=&range=&chart=`: one chart of one
/// range, drawn and tabulated by the server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SamplesReply {
    pub quota: String,
    pub key: String,
    /// `usage`, `burn-down` or `children`.
    pub chart: String,
    /// `24h`, `7d`, `30d`, `90d` or `1y`.
    pub range: String,
    /// What the range covers, in milliseconds since the epoch.
    pub from_ms: i64,
    pub to_ms: i64,
    /// The unit the values are shown in (`cards`, `GiB`, `card-hours`).
    pub unit: String,
    /// Every drawn point, oldest first, with its exact values. Where a
    /// time is drawn, each SVG says (`data-x0`, `data-x1`, `data-t0`,
    /// `data-t1`).
    pub points: Vec<Point>,
    /// The chart as inline SVG (the same bytes the page would render).
    pub svg: String,
    /// The values table: its column headings and rows of text.
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One point of a chart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    pub at_ms: i64,
    /// Exact quantities by series (`used`, `hard`, `remaining`, a child's
    /// name), as Kubernetes quantity strings.
    pub values: Vec<(String, String)>,
    /// One line a person reads: "2026-11-23 14:00 UTC · used 5 cards, hard 8 cards".
    pub readout: String,
}

/// `GET /api/v1/live`: what the page frame shows that changes by itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveReply {
    /// Open alerts on the quotas the caller may see.
    pub open_alerts: usize,
}

/// `GET /api/v1/live/overview`: what the overview shows that changes by
/// itself, drawn by the server with the page's own components.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverviewReply {
    /// Open alerts on the quotas the caller may see (as [`LiveReply`]).
    pub open_alerts: usize,
    /// The "needs attention" section, as HTML (`section.attention`).
    pub attention: String,
    /// The viewer's quota cards' changing parts.
    pub cards: Vec<CardLive>,
    /// The "Queued in your quotas" section, as HTML
    /// (`section.queued-mine`; empty when nothing waits).
    #[serde(default)]
    pub queued: String,
}

/// One overview card's changing parts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CardLive {
    /// The quota (`section.quota-card[data-quota]`).
    pub name: String,
    /// "3 workloads · 2 children".
    pub counts: String,
    /// The key bars, as HTML (the card's `.keys`).
    pub keys: String,
}

/// A quota's charts with their range links, as children rendered by the
/// server. The island adds behaviour only: clicks on `a[data-range]`,
/// pointer moves over `.chart-panel`.
#[island]
pub fn ChartSection(quota: String, range: String, children: Children) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    let (click, hover, leave) = {
        let q = quota.clone();
        (
            move |ev: leptos::ev::MouseEvent| client::range_click(&q, ev),
            move |ev: leptos::ev::MouseEvent| client::hover(&quota, ev),
            |ev: leptos::ev::MouseEvent| client::leave(ev),
        )
    };
    #[cfg(not(feature = "hydrate"))]
    let (click, hover, leave) = {
        let _ = quota;
        (
            |_: leptos::ev::MouseEvent| {},
            |_: leptos::ev::MouseEvent| {},
            |_: leptos::ev::MouseEvent| {},
        )
    };
    view! {
        <div class="chart-section" data-range=range on:click=click on:mousemove=hover on:mouseleave=leave>
            {children()}
        </div>
    }
}

/// The count of open alerts beside the navigation's Alerts link; hidden at
/// zero, and kept current by polling.
#[island]
pub fn AlertsBadge(count: usize) -> impl IntoView {
    let (n, _set_n) = signal(count);
    #[cfg(feature = "hydrate")]
    client::poll_live(_set_n);
    view! {
        <span class="badge" title="open alerts" hidden=move || n.get() == 0>
            {move || n.get()}
        </span>
    }
}

/// A table whose headers sort its rows in place; children rendered by the
/// server (a `<table>` whose sortable `<th>` carry `data-sort`). A table
/// marked `data-tree` is the quota tree: each level is sorted, children
/// stay under their parent, and its ▸/▾ links open and fold in place.
#[island]
pub fn SortTable(children: Children) -> impl IntoView {
    let root = NodeRef::<leptos::html::Div>::new();
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if let Some(d) = root.get() {
            client::focusable_headers(&d);
        }
    });
    #[cfg(feature = "hydrate")]
    let (click, key) = (client::table_click, client::table_key);
    #[cfg(not(feature = "hydrate"))]
    let (click, key) = (
        |_: leptos::ev::MouseEvent| {},
        |_: leptos::ev::KeyboardEvent| {},
    );
    view! { <div class="sort-table" node_ref=root on:click=click on:keydown=key>{children()}</div> }
}

/// The WASM bundle's entry point: called once the module is loaded, before
/// the islands on the page are hydrated (see the server's `boot.js`).
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    leptos::mount::hydrate_islands();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_round_trip_in_camel_case() {
        let r = SamplesReply {
            quota: "nlp".into(),
            key: "requests.nvidia.com/gpu".into(),
            chart: "usage".into(),
            range: "7d".into(),
            from_ms: 1,
            to_ms: 2,
            unit: "cards".into(),
            points: vec![Point {
                at_ms: 1,
                values: vec![("used".into(), "5".into())],
                readout: "x".into(),
            }],
            svg: "<svg/>".into(),
            columns: vec!["Time (UTC)".into()],
            rows: vec![vec!["t".into()]],
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"fromMs\":1") && text.contains("\"atMs\":1"));
        assert_eq!(serde_json::from_str::<SamplesReply>(&text).unwrap(), r);
        let live = serde_json::to_string(&LiveReply { open_alerts: 3 }).unwrap();
        assert_eq!(live, "{\"openAlerts\":3}");
        let o = OverviewReply {
            open_alerts: 1,
            attention: "<section/>".into(),
            cards: vec![CardLive {
                name: "nlp".into(),
                counts: "1 workloads · 0 children".into(),
                keys: "<span/>".into(),
            }],
            queued: "<section class=\"queued-mine\"/>".into(),
        };
        let text = serde_json::to_string(&o).unwrap();
        assert!(text.contains("\"openAlerts\":1"), "{text}");
        assert!(text.contains("\"queued\":"), "{text}");
        assert_eq!(serde_json::from_str::<OverviewReply>(&text).unwrap(), o);
    }
}
