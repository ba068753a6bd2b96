//! What is suspended and how: a JobSet queues, is admitted and is preempted
//! whole; a preemption stopped between its entry and its suspend is
//! repaired, one whose suspend answer is lost neither repeated nor lost;
//! only a job suspended by preemption is queued again.
use super::*;

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
