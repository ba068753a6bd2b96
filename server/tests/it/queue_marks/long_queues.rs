//! Long queues with marks: six hundred marked jobs keep the quota small and
//! are admitted in order, once; a job created again behind the listed top is
//! queued and admitted; draining marks lists the whole queue, signs none and
//! admits every entry; turning marks off alerts while jobs beyond the top
//! are left.
use super::*;

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
