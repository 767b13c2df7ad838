//! The thin loop, for one GluesyncPlatform: observe (the platform, then one owned snapshot of the
//! caches and the background work's reports) → [`update::decide`] → commit the status it gives → carry
//! out its actions on the committed platform → hand the background work its new wants and record its
//! events. Only the Lease holder reconciles.

use std::{sync::Arc, time::Duration};

use kube::{
    ResourceExt,
    core::{DeserializeGuard, error_boundary::InvalidObject},
    runtime::{controller::Action as Requeue, events::EventType},
};
use tracing::{instrument, warn};

use crate::{
    api::{GluesyncPlatform, Reason},
    background::Tasks,
    cluster::{
        commit::{self, CommitError, StepClock},
        observe::{self, Snapshot},
        spill,
        view::View,
    },
    update::{
        self,
        catalog::{Answer, Check},
        corehub::{Report, Work},
    },
};

/// Errors of one reconciliation. Each is logged with the GluesyncPlatform's name and retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error("reading the GluesyncPlatform: {0}")]
    Read(#[source] kube::Error),
}

/// What the controller works with.
pub struct Context {
    pub view: Arc<View>,
    pub corehub: Tasks<Work, Report>,
    pub catalog: Tasks<Check, Option<Answer>>,
    /// The long pipeline lists this GKO last wrote or read.
    pub lists: spill::Known,
    clock: StepClock,
    /// The resourceVersion of each platform that did not parse, once reported: said once per version.
    unparsed: std::sync::Mutex<std::collections::HashMap<String, String>>,
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
            lists: spill::Known::default(),
            clock: StepClock::default(),
            unparsed: Default::default(),
        }
    }
}

/// How many steps one reconcile may take in a row before it lets others run.
const STEPS_PER_RECONCILE: usize = 32;

#[instrument(skip_all, fields(gsp = %cached.name_any()))]
pub async fn reconcile(
    cached: Arc<DeserializeGuard<GluesyncPlatform>>,
    ctx: Arc<Context>,
) -> Result<Requeue, Error> {
    let view = &ctx.view;
    let cached = match &cached.0 {
        Ok(gsp) => gsp,
        Err(invalid) => return Ok(not_parsed(&ctx, &cached, invalid).await),
    };
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
    let Some(mut gsp) = observe::platform(view, &ctx.lists, cached)
        .await
        .map_err(Error::Read)?
    else {
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    };
    let uid = gsp.uid().unwrap_or_default();
    // The pair's Secret and Service, read once, and again only after GKO wrote or deleted one.
    let mut dr = observe::dr_objects(view, &gsp).await.map_err(Error::Read)?;
    for _ in 0..STEPS_PER_RECONCILE {
        // A workload may have appeared during the last step's writes, its pods not yet watched.
        if !view.pods_listed() {
            return Ok(Requeue::requeue(Duration::from_millis(50)));
        }
        let snapshot = Snapshot::take(
            view,
            &gsp,
            ctx.corehub.report(&uid),
            ctx.catalog.report(&uid),
            &dr,
        );
        let decision = update::decide(&gsp, &snapshot.observed());
        let mut committed =
            match commit::commit(view, &ctx.lists, &ctx.clock, gsp, decision.status).await {
                Ok(c) => c,
                Err(CommitError::NotLeader) => return Ok(Requeue::await_change()),
                Err(e) => return Err(e.into()),
            };
        let executed = committed.execute(view, decision.actions).await;
        if executed.pair_changed {
            dr = observe::dr_objects(view, committed.platform())
                .await
                .map_err(Error::Read)?;
        }
        ctx.corehub.want(committed.platform(), decision.corehub);
        ctx.catalog.want(committed.platform(), decision.catalog);
        committed.record(view, decision.events).await;
        gsp = committed.into_platform();
        if !decision.again {
            // A failed action is tried again soon, whatever else the decision waits for.
            let retry = executed.failed.then_some(Duration::from_secs(2));
            return Ok(match decision.requeue.into_iter().chain(retry).min() {
                Some(after) => Requeue::requeue(after),
                None => Requeue::await_change(),
            });
        }
    }
    Ok(Requeue::requeue(Duration::from_millis(10)))
}

/// A GluesyncPlatform that does not parse: said once per resourceVersion as a Warning event (and in the
/// log); nothing is done to it, and the others are reconciled as ever. Its next change is looked at anew.
async fn not_parsed(
    ctx: &Context,
    guard: &DeserializeGuard<GluesyncPlatform>,
    invalid: &InvalidObject,
) -> Requeue {
    let view = &ctx.view;
    if !view.writer.leadership().is_leader() {
        return Requeue::await_change();
    }
    // Every workload or pod change reconciles every platform: this version is said once.
    let version = guard.resource_version().unwrap_or_default();
    let said = ctx
        .unparsed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(guard.uid().unwrap_or_default(), version.clone())
        .is_some_and(|before| before == version);
    if said {
        return Requeue::await_change();
    }
    warn!(error = %invalid.error, "the GluesyncPlatform does not parse; fix it with kubectl edit");
    if let Err(e) = view
            .writer
            .event(
                guard,
                EventType::Warning,
                Reason::InvalidResource.as_str(),
                format!(
                    "GKO cannot read this GluesyncPlatform ({}); it changes nothing until the resource is fixed",
                    invalid.error
                ),
            )
            .await
    {
        warn!(error = %e, "recording an event failed");
    }
    Requeue::await_change()
}

pub fn error_policy(
    gsp: Arc<DeserializeGuard<GluesyncPlatform>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Requeue {
    match error {
        Error::Commit(CommitError::Stale) => Requeue::requeue(Duration::from_millis(50)),
        _ => {
            ctx.view.metrics.reconcile_errors.inc();
            warn!(gsp = %gsp.name_any(), %error, "reconcile failed; retrying in 2 s");
            Requeue::requeue(Duration::from_secs(2))
        }
    }
}
