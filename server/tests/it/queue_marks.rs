//! Queue marks on (`--queue-mark-key-file`, docs/queueing.md §12): the
//! mutating webhook queues a create by a signed mark on the object, with
//! no write of the quota, counting what it marked against the caps until
//! a status shows it; the controller's round folds the marked, held
//! objects into the queue in its one write. Through the fake API server
//! and both webhooks. (Every other queue test runs with marks on too
//! under `BIZRQ_TEST_QUEUE_MARKS=1`.)

use crate::cluster::{mark_key_file, used, Cluster, MARK_KEY, T0};
use crate::support::{events, job, metric, queue_refs, until_event};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn jobs(c: &Cluster, user: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::namespaced_with(c.kubectl(user), "ml", &ar)
}

async fn create(c: &Cluster, user: &str, obj: Value) -> Result<(), String> {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    jobs(c, user)
        .create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn stored(c: &Cluster, name: &str) -> Value {
    c.fake.get("batch", "jobs", "ml", name).unwrap()
}

fn suspended(c: &Cluster, name: &str) -> bool {
    stored(c, name)["spec"]["suspend"] == true
}

/// Waits (5 s at most) for the round's release of `name` to show on the
/// stored object; the caller asserts it.
async fn until_released(c: &Cluster, name: &str) {
    for _ in 0..100 {
        if !suspended(c, name) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn mark_of(c: &Cluster, name: &str) -> Option<Value> {
    stored(c, name)["metadata"]["annotations"]["queue.bizrq.io/entry"]
        .as_str()
        .map(|s| serde_json::from_str(s).unwrap())
}

/// A replica with marks on, its quota `ml` of 4 cpu queueing, with
/// `share` as its `maxPerSubmitter`.
async fn marked_cluster(share: Option<u32>) -> Cluster {
    marked_cluster_of(share, "4").await
}

/// `marked_cluster`, its quota `ml` of `cpu`.
async fn marked_cluster_of(share: Option<u32>, cpu: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let keys = mark_key_file(dir.path());
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::replica_configured(
        crate::fakeapi::FakeApi::new(),
        dir,
        T0,
        "bizrq-0",
        true,
        &db,
        |a| a.queue_mark_key_file = Some(keys),
    )
    .await;
    let queueing = match share {
        Some(n) => json!({"mode": "Queue", "maxPerSubmitter": n}),
        None => json!("Queue"),
    };
    with_quota_ml(&c, queueing, cpu).await;
    c
}

/// The quota `ml` of `cpu` with `queueing`, made through the API on `c`,
/// once the controller watches Jobs.
async fn with_quota_ml(c: &Cluster, queueing: Value, cpu: &str) {
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "ml"},
                "spec": {"parent": "", "hard": {"requests.cpu": cpu}, "queueing": queueing}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
}

/// A mark as the webhook would write it, signed with `key` (hex).
fn mark(quota: &str, name: &str, since: i64, by: &str, key: &str) -> String {
    let keys = bizrq::service::queue_mark::MarkKeys::parse(key).unwrap();
    let m = quota::queue::mark::sign(quota, &format!("batch/Job/ml/{name}"), since, 0, by, |b| {
        keys.sign(b)
    });
    serde_json::to_string(&m).unwrap()
}

/// A Job that must wait is created held with a signed mark naming its
/// quota, itself, its place and its submitter; the round folds it into
/// the queue (with the object's uid) and admits it when room frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_job_is_folded_into_the_queue_and_admitted_when_room_frees() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    assert!(mark_of(&c, "a").is_none(), "what fits carries no mark");
    create(&c, "alice", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    let m = mark_of(&c, "b").expect("b carries a mark");
    assert_eq!(m["quota"], "ml");
    assert_eq!(m["ref"], "batch/Job/ml/b");
    assert_eq!(m["by"], "alice");
    assert_eq!(m["since"], T0);
    assert_eq!(m["mac"].as_str().unwrap().len(), 64, "{m}");
    let uid = stored(&c, "b")["metadata"]["uid"].clone();
    c.until("ml", "b folded with its uid", |q| {
        q["status"]["queue"]
            .as_array()
            .is_some_and(|a| a.len() == 1 && a[0]["uid"] == uid)
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "b admitted", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
        })
        .await;
    assert!(q["status"]["workloads"]["batch/Job/ml/b"].is_object());
    until_released(&c, "b").await;
    assert!(!suspended(&c, "b"), "b released");
}

/// The webhook's queueing writes no quota: a review of a create that must
/// wait is answered with the hold and the mark while the quota's stored
/// version stays the same. What it marked counts against the submitter's
/// share (no status shows it, the object is never created) until the API
/// server could no longer store it; then it no longer counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_marks_without_writing_the_quota_and_counts_what_it_marked() {
    let c = marked_cluster(Some(2)).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let version = c.fake.quota("ml")["metadata"]["resourceVersion"].clone();
    let review = |i: usize| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": format!("r-{i}"),
                "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                "name": format!("g-{i}"), "namespace": "ml", "operation": "CREATE",
                "userInfo": {"username": "mallory"}, "object": job(&format!("g-{i}")).cpu("1").obj(),
                "dryRun": false}})
    };
    for i in 0..2 {
        let r = c.server.review("/mutate/workloads", &review(i)).await;
        assert_eq!(r["allowed"], true, "{i}: {r}");
        let patch =
            String::from_utf8(base64_decode(r["patch"].as_str().expect("a patch"))).unwrap();
        assert!(patch.contains("/spec/suspend"), "{patch}");
        assert!(patch.contains("queue.bizrq.io"), "{patch}");
    }
    let r = c.server.review("/mutate/workloads", &review(2)).await;
    assert_eq!(r["allowed"], false, "the share counts what was marked: {r}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("maxPerSubmitter 2"),
        "{r}"
    );
    assert_eq!(
        c.fake.quota("ml")["metadata"]["resourceVersion"],
        version,
        "no write of the quota"
    );
    // Within the API server's request timeout they still count; past it,
    // with no object shown, they go.
    c.set_clock(T0 + 59_000);
    c.touch("ml", 1);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let r = c.server.review("/mutate/workloads", &review(3)).await;
    assert_eq!(r["allowed"], false, "{r}");
    c.set_clock(T0 + 120_000);
    c.touch("ml", 2);
    let mut allowed = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let r = c.server.review("/mutate/workloads", &review(4)).await;
        if r["allowed"] == true {
            allowed = true;
            break;
        }
    }
    assert!(allowed, "the marks never stored no longer count");
}

pub(crate) fn base64_decode(s: &str) -> Vec<u8> {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        buf = buf << 6 | T.iter().position(|t| *t == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    out
}

/// A mark bizrq did not sign, or signed for another quota, never gets a
/// place: objects created held with such marks (outside the webhook's
/// judgement, claiming a place before everyone) are left out of the queue
/// and stay held, while a Job queued after them is admitted first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_misbound_mark_never_gets_a_place() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let stranger = "00".repeat(32);
    for (name, m) in [
        (
            "forged",
            mark("ml", "forged", T0 - 3_600_000, "mallory", &stranger),
        ),
        ("unsigned", {
            let mut v: Value =
                serde_json::from_str(&mark("ml", "unsigned", T0, "mallory", MARK_KEY)).unwrap();
            v["since"] = json!(T0 - 4_000);
            v.to_string()
        }),
        (
            "misbound",
            mark("other", "misbound", T0, "mallory", MARK_KEY),
        ),
    ] {
        let mut j = job(name).cpu("2").obj();
        j["spec"]["suspend"] = json!(true);
        j["metadata"]["annotations"] = json!({"queue.bizrq.io/entry": m});
        create(&c, "mallory", j).await.unwrap();
    }
    c.set_clock(T0 + 1_000);
    create(&c, "bob", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    c.until("ml", "b folded alone", |q| {
        queue_refs(q) == ["batch/Job/ml/b"]
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let q = c.fake.quota("ml");
    assert!(queue_refs(&q).is_empty(), "{q}");
    assert_eq!(used(&q, "requests.cpu"), "2", "nothing forged charged: {q}");
    for name in ["forged", "unsigned", "misbound"] {
        assert!(suspended(&c, name), "{name} stays held");
    }
}

/// Parallel creates of one submitter never pass its share: twelve at once
/// against a share of 3 with no room, each judged against the status plus
/// what this replica marked, under one lock. Exactly three are created
/// (held and marked), the rest refused, and the queue the rounds fold
/// never holds more than three of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_creates_never_pass_a_submitters_share() {
    let c = marked_cluster(Some(3)).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let results = futures::future::join_all((0..12).map(|i| {
        let c = &c;
        async move { create(c, "mallory", job(&format!("p-{i}")).cpu("1").obj()).await }
    }))
    .await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 3, "{results:?}");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(r.contains("maxPerSubmitter 3"), "{r}");
    }
    let q = c
        .until("ml", "the three folded", |q| queue_refs(q).len() == 3)
        .await;
    assert_eq!(used(&q, "requests.cpu"), "4");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(queue_refs(&c.fake.quota("ml")).len(), 3);
}

/// The mark stays on an object after the round admitted it: a round that
/// runs before the watch shows it released (its release slowed) never
/// folds it into the queue again, so no version of the quota has it both
/// charged and waiting, and it is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_marked_job_is_never_folded_again_before_its_release_shows() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    create(&c, "alice", job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b folded", |q| queue_refs(q) == ["batch/Job/ml/b"])
        .await;
    let after: u64 = c.fake.quota("ml")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    c.fake.slow_writes(
        "/apis/batch/v1/namespaces/ml/jobs/b",
        std::time::Duration::from_secs(2),
    );
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b charged", |q| {
        q["status"]["workloads"]["batch/Job/ml/b"]["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:"))
    })
    .await;
    // Rounds while the release is in flight.
    for n in 1..=5 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    until_released(&c, "b").await;
    assert!(!suspended(&c, "b"), "b released");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for v in c.fake.quota_versions("ml", after) {
        let charged = v["status"]["workloads"]["batch/Job/ml/b"]["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:"));
        assert!(
            !(charged && queue_refs(&v).contains(&"batch/Job/ml/b".to_string())),
            "b both charged and waiting: {v}"
        );
    }
    let q = c.fake.quota("ml");
    assert!(queue_refs(&q).is_empty(), "{q}");
    assert_eq!(used(&q, "requests.cpu"), "2", "{q}");
}

/// A create that must wait writes no quota: not the mutating webhook
/// (it marks the object), not the validating review of the same create
/// (a held object charges nothing), not the controller's reconcile of
/// what its watch shows (a held, marked object is not a charge). The
/// first write of the quota after the create is the round that folds it,
/// and no version ever records the waiting Job as a workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_create_writes_no_quota_until_the_round_folds_it() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    // Whatever a's create set off has been written.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let before: u64 = c.fake.quota("ml")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    create(&c, "alice", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    assert!(mark_of(&c, "b").is_some());
    // The create and both reviews are done: no write of the quota yet
    // unless it is the round's fold.
    let versions = c.fake.quota_versions("ml", before);
    assert!(
        versions.iter().all(|v| queue_refs(v) == ["batch/Job/ml/b"]),
        "written before the round: {versions:?}"
    );
    c.until("ml", "b folded", |q| {
        queue_refs(q) == ["batch/Job/ml/b"] && q["status"]["queue"][0]["uid"].is_string()
    })
    .await;
    // The controller's reactions to the watch's event of b settle.
    for n in 1..=3 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let versions = c.fake.quota_versions("ml", before);
    assert!(!versions.is_empty());
    assert_eq!(
        queue_refs(&versions[0]),
        ["batch/Job/ml/b"],
        "the first write after the create is the round's fold: {}",
        versions[0]
    );
    for v in &versions {
        assert!(
            v["status"]["workloads"].get("batch/Job/ml/b").is_none(),
            "a waiting Job recorded as a workload: {v}"
        );
        assert_eq!(used(v, "requests.cpu"), "3", "{v}");
    }
}

/// A second replica over the same API server, with the same mark key, not
/// leading (it runs no rounds) and not serving the webhooks until told.
async fn second_replica(c: &Cluster) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let keys = mark_key_file(dir.path());
    let db = crate::common::fresh_sqlite(&dir);
    Cluster::replica_configured(c.fake.clone(), dir, T0, "bizrq-1", false, &db, |a| {
        a.queue_mark_key_file = Some(keys)
    })
    .await
}

/// Two replicas: the one serving the webhooks marks a create, the leader
/// (which never reviewed it) folds it and admits it once: one charge by
/// the queue, the Job released, never both charged and waiting, and the
/// marking replica's count of it forgotten once a status shows it
/// admitted (its submitter may queue again to the share).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_a_marked_create_is_folded_and_admitted_once() {
    let c = marked_cluster(Some(1)).await;
    let other = second_replica(&c).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let start: u64 = c.fake.quota("ml")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    other.serve_webhooks();
    create(&c, "bob", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    assert_eq!(
        mark_of(&c, "b").expect("marked by the other replica")["by"],
        "bob"
    );
    // Bob's share of 1 is taken on the replica that marked b.
    let err = create(&c, "bob", job("b2").cpu("2").obj())
        .await
        .unwrap_err();
    assert!(err.contains("maxPerSubmitter 1"), "{err}");
    c.until("ml", "b folded by the leader", |q| {
        queue_refs(q) == ["batch/Job/ml/b"] && q["status"]["queue"][0]["uid"].is_string()
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
    })
    .await;
    until_released(&c, "b").await;
    assert!(!suspended(&c, "b"), "b released");
    for n in 1..=3 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let mut charges = std::collections::BTreeSet::new();
    for v in c.fake.quota_versions("ml", start) {
        let charge = &v["status"]["workloads"]["batch/Job/ml/b"];
        let charged = charge["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:"));
        assert!(
            !(charged && queue_refs(&v).contains(&"batch/Job/ml/b".to_string())),
            "b both charged and waiting: {v}"
        );
        if charged {
            charges.insert(charge["since"].to_string());
        }
        assert!(
            ["0", "2", "4"].contains(&used(&v, "requests.cpu")),
            "b charged twice: {v}"
        );
    }
    assert_eq!(charges.len(), 1, "admitted once: {charges:?}");
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "2");
    // b is admitted: bob's share on the marking replica is free again.
    create(&c, "bob", job("b3").cpu("4").obj()).await.unwrap();
    assert!(suspended(&c, "b3"));
}

/// Two replicas marking at once: each counts what it marked, so together
/// their webhooks may let through up to the share each before a status
/// shows any (the bound across replicas: the share per replica); the
/// leader's fold holds the share again in the quota's write, so no stored
/// version ever has more of one submitter waiting than the share, and what
/// is over it stays held, marked, out of the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_the_stored_queue_never_passes_a_submitters_share() {
    let c = marked_cluster(Some(3)).await;
    let other = second_replica(&c).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let start: u64 = c.fake.quota("ml")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // The leader's folds land late: the other replica marks before any
    // status shows the first replica's marks.
    let status = "/apis/bizrq.io/v1/bizgroupresourcequotas/ml/status";
    c.fake
        .slow_writes(status, std::time::Duration::from_secs(2));
    let burst = |from: usize| {
        futures::future::join_all((from..from + 6).map(|i| {
            let c = &c;
            async move { create(c, "mallory", job(&format!("p-{i}")).cpu("1").obj()).await }
        }))
    };
    let first = burst(0).await.iter().filter(|r| r.is_ok()).count();
    other.serve_webhooks();
    let second = burst(6).await.iter().filter(|r| r.is_ok()).count();
    assert_eq!(first, 3, "one replica never passes the share");
    assert!(second <= 3, "nor the other: {second}");
    c.fake.slow_writes(status, std::time::Duration::ZERO);
    c.until("ml", "three folded", |q| queue_refs(q).len() == 3)
        .await;
    for n in 1..=4 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    for v in c.fake.quota_versions("ml", start) {
        assert!(queue_refs(&v).len() <= 3, "past the share: {v}");
        assert_eq!(used(&v, "requests.cpu"), "4", "{v}");
    }
    // Every Job created is held and marked, in the queue or out of it.
    let made: Vec<String> = (0..12)
        .map(|i| format!("p-{i}"))
        .filter(|n| c.fake.get("batch", "jobs", "ml", n).is_some())
        .collect();
    assert_eq!(made.len(), first + second);
    for n in &made {
        assert!(suspended(&c, n), "{n} held");
        assert!(mark_of(&c, n).is_some(), "{n} marked");
    }
    println!("created through two replicas: {first} + {second}, stored queue 3");
}

/// A mark skips the create's charge only on an object that waits by it:
/// a kind that can queue, held, with a mark we signed for its quota and
/// itself. A Deployment of 0 replicas carrying a junk mark (it cannot
/// queue) is charged as any create, so a later `/scale` to 500 replicas
/// is judged against its charge and refused, not let through as
/// ungoverned (review of issue 30, finding 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_on_what_cannot_wait_skips_no_charge() {
    let c = marked_cluster(None).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    );
    let deps: Api<DynamicObject> = Api::namespaced_with(c.kubectl("mallory"), "ml", &ar);
    for (name, m) in [
        ("junk", "junk".to_string()),
        ("signed", mark("ml", "signed", T0, "mallory", MARK_KEY)),
    ] {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ml",
                "labels": {"biz.group.resource.quota": "ml"},
                "annotations": {"queue.bizrq.io/entry": m}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "web",
                        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}});
        let o: DynamicObject = serde_json::from_value(d).unwrap();
        deps.create(&PostParams::default(), &o).await.unwrap();
        let q = c.fake.quota("ml");
        assert!(
            q["status"]["workloads"][format!("apps/Deployment/ml/{name}")].is_object(),
            "{name} charged (nothing) at its create: {q}"
        );
        let scaled = deps
            .patch_scale(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"replicas": 500}})),
            )
            .await;
        let (code, _, message) = crate::admission::refusal(scaled);
        assert_eq!(code, 403, "{message}");
        let stored = c.fake.get("apps", "deployments", "ml", name).unwrap();
        assert_eq!(stored["spec"]["replicas"], 0, "{name} not scaled");
    }
    let q = c.fake.quota("ml");
    assert_eq!(used(&q, "requests.cpu"), "0", "{q}");
}

/// A scale right after the create is judged against the create's charge
/// even while the quota watch lags behind that charge: finding which
/// quota holds a workload reads the API server when the watch's copy does
/// not know it. Before, a lagging watch made the scale look ungoverned and
/// it went through uncharged (the flake of the test above under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_right_after_the_create_is_judged_while_the_watch_lags() {
    let c = marked_cluster(None).await;
    c.fake.set_watch_delay(std::time::Duration::from_secs(2));
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    );
    let deps: Api<DynamicObject> = Api::namespaced_with(c.kubectl("mallory"), "ml", &ar);
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml",
            "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "web",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}});
    let o: DynamicObject = serde_json::from_value(d).unwrap();
    deps.create(&PostParams::default(), &o).await.unwrap();
    let scaled = deps
        .patch_scale(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 500}})),
        )
        .await;
    let (code, _, message) = crate::admission::refusal(scaled);
    assert_eq!(code, 403, "{message}");
    let stored = c.fake.get("apps", "deployments", "ml", "web").unwrap();
    assert_eq!(stored["spec"]["replicas"], 0, "not scaled");
}

/// A marked Job the queue admitted and its owner then suspends by hand
/// does not re-enter the queue at its old place: the release removes its
/// mark with the hold, so the suspended Job is judged as any suspended
/// Job (it waits unqueued until its owner resumes it), and a Job that
/// queued after it keeps the head (review of issue 30, finding 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_job_suspended_by_hand_does_not_return_to_its_old_place() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "3")
        .await;
    create(&c, "alice", job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b folded", |q| queue_refs(q) == ["batch/Job/ml/b"])
        .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
    })
    .await;
    until_released(&c, "b").await;
    assert!(!suspended(&c, "b"), "b released");
    create(&c, "bob", job("d").cpu("2").obj()).await.unwrap();
    c.until("ml", "d charged", |q| used(q, "requests.cpu") == "4")
        .await;
    c.set_clock(T0 + 10_000);
    create(&c, "bob", job("e").cpu("3").obj()).await.unwrap();
    c.until("ml", "e folded", |q| queue_refs(q) == ["batch/Job/ml/e"])
        .await;
    jobs(&c, "alice")
        .patch(
            "b",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    // Before the fix the round folded b back at its old place (ahead of
    // e) and admitted it again: its charge never came down.
    c.until("ml", "b's charge down", |q| used(q, "requests.cpu") == "2")
        .await;
    for n in 1..=5 {
        c.touch("ml", n);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q), ["batch/Job/ml/e"], "{q}");
    assert!(suspended(&c, "b"), "b stays suspended by its owner");
    assert_eq!(used(&q, "requests.cpu"), "2", "{q}");
    assert!(mark_of(&c, "b").is_none(), "the release removed b's mark");
}

/// A dry-run create that would wait is answered held, with no mark: a
/// dry run counts nowhere, so a mark signed for it would be a place no
/// cap ever counted, which a real write could then carry (review of
/// issue 30, finding 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_is_never_given_a_signed_mark() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let o: DynamicObject = serde_json::from_value(job("b").cpu("2").obj()).unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answered = jobs(&c, "mallory").create(&dry, &o).await.unwrap();
    let answered = serde_json::to_value(&answered).unwrap();
    assert_eq!(answered["spec"]["suspend"], true, "{answered}");
    assert!(
        answered["metadata"]["annotations"]
            .get("queue.bizrq.io/entry")
            .is_none(),
        "{answered}"
    );
    assert!(c.fake.get("batch", "jobs", "ml", "b").is_none());
}

/// Review finding 5: a held object whose mark the fold refuses (forged,
/// misbound) is told once — one NotQueued Event — and from then on asks
/// for no round: before, every reconcile of its quota asked for one and
/// every round sent the Event again. A new mark on it is judged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_mark_is_refused_once_and_asks_for_no_more_rounds() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let stranger = "00".repeat(32);
    let mut j = job("forged").cpu("2").obj();
    j["spec"]["suspend"] = json!(true);
    j["metadata"]["annotations"] =
        json!({"queue.bizrq.io/entry": mark("ml", "forged", T0, "mallory", &stranger)});
    create(&c, "mallory", j).await.unwrap();
    until_event(&c, "NotQueued", "forged").await;
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    let rounds = metric(&c.server, "bizrq_admission_queue_rounds_total").await;
    // Each label change is a watch event of the quota's workload: a
    // reconcile of `ml`.
    for i in 0..5 {
        jobs(&c, "mallory")
            .patch(
                "forged",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"labels": {"touch": i.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    assert_eq!(
        metric(&c.server, "bizrq_admission_queue_rounds_total").await,
        rounds,
        "no round asked for the refused mark"
    );
    let told = events(&c, "NotQueued", "forged");
    assert_eq!(told.len(), 1, "{told:#?}");
    assert!(
        told[0]["series"]["count"].as_i64().unwrap_or(1) <= 1,
        "told once: {told:#?}"
    );
    assert!(suspended(&c, "forged"), "it stays held");
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "4");
    // A mark of ours placed in the future is refused until that place is
    // no longer in the future, not for good.
    let mut j = job("later").cpu("2").obj();
    j["spec"]["suspend"] = json!(true);
    j["metadata"]["annotations"] =
        json!({"queue.bizrq.io/entry": mark("ml", "later", T0 + 60_000, "bob", MARK_KEY)});
    create(&c, "bob", j).await.unwrap();
    until_event(&c, "NotQueued", "later").await;
    c.set_clock(T0 + 60_000);
    jobs(&c, "bob")
        .patch(
            "later",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"touch": "now"}}})),
        )
        .await
        .unwrap();
    c.until("ml", "the future mark folded once its place came", |q| {
        queue_refs(q) == ["batch/Job/ml/later"]
    })
    .await;
}

/// The queue lives on the held, marked objects and the status keeps its
/// top and a summary (docs/queueing.md §12): 600 Jobs queued (created 24
/// at a time) behind one that fills the quota. Every stored version of the
/// quota the watch shows serialises under 64 KB and lists at most
/// `TOP_ENTRIES`; the summary counts every held Job; and as room frees
/// they are admitted in their order, each once: at every version after
/// all were folded, what was ever charged is a prefix of that order, and
/// it and what the summary counts waiting add up to 600.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_marked_jobs_keep_the_quota_small_and_are_admitted_in_order_once() {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};
    const N: usize = 600;
    const LIMIT: usize = 64 * 1024;
    let top = quota::queue::summary::TOP_ENTRIES;
    let c = marked_cluster_of(Some(1_000), "40").await;
    create(&c, "alice", job("run").cpu("40").obj())
        .await
        .unwrap();
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "40")
        .await;
    let versions = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let api: Api<DynamicObject> = Api::all_with(
        c.kubectl("recorder"),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bizrq.io", "v1", "BizGroupResourceQuota"),
            "bizgroupresourcequotas",
        ),
    );
    let rec = versions.clone();
    let watch = tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(q) | watcher::Event::InitApply(q)) = ev {
                if q.metadata.name.as_deref() == Some("ml") {
                    rec.lock().unwrap().push(serde_json::to_value(&q).unwrap());
                }
            }
        }
    });
    // Marks are placed by the service's clock, fixed here: equal places
    // are taken in name order, which is the creation order.
    let names: Vec<String> = (0..N).map(|i| format!("w-{i:03}")).collect();
    let started = std::time::Instant::now();
    futures::stream::iter(names.iter())
        .for_each_concurrent(24, |n| {
            let c = &c;
            async move { create(c, "alice", job(n).cpu("1").obj()).await.unwrap() }
        })
        .await;
    eprintln!("{N} creates in {:?}", started.elapsed());
    let q = c
        .until("ml", "all folded", |q| {
            q["status"]["queueSummary"]["total"].as_u64() == Some(N as u64)
        })
        .await;
    let held = c
        .fake
        .list("batch", "jobs")
        .iter()
        .filter(|j| j["spec"]["suspend"] == true)
        .count();
    assert_eq!(held, N, "the summary counts every held Job");
    assert_eq!(queue_refs(&q).len(), top, "the status lists the top");
    // How many wait, where people read it: kubectl's Queued column and
    // the API (its items are the top).
    assert_eq!(q["status"]["summary"]["queued"], N);
    let (s, v) = c
        .server
        .api(Method::GET, "/api/v1/quotas/ml/queue", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["length"], N);
    assert_eq!(v["listed"], top);
    assert_eq!(v["items"].as_array().map(Vec::len), Some(top));
    assert_eq!(v["summary"]["head"], "batch/Job/ml/w-000");
    assert_eq!(
        queue_refs(&q),
        names[..top]
            .iter()
            .map(|n| format!("batch/Job/ml/{n}"))
            .collect::<Vec<_>>(),
        "in order"
    );
    // Room frees: `run` goes, then each Job released is deleted (it ran).
    jobs(&c, "alice")
        .delete("run", &DeleteParams::default())
        .await
        .unwrap();
    let mut gone: std::collections::BTreeSet<String> = Default::default();
    for _ in 0..1_200 {
        if gone.len() == N {
            break;
        }
        let released: Vec<String> = c
            .fake
            .list("batch", "jobs")
            .iter()
            .filter(|j| j["spec"]["suspend"] != true)
            .filter_map(|j| j["metadata"]["name"].as_str().map(str::to_string))
            .filter(|n| n.starts_with("w-") && !gone.contains(n))
            .collect();
        futures::future::join_all(released.iter().map(|n| {
            let api = jobs(&c, "alice");
            async move { api.delete(n, &DeleteParams::default()).await.map(|_| ()) }
        }))
        .await;
        gone.extend(released);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(gone.len(), N, "all admitted and released");
    c.until("ml", "the queue empty", |q| {
        q["status"]["queueSummary"].is_null() && queue_refs(q).is_empty()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    watch.abort();
    eprintln!("{N} admitted in {:?}", started.elapsed());
    let versions = versions.lock().unwrap().clone();
    let mut largest = 0;
    let mut ever: std::collections::BTreeSet<String> = Default::default();
    let mut full = false;
    for q in &versions {
        let size = serde_json::to_vec(q).unwrap().len();
        largest = largest.max(size);
        assert!(size < LIMIT, "a stored quota of {size} bytes");
        assert!(queue_refs(q).len() <= top, "{}", queue_refs(q).len());
        let charged = q["status"]["workloads"].as_object().map(|w| {
            w.iter()
                .filter(|(r, c)| {
                    r.starts_with("batch/Job/ml/w-")
                        && c["podSets"]
                            .as_array()
                            .is_some_and(|s| s.iter().any(|p| p["count"].as_i64() > Some(0)))
                })
                .map(|(r, _)| r.clone())
                .collect::<Vec<_>>()
        });
        ever.extend(charged.unwrap_or_default());
        let waiting = q["status"]["queueSummary"]["total"].as_u64().unwrap_or(0) as usize;
        full |= waiting == N;
        if !full {
            continue;
        }
        let prefix: std::collections::BTreeSet<String> = names[..ever.len()]
            .iter()
            .map(|n| format!("batch/Job/ml/{n}"))
            .collect();
        assert_eq!(ever, prefix, "admitted out of order");
        assert_eq!(ever.len() + waiting, N, "lost or counted twice: {q}");
    }
    assert_eq!(ever.len(), N);
    eprintln!(
        "{} versions of the quota, the largest {largest} bytes",
        versions.len()
    );
}

/// A submitter's share counts the whole queue, not the top a status
/// lists (docs/queueing.md §12): with a share of 25, thirty creates one
/// after another (each folded before the next) pass exactly 25 times,
/// though the status lists 20 of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_past_the_listed_top_still_holds() {
    let c = marked_cluster(Some(25)).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let mut ok = 0;
    for i in 0..30 {
        match create(&c, "mallory", job(&format!("p-{i:02}")).cpu("1").obj()).await {
            Ok(()) => {
                ok += 1;
                c.until("ml", "folded", |q| {
                    q["status"]["queueSummary"]["total"].as_u64() == Some(ok)
                })
                .await;
            }
            Err(e) => assert!(e.contains("maxPerSubmitter 25"), "{e}"),
        }
    }
    assert_eq!(ok, 25);
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q).len(), quota::queue::summary::TOP_ENTRIES);
    assert_eq!(q["status"]["queueSummary"]["total"], 25);
}

/// A waiting Job behind the listed top, deleted and created again under
/// its name before the next round, is a new object: it takes a new place
/// (never the old object's, older than itself, which the fold would
/// refuse for good), is folded and admitted in its turn (review of the
/// bounded queue, finding 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_re_created_behind_the_top_is_queued_and_admitted() {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    let n = quota::queue::summary::TOP_ENTRIES as u64 + 3;
    for i in 0..n {
        create(&c, "bob", job(&format!("p-{i:02}")).cpu("1").obj())
            .await
            .unwrap();
        c.until("ml", "folded", |q| {
            q["status"]["queueSummary"]["total"].as_u64() == Some(i + 1)
        })
        .await;
    }
    let last = format!("p-{:02}", n - 1);
    let q = c.fake.quota("ml");
    assert!(
        !queue_refs(&q).contains(&format!("batch/Job/ml/{last}")),
        "{last} behind the top: {q}"
    );
    // The watches lag, so no round sees the delete before the create.
    c.set_clock(T0 + 10_000);
    c.fake.stamp_creations_at(T0 + 10_000);
    c.fake
        .set_watch_delay(std::time::Duration::from_millis(1500));
    jobs(&c, "bob")
        .delete(&last, &DeleteParams::default())
        .await
        .unwrap();
    create(&c, "bob", job(&last).cpu("1").obj()).await.unwrap();
    let since = mark_of(&c, &last).expect("re-created held with a mark")["since"].clone();
    c.fake.set_watch_delay(std::time::Duration::ZERO);
    assert_eq!(since, T0 + 10_000, "a new place, not the old object's");
    // Room for everything: each waiting Job is admitted in turn, the
    // re-created one too.
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    for i in 0..n - 1 {
        c.until("ml", "admitted", |q| {
            q["status"]["workloads"][format!("batch/Job/ml/p-{i:02}")].is_object()
        })
        .await;
        // Deleted once its release is stored (a delete racing the
        // release is not what this test is about).
        until_released(&c, &format!("p-{i:02}")).await;
        jobs(&c, "bob")
            .delete(&format!("p-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    c.until("ml", "the re-created Job admitted", |q| {
        q["status"]["workloads"][format!("batch/Job/ml/{last}")]["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("queue:"))
    })
    .await;
    until_released(&c, &last).await;
    assert!(!suspended(&c, &last), "{last} released");
}

/// `marked_cluster` with `a` (4 cpu) charged and `n` one-cpu Jobs of bob
/// queued behind it by marks, each folded before the next: the status
/// lists the top 20 and its summary counts all `n`.
async fn queue_beyond_the_top(n: u64) -> Cluster {
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    for i in 0..n {
        create(&c, "bob", job(&format!("p-{i:02}")).cpu("1").obj())
            .await
            .unwrap();
        c.until("ml", "folded", |q| {
            q["status"]["queueSummary"]["total"].as_u64() == Some(i + 1)
        })
        .await;
    }
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q).len(), quota::queue::summary::TOP_ENTRIES);
    c
}

/// `c` stopped (its Lease released), and another replica started over the
/// same API server, leading and serving the webhooks, with `configure`d
/// arguments: an operator's rollout of a new setting.
async fn replaced(c: Cluster, configure: impl FnOnce(&mut bizrq::config::ServeArgs)) -> Cluster {
    let fake = c.fake.clone();
    c.running.shutdown().await;
    let dir = tempfile::tempdir().unwrap();
    let keys = mark_key_file(dir.path());
    let db = crate::common::fresh_sqlite(&dir);
    Cluster::replica_configured(fake, dir, T0, "bizrq-1", true, &db, |a| {
        a.queue_mark_key_file = Some(keys);
        configure(a);
    })
    .await
}

/// Draining marks (`--queue-mark-drain`) before turning them off: the
/// first round lists the whole queue in the status (the 25 marked Jobs,
/// 20 of them listed before), a create that must wait is queued in the
/// status with no mark signed, and as room frees the rounds admit every
/// one, each once, in order, the new one last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_marks_lists_the_whole_queue_signs_none_and_admits_every_entry() {
    let n = quota::queue::summary::TOP_ENTRIES as u64 + 5;
    let c = queue_beyond_the_top(n).await;
    let c = replaced(c, |a| a.queue_mark_drain = true).await;
    let q = c
        .until("ml", "every marked entry listed", |q| {
            queue_refs(q).len() == n as usize && q["status"]["queueSummary"].is_null()
        })
        .await;
    let order: Vec<String> = (0..n).map(|i| format!("batch/Job/ml/p-{i:02}")).collect();
    assert_eq!(queue_refs(&q), order, "in their marks' order");
    create(&c, "carol", job("late").cpu("1").obj())
        .await
        .unwrap();
    assert!(suspended(&c, "late"), "held: it must wait");
    assert!(
        mark_of(&c, "late").is_none(),
        "no mark signed while draining"
    );
    c.until("ml", "late queued in the status", |q| {
        queue_refs(q).last().map(String::as_str) == Some("batch/Job/ml/late")
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let all: Vec<String> = (0..n)
        .map(|i| format!("p-{i:02}"))
        .chain(["late".to_string()])
        .collect();
    for name in &all {
        c.until("ml", "admitted in turn", |q| {
            q["status"]["workloads"][format!("batch/Job/ml/{name}")]["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("queue:"))
        })
        .await;
        until_released(&c, name).await;
        assert!(!suspended(&c, name), "{name} released");
        let q = c.fake.quota("ml");
        assert!(
            !queue_refs(&q).contains(&format!("batch/Job/ml/{name}")),
            "never both charged and waiting: {q}"
        );
        assert!(q["status"]["queueSummary"].is_null(), "{q}");
        jobs(&c, "bob")
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let q = c
        .until("ml", "the queue empty", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "0"
        })
        .await;
    assert!(q["status"]["queueSummary"].is_null(), "{q}");
}

async fn marks_off_alerts(c: &Cluster) -> Vec<Value> {
    let (s, v) = c
        .server
        .api(
            Method::GET,
            "/api/v1/alerts?quota=ml&kind=queue_overdue",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["key"] == bizrq::alerts::MARKS_OFF_KEY)
        .collect()
}

/// Turning marks off while Jobs wait beyond the listed top: the round of
/// a controller without keys counts them in `queueSummary.unfolded` and a
/// critical alert names the quota and what to do; once those Jobs are
/// gone (deleted here; mounting the keys again would fold them), the
/// next round finds none and the alert resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_marks_off_with_jobs_beyond_the_top_alerts_until_none_is_left() {
    let n = quota::queue::summary::TOP_ENTRIES as u64 + 3;
    let c = queue_beyond_the_top(n).await;
    let c = replaced(c, |a| a.queue_mark_key_file = None).await;
    let q = c
        .until("ml", "the stranded counted", |q| {
            q["status"]["queueSummary"]["unfolded"] == 3
        })
        .await;
    assert_eq!(q["status"]["queueSummary"]["total"], n, "{q}");
    let mut open = Vec::new();
    for _ in 0..400 {
        open = marks_off_alerts(&c).await;
        if !open.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(open.len(), 1, "{open:?}");
    let a = &open[0];
    assert_eq!(a["level"], "critical");
    assert_eq!(a["state"], "open");
    let said = a["message"].as_str().unwrap();
    assert!(
        said.starts_with("3 workloads bound to ml wait held beyond the 20 its queue lists"),
        "{said}"
    );
    assert!(said.contains("BIZRQ_QUEUE_MARK_KEY_FILE") && said.contains("BIZRQ_QUEUE_MARK_DRAIN"));
    // The three behind the top are deleted: nothing is stranded any more.
    for i in quota::queue::summary::TOP_ENTRIES as u64..n {
        jobs(&c, "bob")
            .delete(&format!("p-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    c.until("ml", "no summary once none is stranded", |q| {
        q["status"]["queueSummary"].is_null()
    })
    .await;
    let mut state = Value::Null;
    for _ in 0..400 {
        state = marks_off_alerts(&c).await[0]["state"].clone();
        if state == "resolved" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "resolved");
    assert_eq!(marks_off_alerts(&c).await.len(), 1, "fired once");
}

/// Keys from a Secret bizrq makes itself (`--queue-mark-key-secret`, the
/// shipped deployment's setting): the first replica finds none and
/// creates it with a fresh key; marks work with it; the next replica
/// reads the same Secret (not made again) and folds the marks the first
/// one signed; two replicas starting at once over no Secret end with one
/// key between them (one create wins, the other reads it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_kept_in_a_secret_bizrq_creates_are_shared_by_every_replica() {
    const SECRET: &str = "bizrq-queue-mark-keys";
    let by_secret = |a: &mut bizrq::config::ServeArgs| {
        a.queue_mark_key_file = None;
        a.queue_mark_key_secret = Some(SECRET.into());
    };
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let fake = crate::fakeapi::FakeApi::new();
    assert!(fake.get("", "secrets", "bizrq-system", SECRET).is_none());
    let c = Cluster::replica_configured(fake, dir, T0, "bizrq-0", true, &db, by_secret).await;
    let secret = c
        .fake
        .get("", "secrets", "bizrq-system", SECRET)
        .expect("created at start");
    let made = secret["metadata"]["resourceVersion"].clone();
    assert!(secret["data"]["keys"].is_string(), "{secret}");
    with_quota_ml(&c, json!("Queue"), "4").await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, "bob", job("b").cpu("2").obj()).await.unwrap();
    assert!(suspended(&c, "b"));
    assert!(mark_of(&c, "b").is_some(), "marked with the Secret's key");
    // A new replica: the same Secret, read, not made again; it folds the
    // mark the first one signed and admits b when room frees.
    let fake = c.fake.clone();
    c.running.shutdown().await;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::replica_configured(fake, dir, T0, "bizrq-1", true, &db, by_secret).await;
    let again = c.fake.get("", "secrets", "bizrq-system", SECRET).unwrap();
    assert_eq!(again["metadata"]["resourceVersion"], made);
    c.until("ml", "b folded by the new replica", |q| {
        queue_refs(q) == ["batch/Job/ml/b"]
    })
    .await;
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    c.until("ml", "b admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "2"
    })
    .await;
    // Two replicas at once over no Secret: one key between them.
    let client = c.kubectl("system:serviceaccount:bizrq-system:bizrq");
    let (x, y) = tokio::join!(
        bizrq::cluster::mark_keys::get_or_create(client.clone(), "bizrq-system", "other"),
        bizrq::cluster::mark_keys::get_or_create(client.clone(), "bizrq-system", "other"),
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.sign(b"one key"), y.sign(b"one key"));
    // A Secret that holds no usable key is refused in words.
    let broken = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "broken", "namespace": "bizrq-system"},
        "data": {"keys": "YWJjZAo="}});
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "bizrq-system",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Secret"), "secrets"),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(broken).unwrap(),
    )
    .await
    .unwrap();
    let err = bizrq::cluster::mark_keys::get_or_create(client, "bizrq-system", "broken")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("Secret bizrq-system/broken") && err.contains("at least 32 random bytes"),
        "{err}"
    );
}

/// The shipped deployment turns marks on with the Secret bizrq makes, and
/// its RBAC lets it do so: `get` on that Secret by name and `create` on
/// Secrets, in bizrq's own namespace only (a Role, not the ClusterRole).
#[test]
fn the_shipped_deployment_keeps_its_mark_keys_in_a_secret_its_role_may_make() {
    let deployment = crate::workload_lookup::shipped("deployment.yaml");
    let env = deployment[0]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    let secret = env
        .iter()
        .find(|e| e["name"] == "BIZRQ_QUEUE_MARK_KEY_SECRET")
        .expect("BIZRQ_QUEUE_MARK_KEY_SECRET set")["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!env.iter().any(|e| e["name"] == "BIZRQ_QUEUE_MARK_KEY_FILE"));
    let rbac = crate::workload_lookup::shipped("rbac.yaml");
    let grants = |verb: &str, by_name: bool| {
        rbac.iter().any(|d| {
            d["kind"] == "Role"
                && d["metadata"]["namespace"] == "bizrq-system"
                && d["rules"].as_array().unwrap().iter().any(|r| {
                    r["apiGroups"][0] == ""
                        && r["resources"][0] == "secrets"
                        && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
                        && (!by_name
                            || r["resourceNames"]
                                .as_array()
                                .is_some_and(|n| n.iter().any(|n| *n == secret)))
                })
        })
    };
    assert!(grants("get", true), "get on {secret} by name");
    assert!(grants("create", false), "create on secrets");
    let cluster_wide = rbac.iter().any(|d| {
        d["kind"] == "ClusterRole"
            && d["rules"].as_array().unwrap().iter().any(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "secrets")
            })
    });
    assert!(!cluster_wide, "no Secret anywhere else");
}
