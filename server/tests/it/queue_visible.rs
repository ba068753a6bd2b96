//! What people see of a queue (docs/queueing.md §5, §7): estimated starts
//! from running work's declared run times in `status.queue`, the queue
//! endpoint and the quota page; who submitted each entry; a member's
//! overview listing the work queued in its quotas.

use crate::cluster::{used, Cluster, T0};
use crate::common::{bind, create_user, Browser};
use crate::support::{job, jobs_of};
use kube::api::{DynamicObject, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

async fn create_as(c: &Cluster, user: &str, o: &DynamicObject) {
    jobs_of(c, user, "ml")
        .create(&PostParams::default(), o)
        .await
        .unwrap();
}

fn entry<'a>(q: &'a Value, name: &str) -> &'a Value {
    q["status"]["queue"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|e| e["workloadRef"] == format!("batch/Job/ml/{name}"))
        })
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_work_shows_its_estimated_start_and_who_submitted_it() {
    let c = Cluster::start().await;
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": "4"}, "queueing": "Queue"}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    // Running: 2 CPUs for at most 1 hour, 2 CPUs with no declared end.
    create_as(&c, "alice", &job("timed").cpu("2").deadline(3600).dynamic()).await;
    create_as(&c, "alice", &job("open").cpu("2").dynamic()).await;
    c.until("ml", "both charged", |q| used(q, "requests.cpu") == "4")
        .await;
    // Queued: 2 CPUs fit once `timed` ends; 4 need `open` gone too.
    c.set_clock(T0 + 60_000);
    create_as(
        &c,
        "bob@example.com",
        &job("soon").cpu("2").deadline(1800).dynamic(),
    )
    .await;
    c.set_clock(T0 + 120_000);
    create_as(&c, "carol", &job("later").cpu("4").dynamic()).await;
    let q = c
        .until("ml", "estimates computed", |q| {
            entry(q, "soon")["estimatedStart"].is_string() && entry(q, "later")["position"] == 2
        })
        .await;
    // `timed` was admitted at T0 with a 1-hour deadline.
    assert_eq!(
        entry(&q, "soon")["estimatedStart"],
        "2026-11-21T11:00:00.000Z",
        "{q}"
    );
    assert!(
        entry(&q, "later")["estimatedStart"].is_null(),
        "no guess: `open` declares no end"
    );
    assert_eq!(entry(&q, "soon")["submittedBy"], "bob@example.com");
    assert_eq!(entry(&q, "later")["submittedBy"], "carol");

    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/queue", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["items"][0]["estimatedStart"], "2026-11-21T11:00:00.000Z");
    assert_eq!(
        v["items"][0]["estimate"],
        "starts by about 2026-11-21 11:00 UTC"
    );
    assert_eq!(
        v["items"][1]["estimate"],
        "no estimate: running work declares no deadline, or has outlived it"
    );

    let admin = Browser::admin(&c.server).await;
    let page = admin.get("/quotas/ml").await;
    assert_eq!(page.status, StatusCode::OK);
    for want in [
        "starts by about 2026-11-21 11:00 UTC",
        "no estimate: running work declares no deadline, or has outlived it",
    ] {
        assert!(page.body.contains(want), "{want} not on the quota page");
    }

    // The overview of a member of ml lists the work queued in it, with
    // who submitted it (portal accounts are not Kubernetes users).
    create_user(&admin, "mia", "mia-password-0123456").await;
    create_user(&admin, "olaf", "olaf-password-0123456").await;
    bind(&admin, "mia", "ml", "member").await;
    let mia = Browser::logged_in(&c.server, "mia", "mia-password-0123456").await;
    let page = mia.get("/").await;
    assert_eq!(page.status, StatusCode::OK);
    let html = &page.body;
    let at = html
        .find("Queued in your quotas (2)")
        .unwrap_or_else(|| panic!("no queued section: {html}"));
    let section = &html[at..];
    let section = &section[..section.find("</section>").unwrap()];
    for want in [
        "batch/Job/ml/soon",
        "bob@example.com",
        "batch/Job/ml/later",
        "carol",
        "starts by about 2026-11-21 11:00 UTC",
        "href=\"/quotas/ml#queue\"",
    ] {
        assert!(section.contains(want), "{want} not in {section}");
    }
    assert!(
        section.find("batch/Job/ml/soon") < section.find("batch/Job/ml/later"),
        "in queue order"
    );
    // Someone without a role on ml sees none of it.
    let olaf = Browser::logged_in(&c.server, "olaf", "olaf-password-0123456").await;
    let page = olaf.get("/").await;
    assert!(!page.body.contains("Queued in your quotas"));
    assert!(!page.body.contains("batch/Job/ml/soon"));
}
