//! The OpenAPI document of the Conductor API, served at `GET /openapi.json`.
//!
//! What a route takes and gives is derived from the types the routes use (schemars, the same derive the
//! CRD's schema comes from): the request bodies from the types they are parsed into, so each limit is
//! written once, beside the check that enforces it; the query parameters from the type the query is read
//! into; the envelopes from the types every answer is built of. The routes, their answers and what each
//! answer means are one table, [`ROUTES`].

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

use super::{ContainersFilter, ContainersRequest, Failure, Success, disaster::SetupRequest};

/// Where a route's body or parameters come from.
#[derive(Clone, Copy)]
enum Input {
    None,
    /// A JSON body of this type's schema (by its name in `components.schemas`).
    Body(fn(&mut SchemaGenerator) -> Value),
    /// Query parameters: the properties of this type's schema.
    Query(fn(&mut SchemaGenerator) -> Value),
    /// The path's `{id}` and `{channel}`.
    ServicePath,
}

/// One operation: its path, method, description, whether it needs a caller, what it takes, and each
/// answer's status with what it means.
struct Route {
    path: &'static str,
    method: &'static str,
    description: &'static str,
    public: bool,
    input: Input,
    /// (status, meaning); a 2xx answer is [`Success`], any other [`Failure`].
    answers: &'static [(u16, &'static str)],
}

fn body<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

const STARTING: &str = "GKO is starting, updating itself, or has no GluesyncPlatform";

const ROUTES: &[Route] = &[
    Route {
        path: "/health",
        method: "get",
        description: "",
        public: true,
        input: Input::None,
        answers: &[(200, "GKO answers")],
    },
    Route {
        path: "/openapi.json",
        method: "get",
        description: "",
        public: true,
        input: Input::None,
        answers: &[(200, "this document")],
    },
    Route {
        path: "/containers",
        method: "get",
        description: "The managed workloads as the Conductor's containers.",
        public: false,
        input: Input::Query(body::<ContainersFilter>),
        answers: &[
            (200, "the managed workloads as containers"),
            (401, "not authenticated"),
            (
                429,
                "too many new callers to check with Core Hub; retry after Retry-After seconds",
            ),
            (503, STARTING),
        ],
    },
    Route {
        path: "/containers",
        method: "post",
        description: "An update of every component (empty ids) or of those named, to the latest on the channel; the other Conductor actions are refused on Kubernetes.",
        public: false,
        input: Input::Body(body::<ContainersRequest>),
        answers: &[
            (200, "the update ended; OK or ERROR per component"),
            (
                202,
                "the update still runs after 15 minutes: its step and message so far",
            ),
            (400, "a malformed request"),
            (401, "not authenticated"),
            (
                403,
                "the role cannot control, or a cookie request from another origin or not JSON",
            ),
            (404, "an unknown id"),
            (408, "the body came too slowly"),
            (
                409,
                "refused: an action Helm owns, an update already running, updates managed in Git, or GKO's own Deployment",
            ),
            (413, "the body is too large"),
            (
                429,
                "too many new callers to check with Core Hub, from this client or in all; retry after Retry-After seconds",
            ),
            (502, "the version catalog did not answer"),
            (
                503,
                "GKO is starting, updating itself, or cannot write the request",
            ),
        ],
    },
    Route {
        path: "/disaster-recovery",
        method: "get",
        description: "Super Admin only. data: wanted (spec.disasterRecovery), state (status.disasterRecovery: phase SettingUp, Active, RollingBack, Failed or TearingDown, message, components), secretName, serviceName.",
        public: false,
        input: Input::None,
        answers: &[
            (200, "the setup wanted and the setup reached"),
            (401, "not authenticated"),
            (403, "not a Super Admin"),
            (503, STARTING),
        ],
    },
    Route {
        path: "/disaster-recovery",
        method: "put",
        description: "Super Admin only. Sets this install up as a site of a pair; the controller does the work: read GET until the phase is Active or Failed.",
        public: false,
        input: Input::Body(body::<SetupRequest>),
        answers: &[
            (202, "accepted: the same data as GET"),
            (400, "a malformed setup; nothing was changed"),
            (401, "not authenticated"),
            (
                403,
                "not a Super Admin, or a cookie request from another origin or not JSON",
            ),
            (408, "the body came too slowly"),
            (
                409,
                "updatePolicy gitops, a disaster-recovery change in progress, the platform being deleted, the Secret not allowed, or the platform changed meanwhile; nothing was changed",
            ),
            (413, "the body is too large"),
            (
                503,
                "GKO is starting, updating itself, not the leader, or cannot write",
            ),
        ],
    },
    Route {
        path: "/disaster-recovery",
        method: "delete",
        description: "Super Admin only. Takes the pair down: the workloads go back to what they were, the Service goes and the shared secret GKO wrote is taken out of the pair's Secret.",
        public: false,
        input: Input::None,
        answers: &[
            (202, "accepted: the same data as GET"),
            (401, "not authenticated"),
            (
                403,
                "not a Super Admin, or a cookie request from another origin or not JSON",
            ),
            (404, "no setup to take down"),
            (409, "updatePolicy gitops, or the platform being deleted"),
            (
                503,
                "GKO is starting, updating itself, not the leader, or cannot write",
            ),
        ],
    },
    Route {
        path: "/services",
        method: "post",
        description: "Deploying a service: Helm owns the workloads on Kubernetes.",
        public: false,
        input: Input::None,
        answers: &[(409, "Helm owns the workloads")],
    },
    Route {
        path: "/services",
        method: "put",
        description: "Changing a service: Helm owns the workloads on Kubernetes.",
        public: false,
        input: Input::None,
        answers: &[(409, "Helm owns the workloads")],
    },
    Route {
        path: "/services/{id}/version/{channel}",
        method: "get",
        description: "The versions of one component on a channel.",
        public: false,
        input: Input::ServicePath,
        answers: &[
            (
                200,
                "currentVersion, latestVersionGA/Beta/Alpha, mandatoryUpdate, servicesToUpdate",
            ),
            (401, "not authenticated"),
            (404, "an unknown id"),
            (
                429,
                "too many new callers to check with Core Hub; retry after Retry-After seconds",
            ),
            (502, "the version catalog did not answer"),
            (503, "GKO is starting or updating itself"),
        ],
    },
];

/// The document, built from [`ROUTES`] and the types.
pub fn document() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let success = body::<Success>(&mut generator);
    let failure = body::<Failure>(&mut generator);
    let channel = body::<crate::api::ReleaseChannel>(&mut generator);
    let mut paths = Map::new();
    for route in ROUTES {
        let mut op = Map::new();
        if !route.description.is_empty() {
            op.insert("description".into(), route.description.into());
        }
        if route.public {
            op.insert("security".into(), json!([]));
        }
        match route.input {
            Input::None => {}
            Input::Body(schema) => {
                op.insert(
                    "requestBody".into(),
                    json!({"required": true, "content": {"application/json": {"schema": schema(&mut generator)}}}),
                );
            }
            Input::Query(schema) => {
                let reference = schema(&mut generator);
                let parameters = query_parameters(&generator, &reference);
                op.insert("parameters".into(), parameters.into());
            }
            Input::ServicePath => {
                op.insert(
                    "parameters".into(),
                    json!([
                        {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "channel", "in": "path", "required": true, "schema": channel},
                    ]),
                );
            }
        }
        let answers: Map<String, Value> = route
            .answers
            .iter()
            .map(|&(status, meaning)| {
                let schema = if (200..300).contains(&status) { &success } else { &failure };
                let answer = if route.path == "/openapi.json" {
                    json!({"description": meaning})
                } else {
                    json!({"description": meaning, "content": {"application/json": {"schema": schema}}})
                };
                (status.to_string(), answer)
            })
            .collect();
        op.insert("responses".into(), answers.into());
        paths
            .entry(route.path)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("a path item is an object")
            .insert(route.method.into(), op.into());
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.0.3",
        "info": {"title": "gluesync-operator Conductor API", "version": env!("CARGO_PKG_VERSION"),
                 "description": "The Conductor's API as GKO serves it on Kubernetes, at the bare paths and under /conductor/api/."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}, "session": {"type": "apiKey", "in": "cookie", "name": "gs-auth"}},
            "schemas": schemas,
        },
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
    })
}

/// A query type's properties as OpenAPI query parameters.
fn query_parameters(generator: &SchemaGenerator, reference: &Value) -> Vec<Value> {
    let name = reference["$ref"]
        .as_str()
        .and_then(|r| r.rsplit('/').next())
        .unwrap_or_default();
    let schema = generator
        .definitions()
        .get(name)
        .cloned()
        .unwrap_or_else(|| reference.clone());
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, schema)| {
                    json!({"name": name, "in": "query", "required": required.contains(&name.as_str()), "schema": schema})
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits the parsers check are the ones the document states.
    #[test]
    fn the_document_states_the_parsers_limits() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        let ids = &schemas["ContainersRequest"]["properties"]["ids"];
        assert_eq!(ids["maxItems"], super::super::MAX_IDS);
        assert_eq!(ids["items"]["maxLength"], super::super::MAX_ID_LENGTH);
        let secret = &schemas["DisasterRecoverySetup"]["properties"]["sharedSecret"];
        assert_eq!(secret["minLength"], super::super::disaster::SECRET_MIN);
        assert_eq!(secret["maxLength"], super::super::disaster::SECRET_MAX);
        assert_eq!(secret["writeOnly"], true);
        let actions = schemas["ContainersRequest"]["properties"]["action"]["enum"]
            .as_array()
            .unwrap();
        assert!(actions.contains(&json!("update")) && actions.contains(&json!("undeploy")));
        // Every $ref points at a schema the document has.
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &part[..part.find('"').unwrap()];
            assert!(
                schemas.get(name).is_some(),
                "{name} is referenced but missing"
            );
        }
        let filter = &doc["paths"]["/containers"]["get"]["parameters"][0];
        assert_eq!(filter["name"], "type");
        assert_eq!(filter["in"], "query");
        assert!(doc["paths"]["/containers"]["post"]["requestBody"].is_object());
        assert_eq!(doc["paths"]["/health"]["get"]["security"], json!([]));
    }
}
