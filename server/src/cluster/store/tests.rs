//! The API server played by a `tower_test` mock: each test asserts the
//! exact requests the store makes and answers them.

use super::*;
use crate::metrics::Metrics;
use crate::service::{Service, ServiceError};
use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{json, Value};
use std::sync::Arc;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock() -> (Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(svc, "default"), handle)
}

fn object(name: &str, rv: &str, used_gpu: &str) -> Value {
    json!({
        "apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": name, "resourceVersion": rv, "uid": "u-1", "creationTimestamp": "2026-11-21T10:00:00Z"},
        "spec": {"parent": "", "hard": {"requests.nvidia.com/gpu": "16"}},
        "status": {"hard": {"requests.nvidia.com/gpu": "16"}, "used": {"requests.nvidia.com/gpu": used_gpu}, "selfUsed": {"requests.nvidia.com/gpu": used_gpu}}
    })
}

fn conflict(name: &str) -> Response<Body> {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
        "message": format!("Operation cannot be fulfilled on bizgroupresourcequotas.bizrq.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again")});
    Response::builder()
        .status(409)
        .body(Body::from(serde_json::to_vec(&status).unwrap()))
        .unwrap()
}

fn ok(v: &Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .body(Body::from(serde_json::to_vec(v).unwrap()))
        .unwrap()
}

async fn expect(
    handle: &mut Handle,
    method: Method,
    path: &str,
) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
    let (req, send) = handle.next_request().await.expect("a request");
    assert_eq!(req.method(), method);
    assert_eq!(req.uri().path(), path);
    let bytes = http_body_util::BodyExt::collect(req.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (body, send)
}

const PATH: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas";

/// `kubectl get bizrq` reads its columns from status.summary, and
/// people read cash in card-hours: both ride in the one status write
/// (one compare-and-swap), derived from what it writes.
#[tokio::test]
async fn the_status_write_carries_the_summary_and_readable_cash() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache).with_keys(quota::KeyConfig::default());
    let mut current = to_stored(&serde_json::from_value(object("nlp", "7", "0")).unwrap()).unwrap();
    current.quota.spec.hard.insert(
        "cash/requests.nvidia.com/gpu".into(),
        "1000".parse().unwrap(),
    );
    let mut status = current.quota.status.clone();
    status
        .used
        .insert("requests.nvidia.com/gpu".into(), "12".parse().unwrap());
    status.used.insert(
        "cash/requests.nvidia.com/gpu".into(),
        "422200u".parse().unwrap(),
    );
    // A quota without children: what runs in its subtree is its own.
    status
        .self_used
        .insert("requests.nvidia.com/gpu".into(), "12".parse().unwrap());
    let per_mille = quota::budget::PRICE_ONE / quota::cash::PER_MILLE;
    status.add_accrued(
        "cash/requests.nvidia.com/gpu",
        quota::budget::from_quantity("422200u".parse().unwrap()) / per_mille,
    );
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
        let mut written = body.clone();
        written["metadata"]["resourceVersion"] = json!("8");
        send.send_response(ok(&written));
        body
    });
    assert_eq!(store.replace_status(&current, &status).await.unwrap(), 8);
    let body = server.await.unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "7");
    assert_eq!(
        body["status"]["used"]["cash/requests.nvidia.com/gpu"],
        "422200u"
    );
    assert_eq!(
        body["status"]["summary"],
        // Whole, a member it lacks removed (`null`) rather than kept.
        json!({"gpu": "12/16", "cardHoursLeft": "999.58", "borrowing": null, "reclaimPending": 0, "queued": 0})
    );
    assert_eq!(
        body["status"]["readable"],
        json!({"cash/requests.nvidia.com/gpu": "0.422 of 1000 card-hours used, 999.58 left"})
    );
}

/// The controller may write a new quota's status before the creator
/// does: the creator's 409 is not a failed create.
#[tokio::test]
async fn a_create_whose_status_the_controller_wrote_first_succeeds() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let q = to_stored(&serde_json::from_value(object("nlp", "1", "0")).unwrap())
        .unwrap()
        .quota;
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::POST, PATH).await;
        let mut created = object("nlp", "5", "0");
        created.as_object_mut().unwrap().remove("status");
        send.send_response(ok(&created));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "5");
        send.send_response(conflict("nlp"));
        let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/nlp")).await;
        send.send_response(ok(&object("nlp", "6", "0")));
    });
    let stored = store.create(&q).await.expect("created");
    assert_eq!(stored.version, 6, "the controller's status is kept");
    server.await.unwrap();
}

#[tokio::test]
async fn status_write_carries_the_resource_version_and_409_is_a_conflict() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let current = to_stored(&serde_json::from_value(object("nlp", "7", "0")).unwrap()).unwrap();
    let mut status = current.quota.status.clone();
    status
        .used
        .insert("requests.nvidia.com/gpu".into(), "4".parse().unwrap());
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(body["status"]["used"]["requests.nvidia.com/gpu"], "4");
        send.send_response(conflict("nlp"));
    });
    let err = store.replace_status(&current, &status).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref n) if n == "nlp"),
        "{err:?}"
    );
    server.await.unwrap();
}

/// The service's compare-and-swap over the cluster: a 409 leads to a
/// fresh GET and a retry from the new resourceVersion.
#[tokio::test]
async fn a_conflict_is_re_read_and_retried() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let mut svc = Service::new(
        Arc::new(store),
        Default::default(),
        Default::default(),
        Arc::new(Metrics::default()),
    );
    svc.accrue_from_ledger = false;
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/nlp")).await;
        send.send_response(ok(&object("nlp", "7", "0")));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        send.send_response(conflict("nlp"));
        // Someone else charged 10 meanwhile.
        let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/nlp")).await;
        let mut theirs = object("nlp", "8", "10");
        theirs["status"]["workloads"] = json!({"apps/Deployment/ml/other": {"podSets": [{"name": "main", "count": 10, "perPod": {"requests.nvidia.com/gpu": "1"}}], "since": "2026-11-21T10:00:00.000Z"}});
        send.send_response(ok(&theirs));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{PATH}/nlp/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "8");
        assert_eq!(
            body["status"]["used"]["requests.nvidia.com/gpu"], "14",
            "charged on top of the fresh read"
        );
        let mut written = body.clone();
        written["metadata"]["resourceVersion"] = "9".into();
        send.send_response(ok(&written));
    });
    let per_pod: quota::ResourceList =
        [("requests.nvidia.com/gpu".to_string(), "1".parse().unwrap())].into();
    let sets = vec![quota::workload::PodSet {
        name: "main".into(),
        count: 4,
        per_pod,
        qos: None,
    }];
    svc.charge(crate::service::ChargeRequest::new(
        "nlp",
        "apps/Deployment/ml/mine",
        sets,
        "uid",
    ))
    .await
    .unwrap();
    server.await.unwrap();
    assert_eq!(svc.metrics.cas_conflicts.get(), 1);
}

/// A status write is a merge patch of what changed, carrying the
/// version it was decided on; the rest of the status is not sent.
#[tokio::test]
async fn the_status_write_patches_only_what_changed() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let mut start: BizGroupResourceQuota = serde_json::from_value(object("nlp", "7", "0")).unwrap();
    let charge = |n: i64| quota::object::Charge {
        pod_sets: vec![quota::workload::PodSet {
            name: "main".into(),
            count: n,
            per_pod: [("requests.nvidia.com/gpu".to_string(), "1".parse().unwrap())].into(),
            qos: None,
        }],
        hpa: None,
        since: "2026-11-21T10:00:00.000Z".into(),
        uid: format!("u-{n}"),
        admitted: None,
    };
    let st = &mut start.status.as_mut().unwrap().0;
    for w in ["a", "b", "c"] {
        st.workloads
            .insert(format!("apps/Deployment/ml/{w}"), charge(1));
    }
    let current = to_stored(&start).unwrap();
    let mut status = current.quota.status.clone();
    status
        .workloads
        .insert("apps/Deployment/ml/b".into(), charge(2));
    status.workloads.remove("apps/Deployment/ml/c");
    status
        .used
        .insert("requests.nvidia.com/gpu".into(), "3".parse().unwrap());
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), Method::PATCH);
        assert_eq!(req.uri().path(), format!("{PATH}/nlp/status"));
        assert_eq!(
            req.headers()["content-type"],
            "application/merge-patch+json"
        );
        let accept = req.headers()["accept"].to_str().unwrap();
        assert!(accept.contains("as=PartialObjectMetadata"), "{accept}");
        let bytes = http_body_util::BodyExt::collect(req.into_body())
            .await
            .unwrap()
            .to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        send.send_response(ok(
            &json!({"metadata": {"name": "nlp", "resourceVersion": "8"}}),
        ));
        body
    });
    assert_eq!(store.replace_status(&current, &status).await.unwrap(), 8);
    let body = server.await.unwrap();
    assert_eq!(body["metadata"], json!({"resourceVersion": "7"}));
    assert_eq!(
        body["status"]["workloads"],
        json!({"apps/Deployment/ml/b": {"podSets": [{"name": "main", "count": 2, "perPod": {"requests.nvidia.com/gpu": "1"}}], "uid": "u-2"},
               "apps/Deployment/ml/c": null}),
        "only the changed charge's changed members, and the one released"
    );
    assert_eq!(
        body["status"]["used"],
        json!({"requests.nvidia.com/gpu": "3"})
    );
    assert!(body["status"]["hard"].is_null(), "unchanged: not sent");
    assert!(body["spec"].is_null());
}

/// Proving a kept copy current reads the object's metadata alone, from
/// the API server.
#[tokio::test]
async fn version_reads_metadata_only() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().path(), format!("{PATH}/nlp"));
        let accept = req.headers()["accept"].to_str().unwrap().to_string();
        assert!(accept.contains("as=PartialObjectMetadata"), "{accept}");
        send.send_response(ok(
            &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "nlp", "resourceVersion": "12", "uid": "u-nlp"}}),
        ));
        let (_, send) = handle.next_request().await.expect("a request");
        send.send_response(
            Response::builder()
                .status(404)
                .body(Body::from(
                    serde_json::to_vec(
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": "not found"}),
                    )
                    .unwrap(),
                ))
                .unwrap(),
        );
    });
    let s = store.stamp("nlp").await.unwrap().unwrap();
    assert_eq!((s.version, s.uid.as_str()), (12, "u-nlp"));
    assert!(store.stamp("gone").await.unwrap().is_none());
    server.await.unwrap();
}

#[tokio::test]
async fn create_posts_then_writes_status_and_delete_names_its_version() {
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let q = Quota::new(
        "cv",
        quota::QuotaSpec {
            parent: String::new(),
            hard: [("pods".to_string(), "5".parse().unwrap())].into(),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    );
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::POST, PATH).await;
        assert_eq!(body["metadata"]["name"], "cv");
        assert!(body["metadata"]["resourceVersion"].is_null());
        let mut created = body.clone();
        created["metadata"]["resourceVersion"] = "100".into();
        created.as_object_mut().unwrap().remove("status");
        send.send_response(ok(&created));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{PATH}/cv/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "100");
        assert_eq!(body["status"]["used"]["pods"], "0");
        let mut written = body.clone();
        written["metadata"]["resourceVersion"] = "101".into();
        send.send_response(ok(&written));
        let (body, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/cv")).await;
        assert_eq!(body["preconditions"]["resourceVersion"], "101");
        send.send_response(ok(
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
        ));
    });
    let stored = store.create(&q).await.unwrap();
    assert_eq!(stored.version, 101);
    store.delete(&stored).await.unwrap();
    server.await.unwrap();
}

/// A quota as the watch holds it: `used_gpu` of its own running,
/// `kids` carved out of it (8 cards each), and the GPU column stored.
fn with_summary(name: &str, parent: &str, own: &str, kids: &[&str], gpu: &str) -> Value {
    let mut o = object(name, "5", own);
    o["spec"]["parent"] = json!(parent);
    for k in kids {
        o["status"]["children"][*k] =
            json!({"hard": {"requests.nvidia.com/gpu": "8"}, "since": "2026-11-21T10:00:00Z"});
    }
    o["status"]["summary"] = json!({"gpu": gpu, "reclaimPending": 0, "queued": 0});
    o
}

/// At a parent the GPU column reads its subtree, from the watch's
/// copy of its descendants: a child's write leaves the parents above
/// it to restate, and only those whose stored figure differs are
/// given (the controller writes them).
#[tokio::test]
async fn a_parents_column_reads_its_subtree_and_a_stale_one_is_found_above_a_write() {
    let (client, _handle) = mock();
    let (cache, mut writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let fed = store.feed();
    for o in [
        // 3 run in the team; the department runs 1 of its own and
        // carved 8 out for the team: its column said 9 (carve-out
        // and own), the subtree runs 4. The root's says 4, right.
        with_summary("team", "dept", "3", &[], "3/16"),
        with_summary("dept", "org", "1", &["team"], "9/16"),
        with_summary("org", "", "0", &["dept"], "4/16"),
        with_summary("other", "org", "0", &[], "0/16"),
    ] {
        let k: BizGroupResourceQuota = serde_json::from_value(o).unwrap();
        let ev = kube::runtime::watcher::Event::Apply(k);
        writer.apply_watcher_event(&ev);
        fed(&ev);
    }
    let dept = store.get_many(&["dept".to_string()]).await.unwrap();
    let in_use = store.in_use("dept", &dept[0].quota.status);
    assert_eq!(
        quota::resources::get(&in_use, "requests.nvidia.com/gpu"),
        "4".parse().unwrap()
    );
    let stale = |names: &[&str]| -> Vec<String> {
        let marked: Vec<(String, u64)> =
            (0..).zip(names).map(|(i, n)| (n.to_string(), i)).collect();
        store
            .stale_summaries(&marked)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    assert_eq!(stale(&["team"]), ["dept"]);
    // A quota gone from the watch marks nothing; its parent is marked
    // by the watch's delete.
    assert!(stale(&["gone"]).is_empty());
    assert!(stale(&["other"]).is_empty());
    assert_eq!(stale(&["org", "dept"]), ["dept"]);
}

/// The marks come from the cache's own feed, after the cache applied
/// each event: a relist marks its quotas only once the cache holds the
/// whole list, a delete marks the parent once the child is gone from
/// the cache, and marks judged stale come oldest first (an ancestor
/// at its first descendant's place), a mark given back keeping its
/// place.
#[tokio::test]
async fn summary_marks_are_judged_on_a_cache_that_holds_them() {
    use kube::runtime::watcher::Event;
    let (client, _handle) = mock();
    let (cache, mut writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let fed = store.feed();
    let feed = |writer: &mut reflector::store::Writer<BizGroupResourceQuota>, ev| {
        // As `reflector` does: the cache first, then the event on.
        writer.apply_watcher_event(&ev);
        fed(&ev);
    };
    let quota = |o: Value| -> BizGroupResourceQuota { serde_json::from_value(o).unwrap() };
    feed(&mut writer, Event::Init);
    for o in [
        with_summary("team", "dept", "3", &[], "3/16"),
        with_summary("dept", "org", "1", &["team"], "4/16"),
        with_summary("org", "", "0", &["dept"], "4/16"),
    ] {
        feed(&mut writer, Event::InitApply(quota(o)));
    }
    // The cache holds none of the list yet: no mark to judge on it.
    assert!(store.cached().is_empty());
    assert!(store.summary_marks().is_empty());
    feed(&mut writer, Event::InitDone);
    let listed = store.summary_marks();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["team", "dept", "org"]);
    // Every figure is right: nothing to restate. The department's
    // subtree is walked from the feed's index: 1 of its own, 3 below.
    assert!(store.stale_summaries(&listed).is_empty());
    let gpu_in_use = |name: &str| {
        let k = store.cache.get(&reflector::ObjectRef::new(name)).unwrap();
        let in_use = store.in_use(name, &k.status.as_ref().unwrap().0);
        quota::resources::get(&in_use, "requests.nvidia.com/gpu")
    };
    assert_eq!(gpu_in_use("dept"), "4".parse().unwrap());
    assert_eq!(gpu_in_use("org"), "4".parse().unwrap());
    // The team is deleted: the mark is its parent, and judged on a
    // cache without the team, the department's and the root's columns
    // (4 in use, 1 now) are stale; in the order marked.
    feed(
        &mut writer,
        Event::Delete(quota(with_summary("team", "dept", "3", &[], "3/16"))),
    );
    let marked = store.summary_marks();
    assert_eq!(marked.len(), 1);
    assert_eq!(marked[0].0, "dept");
    let stale = store.stale_summaries(&marked);
    let names: Vec<&str> = stale.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["dept", "org"]);
    assert_eq!(gpu_in_use("dept"), "1".parse().unwrap());
    assert_eq!(gpu_in_use("org"), "1".parse().unwrap());
    // A mark given back keeps its place ahead of a later one.
    feed(
        &mut writer,
        Event::Apply(quota(with_summary("org", "", "0", &["dept"], "4/16"))),
    );
    store.put_back_summary_marks(marked);
    let again: Vec<String> = store.summary_marks().into_iter().map(|(n, _)| n).collect();
    assert_eq!(again, ["dept", "org"]);
}

#[tokio::test]
async fn lists_and_workload_lookups_come_from_the_watch_cache() {
    let (client, mut handle) = mock();
    let (cache, mut writer) = reflector::store();
    let mut child: BizGroupResourceQuota = serde_json::from_value(object("cv", "3", "0")).unwrap();
    child.spec.parent = "ai".into();
    child.status.as_mut().unwrap().0.workloads.insert(
        "apps/Deployment/ml/web".into(),
        quota::object::Charge {
            pod_sets: vec![],
            hpa: None,
            since: String::new(),
            uid: String::new(),
            admitted: None,
        },
    );
    let root: BizGroupResourceQuota = serde_json::from_value(object("ai", "2", "0")).unwrap();
    let store = ClusterStore::new(client, cache);
    let lists = prometheus_client::metrics::counter::Counter::default();
    let store = store.count_lookup_lists(lists.clone());
    // As `start`'s feed: the reflector applies, then the feed sees.
    let fed = store.feed();
    let mut apply = |ev: kube::runtime::watcher::Event<BizGroupResourceQuota>| {
        writer.apply_watcher_event(&ev);
        fed(&ev);
    };
    use kube::runtime::watcher::Event;
    apply(Event::Init);
    apply(Event::InitApply(child.clone()));
    apply(Event::InitApply(root));
    apply(Event::InitDone);
    let names: Vec<String> = store
        .list()
        .await
        .unwrap()
        .iter()
        .map(|s| s.quota.name().to_string())
        .collect();
    assert_eq!(names, ["ai", "cv"]);
    assert_eq!(store.children("ai").await.unwrap().len(), 1);
    // The forest's stamps and re-reads come from the same copy.
    let stamps = store.stamps().await.unwrap();
    let seen: Vec<(&str, i64)> = stamps
        .iter()
        .map(|s| (s.name.as_str(), s.version))
        .collect();
    assert_eq!(seen, [("ai", 2), ("cv", 3)]);
    let some = store
        .get_many(&["cv".to_string(), "gone".to_string()])
        .await
        .unwrap();
    assert_eq!(some.len(), 1);
    assert_eq!((some[0].quota.name(), some[0].version), ("cv", 3));
    assert_eq!(
        store
            .workload_quota("apps/Deployment/ml/web")
            .await
            .unwrap()
            .as_deref(),
        Some("cv")
    );
    let bound = std::time::Duration::from_secs(5);
    // A charge written here (version 10) that the watch has not yet
    // delivered: the lookup waits for the watch, which wakes it.
    store.reach.wrote(10);
    let store = Arc::new(store);
    let late = tokio::spawn({
        let store = store.clone();
        async move { store.workload_quota("apps/Deployment/ml/late").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!late.is_finished(), "waits for the watch");
    let mut charged = child.clone();
    charged.metadata.resource_version = Some("10".into());
    let held = charged.status.as_ref().unwrap().0.workloads["apps/Deployment/ml/web"].clone();
    charged
        .status
        .as_mut()
        .unwrap()
        .0
        .workloads
        .insert("apps/Deployment/ml/late".into(), held);
    apply(Event::Apply(charged));
    let found = tokio::time::timeout(bound, late)
        .await
        .expect("woken by the watch");
    assert_eq!(found.unwrap().unwrap().as_deref(), Some("cv"));
    assert_eq!(lists.get(), 0);
    // A watch that never reaches this replica's latest write: past
    // `CATCH_UP`, one fresh LIST answers, counted.
    store.reach.wrote(20);
    let api = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), "GET");
        assert_eq!(req.uri().path(), "/apis/bizrq.io/v1/bizgroupresourcequotas");
        let list = json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuotaList", "metadata": {"resourceVersion": "20"}, "items": [object("ai", "2", "0")]});
        send.send_response(
            Response::builder()
                .body(Body::from(list.to_string().into_bytes()))
                .unwrap(),
        );
    });
    let asked = std::time::Instant::now();
    assert_eq!(
        store
            .workload_quota("apps/Deployment/ml/none")
            .await
            .unwrap(),
        None
    );
    assert!(asked.elapsed() >= CATCH_UP, "listed only past the bound");
    api.await.unwrap();
    assert_eq!(lists.get(), 1);
}

/// A lookup the cache misses, for a workload it can name: one GET of
/// the workload's metadata; no label answers at once, a label adds one
/// GET of the quota it names; a refused GET falls back to one LIST,
/// counted twice. Each request asserted, and none else made.
#[tokio::test]
async fn a_miss_reads_the_workload_then_the_quota_its_label_names() {
    let (client, mut handle) = mock();
    let (cache, mut writer) = reflector::store();
    let lists = prometheus_client::metrics::counter::Counter::default();
    let failures = prometheus_client::metrics::counter::Counter::default();
    let store = ClusterStore::new(client, cache)
        .count_lookup_lists(lists.clone())
        .count_lookup_read_failures(failures.clone());
    let fed = store.feed();
    use kube::runtime::watcher::Event;
    let ml: BizGroupResourceQuota = serde_json::from_value(object("ml", "2", "0")).unwrap();
    for ev in [Event::Init, Event::InitApply(ml), Event::InitDone] {
        writer.apply_watcher_event(&ev);
        fed(&ev);
    }
    let deployment = quota::workload::adapter_for_kind("apps", "Deployment").unwrap();
    let at = |name: &'static str| WorkloadAt {
        adapter: deployment,
        version: "v1",
        namespace: "ml",
        name,
    };
    let meta = |name: &str, labels: Value| {
        ok(
            &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": "ml", "labels": labels}}),
        )
    };
    let deployments = "/apis/apps/v1/namespaces/ml/deployments";
    let store = Arc::new(store);
    let ask = |name: &'static str| {
        let store = store.clone();
        tokio::spawn(async move {
            let wref = format!("apps/Deployment/ml/{name}");
            store.workload_quota_at(&wref, &at(name)).await
        })
    };

    let free = ask("free");
    let (_, send) = expect(&mut handle, Method::GET, &format!("{deployments}/free")).await;
    send.send_response(meta("free", json!({"app": "free"})));
    assert_eq!(free.await.unwrap().unwrap(), None, "ungoverned");

    let web = ask("web");
    let (_, send) = expect(&mut handle, Method::GET, &format!("{deployments}/web")).await;
    send.send_response(meta(
        "web",
        json!({quota::keys::QUOTA_LABEL: "ml", "app": "web"}),
    ));
    let (_, send) = expect(&mut handle, Method::GET, &format!("{PATH}/ml")).await;
    let mut charged = object("ml", "3", "1");
    charged["status"]["workloads"] = json!({"apps/Deployment/ml/web": {
        "podSets": [], "since": "2026-11-21T10:00:00.000Z", "uid": "d-1"}});
    send.send_response(ok(&charged));
    assert_eq!(
        web.await.unwrap().unwrap().as_deref(),
        Some("ml"),
        "another replica's charge, not yet in the cache"
    );
    assert_eq!((lists.get(), failures.get()), (0, 0));

    let hidden = ask("hidden");
    let (_, send) = expect(&mut handle, Method::GET, &format!("{deployments}/hidden")).await;
    let forbidden = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": "deployments.apps \"hidden\" is forbidden"});
    send.send_response(
        Response::builder()
            .status(403)
            .body(Body::from(serde_json::to_vec(&forbidden).unwrap()))
            .unwrap(),
    );
    let (_, send) = expect(&mut handle, Method::GET, PATH).await;
    send.send_response(ok(
        &json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuotaList",
        "metadata": {"resourceVersion": "3"}, "items": [object("ml", "3", "0")]}),
    ));
    assert_eq!(hidden.await.unwrap().unwrap(), None);
    assert_eq!((lists.get(), failures.get()), (1, 1));
    let more = tokio::time::timeout(std::time::Duration::from_millis(50), handle.next_request());
    assert!(more.await.is_err(), "no other request");
}

/// The decision behind a miss: an answer once the cache has read up to
/// this replica's latest write, never before the first complete list.
#[test]
fn a_miss_is_an_answer_only_on_a_cache_at_or_past_the_latest_write() {
    assert!(
        !miss_is_answer(None, 0),
        "a cache never listed answers nothing"
    );
    assert!(miss_is_answer(Some(0), 0));
    assert!(miss_is_answer(Some(12), 10));
    assert!(miss_is_answer(Some(10), 10));
    assert!(!miss_is_answer(Some(9), 10));
}

/// The cache's reach follows what the reflector swapped in: a relist's
/// objects only once it is complete, and never moves back.
#[test]
fn the_reach_follows_events_and_whole_lists_only() {
    use kube::runtime::watcher::Event;
    let reach = Reach::default();
    let at = |rv: &str| -> BizGroupResourceQuota {
        serde_json::from_value(object("ai", rv, "0")).unwrap()
    };
    let seen = || *reach.seen.borrow();
    assert_eq!(seen(), None);
    reach.seen(&Event::Init);
    reach.seen(&Event::InitApply(at("7")));
    reach.seen(&Event::InitApply(at("4")));
    assert_eq!(seen(), None, "a list not yet complete");
    reach.seen(&Event::InitDone);
    assert_eq!(seen(), Some(7));
    reach.seen(&Event::Apply(at("9")));
    assert_eq!(seen(), Some(9));
    reach.seen(&Event::Delete(at("11")));
    assert_eq!(seen(), Some(11));
    // A relist after a compaction can hold only older objects (the
    // newest was deleted): the reach does not move back.
    reach.seen(&Event::Init);
    reach.seen(&Event::InitApply(at("8")));
    reach.seen(&Event::InitDone);
    assert_eq!(seen(), Some(11));
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": message});
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&status).unwrap()))
        .unwrap()
}

/// What a person gets from the JSON API when the API server answers
/// bizrq's spec write (one request, never retried) with `answer`.
async fn refused_write(answer: Response<Body>) -> (u16, String, String) {
    use axum::response::IntoResponse;
    let (client, mut handle) = mock();
    let (cache, _writer) = reflector::store();
    let store = ClusterStore::new(client, cache);
    let current = to_stored(&serde_json::from_value(object("nlp", "7", "0")).unwrap()).unwrap();
    let mut raised = current.quota.clone();
    raised
        .spec
        .hard
        .insert("requests.nvidia.com/gpu".into(), "20".parse().unwrap());
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::PUT, &format!("{PATH}/nlp")).await;
        send.send_response(answer);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(100), handle.next_request())
                .await
                .is_err(),
            "a refusal is not retried as a stale version"
        );
    });
    let err = store.replace(&current, &raised).await.unwrap_err();
    server.await.unwrap();
    let e: ServiceError = err.into();
    let resp = crate::edge::ApiError::Service(e).into_response();
    let code = resp.status().as_u16();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    (
        code,
        v["error"]["reason"].as_str().unwrap().to_string(),
        v["error"]["message"].as_str().unwrap().to_string(),
    )
}

/// bizrq's own webhook refused bizrq's own write (another replica
/// decided on a fresher parent): the person reads bizrq's reason, not
/// "internal error", and not the API server's wrapping.
#[tokio::test]
async fn a_denial_by_bizrqs_own_webhook_reaches_the_person_in_bizrqs_words() {
    let said = "bizrq nlp needs 20 requests.nvidia.com/gpu carved out of ai, 4 left of 16";
    let (code, reason, message) = refused_write(status(
        403,
        "Forbidden",
        &format!("admission webhook \"quotas.bizrq.io\" denied the request: {said}"),
    ))
    .await;
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (403, "Refused", said)
    );
}

/// Another admission webhook (a policy engine) keeps its name in the
/// message, so the person knows whom to ask.
#[tokio::test]
async fn a_denial_by_another_webhook_names_that_webhook() {
    let msg =
        "admission webhook \"policy.example.com\" denied the request: quotas need an owner label";
    let (code, reason, message) = refused_write(status(403, "Forbidden", msg)).await;
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (403, "Refused", msg)
    );
}

/// A webhook's 409 is its decision (a create in flight, a transfer
/// holding the quota), not a stale resourceVersion.
#[tokio::test]
async fn a_webhooks_conflict_is_its_reason_not_someone_elses_change() {
    let said = "bizrq nlp is held by transfer t-1 until it finishes; try again after it";
    let (code, reason, message) = refused_write(status(
        409,
        "Conflict",
        &format!("admission webhook \"quotas.bizrq.io\" denied the request: {said}"),
    ))
    .await;
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (409, "Conflict", said)
    );
}

/// The CRD's schema refused the object: a 400 with the API server's words.
#[tokio::test]
async fn an_object_the_crd_schema_refuses_is_a_bad_request_in_the_api_servers_words() {
    let msg = "BizGroupResourceQuota.bizrq.io \"nlp\" is invalid: spec.hard: Too many: 300: must have at most 256 items";
    let (code, reason, message) = refused_write(status(422, "Invalid", msg)).await;
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        message,
        format!("bizrq nlp: the API server refused it as invalid: {msg}")
    );
}

/// `failurePolicy: Fail` and no replica answering: a 503 saying the
/// API server could not reach the webhook, and why.
#[tokio::test]
async fn an_unreachable_webhook_is_unavailable_and_says_so() {
    let (code, reason, message) = refused_write(status(
        500,
        "InternalError",
        "Internal error occurred: failed calling webhook \"quotas.bizrq.io\": failed to call webhook: Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": dial tcp 10.96.12.7:443: connect: connection refused",
    ))
    .await;
    assert_eq!((code, reason.as_str()), (503, "Unavailable"));
    assert_eq!(
        message,
        "bizrq nlp was not written: the API server could not reach the admission webhook \
         quotas.bizrq.io (Post \"https://bizrq.bizrq-system.svc:443/validate/quotas?timeout=5s\": \
         dial tcp 10.96.12.7:443: connect: connection refused); check that a bizrq replica is \
         ready (kubectl -n bizrq-system get pods) and try again"
    );
}

/// bizrq's service account may not write (RBAC): the API server's
/// words, for the operator, rather than "internal error".
#[tokio::test]
async fn a_write_rbac_forbids_says_what_the_api_server_said() {
    let msg = "bizgroupresourcequotas.bizrq.io \"nlp\" is forbidden: User \"system:serviceaccount:bizrq-system:bizrq\" cannot update resource \"bizgroupresourcequotas\" in API group \"bizrq.io\" at the cluster scope";
    let (code, _, message) = refused_write(status(403, "Forbidden", msg)).await;
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!("bizrq nlp: the API server refused it: {msg}")
    );
}

/// The label the validating webhook charges by, read from the
/// metadata a lookup GETs: the same rule, controller owners included.
#[test]
fn a_workload_is_bound_by_its_quota_label_as_the_webhook_reads_it() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let deployment = quota::workload::adapter_for_kind("apps", "Deployment").unwrap();
    let replicaset = quota::workload::adapter_for_kind("apps", "ReplicaSet").unwrap();
    let meta = |v: Value| -> ObjectMeta { serde_json::from_value(v).unwrap() };
    let labelled = |q: &str| {
        json!({"name": "web", "namespace": "ml",
            "labels": {quota::keys::QUOTA_LABEL: q, "app": "web"}})
    };
    assert_eq!(
        bound(deployment, &meta(labelled("ml"))),
        Ok(Bound::To("ml".into()))
    );
    assert_eq!(
        bound(
            deployment,
            &meta(json!({"name": "web", "labels": {"app": "web"}}))
        ),
        Ok(Bound::Ungoverned)
    );
    assert_eq!(
        bound(deployment, &meta(labelled(""))),
        Ok(Bound::Ungoverned),
        "an empty label binds to nothing"
    );
    assert_eq!(
        bound(replicaset, &meta(labelled("ml"))),
        Ok(Bound::To("ml".into()))
    );
    let mut owned = labelled("ml");
    owned["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment",
        "name": "web", "uid": "d-1", "controller": true}]);
    assert_eq!(
        bound(replicaset, &meta(owned)),
        Ok(Bound::Ungoverned),
        "a ReplicaSet its Deployment controls is the Deployment's business"
    );
}

/// Only a version as the API server serves one is put in the GET's
/// URL: an HPA's `scaleTargetRef.apiVersion` is the user's text.
#[test]
fn only_a_served_version_reaches_a_url() {
    for ok in ["v1", "v1alpha1", "v2beta1"] {
        assert!(servable_version(ok), "{ok}");
    }
    for bad in [
        "",
        "V1",
        "v1/../../api",
        "v1?watch=true",
        "v1#x",
        "v 1",
        &"v".repeat(64),
    ] {
        assert!(!servable_version(bad), "{bad:?}");
    }
}
