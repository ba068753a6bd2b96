//! Sign-in with an OpenID provider, through a real bizrq process and the
//! tests' own provider over HTTP (`provider`): the code flow with PKCE,
//! groups that become roles and stop being roles on a refresh, the
//! Kubernetes username linked, RP-initiated logout; and what a relying
//! party must refuse — a token signed by another key, `alg: none`, an HMAC,
//! the wrong audience or issuer, an expired token, another sign-in's
//! nonce, a replayed callback or code, a callback carried into another
//! browser — and a provider that rotates its keys, is down, slow or
//! answers too much. (e2e/oidc.mjs does the same with a real provider,
//! `oidc-provider`, and Chromium.)

mod provider;

use crate::common::*;
use provider::{FakeOp, Forge, CLIENT_SECRET};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

const RULES: &str = "groupRoles:\n\
  - {group: platform-admins, role: admin}\n\
  - {group: team-nlp, role: member, quota: nlp}\n\
  - {group: nlp-leads, role: owner, quota: nlp}\n";

struct Setup {
    s: Server,
    op: FakeOp,
    _dir: tempfile::TempDir,
}

/// bizrq on `db` signing in with a fresh test provider, its client secret
/// in a file, the rules above in a file, roles refreshed every second.
async fn setup(db: Option<String>, extra: &[&str]) -> Setup {
    let op = FakeOp::start().await;
    setup_with(db, op, extra).await
}

async fn setup_with(db: Option<String>, op: FakeOp, extra: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let db = db.unwrap_or_else(|| fresh_sqlite(&dir));
    let secret = dir.path().join("secret");
    std::fs::write(&secret, format!("{CLIENT_SECRET}\n")).unwrap();
    let rules = dir.path().join("group-roles.yaml");
    std::fs::write(&rules, RULES).unwrap();
    // An `--oidc-issuer` among `extra` replaces the provider's own.
    let mut args: Vec<String> = op.flags();
    if extra.contains(&"--oidc-issuer") {
        args.drain(0..2);
    }
    args.extend(
        [
            "--oidc-client-secret-file",
            secret.to_str().unwrap(),
            "--oidc-group-roles",
            rules.to_str().unwrap(),
            "--oidc-group-roles-poll-seconds",
            "1",
            "--oidc-refresh-seconds",
            "1",
            "--oidc-kube-username-claim",
            "email",
            "--oidc-kube-username-prefix",
            "oidc:",
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (s, _) = Server::start_with(&db, &refs, Some(ADMIN_PASSWORD)).await;
    s.create_quota("ai", "", json!({GPU: "16"})).await;
    s.create_quota("nlp", "ai", json!({GPU: "8"})).await;
    s.create_quota("cv", "ai", json!({GPU: "4"})).await;
    Setup { s, op, _dir: dir }
}

/// Starts a sign-in in `b`: the login page, then its button. The
/// authorization URL bizrq sends the browser to.
async fn start(b: &Browser) -> String {
    let p = b.get("/login").await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("Sign in with Test IdP"), "{}", p.body);
    let p = b.post("/login/oidc", &[("next", "/tree")]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    p.location()
        .expect("a redirect to the provider")
        .to_string()
}

/// The path and query of a callback URL the provider sends back.
fn path_of(url: &str) -> String {
    let after_scheme = url.split_once("://").unwrap().1;
    after_scheme[after_scheme.find('/').unwrap()..].to_string()
}

/// `who` signs in through the provider in `b`; the callback's page.
async fn sign_in(b: &Browser, op: &FakeOp, who: &str) -> Page {
    let url = start(b).await;
    assert!(url.starts_with(&op.issuer), "{url}");
    let back = op.authorize(&url, who);
    b.get(&path_of(&back)).await
}

async fn signed_in(b: &Browser, op: &FakeOp, who: &str) {
    let p = sign_in(b, op, who).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("http-equiv=\"refresh\""), "{}", p.body);
    assert!(p.body.contains("url=/tree"), "{}", p.body);
    assert_eq!(
        b.get("/tree").await.status,
        StatusCode::OK,
        "the session works"
    );
}

/// Not signed in: pages send `b` to the login page.
async fn signed_out(b: &Browser) -> bool {
    b.get("/").await.status == StatusCode::SEE_OTHER
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(None).await;
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(Some(crate::common::fresh_postgres().await)).await;
            }
        }
    )*};
}

on_both!(
    a_person_signs_in_gets_the_roles_of_their_groups_and_loses_them_on_a_refresh,
    a_rule_added_or_removed_on_the_groups_page_applies_to_people_already_signed_in,
);

async fn a_person_signs_in_gets_the_roles_of_their_groups_and_loses_them_on_a_refresh(
    db: Option<String>,
) {
    let Setup { s, op, _dir } = setup(db, &[]).await;
    let alice = Browser::new(&s);
    signed_in(&alice, &op, "alice").await;
    // Made on first sign-in, member of nlp by team-nlp, nothing else.
    assert_eq!(alice.get("/quotas/nlp").await.status, StatusCode::OK);
    assert_eq!(alice.get("/quotas/cv").await.status, StatusCode::NOT_FOUND);
    assert_eq!(alice.get("/users").await.status, StatusCode::FORBIDDEN);
    // An admin sees who gave what, and the Kubernetes username.
    let admin = Browser::admin(&s).await;
    let users = admin.get("/users").await.body;
    assert!(users.contains("SSO"), "{users}");
    // The provider's email is alice's alert address.
    let log = admin
        .get("/audit?action=user.email&target=user:alice")
        .await
        .body;
    assert!(
        log.contains("alert email is alice@example.com (the identity provider"),
        "{log}"
    );
    assert!(users.contains("oidc:alice@example.com"), "{users}");
    assert!(users.contains("(group)"), "{users}");
    let log = admin.get("/audit?action=role.add&target=nlp").await.body;
    assert!(
        log.contains(
            "alice is member of nlp: member of group team-nlp (group mapping, at sign-in)"
        ),
        "{log}"
    );
    // Promoted: the refresh raises member to owner.
    op.set_groups("alice", &["team-nlp", "nlp-leads"]);
    let owner = poll_until(30, Duration::from_millis(300), || async {
        let p = alice.get("/quotas/nlp/children/new").await;
        (p.status == StatusCode::OK).then_some(())
    })
    .await;
    assert!(
        owner.is_some(),
        "owner of nlp within seconds of the group change"
    );
    // Removed from every group: the roles go, the session stays.
    op.set_groups("alice", &[]);
    let gone = poll_until(30, Duration::from_millis(300), || async {
        (alice.get("/quotas/nlp").await.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the role went with the group");
    assert_eq!(
        alice.get("/tree").await.status,
        StatusCode::OK,
        "still signed in"
    );
    let log = admin.get("/audit?action=role.remove&target=nlp").await.body;
    assert!(
        log.contains("no group gives it (group mapping, on a refresh)"),
        "{log}"
    );
    // A role given by hand stands whatever the groups say.
    bind(&admin, "alice", "cv", "member").await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(alice.get("/quotas/cv").await.status, StatusCode::OK);
    // The provider admin group makes an admin, and taking it away unmakes one.
    op.set_groups("alice", &["platform-admins"]);
    assert!(poll_until(30, Duration::from_millis(300), || async {
        (alice.get("/users").await.status == StatusCode::OK).then_some(())
    })
    .await
    .is_some());
    // An admin by the mapping cannot make the role their own by hand (the
    // mapping would never take it back): nothing changes.
    let p = alice
        .post(
            "/users/alice/admin",
            &[("value", "true"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    // A refresh whose token leaves the groups claim out (some providers
    // send it at sign-in only) is not "in no group": roles stay.
    op.state.lock().unwrap().omit_groups = true;
    op.set_groups("alice", &[]);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        alice.get("/users").await.status,
        StatusCode::OK,
        "no groups claim: roles as they were"
    );
    op.state.lock().unwrap().omit_groups = false;
    assert!(
        poll_until(30, Duration::from_millis(300), || async {
            (alice.get("/users").await.status == StatusCode::FORBIDDEN).then_some(())
        })
        .await
        .is_some(),
        "the group gone, the mapped admin goes"
    );
    // No password: neither a password login nor a password change.
    assert_eq!(
        Browser::new(&s)
            .login("alice", "whatever-password")
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        alice.get("/account/password").await.status,
        StatusCode::FORBIDDEN
    );
    // Logging out ends the session here and at the provider.
    alice.get("/tree").await;
    let p = alice.post("/logout", &[]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let to = p.location().unwrap();
    assert!(to.starts_with(&format!("{}/logout?", op.issuer)), "{to}");
    assert!(to.contains("id_token_hint="), "{to}");
    assert!(to.contains("post_logout_redirect_uri="), "{to}");
    assert!(signed_out(&alice).await);
    // The provider ends the sign-in (the person left): signed out here at
    // the next refresh, whatever session was live.
    signed_in(&alice, &op, "alice").await;
    op.state.lock().unwrap().revoked = true;
    assert!(
        poll_until(30, Duration::from_millis(300), || async {
            signed_out(&alice).await.then_some(())
        })
        .await
        .is_some(),
        "signed out when the provider stops refreshing"
    );
}

async fn a_rule_added_or_removed_on_the_groups_page_applies_to_people_already_signed_in(
    db: Option<String>,
) {
    let Setup { s, op, _dir } = setup(db, &[]).await;
    let bob = Browser::new(&s);
    signed_in(&bob, &op, "bob").await;
    assert_eq!(bob.get("/quotas/cv").await.status, StatusCode::NOT_FOUND);
    // Only admins, with the form's CSRF token.
    assert_eq!(bob.get("/groups").await.status, StatusCode::FORBIDDEN);
    let p = bob
        .post("/groups", &[("group", "team-cv"), ("role", "admin")])
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    let admin = Browser::admin(&s).await;
    let page = admin.get("/groups").await.body;
    assert!(
        page.contains("team-nlp") && page.contains("From the file"),
        "{page}"
    );
    admin.forget_csrf();
    let p = admin
        .post(
            "/groups",
            &[("group", "team-cv"), ("role", "member"), ("quota", "cv")],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "no CSRF token");
    admin.get("/groups").await;
    for (fields, says) in [
        (
            vec![("group", "team-cv"), ("role", "member")],
            "names its quota",
        ),
        (
            vec![("group", "team-cv"), ("role", "member"), ("quota", "nope")],
            "nope",
        ),
        (
            vec![("group", "team-cv"), ("role", "admin"), ("quota", "cv")],
            "names no quota",
        ),
        (vec![("group", ""), ("role", "admin")], "1 to 256 bytes"),
    ] {
        let p = admin.post("/groups", &fields).await;
        assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{fields:?}");
        assert!(p.body.contains(says), "{says}: {}", p.body);
    }
    let p = admin
        .post(
            "/groups",
            &[("group", "team-cv"), ("role", "member"), ("quota", "cv")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    // Given at once from the groups bob's provider named last.
    assert!(poll_until(30, Duration::from_millis(200), || async {
        (bob.get("/quotas/cv").await.status == StatusCode::OK).then_some(())
    })
    .await
    .is_some());
    let log = admin.get("/audit?action=groupRole.add").await.body;
    assert!(
        log.contains("members of group team-cv are member of cv"),
        "{log}"
    );
    admin.get("/groups").await;
    let p = admin
        .post(
            "/groups/delete",
            &[("group", "team-cv"), ("role", "member"), ("quota", "cv")],
        )
        .await;
    assert_eq!(
        p.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "needs its box ticked"
    );
    let p = admin
        .post(
            "/groups/delete",
            &[
                ("group", "team-cv"),
                ("role", "member"),
                ("quota", "cv"),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert!(poll_until(30, Duration::from_millis(200), || async {
        (bob.get("/quotas/cv").await.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await
    .is_some());
}

/// Each token a relying party must refuse, as the provider's token
/// endpoint hands it over: refused in words (401), no session made.
#[tokio::test]
async fn forged_tokens_are_refused_and_make_no_session() {
    let Setup { s, op, _dir } = setup(None, &[]).await;
    for (forge, says) in [
        (Forge::OtherKey, "signature does not verify"),
        (Forge::AlgNone, "\"none\", which bizrq never accepts"),
        (Forge::Hmac, "\"HS256\", which bizrq never accepts"),
        (Forge::WrongAudience, "meant for \"another-app\""),
        (Forge::Expired, "expired"),
        (Forge::WrongNonce, "nonce is not the one this sign-in sent"),
        (Forge::WrongIssuer, "issued by \"https://evil.example\""),
    ] {
        let b = Browser::new(&s);
        op.forge(forge.clone());
        let p = sign_in(&b, &op, "alice").await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{forge:?}: {}", p.body);
        assert!(p.body.contains(says), "{forge:?}: {says} in {}", p.body);
        assert!(signed_out(&b).await, "{forge:?}: no session");
    }
    // Nobody was made of it.
    let admin = Browser::admin(&s).await;
    assert!(!admin
        .get("/users")
        .await
        .body
        .contains("data-sort-value=\"alice\""));
}

/// A callback replayed, carried into another browser, or given another
/// sign-in's code is refused; the state is good once.
#[tokio::test]
async fn callbacks_and_codes_are_good_once_and_in_their_own_browser() {
    let Setup { s, op, _dir } = setup(None, &[]).await;
    // Replayed after it signed in.
    let a = Browser::new(&s);
    let url = start(&a).await;
    let back = path_of(&op.authorize(&url, "alice"));
    assert_eq!(a.get(&back).await.status, StatusCode::OK);
    let again = Browser::new(&s);
    let p = again.get(&back).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(
        p.body.contains("finished already or has expired"),
        "{}",
        p.body
    );
    // Carried into another browser (a login CSRF): refused, and spent.
    let victim = Browser::new(&s);
    let attacker = Browser::new(&s);
    let url = start(&attacker).await;
    let back = path_of(&op.authorize(&url, "bob"));
    let p = victim.get(&back).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("started in another browser"), "{}", p.body);
    assert!(signed_out(&victim).await);
    assert_eq!(
        attacker.get(&back).await.status,
        StatusCode::BAD_REQUEST,
        "spent"
    );
    // Another sign-in's code in this one's callback: PKCE refuses it at
    // the provider.
    let b1 = Browser::new(&s);
    let b2 = Browser::new(&s);
    let url1 = start(&b1).await;
    let url2 = start(&b2).await;
    let back1 = op.authorize(&url1, "alice");
    let _back2 = op.authorize(&url2, "bob");
    let code1 = back1
        .split("code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let state2 = url2
        .split("state=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let p = b2
        .get(&format!("/login/oidc/callback?code={code1}&state={state2}"))
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(p.body.contains("refused this sign-in's code"), "{}", p.body);
    assert!(signed_out(&b2).await);
    // Starting a sign-in is a form like the login's: without its CSRF
    // token, refused.
    let c = Browser::new(&s);
    c.get("/login").await;
    c.forget_csrf();
    assert_eq!(
        c.post("/login/oidc", &[]).await.status,
        StatusCode::FORBIDDEN
    );
    // A state bizrq never made, an error from the provider.
    let p = b1.get("/login/oidc/callback?code=x&state=made-up").await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    let url = start(&b1).await;
    let state = url
        .split("state=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let p = b1
        .get(&format!(
            "/login/oidc/callback?error=access_denied&error_description=no+way&state={state}"
        ))
        .await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED);
    assert!(
        p.body.contains("did not sign you in (access denied)"),
        "{}",
        p.body
    );
}

/// The provider rotates its keys: the next sign-in reads the key set
/// again; tokens naming unknown keys make at most one read per window.
#[tokio::test]
async fn a_key_rotation_is_followed_and_unknown_keys_do_not_flood_the_provider() {
    let Setup { s, op, _dir } = setup(None, &["--oidc-jwks-refetch-seconds", "30"]).await;
    signed_in(&Browser::new(&s), &op, "alice").await;
    let reads = op.jwks_reads();
    assert!(reads >= 1);
    op.rotate();
    signed_in(&Browser::new(&s), &op, "alice").await;
    assert_eq!(
        op.jwks_reads(),
        reads + 1,
        "read once more, for the new key"
    );
    for _ in 0..5 {
        op.forge(Forge::UnknownKid);
        let p = sign_in(&Browser::new(&s), &op, "alice").await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{}", p.body);
        assert!(
            p.body.contains("no key of the provider's key set"),
            "{}",
            p.body
        );
    }
    assert_eq!(
        op.jwks_reads(),
        reads + 1,
        "within the window, not read again"
    );
}

/// A provider down, slow, misconfigured or answering too much: a page in
/// words with a status that is not 500.
#[tokio::test]
async fn a_provider_down_slow_or_wrong_is_a_page_in_words() {
    // Down: nothing listens at the issuer.
    let op = FakeOp::start().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let Setup { s, op: _op, _dir } = setup_with(None, op, &["--oidc-issuer", &dead]).await;
    let b = Browser::new(&s);
    b.get("/login").await;
    let p = b.post("/login/oidc", &[]).await;
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{}", p.body);
    assert!(
        p.body.contains("Test IdP cannot be reached right now"),
        "{}",
        p.body
    );
    // Passwords still work.
    assert_eq!(
        Browser::new(&s).login("admin", ADMIN_PASSWORD).await.status,
        StatusCode::SEE_OTHER
    );
    drop(s);
    // Slow: no answer within the timeout.
    let Setup { s, op, _dir } = setup(None, &["--oidc-timeout-seconds", "1"]).await;
    op.state.lock().unwrap().slow = Some(Duration::from_secs(3));
    let b = Browser::new(&s);
    b.get("/login").await;
    let p = b.post("/login/oidc", &[]).await;
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{}", p.body);
    assert!(
        p.body.contains("no complete answer within 1 seconds"),
        "{}",
        p.body
    );
    op.state.lock().unwrap().slow = None;
    // A key set over the size bizrq reads.
    op.state.lock().unwrap().huge_jwks = true;
    let p = sign_in(&Browser::new(&s), &op, "alice").await;
    assert_eq!(p.status, StatusCode::BAD_GATEWAY, "{}", p.body);
    assert!(p.body.contains("larger than 65536 bytes"), "{}", p.body);
    drop(s);
    // Misconfigured: the issuer flag is not what the provider says it is.
    let op = FakeOp::start().await;
    let wrong = format!("{}/", op.issuer);
    let Setup { s, op: _op, _dir } = setup_with(None, op, &["--oidc-issuer", &wrong]).await;
    let b = Browser::new(&s);
    b.get("/login").await;
    let p = b.post("/login/oidc", &[]).await;
    assert_eq!(p.status, StatusCode::BAD_GATEWAY, "{}", p.body);
    assert!(
        p.body.contains("must be exactly the provider's issuer"),
        "{}",
        p.body
    );
}

/// With passwords turned off, only the break-glass admin uses one.
#[tokio::test]
async fn with_passwords_off_only_the_break_glass_admin_signs_in_with_one() {
    let Setup { s, op, _dir } = setup(None, &["--local-login", "break-glass"]).await;
    let page = Browser::new(&s).get("/login").await.body;
    assert!(page.contains("Break-glass sign-in"), "{page}");
    let admin = Browser::admin(&s).await;
    create_user(&admin, "carol", "carol-password-123").await;
    let p = Browser::new(&s).login("carol", "carol-password-123").await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(p.body.contains("sign in with Test IdP"), "{}", p.body);
    signed_in(&Browser::new(&s), &op, "root").await;
    // A provider person named like a local account is refused, not merged.
    op.state
        .lock()
        .unwrap()
        .people
        .get_mut("bob")
        .unwrap()
        .username = "carol".into();
    let p = sign_in(&Browser::new(&s), &op, "bob").await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(
        p.body.contains("belongs to a local bizrq account"),
        "{}",
        p.body
    );
}

/// The Kubernetes username a review names leads to the person: linked
/// at sign-in from the same claim as the API server's, shown in reports
/// by user, and on "my workloads"; an admin links a local account by hand.
#[tokio::test]
async fn the_kubernetes_username_of_a_review_leads_to_the_person() {
    let Setup { s, op, _dir } = setup(None, &[]).await;
    let alice = Browser::new(&s);
    signed_in(&alice, &op, "alice").await;
    let page = alice.get("/workloads").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("Nothing submitted as oidc:alice@example.com"),
        "{}",
        page.body
    );
    // kubectl apply, as the API server names alice.
    let mut rv = review(
        "deployment-create.json",
        "uid-alice-1",
        Some(deployment("trainer", "nlp", 1, 2)),
        None,
    );
    rv["request"]["userInfo"]["username"] = "oidc:alice@example.com".into();
    assert_eq!(s.review("/validate/workloads", &rv).await["allowed"], true);
    let page = alice.get("/workloads").await.body;
    assert!(
        page.contains("Deployment") && page.contains("trainer"),
        "{page}"
    );
    assert!(
        page.contains("href=\"/quotas/nlp\""),
        "nlp is alice's to open: {page}"
    );
    // Someone else's work is not hers.
    let bob = Browser::new(&s);
    signed_in(&bob, &op, "bob").await;
    assert!(!bob.get("/workloads").await.body.contains("trainer"));
    // A local account linked by hand; one name belongs to one user.
    let admin = Browser::admin(&s).await;
    create_user(&admin, "carol", "carol-password-123").await;
    admin.get("/users").await;
    let p = admin
        .post(
            "/users/carol/kube-username",
            &[("kube_username", "oidc:alice@example.com")],
        )
        .await;
    assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "alice has it");
    assert!(p.body.contains("another user already has"), "{}", p.body);
    let p = admin
        .post(
            "/users/carol/kube-username",
            &[("kube_username", "carol@corp")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let log = admin.get("/audit?action=user.kubeUsername").await.body;
    assert!(log.contains("Kubernetes username set by an admin"), "{log}");
    assert!(
        log.contains("is oidc:alice@example.com in Kubernetes"),
        "{log}"
    );
    let carol = Browser::logged_in(&s, "carol", "carol-password-123").await;
    let page = carol.get("/workloads").await;
    assert!(
        page.body.contains("Nothing submitted as carol@corp"),
        "{}",
        page.body
    );
    // An unlinked account is told how to be linked.
    let admin_page = admin.get("/workloads").await.body;
    assert!(
        admin_page.contains("not linked to a Kubernetes username"),
        "{admin_page}"
    );
}

/// GET `path` on the JSON API with a bearer token; the status.
async fn status_with(s: &Server, token: &str, path: &str) -> StatusCode {
    s.api_with(reqwest::Method::GET, path, None, Some(token))
        .await
        .0
}

/// Machine access: a service account's token, made by an admin, held to a
/// quota and with an expiry; a person's token held to one quota acts only
/// there and never as an admin.
#[tokio::test]
async fn service_accounts_and_scoped_tokens_act_only_where_they_may() {
    let Setup { s, op: _op, _dir } = setup(None, &[]).await;
    let admin = Browser::admin(&s).await;
    admin.get("/users").await;
    let p = admin
        .post("/users/service-accounts", &[("username", "ci-bot")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), Some("/users/ci-bot/tokens"));
    bind(&admin, "ci-bot", "nlp", "member").await;
    admin.get("/users/ci-bot/tokens").await;
    let p = admin
        .post(
            "/users/ci-bot/tokens",
            &[("name", "deploy"), ("expires_days", "30"), ("scope", "cv")],
        )
        .await;
    assert!(p.body.contains("ci-bot holds no role on cv"), "{}", p.body);
    let p = admin
        .post(
            "/users/ci-bot/tokens",
            &[("name", "deploy"), ("expires_days", "30"), ("scope", "nlp")],
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    let bot = shown_token(&p.body);
    assert_eq!(
        status_with(&s, &bot, "/api/v1/quotas/nlp").await,
        StatusCode::OK
    );
    assert_eq!(
        status_with(&s, &bot, "/api/v1/quotas/cv").await,
        StatusCode::NOT_FOUND
    );
    let listed = admin.get("/users/ci-bot/tokens").await.body;
    assert!(
        listed.contains("deploy") && listed.contains("nlp"),
        "{listed}"
    );
    // It never signs in.
    assert_eq!(
        Browser::new(&s)
            .login("ci-bot", "any-password-at-all")
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // The admin's own token held to cv: an owner of cv, not an admin.
    admin.get("/tokens").await;
    let p = admin
        .post(
            "/tokens",
            &[("name", "cv-only"), ("expires_days", "7"), ("scope", "cv")],
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    let scoped = shown_token(&p.body);
    assert_eq!(
        status_with(&s, &scoped, "/api/v1/quotas/cv").await,
        StatusCode::OK
    );
    assert_eq!(
        status_with(&s, &scoped, "/api/v1/quotas/nlp").await,
        StatusCode::NOT_FOUND
    );
    let (status, _) = s
        .api_with(
            reqwest::Method::POST,
            "/api/v1/quotas",
            Some(
                json!({"metadata": {"name": "root2"}, "spec": {"parent": "", "hard": {GPU: "1"}}})
                    .to_string()
                    .into_bytes(),
            ),
            Some(&scoped),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "never an admin");
    for (fields, says) in [
        (
            vec![("name", "x"), ("expires_days", "8")],
            "not one of 7, 30, 90, 365 days or never",
        ),
        (
            vec![("name", "x"), ("scope", "nope")],
            "there is no quota nope",
        ),
    ] {
        let p = admin.post("/tokens", &fields).await;
        assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY, "{says}");
        assert!(p.body.contains(says), "{says}: {}", p.body);
    }
    // A person's tokens are made by the person.
    let p = admin.get("/users/admin/tokens").await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
}

/// `--oidc-adopt-local-users` hands a provider's person only a plain
/// local person's account of their name, and ends its password, sessions
/// and tokens; never an admin's, a service account, a disabled account,
/// nor bizrq's own names or a break-glass account's.
#[tokio::test]
async fn adoption_hands_over_only_a_plain_person_and_ends_what_its_password_made() {
    let Setup { s, op, _dir } = setup(None, &["--oidc-adopt-local-users"]).await;
    let admin = Browser::admin(&s).await;
    for u in ["carol", "boss", "dave"] {
        create_user(&admin, u, &format!("{u}-password-123")).await;
    }
    admin.get("/users").await;
    let p = admin
        .post(
            "/users/boss/admin",
            &[("value", "true"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let p = admin
        .post(
            "/users/dave/disabled",
            &[("value", "true"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let p = admin
        .post("/users/service-accounts", &[("username", "ci-bot")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    // Carol's password made a session and a token before.
    let carol_local = Browser::new(&s);
    assert_eq!(
        carol_local
            .login("carol", "carol-password-123")
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    let carol_token = create_token(&carol_local, "laptop").await;
    assert_eq!(
        status_with(&s, &carol_token, "/api/v1/quotas").await,
        StatusCode::OK
    );
    // Adopted: signed in with the provider, her password and what it made end.
    op.add_person("carol", "carol", &["team-nlp"]);
    let carol = Browser::new(&s);
    signed_in(&carol, &op, "carol").await;
    assert_eq!(carol.get("/quotas/nlp").await.status, StatusCode::OK);
    assert_eq!(
        Browser::new(&s)
            .login("carol", "carol-password-123")
            .await
            .status,
        StatusCode::UNAUTHORIZED,
        "the adopted password no longer signs in"
    );
    assert!(signed_out(&carol_local).await, "its session ended");
    assert_eq!(
        status_with(&s, &carol_token, "/api/v1/quotas").await,
        StatusCode::UNAUTHORIZED,
        "its token ended"
    );
    // Never an admin's, a service account's or a disabled account's.
    for (who, name) in [("boss", "boss"), ("bot", "ci-bot"), ("dave", "dave")] {
        op.add_person(who, name, &["platform-admins"]);
        let p = sign_in(&Browser::new(&s), &op, who).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{name}: {}", p.body);
        assert!(
            p.body.contains("belongs to a local bizrq account"),
            "{name}: {}",
            p.body
        );
    }
    assert_eq!(
        Browser::new(&s)
            .login("boss", "boss-password-123")
            .await
            .status,
        StatusCode::SEE_OTHER,
        "boss's password still works"
    );
    let log = admin.get("/audit?target=user:ci-bot").await.body;
    assert!(
        log.contains("was not adopted") && log.contains("it is a service account"),
        "{log}"
    );
    // Nor the names of bizrq's own work or of the break-glass admin.
    for (who, name) in [("sys", "bizrq"), ("tok", "admin-token"), ("adm", "admin")] {
        op.add_person(who, name, &["platform-admins"]);
        let p = sign_in(&Browser::new(&s), &op, who).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{name}: {}", p.body);
        assert!(
            p.body.contains("is reserved in bizrq"),
            "{name}: {}",
            p.body
        );
    }
    // An admin cannot make those names local accounts either.
    admin.get("/users").await;
    let p = admin
        .post(
            "/users",
            &[("username", "bizrq"), ("password", "bizrq-password-123")],
        )
        .await;
    assert!(
        p.body.contains("the name the audit log gives"),
        "{}",
        p.body
    );
}

/// A provider that gives no refresh token (Dex, Okta, Google without
/// `offline_access`): what a sign-in's groups gave lasts
/// `--oidc-unrefreshed-roles-seconds`; then the session ends and the
/// person's API tokens keep only the roles given by hand.
#[tokio::test]
async fn without_a_refresh_token_group_roles_end_with_the_sign_in_that_gave_them() {
    let Setup { s, op, _dir } = setup(None, &["--oidc-unrefreshed-roles-seconds", "4"]).await;
    op.state.lock().unwrap().no_refresh_tokens = true;
    let alice = Browser::new(&s);
    signed_in(&alice, &op, "alice").await;
    let token = create_token(&alice, "laptop").await;
    assert_eq!(
        status_with(&s, &token, "/api/v1/quotas/nlp").await,
        StatusCode::OK,
        "member of nlp by team-nlp"
    );
    let admin = Browser::admin(&s).await;
    bind(&admin, "alice", "cv", "member").await;
    // Removed from the group at the provider: bizrq cannot ask, so the
    // role lasts the window, then goes with the session.
    op.set_groups("alice", &[]);
    let gone = poll_until(40, Duration::from_millis(300), || async {
        (status_with(&s, &token, "/api/v1/quotas/nlp").await == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the group's role ended with the sign-in");
    assert!(signed_out(&alice).await, "the session ended");
    assert_eq!(
        status_with(&s, &token, "/api/v1/quotas/cv").await,
        StatusCode::OK,
        "the role given by hand stays on the token"
    );
    let log = admin.get("/audit?action=role.remove&target=nlp").await.body;
    assert!(log.contains("no refresh token"), "{log}");
    // Signing in again gives what the groups give then.
    op.set_groups("alice", &["team-nlp"]);
    signed_in(&alice, &op, "alice").await;
    assert_eq!(
        status_with(&s, &token, "/api/v1/quotas/nlp").await,
        StatusCode::OK
    );
}
