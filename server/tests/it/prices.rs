//! Prices per model end to end (docs/budgets.md §3, §9): one document, a
//! file standalone (`--price-list`, reloaded when it changes, a bad one
//! refused with the old list kept, each reload audited) and the PriceList
//! object in a cluster (refused by the shipped webhook when bad). Cash
//! accrues at the weight in force at each instant, split exactly at a
//! price change (standalone from the charge ledger, in a cluster by the
//! controller from the pods); a reservation assumes the highest price over
//! its run; the API, the /prices page and the Budgets panel show prices and
//! budgets in the configured currency. Time is the service's clock, so
//! every amount is exact.

use crate::common::*;
use crate::support::{admit_job, job};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const T0: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
const HOUR: i64 = 3_600_000;
/// One card-hour at face value, in acc (docs/budgets.md §0).
const CARD_HOUR: i128 = 3_600_000_000_000_000_000_000;
/// One card (nano-units).
const CARD: i128 = 1_000_000_000;

/// The price list: A100 at 1 and other GPUs at 1 from a day before T0;
/// from T0 + 1 h + 1 ms A100 at 2.5 and other GPUs at 0.5; with `later`,
/// a third version from T0 + 3 h with A100 at 4.
fn document(later: bool) -> String {
    let mut versions = vec![
        json!({"effectiveFrom": "2026-11-20T10:00:00Z",
               "weights": {"requests.nvidia.com/gpu": {"A100": 1.0, "*": 1}}}),
        json!({"effectiveFrom": "2026-11-21T11:00:00.001Z",
               "weights": {"requests.nvidia.com/gpu": {"A100": 2.5, "H100": 3, "*": 0.5}}}),
    ];
    if later {
        versions.push(json!({"effectiveFrom": "2026-11-21T13:00:00Z",
            "weights": {"requests.nvidia.com/gpu": {"A100": 4, "*": 0.5}}}));
    }
    let doc = json!({"apiVersion": "bizrq.io/v1", "kind": "PriceList",
        "metadata": {"name": "default"},
        "spec": {"currency": {"unit": "EUR", "perCardHour": 2}, "versions": versions}});
    // YAML is what people write; JSON is YAML too.
    serde_yaml_ng::to_string(&doc).unwrap()
}

fn accrued(q: &Value) -> i128 {
    q["status"]["cashAccrued"][CASH]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap()
}

async fn prices(s: &Server) -> Value {
    let (st, v) = s.api(Method::GET, "/api/v1/prices", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

/// The versions of `GET /api/v1/prices` without their state (which moves
/// with the clock).
fn weights(p: &Value) -> Vec<(Value, Value)> {
    p["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["effectiveFrom"].clone(), v["weights"].clone()))
        .collect()
}

async fn until_versions(s: &Server, n: usize) -> Value {
    poll_until(100, Duration::from_millis(100), || async {
        let v = prices(s).await;
        (v["versions"].as_array().map_or(0, Vec::len) == n).then_some(v)
    })
    .await
    .unwrap_or_else(|| panic!("the price list never had {n} versions"))
}

/// The whole standalone story on one database.
async fn standalone_story(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prices.yaml");
    std::fs::write(&file, document(false)).unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    args.price_list = Some(file.clone());
    args.price_list_poll_seconds = 1;
    let (clock, c) = test_clock(T0);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);

    // Any authenticated caller reads the list; nobody else.
    let (st, _) = s.api_with(Method::GET, "/api/v1/prices", None, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let p = prices(&s).await;
    assert!(p["source"].as_str().unwrap().starts_with("file "), "{p}");
    assert_eq!(p["currency"], json!({"unit": "EUR", "perCardHour": "2"}));
    assert_eq!(
        p["versions"][0]["effectiveFrom"],
        "2026-11-21T11:00:00.001Z"
    );
    assert_eq!(p["versions"][0]["state"], "announced");
    assert_eq!(p["versions"][1]["state"], "in force");
    assert_eq!(
        p["versions"][0]["weights"]["nvidia.com/gpu"],
        json!({"A100": "2.5", "H100": "3", "*": "0.5"})
    );

    s.create_quota(
        "team",
        "",
        json!({"requests.nvidia.com/gpu": "16", CASH: "1000"}),
    )
    .await;
    // a: 4 A100 from T0; b: 1 card of no model from T0 + 30 min.
    admit_job(
        &s,
        "a",
        None,
        &job("a").quota("team").cards(4).model("A100").obj(),
    )
    .await;
    clock.store(T0 + HOUR / 2, Ordering::SeqCst);
    admit_job(&s, "b", None, &job("b").quota("team").cards(1).obj()).await;
    // Two hours on, a write (c's admission) accrues the window since.
    clock.store(T0 + 2 * HOUR, Ordering::SeqCst);
    admit_job(&s, "c", None, &job("c").quota("team").cards(1).obj()).await;
    let q = s.quota("team").await;
    // Per mille: a at 1 until the change (1 h + 1 ms), then 2.5; b at 1
    // for 30 min + 1 ms, then 0.5. Split to the millisecond, no rounding.
    let a = 4 * CARD * ((HOUR as i128 + 1) * 1000 + (HOUR as i128 - 1) * 2500);
    let b = CARD * ((HOUR as i128 / 2 + 1) * 1000 + (HOUR as i128 - 1) * 500);
    assert_eq!(accrued(&q), a + b, "{q}");

    // A bad document is refused; the list in force stays (and accrual
    // with it), and nothing is audited.
    std::fs::write(&file, document(false).replace("2.5", "5000")).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(weights(&prices(&s).await), weights(&p));
    std::fs::write(&file, "spec: {versions: [{effectiveFrom: tomorrow}]}\n").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(weights(&prices(&s).await), weights(&p));

    // A good one takes effect, and the change is audited before/after.
    std::fs::write(&file, document(true)).unwrap();
    let p3 = until_versions(&s, 3).await;
    assert_eq!(p3["versions"][0]["weights"]["nvidia.com/gpu"]["A100"], "4");
    let admin = Browser::admin(&s).await;
    let audit = admin.get("/audit?action=prices.reload").await;
    assert!(audit.body.contains("prices.reload"), "{}", audit.body);
    assert!(
        audit.body.contains("2026-11-21T13:00:00.000Z"),
        "the after side"
    );
    assert_eq!(
        audit.body.matches("<code>prices.reload</code>").count(),
        1,
        "one reload took effect: {}",
        audit.body
    );

    // A reservation at T0 + 2 h for 4 h assumes the highest A100 price
    // in force over [T0 + 2 h, T0 + 6 h): 4, announced for T0 + 3 h.
    admit_job(
        &s,
        "d",
        None,
        &job("d")
            .quota("team")
            .cards(1)
            .model("A100")
            .deadline(4 * 3600)
            .obj(),
    )
    .await;
    let q = s.quota("team").await;
    let reserved: i128 = q["status"]["reservations"][CASH]["batch/Job/ml/d"]["reserved"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(reserved, 16 * CARD_HOUR, "1 card × 4 h × 4: {q}");

    // Budgets in the currency: the API and the quota page.
    let (st, v) = s
        .api(Method::GET, "/api/v1/quotas/team/budgets", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["budgets"][0]["money"]["unit"], "EUR", "{v}");
    assert_eq!(
        v["budgets"][0]["money"]["budget"], "2000",
        "1000 card-hours × 2 EUR: {v}"
    );
    let page = admin.get("/quotas/team").await;
    assert!(page.body.contains("2,000 EUR in all"), "{}", page.body);
    assert!(page.body.contains("href=\"/prices\""));
    let page = admin.get("/prices").await;
    assert_eq!(page.status, StatusCode::OK);
    for s in [
        "A100",
        "H100",
        "others",
        "<td class=\"num\">8 EUR</td>",
        "in force",
        "announced",
        "QoS multipliers",
    ] {
        assert!(page.body.contains(s), "{s} on /prices: {}", page.body);
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    standalone_story(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_postgres() {
    standalone_story(&fresh_postgres().await).await;
}

/// A bad file stops the start with what is wrong; a price list file in
/// cluster mode is refused (the object is the price list there).
#[tokio::test]
async fn a_bad_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prices.yaml");
    std::fs::write(&file, document(false).replace("2.5", "-2.5")).unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.price_list = Some(file);
    let err = bizrq::start_with(&args, None, None)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("prices.yaml") && err.contains("weight"),
        "{err}"
    );
}

/// Cluster mode: the PriceList object, refused at the API server by the
/// shipped webhook when bad; the controller's accrual from the pods splits
/// exactly at the price change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_the_object_is_checked_and_accrual_splits_at_a_change() {
    use crate::cluster::{pod, Cluster};
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let c = Cluster::start().await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bizrq.io", "v1", "PriceList"),
        "pricelists",
    );
    let lists: Api<DynamicObject> = Api::all_with(c.kubectl("admin"), &ar);
    let create = |v: Value| {
        let lists = lists.clone();
        async move {
            let o: DynamicObject = serde_json::from_value(v).unwrap();
            lists
                .create(&PostParams::default(), &o)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    let doc = |weights: Value, name: &str| {
        json!({"apiVersion": "bizrq.io/v1", "kind": "PriceList", "metadata": {"name": name},
            "spec": {"versions": [
                {"effectiveFrom": "2026-11-20T10:00:00Z", "weights": {"requests.nvidia.com/gpu": {"*": 1}}},
                {"effectiveFrom": "2026-11-21T11:00:00.001Z", "weights": weights}]}})
    };
    // Refused by the webhook: a weight out of bounds, a bad model, a name
    // bizrq would never read.
    let err = create(doc(
        json!({"requests.nvidia.com/gpu": {"*": 5000}}),
        "default",
    ))
    .await
    .unwrap_err();
    assert!(
        err.contains("admission webhook \"prices.bizrq.io\" denied the request")
            && err.contains("above the largest accepted, 1000"),
        "{err}"
    );
    let err = create(doc(
        json!({"requests.nvidia.com/gpu": {"A 100": 1}}),
        "default",
    ))
    .await
    .unwrap_err();
    assert!(err.contains("not a model name"), "{err}");
    // What the CRD's schema cannot see: the order of the versions.
    let mut backwards = doc(json!({"requests.nvidia.com/gpu": {"*": 3}}), "default");
    backwards["spec"]["versions"][1]["effectiveFrom"] = json!("2026-01-01T00:00:00Z");
    let err = create(backwards).await.unwrap_err();
    assert!(
        err.contains(
            "bizrq: price list: price versions must take effect in strictly increasing order: \
             2026-01-01T00:00:00.000Z is not after 2026-11-20T10:00:00.000Z"
        ),
        "{err}"
    );
    let err = create(doc(json!({"requests.nvidia.com/gpu": {"*": 3}}), "cheap"))
        .await
        .unwrap_err();
    assert!(err.contains("named 'default'"), "{err}");
    assert!(c.fake.list("bizrq.io", "pricelists").is_empty());
    let p = prices(&c.server).await;
    assert!(p["versions"].as_array().unwrap().is_empty(), "{p}");

    // The good one is stored and followed by the replica.
    create(doc(json!({"requests.nvidia.com/gpu": {"*": 3}}), "default"))
        .await
        .unwrap();
    let p = until_versions(&c.server, 2).await;
    assert!(
        p["source"]
            .as_str()
            .unwrap()
            .starts_with("PriceList default"),
        "{p}"
    );
    let reviewed = c
        .fake
        .reviews()
        .iter()
        .filter(|r| r["webhook"] == "prices.bizrq.io")
        .count();
    assert_eq!(reviewed, 5, "every create was reviewed");

    // A Job of 4 cards, its pod running from T0; two hours on, the
    // controller accrues [T0, T0 + 2 h): 1 h + 1 ms at 1, the rest at 3.
    let jobs = c.cash_team_watching_jobs().await;
    let j: DynamicObject = serde_json::from_value(job("a").quota("team").cards(4).obj()).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    // Its pod runs since T0, and the controller has recorded the run (pod
    // and Job both seen; the pod alone raced the Job's event) before two
    // hours pass (a reconcile at the later time that had not seen it yet
    // could write the window without it, under load).
    c.fake
        .put(pod("ml", "a-1", "Job", "a", 4, "2026-11-21T10:00:00Z"));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.set_clock(T0 + 2 * HOUR);
    c.touch("team", 1);
    let expect = 4 * CARD * ((HOUR as i128 + 1) * 1000 + (HOUR as i128 - 1) * 3000);
    let q = c
        .until("team", "accrued at both prices", |q| accrued(q) != 0)
        .await;
    assert_eq!(accrued(&q), expect, "{q}");
}

/// SIGHUP reads the file at once (polling here is once a day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prices.yaml");
    std::fs::write(&file, document(false)).unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.price_list = Some(file.clone());
    args.price_list_poll_seconds = 86_400;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let s = Server::in_process(&running);
    assert_eq!(prices(&s).await["versions"].as_array().unwrap().len(), 2);
    // The handler is installed by the watcher's task as it starts, and its
    // first read of the file comes then: the file changes only after it
    // (a loaded machine started the task after a change made at once, and
    // its first read already saw the new list).
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(&file, document(true)).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(prices(&s).await["versions"].as_array().unwrap().len(), 2);
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    until_versions(&s, 3).await;
    running.shutdown().await;
}
