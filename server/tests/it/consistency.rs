//! Issue 31's proof on a large forest: one truth on every screen. About
//! 2,000 quotas (a root, 44 departments, 44 teams each) with real
//! admissions through the webhook (GPUs, A100s, CPU, memory, pods; some
//! teams borrowing beyond hard) and a GPU budget burning on every team;
//! then every figure — in use, allocated, unallocated, free now,
//! borrowable now, lent, borrowed, spent, reserved, the run-out — is read
//! from the JSON API, the tree's CSV, quota pages (their borrowing and
//! loans cards, their budgets box's reservations), the tree page, the
//! overview, charts pages, the alerts API, `/alerts` and the alert emails
//! (a sample, through a real SMTP server), and must be the same wherever
//! it appears; and a report's total, as JSON and CSV, is the budgets'
//! spending, at the root, a department and a team. On a stopped clock,
//! three hours after the work was admitted.

use crate::common::{deployment, review, Browser, Server};
use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use quota::object::QuotaSpec;
use quota::{KeyConfig, Quantity, Quota};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

const DEPTS: usize = 44;
const TEAMS: usize = 44;
const GPU: &str = "requests.nvidia.com/gpu";
const A100: &str = "requests.nvidia.com/gpu.A100";
const CASH: &str = "cash/requests.nvidia.com/gpu";
const HOUR_MS: i64 = 3_600_000;

fn list(pairs: &[(&str, String)]) -> quota::ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// Hard of a quota holding `n` cards.
fn hard(n: usize) -> quota::ResourceList {
    list(&[
        (GPU, n.to_string()),
        (A100, n.to_string()),
        ("requests.cpu", (n * 8).to_string()),
        ("requests.memory", format!("{}Gi", n * 64)),
        ("pods", (n * 4).to_string()),
        (CASH, (n * 90).to_string()),
    ])
}

fn team(d: usize, t: usize) -> String {
    format!("team-{d:02}-{t:02}")
}

/// Replicas (1 card, 8 cores, 64 GiB each) a team runs: 1 to 8 of its 8
/// cards; every fifth team may borrow up to 12 and runs 10.
fn replicas(d: usize, t: usize) -> i64 {
    if (d + t).is_multiple_of(5) {
        10
    } else {
        ((d * 7 + t) % 8) as i64 + 1
    }
}

/// The budget policy of a team whose work reserves what it would spend
/// in a day (its Deployments declare no run time): every eleventh team
/// from the fourth, half of them under a cap, so budgets hold open
/// reservations for the pages and the API to state.
fn reserving(d: usize, t: usize) -> Option<quota::object::budgets::BudgetPolicy> {
    use quota::object::budgets::{BudgetPolicy, WithoutRunTime};
    (t % 11 == 3).then(|| BudgetPolicy {
        without_run_time: WithoutRunTime::ReserveDefault {
            horizon_seconds: 24 * 3600,
        },
        reservation_cap: d.is_multiple_of(2).then(|| "400".parse().unwrap()),
        ..BudgetPolicy::default()
    })
}

async fn build(url: &str) -> usize {
    let store = SqlStore::connect(url).await.unwrap();
    let svc = Service::new(
        Arc::new(store.clone()),
        KeyConfig::default(),
        quota::cash::QosMultipliers::default(),
        Arc::new(Metrics::default()),
    );
    let spec = |parent: &str, n: usize, max: Option<usize>| QuotaSpec {
        parent: parent.into(),
        hard: hard(n),
        max: max
            .map(|m| {
                list(&[
                    (GPU, m.to_string()),
                    (A100, m.to_string()),
                    ("requests.cpu", (m * 8).to_string()),
                    ("requests.memory", format!("{}Gi", m * 64)),
                ])
            })
            .unwrap_or_default(),
        ..QuotaSpec::default()
    };
    // Each department keeps 16 cards unallocated: room its teams borrow.
    let dept_cards = TEAMS * 8 + 16;
    svc.create_quota(
        "org",
        spec("", DEPTS * dept_cards, None),
        Persist::Here,
        "",
        false,
    )
    .await
    .unwrap();
    let mut made = 1;
    for d in 0..DEPTS {
        let dept = format!("dept-{d:02}");
        svc.create_quota(
            &dept,
            spec("org", dept_cards, None),
            Persist::Here,
            "",
            false,
        )
        .await
        .unwrap();
        made += 1;
        for t in 0..TEAMS {
            let max = ((d + t) % 5 == 0).then_some(12);
            let mut spec = spec(&dept, 8, max);
            if let Some(policy) = reserving(d, t) {
                spec.budgets.insert(CASH.to_string(), policy);
            }
            svc.create_quota(&team(d, t), spec, Persist::Here, "", false)
                .await
                .unwrap();
            made += 1;
        }
    }
    store.close().await;
    made
}

/// Each quota whose run-out the overview's "needs attention" names, with
/// the words it says ("runs out in …)"), as the budgets API words them.
pub(crate) fn overview_run_outs(home: &str) -> Vec<(String, String)> {
    let parts: Vec<&str> = home.split("'s budget runs out in ").collect();
    parts
        .windows(2)
        .map(|pair| {
            let name = pair[0]
                .rsplit(|c: char| c == '>' || c.is_whitespace())
                .next()
                .unwrap();
            let words = format!("runs out in {})", pair[1].split(')').next().unwrap());
            (name.to_string(), words)
        })
        .collect()
}

/// A quantity as the API or the CSV writes it, in nano-units.
pub(crate) fn nanos(v: &Value) -> Option<i128> {
    v.as_str().filter(|s| !s.is_empty()).map(|s| {
        s.parse::<Quantity>()
            .unwrap_or_else(|_| panic!("{s}"))
            .nanos()
    })
}

/// The keys table's exact figure (`data-sort-value`) of `key` under the
/// column `label` on a quota page.
pub(crate) fn page_figure(page: &str, key: &str, label: &str) -> Option<i128> {
    let start = format!("<td title=\"{key}\" class=\"key\">");
    // The keys table's row: the one with the table's columns (a key's
    // name also heads other tables' rows).
    let row = page.match_indices(&start).find_map(|(at, _)| {
        let row = &page[at..at + page[at..].find("</tr>")?];
        row.contains("data-label=\"Hard\"").then_some(row)
    })?;
    let cell = row.split(&format!("data-label=\"{label}\"")).nth(1)?;
    let v = cell.split("data-sort-value=\"").nth(1)?.split('"').next()?;
    (!v.is_empty()).then(|| v.parse().unwrap())
}

/// The tree CSV's rows by (quota, key).
pub(crate) fn csv_rows(csv: &str) -> BTreeMap<(String, String), Vec<String>> {
    csv.lines()
        .skip(1)
        .map(|line| {
            let f: Vec<String> = line
                .split(',')
                .map(|x| x.trim_matches('"').to_string())
                .collect();
            ((f[0].clone(), f[2].clone()), f)
        })
        .collect()
}

/// The (name, amount) rows of the card headed `heading` on a quota page
/// (its borrowing and loans: `<h4>Borrowed beyond hard</h4>` and a pairs
/// table); empty when the page has no such card.
fn pairs_card(page: &str, heading: &str) -> BTreeMap<String, String> {
    let Some(card) = page.split(&format!("<h4>{heading}</h4>")).nth(1) else {
        return BTreeMap::new();
    };
    let table = card.split("</table>").next().unwrap();
    table
        .split("<tr><td class=\"key\">")
        .skip(1)
        .map(|row| {
            let (name, rest) = row.split_once("</td>").unwrap();
            let amount = rest
                .split("<td class=\"num\">")
                .nth(1)
                .and_then(|a| a.split("</td>").next())
                .unwrap();
            (name.to_string(), amount.to_string())
        })
        .collect()
}

/// One quota's figures agree wherever they appear: each key's hard, in
/// use, allocated, allocated idle, unallocated, lent and borrowed in the
/// usage API (`usage`) and the tree's CSV (`csv`); hard, in use,
/// allocated, free now, borrowable now and self used on its page (the
/// keys table's exact figures); and each budget of the budgets API
/// (`budgets`): its subtree's spending and carve-outs in the CSV, its
/// spending in the keys table, its left in every "… card-hours left" of
/// the page and in the tree's cell (`tree`, the `/tree` page with the
/// quota's row shown), its run-out in one set of words on the page (and
/// at a parent, every left said to be its own work's); what its open
/// reservations hold (`reserved`) and what is left after them, in the
/// budgets box as in the budgets API; and each key borrowed beyond hard
/// or lent to children, in the page's borrowing and loans cards as in the
/// usage API. Returns how many figures it compared.
pub(crate) fn quota_agrees(
    name: &str,
    page: &str,
    usage: &Value,
    budgets: &Value,
    csv: &BTreeMap<(String, String), Vec<String>>,
    tree: &str,
) -> usize {
    let mut compared = 0;
    // The keys table's column and its phone labels say the same words: a
    // key is in use, a budget spent.
    if !budgets["budgets"].as_array().unwrap().is_empty() {
        assert!(
            page.contains(">In use / spent</th>") && page.contains("data-label=\"Spent\""),
            "{name}'s keys table names its budget's figure as its column does"
        );
    }
    for k in usage["keys"].as_array().unwrap() {
        let key = k["key"].as_str().unwrap();
        if key.starts_with("cash/") {
            continue; // a budget: below
        }
        let row = csv
            .get(&(name.to_string(), key.to_string()))
            .unwrap_or_else(|| panic!("{name} {key} in the CSV"));
        // quota,parent,key,unit,hard,in_use_subtree,self_used,
        // allocated_to_children,allocated_idle,unallocated,lent,borrowed,spent
        let csv_n = |i: usize| nanos(&Value::String(row[i].clone()));
        for (field, i) in [
            ("hard", 4),
            ("inUse", 5),
            ("selfUsed", 6),
            ("allocated", 7),
            ("allocatedIdle", 8),
            ("unallocated", 9),
            ("lent", 10),
            ("borrowed", 11),
        ] {
            assert_eq!(
                nanos(&k[field]),
                csv_n(i),
                "{name} {key} {field}: API {} vs CSV {}",
                k[field],
                row[i]
            );
            compared += 1;
        }
        for (field, label) in [
            ("hard", "Hard"),
            ("inUse", "In use"),
            ("allocated", "Allocated to children"),
            ("freeNow", "Free now"),
            ("borrowableNow", "Borrowable now"),
            ("selfUsed", "Self used"),
        ] {
            let api = nanos(&k[field]);
            let shown = page_figure(page, key, label);
            // The page leaves a zero allocation blank at a leaf.
            let same = api == shown || (shown.is_none() && api == Some(0));
            assert!(same, "{name} {key} {label}: API {api:?}, page {shown:?}");
            compared += 1;
        }
        // The tree's GPU cells (all GPUs, and a column per model): in use
        // in the subtree, allocated to children and hard, as the API.
        let cfg = KeyConfig::default();
        let gpu_requests = quota::keys::Key::parse(key, &cfg).is_ok_and(|k| {
            !k.cash && cfg.is_gpu(&k.resource) && k.class == quota::keys::Class::Requests
        });
        if gpu_requests {
            let row = tree
                .split(&format!("<tr id=\"{name}\""))
                .nth(1)
                .and_then(|r| r.split("</tr>").next())
                .unwrap_or_else(|| panic!("{name}'s row on the tree"));
            let show = |f: &str| {
                let q: Quantity = k[f].as_str().unwrap().parse().unwrap();
                app::display_quantity(key, q, &cfg)
            };
            let title = format!(
                "title=\"{key}: {} in use (subtree), {} allocated to children, {} hard\"",
                show("inUse"),
                show("allocated"),
                show("hard")
            );
            assert!(row.contains(&title), "{name}'s tree row: {title} in {row}");
            compared += 3;
        }
    }
    // Borrowing and loans: the "Borrowed beyond hard" and "Lent to
    // children" cards list each key the usage API says is borrowed or
    // lent, by name, with its amount, and no other.
    let cfg = KeyConfig::default();
    for (field, heading) in [
        ("borrowed", "Borrowed beyond hard"),
        ("lent", "Lent to children"),
    ] {
        let api: BTreeMap<String, String> = usage["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| nanos(&k[field]).unwrap_or(0) != 0)
            .map(|k| {
                let key = k["key"].as_str().unwrap();
                let q: Quantity = k[field].as_str().unwrap().parse().unwrap();
                (
                    app::key_name(key, &cfg),
                    app::display_quantity(key, q, &cfg),
                )
            })
            .collect();
        assert_eq!(
            pairs_card(page, heading),
            api,
            "{name}'s {heading} card vs the usage API's {field}"
        );
        compared += api.len().max(1);
    }
    for budget in budgets["budgets"].as_array().unwrap() {
        let key = budget["key"].as_str().unwrap();
        let row = &csv[&(name.to_string(), key.to_string())];
        let n = |field: &str| nanos(&budget[field]).unwrap();
        let csv_n = |i: usize| nanos(&Value::String(row[i].clone()));
        // Spent: the subtree's, in the API, the CSV and the keys table;
        // what a parent carved out is its own column.
        assert_eq!(
            csv_n(12),
            Some(n("subtreeSpent")),
            "{name} CSV spent: {budget} {row:?}"
        );
        assert_eq!(
            csv_n(7),
            Some(n("carvedOut")),
            "{name} CSV carved: {budget} {row:?}"
        );
        assert_eq!(
            page_figure(page, key, "Spent"),
            Some(n("subtreeSpent")),
            "{name}'s keys table: {budget}"
        );
        let grouped =
            |f: &str| quota::readable::grouped(budget[f].as_str().unwrap().parse().unwrap());
        if n("carvedOut") > 0 {
            let words = format!(
                "{} card-hours spent in its subtree",
                grouped("subtreeSpent")
            );
            assert!(page.contains(&words), "{name}'s budgets box says {words}");
            // What is left and its run-out are its own work's, and every
            // sentence that gives them says so.
            let own = format!("its own work: {}", budget["runway"].as_str().unwrap());
            assert!(page.contains(&own), "{name}'s budgets box says {own}");
            let bare = page.matches("card-hours left").count()
                - page.matches("card-hours left after them").count();
            let owned = page.matches(" allocated to children): ").count()
                + page.matches(" for its own work · ").count();
            assert!(
                bare > 0 && owned >= bare,
                "{name}: {bare} 'left' on the page, {owned} of them said to be its own work's"
            );
        }
        // Left: the page's every "… card-hours left" and the tree's cell.
        let left = grouped("left");
        let lefts = crate::one_copy::lefts(page);
        assert!(
            !lefts.is_empty() && lefts.iter().all(|l| *l == left),
            "{name}'s page says {lefts:?}, the API {left}"
        );
        let cell = tree
            .split(&format!("<tr id=\"{name}\""))
            .nth(1)
            .and_then(|r| {
                r.split("data-label=\"Budget left\" data-sort-value=\"")
                    .nth(1)
            })
            .and_then(|v| v.split('"').next())
            .unwrap_or_else(|| panic!("{name}'s budget on the tree"));
        assert_eq!(
            cell.parse::<i128>().ok(),
            Some(n("left")),
            "{name} on the tree"
        );
        // The run-out: one set of words.
        let words = budget["runway"].as_str().unwrap();
        assert!(page.contains(words), "{name}'s page says {words}");
        if page.contains("runs out in") {
            assert_eq!(
                page.matches("runs out in").count(),
                page.matches(words).count(),
                "{name}'s page has another run-out than {words}"
            );
        }
        // Reserved: what the open reservations hold back and what is left
        // after them, in the budgets box's line, as the API has them.
        let r = &budget["reservations"];
        let open = r["open"].as_u64().unwrap();
        let unit = budget["unit"].as_str().unwrap();
        let show = |v: &Value| quota::readable::grouped(v.as_str().unwrap().parse().unwrap());
        if open > 0 || !r["cap"].is_null() {
            let (plural, verb) = if open == 1 {
                ("", "holds")
            } else {
                ("s", "hold")
            };
            let held = format!(
                "{open} open reservation{plural} {verb} {} {unit}",
                show(&r["reserved"])
            );
            let cap = if r["cap"].is_null() {
                String::new()
            } else {
                format!(" (cap {})", show(&r["cap"]))
            };
            let line = format!(
                "{held}{cap} · {} {unit} left after them",
                show(&r["leftAfterReservations"])
            );
            assert!(
                page.contains(&line),
                "{name}'s budgets box says {line}: {r}"
            );
            assert_eq!(
                n("left") - nanos(&r["reserved"]).unwrap(),
                nanos(&r["leftAfterReservations"]).unwrap(),
                "{name}: left after the reservations is left less what they hold: {budget}"
            );
            compared += 2;
        } else {
            assert!(
                !page.contains("open reservation"),
                "{name} has no reservation, and its page none: {r}"
            );
        }
        compared += 4;
    }
    compared
}

/// A quota's keys by the names people read (`quota::keys::display_name`):
/// its usage keys and its budgets, the longest name first (so "CPU cores
/// (limit)" is found before "CPU cores").
fn names_of(usage: &Value, budgets: &Value, cfg: &KeyConfig) -> Vec<(String, String)> {
    let mut names: Vec<(String, String)> = usage["keys"]
        .as_array()
        .unwrap()
        .iter()
        .chain(budgets["budgets"].as_array().unwrap())
        .map(|k| {
            let key = k["key"].as_str().unwrap();
            (quota::keys::display_name(key, cfg), key.to_string())
        })
        .collect();
    names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    names.dedup();
    names
}

/// A figure an alert states of one key of its quota.
#[derive(Debug)]
pub(crate) enum Stated {
    /// `7 in use of 8`, `9 spent of 720`, `10 used of 8` (over quota:
    /// what the quota holds), `7 of 8 (87 %)`: as `quota::readable::amount`
    /// writes amounts.
    Used {
        key: String,
        used: String,
        hard: String,
        over: bool,
    },
    /// A budget's run-out: its day, and the whole words where the alert
    /// gives them (its title: `runs out in 8.3 days (2026-12-07)`).
    RunsOut {
        key: String,
        day: String,
        words: Option<String>,
    },
}

/// The figures an alert on `name` states: its title's (`GPUs of q reached
/// 80 %: 7 in use of 8`, `… is over quota: 10 used of 8`, `GPU
/// card-hours of q runs out in …`) and, for one on several keys, each
/// listed key's — an email's lines (`A100 GPUs: 7 of 8 (87 %)`) or an
/// /alerts row's (`A100 GPUs 7 of 8 (87 %)`). `names`: `names_of`. Other
/// alerts (transfers, reclaim) state none.
pub(crate) fn stated(
    name: &str,
    title: &str,
    list: &[&str],
    names: &[(String, String)],
) -> Vec<Stated> {
    let key_of = |shown: &str| -> String {
        names
            .iter()
            .find(|(n, _)| n == shown)
            .map(|(_, k)| k.clone())
            .unwrap_or_else(|| panic!("{name} has a key named {shown}: {title}"))
    };
    // `used of hard`, without a trailing `(87 %)`.
    let used_of = |figure: &str, key: String, over: bool| -> Option<Stated> {
        let figure = figure.rsplit_once(" (").map_or(figure, |(f, _)| f);
        let (used, hard) = figure.split_once(" of ")?;
        let used = ["in use", "spent", "used"]
            .iter()
            .find_map(|w| used.strip_suffix(&format!(" {w}")))
            .unwrap_or(used);
        Some(Stated::Used {
            key,
            used: used.to_string(),
            hard: hard.to_string(),
            over,
        })
    };
    let Some((head, what)) = title.split_once(&format!(" of {name} ")) else {
        return Vec::new();
    };
    // An email's subject starts `[bizrq warning] `.
    let shown = head.rsplit("] ").next().unwrap();
    let mut out = Vec::new();
    let over = what.starts_with("is over quota: ");
    if let Some(figure) = what.strip_prefix("is over quota: ").or_else(|| {
        what.starts_with("reached ")
            .then(|| what.split_once(": ").unwrap().1)
    }) {
        out.extend(used_of(figure, key_of(shown), over));
    } else if let Some(words) = what.strip_prefix("runs out in ") {
        let day = words.rsplit('(').next().unwrap().trim_end_matches(')');
        out.push(Stated::RunsOut {
            key: key_of(shown),
            day: day.to_string(),
            words: Some(format!("runs out in {words}")),
        });
    } else {
        return out;
    }
    for item in list {
        let Some((n, key)) = names.iter().find(|(n, _)| {
            item.strip_prefix(n.as_str())
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with(": "))
        }) else {
            continue; // `and 3 more keys`
        };
        let figure = item[n.len()..].trim_start_matches(':').trim();
        let figure = figure.split(" and ").next().unwrap(); // `… and 2 more`
        if let Some(day) = figure.strip_prefix("runs out ") {
            out.push(Stated::RunsOut {
                key: key.clone(),
                day: day.to_string(),
                words: None,
            });
        } else {
            out.extend(used_of(figure, key.clone(), over));
        }
    }
    out
}

/// How many figures of each kind were compared.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Agreed {
    pub in_use: usize,
    pub spent: usize,
    pub run_outs: usize,
}

impl std::ops::AddAssign for Agreed {
    fn add_assign(&mut self, o: Agreed) {
        self.in_use += o.in_use;
        self.spent += o.spent;
        self.run_outs += o.run_outs;
    }
}

/// Each figure an alert states (`stated`) is its quota's in the usage and
/// budgets APIs, as the alert writes amounts (`quota::readable::amount`,
/// which the pages use too): a key's in use and hard, a budget's
/// subtree spending (never its carve-outs) and budget; over quota, what the
/// quota holds (allocated to children and its own use); a run-out's day,
/// and with `words` the whole words (an alert written at the moment the
/// APIs are read; one opened earlier said "in N days" then).
pub(crate) fn stated_agree(
    what: &str,
    stated: &[Stated],
    usage: &Value,
    budgets: &Value,
    words: bool,
) -> Agreed {
    let name = usage["quota"].as_str().unwrap();
    let api_key = |key: &str| -> &Value {
        usage["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == key)
            .unwrap_or_else(|| panic!("{name}'s key {key}: {usage}"))
    };
    let budget = |key: &str| -> &Value {
        budgets["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["key"] == key)
            .unwrap_or_else(|| panic!("{name}'s budget {key}: {budgets}"))
    };
    let amount =
        |key: &str, v: &Value| quota::readable::amount(key, v.as_str().unwrap().parse().unwrap());
    let mut agreed = Agreed::default();
    for s in stated {
        match s {
            Stated::Used {
                key,
                used,
                hard,
                over,
            } if key.starts_with("cash/") => {
                let b = budget(key);
                assert_eq!(
                    *hard,
                    amount(key, &b["budget"]),
                    "{name} {key} budget: {what}"
                );
                if !over {
                    assert_eq!(
                        *used,
                        amount(key, &b["subtreeSpent"]),
                        "{name} {key} spent: {what} vs the budgets API {b}"
                    );
                    agreed.spent += 1;
                }
            }
            Stated::Used {
                key,
                used,
                hard,
                over,
            } => {
                let k = api_key(key);
                assert_eq!(*hard, amount(key, &k["hard"]), "{name} {key} hard: {what}");
                let api = if *over {
                    // What it holds: its children's carve-outs and its own use.
                    let n = |f: &str| nanos(&k[f]).unwrap();
                    quota::readable::amount(
                        key,
                        Quantity::from_nanos(n("allocated") + n("selfUsed")),
                    )
                } else {
                    amount(key, &k["inUse"])
                };
                assert_eq!(
                    *used, api,
                    "{name} {key} in use: {what} vs the usage API {k}"
                );
                agreed.in_use += 1;
            }
            Stated::RunsOut {
                key,
                day,
                words: said,
            } => {
                let b = budget(key);
                let api_day = &b["runsOutAt"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name} {key} runs out: {what} vs {b}"))[..10];
                assert_eq!(day, api_day, "{name} {key} run-out day: {what} vs {b}");
                if let (true, Some(said)) = (words, said) {
                    assert_eq!(
                        said,
                        b["runway"].as_str().unwrap(),
                        "{name} {key}: the run-out's words vs the budgets API: {what}"
                    );
                }
                agreed.run_outs += 1;
            }
        }
    }
    agreed
}

/// One alert email (its text, lines in `\n`) against the usage and
/// budgets APIs of the quota it links to (`Quota: …/quotas/{name}`):
/// every figure it states (`stated_agree`, the run-out's words whole: the
/// email was written on the stopped clock the APIs read), and a budget's
/// remaining to the nano-unit. None for an email on no quota.
pub(crate) async fn email_agrees(s: &Server, text: &str, cfg: &KeyConfig) -> Option<Agreed> {
    let name = text
        .lines()
        .find_map(|l| l.strip_prefix("Quota: "))
        .and_then(|l| l.rsplit('/').next())?;
    let get = |path: String| async move {
        let (st, v) = s.api(Method::GET, &path, None).await;
        assert_eq!(st, StatusCode::OK, "{path}: {v}");
        v
    };
    let usage = get(format!("/api/v1/quotas/{name}/usage")).await;
    let budgets = get(format!("/api/v1/quotas/{name}/budgets")).await;
    let title = text.lines().next().unwrap();
    let list: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("- ")).collect();
    let said = stated(name, title, &list, &names_of(&usage, &budgets, cfg));
    let agreed = stated_agree(text, &said, &usage, &budgets, true);
    if let Some(Stated::RunsOut { key, .. }) = said.first() {
        if let Some(left) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("remaining: "))
        {
            let b = budgets["budgets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["key"] == key.as_str())
                .unwrap();
            assert_eq!(
                nanos(&Value::String(left.to_string())),
                nanos(&b["left"]),
                "{name} {key} left: the email vs the budgets API: {text}"
            );
        }
    }
    Some(agreed)
}

/// The open alerts as `/alerts` lists them, every page of them: each
/// row's quota and message (the words people read), and how many alerts
/// the rows hold (a row names each of its alerts' ids).
async fn alert_rows(admin: &Browser) -> (Vec<(String, String)>, usize) {
    let unescape = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    };
    let text = |cell: &str| {
        let mut out = String::new();
        let mut tag = false;
        for c in cell.chars() {
            match c {
                '<' => tag = true,
                '>' => tag = false,
                c if !tag => out.push(c),
                _ => {}
            }
        }
        unescape(out.trim())
    };
    let (mut rows, mut ids) = (Vec::new(), 0);
    for page in 0.. {
        let body = admin
            .get(&format!("/alerts?open_from={}", page * 100))
            .await;
        assert_eq!(body.status, StatusCode::OK);
        // The first table: the open alerts (the resolved ones follow).
        let open = body
            .body
            .split("<table ")
            .find(|t| t.split('>').next().unwrap().contains("class=\"alerts\""))
            .unwrap_or_else(|| panic!("the open alerts' table: {}", body.body));
        let open = open.split("</table>").next().unwrap();
        let before = rows.len();
        for row in open.split("<tr data-ids=\"").skip(1) {
            ids += row.split('"').next().unwrap().split(',').count();
            let quota = row
                .split("<a href=\"/quotas/")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap()
                .to_string();
            let message = text(row.split("<td").nth(4).unwrap().split_once('>').unwrap().1);
            rows.push((quota, message));
        }
        if rows.len() == before || !body.body.contains("more open alerts") {
            break;
        }
    }
    (rows, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_figure_agrees_everywhere_on_a_2000_quota_forest() {
    let db = tempfile::tempdir().unwrap();
    every_figure_agrees(&crate::common::fresh_sqlite(&db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_figure_agrees_everywhere_on_a_2000_quota_forest_postgres() {
    every_figure_agrees(&crate::common::fresh_postgres().await).await;
}

async fn every_figure_agrees(url: &str) {
    let made = build(url).await;
    assert!(made >= 1_900, "{made} quotas");
    // A stopped clock (as the demo's every-figure test), at the next whole
    // hour after the quotas were made: the work is admitted then, and read
    // three hours on, so budgets have spent and no figure moves between
    // two reads.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let t0 = (wall / HOUR_MS + 1) * HOUR_MS;
    let (clock, c) = crate::common::test_clock(t0);
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(crate::common::ADMIN_PASSWORD.into());
    // No resync writes the budgets' spending to the ledger meanwhile: a
    // report reads the ledger as the admissions left it.
    args.resync_seconds = 3600;
    // Alert emails go through a real SMTP server (aiosmtpd), as the
    // demo's (`demo::figures`); nobody has an address until the end.
    let mail = tempfile::tempdir().unwrap();
    let port = crate::mail::free_port();
    let _smtp = crate::mail::start_smtp(port, mail.path()).await;
    args.smtp_host = Some("127.0.0.1".into());
    args.smtp_port = port;
    args.smtp_security = bizrq::config::SmtpSecurity::Plain;
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    let cfg = running.service.keys.clone();

    // Every team's work, admitted as the API server would send it (eight
    // at a time).
    let teams: Vec<(usize, usize)> = (0..DEPTS)
        .flat_map(|d| (0..TEAMS).map(move |t| (d, t)))
        .collect();
    let s = Arc::new(s);
    for chunk in teams.chunks(8) {
        let runs = chunk.iter().map(|&(d, t)| {
            let s = s.clone();
            async move {
                let name = team(d, t);
                let w = deployment("train", &name, replicas(d, t), 1);
                let r = s
                    .review(
                        "/validate/workloads",
                        &review(
                            "deployment-create.json",
                            &format!("u-{name}"),
                            Some(w),
                            None,
                        ),
                    )
                    .await;
                assert_eq!(r["allowed"], true, "{name}: {r}");
            }
        });
        futures::future::join_all(runs).await;
    }
    clock.store(t0 + 3 * HOUR_MS, std::sync::atomic::Ordering::SeqCst);

    let get = |path: String| {
        let s = s.clone();
        async move {
            let (st, v) = s.api(Method::GET, &path, None).await;
            assert_eq!(st, StatusCode::OK, "{path}: {v}");
            v
        }
    };

    // The tree's CSV: every key of every quota, exact.
    let admin = Browser::admin(&s).await;
    let by_csv = csv_rows(&admin.get("/tree.csv").await.body);
    assert_eq!(
        by_csv
            .keys()
            .map(|(q, _)| q)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        made,
        "every quota in the CSV"
    );

    // Every quota, on its page, in the usage and budgets APIs, the CSV and
    // its row of the tree (every row shown: the forest is three deep):
    // each figure is the same (`quota_agrees`), two pages at a time (a
    // person may have two heavy requests in flight: `heavy::Config`).
    let names: Vec<String> = std::iter::once("org".to_string())
        .chain((0..DEPTS).map(|d| format!("dept-{d:02}")))
        .chain(teams.iter().map(|&(d, t)| team(d, t)))
        .collect();
    let tree = admin.get("/tree?depth=3").await;
    assert_eq!(tree.status, StatusCode::OK);
    let tree = tree.body;
    let mut usage: BTreeMap<String, Value> = BTreeMap::new();
    let mut budgets: BTreeMap<String, Value> = BTreeMap::new();
    let mut runs_out: BTreeMap<String, String> = BTreeMap::new();
    let (mut borrowing, mut lending, mut holding, mut compared) = (0, 0, 0, 0);
    for chunk in names.chunks(2) {
        let reads = chunk.iter().map(|name| {
            let (admin, get) = (&admin, &get);
            async move {
                let page = admin.get(&format!("/quotas/{name}")).await;
                assert_eq!(page.status, StatusCode::OK, "{name}");
                let u = get(format!("/api/v1/quotas/{name}/usage")).await;
                let b = get(format!("/api/v1/quotas/{name}/budgets")).await;
                (name, page.body, u, b)
            }
        });
        for (name, page, u, b) in futures::future::join_all(reads).await {
            compared += quota_agrees(name, &page, &u, &b, &by_csv, &tree);
            borrowing += u["keys"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|k| nanos(&k["borrowed"]).unwrap_or(0) > 0)
                .count();
            lending += u["keys"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|k| nanos(&k["lent"]).unwrap_or(0) > 0)
                .count();
            for budget in b["budgets"].as_array().unwrap() {
                holding += (budget["reservations"]["open"].as_u64() > Some(0)) as usize;
                let words = budget["runway"].as_str().unwrap_or_default();
                if words.starts_with("runs out in ") {
                    runs_out.insert(name.to_string(), words.to_string());
                }
            }
            usage.insert(name.clone(), u);
            budgets.insert(name.clone(), b);
        }
    }
    assert!(borrowing > 0, "some teams borrow beyond hard");
    assert!(lending > 0, "departments lend to their teams");
    assert!(holding > 100, "{holding} budgets hold open reservations");
    assert!(compared > made * 20, "{compared} figures compared");
    assert!(!runs_out.is_empty(), "budgets run out in the forest");

    // The overview's "needs attention" names run-outs: each is the budgets
    // API's, word for word. (An admin's lists the 387 borrowers over their
    // hard first; the owner of team-00-06, 7 of 8 cards burning, sees its
    // own run-out.)
    crate::common::create_user(&admin, "tess", "tess-password-1234").await;
    crate::common::bind(&admin, "tess", "team-00-06", "owner").await;
    let tess = Browser::logged_in(&s, "tess", "tess-password-1234").await;
    let home = tess.get("/").await.body;
    let mut named = 0;
    for (name, words) in overview_run_outs(&home) {
        let b = get(format!("/api/v1/quotas/{name}/budgets")).await;
        assert_eq!(
            b["budgets"][0]["runway"],
            words.as_str(),
            "the overview says {name}'s budget {words}"
        );
        named += 1;
    }
    assert!(named > 0, "the overview names run-outs");

    // The alerts: after a sweep, each usage alert's figure is the API's in
    // use, and each forecast alert names the budgets API's day.
    let mut alerts = Vec::new();
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let v = get("/api/v1/alerts?state=open&limit=1000".to_string()).await;
        alerts = v["items"].as_array().unwrap().clone();
        if alerts.iter().any(|a| a["kind"] == "cash_forecast") {
            break;
        }
    }
    let (mut thresholds, mut forecasts) = (0, 0);
    for a in &alerts {
        let (q, key) = (a["quota"].as_str().unwrap(), a["key"].as_str().unwrap());
        match a["kind"].as_str().unwrap() {
            "threshold" if !key.starts_with("cash/") => {
                let k = usage[q]["keys"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|k| k["key"] == key)
                    .unwrap();
                assert_eq!(
                    nanos(&a["numbers"]["used"]),
                    nanos(&k["inUse"]),
                    "the alert on {q} {key} reads the API's in use: {a}"
                );
                thresholds += 1;
            }
            "cash_forecast" if runs_out.contains_key(q) => {
                let words = &runs_out[q];
                let day = words.rsplit('(').next().unwrap();
                assert!(
                    a["message"].as_str().unwrap().ends_with(&format!("({day}")),
                    "{q}'s forecast alert names {words}: {a}"
                );
                forecasts += 1;
            }
            _ => {}
        }
    }
    assert!(thresholds > 0, "usage alerts to compare: {alerts:?}");
    assert!(forecasts > 0, "forecast alerts to compare: {alerts:?}");

    // `/alerts`, every page: each open alert once, and each figure a row
    // states the APIs' (its run-out's day: the words were written when
    // it opened, hours before).
    let sql = SqlStore::connect(url).await.unwrap();
    let open = bizrq::store::alerts::AlertFilter {
        open: Some(true),
        ..Default::default()
    };
    let (rows, ids) = alert_rows(&admin).await;
    assert_eq!(
        ids as i64,
        sql.count_alerts(&open).await.unwrap(),
        "every open alert on /alerts"
    );
    let mut on_rows = Agreed::default();
    for (q, message) in &rows {
        let (title, list) = match message.split_once("; ") {
            Some((title, rest)) => (
                title,
                rest.split_once(" keys: ")
                    .map_or(Vec::new(), |(_, l)| l.split(", ").collect()),
            ),
            None => (message.as_str(), Vec::new()),
        };
        let said = stated(q, title, &list, &names_of(&usage[q], &budgets[q], &cfg));
        on_rows += stated_agree(message, &said, &usage[q], &budgets[q], false);
    }
    assert!(
        on_rows.in_use > 0 && on_rows.run_outs > 0,
        "figures compared on /alerts: {on_rows:?}"
    );

    // The charts pages' sentences (a sample: the root, every department,
    // two teams of each, one of them holding reservations): every "…
    // card-hours left" is the budgets API's left, its run-out the API's
    // words, and at a parent what it allocated to its children the API's
    // carve-outs.
    let mut charted = 0;
    let sampled = |n: &&String| !n.starts_with("team-") || n.ends_with("-00") || n.ends_with("-03");
    for name in names.iter().filter(sampled) {
        let page = admin
            .get(&format!("/quotas/{name}/charts?key={CASH}"))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{name}'s charts");
        let b = &budgets[name]["budgets"][0];
        let left = quota::readable::grouped(b["left"].as_str().unwrap().parse().unwrap());
        let lefts = crate::one_copy::lefts(&page.body);
        assert!(
            lefts.iter().all(|l| *l == left),
            "{name}'s charts page says {lefts:?}, the budgets API {left}"
        );
        // Nothing left (org carved out all of its budget) is said in words.
        let spent = nanos(&b["left"]).unwrap() <= 0;
        assert!(
            !lefts.is_empty() || (spent && page.body.contains(": run out")),
            "{name}'s charts page says what is left ({left}): {}",
            page.body
        );
        let words = b["runway"].as_str().unwrap();
        let run_outs = page.body.matches("runs out in ").count();
        if words.starts_with("runs out in ") {
            assert!(
                run_outs > 0 && run_outs == page.body.matches(words).count(),
                "{name}'s charts page says {words}, and no other run-out"
            );
        } else {
            assert_eq!(
                run_outs, 0,
                "{name}'s charts page: a run-out where the API says {words}"
            );
        }
        if nanos(&b["carvedOut"]).unwrap() > 0 {
            let carved = format!(
                "({} card-hours allocated to children)",
                quota::readable::grouped(b["carvedOut"].as_str().unwrap().parse().unwrap())
            );
            assert!(
                page.body.contains(&carved),
                "{name}'s charts page says {carved}"
            );
        }
        charted += 1;
    }
    assert!(charted > 100, "{charted} charts pages read");

    // A report's total for the period is the budgets' spending: at the
    // root (by child), a department (by child) and a team (by workload),
    // over the days the work ran, the budgets API's subtree spending, and
    // the exact sum of what each quota's budget spent.
    let day = |ms: i64| quota::time::format_rfc3339(ms)[..10].to_string();
    let (from, to) = (day(t0), day(t0 + 3 * HOUR_MS));
    let copies: BTreeMap<String, Quota> = {
        let w = running.service.working(t0 + 3 * HOUR_MS);
        running
            .service
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|q| (q.name().to_string(), w.copy(&q)))
            .collect()
    };
    for (subtree, by) in [
        ("org", "child"),
        ("dept-07", "child"),
        ("team-07-03", "workload"),
    ] {
        let r = get(format!(
            "/api/v1/reports?from={from}&to={to}&subtree={subtree}&key={CASH}"
        ))
        .await;
        assert_eq!(r["by"], by, "{r}");
        // Nothing is written meanwhile: the copies and the ledger were
        // read at one moment the first time.
        assert!(!r["notes"].to_string().contains("being written"), "{r}");
        let total: i128 = r["total"].as_str().unwrap().parse().unwrap();
        let spent: i128 = copies
            .values()
            .filter(|q| q.name() == subtree || under(q.name(), subtree, &copies))
            .map(|q| quota::budget::from_cash_accrued(q.status.accrued(CASH)))
            .sum();
        assert!(spent > 0, "{subtree} spent nothing");
        assert_eq!(
            total, spent,
            "{subtree}: the report's total is what its budgets spent: {r}"
        );
        let b = get(format!("/api/v1/quotas/{subtree}/budgets")).await;
        assert_eq!(
            nanos(&b["budgets"][0]["subtreeSpent"]),
            Some(quota::budget::to_quantity(total).nanos()),
            "{subtree}: the report's total is the budgets API's subtree spending: {b}"
        );
        // The same report as CSV: its total line is the API's, exactly,
        // and in card-hours the budgets API's subtree spending.
        let csv = admin
            .get(&format!(
                "/reports.csv?from={from}&to={to}&subtree={subtree}&key={CASH}"
            ))
            .await;
        assert_eq!(csv.status, StatusCode::OK, "{}", csv.body);
        let last: Vec<&str> = csv
            .body
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .split(',')
            .collect();
        assert_eq!(
            last[0], "total",
            "{subtree}'s CSV ends with its total: {}",
            csv.body
        );
        assert_eq!(
            last[4], r["total"],
            "{subtree}: the CSV's exact total is the API's"
        );
        assert_eq!(
            nanos(&Value::String(last[3].to_string())),
            nanos(&b["budgets"][0]["subtreeSpent"]),
            "{subtree}: the CSV's total in card-hours is the budgets API's subtree spending"
        );
    }

    // Allocated against used (docs/real-usage.md). This forest has no
    // Prometheus, so real usage is seeded through the store: one reading
    // of the three hours the work ran, measured by the controller's pure
    // reading (`measure_window`) from answers made up here, written with
    // `record_reading` and counted in bizrq's own metrics by the
    // controller's `written`, as a controller's reading is. Each team's
    // pod holds its cards, busy in steps of 20 % (some at 0 %: idle);
    // every seventh team is never measured (efficiency unknown). Steps of
    // 15 minutes and whole percents keep every card-hour exact and every
    // card-second whole. Then, for every team, the efficiency API, its
    // department's report CSV and the metrics agree exactly; on a sample
    // of quota pages (the root, every department, three teams of each),
    // the page's totals are the API's.
    let (window, measured) = seeded_real_usage(&running.service, &teams, t0).await;
    let written = sql
        .record_reading(window.from_ms, window.to_ms, &measured.rows, &measured.idle)
        .await
        .unwrap();
    assert_eq!(written, bizrq::store::real_usage::Recorded::Written);
    running
        .service
        .metrics
        .real_usage
        .written(&measured, window.to_ms);
    let (st, metrics) = s.get_text("/metrics").await;
    assert_eq!(st, StatusCode::OK);
    let card_seconds = card_seconds_of(&metrics);
    let mut by_team: BTreeMap<String, Value> = BTreeMap::new();
    // Two at a time: the efficiency API is a heavy request, two in flight
    // per person (`heavy::Config`).
    for chunk in teams.chunks(2) {
        let reads = chunk.iter().map(|&(d, t)| {
            let get = &get;
            async move {
                let name = team(d, t);
                let e = get(format!("/api/v1/quotas/{name}/efficiency?range=24h")).await;
                (name, e)
            }
        });
        for (name, e) in futures::future::join_all(reads).await {
            by_team.insert(name, e["total"].clone());
        }
    }
    let exact = |v: &Value| -> i128 {
        v.as_str()
            .and_then(|s| s.parse::<Quantity>().ok())
            .unwrap_or_else(|| panic!("not an exact amount: {v}"))
            .nanos()
    };
    let (mut idle_teams, mut unknown_teams, mut named) = (0, 0, 0);
    let mut other = [0f64; 4];
    for (name, total) in &by_team {
        let allocated = exact(&total["gpuHoursAllocated"]);
        assert!(allocated > 0, "{name} held cards: {total}");
        idle_teams += (exact(&total["idleCardHours"]) > 0) as usize;
        unknown_teams += total["efficiencyPermille"].is_null() as usize;
        // The metrics: card-seconds of each figure, the API's card-hours
        // × 3600 exactly; quotas past the metrics' named ones sum in
        // `_other`.
        let figures = [
            ("allocated", "gpuHoursAllocated"),
            ("measured", "gpuHoursMeasured"),
            ("busy", "gpuHoursBusy"),
            ("idle", "idleCardHours"),
        ];
        for (i, (figure, field)) in figures.into_iter().enumerate() {
            let seconds = exact(&total[field]) * 3600;
            assert_eq!(seconds % quota::quantity::NANO, 0, "{name}: whole seconds");
            let seconds = (seconds / quota::quantity::NANO) as f64;
            match card_seconds.get(&(name.clone(), figure.to_string())) {
                Some(v) => assert_eq!(*v, seconds, "{name}'s {figure} card-seconds"),
                None => other[i] += seconds,
            }
        }
        named += card_seconds.contains_key(&(name.clone(), "allocated".into())) as usize;
    }
    assert!(named >= 900, "{named} teams named in the metrics");
    for (i, figure) in ["allocated", "measured", "busy", "idle"].iter().enumerate() {
        assert_eq!(
            card_seconds
                .get(&("_other".to_string(), figure.to_string()))
                .copied()
                .unwrap_or(0.0),
            other[i],
            "the teams not named sum in _other's {figure}"
        );
    }
    assert!(idle_teams > 100, "{idle_teams} teams idle");
    assert!(unknown_teams > 100, "{unknown_teams} teams never measured");
    // Each department's report CSV (by child, one row each): its four
    // efficiency columns are the API's, exactly.
    let mut in_csv = 0;
    for d in 0..DEPTS {
        let dept = format!("dept-{d:02}");
        let csv = admin
            .get(&format!(
                "/reports.csv?from={from}&to={to}&subtree={dept}&key={CASH}"
            ))
            .await;
        assert_eq!(csv.status, StatusCode::OK, "{}", csv.body);
        let mut lines = csv.body.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |n: &str| {
            header
                .iter()
                .position(|h| *h == n)
                .unwrap_or_else(|| panic!("{dept}'s CSV has no {n}: {header:?}"))
        };
        let (child, alloc, busy, eff, idle) = (
            col("child"),
            col("gpu_hours_allocated"),
            col("gpu_hours_busy"),
            col("efficiency_percent"),
            col("idle_card_hours"),
        );
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            if f[0] == "total" {
                continue;
            }
            let total = &by_team[f[child]];
            let same = |csv: &str, api: &Value| {
                assert_eq!(
                    Value::String(csv.to_string()),
                    *api,
                    "{}'s CSV against the API: {line} / {total}",
                    f[child]
                )
            };
            same(f[alloc], &total["gpuHoursAllocated"]);
            same(f[busy], &total["gpuHoursBusy"]);
            same(f[idle], &total["idleCardHours"]);
            let permille = total["efficiencyPermille"]
                .as_i64()
                .map(|p| format!("{}.{}", p / 10, p % 10))
                .unwrap_or_default();
            assert_eq!(f[eff], permille, "{}'s efficiency: {line}", f[child]);
            in_csv += 1;
        }
    }
    assert_eq!(in_csv, by_team.len(), "every team in its department's CSV");
    // The quota pages' totals: the API's figures, in the page's words.
    let mut paged = 0;
    let sampled = |n: &&String| {
        !n.starts_with("team-") || n.ends_with("-00") || n.ends_with("-03") || n.ends_with("-07")
    };
    for name in names.iter().filter(sampled) {
        let api = get(format!("/api/v1/quotas/{name}/efficiency?range=24h")).await;
        let page = admin.get(&format!("/quotas/{name}?range=24h")).await;
        assert_eq!(page.status, StatusCode::OK, "{name}");
        let shown = efficiency_totals(&page.body);
        let t = &api["total"];
        let hours = |v: &Value| {
            format!(
                "{} card-hours",
                quota::readable::grouped(v.as_str().unwrap().parse().unwrap())
            )
        };
        let expect: BTreeMap<String, String> = [
            ("Allocated", hours(&t["gpuHoursAllocated"])),
            ("Busy", hours(&t["gpuHoursBusy"])),
            (
                "Efficiency",
                t["efficiency"].as_str().unwrap_or("unknown").to_string(),
            ),
            ("Idle", hours(&t["idleCardHours"])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(shown, expect, "{name}'s page against the API");
        paged += 1;
    }
    assert!(paged > 150, "{paged} quota pages compared");

    // The alert emails. A sample, since every alert of the forest mailed
    // would be hundreds: olga, with an address, owns dept-01, so she hears
    // of its subtree's alerts (45 quotas). She and the rules below come
    // after the clock stopped three hours on, so each email is written at
    // the moment the APIs are read: a sweep then opens, on dept-01 and its
    // teams, usage alerts on their GPUs from 10 %, on their budgets from
    // 1 % (dept-01's: its subtree's spending) and run-outs within a year.
    let olga = sql
        .create_user("olga", "not-a-login", false, t0)
        .await
        .unwrap();
    sql.set_user_email(olga.id, Some("olga@example.com"))
        .await
        .unwrap();
    sql.set_binding(olga.id, "dept-01", bizrq::authz::Role::Owner, t0)
        .await
        .unwrap();
    let watched: Vec<String> = names
        .iter()
        .filter(|n| *n == "dept-01" || n.starts_with("team-01-"))
        .cloned()
        .collect();
    for name in &watched {
        for rule in [
            bizrq::alerts::Rule {
                warn_percent: 10,
                ..bizrq::alerts::Rule::default_for(GPU)
            },
            bizrq::alerts::Rule {
                warn_percent: 1,
                forecast_horizon_hours: Some(365 * 24),
                ..bizrq::alerts::Rule::default_for(CASH)
            },
        ] {
            sql.set_alert_rule(name, &rule).await.unwrap();
        }
    }
    bizrq::alert_engine::evaluate_now(&running.service, &sql, "http://bizrq.test").await;
    // Every email queued is delivered (the sender polls every 5 s).
    let queued = sql.outbox().await.unwrap().len();
    assert!(queued > 0, "emails to olga");
    let mut texts = Vec::new();
    for _ in 0..600 {
        texts = crate::mail::received(mail.path());
        if texts.len() >= queued {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(texts.len(), queued, "every email delivered");
    let mut mailed = Agreed::default();
    for m in &texts {
        assert_eq!(
            m["rcpt_tos"],
            serde_json::json!(["olga@example.com"]),
            "{m}"
        );
        let text = m["text"].as_str().unwrap().replace("\r\n", "\n");
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("Quota: http://bizrq.test/quotas/"));
        assert!(
            name.is_some_and(|n| watched.iter().any(|w| w == n)),
            "{text}"
        );
        mailed += email_agrees(&s, &text, &cfg).await.unwrap();
    }
    eprintln!("{} emails: {mailed:?} figures compared", texts.len());
    assert!(
        mailed.in_use > 0 && mailed.spent > 0 && mailed.run_outs > 0,
        "in use, spent and run-out figures compared in {} emails: {mailed:?}",
        texts.len()
    );
    sql.close().await;
}

/// One reading of the three hours after `t0` for every team: its pod
/// holding the cards its Deployment was admitted with, busy in steps of
/// 20 %, every seventh team unmeasured; measured by the controller's
/// pure reading.
async fn seeded_real_usage(
    service: &Service,
    teams: &[(usize, usize)],
    t0: i64,
) -> (
    quota::real_usage::measure::Window,
    quota::real_usage::reading::Measured,
) {
    use quota::real_usage::answer::{Answer, PodName, Point};
    use quota::real_usage::measure::{Held, Window};
    use quota::real_usage::template::Metric;
    const NANO: i128 = quota::quantity::NANO;
    let window = Window {
        from_ms: t0,
        to_ms: t0 + 3 * HOUR_MS,
        step_ms: 15 * 60_000,
    };
    let mut held = Vec::new();
    let mut busy = Answer {
        pods: BTreeMap::new(),
        rejected: Default::default(),
        series: 0,
    };
    for &(d, t) in teams {
        let quota = team(d, t);
        let cards = replicas(d, t) as i128;
        // Each team's pod in a namespace of its own: a reading keys
        // workloads by reference (the forest's Deployments all share
        // `nlp/train`, which a cluster could not hold in 2,000 quotas).
        let name = PodName {
            namespace: quota.clone(),
            pod: format!("train-{quota}"),
        };
        held.push((
            format!("uid-{quota}"),
            Held {
                name: name.clone(),
                workload: format!("apps/Deployment/{quota}/train"),
                quota: quota.clone(),
                cards: cards * NANO,
                model: Some("A100".into()),
                cpu_request: cards * 8 * NANO,
                memory_request: cards * (64 << 30) * NANO,
                qos: quota::usage::QosClass::Guaranteed,
                start_ms: t0,
                end_ms: None,
            },
        ));
        if (d + t) % 7 == 0 {
            continue;
        }
        let percent = ((d * 3 + t) % 6) as i128 * 20;
        let grid = window.grid();
        let points = (0..window.steps())
            .map(|i| Point {
                at_ms: grid.first_ms + i * grid.step_ms,
                nanos: cards * NANO * percent / 100,
            })
            .collect();
        busy.pods.insert(name, points);
        busy.series += 1;
    }
    let quotas = service.list().await.unwrap();
    let by_name: std::collections::HashMap<&str, &Quota> =
        quotas.iter().map(|q| (q.name(), q)).collect();
    let answers = BTreeMap::from([(Metric::GpuBusy, busy)]);
    let (measured, _) = quota::real_usage::reading::measure_window(
        &window,
        &held,
        &answers,
        &by_name,
        Default::default(),
    );
    (window, measured)
}

/// `bizrq_gpu_card_seconds` by (quota, figure), from the metrics' text.
fn card_seconds_of(text: &str) -> BTreeMap<(String, String), f64> {
    let label = |line: &str, name: &str| {
        let at = line.find(&format!("{name}=\""))? + name.len() + 2;
        Some(line[at..].split('"').next()?.to_string())
    };
    text.lines()
        .filter(|l| l.starts_with("bizrq_gpu_card_seconds"))
        .filter_map(|l| {
            let v: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some(((label(l, "quota")?, label(l, "figure")?), v))
        })
        .collect()
}

/// The quota page's "Allocated against used" totals, label → figure as
/// a person reads it (`734.4 card-hours`, `10.6 %`).
fn efficiency_totals(page: &str) -> BTreeMap<String, String> {
    let text = |html: &str| {
        let mut out = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => out.push(c),
                _ => {}
            }
        }
        out.replace('\u{a0}', " ").trim().to_string()
    };
    let Some(at) = page.find("class=\"efficiency-total\"") else {
        return BTreeMap::new();
    };
    let dl = &page[at..];
    let dl = &dl[..dl.find("</dl>").unwrap_or(dl.len())];
    dl.split("<dt>")
        .skip(1)
        .map(|part| {
            let (label, rest) = part.split_once("</dt>").unwrap_or((part, ""));
            let dd = rest.split_once('>').map_or("", |(_, r)| r);
            let dd = dd.split("</dd>").next().unwrap_or("");
            (text(label), text(dd))
        })
        .collect()
}

/// Whether `name` is below `root` in `quotas`.
fn under(name: &str, root: &str, quotas: &BTreeMap<String, Quota>) -> bool {
    let mut at = name;
    for _ in 0..16 {
        match quotas.get(at).map(|q| q.spec.parent.as_str()) {
            Some(p) if p == root => return true,
            Some(p) if !p.is_empty() => at = p,
            _ => return false,
        }
    }
    false
}
