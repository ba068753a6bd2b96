//! The listeners (portal/API over HTTP, webhook over HTTPS, probes over
//! HTTP) and what each grants a client: a connection slot out of its own
//! pool, at most so many connections per peer address, a TLS handshake
//! bounded in time (and counted apart, so that a client which never
//! authenticates holds no slot of an authenticated one; a newer handshake
//! evicts the oldest rather than waiting for it), headers
//! bounded in time, a request bounded in time, a share of the listener's
//! budget of buffered body bytes, and a connection closed after a spell
//! without a byte either way.
//!
//! Why each bound: a client that opens connections and sends nothing (or
//! one header byte at a time, or a body it never finishes) costs a socket, a
//! task and buffers for as long as we let it. The pools are per listener so
//! that portal load, however slow or idle, never takes a slot the API server
//! needs for admissions, nor one the kubelet's probes need. Over a limit a
//! listener accepts and closes at once (the client sees the connection
//! closed, a FIN, not a hang, and the kernel's backlog stays short), but
//! for one: a TLS connection over its address's cap waits for a place
//! (an API server's burst of dials: `Peers::wait`), among at most as many
//! waiting as the listener has slots.
//!
//! Memory, at worst, per listener: `max_connections` × (`MAX_BUF` of
//! HTTP/1 headers or `H2_WINDOW` of unread HTTP/2 data) in hyper, plus
//! `body_budget` bytes of bodies being read by handlers; a request whose
//! body would go beyond the budget is answered 503.

use crate::metrics::Metrics;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::ServiceExt;

/// What one listener grants its clients.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open connections; one more is closed at accept. On a TLS listener
    /// these are connections past their handshake; as many handshakes may
    /// be in progress besides, and one more evicts the oldest.
    pub max_connections: usize,
    /// Open connections (handshakes included) from one peer address; one
    /// more is closed at accept, or on a TLS listener waits up to the
    /// handshake timeout for a place (at most `max_connections` waiting;
    /// more are closed at accept). 0: no cap.
    pub max_per_peer: usize,
    /// Bytes of request bodies that handlers may hold at once, over all the
    /// listener's requests; a request that would go beyond it gets 503.
    pub body_budget: usize,
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
/// HTTP/2 flow-control windows: what one connection may send us before a
/// handler reads it (hyper buffers it meanwhile). A handler that reads
/// opens the window again, so what handlers hold is bounded by the
/// listener's `body_budget`, not by this.
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
    // A TLS client is a handshake until it has authenticated, and only then
    // takes one of `slots`.
    let handshakes = Arc::new(Handshakes::new(max));
    let peers = Arc::new(Peers::default());
    // TLS connections over their address's cap, waiting for a place.
    let waits = Arc::new(Semaphore::new(max));
    let budget = Arc::new(Semaphore::new(
        limits.body_budget.clamp(1, Semaphore::MAX_PERMITS),
    ));
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
            let from_peer = peers.enter(peer.ip(), limits.max_per_peer);
            let first = if from_peer.is_none() {
                // Over its address's cap: a TLS connection waits for a
                // place (`Peers::wait`), a plain one is closed.
                let wait = tls
                    .as_ref()
                    .and_then(|_| waits.clone().try_acquire_owned().ok());
                let Some(slot) = wait else {
                    metrics.count_connection_closed(name, "peer_limit");
                    drop(stream);
                    continue;
                };
                First::Wait(Box::new(Wait {
                    peers: peers.clone(),
                    ip: peer.ip(),
                    max: limits.max_per_peer,
                    handshakes: handshakes.clone(),
                    _slot: slot,
                }))
            } else if tls.is_some() {
                let (handshake, evicted) = handshakes.begin();
                if evicted {
                    metrics.count_connection_closed(name, "handshake_evicted");
                }
                First::Handshake(handshake)
            } else {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    metrics.count_connection_closed(name, "limit");
                    drop(stream);
                    continue;
                };
                First::Slot(slot)
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
                budget: budget.clone(),
            };
            let tls = tls.as_ref().map(|c| (c.get_inner(), slots.clone()));
            tokio::spawn(async move {
                let _open = Counted::new(conn.metrics.connections(name));
                conn.run(stream, tls, first, from_peer).await;
            });
        }
        drop(listener);
        // Every slot back: every connection has ended.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, slots.acquire_many(max as u32)).await;
    })
}

/// What a connection holds from accept: a slot, or (TLS) a place among
/// the handshakes, or (TLS, over its address's cap) a place among those
/// waiting for one of the address's.
enum First {
    Slot(OwnedSemaphorePermit),
    Handshake(Handshake),
    Wait(Box<Wait>),
}

/// A TLS connection over its address's cap, waiting (`Peers::wait`).
struct Wait {
    peers: Arc<Peers>,
    ip: IpAddr,
    max: usize,
    /// Where its handshake takes a place once it has its address's.
    handshakes: Arc<Handshakes>,
    /// Its place among the waiting.
    _slot: OwnedSemaphorePermit,
}

/// TLS handshakes in progress, at most `max`. One more evicts the oldest
/// rather than being refused: a client that connects and never finishes
/// its handshake then holds its place only until `max` newer connections
/// arrive, and an API server's handshake (milliseconds) is not locked out
/// by connections that sit silent until the handshake timeout.
struct Handshakes {
    max: usize,
    next: AtomicU64,
    open: Mutex<std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>>,
}

/// One handshake in progress; `evicted` fires when a newer one takes its
/// place. Leaves the set when dropped.
struct Handshake {
    set: Arc<Handshakes>,
    id: u64,
    evicted: Arc<tokio::sync::Notify>,
}

impl Handshakes {
    fn new(max: usize) -> Handshakes {
        Handshakes {
            max: max.max(1),
            next: AtomicU64::new(0),
            open: Mutex::new(Default::default()),
        }
    }

    /// A place for one more handshake, and whether the oldest was evicted
    /// to make it.
    fn begin(self: &Arc<Self>) -> (Handshake, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = Arc::new(tokio::sync::Notify::new());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mut any = false;
        while open.len() >= self.max {
            if let Some((_, oldest)) = open.pop_front() {
                oldest.notify_one();
                any = true;
            }
        }
        open.push_back((id, evicted.clone()));
        let h = Handshake {
            set: self.clone(),
            id,
            evicted,
        };
        (h, any)
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut open = self.set.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = open.iter().position(|(id, _)| *id == self.id) {
            open.remove(i);
        }
    }
}

/// Open connections per peer address: a semaphore of `max` places per
/// address, in the map while anyone holds or waits for one of its places.
#[derive(Default)]
struct Peers {
    open: Mutex<HashMap<IpAddr, Arc<Semaphore>>>,
}

impl Peers {
    /// The places of `ip` (made with `max` where it has none yet).
    fn places(self: &Arc<Self>, ip: IpAddr, max: usize) -> Places {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let places = open
            .entry(ip)
            .or_insert_with(|| Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))))
            .clone();
        Places {
            peers: self.clone(),
            ip,
            max,
            places,
        }
    }

    /// One more connection from `ip`, unless it has `max` already (0: no
    /// cap). Its place is given back with the returned guard.
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<PeerGuard> {
        if max == 0 {
            return Some(PeerGuard {
                _permit: None,
                _places: None,
            });
        }
        let places = self.places(ip, max);
        let permit = places.places.clone().try_acquire_owned().ok()?;
        Some(PeerGuard {
            _permit: Some(permit),
            _places: Some(places),
        })
    }

    /// A place for one more connection from `ip` once it has fewer than
    /// `max`: waited for by a TLS connection over the cap, in turn (the
    /// semaphore is fair: a freed place wakes one waiting connection). An
    /// API server calls webhooks over HTTP/1.1, one connection per review
    /// in flight: in a burst it dials more than the cap, and closing the
    /// extra dials at accept failed their reviews (a reset, and a refused
    /// create under failurePolicy Fail), while waiting lets its
    /// connections serve them as they free (its pool hands a freed
    /// connection to a waiting request) and the client drop its extra
    /// dials. The address still has at most `max` connections in or past
    /// their handshake.
    async fn wait(self: &Arc<Self>, ip: IpAddr, max: usize) -> PeerGuard {
        let places = self.places(ip, max);
        let permit = places.places.clone().acquire_owned().await.ok();
        PeerGuard {
            _permit: permit,
            _places: Some(places),
        }
    }
}

/// A handle on an address's places; the last one dropped while every
/// place is free takes the address out of the map.
struct Places {
    peers: Arc<Peers>,
    ip: IpAddr,
    max: usize,
    places: Arc<Semaphore>,
}

impl Drop for Places {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|e| e.into_inner());
        // Held by the map and this handle alone (a permit holds a handle
        // too, dropped before it), every place free.
        let unused = Arc::strong_count(&self.places) == 2
            && self.places.available_permits() == self.max.min(Semaphore::MAX_PERMITS);
        if unused
            && open
                .get(&self.ip)
                .is_some_and(|p| Arc::ptr_eq(p, &self.places))
        {
            open.remove(&self.ip);
        }
    }
}

/// One connection counted in a gauge (`bizrq_open_connections`,
/// `bizrq_waiting_connections`) while this lives, however it ends.
struct Counted(prometheus_client::metrics::gauge::Gauge);

impl Counted {
    fn new(gauge: prometheus_client::metrics::gauge::Gauge) -> Counted {
        gauge.inc();
        Counted(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A connection's place among its address's (none without a cap).
/// Fields drop in order: the place goes back before the handle looks
/// whether the address is still in use.
struct PeerGuard {
    _permit: Option<OwnedSemaphorePermit>,
    _places: Option<Places>,
}

/// The body bytes one request has taken out of its listener's budget,
/// given back when the request is answered.
#[derive(Default)]
struct Share {
    held: Mutex<Option<OwnedSemaphorePermit>>,
    /// A chunk did not fit: the request is answered 503.
    refused: AtomicBool,
}

/// `body` read through `budget`: every chunk takes its size out of the
/// budget before a handler sees it, and a chunk that does not fit ends the
/// body with an error.
fn budgeted(body: Incoming, budget: Arc<Semaphore>, share: Arc<Share>) -> axum::body::Body {
    let chunks = axum::body::Body::new(body)
        .into_data_stream()
        .map(move |chunk| {
            let chunk = chunk.map_err(axum::BoxError::from)?;
            let n = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            match budget.clone().try_acquire_many_owned(n) {
                Ok(p) => {
                    let mut held = share.held.lock().unwrap_or_else(|e| e.into_inner());
                    match held.as_mut() {
                        Some(h) => h.merge(p),
                        None => *held = Some(p),
                    }
                    Ok(chunk)
                }
                Err(_) => {
                    share.refused.store(true, Ordering::Relaxed);
                    Err(axum::BoxError::from(
                        "the server's budget of request bodies is spent",
                    ))
                }
            }
        });
    axum::body::Body::from_stream(chunks)
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
    budget: Arc<Semaphore>,
}

impl Conn {
    /// `first`: what the connection took at accept; with TLS, a finished
    /// handshake then needs one of `slots`. `place`: its place among its
    /// address's connections (None: still to be waited for), held until
    /// it ends.
    async fn run(
        self,
        stream: tokio::net::TcpStream,
        tls: Option<(Arc<rustls::ServerConfig>, Arc<Semaphore>)>,
        first: First,
        place: Option<PeerGuard>,
    ) {
        let (first, _place) = match first {
            First::Wait(w) => {
                let Wait {
                    peers,
                    ip,
                    max,
                    handshakes,
                    _slot,
                } = *w;
                let mut shutdown = self.shutdown.clone();
                let waited = {
                    let _counted = Counted::new(self.metrics.waiting_connections(self.name));
                    tokio::select! {
                        w = tokio::time::timeout(self.limits.tls_handshake, peers.wait(ip, max)) => w.ok(),
                        // Shutting down: no new connection starts.
                        _ = stopped(&mut shutdown) => return,
                    }
                };
                let Some(guard) = waited else {
                    self.metrics
                        .count_connection_closed(self.name, "peer_limit");
                    tracing::debug!(listener = self.name, peer = %self.peer, "no place for this address before the handshake timeout");
                    return;
                };
                // Now a handshake like any, with its own time.
                let (handshake, evicted) = handshakes.begin();
                if evicted {
                    self.metrics
                        .count_connection_closed(self.name, "handshake_evicted");
                }
                (First::Handshake(handshake), Some(guard))
            }
            first => (first, place),
        };
        let activity = Arc::new(Activity::new());
        let io = Tracked {
            inner: stream,
            activity: activity.clone(),
        };
        match (tls, first) {
            (Some((config, slots)), First::Handshake(handshake)) => {
                let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
                let done = tokio::select! {
                    r = tokio::time::timeout(self.limits.tls_handshake, accept) => r,
                    _ = handshake.evicted.notified() => {
                        tracing::debug!(listener = self.name, peer = %self.peer, "TLS handshake evicted by a newer one");
                        return;
                    }
                };
                drop(handshake);
                match done {
                    Ok(Ok(tls)) => {
                        let Ok(_slot) = slots.try_acquire_owned() else {
                            self.metrics.count_connection_closed(self.name, "limit");
                            return;
                        };
                        self.drive(tls, activity).await
                    }
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
            (_, first) => {
                self.drive(io, activity).await;
                // The slot is held for the connection's whole life.
                if let First::Slot(slot) = first {
                    drop(slot);
                }
            }
        }
    }

    async fn drive<I>(mut self, io: I, activity: Arc<Activity>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (router, peer, request) = (self.router.clone(), self.peer, self.limits.request);
        let (budget, metrics, name) = (self.budget.clone(), self.metrics.clone(), self.name);
        let service = tower::service_fn(move |req: Request<Incoming>| {
            let (router, budget, metrics) = (router.clone(), budget.clone(), metrics.clone());
            async move {
                let (mut parts, body) = req.into_parts();
                // The portal rate-limits logins by peer address.
                parts.extensions.insert(ConnectInfo(peer));
                let share = Arc::new(Share::default());
                let req = Request::from_parts(parts, budgeted(body, budget, share.clone()));
                let response = match tokio::time::timeout(request, router.oneshot(req)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(never)) => match never {},
                    Err(_) => (StatusCode::REQUEST_TIMEOUT, "request not completed in time")
                        .into_response(),
                };
                let response = if share.refused.load(Ordering::Relaxed) {
                    metrics
                        .body_budget_exhausted
                        .get_or_create(&crate::metrics::ListenerLabels {
                            listener: name.into(),
                        })
                        .inc();
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(axum::http::header::RETRY_AFTER, "1")],
                        "bizrq is reading too many request bodies at once; try again",
                    )
                        .into_response()
                } else {
                    response
                };
                // The bytes this request held go back with it.
                drop(share);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Over its cap an address's connection waits in turn for a place;
    /// the address is forgotten once nothing holds or waits for one.
    #[tokio::test]
    async fn a_connection_waits_in_turn_and_an_unused_address_is_forgotten() {
        let peers = Arc::new(Peers::default());
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let first = peers.enter(ip, 1).expect("a place");
        assert!(peers.enter(ip, 1).is_none(), "over the cap");
        let waiting = tokio::spawn({
            let peers = peers.clone();
            async move { peers.wait(ip, 1).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "it waits while the place is held");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the freed place is its")
            .unwrap();
        assert!(peers.enter(ip, 1).is_none(), "the waiter holds it now");
        drop(second);
        assert!(peers.open.lock().unwrap().is_empty(), "forgotten");
        // A wait given up leaves nothing behind.
        let third = peers.enter(ip, 1).expect("a place");
        let gave_up = tokio::time::timeout(Duration::from_millis(20), peers.wait(ip, 1)).await;
        assert!(gave_up.is_err());
        drop(third);
        assert!(peers.open.lock().unwrap().is_empty(), "forgotten");
        // No cap: never waits, never kept.
        let free: Vec<_> = (0..3).filter_map(|_| peers.enter(ip, 0)).collect();
        assert_eq!(free.len(), 3);
        assert!(peers.open.lock().unwrap().is_empty());
    }
}
