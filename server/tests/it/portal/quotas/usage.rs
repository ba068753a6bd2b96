//! The quota pages' figures: charts and forecasts once usage is sampled; a
//! parent's subtree in use apart from what it allocated, and its usage chart;
//! a thousand-quota tree folds and finds deep nodes; the usage API answers
//! one figure; an owner sees the work queued in its teams.
use super::*;

/// The detail page charts a quota's keys from its current status even
/// before the sampler has recorded it (an edit shows at once), and draws
/// the history and the forecasts once it has.
async fn charts_and_forecasts_appear_once_usage_is_sampled(s: &Server) {
    let o = org(s).await;
    s.create_quota(
        "ml",
        "",
        json!({"requests.nvidia.com/gpu": "4", "cash/requests.nvidia.com/gpu": "100"}),
    )
    .await;
    let before = o.admin.get("/quotas/ml").await.body;
    assert_eq!(
        before.matches("<figure class=\"chart\"><svg").count(),
        2,
        "the current status is a chart's point before any sample: {before}"
    );
    assert!(
        before.contains("(now)</th><td class=\"num\">0 cards</td><td class=\"num\">4 cards</td>"),
        "{before}"
    );
    assert!(!before.contains("runs out in"), "no burn to forecast yet");
    let sql = bizrq::store::sql::SqlStore::connect(&s.database_url)
        .await
        .unwrap();
    let mut q: quota::Quota = serde_json::from_value(s.quota("ml").await).unwrap();
    let now = bizrq::util::now_ms();
    for (i, spent) in [(3, "10"), (2, "20"), (1, "30")] {
        q.status.hard = q.spec.hard.clone();
        q.status.used = [
            ("requests.nvidia.com/gpu".to_string(), "2".parse().unwrap()),
            (
                "cash/requests.nvidia.com/gpu".to_string(),
                spent.parse().unwrap(),
            ),
        ]
        .into();
        // A sample's use is what runs (`selfUsed` here and below).
        q.status.self_used = [("requests.nvidia.com/gpu".to_string(), "2".parse().unwrap())].into();
        sql.record_samples(now - i * 3_600_000, std::slice::from_ref(&q))
            .await
            .unwrap();
    }
    let page = o.admin.get("/quotas/ml").await.body;
    assert_eq!(
        page.matches("<figure class=\"chart\"><svg").count(),
        2,
        "a usage chart and a burn-down: {page}"
    );
    // The forecast is at what runs now: history alone burns nothing.
    assert!(!page.contains("runs out in"), "{page}");
    let d = deployment("train", "ml", 2, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "fc-1", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let page = o.admin.get("/quotas/ml").await.body;
    assert!(
        page.contains("left · runs out in") && page.contains("burning 2 card-hours/h"),
        "{page}"
    );
    let home = o.admin.get("/").await.body;
    assert!(
        home.contains("left · runs out in") && home.contains("burning 2 card-hours/h"),
        "the overview forecasts the budget: {home}"
    );
    // 100 card-hours at 2 an hour: under two days, which needs the
    // viewer, in the same words as the forecast.
    assert!(
        home.contains("Needs attention")
            && home.contains("ml's budget runs out in")
            && home.contains("at what runs now: 100 card-hours left"),
        "the overview leads with what needs the viewer: {home}"
    );
}

/// A thousand quotas: the tree folds below two levels, stays small, and
/// answers quickly; a search finds a deep node with its ancestors.
#[tokio::test]
async fn a_thousand_quota_tree_folds_and_finds_deep_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota(
        "org",
        "",
        json!({"requests.nvidia.com/gpu": "10000", "pods": "100000"}),
    )
    .await;
    let mut n = 1;
    for d in 0..10 {
        let dept = format!("dept-{d}");
        s.create_quota(
            &dept,
            "org",
            json!({"requests.nvidia.com/gpu": "1000", "pods": "10000"}),
        )
        .await;
        n += 1;
        for t in 0..10 {
            let team = format!("team-{d}-{t}");
            s.create_quota(
                &team,
                &dept,
                json!({"requests.nvidia.com/gpu": "100", "pods": "1000"}),
            )
            .await;
            n += 1;
            for p in 0..9 {
                let proj = format!("proj-{d}-{t}-{p}");
                s.create_quota(
                    &proj,
                    &team,
                    json!({"requests.nvidia.com/gpu": "10", "pods": "100"}),
                )
                .await;
                n += 1;
            }
        }
    }
    assert_eq!(n, 1011);
    let admin = Browser::admin(&s).await;
    let t0 = std::time::Instant::now();
    let page = admin.get("/tree").await;
    let folded = t0.elapsed();
    assert_eq!(page.status, StatusCode::OK);
    let t0 = std::time::Instant::now();
    let full = admin.get("/tree?depth=9").await;
    let unfolded = t0.elapsed();
    println!(
        "tree of {n}: folded {} KB in {folded:?}; unfolded {} KB in {unfolded:?}",
        page.body.len() / 1024,
        full.body.len() / 1024
    );
    assert!(page.body.contains(">9 below<"), "teams fold their projects");
    // A team opens in place: its projects under it, the rest still folded.
    let opened = admin.get("/tree?open=team-7-3").await.body;
    assert!(opened.contains(">proj-7-3-5<"), "opened in place");
    assert!(!opened.contains(">proj-7-4-5<"), "the others stay folded");
    assert!(
        opened.contains(r#"href="/tree#team-7-3""#),
        "the toggle folds it again"
    );
    assert!(page.body.len() < 200_000, "{} bytes", page.body.len());
    assert!(full.body.len() < 2_000_000, "{} bytes", full.body.len());
    assert!(folded < std::time::Duration::from_secs(2));
    let found = admin.get("/tree?q=proj-7-3-5").await.body;
    for name in ["org", "dept-7", "team-7-3", "proj-7-3-5"] {
        assert!(found.contains(&format!(">{name}<")), "{name}");
    }
    assert!(!found.contains(">proj-7-3-4<"));
}

/// A parent's bars say what runs in its whole subtree, not what it carved
/// out: with 2 GPUs running in nlp-a, ai (16, all of 12 allocated to nlp and
/// cv) shows 2 in use and 10 allocated but idle, on the tree, the overview
/// and its own page; a key whose hard is zero and that nothing uses is not
/// shown.
async fn a_parent_shows_its_subtree_in_use_apart_from_what_it_allocated(s: &Server) {
    let o = org(s).await;
    let d = deployment("train", "nlp-a", 1, 2);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-train", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let tree = o.admin.get("/tree").await.body;
    let overview = o.admin.get("/").await.body;
    let page = o.admin.get("/quotas/ai").await.body;
    // The tree: one row per quota; its GPU column says the same.
    assert!(
        tree.contains("<b>2</b> / 16")
            && tree.contains("2 in use (subtree), 12 allocated to children, 16 hard"),
        "tree: ai counts nlp-a's GPUs as in use, not its carve-outs: {tree}"
    );
    assert!(
        tree.contains("allocated to children, idle</span>"),
        "tree: the legend"
    );
    assert!(
        overview.contains("2 in use of 16 (12%)"),
        "overview: ai counts nlp-a's GPUs as in use, not its carve-outs: {overview}"
    );
    assert!(
        overview.contains("10 allocated to children, idle · 4 unallocated"),
        "overview: ai's idle allocation: {overview}"
    );
    assert!(
        overview.contains("allocated to children, idle</span>"),
        "overview: the legend"
    );
    assert!(page.contains("10 allocated to children, idle"), "{page}");
    // The same numbers from the JSON API; bob (member of cv) may not see ai.
    let (st, v) = o
        .admin
        .api(Method::GET, "/api/v1/quotas/ai/usage", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let gpu = v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "requests.nvidia.com/gpu")
        .unwrap()
        .clone();
    assert_eq!(
        (
            &gpu["inUse"],
            &gpu["allocated"],
            &gpu["allocatedIdle"],
            &gpu["unallocated"]
        ),
        (&json!("2"), &json!("12"), &json!("10"), &json!("4")),
        "{v}"
    );
    let (st, _) = o
        .bob
        .api(Method::GET, "/api/v1/quotas/ai/usage", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(
        tree.contains("<b>2</b> / 8") && tree.contains("<b>2</b> / 2"),
        "nlp and nlp-a: {tree}"
    );
    s.create_quota(
        "zero",
        "",
        json!({"requests.nvidia.com/gpu": "0", "pods": "3"}),
    )
    .await;
    let tree = o.admin.get("/tree?q=zero").await.body;
    assert!(tree.contains("pods 0%"), "{tree}");
    assert!(
        !tree.contains("in use of 0"),
        "a key with zero hard and no use is not shown: {tree}"
    );
}

/// The usage API's free now and borrowable now read the quota's parent and
/// siblings: a heavy request's work (docs/limits.md). One person's
/// requests beyond their cap are answered 429 with `Retry-After` before
/// anything is read, and every one let in gives the same figures.
#[tokio::test]
async fn the_usage_api_takes_a_heavy_place_and_answers_one_figure() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Server::start_with(
        &fresh_sqlite(&dir),
        &["--heavy-requests-per-user", "1", "--render-threads", "1"],
        Some(crate::common::ADMIN_PASSWORD),
    )
    .await;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    // nlp (hard 4, max 12) may borrow what its idle siblings leave.
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "nlp"},
                "spec": {"parent": "ai", "hard": {GPU: "4"}, "max": {GPU: "12"}}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    for i in 0..40 {
        s.create_quota(&format!("team-{i:02}"), "ai", json!({GPU: "0"}))
            .await;
    }
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/quotas/nlp/usage", s.http);
    let sent: Vec<_> = (0..32)
        .map(|_| {
            let (c, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let r = c.get(url).bearer_auth(TOKEN).send().await.unwrap();
                let retry = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                (r.status(), retry, r.text().await.unwrap())
            })
        })
        .collect();
    let (mut answers, mut refused) = (std::collections::BTreeSet::new(), 0);
    for t in sent {
        let (status, retry, body) = t.await.unwrap();
        match status {
            StatusCode::TOO_MANY_REQUESTS => {
                refused += 1;
                assert_eq!(retry.as_deref(), Some("2"), "{body}");
                assert!(body.contains("you already have 1 heavy requests"), "{body}");
            }
            StatusCode::OK => {
                let v: Value = serde_json::from_str(&body).unwrap();
                let gpu = v["keys"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|k| k["key"] == GPU)
                    .unwrap()
                    .clone();
                answers.insert(format!("{} {}", gpu["freeNow"], gpu["borrowableNow"]));
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(refused > 0, "32 at once with a cap of 1: some refused");
    // 4 free of its own; ai's 12 unallocated lend it 8 more (max 12).
    assert_eq!(
        answers.into_iter().collect::<Vec<_>>(),
        ["\"4\" \"8\""],
        "every answer let in says the same"
    );
    let (st, _) = s.api(Method::GET, "/api/v1/quotas/nlp/usage", None).await;
    assert_eq!(st, StatusCode::OK, "the places were given back");
}

/// A parent's usage chart plots what runs in its subtree, the keys
/// table's "in use", both in its stored samples and in its point now:
/// ai carved 12 of its 16 GPUs out for nlp, which runs 2.
#[tokio::test]
async fn a_parents_usage_chart_plots_what_runs_below_it_not_its_carve_outs() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    s.create_quota("nlp", "ai", json!({GPU: "12"})).await;
    let r = s
        .review(
            "/validate/workloads",
            &review(
                "deployment-create.json",
                "u-chart",
                Some(deployment("train", "nlp", 1, 2)),
                None,
            ),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    // A sample of the whole forest, as the sampler takes it (after the
    // one the server took when ai was made: samples only move forward).
    let sql = bizrq::store::sql::SqlStore::connect(&s.database_url)
        .await
        .unwrap();
    let mut forest: Vec<quota::Quota> = Vec::new();
    for n in ["ai", "nlp"] {
        forest.push(serde_json::from_value(s.quota(n).await).unwrap());
    }
    assert_eq!(
        quota::resources::get(&forest[0].status.used, GPU),
        quota::Quantity::from_units(12),
        "ai's status counts its carve-out"
    );
    sql.record_samples(bizrq::util::now_ms(), &forest)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (st, v) = s
        .api(
            Method::GET,
            &format!("/api/v1/quotas/ai/samples?key={GPU}&range=24h"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let points = v["points"].as_array().unwrap();
    let n = points.len();
    assert!(n >= 2, "the sample and now: {v}");
    for p in &points[n - 2..] {
        let used = p["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kv| kv[0] == "used")
            .unwrap()[1]
            .clone();
        assert_eq!(used, json!("2"), "what runs, not the 12 carved out: {p}");
    }
    assert!(
        points[n - 1]["readout"]
            .as_str()
            .unwrap()
            .ends_with("in use 2 cards, hard 16 cards"),
        "{v}"
    );
    let last = v["rows"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last[1], "2 cards", "the values table says the same: {v}");
}

/// An owner sees its teams' queues on the overview (docs/queueing.md §7):
/// olga owns lab, not its team ml, and the work queued in ml is listed
/// for her with who submitted it; a member of lab (who owns nothing) is
/// not shown work queued below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_sees_the_work_queued_in_its_teams() {
    use crate::cluster::{used, Cluster};
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let c = Cluster::start().await;
    for (name, parent, spec) in [
        ("lab", "", json!({"requests.cpu": "8"})),
        ("ml", "lab", json!({"requests.cpu": "4"})),
    ] {
        let (st, v) = c
            .server
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(json!({"metadata": {"name": name},
                    "spec": {"parent": parent, "hard": spec, "queueing": "Queue"}})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    c.until_requested("job watch", |r| {
        r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
    })
    .await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    for (name, user, cpu) in [("big", "alice", "4"), ("waits", "bob@example.com", "2")] {
        let job: DynamicObject = serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "labels": {"biz.group.resource.quota": "ml"}},
            "spec": {"parallelism": 1, "completions": 1,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer",
                    "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}}}))
        .unwrap();
        Api::<DynamicObject>::namespaced_with(c.kubectl(user), "ml", &ar)
            .create(&PostParams::default(), &job)
            .await
            .unwrap();
        if name == "big" {
            c.until("ml", "big charged", |q| used(q, "requests.cpu") == "4")
                .await;
        }
    }
    c.until("ml", "waits queued", |q| {
        q["status"]["queue"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["workloadRef"] == "batch/Job/ml/waits"))
    })
    .await;
    let admin = Browser::admin(&c.server).await;
    create_user(&admin, "olga", "olga-password-0123456").await;
    create_user(&admin, "max", "max-password-01234567").await;
    bind(&admin, "olga", "lab", "owner").await;
    bind(&admin, "max", "lab", "member").await;
    let olga = Browser::logged_in(&c.server, "olga", "olga-password-0123456").await;
    let html = olga.get("/").await.body;
    let at = html
        .find("Queued in your quotas (1)")
        .unwrap_or_else(|| panic!("the owner of lab sees ml's queue: {html}"));
    let section = &html[at..];
    let section = &section[..section.find("</section>").unwrap()];
    for want in [
        "batch/Job/ml/waits",
        "bob@example.com",
        "href=\"/quotas/ml#queue\"",
    ] {
        assert!(section.contains(want), "{want} not in {section}");
    }
    let max = Browser::logged_in(&c.server, "max", "max-password-01234567").await;
    let html = max.get("/").await.body;
    assert!(
        !html.contains("batch/Job/ml/waits"),
        "a member of lab owns nothing below it: {html}"
    );
}

on_both!(
    charts_and_forecasts_appear_once_usage_is_sampled,
    a_parent_shows_its_subtree_in_use_apart_from_what_it_allocated,
);
