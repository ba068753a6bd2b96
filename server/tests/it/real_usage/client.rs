//! The Prometheus client's bounds (docs/real-usage.md, "Flags"), against
//! servers of the test's own that misbehave on the wire: an answer larger
//! than `--prometheus-max-response-mib` is refused — unread when its
//! `Content-Length` says so, and as it streams when it does not; an
//! answer that trickles is cut at `--prometheus-timeout-seconds`, its
//! body included; the bearer token file is read again for every query;
//! and over https only the CA file given is trusted.

use bizrq::real_usage::prometheus::{Prometheus, QueryError};
use bizrq::real_usage::RealUsageConfig;
use quota::real_usage::answer::{Grid, Limits, ONE};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const GRID: Grid = Grid {
    first_ms: 1_795_255_260_000,
    last_ms: 1_795_255_320_000,
    step_ms: 60_000,
};

const LIMITS: Limits = Limits {
    max_series: 10,
    max_value: 1000 * ONE,
};

/// An answer of the JSON Prometheus gives, of two points of one pod.
const MATRIX: &str = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"ml","pod":"train-0"},"values":[[1795255260,"0.5"],[1795255320,"0.25"]]}]}}"#;

fn config(url: String, max_bytes: usize, timeout_s: u64) -> RealUsageConfig {
    RealUsageConfig {
        url,
        token_file: None,
        ca_file: None,
        every: Duration::from_secs(60),
        step_ms: 60_000,
        delay_ms: 0,
        rate_range_seconds: 120,
        timeout: Duration::from_secs(timeout_s),
        max_series: 10,
        max_bytes,
        max_steps: 60,
        catch_up_ms: 3_600_000,
        alert_after_ms: 600_000,
        public_url: "http://bizrq.example".into(),
        queries: Vec::new(),
    }
}

/// What a misbehaving server does once it has read a request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers `MATRIX`, whole.
    Matrix,
    /// Declares a body of `declared` bytes, then waits `wait` before
    /// sending any of it.
    Declares { declared: usize, wait: Duration },
    /// Streams (chunked, no length) `total` bytes in 64 KiB chunks.
    Streams { total: usize },
    /// Declares `MATRIX`'s length, then sends one byte every `every`.
    Trickles { every: Duration },
}

/// What the server saw and did, per connection.
#[derive(Default)]
struct Seen {
    /// The `authorization` header of each request.
    authorizations: Vec<Option<String>>,
    /// Body bytes it managed to send before the client went away (or all).
    sent: Vec<usize>,
}

struct Misbehaving {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
}

impl Misbehaving {
    /// Over plain HTTP.
    async fn start(b: Behaviour) -> Misbehaving {
        Misbehaving::start_with(b, None).await
    }

    /// Over TLS with `tls` when given.
    async fn start_with(b: Behaviour, tls: Option<tokio_rustls::TlsAcceptor>) -> Misbehaving {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let keep = seen.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let seen = keep.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(t) => {
                            if let Ok(s) = t.accept(s).await {
                                serve(s, b, seen).await;
                            }
                        }
                        None => serve(s, b, seen).await,
                    }
                });
            }
        });
        Misbehaving { addr, seen }
    }

    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }
}

/// Reads one request (headers, then the body its length gives) and
/// answers as `b` says, for as many requests as the connection carries.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, b: Behaviour, seen: Arc<Mutex<Seen>>) {
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_string();
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if s.read_exact(&mut body).await.is_err() {
            return;
        }
        seen.lock()
            .unwrap()
            .authorizations
            .push(header("authorization"));
        let sent = match b {
            Behaviour::Matrix => {
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{MATRIX}",
                    MATRIX.len()
                );
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                MATRIX.len()
            }
            Behaviour::Declares { declared, wait } => {
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {declared}\r\n\r\n");
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.flush().await;
                tokio::time::sleep(wait).await;
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < declared {
                    let n = chunk.len().min(declared - sent);
                    if s.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                }
                sent
            }
            Behaviour::Streams { total } => {
                let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < total {
                    let framed =
                        [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                    if s.write_all(&framed).await.is_err() {
                        break;
                    }
                    sent += chunk.len();
                }
                if sent >= total {
                    let _ = s.write_all(b"0\r\n\r\n").await;
                }
                sent
            }
            Behaviour::Trickles { every } => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                    MATRIX.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let mut sent = 0;
                for b in MATRIX.bytes() {
                    if s.write_all(&[b]).await.is_err() || s.flush().await.is_err() {
                        break;
                    }
                    sent += 1;
                    tokio::time::sleep(every).await;
                }
                sent
            }
        };
        seen.lock().unwrap().sent.push(sent);
        let _ = s.flush().await;
    }
}

/// An answer whose `Content-Length` is over the bound is refused at its
/// headers: nothing of its body is waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_declared_too_large_is_refused_unread() {
    let server = Misbehaving::start(Behaviour::Declares {
        declared: 2 << 20,
        wait: Duration::from_secs(5),
    })
    .await;
    let prom = Prometheus::new(&config(server.url("http"), 1 << 20, 10)).unwrap();
    let started = Instant::now();
    let e = prom.range("up", GRID).await.unwrap_err();
    assert!(matches!(e, QueryError::TooLarge(n) if n == 1 << 20), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused before any of the body was sent ({:?})",
        started.elapsed()
    );
    assert!(
        e.to_string().contains("--prometheus-max-response-mib"),
        "{e}"
    );
    assert_eq!(e.reason(), "too_large");
    assert!(!e.is_down(), "Prometheus answered; the answer is refused");
}

/// An answer without a length, streaming past the bound, is cut at it:
/// the client stops reading and closes the connection long before the
/// server is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_streaming_past_the_bound_is_cut_there() {
    let total = 256 << 20;
    let server = Misbehaving::start(Behaviour::Streams { total }).await;
    let prom = Prometheus::new(&config(server.url("http"), 1 << 20, 30)).unwrap();
    let e = prom.read("up", GRID, LIMITS).await.unwrap_err();
    assert!(matches!(e, QueryError::TooLarge(_)), "{e}");
    let sent = super::until("the server's writes failing", 30, async || {
        server.seen.lock().unwrap().sent.first().copied()
    })
    .await;
    assert!(
        sent < total / 4,
        "the client read on: {sent} of {total} bytes sent"
    );
}

/// Headers at once, then a byte every 300 ms: the deadline covers the
/// body, so the query is given up at the timeout ("down", read again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_trickling_in_is_given_up_at_the_timeout() {
    let server = Misbehaving::start(Behaviour::Trickles {
        every: Duration::from_millis(300),
    })
    .await;
    let prom = Prometheus::new(&config(server.url("http"), 1 << 20, 1)).unwrap();
    let started = Instant::now();
    let e = prom.read("up", GRID, LIMITS).await.unwrap_err();
    let took = started.elapsed();
    assert!(e.is_down(), "{e}");
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// The token file is read for every query: a rotated token is sent at
/// the next one; an emptied file stops the query before it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_is_read_again_for_every_query() {
    let server = Misbehaving::start(Behaviour::Matrix).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    let mut cfg = config(server.url("http"), 1 << 20, 5);
    cfg.token_file = Some(token.clone());
    let prom = Prometheus::new(&cfg).unwrap();
    let a = prom.read("up", GRID, LIMITS).await.unwrap().unwrap();
    assert_eq!(a.series, 1);
    std::fs::write(&token, "second-token").unwrap();
    prom.read("up", GRID, LIMITS).await.unwrap().unwrap();
    std::fs::write(&token, "  \n").unwrap();
    let e = prom.range("up", GRID).await.unwrap_err();
    assert!(
        e.is_down() && e.to_string().contains("no usable token"),
        "{e}"
    );
    assert_eq!(
        server.seen.lock().unwrap().authorizations,
        [
            Some("Bearer first-token".to_string()),
            Some("Bearer second-token".to_string())
        ]
    );
}

/// Over https, the CA file given is what is trusted: with it the answer
/// is read; without it (the system's roots) the certificate is refused
/// and Prometheus is "down"; a file of no certificate stops the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_the_ca_file_given_is_trusted() {
    bizrq::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, acceptor) = {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        (ca.pem(), tokio_rustls::TlsAcceptor::from(Arc::new(server)))
    };
    let server = Misbehaving::start_with(Behaviour::Matrix, Some(acceptor)).await;
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let mut cfg = config(server.url("https"), 1 << 20, 5);
    cfg.ca_file = Some(ca_file.clone());
    let trusting = Prometheus::new(&cfg).unwrap();
    let a = trusting.read("up", GRID, LIMITS).await.unwrap().unwrap();
    assert_eq!(a.series, 1);

    cfg.ca_file = None;
    if let Ok(system) = Prometheus::new(&cfg) {
        let e = system.range("up", GRID).await.unwrap_err();
        assert!(e.is_down(), "{e}");
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    }
    std::fs::write(&ca_file, "not a certificate").unwrap();
    cfg.ca_file = Some(ca_file);
    let e = Prometheus::new(&cfg).err().expect("refused at the start");
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
}
