//! Carve-outs that must never fall below what a child holds, at the API
//! server's boundary: writes bizrq's webhook allowed but the API server
//! never stored (a finalizer, a later webhook refusing, a lost
//! resourceVersion race), create tokens claimed by someone else, and a
//! failed write of bizrq's own. After each, the parent's children hold no
//! more than its hard (docs/cluster-mode.md, "Carve-outs follow stored
//! children").

use crate::admission::{carve, quotas, refusal, settles};
use crate::cluster::{Cluster, T0};
use crate::fakeapi::BIZRQ_USER;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

const GPU: &str = "requests.nvidia.com/gpu";
const NLP_PATH: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas/nlp";

/// A quota AdmissionReview as kube-apiserver sends it, from `user`.
fn quota_review(uid: &str, op: &str, user: &str, object: Value, old: Value) -> Value {
    let name = object["metadata"]["name"]
        .as_str()
        .or(old["metadata"]["name"].as_str())
        .unwrap()
        .to_string();
    let mut r = crate::common::fixture("quota-create.json");
    r["request"]["uid"] = json!(uid);
    r["request"]["operation"] = json!(op);
    r["request"]["name"] = json!(name);
    r["request"]["userInfo"] =
        json!({"username": user, "uid": "u", "groups": ["system:authenticated"]});
    r["request"]["object"] = object;
    r["request"]["oldObject"] = old;
    r
}

fn child(name: &str, gpus: &str) -> Value {
    json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": name}, "spec": {"parent": "ai", "hard": {GPU: gpus}}})
}

/// Create `name` under ai through the JSON API; the HTTP status.
async fn try_create(c: &Cluster, name: &str, gpus: &str) -> (StatusCode, Value) {
    c.server
        .api(Method::POST, "/api/v1/quotas", Some(child(name, gpus)))
        .await
}

/// The resourceVersion the API server is at (of quota `name`'s last write).
fn rv_of(c: &Cluster, name: &str) -> u64 {
    c.fake.quota(name)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// No version of `parent` stored after `after` lacked `child`'s carve-out
/// of `gpus`: not even for a moment was the room free for a sibling.
fn never_freed(c: &Cluster, parent: &str, child: &str, gpus: &str, after: u64) {
    for v in c.fake.quota_versions(parent, after) {
        assert_eq!(
            v["status"]["children"][child]["hard"][GPU], gpus,
            "{parent} freed {child}'s room: {}",
            v["status"]
        );
    }
}

async fn set_finalizers(c: &Cluster, name: &str, finalizers: Value) {
    quotas(c.kubectl("alice"))
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .unwrap();
}

/// A kubectl delete of a child kept by a finalizer: the review frees
/// nothing, a sibling cannot take the room, the re-check keeps it; once the
/// finalizer goes, the carve-out comes back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_held_by_a_finalizer_keeps_the_carve_out_until_the_child_is_gone() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    c.server.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    set_finalizers(&c, "nlp", json!(["example.com/keep"])).await;
    let before = rv_of(&c, "nlp").max(rv_of(&c, "ai"));
    quotas(c.kubectl("alice"))
        .delete("nlp", &DeleteParams::default())
        .await
        .unwrap();
    let nlp = c.fake.quota("nlp");
    assert!(nlp["metadata"]["deletionTimestamp"].is_string(), "{nlp}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    let (st, v) = try_create(&c, "cv", "12").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "10 left: {v}");
    // The parent's re-check, due after the delete, sees the child.
    tokio::time::sleep(bizrq::service::RECHECK_DELAY + Duration::from_secs(1)).await;
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    never_freed(&c, "ai", "nlp", "6", before);
    // The finalizer goes, the child with it: the carve-out is returned,
    // though young (made moments ago on this test's clock).
    set_finalizers(&c, "nlp", Value::Null).await;
    assert!(c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "nlp")
        .is_none());
    settles(&c, "ai", "nlp", "0").await;
    let (st, v) = try_create(&c, "cv", "16").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    c.running.shutdown().await;
}

/// A DELETE bizrq allowed and another webhook (or anything after it)
/// refused: the child stays, and so does its carve-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_refused_after_bizrq_allowed_it_frees_nothing() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    c.server.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    let nlp = c.fake.quota("nlp");
    let before = rv_of(&c, "nlp").max(rv_of(&c, "ai"));
    for i in 0..3 {
        let review = quota_review(
            &format!("refused-later-{i}"),
            "DELETE",
            "alice",
            Value::Null,
            nlp.clone(),
        );
        let r = c.server.review("/validate/quotas", &review).await;
        assert_eq!(r["allowed"], true, "{r}");
        assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    }
    let (st, v) = try_create(&c, "cv", "12").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "10 left: {v}");
    let (st, v) = try_create(&c, "cv", "10").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "16".into()));
    never_freed(&c, "ai", "nlp", "6", before);
    c.running.shutdown().await;
}

/// bizrq's own delete (the JSON API) of a child a finalizer keeps: the
/// carve-out is returned only once a read shows the child gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bizrqs_own_delete_of_a_terminating_child_returns_the_carve_out_once_it_is_gone() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    c.server.create_quota("nlp", "ai", json!({GPU: "6"})).await;
    set_finalizers(&c, "nlp", json!(["example.com/keep"])).await;
    let before = rv_of(&c, "nlp").max(rv_of(&c, "ai"));
    let (st, v) = c
        .server
        .api(Method::DELETE, "/api/v1/quotas/nlp", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(c.fake.quota("nlp")["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    let (st, v) = try_create(&c, "cv", "12").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "10 left: {v}");
    never_freed(&c, "ai", "nlp", "6", before);
    set_finalizers(&c, "nlp", Value::Null).await;
    settles(&c, "ai", "nlp", "0").await;
    c.running.shutdown().await;
}

/// Two updates of nlp on the same resourceVersion, both reviewed (4 → 10,
/// then 4 → 2); the API server stores the raise. The carve-out covers the
/// raise whichever order the reviews came in; a lowering that was stored
/// frees the room once its carve-out is no longer young.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_allowed_but_never_stored_leaves_no_carve_out_below_the_child() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    c.server.create_quota("nlp", "ai", json!({GPU: "4"})).await;
    let nlp = c.fake.quota("nlp");
    let with = |gpus: &str| {
        let mut o = nlp.clone();
        o["spec"]["hard"][GPU] = json!(gpus);
        o
    };
    for (uid, gpus) in [("raise", "10"), ("lower", "2")] {
        let review = quota_review(uid, "UPDATE", "alice", with(gpus), nlp.clone());
        let r = c.server.review("/validate/quotas", &review).await;
        assert_eq!(r["allowed"], true, "{r}");
    }
    assert_eq!(carve(&c, "ai", "nlp"), (Some("10".into()), "10".into()));
    let reviewed = rv_of(&c, "ai");
    // The raise is stored; the lowering lost on its resourceVersion.
    c.fake.put(with("10"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(carve(&c, "ai", "nlp"), (Some("10".into()), "10".into()));
    let (st, v) = try_create(&c, "cv", "7").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "6 left: {v}");
    never_freed(&c, "ai", "nlp", "10", reviewed);
    // Had the lowering been stored, its room is freed after the window.
    c.fake.put(with("2"));
    c.set_clock(T0 + quota::tree::CARVE_TTL_MS + 1);
    let mut touch = c.fake.quota("ai");
    touch["metadata"]["labels"] = json!({"touched": "1"});
    c.fake.put(touch);
    c.until("ai", "the lowering stored and repaired", |q| {
        q["status"]["children"]["nlp"]["hard"][GPU] == "2"
    })
    .await;
    c.running.shutdown().await;
}

/// The create token is bizrq's word to itself: from anyone else it is
/// ignored (their create carves under its own review), so a copied token
/// neither takes over nor resizes bizrq's create in flight; and a create
/// under a token carves exactly what it was made for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_token_is_honoured_only_from_bizrqs_own_identity() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    // bizrq's create of nlp, in flight: carved under "tok", not yet stored.
    let mut ai = c.fake.quota("ai");
    ai["status"]["children"]["nlp"] =
        json!({"hard": {GPU: "6"}, "since": "2026-11-21T10:00:00.000Z", "uid": "tok"});
    ai["status"]["used"][GPU] = json!("6");
    c.fake.put(ai);
    c.until("ai", "the in-flight carve-out seen", |q| {
        q["status"]["children"]["nlp"]["uid"] == "tok"
    })
    .await;
    for gpus in ["6", "12"] {
        let mut obj = child("nlp", gpus);
        obj["metadata"]["annotations"] = json!({"bizrq.io/create-token": "tok"});
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        let (code, _, msg) = refusal(
            quotas(c.kubectl("alice"))
                .create(&PostParams::default(), &obj)
                .await,
        );
        assert_eq!(code, 409, "{msg}");
        assert!(
            msg.contains("bizrq nlp is being created by another request"),
            "{msg}"
        );
    }
    assert!(c
        .fake
        .get("bizrq.io", "bizgroupresourcequotas", "", "nlp")
        .is_none());
    // bizrq's own identity, but another size than was carved: refused.
    let mut own = child("nlp", "12");
    own["metadata"]["annotations"] = json!({"bizrq.io/create-token": "tok"});
    let review = quota_review("own-resized", "CREATE", BIZRQ_USER, own, Value::Null);
    let r = c.server.review("/validate/quotas", &review).await;
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(msg.contains("a create cannot resize it"), "{msg}");
    let ai = c.fake.quota("ai");
    assert_eq!(ai["status"]["children"]["nlp"]["uid"], "tok", "{ai}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    // Its own size, from bizrq: the create it was made for passes.
    let mut own = child("nlp", "6");
    own["metadata"]["annotations"] = json!({"bizrq.io/create-token": "tok"});
    let review = quota_review("own", "CREATE", BIZRQ_USER, own, Value::Null);
    let r = c.server.review("/validate/quotas", &review).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("6".into()), "6".into()));
    c.running.shutdown().await;
}

/// bizrq's raise of nlp (4 → 10) fails at the API server while another
/// writer raises it to 12: the failed write does not set the carve-out
/// back to the 4 it read before (the child holds 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_raise_never_sets_the_carve_out_back_below_the_child() {
    let c = Cluster::start().await;
    c.server.create_quota("ai", "", json!({GPU: "16"})).await;
    c.server.create_quota("nlp", "ai", json!({GPU: "4"})).await;
    c.fake.conflict_next(NLP_PATH, 10_000);
    let put = c.server.api(
        Method::PUT,
        "/api/v1/quotas/nlp",
        Some(json!({"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {GPU: "10"}}})),
    );
    let other = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Another writer's raise to 12, reviewed (carved) and stored.
        let mut nlp = c.fake.quota("nlp");
        nlp["spec"]["hard"][GPU] = json!("12");
        let mut ai = c.fake.quota("ai");
        ai["status"]["children"]["nlp"]["hard"][GPU] = json!("12");
        ai["status"]["used"][GPU] = json!("12");
        c.fake.put(ai);
        c.fake.put(nlp);
    };
    let ((st, v), ()) = tokio::join!(put, other);
    assert_ne!(st, StatusCode::OK, "{v}");
    c.fake.conflict_next(NLP_PATH, 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(c.fake.quota("nlp")["spec"]["hard"][GPU], "12");
    assert_eq!(carve(&c, "ai", "nlp"), (Some("12".into()), "12".into()));
    let (st, v) = try_create(&c, "cv", "5").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "4 left: {v}");
    c.running.shutdown().await;
}
