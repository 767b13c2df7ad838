//! The thin loop, for one GluesyncPlatform: observe (the platform, then one owned snapshot of the
//! caches and the background work's reports) → [`update::decide`] → commit the status it gives → carry
//! out its actions on the committed platform → hand the background work its new wants and record its
//! events. Only the Lease holder reconciles.

use std::{sync::Arc, time::Duration};

use kube::{ResourceExt, runtime::controller::Action as Requeue};
use tracing::{instrument, warn};

use crate::{
    api::GluesyncPlatform,
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
        }
    }
}

/// How many steps one reconcile may take in a row before it lets others run.
const STEPS_PER_RECONCILE: usize = 32;

#[instrument(skip_all, fields(gsp = %cached.name_any()))]
pub async fn reconcile(cached: Arc<GluesyncPlatform>, ctx: Arc<Context>) -> Result<Requeue, Error> {
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
    let Some(mut gsp) = observe::platform(view, &ctx.lists, &cached)
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

pub fn error_policy(gsp: Arc<GluesyncPlatform>, error: &Error, ctx: Arc<Context>) -> Requeue {
    match error {
        Error::Commit(CommitError::Stale) => Requeue::requeue(Duration::from_millis(50)),
        _ => {
            ctx.view.metrics.reconcile_errors.inc();
            warn!(gsp = %gsp.name_any(), %error, "reconcile failed; retrying in 2 s");
            Requeue::requeue(Duration::from_secs(2))
        }
    }
}
