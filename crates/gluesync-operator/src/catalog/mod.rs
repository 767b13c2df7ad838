//! The version catalog: `GET {base}/agent/{image}/version` answers the latest version of an image on each
//! release channel.

pub mod poller;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde::Deserialize;

use crate::{
    api::{
        CHECK_NOW_ANNOTATION, ComponentType, GluesyncPlatform, GluesyncPlatformStatus,
        ReleaseChannel,
    },
    version::ImageRef,
};

pub const DEFAULT_URL: &str = "https://api.backoffice.molo17.com";

/// A catalog check the update engine wants made in the background.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Names this check: the answer carries it back, and a new token asks for a new check.
    pub token: String,
    pub channel: ReleaseChannel,
    pub base: String,
    /// Image names (the last segment of each repository) to ask about.
    pub images: BTreeSet<String>,
}

/// The answer to a [`Check`].
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub token: String,
    /// When the check was made.
    pub at: Time,
    /// Latest version per image name on the channel, or why the catalog could not say.
    pub result: Result<BTreeMap<String, String>, String>,
}

/// The check of every managed image of `gsp` on `channel`.
pub fn check(
    gsp: &GluesyncPlatform,
    workloads: &[crate::cluster::Workload],
    token: String,
    channel: ReleaseChannel,
) -> Check {
    Check {
        token,
        channel,
        base: gsp
            .spec
            .catalog
            .url
            .clone()
            .unwrap_or_else(|| DEFAULT_URL.to_string()),
        images: workloads
            .iter()
            .filter(|w| w.component_type.is_some())
            .map(|w| ImageRef::parse(&w.image).name().to_string())
            .collect(),
    }
}

/// The token of the periodic check that is due: it changes once a check was taken into the status, or
/// when the check-now annotation takes a new value.
pub fn due_token(gsp: &GluesyncPlatform) -> String {
    let state = gsp.status.as_ref().and_then(|s| s.catalog.as_ref());
    format!(
        "due/{}/{}/{}",
        state
            .and_then(|c| c.last_attempt_at.as_ref())
            .map_or(0, |t| t.0.as_second()),
        gsp.annotations()
            .get(CHECK_NOW_ANNOTATION)
            .map_or("", String::as_str),
        gsp.spec.release_channel.as_str(),
    )
}

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
                tracing::warn!(error = %e, image = %name, "version catalog");
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
            let body = match crate::bounded::read(resp, ANSWER_LIMIT).await {
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

/// When the next catalog check is due: `None` for an offline install (never), `Some(ZERO)` for now.
/// A new value of the `gluesync.molo17.com/check-now` annotation makes it due at once; after a failed check
/// the next one comes within 5 minutes whatever the interval.
pub fn due(gsp: &GluesyncPlatform, now: &Time) -> Option<Duration> {
    if gsp.spec.catalog.offline {
        return None;
    }
    let state = gsp
        .status
        .as_ref()
        .and_then(|s| s.catalog.clone())
        .unwrap_or_default();
    let asked = gsp.annotations().get(CHECK_NOW_ANNOTATION);
    if asked.is_some() && asked != state.observed_check_now.as_ref() {
        return Some(Duration::ZERO);
    }
    let Some(last) = state.last_attempt_at else {
        return Some(Duration::ZERO);
    };
    let mut interval = Duration::from_secs(gsp.spec.check_interval_minutes.max(1) as u64 * 60);
    if state.error.is_some() {
        interval = interval.min(RETRY_AFTER_ERROR);
    }
    let elapsed =
        Duration::from_secs(now.0.as_second().saturating_sub(last.0.as_second()).max(0) as u64);
    Some(interval.saturating_sub(elapsed))
}

const RETRY_AFTER_ERROR: Duration = Duration::from_secs(300);

/// Takes a catalog check's result into the status: `available`, each component's `available`, and
/// `status.catalog`. A failed check changes neither version; it says why in `status.catalog.error`.
pub fn apply(
    gsp: &GluesyncPlatform,
    status: &mut GluesyncPlatformStatus,
    check: &Result<BTreeMap<String, String>, String>,
    now: &Time,
) {
    let mut state = status.catalog.clone().unwrap_or_default();
    state.observed_check_now = gsp.annotations().get(CHECK_NOW_ANNOTATION).cloned();
    state.last_attempt_at = Some(now.clone());
    match check {
        Ok(latest) => {
            state.last_checked_at = Some(now.clone());
            state.error = None;
            let core_hub = status
                .components
                .iter()
                .find(|c| c.component_type == ComponentType::CoreHub)
                .and_then(|c| latest.get(ImageRef::parse(&c.image).name()).cloned());
            status.available = core_hub.clone();
            for c in &mut status.components {
                let own = latest.get(ImageRef::parse(&c.image).name()).cloned();
                c.available = match c.component_type {
                    ComponentType::Agent => own.or_else(|| core_hub.clone()),
                    _ => own,
                };
            }
        }
        Err(e) => state.error = Some(e.clone()),
    }
    status.catalog = Some(state);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CatalogStatus;

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

    fn platform(
        spec: serde_json::Value,
        catalog: Option<CatalogStatus>,
        check_now: Option<&str>,
    ) -> GluesyncPlatform {
        let mut g = GluesyncPlatform::new("g", serde_json::from_value(spec).unwrap());
        if let Some(v) = check_now {
            g.metadata.annotations =
                Some([(CHECK_NOW_ANNOTATION.to_string(), v.to_string())].into());
        }
        g.status = Some(GluesyncPlatformStatus {
            catalog,
            ..Default::default()
        });
        g
    }

    fn at(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    #[test]
    fn checks_come_every_interval_at_once_on_check_now_and_never_offline() {
        let spec = serde_json::json!({"version": "2.3.2.1", "checkIntervalMinutes": 10});
        assert_eq!(
            due(&platform(spec.clone(), None, None), &at(0)),
            Some(Duration::ZERO)
        );
        let checked = CatalogStatus {
            last_attempt_at: Some(at(0)),
            last_checked_at: Some(at(0)),
            observed_check_now: Some("1".into()),
            error: None,
        };
        let g = platform(spec.clone(), Some(checked.clone()), Some("1"));
        assert_eq!(due(&g, &at(60)), Some(Duration::from_secs(540)));
        assert_eq!(due(&g, &at(600)), Some(Duration::ZERO));
        let g = platform(spec.clone(), Some(checked.clone()), Some("2"));
        assert_eq!(
            due(&g, &at(60)),
            Some(Duration::ZERO),
            "a new check-now value"
        );
        let failed = CatalogStatus {
            error: Some("down".into()),
            ..checked
        };
        let g = platform(spec, Some(failed), Some("1"));
        assert_eq!(
            due(&g, &at(60)),
            Some(Duration::from_secs(240)),
            "retried within 5 minutes"
        );
        let offline = serde_json::json!({"version": "2.3.2.1", "catalog": {"offline": true}});
        assert_eq!(due(&platform(offline, None, Some("9")), &at(0)), None);
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
