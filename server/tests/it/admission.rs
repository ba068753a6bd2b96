//! Cluster mode as kube-apiserver and kubectl see it: every write goes
//! through the emulated API server of `fakeapi`, which calls bizrq's
//! webhooks as the shipped `deploy/base/webhook.yaml` says — bizrq's own
//! quota writes from the JSON API and the portal included. The parent's
//! carve-out is checked after every step: charged once, returned once.

use crate::cluster::{Cluster, T0};
use crate::common::{deployment, hidden_field, Browser, ADMIN_PASSWORD};
use crate::fakeapi::{FakeApi, BIZRQ_USER};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const GPU: &str = "requests.nvidia.com/gpu";

pub(crate) fn quotas(client: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("bizrq.io", "v1", "BizGroupResourceQuota");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "bizgroupresourcequotas");
    Api::all_with(client, &ar)
}

pub(crate) fn quota_object(name: &str, parent: &str, gpus: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": name}, "spec": {"parent": parent, "hard": {GPU: gpus}}}),
    )
    .unwrap()
}

/// The code, reason and message of a refused request.
pub(crate) fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected a refusal from the API server, got {other:?}"),
    }
}

/// The parent's carve-out for `child` (None: none) and what its status
/// counts as used, as the API server holds them.
pub(crate) fn carve(c: &Cluster, parent: &str, child: &str) -> (Option<String>, String) {
    let p = c.fake.quota(parent);
    let carved = p["status"]["children"][child]["hard"][GPU]
        .as_str()
        .map(str::to_string);
    let used = p["status"]["used"][GPU].as_str().unwrap_or("0").to_string();
    (carved, used)
}

/// Wait (up to 30 s: the repair is eventual, and a loaded 2-core machine
/// running builds beside the suite has taken over 10) for `parent`'s
/// carve-out of a deleted `child` to be
/// gone and its used to be `used`. The review of a delete frees nothing;
/// the carve-out goes back once the child is seen gone (bizrq's own delete
/// reads it back; anyone's is seen by the controller's quota watch). So a
/// delete settles, where a create or an edit is exact at once.
pub(crate) async fn settles(c: &Cluster, parent: &str, child: &str, used: &str) {
    for _ in 0..600 {
        if carve(c, parent, child) == (None, used.to_string()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        carve(c, parent, child),
        (None, used.to_string()),
        "{}",
        c.fake.quota(parent)["status"]
    );
}

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

fn own(op: &str) -> (String, String) {
    (op.to_string(), BIZRQ_USER.to_string())
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
    c.set_clock(T0 + bizrq::service::CARVE_TTL_MS + 1);
    api.delete("nlp", &DeleteParams::default()).await.unwrap();
    settles(&c, "ai", "nlp", "0").await;
    c.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_writes_are_reviewed_as_the_shipped_rules_and_selectors_say() {
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    let kubectl = c.kubectl("alice");
    let pp = PostParams::default();
    let deploy = |ns: &str, name: &str, replicas: i64| -> Deployment {
        let mut d = deployment(name, "nlp-team", replicas, 2);
        d["metadata"]["namespace"] = json!(ns);
        serde_json::from_value(d).unwrap()
    };
    let nlp: Api<Deployment> = Api::namespaced(kubectl.clone(), "nlp");

    // Within quota: admitted, stored, charged.
    nlp.create(&pp, &deploy("nlp", "small", 1)).await.unwrap();
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "2");
    let r = c.fake.reviews().last().unwrap().clone();
    assert_eq!(r["webhook"], "workloads.bizrq.io");
    let req = &r["request"];
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(
        req["kind"],
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    assert_eq!(
        (req["namespace"].as_str(), req["name"].as_str()),
        (Some("nlp"), Some("small"))
    );
    assert_eq!(req["userInfo"]["username"], "alice");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert!(req["oldObject"].is_null());

    // Over quota: kubectl gets the webhook's denial as a 403.
    let (code, reason, message) = refusal(nlp.create(&pp, &deploy("nlp", "big", 2)).await);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
    assert!(
        message.starts_with("admission webhook \"workloads.bizrq.io\" denied the request: bizrq nlp-team: requests.nvidia.com/gpu asks 4, 2 left of 4"),
        "{message}"
    );
    assert!(c.fake.get("apps", "deployments", "nlp", "big").is_none());

    // A dry run is reviewed as one, and neither stored nor charged.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    nlp.create(&dry, &deploy("nlp", "trial", 1)).await.unwrap();
    let req = c.fake.reviews().last().unwrap()["request"].clone();
    assert_eq!(
        (req["name"].as_str(), &req["dryRun"]),
        (Some("trial"), &json!(true))
    );
    assert_eq!(req["options"]["dryRun"], json!(["All"]));
    assert!(c.fake.get("apps", "deployments", "nlp", "trial").is_none());
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "2");

    // The scale subresource is reviewed as a Scale, old and new.
    let (code, _, message) = refusal(
        nlp.patch_scale(
            "small",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with("admission webhook \"scale.bizrq.io\" denied"),
        "{message}"
    );
    let req = c.fake.reviews().last().unwrap()["request"].clone();
    assert_eq!(
        (req["subResource"].as_str(), req["kind"]["kind"].as_str()),
        (Some("scale"), Some("Scale"))
    );
    assert_eq!(
        (
            &req["object"]["spec"]["replicas"],
            &req["oldObject"]["spec"]["replicas"]
        ),
        (&json!(3), &json!(1))
    );

    // Not reviewed: kube-system (namespaceSelector) and unlabelled
    // workloads (objectSelector) — both stored without asking bizrq.
    let before = c.fake.reviews().len();
    let system: Api<Deployment> = Api::namespaced(kubectl.clone(), "kube-system");
    system
        .create(&pp, &deploy("kube-system", "dns", 9))
        .await
        .unwrap();
    let mut plain = deploy("nlp", "plain", 9);
    plain
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("biz.group.resource.quota");
    nlp.create(&pp, &plain).await.unwrap();
    assert_eq!(
        c.fake.reviews().len(),
        before,
        "{:#?}",
        &c.fake.reviews()[before..]
    );
    assert!(c
        .fake
        .get("apps", "deployments", "kube-system", "dns")
        .is_some());
    c.fake.remove("apps", "deployments", "kube-system", "dns");

    // A delete is reviewed (and releases the charge).
    nlp.delete("small", &DeleteParams::default()).await.unwrap();
    let r = c.fake.reviews().last().unwrap().clone();
    assert_eq!(
        (r["webhook"].as_str(), r["request"]["operation"].as_str()),
        (Some("workload-deletes.bizrq.io"), Some("DELETE"))
    );
    assert!(r["request"]["object"].is_null());
    assert_eq!(r["request"]["oldObject"]["metadata"]["name"], "small");
    c.until("nlp-team", "released", |q| q["status"]["used"][GPU] == "0")
        .await;
    c.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_webhook_refuses_under_fail_and_lets_ignore_through() {
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    let kubectl = c.kubectl("alice");
    let nlp: Api<Deployment> = Api::namespaced(kubectl.clone(), "nlp");
    let d: Deployment = serde_json::from_value(deployment("small", "nlp-team", 1, 2)).unwrap();
    nlp.create(&PostParams::default(), &d).await.unwrap();

    // The Service loses its endpoint: nothing listens there any more.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let ca = std::fs::read_to_string(c.ca_path()).unwrap();
    c.fake
        .admit_with(&crate::cluster::shipped_webhooks(), &ca, gone);
    let (code, reason, message) = refusal(
        quotas(kubectl.clone())
            .create(&PostParams::default(), &quota_object("cv", "", "1"))
            .await,
    );
    assert_eq!((code, reason.as_str()), (500, "InternalError"), "{message}");
    assert!(
        message.starts_with("Internal error occurred: failed calling webhook \"quotas.bizrq.io\": failed to call webhook: Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": "),
        "{message}"
    );
    let d2: Deployment = serde_json::from_value(deployment("other", "nlp-team", 1, 1)).unwrap();
    let (code, _, message) = refusal(nlp.create(&PostParams::default(), &d2).await);
    assert_eq!(code, 500, "{message}");
    // bizrq's own writes are refused too: its JSON API says so.
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "cv"}, "spec": {"parent": "", "hard": {GPU: "1"}}})),
        )
        .await;
    assert!(st.is_server_error(), "{st} {v}");
    // Deletes are Ignore: the delete proceeds (the controller releases).
    nlp.delete("small", &DeleteParams::default()).await.unwrap();
    assert!(c.fake.get("apps", "deployments", "nlp", "small").is_none());

    // The endpoint is back: so are quota writes.
    c.serve_webhooks();
    quotas(kubectl)
        .create(&PostParams::default(), &quota_object("cv", "", "1"))
        .await
        .unwrap();
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
    c.set_clock(T0 + bizrq::service::CARVE_TTL_MS + 1);
    let mut touch = c.fake.quota("ai");
    touch["metadata"]["labels"] = json!({"touched": "1"});
    c.fake.put(touch);
    settles(&c, "ai", "nlp", "0").await;
    s.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    c.running.shutdown().await;
}

/// An HPA reserves its maxReplicas through `hpa.bizrq.io` (Fail); its
/// delete goes to `hpa-deletes.bizrq.io` (Ignore) and lifts the reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpa_writes_reach_the_hpa_webhooks() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "8"}))
        .await;
    let kubectl = c.kubectl("alice");
    let d: Deployment = serde_json::from_value(deployment("train", "nlp-team", 1, 2)).unwrap();
    Api::<Deployment>::namespaced(kubectl.clone(), "nlp")
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(kubectl, "nlp");
    let hpa = |max: i64| -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "train", "namespace": "nlp"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train"},
                "minReplicas": 1, "maxReplicas": max}}))
        .unwrap()
    };
    // 5 × 2 GPUs cannot be reserved in 8.
    let (code, _, message) = refusal(hpas.create(&PostParams::default(), &hpa(5)).await);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with("admission webhook \"hpa.bizrq.io\" denied the request: "),
        "{message}"
    );
    hpas.create(&PostParams::default(), &hpa(4)).await.unwrap();
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "8");
    hpas.delete("train", &DeleteParams::default())
        .await
        .unwrap();
    let r = c.fake.reviews().last().unwrap().clone();
    assert_eq!(r["webhook"], "hpa-deletes.bizrq.io");
    // The delete lifts the reservation at once; a reconcile whose HPA cache
    // still shows the HPA may put it back until the watch delivers the
    // deletion, so the end state is awaited.
    c.until("nlp-team", "the HPA reservation lifted", |q| {
        q["status"]["used"][GPU] == "2"
    })
    .await;
    c.running.shutdown().await;
}

/// The shipped configuration with its namespaceSelectors removed, as
/// someone editing it by hand might: kube-system's writes then reach bizrq.
fn webhooks_without_namespace_selectors() -> String {
    let selector = "  namespaceSelector:\n    matchExpressions:\n    - key: kubernetes.io/metadata.name\n      operator: NotIn\n      values: [\"kube-system\", \"bizrq-system\"]\n";
    let shipped = crate::cluster::shipped_webhooks();
    assert_eq!(
        shipped.matches(selector).count(),
        6,
        "the shipped selectors"
    );
    shipped.replace(selector, "")
}

/// The controller watches every namespace, but charges only workloads in
/// the namespaces the webhook governs: a labelled 9 × 2-GPU Deployment
/// running in kube-system is no part of its quota; the same kind of
/// Deployment in nlp is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_charges_no_workload_in_an_excluded_namespace() {
    use crate::cluster::{pod, replicaset};
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    // As the API server stores them (kube-system is never reviewed); the
    // excluded namespace's objects first, so any reconcile that sees nlp's
    // Deployment has seen kube-system's too.
    for (ns, replicas) in [("kube-system", 9), ("nlp", 1)] {
        let mut d = deployment("train", "nlp-team", replicas, 2);
        d["metadata"]["namespace"] = ns.into();
        c.fake.put(d);
        c.fake.put(replicaset(ns, "train"));
        for i in 0..replicas.min(2) {
            let name = format!("train-{ns}-{i}");
            c.fake.put(pod(
                ns,
                &name,
                "ReplicaSet",
                "train-7d9f",
                2,
                "2026-11-21T10:00:00Z",
            ));
        }
    }
    let q = c
        .until("nlp-team", "nlp's Deployment observed", |q| {
            q["status"]["workloads"]["apps/Deployment/nlp/train"].is_object()
        })
        .await;
    let workloads: Vec<&String> = q["status"]["workloads"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(workloads, ["apps/Deployment/nlp/train"], "{q}");
    assert_eq!(q["status"]["used"][GPU], "2", "{q}");
    // Both namespaces' pods are watched; only nlp's runs are charged.
    c.until_metric("bizrq_controller_tracked{kind=\"pods\"} 3")
        .await;
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.until_metric("bizrq_controller_tracked{kind=\"workloads\"} 1")
        .await;
    c.running.shutdown().await;
}

/// A webhook configuration edited by hand sends kube-system's writes to
/// bizrq anyway: the webhook allows them, charging nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_from_an_excluded_namespace_is_allowed_uncharged() {
    let c = Cluster::start().await;
    c.server
        .create_quota("nlp-team", "", json!({GPU: "4"}))
        .await;
    let ca = std::fs::read_to_string(c.ca_path()).unwrap();
    c.fake.admit_with(
        &webhooks_without_namespace_selectors(),
        &ca,
        c.running.webhook_addr,
    );
    let kubectl = c.kubectl("alice");
    let before = c.fake.reviews().len();
    let d: Deployment = serde_json::from_value(deployment("dns", "nlp-team", 9, 2)).unwrap();
    let mut d = d;
    d.metadata.namespace = Some("kube-system".into());
    Api::<Deployment>::namespaced(kubectl.clone(), "kube-system")
        .create(&PostParams::default(), &d)
        .await
        .expect("allowed: kube-system is not governed");
    let reviews = c.fake.reviews();
    let sent: Vec<&Value> = reviews[before..]
        .iter()
        .filter(|r| r["request"]["namespace"] == "kube-system")
        .collect();
    assert_eq!(
        sent.len(),
        1,
        "the edited configuration sent it: {reviews:#?}"
    );
    assert_eq!(c.fake.quota("nlp-team")["status"]["used"][GPU], "0");
    // The same in a governed namespace is refused: 18 GPUs do not fit in 4.
    let nlp: Deployment = serde_json::from_value(deployment("dns", "nlp-team", 9, 2)).unwrap();
    let (code, _, message) = refusal(
        Api::<Deployment>::namespaced(kubectl, "nlp")
            .create(&PostParams::default(), &nlp)
            .await,
    );
    assert_eq!(code, 403, "{message}");
    c.running.shutdown().await;
}

/// `kubectl scale pytorchjob` goes through Kubeflow's scale subresource
/// (its Worker replicas), which the shipped scale webhook reviews: for a
/// governed job a Scale alone cannot be charged (one replica type of
/// several), so it is refused with what to do instead; an ungoverned job
/// scales freely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_pytorchjob_is_not_scaled_past_bizrq() {
    let c = Cluster::start().await;
    c.fake.install(crate::fakeapi::PYTORCHJOB);
    c.server
        .create_quota("nlp-team", "", json!({GPU: "8"}))
        .await;
    let gvk = GroupVersionKind::gvk("kubeflow.org", "v1", "PyTorchJob");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "pytorchjobs");
    let jobs: Api<DynamicObject> = Api::namespaced_with(c.kubectl("alice"), "nlp", &ar);
    let job = |name: &str, quota: Option<&str>| -> DynamicObject {
        let mut v = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "nlp"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "worker", "image": "trainer",
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}}}});
        if let Some(q) = quota {
            v["metadata"]["labels"] = json!({"biz.group.resource.quota": q});
        }
        serde_json::from_value(v).unwrap()
    };
    let pp = PostParams::default();
    jobs.create(&pp, &job("bert", Some("nlp-team")))
        .await
        .unwrap();
    c.until("nlp-team", "the job charged", |q| {
        q["status"]["used"][GPU] == "1"
    })
    .await;
    // And bizrq's own cache of the quotas has the charge.
    let seen = || async {
        let (_, q) = c
            .server
            .api(Method::GET, "/api/v1/quotas/nlp-team", None)
            .await;
        (q["status"]["used"][GPU] == "1").then_some(())
    };
    crate::common::poll_until(200, std::time::Duration::from_millis(50), seen)
        .await
        .expect("bizrq's cache has the charge");
    let scale = |name: &'static str| {
        let jobs = jobs.clone();
        async move {
            jobs.patch_scale(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"replicas": 8}})),
            )
            .await
        }
    };
    let (code, _, message) = refusal(scale("bert").await);
    assert_eq!(code, 400, "{message}");
    assert!(
        message.starts_with(
            "admission webhook \"scale.bizrq.io\" denied the request: bizrq: PyTorchJob nlp/bert is governed by a quota and cannot be scaled through its scale subresource"
        ),
        "{message}"
    );
    assert_eq!(
        c.fake
            .get("kubeflow.org", "pytorchjobs", "nlp", "bert")
            .unwrap()["spec"]["replicas"],
        Value::Null,
        "nothing was scaled"
    );
    jobs.create(&pp, &job("free", None)).await.unwrap();
    scale("free").await.expect("an ungoverned job scales");
    c.running.shutdown().await;
}
