//! The update, as a pure state machine.
//!
//! [`decide`] takes the GluesyncPlatform (its spec, and its status, GKO's only memory) and what the cluster,
//! Core Hub and the catalog look like now, and returns the next status, the actions to take once that
//! status is written, the background work wanted of Core Hub and the catalog, the events to record and
//! when to look again. It does no I/O. Every action is an "ensure" (an image that should be X, a
//! finalizer that should be there), so doing one again after a restart does no harm; what must not be
//! forgotten (a pipeline GKO is about to pause) is in the status before the work that needs it.
//!
//! The step that runs is a [`Step`] value that carries when it began and its deadline. The pipelines GKO
//! paused are a ledger (`status.pausedPipelines`) that outlives the update: whatever ends the update, GKO
//! keeps asking Core Hub to resume them until Core Hub lists them running (see [`pipelines`]).

pub mod disaster;
pub mod estimate;
mod finish;
#[cfg(any(test, feature = "test-hooks"))]
pub mod fixtures;
pub mod gate;
#[cfg(test)]
mod model;
mod mutants;
mod pipelines;
mod plan;
pub mod prepull;
pub mod preview;
mod rollout;
mod selfupdate;
#[cfg(test)]
mod tests;
mod windows;

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::{
    api::{
        ComponentType, FINALIZER, GluesyncPlatform, GluesyncPlatformStatus, Outcome, Phase,
        ReleaseChannel, Step, UpdateResult, UpdateStatus, UpdateStep, WorkloadKind,
    },
    update::catalog::{Answer, Check},
    update::corehub::{Report, Target, Work},
    update::observed::Workload,
    update::status::{READY, RECONCILING, STALLED},
};

// The deliberate bugs and the fault point, for the operator's code that has a bug of its own to switch
// on (the Lease, the pull policy, the Core Hub worker, the Conductor API under GitOps).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use mutants::fault_point;
#[cfg(all(not(test), feature = "test-hooks"))]
#[doc(hidden)]
pub use mutants::process_mutant;
#[doc(hidden)]
pub use mutants::{Mutant, mutated};
pub mod access;
pub mod catalog;
pub mod corehub;
pub mod observed;
pub mod status;
pub mod workloads;
pub use plan::target_image;

/// How many updates `status.history` keeps.
pub const HISTORY_LIMIT: usize = 10;

/// Latest versions of one image on the release channel, from the catalog.
pub type Catalog = BTreeMap<String, String>;

/// What GKO sees when it decides.
pub struct Observed<'a> {
    pub now: Time,
    pub workloads: &'a [Workload],
    /// What the background Core Hub worker has seen and done for this platform.
    pub corehub: &'a Report,
    /// The catalog's latest answer for this platform, if any.
    pub catalog: Option<&'a Answer>,
    /// Where Core Hub is, when GKO can tell (the spec's URL, else the Core Hub workload's Service) and
    /// may call it.
    pub target: Option<Target>,
    /// Why the spec asks for a Secret or a Core Hub URL this GKO may not use, if it does.
    pub access_problem: Option<crate::api::Problem>,
    /// The image this GKO runs, read from its own pod (`None` when it does not know its pod).
    pub me: Option<String>,
    /// The disaster-recovery Secret and Service, when a setup is wanted or in place.
    pub dr: disaster::DrObjects,
    /// The pre-pull pods of the namespace, and those the API server refused to create.
    pub pre_pulls: &'a [observed::PrePullPod],
}

/// Something to do once the new status is written.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    SetImage {
        kind: WorkloadKind,
        name: String,
        container: String,
        image: String,
    },
    DeletePod(String),
    /// Delete a pre-pull pod (see [`prepull`]). No status needs to remember it: a pod left behind is
    /// deleted by a later decision (PrePull's, when its plan does not want it; any once the pipelines
    /// run again).
    DeletePrePull(String),
    /// Create a pod (a pre-pull pod, see [`prepull`]); one that exists already is fine.
    CreatePod(Box<k8s_openapi::api::core::v1::Pod>),
    /// Put GKO's finalizer on the GluesyncPlatform.
    AddFinalizer,
    /// Take GKO's finalizer off: nothing is left to settle (or a deleted platform waited long enough).
    RemoveFinalizer,
    /// GKO's own Deployment: the image of `container` (`None`: left as it is), and the
    /// `gluesync.molo17.com/self-update` annotation (`None`: removed), in one write.
    SelfUpdate {
        name: String,
        container: String,
        image: Option<String>,
        phase: Option<crate::api::SelfUpdatePhase>,
    },
    /// A strategic merge patch of a managed workload's pod template (a disaster-recovery setup, or
    /// putting one back).
    PatchWorkload {
        kind: WorkloadKind,
        name: String,
        patch: serde_json::Value,
    },
    /// Write the disaster-recovery Service.
    ApplyService(Box<k8s_openapi::api::core::v1::Service>),
    /// Remove what a disaster-recovery setup made: delete the Service, empty the pair's Secret.
    RemoveMade(crate::api::Made, String),
}

impl Action {
    /// Must the status be written before this action? Every action but those found again without a
    /// status, and undone when no update wants them: a pre-pull pod deleted (found by its label and
    /// owner) and GKO's finalizer put on (on the platform itself; taken off once nothing is left to
    /// settle). A decision whose actions need no status can pass through unwritten: one that waits
    /// carries them out all the same, one that moves on leaves them to the decisions after it (see the
    /// controller). A pre-pull pod is made only once the status lists it (`status.update.prePulls`):
    /// the admission policy lets GKO create no other.
    pub fn needs_status(&self) -> bool {
        !matches!(self, Action::DeletePrePull(_) | Action::AddFinalizer)
    }
}

/// Actions none of which needs a status written first ([`Action::needs_status`]): what a decision that
/// goes unwritten may carry out. Only [`Decision::take_status_free`] makes one, so the rule is the type's.
#[derive(Debug, Default, PartialEq)]
pub struct StatusFree(Vec<Action>);

impl StatusFree {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IntoIterator for StatusFree {
    type Item = Action;
    type IntoIter = std::vec::IntoIter<Action>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// A Kubernetes event to record on the GluesyncPlatform.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub warning: bool,
    pub reason: crate::api::Reason,
    pub message: String,
}

/// What [`decide`] says to do.
#[derive(Debug, PartialEq)]
pub struct Decision {
    pub status: GluesyncPlatformStatus,
    pub actions: Vec<Action>,
    pub events: Vec<Event>,
    /// The work wanted of Core Hub in the background; `None`: none.
    pub corehub: Option<Work>,
    /// The catalog check wanted in the background; `None`: none.
    pub catalog: Option<Check>,
    /// Look again after this long even if nothing changes (a deadline, a stability window).
    pub requeue: Option<Duration>,
    /// The step moved on: decide again at once, from the status just written.
    pub again: bool,
}

impl Decision {
    /// Whether a decision may go unwritten: it acts on nothing a status must remember (a pre-pull pod
    /// deleted, GKO's finalizer put on: see [`Action::needs_status`]), and the work it hands
    /// Core Hub's worker pauses nothing (it lists, or resumes pipelines the written ledger already holds:
    /// asked again after a crash, which does no harm), so a crash before the next write loses nothing the
    /// status must remember.
    pub fn passes_through(&self) -> bool {
        self.actions.iter().all(|a| !a.needs_status())
            && self.corehub.as_ref().is_none_or(|w| w.enter.is_empty())
    }

    /// The actions of a decision that passes through ([`Decision::passes_through`]), taken out of it:
    /// none needs a status, so the operator may carry them out without writing one. `None`, the actions
    /// left in place, for a decision that does not pass through.
    pub fn take_status_free(&mut self) -> Option<StatusFree> {
        self.passes_through()
            .then(|| StatusFree(std::mem::take(&mut self.actions)))
    }

    fn new(status: GluesyncPlatformStatus) -> Decision {
        Decision {
            status,
            actions: vec![],
            events: vec![],
            corehub: None,
            catalog: None,
            requeue: None,
            again: false,
        }
    }

    fn event(&mut self, warning: bool, reason: crate::api::Reason, message: impl Into<String>) {
        self.events.push(Event {
            warning,
            reason,
            message: message.into(),
        });
    }

    fn requeue(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Look again when `deadline` passes.
    fn requeue_at(&mut self, deadline: &Time, now: &Time) {
        let ms = deadline.0.as_millisecond() - now.0.as_millisecond();
        self.requeue(Duration::from_millis(ms.max(0) as u64 + 10));
    }
}

/// The milliseconds from `from` to `to` (0 when `to` is earlier), from the timestamps themselves.
pub(crate) fn millis(from: &Time, to: &Time) -> i64 {
    (to.0.as_millisecond() - from.0.as_millisecond()).max(0)
}

/// `t` rounded up to its next whole second. The API server keeps a status's times to the second, rounded
/// down: a start recorded from `t` itself would come back earlier than it was, and shorten what is
/// measured from it (a stability window by up to a second).
pub(crate) fn up_to_second(t: &Time) -> Time {
    let whole = t.0.as_second();
    let up = if t.0.subsec_nanosecond() > 0 {
        whole + 1
    } else {
        whole
    };
    Time(jiff::Timestamp::from_second(up).unwrap_or(t.0))
}

pub(crate) fn plus(t: &Time, seconds: i64) -> Time {
    Time(
        t.0.checked_add(jiff::SignedDuration::from_secs(seconds))
            .unwrap_or(t.0),
    )
}

/// Look again in `secs` seconds (and a little).
fn requeue_after_secs(d: &mut Decision, secs: i64) {
    d.requeue(Duration::from_millis(secs.max(0) as u64 * 1000 + 10));
}

fn passed(deadline: &Time, now: &Time) -> bool {
    now.0 >= deadline.0
}

/// The step `name`, starting now, with its deadline.
fn step(gsp: &GluesyncPlatform, name: UpdateStep, now: &Time) -> Step {
    let since = now.clone();
    let after = |s: i64| plus(now, s);
    match name {
        UpdateStep::Preflight => Step::Preflight {
            since,
            deadline: after(plan::CATALOG_WAIT_SECONDS),
        },
        UpdateStep::Snapshot => Step::Snapshot { since },
        UpdateStep::PrePull => Step::PrePull {
            since,
            deadline: after(gsp.spec.pre_pull.timeout_seconds),
        },
        UpdateStep::Waiting => gate::waiting_step(gsp, now),
        UpdateStep::Drain => Step::Drain {
            since,
            deadline: after(gsp.spec.drain_timeout_seconds),
            asked_pipelines: Some(crate::api::PipelineList::new()),
        },
        UpdateStep::CoreHub => Step::CoreHub {
            since,
            deadline: after(gsp.spec.stability_timeout_seconds),
        },
        UpdateStep::CoreHubRollback => Step::CoreHubRollback {
            since,
            deadline: after(gsp.spec.stability_timeout_seconds),
        },
        UpdateStep::Resume => Step::Resume {
            since,
            deadline: after(gsp.spec.drain_timeout_seconds),
        },
        UpdateStep::Modules => Step::Modules { since },
        UpdateStep::Finish => Step::Finish { since },
    }
}

/// Moves the update to step `next`, and asks to decide again at once.
fn move_to(
    gsp: &GluesyncPlatform,
    u: &mut UpdateStatus,
    next: UpdateStep,
    now: &Time,
    d: &mut Decision,
) {
    enter(gsp, u, next, now);
    d.again = true;
}

/// The update leaves its step for `next`: the step that ends goes into `status.update.steps` with its
/// time.
fn enter(gsp: &GluesyncPlatform, u: &mut UpdateStatus, next: UpdateStep, now: &Time) {
    u.steps.push(crate::api::StepTime {
        step: u.step.name(),
        seconds: millis(u.step.since(), now) / 1000,
    });
    u.step = step(gsp, next, now);
}

/// Ends the update Refused with `why` (Preflight's and the pre-pull's refusals).
fn refuse(
    gsp: &GluesyncPlatform,
    u: &mut UpdateStatus,
    d: &mut Decision,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    why: String,
) {
    settle_outcome(u, UpdateResult::Refused, why.clone());
    d.status.message = Some(why);
    move_to(gsp, u, UpdateStep::Finish, now, d);
}

/// Sets the outcome the update will end with, unless one is already known.
fn settle_outcome(u: &mut UpdateStatus, result: UpdateResult, message: String) {
    if u.outcome.is_none() {
        u.outcome = Some(Outcome { result, message });
    }
}

/// The next move for this GluesyncPlatform.
pub fn decide(gsp: &GluesyncPlatform, obs: &Observed) -> Decision {
    // A catalog answer not yet taken in goes into the status first, so that the phase reads it.
    let mut taken = None;
    if let Some(answer) = obs.catalog
        && answer.token == crate::update::catalog::due_token(gsp)
        && crate::update::catalog::due(gsp, &obs.now).is_some_and(|d| d.is_zero())
    {
        let mut checked = gsp.clone();
        let mut status = checked.status.clone().unwrap_or_default();
        let failed_before = status.catalog.as_ref().and_then(|c| c.error.clone());
        status.components = status::components(gsp, obs.workloads);
        crate::update::catalog::apply(gsp, &mut status, &answer.result, &answer.at);
        checked.status = Some(status);
        let newly_failed = answer
            .result
            .as_ref()
            .err()
            .filter(|_| failed_before.is_none());
        taken = Some((checked, newly_failed.cloned()));
    }
    let gsp = taken.as_ref().map_or(gsp, |(g, _)| g);
    let mut d = decide_now(gsp, obs);
    if let Some((_, Some(why))) = taken {
        d.event(true, crate::api::Reason::CatalogCheckFailed, why);
    }
    d
}

fn decide_now(gsp: &GluesyncPlatform, obs: &Observed) -> Decision {
    let status = gsp.status.clone().unwrap_or_default();
    let Some(mut u) = status.update.clone() else {
        return idle(gsp, obs);
    };
    let mut d = Decision::new(status);
    if gsp.metadata.deletion_timestamp.is_some() {
        cancel_for_deletion(gsp, obs, &mut u, &mut d);
    }
    let name = u.step.name();
    match name {
        UpdateStep::Preflight => plan::preflight(gsp, obs, &mut u, &mut d),
        UpdateStep::Snapshot => plan::snapshot(gsp, obs, &mut u, &mut d),
        UpdateStep::PrePull => prepull::pre_pull(gsp, obs, &mut u, &mut d),
        UpdateStep::Waiting => gate::waiting(gsp, obs, &mut u, &mut d),
        UpdateStep::Drain => pipelines::drain(gsp, obs, &mut u, &mut d),
        UpdateStep::CoreHub => rollout::core_hub(gsp, obs, &mut u, &mut d),
        UpdateStep::CoreHubRollback => rollout::rollback(gsp, obs, &mut u, &mut d),
        UpdateStep::Resume => pipelines::resume(gsp, obs, &mut u, &mut d),
        UpdateStep::Modules => rollout::modules(gsp, obs, &mut u, &mut d),
        UpdateStep::Finish => {
            let mut d = finish::finish(gsp, obs, u, d);
            prepull::clean(gsp, obs, false, &mut d);
            return d;
        }
    }
    // The pre-pull pods (completed once the drain starts) go once the pipelines run again: while they
    // are paused the cluster does nothing but the update's own work. They stay from the update's start:
    // a decision in PrePull may make them before any status of the update is written, and an update
    // begun again from Preflight (its statuses not written) finds them pulling.
    let pausing = matches!(
        u.step.name(),
        UpdateStep::Preflight
            | UpdateStep::Snapshot
            | UpdateStep::PrePull
            | UpdateStep::Drain
            | UpdateStep::CoreHub
            | UpdateStep::CoreHubRollback
            | UpdateStep::Resume
    );
    prepull::clean(gsp, obs, pausing, &mut d);
    if mutated(Mutant::DrDuringUpdate) {
        disaster::carry_on(gsp, obs, &mut d);
    }
    if matches!(name, UpdateStep::Modules) && !d.again {
        // Leftover pipelines are resumed while the modules roll.
        pipelines::ledger(gsp, obs, &mut d, None);
    }
    // GKO's finalizer goes on with the first decision past Snapshot (the pre-pull's, the wait's or
    // the drain's first), before anything is paused: decisions made in Preflight and Snapshot change
    // nothing. It needs no status: a decision that waits carries it out unwritten (in PrePull with
    // its pods, once their status is written; the drain asks nothing before the finalizer is on).
    // It goes first, before any image changes; in PrePull, which changes nothing, after the pods.
    let planning = matches!(name, UpdateStep::Preflight | UpdateStep::Snapshot);
    if !planning
        && !gsp.finalizers().iter().any(|f| f == FINALIZER)
        && gsp.metadata.deletion_timestamp.is_none()
    {
        let at = if name == UpdateStep::PrePull {
            d.actions.len()
        } else {
            0
        };
        d.actions.insert(at, Action::AddFinalizer);
    }
    mark_updating(gsp, obs, &mut d, u);
    d
}

/// A deleted platform's update stops where it is safe to stop: nothing new is changed, a half-made Core
/// Hub change is put back, and the paused pipelines are resumed; then the update finishes and the
/// finalizer goes. A module being rolled out is left to finish its own rollout.
fn cancel_for_deletion(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let why = "the GluesyncPlatform is being deleted".to_string();
    // The result says what the update did, as for any other: Refused while Core Hub was not changed yet,
    // Failed once its change is put back, Degraded when Core Hub was updated and modules were left.
    let next = match u.step.name() {
        UpdateStep::Preflight
        | UpdateStep::Snapshot
        | UpdateStep::PrePull
        | UpdateStep::Waiting => Some((UpdateStep::Finish, UpdateResult::Refused)),
        UpdateStep::Modules => Some((UpdateStep::Finish, UpdateResult::Degraded)),
        UpdateStep::Drain => {
            // Its requests may still land: they are watched for, as after a drain timeout.
            pipelines::drain_cancelled(gsp, obs, d);
            Some((UpdateStep::Resume, UpdateResult::Refused))
        }
        UpdateStep::CoreHub => Some(
            match rollout::start_core_rollback(u, UpdateResult::Refused) {
                UpdateResult::Failed => (UpdateStep::CoreHubRollback, UpdateResult::Failed),
                _ => (UpdateStep::Resume, UpdateResult::Refused),
            },
        ),
        UpdateStep::CoreHubRollback | UpdateStep::Resume | UpdateStep::Finish => None,
    };
    if let Some((next, result)) = next {
        settle_outcome(
            u,
            result,
            format!("{why}: the update was stopped during {:?}", u.step.name()),
        );
        d.status.message = Some(format!("{why}; stopping the update safely"));
        d.event(
            true,
            crate::api::Reason::UpdateCancelled,
            format!("{why}: stopping the update during {:?}", u.step.name()),
        );
        enter(gsp, u, next, now);
    }
}

/// Phase Updating, the conditions of an update in flight, the update itself, and the components as they
/// run now (`status.version` moves once Core Hub is ready on a new version).
fn mark_updating(gsp: &GluesyncPlatform, obs: &Observed, d: &mut Decision, u: UpdateStatus) {
    let now = &obs.now;
    let generation = gsp.metadata.generation.unwrap_or(0);
    d.status.components = status::components(gsp, obs.workloads);
    if let Some(core_hub) = d
        .status
        .components
        .iter()
        .find(|c| c.component_type == ComponentType::CoreHub && c.ready)
    {
        d.status.version = core_hub.version.clone();
    }
    let message = d.status.message.clone().unwrap_or_default();
    let reason = match u.step.name() {
        UpdateStep::Waiting => gate::reason(gsp, &u).to_string(),
        step => format!("Update{step:?}"),
    };
    if u.step.name() != UpdateStep::Waiting {
        d.status.next_window = None;
    }
    d.status.conditions = [
        (READY, false, "UpdateInProgress", message.clone()),
        (RECONCILING, true, reason.as_str(), message.clone()),
        (STALLED, false, "UpdateInProgress", message),
    ]
    .into_iter()
    .map(|(t, v, r, m)| status::condition(&d.status.conditions, t, v, r, &m, generation, now))
    .collect();
    d.status.observed_generation = Some(generation);
    d.status.phase = Some(Phase::Updating);
    d.status.update = Some(u);
}

/// A `spec.requestID` the last update did not answer: the user (or the Core Hub UI) asks again.
fn new_request(gsp: &GluesyncPlatform) -> bool {
    let last = gsp
        .status
        .as_ref()
        .and_then(|s| s.last_attempt.as_ref())
        .and_then(|a| a.request_id.as_ref());
    gsp.spec.request_id.is_some() && gsp.spec.request_id.as_ref() != last
}

/// A new update of the spec as it is, at Preflight; `brought_request`: the spec's `requestID` is new to
/// it (it names this plan's approval).
fn fresh(gsp: &GluesyncPlatform, obs: &Observed, brought_request: bool) -> UpdateStatus {
    let previous = gsp.status.clone().unwrap_or_default();
    let core_hub = obs
        .workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    let from = match previous.update.as_ref() {
        // A plan made again keeps where the update started from.
        Some(u) => u.from.clone(),
        None => core_hub.and_then(|w| w.version()),
    };
    UpdateStatus {
        step: step(gsp, UpdateStep::Preflight, &obs.now),
        target: Some(gsp.spec.version.clone()),
        from,
        request_id: gsp.spec.request_id.clone(),
        new_request: new_request(gsp),
        channel: request_channel(gsp),
        requested_by: Some(requested_by(gsp, new_request(gsp))),
        generation: gsp.metadata.generation.unwrap_or(0),
        started_at: obs.now.clone(),
        components: vec![],
        approval_id: gate::approval_id(
            gsp,
            gsp.spec.request_id.as_deref(),
            brought_request,
            &obs.now,
        ),
        approved_at: None,
        steps: vec![],
        resumed_pipelines: crate::api::PipelineList::new(),
        pre_pulls: vec![],
        outcome: None,
        previous_phase: previous
            .update
            .as_ref()
            .map_or(previous.phase, |u| u.previous_phase),
    }
}

/// The components a new request of the Core Hub UI named, when it named some: only they move by the
/// catalog (a pin moves its component whatever asked).
fn named_components(gsp: &GluesyncPlatform, u: &UpdateStatus) -> Option<Vec<String>> {
    crate::api::UiRequest::of(gsp)
        .filter(|_| u.new_request)
        .map(|r| r.ids)
        .filter(|ids| !ids.is_empty())
}

/// The channel an update takes its versions from: the Core Hub UI's request for this `requestID`, else
/// the spec's.
fn request_channel(gsp: &GluesyncPlatform) -> ReleaseChannel {
    crate::api::UiRequest::of(gsp).map_or(gsp.spec.release_channel, |r| r.channel)
}

/// Who asked for an update that starts now: the Core Hub UI's user when a new `requestID` of theirs
/// started it, else a change of the resource.
fn requested_by(gsp: &GluesyncPlatform, new_request: bool) -> crate::api::RequestedBy {
    use crate::api::{RequestVia, RequestedBy};
    match crate::api::UiRequest::of(gsp).filter(|_| new_request) {
        Some(r) => RequestedBy {
            username: r.username,
            role: r.role,
            via: RequestVia::Ui,
        },
        None => RequestedBy {
            username: None,
            role: None,
            via: RequestVia::Spec,
        },
    }
}

/// No update runs: start one if the spec asks for it; else report what runs, resume leftover pipelines,
/// check the catalog when due, and let a deleted platform go once nothing is left to settle.
fn idle(gsp: &GluesyncPlatform, obs: &Observed) -> Decision {
    let deleting = gsp.metadata.deletion_timestamp.is_some();
    // GKO's own update runs alone: a new update waits for it to end; so does a disaster-recovery setup
    // that is changing workloads.
    let self_updating = gsp.status.as_ref().is_some_and(|s| s.self_update.is_some());
    let dr_busy = disaster::busy(
        gsp.status
            .as_ref()
            .and_then(|s| s.disaster_recovery.as_ref()),
    ) && !mutated(Mutant::DrBesideUpdate);
    let free = !deleting && !self_updating && !dr_busy && obs.access_problem.is_none();
    // Outside every maintenance window an update the spec asks for does not start.
    let window_wait = free
        .then(|| gate::start_wait(gsp, &obs.now))
        .flatten()
        .filter(|_| plan::wants_update(gsp, obs.workloads));
    if free
        && window_wait.is_none()
        && let Some(d) = plan::start(gsp, obs)
    {
        return d;
    }
    let mut d = Decision::new(status::idle(gsp, obs.workloads, &obs.now));
    d.status.update = None;
    d.status.next_window = None;
    selfupdate::carry_on(gsp, obs, &mut d);
    if d.status.self_update.is_none() && obs.access_problem.is_none() {
        disaster::carry_on(gsp, obs, &mut d);
    }
    // A deleted platform gives Core Hub drainTimeoutSeconds to resume the pipelines, and waits for the
    // watch for maintenance requests Core Hub applies late to end (it is bounded, and a request landing
    // after the platform went would leave its pipeline paused).
    let deadline = gsp.metadata.deletion_timestamp.as_ref().map(|t| {
        let resume_by = plus(t, gsp.spec.drain_timeout_seconds);
        let watch_ends = gsp
            .status
            .as_ref()
            .and_then(|s| s.late_maintenance.as_ref())
            .map(|l| l.until.0);
        Time(watch_ends.map_or(resume_by.0, |until| until.max(resume_by.0)))
    });
    pipelines::ledger(gsp, obs, &mut d, deadline.as_ref());
    prepull::clean(gsp, obs, false, &mut d);
    // A deleted platform waits for GKO's own update and a disaster-recovery teardown to end, however
    // long they take (each has its own timeouts); only Core Hub's resuming of the pipelines is given up
    // after drainTimeoutSeconds.
    let others_settled =
        d.status.self_update.is_none() && disaster::settled(d.status.disaster_recovery.as_ref());
    let settled = others_settled
        && ((d.status.paused_pipelines.is_empty() && d.status.late_maintenance.is_none())
            || (deleting && mutated(Mutant::LetGoWithPaused)));
    let has_finalizer = gsp.finalizers().iter().any(|f| f == FINALIZER);
    if !has_finalizer && !deleting && !disaster::settled(d.status.disaster_recovery.as_ref()) {
        // A setup in place is put back before the platform goes.
        d.actions.insert(0, Action::AddFinalizer);
    }
    // They are waited for only while GKO can work on the platform, and at most four stability timeouts
    // past the pipelines' deadline (a teardown whose restore keeps failing must not hold it forever).
    let last_call = gsp.metadata.deletion_timestamp.as_ref().map(|t| {
        plus(
            t,
            gsp.spec.drain_timeout_seconds + 4 * gsp.spec.stability_timeout_seconds,
        )
    });
    let others_abandoned = !others_settled
        && (obs.access_problem.is_some()
            || last_call.as_ref().is_some_and(|t| passed(t, &obs.now)));
    let given_up = (others_settled || others_abandoned)
        && deadline.as_ref().is_some_and(|t| passed(t, &obs.now));
    if has_finalizer && (settled || given_up) {
        if deleting && others_abandoned {
            d.event(
                true,
                crate::api::Reason::CleanupAbandoned,
                format!(
                    "the GluesyncPlatform is deleted and GKO lets it go before {} ended: {}",
                    if d.status.self_update.is_some() {
                        "its own update"
                    } else {
                        "the disaster-recovery teardown"
                    },
                    obs.access_problem
                        .as_ref()
                        .map(|p| p.message.clone())
                        .unwrap_or_else(|| "it did not end within four stability timeouts".into())
                ),
            );
        }
        let pipelines_left =
            !d.status.paused_pipelines.is_empty() || d.status.late_maintenance.is_some();
        if deleting && pipelines_left {
            let left = &d.status.paused_pipelines;
            d.event(
                true,
                crate::api::Reason::PipelinesNotResumed,
                format!(
                    "the GluesyncPlatform is deleted and Core Hub did not resume {} pipelines within {} s; \
                     they stay in maintenance mode: {}",
                    left.len(),
                    gsp.spec.drain_timeout_seconds,
                    pipelines::sample(left)
                ),
            );
            d.corehub = None;
        }
        d.actions.push(Action::RemoveFinalizer);
    } else if deleting
        && has_finalizer
        && d.status.paused_pipelines.is_empty()
        && let Some(late) = &d.status.late_maintenance
    {
        d.status.message = Some(format!(
            "the GluesyncPlatform is being deleted; GKO keeps it until {} to take out of maintenance \
             mode any of {} pipelines whose maintenance request Core Hub applies late",
            late.until.0,
            late.pipelines.len()
        ));
    }
    if let Some(wait) = window_wait {
        gate::show_start_wait(gsp, &obs.now, wait, &mut d);
    }
    if let Some(problem) = &obs.access_problem {
        // Stalled until the spec or GKO's settings change: nothing is read, no Core Hub is called.
        let generation = gsp.metadata.generation.unwrap_or(0);
        let previous = d.status.conditions.clone();
        d.status.message = Some(problem.message.clone());
        d.status.conditions = [(READY, false), (RECONCILING, false), (STALLED, true)]
            .into_iter()
            .map(|(t, v)| {
                status::condition(
                    &previous,
                    t,
                    v,
                    problem.reason,
                    &problem.message,
                    generation,
                    &obs.now,
                )
            })
            .collect();
    }
    if !deleting {
        match crate::update::catalog::due(gsp, &obs.now) {
            Some(wait) if wait.is_zero() => {
                d.catalog = Some(crate::update::catalog::check(
                    gsp,
                    obs.workloads,
                    crate::update::catalog::due_token(gsp),
                    gsp.spec.release_channel,
                ));
            }
            Some(wait) => d.requeue(wait),
            None => {}
        }
    }
    d
}
