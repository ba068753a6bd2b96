//! `serve --demo`: a sample organisation seeded through the service layer
//! on an empty database, and left alone on a database with quotas.

use crate::common::*;
use bizrq::demo::{Outcome, HISTORY_MS, ROOT};
use bizrq::store::history::HOUR_MS;
use bizrq::store::sql::SqlStore;
use bizrq::store::transfers::{TransferFilter, TransferStatus};
use quota::resources;
use reqwest::StatusCode;

const PASSWORD: &str = "demo-password-for-tests";

fn demo_args(url: &str) -> bizrq::config::ServeArgs {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.demo = true;
    args.demo_password = Some(PASSWORD.into());
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.alert_sweep_seconds = 1;
    args
}

async fn seeds_a_living_organisation_once(url: &str) {
    let started = std::time::Instant::now();
    // A stopped clock at the wall's time: the report read below counts
    // the budgets' spending up to its now, which the statuses seeded
    // hold (on a moving clock the budgets spend on between the reads).
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (_clock, c) = test_clock(wall);
    let running = bizrq::start_with(&demo_args(url), None, Some(c))
        .await
        .unwrap();
    let Some(Outcome::Seeded(seeded)) = running.demo.clone() else {
        panic!("an empty database is seeded, got {:?}", running.demo);
    };
    eprintln!("demo seeded in {:?}: {seeded:?}", started.elapsed());
    let now = running.service.now();

    // The tree: root → 3 departments → 10 teams, every rule holding.
    let all = running.service.list().await.unwrap();
    assert_eq!(all.len(), 14);
    // nlp queues, and its queue is recorded as a round states it: in
    // order, one waiting for quota with an estimated start, one for its
    // turn, one for card-hours (none); nothing that would fit is left in.
    let nlp = all.iter().find(|q| q.name() == "nlp").unwrap();
    assert!(nlp.spec.queueing.queues());
    assert_eq!(seeded.queued, 3);
    let waits: Vec<(u32, String)> = nlp
        .status
        .queue
        .iter()
        .map(|e| (e.position, format!("{:?}", e.waiting)))
        .collect();
    assert_eq!(
        waits,
        [
            (1, "Quota".into()),
            (2, "Turn".into()),
            (3, "Budget".into())
        ]
    );
    assert!(nlp.status.queue[0].estimated_start.is_some());
    assert!(nlp.status.queue[2].estimated_start.is_none());
    assert!(nlp.status.queue[0]
        .reason
        .contains("requests.nvidia.com/gpu.A100"));
    assert_eq!(
        nlp.status.queue[0].work.submitted_by.as_deref(),
        Some("dana@acme.example")
    );
    assert_eq!(seeded.quotas, 14);
    let root = all.iter().find(|q| q.name() == ROOT).unwrap();
    assert!(root.spec.parent.is_empty());
    for q in &all {
        let children: Vec<_> = all.iter().filter(|c| c.spec.parent == q.name()).collect();
        for key in q.spec.hard.keys() {
            let carved = children.iter().fold(quota::Quantity::ZERO, |acc, c| {
                acc.saturating_add(resources::get(&c.spec.hard, key))
            });
            assert_eq!(
                resources::get(&q.status.used, key),
                resources::get(&q.status.self_used, key).saturating_add(carved),
                "{}: used == selfUsed + Σ children's hard on {key}",
                q.name()
            );
            if quota::keys::cash_target(key).is_none() {
                assert!(
                    resources::get(&q.status.used, key) <= resources::get(&q.spec.hard, key),
                    "{} within hard on {key}",
                    q.name()
                );
            }
            for c in &children {
                assert!(c.spec.hard.contains_key(key), "{} has {key}", c.name());
            }
        }
    }
    let nlp = all.iter().find(|q| q.name() == "nlp").unwrap();
    let a100 = "requests.nvidia.com/gpu.A100";
    let (used, hard) = (
        resources::get(&nlp.status.used, a100).nanos(),
        resources::get(&nlp.spec.hard, a100).nanos(),
    );
    assert!(used * 100 > hard * 80, "nlp is over 80 % of its A100s");
    assert!(!nlp.spec.max.is_empty(), "nlp may borrow");

    // Four weeks of history, ending at today's status.
    let sql = SqlStore::connect(url).await.unwrap();
    let samples = sql.samples("nlp", 0, i64::MAX).await.unwrap();
    let (first, last) = (samples.first().unwrap(), samples.last().unwrap());
    assert!(last.at_ms - first.at_ms >= HISTORY_MS - HOUR_MS, "28 days");
    assert!(samples.len() >= 28 * 24, "hourly: {}", samples.len());
    let cash = "cash/requests.nvidia.com/gpu";
    let fresh = running.service.get("nlp").await.unwrap().quota;
    assert_eq!(
        resources::get(&last.used, cash),
        resources::get(&fresh.status.used, cash)
    );
    assert!(resources::get(&first.used, cash) < resources::get(&last.used, cash));
    let points: Vec<quota::forecast::Sample> = samples
        .iter()
        .map(|s| quota::forecast::Sample {
            at_ms: s.at_ms,
            hard: s.hard.clone(),
            used: s.used.clone(),
            self_used: s.self_used.clone(),
        })
        .collect();
    let forecast =
        quota::forecast::forecast(&points, cash, now, quota::forecast::FORECAST_WINDOW_MS);
    let days = forecast.days_left.expect("nlp burns card-hours");
    assert!(
        days > 2.0 && days <= 10.0,
        "nlp runs out within ten days: {days}"
    );

    // The history is in the ledger: each quota's ledger adds up to what
    // its budget says it spent, to the acc, and a report over the history
    // by child at the root totals every quota's spending; the spending
    // is the submitting user's.
    let reasons = [
        quota::object::budgets::Reason::Accrual,
        quota::object::budgets::Reason::Refund,
    ];
    let mut all_spent = 0i128;
    for q in running.service.list().await.unwrap() {
        let spent = quota::budget::from_cash_accrued(q.status.accrued(cash));
        let ledger = sql
            .ledger_sum(q.name(), cash, &reasons, i64::MIN)
            .await
            .unwrap();
        assert_eq!(
            ledger,
            spent,
            "{}: the ledger is what the budget spent",
            q.name()
        );
        all_spent += spent;
    }
    assert!(all_spent > 0);
    let api = Server::in_process(&running);
    let from = &quota::time::format_rfc3339(now - HISTORY_MS - 2 * HOUR_MS * 24)[..10];
    let (st, r) = api
        .api(
            reqwest::Method::GET,
            &format!("/api/v1/reports?from={from}&subtree={ROOT}&key={cash}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    assert_eq!(r["by"], "child", "{r}");
    let total: i128 = r["total"].as_str().unwrap().parse().unwrap();
    assert_eq!(total, all_spent, "{r}");
    let (st, r) = api
        .api(
            reqwest::Method::GET,
            &format!("/api/v1/reports?from={from}&by=user"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let users: Vec<&str> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["group"].as_str().unwrap())
        .collect();
    assert!(users.contains(&"member-nlp"), "{r}");
    assert!(!users.iter().any(|u| u.contains("unknown")), "{r}");

    // Budget alerts at the root and the departments follow what their
    // subtrees spent, never what they carved out for their teams: after
    // a sweep, none of them has a budget alert (nlp, burning fast, may).
    let alerts = || async {
        let (st, v) = api
            .api(reqwest::Method::GET, "/api/v1/alerts?limit=500", None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v["items"].as_array().cloned().unwrap_or_default()
    };
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        if !alerts().await.is_empty() {
            break;
        }
    }
    // Writes are evaluated as they happen; the sweep (every second here)
    // covers every quota: read again after a few.
    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    let items = alerts().await;
    assert!(!items.is_empty(), "the sweep opens nlp's alerts");
    for a in &items {
        let parent =
            [ROOT, "research", "platform", "product"].contains(&a["quota"].as_str().unwrap_or(""));
        // Any key the alert covers, not only the one its title names.
        let budget = a["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .chain([&a["key"]])
            .any(|k| k.as_str().unwrap_or("").starts_with("cash/"));
        assert!(
            !(parent && budget && a["kind"] == "threshold"),
            "a false budget alert at a parent: {a}"
        );
    }

    // One run-out for nlp's budget: the API, its forecast alert, the
    // budgets box, the forecast line and the chart under it on the quota
    // page, and the overview's "needs attention" all say the same words.
    let (st, v) = api
        .api(reqwest::Method::GET, "/api/v1/quotas/nlp/budgets", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let words = v["budgets"][0]["runway"].as_str().unwrap().to_string();
    let day = &v["budgets"][0]["runsOutAt"].as_str().unwrap()[..10];
    assert!(
        words.starts_with("runs out in ") && words.ends_with(&format!("({day})")),
        "{v}"
    );
    let forecast_alert = items
        .iter()
        .find(|a| a["quota"] == "nlp" && a["kind"] == "cash_forecast")
        .unwrap_or_else(|| panic!("nlp's budget runs out within 14 days: {items:?}"));
    // Worded when it opened, moments ago: the same day, and the same
    // words unless a tenth of a day ticked over since.
    assert!(
        forecast_alert["message"]
            .as_str()
            .unwrap()
            .ends_with(&format!("({day})")),
        "the alert names the API's day ({words}): {forecast_alert}"
    );
    let admin = Browser::admin(&api).await;
    let page = admin.get("/quotas/nlp").await.body;
    assert!(
        page.matches(words.as_str()).count() >= 3,
        "the budgets box, the forecast and the chart say {words}: {page}"
    );
    assert!(
        !page.contains("runs out in")
            || page.matches("runs out in").count() == page.matches(words.as_str()).count(),
        "no other run-out on the page than {words}"
    );
    let home = admin.get("/").await.body;
    assert!(
        home.contains(&format!("nlp's budget {words}")),
        "needs attention says {words}: {home}"
    );

    // The budgets box and its API give a department's subtree spending,
    // the figure its budget alerts read: its teams' spending, not the
    // card-hours it carved out for them.
    // (Each team's spending as its selfUsed holds it: to the nano-unit.)
    // The API reads its copies as of its own `now` (the teams keep
    // burning), so it lies between the teams' spending just before and
    // just after it.
    let teams = running.service.list().await.unwrap();
    let teams_spent = |at: i64| -> i128 {
        let w = running.service.working(at);
        teams
            .iter()
            .filter(|q| q.spec.parent == "research")
            .map(|q| {
                let acc = quota::budget::from_cash_accrued(w.copy(q).status.accrued(cash));
                quota::budget::from_quantity(quota::budget::to_quantity(acc))
            })
            .sum()
    };
    let before = running.service.now();
    let (st, v) = api
        .api(
            reqwest::Method::GET,
            "/api/v1/quotas/research/budgets",
            None,
        )
        .await;
    let after = running.service.now();
    assert_eq!(st, StatusCode::OK, "{v}");
    let b = &v["budgets"][0];
    let subtree: quota::Quantity = b["subtreeSpent"].as_str().unwrap().parse().unwrap();
    let subtree = quota::budget::from_quantity(subtree);
    assert!(
        teams_spent(before) <= subtree && subtree <= teams_spent(after),
        "research's subtree spent what its teams spent ({} … {}): {v}",
        teams_spent(before),
        teams_spent(after)
    );
    assert_ne!(b["subtreeSpent"], b["carvedOut"], "{v}");

    // One pending transfer between sibling teams.
    let pending = running
        .transfers
        .list(&TransferFilter {
            statuses: vec![TransferStatus::Requested],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].from_quota.as_deref(), Some("speech"));
    assert_eq!(pending[0].to_quota, "vision");

    // The demo users log in.
    let server = Server::in_process(&running);
    for user in ["owner-research", "member-nlp"] {
        let page = Browser::new(&server).login(user, PASSWORD).await;
        assert_eq!(
            page.status,
            StatusCode::SEE_OTHER,
            "{user} logs in: {}",
            page.body
        );
    }
    let users = sql.users().await.unwrap().len();
    running.shutdown().await;

    // Again: nothing changes.
    let again = bizrq::start_with(&demo_args(url), None, None)
        .await
        .unwrap();
    assert_eq!(again.demo, Some(Outcome::AlreadyPopulated(14)));
    let specs = |qs: &[quota::Quota]| {
        qs.iter()
            .map(|q| (q.name().to_string(), q.spec.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(specs(&again.service.list().await.unwrap()), specs(&all));
    assert_eq!(sql.users().await.unwrap().len(), users);
    assert_eq!(
        again
            .transfers
            .list(&TransferFilter::default())
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        sql.samples("nlp", 0, now).await.unwrap().len(),
        samples.len()
    );
    again.shutdown().await;
    sql.close().await;
}

#[tokio::test]
async fn demo_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    seeds_a_living_organisation_once(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn demo_on_postgres() {
    seeds_a_living_organisation_once(&fresh_postgres().await).await;
}

/// Hours after seeding with nothing written, nlp's stored quota lags
/// behind its budget: every figure of a request is still read from one
/// working copy at one `now` (docs/portal.md "One truth on every
/// screen"), so its quota page's budgets box, forecast line, chart
/// sentence and queue reason, its charts page, the tree, its member's
/// overview and the API say one "left".
async fn nlp_says_one_left_hours_later(url: &str) {
    let start = quota::time::parse_rfc3339("2026-11-22T04:00:00Z").unwrap();
    let (clock, c) = test_clock(start);
    let running = bizrq::start_with(&demo_args(url), None, Some(c))
        .await
        .unwrap();
    clock.store(start + 3 * HOUR_MS, std::sync::atomic::Ordering::SeqCst);
    let api = Server::in_process(&running);
    let (st, v) = api
        .api(reqwest::Method::GET, "/api/v1/quotas/nlp/budgets", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let left: quota::Quantity = v["budgets"][0]["left"].as_str().unwrap().parse().unwrap();
    let left = quota::readable::grouped(left);
    let stored = running.service.get("nlp").await.unwrap().quota;
    let stored_left = quota::readable::grouped(quota::budget::periods::left(
        &stored.spec,
        &stored.status,
        "cash/requests.nvidia.com/gpu",
    ));
    assert_ne!(
        left, stored_left,
        "three hours of burn since the stored copy"
    );
    let one = |what: &str, html: &str| {
        let found = crate::one_copy::lefts(html);
        assert!(!found.is_empty(), "{what} shows what is left: {html}");
        assert!(
            found.iter().all(|l| *l == left),
            "{what} says {found:?}, the budgets API {left}"
        );
    };
    let admin = Browser::admin(&api).await;
    let page = admin.get("/quotas/nlp").await.body;
    one("nlp's page", &page);
    assert!(
        page.contains(&format!("needs 8,640, {left} left")),
        "the queue's budget reason says {left}: {page}"
    );
    let charts = admin
        .get("/quotas/nlp/charts?key=cash/requests.nvidia.com/gpu")
        .await
        .body;
    one("nlp's charts page", &charts);
    let tree = admin.get("/tree?q=nlp").await.body;
    assert!(
        crate::one_copy::tree_lefts(&tree).contains(&left),
        "the tree says {:?}, the API {left}",
        crate::one_copy::tree_lefts(&tree)
    );
    let (st, q) = api
        .api(reqwest::Method::GET, "/api/v1/quotas/nlp/queue", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{q}");
    let reasons: Vec<&str> = q["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.ends_with(&format!("{left} left"))),
        "the queue API's budget reason says {left}: {reasons:?}"
    );
    // The overview's live parts, which its island draws over the page
    // every few seconds: the attention items and the queued work (whose
    // budget reason stayed as of the page's load before) say one figure.
    let (st, live) = api
        .api(reqwest::Method::GET, "/api/v1/live/overview", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{live}");
    one(
        "the live overview's attention",
        live["attention"].as_str().unwrap(),
    );
    let queued = live["queued"].as_str().unwrap();
    assert!(
        queued.contains("Queued in your quotas")
            && queued.contains(&format!("needs 8,640, {left} left")),
        "the live overview's queued work says {left}: {queued}"
    );
    let member = Browser::logged_in(&api, "member-nlp", PASSWORD).await;
    one("member-nlp's overview", &member.get("/").await.body);
    running.shutdown().await;
}

#[tokio::test]
async fn one_left_hours_later_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    nlp_says_one_left_hours_later(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn one_left_hours_later_on_postgres() {
    nlp_says_one_left_hours_later(&fresh_postgres().await).await;
}

/// Issue 31's proof on the demo, every quota: on a stopped clock (so no
/// figure moves between two reads), each key's in use, allocated, free
/// now, borrowable now and self used are the same on the quota page, in
/// the usage API and in the tree's CSV; each budget's spent, left and
/// run-out are the same in the budgets API, on the quota page, in the
/// CSV, on the tree and on the overview.
async fn every_demo_figure_agrees_everywhere(url: &str) {
    let start = quota::time::parse_rfc3339("2026-11-22T04:00:00Z").unwrap();
    let (_clock, c) = test_clock(start);
    let running = bizrq::start_with(&demo_args(url), None, Some(c))
        .await
        .unwrap();
    let api = Server::in_process(&running);
    let get = |path: String| {
        let api = &api;
        async move {
            let (st, v) = api.api(reqwest::Method::GET, &path, None).await;
            assert_eq!(st, StatusCode::OK, "{path}: {v}");
            v
        }
    };
    let admin = Browser::admin(&api).await;
    let by_csv = crate::consistency::csv_rows(&admin.get("/tree.csv").await.body);
    let names: Vec<String> = running
        .service
        .list()
        .await
        .unwrap()
        .iter()
        .map(|q| q.name().to_string())
        .collect();
    assert_eq!(names.len(), 14);
    let home = admin.get("/").await.body;
    let tree = admin.get("/tree").await.body;
    let (mut compared, mut budgets) = (0, 0);
    for name in &names {
        let usage = get(format!("/api/v1/quotas/{name}/usage")).await;
        let page = admin.get(&format!("/quotas/{name}")).await;
        assert_eq!(page.status, StatusCode::OK, "{name}");
        let b = get(format!("/api/v1/quotas/{name}/budgets")).await;
        compared += crate::consistency::quota_agrees(name, &page.body, &usage, &b, &by_csv, &tree);
        budgets += b["budgets"].as_array().unwrap().len();
    }
    // The overview's "needs attention": each run-out it names is the
    // budgets API's, word for word.
    let mut named = 0;
    for (name, words) in crate::consistency::overview_run_outs(&home) {
        let b = get(format!("/api/v1/quotas/{name}/budgets")).await;
        assert_eq!(
            b["budgets"][0]["runway"],
            words.as_str(),
            "the overview on {name}"
        );
        named += 1;
    }
    assert!(named > 0, "the overview names nlp's run-out");
    assert!(compared > 14 * 14, "{compared}");
    assert!(budgets >= 14, "{budgets}");
    running.shutdown().await;
}

#[tokio::test]
async fn every_demo_figure_agrees_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    every_demo_figure_agrees_everywhere(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn every_demo_figure_agrees_on_postgres() {
    every_demo_figure_agrees_everywhere(&fresh_postgres().await).await;
}

/// The alert emails in issue 31's proof: the demo on a stopped clock,
/// mailing its owners through a real SMTP server (aiosmtpd), and every
/// figure a usage or forecast alert's email states — in use (a GPU key),
/// spent (a budget), each key's hard, a budget's left and its run-out
/// words and day — equals the usage and budgets APIs' for that quota, at
/// the email's precision (the amounts as `quota::readable` writes them,
/// which the pages use too; a budget's left to the nano-unit). A rule
/// watches research's budget from 1 %, so a parent's spent figure (its
/// subtree's spending, never its carve-outs) is mailed and compared too.
async fn alert_emails_state_the_apis_figures(url: &str) {
    use crate::consistency::nanos;
    use serde_json::Value;
    let start = quota::time::parse_rfc3339("2026-11-22T04:00:00Z").unwrap();
    let (_clock, c) = test_clock(start);
    let mail = tempfile::tempdir().unwrap();
    let port = crate::mail::free_port();
    let _smtp = crate::mail::start_smtp(port, mail.path()).await;
    let mut args = demo_args(url);
    args.smtp_host = Some("127.0.0.1".into());
    args.smtp_port = port;
    args.smtp_security = bizrq::config::SmtpSecurity::Plain;
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    // research's budget (a parent's: its subtree's spending) is watched
    // from 1 %, so a spent figure is mailed too; before the first sweep.
    let sql = SqlStore::connect(url).await.unwrap();
    let rule = bizrq::alerts::Rule {
        warn_percent: 1,
        ..bizrq::alerts::Rule::default_for("cash/requests.nvidia.com/gpu")
    };
    sql.set_alert_rule("research", &rule).await.unwrap();
    sql.close().await;
    let cfg = running.service.keys.clone();
    let api = Server::in_process(&running);
    let get = |path: String| {
        let api = &api;
        async move {
            let (st, v) = api.api(reqwest::Method::GET, &path, None).await;
            assert_eq!(st, StatusCode::OK, "{path}: {v}");
            v
        }
    };
    // The sweep opens the alerts 5 s after the start; the senders poll
    // every 5 s. Wait for nlp's forecast email, then one more poll.
    let texts = || -> Vec<String> {
        crate::mail::received(mail.path())
            .iter()
            .map(|m| m["text"].as_str().unwrap_or("").replace("\r\n", "\n"))
            .collect()
    };
    for _ in 0..300 {
        if texts().iter().any(|t| t.contains(" runs out in ")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let texts = texts();
    let (mut in_use, mut spent, mut run_outs) = (0, 0, 0);
    for text in &texts {
        let Some(name) = text
            .lines()
            .find_map(|l| l.strip_prefix("Quota: "))
            .and_then(|l| l.rsplit('/').next())
        else {
            continue;
        };
        let title = text.lines().next().unwrap();
        let usage = get(format!("/api/v1/quotas/{name}/usage")).await;
        let budgets = get(format!("/api/v1/quotas/{name}/budgets")).await;
        // Its keys: the usage API's and its budgets'.
        let key_of = |shown: &str| -> String {
            let usage = usage["keys"].as_array().unwrap().iter();
            let budgets = budgets["budgets"].as_array().unwrap().iter();
            usage
                .chain(budgets)
                .map(|k| k["key"].as_str().unwrap().to_string())
                .find(|k| quota::keys::display_name(k, &cfg) == shown)
                .unwrap_or_else(|| panic!("{name} has a key named {shown}: {text}"))
        };
        let api_key = |key: &str| -> Value {
            usage["keys"]
                .as_array()
                .unwrap()
                .iter()
                .find(|k| k["key"] == key)
                .cloned()
                .unwrap()
        };
        let budget = |key: &str| -> Value {
            budgets["budgets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["key"] == key)
                .cloned()
                .unwrap_or_else(|| panic!("{name}'s budget {key}: {budgets}"))
        };
        let amount = |key: &str, v: &Value| {
            quota::readable::amount(key, v.as_str().unwrap().parse().unwrap())
        };
        // A usage threshold: each key's "used of hard", from the list of
        // a condition on several keys or from the title of one on a key.
        if title.contains(" reached ") {
            let mut figures: Vec<(String, String, String)> = text
                .lines()
                .filter_map(|l| l.strip_prefix("- "))
                .filter_map(|l| {
                    let (shown, figure) = l.split_once(": ")?;
                    let figure = figure.rsplit_once(" (").map_or(figure, |(f, _)| f);
                    let (used, hard) = figure.split_once(" of ")?;
                    Some((shown.to_string(), used.to_string(), hard.to_string()))
                })
                .collect();
            if figures.is_empty() {
                let (head, tail) = title.split_once(&format!(" of {name} reached ")).unwrap();
                let shown = head.rsplit("] ").next().unwrap();
                let figure = tail.split_once(": ").unwrap().1;
                let (used, hard) = figure
                    .split_once(" in use of ")
                    .or_else(|| figure.split_once(" spent of "))
                    .unwrap_or_else(|| panic!("{title}"));
                figures.push((shown.to_string(), used.to_string(), hard.to_string()));
            }
            for (shown, used, hard) in figures {
                let key = key_of(&shown);
                if key.starts_with("cash/") {
                    let b = budget(&key);
                    assert_eq!(
                        hard,
                        amount(&key, &b["budget"]),
                        "{name} {key} budget: {text}"
                    );
                    assert_eq!(
                        used,
                        amount(&key, &b["subtreeSpent"]),
                        "{name} {key} spent: the email vs the budgets API: {text}"
                    );
                    spent += 1;
                } else {
                    let k = api_key(&key);
                    assert_eq!(hard, amount(&key, &k["hard"]), "{name} {key} hard: {text}");
                    assert_eq!(
                        used,
                        amount(&key, &k["inUse"]),
                        "{name} {key} in use: the email vs the usage API: {text}"
                    );
                    in_use += 1;
                }
            }
        }
        // A budget running out: the API's words and day, and its left.
        if let Some((head, words)) = title.split_once(&format!(" of {name} runs out in ")) {
            let shown = head.rsplit("] ").next().unwrap();
            let key = key_of(shown);
            let b = budget(&key);
            let runway = b["runway"].as_str().unwrap();
            assert_eq!(
                format!("runs out in {words}"),
                runway,
                "{name} {key}: the email's run-out vs the budgets API: {text}"
            );
            let day = &b["runsOutAt"].as_str().unwrap()[..10];
            assert!(words.ends_with(&format!("({day})")), "{day}: {text}");
            if let Some(left) = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("remaining: "))
            {
                assert_eq!(
                    nanos(&Value::String(left.to_string())),
                    nanos(&b["left"]),
                    "{name} {key} left: the email vs the budgets API: {text}"
                );
            }
            run_outs += 1;
        }
    }
    eprintln!(
        "{} emails: {in_use} in use, {spent} spent, {run_outs} run-out figures compared",
        texts.len()
    );
    assert!(
        in_use > 0 && spent > 0 && run_outs > 0,
        "usage ({in_use}), spent ({spent}) and run-out ({run_outs}) figures compared in {} emails: {texts:#?}",
        texts.len()
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_emails_state_the_apis_figures_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    alert_emails_state_the_apis_figures(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_emails_state_the_apis_figures_on_postgres() {
    alert_emails_state_the_apis_figures(&fresh_postgres().await).await;
}

/// The text of the first `<p class="strip">` of a page: the quota's one
/// line, its parts joined by " · ".
fn strip_text(page: &str) -> String {
    let start = page
        .find("<p class=\"strip\">")
        .expect("a page with its one line");
    let inner = &page[start..start + page[start..].find("</p>").unwrap()];
    let mut text = String::new();
    let mut tag = false;
    for c in inner.chars() {
        match c {
            '<' => tag = true,
            '>' => tag = false,
            // The separators' no-break spaces read as spaces.
            '\u{a0}' if !tag => text.push(' '),
            c if !tag => text.push(c),
            _ => {}
        }
    }
    text
}

/// Where `what` first stands in `page` (panics when it does not).
fn at(page: &str, what: &str, name: &str) -> usize {
    page.find(what)
        .unwrap_or_else(|| panic!("{name}'s page has {what}"))
}

/// A quota page reads GPUs → budgets → queue → workloads → the rest
/// (docs/portal.md "Quota detail"): its one line right under the `<h1>`,
/// the GPU keys and budgets' table, the GPU charts then the budgets',
/// the budgets box, the queue, the bound workloads, then CPU, memory and
/// pods folded in a `<details>` (closed: no script needed to open it),
/// the children and the members. And the line says the usage API's free
/// now and borrowable now of each GPU model and the budgets API's left
/// and run-out day.
async fn quota_pages_read_gpus_then_budgets_then_queue_then_workloads(url: &str) {
    let start = quota::time::parse_rfc3339("2026-11-22T04:00:00Z").unwrap();
    let (_clock, c) = test_clock(start);
    let running = bizrq::start_with(&demo_args(url), None, Some(c))
        .await
        .unwrap();
    let api = Server::in_process(&running);
    let admin = Browser::admin(&api).await;
    let cfg = quota::KeyConfig::default();
    for name in ["nlp", "research"] {
        let page = admin.get(&format!("/quotas/{name}")).await;
        assert_eq!(page.status, StatusCode::OK, "{name}");
        let page = page.body;
        let mut order = vec![
            ("the <h1>", at(&page, "<h1", name)),
            ("the one line", at(&page, "<p class=\"strip\">", name)),
            ("the GPUs and budgets", at(&page, "id=\"keys\"", name)),
            (
                "a GPU chart",
                at(&page, "data-key=\"requests.nvidia.com/gpu", name),
            ),
            (
                "a budget chart",
                at(&page, "data-key=\"cash/requests.nvidia.com/gpu", name),
            ),
            ("the budgets box", at(&page, "id=\"budgets\"", name)),
        ];
        if name == "nlp" {
            order.push(("the queue", at(&page, "id=\"queue\"", name)));
        }
        order.extend([
            ("the bound workloads", at(&page, "id=\"workloads\"", name)),
            ("the other keys", at(&page, "id=\"other-keys\"", name)),
            ("the children", at(&page, "id=\"children\"", name)),
            ("the members", at(&page, "id=\"members\"", name)),
        ]);
        for pair in order.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "{name}: {} before {} ({order:?})",
                pair[0].0,
                pair[1].0
            );
        }
        // Nothing between the heading and the line but the flash's place.
        let h1_end = page[order[0].1..].find("</h1>").unwrap() + order[0].1;
        assert!(
            !page[h1_end..order[1].1].contains("<table"),
            "{name}: the line is right under the heading"
        );
        // CPU, memory and pods only in the fold, which starts closed.
        let fold = order.iter().find(|o| o.0 == "the other keys").unwrap().1;
        let details = page[..fold].rfind("<details").unwrap();
        let tag_end = fold + page[fold..].find('>').unwrap();
        assert!(
            !page[details..tag_end].contains(" open"),
            "{name}: the fold starts closed: {}",
            &page[details..=tag_end]
        );
        for key in ["requests.cpu", "requests.memory", "pods"] {
            let row = at(&page, &format!("<td title=\"{key}\" class=\"key\">"), name);
            assert!(row > fold, "{name}: the {key} row is in the fold");
        }
        // So are their by-model charts; the GPUs' lead.
        let by_model: Vec<(usize, bool)> = page
            .match_indices("<figcaption>")
            .map(|(i, _)| (i, page[i..].starts_with("<figcaption>GPUs by model")))
            .collect();
        assert!(
            by_model.iter().any(|(i, gpu)| *gpu && *i < fold)
                && by_model.iter().any(|(_, gpu)| !gpu)
                && by_model.iter().all(|(i, gpu)| *gpu || *i > fold),
            "{name}: the GPUs' by-model chart leads, the CPU's are in the fold: {by_model:?}"
        );
        assert!(
            page.contains(
                "<summary>Other keys: CPU cores, CPU cores (limit), memory, pods</summary>"
            ),
            "{name}: the fold names what it holds"
        );
        // The line: the APIs' figures, in words.
        let line = strip_text(&page);
        let (_, usage) = api
            .api(
                reqwest::Method::GET,
                &format!("/api/v1/quotas/{name}/usage"),
                None,
            )
            .await;
        let mut want = Vec::new();
        for k in usage["keys"].as_array().unwrap() {
            let key = k["key"].as_str().unwrap();
            let parsed = quota::keys::Key::parse(key, &cfg).unwrap();
            if parsed.model.is_none() || !cfg.is_gpu(&parsed.resource) {
                continue;
            }
            let q = |f: &str| k[f].as_str().map(|v| v.parse::<quota::Quantity>().unwrap());
            let more = q("borrowableNow")
                .filter(|b| !b.is_zero())
                .map(|b| format!(" (+{} borrowable)", quota::readable::amount(key, b)))
                .unwrap_or_default();
            want.push(format!(
                "{}: {} of {} free{more}",
                quota::keys::display_name(key, &cfg),
                quota::readable::amount(key, q("freeNow").unwrap()),
                quota::readable::amount(key, q("hard").unwrap()),
            ));
        }
        let (_, b) = api
            .api(
                reqwest::Method::GET,
                &format!("/api/v1/quotas/{name}/budgets"),
                None,
            )
            .await;
        let budget = &b["budgets"][0];
        let left = quota::readable::grouped(budget["left"].as_str().unwrap().parse().unwrap());
        assert!(
            line.contains(&format!("{left} card-hours left")),
            "{name}'s line says the budgets API's left {left}: {line}"
        );
        if let Some(day) = budget["runsOutAt"].as_str() {
            assert!(
                line.ends_with(&format!("runs out {}", &day[..10])),
                "{name}'s line says the budgets API's run-out day {day}: {line}"
            );
        }
        let gpus = line.split(" · ").take(want.len()).collect::<Vec<_>>();
        assert_eq!(
            gpus, want,
            "{name}'s line: GPU models first, as the usage API has them"
        );
    }
    running.shutdown().await;
}

#[tokio::test]
async fn quota_pages_read_gpus_then_budgets_then_queue_then_workloads_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    quota_pages_read_gpus_then_budgets_then_queue_then_workloads(&fresh_sqlite(&dir)).await;
}

/// A department's quota page on the demo stays under 200 KB of HTML
/// uncompressed (docs/portal.md "Charts": each chart drawn once, the
/// other keys' charts a link away), as does the root's.
#[tokio::test]
async fn a_departments_quota_page_weighs_under_200_kb() {
    let dir = tempfile::tempdir().unwrap();
    let running = bizrq::start_with(&demo_args(&fresh_sqlite(&dir)), None, None)
        .await
        .unwrap();
    let api = Server::in_process(&running);
    let admin = Browser::admin(&api).await;
    for name in ["acme", "research", "platform", "product"] {
        let page = admin.get(&format!("/quotas/{name}")).await;
        assert_eq!(page.status, StatusCode::OK, "{name}");
        assert!(
            page.body.len() < 200 * 1024,
            "{name}'s page weighs {} bytes",
            page.body.len()
        );
        assert!(
            page.body.contains("class=\"chart-panel\""),
            "{name} draws its charts"
        );
    }
    running.shutdown().await;
}
