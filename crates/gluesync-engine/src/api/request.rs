//! An update request of the Core Hub UI, as the Conductor API records it in the annotation
//! `gluesync.molo17.com/request` beside the `spec.requestID` it writes, and as the update reads it back:
//! one type, written and parsed by the same code.

use serde::{Deserialize, Serialize};

use super::{GluesyncPlatform, REQUEST_ANNOTATION, ReleaseChannel};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UiRequest {
    /// The `spec.requestID` written with it: the request applies to the update of that id only.
    pub id: String,
    /// The release channel the request takes its versions from.
    pub channel: ReleaseChannel,
    /// The components the request named ("update one component"); empty: every component.
    #[serde(default)]
    pub ids: Vec<String>,
    /// Who asked, as Core Hub knows them.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
}

impl UiRequest {
    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The Core Hub UI's request for the current `spec.requestID`, if that is where it came from.
    pub fn of(gsp: &GluesyncPlatform) -> Option<UiRequest> {
        use kube::ResourceExt;
        gsp.annotations()
            .get(REQUEST_ANNOTATION)
            .and_then(|a| serde_json::from_str::<UiRequest>(a).ok())
            .filter(|r| Some(&r.id) == gsp.spec.request_id.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_is_read_back() {
        let r = UiRequest {
            id: "r-1".into(),
            channel: ReleaseChannel::Ga,
            ids: vec!["gluesync-gluesync-chronos".into()],
            username: Some("ann".into()),
            role: Some("admin".into()),
        };
        let text = r.to_annotation();
        assert_eq!(serde_json::from_str::<UiRequest>(&text).unwrap(), r);
        // Written before who asked was recorded: id and channel only.
        let old: UiRequest = serde_json::from_str(r#"{"id":"r-0","channel":"ga"}"#).unwrap();
        assert_eq!((old.ids.len(), old.username), (0, None));
    }
}
