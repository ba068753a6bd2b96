//! bizrq's one HTTP client for the servers it asks (the OpenID provider
//! of sign-in, `oidc::provider`; Prometheus, `real_usage::prometheus`),
//! every request bounded: a connect timeout, a deadline for the whole
//! exchange (the answer read), a cap on the answer's size (larger is
//! refused unread when `Content-Length` says so, and never read past the
//! cap otherwise), no redirect followed. TLS (rustls, ring) with the roots
//! its user gives (`native_roots`, `add_pem`); which URLs it fetches is
//! its user's rule too (`Urls`).

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;

/// How long a connection may take to open (at most; a shorter deadline
/// for the whole exchange bounds it too).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Which URLs a client fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urls {
    /// https anywhere, http only to a loopback host (`https_or_loopback`):
    /// a server named by someone else (an OpenID issuer).
    HttpsOrLoopback,
    /// http or https anywhere: a server the operator named, possibly
    /// inside the cluster (Prometheus).
    HttpOrHttps,
}

impl Urls {
    /// The rule, in words.
    pub fn rule(self) -> &'static str {
        match self {
            Urls::HttpsOrLoopback => "https, or http to a loopback address",
            Urls::HttpOrHttps => "http or https",
        }
    }

    pub fn allows(self, url: &str) -> bool {
        match self {
            Urls::HttpsOrLoopback => https_or_loopback(url),
            Urls::HttpOrHttps => url
                .parse::<axum::http::Uri>()
                .ok()
                .filter(|u| u.host().is_some_and(|h| !h.is_empty()))
                .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https"))),
        }
    }
}

#[derive(Clone)]
pub struct Http {
    client: Client<Connector, Full<Bytes>>,
    /// The deadline of a whole request, answer read.
    timeout: Duration,
    urls: Urls,
}

/// What went wrong with a request, in words for a log line and a page.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    #[error("cannot connect: {0}")]
    Unreachable(String),
    #[error("timed out: no complete answer within {0} seconds")]
    TimedOut(u64),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("refused: {0}")]
    NotAllowed(String),
}

/// An answer, read whole (within its cap).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// How a request proves who asks.
#[derive(Clone, Copy, Debug)]
pub enum Auth<'a> {
    None,
    Bearer(&'a str),
    /// HTTP Basic, each part form-encoded first (RFC 6749 §2.3.1).
    Basic(&'a str, &'a str),
}

/// https anywhere, http only to a loopback host (`localhost`,
/// 127.0.0.0/8, ::1).
pub fn https_or_loopback(url: &str) -> bool {
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

/// The system's trusted roots (those it cannot parse skipped).
pub fn native_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}

/// Adds the PEM certificates of `pem` to `roots`: how many, or why not
/// (a certificate that does not parse; none at all, named `what`).
pub fn add_pem(roots: &mut rustls::RootCertStore, pem: &[u8], what: &str) -> anyhow::Result<usize> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        added += 1;
    }
    if added == 0 {
        anyhow::bail!("{what} holds no PEM certificate");
    }
    Ok(added)
}

impl Http {
    /// A client trusting `roots`, fetching what `urls` allows, each
    /// request done within `timeout`.
    pub fn new(
        roots: rustls::RootCertStore,
        urls: Urls,
        timeout: Duration,
    ) -> anyhow::Result<Http> {
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT.min(timeout)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .build(connector);
        Ok(Http {
            client,
            timeout,
            urls,
        })
    }

    /// GET `url`, with a bearer token when given.
    pub async fn get(
        &self,
        url: &str,
        bearer: Option<&str>,
        limit: usize,
    ) -> Result<Answer, FetchError> {
        let req = axum::http::Request::get(url).header("accept", "application/json");
        let auth = bearer.map_or(Auth::None, Auth::Bearer);
        self.send(url, authorized(req, auth), Full::new(Bytes::new()), limit)
            .await
    }

    /// POST a form to `url`.
    pub async fn post_form<K: serde::Serialize, V: serde::Serialize>(
        &self,
        url: &str,
        form: &[(K, V)],
        auth: Auth<'_>,
        limit: usize,
    ) -> Result<Answer, FetchError> {
        let body = serde_urlencoded::to_string(form).unwrap_or_default();
        let req = axum::http::Request::post(url)
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded");
        self.send(
            url,
            authorized(req, auth),
            Full::new(Bytes::from(body)),
            limit,
        )
        .await
    }

    async fn send(
        &self,
        url: &str,
        req: axum::http::request::Builder,
        body: Full<Bytes>,
        limit: usize,
    ) -> Result<Answer, FetchError> {
        if !self.urls.allows(url) {
            let url: String = without_query(url).chars().take(200).collect();
            return Err(FetchError::NotAllowed(format!(
                "{url} is not a URL bizrq fetches ({})",
                self.urls.rule()
            )));
        }
        let req = req
            .header("user-agent", concat!("bizrq/", env!("CARGO_PKG_VERSION")))
            .body(body)
            // The URL's query may hold what is not ours to log: its path only.
            .map_err(|e| FetchError::NotAllowed(format!("{}: {e}", without_query(url))))?;
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
            let collected = Limited::new(resp.into_body(), limit)
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
                })?;
            Ok(Answer {
                status,
                body: collected.to_bytes(),
            })
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::TimedOut(self.timeout.as_secs())),
        }
    }
}

fn authorized(req: axum::http::request::Builder, auth: Auth<'_>) -> axum::http::request::Builder {
    match auth {
        Auth::None => req,
        Auth::Bearer(t) => req.header("authorization", format!("Bearer {t}")),
        Auth::Basic(user, password) => {
            use base64::Engine;
            let enc = |s: &str| {
                serde_urlencoded::to_string([("", s)]).unwrap_or_default()[1..].to_string()
            };
            let pair = format!("{}:{}", enc(user), enc(password));
            req.header(
                "authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ),
            )
        }
    }
}

fn without_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
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
    s.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_fetched_from_a_named_server() {
        for ok in [
            "https://idp.example/realms/acme",
            "http://127.0.0.1:5556/dex",
            "http://localhost:8080/",
            "http://[::1]:9000/x",
        ] {
            assert!(https_or_loopback(ok), "{ok}");
            assert!(Urls::HttpOrHttps.allows(ok), "{ok}");
        }
        for refused in [
            "http://idp.example/",
            "http://10.0.0.1/",
            "ftp://idp.example/",
            "file:///etc/passwd",
            "https:///nohost",
            "not a url",
        ] {
            assert!(!https_or_loopback(refused), "{refused}");
        }
    }

    #[test]
    fn an_operators_server_may_be_plain_http_in_the_cluster() {
        for ok in [
            "http://prometheus.monitoring:9090/api/v1/query_range",
            "http://10.0.0.1/",
        ] {
            assert!(Urls::HttpOrHttps.allows(ok), "{ok}");
            assert!(!Urls::HttpsOrLoopback.allows(ok), "{ok}");
        }
        for refused in ["ftp://prom/", "file:///etc/passwd", "https:///nohost", "x"] {
            assert!(!Urls::HttpOrHttps.allows(refused), "{refused}");
        }
    }
}
