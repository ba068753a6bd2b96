//! The demo's figures: nlp says one card is left hours later; every figure
//! agrees on every page and API; the alert emails state the API's figures.
use super::*;

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
/// which the pages use too; a budget's left to the nano-unit): one check,
/// `consistency::email_agrees`, which the 2,000-quota forest runs too. A rule
/// watches research's budget from 1 %, so a parent's spent figure (its
/// subtree's spending, never its carve-outs) is mailed and compared too.
async fn alert_emails_state_the_apis_figures(url: &str) {
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
    let mut agreed = crate::consistency::Agreed::default();
    for text in &texts {
        if let Some(a) = crate::consistency::email_agrees(&api, text, &cfg).await {
            agreed += a;
        }
    }
    let crate::consistency::Agreed {
        in_use,
        spent,
        run_outs,
    } = agreed;
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
