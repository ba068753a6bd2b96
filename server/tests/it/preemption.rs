//! Preemption from a quota's queue (docs/queueing.md §6) in cluster mode:
//! Jobs created through the emulated API server, which calls the shipped
//! mutating and validating webhooks for every matching write (bizrq's own
//! suspend and unsuspend included). A queued job of higher priority marks
//! lower-priority running batch work of its quota (`status.reclaim`,
//! origin `preempt`), which is suspended after the grace period and queued
//! again, unless room comes otherwise first; Deployments and online
//! services are never taken.

use crate::cluster::{used, Cluster, T0};
use crate::support::{events, job, queue_refs, until_event};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

pub const GRACE_MS: i64 = 300_000;

fn api(
    c: &Cluster,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(c.kubectl("alice"), ns, &ar)
}

pub fn jobs(c: &Cluster, ns: &str) -> Api<DynamicObject> {
    api(c, ns, "batch", "v1", "Job", "jobs")
}

pub async fn create(c: &Cluster, obj: &Value) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let a = match kind {
        "Job" => jobs(c, ns),
        "Deployment" => api(c, ns, "apps", "v1", "Deployment", "deployments"),
        "JobSet" => api(c, ns, "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        k => panic!("{k}"),
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    a.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", obj["metadata"]["name"]));
}

pub async fn delete(c: &Cluster, ns: &str, name: &str) {
    jobs(c, ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

pub async fn create_class(c: &Cluster, name: &str, value: i64) {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.k8s.io", "v1", "PriorityClass"),
        "priorityclasses",
    );
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value}))
    .unwrap();
    Api::<DynamicObject>::all_with(c.kubectl("alice"), &ar)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

pub async fn create_quota(c: &Cluster, name: &str, parent: &str, spec: Value) {
    let mut spec = spec;
    spec["parent"] = json!(parent);
    let (s, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

pub fn suspended(c: &Cluster, ns: &str, name: &str) -> bool {
    c.fake.get("batch", "jobs", ns, name).unwrap()["spec"]["suspend"] == true
}

pub async fn until_suspended(c: &Cluster, ns: &str, name: &str, want: bool) {
    for _ in 0..400 {
        if suspended(c, ns, name) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{ns}/{name} suspended should be {want}: {}",
        c.fake.get("batch", "jobs", ns, name).unwrap()
    );
}

pub fn marks(q: &Value) -> Vec<String> {
    q["status"]["reclaim"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The suspend PATCHes sent for `ns/name` so far.
pub fn patches(c: &Cluster, ns: &str, name: &str) -> usize {
    let path = format!("PATCH /apis/batch/v1/namespaces/{ns}/jobs/{name}");
    c.fake
        .requests()
        .iter()
        .filter(|r| r.starts_with(&path) && !r[path.len()..].starts_with('/'))
        .count()
}

/// The validating reviews of UPDATEs of `name` whose object is suspended:
/// what the API server was asked to store when it was suspended.
pub fn suspend_reviews(c: &Cluster, name: &str) -> Vec<Value> {
    c.fake
        .reviews()
        .into_iter()
        .filter(|r| r["webhook"] == "workloads.bizrq.io")
        .filter(|r| r["request"]["operation"] == "UPDATE" && r["request"]["name"] == name)
        .filter(|r| r["request"]["object"]["spec"]["suspend"] == true)
        .collect()
}

async fn preempting_cluster() -> Cluster {
    preempting_cluster_of(json!({"hard": {"requests.cpu": "5"},
        "queueing": {"mode": "Queue", "preemption": "LowerPriority"}}))
    .await
}

/// The quota `ml` of `spec`, the Job watch running, the classes
/// `batch-low` (1) and `urgent` (100) made.
async fn preempting_cluster_of(spec: Value) -> Cluster {
    let c = Cluster::start().await;
    create_quota(&c, "ml", "", spec).await;
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_class(&c, "batch-low", 1).await;
    create_class(&c, "urgent", 100).await;
    c
}

/// A job of higher priority waiting for quota marks the newest running
/// job of lower priority (only as much as it needs; a Deployment and an
/// online job of lower priority are never taken), warns its owner, and
/// after the grace period suspends it — the whole job, one PATCH through
/// the webhooks — and queues it again; the urgent job is then admitted,
/// and the preempted one is admitted again when room frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_job_preempts_lower_priority_work_after_the_grace_period() {
    let c = preempting_cluster().await;
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "web",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}});
    create(&c, &web).await;
    let mut online = job("online").cpu("1").class("batch-low").obj();
    online["metadata"]["labels"]["bizrq.io/online"] = json!("true");
    create(&c, &online).await;
    create(&c, &job("old").cpu("1").class("batch-low").obj()).await;
    c.set_clock(T0 + 1_000);
    create(&c, &job("new").pods(2).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "all charged", |q| used(q, "requests.cpu") == "5")
        .await;

    // 2 needed, 0 free: the newest low job (2) is enough; the older one,
    // the online job and the Deployment are left alone.
    create(&c, &job("urgent").pods(2).cpu("1").class("urgent").obj()).await;
    assert!(suspended(&c, "ml", "urgent"), "queued");
    let q = c.until("ml", "new marked", |q| !marks(q).is_empty()).await;
    assert_eq!(marks(&q), ["batch/Job/ml/new"], "{q}");
    let m = &q["status"]["reclaim"]["batch/Job/ml/new"];
    assert_eq!(m["origin"], "preempt");
    assert_eq!(m["action"], "suspend");
    assert_eq!(m["frees"]["requests.cpu"], "2");
    assert_eq!(m["due"], "2026-11-21T10:05:01.000Z", "{m}");
    let e = until_event(&c, "PreemptionPending", "new").await;
    assert_eq!(e["type"], "Warning");
    let note = e["note"].as_str().unwrap();
    assert!(
        note.contains("batch/Job/ml/urgent") && note.contains("300 s"),
        "{note}"
    );
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="marked"} 1"#)
        .await;
    // Nothing before the grace period, however often it runs.
    c.touch("ml", 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!suspended(&c, "ml", "new"));
    assert_eq!(patches(&c, "ml", "new"), 0);

    // Due: suspended (one merge PATCH of spec.suspend, reviewed by the
    // validating webhook with its pods as they were), queued again, and
    // the urgent job admitted in its place.
    c.set_clock(T0 + 1_000 + GRACE_MS);
    c.touch("ml", 2);
    until_suspended(&c, "ml", "new", true).await;
    assert_eq!(patches(&c, "ml", "new"), 1);
    let reviews = suspend_reviews(&c, "new");
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(reviews[0]["request"]["object"]["spec"]["parallelism"], 2);
    until_event(&c, "Preempted", "new").await;
    let q = c
        .until("ml", "urgent admitted, new queued", |q| {
            queue_refs(q) == ["batch/Job/ml/new"]
                && q["status"]["workloads"]["batch/Job/ml/urgent"]["uid"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("queue:"))
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "5", "never over hard: {q}");
    assert!(marks(&q).is_empty(), "the mark is spent: {q}");
    assert_eq!(q["status"]["queue"][0]["waiting"], "Quota");
    until_suspended(&c, "ml", "urgent", false).await;
    until_event(&c, "Admitted", "urgent").await;
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="executed"} 1"#)
        .await;
    // The Deployment, the online job and the older job were never touched.
    assert!(!c
        .fake
        .requests()
        .iter()
        .any(|r| r.starts_with("PATCH /apis/apps/v1/namespaces/ml/deployments/web")));
    assert_eq!(patches(&c, "ml", "online") + patches(&c, "ml", "old"), 0);
    // The preempted job waits behind equal or higher priority only: the
    // urgent job is not taken back (it is not of lower priority than new
    // needs), and new is admitted again when room frees.
    delete(&c, "ml", "urgent").await;
    let q = c
        .until("ml", "new admitted again", |q| queue_refs(q).is_empty())
        .await;
    assert_eq!(used(&q, "requests.cpu"), "5");
    until_suspended(&c, "ml", "new", false).await;
    until_event(&c, "Admitted", "new").await;
}

/// The pressure goes away before the mark is due (the urgent job is
/// deleted): the mark is cancelled, its owner told, and nothing is
/// suspended even once the due time passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_is_cancelled_when_the_waiting_job_goes_away() {
    let c = preempting_cluster().await;
    create(&c, &job("low").pods(5).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    c.until("ml", "low marked", |q| marks(q) == ["batch/Job/ml/low"])
        .await;
    until_event(&c, "PreemptionPending", "low").await;

    delete(&c, "ml", "urgent").await;
    let q = c
        .until("ml", "mark cancelled", |q| {
            marks(q).is_empty() && queue_refs(q).is_empty()
        })
        .await;
    assert_eq!(used(&q, "requests.cpu"), "5");
    let e = until_event(&c, "PreemptionCancelled", "low").await;
    assert_eq!(e["type"], "Normal");
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="cancelled"} 1"#)
        .await;
    c.set_clock(T0 + 2 * GRACE_MS);
    c.touch("ml", 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!suspended(&c, "ml", "low"));
    assert_eq!(patches(&c, "ml", "low"), 0);
    assert!(events(&c, "Preempted", "low").is_empty());
}

/// Work of equal priority is never preempted, and a queue without the
/// policy never preempts at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_priority_or_no_policy_never_preempts() {
    let c = preempting_cluster().await;
    create_quota(
        &c,
        "plain",
        "",
        json!({"hard": {"requests.cpu": "2"}, "queueing": "Queue"}),
    )
    .await;
    create(&c, &job("peer").pods(5).cpu("1").class("urgent").obj()).await;
    create(
        &c,
        &job("low")
            .quota("plain")
            .pods(2)
            .cpu("1")
            .class("batch-low")
            .obj(),
    )
    .await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    c.until("plain", "charged", |q| used(q, "requests.cpu") == "2")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    create(
        &c,
        &job("urgent-2")
            .quota("plain")
            .cpu("1")
            .class("urgent")
            .obj(),
    )
    .await;
    c.until("ml", "queued", |q| queue_refs(q).len() == 1).await;
    c.until("plain", "queued", |q| queue_refs(q).len() == 1)
        .await;
    c.set_clock(T0 + 2 * GRACE_MS);
    c.touch("ml", 1);
    c.touch("plain", 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    for q in ["ml", "plain"] {
        assert!(marks(&c.fake.quota(q)).is_empty(), "{q}");
    }
    assert_eq!(patches(&c, "ml", "peer") + patches(&c, "ml", "low"), 0);
}

fn jobset(name: &str, class: &str) -> Value {
    let tpl = |pods: i64| {
        json!({"spec": {"parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "priorityClassName": class,
                "containers": [{"name": "c", "image": "trainer",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}})
    };
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
        "spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": tpl(1)},
            {"name": "workers", "replicas": 2, "template": tpl(1)}]}})
}

fn jobset_suspended(c: &Cluster, name: &str) -> bool {
    c.fake
        .get("jobset.x-k8s.io", "jobsets", "ml", name)
        .unwrap()["spec"]["suspend"]
        == true
}

async fn until_jobset_suspended(c: &Cluster, name: &str, want: bool) {
    for _ in 0..400 {
        if jobset_suspended(c, name) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "JobSet {name} suspended should be {want}: {}",
        c.fake
            .get("jobset.x-k8s.io", "jobsets", "ml", name)
            .unwrap()
    );
}

/// A JobSet (`jobset.x-k8s.io/v1alpha2`, `spec.suspend`) queues like a
/// Job: created suspended when it does not fit, its replicated jobs
/// queued as pod sets (replicas × pods each), admitted whole and
/// unsuspended when room frees; and preempted whole (its own suspend
/// flag, one PATCH) by a job of higher priority, then queued again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_queues_is_admitted_and_is_preempted_whole() {
    let c = preempting_cluster().await;
    c.fake.install(crate::fakeapi::JOBSET);
    c.until_requested("jobset watch", |r| {
        r.starts_with("GET /apis/jobset.x-k8s.io/v1alpha2/jobsets?") && r.contains("watch=true")
    })
    .await;
    create(&c, &job("run").pods(3).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "run charged", |q| used(q, "requests.cpu") == "3")
        .await;

    // 3 pods (1 driver + 2 worker Jobs of 1), 2 free: queued suspended.
    create(&c, &jobset("js", "batch-low")).await;
    assert!(
        jobset_suspended(&c, "js"),
        "the mutating webhook suspends it"
    );
    let q = c
        .until("ml", "js queued", |q| {
            queue_refs(q) == ["jobset.x-k8s.io/JobSet/ml/js"]
        })
        .await;
    let sets = &q["status"]["queue"][0]["podSets"];
    assert_eq!(sets[0]["name"], "driver");
    assert_eq!(sets[0]["count"], 1);
    assert_eq!(sets[1]["name"], "workers");
    assert_eq!(sets[1]["count"], 2, "{q}");
    assert_eq!(used(&q, "requests.cpu"), "3", "not charged while queued");

    delete(&c, "ml", "run").await;
    c.until("ml", "js admitted", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "3"
    })
    .await;
    until_jobset_suspended(&c, "js", false).await;
    c.until_requested("unsuspend js", |r| {
        r.starts_with("PATCH /apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/js")
    })
    .await;

    // An urgent job needs 4 of the 2 free: the JobSet is marked, then
    // suspended whole once due, and queued again.
    create(&c, &job("urgent").pods(4).cpu("1").class("urgent").obj()).await;
    let q = c
        .until("ml", "js marked", |q| {
            marks(q) == ["jobset.x-k8s.io/JobSet/ml/js"]
        })
        .await;
    assert_eq!(
        q["status"]["reclaim"]["jobset.x-k8s.io/JobSet/ml/js"]["frees"]["requests.cpu"],
        "3"
    );
    c.set_clock(T0 + GRACE_MS);
    c.touch("ml", 1);
    until_jobset_suspended(&c, "js", true).await;
    let q = c
        .until("ml", "urgent admitted, js queued", |q| {
            queue_refs(q) == ["jobset.x-k8s.io/JobSet/ml/js"] && used(q, "requests.cpu") == "4"
        })
        .await;
    assert_eq!(q["status"]["queue"][0]["podSets"][1]["count"], 2);
    let reviews: Vec<Value> = c
        .fake
        .reviews()
        .into_iter()
        .filter(|r| r["webhook"] == "workloads.bizrq.io" && r["request"]["name"] == "js")
        .filter(|r| r["request"]["object"]["spec"]["suspend"] == true)
        .filter(|r| r["request"]["operation"] == "UPDATE")
        .collect();
    assert_eq!(reviews.len(), 1, "one suspend: {reviews:#?}");
    assert_eq!(
        reviews[0]["request"]["object"]["spec"]["replicatedJobs"][1]["replicas"], 2,
        "whole: its replicated jobs as they were"
    );
    until_event(&c, "Preempted", "js").await;
}

/// The path of `ns/name`'s Job, as the fake API server keys its failures.
fn job_path(ns: &str, name: &str) -> String {
    format!("/apis/batch/v1/namespaces/{ns}/jobs/{name}")
}

fn entry<'a>(q: &'a Value, wref: &str) -> &'a Value {
    q["status"]["queue"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["workloadRef"] == wref))
        .unwrap_or_else(|| panic!("{wref} not queued: {q}"))
}

/// A due preemption is two writes: the victim's queue entry in the
/// compare-and-swap that spends the mark, then the suspend PATCH. Every
/// suspend PATCH never getting through (refused before any webhook, so
/// nothing is written or released) stands for a controller that stopped
/// between the two: the job is queued (its charge's since, its submitter, flagged
/// preempted), still running and charged once, and no round admits it.
/// Once writes go through, the next reconcile suspends it (annotated
/// `bizrq.io/preempted`), the urgent job is admitted, and the preempted
/// one is admitted again later for its submitter, the annotation removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_stopped_between_its_entry_and_its_suspend_is_repaired() {
    let c = preempting_cluster().await;
    create(&c, &job("low").pods(5).cpu("1").class("batch-low").obj()).await;
    let q = c
        .until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    let charged_since = q["status"]["workloads"]["batch/Job/ml/low"]["since"].clone();
    assert_eq!(q["status"]["users"]["batch/Job/ml/low"], "alice");
    c.set_clock(T0 + 60_000);
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    c.until("ml", "low marked", |q| marks(q) == ["batch/Job/ml/low"])
        .await;

    // Due, and the suspend cannot be written.
    c.fake.unreachable_next(&job_path("ml", "low"), 1_000_000);
    c.set_clock(T0 + 60_000 + GRACE_MS);
    c.touch("ml", 1);
    let q = c
        .until("ml", "low queued for preemption", |q| {
            marks(q).is_empty() && queue_refs(q).contains(&"batch/Job/ml/low".to_string())
        })
        .await;
    let e = entry(&q, "batch/Job/ml/low");
    assert_eq!(e["preempted"], true, "{e}");
    assert_eq!(e["since"], charged_since, "its charge's since: {e}");
    assert_eq!(e["submittedBy"], "alice", "{e}");
    c.until_requested("the suspend tried", |r| {
        r.starts_with("PATCH /apis/batch/v1/namespaces/ml/jobs/low")
    })
    .await;
    // Reconciles while the writes fail: nothing admitted, nothing lost,
    // charged once, still running.
    c.touch("ml", 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let q = c.fake.quota("ml");
    assert!(!suspended(&c, "ml", "low"));
    assert_eq!(used(&q, "requests.cpu"), "5", "charged once: {q}");
    assert_eq!(
        q["status"]["workloads"]["batch/Job/ml/low"]["uid"]
            .as_str()
            .map(|u| u.starts_with("queue:")),
        Some(false),
        "not admitted from the queue while it runs: {q}"
    );
    assert_eq!(queue_refs(&q).len(), 2, "both wait: {q}");
    assert!(events(&c, "Preempted", "low").is_empty());

    // Writes go through again: the next reconcile suspends it, once.
    c.fake.unreachable_next(&job_path("ml", "low"), 0);
    c.touch("ml", 3);
    until_suspended(&c, "ml", "low", true).await;
    let low = c.fake.get("batch", "jobs", "ml", "low").unwrap();
    assert!(
        low["metadata"]["annotations"]["bizrq.io/preempted"].is_string(),
        "{low}"
    );
    assert_eq!(suspend_reviews(&c, "low").len(), 1, "one suspend stored");
    until_event(&c, "Preempted", "low").await;
    let q = c
        .until("ml", "urgent admitted", |q| {
            queue_refs(q) == ["batch/Job/ml/low"] && used(q, "requests.cpu") == "1"
        })
        .await;
    let e = entry(&q, "batch/Job/ml/low");
    assert_eq!(e["since"], charged_since);
    assert_eq!(e["submittedBy"], "alice");
    until_suspended(&c, "ml", "urgent", false).await;

    // Room again: low is admitted for alice, unsuspended, unannotated.
    delete(&c, "ml", "urgent").await;
    let q = c
        .until("ml", "low admitted again", |q| {
            queue_refs(q).is_empty() && used(q, "requests.cpu") == "5"
        })
        .await;
    assert_eq!(q["status"]["users"]["batch/Job/ml/low"], "alice", "{q}");
    until_suspended(&c, "ml", "low", false).await;
    let low = c.fake.get("batch", "jobs", "ml", "low").unwrap();
    assert!(
        low["metadata"]["annotations"]
            .get("bizrq.io/preempted")
            .is_none(),
        "{low}"
    );
}

/// The suspend PATCH is made but its answer is lost (the controller
/// cannot tell): the entry was queued before it, the release came with
/// it, so nothing is left to repair — no second suspend, the urgent job
/// admitted, the preempted one queued once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_whose_suspend_answer_is_lost_is_neither_repeated_nor_lost() {
    let c = preempting_cluster().await;
    create(&c, &job("low").pods(5).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    c.until("ml", "low marked", |q| marks(q) == ["batch/Job/ml/low"])
        .await;
    c.fake.lose_answer_next(&job_path("ml", "low"), 1);
    c.set_clock(T0 + GRACE_MS);
    c.touch("ml", 1);
    until_suspended(&c, "ml", "low", true).await;
    let q = c
        .until("ml", "urgent admitted, low queued", |q| {
            queue_refs(q) == ["batch/Job/ml/low"] && used(q, "requests.cpu") == "1"
        })
        .await;
    assert!(marks(&q).is_empty());
    c.until_metric(r#"bizrq_admission_queue_preemptions_total{quota="ml",result="failed"} 1"#)
        .await;
    c.touch("ml", 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(patches(&c, "ml", "low"), 1, "suspended once");
    assert_eq!(suspend_reviews(&c, "low").len(), 1);
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q), ["batch/Job/ml/low"]);
    assert_eq!(used(&q, "requests.cpu"), "1", "{q}");
}

/// The annotation tells a preemption from a person: a Job suspended by
/// its owner is never queued by the controller; one suspended by
/// preemption and found outside the queue (as an older version left it)
/// is queued again; unsuspended by hand, it loses the annotation, so
/// suspended by hand later it is not queued either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_job_suspended_by_preemption_is_queued_again_never_one_suspended_by_hand() {
    use kube::api::{Patch, PatchParams};
    let c = preempting_cluster().await;
    create(&c, &job("big").pods(4).cpu("1").class("batch-low").obj()).await;
    create(&c, &job("mine").cpu("1").class("batch-low").obj()).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    let hand = |name: &'static str, suspend: bool| {
        let c = &c;
        async move {
            jobs(c, "ml")
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"suspend": suspend}})),
                )
                .await
                .unwrap();
        }
    };
    hand("mine", true).await;
    c.until("ml", "released", |q| used(q, "requests.cpu") == "4")
        .await;
    // As a preemption of an older version left it: suspended, annotated,
    // in neither the queue nor the charges. It needs 2 of the 1 free.
    let mut p = job("p").pods(2).cpu("1").class("batch-low").obj();
    p["metadata"]["uid"] = json!("uid-p");
    p["metadata"]["annotations"] = json!({"bizrq.io/preempted": "2026-11-21T09:00:00.000Z"});
    p["spec"]["suspend"] = json!(true);
    c.fake.put(p);
    c.touch("ml", 1);
    let q = c
        .until("ml", "p queued again", |q| {
            queue_refs(q) == ["batch/Job/ml/p"]
        })
        .await;
    let e = entry(&q, "batch/Job/ml/p");
    assert_eq!(e["podSets"][0]["count"], 2, "what it runs unsuspended: {q}");
    assert_eq!(e["preempted"], true);
    c.touch("ml", 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let q = c.fake.quota("ml");
    assert_eq!(queue_refs(&q), ["batch/Job/ml/p"], "{q}");
    assert!(suspended(&c, "ml", "mine"), "never unsuspended by bizrq");
    assert_eq!(patches(&c, "ml", "mine"), 1, "only its owner's suspend");

    // Unsuspended by hand while marked: the annotation goes with it.
    let mut h = job("h").cpu("1").class("batch-low").obj();
    h["metadata"]["uid"] = json!("uid-h");
    h["metadata"]["annotations"] = json!({"bizrq.io/preempted": "2026-11-21T09:00:00.000Z"});
    h["spec"]["suspend"] = json!(true);
    h["metadata"]["labels"]["bizrq.io/queueing"] = json!("Refuse");
    c.fake.put(h);
    hand("h", false).await;
    let h = c.fake.get("batch", "jobs", "ml", "h").unwrap();
    assert!(
        h["metadata"]["annotations"]
            .get("bizrq.io/preempted")
            .is_none(),
        "{h}"
    );
    hand("h", true).await;
    c.touch("ml", 3);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let q = c.fake.quota("ml");
    assert_eq!(
        queue_refs(&q),
        ["batch/Job/ml/p"],
        "h suspended by hand: {q}"
    );
}

/// Preemption weighed against the budget (docs/queueing.md §6): the
/// urgent job waits for quota, but with the room made it would still wait
/// for core-hours, so nothing is taken and its reason says both; a top-up
/// that covers it lets it preempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_preemption_for_a_job_its_budget_would_still_hold_back() {
    use kube::api::{Patch, PatchParams};
    let c = Cluster::start().await;
    create_quota(
        &c,
        "ml",
        "",
        json!({"hard": {"requests.cpu": "5", "cash/requests.cpu": "10"},
            "queueing": {"mode": "Queue", "preemption": "LowerPriority"}}),
    )
    .await;
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    create_class(&c, "batch-low", 1).await;
    create_class(&c, "urgent", 100).await;
    // 5 cores for at most 1 h: 5 of the 10 core-hours reserved.
    let mut low = job("low").pods(5).cpu("1").class("batch-low").obj();
    low["spec"]["activeDeadlineSeconds"] = json!(3600);
    create(&c, &low).await;
    c.until("ml", "charged", |q| used(q, "requests.cpu") == "5")
        .await;
    // 2 cores for 3 h: 6 core-hours, 5 left once room is made.
    let mut urgent = job("urgent").pods(2).cpu("1").class("urgent").obj();
    urgent["spec"]["activeDeadlineSeconds"] = json!(3 * 3600);
    create(&c, &urgent).await;
    let want = "waits for 2 × requests.cpu: 0 free, 2 needed; no lower-priority work is \
                preempted for it: with the room made, it still waits for core-hours of \
                cash/requests.cpu: needs 6, 5 left";
    let q = c
        .until("ml", "the reason says both", |q| {
            q["status"]["queue"][0]["reason"] == want
        })
        .await;
    assert_eq!(q["status"]["queue"][0]["waiting"], "Quota");
    c.touch("ml", 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(marks(&c.fake.quota("ml")).is_empty(), "nothing marked");
    assert!(events(&c, "PreemptionPending", "low").is_empty());

    // Topped up to 20: the room made would admit it, so low is marked.
    crate::admission::quotas(c.kubectl("admin"))
        .patch(
            "ml",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"cash/requests.cpu": "20"}}})),
        )
        .await
        .unwrap();
    let q = c
        .until("ml", "low marked", |q| marks(q) == ["batch/Job/ml/low"])
        .await;
    assert_eq!(
        q["status"]["queue"][0]["reason"], "waits for 2 × requests.cpu: 0 free, 2 needed",
        "{q}"
    );
}

/// The queue's preemption has a grace of its own, apart from the reclaim
/// grace of loans (300 s here): with `preemption: {policy: LowerPriority,
/// graceSeconds: 0}` the lower-priority job is suspended and queued again
/// without the clock moving at all, and the urgent job admitted in its
/// place; the Event says 0 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_grace_of_zero_suspends_at_once_whatever_the_reclaim_grace() {
    let c = preempting_cluster_of(json!({"hard": {"requests.cpu": "2"},
        "queueing": {"mode": "Queue",
            "preemption": {"policy": "LowerPriority", "graceSeconds": 0}}}))
    .await;
    let (_, q) = c.server.api(Method::GET, "/api/v1/quotas/ml", None).await;
    assert_eq!(
        q["spec"]["queueing"]["preemption"],
        json!({"policy": "LowerPriority", "graceSeconds": 0}),
        "stored in the long form: {q}"
    );
    create(&c, &job("low").pods(2).cpu("1").class("batch-low").obj()).await;
    c.until("ml", "low charged", |q| used(q, "requests.cpu") == "2")
        .await;
    create(&c, &job("urgent").cpu("1").class("urgent").obj()).await;
    assert!(suspended(&c, "ml", "urgent"), "queued");
    let e = until_event(&c, "PreemptionPending", "low").await;
    let note = e["note"].as_str().unwrap();
    assert!(note.contains("suspended in 0 s"), "{note}");
    // The clock stays at T0: nothing waits for the reclaim grace.
    until_suspended(&c, "ml", "low", true).await;
    assert_eq!(patches(&c, "ml", "low"), 1);
    until_event(&c, "Preempted", "low").await;
    let q = c
        .until("ml", "urgent admitted, low queued", |q| {
            queue_refs(q) == ["batch/Job/ml/low"]
                && used(q, "requests.cpu") == "1"
                && q["status"]["workloads"]["batch/Job/ml/urgent"].is_object()
        })
        .await;
    assert!(marks(&q).is_empty(), "the mark is spent: {q}");
    until_suspended(&c, "ml", "urgent", false).await;

    // Out of range, or without preemption, is refused naming the field.
    for (queueing, want) in [
        (
            json!({"mode": "Queue", "preemption": {"policy": "LowerPriority", "graceSeconds": 31_622_401}}),
            "queueing: preemption.graceSeconds is 31622401",
        ),
        (
            json!({"mode": "Queue", "preemption": {"policy": "Never", "graceSeconds": 5}}),
            "queueing: preemption.graceSeconds only applies with policy LowerPriority",
        ),
    ] {
        let (s, v) = c
            .server
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(json!({"metadata": {"name": "other"},
                    "spec": {"parent": "", "hard": {"requests.cpu": "2"}, "queueing": queueing}})),
            )
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v.to_string().contains(want), "{v}");
    }
}

/// A finished Job is never a victim (docs/queueing.md §6): it runs
/// nothing and its charge went when it finished, so suspending it frees
/// nothing. Taken for the newest running Job of lower priority, it was
/// held, queued, admitted with nothing to charge and released, again and
/// again, while the Job that waited stayed queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_is_never_preempted() {
    let c = preempting_cluster_of(json!({"hard": {"requests.cpu": "3"},
        "queueing": {"mode": "Queue",
            "preemption": {"policy": "LowerPriority", "graceSeconds": 0}}}))
    .await;
    create(&c, &job("low").pods(2).cpu("1").class("batch-low").obj()).await;
    create(&c, &job("done").cpu("1").class("batch-low").obj()).await;
    c.until("ml", "both charged", |q| used(q, "requests.cpu") == "3")
        .await;
    // The newest Job of lower priority finishes (not deleted): its charge goes.
    let since = c.fake.quota("ml")["status"]["workloads"]["batch/Job/ml/done"]["since"].clone();
    let mut done = c.fake.get("batch", "jobs", "ml", "done").unwrap();
    done["status"] = json!({"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": since}]});
    c.fake.put(done);
    c.until("ml", "done's charge gone", |q| {
        used(q, "requests.cpu") == "2"
    })
    .await;
    // 2 CPUs wait where 1 is free: only low, running, can make the room.
    create(&c, &job("urgent").cpu("2").class("urgent").obj()).await;
    until_suspended(&c, "ml", "low", true).await;
    c.until("ml", "urgent admitted, low queued", |q| {
        queue_refs(q) == ["batch/Job/ml/low"]
            && q["status"]["workloads"]["batch/Job/ml/urgent"].is_object()
            && used(q, "requests.cpu") == "2"
    })
    .await;
    until_suspended(&c, "ml", "urgent", false).await;
    assert_eq!(
        patches(&c, "ml", "done"),
        0,
        "the finished Job is left alone"
    );
    assert!(suspend_reviews(&c, "done").is_empty());
}
