//! `serve --demo` seeds a living organisation, once, on SQLite and on
//! PostgreSQL.
use super::*;

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
