//! The API server played by a `tower_test` mock (kube-rs/controller-rs's
//! `ApiServerVerifier`): each test runs one step of the controller — one
//! reconcile, one quota deletion — and asserts the exact HTTP calls it
//! makes, in order (method, path, the status written), and that it makes
//! no other.

use super::raw::RawObject;
use super::*;
use crate::cluster::store::ClusterStore;
use crate::metrics::Metrics;
use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{json, Value};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// 2026-11-21T10:00:00Z
const T0: i64 = 1_795_255_200_000;
const QUOTAS: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas";
const GPU: &str = "requests.nvidia.com/gpu";

/// The API server's side: the next request must be `method path`; its
/// body, and how to answer it. Watches are held open and never answered,
/// as on a cluster where nothing changes.
struct ApiServer {
    handle: Handle,
    watches: Vec<tower_test::mock::SendResponse<Response<Body>>>,
}

impl ApiServer {
    /// The next request that is not a watch.
    async fn next(
        &mut self,
        within: Duration,
    ) -> Option<(
        Request<Body>,
        tower_test::mock::SendResponse<Response<Body>>,
    )> {
        loop {
            let (req, send) = tokio::time::timeout(within, self.handle.next_request())
                .await
                .ok()??;
            if req.uri().query().unwrap_or("").contains("watch=true") {
                self.watches.push(send);
                continue;
            }
            return Some((req, send));
        }
    }

    async fn expect(
        &mut self,
        method: Method,
        path: &str,
    ) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
        let (req, send) = self
            .next(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("no request; expected {method} {path}"));
        assert_eq!(
            (req.method(), req.uri().path()),
            (&method, path),
            "expected {method} {path}"
        );
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

    /// No request comes within a moment: nothing else was written.
    async fn no_more(&mut self) {
        if let Some((req, _)) = self.next(Duration::from_millis(300)).await {
            panic!("unexpected request {} {}", req.method(), req.uri().path());
        }
    }
}

/// What the API server stores after a status merge patch of `stored`:
/// the patch applied (RFC 7386), under resourceVersion `rv`.
fn stored_after(stored: &Value, patch: &Value, rv: &str) -> Value {
    let mut out = stored.clone();
    quota::patch::apply_merge_patch(&mut out, patch);
    out["metadata"]["resourceVersion"] = json!(rv);
    out
}

fn answer(code: u16, v: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(v).unwrap()))
        .unwrap()
}

fn not_found(name: &str) -> Response<Body> {
    answer(
        404,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                "message": format!("bizgroupresourcequotas.bizrq.io \"{name}\" not found")}),
    )
}

/// A controller's context over the mock, its clock at `T0`, and the
/// quotas it triggers.
fn context() -> (
    Arc<Context>,
    UnboundedReceiver<ObjectRef<BizGroupResourceQuota>>,
    ApiServer,
) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let (cache, _) = reflector::store();
    let store = ClusterStore::new(client.clone(), cache);
    let service = Service::new(
        Arc::new(store),
        Default::default(),
        Default::default(),
        Arc::new(Metrics::default()),
    )
    .with_accrual_from_pods()
    .with_clock(Arc::new(|| T0));
    let (ctx, rx) = Context::new(
        client,
        Arc::new(service),
        None,
        Events::default(),
        ControllerConfig::default(),
    );
    (
        ctx,
        rx,
        ApiServer {
            handle,
            watches: Vec::new(),
        },
    )
}

/// Quota `name` at resourceVersion `rv`: 16 GPUs, `charged` of them to
/// the Deployment ml/train (admitted long ago).
fn quota(name: &str, rv: &str, charged: i64) -> Value {
    json!({
        "apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": name, "resourceVersion": rv, "uid": format!("u-{name}"),
                     "creationTimestamp": "2026-11-21T09:00:00Z"},
        "spec": {"parent": "", "hard": {GPU: "16"}},
        "status": {
            "hard": {GPU: "16"}, "used": {GPU: charged.to_string()}, "selfUsed": {GPU: charged.to_string()},
            "workloads": {"apps/Deployment/ml/train": {
                "podSets": [{"name": "main", "count": charged, "perPod": {GPU: "1"}}],
                "since": "2026-11-21T09:00:00Z", "uid": "review-1",
                "admitted": "2026-11-21T09:00:00Z"}}
        }
    })
}

/// The Deployment ml/train of quota nlp, `replicas` × 1 GPU, as a watch
/// delivers it.
fn deployment(replicas: i64) -> RawObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml", "uid": "d-1", "resourceVersion": "3",
                     "creationTimestamp": "2026-11-21T09:00:00Z",
                     "labels": {"biz.group.resource.quota": "nlp"}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
    }))
    .unwrap()
}

fn triggered(rx: &mut UnboundedReceiver<ObjectRef<BizGroupResourceQuota>>) -> Vec<String> {
    let mut names = Vec::new();
    while let Ok(r) = rx.try_recv() {
        names.push(r.name);
    }
    names
}

fn quota_object(v: &Value) -> Arc<BizGroupResourceQuota> {
    Arc::new(serde_json::from_value(v.clone()).unwrap())
}

fn metrics(ctx: &Context) -> String {
    ctx.service.metrics.render()
}

/// The watch shows 4 replicas where status charges 2 (admitted long ago,
/// so the cluster wins): one reconcile reads the quota and writes its
/// status once, from the version it read, with the charge and usage
/// recomputed. Reconciled again, it reads and writes nothing.
#[tokio::test]
async fn a_stale_quota_gets_one_status_write_and_then_none() {
    let (ctx, mut rx, mut api) = context();
    let adapter = quota::workload::adapter_for_kind("apps", "Deployment").unwrap();
    ctx.apply_workload(adapter, &deployment(4), T0);
    assert_eq!(triggered(&mut rx), ["nlp"], "the watch touched nlp");

    let stale = quota("nlp", "7", 2);
    let server = tokio::spawn(async move {
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
        send.send_response(answer(200, &stale.clone()));
        let (body, send) = api
            .expect(Method::PATCH, &format!("{QUOTAS}/nlp/status"))
            .await;
        assert_eq!(
            body["metadata"]["resourceVersion"], "7",
            "compare-and-swap on what was read"
        );
        assert_eq!(body["status"]["used"][GPU], "4");
        assert_eq!(body["status"]["selfUsed"][GPU], "4");
        assert_eq!(
            body["status"]["workloads"]["apps/Deployment/ml/train"]["podSets"][0]["count"],
            4
        );
        // A merge patch of what changed: stored, it is the old object with
        // the patch applied.
        let written = stored_after(&stale, &body, "8");
        send.send_response(answer(200, &written));
        api.no_more().await;
        (api, written)
    });
    let action = reconcile(quota_object(&quota("nlp", "7", 2)), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::await_change(),
        "the next reconcile comes from a trigger"
    );
    let (mut api, written) = server.await.unwrap();
    assert!(metrics(&ctx).contains("bizrq_reconciles_total{result=\"written\"} 1"));

    // Reconciled again: the service's copy is what it wrote; deciding
    // "unchanged" on a cached copy is confirmed on a fresh read, and
    // nothing is written.
    let server = tokio::spawn(async move {
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
        send.send_response(answer(200, &written));
        api.no_more().await;
    });
    reconcile(quota_object(&quota("nlp", "8", 4)), ctx.clone())
        .await
        .unwrap();
    server.await.unwrap();
    assert!(metrics(&ctx).contains("bizrq_reconciles_total{result=\"unchanged\"} 1"));
    assert!(triggered(&mut rx).is_empty(), "a root touches no parent");
}

/// Deleted between its trigger and its reconcile: one read, nothing
/// written, and no retry.
#[tokio::test]
async fn a_quota_gone_is_read_once_and_not_retried() {
    let (ctx, _rx, mut api) = context();
    let server = tokio::spawn(async move {
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
        send.send_response(not_found("nlp"));
        api.no_more().await;
    });
    let action = reconcile(quota_object(&quota("nlp", "7", 2)), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    server.await.unwrap();
    assert!(metrics(&ctx).contains("bizrq_reconciles_total{result=\"gone\"} 1"));
}

/// A reconcile the API server fails is an error whose retry waits longer
/// each time for that quota (5 s, 10 s, 20 s, …, at most 5 min), and
/// starts again at 5 s once it succeeds.
#[tokio::test]
async fn a_failing_reconcile_backs_off_per_quota_and_resets_on_success() {
    let (ctx, _rx, mut api) = context();
    let nlp = quota_object(&quota("nlp", "7", 0));
    let failing = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "InternalError", "code": 500, "message": "etcdserver: request timed out"});
    let mut delays = Vec::new();
    for _ in 0..8 {
        let failing = failing.clone();
        let server = tokio::spawn(async move {
            let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
            send.send_response(answer(500, &failing));
            api
        });
        let err = reconcile(nlp.clone(), ctx.clone()).await.unwrap_err();
        api = server.await.unwrap();
        assert_eq!(err.quota, "nlp");
        delays.push(error_policy(nlp.clone(), &err, ctx.clone()));
    }
    let secs = [5, 10, 20, 40, 80, 160, 300, 300];
    assert_eq!(
        delays,
        secs.map(|s| Action::requeue(Duration::from_secs(s)))
    );
    assert!(metrics(&ctx).contains("bizrq_reconciles_total{result=\"error\"} 8"));

    // Another quota's failures are its own.
    let cv = quota_object(&quota("cv", "3", 0));
    let err = Error {
        quota: "cv".into(),
        source: ServiceError::Internal("x".into()),
    };
    assert_eq!(
        error_policy(cv, &err, ctx.clone()),
        Action::requeue(RETRY_FIRST)
    );

    // A success resets nlp's backoff (the charge of a workload the watch
    // does not show is dropped).
    let server = tokio::spawn(async move {
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
        send.send_response(answer(200, &quota("nlp", "7", 0)));
        let (body, send) = api
            .expect(Method::PATCH, &format!("{QUOTAS}/nlp/status"))
            .await;
        assert!(body["status"]["workloads"].is_null(), "{body}");
        send.send_response(answer(200, &body));
        api
    });
    reconcile(nlp.clone(), ctx.clone()).await.unwrap();
    let mut api = server.await.unwrap();
    let server = tokio::spawn(async move {
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
        send.send_response(answer(500, &failing));
    });
    let err = reconcile(nlp.clone(), ctx.clone()).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(
        error_policy(nlp, &err, ctx.clone()),
        Action::requeue(RETRY_FIRST)
    );
}

/// The quota watch shows child cv deleted (kube-runtime's Controller
/// never reconciles what is not in its store): cv is confirmed gone, the
/// carve-out made under its create token goes back to its parent in one
/// status write, and the parent is triggered.
#[tokio::test]
async fn a_deleted_child_returns_its_carve_out_and_touches_its_parent() {
    let (ctx, mut rx, mut api) = context();
    let cv: BizGroupResourceQuota = serde_json::from_value(json!({
        "apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": "cv", "resourceVersion": "12", "uid": "u-cv",
                     "annotations": {crate::service::CREATE_TOKEN_ANNOTATION: "tok-1"}},
        "spec": {"parent": "ai", "hard": {GPU: "4"}}
    }))
    .unwrap();
    let mut ai = quota("ai", "11", 0);
    ai["status"]["used"][GPU] = json!("4");
    ai["status"]["children"] =
        json!({"cv": {"hard": {GPU: "4"}, "since": "2026-11-21T09:00:00Z", "uid": "tok-1"}});
    ai["status"]["workloads"] = json!({});
    let server = tokio::spawn(async move {
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/cv")).await;
        send.send_response(not_found("cv"));
        let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/ai")).await;
        let ai_read = ai.clone();
        send.send_response(answer(200, &ai));
        let (body, send) = api
            .expect(Method::PATCH, &format!("{QUOTAS}/ai/status"))
            .await;
        assert_eq!(body["metadata"]["resourceVersion"], "11");
        assert!(body["status"]["children"]["cv"].is_null(), "{body}");
        assert_eq!(body["status"]["used"][GPU], "0");
        let written = stored_after(&ai_read, &body, "13");
        send.send_response(answer(200, &written));
        api.no_more().await;
    });
    ctx.quota_deleted(&cv).await;
    server.await.unwrap();
    assert_eq!(triggered(&mut rx), ["ai"]);
}

/// kube-runtime's Controller as `control` wires it: a quota touched many
/// times before the Controller's store has listed is reconciled once, after
/// the list; touched while its reconcile runs, it runs once more after, and
/// never twice at once (the one guarantee the old work queue gave).
#[tokio::test]
async fn triggers_coalesce_and_a_quota_touched_while_it_runs_runs_again_after() {
    let (ctx, rx, mut api) = context();
    ctx.triggers
        .touch(["nlp".to_string(), "nlp".into(), "nlp".into()]);
    assert_eq!(ctx.triggers.depth(), 1, "one quota waits");
    let controller = tokio::spawn(control(ctx.clone(), rx));

    let (_, send) = api.expect(Method::GET, QUOTAS).await;
    let mut nlp = quota("nlp", "7", 0);
    nlp["status"]["workloads"] = json!({});
    send.send_response(answer(
        200,
        &json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuotaList",
                "metadata": {"resourceVersion": "7"}, "items": [nlp]}),
    ));
    // The first reconcile: touched three times and listed, run once.
    let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
    ctx.triggers.touch(["nlp".to_string()]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    api.no_more().await; // not reconciled a second time while it runs
    send.send_response(answer(200, &nlp));
    let written = match api.next(Duration::from_secs(5)).await {
        // Its first status write (lastReconcileTime, the summary).
        Some((req, send)) if req.method() == Method::PATCH => {
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .unwrap()
                .to_bytes();
            let patch: Value = serde_json::from_slice(&bytes).unwrap();
            let body = stored_after(&nlp, &patch, "8");
            send.send_response(answer(200, &body));
            body
        }
        Some((req, _)) => panic!("unexpected {} {}", req.method(), req.uri().path()),
        None => nlp,
    };
    // Touched while it ran: once more, after it.
    let (_, send) = api.expect(Method::GET, &format!("{QUOTAS}/nlp")).await;
    send.send_response(answer(200, &written));
    api.no_more().await;
    assert_eq!(ctx.triggers.depth(), 0, "none waits");
    assert!(metrics(&ctx).contains("bizrq_reconciles_total{result=\"unchanged\"} 1"));
    controller.abort();
}

/// Whether a round is due for held, marked objects is told without
/// copying them, and always as `marked_objects` tells it: none while the
/// object runs or carries no mark, one once it is held with a mark.
#[tokio::test]
async fn a_round_is_asked_for_held_marked_objects_as_marked_objects_says() {
    let (ctx, _rx, _api) = context();
    let adapter = quota::workload::adapter_for_kind("apps", "Deployment").unwrap();
    let agree = |ctx: &Context| {
        let has = ctx.has_marked_objects("nlp");
        assert_eq!(has, !ctx.marked_objects("nlp").is_empty());
        has
    };
    ctx.apply_workload(adapter, &deployment(2), T0);
    assert!(!agree(&ctx), "running, no mark");
    let wref = "apps/Deployment/ml/train";
    let runs = ctx.view.lock().unwrap().observed_in("nlp", wref).unwrap();
    ctx.view
        .lock()
        .unwrap()
        .set_released(wref, Some(runs.pod_sets.clone()));
    assert!(!agree(&ctx), "held, no mark");
    let mut marked = deployment(2).json;
    marked["metadata"]["annotations"] = json!({quota::queue::mark::ANNOTATION: "m"});
    ctx.apply_workload(adapter, &serde_json::from_value(marked).unwrap(), T0);
    assert!(!agree(&ctx), "marked, running");
    ctx.view
        .lock()
        .unwrap()
        .set_released(wref, Some(runs.pod_sets));
    assert!(agree(&ctx), "held, marked");
    ctx.view.lock().unwrap().set_released(wref, None);
    assert!(!agree(&ctx), "released");
}
