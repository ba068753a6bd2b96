//! Slow and idle clients: each listener has its own connection pool and
//! timeouts, so connections held on the portal port cost the webhook
//! nothing, and half-open or dribbling connections are closed.

use crate::common::{deployment, fresh_sqlite, review, Server};
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A standalone server with a small portal pool and 1–2 s timeouts.
async fn start(max_http: usize) -> (bizrq::Running, Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.max_connections = max_http;
    args.header_read_timeout_seconds = 1;
    args.idle_timeout_seconds = 2;
    args.webhook_idle_timeout_seconds = 2;
    args.tls_handshake_timeout_seconds = 1;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let server = Server::in_process(&running);
    (running, server, dir)
}

fn metric(running: &bizrq::Running, line: &str) -> Option<f64> {
    running
        .service
        .metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
}

/// Wait (up to `within`) until the server closes `c`: EOF or a reset.
/// Returns how long it took, None if it stayed open.
async fn closed_within(c: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(
            tokio::time::Instant::from_std(started + within),
            c.read(&mut buf),
        )
        .await
        {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue, // a response (e.g. 408) before the close
        }
    }
}

async fn connect_many(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for i in 0..n {
        let Ok(mut c) = TcpStream::connect(addr).await else {
            continue;
        };
        if i % 2 == 0 {
            // Half of them start a request and never finish its headers.
            let _ = c
                .write_all(b"GET / HTTP/1.1\r\nHost: bizrq\r\nX-Slow: ")
                .await;
        }
        held.push(c);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_portal_connections_leave_admissions_prompt() {
    let (running, s, _dir) = start(100).await;
    s.create_quota("team", "", json!({"requests.nvidia.com/gpu": "1000"}))
        .await;
    // 420 clients hold portal connections, idle or dribbling headers: the
    // portal pool (100) fills, and the rest are closed at accept.
    let mut held = connect_many(running.http_addr, 420).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let open = metric(&running, "bizrq_open_connections{listener=\"http\"}");
    assert_eq!(open, Some(100.0), "the portal pool is full");
    assert!(
        metric(
            &running,
            "bizrq_connections_closed_total{listener=\"http\",reason=\"limit\"}"
        )
        .unwrap_or(0.0)
            >= 300.0
    );
    // The webhook's pool is its own: admissions answer at once.
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let d = deployment(&format!("w{i}"), "team", 1, 1);
        let r = s
            .review(
                "/validate/workloads",
                &review("deployment-create.json", &format!("u-{i}"), Some(d), None),
            )
            .await;
        assert_eq!(r["allowed"], true, "{r}");
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_secs(1),
        "slowest admission {slowest:?}"
    );
    // The held connections are closed by the timeouts (header 1 s, idle
    // 2 s), and the portal serves again.
    for c in held.iter_mut().take(10) {
        assert!(
            closed_within(c, Duration::from_secs(6)).await.is_some(),
            "a held portal connection was closed"
        );
    }
    for _ in 0..100 {
        if metric(&running, "bizrq_open_connections{listener=\"http\"}") == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        metric(&running, "bizrq_open_connections{listener=\"http\"}"),
        Some(0.0)
    );
    let (status, body) = s.get_text("/healthz").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_and_dribbling_connections_are_closed_after_the_timeout() {
    let (running, _s, _dir) = start(100).await;
    // Connected, never a byte: closed after the idle timeout (2 s).
    let mut silent = TcpStream::connect(running.http_addr).await.unwrap();
    let took = closed_within(&mut silent, Duration::from_secs(6)).await;
    assert!(
        took.is_some_and(|t| t >= Duration::from_millis(1500)),
        "silent portal connection: {took:?}"
    );
    // Headers begun and never ended: closed after the header timeout (1 s).
    let mut partial = TcpStream::connect(running.http_addr).await.unwrap();
    partial.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    let took = closed_within(&mut partial, Duration::from_secs(6)).await;
    assert!(took.is_some(), "partial headers: still open");
    // One header byte every 200 ms keeps it busy but does not keep it
    // open: the header timeout counts from the request's first byte.
    let mut dribble = TcpStream::connect(running.http_addr).await.unwrap();
    dribble.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(6) {
        if dribble.write_all(b"X").await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(200), dribble.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            _ => {}
        }
    }
    assert!(closed, "a dribbling client was closed");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "closed after {:?}",
        started.elapsed()
    );
    // The webhook: a TCP connection that never starts TLS is closed after
    // the handshake timeout (1 s).
    let mut no_tls = TcpStream::connect(running.webhook_addr).await.unwrap();
    let took = closed_within(&mut no_tls, Duration::from_secs(6)).await;
    assert!(took.is_some(), "webhook connection without a handshake");
    assert!(metric(
        &running,
        "bizrq_connections_closed_total{listener=\"webhook\",reason=\"tls_handshake_timeout\"}"
    )
    .is_some_and(|n| n >= 1.0));
    assert!(metric(
        &running,
        "bizrq_connections_closed_total{listener=\"http\",reason=\"header_timeout\"}"
    )
    .is_some_and(|n| n >= 1.0));
    running.shutdown().await;
}
