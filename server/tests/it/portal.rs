//! The portal's accounts and authorisation, through real server processes
//! on SQLite and PostgreSQL: a table of role × route × expected status over
//! every page and API route, login rate limiting, token revocation, session
//! cookies, the audit log, and the bootstrap admin.

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const ALICE_PW: &str = "alice-password-1234";
const BOB_PW: &str = "bob-password-12345";

fn quota(name: &str, parent: &str, gpu: &str, pods: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"parent": parent, "hard": {"requests.nvidia.com/gpu": gpu, "pods": pods}}})
}

const GPU: &str = "requests.nvidia.com/gpu";

fn transfer(from: Option<&str>, to: &str, gpu: &str) -> Value {
    json!({"from": from, "to": to, "amounts": {GPU: gpu}, "reason": "a test"})
}

/// ai (16 GPUs) ─┬─ nlp (8) ── nlp-a (2)
///               └─ cv (4)
/// alice owns nlp, bob is a member of cv; each has a personal token.
struct Org {
    admin: Browser,
    alice: Browser,
    bob: Browser,
    alice_token: String,
    bob_token: String,
}

/// The token a tokens page shows once, after creating it.
fn shown_token(html: &str) -> String {
    let start = html.find("bzq_").expect("a new token on the page");
    html[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

async fn create_token(b: &Browser, name: &str) -> String {
    b.get("/tokens").await;
    let p = b.post("/tokens", &[("name", name)]).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    shown_token(&p.body)
}

async fn create_user(admin: &Browser, name: &str, password: &str) {
    admin.get("/users").await;
    let p = admin
        .post("/users", &[("username", name), ("password", password)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "create {name}: {}", p.body);
}

async fn bind(admin: &Browser, user: &str, quota: &str, role: &str) {
    let p = admin
        .post(
            &format!("/users/{user}/roles"),
            &[("quota", quota), ("role", role)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "bind {user}: {}", p.body);
}

async fn org(s: &Server) -> Org {
    s.create_quota(
        "ai",
        "",
        json!({"requests.nvidia.com/gpu": "16", "pods": "100"}),
    )
    .await;
    s.create_quota(
        "nlp",
        "ai",
        json!({"requests.nvidia.com/gpu": "8", "pods": "40"}),
    )
    .await;
    s.create_quota(
        "cv",
        "ai",
        json!({"requests.nvidia.com/gpu": "4", "pods": "20"}),
    )
    .await;
    s.create_quota(
        "nlp-a",
        "nlp",
        json!({"requests.nvidia.com/gpu": "2", "pods": "10"}),
    )
    .await;
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "bob", BOB_PW).await;
    bind(&admin, "alice", "nlp", "owner").await;
    bind(&admin, "bob", "cv", "member").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let bob = Browser::logged_in(s, "bob", BOB_PW).await;
    let alice_token = create_token(&alice, "alice-ci").await;
    let bob_token = create_token(&bob, "bob-ci").await;
    Org {
        admin,
        alice,
        bob,
        alice_token,
        bob_token,
    }
}

#[derive(Clone, Copy, Debug)]
enum Who {
    Anonymous,
    /// The bootstrap admin, logged in (pages; API with its session).
    Admin,
    /// `--admin-token` as a bearer token.
    AdminToken,
    /// alice, owner of nlp: pages with her session, API with her token.
    OwnerNlp,
    /// bob, member of cv: likewise.
    MemberCv,
}

#[derive(Clone, Debug)]
enum Call {
    Get(&'static str),
    /// A form POST with the session's CSRF token.
    Form(&'static str, Vec<(&'static str, &'static str)>),
    /// A form POST without any CSRF token.
    FormNoCsrf(&'static str, Vec<(&'static str, &'static str)>),
    /// The JSON API (bearer token, or the admin's session + CSRF header).
    Api(Method, &'static str, Option<Value>),
}

async fn run(s: &Server, o: &Org, who: Who, call: &Call) -> (StatusCode, String) {
    let anon = Browser::new(s);
    let browser = match who {
        Who::Anonymous | Who::AdminToken => &anon,
        Who::Admin => &o.admin,
        Who::OwnerNlp => &o.alice,
        Who::MemberCv => &o.bob,
    };
    let token = match who {
        Who::AdminToken => Some(TOKEN),
        Who::OwnerNlp => Some(o.alice_token.as_str()),
        Who::MemberCv => Some(o.bob_token.as_str()),
        Who::Anonymous | Who::Admin => None,
    };
    match call {
        Call::Get(path) => {
            let p = browser.get(path).await;
            let loc = p.location().unwrap_or_default().to_string();
            (p.status, if loc.is_empty() { p.body } else { loc })
        }
        Call::Form(path, fields) => {
            if matches!(who, Who::Anonymous) {
                anon.get("/login").await;
            }
            let p = browser.post(path, fields).await;
            (p.status, p.location().unwrap_or(&p.body).to_string())
        }
        Call::FormNoCsrf(path, fields) => {
            let p = browser.post_raw(path, fields).await;
            (p.status, p.body)
        }
        Call::Api(method, path, body) => match (who, token) {
            (Who::Admin, _) => {
                let (st, v) = browser.api(method.clone(), path, body.clone()).await;
                (st, v.to_string())
            }
            (_, token) => {
                let (st, v) = s
                    .api_with(
                        method.clone(),
                        path,
                        body.as_ref().map(|b| serde_json::to_vec(b).unwrap()),
                        token,
                    )
                    .await;
                (st, v.to_string())
            }
        },
    }
}

/// Every page and API route, by role.
async fn role_route_table(s: &Server) {
    use Call::*;
    use Who::*;
    let o = org(s).await;
    let child_of = |parent: &str, gpu: &str| Some(quota("x-new", parent, gpu, "1"));
    let put =
        |name: &str, parent: &str, gpu: &str, pods: &str| Some(quota(name, parent, gpu, pods));
    let nlp_deploy = deployment("train", "nlp", 1, 1);
    let cv_deploy = deployment("train", "cv", 1, 1);
    let unbound = {
        let mut d = deployment("free", "nlp", 1, 1);
        d["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("biz.group.resource.quota");
        d
    };
    const OK: StatusCode = StatusCode::OK;
    const CREATED: StatusCode = StatusCode::CREATED;
    const SEE_OTHER: StatusCode = StatusCode::SEE_OTHER;
    const UNAUTH: StatusCode = StatusCode::UNAUTHORIZED;
    const FORBIDDEN: StatusCode = StatusCode::FORBIDDEN;
    const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;
    const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;
    let q = "/api/v1/quotas";
    let dry = "/api/v1/quotas?dryRun=All";
    // Transfers #1 nlp → cv, #2 nlp-a → nlp (inside nlp), #3 nlp → cv,
    // alice asks #2, the admin token the others (alice cannot see cv, so
    // she cannot name it); #4 by the admin's form, #5 by alice's form, #6
    // by the admin token below.
    for (from, to) in [("nlp", "cv"), ("nlp-a", "nlp"), ("nlp", "cv")] {
        let token = if to == "cv" {
            TOKEN
        } else {
            o.alice_token.as_str()
        };
        let (st, v) = s
            .api_with(
                Method::POST,
                "/api/v1/transfers",
                Some(serde_json::to_vec(&transfer(Some(from), to, "1")).unwrap()),
                Some(token),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    const BAD: StatusCode = StatusCode::BAD_REQUEST;
    const CONFLICT: StatusCode = StatusCode::CONFLICT;
    let gpu_form = |from: &'static str, to: &'static str, amount: &'static str| {
        vec![
            ("from", from),
            ("to", to),
            ("key", GPU),
            ("amount", amount),
            ("reason", "a test"),
        ]
    };
    let t = "/api/v1/transfers";
    let ask = |from: Option<&str>, to: &str, gpu: &str| Some(transfer(from, to, gpu));
    let rows: Vec<(Who, Call, StatusCode)> = vec![
        // Open to all: style, health, metrics, the login form.
        (Anonymous, Get("/style.css"), OK),
        (Anonymous, Get("/healthz"), OK),
        (Anonymous, Get("/readyz"), OK),
        (Anonymous, Get("/metrics"), OK),
        (Anonymous, Get("/login"), OK),
        // Pages need a login.
        (Anonymous, Get("/"), SEE_OTHER),
        (Anonymous, Get("/tree"), SEE_OTHER),
        (Anonymous, Get("/users"), SEE_OTHER),
        (Anonymous, Get("/tokens"), SEE_OTHER),
        (Anonymous, Get("/audit"), SEE_OTHER),
        (Anonymous, Get("/alerts"), SEE_OTHER),
        (Anonymous, Get("/audit.csv"), SEE_OTHER),
        (
            Anonymous,
            Form(
                "/users",
                vec![("username", "eve"), ("password", "eve-password-123")],
            ),
            SEE_OTHER,
        ),
        (Anonymous, Form("/tokens", vec![("name", "t")]), SEE_OTHER),
        // CSRF: every state-changing form without the token is 403.
        (
            Anonymous,
            FormNoCsrf(
                "/login",
                vec![("username", "admin"), ("password", ADMIN_PASSWORD)],
            ),
            FORBIDDEN,
        ),
        (Admin, FormNoCsrf("/logout", vec![]), FORBIDDEN),
        (
            Admin,
            FormNoCsrf(
                "/users",
                vec![("username", "eve"), ("password", "eve-password-123")],
            ),
            FORBIDDEN,
        ),
        (
            Admin,
            FormNoCsrf("/users/bob/admin", vec![("admin", "true")]),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            FormNoCsrf("/tokens", vec![("name", "t")]),
            FORBIDDEN,
        ),
        (OwnerNlp, FormNoCsrf("/tokens/1/revoke", vec![]), FORBIDDEN),
        // Pages by role.
        (Admin, Get("/"), OK),
        (Admin, Get("/tree"), OK),
        (Admin, Get("/users"), OK),
        (Admin, Get("/tokens"), OK),
        (Admin, Get("/audit"), OK),
        (Admin, Get("/audit.csv"), OK),
        (Admin, Get("/login"), SEE_OTHER),
        (OwnerNlp, Get("/"), OK),
        (OwnerNlp, Get("/tree"), OK),
        (OwnerNlp, Get("/users"), FORBIDDEN),
        (OwnerNlp, Get("/tokens"), OK),
        (OwnerNlp, Get("/audit"), OK),
        (OwnerNlp, Get("/audit.csv"), OK),
        (MemberCv, Get("/"), OK),
        (MemberCv, Get("/users"), FORBIDDEN),
        (MemberCv, Get("/audit"), OK),
        (Admin, Get("/audit?from=yesterday"), INVALID),
        (Admin, Get("/alerts"), OK),
        (OwnerNlp, Get("/alerts?quota=nlp&kind=threshold"), OK),
        (MemberCv, Get("/alerts"), OK),
        (MemberCv, Get("/alerts?kind=bogus"), INVALID),
        // Alert rules: owners of the quota or above, and admins, may set them.
        (Anonymous, Get("/quotas/nlp/alerts"), SEE_OTHER),
        (OwnerNlp, Get("/quotas/nlp/alerts"), OK),
        (OwnerNlp, Get("/quotas/cv/alerts"), NOT_FOUND),
        (MemberCv, Get("/quotas/cv/alerts"), OK),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/alerts",
                vec![("key", "*"), ("warn_percent", "50"), ("crit_percent", "90")],
            ),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            FormNoCsrf("/quotas/nlp/alerts", vec![("key", "*")]),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form("/quotas/nlp/alerts", vec![("key", "bogus")]),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/alerts",
                vec![("key", "*"), ("warn_percent", "95"), ("crit_percent", "90")],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form("/quotas/cv/alerts", vec![("key", "*")]),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Form("/quotas/cv/alerts", vec![("key", "*")]),
            FORBIDDEN,
        ),
        (
            Admin,
            Form(
                "/quotas/cv/alerts",
                vec![("key", "*"), ("forecast_horizon_hours", "72")],
            ),
            SEE_OTHER,
        ),
        // Everyone's own email and alert preferences.
        (Anonymous, Get("/account"), SEE_OTHER),
        (MemberCv, Get("/account"), OK),
        (
            MemberCv,
            Form(
                "/account",
                vec![("email", "carl@example.com"), ("mute.threshold", "1")],
            ),
            SEE_OTHER,
        ),
        (
            MemberCv,
            Form("/account", vec![("email", "not an address")]),
            INVALID,
        ),
        (
            MemberCv,
            FormNoCsrf("/account", vec![("email", "")]),
            FORBIDDEN,
        ),
        (Admin, Get("/account"), OK),
        // One's own password.
        (Anonymous, Get("/account/password"), SEE_OTHER),
        (MemberCv, Get("/account/password"), OK),
        (
            MemberCv,
            FormNoCsrf(
                "/account/password",
                vec![
                    ("current", BOB_PW),
                    ("new", "x-new-password-1"),
                    ("confirm", "x-new-password-1"),
                ],
            ),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form(
                "/account/password",
                vec![
                    ("current", "not-bobs-password"),
                    ("new", "x-new-password-1"),
                    ("confirm", "x-new-password-1"),
                ],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/account/password",
                vec![
                    ("current", ALICE_PW),
                    ("new", "x-new-password-1"),
                    ("confirm", "x-other-password"),
                ],
            ),
            INVALID,
        ),
        (
            Admin,
            Form("/users/bob/email", vec![("email", "bob@example.com")]),
            SEE_OTHER,
        ),
        (
            Admin,
            Form("/users/bob/email", vec![("email", "bob")]),
            INVALID,
        ),
        (
            OwnerNlp,
            Form("/users/bob/email", vec![("email", "x@example.com")]),
            FORBIDDEN,
        ),
        (
            Admin,
            FormNoCsrf("/users/bob/email", vec![("email", "")]),
            FORBIDDEN,
        ),
        // Users and roles: admins only.
        (
            OwnerNlp,
            Form(
                "/users",
                vec![("username", "eve"), ("password", "eve-password-123")],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form(
                "/users/bob/roles",
                vec![("quota", "nlp"), ("role", "member")],
            ),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form("/users/bob/admin", vec![("admin", "true")]),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form("/users/bob/disabled", vec![("disabled", "false")]),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form(
                "/users/bob/password",
                vec![("password", "bob-password-99999")],
            ),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form("/users/bob/roles/delete", vec![("quota", "cv")]),
            FORBIDDEN,
        ),
        (
            Admin,
            Form("/users", vec![("username", "eve"), ("password", "short")]),
            INVALID,
        ),
        (
            Admin,
            Form(
                "/users",
                vec![("username", "Eve!"), ("password", "eve-password-123")],
            ),
            INVALID,
        ),
        (
            Admin,
            Form(
                "/users",
                vec![("username", "bob"), ("password", "bob-password-12345")],
            ),
            INVALID,
        ),
        (
            Admin,
            Form(
                "/users",
                vec![("username", "eve"), ("password", "eve-password-123")],
            ),
            SEE_OTHER,
        ),
        (
            Admin,
            Form(
                "/users/eve/roles",
                vec![("quota", "ghost"), ("role", "member")],
            ),
            INVALID,
        ),
        (
            Admin,
            Form("/users/eve/roles", vec![("quota", "cv"), ("role", "king")]),
            INVALID,
        ),
        (
            Admin,
            Form(
                "/users/eve/roles",
                vec![("quota", "cv"), ("role", "member")],
            ),
            SEE_OTHER,
        ),
        (
            Admin,
            Form("/users/eve/roles/delete", vec![("quota", "cv")]),
            SEE_OTHER,
        ),
        (
            Admin,
            Form("/users/eve/roles/delete", vec![("quota", "cv")]),
            NOT_FOUND,
        ),
        (
            Admin,
            Form("/users/eve/admin", vec![("admin", "true")]),
            SEE_OTHER,
        ),
        (
            Admin,
            Form("/users/eve/disabled", vec![("disabled", "true")]),
            SEE_OTHER,
        ),
        (
            Admin,
            Form(
                "/users/eve/password",
                vec![("password", "eve-password-456")],
            ),
            SEE_OTHER,
        ),
        (
            Admin,
            Form("/users/nobody/admin", vec![("admin", "true")]),
            NOT_FOUND,
        ),
        (
            Admin,
            Form("/users/admin/disabled", vec![("disabled", "true")]),
            INVALID,
        ),
        (
            Admin,
            Form("/users/admin/admin", vec![("admin", "false")]),
            INVALID,
        ),
        // Tokens: one's own only.
        (OwnerNlp, Form("/tokens", vec![("name", "")]), INVALID),
        (OwnerNlp, Form("/tokens/999/revoke", vec![]), NOT_FOUND),
        // JSON API: authentication.
        (Anonymous, Api(Method::GET, q, None), UNAUTH),
        (
            Anonymous,
            Api(Method::POST, q, child_of("nlp", "1")),
            UNAUTH,
        ),
        (
            Anonymous,
            Api(Method::POST, "/api/v1/check", Some(nlp_deploy.clone())),
            UNAUTH,
        ),
        (AdminToken, Api(Method::GET, q, None), OK),
        (Admin, Api(Method::GET, q, None), OK),
        (OwnerNlp, Api(Method::GET, q, None), OK),
        (MemberCv, Api(Method::GET, q, None), OK),
        // Alerts: everyone signed in lists those they may see.
        (Anonymous, Api(Method::GET, "/api/v1/alerts", None), UNAUTH),
        (AdminToken, Api(Method::GET, "/api/v1/alerts", None), OK),
        (
            MemberCv,
            Api(Method::GET, "/api/v1/alerts?state=open", None),
            OK,
        ),
        (
            OwnerNlp,
            Api(Method::GET, "/api/v1/alerts/999", None),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Api(Method::POST, "/api/v1/alerts", Some(json!({}))),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        // Reading: what one may not see does not exist.
        (
            MemberCv,
            Api(Method::GET, "/api/v1/quotas/nlp", None),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Api(Method::GET, "/api/v1/quotas/ai", None),
            NOT_FOUND,
        ),
        (MemberCv, Api(Method::GET, "/api/v1/quotas/cv", None), OK),
        (OwnerNlp, Api(Method::GET, "/api/v1/quotas/nlp", None), OK),
        (OwnerNlp, Api(Method::GET, "/api/v1/quotas/nlp-a", None), OK),
        (
            OwnerNlp,
            Api(Method::GET, "/api/v1/quotas/cv", None),
            NOT_FOUND,
        ),
        (
            OwnerNlp,
            Api(Method::GET, "/api/v1/quotas/ghost", None),
            NOT_FOUND,
        ),
        (AdminToken, Api(Method::GET, "/api/v1/quotas/cv", None), OK),
        // Creating: owners under their subtree, within its hard.
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("nlp", "1")),
            CREATED,
        ),
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("nlp-a", "1")),
            CREATED,
        ),
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("nlp", "7")),
            INVALID,
        ),
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("cv", "1")),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("ai", "1")),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("", "1")),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::POST, dry, child_of("ghost", "1")),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Api(Method::POST, dry, child_of("cv", "1")),
            FORBIDDEN,
        ),
        (
            AdminToken,
            Api(Method::POST, dry, child_of("", "1")),
            CREATED,
        ),
        (Admin, Api(Method::POST, dry, child_of("cv", "1")), CREATED),
        // Changing a spec: an ancestor's owner, never the quota's own.
        (
            OwnerNlp,
            Api(
                Method::PUT,
                "/api/v1/quotas/nlp?dryRun=All",
                put("nlp", "ai", "9", "40"),
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(
                Method::PUT,
                "/api/v1/quotas/nlp?dryRun=All",
                put("nlp", "ai", "7", "40"),
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(
                Method::PUT,
                "/api/v1/quotas/nlp-a?dryRun=All",
                put("nlp-a", "nlp", "3", "10"),
            ),
            OK,
        ),
        (
            OwnerNlp,
            Api(
                Method::PUT,
                "/api/v1/quotas/cv?dryRun=All",
                put("cv", "ai", "1", "20"),
            ),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Api(
                Method::PUT,
                "/api/v1/quotas/cv?dryRun=All",
                put("cv", "ai", "1", "20"),
            ),
            FORBIDDEN,
        ),
        (
            AdminToken,
            Api(
                Method::PUT,
                "/api/v1/quotas/nlp?dryRun=All",
                put("nlp", "ai", "9", "40"),
            ),
            OK,
        ),
        // Deleting: likewise.
        (
            OwnerNlp,
            Api(Method::DELETE, "/api/v1/quotas/nlp-a?dryRun=All", None),
            OK,
        ),
        (
            OwnerNlp,
            Api(Method::DELETE, "/api/v1/quotas/nlp?dryRun=All", None),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::DELETE, "/api/v1/quotas/cv?dryRun=All", None),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Api(Method::DELETE, "/api/v1/quotas/cv?dryRun=All", None),
            FORBIDDEN,
        ),
        (
            AdminToken,
            Api(Method::DELETE, "/api/v1/quotas/nlp-a?dryRun=All", None),
            OK,
        ),
        // The dry-run check answers 200; what it may say is checked below.
        (
            OwnerNlp,
            Api(Method::POST, "/api/v1/check", Some(nlp_deploy.clone())),
            OK,
        ),
        (
            MemberCv,
            Api(Method::POST, "/api/v1/check", Some(nlp_deploy.clone())),
            OK,
        ),
        (
            MemberCv,
            Api(Method::POST, "/api/v1/check", Some(cv_deploy.clone())),
            OK,
        ),
        (
            MemberCv,
            Api(Method::POST, "/api/v1/check", Some(unbound.clone())),
            OK,
        ),
        // Transfer pages: logged in; CSRF on every form.
        (Anonymous, Get("/transfers"), SEE_OTHER),
        (Anonymous, Get("/transfers/1"), SEE_OTHER),
        (
            Anonymous,
            Form("/transfers", gpu_form("nlp", "cv", "1")),
            SEE_OTHER,
        ),
        (Anonymous, Form("/transfers/1/approve", vec![]), SEE_OTHER),
        (Anonymous, Form("/transfers/1/reject", vec![]), SEE_OTHER),
        (
            OwnerNlp,
            FormNoCsrf("/transfers", gpu_form("nlp", "cv", "1")),
            FORBIDDEN,
        ),
        (Admin, FormNoCsrf("/transfers/1/approve", vec![]), FORBIDDEN),
        (Admin, FormNoCsrf("/transfers/1/reject", vec![]), FORBIDDEN),
        (Admin, Get("/transfers"), OK),
        (OwnerNlp, Get("/transfers"), OK),
        (MemberCv, Get("/transfers"), OK),
        (Admin, Get("/transfers?status=done&quota=nlp"), OK),
        (Admin, Get("/transfers?status=bogus"), INVALID),
        // Seeing one: either end.
        (Admin, Get("/transfers/2"), OK),
        (OwnerNlp, Get("/transfers/1"), OK),
        (MemberCv, Get("/transfers/1"), OK),
        (MemberCv, Get("/transfers/2"), NOT_FOUND),
        (Admin, Get("/transfers/999"), NOT_FOUND),
        // Requesting: out of what one owns (#4, by an admin: the owner of
        // nlp cannot see cv, which answers as a quota that does not
        // exist), or more from the parent of what one owns (#5).
        (
            OwnerNlp,
            Form("/transfers", gpu_form("nlp", "cv", "1")),
            NOT_FOUND,
        ),
        (
            Admin,
            Form("/transfers", gpu_form("nlp", "cv", "1")),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            Form("/transfers", gpu_form("", "nlp", "1")),
            SEE_OTHER,
        ),
        (Admin, Form("/transfers", gpu_form("nlp", "cv", "100")), BAD),
        (
            OwnerNlp,
            Form("/transfers", gpu_form("nlp", "cv", "lots")),
            INVALID,
        ),
        (
            OwnerNlp,
            Form("/transfers", gpu_form("cv", "nlp", "1")),
            NOT_FOUND,
        ),
        (
            OwnerNlp,
            Form("/transfers", gpu_form("", "cv", "1")),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Form("/transfers", gpu_form("cv", "nlp", "1")),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form("/transfers", gpu_form("", "cv", "1")),
            FORBIDDEN,
        ),
        // Deciding: admins and owners where both ends meet.
        (MemberCv, Form("/transfers/1/approve", vec![]), FORBIDDEN),
        (OwnerNlp, Form("/transfers/1/approve", vec![]), FORBIDDEN),
        (OwnerNlp, Form("/transfers/1/reject", vec![]), FORBIDDEN),
        (MemberCv, Form("/transfers/2/approve", vec![]), NOT_FOUND),
        (OwnerNlp, Form("/transfers/5/approve", vec![]), FORBIDDEN),
        (OwnerNlp, Form("/transfers/2/approve", vec![]), SEE_OTHER),
        (OwnerNlp, Form("/transfers/2/approve", vec![]), CONFLICT),
        (
            Admin,
            Form("/transfers/3/reject", vec![("note", "not now")]),
            SEE_OTHER,
        ),
        (Admin, Form("/transfers/3/approve", vec![]), CONFLICT),
        (Admin, Form("/transfers/1/approve", vec![]), SEE_OTHER),
        (Admin, Form("/transfers/999/approve", vec![]), NOT_FOUND),
        // Transfers through the JSON API, the same rules.
        (Anonymous, Api(Method::GET, t, None), UNAUTH),
        (
            Anonymous,
            Api(Method::POST, t, ask(Some("nlp"), "cv", "1")),
            UNAUTH,
        ),
        (
            Anonymous,
            Api(Method::GET, "/api/v1/transfers/1", None),
            UNAUTH,
        ),
        (
            Anonymous,
            Api(Method::POST, "/api/v1/transfers/4/approve", None),
            UNAUTH,
        ),
        (
            Anonymous,
            Api(Method::POST, "/api/v1/transfers/4/reject", None),
            UNAUTH,
        ),
        (AdminToken, Api(Method::GET, t, None), OK),
        (Admin, Api(Method::GET, t, None), OK),
        (OwnerNlp, Api(Method::GET, t, None), OK),
        (
            MemberCv,
            Api(Method::GET, "/api/v1/transfers?status=done,requested", None),
            OK,
        ),
        (
            MemberCv,
            Api(Method::GET, "/api/v1/transfers?status=nope", None),
            BAD,
        ),
        (OwnerNlp, Api(Method::GET, "/api/v1/transfers/1", None), OK),
        (MemberCv, Api(Method::GET, "/api/v1/transfers/1", None), OK),
        (
            MemberCv,
            Api(Method::GET, "/api/v1/transfers/2", None),
            NOT_FOUND,
        ),
        (
            AdminToken,
            Api(Method::GET, "/api/v1/transfers/2", None),
            OK,
        ),
        (
            OwnerNlp,
            Api(Method::POST, t, ask(Some("nlp"), "cv", "1")),
            NOT_FOUND,
        ),
        (
            OwnerNlp,
            Api(Method::POST, t, ask(Some("nlp"), "nope", "1")),
            NOT_FOUND,
        ),
        (
            AdminToken,
            Api(Method::POST, t, ask(Some("nlp"), "cv", "1")),
            CREATED,
        ),
        (
            AdminToken,
            Api(Method::POST, t, ask(Some("nlp"), "cv", "100")),
            BAD,
        ),
        (
            OwnerNlp,
            Api(Method::POST, t, ask(None, "nlp", "100")),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::POST, t, ask(Some("cv"), "nlp", "1")),
            NOT_FOUND,
        ),
        (
            OwnerNlp,
            Api(Method::POST, t, Some(json!({"to": "cv"}))),
            BAD,
        ),
        (
            MemberCv,
            Api(Method::POST, t, ask(Some("cv"), "nlp", "1")),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Api(Method::POST, "/api/v1/transfers/6/approve", None),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::POST, "/api/v1/transfers/6/approve", None),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Api(Method::POST, "/api/v1/transfers/6/reject", None),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Api(Method::POST, "/api/v1/transfers/2/reject", None),
            NOT_FOUND,
        ),
        (
            AdminToken,
            Api(Method::POST, "/api/v1/transfers/6/approve", None),
            OK,
        ),
        (
            AdminToken,
            Api(Method::POST, "/api/v1/transfers/6/approve", None),
            CONFLICT,
        ),
        (
            AdminToken,
            Api(Method::POST, "/api/v1/transfers/6/reject", None),
            CONFLICT,
        ),
        (
            Admin,
            Api(
                Method::POST,
                "/api/v1/transfers/4/reject",
                Some(json!({"note": "no"})),
            ),
            OK,
        ),
        (
            AdminToken,
            Api(Method::POST, "/api/v1/transfers/999/approve", None),
            NOT_FOUND,
        ),
        // Quota pages: reading, by role; invisible quotas do not exist.
        (Anonymous, Get("/quotas/nlp"), SEE_OTHER),
        (Anonymous, Get("/quotas/nlp/edit"), SEE_OTHER),
        (Anonymous, Get("/quotas/nlp/children/new"), SEE_OTHER),
        (Anonymous, Get("/tree?q=nlp&filter=hot"), SEE_OTHER),
        (
            Anonymous,
            Form("/quotas/nlp/children/new", vec![("name", "x")]),
            SEE_OTHER,
        ),
        (Admin, Get("/quotas/nlp"), OK),
        (Admin, Get("/quotas/ghost"), NOT_FOUND),
        (Admin, Get("/tree?q=nlp&filter=hot"), OK),
        (Admin, Get("/tree?under=nlp&depth=0"), OK),
        (OwnerNlp, Get("/quotas/nlp"), OK),
        (OwnerNlp, Get("/quotas/nlp-a"), OK),
        (OwnerNlp, Get("/quotas/cv"), NOT_FOUND),
        (OwnerNlp, Get("/quotas/ai"), NOT_FOUND),
        (OwnerNlp, Get("/tree?under=cv"), OK),
        (MemberCv, Get("/quotas/cv"), OK),
        (MemberCv, Get("/quotas/nlp"), NOT_FOUND),
        (MemberCv, Get("/tree"), OK),
        // Inviting onto a subtree (SPEC §6): an owner gives `member` on
        // what it owns and `owner` strictly below it; members give nothing.
        (
            Anonymous,
            Form(
                "/quotas/nlp/members",
                vec![("username", "bob"), ("role", "member")],
            ),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            FormNoCsrf(
                "/quotas/nlp/members",
                vec![("username", "bob"), ("role", "member")],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/members",
                vec![("username", "bob"), ("role", "member")],
            ),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/members",
                vec![("username", "bob"), ("role", "owner")],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp-a/members",
                vec![("username", "bob"), ("role", "owner")],
            ),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/members",
                vec![("username", "nobody"), ("role", "member")],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/members",
                vec![("username", "bob"), ("role", "king")],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/cv/members",
                vec![("username", "alice"), ("role", "member")],
            ),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Form(
                "/quotas/cv/members",
                vec![("username", "alice"), ("role", "member")],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form("/quotas/nlp-a/members/delete", vec![("username", "bob")]),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            Form("/quotas/nlp/members/delete", vec![("username", "bob")]),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            Form("/quotas/nlp/members/delete", vec![("username", "bob")]),
            NOT_FOUND,
        ),
        (
            OwnerNlp,
            Form("/quotas/nlp/members/delete", vec![("username", "alice")]),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form("/quotas/cv/members/delete", vec![("username", "bob")]),
            FORBIDDEN,
        ),
        (
            Admin,
            Form(
                "/quotas/cv/members",
                vec![("username", "alice"), ("role", "owner")],
            ),
            SEE_OTHER,
        ),
        (
            Admin,
            Form("/quotas/cv/members/delete", vec![("username", "alice")]),
            SEE_OTHER,
        ),
        // The forms: children by owners of the parent or an ancestor; a
        // spec by owners of an ancestor, never the quota's own.
        (Admin, Get("/quotas/nlp/children/new"), OK),
        (Admin, Get("/quotas/ghost/children/new"), NOT_FOUND),
        (OwnerNlp, Get("/quotas/nlp/children/new"), OK),
        (OwnerNlp, Get("/quotas/nlp-a/children/new"), OK),
        (OwnerNlp, Get("/quotas/cv/children/new"), FORBIDDEN),
        (OwnerNlp, Get("/quotas/ai/children/new"), FORBIDDEN),
        (MemberCv, Get("/quotas/cv/children/new"), FORBIDDEN),
        (Admin, Get("/quotas/nlp/edit"), OK),
        (OwnerNlp, Get("/quotas/nlp/edit"), FORBIDDEN),
        (OwnerNlp, Get("/quotas/nlp-a/edit"), OK),
        (OwnerNlp, Get("/quotas/cv/edit"), NOT_FOUND),
        (MemberCv, Get("/quotas/cv/edit"), FORBIDDEN),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/children/new",
                vec![
                    ("name", "nlp-t"),
                    ("hard:requests.nvidia.com/gpu", "1"),
                    ("hard:pods", "2"),
                ],
            ),
            SEE_OTHER,
        ),
        (OwnerNlp, Get("/quotas/nlp-t"), OK),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/children/new",
                vec![
                    ("name", "nlp-u"),
                    ("hard:requests.nvidia.com/gpu", "7"),
                    ("hard:pods", "2"),
                ],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/children/new",
                vec![("name", "nlp-u"), ("hard:pods", "2")],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/children/new",
                vec![
                    ("name", "nlp-u"),
                    ("hard:requests.nvidia.com/gpu", "lots"),
                    ("hard:pods", "2"),
                ],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/children/new",
                vec![
                    ("name", "nlp-t"),
                    ("hard:requests.nvidia.com/gpu", "1"),
                    ("hard:pods", "2"),
                ],
            ),
            StatusCode::CONFLICT,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/cv/children/new",
                vec![
                    ("name", "cv-t"),
                    ("hard:requests.nvidia.com/gpu", "1"),
                    ("hard:pods", "2"),
                ],
            ),
            FORBIDDEN,
        ),
        (
            MemberCv,
            Form(
                "/quotas/cv/children/new",
                vec![
                    ("name", "cv-t"),
                    ("hard:requests.nvidia.com/gpu", "1"),
                    ("hard:pods", "2"),
                ],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            FormNoCsrf(
                "/quotas/nlp/children/new",
                vec![
                    ("name", "nlp-v"),
                    ("hard:requests.nvidia.com/gpu", "1"),
                    ("hard:pods", "2"),
                ],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp/edit",
                vec![("hard:requests.nvidia.com/gpu", "9"), ("hard:pods", "40")],
            ),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp-t/edit",
                vec![("hard:requests.nvidia.com/gpu", "2"), ("hard:pods", "2")],
            ),
            SEE_OTHER,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/nlp-t/edit",
                vec![("hard:requests.nvidia.com/gpu", "20"), ("hard:pods", "2")],
            ),
            INVALID,
        ),
        (
            OwnerNlp,
            Form(
                "/quotas/cv/edit",
                vec![("hard:requests.nvidia.com/gpu", "1"), ("hard:pods", "2")],
            ),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Form(
                "/quotas/cv/edit",
                vec![("hard:requests.nvidia.com/gpu", "1"), ("hard:pods", "2")],
            ),
            FORBIDDEN,
        ),
        (
            Admin,
            FormNoCsrf(
                "/quotas/nlp/edit",
                vec![("hard:requests.nvidia.com/gpu", "8"), ("hard:pods", "40")],
            ),
            FORBIDDEN,
        ),
        // Deleting: leaves, confirmed, by an ancestor's owner.
        (OwnerNlp, Form("/quotas/nlp-t/delete", vec![]), INVALID),
        (
            OwnerNlp,
            Form("/quotas/nlp/delete", vec![("confirm", "yes")]),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form("/quotas/cv/delete", vec![("confirm", "yes")]),
            NOT_FOUND,
        ),
        (
            MemberCv,
            Form("/quotas/cv/delete", vec![("confirm", "yes")]),
            FORBIDDEN,
        ),
        (
            Admin,
            Form("/quotas/ai/delete", vec![("confirm", "yes")]),
            INVALID,
        ),
        (
            OwnerNlp,
            FormNoCsrf("/quotas/nlp-t/delete", vec![("confirm", "yes")]),
            FORBIDDEN,
        ),
        (
            OwnerNlp,
            Form("/quotas/nlp-t/delete", vec![("confirm", "yes")]),
            SEE_OTHER,
        ),
        (OwnerNlp, Get("/quotas/nlp-t"), NOT_FOUND),
        // Logging out.
        (MemberCv, Form("/logout", vec![]), SEE_OTHER),
        (MemberCv, Get("/"), SEE_OTHER),
    ];
    let mut wrong = Vec::new();
    for (who, call, want) in &rows {
        let (got, body) = run(s, &o, *who, call).await;
        if got != *want {
            let body: String = body.chars().take(300).collect();
            wrong.push(format!("{who:?} {call:?}: want {want}, got {got}: {body}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} rows wrong:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n")
    );

    // What the statuses stand for.
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, v) = s.api_with(Method::GET, q, None, Some(&o.alice_token)).await;
    assert_eq!(names(&v), ["nlp", "nlp-a"], "an owner lists its subtree");
    let (_, v) = s.api(Method::GET, q, None).await;
    assert_eq!(
        names(&v),
        ["ai", "cv", "nlp", "nlp-a"],
        "the admin token lists all"
    );
    let check = |token: String, body: Value| async move {
        s.api_with(
            Method::POST,
            "/api/v1/check",
            Some(serde_json::to_vec(&body).unwrap()),
            Some(&token),
        )
        .await
        .1
    };
    let v = check(o.bob_token.clone(), nlp_deploy.clone()).await;
    assert_eq!(
        (v["allowed"].clone(), v["message"].clone()),
        (json!(false), json!("bizrq nlp not found")),
        "a member of cv learns nothing of nlp: {v}"
    );
    let v = check(o.bob_token.clone(), json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"biz.group.resource.quota": "nope"}}, "spec": nlp_deploy["spec"].clone()})).await;
    assert_eq!(
        v["message"], "bizrq nope not found",
        "the same answer as for a quota that does not exist"
    );
    let v = check(o.alice_token.clone(), nlp_deploy.clone()).await;
    assert_eq!(v["allowed"], true, "{v}");
    let bob_home = o.bob.get("/").await;
    assert_eq!(
        bob_home.status,
        StatusCode::SEE_OTHER,
        "bob logged out above"
    );
    let bob = Browser::logged_in(s, "bob", BOB_PW).await;
    let home = bob.get("/").await.body;
    assert!(
        home.contains(">cv<") && !home.contains(">nlp<") && !home.contains(">ai<"),
        "{home}"
    );
    let home = o.admin.get("/").await.body;
    assert!(
        home.contains(">Users<") && home.contains(">ai<"),
        "admins see the roots and the users page"
    );
    assert!(
        o.admin.get("/tree").await.body.contains(">nlp<"),
        "admins see all in the tree"
    );
    let tree = bob.get("/tree").await.body;
    assert!(tree.contains(">cv<") && !tree.contains(">nlp<"), "{tree}");
    let under = o.alice.get("/tree?under=cv").await.body;
    assert!(!under.contains(">cv<"), "no subtree of what one cannot see");
    assert!(
        !o.alice.get("/").await.body.contains(">Users<"),
        "no users link for non-admins"
    );
    let (st, v) = o.admin.api(Method::POST, dry, child_of("cv", "1")).await;
    assert_eq!(st, CREATED, "the admin's session with its CSRF header: {v}");
    o.admin.forget_csrf();
    let (st, v) = o.admin.api(Method::POST, dry, child_of("cv", "1")).await;
    assert_eq!(
        (st, v["error"]["reason"].as_str()),
        (FORBIDDEN, Some("Forbidden")),
        "a session without the CSRF header: {v}"
    );
}

/// Changes through the API and the portal are audited with actor, before
/// and after; each viewer reads only entries on what it can see.
async fn audit_log(s: &Server) {
    let o = org(s).await;
    let (st, v) = s
        .api_with(
            Method::POST,
            "/api/v1/quotas",
            Some(serde_json::to_vec(&quota("nlp-b", "nlp", "1", "2")).unwrap()),
            Some(&o.alice_token),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, _) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(quota("cv", "ai", "3", "20")),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = s
        .api_with(
            Method::DELETE,
            "/api/v1/quotas/nlp-b",
            None,
            Some(&o.alice_token),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = s
        .api_with(
            Method::POST,
            "/api/v1/quotas?dryRun=All",
            Some(serde_json::to_vec(&quota("nlp-c", "nlp", "1", "2")).unwrap()),
            Some(&o.alice_token),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);

    let csv = o.admin.get("/audit.csv").await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(csv.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let lines: Vec<&str> = csv.body.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], "id,at,actor,action,target,before,after,detail");
    let find = |action: &str, target: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!(",{action},{target},")))
            .unwrap_or_else(|| panic!("no {action} of {target} in\n{}", csv.body))
            .to_string()
    };
    let created = find("quota.create", "nlp-b");
    assert!(created.contains(",alice,"), "{created}");
    assert!(
        created.contains(r#"""parent"":""nlp"""#),
        "after holds the spec, quoted: {created}"
    );
    let updated = find("quota.update", "cv");
    assert!(updated.contains(",admin-token,"), "{updated}");
    assert!(
        updated.contains(r#"""requests.nvidia.com/gpu"":""4"""#)
            && updated.contains(r#"""requests.nvidia.com/gpu"":""3"""#),
        "before and after: {updated}"
    );
    find("quota.delete", "nlp-b");
    find("role.add", "nlp");
    find("user.create", "user:alice");
    find("user.create", "user:admin");
    find("token.create", "user:bob");
    assert!(
        !csv.body.contains("nlp-c"),
        "a dry run changes nothing and is not audited"
    );
    assert!(!csv.body.contains("argon2"), "no password hash in the log");

    // Filters, on the page and in the export.
    let by_alice = o
        .admin
        .get("/audit.csv?actor=alice&action=quota.create")
        .await
        .body;
    assert_eq!(
        by_alice.split("\r\n").filter(|l| !l.is_empty()).count(),
        2,
        "{by_alice}"
    );
    let page = o.admin.get("/audit?target=cv").await.body;
    assert!(
        page.contains("quota.update") && !page.contains("nlp-b"),
        "{page}"
    );
    let none = o.admin.get("/audit.csv?from=2999-01-01").await.body;
    assert_eq!(none, "id,at,actor,action,target,before,after,detail\r\n");
    let since = o
        .admin
        .get("/audit.csv?from=2000-01-01T00:00&to=2999-01-01")
        .await
        .body;
    assert_eq!(since, csv.body);

    // Non-admins: entries on quotas they see, and on their own account.
    let bob = o.bob.get("/audit.csv").await.body;
    assert!(
        bob.contains(",quota.update,cv,") && bob.contains(",token.create,user:bob,"),
        "{bob}"
    );
    assert!(!bob.contains("nlp") && !bob.contains("user:alice"), "{bob}");
    let alice = o.alice.get("/audit").await.body;
    assert!(
        alice.contains("role.add") && !alice.contains(">cv<"),
        "{alice}"
    );

    // Append-only in the database itself.
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(&s.database_url).await.unwrap();
    let err = sqlx::query("UPDATE audit_log SET actor = 'nobody'")
        .execute(&db)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = sqlx::query("DELETE FROM audit_log")
        .execute(&db)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    db.close().await;
}

fn gpus(q: &Value) -> &str {
    q["spec"]["hard"][GPU].as_str().unwrap_or("?")
}

/// Polls a page until it contains `text` (the sweep runs every second).
async fn eventually(b: &Browser, path: &str, text: &str) -> String {
    for _ in 0..100 {
        let p = b.get(path).await;
        if p.body.contains(text) {
            return p.body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{path} never showed {text:?}");
}

/// Through the portal's forms: an owner asks to move 2 GPUs from nlp to
/// its sibling cv; neither it nor a member of cv may approve; the owner of
/// the common parent does, and both quotas change, audited. An owner
/// decides moves inside its own subtree. Refusals name key and amount;
/// requests nobody decides expire. (Run with a sweep every second.)
async fn transfer_flow(s: &Server) {
    // ai-platform (16) ─┬─ nlp (8) ── nlp-a (2)
    //                   └─ cv (4)
    for (name, parent, gpu) in [
        ("ai-platform", "", "16"),
        ("nlp", "ai-platform", "8"),
        ("cv", "ai-platform", "4"),
        ("nlp-a", "nlp", "2"),
    ] {
        s.create_quota(name, parent, json!({ GPU: gpu })).await;
    }
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "bob", BOB_PW).await;
    create_user(&admin, "carol", "carol-password-123").await;
    bind(&admin, "alice", "nlp", "owner").await;
    // A transfer names both ends, so alice must see cv to give to it.
    bind(&admin, "alice", "cv", "member").await;
    bind(&admin, "bob", "cv", "member").await;
    bind(&admin, "carol", "ai-platform", "owner").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let bob = Browser::logged_in(s, "bob", BOB_PW).await;
    let carol = Browser::logged_in(s, "carol", "carol-password-123").await;

    // The form offers what alice owns; bob owns nothing and gets no form.
    let page = alice.get("/transfers").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains(r#"<option value="nlp""#),
        "{}",
        page.body
    );
    let from = &page.body[page.body.find(r#"<select name="from">"#).unwrap()..];
    assert!(
        !from[..from.find("</select>").unwrap()].contains(r#"<option value="cv""#),
        "alice gives only what she owns: {}",
        page.body
    );
    assert!(!bob
        .get("/transfers")
        .await
        .body
        .contains("Request a transfer"));

    // A refusal names the key and the amount, and keeps what was typed.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "100"),
                ("reason", "big run"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(
        p.body
            .contains("bizrq nlp: requests.nvidia.com/gpu gives 100, its hard is only 8"),
        "{}",
        p.body
    );
    assert!(p.body.contains("big run"), "the form comes back as typed");
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", ""),
                ("to", "nlp"),
                ("key", GPU),
                ("amount", "10"),
                ("reason", "more"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(
        p.body
            .contains("requests.nvidia.com/gpu asks 10, 4 left of 16"),
        "{}",
        p.body
    );

    // The request.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "2"),
                ("key", ""),
                ("amount", ""),
                ("reason", "cv's detection sprint"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let at = p.location().unwrap().to_string();
    assert_eq!(at, "/transfers/1");
    let page = alice.get(&at).await.body;
    assert!(
        page.contains("transfer #1 requested") && page.contains("requested"),
        "{page}"
    );
    assert!(page.contains("owners of ai-platform"), "{page}");
    assert!(
        !page.contains("/transfers/1/approve"),
        "alice may not approve her own: {page}"
    );

    // Neither the requester nor a member of the receiver may approve.
    let p = alice.post("/transfers/1/approve", &[]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let page = bob.get(&at).await;
    assert_eq!(page.status, StatusCode::OK, "bob sees what touches cv");
    assert!(!page.body.contains("/transfers/1/approve"));
    let p = bob.post("/transfers/1/approve", &[]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert_eq!(gpus(&s.quota("nlp").await), "8", "nothing moved yet");

    // The owner of the common parent approves: both quotas change.
    let page = carol.get(&at).await.body;
    assert!(
        page.contains("/transfers/1/approve") && page.contains("/transfers/1/reject"),
        "{page}"
    );
    let p = carol.post("/transfers/1/approve", &[]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let page = carol.get(&at).await.body;
    assert!(page.contains("transfer #1 approved and done"), "{page}");
    assert!(
        page.contains("receives") && page.contains("gives"),
        "the plan: {page}"
    );
    assert!(!page.contains("/transfers/1/approve"), "decided: {page}");
    assert_eq!(gpus(&s.quota("nlp").await), "6");
    assert_eq!(gpus(&s.quota("cv").await), "6");

    // An owner decides moves that meet inside its own subtree: more from
    // nlp for nlp-a.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", ""),
                ("to", "nlp-a"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "eval"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/transfers/2"), "{}", p.body);
    assert!(alice
        .get("/transfers/2")
        .await
        .body
        .contains("/transfers/2/approve"));
    let p = alice.post("/transfers/2/approve", &[]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(gpus(&s.quota("nlp-a").await), "3");
    assert_eq!(gpus(&s.quota("nlp").await), "6", "nlp's remainder paid");

    // Rejected with a note, by an admin.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "again"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/transfers/3"));
    admin.get("/transfers/3").await;
    let p = admin
        .post("/transfers/3/reject", &[("note", "cv has enough")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let page = alice.get("/transfers/3").await.body;
    assert!(
        page.contains("rejected") && page.contains("cv has enough"),
        "{page}"
    );
    assert_eq!(gpus(&s.quota("cv").await), "6");

    // Nobody decides: it expires (the request's deadline moved into the
    // past, as a week would).
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "late"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/transfers/4"));
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(&s.database_url).await.unwrap();
    sqlx::query("UPDATE transfers SET expires_at = 1 WHERE id = 4")
        .execute(&db)
        .await
        .unwrap();
    db.close().await;
    let page = eventually(&alice, "/transfers/4", "status expired").await;
    assert!(!page.contains("/transfers/4/approve"), "{page}");
    let list = alice.get("/transfers?status=expired").await.body;
    assert!(
        list.contains("/transfers/4") && !list.contains(r#"href="/transfers/1""#),
        "{list}"
    );
    let p = carol.post("/transfers/4/approve", &[]).await;
    assert_eq!(p.status, StatusCode::CONFLICT, "{}", p.body);
    assert!(p.body.contains("transfer 4 is expired"), "{}", p.body);

    // The audit log: request, approval, rejection and expiry, each once.
    let csv = admin.get("/audit.csv").await.body;
    let entries = |action: &str| -> Vec<&str> {
        csv.split("\r\n")
            .filter(|l| l.contains(&format!(",{action},")))
            .collect()
    };
    assert_eq!(entries("transfer.request").len(), 4, "{csv}");
    let approvals = entries("transfer.approve");
    assert_eq!(approvals.len(), 2, "{csv}");
    assert!(
        approvals
            .iter()
            .any(|l| l.contains(",carol,transfer.approve,nlp,") && l.contains("#1 nlp → cv")),
        "{csv}"
    );
    assert!(
        approvals
            .iter()
            .any(|l| l.contains(",alice,transfer.approve,nlp-a,")),
        "{csv}"
    );
    assert!(entries("transfer.request")
        .iter()
        .any(|l| l.contains(",alice,transfer.request,nlp,")));
    assert_eq!(entries("transfer.reject").len(), 1, "{csv}");
    let expired = entries("transfer.expire");
    assert_eq!(expired.len(), 1, "{csv}");
    assert!(expired[0].contains(",bizrq,transfer.expire,nlp,"), "{csv}");
    // Alice reads the entries of her requests (they are on nlp).
    let mine = alice.get("/audit?action=transfer.approve").await.body;
    assert!(mine.contains("carol"), "{mine}");
}

/// Five failed logins per username and address in 15 minutes; the sixth
/// attempt is refused without a password check, even a right one.
async fn login_rate_limit(s: &Server) {
    let admin = Browser::logged_in(s, "admin", ADMIN_PASSWORD).await;
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
async fn token_revocation(s: &Server) {
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
    let p = o.bob.post(&format!("/tokens/{first_id}/revoke"), &[]).await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    assert_eq!(call(o.alice_token.clone()).await, StatusCode::OK);
    let p = o
        .alice
        .post(&format!("/tokens/{first_id}/revoke"), &[])
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
        .post("/users/alice/disabled", &[("disabled", "true")])
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
    // Last use is recorded.
    let page = o.alice.get("/tokens").await.body;
    assert_eq!(
        page.matches("never").count(),
        0,
        "both tokens were used: {page}"
    );
}

fn attrs(set_cookie: &str) -> Vec<String> {
    set_cookie
        .split(';')
        .skip(1)
        .map(|a| a.trim().to_ascii_lowercase())
        .collect()
}

/// HttpOnly, SameSite=Strict, Path=/; Secure behind HTTPS; a new id at
/// login; gone at logout.
async fn session_cookie_flags(s: &Server) {
    let b = Browser::new(s);
    let p = b.get("/login").await;
    let anon = p.session_cookie().expect("the login form's session");
    let a = attrs(&anon);
    assert!(a.contains(&"httponly".into()), "{anon}");
    assert!(a.contains(&"samesite=strict".into()), "{anon}");
    assert!(a.contains(&"path=/".into()), "{anon}");
    assert!(
        !a.contains(&"secure".into()),
        "plain HTTP without --secure-cookies: {anon}"
    );
    let p = b
        .post(
            "/login",
            &[("username", "admin"), ("password", ADMIN_PASSWORD)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), Some("/"));
    let logged = p.session_cookie().expect("a new session at login");
    let id = |c: &str| c.split(';').next().unwrap().to_string();
    assert_ne!(id(&anon), id(&logged), "the session id changes at login");
    assert!(attrs(&logged).contains(&"httponly".into()));
    // The old (anonymous) id is not logged in.
    let old = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = old
        .get(format!("{}/", s.http))
        .header("cookie", id(&anon))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
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

/// The quota forms end to end: a child that fits is created and audited; one
/// that does not is refused on the form with the key and the amounts; a
/// stale edit form says someone else changed the quota; the detail page and
/// the overview draw charts and forecasts once samples exist.
async fn quota_pages(s: &Server) {
    let o = org(s).await;
    let form = o.alice.get("/quotas/nlp/children/new").await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(
        form.body.contains(r#"name="hard:requests.nvidia.com/gpu""#)
            && form.body.contains(r#"name="hard:pods""#),
        "the parent's keys are on the form: {}",
        form.body
    );
    let big = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-big"),
                ("hard:requests.nvidia.com/gpu", "7"),
                ("hard:pods", "5"),
            ],
        )
        .await;
    assert_eq!(big.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        big.body
            .contains("requests.nvidia.com/gpu asks 7, 6 left of 8"),
        "the refusal names the key and the amounts: {}",
        big.body
    );
    assert!(
        big.body.contains(r#"value="nlp-big""#),
        "the form keeps what was typed"
    );
    let (st, _) = s.api(Method::GET, "/api/v1/quotas/nlp-big", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    let ok = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-small"),
                ("hard:requests.nvidia.com/gpu", "2"),
                ("hard:pods", "5"),
                ("max:requests.nvidia.com/gpu", "4"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(ok.location(), Some("/quotas/nlp-small"));
    let q = s.quota("nlp-small").await;
    assert_eq!(q["spec"]["hard"]["requests.nvidia.com/gpu"], "2");
    assert_eq!(q["spec"]["max"]["requests.nvidia.com/gpu"], "4");
    let page = o.alice.get("/quotas/nlp-small").await.body;
    assert!(
        page.contains("created nlp-small under nlp"),
        "flash: {page}"
    );
    let csv = o.admin.get("/audit.csv").await.body;
    assert!(
        csv.lines()
            .any(|l| l.contains(",alice,quota.create,nlp-small,")),
        "audited like the API: {csv}"
    );

    // A stale edit form: someone else changed it meanwhile.
    let edit = o.alice.get("/quotas/nlp-small/edit").await.body;
    let version = hidden_field(&edit, "resourceVersion").expect("a version on the form");
    let (st, _) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/nlp-small",
            Some(quota("nlp-small", "nlp", "3", "5")),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let stale = o
        .alice
        .post(
            "/quotas/nlp-small/edit",
            &[
                ("resourceVersion", version.as_str()),
                ("hard:requests.nvidia.com/gpu", "1"),
                ("hard:pods", "5"),
            ],
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.body);
    assert!(stale.body.contains("Someone else changed nlp-small"));
    assert!(
        stale.body.contains(r#"value="3""#),
        "the form shows the current hard"
    );
    assert_eq!(
        s.quota("nlp-small").await["spec"]["hard"]["requests.nvidia.com/gpu"],
        "3"
    );

    // Charts and forecasts once the sampler has recorded usage.
    s.create_quota(
        "ml",
        "",
        json!({"requests.nvidia.com/gpu": "4", "cash/requests.nvidia.com/gpu": "100"}),
    )
    .await;
    let before = o.admin.get("/quotas/ml").await.body;
    assert!(!before.contains("<svg"), "no charts without samples");
    assert!(before.contains("No usage recorded yet"));
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
    assert!(
        page.contains("cash/requests.nvidia.com/gpu runs out in"),
        "{page}"
    );
    let home = o.admin.get("/").await.body;
    assert!(
        home.contains("cash/requests.nvidia.com/gpu runs out in")
            && home.contains("burning 10 card-hours/h"),
        "the overview forecasts the budget: {home}"
    );
    assert!(
        home.contains("All alerts (") && home.contains("href=\"/alerts\""),
        "the overview has its alert section: {home}"
    );
}

/// A thousand quotas: the tree folds below two levels, stays small, and
/// answers quickly; a search finds a deep node with its ancestors.
#[tokio::test]
async fn thousand_quota_tree() {
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
    let admin = Browser::logged_in(&s, "admin", ADMIN_PASSWORD).await;
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
    assert!(page.body.contains("+9 below"), "teams fold their projects");
    assert!(page.body.len() < 200_000, "{} bytes", page.body.len());
    assert!(full.body.len() < 2_000_000, "{} bytes", full.body.len());
    assert!(folded < std::time::Duration::from_secs(2));
    let found = admin.get("/tree?q=proj-7-3-5").await.body;
    for name in ["org", "dept-7", "team-7-3", "proj-7-3-5"] {
        assert!(found.contains(&format!(">{name}<")), "{name}");
    }
    assert!(!found.contains(">proj-7-3-4<"));
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

/// Alerts in the portal: a transfer request raises one at once, shown on
/// the overview, counted in the nav, listed on /alerts for those who may
/// see the quota; rules and preferences are saved and shown again.
async fn alerts_in_the_portal(s: &Server) {
    let o = org(s).await;
    let p = o
        .alice
        .post(
            "/transfers",
            &[
                ("from", "nlp-a"),
                ("to", "nlp"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "a test"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let home = o.alice.get("/").await.body;
    assert!(
        home.contains("of 1 requests.nvidia.com/gpu from nlp-a to nlp requested by alice"),
        "the overview shows the open alert: {home}"
    );
    assert!(
        home.contains(r#"title="open alerts" class="badge">1</span>"#),
        "the nav counts it: {home}"
    );
    let page = o.alice.get("/alerts?kind=transfer_requested").await.body;
    assert!(page.contains("requested by alice"), "{page}");
    let page = o.alice.get("/alerts?kind=threshold").await.body;
    assert!(
        !page.contains("requested by alice"),
        "filtered by kind: {page}"
    );
    let bobs = o.bob.get("/alerts").await.body;
    assert!(
        !bobs.contains("requested by alice"),
        "bob may not see nlp: {bobs}"
    );

    o.alice.get("/quotas/nlp/alerts").await;
    let p = o
        .alice
        .post(
            "/quotas/nlp/alerts",
            &[("key", GPU), ("warn_percent", "55"), ("crit_percent", "95")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let rules = o.alice.get("/quotas/nlp/alerts").await.body;
    assert!(rules.contains("55 %") && rules.contains("95 %"), "{rules}");

    o.alice.get("/account").await;
    let p = o
        .alice
        .post(
            "/account",
            &[("email", "alice@example.com"), ("mute.cash_forecast", "1")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let account = o.alice.get("/account").await.body;
    assert!(
        account.contains(r#"value="alice@example.com""#),
        "{account}"
    );
    let tag = |name: &str| {
        let at = account.find(&format!("name=\"{name}\"")).unwrap();
        let start = account[..at].rfind('<').unwrap();
        let end = at + account[at..].find('>').unwrap();
        account[start..end].to_string()
    };
    assert!(tag("mute.cash_forecast").contains("checked"), "{account}");
    assert!(!tag("mute.threshold").contains("checked"), "{account}");
    // Both changes are in the audit log, with before and after.
    let audit = o.admin.get("/audit.csv?target=user:alice").await.body;
    assert!(audit.contains("user.email"), "{audit}");
    assert!(audit.contains("alice@example.com"), "{audit}");
    assert!(
        audit.contains("alert.prefs") && audit.contains("cash_forecast"),
        "{audit}"
    );
    // Saving the same settings again changes and audits nothing.
    o.alice
        .post(
            "/account",
            &[("email", "alice@example.com"), ("mute.cash_forecast", "1")],
        )
        .await;
    let again = o.admin.get("/audit.csv?target=user:alice").await.body;
    assert_eq!(again.lines().count(), audit.lines().count(), "{again}");

    alerts_api(s, &o).await;
}

/// GET /api/v1/alerts: what the caller may see, filters and paging, clear
/// errors; a write is evaluated at once (no sweep runs in the test's time).
async fn alerts_api(s: &Server, o: &Org) {
    let alice = |path: String| {
        let t = o.alice_token.clone();
        async move { s.api_with(Method::GET, &path, None, Some(&t)).await }
    };
    let (st, v) = alice("/api/v1/alerts".into()).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{v}");
    let requested = &items[0];
    assert_eq!(requested["kind"], "transfer_requested");
    assert_eq!(requested["quota"], "nlp");
    assert_eq!(requested["state"], "open");
    assert!(requested["openedAt"].as_str().unwrap().ends_with('Z'));
    let id = requested["id"].as_i64().unwrap();
    let (st, one) = alice(format!("/api/v1/alerts/{id}")).await;
    assert_eq!((st, &one), (StatusCode::OK, requested));
    // Bob (member of cv) sees none of nlp's, not even by id.
    let bob = |path: String| {
        let t = o.bob_token.clone();
        async move { s.api_with(Method::GET, &path, None, Some(&t)).await }
    };
    let (_, v) = bob("/api/v1/alerts".into()).await;
    assert_eq!(v["items"], json!([]), "{v}");
    let (st, v) = bob(format!("/api/v1/alerts/{id}")).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, _) = s.api_with(Method::GET, "/api/v1/alerts", None, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    // Clear errors.
    for (query, says) in [
        ("state=bogus", "unknown state 'bogus'"),
        ("kind=bogus", "unknown alert kind 'bogus'"),
        ("limit=0", "limit 0 is out of range"),
        ("limit=1000000", "out of range"),
        ("colour=red", "unknown field"),
        ("before=x", "before"),
    ] {
        let (st, v) = s
            .api(Method::GET, &format!("/api/v1/alerts?{query}"), None)
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{query}: {v}");
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(says), "{query}: {m}");
    }
    let (st, _) = s.api(Method::GET, "/api/v1/alerts/x", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // 6 cards on nlp, which carves 2 out for nlp-a: 8 of 8 used. Warning
    // and critical open within moments of the admission: a write is
    // evaluated by itself, not by the next sweep.
    let d = deployment("train", "nlp", 6, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "api-1", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let mut threshold = Vec::new();
    for _ in 0..100 {
        let (_, v) = alice("/api/v1/alerts?kind=threshold&state=open".into()).await;
        threshold = v["items"].as_array().unwrap().clone();
        if threshold.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(threshold.len(), 2, "{threshold:?}");
    assert_eq!(threshold[0]["numbers"]["used"], "8", "{threshold:?}");
    // Paging: one at a time, newest first, then the rest.
    let (_, p1) = alice("/api/v1/alerts?limit=1".into()).await;
    let next = p1["next"].as_i64().expect("a next page");
    let (_, p2) = alice(format!("/api/v1/alerts?limit=10&before={next}")).await;
    assert_eq!(p2["items"].as_array().unwrap().len(), 2, "{p2}");
    assert_eq!(p2["next"], Value::Null);
    assert!(p2["items"][0]["id"].as_i64().unwrap() < next);
}

on_both!(
    alerts_in_the_portal,
    role_route_table,
    quota_pages,
    audit_log,
    login_rate_limit,
    token_revocation,
    session_cookie_flags,
);

mod transfer_flow {
    use crate::common::*;
    const SWEEP_EVERY_SECOND: &[&str] = &["--resync-seconds", "1"];

    #[tokio::test]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Server::start_with(
            &fresh_sqlite(&dir),
            SWEEP_EVERY_SECOND,
            Some(ADMIN_PASSWORD),
        )
        .await;
        super::transfer_flow(&s).await;
    }

    #[tokio::test]
    async fn postgres() {
        let (s, _) = Server::start_with(
            &fresh_postgres().await,
            SWEEP_EVERY_SECOND,
            Some(ADMIN_PASSWORD),
        )
        .await;
        super::transfer_flow(&s).await;
    }
}

/// `--secure-cookies` marks the cookie Secure on plain HTTP too.
#[tokio::test]
async fn secure_cookies_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Server::start_with(
        &fresh_sqlite(&dir),
        &["--secure-cookies"],
        Some(ADMIN_PASSWORD),
    )
    .await;
    let p = Browser::new(&s).get("/login").await;
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
