//! An update is judged as a create of the new object would be, given what
//! the old one holds (docs/budgets.md §2, "Updates"): a run time
//! lengthened after admission reserves more, or is refused in a create's
//! words; a shorter one releases what it no longer needs; one removed
//! where the budget refuses workloads without one is refused. Standalone
//! at the webhook (AdmissionReviews of UPDATE), and in cluster mode
//! through the fake API server, where `kubectl patch` and `kubectl
//! annotate --overwrite` are what change the objects, and the controller
//! suspends a Job at the end it declared.

use crate::common::*;
use crate::support::{job, jobs_of, Review, MAX_RUNTIME};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const T0: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
/// One card-hour at face value, in acc (docs/budgets.md §0).
const CARD_HOUR: i128 = 3_600_000_000_000_000_000_000;

fn denial(r: &Value) -> &str {
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 403, "{r}");
    r["status"]["message"].as_str().unwrap()
}

/// `status.reservations[CASH]` as workload → (reserved, runMs).
fn reservations(q: &Value) -> BTreeMap<String, (i128, i64)> {
    q["status"]["reservations"][CASH]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(w, r)| {
                    let reserved = r["reserved"].as_str().unwrap().parse().unwrap();
                    (w.clone(), (reserved, r["runMs"].as_i64().unwrap()))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn check(s: &Server, j: &Value) -> (bool, String) {
    let (st, v) = s.api(Method::POST, "/api/v1/check", Some(j.clone())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    (
        v["allowed"].as_bool().unwrap(),
        v["message"].as_str().unwrap().to_string(),
    )
}

/// Standalone, at the webhook: the case. A quota of 10
/// card-hours; a 4-GPU Job declaring one hour reserves 4. An UPDATE to
/// nine hours needs 36 and is refused in the words a create gets (the
/// Job's own 4 are not counted against it), the reservation unchanged;
/// the API's check of that object says the same; half an hour releases
/// 2; removing the run time is refused under `withoutRunTime: refuse`.
async fn a_lengthened_run_time_is_judged_again(url: &str) {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (_clock, c) = test_clock(T0);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota("team", "", json!({GPU: "16", CASH: "10"}))
        .await;

    let hour = job("j")
        .named_uid()
        .quota("team")
        .cards(4)
        .deadline(3600)
        .obj();
    let r = s
        .review(
            "/validate/workloads",
            &Review::create("c-1", hour.clone()).of_job().ns("ml").obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let held = reservations(&s.quota("team").await);
    assert_eq!(
        held,
        BTreeMap::from([("batch/Job/ml/j".to_string(), (4 * CARD_HOUR, 3_600_000))])
    );

    let nine = job("j")
        .named_uid()
        .quota("team")
        .cards(4)
        .deadline(32400)
        .obj();
    let said = "bizrq team: cash/requests.nvidia.com/gpu needs 36 card-hours for Job ml/j \
                (4 × nvidia.com/gpu for 9h), 10 left (10 this period, 0 spent, 0 reserved)";
    let r = s
        .review(
            "/validate/workloads",
            &Review::update("u-1", nine.clone(), hour.clone())
                .of_job()
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(denial(&r), said);
    assert_eq!(
        reservations(&s.quota("team").await),
        held,
        "refused: unchanged"
    );
    // The check of that object, under its name, is the same decision.
    assert_eq!(check(&s, &nine).await, (false, said.to_string()));
    // As a new Job, it is judged beside j's 4.
    let (ok, m) = check(
        &s,
        &job("k")
            .named_uid()
            .quota("team")
            .cards(4)
            .deadline(32400)
            .obj(),
    )
    .await;
    assert!(!ok);
    assert!(m.contains("needs 36 card-hours for Job ml/k"), "{m}");
    assert!(
        m.contains("6 left (10 this period, 0 spent, 4 reserved)"),
        "{m}"
    );

    // Two hours fit (8 of 10): reserved, counted from the Job's start.
    let two = job("j")
        .named_uid()
        .quota("team")
        .cards(4)
        .deadline(7200)
        .obj();
    let r = s
        .review(
            "/validate/workloads",
            &Review::update("u-2", two.clone(), hour.clone())
                .of_job()
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(
        reservations(&s.quota("team").await)["batch/Job/ml/j"],
        (8 * CARD_HOUR, 7_200_000)
    );
    // Half an hour: 2 held, the rest released.
    let half = job("j")
        .named_uid()
        .quota("team")
        .cards(4)
        .deadline(1800)
        .obj();
    let r = s
        .review(
            "/validate/workloads",
            &Review::update("u-3", half.clone(), two.clone())
                .of_job()
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(
        reservations(&s.quota("team").await)["batch/Job/ml/j"],
        (2 * CARD_HOUR, 1_800_000)
    );
    // The same review again (the API server retries): nothing changes.
    let before = s.quota("team").await;
    let r = s
        .review(
            "/validate/workloads",
            &Review::update("u-3", half.clone(), two.clone())
                .of_job()
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(s.quota("team").await["status"], before["status"]);

    // Under `withoutRunTime: refuse`, an update that removes it is refused.
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/team",
            Some(json!({"metadata": {"name": "team"},
                "spec": {"hard": {GPU: "16", CASH: "10"},
                    "budgets": {CASH: {"withoutRunTime": {"kind": "refuse"}}}}})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let none = job("j").named_uid().quota("team").cards(4).obj();
    let r = s
        .review(
            "/validate/workloads",
            &Review::update("u-4", none, half.clone())
                .of_job()
                .ns("ml")
                .obj(),
        )
        .await;
    assert_eq!(
        denial(&r),
        "bizrq team: cash/requests.nvidia.com/gpu admits only workloads that declare a maximum \
         run time: set spec.activeDeadlineSeconds (Job), spec.runPolicy.activeDeadlineSeconds \
         (Kubeflow) or the annotation biz.group.resource.quota/max-runtime (e.g. \"4h\") on Job ml/j"
    );
    assert_eq!(
        reservations(&s.quota("team").await)["batch/Job/ml/j"],
        (2 * CARD_HOUR, 1_800_000)
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lengthened_run_time_is_judged_again_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_lengthened_run_time_is_judged_again(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lengthened_run_time_is_judged_again_postgres() {
    a_lengthened_run_time_is_judged_again(&fresh_postgres().await).await;
}

async fn validate(s: &Server, uid: &str, object: &Value, old: Option<&Value>) -> Value {
    let r = match old {
        Some(old) => Review::update(uid, object.clone(), old.clone()),
        None => Review::create(uid, object.clone()),
    };
    s.review("/validate/workloads", &r.of_job().ns("ml").obj())
        .await
}

/// Standalone, at the webhook: an update that asks more is judged in
/// full, one that asks less is never refused. A Job declaring one hour
/// (the annotation) raised from 1 card to 16 two hours on starts its run
/// again and needs 16 card-hours, refused; a Job without a run time cut
/// from 8 cards to 4 while another's reservation holds all the budget is
/// allowed, and reserves nothing.
async fn an_update_is_refused_only_when_it_asks_more(url: &str) {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (clock, c) = test_clock(T0);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota("team", "", json!({GPU: "32", CASH: "10"}))
        .await;

    // A run that ended does not make a scale-up free.
    let one = job("d")
        .named_uid()
        .quota("team")
        .cards(1)
        .max_runtime("1h")
        .obj();
    assert_eq!(validate(&s, "c-d", &one, None).await["allowed"], true);
    clock.store(T0 + 2 * 3_600_000, std::sync::atomic::Ordering::SeqCst);
    let sixteen = job("d")
        .named_uid()
        .quota("team")
        .cards(16)
        .max_runtime("1h")
        .obj();
    let r = validate(&s, "u-d", &sixteen, Some(&one)).await;
    let m = denial(&r);
    assert!(
        m.contains("needs 16 card-hours for Job ml/d (16 × nvidia.com/gpu for 1h)"),
        "{m}"
    );

    // A decrease under a budget all reserved by another is allowed.
    s.create_quota("tight", "", json!({GPU: "32", CASH: "10"}))
        .await;
    let eight = job("w").named_uid().quota("tight").cards(8).obj();
    assert_eq!(validate(&s, "c-w", &eight, None).await["allowed"], true);
    let x = job("x")
        .named_uid()
        .quota("tight")
        .cards(1)
        .max_runtime("10h")
        .obj();
    assert_eq!(validate(&s, "c-x", &x, None).await["allowed"], true);
    let four = job("w").named_uid().quota("tight").cards(4).obj();
    let r = validate(&s, "u-w", &four, Some(&eight)).await;
    assert_eq!(r["allowed"], true, "{r}");
    let q = s.quota("tight").await;
    assert_eq!(
        reservations(&q).keys().collect::<Vec<_>>(),
        ["batch/Job/ml/x"],
        "{q}"
    );
    assert_eq!(
        q["status"]["workloads"]["batch/Job/ml/w"]["podSets"][0]["count"], 4,
        "{q}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_refused_only_when_it_asks_more_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    an_update_is_refused_only_when_it_asks_more(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_refused_only_when_it_asks_more_postgres() {
    an_update_is_refused_only_when_it_asks_more(&fresh_postgres().await).await;
}

async fn until_suspended(c: &crate::cluster::Cluster, name: &str) {
    for _ in 0..400 {
        if c.fake.get("batch", "jobs", "ml", name).unwrap()["spec"]["suspend"] == true {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "ml/{name} never suspended: {}",
        c.fake.get("batch", "jobs", "ml", name).unwrap()
    );
}

/// Cluster mode, the two cases through the fake API server and
/// the shipped webhooks: `kubectl patch` lengthening activeDeadlineSeconds
/// and `kubectl annotate --overwrite` lengthening the declared run time
/// past the budget are refused, and the Job stays as declared, suspended
/// by the controller at the end it declared; a lengthening that fits is
/// reserved, and moves the end the controller suspends at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_a_lengthened_run_time_is_judged_again() {
    use crate::cluster::Cluster;
    use kube::api::{DynamicObject, Patch, PatchParams};
    let c = Cluster::start().await;
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"}, "spec": {"hard": {GPU: "16", CASH: "10"}}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let jobs = jobs_of(&c, "alice", "ml");
    let create = |j: Value| {
        let jobs = jobs.clone();
        async move {
            let o: DynamicObject = serde_json::from_value(j).unwrap();
            jobs.create(&Default::default(), &o).await.unwrap();
        }
    };
    let patch = |name: &'static str, p: Value| {
        let jobs = jobs.clone();
        async move {
            jobs.patch(name, &PatchParams::default(), &Patch::Merge(&p))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };

    // kubectl patch job j2 --type=merge -p '{"spec":{"activeDeadlineSeconds":32400}}'
    create(job("j2").named_uid().cards(4).deadline(3600).obj()).await;
    c.until("ml", "j2 reserved", |q| reservations(q).len() == 1)
        .await;
    let err = patch("j2", json!({"spec": {"activeDeadlineSeconds": 32400}}))
        .await
        .unwrap_err();
    assert!(
        err.contains(
            "bizrq ml: cash/requests.nvidia.com/gpu needs 36 card-hours for Job ml/j2 \
             (4 × nvidia.com/gpu for 9h), 10 left (10 this period, 0 spent, 0 reserved)"
        ),
        "{err}"
    );
    let j2 = c.fake.get("batch", "jobs", "ml", "j2").unwrap();
    assert_eq!(j2["spec"]["activeDeadlineSeconds"], 3600, "{j2}");
    let q = c.fake.quota("ml");
    assert_eq!(
        reservations(&q)["batch/Job/ml/j2"],
        (4 * CARD_HOUR, 3_600_000),
        "{q}"
    );

    // A Job declaring one minute, annotated to nine hours: refused.
    create(job("short").named_uid().cards(4).max_runtime("1m").obj()).await;
    // Another declaring one minute, annotated to one hour: 4 fit in the
    // 6 left beside j2, so it is reserved, its end moved to 11:00.
    create(job("long").named_uid().cards(4).max_runtime("1m").obj()).await;
    c.until("ml", "short and long reserved", |q| {
        reservations(q).len() == 3
    })
    .await;
    let annotate = |to: &str| json!({"metadata": {"annotations": {MAX_RUNTIME: to}}});
    let err = patch("short", annotate("9h")).await.unwrap_err();
    // Beside it, j2 holds 4 and long a minute of 4 cards.
    assert!(
        err.contains(
            "bizrq ml: cash/requests.nvidia.com/gpu needs 36 card-hours for Job ml/short \
             (4 × nvidia.com/gpu for 9h), 5.93 left (10 this period, 0 spent, 4.07 reserved)"
        ),
        "{err}"
    );
    let short = c.fake.get("batch", "jobs", "ml", "short").unwrap();
    assert_eq!(
        short["metadata"]["annotations"][MAX_RUNTIME], "1m",
        "{short}"
    );
    patch("long", annotate("1h")).await.unwrap();
    let q = c
        .until("ml", "long re-reserved", |q| {
            reservations(q)
                .get("batch/Job/ml/long")
                .is_some_and(|r| r.1 == 3_600_000)
        })
        .await;
    assert_eq!(
        reservations(&q)["batch/Job/ml/long"],
        (4 * CARD_HOUR, 3_600_000),
        "{q}"
    );
    assert_eq!(
        reservations(&q)["batch/Job/ml/short"],
        (4 * CARD_HOUR / 60, 60_000),
        "{q}"
    );

    // 10:02: short is past the minute it declared and is suspended; long
    // declared an hour now, and runs on.
    c.set_clock(T0 + 2 * 60_000);
    c.touch("ml", 1);
    until_suspended(&c, "short").await;
    c.touch("ml", 2);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let long = c.fake.get("batch", "jobs", "ml", "long").unwrap();
    assert!(long["spec"]["suspend"].is_null(), "{long}");
    // At 11:00 long's hour is over too.
    c.set_clock(T0 + 3_600_000 + 60_000);
    c.touch("ml", 3);
    until_suspended(&c, "long").await;
}
