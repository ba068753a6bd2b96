//! bizrq's portal UI (Leptos). Components render on the server (`ssr`); every
//! page works as plain HTML with JavaScript disabled.

pub mod accounts;
pub mod alerts;
pub mod audit;
pub mod chart_section;
pub mod charts;
pub mod layout;
pub mod quotas;
pub mod transfers;

pub use layout::{Flash, Section, Viewer};

use quota::resources;
use quota::{KeyConfig, Quota, ResourceList};

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// The console's stylesheet, served by the server at `/style.css`.
pub const STYLE: &str = include_str!("../../style/bizrq.css");

/// One key's usage as the tree shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyUsage {
    pub key: String,
    /// In use in the whole subtree (a cash key: spent).
    pub used: String,
    pub hard: String,
    /// used/hard in whole percent (over 100 when over quota).
    pub percent: u32,
    /// Allocated to children but idle, in whole percent of hard (the bar's
    /// second part; `percent.min(100) + idle_percent` never passes 100).
    pub idle_percent: u32,
    /// The rest of the picture, non-zero parts only: "21 allocated to
    /// children, idle · 3 unallocated · lent 2 · borrowed 1".
    pub detail: String,
    /// A budget (cash key): spent, not in use.
    pub cash: bool,
    /// A model-qualified key (`limits.cpu.A4`), shown under its generic key.
    pub model: bool,
}

/// used/hard in whole percent (100 for usage of a zero hard).
pub fn percent(used: quota::Quantity, hard: quota::Quantity) -> u32 {
    if hard.nanos() > 0 {
        (used.nanos().max(0) * 100 / hard.nanos()).min(u32::MAX as i128) as u32
    } else if used.nanos() > 0 {
        100
    } else {
        0
    }
}

/// Whether a key names one model of a resource (`requests.nvidia.com/gpu.A100`).
pub fn is_model_key(key: &str, cfg: &KeyConfig) -> bool {
    quota::keys::Key::parse(key, cfg).is_ok_and(|k| k.model.is_some())
}

/// The generic key a model-qualified key counts toward, with its cash
/// prefix kept (`cash/limits.cpu.A4` → `cash/limits.cpu`).
pub fn generic_key(key: &str, cfg: &KeyConfig) -> Option<String> {
    let k = quota::keys::Key::parse(key, cfg).ok()?;
    k.model.as_ref()?;
    Some(if k.cash {
        format!("{}{}", quota::keys::CASH_PREFIX, k.base)
    } else {
        k.base
    })
}

/// A quantity as a person reads it: cash with one decimal in its unit
/// (`5,760.0 card-hours` rather than `5760044929445n`), memory in Gi when
/// whole, anything else in its Kubernetes form unless that form is a
/// nano/micro fraction, then as a decimal.
pub fn display_quantity(key: &str, q: quota::Quantity, cfg: &KeyConfig) -> String {
    let (per, unit) = charts::unit_of(key, cfg);
    let v = q.nanos();
    let decimal = |places: u32| {
        let scale = 10i128.pow(places);
        let scaled = (v * scale + per / 2).div_euclid(per);
        let (whole, frac) = (scaled.div_euclid(scale), scaled.rem_euclid(scale));
        let mut w = whole.abs().to_string();
        let mut i = w.len() as isize - 3;
        while i > 0 {
            w.insert(i as usize, ',');
            i -= 3;
        }
        let sign = if whole < 0 { "-" } else { "" };
        if places == 0 {
            format!("{sign}{w}")
        } else {
            format!("{sign}{w}.{frac:0width$}", width = places as usize)
        }
    };
    if key.starts_with(quota::keys::CASH_PREFIX) {
        return format!("{} {unit}", decimal(1));
    }
    let k8s = q.to_string();
    if unit == "GiB" && v % per == 0 && !k8s.ends_with("Gi") {
        return format!("{}Gi", v / per);
    }
    if k8s.ends_with('n') || k8s.ends_with('u') {
        return decimal(3);
    }
    k8s
}

/// Used against hard for every key of a quota's hard. Keys sort so that a
/// model key follows its generic key (`limits.cpu`, `limits.cpu.A4`).
/// The keys of a quota as its bars show them: in use in the whole subtree
/// (`in_use`, from `quota::rollup::subtree_in_use`), allocated to children
/// but idle, and the rest (`quota::rollup`); a cash key's spending. Keys
/// with a zero hard that nothing uses are left out.
pub fn key_usages(q: &Quota, in_use: &ResourceList, cfg: &KeyConfig) -> Vec<KeyUsage> {
    let rolled: std::collections::BTreeMap<String, quota::rollup::KeyRollup> =
        quota::rollup::rollup(q, in_use)
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
    q.spec
        .hard
        .iter()
        .filter_map(|(k, h)| {
            let model = is_model_key(k, cfg);
            let show = |n: quota::Quantity| display_quantity(k, n, cfg);
            if let Some(r) = rolled.get(k) {
                let (_, idle) = r.bar_percents();
                let parts = [
                    (r.allocated_idle, "allocated to children, idle"),
                    (r.unallocated, "unallocated"),
                ];
                let mut detail: Vec<String> = parts
                    .iter()
                    .filter(|(n, _)| !n.is_zero() && !r.allocated.is_zero())
                    .map(|(n, what)| format!("{} {what}", show(*n)))
                    .collect();
                for (n, what) in [(r.lent, "lent"), (r.borrowed, "borrowed")] {
                    if !n.is_zero() {
                        detail.push(format!("{what} {}", show(n)));
                    }
                }
                return Some(KeyUsage {
                    key: k.clone(),
                    used: show(r.in_use),
                    hard: show(r.hard),
                    percent: r.in_use_percent(),
                    idle_percent: idle,
                    detail: detail.join(" · "),
                    cash: false,
                    model,
                });
            }
            let used = resources::get(&q.status.used, k);
            let cash = quota::keys::cash_target(k).is_some();
            if !cash || (h.is_zero() && used.is_zero()) {
                // Not a cash key: its hard is zero and nothing uses it.
                return None;
            }
            Some(KeyUsage {
                key: k.clone(),
                used: show(used),
                hard: show(*h),
                percent: percent(used, *h),
                idle_percent: 0,
                detail: String::new(),
                cash: true,
                model,
            })
        })
        .collect()
}

/// One node of the tree, in depth-first order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeRow {
    pub name: String,
    pub depth: usize,
    pub workloads: usize,
    pub keys: Vec<KeyUsage>,
    /// Uses more than its hard on some key, on loan (§5).
    pub borrowing: bool,
    /// Descendants folded away under this row (a link opens them).
    pub hidden_below: usize,
    /// Shown only as an ancestor of a row the search found.
    pub context: bool,
}

impl TreeRow {
    pub fn max_percent(&self) -> u32 {
        self.keys.iter().map(|k| k.percent).max().unwrap_or(0)
    }
}

/// Quotas in depth-first order (children under their parent, by name),
/// with orphans (parent unknown) listed as roots so nothing is hidden.
/// `in_use`: every quota's subtree usage, from the whole tree (a viewer may
/// see a parent without all of its descendants).
pub fn tree_rows(
    quotas: &[Quota],
    in_use: &std::collections::BTreeMap<String, ResourceList>,
    cfg: &KeyConfig,
) -> Vec<TreeRow> {
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
            keys: key_usages(q, in_use.get(q.name()).unwrap_or(&ResourceList::new()), cfg),
            borrowing: q.status.borrowed.values().any(|v| v.nanos() > 0),
            hidden_below: 0,
            context: false,
        });
        if let Some(children) = kids.get(q.name()) {
            stack.extend(children.iter().rev().map(|c| (*c, depth + 1)));
        }
    }
    out
}

/// Which rows the tree page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeQuery {
    /// Part of a name (case-insensitive).
    pub search: String,
    pub filter: TreeFilter,
    /// Only this quota's subtree.
    pub under: Option<String>,
    /// Fold rows deeper than this (None: as [`FOLD_ABOVE`] decides).
    pub depth: Option<usize>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TreeFilter {
    #[default]
    All,
    /// Some key at 80 % or more.
    Hot,
    /// Some key over 100 %.
    Over,
    Borrowing,
}

impl TreeFilter {
    pub const ALL: [(TreeFilter, &'static str, &'static str); 4] = [
        (TreeFilter::All, "", "all quotas"),
        (TreeFilter::Hot, "hot", "≥ 80 % used"),
        (TreeFilter::Over, "over", "over hard"),
        (TreeFilter::Borrowing, "borrowing", "borrowing"),
    ];

    pub fn parse(s: &str) -> TreeFilter {
        TreeFilter::ALL
            .iter()
            .find(|(_, v, _)| *v == s)
            .map(|(f, _, _)| *f)
            .unwrap_or_default()
    }

    pub fn as_str(self) -> &'static str {
        TreeFilter::ALL
            .iter()
            .find(|(f, _, _)| *f == self)
            .map(|(_, v, _)| *v)
            .unwrap_or("")
    }

    fn keeps(self, r: &TreeRow) -> bool {
        match self {
            TreeFilter::All => true,
            TreeFilter::Hot => r.max_percent() >= 80,
            TreeFilter::Over => r.max_percent() > 100,
            TreeFilter::Borrowing => r.borrowing,
        }
    }
}

/// A tree larger than this is folded below [`FOLD_DEPTH`] unless a search,
/// a filter or a depth says otherwise, so a thousand nodes stay readable.
pub const FOLD_ABOVE: usize = 200;
pub const FOLD_DEPTH: usize = 2;

/// The rows `query` selects from depth-first `rows`: a subtree, the rows a
/// search or filter finds (with their ancestors as context, so the shape
/// still reads), or the whole tree folded below a depth.
pub fn select_rows(mut rows: Vec<TreeRow>, query: &TreeQuery) -> Vec<TreeRow> {
    if let Some(under) = &query.under {
        let Some(i) = rows.iter().position(|r| &r.name == under) else {
            return Vec::new();
        };
        let base = rows[i].depth;
        let end = rows[i + 1..]
            .iter()
            .position(|r| r.depth <= base)
            .map_or(rows.len(), |n| i + 1 + n);
        rows = rows.drain(i..end).collect();
        rows.iter_mut().for_each(|r| r.depth -= base);
    }
    let needle = query.search.trim().to_lowercase();
    if !needle.is_empty() || query.filter != TreeFilter::All {
        let mut keep = vec![false; rows.len()];
        let mut hit = vec![false; rows.len()];
        let mut ancestors: Vec<usize> = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            while ancestors.last().is_some_and(|&a| rows[a].depth >= r.depth) {
                ancestors.pop();
            }
            if r.name.to_lowercase().contains(&needle) && query.filter.keeps(r) {
                hit[i] = true;
                keep[i] = true;
                for &a in &ancestors {
                    keep[a] = true;
                }
            }
            ancestors.push(i);
        }
        return rows
            .into_iter()
            .enumerate()
            .filter(|(i, _)| keep[*i])
            .map(|(i, mut r)| {
                r.context = !hit[i];
                r
            })
            .collect();
    }
    let depth = query
        .depth
        .or((rows.len() > FOLD_ABOVE).then_some(FOLD_DEPTH));
    let Some(depth) = depth else {
        return rows;
    };
    let mut out: Vec<TreeRow> = Vec::new();
    for r in rows {
        if r.depth > depth {
            if let Some(last) = out.last_mut() {
                last.hidden_below += 1;
            }
        } else {
            out.push(r);
        }
    }
    out
}

#[cfg(feature = "ssr")]
#[component]
pub fn KeyBar(k: KeyUsage) -> impl IntoView {
    let class = match k.percent {
        p if p > 100 => "bar over",
        p if p >= 80 => "bar warn",
        _ => "bar",
    };
    let width = format!("width:{}%", k.percent.min(100));
    let idle = format!("width:{}%", k.idle_percent);
    let key_class = if k.model { "key model" } else { "key" };
    let verb = if k.cash { "spent" } else { "in use" };
    let detail = (!k.detail.is_empty()).then(|| view! { <small class="detail">{k.detail}</small> });
    view! {
        <span class=key_class>{k.key}</span>
        <span class=class><i class="use" style=width></i><i class="idle" style=idle></i></span>
        <span class="num">{format!("{} {verb} of {} ({}%)", k.used, k.hard, k.percent)}{detail}</span>
    }
}

/// What the bars' colours mean; the same on every page that has bars.
#[cfg(feature = "ssr")]
#[component]
pub fn BarLegend() -> impl IntoView {
    view! {
        <p class="legend" aria-label="Bar colours">
            <span><i class="use"></i>"in use (the whole subtree)"</span>
            <span><i class="idle"></i>"allocated to children, idle"</span>
            <span><i class="free"></i>"unallocated"</span>
        </p>
    }
}

#[cfg(feature = "ssr")]
#[component]
fn TreeTable(rows: Vec<TreeRow>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty">"No quotas to show: none matches, none exists yet, or none is shared with you."</p> }
            .into_any();
    }
    view! {
        <table class="tree">
            <thead><tr><th>"Quota"</th><th>"Workloads"</th><th>"Usage"</th></tr></thead>
            <tbody>
                {rows
                    .into_iter()
                    .map(|r| {
                        let indent = format!("padding-left:{}rem", 0.6 + 1.1 * r.depth as f32);
                        let href = format!("/quotas/{}", r.name);
                        let folded = (r.hidden_below > 0).then(|| {
                            let more = format!("/tree?under={}", r.name);
                            view! { <a class="more" href=more>{format!("+{} below", r.hidden_below)}</a> }
                        });
                        let class = if r.context { "context" } else { "" };
                        let id = r.name.clone();
                        let borrowing = r.borrowing.then(|| view! { <span class="badge borrow">"borrowing"</span> });
                        view! {
                            <tr id=id class=class>
                                <td class="name" style=indent><a href=href>{r.name}</a>{borrowing}{folded}</td>
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

/// The quota tree (the quotas the viewer may see) as a whole HTML document,
/// with a search and filter form (a plain GET).
#[cfg(feature = "ssr")]
pub fn render_tree_page(
    viewer: Viewer,
    quotas: &[Quota],
    in_use: &std::collections::BTreeMap<String, ResourceList>,
    cfg: &KeyConfig,
    query: TreeQuery,
) -> String {
    let all = tree_rows(quotas, in_use, cfg);
    let total = all.len();
    let rows = select_rows(all, &query);
    let shown = rows.iter().filter(|r| !r.context).count();
    let title = match &query.under {
        Some(u) => format!("Quota tree · under {u}"),
        None => format!("Quota tree · {total} quotas"),
    };
    let folded = rows.iter().any(|r| r.hidden_below > 0);
    let filter = query.filter;
    let options = TreeFilter::ALL
        .iter()
        .map(|(f, v, label)| view! { <option value=*v selected=*f == filter>{*label}</option> })
        .collect_view();
    let under = query.under.clone().map(|u| {
        view! { <input type="hidden" name="under" value=u/> }
    });
    let search = query.search.clone();
    let summary = if folded {
        format!(
            "{shown} of {total} shown; deeper levels folded: open a '+N below' link, or search."
        )
    } else {
        format!("{shown} of {total} shown")
    };
    layout::document(move || {
        view! {
            <layout::Layout viewer=Some(viewer) title=title section=Section::Tree flash=None>
                <form class="card inline filters" method="get" action="/tree">
                    <label>"Name contains"<input type="search" name="q" value=search/></label>
                    <label>"Show"<select name="filter">{options}</select></label>
                    {under}
                    <button type="submit">"Apply"</button>
                    <a href="/tree">"Reset"</a>
                    <span class="hint">{summary}</span>
                </form>
                <BarLegend/>
                <TreeTable rows=rows/>
            </layout::Layout>
        }
    })
}

#[cfg(test)]
mod display_tests {
    use super::{display_quantity, key_usages, KeyConfig};
    use quota::{Quota, QuotaSpec};

    /// A GPU named by `--gpu-resources` shows in cards and card-hours on the
    /// quota pages, like the default GPUs, not in generic units.
    #[test]
    fn a_configured_gpu_resource_shows_its_units() {
        let cfg = KeyConfig {
            gpu_resources: vec!["example.com/tpu".into()],
            ..KeyConfig::default()
        };
        let q = |s: &str| s.parse::<quota::Quantity>().unwrap();
        let hard = [
            ("cash/requests.example.com/tpu", "100"),
            ("requests.example.com/tpu", "8"),
            ("requests.example.com/tpu.v5", "4"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), q(v)))
        .collect();
        let quota = Quota::new(
            "ml",
            QuotaSpec {
                parent: String::new(),
                hard,
                max: Default::default(),
            },
        );
        let shown: Vec<(String, String, bool)> =
            key_usages(&quota, &quota::ResourceList::new(), &cfg)
                .into_iter()
                .map(|u| (u.key, u.hard, u.model))
                .collect();
        assert_eq!(
            shown[0],
            (
                "cash/requests.example.com/tpu".into(),
                "100.0 card-hours".into(),
                false
            )
        );
        assert!(
            shown[2].2,
            "the model key of a configured GPU is a model key"
        );
        // The default configuration does not know this resource.
        assert_eq!(
            display_quantity(
                "cash/requests.example.com/tpu",
                q("100"),
                &KeyConfig::default()
            ),
            "100.0 unit-hours"
        );
    }

    #[test]
    fn quantities_read_well() {
        let q = |s: &str| s.parse::<quota::Quantity>().unwrap();
        assert_eq!(
            display_quantity(
                "cash/requests.nvidia.com/gpu",
                q("5760044929445n"),
                &KeyConfig::default()
            ),
            "5,760.0 card-hours"
        );
        assert_eq!(
            display_quantity("requests.memory", q("1099511627776"), &KeyConfig::default()),
            "1024Gi"
        );
        assert_eq!(
            display_quantity("requests.memory", q("832Gi"), &KeyConfig::default()),
            "832Gi"
        );
        assert_eq!(
            display_quantity("requests.cpu", q("500m"), &KeyConfig::default()),
            "500m"
        );
        assert_eq!(
            display_quantity("requests.cpu", q("1500000n"), &KeyConfig::default()),
            "0.002"
        );
        assert_eq!(
            display_quantity("requests.nvidia.com/gpu", q("27"), &KeyConfig::default()),
            "27"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, depth: usize, percent: u32) -> TreeRow {
        TreeRow {
            name: name.into(),
            depth,
            workloads: 0,
            keys: vec![KeyUsage {
                key: "pods".into(),
                used: "0".into(),
                hard: "1".into(),
                percent,
                idle_percent: 0,
                detail: String::new(),
                cash: false,
                model: false,
            }],
            borrowing: false,
            hidden_below: 0,
            context: false,
        }
    }

    /// ai ─┬─ nlp ── nlp-a
    ///     └─ cv
    fn rows() -> Vec<TreeRow> {
        vec![
            row("ai", 0, 10),
            row("nlp", 1, 90),
            row("nlp-a", 2, 50),
            row("cv", 1, 10),
        ]
    }

    fn names(rows: &[TreeRow]) -> Vec<(&str, usize, bool, usize)> {
        rows.iter()
            .map(|r| (r.name.as_str(), r.depth, r.context, r.hidden_below))
            .collect()
    }

    #[test]
    fn a_search_keeps_the_ancestors_of_what_it_finds_as_context() {
        let q = TreeQuery {
            search: "P-A".into(),
            ..Default::default()
        };
        let got = select_rows(rows(), &q);
        assert_eq!(
            names(&got),
            [
                ("ai", 0, true, 0),
                ("nlp", 1, true, 0),
                ("nlp-a", 2, false, 0)
            ]
        );
    }

    #[test]
    fn a_filter_finds_hot_quotas() {
        let q = TreeQuery {
            filter: TreeFilter::Hot,
            ..Default::default()
        };
        let got = select_rows(rows(), &q);
        assert_eq!(names(&got), [("ai", 0, true, 0), ("nlp", 1, false, 0)]);
    }

    #[test]
    fn a_subtree_starts_at_depth_zero_and_folding_counts_what_it_hides() {
        let q = TreeQuery {
            under: Some("nlp".into()),
            ..Default::default()
        };
        assert_eq!(
            names(&select_rows(rows(), &q)),
            [("nlp", 0, false, 0), ("nlp-a", 1, false, 0)]
        );
        let q = TreeQuery {
            depth: Some(1),
            ..Default::default()
        };
        assert_eq!(
            names(&select_rows(rows(), &q)),
            [
                ("ai", 0, false, 0),
                ("nlp", 1, false, 1),
                ("cv", 1, false, 0)
            ]
        );
    }

    #[test]
    fn model_keys_know_their_generic_key() {
        assert_eq!(
            generic_key("requests.nvidia.com/gpu.A100", &KeyConfig::default()).as_deref(),
            Some("requests.nvidia.com/gpu")
        );
        assert_eq!(
            generic_key("cash/limits.cpu.A4", &KeyConfig::default()).as_deref(),
            Some("cash/limits.cpu")
        );
        assert_eq!(generic_key("limits.cpu", &KeyConfig::default()), None);
        assert!(!is_model_key(
            "requests.nvidia.com/gpu",
            &KeyConfig::default()
        ));
    }
}
