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

/// Tokens asked for back to back until two requests after the reset
/// answered; those shown.
async fn ask_tokens(h: &Browser, reset_done: &std::sync::atomic::AtomicBool) -> Vec<String> {
    let mut got = Vec::new();
    let mut after = 0;
    while after < 2 {
        if reset_done.load(std::sync::atomic::Ordering::SeqCst) {
            after += 1;
        }
        let p = h.post("/tokens", &[("name", "raced")]).await;
        if p.status == StatusCode::OK && p.body.contains("bzq_") {
            got.push(shown_token(&p.body));
        }
    }
    got
}

/// One number from the server's database (SQLite or PostgreSQL).
async fn scalar(url: &str, query: &str) -> i64 {
    use sqlx::{Connection, Row};
    if url.starts_with("sqlite") {
        let mut c = sqlx::sqlite::SqliteConnection::connect(url).await.unwrap();
        sqlx::query(query).fetch_one(&mut c).await.unwrap().get(0)
    } else {
        let mut c = sqlx::postgres::PgConnection::connect(url).await.unwrap();
        sqlx::query(query).fetch_one(&mut c).await.unwrap().get(0)
    }
}

/// Tokens requested and sign-ins made while an admin resets the password,
/// over and over: whatever order their inserts and the reset's deletes
/// took, nothing made with the old password works afterwards. Four
/// browsers of the user ask for tokens back to back from before the reset
/// starts until after it answered, and three more sign in with the old
/// password meanwhile; then every token got is refused (401) and every
/// session got leads to the login page. The server counts as "raced" the
/// tokens only the credential generation stopped (inserted after the
/// reset had revoked the others), to show the race was run.
async fn credentials_made_during_a_reset_end_with_it(url: &str) {
    const TRIALS: usize = 20;
    let (s, _) = Server::start_with(
        url,
        &["--login-attempts-per-minute", "1000000"],
        Some(ADMIN_PASSWORD),
    )
    .await;
    let admin = Browser::admin(&s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    let mut password = ALICE_PW.to_string();
    let (mut tokens_got, mut sessions_got) = (0, 0);
    for trial in 0..TRIALS {
        let mut holders = Vec::new();
        for _ in 0..4 {
            holders.push(Browser::logged_in(&s, "alice", &password).await);
        }
        for h in &holders {
            h.get("/tokens").await;
        }
        let new_password = format!("alice-password-{trial:04}");
        let reset_done = std::sync::atomic::AtomicBool::new(false);
        let reset = async {
            admin.get("/users").await;
            let p = admin
                .post("/users/alice/password", &[("password", &new_password)])
                .await;
            reset_done.store(true, std::sync::atomic::Ordering::SeqCst);
            p
        };
        let sign_in = || async {
            let b = Browser::new(&s);
            b.get("/login").await;
            let p = b
                .post("/login", &[("username", "alice"), ("password", &password)])
                .await;
            (p.status == StatusCode::SEE_OTHER).then_some(b)
        };
        let (reset, t0, t1, t2, t3, l0, l1, l2) = tokio::join!(
            reset,
            ask_tokens(&holders[0], &reset_done),
            ask_tokens(&holders[1], &reset_done),
            ask_tokens(&holders[2], &reset_done),
            ask_tokens(&holders[3], &reset_done),
            sign_in(),
            sign_in(),
            sign_in(),
        );
        assert_eq!(reset.status, StatusCode::SEE_OTHER, "{}", reset.body);
        let tokens: Vec<String> = [t0, t1, t2, t3].into_iter().flatten().collect();
        for t in &tokens {
            let (st, _) = s
                .api_with(Method::GET, "/api/v1/quotas", None, Some(t))
                .await;
            assert_eq!(
                st,
                StatusCode::UNAUTHORIZED,
                "trial {trial}: a token made with the old password works after the reset"
            );
        }
        let signed_in: Vec<Browser> = [l0, l1, l2].into_iter().flatten().collect();
        for b in signed_in.iter().chain(&holders) {
            assert_eq!(
                b.get("/tokens").await.status,
                StatusCode::SEE_OTHER,
                "trial {trial}: a session of the old password goes on after the reset"
            );
        }
        tokens_got += tokens.len();
        sessions_got += signed_in.len();
        password = new_password;
    }
    let raced = scalar(
        url,
        "SELECT COUNT(*) FROM api_tokens t JOIN users u ON u.id = t.user_id \
         WHERE t.revoked_at_ms IS NULL AND t.credential_gen <> u.credential_gen",
    )
    .await;
    println!(
        "{TRIALS} resets: {tokens_got} tokens and {sessions_got} sign-ins made around them, \
         all ended; {raced} tokens were inserted after the reset's revocation and stopped \
         by the credential generation alone"
    );
    // The new password works, and what it makes works.
    let alice = Browser::logged_in(&s, "alice", &password).await;
    let token = create_token(&alice, "after").await;
    let (st, _) = s
        .api_with(Method::GET, "/api/v1/quotas", None, Some(&token))
        .await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_made_during_a_reset_end_with_it_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    credentials_made_during_a_reset_end_with_it(&fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_made_during_a_reset_end_with_it_on_postgres() {
    credentials_made_during_a_reset_end_with_it(&fresh_postgres().await).await;
}
