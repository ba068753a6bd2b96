//! What a request may carry: transfer request caps, security headers,
//! escaping, control characters and body size.

use super::*;

fn ask(from: &str, to: &str, reason: &str) -> Value {
    json!({"from": from, "to": to, "amounts": {GPU: "1"}, "reason": reason})
}

/// Transfer requests: a quota the requester cannot see answers exactly as
/// one that does not exist; the reason is bounded; a user may have 20
/// requests open and make 30 an hour.
async fn transfer_requests_are_capped(s: &Server) {
    tree(s).await;
    let admin = Browser::admin(s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    bind(&admin, "alice", "nlp", "owner").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let token = create_token(&alice, "ci").await;
    let post = |body: Value| {
        let token = token.clone();
        async move {
            s.api_with(
                Method::POST,
                "/api/v1/transfers",
                Some(serde_json::to_vec(&body).unwrap()),
                Some(&token),
            )
            .await
        }
    };
    let (st_cv, v_cv) = post(ask("nlp", "cv", "a test")).await;
    let (st_no, v_no) = post(ask("nlp", "nope", "a test")).await;
    assert_eq!(
        (st_cv, st_no),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND)
    );
    assert_eq!(
        v_cv["error"]["message"]
            .as_str()
            .unwrap()
            .replace("cv", "X"),
        v_no["error"]["message"]
            .as_str()
            .unwrap()
            .replace("nope", "X"),
        "invisible and unknown answer alike"
    );
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "r"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND, "the form too");
    let (st, v) = post(ask("nlp", "nlp-a", &"x".repeat(2001))).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("at most 2000"));

    let mut ids = Vec::new();
    for i in 0..20 {
        let (st, v) = post(ask("nlp", "nlp-a", "more for a")).await;
        assert_eq!(st, StatusCode::CREATED, "request {i}: {v}");
        ids.push(v["id"].as_i64().unwrap());
    }
    let (st, v) = post(ask("nlp", "nlp-a", "one more")).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["error"]["reason"], "TooManyRequests");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("20 transfer requests waiting"));
    let (st, v) = s
        .api(
            Method::POST,
            &format!("/api/v1/transfers/{}/reject", ids[0]),
            Some(json!({ "note": "n".repeat(2001) })),
        )
        .await;
    assert_eq!(
        st,
        StatusCode::BAD_REQUEST,
        "a rejection's note is bounded too: {v}"
    );
    // Decided ones no longer count as open, but still count for the hour.
    for id in &ids[..15] {
        let (st, v) = s
            .api(
                Method::POST,
                &format!("/api/v1/transfers/{id}/reject"),
                Some(json!({"note": "no"})),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    for i in 0..10 {
        let (st, v) = post(ask("nlp", "nlp-a", "more for a")).await;
        assert_eq!(st, StatusCode::CREATED, "request {i} after rejections: {v}");
    }
    let (st, v) = post(ask("nlp", "nlp-a", "one more")).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in the last hour"),
        "{v}"
    );
}

/// Every portal and API response carries the security headers, and a real
/// page renders under its policy (no script, styles from /style.css and
/// inline attributes).
async fn responses_carry_security_headers(s: &Server) {
    tree(s).await;
    let admin = Browser::admin(s).await;
    for path in [
        "/",
        "/tree",
        "/quotas/nlp",
        "/login",
        "/api/v1/quotas",
        "/style.css",
    ] {
        let p = admin.get(path).await;
        let h = |n: &str| p.headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(
            h("content-security-policy").contains("frame-ancestors 'none'"),
            "{path}"
        );
        assert!(
            h("content-security-policy").contains("default-src 'none'"),
            "{path}"
        );
        assert_eq!(h("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(h("referrer-policy"), "same-origin", "{path}");
        assert_eq!(h("x-frame-options"), "DENY", "{path}");
    }
    let page = admin.get("/tree").await.body;
    assert!(!page.contains("<script"), "no script a policy would block");
    assert!(page.contains("href=\"/style.css\""));
}

/// A reason sent back into the request form's textarea is escaped.
async fn textarea_content_is_escaped(s: &Server) {
    tree(s).await;
    let admin = Browser::admin(s).await;
    admin.get("/transfers").await;
    let evil = "</textarea><script>alert(1)</script>";
    let p = admin
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "nlp-a"),
                ("key", GPU),
                ("amount", "-1"),
                ("reason", evil),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(!p.body.contains("<script>alert(1)"), "{}", p.body);
    assert!(
        p.body.contains("&lt;/textarea&gt;&lt;script&gt;"),
        "{}",
        p.body
    );
}

/// NUL and other control characters are refused at the edge, with a
/// message: 400 in the API's JSON shape, 422 for pages (on PostgreSQL a NUL
/// used to reach the database and fail with 500).
async fn control_characters_are_refused_at_the_edge(s: &Server) {
    tree(s).await;
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "a\u{0}b"}, "spec": {"parent": "ai", "hard": {GPU: "1"}}})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["status"], 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("U+0000"),
        "{v}"
    );
    let (st, v) = s.api(Method::GET, "/api/v1/alerts?quota=%00", None).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, v) = s.api(Method::GET, "/api/v1/quotas/a%00b", None).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let admin = Browser::admin(s).await;
    let p = admin.get("/audit?actor=%00").await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(p.body.contains("control character"), "{}", p.body);
    admin.get("/quotas/ai/children/new").await;
    let p = admin
        .post(
            "/quotas/ai/children/new",
            &[("name", "x\u{0}y"), ("hard:requests.nvidia.com/gpu", "1")],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", p.body);
    // Line breaks in a reason are fine.
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/transfers",
            Some(ask("nlp", "nlp-a", "line one\r\nline two\tend")),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

/// A signed-in API body is checked as JSON whatever its Content-Type (the
/// handlers parse it as JSON whatever it says), one that is not JSON is
/// refused rather than let through unchecked, and bidirectional overrides
/// are refused like control characters.
async fn api_bodies_are_checked_whatever_their_content_type(s: &Server) {
    tree(s).await;
    let client = reqwest::Client::new();
    let send = |body: String, kind: Option<&'static str>| {
        let mut req = client
            .post(format!("{}/api/v1/transfers", s.http))
            .bearer_auth(TOKEN)
            .body(body);
        if let Some(k) = kind {
            req = req.header("content-type", k);
        }
        async move {
            let r = req.send().await.unwrap();
            let st = r.status();
            (st, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let nul = ask("nlp", "nlp-a", "a\u{0}b").to_string();
    for kind in [Some("text/plain"), None] {
        let (st, v) = send(nul.clone(), kind).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{kind:?}: {v}");
        assert!(v.to_string().contains("U+0000"), "{v}");
    }
    // An unknown field the typed parse would skip, holding a number no
    // JSON value can: the body is refused, not passed on unchecked.
    let sneaky = r#"{"from": "nlp", "to": "nlp-a", "amounts": {"requests.nvidia.com/gpu": "1"},
        "reason": "a\u0000b", "pad": 1e400}"#;
    let (st, v) = send(sneaky.into(), Some("application/json")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("not valid JSON"), "{v}");
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/transfers",
            Some(ask("nlp", "nlp-a", "pay \u{202E}0001\u{202C} GPUs")),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("U+202E"), "{v}");
    // A session-authenticated call (cookie, CSRF header) is checked too.
    let admin = Browser::admin(s).await;
    let (st, v) = admin
        .api(
            Method::POST,
            "/api/v1/transfers",
            Some(ask("nlp", "nlp-a", "a\u{0}b")),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, v) = s.api(Method::GET, "/api/v1/transfers", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        v["items"].as_array().map(Vec::len),
        Some(0),
        "nothing was stored: {v}"
    );
}

/// A body over the API's limit answers 413 in the API's JSON error shape.
async fn too_large_bodies_answer_json_on_the_api(s: &Server) {
    let big = format!(
        "{{\"metadata\": {{\"name\": \"x\"}}, \"pad\": \"{}\"}}",
        "x".repeat(2 << 20)
    );
    let (st, v) = s
        .api_with(
            Method::POST,
            "/api/v1/quotas",
            Some(big.into_bytes()),
            Some(TOKEN),
        )
        .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(v["error"]["status"], 413, "{v}");
    assert_eq!(v["error"]["reason"], "RequestEntityTooLarge");
}

on_both!(
    transfer_requests_are_capped,
    responses_carry_security_headers,
    textarea_content_is_escaped,
    control_characters_are_refused_at_the_edge,
    api_bodies_are_checked_whatever_their_content_type,
    too_large_bodies_answer_json_on_the_api,
);
