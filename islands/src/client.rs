//! The browser half of the islands: fetching JSON and changing the page the
//! server rendered. Errors are quiet by design: the server-rendered page
//! stays as it was, and a link still works by reloading.

use super::{LiveReply, Point, SamplesReply, POLL_SECONDS};
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Element, HtmlElement, MouseEvent};

thread_local! {
    /// Points of the charts fetched so far, by "range|chart|key", for the
    /// hover readout. None: a fetch is under way.
    static POINTS: RefCell<HashMap<String, Option<Rc<Vec<Point>>>>> = RefCell::new(HashMap::new());
}

/// GET `url` as JSON (with the session cookie, as the page itself).
async fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> Option<T> {
    let window = web_sys::window()?;
    let init = web_sys::RequestInit::new();
    init.set_credentials(web_sys::RequestCredentials::SameOrigin);
    let resp = JsFuture::from(window.fetch_with_str_and_init(url, &init))
        .await
        .ok()?;
    let resp: web_sys::Response = resp.dyn_into().ok()?;
    if !resp.ok() {
        return None;
    }
    let text = JsFuture::from(resp.text().ok()?).await.ok()?;
    serde_json::from_str(&text.as_string()?).ok()
}

fn encode(s: &str) -> String {
    js_sys::encode_uri_component(s).into()
}

fn samples_url(quota: &str, key: &str, chart: &str, range: &str) -> String {
    format!(
        "/api/v1/quotas/{}/samples?key={}&chart={}&range={}",
        encode(quota),
        encode(key),
        encode(chart),
        encode(range)
    )
}

fn target_element(ev: &MouseEvent) -> Option<Element> {
    ev.target()?.dyn_into::<Element>().ok()
}

fn section_of(ev: &MouseEvent) -> Option<HtmlElement> {
    ev.current_target()?.dyn_into::<HtmlElement>().ok()
}

/// A click on a range link: the charts of that range replace the ones
/// shown, and the address says which range is shown (no navigation). A
/// click meant for a new tab or window is left to the browser.
pub fn range_click(quota: &str, ev: MouseEvent) {
    if ev.button() != 0 || ev.ctrl_key() || ev.meta_key() || ev.shift_key() || ev.alt_key() {
        return;
    }
    let Some(link) = target_element(&ev).and_then(|t| t.closest("a[data-range]").ok().flatten())
    else {
        return;
    };
    let (Some(range), Some(section)) = (link.get_attribute("data-range"), section_of(&ev)) else {
        return;
    };
    ev.prevent_default();
    if let Ok(links) = section.query_selector_all("a[data-range]") {
        for i in 0..links.length() {
            if let Some(a) = links.item(i).and_then(|n| n.dyn_into::<Element>().ok()) {
                if a.get_attribute("data-range").as_deref() == Some(range.as_str()) {
                    let _ = a.set_attribute("aria-current", "true");
                } else {
                    let _ = a.remove_attribute("aria-current");
                }
            }
        }
    }
    let _ = section.set_attribute("data-range", &range);
    if let Some(label) = section.query_selector("[data-range-label]").ok().flatten() {
        label.set_text_content(link.get_attribute("data-range-label").as_deref());
    }
    if let Some(w) = web_sys::window() {
        if let (Ok(history), Ok(href)) = (w.history(), link.get_attribute("href").ok_or(())) {
            let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&href));
        }
    }
    let Ok(panels) = section.query_selector_all(".chart-panel[data-key]") else {
        return;
    };
    for i in 0..panels.length() {
        let Some(panel) = panels.item(i).and_then(|n| n.dyn_into::<Element>().ok()) else {
            continue;
        };
        let key = panel.get_attribute("data-key").unwrap_or_default();
        let chart = panel.get_attribute("data-chart").unwrap_or_default();
        let url = samples_url(quota, &key, &chart, &range);
        let range = range.clone();
        let _ = panel.set_attribute("aria-busy", "true");
        spawn_local(async move {
            if let Some(reply) = get_json::<SamplesReply>(&url).await {
                // A later click may have moved on: only the range shown is drawn.
                if panel
                    .closest(".chart-section")
                    .ok()
                    .flatten()
                    .and_then(|s| s.get_attribute("data-range"))
                    == Some(range.clone())
                {
                    show(&panel, &reply);
                }
                remember(&range, &chart, &key, reply.points);
            }
            let _ = panel.remove_attribute("aria-busy");
        });
    }
}

/// Puts a fetched chart into its panel: the SVG, and the values table's
/// rows (as text: nothing fetched is parsed as HTML but the server's SVG).
fn show(panel: &Element, reply: &SamplesReply) {
    if let Some(fig) = panel.query_selector("figure").ok().flatten() {
        fig.set_inner_html(&reply.svg);
    }
    if let Some(out) = panel.query_selector(".readout").ok().flatten() {
        out.set_text_content(Some(""));
    }
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    if let Some(body) = panel.query_selector("table.values tbody").ok().flatten() {
        body.set_text_content(None);
        for row in &reply.rows {
            let Ok(tr) = doc.create_element("tr") else {
                return;
            };
            for (i, cell) in row.iter().enumerate() {
                let Ok(td) = doc.create_element(if i == 0 { "th" } else { "td" }) else {
                    return;
                };
                if i == 0 {
                    let _ = td.set_attribute("scope", "row");
                } else {
                    let _ = td.set_attribute("class", "num");
                }
                td.set_text_content(Some(cell));
                let _ = tr.append_child(&td);
            }
            let _ = body.append_child(&tr);
        }
    }
}

fn cache_key(range: &str, chart: &str, key: &str) -> String {
    format!("{range}|{chart}|{key}")
}

fn remember(range: &str, chart: &str, key: &str, points: Vec<Point>) {
    POINTS.with(|p| {
        p.borrow_mut()
            .insert(cache_key(range, chart, key), Some(Rc::new(points)));
    });
}

/// The pointer over a chart: the nearest point's values under it. The
/// points of a range are fetched the first time they are needed.
pub fn hover(quota: &str, ev: MouseEvent) {
    let Some(panel) =
        target_element(&ev).and_then(|t| t.closest(".chart-panel[data-key]").ok().flatten())
    else {
        return;
    };
    let range = section_of(&ev)
        .and_then(|s| s.get_attribute("data-range"))
        .unwrap_or_default();
    let key = panel.get_attribute("data-key").unwrap_or_default();
    let chart = panel.get_attribute("data-chart").unwrap_or_default();
    let ck = cache_key(&range, &chart, &key);
    let known = POINTS.with(|p| p.borrow().get(&ck).cloned());
    let points = match known {
        Some(Some(points)) => points,
        Some(None) => return,
        None => {
            POINTS.with(|p| p.borrow_mut().insert(ck, None));
            let url = samples_url(quota, &key, &chart, &range);
            spawn_local(async move {
                match get_json::<SamplesReply>(&url).await {
                    Some(reply) => remember(&range, &chart, &key, reply.points),
                    // Asked again on the next move.
                    None => POINTS.with(|p| {
                        p.borrow_mut().remove(&cache_key(&range, &chart, &key));
                    }),
                }
            });
            return;
        }
    };
    // The pointer in viewBox units (the SVG is scaled to the page), then
    // as a time, by where the SVG says its time axis is drawn. Of the two
    // frames, the one shown has a width.
    let Some(svg) = panel.query_selector_all("svg[data-t0]").ok().and_then(|l| {
        (0..l.length())
            .filter_map(|i| l.item(i).and_then(|n| n.dyn_into::<Element>().ok()))
            .find(|e| e.get_bounding_client_rect().width() > 0.0)
    }) else {
        return;
    };
    let rect = svg.get_bounding_client_rect();
    let num = |a: &str| svg.get_attribute(a).and_then(|v| v.parse::<f64>().ok());
    let view_w = svg.get_attribute("viewBox").and_then(|v| {
        v.split_whitespace()
            .nth(2)
            .and_then(|w| w.parse::<f64>().ok())
    });
    let (Some(view_w), Some(x0), Some(x1), Some(t0), Some(t1)) = (
        view_w,
        num("data-x0"),
        num("data-x1"),
        num("data-t0"),
        num("data-t1"),
    ) else {
        return;
    };
    if x1 <= x0 {
        return;
    }
    let x = (f64::from(ev.client_x()) - rect.left()) * view_w / rect.width();
    let t = t0 + (x - x0) / (x1 - x0) * (t1 - t0);
    let nearest = points.iter().min_by(|a, b| {
        (a.at_ms as f64 - t)
            .abs()
            .partial_cmp(&(b.at_ms as f64 - t).abs())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    if let (Some(p), Some(out)) = (nearest, panel.query_selector(".readout").ok().flatten()) {
        out.set_text_content(Some(&p.readout));
    }
}

/// The pointer left the charts: no readout.
pub fn leave(ev: MouseEvent) {
    if let Some(section) = section_of(&ev) {
        if let Ok(outs) = section.query_selector_all(".readout") {
            for i in 0..outs.length() {
                if let Some(n) = outs.item(i) {
                    n.set_text_content(Some(""));
                }
            }
        }
    }
}

/// Asks for the live counts every [`POLL_SECONDS`] and sets the badge.
pub fn poll_live(set: WriteSignal<usize>) {
    set_interval(
        move || {
            spawn_local(async move {
                if let Some(live) = get_json::<LiveReply>("/api/v1/live").await {
                    set.set(live.open_alerts);
                }
            })
        },
        Duration::from_secs(POLL_SECONDS),
    );
}
