//! A simulator of Core Hub's REST API and of the version catalog, for GKO's tests, benchmarks and demo.
//!
//! It speaks the API as Core Hub's clients use it (login and token, `GET /authentication/me` with roles,
//! `GET /pipelines`, maintenance enter and exit) and the catalog's `GET /agent/{image}/version`, over HTTP or
//! HTTPS. It holds any number of pipelines, and its [`Faults`] make it slow, refuse connections, answer 500,
//! hang, or leave chosen pipelines out of maintenance mode. Tests drive it in-process through [`Simulator`];
//! the binary adds an admin API (`/_sim/...`) on a port of its own.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Path, Request, State},
    http::{HeaderMap, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post, put},
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

/// A pipeline as Core Hub lists it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pipeline {
    pub id: String,
    pub name: String,
    pub description: String,
    pub configuration_completed: bool,
    pub is_in_maintenance_mode: bool,
}

/// What the simulator does wrong, on purpose.
///
/// Maintenance timing: each accepted enter or exit request takes effect on its own, `maintenance_delay_ms`
/// after it was accepted (at once when 0), whatever other requests came before or after it; an enter
/// request waits `enter_delay_ms` more. So with `enter_delay_ms` larger than the time between an enter and
/// the exit that follows it, the exit lands first and the late enter then leaves the pipeline in maintenance
/// mode: the worst case of a late maintenance request.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Faults {
    /// Every Core Hub answer waits this long.
    pub delay_ms: u64,
    /// The next `error_count` Core Hub requests whose path starts with `error_path` (any when empty) and
    /// contains `error_contains` (any when empty) are answered with `error_status` (500 when 0).
    /// `u32::MAX` never runs out: every such request fails until the fault is cleared.
    pub error_count: u32,
    pub error_status: u16,
    pub error_path: String,
    /// See `error_count`: e.g. `"/commands/maintenance/exit"` fails only exit requests.
    pub error_contains: String,
    /// Core Hub requests never get an answer.
    pub hang: bool,
    /// The Core Hub port refuses connections, as when Core Hub is down.
    pub down: bool,
    /// Pipelines that never reach maintenance mode.
    pub stuck: HashSet<String>,
    /// An enter or exit request takes effect this long after it was accepted (see above).
    pub maintenance_delay_ms: u64,
    /// An enter request takes effect this much later again than `maintenance_delay_ms`; exits are not
    /// delayed by it.
    pub enter_delay_ms: u64,
    /// `GET /pipelines` and `GET /pipelines/{id}` answer pipelines without their `isInMaintenanceMode`
    /// field, as a Core Hub that renamed it would.
    pub omit_maintenance_field: bool,
    /// Every catalog answer waits this long.
    pub catalog_delay_ms: u64,
}

/// Latest versions of one image on each release channel.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    #[serde(rename = "latestVersionGA")]
    pub latest_version_ga: String,
    pub latest_version_beta: String,
    pub latest_version_alpha: String,
}

impl CatalogEntry {
    pub fn all(version: &str) -> CatalogEntry {
        CatalogEntry {
            latest_version_ga: version.into(),
            latest_version_beta: version.into(),
            latest_version_alpha: version.into(),
        }
    }
}

/// Counts of what was asked of the simulator.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Calls {
    pub logins: u64,
    /// Identity checks (`GET /authentication/me`), answered or refused.
    pub me: u64,
    /// The identity checks among them that were refused (401: an unknown token).
    pub me_refused: u64,
    pub list_pipelines: u64,
    pub catalog: u64,
    /// Maintenance enter requests per pipeline.
    pub enter: BTreeMap<String, u32>,
    /// Maintenance exit requests per pipeline.
    pub exit: BTreeMap<String, u32>,
    /// Enter requests for a pipeline already in maintenance mode.
    pub enter_while_in_maintenance: u64,
    /// Every Core Hub API request (login, me, pipelines, maintenance; failed, slow and hung ones too) by
    /// its `User-Agent` header ("" when it has none). The catalog's requests are not counted here.
    pub by_agent: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Inner {
    users: HashMap<String, (String, String)>,
    tokens: HashMap<String, String>,
    pipelines: BTreeMap<String, Pipeline>,
    faults: Faults,
    catalog: HashMap<String, CatalogEntry>,
    catalog_maintenance: bool,
    calls: Calls,
    next_token: u64,
    /// Maintenance requests accepted and not applied yet.
    pending: usize,
    /// When the first maintenance enter request came since the span was last taken, and when a
    /// pipeline last left maintenance mode after it.
    paused: (Option<std::time::Instant>, Option<std::time::Instant>),
}

impl Inner {
    /// A maintenance request takes effect; a pipeline leaving maintenance mode ends the paused span
    /// (so far).
    fn apply_maintenance(&mut self, id: &str, enter: bool) {
        if let Some(p) = self.pipelines.get_mut(id) {
            if p.is_in_maintenance_mode && !enter {
                self.paused.1 = Some(std::time::Instant::now());
            }
            p.is_in_maintenance_mode = enter;
        }
    }
}

/// The simulator's state, shared by its servers and its owner.
#[derive(Clone, Default)]
pub struct Sim {
    inner: Arc<Mutex<Inner>>,
    down: Arc<watch::Sender<bool>>,
}

impl Sim {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a user who logs in with `password` and has `role` (SUPER_ADMIN, MANAGER, MONITOR, VIEWER...).
    pub fn add_user(&self, username: &str, password: &str, role: &str) {
        self.lock()
            .users
            .insert(username.into(), (password.into(), role.into()));
    }

    /// A token for `username`, as a login would give.
    pub fn token_for(&self, username: &str) -> String {
        let mut inner = self.lock();
        inner.next_token += 1;
        // Shaped as Core Hub's: a JWT (claims jti, iss, sub, timestamp, plan), signed with a key of its own.
        let token = {
            use base64::Engine;
            let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
            let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
            let claims = serde_json::json!({
                "jti": format!("sim-{}", inner.next_token),
                "iss": "MOLO17",
                "sub": username,
                "timestamp": inner.next_token,
                "plan": "enterprise",
            });
            let signature = b64(format!("sim-signature-{}", inner.next_token).as_bytes());
            format!(
                "{header}.{}.{signature}",
                b64(claims.to_string().as_bytes())
            )
        };
        inner.tokens.insert(token.clone(), username.into());
        token
    }

    /// Forgets every token given so far, as a Core Hub restart does.
    pub fn revoke_tokens(&self) {
        self.lock().tokens.clear();
    }

    /// Adds `count` running pipelines named `{prefix}{n}`.
    pub fn add_pipelines(&self, prefix: &str, count: usize) {
        let mut inner = self.lock();
        let start = inner.pipelines.len();
        for n in start..start + count {
            let id = format!("{prefix}{n:05}");
            inner.pipelines.insert(
                id.clone(),
                Pipeline {
                    name: format!("pipeline {id}"),
                    id,
                    description: String::new(),
                    configuration_completed: true,
                    is_in_maintenance_mode: false,
                },
            );
        }
    }

    /// Puts a pipeline into maintenance mode (or out of it) as a user would.
    pub fn set_maintenance(&self, id: &str, on: bool) {
        if let Some(p) = self.lock().pipelines.get_mut(id) {
            p.is_in_maintenance_mode = on;
        }
    }

    pub fn pipelines(&self) -> Vec<Pipeline> {
        self.lock().pipelines.values().cloned().collect()
    }

    pub fn in_maintenance(&self) -> Vec<String> {
        self.lock()
            .pipelines
            .values()
            .filter(|p| p.is_in_maintenance_mode)
            .map(|p| p.id.clone())
            .collect()
    }

    /// Maintenance requests accepted and not applied yet (they land late).
    pub fn pending_maintenance(&self) -> usize {
        self.lock().pending
    }

    /// The pipelines' paused time: from the first maintenance enter request since the last call (or
    /// the start) to the moment a pipeline last left maintenance mode after it; `None` when no pipeline
    /// left maintenance mode after an enter request. Starts the next span.
    pub fn take_paused_time(&self) -> Option<Duration> {
        let (from, to) = std::mem::take(&mut self.lock().paused);
        to?.checked_duration_since(from?)
    }

    pub fn calls(&self) -> Calls {
        self.lock().calls.clone()
    }

    pub fn faults(&self) -> Faults {
        self.lock().faults.clone()
    }

    /// Replaces the faults.
    pub fn set_faults(&self, faults: Faults) {
        let down = faults.down;
        self.lock().faults = faults;
        self.down.send_replace(down);
    }

    /// Changes the faults in place.
    pub fn update_faults(&self, f: impl FnOnce(&mut Faults)) {
        let mut faults = self.faults();
        f(&mut faults);
        self.set_faults(faults);
    }

    pub fn set_catalog(&self, image: &str, entry: CatalogEntry) {
        self.lock().catalog.insert(image.into(), entry);
    }

    /// The catalog answers 503 MAINTENANCE_MODE while on.
    pub fn set_catalog_maintenance(&self, on: bool) {
        self.lock().catalog_maintenance = on;
    }

    fn authenticate(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        let cookie = headers
            .get("cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|c| {
                c.split(';')
                    .filter_map(|kv| kv.trim().split_once('='))
                    .find(|(k, _)| *k == "gs-auth")
                    .map(|(_, v)| v.to_string())
            });
        let inner = self.lock();
        let token = bearer.or(cookie)?;
        let user = inner.tokens.get(&token)?;
        let role = inner.users.get(user).map(|(_, r)| r.clone())?;
        Some((user.clone(), role))
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({
            "notificationId": -1,
            "message": "Invalid authorization token, please retry or make a new login in order to obtain a fresh token"
        })),
    )
        .into_response()
}

/// Slowness, hangs and injected errors, before any Core Hub route.
async fn faults(State(sim): State<Sim>, req: Request, next: Next) -> Response {
    let (delay, hang, error) = {
        let mut inner = sim.lock();
        let agent = req
            .headers()
            .get("user-agent")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        *inner.calls.by_agent.entry(agent).or_default() += 1;
        let f = &mut inner.faults;
        let path = req.uri().path();
        let error = if f.error_count > 0
            && path.starts_with(f.error_path.as_str())
            && path.contains(f.error_contains.as_str())
        {
            if f.error_count != u32::MAX {
                f.error_count -= 1;
            }
            Some(if f.error_status == 0 {
                500
            } else {
                f.error_status
            })
        } else {
            None
        };
        (f.delay_ms, f.hang, error)
    };
    if hang {
        std::future::pending::<()>().await;
    }
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if let Some(code) = error {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (
            status,
            Json(json!({"notificationId": -1, "message": "simulated failure"})),
        )
            .into_response();
    }
    next.run(req).await
}

#[derive(Deserialize)]
struct Login {
    username: String,
    password: String,
}

async fn login(State(sim): State<Sim>, Json(body): Json<Login>) -> Response {
    let ok = {
        let mut inner = sim.lock();
        inner.calls.logins += 1;
        inner
            .users
            .get(&body.username)
            .is_some_and(|(p, _)| *p == body.password)
    };
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"notificationId": -1, "message": "Wrong username or password"})),
        )
            .into_response();
    }
    let token = sim.token_for(&body.username);
    Json(json!({"apiToken": token, "changeRequired": false})).into_response()
}

async fn me(State(sim): State<Sim>, headers: HeaderMap) -> Response {
    sim.lock().calls.me += 1;
    match sim.authenticate(&headers) {
        Some((username, role)) => Json(json!({"username": username, "role": role})).into_response(),
        None => {
            sim.lock().calls.me_refused += 1;
            unauthorized()
        }
    }
}

async fn list_pipelines(State(sim): State<Sim>, headers: HeaderMap) -> Response {
    if sim.authenticate(&headers).is_none() {
        return unauthorized();
    }
    let mut inner = sim.lock();
    inner.calls.list_pipelines += 1;
    let omit = inner.faults.omit_maintenance_field;
    Json(
        inner
            .pipelines
            .values()
            .map(|p| pipeline_json(p, omit))
            .collect::<Vec<_>>(),
    )
    .into_response()
}

/// A pipeline as Core Hub answers it, without `isInMaintenanceMode` when `omit` is set.
fn pipeline_json(p: &Pipeline, omit: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(p).unwrap_or_default();
    if omit && let Some(o) = v.as_object_mut() {
        o.remove("isInMaintenanceMode");
    }
    v
}

async fn get_pipeline(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if sim.authenticate(&headers).is_none() {
        return unauthorized();
    }
    let inner = sim.lock();
    match inner.pipelines.get(&id) {
        Some(p) => Json(pipeline_json(p, inner.faults.omit_maintenance_field)).into_response(),
        None => not_found(&id),
    }
}

fn not_found(id: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"notificationId": -1, "message": format!("Pipeline {id} not found")})),
    )
        .into_response()
}

async fn maintenance(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Path((id, command)): Path<(String, String)>,
) -> Response {
    if sim.authenticate(&headers).is_none() {
        return unauthorized();
    }
    let enter = match command.as_str() {
        "enter" => true,
        "exit" => false,
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let delay = {
        let mut inner = sim.lock();
        let Some(current) = inner.pipelines.get(&id).map(|p| p.is_in_maintenance_mode) else {
            return not_found(&id);
        };
        if enter {
            inner.paused.0.get_or_insert_with(std::time::Instant::now);
            *inner.calls.enter.entry(id.clone()).or_default() += 1;
            if current {
                inner.calls.enter_while_in_maintenance += 1;
            }
        } else {
            *inner.calls.exit.entry(id.clone()).or_default() += 1;
        }
        if enter && inner.faults.stuck.contains(&id) {
            return (StatusCode::ACCEPTED, "Maintenance command received").into_response();
        }
        let mut delay = inner.faults.maintenance_delay_ms;
        if enter {
            delay = delay.saturating_add(inner.faults.enter_delay_ms);
        }
        if delay == 0 {
            inner.apply_maintenance(&id, enter);
        }
        if delay > 0 {
            inner.pending += 1;
        }
        delay
    };
    if delay > 0 {
        let sim = sim.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let mut inner = sim.lock();
            inner.apply_maintenance(&id, enter);
            inner.pending -= 1;
        });
    }
    (StatusCode::ACCEPTED, "Maintenance command received").into_response()
}

async fn catalog(State(sim): State<Sim>, Path(image): Path<String>) -> Response {
    let delay = sim.lock().faults.catalog_delay_ms;
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let mut inner = sim.lock();
    inner.calls.catalog += 1;
    if inner.catalog_maintenance {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"code": "MAINTENANCE_MODE", "message": "OTA updates are currently undergoing maintenance"})),
        )
            .into_response();
    }
    match inner.catalog.get(&image) {
        Some(entry) => Json(entry).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"message": format!("agent {image} not found")})),
        )
            .into_response(),
    }
}

/// Core Hub's API and the catalog's, on one router.
pub fn api_router(sim: Sim) -> Router {
    let corehub = Router::new()
        .route("/authentication/login", post(login))
        .route("/authentication/me", get(me))
        .route("/pipelines", get(list_pipelines))
        .route("/pipelines/{id}", get(get_pipeline))
        .route(
            "/pipelines/{id}/commands/maintenance/{command}",
            post(maintenance),
        )
        .layer(middleware::from_fn_with_state(sim.clone(), faults));
    Router::new()
        .route("/agent/{image}/version", get(catalog))
        .merge(corehub)
        .with_state(sim)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AddPipelines {
    count: usize,
    #[serde(default = "default_prefix")]
    prefix: String,
}

fn default_prefix() -> String {
    "p".into()
}

#[derive(Deserialize)]
struct AddUser {
    username: String,
    password: String,
    role: String,
}

/// The admin API: `/_sim/state`, `/_sim/pipelines`, `/_sim/faults`, `/_sim/catalog/{image}`, `/_sim/users`.
pub fn admin_router(sim: Sim) -> Router {
    Router::new()
        .route(
            "/_sim/state",
            get(|State(sim): State<Sim>| async move {
                Json(json!({
                    "pipelines": sim.pipelines(),
                    "inMaintenance": sim.in_maintenance().len(),
                    "faults": sim.faults(),
                    "calls": sim.calls(),
                }))
            }),
        )
        .route(
            "/_sim/pipelines",
            post(|State(sim): State<Sim>, Json(b): Json<AddPipelines>| async move {
                sim.add_pipelines(&b.prefix, b.count);
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/_sim/faults",
            put(|State(sim): State<Sim>, Json(f): Json<Faults>| async move {
                sim.set_faults(f);
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/_sim/catalog/{image}",
            put(
                |State(sim): State<Sim>, Path(image): Path<String>, Json(e): Json<CatalogEntry>| async move {
                    sim.set_catalog(&image, e);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/_sim/users",
            post(|State(sim): State<Sim>, Json(u): Json<AddUser>| async move {
                sim.add_user(&u.username, &u.password, &u.role);
                StatusCode::NO_CONTENT
            }),
        )
        .with_state(sim)
}

/// How the simulator serves Core Hub's API.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Address of Core Hub's API (port 0: any free port).
    pub addr: Option<SocketAddr>,
    /// Serve HTTPS with a self-signed certificate for localhost and 127.0.0.1.
    pub tls: bool,
}

/// A running simulator.
pub struct Simulator {
    pub sim: Sim,
    /// Base URL of Core Hub's API and the catalog.
    pub url: String,
    /// PEM of the certificate, when serving HTTPS.
    pub cert_pem: Option<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::ops::Deref for Simulator {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        &self.sim
    }
}

impl Simulator {
    /// Starts a simulator with the users `admin` (SUPER_ADMIN), `manager` (MANAGER), `monitor` (MONITOR)
    /// and `viewer` (VIEWER), each with its name as password.
    pub async fn start(options: Options) -> anyhow::Result<Simulator> {
        let sim = Sim::default();
        for (user, role) in [
            ("admin", "SUPER_ADMIN"),
            ("manager", "MANAGER"),
            ("monitor", "MONITOR"),
            ("viewer", "VIEWER"),
        ] {
            sim.add_user(user, user, role);
        }
        let addr = options
            .addr
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        // Bind once to learn the port; the server rebinds the same port after each "down".
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        drop(listener);
        let (cert_pem, tls) = if options.tls {
            let cert = rcgen::generate_simple_self_signed(vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
            ])?;
            let cert_pem = cert.cert.pem();
            let key_pem = cert.signing_key.serialize_pem();
            let config = axum_server::tls_rustls::RustlsConfig::from_pem(
                cert_pem.clone().into_bytes(),
                key_pem.into_bytes(),
            )
            .await?;
            (Some(cert_pem), Some(config))
        } else {
            (None, None)
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(serve_until_dropped(sim.clone(), addr, tls));
        // Wait until the port answers.
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(Simulator {
            sim,
            url: format!("{scheme}://{addr}"),
            cert_pem,
            task,
        })
    }
}

/// Serves the API, closing the port while the `down` fault is on.
async fn serve_until_dropped(
    sim: Sim,
    addr: SocketAddr,
    tls: Option<axum_server::tls_rustls::RustlsConfig>,
) {
    let mut down = sim.down.subscribe();
    loop {
        if *down.borrow_and_update() {
            let _ = down.changed().await;
            continue;
        }
        let handle = axum_server::Handle::new();
        let stopper = handle.clone();
        let mut watch_down = sim.down.subscribe();
        let stop = tokio::spawn(async move {
            let _ = watch_down.wait_for(|d| *d).await;
            stopper.shutdown();
        });
        let app = api_router(sim.clone()).into_make_service();
        let result = match &tls {
            Some(config) => {
                axum_server::bind_rustls(addr, config.clone())
                    .handle(handle)
                    .serve(app)
                    .await
            }
            None => axum_server::bind(addr).handle(handle).serve(app).await,
        };
        stop.abort();
        if let Err(e) = result {
            tracing::warn!(error = %e, %addr, "simulator server stopped; retrying");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "gluesync-operator/0.1.0 (gko-test)";

    struct Api {
        http: reqwest::Client,
        url: String,
        token: String,
    }

    impl Api {
        /// Logs in as `admin` with the User-Agent `agent` (none when `None`).
        async fn login(sim: &Simulator, agent: Option<&str>) -> Api {
            let mut builder = reqwest::Client::builder();
            if let Some(agent) = agent {
                builder = builder.user_agent(agent);
            }
            let http = builder.build().unwrap();
            let answer: serde_json::Value = http
                .post(format!("{}/authentication/login", sim.url))
                .json(&json!({"username": "admin", "password": "admin"}))
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap()
                .json()
                .await
                .unwrap();
            Api {
                http,
                url: sim.url.clone(),
                token: answer["apiToken"].as_str().unwrap().to_string(),
            }
        }

        async fn get(&self, path: &str) -> reqwest::Response {
            self.http
                .get(format!("{}{path}", self.url))
                .bearer_auth(&self.token)
                .send()
                .await
                .unwrap()
        }

        async fn maintenance(&self, id: &str, command: &str) -> u16 {
            self.http
                .post(format!(
                    "{}/pipelines/{id}/commands/maintenance/{command}",
                    self.url
                ))
                .bearer_auth(&self.token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    }

    async fn start() -> Simulator {
        let sim = Simulator::start(Options::default()).await.unwrap();
        sim.add_pipelines("p", 3);
        sim
    }

    /// Waits up to 5 s for `pipeline` to be in maintenance mode (`on`) or out of it.
    async fn wait_for_maintenance(sim: &Sim, pipeline: &str, on: bool) {
        for _ in 0..500 {
            if sim.in_maintenance().contains(&pipeline.to_string()) == on {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{pipeline} never went in maintenance mode = {on}");
    }

    #[tokio::test]
    async fn error_contains_fails_only_matching_paths_until_cleared() {
        let sim = start().await;
        let api = Api::login(&sim, None).await;
        sim.update_faults(|f| {
            f.error_count = u32::MAX;
            f.error_status = 503;
            f.error_contains = "/commands/maintenance/exit".into();
        });
        assert_eq!(api.maintenance("p00000", "enter").await, 202);
        for _ in 0..5 {
            assert_eq!(api.maintenance("p00000", "exit").await, 503);
        }
        assert_eq!(api.get("/pipelines").await.status(), 200);
        assert_eq!(api.get("/pipelines/p00000").await.status(), 200);
        assert_eq!(
            sim.faults().error_count,
            u32::MAX,
            "u32::MAX never runs out"
        );
        assert_eq!(sim.in_maintenance(), vec!["p00000".to_string()]);
        assert_eq!(
            sim.calls().exit.get("p00000"),
            None,
            "failed exits never reached Core Hub"
        );

        sim.update_faults(|f| *f = Faults::default());
        assert_eq!(api.maintenance("p00000", "exit").await, 202);
        assert!(sim.in_maintenance().is_empty());
    }

    #[tokio::test]
    async fn error_path_and_error_contains_must_both_match() {
        let sim = start().await;
        let api = Api::login(&sim, None).await;
        // error_path alone, as before: a prefix, counted down.
        sim.update_faults(|f| {
            f.error_count = 2;
            f.error_path = "/pipelines".into();
        });
        assert_eq!(api.get("/authentication/me").await.status(), 200);
        assert_eq!(api.get("/pipelines").await.status(), 500);
        assert_eq!(api.maintenance("p00001", "enter").await, 500);
        assert_eq!(api.get("/pipelines").await.status(), 200);
        assert_eq!(sim.faults().error_count, 0);
        // Both: only exits of p00001.
        sim.update_faults(|f| {
            f.error_count = 1;
            f.error_path = "/pipelines/p00001".into();
            f.error_contains = "/exit".into();
        });
        assert_eq!(api.maintenance("p00000", "exit").await, 202);
        assert_eq!(api.maintenance("p00001", "enter").await, 202);
        assert_eq!(api.maintenance("p00001", "exit").await, 500);
        assert_eq!(api.maintenance("p00001", "exit").await, 202);
    }

    #[tokio::test]
    async fn omit_maintenance_field_drops_the_field_from_pipelines() {
        let sim = start().await;
        let api = Api::login(&sim, None).await;
        let list: serde_json::Value = api.get("/pipelines").await.json().await.unwrap();
        assert_eq!(list[0]["isInMaintenanceMode"], json!(false));
        let one: serde_json::Value = api.get("/pipelines/p00002").await.json().await.unwrap();
        assert_eq!(one["isInMaintenanceMode"], json!(false));

        sim.update_faults(|f| f.omit_maintenance_field = true);
        let list: serde_json::Value = api.get("/pipelines").await.json().await.unwrap();
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 3);
        for p in list {
            assert!(p.get("isInMaintenanceMode").is_none(), "{p}");
            assert!(p.get("id").is_some(), "{p}");
            assert_eq!(p["configurationCompleted"], json!(true));
        }
        let one: serde_json::Value = api.get("/pipelines/p00002").await.json().await.unwrap();
        assert!(one.get("isInMaintenanceMode").is_none(), "{one}");
        assert_eq!(one["id"], json!("p00002"));
        // Maintenance still works; only the field is hidden.
        assert_eq!(api.maintenance("p00002", "enter").await, 202);
        assert_eq!(sim.in_maintenance(), vec!["p00002".to_string()]);
    }

    #[tokio::test]
    async fn calls_are_counted_by_user_agent() {
        let sim = start().await;
        sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.1.0"));
        let gko = Api::login(&sim, Some(AGENT)).await;
        assert_eq!(gko.get("/authentication/me").await.status(), 200);
        assert_eq!(gko.get("/pipelines").await.status(), 200);
        assert_eq!(gko.get("/pipelines/p00000").await.status(), 200);
        assert_eq!(gko.maintenance("p00000", "enter").await, 202);
        assert_eq!(gko.maintenance("p00000", "exit").await, 202);
        // Failed requests are counted too.
        sim.update_faults(|f| {
            f.error_count = 1;
            f.error_contains = "/exit".into();
        });
        assert_eq!(gko.maintenance("p00000", "exit").await, 500);
        let anonymous = Api::login(&sim, None).await;
        assert_eq!(anonymous.get("/pipelines").await.status(), 200);
        // The catalog is not Core Hub.
        assert_eq!(
            gko.get("/agent/gluesync-core-hub/version").await.status(),
            200
        );

        let calls = sim.calls();
        assert_eq!(
            calls.by_agent,
            BTreeMap::from([(AGENT.to_string(), 7), (String::new(), 2)])
        );
        assert_eq!(calls.catalog, 1);
    }

    #[tokio::test]
    async fn maintenance_delay_applies_to_enter_and_exit() {
        let sim = start().await;
        let api = Api::login(&sim, None).await;
        sim.update_faults(|f| f.maintenance_delay_ms = 300);
        assert_eq!(api.maintenance("p00000", "enter").await, 202);
        assert!(sim.in_maintenance().is_empty(), "enter lands late");
        wait_for_maintenance(&sim, "p00000", true).await;
        assert_eq!(api.maintenance("p00000", "exit").await, 202);
        assert_eq!(
            sim.in_maintenance(),
            vec!["p00000".to_string()],
            "exit lands late"
        );
        wait_for_maintenance(&sim, "p00000", false).await;
    }

    #[tokio::test]
    async fn paused_time_runs_from_the_first_enter_to_the_last_pipeline_running() {
        let sim = start().await;
        let api = Api::login(&sim, None).await;
        assert_eq!(sim.take_paused_time(), None, "nothing paused yet");
        let asked = tokio::time::Instant::now();
        assert_eq!(api.maintenance("p00000", "enter").await, 202);
        assert_eq!(api.maintenance("p00001", "enter").await, 202);
        assert_eq!(api.maintenance("p00001", "exit").await, 202);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The exit lands late: the span ends when the last pipeline is running again.
        sim.update_faults(|f| f.maintenance_delay_ms = 150);
        assert_eq!(api.maintenance("p00000", "exit").await, 202);
        wait_for_maintenance(&sim, "p00000", false).await;
        let paused = sim.take_paused_time().expect("a span");
        assert!(paused >= Duration::from_millis(250), "{paused:?}");
        assert!(paused <= asked.elapsed(), "{paused:?}");
        // Taken: the next span has no enter request yet, whatever leaves maintenance mode.
        sim.set_maintenance("p00001", true);
        assert_eq!(api.maintenance("p00001", "exit").await, 202);
        wait_for_maintenance(&sim, "p00001", false).await;
        assert_eq!(sim.take_paused_time(), None);
    }

    #[tokio::test]
    async fn enter_delay_lets_a_late_enter_land_after_a_later_exit() {
        let sim = start().await;
        let api = Api::login(&sim, None).await;
        sim.update_faults(|f| f.enter_delay_ms = 400);
        let asked = tokio::time::Instant::now();
        assert_eq!(api.maintenance("p00001", "enter").await, 202);
        assert!(sim.in_maintenance().is_empty());
        // The exit lands at once, before the enter...
        assert_eq!(api.maintenance("p00001", "exit").await, 202);
        assert!(sim.in_maintenance().is_empty());
        // ...which then leaves the pipeline in maintenance mode.
        wait_for_maintenance(&sim, "p00001", true).await;
        assert!(asked.elapsed() >= Duration::from_millis(400));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(sim.in_maintenance(), vec!["p00001".to_string()]);

        // With maintenance_delay_ms too, exits wait that long and enters the sum of both.
        sim.update_faults(|f| {
            f.maintenance_delay_ms = 200;
            f.enter_delay_ms = 300;
        });
        let asked = tokio::time::Instant::now();
        assert_eq!(api.maintenance("p00001", "exit").await, 202);
        assert_eq!(sim.in_maintenance(), vec!["p00001".to_string()]);
        wait_for_maintenance(&sim, "p00001", false).await;
        assert!(asked.elapsed() >= Duration::from_millis(200));
        let asked = tokio::time::Instant::now();
        assert_eq!(api.maintenance("p00001", "enter").await, 202);
        wait_for_maintenance(&sim, "p00001", true).await;
        assert!(asked.elapsed() >= Duration::from_millis(500));
    }

    #[tokio::test]
    async fn admin_api_sets_and_shows_the_new_fields() {
        let sim = start().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, admin_router(sim.sim.clone()))
                .await
                .unwrap();
        });
        let http = reqwest::Client::new();
        let status = http
            .put(format!("{admin}/_sim/faults"))
            .json(&json!({
                "errorCount": 1,
                "errorContains": "/commands/maintenance/exit",
                "enterDelayMs": 250,
                "omitMaintenanceField": true,
            }))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 204);
        let state: serde_json::Value = http
            .get(format!("{admin}/_sim/state"))
            .header("user-agent", AGENT)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let faults = &state["faults"];
        assert_eq!(faults["errorContains"], json!("/commands/maintenance/exit"));
        assert_eq!(faults["enterDelayMs"], json!(250));
        assert_eq!(faults["omitMaintenanceField"], json!(true));
        assert_eq!(faults["errorPath"], json!(""));
        // The admin API is not Core Hub: its calls are not counted.
        assert_eq!(state["calls"]["byAgent"], json!({}));
        server.abort();
    }
}
