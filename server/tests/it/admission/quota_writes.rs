//! Quota writes through bizrq's own webhook: from the JSON API and the
//! portal's forms, carved exactly once; kubectl create of an existing quota
//! is AlreadyExists; a child created on one replica admitted by the other;
//! a create whose answer is lost known by its token; a carve-out left by a
//! crashed create blocks the name until repaired.
use super::*;

/// Wait (up to 30 s, as `settles`) for `parent`'s carve-out of `child`
/// and its used to be `gpus`.
async fn lowered_to(c: &Cluster, parent: &str, child: &str, gpus: &str) {
    let want = (Some(gpus.to_string()), gpus.to_string());
    for _ in 0..600 {
        if carve(c, parent, child) == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        carve(c, parent, child),
        want,
        "{}",
        c.fake.quota(parent)["status"]
    );
}

/// The reviews sent for quota `name`: (operation, user) in order.
fn quota_reviews(fake: &FakeApi, name: &str) -> Vec<(String, String)> {
    fake.reviews()
        .iter()
        .filter(|r| r["webhook"] == "quotas.bizrq.io" && r["request"]["name"] == name)
        .map(|r| {
            (
                r["request"]["operation"].as_str().unwrap().to_string(),
                r["request"]["userInfo"]["username"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_api_child_quota_writes_pass_bizrqs_own_webhook_and_carve_exactly_once() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    s.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    assert_eq!(quota_reviews(&c.fake, "nlp"), vec![own("CREATE")]);
    // The carve-out is the create's: the token on the object names it.
    let nlp = c.fake.quota("nlp");
    let token = &nlp["metadata"]["annotations"]["bizrq.io/create-token"];
    assert!(token.is_string(), "{nlp}");
    assert_eq!(
        c.fake.quota("ai")["status"]["children"]["nlp"]["uid"],
        *token
    );

    // A raise is carved once (the webhook sees the carve-out already made).
    // (No resourceVersion: the controller's status writes move it.)
    let put = |gpus: &str, rv: &Value| json!({"metadata": {"name": "nlp", "resourceVersion": rv}, "spec": {"parent": "ai", "hard": {GPU: gpus}}});
    let rv = Value::Null;
    let (st, v) = s
        .api(Method::PUT, "/api/v1/quotas/nlp", Some(put("10", &rv)))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("10".into()), "10".into()));
    assert_eq!(c.fake.quota("nlp")["spec"]["hard"][GPU], "10");
    // A raise beyond the parent is refused, and nothing moves.
    let (st, v) = s
        .api(Method::PUT, "/api/v1/quotas/nlp", Some(put("17", &rv)))
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("10".into()), "10".into()));
    // Lowering returns the difference.
    let (st, v) = s
        .api(Method::PUT, "/api/v1/quotas/nlp", Some(put("4", &rv)))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // Settled from a fresh read right after the write; a repair that saw
    // the child at 10 while the carve-out was young may raise it back
    // until it is old (docs/cluster-mode.md, "Raise first, lower after"),
    // so a loaded machine can see the lowering late, never lost.
    lowered_to(&c, "ai", "nlp", "4").await;
    assert_eq!(
        quota_reviews(&c.fake, "nlp"),
        vec![own("CREATE"), own("UPDATE"), own("UPDATE")],
        "the refused raise never reached the API server"
    );

    // A delete returns the carve-out once.
    let (st, v) = s.api(Method::DELETE, "/api/v1/quotas/nlp", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "nlp")
        .is_none());
    settles(&c, "ai", "nlp", "0").await;
    assert_eq!(quota_reviews(&c.fake, "nlp").last(), Some(&own("DELETE")));

    // The name can be used again at once, and two children share the parent.
    s.create_quota("nlp", "ai", json!({GPU: "12"})).await;
    s.create_quota("cv", "ai", json!({GPU: "4"})).await;
    assert_eq!(carve(&c, "ai", "nlp"), (Some("12".into()), "16".into()));
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(
                json!({"metadata": {"name": "asr"}, "spec": {"parent": "ai", "hard": {GPU: "1"}}}),
            ),
        )
        .await;
    assert_eq!(
        st,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the parent is full: {v}"
    );
    assert_eq!(carve(&c, "ai", "asr"), (None, "16".into()));
    c.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_forms_create_edit_and_delete_child_quotas_through_the_webhook() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    let b = Browser::logged_in(&c.server, "admin", ADMIN_PASSWORD).await;

    // Create, as the "new child" form posts it.
    let form = b.get("/quotas/ai/children/new").await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.body);
    let p = b
        .post(
            "/quotas/ai/children/new",
            &[("name", "nlp"), (&format!("hard:{GPU}"), "6")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    // The controller's first look at the new quota writes its status (and
    // a new resourceVersion): edit after it, as a person would.
    c.until("nlp", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;

    // Edit: a raise, then a cut, each from the edit page's own version.
    for (gpus, used) in [("9", "9"), ("2", "2")] {
        let page = b.get("/quotas/nlp/edit").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let rv = hidden_field(&page.body, "resourceVersion").expect("the edit form's version");
        let p = b
            .post(
                "/quotas/nlp/edit",
                &[("resourceVersion", &rv), (&format!("hard:{GPU}"), gpus)],
            )
            .await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{gpus}: {}", p.body);
        if gpus == "9" {
            // A raise is carved before the child's write: exact at once.
            assert_eq!(carve(&c, "ai", "nlp"), (Some(gpus.into()), used.into()));
        } else {
            // A cut follows the child as read back, which in cluster mode
            // is the watch's copy: it settles (a loaded machine's watch
            // can lag the answer).
            lowered_to(&c, "ai", "nlp", gpus).await;
        }
        assert_eq!(c.fake.quota("nlp")["spec"]["hard"][GPU], gpus);
    }
    // A raise past the parent is shown on the form, and nothing moves.
    let page = b.get("/quotas/nlp/edit").await;
    let rv = hidden_field(&page.body, "resourceVersion").unwrap();
    let p = b
        .post(
            "/quotas/nlp/edit",
            &[("resourceVersion", &rv), (&format!("hard:{GPU}"), "20")],
        )
        .await;
    assert_ne!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(carve(&c, "ai", "nlp"), (Some("2".into()), "2".into()));

    // Delete, confirmed, from the detail page's form.
    let page = b.get("/quotas/nlp").await;
    let rv = hidden_field(&page.body, "resourceVersion").expect("the delete form's version");
    let p = b
        .post(
            "/quotas/nlp/delete",
            &[("resourceVersion", &rv), ("confirm", "yes")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert!(c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "nlp")
        .is_none());
    settles(&c, "ai", "nlp", "0").await;
    assert_eq!(
        quota_reviews(&c.fake, "nlp"),
        vec![own("CREATE"), own("UPDATE"), own("UPDATE"), own("DELETE")]
    );
    c.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_of_an_existing_quota_is_already_exists() {
    let c = Cluster::start().await;
    let api = quotas(c.kubectl("alice"));
    let pp = PostParams::default();
    api.create(&pp, &quota_object("ai", "", "16"))
        .await
        .unwrap();
    api.create(&pp, &quota_object("nlp", "ai", "6"))
        .await
        .unwrap();
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    assert_eq!(
        quota_reviews(&c.fake, "nlp"),
        vec![("CREATE".to_string(), "alice".to_string())]
    );

    for (name, parent) in [("ai", ""), ("nlp", "ai")] {
        let (code, reason, message) =
            refusal(api.create(&pp, &quota_object(name, parent, "6")).await);
        assert_eq!((code, reason.as_str()), (409, "AlreadyExists"), "{message}");
        assert_eq!(
            message,
            format!("admission webhook \"quotas.bizrq.io\" denied the request: bizrq {name} already exists")
        );
    }
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    // bizrq's own create of an existing name answers the same.
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(
                json!({"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {GPU: "6"}}}),
            ),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert!(v.to_string().contains("already exists"), "{v}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));

    // kubectl's delete returns the carve-out once the controller sees the
    // child gone. (A carve-out younger than CARVE_TTL_MS that no token ties
    // to the deleted object waits for the window: it may be a new create's.)
    c.set_clock(T0 + quota::tree::CARVE_TTL_MS + 1);
    api.delete("nlp", &DeleteParams::default()).await.unwrap();
    settles(&c, "ai", "nlp", "0").await;
    c.running.shutdown().await;
}

/// Two replicas; the API server's call for replica A's own create lands on
/// replica B, which finds A's carve-out under the token on the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_created_on_one_replica_is_admitted_by_the_other() {
    let fake = FakeApi::new();
    let a = Cluster::replica(
        fake.clone(),
        tempfile::tempdir().unwrap(),
        T0,
        "bizrq-a",
        false,
    )
    .await;
    let b = Cluster::replica(
        fake.clone(),
        tempfile::tempdir().unwrap(),
        T0,
        "bizrq-b",
        true,
    )
    .await;
    b.server.create_quota("ai", "", json!({GPU: "16"})).await;
    a.server.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    assert_eq!(carve(&a, "ai", "nlp"), (Some("6".into()), "6".into()));
    // And the other way round, with A's cached parent now stale.
    a.serve_webhooks();
    b.server.create_quota("cv", "ai", json!({GPU: "4"})).await;
    a.server.create_quota("asr", "ai", json!({GPU: "2"})).await;
    assert_eq!(carve(&a, "ai", "cv"), (Some("4".into()), "12".into()));
    let (st, v) = b
        .server
        .api(Method::DELETE, "/api/v1/quotas/nlp", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    settles(&a, "ai", "nlp", "6").await;
    a.running.shutdown().await;
    b.running.shutdown().await;
}

/// The API server stores bizrq's create but the answer is lost (a
/// timeout): the object carrying bizrq's token is its own, so the create
/// succeeded and its carve-out stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_is_lost_is_known_by_its_token() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    c.fake
        .lose_answer_next("/apis/bizrq.io/v1/bizgroupresourcequotas", 1);
    s.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    assert!(c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "nlp")
        .is_some());
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    c.running.shutdown().await;
}

/// A create that crashed between its carve-out and its object leaves a
/// carve-out under its token: a new create of the name is told why it
/// waits, and succeeds once the repair has returned the stale carve-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carve_out_left_by_a_crashed_create_blocks_the_name_until_repaired() {
    let c = Cluster::start().await;
    let s = &c.server;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    let mut ai = c.fake.quota("ai");
    ai["status"]["children"]["nlp"] =
        json!({"hard": {GPU: "6"}, "since": "2026-11-21T10:00:00.000Z", "uid": "crashed"});
    ai["status"]["used"][GPU] = json!("6");
    c.fake.put(ai);
    c.until("ai", "the backdoor write seen", |q| {
        q["status"]["children"]["nlp"]["uid"] == "crashed"
    })
    .await;
    let body = json!({"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {GPU: "6"}}});
    let (st, v) = s
        .api(Method::POST, "/api/v1/quotas", Some(body.clone()))
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "bizrq nlp is being created by another request, which already carved it out of ai"
        ) && msg.ends_with("after 120 s if it never finishes"),
        "{msg}"
    );
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    // Past CARVE_TTL_MS the controller's repair returns it.
    c.set_clock(T0 + quota::tree::CARVE_TTL_MS + 1);
    let mut touch = c.fake.quota("ai");
    touch["metadata"]["labels"] = json!({"touched": "1"});
    c.fake.put(touch);
    settles(&c, "ai", "nlp", "0").await;
    s.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    c.running.shutdown().await;
}
