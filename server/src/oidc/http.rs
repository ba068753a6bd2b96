//! Requests to the identity provider, each bounded: a connect timeout, a
//! deadline for the whole exchange, a cap on the answer's size (read no
//! further than the cap, whatever `Content-Length` says), no redirect
//! followed. TLS with the system's roots and, optionally, a CA bundle of
//! the operator's (`--oidc-ca-file`); plain HTTP only to a loopback
//! address (a provider on the same machine, as in the tests).

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;

/// How long a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

#[derive(Clone)]
pub struct Http {
    client: Client<Connector, Full<Bytes>>,
    /// The deadline of a whole request, answer read.
    timeout: Duration,
}

/// What went wrong with a request, in words for a log line and a page.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    #[error("cannot connect: {0}")]
    Unreachable(String),
    #[error("no complete answer within {0} seconds")]
    TimedOut(u64),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("refused: {0} is not a URL bizrq fetches (https, or http to a loopback address)")]
    NotAllowed(String),
}

/// An answer, read whole (within its cap).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// Whether bizrq fetches this URL: https anywhere, http only to a loopback
/// host (`localhost`, 127.0.0.0/8, ::1).
pub fn allowed_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<axum::http::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else {
        return false;
    };
    match uri.scheme_str() {
        Some("https") => true,
        Some("http") => {
            let h = host.trim_start_matches('[').trim_end_matches(']');
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

impl Http {
    /// `extra_ca`: PEM certificates trusted besides the system's roots.
    pub fn new(extra_ca: Option<&[u8]>, timeout: Duration) -> anyhow::Result<Http> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        if let Some(pem) = extra_ca {
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots.add(cert?)?;
                added += 1;
            }
            if added == 0 {
                anyhow::bail!("the OpenID provider's CA file holds no PEM certificate");
            }
        }
        if roots.is_empty() {
            tracing::warn!(
                "no trusted root certificates found: an https OpenID provider cannot be reached (give --oidc-ca-file)"
            );
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .build(connector);
        Ok(Http { client, timeout })
    }

    /// GET `url`, with a bearer token when given.
    pub async fn get(
        &self,
        url: &str,
        bearer: Option<&str>,
        limit: usize,
    ) -> Result<Answer, FetchError> {
        let mut req = axum::http::Request::get(url).header("accept", "application/json");
        if let Some(t) = bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        self.send(url, req, Full::new(Bytes::new()), limit).await
    }

    /// POST a form to `url`, authenticating with HTTP Basic when given.
    pub async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Answer, FetchError> {
        let body = serde_urlencoded::to_string(form).unwrap_or_default();
        let mut req = axum::http::Request::post(url)
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some((user, password)) = basic {
            use base64::Engine;
            // RFC 6749 §2.3.1: each part form-encoded first.
            let enc = |s: &str| {
                serde_urlencoded::to_string([("", s)]).unwrap_or_default()[1..].to_string()
            };
            let pair = format!("{}:{}", enc(user), enc(password));
            req = req.header(
                "authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ),
            );
        }
        self.send(url, req, Full::new(Bytes::from(body)), limit)
            .await
    }

    async fn send(
        &self,
        url: &str,
        req: axum::http::request::Builder,
        body: Full<Bytes>,
        limit: usize,
    ) -> Result<Answer, FetchError> {
        if !allowed_url(url) {
            return Err(FetchError::NotAllowed(url.chars().take(200).collect()));
        }
        let req = req
            .header("user-agent", concat!("bizrq/", env!("CARGO_PKG_VERSION")))
            .body(body)
            .map_err(|e| FetchError::NotAllowed(format!("{url}: {e}")))?;
        let work = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| FetchError::Unreachable(error_chain(&e)))?;
            let status = resp.status().as_u16();
            let declared = resp
                .headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > limit as u64) {
                return Err(FetchError::TooLarge(limit));
            }
            let body = Limited::new(resp.into_body(), limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        FetchError::TooLarge(limit)
                    } else {
                        FetchError::Unreachable(format!("the answer broke off: {e}"))
                    }
                })?
                .to_bytes();
            Ok(Answer { status, body })
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::TimedOut(self.timeout.as_secs())),
        }
    }
}

/// An error and its sources in one line (hyper's top error says only
/// "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        for ok in [
            "https://idp.example/realms/acme",
            "http://127.0.0.1:5556/dex",
            "http://localhost:8080/",
            "http://[::1]:9000/x",
        ] {
            assert!(allowed_url(ok), "{ok}");
        }
        for refused in [
            "http://idp.example/",
            "http://10.0.0.1/",
            "ftp://idp.example/",
            "file:///etc/passwd",
            "https:///nohost",
            "not a url",
        ] {
            assert!(!allowed_url(refused), "{refused}");
        }
    }
}
