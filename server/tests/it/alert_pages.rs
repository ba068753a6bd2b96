//! More open alerts than a page holds (docs/portal.md "Sorting
//! `/alerts`"): 130 quotas over their warning line, paged through `/alerts`
//! (100 a page, then `open_from`) and `GET /api/v1/alerts` (`limit`,
//! `before`). Every alert is seen once and none twice on each; a page's
//! bulk acknowledge quiets exactly that page's alerts; and a page's weight
//! grows with the rows it shows, not with the alerts open.

use crate::common::*;
use quota::workload::PodSet;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const N: usize = 130;

fn cards(n: i64) -> Vec<PodSet> {
    vec![PodSet {
        name: "main".into(),
        count: n,
        per_pod: resources(&[(GPU, "1")]),
        qos: None,
    }]
}

/// The open alerts' ids a `/alerts` page lists (each open row's snooze
/// form names its alert), in order.
fn page_ids(html: &str) -> Vec<i64> {
    html.split(r#"id="snooze-"#)
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].parse().unwrap())
        .collect()
}

/// The API's open alerts, `limit` a page: each page's ids.
async fn api_pages(s: &Server, limit: usize) -> Vec<Vec<i64>> {
    let mut pages = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let path = match before {
            None => format!("/api/v1/alerts?state=open&limit={limit}"),
            Some(b) => format!("/api/v1/alerts?state=open&limit={limit}&before={b}"),
        };
        let (st, v) = s.api(Method::GET, &path, None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let ids: Vec<i64> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_i64().unwrap())
            .collect();
        pages.push(ids);
        match v["next"].as_i64() {
            Some(n) => before = Some(n),
            None => return pages,
        }
        assert!(pages.len() <= N, "the pages end");
    }
}

fn distinct(pages: &[Vec<i64>]) -> BTreeSet<i64> {
    let all: Vec<i64> = pages.iter().flatten().copied().collect();
    let set: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(set.len(), all.len(), "an alert seen twice: {pages:?}");
    set
}

async fn more_than_a_page_of_open_alerts(url: &str) {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let s = Server::in_process(&running);
    for i in 0..N {
        let name = format!("q{i:03}");
        s.create_quota(&name, "", json!({GPU: "10"})).await;
        // 9 of 10 cards: a warning, not critical.
        running
            .service
            .charge(bizrq::service::ChargeRequest::new(
                &name,
                &format!("batch/Job/{name}/w"),
                cards(9),
                "u",
            ))
            .await
            .unwrap();
    }
    let opened = poll_until(600, Duration::from_millis(100), || async {
        let pages = api_pages(&s, 1000).await;
        (pages[0].len() == N).then_some(pages)
    })
    .await
    .expect("130 warnings open");
    let all = distinct(&opened);

    // The API, 50 a page: 50, 50, 30; every alert once.
    let pages = api_pages(&s, 50).await;
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        [50, 50, 30],
        "{pages:?}"
    );
    assert_eq!(distinct(&pages), all);
    for p in pages.windows(2) {
        assert!(p[0].last() > p[1].first(), "newest first: {pages:?}");
    }

    // /alerts: the worst 100, a link to the other 30, and they.
    let admin = Browser::admin(&s).await;
    let first = admin.get("/alerts").await;
    assert_eq!(first.status, StatusCode::OK);
    let one = page_ids(&first.body);
    assert_eq!(one.len(), 100, "a page holds 100");
    assert!(first.body.contains("open_from=100"), "a next page");
    let second = admin.get("/alerts?open_from=100").await;
    assert_eq!(second.status, StatusCode::OK);
    let two = page_ids(&second.body);
    assert_eq!(two.len(), 30);
    assert!(!second.body.contains("open_from=200"), "no third page");
    assert_eq!(distinct(&[one.clone(), two.clone()]), all);
    // Past the end: an empty page, no error.
    let past = admin.get("/alerts?open_from=1000").await;
    assert_eq!(past.status, StatusCode::OK);
    assert!(page_ids(&past.body).is_empty());

    // Linear: the bytes a row adds are the same from 1 row to 30 and from
    // 30 to 100 (within a quarter); a page's weight follows its rows.
    let single = admin.get("/alerts?quota=q000").await.body;
    assert_eq!(page_ids(&single).len(), 1);
    let per_row_low = (second.body.len() as f64 - single.len() as f64) / 29.0;
    let per_row_high = (first.body.len() as f64 - second.body.len() as f64) / 70.0;
    assert!(
        per_row_low > 0.0 && (per_row_high / per_row_low - 1.0).abs() < 0.25,
        "bytes a row: {per_row_low:.0} (1→30 rows), {per_row_high:.0} (30→100 rows)"
    );

    // Acknowledge the first page in bulk: exactly its 100 are quiet.
    let mut fields: Vec<(&str, String)> = one.iter().map(|id| ("id", id.to_string())).collect();
    fields.push(("action", "ack".into()));
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = admin.post("/alerts/quiet", &fields).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let back = admin.get("/alerts").await.body;
    assert!(back.contains("100 alerts acknowledged"), "{back}");
    let (st, v) = s
        .api(Method::GET, "/api/v1/alerts?state=open&limit=1000", None)
        .await;
    assert_eq!(st, StatusCode::OK);
    let acked: BTreeSet<i64> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["acknowledgedBy"] == "admin")
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(acked, one.iter().copied().collect::<BTreeSet<_>>());
    assert_eq!(v["items"].as_array().unwrap().len(), N, "all still open");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_a_page_of_open_alerts_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    more_than_a_page_of_open_alerts(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_a_page_of_open_alerts_postgres() {
    more_than_a_page_of_open_alerts(&fresh_postgres().await).await;
}
