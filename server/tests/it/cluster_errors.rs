//! What a person is told when the API server refuses one of bizrq's own
//! writes in cluster mode: the reason, through the JSON API and the
//! portal, never "internal error". (Each kind of refusal is mapped in
//! `cluster::store`'s unit tests at the kube HTTP boundary; here the
//! emulated API server refuses for real.)

use crate::cluster::Cluster;
use crate::cluster::T0;
use crate::common::{Browser, ADMIN_PASSWORD};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const GPU: &str = "requests.nvidia.com/gpu";
const UNREACHABLE: &str =
    "the API server could not reach the admission webhook quotas.bizrq.io (Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": ";

/// No replica answers the webhook's Service (`failurePolicy: Fail`):
/// creating, changing and deleting quotas is refused with a 503 that says
/// why, and the portal's form says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_for_an_unreachable_webhook_says_so_with_503() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    s.create_quota("cv", "ai", json!({GPU: "2"})).await;
    let b = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;

    // The Service loses its endpoint: nothing listens there any more.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let ca = std::fs::read_to_string(c.ca_path()).unwrap();
    c.fake
        .admit_with(&crate::cluster::shipped_webhooks(), &ca, gone);

    let create = json!({"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {GPU: "6"}}});
    let edit = json!({"metadata": {"name": "cv"}, "spec": {"parent": "ai", "hard": {GPU: "3"}}});
    for (method, path, body, name) in [
        (Method::POST, "/api/v1/quotas", Some(create), "nlp"),
        (Method::PUT, "/api/v1/quotas/cv", Some(edit), "cv"),
        (Method::DELETE, "/api/v1/quotas/cv", None, "cv"),
    ] {
        let (st, v) = s.api(method.clone(), path, body).await;
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{method} {path}: {v}");
        assert_eq!(v["error"]["reason"], "Unavailable", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("bizrq {name} was not written: {UNREACHABLE}")),
            "{method} {path}: {message}"
        );
        assert!(
            message.ends_with(
                "check that a bizrq replica is ready (kubectl -n bizrq-system get pods) and try again"
            ),
            "{message}"
        );
    }
    // Nothing moved: no child, and its carve-out handed back.
    assert!(c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "nlp")
        .is_none());
    let ai = c.fake.quota("ai");
    assert!(ai["status"]["children"]["nlp"].is_null(), "{ai}");
    assert_eq!(c.fake.quota("cv")["spec"]["hard"][GPU], "2");

    // The portal's form shows the same reason.
    let p = b
        .post(
            "/quotas/ai/children/new",
            &[("name", "asr"), (&format!("hard:{GPU}"), "1")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{}", p.body);
    assert!(
        p.body
            .contains("the API server could not reach the admission webhook quotas.bizrq.io"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("internal error"), "{}", p.body);
    c.running.shutdown().await;
}

/// An admission webhook at the Service's address that refuses every review
/// with `status`, as bizrq's webhook on another replica deciding on a
/// fresher parent would. It serves the replica's certificate, so the API
/// server trusts it.
async fn refusing_webhook(c: &Cluster, status: Value) -> std::net::SocketAddr {
    let dir = c.ca_path().parent().unwrap().to_path_buf();
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
        dir.join("tls.crt"),
        dir.join("tls.key"),
    )
    .await
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let status = status.clone();
        async move {
            let review: Value = serde_json::from_slice(&body).unwrap_or_default();
            axum::Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": false, "status": status}}),
            )
        }
    });
    let server = axum_server::from_tcp_rustls(listener, tls).unwrap();
    tokio::spawn(async move { server.serve(app.into_make_service()).await });
    addr
}

/// The webhook refuses bizrq's own raise after bizrq's checks passed: the
/// JSON API answers with the webhook's reason in bizrq's words (403), and
/// a webhook's 409 with its own words, not "changed by someone else".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_refusal_reaches_the_json_api_in_its_own_words() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    s.create_quota("nlp", "ai", json!({GPU: "4"})).await;
    let ca = std::fs::read_to_string(c.ca_path()).unwrap();
    let raise = json!({"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {GPU: "8"}}});
    let denied = "bizrq nlp needs 8 requests.nvidia.com/gpu of ai, 4 left of 16";
    let held = "bizrq nlp is held by transfer t-1 until it finishes";
    for (round, (code, reason, said, status)) in [
        (403, "Forbidden", denied, StatusCode::FORBIDDEN),
        (409, "Conflict", held, StatusCode::CONFLICT),
    ]
    .into_iter()
    .enumerate()
    {
        let webhook =
            refusing_webhook(&c, json!({"code": code, "reason": reason, "message": said})).await;
        c.fake
            .admit_with(&crate::cluster::shipped_webhooks(), &ca, webhook);
        let (st, v) = s
            .api(Method::PUT, "/api/v1/quotas/nlp", Some(raise.clone()))
            .await;
        assert_eq!(st, status, "{v}");
        assert_eq!(v["error"]["message"], said, "{v}");
        assert_eq!(c.fake.quota("nlp")["spec"]["hard"][GPU], "4");
        // The refused raise is settled at once to the child as stored
        // (never below it): no carve-out is left that transfers would
        // take for a change in flight.
        assert_eq!(
            c.fake.quota("ai")["status"]["children"]["nlp"]["hard"][GPU],
            "4"
        );
        c.set_clock(T0 + (round as i64 + 1) * (quota::tree::CARVE_TTL_MS + 1));
        let mut touch = c.fake.quota("ai");
        touch["metadata"]["labels"] = json!({"touched": round.to_string()});
        c.fake.put(touch);
        c.until(
            "ai",
            "the carve-out stays the child's after the repair",
            |q| q["status"]["children"]["nlp"]["hard"][GPU] == "4",
        )
        .await;
    }
    c.running.shutdown().await;
}
