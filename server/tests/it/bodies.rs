//! Request bodies cost memory only within a budget: a client that starts
//! many large bodies and stalls them cannot grow a real bizrq process
//! past it (the pod's OOM kill would take the webhook with it), and
//! admissions keep answering meanwhile.

use crate::common::{deployment, fresh_sqlite, poll_until, review, Browser, Server, TOKEN};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A line of /proc/PID/status, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// One client: an authenticated API request announcing a body just under
/// the 1 MiB limit, sending all of it but the last KiB, then waiting.
async fn stalled_body(from: &str, addr: std::net::SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let Ok(mut c) = socket.connect(addr).await else {
        return;
    };
    let len = (1 << 20) - 1024;
    let head = format!(
        "POST /api/v1/quotas HTTP/1.1\r\nHost: bizrq\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    if c.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent + chunk.len() < len {
        if c.write_all(&chunk).await.is_err() {
            return;
        }
        sent += chunk.len();
    }
    // Hold the connection (and the server's buffers) until aborted.
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_request_bodies_keep_memory_bounded_and_admissions_answering() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    s.create_quota("team", "", json!({"requests.nvidia.com/gpu": "1000"}))
        .await;
    let pid = s.pid();
    let http: std::net::SocketAddr = s.http.trim_start_matches("http://").parse().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = status_kib(pid, "VmRSS:");
    // 300 bodies of ~1 MiB from 6 addresses (under the per-address cap
    // of 64): ~300 MiB if each were buffered whole.
    let mut clients = Vec::new();
    for i in 0..300 {
        let from = format!("127.0.0.{}", 2 + i % 6);
        clients.push(tokio::spawn(async move { stalled_body(&from, http).await }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Admissions answer meanwhile.
    for i in 0..5 {
        let started = Instant::now();
        let d = deployment(&format!("w{i}"), "team", 1, 1);
        let r = s
            .review(
                "/validate/workloads",
                &review("deployment-create.json", &format!("u-{i}"), Some(d), None),
            )
            .await;
        assert_eq!(r["allowed"], true, "{r}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    // Until the budget has turned some away: the portal reads bodies on
    // its niced runtime, which a loaded machine's other processes (a
    // whole test run) may keep waiting; the memory is measured after.
    let exhausted = poll_until(120, Duration::from_millis(500), || async {
        let (_, metrics) = s.get_text("/metrics").await;
        metrics
            .lines()
            .any(|l| l.starts_with("bizrq_body_budget_exhausted_total{listener=\"http\"}"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let peak = status_kib(pid, "VmHWM:");
    let grown_mib = peak.saturating_sub(before) / 1024;
    for c in &clients {
        c.abort();
    }
    // The budget is 64 MiB of bodies; hyper's own buffers and the
    // allocator's slack come on top. Unbounded, this is ~300 MiB.
    assert!(
        grown_mib < 140,
        "bizrq grew by {grown_mib} MiB under stalled bodies (RSS before: {} MiB)",
        before / 1024
    );
    let (_, metrics) = s.get_text("/metrics").await;
    assert!(
        exhausted.is_some(),
        "some requests were turned away: {metrics}"
    );
}

/// Without a session token to compare with, the CSRF check fails whatever
/// the body holds: the answer comes before the body does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_without_a_session_is_refused_before_its_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let mut c = tokio::net::TcpStream::connect(running.http_addr)
        .await
        .unwrap();
    c.write_all(
        b"POST /login HTTP/1.1\r\nHost: bizrq\r\n\
          Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(3), c.read_exact(&mut head))
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 403");
    running.shutdown().await;
}

/// A login form is a few hundred bytes: someone not logged in gets at
/// most 16 KiB of form read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_form_from_someone_not_logged_in_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let b = Browser::new(&Server::in_process(&running));
    assert_eq!(b.get("/login").await.status, reqwest::StatusCode::OK);
    let padding = "x".repeat(20 * 1024);
    let p = b
        .post(
            "/login",
            &[
                ("username", "admin"),
                ("password", "wrong"),
                ("padding", &padding),
            ],
        )
        .await;
    assert_eq!(
        p.status,
        reqwest::StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        p.body
    );
    // The same form without the padding reaches the login.
    let p = b
        .post("/login", &[("username", "admin"), ("password", "wrong")])
        .await;
    assert_ne!(p.status, reqwest::StatusCode::PAYLOAD_TOO_LARGE);
    assert_ne!(p.status, reqwest::StatusCode::FORBIDDEN, "{}", p.body);
    running.shutdown().await;
}
