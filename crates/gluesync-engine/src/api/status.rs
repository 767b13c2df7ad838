//! The status: GKO's only memory. An update in flight is carried entirely in `status.update`, so a
//! restarted GKO carries it on; what ran before is in `history`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

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
