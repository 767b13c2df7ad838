//! The thin loop: for a GluesyncPlatform, read what the caches and the background work say, ask
//! [`update::decide`] what to do, write the status it gives (only when it changed, with the
//! resourceVersion it was computed from), then carry out its actions, hand the background work its new
//! wants, and record its events. Only the Lease holder reconciles.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    Api, ResourceExt,
    runtime::{controller::Action as Requeue, events::EventType},
};
use tracing::{info, instrument, warn};

use crate::{
    api::{DisasterRecoveryPhase, GluesyncPlatform, GluesyncPlatformStatus, UpdateStep},
    background::Tasks,
    cluster::spill::{self, NotYet},
    cluster::view::View,
    cluster::writer::{is_conflict, is_not_leader},
    update::catalog::{Answer, Check},
    update::corehub::{Report, Target, Work},
    update::{
        self, Action, Observed,
        disaster::{self, DrObjects, SecretState},
    },
};

/// Errors of one reconciliation. Each is logged with the GluesyncPlatform's name and retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("the status changed since it was read; reading it again")]
    StaleRead,
    #[error("reading the GluesyncPlatform: {0}")]
    Read(#[source] kube::Error),
}

/// What the controller works with.
pub struct Context {
    pub view: Arc<View>,
    pub corehub: Tasks<Work, Report>,
    pub catalog: Tasks<Check, Option<Answer>>,
    /// When this process saw each platform's current step begin, for the step-duration metric.
    step_clock: Mutex<HashMap<String, (UpdateStep, Instant)>>,
    /// The long pipeline lists this GKO last wrote or read.
    pub lists: spill::Known,
}

impl Context {
    pub fn new(
        view: Arc<View>,
        corehub: Tasks<Work, Report>,
        catalog: Tasks<Check, Option<Answer>>,
    ) -> Context {
        Context {
            view,
            corehub,
            catalog,
            step_clock: Mutex::default(),
            lists: spill::Known::default(),
        }
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// How many steps one reconcile may take in a row before it lets others run.
const STEPS_PER_RECONCILE: usize = 32;

#[instrument(skip_all, fields(gsp = %gsp.name_any()))]
pub async fn reconcile(gsp: Arc<GluesyncPlatform>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let view = &ctx.view;
    if !view.ready() || !view.pods_listed() {
        // Deciding from half-filled caches would report workloads missing that are not (or, for the
        // pods, a rollout done that is not).
        return Ok(Requeue::requeue(Duration::from_millis(50)));
    }
    if !view.writer.leadership().is_leader() {
        // The Lease holder acts; this GKO reconciles everything again when it takes the Lease.
        return Ok(Requeue::await_change());
    }
    view.metrics.reconciles.inc();
    let mut gsp = gsp.as_ref().clone();
    let api: Api<GluesyncPlatform> = Api::namespaced(view.writer.client().clone(), &view.namespace);
    if gsp.status.as_ref().is_some_and(|s| s.update.is_some())
        || gsp.metadata.deletion_timestamp.is_some()
    {
        // An update acts on what it reads: read the latest, not the cache.
        gsp = api.get(&gsp.name_any()).await.map_err(Error::Read)?;
    }
    // Long pipeline lists come back (remembered, or read from their ConfigMaps): the engine sees every id.
    if let Some(mut status) = gsp.status.take() {
        let missing = ctx.lists.missing(&gsp, &status);
        let mut read = vec![];
        if !missing.is_empty() {
            let configmaps: Api<ConfigMap> =
                Api::namespaced(view.writer.client().clone(), &view.namespace);
            for name in &missing {
                read.extend(configmaps.get_opt(name).await.map_err(Error::Read)?);
            }
        }
        let refs: Vec<&ConfigMap> = read.iter().collect();
        if let Err(NotYet(what)) = ctx.lists.join(&gsp, &mut status, &refs) {
            warn!(%what, "waiting for the ConfigMaps of a long pipeline list to hold what the status names");
            return Ok(Requeue::requeue(Duration::from_secs(1)));
        }
        gsp.status = Some(status);
    }
    let uid = gsp.uid().unwrap_or_default();
    // The pair's Secret and Service, read once, and again only after GKO wrote or deleted one.
    let mut dr = dr_objects(view, &gsp).await.map_err(Error::Read)?;
    for _ in 0..STEPS_PER_RECONCILE {
        // A workload may have appeared during the last step's writes, its pods not yet watched.
        if !view.pods_listed() {
            return Ok(Requeue::requeue(Duration::from_millis(50)));
        }
        let workloads = view.workloads();
        let report = ctx.corehub.report(&uid);
        let access_problem = view.access.problem(&gsp, &workloads, &view.namespace);
        let answer = ctx.catalog.report(&uid);
        let mut decision = update::decide(
            &gsp,
            &Observed {
                now: now(),
                workloads: &workloads,
                corehub: &report,
                catalog: answer.as_ref(),
                target: access_problem
                    .is_none()
                    .then(|| Target::of(&gsp, &workloads, &view.namespace))
                    .flatten(),
                access_problem: access_problem.clone(),
                me: view.instance.as_ref().and_then(|pod| {
                    workloads
                        .iter()
                        .flat_map(|w| &w.pods)
                        .find(|p| &p.name == pod)
                        .map(|p| p.image.clone())
                }),
                dr: dr.clone(),
            },
        );

        if gsp.status.as_ref() != Some(&decision.status) {
            // Lists too long for the status go to ConfigMaps first, then the status that names them.
            let split = spill::split(&gsp, &mut decision.status);
            if let Err(e) = write_lists(view, &split.configmaps).await {
                return Err(Error::WriteStatus(e));
            }
            match view.writer.write_status(&gsp, &split.status).await {
                Ok(mut written) => {
                    remove_stale_lists(view, &written, gsp.status.as_ref(), &split.status).await;
                    ctx.lists
                        .remember(&uid, &split.status.spilled_lists, &mut decision.status);
                    drop(split);
                    observe_steps(&ctx, &uid, gsp.status.as_ref(), &decision.status);
                    let s = &decision.status;
                    info!(
                        phase = s.phase.map(|p| p.as_str()).unwrap_or(""),
                        step = s
                            .update
                            .as_ref()
                            .map(|u| format!("{:?}", u.step.name()))
                            .unwrap_or_default(),
                        message = s.message.as_deref().unwrap_or(""),
                        "status updated"
                    );
                    #[cfg(feature = "test-hooks")]
                    let hit = crate::update::fault_point(gsp.status.as_ref(), s);
                    let before = crate::update::status::stalled(gsp.status.as_ref())
                        .map(|(r, _)| r.to_string());
                    // The complete status (long lists and all) goes on with the written object.
                    written.status = Some(decision.status);
                    let stalled = crate::update::status::stalled(written.status.as_ref())
                        .filter(|(r, _)| before.as_deref() != Some(*r) && !r.starts_with("Update"))
                        .map(|(r, m)| (r.to_string(), m.to_string()));
                    gsp = written;
                    #[cfg(feature = "test-hooks")]
                    if hit {
                        eprintln!("fault point hit");
                        std::future::pending::<()>().await;
                    }
                    if let Some((reason, message)) = stalled {
                        record(view, &gsp, true, &reason, message).await;
                    }
                }
                Err(e) if is_conflict(&e) => return Err(Error::StaleRead),
                Err(e) if is_not_leader(&e) => return Ok(Requeue::await_change()),
                Err(e) => return Err(Error::WriteStatus(e)),
            }
        }

        let mut failed = false;
        let pair_changed = decision
            .actions
            .iter()
            .any(|a| matches!(a, Action::ApplyService(_) | Action::RemoveMade(..)));
        for action in decision.actions {
            match execute(view, &gsp, action).await {
                Ok(Some(updated)) => gsp = updated,
                Ok(None) => {}
                Err(()) => failed = true,
            }
        }
        if pair_changed {
            dr = dr_objects(view, &gsp).await.map_err(Error::Read)?;
        }
        ctx.corehub.want(&gsp, decision.corehub);
        ctx.catalog.want(&gsp, decision.catalog);
        for event in decision.events {
            record(view, &gsp, event.warning, event.reason, event.message).await;
        }
        if !decision.again {
            // A failed action is tried again soon, whatever else the decision waits for.
            let retry = failed.then_some(Duration::from_secs(2));
            return Ok(match decision.requeue.into_iter().chain(retry).min() {
                Some(after) => Requeue::requeue(after),
                None => Requeue::await_change(),
            });
        }
    }
    Ok(Requeue::requeue(Duration::from_millis(10)))
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
            warn!(configmap = %name, error = %e, "deleting a ConfigMap no list names failed");
        }
    }
}

/// Step durations and update results, from one status to the next. A step's start is taken from this
/// process's clock when it saw the step begin (status timestamps have whole seconds only), else from the
/// status.
fn observe_steps(
    ctx: &Context,
    uid: &str,
    before: Option<&GluesyncPlatformStatus>,
    after: &GluesyncPlatformStatus,
) {
    let metrics = &ctx.view.metrics;
    let next = after.update.as_ref();
    let Ok(mut clock) = ctx.step_clock.lock() else {
        return;
    };
    let started = clock.remove(uid);
    if let Some(u) = next {
        clock.insert(uid.to_string(), (u.step.name(), Instant::now()));
    }
    let Some(prev) = before.and_then(|s| s.update.as_ref()) else {
        return;
    };
    if next.map(|u| u.step.name()) == Some(prev.step.name()) {
        if let Some(s) = started {
            clock.insert(uid.to_string(), s);
        }
        return;
    }
    let took = match started {
        Some((step, at)) if step == prev.step.name() => at.elapsed().as_secs_f64(),
        _ => jiff::Timestamp::now()
            .duration_since(prev.step.since().0)
            .as_secs_f64(),
    };
    metrics
        .step_seconds
        .get_or_create(&crate::metrics::StepLabel {
            step: format!("{:?}", prev.step.name()),
        })
        .observe(took.max(0.0));
    if next.is_none()
        && let Some(attempt) = &after.last_attempt
    {
        metrics
            .updates
            .get_or_create(&crate::metrics::ResultLabel {
                result: format!("{:?}", attempt.result),
            })
            .inc();
    }
}

async fn record(view: &View, gsp: &GluesyncPlatform, warning: bool, reason: &str, message: String) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    if let Err(e) = view.writer.event(gsp, type_, reason, message).await {
        warn!(error = %e, reason, "recording an event failed");
    }
}

/// Carries out one action: the platform as written when the action changed it, `Err` when it failed
/// (logged; the reconcile is retried soon).
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
            info!(workload = %name, %image, "setting image");
            writer
                .set_image(ns, kind, &name, &container, &image)
                .await
                .map_err(
                    |e| warn!(workload = %name, error = %e, "setting the image failed; retrying"),
                )?;
        }
        Action::SelfUpdate {
            name,
            container,
            image,
            phase,
        } => {
            let shown = phase.map_or("none", |p| p.as_str());
            info!(deployment = %name, image = image.as_deref().unwrap_or("unchanged"), phase = shown, "GKO's own Deployment");
            writer
                .self_update(ns, &name, &container, image.as_deref(), phase)
                .await
                .map_err(|e| warn!(deployment = %name, error = %e, "writing GKO's own Deployment failed; retrying"))?;
        }
        Action::PatchWorkload { kind, name, patch } => {
            info!(workload = %name, "changing the pod template for disaster recovery");
            writer
                .patch_workload(ns, kind, &name, &patch)
                .await
                .map_err(|e| warn!(workload = %name, error = %e, "changing the pod template failed; retrying"))?;
        }
        Action::ApplyService(service) => {
            info!(service = %service.name_any(), "writing the disaster-recovery Service");
            writer.apply_service(&service).await.map_err(
                |e| warn!(error = %e, "writing the disaster-recovery Service failed; retrying"),
            )?;
        }
        Action::RemoveMade(kind, name) => {
            info!(?kind, %name, "removing what the disaster-recovery setup made");
            writer
                .remove_made(ns, kind, &name)
                .await
                .map_err(|e| warn!(?kind, %name, error = %e, "removing failed; retrying"))?;
        }
        Action::DeletePod(pod) => {
            info!(%pod, "deleting a pod of the failed revision");
            writer
                .delete_pod(ns, &pod)
                .await
                .map_err(|e| warn!(%pod, error = %e, "deleting the pod failed; retrying"))?;
        }
        Action::AddFinalizer | Action::RemoveFinalizer => {
            let on = action == Action::AddFinalizer;
            // The patch answers the platform as written: its resourceVersion for the next write.
            let mut fresh = writer
                .set_finalizer(gsp, on)
                .await
                .map_err(|e| warn!(error = %e, on, "changing the finalizer failed; retrying"))?;
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

/// The disaster-recovery Secret and Service, read when a setup is wanted or in place (never the
/// Secret's material: only whether it holds some).
async fn dr_objects(view: &View, gsp: &GluesyncPlatform) -> Result<DrObjects, kube::Error> {
    use k8s_openapi::api::core::v1::{Secret, Service};
    let wanted = gsp.spec.disaster_recovery.as_ref();
    let reached = gsp
        .status
        .as_ref()
        .and_then(|s| s.disaster_recovery.as_ref());
    let restoring = reached.is_some_and(|r| {
        matches!(
            r.phase,
            DisasterRecoveryPhase::RollingBack | DisasterRecoveryPhase::TearingDown
        )
    });
    let name = match (wanted, reached) {
        (_, Some(r)) if restoring => r.secret_name.clone(),
        (Some(w), _) => disaster::secret_name(gsp, w),
        (None, Some(r)) => r.secret_name.clone(),
        (None, None) => return Ok(DrObjects::default()),
    };
    let client = view.writer.client().clone();
    let secret = if !view.access.secret_allowed(&name) {
        SecretState::NotAllowed
    } else {
        match Api::<Secret>::namespaced(client.clone(), &view.namespace)
            .get_opt(&name)
            .await
        {
            Ok(None) => SecretState::Missing,
            Ok(Some(secret)) => {
                let has_key = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(crate::api::DR_SECRET_KEY))
                    .is_some_and(|v| !v.0.is_empty());
                // Written by this platform's setup from the Core Hub UI (GKO 0.3 also owned it).
                let made_by_gko = secret
                    .labels()
                    .get(crate::api::PLATFORM_LABEL)
                    .is_some_and(|p| Some(p) == gsp.metadata.name.as_ref());
                // One GKO wrote is GKO's to empty, whatever it holds.
                if has_key || made_by_gko {
                    SecretState::Present { made_by_gko }
                } else {
                    SecretState::NoKey
                }
            }
            Err(kube::Error::Api(s)) if s.code == 403 => SecretState::NotAllowed,
            Err(e) => SecretState::Unreadable(e.to_string()),
        }
    };
    let service = Api::<Service>::namespaced(client, &view.namespace)
        .get_opt(&disaster::service_name(gsp))
        .await?
        .is_some();
    Ok(DrObjects { secret, service })
}

pub fn error_policy(gsp: Arc<GluesyncPlatform>, error: &Error, ctx: Arc<Context>) -> Requeue {
    match error {
        Error::StaleRead => Requeue::requeue(Duration::from_millis(50)),
        _ => {
            ctx.view.metrics.reconcile_errors.inc();
            warn!(gsp = %gsp.name_any(), %error, "reconcile failed; retrying in 2 s");
            Requeue::requeue(Duration::from_secs(2))
        }
    }
}
