//! Issue 31's proof on a large forest: one truth on every screen. About
//! 2,000 quotas (a root, 44 departments, 44 teams each) with real
//! admissions through the webhook (GPUs, A100s, CPU, memory, pods; some
//! teams borrowing beyond hard) and a GPU budget burning on every team;
//! then every figure — in use, allocated, unallocated, free now,
//! borrowable now, lent, borrowed, spent, the run-out — is read from the
//! JSON API, the tree's CSV, quota pages, the tree page, the overview and
//! the alerts, and must be the same wherever it appears; and a report's
//! total is the budgets' spending, at the root, a department and a team.
//! On a stopped clock, three hours after the work was admitted.

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
            svc.create_quota(&team(d, t), spec(&dept, 8, max), Persist::Here, "", false)
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

/// One quota's figures agree wherever they appear: each key's hard, in
/// use, allocated, allocated idle, unallocated, lent and borrowed in the
/// usage API (`usage`) and the tree's CSV (`csv`); hard, in use,
/// allocated, free now, borrowable now and self used on its page (the
/// keys table's exact figures); and each budget of the budgets API
/// (`budgets`): its subtree's spending and carve-outs in the CSV, its
/// spending in the keys table, its left in every "… card-hours left" of
/// the page and in the tree's cell (`tree`, the `/tree` page with the
/// quota's row shown), its run-out in one set of words on the page (and
/// at a parent, every left said to be its own work's). Returns how many
/// figures it compared.
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
            let bare = page.matches("card-hours left").count();
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
        compared += 4;
    }
    compared
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
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);

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
    let mut runs_out: BTreeMap<String, String> = BTreeMap::new();
    let (mut borrowing, mut compared) = (0, 0);
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
            for budget in b["budgets"].as_array().unwrap() {
                let words = budget["runway"].as_str().unwrap_or_default();
                if words.starts_with("runs out in ") {
                    runs_out.insert(name.to_string(), words.to_string());
                }
            }
            usage.insert(name.clone(), u);
        }
    }
    assert!(borrowing > 0, "some teams borrow beyond hard");
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
    }
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
