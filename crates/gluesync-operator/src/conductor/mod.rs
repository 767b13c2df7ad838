//! The Conductor-compatible HTTP API: what the Core Hub UI calls, on Kubernetes as on Docker.
//!
//! Served at the bare paths and under `/conductor/api/`, in the Docker Conductor's `{success, data | error,
//! details}` envelope. Callers are authenticated by Core Hub (`GET /authentication/me` with their own
//! `Authorization` header or `gs-auth` cookie), cached 30 s, and every failure is closed. An update request
//! becomes a change of the GluesyncPlatform's spec (`version`, `modules`, a fresh `requestID`), which the
//! controller runs like any other; the answer comes when the update has ended, from `status.lastAttempt`.
//! Actions that would add, start, stop or remove workloads are refused: Helm owns the workloads.

mod answers;
mod containers;
mod disaster;
mod guards;
#[cfg(feature = "test-hooks")]
pub mod harness;
mod identities;
mod openapi;
mod updates;

pub use answers::*;
pub use containers::*;
use guards::*;
use updates::*;

use crate::cluster::wording::Said;
use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, Path, Request, State},
    http::{HeaderMap, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    api::version::ImageRef,
    api::{ComponentResultStatus, ComponentType, GluesyncPlatform, ReleaseChannel, UpdatePolicy},
    cluster::view::View,
    corehub::CoreHub,
    update::corehub::Target,
};

/// Largest request body the API reads.
pub const BODY_LIMIT: usize = 64 * 1024;
/// Time a client has to send its request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a connection that was answered has to send its next request (over the 60 s an ingress such as
/// ingress-nginx keeps an idle upstream connection, so GKO never closes one the ingress is about to reuse).
pub const KEEP_ALIVE: Duration = Duration::from_secs(75);
/// How much of a body over [`BODY_LIMIT`] is read and dropped before its 413, so that the client
/// reads the answer (see `read_body`).
pub const BODY_DRAIN_LIMIT: usize = 1024 * 1024;
/// Time a client has to send a request's body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a request other than an update request has to be answered.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests served at once.
pub const MAX_REQUESTS: usize = 256;
/// Connections open at once (at the bound a new one closes the one idle the longest, see [`crate::http::listener`]).
pub const MAX_CONNECTIONS: usize = 512;
/// Of those, connections not answered yet (none of their requests has reached a handler): the oldest goes
/// for a new one beyond this, so that strangers' unfinished requests hold little memory.
pub const MAX_UNANSWERED: usize = 64;
/// Requests at once on one HTTP/2 connection.
pub const HTTP2_STREAMS: u32 = 32;
/// Requests one caller (a Core Hub user) may have in flight at once: a caller holding many slow calls
/// (a slow catalog) never takes the slots others need.
pub const CALLER_REQUESTS: usize = 16;
/// How often the certificate files are checked for a renewal.
const CERT_CHECK: Duration = Duration::from_secs(2);

/// A caller as Core Hub knows it (shared, not copied, by every request it makes).
#[derive(Clone, Debug)]
pub struct Caller {
    pub username: Arc<str>,
    pub role: Arc<str>,
}

/// What a route needs of the caller's role, as the Conductor gates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Control,
    Manage,
    /// Super Admin only (disaster recovery).
    Administer,
}

impl Gate {
    pub fn allows(self, role: &str) -> bool {
        match self {
            Gate::Control => matches!(
                role,
                "SUPER_ADMIN" | "MANAGER" | "MONITOR" | "EXTERNAL_MODULE"
            ),
            Gate::Manage => matches!(role, "SUPER_ADMIN" | "MANAGER" | "EXTERNAL_MODULE"),
            Gate::Administer => role == "SUPER_ADMIN",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Gate::Control => "control",
            Gate::Manage => "manage",
            Gate::Administer => "set up disaster recovery",
        }
    }
}

const ROLES: [&str; 5] = [
    "SUPER_ADMIN",
    "MANAGER",
    "MONITOR",
    "VIEWER",
    "EXTERNAL_MODULE",
];

/// The document at `GET /openapi.json`, built once.
static OPENAPI: std::sync::LazyLock<Value> = std::sync::LazyLock::new(openapi::document);

/// A Core Hub client, the target it was built for, and when.
type Connection = (Target, Instant, Arc<CoreHub>);

#[derive(Clone)]
struct Api {
    view: Arc<View>,
    identities: Arc<identities::Identities>,
    /// The Core Hub client for identity checks, built again when the target changes or after a minute.
    corehub: Arc<tokio::sync::Mutex<Option<Connection>>>,
    /// One update request at a time.
    updating: Arc<tokio::sync::Mutex<()>>,
    /// Requests in flight by caller (username).
    in_flight: Held,
    /// The last answers of `GET /containers`, by filter, for the workloads they were built from.
    containers: Arc<std::sync::Mutex<Listings>>,
}

/// Answers of `GET /containers` (the JSON body, by `type` filter) built from the workloads as
/// [`View::workloads_version`] names them: a listing is built and serialized once per change of the
/// workloads, not once per request.
#[derive(Default)]
struct Listings {
    version: u64,
    bodies: Vec<(Option<String>, axum::body::Bytes)>,
}

/// Requests in flight by caller.
type Held = Arc<std::sync::Mutex<std::collections::HashMap<Arc<str>, usize>>>;

/// A request of one caller in flight; its slot is given back when the request ends.
struct InFlight {
    callers: Held,
    username: Arc<str>,
}

impl InFlight {
    /// A slot for `username`, unless it holds [`CALLER_REQUESTS`] already.
    fn take(callers: &Held, username: &Arc<str>) -> Option<InFlight> {
        let mut held = callers.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(username.clone()).or_default();
        if *n >= CALLER_REQUESTS {
            return None;
        }
        *n += 1;
        Some(InFlight {
            callers: callers.clone(),
            username: username.clone(),
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut held = self.callers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.username) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.username);
            }
        }
    }
}

impl Api {
    /// The namespace's GluesyncPlatform, from the watch cache; the error is the answer to give.
    #[allow(clippy::result_large_err)]
    fn platform(&self) -> Result<GluesyncPlatform, Response> {
        self.view
            .platform()
            .map(|g| g.as_ref().clone())
            .ok_or_else(|| {
                failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "No GluesyncPlatform",
                    format!("namespace {} has no GluesyncPlatform", self.view.namespace),
                )
            })
    }

    /// A Core Hub client for this platform.
    async fn corehub(&self, gsp: &GluesyncPlatform) -> Result<Arc<CoreHub>, String> {
        let workloads = self.view.workloads();
        if let Some(problem) = self
            .view
            .access
            .problem(gsp, &workloads, &self.view.namespace)
        {
            return Err(problem.message);
        }
        let target =
            Target::of(gsp, &workloads, &self.view.namespace).ok_or("no Core Hub workload")?;
        let mut cached = self.corehub.lock().await;
        if let Some((t, at, client)) = cached.as_ref()
            && *t == target
            && at.elapsed() < Duration::from_secs(60)
        {
            return Ok(client.clone());
        }
        let client = Arc::new(
            crate::corehub::connect::connect(
                self.view.writer.client(),
                &self.view.namespace,
                self.view.instance.as_deref(),
                &self.view.access,
                &target,
            )
            .await?,
        );
        *cached = Some((target, Instant::now(), client.clone()));
        Ok(client)
    }

    /// Asks Core Hub who the caller is, or answers from what it said recently (see [`identities`]).
    /// Also says whether the session cookie (not a token) speaks for the caller. A caller that is not
    /// authenticated gets one of [`refusal`]'s fixed answers: what went wrong goes to the log, never to
    /// a stranger.
    async fn authenticate(
        &self,
        headers: &HeaderMap,
        client: Option<std::net::IpAddr>,
    ) -> Result<(Caller, bool), Response> {
        let presented = match identities::Presented::from_headers(headers) {
            Ok(Some(p)) => p,
            Ok(None) => return Err(refusal(Refusal::NotAuthenticated)),
            Err(identities::Unusable::Malformed) => return Err(refusal(Refusal::Malformed)),
            Err(identities::Unusable::NotBearer) => return Err(refusal(Refusal::NotBearer)),
            Err(identities::Unusable::TwoSessions) => return Err(refusal(Refusal::TwoSessions)),
        };
        let by_cookie = presented.by_cookie();
        let ids = &self.identities;
        let key = ids.key(&presented);
        match ids.remembered(key) {
            Some(identities::Known::Caller(c)) => return Ok((c, by_cookie)),
            Some(identities::Known::Refused) => return Err(refusal(Refusal::NotAuthenticated)),
            None => {}
        }
        // A caller GKO does not know yet: Core Hub is asked, within the budgets of `identities`.
        let _slot = ids
            .take_check(&presented, key, client)
            .map_err(|wait| refusal(Refusal::TooMany(wait)))?;
        let Some(gsp) = self.view.platform() else {
            return Err(refusal(Refusal::Unavailable));
        };
        let verification_failed = |why: &str| {
            tracing::warn!(gsp = %kube::ResourceExt::name_any(gsp.as_ref()), why, "a caller could not be verified with Core Hub");
            refusal(Refusal::VerificationFailed)
        };
        let corehub = self
            .corehub(&gsp)
            .await
            .map_err(|e| verification_failed(&e))?;
        let cookie = presented.cookie();
        let me = match corehub
            .me(presented.authorization.as_deref(), cookie.as_deref())
            .await
        {
            Ok(Some(me)) => me,
            Ok(None) => {
                ids.remember(key, identities::Known::Refused);
                return Err(refusal(Refusal::NotAuthenticated));
            }
            Err(e) => return Err(verification_failed(&e.to_string())),
        };
        if !ROLES.contains(&me.role.as_str()) {
            return Err(verification_failed(&format!(
                "Core Hub answered an unknown role {:?}",
                me.role
            )));
        }
        let caller = Caller {
            username: me.username.into(),
            role: me.role.into(),
        };
        ids.verified(&presented, key, identities::Known::Caller(caller.clone()));
        Ok((caller, by_cookie))
    }
}

async fn health() -> Response {
    success(json!("Health check OK!"))
}

async fn openapi() -> Response {
    Json(OPENAPI.clone()).into_response()
}

/// The API's routes, at the bare paths.
fn routes(api: Api) -> Router {
    let open = Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi));
    // Every other route sits behind `authenticated`, laid over the whole API in `router`.
    let guarded = Router::new()
        .route("/containers", get(list_containers).post(post_containers))
        .route("/services", post(refuse_services).put(refuse_services))
        .route("/services/{id}/version", get(service_version))
        .route("/services/{id}/version/{channel}", get(service_version))
        .route(
            "/disaster-recovery",
            get(disaster::get_state)
                .put(disaster::put_setup)
                .delete(disaster::delete_setup),
        );
    open.merge(guarded)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(api)
}

/// The whole API: bare paths, the same under `/conductor/api/`, a body limit, and 404s in the envelope.
pub fn router(view: Arc<View>) -> Router {
    router_for(Api {
        view,
        identities: Arc::default(),
        corehub: Arc::default(),
        updating: Arc::default(),
        in_flight: Arc::default(),
        containers: Arc::default(),
    })
}

fn router_for(api: Api) -> Router {
    let r = routes(api.clone());
    Router::new()
        .nest("/conductor/api", r.clone())
        .merge(r)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(api.clone(), authenticated))
        .layer(middleware::from_fn(timely))
        .layer(middleware::from_fn_with_state(
            api.clone(),
            unless_self_updating,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(api, counted))
}

/// Where the Conductor API's certificate and key are (PEM files, as a mounted Secret of type
/// kubernetes.io/tls gives them: `tls.crt` and `tls.key`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// Serves the API, over HTTPS when `tls` is given, until `shutdown` resolves, through
/// [`crate::http::listener`]: a connection gets [`HEADER_READ_TIMEOUT`] to send a complete request (and again
/// after each answer), at most [`MAX_CONNECTIONS`] are open at once; a request's body gets
/// [`BODY_READ_TIMEOUT`], and a request other than an update [`REQUEST_TIMEOUT`] to be answered; at most
/// [`MAX_REQUESTS`] are served at once.
///
/// `listener` is bound by the caller, before GKO starts its controller: once GKO has written a status, its
/// API accepts connections.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<TlsFiles>,
    view: Arc<View>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = crate::http::listener::Limits {
        connections: MAX_CONNECTIONS,
        unanswered: MAX_UNANSWERED,
        request_header: HEADER_READ_TIMEOUT,
        keep_alive: KEEP_ALIVE,
        streams: HTTP2_STREAMS,
        counters: view.metrics.listener("conductor"),
    };
    let app = router(view).layer(tower::limit::GlobalConcurrencyLimitLayer::new(MAX_REQUESTS));
    let addr = listener.local_addr()?;
    let Some(files) = tls else {
        tracing::info!(%addr, "serving the Conductor API over HTTP");
        return crate::http::listener::serve(listener, None, app, limits, shutdown).await;
    };
    let config =
        axum_server::tls_rustls::RustlsConfig::from_pem_file(&files.cert, &files.key).await?;
    // A renewed certificate (cert-manager rewrites the mounted files) is taken without a restart.
    let reload = config.clone();
    let watched = files.clone();
    tokio::spawn(async move {
        let stamp = |f: &TlsFiles| {
            let m = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            (m(&f.cert), m(&f.key))
        };
        let mut seen = stamp(&watched);
        loop {
            tokio::time::sleep(CERT_CHECK).await;
            let now = stamp(&watched);
            if now != seen {
                match reload
                    .reload_from_pem_file(&watched.cert, &watched.key)
                    .await
                {
                    Ok(()) => {
                        tracing::info!(cert = %watched.cert.display(), "the Conductor API's certificate was reloaded");
                        seen = now;
                    }
                    Err(e) => {
                        tracing::warn!(error = %Said(&e), "reloading the Conductor API's certificate failed; keeping the old one")
                    }
                }
            }
        }
    });
    tracing::info!(%addr, cert = %files.cert.display(), "serving the Conductor API over HTTPS");
    crate::http::listener::serve(listener, Some(config), app, limits, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_requests_parse() {
        assert_eq!(
            parse_containers_request(br#"{"action":"update","ids":[],"releaseChannel":"GA"}"#)
                .unwrap(),
            ContainersAction::Update {
                ids: vec![],
                channel: ReleaseChannel::Ga
            }
        );
        assert_eq!(
            parse_containers_request(br#"{"action":"update","ids":["a"],"releaseChannel":"beta"}"#)
                .unwrap(),
            ContainersAction::Update {
                ids: vec!["a".into()],
                channel: ReleaseChannel::Beta
            }
        );
        assert_eq!(
            parse_containers_request(br#"{"action":"stop","ids":["a"]}"#).unwrap(),
            ContainersAction::Refused("stop".into())
        );
    }

    #[test]
    fn bad_requests_are_400_with_a_reason() {
        for (body, error) in [
            (&b"{not json"[..], "Invalid request body"),
            (br#"{"action":"explode"}"#, "Invalid action"),
            (
                br#"{"action":"update","releaseChannel":"stable"}"#,
                "Invalid releaseChannel",
            ),
            (br#"{"action":"update","ids":[""]}"#, "Invalid ids"),
            (br#"{"action":"update","extra":1}"#, "Invalid request body"),
            (br#"{"ids":[]}"#, "Invalid request body"),
            (br#"[]"#, "Invalid request body"),
        ] {
            let (status, e, _) = parse_containers_request(body).unwrap_err();
            assert_eq!(
                (status, e.as_str()),
                (StatusCode::BAD_REQUEST, error),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn role_gates_follow_the_conductor() {
        assert!(Gate::Control.allows("MONITOR"));
        assert!(!Gate::Control.allows("VIEWER"));
        assert!(!Gate::Manage.allows("MONITOR"));
        assert!(Gate::Manage.allows("EXTERNAL_MODULE"));
        assert!(!Gate::Control.allows("manager"));
    }
}
