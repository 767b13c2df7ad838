//! Changing images: Core Hub and the agents, their rollback, then the modules one at a time, each with
//! its stability check.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    Action, Decision, Observed, millis, move_to, passed, plus, settle_outcome, up_to_second,
};
use crate::{
    api::{
        ComponentState, ComponentType, GluesyncPlatform, PlannedComponent, StableWindow,
        UpdateResult, UpdateStatus, UpdateStep, WorkloadKind,
    },
    update::observed::Workload,
};

/// Waiting reasons that fail a stability check at once.
const FAIL_FAST: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
];

/// Why a component the update did not reach was left, by the update's result.
pub(super) fn not_attempted(result: UpdateResult) -> String {
    match result {
        UpdateResult::Refused => "update refused",
        UpdateResult::Failed => "not attempted: Core Hub failed",
        _ => "not attempted",
    }
    .to_string()
}

pub(super) fn is_core(c: &PlannedComponent) -> bool {
    matches!(
        c.component_type,
        ComponentType::CoreHub | ComponentType::Agent
    )
}

/// Does the plan change Core Hub (or an agent)? Then its pipelines are paused first.
pub(super) fn core_hub_changes(u: &crate::api::UpdateStatus) -> bool {
    u.components
        .iter()
        .any(|c| is_core(c) && c.to_image.is_some())
}

/// The stability check of one component on `image`, until `deadline`: `Ok(true)` passed, `Ok(false)`
/// not yet, `Err` failed. Only container restarts inside the window count: a pod that restarted while
/// warming up, before it was ready, passes once it stays ready.
pub(super) fn stability(
    gsp: &GluesyncPlatform,
    c: &mut PlannedComponent,
    w: &Workload,
    image: &str,
    deadline: &Time,
    now: &Time,
    d: &mut Decision,
) -> Result<bool, String> {
    stable_on(
        gsp,
        &mut c.stable,
        w,
        &|p| p.image == image,
        w.image == image,
        deadline,
        now,
        d,
    )
}

/// The stability check of a workload whose pods on the change are those `changed` picks, and whose spec
/// carries the change when `spec_changed`; its window is kept in `stable`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stable_on(
    gsp: &GluesyncPlatform,
    stable: &mut Option<StableWindow>,
    w: &Workload,
    changed: &dyn Fn(&crate::update::observed::PodView) -> bool,
    spec_changed: bool,
    deadline: &Time,
    now: &Time,
    d: &mut Decision,
) -> Result<bool, String> {
    let window = gsp.spec.stability_window_seconds;
    let on_image = || w.pods.iter().filter(|p| changed(p));
    for pod in on_image() {
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
    // Pods are told apart by uid: one replaced under the same name is another pod.
    let key = |p: &crate::update::observed::PodView| {
        if p.uid.is_empty() {
            p.name.clone()
        } else {
            p.uid.clone()
        }
    };
    if spec_changed && w.ready {
        let restarts = on_image().map(|p| (key(p), p.restarts)).collect();
        let stable = stable.get_or_insert_with(|| StableWindow {
            since: up_to_second(now),
            restarts,
        });
        let restarted = on_image().any(|p| {
            stable
                .restarts
                .get(&key(p))
                .is_none_or(|before| p.restarts > *before)
        });
        if !restarted {
            let window_ms = window.max(0) * 1000;
            let stable_for = millis(&stable.since, now);
            if stable_for >= window_ms {
                return Ok(true);
            }
            d.requeue(Duration::from_millis((window_ms - stable_for) as u64 + 10));
            return Ok(false);
        }
    }
    // Not ready, or a container restarted inside the window: the window starts again.
    *stable = None;
    if passed(deadline, now) {
        let why = w
            .pods
            .iter()
            .find_map(|p| {
                p.waiting
                    .as_ref()
                    .map(|(r, m)| format!("pod {} waits: {r} {m}", p.name))
            })
            .unwrap_or_else(|| "not every replica is updated and ready".into());
        return Err(format!(
            "not ready within {} s ({why})",
            gsp.spec.stability_timeout_seconds
        ));
    }
    d.requeue(Duration::from_secs(1));
    Ok(false)
}

/// The write of `c`'s new image, if it has one (the deliberate bugs' shortcut past the steps).
pub(super) fn new_image_write(c: &PlannedComponent) -> Option<Action> {
    c.to_image.as_ref().map(|to| Action::SetImage {
        kind: c.kind,
        name: c.name.clone(),
        container: c.container.clone(),
        image: to.clone(),
    })
}

/// Makes sure the workload runs `image`.
fn ensure_image(c: &PlannedComponent, w: &Workload, image: &str, actions: &mut Vec<Action>) {
    if w.image != image {
        actions.push(Action::SetImage {
            kind: c.kind,
            name: c.name.clone(),
            container: c.container.clone(),
            image: image.to_string(),
        });
    }
}

/// Marks Core Hub and the agents for rollback: those whose image was changed go back, those not
/// reached yet are skipped (saying why, by the update's result). The result: Failed when something
/// must be rolled back, else `otherwise`.
pub(super) fn start_core_rollback(u: &mut UpdateStatus, otherwise: UpdateResult) -> UpdateResult {
    let mut any = false;
    let mut skipped = vec![];
    for (i, c) in u
        .components
        .iter_mut()
        .enumerate()
        .filter(|(_, c)| is_core(c))
    {
        match c.state {
            ComponentState::Patched | ComponentState::Updated => {
                c.state = ComponentState::RollingBack;
                c.stable = None;
                any = true;
            }
            ComponentState::Pending => {
                c.state = ComponentState::Skipped;
                skipped.push(i);
            }
            _ => {}
        }
    }
    let result = if any { UpdateResult::Failed } else { otherwise };
    for i in skipped {
        u.components[i].message = Some(not_attempted(result));
    }
    result
}

pub(super) fn core_hub(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
    let mut failures = vec![];
    let mut all_updated = true;
    let mut patched_now = false;
    // The image writes wait for the verdict: a decision that gives the new images up writes none of
    // them. Carried out after the status says Rollback (by this GKO, or landing late from one that lost
    // the Lease meanwhile), such a write would leave Core Hub on the new image once it is rolled back.
    let mut writes = vec![];
    for c in u.components.iter_mut().filter(|c| is_core(c)) {
        let Some(to) = c.to_image.clone() else {
            continue;
        };
        if !matches!(c.state, ComponentState::Pending | ComponentState::Patched) {
            continue;
        }
        let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) else {
            failures.push(format!("{} is gone", c.name));
            continue;
        };
        ensure_image(c, w, &to, &mut writes);
        if c.state == ComponentState::Pending {
            c.state = ComponentState::Patched;
            c.patched_at = Some(now.clone());
            patched_now = true;
        }
        match stability(gsp, c, w, &to, &deadline, now, d) {
            Ok(true) => c.state = ComponentState::Updated,
            Ok(false) => all_updated = false,
            Err(why) => {
                c.message = Some(why.clone());
                failures.push(format!("{}: {why}", c.name));
            }
        }
    }
    if patched_now {
        d.event(
            false,
            crate::api::Reason::CoreHubPatched,
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
        d.event(true, crate::api::Reason::CoreHubFailed, message.clone());
        start_core_rollback(u, UpdateResult::Failed);
        settle_outcome(
            u,
            UpdateResult::Failed,
            format!("Core Hub failed its stability check: {why}"),
        );
        d.status.message = Some(message);
        move_to(gsp, u, UpdateStep::CoreHubRollback, now, d);
        return;
    }
    d.actions.extend(writes);
    if all_updated {
        let message = format!("Core Hub {} passed its stability check", target(gsp, u));
        d.event(false, crate::api::Reason::CoreHubUpdated, message.clone());
        d.status.message = Some(format!(
            "{message}; taking pipelines out of maintenance mode"
        ));
        move_to(gsp, u, UpdateStep::Resume, now, d);
        return;
    }
    d.status.message = Some(format!(
        "waiting for Core Hub {} to stay ready for {} s",
        target(gsp, u),
        gsp.spec.stability_window_seconds
    ));
}

/// The Core Hub version this update goes to (the spec may have moved on since it started).
fn target(gsp: &GluesyncPlatform, u: &UpdateStatus) -> String {
    u.target.clone().unwrap_or_else(|| gsp.spec.version.clone())
}

/// Puts a component back on its previous image until `deadline`; `Some(true)` once it runs it and is
/// ready, `Some(false)` when the deadline passed first.
fn roll_back(
    c: &PlannedComponent,
    w: &Workload,
    deadline: &Time,
    now: &Time,
    d: &mut Decision,
) -> Option<bool> {
    if super::mutated(super::Mutant::NoRollback) {
        return Some(true);
    }
    let from = c.from_image.clone();
    ensure_image(c, w, &from, &mut d.actions);
    // A StatefulSet does not replace a pod of the failed revision that never became ready.
    if w.kind == WorkloadKind::StatefulSet {
        for pod in w.pods.iter().filter(|p| p.image != from && !p.ready) {
            d.actions.push(Action::DeletePod(pod.name.clone()));
        }
    }
    if w.image == from && w.ready && w.pods.iter().all(|p| p.image == from) {
        return Some(true);
    }
    if passed(deadline, now) {
        return Some(false);
    }
    d.requeue(Duration::from_secs(1));
    None
}

fn rollback_failed(c: &mut PlannedComponent) {
    c.state = ComponentState::Failed;
    c.message = Some(format!(
        "{}; the rollback to {} did not become ready either",
        c.message.clone().unwrap_or_default(),
        c.from_image
    ));
}

pub(super) fn rollback(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
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
        match roll_back(c, w, &deadline, now, d) {
            Some(true) => c.state = ComponentState::RolledBack,
            Some(false) => rollback_failed(c),
            None => done = false,
        }
    }
    if done {
        d.status.message = Some(
            "Core Hub is back on its previous version; taking pipelines out of maintenance mode"
                .into(),
        );
        move_to(gsp, u, UpdateStep::Resume, now, d);
    } else {
        d.status.message = Some(format!(
            "rolling Core Hub back to {}",
            u.from.clone().unwrap_or_default()
        ));
    }
}

/// The deliberate bug `ModulesAtOnce` (tests only): every pending module is patched at once.
fn modules_at_once(obs: &Observed, u: &mut UpdateStatus, d: &mut Decision) {
    for c in u.components.iter_mut().filter(|c| {
        !is_core(c)
            && c.component_type != ComponentType::Operator
            && c.state == ComponentState::Pending
    }) {
        if let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) {
            ensure_image(
                c,
                w,
                &c.to_image.clone().unwrap_or_default(),
                &mut d.actions,
            );
            c.state = ComponentState::Patched;
            c.patched_at = Some(obs.now.clone());
        }
    }
}

pub(super) fn modules(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let timeout = gsp.spec.stability_timeout_seconds;
    if super::mutated(super::Mutant::ModulesAtOnce) {
        modules_at_once(obs, u, d);
    }
    let Some(c) = u.components.iter_mut().find(|c| {
        !is_core(c)
            && c.component_type != ComponentType::Operator
            && matches!(
                c.state,
                ComponentState::Pending | ComponentState::Patched | ComponentState::RollingBack
            )
    }) else {
        d.status.message = Some("modules done".into());
        move_to(gsp, u, UpdateStep::Finish, now, d);
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
            ensure_image(c, w, &to, &mut d.actions);
            if c.state == ComponentState::Pending {
                c.state = ComponentState::Patched;
                c.patched_at = Some(now.clone());
            }
            let deadline = plus(c.patched_at.as_ref().unwrap_or(now), timeout);
            match stability(gsp, c, w, &to, &deadline, now, d) {
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
                    c.stable = None;
                    c.patched_at = Some(now.clone());
                    d.again = true;
                }
            }
        }
        ComponentState::RollingBack => {
            let deadline = plus(c.patched_at.as_ref().unwrap_or(now), timeout);
            match roll_back(c, w, &deadline, now, d) {
                Some(true) => {
                    c.state = ComponentState::RolledBack;
                    d.event(
                        true,
                        crate::api::Reason::ModuleRolledBack,
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
                    rollback_failed(c);
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
