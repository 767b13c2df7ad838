//! Unit tests of the update state machine, step by step from tiny fixtures. The small Core Hub of
//! `fixtures` carries out the background work each decision asks for, the way the worker would, so that
//! the pipelines' states follow from the requests the engine made.

use super::{fixtures::*, *};
use crate::{
    api::{
        Attempt, ComponentResult, ComponentResultStatus, ComponentState, HistoryEntry, PipelineId,
        PlannedComponent, SelfUpdatePhase, UpdateStep::*,
    },
    update::corehub::{Listing, Pipeline},
    update::observed::PodView,
};

fn catalog() -> Catalog {
    [
        ("gluesync-core-hub".to_string(), "2.3.2.2".to_string()),
        ("gluesync-chronos".to_string(), "0.3.3".to_string()),
        ("grafana".to_string(), "12.0.0".to_string()),
    ]
    .into()
}

fn update(g: &GluesyncPlatform) -> &UpdateStatus {
    g.status.as_ref().unwrap().update.as_ref().unwrap()
}

fn status(g: &GluesyncPlatform) -> &GluesyncPlatformStatus {
    g.status.as_ref().unwrap()
}

fn planned<'a>(g: &'a GluesyncPlatform, name: &str) -> &'a PlannedComponent {
    update(g)
        .components
        .iter()
        .find(|c| c.name == name)
        .unwrap()
}

fn reasons(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.reason.as_str()).collect()
}

#[test]
fn a_new_version_starts_an_update_once_per_generation() {
    let g = platform(serde_json::json!({"version": "2.3.2.2"}));
    // Core Hub listed after a module.
    let mut w = install();
    w.rotate_left(2);
    let report = Report::default();
    let obs = |now| observed(&w, &report, now);
    let d = decide(&g, &obs(at(0)));
    assert_eq!(d.status.phase, Some(Phase::Updating));
    assert!(d.again);
    // Core Hub's version, whatever other workloads run.
    assert_eq!(
        d.events
            .iter()
            .map(|e| e.message.as_str())
            .collect::<Vec<_>>(),
        [
            "update of Core Hub from 2.3.2.1 to 2.3.2.2 started, asked by a change of the GluesyncPlatform"
        ]
    );
    let u = d.status.update.unwrap();
    assert_eq!((u.step.name(), u.generation), (Preflight, 2));
    assert_eq!(u.from.as_deref(), Some("2.3.2.1"));

    // The same generation already ended: nothing starts again by itself.
    let mut done = g.clone();
    done.status = Some(GluesyncPlatformStatus {
        last_attempt: Some(Attempt {
            target: Some("2.3.2.2".into()),
            request_id: None,
            requested_by: None,
            generation: Some(2),
            result: UpdateResult::Failed,
            message: "x".into(),
            started_at: None,
            finished_at: at(0),
            results: vec![],
            paused_pipelines: Default::default(),
            resumed_pipelines: Default::default(),
        }),
        ..Default::default()
    });
    let d = decide(&done, &obs(at(1)));
    assert!(d.status.update.is_none());
    assert_eq!(d.status.phase, Some(Phase::Failed));

    // Nothing to do: no update.
    let current = platform(serde_json::json!({"version": "2.3.2.1"}));
    assert!(decide(&current, &obs(at(0))).status.update.is_none());
}

#[test]
fn preflight_waits_for_the_catalog_and_plans_every_component() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.step(&mut g, 0);
    let d = world.step(&mut g, 0);
    assert_eq!(
        update(&g).step.name(),
        Preflight,
        "waits for the catalog's answer"
    );
    let check = d.catalog.expect("Preflight asks the catalog");
    assert_eq!(check.channel, ReleaseChannel::Ga);
    assert!(check.images.contains("gluesync-chronos"));
    world.until(&mut g, 0, Drain);
    assert_eq!(
        planned(&g, "core-hub").to_image.as_deref(),
        Some("molo17/gluesync-core-hub:2.3.2.2")
    );
    assert_eq!(
        planned(&g, "agent-mssql").to_image.as_deref(),
        Some("molo17/gluesync-mssql-cdc:2.3.2.2"),
        "agents follow Core Hub"
    );
    assert_eq!(
        planned(&g, "chronos").to_image.as_deref(),
        Some("molo17/gluesync-chronos:0.3.3"),
        "an unpinned module takes the catalog's latest"
    );
    assert_eq!(
        planned(&g, "grafana").state,
        ComponentState::Skipped,
        "third-party only when pinned"
    );
}

#[test]
fn preflight_goes_on_without_a_catalog_that_does_not_answer() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(None, Hub::new(&[], &[]));
    world.step(&mut g, 0);
    let d = world.step(&mut g, 0);
    assert_eq!(update(&g).step.name(), Preflight);
    assert!(
        d.requeue
            .is_some_and(|r| r.as_secs() <= plan::CATALOG_WAIT_SECONDS as u64 + 1)
    );
    world.step(&mut g, plan::CATALOG_WAIT_SECONDS + 1);
    assert_eq!(update(&g).step.name(), Snapshot);
    assert!(
        status(&g)
            .message
            .as_deref()
            .unwrap()
            .contains("without the version catalog")
    );
    assert_eq!(
        planned(&g, "chronos").message.as_deref(),
        Some("no pin, and the version catalog did not answer")
    );
}

/// An unpinned module the update leaves says why: an offline install has no catalog, or the catalog that
/// answered knows no version of it.
#[test]
fn an_unpinned_module_left_says_why() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2", "catalog": {"offline": true}}));
    let mut world = World::new(None, Hub::new(&[], &[]));
    world.until(&mut g, 0, Snapshot);
    assert_eq!(
        planned(&g, "chronos").message.as_deref(),
        Some("no pin, and an offline install has no catalog")
    );
    // Offline, no catalog is waited for or missed.
    assert_eq!(
        status(&g).message.as_deref(),
        Some("preflight passed; recording the images of every component")
    );
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(
        Some([("gluesync-core-hub".to_string(), "2.3.2.2".to_string())].into()),
        Hub::new(&[], &[]),
    );
    world.until(&mut g, 0, Drain);
    assert_eq!(
        (
            planned(&g, "chronos").state,
            planned(&g, "chronos").message.as_deref()
        ),
        (
            ComponentState::Skipped,
            Some("no pin, and the catalog gave no version")
        )
    );
}

/// An unpinned module already on the catalog's latest stays where it is, even with an image registry set
/// (only an image GKO changes goes to the registry).
#[test]
fn a_module_on_the_latest_version_stays_on_its_image() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2",
        "imageRegistry": "registry.example.com/mirror",
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world
        .workloads
        .iter_mut()
        .find(|w| w.name == "chronos")
        .unwrap()
        .image = "molo17/gluesync-chronos:0.3.3".into();
    world.until(&mut g, 0, Drain);
    assert_eq!(
        (
            planned(&g, "chronos").state,
            planned(&g, "chronos").to_image.as_deref()
        ),
        (ComponentState::Skipped, None)
    );
    assert_eq!(
        planned(&g, "core-hub").to_image.as_deref(),
        Some("registry.example.com/mirror/gluesync-core-hub:2.3.2.2")
    );
}

#[test]
fn pins_and_the_registry_shape_the_targets() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2",
        "imageRegistry": "registry.example.com/mirror",
        "modules": {"grafana": "11.3.0", "chronos": "0.3.2"},
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.until(&mut g, 0, Snapshot);
    assert_eq!(
        planned(&g, "core-hub").to_image.as_deref(),
        Some("registry.example.com/mirror/gluesync-core-hub:2.3.2.2")
    );
    assert_eq!(
        planned(&g, "grafana").to_image.as_deref(),
        Some("registry.example.com/mirror/grafana:11.3.0")
    );
    assert_eq!(
        planned(&g, "chronos").to_image.as_deref(),
        Some("registry.example.com/mirror/gluesync-chronos:0.3.2"),
        "a pin wins over the catalog; the registry moves it"
    );
}

#[test]
fn a_version_the_catalog_does_not_know_is_refused() {
    let mut g = platform(serde_json::json!({"version": "2.4.0.0"}));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.until(&mut g, 0, Finish);
    let d = world.step(&mut g, 0);
    let s = status(&g);
    assert!(s.update.is_none());
    let a = s.last_attempt.as_ref().unwrap();
    assert_eq!(a.result, UpdateResult::Refused);
    assert!(
        a.message
            .contains("not in the version catalog: the latest on the ga channel"),
        "{}",
        a.message
    );
    assert_eq!(d.events.last().unwrap().reason, "UpdateRefused");
    assert_eq!(s.phase, None, "Refused leaves the phase as it was");
}

#[test]
fn the_ui_request_channel_is_the_update_channel() {
    let mut g = platform(serde_json::json!({"version": "2.4.0.0", "requestID": "ui-1"}));
    g.metadata.annotations = Some(
        [(
            crate::api::REQUEST_ANNOTATION.to_string(),
            r#"{"id":"ui-1","channel":"beta"}"#.to_string(),
        )]
        .into(),
    );
    let mut beta = catalog();
    beta.insert("gluesync-core-hub".into(), "2.4.0.0".into());
    let mut world = World::new(Some(beta), Hub::new(&[], &[]));
    world.step(&mut g, 0);
    let d = world.step(&mut g, 0);
    assert_eq!(update(&g).channel, ReleaseChannel::Beta);
    assert_eq!(
        d.catalog.unwrap().channel,
        ReleaseChannel::Beta,
        "the catalog is asked on beta"
    );
    world.until(&mut g, 0, Drain);
    assert_eq!(
        planned(&g, "core-hub").to_image.as_deref(),
        Some("molo17/gluesync-core-hub:2.4.0.0")
    );

    // An annotation for another request does not count.
    let mut other = platform(serde_json::json!({"version": "2.3.2.2", "requestID": "ui-2"}));
    other.metadata.annotations = g.metadata.annotations.clone();
    assert_eq!(request_channel(&other), ReleaseChannel::Ga);
}

#[test]
fn a_pin_after_a_ui_update_moves_no_other_module() {
    // The UI's update ran for ui-1; then a pin of grafana alone.
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.1", "requestID": "ui-1", "modules": {"grafana": "11.3.0"},
    }));
    g.metadata.generation = Some(3);
    g.status = Some(GluesyncPlatformStatus {
        last_attempt: Some(Attempt {
            target: None,
            request_id: Some("ui-1".into()),
            requested_by: None,
            generation: Some(2),
            result: UpdateResult::Succeeded,
            message: "update finished".into(),
            started_at: None,
            finished_at: at(0),
            results: vec![],
            paused_pipelines: Default::default(),
            resumed_pipelines: Default::default(),
        }),
        ..Default::default()
    });
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.until(&mut g, 0, Modules);
    assert!(!update(&g).new_request);
    assert_eq!(
        planned(&g, "grafana").to_image.as_deref(),
        Some("molo17/grafana:11.3.0")
    );
    assert_eq!(
        planned(&g, "chronos").to_image,
        None,
        "chronos is not pinned and stays"
    );

    // A new requestID does move it (the UI's "Update all").
    g.spec.request_id = Some("ui-2".into());
    g.metadata.generation = Some(4);
    g.status.as_mut().unwrap().update = None;
    world.until(&mut g, 1, Modules);
    assert!(update(&g).new_request);
    assert_eq!(
        planned(&g, "chronos").to_image.as_deref(),
        Some("molo17/gluesync-chronos:0.3.3")
    );
}

#[test]
fn a_workload_that_cannot_roll_out_is_refused_in_preflight() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.workloads[0].rollout_blocker =
        Some("StatefulSet core-hub has updateStrategy OnDelete".into());
    world.until(&mut g, 0, Finish);
    world.step(&mut g, 0);
    let a = status(&g).last_attempt.as_ref().unwrap();
    assert_eq!(a.result, UpdateResult::Refused);
    assert!(a.message.contains("OnDelete"), "{}", a.message);
}

#[test]
fn nothing_is_paused_before_the_finalizer_is_on() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    g.metadata.finalizers = None;
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    let mut asked = false;
    for _ in 0..6 {
        let d = world.step(&mut g, 0);
        asked |= d.actions.first() == Some(&Action::AddFinalizer);
        assert!(
            d.corehub.as_ref().is_none_or(|w| w.enter.is_empty()),
            "asked to pause without the finalizer: {:?}",
            d.corehub
        );
        g.metadata.finalizers = None; // every finalizer write fails
    }
    assert!(asked);
    // The drain lists meanwhile, and waits for the finalizer.
    assert_eq!(
        update(&g).step.name(),
        Drain,
        "waits for the finalizer in Drain"
    );
    assert_eq!(
        g.status.as_ref().unwrap().message.as_deref(),
        Some("putting GKO's finalizer on the GluesyncPlatform")
    );
    assert_eq!(world.hub.enters.len(), 0);
    assert!(g.status.as_ref().unwrap().paused_pipelines.is_empty());
    // Once it is on, the drain asks.
    g.metadata.finalizers = Some(vec![FINALIZER.into()]);
    world.step(&mut g, 0);
    world.step(&mut g, 0);
    assert_eq!(world.hub.enters.len(), 1, "{:?}", world.hub.enters);
}

/// Another tool's finalizer (Argo CD's) is not GKO's: GKO puts its own on before it pauses anything,
/// and takes only its own off when the update ends.
#[test]
fn another_tools_finalizer_is_not_gkos() {
    let argo = "resources-finalizer.argocd.argoproj.io".to_string();
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    g.metadata.finalizers = Some(vec![argo.clone()]);
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    let gkos = |g: &GluesyncPlatform| g.finalizers().iter().any(|f| f == FINALIZER);
    for t in 0..10 {
        let had = gkos(&g);
        world.step(&mut g, t);
        if !world.hub.enters.is_empty() {
            assert!(had, "paused before GKO's finalizer was on");
            break;
        }
    }
    assert_eq!(
        world.hub.enters.len(),
        1,
        "the drain asked: {:?}",
        world.hub.enters
    );
    assert_eq!(
        g.metadata.finalizers,
        Some(vec![argo.clone(), FINALIZER.to_string()])
    );
    world.until(&mut g, 10, CoreHub);
    world.step(&mut g, 10);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    to_the_end(&mut g, &mut world, 11..200, true);
    assert_eq!(
        status(&g).last_attempt.as_ref().map(|a| a.result),
        Some(UpdateResult::Succeeded)
    );
    // GKO asks its own finalizer off once the update has ended (the world takes it off only when asked,
    // and keeps Argo CD's, as the cluster's writer does).
    world.step(&mut g, 200);
    assert!(
        !gkos(&g),
        "GKO's finalizer stays: {:?}",
        g.metadata.finalizers
    );
    assert_eq!(g.metadata.finalizers, Some(vec![argo]));
}

/// `status.version` is the version Core Hub runs ready: it stays on the old one while the new image
/// rolls out, moves once Core Hub is ready on the new one, and is never a module's or an agent's.
#[test]
fn the_version_moves_once_core_hub_is_ready_on_the_new_one() {
    let (mut g, mut world) = drained_start(Hub::new(&["a"], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 1);
    let hub = |world: &World| {
        world
            .workloads
            .iter()
            .find(|w| w.name == "core-hub")
            .cloned()
    };
    let rolling = hub(&world).unwrap();
    assert_eq!(rolling.image, "molo17/gluesync-core-hub:2.3.2.2");
    assert!(!rolling.ready, "the new image is set, not ready yet");
    world.step(&mut g, 2);
    assert_eq!(update(&g).step.name(), CoreHub);
    assert_eq!(status(&g).version.as_deref(), Some("2.3.2.1"));
    // Core Hub is ready on the new image, its agent not yet: the version is Core Hub's.
    world.roll_out(&g, &["core-hub"]);
    assert!(hub(&world).unwrap().ready);
    world.step(&mut g, 3);
    assert_eq!(status(&g).version.as_deref(), Some("2.3.2.2"));
}

/// A platform at 2.3.2.1 asked for 2.3.2.2, taken to Drain, with these pipelines.
fn drained_start(hub: Hub, spec: serde_json::Value) -> (GluesyncPlatform, World) {
    let mut base = serde_json::json!({"version": "2.3.2.2", "stabilityWindowSeconds": 10});
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    let mut g = platform(base);
    let mut world = World::new(Some(catalog()), hub);
    let events = world.until(&mut g, 0, Drain);
    assert_eq!(events[0].reason, "UpdateStarted");
    (g, world)
}

#[test]
fn drain_records_pipelines_before_asking_and_leaves_paused_ones_alone() {
    let (mut g, mut world) = drained_start(
        Hub::new(&["a", "b"], &["user-paused"]),
        serde_json::json!({}),
    );
    // First the list: nothing is asked before GKO knows what runs.
    let d = world.step(&mut g, 1);
    assert!(d.corehub.as_ref().unwrap().enter.is_empty());
    let d = world.step(&mut g, 1);
    assert_eq!(status(&g).paused_pipelines, ["a", "b"]);
    let work = d.corehub.unwrap();
    assert_eq!(
        work.enter.iter().collect::<Vec<_>>(),
        ["a", "b"],
        "asked only after they are in the status"
    );
    assert_eq!(d.events[0].reason, "PipelinesPaused");
    world.step(&mut g, 2);
    assert_eq!(update(&g).step.name(), CoreHub);
    assert!(!world.hub.enters.contains_key("user-paused"));
}

#[test]
fn a_pipeline_core_hub_lists_twice_is_recorded_and_asked_once() {
    let (mut g, mut world) = drained_start(Hub::new(&["a", "b"], &[]), serde_json::json!({}));
    world.step(&mut g, 1);
    // Core Hub's answer names "a" twice.
    let Some(Listing {
        result: Ok(list), ..
    }) = &mut world.hub.report.listing
    else {
        panic!("no listing");
    };
    std::sync::Arc::make_mut(list).push(Pipeline {
        id: "a".into(),
        is_in_maintenance_mode: false,
    });
    let d = world.step(&mut g, 1);
    assert_eq!(status(&g).paused_pipelines, ["a", "b"]);
    assert_eq!(update(&g).step.asked_pipelines().unwrap(), &["a", "b"]);
    assert_eq!(d.corehub.unwrap().enter, ["a", "b"], "asked once each");
}

/// "a", "b" and "c" asked into maintenance mode by a GKO that stops before Core Hub applies them (2 s
/// late).
fn asked_late_by_a_gko_that_stops() -> (GluesyncPlatform, World) {
    let mut hub = Hub::new(&["a", "b", "c"], &[]);
    hub.enter_delay = 2;
    let (mut g, mut world) = drained_start(hub, serde_json::json!({"drainTimeoutSeconds": 30}));
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(world.hub.enters.len(), 3, "the first GKO sent the requests");
    // A new GKO: its worker knows nothing of this epoch; the pipelines still run.
    world.hub.report = Report::default();
    world.hub.entered.clear();
    (g, world)
}

/// The drain goes on to CoreHub with every pipeline asked in once.
fn each_asked_once(g: &mut GluesyncPlatform, world: &mut World) {
    world.until(g, 3, CoreHub);
    assert!(
        world.hub.enters.values().all(|n| *n == 1),
        "each pipeline asked in once: {:?}",
        world.hub.enters
    );
}

#[test]
fn a_gko_taking_over_during_drain_asks_no_pipeline_a_second_time() {
    let (mut g, mut world) = asked_late_by_a_gko_that_stops();
    assert_eq!(update(&g).step.asked_pipelines().unwrap(), &["a", "b", "c"]);
    let d = world.step(&mut g, 1);
    assert_eq!(
        d.corehub.as_ref().unwrap().asked.len(),
        3,
        "the new worker is told what the update asked"
    );
    world.step(&mut g, 1);
    assert_eq!(update(&g).step.name(), Drain, "still waiting for them");
    each_asked_once(&mut g, &mut world);
}

/// In Resume, a listing counts as telling that a pipeline of the ledger runs only when it was taken after
/// Resume began or after GKO's own exit request for it: one taken at the very instant Resume began, with
/// no exit request accepted yet (the one that follows may fail), releases nothing, and the pipeline is
/// asked out.
#[test]
fn a_listing_from_the_instant_resume_began_releases_nothing_not_asked_out() {
    let (mut g, mut world) = drained_start(Hub::new(&["a"], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 1);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    world.step(&mut g, 2);
    world.until(&mut g, 13, Resume);
    let since = update(&g).step.since().clone();
    assert_eq!(status(&g).paused_pipelines, ["a"]);
    assert_eq!(world.hub.exits.len(), 0, "{:?}", world.hub.exits);
    world.hub.report.exits = Default::default();
    world.hub.report.listing = Some(Listing {
        at: since.clone(),
        result: Ok(std::sync::Arc::new(vec![Pipeline {
            id: "a".into(),
            is_in_maintenance_mode: false,
        }])),
    });
    let d = world.decide(&g, &since);
    assert_eq!(d.status.paused_pipelines, ["a"], "still owed");
    assert!(
        d.status
            .update
            .as_ref()
            .unwrap()
            .resumed_pipelines
            .is_empty()
    );
    assert_eq!(
        d.corehub.map(|w| w.exit.to_vec()),
        Some(vec![PipelineId::from("a")]),
        "asked out"
    );
    // Nor does a listing fetched at the very instant Core Hub accepted the exit request: it is not after it.
    world.hub.report.exits.insert("a".into(), since.clone());
    let d = world.decide(&g, &since);
    assert_eq!(d.status.paused_pipelines, ["a"], "still owed");
}

/// A GKO taking over during Resume lists before it asks: the pipelines the GKO before it took out of
/// maintenance mode are running and are not asked out a second time; one still in maintenance mode
/// (its request not sent yet) is asked out, once. Its worker knows nothing of this update: it is new, or
/// it worked for an earlier update (when this GKO led before), whose pipelines it asked in.
#[test]
fn a_gko_taking_over_during_resume_asks_each_pipeline_out_once() {
    let earlier = Report {
        epoch: "update/1/1700000000".into(),
        entered: 3,
        ..Default::default()
    };
    for worker in [Report::default(), earlier] {
        let (mut g, mut world) =
            drained_start(Hub::new(&["a", "b", "c"], &[]), serde_json::json!({}));
        world.until(&mut g, 1, CoreHub);
        world.step(&mut g, 1);
        world.roll_out(&g, &["core-hub", "agent-mssql"]);
        world.step(&mut g, 2);
        world.until(&mut g, 13, Resume);
        assert_eq!(world.hub.exits.len(), 0, "{:?}", world.hub.exits);
        // The first GKO asks them out; Core Hub applies a and b, and c's request is lost with the GKO.
        let d = world.step(&mut g, 13);
        assert_eq!(d.corehub.as_ref().unwrap().exit.len(), 3);
        world.hub.pipelines.insert("c".into(), true);
        world.hub.exits.remove("c");
        take_over_in_resume(&mut g, &mut world, &["a", "b", "c"], worker.clone(), 14);
        to_the_end(&mut g, &mut world, 14..100, true);
        assert_eq!(
            world.hub.exits,
            [("a".into(), 1), ("b".into(), 1), ("c".into(), 1)].into(),
            "each pipeline asked out once ({worker:?})"
        );
        assert!(world.hub.in_maintenance().is_empty());
        assert!(status(&g).paused_pipelines.is_empty());
    }
}

/// A new GKO takes over in Resume at second `now`: the status owes `owed`, its worker's report is
/// `worker`; its first decision asks nothing out before it has listed.
fn take_over_in_resume(
    g: &mut GluesyncPlatform,
    world: &mut World,
    owed: &[&str],
    worker: Report,
    now: i64,
) {
    let owed: Vec<PipelineId> = owed.iter().map(|&id| id.into()).collect();
    g.status.as_mut().unwrap().paused_pipelines = owed.into();
    world.hub.report = worker;
    world.hub.entered.clear();
    let d = world.step(g, now);
    assert!(
        d.corehub.as_ref().unwrap().exit.is_empty(),
        "asked out before it listed: {:?}",
        d.corehub
    );
}

/// After a drain timeout too, a GKO taking over in Resume lists before it asks: a pipeline the drain saw
/// in maintenance mode and the GKO before it took out is not asked out again; one the drain never saw
/// there (watched as late: its request may still land) is asked out by the new GKO as well.
#[test]
fn a_gko_taking_over_in_resume_after_a_drain_timeout_asks_again_only_the_late_ones() {
    let mut hub = Hub::new(&["a", "b"], &[]);
    hub.enter_delay = 100;
    let (mut g, mut world) = drained_start(hub, serde_json::json!({"drainTimeoutSeconds": 5}));
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(world.hub.enters.len(), 2, "both asked in");
    // a's request lands at once, and a listing shows it; b's is still on its way at the timeout.
    world.hub.pending.retain(|(id, ..)| id.as_str() != "a");
    world.hub.pipelines.insert("a".into(), true);
    world.step(&mut g, 2);
    assert_eq!(
        update(&g).step.name(),
        Drain,
        "b is not in maintenance mode"
    );
    let events = world.until(&mut g, 6, Resume);
    assert!(reasons(&events).contains(&"DrainTimeout"), "{events:?}");
    assert_eq!(
        status(&g)
            .late_maintenance
            .as_ref()
            .map(|l| l.pipelines.to_vec()),
        Some(vec![PipelineId::from("b")])
    );
    // The first GKO asks both out and stops.
    let d = world.step(&mut g, 6);
    assert_eq!(d.corehub.as_ref().unwrap().exit.len(), 2);
    assert!(world.hub.in_maintenance().is_empty());
    take_over_in_resume(&mut g, &mut world, &["a", "b"], Report::default(), 7);
    to_the_end(&mut g, &mut world, 7..100, false);
    assert_eq!(
        world.hub.exits,
        [("a".into(), 1), ("b".into(), 2)].into(),
        "a once; b, watched as late, by each GKO"
    );
    assert!(world.hub.in_maintenance().is_empty());
}

/// An update with no running pipeline pauses and resumes none, and says nothing of resuming.
#[test]
fn an_update_with_no_running_pipeline_says_none_resumed() {
    let (mut g, mut world) = drained_start(Hub::new(&[], &["user-paused"]), serde_json::json!({}));
    let mut events = world.until(&mut g, 1, CoreHub);
    events.extend(world.step(&mut g, 1).events);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    events.extend(to_the_end(&mut g, &mut world, 2..100, true));
    let reasons = reasons(&events);
    assert!(reasons.contains(&"UpdateSucceeded"), "{reasons:?}");
    assert!(
        !reasons.contains(&"PipelinesResumed") && !reasons.contains(&"PipelinesPaused"),
        "{reasons:?}"
    );
    assert!(world.hub.enters.is_empty() && world.hub.exits.is_empty());
    assert_eq!(world.hub.in_maintenance(), ["user-paused"]);
}

#[test]
fn a_drain_written_without_its_record_of_asked_pipelines_asks_none_of_the_ledgers_again() {
    // The GKO that asked was a release that kept no record of what Drain asked (0.3.0): this GKO reads
    // a Drain without askedPipelines.
    let (mut g, mut world) = asked_late_by_a_gko_that_stops();
    assert_eq!(status(&g).paused_pipelines, ["a", "b", "c"]);
    let mut older = serde_json::to_value(&update(&g).step).unwrap();
    assert!(older.get("askedPipelines").is_some());
    older.as_object_mut().unwrap().remove("askedPipelines");
    g.status.as_mut().unwrap().update.as_mut().unwrap().step =
        serde_json::from_value(older).unwrap();
    assert_eq!(update(&g).step.asked_pipelines(), None);
    let d = world.step(&mut g, 1);
    assert_eq!(
        d.corehub.as_ref().unwrap().asked.len(),
        3,
        "the ledger's pipelines count as asked"
    );
    assert_eq!(update(&g).step.asked_pipelines().unwrap(), &["a", "b", "c"]);
    each_asked_once(&mut g, &mut world);
}

#[test]
fn a_drain_just_entered_writes_its_record_even_empty() {
    let (mut g, mut world) = drained_start(Hub::new(&[], &[]), serde_json::json!({}));
    let mut seen = false;
    for now in 0..3 {
        world.step(&mut g, now);
        if update(&g).step.name() == Drain {
            let written = serde_json::to_value(&update(&g).step).unwrap();
            assert_eq!(written["askedPipelines"], serde_json::json!([]));
            seen = true;
        }
    }
    assert!(seen, "the update went through Drain");
}

#[test]
fn a_late_maintenance_request_after_a_drain_timeout_is_resumed() {
    // Core Hub applies maintenance requests 8 s late; the drain gives up after 5 s.
    let mut hub = Hub::new(&["a", "b", "c"], &[]);
    hub.enter_delay = 8;
    let (mut g, mut world) = drained_start(hub, serde_json::json!({"drainTimeoutSeconds": 5}));
    let mut events = vec![];
    for now in 1..=5 {
        events.extend(world.step(&mut g, now).events);
    }
    events.extend(world.until(&mut g, 6, Resume));
    assert!(reasons(&events).contains(&"DrainTimeout"), "{events:?}");
    let late = status(&g)
        .late_maintenance
        .clone()
        .expect("the late ones are watched");
    assert_eq!(late.pipelines, ["a", "b", "c"]);
    // Every pipeline gets an exit request although Core Hub lists them running.
    world.step(&mut g, 6);
    world.step(&mut g, 6);
    assert_eq!(world.hub.exits.len(), 3);
    world.until(&mut g, 6, Finish);
    world.step(&mut g, 6);
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().result,
        UpdateResult::Refused
    );
    assert!(status(&g).paused_pipelines.is_empty());
    // Only watched, none owed: nothing is said to be left in maintenance mode.
    let d = world.step(&mut g, 7);
    assert!(
        !reasons(&d.events).contains(&"PipelinesNotResumed"),
        "{:?}",
        d.events
    );
    assert!(
        !status(&g)
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("not resumed yet"),
        "{:?}",
        status(&g).message
    );
    // The enters land at 9 s: GKO sees them and resumes them again.
    for now in 9..12 {
        world.step(&mut g, now);
    }
    assert!(
        world.hub.in_maintenance().is_empty(),
        "{:?}",
        world.hub.pipelines
    );
    assert_eq!(
        world.hub.exits.values().copied().collect::<Vec<_>>(),
        [2, 2, 2]
    );
    // The watch ends, and with it the finalizer.
    let d = world.step(&mut g, 6 + 61);
    assert!(status(&g).late_maintenance.is_none());
    assert!(status(&g).paused_pipelines.is_empty());
    assert!(
        d.actions.contains(&Action::RemoveFinalizer),
        "{:?}",
        d.actions
    );
}

/// Core Hub is updated, then goes down just as the pipelines wait to resume (drain timeout 30 s):
/// the update and the pipelines as Resume begins, at 12 s.
fn core_hub_down_in_resume() -> (GluesyncPlatform, World) {
    let (mut g, mut world) = drained_start(
        Hub::new(&["a", "b"], &[]),
        serde_json::json!({"drainTimeoutSeconds": 30}),
    );
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 1);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    world.step(&mut g, 2);
    world.hub.down = true;
    world.until(&mut g, 12, Resume);
    (g, world)
}

#[test]
fn resume_waits_for_core_hub_and_leftovers_are_resumed_between_updates() {
    let (mut g, mut world) = core_hub_down_in_resume();
    for now in 13..20 {
        world.step(&mut g, now);
        assert_eq!(update(&g).step.name(), Resume, "waits for Core Hub");
    }
    assert!(
        status(&g)
            .message
            .as_deref()
            .unwrap()
            .contains("cannot be reached")
    );
    // Past Resume's deadline the update goes on; the modules roll; the result says what is left.
    let events = world.until(&mut g, 43, Modules);
    assert!(reasons(&events).contains(&"PipelinesNotResumed"));
    // The update says it once; the rest of it is the update's, not the words between updates.
    let mut events = world.step(&mut g, 60).events;
    world.roll_out(&g, &["chronos"]);
    events.extend(world.step(&mut g, 60).events);
    events.extend(world.until(&mut g, 71, Finish));
    events.extend(world.step(&mut g, 71).events);
    assert!(
        !reasons(&events).contains(&"PipelinesNotResumed"),
        "{events:?}"
    );
    let s = status(&g);
    assert_eq!(
        s.last_attempt.as_ref().unwrap().result,
        UpdateResult::Degraded
    );
    assert_eq!(s.paused_pipelines, ["a", "b"]);
    // The history says how long each step took: Resume waited out its 30 s deadline.
    let steps = &s.history[0].steps;
    assert_eq!(
        steps.iter().map(|t| t.step).collect::<Vec<_>>(),
        [Preflight, Snapshot, Drain, CoreHub, Resume, Modules]
    );
    let resume = steps.iter().find(|t| t.step == Resume).unwrap().seconds;
    assert!((30..=32).contains(&resume), "{steps:?}");
    let whole = s.history[0].finished_at.0.as_second()
        - s.history[0].started_at.as_ref().unwrap().0.as_second();
    assert!(steps.iter().map(|t| t.seconds).sum::<i64>() <= whole);
    // Between updates, GKO keeps at it, and says so: a Warning when it begins, not at every look.
    let d = world.step(&mut g, 72);
    assert!(d.corehub.as_ref().is_some_and(|w| w.exit.len() == 2));
    let warned = |d: &Decision| {
        d.events
            .iter()
            .filter(|e| e.warning && e.reason == "PipelinesNotResumed")
            .count()
    };
    assert_eq!(warned(&d), 1, "{:?}", d.events);
    assert_eq!(warned(&world.step(&mut g, 72)), 0, "said once");
    assert!(!d.actions.contains(&Action::RemoveFinalizer));
    let ready = status(&g)
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "PipelinesNotResumed")
    );
    // Core Hub is back: they are resumed, and the finalizer goes.
    world.hub.down = false;
    let mut events = vec![];
    for now in 73..76 {
        let d = world.step(&mut g, now);
        events.extend(d.events);
        if d.actions.contains(&Action::RemoveFinalizer) {
            break;
        }
    }
    assert!(world.hub.in_maintenance().is_empty());
    assert!(status(&g).paused_pipelines.is_empty());
    assert!(reasons(&events).contains(&"PipelinesResumed"), "{events:?}");
    assert!(g.metadata.finalizers.is_none());
}

#[test]
fn leftovers_are_asked_out_while_the_modules_roll() {
    let (mut g, mut world) = core_hub_down_in_resume();
    world.until(&mut g, 43, Modules);
    assert_eq!(status(&g).paused_pipelines, ["a", "b"], "left by Resume");
    // Core Hub is back while Chronos rolls out: GKO asks the leftovers out then, not after the update.
    world.hub.down = false;
    let d = world.step(&mut g, 60);
    assert_eq!(update(&g).step.name(), Modules, "Chronos still rolls");
    assert!(!d.again);
    let exit = d
        .corehub
        .as_ref()
        .map(|w| w.exit.clone())
        .unwrap_or_default();
    assert_eq!(exit, ["a", "b"], "{:?}", d.corehub);
    world.step(&mut g, 61);
    assert!(
        world.hub.in_maintenance().is_empty(),
        "{:?}",
        world.hub.pipelines
    );
    assert_eq!(update(&g).step.name(), Modules);
}

#[test]
fn deleting_the_platform_during_drain_resumes_and_lets_it_go() {
    let mut hub = Hub::new(&["a", "b"], &[]);
    hub.enter_delay = 100; // they never reach maintenance mode before the deletion
    let (mut g, mut world) = drained_start(hub, serde_json::json!({}));
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(status(&g).paused_pipelines.len(), 2);
    g.metadata.deletion_timestamp = Some(at(2));
    // Someone changes a module the update had not reached: it is still "update refused", not GKO's own
    // image changed.
    world
        .workloads
        .iter_mut()
        .find(|w| w.name == "chronos")
        .unwrap()
        .image = "molo17/gluesync-chronos:0.3.1".into();
    let events = world.until(&mut g, 2, Finish);
    assert!(reasons(&events).contains(&"UpdateCancelled"), "{events:?}");
    assert_eq!(world.hub.exits.len(), 2, "both asked out");
    world.step(&mut g, 2);
    // Core Hub was never changed: the update is Refused (Failed means Core Hub was rolled back), and the
    // history's `to` is the version that still runs.
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().result,
        UpdateResult::Refused
    );
    let entry = &status(&g).history[0];
    assert_eq!(
        (entry.from.as_deref(), entry.to.as_deref()),
        (Some("2.3.2.1"), Some("2.3.2.1"))
    );
    assert_eq!(
        result_of(&g, "chronos").message.as_deref(),
        Some("update refused")
    );
    // Their requests may still land: the platform stays while the late-maintenance watch runs
    // (drainTimeoutSeconds, 300 s, from the deletion), and goes when it ends.
    let d = world.step(&mut g, 3);
    assert!(!d.actions.contains(&Action::RemoveFinalizer));
    assert_eq!(
        status(&g)
            .late_maintenance
            .as_ref()
            .map(|l| l.pipelines.len()),
        Some(2)
    );
    let d = world.step(&mut g, 301);
    assert!(!d.actions.contains(&Action::RemoveFinalizer));
    let message = status(&g).message.clone().unwrap_or_default();
    assert!(
        message.contains("is being deleted; GKO keeps it until")
            && message.contains("any of 2 pipelines"),
        "{message}"
    );
    let d = world.step(&mut g, 303);
    assert!(
        d.actions.contains(&Action::RemoveFinalizer),
        "{:?}",
        d.actions
    );
}

/// Deleted in Drain before any pipeline was asked in (Core Hub never answered the listing): no request
/// can land late, so nothing is watched for and the platform goes as soon as the update has ended.
#[test]
fn deleting_the_platform_before_anything_was_asked_lets_it_go_at_once() {
    let mut hub = Hub::new(&["a", "b"], &[]);
    hub.down = true;
    let (mut g, mut world) = drained_start(hub, serde_json::json!({}));
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(update(&g).step.name(), Drain);
    assert!(status(&g).paused_pipelines.is_empty(), "nothing recorded");
    assert!(world.hub.enters.is_empty(), "nothing asked");
    g.metadata.deletion_timestamp = Some(at(2));
    let events = world.until(&mut g, 2, Finish);
    assert!(reasons(&events).contains(&"UpdateCancelled"), "{events:?}");
    assert_eq!(status(&g).late_maintenance, None, "no request to watch for");
    world.step(&mut g, 2);
    assert!(status(&g).update.is_none(), "the update has ended");
    let d = world.step(&mut g, 3);
    assert!(
        d.actions.contains(&Action::RemoveFinalizer),
        "it goes at once, not after a watch: {:?}",
        d.actions
    );
}

/// A maintenance request Core Hub accepted before the deletion and applies after GKO asked the pipeline
/// out: the platform does not go before it lands, GKO asks the pipeline out again, and the platform goes
/// once every request landed and its pipeline runs.
#[test]
fn a_request_landing_after_a_deletion_mid_drain_is_asked_out_before_the_platform_goes() {
    let mut hub = Hub::new(&["a", "b"], &[]);
    hub.enter_delay = 10;
    let (mut g, mut world) = drained_start(hub, serde_json::json!({}));
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(status(&g).paused_pipelines.len(), 2);
    assert!(world.hub.in_maintenance().is_empty(), "not landed yet");
    // "a"'s request lands at once, and a listing shows it; "b"'s lands later.
    world.hub.pending.retain(|(id, ..)| id.as_str() != "a");
    world.hub.pipelines.insert("a".into(), true);
    world.step(&mut g, 1);
    g.metadata.deletion_timestamp = Some(at(2));
    world.step(&mut g, 2);
    // Only the request not seen landed is watched for.
    assert_eq!(
        status(&g)
            .late_maintenance
            .as_ref()
            .map(|l| l.pipelines.to_vec()),
        Some(vec![PipelineId::from("b")])
    );
    world.until(&mut g, 2, Finish);
    world.step(&mut g, 2);
    assert_eq!(world.hub.exits.len(), 2, "both asked out");
    let mut gone = false;
    for t in 3..320 {
        let d = world.step(&mut g, t);
        if d.actions.contains(&Action::RemoveFinalizer) {
            assert!(
                world.hub.in_maintenance().is_empty(),
                "at {t} s the platform goes with {:?} in maintenance mode",
                world.hub.in_maintenance()
            );
            assert!(t > 11, "it went at {t} s, before the requests landed");
            // Both landed and resumed: nothing is left to watch for, and it need not wait for the
            // watch's end (300 s).
            assert!(t < 60, "it went at {t} s");
            gone = true;
            break;
        }
    }
    assert!(gone, "the platform never went");
    // "a" once; "b" before its request landed, and again once it had.
    assert_eq!(
        world.hub.exits.get("b"),
        Some(&2),
        "asked out again once landed: {:?}",
        world.hub.exits
    );
    assert_eq!(world.hub.exits.get("a"), Some(&1));
}

#[test]
fn deleting_the_platform_during_core_hub_puts_core_hub_back() {
    let (mut g, mut world) = drained_start(Hub::new(&["a"], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    let d = world.step(&mut g, 1);
    assert!(
        d.actions
            .iter()
            .any(|a| matches!(a, Action::SetImage { image, .. } if image.ends_with("2.3.2.2")))
    );
    g.metadata.deletion_timestamp = Some(at(2));
    let d = world.step(&mut g, 2);
    assert!(reasons(&d.events).contains(&"UpdateCancelled"));
    assert!(d.actions.iter().any(|a| matches!(a, Action::SetImage { name, image, .. } if name == "core-hub" && image.ends_with("2.3.2.1"))));
    // Core Hub runs its old image: resume, finish, the finalizer goes.
    world.until(&mut g, 3, Finish);
    world.step(&mut g, 3);
    assert!(world.hub.in_maintenance().is_empty());
    // Core Hub was rolled back: Failed, and the history says which version runs after it.
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().result,
        UpdateResult::Failed
    );
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().target.as_deref(),
        Some("2.3.2.2")
    );
    assert_eq!(status(&g).history[0].to.as_deref(), Some("2.3.2.1"));
    assert_eq!(
        result_of(&g, "chronos").message.as_deref(),
        Some("not attempted: Core Hub failed")
    );
    let d = world.step(&mut g, 4);
    assert!(d.actions.contains(&Action::RemoveFinalizer));
}

/// Deleted after the status entered CoreHub but before Core Hub's image was written: nothing to put
/// back, Core Hub is skipped (not left pending), the pipelines resume and the update is Refused.
#[test]
fn deleting_the_platform_before_core_hubs_image_is_written_skips_it() {
    let (mut g, mut world) = drained_start(Hub::new(&["a"], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    assert_eq!(planned(&g, "core-hub").state, ComponentState::Pending);
    g.metadata.deletion_timestamp = Some(at(2));
    let d = world.step(&mut g, 2);
    assert!(reasons(&d.events).contains(&"UpdateCancelled"));
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::SetImage { .. })),
        "{:?}",
        d.actions
    );
    assert_eq!(update(&g).step.name(), Resume);
    assert_eq!(planned(&g, "core-hub").state, ComponentState::Skipped);
    world.until(&mut g, 3, Finish);
    world.step(&mut g, 3);
    assert!(world.hub.in_maintenance().is_empty());
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().result,
        UpdateResult::Refused
    );
    // Said as not changed, not as "already at" its version.
    let core_hub = result_of(&g, "core-hub");
    assert_eq!(
        (core_hub.status, core_hub.message.as_deref()),
        (ComponentResultStatus::Skipped, Some("update refused"))
    );
    assert_eq!(world.workloads[0].image, "molo17/gluesync-core-hub:2.3.2.1");
}

#[test]
fn a_deleted_platform_waits_for_core_hub_only_so_long() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1", "drainTimeoutSeconds": 10}));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &["a"]));
    world.hub.down = true;
    g.status = Some(GluesyncPlatformStatus {
        paused_pipelines: vec!["a"].into(),
        ..Default::default()
    });
    g.metadata.deletion_timestamp = Some(at(0));
    let d = world.step(&mut g, 5);
    assert!(!d.actions.contains(&Action::RemoveFinalizer));
    let d = world.step(&mut g, 11);
    assert!(d.actions.contains(&Action::RemoveFinalizer));
    let warning = d
        .events
        .iter()
        .find(|e| e.reason == "PipelinesNotResumed")
        .unwrap();
    assert!(
        warning.warning && warning.message.contains(": a"),
        "{warning:?}"
    );
}

#[test]
fn core_hub_must_stay_ready_for_the_window_and_a_warm_up_restart_does_not_count() {
    let (mut g, mut world) = drained_start(Hub::new(&[], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    let d = world.step(&mut g, 2);
    assert!(d.actions.contains(&Action::SetImage {
        kind: WorkloadKind::StatefulSet,
        name: "core-hub".into(),
        container: "c".into(),
        image: "molo17/gluesync-core-hub:2.3.2.2".into(),
    }));
    assert_eq!(d.events[0].reason, "CoreHubPatched");
    // The new pod restarted once while warming up, then became ready.
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    world.workloads[0].pods[0].restarts = 1;
    world.step(&mut g, 3);
    assert_eq!(update(&g).step.name(), CoreHub, "the window has not passed");
    assert_eq!(
        planned(&g, "core-hub").stable.as_ref().unwrap().since,
        at(3)
    );
    // A restart inside the window starts it again.
    world.workloads[0].pods[0].restarts = 2;
    world.step(&mut g, 5);
    world.step(&mut g, 6);
    assert_eq!(
        planned(&g, "core-hub").stable.as_ref().unwrap().since,
        at(6)
    );
    let events = world.until(&mut g, 16, Resume);
    assert_eq!(events[0].reason, "CoreHubUpdated");
}

/// `at`, to the millisecond.

#[test]
fn the_stability_window_is_never_shorter_than_asked_across_a_second_boundary() {
    // Ready just before a second boundary (2.9 s), and exactly on one (3.0 s): a 10 s window passes at
    // 13.0 s in both, never at 12.x (which whole seconds of both times would have let through at 12.1).
    for ready in [2_900, 3_000] {
        let (mut g, mut world) = drained_start(Hub::new(&[], &[]), serde_json::json!({}));
        world.until(&mut g, 1, CoreHub);
        world.step(&mut g, 2);
        world.roll_out(&g, &["core-hub", "agent-mssql"]);
        world.step_at(&mut g, at_ms(ready));
        let since = planned(&g, "core-hub")
            .stable
            .as_ref()
            .unwrap()
            .since
            .clone();
        assert_eq!(
            since,
            at(3),
            "recorded as the API server keeps it, never earlier"
        );
        for early in [12_100, 12_999] {
            let d = world.step_at(&mut g, at_ms(early));
            assert_eq!(
                update(&g).step.name(),
                CoreHub,
                "{ready}: not yet at {early} ms"
            );
            let again = d.requeue.expect("a look again");
            assert!(
                again <= Duration::from_millis((13_000 - early) as u64 + 10),
                "{again:?}"
            );
        }
        let d = world.step_at(&mut g, at_ms(13_000));
        assert!(
            d.events.iter().any(|e| e.reason == "CoreHubUpdated"),
            "{ready}: passed at 13.0 s: {:?}",
            d.events
        );
    }
}

#[test]
fn a_spec_changed_mid_update_is_named_right_and_the_next_update_is_pending_not_stalled() {
    let (mut g, mut world) = drained_start(Hub::new(&[], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 2);
    // The spec moves on while Core Hub 2.3.2.2 rolls out.
    g.spec.version = "2.3.2.1".into();
    g.metadata.generation = Some(3);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    world.step(&mut g, 3);
    assert_eq!(
        status(&g).message.as_deref(),
        Some("waiting for Core Hub 2.3.2.2 to stay ready for 10 s")
    );
    let events = world.until(&mut g, 14, Resume);
    assert_eq!(events[0].reason, "CoreHubUpdated");
    assert_eq!(
        events[0].message,
        "Core Hub 2.3.2.2 passed its stability check"
    );
    // The update of generation 2 ends; the status it ends with says the next one is pending.
    world.roll_out(&g, &["chronos"]);
    let mut ended = None;
    for now in 15..40 {
        let d = world.step(&mut g, now);
        if d.status.update.is_none() {
            ended = Some(d.status);
            break;
        }
        world.roll_out(&g, &["chronos"]);
    }
    let s = ended.expect("the update ends");
    assert_ne!(
        s.phase,
        Some(Phase::Updating),
        "no phase Updating without an update"
    );
    let cond = |t: &str| s.conditions.iter().find(|c| c.type_ == t).unwrap().clone();
    assert_eq!(cond("Stalled").status, "False", "{:?}", s.conditions);
    assert_eq!(cond("Reconciling").status, "True");
    // And the next update starts from it.
    let d = world.step(&mut g, 41);
    assert_eq!(d.status.update.as_ref().map(|u| u.generation), Some(3));
}

#[test]
fn a_crash_loop_fails_core_hub_at_once_and_rolls_it_back() {
    let (mut g, mut world) = drained_start(Hub::new(&["a"], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 2);
    let old = world.workloads.clone();
    world.workloads[0].image = "molo17/gluesync-core-hub:2.3.2.2".into();
    world.workloads[0].ready = false;
    world.workloads[0].pods[0] = PodView {
        waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
        ..pod("core-hub", "molo17/gluesync-core-hub:2.3.2.2", false, 1)
    };
    let d = world.step(&mut g, 3);
    assert_eq!(d.events[0].reason, "CoreHubFailed");
    assert_eq!(update(&g).step.name(), CoreHubRollback);
    assert_eq!(
        update(&g).outcome.as_ref().unwrap().result,
        UpdateResult::Failed
    );
    // The rollback sets the old image back and deletes the stuck pod of the failed revision.
    let d = world.step(&mut g, 4);
    assert!(d.actions.contains(&Action::SetImage {
        kind: WorkloadKind::StatefulSet,
        name: "core-hub".into(),
        container: "c".into(),
        image: "molo17/gluesync-core-hub:2.3.2.1".into(),
    }));
    assert!(d.actions.contains(&Action::DeletePod("core-hub-0".into())));
    // Back and ready: resume, then finish Failed without touching the modules.
    world.workloads = old;
    world.until(&mut g, 5, Finish);
    let d = world.step(&mut g, 7);
    let s = status(&g);
    assert_eq!(s.phase, Some(Phase::Failed));
    let a = s.last_attempt.as_ref().unwrap();
    assert_eq!(a.result, UpdateResult::Failed);
    let r = |n: &str| a.results.iter().find(|r| r.name == n).unwrap().status;
    assert_eq!(r("core-hub"), ComponentResultStatus::RolledBack);
    assert_eq!(r("chronos"), ComponentResultStatus::Skipped);
    assert_eq!(d.events.last().unwrap().reason, "UpdateFailed");
    assert!(world.hub.in_maintenance().is_empty());
    assert_eq!(a.resumed_pipelines, ["a"]);
}

#[test]
fn history_keeps_the_newest_ten() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.1",
        "modules": {"chronos": "0.3.3"},
        "stabilityWindowSeconds": 0,
    }));
    let entry = |i: usize| HistoryEntry {
        generation: None,
        from: None,
        to: Some(format!("old-{i}")),
        result: UpdateResult::Succeeded,
        message: String::new(),
        request_id: None,
        requested_by: None,
        started_at: None,
        finished_at: at(-100),
        previous_images: Default::default(),
        steps: vec![],
    };
    g.status = Some(GluesyncPlatformStatus {
        history: (0..10).map(entry).collect(),
        ..Default::default()
    });
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.until(&mut g, 0, Modules);
    world.roll_out(&g, &["chronos"]);
    world.until(&mut g, 100, Finish);
    world.step(&mut g, 100);
    let s = status(&g);
    assert!(s.update.is_none());
    assert_eq!(s.history.len(), HISTORY_LIMIT);
    assert_eq!(s.history[0].to, None, "modules only");
    assert_eq!(s.history[1].to.as_deref(), Some("old-0"));
    assert_eq!(
        s.history[0]
            .previous_images
            .get("chronos")
            .map(String::as_str),
        Some("molo17/gluesync-chronos:0.3.2")
    );
}

#[test]
fn every_step_serializes_flat_with_its_name() {
    let step = Step::Drain {
        since: at(0),
        deadline: at(300),
        asked_pipelines: Some(vec![PipelineId::from("a")].into()),
    };
    let v = serde_json::to_value(&step).unwrap();
    assert_eq!(v["step"], "Drain");
    assert_eq!(v["deadline"], serde_json::to_value(at(300)).unwrap());
    // Drain's data keeps the place it had in `status.update` (a status an earlier GKO wrote reads the
    // same).
    assert_eq!(v["askedPipelines"], serde_json::json!(["a"]));
    let back: Step = serde_json::from_value(v).unwrap();
    assert_eq!(back, step);
    // Another step has no such field: a Drain's record goes with it.
    let resume: Step = serde_json::from_value(serde_json::json!({
        "step": "Resume", "since": at(0), "deadline": at(300), "askedPipelines": ["a"],
    }))
    .unwrap();
    assert!(resume.asked_pipelines().is_none());
}

#[test]
fn who_asked_is_recorded_and_named() {
    // The Core Hub UI's manager asked, through the Conductor API.
    let mut g = platform(
        serde_json::json!({"version": "2.3.2.2", "requestID": "ui-9", "stabilityWindowSeconds": 0}),
    );
    g.metadata.annotations = Some(
        [(
            crate::api::REQUEST_ANNOTATION.to_string(),
            r#"{"id":"ui-9","channel":"ga","username":"manager","role":"MANAGER"}"#.to_string(),
        )]
        .into(),
    );
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    let events = world.until(&mut g, 0, Drain);
    assert!(
        events[0]
            .message
            .contains("asked by manager (MANAGER) from the Core Hub UI"),
        "{events:?}"
    );
    world.until(&mut g, 0, CoreHub);
    world.step(&mut g, 1);
    world.roll_out(&g, &["core-hub", "agent-mssql", "chronos"]);
    world.until(&mut g, 20, Finish);
    world.step(&mut g, 20);
    let s = status(&g);
    let by = s
        .last_attempt
        .as_ref()
        .unwrap()
        .requested_by
        .clone()
        .unwrap();
    assert_eq!(
        (by.username.as_deref(), by.role.as_deref(), by.via),
        (Some("manager"), Some("MANAGER"), crate::api::RequestVia::Ui)
    );
    assert_eq!(s.history[0].requested_by.as_ref(), Some(&by));

    // A change of the spec: via spec, no user.
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let events = World::new(Some(catalog()), Hub::new(&[], &[])).until(&mut g, 0, Drain);
    assert!(
        events[0]
            .message
            .contains("asked by a change of the GluesyncPlatform")
    );
    assert_eq!(
        update(&g).requested_by.as_ref().unwrap().via,
        crate::api::RequestVia::Spec
    );
}

#[test]
fn a_secret_gko_may_not_read_stalls_and_starts_nothing() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2",
        "coreHub": {"credentialsSecret": "db-password"},
    }));
    let w = install();
    let report = Report::default();
    let access = crate::update::access::Access::from_lists("corehub-credentials", "");
    let problem = access.problem(&g, &w, "ns");
    assert_eq!(problem.as_ref().map(|p| p.reason), Some("SecretNotAllowed"));
    let d = decide(
        &g,
        &Observed {
            access_problem: problem,
            ..observed(&w, &report, at(0))
        },
    );
    assert!(d.status.update.is_none(), "no update starts");
    assert!(d.corehub.is_none());
    let stalled = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "SecretNotAllowed")
    );
    assert!(d.status.message.as_deref().unwrap().contains("db-password"));

    // A URL elsewhere is refused the same way; the Core Hub workload's own Service is always allowed.
    g.spec.core_hub.credentials_secret = Some("corehub-credentials".into());
    g.spec.core_hub.url = Some("https://collector.evil.io".into());
    assert_eq!(
        access.problem(&g, &w, "ns").map(|p| p.reason),
        Some("CoreHubURLNotAllowed")
    );
    g.spec.core_hub.url = Some("https://core-hub.ns.svc:1717".into());
    assert_eq!(access.problem(&g, &w, "ns"), None);
}

/// A disaster-recovery setup changes workloads too: while GKO may not work on the platform it does not
/// start; once it may, it does.
#[test]
fn a_stalled_platform_starts_no_disaster_recovery_setup() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.1",
        "coreHub": {"credentialsSecret": "db-password"},
        "disasterRecovery": {"role": "primary", "peerAddress": "dr.example.com"},
    }));
    g.metadata.finalizers = None;
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    world.dr.secret = crate::update::disaster::SecretState::Present { made_by_gko: false };
    let access = crate::update::access::Access::from_lists("corehub-credentials", "");
    world.access = access.problem(&g, &world.workloads, "ns");
    assert_eq!(
        world.access.as_ref().map(|p| p.reason),
        Some("SecretNotAllowed")
    );
    for t in 0..3 {
        let d = world.step(&mut g, t);
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        assert!(status(&g).disaster_recovery.is_none());
    }
    // The Secret allowed: the setup starts, and GKO's finalizer goes on first (a setup in place is put
    // back before the platform goes).
    world.access = None;
    let d = world.step(&mut g, 3);
    assert_eq!(
        status(&g).disaster_recovery.as_ref().map(|dr| dr.phase),
        Some(crate::api::DisasterRecoveryPhase::SettingUp),
        "{:?}",
        status(&g).disaster_recovery
    );
    assert_eq!(
        d.actions.first(),
        Some(&Action::AddFinalizer),
        "{:?}",
        d.actions
    );
    assert_eq!(g.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
}

// ---------------------------------------------------------------------------------------------------
// GKO's own update, last.

const GKO_OLD: &str = "molo17/gluesync-operator:0.1.0";
const GKO_NEW: &str = "molo17/gluesync-operator:0.2.0";

/// An update that pins GKO's own Deployment to 0.2.0, run to its end by the old GKO.
fn self_update_scheduled(spec: serde_json::Value) -> (GluesyncPlatform, World, Vec<Event>) {
    let mut base = serde_json::json!({
        "version": "2.3.2.1",
        "modules": {"gluesync-operator": "0.2.0"},
        "stabilityWindowSeconds": 5,
        "stabilityTimeoutSeconds": 60,
    });
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    let mut g = platform(base);
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    add_gko(&mut world, GKO_OLD);
    world.me = Some(GKO_OLD.into());
    let mut events = world.until(&mut g, 0, Finish);
    events.extend(world.step(&mut g, 100).events);
    (g, world, events)
}

/// GKO's own Deployment, running `image`, among the world's workloads.
fn add_gko(world: &mut World, image: &str) {
    let mut gko = workload("gluesync-operator", "operator", image);
    gko.kind = WorkloadKind::Deployment;
    world.workloads.push(gko);
}

fn gko_mut(world: &mut World) -> &mut Workload {
    world
        .workloads
        .iter_mut()
        .find(|w| w.name == "gluesync-operator")
        .unwrap()
}

fn gko_workload(world: &World) -> &Workload {
    world
        .workloads
        .iter()
        .find(|w| w.name == "gluesync-operator")
        .unwrap()
}

fn gko_entry(g: &GluesyncPlatform) -> ComponentResultStatus {
    status(g)
        .last_attempt
        .as_ref()
        .unwrap()
        .results
        .iter()
        .find(|r| r.name == "gluesync-operator")
        .unwrap()
        .status
}

/// The new GKO's pod comes up (or not) on the image the Deployment asks for.
fn gko_pod(world: &mut World, ready: bool) {
    let w = gko_mut(world);
    w.pods[0].image = w.image.clone();
    w.pods[0].ready = ready;
    w.ready = ready;
}

#[test]
fn gko_updates_itself_after_the_update_and_the_new_gko_reports() {
    let (mut g, mut world, events) = self_update_scheduled(serde_json::json!({}));
    assert!(
        reasons(&events).contains(&"OperatorUpdateScheduled"),
        "{events:?}"
    );
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded
    );
    assert_eq!(gko_entry(&g), ComponentResultStatus::Scheduled);
    assert_eq!(
        status(&g).self_update.as_ref().map(|s| s.phase),
        Some(SelfUpdatePhase::Scheduled)
    );
    assert_eq!(gko_workload(&world).image, GKO_OLD, "not during the update");
    assert_eq!(
        gko_workload(&world).self_update_mark.as_deref(),
        Some("Scheduled")
    );

    // No update runs: the old GKO changes its own image.
    let d = world.step(&mut g, 101);
    assert_eq!(reasons(&d.events), vec!["OperatorRestarting"]);
    assert_eq!(gko_workload(&world).image, GKO_NEW);
    assert_eq!(
        d.requeue,
        Some(std::time::Duration::from_millis(60_010)),
        "it looks again when the stability timeout (60 s) has passed"
    );
    assert_eq!(
        gko_workload(&world).self_update_mark.as_deref(),
        Some("RollingOut")
    );
    // The new pod comes up; the old one goes; the new GKO leads and checks that it stays ready.
    gko_pod(&mut world, true);
    world.me = Some(GKO_NEW.into());
    let d = world.step(&mut g, 103);
    assert!(d.events.is_empty(), "{:?}", d.events);
    assert_eq!(gko_entry(&g), ComponentResultStatus::Scheduled);
    let d = world.step(&mut g, 107);
    assert!(
        d.events.is_empty(),
        "ready since 103: the window runs to 108"
    );
    let d = world.step(&mut g, 109);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdated"]);
    assert_eq!(gko_entry(&g), ComponentResultStatus::Ok);
    assert!(status(&g).self_update.is_none());
    assert_eq!(
        gko_workload(&world).self_update_mark,
        None,
        "the annotation is gone"
    );
    assert!(
        status(&g).history[0]
            .message
            .contains("GKO updated to 0.2.0")
    );
    // And nothing more happens.
    let d = world.step(&mut g, 200);
    assert!(
        d.events.is_empty() && d.actions.is_empty(),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_new_gko_that_never_comes_up_is_rolled_back_by_the_old_one() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    gko_pod(&mut world, false);
    // The old GKO keeps leading and waits for the stability timeout.
    let d = world.step(&mut g, 150);
    assert!(d.events.is_empty());
    assert_eq!(gko_workload(&world).image, GKO_NEW);
    let d = world.step(&mut g, 162);
    assert_eq!(reasons(&d.events), vec!["OperatorRollingBack"]);
    assert_eq!(gko_workload(&world).image, GKO_OLD);
    assert_eq!(
        gko_workload(&world).self_update_mark.as_deref(),
        Some("RollingBack")
    );
    // The Deployment is back on the old pod.
    gko_pod(&mut world, true);
    let d = world.step(&mut g, 163);
    assert_eq!(reasons(&d.events), vec!["OperatorRolledBack"]);
    assert_eq!(gko_entry(&g), ComponentResultStatus::RolledBack);
    assert_eq!(gko_workload(&world).self_update_mark, None);
    assert!(status(&g).self_update.is_none());
}

#[test]
fn a_rollback_that_does_not_come_back_in_time_is_an_error() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    gko_pod(&mut world, false);
    world.step(&mut g, 162);
    gko_mut(&mut world).ready = false;
    let d = world.step(&mut g, 223);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateFailed"]);
    assert_eq!(gko_entry(&g), ComponentResultStatus::Error);
    assert_eq!(gko_workload(&world).self_update_mark, None);
}

#[test]
fn an_image_changed_by_hand_cancels_the_self_update() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    gko_mut(&mut world).image = "molo17/gluesync-operator:0.9.9".into();
    let d = world.step(&mut g, 102);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateCancelled"]);
    assert_eq!(gko_entry(&g), ComponentResultStatus::Skipped);
    assert_eq!(
        gko_workload(&world).image,
        "molo17/gluesync-operator:0.9.9",
        "left as set"
    );
    assert_eq!(gko_workload(&world).self_update_mark, None);
}

#[test]
fn a_self_update_turned_off_is_dropped_and_gitops_never_schedules_one() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    g.spec.self_update.enabled = false;
    let d = world.step(&mut g, 101);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateCancelled"]);
    assert_eq!(gko_workload(&world).image, GKO_OLD);
    assert_eq!(gko_workload(&world).self_update_mark, None);

    let (g, world, events) = self_update_scheduled(serde_json::json!({"updatePolicy": "gitops"}));
    assert!(
        !reasons(&events).iter().any(|r| r.starts_with("Operator")),
        "{events:?}"
    );
    assert!(status(&g).self_update.is_none());
    assert!(
        status(&g)
            .last_attempt
            .as_ref()
            .unwrap()
            .results
            .iter()
            .all(|r| r.name != "gluesync-operator")
    );
    assert_eq!(gko_workload(&world).image, GKO_OLD);
    assert_eq!(gko_workload(&world).self_update_mark, None);
}

/// Turned off while GKO's new image rolls out, GKO puts its own image back; turned off while it is only
/// scheduled, an image someone else set (even the new one) is left as it is.
#[test]
fn a_self_update_turned_off_while_rolling_out_puts_the_old_image_back() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    assert_eq!(gko_workload(&world).image, GKO_NEW, "rolling out");
    g.spec.self_update.enabled = false;
    let d = world.step(&mut g, 102);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateCancelled"]);
    assert_eq!(gko_workload(&world).image, GKO_OLD, "GKO's change undone");
    assert_eq!(gko_workload(&world).self_update_mark, None);

    // Rolling out, but the image is a third one somebody set: left.
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    gko_mut(&mut world).image = "molo17/gluesync-operator:0.9.9".into();
    g.spec.self_update.enabled = false;
    world.step(&mut g, 102);
    assert_eq!(gko_workload(&world).image, "molo17/gluesync-operator:0.9.9");

    // Scheduled, and somebody set the new image by hand: not GKO's change, left.
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    gko_mut(&mut world).image = GKO_NEW.into();
    g.spec.self_update.enabled = false;
    let d = world.step(&mut g, 101);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateCancelled"]);
    assert_eq!(gko_workload(&world).image, GKO_NEW, "left as set");
}

/// The new image landed without its mark (the mark is lost, or written by an older GKO): the mark is
/// written again and the rollout goes on; with the mark in place, nothing is written.
#[test]
fn a_rolling_out_deployment_without_its_mark_gets_it_back() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    let d = world.step(&mut g, 102);
    assert!(
        d.actions.is_empty() && d.events.is_empty(),
        "marked: nothing to write: {:?}",
        d.actions
    );
    gko_mut(&mut world).self_update_mark = None;
    let d = world.step(&mut g, 103);
    assert!(d.events.is_empty(), "{:?}", d.events);
    assert_eq!(gko_workload(&world).image, GKO_NEW);
    assert_eq!(
        gko_workload(&world).self_update_mark.as_deref(),
        Some("RollingOut")
    );
    assert_eq!(
        status(&g).self_update.as_ref().map(|s| s.phase),
        Some(SelfUpdatePhase::RollingOut)
    );
}

/// GKO goes only to a newer version of itself: a pin or a catalog entry at the version it runs moves it
/// nowhere, even to another registry.
#[test]
fn gko_moves_itself_only_to_a_newer_version() {
    let gko = workload("gluesync-operator", "operator", GKO_OLD);
    let at = |pin: Option<&str>| {
        let mut spec = serde_json::json!({"version": "2.3.2.1", "imageRegistry": "mirror.example"});
        if let Some(pin) = pin {
            spec["modules"] = serde_json::json!({"gluesync-operator": pin});
        }
        platform(spec)
    };
    let catalog =
        |v: &str| -> Catalog { [("gluesync-operator".to_string(), v.to_string())].into() };
    assert_eq!(
        super::selfupdate::target(&at(Some("0.1.0")), &gko, None),
        None
    );
    assert_eq!(
        super::selfupdate::target(&at(Some("0.1.1")), &gko, None).as_deref(),
        Some("mirror.example/gluesync-operator:0.1.1")
    );
    assert_eq!(
        super::selfupdate::target(&at(None), &gko, Some(&catalog("0.1.0"))),
        None
    );
    assert_eq!(
        super::selfupdate::target(&at(None), &gko, Some(&catalog("0.2.0"))).as_deref(),
        Some("mirror.example/gluesync-operator:0.2.0")
    );
}

/// The old GKO, still leading while its pod goes, never reports the new one's success: that is the new
/// GKO's to say, once it runs.
#[test]
fn the_old_gko_never_reports_the_new_ones_success() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    assert_eq!(world.me.as_deref(), Some(GKO_OLD));
    gko_pod(&mut world, true);
    world.step(&mut g, 104);
    let d = world.step(&mut g, 110);
    assert!(d.events.is_empty(), "{:?}", d.events);
    assert_eq!(
        status(&g).self_update.as_ref().map(|s| s.phase),
        Some(SelfUpdatePhase::RollingOut)
    );
    assert_eq!(gko_entry(&g), ComponentResultStatus::Scheduled);
    // The new GKO, leading next, reports it.
    world.me = Some(GKO_NEW.into());
    let d = world.step(&mut g, 111);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdated"]);
    assert_eq!(gko_entry(&g), ComponentResultStatus::Ok);
}

#[test]
fn a_gko_that_died_between_its_status_and_its_deployment_write_finishes_the_write() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    // The status says RollingOut; the Deployment write never happened.
    let w = gko_mut(&mut world);
    w.image = GKO_OLD.into();
    w.self_update_mark = Some("Scheduled".into());
    let d = world.step(&mut g, 102);
    assert!(d.events.is_empty(), "{:?}", d.events);
    assert_eq!(gko_workload(&world).image, GKO_NEW);
    assert_eq!(
        gko_workload(&world).self_update_mark.as_deref(),
        Some("RollingOut")
    );
    // A self-update that ended in the status but left its annotation: the annotation goes.
    g.status.as_mut().unwrap().self_update = None;
    let d = world.step(&mut g, 103);
    assert!(d.events.is_empty());
    assert_eq!(gko_workload(&world).self_update_mark, None);
}

#[test]
fn a_new_update_waits_while_gko_updates_itself() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    g.spec.version = "2.3.2.2".into();
    g.metadata.generation = Some(3);
    let d = world.step(&mut g, 102);
    assert!(
        d.status.update.is_none(),
        "no update starts during GKO's own"
    );
    assert!(!reasons(&d.events).contains(&"UpdateStarted"));
}

#[test]
fn a_gko_that_does_not_know_its_pod_still_ends_the_self_update() {
    // Ready on the new image: the stability check passes and GKO reports.
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    world.me = None;
    gko_pod(&mut world, true);
    assert!(
        world.step(&mut g, 104).events.is_empty(),
        "within the window"
    );
    let d = world.step(&mut g, 110);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdated"]);
    // Never ready: it puts the old image back.
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    world.me = None;
    gko_pod(&mut world, false);
    let d = world.step(&mut g, 162);
    assert_eq!(reasons(&d.events), vec!["OperatorRollingBack"]);
}

#[test]
fn a_new_gko_that_crash_loops_is_rolled_back_at_once() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    let w = gko_mut(&mut world);
    w.ready = false;
    w.pods.push(PodView {
        name: "gluesync-operator-new".into(),
        uid: "new".into(),
        image: GKO_NEW.into(),
        ready: false,
        waiting: Some(("CrashLoopBackOff".into(), "back-off 10s".into())),
        restarts: 3,
        node: None,
        dr_mark: None,
    });
    let d = world.step(&mut g, 110);
    assert_eq!(
        reasons(&d.events),
        vec!["OperatorRollingBack"],
        "long before the timeout"
    );
    assert!(
        d.events[0].message.contains("CrashLoopBackOff"),
        "{}",
        d.events[0].message
    );
    assert_eq!(gko_workload(&world).image, GKO_OLD);
}

#[test]
fn an_old_image_put_back_by_someone_else_drops_the_self_update() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    // A GitOps tool without the ignore rule puts the old image back; the mark stays.
    gko_mut(&mut world).image = GKO_OLD.into();
    let d = world.step(&mut g, 102);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateCancelled"]);
    assert_eq!(gko_entry(&g), ComponentResultStatus::Skipped);
    assert_eq!(gko_workload(&world).image, GKO_OLD, "not fought over");
    assert_eq!(gko_workload(&world).self_update_mark, None);
}

#[test]
fn an_image_write_that_never_lands_ends_at_the_timeout() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    // An admission policy refuses the new image: the status says RollingOut, the Deployment never changes.
    let d = decide(
        &g,
        &Observed {
            me: Some(GKO_OLD.into()),
            ..observed(&world.workloads, &world.hub.report.clone(), at(101))
        },
    );
    g.status = Some(d.status);
    assert_eq!(
        status(&g).self_update.as_ref().map(|s| s.phase),
        Some(SelfUpdatePhase::RollingOut)
    );
    let refused = |world: &World, g: &GluesyncPlatform, now| {
        decide(
            g,
            &Observed {
                me: Some(GKO_OLD.into()),
                ..observed(&world.workloads, &Report::default(), at(now))
            },
        )
    };
    let d = refused(&world, &g, 120);
    assert!(
        d.events.is_empty() && !d.actions.is_empty(),
        "written again"
    );
    let d = refused(&world, &g, 162);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateFailed"]);
    g.status = Some(d.status.clone());
    assert_eq!(gko_entry(&g), ComponentResultStatus::Error);
    assert!(status(&g).self_update.is_none());
    world.step(&mut g, 163);
    assert_eq!(gko_workload(&world).image, GKO_OLD);
}

#[test]
fn gko_upgraded_during_the_update_does_not_update_itself() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.1",
        "modules": {"gluesync-operator": "0.2.0"},
        "stabilityWindowSeconds": 0,
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    add_gko(&mut world, GKO_OLD);
    world.until(&mut g, 0, Finish);
    // helm upgrade of GKO while the update ran.
    gko_mut(&mut world).image = "molo17/gluesync-operator:0.3.0".into();
    let d = world.step(&mut g, 100);
    assert!(!reasons(&d.events).contains(&"OperatorUpdateScheduled"));
    assert!(status(&g).self_update.is_none());
    assert_eq!(gko_entry(&g), ComponentResultStatus::Skipped);
    assert_eq!(
        gko_workload(&world).image,
        "molo17/gluesync-operator:0.3.0",
        "left alone"
    );
}

#[test]
fn a_pin_never_takes_gko_back() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2",
        "modules": {"gluesync-operator": "0.2.0"},
        "stabilityWindowSeconds": 0,
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    let mut gko = workload(
        "gluesync-operator",
        "operator",
        "molo17/gluesync-operator:0.3.0",
    );
    gko.kind = WorkloadKind::Deployment;
    world.workloads.push(gko);
    world.until(&mut g, 0, Snapshot);
    assert!(
        update(&g)
            .components
            .iter()
            .all(|c| c.name != "gluesync-operator"),
        "a pin older than what runs plans nothing"
    );
}

#[test]
fn a_deleted_platform_starts_no_self_update_and_keeps_its_finalizer_while_one_runs() {
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    g.metadata.deletion_timestamp = Some(at(100));
    let d = world.step(&mut g, 101);
    assert_eq!(reasons(&d.events), vec!["OperatorUpdateCancelled"]);
    assert_eq!(gko_workload(&world).image, GKO_OLD);
    // One already rolling out holds the finalizer until it ends.
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    g.metadata.deletion_timestamp = Some(at(101));
    let d = world.step(&mut g, 102);
    assert!(
        !d.actions.contains(&Action::RemoveFinalizer),
        "{:?}",
        d.actions
    );
    // Also past drainTimeoutSeconds (300 s) after the deletion: the self-update has its own timeout.
    let d = world.step(&mut g, 101 + 300 + 50);
    assert!(
        g.status.as_ref().is_some_and(|s| s.self_update.is_some()),
        "still rolling out"
    );
    assert!(
        !d.actions.contains(&Action::RemoveFinalizer),
        "the finalizer stays until GKO's own update has ended: {:?}",
        d.actions
    );
}

#[test]
fn a_deleted_platform_gko_may_not_work_on_goes_once_the_pipelines_deadline_passed() {
    // GKO's own update is rolling out when the platform is deleted and its spec names a Secret this GKO
    // may not read: nothing more can be done, so the wait ends with the pipelines' deadline.
    let (mut g, mut world, _) = self_update_scheduled(serde_json::json!({}));
    world.step(&mut g, 101);
    g.metadata.deletion_timestamp = Some(at(101));
    world.access = Some(crate::api::Problem {
        reason: "SecretNotAllowed",
        message: "GKO's installation does not allow it to read Secret billing-db".into(),
    });
    let d = world.step(&mut g, 102);
    assert!(!d.actions.contains(&Action::RemoveFinalizer));
    let d = world.step(&mut g, 101 + 300 + 1);
    let_go_before(&d, "its own update");
}

#[test]
fn a_ui_request_naming_components_moves_only_those() {
    let request = |ids: &str| {
        let mut g = platform(serde_json::json!({
            "version": "2.3.2.1",
            "requestID": "ui-7",
            "modules": {"gluesync-operator": "0.2.0"},
        }));
        g.metadata.annotations = Some(
            [(
                crate::api::REQUEST_ANNOTATION.to_string(),
                format!(r#"{{"id":"ui-7","channel":"ga","ids":{ids}}}"#),
            )]
            .into(),
        );
        let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
        add_gko(&mut world, GKO_OLD);
        world.until(&mut g, 0, Snapshot);
        g
    };
    // GKO alone: Chronos, newer in the catalog, stays.
    let g = request(r#"["gluesync-operator"]"#);
    assert_eq!(planned(&g, "chronos").to_image, None, "not asked for");
    assert_eq!(
        planned(&g, "gluesync-operator").to_image.as_deref(),
        Some(GKO_NEW)
    );
    // Chronos alone: GKO stays, even pinned.
    let g = request(r#"["chronos"]"#);
    assert_eq!(
        planned(&g, "chronos").to_image.as_deref(),
        Some("molo17/gluesync-chronos:0.3.3")
    );
    assert!(
        update(&g)
            .components
            .iter()
            .all(|c| c.name != "gluesync-operator")
    );
    // Everything: both.
    let g = request("[]");
    assert!(planned(&g, "chronos").to_image.is_some());
    assert!(planned(&g, "gluesync-operator").to_image.is_some());
}

/// The preview of an update to `version` on `world` at second `now`, with the catalog's answer when
/// the engine asks for one (as `kubectl gluesync plan` does).
fn previewed(g: &GluesyncPlatform, world: &World, version: &str, now: i64) -> preview::Preview {
    let list: Vec<Pipeline> = world
        .hub
        .pipelines
        .iter()
        .map(|(id, m)| Pipeline {
            id: id.clone(),
            is_in_maintenance_mode: *m,
        })
        .collect();
    let pipelines = Some(Ok(std::sync::Arc::new(list)));
    let mut answer = None;
    for _ in 0..2 {
        let obs = Observed {
            catalog: answer.as_ref(),
            target: Some(World::target()),
            access_problem: world.access.clone(),
            ..observed(&world.workloads, &world.hub.report, at(now))
        };
        let p = preview::preview(g, version, &obs, pipelines.clone());
        let preview::Verdict::NeedsCatalog(check) = &p.verdict else {
            return p;
        };
        answer = Some(catalog::Answer {
            token: check.token.clone(),
            at: at(now),
            result: world.catalog.clone().ok_or("no catalog".to_string()),
        });
    }
    panic!("the preview asked the catalog twice")
}

#[test]
fn the_preview_is_the_plan_the_update_then_follows() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    g.metadata.finalizers = None;
    let mut world = World::new(Some(catalog()), Hub::new(&["a", "b", "c"], &["kept"]));
    world.step(&mut g, 0);
    let before = g.clone();
    let p = previewed(&g, &world, "2.3.2.2", 1);
    assert_eq!(
        p.verdict,
        preview::Verdict::Runs { next: Drain },
        "{:?}",
        p.messages
    );
    assert_eq!(g, before, "a preview changes nothing");
    assert_eq!(p.pause, Ok(vec!["a".into(), "b".into(), "c".into()]));
    assert_eq!(p.kept, Some(1));
    let planned_then = p.update.unwrap().components;
    // The update that follows: the same plan, the same pipelines paused.
    g.spec.version = "2.3.2.2".into();
    g.metadata.generation = Some(3);
    world.until(&mut g, 1, Drain);
    // Asked for the list of pipelines, then recorded them.
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(update(&g).components, planned_then);
    assert_eq!(status(&g).paused_pipelines, ["a", "b", "c"]);
    assert!(
        planned_then.iter().any(|c| c.name == "chronos"
            && c.to_image.as_deref() == Some("molo17/gluesync-chronos:0.3.3"))
    );
}

#[test]
fn the_preview_says_what_refuses_or_holds_an_update() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.step(&mut g, 0);
    match previewed(&g, &world, "2.4.0.0", 1).verdict {
        preview::Verdict::Refused(why) => {
            assert!(why.contains("not in the version catalog"), "{why}")
        }
        v => panic!("{v:?}"),
    }
    match previewed(&g, &world, "2.3.2.1", 1).verdict {
        preview::Verdict::NotStarted(why) => {
            assert!(why.starts_with("nothing to change"), "{why}")
        }
        v => panic!("{v:?}"),
    }
    // Only a module moves: nothing is paused.
    let p = previewed(
        &platform(serde_json::json!({"version": "2.3.2.1", "modules": {"chronos": "0.3.3"}})),
        &world,
        "2.3.2.1",
        1,
    );
    assert_eq!(p.verdict, preview::Verdict::Runs { next: Modules });
    assert_eq!(p.pause, Ok(vec![]));
    // An update that runs holds the next one.
    g.spec.version = "2.3.2.2".into();
    g.metadata.generation = Some(3);
    world.until(&mut g, 1, Drain);
    match previewed(&g, &world, "2.3.2.3", 2).verdict {
        preview::Verdict::NotStarted(why) => {
            assert!(why.contains("runs now (step Drain)"), "{why}")
        }
        v => panic!("{v:?}"),
    }
    // Core Hub that cannot be listed: the count is unknown, and why is said.
    let obs = Observed {
        target: Some(World::target()),
        ..observed(&world.workloads, &world.hub.report, at(5))
    };
    let offline = platform(serde_json::json!({"version": "2.3.2.1", "catalog": {"offline": true}}));
    let p = preview::preview(
        &offline,
        "2.3.2.2",
        &obs,
        Some(Err("connection refused".into())),
    );
    assert_eq!(p.verdict, preview::Verdict::Runs { next: Drain });
    assert_eq!(p.pause, Err("connection refused".into()));
}

fn condition<'a>(
    g: &'a GluesyncPlatform,
    t: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    status(g).conditions.iter().find(|c| c.type_ == t).unwrap()
}

fn approve(g: &mut GluesyncPlatform, id: &str) {
    g.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::api::APPROVE_ANNOTATION.into(), id.into());
}

#[test]
fn a_manual_update_waits_with_nothing_paused_until_approved() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2", "approval": "manual"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a", "b"], &[]));
    let mut events = world.until(&mut g, 0, Waiting);
    for now in 0..30 {
        let d = world.step(&mut g, now);
        assert!(
            !d.actions
                .iter()
                .any(|a| matches!(a, Action::SetImage { .. }))
        );
        events.extend(d.events);
    }
    assert_eq!(update(&g).step.name(), Waiting);
    assert!(
        world.hub.enters.is_empty(),
        "nothing asked into maintenance mode"
    );
    assert!(status(&g).paused_pipelines.is_empty());
    assert_eq!(status(&g).phase, Some(Phase::Updating));
    let r = condition(&g, "Reconciling");
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "WaitingForApproval")
    );
    assert_eq!(
        reasons(&events)
            .iter()
            .filter(|r| **r == "WaitingForApproval")
            .count(),
        1
    );
    let id = update(&g).approval_id.clone().unwrap();
    assert!(
        id.starts_with("generation-2-") && id.len() == "generation-2-".len() + 10,
        "no requestID: the generation names the plan, and a digest binds it: {id}"
    );
    assert!(
        status(&g)
            .message
            .as_deref()
            .unwrap()
            .contains(&format!("gluesync.molo17.com/approve={id}"))
    );
    // A wrong value approves nothing (the generation alone neither); the right one lets the drain begin.
    approve(&mut g, "generation-2");
    world.step(&mut g, 31);
    assert_eq!(update(&g).step.name(), Waiting);
    approve(&mut g, "generation-1");
    world.step(&mut g, 31);
    assert_eq!(update(&g).step.name(), Waiting);
    approve(&mut g, &id);
    let events = world.until(&mut g, 32, Drain);
    assert!(reasons(&events).contains(&"UpdateApproved"), "{events:?}");
    assert_eq!(
        status(&g).message.as_deref(),
        Some("putting running pipelines into maintenance mode"),
        "the status written as the drain begins says so"
    );
    world.step(&mut g, 32);
    world.step(&mut g, 32);
    assert_eq!(status(&g).paused_pipelines, ["a", "b"]);
}

#[test]
fn an_approval_that_does_not_come_refuses_the_update_with_nothing_changed() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2", "approval": "manual", "approvalTimeoutMinutes": 1, "requestID": "ui-7",
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    assert!(
        update(&g)
            .approval_id
            .as_deref()
            .unwrap()
            .starts_with("ui-7-"),
        "the request names the plan"
    );
    world.step(&mut g, 59);
    assert_eq!(update(&g).step.name(), Waiting);
    world.until(&mut g, 61, Finish);
    world.step(&mut g, 61);
    let s = status(&g);
    let a = s.last_attempt.as_ref().unwrap();
    assert_eq!(a.result, UpdateResult::Refused);
    assert!(
        a.message.contains("not approved within 1 minute ("),
        "{}",
        a.message
    );
    assert_eq!(s.history.len(), 1);
    assert!(world.hub.enters.is_empty());
    assert_eq!(world.workloads[0].image, "molo17/gluesync-core-hub:2.3.2.1");
}

/// The approval's deadline is its minutes after the wait began: two minutes are 120 s, not 62.
#[test]
fn the_approval_timeout_counts_minutes_from_the_start_of_the_wait() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2", "approval": "manual", "approvalTimeoutMinutes": 2,
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    assert_eq!(update(&g).step.deadline(), Some(&at(120)));
    let d = world.step(&mut g, 100);
    assert_eq!(update(&g).step.name(), Waiting, "still within its minutes");
    assert!(
        d.requeue
            .is_some_and(|r| r.as_secs() >= 19 && r.as_secs() <= 21),
        "GKO looks again at the deadline: {:?}",
        d.requeue
    );
    world.until(&mut g, 120, Finish);
    world.step(&mut g, 120);
    let a = status(&g).last_attempt.clone().unwrap();
    assert_eq!(a.result, UpdateResult::Refused);
    assert!(
        a.message.contains("not approved within 2 minutes"),
        "{}",
        a.message
    );
    assert!(world.hub.enters.is_empty());
}

#[test]
fn an_update_a_request_brought_is_approved_with_its_request_id() {
    // The Core Hub UI's request (spec.requestID ui-9) under manual approval: the approval names it.
    let mut g = platform(
        serde_json::json!({"version": "2.3.2.2", "approval": "manual", "requestID": "ui-9"}),
    );
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    let id = update(&g).approval_id.clone().unwrap();
    assert!(id.starts_with("ui-9-"), "{id}");
    approve(&mut g, "ui-9");
    world.step(&mut g, 1);
    assert_eq!(
        update(&g).step.name(),
        Waiting,
        "the request's id alone approves nothing"
    );
    assert!(world.hub.enters.is_empty());
    approve(&mut g, &id);
    let events = world.until(&mut g, 2, Drain);
    assert!(reasons(&events).contains(&"UpdateApproved"), "{events:?}");
    world.until(&mut g, 3, CoreHub);
    assert_eq!(world.hub.enters.len(), 1);
}

#[test]
fn a_new_spec_while_waiting_makes_a_new_plan_that_needs_its_own_approval() {
    let mut g = platform(
        serde_json::json!({"version": "2.3.2.2", "approval": "manual", "requestID": "ui-1"}),
    );
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    let first = update(&g).approval_id.clone().unwrap();
    approve(&mut g, &first);
    // The spec changes before GKO saw the approval: a pin for Chronos, the same requestID.
    g.spec.modules.insert("chronos".into(), "0.3.3".into());
    g.metadata.generation = Some(3);
    let d = world.step(&mut g, 5);
    assert!(
        reasons(&d.events).contains(&"UpdatePlanReplaced"),
        "{:?}",
        d.events
    );
    assert_eq!(update(&g).step.name(), Preflight);
    world.until(&mut g, 5, Waiting);
    let second = update(&g).approval_id.clone().unwrap();
    assert!(second.starts_with("generation-3-"), "{second}");
    world.step(&mut g, 6);
    assert_eq!(
        update(&g).step.name(),
        Waiting,
        "the old approval does not approve the new plan"
    );
    assert!(world.hub.enters.is_empty());
    approve(&mut g, &second);
    world.until(&mut g, 7, Drain);
}

/// The approval binds to its plan: after an approved plan ran, a new spec that brings the old plan's
/// approvalID as its requestID (whoever may write the spec but not the annotation) waits for an approval
/// of its own, and the annotation that still stands approves nothing; the same plan made twice at two
/// instants gets two ids.
#[test]
fn an_approval_is_never_carried_over_to_a_later_plan() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2", "approval": "manual"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    let old = update(&g).approval_id.clone().unwrap();
    approve(&mut g, &old);
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 1);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    to_the_end(&mut g, &mut world, 2..200, true);
    assert_eq!(
        status(&g).last_attempt.as_ref().map(|a| a.result),
        Some(UpdateResult::Succeeded)
    );
    assert_eq!(world.hub.enters.len(), 1);
    // A later spec (a pin for Chronos) with the old plan's approvalID as its requestID; the old
    // annotation still stands.
    g.spec.modules.insert("chronos".into(), "0.3.3".into());
    g.spec.request_id = Some(old.clone());
    g.metadata.generation = Some(3);
    world.until(&mut g, 300, Waiting);
    let id = update(&g).approval_id.clone().unwrap();
    assert!(id.starts_with(&format!("{old}-")), "{id}");
    for t in 301..305 {
        world.step(&mut g, t);
    }
    assert_eq!(
        update(&g).step.name(),
        Waiting,
        "the old approval approved the new plan"
    );
    assert_eq!(world.hub.enters.len(), 1, "nothing paused for the new plan");
    // Its own approval lets it go on.
    approve(&mut g, &id);
    world.until(&mut g, 306, Modules);
    // The same spec planned at two instants: two ids, neither guessable from the spec alone.
    let at = |n: i128| Time(jiff::Timestamp::from_nanosecond(n).unwrap());
    let (a, b) = (
        crate::update::gate::approval_id(&g, None, false, &at(1_800_000_000_000_000_000)),
        crate::update::gate::approval_id(&g, None, false, &at(1_800_000_000_000_000_001)),
    );
    assert_ne!(a, b);
    assert!(a.is_some_and(|a| a.starts_with("generation-3-")));
}

/// Every day from 09:00 UTC for an hour (the fixtures' second 0 is 08:00 UTC).
fn nine_to_ten() -> serde_json::Value {
    serde_json::json!([{"start": "09:00", "durationMinutes": 60}])
}

/// An idle platform on 2.3.2.1 (one running pipeline) asked at second 10 for 2.3.2.2 within `windows`,
/// outside all of them: it waits, no update starts. Returns the platform, its world, the phase it had
/// before the ask, and the decision of second 10.
fn waiting_for(windows: serde_json::Value) -> (GluesyncPlatform, World, Option<Phase>, Decision) {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.step(&mut g, 0);
    let phase = status(&g).phase;
    g.spec.version = "2.3.2.2".into();
    g.spec.maintenance_windows = serde_json::from_value(windows).unwrap();
    g.metadata.generation = Some(3);
    let d = world.step(&mut g, 10);
    assert!(status(&g).update.is_none(), "no update starts");
    (g, world, phase, d)
}

#[test]
fn outside_every_window_the_update_does_not_start_and_says_when_it_will() {
    let (mut g, mut world, phase, d) = waiting_for(nine_to_ten());
    assert_eq!(status(&g).phase, phase, "the phase stays");
    assert_eq!(status(&g).next_window, Some(at(3600)));
    let r = condition(&g, "Reconciling");
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "WaitingForMaintenanceWindow")
    );
    assert_eq!(condition(&g, "Ready").status, "False");
    assert!(reasons(&d.events).contains(&"WaitingForMaintenanceWindow"));
    assert!(
        d.requeue
            .is_some_and(|r| r.as_secs() >= 3589 && r.as_secs() <= 3591),
        "{:?}",
        d.requeue
    );
    assert!(
        status(&g)
            .message
            .as_deref()
            .unwrap()
            .contains("waits for the maintenance window at 2027-01-15 09:00 UTC")
    );
    assert!(
        !status(&g)
            .message
            .as_deref()
            .unwrap()
            .contains("needs about"),
        "no past update: no paused time to fit"
    );
    // No second event while nothing changes.
    let d = world.step(&mut g, 20);
    assert!(d.events.is_empty(), "{:?}", d.events);
    // Another version asked for while it waits, the same window: a new wait, said with its own event.
    g.spec.version = "2.3.2.3".into();
    g.metadata.generation = Some(4);
    let d = world.step(&mut g, 30);
    assert_eq!(status(&g).next_window, Some(at(3600)), "the same window");
    let said: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason.as_str() == "WaitingForMaintenanceWindow")
        .map(|e| e.message.clone())
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("the update to Core Hub 2.3.2.3 waits"),
        "{:?}",
        d.events
    );
    g.spec.version = "2.3.2.2".into();
    g.metadata.generation = Some(5);
    world.step(&mut g, 40);
    // The window opens: the update starts, and the window's closing does not stop its drain.
    g.spec.drain_timeout_seconds = 7200;
    world.hub.enter_delay = 3650;
    world.until(&mut g, 3600, Drain);
    assert!(status(&g).next_window.is_none());
    for now in [3601, 3700, 7100, 7199] {
        world.step(&mut g, now);
        assert_eq!(update(&g).step.name(), Drain);
    }
    // Past 10:00 the window has closed, and the requests land: the update goes on.
    world.step(&mut g, 7400);
    world.until(&mut g, 7401, CoreHub);
}

#[test]
fn an_update_whose_paused_time_does_not_fit_waits_for_the_next_window() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.step(&mut g, 0);
    // The past update kept its pipelines paused 10 minutes.
    let mut s = status(&g).clone();
    s.history = vec![HistoryEntry {
        generation: None,
        from: None,
        to: None,
        result: UpdateResult::Succeeded,
        message: String::new(),
        request_id: None,
        requested_by: None,
        started_at: Some(at(-5000)),
        finished_at: at(-4000),
        previous_images: Default::default(),
        steps: [(Drain, 120), (CoreHub, 420), (Resume, 60)]
            .map(|(step, seconds)| crate::api::StepTime { step, seconds })
            .to_vec(),
    }];
    g.status = Some(s);
    g.spec.version = "2.3.2.2".into();
    g.spec.maintenance_windows = serde_json::from_value(nine_to_ten()).unwrap();
    g.metadata.generation = Some(3);
    // 55 minutes into the window, 5 left: the next day's window.
    world.step(&mut g, 3600 + 55 * 60);
    assert!(status(&g).update.is_none());
    assert_eq!(status(&g).next_window, Some(at(3600 + 86400)));
    assert!(
        status(&g)
            .message
            .as_deref()
            .unwrap()
            .contains("needs about 600 s")
    );
    // 49 minutes in, 11 left: it starts.
    world.step(&mut g, 3600 + 49 * 60);
    assert!(status(&g).update.is_some());
}

#[test]
fn approved_outside_the_window_the_update_waits_for_it_in_waiting() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2", "approval": "manual", "maintenanceWindows": nine_to_ten(),
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    let id = update(&g).approval_id.clone().unwrap();
    approve(&mut g, &id);
    let d = world.step(&mut g, 10);
    assert_eq!(update(&g).step.name(), Waiting);
    assert_eq!(
        condition(&g, "Reconciling").reason,
        "WaitingForMaintenanceWindow"
    );
    assert_eq!(status(&g).next_window, Some(at(3600)));
    assert!(reasons(&d.events).contains(&"WaitingForMaintenanceWindow"));
    // The approval is said when GKO reads it, not when the window opens; and once.
    let approved: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason.as_str() == "UpdateApproved")
        .collect();
    assert!(
        approved.len() == 1 && approved[0].message.contains(&id),
        "{:?}",
        d.events
    );
    assert_eq!(update(&g).approved_at, Some(at(10)));
    // The approval's deadline no longer counts once approved.
    let d = world.step(&mut g, 3000);
    assert!(
        !reasons(&d.events).contains(&"UpdateApproved"),
        "{:?}",
        d.events
    );
    assert_eq!(update(&g).step.name(), Waiting);
    let events = world.until(&mut g, 3600, Drain);
    assert!(!reasons(&events).contains(&"UpdateApproved"), "{events:?}");
    assert_eq!(update(&g).approved_at, Some(at(10)));
    assert!(status(&g).next_window.is_none());
}

#[test]
fn minutes_are_counted_in_words() {
    // One minute to approve: said so while waiting, and in the refusal.
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.2", "approval": "manual", "approvalTimeoutMinutes": 1,
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Waiting);
    let m = status(&g).message.clone().unwrap();
    assert!(m.ends_with("refused after 1 minute"), "{m}");
    world.until(&mut g, 61, Finish);
    world.step(&mut g, 61);
    let a = status(&g).last_attempt.clone().unwrap();
    assert!(
        a.message.contains("not approved within 1 minute ("),
        "{}",
        a.message
    );
}

/// Core Hub on node n1 and the agent on n2: the pre-pull has something to pull on each.
fn on_nodes(world: &mut World) {
    for (w, node) in world.workloads.iter_mut().zip(["n1", "n2", "n3", "n4"]) {
        for p in &mut w.pods {
            p.node = Some(node.into());
        }
    }
}

fn pre_pull_world(pull: crate::update::observed::PullState) -> (GluesyncPlatform, World) {
    let g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a", "b"], &[]));
    on_nodes(&mut world);
    world.pull = pull;
    (g, world)
}

#[test]
fn the_new_core_hub_and_agent_images_are_pulled_on_their_nodes_before_the_drain() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    // One pod per new Core Hub or agent image, on the node its pods run on; no module is pulled.
    let mut pulls: Vec<(String, String)> = world
        .pre_pulls
        .iter()
        .map(|p| (p.node.clone(), p.image.clone()))
        .collect();
    pulls.sort();
    assert_eq!(
        pulls,
        [
            (
                "n1".to_string(),
                "molo17/gluesync-core-hub:2.3.2.2".to_string()
            ),
            (
                "n2".to_string(),
                "molo17/gluesync-mssql-cdc:2.3.2.2".to_string()
            ),
        ]
    );
    // The status says what is pulled where.
    assert_eq!(
        status(&g).message.as_deref(),
        Some(
            "pulling the new images on the nodes before any pipeline is paused: \
             molo17/gluesync-core-hub:2.3.2.2 on n1; molo17/gluesync-mssql-cdc:2.3.2.2 on n2"
        )
    );
    // While they pull, nothing is paused, and Core Hub is not asked.
    for t in 2..20 {
        let d = world.step(&mut g, t);
        assert_eq!(update(&g).step.name(), PrePull);
        assert!(d.corehub.is_none_or(|w| w.enter.is_empty()));
    }
    assert!(world.hub.entered.is_empty());
    // Pulled: the update goes on to its drain, says so, and the pods go.
    for p in &mut world.pre_pulls {
        p.state = PullState::Pulled;
    }
    let d = world.step(&mut g, 21);
    assert_eq!(reasons(&d.events), ["ImagesPrePulled"]);
    assert!(
        d.events[0].message.contains("in 21 s"),
        "{}",
        d.events[0].message
    );
    assert_eq!(update(&g).step.name(), Drain);
    world.step(&mut g, 21);
    // The pods (their pulls done) stay while the pipelines are paused: see
    // the_finalizer_follows_the_pre_pull_pods_which_go_once_the_pipelines_run_again.
    assert_eq!(world.pre_pulls.len(), 2, "{:?}", world.pre_pulls);
    assert!(
        update(&g)
            .steps
            .iter()
            .any(|s| s.step == PrePull && s.seconds == 21)
    );
}

#[test]
fn the_pre_pull_pod_is_small_bound_to_its_node_and_restricted() {
    use crate::update::observed::PullState;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    let mut template = k8s_openapi::api::core::v1::PodSpec {
        service_account_name: Some("core-hub".into()),
        image_pull_secrets: Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
            name: "registry".into(),
        }]),
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "core-hub".into(),
            image_pull_policy: Some("Always".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    template.containers[0].image = Some(world.workloads[0].image.clone());
    world.workloads[0].template.spec = Some(template);
    world.workloads[0].container = Some("core-hub".into());
    world.until(&mut g, 0, PrePull);
    let d = world.step(&mut g, 1);
    let pod = d
        .actions
        .iter()
        .find_map(|a| match a {
            Action::CreatePod(p) if p.spec.as_ref().unwrap().node_name.as_deref() == Some("n1") => {
                Some(p.clone())
            }
            _ => None,
        })
        .expect("a pod for n1");
    // In the platform's namespace, saying whose pull it is.
    assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("gluesync.molo17.com/pulls-for"))
            .map(String::as_str),
        Some("core-hub")
    );
    let spec = pod.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    // No Service environment, gone at once, and on any node whatever its taints.
    assert_eq!(spec.enable_service_links, Some(false));
    assert_eq!(spec.termination_grace_period_seconds, Some(1));
    assert_eq!(
        spec.tolerations
            .as_ref()
            .map(|t| t.iter().map(|t| t.operator.as_deref()).collect::<Vec<_>>()),
        Some(vec![Some("Exists")])
    );
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.service_account_name.as_deref(), Some("core-hub"));
    assert_eq!(spec.image_pull_secrets.unwrap()[0].name, "registry");
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some("molo17/gluesync-core-hub:2.3.2.2"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(c.command.as_deref(), Some(&["true".to_string()][..]));
    // Within the Pod Security Standard "restricted", and as small as a pod can be.
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()])
    );
    let resources = c.resources.as_ref().unwrap();
    let quantities = |q: &Option<std::collections::BTreeMap<String, Quantity>>| -> Vec<String> {
        q.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.0))
            .collect()
    };
    assert_eq!(quantities(&resources.requests), ["cpu=10m", "memory=16Mi"]);
    assert_eq!(quantities(&resources.limits), ["cpu=100m", "memory=64Mi"]);
    let psc = spec.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_),
        Some("RuntimeDefault".to_string())
    );
    assert_eq!(
        pod.metadata.labels.unwrap()[crate::api::PRE_PULL_LABEL],
        "gluesync"
    );
    assert!(
        pod.metadata
            .owner_references
            .is_some_and(|o| o[0].controller == Some(true))
    );
}

#[test]
fn a_pull_that_fails_refuses_the_update_with_nothing_paused() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Failed(
        "ErrImagePull".into(),
        "manifest unknown".into(),
    ));
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    world.until(&mut g, 2, Finish);
    let d = world.step(&mut g, 2);
    let attempt = status(&g).last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused);
    assert!(
        attempt.message.contains("could not be pulled on node")
            && attempt.message.contains("ErrImagePull: manifest unknown")
            && attempt.message.contains("nothing was paused or changed"),
        "{}",
        attempt.message
    );
    assert!(reasons(&d.events).contains(&"UpdateRefused"));
    assert!(world.hub.entered.is_empty());
    assert_eq!(world.workloads[0].image, "molo17/gluesync-core-hub:2.3.2.1");
    world.step(&mut g, 3);
    assert!(world.pre_pulls.is_empty());
}

#[test]
fn a_pull_that_does_not_end_in_time_or_a_pod_refused_refuses_the_update() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    g.spec.pre_pull.timeout_seconds = 30;
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    world.step(&mut g, 29);
    assert_eq!(update(&g).step.name(), PrePull);
    world.until(&mut g, 31, Finish);
    world.step(&mut g, 31);
    let attempt = status(&g).last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused);
    assert!(
        attempt.message.contains(
            "not pulled within 30 s (prePull.timeoutSeconds): molo17/gluesync-core-hub:2.3.2.2 on n1"
        ),
        "{}",
        attempt.message
    );

    // A pod refused before this step began (an earlier update's): made again, not a refusal.
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    let name = world.pre_pulls[0].name.clone();
    world.pre_pulls[0].state = PullState::Refused(at(-10), "exceeded quota: pods".into());
    let d = world.step(&mut g, 2);
    assert_eq!(update(&g).step.name(), PrePull);
    assert!(
        d.actions.iter().any(
            |a| matches!(a, Action::CreatePod(p) if p.metadata.name.as_deref() == Some(name.as_str()))
        ),
        "{:?}",
        d.actions
    );

    // A pod the API server refuses (a quota, an admission policy): refused at once, with its words.
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    world.pre_pulls[0].state = PullState::Refused(at(2), "exceeded quota: pods".into());
    world.until(&mut g, 2, Finish);
    world.step(&mut g, 2);
    let attempt = status(&g).last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused);
    assert!(
        attempt
            .message
            .contains("Kubernetes refused the pod that pulls")
            && attempt.message.contains("exceeded quota: pods"),
        "{}",
        attempt.message
    );
}

/// A pre-pull's pods outlive the status that listed them when a later write of the update is lost (GKO
/// stopped, or the resource changed meanwhile): an update begun again from the status before it keeps
/// them through Preflight and Snapshot and takes them in, and its PrePull deletes only a pod it does not
/// want (one of a plan given up, or for a node its workload left).
#[test]
fn pre_pull_pods_made_before_any_status_stay_through_an_update_begun_again_and_only_unwanted_go() {
    use crate::update::observed::{PrePullPod, PullState};
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    let before = g.status.clone();
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    let made: Vec<String> = world.pre_pulls.iter().map(|p| p.name.clone()).collect();
    assert_eq!(made.len(), 2, "{:?}", world.pre_pulls);
    let stray = PrePullPod {
        name: "gluesync-pre-pull-000000000000".into(),
        state: PullState::Pulling,
        ..world.pre_pulls[0].clone()
    };
    world.pre_pulls.push(stray.clone());
    // The update's statuses are lost: it begins again from the status before it.
    g.status = before;
    let mut reached = false;
    for t in 2..12 {
        let step = update_step(&g);
        let d = world.step(&mut g, t);
        let deleted: Vec<&String> = d
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePrePull(name) => Some(name),
                _ => None,
            })
            .collect();
        if step == Some(PrePull) {
            assert_eq!(deleted, [&stray.name], "{step:?}: {:?}", d.actions);
            assert!(
                !d.actions.iter().any(|a| matches!(a, Action::CreatePod(_))),
                "a pod made again: {:?}",
                d.actions
            );
            reached = true;
            break;
        }
        assert!(deleted.is_empty(), "{step:?} deleted pods: {:?}", d.actions);
    }
    assert!(reached, "no PrePull: {:?}", update_step(&g));
    // The pods it wants are still there, pulling.
    for name in &made {
        assert!(
            world.pre_pulls.iter().any(|p| &p.name == name),
            "{name} gone: {:?}",
            world.pre_pulls
        );
    }
}

/// A pod labelled `gluesync.molo17.com/pre-pull: gluesync` that GKO did not make (no owner reference,
/// or another platform's) is neither taken in nor deleted: not by PrePull, which deletes the pods its
/// plan does not want, nor by the clean-up once the update has ended; GKO's own pods go.
#[test]
fn a_labelled_pod_gko_did_not_make_is_never_deleted() {
    use crate::update::observed::{PrePullPod, PullState};
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    let mut own: Vec<String> = world.pre_pulls.iter().map(|p| p.name.clone()).collect();
    own.sort();
    assert_eq!(own.len(), 2, "{:?}", world.pre_pulls);
    let foreign = [None, Some("another-uid".to_string())].map(|owner| PrePullPod {
        name: format!("gluesync-pre-pull-{}", owner.is_some()),
        owner,
        ..world.pre_pulls[0].clone()
    });
    world.pre_pulls.extend(foreign.iter().cloned());
    let deleted = |d: &Decision| -> Vec<String> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePrePull(name) => Some(name.clone()),
                _ => None,
            })
            .collect()
    };
    let d = world.step(&mut g, 2);
    assert_eq!(update_step(&g), Some(PrePull));
    assert!(deleted(&d).is_empty(), "{:?}", d.actions);
    // The pull fails: the update is refused, and GKO's pods go, the others stay.
    world.pull = PullState::Failed("ErrImagePull".into(), "not found".into());
    for p in world
        .pre_pulls
        .iter_mut()
        .filter(|p| p.owner.as_deref() == Some("uid"))
    {
        p.state = world.pull.clone();
    }
    let mut gone = vec![];
    for t in 3..10 {
        gone.extend(deleted(&world.step(&mut g, t)));
    }
    gone.sort();
    assert_eq!(
        gone,
        own,
        "{:?}",
        g.status.as_ref().and_then(|s| s.last_attempt.clone())
    );
    for f in &foreign {
        assert!(world.pre_pulls.contains(f), "{} was deleted", f.name);
    }
}

/// Preflight and Snapshot change nothing and make no action (they pass through unwritten); the
/// pre-pull's first decision makes its pods, then puts GKO's finalizer on (their pulls start a write
/// earlier); the pods stay while the pipelines are paused and go once they run again.
#[test]
fn the_finalizer_follows_the_pre_pull_pods_which_go_once_the_pipelines_run_again() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    g.metadata.finalizers = None;
    let mut pulled = false;
    for _ in 0..10 {
        let before = update_step(&g);
        let d = world.step(&mut g, 0);
        if matches!(before, None | Some(Preflight) | Some(Snapshot)) {
            assert!(d.actions.is_empty(), "{before:?} acted: {:?}", d.actions);
        }
        if before == Some(PrePull) {
            let kinds: Vec<&str> = d
                .actions
                .iter()
                .map(|a| match a {
                    Action::CreatePod(_) => "create",
                    Action::AddFinalizer => "finalizer",
                    _ => "other",
                })
                .collect();
            assert_eq!(kinds, ["create", "create", "finalizer"], "{:?}", d.actions);
            pulled = true;
            break;
        }
    }
    assert!(pulled, "no PrePull");
    assert!(g.metadata.finalizers.is_some());
    world
        .pre_pulls
        .iter_mut()
        .for_each(|p| p.state = PullState::Pulled);
    // From the drain to the resume, the pods stay; they go with the decision that sees the pipelines
    // resumed.
    let mut seen = std::collections::BTreeSet::new();
    for t in (1..400).step_by(5) {
        let step = update_step(&g);
        match step {
            Some(CoreHub) => world.roll_out(&g, &["core-hub", "agent-mssql"]),
            Some(Modules) => world.roll_out(&g, &["chronos"]),
            _ => {}
        }
        let d = world.step(&mut g, t);
        let deletes = d
            .actions
            .iter()
            .any(|a| matches!(a, Action::DeletePrePull(_)));
        // A decision that ends in a step with the pipelines paused deletes nothing.
        let after = update_step(&g);
        if matches!(after, Some(PrePull | Drain | CoreHub | Resume)) {
            assert!(!deletes, "pods deleted in {step:?}: {:?}", d.actions);
        }
        if let Some(s) = step {
            seen.insert(format!("{s:?}"));
        }
        if step.is_none() {
            break;
        }
    }
    for s in ["Drain", "CoreHub", "Resume"] {
        assert!(seen.contains(s), "{s} not gone through: {seen:?}");
    }
    assert!(world.pre_pulls.is_empty(), "{:?}", world.pre_pulls);
    assert!(status(&g).update.is_none());
}

/// Only what is found again without a status (a pre-pull pod deleted, GKO's finalizer put on) may be
/// done before the status that remembers it is written: every other action is done after it (the
/// finalizer taken off among them: it goes once a status says nothing is left to settle; a pre-pull
/// pod made: the admission policy reads it from the status).
#[test]
fn only_what_is_found_again_without_a_status_needs_none_before_it() {
    for a in [Action::DeletePrePull("p".into()), Action::AddFinalizer] {
        assert!(!a.needs_status(), "{a:?}");
    }
    for a in [
        Action::CreatePod(Box::default()),
        Action::DeletePod("p".into()),
        Action::RemoveFinalizer,
        Action::SetImage {
            kind: crate::api::WorkloadKind::StatefulSet,
            name: "w".into(),
            container: "c".into(),
            image: "i".into(),
        },
    ] {
        assert!(a.needs_status(), "{a:?}");
    }
}

fn update_step(g: &GluesyncPlatform) -> Option<UpdateStep> {
    g.status
        .as_ref()
        .and_then(|s| s.update.as_ref())
        .map(|u| u.step.name())
}

#[test]
fn a_gko_that_takes_over_mid_pull_carries_on_and_leftover_pods_go() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    let made = world.pre_pulls.clone();
    // A new GKO (the status is all it has) sees the same pods and makes none again.
    let d = world.decide(&g, &at(2));
    assert!(!d.actions.iter().any(|a| matches!(a, Action::CreatePod(_))));
    // A pod deleted under it is made again, under the same name.
    world.pre_pulls.remove(0);
    let d = world.step(&mut g, 3);
    assert!(d.actions.iter().any(
        |a| matches!(a, Action::CreatePod(p) if p.metadata.name == Some(made[0].name.clone()))
    ));
    // Pods left by a GKO that stopped after the step ended are deleted by the next decision.
    let mut idle = platform(serde_json::json!({"version": "2.3.2.1"}));
    idle.metadata.generation = Some(1);
    let mut w2 = World::new(Some(catalog()), Hub::new(&[], &[]));
    w2.pre_pulls = made.clone();
    let d = w2.decide(&idle, &at(4));
    let deleted: Vec<&Action> = d
        .actions
        .iter()
        .filter(|a| matches!(a, Action::DeletePrePull(_)))
        .collect();
    assert_eq!(deleted.len(), made.len(), "{:?}", d.actions);
}

#[test]
fn a_new_spec_during_the_pull_replaces_the_plan_and_deletion_stops_it() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    g.spec.version = "2.3.2.3".into();
    g.metadata.generation = Some(3);
    let d = world.step(&mut g, 2);
    assert_eq!(reasons(&d.events), ["UpdatePlanReplaced"]);
    assert_eq!(update(&g).step.name(), Preflight);
    assert_eq!(update(&g).target.as_deref(), Some("2.3.2.3"));

    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    world.until(&mut g, 0, PrePull);
    world.step(&mut g, 1);
    g.metadata.deletion_timestamp = Some(at(2));
    for t in 2..6 {
        world.step(&mut g, t);
    }
    assert_eq!(
        status(&g).last_attempt.as_ref().unwrap().result,
        UpdateResult::Refused
    );
    assert!(world.pre_pulls.is_empty());
    assert!(world.hub.entered.is_empty());
}

#[test]
fn without_pre_pull_or_a_node_the_update_drains_at_once() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    g.spec.pre_pull.enabled = false;
    world.until(&mut g, 0, Drain);
    assert!(!update(&g).steps.iter().any(|s| s.step == PrePull));
    assert!(world.pre_pulls.is_empty());
    // Pods not scheduled yet: nothing to pull.
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.until(&mut g, 0, Drain);
    assert!(world.pre_pulls.is_empty());
}

#[test]
fn a_pre_pull_pod_reads_as_pulled_failed_or_pulling() {
    use crate::update::observed::PullState;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Pod,
        PodStatus,
    };
    let with = |status: PodStatus| Pod {
        status: Some(status),
        ..Default::default()
    };
    let container = |state: ContainerState, image_id: &str| PodStatus {
        container_statuses: Some(vec![ContainerStatus {
            name: "pull".into(),
            state: Some(state),
            image_id: image_id.into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let waiting = |reason: &str| ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some("m".into()),
        }),
        ..Default::default()
    };
    use crate::update::prepull::state_of;
    assert_eq!(state_of(&with(PodStatus::default())), PullState::Pulling);
    assert_eq!(
        state_of(&with(container(waiting("ContainerCreating"), ""))),
        PullState::Pulling
    );
    assert_eq!(
        state_of(&with(container(waiting("ImagePullBackOff"), ""))),
        PullState::Failed("ImagePullBackOff".into(), "m".into())
    );
    // An image without `true`: the container could not start, but the image is there.
    assert_eq!(
        state_of(&with(container(waiting("RunContainerError"), ""))),
        PullState::Pulled
    );
    assert_eq!(
        state_of(&with(container(waiting("CrashLoopBackOff"), ""))),
        PullState::Pulled
    );
    assert_eq!(
        state_of(&with(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        })),
        PullState::Pulled
    );
    let exited = ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 0,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(state_of(&with(container(exited, ""))), PullState::Pulled);
    assert_eq!(
        state_of(&with(container(ContainerState::default(), "sha256:1"))),
        PullState::Pulled
    );
    assert_eq!(
        state_of(&with(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("OutOfcpu".into()),
            ..Default::default()
        })),
        PullState::Failed("OutOfcpu".into(), String::new())
    );
}

/// Runs the update to its end, each workload rolling out (or not, for those `failing` names) the image
/// the plan gives it once a decision set it; the platform at the end.
fn run_to_the_end(g: &mut GluesyncPlatform, world: &mut World, failing: &[&str]) {
    for t in 1..400 {
        world.step(g, t);
        let Some(u) = g.status.as_ref().and_then(|s| s.update.as_ref()) else {
            return;
        };
        let set: Vec<String> = u
            .components
            .iter()
            .filter(|c| !failing.contains(&c.name.as_str()))
            .filter(|c| {
                world
                    .workloads
                    .iter()
                    .any(|w| w.name == c.name && Some(&w.image) == c.to_image.as_ref())
            })
            .map(|c| c.name.clone())
            .collect();
        let names: Vec<&str> = set.iter().map(String::as_str).collect();
        world.roll_out(g, &names);
        for w in world
            .workloads
            .iter_mut()
            .filter(|w| failing.contains(&w.name.as_str()))
        {
            // Its new pods crash-loop; put back, its old ones come up.
            let on_old = w.image.ends_with("0.3.2");
            w.pods[0].image = w.image.clone();
            w.pods[0].ready = on_old;
            w.pods[0].waiting =
                (!on_old).then(|| ("CrashLoopBackOff".to_string(), "back-off".to_string()));
            w.ready = on_old;
        }
    }
    panic!("the update never ended: {:?}", status(g).update);
}

fn result_of<'a>(g: &'a GluesyncPlatform, name: &str) -> &'a ComponentResult {
    status(g)
        .last_attempt
        .as_ref()
        .unwrap()
        .results
        .iter()
        .find(|r| r.name == name)
        .unwrap()
}

/// `status.lastAttempt.results` says what became of each component, with the versions before and after:
/// updated, rolled back with why, skipped with why.
#[test]
fn the_attempt_says_what_became_of_each_component() {
    let (mut g, mut world) = drained_start(
        Hub::new(&["a"], &[]),
        serde_json::json!({"stabilityWindowSeconds": 0}),
    );
    run_to_the_end(&mut g, &mut world, &[]);
    let attempt = status(&g).last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded);
    assert_eq!(attempt.message, "update finished");
    // Its history entry names the generation of the spec it planned.
    assert_eq!(status(&g).history[0].generation, Some(2));
    let core = result_of(&g, "core-hub");
    assert_eq!(
        (core.status, core.from.as_deref(), core.to.as_deref()),
        (ComponentResultStatus::Ok, Some("2.3.2.1"), Some("2.3.2.2"))
    );
    assert_eq!(core.message, None);
    let chronos = result_of(&g, "chronos");
    assert_eq!(
        (
            chronos.status,
            chronos.from.as_deref(),
            chronos.to.as_deref()
        ),
        (ComponentResultStatus::Ok, Some("0.3.2"), Some("0.3.3"))
    );
    let grafana = result_of(&g, "grafana");
    assert_eq!(grafana.status, ComponentResultStatus::Skipped);
    assert_eq!(
        grafana.message.as_deref(),
        Some("third-party: updated only when pinned in spec.modules")
    );

    // A module whose new image crash-loops is put back: Degraded, and the result says why.
    let (mut g, mut world) = drained_start(
        Hub::new(&["a"], &[]),
        serde_json::json!({"stabilityWindowSeconds": 0}),
    );
    run_to_the_end(&mut g, &mut world, &["chronos"]);
    let attempt = status(&g).last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Degraded);
    assert!(
        attempt
            .message
            .starts_with("chronos rolled back: pod chronos")
            && !attempt.message.contains("not resumed"),
        "{}",
        attempt.message
    );
    let chronos = result_of(&g, "chronos");
    assert_eq!(chronos.status, ComponentResultStatus::RolledBack);
    assert!(
        chronos
            .message
            .as_deref()
            .is_some_and(|m| m.contains("CrashLoopBackOff")),
        "{chronos:?}"
    );
    assert_eq!(result_of(&g, "core-hub").status, ComponentResultStatus::Ok);
}

#[test]
fn a_message_names_twenty_pipelines_and_counts_the_rest() {
    let ids: Vec<String> = (1..=21).map(|i| format!("p{i}")).collect();
    assert_eq!(pipelines::sample(&ids[..20]), ids[..20].join(", "));
    assert_eq!(
        pipelines::sample(&ids),
        format!("{}, and 1 more", ids[..20].join(", "))
    );
    assert_eq!(pipelines::sample(&ids[..1]), "p1");
}

/// GKO's image changed during the update (a Helm upgrade of GKO wins): GKO does not update itself, and the
/// attempt says why.
#[test]
fn gko_whose_image_changed_during_the_update_does_not_update_itself() {
    let mut g = platform(serde_json::json!({
        "version": "2.3.2.1",
        "modules": {"gluesync-operator": "0.2.0"},
        "stabilityWindowSeconds": 5,
        "stabilityTimeoutSeconds": 60,
    }));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    add_gko(&mut world, GKO_OLD);
    world.me = Some(GKO_OLD.into());
    world.until(&mut g, 0, Modules);
    let helm = "molo17/gluesync-operator:0.1.5";
    let w = gko_mut(&mut world);
    w.image = helm.into();
    w.pods[0].image = helm.into();
    world.until(&mut g, 0, Finish);
    world.step(&mut g, 100);
    let entry = result_of(&g, "gluesync-operator");
    assert_eq!(entry.status, ComponentResultStatus::Skipped);
    assert_eq!(
        entry.message.as_deref(),
        Some("GKO's image was changed during the update; GKO does not update itself")
    );
    assert!(status(&g).self_update.is_none());
    assert_eq!(gko_workload(&world).image, helm);
    // Unchanged, the same update schedules GKO's own (see gko_updates_itself_after_the_update...).
    let (g, _, _) = self_update_scheduled(serde_json::json!({}));
    assert_eq!(
        result_of(&g, "gluesync-operator").status,
        ComponentResultStatus::Scheduled
    );
}

/// A short drainTimeoutSeconds: the watch for late requests (at least a minute) outlasts it, and a deleted
/// platform stays to its end, Core Hub in reach or not.
#[test]
fn a_deleted_platform_stays_to_the_end_of_the_watch_beyond_a_short_drain_timeout() {
    let mut hub = Hub::new(&["a"], &[]);
    hub.enter_delay = 1000; // lands long after the watch: nothing shows it in maintenance mode
    let (mut g, mut world) = drained_start(hub, serde_json::json!({"drainTimeoutSeconds": 10}));
    world.step(&mut g, 1);
    world.step(&mut g, 1);
    assert_eq!(status(&g).paused_pipelines, ["a"]);
    g.metadata.deletion_timestamp = Some(at(2));
    world.until(&mut g, 2, Finish);
    world.step(&mut g, 2);
    let until = status(&g)
        .late_maintenance
        .as_ref()
        .map(|l| l.until.clone());
    assert_eq!(until, Some(at(62)), "a minute from the deletion");
    for t in [13, 30, 61] {
        let d = world.step(&mut g, t);
        assert!(
            !d.actions.contains(&Action::RemoveFinalizer),
            "it went at {t} s, before the watch ended"
        );
    }
    let d = world.step(&mut g, 63);
    assert!(
        d.actions.contains(&Action::RemoveFinalizer),
        "{:?}",
        d.actions
    );
}

/// Two updates in a row: the second asks every running pipeline into maintenance mode again (what the
/// worker did for the first one is not taken for the second's).
#[test]
fn a_second_update_asks_the_pipelines_in_again() {
    let (mut g, mut world) = drained_start(
        Hub::new(&["a", "b"], &[]),
        serde_json::json!({"stabilityWindowSeconds": 0}),
    );
    run_to_the_end(&mut g, &mut world, &[]);
    assert_eq!(
        status(&g).last_attempt.as_ref().map(|a| a.result),
        Some(UpdateResult::Succeeded)
    );
    assert_eq!(world.hub.enters.values().sum::<u32>(), 2);
    let mut catalog = catalog();
    catalog.insert("gluesync-core-hub".into(), "2.3.2.3".into());
    world.catalog = Some(catalog);
    g.spec.version = "2.3.2.3".into();
    g.metadata.generation = Some(3);
    run_to_the_end(&mut g, &mut world, &[]);
    let attempt = status(&g).last_attempt.clone().unwrap();
    assert_eq!(
        attempt.result,
        UpdateResult::Succeeded,
        "{}",
        attempt.message
    );
    assert_eq!(
        world.hub.enters.values().collect::<Vec<_>>(),
        [&2, &2],
        "each asked in once per update"
    );
    assert!(world.hub.in_maintenance().is_empty());
}

/// Core Hub's step found past its deadline before Core Hub's image was ever set (GKO slow, or a GKO that
/// just took the Lease): the decision that gives the new image up writes none of it. A write of it
/// carried out after the status says Rollback (by this GKO, or landing late from one that lost the Lease
/// meanwhile) would leave Core Hub on the new image after the rollback: found by the model check.
#[test]
fn a_core_hub_step_past_its_deadline_before_the_patch_writes_no_new_image() {
    let (mut g, mut world) = drained_start(
        Hub::new(&["a"], &[]),
        serde_json::json!({"stabilityTimeoutSeconds": 30}),
    );
    world.until(&mut g, 1, CoreHub);
    let d = world.decide(&g, &at(40));
    let u = d.status.update.as_ref().expect("an update");
    assert_eq!(u.step.name(), CoreHubRollback, "{:?}", d.status.message);
    assert_eq!(u.outcome.as_ref().unwrap().result, UpdateResult::Failed);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::SetImage { image, .. } if image.ends_with("2.3.2.2"))),
        "{:?}",
        d.actions
    );
    // Within the deadline the same decision does set it.
    let d = world.decide(&g, &at(2));
    assert!(
        d.actions
            .iter()
            .any(|a| matches!(a, Action::SetImage { image, .. } if image.ends_with("2.3.2.2"))),
        "{:?}",
        d.actions
    );
}

/// Core Hub's rollback that does not become ready either, by the step's deadline: the update ends Failed
/// and Core Hub's entry in the attempt is an error that says so.
#[test]
fn a_rollback_that_does_not_come_up_is_an_error_in_the_attempt() {
    let (mut g, mut world) = drained_start(Hub::new(&["a"], &[]), serde_json::json!({}));
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 2);
    world.workloads[0].image = "molo17/gluesync-core-hub:2.3.2.2".into();
    world.workloads[0].ready = false;
    world.workloads[0].pods[0] = PodView {
        waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
        ..pod("core-hub", "molo17/gluesync-core-hub:2.3.2.2", false, 1)
    };
    world.step(&mut g, 3);
    assert_eq!(update(&g).step.name(), CoreHubRollback);
    // The old image back on the workload, its pod never ready.
    world.step(&mut g, 4);
    assert_eq!(world.workloads[0].image, "molo17/gluesync-core-hub:2.3.2.1");
    world.workloads[0].pods[0] = pod("core-hub", "molo17/gluesync-core-hub:2.3.2.1", false, 3);
    world.workloads[0].ready = false;
    // A pod of the old revision is left to start: only a stuck pod of the failed one is deleted.
    let d = world.step(&mut g, 5);
    assert!(
        !d.actions.iter().any(|a| matches!(a, Action::DeletePod(_))),
        "{:?}",
        d.actions
    );
    let attempt = step_to_the_end(&mut g, &mut world, 700..800);
    assert_eq!(attempt.result, UpdateResult::Failed);
    let core = result_of(&g, "core-hub");
    assert_eq!(core.status, ComponentResultStatus::Error, "{core:?}");
    assert!(
        core.message
            .as_deref()
            .is_some_and(|m| m.contains("did not become ready either")),
        "{core:?}"
    );
}

/// Core Hub's rollback puts back only what the update changed: an agent already at the version, left on
/// its image, is neither written nor counted as rolled back, and its entry says why it was left.
#[test]
fn core_hubs_rollback_leaves_an_agent_the_update_did_not_change() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2", "stabilityWindowSeconds": 10}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    let at_target = "molo17/gluesync-mssql-cdc:2.3.2.2";
    world.workloads[1].image = at_target.into();
    world.workloads[1].pods[0].image = at_target.into();
    world.until(&mut g, 0, Drain);
    assert_eq!(planned(&g, "agent-mssql").state, ComponentState::Skipped);
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 2);
    let old = world.workloads[0].clone();
    world.workloads[0].image = "molo17/gluesync-core-hub:2.3.2.2".into();
    world.workloads[0].ready = false;
    world.workloads[0].pods[0] = PodView {
        waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
        ..pod("core-hub", "molo17/gluesync-core-hub:2.3.2.2", false, 1)
    };
    world.step(&mut g, 3);
    assert_eq!(update(&g).step.name(), CoreHubRollback);
    let d = world.step(&mut g, 4);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::SetImage { name, .. } if name == "agent-mssql")),
        "{:?}",
        d.actions
    );
    assert_eq!(planned(&g, "agent-mssql").state, ComponentState::Skipped);
    world.workloads[0] = old;
    let attempt = step_to_the_end(&mut g, &mut world, 5..100);
    assert_eq!(attempt.result, UpdateResult::Failed);
    assert_eq!(
        result_of(&g, "core-hub").status,
        ComponentResultStatus::RolledBack
    );
    let agent = result_of(&g, "agent-mssql");
    assert_eq!(
        (agent.status, agent.message.as_deref()),
        (ComponentResultStatus::Skipped, Some("already at 2.3.2.2"))
    );
    assert_eq!(world.workloads[1].image, at_target);
    assert!(world.hub.in_maintenance().is_empty());
}

/// Between checks the catalog is not asked: GKO looks again when the next check is due, and asks then.
#[test]
fn the_catalog_is_asked_only_when_a_check_is_due() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1", "checkIntervalMinutes": 60}));
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    assert!(world.step(&mut g, 0).catalog.is_some(), "the first check");
    world.step(&mut g, 0);
    let checked = status(&g).catalog.clone().expect("the answer taken in");
    assert_eq!(checked.last_attempt_at, Some(at(0)));
    let d = world.decide(&g, &at(60));
    assert!(d.catalog.is_none(), "{:?}", d.catalog);
    assert_eq!(d.requeue, Some(std::time::Duration::from_secs(3540)));
    assert!(world.decide(&g, &at(3600)).catalog.is_some(), "due again");
}

/// A catalog answer is taken into the status only when it answers the check now due: one that answers a
/// check asked before the check-now annotation took a new value is not (the new check is asked instead).
#[test]
fn a_catalog_answer_to_an_earlier_check_is_not_taken_in() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    g.annotations_mut()
        .insert(crate::api::CHECK_NOW_ANNOTATION.into(), "1".into());
    let earlier = crate::update::catalog::due_token(&g);
    g.annotations_mut()
        .insert(crate::api::CHECK_NOW_ANNOTATION.into(), "2".into());
    let mut world = World::new(Some(catalog()), Hub::new(&[], &[]));
    let answer = |token: String| Answer {
        token,
        at: at(0),
        result: Ok(catalog()),
    };
    world.answer = Some(answer(earlier));
    let d = world.decide(&g, &at(1));
    assert_eq!(
        d.status
            .catalog
            .as_ref()
            .and_then(|c| c.observed_check_now.clone()),
        None,
        "{:?}",
        d.status.catalog
    );
    assert_eq!(
        d.catalog.as_ref().map(|c| c.token.clone()),
        Some(crate::update::catalog::due_token(&g)),
        "the check now due is asked"
    );
    // The answer to the check now due is taken in.
    world.answer = Some(answer(crate::update::catalog::due_token(&g)));
    let d = world.decide(&g, &at(1));
    assert_eq!(
        d.status
            .catalog
            .as_ref()
            .and_then(|c| c.observed_check_now.clone()),
        Some("2".to_string()),
        "{:?}",
        d.status.catalog
    );
    // An agent the catalog names no version for is offered Core Hub's.
    let agent = d
        .status
        .components
        .iter()
        .find(|c| c.name == "agent-mssql")
        .expect("the agent");
    assert_eq!(agent.available.as_deref(), Some("2.3.2.2"));
}

/// A workload whose image tag carries no version refuses the update, and the message names it by kind.
#[test]
fn a_workload_without_a_version_in_its_tag_refuses_the_update_by_name() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.2"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.workloads[1].image = "molo17/gluesync-mssql-cdc:latest".into();
    let attempt = step_to_the_end(&mut g, &mut world, 0..40);
    assert_eq!(attempt.result, UpdateResult::Refused);
    assert!(
        attempt
            .message
            .contains("StatefulSet agent-mssql runs image \"molo17/gluesync-mssql-cdc:latest\""),
        "{}",
        attempt.message
    );
}

/// Steps at each second of `seconds` until no update runs; the attempt it ended with.
fn step_to_the_end(
    g: &mut GluesyncPlatform,
    world: &mut World,
    seconds: std::ops::Range<i64>,
) -> crate::api::Attempt {
    to_the_end(g, world, seconds, false);
    status(g).last_attempt.clone().expect("the update ended")
}

/// Steps through `seconds` until the update has ended (panics if it does not), Chronos rolled out once
/// the update reaches Modules when `roll_modules`; every event said on the way.
fn to_the_end(
    g: &mut GluesyncPlatform,
    world: &mut World,
    seconds: std::ops::Range<i64>,
    roll_modules: bool,
) -> Vec<Event> {
    let mut events = vec![];
    for t in seconds {
        if roll_modules && update_step(g) == Some(Modules) {
            world.roll_out(g, &["chronos"]);
        }
        events.extend(world.step(g, t).events);
        if status(g).update.is_none() && status(g).last_attempt.is_some() {
            return events;
        }
    }
    panic!("the update did not end: {:?}", status(g).update);
}

/// A decision may go unwritten only when it acts on nothing a status must remember and asks Core Hub to
/// pause nothing: a pre-pull pod deleted, GKO's finalizer put on and a worker that lists or resumes
/// pass through; any other action (a pre-pull pod made among them), or a pipeline to be asked into
/// maintenance mode, does not.
#[test]
fn a_decision_passes_through_only_when_it_acts_on_nothing_and_pauses_nothing() {
    let work = |enter: &[&str]| corehub::Work {
        target: corehub::Target {
            url: "https://core-hub".into(),
            credentials_secret: None,
            ca_secret: None,
            insecure_skip_verify: false,
        },
        epoch: "e".into(),
        enter: {
            let mut l = crate::api::ids::PipelineList::new();
            for id in enter {
                l.push(*id);
            }
            l
        },
        asked: Default::default(),
        exit: Default::default(),
        poll: std::time::Duration::from_secs(1),
    };
    let mut d = Decision::new(Default::default());
    assert!(d.passes_through());
    d.actions.push(Action::DeletePrePull("p".into()));
    d.corehub = Some(work(&[]));
    assert!(d.passes_through());
    d.corehub = Some(work(&["p1"]));
    assert!(!d.passes_through());
    d.corehub = None;
    d.actions.push(Action::AddFinalizer);
    assert!(d.passes_through());
    d.actions.push(Action::CreatePod(Box::default()));
    assert!(
        !d.passes_through(),
        "a pre-pull pod is made once the status lists it"
    );
    d.actions.pop();
    d.actions.push(Action::RemoveFinalizer);
    assert!(!d.passes_through());
    // Its actions come out only when it passes through, and then all of them.
    assert_eq!(d.take_status_free(), None);
    assert_eq!(d.actions.len(), 3, "kept in the decision: {:?}", d.actions);
    d.actions.pop();
    let free = d.take_status_free().expect("it passes through");
    assert!(!free.is_empty());
    assert_eq!(
        free.into_iter().collect::<Vec<_>>(),
        [Action::DeletePrePull("p".into()), Action::AddFinalizer]
    );
    assert!(d.actions.is_empty());
    assert!(d.take_status_free().expect("nothing left").is_empty());
}

/// The preview plans a new generation of the spec: a version refused at the platform's current
/// generation, or at the one before it, is planned (and refused) again, as the change the user is about
/// to make would.
#[test]
fn the_preview_plans_a_new_generation_of_the_spec() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.step(&mut g, 0);
    g.spec.version = "2.4.0.0".into();
    g.metadata.generation = Some(3);
    for _ in 0..10 {
        world.step(&mut g, 1);
    }
    let refused = status(&g)
        .last_attempt
        .clone()
        .unwrap_or_else(|| panic!("no attempt: {:?}", status(&g).message));
    assert_eq!(refused.result, UpdateResult::Refused);
    assert_eq!(refused.generation, Some(3));
    g.spec.version = "2.3.2.1".into();
    for generation in [3, 4] {
        // Refused at this generation (3), or at the one before it (the spec changed since: 4).
        g.metadata.generation = Some(generation);
        let p = previewed(&g, &world, "2.4.0.0", 5);
        match p.verdict {
            preview::Verdict::Refused(why) => {
                assert!(why.contains("not in the version catalog"), "{why}")
            }
            v => panic!("generation {generation}: {v:?}"),
        }
        // Planned anew (Preflight ran), not the earlier attempt read back.
        assert!(p.update.is_some(), "generation {generation}");
    }
}

/// The preview puts GKO's finalizer on its copy beside any other, as GKO would before the drain: the
/// drain's pipelines are counted; its messages come in order, none twice in a row.
#[test]
fn the_preview_counts_the_drain_beside_another_finalizer_and_says_each_step_once() {
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a", "b"], &[]));
    world.step(&mut g, 0);
    g.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let p = previewed(&g, &world, "2.3.2.2", 1);
    assert_eq!(p.verdict, preview::Verdict::Runs { next: Drain });
    assert_eq!(p.pause, Ok(vec!["a".into(), "b".into()]));
    assert!(p.messages.len() >= 2, "{:?}", p.messages);
    assert!(
        p.messages.windows(2).all(|w| w[0] != w[1]),
        "{:?}",
        p.messages
    );
}

/// What the update would wait for before its first change is said, and then taken as given: the pull of
/// the new images on their nodes, and a manual approval.
#[test]
fn the_preview_says_the_pull_and_the_approval_it_would_wait_for() {
    use crate::update::observed::PullState;
    let (mut g, mut world) = pre_pull_world(PullState::Pulling);
    g.spec.version = "2.3.2.1".into();
    world.step(&mut g, 0);
    let p = previewed(&g, &world, "2.3.2.2", 1);
    assert_eq!(p.verdict, preview::Verdict::Runs { next: Drain });
    assert_eq!(p.waits.len(), 1, "{:?}", p.waits);
    assert!(p.waits[0].contains("pull"), "{:?}", p.waits);
    assert_eq!(p.pause, Ok(vec!["a".into(), "b".into()]));

    let mut g = platform(serde_json::json!({"version": "2.3.2.1", "approval": "manual"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.step(&mut g, 0);
    let p = previewed(&g, &world, "2.3.2.2", 1);
    assert_eq!(p.verdict, preview::Verdict::Runs { next: Drain });
    assert_eq!(p.waits.len(), 1, "{:?}", p.waits);
    assert!(p.waits[0].contains("approv"), "{:?}", p.waits);
    // Nothing to pull (no pod on a node yet): nothing waited for.
    let mut g = platform(serde_json::json!({"version": "2.3.2.1"}));
    let mut world = World::new(Some(catalog()), Hub::new(&["a"], &[]));
    world.step(&mut g, 0);
    assert_eq!(
        previewed(&g, &world, "2.3.2.2", 1).waits,
        Vec::<String>::new()
    );
}

/// A module whose new image never comes up is rolled back once `stabilityTimeoutSeconds` have passed
/// since it was patched (the time its entry keeps), neither sooner nor later however often GKO looks.
#[test]
fn a_module_that_never_comes_up_is_rolled_back_at_its_timeout() {
    let (mut g, mut world) = drained_start(
        Hub::new(&[], &[]),
        serde_json::json!({"stabilityTimeoutSeconds": 60}),
    );
    world.until(&mut g, 1, CoreHub);
    world.step(&mut g, 2);
    world.roll_out(&g, &["core-hub", "agent-mssql"]);
    world.step(&mut g, 3);
    world.until(&mut g, 25, Modules);
    // chronos is patched; its pods stay on the old image.
    world.step(&mut g, 30);
    let chronos = planned(&g, "chronos");
    assert_eq!(chronos.state, ComponentState::Patched);
    let patched_at = chronos.patched_at.clone().expect("the time it was patched");
    let patched = patched_at.0.as_second() - at(0).0.as_second();
    assert!((25..=30).contains(&patched), "patched at {patched}");
    for now in [35, 50, patched + 59] {
        world.step(&mut g, now);
        let chronos = planned(&g, "chronos");
        assert_eq!(chronos.state, ComponentState::Patched, "at {now}");
        assert_eq!(
            chronos.patched_at.as_ref(),
            Some(&patched_at),
            "the time it was patched is kept"
        );
    }
    world.step(&mut g, patched + 61);
    let chronos = planned(&g, "chronos");
    assert_eq!(chronos.state, ComponentState::RollingBack);
    assert!(
        chronos.message.as_deref().is_some_and(|m| m.contains("60")),
        "{:?}",
        chronos.message
    );
}

/// The wait for a window says its start in UTC and, when every window is in the same time zone other
/// than UTC, in that zone's own time too (the time a user wrote the window in).
#[test]
fn a_window_wait_says_the_start_in_the_windows_own_time_zone() {
    let message = |windows| status(&waiting_for(windows).0).message.clone().unwrap();
    // 10:00 in Rome is 09:00 UTC in January; 2027-01-15 is a Friday.
    let rome = message(serde_json::json!([
        {"start": "10:00", "durationMinutes": 60, "timeZone": "Europe/Rome"}
    ]));
    assert!(
        rome.contains(
            "waits for the maintenance window at 2027-01-15 09:00 UTC (Fri 10:00 Europe/Rome)"
        ),
        "{rome}"
    );
    let utc = message(nine_to_ten());
    assert!(
        utc.contains("waits for the maintenance window at 2027-01-15 09:00 UTC")
            && !utc.contains("(Fri"),
        "no second time for UTC: {utc}"
    );
    // Windows in two zones (and one in UTC): the time in each zone, in the order the windows name them.
    let two = message(serde_json::json!([
        {"start": "10:00", "durationMinutes": 60, "timeZone": "Europe/Rome"},
        {"start": "09:00", "durationMinutes": 60, "timeZone": "UTC"},
        {"start": "04:00", "durationMinutes": 60, "timeZone": "America/New_York"}
    ]));
    assert!(
        two.contains(
            "waits for the maintenance window at 2027-01-15 09:00 UTC \
             (Fri 10:00 Europe/Rome, Fri 04:00 America/New_York)"
        ),
        "{two}"
    );
}
