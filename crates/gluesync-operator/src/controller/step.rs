//! A decision's way to the cluster from the loop: taken in unwritten ([`take_in`]), held while it waits
//! ([`hold`]), or written and carried out ([`carry_out`]).

use std::time::Duration;

use kube::runtime::controller::Action as Requeue;

use super::{Context, Error};
use crate::{
    api::{GluesyncPlatform, GluesyncPlatformStatus},
    cluster::{commit, observe, pending::Pending},
    update,
};

/// Takes a decision in unwritten: the background work gets its wants, the step clock and the metrics
/// see its status, and `gsp` holds it.
pub(super) fn take_in(
    ctx: &Context,
    gsp: &mut GluesyncPlatform,
    pending: &mut Pending,
    mut decision: update::Decision,
) {
    commit::observe(&ctx.view, &ctx.clock, gsp, &decision.status);
    ctx.corehub.want(gsp, decision.corehub.take());
    ctx.catalog.want(gsp, decision.catalog.take());
    pending.take(gsp, decision.status, &mut decision.events);
}

/// Holds a decision that waits: its actions (none needs a status) are carried out now, and it is held
/// for the next reconcile, which comes within `left`.
pub(super) async fn hold(
    ctx: &Context,
    mut gsp: GluesyncPlatform,
    mut pending: Pending,
    mut decision: update::Decision,
    left: Duration,
) -> Requeue {
    let free = decision.take_status_free().unwrap_or_default();
    let requeue = decision.requeue.map_or(left, |r| r.min(left));
    take_in(ctx, &mut gsp, &mut pending, decision);
    // A finalizer change answers the platform as written: the next write starts from its
    // resourceVersion, and the decision held waits on it. (A failed action is asked again by the next
    // decision, within `UNWRITTEN`.)
    if !free.is_empty()
        && let Some(written) = commit::unwritten(&ctx.view, &gsp, free).await
    {
        gsp = written;
        ctx.book.saw(&gsp);
    }
    ctx.book.hold(&mut gsp, pending);
    Requeue::requeue(requeue)
}

/// What a decision written and carried out leaves: the platform to decide on again at once, or the
/// reconcile's end.
pub(super) enum Carried {
    Again(Box<GluesyncPlatform>),
    Done(Requeue),
}

/// Writes a decision's status and carries out the rest: the background work's wants first (it runs
/// beside the actions, and the status it may need is written), then the actions, then the events (those
/// pending before it first).
pub(super) async fn carry_out(
    ctx: &Context,
    gsp: GluesyncPlatform,
    mut decision: update::Decision,
    mut events: Vec<update::Event>,
    dr: &mut update::disaster::DrObjects,
) -> Result<Carried, Error> {
    let view = &ctx.view;
    let actions = std::mem::take(&mut decision.actions);
    let Some(mut committed) = write(ctx, gsp, decision.status).await? else {
        return Ok(Carried::Done(Requeue::await_change()));
    };
    ctx.corehub.want(committed.platform(), decision.corehub);
    ctx.catalog.want(committed.platform(), decision.catalog);
    let executed = committed.execute(view, actions).await;
    if executed.pair_changed {
        *dr = observe::dr_objects(view, committed.platform())
            .await
            .map_err(Error::Read)?;
    }
    events.append(&mut decision.events);
    committed.record(view, events);
    let gsp = committed.into_platform();
    // An action may have changed the platform (a finalizer): its resourceVersion is the latest.
    ctx.book.saw(&gsp);
    if decision.again {
        return Ok(Carried::Again(Box::new(gsp)));
    }
    // A failed action is tried again soon, whatever else the decision waits for.
    let retry = executed.failed.then_some(Duration::from_secs(2));
    Ok(Carried::Done(
        match decision.requeue.into_iter().chain(retry).min() {
            Some(after) => Requeue::requeue(after),
            None => Requeue::await_change(),
        },
    ))
}

/// Commits `status` and remembers the resourceVersion written; `None` when this GKO no longer leads.
pub(super) async fn write(
    ctx: &Context,
    gsp: GluesyncPlatform,
    status: GluesyncPlatformStatus,
) -> Result<Option<commit::Committed>, Error> {
    match commit::commit(&ctx.view, &ctx.lists, &ctx.clock, gsp, status).await {
        Ok(c) => {
            ctx.book.saw(c.platform());
            Ok(Some(c))
        }
        Err(commit::CommitError::NotLeader) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
