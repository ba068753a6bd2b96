//! A quota's charts as its page shows them: range links, then one panel per
//! chart (a heading, the chart drawn once, a readout the island fills in,
//! and a table of the values), and the same panel as the samples API sends
//! it to the island. Pure: the server reads the samples.
//!
//! Which charts: one per key with a hard or a use in the range (usage, or
//! the burn-down for a cash key) and, at a parent, the children's use of
//! each such key stacked. Every chart ends with the quota's current status,
//! so an edit shows at once. The quota page draws the charts of GPUs and
//! budgets ([`leads`]) and links the others to their own page
//! (`/quotas/{name}/charts?key=`), so its weight follows the keys people
//! look at first, not every key the quota has.
//!
//! Each chart is drawn once, in [`charts::NARROW`]'s frame: its text is
//! sized for a phone, and on a wide screen the panels sit side by side in
//! columns of about that width (style/bizrq.css), so the same SVG reads
//! well at both.

use crate::charts::{self, amount, NARROW};
use bizrq_islands::{Point, SamplesReply};
use quota::forecast::Sample;
use quota::keys::cash_target;
use quota::series::{self, Range, Stacks};
use quota::time::{format_minute, format_when};
use quota::{resources, KeyConfig, Quantity, QuotaStatus};

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// What a panel draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Usage,
    BurnDown,
    Children,
    /// GPUs allocated against busy (real usage, `crate::efficiency::panel`):
    /// drawn from real usage, not from the samples.
    Efficiency,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Usage => "usage",
            Kind::BurnDown => "burn-down",
            Kind::Children => "children",
            Kind::Efficiency => "efficiency",
        }
    }

    /// The samples API's `chart` parameter; empty is the key's own chart.
    pub fn parse(s: &str, key: &str) -> Result<Kind, String> {
        match s.trim() {
            "" | "usage" | "burn-down" if cash_target(key).is_some() => Ok(Kind::BurnDown),
            "" | "usage" => Ok(Kind::Usage),
            "burn-down" => Err(format!("{key} is not a cash key: it has no burn-down")),
            "children" => Ok(Kind::Children),
            "efficiency" => Ok(Kind::Efficiency),
            other => Err(format!(
                "unknown chart '{other}': usage, burn-down, children or efficiency"
            )),
        }
    }
}

/// What the charts are drawn from. `own` and each child's samples are as
/// stored (any resolution, any order); the statuses are current.
pub struct Inputs<'a> {
    pub own: &'a [Sample],
    pub live: &'a QuotaStatus,
    /// (child, its samples, its status): the children a chart stacks
    /// (`quota::series::children_to_draw`).
    pub children: &'a [(String, Vec<Sample>, QuotaStatus)],
    /// Children of the quota left out of `children`, which a children
    /// chart's caption counts.
    pub children_omitted: usize,
    /// Which of `children` each key's children chart stacks, and how many
    /// it leaves out; a key not in it stacks every child given, leaving
    /// out `children_omitted`.
    pub stacks: &'a Stacks,
    pub range: Range,
    pub now_ms: i64,
    pub cfg: &'a KeyConfig,
    /// Each budget's one forecast (`quota::forecast::outlook`), which its
    /// burn-down draws and words.
    pub outlooks: &'a [quota::forecast::Outlook],
}

/// One chart with its words and values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panel {
    pub key: String,
    pub kind: Kind,
    pub title: String,
    /// The forecast's sentence, under a burn-down's heading.
    pub summary: Option<String>,
    /// The chart, drawn once, for a `<figure>`.
    pub figure: String,
    /// Says what a row stands for.
    pub caption: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// The chart's points, for the hover readout.
    pub points: Vec<Point>,
}

/// A quota's chart section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charts {
    pub quota: String,
    pub range: Range,
    pub panels: Vec<Panel>,
    /// Query parameters the range links keep (`key=…&`), empty on the
    /// quota page.
    pub query: String,
}

/// The samples of a chart section folded to the range, once: the quota's
/// and each child's, for the charts and for their tables. Every sample
/// holds every key, so folding them again for each key's panel made a
/// section's work grow with the square of the keys.
struct Folded {
    own: Vec<Sample>,
    table: Vec<Sample>,
    /// (child, its chart samples), (child, its table samples).
    children: Vec<(String, Vec<Sample>)>,
    children_table: Vec<(String, Vec<Sample>)>,
}

#[cfg(test)]
thread_local! {
    /// Chart sections folded on this thread (the complexity test counts them).
    static FOLDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Folded {
    fn new(inp: &Inputs<'_>, with_children: bool) -> Folded {
        #[cfg(test)]
        FOLDS.with(|f| f.set(f.get() + 1));
        let (range, now) = (inp.range, inp.now_ms);
        let kids = |width: fn(&[Sample], Range, i64, &QuotaStatus) -> Vec<Sample>| {
            if !with_children {
                return Vec::new();
            }
            inp.children
                .iter()
                .map(|(n, s, live)| (n.clone(), width(s, range, now, live)))
                .collect()
        };
        Folded {
            own: series::chart_samples(inp.own, range, now, inp.live),
            table: series::table_samples(inp.own, range, now, inp.live),
            children: kids(series::chart_samples),
            children_table: kids(series::table_samples),
        }
    }
}

/// Every chart of the quota, GPUs first (`quota::keys::display_order`); a
/// key's children chart follows its own chart. The samples are folded once for all of them: the work
/// is linear in the keys times the points drawn.
pub fn panels(inp: &Inputs<'_>) -> Vec<Panel> {
    panels_of(inp, |_, _| true)
}

/// The charts `keep` takes (by key and kind), in [`panels`]' order.
pub fn panels_of(inp: &Inputs<'_>, keep: impl Fn(&str, Kind) -> bool) -> Vec<Panel> {
    let folded = Folded::new(inp, true);
    let mut out = Vec::new();
    // GPUs and their models first, then budgets; CPU, memory, pods after.
    for key in keys_to_draw(inp, &folded.own) {
        let kinds: &[Kind] = if cash_target(&key).is_some() {
            &[Kind::BurnDown]
        } else {
            &[Kind::Usage, Kind::Children]
        };
        for &kind in kinds {
            if keep(&key, kind) {
                out.extend(draw(inp, &folded, &key, kind));
            }
        }
    }
    out
}

/// The keys that have a chart, GPUs first (`quota::keys::display_order`).
fn keys_to_draw(inp: &Inputs<'_>, own: &[Sample]) -> Vec<String> {
    let mut keys = series::keys_to_draw(own);
    keys.sort_by_cached_key(|k| quota::keys::display_order(k, inp.cfg));
    keys
}

/// The charts the quota page draws: the usage of GPUs and of each GPU
/// model, the children's use of GPUs (of all models together: each
/// model's is the same picture cut finer) and the budgets. The others'
/// charts are a link away.
pub fn leads(key: &str, kind: Kind, cfg: &KeyConfig) -> bool {
    let model = quota::keys::Key::parse(key, cfg).is_ok_and(|k| k.model.is_some());
    quota::keys::leads(key, cfg) && !(kind == Kind::Children && model)
}

/// The keys with a chart that `leads` leaves out, GPUs-first order, and
/// whether their usage chart is drawn (only their children chart is
/// not): the quota page links each to its own page. Reads only the
/// stored samples' key names and the live status, no drawing.
pub fn other_keys(inp: &Inputs<'_>) -> Vec<(String, bool)> {
    let range = (inp.range, inp.now_ms);
    let own = series::chart_samples(inp.own, range.0, range.1, inp.live);
    let parent = !inp.children.is_empty();
    keys_to_draw(inp, &own)
        .into_iter()
        .filter_map(|k| {
            let usage_drawn = leads(&k, Kind::Usage, inp.cfg);
            let children_drawn = leads(&k, Kind::Children, inp.cfg);
            (!usage_drawn || (parent && !children_drawn)).then_some((k, usage_drawn))
        })
        .collect()
}

/// One chart; None when there is nothing to draw (a key nobody has, a
/// children chart where no child uses the key).
pub fn panel(inp: &Inputs<'_>, key: &str, kind: Kind) -> Option<Panel> {
    draw(inp, &Folded::new(inp, kind == Kind::Children), key, kind)
}

fn draw(inp: &Inputs<'_>, folded: &Folded, key: &str, kind: Kind) -> Option<Panel> {
    let (range, now, cfg) = (inp.range, inp.now_ms, inp.cfg);
    let own = &folded.own;
    let table = &folded.table;
    let when = |at: i64| {
        if at == now {
            format!("{} (now)", format_minute(at))
        } else {
            format_minute(at)
        }
    };
    let caption = format!(
        "One row per {}{}, the last row now.",
        span_words(range.table_bucket_ms()),
        match kind {
            Kind::BurnDown => ": the budget at its end",
            _ => ": the peak use and the hard at its end",
        }
    );
    let q = |l: &quota::ResourceList| resources::get(l, key);
    match kind {
        Kind::Usage => {
            if !series::drawn(own, key) {
                return None;
            }
            let hard_text = |s: &Sample| {
                s.hard
                    .get(key)
                    .map_or("no limit".to_string(), |h| amount(key, *h, cfg))
            };
            // The samples' `used` is what runs in the quota's whole
            // subtree, as the keys table's "in use" (`quota::rollup::sampled`),
            // at a parent too: never what it carved out for children.
            let (title, used_col) = (
                format!("{}: in use and hard", crate::key_name(key, cfg)),
                "In use (peak)",
            );
            Some(Panel {
                key: key.to_string(),
                kind,
                title,
                summary: None,
                figure: charts::usage_chart(own, key, cfg, NARROW),
                caption,
                columns: vec!["Time (UTC)".into(), used_col.into(), "Hard".into()],
                rows: table
                    .iter()
                    .map(|s| vec![when(s.at_ms), amount(key, q(&s.used), cfg), hard_text(s)])
                    .collect(),
                points: own
                    .iter()
                    .map(|s| Point {
                        at_ms: s.at_ms,
                        values: exact(&[
                            ("used", Some(q(&s.used))),
                            ("hard", s.hard.get(key).copied()),
                        ]),
                        readout: format!(
                            "{} · in use {}, hard {}",
                            format_when(s.at_ms),
                            amount(key, q(&s.used), cfg),
                            hard_text(s)
                        ),
                    })
                    .collect(),
            })
        }
        Kind::BurnDown => {
            if !series::drawn(own, key) {
                return None;
            }
            let left = |s: &Sample| q(&s.hard).saturating_sub(q(&s.used));
            let outlook = inp
                .outlooks
                .iter()
                .find(|o| o.key == key)
                .cloned()
                .unwrap_or_else(|| quota::forecast::Outlook {
                    key: key.to_string(),
                    now_ms: now,
                    // `used` holds what its children hold: left is its
                    // own work's, and the words say what went to them.
                    left: q(&inp.live.hard).saturating_sub(q(&inp.live.used)),
                    carved: quota::budget::periods::carved(inp.live, key),
                    burn_per_hour: quota::Quantity::ZERO,
                    runway: quota::budget::Runway::Unknown,
                });
            Some(Panel {
                key: key.to_string(),
                kind,
                title: format!("{}: remaining budget", crate::key_name(key, cfg)),
                summary: Some(charts::describe_outlook(&outlook, cfg)),
                figure: charts::burn_down_chart(own, &outlook, now, cfg, NARROW),
                caption,
                columns: vec![
                    "Time (UTC)".into(),
                    "Remaining".into(),
                    "Spent".into(),
                    "Budget".into(),
                ],
                rows: table
                    .iter()
                    .map(|s| {
                        vec![
                            when(s.at_ms),
                            amount(key, left(s), cfg),
                            amount(key, q(&s.used), cfg),
                            amount(key, q(&s.hard), cfg),
                        ]
                    })
                    .collect(),
                points: own
                    .iter()
                    .map(|s| Point {
                        at_ms: s.at_ms,
                        values: exact(&[
                            ("remaining", Some(left(s))),
                            ("spent", Some(q(&s.used))),
                            ("budget", Some(q(&s.hard))),
                        ]),
                        readout: format!(
                            "{} · {} left of {}",
                            format_when(s.at_ms),
                            amount(key, left(s), cfg),
                            amount(key, q(&s.hard), cfg)
                        ),
                    })
                    .collect(),
            })
        }
        Kind::Children => {
            // This key's children: ranked by its own use, as the samples
            // API's chart of the key ranks them.
            let (stacked, omitted) = match inp.stacks.get(key) {
                Some((names, omitted)) => (Some(names), *omitted),
                None => (None, inp.children_omitted),
            };
            let of_key = |all: &[(String, Vec<Sample>)]| -> Vec<(String, Vec<Sample>)> {
                all.iter()
                    .filter(|(n, _)| stacked.is_none_or(|names| names.contains(n)))
                    .cloned()
                    .collect()
            };
            let (children, children_table) =
                (of_key(&folded.children), of_key(&folded.children_table));
            let drawn = stacked.map_or(inp.children.len(), Vec::len);
            let stack = series::stack(&children, key);
            if stack.layers.is_empty() {
                return None;
            }
            let layers = charts::children_layers(&stack);
            let tab = series::stack(&children_table, key);
            let tab_layers = charts::children_layers(&tab);
            let mut columns = vec!["Time (UTC)".to_string()];
            columns.extend(tab_layers.iter().map(|(n, _)| n.clone()));
            columns.push("Total".into());
            Some(Panel {
                key: key.to_string(),
                kind,
                title: format!("{}: used by children", crate::key_name(key, cfg)),
                summary: None,
                figure: charts::children_chart(&stack, own, key, cfg, NARROW),
                caption: format!(
                    "One row per {}: each child's peak use, the last row now.{}",
                    span_words(range.table_bucket_ms()),
                    match omitted {
                        0 => String::new(),
                        n => format!(
                            " {n} more {} not drawn: the chart stacks the {drawn} using the most now.",
                            if n == 1 { "child is" } else { "children are" },
                        ),
                    }
                ),
                columns,
                rows: tab
                    .times
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| {
                        let mut row = vec![when(t)];
                        let mut total = Quantity::ZERO;
                        for (_, v) in &tab_layers {
                            row.push(amount(key, v[i], cfg));
                            total = total.saturating_add(v[i]);
                        }
                        row.push(amount(key, total, cfg));
                        row
                    })
                    .collect(),
                points: stack
                    .times
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| Point {
                        at_ms: t,
                        values: layers
                            .iter()
                            .map(|(n, v)| (n.clone(), v[i].to_string()))
                            .collect(),
                        readout: format!(
                            "{} · {}",
                            format_when(t),
                            layers
                                .iter()
                                .map(|(n, v)| format!("{n} {}", amount(key, v[i], cfg)))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })
                    .collect(),
            })
        }
        // Drawn from real usage (`crate::efficiency::panel`), not samples.
        Kind::Efficiency => None,
    }
}

fn exact(values: &[(&str, Option<Quantity>)]) -> Vec<(String, String)> {
    values
        .iter()
        .filter_map(|(n, v)| v.map(|v| (n.to_string(), v.to_string())))
        .collect()
}

/// "hour", "6 hours", "day", "3 days", "7 days".
pub(crate) fn span_words(ms: i64) -> String {
    const HOUR: i64 = 3_600_000;
    match ms {
        HOUR => "hour".into(),
        m if m % (24 * HOUR) == 0 && m == 24 * HOUR => "day".into(),
        m if m % (24 * HOUR) == 0 => format!("{} days", m / (24 * HOUR)),
        m => format!("{} hours", m / HOUR),
    }
}

/// The samples API's reply for one panel.
pub fn reply(quota: &str, range: Range, now_ms: i64, p: Panel, cfg: &KeyConfig) -> SamplesReply {
    let unit = match p.kind {
        // Cards held and busy, whichever GPU resource the key names.
        Kind::Efficiency => "cards",
        _ => charts::unit_of(&p.key, cfg).1,
    };
    SamplesReply {
        quota: quota.to_string(),
        unit: unit.to_string(),
        key: p.key,
        chart: p.kind.as_str().to_string(),
        range: range.as_str().to_string(),
        from_ms: now_ms - range.span_ms(),
        to_ms: now_ms,
        points: p.points,
        svg: p.figure,
        columns: p.columns,
        rows: p.rows,
    }
}

/// The section: heading, range links (plain links: `?range=30d`), panels;
/// inside the [`bizrq_islands::ChartSection`] island, which switches the
/// range in place and reads values out under the pointer.
#[cfg(feature = "ssr")]
pub fn view(c: Charts, empty_hint: &'static str) -> impl IntoView {
    use bizrq_islands::ChartSection;
    let (range, query) = (c.range, c.query);
    let links = Range::ALL
        .into_iter()
        .map(|r| {
            let current = (r == range).then_some("true");
            view! {
                <a href=format!("?{query}range={}#charts", r.as_str()) data-range=r.as_str()
                    data-range-label=r.words() aria-current=current>{r.short()}</a>
            }
        })
        .collect_view();
    let panels = if c.panels.is_empty() {
        view! { <p class="hint">{empty_hint}</p> }.into_any()
    } else {
        c.panels
            .into_iter()
            .map(panel_view)
            .collect_view()
            .into_any()
    };
    view! {
        <ChartSection quota=c.quota range=range.as_str().to_string()>
            <div class="chart-head" id="charts">
                <h3>"Charts · "<span data-range-label="">{range.words()}</span></h3>
                <nav class="ranges" aria-label="Chart range">{links}</nav>
            </div>
            <div class="chart-panels">{panels}</div>
        </ChartSection>
    }
}

#[cfg(feature = "ssr")]
fn panel_view(p: Panel) -> impl IntoView {
    let summary = p.summary.map(|s| view! { <p class="hint">{s}</p> });
    view! {
        <section class="chart-panel" data-key=p.key.clone() data-chart=p.kind.as_str()>
            <h4>{p.title}</h4>
            {summary}
            <figure class="chart" inner_html=p.figure></figure>
            <output class="readout" aria-live="polite"></output>
            <details class="values">
                <summary>"Values"</summary>
                <div class="table-scroll">
                    <table class="values">
                        <caption>{p.caption}</caption>
                        <thead><tr>{p.columns.into_iter().map(|c| view! { <th scope="col">{c}</th> }).collect_view()}</tr></thead>
                        <tbody>{p.rows.into_iter().map(|r| {
                            let mut cells = r.into_iter();
                            let first = cells.next().unwrap_or_default();
                            view! {
                                <tr><th scope="row">{first}</th>{cells.map(|c| view! { <td class="num">{c}</td> }).collect_view()}</tr>
                            }
                        }).collect_view()}</tbody>
                    </table>
                </div>
            </details>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::ResourceList;

    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";
    const T0: i64 = 1_795_219_200_000;
    const HOUR: i64 = 3_600_000;

    fn list(items: &[(&str, i64)]) -> ResourceList {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
            .collect()
    }

    fn status(used: &[(&str, i64)], hard: &[(&str, i64)]) -> QuotaStatus {
        QuotaStatus {
            hard: list(hard),
            used: list(used),
            ..QuotaStatus::default()
        }
    }

    fn sample(at_ms: i64, used: &[(&str, i64)], hard: &[(&str, i64)]) -> Sample {
        Sample {
            at_ms,
            hard: list(hard),
            used: list(used),
            self_used: ResourceList::new(),
        }
    }

    #[test]
    fn a_parent_has_a_chart_per_used_key_and_its_children_stacked() {
        let now = T0 + 2 * 24 * HOUR;
        let hard = [(GPU, 8), ("requests.cpu", 0), (CASH, 1000)];
        let own: Vec<Sample> = (0..48)
            .map(|h| sample(T0 + h * HOUR, &[(GPU, 2), (CASH, h * 3)], &hard))
            .collect();
        let live = status(
            &[(GPU, 5), (CASH, 150)],
            &[(GPU, 16), ("requests.cpu", 0), (CASH, 1000)],
        );
        let kid: Vec<Sample> = (0..48)
            .map(|h| sample(T0 + h * HOUR, &[(GPU, 1)], &[(GPU, 4)]))
            .collect();
        let children = vec![("team-a".to_string(), kid, status(&[(GPU, 3)], &[(GPU, 4)]))];
        let cfg = KeyConfig::default();
        // 850 left at 5 an hour: 170 hours.
        let outlooks = [quota::forecast::Outlook {
            key: CASH.into(),
            now_ms: now,
            left: quota::Quantity::from_units(850),
            carved: quota::Quantity::ZERO,
            burn_per_hour: quota::Quantity::from_units(5),
            runway: quota::budget::Runway::Until {
                at_ms: now + 170 * HOUR,
            },
        }];
        let inp = Inputs {
            own: &own,
            live: &live,
            children: &children,
            children_omitted: 0,
            stacks: &Default::default(),
            range: Range::Week,
            now_ms: now,
            cfg: &cfg,
            outlooks: &outlooks,
        };
        let got = panels(&inp);
        let kinds: Vec<(&str, Kind)> = got.iter().map(|p| (p.key.as_str(), p.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                (GPU, Kind::Usage),
                (GPU, Kind::Children),
                (CASH, Kind::BurnDown)
            ],
            "GPUs first, then the budget; no chart for the zero cpu key"
        );
        let usage = &got[0];
        // The last row and point are the live status: the edit to 16 shows.
        let last = usage.rows.last().unwrap();
        assert!(last[0].ends_with("(now)"), "{last:?}");
        assert_eq!(&last[1..], ["5 cards", "16 cards"]);
        assert_eq!(
            usage.rows.len(),
            2 * 4 + 1,
            "6-hour rows over two days, and now"
        );
        assert!(usage
            .points
            .last()
            .unwrap()
            .readout
            .ends_with("in use 5 cards, hard 16 cards"));
        assert_eq!(
            usage.figure.matches("<svg").count(),
            1,
            "each chart is drawn once"
        );
        assert!(usage
            .figure
            .contains("class=\"chart chart-usage\" viewBox=\"0 0 360 280\""));
        let burn = &got[2];
        assert_eq!(burn.columns[1], "Remaining");
        assert_eq!(
            &burn.rows.last().unwrap()[1..],
            ["850 card-hours", "150 card-hours", "1,000 card-hours"]
        );
        assert_eq!(
            burn.summary.as_deref().unwrap(),
            crate::charts::describe_outlook(&outlooks[0], &cfg),
            "the chart says the budget's one forecast"
        );
        assert!(burn
            .summary
            .as_deref()
            .unwrap()
            .contains("runs out in 7 days"));
        let kids = &got[1];
        assert_eq!(kids.columns, ["Time (UTC)", "team-a", "Total"]);
        assert_eq!(&kids.rows.last().unwrap()[1..], ["3 cards", "3 cards"]);
        // The API sends the same panel.
        let r = reply("nlp", Range::Week, now, got[0].clone(), &cfg);
        assert_eq!(
            (r.chart.as_str(), r.range.as_str(), r.unit.as_str()),
            ("usage", "7d", "cards")
        );
        assert_eq!(r.to_ms - r.from_ms, 7 * 24 * HOUR);
    }

    /// A budget without a forecast of its own (a key its samples hold and
    /// the outlooks do not) is worded from the live status; at a parent,
    /// with what it allocated to its children, as its budgets box and
    /// forecast line word it, never as a leaf's "left".
    #[test]
    fn a_parents_burn_down_without_an_outlook_says_what_its_children_hold() {
        use quota::object::Carve;
        let now = T0 + 24 * HOUR;
        let hard = [(GPU, 16), (CASH, 51_000)];
        let own: Vec<Sample> = (0..24)
            .map(|h| sample(T0 + h * HOUR, &[(GPU, 2), (CASH, 42_000 + h)], &hard))
            .collect();
        // 42,000 carved out for a child, 100 spent by its own work.
        let mut live = status(&[(GPU, 2), (CASH, 42_100)], &hard);
        live.children.insert(
            "nlp".into(),
            Carve {
                hard: list(&[(GPU, 8), (CASH, 42_000)]),
                since: "2026-11-01T00:00:00Z".into(),
                uid: String::new(),
            },
        );
        let cfg = KeyConfig::default();
        let inp = Inputs {
            own: &own,
            live: &live,
            children: &[],
            children_omitted: 0,
            stacks: &Default::default(),
            range: Range::Day,
            now_ms: now,
            cfg: &cfg,
            outlooks: &[],
        };
        let burn = panel(&inp, CASH, Kind::BurnDown).expect("a burn-down");
        assert_eq!(
            burn.summary.as_deref(),
            Some(
                "GPU card-hours for its own work (42,000 card-hours allocated to children): \
                 8,900 card-hours left, no burn measured yet"
            )
        );
    }

    /// The section's samples are folded once whatever the number of keys
    /// (each fold walks every key of every sample), each panel is the one
    /// the samples API draws for its key, and a children chart says how
    /// many children it left out.
    #[test]
    fn a_section_folds_its_samples_once_for_all_its_keys() {
        let now = T0 + 24 * HOUR;
        let keys: Vec<String> = (0..256).map(|i| format!("limits.cpu.m{i:03}")).collect();
        let per_key =
            |v: i64| -> Vec<(&str, i64)> { keys.iter().map(|k| (k.as_str(), v)).collect() };
        let own: Vec<Sample> = (0..24)
            .map(|h| sample(T0 + h * HOUR, &per_key(1), &per_key(4)))
            .collect();
        let live = status(&per_key(2), &per_key(4));
        let kid: Vec<Sample> = (0..24)
            .map(|h| sample(T0 + h * HOUR, &per_key(1), &per_key(2)))
            .collect();
        let children = vec![("team-a".to_string(), kid, status(&per_key(1), &per_key(2)))];
        let cfg = KeyConfig::default();
        let inp = Inputs {
            own: &own,
            live: &live,
            children: &children,
            children_omitted: 3,
            stacks: &Default::default(),
            range: Range::Day,
            now_ms: now,
            cfg: &cfg,
            outlooks: &[],
        };
        let before = FOLDS.with(|f| f.get());
        let got = panels(&inp);
        assert_eq!(FOLDS.with(|f| f.get()) - before, 1, "one fold for 256 keys");
        assert_eq!(
            got.len(),
            2 * keys.len(),
            "a usage and a children chart per key"
        );
        for p in [&got[0], &got[1], &got[511]] {
            assert_eq!(panel(&inp, &p.key, p.kind).as_ref(), Some(p));
        }
        assert!(
            got[1].caption.ends_with(
                " 3 more children are not drawn: the chart stacks the 1 using the most now."
            ),
            "{}",
            got[1].caption
        );
    }

    /// Each key's children chart stacks the children ranked for it
    /// (`Inputs::stacks`), whatever else was read for other keys' charts,
    /// and counts the rest as left out.
    #[test]
    fn a_children_chart_stacks_the_children_ranked_by_its_key() {
        const CPU: &str = "requests.cpu";
        let now = T0 + 24 * HOUR;
        let hard = [(GPU, 8), (CPU, 64)];
        let own: Vec<Sample> = (0..24)
            .map(|h| sample(T0 + h * HOUR, &[(GPU, 2), (CPU, 8)], &hard))
            .collect();
        let live = status(&[(GPU, 2), (CPU, 8)], &hard);
        let kid = |used: &[(&str, i64)]| -> (Vec<Sample>, QuotaStatus) {
            (
                (0..24)
                    .map(|h| sample(T0 + h * HOUR, used, &hard))
                    .collect(),
                status(used, &hard),
            )
        };
        let (a, a_live) = kid(&[(GPU, 2), (CPU, 1)]);
        let (b, b_live) = kid(&[(GPU, 1), (CPU, 7)]);
        let children = vec![
            ("team-a".to_string(), a, a_live),
            ("team-b".to_string(), b, b_live),
        ];
        let stacks: Stacks = [
            (GPU.to_string(), (vec!["team-a".to_string()], 1)),
            (CPU.to_string(), (vec!["team-b".to_string()], 1)),
        ]
        .into();
        let cfg = KeyConfig::default();
        let inp = Inputs {
            own: &own,
            live: &live,
            children: &children,
            children_omitted: 0,
            stacks: &stacks,
            range: Range::Day,
            now_ms: now,
            cfg: &cfg,
            outlooks: &[],
        };
        let gpu = panel(&inp, GPU, Kind::Children).unwrap();
        assert_eq!(gpu.columns, ["Time (UTC)", "team-a", "Total"]);
        assert!(gpu
            .caption
            .ends_with(" 1 more child is not drawn: the chart stacks the 1 using the most now."));
        let cpu = panel(&inp, CPU, Kind::Children).unwrap();
        assert_eq!(cpu.columns, ["Time (UTC)", "team-b", "Total"]);
    }

    /// The quota page draws GPUs, the GPU children chart and budgets;
    /// a model's children chart and every other key are links, and the
    /// charts page of those draws exactly what the quota page left out.
    #[test]
    fn the_page_draws_gpus_and_budgets_and_links_the_rest() {
        const A100: &str = "requests.nvidia.com/gpu.A100";
        const CPU: &str = "requests.cpu";
        let now = T0 + 24 * HOUR;
        let hard = [(GPU, 8), (A100, 8), (CPU, 64), (CASH, 1000)];
        let used = [(GPU, 2), (A100, 2), (CPU, 10), (CASH, 30)];
        let own: Vec<Sample> = (0..24)
            .map(|h| sample(T0 + h * HOUR, &used, &hard))
            .collect();
        let live = status(&used, &hard);
        let kid: Vec<Sample> = (0..24)
            .map(|h| sample(T0 + h * HOUR, &[(GPU, 1), (A100, 1), (CPU, 4)], &hard))
            .collect();
        let children = vec![("team-a".to_string(), kid, status(&[(GPU, 1)], &[(GPU, 4)]))];
        let cfg = KeyConfig::default();
        let inp = Inputs {
            own: &own,
            live: &live,
            children: &children,
            children_omitted: 0,
            stacks: &Default::default(),
            range: Range::Day,
            now_ms: now,
            cfg: &cfg,
            outlooks: &[],
        };
        let page = panels_of(&inp, |k, kind| leads(k, kind, &cfg));
        let drawn: Vec<(&str, Kind)> = page.iter().map(|p| (p.key.as_str(), p.kind)).collect();
        assert_eq!(
            drawn,
            [
                (GPU, Kind::Usage),
                (GPU, Kind::Children),
                (A100, Kind::Usage),
                (CASH, Kind::BurnDown)
            ]
        );
        assert_eq!(
            other_keys(&inp),
            [(A100.to_string(), true), (CPU.to_string(), false)],
            "A100's children chart and cpu's charts are links"
        );
        let rest = panels_of(&inp, |k, kind| !leads(k, kind, &cfg));
        let rest: Vec<(&str, Kind)> = rest.iter().map(|p| (p.key.as_str(), p.kind)).collect();
        assert_eq!(
            rest,
            [
                (A100, Kind::Children),
                (CPU, Kind::Usage),
                (CPU, Kind::Children)
            ]
        );
        assert_eq!(
            page.len() + rest.len(),
            panels(&inp).len(),
            "nothing is lost"
        );
    }

    #[test]
    fn chart_kinds_parse_against_the_key() {
        assert_eq!(Kind::parse("", CASH), Ok(Kind::BurnDown));
        assert_eq!(Kind::parse("usage", GPU), Ok(Kind::Usage));
        assert_eq!(Kind::parse("children", GPU), Ok(Kind::Children));
        assert!(Kind::parse("burn-down", GPU).is_err());
        assert!(Kind::parse("pie", GPU).is_err());
        assert_eq!(span_words(HOUR), "hour");
        assert_eq!(span_words(6 * HOUR), "6 hours");
        assert_eq!(span_words(24 * HOUR), "day");
        assert_eq!(span_words(72 * HOUR), "3 days");
    }
}
