//! The pipelines GKO pauses, and the promise that it resumes every one of them.
//!
//! `status.pausedPipelines` is a ledger. A pipeline goes into it before GKO asks Core Hub to put it into
//! maintenance mode, and leaves it only when GKO has asked Core Hub to take it out (at least once,
//! whatever the latest list says) and a list of pipelines fetched after that request shows it running
//! (or no longer lists it). Drain fills the ledger; Resume empties it; whatever is left when Resume's
//! deadline passes, or when the update ends, GKO keeps resuming between updates, with the ledger in the
//! status, a message and a Warning event while it lasts.
//!
//! Late arrivals: a pipeline that was asked to enter maintenance mode and had not reached it when the
//! drain gave up may still reach it later (Core Hub accepted the request and applies it late). Such
//! pipelines go into `status.lateMaintenance` for `max(drainTimeoutSeconds, 60)` seconds after the drain
//! gave up; one that shows up in maintenance mode in that time goes back into the ledger and is resumed.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Decision, Mutant, Observed, move_to, mutated, passed, plus, settle_outcome};
use crate::{
    api::{
        GluesyncPlatform, LateMaintenance, PipelineId, PipelineList, UpdateResult, UpdateStatus,
        UpdateStep, ids::IdSet,
    },
    update::corehub::{Listing, Pipeline, Work, in_maintenance},
    update::status::{self, READY, RECONCILING, STALLED},
};

/// How often Core Hub is listed while pipelines drain or resume.
const POLL_FAST: Duration = Duration::from_millis(250);
/// How often Core Hub is listed while GKO resumes leftovers between updates.
const POLL_LEFTOVERS: Duration = Duration::from_secs(1);
/// How often Core Hub is listed while only late maintenance requests are watched for.
const POLL_WATCH: Duration = Duration::from_secs(5);
/// Shortest time late maintenance requests are watched for after a drain gave up.
const LATE_WINDOW_MIN_SECONDS: i64 = 60;
/// Condition reason while leftovers are being resumed between updates.
const NOT_RESUMED: crate::api::Reason = crate::api::Reason::PipelinesNotResumed;

/// The background epoch of an update: maintenance requests are sent once per epoch.
pub(super) fn epoch(u: &UpdateStatus) -> String {
    format!("update/{}/{}", u.generation, u.started_at.0.as_second())
}

/// The epoch of resuming leftovers between updates.
const LEFTOVERS: &str = "leftovers";

/// Up to 20 ids, for messages.
pub(super) fn sample(ids: &[impl AsRef<str>]) -> String {
    let mut s = ids
        .iter()
        .take(20)
        .map(AsRef::as_ref)
        .collect::<Vec<&str>>()
        .join(", ");
    if ids.len() > 20 {
        s.push_str(&format!(", and {} more", ids.len() - 20));
    }
    s
}

/// The ids of `ids` that `list` does not hold, in their order. (The set it makes is gone when it returns:
/// at 100,000 pipelines two at once would count at the peak.)
fn not_in(ids: &[PipelineId], list: &[PipelineId]) -> Vec<PipelineId> {
    let known = IdSet::new(list);
    ids.iter()
        .filter(|id| !known.contains(id))
        .cloned()
        .collect()
}

/// The latest list of pipelines of this epoch, fetched at or after `since`.
fn listing<'a>(obs: &'a Observed, epoch: &str, since: Option<&Time>) -> Option<&'a Listing> {
    (obs.corehub.epoch == epoch)
        .then_some(obs.corehub.listing.as_ref())
        .flatten()
        .filter(|l| since.is_none_or(|s| l.at.0 >= s.0))
}

/// The work for Core Hub: these pipelines asked in, those asked out.
fn work(
    obs: &Observed,
    epoch: String,
    enter: PipelineList,
    exit: PipelineList,
    poll: Duration,
) -> Option<Work> {
    Some(Work {
        target: obs.target.clone()?,
        epoch,
        enter,
        asked: PipelineList::new(),
        exit,
        poll,
    })
}

/// Drain's work: the running pipelines asked in, except those the update asked already (a GKO that
/// stopped may have sent their request, and none is asked twice in one update).
fn drain_work(
    obs: &Observed,
    epoch: String,
    u: &UpdateStatus,
    running: Vec<PipelineId>,
) -> Option<Work> {
    let mut w = work(obs, epoch, running.into(), PipelineList::new(), POLL_FAST)?;
    w.asked = u.step.asked_pipelines().cloned().unwrap_or_default();
    Some(w)
}

/// Why Core Hub could not be asked, if the worker says so.
fn corehub_error(obs: &Observed, epoch: &str) -> Option<String> {
    if obs.corehub.epoch != epoch {
        return None;
    }
    match obs.corehub.listing.as_ref().map(|l| &l.result) {
        Some(Err(e)) => Some(e.clone()),
        _ => obs.corehub.error.clone(),
    }
}

pub(super) fn drain(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    // A Drain written by a release that kept no record of what it asked (0.3.0): every release records a
    // pipeline in the ledger before it asks it in, so the ledger's pipelines count as asked.
    if let crate::api::Step::Drain {
        asked_pipelines: asked @ None,
        ..
    } = &mut u.step
    {
        *asked = Some(d.status.paused_pipelines.clone());
    }
    let epoch = epoch(u);
    let since = u.step.since().clone();
    let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
    let list = match listing(obs, &epoch, Some(&since)).map(|l| &l.result) {
        Some(Ok(list)) => Some(list.clone()),
        Some(Err(e)) => {
            d.status.message = Some(format!("waiting for Core Hub to list pipelines: {e}"));
            None
        }
        None => {
            d.status.message = Some("asking Core Hub for the running pipelines".into());
            None
        }
    };
    let Some(list) = list else {
        if passed(&deadline, now) {
            let why = corehub_error(obs, &epoch).unwrap_or_else(|| "no answer".into());
            return drain_timeout(
                gsp,
                obs,
                u,
                d,
                None,
                format!("Core Hub could not be asked ({why})"),
            );
        }
        d.corehub = drain_work(obs, epoch, u, vec![]);
        d.requeue_at(&deadline, now);
        return;
    };
    // Nothing is paused (nor any image changed after the drain) before GKO's finalizer is on: deleting
    // the resource must resume what GKO paused. It went on with an earlier write (the pre-pull's, or
    // this step's first); the listing goes on meanwhile.
    if !has_finalizer(gsp) && !mutated(Mutant::PauseBeforeFinalizer) {
        d.status.message = Some("putting GKO's finalizer on the GluesyncPlatform".into());
        d.corehub = drain_work(obs, epoch, u, vec![]);
        d.requeue(std::time::Duration::from_millis(200));
        return;
    }
    // Each once, in the order Core Hub lists them: an id listed twice is recorded and asked once.
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    let running: Vec<PipelineId> = list
        .iter()
        .filter(|p| !p.is_in_maintenance_mode && seen.insert(&p.id))
        .map(|p| p.id.clone())
        .collect();
    drop(seen);
    let drained = running.is_empty()
        || (mutated(Mutant::PatchBeforeDrained) && list.iter().any(|p| p.is_in_maintenance_mode));
    if drained {
        // Asked once: nothing is asked in after Drain, so the record goes with the step (and its spilled
        // shards with it).
        super::mutants::drop_from_ledger(&mut d.status.paused_pipelines);
        d.status.message = Some(format!(
            "{} pipelines in maintenance mode; changing the Core Hub image",
            d.status.paused_pipelines.len()
        ));
        move_to(gsp, u, UpdateStep::CoreHub, now, d);
        return;
    }
    if passed(&deadline, now) {
        return drain_timeout(
            gsp,
            obs,
            u,
            d,
            Some(&list),
            format!(
                "{} pipelines did not reach maintenance mode ({})",
                running.len(),
                sample(&running)
            ),
        );
    }
    // Record every running pipeline before asking Core Hub to pause it.
    let new = not_in(&running, &d.status.paused_pipelines);
    if !new.is_empty() && !mutated(Mutant::PauseBeforeRecord) {
        let more = if d.status.paused_pipelines.is_empty() {
            ""
        } else {
            " more"
        };
        d.event(
            false,
            crate::api::Reason::PipelinesPaused,
            format!(
                "asked {}{more} running pipelines to enter maintenance mode",
                new.len()
            ),
        );
        d.status.paused_pipelines.extend(new);
    }
    // And in the update's own record, which a GKO taking over reads: asked once, never again.
    let first = not_in(&running, u.step.asked_pipelines().map_or(&[], |l| &l[..]));
    if !mutated(Mutant::PauseBeforeRecord)
        && let Some(asked) = u.step.asked_pipelines_mut()
    {
        asked.extend(first);
    }
    d.status.message = Some(format!(
        "waiting for {} of {} pipelines to reach maintenance mode",
        running.len(),
        d.status.paused_pipelines.len()
    ));
    d.corehub = drain_work(obs, epoch, u, running);
    d.requeue_at(&deadline, now);
}

fn has_finalizer(gsp: &GluesyncPlatform) -> bool {
    gsp.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == crate::api::FINALIZER)
}

/// A drain that stops before every pipeline is in maintenance mode: those asked in but not seen in
/// maintenance mode by `list` (every one, without a list) may still have their request land. The
/// late-maintenance watch covers them for `drainTimeoutSeconds` (at least a minute) from `now`; returns
/// that window in seconds.
fn watch_late(
    gsp: &GluesyncPlatform,
    d: &mut Decision,
    list: Option<&[Pipeline]>,
    now: &Time,
) -> i64 {
    let seen = list.map(in_maintenance).unwrap_or_default();
    let late: Vec<PipelineId> = d
        .status
        .paused_pipelines
        .iter()
        .filter(|id| !seen.contains(id.as_str()))
        .cloned()
        .collect();
    let window = gsp.spec.drain_timeout_seconds.max(LATE_WINDOW_MIN_SECONDS);
    if !late.is_empty() && !mutated(Mutant::OldResume) {
        d.status.late_maintenance = Some(LateMaintenance {
            pipelines: late.into(),
            until: plus(now, window),
        });
    }
    window
}

/// A drain stopped because the GluesyncPlatform is deleted: what it asked may still land, as after a
/// drain timeout. Every pipeline of the ledger is watched; those a listing shows in maintenance mode leave
/// the watch in the same decision (Resume settles the ledger against the same listing).
pub(super) fn drain_cancelled(gsp: &GluesyncPlatform, obs: &Observed, d: &mut Decision) {
    watch_late(gsp, d, None, &obs.now);
}

fn drain_timeout(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
    list: Option<&[Pipeline]>,
    what: String,
) {
    let now = &obs.now;
    let timeout = gsp.spec.drain_timeout_seconds;
    let window = watch_late(gsp, d, list, now);
    let message = format!(
        "{what} within {timeout} s; resuming every pipeline GKO asked to pause, and watching {window} s more \
         for maintenance requests Core Hub applies late; the update is refused"
    );
    d.event(true, crate::api::Reason::DrainTimeout, message.clone());
    if mutated(Mutant::RefusedPatches)
        && let Some(c) = u.components.iter().find(|c| super::rollout::is_core(c))
    {
        d.actions.extend(super::rollout::new_image_write(c));
    }
    settle_outcome(
        u,
        UpdateResult::Refused,
        format!("{what} within {timeout} s"),
    );
    d.status.message = Some(message);
    move_to(gsp, u, UpdateStep::Resume, now, d);
}

/// What of the ledger Core Hub has resumed: asked out this epoch, and listed running (or not listed at
/// all) by a list fetched after the request was sent. Late arrivals go back into the ledger.
/// `drained_before`: the update's drain saw every ledger pipeline outside `lateMaintenance` in
/// maintenance mode, and its Resume began then (after a drain timeout or a deletion too: what the drain
/// did not see in maintenance mode is watched as late); a listing taken after that which shows one out of
/// maintenance mode releases it, whoever asked it out (a GKO that stopped mid-Resume, or the user), so
/// a GKO taking over does not ask it out a second time.
fn settle_ledger(
    obs: &Observed,
    epoch: &str,
    d: &mut Decision,
    drained_before: Option<&Time>,
) -> Vec<PipelineId> {
    let Some(Listing {
        at,
        result: Ok(list),
    }) = listing(obs, epoch, None)
    else {
        return vec![];
    };
    let paused = in_maintenance(list);
    if let Some(late) = &d.status.late_maintenance {
        let landed: Vec<PipelineId> = {
            let owed = IdSet::new(&*d.status.paused_pipelines);
            late.pipelines
                .iter()
                .filter(|id| paused.contains(id) && !owed.contains(id))
                .cloned()
                .collect()
        };
        d.status.paused_pipelines.extend(landed);
        // A watched pipeline seen in maintenance mode: its request has landed (each is asked in once),
        // and nothing of it is left to watch for. The watch ends when nothing is left in it.
        if late.pipelines.iter().any(|id| paused.contains(id.as_str())) {
            let still: Vec<PipelineId> = late
                .pipelines
                .iter()
                .filter(|id| !paused.contains(id.as_str()))
                .cloned()
                .collect();
            d.status.late_maintenance = if still.is_empty() {
                None
            } else {
                Some(LateMaintenance {
                    pipelines: still.into(),
                    until: late.until.clone(),
                })
            };
        }
    }
    // A pipeline whose enter may still land late is released only once this GKO asked it out.
    let late: Vec<PipelineId> = d
        .status
        .late_maintenance
        .as_ref()
        .map(|l| l.pipelines.to_vec())
        .unwrap_or_default();
    let late = IdSet::new(&late);
    let out_since_drained = |id: &PipelineId| {
        drained_before.is_some_and(|since| at.0 > since.0) && !late.contains(id.as_str())
    };
    // In maintenance mode, or not: a pipeline Core Hub no longer lists is not in maintenance mode.
    let (released, owed): (Vec<PipelineId>, Vec<PipelineId>) =
        d.status.paused_pipelines.iter().cloned().partition(|id| {
            let asked_out = obs
                .corehub
                .exits
                .get(id)
                .is_some_and(|asked| asked.0 < at.0)
                || out_since_drained(id)
                || mutated(Mutant::OldResume);
            asked_out && !paused.contains(id.as_str())
        });
    if !released.is_empty() {
        d.status.paused_pipelines = owed.into();
    }
    released
}

pub(super) fn resume(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let epoch = epoch(u);
    let next = if u.outcome.is_some() {
        UpdateStep::Finish
    } else {
        UpdateStep::Modules
    };
    // Every ledger pipeline the drain did not see in maintenance mode is watched as late (a drain that
    // ended, timed out or was cancelled alike), so any other was in maintenance mode when Resume began.
    let since = u.step.since().clone();
    let released = settle_ledger(obs, &epoch, d, Some(&since));
    u.resumed_pipelines.extend(released);
    let owed = &d.status.paused_pipelines;
    if owed.is_empty() {
        if !u.resumed_pipelines.is_empty() {
            d.event(
                false,
                crate::api::Reason::PipelinesResumed,
                format!(
                    "{} pipelines taken out of maintenance mode",
                    u.resumed_pipelines.len()
                ),
            );
        }
        move_to(gsp, u, next, now, d);
        return;
    }
    let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
    if passed(&deadline, now) {
        let why = corehub_error(obs, &epoch)
            .map(|e| format!(" (Core Hub: {e})"))
            .unwrap_or_default();
        let message = format!(
            "{} pipelines are still in maintenance mode after {} s{why}; GKO keeps resuming them: {}",
            owed.len(),
            gsp.spec.drain_timeout_seconds,
            sample(owed)
        );
        d.event(true, NOT_RESUMED, message.clone());
        d.status.message = Some(message);
        move_to(gsp, u, next, now, d);
        return;
    }
    d.status.message = Some(match corehub_error(obs, &epoch) {
        Some(e) => format!(
            "taking {} pipelines out of maintenance mode; Core Hub: {e}",
            owed.len()
        ),
        None => format!("taking {} pipelines out of maintenance mode", owed.len()),
    });
    // A GKO taking over in Resume (its worker asked nothing into maintenance mode this update) lists
    // before it asks: the pipelines the GKO before it took out are running, and are asked once.
    let took_over = obs.corehub.epoch != epoch || obs.corehub.entered == 0;
    let listed = listing(obs, &epoch, Some(&since)).is_some();
    let exit = if took_over && !listed {
        PipelineList::new()
    } else {
        owed.clone()
    };
    d.corehub = work(obs, epoch, PipelineList::new(), exit, POLL_FAST);
    d.requeue_at(&deadline, now);
}

/// Resumes the ledger's leftovers outside Drain and Resume: during Modules and between updates.
/// `give_up` is when a deleted platform stops waiting for Core Hub.
pub(super) fn ledger(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    d: &mut Decision,
    give_up: Option<&Time>,
) {
    let now = &obs.now;
    let idle = d.status.update.is_none();
    let epoch = d
        .status
        .update
        .as_ref()
        .map_or(LEFTOVERS.to_string(), epoch);
    let before = d.status.paused_pipelines.len();
    let released = settle_ledger(obs, &epoch, d, None);
    if let Some(late) = &d.status.late_maintenance
        && passed(&late.until, now)
    {
        d.status.late_maintenance = None;
    }
    let owed = d.status.paused_pipelines.clone();
    if let Some(until) = d.status.late_maintenance.as_ref().map(|l| l.until.clone()) {
        d.requeue_at(&until, now);
    }
    if owed.is_empty() && d.status.late_maintenance.is_none() {
        if before > 0 && idle {
            d.event(
                false,
                crate::api::Reason::PipelinesResumed,
                format!(
                    "{} pipelines GKO had left in maintenance mode are running again",
                    released.len()
                ),
            );
        }
        return;
    }
    let poll = if owed.is_empty() {
        POLL_WATCH
    } else {
        POLL_LEFTOVERS
    };
    d.corehub = work(obs, epoch.clone(), PipelineList::new(), owed.clone(), poll);
    if let Some(t) = give_up {
        d.requeue_at(t, now);
    }
    if !idle || owed.is_empty() {
        return;
    }
    // Between updates: say so, in the message, the conditions and a Warning event when it begins.
    let why = corehub_error(obs, &epoch)
        .map(|e| format!("; Core Hub: {e}"))
        .unwrap_or_default();
    let message = format!(
        "{} pipelines GKO put into maintenance mode are not resumed yet; GKO keeps asking Core Hub \
         to resume them{why}: {}",
        owed.len(),
        sample(&owed)
    );
    // Said already: the conditions below carry the reason (only they do, all three together).
    let already = gsp
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .any(|c| c.reason == NOT_RESUMED.as_str());
    if !already {
        d.event(true, NOT_RESUMED, message.clone());
    }
    let generation = gsp.metadata.generation.unwrap_or(0);
    let previous = d.status.conditions.clone();
    d.status.message = Some(message.clone());
    d.status.conditions = [
        (READY, false, message.clone()),
        (RECONCILING, true, message.clone()),
        (STALLED, false, message),
    ]
    .into_iter()
    .map(|(t, v, m)| status::condition(&previous, t, v, NOT_RESUMED.as_str(), &m, generation, now))
    .collect();
}
