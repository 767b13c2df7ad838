//! Builders of the tiny fixtures the engine's tests start from: times, a platform, workloads with their
//! pods, a sample install; and a small world to decide in (a Core Hub that carries out the work each
//! decision asks for, as the worker would). Built for the unit tests and, with the feature `test-hooks`,
//! for the integration tests and the heap benchmark; never in a release build.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::ObjectMeta;

use crate::{
    api::{
        ComponentType, FINALIZER, GluesyncPlatform, GluesyncPlatformSpec, PipelineId, UpdateStep,
        WorkloadKind,
    },
    update::{
        Action, Catalog, Decision, Event, Observed,
        catalog::Answer,
        corehub::{Listing, Pipeline, Report, Target, Work},
        decide,
        observed::{PodView, Workload},
    },
};

/// `secs` seconds after a fixed instant.
pub fn at(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
}

/// What GKO sees at `now`: these workloads and Core Hub's `report`; no catalog answer, no Core Hub
/// target, no access problem, no GKO image of its own, no disaster-recovery objects, no pre-pull pods.
/// Set any other field with `Observed { field, ..observed(..) }`.
pub fn observed<'a>(workloads: &'a [Workload], report: &'a Report, now: Time) -> Observed<'a> {
    Observed {
        now,
        workloads,
        corehub: report,
        catalog: None,
        target: None,
        access_problem: None,
        me: None,
        dr: Default::default(),
        pre_pulls: &[],
    }
}

/// Asserts that `d` lets a deleted platform go (GKO's finalizer off) with the Warning that it did so
/// before `what` ended; returns the Warning's message.
pub fn let_go_before(d: &Decision, what: &str) -> String {
    assert!(
        d.actions.contains(&Action::RemoveFinalizer),
        "{:?}",
        d.actions
    );
    let abandoned = d
        .events
        .iter()
        .find(|e| e.warning && e.reason == "CleanupAbandoned")
        .expect("the event says what was left");
    assert!(abandoned.message.contains(what), "{}", abandoned.message);
    abandoned.message.clone()
}

/// A platform named `gluesync` in namespace `ns`, generation 2, with GKO's finalizer on.
pub fn platform(spec: serde_json::Value) -> GluesyncPlatform {
    let mut g = GluesyncPlatform::new(
        "gluesync",
        serde_json::from_value::<GluesyncPlatformSpec>(spec).unwrap(),
    );
    g.metadata = ObjectMeta {
        name: Some("gluesync".into()),
        namespace: Some("ns".into()),
        generation: Some(2),
        uid: Some("uid".into()),
        finalizers: Some(vec![FINALIZER.into()]),
        ..Default::default()
    };
    g
}

/// A labelled StatefulSet (a Deployment for Grafana), ready, with one ready pod on `image`.
pub fn workload(name: &str, label: &str, image: &str) -> Workload {
    Workload {
        kind: if name.contains("grafana") {
            WorkloadKind::Deployment
        } else {
            WorkloadKind::StatefulSet
        },
        name: name.into(),
        uid: format!("{name}-uid"),
        component_type: ComponentType::from_label(label),
        label_value: label.into(),
        container: Some("c".into()),
        image: image.into(),
        ready: true,
        progress_deadline_exceeded: false,
        rollout_blocker: None,
        self_update_mark: None,
        template: Box::default(),
        selector: Default::default(),
        pods: vec![pod(name, image, true, 0)],
    }
}

/// The pod `<workload>-0`.
pub fn pod(workload: &str, image: &str, ready: bool, restarts: i32) -> PodView {
    PodView {
        name: format!("{workload}-0"),
        uid: format!("{workload}-0-uid"),
        image: image.into(),
        ready,
        waiting: None,
        restarts,
        node: None,
        dr_mark: None,
    }
}

/// Core Hub, an agent, Chronos and Grafana, all ready on their old versions.
pub fn install() -> Vec<Workload> {
    vec![
        workload("core-hub", "core-hub", "molo17/gluesync-core-hub:2.3.2.1"),
        workload("agent-mssql", "agent", "molo17/gluesync-mssql-cdc:2.3.2.1"),
        workload("chronos", "module", "molo17/gluesync-chronos:0.3.2"),
        workload("grafana", "third-party", "molo17/grafana:11.2.0"),
    ]
}

/// `millis` milliseconds after the same instant as [`at`].
pub fn at_ms(millis: i64) -> Time {
    Time(jiff::Timestamp::from_millisecond(1_800_000_000_000 + millis).unwrap())
}

/// A Core Hub that does what the engine's work asks, now or late.
#[derive(Default)]
pub struct Hub {
    /// Pipeline id -> in maintenance mode.
    pub pipelines: BTreeMap<PipelineId, bool>,
    pub report: Report,
    pub entered: BTreeSet<PipelineId>,
    /// Enter requests land this many seconds after they were accepted.
    pub enter_delay: i64,
    /// Requests accepted but not applied yet: (id, enter, lands at).
    pub pending: Vec<(PipelineId, bool, i64)>,
    pub down: bool,
    /// How often each pipeline was asked in and out.
    pub enters: BTreeMap<PipelineId, u32>,
    pub exits: BTreeMap<PipelineId, u32>,
}

impl Hub {
    pub fn new(running: &[&str], paused: &[&str]) -> Hub {
        let mut hub = Hub::default();
        for id in running {
            hub.pipelines.insert((*id).into(), false);
        }
        for id in paused {
            hub.pipelines.insert((*id).into(), true);
        }
        hub
    }

    pub fn in_maintenance(&self) -> Vec<&str> {
        self.pipelines
            .iter()
            .filter(|(_, m)| **m)
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// Carries out `work` at second `now` (requests, then a list a millisecond later).
    pub fn serve(&mut self, work: Option<&Work>, now: i64) {
        let mut landed = vec![];
        self.pending.retain(|(id, enter, t)| {
            let due = *t <= now;
            if due {
                landed.push((id.clone(), *enter));
            }
            !due
        });
        for (id, enter) in landed {
            self.pipelines.insert(id, enter);
        }
        let Some(work) = work else {
            return;
        };
        if self.report.epoch != work.epoch {
            self.report = Report {
                epoch: work.epoch.clone(),
                ..Default::default()
            };
            self.entered = work.asked.iter().cloned().collect();
        }
        let ms = |t: i64, extra: i64| {
            Time(jiff::Timestamp::from_millisecond((1_800_000_000 + t) * 1000 + extra).unwrap())
        };
        if self.down {
            self.report.listing = Some(Listing {
                at: ms(now, 1),
                result: Err("Core Hub cannot be reached".into()),
            });
            return;
        }
        for id in work.enter.iter() {
            if self.entered.insert(id.clone()) {
                *self.enters.entry(id.clone()).or_default() += 1;
                if self.enter_delay > 0 {
                    self.pending
                        .push((id.clone(), true, now + self.enter_delay));
                } else {
                    self.pipelines.insert(id.clone(), true);
                }
            }
        }
        for id in work.exit.iter() {
            if !self.report.exits.contains_key(id) {
                *self.exits.entry(id.clone()).or_default() += 1;
                self.report.exits.insert(id.clone(), ms(now, 0));
                self.pipelines.insert(id.clone(), false);
            }
        }
        // As the worker does: the pipelines asked in this epoch (inherited ones too) with each listing.
        self.report.entered = self.entered.len();
        self.report.listing = Some(Listing {
            at: ms(now, 1),
            result: Ok(std::sync::Arc::new(
                self.pipelines
                    .iter()
                    .map(|(id, m)| Pipeline {
                        id: id.clone(),
                        is_in_maintenance_mode: *m,
                    })
                    .collect(),
            )),
        });
    }
}

/// The world a test decides in: workloads, the catalog, Core Hub.
pub struct World {
    pub workloads: Vec<Workload>,
    pub catalog: Option<Catalog>,
    pub hub: Hub,
    /// The catalog's answer to the last check asked for.
    pub answer: Option<Answer>,
    /// The image of the GKO that decides.
    pub me: Option<String>,
    /// The disaster-recovery Secret and Service.
    pub dr: crate::update::disaster::DrObjects,
    /// Why GKO may not work on the platform, if it may not.
    pub access: Option<crate::api::Problem>,
    /// The pre-pull pods.
    pub pre_pulls: Vec<crate::update::observed::PrePullPod>,
    /// What a pre-pull pod is once created.
    pub pull: crate::update::observed::PullState,
}

impl World {
    pub fn new(catalog: Option<Catalog>, hub: Hub) -> World {
        World {
            workloads: install(),
            catalog,
            hub,
            answer: None,
            me: None,
            dr: Default::default(),
            pre_pulls: vec![],
            pull: crate::update::observed::PullState::Pulling,
            access: None,
        }
    }

    pub fn target() -> Target {
        Target {
            url: "https://core-hub:1717".into(),
            credentials_secret: None,
            ca_secret: None,
            insecure_skip_verify: false,
        }
    }

    /// One decision at second `now`, its status put on the platform, its background work carried out.
    pub fn step(&mut self, g: &mut GluesyncPlatform, now: i64) -> Decision {
        self.step_at(g, at(now))
    }

    /// [`World::step`] at a time to the millisecond.
    pub fn step_at(&mut self, g: &mut GluesyncPlatform, now: Time) -> Decision {
        let d = self.decide(g, &now);
        self.carry_out(g, &d, now);
        d
    }

    /// The decision at `now` on what the world shows, changing nothing.
    pub fn decide(&self, g: &GluesyncPlatform, now: &Time) -> Decision {
        decide(
            g,
            &Observed {
                now: now.clone(),
                workloads: &self.workloads,
                corehub: &self.hub.report,
                catalog: self.answer.as_ref(),
                target: Some(World::target()),
                access_problem: self.access.clone(),
                me: self.me.clone(),
                dr: self.dr.clone(),
                pre_pulls: &self.pre_pulls,
            },
        )
    }

    /// What follows a decision: its status put on the platform, its actions and background work carried
    /// out.
    pub fn carry_out(&mut self, g: &mut GluesyncPlatform, d: &Decision, now: Time) {
        g.status = Some(d.status.clone());
        for a in &d.actions {
            match a {
                // As the cluster's writer: other tools' finalizers stay.
                Action::AddFinalizer | Action::RemoveFinalizer => {
                    let mut list = g.metadata.finalizers.take().unwrap_or_default();
                    list.retain(|f| f != FINALIZER);
                    if *a == Action::AddFinalizer {
                        list.push(FINALIZER.into());
                    }
                    g.metadata.finalizers = Some(list).filter(|l| !l.is_empty());
                }
                // The workload takes the new image; its pods follow in `roll_out`.
                Action::SetImage { name, image, .. } => {
                    if let Some(w) = self.workloads.iter_mut().find(|w| &w.name == name) {
                        w.image = image.clone();
                        w.ready = w.pods.iter().all(|p| &p.image == image && p.ready);
                    }
                }
                Action::DeletePrePull(name) => self.pre_pulls.retain(|p| &p.name != name),
                // A stuck pod: the fixtures' pods follow their workload's image in `roll_out`.
                Action::DeletePod(_) => {}
                Action::CreatePod(pod) => {
                    let mut seen = crate::update::prepull::observe(pod).expect("a pre-pull pod");
                    seen.state = self.pull.clone();
                    self.pre_pulls.retain(|p| p.name != seen.name);
                    self.pre_pulls.push(seen);
                }
                Action::SelfUpdate {
                    name, image, phase, ..
                } => {
                    let w = self.workloads.iter_mut().find(|w| &w.name == name).unwrap();
                    if let Some(image) = image {
                        w.image = image.clone();
                    }
                    w.self_update_mark = phase.map(|p| p.as_str().to_string());
                    let image = w.image.clone();
                    w.ready = w.pods.iter().all(|p| p.image == image && p.ready);
                }
                Action::PatchWorkload { .. } | Action::ApplyService(_) | Action::RemoveMade(..) => {
                    panic!("{a:?} in a world without a disaster-recovery pair")
                }
            }
        }
        if let Some(check) = &d.catalog
            && let Some(cat) = &self.catalog
        {
            self.answer = Some(Answer {
                token: check.token.clone(),
                at: now.clone(),
                result: Ok(cat.clone()),
            });
        }
        // The small Core Hub keeps whole seconds.
        self.hub
            .serve(d.corehub.as_ref(), now.0.as_second() - 1_800_000_000);
    }

    /// Steps at second `now` until the step is `until` (at most 20 decisions); every event seen.
    pub fn until(&mut self, g: &mut GluesyncPlatform, now: i64, until: UpdateStep) -> Vec<Event> {
        let mut events = vec![];
        for _ in 0..20 {
            if g.status
                .as_ref()
                .and_then(|s| s.update.as_ref())
                .map(|u| u.step.name())
                == Some(until)
            {
                return events;
            }
            events.extend(self.step(g, now).events);
        }
        panic!(
            "never reached {until:?}: {:?}",
            g.status.as_ref().and_then(|s| s.update.as_ref())
        );
    }

    /// The workloads run their planned images, ready.
    pub fn roll_out(&mut self, g: &GluesyncPlatform, names: &[&str]) {
        for w in &mut self.workloads {
            if let Some(c) = g
                .status
                .as_ref()
                .and_then(|s| s.update.as_ref())
                .expect("an update runs")
                .components
                .iter()
                .find(|c| c.name == w.name)
                && let Some(to) = &c.to_image
                && names.contains(&w.name.as_str())
            {
                w.image = to.clone();
                w.pods[0].image = to.clone();
                w.ready = true;
            }
        }
    }
}
