//! The browser half of the islands: fetching JSON and changing the page the
//! server rendered. Errors are quiet by design: the server-rendered page
//! stays as it was, and a link still works by reloading.

use super::order::{compare, sort_by, toggle_list, tree_order, SortKey};
use super::{LiveReply, OverviewReply, Point, SamplesReply, POLL_SECONDS};
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
    serde_json::from_str(&get_html(url).await?).ok()
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
        // The links to the other charts open them in the range shown now.
        if let Some(follow) = w
            .document()
            .and_then(|d| d.query_selector_all("a[data-follows-range]").ok())
        {
            for i in 0..follow.length() {
                if let Some(a) = follow.item(i).and_then(|n| n.dyn_into::<Element>().ok()) {
                    if let Some(href) = a.get_attribute("href") {
                        let _ = a.set_attribute("href", &super::links::with_range(&href, &range));
                    }
                }
            }
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

/// Asks for the live counts every [`POLL_SECONDS`] and sets the badge; on
/// the overview, asks for its live parts (the count among them) and
/// redraws them too.
pub fn poll_live(set: WriteSignal<usize>) {
    set_interval(
        move || {
            spawn_local(async move {
                let overview = web_sys::window()
                    .and_then(|w| w.document())
                    .and_then(|d| d.query_selector("[data-live=overview]").ok().flatten())
                    .is_some();
                if overview {
                    if let Some(reply) = get_json::<OverviewReply>("/api/v1/live/overview").await {
                        set.set(reply.open_alerts);
                        redraw_overview(&reply);
                    }
                } else if let Some(live) = get_json::<LiveReply>("/api/v1/live").await {
                    set.set(live.open_alerts);
                }
            })
        },
        Duration::from_secs(POLL_SECONDS),
    );
}

// ---- Sortable tables ----

fn modified(ev: &MouseEvent) -> bool {
    ev.button() != 0 || ev.ctrl_key() || ev.meta_key() || ev.shift_key() || ev.alt_key()
}

fn children_of(e: &Element) -> Vec<Element> {
    let list = e.children();
    (0..list.length()).filter_map(|i| list.item(i)).collect()
}

/// Sorts the header's table by its column, in the direction it asks for
/// next: the other one if sorted by it now, else its first direction
/// (`data-sort-first`; a tree's columns have one direction only).
fn sort_by_header(th: &Element) {
    let Some(table) = th.closest("table").ok().flatten() else {
        return;
    };
    let Some(head_row) = th.parent_element() else {
        return;
    };
    let Some(col) = children_of(&head_row).iter().position(|c| c == th) else {
        return;
    };
    let tree = table.has_attribute("data-tree");
    let first_desc = th.get_attribute("data-sort-first").as_deref() == Some("desc");
    let desc = match th.get_attribute("aria-sort").as_deref() {
        _ if tree => first_desc,
        Some("descending") => false,
        Some("ascending") => true,
        _ => first_desc,
    };
    let numeric = th.get_attribute("data-sort").as_deref() == Some("num");
    let Some(body) = table.query_selector("tbody").ok().flatten() else {
        return;
    };
    let all = children_of(&body);
    // Rows that are not data (a "more" line) stay at the end.
    let (rows, rest): (Vec<Element>, Vec<Element>) = all
        .into_iter()
        .partition(|r| !r.has_attribute("data-static"));
    let keys: Vec<SortKey> = rows
        .iter()
        .map(|r| {
            let cell = children_of(r).into_iter().nth(col);
            let v = cell
                .as_ref()
                .and_then(|c| c.get_attribute("data-sort-value"))
                .or_else(|| cell.as_ref().and_then(|c| c.text_content()))
                .unwrap_or_default();
            SortKey::of(numeric, &v)
        })
        .collect();
    let order: Vec<usize> = if tree {
        // Each level by the column, then by name (the rows' ids).
        let depths: Vec<usize> = rows
            .iter()
            .map(|r| {
                r.get_attribute("data-depth")
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        tree_order(&depths, |a, b| {
            compare(&keys[a], &keys[b], desc).then_with(|| rows[a].id().cmp(&rows[b].id()))
        })
    } else {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        // Stable: equal cells keep the order they had.
        sort_by(&mut order, |a, b| compare(&keys[*a], &keys[*b], desc));
        order
    };
    for i in order {
        let _ = body.append_child(&rows[i]);
    }
    for r in rest {
        let _ = body.append_child(&r);
    }
    for h in children_of(&head_row) {
        if &h == th {
            let _ = h.set_attribute("aria-sort", if desc { "descending" } else { "ascending" });
        } else {
            let _ = h.remove_attribute("aria-sort");
        }
        if let Some(a) = h.query_selector("a").ok().flatten() {
            if &h == th {
                let _ = a.set_attribute("data-current", "true");
            } else {
                let _ = a.remove_attribute("data-current");
            }
        }
    }
    // Where the server sorts too, the address says what is shown, so a
    // reload (or a link copied) shows the same order.
    if let Some(params) = table.get_attribute("data-sort-url") {
        let key = th.get_attribute("data-sort-key").unwrap_or_default();
        edit_address(|q| {
            for p in params.split(',') {
                match p {
                    "sort" if key.is_empty() => q.delete("sort"),
                    "sort" => q.set("sort", &key),
                    "dir" => q.set("dir", if desc { "desc" } else { "asc" }),
                    _ => {}
                }
            }
        });
    }
}

/// Changes the address's query in place (no navigation, no history entry).
fn edit_address(change: impl FnOnce(&web_sys::UrlSearchParams)) -> Option<String> {
    let w = web_sys::window()?;
    let url = web_sys::Url::new(&w.location().href().ok()?).ok()?;
    let q = url.search_params();
    change(&q);
    url.set_search(&q.to_string().as_string().unwrap_or_default());
    let href = url.href();
    let _ = w
        .history()
        .ok()?
        .replace_state_with_url(&JsValue::NULL, "", Some(&href));
    Some(href)
}

// ---- The tree ----

/// At most this many names in the address's `open`/`closed` (the server's
/// `MAX_TOGGLED`).
const MAX_TOGGLED: usize = 50;

/// The sortable headers that hold no link of the server's become
/// reachable by keyboard once the island runs (without scripts they do
/// nothing, so they are not focusable then).
pub fn focusable_headers(root: &Element) {
    let Ok(list) = root.query_selector_all("th[data-sort]") else {
        return;
    };
    for i in 0..list.length() {
        let Some(th) = list.item(i).and_then(|n| n.dyn_into::<Element>().ok()) else {
            continue;
        };
        if th.query_selector("a").ok().flatten().is_none() {
            let _ = th.set_attribute("tabindex", "0");
        }
    }
}

/// Enter or Space on a focused sortable header sorts as a click does (a
/// header holding the server's link is a link, which Enter follows).
pub fn table_key(ev: web_sys::KeyboardEvent) {
    let key = ev.key();
    if key != "Enter" && key != " " {
        return;
    }
    let Some(t) = ev.target().and_then(|t| t.dyn_into::<Element>().ok()) else {
        return;
    };
    if t.tag_name().eq_ignore_ascii_case("th") && t.has_attribute("data-sort") {
        ev.prevent_default();
        sort_by_header(&t);
    }
}

/// A click in a sort-table: a header (`th[data-sort]`) sorts the rows
/// (each level of a tree); in a tree that opens in place, ▸ opens a level
/// and ▾ folds it. Anything else (a tree search's rows, say) is left to
/// the browser.
pub fn table_click(ev: MouseEvent) {
    if modified(&ev) {
        return;
    }
    let Some(t) = target_element(&ev) else {
        return;
    };
    if let Some(th) = t.closest("th[data-sort]").ok().flatten() {
        ev.prevent_default();
        sort_by_header(&th);
        return;
    }
    let Some(link) = t.closest("a.toggle").ok().flatten() else {
        return;
    };
    let (Some(row), Some(table)) = (
        link.closest("tr").ok().flatten(),
        link.closest("table[data-tree-inplace]").ok().flatten(),
    ) else {
        return;
    };
    ev.prevent_default();
    if row.has_attribute("aria-busy") {
        return;
    }
    if link.get_attribute("aria-expanded").as_deref() == Some("true") {
        fold(&row, &link);
    } else {
        open(row, link, table);
    }
}

fn depth_of(r: &Element) -> usize {
    r.get_attribute("data-depth")
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// The rows after `row` that are below it, with the "more rows" lines
/// of what was opened under it or them.
fn rows_below(row: &Element) -> Vec<Element> {
    let d = depth_of(row);
    let mut names = vec![row.id()];
    let mut out = Vec::new();
    let mut next = row.next_element_sibling();
    while let Some(n) = next {
        if n.has_attribute("data-static") {
            if !names.contains(&n.get_attribute("data-parent").unwrap_or_default()) {
                break;
            }
        } else if depth_of(&n) <= d {
            break;
        } else {
            names.push(n.id());
        }
        next = n.next_element_sibling();
        out.push(n);
    }
    out
}

/// Says in the address (and in the link) that `row` is now open or
/// folded: `open` lists rows opened below the fold, `closed` rows folded
/// above it, as the server's links do.
fn remember_toggle(row: &Element, link: &Element, now_open: bool) {
    let name = row.id();
    let beyond = row.has_attribute("data-beyond-fold");
    let (list, add) = if beyond {
        ("open", now_open)
    } else {
        ("closed", !now_open)
    };
    let href = edit_address(|q| {
        let was = q.get(list).unwrap_or_default();
        let now = toggle_list(&was, &name, add, MAX_TOGGLED);
        if now.is_empty() {
            q.delete(list);
        } else {
            q.set(list, &now);
        }
    });
    let _ = link.set_attribute("aria-expanded", if now_open { "true" } else { "false" });
    let children = row.get_attribute("data-children").unwrap_or_default();
    let label = if now_open {
        format!("Fold the {children} quotas under {name}")
    } else {
        format!("Open the {children} quotas under {name}")
    };
    let _ = link.set_attribute("aria-label", &label);
    link.set_text_content(Some(if now_open { "▾" } else { "▸" }));
    if let Some(h) = href {
        // What a reload of the link would show: the state after this toggle.
        let h = h.split('#').next().unwrap_or_default().to_string();
        let _ = link.set_attribute("href", &format!("{h}#{}", encode(&name)));
    }
}

/// ▾: the rows below go, and the row says how many it hides.
fn fold(row: &Element, link: &Element) {
    let mut hidden = 0usize;
    for r in rows_below(row) {
        hidden += 1 + r
            .get_attribute("data-hidden")
            .and_then(|h| h.parse::<usize>().ok())
            .unwrap_or(0);
        r.remove();
    }
    let _ = row.set_attribute("data-hidden", &hidden.to_string());
    if let (Some(cell), Some(doc)) = (
        row.query_selector("td.name").ok().flatten(),
        web_sys::window().and_then(|w| w.document()),
    ) {
        if let Some(old) = cell.query_selector("small.folded").ok().flatten() {
            old.remove();
        }
        if hidden > 0 {
            if let Ok(small) = doc.create_element("small") {
                let _ = small.set_attribute("class", "folded");
                small.set_text_content(Some(&format!("{hidden} below")));
                let _ = cell.append_child(&small);
            }
        }
    }
    remember_toggle(row, link, false);
}

/// ▸: the server's rows under the quota, inserted after it. If they
/// cannot be had, the link is followed (the page opens it as without
/// scripts).
fn open(row: Element, link: Element, table: Element) {
    let Some(w) = web_sys::window() else {
        return;
    };
    let here = web_sys::Url::new(&w.location().href().unwrap_or_default()).ok();
    let q = here.as_ref().map(|u| u.search_params());
    let get = |k: &str| q.as_ref().and_then(|q| q.get(k)).unwrap_or_default();
    let mut url = format!(
        "/tree/rows?parent={}&at={}",
        encode(&row.id()),
        depth_of(&row)
    );
    if let Some(d) = table.get_attribute("data-fold-depth") {
        url.push_str(&format!("&depth={}", encode(&d)));
    }
    for k in ["sort", "open", "closed"] {
        let v = get(k);
        if !v.is_empty() {
            url.push_str(&format!("&{k}={}", encode(&v)));
        }
    }
    let _ = row.set_attribute("aria-busy", "true");
    let fallback = link.get_attribute("href").unwrap_or_default();
    spawn_local(async move {
        let html = get_html(&url).await;
        let _ = row.remove_attribute("aria-busy");
        let Some(html) = html else {
            if let Some(w) = web_sys::window() {
                let _ = w.location().assign(&fallback);
            }
            return;
        };
        // Rows open or folded meanwhile, or already there: start afresh.
        for r in rows_below(&row) {
            r.remove();
        }
        let (Some(doc), Some(body)) = (
            web_sys::window().and_then(|w| w.document()),
            row.parent_element(),
        ) else {
            return;
        };
        let Ok(holder) = doc.create_element("tbody") else {
            return;
        };
        // The server's own rendering of the rows (escaped by it).
        holder.set_inner_html(&html);
        let after = row.next_sibling();
        for r in children_of(&holder) {
            let _ = body.insert_before(&r, after.as_ref());
        }
        if let Some(small) = row.query_selector("small.folded").ok().flatten() {
            small.remove();
        }
        let _ = row.set_attribute("data-hidden", "0");
        remember_toggle(&row, &link, true);
    });
}

/// GET `url` as text (with the session cookie, as the page itself), only
/// if the server answers it as asked (a redirect, to the login page say,
/// is not followed).
///
/// The server takes a few heavy requests per person at once and answers
/// the rest 429 with `Retry-After` (docs/limits.md): a range click asks for
/// every chart of a section together, so a 429 is asked again after the
/// time it names (at most [`RETRIES`] times, each wait at most 5 s).
async fn get_html(url: &str) -> Option<String> {
    let window = web_sys::window()?;
    let mut tries = 0;
    let resp = loop {
        let init = web_sys::RequestInit::new();
        init.set_credentials(web_sys::RequestCredentials::SameOrigin);
        init.set_redirect(web_sys::RequestRedirect::Error);
        let resp = JsFuture::from(window.fetch_with_str_and_init(url, &init))
            .await
            .ok()?;
        let resp: web_sys::Response = resp.dyn_into().ok()?;
        if resp.status() != 429 || tries >= RETRIES {
            break resp;
        }
        tries += 1;
        let secs = resp
            .headers()
            .get("retry-after")
            .ok()
            .flatten()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(1)
            .clamp(1, 5);
        // Spread the retries of one click so they do not all come back at once.
        let spread = (js_sys::Math::random() * 500.0) as i32;
        sleep_ms(secs as i32 * 1000 + spread).await;
    };
    if !resp.ok() {
        return None;
    }
    let text = JsFuture::from(resp.text().ok()?).await.ok()?;
    text.as_string()
}

/// How many times a request answered 429 is asked again.
const RETRIES: u32 = 4;

async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(promise).await;
}

// ---- The overview ----

/// Puts the overview's live parts where the page has them.
fn redraw_overview(reply: &OverviewReply) {
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    if let Some(section) = doc.query_selector("section.attention").ok().flatten() {
        section.set_outer_html(&reply.attention);
    }
    // Its budget reasons say the same "left" as the attention items just
    // drawn (a section that appears only on a reload when none was).
    if let Some(section) = doc.query_selector("section.queued-mine").ok().flatten() {
        section.set_outer_html(&reply.queued);
    }
    if let Ok(cards) = doc.query_selector_all("section.quota-card[data-quota]") {
        for i in 0..cards.length() {
            let Some(card) = cards.item(i).and_then(|n| n.dyn_into::<Element>().ok()) else {
                continue;
            };
            let name = card.get_attribute("data-quota").unwrap_or_default();
            let Some(live) = reply.cards.iter().find(|c| c.name == name) else {
                continue;
            };
            if let Some(keys) = card.query_selector(".keys").ok().flatten() {
                // The other keys' fold stays as the person left it.
                let fold = |keys: &Element| keys.query_selector("details").ok().flatten();
                let open = fold(&keys).is_some_and(|d| d.has_attribute("open"));
                keys.set_inner_html(&live.keys);
                if open {
                    if let Some(d) = fold(&keys) {
                        let _ = d.set_attribute("open", "");
                    }
                }
            }
            if let Some(counts) = card.query_selector("[data-live=counts]").ok().flatten() {
                counts.set_text_content(Some(&live.counts));
            }
        }
    }
    if let Some(root) = doc.document_element() {
        // For whoever watches: when the page last heard from the server.
        let _ = root.set_attribute("data-overview-at", &js_sys::Date::now().to_string());
    }
}
