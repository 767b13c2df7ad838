//! The background worker that talks to Core Hub for one GluesyncPlatform: it resolves the credentials,
//! sends the maintenance requests the engine wants (enter once per epoch; exit once per epoch and again
//! while Core Hub still lists the pipeline in maintenance mode), lists the pipelines, and reports what it
//! saw. Every call is made only while this GKO holds the Lease.

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{info, warn};

use super::CoreHub;
use crate::{
    api::ids::{IdSet, PipelineId},
    update::corehub::{Exits, Listing, Report, Target, Work, in_maintenance},
};
use crate::{
    background::{Input, lock},
    cluster::lease::Leadership,
    metrics::Metrics,
};

/// How many maintenance requests are in flight at once.
const CONCURRENCY: usize = 64;
/// An exit request is sent again when Core Hub still lists the pipeline in maintenance mode this long
/// after it accepted the last one.
const RESEND_EXIT: Duration = Duration::from_secs(15);
/// A pipeline the update's record says was asked in already (by a GKO before this one, which may have
/// stopped right after recording it and before sending) is asked again once when Core Hub still lists it
/// running this long after this worker took the epoch over.
const RESEND_INHERITED_ENTER: Duration = Duration::from_secs(15);
/// Credentials are read again this often (a rotated Secret is picked up).
const REREAD_SECRETS: Duration = Duration::from_secs(60);
/// The pause after a round with errors.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// What every worker shares.
pub struct Env {
    pub client: kube::Client,
    pub namespace: String,
    pub leadership: Leadership,
    pub instance: Option<String>,
    pub metrics: Arc<Metrics>,
    /// Set on shutdown: no new call starts.
    pub stopping: std::sync::atomic::AtomicBool,
    /// The Secrets it may read.
    pub access: crate::update::access::Access,
}

impl Env {
    /// May this worker call Core Hub now? Only the Lease holder, and not once shutdown began.
    fn may_call(&self) -> bool {
        (self.leadership.is_leader() || crate::update::mutated(crate::update::Mutant::IgnoreLease))
            && !self.stopping.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// Sends one kind of maintenance request to each of `ids`, while this GKO holds the Lease: `accepted` is
/// told each id Core Hub accepted, with when it answered, as the answers come (nothing is held per id);
/// the count accepted and the first failure are returned.
async fn send(
    env: &Env,
    client: &CoreHub,
    ids: Vec<PipelineId>,
    enter: bool,
    mut accepted: impl FnMut(PipelineId, Time),
) -> (usize, Option<String>) {
    let mut answers = stream::iter(ids)
        .map(|id| async move {
            if !env.may_call() {
                return (
                    id,
                    Err("this GKO does not hold the Lease, or is stopping".to_string()),
                );
            }
            let r = client
                .set_maintenance(&id, enter)
                .await
                .map(|()| now())
                .map_err(|e| e.to_string());
            (id, r)
        })
        .buffer_unordered(CONCURRENCY);
    let mut ok = 0;
    let mut first = None;
    let mut failed = 0;
    while let Some((id, r)) = answers.next().await {
        match r {
            Ok(at) => {
                ok += 1;
                accepted(id, at);
            }
            Err(e) => {
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    if failed > 0 {
        env.metrics.corehub_errors.inc_by(failed as u64);
        let verb = if enter { "enter" } else { "exit" };
        warn!(
            failed,
            verb,
            error = first.as_deref().unwrap_or(""),
            "maintenance requests failed; retrying"
        );
    }
    (ok, first)
}

/// Waits `wait`, or less when the wanted work asks for a request not sent yet. `false` when the
/// controller is gone.
async fn pause(
    input: &mut Input<Work, Report>,
    wait: Duration,
    epoch: &str,
    entered: &HashSet<PipelineId>,
) -> bool {
    let until = tokio::time::Instant::now() + wait;
    loop {
        tokio::select! {
            changed = input.want.changed() => {
                if changed.is_err() {
                    return false;
                }
                let urgent = match &*input.want.borrow() {
                    None => true,
                    Some(w) => {
                        let report = lock(&input.report);
                        w.epoch != epoch
                            || w.enter.iter().any(|id| !entered.contains(id))
                            || w.exit.iter().any(|id| !report.exits.contains_key(id))
                    }
                };
                if urgent {
                    return true;
                }
            }
            _ = tokio::time::sleep_until(until) => return true,
        }
    }
}

/// Runs until the controller drops the work's sender: each round connects (or keeps the connection),
/// sends the enter and exit requests due, lists the pipelines and reports, then waits for the poll
/// interval or for urgent work.
pub async fn run(env: Arc<Env>, mut input: Input<Work, Report>) {
    let mut connection: Option<Connection> = None;
    let mut asked = Asked::default();
    let mut leader = env.leadership.subscribe();
    loop {
        let Some(work) = input.want.borrow_and_update().clone() else {
            if input.want.changed().await.is_err() {
                return;
            }
            continue;
        };
        if !env.may_call() {
            // The Lease holder asks again what it inherited; this worker, if it takes over once more,
            // inherits afresh.
            asked.inherited.clear();
            tokio::select! {
                changed = input.want.changed() => if changed.is_err() { return },
                _ = leader.changed() => {},
                _ = tokio::time::sleep(Duration::from_secs(1)) => {},
            }
            continue;
        }
        if work.epoch != asked.epoch {
            asked.take_over(&work);
            *lock(&input.report) = Report {
                epoch: asked.epoch.clone(),
                ..Default::default()
            };
        }
        let client = match connected(&env, &mut connection, &work.target).await {
            Ok(client) => client,
            Err(e) => {
                {
                    let mut report = lock(&input.report);
                    report.listing = Some(Listing {
                        at: now(),
                        result: Err(e.clone()),
                    });
                    report.error = Some(e);
                }
                input.wake.wake();
                if !pause(
                    &mut input,
                    ERROR_PAUSE.max(work.poll),
                    &asked.epoch,
                    &asked.entered,
                )
                .await
                {
                    return;
                }
                continue;
            }
        };

        let mut errors = None;
        let to_enter = asked.enter_due(&work, &lock(&input.report));
        if !to_enter.is_empty() {
            let count = to_enter.len();
            let forget = crate::update::mutated(crate::update::Mutant::ForgetAsked);
            // Made as large as it will be at once: a table that doubles holds both sizes for a moment.
            asked.entered.reserve(count);
            let entered = &mut asked.entered;
            let (accepted, error) = send(&env, &client, to_enter, true, |id, _| {
                if !forget {
                    entered.insert(id);
                }
            })
            .await;
            info!(asked = count, accepted, "maintenance enter requests sent");
            errors = errors.or(error);
        }

        let to_exit = exit_due(&work, &lock(&input.report));
        if !to_exit.is_empty() {
            let count = to_exit.len();
            // Recorded together at the end: the report the engine may hold is copied once, not per id.
            let mut ok = Vec::with_capacity(count);
            let (accepted, error) = send(&env, &client, to_exit, false, |id, at| {
                ok.push((id, Exits::stamp(&at)))
            })
            .await;
            info!(asked = count, accepted, "maintenance exit requests sent");
            lock(&input.report).exits.extend(ok);
            errors = errors.or(error);
        }

        if !env.may_call() {
            continue;
        }
        let failed = list(&env, &client, &input, asked.entered.len(), errors).await;
        input.wake.wake();
        let wait = if failed {
            work.poll.max(ERROR_PAUSE)
        } else {
            work.poll
        };
        if !pause(&mut input, wait, &asked.epoch, &asked.entered).await {
            return;
        }
    }
}

/// A client of Core Hub, the target it was made for and when.
type Connection = (Target, Instant, Arc<CoreHub>);

/// The client for `target`: the one in hand while its credentials are fresh enough, else a new one
/// (the Secrets read again).
async fn connected(
    env: &Env,
    connection: &mut Option<Connection>,
    target: &Target,
) -> Result<Arc<CoreHub>, String> {
    if let Some((made_for, at, client)) = connection.as_ref()
        && made_for == target
        && at.elapsed() < REREAD_SECRETS
    {
        return Ok(client.clone());
    }
    let client = Arc::new(
        super::connect::connect(
            &env.client,
            &env.namespace,
            env.instance.as_deref(),
            &env.access,
            target,
        )
        .await?,
    );
    *connection = Some((target.clone(), Instant::now(), client.clone()));
    Ok(client)
}

/// The pipelines this worker asked into maintenance mode in the epoch it works for.
#[derive(Default)]
struct Asked {
    epoch: String,
    entered: HashSet<PipelineId>,
    /// The asked pipelines this worker found recorded when it took the epoch over, and when.
    inherited: HashSet<PipelineId>,
    inherited_at: jiff::Timestamp,
}

impl Asked {
    /// A new epoch: what the update's record says was asked already counts as entered (and inherited).
    fn take_over(&mut self, work: &Work) {
        self.epoch = work.epoch.clone();
        self.entered = work.asked.iter().cloned().collect();
        self.inherited = self.entered.clone();
        self.inherited_at = jiff::Timestamp::now();
    }

    /// The enter requests due: once per epoch, and a pipeline another GKO recorded as asked once more,
    /// when it is still listed running well after the takeover.
    fn enter_due(&mut self, work: &Work, report: &Report) -> Vec<PipelineId> {
        let mut to_enter: Vec<PipelineId> = work
            .enter
            .iter()
            .filter(|id| !self.entered.contains(*id))
            .cloned()
            .collect();
        if !self.inherited.is_empty()
            && let Some(Listing {
                at,
                result: Ok(list),
            }) = &report.listing
            && at.0.duration_since(self.inherited_at).as_secs()
                >= RESEND_INHERITED_ENTER.as_secs() as i64
        {
            let paused = in_maintenance(list);
            let again: Vec<PipelineId> = work
                .enter
                .iter()
                .filter(|id| self.inherited.contains(*id) && !paused.contains(id.as_str()))
                .cloned()
                .collect();
            if !again.is_empty() {
                info!(
                    count = again.len(),
                    "asking again pipelines recorded as asked that are still running"
                );
            }
            // Once: whatever the answer, none is asked a third time.
            self.inherited.clear();
            to_enter.extend(again);
        }
        to_enter
    }
}

/// The exit requests due: once per epoch, and again while Core Hub still lists the pipeline in
/// maintenance mode `RESEND_EXIT` after it accepted the last one.
fn exit_due(work: &Work, report: &Report) -> Vec<PipelineId> {
    // The ids the latest list shows in maintenance mode, and when it was fetched: gathered once, the
    // first time a request is due again (never a scan of the list per id).
    let mut listed: Option<(jiff::Timestamp, IdSet<'_>)> = None;
    let mut still_paused = |id: &str, asked: &Time| {
        let (at, paused) = listed.get_or_insert_with(|| match &report.listing {
            Some(Listing {
                at,
                result: Ok(list),
            }) => (at.0, in_maintenance(list)),
            _ => (jiff::Timestamp::MIN, IdSet::default()),
        });
        *at > asked.0 && paused.contains(id)
    };
    work.exit
        .iter()
        .filter(|id| match report.exits.get(id) {
            None => true,
            Some(asked) => {
                jiff::Timestamp::now().duration_since(asked.0).as_secs() as u64
                    >= RESEND_EXIT.as_secs()
                    && still_paused(id, &asked)
            }
        })
        .cloned()
        .collect()
}

/// Lists the pipelines (reusing the last listing's ids) and reports the round: how many are entered,
/// the requests' error, the listing. `true` when the round failed somewhere.
async fn list(
    env: &Env,
    client: &CoreHub,
    input: &Input<Work, Report>,
    entered: usize,
    errors: Option<String>,
) -> bool {
    let at = now();
    let previous = match &lock(&input.report).listing {
        Some(Listing {
            result: Ok(list), ..
        }) => Some(list.clone()),
        _ => None,
    };
    let result = client
        .pipelines_after(previous)
        .await
        .map(Arc::new)
        .map_err(|e| {
            env.metrics.corehub_errors.inc();
            e.to_string()
        });
    let failed = errors.is_some() || result.is_err();
    let mut report = lock(&input.report);
    report.entered = entered;
    report.error = errors;
    report.listing = Some(Listing { at, result });
    failed
}
