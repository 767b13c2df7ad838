//! The catalog policy: which images to ask the version catalog about and when, and how its answer goes
//! into the status. The calls themselves are made by the catalog client, in the background.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::{
    CHECK_NOW_ANNOTATION, ComponentType, GluesyncPlatform, GluesyncPlatformStatus, ReleaseChannel,
    version::ImageRef,
};

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
    workloads: &[crate::update::observed::Workload],
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

pub const DEFAULT_URL: &str = "https://api.backoffice.molo17.com";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::CatalogStatus, update::fixtures::at};

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
}
