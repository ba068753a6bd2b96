//! Who is asking, and proving it: bearer tokens and sessions into a
//! [`Principal`]; login (rate limited), logout; CSRF on every state-changing
//! request made with a session cookie.
//!
//! For handlers:
//! - JSON API: take a [`Principal`] argument. The API router's
//!   [`authenticate`] layer has already answered 401 when there is none.
//! - Pages: take a [`Viewer`]: the session's principal and CSRF token, or a
//!   303 redirect to `/login` when nobody is logged in.

use crate::authz::{Credential, Principal};
use crate::edge::limits::{Standing, BUSY_RETRY_SECS, MAX_PASSWORD_BYTES};
use crate::edge::{ApiError, AppState, API_BODY_LIMIT};
use crate::store::accounts::User;
use crate::store::sessions::{CREDENTIAL_GEN_KEY, USER_ID_KEY};
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use app::layout::Flash;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use std::net::SocketAddr;
use tower_sessions::Session;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "bizrq_session";
/// The session key of the CSRF token; forms carry it as the field `csrf`,
/// scripts as the header `X-CSRF-Token`.
pub const CSRF_KEY: &str = "csrf";
pub const CSRF_FIELD: &str = "csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";
const FLASH_KEY: &str = "flash";
const SEEN_KEY: &str = "seen_ms";
/// A session in use is written (and so extended) at most this often.
const SEEN_EVERY_MS: i64 = 5 * 60_000;

/// Failed logins allowed per username and client address within the window;
/// the next attempt is refused (429) without checking the password.
pub const LOGIN_MAX_FAILURES: usize = 5;
pub const LOGIN_WINDOW_MS: i64 = 15 * 60_000;
/// The one message for an unknown user, a wrong password and a disabled
/// account, so a login attempt reveals nothing.
pub const LOGIN_FAILED: &str = "Wrong username or password.";

/// Argon2id hash (PHC string) of a password, off the async threads. For
/// start-up only (bootstrap admin, demo); requests use the bounded
/// [`crate::edge::limits::PasswordHasher`] of the portal.
pub async fn hash_password(password: String) -> anyhow::Result<String> {
    Ok(tokio::task::spawn_blocking(move || password_auth::generate_hash(password)).await?)
}

/// A new random token: CSRF tokens and personal API tokens.
pub fn random_token(prefix: &str) -> String {
    format!("{prefix}{}", crate::util::hex(&rand::random::<[u8; 24]>()))
}

/// The principal of a user (with its bindings); None when disabled.
pub async fn principal_of(
    sql: &SqlStore,
    user: User,
    via: Credential,
) -> Result<Option<Principal>, StoreError> {
    if user.disabled {
        return Ok(None);
    }
    Ok(Some(Principal {
        bindings: sql.bindings_of(user.id).await?,
        user_id: Some(user.id),
        username: user.username,
        is_admin: user.is_admin,
        via,
    }))
}

/// A bearer token: the admin token, or a live personal token of an
/// enabled user.
async fn from_bearer(app: &AppState, token: &str) -> Result<Option<Principal>, StoreError> {
    let h = crate::util::sha256_hex(token);
    if crate::util::constant_time_eq(h.as_bytes(), app.token_sha256.as_bytes()) {
        return Ok(Some(Principal::admin_token()));
    }
    let sql = &app.portal.sql;
    let now = crate::util::now_ms();
    let Some(t) = sql.live_token(&h, now).await? else {
        return Ok(None);
    };
    let Some(user) = sql.user_by_id(t.user_id).await? else {
        return Ok(None);
    };
    if local_account_off(app, &user) {
        return Ok(None);
    }
    let mut p = principal_of(sql, user, Credential::Token(t.id)).await?;
    if let (Some(principal), Some(scope)) = (&p, &t.scope) {
        p = Some(scoped_principal(app, principal, scope).await);
    }
    if p.is_some() {
        sql.touch_token(t.id, now).await?;
    }
    Ok(p)
}

/// A token's principal held to its scope (`authz::scoped`).
async fn scoped_principal(app: &AppState, p: &Principal, scope: &[String]) -> Principal {
    let tree = lineage_tree(app, scope, p).await;
    crate::authz::scoped(p, scope, &tree)
}

/// The tree of the lines above `names` and above `p`'s bindings, read one
/// quota at a time from the portal's connections (a line is short; a
/// corrupt one ends at `quota::tree::MAX_DEPTH` steps a name).
pub async fn lineage_tree(app: &AppState, names: &[String], p: &Principal) -> crate::authz::Tree {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut todo: Vec<String> = names
        .iter()
        .cloned()
        .chain(p.bindings.iter().map(|b| b.quota.clone()))
        .collect();
    let budget = quota::tree::MAX_DEPTH * todo.len().max(1);
    let mut steps = 0;
    while let Some(name) = todo.pop() {
        steps += 1;
        if steps > budget {
            break;
        }
        if pairs.iter().any(|(n, _)| *n == name) {
            continue;
        }
        if let Ok(s) = app.service.get_for_view(&name).await {
            let parent = s.quota.spec.parent.clone();
            if !parent.is_empty() {
                todo.push(parent.clone());
            }
            pairs.push((name, parent));
        }
    }
    crate::authz::Tree::new(pairs)
}

/// The session's user, if one is logged in (and still enabled), and the
/// session was made under the user's current credential generation: one
/// signed in with a password replaced since is ended here.
async fn from_session(app: &AppState, session: &Session) -> Result<Option<Principal>, StoreError> {
    let id: Option<i64> = session.get(USER_ID_KEY).await.map_err(session_error)?;
    let Some(id) = id else { return Ok(None) };
    let Some(user) = app.portal.sql.user_by_id(id).await? else {
        return Ok(None);
    };
    if session_generation(session).await? != user.credential_gen {
        tracing::info!(user = %user.username, "a session from before a new password ended");
        session.flush().await.map_err(session_error)?;
        return Ok(None);
    }
    if local_account_off(app, &user) {
        tracing::info!(user = %user.username, "a local account's session ended: passwords are turned off here except for break-glass accounts");
        session.flush().await.map_err(session_error)?;
        return Ok(None);
    }
    principal_of(&app.portal.sql, user, Credential::Session).await
}

/// A local account that `--local-login break-glass` turned off
/// (`Identities::local_account_off`).
fn local_account_off(app: &AppState, user: &crate::store::accounts::User) -> bool {
    app.portal
        .identity
        .as_ref()
        .is_some_and(|ids| ids.local_account_off(user))
}

/// The credential generation a session signed in under (0 for sessions
/// older than generations).
pub async fn session_generation(session: &Session) -> Result<i64, StoreError> {
    let gen: Option<i64> = session
        .get(CREDENTIAL_GEN_KEY)
        .await
        .map_err(session_error)?;
    Ok(gen.unwrap_or(0))
}

fn session_error(e: tower_sessions::session::Error) -> StoreError {
    StoreError::Backend(format!("session: {e}"))
}

/// Who is asking: `Authorization: Bearer` wins (a wrong token is 401 even
/// with a session); otherwise the session cookie.
pub async fn resolve(parts: &Parts, app: &AppState) -> Result<Option<Principal>, ApiError> {
    if let Some(v) = parts.headers.get(header::AUTHORIZATION) {
        let token = v
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized)?;
        return from_bearer(app, token).await.map_err(internal);
    }
    match parts.extensions.get::<Session>() {
        Some(s) => from_session(app, s).await.map_err(internal),
        None => Ok(None),
    }
}

fn internal(e: StoreError) -> ApiError {
    ApiError::Service(e.into())
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        if let Some(p) = parts.extensions.get::<Principal>() {
            return Ok(p.clone());
        }
        let p = resolve(parts, app).await?.ok_or(ApiError::Unauthorized)?;
        parts.extensions.insert(p.clone());
        Ok(p)
    }
}

/// The JSON API's guard: 401 unless a principal can be resolved, which is
/// then handed to the handler's [`Principal`] argument.
pub async fn authenticate(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    match Principal::from_request_parts(&mut parts, &app).await {
        Ok(_) => next.run(Request::from_parts(parts, body)).await,
        Err(e) => e.into_response(),
    }
}

/// The signed-in user of a page, from the session only, with the CSRF token
/// its forms carry. Nobody logged in: a redirect to the login page.
pub struct Viewer {
    pub principal: Principal,
    pub csrf: String,
    pub session: Session,
    /// Open alerts on the quotas the viewer may see: the nav's badge
    /// counts them, the overview lists them. Read for pages (GET) only; a
    /// form post redirects.
    /// Open alerts the viewer may see that ask for someone now (the badge).
    pub open_alerts: usize,
}

impl Viewer {
    /// What the page frame (`app::layout::Layout`) shows.
    pub fn page(&self) -> app::Viewer {
        app::Viewer {
            username: self.principal.username.clone(),
            is_admin: self.principal.is_admin,
            csrf: self.csrf.clone(),
            open_alerts: self.open_alerts,
        }
    }

    /// Shown on the next page this session renders (after a redirect).
    pub async fn set_flash(&self, flash: Flash) {
        let v = match flash {
            Flash::Ok(t) => ("ok", t),
            Flash::Error(t) => ("error", t),
        };
        if let Err(e) = self.session.insert(FLASH_KEY, v).await {
            tracing::warn!(error = %e, "could not keep a flash message");
        }
    }

    /// The flash message left for this page, once.
    ///
    /// Looked up before it is removed: tower-sessions counts any removal as
    /// a change and writes the session back, and a page view with no flash
    /// must not take a turn on the database's writer beside admissions.
    pub async fn take_flash(&self) -> Option<Flash> {
        let v: Option<(String, String)> = self.session.get(FLASH_KEY).await.ok().flatten();
        if v.is_some() {
            let _ = self.session.remove_value(FLASH_KEY).await;
        }
        v.map(|(kind, text)| match kind.as_str() {
            "ok" => Flash::Ok(text),
            _ => Flash::Error(text),
        })
    }

    /// Admins only: 403 for everyone else.
    pub fn require_admin(&self) -> Result<(), super::PageError> {
        if self.principal.is_admin {
            Ok(())
        } else {
            Err(super::PageError::Forbidden(
                "only admins may use this page".into(),
            ))
        }
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        let to_login = |parts: &Parts| {
            let next = parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            let target = if next == "/" {
                "/login".to_string()
            } else {
                format!(
                    "/login?{}",
                    serde_urlencoded::to_string([("next", next)]).unwrap_or_default()
                )
            };
            Redirect::to(&target).into_response()
        };
        let Some(session) = parts.extensions.get::<Session>().cloned() else {
            return Err(to_login(parts));
        };
        let principal = match from_session(app, &session).await {
            Ok(Some(p)) => p,
            Ok(None) => return Err(to_login(parts)),
            Err(e) => return Err(super::PageError::from(e).into_response()),
        };
        let csrf = csrf_token(&session)
            .await
            .map_err(|e| super::PageError::from(e).into_response())?;
        // Activity extends the session: written at most every few minutes.
        let now = crate::util::now_ms();
        let seen: Option<i64> = session.get(SEEN_KEY).await.ok().flatten();
        if seen.is_none_or(|s| now - s > SEEN_EVERY_MS) {
            let _ = session.insert(SEEN_KEY, now).await;
        }
        // A badge is not worth failing a page for.
        let open_alerts = if parts.method != axum::http::Method::GET {
            0
        } else {
            crate::service::alert_ops::open_count(&app.audited(), &principal)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot count open alerts");
                    0
                })
        };
        Ok(Viewer {
            principal,
            csrf,
            session,
            open_alerts,
        })
    }
}

/// The session's CSRF token, created on first use.
/// An error page shown to someone logged in keeps the navigation: once the
/// handler has answered with one (`super::ErrorPage`), it is drawn again
/// with who is asking. Anonymous callers get it as it was.
pub async fn error_pages_with_navigation(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let session = req.extensions().get::<Session>().cloned();
    let resp = next.run(req).await;
    let (Some(page), Some(session)) = (resp.extensions().get::<super::ErrorPage>(), session) else {
        return resp;
    };
    let page = page.clone();
    let Ok(Some(p)) = from_session(&app, &session).await else {
        return resp;
    };
    let Ok(csrf) = csrf_token(&session).await else {
        return resp;
    };
    // The badge as on every other page (it read 0 on error pages).
    let open_alerts = crate::service::alert_ops::open_count(&app.audited(), &p)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot count open alerts");
            0
        });
    let viewer = app::Viewer {
        username: p.username.clone(),
        is_admin: p.is_admin,
        csrf,
        open_alerts,
    };
    let (mut parts, _) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let html = super::frame::error_page(page.status, page.message, Some(viewer));
    Response::from_parts(parts, axum::body::Body::from(html))
}

///
/// What a page carries is the token masked afresh for each response
/// (`mask_csrf`): pages are sent compressed, and a secret that is the same
/// in every response beside text an attacker can put in the page could be
/// guessed a character at a time from the compressed sizes (BREACH).
pub async fn csrf_token(session: &Session) -> Result<String, StoreError> {
    if let Some(t) = session
        .get::<String>(CSRF_KEY)
        .await
        .map_err(session_error)?
    {
        return Ok(mask_csrf(&t));
    }
    let t = random_token("");
    session.insert(CSRF_KEY, &t).await.map_err(session_error)?;
    Ok(mask_csrf(&t))
}

/// The token as a page carries it: a fresh random pad, then the token's
/// bytes XOR the pad, both in hex. Every response shows different bytes
/// for the same token.
pub fn mask_csrf(token: &str) -> String {
    let t = token.as_bytes();
    let pad: Vec<u8> = (0..t.len()).map(|_| rand::random::<u8>()).collect();
    let masked: Vec<u8> = t.iter().zip(&pad).map(|(a, b)| a ^ b).collect();
    format!("{}{}", crate::util::hex(&pad), crate::util::hex(&masked))
}

/// Whether `given` (masked by `mask_csrf`, or the bare token as pages
/// before masking carried it) is the session's token, in constant time
/// for a given length.
pub fn csrf_matches(expected: &str, given: &str) -> bool {
    let e = expected.as_bytes();
    if given.len() == e.len() * 4 {
        if let Ok(b) = hex::decode(given) {
            let (pad, masked) = b.split_at(e.len());
            let t: Vec<u8> = masked.iter().zip(pad).map(|(a, b)| a ^ b).collect();
            return crate::util::constant_time_eq(e, &t);
        }
    }
    crate::util::constant_time_eq(e, given.as_bytes())
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

/// The largest form read from someone not logged in (a login form is a
/// few hundred bytes).
pub(crate) const ANONYMOUS_FORM_LIMIT: usize = 16 * 1024;

/// CSRF protection for every state-changing request (anything but GET,
/// HEAD, OPTIONS) that relies on the session cookie: the session's token
/// must come back as the form field `csrf` or the header `X-CSRF-Token`,
/// else 403. JSON API calls with a bearer token are exempt (a browser never
/// adds that header on its own), and so are API calls without a logged-in
/// session, which the API's own guard answers with 401.
pub async fn require_csrf(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let api = req.uri().path().starts_with("/api/");
    if api && req.headers().contains_key(header::AUTHORIZATION) {
        return next.run(req).await;
    }
    let session = req.extensions().get::<Session>().cloned();
    let mut expected = match &session {
        Some(s) => s.get::<String>(CSRF_KEY).await.ok().flatten(),
        None => None,
    };
    // The login form's token lives in its own cookie (`LOGIN_COOKIE`).
    let login_form = req.uri().path() == "/login" || req.uri().path() == "/login/oidc";
    let login_cookie_token = if login_form {
        login_token(req.headers())
    } else {
        None
    };
    if expected.is_none() {
        expected = login_cookie_token.clone();
    }
    let logged_in = match &session {
        Some(s) => s.get::<i64>(USER_ID_KEY).await.ok().flatten().is_some(),
        None => false,
    };
    if api && !logged_in {
        return next.run(req).await;
    }
    let mut req = req;
    let mut given = req
        .headers()
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Without a token to compare with, the check fails whatever the body
    // holds: do not read it. A form of someone not logged in is a login.
    if given.is_none() && is_form(req.headers()) && expected.is_some() {
        let limit = if logged_in {
            API_BODY_LIMIT
        } else {
            ANONYMOUS_FORM_LIMIT
        };
        let (parts, body) = req.into_parts();
        let bytes = match axum::body::to_bytes(body, limit).await {
            Ok(b) => b,
            Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response(),
        };
        given = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes)
            .ok()
            .and_then(|fields| {
                fields
                    .into_iter()
                    .find(|(k, _)| k == CSRF_FIELD)
                    .map(|(_, v)| v)
            });
        req = Request::from_parts(parts, axum::body::Body::from(bytes));
    }
    let matches_login_cookie = |g: &str| {
        login_cookie_token
            .as_deref()
            .is_some_and(|t| csrf_matches(t, g))
    };
    match (expected, given) {
        (Some(e), Some(g)) if csrf_matches(&e, &g) || matches_login_cookie(&g) => {
            next.run(req).await
        }
        _ if api => ApiError::Forbidden(
            "missing or wrong X-CSRF-Token header for a session-authenticated request".into(),
        )
        .into_response(),
        _ => super::PageError::Forbidden(
            "This form is stale or was not sent from bizrq (CSRF check failed). Go back, reload the page and try again."
                .into(),
        )
        .into_response(),
    }
}

/// Marks the session and device cookies `Secure` when the request came over HTTPS
/// through a proxy (`X-Forwarded-Proto: https`), even without
/// `--secure-cookies`. A forged header only makes the cookie stricter.
pub async fn secure_cookie_behind_tls(req: Request, next: Next) -> Response {
    let https = req
        .headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("https")
        });
    let mut resp = next.run(req).await;
    if !https {
        return resp;
    }
    let cookies: Vec<HeaderValue> = resp
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    if cookies.is_empty() {
        return resp;
    }
    resp.headers_mut().remove(header::SET_COOKIE);
    for c in cookies {
        let s = c.to_str().unwrap_or("");
        let ours = s.starts_with(&format!("{SESSION_COOKIE}="))
            || s.starts_with(&format!("{DEVICE_COOKIE}="))
            || s.starts_with(&format!("{LOGIN_COOKIE}="));
        let has_secure = s
            .split(';')
            .any(|a| a.trim().eq_ignore_ascii_case("secure"));
        let v = if ours && !has_secure {
            HeaderValue::from_str(&format!("{s}; Secure")).unwrap_or(c)
        } else {
            c
        };
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// The client's address for rate limiting: the peer, or with
/// `--trust-forwarded-for` the last `X-Forwarded-For` entry (the one our
/// ingress added; earlier entries are the client's to forge). A last entry
/// that is no address even without its port or brackets means the peer:
/// never an earlier, forgeable entry.
pub fn client_addr(parts: &Parts, trust_forwarded_for: bool) -> String {
    if trust_forwarded_for {
        let last = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .next_back()
            .and_then(forwarded_ip);
        if let Some(ip) = last {
            return ip.to_string();
        }
    }
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// One `X-Forwarded-For` entry as an address: `ip`, `ip:port`, `[v6]` or
/// `[v6]:port`.
fn forwarded_ip(entry: &str) -> Option<std::net::IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse() {
        return Some(ip);
    }
    if let Ok(sock) = entry.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .and_then(|e| e.parse().ok())
}

/// The longest `next` kept after login.
const MAX_NEXT: usize = 2048;

/// A `next` that stays on this site: a local path starting with a single
/// `/`, with no `//`, no backslash and no control character or whitespace,
/// also once percent-decoded (browsers drop tabs and newlines from a
/// `Location`, so `/\t/evil.example` would be `//evil.example`), and
/// bounded in length. Anything else goes to `/`.
pub fn safe_next(next: Option<&str>) -> String {
    let local = |p: &str| {
        p.starts_with('/')
            && !p.contains("//")
            && !p.contains('\\')
            && !p.chars().any(|c| c.is_control() || c.is_whitespace())
    };
    match next {
        Some(n) if n.len() <= MAX_NEXT && local(n) && local(&percent_decode(n)) => n.into(),
        _ => "/".into(),
    }
}

/// `%XX` sequences decoded (invalid ones kept, `+` kept: a path, not a
/// form), as a browser may; bytes that are not UTF-8 become U+FFFD.
pub fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[derive(Deserialize, Default)]
pub struct LoginQuery {
    next: Option<String>,
}

/// GET /login: the form, its CSRF token in a cookie of its own
/// (`LOGIN_COOKIE`) and, masked, in the form. Nothing is stored: an
/// anonymous client fetching the page in a loop makes no session rows.
pub async fn login_page(
    State(app): State<AppState>,
    session: Session,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
) -> Response {
    if let Ok(Some(_)) = from_session(&app, &session).await {
        return Redirect::to(&safe_next(q.next.as_deref())).into_response();
    }
    let token = login_token(&headers).unwrap_or_else(|| random_token(""));
    let mut r = Html(app::accounts::render_login_page(
        mask_csrf(&token),
        String::new(),
        safe_next(q.next.as_deref()),
        None,
        sign_in_options(&app),
    ))
    .into_response();
    r.headers_mut().append(
        header::SET_COOKIE,
        login_cookie(&token, app.portal.config.secure_cookies),
    );
    r
}

/// How the login page offers to sign in: with the identity provider when
/// one is configured, and passwords for everyone or the break-glass
/// accounts only.
pub fn sign_in_options(app: &AppState) -> app::accounts::SignInOptions {
    match &app.portal.identity {
        Some(ids) => app::accounts::SignInOptions {
            provider: Some(ids.settings.provider.display_name.clone()),
            break_glass_only: ids.settings.local_login == crate::config::LocalLogin::BreakGlass,
        },
        None => app::accounts::SignInOptions::default(),
    }
}

/// The login form's CSRF cookie: sent only to `/login`, HttpOnly,
/// SameSite=Strict, for an hour. The form carries the same token masked
/// (`mask_csrf`); `require_csrf` compares the two. Before sign-in there is
/// no session to keep a token in, and none is made for a page view.
pub const LOGIN_COOKIE: &str = "bizrq_login";
const LOGIN_COOKIE_SECONDS: u32 = 3600;

/// The login form's token from the request's cookies, when well formed.
pub fn login_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(LOGIN_COOKIE)?.strip_prefix('='))
        .find(|t| t.len() == 48 && t.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
}

fn login_cookie(token: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let v = format!(
        "{LOGIN_COOKIE}={token}; Path=/login; Max-Age={LOGIN_COOKIE_SECONDS}; HttpOnly; SameSite=Strict{secure}"
    );
    HeaderValue::from_str(&v).expect("a login cookie is ASCII")
}

#[derive(Deserialize)]
pub struct LoginForm {
    username: String,
    password: String,
    #[serde(default)]
    next: Option<String>,
}

/// POST /login. The attempt's [`Standing`] (a browser that signed in as
/// this user before, the user's usual address, or a stranger) decides which
/// limits it takes; it is then recorded as a failure (so parallel attempts
/// cannot slip past the limit), the password is checked, and a success
/// clears the failures it was counted under, remembers the address and
/// gives the browser a device cookie.
pub async fn login(
    State(app): State<AppState>,
    session: Session,
    parts: Parts,
    Form(f): Form<LoginForm>,
) -> Response {
    match login_inner(&app, &session, &parts, f).await {
        Ok(r) => r,
        Err(e) => super::PageError::from(e).into_response(),
    }
}

async fn login_inner(
    app: &AppState,
    session: &Session,
    parts: &Parts,
    f: LoginForm,
) -> Result<Response, StoreError> {
    let sql = &app.portal.sql;
    let username = f.username.trim().to_lowercase();
    let next = safe_next(f.next.as_deref());
    // Limited and counted by the address's key (IPv6 by /64): rotating
    // through one host's addresses does not make fresh counters.
    let client = crate::edge::limits::address_key(&client_addr(
        parts,
        app.portal.config.trust_forwarded_for,
    ));
    let now = crate::util::now_ms();
    // A username no account can have is not echoed back whole.
    let shown: String = username.chars().take(64).collect();
    let again = |status: StatusCode, flash: Flash, retry_after: Option<u64>| {
        let (username, next) = (shown.clone(), next.clone());
        async move {
            let token = login_token(&parts.headers).unwrap_or_else(|| random_token(""));
            let mut r = (
                status,
                Html(app::accounts::render_login_page(
                    mask_csrf(&token),
                    username,
                    next,
                    Some(flash),
                    sign_in_options(app),
                )),
            )
                .into_response();
            r.headers_mut().append(
                header::SET_COOKIE,
                login_cookie(&token, app.portal.config.secure_cookies),
            );
            if let Some(secs) = retry_after {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            Ok::<_, StoreError>(r)
        }
    };
    // A browser that signed in as this user before: only its holder has
    // the cookie, so it is held to its own failures, not the limits an
    // attacker elsewhere can exhaust.
    let device = device_token(&parts.headers);
    let device_sha = device.as_deref().map(crate::util::sha256_hex);
    let device_user = match &device_sha {
        Some(sha) => sql.device_user(sha, now - DEVICE_TRUST_MS).await?,
        None => None,
    };
    let device_key = device_sha.as_deref().map(device_failure_key);
    let device_is_this_users = match device_user {
        Some(id) => sql
            .user_by_id(id)
            .await?
            .is_some_and(|u| u.username == username),
        None => false,
    };
    let device_failed_too_often = match (&device_key, device_is_this_users) {
        (Some(key), true) => {
            sql.login_failures(&username, key, now - LOGIN_WINDOW_MS)
                .await?
                .len()
                >= LOGIN_MAX_FAILURES
        }
        _ => false,
    };
    let trusted_device = device_is_this_users && !device_failed_too_often;
    // Cheap checks first: the address's bucket, then the lengths, before
    // anything is stored or hashed.
    if !trusted_device {
        if let Err(secs) = app.portal.attempts.attempt(&client, now) {
            tracing::debug!(client = %client, "login refused: too many attempts from this address");
            return again(
                StatusCode::TOO_MANY_REQUESTS,
                Flash::Error(format!(
                    "Too many login attempts from your address. Try again in {secs} seconds."
                )),
                Some(secs),
            )
            .await;
        }
    }
    if f.password.len() > MAX_PASSWORD_BYTES {
        return again(
            StatusCode::UNPROCESSABLE_ENTITY,
            Flash::Error(format!(
                "A password has at most {MAX_PASSWORD_BYTES} bytes."
            )),
            None,
        )
        .await;
    }
    if app
        .portal
        .identity
        .as_ref()
        .is_some_and(|ids| !ids.password_allowed(&username))
    {
        // Nothing to count or hash: no password is taken from this name.
        let provider = sign_in_options(app).provider.unwrap_or_default();
        return again(
            StatusCode::FORBIDDEN,
            Flash::Error(format!(
                "Passwords are turned off here except for break-glass accounts: sign in with {provider}."
            )),
            None,
        )
        .await;
    }
    if !crate::authz::valid_username(&username) {
        // No account has such a name: nothing to record or check.
        return again(
            StatusCode::UNAUTHORIZED,
            Flash::Error(LOGIN_FAILED.into()),
            None,
        )
        .await;
    }
    let user = sql.user_by_name(&username).await?;
    let usual_address = match (&user, trusted_device) {
        (Some(u), false) => {
            sql.is_usual_address(u.id, &client, now - USUAL_ADDRESS_MS)
                .await?
        }
        _ => false,
    };
    let standing = Standing::of(device_is_this_users, device_failed_too_often, usual_address);
    if standing.takes_username_bucket() {
        if let Err(secs) = app.portal.attempts.attempt_username(&username, now) {
            tracing::warn!(username = %username, "login refused: too many attempts on this username");
            return again(
                StatusCode::TOO_MANY_REQUESTS,
                Flash::Error(format!(
                    "Too many login attempts for this username. Try again in {secs} seconds."
                )),
                Some(secs),
            )
            .await;
        }
    }
    // Failures are counted per username and client: the device for a
    // trusted browser, else the address.
    let counted_as = match (standing, &device_key) {
        (Standing::Device, Some(key)) => key.as_str(),
        _ => client.as_str(),
    };
    sql.add_login_failure(&username, counted_as, now).await?;
    let recent = sql
        .login_failures(&username, counted_as, now - LOGIN_WINDOW_MS)
        .await?;
    if recent.len() > LOGIN_MAX_FAILURES {
        let oldest = recent.first().copied().unwrap_or(now);
        let minutes = ((oldest + LOGIN_WINDOW_MS - now).max(0) + 59_999) / 60_000;
        tracing::warn!(username = %username, client = %client, "login refused: too many failures");
        return again(
            StatusCode::TOO_MANY_REQUESTS,
            Flash::Error(format!(
                "Too many failed logins for this username from your address. Try again in {} minute{}.",
                minutes.max(1),
                if minutes > 1 { "s" } else { "" }
            )),
            Some((LOGIN_WINDOW_MS / 1000) as u64),
        )
        .await;
    }
    let ok = match app
        .portal
        .hasher
        .verify(f.password, user.as_ref().map(|u| u.password_hash.clone()))
        .await
    {
        Ok(ok) => ok,
        Err(busy) => {
            // Not the user's fault: this attempt does not count.
            sql.clear_login_failure(&username, counted_as, now).await?;
            return again(
                StatusCode::SERVICE_UNAVAILABLE,
                Flash::Error(format!("{busy}.")),
                Some(BUSY_RETRY_SECS),
            )
            .await;
        }
    };
    let user = user.filter(|u| ok && !u.disabled);
    let Some(user) = user else {
        return again(
            StatusCode::UNAUTHORIZED,
            Flash::Error(LOGIN_FAILED.into()),
            None,
        )
        .await;
    };
    sql.clear_login_failures(&username, counted_as).await?;
    if counted_as != client {
        sql.clear_login_failures(&username, &client).await?;
    }
    // This address and this browser are the user's from now on.
    sql.remember_address(user.id, &client, now).await?;
    let new_device = match (standing, device_sha) {
        (Standing::Device, Some(sha)) => {
            sql.remember_device(user.id, &sha, now).await?;
            None
        }
        _ => {
            let token = random_token(DEVICE_TOKEN_PREFIX);
            sql.remember_device(user.id, &crate::util::sha256_hex(&token), now)
                .await?;
            Some(token)
        }
    };
    begin_session(session, &user, now).await?;
    let mut r = Redirect::to(&next).into_response();
    if let Some(token) = new_device {
        r.headers_mut().append(
            header::SET_COOKIE,
            device_cookie(&token, app.portal.config.secure_cookies),
        );
    }
    Ok(r)
}

/// Makes `session` the signed-in session of `user`: a new id (no
/// fixation), the user, the credential generation, a new CSRF token; it is
/// stored only if the user still has the password hash seen here and is
/// enabled (`store::sessions`), so a sign-in that raced a new password or
/// a disabling leaves nothing behind.
pub async fn begin_session(session: &Session, user: &User, now: i64) -> Result<(), StoreError> {
    session.cycle_id().await.map_err(session_error)?;
    session
        .insert(USER_ID_KEY, user.id)
        .await
        .map_err(session_error)?;
    session
        .insert(CREDENTIAL_GEN_KEY, user.credential_gen)
        .await
        .map_err(session_error)?;
    session
        .insert(CSRF_KEY, random_token(""))
        .await
        .map_err(session_error)?;
    session.insert(SEEN_KEY, now).await.map_err(session_error)?;
    session
        .insert(
            crate::store::sessions::PASSWORD_HASH_KEY,
            user.password_hash.clone(),
        )
        .await
        .map_err(session_error)?;
    Ok(())
}

/// The cookie of a browser that signed in before: `bzd_` and 192 random
/// bits; only its SHA-256 is stored (`login_devices`).
pub const DEVICE_COOKIE: &str = "bizrq_device";
const DEVICE_TOKEN_PREFIX: &str = "bzd_";
/// A browser is trusted this long after it last signed in.
pub const DEVICE_TRUST_MS: i64 = 90 * 24 * 3_600_000;
/// An address is usual this long after the user last signed in from it.
pub const USUAL_ADDRESS_MS: i64 = 30 * 24 * 3_600_000;

/// The device token a request's cookies carry, if it has the shape of one
/// (anything else is not looked up).
pub fn device_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(DEVICE_COOKIE)?.strip_prefix('='))
        .find(|t| {
            t.strip_prefix(DEVICE_TOKEN_PREFIX)
                .is_some_and(|h| h.len() == 48 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .map(str::to_string)
}

/// The key a trusted browser's failures are counted under, beside the
/// address keys in `login_failures`.
fn device_failure_key(sha: &str) -> String {
    format!("device:{}", &sha[..sha.len().min(32)])
}

/// The `Set-Cookie` of a browser's device token: sent only to `/login`,
/// HttpOnly, SameSite=Strict, kept as long as it is trusted.
pub fn device_cookie(token: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let v = format!(
        "{DEVICE_COOKIE}={token}; Path=/login; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        DEVICE_TRUST_MS / 1000
    );
    HeaderValue::from_str(&v).expect("a device cookie is ASCII")
}

/// The session key of the ID token a sign-in through the identity
/// provider received: the hint of RP-initiated logout.
pub const ID_TOKEN_KEY: &str = "oidc_id_token";

/// The longest ID token sent back as `id_token_hint` at logout.
const MAX_LOGOUT_HINT: usize = 4096;

/// POST /logout: the session is deleted, the cookie removed. A session
/// signed in through the identity provider is then ended there too
/// (RP-initiated logout) when the provider has an end-session endpoint;
/// otherwise, and for passwords, back to the login page.
pub async fn logout(State(app): State<AppState>, session: Session) -> Response {
    let id_token: Option<String> = session.get(ID_TOKEN_KEY).await.ok().flatten();
    if let Err(e) = session.flush().await {
        tracing::warn!(error = %e, "could not delete a session at logout");
    }
    let end_session = match (&app.portal.identity, &id_token) {
        // The discovery document as cached (read again if missing, as
        // after a start whose discovery failed); without it the sign-in at
        // the provider cannot be ended, and the log says so.
        (Some(ids), Some(t)) => match ids.provider.metadata().await {
            Ok(m) => m.end_session_endpoint.as_ref().map(|endpoint| {
                let s = &ids.settings.provider;
                // A large ID token (many groups) would make a URL some
                // providers refuse: the client id alone names the sign-in.
                let hint = (t.len() <= MAX_LOGOUT_HINT).then_some(t.as_str());
                crate::oidc::flow::end_session_url(
                    endpoint,
                    hint,
                    &s.client_id,
                    &s.post_logout_redirect_uri,
                )
            }),
            Err(e) => {
                tracing::warn!(error = %e, "logged out of bizrq only: the identity provider's discovery failed, so its sign-in was not ended");
                None
            }
        },
        _ => None,
    };
    Redirect::to(end_session.as_deref().unwrap_or("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(forwarded: &[&str]) -> Parts {
        let mut req = axum::http::Request::builder();
        for f in forwarded {
            req = req.header("x-forwarded-for", *f);
        }
        let (mut parts, ()) = req.body(()).unwrap().into_parts();
        parts
            .extensions
            .insert(ConnectInfo(SocketAddr::from(([10, 9, 9, 9], 4000))));
        parts
    }

    #[test]
    fn the_last_forwarded_entry_counts_with_or_without_its_port() {
        for (header, client) in [
            ("1.1.1.1, 10.0.0.7", "10.0.0.7"),
            ("1.1.1.1, 10.0.0.7:5000", "10.0.0.7"),
            ("1.1.1.1, [2001:db8::7]", "2001:db8::7"),
            ("1.1.1.1, [2001:db8::7]:5000", "2001:db8::7"),
            ("1.1.1.1,2001:db8::8", "2001:db8::8"),
        ] {
            assert_eq!(client_addr(&parts(&[header]), true), client, "{header}");
        }
        assert_eq!(
            client_addr(&parts(&["1.1.1.1", "10.0.0.7"]), true),
            "10.0.0.7",
            "the last of several headers"
        );
    }

    #[test]
    fn an_unparsable_last_forwarded_entry_means_the_peer_not_a_forged_entry() {
        for header in ["1.1.1.1, not-an-address", "1.1.1.1, ", "1.1.1.1, [10.0.0.7"] {
            assert_eq!(client_addr(&parts(&[header]), true), "10.9.9.9", "{header}");
        }
        assert_eq!(client_addr(&parts(&["1.1.1.1"]), false), "10.9.9.9");
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        for (raw, decoded) in [
            ("/a%2Fb%2f", "/a/b/"),
            ("%41", "A"),
            ("a+b", "a+b"),
            ("%", "%"),
            ("%4", "%4"),
            ("%zz%4g", "%zz%4g"),
            ("%%41", "%A"),
            ("%E2%82%AC", "€"),
            ("%FF", "\u{FFFD}"),
            ("/%09x%0A", "/\tx\n"),
        ] {
            assert_eq!(percent_decode(raw), decoded, "{raw}");
        }
        assert_eq!(safe_next(Some("/%2F%2Fevil.example")), "/");
        assert_eq!(safe_next(Some("/quotas/a%2Bb")), "/quotas/a%2Bb");
    }
}
