//! What every request passes before its route: the count of answers, the refusal while GKO updates
//! itself, the request timeout, Core Hub's authentication of the caller and the gates of each route; and
//! the bounded read of a request's body.

use super::*;

/// While GKO updates itself, every route but the OpenAPI document answers 503 with `Retry-After: 60`, as
/// the Conductor does during its own update.
pub(super) async fn unless_self_updating(
    State(api): State<Api>,
    req: Request,
    next: Next,
) -> Response {
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
pub(super) async fn timely(req: Request, next: Next) -> Response {
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
pub(super) fn allow(caller: &Caller, gate: Gate) -> Result<(), Response> {
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
pub(super) fn open_route(path: &str) -> bool {
    let path = path.strip_prefix("/conductor/api").unwrap_or(path);
    matches!(path, "/health" | "/openapi.json")
}

/// Authentication first: the caller is put into the request for the handlers. A write authenticated by
/// the session cookie must be a JSON request from the same origin (when the browser says where it comes
/// from), so a cross-site form cannot post with the user's cookie.
pub(super) async fn authenticated(
    State(api): State<Api>,
    mut req: Request,
    next: Next,
) -> Response {
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

/// Counts every answer by its HTTP status (`gluesync_operator_conductor_requests_total`).
pub(super) async fn counted(State(api): State<Api>, req: Request, next: Next) -> Response {
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

/// Reads a request's body within [`BODY_READ_TIMEOUT`] and [`BODY_LIMIT`]; the error is the answer.
///
/// A body over the limit is still read to its end (and dropped), up to [`BODY_DRAIN_LIMIT`], before
/// the 413 is sent: answering while the client is still sending makes the connection close with
/// unread bytes in it, which the kernel does with a reset, and the client, still writing, sees a
/// broken connection instead of the answer. A body beyond the drain limit gets the 413 with
/// `Connection: close`, and the connection closes: a client that had the whole body in its socket's
/// buffers and the answer whole must not keep the connection for its next request.
pub(super) async fn read_body(req: Request, route: &str) -> Result<axum::body::Bytes, Response> {
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
