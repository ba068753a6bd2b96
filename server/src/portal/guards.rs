//! What every request and response of the portal and the JSON API passes
//! at the edge (the webhook has its own router and none of this):
//!
//! - [`security_headers`]: a Content-Security-Policy that fits pages
//!   without scripts (styles from `/style.css` and inline `style`
//!   attributes; inline SVG needs nothing more), no framing, `nosniff`, no
//!   referrer leaving the site.
//! - [`reject_control_chars`]: NUL and other control characters, and
//!   bidirectional overrides, in the path, the query, a form or a JSON body
//!   are refused (400 JSON on the API, 422 page otherwise) before any
//!   handler or database sees them. On the API every signed-in body is
//!   checked as JSON whatever its Content-Type, and one that is not JSON
//!   is refused.
//! - On `/api/` routes, a body over the limit answers 413 in the API's
//!   JSON error shape instead of plain text.

use crate::edge::limits::control_char;
use crate::edge::{ApiError, API_BODY_LIMIT};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Scripts only from bizrq itself (the islands bundle under `/pkg/`, which
/// compiles WebAssembly and asks bizrq's JSON API); none inline. Styles
/// come from `/style.css` and from inline `style` attributes (bars, tree
/// indents), which need `'unsafe-inline'` for styles only. Forms post to
/// bizrq only; nothing may frame a page.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     connect-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The policy with the identity provider's origins added to
/// `form-action`: the login page's button and the logout form end in a
/// redirect to the provider, and browsers hold a form's redirects to
/// `form-action` too.
pub fn content_security_policy(form_origins: &[String]) -> String {
    if form_origins.is_empty() {
        return CONTENT_SECURITY_POLICY.to_string();
    }
    CONTENT_SECURITY_POLICY.replace(
        "form-action 'self'",
        &format!("form-action 'self' {}", form_origins.join(" ")),
    )
}

/// Adds the security headers to every response (unless a handler set its
/// own).
pub async fn security_headers(
    State(app): State<crate::edge::AppState>,
    req: Request,
    next: Next,
) -> Response {
    let mut resp = next.run(req).await;
    let csp = match &app.portal.identity {
        Some(ids) => HeaderValue::from_str(&content_security_policy(&ids.provider.form_origins()))
            .unwrap_or_else(|_| HeaderValue::from_static(CONTENT_SECURITY_POLICY)),
        None => HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    };
    let h = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, csp),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ),
    ] {
        if !h.contains_key(&name) {
            h.insert(name, value);
        }
    }
    resp
}

fn is_api(req: &Request) -> bool {
    req.uri().path().starts_with("/api/")
}

fn refuse(api: bool, status_if_api: StatusCode, message: String) -> Response {
    if api {
        match status_if_api {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(message).into_response(),
            _ => ApiError::BadRequest(message).into_response(),
        }
    } else if status_if_api == StatusCode::PAYLOAD_TOO_LARGE {
        (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
    } else {
        super::PageError::Invalid(message).into_response()
    }
}

fn what(c: char) -> String {
    quota::text::describe(c)
}

/// The first control character among form or query pairs: which field.
fn in_pairs(pairs: &[(String, String)]) -> Option<String> {
    pairs.iter().find_map(|(k, v)| {
        control_char(k)
            .or_else(|| control_char(v))
            .map(|c| format!("the field '{}' contains {}", k.escape_debug(), what(c)))
    })
}

/// The first control character among a JSON value's strings and keys.
fn in_json(v: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match v {
        Value::String(s) => control_char(s).map(|c| format!("{at} contains {}", what(c))),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| in_json(v, &format!("{at}[{i}]"))),
        Value::Object(o) => o.iter().find_map(|(k, v)| {
            let here = format!("{at}.{}", k.escape_debug());
            match control_char(k) {
                Some(c) => Some(format!("a key in {at} contains {}", what(c))),
                None => in_json(v, &here),
            }
        }),
        _ => None,
    }
}

/// Refuses control characters in the path, the query, and form or JSON
/// bodies; maps a too-large body on the API to its JSON error.
pub async fn reject_control_chars(req: Request, next: Next) -> Response {
    let api = is_api(&req);
    let path = super::auth::percent_decode(req.uri().path());
    if let Some(c) = control_char(&path) {
        return refuse(
            api,
            StatusCode::BAD_REQUEST,
            format!("the path contains {}", what(c)),
        );
    }
    if let Some(q) = req.uri().query() {
        match serde_urlencoded::from_str::<Vec<(String, String)>>(q) {
            Ok(pairs) => {
                if let Some(m) = in_pairs(&pairs) {
                    return refuse(api, StatusCode::BAD_REQUEST, format!("{m} (in the query)"));
                }
            }
            Err(_) => {
                if let Some(c) = control_char(&super::auth::percent_decode(q)) {
                    return refuse(
                        api,
                        StatusCode::BAD_REQUEST,
                        format!("the query contains {}", what(c)),
                    );
                }
            }
        }
    }
    // The API's bodies are checked once the caller is known
    // (`check_api_body`, inside `authenticate`): nothing is read, let
    // alone parsed, for a caller whose token has not been checked.
    if api {
        return too_large_as_json(true, next.run(req).await).await;
    }
    let kind = content_type(&req);
    let form = kind.starts_with("application/x-www-form-urlencoded");
    let json = kind.starts_with("application/json");
    if !form && !json {
        return next.run(req).await;
    }
    // Before sign-in the only page that takes a body is the login form:
    // an anonymous body is read up to the login form's bound, never a
    // whole MiB.
    let signed_in = match req.extensions().get::<tower_sessions::Session>() {
        Some(s) => s
            .get::<i64>(crate::store::sessions::USER_ID_KEY)
            .await
            .ok()
            .flatten()
            .is_some(),
        None => false,
    };
    let limit = if signed_in {
        API_BODY_LIMIT
    } else {
        super::auth::ANONYMOUS_FORM_LIMIT
    };
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return refuse(
                false,
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {limit} bytes"),
            )
        }
    };
    let found = if form {
        serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes)
            .ok()
            .and_then(|pairs| in_pairs(&pairs))
    } else {
        // Not a form: the handler says what it makes of it in its own words.
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| in_json(&v, "the body"))
    };
    if let Some(m) = found {
        return refuse(
            false,
            StatusCode::BAD_REQUEST,
            format!("{m}; text may not hold control characters other than tab and line breaks, nor bidirectional overrides"),
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn content_type(req: &Request) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The API's bodies, checked for control characters once `authenticate`
/// has let the caller in (a route layer inside it). The API's handlers
/// read every body as JSON whatever its Content-Type, so every body is
/// checked as JSON; what does not parse here is refused, lest a typed
/// parse that is more lenient (an unknown field holding `1e400`) let a
/// control character through.
pub async fn check_api_body(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, API_BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return refuse(
                true,
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {API_BODY_LIMIT} bytes"),
            )
        }
    };
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => {
                if let Some(m) = in_json(&v, "the body") {
                    return refuse(
                        true,
                        StatusCode::BAD_REQUEST,
                        format!("{m}; text may not hold control characters other than tab and line breaks, nor bidirectional overrides"),
                    );
                }
            }
            Err(e) => {
                return refuse(
                    true,
                    StatusCode::BAD_REQUEST,
                    format!("the request body is not valid JSON: {e}"),
                )
            }
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A 413 from a layer or extractor on the API, in the API's JSON shape.
async fn too_large_as_json(api: bool, resp: Response) -> Response {
    let plain = !resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if api && resp.status() == StatusCode::PAYLOAD_TOO_LARGE && plain {
        return ApiError::TooLarge(format!(
            "the request body is larger than {API_BODY_LIMIT} bytes"
        ))
        .into_response();
    }
    resp
}
