//! Slow and idle clients: each listener has its own connection pool and
//! timeouts, so connections held on the portal port cost the webhook
//! nothing, and half-open or dribbling connections are closed.

use crate::common::{deployment, fresh_sqlite, poll_until, review, Server};
use crate::support::metric_in;
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A standalone server with a small portal pool and 1–2 s timeouts.
async fn start(max_http: usize) -> (bizrq::Running, Server, tempfile::TempDir) {
    start_with_timeouts(max_http, 1, 2).await
}

/// A standalone server with a small portal pool and the given portal
/// header and idle timeouts (seconds).
async fn start_with_timeouts(
    max_http: usize,
    header_seconds: u64,
    idle_seconds: u64,
) -> (bizrq::Running, Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.max_connections = max_http;
    // Many clients from one address here: the per-address cap is tested
    // on its own.
    args.max_connections_per_ip = 0;
    args.header_read_timeout_seconds = header_seconds;
    args.idle_timeout_seconds = idle_seconds;
    args.webhook_idle_timeout_seconds = 2;
    args.tls_handshake_timeout_seconds = 1;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let server = Server::in_process(&running);
    (running, server, dir)
}

/// Poll `line` until it reads `want` (up to 20 s): a listener's accept
/// loop, niced on the portal, may lag on a loaded machine. Returns the
/// last reading.
async fn metric_reaches(running: &bizrq::Running, line: &str, want: f64) -> Option<f64> {
    poll_until(200, Duration::from_millis(100), || async {
        (metric_in(&running.service.metrics.render(), line) == Some(want)).then_some(want)
    })
    .await
    .or_else(|| metric_in(&running.service.metrics.render(), line))
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
    // Timeouts long enough that the pool is still full when it is looked
    // at: the niced portal listener may take seconds to accept 420
    // connections on a loaded machine, and with 1–2 s timeouts the first
    // ones were closed (and the pool emptied) before the last arrived.
    let (running, s, _dir) = start_with_timeouts(100, 8, 10).await;
    s.create_quota("team", "", json!({"requests.nvidia.com/gpu": "1000"}))
        .await;
    // 420 clients hold portal connections, idle or dribbling headers: the
    // portal pool (100) fills, and the rest are closed at accept.
    let mut held = connect_many(running.http_addr, 420).await;
    // The portal's listener runs niced (docs/limits.md): on a busy machine
    // it accepts and closes later than admissions would; wait for it.
    for _ in 0..100 {
        let closed = metric_in(
            &running.service.metrics.render(),
            "bizrq_connections_closed_total{listener=\"http\",reason=\"limit\"}",
        )
        .unwrap_or(0.0);
        let open = metric_in(
            &running.service.metrics.render(),
            "bizrq_open_connections{listener=\"http\"}",
        );
        if closed >= 300.0 && open == Some(100.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open = metric_in(
        &running.service.metrics.render(),
        "bizrq_open_connections{listener=\"http\"}",
    );
    assert_eq!(open, Some(100.0), "the portal pool is full");
    assert!(
        metric_in(
            &running.service.metrics.render(),
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
    // The held connections are closed by the timeouts (header 8 s, idle
    // 10 s), and the portal serves again.
    for c in held.iter_mut().take(10) {
        assert!(
            closed_within(c, Duration::from_secs(20)).await.is_some(),
            "a held portal connection was closed"
        );
    }
    for _ in 0..200 {
        if metric_in(
            &running.service.metrics.render(),
            "bizrq_open_connections{listener=\"http\"}",
        ) == Some(0.0)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        metric_in(
            &running.service.metrics.render(),
            "bizrq_open_connections{listener=\"http\"}"
        ),
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
    // Counted right after the timeout drops the socket: the client may see
    // the close first.
    let timed_out = || {
        metric_in(
            &running.service.metrics.render(),
            "bizrq_connections_closed_total{listener=\"webhook\",reason=\"tls_handshake_timeout\"}",
        )
        .is_some_and(|n| n >= 1.0)
    };
    for _ in 0..40 {
        if timed_out() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(timed_out(), "the handshake timeout counted");
    assert!(metric_in(
        &running.service.metrics.render(),
        "bizrq_connections_closed_total{listener=\"http\",reason=\"header_timeout\"}"
    )
    .is_some_and(|n| n >= 1.0));
    running.shutdown().await;
}

/// A connection from `ip` (a loopback address other than 127.0.0.1: a
/// second client machine) to `addr`.
async fn connect_from(ip: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{ip}:0").parse().unwrap())?;
    socket.connect(addr).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_while_the_portal_pool_is_full() {
    // The pool must still be full when the probes are asked: timeouts
    // longer than a loaded machine's accept lag.
    let (running, _s, _dir) = start_with_timeouts(20, 8, 10).await;
    let _held = connect_many(running.http_addr, 40).await;
    assert_eq!(
        metric_reaches(&running, "bizrq_open_connections{listener=\"http\"}", 20.0).await,
        Some(20.0),
        "the portal pool is full"
    );
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(
        c.get(format!("http://{}/healthz", running.http_addr))
            .send()
            .await
            .is_err(),
        "the portal port turns clients away"
    );
    for path in ["/healthz", "/readyz"] {
        let r = c
            .get(format!("http://{}{path}", running.probe_addr))
            .send()
            .await
            .expect("the probe port answers");
        assert_eq!(r.status(), reqwest::StatusCode::OK, "{path}");
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_the_whole_portal_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.max_connections = 40;
    args.max_connections_per_ip = 10;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..30 {
        if let Ok(c) = connect_from("127.0.0.2", running.http_addr).await {
            held.push(c);
        }
    }
    assert_eq!(
        metric_reaches(
            &running,
            "bizrq_connections_closed_total{listener=\"http\",reason=\"peer_limit\"}",
            20.0
        )
        .await,
        Some(20.0)
    );
    assert_eq!(
        metric_in(
            &running.service.metrics.render(),
            "bizrq_open_connections{listener=\"http\"}"
        ),
        Some(10.0)
    );
    // Another address still gets in.
    let (status, _) = Server::in_process(&running).get_text("/healthz").await;
    assert_eq!(status, reqwest::StatusCode::OK);
    running.shutdown().await;
}

/// Connections that never start TLS cannot lock the API servers out: a
/// new handshake evicts the oldest pending one, and none holds a slot of
/// the authenticated connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_cannot_lock_new_api_server_connections_out_of_the_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.webhook_max_connections = 8;
    args.webhook_max_connections_per_ip = 0;
    // Long enough that the timeout alone would not free the pool.
    args.tls_handshake_timeout_seconds = 30;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota("team", "", json!({"requests.nvidia.com/gpu": "1000"}))
        .await;
    let mut held = Vec::new();
    for _ in 0..50 {
        if let Ok(c) = connect_from("127.0.0.2", running.webhook_addr).await {
            held.push(c);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..5 {
        // A new connection each time, as an API server that reconnects.
        let fresh = Server::in_process(&running);
        let started = Instant::now();
        let d = deployment(&format!("w{i}"), "team", 1, 1);
        let r = fresh
            .review(
                "/validate/workloads",
                &review("deployment-create.json", &format!("u-{i}"), Some(d), None),
            )
            .await;
        assert_eq!(r["allowed"], true, "{r}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The silent ones keep coming.
        for _ in 0..10 {
            if let Ok(c) = connect_from("127.0.0.2", running.webhook_addr).await {
                held.push(c);
            }
        }
    }
    assert!(metric_in(
        &running.service.metrics.render(),
        "bizrq_connections_closed_total{listener=\"webhook\",reason=\"handshake_evicted\"}"
    )
    .is_some_and(|n| n >= 40.0));
    running.shutdown().await;
}

/// One address has at most its cap of webhook connections in or past
/// their handshake; one more is not closed at accept but waits, up to the
/// handshake timeout, for a place, and then has its handshake's own time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_is_capped_on_the_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = bizrq::config::ServeArgs::for_tests(&fresh_sqlite(&dir));
    args.webhook_max_connections_per_ip = 4;
    args.tls_handshake_timeout_seconds = 3;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let mut first = Vec::new();
    for _ in 0..4 {
        first.push(
            connect_from("127.0.0.2", running.webhook_addr)
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Six more, 1.5 s later: over the cap, they wait.
    let mut over = Vec::new();
    for _ in 0..6 {
        over.push(
            connect_from("127.0.0.2", running.webhook_addr)
                .await
                .unwrap(),
        );
    }
    let waiting = "bizrq_waiting_connections{listener=\"webhook\"}";
    let timed_out =
        "bizrq_connections_closed_total{listener=\"webhook\",reason=\"tls_handshake_timeout\"}";
    let peer_limit = "bizrq_connections_closed_total{listener=\"webhook\",reason=\"peer_limit\"}";
    assert_eq!(metric_reaches(&running, waiting, 6.0).await, Some(6.0));
    assert_eq!(
        closed_within(&mut over[5], Duration::from_millis(500)).await,
        None,
        "a connection over the cap waits; it is not closed at accept"
    );
    // At 3 s the first four end by the handshake timeout and four of the
    // six take their places (their handshakes end at 6 s); two still wait,
    // and end at 4.5 s without one.
    assert_eq!(metric_reaches(&running, timed_out, 4.0).await, Some(4.0));
    assert_eq!(metric_reaches(&running, waiting, 2.0).await, Some(2.0));
    assert_eq!(metric_reaches(&running, peer_limit, 2.0).await, Some(2.0));
    assert_eq!(metric_reaches(&running, waiting, 0.0).await, Some(0.0));
    assert_eq!(metric_reaches(&running, timed_out, 8.0).await, Some(8.0));
    for c in over.iter_mut().chain(first.iter_mut()) {
        assert!(closed_within(c, Duration::from_secs(3)).await.is_some());
    }
    assert_eq!(
        metric_in(&running.service.metrics.render(), peer_limit),
        Some(2.0)
    );
    // The API servers' address is not this one.
    let (status, _) = Server::in_process(&running)
        .post_review_raw(
            "/validate/workloads",
            serde_json::to_vec(&review("deployment-create.json", "u-1", None, None)).unwrap(),
        )
        .await;
    assert_eq!(status.as_u16(), 200);
    running.shutdown().await;
}

/// An API server calls webhooks over HTTP/1.1, one connection per review
/// in flight (the tests' API server as kube-apiserver): a burst of 60
/// creates dials past the per-address cap (40 here). Those dials wait
/// instead of being reset, and every create goes through: the reviews are
/// served on the API server's connections as they free. Before, the extra
/// dials were closed at accept and their creates refused ("connection
/// reset by peer" under failurePolicy Fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_servers_burst_of_dials_beyond_the_address_cap_is_served_not_reset() {
    let c = crate::cluster::Cluster::start_configured(|a| {
        a.webhook_max_connections_per_ip = 40;
    })
    .await;
    c.server
        .create_quota("ml", "", json!({"requests.cpu": "1000"}))
        .await;
    c.until("ml", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    // The burst is the first the API server sends after it restarted:
    // no connection is up.
    c.fake.restart_webhook_transports();
    let api = crate::support::jobs_of(&c, "alice", "ml");
    let creates = (0..60).map(|i| {
        let o = crate::support::job(&format!("burst-{i}"))
            .quota("ml")
            .cpu(1)
            .dynamic();
        let api = api.clone();
        async move {
            api.create(&kube::api::PostParams::default(), &o)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    });
    let refused: Vec<String> = futures::future::join_all(creates)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        refused.first()
    );
    c.until("ml", "all 60 charged", |q| {
        crate::cluster::used(q, "requests.cpu") == "60"
    })
    .await;
    c.running.shutdown().await;
}
