//! Every answer of the Conductor API, in the Docker Conductor's envelope: `{success, data}` or
//! `{success: false, error, details}`, and the refusals, 404 and 405 in it.

use super::*;

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

pub(super) fn success(data: Value) -> Response {
    Json(Success {
        success: true,
        data,
    })
    .into_response()
}

/// Why a caller is not served before GKO knows who it is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Refusal {
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
pub(super) fn refusal(why: Refusal) -> Response {
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
pub(super) fn unavailable() -> Response {
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
pub(super) fn too_many_requests(error: &str, details: &str, wait: Duration) -> Response {
    let mut resp = failure(StatusCode::TOO_MANY_REQUESTS, error, details);
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    resp.headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from(secs));
    resp
}

pub(super) async fn not_found() -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "Not found",
        "see /openapi.json for the routes GKO serves",
    )
}

pub(super) async fn method_not_allowed(req: Request) -> Response {
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
