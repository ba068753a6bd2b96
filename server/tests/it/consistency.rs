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
        quota::cash::Prices::default(),
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
    let csv = admin.get("/tree.csv").await.body;
    let mut by_csv: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<String> = line
            .split(',')
            .map(|x| x.trim_matches('"').to_string())
            .collect();
        by_csv.insert((f[0].clone(), f[2].clone()), f);
    }
    assert_eq!(
        by_csv
            .keys()
            .map(|(q, _)| q)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        made,
        "every quota in the CSV"
    );

    // Every quota: the API's figures per key are the CSV's.
    let mut usage: BTreeMap<String, Value> = BTreeMap::new();
    let names: Vec<String> = std::iter::once("org".to_string())
        .chain((0..DEPTS).map(|d| format!("dept-{d:02}")))
        .chain(teams.iter().map(|&(d, t)| team(d, t)))
        .collect();
    let mut borrowing = 0;
    for name in &names {
        let v = get(format!("/api/v1/quotas/{name}/usage")).await;
        for k in v["keys"].as_array().unwrap() {
            let key = k["key"].as_str().unwrap().to_string();
            let row = by_csv
                .get(&(name.clone(), key.clone()))
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
                if key.starts_with("cash/") && field != "hard" {
                    continue; // amounts of a budget: in card-hours, below
                }
                assert_eq!(
                    nanos(&k[field]),
                    csv_n(i),
                    "{name} {key} {field}: API {} vs CSV {}",
                    k[field],
                    row[i]
                );
            }
            if nanos(&k["borrowed"]).unwrap_or(0) > 0 {
                borrowing += 1;
            }
        }
        usage.insert(name.clone(), v);
    }
    assert!(borrowing > 0, "some teams borrow beyond hard");

    // A sample of quota pages (the root, every department, every 20th
    // team and every borrower of the first departments): the keys table's
    // exact figures are the API's, and each budget's run-out words are
    // the budgets API's.
    let sample: Vec<&String> = names
        .iter()
        .enumerate()
        .filter(|(i, n)| {
            *i <= DEPTS
                || i % 20 == 0
                || (n.starts_with("team-0") && {
                    let (d, t) = (&n[5..7], &n[8..10]);
                    (d.parse::<usize>().unwrap() + t.parse::<usize>().unwrap()) % 5 == 0
                })
        })
        .map(|(_, n)| n)
        .collect();
    let mut runs_out: BTreeMap<String, String> = BTreeMap::new();
    for name in &sample {
        let page = admin.get(&format!("/quotas/{name}")).await;
        assert_eq!(page.status, StatusCode::OK);
        let page = page.body;
        for k in usage[*name]["keys"].as_array().unwrap() {
            let key = k["key"].as_str().unwrap();
            if key.starts_with("cash/") {
                continue;
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
                let shown = page_figure(&page, key, label);
                // The page leaves a zero allocation blank at a leaf.
                let same = api == shown || (shown.is_none() && api == Some(0));
                assert!(same, "{name} {key} {label}: API {api:?}, page {shown:?}");
            }
        }
        let b = get(format!("/api/v1/quotas/{name}/budgets")).await;
        for budget in b["budgets"].as_array().unwrap() {
            let words = budget["runway"].as_str().unwrap_or_default();
            if words.starts_with("runs out in ") {
                assert!(page.contains(words), "{name}'s page says {words}");
                runs_out.insert(name.to_string(), words.to_string());
            }
        }
    }
    assert!(!runs_out.is_empty(), "budgets run out within the sample");

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
