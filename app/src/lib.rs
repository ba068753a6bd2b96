#![recursion_limit = "256"]
//! bizrq's portal UI (Leptos). Components render on the server (`ssr`); every
//! page works as plain HTML with JavaScript disabled.

pub mod accounts;
pub mod alerts;
pub mod attention;
pub mod audit;
pub mod budgets;
pub mod chart_section;
pub mod charts;
pub mod efficiency;
pub mod groups;
pub mod layout;
pub mod prices;
pub mod queue;
pub mod quotas;
pub mod reports;
pub mod shares;
pub mod transfers;
pub mod tree;
pub mod workloads;

pub use layout::{Flash, Section, Viewer};
#[cfg(feature = "ssr")]
pub use tree::render_tree_page;
pub use tree::{TreeFilter, TreeQuery, TreeSort};

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
    /// The key as people read it (`key_name`: "A100 GPUs"); the raw key
    /// goes in a tooltip.
    pub name: String,
    /// What is left of it now: free within hard (`quota::rollup`'s free
    /// now), or a budget's left as admission reads it.
    pub left: String,
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
    /// A GPU key or a budget, shown first; the others fold below
    /// (`quota::keys::leads`).
    pub lead: bool,
    /// `used` and `hard` exactly, in nano-units (what tables sort by).
    pub used_nanos: i128,
    pub hard_nanos: i128,
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

/// A quantity as a person reads it — the one formatter of pages, form
/// hints, alerts, emails and CSV headers (`quota::readable`): thousands
/// separated, two decimals from one up and three significant digits below
/// (`143,500 card-hours`, `0.5`, `1,024 GiB` for memory and storage), cash
/// in its unit, named after the configured GPU resources (`--gpu-resources`:
/// card-hours) rather than `5760044929445n`.
pub fn display_quantity(key: &str, q: quota::Quantity, cfg: &KeyConfig) -> String {
    if key.starts_with(quota::keys::CASH_PREFIX) {
        let (per, unit) = charts::unit_of(key, cfg);
        let scaled = quota::Quantity::from_nanos(q.nanos() / (per / quota::quantity::NANO).max(1));
        return format!("{} {unit}", quota::readable::grouped(scaled));
    }
    quota::readable::amount(key, q)
}

/// Used against hard for every key of a quota's hard. Keys sort so that a
/// model key follows its generic key (`limits.cpu`, `limits.cpu.A4`).
/// The keys of a quota as its bars show them: in use in the whole subtree
/// (`in_use`, from `quota::rollup::subtree_in_use`), allocated to children
/// but idle, and the rest (`quota::rollup`); a cash key's spending. Keys
/// with a zero hard that nothing uses are left out.
pub fn key_usages(q: &Quota, in_use: &ResourceList, cfg: &KeyConfig) -> Vec<KeyUsage> {
    let rolled = quota::rollup::rollup(q, in_use);
    let mut out: Vec<KeyUsage> = shown_keys(q, &rolled, in_use)
        .map(|(k, shown)| {
            let mut u = key_usage(k, &shown, cfg);
            if u.cash {
                let left = quota::budget::periods::left(&q.spec, &q.status, k);
                u.left = display_quantity(k, left.max(quota::Quantity::ZERO), cfg);
            }
            u
        })
        .collect();
    // GPUs and their models first, then budgets; CPU, memory, pods after.
    out.sort_by_cached_key(|u| quota::keys::display_order(&u.key, cfg));
    out
}

/// A key as people read it (`quota::keys::display_name`): "A100 GPUs",
/// "GPU card-hours", "CPU cores", "memory", "pods".
pub fn key_name(key: &str, cfg: &KeyConfig) -> String {
    quota::keys::display_name(key, cfg)
}

/// What a key of a quota's hard shows, before any formatting.
enum Shown<'a> {
    /// A usage key, as `quota::rollup` has it.
    Used(&'a quota::rollup::KeyRollup),
    /// A budget (cash key): what its subtree spent of hard.
    Spent {
        used: quota::Quantity,
        hard: quota::Quantity,
    },
}

impl Shown<'_> {
    fn percent(&self) -> u32 {
        match self {
            Shown::Used(r) => r.in_use_percent(),
            Shown::Spent { used, hard } => percent(*used, *hard),
        }
    }
}

/// The keys of `q`'s hard its bars show, in order, from `rolled`
/// (`quota::rollup::rollup(q, in_use)`): the one rule of which keys show
/// and at what percent, for `key_usages`, `max_percent` and `most_over`.
/// A key with a zero hard that nothing uses is left out.
fn shown_keys<'a>(
    q: &'a Quota,
    rolled: &'a [quota::rollup::KeyRollup],
    in_use: &'a ResourceList,
) -> impl Iterator<Item = (&'a String, Shown<'a>)> {
    let by_key: std::collections::BTreeMap<&str, &quota::rollup::KeyRollup> =
        rolled.iter().map(|r| (r.key.as_str(), r)).collect();
    q.spec.hard.iter().filter_map(move |(k, h)| {
        if let Some(r) = by_key.get(k.as_str()) {
            return Some((k, Shown::Used(r)));
        }
        // A budget's spending is its subtree's (`in_use`: Σ each quota's
        // own spending), never what a parent carved out for its children.
        let used = resources::get(in_use, k);
        let cash = quota::keys::cash_target(k).is_some();
        // Not a cash key: its hard is zero and nothing uses it.
        (cash && !(h.is_zero() && used.is_zero())).then_some((k, Shown::Spent { used, hard: *h }))
    })
}

/// One key as its bar shows it.
fn key_usage(k: &str, shown: &Shown, cfg: &KeyConfig) -> KeyUsage {
    let model = is_model_key(k, cfg);
    let show = |n: quota::Quantity| display_quantity(k, n, cfg);
    match shown {
        Shown::Used(r) => {
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
            KeyUsage {
                key: k.to_string(),
                name: key_name(k, cfg),
                left: show(r.free_now),
                used: show(r.in_use),
                hard: show(r.hard),
                percent: r.in_use_percent(),
                idle_percent: idle,
                detail: detail.join(" · "),
                cash: false,
                model,
                lead: quota::keys::leads(k, cfg),
                used_nanos: r.in_use.nanos(),
                hard_nanos: r.hard.nanos(),
            }
        }
        Shown::Spent { used, hard } => KeyUsage {
            key: k.to_string(),
            name: key_name(k, cfg),
            left: String::new(),
            used: show(*used),
            hard: show(*hard),
            percent: shown.percent(),
            idle_percent: 0,
            detail: String::new(),
            cash: true,
            model,
            lead: quota::keys::leads(k, cfg),
            used_nanos: used.nanos(),
            hard_nanos: hard.nanos(),
        },
    }
}

/// The highest `percent` of `key_usages(q, in_use, _)` (0 when it has no
/// key), from `rolled` = `quota::rollup::rollup(q, in_use)` and without
/// formatting a key: the tree asks it of every quota for its filters.
pub fn max_percent(q: &Quota, rolled: &[quota::rollup::KeyRollup], in_use: &ResourceList) -> u32 {
    shown_keys(q, rolled, in_use)
        .map(|(_, s)| s.percent())
        .max()
        .unwrap_or(0)
}

/// The key of `q`'s hard most over quota in the whole subtree, as
/// `key_usages` shows it (the same key, amounts and percent; of equals the
/// last by key), formatting only that one: the overview asks this of every
/// quota the viewer may see. A key with a max is over quota only beyond
/// its max: running past its hard within its max is borrowing, which it
/// was allowed to do, not a problem for anyone.
pub fn most_over(q: &Quota, in_use: &ResourceList, cfg: &KeyConfig) -> Option<KeyUsage> {
    let rolled = quota::rollup::rollup(q, in_use);
    let (k, shown) = shown_keys(q, &rolled, in_use)
        .filter(|(k, s)| match s {
            Shown::Used(r) => s.percent() > 100 && beyond_max(q, k, r.in_use),
            Shown::Spent { .. } => false,
        })
        .max_by_key(|(_, s)| s.percent())?;
    Some(key_usage(k, &shown, cfg))
}

/// Whether `in_use` of `key` is more than `q` may hold with what it may
/// borrow: its max where it has one (else its hard, checked by the caller).
pub fn beyond_max(q: &Quota, key: &str, in_use: quota::Quantity) -> bool {
    q.spec.max.get(key).is_none_or(|m| in_use > *m)
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
    let left = (!k.left.is_empty()).then(|| format!(" · {} left", k.left));
    view! {
        <span class=key_class title=k.key>{k.name}</span>
        <span class=class><i class="use" style=width></i><i class="idle" style=idle></i></span>
        <span class="num">{format!("{} {verb} of {} ({}%)", k.used, k.hard, k.percent)}{left}{detail}</span>
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
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        let shown: Vec<(String, String, bool)> =
            key_usages(&quota, &quota::ResourceList::new(), &cfg)
                .into_iter()
                .map(|u| (u.key, u.hard, u.model))
                .collect();
        // The GPU and its models first, then its budget.
        assert_eq!(
            shown[2],
            (
                "cash/requests.example.com/tpu".into(),
                "100 card-hours".into(),
                false
            )
        );
        assert!(
            shown[1].2,
            "the model key of a configured GPU is a model key"
        );
        // The default configuration does not know this resource.
        assert_eq!(
            display_quantity(
                "cash/requests.example.com/tpu",
                q("100"),
                &KeyConfig::default()
            ),
            "100 unit-hours"
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
            "5,760.04 card-hours"
        );
        assert_eq!(
            display_quantity("requests.memory", q("1099511627776"), &KeyConfig::default()),
            "1,024 GiB"
        );
        assert_eq!(
            display_quantity("requests.memory", q("832Gi"), &KeyConfig::default()),
            "832 GiB"
        );
        assert_eq!(
            display_quantity("requests.cpu", q("500m"), &KeyConfig::default()),
            "0.5"
        );
        assert_eq!(
            display_quantity("requests.cpu", q("1500000n"), &KeyConfig::default()),
            "0.0015"
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

#[cfg(test)]
mod style_tests {
    use super::STYLE;

    /// The value of `--name` in the first `:root { … }` of `css`.
    fn var(css: &str, name: &str) -> String {
        let root = &css[css.find(":root {").expect("a :root rule")..];
        let root = &root[..root.find('}').unwrap()];
        let at = root
            .find(&format!("--{name}:"))
            .unwrap_or_else(|| panic!("--{name} in {root}"));
        let v = &root[at + name.len() + 3..];
        v[..v.find(';').unwrap()].trim().to_string()
    }

    /// WCAG 2 relative luminance of `#rrggbb` (or `#rgb`).
    fn luminance(hex: &str) -> f64 {
        let hex = if hex.len() == 4 {
            hex.chars().flat_map(|c| [c, c]).skip(1).collect::<String>()
        } else {
            hex.to_string()
        };
        let c = |i: usize| {
            let v = u8::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).unwrap() as f64 / 255.0;
            if v <= 0.03928 {
                v / 12.92
            } else {
                ((v + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * c(0) + 0.7152 * c(1) + 0.0722 * c(2)
    }

    fn contrast(a: &str, b: &str) -> f64 {
        let (x, y) = (luminance(a), luminance(b));
        (x.max(y) + 0.05) / (x.min(y) + 0.05)
    }

    /// Muted, amber (warn), red (over quota, refusals) and link text
    /// reads at 4.5:1 or more on the page and on a card, in light mode and
    /// in dark mode (`prefers-color-scheme: dark` overrides the variables
    /// it names; the rest keep their light values). The amber of the bars
    /// (`--warn`) is for shapes only.
    #[test]
    fn text_colours_contrast_at_least_4_5_to_1_in_light_and_dark() {
        let dark_at = STYLE
            .find("@media (prefers-color-scheme: dark)")
            .expect("a dark mode");
        let (light, dark) = (STYLE, &STYLE[dark_at..]);
        let in_dark = |name: &str| {
            let root = &dark[dark.find(":root {").unwrap()..];
            let root = &root[..root.find('}').unwrap()];
            if root.contains(&format!("--{name}:")) {
                var(dark, name)
            } else {
                var(light, name)
            }
        };
        for (mode, get) in [
            (
                "light",
                &(|n: &str| var(light, n)) as &dyn Fn(&str) -> String,
            ),
            ("dark", &in_dark),
        ] {
            for text in ["muted", "warn-text", "bad", "link", "fg"] {
                for ground in ["bg", "card"] {
                    let (t, g) = (get(text), get(ground));
                    let ratio = contrast(&t, &g);
                    assert!(
                        ratio >= 4.5,
                        "{mode}: --{text} {t} on --{ground} {g} is {ratio:.2}:1"
                    );
                }
            }
        }
    }
}
