//! The whole Conductor API, answering raw HTTP requests without a network: for the fuzz target (`make
//! fuzz`) and its unit tests. A request goes through exactly what a served one does (routing, the body
//! limit, authentication with the `Authorization` header and the `gs-auth` cookie, the cross-site checks,
//! the handlers and their body parsing), against a namespace holding one GluesyncPlatform and an API
//! server that refuses every call. Core Hub knows two callers, a manager presenting [`KNOWN_TOKEN`] (as
//! `Authorization: Bearer known-manager` or the cookie `gs-auth=known-manager`) and a Super Admin
//! presenting [`ADMIN_TOKEN`] the same ways; any other credential costs an identity check that fails
//! closed, as when Core Hub cannot be reached.

use std::{convert::Infallible, sync::Arc};

use axum::{body::Body, http::StatusCode};
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{Api, Caller, identities};
use crate::{
    api::GluesyncPlatform,
    cluster::{lease::Leadership, view::View, writer::Writer},
    metrics::Metrics,
};

/// A credential Core Hub knows: a manager.
pub const KNOWN_TOKEN: &str = "known-manager";
/// A credential Core Hub knows: a Super Admin (disaster recovery).
pub const ADMIN_TOKEN: &str = "known-admin";

/// An answer of the API: its status and its body, parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Answer {
    /// The request's path is one anyone may call (`/health`, `/openapi.json`).
    pub open: bool,
    /// The request presented the credential Core Hub knows.
    pub known: bool,
    /// The request's `Authorization` header is one GKO cannot read (repeated, or not visible ASCII), or
    /// it carries two `gs-auth` cookies: a 400 before any identity check.
    pub malformed: bool,
    pub status: StatusCode,
    pub body: Option<Value>,
    pub retry_after: Option<String>,
}

pub struct Harness {
    view: Arc<View>,
    runtime: tokio::runtime::Runtime,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let view = runtime.block_on(async {
            // An API server that answers every call with 503, in the Status form.
            let refusing =
                tower::service_fn(|_req: axum::http::Request<kube::client::Body>| async {
                    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "no API server here", "reason": "ServiceUnavailable", "code": 503});
                    Ok::<_, Infallible>(
                        axum::http::Response::builder()
                            .status(503)
                            .header("content-type", "application/json")
                            .body(kube::client::Body::from(status.to_string().into_bytes()))
                            .expect("a response"),
                    )
                });
            let client = kube::Client::new(refusing, "gluesync");
            let metrics = Arc::new(Metrics::default());
            metrics
                .ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
            let (platforms, mut platforms_w) =
                reflector::store::<kube::core::DeserializeGuard<GluesyncPlatform>>();
            let mut gsp: GluesyncPlatform = serde_json::from_value(json!({
                "apiVersion": "gluesync.molo17.com/v1", "kind": "GluesyncPlatform",
                "metadata": {"name": "gluesync", "namespace": "gluesync", "generation": 1},
                "spec": {"version": "2.3.2.2", "catalog": {"url": "http://127.0.0.1:9/catalog"}},
            }))
            .expect("a platform");
            gsp.status = Some(Default::default());
            platforms_w.apply_watcher_event(&watcher::Event::Apply(kube::core::DeserializeGuard(
                Ok(gsp),
            )));
            Arc::new(View {
                namespace: "gluesync".into(),
                writer: Writer::new(client, metrics.clone(), None, Leadership::always()),
                metrics,
                platforms,
                statefulsets: reflector::store().0,
                deployments: reflector::store().0,
                pods: crate::cluster::watches::PodCache::empty(),
                pods_wanted: tokio::sync::watch::channel(
                    crate::cluster::watches::PodSelector::Nothing,
                )
                .0,
                spilled: reflector::store().0,
                pre_pulls: reflector::store().0,
                refused_pods: Default::default(),
                recent: Default::default(),
                written: Default::default(),
                changed: tokio::sync::watch::channel(0).0,
                instance: None,
                access: crate::update::access::Access::default(),
            })
        });
        Harness { view, runtime }
    }

    /// The API's answer to `raw`, an HTTP/1.1 request (request line, headers, an empty line, the body);
    /// `None` when `raw` is not one. Each call starts from a fresh API (empty caches, full rations).
    pub fn answer(&self, raw: &[u8]) -> Option<Answer> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(head) = parsed.parse(raw).ok()? else {
            return None;
        };
        let mut req = axum::http::Request::builder()
            .method(parsed.method?)
            .uri(parsed.path?);
        for h in parsed.headers.iter() {
            req = req.header(h.name, h.value);
        }
        let req = req.body(Body::from(raw[head..].to_vec())).ok()?;
        let open = super::open_route(req.uri().path());
        let presented = identities::Presented::from_headers(req.headers());
        let malformed = matches!(
            presented,
            Err(identities::Unusable::Malformed | identities::Unusable::TwoSessions)
        );
        let known = presented.ok().flatten().is_some_and(|p| {
            [KNOWN_TOKEN, ADMIN_TOKEN].iter().any(|t| {
                p.authorization.as_deref() == Some(&format!("Bearer {t}"))
                    || p.session.as_deref() == Some(t)
            })
        });
        let api = Api {
            view: self.view.clone(),
            identities: Arc::default(),
            corehub: Arc::default(),
            updating: Arc::default(),
            in_flight: Arc::default(),
            containers: Arc::default(),
        };
        for (token, username, role) in [
            (KNOWN_TOKEN, "manager", "MANAGER"),
            (ADMIN_TOKEN, "admin", "SUPER_ADMIN"),
        ] {
            let caller = identities::Known::Caller(Caller {
                username: username.into(),
                role: role.into(),
            });
            for presented in [
                identities::Presented {
                    authorization: Some(format!("Bearer {token}")),
                    session: None,
                },
                identities::Presented {
                    authorization: None,
                    session: Some(token.into()),
                },
            ] {
                let key = api.identities.key(&presented);
                api.identities.remember(key, caller.clone());
            }
        }
        let router = super::router_for(api);
        self.runtime.block_on(async move {
            let resp = router.oneshot(req).await.unwrap_or_else(|e| match e {});
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .ok()?;
            Some(Answer {
                open,
                known,
                malformed,
                status,
                body: serde_json::from_slice(&bytes).ok(),
                retry_after,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(h: &Harness, raw: &str) -> Answer {
        h.answer(raw.as_bytes()).expect("an HTTP request")
    }

    #[test]
    fn only_the_super_admin_reaches_the_disaster_recovery_handlers() {
        let h = Harness::new();
        let put = |token: &str, body: &str| {
            h.answer(
                format!(
                    "PUT /disaster-recovery HTTP/1.1\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n\r\n{body}"
                )
                .as_bytes(),
            )
            .unwrap()
            .status
            .as_u16()
        };
        assert_eq!(put(KNOWN_TOKEN, "{}"), 403);
        assert_eq!(put(ADMIN_TOKEN, "{\"role\":\"tertiary\"}"), 400);
        // A valid setup: GKO may not write here (its API server refuses everything).
        let valid = r#"{"role":"primary","peerAddress":"peer","sharedSecret":"0123456789abcdef0123456789abcdef"}"#;
        assert!(
            matches!(put(ADMIN_TOKEN, valid), 409 | 503),
            "{}",
            put(ADMIN_TOKEN, valid)
        );
    }

    #[test]
    fn strangers_get_401_and_the_known_manager_reaches_the_handlers() {
        let h = Harness::new();
        let a = answer(
            &h,
            "GET /conductor/api/containers HTTP/1.1\r\nhost: gko\r\n\r\n",
        );
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{a:?}");
        let a = answer(&h, "GET /health HTTP/1.1\r\n\r\n");
        assert_eq!(a.status, StatusCode::OK);
        let a = answer(
            &h,
            "GET /containers HTTP/1.1\r\nauthorization: Bearer known-manager\r\n\r\n",
        );
        assert_eq!(a.status, StatusCode::OK, "{a:?}");
        assert_eq!(a.body.unwrap()["success"], true);
        // The body is parsed once the caller is known.
        let a = answer(
            &h,
            "POST /containers HTTP/1.1\r\nauthorization: Bearer known-manager\r\ncontent-type: application/json\r\n\r\n{\"action\":\"dance\"}",
        );
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{a:?}");
        assert_eq!(a.body.unwrap()["error"], "Invalid action");
        // The cookie is read among others; a cookie write from another site is refused.
        let a = answer(
            &h,
            "POST /containers HTTP/1.1\r\nhost: gko\r\norigin: https://evil.example\r\ncookie: theme=dark; gs-auth=known-manager\r\ncontent-type: application/json\r\n\r\n{\"action\":\"update\"}",
        );
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{a:?}");
        // A stranger's body is never read: 401, whatever it holds.
        let a = answer(
            &h,
            "POST /containers HTTP/1.1\r\nauthorization: Bearer nobody\r\n\r\n{\"action\":\"kill\"}",
        );
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{a:?}");
    }

    #[test]
    fn a_repeated_authorization_header_is_a_bad_request_even_when_one_is_known() {
        let h = Harness::new();
        // Found by the fuzzer: a second header carrying the known token does not make the caller known.
        let a = answer(
            &h,
            "GET /containers HTTP/1.1\r\nauthorization: Bearer known-managerx HTTP/1.1\r\nauthorization: Bearer known-manager\r\n\r\n",
        );
        assert!(a.malformed && !a.known, "{a:?}");
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{a:?}");
        assert_eq!(a.body.unwrap()["error"], "Bad Authorization header");
    }
}
