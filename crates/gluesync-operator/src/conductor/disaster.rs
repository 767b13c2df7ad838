//! `/disaster-recovery`: what Settings → Disaster Recovery of the Core Hub UI calls, Super Admin only.
//!
//! - `GET` answers the setup wanted (`spec.disasterRecovery`) and the setup reached
//!   (`status.disasterRecovery`). Never the shared secret.
//! - `PUT` sets this install up as the primary or the secondary of a pair: it writes the pair's shared
//!   secret into the Secret `<platform>-disaster-recovery` (which the chart creates empty: GKO creates no
//!   Secret), then the
//!   setup into `spec.disasterRecovery` with a fresh `revision`; the controller does the rest, as it runs
//!   an update. Answers 202 with the state; the UI reads `GET` until the phase is `Active` or `Failed`.
//! - `DELETE` takes the pair down: `spec.disasterRecovery` goes, and the controller puts the workloads
//!   back and removes the Service and takes the shared secret out of the pair's Secret.
//!
//! The shared secret is never logged, echoed back, or written anywhere but the Secret.

use crate::cluster::wording::Said;
use axum::{
    extract::{Request, State},
    http::StatusCode,
    response::Response,
};
use kube::ResourceExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, Caller, Gate, allow, failure, read_body, success};
use crate::{
    api::{
        DR_SECRET_KEY, DisasterRecoveryRole, DisasterRecoveryService, DisasterRecoverySpec,
        GluesyncPlatform, UpdatePolicy,
    },
    update::disaster,
};

/// Shortest shared secret accepted.
pub const SECRET_MIN: usize = 32;
/// Longest shared secret accepted.
pub const SECRET_MAX: usize = 4096;

/// The longest peer address (a DNS name).
pub const PEER_ADDRESS_MAX: usize = 253;
/// A peer address: letters, digits, '.', '-', ':', beginning and ending with a letter or digit.
const PEER_ADDRESS_PATTERN: &str = "^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$";
/// The replication port when the setup names none.
const REPLICATION_PORT: i32 = 1718;
/// The control port when the setup names none.
const CONTROL_PORT: i32 = 1719;

/// This install as one site of a disaster-recovery pair. GKO writes sharedSecret into the Secret
/// <platform>-disaster-recovery (which the chart creates empty: GKO creates no Secret) and the rest into
/// spec.disasterRecovery with a new revision; then it changes Core Hub and Chronos one at a time
/// (environment GLUESYNC_DR_*, container ports, the Secret mounted at /opt/gluesync/disaster-recovery),
/// each through the stability check, and publishes the two ports with the Service
/// <platform>-disaster-recovery. A workload that does not come up puts every change back (phase Failed).
/// The secret is never logged or answered. See docs/disaster-recovery.md.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "DisasterRecoverySetup")]
pub struct SetupRequest {
    pub role: DisasterRecoveryRole,
    /// The host name or IP address of the other site.
    #[schemars(length(min = 1, max = PEER_ADDRESS_MAX), pattern(PEER_ADDRESS_PATTERN))]
    pub peer_address: String,
    #[serde(default)]
    #[schemars(range(min = 1, max = 65535), extend("default" = REPLICATION_PORT))]
    pub replication_port: Option<i32>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 65535), extend("default" = CONTROL_PORT))]
    pub control_port: Option<i32>,
    /// The same on both sites; printable, no spaces.
    #[schemars(length(min = SECRET_MIN, max = SECRET_MAX), extend("writeOnly" = true))]
    pub shared_secret: String,
    /// The Service's settings (default: those in spec.disasterRecovery.service, else type LoadBalancer).
    #[serde(default)]
    pub service: Option<DisasterRecoveryService>,
}

impl std::fmt::Debug for SetupRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetupRequest")
            .field("role", &self.role)
            .field("peer_address", &self.peer_address)
            .field("replication_port", &self.replication_port)
            .field("control_port", &self.control_port)
            .field("shared_secret", &"<hidden>")
            .finish()
    }
}

fn host_ok(host: &str) -> bool {
    (1..=PEER_ADDRESS_MAX).contains(&host.len())
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
        && host.starts_with(|c: char| c.is_ascii_alphanumeric())
        && host.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Parses and checks a `PUT /disaster-recovery` body: the setup and the shared secret, or the 400 to
/// answer. The error never quotes the shared secret.
pub fn parse_setup(
    body: &[u8],
    current: Option<&DisasterRecoverySpec>,
) -> Result<(DisasterRecoverySpec, String), (String, String)> {
    let bad = |error: &str, details: String| (error.to_string(), details);
    let req: SetupRequest = serde_json::from_slice(body).map_err(|e| {
        // serde's message may quote a value; only its position and kind are kept.
        let what = match e.classify() {
            serde_json::error::Category::Data => {
                let text = e.to_string();
                // Field names and types are safe to show; values are not.
                if text.contains("unknown field") || text.contains("missing field") {
                    text.split(" at line")
                        .next()
                        .unwrap_or_default()
                        .to_string()
                } else {
                    format!(
                        "a field has the wrong type or value (line {}, column {})",
                        e.line(),
                        e.column()
                    )
                }
            }
            _ => format!(
                "not a JSON object (line {}, column {})",
                e.line(),
                e.column()
            ),
        };
        bad("Invalid request body", what)
    })?;
    if !host_ok(&req.peer_address) {
        return Err(bad(
            "Invalid peerAddress",
            "peerAddress is a host name or an IP address (letters, digits, '.', '-', ':'), 1 to 253 characters".into(),
        ));
    }
    let replication_port = req.replication_port.unwrap_or(REPLICATION_PORT);
    let control_port = req.control_port.unwrap_or(CONTROL_PORT);
    for (name, port) in [
        ("replicationPort", replication_port),
        ("controlPort", control_port),
    ] {
        if !(1..=65535).contains(&port) {
            return Err(bad(
                &format!("Invalid {name}"),
                format!("{name} is a TCP port, 1 to 65535"),
            ));
        }
    }
    if replication_port == control_port {
        return Err(bad(
            "Invalid ports",
            "replicationPort and controlPort must differ".into(),
        ));
    }
    let n = req.shared_secret.chars().count();
    if !(SECRET_MIN..=SECRET_MAX).contains(&n)
        || req
            .shared_secret
            .chars()
            .any(|c| c.is_control() || c == ' ')
    {
        return Err(bad(
            "Invalid sharedSecret",
            format!(
                "sharedSecret is {SECRET_MIN} to {SECRET_MAX} printable characters without spaces; \
                 use the same one on both sites"
            ),
        ));
    }
    if let Some(s) = &req.service {
        let node_ports = [s.replication_node_port, s.control_node_port];
        if node_ports
            .iter()
            .flatten()
            .any(|p| !(1..=65535).contains(p))
            || s.external_traffic_policy
                .as_deref()
                .is_some_and(|p| p != "Cluster" && p != "Local")
            || s.annotations.len() > 64
            || s.load_balancer_source_ranges.len() > 64
        {
            return Err(bad(
                "Invalid service",
                "service: node ports 1 to 65535, externalTrafficPolicy Cluster or Local, at most 64 \
                 annotations and 64 source ranges"
                    .into(),
            ));
        }
    }
    let spec = DisasterRecoverySpec {
        role: req.role,
        peer_address: req.peer_address,
        replication_port,
        control_port,
        secret_name: None,
        revision: Some(format!("ui-{}", jiff::Timestamp::now().as_millisecond())),
        service: req
            .service
            .or_else(|| current.map(|c| c.service.clone()))
            .unwrap_or_default(),
    };
    Ok((spec, req.shared_secret))
}

/// What `GET` answers: the setup wanted and the setup reached.
fn state(gsp: &GluesyncPlatform) -> Value {
    json!({
        "wanted": gsp.spec.disaster_recovery,
        "state": gsp.status.as_ref().and_then(|s| s.disaster_recovery.as_ref()),
        "secretName": gsp.spec.disaster_recovery.as_ref().map(|s| disaster::secret_name(gsp, s)),
        "serviceName": disaster::service_name(gsp),
    })
}

#[allow(clippy::result_large_err)]
fn caller(req: &Request) -> Result<Caller, Response> {
    let caller = req
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| failure(StatusCode::UNAUTHORIZED, "Not authenticated", "no caller"))?;
    allow(&caller, Gate::Administer)?;
    Ok(caller)
}

/// The platform, when the Core Hub UI may change its disaster recovery; else the answer to give.
#[allow(clippy::result_large_err)]
fn writable(api: &Api) -> Result<GluesyncPlatform, Response> {
    let gsp = api.platform()?;
    if gsp.spec.update_policy == UpdatePolicy::Gitops {
        return Err(failure(
            StatusCode::CONFLICT,
            "Disaster recovery of this install is managed in Git",
            "the GluesyncPlatform's updatePolicy is gitops: set spec.disasterRecovery in Git; nothing was changed",
        ));
    }
    if gsp.metadata.deletion_timestamp.is_some() {
        return Err(failure(
            StatusCode::CONFLICT,
            "The GluesyncPlatform is being deleted",
            "nothing was changed",
        ));
    }
    Ok(gsp)
}

pub(super) async fn get_state(State(api): State<Api>, req: Request) -> Response {
    if let Err(resp) = caller(&req) {
        return resp;
    }
    match api.platform() {
        Ok(gsp) => success(state(&gsp)),
        Err(resp) => resp,
    }
}

pub(super) async fn put_setup(State(api): State<Api>, req: Request) -> Response {
    answer(async {
        let caller = caller(&req)?;
        let body = read_body(req, "PUT /disaster-recovery").await?;
        let gsp = writable(&api)?;
        if disaster::busy(
            gsp.status
                .as_ref()
                .and_then(|s| s.disaster_recovery.as_ref()),
        ) {
            return Err(failure(
                StatusCode::CONFLICT,
                "A disaster-recovery change is in progress",
                "wait until GET /disaster-recovery shows the phase Active or Failed, then ask again; nothing was changed",
            ));
        }
        let (spec, shared_secret) = parse_setup(&body, gsp.spec.disaster_recovery.as_ref())
            .map_err(|(error, details)| failure(StatusCode::BAD_REQUEST, &error, details))?;
        let name = disaster::default_secret_name(&gsp);
        if !api.view.access.secret_allowed(&name) {
            return Err(failure(
                StatusCode::CONFLICT,
                "GKO may not use the disaster-recovery Secret",
                format!(
                    "GKO's installation does not allow Secret {name}: add it to the allowed Secrets (the chart does \
                     so with disasterRecovery.enabled); nothing was changed"
                ),
            ));
        }
        // The Secret is the chart's (GKO's Role may not create Secrets, see docs/install.md); it must be
        // an Opaque Secret, never one the cluster fills with a token.
        let found = api
            .view
            .secret(&name)
            .await
            .map_err(|e| {
                tracing::warn!(error = %Said(&e), "reading the disaster-recovery Secret failed");
                failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Could not read the disaster-recovery Secret",
                    "nothing was changed; try again",
                )
            })?
            .ok_or_else(|| {
                failure(
                    StatusCode::CONFLICT,
                    "The disaster-recovery Secret does not exist",
                    format!(
                        "GKO writes the pair's secret into Secret {name} but never creates a Secret: the chart \
                         creates it with disasterRecovery.enabled (deploy/rbac.yaml without the chart); \
                         nothing was changed"
                    ),
                )
            })?;
        if found.type_.as_deref().unwrap_or("Opaque") != "Opaque" {
            return Err(failure(
                StatusCode::CONFLICT,
                "The disaster-recovery Secret is not an Opaque Secret",
                format!("Secret {name} must be of type Opaque; nothing was changed"),
            ));
        }
        // The same shared secret keeps the revision: a setup that changes only the Service does not
        // roll the workloads.
        let mut spec = spec;
        let kept = found
            .data
            .as_ref()
            .and_then(|d| d.get(DR_SECRET_KEY))
            .is_some_and(|v| v.0 == shared_secret.as_bytes());
        if kept
            && let Some(current) = &gsp.spec.disaster_recovery
            && current.secret_name.is_none()
        {
            spec.revision = current.revision.clone();
        }
        api.view
            .writer
            .write_pair_secret(&api.view.namespace, &name, &gsp.name_any(), &shared_secret)
            .await
            .map_err(|e| {
                tracing::warn!(error = %Said(&e), "writing the disaster-recovery Secret failed");
                failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Could not write the disaster-recovery Secret",
                    "nothing else was changed; try again",
                )
            })?;
        let written = write_spec(&api, &gsp, Some(&spec)).await?;
        tracing::info!(
            username = %caller.username,
            role = %caller.role,
            dr_role = spec.role.as_str(),
            peer = %spec.peer_address,
            "disaster-recovery setup requested from the Core Hub UI"
        );
        Ok(accepted(&written))
    })
    .await
}

pub(super) async fn delete_setup(State(api): State<Api>, req: Request) -> Response {
    let caller = caller(&req);
    drop(req);
    answer(async {
        let caller = caller?;
        let gsp = writable(&api)?;
        let in_place = gsp
            .status
            .as_ref()
            .is_some_and(|s| s.disaster_recovery.is_some());
        if gsp.spec.disaster_recovery.is_none() && !in_place {
            return Err(failure(
                StatusCode::NOT_FOUND,
                "No disaster-recovery setup",
                "this install is not part of a pair; nothing was changed",
            ));
        }
        let written = write_spec(&api, &gsp, None).await?;
        tracing::info!(username = %caller.username, role = %caller.role, "disaster-recovery teardown requested from the Core Hub UI");
        Ok(accepted(&written))
    })
    .await
}

/// The answer of a handler written with `?`.
async fn answer(handler: impl Future<Output = Result<Response, Response>>) -> Response {
    handler.await.unwrap_or_else(|resp| resp)
}

/// 202, with the same data as `GET`.
fn accepted(gsp: &GluesyncPlatform) -> Response {
    let mut resp = success(state(gsp));
    *resp.status_mut() = StatusCode::ACCEPTED;
    resp
}

/// Writes `spec.disasterRecovery` (or removes it), from the platform as read. When the platform changed
/// since (most often GKO's own status write, which the watch cache had not shown yet), it is read again:
/// if its `spec.disasterRecovery` is still the one the request was decided on, the write is tried again
/// with it; otherwise the caller is told it changed meanwhile.
async fn write_spec(
    api: &Api,
    gsp: &GluesyncPlatform,
    spec: Option<&DisasterRecoverySpec>,
) -> Result<GluesyncPlatform, Response> {
    let mut read = gsp.clone();
    for _ in 0..WRITE_TRIES {
        let refused = match write_spec_once(api, &read, spec).await {
            Ok(written) => return Ok(written),
            Err(Written::Answer(resp)) => return Err(resp),
            Err(Written::Stale) => None,
            Err(Written::Refused(why)) => Some(why),
        };
        let fresh = api.view.read_platform(&gsp.name_any()).await.map_err(|e| {
            tracing::warn!(error = %Said(&e), "reading the GluesyncPlatform again failed");
            unavailable()
        })?;
        if let Some(why) = refused
            && fresh.resource_version() == read.resource_version()
        {
            // Nothing changed: the API server refuses the setup itself.
            return Err(failure(
                StatusCode::BAD_REQUEST,
                "The setup is not valid",
                why,
            ));
        }
        // Decided again on what it was decided on: the setup, the policy, the deletion.
        if fresh.spec.disaster_recovery != gsp.spec.disaster_recovery
            || fresh.spec.update_policy != gsp.spec.update_policy
            || fresh.metadata.deletion_timestamp.is_some()
        {
            return Err(changed_meanwhile());
        }
        read = fresh;
    }
    Err(changed_meanwhile())
}

/// Tries of [`write_spec`] before it gives up.
const WRITE_TRIES: usize = 5;

/// 503: the setup could not be written now; nothing was changed.
fn unavailable() -> Response {
    failure(
        StatusCode::SERVICE_UNAVAILABLE,
        "Could not write the setup",
        "try again",
    )
}

fn changed_meanwhile() -> Response {
    failure(
        StatusCode::CONFLICT,
        "The GluesyncPlatform changed meanwhile",
        "read the state again and retry",
    )
}

/// Why one write of the setup did not land.
enum Written {
    /// The platform is not at the resourceVersion it was read at.
    Stale,
    /// 422: the resourceVersion's `test` failed, or the API server refuses the setup.
    Refused(String),
    Answer(Response),
}

async fn write_spec_once(
    api: &Api,
    gsp: &GluesyncPlatform,
    spec: Option<&DisasterRecoverySpec>,
) -> Result<GluesyncPlatform, Written> {
    api.view
        .writer
        .write_disaster_recovery_spec(gsp, spec)
        .await
        .map_err(|e| match e {
            e if crate::cluster::writer::is_not_leader(&e) => Written::Answer(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "This GKO is not the leader",
                "try again: the GKO that holds the Lease answers",
            )),
            kube::Error::Api(s) if s.code == 409 => Written::Stale,
            // A failed `test` of the resourceVersion, or a setup the API server refuses: told apart by
            // reading the platform again.
            kube::Error::Api(s) if s.code == 422 => Written::Refused(s.message),
            e => {
                tracing::warn!(error = %Said(&e), "writing spec.disasterRecovery failed");
                Written::Answer(unavailable())
            }
        })
}
