//! Core Hub's REST API, as GKO uses it: log in, list pipelines, put them into maintenance mode and out.
//!
//! Every call has a timeout; connection errors, timeouts and 5xx answers are retried with backoff; a 401
//! logs in again once. What is left is an [`Error`] that says what failed.

pub mod connect;
pub mod worker;

use crate::cluster::wording::Said;
use std::{sync::Arc, time::Duration};

use serde::Deserialize;
use tokio::sync::Mutex;

use crate::update::corehub::Pipeline;

/// How GKO proves who it is to Core Hub. Its Debug form never shows a password or a token.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Credentials {
    Password { username: String, password: String },
    Token(String),
    None,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Password { username, .. } => {
                write!(
                    f,
                    "Password {{ username: {username:?}, password: <hidden> }}"
                )
            }
            Credentials::Token(_) => write!(f, "Token(<hidden>)"),
            Credentials::None => write!(f, "None"),
        }
    }
}

/// TLS settings for Core Hub's certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tls {
    /// PEM of the CA that signs Core Hub's certificate (default: the well-known roots).
    pub ca_pem: Option<String>,
    /// Accept any certificate.
    pub insecure_skip_verify: bool,
}

/// Timeouts and retries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Retry {
    pub timeout: Duration,
    pub attempts: u32,
    pub first_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            timeout: Duration::from_secs(10),
            attempts: 4,
            first_backoff: Duration::from_millis(200),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Core Hub at {url} cannot be reached: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "Core Hub at {url} presented a certificate GKO does not trust ({reason}), so nothing was sent: name \
         the CA that signs it in spec.coreHub.caSecret"
    )]
    Untrusted { url: String, reason: String },
    #[error("Core Hub answered {status} to {what}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
    #[error("Core Hub refused GKO's credentials: {0}")]
    Unauthorized(String),
    #[error("Core Hub's answer to {what} is not what GKO expects: {reason}")]
    BadAnswer { what: String, reason: String },
    #[error("building the Core Hub client: {0}")]
    Client(String),
}

/// A caller as Core Hub knows it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Me {
    pub username: String,
    pub role: String,
}

pub struct CoreHub {
    http: reqwest::Client,
    base: String,
    credentials: Credentials,
    retry: Retry,
    token: Mutex<Option<String>>,
}

impl CoreHub {
    pub fn new(
        base: &str,
        credentials: Credentials,
        tls: &Tls,
        retry: Retry,
    ) -> Result<CoreHub, Error> {
        Self::new_as(base, credentials, tls, retry, None)
    }

    /// A client whose requests name this GKO process in their `User-Agent`
    /// (`gluesync-operator/<version> (<instance>)`), so Core Hub's logs tell which GKO called.
    pub fn new_as(
        base: &str,
        credentials: Credentials,
        tls: &Tls,
        retry: Retry,
        instance: Option<&str>,
    ) -> Result<CoreHub, Error> {
        let agent = match instance {
            Some(i) => format!("gluesync-operator/{} ({i})", env!("CARGO_PKG_VERSION")),
            None => format!("gluesync-operator/{}", env!("CARGO_PKG_VERSION")),
        };
        let mut builder = reqwest::Client::builder()
            .user_agent(agent)
            .timeout(retry.timeout)
            .connect_timeout(retry.timeout.min(Duration::from_secs(5)))
            .use_rustls_tls();
        if tls.insecure_skip_verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        if let Some(pem) = &tls.ca_pem {
            let cert = reqwest::Certificate::from_pem(pem.as_bytes())
                .map_err(|e| Error::Client(format!("the CA certificate does not parse: {e}")))?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder.build().map_err(|e| Error::Client(e.to_string()))?;
        let token = match &credentials {
            Credentials::Token(t) => Some(t.clone()),
            _ => None,
        };
        Ok(CoreHub {
            http,
            base: base.trim_end_matches('/').to_string(),
            credentials,
            retry,
            token: Mutex::new(token),
        })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// Sends one request with retries on connection errors, timeouts and 5xx.
    async fn send(
        &self,
        what: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
        use backon::Retryable;
        let backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.retry.first_backoff)
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(self.retry.attempts.max(1) as usize - 1);
        let once = || async {
            match build().send().await {
                Ok(resp) if resp.status().is_server_error() => {
                    let status = resp.status().as_u16();
                    let body = crate::http::bounded::error_text(resp).await;
                    Err(Error::Status {
                        what: what.into(),
                        status,
                        body: truncate(&body),
                    })
                }
                Ok(resp) => Ok(resp),
                Err(e) => Err(self.unreachable(&e)),
            }
        };
        once.retry(backoff)
            .sleep(tokio::time::sleep)
            .notify(|e, after| tracing::debug!(what, error = %Said(e), ?after, "Core Hub call failed; retrying"))
            .await
    }

    /// A request that got no answer: a certificate GKO does not trust is said as such (the TLS handshake
    /// failed before anything was sent), anything else is unreachable.
    fn unreachable(&self, e: &reqwest::Error) -> Error {
        let reason = error_chain(e);
        if reason.contains("invalid peer certificate") {
            let why = reason
                .rsplit("invalid peer certificate: ")
                .next()
                .unwrap_or(&reason)
                .to_string();
            Error::Untrusted {
                url: self.base.clone(),
                reason: why,
            }
        } else {
            Error::Unreachable {
                url: self.base.clone(),
                reason,
            }
        }
    }

    async fn login(&self) -> Result<String, Error> {
        let Credentials::Password { username, password } = &self.credentials else {
            return Err(Error::Unauthorized(
                "the token was refused and there is no password to log in with".into(),
            ));
        };
        let url = format!("{}/authentication/login", self.base);
        let body = serde_json::json!({"username": username, "password": password});
        let resp = self
            .send("login", || self.http.post(&url).json(&body))
            .await?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            let text = crate::http::bounded::error_text(resp).await;
            return Err(Error::Unauthorized(format!(
                "login as {username} answered {status}: {}",
                truncate(&text)
            )));
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct LoginAnswer {
            api_token: String,
        }
        let answer: LoginAnswer = crate::http::bounded::read(resp, ANSWER_LIMIT)
            .await
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|reason| Error::BadAnswer {
                what: "login".into(),
                reason,
            })?;
        *self.token.lock().await = Some(answer.api_token.clone());
        Ok(answer.api_token)
    }

    async fn token(&self) -> Result<Option<String>, Error> {
        if let Some(t) = self.token.lock().await.clone() {
            return Ok(Some(t));
        }
        match self.credentials {
            Credentials::None => Ok(None),
            _ => self.login().await.map(Some),
        }
    }

    /// An authenticated request; on 401 it logs in again once and repeats it.
    async fn call(
        &self,
        what: &str,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::Response, Error> {
        let url = format!("{}{}", self.base, path);
        for relogin in [false, true] {
            let token = if relogin {
                Some(self.login().await?)
            } else {
                self.token().await?
            };
            let resp = self
                .send(what, || {
                    let req = self.http.request(method.clone(), &url);
                    match &token {
                        Some(t) => req.bearer_auth(t),
                        None => req,
                    }
                })
                .await?;
            let status = resp.status().as_u16();
            if status == 401 && !relogin && matches!(self.credentials, Credentials::Password { .. })
            {
                continue;
            }
            if status == 401 || status == 403 {
                let body = crate::http::bounded::error_text(resp).await;
                return Err(Error::Unauthorized(format!(
                    "{what} answered {status}: {}",
                    truncate(&body)
                )));
            }
            if !resp.status().is_success() {
                let body = crate::http::bounded::error_text(resp).await;
                return Err(Error::Status {
                    what: what.into(),
                    status,
                    body: truncate(&body),
                });
            }
            return Ok(resp);
        }
        Err(Error::Unauthorized(format!(
            "{what}: still 401 after a new login"
        )))
    }

    /// Who the caller of these credentials is, asked with the caller's own `Authorization` header and
    /// cookie: `None` when Core Hub refuses them. One attempt: a caller waits on it.
    pub async fn me(
        &self,
        authorization: Option<&str>,
        cookie: Option<&str>,
    ) -> Result<Option<Me>, Error> {
        let url = format!("{}/authentication/me", self.base);
        let mut req = self.http.get(&url).timeout(Duration::from_secs(5));
        if let Some(a) = authorization {
            req = req.header("authorization", a);
        }
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        match resp.status().as_u16() {
            200 => crate::http::bounded::read(resp, ANSWER_LIMIT)
                .await
                .and_then(|b| serde_json::from_slice::<Me>(&b).map_err(|e| e.to_string()))
                .map(Some)
                .map_err(|reason| Error::BadAnswer {
                    what: "GET /authentication/me".into(),
                    reason,
                }),
            401 | 403 => Ok(None),
            status => Err(Error::Status {
                what: "GET /authentication/me".into(),
                status,
                body: truncate(&crate::http::bounded::error_text(resp).await),
            }),
        }
    }

    /// Lists the pipelines.
    pub async fn pipelines(&self) -> Result<Vec<Pipeline>, Error> {
        self.pipelines_after(None).await
    }

    /// Lists the pipelines; ids unchanged since `previous` are shared with it.
    pub async fn pipelines_after(
        &self,
        previous: Option<Arc<Vec<Pipeline>>>,
    ) -> Result<Vec<Pipeline>, Error> {
        let resp = self
            .call("GET /pipelines", reqwest::Method::GET, "/pipelines")
            .await?;
        // Parsed as it arrives, on a blocking thread: the whole answer (100,000 pipelines may be tens of
        // megabytes) is never held at once, only a chunk and the ids parsed so far. A read that fails
        // midway is Core Hub unreachable, not a bad answer.
        use futures::TryStreamExt;
        let body = tokio_util::io::StreamReader::new(
            resp.bytes_stream()
                .map_err(|e| std::io::Error::other(error_chain(&e))),
        );
        let reader = std::io::BufReader::new(tokio_util::io::SyncIoBridge::new(body));
        let base = self.base.clone();
        tokio::task::spawn_blocking(move || {
            parse_pipelines_from(
                reader,
                previous.as_deref().map_or(&[], Vec::as_slice),
                &base,
            )
        })
        .await
        .map_err(|e| Error::BadAnswer {
            what: "GET /pipelines".into(),
            reason: e.to_string(),
        })?
    }

    pub async fn set_maintenance(&self, id: &str, on: bool) -> Result<(), Error> {
        let command = if on { "enter" } else { "exit" };
        let path = format!(
            "/pipelines/{}/commands/maintenance/{command}",
            urlencode(id)
        );
        self.call(
            &format!("maintenance {command} of pipeline {id}"),
            reqwest::Method::POST,
            &path,
        )
        .await
        .map(|_| ())
    }
}

/// Parses `GET /pipelines`: a bare list, or one wrapped as `{pipelines: [...]}`. Every pipeline must
/// carry `id` and `isInMaintenanceMode`; the error names what is missing.
pub fn parse_pipelines(body: &[u8]) -> Result<Vec<Pipeline>, Error> {
    parse_pipelines_from(body, &[], "")
}

/// [`parse_pipelines`] from a reader, straight into [`Pipeline`]s, every other field skipped: a listing of
/// 100,000 pipelines costs their ids, not a tree of every field of every pipeline. An id the `previous`
/// listing holds at the same place (Core Hub lists in a stable order) is that listing's id, shared, not a
/// new copy: listing every 250 ms allocates only the ids that changed.
fn parse_pipelines_from(
    body: impl std::io::Read,
    previous: &[Pipeline],
    url: &str,
) -> Result<Vec<Pipeline>, Error> {
    use serde::de::DeserializeSeed;
    let bad = |e: serde_json::Error| match e.is_io() {
        true => Error::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        },
        false => Error::BadAnswer {
            what: "GET /pipelines".into(),
            reason: e.to_string(),
        },
    };
    let mut de = serde_json::Deserializer::from_reader(body);
    let list = listing::Answer(previous)
        .deserialize(&mut de)
        .map_err(bad)?;
    de.end().map_err(bad)?;
    Ok(list)
}

/// The seeds that read `GET /pipelines` with the previous listing at hand.
mod listing {
    use std::fmt;

    use serde::{
        Deserialize,
        de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor},
    };

    use crate::api::ids::PipelineId;
    use crate::update::corehub::Pipeline;

    /// The whole answer: a list, or `{pipelines: [...]}`.
    pub struct Answer<'a>(pub &'a [Pipeline]);

    impl<'de> DeserializeSeed<'de> for Answer<'_> {
        type Value = Vec<Pipeline>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Answer<'_> {
        type Value = Vec<Pipeline>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of pipelines or {pipelines: [...]}")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            List(self.0).visit_seq(seq)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut list = None;
            while let Some(key) = map.next_key::<WrapperKey>()? {
                match key {
                    WrapperKey::Pipelines if list.is_some() => {
                        return Err(de::Error::duplicate_field("pipelines"));
                    }
                    WrapperKey::Pipelines => list = Some(map.next_value_seed(List(self.0))?),
                    WrapperKey::Other => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            list.ok_or_else(|| de::Error::missing_field("pipelines"))
        }
    }

    /// The field of `{pipelines: [...]}` GKO reads.
    #[derive(Deserialize)]
    #[serde(field_identifier, rename_all = "camelCase")]
    enum WrapperKey {
        Pipelines,
        #[serde(other)]
        Other,
    }

    /// The list of pipelines.
    struct List<'a>(&'a [Pipeline]);

    impl<'de> DeserializeSeed<'de> for List<'_> {
        type Value = Vec<Pipeline>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for List<'_> {
        type Value = Vec<Pipeline>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of pipelines")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            // As long as the previous listing: no doubling past the length it will most likely have.
            let mut out = Vec::with_capacity(self.0.len());
            while let Some(p) = seq.next_element_seed(One(self.0.get(out.len())))? {
                out.push(p);
            }
            out.shrink_to_fit();
            Ok(out)
        }
    }

    /// One pipeline; the previous listing's pipeline at the same place.
    struct One<'a>(Option<&'a Pipeline>);

    impl<'de> DeserializeSeed<'de> for One<'_> {
        type Value = Pipeline;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for One<'_> {
        type Value = Pipeline;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a pipeline")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut id, mut maintenance) = (None, None);
            while let Some(key) = map.next_key::<Key>()? {
                match key {
                    // A field given twice is an error (which one would Core Hub mean?).
                    Key::Id if id.is_some() => return Err(de::Error::duplicate_field("id")),
                    Key::Maintenance if maintenance.is_some() => {
                        return Err(de::Error::duplicate_field("isInMaintenanceMode"));
                    }
                    Key::Id => id = Some(map.next_value_seed(Id(self.0.map(|p| &p.id)))?),
                    Key::Maintenance => maintenance = Some(map.next_value::<bool>()?),
                    Key::Other => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Pipeline {
                id: id.ok_or_else(|| de::Error::missing_field("id"))?,
                is_in_maintenance_mode: maintenance
                    .ok_or_else(|| de::Error::missing_field("isInMaintenanceMode"))?,
            })
        }
    }

    /// The fields of a pipeline GKO reads.
    #[derive(Deserialize)]
    #[serde(field_identifier)]
    enum Key {
        #[serde(rename = "id")]
        Id,
        #[serde(rename = "isInMaintenanceMode")]
        Maintenance,
        #[serde(other)]
        Other,
    }

    /// An id: the previous listing's copy when it is the same.
    struct Id<'a>(Option<&'a PipelineId>);

    impl<'de> DeserializeSeed<'de> for Id<'_> {
        type Value = PipelineId;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl Visitor<'_> for Id<'_> {
        type Value = PipelineId;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a pipeline id (a string)")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<PipelineId, E> {
            Ok(match self.0 {
                Some(previous) if previous.as_str() == v => previous.clone(),
                _ => PipelineId::from(v),
            })
        }
    }
}

/// What stays as it is in a path segment: RFC 3986's unreserved characters.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, PATH_SEGMENT).to_string()
}

/// The largest login or identity answer GKO reads (both are a few hundred bytes).
pub const ANSWER_LIMIT: usize = 64 * 1024;

fn truncate(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn pipelines_parse_from_chunks_as_they_arrive() {
        let body = br#"  {"pipelines":[{"id":"a","isInMaintenanceMode":true},{"id":"b","isInMaintenanceMode":false}]}"#;
        for size in [1, 3, 7, body.len()] {
            let pieces: Vec<std::io::Result<axum::body::Bytes>> = body
                .chunks(size)
                .map(|p| Ok(axum::body::Bytes::copy_from_slice(p)))
                .collect();
            let stream = tokio_util::io::StreamReader::new(futures::stream::iter(pieces));
            let reader = std::io::BufReader::new(tokio_util::io::SyncIoBridge::new(stream));
            let p = tokio::task::spawn_blocking(move || parse_pipelines_from(reader, &[], ""))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                p.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
                ["a", "b"],
                "chunks of {size}"
            );
        }
        // A body cut by the network is Core Hub unreachable, not a bad answer.
        let cut: Vec<std::io::Result<axum::body::Bytes>> = vec![
            Ok(axum::body::Bytes::from_static(br#"[{"id":"a","#)),
            Err(std::io::Error::other("connection reset")),
        ];
        let stream = tokio_util::io::StreamReader::new(futures::stream::iter(cut));
        let reader = std::io::BufReader::new(tokio_util::io::SyncIoBridge::new(stream));
        let e =
            tokio::task::spawn_blocking(move || parse_pipelines_from(reader, &[], "https://ch"))
                .await
                .unwrap()
                .unwrap_err();
        assert!(matches!(e, Error::Unreachable { .. }), "{e}");
    }

    #[test]
    fn pipelines_parse_bare_or_wrapped() {
        let bare =
            br#"[{"id":"8aeb9fb6","name":"x","sourceAgentsInfo":[],"isInMaintenanceMode":false}]"#;
        let p = parse_pipelines(bare).unwrap();
        assert_eq!(p[0].id, "8aeb9fb6");
        assert!(!p[0].is_in_maintenance_mode);
        let wrapped = br#"{"pipelines":[{"id":"a","isInMaintenanceMode":true}]}"#;
        assert!(parse_pipelines(wrapped).unwrap()[0].is_in_maintenance_mode);
        assert!(parse_pipelines(b"<html>").is_err());
        assert!(parse_pipelines(br#"{"items":[]}"#).is_err());
        assert!(parse_pipelines(br#"{"pipelines":{}}"#).is_err());
        // Fields GKO does not read, of any shape, are skipped.
        let rich = br#" {"total":1,"pipelines":[{"id":"b","isInMaintenanceMode":false,"agents":[{"x":[1,{"y":null}]}]}]}"#;
        assert_eq!(parse_pipelines(rich).unwrap()[0].id, "b");
        assert!(parse_pipelines(br#"[{"name":"no id"}]"#).is_err());
        // A Core Hub that renamed the field: an error, never "running".
        let err = parse_pipelines(br#"[{"id":"a","maintenance":true}]"#).unwrap_err();
        assert!(err.to_string().contains("isInMaintenanceMode"), "{err}");
    }

    #[test]
    fn a_listing_shares_the_ids_of_the_previous_one() {
        let first = parse_pipelines(
            br#"[{"id":"a","isInMaintenanceMode":false},{"id":"b","isInMaintenanceMode":false}]"#,
        )
        .unwrap();
        let body = br#"[{"id":"a","isInMaintenanceMode":true},{"id":"c","isInMaintenanceMode":false},{"id":"d","isInMaintenanceMode":false}]"#;
        let next = parse_pipelines_from(&body[..], &first, "").unwrap();
        let same = |x: &Pipeline, y: &Pipeline| std::ptr::eq(x.id.as_str(), y.id.as_str());
        assert!(
            same(&next[0], &first[0]),
            "an unchanged id is the previous copy"
        );
        assert_eq!(next[1].id, "c", "a changed id is read as it is");
        assert!(!same(&next[1], &first[1]));
        assert_eq!(
            next[2].id, "d",
            "a listing longer than the previous one is read whole"
        );
        assert!(
            next[0].is_in_maintenance_mode,
            "only the id is taken from before"
        );
        // Extra text after the answer is an error, as before; so is a field given twice.
        assert!(parse_pipelines(br#"[] []"#).is_err());
        let twice = parse_pipelines(
            br#"[{"id":"a","isInMaintenanceMode":true,"isInMaintenanceMode":false}]"#,
        )
        .unwrap_err();
        assert!(twice.to_string().contains("duplicate field"), "{twice}");
        assert!(parse_pipelines(br#"[{"id":"a","id":"b","isInMaintenanceMode":true}]"#).is_err());
        assert!(parse_pipelines(br#"{"pipelines":[],"pipelines":[]}"#).is_err());
    }

    #[test]
    fn credentials_never_show_in_a_debug_print() {
        let p = Credentials::Password {
            username: "admin".into(),
            password: "s3cret".into(),
        };
        let t = Credentials::Token("tok-123".into());
        let shown = format!("{p:?} {t:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("tok-123"),
            "{shown}"
        );
        assert!(shown.contains("admin"));
    }

    #[test]
    fn ids_are_escaped_in_paths() {
        assert_eq!(urlencode("a b/c"), "a%20b%2Fc");
        assert_eq!(urlencode("8aeb9fb6"), "8aeb9fb6");
    }
}
