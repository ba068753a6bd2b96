//! Logins under load and abuse: hashing stays bounded, limits apply per
//! address, and nothing oversized is stored.

use super::*;

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
        // 64 clients from one address: the per-address connection cap
        // would refuse them before the login path this test is about.
        &[
            "--login-attempts-per-minute",
            "1000000",
            "--max-connections-per-ip",
            "0",
        ],
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
    Browser::admin(&s).await;
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
    // 512 KB: past the 16 KiB a form may have before login, refused unread.
    // The server answers 413 and closes without reading the rest; the
    // kernel then resets the connection over the unread bytes, which on a
    // loaded machine can reach the client before it has read the 413
    // (no lingering close). Either way it was refused unread.
    let huge = "a".repeat(512 * 1024);
    match b
        .try_post("/login", &[("username", huge.as_str()), ("password", "x")])
        .await
    {
        Ok((status, body)) => {
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
            assert!(body.len() < 64 * 1024, "the name is not echoed whole");
        }
        Err(e) => assert!(
            e.is_request() || e.is_body(),
            "refused unread, connection closed: {e}"
        ),
    }
    // 8 KB: read, but no account can have it: neither recorded nor hashed.
    let long_name = "a".repeat(8 * 1024);
    let p = b
        .post(
            "/login",
            &[("username", long_name.as_str()), ("password", "x")],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{}", p.body);
    assert!(p.body.len() < 4 * 1024, "the name is not echoed whole");
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
    let admin = Browser::admin(&s).await;
    admin.get("/users").await;
    let p = admin
        .post(
            "/users",
            &[("username", "dora"), ("password", long_pw.as_str())],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
}

/// A login from `addr` (as the ingress's `X-Forwarded-For` says).
async fn login_from(b: &Browser, addr: &str, username: &str) -> Page {
    let p = b
        .request(Method::GET, "/login", |r| r.header("x-forwarded-for", addr))
        .await;
    assert_eq!(p.status, StatusCode::OK);
    let form = vec![
        ("username".to_string(), username.to_string()),
        ("password".to_string(), "not-the-password".to_string()),
        ("csrf".to_string(), b.csrf().unwrap()),
    ];
    b.request(Method::POST, "/login", |r| {
        r.header("x-forwarded-for", addr).form(&form)
    })
    .await
}

/// Failed logins are counted per username and address key: the addresses
/// of one IPv6 /64 are one client, so rotating through them does not make
/// fresh counters.
#[tokio::test]
async fn failed_logins_from_one_ipv6_64_are_counted_together() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Server::start_with(
        &fresh_sqlite(&dir),
        &["--trust-forwarded-for"],
        Some(ADMIN_PASSWORD),
    )
    .await;
    let b = Browser::new(&s);
    for i in 1..=5 {
        let p = login_from(&b, &format!("2001:db8::{i:x}"), "admin").await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let p = login_from(&b, "2001:db8::99", "admin").await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    assert!(p.body.contains("Too many failed logins"), "{}", p.body);
}

/// One username is limited across all addresses: guesses spread over
/// many addresses go no faster than 10 a minute.
#[tokio::test]
async fn one_username_is_limited_whatever_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Server::start_with(
        &fresh_sqlite(&dir),
        &["--trust-forwarded-for"],
        Some(ADMIN_PASSWORD),
    )
    .await;
    let b = Browser::new(&s);
    for i in 1..=10 {
        let p = login_from(&b, &format!("10.0.0.{i}"), "admin").await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let p = login_from(&b, "10.0.0.11", "admin").await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    assert!(
        p.body.contains("Too many login attempts for this username"),
        "{}",
        p.body
    );
    // Another username from a fresh address is not held up.
    let p = login_from(&b, "10.0.0.12", "nobody").await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED);
}
