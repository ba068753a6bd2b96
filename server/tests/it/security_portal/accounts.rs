//! Sessions, passwords and tokens: what ends stays ended; a redirect after
//! login stays local.

use super::*;

/// POST /users hashes a password (tens of milliseconds); a logout or a
/// password reset lands meanwhile. The request's session write at its end
/// must not bring the ended session back.
async fn sessions_stay_ended(s: &Server) {
    let admin = Browser::admin(s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    admin.get("/users").await;
    admin
        .post(
            "/users/alice/admin",
            &[("admin", "true"), ("confirm", "yes")],
        )
        .await;
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
    let admin = Browser::admin(s).await;
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
    let admin = Browser::admin(s).await;
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

on_both!(
    sessions_stay_ended,
    a_password_reset_revokes_tokens,
    a_user_changes_its_own_password,
    next_after_login_stays_local,
);
