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
//! - with the user deleting the GluesyncPlatform at any point ([`Gate::Deletion`]): it goes only once
//!   every pipeline that was running runs again, or `drainTimeoutSeconds` after the deletion (Core Hub
//!   out of reach); once gone, Core Hub's pods run its image and, Core Hub in reach, no pipeline that was
//!   running is left in maintenance mode.
//! - with two modules ([`Gate::Modules`]), the first one's new image crash-looping or not: a module's
//!   image changes only in the step Modules, while every other module is ready on its image; Succeeded
//!   leaves each on its new image, Degraded none on an image that does not come up, Failed and Refused
//!   each on its old one.
//! - with an agent ([`Gate::Agents`]), its new image crash-looping or not: its image changes only while
//!   every pipeline that was running is in maintenance mode; it ends on its new image when Core Hub
//!   does, on its old one when the update Failed or was Refused.
//! - with GKO's own Deployment ([`Gate::SelfUpdate`]), its new image coming up or crash-looping: GKO's
//!   image changes only once no update runs, with the self-update in the status first; GKO ends on its
//!   new image, ready, when its entry in the attempt says `OK`, on its old one otherwise.
//! - with the Lease changing hands while the GKO that held it has calls in flight ([`Gate::Handover`]):
//!   every promise above holds.
//! - with a disaster-recovery setup set up and torn down at any point, the new version asked at any
//!   point among them ([`Gate::Disaster`]): Core Hub's pod template changes for the setup only while no
//!   update runs, its image only while no setup changes the template; a setup wanted ends Active on
//!   Core Hub's pods, and a teardown leaves the template exactly as it was.
//! - A pre-pull pod made only once a written status lists it (`status.update.prePulls`, what the
//!   admission policy reads; any other is a violation), and GKO stopping anywhere around it: nothing is
//!   left once the update ends.
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
    api::{ComponentResultStatus, GluesyncPlatformSpec, PipelineId},
    update::corehub::{Listing, Pipeline},
    update::observed::PodView,
};

const RUNNING: [&str; 2] = ["p1", "p2"];
const USER_PAUSED: &str = "u1";
const OLD: &str = "molo17/gluesync-core-hub:2.3.2.1";
const NEW: &str = "molo17/gluesync-core-hub:2.3.2.2";
/// The modules of the model world (under [`Gate::Modules`]): name, image before, image after.
const MODULES: [(&str, &str, &str); 2] = [
    (
        "chronos",
        "molo17/gluesync-chronos:1.0.0",
        "molo17/gluesync-chronos:1.1.0",
    ),
    (
        "grafana",
        "molo17/gluesync-grafana:1.0.0",
        "molo17/gluesync-grafana:1.1.0",
    ),
];
/// The agent of the model world (under [`Gate::Agents`]): name, image before, image after.
const AGENTS: [(&str, &str, &str); 1] = [(
    "agent-mssql",
    "molo17/gluesync-mssql-cdc:2.3.2.1",
    "molo17/gluesync-mssql-cdc:2.3.2.2",
)];
/// GKO's own Deployment (under [`Gate::SelfUpdate`]): its name, image before, image after.
const GKO: &str = "gluesync-operator";
const GKO_OLD: &str = "molo17/gluesync-operator:0.3.0";
const GKO_NEW: &str = "molo17/gluesync-operator:0.4.0";
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

/// A module's or an agent's workload: its image, the image its pods run, and what its new image does.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Module {
    image: String,
    pods: String,
    fate: Fate,
    /// An update planned its new image (without the catalog's answer it has none to plan).
    planned: bool,
    /// An agent (a StatefulSet beside Core Hub, changed and rolled back with it), not a module.
    agent: bool,
}

impl Module {
    fn new_image(name: &str) -> &'static str {
        MODULES
            .iter()
            .chain(&AGENTS)
            .find(|m| m.0 == name)
            .map_or("", |m| m.2)
    }

    fn old_image(name: &str) -> &'static str {
        MODULES
            .iter()
            .chain(&AGENTS)
            .find(|m| m.0 == name)
            .map_or("", |m| m.1)
    }

    /// Its pods fail: they run the new image, which does not come up.
    fn failing(&self, name: &str) -> bool {
        self.pods == Module::new_image(name) && self.fate != Fate::Ready
    }

    /// Its workload is ready: every pod runs its image and is ready.
    fn ready(&self, name: &str) -> bool {
        self.pods == self.image && !self.failing(name)
    }
}

/// GKO's own Deployment (under [`Gate::SelfUpdate`]): surge 1, unavailable 0, so a pod on its old image
/// runs until one on the new image is ready, and the GKO on a retired pod stops.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Gko {
    image: String,
    /// The `gluesync.molo17.com/self-update` annotation.
    mark: Option<String>,
    /// Its pods, by the image each runs.
    pods: BTreeSet<String>,
    /// What GKO's new image does once its pod starts.
    fate: Fate,
    /// The image of the GKO that holds the Lease (what it reads as its own image).
    leader: String,
}

impl Gko {
    fn pod_ready(&self, image: &str) -> bool {
        image != GKO_NEW || self.fate == Fate::Ready
    }

    fn ready(&self) -> bool {
        self.pods
            .iter()
            .all(|p| *p == self.image && self.pod_ready(p))
    }

    fn rolled(&self) -> bool {
        self.pods.len() == 1 && self.pods.contains(&self.image)
    }
}

/// What becomes of a reconcile's status write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Lands,
    /// Refused as stale (a conflict budget's fault).
    Refused,
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
    /// Not a gate: two modules beside Core Hub, which the catalog has newer versions of; they are
    /// updated one by one after Core Hub, and the first one's new image may crash-loop.
    Modules,
    /// Not a gate: an agent beside Core Hub, at Core Hub's version: changed with Core Hub while the
    /// pipelines are in maintenance mode, rolled back with it; its new image may crash-loop.
    Agents,
    /// Not a gate: the user may delete the GluesyncPlatform at any point, once. It goes when GKO takes
    /// its finalizer off (at once if the finalizer is not on); then GKO and its worker stop for it, and
    /// its pre-pull pods go with it (their owner).
    Deletion,
    /// Not a gate: GKO's own Deployment, which the catalog has a newer GKO for; GKO updates itself
    /// once the update has ended, and its new image may crash-loop. The GKO on a pod the rollout retires
    /// stops, and the one on the new pod takes the Lease; a crash hands the Lease to either ready pod.
    SelfUpdate,
    /// Not a gate: a crash may be the Lease changing hands while the GKO that held it still has calls
    /// in flight. That GKO stopped acting when its leadership lapsed (it checks the Lease before each
    /// call), but what it had sent lands later, each at most once: its worker's maintenance requests
    /// under way (several at once), in any order with what the new holder does, within the second (Core
    /// Hub may apply a request late in any case: see `late`); and its workload write under way (one at a
    /// time), before the new holder writes anything. That last is the Lease's own assumption: a call
    /// lands within the margin between a holder's lapse and another's start (5 s). A workload write
    /// stuck longer in the API server can land after the new holder moved on; the model finds such a
    /// history when it lets one (a write of Core Hub's new image landing after the new holder rolled Core
    /// Hub back): docs/updates.md, "GKO restarts, and more than one GKO".
    Handover,
    /// Not a gate: the user may set a disaster-recovery setup up at any point, once, and tear it down
    /// at any later point, once. Core Hub's pod template holds environment of its own (one variable
    /// the setup overrides); the setup's patches are applied to it as the API server applies a strategic
    /// merge patch, and its pods roll to each new template.
    Disaster,
}

/// Core Hub's pod template and what a disaster-recovery setup made (under [`Gate::Disaster`]).
#[derive(Clone, Debug)]
struct Pair {
    /// Core Hub's pod template as the API server holds it, but for its image (`State::image`).
    template: serde_json::Value,
    /// The template before any setup.
    original: serde_json::Value,
    /// The setup mark of the template Core Hub's pods run (they roll to the template's).
    pods_mark: Option<String>,
    /// The Service GKO makes exists.
    service: bool,
    /// The user set a setup up; tore it down; asked for Core Hub's new version (each once, in any
    /// order).
    asked: bool,
    removed: bool,
    updated: bool,
}

impl Pair {
    fn mark(&self) -> Option<String> {
        self.template["metadata"]["annotations"][crate::api::DR_ANNOTATION]
            .as_str()
            .map(str::to_string)
    }
}

/// The disaster-recovery setup the user asks for (under [`Gate::Disaster`]).
fn dr_spec() -> crate::api::DisasterRecoverySpec {
    serde_json::from_value(serde_json::json!({"role": "primary", "peerAddress": "peer.example"}))
        .unwrap()
}

/// Applies a strategic merge patch to `target` as the API server does for the fields a pod template's
/// patch by GKO touches: objects merge, `null` removes a field, and the lists of containers, env,
/// ports, volume mounts and volumes merge by their key, an item with `$patch: delete` removing its match.
fn strategic_merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) else {
        *target = patch.clone();
        return;
    };
    for (k, pv) in p {
        if pv.is_null() {
            t.remove(k);
            continue;
        }
        let key = match k.as_str() {
            "containers" | "env" | "volumes" => Some("name"),
            "ports" => Some("containerPort"),
            "volumeMounts" => Some("mountPath"),
            _ => None,
        };
        match (key, pv) {
            (Some(key), Value::Array(items)) => {
                let mut list = match t.remove(k) {
                    Some(Value::Array(list)) => list,
                    _ => vec![],
                };
                for item in items {
                    let at = list.iter().position(|x| x[key] == item[key]);
                    if item["$patch"] == "delete" {
                        if let Some(i) = at {
                            list.remove(i);
                        }
                        continue;
                    }
                    match at {
                        Some(i) => strategic_merge(&mut list[i], item),
                        None => {
                            let mut new = Value::Object(Default::default());
                            strategic_merge(&mut new, item);
                            list.push(new);
                        }
                    }
                }
                if !list.is_empty() {
                    t.insert(k.clone(), Value::Array(list));
                }
            }
            (_, Value::Object(_)) => {
                let entry = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Default::default()));
                strategic_merge(entry, pv);
                if entry.as_object().is_some_and(|o| o.is_empty()) {
                    t.remove(k);
                }
            }
            _ => {
                t.insert(k.clone(), pv.clone());
            }
        }
    }
}

/// The GKO that lost the Lease (under [`Gate::Handover`]), and when it did.
#[derive(Clone, Debug)]
struct Stale {
    process: Process,
    since: i64,
    /// The new holder wrote something (its status, or an action): a workload write of the old one's
    /// lands before that (see [`Gate::Handover`]).
    new_acted: bool,
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
    /// The GluesyncPlatform is gone (deleted, its finalizer off).
    gone: bool,
    /// It went while a pipeline that was running was in maintenance mode, past the deadline GKO gives
    /// Core Hub to resume them (`drainTimeoutSeconds` after the deletion).
    gave_up: bool,
    /// Core Hub was down at some point.
    outage_seen: bool,
    /// The modules, by name (under [`Gate::Modules`]).
    modules: BTreeMap<String, Module>,
    /// GKO's own Deployment (under [`Gate::SelfUpdate`]).
    operator: Option<Gko>,
    /// The GKO that lost the Lease, with what it has in flight (under [`Gate::Handover`]).
    stale: Option<Stale>,
    /// Core Hub's pod template and the disaster-recovery pair (under [`Gate::Disaster`]).
    pair: Option<Pair>,
}

fn time(now: i64, seq: i64) -> Time {
    Time(jiff::Timestamp::from_millisecond((1_800_000_000 + now) * 1000 + seq).unwrap())
}

impl State {
    fn initial(fate: Fate, module_fate: Fate, budget: Budget, gate: Option<Gate>) -> State {
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
                Some(
                    Gate::Deletion
                    | Gate::Modules
                    | Gate::Agents
                    | Gate::SelfUpdate
                    | Gate::Handover
                    | Gate::Disaster,
                )
                | None => {}
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
            gone: false,
            gave_up: false,
            outage_seen: false,
            modules: if gate == Some(Gate::Modules) {
                MODULES
                    .iter()
                    .map(|(name, old, _)| {
                        let module = Module {
                            image: old.to_string(),
                            pods: old.to_string(),
                            // The first module's new image does what the run says; the others come up.
                            fate: if *name == MODULES[0].0 {
                                module_fate
                            } else {
                                Fate::Ready
                            },
                            planned: false,
                            agent: false,
                        };
                        (name.to_string(), module)
                    })
                    .collect()
            } else if gate == Some(Gate::Agents) {
                AGENTS
                    .iter()
                    .map(|(name, old, _)| {
                        let agent = Module {
                            image: old.to_string(),
                            pods: old.to_string(),
                            fate: module_fate,
                            planned: false,
                            agent: true,
                        };
                        (name.to_string(), agent)
                    })
                    .collect()
            } else {
                BTreeMap::new()
            },
            operator: (gate == Some(Gate::SelfUpdate)).then(|| Gko {
                image: GKO_OLD.into(),
                mark: None,
                pods: [GKO_OLD.to_string()].into(),
                fate: module_fate,
                leader: GKO_OLD.into(),
            }),
            stale: None,
            pair: (gate == Some(Gate::Disaster)).then(|| {
                let template = serde_json::json!({
                    "metadata": {"labels": {"app": "core-hub"}},
                    "spec": {"containers": [{
                        "name": "c",
                        "env": [
                            {"name": "JAVA_OPTS", "value": "-Xmx1g"},
                            {"name": "GLUESYNC_DR_ROLE", "value": "none"},
                        ],
                        "ports": [{"name": "http", "containerPort": 1717}],
                    }]},
                });
                Pair {
                    original: template.clone(),
                    template,
                    pods_mark: None,
                    service: false,
                    asked: false,
                    removed: false,
                    updated: false,
                }
            }),
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
        s.gsp = gsp;
        // The spec asks for the new version (under [`Gate::Disaster`], the user does, at any point).
        if s.pair.is_none() {
            s.ask_new_version();
        }
        s
    }

    fn ask_new_version(&mut self) {
        self.gsp.spec.version = "2.3.2.2".into();
        self.gsp.metadata.generation = self.gsp.metadata.generation.map(|g| g + 1);
        if let Some(pair) = &mut self.pair {
            pair.updated = true;
        }
    }

    fn status(&self) -> GluesyncPlatformStatus {
        self.gsp.status.clone().unwrap_or_default()
    }

    /// What distinguishes this state from another: everything but the Debug-only details.
    fn key(&self) -> String {
        let mut k = String::with_capacity(2048);
        let _ = write!(
            k,
            "{:?}|{:?}|{}{}{}|{:?}|{:?}|{}|{}|{}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{}|{:?}",
            self.operator,
            self.gsp.metadata.deletion_timestamp,
            self.gone,
            self.gave_up,
            self.outage_seen,
            self.modules,
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
        if let Some(pair) = &self.pair {
            let _ = write!(
                k,
                "|{pair:?}|{}",
                self.gsp.metadata.generation.unwrap_or_default()
            );
        }
        for g in std::iter::once(&self.gko).chain(self.stale.as_ref().map(|st| &st.process)) {
            let _ = write!(
                k,
                "|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
                g.actions, g.handoff, g.work, g.report, g.entered, g.check, g.answer
            );
        }
        if let Some(st) = &self.stale {
            let _ = write!(k, "|stale since {}", st.since);
        }
        k
    }

    /// What a fair run must change to count as progress: everything but the order of events within a
    /// second and the times of the worker's answers. (Actions in hand count: carrying out one that
    /// changes nothing, as a finalizer already off, is still a step towards the end.)
    fn progress(&self) -> String {
        let g = &self.gko;
        format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.pair,
            g.actions,
            self.operator,
            self.modules,
            self.gsp.metadata.deletion_timestamp,
            self.gone,
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
            self.stale.as_ref().map(|st| (
                &st.process.actions,
                &st.process.entered,
                st.process.report.exits.keys().collect::<Vec<_>>()
            )),
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
            ready: self.pods == self.image && self.pods_on_template() && pod_ready,
            progress_deadline_exceeded: false,
            rollout_blocker: None,
            self_update_mark: None,
            template: Box::new(self.core_hub_template()),
            selector: Default::default(),
            pods: vec![PodView {
                name: "core-hub-0".into(),
                uid: format!("pod-{}-{:?}", self.pods, self.pods_mark()),
                image: self.pods.clone(),
                ready: pod_ready,
                waiting,
                restarts: i32::from(crashing),
                node: (self.gate == Some(Gate::PrePull)).then(|| "n1".to_string()),
                dr_mark: self.pods_mark(),
            }],
        }]
        .into_iter()
        .chain(self.modules.iter().map(|(name, m)| {
            let pod = side_pod(format!("{name}-0"), &m.pods, m.failing(name));
            let (component_type, label) = if m.agent {
                (ComponentType::Agent, "agent")
            } else {
                (ComponentType::Module, "module")
            };
            deployment(
                name,
                component_type,
                label,
                &m.image,
                m.ready(name),
                None,
                vec![pod],
            )
        }))
        .chain(self.operator.iter().map(|g| {
            let pods = g
                .pods
                .iter()
                .map(|image| {
                    let tag = image.rsplit(':').next().unwrap_or_default();
                    side_pod(format!("{GKO}-{tag}"), image, !g.pod_ready(image))
                })
                .collect();
            deployment(
                GKO,
                ComponentType::Operator,
                "operator",
                &g.image,
                g.ready(),
                g.mark.clone(),
                pods,
            )
        }))
        .collect()
    }

    /// Core Hub's pod template: the pair's (under [`Gate::Disaster`]), else none, with its image.
    fn core_hub_template(&self) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        let Some(pair) = &self.pair else {
            return Default::default();
        };
        let mut t = pair.template.clone();
        t["spec"]["containers"][0]["image"] = self.image.clone().into();
        serde_json::from_value(t).expect("Core Hub's pod template")
    }

    /// The disaster-recovery setup Core Hub's pods run with.
    fn pods_mark(&self) -> Option<String> {
        self.pair.as_ref().and_then(|p| p.pods_mark.clone())
    }

    /// Core Hub's pods run its pod template's setup (they have rolled to it).
    fn pods_on_template(&self) -> bool {
        self.pair.as_ref().is_none_or(|p| p.pods_mark == p.mark())
    }

    fn pre_pulls(&self) -> Vec<crate::update::observed::PrePullPod> {
        self.pulls
            .iter()
            .map(|(name, state)| crate::update::observed::PrePullPod {
                name: name.clone(),
                platform: "gluesync".into(),
                owner: Some("uid".into()),
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

    /// The pair's Secret and Service as GKO reads them: the Secret (the user's) exists, and is looked at
    /// while a setup is wanted or in place.
    fn dr_objects(&self, gsp: &GluesyncPlatform) -> crate::update::disaster::DrObjects {
        use crate::update::disaster::{DrObjects, SecretState};
        let Some(pair) = &self.pair else {
            return DrObjects::default();
        };
        let looked_at = gsp.spec.disaster_recovery.is_some()
            || gsp
                .status
                .as_ref()
                .is_some_and(|s| s.disaster_recovery.is_some());
        DrObjects {
            secret: if looked_at {
                SecretState::Present { made_by_gko: false }
            } else {
                SecretState::Unknown
            },
            service: pair.service,
        }
    }

    /// The decision on `gsp` in the world as it is now.
    fn decision(&self, gsp: &GluesyncPlatform) -> Decision {
        let workloads = self.workloads();
        let pre_pulls = self.pre_pulls();
        decide(
            gsp,
            &Observed {
                now: time(self.now, self.seq),
                workloads: &workloads,
                corehub: &self.gko.report,
                catalog: self.gko.answer.as_ref(),
                target: Some(State::target()),
                access_problem: None,
                me: self.operator.as_ref().map(|g| g.leader.clone()),
                dr: self.dr_objects(gsp),
                pre_pulls: &pre_pulls,
            },
        )
    }

    /// One reconcile: decide, write the status (or have it refused), keep the actions to carry out.
    fn reconcile(&self, write: Write) -> Result<State, String> {
        let mut s = self.clone();
        let d = s.decision(&s.gsp);
        let actions = d.actions;
        if s.gsp.status.as_ref() != Some(&d.status) {
            if write == Write::Refused {
                s.budget.conflicts -= 1;
                return Ok(s);
            }
            s.gsp.status = Some(d.status.clone());
        }
        for c in d.status.update.iter().flat_map(|u| &u.components) {
            if c.to_image.is_some()
                && let Some(m) = s.modules.get_mut(&c.name)
            {
                m.planned = true;
            }
        }
        // As the controller does: the background work is handed over with the status written, and the
        // actions are carried out after it.
        s.gko.actions = actions;
        s.gko.handoff = Some((d.corehub, d.catalog));
        s.hand_off();
        Ok(s)
    }

    /// GKO decides as the controller does, taking the decisions that may go unwritten further in memory
    /// while the step moves on (doing nothing of theirs), then carries out what the first decision that
    /// stays does without its status: every action of one that waits unwritten (none needs a status,
    /// [`Action::needs_status`]); and crashes before any of their statuses is written. `None` when it
    /// carried out nothing (a crash before the write is explored anyway).
    fn lost_write(&self) -> Result<Option<State>, String> {
        let mut s = self.clone();
        let mut gsp = self.gsp.clone();
        let mut acted = false;
        for _ in 0..32 {
            let d = s.decision(&gsp);
            let unwritten = d.passes_through() && d.status.update.is_some();
            if d.again && unwritten {
                gsp.status = Some(d.status);
                continue;
            }
            if unwritten {
                for action in &d.actions {
                    s.apply(action)?;
                    acted = true;
                }
            }
            break;
        }
        if !acted {
            return Ok(None);
        }
        s.budget.crashes -= 1;
        s.gko = Process::default();
        Ok(Some(s))
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

    /// The deleted GluesyncPlatform goes: GKO and its worker stop for it, its pre-pull pods go with it.
    fn go(&mut self) {
        self.gone = true;
        self.gko = Process::default();
        self.pulls.clear();
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
            // (Checked in a fair run too: the step Modules lies deep in every history.)
            // An agent's new image, as Core Hub's: only while every pipeline that was running is in
            // maintenance mode.
            Action::SetImage { name, image, .. }
                if self.modules.get(name).is_some_and(|m| m.agent) =>
            {
                let out = self.running_outside();
                if checking && image == Module::new_image(name) && !out.is_empty() {
                    return Err(format!(
                        "agent {name} patched while {out:?} ran outside maintenance mode"
                    ));
                }
                self.set_side_image(name, image);
            }
            Action::SetImage { name, image, .. } if self.modules.contains_key(name) => {
                {
                    let step = self.status().update.map(|u| u.step.name());
                    if step != Some(UpdateStep::Modules) {
                        return Err(format!(
                            "module {name}'s image changed in step {step:?}, not Modules"
                        ));
                    }
                    if let Some((other, _)) = self
                        .modules
                        .iter()
                        .find(|(other, m)| !m.agent && *other != name && !m.ready(other))
                    {
                        return Err(format!(
                            "module {name}'s image changed while module {other} was not ready on its own"
                        ));
                    }
                }
                self.set_side_image(name, image);
            }
            Action::SetImage { image, .. } => {
                let out = self.running_outside();
                if checking && image == NEW && !out.is_empty() {
                    return Err(format!(
                        "Core Hub patched while {out:?} ran outside maintenance mode"
                    ));
                }
                let dr = self.status().disaster_recovery;
                if checking && super::disaster::busy(dr.as_ref()) {
                    return Err(format!(
                        "Core Hub's image changed while a disaster-recovery setup changed its pod template ({:?})",
                        dr.map(|d| d.phase)
                    ));
                }
                if *image != self.image {
                    self.image_changed = true;
                }
                self.image = image.clone();
            }
            Action::DeletePrePull(name) => {
                self.pulls.remove(name);
            }
            // A stuck pod of a failed revision: its StatefulSet replaces it on its image.
            Action::DeletePod(pod) => match self
                .modules
                .iter_mut()
                .find(|(name, _)| format!("{name}-0") == *pod)
            {
                Some((_, m)) => m.pods = m.image.clone(),
                None => self.pods = self.image.clone(),
            },
            Action::CreatePod(pod) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if self.gate != Some(Gate::PrePull) {
                    return Err(format!("a pre-pull pod {name} with no node to pull on"));
                }
                // The admission policy lets GKO create only the pods the written status lists.
                let listed = self.status().update.is_some_and(|u| {
                    u.pre_pulls.iter().any(|e| {
                        e.pod == name
                            && pod.spec.as_ref().is_some_and(|s| {
                                s.node_name.as_deref() == Some(e.node.as_str())
                                    && s.containers.first().and_then(|c| c.image.as_deref())
                                        == Some(e.image.as_str())
                            })
                    })
                });
                if !listed {
                    return Err(format!(
                        "a pre-pull pod {name} made that no written status lists (the admission \
                         policy refuses it)"
                    ));
                }
                self.pulls
                    .entry(name)
                    .or_insert(crate::update::observed::PullState::Pulling);
            }
            Action::SelfUpdate { image, phase, .. } => {
                let status = self.status();
                let Some(g) = self.operator.as_mut() else {
                    return Err("a self-update in a world without GKO's Deployment".into());
                };
                if let Some(image) = image
                    && *image != g.image
                {
                    // GKO updates itself last, with the status saying so first.
                    if status.update.is_some() {
                        return Err(format!(
                            "GKO set its own image to {image} while an update runs"
                        ));
                    }
                    let recorded = status
                        .self_update
                        .as_ref()
                        .is_some_and(|su| su.to_image == *image || su.from_image == *image);
                    if !recorded {
                        return Err(format!(
                            "GKO set its own image to {image} with no self-update in its status"
                        ));
                    }
                    g.image = image.clone();
                }
                g.mark = phase.map(|p| p.as_str().to_string());
            }
            Action::AddFinalizer => {
                self.gsp.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()])
            }
            Action::RemoveFinalizer => {
                self.gsp.metadata.finalizers = None;
                if let Some(deleted) = &self.gsp.metadata.deletion_timestamp {
                    let deadline =
                        deleted.0.as_second() - 1_800_000_000 + self.gsp.spec.drain_timeout_seconds;
                    let paused: Vec<&str> = RUNNING
                        .iter()
                        .filter(|p| {
                            self.pipelines[**p] || self.late.iter().any(|l| l.id == **p && l.enter)
                        })
                        .copied()
                        .collect();
                    if !paused.is_empty() {
                        if self.now < deadline {
                            return Err(format!(
                                "the GluesyncPlatform went with {paused:?} in maintenance mode, before \
                                 drainTimeoutSeconds gave Core Hub the time to resume them"
                            ));
                        }
                        self.gave_up = true;
                    }
                    self.go();
                }
            }
            Action::PatchWorkload { name, patch, .. } => {
                let step = self.status().update.map(|u| u.step.name());
                let Some(pair) = self.pair.as_mut() else {
                    return Err("a disaster-recovery action in a world without a pair".into());
                };
                if name != "core-hub" {
                    return Err(format!("a disaster-recovery patch of {name}, not Core Hub"));
                }
                if checking && step.is_some() {
                    return Err(format!(
                        "Core Hub's pod template changed for disaster recovery while an update ran (step {step:?})"
                    ));
                }
                strategic_merge(&mut pair.template, &patch["spec"]["template"]);
            }
            Action::ApplyService(_) | Action::RemoveMade(..) => {
                let Some(pair) = self.pair.as_mut() else {
                    return Err("a disaster-recovery action in a world without a pair".into());
                };
                match action {
                    Action::ApplyService(_) => pair.service = true,
                    Action::RemoveMade(crate::api::Made::Service, _) => pair.service = false,
                    // The Secret is the user's: a teardown leaves it.
                    _ => return Err(format!("{action:?} removes what GKO did not make")),
                }
            }
        }
        Ok(())
    }

    /// The pipelines that were running and are not in maintenance mode.
    fn running_outside(&self) -> Vec<&'static str> {
        RUNNING
            .iter()
            .filter(|p| !self.pipelines[**p])
            .copied()
            .collect()
    }

    /// A module's or an agent's workload takes `image`.
    fn set_side_image(&mut self, name: &str, image: &str) {
        let m = self.modules.get_mut(name).expect("a module or an agent");
        if image != m.image {
            self.image_changed = true;
        }
        m.image = image.to_string();
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
        // A deleted platform's: the pipelines' deadline, and the last call for what else runs.
        if let Some(deleted) = &self.gsp.metadata.deletion_timestamp {
            let spec = &self.gsp.spec;
            deadlines.push(secs(deleted) + spec.drain_timeout_seconds);
            deadlines.push(
                secs(deleted) + spec.drain_timeout_seconds + 4 * spec.stability_timeout_seconds,
            );
        }
        let next = deadlines.into_iter().filter(|d| *d > self.now).min()?;
        if self.late.iter().any(|l| l.by < next) {
            return None;
        }
        (next <= HORIZON).then_some(next)
    }

    fn successors(&self) -> Result<Vec<(String, State)>, String> {
        if self.gone {
            return Ok(self.world_moves());
        }
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
            s.new_holder_acted();
            out.push((format!("GKO carries out {action:?}"), s));
        } else {
            let mut s = self.reconcile(Write::Lands)?;
            if s.gsp.status != self.gsp.status {
                s.new_holder_acted();
            }
            out.push(("GKO reconciles".into(), s));
            if self.budget.conflicts > 0 {
                out.push((
                    "GKO reconciles; the API server refuses the status write (stale)".into(),
                    self.reconcile(Write::Refused)?,
                ));
            }
            if self.budget.crashes > 0
                && let Some(lost) = self.lost_write()?
            {
                out.push((
                    "GKO reconciles, does what needs no status (a pre-pull pod deleted, its finalizer put on), and crashes before the status is written".into(),
                    lost,
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
        // The user asks for the new version; sets a disaster-recovery setup up, and later tears it
        // down (each once).
        if self.pair.as_ref().is_some_and(|p| !p.updated) {
            let mut s = self.clone();
            s.ask_new_version();
            out.push(("the user asks for Core Hub 2.3.2.2".into(), s));
        }
        if let Some(pair) = &self.pair
            && !pair.removed
        {
            let mut s = self.clone();
            let p = s.pair.as_mut().expect("the pair");
            let label = if p.asked {
                p.removed = true;
                s.gsp.spec.disaster_recovery = None;
                "the user tears disaster recovery down"
            } else {
                p.asked = true;
                s.gsp.spec.disaster_recovery = Some(dr_spec());
                "the user sets disaster recovery up"
            };
            s.gsp.metadata.generation = s.gsp.metadata.generation.map(|g| g + 1);
            out.push((label.into(), s));
        }
        // What the GKO that lost the Lease had in flight lands.
        out.extend(self.stale_moves()?);
        // Core Hub applies a late request, Kubernetes rolls pods, Core Hub comes back.
        out.extend(self.world_moves());
        // A pre-pull pod's pull ends.
        for name in self.pulling() {
            let mut s = self.clone();
            s.pull_ends(&name);
            out.push((format!("the pre-pull pod {name}'s pull ends"), s));
        }
        // Faults.
        if self.budget.crashes > 0 {
            let mut s = self.clone();
            s.gko = Process::default();
            s.budget.crashes -= 1;
            // With GKO's Deployment mid-rollout, the GKO on either ready pod may take the Lease.
            let others: Vec<String> = self
                .operator
                .iter()
                .flat_map(|g| {
                    g.pods
                        .iter()
                        .filter(|p| **p != g.leader && g.pod_ready(p))
                        .cloned()
                        .collect::<Vec<_>>()
                })
                .collect();
            for other in others {
                let mut t = s.clone();
                t.operator.as_mut().expect("GKO's Deployment").leader = other.clone();
                out.push((
                    format!("GKO crashes; the GKO on {other} takes the Lease"),
                    t,
                ));
            }
            if self.gate == Some(Gate::Handover) && self.stale.is_none() {
                let mut t = s.clone();
                t.stale = Some(Stale {
                    process: self.gko.clone(),
                    since: self.now,
                    new_acted: false,
                });
                out.push((
                    "the Lease changes hands; the GKO that held it has calls in flight".into(),
                    t,
                ));
            }
            out.push((
                "GKO crashes and starts again (or another GKO takes the Lease)".into(),
                s,
            ));
        }
        // The user deletes the GluesyncPlatform; without GKO's finalizer it goes at once.
        if self.gate == Some(Gate::Deletion) && self.gsp.metadata.deletion_timestamp.is_none() {
            let mut s = self.clone();
            s.gsp.metadata.deletion_timestamp = Some(s.stamp());
            if s.gsp.metadata.finalizers.is_none() {
                s.go();
            }
            out.push(("the user deletes the GluesyncPlatform".into(), s));
        }
        if !self.down && self.budget.outages > 0 {
            let mut s = self.clone();
            s.down = true;
            s.outage_seen = true;
            s.budget.outages -= 1;
            out.push(("Core Hub goes down".into(), s));
        }
        if let Some(next) = self.next_time() {
            let mut s = self.clone();
            s.now = next;
            s.seq = 0;
            s.drop_stale();
            out.push((format!("time passes to {next} s"), s));
        }
        Ok(out)
    }

    /// The calls the GKO that lost the Lease had in flight land, one at a time: its Kubernetes write
    /// under way (the first action it had in hand) and its worker's maintenance requests, within the
    /// second. With [`Mutant::IgnoreLease`] it never stopped: it carries out all it had in hand and its
    /// worker goes on asking, whenever.
    fn stale_moves(&self) -> Result<Vec<(String, State)>, String> {
        let Some(st) = &self.stale else {
            return Ok(vec![]);
        };
        let fenced = !super::mutated(Mutant::IgnoreLease);
        if fenced && self.now != st.since {
            return Ok(vec![]);
        }
        // The stale GKO acts as `gko` in a copy; the copy's own GKO waits in `stale` meanwhile.
        let mut view = self.clone();
        let st = view.stale.as_mut().expect("a stale GKO");
        std::mem::swap(&mut view.gko, &mut st.process);
        let mut out = vec![];
        let write_lands = !fenced || !st.new_acted;
        if let Some(action) = view.gko.actions.first().cloned().filter(|_| write_lands) {
            let mut s = view.clone();
            if fenced {
                s.gko.actions.clear();
            } else {
                s.gko.actions.remove(0);
            }
            s.apply(&action)?;
            out.push((
                format!("the GKO that lost the Lease: its {action:?} lands"),
                s,
            ));
        }
        for (enter, ids) in [(true, view.to_enter()), (false, view.to_exit())] {
            let verb = if enter { "into" } else { "out of" };
            for id in ids {
                out.push((
                    format!(
                        "the GKO that lost the Lease: its request {id} {verb} maintenance lands"
                    ),
                    view.send(&id, enter, false),
                ));
            }
        }
        for (_, s) in &mut out {
            let st = s.stale.as_mut().expect("a stale GKO");
            std::mem::swap(&mut s.gko, &mut st.process);
        }
        Ok(out)
    }

    fn new_holder_acted(&mut self) {
        if let Some(st) = &mut self.stale {
            st.new_acted = true;
        }
    }

    /// Time passes: what the GKO that lost the Lease had in flight landed or never will.
    fn drop_stale(&mut self) {
        if !super::mutated(Mutant::IgnoreLease) {
            self.stale = None;
        }
    }

    /// What the world does by itself, with or without the GluesyncPlatform (all that happens once it is
    /// gone): Core Hub applies a late request, Kubernetes rolls pods to their workload's image, Core Hub
    /// comes back.
    fn world_moves(&self) -> Vec<(String, State)> {
        let mut out = vec![];
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
        if self.pods != self.image || !self.pods_on_template() {
            let mut s = self.clone();
            s.roll_core_hub();
            out.push((
                format!(
                    "the pods roll to {} (disaster recovery: {:?})",
                    s.image,
                    s.pods_mark()
                ),
                s,
            ));
        }
        out.extend(self.module_rollouts());
        out.extend(self.gko_rollout());
        if self.down {
            let mut s = self.clone();
            s.down = false;
            out.push(("Core Hub is back".into(), s));
        }
        out
    }

    /// Kubernetes rolls a module's pods to its workload's image.
    fn module_rollouts(&self) -> Vec<(String, State)> {
        self.modules
            .iter()
            .filter(|(_, m)| m.pods != m.image)
            .map(|(name, m)| {
                let mut s = self.clone();
                s.modules.get_mut(name).expect("a module").pods = m.image.clone();
                (format!("{name}'s pods roll to {}", m.image), s)
            })
            .collect()
    }

    /// GKO's Deployment rolls one step: a pod on its image starts (surge), or, that pod ready, the
    /// others are retired; the GKO on a retired pod stops and the new one takes the Lease.
    fn gko_rollout(&self) -> Option<(String, State)> {
        let g = self.operator.as_ref()?;
        let mut s = self.clone();
        let n = s.operator.as_mut().expect("GKO's Deployment");
        if !g.pods.contains(&g.image) {
            n.pods.insert(g.image.clone());
            return Some((format!("GKO's Deployment starts a pod on {}", g.image), s));
        }
        if g.pods.len() == 1 || !g.pod_ready(&g.image) {
            return None;
        }
        n.pods = [g.image.clone()].into();
        let mut label = format!("GKO's Deployment retires the pods not on {}", g.image);
        if g.leader != g.image {
            n.leader = g.image.clone();
            s.gko = Process::default();
            label += ": the GKO that led stops, the new one takes the Lease";
        }
        Some((label, s))
    }

    /// Kubernetes rolls Core Hub's pods to its workload's image and pod template.
    fn roll_core_hub(&mut self) {
        self.pods = self.image.clone();
        if let Some(pair) = &mut self.pair {
            pair.pods_mark = pair.mark();
        }
    }

    fn roll_every_pod(&mut self) {
        self.roll_core_hub();
        for m in self.modules.values_mut() {
            m.pods = m.image.clone();
        }
        while let Some((_, s)) = self.gko_rollout() {
            *self = s;
        }
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
            Some(
                Gate::Deletion
                | Gate::Modules
                | Gate::Agents
                | Gate::SelfUpdate
                | Gate::Handover
                | Gate::Disaster,
            )
            | None => None,
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
            // (A GluesyncPlatform that went is checked as it goes: see `RemoveFinalizer`.)
            if self.gone {
                break;
            }
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
    /// The disaster-recovery pair is where the spec wants it (under [`Gate::Disaster`]): a setup wanted
    /// is Active, Core Hub's template and pods carry it and the Service exists; none wanted, nothing of
    /// one is left and Core Hub's pod template is exactly as it was before any setup. `Err` when a
    /// teardown ended and left the template changed.
    fn pair_settled(&self, status: &GluesyncPlatformStatus) -> Result<bool, String> {
        let Some(pair) = &self.pair else {
            return Ok(true);
        };
        let dr = status.disaster_recovery.as_ref();
        if self.gsp.spec.disaster_recovery.is_some() {
            return Ok(
                dr.is_some_and(|d| d.phase == crate::api::DisasterRecoveryPhase::Active)
                    && pair.mark().is_some()
                    && pair.pods_mark == pair.mark()
                    && pair.service,
            );
        }
        if dr.is_some() || pair.service || pair.pods_mark.is_some() {
            return Ok(false);
        }
        if pair.template != pair.original {
            return Err(format!(
                "the teardown ended and left Core Hub's pod template changed: {} (was {})",
                pair.template, pair.original
            ));
        }
        Ok(true)
    }

    fn good_end(&self, initial_phase: Option<Phase>) -> Result<bool, String> {
        if self.gone {
            // Whatever the update had done, its pipelines run again (unless Core Hub was out of reach
            // past the deletion's deadline, and GKO let the platform go with them paused: the product's
            // PipelinesNotResumed), and Core Hub's pods run its image.
            if !self.late.is_empty()
                || self.pods != self.image
                || self.down
                || self.modules.values().any(|m| m.pods != m.image)
            {
                return Ok(false);
            }
            if !self.pipelines[USER_PAUSED] {
                return Err("the pipeline a user paused was taken out of maintenance mode".into());
            }
            let paused = RUNNING.iter().any(|p| self.pipelines[*p]);
            if paused && !(self.gave_up && self.outage_seen) {
                return Err(
                    "the GluesyncPlatform went and a pipeline that was running is left \
                            in maintenance mode, with Core Hub in reach"
                        .into(),
                );
            }
            return Ok(true);
        }
        let status = self.status();
        if !self.pair_settled(&status)? {
            return Ok(false);
        }
        // (A disaster-recovery setup in place keeps the finalizer on: it is put back before the
        // platform goes.)
        let finalizer_due = !super::disaster::settled(status.disaster_recovery.as_ref());
        if status.update.is_some()
            || !status.paused_pipelines.is_empty()
            || status.late_maintenance.is_some()
            || !self.late.is_empty()
            || self.gsp.metadata.finalizers.is_some() != finalizer_due
            || self.pods != self.image
            || self.modules.values().any(|m| m.pods != m.image)
            || !self.pulls.is_empty()
            || !self.gko.actions.is_empty()
            || status.self_update.is_some()
            || self
                .operator
                .as_ref()
                .is_some_and(|g| g.mark.is_some() || !g.rolled())
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
        // One entry per generation of the spec: a version that did not succeed is tried again only
        // when the spec changes (under [`Gate::Disaster`], the setup asked or taken down).
        let generations: BTreeSet<Option<i64>> =
            status.history.iter().map(|h| h.generation).collect();
        if status.history.is_empty() || generations.len() != status.history.len() {
            return Err(format!(
                "{} history entries for one update ({} generations of the spec)",
                status.history.len(),
                generations.len()
            ));
        }
        // The modules: updated only after Core Hub, one that does not come up is back on its image.
        for (name, m) in &self.modules {
            let on_new = m.image == Module::new_image(name);
            if !on_new && m.image != Module::old_image(name) {
                return Err(format!("module {name} ended on {}", m.image));
            }
            let wanted = match attempt.result {
                // An agent goes with Core Hub: on its new image when Core Hub is.
                UpdateResult::Succeeded | UpdateResult::Degraded if m.agent => on_new,
                UpdateResult::Succeeded => on_new || !m.planned,
                UpdateResult::Degraded => !(on_new && m.fate != Fate::Ready),
                UpdateResult::Failed | UpdateResult::Refused => m.image == Module::old_image(name),
            };
            if !wanted {
                return Err(format!(
                    "the update ended {:?} with {} {name} on {} (its new image {:?})",
                    attempt.result,
                    if m.agent { "agent" } else { "module" },
                    m.image,
                    m.fate
                ));
            }
        }
        // GKO itself: on its new image (which comes up) when its entry says updated, back on its old one
        // otherwise.
        if let Some(g) = &self.operator {
            let entry = attempt.results.iter().find(|r| r.name == GKO);
            let on_new = g.image == GKO_NEW;
            if g.image != GKO_OLD && !on_new {
                return Err(format!("GKO ended on {}", g.image));
            }
            if !g.ready() {
                return Err(format!("GKO ended on {}, which does not come up", g.image));
            }
            let ok = entry.is_some_and(|e| e.status == ComponentResultStatus::Ok);
            if ok != on_new {
                return Err(format!(
                    "GKO ended on {} and its entry says {:?}",
                    g.image,
                    entry.map(|e| e.status)
                ));
            }
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
        // (What a GKO that lost the Lease had in flight lands, or not, in the histories explored; one
        // that goes on regardless, `Mutant::IgnoreLease`, carries out all it still has at the end.)
        let unfenced = s
            .stale
            .take()
            .filter(|_| super::mutated(Mutant::IgnoreLease));
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
            if let Some(st) = &unfenced
                && s.good_end(initial_phase)?
            {
                let mut after = s.clone();
                after.gko = st.process.clone();
                for a in std::mem::take(&mut after.gko.actions) {
                    after.apply(&a)?;
                }
                for id in after.to_enter() {
                    after = after.send(&id, true, false);
                }
                for id in after.to_exit() {
                    after = after.send(&id, false, false);
                }
                after.gko = Process::default();
                if !after.good_end(initial_phase)? {
                    return Err(
                        "the update ended well, then the GKO that lost the Lease carried on and \
                         undid it (a pipeline in maintenance mode, or an image changed)"
                            .into(),
                    );
                }
                return Ok(());
            }
            if good.contains(&key) || s.good_end(initial_phase)? {
                good.extend(seen);
                return Ok(());
            }
            seen.push(key);
            let before = s.progress();
            if s.pair.as_ref().is_some_and(|p| !p.updated) {
                s.ask_new_version();
            }
            s.down = false;
            for l in std::mem::take(&mut s.late) {
                s.pipelines.insert(l.id, l.enter);
            }
            if s.gone {
                s.roll_every_pod();
                continue;
            }
            s.carry_out_all()?;
            s.roll_every_pod();
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
            s = s.reconcile(Write::Lands)?;
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

/// A workload beside Core Hub (a module, an agent, or GKO's own Deployment) with its pods.
fn deployment(
    name: &str,
    component_type: ComponentType,
    label: &str,
    image: &str,
    ready: bool,
    mark: Option<String>,
    pods: Vec<PodView>,
) -> Workload {
    Workload {
        // An agent is a StatefulSet, as Core Hub.
        kind: if component_type == ComponentType::Agent {
            WorkloadKind::StatefulSet
        } else {
            WorkloadKind::Deployment
        },
        name: name.into(),
        uid: format!("{name}-uid"),
        component_type: Some(component_type),
        label_value: label.into(),
        container: Some("c".into()),
        image: image.into(),
        ready,
        progress_deadline_exceeded: false,
        rollout_blocker: None,
        self_update_mark: mark,
        template: Box::default(),
        selector: Default::default(),
        pods,
    }
}

/// A pod on `image`, crash-looping when `failing`.
fn side_pod(name: String, image: &str, failing: bool) -> PodView {
    PodView {
        name,
        uid: format!("pod-{image}"),
        image: image.into(),
        ready: !failing,
        waiting: failing.then(|| ("CrashLoopBackOff".to_string(), "back-off".to_string())),
        restarts: i32::from(failing),
        node: None,
        dr_mark: None,
    }
}

fn catalog() -> Catalog {
    [
        ("gluesync-core-hub".to_string(), "2.3.2.2".to_string()),
        ("gluesync-chronos".to_string(), "1.1.0".to_string()),
        ("gluesync-grafana".to_string(), "1.1.0".to_string()),
        ("gluesync-operator".to_string(), "0.4.0".to_string()),
    ]
    .into()
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
    explore_fates(budget, max_states, gate, &EVERY_FATE)
}

/// [`explore_with`], from the runs whose new Core Hub pods do what `fates` name.
fn explore_fates(budget: Budget, max_states: usize, gate: Option<Gate>, fates: &[Fate]) -> Outcome {
    let started = Instant::now();
    let mut parents: HashMap<String, (Option<String>, String)> = HashMap::new();
    let mut queue: VecDeque<(State, usize)> = VecDeque::new();
    let mut good: HashSet<String> = HashSet::new();
    let mut depth = 0;
    let module_fates: &[Fate] =
        if matches!(gate, Some(Gate::Modules | Gate::Agents | Gate::SelfUpdate)) {
            &[Fate::Ready, Fate::CrashLoop]
        } else {
            &[Fate::Ready]
        };
    for &fate in fates {
        for module_fate in module_fates {
            let s = State::initial(fate, *module_fate, budget, gate);
            let modules = if gate == Some(Gate::Modules) {
                format!(", {}'s {module_fate:?}", MODULES[0].0)
            } else if gate == Some(Gate::Agents) {
                format!(", {}'s {module_fate:?}", AGENTS[0].0)
            } else if gate == Some(Gate::SelfUpdate) {
                format!(", GKO's new pod {module_fate:?}")
            } else {
                String::new()
            };
            parents.insert(
                s.key(),
                (
                    None,
                    format!("start: the new Core Hub pods will be {fate:?}{modules}"),
                ),
            );
            queue.push_back((s, 0));
        }
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
    // The whole update; then with each gate of the user's terms, deep enough to reach the approval's timeout
    // and the window, with the pre-pull, and with the user deleting the GluesyncPlatform at any point (a
    // quarter as many states each); and one Lease
    // change, with nothing else going wrong, as deep as Core Hub's rollback (where it found a write of the
    // new image landing after the rollback).
    let one = Budget {
        crashes: 1,
        ..NO_FAULT
    };
    let mut runs: Vec<Run> = vec![
        (
            "full".into(),
            budget,
            Box::new(move || explore(budget, max)),
        ),
        (
            "full, one Lease change".into(),
            one,
            Box::new(move || explore_fates(one, max / 2, Some(Gate::Handover), &[Fate::Ready])),
        ),
    ];
    for gate in [
        Gate::Approval,
        Gate::Window,
        Gate::PrePull,
        Gate::Deletion,
        Gate::Modules,
        Gate::Agents,
        Gate::SelfUpdate,
        Gate::Handover,
        Gate::Disaster,
    ] {
        runs.push((
            format!("full, {gate:?}"),
            budget,
            Box::new(move || explore_with(budget, max / 4, Some(gate))),
        ));
    }
    let outcomes = on_every_core(&runs);
    for ((name, _, _), o) in runs.iter().zip(&outcomes) {
        assert!(o.violation.is_none(), "{name}: {:?}", o.violation);
    }
    assert!(
        outcomes[0].states >= 100_000,
        "{} states",
        outcomes[0].states
    );
}

/// A model check to run: its name, its faults per history, and the exploration.
type Run = (String, Budget, Box<dyn Fn() -> Outcome + Send + Sync>);

/// Runs independent model checks on every core, the first ones first (put the longest there), each
/// reported as it ends; their outcomes in the runs' order.
fn on_every_core(runs: &[Run]) -> Vec<Outcome> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let done: std::sync::Mutex<Vec<Option<Outcome>>> =
        std::sync::Mutex::new(runs.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..cores.min(runs.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((name, budget, run)) = runs.get(i) else {
                        break;
                    };
                    let o = run();
                    report(name, *budget, &o);
                    done.lock().expect("no run panicked while holding the list")[i] = Some(o);
                }
            });
        }
    });
    done.into_inner()
        .expect("no run panicked while holding the list")
        .into_iter()
        .map(|o| o.expect("every run ended"))
        .collect()
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
    holds_with(Gate::Approval);
    holds_with(Gate::Window);
}

/// Every promise holds on small histories of the world `gate` names.
fn holds_with(gate: Gate) {
    let o = explore_with(SMALL, 6_000, Some(gate));
    report(&format!("{gate:?}"), SMALL, &o);
    assert!(o.violation.is_none(), "{gate:?}");
    assert!(o.states >= 3_000, "{gate:?}: {} states", o.states);
}

/// The deliberate bug `m` is caught in the world `gate` names, from the runs whose new Core Hub pods do
/// what `fates` name; its last line says one of `expect`.
fn caught_with(m: Mutant, budget: Budget, gate: Gate, fates: &[Fate], expect: &[&str]) {
    set_mutant(Some(m));
    let o = explore_fates(budget, 50_000, Some(gate), fates);
    set_mutant(None);
    report(&format!("{m:?} {gate:?}"), budget, &o);
    let lines = o
        .violation
        .unwrap_or_else(|| panic!("{m:?} under {gate:?} was not caught"));
    let last = lines.last().unwrap();
    assert!(expect.iter().any(|e| last.contains(e)), "{lines:?}");
}

const EVERY_FATE: [Fate; 3] = [Fate::Ready, Fate::CrashLoop, Fate::Unpullable];

/// The pre-pull: nothing is paused or changed before the new image is on Core Hub's node; an
/// unpullable image refuses the update with nothing changed; no pre-pull pod is left; every other promise
/// holds as without it.
#[test]
fn nothing_is_paused_before_the_new_image_is_on_the_node() {
    holds_with(Gate::PrePull);
}

/// A pre-pull pod is made only once a written status lists it (`status.update.prePulls`, what the
/// admission policy reads): no decision that goes unwritten makes one (the model refuses a pod made
/// otherwise, see `apply`), GKO's finalizer alone may be put on without a status, and a GKO that stops
/// after the status names the pull takes the pod in and leaves none once the update has ended.
#[test]
fn a_pre_pull_pod_is_made_only_once_a_written_status_lists_it() {
    let budget = Budget {
        crashes: 1,
        outages: 0,
        conflicts: 0,
        late: 0,
    };
    let mut s = State::initial(Fate::Ready, Fate::Ready, budget, Some(Gate::PrePull));
    let initial_phase = s.status().phase;
    let mut made = false;
    for _ in 0..20 {
        if let Some(lost) = s.lost_write().unwrap() {
            assert_eq!(
                lost.pulls, s.pulls,
                "a decision that went unwritten made a pod"
            );
        }
        s = s.reconcile(Write::Lands).unwrap();
        s.carry_out_all().unwrap();
        if !s.pulls.is_empty() {
            made = true;
            break;
        }
        if let Some(check) = &s.gko.check {
            s.gko.answer = Some(Answer {
                token: check.token.clone(),
                at: time(s.now, s.seq),
                result: Ok(catalog()),
            });
        }
        if s.gko.work.is_some() {
            s = s.list();
        }
    }
    assert!(made, "no decision made a pre-pull pod");
    assert_eq!(
        s.status().update.map(|u| u.step.name()),
        Some(UpdateStep::PrePull)
    );
    // GKO stops now: the next one takes the pod in, and none is left once the update has ended.
    s.budget.crashes -= 1;
    s.gko = Process::default();
    s.settle(initial_phase, &mut HashSet::new()).unwrap();
}

#[test]
fn a_drain_before_the_pull_ends_is_caught() {
    caught_with(
        Mutant::DrainBeforePulled,
        SMALL,
        Gate::PrePull,
        &EVERY_FATE,
        &["before the new image was on Core Hub's node"],
    );
}

#[test]
fn an_engine_that_ignores_the_gates_is_caught() {
    for gate in [Gate::Approval, Gate::Window] {
        caught_with(
            Mutant::IgnoreGate,
            SMALL,
            gate,
            &EVERY_FATE,
            &["a pipeline was paused or Core Hub's image changed"],
        );
    }
}

/// The GluesyncPlatform deleted at any point of the update (before its finalizer is on, mid-drain, with
/// Core Hub half-changed, while pipelines resume): it goes only once every pipeline that was running runs
/// again (or, Core Hub out of reach, `drainTimeoutSeconds` after the deletion), and Core Hub is left on
/// an image its pods run; every other promise holds as without it.
#[test]
fn a_deleted_platform_goes_only_once_its_pipelines_run_again() {
    holds_with(Gate::Deletion);
}

#[test]
fn letting_a_deleted_platform_go_with_its_pipelines_paused_is_caught() {
    caught_with(
        Mutant::LetGoWithPaused,
        SMALL,
        Gate::Deletion,
        &EVERY_FATE,
        &["went with", "left in maintenance mode"],
    );
}

/// The modules: updated one by one, each only once the one before it is ready on its image, in the
/// step Modules after Core Hub's; one whose new image crash-loops is put back on its image and the update
/// ends Degraded; a Failed or Refused update leaves them untouched; every other promise holds as without
/// them.
#[test]
fn the_modules_are_updated_one_by_one_and_one_that_fails_is_put_back() {
    holds_with(Gate::Modules);
}

/// No fault: the step Modules lies deep in every history.
const NO_FAULT: Budget = Budget {
    crashes: 0,
    outages: 0,
    conflicts: 0,
    late: 0,
};

#[test]
fn modules_updated_at_once_are_caught() {
    caught_with(
        Mutant::ModulesAtOnce,
        NO_FAULT,
        Gate::Modules,
        &EVERY_FATE,
        &["was not ready on its own"],
    );
}

#[test]
fn a_module_left_on_its_failing_image_is_caught() {
    // Core Hub comes up: only a module's rollback is left to miss.
    // Left crash-looping, the module is seen by the next one's update, or at the end.
    caught_with(
        Mutant::NoRollback,
        NO_FAULT,
        Gate::Modules,
        &[Fate::Ready],
        &["with module chronos", "chronos was not ready"],
    );
}

/// GKO's own update: last, once the update has ended (its status says so before its image changes);
/// the new GKO's pod crash-looping, the old GKO (which leads until the new pod is ready) puts its image
/// back; GKO ends on its old or its new image, ready, as its entry in the attempt says; the Lease may
/// change hands between the two GKOs at any point; every other promise holds as without it.
#[test]
fn gko_updates_itself_last_and_puts_itself_back_when_it_does_not_come_up() {
    holds_with(Gate::SelfUpdate);
}

/// GKO changing its own image as the update starts, and a new GKO that does not come up left on its
/// image, are each caught.
#[test]
fn a_self_update_too_early_or_without_its_rollback_is_caught() {
    for (m, expect) in [
        (Mutant::SelfUpdateFirst, &["while an update runs"][..]),
        (
            Mutant::NoSelfRollback,
            &["no good end", "does not come up"][..],
        ),
    ] {
        caught_with(m, NO_FAULT, Gate::SelfUpdate, &[Fate::Ready], expect);
    }
}

/// Two GKOs: the Lease changes hands between any two steps while the GKO that held it has a write and
/// maintenance requests in flight, which land in any order with what the new holder does; every promise
/// holds as with one GKO.
#[test]
fn the_lease_changing_hands_with_calls_in_flight_loses_nothing() {
    holds_with(Gate::Handover);
}

#[test]
fn a_gko_that_goes_on_after_losing_the_lease_is_caught() {
    caught_with(
        Mutant::IgnoreLease,
        Budget {
            crashes: 1,
            ..NO_FAULT
        },
        Gate::Handover,
        &[Fate::Ready],
        &[
            "carried on and undid it",
            "no good end",
            "does not record it",
            "patched while",
            "not back on its image",
        ],
    );
}

/// A disaster-recovery setup set up and torn down at any point of an update: Core Hub's pod template
/// changes for it only while no update runs, its image only while no setup changes the template; the
/// update ends as without it, the setup ends Active with Core Hub's pods on it, and a teardown leaves the
/// template exactly as it was before the setup (the variable the setup overrode has its own value again).
#[test]
fn a_disaster_recovery_setup_and_teardown_beside_an_update_keep_to_their_turns() {
    holds_with(Gate::Disaster);
}

#[test]
fn a_setup_and_an_update_out_of_turn_or_a_teardown_that_forgets_is_caught() {
    // An update started while the setup rolls Core Hub finds it out of reach, and is refused: the
    // version asked never comes (or, asked later, Core Hub's image changes mid-setup).
    for (m, expect) in [
        (
            Mutant::DrBesideUpdate,
            &[
                "no good end",
                "image changed while a disaster-recovery setup changed its pod template",
            ][..],
        ),
        (
            Mutant::DrDuringUpdate,
            &["pod template changed for disaster recovery while an update ran"],
        ),
        (
            Mutant::RestoreForgets,
            &["no good end", "left Core Hub's pod template changed"],
        ),
    ] {
        caught_with(m, NO_FAULT, Gate::Disaster, &[Fate::Ready], expect);
    }
}

/// An agent beside Core Hub, its new image coming up or crash-looping: its image changes only while every
/// pipeline that was running is in maintenance mode; it ends on its new image when Core Hub does, back on
/// its old one when the update Failed or was Refused; every other promise holds as without it.
#[test]
fn an_agent_goes_with_core_hub_and_back_with_it() {
    holds_with(Gate::Agents);
}

#[test]
fn an_agent_left_on_its_failing_image_is_caught() {
    // Core Hub comes up, the agent's new image crash-loops: only the agent's rollback is left to miss.
    caught_with(
        Mutant::NoRollback,
        NO_FAULT,
        Gate::Agents,
        &[Fate::Ready],
        &["with agent agent-mssql", "no good end"],
    );
}

#[test]
fn an_agent_patched_before_the_drain_is_caught() {
    caught_with(
        Mutant::AgentBeforeDrain,
        NO_FAULT,
        Gate::Agents,
        &[Fate::Ready],
        &["agent agent-mssql patched while"],
    );
}
