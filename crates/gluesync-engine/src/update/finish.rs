//! The end of an update: `status.lastAttempt`, `status.history`, the phase and the closing event.

use super::{
    Decision, HISTORY_LIMIT, Observed,
    rollout::{is_core, not_attempted},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    api::version::ImageRef,
    api::{
        Attempt, ComponentResult, ComponentResultStatus, ComponentState, ComponentType,
        GluesyncPlatform, HistoryEntry, PipelineList, PlannedComponent, UpdateResult, UpdateStatus,
    },
    update::status,
};

fn version_of(image: &str) -> Option<String> {
    ImageRef::parse(image)
        .tag
        .map(|t| t.split('-').next().unwrap_or(&t).to_string())
}

/// Ends an update: its attempt and history entry, GKO's own update scheduled when it went well, the
/// phase, the closing event.
pub(super) fn finish(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: UpdateStatus,
    mut d: Decision,
) -> Decision {
    let now = obs.now.clone();
    let not_resumed = d.status.paused_pipelines.clone();
    let (result, message) = outcome(&u, &not_resumed);
    let gko = Gko { obs, result };
    let attempt = attempt(&u, &not_resumed, result, &message, &now, results(&u, &gko));
    let entry = history_entry(&u, result, &message, &now);
    let mut status = d.status.clone();
    status.update = None;
    if let Some(c) = u.components.iter().find(|c| gko.scheduled(c))
        && let Some(to) = &c.to_image
    {
        status.self_update = Some(super::selfupdate::scheduled(
            &c.name,
            &c.container,
            &c.from_image,
            to,
            &now,
        ));
    }
    status.last_attempt = Some(attempt);
    if super::mutated(super::Mutant::HistoryTwice) {
        status.history.insert(0, entry.clone());
    }
    status.history.insert(0, entry);
    status.history.truncate(HISTORY_LIMIT);
    if result == UpdateResult::Refused {
        status.phase = u.previous_phase;
        if super::mutated(super::Mutant::RefusedPhaseCurrent) {
            status.phase = Some(crate::api::Phase::Current);
        }
    }
    let done = GluesyncPlatform {
        status: Some(status),
        ..gsp.clone()
    };
    d.status = status::idle(&done, obs.workloads, &now);
    let (warning, reason) = match result {
        UpdateResult::Succeeded => (false, crate::api::Reason::UpdateSucceeded),
        UpdateResult::Degraded => (true, crate::api::Reason::UpdateDegraded),
        UpdateResult::Failed => (true, crate::api::Reason::UpdateFailed),
        UpdateResult::Refused => (true, crate::api::Reason::UpdateRefused),
    };
    d.event(warning, reason, message);
    if let Some(su) = d.status.self_update.clone() {
        d.event(
            false,
            crate::api::Reason::OperatorUpdateScheduled,
            format!(
                "GKO will update itself to {} after this update",
                version_of(&su.to_image).unwrap_or_default()
            ),
        );
        // The mark on GKO's Deployment, then (deciding again) the new image.
        d.actions.push(super::Action::SelfUpdate {
            name: su.name.clone(),
            container: su.container.clone(),
            image: None,
            phase: Some(su.phase),
        });
        d.requeue(std::time::Duration::from_millis(10));
    }
    d.again = false;
    d
}

/// The update's result and the message that says it: the outcome a step set, else Degraded when a
/// module was rolled back or a pipeline is not resumed yet, else Succeeded.
fn outcome(u: &UpdateStatus, not_resumed: &PipelineList) -> (UpdateResult, String) {
    let modules_failed: Vec<&PlannedComponent> = u
        .components
        .iter()
        .filter(|c| {
            !is_core(c) && matches!(c.state, ComponentState::RolledBack | ComponentState::Failed)
        })
        .collect();
    let result = match &u.outcome {
        Some(o) => o.result,
        None if !modules_failed.is_empty() || !not_resumed.is_empty() => UpdateResult::Degraded,
        None => UpdateResult::Succeeded,
    };
    let message = match result {
        UpdateResult::Succeeded => "update finished".to_string(),
        UpdateResult::Refused | UpdateResult::Failed => u
            .outcome
            .as_ref()
            .map_or_else(|| format!("{result:?}"), |o| o.message.clone()),
        UpdateResult::Degraded => {
            // Why the update stopped early, when it did (a deletion during Modules), then what it left.
            let mut parts: Vec<String> = u.outcome.iter().map(|o| o.message.clone()).collect();
            parts.extend(modules_failed.iter().map(|c| {
                format!(
                    "{} rolled back: {}",
                    c.name,
                    c.message.clone().unwrap_or_default()
                )
            }));
            if !not_resumed.is_empty() {
                parts.push(format!(
                    "{} pipelines not resumed yet (GKO keeps resuming them)",
                    not_resumed.len()
                ));
            }
            parts.join("; ")
        }
    };
    (result, message)
}

/// GKO's own part in the end of an update: it updates itself after an update that went well, unless
/// its image was changed meanwhile (a Helm upgrade of GKO during the update wins).
struct Gko<'a> {
    obs: &'a Observed<'a>,
    result: UpdateResult,
}

impl Gko<'_> {
    fn moved(&self, c: &PlannedComponent) -> bool {
        self.obs
            .workloads
            .iter()
            .find(|w| w.name == c.name)
            .is_none_or(|w| w.image != c.from_image)
    }

    fn scheduled(&self, c: &PlannedComponent) -> bool {
        c.component_type == ComponentType::Operator
            && c.state == ComponentState::Pending
            && c.to_image.is_some()
            && matches!(
                self.result,
                UpdateResult::Succeeded | UpdateResult::Degraded
            )
            && !self.moved(c)
    }
}

/// Each component's result, as `lastAttempt.results` lists them.
fn results(u: &UpdateStatus, gko: &Gko) -> Vec<ComponentResult> {
    u.components
        .iter()
        .map(|c| {
            let from = version_of(&c.from_image);
            let to = c.to_image.as_deref().and_then(version_of);
            let (status, msg) = match c.state {
                // GKO itself, after the update, only when it went well.
                ComponentState::Pending if gko.scheduled(c) => {
                    (ComponentResultStatus::Scheduled, c.message.clone())
                }
                ComponentState::Pending
                    if c.component_type == ComponentType::Operator && gko.moved(c) =>
                {
                    (
                        ComponentResultStatus::Skipped,
                        Some(
                            "GKO's image was changed during the update; GKO does not update itself"
                                .into(),
                        ),
                    )
                }
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
                    Some(not_attempted(gko.result)),
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
        .collect()
}

/// `status.lastAttempt`: every pipeline the update paused (resumed or not yet), sorted.
fn attempt(
    u: &UpdateStatus,
    not_resumed: &PipelineList,
    result: UpdateResult,
    message: &str,
    now: &Time,
    results: Vec<ComponentResult>,
) -> Attempt {
    let mut paused_all = u.resumed_pipelines.clone();
    paused_all.extend(not_resumed.iter().cloned());
    paused_all.make_mut().sort();
    Attempt {
        target: u.target.clone(),
        request_id: u.request_id.clone(),
        requested_by: u.requested_by.clone(),
        generation: Some(u.generation),
        result,
        message: message.to_string(),
        started_at: Some(u.started_at.clone()),
        finished_at: now.clone(),
        results,
        paused_pipelines: paused_all,
        resumed_pipelines: u.resumed_pipelines.clone(),
    }
}

/// The history entry: the Core Hub version before and after (the product docs' history). After a
/// rollback or a refusal, `to` is the version that still runs; the version asked for is in
/// `lastAttempt.target` and the message.
fn history_entry(
    u: &UpdateStatus,
    result: UpdateResult,
    message: &str,
    now: &Time,
) -> HistoryEntry {
    let to = match (&u.target, result) {
        (None, _) => None,
        (Some(target), UpdateResult::Succeeded | UpdateResult::Degraded) => {
            Some(target.split('-').next().unwrap_or(target).to_string())
        }
        (Some(_), UpdateResult::Failed | UpdateResult::Refused) => u.from.clone(),
    };
    HistoryEntry {
        generation: Some(u.generation),
        from: u.from.clone(),
        to,
        result,
        message: message.to_string(),
        request_id: u.request_id.clone(),
        requested_by: u.requested_by.clone(),
        started_at: Some(u.started_at.clone()),
        finished_at: now.clone(),
        previous_images: u
            .components
            .iter()
            .map(|c| (c.name.clone(), c.from_image.clone()))
            .collect(),
        steps: u.steps.clone(),
    }
}
