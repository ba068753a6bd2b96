//! Queues and loans: a borrower admits from its queue on a loan when a
//! sibling goes idle, only what the backed loan covers; a finished job gives
//! its room and its loan back at once, but keeps its charge while a pod of
//! it still runs, also while a round still releases.
use super::*;

/// Wait until the server's own list (its watch's copy, where loans and
/// rounds read the siblings) shows `quota` as `f` wants.
async fn until_listed(c: &Cluster, quota: &str, f: impl Fn(&Value) -> bool) {
    for _ in 0..800 {
        let (_, all) = c.server.api(Method::GET, "/api/v1/quotas", None).await;
        let items = all.get("items").unwrap_or(&all);
        if items
            .as_array()
            .into_iter()
            .flatten()
            .any(|q| q["metadata"]["name"] == quota && f(q))
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{quota} never listed as wanted");
}

async fn create_in(c: &Cluster, ns: &str, obj: &Value) -> Result<(), String> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    let api: Api<DynamicObject> = Api::namespaced_with(c.kubectl("alice"), ns, &ar);
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api.create(&PostParams::default(), &o)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

async fn delete_in(c: &Cluster, ns: &str, name: &str) {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::<DynamicObject>::namespaced_with(c.kubectl("alice"), ns, &ar)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A cluster with `org` (8 CPUs) over `a` (4, may borrow up to `max`,
/// queueing) and `b` (4, no queue), its Job watch running.
async fn borrower_beside_a_lender(max: &str) -> Cluster {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "8"}})),
        (
            "a",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": max}, "queueing": "Queue"}),
        ),
        ("b", "org", json!({"hard": {"requests.cpu": "4"}})),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    c
}

/// A quota that may borrow (`max`) admits from its queue on a loan from
/// its parent once a sibling's room is idle: the loan is granted in the
/// parent's status and the charge made within hard + loan, as the
/// webhook's borrowing path does; never past max nor past what is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrower_admits_from_its_queue_on_a_loan_when_a_sibling_goes_idle() {
    let c = borrower_beside_a_lender("7").await;
    create_in(&c, "ml", &job("a1").quota("a").cpu("4").obj())
        .await
        .unwrap();
    create_in(&c, "web", &job("b1").ns("web").quota("b").cpu("4").obj())
        .await
        .unwrap();
    c.until("b", "b1 charged", |q| used(q, "requests.cpu") == "4")
        .await;
    // The lender judges a loan on its watch's copy of the siblings: until
    // that copy shows b1's charge, b looks idle and a loan is right (it
    // would be reclaimed once b's use shows, §5). Waited for here, as a
    // cluster's watch is seconds behind at most.
    until_listed(&c, "b", |q| used(q, "requests.cpu") == "4").await;
    // a is full and b uses all of its share: nothing idle to lend.
    create_in(&c, "ml", &job("a2").quota("a").cpu("2").obj())
        .await
        .unwrap();
    create_in(&c, "ml", &job("a3").quota("a").cpu("2").obj())
        .await
        .unwrap();
    assert!(suspended(&c, "a2") && suspended(&c, "a3"));
    let q = c
        .until("a", "both named", |q| {
            queue_refs(q).len() == 2
                && q["status"]["queue"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|e| e["uid"].as_str().is_some_and(|u| !u.is_empty()))
        })
        .await;
    assert_eq!(
        q["status"]["queue"][0]["reason"],
        "waits for 2 × requests.cpu: 0 free, 2 needed"
    );
    // b1 ends: 4 idle in org, but a may borrow only up to max 7: a2 (2)
    // rides a loan, a3 (2 more: 8 > 7) keeps waiting.
    delete_in(&c, "web", "b1").await;
    c.until("a", "a2 admitted on a loan", |q| {
        queue_refs(q) == ["batch/Job/ml/a3"] && used(q, "requests.cpu") == "6"
    })
    .await;
    // The round's restated reason: nothing free within hard, 1 more to
    // borrow up to max (said apart, as the quota page's columns).
    c.until("a", "a3's reason restated", |q| {
        q["status"]["queue"][0]["reason"]
            == "waits for 1 × requests.cpu: 0 free now, 1 more to borrow, 2 needed"
    })
    .await;
    let org = c.fake.quota("org");
    assert_eq!(
        org["status"]["loans"]["a"]["amount"]["requests.cpu"], "2",
        "the loan is in the parent's status: {org}"
    );
    for _ in 0..100 {
        if !suspended(&c, "a2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!suspended(&c, "a2"), "admitted: unsuspended");
    assert!(suspended(&c, "a3"));
}

/// Capacity comes back at once (docs/queueing.md §9): a Job that ran on
/// a loan and finishes (Complete, not deleted) releases its charge when
/// it finishes, and its loan goes back to the parent right after, with
/// the clock never moving (no reservation window, no loan age, no
/// resync): the parent lends nothing to the idle child and a sibling's
/// Job that needs the same room is admitted on a loan at once, never
/// queued. A Job that fails gives its room back alike, and a deleted one
/// returns its loan in the DELETE's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_gives_its_room_and_its_loan_back_at_once() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "8"}})),
        (
            "a",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "8"}, "queueing": "Queue"}),
        ),
        (
            "b",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "8"}, "queueing": "Queue"}),
        ),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let loan =
        |who: &str| c.fake.quota("org")["status"]["loans"][who]["amount"]["requests.cpu"].clone();
    create_in(&c, "ml", &job("a1").quota("a").cpu("8").obj())
        .await
        .unwrap();
    assert!(!suspended(&c, "a1"), "admitted on a loan of b's idle room");
    assert_eq!(loan("a"), "4");

    // a1 completes: its charge goes, then its loan.
    finish(&c, "a", "ml", "a1", "Complete");
    c.until("a", "a1's charge released on finish", |q| {
        used(q, "requests.cpu") == "0"
    })
    .await;
    c.until("org", "a's loan returned", |q| {
        q["status"]["loans"].get("a").is_none()
    })
    .await;
    let org = c.fake.quota("org");
    assert!(
        org["status"]["lent"]
            .as_object()
            .is_none_or(|l| l.values().all(|v| v == "0")),
        "nothing lent to an idle child: {org}"
    );

    // b's Job of 8 needs the same room on a loan: admitted at once.
    create_in(&c, "web", &job("b1").ns("web").quota("b").cpu("8").obj())
        .await
        .unwrap();
    let b1 = c.fake.get("batch", "jobs", "web", "b1").unwrap();
    assert_ne!(b1["spec"]["suspend"], true, "not queued: {b1}");
    let q = c
        .until("b", "b1 charged", |q| used(q, "requests.cpu") == "8")
        .await;
    assert!(queue_refs(&q).is_empty(), "{q}");
    assert_eq!(loan("b"), "4");

    // A failed Job gives its room back as well; a later edit of it
    // charges nothing.
    finish(&c, "b", "web", "b1", "Failed");
    c.until("b", "b1's charge released on failure", |q| {
        used(q, "requests.cpu") == "0"
    })
    .await;
    c.until("org", "b's loan returned", |q| {
        q["status"]["loans"].get("b").is_none()
    })
    .await;

    // Deleted while running on a loan: the DELETE's release returns it.
    create_in(&c, "ml", &job("a2").quota("a").cpu("6").obj())
        .await
        .unwrap();
    c.until("a", "a2 charged", |q| used(q, "requests.cpu") == "6")
        .await;
    assert_eq!(loan("a"), "2");
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::<DynamicObject>::namespaced_with(c.kubectl("alice"), "ml", &ar)
        .delete("a2", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        c.fake.quota("org")["status"]["loans"].get("a").is_none(),
        "returned by the time the DELETE is answered: {}",
        c.fake.quota("org")
    );
}

/// The scheduler's round on a short loan (`Service::admit_round`, the
/// pure rule `quota::queue::batch`'s
/// `a_short_loan_admits_within_hard_and_the_loan_still_backed_only`): the
/// parent refuses the round's loan, and the loan the child still holds
/// from a grant whose charge never came (a crash between the two writes)
/// is no longer backed, since the lender took part of its guarantee back.
/// The round asks for nothing more, which cuts that loan to what is
/// backed, and admits in order only what fits within hard + the cut loan,
/// never against the stale one: the parent is never lent past its hard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_on_a_short_loan_admits_only_what_the_backed_loan_covers() {
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "10"}})),
        (
            "kid",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "max": {"requests.cpu": "12"}, "queueing": "Queue"}),
        ),
        ("sib", "org", json!({"hard": {"requests.cpu": "6"}})),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    // The parent is full: sib runs its 6, kid its 4.
    for (ns, q, name, cpu) in [
        ("web", "sib", "s0", "2"),
        ("web", "sib", "s1", "4"),
        ("ml", "kid", "k0", "4"),
    ] {
        create_in(&c, ns, &job(name).ns(ns).quota(q).cpu(cpu).obj())
            .await
            .unwrap();
    }
    c.until("sib", "sib full", |q| used(q, "requests.cpu") == "6")
        .await;
    c.until("kid", "kid at its hard", |q| used(q, "requests.cpu") == "4")
        .await;
    // Three Jobs of 1 wait for room.
    for name in ["j0", "j1", "j2"] {
        create_in(&c, "ml", &job(name).quota("kid").cpu("1").obj())
            .await
            .unwrap();
        assert!(
            c.fake.get("batch", "jobs", "ml", name).unwrap()["spec"]["suspend"] == true,
            "{name} queued"
        );
    }
    // A grant of 6 whose charge never came, as a crash between the two
    // writes leaves it (young, so the parent's repair keeps it).
    let mut org = c.fake.quota("org");
    let at = quota::time::format_rfc3339(crate::cluster::T0);
    org["status"]["loans"] =
        json!({"kid": {"amount": {"requests.cpu": "6"}, "since": at, "raised": at}});
    org["status"]["lent"] = json!({"requests.cpu": "6"});
    c.fake.put(org);
    let start = c.fake.quota("org")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    // s0 ends: 2 of sib's guarantee idle. The round wants 3 on loan (kid
    // at 4 + 3), which would need 11 of 10: refused. The stale loan of 6
    // would admit all three; cut to the 2 still backed, two go.
    finish(&c, "sib", "web", "s0", "Complete");
    let kid = c
        .until("kid", "j0 and j1 admitted", |q| {
            used(q, "requests.cpu") == "6"
        })
        .await;
    assert_eq!(queue_refs(&kid), vec!["batch/Job/ml/j2".to_string()]);
    for name in ["j0", "j1"] {
        let mut n = 0;
        while suspended(&c, name) {
            n += 1;
            assert!(n < 400, "{name} never released");
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
    assert!(suspended(&c, "j2"), "j2 waits");
    assert_eq!(
        c.fake.quota("org")["status"]["loans"]["kid"]["amount"]["requests.cpu"],
        "2"
    );
    // Never past the parent's hard: no version of kid charged beyond
    // hard + what the parent could back (sib 4 + kid 4 + 2 = 10).
    for q in c.fake.quota_versions("kid", start) {
        assert!(
            used(&q, "requests.cpu").parse::<i64>().unwrap_or(0) <= 6,
            "{q}"
        );
    }
}

/// Mark Job `ns/name`, charged to `quota`, finished with `condition`, as
/// the Job controller does, at the time its charge was made.
fn finish(c: &Cluster, quota: &str, ns: &str, name: &str, condition: &str) {
    let since = c.fake.quota(quota)["status"]["workloads"][format!("batch/Job/{ns}/{name}")]
        ["since"]
        .clone();
    assert!(since.is_string(), "{name} charged to {quota}");
    let mut done = c.fake.get("batch", "jobs", ns, name).unwrap();
    done["status"] = json!({"conditions": [
        {"type": condition, "status": "True", "lastTransitionTime": since}]});
    c.fake.put(done);
}

/// A finished workload frees its room only once none of its pods runs
/// (docs/queueing.md §9): a Job that reads Complete while one of its
/// pods is still Running (a pod in a long grace period, a Kubeflow job's
/// `cleanPodPolicy: None`, a status forged by whoever may write it) keeps
/// its charge and the loan it rides on; once that pod ends, both go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_keeps_its_charge_while_a_pod_of_it_still_runs() {
    let c = borrower_beside_a_lender("8").await;
    c.until_requested("pod watch", |r| {
        r.starts_with("GET /api/v1/pods?") && r.contains("watch=true")
    })
    .await;
    let loan =
        |who: &str| c.fake.quota("org")["status"]["loans"][who]["amount"]["requests.cpu"].clone();
    // Its pod, as the Job controller makes it.
    let running = crate::cluster::pod("ml", "a1-0", "Job", "a1", 0, "2026-11-21T10:00:00Z");
    c.fake.put(running.clone());
    create_in(&c, "ml", &job("a1").quota("a").cpu("8").obj())
        .await
        .unwrap();
    c.until("a", "a1 charged", |q| used(q, "requests.cpu") == "8")
        .await;
    assert_eq!(loan("a"), "4");

    // a1 reads Complete, its pod still runs: nothing is released.
    finish(&c, "a", "ml", "a1", "Complete");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let q = c.fake.quota("a");
    assert_eq!(used(&q, "requests.cpu"), "8", "charge kept: {q}");
    assert_eq!(loan("a"), "4", "loan kept");

    // The pod ends: the charge goes, then the loan.
    let mut ended = running;
    ended["status"]["phase"] = json!("Succeeded");
    ended["status"]["containerStatuses"] = json!([{"name": "c",
        "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T10:00:00Z"}}}]);
    c.fake.put(ended);
    c.until("a", "a1's charge released once its pod ended", |q| {
        used(q, "requests.cpu") == "0"
    })
    .await;
    c.until("org", "a's loan returned", |q| {
        q["status"]["loans"].get("a").is_none()
    })
    .await;
}

/// Finished Jobs give their room back at once even while their quota's
/// queue round is still releasing what it admitted (docs/queueing.md §9):
/// the release of a queued Job (its unsuspend, through the API server and
/// both webhooks) can take seconds under load, and the reconcile that
/// lowers a finished Job's charge must not wait for it. Three quotas
/// under one parent, each with four Jobs of 1 CPU running (their pods
/// Running) and a fifth queued; one Job of each completes, so each
/// queue's round admits its fifth, whose release is slowed to 10 s; then
/// the other three of each complete at once, their pods Succeeded. Every
/// one of those charges is gone within a few seconds, long before the
/// slowed releases are answered (before, they stayed until then: the
/// reconcile waited for the round to let its quota go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_give_their_room_back_while_a_round_still_releases() {
    let c = Cluster::start().await;
    let kids = ["q0", "q1", "q2"];
    for (name, parent, spec) in [
        ("org", "", json!({"hard": {"requests.cpu": "12"}})),
        (
            "q0",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
        ),
        (
            "q1",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
        ),
        (
            "q2",
            "org",
            json!({"hard": {"requests.cpu": "4"}, "queueing": "Queue"}),
        ),
    ] {
        c.server.create_quota_spec(name, parent, spec).await;
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    c.until_requested("pod watch", |r| {
        r.starts_with("GET /api/v1/pods?") && r.contains("watch=true")
    })
    .await;
    c.fake.set_write_delay(std::time::Duration::from_millis(5));
    let pod_of = |q: &str, i: usize| {
        crate::cluster::pod(
            "ml",
            &format!("{q}-j{i}-0"),
            "Job",
            &format!("{q}-j{i}"),
            0,
            "2026-11-21T10:00:00Z",
        )
    };
    for q in kids {
        for i in 0..4 {
            create_in(&c, "ml", &job(&format!("{q}-j{i}")).quota(q).cpu("1").obj())
                .await
                .unwrap();
            c.fake.put(pod_of(q, i));
        }
        c.until(q, "four Jobs charged", |v| used(v, "requests.cpu") == "4")
            .await;
        create_in(&c, "ml", &job(&format!("{q}-w")).quota(q).cpu("1").obj())
            .await
            .unwrap();
        assert!(suspended(&c, &format!("{q}-w")), "queued");
        c.fake.slow_writes(
            &format!("/apis/batch/v1/namespaces/ml/jobs/{q}-w"),
            std::time::Duration::from_secs(10),
        );
    }
    let end = |q: &str, i: usize| {
        let mut ended = pod_of(q, i);
        ended["status"]["phase"] = json!("Succeeded");
        ended["status"]["containerStatuses"] = json!([{"name": "c",
            "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T10:00:01Z"}}}]);
        ended
    };
    // One Job of each completes: its room goes to the queued Job, whose
    // release then hangs.
    for q in kids {
        c.fake.put(end(q, 0));
        finish(&c, q, "ml", &format!("{q}-j0"), "Complete");
    }
    for q in kids {
        let wref = format!("batch/Job/ml/{q}-w");
        c.until(q, "the queued Job admitted", |v| {
            v["status"]["workloads"].get(&wref).is_some() && used(v, "requests.cpu") == "4"
        })
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for q in kids {
        assert!(
            suspended(&c, &format!("{q}-w")),
            "its release is still under way"
        );
    }
    // The other three of each complete at once, their pods Succeeded.
    let started = std::time::Instant::now();
    for q in kids {
        for i in 1..4 {
            c.fake.put(end(q, i));
            finish(&c, q, "ml", &format!("{q}-j{i}"), "Complete");
        }
    }
    for q in kids {
        let mut last = Value::Null;
        while started.elapsed() < std::time::Duration::from_secs(4) {
            last = c.fake.quota(q);
            if used(&last, "requests.cpu") == "1" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(
            used(&last, "requests.cpu"),
            "1",
            "{q}: the finished Jobs' charges still held {:?} after they completed, while the round's release hangs: {last}",
            started.elapsed()
        );
    }
    for q in kids {
        assert!(
            suspended(&c, &format!("{q}-w")),
            "released within the bound, before the slowed releases were answered"
        );
    }
}

/// The value of counter `name` in the server's `/metrics`.
async fn counter(c: &Cluster, name: &str) -> f64 {
    let (_, text) = c.server.get_text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// In `a`: a1 (4 CPUs) charged, then a2 (`cpu`) queued behind it and
/// named by a round.
async fn a2_waits_behind_a1(c: &Cluster, cpu: &str) {
    create_in(c, "ml", &job("a1").quota("a").cpu("4").obj())
        .await
        .unwrap();
    c.until("a", "a1 charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create_in(c, "ml", &job("a2").quota("a").cpu(cpu).obj())
        .await
        .unwrap();
    assert!(suspended(c, "a2"));
    c.until("a", "a2 queued and named", |q| {
        q["status"]["queue"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    })
    .await;
}

/// A round that would read what the quota's last idle round read is not
/// run (docs/queueing.md §12, "Rounds that would change nothing"): a
/// borrower whose head waits for room, asked for rounds by the updates of
/// a Job that runs (its status, which no round reads), gets none; the
/// moment a sibling's room goes idle (what its parent could lend it grows)
/// it gets one and admits, long before a round put off would be due
/// (`UNCHANGED_AT_MOST`, 10 s after its idle round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_would_read_what_its_idle_one_read_is_not_run_until_room_frees() {
    const SKIPPED: &str = "bizrq_admission_queue_rounds_skipped_total";
    let c = borrower_beside_a_lender("8").await;
    create_in(&c, "web", &job("b1").ns("web").quota("b").cpu("4").obj())
        .await
        .unwrap();
    until_listed(&c, "b", |q| used(q, "requests.cpu") == "4").await;
    a2_waits_behind_a1(&c, "2").await;
    // The quota's idle round has run by now (a2 named is its write's).
    let idle_at = std::time::Instant::now();

    // a1 runs: its status changes ask for reconciles and rounds of a, but
    // nothing a round reads changed.
    let skipped = counter(&c, SKIPPED).await;
    for active in 1..=5 {
        let mut a1 = c.fake.get("batch", "jobs", "ml", "a1").unwrap();
        a1["status"] = json!({"active": active % 2 + 1, "ready": active % 2});
        c.fake.put(a1);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for _ in 0..100 {
        if counter(&c, SKIPPED).await > skipped {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        counter(&c, SKIPPED).await > skipped,
        "rounds that would read what the idle one read were run"
    );
    assert!(suspended(&c, "a2"));

    // b1 is deleted: b's 4 are idle, a may borrow them: a round at once.
    delete_in(&c, "web", "b1").await;
    c.until("a", "a2 admitted on a loan", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "6"
    })
    .await;
    assert!(
        idle_at.elapsed() < std::time::Duration::from_secs(9),
        "admitted by a round the freed room asked for, not by one put off: {:?}",
        idle_at.elapsed()
    );
}

/// Room that grows short of what anything queued needs changes nothing a
/// round plans (docs/queueing.md §12, "Room that grew short of the least
/// queued need"): a borrower whose head needs 3 beyond its used 4 (7 of
/// max 8) gets no round when a sibling frees 2 of its room, and one that
/// admits at once when the sibling frees the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_that_grows_short_of_the_heads_need_runs_no_round() {
    const SKIPPED: &str = "bizrq_admission_queue_rounds_skipped_total";
    let c = borrower_beside_a_lender("8").await;
    for b in ["b1", "b2"] {
        create_in(&c, "web", &job(b).ns("web").quota("b").cpu("2").obj())
            .await
            .unwrap();
    }
    until_listed(&c, "b", |q| used(q, "requests.cpu") == "4").await;
    a2_waits_behind_a1(&c, "3").await;
    // Its rounds settle on the quota's version: the round that named a2
    // wrote, so the next one runs; once one is put off (a1's status
    // updates ask for rounds), the last idle round read this version.
    let put_off = || async { counter(&c, SKIPPED).await };
    let before = put_off().await;
    for active in 1..=50 {
        let mut a1 = c.fake.get("batch", "jobs", "ml", "a1").unwrap();
        a1["status"] = json!({"active": active % 2 + 1, "ready": active % 2});
        c.fake.put(a1);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if put_off().await > before {
            break;
        }
    }
    assert!(put_off().await > before, "a's rounds never settled");
    // Rounds run, by cause, but for `first`: a round whose quota the
    // controller's first quota list had not named yet (it forgets what
    // that list does not hold) runs as a first one.
    let run = || async {
        let (_, text) = c.server.get_text("/metrics").await;
        text.lines()
            .filter(|l| l.starts_with("bizrq_admission_queue_rounds_run_total{"))
            .filter(|l| !l.contains("cause=\"first\""))
            .map(str::to_string)
            .collect::<Vec<String>>()
    };
    let settled = run().await;
    let idle_at = std::time::Instant::now();

    // b1 goes: a could borrow 2, and its head needs 3.
    let skipped = put_off().await;
    delete_in(&c, "web", "b1").await;
    until_listed(&c, "b", |q| used(q, "requests.cpu") == "2").await;
    for _ in 0..100 {
        if put_off().await > skipped {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        put_off().await > skipped,
        "the round the freed room asked for was not put off"
    );
    assert_eq!(
        run().await,
        settled,
        "a round ran for room that fits nothing queued"
    );
    assert!(suspended(&c, "a2"));

    // b2 goes: 4 to borrow, a2 fits: a round at once.
    delete_in(&c, "web", "b2").await;
    c.until("a", "a2 admitted on a loan", |q| {
        queue_refs(q).is_empty() && used(q, "requests.cpu") == "7"
    })
    .await;
    assert!(
        idle_at.elapsed() < std::time::Duration::from_secs(9),
        "admitted by a round the freed room asked for, not by one put off: {:?}",
        idle_at.elapsed()
    );
}
