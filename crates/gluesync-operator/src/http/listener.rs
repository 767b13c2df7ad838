//! The one way GKO serves HTTP, for the Conductor API and for `/metrics`: whatever reaches the port may
//! hold a connection only while it uses it.
//!
//! - A connection must send a complete request (its headers) within [`Limits::request_header`] of being
//!   accepted (a TLS handshake and the HTTP/1-or-HTTP/2 detection included): a connection that sends
//!   nothing or half a request is closed. After an answer, a keep-alive or HTTP/2 connection that sends
//!   no new request within [`Limits::keep_alive`] is closed (longer than the header timeout, and than the
//!   60 s an ingress keeps its idle upstream connections, so that GKO never closes one an ingress is
//!   about to reuse). A request in flight is bounded by the handlers' own timeouts, not by these.
//! - At most [`Limits::connections`] are open at once. At the bound, a new connection closes the one that
//!   has been idle the longest (no request in flight), so that silent connections can never keep a caller
//!   out; when every connection has a request in flight, the new one is closed at once.
//! - At most [`Limits::unanswered`] of them may stay unanswered (no request of theirs has reached a
//!   handler, so none is authenticated) longer than [`UNANSWERED_GRACE`]: a new connection closes the
//!   oldest beyond that, so what strangers hold stays small whatever they send, while a burst of new
//!   callers that send their requests at once is never cut.
//! - A request's head (its request line and headers) is at most [`MAX_HEAD`] bytes: longer, HTTP/1 is
//!   answered 431 and closed, HTTP/2 is refused the stream; a peer's unfinished head is never buffered
//!   past it.
//! - At most [`Limits::streams`] requests at once on one HTTP/2 connection, each with a flow-control
//!   window of [`H2_STREAM_WINDOW`] bytes ([`H2_CONNECTION_WINDOW`] for the connection): what a peer may send
//!   before a handler reads it.
//!
//! The counters say what was closed and why (`gluesync_operator_http_connections_closed_total`).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, extract::ConnectInfo};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto::Builder,
    service::TowerToHyperService,
};
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use tokio::{
    net::TcpListener,
    sync::{Notify, watch},
    time::Instant,
};
use tower::ServiceExt;

/// The longest request head (request line and headers, or an HTTP/2 header list) a listener reads.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long a new connection may go unanswered before it counts against [`Limits::unanswered`].
pub const UNANSWERED_GRACE: Duration = Duration::from_secs(1);
/// HTTP/2 flow-control windows: what a peer may send on a stream, and on the connection, unread.
pub const H2_STREAM_WINDOW: u32 = 64 * 1024;
pub const H2_CONNECTION_WINDOW: u32 = 256 * 1024;

/// How long a connection told to close (GKO stopping, or idle) may take to say goodbye.
const GOODBYE: Duration = Duration::from_secs(1);
/// How long the open connections get to finish when GKO stops.
const DRAIN: Duration = Duration::from_secs(5);

/// What one listener allows, and the counters it keeps.
#[derive(Clone)]
pub struct Limits {
    /// Connections open at once.
    pub connections: usize,
    /// Of those, connections unanswered (no request has reached a handler) for longer than
    /// [`UNANSWERED_GRACE`]: at most this many once a new connection comes.
    pub unanswered: usize,
    /// Time a new connection has to send a complete request.
    pub request_header: Duration,
    /// Time a connection that was answered has to send its next request.
    pub keep_alive: Duration,
    /// Requests at once on one HTTP/2 connection.
    pub streams: u32,
    pub counters: Counters,
}

/// What a listener counts (cheap handles, registered with GKO's metrics).
#[derive(Clone, Default)]
pub struct Counters {
    /// Connections open now.
    pub open: Gauge,
    /// Closed because no complete request came within the header timeout.
    pub idle: Counter,
    /// Closed to make room for a new connection at the bound (of all, or of the unanswered).
    pub evicted: Counter,
    /// Closed at once: the bound was reached and every connection had a request in flight.
    pub refused: Counter,
}

/// One open connection: how many requests it has in flight, since when it has had none, and whether it
/// was answered once.
struct Conn {
    busy: watch::Sender<(usize, Instant, bool)>,
    close: Notify,
}

impl Conn {
    fn in_flight(&self) -> usize {
        self.busy.borrow().0
    }
}

/// A request in flight on a connection; the connection counts as idle again when the last one ends.
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: &Arc<Conn>) -> Busy {
        conn.busy.send_modify(|(n, _, _)| *n += 1);
        Busy(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.send_modify(|(n, since, answered)| {
            *n = n.saturating_sub(1);
            *since = Instant::now();
            *answered = true;
        });
    }
}

/// The open connections of a listener, oldest first.
#[derive(Default)]
struct Registry {
    open: Mutex<(u64, BTreeMap<u64, Arc<Conn>>)>,
    /// Signalled when a connection ends (GKO stopping waits for the last).
    ended: Notify,
}

impl Registry {
    /// Registers a new connection, closing the oldest unanswered one at that bound and the one idle the
    /// longest at the bound of all; `None` when every open connection has a request in flight.
    fn admit(&self, limits: &Limits) -> Option<(u64, Arc<Conn>)> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // Connections unanswered for longer than UNANSWERED_GRACE, oldest first: beyond the bound, the
        // oldest go (a burst of new callers, each sending its request at once, is never cut).
        let mut unanswered: Vec<(Instant, u64)> = open
            .1
            .iter()
            .filter_map(|(id, c)| {
                let (busy, since, answered) = *c.busy.borrow();
                (busy == 0 && !answered && since.elapsed() >= UNANSWERED_GRACE)
                    .then_some((since, *id))
            })
            .collect();
        unanswered.sort_unstable();
        let beyond = (unanswered.len() + 1).saturating_sub(limits.unanswered);
        for (_, id) in unanswered.into_iter().take(beyond) {
            if let Some(conn) = open.1.remove(&id) {
                limits.counters.evicted.inc();
                conn.close.notify_one();
            }
        }
        if open.1.len() >= limits.connections {
            // The connection idle the longest: a new one that has not sent its request yet is the
            // last to go.
            let oldest_idle = open
                .1
                .iter()
                .filter_map(|(id, c)| {
                    let (busy, since, _) = *c.busy.borrow();
                    (busy == 0).then_some((since, *id))
                })
                .min()
                .map(|(_, id)| id);
            let Some(id) = oldest_idle else {
                limits.counters.refused.inc();
                return None;
            };
            if let Some(conn) = open.1.remove(&id) {
                limits.counters.evicted.inc();
                conn.close.notify_one();
            }
        }
        open.0 += 1;
        let id = open.0;
        let conn = Arc::new(Conn {
            busy: watch::channel((0, Instant::now(), false)).0,
            close: Notify::new(),
        });
        open.1.insert(id, conn.clone());
        // The gauge is the registry's size: an evicted connection no longer counts, even before its
        // task has closed its socket.
        limits.counters.open.set(open.1.len() as i64);
        Some((id, conn))
    }

    fn remove(&self, id: u64, gauge: &Gauge) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.1.remove(&id);
        gauge.set(open.1.len() as i64);
        drop(open);
        self.ended.notify_waiters();
    }

    fn is_empty(&self) -> bool {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .is_empty()
    }
}

/// A connection's place in the registry and in the gauge, given back when its task ends.
struct Admitted {
    registry: Arc<Registry>,
    id: u64,
    open: Gauge,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.registry.remove(self.id, &self.open);
    }
}

/// Serves `app` on `listener` (over TLS with `tls`, whose certificate may be reloaded while it serves)
/// until `shutdown` resolves; then stops accepting and gives the open connections [`DRAIN`] to finish.
/// Handlers find the peer's address as [`ConnectInfo<SocketAddr>`].
pub async fn serve(
    listener: TcpListener,
    tls: Option<axum_server::tls_rustls::RustlsConfig>,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    // The header timeout is this module's own (below), the same for both protocols and counted.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(MAX_HEAD);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.streams)
        .max_header_list_size(MAX_HEAD as u32)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        // A peer that stops answering while a request is in flight is noticed.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(10));
    let builder = Arc::new(builder);
    let registry = Arc::new(Registry::default());
    let (stopping, stop) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted: the
                    // listener goes on after a breath.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some((id, conn)) = registry.admit(&limits) else {
            drop(stream);
            continue;
        };
        let admitted = Admitted {
            registry: registry.clone(),
            id,
            open: limits.counters.open.clone(),
        };
        let task = Connection {
            builder: builder.clone(),
            tls: tls.clone(),
            app: app.clone(),
            limits: limits.clone(),
            conn,
            stop: stop.clone(),
        };
        tokio::spawn(async move {
            let _admitted = admitted;
            task.run(stream, peer).await;
        });
    }
    let _ = stopping.send(true);
    let _ = tokio::time::timeout(DRAIN, async {
        while !registry.is_empty() {
            let ended = registry.ended.notified();
            if registry.is_empty() {
                break;
            }
            ended.await;
        }
    })
    .await;
    Ok(())
}

/// What one connection's task needs.
struct Connection {
    builder: Arc<Builder<TokioExecutor>>,
    tls: Option<axum_server::tls_rustls::RustlsConfig>,
    app: Router,
    limits: Limits,
    conn: Arc<Conn>,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let deadline = Instant::now() + self.limits.request_header;
        match self.tls.clone() {
            None => self.http(stream, peer).await,
            Some(config) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(config.get_inner());
                let handshake = tokio::select! {
                    h = tokio::time::timeout_at(deadline, acceptor.accept(stream)) => h,
                    _ = self.conn.close.notified() => return,
                    _ = self.stop.wait_for(|s| *s) => return,
                };
                match handshake {
                    Ok(Ok(tls)) => self.http(tls, peer).await,
                    // A failed or slow handshake: the client is told nothing more.
                    Ok(Err(_)) => {}
                    Err(_) => {
                        self.limits.counters.idle.inc();
                    }
                }
            }
        }
    }

    async fn http<S>(&mut self, stream: S, peer: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let app = self.app.clone();
        let conn = self.conn.clone();
        let service =
            tower::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                let busy = Busy::new(&conn);
                req.extensions_mut().insert(ConnectInfo(peer));
                let app = app.clone();
                async move {
                    let resp = app.oneshot(req.map(axum::body::Body::new)).await;
                    drop(busy);
                    resp
                }
            });
        let served = self
            .builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        tokio::pin!(served);
        let mut busy = self.conn.busy.subscribe();
        let goodbye = loop {
            let (in_flight, since, answered) = *busy.borrow_and_update();
            let idle_until = since
                + if answered {
                    self.limits.keep_alive
                } else {
                    self.limits.request_header
                };
            tokio::select! {
                _ = &mut served => return,
                // Evicted: closed at once while idle; a request that started meanwhile is answered.
                _ = self.conn.close.notified() => {
                    if self.conn.in_flight() == 0 {
                        return;
                    }
                    break true;
                }
                _ = self.stop.wait_for(|s| *s) => break false,
                _ = busy.changed() => {}
                // A request may have begun in the same poll: only a connection still idle goes.
                _ = tokio::time::sleep_until(idle_until), if in_flight == 0 => {
                    if self.conn.in_flight() == 0 {
                        self.limits.counters.idle.inc();
                        break true;
                    }
                }
            }
        };
        // HTTP/2 gets its GOAWAY, an idle HTTP/1 connection is closed, a request in flight is answered
        // first (its handler's own timeouts bound it). When GKO stops, whatever is left after DRAIN is
        // dropped.
        served.as_mut().graceful_shutdown();
        loop {
            let wait = if goodbye { GOODBYE } else { DRAIN };
            match tokio::time::timeout(wait, &mut served).await {
                Ok(_) => return,
                Err(_) if goodbye && self.conn.in_flight() > 0 => continue,
                Err(_) => return,
            }
        }
    }
}
