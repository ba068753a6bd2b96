//! bizrq's portal UI (Leptos). Components render on the server (`ssr`); every
//! page works as plain HTML with JavaScript disabled.

pub mod accounts;
pub mod audit;
pub mod charts;
pub mod layout;
pub mod transfers;

pub use layout::{Flash, Section, Viewer};

use quota::resources;
use quota::Quota;

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// The console's stylesheet, served by the server at `/style.css`.
pub const STYLE: &str = include_str!("../../style/bizrq.css");

/// One key's usage as the tree shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyUsage {
    pub key: String,
    pub used: String,
    pub hard: String,
    /// used/hard in whole percent (over 100 when over quota).
    pub percent: u32,
}

/// One node of the tree, in depth-first order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeRow {
    pub name: String,
    pub depth: usize,
    pub workloads: usize,
    pub keys: Vec<KeyUsage>,
}

/// Quotas in depth-first order (children under their parent, by name),
/// with orphans (parent unknown) listed as roots so nothing is hidden.
pub fn tree_rows(quotas: &[Quota]) -> Vec<TreeRow> {
    use std::collections::{BTreeMap, BTreeSet};
    let names: BTreeSet<&str> = quotas.iter().map(|q| q.name()).collect();
    let mut kids: BTreeMap<&str, Vec<&Quota>> = BTreeMap::new();
    for q in quotas {
        let p = q.spec.parent.as_str();
        let p = if names.contains(p) { p } else { "" };
        kids.entry(p).or_default().push(q);
    }
    let mut out = Vec::with_capacity(quotas.len());
    let mut stack: Vec<(&Quota, usize)> = kids
        .get("")
        .map(|v| v.iter().rev().map(|q| (*q, 0)).collect())
        .unwrap_or_default();
    while let Some((q, depth)) = stack.pop() {
        out.push(TreeRow {
            name: q.name().to_string(),
            depth,
            workloads: q.status.workloads.len(),
            keys: q
                .spec
                .hard
                .iter()
                .map(|(k, h)| {
                    let used = resources::get(&q.status.used, k);
                    let percent = if h.nanos() > 0 {
                        (used.nanos().max(0) * 100 / h.nanos()).min(u32::MAX as i128) as u32
                    } else if used.nanos() > 0 {
                        100
                    } else {
                        0
                    };
                    KeyUsage {
                        key: k.clone(),
                        used: used.to_string(),
                        hard: h.to_string(),
                        percent,
                    }
                })
                .collect(),
        });
        if let Some(children) = kids.get(q.name()) {
            stack.extend(children.iter().rev().map(|c| (*c, depth + 1)));
        }
    }
    out
}

#[cfg(feature = "ssr")]
#[component]
fn KeyBar(k: KeyUsage) -> impl IntoView {
    let class = match k.percent {
        p if p > 100 => "bar over",
        p if p >= 80 => "bar warn",
        _ => "bar",
    };
    let width = format!("width:{}%", k.percent.min(100));
    view! {
        <span class="key">{k.key}</span>
        <span class=class><i style=width></i></span>
        <span class="num">{format!("{} / {} ({}%)", k.used, k.hard, k.percent)}</span>
    }
}

#[cfg(feature = "ssr")]
#[component]
fn TreeTable(rows: Vec<TreeRow>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty">"No quotas to show: none exist yet, or none is shared with you."</p> }
            .into_any();
    }
    view! {
        <table>
            <thead><tr><th>"Quota"</th><th>"Workloads"</th><th>"Usage (used / hard)"</th></tr></thead>
            <tbody>
                {rows
                    .into_iter()
                    .map(|r| {
                        let indent = format!("padding-left:{}rem", 0.6 + 1.2 * r.depth as f32);
                        let id = r.name.clone();
                        view! {
                            <tr id=id>
                                <td class="name" style=indent>{r.name}</td>
                                <td class="num">{r.workloads}</td>
                                <td><div class="keys">{r.keys.into_iter().map(|k| view! { <KeyBar k=k/> }).collect_view()}</div></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// The quota tree (the quotas the viewer may see) as a whole HTML document.
#[cfg(feature = "ssr")]
pub fn render_tree_page(viewer: Viewer, section: Section, quotas: &[Quota]) -> String {
    let rows = tree_rows(quotas);
    let title = format!("Quota tree · {} quotas", rows.len());
    layout::document(move || {
        view! {
            <layout::Layout viewer=Some(viewer) title=title section=section flash=None>
                <TreeTable rows=rows/>
            </layout::Layout>
        }
    })
}
