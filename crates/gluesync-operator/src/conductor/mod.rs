//! The Conductor-compatible HTTP API: what the Core Hub UI calls, on Kubernetes as on Docker.
//!
//! Served at the bare paths and under `/conductor/api/`, in the Docker Conductor's `{success, data | error,
//! details}` envelope. Callers are authenticated by Core Hub (`GET /authentication/me` with their own
//! `Authorization` header or `gs-auth` cookie), cached 30 s, and every failure is closed. An update request
//! becomes a change of the GluesyncPlatform's spec (`version`, `modules`, a fresh `requestID`), which the
//! controller runs like any other; the answer comes when the update has ended, from `status.lastAttempt`.
//! Actions that would add, start, stop or remove workloads are refused: Helm owns the workloads.

mod disaster;
#[cfg(feature = "test-hooks")]
pub mod harness;
mod identities;
mod openapi;

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
/// How long an update request waits for the update to end before it answers with the outcome so far.
const UPDATE_WAIT: Duration = Duration::from_secs(900);

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

/// The Conductor's envelope of an answer that succeeded.
#[derive(Serialize, JsonSchema)]
pub struct Success {
    /// Always true.
    pub success: bool,
    /// What the route answers.
    pub data: Value,
}

/// The Conductor's envelope of an answer that failed.
#[derive(Serialize, JsonSchema)]
pub struct Failure<'a> {
    /// Always false.
    pub success: bool,
    /// What failed, in a few words.
    pub error: &'a str,
    /// Why, and what to do.
    pub details: String,
}

/// An answer in the Conductor's error envelope.
pub fn failure(status: StatusCode, error: &str, details: impl Into<String>) -> Response {
    (
        status,
        Json(Failure {
            success: false,
            error,
            details: details.into(),
        }),
    )
        .into_response()
}

fn success(data: Value) -> Response {
    Json(Success {
        success: true,
        data,
    })
    .into_response()
}

/// The document at `GET /openapi.json`, built once.
static OPENAPI: std::sync::LazyLock<Value> = std::sync::LazyLock::new(openapi::document);

/// The most workloads one update request names.
pub const MAX_IDS: usize = 256;
/// The longest workload name (a Kubernetes object name).
pub const MAX_ID_LENGTH: usize = 253;
/// The Conductor's actions on containers that GKO does not take on Kubernetes (it answers 409).
const REFUSED_ACTIONS: [&str; 8] = [
    "kill",
    "pull",
    "remove",
    "removeNetwork",
    "restart",
    "start",
    "stop",
    "undeploy",
];

fn action_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut actions = vec!["update"];
    actions.extend(REFUSED_ACTIONS);
    schemars::json_schema!({"type": "string", "enum": actions})
}

/// A `POST /containers` body.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainersRequest {
    /// `update`; the Conductor's other actions are refused on Kubernetes.
    #[schemars(schema_with = "action_schema")]
    pub action: String,
    /// The workloads to update; empty: every component.
    #[serde(default)]
    #[schemars(length(max = MAX_IDS), inner(length(min = 1, max = MAX_ID_LENGTH)))]
    pub ids: Vec<String>,
    /// The channel whose latest version the update goes to (any case; default ga).
    #[serde(default)]
    #[schemars(with = "Option<ReleaseChannel>")]
    pub release_channel: Option<String>,
}

/// The query of `GET /containers`.
#[derive(Deserialize, JsonSchema)]
pub struct ContainersFilter {
    /// Only the containers of this component type (`all` or none: every one).
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["agent", "module", "core-hub", "third-party", "unknown", "all"]))]
    pub kind: Option<String>,
}

/// What a `POST /containers` body asks for.
#[derive(Debug, PartialEq)]
pub enum ContainersAction {
    /// Update: every component (empty ids) or those named, to the latest on the channel.
    Update {
        ids: Vec<String>,
        channel: ReleaseChannel,
    },
    /// A Conductor action GKO does not take on Kubernetes.
    Refused(String),
}

/// Parses and checks a `POST /containers` body; the error is the answer to give.
pub fn parse_containers_request(
    body: &[u8],
) -> Result<ContainersAction, (StatusCode, String, String)> {
    let bad = |error: &str, details: String| (StatusCode::BAD_REQUEST, error.to_string(), details);
    let req: ContainersRequest =
        serde_json::from_slice(body).map_err(|e| bad("Invalid request body", e.to_string()))?;
    if req.ids.len() > MAX_IDS
        || req
            .ids
            .iter()
            .any(|id| id.is_empty() || id.len() > MAX_ID_LENGTH)
    {
        return Err(bad(
            "Invalid ids",
            format!("ids are at most {MAX_IDS} workload names"),
        ));
    }
    let channel = match req
        .release_channel
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("ga") => ReleaseChannel::Ga,
        Some("beta") => ReleaseChannel::Beta,
        Some("alpha") => ReleaseChannel::Alpha,
        Some(_) => {
            return Err(bad(
                "Invalid releaseChannel",
                "Allowed values: alpha, beta, ga".into(),
            ));
        }
    };
    match req.action.as_str() {
        "update" => Ok(ContainersAction::Update {
            ids: req.ids,
            channel,
        }),
        action if REFUSED_ACTIONS.contains(&action) => Ok(ContainersAction::Refused(req.action)),
        other => Err(bad(
            "Invalid action",
            format!("unknown action {other:?}; GKO takes \"update\""),
        )),
    }
}

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

/// Why a caller is not served before GKO knows who it is.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// No credentials, or Core Hub refused them.
    NotAuthenticated,
    /// An `Authorization` header that is not one visible-ASCII value.
    Malformed,
    /// An `Authorization` header of another scheme than `Bearer`.
    NotBearer,
    /// More than one `gs-auth` cookie.
    TwoSessions,
    /// GKO could not ask Core Hub (unreachable, an error, a spec GKO may not follow, an unknown role).
    VerificationFailed,
    /// Over the budget of identity checks.
    TooMany(Duration),
    /// GKO has no GluesyncPlatform to ask Core Hub through (starting, or none in the namespace).
    Unavailable,
}

/// The fixed answer a caller that is not authenticated gets: the same body for each reason, whatever
/// the install looks like (no URL, no Secret, nothing Core Hub said), so a stranger learns nothing.
fn refusal(why: Refusal) -> Response {
    match why {
        Refusal::NotAuthenticated => failure(
            StatusCode::UNAUTHORIZED,
            "Not authenticated",
            "sign in to Core Hub and try again",
        ),
        Refusal::Malformed => failure(
            StatusCode::BAD_REQUEST,
            "Bad Authorization header",
            "send one Authorization header with a Bearer token, or none",
        ),
        Refusal::TwoSessions => failure(
            StatusCode::BAD_REQUEST,
            "Bad Cookie header",
            "send one gs-auth cookie: sign out of Core Hub and in again",
        ),
        Refusal::NotBearer => failure(
            StatusCode::UNAUTHORIZED,
            "Not authenticated",
            "only a Bearer token is accepted in the Authorization header",
        ),
        Refusal::VerificationFailed => failure(
            StatusCode::UNAUTHORIZED,
            "Authentication verification failed",
            "GKO could not verify the caller with Core Hub; try again later",
        ),
        Refusal::TooMany(wait) => too_many_requests(
            "Too many authentication attempts",
            "GKO asks Core Hub about new callers at a limited rate",
            wait,
        ),
        Refusal::Unavailable => unavailable(),
    }
}

/// 503 while GKO cannot serve: starting, or no GluesyncPlatform in the namespace.
fn unavailable() -> Response {
    let mut resp = failure(
        StatusCode::SERVICE_UNAVAILABLE,
        "GKO is starting",
        "the operator cannot answer yet; try again",
    );
    resp.headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from_static("1"));
    resp
}

/// 429 in the envelope, with `Retry-After` in whole seconds (at least one).
fn too_many_requests(error: &str, details: &str, wait: Duration) -> Response {
    let mut resp = failure(StatusCode::TOO_MANY_REQUESTS, error, details);
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    resp.headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from(secs));
    resp
}

/// While GKO updates itself, every route but the OpenAPI document answers 503 with `Retry-After: 60`, as
/// the Conductor does during its own update.
async fn unless_self_updating(State(api): State<Api>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path.ends_with("/openapi.json") {
        return next.run(req).await;
    }
    if !path.ends_with("/health") && !api.view.ready() {
        // Until the caches have listed the namespace, GKO would answer from a partial view.
        return unavailable();
    }
    match api.view.self_updating() {
        None => next.run(req).await,
        Some(_) => {
            let mut resp = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "success": false,
                    "error": "Conductor update in progress",
                    "message": "Conductor is updating. Try again later",
                    "details": "gluesync-operator is updating itself",
                })),
            )
                .into_response();
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("60"));
            resp
        }
    }
}

/// Every request but an update request (which waits for the update, bounded by itself) is answered
/// within [`REQUEST_TIMEOUT`].
async fn timely(req: Request, next: Next) -> Response {
    let update =
        req.method() == axum::http::Method::POST && req.uri().path().ends_with("/containers");
    if update {
        return next.run(req).await;
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "Request timed out",
            format!(
                "GKO could not answer within {} s",
                REQUEST_TIMEOUT.as_secs()
            ),
        ),
    }
}

/// Refuses a caller whose role the gate does not allow.
#[allow(clippy::result_large_err)]
fn allow(caller: &Caller, gate: Gate) -> Result<(), Response> {
    if gate.allows(&caller.role) {
        return Ok(());
    }
    Err(failure(
        StatusCode::FORBIDDEN,
        &format!("Role {} cannot {}", caller.role, gate.verb()),
        "Core Hub's role of the caller does not allow this",
    ))
}

/// Routes anyone may call: everything else answers 401 to a caller Core Hub does not know, before any
/// other check (a stranger learns nothing about the install).
fn open_route(path: &str) -> bool {
    let path = path.strip_prefix("/conductor/api").unwrap_or(path);
    matches!(path, "/health" | "/openapi.json")
}

/// Authentication first: the caller is put into the request for the handlers. A write authenticated by
/// the session cookie must be a JSON request from the same origin (when the browser says where it comes
/// from), so a cross-site form cannot post with the user's cookie.
async fn authenticated(State(api): State<Api>, mut req: Request, next: Next) -> Response {
    if open_route(req.uri().path()) {
        return next.run(req).await;
    }
    let client = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (caller, by_cookie) = match api.authenticate(req.headers(), client).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let headers = req.headers();
    let write = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    if write && by_cookie {
        let json = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
            });
        let host = headers.get("host").and_then(|v| v.to_str().ok());
        let same_origin = match headers.get("origin").map(|v| v.to_str()) {
            None => true,
            Some(Err(_)) => false,
            Some(Ok(origin)) => url::Url::parse(origin).ok().is_some_and(|o| {
                // The origin's authority as a Host header names it (the port only when not the
                // scheme's default).
                let authority = match (o.host_str(), o.port()) {
                    (Some(h), Some(p)) => format!("{h}:{p}"),
                    (Some(h), None) => h.to_string(),
                    (None, _) => return false,
                };
                host.is_some_and(|h| h.eq_ignore_ascii_case(&authority))
            }),
        };
        if !json || !same_origin {
            tracing::warn!(username = %caller.username, path = %req.uri().path(), "refused a cross-site cookie request");
            return failure(
                StatusCode::FORBIDDEN,
                "Cross-site request refused",
                "a request authenticated by the session cookie must be application/json from the same origin",
            );
        }
    }
    let Some(_slot) = InFlight::take(&api.in_flight, &caller.username) else {
        tracing::warn!(username = %caller.username, path = %req.uri().path(), "refused: the caller has {CALLER_REQUESTS} requests in flight");
        return too_many_requests(
            "Too many requests",
            &format!("at most {CALLER_REQUESTS} requests of one user are served at once"),
            Duration::from_secs(1),
        );
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

async fn health() -> Response {
    success(json!("Health check OK!"))
}

async fn openapi() -> Response {
    Json(OPENAPI.clone()).into_response()
}

fn container_json(w: &crate::update::observed::Workload) -> Value {
    let image = ImageRef::parse(&w.image);
    let kind = w.component_type.map_or("unknown", |t| match t {
        ComponentType::Operator => "module",
        t => t.as_label(),
    });
    json!({
        "id": w.name,
        "type": kind,
        "persisted": true,
        "service": {"image": w.image, "labels": {"com.molo17.conductor.type": w.label_value}},
        "info": {
            "name": w.name,
            "image": w.image,
            "state": if w.ready { "running" } else { "restarting" },
            "status": if w.ready { "ready" } else { "not ready" },
            "versionTag": w.version(),
            "parsedImage": {
                "repository": image.repository,
                "tag": image.tag,
                "imageName": image.name(),
                "fullName": w.image,
                "original": w.image,
            },
            "kind": w.kind_name(),
        },
    })
}

/// The CPUs GKO may use, read once: on Linux the standard library reads the cgroup's files for it, at
/// every call.
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Filters of `GET /containers` remembered at most (any other is built per request).
const LISTINGS: usize = 8;

async fn list_containers(State(api): State<Api>, req: Request) -> Response {
    let wanted = axum::extract::Query::<ContainersFilter>::try_from_uri(req.uri())
        .ok()
        .and_then(|q| q.0.kind)
        .filter(|k| k != "all");
    let version = api.view.workloads_version();
    let remembered = {
        let listings = api.containers.lock().unwrap_or_else(|e| e.into_inner());
        (listings.version == version)
            .then(|| listings.bodies.iter().find(|(k, _)| *k == wanted))
            .flatten()
            .map(|(_, body)| body.clone())
    };
    let body = match remembered {
        Some(body) => body,
        None => {
            let body = containers_body(&api.view.workloads(), wanted.as_deref());
            let mut listings = api.containers.lock().unwrap_or_else(|e| e.into_inner());
            if listings.version != version {
                *listings = Listings {
                    version,
                    bodies: vec![],
                };
            }
            if listings.bodies.len() < LISTINGS
                && !listings.bodies.iter().any(|(k, _)| *k == wanted)
            {
                listings.bodies.push((wanted, body.clone()));
            }
            body
        }
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The body of `GET /containers` for these workloads, only those of component type `wanted` when given.
fn containers_body(
    workloads: &[crate::update::observed::Workload],
    wanted: Option<&str>,
) -> axum::body::Bytes {
    let containers: Vec<Value> = workloads
        .iter()
        .map(container_json)
        .filter(|c| wanted.is_none_or(|t| c["type"] == t))
        .collect();
    let body = Success {
        success: true,
        data: json!({
            "systemInfo": {"ncpu": cpus()},
            "containers": containers,
        }),
    };
    serde_json::to_vec(&body).map_or_else(|_| axum::body::Bytes::new(), axum::body::Bytes::from)
}

/// Reads a request's body within [`BODY_READ_TIMEOUT`] and [`BODY_LIMIT`]; the error is the answer.
///
/// A body over the limit is still read to its end (and dropped), up to [`BODY_DRAIN_LIMIT`], before
/// the 413 is sent: answering while the client is still sending makes the connection close with
/// unread bytes in it, which the kernel does with a reset, and the client, still writing, sees a
/// broken connection instead of the answer. A body beyond the drain limit gets the 413 with
/// `Connection: close`, and the connection closes: a client that had the whole body in its socket's
/// buffers and the answer whole must not keep the connection for its next request.
async fn read_body(req: Request, route: &str) -> Result<axum::body::Bytes, Response> {
    use futures::StreamExt;
    let too_slow = || {
        failure(
            StatusCode::REQUEST_TIMEOUT,
            "Request body too slow",
            format!(
                "the body must arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )
    };
    let too_large = || {
        failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request body too large",
            format!("the body of {route} is at most {BODY_LIMIT} bytes"),
        )
    };
    let deadline = tokio::time::Instant::now() + BODY_READ_TIMEOUT;
    let mut frames = req.into_body().into_data_stream();
    let mut body = Vec::new();
    let mut seen = 0usize;
    loop {
        match tokio::time::timeout_at(deadline, frames.next()).await {
            Err(_) => return Err(too_slow()),
            Ok(None) if seen > BODY_LIMIT => return Err(too_large()),
            Ok(None) => return Ok(body.into()),
            Ok(Some(Err(_))) => return Err(too_large()),
            Ok(Some(Ok(chunk))) => {
                seen = seen.saturating_add(chunk.len());
                if seen > BODY_DRAIN_LIMIT {
                    let mut closing = too_large();
                    closing.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                    return Err(closing);
                }
                if seen <= BODY_LIMIT {
                    body.extend_from_slice(&chunk);
                } else {
                    body = Vec::new();
                }
            }
        }
    }
}

async fn post_containers(State(api): State<Api>, req: Request) -> Response {
    let Some(caller) = req.extensions().get::<Caller>().cloned() else {
        return failure(StatusCode::UNAUTHORIZED, "Not authenticated", "no caller");
    };
    if let Err(resp) = allow(&caller, Gate::Control) {
        return resp;
    }
    let body = match read_body(req, "POST /containers").await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let action = match parse_containers_request(&body) {
        Ok(a) => a,
        Err((status, error, details)) => return failure(status, &error, details),
    };
    let (ids, channel) = match action {
        ContainersAction::Refused(action) => {
            return failure(
                StatusCode::CONFLICT,
                &format!("Action {action} is not available on Kubernetes"),
                "Helm owns the workloads; GKO changes only their image, through action update",
            );
        }
        ContainersAction::Update { ids, channel } => (ids, channel),
    };
    let request_id = match accept_update(&api, &caller, ids, channel).await {
        Ok(id) => id,
        Err(resp) => {
            tracing::info!(username = %caller.username, role = %caller.role, "update request from the Core Hub UI refused");
            return resp;
        }
    };
    match wait_for_attempt(&api, request_id.as_deref()).await {
        Ok(answer) => answer,
        Err(resp) => resp,
    }
}

/// How often a request's spec write is tried again after a conflict (GKO's own status write, or any
/// other write, landed between the read and the write): each time re-read and re-decided.
const REQUEST_WRITE_TRIES: usize = 5;
/// How long a request waits for its turn to decide (another request deciding and writing).
const REQUEST_TURN: Duration = Duration::from_secs(10);

/// What an update request comes to once checked against the platform.
enum Asked {
    /// Nothing new: the request asks what runs, or what is asked already, or what the last attempt
    /// of this generation reached; it gets that update's answer, and nothing is written.
    Join(Option<String>),
    /// New versions (or a retry of what did not succeed) to write into the spec.
    Write {
        version: String,
        modules: std::collections::BTreeMap<String, String>,
    },
}

/// Checks an update request and writes it into the spec unless it asks nothing new; the request id
/// whose attempt answers it. Requests decide one at a time (the turn is held while checking and writing,
/// never while the update runs), and a write that conflicts with another write is re-read and re-decided.
async fn accept_update(
    api: &Api,
    caller: &Caller,
    ids: Vec<String>,
    channel: ReleaseChannel,
) -> Result<Option<String>, Response> {
    let gsp = api.platform()?;
    let workloads = api.view.workloads();
    refuse(&gsp, &workloads, &ids)?;
    // Versions to ask for: the latest on the request's channel, from the catalog.
    let latest = if gsp.spec.catalog.offline {
        return Err(failure(
            StatusCode::CONFLICT,
            "No version catalog",
            "this install is offline: set spec.version and spec.modules in the GluesyncPlatform",
        ));
    } else {
        let check = crate::update::catalog::check(&gsp, &workloads, String::new(), channel);
        match crate::catalog::latest(&check.base, channel, &check.images).await {
            Ok(l) => l,
            Err(e) => {
                return Err(failure(
                    StatusCode::BAD_GATEWAY,
                    "Unable to retrieve agent version",
                    e,
                ));
            }
        }
    };
    // The turn is taken once the catalog has answered: a slow catalog never holds other requests back.
    let Ok(_turn) = tokio::time::timeout(REQUEST_TURN, api.updating.lock()).await else {
        return Err(failure(
            StatusCode::CONFLICT,
            "An update is already running",
            "another update request is being written; wait for it to end, then ask again",
        ));
    };
    let mut gsp = api.platform()?;
    for attempt in 0..REQUEST_WRITE_TRIES {
        if attempt > 0 {
            gsp = api
                .view
                .read_platform(&kube::ResourceExt::name_any(&gsp))
                .await
                .map_err(|e| {
                    tracing::warn!(error = %Said(&e), "reading the GluesyncPlatform again failed");
                    failure(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Failed to do containers action",
                        "GKO could not read the GluesyncPlatform; nothing was changed, try again",
                    )
                })?;
        }
        let (version, modules) = match asked(&gsp, &workloads, &latest, &ids)? {
            Asked::Join(id) => return Ok(id),
            Asked::Write { version, modules } => (version, modules),
        };
        let request_id = format!("ui-{}", jiff::Timestamp::now().as_millisecond());
        let written = api
            .view
            .writer
            .write_update_request(
                &gsp,
                &version,
                &modules,
                &crate::api::UiRequest {
                    id: request_id.clone(),
                    channel,
                    ids: ids.clone(),
                    username: Some(caller.username.to_string()),
                    role: Some(caller.role.to_string()),
                },
            )
            .await;
        match written {
            Ok(_) => {}
            Err(e) if crate::cluster::writer::is_conflict(&e) => {
                tracing::debug!(%request_id, "the GluesyncPlatform changed before the request was written; deciding again");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %Said(&e), "writing an update request failed");
                return Err(failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Failed to do containers action",
                    "GKO could not write the request into the GluesyncPlatform; nothing was changed, try again",
                ));
            }
        }
        tracing::info!(
            gsp = %gsp.metadata.name.clone().unwrap_or_default(),
            %version,
            %request_id,
            username = %caller.username,
            role = %caller.role,
            "update requested from the Core Hub UI"
        );
        // The next request decides from a cache that holds this one.
        let mut changed = api.view.changed.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while api
                .view
                .platform()
                .is_none_or(|g| g.spec.request_id.as_deref() != Some(request_id.as_str()))
            {
                if changed.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        return Ok(Some(request_id));
    }
    Err(failure(
        StatusCode::SERVICE_UNAVAILABLE,
        "Failed to do containers action",
        "the GluesyncPlatform kept changing while the request was written; nothing was changed, try again",
    ))
}

/// The refusals that do not depend on the catalog: updates managed in Git, GKO's own Deployment asked
/// for with self-update off, an unknown component.
#[allow(clippy::result_large_err)]
fn refuse(
    gsp: &GluesyncPlatform,
    workloads: &[crate::update::observed::Workload],
    ids: &[String],
) -> Result<(), Response> {
    if gsp.spec.update_policy == UpdatePolicy::Gitops
        && !crate::update::mutated(crate::update::Mutant::UiUnderGitops)
    {
        return Err(failure(
            StatusCode::CONFLICT,
            "Updates of this install are managed in Git",
            "the GluesyncPlatform's updatePolicy is gitops: commit the new version to Git; nothing was changed",
        ));
    }
    for id in ids {
        if workloads
            .iter()
            .any(|w| &w.name == id && w.component_type == Some(ComponentType::Operator))
            && !gsp.spec.self_update.enabled
        {
            return Err(failure(
                StatusCode::CONFLICT,
                "GKO does not update itself here",
                format!(
                    "{id} is GKO's own Deployment and spec.selfUpdate.enabled is false: change its image with Helm"
                ),
            ));
        }
        if !workloads.iter().any(|w| &w.name == id) {
            return Err(failure(
                StatusCode::NOT_FOUND,
                "Unknown container",
                format!("no managed workload is named {id}"),
            ));
        }
    }
    Ok(())
}

/// What a request for `ids` (empty: every component) comes to on `gsp`, with the catalog's `latest`.
#[allow(clippy::result_large_err)]
fn asked(
    gsp: &GluesyncPlatform,
    workloads: &[crate::update::observed::Workload],
    latest: &std::collections::BTreeMap<String, String>,
    ids: &[String],
) -> Result<Asked, Response> {
    // Checked again on every try: the platform may have changed since the request was first read.
    refuse(gsp, workloads, ids)?;
    // The latest version of a workload's image, when it is newer than the one that runs: the UI's update
    // never takes a component back (a beta that runs stays when GA is asked for).
    let latest_of = |w: &crate::update::observed::Workload| {
        let candidate = latest.get(ImageRef::parse(&w.image).name())?;
        let running = crate::api::version::image_version(&w.image).ok()?;
        let newer = candidate
            .parse::<crate::api::version::Version>()
            .is_ok_and(|c| c > running);
        newer.then(|| candidate.clone())
    };
    let core_hub = workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    let everything = ids.is_empty();
    let mut version = gsp.spec.version.clone();
    let mut modules = gsp.spec.modules.clone();
    for w in workloads {
        if !everything && !ids.contains(&w.name) {
            continue;
        }
        match w.component_type {
            Some(ComponentType::CoreHub | ComponentType::Agent) => {
                if let Some(v) = core_hub.and_then(latest_of) {
                    version = v;
                }
            }
            Some(ComponentType::Module) if everything => {
                // Unpinned modules follow the catalog with Core Hub; pinned ones move to the latest.
                if modules.contains_key(&w.name)
                    && let Some(v) = latest_of(w)
                {
                    modules.insert(w.name.clone(), v);
                }
            }
            Some(ComponentType::Module | ComponentType::ThirdParty) => {
                if let Some(v) = latest_of(w) {
                    modules.insert(w.name.clone(), v);
                }
            }
            // GKO itself, asked for by name: pinned, it updates itself alone, last (see update::selfupdate).
            // Under Update all, the catalog's latest is taken at the end of the update without a pin, and a
            // pin left from an earlier request moves to the latest too.
            Some(ComponentType::Operator) if !everything || modules.contains_key(&w.name) => {
                if let Some(v) = latest_of(w) {
                    modules.insert(w.name.clone(), v);
                }
            }
            _ => {}
        }
    }
    let status = gsp.status.clone().unwrap_or_default();
    let nothing_new = version == gsp.spec.version && modules == gsp.spec.modules;
    // A request of the UI written into the spec that no update has answered yet is one running.
    let answered = status
        .last_attempt
        .as_ref()
        .and_then(|a| a.request_id.as_ref());
    let attempt_generation = status.last_attempt.as_ref().and_then(|a| a.generation);
    let pending_ui_request = gsp
        .spec
        .request_id
        .as_ref()
        .is_some_and(|id| id.starts_with("ui-") && Some(id) != answered)
        && gsp.metadata.generation != attempt_generation;
    if status.update.is_some() || pending_ui_request {
        return match (&gsp.spec.request_id, nothing_new) {
            // The same request again: it gets the answer of the update that runs for it.
            (Some(id), true) => Ok(Asked::Join(Some(id.clone()))),
            _ => Err(failure(
                StatusCode::CONFLICT,
                "An update is already running",
                "wait for it to end, then ask again",
            )),
        };
    }
    // What the last attempt of this generation reached is asked again: its answer, no new update.
    if nothing_new
        && let Some(last) = &status.last_attempt
        && last.generation == gsp.metadata.generation
        && last.result == crate::api::UpdateResult::Succeeded
    {
        return Ok(Asked::Join(last.request_id.clone()));
    }
    Ok(Asked::Write { version, modules })
}

/// The answer for an update that waits, once GKO has seen the spec that asked for it: for a maintenance
/// window (`Scheduled`, with when), or for its approval.
fn waiting(gsp: &crate::api::GluesyncPlatform, request_id: Option<&str>) -> Option<Response> {
    use crate::update::gate::{WAITING_FOR_APPROVAL, WAITING_FOR_WINDOW};
    let status = gsp.status.as_ref()?;
    if status.observed_generation != gsp.metadata.generation {
        return None;
    }
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciling" && c.status == "True")
        .map(|c| c.reason.as_str())?;
    let ours = status
        .update
        .as_ref()
        .is_none_or(|u| u.request_id.as_deref() == request_id);
    let result = match reason {
        WAITING_FOR_WINDOW if ours => "Scheduled",
        WAITING_FOR_APPROVAL if ours && status.update.is_some() => "WaitingForApproval",
        _ => return None,
    };
    Some(
        (
            StatusCode::ACCEPTED,
            Json(json!({"success": true, "data": {
                "result": result,
                "scheduledAt": status.next_window,
                "approvalID": status.update.as_ref().and_then(|u| u.approval_id.clone()),
                "message": status.message,
            }})),
        )
            .into_response(),
    )
}

/// Waits until the update of `request_id` has ended, and answers per component from `status.lastAttempt`.
/// It reads the watch cache each time the GluesyncPlatform changes; it never polls the API server.
async fn wait_for_attempt(api: &Api, request_id: Option<&str>) -> Result<Response, Response> {
    let deadline = tokio::time::Instant::now() + UPDATE_WAIT;
    let mut changed = api.view.changed.subscribe();
    loop {
        let gsp = api.platform()?;
        if let Some(answer) = waiting(&gsp, request_id) {
            return Ok(answer);
        }
        let status = gsp.status.unwrap_or_default();
        if let Some(attempt) = status
            .last_attempt
            .filter(|a| a.request_id.as_deref() == request_id)
            && status.update.is_none()
        {
            let containers: Vec<Value> = attempt
                .results
                .iter()
                .map(|r| {
                    let ok = matches!(r.status, ComponentResultStatus::Ok | ComponentResultStatus::Skipped | ComponentResultStatus::Scheduled);
                    let message = match (&r.message, &r.from, &r.to) {
                        (Some(m), _, _) => m.clone(),
                        (None, Some(f), Some(t)) => format!("{} updated from {f} to {t}", r.name),
                        _ => format!("{} {:?}", r.name, r.status),
                    };
                    json!({"id": r.name, "status": if ok { "OK" } else { "ERROR" }, "message": message})
                })
                .collect();
            return Ok(success(json!({
                "result": attempt.result,
                "message": attempt.message,
                "containers": containers,
            })));
        }
        match tokio::time::timeout_at(deadline, changed.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                // The outcome so far: the update goes on, and the UI can ask again later.
                let u = status.update.as_ref();
                return Ok((
                    StatusCode::ACCEPTED,
                    Json(json!({"success": true, "data": {
                        "result": "Updating",
                        "step": u.map(|u| format!("{:?}", u.step.name())),
                        "message": status.message,
                        "details": "the update is still running; follow it with kubectl get gsp -w",
                    }})),
                )
                    .into_response());
            }
        }
    }
}

async fn refuse_services() -> Response {
    failure(
        StatusCode::CONFLICT,
        "Services are not managed here on Kubernetes",
        "Helm owns the workloads: add or change modules in the Helm values; GKO changes only their image",
    )
}

async fn service_version(
    State(api): State<Api>,
    Path(params): Path<Vec<(String, String)>>,
) -> Response {
    let id = params
        .iter()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let channel = params
        .iter()
        .find(|(k, _)| k == "channel")
        .map(|(_, v)| v.clone());
    let channel = match channel.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("ga") => ReleaseChannel::Ga,
        Some("beta") => ReleaseChannel::Beta,
        Some("alpha") => ReleaseChannel::Alpha,
        Some(_) => {
            return failure(
                StatusCode::BAD_REQUEST,
                "Invalid releaseChannel",
                "Allowed values: alpha, beta, ga",
            );
        }
    };
    let gsp = match api.platform() {
        Ok(g) => g,
        Err(resp) => return resp,
    };
    let workloads = api.view.workloads();
    let Some(w) = workloads.iter().find(|w| w.name == id) else {
        return failure(
            StatusCode::NOT_FOUND,
            &format!("Service {id} not found"),
            "no managed workload has that name",
        );
    };
    if gsp.spec.catalog.offline {
        return failure(
            StatusCode::BAD_GATEWAY,
            "Unable to retrieve agent version",
            "this install is offline",
        );
    }
    let base = gsp
        .spec
        .catalog
        .url
        .as_deref()
        .unwrap_or(crate::update::catalog::DEFAULT_URL);
    let entry = match crate::catalog::CatalogClient::new(base) {
        Ok(c) => c.entry(ImageRef::parse(&w.image).name()).await,
        Err(e) => {
            return failure(
                StatusCode::BAD_GATEWAY,
                "Unable to retrieve agent version",
                e.to_string(),
            );
        }
    };
    let entry = match entry {
        Ok(e) => e,
        Err(e) => {
            return failure(
                StatusCode::BAD_GATEWAY,
                "Unable to retrieve agent version",
                e.to_string(),
            );
        }
    };
    let current = w.version();
    let mut to_update = vec![];
    let check = crate::update::catalog::check(&gsp, &workloads, String::new(), channel);
    if w.component_type == Some(ComponentType::CoreHub)
        && let Ok(latest) = crate::catalog::latest(&check.base, channel, &check.images).await
    {
        // GKO's own Deployment is offered like a module when it would update itself.
        let gko_updates =
            gsp.spec.self_update.enabled && gsp.spec.update_policy == crate::api::UpdatePolicy::Ui;
        for m in workloads.iter().filter(|m| {
            m.component_type == Some(ComponentType::Module)
                || (gko_updates && m.component_type == Some(ComponentType::Operator))
        }) {
            if let (Some(l), Some(c)) = (latest.get(ImageRef::parse(&m.image).name()), m.version())
                && l.parse::<crate::api::version::Version>().ok()
                    > c.parse::<crate::api::version::Version>().ok()
            {
                to_update.push(m.name.clone());
            }
        }
    }
    success(json!({
        "currentVersion": current,
        "latestVersionGA": entry.latest_version_ga,
        "latestVersionBeta": entry.latest_version_beta,
        "latestVersionAlpha": entry.latest_version_alpha,
        "releaseChannel": channel.as_str(),
        "mandatoryUpdate": !to_update.is_empty(),
        "servicesToUpdate": to_update,
    }))
}

async fn not_found() -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "Not found",
        "see /openapi.json for the routes GKO serves",
    )
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

async fn method_not_allowed(req: Request) -> Response {
    failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed",
        format!(
            "{} is not served at {}; see /openapi.json",
            req.method(),
            req.uri().path()
        ),
    )
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

/// Counts every answer by its HTTP status (`gluesync_operator_conductor_requests_total`).
async fn counted(State(api): State<Api>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    api.view
        .metrics
        .conductor_requests
        .get_or_create(&crate::metrics::StatusLabel {
            status: resp.status().as_u16().to_string(),
        })
        .inc();
    resp
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
