//! The `gluesync-operator` command.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gluesync_operator::{metrics, operator};
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "gluesync-operator",
    version,
    about = "GKO: updates a Gluesync install on Kubernetes safely"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator on one namespace.
    Run(Box<RunArgs>),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Namespace to manage (default: POD_NAMESPACE, else the kubeconfig's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "GKO_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Address of the Conductor API the Core Hub UI calls ("off" to serve none).
    #[arg(long, env = "GKO_CONDUCTOR_ADDR", default_value = "0.0.0.0:1717")]
    conductor_addr: String,
    /// PEM certificate of the Conductor API (with --conductor-tls-key: serve HTTPS), for example the
    /// tls.crt of a mounted Secret.
    #[arg(long, env = "GKO_CONDUCTOR_TLS_CERT", requires = "conductor_tls_key")]
    conductor_tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of the Conductor API.
    #[arg(long, env = "GKO_CONDUCTOR_TLS_KEY", requires = "conductor_tls_cert")]
    conductor_tls_key: Option<std::path::PathBuf>,
    /// This process's name in events (default: POD_NAME).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// Secrets GKO may read, comma-separated: those spec.coreHub.credentialsSecret and caSecret may name.
    /// None by default.
    #[arg(long, env = "GKO_ALLOWED_SECRETS", default_value = "")]
    allowed_secrets: String,
    /// Core Hub URLs GKO may send credentials to besides the Core Hub workload's Service in its
    /// namespace, comma-separated, as `scheme://host:port` (the port may be `*`).
    #[arg(long, env = "GKO_ALLOWED_COREHUB_URLS", default_value = "")]
    allowed_corehub_urls: String,
    /// Log as JSON lines.
    #[arg(long, env = "GKO_LOG_JSON")]
    log_json: bool,
}

fn main() -> anyhow::Result<()> {
    one_malloc_arena();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(start())
}

/// Gives the pages of GKO's own code and constants back to the kernel once GKO has started: five seconds
/// after its caches first listed the namespace (the Lease and the first reconciles are start-up too).
/// Start-up runs code that idle GKO never runs again (argument and configuration parsing, the first TLS
/// handshakes, the first list of every cache), and the kernel keeps every page of code it once mapped
/// resident (and maps the neighbours of each page it faults in) until memory runs short: measured on the
/// sample install, GKO's binary stayed 9.3 MiB resident, of which idle GKO faulted back 6 MiB. The pages
/// the steps of an update need come back as it runs them. Only pages no other process maps are released
/// (`MADV_PAGEOUT`); a kernel older than 5.4 refuses the call, and nothing changes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
async fn release_start_up_code(metrics: Arc<metrics::Metrics>) {
    use std::sync::atomic::Ordering;
    while !metrics.ready.load(Ordering::Relaxed) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    match page_out_own_code() {
        Ok(bytes) => tracing::debug!(bytes, "start-up code given back to the kernel"),
        Err(e) => tracing::debug!(error = %e, "start-up code kept resident"),
    }
}

/// `MADV_PAGEOUT` on every read-only mapping of GKO's executable (code, constants, unwind tables); its
/// size in bytes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn page_out_own_code() -> std::io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut total = 0;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(perms), Some(path)) = (fields.first(), fields.get(1), fields.get(5))
        else {
            continue;
        };
        if *path != exe || perms.contains('w') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        // SAFETY: an advice on pages of this process's own read-only file mapping: it changes no
        // content, only whether the kernel keeps the pages resident.
        let done =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        total += end - start;
    }
    Ok(total)
}

/// `pow`, the one function of glibc's libm GKO calls (tokio's scheduler statistics call it through
/// `f64::powf`), from the `libm` crate. With it defined here, the linker leaves libm out of the binary's
/// needed libraries: loading a 1 MB shared library for one function costs about 0.5 MiB of resident
/// memory.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// One glibc malloc arena for every thread. By default each thread that allocates may get an arena of
/// its own (up to eight per core), and memory freed in one is not reused by another: the ids of a listing
/// parsed on a blocking thread and freed on a worker thread stay resident. GKO is I/O bound; one arena
/// (with glibc's per-thread caches) costs it nothing measurable and keeps its resident memory near what
/// it uses (100,000 pipelines: see docs/development/benchmarks.md). `MALLOC_ARENA_MAX` in the environment, as
/// glibc reads it, is left to say otherwise.
fn one_malloc_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a malloc parameter; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

async fn start() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(*args).await,
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter);
    if args.log_json {
        fmt.json().init();
    } else {
        fmt.init();
    }

    let config = kube::Config::infer()
        .await
        .context("finding a Kubernetes configuration")?;
    gluesync_operator::cluster::wording::set_server(&config.cluster_url);
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let metrics = Arc::new(metrics::Metrics::default());
    let counted = metrics.clone();
    let client = kube::client::ClientBuilder::try_from(config)
        .context("building the Kubernetes client")?
        .with_layer(&tower::util::MapRequestLayer::new(
            move |request: axum::http::Request<kube::client::Body>| {
                counted.kubernetes_request(&request);
                request
            },
        ))
        .build();

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("stopping");
        let _ = stop_tx.send(true);
    });

    let server = tokio::spawn(metrics::serve(
        args.metrics_addr,
        metrics.clone(),
        stopped(),
    ));
    let conductor_addr = match args.conductor_addr.as_str() {
        "off" => None,
        addr => Some(addr.parse().context("--conductor-addr")?),
    };
    let settings = operator::Settings {
        instance: args.instance,
        conductor_addr,
        conductor_tls: args
            .conductor_tls_cert
            .zip(args.conductor_tls_key)
            .map(|(cert, key)| gluesync_operator::conductor::TlsFiles { cert, key }),
        access: gluesync_operator::update::access::Access::from_lists(
            &args.allowed_secrets,
            &args.allowed_corehub_urls,
        ),
        ..operator::Settings::new(namespace)
    };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(release_start_up_code(metrics.clone()));
    operator::run(client, settings, metrics, stopped()).await;
    server
        .await
        .context("metrics server")?
        .context("metrics server")?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
