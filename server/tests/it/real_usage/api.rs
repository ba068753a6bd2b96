//! Allocated against used where people read it (docs/real-usage.md):
//! `GET /api/v1/quotas/{name}/efficiency`, `GET /api/v1/idle`, the quota
//! page's section and the overview's "Idle now", each showing a caller
//! what they may see and nothing else. The figures are a reading written
//! through the store as the controller writes one (`record_reading`).

use crate::common::*;
use bizrq::store::sql::SqlStore;
use quota::real_usage::figures::{Figures, GpuFigures, UseFigures};
use quota::real_usage::idle::{IdleNow, Streak};
use quota::real_usage::reading::Row;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const H: i64 = 3_600_000;
const ALICE_PW: &str = "alice-password-1234";
const BOB_PW: &str = "bob-password-12345";

fn row(quota: &str, hour_ms: i64, workload: &str, user: &str, gpu: [i64; 4]) -> Row {
    let [allocated, measured, busy, idle] = gpu;
    Row {
        quota: quota.into(),
        hour_ms,
        workload: workload.into(),
        namespace: workload.split('/').nth(2).unwrap().into(),
        username: user.into(),
        figures: Figures {
            gpu: GpuFigures {
                allocated,
                measured,
                busy,
                idle,
            },
            cpu: UseFigures {
                requested: 4 * H,
                used: H,
            },
            memory: UseFigures::default(),
        },
    }
}

fn idle(quota: &str, workload: &str, user: &str, cards: i128, idle_ms: i64, now: i64) -> IdleNow {
    IdleNow {
        workload: workload.into(),
        quota: quota.into(),
        namespace: workload.split('/').nth(2).unwrap().into(),
        user: user.into(),
        model: Some("A100".into()),
        streak: Streak {
            since_ms: now - idle_ms,
            until_ms: now,
            cards: cards * quota::quantity::NANO,
            idle: (cards as i64) * idle_ms,
            peak_permille: 12,
        },
    }
}

async fn api(s: &Server, path: &str, token: Option<&str>) -> (StatusCode, Value) {
    s.api_with(Method::GET, path, None, token).await
}

fn names(idle: &Value) -> Vec<&str> {
    idle["idle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["workload"].as_str().unwrap())
        .collect()
}

/// ai ⊃ {nlp ⊃ nlp-a, cv}; alice owns nlp, bob is a member of cv. A
/// reading of the last two hours: nlp's train (alice) held 2 cards, half a
/// card busy, idle an hour of the two; nlp-a's sweep held one card idle;
/// cv's detect held 4 cards, 3 busy.
async fn each_caller_sees_the_real_usage_of_what_they_may_see(s: &Server) {
    for (name, parent, gpu, pods) in [
        ("ai", "", "16", "100"),
        ("nlp", "ai", "8", "40"),
        ("cv", "ai", "4", "20"),
        ("nlp-a", "nlp", "2", "10"),
    ] {
        s.create_quota(name, parent, json!({ GPU: gpu, "pods": pods }))
            .await;
    }
    let admin = Browser::admin(s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "bob", BOB_PW).await;
    bind(&admin, "alice", "nlp", "owner").await;
    bind(&admin, "bob", "cv", "member").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let bob = Browser::logged_in(s, "bob", BOB_PW).await;
    let alice_token = create_token(&alice, "alice-ci").await;
    let bob_token = create_token(&bob, "bob-ci").await;

    let store = SqlStore::connect(&s.database_url).await.unwrap();
    let now = bizrq::util::now_ms() / 1000 * 1000;
    let hour = (now - 2 * H).div_euclid(H) * H;
    let rows = [
        row(
            "nlp",
            hour,
            "batch/Job/ml/train",
            "alice",
            [2 * H, 2 * H, H / 2, H],
        ),
        row("nlp-a", hour, "batch/Job/ml/sweep", "carol", [H, H, 0, H]),
        row(
            "cv",
            hour,
            "batch/Job/vision/detect",
            "bob",
            [4 * H, 4 * H, 3 * H, 0],
        ),
    ];
    let idle_now = [
        idle("nlp", "batch/Job/ml/train", "alice", 2, 90 * 60_000, now),
        // Idle for less than showAfter (30 min by default): not shown.
        idle("nlp-a", "batch/Job/ml/sweep", "carol", 1, 10 * 60_000, now),
        idle("cv", "batch/Job/vision/detect", "bob", 4, 40 * 60_000, now),
    ];
    store
        .record_reading(now - 2 * H, now, &rows, &idle_now)
        .await
        .unwrap();

    // The API: anonymous callers are refused; a quota one may not see
    // does not exist; a bad range says what to write.
    for path in ["/api/v1/quotas/nlp/efficiency", "/api/v1/idle"] {
        assert_eq!(
            api(s, path, None).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    let (st, nlp) = api(
        s,
        "/api/v1/quotas/nlp/efficiency?range=7d",
        Some(&alice_token),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{nlp}");
    // nlp's subtree: train and sweep, 3 card-hours held, half a card-hour
    // busy of 3 measured (16.6 %), 2 card-hours idle.
    let total = &nlp["total"];
    assert_eq!(total["gpuHoursAllocated"], "3", "{nlp}");
    assert_eq!(total["gpuHoursBusy"], "0.5");
    assert_eq!(total["idleCardHours"], "2");
    assert_eq!(total["efficiencyPermille"], 166);
    assert_eq!(total["efficiency"], "16.6 %");
    let workloads: Vec<&str> = nlp["byWorkload"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(workloads.len(), 2, "{nlp}");
    assert!(
        !nlp.to_string().contains("detect"),
        "cv's work is not nlp's: {nlp}"
    );
    let children: Vec<&str> = nlp["byChild"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(children, ["(self)", "nlp-a"]);
    let submitters: Vec<&str> = nlp["bySubmitter"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(submitters.len(), 2, "{nlp}");
    assert!(submitters.contains(&"alice") && submitters.contains(&"carol"));
    assert_eq!(nlp["unknownSince"], Value::Null, "read up to now: known");
    let shown: Vec<&str> = nlp["idleNow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        shown,
        ["batch/Job/ml/train"],
        "sweep is idle for less than showAfter"
    );
    assert_eq!(nlp["idleNow"][0]["idleCardHours"], "3");

    let (st, _) = api(s, "/api/v1/quotas/cv/efficiency", Some(&alice_token)).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "alice may not see cv");
    let (st, _) = api(s, "/api/v1/quotas/nlp/efficiency", Some(&bob_token)).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "bob may not see nlp");
    let (st, cv) = api(s, "/api/v1/quotas/cv/efficiency", Some(&bob_token)).await;
    assert_eq!(st, StatusCode::OK, "{cv}");
    assert_eq!(cv["total"]["efficiency"], "75 %");
    let (st, _) = api(s, "/api/v1/quotas/ghost/efficiency", Some(TOKEN)).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, bad) = api(
        s,
        "/api/v1/quotas/nlp/efficiency?range=1w",
        Some(&alice_token),
    )
    .await;
    assert!(st.is_client_error(), "{st} {bad}");
    // The root's subtree is everyone's work, to whoever may see it.
    let (st, ai) = api(s, "/api/v1/quotas/ai/efficiency", Some(TOKEN)).await;
    assert_eq!(st, StatusCode::OK, "{ai}");
    assert_eq!(ai["total"]["gpuHoursAllocated"], "7");

    let (_, mine) = api(s, "/api/v1/idle", Some(&alice_token)).await;
    assert_eq!(names(&mine), ["batch/Job/ml/train"], "{mine}");
    assert_eq!(
        mine["idle"][0]["words"],
        "2 A100 GPUs idle for 1.5 hours: 3 card-hours"
    );
    let (_, bobs) = api(s, "/api/v1/idle", Some(&bob_token)).await;
    assert_eq!(names(&bobs), ["batch/Job/vision/detect"], "{bobs}");
    let (_, all) = api(s, "/api/v1/idle", Some(TOKEN)).await;
    assert_eq!(
        names(&all),
        ["batch/Job/ml/train", "batch/Job/vision/detect"],
        "longest idle first: {all}"
    );

    // The pages: the quota's section, and the overview's "Idle now".
    let page = alice.get("/quotas/nlp").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("Allocated against used"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("16.6\u{a0}%"),
        "a figure and its unit on one line"
    );
    assert!(page.body.contains("ml/train") && page.body.contains("ml/sweep"));
    assert!(!page.body.contains("detect"));
    let home = alice.get("/").await;
    assert!(home.body.contains("Idle now"), "{}", home.body);
    assert!(home
        .body
        .contains("2 A100 GPUs idle for 1.5 hours: 3 card-hours"));
    assert!(
        !home.body.contains("detect"),
        "cv's idle work is not alice's to see"
    );
    let home = bob.get("/").await;
    assert!(
        home.body.contains("4 A100 GPUs idle for 40 minutes"),
        "{}",
        home.body
    );
    assert!(!home.body.contains("train"));
    assert!(bob.get("/quotas/cv").await.body.contains("75\u{a0}%"));
    store.close().await;
}

on_both!(each_caller_sees_the_real_usage_of_what_they_may_see);
