//! GKO's update of its own Deployment: last, once no other update runs, under `updatePolicy: ui` with
//! `spec.selfUpdate.enabled` only.
//!
//! An update that finds a newer GKO (a pin in `spec.modules` for GKO's Deployment, else the catalog's
//! latest on the channel) ends with GKO's own result entry `SCHEDULED` and `status.selfUpdate` in phase
//! `Scheduled`. Then, with no update running, whichever GKO holds the Lease carries it on from the status
//! (the Deployment's `gluesync.molo17.com/self-update` annotation mirrors the phase):
//!
//! - `Scheduled`: GKO changes its own image (`OperatorRestarting`) and the phase becomes `RollingOut`.
//! - `RollingOut`, the new GKO leading: once GKO's Deployment runs only the new image, ready, for
//!   `stabilityWindowSeconds`, `OperatorUpdated`, entry `OK`.
//! - `RollingOut`, the old GKO leading (surge 1, unavailable 0: the old pod runs until the new one is
//!   ready): if the new pod is not ready within `stabilityTimeoutSeconds`, GKO puts its own image back
//!   (`OperatorRollingBack`), phase `RollingBack`.
//! - `RollingBack`: once the Deployment is ready on the old image, `OperatorRolledBack`, entry
//!   `ROLLED_BACK`; if not within `stabilityTimeoutSeconds`, `OperatorUpdateFailed`, entry `ERROR`.
//! - GKO's image changed by someone else, the self-update turned off or the policy `gitops`:
//!   `OperatorUpdateCancelled`, entry `SKIPPED`.
//!
//! Each write is the status first, then the Deployment (image and annotation in one patch), so either pod
//! may die at any instant: the next holder of the Lease reads the status and makes the Deployment match.

use super::{Action, Decision, Observed, passed, plus, requeue_after_secs};
use crate::{
    api::version::{ImageRef, Version},
    api::{
        ComponentResultStatus, ComponentState, ComponentType, GluesyncPlatform, PlannedComponent,
        SelfUpdate, SelfUpdatePhase, UpdatePolicy,
    },
    update::observed::Workload,
};

/// GKO's own Deployment: the one workload labelled `operator`.
pub(super) fn operator<'a>(obs: &Observed<'a>) -> Option<&'a Workload> {
    let mut it = obs
        .workloads
        .iter()
        .filter(|w| w.component_type == Some(ComponentType::Operator));
    let w = it.next()?;
    it.next().is_none().then_some(w)
}

/// Why GKO does not update itself for this platform, if it does not.
fn off(gsp: &GluesyncPlatform) -> Option<&'static str> {
    if gsp.spec.update_policy == UpdatePolicy::Gitops {
        Some("the updatePolicy is gitops: GKO's own version is kept in Git")
    } else if !gsp.spec.self_update.enabled {
        Some("spec.selfUpdate.enabled is false")
    } else {
        None
    }
}

/// The image GKO's Deployment `w` should go to after this update, if any: a pin in `spec.modules`, else
/// the catalog's latest on the channel when it is newer than the one that runs.
pub(super) fn target(
    gsp: &GluesyncPlatform,
    w: &Workload,
    catalog: Option<&super::Catalog>,
) -> Option<String> {
    if off(gsp).is_some() {
        return None;
    }
    let registry = gsp.spec.image_registry.as_deref();
    let running = w.version()?.parse::<Version>().ok()?;
    if let Some(pin) = gsp.spec.modules.get(&w.name) {
        // A pin never takes GKO back (one left from an earlier request, after GKO was upgraded with Helm).
        let pinned = pin.split('-').next()?.parse::<Version>().ok()?;
        return (pinned > running)
            .then(|| super::target_image(&w.image, pin, registry))
            .flatten();
    }
    let latest = catalog?.get(ImageRef::parse(&w.image).name())?;
    (latest.parse::<Version>().ok()? > running)
        .then(|| super::target_image(&w.image, latest, registry))
        .flatten()
}

/// The write that makes GKO's Deployment match a self-update: its image, and the annotation (`None`:
/// none).
fn deployment(su: &SelfUpdate, image: &str, phase: Option<SelfUpdatePhase>) -> Action {
    Action::SelfUpdate {
        name: su.name.clone(),
        container: su.container.clone(),
        image: Some(image.to_string()),
        phase,
    }
}

/// The annotation alone (`None`: removed), the image left as it is.
fn mark(name: &str, container: &str, phase: Option<SelfUpdatePhase>) -> Action {
    Action::SelfUpdate {
        name: name.to_string(),
        container: container.to_string(),
        image: None,
        phase,
    }
}

/// Ends the self-update: GKO's entry in `lastAttempt` (and the history entry of that update) says how.
fn end(d: &mut Decision, su: &SelfUpdate, result: ComponentResultStatus, message: String) {
    d.status.self_update = None;
    let mut same_update = false;
    if let Some(attempt) = d.status.last_attempt.as_mut()
        && let Some(entry) = attempt.results.iter_mut().find(|r| r.name == su.name)
    {
        entry.status = result;
        entry.message = Some(message.clone());
        same_update = true;
        if let Some(h) = d.status.history.first_mut()
            && h.finished_at == attempt.finished_at
        {
            h.message = format!("{}; GKO's own update: {message}", h.message);
        }
    }
    if !same_update {
        tracing::debug!(
            "GKO's own update ended after a newer update replaced its attempt: {message}"
        );
    }
}

/// Carries on the self-update in `d.status.selfUpdate`, if one runs; with none, makes sure no annotation
/// is left on GKO's Deployment. Called when no update runs.
pub(super) fn carry_on(gsp: &GluesyncPlatform, obs: &Observed, d: &mut Decision) {
    let Some(su) = d.status.self_update.clone() else {
        // A self-update that ended between its status write and the Deployment's: take the mark off.
        if let Some(w) = operator(obs)
            && w.self_update_mark.is_some()
            && let Some(container) = w.container.clone()
        {
            d.actions.push(mark(&w.name, &container, None));
        }
        return;
    };
    let Some(w) = operator(obs).filter(|w| w.name == su.name) else {
        let why = format!("GKO's Deployment {} is gone", su.name);
        d.event(
            true,
            crate::api::Reason::OperatorUpdateCancelled,
            why.clone(),
        );
        end(d, &su, ComponentResultStatus::Skipped, why);
        return;
    };
    let at = At {
        gsp,
        obs,
        w,
        written_deadline: plus(&su.since, gsp.spec.stability_timeout_seconds),
        to_version: version_of(&su.to_image),
        from_version: version_of(&su.from_image),
    };
    match su.phase {
        // A deleted platform starts no self-update (its finalizer stays until a started one ends).
        SelfUpdatePhase::Scheduled if gsp.metadata.deletion_timestamp.is_some() => {
            at.cancel(
                d,
                &su,
                "GKO's own update was dropped: the GluesyncPlatform is being deleted".into(),
            );
        }
        SelfUpdatePhase::Scheduled | SelfUpdatePhase::RollingOut if off(gsp).is_some() => {
            let why = off(gsp).unwrap_or_default();
            // GKO undoes its own change (a new image nobody watches any more is not left behind); an image
            // someone else set stays.
            if su.phase == SelfUpdatePhase::RollingOut && w.image == su.to_image {
                d.actions.push(deployment(&su, &su.from_image, None));
            }
            at.cancel(d, &su, format!("GKO's own update was dropped: {why}"));
        }
        SelfUpdatePhase::Scheduled => at.start(d, su),
        SelfUpdatePhase::RollingOut => at.rolling_out(d, su),
        SelfUpdatePhase::RollingBack => at.rolling_back(d, su),
    }
}

/// A version as the messages say it: the image's tag, else the image.
fn version_of(image: &str) -> String {
    crate::api::version::image_version(image)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| image.to_string())
}

/// Where a self-update stands: the platform, what GKO observed, its own Deployment and the versions.
struct At<'a> {
    gsp: &'a GluesyncPlatform,
    obs: &'a Observed<'a>,
    w: &'a Workload,
    /// When a write of the Deployment that never lands (an admission policy refuses the image, say)
    /// gives up.
    written_deadline: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    to_version: String,
    from_version: String,
}

impl At<'_> {
    fn cancel(&self, d: &mut Decision, su: &SelfUpdate, why: String) {
        d.event(
            true,
            crate::api::Reason::OperatorUpdateCancelled,
            why.clone(),
        );
        d.actions.push(mark(&su.name, &su.container, None));
        end(d, su, ComponentResultStatus::Skipped, why);
    }

    /// A write that never lands ends at the timeout.
    fn gave_up(&self, d: &mut Decision, su: &SelfUpdate, image: &str) {
        let why = format!(
            "GKO could not set its own image to {image} within {} s",
            self.gsp.spec.stability_timeout_seconds
        );
        d.event(true, crate::api::Reason::OperatorUpdateFailed, why.clone());
        d.actions.push(mark(&su.name, &su.container, None));
        end(d, su, ComponentResultStatus::Error, why);
    }

    /// Makes GKO's Deployment show the phase: `want` as its image (the phase's) with the phase's mark.
    /// Image and mark are written together, so the mark tells a write not yet landed (the other image,
    /// no mark: write it again, until the timeout) from somebody's revert (the other image under the
    /// mark: dropped); any third image drops it too. `true` when the phase may go on.
    fn on_deployment(
        &self,
        d: &mut Decision,
        su: &SelfUpdate,
        want: &str,
        other: &str,
        reverted: String,
        what: &str,
    ) -> bool {
        let w = self.w;
        let marked = w.self_update_mark.as_deref() == Some(su.phase.as_str());
        if w.image == other {
            if marked {
                self.cancel(d, su, reverted);
            } else if passed(&self.written_deadline, &self.obs.now) {
                self.gave_up(d, su, want);
            } else {
                d.actions.push(deployment(su, want, Some(su.phase)));
                d.requeue(std::time::Duration::from_secs(2));
            }
            return false;
        }
        if w.image != want {
            self.cancel(
                d,
                su,
                format!(
                    "{what} was dropped: its image was changed to {} meanwhile",
                    w.image
                ),
            );
            return false;
        }
        if !marked {
            d.actions.push(deployment(su, want, Some(su.phase)));
        }
        true
    }

    /// Scheduled: GKO changes its own image, unless somebody changed it meanwhile.
    fn start(&self, d: &mut Decision, mut su: SelfUpdate) {
        let w = self.w;
        if w.image != su.from_image {
            return self.cancel(
                d,
                &su,
                format!(
                    "GKO's own update was dropped: its image was changed to {} meanwhile",
                    w.image
                ),
            );
        }
        su.phase = SelfUpdatePhase::RollingOut;
        su.since = self.obs.now.clone();
        d.actions.push(deployment(
            &su,
            &su.to_image,
            Some(SelfUpdatePhase::RollingOut),
        ));
        d.event(
            false,
            crate::api::Reason::OperatorRestarting,
            format!(
                "GKO changed its own image to {}; the new pod is starting",
                self.to_version
            ),
        );
        d.status.message = Some(format!("GKO is updating itself to {}", self.to_version));
        requeue_after_secs(d, self.gsp.spec.stability_timeout_seconds);
        d.status.self_update = Some(su);
    }

    /// RollingOut: the new GKO's Deployment gets the stability check of any component (ready on its
    /// image for stabilityWindowSeconds with no restart; a crash loop or an image that cannot be pulled
    /// fails at once; stabilityTimeoutSeconds at most); a failure rolls GKO back.
    fn rolling_out(&self, d: &mut Decision, mut su: SelfUpdate) {
        let (gsp, w, now) = (self.gsp, self.w, &self.obs.now);
        let (to_version, from_version) = (&self.to_version, &self.from_version);
        let timeout = gsp.spec.stability_timeout_seconds;
        let put_back = format!(
            "GKO's own update was dropped: its image was put back to {from_version} by someone else"
        );
        if !self.on_deployment(
            d,
            &su,
            &su.to_image,
            &su.from_image,
            put_back,
            "GKO's own update",
        ) {
            return;
        }
        let deadline = plus(&su.since, timeout);
        let mut c = PlannedComponent {
            name: su.name.clone(),
            component_type: ComponentType::Operator,
            kind: w.kind,
            container: su.container.clone(),
            from_image: su.from_image.clone(),
            to_image: Some(su.to_image.clone()),
            state: ComponentState::Patched,
            message: None,
            patched_at: Some(su.since.clone()),
            stable: su.stable.clone(),
        };
        // The old GKO never reports the new one's success: once the Deployment runs only the new
        // image, ready, the old pod is gone and so is the old GKO. Whoever else leads (the new GKO, or
        // one that does not know its own pod) reports it.
        let i_am_old = self.obs.me.as_deref() == Some(su.from_image.as_str());
        match super::rollout::stability(gsp, &mut c, w, &su.to_image, &deadline, now, d) {
            Ok(true) if !i_am_old => {
                let message = format!("GKO updated to {to_version}");
                d.event(false, crate::api::Reason::OperatorUpdated, message.clone());
                d.actions.push(mark(&su.name, &su.container, None));
                d.status.message = Some(message.clone());
                end(d, &su, ComponentResultStatus::Ok, message);
            }
            Err(_) if super::mutated(super::Mutant::NoSelfRollback) => {
                d.status.self_update = Some(su);
            }
            Ok(_) => {
                d.status.message = Some(if i_am_old {
                    format!(
                        "GKO {to_version} is starting; GKO {from_version} hands over once it is ready"
                    )
                } else {
                    format!(
                        "GKO {to_version} is checking that it stays ready ({} s)",
                        gsp.spec.stability_window_seconds
                    )
                });
                su.stable = c.stable;
                d.status.self_update = Some(su);
            }
            Err(why) => {
                su.phase = SelfUpdatePhase::RollingBack;
                su.since = now.clone();
                su.stable = None;
                d.actions.push(deployment(
                    &su,
                    &su.from_image,
                    Some(SelfUpdatePhase::RollingBack),
                ));
                d.event(
                    true,
                    crate::api::Reason::OperatorRollingBack,
                    format!(
                        "the new GKO {to_version} failed its stability check ({why}); GKO puts its own \
                         image back to {from_version}"
                    ),
                );
                d.status.message = Some(format!("GKO is rolling itself back to {from_version}"));
                requeue_after_secs(d, timeout);
                d.status.self_update = Some(su);
            }
        }
    }

    /// RollingBack: GKO waits for its old image to be ready again, until the timeout.
    fn rolling_back(&self, d: &mut Decision, su: SelfUpdate) {
        let (to_version, from_version) = (&self.to_version, &self.from_version);
        let timeout = self.gsp.spec.stability_timeout_seconds;
        let set_again = format!(
            "GKO's rollback was dropped: its image was set to {to_version} again by someone else"
        );
        if !self.on_deployment(
            d,
            &su,
            &su.from_image,
            &su.to_image,
            set_again,
            "GKO's rollback",
        ) {
            return;
        }
        let deadline = plus(&su.since, timeout);
        if self.w.ready {
            let message =
                format!("GKO {to_version} did not come up; GKO is back on {from_version}");
            d.event(
                true,
                crate::api::Reason::OperatorRolledBack,
                message.clone(),
            );
            d.actions.push(mark(&su.name, &su.container, None));
            d.status.message = Some(message.clone());
            end(d, &su, ComponentResultStatus::RolledBack, message);
        } else if passed(&deadline, &self.obs.now) {
            let message = format!(
                "GKO did not come back on {from_version} within {timeout} s after its update to \
                 {to_version} failed"
            );
            d.event(
                true,
                crate::api::Reason::OperatorUpdateFailed,
                message.clone(),
            );
            d.actions.push(mark(&su.name, &su.container, None));
            d.status.message = Some(message.clone());
            end(d, &su, ComponentResultStatus::Error, message);
        } else {
            d.requeue_at(&deadline, &self.obs.now);
        }
    }
}

/// The self-update an update that ended schedules, for GKO's Deployment `w` going to `to_image`.
pub(super) fn scheduled(
    w_name: &str,
    container: &str,
    from: &str,
    to: &str,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> SelfUpdate {
    SelfUpdate {
        phase: SelfUpdatePhase::Scheduled,
        name: w_name.to_string(),
        container: container.to_string(),
        from_image: from.to_string(),
        to_image: to.to_string(),
        since: now.clone(),
        stable: None,
    }
}
