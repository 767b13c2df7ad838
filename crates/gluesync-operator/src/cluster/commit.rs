//! A decision goes to the cluster in two steps, and the types keep their order: [`commit`] writes the
//! status (the long lists' ConfigMaps first, then the status with the resourceVersion it was computed
//! from) and answers a [`Committed`] platform, which only it makes; only a `Committed` platform runs
//! actions ([`Committed::execute`]) and records events. So nothing a decision asks is done before the
//! status that remembers it is written, but what needs no status to be found again
//! ([`Action::needs_status`]: a pre-pull pod deleted, GKO's finalizer put on): [`unwritten`] carries out
//! those of a decision that goes unwritten, and takes them only as [`StatusFree`], which the engine
//! makes of such actions alone.

use crate::cluster::wording::Said;
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{ResourceExt, runtime::events::EventType};
use tracing::{info, warn};

use crate::{
    api::{GluesyncPlatform, GluesyncPlatformStatus, UpdateStep, WorkloadKind},
    cluster::{
        spill::{self, Known},
        view::View,
        writer::{is_conflict, is_not_leader},
    },
    metrics::{ResultLabel, StepLabel},
    update::{Action, Event, StatusFree, status::stalled},
};

/// Why a status could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("writing the status: {0}")]
    Write(#[source] kube::Error),
    #[error("the status changed since it was read; reading it again")]
    Stale,
    #[error("this GKO no longer holds the Lease")]
    NotLeader,
}

/// A GluesyncPlatform whose status holds the decision: written, or already as the decision wants it.
/// Its status is the complete one (long lists and all), as the engine works on it.
pub struct Committed {
    gsp: GluesyncPlatform,
}

impl Committed {
    pub fn platform(&self) -> &GluesyncPlatform {
        &self.gsp
    }

    pub fn into_platform(self) -> GluesyncPlatform {
        self.gsp
    }

    /// Carries out the decision's actions, in order. Each failure is logged; the answer says whether one
    /// failed (the reconcile is then retried soon). A finalizer change answers the platform as written:
    /// its resourceVersion goes on to the next write.
    pub async fn execute(&mut self, view: &View, actions: Vec<Action>) -> Executed {
        let mut done = Executed::default();
        for action in actions {
            done.pair_changed |= matches!(action, Action::ApplyService(_) | Action::RemoveMade(..));
            match execute(view, &self.gsp, action).await {
                Ok(Some(updated)) => self.gsp = updated,
                Ok(None) => {}
                Err(()) => done.failed = true,
            }
        }
        done
    }

    /// Records the decision's events on the platform (queued: they are published in order, after).
    pub fn record(&self, view: &View, events: Vec<Event>) {
        for event in events {
            record(
                view,
                &self.gsp,
                event.warning,
                event.reason.as_str(),
                event.message,
            );
        }
    }
}

/// Carries out the actions of a decision that goes unwritten ([`StatusFree`]: none needs a status), in
/// order. `gsp` is the platform in hand (its status the decision's); answers it as a finalizer change
/// wrote it, with that status, when one did. A failure is logged, and the next decision asks again (a
/// held decision is decided again within 100 ms).
pub async fn unwritten(
    view: &View,
    gsp: &GluesyncPlatform,
    actions: StatusFree,
) -> Option<GluesyncPlatform> {
    let mut written: Option<GluesyncPlatform> = None;
    for action in actions {
        if let Ok(Some(updated)) = execute(view, written.as_ref().unwrap_or(gsp), action).await {
            written = Some(updated);
        }
    }
    written
}

/// What carrying out the actions did.
#[derive(Debug, Default)]
pub struct Executed {
    /// An action failed: try again soon.
    pub failed: bool,
    /// The disaster-recovery pair's Service or Secret was written or removed: read them again.
    pub pair_changed: bool,
}

/// When this process saw each platform's current step begin, for the step-duration metric (status times
/// have whole seconds only).
#[derive(Default)]
pub struct StepClock(Mutex<HashMap<String, (UpdateStep, Instant)>>);

/// What every decision's status is seen by, written or not: the step clock and the platform's metrics.
pub fn observe(
    view: &View,
    clock: &StepClock,
    gsp: &GluesyncPlatform,
    status: &GluesyncPlatformStatus,
) {
    let uid = gsp.uid().unwrap_or_default();
    clock.observe(view, &uid, gsp.status.as_ref(), status);
    view.metrics.platform(gsp, status);
}

/// Writes `status` into `gsp` unless it already holds it. Long pipeline lists go to ConfigMaps first,
/// and those of lists the new status no longer names are removed after it.
pub async fn commit(
    view: &View,
    lists: &Known,
    clock: &StepClock,
    gsp: GluesyncPlatform,
    mut status: GluesyncPlatformStatus,
) -> Result<Committed, CommitError> {
    if gsp.status.as_ref() == Some(&status) {
        return Ok(Committed { gsp });
    }
    let uid = gsp.uid().unwrap_or_default();
    let split = spill::split(&gsp, &mut status);
    write_lists(view, &split.configmaps)
        .await
        .map_err(CommitError::Write)?;
    let mut written = match view.writer.write_status(&gsp, &split.status).await {
        Ok(written) => written,
        Err(e) if is_conflict(&e) => return Err(CommitError::Stale),
        Err(e) if is_not_leader(&e) => return Err(CommitError::NotLeader),
        Err(e) => return Err(CommitError::Write(e)),
    };
    remove_stale_lists(view, &written, gsp.status.as_ref(), &split.status).await;
    lists.remember(&uid, &split.status.spilled_lists, &mut status);
    drop(split);
    observe(view, clock, &gsp, &status);
    info!(
        phase = status.phase.map(|p| p.as_str()).unwrap_or(""),
        step = status
            .update
            .as_ref()
            .map(|u| format!("{:?}", u.step.name()))
            .unwrap_or_default(),
        message = status.message.as_deref().unwrap_or(""),
        "status updated"
    );
    #[cfg(feature = "test-hooks")]
    let hit = crate::update::fault_point(gsp.status.as_ref(), &status);
    // A new Stalled reason is said as a Warning event too (an update's own reasons have events of their
    // own).
    let before = stalled(gsp.status.as_ref()).map(|(r, _)| r.to_string());
    let stall = stalled(Some(&status))
        .filter(|(r, _)| before.as_deref() != Some(*r) && !r.starts_with("Update"))
        .map(|(r, m)| (r.to_string(), m.to_string()));
    // The complete status (long lists and all) goes on with the written object.
    written.status = Some(status);
    #[cfg(feature = "test-hooks")]
    if hit {
        eprintln!("fault point hit");
        std::future::pending::<()>().await;
    }
    if let Some((reason, message)) = stall {
        record(view, &written, true, &reason, message);
    }
    Ok(Committed { gsp: written })
}

/// Writes the ConfigMaps of long pipeline lists that the cache does not already hold as they are.
async fn write_lists(view: &View, configmaps: &[ConfigMap]) -> Result<(), kube::Error> {
    if configmaps.is_empty() {
        return Ok(());
    }
    let cached = view.spilled.state();
    let refs: Vec<_> = cached.iter().map(|c| c.as_ref()).collect();
    for cm in configmaps {
        if !spill::unchanged(cm, &refs) {
            view.writer.apply_configmap(cm).await?;
        }
    }
    Ok(())
}

/// Deletes the ConfigMaps of lists the written status no longer spills (`before`: the status it
/// replaced; one already gone is fine).
async fn remove_stale_lists(
    view: &View,
    gsp: &GluesyncPlatform,
    before: Option<&GluesyncPlatformStatus>,
    written: &GluesyncPlatformStatus,
) {
    let cached = view.spilled.state();
    let refs: Vec<_> = cached.iter().map(|c| c.as_ref()).collect();
    for name in spill::stale(gsp, before, written, &refs) {
        if let Err(e) = view.writer.delete_configmap(&view.namespace, &name).await {
            warn!(configmap = %name, error = %Said(&e), "deleting a ConfigMap no list names failed");
        }
    }
}

impl StepClock {
    /// Step durations and update results, from one status to the next (written, or passed through in
    /// memory: see the controller). A step's start is taken from this process's clock when it saw the
    /// step begin, else from the status. Seeing the same step again changes nothing.
    pub fn observe(
        &self,
        view: &View,
        uid: &str,
        before: Option<&GluesyncPlatformStatus>,
        after: &GluesyncPlatformStatus,
    ) {
        let metrics = &view.metrics;
        let next = after.update.as_ref().map(|u| u.step.name());
        let Ok(mut clock) = self.0.lock() else {
            return;
        };
        // The step that ran: none when `before` had no update (a clock entry left from an update this
        // process did not see end says nothing).
        let prev = before
            .and_then(|s| s.update.as_ref())
            .map(|u| match clock.get(uid) {
                Some((step, at)) => (*step, at.elapsed()),
                None => (
                    u.step.name(),
                    Duration::from_secs_f64(
                        jiff::Timestamp::now()
                            .duration_since(u.step.since().0)
                            .as_secs_f64()
                            .max(0.0),
                    ),
                ),
            });
        if let (Some((step, _)), Some(next)) = (prev, next)
            && step == next
        {
            clock
                .entry(uid.to_string())
                .or_insert((next, Instant::now()));
            return;
        }
        match next {
            Some(n) => clock.insert(uid.to_string(), (n, Instant::now())),
            None => clock.remove(uid),
        };
        let Some((step, took)) = prev else {
            return;
        };
        metrics
            .step_seconds
            .get_or_create(&StepLabel {
                step: format!("{step:?}"),
            })
            .observe(took.as_secs_f64());
        if next.is_none()
            && let Some(attempt) = &after.last_attempt
        {
            metrics
                .updates
                .get_or_create(&ResultLabel {
                    result: format!("{:?}", attempt.result),
                })
                .inc();
        }
    }
}

fn record(view: &View, gsp: &GluesyncPlatform, warning: bool, reason: &str, message: String) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    if let Err(e) = view.writer.event(gsp, type_, reason, message) {
        warn!(error = %Said(&e), reason, "recording an event failed");
    }
}

/// Carries out one action: the platform as written when the action changed it, `Err` when it failed
/// (logged; the reconcile is retried soon) or was just made and is not made again yet (see
/// [`crate::cluster::view::Recent`]; looked at again as soon).
async fn execute(
    view: &View,
    gsp: &GluesyncPlatform,
    action: Action,
) -> Result<Option<GluesyncPlatform>, ()> {
    let ns = &view.namespace;
    let writer = &view.writer;
    match action {
        Action::SetImage {
            kind,
            name,
            container,
            image,
        } => {
            let object = format!("{kind:?}/{name}/{container}");
            if view.recent.just_made(&object, &image) {
                // Looked at again once it no longer counts as just made.
                return Err(());
            }
            info!(workload = %name, %image, "setting image");
            let generation = writer
                .set_image(ns, kind, &name, &container, &image)
                .await
                .map_err(
                    |e| warn!(workload = %name, error = %Said(&e), "setting the image failed; retrying"),
                )?;
            view.recent.made(&object, &image);
            wrote(view, kind, &name, generation);
        }
        Action::SelfUpdate {
            name,
            container,
            image,
            phase,
        } => {
            let shown = phase.map_or("none", |p| p.as_str());
            info!(deployment = %name, image = image.as_deref().unwrap_or("unchanged"), phase = shown, "GKO's own Deployment");
            let generation = writer
                .self_update(ns, &name, &container, image.as_deref(), phase)
                .await
                .map_err(|e| warn!(deployment = %name, error = %Said(&e), "writing GKO's own Deployment failed; retrying"))?;
            wrote(view, WorkloadKind::Deployment, &name, generation);
        }
        Action::PatchWorkload { kind, name, patch } => {
            info!(workload = %name, "changing the pod template for disaster recovery");
            let generation = writer
                .patch_workload(ns, kind, &name, &patch)
                .await
                .map_err(|e| warn!(workload = %name, error = %Said(&e), "changing the pod template failed; retrying"))?;
            wrote(view, kind, &name, generation);
        }
        Action::ApplyService(service) => {
            info!(service = %service.name_any(), "writing the disaster-recovery Service");
            writer.apply_service(&service).await.map_err(
                |e| warn!(error = %Said(&e), "writing the disaster-recovery Service failed; retrying"),
            )?;
        }
        Action::RemoveMade(kind, name) => {
            info!(?kind, %name, "removing what the disaster-recovery setup made");
            writer
                .remove_made(ns, kind, &name)
                .await
                .map_err(|e| warn!(?kind, %name, error = %Said(&e), "removing failed; retrying"))?;
        }
        Action::DeletePrePull(pod) => {
            info!(%pod, "deleting a pre-pull pod");
            view.recent.forget(&format!("Pod/{pod}"));
            writer.delete_pod(ns, &pod).await.map_err(
                |e| warn!(%pod, error = %Said(&e), "deleting the pre-pull pod failed; retrying"),
            )?;
        }
        Action::DeletePod(pod) => {
            info!(%pod, "deleting a stuck pod (of a failed revision, or of a disaster-recovery setup put back)");
            writer
                .delete_pod(ns, &pod)
                .await
                .map_err(|e| warn!(%pod, error = %Said(&e), "deleting the pod failed; retrying"))?;
        }
        Action::CreatePod(pod) => {
            let name = pod.name_any();
            let object = format!("Pod/{name}");
            if view.recent.just_made(&object, "") {
                return Err(());
            }
            info!(pod = %name, image = pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.as_deref()).unwrap_or_default(), "creating a pre-pull pod");
            match writer.create_pod(&pod).await {
                Ok(()) => view.recent.made(&object, ""),
                // Refused for good (Forbidden, Invalid, a quota or an admission webhook): the engine
                // reads the refusal and refuses the update.
                Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
                    warn!(pod = %name, error = %s.message, "the API server refused the pre-pull pod");
                    view.refused_pod(&name, &pod, s.message.clone());
                    return Err(());
                }
                Err(e) => {
                    warn!(pod = %name, error = %Said(&e), "creating the pre-pull pod failed; retrying");
                    return Err(());
                }
            }
        }
        Action::AddFinalizer | Action::RemoveFinalizer => {
            let on = action == Action::AddFinalizer;
            // The patch answers the platform as written: its resourceVersion for the next write.
            let mut fresh = writer.set_finalizer(gsp, on).await.map_err(
                |e| warn!(error = %Said(&e), on, "changing the finalizer failed; retrying"),
            )?;
            info!(on, "finalizer {}", if on { "added" } else { "removed" });
            if let Some(f) = &mut fresh {
                // Keep the complete lists the engine works on.
                f.status = gsp.status.clone();
            }
            return Ok(fresh);
        }
    }
    Ok(None)
}

/// A workload write answered with `generation`: the next decision waits for the cache to show it.
fn wrote(view: &View, kind: WorkloadKind, name: &str, generation: Option<i64>) {
    if let Some(generation) = generation {
        view.written.wrote(&format!("{kind:?}/{name}"), generation);
    }
}
