//! What waiting shows and costs: a job waiting for card-hours admitted by a
//! top-up; an alert while a job waits past the threshold; entries whose
//! object is gone pruned; the queue on the quota page and as JSON, to who may
//! see it.
use super::*;

/// A job that fits the quota but not what is left of its card-hour
/// budget waits for the budget as it would for quota, and its reason says
/// which (status.queue and the Queued Event); a top-up admits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_waits_for_card_hours_and_a_top_up_admits_it() {
    let c = Cluster::start().await;
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "queueing": "Queue",
                    "hard": {"requests.cpu": "8", "cash/requests.cpu": "10"}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    // 4 cores for at most 3 h: 12 core-hours to reserve, 10 left.
    let mut big = job("big").cpu("4").obj();
    big["spec"]["activeDeadlineSeconds"] = json!(3 * 3600);
    create(&c, &big).await.unwrap();
    assert!(
        suspended(&c, "big"),
        "fits the quota, not the budget: queued"
    );
    let want = "waits for core-hours of cash/requests.cpu: needs 12, 10 left";
    // At once without marks; after the round's fold with them.
    let q = c
        .until("ml", "big queued", |q| {
            queue_refs(q) == ["batch/Job/ml/big"]
        })
        .await;
    assert_eq!(q["status"]["queue"][0]["waiting"], "Budget", "{q}");
    assert_eq!(q["status"]["queue"][0]["reason"], want);
    assert_eq!(used(&q, "requests.cpu"), "0");
    let e = until_event_where(&c, "Queued on big", |e| {
        e["reason"] == "Queued" && e["regarding"]["name"] == "big"
    })
    .await;
    assert!(e["note"].as_str().unwrap().contains(want), "{e}");

    // The controller's rounds agree: still waiting, for the same reason.
    c.until("ml", "named by the controller", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    assert_eq!(c.fake.quota("ml")["status"]["queue"][0]["reason"], want);

    // A top-up to 20 core-hours: the next round admits it.
    let patch = json!({"spec": {"hard": {"cash/requests.cpu": "20"}}});
    crate::admission::quotas(c.kubectl("admin"))
        .patch("ml", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let q = c
        .until("ml", "big admitted", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "4"
        })
        .await;
    assert!(q["status"]["workloads"]["batch/Job/ml/big"]["uid"]
        .as_str()
        .unwrap()
        .starts_with("queue:"));
}

async fn overdue_alerts(c: &Cluster) -> Vec<Value> {
    let (s, v) = c
        .server
        .api(
            Method::GET,
            "/api/v1/alerts?quota=ml&kind=queue_overdue",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["items"].as_array().cloned().unwrap_or_default()
}

/// `queueing.alertAfterSeconds`: a workload queued longer raises an alert
/// to its quota's owners through the alert engine (kind queue_overdue,
/// one per entry), resolved when it leaves the queue. The threshold is
/// validated with the spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_queued_past_the_alert_threshold_alerts_until_it_is_admitted() {
    let c = Cluster::start().await;
    let spec = |after: u64| {
        json!({"metadata": {"name": "ml"},
            "spec": {"parent": "", "hard": {"requests.cpu": "4"},
                "queueing": {"mode": "Queue", "alertAfterSeconds": after}}})
    };
    let (s, v) = c
        .server
        .api(Method::POST, "/api/v1/quotas", Some(spec(0)))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v.to_string().contains("alertAfterSeconds is 0"), "{v}");
    let (s, v) = c
        .server
        .api(Method::POST, "/api/v1/quotas", Some(spec(3600)))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    create(&c, &job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    assert!(
        overdue_alerts(&c).await.is_empty(),
        "not waited an hour yet"
    );
    c.until_metric("bizrq_admission_queue_length{quota=\"ml\",waiting=\"Quota\"} 1")
        .await;
    c.until_metric("bizrq_admission_queue_length{quota=\"_all\",waiting=\"Quota\"} 1")
        .await;

    // Two hours later (a change of b gives the queue a round; in a
    // cluster the controller's own wake-up at the threshold does).
    c.set_clock(crate::cluster::T0 + 2 * crate::cluster::HOUR);
    let mut b = c.fake.get("batch", "jobs", "ml", "b").unwrap();
    b["metadata"]["labels"]["touched"] = json!("1");
    c.fake.put(b);
    let mut open = Vec::new();
    for _ in 0..400 {
        open = overdue_alerts(&c).await;
        if !open.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(open.len(), 1, "{open:?}");
    let a = &open[0];
    assert_eq!(a["key"], "batch/Job/ml/b");
    assert_eq!(a["level"], "warning");
    assert_eq!(a["state"], "open");
    assert_eq!(
        a["message"],
        "batch/Job/ml/b has waited 2 hours in the queue of ml, longer than its 1 hour: \
         waits for 1 × requests.cpu: 1 free, 2 needed"
    );

    // a ends, b is admitted: its alert resolves.
    jobs(&c)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| queue_refs(q).is_empty())
        .await;
    // Its wait, joined at T0 and admitted 2 h later, is in the histogram.
    c.until_metric("bizrq_admission_queue_wait_seconds_sum{quota=\"ml\"} 7200")
        .await;
    c.until_metric("bizrq_admission_queue_wait_seconds_count{quota=\"ml\"} 1")
        .await;
    c.until_metric("bizrq_admission_queue_length{quota=\"ml\",waiting=\"Quota\"} 0")
        .await;
    let mut state = Value::Null;
    for _ in 0..400 {
        let all = overdue_alerts(&c).await;
        state = all[0]["state"].clone();
        if state == "resolved" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "resolved");
    assert_eq!(overdue_alerts(&c).await.len(), 1, "fired once");
}

fn stored_entry(name: &str, uid: &str) -> Value {
    json!({"workloadRef": format!("batch/Job/ml/{name}"), "uid": uid, "priority": 0,
        "since": "2026-11-21T10:00:00.000Z",
        "podSets": [{"name": "main", "count": 1, "perPod": {"requests.cpu": "1"}}],
        "position": 9, "waiting": "Quota", "reason": "waits"})
}

/// Entries whose object is not there leave the queue: one whose object
/// the controller never saw, 2 minutes after it queued (its create was
/// refused after the mutating webhook queued it); one whose object is
/// gone; one queued under an earlier object of the name (said in an
/// Event on the object there now). A live entry stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_entries_without_their_object_are_pruned() {
    let c = queueing_cluster().await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    create(&c, &job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    // c exists now as a new object; its entry names an earlier one.
    let mut cj = job("c").cpu("1").obj();
    cj["metadata"]["uid"] = json!("uid-c-new");
    cj["spec"]["suspend"] = json!(true);
    c.fake.put(cj);
    let mut q = c.fake.quota("ml");
    let queue = q["status"]["queue"].as_array_mut().unwrap();
    queue.push(stored_entry("ghost", ""));
    queue.push(stored_entry("lost", "uid-lost"));
    queue.push(stored_entry("c", "uid-c-old"));
    c.fake.put(q);
    let q = c
        .until("ml", "gone and replaced pruned", |q| {
            queue_refs(q) == ["batch/Job/ml/b", "batch/Job/ml/ghost"]
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "3");
    until_event_where(&c, "QueueEntryRemoved on c", |e| {
        e["reason"] == "QueueEntryRemoved" && e["regarding"]["name"] == "c"
    })
    .await;

    // Within its grace the never-seen entry stays; past it, it goes.
    c.set_clock(crate::cluster::T0 + 119_000);
    let mut b = c.fake.get("batch", "jobs", "ml", "b").unwrap();
    b["metadata"]["labels"]["touched"] = json!("1");
    c.fake.put(b.clone());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        queue_refs(&c.fake.quota("ml")),
        ["batch/Job/ml/b", "batch/Job/ml/ghost"]
    );
    c.set_clock(crate::cluster::T0 + 121_000);
    b["metadata"]["labels"]["touched"] = json!("2");
    c.fake.put(b);
    c.until("ml", "ghost pruned", |q| {
        queue_refs(q) == ["batch/Job/ml/b"]
    })
    .await;
}

/// The queue on the quota's page (position, workload, priority, needs,
/// reason, queued since) and as JSON at GET /api/v1/quotas/{name}/queue,
/// both seen by whoever may see the quota, and by no one else (404, as
/// GET /api/v1/quotas/{name}).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_shown_on_the_quota_page_and_as_json_to_who_may_see_it() {
    use crate::common::{bind, create_user, Browser};
    let c = queueing_cluster().await;
    create_class(&c, "urgent", 1000, false).await;
    create(&c, &job("a").cpu("3").obj()).await.unwrap();
    create(&c, &with_class(job("b").cpu("2").obj(), "urgent"))
        .await
        .unwrap();
    c.until("ml", "b named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
    c.set_clock(crate::cluster::T0 + 3 * crate::cluster::HOUR);

    let admin = Browser::admin(&c.server).await;
    let page = admin.get("/quotas/ml").await;
    assert_eq!(page.status, StatusCode::OK);
    let html = &page.body;
    let table = &html[html.find(r#"<table class="queue">"#).expect(html)..];
    let table = &table[..table.find("</table>").unwrap()];
    for want in [
        "Queue (1)",
        "batch/Job/ml/b",
        "1,000 (urgent)",
        "2 CPU cores",
        "waits for 1 × CPU cores: 1 free, 2 needed",
        "3 hours ago",
        "2026-11-21 10:00 UTC",
    ] {
        assert!(
            table.contains(want) || html.contains(want),
            "{want} not on the page: {table}"
        );
    }
    assert!(
        html.contains("nothing passes a workload that waits"),
        "the policy in words"
    );

    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/queue", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["length"], 1);
    assert_eq!(v["policy"]["mode"], "Queue");
    let e = &v["items"][0];
    assert_eq!(e["position"], 1);
    assert_eq!(e["workloadRef"], "batch/Job/ml/b");
    assert_eq!(e["priority"], 1000);
    assert_eq!(e["priorityClasses"], json!(["urgent"]));
    assert_eq!(e["since"], "2026-11-21T10:00:00.000Z");
    assert_eq!(e["waitedSeconds"], 3 * 3600);
    assert_eq!(e["waiting"], "Quota");
    assert_eq!(e["needs"], json!({"requests.cpu": "2"}));
    assert_eq!(e["reason"], "waits for 1 × requests.cpu: 1 free, 2 needed");

    // Visibility: as the quota itself. A member sees it; a user without a
    // role on it gets the same 404 as for the quota.
    create_user(&admin, "mia", "mia-password-0123456").await;
    create_user(&admin, "olaf", "olaf-password-0123456").await;
    bind(&admin, "mia", "ml", "member").await;
    let mia = Browser::logged_in(&c.server, "mia", "mia-password-0123456").await;
    let (s, v) = mia.api(Method::GET, "/api/v1/quotas/ml/queue", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["length"], 1);
    let olaf = Browser::logged_in(&c.server, "olaf", "olaf-password-0123456").await;
    let (s_queue, v_queue) = olaf.api(Method::GET, "/api/v1/quotas/ml/queue", None).await;
    let (s_quota, v_quota) = olaf.api(Method::GET, "/api/v1/quotas/ml", None).await;
    assert_eq!(s_queue, StatusCode::NOT_FOUND, "{v_queue}");
    assert_eq!(s_quota, StatusCode::NOT_FOUND);
    assert_eq!(v_queue, v_quota, "the same answer as for the quota");
    let (s, _) = olaf
        .api(Method::GET, "/api/v1/quotas/nope/queue", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}
