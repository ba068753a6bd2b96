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

use super::limits::control_char;
use crate::http::{ApiError, API_BODY_LIMIT};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
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

/// Adds the security headers to every response (unless a handler set its
/// own).
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
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
    if c.is_control() {
        format!("a control character (U+{:04X})", c as u32)
    } else {
        format!("a bidirectional override character (U+{:04X})", c as u32)
    }
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
    let kind = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let form = kind.starts_with("application/x-www-form-urlencoded");
    // The API's handlers read every body as JSON whatever its Content-Type,
    // so on `/api/` every body is checked as JSON.
    let json = api || kind.starts_with("application/json");
    // An API call without credentials (no bearer token, no signed-in
    // session) is refused by `authenticate` before any handler reads its
    // body: nothing to buffer for an anonymous client.
    let anonymous_api = api && !req.headers().contains_key(header::AUTHORIZATION) && {
        match req.extensions().get::<tower_sessions::Session>() {
            Some(s) => s
                .get::<i64>(crate::store::sessions::USER_ID_KEY)
                .await
                .ok()
                .flatten()
                .is_none(),
            None => true,
        }
    };
    if (!form && !json) || anonymous_api {
        return too_large_as_json(api, next.run(req).await).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, API_BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return refuse(
                api,
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {API_BODY_LIMIT} bytes"),
            )
        }
    };
    let found = if api {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            // What does not parse here is not checked: refused, lest a
            // typed parse that is more lenient (an unknown field holding
            // `1e400`) let a control character through.
            match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) => in_json(&v, "the body"),
                Err(e) => {
                    return refuse(
                        api,
                        StatusCode::BAD_REQUEST,
                        format!("the request body is not valid JSON: {e}"),
                    )
                }
            }
        }
    } else if form {
        serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes)
            .ok()
            .and_then(|pairs| in_pairs(&pairs))
    } else {
        // Not JSON at all: the handler says so in its own words.
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| in_json(&v, "the body"))
    };
    if let Some(m) = found {
        return refuse(
            api,
            StatusCode::BAD_REQUEST,
            format!("{m}; text may not hold control characters other than tab and line breaks, nor bidirectional overrides"),
        );
    }
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    too_large_as_json(api, resp).await
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
