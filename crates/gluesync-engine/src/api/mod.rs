//! The `GluesyncPlatform` custom resource, and the labels and annotations GKO reads.
//!
//! The spec is what users (or the Core Hub UI, through GKO) ask for; the status is GKO's only memory: an
//! update in flight is carried entirely in `status.update`, so a restarted GKO carries it on.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod ids;
mod problem;
mod reason;
mod request;
pub mod version;

pub use ids::{PipelineId, PipelineList};
pub use problem::Problem;
pub use reason::Reason;
pub use request::UiRequest;

/// API group of the custom resource.
pub const GROUP: &str = "gluesync.molo17.com";
/// Field manager of every write GKO makes.
pub const FIELD_MANAGER: &str = "gluesync-operator";
/// Label that marks the workloads GKO manages; its value is the component type.
pub const TYPE_LABEL: &str = "com.molo17.conductor.type";
/// Workload annotation naming the container whose image GKO changes (default: the first).
pub const CONTAINER_ANNOTATION: &str = "gluesync.molo17.com/container";
/// Annotation on the GluesyncPlatform: a new value asks for a catalog check at once.
pub const CHECK_NOW_ANNOTATION: &str = "gluesync.molo17.com/check-now";
/// Annotation on the GluesyncPlatform that GKO writes with an update request from the Core Hub UI:
/// `{"id": <requestID>, "channel": <release channel>}`. It applies to the update of that `spec.requestID`.
pub const REQUEST_ANNOTATION: &str = "gluesync.molo17.com/request";
/// Finalizer on the GluesyncPlatform while GKO may have paused pipelines or changed images that an update
/// has not settled: deleting the resource first resumes them.
pub const FINALIZER: &str = "gluesync.molo17.com/pipelines";
/// Annotation on GKO's own Deployment while it updates itself.
pub const SELF_UPDATE_ANNOTATION: &str = "gluesync.molo17.com/self-update";

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

/// What runs, what GKO is doing, and what it did.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GluesyncPlatformStatus {
    /// Summary of the install, see the product docs' Phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// When the maintenance window an update waits for opens (only while one waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Time>,
    /// Core Hub version that runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Latest Core Hub version on the release channel; empty for an offline install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<String>,
    /// Latest word of GKO on this install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The update that runs, if any: everything GKO needs to carry it on after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<UpdateStatus>,
    /// Pipelines the update has put into maintenance mode and not yet resumed. A pipeline is
    /// recorded here before GKO asks Core Hub to pause it.
    #[serde(default, skip_serializing_if = "PipelineList::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub paused_pipelines: PipelineList,
    /// Pipelines whose maintenance request may still land after the drain gave up; GKO takes any of
    /// them that shows up in maintenance mode out again until `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_maintenance: Option<LateMaintenance>,
    /// The disaster-recovery setup as GKO has reached it (none: no pair set up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaster_recovery: Option<DisasterRecoveryStatus>,
    /// GKO's update of its own Deployment while it runs (after the update that scheduled it). Its phase is
    /// mirrored in the Deployment's `gluesync.molo17.com/self-update` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_update: Option<SelfUpdate>,
    /// Outcome of the last update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<Attempt>,
    /// The last updates, newest first, at most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    #[schemars(length(max = 10))]
    pub history: Vec<HistoryEntry>,
    /// The workloads GKO manages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub components: Vec<ComponentStatus>,
    /// Version catalog checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<CatalogStatus>,
    /// The pipeline lists too long for the status (when the ids of all lists together pass 32 KiB, the
    /// longest, until the rest fits): each keeps here the first ids that fit in 2 KiB, and the complete
    /// list is in ConfigMaps owned by this GluesyncPlatform, labelled
    /// `gluesync.molo17.com/spilled-list`. By list: `pausedPipelines`, `lastAttempt.resumedPipelines`...
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spilled_lists: BTreeMap<String, SpilledList>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling` and `Stalled`, read by kstatus, Flux, Helm and Argo CD.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// A pipeline list kept in ConfigMaps because it is too long for the status.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpilledList {
    /// How many ids the complete list has.
    pub count: i64,
    /// Digest of the complete list, also on each of its ConfigMaps.
    pub digest: String,
    /// How many ConfigMaps hold it (`<platform>-<list>-<n>`).
    pub config_maps: i64,
}

/// Summary of the install.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Core Hub runs the latest version on the channel, or no newer version is known.
    Current,
    /// A newer Core Hub version is available on the channel.
    UpdateAvailable,
    /// An update is running.
    Updating,
    /// The last update finished, but a module was rolled back or some pipelines were not resumed.
    Degraded,
    /// The last update failed and Core Hub was rolled back.
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Current => "Current",
            Phase::UpdateAvailable => "UpdateAvailable",
            Phase::Updating => "Updating",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
        }
    }
}

/// The update that runs.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStatus {
    /// The step that runs (`step`), with what it needs to carry on: when it began and its deadline.
    #[serde(flatten)]
    pub step: Step,
    /// Core Hub version asked for; empty for an update of modules only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Core Hub version when the update started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The `spec.requestID` the update answers.
    #[serde(rename = "requestID", default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// A new `spec.requestID` started this update: unpinned modules take the latest on the channel.
    #[serde(default)]
    pub new_request: bool,
    /// Release channel the versions come from: the request's (from the Core Hub UI), else the spec's.
    #[serde(default)]
    pub channel: ReleaseChannel,
    /// Who asked for this update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<RequestedBy>,
    /// The `metadata.generation` the update was started for.
    pub generation: i64,
    pub started_at: Time,
    /// Every managed component with its image before the update and the image it is taken to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<PlannedComponent>,
    /// Pipelines taken out of maintenance mode so far.
    #[serde(default, skip_serializing_if = "PipelineList::is_empty")]
    pub resumed_pipelines: PipelineList,
    /// The pre-pull's pods (step `PrePull`): each one's name, node and image, written before GKO creates
    /// it. The chart's admission policy lets GKO's ServiceAccount create a pre-pull pod only as listed
    /// here (see docs/security.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_pulls: Vec<PrePullEntry>,
    /// Under `approval: manual`, the value of the `gluesync.molo17.com/approve` annotation that approves
    /// this update: its `requestID` when this plan brought it, else `generation-<N>`, then `-` and ten hex
    /// digits drawn when the plan was made (`generation-4-3f9a1c2be0`): every plan needs its own approval,
    /// and an earlier plan's annotation approves nothing.
    #[serde(
        rename = "approvalID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub approval_id: Option<String>,
    /// When GKO read the approval (the annotation carrying `approvalID`): the event `UpdateApproved` is
    /// recorded then, even when the update goes on to wait for a maintenance window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,
    /// The steps that ended, in the order they ran, with how long each took.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepTime>,
    /// How the update is going to end, once that is known before the end (Refused, Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The phase before the update, which a Refused update leaves as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_phase: Option<Phase>,
}

/// Who asked for an update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RequestedBy {
    /// The Core Hub user, when the update came from the Core Hub UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// That user's Core Hub role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `ui` (the Conductor API) or `spec` (a change of the resource: kubectl, Git).
    pub via: RequestVia,
}

/// How an update was asked for.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RequestVia {
    Ui,
    Spec,
}

/// An update's result, known before its end, and why.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub result: UpdateResult,
    pub message: String,
}

/// The step of an update, with its own data. Serialized flat into `status.update`: `step` names it,
/// `since` is when it began, `deadline` when it gives up (steps whose components carry their own
/// deadlines have none).
///
/// Its variants' names, without their data, are [`UpdateStep`] (generated from this enum, in order).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, strum::EnumDiscriminants)]
#[strum_discriminants(
    name(UpdateStep),
    derive(
        PartialOrd,
        Ord,
        Hash,
        strum::VariantNames,
        Serialize,
        Deserialize,
        JsonSchema
    )
)]
#[serde(tag = "step")]
pub enum Step {
    /// Checking the request; waits for the catalog's answer until `deadline`.
    Preflight { since: Time, deadline: Time },
    /// Recording the image of every component.
    Snapshot { since: Time },
    /// Pulling the new Core Hub and agent images on the nodes that run their pods, until `deadline`
    /// (`prePull.timeoutSeconds`), then Refused; nothing paused.
    PrePull { since: Time, deadline: Time },
    /// Nothing paused, nothing changed: waiting for the approval (until `deadline`, then Refused) or for
    /// a maintenance window (no deadline).
    Waiting {
        since: Time,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<Time>,
    },
    /// Putting the running pipelines into maintenance mode, until `deadline` (drainTimeoutSeconds), with
    /// the pipelines it asked so far (`askedPipelines`, see [`ASKED_PIPELINES`]): gone with the step.
    Drain {
        since: Time,
        deadline: Time,
        /// Written whole from its first status on, even empty (`[]`): a Drain without it was written by a
        /// release that kept no such record (0.3.0), and its ledger's pipelines count as asked.
        #[serde(
            rename = "askedPipelines",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        asked_pipelines: Option<PipelineList>,
    },
    /// Changing Core Hub and the agents, then their stability check, until `deadline`.
    CoreHub { since: Time, deadline: Time },
    /// Putting Core Hub back on its previous image, until `deadline`.
    CoreHubRollback { since: Time, deadline: Time },
    /// Taking the paused pipelines out of maintenance mode; at `deadline` the update goes on and GKO
    /// keeps resuming the rest between updates.
    Resume { since: Time, deadline: Time },
    /// One module at a time, each with its own stability deadline.
    Modules { since: Time },
    /// Recording the outcome.
    Finish { since: Time },
}

impl Step {
    /// Which step this is.
    pub fn name(&self) -> UpdateStep {
        self.into()
    }

    /// The pipelines Drain asked so far (none in another step).
    pub fn asked_pipelines(&self) -> Option<&PipelineList> {
        match self {
            Step::Drain {
                asked_pipelines, ..
            } => asked_pipelines.as_ref(),
            _ => None,
        }
    }

    pub fn asked_pipelines_mut(&mut self) -> Option<&mut PipelineList> {
        match self {
            Step::Drain {
                asked_pipelines, ..
            } => asked_pipelines.as_mut(),
            _ => None,
        }
    }

    /// When the step began.
    pub fn since(&self) -> &Time {
        match self {
            Step::Preflight { since, .. }
            | Step::Snapshot { since }
            | Step::PrePull { since, .. }
            | Step::Waiting { since, .. }
            | Step::Drain { since, .. }
            | Step::CoreHub { since, .. }
            | Step::CoreHubRollback { since, .. }
            | Step::Resume { since, .. }
            | Step::Modules { since }
            | Step::Finish { since } => since,
        }
    }

    /// When the step gives up, for the steps that have one deadline.
    pub fn deadline(&self) -> Option<&Time> {
        match self {
            Step::Preflight { deadline, .. }
            | Step::PrePull { deadline, .. }
            | Step::Drain { deadline, .. }
            | Step::CoreHub { deadline, .. }
            | Step::CoreHubRollback { deadline, .. }
            | Step::Resume { deadline, .. } => Some(deadline),
            Step::Waiting { deadline, .. } => deadline.as_ref(),
            _ => None,
        }
    }
}

/// `status.update` is an object whose `step` names the variant; the step's fields sit beside it.
/// What `status.update.askedPipelines` (Drain's) means.
pub const ASKED_PIPELINES: &str = "Pipelines this update asked to enter maintenance mode, each recorded \
    before its request was sent (Drain only). A GKO that takes over asks none of them again, except once \
    each one Core Hub still lists running 15 s after it took over (the GKO before it may have stopped \
    before sending).";

impl JsonSchema for Step {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Step".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        use strum::VariantNames;
        let (last, first) = UpdateStep::VARIANTS
            .split_last()
            .expect("an update has steps");
        let steps = format!("The step that runs: {} or {last}.", first.join(", "));
        schemars::json_schema!({
            "type": "object",
            "required": ["step"],
            "properties": {
                "step": {
                    "description": steps,
                    "type": "string",
                    "enum": UpdateStep::VARIANTS,
                },
                "since": {"description": "When the step began.", "type": "string", "format": "date-time"},
                "deadline": {"description": "When the step gives up.", "type": "string", "format": "date-time"},
                "askedPipelines": {"description": ASKED_PIPELINES, "type": "array", "items": {"type": "string"}},
            },
        })
    }
}

/// Pipelines whose maintenance request may still land late: GKO asked them to enter maintenance mode
/// and had not seen them in it when the drain gave up. Until `until`, one that shows up in maintenance
/// mode is taken out again.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LateMaintenance {
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub pipelines: PipelineList,
    pub until: Time,
}

/// One pod of the pre-pull: the image it pulls on its node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PrePullEntry {
    /// The pod's name, `<platform>-pre-pull-<digest of node and image>`.
    pub pod: String,
    pub node: String,
    pub image: String,
}

/// One component in an update plan.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlannedComponent {
    pub name: String,
    #[serde(rename = "type")]
    pub component_type: ComponentType,
    pub kind: WorkloadKind,
    /// Container whose image GKO changes.
    pub container: String,
    /// Image before the update (the snapshot).
    pub from_image: String,
    /// Image the update takes it to; empty when it stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_image: Option<String>,
    /// Where this component is in the update.
    pub state: ComponentState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the new image (or, rolling back, the old one) was written; the stability check counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patched_at: Option<Time>,
    /// The stability window, once every replica runs the image and is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<StableWindow>,
}

/// A component ready on its image since `since`; a container restart after that fails the window.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StableWindow {
    pub since: Time,
    /// Restart count of each pod when the window began: only restarts inside the window count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub restarts: BTreeMap<String, i32>,
}

/// Where a component is in an update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComponentState {
    Pending,
    Patched,
    Updated,
    RollingBack,
    RolledBack,
    Failed,
    Skipped,
    Scheduled,
}

/// Kind of a managed workload.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum WorkloadKind {
    StatefulSet,
    Deployment,
}

/// Value of the `com.molo17.conductor.type` label.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentType {
    CoreHub,
    Agent,
    Module,
    ThirdParty,
    Operator,
}

impl ComponentType {
    pub fn from_label(value: &str) -> Option<Self> {
        match value {
            "core-hub" => Some(ComponentType::CoreHub),
            "agent" => Some(ComponentType::Agent),
            "module" => Some(ComponentType::Module),
            "third-party" => Some(ComponentType::ThirdParty),
            "operator" => Some(ComponentType::Operator),
            _ => None,
        }
    }

    pub fn as_label(self) -> &'static str {
        match self {
            ComponentType::CoreHub => "core-hub",
            ComponentType::Agent => "agent",
            ComponentType::Module => "module",
            ComponentType::ThirdParty => "third-party",
            ComponentType::Operator => "operator",
        }
    }
}

/// Result of an update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateResult {
    Succeeded,
    Degraded,
    Failed,
    Refused,
}

/// GKO's update of its own Deployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SelfUpdate {
    pub phase: SelfUpdatePhase,
    /// GKO's Deployment.
    pub name: String,
    /// The container of GKO's Deployment whose image changes.
    pub container: String,
    /// The image GKO ran before.
    pub from_image: String,
    /// The image GKO goes to.
    pub to_image: String,
    /// When the phase began.
    pub since: Time,
    /// RollingOut: the new GKO's Deployment ready on its image since then (its stability window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<StableWindow>,
}

/// The phase of GKO's own update, as the Deployment's annotation shows it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelfUpdatePhase {
    /// Decided; GKO's image is not changed yet.
    Scheduled,
    /// GKO's image is changed; the old GKO watches the new pod come up.
    RollingOut,
    /// The new pod did not come up in time; the old GKO put its image back.
    RollingBack,
}

impl SelfUpdatePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            SelfUpdatePhase::Scheduled => "Scheduled",
            SelfUpdatePhase::RollingOut => "RollingOut",
            SelfUpdatePhase::RollingBack => "RollingBack",
        }
    }
}

/// Result of one component in an update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ComponentResultStatus {
    Ok,
    Error,
    RolledBack,
    Skipped,
    Scheduled,
}

/// Outcome of the last update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// Core Hub version asked for; empty for an update of modules only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(rename = "requestID", default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Who asked for the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<RequestedBy>,
    /// The `metadata.generation` the update ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub result: UpdateResult,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    pub finished_at: Time,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ComponentResult>,
    #[serde(default, skip_serializing_if = "PipelineList::is_empty")]
    pub paused_pipelines: PipelineList,
    #[serde(default, skip_serializing_if = "PipelineList::is_empty")]
    pub resumed_pipelines: PipelineList,
}

/// Result of one component in an update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentResult {
    pub name: String,
    pub status: ComponentResultStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One past update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Core Hub version before the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Core Hub version after; empty for an update of modules only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub result: UpdateResult,
    pub message: String,
    #[serde(rename = "requestID", default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Who asked for the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<RequestedBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    pub finished_at: Time,
    /// The generation of the spec the update planned (an update runs once per generation: two alike
    /// entries of one second are two generations' updates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The image of each component before the update, by component name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub previous_images: BTreeMap<String, String>,
    /// Its steps, in the order they ran, with how long each took: what the estimates of the next
    /// update's time are made of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepTime>,
}

/// How long one step of an update took.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepTime {
    pub step: UpdateStep,
    /// From its start to the start of the step after it, in whole seconds (the status keeps its times
    /// to the second).
    pub seconds: i64,
}

/// One managed workload.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// The workload's name.
    pub name: String,
    #[serde(rename = "type")]
    pub component_type: ComponentType,
    pub kind: WorkloadKind,
    /// Image of the managed container.
    pub image: String,
    /// The image tag cut at the first `-`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Latest version of its image on the release channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<String>,
    /// Every replica runs the workload's current spec and is ready.
    pub ready: bool,
}

/// Version catalog checks.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogStatus {
    /// When the catalog last answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Time>,
    /// When the last check was made, answered or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_at: Option<Time>,
    /// The `gluesync.molo17.com/check-now` value last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_check_now: Option<String>,
    /// Why the last check failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn spec_defaults_match_the_docs() {
        let spec: GluesyncPlatformSpec =
            serde_json::from_value(serde_json::json!({"version": "2.3.2.1"})).unwrap();
        assert_eq!(spec.update_policy, UpdatePolicy::Ui);
        assert_eq!(spec.release_channel, ReleaseChannel::Ga);
        assert_eq!(spec.check_interval_minutes, 360);
        assert_eq!(spec.drain_timeout_seconds, 300);
        assert_eq!(spec.stability_window_seconds, 60);
        assert_eq!(spec.stability_timeout_seconds, 600);
        assert!(spec.self_update.enabled);
        assert!(!spec.catalog.offline);
    }

    #[test]
    fn printer_columns_are_the_documented_ones() {
        let crd = GluesyncPlatform::crd();
        let columns: Vec<_> = crd.spec.versions[0]
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.name.to_uppercase(), c.priority.unwrap_or(0)))
            .collect();
        // The product docs' columns by default; the step and the message with `-o wide` only.
        let default: Vec<_> = columns
            .iter()
            .filter(|c| c.1 == 0)
            .map(|c| c.0.as_str())
            .collect();
        assert_eq!(default, ["PHASE", "VERSION", "DESIRED", "AVAILABLE", "AGE"]);
        let wide: Vec<_> = columns
            .iter()
            .filter(|c| c.1 == 1)
            .map(|c| c.0.as_str())
            .collect();
        assert_eq!(wide, ["STEP", "MESSAGE"]);
    }

    #[test]
    fn wire_names_are_the_documented_ones() {
        let result = ComponentResult {
            name: "x".into(),
            status: ComponentResultStatus::RolledBack,
            from: None,
            to: None,
            message: None,
        };
        assert_eq!(
            serde_json::to_value(&result).unwrap()["status"],
            "ROLLED_BACK"
        );
        assert_eq!(
            serde_json::to_value(ComponentType::ThirdParty).unwrap(),
            "third-party"
        );
        let spec: GluesyncPlatformSpec = serde_json::from_value(
            serde_json::json!({"version": "1", "requestID": "r1", "updatePolicy": "gitops"}),
        )
        .unwrap();
        assert_eq!(spec.request_id.as_deref(), Some("r1"));
        assert_eq!(spec.update_policy, UpdatePolicy::Gitops);
    }

    /// The names GKO prints, labels with and builds condition reasons from are the wire names the
    /// status and the spec carry, and a label names its component type back.
    #[test]
    fn the_names_gko_says_are_the_wire_names() {
        fn wire(v: impl Serialize) -> String {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        }
        /// A value's name as GKO says it, beside its name on the wire.
        fn named<T: Serialize + Copy>(v: T, name: fn(T) -> &'static str) -> (&'static str, String) {
            (name(v), wire(v))
        }
        use DisasterRecoveryPhase as Dr;
        let said: Vec<(&str, String)> = [
            named(ReleaseChannel::Ga, ReleaseChannel::as_str),
            named(ReleaseChannel::Beta, ReleaseChannel::as_str),
            named(ReleaseChannel::Alpha, ReleaseChannel::as_str),
            named(Phase::Current, Phase::as_str),
            named(Phase::UpdateAvailable, Phase::as_str),
            named(Phase::Updating, Phase::as_str),
            named(Phase::Degraded, Phase::as_str),
            named(Phase::Failed, Phase::as_str),
            named(SelfUpdatePhase::Scheduled, SelfUpdatePhase::as_str),
            named(SelfUpdatePhase::RollingOut, SelfUpdatePhase::as_str),
            named(SelfUpdatePhase::RollingBack, SelfUpdatePhase::as_str),
            named(DisasterRecoveryRole::Primary, DisasterRecoveryRole::as_str),
            named(
                DisasterRecoveryRole::Secondary,
                DisasterRecoveryRole::as_str,
            ),
            named(ServiceType::LoadBalancer, ServiceType::as_str),
            named(ServiceType::NodePort, ServiceType::as_str),
            named(ServiceType::ClusterIP, ServiceType::as_str),
            named(Dr::SettingUp, Dr::as_str),
            named(Dr::Active, Dr::as_str),
            named(Dr::RollingBack, Dr::as_str),
            named(Dr::Failed, Dr::as_str),
            named(Dr::TearingDown, Dr::as_str),
        ]
        .into();
        for (name, on_the_wire) in &said {
            assert_eq!(name, on_the_wire);
        }
        let names: Vec<&str> = said.iter().map(|s| s.0).collect();
        assert_eq!(
            names,
            [
                "ga",
                "beta",
                "alpha",
                "Current",
                "UpdateAvailable",
                "Updating",
                "Degraded",
                "Failed",
                "Scheduled",
                "RollingOut",
                "RollingBack",
                "primary",
                "secondary",
                "LoadBalancer",
                "NodePort",
                "ClusterIP",
                "SettingUp",
                "Active",
                "RollingBack",
                "Failed",
                "TearingDown"
            ]
        );
        // The component types, by their `com.molo17.conductor.type` label.
        for (t, label) in [
            (ComponentType::CoreHub, "core-hub"),
            (ComponentType::Agent, "agent"),
            (ComponentType::Module, "module"),
            (ComponentType::ThirdParty, "third-party"),
            (ComponentType::Operator, "operator"),
        ] {
            assert_eq!((t.as_label(), wire(t)), (label, label.to_string()));
            assert_eq!(ComponentType::from_label(label), Some(t));
        }
        assert_eq!(ComponentType::from_label("database"), None);
    }

    /// Each step says which it is, when it began and the deadline it has (Waiting's only while an
    /// approval is awaited; none for Snapshot, Modules and Finish); Drain alone carries the pipelines
    /// it asked.
    #[test]
    fn a_step_says_its_name_start_deadline_and_asked_pipelines() {
        let t = |s: i64| Time(jiff::Timestamp::from_second(1_800_000_000 + s).unwrap());
        let (since, deadline) = (t(1), t(2));
        let asked: PipelineList = ["p1", "p2"].into_iter().collect();
        let (s, d) = (|| since.clone(), || deadline.clone());
        let steps = [
            (
                Step::Preflight {
                    since: s(),
                    deadline: d(),
                },
                UpdateStep::Preflight,
                true,
            ),
            (Step::Snapshot { since: s() }, UpdateStep::Snapshot, false),
            (
                Step::PrePull {
                    since: s(),
                    deadline: d(),
                },
                UpdateStep::PrePull,
                true,
            ),
            (
                Step::Waiting {
                    since: s(),
                    deadline: Some(d()),
                },
                UpdateStep::Waiting,
                true,
            ),
            (
                Step::Waiting {
                    since: s(),
                    deadline: None,
                },
                UpdateStep::Waiting,
                false,
            ),
            (
                Step::Drain {
                    since: s(),
                    deadline: d(),
                    asked_pipelines: Some(asked.clone()),
                },
                UpdateStep::Drain,
                true,
            ),
            (
                Step::CoreHub {
                    since: s(),
                    deadline: d(),
                },
                UpdateStep::CoreHub,
                true,
            ),
            (
                Step::CoreHubRollback {
                    since: s(),
                    deadline: d(),
                },
                UpdateStep::CoreHubRollback,
                true,
            ),
            (
                Step::Resume {
                    since: s(),
                    deadline: d(),
                },
                UpdateStep::Resume,
                true,
            ),
            (Step::Modules { since: s() }, UpdateStep::Modules, false),
            (Step::Finish { since: s() }, UpdateStep::Finish, false),
        ];
        for (mut step, name, has_deadline) in steps {
            assert_eq!(step.name(), name);
            assert_eq!(step.since(), &since, "{name:?}");
            assert_eq!(
                step.deadline(),
                has_deadline.then_some(&deadline),
                "{name:?}"
            );
            let drain = name == UpdateStep::Drain;
            assert_eq!(step.asked_pipelines(), drain.then_some(&asked), "{name:?}");
            let list = step.asked_pipelines_mut();
            assert_eq!(list.is_some(), drain, "{name:?}");
            list.into_iter().for_each(|l| l.push("p3"));
            let now: Option<Vec<&str>> = step
                .asked_pipelines()
                .map(|l| l.iter().map(|p| p.as_str()).collect());
            assert_eq!(now, drain.then(|| vec!["p1", "p2", "p3"]), "{name:?}");
        }
        // A Drain written by a release that kept no such record carries none.
        let old = Step::Drain {
            since: s(),
            deadline: d(),
            asked_pipelines: None,
        };
        assert_eq!(old.asked_pipelines(), None);
    }
}

/// A host name or an IP address: what a peer address may be.
const HOST_PATTERN: &str = r"^[A-Za-z0-9]([A-Za-z0-9.:-]{0,251}[A-Za-z0-9])?$";

/// The Secret a disaster-recovery setup made from the Core Hub UI writes, by default: `<platform>-disaster-recovery`.
pub const DR_SECRET_SUFFIX: &str = "-disaster-recovery";

/// The key of the pair's shared secret in the disaster-recovery Secret.
pub const DR_SECRET_KEY: &str = "sharedSecret";
/// The label on what a platform's disaster-recovery setup made or wrote: the Service, and the pair's
/// Secret while it holds the setup's shared secret. Its value is the platform's name.
pub const PLATFORM_LABEL: &str = "gluesync.molo17.com/platform";

/// The pod-template annotation that says which disaster-recovery setup a workload carries.
pub const DR_ANNOTATION: &str = "gluesync.molo17.com/disaster-recovery";

/// This install's part in a disaster-recovery pair.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.replicationPort != self.controlPort")
        .message("replicationPort and controlPort must differ")
        .field_path(".controlPort")
)]
pub struct DisasterRecoverySpec {
    /// `primary` runs the pipelines; `secondary` follows it and takes over when it is lost.
    pub role: DisasterRecoveryRole,
    /// Host name or IP address at which this site reaches the other site's ports.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST_PATTERN))]
    pub peer_address: String,
    /// TCP port of the pair's replication traffic, on both sites.
    #[serde(default = "default_replication_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub replication_port: i32,
    /// TCP port of the pair's control traffic (health, takeover), on both sites.
    #[serde(default = "default_control_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub control_port: i32,
    /// Secret holding the pair's shared secret under `sharedSecret` (default
    /// `<platform>-disaster-recovery`, the one a setup from the Core Hub UI writes). Must be one of the
    /// Secrets GKO's installation allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// A new value rolls the setup out again, for example after the Secret's material changed. The
    /// Core Hub UI sets a new one with each setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub revision: Option<String>,
    /// The Service that publishes the two ports to the other site.
    #[serde(default)]
    pub service: DisasterRecoveryService,
}

fn default_replication_port() -> i32 {
    1718
}
fn default_control_port() -> i32 {
    1719
}

/// A site's role in a disaster-recovery pair.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DisasterRecoveryRole {
    Primary,
    Secondary,
}

impl DisasterRecoveryRole {
    pub fn as_str(self) -> &'static str {
        match self {
            DisasterRecoveryRole::Primary => "primary",
            DisasterRecoveryRole::Secondary => "secondary",
        }
    }
}

/// How the disaster-recovery Service is published.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisasterRecoveryService {
    /// `LoadBalancer` (default: a cloud load balancer carries the ports between clusters), `NodePort`,
    /// or `ClusterIP` (when something else, a mesh or a VPN, connects the sites).
    #[serde(rename = "type", default)]
    pub type_: ServiceType,
    /// Annotations of the Service (a cloud's load-balancer settings, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The load balancer's class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,
    /// Client ranges the load balancer lets in (CIDRs); empty: the cloud's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub load_balancer_source_ranges: Vec<String>,
    /// `Cluster` or `Local`, for a LoadBalancer or NodePort Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'Cluster' || self == 'Local'")
        .message("externalTrafficPolicy is Cluster or Local"))]
    pub external_traffic_policy: Option<String>,
    /// Node port of the replication port (NodePort and LoadBalancer; default: one the cluster picks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub replication_node_port: Option<i32>,
    /// Node port of the control port (NodePort and LoadBalancer; default: one the cluster picks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub control_node_port: Option<i32>,
}

impl Default for DisasterRecoveryService {
    fn default() -> Self {
        DisasterRecoveryService {
            type_: ServiceType::LoadBalancer,
            annotations: BTreeMap::new(),
            load_balancer_class: None,
            load_balancer_source_ranges: vec![],
            external_traffic_policy: None,
            replication_node_port: None,
            control_node_port: None,
        }
    }
}

/// The type of the disaster-recovery Service.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    #[default]
    LoadBalancer,
    NodePort,
    ClusterIP,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::LoadBalancer => "LoadBalancer",
            ServiceType::NodePort => "NodePort",
            ServiceType::ClusterIP => "ClusterIP",
        }
    }
}

/// What a disaster-recovery setup makes: the Service, and the shared secret in the pair's Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Made {
    Service,
    Secret,
}

/// The disaster-recovery setup as GKO has reached it.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisasterRecoveryStatus {
    pub phase: DisasterRecoveryPhase,
    /// The role being set up or reached.
    pub role: DisasterRecoveryRole,
    pub peer_address: String,
    /// Which setup the workloads carry or go to: the value of their pod templates'
    /// `gluesync.molo17.com/disaster-recovery` annotation (role, peer, ports, Secret and revision).
    pub setup: String,
    /// The Secret the workloads mount.
    pub secret_name: String,
    /// The Service that publishes the pair's ports, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// A digest of the Service settings last written to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_settings: Option<String>,
    /// The Service's selector: Core Hub's pods' (its workload's `spec.selector.matchLabels`), written before
    /// the Service. The chart's admission policy lets GKO's ServiceAccount give the Service no other.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_selector: BTreeMap<String, String>,
    /// What happens now, or why the setup failed.
    pub message: String,
    /// Why the setup failed, once it has (RollingBack, Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// When the phase began.
    pub since: Time,
    /// The workloads the setup changes, in order (Core Hub, then Chronos).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub components: Vec<DisasterRecoveryComponent>,
}

/// Where a disaster-recovery setup stands.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisasterRecoveryPhase {
    /// The workloads are being changed, one at a time, each through the stability check.
    SettingUp,
    /// Every workload carries the setup and passed its stability check; the Service publishes the ports.
    Active,
    /// A workload did not come up with the setup: every change is being put back.
    RollingBack,
    /// Everything put back after a failure; stays until the spec's setup changes.
    Failed,
    /// The pair is being taken down: the workloads go back to what they were, the Service goes and the shared secret GKO wrote is taken out of the pair's Secret.
    TearingDown,
}

impl DisasterRecoveryPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            DisasterRecoveryPhase::SettingUp => "SettingUp",
            DisasterRecoveryPhase::Active => "Active",
            DisasterRecoveryPhase::RollingBack => "RollingBack",
            DisasterRecoveryPhase::Failed => "Failed",
            DisasterRecoveryPhase::TearingDown => "TearingDown",
        }
    }
}

/// One workload a disaster-recovery setup changes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisasterRecoveryComponent {
    pub name: String,
    pub kind: WorkloadKind,
    /// The container that gets the environment, the ports and the Secret.
    pub container: String,
    /// The pod-template fields the setup changes, as they were before it (JSON): what a teardown or a
    /// rollback puts back.
    pub original: String,
    pub state: DisasterRecoveryComponentState,
    /// When GKO last changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<Time>,
    /// Ready on the change since then (its stability window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<StableWindow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where one workload of a disaster-recovery setup stands.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisasterRecoveryComponentState {
    /// Not changed yet.
    Pending,
    /// Changed; waiting for the stability check.
    RollingOut,
    /// Carries the setup and passed the stability check.
    Ready,
    /// Being put back as it was.
    Restoring,
    /// Back as it was.
    Restored,
}
