//! What an update to a version would do, decided by the engine itself on a copy of the GluesyncPlatform,
//! changing nothing (`kubectl gluesync plan`): [`preview`] runs [`decide`] on that copy, in memory, from
//! the update's start until the first step that would change something (the drain, or the modules when
//! Core Hub stays), or until Preflight refuses it. The plan it shows is the engine's own plan
//! (`status.update.components`), and the pipelines it counts are those the drain would ask.
//!
//! [`decide`]: super::decide

use std::sync::Arc;

use kube::ResourceExt;

use super::{Observed, decide};
use crate::{
    api::{FINALIZER, GluesyncPlatform, PipelineId, UpdateResult, UpdateStatus, UpdateStep},
    update::catalog::Check,
    update::corehub::{Listing, Pipeline, Report},
};

/// What an update would do.
#[derive(Clone, Debug, PartialEq)]
pub struct Preview {
    pub verdict: Verdict,
    /// The update as the engine left it: its plan (`components`, in the order GKO updates them) once
    /// Preflight passed.
    pub update: Option<UpdateStatus>,
    /// The running pipelines the drain would ask into maintenance mode, in Core Hub's order; `Err`: why
    /// that is not known. Empty when Core Hub stays (nothing is paused).
    pub pause: Result<Vec<PipelineId>, String>,
    /// Pipelines Core Hub lists in maintenance mode already: left as they are.
    pub kept: Option<usize>,
    /// The messages the status would carry, in order.
    pub messages: Vec<String>,
    /// What the update would wait for before its first change (its approval, a maintenance window), in
    /// the words of the status; the preview then goes on as if each were given.
    pub waits: Vec<String>,
}

/// Would the update run?
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// It would run; `next` is the first step that changes something (Drain, or Modules when Core Hub
    /// stays).
    Runs { next: UpdateStep },
    /// Preflight would refuse it, and why.
    Refused(String),
    /// No update would start now, and why.
    NotStarted(String),
    /// The engine wants the catalog's answer to this check: ask it, and preview again with the answer
    /// (as [`Observed::catalog`]) at the same `now`.
    NeedsCatalog(Check),
}

/// The update to `version` on the live objects `obs` (its `corehub` report is not read: `pipelines` is
/// Core Hub's list, or why it could not be had, and `None` when nobody asked).
pub fn preview(
    gsp: &GluesyncPlatform,
    version: &str,
    obs: &Observed,
    pipelines: Option<Result<Arc<Vec<Pipeline>>, String>>,
) -> Preview {
    let mut g = gsp.clone();
    g.spec.version = version.to_string();
    let generation = gsp.metadata.generation.unwrap_or(0) + 1;
    g.metadata.generation = Some(generation);
    // The finalizer GKO puts on before it pauses anything.
    let finalizers = g.metadata.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.to_string());
    }
    let mut p = Preview {
        verdict: Verdict::NotStarted(String::new()),
        update: None,
        pause: Err("Core Hub stays: nothing is paused".into()),
        kept: None,
        messages: vec![],
        waits: vec![],
    };
    let status = gsp.status.clone().unwrap_or_default();
    if let Some(u) = &status.update {
        p.verdict = Verdict::NotStarted(format!(
            "an update to {} runs now (step {:?}): a new version waits for its end",
            u.target.as_deref().unwrap_or("new modules"),
            u.step.name()
        ));
        return p;
    }
    if gsp.metadata.deletion_timestamp.is_some() {
        p.verdict = Verdict::NotStarted("the GluesyncPlatform is being deleted".into());
        return p;
    }
    // Outside every window the update would not start yet: said, then planned as if the window were open.
    if super::plan::wants_update(&g, obs.workloads)
        && let Some(wait) = super::gate::start_wait(&g, &obs.now)
    {
        let mut d = super::Decision::new(status.clone());
        super::gate::show_start_wait(&g, &obs.now, wait, &mut d);
        p.waits.extend(d.status.message);
        g.spec.maintenance_windows.clear();
    }
    let mut report = Report::default();
    for _ in 0..16 {
        let now = Observed {
            now: obs.now.clone(),
            workloads: obs.workloads,
            corehub: &report,
            catalog: obs.catalog,
            target: obs.target.clone(),
            access_problem: obs.access_problem.clone(),
            me: obs.me.clone(),
            dr: obs.dr.clone(),
            pre_pulls: obs.pre_pulls,
        };
        let d = decide(&g, &now);
        if let Some(m) = &d.status.message
            && p.messages.last() != Some(m)
        {
            p.messages.push(m.clone());
        }
        let catalog = d.catalog.clone();
        let again = d.again;
        let entered = d
            .corehub
            .as_ref()
            .map(|w| w.enter.iter().cloned().collect::<Vec<_>>());
        let mut s = d.status;
        let Some(u) = s.update.clone() else {
            p.verdict = match s
                .last_attempt
                .take()
                .filter(|a| a.generation == Some(generation))
            {
                Some(a) if a.result == UpdateResult::Refused => Verdict::Refused(a.message),
                Some(a) => Verdict::NotStarted(a.message),
                None => Verdict::NotStarted(not_started(&g, obs)),
            };
            return p;
        };
        p.update = Some(u.clone());
        g.status = Some(s);
        match u.step.name() {
            UpdateStep::Preflight if !again => {
                p.verdict = match catalog {
                    Some(check) => Verdict::NeedsCatalog(check),
                    None => Verdict::NotStarted(p.messages.last().cloned().unwrap_or_default()),
                };
                return p;
            }
            UpdateStep::Drain if report.epoch.is_empty() => {
                // The drain's first decision, on Core Hub's list as it is now.
                report.epoch = super::pipelines::epoch(&u);
                match &pipelines {
                    Some(result) => {
                        report.listing = Some(Listing {
                            at: obs.now.clone(),
                            result: result.clone(),
                        });
                    }
                    None => {
                        p.pause = Err("Core Hub was not asked".into());
                        p.verdict = Verdict::Runs {
                            next: UpdateStep::Drain,
                        };
                        return p;
                    }
                }
            }
            UpdateStep::Drain | UpdateStep::CoreHub if !report.epoch.is_empty() => {
                p.pause = match &pipelines {
                    Some(Ok(list)) => {
                        p.kept = Some(list.iter().filter(|x| x.is_in_maintenance_mode).count());
                        Ok(entered.unwrap_or_default())
                    }
                    Some(Err(e)) => Err(e.clone()),
                    None => Err("Core Hub was not asked".into()),
                };
                p.verdict = Verdict::Runs {
                    next: UpdateStep::Drain,
                };
                return p;
            }
            UpdateStep::PrePull => {
                // Pulling the new images first: said (the decision that enters the step says it), then
                // taken as done.
                p.waits.extend(p.messages.last().cloned());
                g.spec.pre_pull.enabled = false;
            }
            UpdateStep::Waiting => {
                // Waiting for an approval or a window: said (the decision that enters the step says
                // it), then given.
                p.waits.extend(p.messages.last().cloned());
                if let Some(id) = &u.approval_id {
                    g.annotations_mut()
                        .insert(crate::api::APPROVE_ANNOTATION.into(), id.clone());
                }
                g.spec.maintenance_windows.clear();
            }
            UpdateStep::Modules => {
                p.pause = Ok(vec![]);
                p.verdict = Verdict::Runs {
                    next: UpdateStep::Modules,
                };
                return p;
            }
            _ if !again => {
                p.verdict = Verdict::NotStarted(p.messages.last().cloned().unwrap_or_default());
                return p;
            }
            _ => {}
        }
    }
    p.verdict = Verdict::NotStarted("the engine did not settle on a plan".into());
    p
}

/// Why no update starts for `g` (its spec at the new version).
fn not_started(g: &GluesyncPlatform, obs: &Observed) -> String {
    let status = g.status.clone().unwrap_or_default();
    if status.self_update.is_some() {
        return "GKO's own update runs: an update waits for its end".into();
    }
    if super::disaster::busy(status.disaster_recovery.as_ref()) {
        return "a disaster-recovery setup changes the workloads: an update waits for its end"
            .into();
    }
    if let Some(problem) = super::status::problem(g, obs.workloads).or(obs.access_problem.clone()) {
        return problem.message;
    }
    format!(
        "nothing to change: Core Hub runs {} and every pinned module runs its pin",
        g.spec.version
    )
}
