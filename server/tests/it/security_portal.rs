//! The portal's edges under hostile input, through real server processes:
//! a login flood (memory and the webhook), per-address limits and length
//! caps, sessions that end for good, co-owners, quotas deleted and made
//! again, redirects after login, transfer request caps, and what every
//! response carries or refuses (headers, escaping, control characters, 413).

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const GPU: &str = "requests.nvidia.com/gpu";
const ALICE_PW: &str = "alice-password-1234";
const CAROL_PW: &str = "carol-password-1234";

async fn create_user(admin: &Browser, name: &str, password: &str) {
    admin.get("/users").await;
    let p = admin
        .post("/users", &[("username", name), ("password", password)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "create {name}: {}", p.body);
}

async fn bind(admin: &Browser, user: &str, quota: &str, role: &str) {
    admin.get("/users").await;
    let p = admin
        .post(
            &format!("/users/{user}/roles"),
            &[("quota", quota), ("role", role)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "bind {user}: {}", p.body);
}

/// ai (16) ─┬─ nlp (8) ── nlp-a (2)
///          └─ cv (4)
async fn tree(s: &Server) {
    for (name, parent, gpu) in [
        ("ai", "", "16"),
        ("nlp", "ai", "8"),
        ("cv", "ai", "4"),
        ("nlp-a", "nlp", "2"),
    ] {
        s.create_quota(name, parent, json!({ GPU: gpu })).await;
    }
}

/// The token a tokens page shows once, after creating it.
async fn create_token(b: &Browser, name: &str) -> String {
    b.get("/tokens").await;
    let p = b.post("/tokens", &[("name", name)]).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    let start = p.body.find("bzq_").expect("a new token on the page");
    p.body[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The highest resident set size of a process so far, in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

async fn login_failure_rows(url: &str) -> i64 {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::sqlite::SqliteConnection::connect(url).await.unwrap();
    sqlx::query("SELECT COUNT(*) FROM login_failures")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .try_get::<i64, _>(0)
        .unwrap()
}

/// 64 clients log in at once, again and again, each time as another user
/// (so the per-username limit never applies, and the per-address one is
/// lifted here): password hashing stays on its few threads, the process's
/// peak memory stays far below the 19 MiB × 64 an unbounded pool takes,
/// the overflow is answered 503 with Retry-After, and admissions keep
/// answering quickly all along.
#[tokio::test]
async fn a_login_flood_neither_exhausts_memory_nor_stalls_admissions() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Server::start_with(
        &fresh_sqlite(&dir),
        &["--login-attempts-per-minute", "1000000"],
        Some(ADMIN_PASSWORD),
    )
    .await;
    s.create_quota("team", "", json!({GPU: "100000", "pods": "100000"}))
        .await;
    let pid = s.pid();
    let before = vm_hwm_kib(pid);
    let flood_until = Instant::now() + Duration::from_secs(8);
    let mut floods = Vec::new();
    for c in 0..64 {
        let b = Browser::new(&s);
        floods.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            let mut i = 0;
            b.get("/login").await;
            while Instant::now() < flood_until {
                let user = format!("user-{c}-{i}");
                let p = b
                    .post(
                        "/login",
                        &[
                            ("username", user.as_str()),
                            ("password", "guess-guess-guess"),
                        ],
                    )
                    .await;
                statuses.push((p.status, p.headers.contains_key("retry-after")));
                i += 1;
            }
            statuses
        }));
    }
    // Meanwhile: admissions, one after another, each timed.
    let mut slowest = Duration::ZERO;
    let mut admitted = 0;
    let mut n = 0;
    while Instant::now() < flood_until {
        let d = deployment(&format!("d{n}"), "team", 1, 1);
        let r = review("deployment-create.json", &format!("uid-{n}"), Some(d), None);
        let t0 = Instant::now();
        let resp = s.review("/validate/workloads", &r).await;
        slowest = slowest.max(t0.elapsed());
        admitted += (resp["allowed"] == true) as usize;
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut statuses = Vec::new();
    for f in floods {
        statuses.extend(f.await.unwrap());
    }
    let peak = vm_hwm_kib(pid);
    let busy = statuses
        .iter()
        .filter(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    let checked = statuses
        .iter()
        .filter(|(s, _)| *s == StatusCode::UNAUTHORIZED)
        .count();
    println!(
        "{} logins: {checked} checked, {busy} busy; {n} admissions, slowest {slowest:?}; \
         VmHWM {} MiB before, {} MiB after",
        statuses.len(),
        before / 1024,
        peak / 1024
    );
    assert_eq!(admitted, n, "every admission answered and allowed");
    // Well below the API server's 10 s webhook timeout, with slack for a
    // machine shared with builds (unloaded: a few hundred ms).
    assert!(
        slowest < Duration::from_secs(3),
        "admissions kept answering: slowest {slowest:?}"
    );
    assert!(busy > 0, "the overflow is refused, not queued");
    assert!(
        statuses
            .iter()
            .filter(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
            .all(|(_, retry)| *retry),
        "503 carries Retry-After"
    );
    assert!(checked > 0, "passwords are still checked");
    assert!(
        peak < before + 128 * 1024,
        "peak memory grew by {} MiB",
        (peak - before) / 1024
    );
    // The flood over, the admin logs in as ever.
    Browser::logged_in(&s, "admin", ADMIN_PASSWORD).await;
}

/// With the default limit, one address gets 30 login attempts a minute;
/// the rest are answered 429 with Retry-After before anything is stored
/// or hashed.
#[tokio::test]
async fn logins_are_limited_per_client_address_before_anything_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_sqlite(&dir);
    let s = Server::start(&url).await;
    let b = Browser::new(&s);
    b.get("/login").await;
    let mut limited = None;
    for i in 0..40 {
        let user = format!("nobody-{i}");
        let p = b
            .post("/login", &[("username", user.as_str()), ("password", "x")])
            .await;
        if p.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some((i, p));
            break;
        }
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let (i, p) = limited.expect("the address is limited");
    // 30 at once, and one more every 2 s while they were sent.
    assert!((30..34).contains(&i), "30 attempts a minute, not {i}");
    assert!(p.headers.contains_key("retry-after"));
    assert!(p.body.contains("Too many login attempts from your address"));
    assert_eq!(
        login_failure_rows(&url).await,
        i as i64,
        "the refused one left no row"
    );
}

/// A username no account can have (here 512 KB) is neither recorded nor
/// hashed; an over-long password is refused with a message.
#[tokio::test]
async fn huge_credentials_are_refused_before_they_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_sqlite(&dir);
    let s = Server::start(&url).await;
    let b = Browser::new(&s);
    b.get("/login").await;
    let huge = "a".repeat(512 * 1024);
    let p = b
        .post("/login", &[("username", huge.as_str()), ("password", "x")])
        .await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{}", &p.body[..200]);
    assert!(p.body.len() < 64 * 1024, "the name is not echoed whole");
    let long_pw = "p".repeat(2000);
    let p = b
        .post(
            "/login",
            &[("username", "admin"), ("password", long_pw.as_str())],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(p.body.contains("at most 1024 bytes"), "{}", p.body);
    assert_eq!(login_failure_rows(&url).await, 0);
    // Nor can an admin set such a password.
    let admin = Browser::logged_in(&s, "admin", ADMIN_PASSWORD).await;
    admin.get("/users").await;
    let p = admin
        .post(
            "/users",
            &[("username", "dora"), ("password", long_pw.as_str())],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
}

/// POST /users hashes a password (tens of milliseconds); a logout or a
/// password reset lands meanwhile. The request's session write at its end
/// must not bring the ended session back.
async fn sessions_stay_ended(s: &Server) {
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    admin.get("/users").await;
    admin.post("/users/alice/admin", &[("admin", "true")]).await;
    for round in 0..3 {
        // A logout while a request of the same session is in flight.
        let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
        alice.get("/users").await;
        let user = format!("slow-{round}");
        let fields = [
            ("username", user.as_str()),
            ("password", "slow-password-12345"),
        ];
        let slow = alice.post("/users", &fields);
        let logout = async {
            tokio::time::sleep(Duration::from_millis(15)).await;
            alice.post("/logout", &[]).await
        };
        let (_, out) = tokio::join!(slow, logout);
        assert_eq!(out.status, StatusCode::SEE_OTHER);
        let again = alice.get("/").await;
        assert_eq!(
            again.status,
            StatusCode::SEE_OTHER,
            "round {round}: the session stays ended after logout"
        );

        // An admin resets alice's password while her request is in flight.
        let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
        alice.get("/users").await;
        let user = format!("slower-{round}");
        let fields = [
            ("username", user.as_str()),
            ("password", "slow-password-12345"),
        ];
        let slow = alice.post("/users", &fields);
        let reset = async {
            tokio::time::sleep(Duration::from_millis(15)).await;
            admin.get("/users").await;
            admin
                .post("/users/alice/password", &[("password", ALICE_PW)])
                .await
        };
        let (_, out) = tokio::join!(slow, reset);
        assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
        assert_eq!(
            alice.get("/").await.status,
            StatusCode::SEE_OTHER,
            "round {round}: the session stays ended after a reset"
        );
    }
}

/// A reset by an admin also revokes the user's API tokens, and says so.
async fn a_password_reset_revokes_tokens(s: &Server) {
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let token = create_token(&alice, "ci").await;
    let (st, _) = s
        .api_with(Method::GET, "/api/v1/quotas", None, Some(&token))
        .await;
    assert_eq!(st, StatusCode::OK);
    admin.get("/users").await;
    let p = admin
        .post(
            "/users/alice/password",
            &[("password", "a-new-password-1234")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let (st, _) = s
        .api_with(Method::GET, "/api/v1/quotas", None, Some(&token))
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "the token is revoked");
    assert_eq!(alice.get("/").await.status, StatusCode::SEE_OTHER);
    let audit = admin.get("/audit?action=user.password").await.body;
    assert!(audit.contains("1 API token(s) revoked"), "{audit}");
}

/// A user changes its own password: the current one is checked (and
/// wrong guesses count as failed logins), the new one given twice; its
/// other sessions end, its tokens are revoked, this session goes on.
async fn a_user_changes_its_own_password(s: &Server) {
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let elsewhere = Browser::logged_in(s, "alice", ALICE_PW).await;
    let token = create_token(&alice, "ci").await;
    let page = alice.get("/account/password").await;
    assert_eq!(page.status, StatusCode::OK);
    let new = "alice-new-password-99";
    for (current, n, c, want) in [
        (
            "wrong-password-1",
            new,
            new,
            "the current password is wrong",
        ),
        (ALICE_PW, new, "something-else-123", "differ"),
        (ALICE_PW, "short", "short", "at least 12"),
    ] {
        let p = alice
            .post(
                "/account/password",
                &[("current", current), ("new", n), ("confirm", c)],
            )
            .await;
        assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{want}");
        assert!(p.body.contains(want), "{want}: {}", p.body);
    }
    let p = alice
        .post(
            "/account/password",
            &[("current", ALICE_PW), ("new", new), ("confirm", new)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(
        alice.get("/").await.status,
        StatusCode::OK,
        "this session goes on"
    );
    assert_eq!(
        elsewhere.get("/").await.status,
        StatusCode::SEE_OTHER,
        "the other session ended"
    );
    let (st, _) = s
        .api_with(Method::GET, "/api/v1/quotas", None, Some(&token))
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "tokens are revoked");
    assert_eq!(
        Browser::new(s).login("alice", ALICE_PW).await.status,
        StatusCode::UNAUTHORIZED
    );
    Browser::logged_in(s, "alice", new).await;
    let audit = admin.get("/audit?action=user.password").await.body;
    assert!(audit.contains("password changed by the user"), "{audit}");
    // Guessing the current password is limited like logging in.
    let statuses: Vec<StatusCode> = futures_statuses(&alice, 6).await;
    assert_eq!(
        statuses.last(),
        Some(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
}

async fn futures_statuses(b: &Browser, n: usize) -> Vec<StatusCode> {
    let mut out = Vec::new();
    for _ in 0..n {
        b.get("/account/password").await;
        let p = b
            .post(
                "/account/password",
                &[
                    ("current", "a-wrong-guess-123"),
                    ("new", "whatever-password-1"),
                    ("confirm", "whatever-password-1"),
                ],
            )
            .await;
        out.push(p.status);
    }
    out
}

/// An owner of nlp may add members and owners below nlp, but not turn a
/// co-owner of nlp into a member (that takes an admin or an owner above).
async fn an_owner_cannot_demote_a_co_owner(s: &Server) {
    tree(s).await;
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "carol", CAROL_PW).await;
    create_user(&admin, "dave", "dave-password-1234").await;
    bind(&admin, "alice", "nlp", "owner").await;
    bind(&admin, "carol", "nlp", "owner").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    alice.get("/quotas/nlp").await;
    let member = |user: &'static str, quota: &'static str, role: &'static str| {
        let alice = &alice;
        async move {
            alice
                .post(
                    &format!("/quotas/{quota}/members"),
                    &[("username", user), ("role", role)],
                )
                .await
                .status
        }
    };
    assert_eq!(
        member("carol", "nlp", "member").await,
        StatusCode::FORBIDDEN
    );
    let roles = admin.get("/users").await.body;
    let carol = &roles[roles.find(">carol<").unwrap()..];
    assert!(
        carol[..carol.find("</tr>").unwrap()].contains("role owner"),
        "carol is still owner of nlp"
    );
    assert_eq!(member("dave", "nlp", "member").await, StatusCode::SEE_OTHER);
    assert_eq!(
        member("dave", "nlp-a", "owner").await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        member("dave", "nlp-a", "member").await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(member("dave", "nlp", "owner").await, StatusCode::FORBIDDEN);
    // An admin may.
    admin.get("/quotas/nlp").await;
    let p = admin
        .post(
            "/quotas/nlp/members",
            &[("username", "carol"), ("role", "member")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
}

/// A quota deleted and made again under the same name starts with no
/// roles and no alert rules; the removals are audited.
async fn a_deleted_quota_takes_its_roles_and_rules_along(s: &Server) {
    tree(s).await;
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "carol", CAROL_PW).await;
    bind(&admin, "carol", "cv", "owner").await;
    admin.get("/quotas/cv/alerts").await;
    let p = admin
        .post(
            "/quotas/cv/alerts",
            &[("key", "*"), ("warn_percent", "50"), ("crit_percent", "90")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let (st, v) = s.api(Method::DELETE, "/api/v1/quotas/cv", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.create_quota("cv", "ai", json!({ GPU: "4" })).await;
    let carol = Browser::logged_in(s, "carol", CAROL_PW).await;
    assert_eq!(
        carol.get("/quotas/cv").await.status,
        StatusCode::NOT_FOUND,
        "the new cv is not carol's"
    );
    let rules = admin.get("/quotas/cv/alerts").await.body;
    assert!(
        !rules.contains(">50<") && !rules.contains("\"50\""),
        "{rules}"
    );
    let audit = admin.get("/audit?actor=bizrq&target=cv").await.body;
    assert!(
        audit.contains("carol is no longer owner of cv: the quota was deleted"),
        "{audit}"
    );
    assert!(audit.contains("alert rule for * on cv removed"), "{audit}");
}

/// After login, only a local path is followed: no `//`, no backslash, no
/// control character or whitespace (also percent-encoded), no scheme.
async fn next_after_login_stays_local(s: &Server) {
    let b = Browser::new(s);
    let page = b.get("/login?next=/%09/evil.example").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(hidden_field(&page.body, "next").as_deref(), Some("/"));
    for (next, want) in [
        ("/\t/evil.example", "/"),
        ("/%09/evil.example", "/"),
        ("/quotas/nlp\r\nSet-Cookie: x=y", "/"),
        ("//evil.example", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("/a//b", "/"),
        ("/quotas/nlp?tab=alerts", "/quotas/nlp?tab=alerts"),
    ] {
        let b = Browser::new(s);
        b.get("/login").await;
        let p = b
            .post(
                "/login",
                &[
                    ("username", "admin"),
                    ("password", ADMIN_PASSWORD),
                    ("next", next),
                ],
            )
            .await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{next:?}: {}", p.body);
        assert_eq!(p.location(), Some(want), "{next:?}");
    }
}

fn ask(from: &str, to: &str, reason: &str) -> Value {
    json!({"from": from, "to": to, "amounts": {GPU: "1"}, "reason": reason})
}

/// Transfer requests: a quota the requester cannot see answers exactly as
/// one that does not exist; the reason is bounded; a user may have 20
/// requests open and make 30 an hour.
async fn transfer_requests_are_capped(s: &Server) {
    tree(s).await;
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    bind(&admin, "alice", "nlp", "owner").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let token = create_token(&alice, "ci").await;
    let post = |body: Value| {
        let token = token.clone();
        async move {
            s.api_with(
                Method::POST,
                "/api/v1/transfers",
                Some(serde_json::to_vec(&body).unwrap()),
                Some(&token),
            )
            .await
        }
    };
    let (st_cv, v_cv) = post(ask("nlp", "cv", "a test")).await;
    let (st_no, v_no) = post(ask("nlp", "nope", "a test")).await;
    assert_eq!(
        (st_cv, st_no),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND)
    );
    assert_eq!(
        v_cv["error"]["message"]
            .as_str()
            .unwrap()
            .replace("cv", "X"),
        v_no["error"]["message"]
            .as_str()
            .unwrap()
            .replace("nope", "X"),
        "invisible and unknown answer alike"
    );
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "r"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND, "the form too");
    let (st, v) = post(ask("nlp", "nlp-a", &"x".repeat(2001))).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("at most 2000"));

    let mut ids = Vec::new();
    for i in 0..20 {
        let (st, v) = post(ask("nlp", "nlp-a", "more for a")).await;
        assert_eq!(st, StatusCode::CREATED, "request {i}: {v}");
        ids.push(v["id"].as_i64().unwrap());
    }
    let (st, v) = post(ask("nlp", "nlp-a", "one more")).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["error"]["reason"], "TooManyRequests");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("20 transfer requests waiting"));
    let (st, v) = s
        .api(
            Method::POST,
            &format!("/api/v1/transfers/{}/reject", ids[0]),
            Some(json!({ "note": "n".repeat(2001) })),
        )
        .await;
    assert_eq!(
        st,
        StatusCode::BAD_REQUEST,
        "a rejection's note is bounded too: {v}"
    );
    // Decided ones no longer count as open, but still count for the hour.
    for id in &ids[..15] {
        let (st, v) = s
            .api(
                Method::POST,
                &format!("/api/v1/transfers/{id}/reject"),
                Some(json!({"note": "no"})),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    for i in 0..10 {
        let (st, v) = post(ask("nlp", "nlp-a", "more for a")).await;
        assert_eq!(st, StatusCode::CREATED, "request {i} after rejections: {v}");
    }
    let (st, v) = post(ask("nlp", "nlp-a", "one more")).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in the last hour"),
        "{v}"
    );
}

/// Every portal and API response carries the security headers, and a real
/// page renders under its policy (no script, styles from /style.css and
/// inline attributes).
async fn responses_carry_security_headers(s: &Server) {
    tree(s).await;
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    for path in [
        "/",
        "/tree",
        "/quotas/nlp",
        "/login",
        "/api/v1/quotas",
        "/style.css",
    ] {
        let p = admin.get(path).await;
        let h = |n: &str| p.headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(
            h("content-security-policy").contains("frame-ancestors 'none'"),
            "{path}"
        );
        assert!(
            h("content-security-policy").contains("default-src 'none'"),
            "{path}"
        );
        assert_eq!(h("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(h("referrer-policy"), "same-origin", "{path}");
        assert_eq!(h("x-frame-options"), "DENY", "{path}");
    }
    let page = admin.get("/tree").await.body;
    assert!(!page.contains("<script"), "no script a policy would block");
    assert!(page.contains("href=\"/style.css\""));
}

/// A reason sent back into the request form's textarea is escaped.
async fn textarea_content_is_escaped(s: &Server) {
    tree(s).await;
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    admin.get("/transfers").await;
    let evil = "</textarea><script>alert(1)</script>";
    let p = admin
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "nlp-a"),
                ("key", GPU),
                ("amount", "-1"),
                ("reason", evil),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(!p.body.contains("<script>alert(1)"), "{}", p.body);
    assert!(
        p.body.contains("&lt;/textarea&gt;&lt;script&gt;"),
        "{}",
        p.body
    );
}

/// NUL and other control characters are refused at the edge, with a
/// message: 400 in the API's JSON shape, 422 for pages (on PostgreSQL a NUL
/// used to reach the database and fail with 500).
async fn control_characters_are_refused_at_the_edge(s: &Server) {
    tree(s).await;
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/quotas",
            Some(json!({"metadata": {"name": "a\u{0}b"}, "spec": {"parent": "ai", "hard": {GPU: "1"}}})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["status"], 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("U+0000"),
        "{v}"
    );
    let (st, v) = s.api(Method::GET, "/api/v1/alerts?quota=%00", None).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, v) = s.api(Method::GET, "/api/v1/quotas/a%00b", None).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    let p = admin.get("/audit?actor=%00").await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(p.body.contains("control character"), "{}", p.body);
    admin.get("/quotas/ai/children/new").await;
    let p = admin
        .post(
            "/quotas/ai/children/new",
            &[("name", "x\u{0}y"), ("hard:requests.nvidia.com/gpu", "1")],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", p.body);
    // Line breaks in a reason are fine.
    let (st, v) = s
        .api(
            Method::POST,
            "/api/v1/transfers",
            Some(ask("nlp", "nlp-a", "line one\r\nline two\tend")),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

/// A body over the API's limit answers 413 in the API's JSON error shape.
async fn too_large_bodies_answer_json_on_the_api(s: &Server) {
    let big = format!(
        "{{\"metadata\": {{\"name\": \"x\"}}, \"pad\": \"{}\"}}",
        "x".repeat(2 << 20)
    );
    let (st, v) = s
        .api_with(
            Method::POST,
            "/api/v1/quotas",
            Some(big.into_bytes()),
            Some(TOKEN),
        )
        .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(v["error"]["status"], 413, "{v}");
    assert_eq!(v["error"]["reason"], "RequestEntityTooLarge");
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::common::*;
            #[tokio::test]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let s = Server::start(&fresh_sqlite(&dir)).await;
                super::$name(&s).await;
            }
            #[tokio::test]
            async fn postgres() {
                let s = Server::start(&fresh_postgres().await).await;
                super::$name(&s).await;
            }
        }
    )*};
}

on_both!(
    sessions_stay_ended,
    a_password_reset_revokes_tokens,
    a_user_changes_its_own_password,
    an_owner_cannot_demote_a_co_owner,
    a_deleted_quota_takes_its_roles_and_rules_along,
    next_after_login_stays_local,
    transfer_requests_are_capped,
    responses_carry_security_headers,
    textarea_content_is_escaped,
    control_characters_are_refused_at_the_edge,
    too_large_bodies_answer_json_on_the_api,
);

/// Cluster mode: a quota deleted in the cluster (as `kubectl delete` does)
/// is seen by the controller's watch, which removes its roles and alert
/// rules (audited), so a later quota of the same name starts with none.
#[tokio::test]
async fn a_quota_deleted_in_the_cluster_takes_its_roles_and_rules_along() {
    use crate::cluster::{Cluster, T0};
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_sqlite(&dir);
    let c = Cluster::start_on(crate::fakeapi::FakeApi::new(), dir, T0).await;
    c.server.create_quota("ai", "", json!({ GPU: "16" })).await;
    c.server.create_quota("cv", "ai", json!({ GPU: "4" })).await;
    let sql = bizrq::store::sql::SqlStore::connect(&url).await.unwrap();
    let carol = sql.create_user("carol", "h", false, 1).await.unwrap();
    sql.set_binding(carol.id, "cv", bizrq::portal::authz::Role::Owner, 1)
        .await
        .unwrap();
    sql.set_alert_rule(
        "cv",
        &bizrq::alerts::Rule {
            key: "*".into(),
            warn_percent: 50,
            crit_percent: 90,
            forecast_horizon_hours: None,
        },
    )
    .await
    .unwrap();
    c.fake
        .remove("bizrq.io", "bizgroupresourcequotas", "", "cv");
    let mut gone = false;
    for _ in 0..200 {
        if sql.bindings_on("cv").await.unwrap().is_empty()
            && sql.alert_rules("cv").await.unwrap().is_empty()
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the controller removed cv's roles and rules");
    let audit = sql
        .audit(
            &bizrq::store::audit::AuditFilter {
                actor: Some("bizrq".into()),
                target: Some("cv".into()),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(audit.len(), 2, "{audit:?}");
}
