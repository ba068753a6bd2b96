//! Sign-in with the company's identity provider: the authorization code
//! flow with PKCE, as pages.
//!
//! 1. `POST /login/oidc` (the login page's button, CSRF-checked with the
//!    login form's cookie; limited per client address like a login):
//!    four secrets are drawn (`oidc::flow`); a row keeps the digests of the
//!    state and of a browser cookie, the nonce and the verifier; the
//!    browser gets the cookie `bizrq_oidc` (HttpOnly, SameSite=Lax — it
//!    must come back on the provider's redirect —, sent to `/login/oidc/`
//!    only, ten minutes) and a 303 to the provider.
//! 2. `GET /login/oidc/callback?code&state`: the flow's row is taken
//!    (deleted as it is read: a replayed callback finds none), the cookie
//!    must be the one this browser got (a callback carried into another
//!    browser is refused), the code is redeemed with the verifier, the ID
//!    token checked (signature, issuer, audience, times, nonce) and taken
//!    once (`oidc_seen_tokens`: the same token never signs in twice, in
//!    any session). Then the person becomes a user (`identity`), the
//!    session begins as a password login's does, and a small page moves
//!    the browser on (the SameSite=Strict session cookie is not sent on a
//!    redirect that started at the provider).
//!
//! Whatever fails says so on the login page, in words, with a status that
//! is not 500 (503 for a provider that cannot be reached, 502 for one that
//! answers nonsense, 400 for a broken or replayed callback, 401 for a token
//! refused, 403 for a person bizrq cannot let in), and in the log.

use super::auth::{
    begin_session, client_addr, login_token, mask_csrf, random_token, safe_next, sign_in_options,
    ID_TOKEN_KEY,
};
use crate::edge::AppState;
use crate::identity::{Identities, SignInError};
use crate::oidc::flow::{self, Secrets};
use crate::oidc::provider::ProviderError;
use crate::store::identity::Flow;
use app::layout::Flash;
use axum::extract::{Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use std::sync::Arc;
use tower_sessions::Session;

/// The browser's cookie of a sign-in under way.
pub const FLOW_COOKIE: &str = "bizrq_oidc";
/// A sign-in must come back within this long.
pub const FLOW_TTL_MS: i64 = 10 * 60_000;
/// Sign-ins under way at once (started within [`FLOW_TTL_MS`]); beyond it
/// the oldest are forgotten, so anonymous clients can neither grow the
/// table nor lock people out of signing in.
pub const MAX_FLOWS: i64 = 10_000;
/// The longest `code`, `state` or error text read from a callback.
const MAX_PARAM: usize = 2048;

fn identities(app: &AppState) -> Option<Arc<Identities>> {
    app.portal.identity.clone()
}

/// The login page again with a message, at `status`.
fn login_again(
    app: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    message: String,
) -> Response {
    let token = login_token(headers).unwrap_or_else(|| random_token(""));
    let mut r = (
        status,
        Html(app::accounts::render_login_page(
            mask_csrf(&token),
            String::new(),
            "/".into(),
            Some(Flash::Error(message)),
            sign_in_options(app),
        )),
    )
        .into_response();
    let secure = if app.portal.config.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{}={token}; Path=/login; Max-Age=3600; HttpOnly; SameSite=Strict{secure}",
        super::auth::LOGIN_COOKIE
    )) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// A provider's failure as the page says it, and its status.
fn provider_failure(name: &str, e: &ProviderError) -> (StatusCode, String) {
    match e {
        ProviderError::Unreachable { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{name} cannot be reached right now, so bizrq cannot sign you in with it. Try again in a minute; if it lasts, tell your bizrq admins. ({e})"),
        ),
        ProviderError::BadAnswer { .. } | ProviderError::Misconfigured(_) => (
            StatusCode::BAD_GATEWAY,
            format!("bizrq cannot sign you in with {name}: {e}. Tell your bizrq admins."),
        ),
        ProviderError::Refused { error, .. } if error == "invalid_grant" => (
            StatusCode::BAD_REQUEST,
            format!("{name} refused this sign-in's code (it was used already, has expired, or was not issued for this sign-in). Sign in again."),
        ),
        ProviderError::Refused { .. } => (
            StatusCode::BAD_GATEWAY,
            format!("{name} refused to finish the sign-in: {e}. Tell your bizrq admins if it happens again."),
        ),
        ProviderError::Token(_) | ProviderError::Claims(_) => (
            StatusCode::UNAUTHORIZED,
            format!("bizrq did not accept what {name} sent: {e}. Sign in again."),
        ),
    }
}

#[derive(Deserialize, Default)]
pub struct StartForm {
    #[serde(default)]
    next: Option<String>,
}

/// The flow cookie's name: behind HTTPS with the `__Host-` prefix, so a
/// sibling subdomain cannot set one of its own into the browser (a
/// sign-in of its own finished in someone else's browser).
fn flow_cookie_name(secure: bool) -> String {
    if secure {
        format!("__Host-{FLOW_COOKIE}")
    } else {
        FLOW_COOKIE.to_string()
    }
}

fn flow_cookie(value: &str, max_age: i64, secure: bool) -> HeaderValue {
    let name = flow_cookie_name(secure);
    // A `__Host-` cookie must have `Path=/`.
    let (path, secure) = if secure {
        ("/", "; Secure")
    } else {
        ("/login/oidc/", "")
    };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
    ))
    .expect("a flow cookie is ASCII")
}

/// POST /login/oidc: a sign-in starts; 303 to the provider.
pub async fn start(
    State(app): State<AppState>,
    parts: Parts,
    Form(f): Form<StartForm>,
) -> Response {
    let Some(ids) = identities(&app) else {
        return super::PageError::NotFound(
            "sign-in with an identity provider is not configured here".into(),
        )
        .into_response();
    };
    let name = ids.settings.provider.display_name.clone();
    let client = crate::edge::limits::address_key(&client_addr(
        &parts,
        app.portal.config.trust_forwarded_for,
    ));
    let now = crate::util::now_ms();
    if let Err(secs) = app.portal.attempts.attempt(&client, now) {
        let mut r = login_again(
            &app,
            &parts.headers,
            StatusCode::TOO_MANY_REQUESTS,
            format!("Too many sign-in attempts from your address. Try again in {secs} seconds."),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    let sql = &app.portal.sql;
    // At the cap, the oldest sign-ins under way make room: anonymous
    // clients can fill the table but never lock people out of it.
    match sql.flows_since(now - FLOW_TTL_MS).await {
        Ok(n) if n >= MAX_FLOWS => match sql.evict_oldest_flows(MAX_FLOWS).await {
            Ok(gone) => {
                tracing::warn!(
                    flows = n,
                    evicted = gone,
                    "too many sign-ins under way: the oldest were forgotten"
                )
            }
            Err(e) => return super::PageError::from(e).into_response(),
        },
        Ok(_) => {}
        Err(e) => return super::PageError::from(e).into_response(),
    }
    let meta = match ids.provider.metadata_now().await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(issuer = %ids.issuer(), error = %e, "sign-in not started: the identity provider failed");
            let (status, message) = provider_failure(&name, &e);
            return login_again(&app, &parts.headers, status, message);
        }
    };
    let secrets = Secrets::generate();
    let row = Flow {
        state_sha256: flow::digest(&secrets.state),
        browser_sha256: flow::digest(&secrets.browser),
        nonce: secrets.nonce.clone(),
        verifier: secrets.verifier.clone(),
        next_path: safe_next(f.next.as_deref()),
        created_at_ms: now,
    };
    if let Err(e) = sql.insert_flow(&row).await {
        return super::PageError::from(e).into_response();
    }
    let s = &ids.settings.provider;
    let url = flow::Authorize {
        endpoint: &meta.authorization_endpoint,
        client_id: &s.client_id,
        redirect_uri: &s.redirect_uri,
        scopes: &s.scopes,
        secrets: &secrets,
    }
    .url();
    let mut r = Redirect::to(&url).into_response();
    r.headers_mut().append(
        header::SET_COOKIE,
        flow_cookie(
            &secrets.browser,
            FLOW_TTL_MS / 1000,
            app.portal.config.secure_cookies,
        ),
    );
    r
}

#[derive(Deserialize, Default)]
pub struct Callback {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
}

/// The browser's flow cookie, if it has the shape of one.
fn browser_cookie(headers: &HeaderMap, secure: bool) -> Option<String> {
    let name = flow_cookie_name(secure);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(name.as_str())?.strip_prefix('='))
        .find(|t| flow::is_secret(t))
        .map(str::to_string)
}

/// Text from the provider shown on a page: no control characters, bounded.
fn shown(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(300).collect()
}

/// GET /login/oidc/callback: the provider sends the browser back.
pub async fn callback(
    State(app): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let Some(ids) = identities(&app) else {
        return super::PageError::NotFound(
            "sign-in with an identity provider is not configured here".into(),
        )
        .into_response();
    };
    let name = ids.settings.provider.display_name.clone();
    let refuse = |status: StatusCode, message: String| {
        let mut r = login_again(&app, &headers, status, message);
        // The flow is over whatever happened: its cookie goes.
        r.headers_mut().append(
            header::SET_COOKIE,
            flow_cookie("", 0, app.portal.config.secure_cookies),
        );
        r
    };
    let too_long = [&q.code, &q.state, &q.error, &q.error_description]
        .iter()
        .any(|v| v.as_ref().is_some_and(|v| v.len() > MAX_PARAM));
    let state = q.state.as_deref().filter(|s| flow::is_secret(s));
    let Some(state) = state.filter(|_| !too_long) else {
        tracing::info!("sign-in callback refused: no state bizrq made");
        return refuse(
            StatusCode::BAD_REQUEST,
            "This sign-in link was not made by bizrq. Sign in again.".into(),
        );
    };
    let now = crate::util::now_ms();
    let flow = match app.portal.sql.take_flow(&flow::digest(state)).await {
        Ok(Some(f)) => f,
        Ok(None) => {
            tracing::info!("sign-in callback refused: its state was used already or has expired");
            return refuse(
                StatusCode::BAD_REQUEST,
                "This sign-in was finished already or has expired. Sign in again.".into(),
            );
        }
        Err(e) => return super::PageError::from(e).into_response(),
    };
    let same_browser =
        browser_cookie(&headers, app.portal.config.secure_cookies).is_some_and(|b| {
            crate::util::constant_time_eq(
                flow::digest(&b).as_bytes(),
                flow.browser_sha256.as_bytes(),
            )
        });
    if !same_browser {
        tracing::warn!("sign-in callback refused: it came back to another browser than the one that started it");
        return refuse(
            StatusCode::BAD_REQUEST,
            "This sign-in was started in another browser (or its cookie is gone). Sign in again from this one.".into(),
        );
    }
    if now - flow.created_at_ms > FLOW_TTL_MS {
        return refuse(
            StatusCode::BAD_REQUEST,
            "This sign-in has expired (ten minutes). Sign in again.".into(),
        );
    }
    if let Some(error) = &q.error {
        let desc = q
            .error_description
            .as_deref()
            .map(shown)
            .unwrap_or_default();
        tracing::info!(error = %shown(error), description = %desc, "the identity provider did not sign the person in");
        let message = match error.as_str() {
            "access_denied" => format!("{name} did not sign you in (access denied). {desc}"),
            _ => format!("{name} did not sign you in: {} {desc}", shown(error)),
        };
        return refuse(StatusCode::UNAUTHORIZED, message.trim().to_string());
    }
    let Some(code) = q.code.as_deref().filter(|c| !c.is_empty()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("{name} sent no sign-in code back. Sign in again."),
        );
    };
    let failed = |e: ProviderError| {
        tracing::warn!(issuer = %ids.issuer(), error = %e, "sign-in failed");
        let (status, message) = provider_failure(&name, &e);
        refuse(status, message)
    };
    let tokens = match ids.provider.redeem(code, &flow.verifier).await {
        Ok(t) => t,
        Err(e) => return failed(e),
    };
    let Some(id_token) = tokens.id_token.as_deref() else {
        return failed(ProviderError::BadAnswer {
            what: "code exchange",
            detail: "no ID token in the answer (is the openid scope allowed for this client?)"
                .into(),
        });
    };
    let token = match ids
        .provider
        .check_id_token(id_token, Some(&flow.nonce), now / 1000)
        .await
    {
        Ok(t) => t,
        Err(e) => return failed(e),
    };
    // Keyed on what was signed (header and claims), not the signature:
    // an ES256 signature re-encoded (s → n − s) still verifies, and must
    // not make the same token new again.
    let signed_part = id_token.rsplit_once('.').map_or(id_token, |(a, _)| a);
    match app
        .portal
        .sql
        .first_use_of_token(
            &crate::util::sha256_hex(signed_part),
            token.expires_s.saturating_mul(1000),
        )
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(subject = %token.subject, "sign-in refused: this ID token signed in before");
            return refuse(
                StatusCode::UNAUTHORIZED,
                "This sign-in's token was used before; bizrq takes each one once. Sign in again."
                    .into(),
            );
        }
        Err(e) => return super::PageError::from(e).into_response(),
    }
    let person = match crate::oidc::claims::person(&token, &ids.settings.provider.claims) {
        Ok(p) => p,
        Err(e) => return failed(e.into()),
    };
    if person.groups_dropped > 0 {
        tracing::warn!(subject = %person.subject, dropped = person.groups_dropped, "groups left out of a sign-in (too long, control characters, or too many)");
    }
    let signed = match ids
        .sign_in(&person, &token.claims, tokens.refresh_token.as_deref())
        .await
    {
        Ok(s) => s,
        Err(SignInError::Store(e)) => return super::PageError::from(e).into_response(),
        Err(e) => {
            tracing::info!(subject = %person.subject, error = %e, "sign-in refused");
            return refuse(
                StatusCode::FORBIDDEN,
                format!("bizrq cannot let you in: {e}."),
            );
        }
    };
    if tokens.refresh_token.is_none() {
        tracing::info!(user = %signed.user.username, "the identity provider gave no refresh token: roles are refreshed at the next sign-in only");
    }
    let user = signed.user;
    if let Err(e) = begin_session(&session, &user, now).await {
        return super::PageError::from(e).into_response();
    }
    if let Err(e) = session.insert(ID_TOKEN_KEY, id_token).await {
        tracing::warn!(error = %e, "could not keep the ID token for logout");
    }
    tracing::info!(user = %user.username, created = signed.created, roles_changed = signed.changes.len(), "signed in with the identity provider");
    let mut r = Html(app::accounts::render_continue_page(
        &user.username,
        &flow.next_path,
    ))
    .into_response();
    r.headers_mut().append(
        header::SET_COOKIE,
        flow_cookie("", 0, app.portal.config.secure_cookies),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_https_the_flow_cookie_is_a_host_cookie_read_by_that_name_only() {
        let secret = "a".repeat(crate::oidc::flow::SECRET_CHARS);
        let set = flow_cookie(&secret, 600, true);
        assert_eq!(
            set.to_str().unwrap(),
            format!(
                "__Host-bizrq_oidc={secret}; Path=/; Max-Age=600; HttpOnly; SameSite=Lax; Secure"
            )
        );
        let plain = flow_cookie(&secret, 600, false);
        assert!(plain.to_str().unwrap().starts_with("bizrq_oidc="));
        let mut h = HeaderMap::new();
        // A cookie a sibling subdomain could set (no prefix) is not read
        // behind HTTPS.
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("bizrq_oidc={secret}")).unwrap(),
        );
        assert_eq!(browser_cookie(&h, true), None);
        assert_eq!(browser_cookie(&h, false).as_deref(), Some(secret.as_str()));
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("__Host-bizrq_oidc={secret}")).unwrap(),
        );
        assert_eq!(browser_cookie(&h, true).as_deref(), Some(secret.as_str()));
    }
}
