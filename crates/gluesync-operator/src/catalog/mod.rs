//! The version catalog's client: `GET {base}/agent/{image}/version` answers the latest version of an image
//! on each release channel. What to ask and when is the update's policy ([`crate::update::catalog`]).

pub mod poller;

use crate::cluster::wording::Said;
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use serde::Deserialize;

use crate::api::ReleaseChannel;

/// Latest versions on `channel` of each image in `images`; why not, when the catalog cannot say. An
/// image the catalog does not know has no entry.
pub async fn latest(
    base: &str,
    channel: ReleaseChannel,
    images: &BTreeSet<String>,
) -> Result<BTreeMap<String, String>, String> {
    let client =
        CatalogClient::new(base).map_err(|e| format!("building the catalog client: {e}"))?;
    let mut out = BTreeMap::new();
    for name in images {
        match client.entry(name).await {
            Ok(entry) => {
                if let Some(v) = entry.latest(channel) {
                    out.insert(name.clone(), v.to_string());
                }
            }
            Err(Error::UnknownImage(_)) => {}
            Err(e) => {
                tracing::warn!(error = %Said(&e), image = %name, "version catalog");
                return Err(e.to_string());
            }
        }
    }
    Ok(out)
}

/// The catalog's answer for one image.
#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[serde(rename = "latestVersionGA", default)]
    pub latest_version_ga: Option<String>,
    #[serde(default)]
    pub latest_version_beta: Option<String>,
    #[serde(default)]
    pub latest_version_alpha: Option<String>,
}

impl Entry {
    /// The latest version on `channel`; an empty string counts as none.
    pub fn latest(&self, channel: ReleaseChannel) -> Option<&str> {
        let v = match channel {
            ReleaseChannel::Ga => &self.latest_version_ga,
            ReleaseChannel::Beta => &self.latest_version_beta,
            ReleaseChannel::Alpha => &self.latest_version_alpha,
        };
        v.as_deref().filter(|s| !s.trim().is_empty())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the version catalog is in maintenance; GKO will try later")]
    Maintenance,
    #[error("the version catalog does not know image {0}")]
    UnknownImage(String),
    #[error("the version catalog at {url} cannot be reached: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the version catalog answered {status} for {image}")]
    Status { image: String, status: u16 },
    #[error("the version catalog's answer for {image} does not parse: {reason}")]
    BadAnswer { image: String, reason: String },
}

/// The largest catalog answer GKO reads (one image's versions and changelog).
pub const ANSWER_LIMIT: usize = 1024 * 1024;

pub struct CatalogClient {
    http: reqwest::Client,
    base: String,
}

impl CatalogClient {
    pub fn new(base: &str) -> Result<CatalogClient, reqwest::Error> {
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(Duration::from_secs(5))
            .build()?;
        Ok(CatalogClient {
            http,
            base: base.trim_end_matches('/').to_string(),
        })
    }

    /// The entry of one image (the last segment of its repository), with up to 3 retries.
    pub async fn entry(&self, image: &str) -> Result<Entry, Error> {
        let url = format!("{}/agent/{image}/version", self.base);
        let mut backoff = Duration::from_millis(300);
        let mut last = None;
        for attempt in 0..4 {
            if attempt > 0 {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            let resp = match self.http.get(&url).send().await {
                Ok(r) => r,
                Err(e) => {
                    last = Some(Error::Unreachable {
                        url: self.base.clone(),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let body = match crate::http::bounded::read(resp, ANSWER_LIMIT).await {
                Ok(b) => b,
                Err(reason) => {
                    return Err(Error::BadAnswer {
                        image: image.into(),
                        reason,
                    });
                }
            };
            match status {
                200 => return parse(image, &body),
                503 if is_maintenance(&body) => return Err(Error::Maintenance),
                404 => return Err(Error::UnknownImage(image.into())),
                s if s >= 500 => {
                    last = Some(Error::Status {
                        image: image.into(),
                        status: s,
                    })
                }
                s => {
                    return Err(Error::Status {
                        image: image.into(),
                        status: s,
                    });
                }
            }
        }
        Err(last.unwrap_or(Error::Unreachable {
            url: self.base.clone(),
            reason: "no attempt made".into(),
        }))
    }
}

fn is_maintenance(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("code")
                .and_then(|c| c.as_str())
                .map(|c| c == "MAINTENANCE_MODE")
        })
        .unwrap_or(false)
}

/// Parses an answer: the fields at the top, or (older catalogs) under `AvailableAgents`.
pub fn parse(image: &str, body: &[u8]) -> Result<Entry, Error> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| Error::BadAnswer {
        image: image.into(),
        reason: e.to_string(),
    })?;
    let value = value.get("AvailableAgents").cloned().unwrap_or(value);
    if !value.is_object() {
        return Err(Error::BadAnswer {
            image: image.into(),
            reason: "not a JSON object".into(),
        });
    }
    serde_json::from_value(value).map_err(|e| Error::BadAnswer {
        image: image.into(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_flat_or_wrapped() {
        let flat = br#"{"latestVersionGA":"2.3.2.2","latestVersionBeta":"2.3.3.0","latestVersionAlpha":""}"#;
        let e = parse("gluesync-core-hub", flat).unwrap();
        assert_eq!(e.latest(ReleaseChannel::Ga), Some("2.3.2.2"));
        assert_eq!(e.latest(ReleaseChannel::Beta), Some("2.3.3.0"));
        assert_eq!(
            e.latest(ReleaseChannel::Alpha),
            None,
            "an empty string is no version"
        );
        let wrapped = br#"{"AvailableAgents":{"latestVersionGA":"1.0"}}"#;
        assert_eq!(
            parse("x", wrapped).unwrap().latest(ReleaseChannel::Ga),
            Some("1.0")
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse("x", b"<html>").is_err());
        assert!(parse("x", b"[1,2]").is_err());
        assert!(parse("x", br#"{"latestVersionGA": 7}"#).is_err());
        assert!(is_maintenance(
            br#"{"code":"MAINTENANCE_MODE","message":"later"}"#
        ));
        assert!(!is_maintenance(b"oops"));
    }
}
