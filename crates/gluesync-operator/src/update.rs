//! The update, as a pure state machine.
//!
//! [`decide`] takes the GluesyncPlatform (its spec, and its status, GKO's only memory) and what the cluster
//! and Core Hub look like now, and returns the next status, the actions to take once that status is
//! written, the events to record and when to look again. It does no I/O. Every action is an "ensure"
//! (an image that should be X, pipelines that should be paused), so doing one again after a restart does
//! no harm; and what must not be forgotten (a pipeline GKO is about to pause) is in the status before the
//! action that needs it.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    api::{
        Attempt, ComponentResult, ComponentResultStatus, ComponentState, ComponentType,
        GluesyncPlatform, GluesyncPlatformStatus, HistoryEntry, Phase, PlannedComponent,
        UpdateResult, UpdateStatus, UpdateStep, WorkloadKind,
    },
    cluster::Workload,
    corehub::Pipeline,
    status::{self, READY, RECONCILING, STALLED},
    version::{ImageRef, Version},
};

/// How many updates `status.history` keeps.
pub const HISTORY_LIMIT: usize = 10;

/// Waiting reasons that fail a stability check at once.
const FAIL_FAST: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
];

/// Latest versions of one image on the release channel, from the catalog.
pub type Catalog = BTreeMap<String, String>;

/// What GKO sees when it decides.
pub struct Observed<'a> {
    pub now: Time,
    pub workloads: &'a [Workload],
    /// Core Hub's pipelines, read in the steps that need them (Drain, Resume).
    pub pipelines: Option<Result<Vec<Pipeline>, String>>,
    /// Latest version per image name on the channel; `None` when offline or the catalog did not answer.
    pub catalog: Option<&'a Catalog>,
    /// A catalog check made on this pass (when one was due): its result, or why it failed.
    pub check: Option<Result<Catalog, String>>,
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
    /// Ask Core Hub to put these pipelines into maintenance mode.
    Pause(Vec<String>),
    /// Ask Core Hub to take these pipelines out of maintenance mode.
    Resume(Vec<String>),
}

/// A Kubernetes event to record on the GluesyncPlatform.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What [`decide`] says to do.
#[derive(Debug, PartialEq)]
pub struct Decision {
    pub status: GluesyncPlatformStatus,
    pub actions: Vec<Action>,
    pub events: Vec<Event>,
    /// Look again after this long even if nothing changes (polling Core Hub, a stability window).
    pub requeue: Option<Duration>,
    /// The step moved on: decide again at once, from the status just written.
    pub again: bool,
}

impl Decision {
    fn new(status: GluesyncPlatformStatus) -> Decision {
        Decision {
            status,
            actions: vec![],
            events: vec![],
            requeue: None,
            again: false,
        }
    }

    fn event(&mut self, warning: bool, reason: &'static str, message: impl Into<String>) {
        self.events.push(Event {
            warning,
            reason,
            message: message.into(),
        });
    }

    fn requeue(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }
}

fn secs(from: &Time, to: &Time) -> i64 {
    (to.0.as_second() - from.0.as_second()).max(0)
}

/// The next move for this GluesyncPlatform.
pub fn decide(gsp: &GluesyncPlatform, obs: &Observed) -> Decision {
    let Some(check) = &obs.check else {
        return decide_now(gsp, obs);
    };
    // Take the catalog's answer in first, so that the phase reads it.
    let mut checked = gsp.clone();
    let mut status = checked.status.clone().unwrap_or_default();
    let failed_before = status.catalog.as_ref().and_then(|c| c.error.clone());
    status.components = status::components(gsp, obs.workloads);
    crate::catalog::apply(gsp, &mut status, check, &obs.now);
    checked.status = Some(status);
    let mut d = decide_now(&checked, obs);
    if let Err(why) = check
        && failed_before.is_none()
    {
        d.event(true, "CatalogCheckFailed", why.clone());
    }
    d
}

fn decide_now(gsp: &GluesyncPlatform, obs: &Observed) -> Decision {
    let status = gsp.status.clone().unwrap_or_default();
    let Some(update) = status.update.clone() else {
        return start_or_idle(gsp, obs);
    };
    let mut d = Decision::new(status);
    let mut u = update;
    match u.step {
        UpdateStep::Preflight => preflight(gsp, obs, &mut u, &mut d),
        UpdateStep::Snapshot => snapshot(obs, &mut u, &mut d),
        UpdateStep::Drain => drain(gsp, obs, &mut u, &mut d),
        UpdateStep::CoreHub => core_hub(gsp, obs, &mut u, &mut d),
        UpdateStep::CoreHubRollback => rollback(gsp, obs, &mut u, &mut d),
        UpdateStep::Resume => resume(gsp, obs, &mut u, &mut d),
        UpdateStep::Modules => modules(gsp, obs, &mut u, &mut d),
        UpdateStep::Finish => return finish(gsp, obs, u, d),
    }
    mark_updating(gsp, obs, &mut d, u);
    d
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
    let reason = format!("Update{:?}", u.step);
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

fn move_to(
    u: &mut UpdateStep,
    step_started_at: &mut Time,
    next: UpdateStep,
    now: &Time,
    d: &mut Decision,
) {
    *u = next;
    *step_started_at = now.clone();
    d.again = true;
}

/// The version an image would have to be taken to, for a desired version, or `None` when it runs it.
fn target_image(image: &str, desired: &str, registry: Option<&str>) -> Option<String> {
    if status::runs_version(image, desired) && registry.is_none_or(|r| image.starts_with(r)) {
        return None;
    }
    let parsed = ImageRef::parse(image);
    let repository = match registry {
        Some(r) => format!("{}/{}", r.trim_end_matches('/'), parsed.name()),
        None => parsed.repository.clone(),
    };
    let tag = if desired.contains('-') {
        desired.to_string()
    } else {
        format!("{desired}{}", parsed.tag_suffix())
    };
    Some(format!("{repository}:{tag}"))
}

/// Is there something the spec asks for that this generation has not yet tried?
fn wants_update(gsp: &GluesyncPlatform, workloads: &[Workload]) -> bool {
    let status = gsp.status.clone().unwrap_or_default();
    let generation = gsp.metadata.generation.unwrap_or(0);
    if status::problem(gsp, workloads).is_some() {
        return false;
    }
    if let Some(last) = &status.last_attempt
        && last.generation == Some(generation)
    {
        return false;
    }
    let request_changed = gsp.spec.request_id.is_some()
        && gsp.spec.request_id
            != status
                .last_attempt
                .as_ref()
                .and_then(|a| a.request_id.clone());
    let core_hub_behind = workloads.iter().any(|w| {
        matches!(
            w.component_type,
            Some(ComponentType::CoreHub | ComponentType::Agent)
        ) && !status::runs_version(&w.image, &gsp.spec.version)
    });
    let pin_behind = workloads.iter().any(|w| {
        gsp.spec
            .modules
            .get(&w.name)
            .is_some_and(|pin| !status::runs_version(&w.image, pin))
    });
    request_changed || core_hub_behind || pin_behind
}

fn start_or_idle(gsp: &GluesyncPlatform, obs: &Observed) -> Decision {
    if !wants_update(gsp, obs.workloads) {
        let mut d = Decision::new(status::idle(gsp, obs.workloads, &obs.now));
        d.status.update = None;
        return d;
    }
    let previous = gsp.status.clone().unwrap_or_default();
    let core_hub = obs
        .workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    let mut status = status::idle(gsp, obs.workloads, &obs.now);
    let update = UpdateStatus {
        step: UpdateStep::Preflight,
        target: Some(gsp.spec.version.clone()),
        from: core_hub.and_then(|w| w.version()),
        request_id: gsp.spec.request_id.clone(),
        generation: gsp.metadata.generation.unwrap_or(0),
        started_at: obs.now.clone(),
        step_started_at: obs.now.clone(),
        components: vec![],
        resumed_pipelines: vec![],
        outcome: None,
        failure: None,
        previous_phase: previous.phase,
    };
    let from = core_hub.and_then(|w| w.version()).unwrap_or_default();
    status.message = Some(format!(
        "update of Core Hub from {from} to {} started",
        gsp.spec.version
    ));
    let mut d = Decision::new(status);
    d.event(
        false,
        "UpdateStarted",
        d.status.message.clone().unwrap_or_default(),
    );
    d.again = true;
    mark_updating(gsp, obs, &mut d, update);
    d
}

fn refuse(u: &mut UpdateStatus, d: &mut Decision, now: &Time, why: String) {
    u.outcome = Some(UpdateResult::Refused);
    u.failure = Some(why.clone());
    d.status.message = Some(why);
    move_to(
        &mut u.step,
        &mut u.step_started_at,
        UpdateStep::Finish,
        now,
        d,
    );
}

fn preflight(gsp: &GluesyncPlatform, obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    let now = &obs.now;
    if let Some(problem) = status::problem(gsp, obs.workloads) {
        return refuse(u, d, now, problem.message);
    }
    let registry = gsp.spec.image_registry.as_deref();
    let desired = gsp.spec.version.as_str();
    let desired_version: Version = match desired.split('-').next().unwrap_or(desired).parse() {
        Ok(v) => v,
        Err(e) => return refuse(u, d, now, e.to_string()),
    };
    for w in obs.workloads {
        if w.component_type == Some(ComponentType::Operator) {
            continue;
        }
        if crate::version::image_version(&w.image).is_err() {
            return refuse(
                u,
                d,
                now,
                format!(
                    "{} {} runs image {:?}, whose tag carries no version GKO can read",
                    w.kind_name(),
                    w.name,
                    w.image
                ),
            );
        }
    }
    let core_hub = obs
        .workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    if let (false, Some(catalog), Some(ch)) = (gsp.spec.catalog.offline, obs.catalog, core_hub)
        && let Some(latest) = catalog.get(ImageRef::parse(&ch.image).name())
        && let Ok(latest) = latest.parse::<Version>()
        && desired_version > latest
    {
        return refuse(
            u,
            d,
            now,
            format!(
                "Core Hub {desired} is not in the version catalog: the latest on the {} channel is {latest}",
                gsp.spec.release_channel.as_str()
            ),
        );
    }
    let core_hub_changes =
        core_hub.is_some_and(|w| target_image(&w.image, desired, registry).is_some());
    let mut plan = Vec::new();
    for w in obs.workloads {
        let Some(kind) = w.component_type else {
            continue;
        };
        let Some(container) = w.container.clone() else {
            continue;
        };
        let (to_image, skip_note) = match kind {
            ComponentType::Operator => continue,
            ComponentType::CoreHub | ComponentType::Agent => {
                (target_image(&w.image, desired, registry), None)
            }
            ComponentType::Module | ComponentType::ThirdParty => {
                match gsp.spec.modules.get(&w.name) {
                    Some(pin) => (target_image(&w.image, pin, registry), None),
                    None if kind == ComponentType::ThirdParty => (
                        None,
                        Some("third-party: updated only when pinned in spec.modules"),
                    ),
                    None => {
                        let image = ImageRef::parse(&w.image);
                        let latest = obs.catalog.and_then(|c| c.get(image.name()));
                        match (latest, w.version()) {
                            _ if gsp.spec.catalog.offline => {
                                (None, Some("no pin, and an offline install has no catalog"))
                            }
                            (None, _) => (None, Some("no pin, and the catalog gave no version")),
                            (Some(latest), Some(running))
                                if (core_hub_changes || u.request_id.is_some())
                                    && latest.parse::<Version>().ok()
                                        > running.parse::<Version>().ok() =>
                            {
                                (target_image(&w.image, latest, registry), None)
                            }
                            _ => (None, None),
                        }
                    }
                }
            }
        };
        let state = if to_image.is_some() {
            ComponentState::Pending
        } else {
            ComponentState::Skipped
        };
        plan.push(PlannedComponent {
            name: w.name.clone(),
            component_type: kind,
            kind: w.kind,
            container,
            from_image: w.image.clone(),
            to_image,
            state,
            message: skip_note.map(str::to_string),
            patched_at: None,
            stable_since: None,
        });
    }
    // Core Hub, agents, then modules and third-party images, by name.
    plan.sort_by(|a, b| (a.component_type, &a.name).cmp(&(b.component_type, &b.name)));
    if !core_hub_changes {
        u.target = None;
    }
    u.components = plan;
    d.status.message = Some("preflight passed; recording the images of every component".into());
    move_to(
        &mut u.step,
        &mut u.step_started_at,
        UpdateStep::Snapshot,
        now,
        d,
    );
}

fn snapshot(obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    for c in &mut u.components {
        if let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) {
            c.from_image = w.image.clone();
        }
    }
    let core_hub_changes = u
        .components
        .iter()
        .any(|c| is_core(c) && c.to_image.is_some());
    if core_hub_changes {
        d.status.message = Some("putting running pipelines into maintenance mode".into());
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::Drain,
            &obs.now,
            d,
        );
    } else {
        d.status.message = Some("Core Hub stays; updating modules".into());
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::Modules,
            &obs.now,
            d,
        );
    }
}

fn is_core(c: &PlannedComponent) -> bool {
    matches!(
        c.component_type,
        ComponentType::CoreHub | ComponentType::Agent
    )
}

fn drain(gsp: &GluesyncPlatform, obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    let now = &obs.now;
    let timeout = gsp.spec.drain_timeout_seconds;
    let elapsed = secs(&u.step_started_at, now);
    let running: Vec<String> = match &obs.pipelines {
        Some(Ok(list)) => list
            .iter()
            .filter(|p| !p.is_in_maintenance_mode)
            .map(|p| p.id.clone())
            .collect(),
        Some(Err(e)) => {
            d.status.message = Some(format!("waiting for Core Hub to list pipelines: {e}"));
            if elapsed >= timeout {
                return drain_timeout(gsp, u, d, now, "Core Hub could not be asked".into());
            }
            d.requeue(Duration::from_secs(1));
            return;
        }
        None => {
            d.requeue(Duration::from_millis(100));
            return;
        }
    };
    if running.is_empty() {
        d.status.message = Some(format!(
            "{} pipelines in maintenance mode; changing the Core Hub image",
            d.status.paused_pipelines.len()
        ));
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::CoreHub,
            now,
            d,
        );
        return;
    }
    if elapsed >= timeout {
        let mut stuck = running.clone();
        stuck.truncate(20);
        return drain_timeout(
            gsp,
            u,
            d,
            now,
            format!(
                "{} pipelines did not reach maintenance mode ({}{})",
                running.len(),
                stuck.join(", "),
                if running.len() > 20 { ", ..." } else { "" }
            ),
        );
    }
    // Record every running pipeline before asking Core Hub to pause it.
    let first = d.status.paused_pipelines.is_empty();
    let known: std::collections::HashSet<String> =
        d.status.paused_pipelines.iter().cloned().collect();
    let new: Vec<String> = running
        .iter()
        .filter(|id| !known.contains(*id))
        .cloned()
        .collect();
    d.status.paused_pipelines.extend(new);
    if first {
        d.event(
            false,
            "PipelinesPaused",
            format!(
                "asked {} running pipelines to enter maintenance mode",
                running.len()
            ),
        );
    }
    d.status.message = Some(format!(
        "waiting for {} of {} pipelines to reach maintenance mode",
        running.len(),
        d.status.paused_pipelines.len()
    ));
    d.actions.push(Action::Pause(running));
    d.requeue(Duration::from_millis(250));
}

fn drain_timeout(
    gsp: &GluesyncPlatform,
    u: &mut UpdateStatus,
    d: &mut Decision,
    now: &Time,
    what: String,
) {
    let message = format!(
        "{what} within {} s; resuming the paused ones and refusing the update",
        gsp.spec.drain_timeout_seconds
    );
    d.event(true, "DrainTimeout", message.clone());
    u.outcome = Some(UpdateResult::Refused);
    u.failure = Some(format!(
        "{what} within {} s",
        gsp.spec.drain_timeout_seconds
    ));
    d.status.message = Some(message);
    move_to(
        &mut u.step,
        &mut u.step_started_at,
        UpdateStep::Resume,
        now,
        d,
    );
}

/// The stability check of one component on `image`: `Ok(true)` passed, `Ok(false)` not yet, `Err` failed.
fn stability(
    gsp: &GluesyncPlatform,
    c: &mut PlannedComponent,
    w: &Workload,
    image: &str,
    now: &Time,
    d: &mut Decision,
) -> Result<bool, String> {
    let window = gsp.spec.stability_window_seconds;
    let timeout = gsp.spec.stability_timeout_seconds;
    for pod in w.pods.iter().filter(|p| p.image == image) {
        if let Some((reason, message)) = &pod.waiting
            && FAIL_FAST.contains(&reason.as_str())
        {
            return Err(format!("pod {} is {reason}: {message}", pod.name));
        }
    }
    if w.progress_deadline_exceeded {
        return Err(format!(
            "Deployment {} exceeded its progress deadline",
            w.name
        ));
    }
    let restarted = w.pods.iter().any(|p| p.image == image && p.restarts > 0);
    let patched_at = c.patched_at.clone().unwrap_or_else(|| now.clone());
    if w.image == image && w.ready && !restarted {
        let since = c.stable_since.get_or_insert_with(|| now.clone()).clone();
        let stable_for = secs(&since, now);
        if stable_for >= window {
            return Ok(true);
        }
        d.requeue(Duration::from_secs((window - stable_for).max(1) as u64));
        return Ok(false);
    }
    c.stable_since = None;
    let waited = secs(&patched_at, now);
    if waited >= timeout {
        let why = w
            .pods
            .iter()
            .find_map(|p| {
                p.waiting
                    .as_ref()
                    .map(|(r, m)| format!("pod {} waits: {r} {m}", p.name))
            })
            .unwrap_or_else(|| "not every replica is updated and ready".into());
        return Err(format!("not ready within {timeout} s ({why})"));
    }
    d.requeue(Duration::from_secs(2));
    Ok(false)
}

/// Makes sure the workload runs `image`.
fn ensure_image(c: &PlannedComponent, w: &Workload, image: &str, d: &mut Decision) {
    if w.image != image {
        d.actions.push(Action::SetImage {
            kind: c.kind,
            name: c.name.clone(),
            container: c.container.clone(),
            image: image.to_string(),
        });
    }
}

fn core_hub(gsp: &GluesyncPlatform, obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    let now = &obs.now;
    let mut failures = vec![];
    let mut all_updated = true;
    let mut patched_now = false;
    for c in u.components.iter_mut().filter(|c| is_core(c)) {
        let Some(to) = c.to_image.clone() else {
            continue;
        };
        let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) else {
            failures.push(format!("{} is gone", c.name));
            continue;
        };
        match c.state {
            ComponentState::Pending | ComponentState::Patched => {
                ensure_image(c, w, &to, d);
                if c.state == ComponentState::Pending {
                    c.state = ComponentState::Patched;
                    c.patched_at = Some(now.clone());
                    patched_now = true;
                }
                match stability(gsp, c, w, &to, now, d) {
                    Ok(true) => c.state = ComponentState::Updated,
                    Ok(false) => all_updated = false,
                    Err(why) => {
                        c.message = Some(why.clone());
                        failures.push(format!("{}: {why}", c.name));
                    }
                }
            }
            _ => {}
        }
    }
    if patched_now {
        d.event(
            false,
            "CoreHubPatched",
            format!(
                "Core Hub image set to {}",
                u.components
                    .iter()
                    .find(|c| c.component_type == ComponentType::CoreHub)
                    .and_then(|c| c.to_image.clone())
                    .unwrap_or_default()
            ),
        );
    }
    if !failures.is_empty() {
        let why = failures.join("; ");
        let message = format!(
            "Core Hub failed its stability check and is being rolled back to {}: {why}",
            u.from.clone().unwrap_or_default()
        );
        d.event(true, "CoreHubFailed", message.clone());
        for c in u
            .components
            .iter_mut()
            .filter(|c| is_core(c) && c.to_image.is_some())
        {
            c.state = ComponentState::RollingBack;
            c.stable_since = None;
        }
        u.outcome = Some(UpdateResult::Failed);
        u.failure = Some(format!("Core Hub failed its stability check: {why}"));
        d.status.message = Some(message);
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::CoreHubRollback,
            now,
            d,
        );
        return;
    }
    if all_updated {
        let message = format!("Core Hub {} passed its stability check", gsp.spec.version);
        d.event(false, "CoreHubUpdated", message.clone());
        d.status.message = Some(format!(
            "{message}; taking pipelines out of maintenance mode"
        ));
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::Resume,
            now,
            d,
        );
        return;
    }
    d.status.message = Some(format!(
        "waiting for Core Hub {} to stay ready for {} s",
        gsp.spec.version, gsp.spec.stability_window_seconds
    ));
}

/// Puts a component back on its previous image; `true` once it runs it and is ready.
fn roll_back(
    gsp: &GluesyncPlatform,
    c: &mut PlannedComponent,
    w: &Workload,
    since: &Time,
    now: &Time,
    d: &mut Decision,
) -> Option<bool> {
    let from = c.from_image.clone();
    ensure_image(c, w, &from, d);
    // A StatefulSet does not replace a pod of the failed revision that never became ready.
    if w.kind == WorkloadKind::StatefulSet {
        for pod in w.pods.iter().filter(|p| p.image != from && !p.ready) {
            d.actions.push(Action::DeletePod(pod.name.clone()));
        }
    }
    if w.image == from && w.ready && w.pods.iter().all(|p| p.image == from) {
        return Some(true);
    }
    if secs(since, now) >= gsp.spec.stability_timeout_seconds {
        return Some(false);
    }
    d.requeue(Duration::from_secs(1));
    None
}

fn rollback(gsp: &GluesyncPlatform, obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    let now = &obs.now;
    let since = u.step_started_at.clone();
    let mut done = true;
    for c in u
        .components
        .iter_mut()
        .filter(|c| is_core(c) && c.state == ComponentState::RollingBack)
    {
        let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) else {
            c.state = ComponentState::Failed;
            continue;
        };
        match roll_back(gsp, c, w, &since, now, d) {
            Some(true) => c.state = ComponentState::RolledBack,
            Some(false) => {
                c.state = ComponentState::Failed;
                c.message = Some(format!(
                    "{}; the rollback to {} did not become ready either",
                    c.message.clone().unwrap_or_default(),
                    c.from_image
                ));
            }
            None => done = false,
        }
    }
    if done {
        d.status.message = Some(
            "Core Hub is back on its previous version; taking pipelines out of maintenance mode"
                .into(),
        );
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::Resume,
            now,
            d,
        );
    } else {
        d.status.message = Some(format!(
            "rolling Core Hub back to {}",
            u.from.clone().unwrap_or_default()
        ));
    }
}

fn resume(gsp: &GluesyncPlatform, obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    let now = &obs.now;
    let next = if u.outcome.is_some() {
        UpdateStep::Finish
    } else {
        UpdateStep::Modules
    };
    if d.status.paused_pipelines.is_empty() {
        move_to(&mut u.step, &mut u.step_started_at, next, now, d);
        return;
    }
    let elapsed = secs(&u.step_started_at, now);
    let in_maintenance: std::collections::HashSet<String> = match &obs.pipelines {
        Some(Ok(list)) => list
            .iter()
            .filter(|p| p.is_in_maintenance_mode)
            .map(|p| p.id.clone())
            .collect(),
        Some(Err(e)) => {
            if elapsed >= gsp.spec.drain_timeout_seconds {
                d.status.message = Some(format!(
                    "{} pipelines could not be resumed: {e}",
                    d.status.paused_pipelines.len()
                ));
                move_to(&mut u.step, &mut u.step_started_at, next, now, d);
                return;
            }
            d.status.message = Some(format!("waiting for Core Hub to list pipelines: {e}"));
            d.requeue(Duration::from_secs(1));
            return;
        }
        None => {
            d.requeue(Duration::from_millis(100));
            return;
        }
    };
    let (still, done): (Vec<String>, Vec<String>) = d
        .status
        .paused_pipelines
        .iter()
        .cloned()
        .partition(|id| in_maintenance.contains(id));
    u.resumed_pipelines.extend(done);
    d.status.paused_pipelines = still.clone();
    if still.is_empty() {
        d.event(
            false,
            "PipelinesResumed",
            format!(
                "{} pipelines taken out of maintenance mode",
                u.resumed_pipelines.len()
            ),
        );
        move_to(&mut u.step, &mut u.step_started_at, next, now, d);
        return;
    }
    if elapsed >= gsp.spec.drain_timeout_seconds {
        d.status.message = Some(format!(
            "{} pipelines did not leave maintenance mode",
            still.len()
        ));
        move_to(&mut u.step, &mut u.step_started_at, next, now, d);
        return;
    }
    d.status.message = Some(format!(
        "taking {} pipelines out of maintenance mode",
        still.len()
    ));
    d.actions.push(Action::Resume(still));
    d.requeue(Duration::from_millis(250));
}

fn modules(gsp: &GluesyncPlatform, obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    let now = &obs.now;
    let since = u.step_started_at.clone();
    let Some(c) = u.components.iter_mut().find(|c| {
        !is_core(c)
            && matches!(
                c.state,
                ComponentState::Pending | ComponentState::Patched | ComponentState::RollingBack
            )
    }) else {
        d.status.message = Some("modules done".into());
        move_to(
            &mut u.step,
            &mut u.step_started_at,
            UpdateStep::Finish,
            now,
            d,
        );
        return;
    };
    let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) else {
        c.state = ComponentState::Failed;
        c.message = Some("the workload is gone".into());
        d.again = true;
        return;
    };
    let to = c.to_image.clone().unwrap_or_default();
    match c.state {
        ComponentState::Pending | ComponentState::Patched => {
            ensure_image(c, w, &to, d);
            if c.state == ComponentState::Pending {
                c.state = ComponentState::Patched;
                c.patched_at = Some(now.clone());
            }
            match stability(gsp, c, w, &to, now, d) {
                Ok(true) => {
                    c.state = ComponentState::Updated;
                    d.again = true;
                }
                Ok(false) => {
                    d.status.message = Some(format!("updating {} to {to}", c.name));
                }
                Err(why) => {
                    c.state = ComponentState::RollingBack;
                    c.message = Some(why);
                    c.stable_since = None;
                    c.patched_at = Some(now.clone());
                    d.again = true;
                }
            }
        }
        ComponentState::RollingBack => {
            let since = c.patched_at.clone().unwrap_or(since);
            match roll_back(gsp, c, w, &since, now, d) {
                Some(true) => {
                    c.state = ComponentState::RolledBack;
                    d.event(
                        true,
                        "ModuleRolledBack",
                        format!(
                            "{} failed its stability check ({}) and is back on {}",
                            c.name,
                            c.message.clone().unwrap_or_default(),
                            c.from_image
                        ),
                    );
                    d.again = true;
                }
                Some(false) => {
                    c.state = ComponentState::Failed;
                    c.message = Some(format!(
                        "{}; the rollback to {} did not become ready either",
                        c.message.clone().unwrap_or_default(),
                        c.from_image
                    ));
                    d.again = true;
                }
                None => {
                    d.status.message = Some(format!("rolling {} back to {}", c.name, c.from_image))
                }
            }
        }
        _ => {}
    }
}

fn version_of(image: &str) -> Option<String> {
    ImageRef::parse(image)
        .tag
        .map(|t| t.split('-').next().unwrap_or(&t).to_string())
}

fn finish(gsp: &GluesyncPlatform, obs: &Observed, u: UpdateStatus, mut d: Decision) -> Decision {
    let now = obs.now.clone();
    let not_resumed = d.status.paused_pipelines.clone();
    let modules_failed: Vec<&PlannedComponent> = u
        .components
        .iter()
        .filter(|c| {
            !is_core(c) && matches!(c.state, ComponentState::RolledBack | ComponentState::Failed)
        })
        .collect();
    let result = match u.outcome {
        Some(r) => r,
        None if !modules_failed.is_empty() || !not_resumed.is_empty() => UpdateResult::Degraded,
        None => UpdateResult::Succeeded,
    };
    let message = match result {
        UpdateResult::Succeeded => "update finished".to_string(),
        UpdateResult::Refused | UpdateResult::Failed => {
            u.failure.clone().unwrap_or_else(|| format!("{result:?}"))
        }
        UpdateResult::Degraded => {
            let mut parts: Vec<String> = modules_failed
                .iter()
                .map(|c| {
                    format!(
                        "{} rolled back: {}",
                        c.name,
                        c.message.clone().unwrap_or_default()
                    )
                })
                .collect();
            if !not_resumed.is_empty() {
                parts.push(format!("{} pipelines not resumed", not_resumed.len()));
            }
            parts.join("; ")
        }
    };
    let results = u
        .components
        .iter()
        .map(|c| {
            let from = version_of(&c.from_image);
            let to = c.to_image.as_deref().and_then(version_of);
            let (status, msg) = match c.state {
                ComponentState::Updated => (ComponentResultStatus::Ok, None),
                ComponentState::RolledBack => {
                    (ComponentResultStatus::RolledBack, c.message.clone())
                }
                ComponentState::Failed => (ComponentResultStatus::Error, c.message.clone()),
                ComponentState::Skipped => (
                    ComponentResultStatus::Skipped,
                    Some(c.message.clone().unwrap_or_else(|| {
                        format!("already at {}", from.clone().unwrap_or_default())
                    })),
                ),
                _ => (
                    ComponentResultStatus::Skipped,
                    Some(match result {
                        UpdateResult::Refused => "update refused".to_string(),
                        UpdateResult::Failed => "not attempted: Core Hub failed".to_string(),
                        _ => "not attempted".to_string(),
                    }),
                ),
            };
            ComponentResult {
                name: c.name.clone(),
                status,
                from,
                to,
                message: msg,
            }
        })
        .collect();
    let mut paused_all = u.resumed_pipelines.clone();
    paused_all.extend(not_resumed.iter().cloned());
    paused_all.sort();
    let attempt = Attempt {
        target: u.target.clone(),
        request_id: u.request_id.clone(),
        generation: Some(u.generation),
        result,
        message: message.clone(),
        started_at: Some(u.started_at.clone()),
        finished_at: now.clone(),
        results,
        paused_pipelines: paused_all,
        resumed_pipelines: u.resumed_pipelines.clone(),
    };
    let entry = HistoryEntry {
        from: u.from.clone(),
        to: u.target.clone(),
        result,
        message: message.clone(),
        request_id: u.request_id.clone(),
        started_at: Some(u.started_at.clone()),
        finished_at: now.clone(),
        previous_images: u
            .components
            .iter()
            .map(|c| (c.name.clone(), c.from_image.clone()))
            .collect(),
    };
    let mut status = d.status.clone();
    status.update = None;
    status.last_attempt = Some(attempt);
    status.history.insert(0, entry);
    status.history.truncate(HISTORY_LIMIT);
    if result == UpdateResult::Refused {
        status.phase = u.previous_phase;
    }
    let done = GluesyncPlatform {
        status: Some(status),
        ..gsp.clone()
    };
    d.status = status::idle(&done, obs.workloads, &now);
    let (warning, reason) = match result {
        UpdateResult::Succeeded => (false, "UpdateSucceeded"),
        UpdateResult::Degraded => (true, "UpdateDegraded"),
        UpdateResult::Failed => (true, "UpdateFailed"),
        UpdateResult::Refused => (true, "UpdateRefused"),
    };
    d.event(warning, reason, message);
    d.again = false;
    d
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;
    use crate::{
        api::{GluesyncPlatformSpec, UpdateStep::*},
        cluster::PodView,
    };

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn at(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn platform(spec: serde_json::Value) -> GluesyncPlatform {
        let mut g = GluesyncPlatform::new(
            "gluesync",
            serde_json::from_value::<GluesyncPlatformSpec>(spec).unwrap(),
        );
        g.metadata = ObjectMeta {
            name: Some("gluesync".into()),
            namespace: Some("ns".into()),
            generation: Some(2),
            uid: Some("uid".into()),
            ..Default::default()
        };
        g
    }

    fn workload(name: &str, label: &str, image: &str) -> Workload {
        Workload {
            kind: if name.contains("grafana") {
                WorkloadKind::Deployment
            } else {
                WorkloadKind::StatefulSet
            },
            name: name.into(),
            component_type: ComponentType::from_label(label),
            label_value: label.into(),
            container: Some("c".into()),
            image: image.into(),
            ready: true,
            progress_deadline_exceeded: false,
            selector: Default::default(),
            pods: vec![PodView {
                name: format!("{name}-0"),
                image: image.into(),
                ready: true,
                waiting: None,
                restarts: 0,
            }],
        }
    }

    fn install() -> Vec<Workload> {
        vec![
            workload("core-hub", "core-hub", "molo17/gluesync-core-hub:2.3.2.1"),
            workload("agent-mssql", "agent", "molo17/gluesync-mssql-cdc:2.3.2.1"),
            workload("chronos", "module", "molo17/gluesync-chronos:0.3.2"),
            workload("grafana", "third-party", "molo17/grafana:11.2.0"),
        ]
    }

    fn catalog() -> Catalog {
        [
            ("gluesync-core-hub".to_string(), "2.3.2.2".to_string()),
            ("gluesync-chronos".to_string(), "0.3.3".to_string()),
            ("grafana".to_string(), "12.0.0".to_string()),
        ]
        .into()
    }

    fn pipelines(running: &[&str], paused: &[&str]) -> Option<Result<Vec<Pipeline>, String>> {
        let p = |id: &&str, m: bool| Pipeline {
            id: id.to_string(),
            is_in_maintenance_mode: m,
        };
        Some(Ok(running
            .iter()
            .map(|id| p(id, false))
            .chain(paused.iter().map(|id| p(id, true)))
            .collect()))
    }

    /// Runs `decide` once with `obs`, and puts the new status on the platform.
    fn step(g: &mut GluesyncPlatform, obs: &Observed) -> Decision {
        let d = decide(g, obs);
        g.status = Some(d.status.clone());
        d
    }

    fn obs<'a>(now: Time, workloads: &'a [Workload], cat: Option<&'a Catalog>) -> Observed<'a> {
        Observed {
            now,
            workloads,
            pipelines: None,
            catalog: cat,
            check: None,
        }
    }

    fn update(g: &GluesyncPlatform) -> &UpdateStatus {
        g.status.as_ref().unwrap().update.as_ref().unwrap()
    }

    fn planned<'a>(g: &'a GluesyncPlatform, name: &str) -> &'a PlannedComponent {
        update(g)
            .components
            .iter()
            .find(|c| c.name == name)
            .unwrap()
    }

    /// A platform at 2.3.2.1 asked for 2.3.2.2, taken through Preflight and Snapshot.
    fn drained_start() -> (GluesyncPlatform, Vec<Workload>) {
        let mut g =
            platform(serde_json::json!({"version": "2.3.2.2", "stabilityWindowSeconds": 10}));
        let w = install();
        let cat = catalog();
        let d = step(&mut g, &obs(at(0), &w, Some(&cat)));
        assert_eq!(d.events[0].reason, "UpdateStarted");
        assert_eq!(update(&g).step, Preflight);
        step(&mut g, &obs(at(0), &w, Some(&cat)));
        step(&mut g, &obs(at(0), &w, Some(&cat)));
        assert_eq!(update(&g).step, Drain);
        (g, w)
    }

    #[test]
    fn a_new_version_starts_an_update_once_per_generation() {
        let g = platform(serde_json::json!({"version": "2.3.2.2"}));
        let w = install();
        let d = decide(&g, &obs(at(0), &w, None));
        assert_eq!(d.status.phase, Some(Phase::Updating));
        assert!(d.again);
        let u = d.status.update.unwrap();
        assert_eq!((u.step, u.generation), (Preflight, 2));
        assert_eq!(u.from.as_deref(), Some("2.3.2.1"));

        // The same generation already ended: nothing starts again by itself.
        let mut done = g.clone();
        let status = GluesyncPlatformStatus {
            last_attempt: Some(Attempt {
                target: Some("2.3.2.2".into()),
                request_id: None,
                generation: Some(2),
                result: UpdateResult::Failed,
                message: "x".into(),
                started_at: None,
                finished_at: at(0),
                results: vec![],
                paused_pipelines: vec![],
                resumed_pipelines: vec![],
            }),
            ..Default::default()
        };
        done.status = Some(status);
        let d = decide(&done, &obs(at(1), &w, None));
        assert!(d.status.update.is_none());
        assert_eq!(d.status.phase, Some(Phase::Failed));

        // Nothing to do: no update.
        let current = platform(serde_json::json!({"version": "2.3.2.1"}));
        assert!(
            decide(&current, &obs(at(0), &w, None))
                .status
                .update
                .is_none()
        );
    }

    #[test]
    fn preflight_plans_every_component() {
        let (g, _) = drained_start();
        assert_eq!(
            planned(&g, "core-hub").to_image.as_deref(),
            Some("molo17/gluesync-core-hub:2.3.2.2")
        );
        assert_eq!(
            planned(&g, "agent-mssql").to_image.as_deref(),
            Some("molo17/gluesync-mssql-cdc:2.3.2.2"),
            "agents follow Core Hub"
        );
        assert_eq!(
            planned(&g, "chronos").to_image.as_deref(),
            Some("molo17/gluesync-chronos:0.3.3"),
            "an unpinned module takes the catalog's latest"
        );
        assert_eq!(
            planned(&g, "grafana").to_image,
            None,
            "third-party only when pinned"
        );
        assert_eq!(planned(&g, "grafana").state, ComponentState::Skipped);
        assert_eq!(
            planned(&g, "core-hub").from_image,
            "molo17/gluesync-core-hub:2.3.2.1"
        );
    }

    #[test]
    fn pins_and_the_registry_shape_the_targets() {
        let mut g = platform(serde_json::json!({
            "version": "2.3.2.2",
            "imageRegistry": "registry.example.com/mirror",
            "modules": {"grafana": "11.3.0", "chronos": "0.3.2"},
        }));
        let w = install();
        let cat = catalog();
        step(&mut g, &obs(at(0), &w, Some(&cat)));
        step(&mut g, &obs(at(0), &w, Some(&cat)));
        assert_eq!(
            planned(&g, "core-hub").to_image.as_deref(),
            Some("registry.example.com/mirror/gluesync-core-hub:2.3.2.2")
        );
        assert_eq!(
            planned(&g, "grafana").to_image.as_deref(),
            Some("registry.example.com/mirror/grafana:11.3.0")
        );
        assert_eq!(
            planned(&g, "chronos").to_image.as_deref(),
            Some("registry.example.com/mirror/gluesync-chronos:0.3.2"),
            "a pin wins over the catalog; the registry moves it"
        );
    }

    #[test]
    fn a_version_the_catalog_does_not_know_is_refused() {
        let mut g = platform(serde_json::json!({"version": "2.4.0.0"}));
        let w = install();
        let cat = catalog();
        step(&mut g, &obs(at(0), &w, Some(&cat)));
        step(&mut g, &obs(at(0), &w, Some(&cat)));
        assert_eq!(update(&g).step, Finish);
        let d = step(&mut g, &obs(at(0), &w, Some(&cat)));
        let s = g.status.as_ref().unwrap();
        assert!(s.update.is_none());
        let a = s.last_attempt.as_ref().unwrap();
        assert_eq!(a.result, UpdateResult::Refused);
        assert!(
            a.message.contains("not in the version catalog"),
            "{}",
            a.message
        );
        assert_eq!(d.events.last().unwrap().reason, "UpdateRefused");
        assert_eq!(s.phase, None, "Refused leaves the phase as it was");
    }

    #[test]
    fn drain_records_pipelines_before_asking_and_leaves_paused_ones_alone() {
        let (mut g, w) = drained_start();
        let mut o = obs(at(1), &w, None);
        o.pipelines = pipelines(&["a", "b"], &["user-paused"]);
        let d = step(&mut g, &o);
        assert_eq!(g.status.as_ref().unwrap().paused_pipelines, ["a", "b"]);
        assert_eq!(d.actions, [Action::Pause(vec!["a".into(), "b".into()])]);
        assert_eq!(d.events[0].reason, "PipelinesPaused");

        // Both reached maintenance mode: on to Core Hub.
        o.pipelines = pipelines(&[], &["a", "b", "user-paused"]);
        let d = step(&mut g, &o);
        assert!(d.actions.is_empty());
        assert_eq!(update(&g).step, CoreHub);
    }

    #[test]
    fn a_drain_timeout_resumes_and_refuses() {
        let (mut g, w) = drained_start();
        let mut o = obs(at(1), &w, None);
        o.pipelines = pipelines(&["a", "stuck"], &[]);
        step(&mut g, &o);
        let mut o = obs(at(301), &w, None);
        o.pipelines = pipelines(&["stuck"], &["a"]);
        let d = step(&mut g, &o);
        assert_eq!(d.events[0].reason, "DrainTimeout");
        assert!(d.events[0].message.contains("stuck"));
        assert_eq!(update(&g).step, Resume);
        assert_eq!(update(&g).outcome, Some(UpdateResult::Refused));
        let d = step(&mut g, &o);
        assert_eq!(d.actions, [Action::Resume(vec!["a".into()])]);
        assert_eq!(update(&g).resumed_pipelines, ["stuck"]);
    }

    #[test]
    fn core_hub_must_stay_ready_for_the_window() {
        let (mut g, w) = drained_start();
        let mut o = obs(at(1), &w, None);
        o.pipelines = pipelines(&[], &[]);
        step(&mut g, &o);
        assert_eq!(update(&g).step, CoreHub);
        let d = step(&mut g, &obs(at(2), &w, None));
        assert!(d.actions.contains(&Action::SetImage {
            kind: WorkloadKind::StatefulSet,
            name: "core-hub".into(),
            container: "c".into(),
            image: "molo17/gluesync-core-hub:2.3.2.2".into(),
        }));
        assert_eq!(d.events[0].reason, "CoreHubPatched");
        // Rolled out and ready: the window starts.
        let mut rolled = w.clone();
        for x in &mut rolled {
            if let Some(c) = update(&g).components.iter().find(|c| c.name == x.name)
                && let Some(to) = &c.to_image
            {
                x.image = to.clone();
                x.pods[0].image = to.clone();
            }
        }
        step(&mut g, &obs(at(3), &rolled, None));
        assert_eq!(update(&g).step, CoreHub, "the window has not passed");
        assert_eq!(planned(&g, "core-hub").stable_since, Some(at(3)));
        let d = step(&mut g, &obs(at(13), &rolled, None));
        assert_eq!(d.events[0].reason, "CoreHubUpdated");
        assert_eq!(update(&g).step, Resume);
    }

    #[test]
    fn a_crash_loop_fails_core_hub_at_once_and_rolls_it_back() {
        let (mut g, w) = drained_start();
        let mut o = obs(at(1), &w, None);
        o.pipelines = pipelines(&[], &[]);
        step(&mut g, &o);
        step(&mut g, &obs(at(2), &w, None));
        let mut crashing = w.clone();
        crashing[0].image = "molo17/gluesync-core-hub:2.3.2.2".into();
        crashing[0].ready = false;
        crashing[0].pods[0] = PodView {
            name: "core-hub-0".into(),
            image: "molo17/gluesync-core-hub:2.3.2.2".into(),
            ready: false,
            waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
            restarts: 1,
        };
        let d = step(&mut g, &obs(at(3), &crashing, None));
        assert_eq!(d.events[0].reason, "CoreHubFailed");
        assert_eq!(update(&g).step, CoreHubRollback);
        assert_eq!(update(&g).outcome, Some(UpdateResult::Failed));
        // The rollback sets the old image back and deletes the stuck pod of the failed revision.
        let d = step(&mut g, &obs(at(4), &crashing, None));
        assert!(d.actions.contains(&Action::SetImage {
            kind: WorkloadKind::StatefulSet,
            name: "core-hub".into(),
            container: "c".into(),
            image: "molo17/gluesync-core-hub:2.3.2.1".into(),
        }));
        assert!(d.actions.contains(&Action::DeletePod("core-hub-0".into())));
        // Back and ready: resume, then finish Failed without touching the modules.
        step(&mut g, &obs(at(5), &w, None));
        assert_eq!(update(&g).step, Resume);
        let mut o = obs(at(6), &w, None);
        o.pipelines = pipelines(&[], &[]);
        step(&mut g, &o);
        assert_eq!(update(&g).step, Finish);
        let d = step(&mut g, &obs(at(7), &w, None));
        let s = g.status.as_ref().unwrap();
        assert_eq!(s.phase, Some(Phase::Failed));
        let a = s.last_attempt.as_ref().unwrap();
        assert_eq!(a.result, UpdateResult::Failed);
        let r = |n: &str| a.results.iter().find(|r| r.name == n).unwrap().status;
        assert_eq!(r("core-hub"), ComponentResultStatus::RolledBack);
        assert_eq!(r("chronos"), ComponentResultStatus::Skipped);
        assert_eq!(d.events.last().unwrap().reason, "UpdateFailed");
        assert!(d.actions.is_empty());
    }

    #[test]
    fn history_keeps_the_newest_ten() {
        let mut g = platform(serde_json::json!({
            "version": "2.3.2.1",
            "modules": {"chronos": "0.3.3"},
            "stabilityWindowSeconds": 0,
        }));
        let entry = |i: usize| HistoryEntry {
            from: None,
            to: Some(format!("old-{i}")),
            result: UpdateResult::Succeeded,
            message: String::new(),
            request_id: None,
            started_at: None,
            finished_at: t("2026-01-01T00:00:00Z"),
            previous_images: Default::default(),
        };
        g.status = Some(GluesyncPlatformStatus {
            history: (0..10).map(entry).collect(),
            ..Default::default()
        });
        let w = install();
        for _ in 0..8 {
            step(&mut g, &obs(at(0), &w, None));
            if g.status.as_ref().unwrap().update.is_none() {
                break;
            }
        }
        let mut done = w.clone();
        done[2].image = "molo17/gluesync-chronos:0.3.3".into();
        done[2].pods[0].image = done[2].image.clone();
        for _ in 0..8 {
            if g.status.as_ref().unwrap().update.is_none() {
                break;
            }
            step(&mut g, &obs(at(100), &done, None));
        }
        let s = g.status.as_ref().unwrap();
        assert!(s.update.is_none());
        assert_eq!(s.history.len(), HISTORY_LIMIT);
        assert_eq!(s.history[0].to, None, "modules only");
        assert_eq!(s.history[1].to.as_deref(), Some("old-0"));
        assert_eq!(
            s.history[0]
                .previous_images
                .get("chronos")
                .map(String::as_str),
            Some("molo17/gluesync-chronos:0.3.2")
        );
    }
}
