//! Prometheus metrics and the `/metrics`, `/healthz` and `/readyz` endpoints.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{encoding::text::encode, metrics::counter::Counter, registry::Registry};

/// GKO's counters. Cheap to clone into every part that counts.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Counter,
    pub reconcile_errors: Counter,
    pub status_writes: Counter,
    pub events: Counter,
    pub workload_writes: Counter,
    pub corehub_errors: Counter,
    /// True once the watches have listed the namespace.
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("gluesync_operator");
        let reconciles = Counter::default();
        let reconcile_errors = Counter::default();
        let status_writes = Counter::default();
        let events = Counter::default();
        let workload_writes = Counter::default();
        let corehub_errors = Counter::default();
        registry.register(
            "reconciles",
            "Reconciliations of GluesyncPlatforms",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciliations that ended in an error",
            reconcile_errors.clone(),
        );
        registry.register(
            "status_writes",
            "Writes of a GluesyncPlatform status",
            status_writes.clone(),
        );
        registry.register("events", "Kubernetes events recorded", events.clone());
        registry.register(
            "workload_writes",
            "Image changes and pod deletions on managed workloads",
            workload_writes.clone(),
        );
        registry.register(
            "corehub_errors",
            "Core Hub calls that failed after their retries",
            corehub_errors.clone(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_errors,
            status_writes,
            events,
            workload_writes,
            corehub_errors,
            ready: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

async fn render_metrics(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
