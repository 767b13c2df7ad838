//! The spec: what users (or the Core Hub UI, through GKO) ask for, with the labels and annotations
//! that go with it.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// Dotted numbers with an optional `-suffix`: what `spec.version` and module pins may hold.
const VERSION_PATTERN: &str = r"^[0-9]+(\.[0-9]+)*(-[A-Za-z0-9._-]+)?$";

fn modules_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 256,
        "additionalProperties": {
            "type": "string",
            "maxLength": 64,
            "pattern": VERSION_PATTERN,
        },
    })
}

/// Desired state of one Gluesync install.
// Each printcolumn(...) repeats `type_ = "string"`, which the lint takes for a duplicate attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gluesync.molo17.com",
    version = "v1alpha1",
    kind = "GluesyncPlatform",
    plural = "gluesyncplatforms",
    shortname = "gsp",
    category = "gluesync",
    namespaced,
    status = "GluesyncPlatformStatus",
    derive = "PartialEq",
    doc = "One Gluesync install and the Core Hub version it should run",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Desired", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Available", type_ = "string", json_path = ".status.available"),
    printcolumn(
        name = "Step",
        type_ = "string",
        json_path = ".status.update.step",
        priority = 1
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.stabilityWindowSeconds <= self.stabilityTimeoutSeconds")
        .message("stabilityWindowSeconds must not be longer than stabilityTimeoutSeconds")
        .field_path(".stabilityWindowSeconds"),
    validation = Rule::new("!has(self.catalog) || !self.catalog.offline || !has(self.catalog.url)")
        .message("an offline install has no catalog url")
        .field_path(".catalog.url")
)]
#[serde(rename_all = "camelCase")]
pub struct GluesyncPlatformSpec {
    /// Core Hub version to run, as dotted numbers (for example 2.3.2.2). Agents follow it. A suffix
    /// (`2.3.2.2-ubi`) names an image variant; without one, each image keeps the suffix it has.
    #[schemars(length(min = 1, max = 64), regex(pattern = VERSION_PATTERN))]
    pub version: String,

    /// Version pins by component name (the workload's name). A module without a pin follows the
    /// latest version of its image on the release channel; a third-party component is updated only
    /// when pinned here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "modules_schema")]
    pub modules: BTreeMap<String, String>,

    /// A new value asks GKO to run the update again (for example after a Failed update).
    #[serde(rename = "requestID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub request_id: Option<String>,

    /// Who starts updates: the Core Hub UI (`ui`) or Git (`gitops`).
    #[serde(default)]
    pub update_policy: UpdatePolicy,

    /// Release channel of the version catalog.
    #[serde(default)]
    pub release_channel: ReleaseChannel,

    /// Minutes between two checks of the version catalog.
    #[serde(default = "default_check_interval")]
    #[schemars(range(min = 1, max = 525600))]
    pub check_interval_minutes: i64,

    /// Registry and namespace that replace those of every image GKO writes
    /// (for example `registry.example.com/mirror`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!self.endsWith('/') && self != ''")
        .message("imageRegistry is a registry and path without a trailing slash"))]
    pub image_registry: Option<String>,

    /// The version catalog, or none for an offline install.
    #[serde(default)]
    pub catalog: CatalogSpec,

    /// How GKO reaches Core Hub.
    #[serde(default)]
    pub core_hub: CoreHubSpec,

    /// Seconds the running pipelines have to reach maintenance mode before the update is refused.
    #[serde(default = "default_drain_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub drain_timeout_seconds: i64,

    /// Seconds a component must stay ready, with no container restart, to pass its stability check.
    #[serde(default = "default_stability_window")]
    #[schemars(range(min = 0, max = 86400))]
    pub stability_window_seconds: i64,

    /// Seconds a component has to pass its stability check before it is rolled back.
    #[serde(default = "default_stability_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub stability_timeout_seconds: i64,

    /// GKO's update of its own Deployment, last, after Core Hub and the modules.
    #[serde(default)]
    pub self_update: SelfUpdateSpec,

    /// Before the drain, the new Core Hub and agent images are pulled on the nodes that run their pods
    /// now, so that the pull is not part of the pipelines' pause; a pull that fails refuses the update
    /// before anything is paused. See docs/updates.md#pre-pull.
    #[serde(default)]
    pub pre_pull: PrePullSpec,

    /// Recurring windows in which an update may start changing things (its drain, or its modules). An
    /// update asked for outside every window waits for the next one; one whose estimated paused time
    /// does not fit in what is left of the window waits too. A window never interrupts an update that
    /// runs. Empty: updates start when asked. See docs/updates.md#maintenance-windows-and-approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub maintenance_windows: Vec<MaintenanceWindow>,

    /// `manual`: an update runs Preflight (and the pre-pull) and then waits, with nothing paused and
    /// nothing changed, until the annotation `gluesync.molo17.com/approve` carries its
    /// `status.update.approvalID`: the update's `spec.requestID` when that request brought it, else
    /// `generation-<N>`, then a digest GKO draws when it makes the plan, so that an approval approves that
    /// plan alone (`kubectl gluesync approve`). `automatic`: updates run when asked.
    #[serde(default)]
    pub approval: Approval,

    /// Minutes a manual update waits for its approval before it ends Refused, nothing changed.
    #[serde(default = "default_approval_timeout")]
    #[schemars(range(min = 1, max = 43200))]
    pub approval_timeout_minutes: i64,

    /// This install as one site of a disaster-recovery pair (none: no pair). Written by the Core Hub UI
    /// through the Conductor API, or kept in Git. See docs/disaster-recovery.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaster_recovery: Option<DisasterRecoverySpec>,
}

fn default_check_interval() -> i64 {
    360
}
fn default_approval_timeout() -> i64 {
    1440
}
fn default_time_zone() -> String {
    "UTC".into()
}

/// A recurring maintenance window: on `days` (every day when empty), from `start` in `timeZone`, for
/// `durationMinutes`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// The days of the week it opens on; empty: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    pub days: Vec<Weekday>,
    /// When it opens, `HH:MM` (24 hours) in `timeZone`.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub start: String,
    /// How long it stays open, in minutes (at most a week).
    #[schemars(range(min = 1, max = 10080))]
    pub duration_minutes: i64,
    /// An IANA time zone (`Europe/Rome`, `America/New_York`), default `UTC`: the window follows its
    /// daylight-saving changes.
    #[serde(default = "default_time_zone")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: String,
}

/// A day of the week.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// Whether an update waits for a person's approval before it changes anything.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    #[default]
    Automatic,
    Manual,
}

/// The annotation that approves a waiting update under `approval: manual`: its value is the update's
/// `status.update.approvalID`.
pub const APPROVE_ANNOTATION: &str = "gluesync.molo17.com/approve";
fn default_drain_timeout() -> i64 {
    300
}
fn default_stability_window() -> i64 {
    60
}
fn default_stability_timeout() -> i64 {
    600
}
fn default_true() -> bool {
    true
}

/// Who starts updates.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UpdatePolicy {
    /// The Core Hub UI starts updates through the Conductor API; GKO writes the spec.
    #[default]
    Ui,
    /// A change of the spec in Git starts updates; UI requests are refused.
    Gitops,
}

/// Release channel of the version catalog.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum ReleaseChannel {
    #[default]
    Ga,
    Beta,
    Alpha,
}

impl ReleaseChannel {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseChannel::Ga => "ga",
            ReleaseChannel::Beta => "beta",
            ReleaseChannel::Alpha => "alpha",
        }
    }
}

/// The version catalog GKO reads to know what is available.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogSpec {
    /// Base URL of the catalog (default `https://api.backoffice.molo17.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')")
        .message("catalog url must be an http(s) URL"))]
    pub url: Option<String>,
    /// An offline install has no catalog: AVAILABLE stays empty and nothing is fetched.
    #[serde(default)]
    pub offline: bool,
}

/// How GKO reaches Core Hub's REST API.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.caSecret) || !self.insecureSkipVerify")
        .message("caSecret and insecureSkipVerify exclude each other: a CA is there to verify Core Hub")
)]
pub struct CoreHubSpec {
    /// Base URL (default: the Core Hub workload's Service on port 1717, HTTPS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')")
        .message("coreHub url must be an http(s) URL"))]
    pub url: Option<String>,
    /// Secret with `username` and `password`, or `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// Secret whose `ca.crt` signs Core Hub's certificate (default: the system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<String>,
    /// Accept any certificate from Core Hub. For tests and first installs only.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// GKO's update of its own Deployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SelfUpdateSpec {
    /// GKO updates itself last (under the `ui` policy only).
    #[serde(default = "default_true")]
    pub enabled: bool,
}

/// The pre-pull of the new Core Hub and agent images, before the drain.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrePullSpec {
    /// Pull the new images on the nodes first (a short-lived pod per node and image).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Seconds the pulls may take before the update is refused, nothing paused.
    #[serde(default = "default_pre_pull_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: i64,
}

impl Default for PrePullSpec {
    fn default() -> Self {
        PrePullSpec {
            enabled: true,
            timeout_seconds: default_pre_pull_timeout(),
        }
    }
}

fn default_pre_pull_timeout() -> i64 {
    300
}

/// The label of the pre-pull pods: the GluesyncPlatform they pull for.
pub const PRE_PULL_LABEL: &str = "gluesync.molo17.com/pre-pull";

impl Default for SelfUpdateSpec {
    fn default() -> Self {
        SelfUpdateSpec { enabled: true }
    }
}
