//! The Prometheus client of real usage: range queries over HTTP(S), with a
//! bearer token read from a file for every query (a projected token
//! rotates), a CA of our choosing, a timeout on the whole exchange and a
//! bound on the answer's size. The answer's bytes go to
//! `quota::real_usage::answer::read`; nothing here decides.

use super::RealUsageConfig;
use quota::real_usage::answer::Grid;
use std::path::PathBuf;
use std::time::Duration;

/// Why a query got no answer to read.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// Unreachable, too slow, or failing (a 5xx): Prometheus is down for
    /// this reading, which is tried again.
    #[error("Prometheus did not answer: {0}")]
    Down(String),
    /// It answered, refusing the query (a 4xx: a template it cannot run).
    #[error("Prometheus refused the query (HTTP {status}): {body}")]
    Refused { status: u16, body: String },
    #[error("Prometheus's answer is over {0} bytes: narrow the template or raise --prometheus-max-response-mib")]
    TooLarge(usize),
}

impl QueryError {
    /// Whether Prometheus is down (as opposed to refusing this query).
    pub fn is_down(&self) -> bool {
        matches!(self, QueryError::Down(_))
    }

    /// A short word for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            QueryError::Down(_) => "down",
            QueryError::Refused { .. } => "refused",
            QueryError::TooLarge(_) => "too_large",
        }
    }
}

pub struct Prometheus {
    client: reqwest::Client,
    url: String,
    token_file: Option<PathBuf>,
    timeout: Duration,
    max_bytes: usize,
}

/// The largest token file read (a ServiceAccount token is about 1 KiB).
const MAX_TOKEN: u64 = 16 * 1024;

impl Prometheus {
    pub fn new(cfg: &RealUsageConfig) -> anyhow::Result<Prometheus> {
        let mut b = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .tls_built_in_root_certs(false);
        if cfg.url.starts_with("https://") {
            match &cfg.ca_file {
                Some(path) => {
                    let pem = std::fs::read(path).map_err(|e| {
                        anyhow::anyhow!("cannot read --prometheus-ca-file {}: {e}", path.display())
                    })?;
                    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                        anyhow::anyhow!("--prometheus-ca-file {}: {e}", path.display())
                    })?;
                    if certs.is_empty() {
                        anyhow::bail!(
                            "--prometheus-ca-file {} holds no certificate",
                            path.display()
                        );
                    }
                    for c in certs {
                        b = b.add_root_certificate(c);
                    }
                }
                None => {
                    let found = rustls_native_certs::load_native_certs();
                    if found.certs.is_empty() {
                        anyhow::bail!(
                            "no system CA certificates to check {} against: give --prometheus-ca-file",
                            cfg.url
                        );
                    }
                    for c in found.certs {
                        if let Ok(c) = reqwest::Certificate::from_der(&c) {
                            b = b.add_root_certificate(c);
                        }
                    }
                }
            }
        }
        Ok(Prometheus {
            client: b.build()?,
            url: format!("{}/api/v1/query_range", cfg.url.trim_end_matches('/')),
            token_file: cfg.token_file.clone(),
            timeout: cfg.timeout,
            max_bytes: cfg.max_bytes,
        })
    }

    fn token(&self) -> Result<Option<String>, QueryError> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TOKEN).read_to_string(&mut text))
            .map_err(|e| {
                QueryError::Down(format!(
                    "cannot read --prometheus-token-file {}: {e}",
                    path.display()
                ))
            })?;
        let t = text.trim();
        if t.is_empty() || t.chars().any(|c| c.is_control() || c == ' ') {
            return Err(QueryError::Down(format!(
                "--prometheus-token-file {} holds no usable token",
                path.display()
            )));
        }
        Ok(Some(t.to_string()))
    }

    /// One range query over `grid`: the answer's bytes (at most the
    /// configured bound), whatever its status inside.
    pub async fn range(&self, query: &str, grid: Grid) -> Result<Vec<u8>, QueryError> {
        let seconds = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        let form = [
            ("query", query.to_string()),
            ("start", seconds(grid.first_ms)),
            ("end", seconds(grid.last_ms)),
            ("step", seconds(grid.step_ms)),
            // Prometheus stops evaluating when we stop waiting.
            ("timeout", format!("{}s", self.timeout.as_secs().max(1))),
        ];
        let mut req = self.client.post(&self.url).form(&form);
        if let Some(t) = self.token()? {
            req = req.bearer_auth(t);
        }
        let mut resp = req
            .send()
            .await
            .map_err(|e| QueryError::Down(describe(&e)))?;
        let status = resp.status();
        if resp
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(QueryError::TooLarge(self.max_bytes));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| QueryError::Down(describe(&e)))?
        {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(QueryError::TooLarge(self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_server_error() {
            return Err(QueryError::Down(format!(
                "HTTP {}: {}",
                status.as_u16(),
                excerpt(&body)
            )));
        }
        // 400 (bad_data) and 422 (execution) carry the JSON of a refusal:
        // the reader says why in Prometheus's words.
        if status.is_client_error() && !matches!(status.as_u16(), 400 | 422) {
            return Err(QueryError::Refused {
                status: status.as_u16(),
                body: excerpt(&body),
            });
        }
        Ok(body)
    }
}

/// reqwest's error with its causes, without the URL's query.
fn describe(e: &reqwest::Error) -> String {
    let mut s = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "could not connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s.chars().take(300).collect()
}

/// The start of a body, for a message: 200 characters, no controls.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(400)])
        .chars()
        .filter(|c| !quota::text::is_hostile(*c))
        .take(200)
        .collect()
}
