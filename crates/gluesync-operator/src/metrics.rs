//! Prometheus metrics and the `/metrics`, `/healthz` and `/readyz` endpoints.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use prometheus_client::{
    encoding::{EncodeLabelSet, prometheus_text, text},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Labels of `updates_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// Labels of `update_step_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabel {
    pub step: String,
}

/// Labels of `cached_objects`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// Labels of `kubernetes_requests_total`: the request's verb (`watch` for a GET that watches).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    pub verb: String,
}

/// Labels of the HTTP connection metrics: which listener.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

/// Labels of `http_connections_closed`: which listener, and why GKO closed the connection.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabel {
    pub listener: String,
    pub reason: String,
}

/// Labels of the platform's state gauges: `phase`, `condition` (type), `self_update_result` (result).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ValueLabel {
    pub value: String,
}

/// Labels of `conductor_requests_total`: the HTTP status of the answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: String,
}

/// GKO's metrics. The counters are cheap handles, shared by every part that counts.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Counter,
    pub reconcile_errors: Counter,
    pub status_writes: Counter,
    pub events: Counter,
    pub workload_writes: Counter,
    pub corehub_errors: Counter,
    /// Requests GKO sent to the Kubernetes API server, by verb.
    pub kubernetes_requests: Family<VerbLabel, Counter>,
    /// Bytes of the bodies GKO sent to the API server, by verb.
    pub kubernetes_request_bytes: Family<VerbLabel, Counter>,
    /// Finished updates by result.
    pub updates: Family<ResultLabel, Counter>,
    /// How long each step of an update took.
    pub step_seconds: Family<StepLabel, Histogram>,
    /// Objects in the watch caches, by kind: what GKO holds of its namespace.
    pub cached: Family<KindLabel, Gauge>,
    /// Connections open on each HTTP listener.
    pub connections: Family<ListenerLabel, Gauge>,
    /// Connections GKO closed, by listener and reason (idle, evicted, refused).
    pub connections_closed: Family<ClosedLabel, Counter>,
    /// The GluesyncPlatform as its last written status says it, for alerts that read a state rather than
    /// count events (see [`Metrics::platform`]): 1 for its phase, 0 for the others seen.
    pub phase: Family<ValueLabel, Gauge>,
    /// 1 when the condition (Ready, Reconciling, Stalled) is True, else 0.
    pub condition: Family<ValueLabel, Gauge>,
    /// Pipelines GKO put into maintenance mode and has not seen resumed (`status.pausedPipelines`).
    pub paused_pipelines: Gauge,
    /// 1 while an update runs.
    pub update_running: Gauge,
    /// When the version catalog last answered (Unix seconds; 0: not since the status began).
    pub catalog_last_success: Gauge,
    /// Since when the version catalog has not answered (Unix seconds): its last answer, or the
    /// GluesyncPlatform's creation when it never answered; 0 while it answers, or offline.
    pub catalog_unanswered_since: Gauge,
    /// The last own update's result (OK, ROLLED_BACK, ERROR, SKIPPED, SCHEDULED): 1 for it, 0 for the
    /// others seen.
    pub self_update_result: Family<ValueLabel, Gauge>,
    /// 1 while this process holds the Lease.
    pub leader: Gauge,
    /// The Conductor API's answers, by HTTP status.
    pub conductor_requests: Family<StatusLabel, Counter>,
    /// True once the watches have listed the namespace.
    pub ready: AtomicBool,
    /// The Conductor API could not serve (its port taken, its certificate unreadable).
    pub conductor_down: AtomicBool,
}

/// Registers `metric` under `name` and answers it (a cheap handle on the same metric).
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

fn step_histogram() -> Histogram {
    Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0])
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("gluesync_operator");
        let mut counter =
            |name: &str, help: &str| registered(&mut registry, name, help, Counter::default());
        let reconciles = counter("reconciles", "Reconciliations of GluesyncPlatforms");
        let reconcile_errors =
            counter("reconcile_errors", "Reconciliations that ended in an error");
        let status_writes = counter("status_writes", "Writes of a GluesyncPlatform status");
        let events = counter("events", "Kubernetes events recorded");
        let workload_writes = counter(
            "workload_writes",
            "Image changes and pod deletions on managed workloads",
        );
        let corehub_errors = counter(
            "corehub_errors",
            "Core Hub calls that failed after their retries",
        );
        let kubernetes_requests = registered(
            &mut registry,
            "kubernetes_requests",
            "Requests sent to the Kubernetes API server, by verb (watch for a GET that watches)",
            Family::<VerbLabel, Counter>::default(),
        );
        let kubernetes_request_bytes = registered(
            &mut registry,
            "kubernetes_request_bytes",
            "Bytes of the request bodies sent to the Kubernetes API server, by verb",
            Family::<VerbLabel, Counter>::default(),
        );
        let updates = registered(
            &mut registry,
            "updates",
            "Finished updates by result",
            Family::<ResultLabel, Counter>::default(),
        );
        let step_seconds = registered(
            &mut registry,
            "update_step_duration_seconds",
            "How long each step of an update took",
            Family::<StepLabel, Histogram>::new_with_constructor(
                step_histogram as fn() -> Histogram,
            ),
        );
        let cached = registered(
            &mut registry,
            "cached_objects",
            "Objects in GKO's watch caches, by kind",
            Family::<KindLabel, Gauge>::default(),
        );
        let connections = registered(
            &mut registry,
            "http_connections",
            "Connections open on GKO's HTTP listeners (conductor, metrics)",
            Family::<ListenerLabel, Gauge>::default(),
        );
        let connections_closed = registered(
            &mut registry,
            "http_connections_closed",
            "Connections GKO closed: idle (no complete request within the header timeout), evicted \
             (the one idle the longest, for a new connection at the bound), refused (at the bound, none idle)",
            Family::<ClosedLabel, Counter>::default(),
        );
        let phase = registered(
            &mut registry,
            "phase",
            "The GluesyncPlatform's phase (1 for the phase it is in)",
            Family::<ValueLabel, Gauge>::default(),
        );
        let condition = registered(
            &mut registry,
            "condition",
            "The GluesyncPlatform's conditions Ready, Reconciling and Stalled (1: True)",
            Family::<ValueLabel, Gauge>::default(),
        );
        let paused_pipelines = registered(
            &mut registry,
            "paused_pipelines",
            "Pipelines GKO put into maintenance mode and has not seen resumed",
            Gauge::default(),
        );
        let update_running = registered(
            &mut registry,
            "update_running",
            "1 while an update runs",
            Gauge::default(),
        );
        let catalog_last_success = registered(
            &mut registry,
            "catalog_last_success_timestamp_seconds",
            "When the version catalog last answered (Unix seconds)",
            Gauge::default(),
        );
        let catalog_unanswered_since = registered(
            &mut registry,
            "catalog_unanswered_since_timestamp_seconds",
            "Since when the version catalog has not answered (Unix seconds; 0 while it answers)",
            Gauge::default(),
        );
        let self_update_result = registered(
            &mut registry,
            "self_update_result",
            "The result of GKO's last update of itself (1 for it)",
            Family::<ValueLabel, Gauge>::default(),
        );
        let leader = registered(
            &mut registry,
            "leader",
            "1 while this GKO holds the Lease and acts",
            Gauge::default(),
        );
        let conductor_requests = registered(
            &mut registry,
            "conductor_requests",
            "Answers of the Conductor API, by HTTP status",
            Family::<StatusLabel, Counter>::default(),
        );
        Metrics {
            registry,
            phase,
            condition,
            paused_pipelines,
            update_running,
            catalog_last_success,
            catalog_unanswered_since,
            self_update_result,
            leader,
            conductor_requests,
            cached,
            connections,
            connections_closed,
            reconciles,
            reconcile_errors,
            status_writes,
            events,
            workload_writes,
            corehub_errors,
            kubernetes_requests,
            kubernetes_request_bytes,
            updates,
            step_seconds,
            ready: AtomicBool::new(false),
            conductor_down: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    /// The state gauges of `gsp`, from the status just written (or found as the decision wants it).
    pub fn platform(
        &self,
        gsp: &crate::api::GluesyncPlatform,
        status: &crate::api::GluesyncPlatformStatus,
    ) {
        let created = gsp.metadata.creation_timestamp.as_ref().map(|t| t.0);
        // One gauge per value GKO may report, 1 for the current one (none: all 0).
        let one_of = |family: &Family<ValueLabel, Gauge>, all: &[&str], current: Option<&str>| {
            for v in all {
                family
                    .get_or_create(&ValueLabel {
                        value: v.to_string(),
                    })
                    .set(i64::from(Some(*v) == current));
            }
        };
        one_of(
            &self.phase,
            &[
                "Current",
                "UpdateAvailable",
                "Updating",
                "Degraded",
                "Failed",
            ],
            status.phase.map(|p| p.as_str()),
        );
        for c in ["Ready", "Reconciling", "Stalled"] {
            let on = status
                .conditions
                .iter()
                .any(|x| x.type_ == c && x.status == "True");
            self.condition
                .get_or_create(&ValueLabel { value: c.into() })
                .set(i64::from(on));
        }
        self.paused_pipelines
            .set(status.paused_pipelines.len() as i64);
        self.update_running.set(i64::from(status.update.is_some()));
        self.catalog_last_success.set(
            status
                .catalog
                .as_ref()
                .and_then(|c| c.last_checked_at.as_ref())
                .map_or(0, |t| t.0.as_second()),
        );
        // The last check failed: since the last answer, or since the resource exists if none came.
        let unanswered = status
            .catalog
            .as_ref()
            .filter(|c| c.error.is_some())
            .and_then(|c| c.last_checked_at.as_ref().map(|t| t.0).or(created));
        self.catalog_unanswered_since
            .set(unanswered.map_or(0, |t| t.as_second()));
        // GKO's own entry in the last update's results (GKO's Deployment is the `operator` component).
        let gko = status
            .components
            .iter()
            .find(|c| c.component_type == crate::api::ComponentType::Operator)
            .map(|c| c.name.as_str());
        let own = status.last_attempt.as_ref().and_then(|a| {
            a.results
                .iter()
                .find(|r| Some(r.name.as_str()) == gko)
                .map(|r| r.status)
        });
        use crate::api::ComponentResultStatus as R;
        let name = |r: R| match r {
            R::Ok => "OK",
            R::Error => "ERROR",
            R::RolledBack => "ROLLED_BACK",
            R::Skipped => "SKIPPED",
            R::Scheduled => "SCHEDULED",
        };
        one_of(
            &self.self_update_result,
            &["OK", "ERROR", "ROLLED_BACK", "SKIPPED", "SCHEDULED"],
            own.map(name),
        );
    }

    /// Counts one request to the API server, and its body's bytes, by its verb; the Kubernetes client's
    /// layer calls it.
    pub fn kubernetes_request<B: hyper::body::Body>(&self, request: &axum::http::Request<B>) {
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = if watch {
            "watch".to_string()
        } else {
            request.method().as_str().to_ascii_lowercase()
        };
        let label = VerbLabel { verb };
        let bytes = request.body().size_hint();
        self.kubernetes_request_bytes
            .get_or_create(&label)
            .inc_by(bytes.exact().unwrap_or(bytes.lower()));
        self.kubernetes_requests.get_or_create(&label).inc();
    }

    /// The counters of one HTTP listener.
    pub fn listener(&self, listener: &str) -> crate::http::listener::Counters {
        let closed = |reason: &str| {
            self.connections_closed
                .get_or_create(&ClosedLabel {
                    listener: listener.into(),
                    reason: reason.into(),
                })
                .clone()
        };
        crate::http::listener::Counters {
            open: self
                .connections
                .get_or_create(&ListenerLabel {
                    listener: listener.into(),
                })
                .clone(),
            idle: closed("idle"),
            evicted: closed("evicted"),
            refused: closed("refused"),
        }
    }

    /// The metrics in OpenMetrics text.
    pub fn render(&self) -> String {
        self.render_as(Format::OpenMetrics)
    }

    /// The metrics in `format`.
    pub fn render_as(&self, format: Format) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = match format {
            Format::OpenMetrics => text::encode(&mut out, &self.registry),
            Format::Text => prometheus_text::encode(&mut out, &self.registry),
        };
        out
    }
}

/// The two exposition formats `/metrics` answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`: counter families named without `_total`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`, Prometheus' text format: counters named with `_total`.
    Text,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => prometheus_text::CONTENT_TYPE,
        }
    }

    /// The format an `Accept` header asks for, as the Prometheus client libraries choose it: the media
    /// range of highest weight that is OpenMetrics text (version 1.0.0, 0.0.1 or none said) or anything
    /// else GKO can answer, the earliest of equal weights; the text format when nothing names
    /// OpenMetrics (no header, `text/plain`, `*/*`: curl, older agents, promtool).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut best: Option<(f32, Format)> = None;
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let mut weight = 1.0_f32;
            let mut version = None;
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => weight = v.trim().parse().unwrap_or(0.0),
                    "version" => version = Some(v.trim().trim_matches('"').to_string()),
                    _ => {}
                }
            }
            let format = match media.as_str() {
                "application/openmetrics-text"
                    if matches!(version.as_deref(), None | Some("1.0.0") | Some("0.0.1")) =>
                {
                    Format::OpenMetrics
                }
                "text/plain" if matches!(version.as_deref(), None | Some("0.0.4")) => Format::Text,
                "text/*" | "*/*" => Format::Text,
                _ => continue,
            };
            if weight > 0.0 && best.is_none_or(|(w, _)| weight > w) {
                best = Some((weight, format));
            }
        }
        best.map_or(Format::Text, |(_, f)| f)
    }
}

async fn render_metrics(State(m): State<Arc<Metrics>>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let format = Format::negotiate(Some(&accept));
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        m.render_as(format),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) && !m.conductor_down.load(Ordering::Relaxed) {
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
        .with_state(metrics.clone());
    let limits = crate::http::listener::Limits {
        connections: METRICS_CONNECTIONS,
        unanswered: METRICS_UNANSWERED,
        request_header: METRICS_HEADER_TIMEOUT,
        keep_alive: METRICS_KEEP_ALIVE,
        streams: 4,
        counters: metrics.listener("metrics"),
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    crate::http::listener::serve(listener, None, app, limits, shutdown).await
}

/// Connections open at once on the metrics port (a scraper and the kubelet's probes need a few).
const METRICS_CONNECTIONS: usize = 64;
/// Of those, connections not answered yet (a scraper's first request comes at once).
const METRICS_UNANSWERED: usize = 16;
/// Time a scraper's connection may stay idle between scrapes (Prometheus scrapes every 15 to 60 s).
const METRICS_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);
/// Time a connection to the metrics port has to send a complete request.
const METRICS_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(test)]
mod tests {
    /// The format of each Accept header: OpenMetrics only when the weightiest answerable range names it.
    #[test]
    fn the_format_is_the_one_the_accept_header_weighs_most() {
        use super::Format::{OpenMetrics, Text};
        for (accept, format) in [
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            (Some("text/plain; version=0.0.4"), Text),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("application/openmetrics-text; version=0.0.1"),
                OpenMetrics,
            ),
            (
                Some("Application/OpenMetrics-Text;Version=\"1.0.0\""),
                OpenMetrics,
            ),
            // A version GKO cannot write, then the text format.
            (
                Some("application/openmetrics-text; version=2.0.0, text/plain"),
                Text,
            ),
            (
                Some("text/plain;q=0.3,application/openmetrics-text;q=0.6"),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.2,text/plain;q=0.3"),
                Text,
            ),
            // Equal weights: the first.
            (Some("text/plain,application/openmetrics-text"), Text),
            (Some("application/openmetrics-text,text/plain"), OpenMetrics),
            // Refused (q=0) and unknown ranges are passed over.
            (Some("application/openmetrics-text;q=0"), Text),
            (
                Some(
                    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;q=0.5",
                ),
                OpenMetrics,
            ),
            (Some("text/plain;version=1.0.0"), Text),
        ] {
            assert_eq!(super::Format::negotiate(accept), format, "{accept:?}");
        }
    }

    /// Both formats name counters' samples with `_total`; only the text format's HELP and TYPE do too.
    #[test]
    fn each_format_writes_its_own_names() {
        let m = super::Metrics::default();
        let open = m.render_as(super::Format::OpenMetrics);
        let text = m.render_as(super::Format::Text);
        assert!(
            open.contains("# TYPE gluesync_operator_reconciles counter\n"),
            "{open}"
        );
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(
            text.contains("# TYPE gluesync_operator_reconciles_total counter\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        assert_eq!(m.render(), open);
    }

    /// Since when the catalog has not answered: 0 while it answers (or offline), its last answer once
    /// it fails, the resource's creation when it never answered.
    #[test]
    fn the_catalog_is_unanswered_since_its_last_answer_or_the_resource_creation() {
        use crate::api::{CatalogStatus, GluesyncPlatform, GluesyncPlatformStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
        let mut gsp = GluesyncPlatform::new(
            "gluesync",
            serde_json::from_value(serde_json::json!({"version": "2.3.2.1"})).unwrap(),
        );
        gsp.metadata.creation_timestamp = Some(at(1_000));
        let m = super::Metrics::default();
        let with = |catalog: Option<CatalogStatus>| GluesyncPlatformStatus {
            catalog,
            ..Default::default()
        };
        let answered = CatalogStatus {
            last_attempt_at: Some(at(5_000)),
            last_checked_at: Some(at(5_000)),
            ..Default::default()
        };
        m.platform(&gsp, &with(Some(answered.clone())));
        assert_eq!(m.catalog_unanswered_since.get(), 0);
        assert_eq!(m.catalog_last_success.get(), 5_000);
        let failing = CatalogStatus {
            last_attempt_at: Some(at(9_000)),
            error: Some("connection refused".into()),
            ..answered
        };
        m.platform(&gsp, &with(Some(failing.clone())));
        assert_eq!(m.catalog_unanswered_since.get(), 5_000);
        let never = CatalogStatus {
            last_checked_at: None,
            ..failing
        };
        m.platform(&gsp, &with(Some(never)));
        assert_eq!(m.catalog_unanswered_since.get(), 1_000);
        // Offline: no catalog status at all.
        m.platform(&gsp, &with(None));
        assert_eq!(m.catalog_unanswered_since.get(), 0);
    }

    /// Every metric GKO exports is in docs/monitoring.md's table.
    #[test]
    fn every_metric_is_documented() {
        let docs = include_str!("../../../docs/monitoring.md");
        use super::*;
        let m = Metrics::default();
        // A family shows once it has a child: one of each.
        m.platform(
            &crate::api::GluesyncPlatform::new(
                "gluesync",
                serde_json::from_value(serde_json::json!({"version": "2.3.2.1"})).unwrap(),
            ),
            &Default::default(),
        );
        let verb = VerbLabel { verb: "get".into() };
        m.kubernetes_requests.get_or_create(&verb).inc();
        m.kubernetes_request_bytes.get_or_create(&verb).inc();
        m.updates
            .get_or_create(&ResultLabel {
                result: "Succeeded".into(),
            })
            .inc();
        m.step_seconds
            .get_or_create(&StepLabel {
                step: "Drain".into(),
            })
            .observe(1.0);
        m.cached
            .get_or_create(&KindLabel { kind: "Pod".into() })
            .set(1);
        m.listener("conductor");
        m.conductor_requests
            .get_or_create(&StatusLabel {
                status: "200".into(),
            })
            .inc();
        let text = m.render();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(names.len() >= 21, "{names:?}");
        for name in names {
            let counter = format!("`{name}_total`");
            assert!(
                docs.contains(&format!("`{name}`")) || docs.contains(&counter),
                "{name} is not in docs/monitoring.md"
            );
        }
    }
}
