//! Strings no Kubernetes name, label, uid or username holds (NUL, other
//! controls, bidirectional overrides), sent in admission reviews, on
//! SQLite and PostgreSQL (docs/hostile-input.md): each is refused with a
//! denied review (code 400) naming the field, before anything is stored,
//! and the quota stays writable; a quota an older version poisoned (a NUL
//! in a stored username, review uid or workload name) stays writable, and
//! `bizrq repair` cleans it.

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

const WEB: &str = "apps/Deployment/nlp/web";

fn create(name: &str) -> Value {
    let mut d = deployment(name, "nlp-team", 1, 2);
    d["metadata"]["namespace"] = "nlp".into();
    review(
        "deployment-create.json",
        &format!("c-{name}"),
        Some(d),
        None,
    )
}

/// Each hostile review, what it changes, and the field its denial names.
fn hostile_reviews() -> Vec<(Value, &'static str)> {
    let mut out = Vec::new();
    let mut r = create("web");
    r["request"]["userInfo"]["username"] = "alice\u{0}".into();
    out.push((
        r,
        "request.userInfo.username contains a control character (U+0000)",
    ));
    let mut r = create("web");
    r["request"]["uid"] = "c-\u{0}".into();
    out.push((r, "request.uid contains a control character (U+0000)"));
    let mut r = create("we\u{0}b");
    r["request"]["name"] = "web".into();
    r["request"]["uid"] = "c-web".into();
    out.push((
        r,
        "request.object.metadata.name contains a control character (U+0000)",
    ));
    let mut r = create("web");
    r["request"]["name"] = "we\u{0}b".into();
    out.push((r, "request.name contains a control character (U+0000)"));
    let mut r = create("web");
    r["request"]["object"]["metadata"]["labels"]["biz.group.resource.quota/gpu-type"] =
        "A100\u{0}".into();
    out.push((
        r,
        "labels.biz.group.resource.quota/gpu-type contains a control character (U+0000)",
    ));
    let mut r = create("web");
    r["request"]["object"]["metadata"]["labels"]["biz.group.resource.quota/cpu-type"] =
        "A4\u{202E}".into();
    out.push((
        r,
        "cpu-type contains a bidirectional override character (U+202E)",
    ));
    let mut r = create("web");
    r["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        ["example.com/f\u{0}o"] = "1".into();
    out.push((r, "a key in request.object.spec.template.spec.containers[0].resources.requests contains a control character (U+0000)"));
    let mut r = create("web");
    r["request"]["uid"] = "u".repeat(4096).into();
    out.push((r, "request.uid is 4096 bytes long"));
    let mut r = create("web");
    r["request"]["userInfo"]["groups"][0] = "devs\u{1b}[2J".into();
    out.push((
        r,
        "request.userInfo.groups[0] contains a control character (U+001B)",
    ));
    out
}

async fn refuses_hostile_reviews(url: &str) {
    let s = Server::start(url).await;
    s.create_quota("nlp-team", "", json!({GPU: "16", "requests.cpu": "64"}))
        .await;
    for path in ["/validate/workloads", "/mutate/workloads"] {
        for (r, says) in hostile_reviews() {
            let v = s.review(path, &r).await;
            assert_eq!(v["allowed"], false, "{path} {says}: {v}");
            assert_eq!(v["status"]["code"], 400, "{path} {says}: {v}");
            assert_eq!(v["status"]["reason"], "BadRequest", "{v}");
            let m = v["status"]["message"].as_str().unwrap();
            assert!(m.contains(says), "{path}: {m}");
            assert!(!m.contains("internal error"), "{m}");
        }
    }
    let q = s.quota("nlp-team").await;
    assert_eq!(q["status"]["used"][GPU], "0", "nothing was charged: {q}");
    assert!(
        q["status"].get("users").is_none(),
        "nothing was stored: {q}"
    );

    // A quota named with a NUL is refused alike by the quota webhook.
    let mut qr = fixture("quota-create.json");
    qr["request"]["name"] = "speech\u{0}".into();
    qr["request"]["object"]["metadata"]["name"] = "speech\u{0}".into();
    let v = s.review("/validate/quotas", &qr).await;
    assert_eq!(
        (&v["allowed"], &v["status"]["code"]),
        (&json!(false), &json!(400)),
        "{v}"
    );
    assert!(
        v["status"]["message"]
            .as_str()
            .unwrap()
            .contains("request.name"),
        "{v}"
    );

    // The quota is as writable as before: a clean review is charged and
    // its DELETE released.
    let v = s.review("/validate/workloads", &create("web")).await;
    assert_eq!(v["allowed"], true, "{v}");
    assert_eq!(s.used("nlp-team", GPU).await, "2");
    // A DELETE is never refused: one of a hostile name touches nothing.
    let mut bad = deployment("web\u{0}", "nlp-team", 1, 2);
    bad["metadata"]["namespace"] = "nlp".into();
    let v = s
        .review(
            "/validate/workloads",
            &review("deployment-delete.json", "d-bad", None, Some(bad)),
        )
        .await;
    assert_eq!(v["allowed"], true, "{v}");
    assert!(
        v["warnings"][0]
            .as_str()
            .unwrap()
            .contains("releases nothing"),
        "{v}"
    );
    assert_eq!(s.used("nlp-team", GPU).await, "2");
    let mut d = deployment("web", "nlp-team", 1, 2);
    d["metadata"]["namespace"] = "nlp".into();
    let v = s
        .review(
            "/validate/workloads",
            &review("deployment-delete.json", "d-web", None, Some(d)),
        )
        .await;
    assert_eq!(v["allowed"], true, "{v}");
    assert_eq!(s.used("nlp-team", GPU).await, "0");

    // The JSON API refuses the same strings (the portal's edge check).
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "x\u{0}"}, "spec": {"parent": "", "hard": {}}})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
}

#[tokio::test]
async fn hostile_review_strings_are_refused_naming_the_field_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    refuses_hostile_reviews(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn hostile_review_strings_are_refused_naming_the_field_on_postgres() {
    refuses_hostile_reviews(&fresh_postgres().await).await;
}

/// A DELETE is never refused, so its review uid is never checked: an
/// HPA's DELETE lifts the reservation and stores none of a hostile uid
/// (the lowered charge keeps its own).
#[tokio::test]
async fn an_hpa_delete_stores_none_of_its_review_uid() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota("nlp-team", "", json!({GPU: "16", "requests.cpu": "64"}))
        .await;
    let mut d = deployment("train-a100", "nlp-team", 1, 2);
    d["metadata"]["namespace"] = "nlp".into();
    let v = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "c-train", Some(d), None),
        )
        .await;
    assert_eq!(v["allowed"], true, "{v}");
    let mut h = fixture("hpa-create.json");
    h["request"]["object"]["spec"]["maxReplicas"] = 4.into();
    let v = s.review("/validate/hpa", &h).await;
    assert_eq!(v["allowed"], true, "{v}");
    assert_eq!(s.used("nlp-team", GPU).await, "8", "4 replicas reserved");
    let long = "u".repeat(4096);
    let mut del = h.clone();
    del["request"]["operation"] = "DELETE".into();
    del["request"]["oldObject"] = h["request"]["object"].clone();
    del["request"]["object"] = Value::Null;
    del["request"]["uid"] = long.clone().into();
    let v = s.review("/validate/hpa", &del).await;
    assert_eq!(v["allowed"], true, "{v}");
    assert_eq!(s.used("nlp-team", GPU).await, "2", "the reservation lifted");
    let q = s.quota("nlp-team").await;
    assert!(!q.to_string().contains(&long[..200]), "{q}");
}

const CASH: &str = "cash/requests.nvidia.com/gpu";
const T0: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
const HOUR: i64 = 3_600_000;

async fn in_process(url: &str, at: i64) -> (bizrq::Running, Server) {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.resync_seconds = 3600;
    let (clock, c) = test_clock(at);
    clock.store(at, Ordering::SeqCst);
    let running = bizrq::start_with(&args, None, Some(c)).await.unwrap();
    let s = Server::in_process(&running);
    (running, s)
}

async fn db(url: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap()
}

/// What an older version stored: a username and a review uid with a NUL
/// (both PostgreSQL stores inside JSON text, escaped), and on SQLite a
/// charge under a workload name with a NUL (PostgreSQL refused that one).
async fn poison(url: &str) {
    let pool = db(url).await;
    let status: String = sqlx::query_scalar("SELECT status FROM quotas WHERE name = 'nlp-team'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(status.contains("\"alice\""), "{status}");
    sqlx::query("UPDATE quotas SET status = $1 WHERE name = 'nlp-team'")
        .bind(status.replace("\"alice\"", "\"al\\u0000ice\""))
        .execute(&pool)
        .await
        .unwrap();
    let charge: String =
        sqlx::query_scalar("SELECT charge FROM charges WHERE quota = 'nlp-team' AND workload = $1")
            .bind(WEB)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(charge.contains("\"uid\":\"c-web\""), "{charge}");
    sqlx::query("UPDATE charges SET charge = $1 WHERE workload = $2")
        .bind(charge.replace("\"uid\":\"c-web\"", "\"uid\":\"c-\\u0000\""))
        .bind(WEB)
        .execute(&pool)
        .await
        .unwrap();
    if url.starts_with("sqlite:") {
        sqlx::query("INSERT INTO charges (quota, workload, charge) VALUES ('nlp-team', $1, $2)")
            .bind("apps/Deployment/nlp/we\u{0}b")
            .bind(&charge)
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;
}

fn run_repair(url: &str, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bizrq"))
        .args(["repair", "--database-url", url])
        .args(extra)
        .env("BIZRQ_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn poisoned_quota_is_writable_and_repaired(url: &str) {
    let sqlite = url.starts_with("sqlite:");
    let (running, s) = in_process(url, T0).await;
    s.create_quota("nlp-team", "", json!({GPU: "16", CASH: "1000"}))
        .await;
    let mut r = create("web");
    r["request"]["userInfo"]["username"] = "alice".into();
    assert_eq!(s.review("/validate/workloads", &r).await["allowed"], true);
    running.shutdown().await;
    poison(url).await;

    // An hour later every write accrues a ledger entry carrying the
    // poisoned username: the writes still go through.
    let (running, s) = in_process(url, T0 + HOUR).await;
    let v = s.review("/validate/workloads", &create("job")).await;
    assert_eq!(v["allowed"], true, "a write to the poisoned quota: {v}");
    let held = if sqlite { "6" } else { "4" };
    assert_eq!(s.used("nlp-team", GPU).await, held);
    let mut d = deployment("job", "nlp-team", 1, 2);
    d["metadata"]["namespace"] = "nlp".into();
    let v = s
        .review(
            "/validate/workloads",
            &review("deployment-delete.json", "d-job", None, Some(d)),
        )
        .await;
    assert_eq!(v["allowed"], true, "{v}");
    let held = if sqlite { "4" } else { "2" };
    assert_eq!(
        s.used("nlp-team", GPU).await,
        held,
        "the DELETE released its charge"
    );
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/nlp-team",
            Some(json!({"metadata": {"name": "nlp-team"}, "spec": {"parent": "", "hard": {GPU: "20", CASH: "1000"}}})),
        )
        .await;
    assert!(st.is_success(), "the admin's edit: {st} {v}");
    running.shutdown().await;
    let pool = db(url).await;
    let users: Vec<Option<String>> =
        sqlx::query_scalar("SELECT username FROM budget_ledger WHERE workload = $1")
            .bind(WEB)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        users.iter().any(|u| u.as_deref() == Some("al\u{FFFD}ice")),
        "the ledger keeps who asked, scrubbed: {users:?}"
    );
    pool.close().await;

    // The repair: first what it would do, then done, then nothing left.
    let dry = run_repair(url, &["--dry-run"]);
    assert!(dry.contains("would repair 1 quotas"), "{dry}");
    let out = run_repair(url, &[]);
    assert!(
        out.contains("nlp-team: scrubbed the charge of apps/Deployment/nlp/web"),
        "{out}"
    );
    assert!(
        out.contains("nlp-team: scrubbed the username of apps/Deployment/nlp/web"),
        "{out}"
    );
    if sqlite {
        assert!(
            out.contains("nlp-team: dropped the charge of apps/Deployment/nlp/we\\0b"),
            "{out}"
        );
    }
    assert!(out.contains("repaired 1 quotas"), "{out}");
    assert!(run_repair(url, &[]).contains("repaired 0 quotas"));

    let pool = db(url).await;
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT workload, charge FROM charges")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(!rows[0].1.contains("\\u0000"), "{rows:?}");
    let status: String = sqlx::query_scalar("SELECT status FROM quotas WHERE name = 'nlp-team'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!status.contains("\\u0000"), "{status}");
    pool.close().await;
    let (running, s) = in_process(url, T0 + 2 * HOUR).await;
    let q = s.quota("nlp-team").await;
    assert_eq!(q["status"]["used"][GPU], "2", "{q}");
    assert_eq!(q["status"]["users"][WEB], "al\u{FFFD}ice", "{q}");
    running.shutdown().await;
}

#[tokio::test]
async fn a_poisoned_quota_stays_writable_and_is_repaired_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    poisoned_quota_is_writable_and_repaired(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn a_poisoned_quota_stays_writable_and_is_repaired_on_postgres() {
    poisoned_quota_is_writable_and_repaired(&fresh_postgres().await).await;
}

/// The knock-on of a failing write: an admin's edit of a child raises its
/// carve-out in the parent first; when the child's own write then fails,
/// the carve-out is settled back to the child as stored, so no transfer
/// finds it "in flight" (a carve-out that is not its child's hard). The
/// child's write is made to fail by a trigger, as the poisoned ledger did.
async fn failed_edit_leaves_no_carve_out_in_flight(url: &str) {
    let s = Server::start(url).await;
    s.create_quota("ai", "", json!({"pods": "1000"})).await;
    s.create_quota("cv", "ai", json!({"pods": "150"})).await;
    let pool = db(url).await;
    let triggers: &[&str] = if url.starts_with("sqlite:") {
        &[
            "CREATE TRIGGER fail_cv BEFORE UPDATE ON quotas WHEN NEW.name = 'cv' \
           BEGIN SELECT RAISE(ABORT, 'the write of cv fails'); END",
        ]
    } else {
        &[
            "CREATE FUNCTION fail_cv() RETURNS trigger AS $$ BEGIN \
             RAISE EXCEPTION 'the write of cv fails'; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER fail_cv BEFORE UPDATE ON quotas FOR EACH ROW \
             WHEN (NEW.name = 'cv') EXECUTE FUNCTION fail_cv()",
        ]
    };
    for t in triggers {
        sqlx::query(t).execute(&pool).await.unwrap();
    }
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(json!({"metadata": {"name": "cv"}, "spec": {"parent": "ai", "hard": {"pods": "151"}}})),
        )
        .await;
    assert!(!st.is_success(), "the child's write fails: {st} {v}");
    let ai = s.quota("ai").await;
    assert_eq!(
        ai["status"]["children"]["cv"]["hard"]["pods"], "150",
        "{ai}"
    );
    assert_eq!(ai["status"]["used"]["pods"], "150", "{ai}");
    assert_eq!(s.quota("cv").await["spec"]["hard"]["pods"], "150");
    sqlx::query("DROP TRIGGER fail_cv ON quotas")
        .execute(&pool)
        .await
        .ok();
    sqlx::query("DROP TRIGGER IF EXISTS fail_cv")
        .execute(&pool)
        .await
        .ok();
    pool.close().await;
    // Once writes succeed again, so does the edit.
    let (st, v) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(json!({"metadata": {"name": "cv"}, "spec": {"parent": "ai", "hard": {"pods": "151"}}})),
        )
        .await;
    assert!(st.is_success(), "{st} {v}");
    let ai = s.quota("ai").await;
    assert_eq!(
        ai["status"]["children"]["cv"]["hard"]["pods"], "151",
        "{ai}"
    );
}

#[tokio::test]
async fn a_failed_edit_leaves_no_carve_out_in_flight_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    failed_edit_leaves_no_carve_out_in_flight(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn a_failed_edit_leaves_no_carve_out_in_flight_on_postgres() {
    failed_edit_leaves_no_carve_out_in_flight(&fresh_postgres().await).await;
}

const DAY: i64 = 24 * HOUR;

/// Issue 29's last findings, at the HTTP boundary: a loan given back
/// decades away, object names the API server would refuse, and keys a
/// child holds that its parent has not, at the largest amount there is.
async fn bounds_hold(url: &str) {
    let s = Server::start(url).await;
    s.create_quota("root", "", json!({GPU: "16"})).await;
    s.create_quota("nlp-team", "root", json!({GPU: "8", "requests.cpu": "64"}))
        .await;

    // A loan's revertAt: at most 366 days ahead, refused 400 naming it
    // beyond, and nothing recorded.
    let now = bizrq::util::now_ms();
    for at in [i64::MAX, now + 367 * DAY] {
        let ask =
            json!({"to": "nlp-team", "amounts": {GPU: "1"}, "reason": "loan", "revertAt": at});
        let (st, v) = s.api(Method::POST, "/api/v1/transfers", Some(ask)).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{at}: {v}");
        assert!(v.to_string().contains("revertAt"), "{v}");
    }
    let (_, v) = s.api(Method::GET, "/api/v1/transfers", None).await;
    assert_eq!(v["items"].as_array().map(Vec::len), Some(0), "{v}");
    let ask = json!({"to": "nlp-team", "amounts": {GPU: "1"}, "reason": "loan", "revertAt": now + 30 * DAY});
    let (st, v) = s.api(Method::POST, "/api/v1/transfers", Some(ask)).await;
    assert_eq!(
        st,
        StatusCode::CREATED,
        "a loan within the year is taken: {v}"
    );

    // Names the API server refuses: /api/v1/check and a review alike
    // answer 400 naming metadata.name, and nothing is charged.
    for bad in ["Web", "web_1", "-web", "we..b"] {
        let mut d = deployment(bad, "nlp-team", 1, 1);
        d["metadata"]["namespace"] = "nlp".into();
        let (st, v) = s.api(Method::POST, "/api/v1/check", Some(d.clone())).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert!(v.to_string().contains("metadata.name"), "{bad}: {v}");
        assert!(v.to_string().contains("DNS-1123"), "{bad}: {v}");
        let r = review("deployment-create.json", &format!("c-{bad}"), Some(d), None);
        let v = s.review("/validate/workloads", &r).await;
        assert_eq!(
            (&v["allowed"], &v["status"]["code"]),
            (&json!(false), &json!(400)),
            "{v}"
        );
        assert!(
            v["status"]["message"]
                .as_str()
                .unwrap()
                .contains("metadata.name"),
            "{v}"
        );
    }
    assert_eq!(s.used("nlp-team", GPU).await, "0");

    // Keys the parent has not (pods, memory): the child alone bounds them,
    // up to the largest amount a quantity holds; beyond it, 400.
    const MAX: &str = "9223372036854775807";
    for i in 0..3 {
        s.create_quota(
            &format!("wide-{i}"),
            "root",
            json!({GPU: "1", "pods": MAX, "requests.memory": MAX}),
        )
        .await;
    }
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "wider"}, "spec": {"parent": "root", "hard": {GPU: "1", "pods": "9223372036854775808"}}})),
        )
        .await;
    assert_eq!(
        st,
        StatusCode::BAD_REQUEST,
        "beyond the largest quantity: {v}"
    );
    for i in 0..3 {
        let mut d = deployment(&format!("w{i}"), &format!("wide-{i}"), 2, 0);
        d["metadata"]["namespace"] = "nlp".into();
        let v = s
            .review(
                "/validate/workloads",
                &review("deployment-create.json", &format!("w-{i}"), Some(d), None),
            )
            .await;
        assert_eq!(v["allowed"], true, "{v}");
    }
    // Every sum over them (the parent's carve-outs, the tree, the
    // overview, the list, the CSV) is answered, and none wrapped.
    let root = s.quota("root").await;
    assert_eq!(root["status"]["used"][GPU], "11", "{root}");
    assert!(!root.to_string().contains("-9223"), "{root}");
    let wide = s.quota("wide-0").await;
    assert_eq!(wide["status"]["used"]["pods"], "2", "{wide}");
    for path in [
        "/api/v1/quotas",
        "/api/v1/quotas/root/usage",
        "/api/v1/live/overview",
    ] {
        let (st, v) = s.api(Method::GET, path, None).await;
        assert_eq!(st, StatusCode::OK, "{path}: {v}");
        assert!(!v.to_string().contains("-9223"), "{path}: {v}");
    }
    let admin = Browser::admin(&s).await;
    for path in ["/", "/tree", "/tree.csv", "/quotas/root", "/quotas/wide-0"] {
        let p = admin.get(path).await;
        assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
        assert!(!p.body.contains("-9223"), "{path}");
    }
}

#[tokio::test]
async fn loans_names_and_keys_absent_in_the_parent_are_bounded_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    bounds_hold(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn loans_names_and_keys_absent_in_the_parent_are_bounded_on_postgres() {
    bounds_hold(&fresh_postgres().await).await;
}
