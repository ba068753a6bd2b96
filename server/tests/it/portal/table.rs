//! Every page and API route, by role: one row per call, in order (later
//! rows see what earlier ones changed).

use super::*;

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
    /// A form POST with the session's CSRF token; fields as `a=1&b=2`.
    Form(&'static str, String),
    /// A form POST without any CSRF token.
    FormNoCsrf(&'static str, String),
    /// The JSON API (bearer token, or the admin's session + CSRF header).
    Api(Method, &'static str, Option<Value>),
}

fn get(path: &'static str) -> Call {
    Call::Get(path)
}

fn form(path: &'static str, fields: &str) -> Call {
    Call::Form(path, fields.to_string())
}

fn no_csrf(path: &'static str, fields: &str) -> Call {
    Call::FormNoCsrf(path, fields.to_string())
}

fn api_get(path: &'static str) -> Call {
    Call::Api(Method::GET, path, None)
}

fn api_post(path: &'static str, body: Option<Value>) -> Call {
    Call::Api(Method::POST, path, body)
}

fn api_put(path: &'static str, body: Option<Value>) -> Call {
    Call::Api(Method::PUT, path, body)
}

fn api_delete(path: &'static str) -> Call {
    Call::Api(Method::DELETE, path, None)
}

/// The fields of the transfer form, asking for `amount` GPUs.
fn gpu_form(from: &str, to: &str, amount: &str) -> String {
    format!("from={from}&to={to}&key={GPU}&amount={amount}&reason=a test")
}

/// `a=1&b=2` as form fields (no escaping: the table's values hold neither).
fn fields(s: &str) -> Vec<(&str, &str)> {
    s.split('&')
        .filter(|f| !f.is_empty())
        .map(|f| f.split_once('=').expect("name=value"))
        .collect()
}

const OK: StatusCode = StatusCode::OK;
const CREATED: StatusCode = StatusCode::CREATED;
const SEE_OTHER: StatusCode = StatusCode::SEE_OTHER;
const BAD: StatusCode = StatusCode::BAD_REQUEST;
const UNAUTH: StatusCode = StatusCode::UNAUTHORIZED;
const FORBIDDEN: StatusCode = StatusCode::FORBIDDEN;
const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;
const NOT_ALLOWED: StatusCode = StatusCode::METHOD_NOT_ALLOWED;
const CONFLICT: StatusCode = StatusCode::CONFLICT;
const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;

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
        Call::Form(path, f) => {
            // Before sign-in only the login form has a CSRF token (in a
            // cookie sent to /login only, no session): any other form is
            // refused by the CSRF check, 403, before its handler.
            if matches!(who, Who::Anonymous) {
                anon.get("/login").await;
            }
            let p = browser.post(path, &fields(f)).await;
            (p.status, p.location().unwrap_or(&p.body).to_string())
        }
        Call::FormNoCsrf(path, f) => {
            let p = browser.post_raw(path, &fields(f)).await;
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

/// Every page and API route answers each role with the status its row
/// says; then what those statuses stand for (who sees what).
async fn each_route_answers_each_role_as_its_row_says(s: &Server) {
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
    let t = "/api/v1/transfers";
    let ask = |from: Option<&str>, to: &str, gpu: &str| Some(transfer(from, to, gpu));
    // One row per call, run in order: later rows see what earlier ones
    // changed (the transfers numbered above, users and quotas made here).
    #[rustfmt::skip]
    let rows: Vec<(Call, &[(Who, StatusCode)])> = vec![
        // Open to all: style, health, metrics, the login form.
        (get("/style.css"), &[(Anonymous, OK)]),
        (get("/healthz"), &[(Anonymous, OK)]),
        (get("/readyz"), &[(Anonymous, OK)]),
        (get("/metrics"), &[(Anonymous, OK)]),
        (get("/login"), &[(Anonymous, OK)]),
        // Pages: a login first, then by role.
        (get("/"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK), (MemberCv, OK)]),
        (get("/tree"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK)]),
        (get("/users"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, FORBIDDEN), (MemberCv, FORBIDDEN)]),
        (get("/tokens"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK)]),
        (get("/audit"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK), (MemberCv, OK)]),
        (get("/alerts"), &[(Anonymous, SEE_OTHER), (Admin, OK), (MemberCv, OK)]),
        (get("/audit.csv"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK)]),
        (form("/users", "username=eve&password=eve-password-123"), &[(Anonymous, FORBIDDEN)]),
        (form("/tokens", "name=t"), &[(Anonymous, FORBIDDEN)]),
        (get("/login"), &[(Admin, SEE_OTHER)]),
        (get("/audit?from=yesterday"), &[(Admin, INVALID)]),
        (get("/alerts?quota=nlp&kind=threshold"), &[(OwnerNlp, OK)]),
        (get("/alerts?kind=bogus"), &[(MemberCv, INVALID)]),
        // CSRF: every state-changing form without the token is 403.
        (no_csrf("/login", &format!("username=admin&password={ADMIN_PASSWORD}")), &[(Anonymous, FORBIDDEN)]),
        (no_csrf("/logout", ""), &[(Admin, FORBIDDEN)]),
        (no_csrf("/users", "username=eve&password=eve-password-123"), &[(Admin, FORBIDDEN)]),
        (no_csrf("/users/bob/admin", "admin=true"), &[(Admin, FORBIDDEN)]),
        (no_csrf("/tokens", "name=t"), &[(OwnerNlp, FORBIDDEN)]),
        (no_csrf("/tokens/1/revoke", ""), &[(OwnerNlp, FORBIDDEN)]),
        // Alert rules: owners of the quota or above, and admins, may set them.
        (get("/quotas/nlp/alerts"), &[(Anonymous, SEE_OTHER), (OwnerNlp, OK)]),
        (get("/quotas/cv/alerts"), &[(OwnerNlp, NOT_FOUND), (MemberCv, OK)]),
        (form("/quotas/nlp/alerts", "key=*&warn_percent=50&crit_percent=90"), &[(OwnerNlp, SEE_OTHER)]),
        (no_csrf("/quotas/nlp/alerts", "key=*"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/nlp/alerts", "key=bogus"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/nlp/alerts", "key=*&warn_percent=95&crit_percent=90"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/cv/alerts", "key=*"), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (form("/quotas/cv/alerts", "key=*&forecast_horizon_hours=72"), &[(Admin, SEE_OTHER)]),
        // Everyone's own email and alert preferences.
        (get("/account"), &[(Anonymous, SEE_OTHER), (MemberCv, OK)]),
        (form("/account", "email=carl@example.com&mute.threshold=1"), &[(MemberCv, SEE_OTHER)]),
        (form("/account", "email=not an address"), &[(MemberCv, INVALID)]),
        (no_csrf("/account", "email="), &[(MemberCv, FORBIDDEN)]),
        (get("/account"), &[(Admin, OK)]),
        // One's own password.
        (get("/account/password"), &[(Anonymous, SEE_OTHER), (MemberCv, OK)]),
        (no_csrf("/account/password", &format!("current={BOB_PW}&new=x-new-password-1&confirm=x-new-password-1")), &[(MemberCv, FORBIDDEN)]),
        (form("/account/password", "current=not-bobs-password&new=x-new-password-1&confirm=x-new-password-1"), &[(MemberCv, INVALID)]),
        (form("/account/password", &format!("current={ALICE_PW}&new=x-new-password-1&confirm=x-other-password")), &[(OwnerNlp, INVALID)]),
        (form("/users/bob/email", "email=bob@example.com"), &[(Admin, SEE_OTHER)]),
        (form("/users/bob/email", "email=bob"), &[(Admin, INVALID)]),
        (form("/users/bob/email", "email=x@example.com"), &[(OwnerNlp, FORBIDDEN)]),
        (no_csrf("/users/bob/email", "email="), &[(Admin, FORBIDDEN)]),
        // Users and roles: admins only.
        (form("/users", "username=eve&password=eve-password-123"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/users/bob/roles", "quota=nlp&role=member"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/users/bob/admin", "admin=true"), &[(MemberCv, FORBIDDEN)]),
        (form("/users/bob/disabled", "disabled=false"), &[(MemberCv, FORBIDDEN)]),
        (form("/users/bob/password", "password=bob-password-99999"), &[(MemberCv, FORBIDDEN)]),
        (form("/users/bob/roles/delete", "quota=cv"), &[(MemberCv, FORBIDDEN)]),
        (form("/users", "username=eve&password=short"), &[(Admin, INVALID)]),
        (form("/users", "username=Eve!&password=eve-password-123"), &[(Admin, INVALID)]),
        (form("/users", "username=bob&password=bob-password-12345"), &[(Admin, INVALID)]),
        (form("/users", "username=eve&password=eve-password-123"), &[(Admin, SEE_OTHER)]),
        (form("/users/eve/roles", "quota=ghost&role=member"), &[(Admin, INVALID)]),
        (form("/users/eve/roles", "quota=cv&role=king"), &[(Admin, INVALID)]),
        (form("/users/eve/roles", "quota=cv&role=member"), &[(Admin, SEE_OTHER)]),
        (form("/users/eve/roles/delete", "quota=cv"), &[(Admin, SEE_OTHER), (Admin, NOT_FOUND)]),
        (form("/users/eve/admin", "admin=true&confirm=yes"), &[(Admin, SEE_OTHER)]),
        (form("/users/eve/admin", "admin=true"), &[(Admin, INVALID)]),
        (form("/users/eve/disabled", "disabled=true&confirm=yes"), &[(Admin, SEE_OTHER)]),
        (form("/users/eve/disabled", "disabled=true"), &[(Admin, INVALID)]),
        (form("/users/eve/password", "password=eve-password-456"), &[(Admin, SEE_OTHER)]),
        (form("/users/nobody/admin", "admin=true"), &[(Admin, NOT_FOUND)]),
        (form("/users/admin/disabled", "disabled=true"), &[(Admin, INVALID)]),
        (form("/users/admin/admin", "admin=false"), &[(Admin, INVALID)]),
        // Tokens: one's own only.
        (form("/tokens", "name="), &[(OwnerNlp, INVALID)]),
        (form("/tokens/999/revoke", "confirm=yes"), &[(OwnerNlp, NOT_FOUND)]),
        (form("/tokens/999/revoke", ""), &[(OwnerNlp, INVALID)]),
        // JSON API: authentication.
        (api_get(q), &[(Anonymous, UNAUTH)]),
        (api_post(q, child_of("nlp", "1")), &[(Anonymous, UNAUTH)]),
        (api_post("/api/v1/check", Some(nlp_deploy.clone())), &[(Anonymous, UNAUTH)]),
        (api_get(q), &[(AdminToken, OK), (Admin, OK), (OwnerNlp, OK), (MemberCv, OK)]),
        // Alerts: everyone signed in lists those they may see.
        (api_get("/api/v1/alerts"), &[(Anonymous, UNAUTH), (AdminToken, OK)]),
        (api_get("/api/v1/alerts?state=open"), &[(MemberCv, OK)]),
        (api_get("/api/v1/alerts/999"), &[(OwnerNlp, NOT_FOUND)]),
        (api_post("/api/v1/alerts", Some(json!({}))), &[(MemberCv, NOT_ALLOWED)]),
        // Reading: what one may not see does not exist.
        (api_get("/api/v1/quotas/nlp"), &[(MemberCv, NOT_FOUND), (OwnerNlp, OK)]),
        (api_get("/api/v1/quotas/ai"), &[(MemberCv, NOT_FOUND)]),
        (api_get("/api/v1/quotas/cv"), &[(MemberCv, OK), (OwnerNlp, NOT_FOUND), (AdminToken, OK)]),
        (api_get("/api/v1/quotas/nlp-a"), &[(OwnerNlp, OK)]),
        (api_get("/api/v1/quotas/ghost"), &[(OwnerNlp, NOT_FOUND)]),
        // Real usage (docs/real-usage.md): likewise; "idle now" is each
        // one's own view.
        (api_get("/api/v1/quotas/nlp/efficiency"), &[(Anonymous, UNAUTH), (OwnerNlp, OK), (MemberCv, NOT_FOUND), (AdminToken, OK)]),
        (api_get("/api/v1/quotas/cv/efficiency?range=30d"), &[(OwnerNlp, NOT_FOUND), (MemberCv, OK), (Admin, OK)]),
        (api_get("/api/v1/quotas/nlp/efficiency?range=forever"), &[(OwnerNlp, BAD)]),
        (api_get("/api/v1/idle"), &[(Anonymous, UNAUTH), (AdminToken, OK), (Admin, OK), (OwnerNlp, OK), (MemberCv, OK)]),
        // Creating: owners under their subtree, within its hard.
        (api_post(dry, child_of("nlp", "1")), &[(OwnerNlp, CREATED)]),
        (api_post(dry, child_of("nlp-a", "1")), &[(OwnerNlp, CREATED)]),
        (api_post(dry, child_of("nlp", "7")), &[(OwnerNlp, INVALID)]),
        (api_post(dry, child_of("cv", "1")), &[(OwnerNlp, FORBIDDEN)]),
        (api_post(dry, child_of("ai", "1")), &[(OwnerNlp, FORBIDDEN)]),
        (api_post(dry, child_of("", "1")), &[(OwnerNlp, FORBIDDEN)]),
        (api_post(dry, child_of("ghost", "1")), &[(OwnerNlp, FORBIDDEN)]),
        (api_post(dry, child_of("cv", "1")), &[(MemberCv, FORBIDDEN)]),
        (api_post(dry, child_of("", "1")), &[(AdminToken, CREATED)]),
        (api_post(dry, child_of("cv", "1")), &[(Admin, CREATED)]),
        // Changing a spec: an ancestor's owner, never the quota's own.
        (api_put("/api/v1/quotas/nlp?dryRun=All", put("nlp", "ai", "9", "40")), &[(OwnerNlp, FORBIDDEN)]),
        (api_put("/api/v1/quotas/nlp?dryRun=All", put("nlp", "ai", "7", "40")), &[(OwnerNlp, FORBIDDEN)]),
        (api_put("/api/v1/quotas/nlp-a?dryRun=All", put("nlp-a", "nlp", "3", "10")), &[(OwnerNlp, OK)]),
        (api_put("/api/v1/quotas/cv?dryRun=All", put("cv", "ai", "1", "20")), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (api_put("/api/v1/quotas/nlp?dryRun=All", put("nlp", "ai", "9", "40")), &[(AdminToken, OK)]),
        // Deleting: likewise.
        (api_delete("/api/v1/quotas/nlp-a?dryRun=All"), &[(OwnerNlp, OK)]),
        (api_delete("/api/v1/quotas/nlp?dryRun=All"), &[(OwnerNlp, FORBIDDEN)]),
        (api_delete("/api/v1/quotas/cv?dryRun=All"), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (api_delete("/api/v1/quotas/nlp-a?dryRun=All"), &[(AdminToken, OK)]),
        // The dry-run check answers 200; what it may say is checked below.
        (api_post("/api/v1/check", Some(nlp_deploy.clone())), &[(OwnerNlp, OK), (MemberCv, OK)]),
        (api_post("/api/v1/check", Some(cv_deploy.clone())), &[(MemberCv, OK)]),
        (api_post("/api/v1/check", Some(unbound.clone())), &[(MemberCv, OK)]),
        // Transfer pages: logged in; CSRF on every form.
        (get("/transfers"), &[(Anonymous, SEE_OTHER)]),
        (get("/transfers/1"), &[(Anonymous, SEE_OTHER)]),
        (form("/transfers", &gpu_form("nlp", "cv", "1")), &[(Anonymous, FORBIDDEN)]),
        (form("/transfers/1/approve", ""), &[(Anonymous, FORBIDDEN)]),
        (form("/transfers/1/reject", ""), &[(Anonymous, FORBIDDEN)]),
        (no_csrf("/transfers", &gpu_form("nlp", "cv", "1")), &[(OwnerNlp, FORBIDDEN)]),
        (no_csrf("/transfers/1/approve", ""), &[(Admin, FORBIDDEN)]),
        (no_csrf("/transfers/1/reject", ""), &[(Admin, FORBIDDEN)]),
        (get("/transfers"), &[(Admin, OK), (OwnerNlp, OK), (MemberCv, OK)]),
        (get("/transfers?status=done&quota=nlp"), &[(Admin, OK)]),
        (get("/transfers?status=bogus"), &[(Admin, INVALID)]),
        // Seeing one: either end.
        (get("/transfers/2"), &[(Admin, OK), (MemberCv, NOT_FOUND)]),
        (get("/transfers/1"), &[(OwnerNlp, OK), (MemberCv, OK)]),
        (get("/transfers/999"), &[(Admin, NOT_FOUND)]),
        // Requesting: out of what one owns (#4, by an admin: the owner of
        // nlp cannot see cv, which answers as a quota that does not
        // exist), or more from the parent of what one owns (#5).
        (form("/transfers", &gpu_form("nlp", "cv", "1")), &[(OwnerNlp, NOT_FOUND), (Admin, SEE_OTHER)]),
        (form("/transfers", &gpu_form("", "nlp", "1")), &[(OwnerNlp, SEE_OTHER)]),
        (form("/transfers", &gpu_form("nlp", "cv", "100")), &[(Admin, BAD)]),
        (form("/transfers", &gpu_form("nlp", "cv", "lots")), &[(OwnerNlp, INVALID)]),
        (form("/transfers", &gpu_form("cv", "nlp", "1")), &[(OwnerNlp, NOT_FOUND)]),
        (form("/transfers", &gpu_form("", "cv", "1")), &[(OwnerNlp, NOT_FOUND)]),
        (form("/transfers", &gpu_form("cv", "nlp", "1")), &[(MemberCv, FORBIDDEN)]),
        (form("/transfers", &gpu_form("", "cv", "1")), &[(MemberCv, FORBIDDEN)]),
        // Deciding: admins and owners where both ends meet.
        (form("/transfers/1/approve", ""), &[(MemberCv, FORBIDDEN), (OwnerNlp, FORBIDDEN)]),
        (form("/transfers/1/reject", ""), &[(OwnerNlp, FORBIDDEN)]),
        (form("/transfers/2/approve", ""), &[(MemberCv, NOT_FOUND)]),
        (form("/transfers/5/approve", ""), &[(OwnerNlp, FORBIDDEN)]),
        (form("/transfers/2/approve", "confirm=yes"), &[(OwnerNlp, SEE_OTHER), (OwnerNlp, CONFLICT)]),
        (form("/transfers/3/reject", "note=not now"), &[(Admin, SEE_OTHER)]),
        (form("/transfers/3/approve", "confirm=yes"), &[(Admin, CONFLICT)]),
        (form("/transfers/1/approve", ""), &[(Admin, INVALID)]),
        (form("/transfers/1/approve", "confirm=yes"), &[(Admin, SEE_OTHER)]),
        (form("/transfers/999/approve", ""), &[(Admin, NOT_FOUND)]),
        // Transfers through the JSON API, the same rules.
        (api_get(t), &[(Anonymous, UNAUTH)]),
        (api_post(t, ask(Some("nlp"), "cv", "1")), &[(Anonymous, UNAUTH)]),
        (api_get("/api/v1/transfers/1"), &[(Anonymous, UNAUTH)]),
        (api_post("/api/v1/transfers/4/approve", None), &[(Anonymous, UNAUTH)]),
        (api_post("/api/v1/transfers/4/reject", None), &[(Anonymous, UNAUTH)]),
        (api_get(t), &[(AdminToken, OK), (Admin, OK), (OwnerNlp, OK)]),
        (api_get("/api/v1/transfers?status=done,requested"), &[(MemberCv, OK)]),
        (api_get("/api/v1/transfers?status=nope"), &[(MemberCv, BAD)]),
        // A page of transfers holds 1 to 1,000, as the other lists.
        (api_get("/api/v1/transfers?limit=-1"), &[(AdminToken, BAD), (MemberCv, BAD)]),
        (api_get("/api/v1/transfers?limit=0"), &[(Admin, BAD)]),
        (api_get("/api/v1/transfers?limit=1000000000"), &[(AdminToken, BAD), (OwnerNlp, BAD)]),
        (api_get("/api/v1/transfers?limit=1000"), &[(AdminToken, OK), (MemberCv, OK)]),
        (api_get("/api/v1/transfers/1"), &[(OwnerNlp, OK), (MemberCv, OK)]),
        (api_get("/api/v1/transfers/2"), &[(MemberCv, NOT_FOUND), (AdminToken, OK)]),
        (api_post(t, ask(Some("nlp"), "cv", "1")), &[(OwnerNlp, NOT_FOUND)]),
        (api_post(t, ask(Some("nlp"), "nope", "1")), &[(OwnerNlp, NOT_FOUND)]),
        (api_post(t, ask(Some("nlp"), "cv", "1")), &[(AdminToken, CREATED)]),
        (api_post(t, ask(Some("nlp"), "cv", "100")), &[(AdminToken, BAD)]),
        (api_post(t, ask(None, "nlp", "100")), &[(OwnerNlp, FORBIDDEN)]),
        (api_post(t, ask(Some("cv"), "nlp", "1")), &[(OwnerNlp, NOT_FOUND)]),
        (api_post(t, Some(json!({"to": "cv"}))), &[(OwnerNlp, BAD)]),
        (api_post(t, ask(Some("cv"), "nlp", "1")), &[(MemberCv, FORBIDDEN)]),
        (api_post("/api/v1/transfers/6/approve", None), &[(MemberCv, FORBIDDEN), (OwnerNlp, FORBIDDEN)]),
        (api_post("/api/v1/transfers/6/reject", None), &[(OwnerNlp, FORBIDDEN)]),
        (api_post("/api/v1/transfers/2/reject", None), &[(MemberCv, NOT_FOUND)]),
        (api_post("/api/v1/transfers/6/approve", None), &[(AdminToken, OK), (AdminToken, CONFLICT)]),
        (api_post("/api/v1/transfers/6/reject", None), &[(AdminToken, CONFLICT)]),
        (api_post("/api/v1/transfers/4/reject", Some(json!({"note": "no"}))), &[(Admin, OK)]),
        (api_post("/api/v1/transfers/999/approve", None), &[(AdminToken, NOT_FOUND)]),
        // Quota pages: reading, by role; invisible quotas do not exist.
        (get("/quotas/nlp"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK), (MemberCv, NOT_FOUND)]),
        (get("/quotas/nlp/edit"), &[(Anonymous, SEE_OTHER)]),
        (get("/quotas/nlp/children/new"), &[(Anonymous, SEE_OTHER)]),
        (get("/tree?q=nlp&filter=hot"), &[(Anonymous, SEE_OTHER), (Admin, OK)]),
        (form("/quotas/nlp/children/new", "name=x"), &[(Anonymous, FORBIDDEN)]),
        (get("/quotas/ghost"), &[(Admin, NOT_FOUND)]),
        (get("/tree?under=nlp&depth=0"), &[(Admin, OK)]),
        (get("/quotas/nlp-a"), &[(OwnerNlp, OK)]),
        (get("/quotas/cv"), &[(OwnerNlp, NOT_FOUND), (MemberCv, OK)]),
        (get("/quotas/ai"), &[(OwnerNlp, NOT_FOUND)]),
        (get("/tree?under=cv"), &[(OwnerNlp, OK)]),
        (get("/tree"), &[(MemberCv, OK)]),
        // What the islands fetch: the tree's rows under a quota (as the
        // quota page: invisible is not found), the overview's live parts.
        (get("/tree/rows?parent=nlp&at=1"), &[(Anonymous, SEE_OTHER), (Admin, OK), (OwnerNlp, OK), (MemberCv, NOT_FOUND)]),
        (get("/tree/rows?parent=cv&at=1"), &[(OwnerNlp, NOT_FOUND), (MemberCv, OK)]),
        (api_get("/api/v1/live/overview"), &[(Anonymous, UNAUTH), (AdminToken, OK), (Admin, OK), (OwnerNlp, OK), (MemberCv, OK)]),
        (get("/alerts?sort=since&dir=asc"), &[(Anonymous, SEE_OTHER), (MemberCv, OK)]),
        (get("/alerts?sort=bogus"), &[(MemberCv, INVALID)]),
        // Inviting onto a subtree (§6, docs/semantics.md): an owner gives `member` on
        // what it owns and `owner` strictly below it; members give nothing.
        (form("/quotas/nlp/members", "username=bob&role=member"), &[(Anonymous, FORBIDDEN)]),
        (no_csrf("/quotas/nlp/members", "username=bob&role=member"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/nlp/members", "username=bob&role=member"), &[(OwnerNlp, SEE_OTHER)]),
        (form("/quotas/nlp/members", "username=bob&role=owner"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/nlp-a/members", "username=bob&role=owner"), &[(OwnerNlp, SEE_OTHER)]),
        (form("/quotas/nlp/members", "username=nobody&role=member"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/nlp/members", "username=bob&role=king"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/cv/members", "username=alice&role=member"), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (form("/quotas/nlp-a/members/delete", "username=bob"), &[(OwnerNlp, SEE_OTHER)]),
        (form("/quotas/nlp/members/delete", "username=bob"), &[(OwnerNlp, SEE_OTHER), (OwnerNlp, NOT_FOUND)]),
        (form("/quotas/nlp/members/delete", "username=alice"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/cv/members/delete", "username=bob"), &[(MemberCv, FORBIDDEN)]),
        (form("/quotas/cv/members", "username=alice&role=owner"), &[(Admin, SEE_OTHER)]),
        (form("/quotas/cv/members/delete", "username=alice"), &[(Admin, SEE_OTHER)]),
        // The forms: children by owners of the parent or an ancestor; a
        // spec by owners of an ancestor, never the quota's own.
        (get("/quotas/nlp/children/new"), &[(Admin, OK), (OwnerNlp, OK)]),
        (get("/quotas/ghost/children/new"), &[(Admin, NOT_FOUND)]),
        (get("/quotas/nlp-a/children/new"), &[(OwnerNlp, OK)]),
        (get("/quotas/cv/children/new"), &[(OwnerNlp, FORBIDDEN), (MemberCv, FORBIDDEN)]),
        (get("/quotas/ai/children/new"), &[(OwnerNlp, FORBIDDEN)]),
        (get("/quotas/nlp/edit"), &[(Admin, OK), (OwnerNlp, FORBIDDEN)]),
        (get("/quotas/nlp-a/edit"), &[(OwnerNlp, OK)]),
        (get("/quotas/cv/edit"), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (form("/quotas/nlp/children/new", "name=nlp-t&hard:requests.nvidia.com/gpu=1&hard:pods=2"), &[(OwnerNlp, SEE_OTHER)]),
        (get("/quotas/nlp-t"), &[(OwnerNlp, OK)]),
        (form("/quotas/nlp/children/new", "name=nlp-u&hard:requests.nvidia.com/gpu=7&hard:pods=2"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/nlp/children/new", "name=nlp-u&hard:pods=2"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/nlp/children/new", "name=nlp-u&hard:requests.nvidia.com/gpu=lots&hard:pods=2"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/nlp/children/new", "name=nlp-t&hard:requests.nvidia.com/gpu=1&hard:pods=2"), &[(OwnerNlp, CONFLICT)]),
        (form("/quotas/cv/children/new", "name=cv-t&hard:requests.nvidia.com/gpu=1&hard:pods=2"), &[(OwnerNlp, FORBIDDEN), (MemberCv, FORBIDDEN)]),
        (no_csrf("/quotas/nlp/children/new", "name=nlp-v&hard:requests.nvidia.com/gpu=1&hard:pods=2"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/nlp/edit", "hard:requests.nvidia.com/gpu=9&hard:pods=40"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/nlp-t/edit", "hard:requests.nvidia.com/gpu=2&hard:pods=2"), &[(OwnerNlp, SEE_OTHER)]),
        (form("/quotas/nlp-t/edit", "hard:requests.nvidia.com/gpu=20&hard:pods=2"), &[(OwnerNlp, INVALID)]),
        (form("/quotas/cv/edit", "hard:requests.nvidia.com/gpu=1&hard:pods=2"), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (no_csrf("/quotas/nlp/edit", "hard:requests.nvidia.com/gpu=8&hard:pods=40"), &[(Admin, FORBIDDEN)]),
        // Deleting: leaves, confirmed, by an ancestor's owner.
        (form("/quotas/nlp-t/delete", ""), &[(OwnerNlp, INVALID)]),
        (form("/quotas/nlp/delete", "confirm=yes"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/cv/delete", "confirm=yes"), &[(OwnerNlp, NOT_FOUND), (MemberCv, FORBIDDEN)]),
        (form("/quotas/ai/delete", "confirm=yes"), &[(Admin, INVALID)]),
        (no_csrf("/quotas/nlp-t/delete", "confirm=yes"), &[(OwnerNlp, FORBIDDEN)]),
        (form("/quotas/nlp-t/delete", "confirm=yes"), &[(OwnerNlp, SEE_OTHER)]),
        (get("/quotas/nlp-t"), &[(OwnerNlp, NOT_FOUND)]),
        // Logging out.
        (form("/logout", ""), &[(MemberCv, SEE_OTHER)]),
        (get("/"), &[(MemberCv, SEE_OTHER)]),
    ];
    let mut wrong = Vec::new();
    let mut checks = 0;
    for (call, expected) in &rows {
        for (who, want) in expected.iter() {
            checks += 1;
            let (got, body) = run(s, &o, *who, call).await;
            if got != *want {
                let body: String = body.chars().take(300).collect();
                wrong.push(format!("{who:?} {call:?}: want {want}, got {got}: {body}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} checks wrong:\n{}",
        wrong.len(),
        checks,
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

on_both!(each_route_answers_each_role_as_its_row_says);
