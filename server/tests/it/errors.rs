//! One table from a service error to an HTTP status (docs/errors.md): the
//! JSON API, the portal's pages and the webhook's verdicts answer the same
//! refusal with the same code.

use crate::common::*;
use axum::response::IntoResponse;
use bizrq::edge::ApiError;
use bizrq::portal::PageError;
use bizrq::service::ServiceError;
use bizrq::webhook::{review_json, Verdict};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const GPU: &str = "requests.nvidia.com/gpu";

/// ai (16 GPUs) ── nlp (12): 4 left in ai.
async fn tree() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota("ai", "", json!({GPU: "16", "pods": "100"}))
        .await;
    s.create_quota("nlp", "ai", json!({GPU: "12", "pods": "50"}))
        .await;
    (s, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_denial_is_403_on_every_edge() {
    let (s, _dir) = tree().await;
    let r = s
        .review(
            "/validate/workloads",
            &review(
                "deployment-create.json",
                "uid-big",
                Some(deployment("big", "nlp", 4, 4)),
                None,
            ),
        )
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 403, "{r}");
    assert_eq!(r["status"]["reason"], "Forbidden", "{r}");

    let ask = json!({"from": null, "to": "nlp", "amounts": {GPU: "10"}, "reason": "more"});
    let (st, v) = s.api(Method::POST, "/api/v1/transfers", Some(ask)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["error"]["reason"], "QuotaExceeded", "{v}");

    let admin = Browser::logged_in(&s, "admin", ADMIN_PASSWORD).await;
    admin.get("/transfers").await;
    let p = admin
        .post(
            "/transfers",
            &[
                ("from", ""),
                ("to", "nlp"),
                ("key", GPU),
                ("amount", "10"),
                ("reason", "more"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(
        p.body.contains(
            "GPUs: 10 asked, 4 left of 16 in ai: ask an admin for more, or lower it to 4"
        ),
        "{}",
        p.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_rule_is_422_on_every_edge() {
    let (s, _dir) = tree().await;
    let mut rv = fixture("quota-create.json");
    rv["request"]["name"] = "cv".into();
    rv["request"]["object"]["metadata"]["name"] = "cv".into();
    rv["request"]["object"]["spec"] = json!({"parent": "ai", "hard": {GPU: "8", "pods": "1"}});
    let r = s.review("/validate/quotas", &rv).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 422, "{r}");
    assert_eq!(r["status"]["reason"], "Invalid", "{r}");

    let child = json!({"metadata": {"name": "cv"}, "spec": {"parent": "ai", "hard": {GPU: "8", "pods": "1"}}});
    let (st, v) = s.api(Method::POST, "/api/v1/quotas", Some(child)).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["reason"], "TreeRule", "{v}");

    let admin = Browser::logged_in(&s, "admin", ADMIN_PASSWORD).await;
    admin.get("/quotas/ai/children/new").await;
    let p = admin
        .post(
            "/quotas/ai/children/new",
            &[
                ("name", "cv"),
                ("hard:requests.nvidia.com/gpu", "8"),
                ("hard:pods", "1"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", p.body);
    // The page says it in words, and what to do; the API keeps raw keys.
    assert!(
        p.body.contains(
            "cv does not fit: GPUs: 8 asked, 4 left of 16 in ai: ask an admin for more, or lower it to 4"
        ),
        "{}",
        p.body
    );
}

/// Every service error, through each edge's own error type: the same
/// status everywhere, Retry-After where the table says to wait, and no
/// internal detail in any answer.
#[test]
fn the_edges_share_one_table() {
    let errors = || {
        vec![
            ServiceError::NotFound("bizrq x not found".into()),
            ServiceError::AlreadyExists("bizrq x already exists".into()),
            ServiceError::Conflict("bizrq x was changed".into()),
            ServiceError::BadRequest("bad".into()),
            ServiceError::Contention("x".into()),
            ServiceError::Internal("secret detail".into()),
        ]
    };
    let want = [404, 409, 409, 400, 429, 500];
    for ((api, page), (e, want)) in errors()
        .into_iter()
        .map(ApiError::Service)
        .zip(errors().into_iter().map(PageError::from))
        .zip(errors().into_iter().zip(want))
    {
        assert_eq!(bizrq::edge::status_of(&e).0.as_u16(), want, "{e:?}");
        let contention = matches!(e, ServiceError::Contention(_));
        let verdict: Value =
            serde_json::from_slice(&review_json("uid", Verdict::from_error(e))).unwrap();
        let status = &verdict["response"]["status"];
        assert_eq!(status["code"], want, "{verdict}");
        for resp in [api.into_response(), page.into_response()] {
            assert_eq!(resp.status().as_u16(), want);
            assert_eq!(
                resp.headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap()),
                contention.then_some("1"),
            );
        }
        if contention {
            assert_eq!(status["reason"], "TooManyRequests", "{verdict}");
            assert_eq!(status["details"]["retryAfterSeconds"], 1, "{verdict}");
        }
        assert!(!verdict.to_string().contains("secret detail"), "{verdict}");
    }
}
