//! The two listeners (portal/API over HTTP, webhook over HTTPS) and what
//! each grants a client: a connection slot out of its own pool, a TLS
//! handshake bounded in time, headers bounded in time, a request bounded in
//! time, and a connection closed after a spell without a byte either way.
//!
//! Why each bound: a client that opens connections and sends nothing (or
//! one header byte at a time) costs a socket, a task and buffers for as long
//! as we let it. The pools are per listener so that portal load, however
//! slow or idle, never takes a slot the API server needs for admissions.
//! Over its pool a listener accepts and closes at once (the client sees a
//! reset, not a hang, and the kernel's backlog stays short).

use crate::metrics::Metrics;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::ServiceExt;

/// What one listener grants its clients.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open connections; one more is closed at accept.
    pub max_connections: usize,
    /// From the first byte of a request (or of an idle keep-alive wait) to
    /// the end of its headers (HTTP/1).
    pub header_read: Duration,
    /// No byte read or written for this long: the connection is closed
    /// (gracefully first: HTTP/2 GOAWAY, HTTP/1 close after the response).
    pub idle: Duration,
    /// A request, body included, from its headers to its response.
    pub request: Duration,
    /// TLS listeners: from accept to a finished handshake.
    pub tls_handshake: Duration,
    /// Concurrent HTTP/2 streams per connection.
    pub max_streams: u32,
}

/// How long connections get to finish when the server shuts down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Read buffer cap of an HTTP/1 connection: headers beyond it are refused.
const MAX_BUF: usize = 64 * 1024;
/// HTTP/2 flow-control windows: what one connection may make us buffer.
const H2_WINDOW: u32 = 256 * 1024;

/// Serve `router` on `listener` (over TLS with `tls`) until `shutdown`
/// turns true; then stop accepting and give open connections
/// `SHUTDOWN_GRACE` to finish.
pub fn serve(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    tls: Option<RustlsConfig>,
    limits: Limits,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(MAX_BUF);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams)
        .initial_connection_window_size(H2_WINDOW)
        .initial_stream_window_size(H2_WINDOW);
    let builder = Arc::new(builder);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off.
                        tracing::warn!(listener = name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stopped(&mut shutdown) => break,
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                metrics.count_connection_closed(name, "limit");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let conn = Conn {
                name,
                peer,
                router: router.clone(),
                builder: builder.clone(),
                limits: limits.clone(),
                metrics: metrics.clone(),
                shutdown: shutdown.clone(),
            };
            let tls = tls.as_ref().map(|c| c.get_inner());
            tokio::spawn(async move {
                let open = conn.metrics.connections(name);
                open.inc();
                conn.run(stream, tls).await;
                open.dec();
                drop(slot);
            });
        }
        drop(listener);
        // Every slot back: every connection has ended.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, slots.acquire_many(max as u32)).await;
    })
}

/// Resolves once `shutdown` is true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|v| *v).await;
}

struct Conn {
    name: &'static str,
    peer: SocketAddr,
    router: Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: Limits,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
}

impl Conn {
    async fn run(self, stream: tokio::net::TcpStream, tls: Option<Arc<rustls::ServerConfig>>) {
        let activity = Arc::new(Activity::new());
        let io = Tracked {
            inner: stream,
            activity: activity.clone(),
        };
        match tls {
            None => self.drive(io, activity).await,
            Some(config) => {
                let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
                match tokio::time::timeout(self.limits.tls_handshake, accept).await {
                    Ok(Ok(tls)) => self.drive(tls, activity).await,
                    Ok(Err(e)) => {
                        self.metrics.count_connection_closed(self.name, "tls_error");
                        tracing::debug!(listener = self.name, peer = %self.peer, error = %e, "TLS handshake failed")
                    }
                    Err(_) => {
                        self.metrics
                            .count_connection_closed(self.name, "tls_handshake_timeout");
                        tracing::debug!(listener = self.name, peer = %self.peer, "TLS handshake timed out")
                    }
                }
            }
        }
    }

    async fn drive<I>(mut self, io: I, activity: Arc<Activity>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (router, peer, request) = (self.router.clone(), self.peer, self.limits.request);
        let service = tower::service_fn(move |mut req: Request<Incoming>| {
            let router = router.clone();
            async move {
                // The portal rate-limits logins by peer address.
                req.extensions_mut().insert(ConnectInfo(peer));
                let response = match tokio::time::timeout(request, router.oneshot(req)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(never)) => match never {},
                    Err(_) => (StatusCode::REQUEST_TIMEOUT, "request not completed in time")
                        .into_response(),
                };
                Ok::<_, Infallible>(response)
            }
        });
        let service = hyper_util::service::TowerToHyperService::new(service);
        let conn = self.builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        // Set once the connection is asked to close: the moment after which
        // it is dropped whatever it is doing.
        let mut closing: Option<Instant> = None;
        loop {
            let wake = closing.unwrap_or_else(|| activity.last() + self.limits.idle);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        let timeout = e
                            .downcast_ref::<hyper::Error>()
                            .is_some_and(|e| e.is_timeout());
                        if timeout {
                            self.metrics.count_connection_closed(self.name, "header_timeout");
                        }
                        tracing::debug!(listener = self.name, peer = %self.peer, error = %e, "connection ended");
                    }
                    return;
                }
                _ = tokio::time::sleep_until(wake) => {
                    if closing.is_some() {
                        tracing::debug!(listener = self.name, peer = %self.peer, "connection did not close in time; dropped");
                        return;
                    }
                    if activity.last() + self.limits.idle <= Instant::now() {
                        self.metrics.count_connection_closed(self.name, "idle");
                        conn.as_mut().graceful_shutdown();
                        // What is in flight may finish; no new request starts.
                        closing = Some(Instant::now() + self.limits.request);
                    }
                }
                _ = stopped(&mut self.shutdown), if closing.is_none() => {
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + SHUTDOWN_GRACE);
                }
            }
        }
    }
}

/// When a connection last moved a byte.
struct Activity {
    /// Milliseconds since `base()`.
    at: AtomicU64,
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl Activity {
    fn new() -> Activity {
        let a = Activity {
            at: AtomicU64::new(0),
        };
        a.touch();
        a
    }

    fn touch(&self) {
        let ms = Instant::now().duration_since(base()).as_millis() as u64;
        self.at.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        base() + Duration::from_millis(self.at.load(Ordering::Relaxed))
    }
}

/// A socket that notes every byte it moves in its `Activity`.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
