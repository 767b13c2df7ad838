//! A fault proxy in front of the Kubernetes API server.
//!
//! The control plane is shared by every test, so its faults (the API server down, slow, dropping watches)
//! are not made by restarting it: a test puts a [`FaultProxy`] between the process under test and the API
//! server, points that process at the proxy with [`FaultProxy::kubeconfig`], and breaks the proxy instead.
//!
//! The proxy forwards raw TCP both ways, so TLS passes through untouched (the API server's certificate is
//! valid for 127.0.0.1, where the proxy listens). It runs on a thread of its own, so it keeps forwarding
//! whatever the test's runtime does (blocks, sleeps, runs on one thread).

use std::{
    io::Write as _,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
    },
    time::Duration,
};

use anyhow::{Context as _, bail};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{
        TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::watch,
};

use crate::ControlPlane;

/// A TCP proxy in front of an upstream (the API server) that a test can take down, slow down, or make drop
/// its open connections.
///
/// Dropping it closes its connections and its port, and removes the kubeconfigs it wrote.
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
    kubeconfigs: Mutex<Vec<PathBuf>>,
}

struct Shared {
    down: AtomicBool,
    /// Changes on every stop and start, so a `down_for` only ends the down time it began.
    down_epoch: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    open: AtomicU64,
    latency_ms: AtomicU64,
    /// Bumped to close every open connection.
    cut: watch::Sender<u64>,
    /// Set when the proxy is dropped.
    shutdown: watch::Sender<bool>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 (any free port) that forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> anyhow::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .context("binding the fault proxy's port")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            down: AtomicBool::new(false),
            down_epoch: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            open: AtomicU64::new(0),
            latency_ms: AtomicU64::new(0),
            cut: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the fault proxy's runtime")?;
        let handle = runtime.handle().clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn({
                let shared = shared.clone();
                move || {
                    runtime.block_on(accept_loop(listener, upstream, shared));
                    // Dropping the runtime drops every connection task and its sockets.
                }
            })
            .context("starting the fault proxy's thread")?;
        Ok(FaultProxy {
            addr,
            upstream,
            shared,
            runtime: handle,
            thread: Some(thread),
            kubeconfigs: Mutex::new(Vec::new()),
        })
    }

    /// Starts a proxy in front of the control plane's API server.
    pub fn in_front_of(cp: &ControlPlane) -> anyhow::Result<FaultProxy> {
        FaultProxy::start(cp.api_server_addr()?)
    }

    /// The proxy's address (127.0.0.1 and its port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Takes the upstream "down": closes every open connection at once and, until [`start_again`], closes
    /// each new connection as soon as it is accepted (with a reset, so the client sees its connection
    /// refused or reset before any byte is exchanged). Returns once every open connection is closed.
    ///
    /// [`start_again`]: FaultProxy::start_again
    pub fn stop(&self) {
        self.shared.down_epoch.fetch_add(1, SeqCst);
        self.shared.down.store(true, SeqCst);
        self.cut_connections();
    }

    /// Ends the down time: new connections are forwarded again.
    pub fn start_again(&self) {
        self.shared.down_epoch.fetch_add(1, SeqCst);
        self.shared.down.store(false, SeqCst);
    }

    /// [`stop`](FaultProxy::stop)s now and starts again after `duration`, without blocking. A `stop` or
    /// `start_again` in the meantime ends this down time early or takes it over.
    pub fn down_for(&self, duration: Duration) {
        self.stop();
        let epoch = self.shared.down_epoch.load(SeqCst);
        let shared = self.shared.clone();
        self.runtime.spawn(async move {
            tokio::time::sleep(duration).await;
            if shared
                .down_epoch
                .compare_exchange(epoch, epoch + 1, SeqCst, SeqCst)
                .is_ok()
            {
                shared.down.store(false, SeqCst);
            }
        });
    }

    /// Whether the proxy is down.
    pub fn is_down(&self) -> bool {
        self.shared.down.load(SeqCst)
    }

    /// Closes every open connection (watches included) at once but keeps accepting new ones, as when
    /// the API server drops its watches. Returns once they are closed.
    pub fn cut_connections(&self) {
        self.shared.cut.send_modify(|generation| *generation += 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.shared.open.load(SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Every chunk of bytes forwarded, either way, waits this long first (`Duration::ZERO`: not at all).
    /// Applies to open connections too.
    pub fn set_latency(&self, latency: Duration) {
        self.shared
            .latency_ms
            .store(latency.as_millis().try_into().unwrap_or(u64::MAX), SeqCst);
    }

    /// Connections accepted and forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(SeqCst)
    }

    /// Connections refused (closed at once) while down, so far.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(SeqCst)
    }

    /// Connections being forwarded now.
    pub fn open_connections(&self) -> u64 {
        self.shared.open.load(SeqCst)
    }

    /// Writes a copy of the control plane's kubeconfig whose clusters' servers are this proxy
    /// (`https://127.0.0.1:<port>`, the rest of each URL kept) to a temporary file, and returns its path,
    /// for a process started with `KUBECONFIG=<path>`. Relative file paths in it are made absolute. The
    /// file is removed when the proxy is dropped.
    pub fn kubeconfig(&self, cp: &ControlPlane) -> anyhow::Result<PathBuf> {
        let mut config = Kubeconfig::read_from(&cp.kubeconfig)
            .with_context(|| format!("reading {}", cp.kubeconfig.display()))?;
        let mut redirected = 0;
        for named in &mut config.clusters {
            let Some(cluster) = named.cluster.as_mut() else {
                continue;
            };
            let Some(server) = cluster.server.as_mut() else {
                continue;
            };
            let (scheme, host, rest) = split_server(server)?;
            let redirect = format!("{scheme}://{}{rest}", self.addr);
            // The certificate is checked against the host the client was given, when that is not ours.
            if host != "127.0.0.1" && cluster.tls_server_name.is_none() {
                cluster.tls_server_name = Some(host.trim_matches(['[', ']']).to_string());
            }
            *server = redirect;
            redirected += 1;
        }
        if redirected == 0 {
            bail!("{} names no cluster server", cp.kubeconfig.display());
        }
        let path = std::env::temp_dir().join(format!(
            "gko-fault-proxy-{}-{}.kubeconfig",
            std::process::id(),
            self.addr.port()
        ));
        // JSON is YAML, and kubectl, client-go and kube read it as a kubeconfig.
        let contents = serde_json::to_vec_pretty(&config)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(&path)
            .and_then(|mut f| f.write_all(&contents))
            .with_context(|| format!("writing {}", path.display()))?;
        let mut written = self.kubeconfigs.lock().unwrap_or_else(|e| e.into_inner());
        if !written.contains(&path) {
            written.push(path.clone());
        }
        Ok(path)
    }

    /// A client that reaches the control plane through this proxy (for the current test's runtime).
    pub async fn client(&self, cp: &ControlPlane) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(self.kubeconfig(cp)?)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        self.shared.cut.send_modify(|generation| *generation += 1);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        for path in self
            .kubeconfigs
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("down", &self.is_down())
            .field("accepted", &self.accepted())
            .field("refused", &self.refused())
            .field("open", &self.open_connections())
            .finish()
    }
}

/// `https://host:port/path` as ("https", "host", "/path").
fn split_server(server: &str) -> anyhow::Result<(&str, &str, &str)> {
    let (scheme, rest) = server
        .split_once("://")
        .with_context(|| format!("server {server:?} has no scheme"))?;
    let (authority, rest) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let host = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => &authority[..i],
        _ => authority,
    };
    if host.is_empty() {
        bail!("server {server:?} has no host");
    }
    Ok((scheme, host, rest))
}

async fn accept_loop(listener: std::net::TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("fault proxy: cannot listen: {e}");
            return;
        }
    };
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of descriptors and the like: try again shortly.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Subscribe before looking at `down`: a stop either is seen here or cuts this connection.
        let mut cut = shared.cut.subscribe();
        if shared.down.load(SeqCst) {
            shared.refused.fetch_add(1, SeqCst);
            let _ = client.set_zero_linger();
            drop(client);
            continue;
        }
        shared.accepted.fetch_add(1, SeqCst);
        shared.open.fetch_add(1, SeqCst);
        let shared = shared.clone();
        tokio::spawn(async move {
            let _open = OpenGuard(shared.clone());
            tokio::select! {
                _ = cut.changed() => {}
                _ = forward(client, upstream, &shared) => {}
            }
        });
    }
}

/// Counts an open connection until its task ends (after its sockets are dropped).
struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, SeqCst);
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, shared: &Shared) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::try_join!(
        pipe(client_read, server_write, shared),
        pipe(server_read, client_write, shared)
    )?;
    Ok(())
}

async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &Shared,
) -> std::io::Result<()> {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            // Pass the half-close on; the other direction may still have bytes to send.
            return to.shutdown().await;
        }
        let latency = shared.latency_ms.load(SeqCst);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::split_server;

    #[test]
    fn splits_server_urls() {
        assert_eq!(
            split_server("https://127.0.0.1:26403").unwrap(),
            ("https", "127.0.0.1", "")
        );
        assert_eq!(
            split_server("https://localhost:6443/prefix").unwrap(),
            ("https", "localhost", "/prefix")
        );
        assert_eq!(
            split_server("https://[::1]:6443").unwrap(),
            ("https", "[::1]", "")
        );
        assert_eq!(
            split_server("https://[::1]").unwrap(),
            ("https", "[::1]", "")
        );
        assert!(split_server("127.0.0.1:6443").is_err());
    }
}
