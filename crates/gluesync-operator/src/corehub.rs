//! Core Hub's REST API, as GKO uses it: log in, list pipelines, put them into maintenance mode and out.
//!
//! Every call has a timeout; connection errors, timeouts and 5xx answers are retried with backoff; a 401
//! logs in again once. What is left is an [`Error`] that says what failed.

use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Mutex;

/// How GKO proves who it is to Core Hub.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Credentials {
    Password { username: String, password: String },
    Token(String),
    None,
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

/// A pipeline, with the fields GKO reads.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pipeline {
    pub id: String,
    #[serde(default)]
    pub is_in_maintenance_mode: bool,
}

/// `GET /pipelines` answers a bare list; some versions wrap it as `{pipelines: [...]}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum PipelineList {
    Bare(Vec<Pipeline>),
    Wrapped { pipelines: Vec<Pipeline> },
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
        let mut builder = reqwest::Client::builder()
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
        let mut backoff = self.retry.first_backoff;
        let mut last = None;
        for attempt in 1..=self.retry.attempts.max(1) {
            match build().send().await {
                Ok(resp) if resp.status().is_server_error() => {
                    let status = resp.status().as_u16();
                    let body = resp.text().await.unwrap_or_default();
                    last = Some(Error::Status {
                        what: what.into(),
                        status,
                        body: truncate(&body),
                    });
                }
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    last = Some(Error::Unreachable {
                        url: self.base.clone(),
                        reason: error_chain(&e),
                    })
                }
            }
            if attempt < self.retry.attempts {
                tracing::debug!(what, attempt, "Core Hub call failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
        Err(last.unwrap_or_else(|| Error::Unreachable {
            url: self.base.clone(),
            reason: "no attempt made".into(),
        }))
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
            let text = resp.text().await.unwrap_or_default();
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
        let answer: LoginAnswer = resp.json().await.map_err(|e| Error::BadAnswer {
            what: "login".into(),
            reason: e.to_string(),
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
                let body = resp.text().await.unwrap_or_default();
                return Err(Error::Unauthorized(format!(
                    "{what} answered {status}: {}",
                    truncate(&body)
                )));
            }
            if !resp.status().is_success() {
                let body = resp.text().await.unwrap_or_default();
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
        let resp = req.send().await.map_err(|e| Error::Unreachable {
            url: self.base.clone(),
            reason: error_chain(&e),
        })?;
        match resp.status().as_u16() {
            200 => resp
                .json::<Me>()
                .await
                .map(Some)
                .map_err(|e| Error::BadAnswer {
                    what: "GET /authentication/me".into(),
                    reason: e.to_string(),
                }),
            401 | 403 => Ok(None),
            status => Err(Error::Status {
                what: "GET /authentication/me".into(),
                status,
                body: truncate(&resp.text().await.unwrap_or_default()),
            }),
        }
    }

    pub async fn pipelines(&self) -> Result<Vec<Pipeline>, Error> {
        let resp = self
            .call("GET /pipelines", reqwest::Method::GET, "/pipelines")
            .await?;
        let bytes = resp.bytes().await.map_err(|e| Error::Unreachable {
            url: self.base.clone(),
            reason: error_chain(&e),
        })?;
        parse_pipelines(&bytes)
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

/// Parses `GET /pipelines`.
pub fn parse_pipelines(body: &[u8]) -> Result<Vec<Pipeline>, Error> {
    match serde_json::from_slice::<PipelineList>(body) {
        Ok(PipelineList::Bare(p)) | Ok(PipelineList::Wrapped { pipelines: p }) => Ok(p),
        Err(e) => Err(Error::BadAnswer {
            what: "GET /pipelines".into(),
            reason: e.to_string(),
        }),
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

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
        assert!(parse_pipelines(br#"[{"name":"no id"}]"#).is_err());
    }

    #[test]
    fn ids_are_escaped_in_paths() {
        assert_eq!(urlencode("a b/c"), "a%20b%2Fc");
        assert_eq!(urlencode("8aeb9fb6"), "8aeb9fb6");
    }
}
