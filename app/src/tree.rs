//! The quota tree page: one row per quota with the columns people compare
//! (GPUs in use, allocated and hard; card-hours left and the runway;
//! borrowing; the fullest other keys), siblings sortable by a column, and
//! levels folded and opened in place. Plain links and a GET form: all of it
//! works without JavaScript.
//!
//! The rows are computed here from the quotas the viewer may see and their
//! subtree usage (pure, tested below); the server only reads those quotas.

use crate::display_quantity;
use quota::forecast::Pricing;
use quota::keys::{cash_target, Key};
use quota::rollup::{rollup, KeyRollup};
use quota::{resources, KeyConfig, Quantity, Quota, ResourceList};
use std::collections::{BTreeMap, BTreeSet};

#[cfg(feature = "ssr")]
use crate::layout::{self, Section, Viewer};
#[cfg(feature = "ssr")]
use crate::BarLegend;
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// The GPU column of a row: the quota's first GPU key with a hard (the
/// generic key, `requests.nvidia.com/gpu`, before its models).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuCell {
    pub key: String,
    pub in_use: String,
    pub allocated: String,
    pub hard: String,
    /// In use, whole percent of hard (over 100 when borrowing).
    pub percent: u32,
    /// Allocated to children but idle, whole percent of hard.
    pub idle_percent: u32,
}

/// One budget in the budget columns: what is left of it and how long it
/// lasts at what runs now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CashCell {
    pub key: String,
    /// `GPU budget`, `GPU A100 budget`: which budget, for a quota with more
    /// than one.
    pub label: String,
    pub left: String,
    /// Spent, whole percent of the budget.
    pub spent_percent: u32,
    /// "3.5 days" at the current use; None when nothing runs (it lasts).
    pub runway: Option<String>,
    /// For sorting: nano-units left, and whole hours of runway.
    pub left_nanos: i128,
    pub runway_hours: Option<i128>,
    /// The budget's one forecast (`quota::forecast::outlook`): its words
    /// (`runs out in 8.3 days (2026-12-07)`) are the same on every page.
    pub outlook: quota::forecast::Outlook,
}

/// One node of the tree, in depth-first order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeRow {
    pub name: String,
    pub depth: usize,
    pub workloads: usize,
    pub children: usize,
    pub gpu: Option<GpuCell>,
    /// Each GPU model's key (`requests.nvidia.com/gpu.A100`) with a hard
    /// or a use here, in display order: the page's model columns
    /// (`model_columns`) read their cell from it.
    pub models: Vec<GpuCell>,
    /// Every budget, the GPU budget first (`cash_cells`).
    pub budgets: Vec<CashCell>,
    /// Used beyond its hard on loan, per key, readable ("4 cards").
    pub borrowing: Vec<String>,
    /// The fullest other keys (zero hards left out), worst first.
    pub others: Vec<(String, u32)>,
    /// The fullest shown key's percent, for the filters (hot, over): the
    /// highest `percent` of `key_usages`, computed without formatting them.
    pub max_percent: u32,
    /// Descendants folded away under this row.
    pub hidden_below: usize,
    /// Shown only as an ancestor of a row the search found.
    pub context: bool,
    /// Its children are shown (a row with children and this false is folded).
    pub open: bool,
    /// Below the fold depth: closed unless opened (else open unless closed).
    pub beyond_fold: bool,
}

impl TreeRow {
    pub fn max_percent(&self) -> u32 {
        self.max_percent
    }
}

/// A key's name in the tree's columns and the queue's needs: the one
/// display name (`quota::keys::display_name`: "A100 GPUs", "CPU cores
/// (limit)", "GPU card-hours").
pub fn short_key(key: &str, cfg: &KeyConfig) -> String {
    crate::key_name(key, cfg)
}

fn gpu_cell(rolled: &[KeyRollup], cfg: &KeyConfig) -> Option<GpuCell> {
    let is_gpu = |r: &&KeyRollup| {
        Key::parse(&r.key, cfg).is_ok_and(|k| k.model.is_none() && cfg.is_gpu(&k.resource))
    };
    let r = rolled
        .iter()
        .filter(is_gpu)
        .filter(|r| !r.hard.is_zero() || !r.in_use.is_zero())
        // requests.* before limits.*
        .min_by_key(|r| (!r.key.starts_with("requests."), r.key.clone()))?;
    Some(cell_of(r, cfg))
}

/// Whether `key` is a GPU model's request key (`requests.nvidia.com/gpu.A100`):
/// what gets a column of its own on the tree.
fn is_model_key(key: &str, cfg: &KeyConfig) -> bool {
    Key::parse(key, cfg).is_ok_and(|k| {
        !k.cash
            && k.model.is_some()
            && cfg.is_gpu(&k.resource)
            && k.class == quota::keys::Class::Requests
    })
}

/// The GPU model keys that have a hard in any of `quotas`, in display
/// order (`A100 GPUs` before `H100 GPUs`): one tree column each. The page
/// and `GET /tree/rows` ask it of the same quotas, so inserted rows have
/// the page's columns.
pub fn model_columns<Q: std::borrow::Borrow<Quota>>(quotas: &[Q], cfg: &KeyConfig) -> Vec<String> {
    let keys: BTreeSet<&str> = quotas
        .iter()
        .flat_map(|q| q.borrow().spec.hard.iter())
        .filter(|(k, v)| !v.is_zero() && is_model_key(k, cfg))
        .map(|(k, _)| k.as_str())
        .collect();
    let mut keys: Vec<String> = keys.into_iter().map(str::to_string).collect();
    keys.sort_by_cached_key(|k| quota::keys::display_order(k, cfg));
    keys
}

fn cell_of(r: &KeyRollup, cfg: &KeyConfig) -> GpuCell {
    let (_, idle) = r.bar_percents();
    let show = |n: Quantity| display_quantity(&r.key, n, cfg);
    GpuCell {
        key: r.key.clone(),
        in_use: show(r.in_use),
        allocated: show(r.allocated),
        hard: show(r.hard),
        percent: r.in_use_percent(),
        idle_percent: idle,
    }
}

/// Every budget of `q` (cash keys of hard that are not zero): what is left
/// and how long it lasts, from the budget's one forecast
/// (`quota::forecast::outlook`: left as admission reads it, at what the
/// quota's own workloads burn now at their prices; children spend their
/// carve-outs, not this budget). The GPU budget first, then the GPU models' budgets, then the
/// rest, each by key.
pub fn cash_cells(
    q: &Quota,
    in_use: &ResourceList,
    cfg: &KeyConfig,
    pricing: &Pricing,
) -> Vec<CashCell> {
    let is_gpu_budget = |k: &str| {
        cash_target(k)
            .and_then(|t| Key::parse(t, cfg).ok())
            .is_some_and(|k| k.model.is_none() && cfg.is_gpu(&k.resource))
    };
    let mut cells: Vec<(u8, CashCell)> = q
        .spec
        .hard
        .iter()
        .filter(|(k, h)| cash_target(k).is_some() && !h.is_zero())
        .map(|(key, hard)| {
            // What the subtree spent (`in_use`), never a parent's carve-outs.
            let spent = resources::get(in_use, key);
            let outlook =
                quota::forecast::outlook(q, key, pricing.now_ms, &pricing.qos, &pricing.list);
            let left = outlook.left.max(Quantity::ZERO);
            let lasts = outlook.lasts_ms().filter(|ms| *ms > 0);
            let cell = CashCell {
                key: key.to_string(),
                label: short_key(key, cfg),
                left: display_quantity(key, left, cfg),
                spent_percent: crate::percent(spent, *hard),
                runway: lasts.map(quota::budget::runway::span),
                left_nanos: left.nanos(),
                runway_hours: lasts.map(|ms| ms as i128 / 3_600_000),
                outlook,
            };
            let rank = if is_gpu_budget(key) {
                0
            } else if cash_target(key)
                .is_some_and(|t| Key::parse(t, cfg).is_ok_and(|k| cfg.is_gpu(&k.resource)))
            {
                1
            } else {
                2
            };
            (rank, cell)
        })
        .collect();
    cells.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key.cmp(&b.1.key)));
    cells.into_iter().map(|(_, c)| c).collect()
}

/// The row of one quota (depth, fold state and context set by the caller).
pub fn row_of(
    q: &Quota,
    in_use: &ResourceList,
    children: usize,
    cfg: &KeyConfig,
    pricing: &Pricing,
) -> TreeRow {
    let rolled = rollup(q, in_use);
    let gpu = gpu_cell(&rolled, cfg);
    let gpu_key = gpu.as_ref().map(|g| g.key.clone());
    let mut models: Vec<GpuCell> = rolled
        .iter()
        .filter(|r| is_model_key(&r.key, cfg))
        .filter(|r| !r.hard.is_zero() || !r.in_use.is_zero())
        .map(|r| cell_of(r, cfg))
        .collect();
    models.sort_by_cached_key(|c| quota::keys::display_order(&c.key, cfg));
    // Keys with a zero hard that nothing uses are not worth a glance.
    // GPU models have their columns; other GPU keys (limits) first, then
    // the fullest of the rest.
    let mut others: Vec<(bool, String, u32)> = rolled
        .iter()
        .filter(|r| Some(&r.key) != gpu_key.as_ref())
        .filter(|r| !models.iter().any(|m| m.key == r.key))
        .filter(|r| !r.hard.is_zero() || !r.in_use.is_zero())
        .map(|r| {
            let gpu = quota::keys::display_order(&r.key, cfg).0 == 0;
            (!gpu, short_key(&r.key, cfg), r.in_use_percent())
        })
        .collect();
    others.sort_by(|a, b| (a.0, b.2, &a.1).cmp(&(b.0, a.2, &b.1)));
    let mut others: Vec<(String, u32)> = others.into_iter().map(|(_, k, p)| (k, p)).collect();
    others.truncate(3);
    let borrowing = q
        .status
        .borrowed
        .iter()
        .filter(|(_, v)| v.nanos() > 0)
        .map(|(k, v)| format!("{} {}", display_quantity(k, *v, cfg), short_key(k, cfg)))
        .collect();
    TreeRow {
        name: q.name().to_string(),
        depth: 0,
        workloads: q.status.workloads.len(),
        children,
        gpu,
        models,
        budgets: cash_cells(q, in_use, cfg, pricing),
        borrowing,
        others,
        max_percent: crate::max_percent(q, &rolled, in_use),
        hidden_below: 0,
        context: false,
        open: children > 0,
        beyond_fold: false,
    }
}

/// A GPU model's name (`A100`) held inline, so that a sort stays `Copy`:
/// at most 63 bytes of letters, digits, `-` and `_`
/// (`quota::keys::is_model_name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelName {
    len: u8,
    bytes: [u8; 63],
}

impl ModelName {
    pub fn new(m: &str) -> Option<ModelName> {
        if !quota::keys::is_model_name(m) {
            return None;
        }
        let mut bytes = [0; 63];
        bytes[..m.len()].copy_from_slice(m.as_bytes());
        Some(ModelName {
            len: m.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }

    /// The model of a model column's key (`requests.nvidia.com/gpu.A100`).
    fn of_key(key: &str) -> Option<ModelName> {
        key.rsplit_once('.').and_then(|(_, m)| ModelName::new(m))
    }
}

/// How siblings are ordered: the column, each in the direction people
/// look for first (fullest, least left, soonest out, busiest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TreeSort {
    #[default]
    Name,
    Gpu,
    /// A GPU model's column (`?sort=model:A100`): fullest first.
    Model(ModelName),
    Budget,
    Runway,
    Workloads,
}

impl TreeSort {
    pub const ALL: [(TreeSort, &'static str); 5] = [
        (TreeSort::Name, ""),
        (TreeSort::Gpu, "gpu"),
        (TreeSort::Budget, "budget"),
        (TreeSort::Runway, "runway"),
        (TreeSort::Workloads, "workloads"),
    ];

    pub fn parse(s: &str) -> TreeSort {
        if let Some(m) = s.strip_prefix("model:").and_then(ModelName::new) {
            return TreeSort::Model(m);
        }
        TreeSort::ALL
            .iter()
            .find(|(_, v)| *v == s)
            .map(|(f, _)| *f)
            .unwrap_or_default()
    }

    /// The `sort` parameter's value.
    pub fn param(self) -> String {
        if let TreeSort::Model(m) = self {
            return format!("model:{}", m.as_str());
        }
        TreeSort::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, v)| v.to_string())
            .unwrap_or_default()
    }

    fn order(self, a: &TreeRow, b: &TreeRow) -> std::cmp::Ordering {
        use std::cmp::Reverse;
        let by = match self {
            TreeSort::Name => std::cmp::Ordering::Equal,
            TreeSort::Gpu => {
                let k = |r: &TreeRow| Reverse(r.gpu.as_ref().map(|g| g.percent));
                k(a).cmp(&k(b))
            }
            // Rows without the model last; of two columns of one model
            // (two GPU resources), the first.
            TreeSort::Model(m) => {
                let k = |r: &TreeRow| {
                    Reverse(
                        r.models
                            .iter()
                            .find(|c| ModelName::of_key(&c.key) == Some(m))
                            .map(|c| c.percent),
                    )
                };
                k(a).cmp(&k(b))
            }
            // Rows without a budget last.
            TreeSort::Budget => k_left(a).cmp(&k_left(b)),
            TreeSort::Runway => k_runway(a).cmp(&k_runway(b)),
            TreeSort::Workloads => Reverse(a.workloads).cmp(&Reverse(b.workloads)),
        };
        by.then_with(|| a.name.cmp(&b.name))
    }
}

/// What the budget column sorts by: the first (GPU) budget's left.
fn k_left(r: &TreeRow) -> i128 {
    r.budgets.first().map_or(i128::MAX, |c| c.left_nanos)
}

/// What the runway column sorts by: the shortest runway of any budget.
fn k_runway(r: &TreeRow) -> i128 {
    r.budgets
        .iter()
        .filter_map(|c| c.runway_hours)
        .min()
        .unwrap_or(i128::MAX)
}

/// Quotas in depth-first order, siblings in `sort` order, with orphans
/// (parent unknown) listed as roots so nothing is hidden. `in_use`: every
/// quota's subtree usage.
pub fn tree_rows<Q, U>(
    quotas: &[Q],
    in_use: &U,
    cfg: &KeyConfig,
    pricing: &Pricing,
    sort: TreeSort,
) -> Vec<TreeRow>
where
    Q: std::borrow::Borrow<Quota>,
    U: quota::rollup::SubtreeUse + ?Sized,
{
    let names: BTreeSet<&str> = quotas.iter().map(|q| q.borrow().name()).collect();
    let mut kids: BTreeMap<&str, Vec<&Quota>> = BTreeMap::new();
    for q in quotas {
        let q = q.borrow();
        let p = q.spec.parent.as_str();
        let p = if names.contains(p) && p != q.name() {
            p
        } else {
            ""
        };
        kids.entry(p).or_default().push(q);
    }
    let empty = ResourceList::new();
    let row = |q: &Quota| {
        let n = kids.get(q.name()).map_or(0, Vec::len);
        row_of(q, in_use.of(q.name()).unwrap_or(&empty), n, cfg, pricing)
    };
    let sorted = |list: &[&Quota]| {
        let mut rows: Vec<TreeRow> = list.iter().map(|q| row(q)).collect();
        rows.sort_by(|a, b| sort.order(a, b));
        rows
    };
    let mut out = Vec::with_capacity(quotas.len());
    let mut stack: Vec<(TreeRow, usize)> = kids
        .get("")
        .map(|v| sorted(v).into_iter().rev().map(|r| (r, 0)).collect())
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    while let Some((mut r, depth)) = stack.pop() {
        if !seen.insert(r.name.clone()) {
            continue; // a parent cycle: each quota once
        }
        r.depth = depth;
        let name = r.name.clone();
        out.push(r);
        if let Some(children) = kids.get(name.as_str()) {
            stack.extend(sorted(children).into_iter().rev().map(|c| (c, depth + 1)));
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
    /// Fold rows deeper than this (None: as [`fold_depth`] decides).
    pub depth: Option<usize>,
    pub sort: TreeSort,
    /// Rows opened below the fold depth.
    pub open: BTreeSet<String>,
    /// Rows closed above it.
    pub closed: BTreeSet<String>,
}

/// A search or filter shows at most this many quotas it found (with their
/// ancestors); the page says how many more match.
pub const MAX_FOUND: usize = 200;

/// At most this many quotas are named in `open` or `closed` (a URL stays short).
pub const MAX_TOGGLED: usize = 50;

impl TreeQuery {
    /// Reads `open`/`closed` lists (comma-separated), dropping what is
    /// past [`MAX_TOGGLED`] or not a possible quota name.
    pub fn names(list: &str) -> BTreeSet<String> {
        list.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && n.len() <= 253)
            .take(MAX_TOGGLED)
            .map(str::to_string)
            .collect()
    }

    /// Drops from `open` and `closed` what is not a row with children here
    /// (every link repeats both lists: made-up names would make each page
    /// a multiple of the URL), and cuts the search to a name's length.
    pub fn keep_only_rows_of(&mut self, rows: &[TreeRow]) {
        let parents: BTreeSet<&str> = rows
            .iter()
            .filter(|r| r.children > 0)
            .map(|r| r.name.as_str())
            .collect();
        self.open.retain(|n| parents.contains(n.as_str()));
        self.closed.retain(|n| parents.contains(n.as_str()));
        if let Some((i, _)) = self.search.char_indices().nth(253) {
            self.search.truncate(i);
        }
    }

    /// Whether the search (lowercased `needle`) and the filter find `r`.
    pub fn matches(&self, r: &TreeRow, needle: &str) -> bool {
        r.name.to_lowercase().contains(needle) && self.filter.keeps(r)
    }

    /// This query as a `/tree?…` link.
    pub fn href(&self) -> String {
        let mut parts: Vec<(&str, String)> = Vec::new();
        if !self.search.is_empty() {
            parts.push(("q", self.search.clone()));
        }
        if self.filter != TreeFilter::All {
            parts.push(("filter", self.filter.as_str().into()));
        }
        if let Some(u) = &self.under {
            parts.push(("under", u.clone()));
        }
        if let Some(d) = self.depth {
            parts.push(("depth", d.to_string()));
        }
        if self.sort != TreeSort::Name {
            parts.push(("sort", self.sort.param()));
        }
        let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(",");
        if !self.open.is_empty() {
            parts.push(("open", join(&self.open)));
        }
        if !self.closed.is_empty() {
            parts.push(("closed", join(&self.closed)));
        }
        if parts.is_empty() {
            return "/tree".into();
        }
        let q: Vec<String> = parts
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        format!("/tree?{}", q.join("&"))
    }

    /// The link that opens (or closes) `name` in place.
    fn toggled(&self, name: &str, open_now: bool, folded_by_depth: bool) -> String {
        let mut q = self.clone();
        let (add, remove) = if folded_by_depth {
            (&mut q.open, &mut q.closed)
        } else {
            (&mut q.closed, &mut q.open)
        };
        if open_now == folded_by_depth {
            // Undo the exception that opened (or closed) it.
            add.remove(name);
        } else if add.len() < MAX_TOGGLED {
            add.insert(name.to_string());
        }
        remove.remove(name);
        format!("{}#{}", q.href(), encode(name))
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    crate::layout::encode_component(s)
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
            TreeFilter::Borrowing => !r.borrowing.is_empty(),
        }
    }
}

/// Rows a page shows at most before it folds deeper levels by itself.
pub const FOLD_ROWS: usize = 200;

/// The deepest level at which the whole tree down to it still fits in
/// [`FOLD_ROWS`] rows (at least the roots); None when all of it fits.
pub fn fold_depth(rows: &[TreeRow]) -> Option<usize> {
    if rows.len() <= FOLD_ROWS {
        return None;
    }
    let mut per_depth: BTreeMap<usize, usize> = BTreeMap::new();
    for r in rows {
        *per_depth.entry(r.depth).or_default() += 1;
    }
    let mut total = 0;
    let mut depth = 0;
    for (d, n) in per_depth {
        total += n;
        if total > FOLD_ROWS {
            break;
        }
        depth = d;
    }
    Some(depth)
}

/// The rows `query` selects from depth-first `rows`: a subtree, the rows a
/// search or filter finds (with their ancestors as context, so the shape
/// still reads), or the tree folded below a depth, with rows opened or
/// closed in place.
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
        let mut hits = 0;
        let mut ancestors: Vec<usize> = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            while ancestors.last().is_some_and(|&a| rows[a].depth >= r.depth) {
                ancestors.pop();
            }
            if hits < MAX_FOUND && query.matches(r, &needle) {
                hits += 1;
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
    let depth = query.depth.or_else(|| fold_depth(&rows));
    // A row is open when it has children and is within the depth (unless
    // closed) or opened; a row shows when every ancestor is open.
    let mut out: Vec<TreeRow> = Vec::new();
    // The depth below which rows are hidden (None: nothing hidden now),
    // and the index in `out` of the row that hides them.
    let mut hiding: Option<(usize, usize)> = None;
    for mut r in rows {
        if let Some((d, at)) = hiding {
            if r.depth > d {
                out[at].hidden_below += 1;
                continue;
            }
            hiding = None;
        }
        let by_depth = depth.is_none_or(|d| r.depth < d);
        r.beyond_fold = !by_depth;
        r.open = r.children > 0
            && if by_depth {
                !query.closed.contains(&r.name)
            } else {
                query.open.contains(&r.name)
            };
        if r.children > 0 && !r.open {
            hiding = Some((r.depth, out.len()));
        }
        out.push(r);
    }
    out
}

/// Rows `GET /tree/rows` returns at most; the rest a link away.
pub const MAX_ROWS_UNDER: usize = FOLD_ROWS;

/// The rows the tree page shows under `parent` once it is opened, with
/// `parent` at depth `at` and the page folded at `query.depth` (None: not
/// folded): what ▸ inserts in place. Depth-first `rows` must hold
/// `parent`'s whole subtree. None when `parent` is not among them. Also
/// the query of the page after opening it (for the rows' links) and how
/// many rows past [`MAX_ROWS_UNDER`] were left out.
pub fn rows_under(
    rows: Vec<TreeRow>,
    parent: &str,
    at: usize,
    query: &TreeQuery,
) -> Option<(Vec<TreeRow>, TreeQuery, usize)> {
    let i = rows.iter().position(|r| r.name == parent)?;
    let base = rows[i].depth;
    let end = rows[i + 1..]
        .iter()
        .position(|r| r.depth <= base)
        .map_or(rows.len(), |n| i + 1 + n);
    let block: Vec<TreeRow> = rows
        .into_iter()
        .skip(i)
        .take(end - i)
        .map(|mut r| {
            r.depth = r.depth - base + at;
            r
        })
        .collect();
    // The page after ▸: opened below the fold, or no longer closed above it.
    let mut page = TreeQuery {
        search: String::new(),
        filter: TreeFilter::All,
        under: query.under.clone(),
        ..query.clone()
    };
    let beyond = query.depth.is_some_and(|d| at >= d);
    if beyond {
        if page.open.len() < MAX_TOGGLED {
            page.open.insert(parent.to_string());
        }
    } else {
        page.closed.remove(parent);
    }
    let select = TreeQuery {
        under: None,
        // Not folded: no depth hides anything.
        depth: Some(page.depth.unwrap_or(usize::MAX)),
        ..page.clone()
    };
    let mut shown = select_rows(block, &select);
    shown.remove(0);
    let more = shown.len().saturating_sub(MAX_ROWS_UNDER);
    shown.truncate(MAX_ROWS_UNDER);
    Some((shown, page, more))
}

#[cfg(feature = "ssr")]
fn sort_header(
    query: &TreeQuery,
    sort: TreeSort,
    label: String,
    model_key: Option<String>,
) -> impl IntoView {
    let mut q = query.clone();
    q.sort = sort;
    let current = (query.sort == sort).then_some("true");
    // One direction per column, as `TreeSort::order` sorts: the island
    // sorts each level the same way in place.
    let (kind, first, aria) = match sort {
        TreeSort::Name => ("text", "asc", "ascending"),
        TreeSort::Gpu | TreeSort::Model(_) | TreeSort::Workloads => ("num", "desc", "descending"),
        TreeSort::Budget | TreeSort::Runway => ("num", "asc", "ascending"),
    };
    let sorted = (query.sort == sort).then_some(aria);
    let href = q.href();
    view! {
        <th aria-sort=sorted data-sort=kind data-sort-key=sort.param() data-sort-first=first
            title=model_key.clone() data-model=model_key>
            <a href=href data-current=current>{label}</a>
        </th>
    }
}

#[cfg(feature = "ssr")]
fn gpu_view(g: Option<GpuCell>, label: String) -> impl IntoView {
    match g {
        None => view! { <td class="gpu none empty" data-label=label data-sort-value="">"—"</td> }
            .into_any(),
        Some(g) => {
            let class = match g.percent {
                p if p > 100 => "bar over",
                p if p >= 80 => "bar warn",
                _ => "bar",
            };
            let width = format!("width:{}%", g.percent.min(100));
            let idle = format!("width:{}%", g.idle_percent);
            let title = format!(
                "{}: {} in use (subtree), {} allocated to children, {} hard",
                g.key, g.in_use, g.allocated, g.hard
            );
            view! {
                <td class="gpu" data-label=label title=title data-sort-value=g.percent.to_string()>
                    <span class=class><i class="use" style=width></i><i class="idle" style=idle></i></span>
                    <span class="num"><b>{g.in_use}</b>{format!(" / {}", g.hard)}</span>
                </td>
            }
            .into_any()
        }
    }
}

/// One row of the tree, as the page and `GET /tree/rows` render it; its
/// data attributes are what the tree island reads (depth, children, what
/// is folded below, whether it is beyond the fold depth).
#[cfg(feature = "ssr")]
fn tree_row(r: TreeRow, query: &TreeQuery, columns: &[(String, String)]) -> impl IntoView {
    let indent = format!("padding-left:{}rem", 0.3 + 1.1 * r.depth as f32);
    let href = format!("/quotas/{}", r.name);
    let toggle = (r.children > 0 && !r.context).then(|| {
        let link = query.toggled(&r.name, r.open, r.beyond_fold);
        let (sign, label) = if r.open {
            ("▾", format!("Fold the {} quotas under {}", r.children, r.name))
        } else {
            ("▸", format!("Open the {} quotas under {}", r.children, r.name))
        };
        view! { <a class="toggle" href=link aria-label=label aria-expanded=r.open.to_string()>{sign}</a> }
    });
    let spacer = (r.children == 0 || r.context).then(|| view! { <span class="toggle"></span> });
    let folded = (r.hidden_below > 0).then(|| {
        view! { <small class="folded">{format!("{} below", r.hidden_below)}</small> }
    });
    let class = r.context.then_some("context");
    let id = r.name.clone();
    // Empty cells read "—" on a wide screen and are left out on a phone.
    let cell = |empty: bool, class: &'static str| {
        if empty {
            format!("{class} empty")
        } else {
            class.to_string()
        }
    };
    // A quota with several budgets lists them one per line ("several").
    let several = if r.budgets.len() > 1 { " several" } else { "" };
    let (left_class, runway_class) = (
        cell(r.budgets.is_empty(), "num left") + several,
        cell(r.budgets.iter().all(|c| c.runway.is_none()), "num runway") + several,
    );
    // What the island sorts by: the numbers `TreeSort::order` compares.
    let left_value = r.budgets.first().map(|c| c.left_nanos.to_string());
    let runway_value = (k_runway(&r) != i128::MAX).then(|| k_runway(&r).to_string());
    let (depth, children, hidden) = (
        r.depth.to_string(),
        r.children.to_string(),
        r.hidden_below.to_string(),
    );
    let beyond = r.beyond_fold.then_some("true");
    let sort_name = r.name.clone();
    // One line per budget, in the same order in both columns; the budget's
    // name only when there is more than one.
    let named = r.budgets.len() > 1;
    let (left, runway) = if r.budgets.is_empty() {
        (view! { "—" }.into_any(), view! { "—" }.into_any())
    } else {
        let lefts = r
            .budgets
            .iter()
            .map(|c| {
                let title = format!("{}: {}% spent", c.key, c.spent_percent);
                let label = named.then(|| view! { <small>{format!("{} ", c.label)}</small> });
                view! { <span class="budget" title=title>{label}{c.left.clone()}</span> }
            })
            .collect_view();
        let runways = r
            .budgets
            .iter()
            .map(|c| {
                let label = named.then(|| view! { <small>{format!("{} ", c.label)}</small> });
                view! { <span class="budget">{label}{c.runway.clone().unwrap_or_else(|| "—".into())}</span> }
            })
            .collect_view();
        (lefts.into_any(), runways.into_any())
    };
    // One cell per model column, "—" where this quota has none of it.
    let model_cells = columns
        .iter()
        .map(|(key, name)| {
            let c = r.models.iter().find(|m| &m.key == key).cloned();
            gpu_view(c, name.clone())
        })
        .collect_view();
    let borrow_class = cell(r.borrowing.is_empty(), "borrowing");
    let others_class = cell(r.others.is_empty(), "others");
    let borrowing = if r.borrowing.is_empty() {
        view! { "—" }.into_any()
    } else {
        view! { <span class="badge borrow">{r.borrowing.join(", ")}</span> }.into_any()
    };
    let others = r
        .others
        .into_iter()
        .map(|(k, p)| {
            let class = match p {
                p if p > 100 => "pct over",
                p if p >= 80 => "pct warn",
                _ => "pct",
            };
            view! { <span class=class>{format!("{k} {p}%")}</span> }
        })
        .collect_view();
    view! {
        <tr id=id class=class data-depth=depth data-children=children data-hidden=hidden data-beyond-fold=beyond>
            <td class="name" style=indent data-label="Quota" data-sort-value=sort_name>{toggle}{spacer}<a href=href>{r.name}</a>{folded}</td>
            {gpu_view(r.gpu, "GPUs".to_string())}
            {model_cells}
            <td class=left_class data-label="Budget left" data-sort-value=left_value>{left}</td>
            <td class=runway_class data-label="Runway" data-sort-value=runway_value>{runway}</td>
            <td class=borrow_class data-label="Borrowing">{borrowing}</td>
            <td class=others_class data-label="Other keys">{others}</td>
            <td class="num workloads" data-label="Workloads" data-sort-value=r.workloads.to_string()>{r.workloads}</td>
        </tr>
    }
}

/// The rows of `GET /tree/rows` as an HTML fragment (`<tr>`s), with a
/// last row that says how many more there are when `more` is not zero.
#[cfg(feature = "ssr")]
pub fn render_tree_rows(
    rows: Vec<TreeRow>,
    query: &TreeQuery,
    more: usize,
    parent: &str,
    models: &[String],
    cfg: &KeyConfig,
) -> String {
    let columns = named_columns(models, cfg);
    let span = (7 + columns.len()).to_string();
    let tail = (more > 0).then(|| {
        let href = format!("{}#{}", query.href(), encode(parent));
        view! {
            <tr data-static="true" data-parent=parent.to_string() class="more">
                <td colspan=span><a href=href>{format!("{more} more rows under {parent}: show the whole page")}</a></td>
            </tr>
        }
    });
    Owner::new().with(|| {
        let rows = rows
            .into_iter()
            .map(|r| tree_row(r, query, &columns))
            .collect_view();
        view! { {rows}{tail} }.to_html()
    })
}

/// Each model column's key and its name ("A100 GPUs").
fn named_columns(models: &[String], cfg: &KeyConfig) -> Vec<(String, String)> {
    models
        .iter()
        .map(|k| (k.clone(), quota::keys::display_name(k, cfg)))
        .collect()
}

#[cfg(feature = "ssr")]
fn tree_table(
    rows: Vec<TreeRow>,
    query: &TreeQuery,
    fold: Option<usize>,
    columns: Vec<(String, String)>,
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty">"No quotas to show: none matches, none exists yet, or none is shared with you."</p> }
            .into_any();
    }
    // Levels open in place only where the page is the tree folded (not a
    // search's finds with their ancestors).
    let searching = !query.search.trim().is_empty() || query.filter != TreeFilter::All;
    let inplace = (!searching).then_some("true");
    let fold = fold.map(|d| d.to_string());
    let body = rows
        .into_iter()
        .map(|r| tree_row(r, query, &columns))
        .collect_view();
    // Each model's column sorts like the GPU column (a link without
    // scripts, in place with them); a key that names no model is a plain
    // heading.
    let model_heads = columns
        .iter()
        .map(|(key, name)| {
            let label = format!("{name} in use / hard");
            match ModelName::of_key(key) {
                Some(m) => {
                    sort_header(query, TreeSort::Model(m), label, Some(key.clone())).into_any()
                }
                None => {
                    view! { <th title=key.clone() data-model=key.clone()>{label}</th> }.into_any()
                }
            }
        })
        .collect_view();
    let head = view! {
        <thead><tr>
            {sort_header(query, TreeSort::Name, "Quota".into(), None)}
            {sort_header(query, TreeSort::Gpu, "GPUs in use / hard".into(), None)}
            {model_heads}
            {sort_header(query, TreeSort::Budget, "Budget left".into(), None)}
            {sort_header(query, TreeSort::Runway, "Runway".into(), None)}
            <th>"Borrowing"</th>
            <th>"Fullest other keys"</th>
            {sort_header(query, TreeSort::Workloads, "Workloads".into(), None)}
        </tr></thead>
    };
    view! {
        <bizrq_islands::SortTable>
        <div class="table-wrap">
        <table class="tree" data-tree="true" data-tree-inplace=inplace data-fold-depth=fold data-sort-url="sort">
            {head}
            <tbody>{body}</tbody>
        </table>
        </div>
        </bizrq_islands::SortTable>
    }
    .into_any()
}

/// The quota tree (the quotas the viewer may see) as a whole HTML document,
/// with a search and filter form (a plain GET).
#[cfg(feature = "ssr")]
pub fn render_tree_page<Q, U>(
    viewer: Viewer,
    quotas: &[Q],
    in_use: &U,
    cfg: &KeyConfig,
    pricing: &Pricing,
    mut query: TreeQuery,
) -> String
where
    Q: std::borrow::Borrow<Quota>,
    U: quota::rollup::SubtreeUse + ?Sized,
{
    let all = tree_rows(quotas, in_use, cfg, pricing, query.sort);
    let columns = named_columns(&model_columns(quotas, cfg), cfg);
    let total = all.len();
    query.keep_only_rows_of(&all);
    let needle = query.search.trim().to_lowercase();
    let searching = !needle.is_empty() || query.filter != TreeFilter::All;
    let found = if searching && query.under.is_none() {
        all.iter().filter(|r| query.matches(r, &needle)).count()
    } else {
        0
    };
    let rows = select_rows(all, &query);
    // The depth the page folds at (the shallowest row beyond it): the
    // island asks for rows under a quota at the same one.
    let fold = rows.iter().filter(|r| r.beyond_fold).map(|r| r.depth).min();
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
    let current = query.sort;
    let mut sorts: Vec<(TreeSort, String)> =
        [(TreeSort::Name, "name"), (TreeSort::Gpu, "GPUs in use")]
            .into_iter()
            .map(|(s, l)| (s, l.to_string()))
            .collect();
    sorts.extend(columns.iter().filter_map(|(key, name)| {
        ModelName::of_key(key).map(|m| (TreeSort::Model(m), format!("{name} in use")))
    }));
    sorts.extend(
        [
            (TreeSort::Budget, "card-hours left"),
            (TreeSort::Runway, "runway"),
            (TreeSort::Workloads, "workloads"),
        ]
        .into_iter()
        .map(|(s, l)| (s, l.to_string())),
    );
    let sorts = sorts
        .into_iter()
        .map(|(s, label)| view! { <option value=s.param() selected=s == current>{label}</option> })
        .collect_view();
    let sort = view! { <label>"Sort by"<select name="sort">{sorts}</select></label> };
    let search = query.search.clone();
    let summary = if found > MAX_FOUND {
        format!("the first {MAX_FOUND} of {found} quotas found, of {total}; narrow the search to see the rest.")
    } else if folded {
        format!("{shown} of {total} shown; ▸ opens a level in place, or search by name.")
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
                    {sort}
                    <button type="submit">"Apply"</button>
                    <a href="/tree">"Reset"</a>
                    <a href="/tree.csv" download>"CSV"</a>
                    <span class="hint">{summary}</span>
                </form>
                <BarLegend/>
                <p class="hint">"Runway: how long each budget lasts at what the quota itself runs now, at its prices. Click a column to sort each level by it."</p>
                {tree_table(rows, &query, fold, columns)}
            </layout::Layout>
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::QuotaSpec;

    fn q(name: &str, parent: &str, gpus: i64, budget: Option<i64>) -> Quota {
        let mut hard: ResourceList = [
            (
                "requests.nvidia.com/gpu".to_string(),
                Quantity::from_units(gpus),
            ),
            ("requests.cpu".to_string(), Quantity::from_units(10)),
            ("limits.memory".to_string(), Quantity::ZERO),
        ]
        .into();
        if let Some(b) = budget {
            hard.insert(
                "cash/requests.nvidia.com/gpu".into(),
                Quantity::from_units(b),
            );
        }
        Quota::new(
            name,
            QuotaSpec {
                parent: parent.into(),
                hard,
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        )
    }

    /// Issue 31: a column per GPU model that has a hard anywhere, in
    /// display order, named; each row's cell is its in use over hard, "—"
    /// where it has none; the other-keys column no longer repeats them.
    #[test]
    fn the_tree_has_a_column_per_gpu_model() {
        let cfg = KeyConfig::default();
        let with = |mut q: Quota, key: &str, hard: i64, used: i64| {
            q.spec.hard.insert(key.into(), Quantity::from_units(hard));
            q.status.hard.insert(key.into(), Quantity::from_units(hard));
            q.status
                .self_used
                .insert(key.into(), Quantity::from_units(used));
            q.status.used.insert(key.into(), Quantity::from_units(used));
            q
        };
        let h100 = "requests.nvidia.com/gpu.H100";
        let a100 = "requests.nvidia.com/gpu.A100";
        let org = with(with(q("org", "", 16, None), h100, 8, 0), a100, 8, 0);
        let team = with(q("team", "org", 8, None), a100, 8, 7);
        let quotas = vec![org, team];
        assert_eq!(model_columns(&quotas, &cfg), [a100, h100]);
        let in_use = quota::rollup::subtree_in_use(&quotas);
        let rows = tree_rows(&quotas, &in_use, &cfg, &Pricing::default(), TreeSort::Name);
        let team_row = rows.iter().find(|r| r.name == "team").unwrap();
        assert_eq!(
            team_row.models.len(),
            1,
            "{:?} {:?}",
            team_row.models,
            team_row.others
        );
        assert_eq!(team_row.models[0].in_use, "7");
        assert!(
            team_row.others.iter().all(|(k, _)| !k.contains("A100")),
            "{:?}",
            team_row.others
        );
        #[cfg(feature = "ssr")]
        {
            let viewer = crate::layout::Viewer {
                username: "admin".into(),
                is_admin: true,
                csrf: "x".into(),
                open_alerts: 0,
            };
            let html = render_tree_page(
                viewer,
                &quotas,
                &in_use,
                &cfg,
                &Pricing::default(),
                TreeQuery::default(),
            );
            assert!(html.contains(">A100 GPUs in use / hard</a></th>"), "{html}");
            assert!(html.contains(">H100 GPUs in use / hard</a></th>"), "{html}");
            // Sortable like the other columns: a link without scripts,
            // the island's key with them, and on the phone's menu.
            assert!(
                html.contains(r#"data-sort-key="model:A100""#)
                    && html.contains(r#"href="/tree?sort=model%3AA100""#)
                    && html.contains(r#"<option value="model:H100">H100 GPUs in use</option>"#),
                "{html}"
            );
            assert!(
                html.find("A100 GPUs in use") < html.find("H100 GPUs in use"),
                "A100 before H100"
            );
            assert!(html.contains(r#"data-label="A100 GPUs""#), "{html}");
        }
    }

    /// `?sort=model:A100` orders each level by that model's column,
    /// fullest first, quotas without it last; a name that is no model
    /// name sorts by name.
    #[test]
    fn a_model_column_sorts_its_level() {
        let cfg = KeyConfig::default();
        let a100 = "requests.nvidia.com/gpu.A100";
        let with = |mut q: Quota, hard: i64, used: i64| {
            q.spec.hard.insert(a100.into(), Quantity::from_units(hard));
            q.status
                .hard
                .insert(a100.into(), Quantity::from_units(hard));
            q.status
                .self_used
                .insert(a100.into(), Quantity::from_units(used));
            q
        };
        let quotas = vec![
            with(q("org", "", 32, None), 24, 0),
            with(q("a-lab", "org", 8, None), 8, 2),
            q("b-idle", "org", 8, None),
            with(q("c-team", "org", 8, None), 8, 7),
        ];
        let in_use = quota::rollup::subtree_in_use(&quotas);
        let m = ModelName::new("A100").unwrap();
        let sort = TreeSort::parse("model:A100");
        assert_eq!(sort, TreeSort::Model(m));
        assert_eq!(sort.param(), "model:A100");
        assert_eq!(TreeSort::parse("model:A 100"), TreeSort::Name);
        assert_eq!(
            TreeSort::parse(&format!("model:{}", "x".repeat(64))),
            TreeSort::Name
        );
        let rows = tree_rows(&quotas, &in_use, &cfg, &Pricing::default(), sort);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["org", "c-team", "a-lab", "b-idle"]);
    }

    fn using(mut q: Quota, gpus: i64, spent: i64) -> Quota {
        let u: ResourceList = [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(gpus),
        )]
        .into();
        q.status.self_used = u.clone();
        q.status.used = u.clone();
        q.status.used.insert(
            "cash/requests.nvidia.com/gpu".into(),
            Quantity::from_units(spent),
        );
        // Spent as accrual records it (`cashAccrued`, per mille of acc).
        q.status.add_accrued(
            "cash/requests.nvidia.com/gpu",
            quota::budget::from_quantity(Quantity::from_units(spent))
                / (quota::budget::PRICE_ONE / quota::cash::PER_MILLE),
        );
        // What it runs itself, as charged: the burn its budget pays.
        if gpus > 0 {
            q.status.workloads.insert(
                "apps/Deployment/ns/w".into(),
                quota::object::Charge {
                    pod_sets: vec![quota::workload::PodSet {
                        name: "main".into(),
                        count: 1,
                        per_pod: u,
                        qos: None,
                    }],
                    hpa: None,
                    since: String::new(),
                    uid: String::new(),
                    admitted: None,
                },
            );
        }
        q
    }

    /// ai ─┬─ nlp ── nlp-a
    ///     └─ vision
    fn forest() -> Vec<Quota> {
        vec![
            q("ai", "", 32, None),
            using(q("nlp", "ai", 16, Some(1000)), 2, 100),
            using(q("nlp-a", "nlp", 8, Some(480)), 6, 0),
            using(q("vision", "ai", 8, Some(100)), 8, 76),
        ]
    }

    fn rows(sort: TreeSort) -> Vec<TreeRow> {
        let f = forest();
        let in_use = quota::rollup::subtree_in_use(&f);
        tree_rows(
            &f,
            &in_use,
            &KeyConfig::default(),
            &Pricing::default(),
            sort,
        )
    }

    fn names(rows: &[TreeRow]) -> Vec<(&str, usize, bool, usize)> {
        rows.iter()
            .map(|r| (r.name.as_str(), r.depth, r.context, r.hidden_below))
            .collect()
    }

    #[test]
    fn a_row_has_the_columns_people_compare() {
        let r = rows(TreeSort::Name);
        let ai = &r[0];
        let gpu = ai.gpu.as_ref().unwrap();
        // The whole subtree runs 16 of ai's 32 cards.
        assert_eq!((gpu.in_use.as_str(), gpu.hard.as_str()), ("16", "32"));
        assert_eq!(gpu.percent, 50);
        assert!(ai.budgets.is_empty(), "ai has no budget");
        let nlp = r.iter().find(|r| r.name == "nlp").unwrap();
        let cash = &nlp.budgets[0];
        assert_eq!(cash.left, "900 card-hours");
        // 900 card-hours at the 2 cards nlp runs itself (nlp-a's 6 spend
        // nlp-a's budget) = 450 h = 18.7 days, rounded down.
        assert_eq!(cash.runway.as_deref(), Some("18.7 days"));
        // A zero hard nobody uses is not a column of anything.
        assert!(nlp.others.iter().all(|(k, _)| k != "memory (limit)"));
        assert_eq!(nlp.others, vec![("CPU cores".to_string(), 0)]);
    }

    #[test]
    fn every_budget_has_its_runway_at_the_price_it_pays() {
        // vision also has an H100 budget; its 8 cards are H100s, priced
        // 2.5 a card-hour.
        let mut f = forest();
        let v = f.iter_mut().find(|q| q.name() == "vision").unwrap();
        let h100 = "requests.nvidia.com/gpu.H100";
        v.spec
            .hard
            .insert(format!("cash/{h100}"), Quantity::from_units(400));
        let w = v.status.workloads.values_mut().next().unwrap();
        w.pod_sets[0]
            .per_pod
            .insert(h100.into(), Quantity::from_units(8));
        let list = quota::budget::PriceList {
            versions: vec![quota::budget::PriceVersion {
                effective_ms: 0,
                weights: [(
                    "nvidia.com/gpu.H100".to_string(),
                    quota::budget::Weight(2500),
                )]
                .into(),
                default_weight: quota::budget::Weight::ONE,
                quality: None,
            }],
            currency: None,
        };
        let pricing = Pricing {
            list: std::sync::Arc::new(list),
            now_ms: 1_767_225_600_000,
            ..Pricing::default()
        };
        let in_use = quota::rollup::subtree_in_use(&f);
        let rows = tree_rows(&f, &in_use, &KeyConfig::default(), &pricing, TreeSort::Name);
        let vision = rows.iter().find(|r| r.name == "vision").unwrap();
        let got: Vec<(&str, &str, Option<&str>)> = vision
            .budgets
            .iter()
            .map(|c| (c.label.as_str(), c.left.as_str(), c.runway.as_deref()))
            .collect();
        // The GPU budget first: 24 card-hours left at 8 H100s × 2.5 = 20 an
        // hour lasts 1.2 h; the H100 budget's 400 at 20 an hour, 20 h.
        assert_eq!(
            got,
            [
                ("GPU card-hours", "24 card-hours", Some("1.2 hours")),
                ("H100 card-hours", "400 card-hours", Some("20 hours")),
            ]
        );
        // Sorting by runway takes a row's shortest.
        assert_eq!(k_runway(vision), 1);
    }

    #[test]
    fn siblings_sort_by_a_column_and_children_stay_under_their_parent() {
        let order = |s| -> Vec<String> { rows(s).into_iter().map(|r| r.name).collect() };
        assert_eq!(order(TreeSort::Name), ["ai", "nlp", "nlp-a", "vision"]);
        // vision runs 100 %, nlp 50 % (8 of 16 in its subtree); nlp-a
        // stays under nlp.
        assert_eq!(order(TreeSort::Gpu), ["ai", "vision", "nlp", "nlp-a"]);
        // vision: 24 card-hours left at 8 cards = 3 h; nlp: 112.5 h.
        assert_eq!(order(TreeSort::Runway), ["ai", "vision", "nlp", "nlp-a"]);
        assert_eq!(order(TreeSort::Budget), ["ai", "vision", "nlp", "nlp-a"]);
    }

    #[test]
    fn a_search_keeps_the_ancestors_of_what_it_finds_as_context() {
        let q = TreeQuery {
            search: "P-A".into(),
            ..Default::default()
        };
        let got = select_rows(rows(TreeSort::Name), &q);
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
    fn folding_counts_what_it_hides_and_rows_open_and_close_in_place() {
        let q = TreeQuery {
            depth: Some(1),
            ..Default::default()
        };
        assert_eq!(
            names(&select_rows(rows(TreeSort::Name), &q)),
            [
                ("ai", 0, false, 0),
                ("nlp", 1, false, 1),
                ("vision", 1, false, 0)
            ]
        );
        let mut opened = q.clone();
        opened.open.insert("nlp".into());
        assert_eq!(select_rows(rows(TreeSort::Name), &opened).len(), 4);
        let closed = TreeQuery {
            closed: ["ai".to_string()].into(),
            ..Default::default()
        };
        assert_eq!(
            names(&select_rows(rows(TreeSort::Name), &closed)),
            [("ai", 0, false, 3)]
        );
        // The toggle links say the same.
        assert_eq!(q.toggled("nlp", false, true), "/tree?depth=1&open=nlp#nlp");
        assert_eq!(opened.toggled("nlp", true, true), "/tree?depth=1#nlp");
        assert_eq!(
            TreeQuery::default().toggled("ai", true, false),
            "/tree?closed=ai#ai"
        );
    }

    #[test]
    fn a_big_tree_folds_to_what_fits_a_page() {
        let mut f = vec![q("root", "", 1000, None)];
        for d in 0..30 {
            f.push(q(&format!("d{d}"), "root", 10, None));
            for t in 0..10 {
                f.push(q(&format!("t{d}-{t}"), &format!("d{d}"), 1, None));
            }
        }
        let in_use = quota::rollup::subtree_in_use(&f);
        let rows = tree_rows(
            &f,
            &in_use,
            &KeyConfig::default(),
            &Pricing::default(),
            TreeSort::Name,
        );
        assert_eq!(fold_depth(&rows), Some(1));
        let shown = select_rows(
            rows,
            &TreeQuery {
                depth: Some(1),
                ..Default::default()
            },
        );
        assert_eq!(shown.len(), 31);
        assert!(shown[1..].iter().all(|r| r.hidden_below == 10));
    }

    #[test]
    fn a_search_shows_at_most_so_many_finds() {
        let mut f = vec![q("root", "", 1000, None)];
        for t in 0..(MAX_FOUND + 50) {
            f.push(q(&format!("team-{t}"), "root", 1, None));
        }
        let in_use = quota::rollup::subtree_in_use(&f);
        let rows = tree_rows(
            &f,
            &in_use,
            &KeyConfig::default(),
            &Pricing::default(),
            TreeSort::Name,
        );
        let query = TreeQuery {
            search: "team".into(),
            ..Default::default()
        };
        let shown = select_rows(rows, &query);
        assert_eq!(shown.iter().filter(|r| !r.context).count(), MAX_FOUND);
        assert!(shown[0].context, "the root is shown as context");
    }

    #[test]
    fn made_up_names_do_not_ride_along_in_every_link() {
        let mut q = TreeQuery {
            open: [
                "nlp".to_string(),
                "no-such".to_string(),
                "nlp-a".to_string(),
            ]
            .into(),
            closed: ["!".repeat(253)].into(),
            search: "x".repeat(10_000),
            ..Default::default()
        };
        q.keep_only_rows_of(&rows(TreeSort::Name));
        // nlp has a child; nlp-a has none; the others are no rows at all.
        assert_eq!(q.open, ["nlp".to_string()].into());
        assert!(q.closed.is_empty());
        assert_eq!(q.search.len(), 253);
    }

    #[test]
    fn links_encode_names_and_keep_the_query() {
        let q = TreeQuery {
            search: "a b&c".into(),
            sort: TreeSort::Runway,
            ..Default::default()
        };
        assert_eq!(q.href(), "/tree?q=a%20b%26c&sort=runway");
        assert_eq!(
            TreeQuery::names("a, b,,c"),
            ["a", "b", "c"].map(String::from).into()
        );
    }

    #[test]
    fn rows_under_a_quota_are_what_the_page_shows_once_it_is_opened() {
        // Folded at depth 1: nlp (depth 1) is beyond the fold and closed.
        let q = TreeQuery {
            depth: Some(1),
            ..Default::default()
        };
        let (rows, page, more) = rows_under(rows(TreeSort::Name), "nlp", 1, &q).unwrap();
        assert_eq!(names(&rows), [("nlp-a", 2, false, 0)]);
        assert_eq!(more, 0);
        assert!(page.open.contains("nlp"));
        // The page with nlp opened shows the same row.
        let whole = select_rows(rows_all(), &page);
        let i = whole.iter().position(|r| r.name == "nlp").unwrap();
        assert_eq!(names(&whole[i + 1..i + 2]), names(&rows));
        // Closed above the fold: reopening drops it from `closed`, and
        // the level below comes back whole.
        let closed = TreeQuery {
            closed: ["ai".to_string()].into(),
            ..Default::default()
        };
        let (rows, page, _) = rows_under(rows_all(), "ai", 0, &closed).unwrap();
        assert_eq!(
            names(&rows),
            [
                ("nlp", 1, false, 0),
                ("nlp-a", 2, false, 0),
                ("vision", 1, false, 0)
            ]
        );
        assert!(page.closed.is_empty());
        assert!(rows_under(rows_all(), "nobody", 0, &closed).is_none());
    }

    #[test]
    fn rows_under_a_quota_are_bounded() {
        let mut f = vec![q("root", "", 1000, None)];
        for t in 0..(MAX_ROWS_UNDER + 7) {
            f.push(q(&format!("team-{t:04}"), "root", 1, None));
        }
        let in_use = quota::rollup::subtree_in_use(&f);
        let all = tree_rows(
            &f,
            &in_use,
            &KeyConfig::default(),
            &Pricing::default(),
            TreeSort::Name,
        );
        let q = TreeQuery {
            depth: Some(0),
            ..Default::default()
        };
        let (rows, _, more) = rows_under(all, "root", 0, &q).unwrap();
        assert_eq!((rows.len(), more), (MAX_ROWS_UNDER, 7));
    }

    fn rows_all() -> Vec<TreeRow> {
        rows(TreeSort::Name)
    }
}
