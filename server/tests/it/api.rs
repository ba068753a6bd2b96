//! The JSON API: tree rules, auth, and bad input that gets a clear error and
//! changes nothing.

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn quota(name: &str, parent: &str, hard: Value) -> Value {
    json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota", "metadata": {"name": name}, "spec": {"parent": parent, "hard": hard}})
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn tree_rules_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    let post = |body: Value| s.api(Method::POST, "/api/v1/quotas", Some(body));

    // Auth: no token, wrong token.
    let (st, _) = s.api_with(Method::GET, "/api/v1/quotas", None, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, v) = s
        .api_with(Method::GET, "/api/v1/quotas", None, Some("wrong"))
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_eq!(v["error"]["reason"], "Unauthorized");

    let root_hard = json!({"limits.cpu": "10", "limits.cpu.A4": "4", "requests.nvidia.com/gpu": "16", "pods": "100"});
    let (st, v) = post(quota("ai", "", root_hard.clone())).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["metadata"]["resourceVersion"], "1");
    assert_eq!(v["status"]["used"]["limits.cpu"], "0");

    // Duplicate name.
    let (st, v) = post(quota("ai", "", root_hard.clone())).await;
    assert_eq!(
        (st, v["error"]["reason"].as_str()),
        (StatusCode::CONFLICT, Some("AlreadyExists"))
    );

    // Parent must exist.
    let (st, v) = post(quota("cv", "nope", root_hard.clone())).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(message(&v), "bizrq cv: parent 'nope' does not exist");

    // Child must contain every key of the parent.
    let (st, v) = post(quota(
        "cv",
        "ai",
        json!({"limits.cpu": "1", "pods": "1", "requests.nvidia.com/gpu": "1"}),
    ))
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        message(&v),
        "bizrq cv: hard must contain every key of parent ai's hard; missing limits.cpu.A4"
    );

    // Carve-outs come out of the parent's remainder.
    let child = |gpu: &str| json!({"limits.cpu": "5", "limits.cpu.A4": "2", "requests.nvidia.com/gpu": gpu, "pods": "10"});
    let (st, v) = post(quota("cv", "ai", child("10"))).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = post(quota("nlp", "ai", child("8"))).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(message(&v), "bizrq nlp does not fit in its parent: bizrq ai: requests.nvidia.com/gpu asks 8, 6 left of 16");
    assert_eq!(
        s.api(Method::GET, "/api/v1/quotas/nlp", None).await.0,
        StatusCode::NOT_FOUND,
        "a refused create stores nothing"
    );
    let (st, _) = post(quota("nlp", "ai", child("6"))).await;
    assert_eq!(st, StatusCode::CREATED);
    let ai = s.quota("ai").await;
    assert_eq!(ai["status"]["used"]["requests.nvidia.com/gpu"], "16");
    assert_eq!(ai["status"]["used"]["limits.cpu"], "10");

    // Dry run decides without writing.
    let (st, _) = s
        .api(
            Method::POST,
            "/api/v1/quotas?dryRun=All",
            Some(quota("tmp", "", json!({"pods": "1"}))),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    assert_eq!(
        s.api(Method::GET, "/api/v1/quotas/tmp", None).await.0,
        StatusCode::NOT_FOUND
    );

    // Raising a child beyond the parent's remainder fails; lowering passes
    // and returns the difference to the parent.
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(quota("cv", "ai", child("11"))),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        message(&v).contains("requests.nvidia.com/gpu asks 1, 0 left of 16"),
        "{v}"
    );
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(quota("cv", "ai", child("4"))),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(s.used("ai", "requests.nvidia.com/gpu").await, "10");

    // The parent never changes; a stale resourceVersion is a conflict.
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(quota("cv", "", child("4"))),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&v).contains("spec.parent cannot change"), "{v}");
    let mut stale = quota("cv", "ai", child("3"));
    stale["metadata"]["resourceVersion"] = "1".into();
    let (st, _) = s.api(Method::PUT, "/api/v1/quotas/cv", Some(stale)).await;
    assert_eq!(st, StatusCode::CONFLICT);
    // A GET can be edited and PUT back as is (status and metadata included).
    let mut edited = s.quota("cv").await;
    edited["spec"]["hard"]["pods"] = "9".into();
    let (st, v) = s.api(Method::PUT, "/api/v1/quotas/cv", Some(edited)).await;
    assert_eq!(st, StatusCode::OK, "{v}");

    // Lowering below used is allowed.
    let (st, _) = s.api(Method::PUT, "/api/v1/quotas/ai", Some(quota("ai", "", json!({"limits.cpu": "1", "limits.cpu.A4": "4", "requests.nvidia.com/gpu": "16", "pods": "100"})))).await;
    assert_eq!(st, StatusCode::OK);
    let ai = s.quota("ai").await;
    assert_eq!(ai["status"]["used"]["limits.cpu"], "10");
    assert_eq!(ai["status"]["hard"]["limits.cpu"], "1");

    // Adding a key to a node whose children lack it is refused.
    let (st, v) = s.api(Method::PUT, "/api/v1/quotas/ai", Some(quota("ai", "", json!({"limits.cpu": "10", "limits.cpu.A4": "4", "requests.nvidia.com/gpu": "16", "pods": "100", "requests.memory": "1Ti"})))).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message(&v).contains("cannot add requests.memory"), "{v}");

    // Only leaves can be deleted; deleting returns the carve-out.
    let (st, v) = s.api(Method::DELETE, "/api/v1/quotas/ai", None).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        message(&v),
        "bizrq ai: only leaves can be deleted; children: cv, nlp"
    );
    let (st, _) = s.api(Method::DELETE, "/api/v1/quotas/cv", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(s.used("ai", "requests.nvidia.com/gpu").await, "6");

    // Bad input: each is refused with a message that says what, and the
    // store is unchanged.
    let before = s.api(Method::GET, "/api/v1/quotas", None).await.1;
    let cases: Vec<(Vec<u8>, StatusCode, &str)> = vec![
        (b"{not json".to_vec(), StatusCode::BAD_REQUEST, "the request body is not valid JSON"),
        (serde_json::to_vec(&json!({"metadata": {"name": "x"}, "spec": {"hard": {}}, "extra": 1})).unwrap(), StatusCode::BAD_REQUEST, "unknown field `extra`"),
        (serde_json::to_vec(&json!({"metadata": {"name": "x"}, "spec": {"hard": {}, "hrad": {}}})).unwrap(), StatusCode::BAD_REQUEST, "unknown field `hrad`"),
        (serde_json::to_vec(&quota("x", "", json!({"gpus": "1"}))).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "unknown resource key 'gpus'"),
        (serde_json::to_vec(&quota("x", "", json!({"pods": "1e40"}))).unwrap(), StatusCode::BAD_REQUEST, "out of range"),
        (serde_json::to_vec(&quota("x", "", json!({"pods": "lots"}))).unwrap(), StatusCode::BAD_REQUEST, "'lots' is not a quantity"),
        (serde_json::to_vec(&quota("x", "", json!({"pods": "-1"}))).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "negative"),
        (serde_json::to_vec(&quota("Bad_Name", "", json!({}))).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "not a valid quota name"),
        (serde_json::to_vec(&quota("x", "x", json!({}))).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "cycle"),
        (serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "x"}, "spec": {}})).unwrap(), StatusCode::BAD_REQUEST, "apiVersion 'v1' is not served"),
    ];
    for (body, want, text) in cases {
        let (st, v) = s
            .api_with(Method::POST, "/api/v1/quotas", Some(body), Some(TOKEN))
            .await;
        assert_eq!(st, want, "{v}");
        assert!(message(&v).contains(text), "want {text:?} in {v}");
    }
    // Oversized bodies are cut off at the limit. (Just over it: the server
    // answers 413 without reading the rest, and a body this size is already
    // in the socket buffers, so the client always gets to read the answer.)
    let huge = vec![b' '; bizrq::edge::API_BODY_LIMIT + 1024];
    let (st, _) = s
        .api_with(Method::POST, "/api/v1/quotas", Some(huge), Some(TOKEN))
        .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        s.api(Method::GET, "/api/v1/quotas", None).await.1,
        before,
        "bad input changed nothing"
    );

    // The portal page lists the tree, after a login.
    assert_eq!(
        Browser::new(&s).get("/").await.status,
        StatusCode::SEE_OTHER
    );
    let page = Browser::admin(&s).await.get("/tree").await;
    let (st, html) = (page.status, page.body);
    assert_eq!(st, StatusCode::OK);
    assert!(
        html.starts_with("<!DOCTYPE html>")
            && html.contains("nlp")
            && html.contains("requests.nvidia.com/gpu"),
        "{html}"
    );
    assert_eq!(s.get_text("/readyz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn check_answers_without_charging() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota(
        "nlp-team",
        "",
        json!({"requests.nvidia.com/gpu.A100": "16", "pods": "10"}),
    )
    .await;
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/check",
            Some(deployment("t", "nlp-team", 2, 4)),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["allowed"], true);
    assert_eq!(v["usage"]["requests.nvidia.com/gpu.A100"], "8");
    assert_eq!(v["usage"]["limits.cpu.A4"], "16");
    let (_, v) = s
        .api(
            Method::POST,
            "/api/v1/check",
            Some(deployment("t", "nlp-team", 5, 4)),
        )
        .await;
    assert_eq!(v["allowed"], false);
    assert_eq!(
        v["message"],
        "bizrq nlp-team: requests.nvidia.com/gpu.A100 asks 20, 16 left of 16"
    );
    assert_eq!(
        s.used("nlp-team", "requests.nvidia.com/gpu.A100").await,
        "0"
    );
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/check",
            Some(json!({"apiVersion": "v1", "kind": "Pod"})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("not a workload kind"), "{v}");
}
