//! The user's terms for when an update changes things: maintenance windows and a person's approval.
//!
//! Both are gates before the first change (the drain, or the modules when Core Hub stays); nothing is
//! paused or changed while an update waits at one. Without `approval: manual`, an update asked for outside
//! every window does not start at all (the phase stays, `Reconciling` says `WaitingForMaintenanceWindow`,
//! `status.nextWindow` says when). Under `approval: manual` it starts, runs Preflight, Snapshot (and
//! PrePull), and waits in the step `Waiting`: first for its approval, then for a window in which it fits.
//! A window never interrupts an update that runs.

use jiff::{Timestamp, Zoned, tz::TimeZone};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

pub use super::windows::{fit, problem, when};
use super::{Decision, Observed, move_to, settle_outcome};
use crate::api::{
    APPROVE_ANNOTATION, Approval, GluesyncPlatform, MaintenanceWindow, Reason, UpdateResult,
    UpdateStatus, UpdateStep, ids::digest,
};

/// Condition reason while an update waits for its approval.
pub const WAITING_FOR_APPROVAL: &str = "WaitingForApproval";
/// Condition reason while an update waits for a maintenance window.
pub const WAITING_FOR_WINDOW: &str = "WaitingForMaintenanceWindow";

/// The paused time the windows must fit, from the past updates (0 when none recorded its steps).
fn need(gsp: &GluesyncPlatform, core_hub_changes: bool) -> i64 {
    gsp.status
        .as_ref()
        .and_then(|s| super::estimate::update_seconds(&s.history, core_hub_changes))
        .map_or(0, |(_, paused, _)| paused)
}

/// The time `t` in each zone of the windows other than UTC (in the order the windows name them), after the
/// UTC one: ` (Sat 22:00 Europe/Rome)`, ` (Sat 22:00 Europe/Rome, Sat 16:00 America/New_York)`; empty when
/// every window is in UTC.
fn local(t: Timestamp, windows: &[MaintenanceWindow]) -> String {
    let mut zones: Vec<&str> = Vec::new();
    for w in windows {
        if w.time_zone != "UTC" && !zones.contains(&w.time_zone.as_str()) {
            zones.push(&w.time_zone);
        }
    }
    let said: Vec<String> = zones
        .into_iter()
        .filter_map(|zone| {
            let z: Zoned = t.to_zoned(TimeZone::get(zone).ok()?);
            Some(format!("{} {zone}", z.strftime("%a %H:%M")))
        })
        .collect();
    if said.is_empty() {
        String::new()
    } else {
        format!(" ({})", said.join(", "))
    }
}

/// `n` minutes, in words: `1 minute`, `90 minutes`.
fn minutes(n: i64) -> String {
    if n == 1 {
        "1 minute".into()
    } else {
        format!("{n} minutes")
    }
}

/// Without approval: when the update the spec asks for may start, if not now. `None`: now (or no
/// window).
pub(super) fn start_wait(gsp: &GluesyncPlatform, now: &Time) -> Option<Result<Timestamp, String>> {
    let windows = &gsp.spec.maintenance_windows;
    if windows.is_empty() || gsp.spec.approval == Approval::Manual {
        return None;
    }
    match fit(windows, now.0, need(gsp, true)) {
        Ok(t) if t <= now.0 || super::mutated(super::Mutant::IgnoreGate) => None,
        r => Some(r),
    }
}

/// The idle platform whose update waits for a window: said in the status, an event when the wait begins
/// (or its window changes), and a look again when the window opens.
pub(super) fn show_start_wait(
    gsp: &GluesyncPlatform,
    now: &Time,
    wait: Result<Timestamp, String>,
    d: &mut Decision,
) {
    let generation = gsp.metadata.generation.unwrap_or(0);
    let what = format!("the update to Core Hub {}", gsp.spec.version);
    let (message, next) = window_message(gsp, &what, wait, true);
    let previous = gsp.status.as_ref();
    let before = previous.and_then(|s| s.next_window.clone());
    d.status.next_window = next.clone();
    if before != next || previous.and_then(|s| s.message.as_deref()) != Some(message.as_str()) {
        d.event(false, Reason::WaitingForMaintenanceWindow, message.clone());
    }
    d.status.message = Some(message.clone());
    let previous = d.status.conditions.clone();
    d.status.conditions = [
        (super::status::READY, false),
        (super::status::RECONCILING, true),
        (super::status::STALLED, false),
    ]
    .into_iter()
    .map(|(t, v)| {
        super::status::condition(
            &previous,
            t,
            v,
            WAITING_FOR_WINDOW,
            &message,
            generation,
            now,
        )
    })
    .collect();
    d.status.observed_generation = Some(generation);
    match next {
        Some(t) => d.requeue_at(&t, now),
        None => d.requeue(std::time::Duration::from_secs(3600)),
    }
}

/// The words for a wait for a window, and the window's start.
fn window_message(
    gsp: &GluesyncPlatform,
    what: &str,
    wait: Result<Timestamp, String>,
    core_hub_changes: bool,
) -> (String, Option<Time>) {
    let windows = &gsp.spec.maintenance_windows;
    match wait {
        Ok(t) => {
            let need = need(gsp, core_hub_changes);
            let fits = if need > 0 {
                format!(
                    "; it needs about {need} s with the pipelines paused (the past updates), so it starts where that fits"
                )
            } else {
                String::new()
            };
            (
                format!(
                    "{what} waits for the maintenance window at {}{}{fits}",
                    when(t),
                    local(t, windows)
                ),
                Some(Time(t)),
            )
        }
        Err(e) => (format!("{what} waits for a maintenance window: {e}"), None),
    }
}

/// The value of the approve annotation that approves this plan, made when GKO makes the plan: the
/// `spec.requestID` that brought it (else `generation-<N>`), then a digest of the platform, the generation,
/// the target and the instant the plan was made, to the nanosecond. So an approval names one plan alone:
/// one given to an earlier plan (the same requestID or generation written again into a new spec) never
/// approves a later one, and none can be written before its plan exists.
pub fn approval_id(
    gsp: &GluesyncPlatform,
    request_id: Option<&str>,
    brought_request: bool,
    now: &Time,
) -> Option<String> {
    (gsp.spec.approval == Approval::Manual).then(|| {
        let generation = gsp.metadata.generation.unwrap_or(0);
        let name = match request_id {
            Some(r) if brought_request => r.to_string(),
            _ => format!("generation-{generation}"),
        };
        let nonce = digest(&[
            gsp.uid().unwrap_or_default(),
            generation.to_string(),
            gsp.spec.version.clone(),
            name.clone(),
            now.0.as_nanosecond().to_string(),
        ]);
        format!("{name}-{}", &nonce[..10])
    })
}

/// Is the update approved (or is no approval asked)?
pub fn approved(gsp: &GluesyncPlatform, u: &UpdateStatus) -> bool {
    match &u.approval_id {
        None => true,
        Some(id) => gsp.annotations().get(APPROVE_ANNOTATION) == Some(id),
    }
}

/// Does the update wait at a gate (an approval, a window) before its first change?
pub fn gated(gsp: &GluesyncPlatform) -> bool {
    gsp.spec.approval == Approval::Manual || !gsp.spec.maintenance_windows.is_empty()
}

/// The condition reason of an update in `Waiting`.
pub fn reason(gsp: &GluesyncPlatform, u: &UpdateStatus) -> &'static str {
    if approved(gsp, u) {
        WAITING_FOR_WINDOW
    } else {
        WAITING_FOR_APPROVAL
    }
}

/// The step `Waiting`: its deadline is the approval's, under `approval: manual`.
pub(super) fn waiting_step(gsp: &GluesyncPlatform, now: &Time) -> crate::api::Step {
    crate::api::Step::Waiting {
        since: now.clone(),
        deadline: (gsp.spec.approval == Approval::Manual)
            .then(|| super::plus(now, gsp.spec.approval_timeout_minutes * 60)),
    }
}

/// What Snapshot moves to when Core Hub changes (`Drain`) or not (`Modules`): `Waiting` first when the
/// spec has a gate, with an event that says what it waits for.
pub(super) fn after_snapshot(
    gsp: &GluesyncPlatform,
    u: &mut UpdateStatus,
    next: UpdateStep,
    now: &Time,
    d: &mut Decision,
) {
    if !gated(gsp) {
        return move_to(gsp, u, next, now, d);
    }
    move_to(gsp, u, UpdateStep::Waiting, now, d);
    if let Some(id) = u.approval_id.clone().filter(|_| !approved(gsp, u)) {
        let m = approval_message(gsp, &id);
        d.event(false, Reason::WaitingForApproval, m.clone());
        d.status.message = Some(m);
    }
}

fn approval_message(gsp: &GluesyncPlatform, id: &str) -> String {
    format!(
        "waiting for approval of the update to {} (nothing is paused or changed): `kubectl gluesync \
         approve`, or the annotation {APPROVE_ANNOTATION}={id}; refused after {}",
        gsp.spec.version,
        minutes(gsp.spec.approval_timeout_minutes)
    )
}

/// A new spec (or request) while nothing is changed yet (in `PrePull` or `Waiting`): the plan is made
/// again, from Preflight. True when it was.
pub(super) fn replanned(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) -> bool {
    let generation = gsp.metadata.generation.unwrap_or(0);
    if generation == u.generation && gsp.spec.request_id == u.request_id {
        return false;
    }
    let brought = gsp.spec.request_id.is_some() && gsp.spec.request_id != u.request_id;
    let replaced = super::fresh(gsp, obs, brought);
    let m = format!(
        "the spec changed while the update waited: the plan is made again for Core Hub {}",
        gsp.spec.version
    );
    d.event(false, Reason::UpdatePlanReplaced, m.clone());
    d.status.message = Some(m);
    d.status.next_window = None;
    *u = replaced;
    d.again = true;
    true
}

/// The step `Waiting`: a new spec replaces the plan; an approval that does not come in time refuses the
/// update; once approved, the first maintenance window it fits in lets it go on.
pub(super) fn waiting(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let core_hub_changes = super::rollout::core_hub_changes(u);
    let next = if core_hub_changes {
        UpdateStep::Drain
    } else {
        UpdateStep::Modules
    };
    if replanned(gsp, obs, u, d) {
        return;
    }
    if let Some(id) = u.approval_id.clone()
        && !approved(gsp, u)
        && !super::mutated(super::Mutant::IgnoreGate)
    {
        let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
        if super::passed(&deadline, now) {
            let why = format!(
                "not approved within {} (approval: manual); nothing was paused or changed",
                minutes(gsp.spec.approval_timeout_minutes)
            );
            settle_outcome(u, UpdateResult::Refused, why.clone());
            d.status.message = Some(why);
            d.status.next_window = None;
            return move_to(gsp, u, UpdateStep::Finish, now, d);
        }
        d.status.message = Some(approval_message(gsp, &id));
        d.requeue_at(&deadline, now);
        return;
    }
    // Approved: said once, when GKO reads the approval, whether a window is open or not.
    if let Some(id) = &u.approval_id
        && u.approved_at.is_none()
    {
        u.approved_at = Some(now.clone());
        d.event(
            false,
            Reason::UpdateApproved,
            format!(
                "the update to {} was approved ({APPROVE_ANNOTATION}={id})",
                gsp.spec.version
            ),
        );
    }
    let windows = &gsp.spec.maintenance_windows;
    let wait = (!windows.is_empty())
        .then(|| fit(windows, now.0, need(gsp, core_hub_changes)))
        .filter(|w| !matches!(w, Ok(t) if *t <= now.0))
        .filter(|_| !super::mutated(super::Mutant::IgnoreGate));
    let Some(wait) = wait else {
        d.status.next_window = None;
        d.status.message = Some(match next {
            UpdateStep::Drain => "putting running pipelines into maintenance mode".into(),
            _ => "Core Hub stays; updating modules".into(),
        });
        return move_to(gsp, u, next, now, d);
    };
    let (m, at) = window_message(gsp, "the update", wait, core_hub_changes);
    if d.status.next_window != at {
        d.event(false, Reason::WaitingForMaintenanceWindow, m.clone());
    }
    d.status.next_window = at.clone();
    d.status.message = Some(m);
    match at {
        Some(t) => d.requeue_at(&t, now),
        None => d.requeue(std::time::Duration::from_secs(3600)),
    }
}
