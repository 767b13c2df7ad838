//! A model check of the update: every interleaving, up to a bound, of what the world around [`decide`]
//! can do, checked against the product's promises.
//!
//! The model world is small and explicit: two running pipelines and one a user paused; a Core Hub that
//! applies each maintenance request at once or late (within [`LATE`] seconds), and may be down; a Core
//! Hub workload whose new pods become ready, crash-loop or never pull; the catalog answering or not; the API server
//! refusing a status write (a stale resourceVersion); GKO crashing at any point between its own steps
//! (after a decision, after the status write, after each action, between its Core Hub calls) and starting
//! again with only the status as memory (which is also what a second GKO taking the Lease sees). The real
//! [`decide`] runs on it, exactly as the controller runs it: decide, write the status, carry out the
//! actions one by one, hand the background work its wants; the worker sends one request at a time and
//! lists the pipelines.
//!
//! Properties:
//! - always: a running pipeline GKO asked into maintenance mode (applied, or accepted and still to land)
//!   is recorded in `status.pausedPipelines` or `status.lateMaintenance`;
//! - always: Core Hub's image is changed only while every pipeline that was running is in maintenance
//!   mode;
//! - eventually, once faults stop (a fair run from every state explored): the update ends Succeeded,
//!   Degraded, Failed or Refused, with one history entry, every pipeline that was running runs again, the
//!   one the user paused stays paused, nothing is left in the ledger, the finalizer is gone, a Refused
//!   update changed no image, and the phase follows the product docs' table.
//!
//! Breadth-first, so a violation comes with its shortest history, printed as a readable sequence of
//! events.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    fmt::Write as _,
    time::Instant,
};

use super::{mutants::set_mutant, *};
use crate::{
    api::{GluesyncPlatformSpec, PipelineId},
    update::corehub::{Listing, Pipeline},
    update::observed::PodView,
};

const RUNNING: [&str; 2] = ["p1", "p2"];
const USER_PAUSED: &str = "u1";
const OLD: &str = "molo17/gluesync-core-hub:2.3.2.1";
const NEW: &str = "molo17/gluesync-core-hub:2.3.2.2";
/// A request Core Hub accepts late lands within this many seconds.
const LATE: i64 = 8;
/// No time passes beyond this (seconds after the update was asked for).
const HORIZON: i64 = 200;

/// How many faults a history may have.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Budget {
    pub crashes: u8,
    pub outages: u8,
    pub conflicts: u8,
    pub late: u8,
}

/// What the new Core Hub image does once its pods start.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Fate {
    Ready,
    CrashLoop,
    Unpullable,
}

/// A maintenance request Core Hub accepted and applies by `by`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Late {
    id: String,
    enter: bool,
    by: i64,
}

/// GKO's memory: lost when it crashes.
#[derive(Clone, Debug, Default)]
struct Process {
    /// Decided, with the status written, not yet carried out.
    actions: Vec<Action>,
    /// Wants to hand the background work once the actions are done.
    handoff: Option<(Option<Work>, Option<Check>)>,
    work: Option<Work>,
    report: Report,
    entered: BTreeSet<PipelineId>,
    check: Option<Check>,
    answer: Option<Answer>,
}

/// A gate of the user's terms the model's spec has.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Gate {
    /// `approval: manual`, refused after a minute; the user may approve at any point once the status
    /// names the approval.
    Approval,
    /// A maintenance window from 60 s to 120 s (08:01 to 08:02 UTC).
    Window,
    /// Not a gate: Core Hub's pod runs on a node, so the update pre-pulls the new image there before
    /// its drain (the pull succeeds, or fails for an unpullable image).
    PrePull,
}

/// When the model's window opens.
const WINDOW_OPENS: i64 = 60;

#[derive(Clone, Debug)]
struct State {
    gate: Option<Gate>,
    /// The user wrote the approve annotation.
    approved: bool,
    now: i64,
    /// Orders events within a second (exit acknowledgements before a later list).
    seq: i64,
    gsp: GluesyncPlatform,
    pipelines: BTreeMap<String, bool>,
    late: Vec<Late>,
    down: bool,
    image: String,
    pods: String,
    fate: Fate,
    gko: Process,
    budget: Budget,
    image_changed: bool,
    /// The pre-pull pods, by name, and where each stands.
    pulls: BTreeMap<String, crate::update::observed::PullState>,
    /// The new image is on the node (a pre-pull pod pulled it).
    pulled: bool,
}

fn time(now: i64, seq: i64) -> Time {
    Time(jiff::Timestamp::from_millisecond((1_800_000_000 + now) * 1000 + seq).unwrap())
}

impl State {
    fn initial(fate: Fate, budget: Budget, gate: Option<Gate>) -> State {
        let spec = |v: &str| {
            let mut spec = serde_json::json!({
                "version": v,
                "drainTimeoutSeconds": 5,
                "stabilityWindowSeconds": 0,
                "stabilityTimeoutSeconds": 10,
                "catalog": {"url": "https://catalog"},
            });
            match gate {
                Some(Gate::Approval) => {
                    spec["approval"] = "manual".into();
                    spec["approvalTimeoutMinutes"] = 1.into();
                }
                Some(Gate::Window) => {
                    spec["maintenanceWindows"] =
                        serde_json::json!([{"start": "08:01", "durationMinutes": 1}]);
                }
                Some(Gate::PrePull) => spec["prePull"] = serde_json::json!({"timeoutSeconds": 10}),
                None => {}
            }
            serde_json::from_value::<GluesyncPlatformSpec>(spec).unwrap()
        };
        let mut gsp = GluesyncPlatform::new("gluesync", spec("2.3.2.1"));
        gsp.metadata.namespace = Some("ns".into());
        gsp.metadata.uid = Some("uid".into());
        gsp.metadata.generation = Some(1);
        let mut s = State {
            gate,
            approved: false,
            now: 0,
            seq: 0,
            gsp: gsp.clone(),
            pipelines: RUNNING
                .iter()
                .map(|p| (p.to_string(), false))
                .chain([(USER_PAUSED.to_string(), true)])
                .collect(),
            late: vec![],
            down: false,
            image: OLD.into(),
            pods: OLD.into(),
            fate,
            gko: Process::default(),
            budget,
            image_changed: false,
            pulls: BTreeMap::new(),
            pulled: false,
        };
        // Settled at 2.3.2.1, with the catalog saying 2.3.2.2 is available; then the spec asks for it.
        let mut status = crate::update::status::idle(&gsp, &s.workloads(), &time(0, 0));
        status.components = crate::update::status::components(&gsp, &s.workloads());
        crate::update::catalog::apply(&gsp, &mut status, &Ok(catalog()), &time(0, 0));
        gsp.status = Some(status);
        gsp.status = Some(crate::update::status::idle(
            &gsp,
            &s.workloads(),
            &time(0, 0),
        ));
        gsp.spec = spec("2.3.2.2");
        gsp.metadata.generation = Some(2);
        s.gsp = gsp;
        s
    }

    fn status(&self) -> GluesyncPlatformStatus {
        self.gsp.status.clone().unwrap_or_default()
    }

    /// What distinguishes this state from another: everything but the Debug-only details.
    fn key(&self) -> String {
        let mut k = String::with_capacity(2048);
        let _ = write!(
            k,
            "{:?}|{}|{}|{}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{}|{:?}",
            self.pulls,
            self.pulled,
            self.approved,
            self.now,
            self.seq,
            serde_json::to_string(&self.gsp.status).unwrap_or_default(),
            self.gsp.metadata.finalizers,
            self.down,
            self.image,
            self.pods,
            self.pipelines,
            self.late,
            self.image_changed,
            self.budget,
        );
        let g = &self.gko;
        let _ = write!(
            k,
            "|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            g.actions, g.handoff, g.work, g.report, g.entered, g.check, g.answer
        );
        k
    }

    /// What a fair run must change to count as progress: everything but the order of events within a
    /// second and the times of the worker's answers.
    fn progress(&self) -> String {
        let g = &self.gko;
        format!(
            "{:?}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.pulls,
            self.now,
            serde_json::to_string(&self.gsp.status).unwrap_or_default(),
            self.gsp.metadata.finalizers,
            self.down,
            self.image,
            self.pods,
            self.pipelines,
            self.late,
            g.work,
            g.entered,
            g.report.exits.keys().collect::<Vec<_>>(),
            g.check.as_ref().map(|c| &c.token),
            g.answer.as_ref().map(|a| &a.token),
        )
    }

    fn workloads(&self) -> Vec<Workload> {
        let failing = self.pods == NEW && self.fate != Fate::Ready;
        let crashing = failing && self.fate == Fate::CrashLoop;
        let pod_ready = !failing;
        let waiting = match (failing, self.fate) {
            (true, Fate::CrashLoop) => {
                Some(("CrashLoopBackOff".to_string(), "back-off".to_string()))
            }
            (true, _) => Some((
                "ImagePullBackOff".to_string(),
                "manifest unknown".to_string(),
            )),
            _ => None,
        };
        vec![Workload {
            kind: WorkloadKind::StatefulSet,
            name: "core-hub".into(),
            uid: "core-hub-uid".into(),
            component_type: Some(ComponentType::CoreHub),
            label_value: "core-hub".into(),
            container: Some("c".into()),
            image: self.image.clone(),
            ready: self.pods == self.image && pod_ready,
            progress_deadline_exceeded: false,
            rollout_blocker: None,
            self_update_mark: None,
            template: Box::default(),
            selector: Default::default(),
            pods: vec![PodView {
                name: "core-hub-0".into(),
                uid: format!("pod-{}", self.pods),
                image: self.pods.clone(),
                ready: pod_ready,
                waiting,
                restarts: i32::from(crashing),
                node: (self.gate == Some(Gate::PrePull)).then(|| "n1".to_string()),
                dr_mark: None,
            }],
        }]
    }

    fn pre_pulls(&self) -> Vec<crate::update::observed::PrePullPod> {
        self.pulls
            .iter()
            .map(|(name, state)| crate::update::observed::PrePullPod {
                name: name.clone(),
                platform: "gluesync".into(),
                node: "n1".into(),
                image: NEW.into(),
                state: state.clone(),
            })
            .collect()
    }

    /// A pre-pull pod's pull ends: the image is on the node, or (unpullable) the pull fails.
    fn pull_ends(&mut self, name: &str) {
        use crate::update::observed::PullState;
        let state = if self.fate == Fate::Unpullable {
            PullState::Failed("ImagePullBackOff".into(), "manifest unknown".into())
        } else {
            self.pulled = true;
            PullState::Pulled
        };
        self.pulls.insert(name.to_string(), state);
    }

    fn pulling(&self) -> Vec<String> {
        self.pulls
            .iter()
            .filter(|(_, s)| **s == crate::update::observed::PullState::Pulling)
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn stamp(&mut self) -> Time {
        self.seq += 1;
        time(self.now, self.seq)
    }

    fn target() -> Target {
        Target {
            url: "https://core-hub".into(),
            credentials_secret: None,
            ca_secret: None,
            insecure_skip_verify: false,
        }
    }

    /// One reconcile: decide, write the status (or have it refused), keep the actions to carry out.
    fn reconcile(&self, conflict: bool) -> State {
        let mut s = self.clone();
        let workloads = s.workloads();
        let pre_pulls = s.pre_pulls();
        let d = decide(
            &s.gsp,
            &Observed {
                now: time(s.now, s.seq),
                workloads: &workloads,
                corehub: &s.gko.report,
                catalog: s.gko.answer.as_ref(),
                target: Some(State::target()),
                access_problem: None,
                me: None,
                dr: Default::default(),
                pre_pulls: &pre_pulls,
            },
        );
        if s.gsp.status.as_ref() != Some(&d.status) {
            if conflict {
                s.budget.conflicts -= 1;
                return s;
            }
            s.gsp.status = Some(d.status.clone());
        }
        // As the controller does: the background work is handed over with the status written, and the
        // actions are carried out after it.
        s.gko.actions = d.actions;
        s.gko.handoff = Some((d.corehub, d.catalog));
        s.hand_off();
        s
    }

    /// Carries out every action in hand and hands the background work over (a fair run's GKO).
    fn carry_out_all(&mut self) -> Result<(), String> {
        while !self.gko.actions.is_empty() {
            let action = self.gko.actions.remove(0);
            self.apply_checked(&action, false)?;
        }
        self.hand_off();
        Ok(())
    }

    fn hand_off(&mut self) {
        if let Some((work, check)) = self.gko.handoff.take() {
            self.gko.work = work;
            self.gko.check = check;
        }
    }

    /// Carries out an action in the model world; `Err` when it breaks a promise.
    fn apply(&mut self, action: &Action) -> Result<(), String> {
        self.apply_checked(action, true)
    }

    fn apply_checked(&mut self, action: &Action, checking: bool) -> Result<(), String> {
        match action {
            Action::SetImage { image, .. } => {
                if checking && image == NEW {
                    let out: Vec<&str> = RUNNING
                        .iter()
                        .filter(|p| !self.pipelines[**p])
                        .copied()
                        .collect();
                    if !out.is_empty() {
                        return Err(format!(
                            "Core Hub patched while {out:?} ran outside maintenance mode"
                        ));
                    }
                }
                if *image != self.image {
                    self.image_changed = true;
                }
                self.image = image.clone();
            }
            Action::DeletePrePull(name) => {
                self.pulls.remove(name);
            }
            Action::DeletePod(_) => self.pods = self.image.clone(),
            Action::CreatePod(pod) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if self.gate != Some(Gate::PrePull) {
                    return Err(format!("a pre-pull pod {name} with no node to pull on"));
                }
                self.pulls
                    .entry(name)
                    .or_insert(crate::update::observed::PullState::Pulling);
            }
            // The model has no GKO Deployment: a self-update is never planned.
            Action::SelfUpdate { .. } => return Err("a self-update in a world without GKO".into()),
            Action::AddFinalizer => {
                self.gsp.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()])
            }
            Action::RemoveFinalizer => self.gsp.metadata.finalizers = None,
            Action::PatchWorkload { .. } | Action::ApplyService(_) | Action::RemoveMade(..) => {
                return Err("a disaster-recovery action in a world without a pair".into());
            }
        }
        Ok(())
    }

    /// The worker's epoch handling, as at the top of each of its rounds.
    fn worker_epoch(&mut self) {
        let Some(work) = &self.gko.work else {
            return;
        };
        if self.gko.report.epoch != work.epoch {
            self.gko.report = Report {
                epoch: work.epoch.clone(),
                ..Default::default()
            };
            self.gko.entered = work.asked.iter().cloned().collect();
        }
    }

    fn to_enter(&self) -> Vec<PipelineId> {
        self.gko.work.as_ref().map_or(vec![], |w| {
            w.enter
                .iter()
                .filter(|id| !self.gko.entered.contains(*id))
                .cloned()
                .collect()
        })
    }

    fn to_exit(&self) -> Vec<PipelineId> {
        let report = &self.gko.report;
        self.gko.work.as_ref().map_or(vec![], |w| {
            w.exit
                .iter()
                .filter(|id| match report.exits.get(id) {
                    None => true,
                    Some(asked) => {
                        // Sent again when still listed in maintenance mode 15 s after it was accepted.
                        time(self.now, self.seq).0.as_second() - asked.0.as_second() >= 15
                            && matches!(&report.listing, Some(Listing { at, result: Ok(list) })
                                if at.0 > asked.0 && list.iter().any(|p| &p.id == *id && p.is_in_maintenance_mode))
                    }
                })
                .cloned()
                .collect()
        })
    }

    /// The worker sends one maintenance request; Core Hub applies it now or (`late`) later.
    fn send(&self, id: &str, enter: bool, late: bool) -> State {
        let mut s = self.clone();
        s.worker_epoch();
        if s.down {
            // Refused: nothing happens but the error.
            s.gko.report.error = Some("Core Hub cannot be reached".into());
            if enter {
                s.gko.entered.remove(id);
            }
            return s;
        }
        if late {
            s.budget.late -= 1;
            s.late.push(Late {
                id: id.into(),
                enter,
                by: s.now + LATE,
            });
            s.late.sort();
        } else {
            s.pipelines.insert(id.into(), enter);
        }
        let at = s.stamp();
        if enter {
            s.gko.entered.insert(id.into());
            s.gko.report.entered = s.gko.entered.len();
        } else {
            s.gko.report.exits.insert(id.into(), at);
        }
        s
    }

    /// A new list tells something the last one does not: other contents, a later second, or an exit
    /// accepted since. (Listing again when none of these holds only renames the same state.)
    fn list_would_tell_more(&self) -> bool {
        let Some(last) = &self.gko.report.listing else {
            return true;
        };
        if self.gko.report.epoch != self.gko.work.as_ref().map_or("", |w| w.epoch.as_str()) {
            return true;
        }
        if last.at.0.as_second() - 1_800_000_000 != self.now {
            return true;
        }
        if self.gko.report.exits.values().any(|t| t.0 >= last.at.0) {
            return true;
        }
        let now: Result<Vec<(String, bool)>, ()> = if self.down {
            Err(())
        } else {
            Ok(self
                .pipelines
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect())
        };
        let then: Result<Vec<(String, bool)>, ()> = match &last.result {
            Ok(list) => Ok(list
                .iter()
                .map(|p| (p.id.to_string(), p.is_in_maintenance_mode))
                .collect()),
            Err(_) => Err(()),
        };
        now != then
    }

    fn list(&self) -> State {
        let mut s = self.clone();
        s.worker_epoch();
        let at = s.stamp();
        let result = if s.down {
            Err("Core Hub cannot be reached".to_string())
        } else {
            Ok(std::sync::Arc::new(
                s.pipelines
                    .iter()
                    .map(|(id, m)| Pipeline {
                        id: id.into(),
                        is_in_maintenance_mode: *m,
                    })
                    .collect(),
            ))
        };
        s.gko.report.listing = Some(Listing { at, result });
        s
    }

    /// When time may jump to: the next deadline the status or the worker has (a step's deadline, a
    /// module's stability deadline, the end of the late-maintenance watch, an exit due to be sent again);
    /// `None` when there is none before the horizon, or when a late request would be overdue first.
    fn next_time(&self) -> Option<i64> {
        let status = self.status();
        // Rounded up: a deadline part-way through a second has passed only at the next one.
        let secs = |t: &Time| (t.0.as_millisecond() + 999).div_euclid(1000) - 1_800_000_000;
        let mut deadlines: Vec<i64> = vec![];
        if let Some(u) = &status.update {
            deadlines.extend(u.step.deadline().map(secs));
            deadlines.extend(
                u.components
                    .iter()
                    .filter_map(|c| c.patched_at.as_ref())
                    .map(|p| secs(p) + 10),
            );
        }
        deadlines.extend(status.late_maintenance.as_ref().map(|l| secs(&l.until)));
        deadlines.extend(status.next_window.as_ref().map(secs));
        deadlines.extend(self.gko.report.exits.values().map(|t| secs(&t) + 15));
        let next = deadlines.into_iter().filter(|d| *d > self.now).min()?;
        if self.late.iter().any(|l| l.by < next) {
            return None;
        }
        (next <= HORIZON).then_some(next)
    }

    fn successors(&self) -> Result<Vec<(String, State)>, String> {
        let mut out = vec![];
        // GKO carries out what it decided, one action at a time (a crash loses those left with the rest
        // of GKO's memory). The finalizer's write may be refused (a conflict budget's fault): GKO goes on
        // with the rest, as the controller does.
        if !self.gko.actions.is_empty() {
            let mut s = self.clone();
            let action = s.gko.actions.remove(0);
            if action == Action::AddFinalizer && self.budget.conflicts > 0 {
                let mut refused = s.clone();
                refused.budget.conflicts -= 1;
                out.push((
                    "GKO's finalizer write is refused; GKO goes on with the rest".into(),
                    refused,
                ));
            }
            s.apply(&action)?;
            out.push((format!("GKO carries out {action:?}"), s));
        } else {
            out.push(("GKO reconciles".into(), self.reconcile(false)));
            if self.budget.conflicts > 0 {
                out.push((
                    "GKO reconciles; the API server refuses the status write (stale)".into(),
                    self.reconcile(true),
                ));
            }
        }
        // The background worker: one request (applied now, or late), or a list.
        for (enter, ids) in [(true, self.to_enter()), (false, self.to_exit())] {
            let verb = if enter { "into" } else { "out of" };
            for id in ids {
                out.push((
                    format!("worker asks {id} {verb} maintenance; applied now"),
                    self.send(&id, enter, false),
                ));
                if self.budget.late > 0 && !self.down {
                    out.push((
                        format!("worker asks {id} {verb} maintenance; Core Hub applies it late"),
                        self.send(&id, enter, true),
                    ));
                }
            }
        }
        if self.gko.work.is_some() && self.list_would_tell_more() {
            out.push(("worker lists the pipelines".into(), self.list()));
        }
        // The catalog answers the check asked for.
        if let Some(check) = &self.gko.check
            && self.gko.answer.as_ref().map(|a| &a.token) != Some(&check.token)
        {
            let mut s = self.clone();
            s.gko.answer = Some(Answer {
                token: check.token.clone(),
                at: time(s.now, s.seq),
                result: Ok(catalog()),
            });
            out.push(("the catalog answers".into(), s));
        }
        // The user approves the update the status names, once.
        if self.gate == Some(Gate::Approval)
            && !self.approved
            && let Some(id) = self.status().update.and_then(|u| u.approval_id)
        {
            let mut s = self.clone();
            s.approved = true;
            s.gsp
                .annotations_mut()
                .insert(crate::api::APPROVE_ANNOTATION.into(), id);
            out.push(("the user approves the update".into(), s));
        }
        // Core Hub applies a late request.
        for (i, l) in self.late.iter().enumerate() {
            let mut s = self.clone();
            s.late.remove(i);
            s.pipelines.insert(l.id.clone(), l.enter);
            let verb = if l.enter { "into" } else { "out of" };
            out.push((
                format!("Core Hub applies, late, {} {verb} maintenance", l.id),
                s,
            ));
        }
        // A pre-pull pod's pull ends.
        for name in self.pulling() {
            let mut s = self.clone();
            s.pull_ends(&name);
            out.push((format!("the pre-pull pod {name}'s pull ends"), s));
        }
        // Kubernetes rolls the pods to the workload's image.
        if self.pods != self.image {
            let mut s = self.clone();
            s.pods = s.image.clone();
            out.push((format!("the pods roll to {}", s.image), s));
        }
        // Faults.
        if self.budget.crashes > 0 {
            let mut s = self.clone();
            s.gko = Process::default();
            s.budget.crashes -= 1;
            out.push((
                "GKO crashes and starts again (or another GKO takes the Lease)".into(),
                s,
            ));
        }
        if !self.down && self.budget.outages > 0 {
            let mut s = self.clone();
            s.down = true;
            s.budget.outages -= 1;
            out.push(("Core Hub goes down".into(), s));
        }
        if self.down {
            let mut s = self.clone();
            s.down = false;
            out.push(("Core Hub is back".into(), s));
        }
        if let Some(next) = self.next_time() {
            let mut s = self.clone();
            s.now = next;
            s.seq = 0;
            out.push((format!("time passes to {next} s"), s));
        }
        Ok(out)
    }

    /// The always-properties.
    fn check(&self) -> Result<(), String> {
        let status = self.status();
        // Before the approval, and before the window opens, nothing is paused or changed.
        let closed = match self.gate {
            Some(Gate::Approval) => (!self.approved).then_some("before its approval"),
            Some(Gate::Window) => (self.now < WINDOW_OPENS).then_some("before the window opens"),
            Some(Gate::PrePull) => {
                (!self.pulled).then_some("before the new image was on Core Hub's node")
            }
            None => None,
        };
        if let Some(when) = closed {
            let paused = RUNNING
                .iter()
                .any(|p| self.pipelines[*p] || self.late.iter().any(|l| l.id == *p && l.enter));
            if paused || self.image != OLD {
                return Err(format!(
                    "{when}, a pipeline was paused or Core Hub's image changed"
                ));
            }
        }
        let recorded: HashSet<&str> = status
            .paused_pipelines
            .iter()
            .chain(
                status
                    .late_maintenance
                    .iter()
                    .flat_map(|l| l.pipelines.iter()),
            )
            .map(PipelineId::as_str)
            .collect();
        for p in RUNNING {
            let paused = self.pipelines[p] || self.late.iter().any(|l| l.id == p && l.enter);
            if paused && self.gsp.metadata.finalizers.is_none() {
                return Err(format!(
                    "{p} is in maintenance mode (or about to be) and GKO's finalizer is not on"
                ));
            }
            if paused && !recorded.contains(p) {
                return Err(format!(
                    "{p} is in maintenance mode (or about to be) and the status does not record it"
                ));
            }
        }
        Ok(())
    }

    /// The update is over and everything is as the product promises.
    fn good_end(&self, initial_phase: Option<Phase>) -> Result<bool, String> {
        let status = self.status();
        if status.update.is_some()
            || !status.paused_pipelines.is_empty()
            || status.late_maintenance.is_some()
            || !self.late.is_empty()
            || self.gsp.metadata.finalizers.is_some()
            || self.pods != self.image
            || !self.pulls.is_empty()
            || !self.gko.actions.is_empty()
        {
            return Ok(false);
        }
        if RUNNING.iter().any(|p| self.pipelines[*p]) {
            return Ok(false);
        }
        let Some(attempt) = &status.last_attempt else {
            return Ok(false);
        };
        if !self.pipelines[USER_PAUSED] {
            return Err("the pipeline a user paused was taken out of maintenance mode".into());
        }
        if status.history.len() != 1 {
            return Err(format!(
                "{} history entries for one update",
                status.history.len()
            ));
        }
        let phase = status.phase;
        let expected = match attempt.result {
            UpdateResult::Succeeded => {
                if self.image != NEW {
                    return Err("Succeeded, but Core Hub does not run the new image".into());
                }
                Some(Phase::Current)
            }
            UpdateResult::Degraded => Some(Phase::Degraded),
            UpdateResult::Failed => {
                if self.image != OLD {
                    return Err("Failed, but Core Hub is not back on its image".into());
                }
                Some(Phase::Failed)
            }
            UpdateResult::Refused => {
                if self.image_changed {
                    return Err("a Refused update changed an image".into());
                }
                initial_phase
            }
        };
        if phase != expected {
            return Err(format!(
                "the update ended {:?} and the phase is {phase:?}, not {expected:?}",
                attempt.result
            ));
        }
        Ok(true)
    }

    /// A fair run from here: no new fault, Core Hub up, late requests land, time passes when nothing
    /// else happens. It must reach a good end. (It checks no always-property: the breadth-first search
    /// reaches every state of this run too, and finds a broken promise with its shortest history.)
    fn settle(
        &self,
        initial_phase: Option<Phase>,
        good: &mut HashSet<String>,
    ) -> Result<(), String> {
        let mut s = self.clone();
        s.budget = Budget {
            crashes: 0,
            outages: 0,
            conflicts: 0,
            late: 0,
        };
        let mut seen = vec![];
        let mut trace: Vec<String> = vec![];
        for _ in 0..400 {
            let status = s.status();
            let line = format!(
                "then, fault-free, at {} s: step {:?}, ledger {:?}, late watch {:?}, in maintenance {:?}, Core Hub {}",
                s.now,
                status.update.as_ref().map(|u| u.step.name()),
                status.paused_pipelines,
                status.late_maintenance.as_ref().map(|l| &l.pipelines),
                s.pipelines
                    .iter()
                    .filter(|(_, m)| **m)
                    .map(|(id, _)| id)
                    .collect::<Vec<_>>(),
                if s.image == NEW { "new" } else { "old" },
            );
            if trace.last() != Some(&line) {
                trace.push(line);
            }
            let key = s.key();
            if good.contains(&key) || s.good_end(initial_phase)? {
                good.extend(seen);
                return Ok(());
            }
            seen.push(key);
            let before = s.progress();
            s.down = false;
            for l in std::mem::take(&mut s.late) {
                s.pipelines.insert(l.id, l.enter);
            }
            s.carry_out_all()?;
            s.pods = s.image.clone();
            for name in s.pulling() {
                s.pull_ends(&name);
            }
            if let Some(check) = &s.gko.check
                && s.gko.answer.as_ref().map(|a| &a.token) != Some(&check.token)
            {
                s.gko.answer = Some(Answer {
                    token: check.token.clone(),
                    at: time(s.now, s.seq),
                    result: Ok(catalog()),
                });
            }
            for id in s.to_enter() {
                s = s.send(&id, true, false);
            }
            for id in s.to_exit() {
                s = s.send(&id, false, false);
            }
            if s.gko.work.is_some() {
                s = s.list();
            }
            s = s.reconcile(false);
            s.carry_out_all()?;
            if s.progress() == before {
                match s.next_time() {
                    Some(next) => {
                        s.now = next;
                        s.seq = 0;
                    }
                    None => break,
                }
            }
        }
        let last = trace.len().saturating_sub(12);
        Err(format!(
            "no good end in a fault-free run:\n      {}\n      and no more: {}",
            trace[last..].join("\n      "),
            s.status().message.unwrap_or_default()
        ))
    }
}

fn catalog() -> Catalog {
    [("gluesync-core-hub".to_string(), "2.3.2.2".to_string())].into()
}

/// What a run of the checker found.
#[derive(Debug)]
pub struct Outcome {
    pub states: usize,
    pub depth: usize,
    pub complete: bool,
    /// The shortest history to a violated property, as readable lines.
    pub violation: Option<Vec<String>>,
    pub seconds: f64,
}

/// Explores every history from the start, breadth-first, up to `max_states` distinct states.
pub fn explore(budget: Budget, max_states: usize) -> Outcome {
    explore_with(budget, max_states, None)
}

/// [`explore`], with a gate of the user's terms in the spec.
fn explore_with(budget: Budget, max_states: usize, gate: Option<Gate>) -> Outcome {
    let started = Instant::now();
    let mut parents: HashMap<String, (Option<String>, String)> = HashMap::new();
    let mut queue: VecDeque<(State, usize)> = VecDeque::new();
    let mut good: HashSet<String> = HashSet::new();
    let mut depth = 0;
    for fate in [Fate::Ready, Fate::CrashLoop, Fate::Unpullable] {
        let s = State::initial(fate, budget, gate);
        parents.insert(
            s.key(),
            (
                None,
                format!("start: the new Core Hub pods will be {fate:?}"),
            ),
        );
        queue.push_back((s, 0));
    }
    let initial_phase = queue[0].0.status().phase;
    let trail =
        |parents: &HashMap<String, (Option<String>, String)>, mut key: String, last: String| {
            let mut lines = vec![last];
            while let Some((parent, label)) = parents.get(&key) {
                lines.push(label.clone());
                match parent {
                    Some(p) => key = p.clone(),
                    None => break,
                }
            }
            lines.reverse();
            lines
        };
    let mut complete = true;
    while let Some((s, d)) = queue.pop_front() {
        depth = depth.max(d);
        let key = s.key();
        let verdict = s
            .check()
            .and_then(|()| s.settle(initial_phase, &mut good))
            .and_then(|()| s.successors());
        let next = match verdict {
            Ok(next) => next,
            Err(why) => {
                return Outcome {
                    states: parents.len(),
                    depth,
                    complete: false,
                    violation: Some(trail(&parents, key, format!("VIOLATED: {why}"))),
                    seconds: started.elapsed().as_secs_f64(),
                };
            }
        };
        for (label, n) in next {
            if let Err(why) = n.check() {
                let mut lines = trail(&parents, key.clone(), label);
                lines.push(format!("VIOLATED: {why}"));
                return Outcome {
                    states: parents.len(),
                    depth,
                    complete: false,
                    violation: Some(lines),
                    seconds: started.elapsed().as_secs_f64(),
                };
            }
            let nk = n.key();
            if parents.contains_key(&nk) {
                continue;
            }
            if parents.len() >= max_states {
                complete = false;
                continue;
            }
            parents.insert(nk, (Some(key.clone()), label));
            queue.push_back((n, d + 1));
        }
    }
    Outcome {
        states: parents.len(),
        depth,
        complete,
        violation: None,
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn report(name: &str, budget: Budget, o: &Outcome) {
    println!(
        "model check {name}: {} distinct states, depth {}, {} ({:.1} s), faults per history: {budget:?}",
        o.states,
        o.depth,
        if o.complete {
            "every state within the bounds"
        } else {
            "stopped at the state bound"
        },
        o.seconds
    );
    if let Some(lines) = &o.violation {
        println!("shortest counterexample:");
        for (i, l) in lines.iter().enumerate() {
            println!("  {i:>3}. {l}");
        }
    }
}

const SMALL: Budget = Budget {
    crashes: 1,
    outages: 1,
    conflicts: 1,
    late: 1,
};

/// A quick run in every `cargo test`.
#[test]
fn the_update_keeps_its_promises_on_small_histories() {
    let o = explore(SMALL, 3_000);
    report("small", SMALL, &o);
    assert!(o.violation.is_none());
    assert!(o.states >= 3_000, "{} states", o.states);
}

/// The full run: `cargo test --release -p gluesync-operator --lib model -- --ignored` (in `.ci/run`).
#[test]
#[ignore = "minutes in a debug build: run in release by .ci/run and make model-check"]
fn the_update_keeps_its_promises_exhaustively() {
    let budget = Budget {
        crashes: std::env::var("GKO_MODEL_CRASHES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2),
        outages: 1,
        conflicts: 1,
        late: 2,
    };
    let max = std::env::var("GKO_MODEL_STATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let o = explore(budget, max);
    report("full", budget, &o);
    assert!(o.violation.is_none());
    assert!(o.states >= 100_000, "{} states", o.states);
    // And with each gate of the user's terms, deep enough to reach the approval's timeout and the window,
    // and with the pre-pull.
    for gate in [Gate::Approval, Gate::Window, Gate::PrePull] {
        let o = explore_with(budget, max / 4, Some(gate));
        report(&format!("full, {gate:?}"), budget, &o);
        assert!(o.violation.is_none(), "{gate:?}");
    }
}

/// Each property bites: a deliberately broken engine is caught, with its shortest history.
fn bites(m: Mutant, budget: Budget, expect: &str) {
    set_mutant(Some(m));
    let o = explore(budget, 200_000);
    set_mutant(None);
    report(&format!("{m:?}"), budget, &o);
    let lines = o
        .violation
        .unwrap_or_else(|| panic!("{m:?} was not caught"));
    let last = lines.last().unwrap();
    assert!(expect.split('|').any(|e| last.contains(e)), "{m:?}: {last}");
}

#[test]
fn the_engine_before_the_ledger_leaves_a_pipeline_paused() {
    bites(
        Mutant::OldResume,
        Budget {
            crashes: 0,
            outages: 0,
            conflicts: 0,
            late: 1,
        },
        "no good end in a fault-free run|does not record it",
    );
}

#[test]
fn pausing_before_the_finalizer_is_on_is_caught() {
    bites(
        Mutant::PauseBeforeFinalizer,
        Budget {
            crashes: 0,
            outages: 0,
            conflicts: 1,
            late: 0,
        },
        "finalizer is not on",
    );
}

#[test]
fn pausing_before_recording_is_caught() {
    bites(
        Mutant::PauseBeforeRecord,
        Budget {
            crashes: 1,
            outages: 0,
            conflicts: 0,
            late: 0,
        },
        "does not record it|no good end in a fault-free run",
    );
}

#[test]
fn patching_before_the_drain_is_caught() {
    bites(
        Mutant::PatchBeforeDrained,
        Budget {
            crashes: 0,
            outages: 0,
            conflicts: 0,
            late: 1,
        },
        "Core Hub patched while",
    );
}

#[test]
fn a_refused_update_that_patches_is_caught() {
    bites(
        Mutant::RefusedPatches,
        Budget {
            crashes: 0,
            outages: 1,
            conflicts: 0,
            late: 0,
        },
        "Refused update changed an image|Core Hub patched while",
    );
}

#[test]
fn a_refused_update_that_changes_the_phase_is_caught() {
    bites(
        Mutant::RefusedPhaseCurrent,
        Budget {
            crashes: 0,
            outages: 1,
            conflicts: 0,
            late: 0,
        },
        "the phase is",
    );
}

/// The user's terms: under `approval: manual` nothing is paused or changed before the approval (which
/// may come at any point, or never: the update is then Refused), and nothing before the window opens;
/// every other promise holds as without them.
#[test]
fn nothing_is_paused_or_changed_before_the_approval_or_the_window() {
    for gate in [Gate::Approval, Gate::Window] {
        let o = explore_with(SMALL, 6_000, Some(gate));
        report(&format!("{gate:?}"), SMALL, &o);
        assert!(o.violation.is_none(), "{gate:?}");
        assert!(o.states >= 3_000, "{gate:?}: {} states", o.states);
    }
}

/// The pre-pull: nothing is paused or changed before the new image is on Core Hub's node; an
/// unpullable image refuses the update with nothing changed; no pre-pull pod is left; every other promise
/// holds as without it.
#[test]
fn nothing_is_paused_before_the_new_image_is_on_the_node() {
    let o = explore_with(SMALL, 6_000, Some(Gate::PrePull));
    report("PrePull", SMALL, &o);
    assert!(o.violation.is_none());
    assert!(o.states >= 3_000, "{} states", o.states);
}

#[test]
fn a_drain_before_the_pull_ends_is_caught() {
    set_mutant(Some(Mutant::DrainBeforePulled));
    let o = explore_with(SMALL, 50_000, Some(Gate::PrePull));
    set_mutant(None);
    report("DrainBeforePulled", SMALL, &o);
    let lines = o.violation.expect("DrainBeforePulled was not caught");
    assert!(
        lines
            .last()
            .unwrap()
            .contains("before the new image was on Core Hub's node"),
        "{lines:?}"
    );
}

#[test]
fn an_engine_that_ignores_the_gates_is_caught() {
    for gate in [Gate::Approval, Gate::Window] {
        set_mutant(Some(Mutant::IgnoreGate));
        let o = explore_with(SMALL, 50_000, Some(gate));
        set_mutant(None);
        report(&format!("IgnoreGate {gate:?}"), SMALL, &o);
        let lines = o
            .violation
            .unwrap_or_else(|| panic!("IgnoreGate under {gate:?} was not caught"));
        assert!(
            lines
                .last()
                .unwrap()
                .contains("a pipeline was paused or Core Hub's image changed"),
            "{lines:?}"
        );
    }
}
