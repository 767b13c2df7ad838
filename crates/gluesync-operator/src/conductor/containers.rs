//! `/containers`: the workloads the Core Hub UI lists, and the actions it asks on them (an update; the
//! ones Helm owns are refused).

use super::*;

/// The most workloads one update request names.
pub const MAX_IDS: usize = 256;

/// The longest workload name (a Kubernetes object name).
pub const MAX_ID_LENGTH: usize = 253;

/// The Conductor's actions on containers that GKO does not take on Kubernetes (it answers 409).
pub(super) const REFUSED_ACTIONS: [&str; 8] = [
    "kill",
    "pull",
    "remove",
    "removeNetwork",
    "restart",
    "start",
    "stop",
    "undeploy",
];

pub(super) fn action_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
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

pub(super) fn container_json(w: &crate::update::observed::Workload) -> Value {
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
pub(super) fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Filters of `GET /containers` remembered at most (any other is built per request).
pub(super) const LISTINGS: usize = 8;

pub(super) async fn list_containers(State(api): State<Api>, req: Request) -> Response {
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
pub(super) fn containers_body(
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

pub(super) async fn post_containers(State(api): State<Api>, req: Request) -> Response {
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
