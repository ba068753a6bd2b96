//! Requests to the identity provider: bizrq's bounded client
//! (`crate::http_client`: a connect timeout, a deadline for the whole
//! exchange, a cap on the answer's size, no redirect followed), with the
//! system's roots and, optionally, a CA bundle of the operator's
//! (`--oidc-ca-file`); https, or plain HTTP only to a loopback address (a
//! provider on the same machine, as in the tests).

use crate::http_client::{add_pem, native_roots, Urls};
pub use crate::http_client::{Auth, FetchError, Http};
use std::time::Duration;

/// Whether bizrq fetches this URL from a provider: https anywhere, http
/// only to a loopback host (`localhost`, 127.0.0.0/8, ::1).
pub fn allowed_url(url: &str) -> bool {
    Urls::HttpsOrLoopback.allows(url)
}

/// The provider's client. `extra_ca`: PEM certificates trusted besides
/// the system's roots.
pub fn client(extra_ca: Option<&[u8]>, timeout: Duration) -> anyhow::Result<Http> {
    let mut roots = native_roots();
    if let Some(pem) = extra_ca {
        add_pem(&mut roots, pem, "the OpenID provider's CA file")?;
    }
    if roots.is_empty() {
        tracing::warn!(
            "no trusted root certificates found: an https OpenID provider cannot be reached (give --oidc-ca-file)"
        );
    }
    Http::new(roots, Urls::HttpsOrLoopback, timeout)
}
