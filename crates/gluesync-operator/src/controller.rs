//! The thin loop, for one GluesyncPlatform: observe (the platform, then one owned snapshot of the
//! caches and the background work's reports) → [`update::decide`] → commit the status it gives → carry
//! out its actions on the committed platform → hand the background work its new wants and record its
//! events. Only the Lease holder reconciles.

mod step;
mod unparsed;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{ResourceExt, core::DeserializeGuard, runtime::controller::Action as Requeue};
use tracing::{instrument, warn};

use crate::{
    api::GluesyncPlatform,
    background::{Tasks, lock},
    cluster::{
        commit::{CommitError, StepClock},
        observe::{self, Snapshot},
        pending::{Book, Facts, Offer},
        spill,
        view::View,
        wording::Said,
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
    /// The decisions held unwritten and the versions this GKO last wrote or read.
    book: Book,
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
            book: Book::default(),
            unparsed: Default::default(),
        }
    }

    /// Forgets what it keeps of every platform but those `keep` names (deleted platforms).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.book.retain(&keep);
        lock(&self.unparsed).retain(|uid, _| keep(uid));
    }
}

/// How many steps one reconcile may take in a row before it lets others run.
const STEPS_PER_RECONCILE: usize = 32;

/// Observe → decide → commit → execute, step after step while the update moves on: a decision that
/// may go unwritten is kept pending ([`pending`]) and written with the first one that must be.
#[instrument(skip_all, fields(gsp = %cached.name_any()))]
pub async fn reconcile(
    cached: Arc<DeserializeGuard<GluesyncPlatform>>,
    ctx: Arc<Context>,
) -> Result<Requeue, Error> {
    let view = &ctx.view;
    let cached = match &cached.0 {
        Ok(gsp) => gsp,
        Err(invalid) => return Ok(unparsed::not_parsed(&ctx, &cached, invalid).await),
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
    ctx.book.turn(view.writer.leadership().transitions());
    let uid = cached.uid().unwrap_or_default();
    let last_seen = ctx.book.last_seen(&uid);
    let observed = observe::platform(
        view,
        &ctx.lists,
        cached,
        last_seen.as_ref(),
        ctx.book.holds(&uid),
    );
    let Some(mut gsp) = observed.await.map_err(Error::Read)? else {
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    };
    ctx.book.saw(&gsp);
    // The pair's Secret and Service, read once, and again only after GKO wrote or deleted one.
    let mut dr = observe::dr_objects(view, &gsp).await.map_err(Error::Read)?;
    let mut pending = ctx.book.resume(&mut gsp);
    for i in 0..STEPS_PER_RECONCILE {
        // A workload may have appeared during the last step's writes, its pods not yet watched, or the
        // caches may not show one of this GKO's own workload writes yet: what was decided so far is
        // written, and the rest waits for the caches.
        if !view.pods_listed() || view.lagging_write().is_some() {
            if let (Some(status), events) = pending.unwind(&mut gsp)
                && let Some(committed) = step::write(&ctx, gsp, status).await?
            {
                committed.record(view, events);
            }
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
        let facts = Facts::of(&decision, &gsp, i + 1 == STEPS_PER_RECONCILE);
        match pending.offer(facts, Instant::now()) {
            Offer::MoveOn => {
                // It does nothing of its own (its actions are dropped): the step it moves to decides
                // again what is still wanted.
                step::take_in(&ctx, &mut gsp, &mut pending, decision);
            }
            Offer::Hold(left) => return Ok(step::hold(&ctx, gsp, pending, decision, left).await),
            Offer::Write => {
                let (_, events) = pending.unwind(&mut gsp);
                match step::carry_out(&ctx, gsp, decision, events, &mut dr).await? {
                    step::Carried::Again(platform) => gsp = *platform,
                    step::Carried::Done(requeue) => return Ok(requeue),
                }
            }
        }
    }
    Ok(Requeue::requeue(Duration::from_millis(10)))
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
            warn!(gsp = %gsp.name_any(), error = %Said(error), "reconcile failed; retrying in 2 s");
            Requeue::requeue(Duration::from_secs(2))
        }
    }
}
