//! The Prometheus client of real usage: range queries over HTTP(S)
//! through bizrq's bounded client (`crate::http_client`), with a bearer
//! token read from a file for every query (a projected token rotates), a
//! CA of our choosing, a timeout on the whole exchange (the answer read)
//! and a bound on the answer's size, enforced as it streams. The answer's bytes go to
//! `quota::real_usage::answer::read`; nothing here decides.

use super::RealUsageConfig;
use crate::http_client::{add_pem, native_roots, Auth, FetchError, Http, Urls};
use axum::body::Bytes;
use quota::real_usage::answer::{self, Answer, AnswerError, Grid, Limits};
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
    http: Http,
    url: String,
    token_file: Option<PathBuf>,
    timeout: Duration,
    max_bytes: usize,
}

/// The largest token file read (a ServiceAccount token is about 1 KiB).
const MAX_TOKEN: u64 = 16 * 1024;

impl Prometheus {
    /// The client of `cfg.url`: over https, trusting the CA file alone
    /// when one is given, else the system's roots.
    pub fn new(cfg: &RealUsageConfig) -> anyhow::Result<Prometheus> {
        let mut roots = rustls::RootCertStore::empty();
        if cfg.url.starts_with("https://") {
            match &cfg.ca_file {
                Some(path) => {
                    let pem = std::fs::read(path).map_err(|e| {
                        anyhow::anyhow!("cannot read --prometheus-ca-file {}: {e}", path.display())
                    })?;
                    add_pem(
                        &mut roots,
                        &pem,
                        &format!("--prometheus-ca-file {}", path.display()),
                    )?;
                }
                None => {
                    roots = native_roots();
                    if roots.is_empty() {
                        anyhow::bail!(
                            "no system CA certificates to check {} against: give --prometheus-ca-file",
                            cfg.url
                        );
                    }
                }
            }
        }
        Ok(Prometheus {
            http: Http::new(roots, Urls::HttpOrHttps, cfg.timeout)?,
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
    /// configured bound, a larger answer refused unread), whatever its
    /// status inside.
    pub async fn range(&self, query: &str, grid: Grid) -> Result<Bytes, QueryError> {
        let seconds = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        let form = [
            ("query", query.to_string()),
            ("start", seconds(grid.first_ms)),
            ("end", seconds(grid.last_ms)),
            ("step", seconds(grid.step_ms)),
            // Prometheus stops evaluating when we stop waiting.
            ("timeout", format!("{}s", self.timeout.as_secs().max(1))),
        ];
        let token = self.token()?;
        let auth = token.as_deref().map_or(Auth::None, Auth::Bearer);
        let answer = self
            .http
            .post_form(&self.url, &form, auth, self.max_bytes)
            .await
            .map_err(|e| match e {
                FetchError::TooLarge(_) => QueryError::TooLarge(self.max_bytes),
                e => QueryError::Down(e.to_string()),
            })?;
        let (status, body) = (answer.status, answer.body);
        if status >= 500 {
            return Err(QueryError::Down(format!(
                "HTTP {status}: {}",
                excerpt(&body)
            )));
        }
        // 400 (bad_data) and 422 (execution) carry the JSON of a refusal:
        // the reader says why in Prometheus's words. Anything else but a
        // success (a redirect, which is not followed, a 401) is refused.
        if !(200..300).contains(&status) && !matches!(status, 400 | 422) {
            return Err(QueryError::Refused {
                status,
                body: excerpt(&body),
            });
        }
        Ok(body)
    }

    /// One range query over `grid`, its answer read (off the runtime's
    /// threads): the reader's query of one metric.
    pub async fn read(
        &self,
        query: &str,
        grid: Grid,
        limits: Limits,
    ) -> Result<Result<Answer, AnswerError>, QueryError> {
        let body = self.range(query, grid).await?;
        tokio::task::spawn_blocking(move || answer::read(&body, grid, &limits))
            .await
            .map_err(|e| QueryError::Down(e.to_string()))
    }
}

/// The start of a body, for a message: 200 characters, no controls.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(400)])
        .chars()
        .filter(|c| !quota::text::is_hostile(*c))
        .take(200)
        .collect()
}
