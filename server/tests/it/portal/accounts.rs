//! Accounts: login rate limits, token revocation, session cookies and the
//! bootstrap admin.

use super::*;

/// Five failed logins per username and address in 15 minutes; the sixth
/// attempt is refused without a password check, even a right one.
async fn the_sixth_failed_login_is_refused_without_a_password_check(s: &Server) {
    let admin = Browser::admin(s).await;
    create_user(&admin, "carol", "carol-password-123").await;
    let b = Browser::new(s);
    let mut messages = Vec::new();
    for i in 0..5 {
        // Unknown users and wrong passwords answer alike.
        let (user, pw) = if i % 2 == 0 {
            ("carol", "wrong-password")
        } else {
            ("carol", "also-wrong")
        };
        let p = b.login(user, pw).await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "attempt {i}");
        messages.push(p.body.contains("Wrong username or password."));
    }
    assert!(messages.iter().all(|m| *m));
    let unknown = b.login("nobody", "whatever").await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert!(unknown.body.contains("Wrong username or password."));
    let p = b.login("carol", "carol-password-123").await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    assert!(p.body.contains("Too many failed logins"), "{}", p.body);
    assert!(p.headers.contains_key("retry-after"));
    assert_eq!(
        b.get("/").await.status,
        StatusCode::SEE_OTHER,
        "not logged in"
    );
    // The limit is per username: others still log in from here.
    let other = Browser::new(s);
    assert_eq!(
        other.login("admin", ADMIN_PASSWORD).await.status,
        StatusCode::SEE_OTHER
    );
    // Case does not dodge it.
    assert_eq!(
        b.login("CAROL", "carol-password-123").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A revoked token, or the token of a disabled user, is refused at once.
async fn a_revoked_or_disabled_users_token_is_refused_at_once(s: &Server) {
    let o = org(s).await;
    let call = |t: String| async move {
        s.api_with(Method::GET, "/api/v1/quotas/nlp", None, Some(&t))
            .await
            .0
    };
    assert_eq!(call(o.alice_token.clone()).await, StatusCode::OK);
    let second = create_token(&o.alice, "second").await;
    assert_eq!(call(second.clone()).await, StatusCode::OK);
    let page = o.alice.get("/tokens").await.body;
    assert!(!page.contains("bzq_"), "a token is shown only once");
    assert!(page.contains("alice-ci") && page.contains("second"));
    let first_id = {
        let at = page.find("alice-ci").unwrap();
        let rest = &page[at..];
        let a = rest.find("/tokens/").unwrap() + "/tokens/".len();
        rest[a..].split('/').next().unwrap().to_string()
    };
    // Bob cannot revoke Alice's token.
    o.bob.get("/tokens").await;
    let p = o
        .bob
        .post(&format!("/tokens/{first_id}/revoke"), &[("confirm", "yes")])
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    assert_eq!(call(o.alice_token.clone()).await, StatusCode::OK);
    let p = o
        .alice
        .post(&format!("/tokens/{first_id}/revoke"), &[("confirm", "yes")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(call(o.alice_token.clone()).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(second.clone()).await,
        StatusCode::OK,
        "only that token"
    );
    let page = o.alice.get("/tokens").await.body;
    assert!(page.contains("revoked"), "{page}");
    // Disabling a user stops its tokens and ends its sessions.
    o.admin.get("/users").await;
    let p = o
        .admin
        .post(
            "/users/alice/disabled",
            &[("disabled", "true"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(call(second.clone()).await, StatusCode::UNAUTHORIZED);
    assert_eq!(o.alice.get("/").await.status, StatusCode::SEE_OTHER);
    assert_eq!(
        Browser::new(s).login("alice", ALICE_PW).await.status,
        StatusCode::UNAUTHORIZED
    );
    let p = o
        .admin
        .post("/users/alice/disabled", &[("disabled", "false")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(call(second).await, StatusCode::OK, "enabled again");
    // Last use is recorded. (Disabling ended alice's session: read the
    // page in a new one, or it would be the login redirect's empty body.)
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let page = alice.get("/tokens").await.body;
    assert!(
        page.contains("alice-ci") && page.contains("second"),
        "{page}"
    );
    assert_eq!(
        page.matches("data-label=\"Last used\" class=\"num\">never<")
            .count(),
        0,
        "both tokens were used: {page}"
    );
    assert_eq!(
        page.matches("data-label=\"Last used\" class=\"num\">")
            .count(),
        2,
        "{page}"
    );
}

fn attrs(set_cookie: &str) -> Vec<String> {
    set_cookie
        .split(';')
        .skip(1)
        .map(|a| a.trim().to_ascii_lowercase())
        .collect()
}

/// The login page makes no session: its CSRF token is in a cookie of its
/// own (HttpOnly, SameSite=Strict, Path=/login). The session cookie comes
/// at login: HttpOnly, SameSite=Strict, Path=/; Secure behind HTTPS; gone
/// at logout.
async fn the_session_cookie_is_strict_and_renewed_at_login(s: &Server) {
    let b = Browser::new(s);
    let p = b.get("/login").await;
    assert_eq!(p.session_cookie(), None, "no session for a page view");
    let form = p
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("bizrq_login="))
        .expect("the login form's cookie")
        .to_string();
    let a = attrs(&form);
    assert!(a.contains(&"httponly".into()), "{form}");
    assert!(a.contains(&"samesite=strict".into()), "{form}");
    assert!(a.contains(&"path=/login".into()), "{form}");
    assert!(
        !a.contains(&"secure".into()),
        "plain HTTP without --secure-cookies: {form}"
    );
    let p = b
        .post(
            "/login",
            &[("username", "admin"), ("password", ADMIN_PASSWORD)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), Some("/"));
    let logged = p.session_cookie().expect("a session at login");
    let id = |c: &str| c.split(';').next().unwrap().to_string();
    let a = attrs(&logged);
    assert!(a.contains(&"httponly".into()), "{logged}");
    assert!(a.contains(&"samesite=strict".into()), "{logged}");
    assert!(a.contains(&"path=/".into()), "{logged}");
    let old = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = old
        .get(format!("{}/", s.http))
        .header("cookie", id(&logged))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Behind a TLS-terminating proxy.
    let r = old
        .get(format!("{}/login", s.http))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    let c = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(attrs(&c).contains(&"secure".into()), "{c}");
    // Logout deletes the session, whoever still holds the cookie.
    b.get("/tokens").await;
    let p = b.post("/logout", &[]).await;
    assert_eq!(
        (p.status, p.location()),
        (StatusCode::SEE_OTHER, Some("/login"))
    );
    let removal = p.session_cookie().expect("the cookie is removed");
    assert!(
        removal.to_ascii_lowercase().contains("max-age=0"),
        "{removal}"
    );
    let r = old
        .get(format!("{}/", s.http))
        .header("cookie", id(&logged))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    // Login redirects back, but only within the site.
    let p = b.get("/audit?actor=x").await;
    assert_eq!(p.location(), Some("/login?next=%2Faudit%3Factor%3Dx"));
    b.get("/login").await;
    let p = b
        .post(
            "/login",
            &[
                ("username", "admin"),
                ("password", ADMIN_PASSWORD),
                ("next", "//evil.example/"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/"));
}

on_both!(
    the_sixth_failed_login_is_refused_without_a_password_check,
    a_revoked_or_disabled_users_token_is_refused_at_once,
    the_session_cookie_is_strict_and_renewed_at_login
);

/// `--secure-cookies` marks the cookie Secure on plain HTTP too.
#[tokio::test]
async fn secure_cookies_marks_the_cookie_secure_on_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Server::start_with(
        &fresh_sqlite(&dir),
        &["--secure-cookies"],
        Some(ADMIN_PASSWORD),
    )
    .await;
    let b = Browser::new(&s);
    let p = b.get("/login").await;
    let c = p.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(c.starts_with("bizrq_login="), "{c}");
    assert!(attrs(&c).contains(&"secure".into()), "{c}");
    let p = b.login("admin", ADMIN_PASSWORD).await;
    let c = p.session_cookie().unwrap();
    assert!(attrs(&c).contains(&"secure".into()), "{c}");
}

/// First start: `admin` with a generated password, printed once on stdout;
/// a restart prints nothing and the password still works.
async fn bootstrap_admin(url: &str) {
    let password = {
        let (s, lines) = Server::start_with(url, &[], None).await;
        let line = lines
            .iter()
            .find(|l| l.contains("generated password"))
            .unwrap_or_else(|| panic!("no password line in {lines:?}"));
        let password = line.rsplit(' ').next().unwrap().to_string();
        assert!(password.len() >= 20, "{line}");
        assert_eq!(
            Browser::new(&s).login("admin", &password).await.status,
            StatusCode::SEE_OTHER
        );
        password
    };
    let (s, lines) = Server::start_with(url, &[], Some("ignored-after-first-start")).await;
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(
        Browser::new(&s).login("admin", &password).await.status,
        StatusCode::SEE_OTHER
    );
    // The admin token still acts as admin.
    assert_eq!(
        s.api(Method::GET, "/api/v1/quotas", None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn bootstrap_admin_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    bootstrap_admin(&fresh_sqlite(&dir)).await;
}

#[tokio::test]
async fn bootstrap_admin_postgres() {
    bootstrap_admin(&fresh_postgres().await).await;
}
