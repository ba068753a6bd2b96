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
    // A fresh browser: the refused upload may leave a closed connection
    // in the old one's pool, which its next request would pick up.
    let b = Browser::new(&s);
    b.get("/login").await;
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

/// A login with `password` from `addr` (as the ingress's `X-Forwarded-For`
/// says), with whatever cookies the browser holds.
async fn login_with(b: &Browser, addr: &str, username: &str, password: &str) -> Page {
    let p = b
        .request(Method::GET, "/login", |r| r.header("x-forwarded-for", addr))
        .await;
    assert_eq!(p.status, StatusCode::OK);
    let form = vec![
        ("username".to_string(), username.to_string()),
        ("password".to_string(), password.to_string()),
        ("csrf".to_string(), b.csrf().unwrap()),
    ];
    let p = b
        .request(Method::POST, "/login", |r| {
            r.header("x-forwarded-for", addr).form(&form)
        })
        .await;
    if p.status == StatusCode::SEE_OTHER {
        // Pick up the session's new CSRF token (to log out).
        b.get("/tokens").await;
    }
    p
}

/// An attacker guesses the admin's password from five hosts, each taking
/// a fresh address for every guess, as fast as the server lets it, while the admin signs in again and again: from
/// the browser it signed in with before (a device cookie) at an address
/// never seen, and from its usual address in a fresh browser. Each of
/// those logins goes through with the right password; the attacker is
/// slowed to 429s; and a stranger (new browser, new address) with the
/// right password is refused while the attack lasts, which is what the
/// attack would have done to the admin without its browser or address.
async fn an_attacker_on_several_addresses_cannot_lock_the_owner_out(url: &str) {
    let (s, _) = Server::start_with(url, &["--trust-forwarded-for"], Some(ADMIN_PASSWORD)).await;
    // Before the attack: the admin signs in at its usual address with its
    // browser, which keeps a device cookie.
    let own = Browser::new(&s);
    let p = login_with(&own, "192.0.2.10", "admin", ADMIN_PASSWORD).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let cookie = p
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("bizrq_device="))
        .expect("a device cookie")
        .to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/login"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    own.post("/logout", &[]).await;

    let attack_until = Instant::now() + Duration::from_secs(6);
    let mut attackers = Vec::new();
    for a in 1..=5 {
        let b = Browser::new(&s);
        attackers.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            let mut i = 0;
            while Instant::now() < attack_until {
                // A fresh address each time: no address's limit stops it.
                let guess = format!("guess-{a}-{i}-xxxxxxxx");
                let addr = format!("10.{a}.{}.{}", i / 250, i % 250 + 1);
                let p = login_with(&b, &addr, "admin", &guess).await;
                statuses.push(p.status);
                i += 1;
            }
            statuses
        }));
    }
    // Let the attack empty the username's bucket first.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (mut by_device, mut by_address, mut stranger) = (Vec::new(), Vec::new(), Vec::new());
    let mut round = 0;
    while Instant::now() + Duration::from_millis(500) < attack_until {
        // The own browser, from an address it never used.
        let p = login_with(
            &own,
            &format!("198.51.100.{}", 10 + round),
            "admin",
            ADMIN_PASSWORD,
        )
        .await;
        by_device.push(p.status);
        own.post("/logout", &[]).await;
        // A fresh browser at the usual address.
        let p = login_with(&Browser::new(&s), "192.0.2.10", "admin", ADMIN_PASSWORD).await;
        by_address.push(p.status);
        // A stranger with the right password.
        let p = login_with(
            &Browser::new(&s),
            &format!("198.18.0.{}", 10 + round),
            "admin",
            ADMIN_PASSWORD,
        )
        .await;
        stranger.push((p.status, p.body.contains("for this username")));
        round += 1;
    }
    let mut attack = Vec::new();
    for a in attackers {
        attack.extend(a.await.unwrap());
    }
    let count = |c: StatusCode| attack.iter().filter(|s| **s == c).count();
    println!(
        "attack: {} guesses, {} checked (401), {} refused (429); own browser {by_device:?}, \
         usual address {by_address:?}, stranger {stranger:?}",
        attack.len(),
        count(StatusCode::UNAUTHORIZED),
        count(StatusCode::TOO_MANY_REQUESTS),
    );
    assert!(round >= 2, "the admin signed in during the attack");
    assert!(
        by_device.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "the admin's own browser got in: {by_device:?}"
    );
    assert!(
        by_address.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "the admin's usual address got in: {by_address:?}"
    );
    assert!(
        stranger
            .iter()
            .any(|(s, username)| *s == StatusCode::TOO_MANY_REQUESTS && *username),
        "the attack empties the username's bucket for strangers: {stranger:?}"
    );
    // Slowed: the username's 10 at once, and one every 6 s, were checked.
    assert!(
        count(StatusCode::UNAUTHORIZED) <= 12,
        "{} guesses checked",
        count(StatusCode::UNAUTHORIZED)
    );
    assert!(count(StatusCode::TOO_MANY_REQUESTS) > 0);
}

/// Strangers empty `username`'s bucket: attempts from fresh addresses
/// until one is refused for the username.
async fn empty_the_usernames_bucket(s: &Server, username: &str) {
    let b = Browser::new(s);
    for i in 0..100 {
        let p = login_with(
            &b,
            &format!("10.99.0.{}", i + 1),
            username,
            "a-wrong-guess-123",
        )
        .await;
        if p.status == StatusCode::TOO_MANY_REQUESTS && p.body.contains("for this username") {
            return;
        }
    }
    panic!("{username}'s bucket never emptied");
}

/// A device cookie is trusted only for the user it was given to, and only
/// until its browser fails five times: then the browser is held to the
/// limits of a stranger like anyone.
async fn a_device_cookie_is_trusted_for_its_user_and_until_it_fails(url: &str) {
    let (s, _) = Server::start_with(url, &["--trust-forwarded-for"], Some(ADMIN_PASSWORD)).await;
    let admin = Browser::admin(&s).await;
    create_user(&admin, "alice", "alice-password-1234").await;
    create_user(&admin, "bob", "bob-password-12345").await;
    let b = Browser::new(&s);
    let p = login_with(&b, "192.0.2.20", "alice", "alice-password-1234").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let device = b.device_cookie().expect("a device cookie");
    b.post("/logout", &[]).await;
    // With the username's bucket empty, a stranger is refused ...
    empty_the_usernames_bucket(&s, "alice").await;
    let p = login_with(
        &Browser::new(&s),
        "198.18.0.1",
        "alice",
        "alice-password-1234",
    )
    .await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    // ... and alice's browser, anywhere, gets in, keeping its cookie.
    let p = login_with(&b, "198.18.0.2", "alice", "alice-password-1234").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(b.device_cookie().as_deref(), Some(device.as_str()));
    b.post("/logout", &[]).await;
    // Alice's browser is a stranger to bob's account.
    empty_the_usernames_bucket(&s, "bob").await;
    let p = login_with(&b, "198.18.0.3", "bob", "bob-password-12345").await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    // Five failures from the browser, then it is a stranger again.
    for i in 0..5 {
        let p = login_with(&b, "198.18.0.4", "alice", &format!("wrong-{i}-xxxxxxxx")).await;
        assert_eq!(
            p.status,
            StatusCode::UNAUTHORIZED,
            "failure {i}: {}",
            p.body
        );
    }
    empty_the_usernames_bucket(&s, "alice").await;
    let p = login_with(&b, "198.18.0.5", "alice", "alice-password-1234").await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    assert!(p.body.contains("for this username"), "{}", p.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attacker_on_several_addresses_cannot_lock_the_owner_out_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    an_attacker_on_several_addresses_cannot_lock_the_owner_out(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attacker_on_several_addresses_cannot_lock_the_owner_out_on_postgres() {
    an_attacker_on_several_addresses_cannot_lock_the_owner_out(&fresh_postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_cookie_is_trusted_for_its_user_and_until_it_fails_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_device_cookie_is_trusted_for_its_user_and_until_it_fails(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_cookie_is_trusted_for_its_user_and_until_it_fails_on_postgres() {
    a_device_cookie_is_trusted_for_its_user_and_until_it_fails(&fresh_postgres().await).await;
}
