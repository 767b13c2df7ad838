//! The thin loop, for one GluesyncPlatform: observe (the platform, then one owned snapshot of the
//! caches and the background work's reports) → [`update::decide`] → commit the status it gives → carry
//! out its actions on the committed platform → hand the background work its new wants and record its
//! events. Only the Lease holder reconciles.

use crate::cluster::wording::Said;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{
    ResourceExt,
    core::{DeserializeGuard, error_boundary::InvalidObject},
    runtime::{controller::Action as Requeue, events::EventType},
};
use tracing::{instrument, warn};

use crate::{
    api::{GluesyncPlatform, GluesyncPlatformStatus, Reason},
    background::{Tasks, lock},
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
    /// A waiting update's status not written yet, by platform (see [`reconcile`]).
    held: std::sync::Mutex<std::collections::HashMap<String, Held>>,
    /// Each platform as this GKO last wrote it or read it (see [`observe::platform`]).
    written: std::sync::Mutex<std::collections::HashMap<String, observe::Written>>,
    /// The resourceVersion of each platform that did not parse, once reported: said once per version.
    unparsed: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The Lease's transitions as the last reconcile saw them: `written` and `held` are forgotten when
    /// leadership changed hands since (another GKO may have written meanwhile).
    term: std::sync::atomic::AtomicU64,
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
            written: Default::default(),
            held: Default::default(),
            unparsed: Default::default(),
            term: Default::default(),
        }
    }
}

impl Context {
    fn written_version(&self, uid: &str) -> Option<observe::Written> {
        lock(&self.written).get(uid).cloned()
    }

    /// Forgets what it keeps of every platform but those `keep` names (deleted platforms).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        lock(&self.written).retain(|uid, _| keep(uid));
        lock(&self.held).retain(|uid, _| keep(uid));
        lock(&self.unparsed).retain(|uid, _| keep(uid));
    }

    /// Remembers the platform as this GKO wrote it (or read it back).
    fn wrote(&self, gsp: &GluesyncPlatform) {
        if let (Some(uid), Some(version)) = (gsp.uid(), gsp.resource_version()) {
            let in_update = gsp.status.as_ref().is_some_and(|s| s.update.is_some());
            lock(&self.written).insert(uid, observe::Written { version, in_update });
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
    // What this GKO knows of its own writes and of the decisions it holds is from before leadership last
    // changed hands, if it did: another GKO may have written since.
    let term = view.writer.leadership().transitions();
    if ctx.term.swap(term, std::sync::atomic::Ordering::Relaxed) != term {
        lock(&ctx.written).clear();
        lock(&ctx.held).clear();
    }
    let uid = cached.uid().unwrap_or_default();
    let written = ctx.written_version(&uid);
    let holding = lock(&ctx.held).contains_key(&uid);
    let Some(mut gsp) = observe::platform(view, &ctx.lists, cached, written.as_ref(), holding)
        .await
        .map_err(Error::Read)?
    else {
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    };
    // The version decided on (read fresh, or cached) is the one to compare the cache with next time.
    ctx.wrote(&gsp);
    // The pair's Secret and Service, read once, and again only after GKO wrote or deleted one.
    let mut dr = observe::dr_objects(view, &gsp).await.map_err(Error::Read)?;
    // While an update runs, a decision whose actions need no status (a pre-pull pod deleted, GKO's
    // finalizer put on: found again without one) and that asks Core Hub to pause nothing need not be
    // written at once (a crash before its write loses nothing): one that moves the step on is taken
    // further in memory, doing nothing of its own, and one that waits carries out its actions and is
    // held for up to `UNWRITTEN` in case what it waits for comes at once. The first decision that needs its status,
    // or a wait held that long, writes them all together with their events. `written` is the status the
    // API server holds when `gsp` holds one not written.
    let mut unwritten = Unwritten::default();
    if let Some(held) = lock(&ctx.held).remove(&uid)
        && gsp.resource_version().as_ref() == Some(&held.base)
    {
        unwritten = Unwritten {
            written: Some(gsp.status.replace(held.status)),
            events: held.events,
            since: Some(held.since),
        };
    }
    for i in 0..STEPS_PER_RECONCILE {
        // A workload may have appeared during the last step's writes, its pods not yet watched, or the
        // caches may not show one of this GKO's own workload writes yet: what was decided so far is
        // written, and the rest waits for the caches.
        if !view.pods_listed() || view.lagging_write().is_some() {
            if let Some(before) = unwritten.written.take() {
                let status = std::mem::replace(&mut gsp.status, before).unwrap_or_default();
                let Some(committed) = write(&ctx, gsp, status).await? else {
                    return Ok(Requeue::await_change());
                };
                committed.record(view, unwritten.events);
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
        let mut decision = update::decide(&gsp, &snapshot.observed());
        if decision.passes_through() {
            // Only an update's statuses: a disaster-recovery setup and the idle status are written
            // at every step, as each of their steps is a point a restart starts again from.
            let in_update = decision.status.update.is_some();
            let moves_on = decision.again && in_update && i + 1 < STEPS_PER_RECONCILE;
            let changed =
                unwritten.written.is_some() || gsp.status.as_ref() != Some(&decision.status);
            let since = *unwritten.since.get_or_insert_with(Instant::now);
            let left = UNWRITTEN.saturating_sub(since.elapsed());
            let holds = !decision.again && changed && in_update && !left.is_zero();
            if moves_on || holds {
                ctx.clock
                    .observe(view, &uid, gsp.status.as_ref(), &decision.status);
                view.metrics.platform(&gsp, &decision.status);
                ctx.corehub.want(&gsp, decision.corehub);
                ctx.catalog.want(&gsp, decision.catalog);
                unwritten.events.append(&mut decision.events);
                let before = gsp.status.replace(decision.status);
                unwritten.written.get_or_insert(before);
                // What a decision that waits does needs no status (a pre-pull pod deleted, GKO's
                // finalizer put on): done now. A decision that moves on does nothing of its own: the
                // step it moves to decides again what is still wanted (and Preflight and Snapshot keep
                // the pre-pull pods of an update begun again, see `decide_now`).
                if holds && !decision.actions.is_empty() {
                    let actions = std::mem::take(&mut decision.actions);
                    // A finalizer change answers the platform as written: the next write starts from
                    // its resourceVersion, and a status held waits on it. (A failed action is tried
                    // again by the next decision, within `UNWRITTEN`.)
                    if let Some(written) = commit::unwritten(view, &gsp, actions).await {
                        gsp = written;
                        ctx.wrote(&gsp);
                    }
                }
                if moves_on {
                    continue;
                }
                lock(&ctx.held).insert(
                    uid.clone(),
                    Held {
                        base: gsp.resource_version().unwrap_or_default(),
                        status: gsp.status.take().unwrap_or_default(),
                        events: unwritten.events,
                        since,
                    },
                );
                let after = decision.requeue.map_or(left, |r| r.min(left));
                return Ok(Requeue::requeue(after));
            }
        }
        if let Some(before) = unwritten.written.take() {
            gsp.status = before;
        }
        unwritten.since = None;
        let actions = decision.actions;
        let Some(mut committed) = write(&ctx, gsp, decision.status).await? else {
            return Ok(Requeue::await_change());
        };
        // The background work first: it runs beside the actions (the drain's requests do not wait for
        // a pre-pull pod's deletion), and the status it may need is written.
        ctx.corehub.want(committed.platform(), decision.corehub);
        ctx.catalog.want(committed.platform(), decision.catalog);
        let executed = committed.execute(view, actions).await;
        if executed.pair_changed {
            dr = observe::dr_objects(view, committed.platform())
                .await
                .map_err(Error::Read)?;
        }
        unwritten.events.append(&mut decision.events);
        committed.record(view, std::mem::take(&mut unwritten.events));
        gsp = committed.into_platform();
        // An action may have changed the platform (a finalizer): its resourceVersion is the latest.
        ctx.wrote(&gsp);
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

/// Commits `status` and remembers the resourceVersion written; `None` when this GKO no longer leads.
async fn write(
    ctx: &Context,
    gsp: GluesyncPlatform,
    status: GluesyncPlatformStatus,
) -> Result<Option<commit::Committed>, Error> {
    match commit::commit(&ctx.view, &ctx.lists, &ctx.clock, gsp, status).await {
        Ok(c) => {
            ctx.wrote(c.platform());
            Ok(Some(c))
        }
        Err(CommitError::NotLeader) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// How long a waiting update's status that acts on nothing may stay unwritten.
const UNWRITTEN: Duration = Duration::from_millis(100);

/// What a reconcile decided and has not written yet.
#[derive(Default)]
struct Unwritten {
    /// The status the API server holds, while the platform in hand holds one not written.
    written: Option<Option<GluesyncPlatformStatus>>,
    /// The events of the decisions not written: recorded with the write.
    events: Vec<update::Event>,
    /// When the oldest decision not written was made.
    since: Option<Instant>,
}

/// A waiting update's status held unwritten between reconciles: taken up again by the next one if the
/// platform is still at `base` (its resourceVersion), else dropped (it acted on nothing).
struct Held {
    base: String,
    status: GluesyncPlatformStatus,
    events: Vec<update::Event>,
    since: Instant,
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
    let said = lock(&ctx.unparsed)
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
    {
        warn!(error = %Said(&e), "recording an event failed");
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
            warn!(gsp = %gsp.name_any(), error = %Said(error), "reconcile failed; retrying in 2 s");
            Requeue::requeue(Duration::from_secs(2))
        }
    }
}
