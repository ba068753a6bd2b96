//! When preemption marks and suspends: a higher-priority job preempts
//! lower-priority work after the grace (at once with a grace of zero); the
//! mark is cancelled when the waiting job goes away; equal priority, no
//! policy, a budget that would still hold the job back, or a finished job:
//! no preemption.
use super::*;

/// A job of higher priority waiting for quota marks the newest running
/// job of lower priority (only as much as it needs; a Deployment and an
/// online job of lower priority are never taken), warns its owner, and
/// after the grace period suspends it — the whole job, one PATCH through
/// the webhooks — and queues it again; the urgent job is then admitted,
/// and the preempted one is admitted again when room frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_job_preempts_lower_priority_work_after_the_grace_period() {
    let c = preempting_cluster().await;
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "web",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}});
    create(&c, &web).await;
    let mut online = job("online").cpu("1").class("batch-low").obj();
    online["metadata"]["labels"]["bizrq.io/online"] = json!("true");
    create(&c, &online).await;
    create(&c, &job("old").cpu("1").class("batch-low").obj()).await;
    c.set_clock(T0 + 1_000);
    create(&c, &job("new").pods(2).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "all charged", |q| used(q, "requests.cpu") == "5")
        .await;

    // 2 needed, 0 free: the newest low job (2) is enough; the older one,
    // the online job and the Deployment are left alone.
    create(&c, &job("urgent").pods(2).cpu("1").class("urgent").obj()).await;
    assert!(suspended(&c, "ml", "urgent"), "queued");
    let q = c.until("ml", "new marked", |q| !marks(q).is_empty()).await;
    assert_eq!(marks(&q), ["batch/Job/ml/new"], "{q}");
    let m = &q["status"]["reclaim"]["batch/Job/ml/new"];
    assert_eq!(m["origin"], "preempt");
    assert_eq!(m["action"], "suspend");
    assert_eq!(m["frees"]["requests.cpu"], "2");
    assert_eq!(m["due"], "2026-11-21T10:05:01.000Z", "{m}");
    let e = until_event(&c, "PreemptionPending", "new").await;
    assert_eq!(e["type"], "Warning");
    let note = e["note"].as_str().unwrap();
    assert!(
        note.contains("batch/Job/ml/urgent") && note.contains("300 s"),
        "{note}"
    );
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="marked"} 1"#)
        .await;
    // Nothing before the grace period, however often it runs.
    c.touch("ml", 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!suspended(&c, "ml", "new"));
    assert_eq!(patches(&c, "ml", "new"), 0);

    // Due: suspended (one merge PATCH of spec.suspend, reviewed by the
    // validating webhook with its pods as they were), queued again, and
    // the urgent job admitted in its place.
    c.set_clock(T0 + 1_000 + GRACE_MS);
    c.touch("ml", 2);
    until_suspended(&c, "ml", "new", true).await;
    assert_eq!(patches(&c, "ml", "new"), 1);
    let reviews = suspend_reviews(&c, "new");
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(reviews[0]["request"]["object"]["spec"]["parallelism"], 2);
    until_event(&c, "Preempted", "new").await;
    let q = c
        .until("ml", "urgent admitted, new queued", |q| {
            queue_refs(q) == ["batch/Job/ml/new"]
                && q["status"]["workloads"]["batch/Job/ml/urgent"]["uid"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("queue:"))
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "5", "never over hard: {q}");
    assert!(marks(&q).is_empty(), "the mark is spent: {q}");
    assert_eq!(q["status"]["queue"][0]["waiting"], "Quota");
    until_suspended(&c, "ml", "urgent", false).await;
    until_event(&c, "Admitted", "urgent").await;
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="executed"} 1"#)
        .await;
    // The Deployment, the online job and the older job were never touched.
    assert!(!c
        .fake
        .requests()
        .iter()
        .any(|r| r.starts_with("PATCH /apis/apps/v1/namespaces/ml/deployments/web")));
    assert_eq!(patches(&c, "ml", "online") + patches(&c, "ml", "old"), 0);
    // The preempted job waits behind equal or higher priority only: the
    // urgent job is not taken back (it is not of lower priority than new
    // needs), and new is admitted again when room frees.
    delete(&c, "ml", "urgent").await;
    let q = c
        .until("ml", "new admitted again", |q| queue_refs(q).is_empty())
        .await;
    assert_eq!(used(&q, "requests.cpu"), "5");
    until_suspended(&c, "ml", "new", false).await;
    until_event(&c, "Admitted", "new").await;
}

/// The pressure goes away before the mark is due (the urgent job is
/// deleted): the mark is cancelled, its owner told, and nothing is
/// suspended even once the due time passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_is_cancelled_when_the_waiting_job_goes_away() {
    let c = preempting_cluster().await;
    create(&c, &job("low").pods(5).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    c.until("ml", "low marked", |q| marks(q) == ["batch/Job/ml/low"])
        .await;
    until_event(&c, "PreemptionPending", "low").await;

    delete(&c, "ml", "urgent").await;
    let q = c
        .until("ml", "mark cancelled", |q| {
            marks(q).is_empty() && queue_refs(q).is_empty()
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "5");
    let e = until_event(&c, "PreemptionCancelled", "low").await;
    assert_eq!(e["type"], "Normal");
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="cancelled"} 1"#)
        .await;
    c.set_clock(T0 + 2 * GRACE_MS);
    c.touch("ml", 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!suspended(&c, "ml", "low"));
    assert_eq!(patches(&c, "ml", "low"), 0);
    assert!(events(&c, "Preempted", "low").is_empty());
}

/// Work of equal priority is never preempted, and a queue without the
/// policy never preempts at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_priority_or_no_policy_never_preempts() {
    let c = preempting_cluster().await;
    create_quota(
        &c,
        "plain",
        "",
        json!({"hard": {"requests.cpu": "2"}, "queueing": "Queue"}),
    )
    .await;
    create(&c, &job("peer").pods(5).cpu("1").class("urgent").obj()).await;
    create(
        &c,
        &job("low")
            .quota("plain")
            .pods(2)
            .cpu("1")
            .class("batch-low")
            .obj(),
    )
    .await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    c.until("plain", "charged", |q| used(q, "requests.cpu") == "2")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    create(
        &c,
        &job("urgent-2")
            .quota("plain")
            .cpu("1")
            .class("urgent")
            .obj(),
    )
    .await;
    c.until("ml", "queued", |q| queue_refs(q).len() == 1).await;
    c.until("plain", "queued", |q| queue_refs(q).len() == 1)
        .await;
    c.set_clock(T0 + 2 * GRACE_MS);
    c.touch("ml", 1);
    c.touch("plain", 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    for q in ["ml", "plain"] {
        assert!(marks(&c.fake.quota(q)).is_empty(), "{q}");
    }
    assert_eq!(patches(&c, "ml", "peer") + patches(&c, "ml", "low"), 0);
}

/// Preemption weighed against the budget (docs/queueing.md §6): the
/// urgent job waits for quota, but with the room made it would still wait
/// for core-hours, so nothing is taken and its reason says both; a top-up
/// that covers it lets it preempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_preemption_for_a_job_its_budget_would_still_hold_back() {
    use kube::api::{Patch, PatchParams};
    let c = Cluster::start().await;
    create_quota(
        &c,
        "ml",
        "",
        json!({"hard": {"requests.cpu": "5", "cash/requests.cpu": "10"},
            "queueing": {"mode": "Queue", "preemption": "LowerPriority"}}),
    )
    .await;
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_class(&c, "batch-low", 1).await;
    create_class(&c, "urgent", 100).await;
    // 5 cores for at most 1 h: 5 of the 10 core-hours reserved.
    let mut low = job("low").pods(5).cpu("1").class("batch-low").obj();
    low["spec"]["activeDeadlineSeconds"] = json!(3600);
    create(&c, &low).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    // 2 cores for 3 h: 6 core-hours, 5 left once room is made.
    let mut urgent = job("urgent").pods(2).cpu("1").class("urgent").obj();
    urgent["spec"]["activeDeadlineSeconds"] = json!(3 * 3600);
    create(&c, &urgent).await;
    let want = "waits for 2 × requests.cpu: 0 free, 2 needed; no lower-priority work is \
                preempted for it: with the room made, it still waits for core-hours of \
                cash/requests.cpu: needs 6, 5 left";
    let q = c
        .until("ml", "the reason says both", |q| {
            q["status"]["queue"][0]["reason"] == want
        })
        .await;
    assert_eq!(q["status"]["queue"][0]["waiting"], "Quota");
    c.touch("ml", 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(marks(&c.fake.quota("ml")).is_empty(), "nothing marked");
    assert!(events(&c, "PreemptionPending", "low").is_empty());

    // Topped up to 20: the room made would admit it, so low is marked.
    crate::admission::quotas(c.kubectl("admin"))
        .patch(
            "ml",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"cash/requests.cpu": "20"}}})),
        )
        .await
        .unwrap();
    let q = c
        .until("ml", "low marked", |q| marks(q) == ["batch/Job/ml/low"])
        .await;
    assert_eq!(
        q["status"]["queue"][0]["reason"], "waits for 2 × requests.cpu: 0 free, 2 needed",
        "{q}"
    );
}

/// The queue's preemption has a grace of its own, apart from the reclaim
/// grace of loans (300 s here): with `preemption: {policy: LowerPriority,
/// graceSeconds: 0}` the lower-priority job is suspended and queued again
/// without the clock moving at all, and the urgent job admitted in its
/// place; the Event says 0 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_grace_of_zero_suspends_at_once_whatever_the_reclaim_grace() {
    let c = preempting_cluster_of(json!({"hard": {"requests.cpu": "2"},
        "queueing": {"mode": "Queue",
            "preemption": {"policy": "LowerPriority", "graceSeconds": 0}}}))
    .await;
    let (_, q) = c.server.api(Method::GET, "/api/v1/quotas/ml", None).await;
    assert_eq!(
        q["spec"]["queueing"]["preemption"],
        json!({"policy": "LowerPriority", "graceSeconds": 0}),
        "stored in the long form: {q}"
    );
    create(&c, &job("low").pods(2).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "low charged", |q| used(q, "requests.cpu") == "2")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    assert!(suspended(&c, "ml", "urgent"), "queued");
    let e = until_event(&c, "PreemptionPending", "low").await;
    let note = e["note"].as_str().unwrap();
    assert!(note.contains("suspended in 0 s"), "{note}");
    // The clock stays at T0: nothing waits for the reclaim grace.
    until_suspended(&c, "ml", "low", true).await;
    assert_eq!(patches(&c, "ml", "low"), 1);
    until_event(&c, "Preempted", "low").await;
    let q = c
        .until("ml", "urgent admitted, low queued", |q| {
            queue_refs(q) == ["batch/Job/ml/low"]
                && used(q, "requests.cpu") == "1"
                && q["status"]["workloads"]["batch/Job/ml/urgent"].is_object()
        })
        .await;
    assert!(marks(&q).is_empty(), "the mark is spent: {q}");
    until_suspended(&c, "ml", "urgent", false).await;

    // Out of range, or without preemption, is refused naming the field.
    for (queueing, want) in [
        (
            json!({"mode": "Queue", "preemption": {"policy": "LowerPriority", "graceSeconds": 31_622_401}}),
            "queueing: preemption.graceSeconds is 31622401",
        ),
        (
            json!({"mode": "Queue", "preemption": {"policy": "Never", "graceSeconds": 5}}),
            "queueing: preemption.graceSeconds only applies with policy LowerPriority",
        ),
    ] {
        let (s, v) = c
            .server
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(json!({"metadata": {"name": "other"},
                    "spec": {"parent": "", "hard": {"requests.cpu": "2"}, "queueing": queueing}})),
            )
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v.to_string().contains(want), "{v}");
    }
}

/// A finished Job is never a victim (docs/queueing.md §6): it runs
/// nothing and its charge went when it finished, so suspending it frees
/// nothing. Taken for the newest running Job of lower priority, it was
/// held, queued, admitted with nothing to charge and released, again and
/// again, while the Job that waited stayed queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_is_never_preempted() {
    let c = preempting_cluster_of(json!({"hard": {"requests.cpu": "3"},
        "queueing": {"mode": "Queue",
            "preemption": {"policy": "LowerPriority", "graceSeconds": 0}}}))
    .await;
    create(&c, &job("low").pods(2).cpu("1").class("batch-low").obj()).await;
    create(&c, &job("done").cpu("1").class("batch-low").obj()).await;
    c.until("ml", "both charged", |q| used(q, "requests.cpu") == "3")
        .await;
    // The newest Job of lower priority finishes (not deleted): its charge goes.
    let since = c.fake.quota("ml")["status"]["workloads"]["batch/Job/ml/done"]["since"].clone();
    let mut done = c.fake.get("batch", "jobs", "ml", "done").unwrap();
    done["status"] = json!({"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": since}]});
    c.fake.put(done);
    c.until("ml", "done's charge gone", |q| {
        used(q, "requests.cpu") == "2"
    })
    .await;
    // 2 CPUs wait where 1 is free: only low, running, can make the room.
    create(&c, &job("urgent").cpu("2").class("urgent").obj()).await;
    until_suspended(&c, "ml", "low", true).await;
    c.until("ml", "urgent admitted, low queued", |q| {
        queue_refs(q) == ["batch/Job/ml/low"]
            && q["status"]["workloads"]["batch/Job/ml/urgent"].is_object()
            && used(q, "requests.cpu") == "2"
    })
    .await;
    until_suspended(&c, "ml", "urgent", false).await;
    assert_eq!(
        patches(&c, "ml", "done"),
        0,
        "the finished Job is left alone"
    );
    assert!(suspend_reviews(&c, "done").is_empty());
}
