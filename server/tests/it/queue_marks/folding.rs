//! A marked create's path: the webhook marks without writing the quota, the
//! round folds the mark into the queue and admits it once; forged, misbound
//! or dry-run marks never get a place (refused once, asking for no more
//! rounds); what cannot wait skips no charge; a scale or a suspend by hand
//! right after is judged as such.
use super::*;

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

/// With `--queue-fitting-creates`, a create that fits writes no quota in
/// its review either: it is
/// answered held and marked, with a warning that says it fits and that the
/// next queue round admits it, while the quota's stored version stays the
/// same; created so, the round admits it once (charged, then released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_fits_is_held_marked_and_admitted_by_the_next_round() {
    let c = marked_cluster_with(None, "4", true).await;
    c.until("ml", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let version = c.fake.quota("ml")["metadata"]["resourceVersion"].clone();
    let review = Review::bare_job_create("r-fit", "alice", job("fit").cpu("3").obj()).obj();
    let r = c.server.review("/mutate/workloads", &review).await;
    assert_eq!(r["allowed"], true, "{r}");
    let patch = String::from_utf8(base64_decode(r["patch"].as_str().expect("a patch"))).unwrap();
    assert!(patch.contains("/spec/suspend"), "{patch}");
    assert!(patch.contains("queue.bizrq.io"), "{patch}");
    let warned = r["warnings"].to_string();
    assert!(
        warned.contains(
            "bizrq ml: fits now; created suspended, admitted by the controller's next queue round"
        ),
        "{warned}"
    );
    assert_eq!(
        c.fake.quota("ml")["metadata"]["resourceVersion"],
        version,
        "the review wrote no quota"
    );
    create(&c, "alice", job("a").cpu("3").obj()).await.unwrap();
    let q = c
        .until("ml", "a admitted", |q| used(q, "requests.cpu") == "3")
        .await;
    assert!(queue_refs(&q).is_empty(), "{q}");
    assert_eq!(
        q["status"]["workloads"]["batch/Job/ml/a"]["uid"]
            .as_str()
            .map(|u| u.starts_with(quota::object::QUEUE_CHARGE)),
        Some(true),
        "charged by a round: {q}"
    );
    until_released(&c, "a").await;
    assert!(!suspended(&c, "a"), "a released");
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
        Review::bare_job_create(
            &format!("r-{i}"),
            "mallory",
            job(&format!("g-{i}")).cpu("1").obj(),
        )
        .obj()
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
    c.until_round_charged("ml", "batch/Job/ml/b", "b charged")
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

/// Creates queued behind a full quota after its idle round, none of which
/// a round could admit (each needs more than is free, none may preempt),
/// ask for no round of their own (docs/queueing.md §12, "Rounds that would
/// change nothing"): their rounds are put off, and one round folds them
/// together within `ARRIVED_AT_MOST` (2 s) of the idle one. Room that
/// frees admits them at once, in their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_none_of_which_fit_are_folded_together_not_one_round_each() {
    const SKIPPED: &str = "bizrq_admission_queue_rounds_skipped_total";
    const ROUNDS: &str = "bizrq_admission_queue_rounds_total";
    let c = marked_cluster(None).await;
    create(&c, "alice", job("a").cpu("4").obj()).await.unwrap();
    c.until("ml", "a charged", |q| used(q, "requests.cpu") == "4")
        .await;
    create(&c, "alice", job("b").cpu("2").obj()).await.unwrap();
    c.until("ml", "b folded", |q| {
        queue_refs(q) == ["batch/Job/ml/b"] && q["status"]["queue"][0]["uid"].is_string()
    })
    .await;
    // b's round was idle (nothing free); what it set off settles.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let skipped = metric(&c.server, SKIPPED).await;
    let rounds = metric(&c.server, ROUNDS).await;
    let started = std::time::Instant::now();
    // Together, as a generator creates them (each one's round would be
    // due 2 s after the idle one at the latest).
    let made = futures::future::join_all(
        (1..=4).map(|n| create(&c, "alice", job(&format!("c{n}")).cpu("1").obj())),
    )
    .await;
    for (n, m) in made.into_iter().enumerate() {
        m.unwrap();
        assert!(suspended(&c, &format!("c{}", n + 1)));
    }
    let all = [
        "batch/Job/ml/b",
        "batch/Job/ml/c1",
        "batch/Job/ml/c2",
        "batch/Job/ml/c3",
        "batch/Job/ml/c4",
    ];
    c.until("ml", "every arrival folded", |q| {
        let mut refs = queue_refs(q);
        refs.sort();
        refs == all
    })
    .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(8),
        "folded by the arrivals' bound, not the 10 s one: {:?}",
        started.elapsed()
    );
    let ran = metric(&c.server, ROUNDS).await - rounds;
    assert!(
        metric(&c.server, SKIPPED).await > skipped,
        "a round was run for each arrival ({ran} rounds)"
    );
    assert!(ran < 4.0, "{ran} rounds for 4 arrivals that could not fit");
    assert_eq!(used(&c.fake.quota("ml"), "requests.cpu"), "4");

    // a goes: b and the two c's ahead fill the 4 freed; two wait.
    jobs(&c, "alice")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let q = c
        .until("ml", "b and two c's admitted", |q| {
            queue_refs(q).len() == 2 && used(q, "requests.cpu") == "4"
        })
        .await;
    assert!(
        q["status"]["workloads"]["batch/Job/ml/b"].is_object(),
        "{q}"
    );
}
